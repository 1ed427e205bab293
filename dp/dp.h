/* dp/ — data parallelism on flat buffers: gradient buckets reduced asynchronously while
 * backward runs, skip-sync accumulation, the TP / embedding gradient all-reduces ("finalize"),
 * the global gradient norm, and ZeRO-1 (distributed optimizer) shards.
 *
 * Contract:
 *  - Buffers: the engine owns ONE contiguous fp32 gradient buffer and ONE fp32 parameter
 *    buffer of n elements each (host memory: the UCX communicator), same offsets, tensors in
 *    reverse forward order (model/'s layout: backward fills it front to back). dp/ never
 *    allocates or zeroes them and knows no tensors: it sees (offset, count) element ranges.
 *  - Buckets: [0, n) is cut at both ends of every `aligned` range given at creation, and
 *    each piece between cuts into buckets of bucket_size_mb MiB (mb * 2^20 / 4 elements),
 *    counted from the piece's start (its last bucket may be shorter). bucket_size_mb 0 or
 *    overlap_grad_reduce 0: one bucket per piece. A negative, NaN or infinite size, one
 *    below one element, or one giving more than TR_DP_MAX_BUCKETS buckets is TR_ERR_CONFIG;
 *    a size above n is one bucket.
 *  - Iteration: tr_dp_start(dp, M) opens an accumulation window of M micro-batches; the
 *    model's grad hook reports every final range of every micro-batch (tr_dp_grad_ready).
 *    A bucket is ready once M * count elements were reported into it (per-bucket counters;
 *    a report may straddle buckets), i.e. on the last micro-batch: skip-sync needs no flag
 *    and works with any schedule. With overlap_grad_reduce, ready buckets start their
 *    reduction at once (asynchronously, in bucket order: bucket b waits for b-1), so it runs
 *    while backward continues; without, tr_dp_finish() starts them. Earlier micro-batches
 *    only accumulate locally (the model's backward adds): no communication at all.
 *    tr_dp_finish() starts what is left and waits for every bucket. Gradients are averaged
 *    (x 1/D) in one place, on what the rank keeps of a bucket, as soon as its reduction is
 *    seen complete (at a report, in tr_dp_progress or in finish's wait).
 *    Reductions advance in the background when the communicator was made with
 *    progress_thread = 1; otherwise dp polls them (tr_comm_test) at every report and in
 *    tr_dp_progress().
 *  - Without ZeRO-1 a bucket is all-reduced: afterwards every rank holds the whole averaged
 *    gradient. With ZeRO-1 (use_distributed_optimizer, D > 1) it is reduce-scattered in
 *    place: bucket [o, o + c) is split into D blocks with tr_comm_block(c, D, d) and rank d
 *    keeps block d; its SHARD is the union of its block of every bucket, enumerated by
 *    tr_dp_shard_ranges() with each piece's place in a compact shard-sized buffer (Adam
 *    moments). Outside its shard the gradient buffer is scratch after tr_dp_finish(). After
 *    the optimizer step on the shard, tr_dp_gather_params_start() all-gathers every bucket of
 *    the parameters (async, last bucket first: forward needs the buffer's end first).
 *    ZeRO-1 with D = 1 is a logged no-op (shard = whole buffer).
 *  - Aligned ranges make ZeRO-1 shards of a range independent of where the range sits in
 *    the buffer: pass the tied-embedding range(s) there, so the first and the last pipeline
 *    stage own the same elements of wte and the embedding all-reduce of finalize adds
 *    matching shards. TP peers must have identical n and aligned ranges (equal shards).
 *  - Every collective of dp/ on the DP group is issued in the same order on every member;
 *    D = 1 (dp_comm NULL or of size 1) issues none.
 *  - Errors inside the hook (which returns void) are kept and returned by tr_dp_finish().
 *  - Engine sequence per iteration: zero the gradients; tr_dp_start(dp, M); M x forward +
 *    backward (tr_gpt_set_grad_hook(g, tr_dp_grad_ready, dp)); tr_dp_finish;
 *    tr_dp_finalize_grads; tr_dp_grad_norm; tr_dp_clip_factor; AdamW per tensor over
 *    tr_dp_shard_foreach (moments compact, tr_dp_shard_numel long; grad_scale = the clip
 *    factor only: the 1/D is done); tr_dp_gather_params_start; tr_dp_gather_params_wait
 *    (or _wait_range) before the next forward reads the parameters.
 *  - Timestamps (tr_now() seconds) of each bucket's start and observed end are kept for the
 *    trace; the end is when dp saw completion (polled at each report and in finish).
 *  - ZeRO stages (zero_stage, DeepSpeed's numbers; distributed_optimizer = stage 1; with
 *    D = 1 every stage is stage 0). Stage 1 is the ZeRO-1 above. Stage 2: each bucket is
 *    reduce-scattered, on the last micro-batch as above, OUT of the flat gradient buffer
 *    into a compact shard-sized gradient buffer (tr_dp_set_shards; tr_dp_shard_grads), and
 *    the bucket's range of the flat buffer is handed to cfg->release at once (the engine
 *    frees its pages: afterwards the range reads as zeros, so the next window starts from
 *    zero without a memset). finalize, the norm and AdamW read the compact buffer. Stage 3:
 *    the parameters too live in a compact shard buffer (tr_dp_shard_params) and the flat
 *    parameter buffer is a window filled on demand: tr_dp_params_need(range) all-gathers
 *    the buckets covering the range (waits), tr_dp_params_prefetch starts them without
 *    waiting, tr_dp_params_done releases them. Stage 3 buckets must be cut at every gather
 *    unit (pass the units as the aligned ranges). The calls of every DP member come in the
 *    same order (the same schedule over the same model), so the collectives match. */
#ifndef TR_DP_H
#define TR_DP_H

#include <stddef.h>

#include "comm/comm.h"
#include "kernels/kernels.h"
#include "yaml/config.h"

#define TR_DP_MAX_BUCKETS 65536

typedef struct {
    size_t offset, count; /* elements of the flat buffer */
} tr_dp_range;

typedef struct {
    size_t offset, count;  /* elements of the flat buffer this rank owns */
    size_t shard_offset;   /* where they sit in a compact shard-sized buffer */
} tr_dp_shard_range;

typedef struct {
    double bucket_size_mb;   /* parallel.ddp_bucket_size_mb (MiB of fp32); 0 = one bucket */
    int overlap_grad_reduce; /* parallel.overlap_grad_reduce: start buckets during backward */
    int distributed_optimizer; /* parallel.use_distributed_optimizer: ZeRO-1 */
    int zero_stage;            /* 0-3; the stage is max(zero_stage, distributed_optimizer) */
    /* stage >= 2: frees the pages of [p, p + count) of a flat buffer, which then reads as
     * zeros; NULL = memset to zero (no memory given back) */
    void (*release)(void *ctx, float *p, size_t count);
    /* optional: bytes of [p, p + count) that hold memory now (pages resident); when given,
     * the gradient peak of tr_dp_zero_stats is this measured on the gradient buffer at every
     * report (before anything is given back), else the bytes of the buckets reported and not
     * yet reduced. The parameter peak is always the bytes of the buckets gathered or being
     * gathered at once (what a device allocator would hold; a gather's pages fill as the
     * communicator progresses, so their residency depends on timing) */
    size_t (*resident)(void *ctx, const float *p, size_t count);
    void *release_ctx;
    const tr_dp_range *aligned; /* ranges cut out of bucketing (tied embeddings); may be NULL */
    size_t n_aligned;
    /* ranges that are not this instance's (another tr_dp over another group reduces them:
     * expert parallelism's experts, or everything but them): no bucket covers them, reports
     * into them are ignored, its shard (ZeRO-1 or not) and the norm, finalize and
     * shard_foreach pieces leave them out; they may not overlap an aligned range */
    const tr_dp_range *excluded;
    size_t n_excluded;
    /* the gradients' average divides the sum by this (0: D, the group's size); expert
     * parallelism's experts are summed over D / EP ranks that hold every rank's tokens'
     * share: still 1 / D, applied at D / EP == 1 too */
    int average_over;
    const tr_kernels *kernels; /* scale / sumsq / copy; NULL = the CPU table */
} tr_dp_config;

typedef struct {
    size_t offset, count;  /* the bucket */
    size_t own_offset, own_count; /* what this rank keeps (ZeRO-1 block; else the bucket) */
    double t_start, t_end; /* tr_now() of the last start / observed end; 0 = not yet */
    int started_by_report; /* 1: started by a report during backward, 0: by tr_dp_finish */
} tr_dp_bucket_info;

typedef struct {
    double t_finish_begin, t_finish_end; /* the last tr_dp_finish() */
    double exposed_s;    /* t_finish_end - t_finish_begin: reduction not hidden by backward */
    int buckets_started_by_report;       /* in the last window */
} tr_dp_timing;

typedef struct tr_dp tr_dp;

/* ZeRO-2/3 accounting since creation: bytes of the flat buffers held at once (stage 2/3
 * gradient buckets touched and not yet reduced; stage 3 parameter buckets gathered or being
 * gathered), their peaks (see tr_dp_config.resident), and stage 3's gathers: how many, and
 * the seconds spent waiting for them in tr_dp_params_need (what prefetch did not hide). */
typedef struct {
    size_t grad_live_bytes, grad_live_peak_bytes;
    size_t param_resident_bytes, param_resident_peak_bytes;
    long gathers, gathers_waited; /* started; found still in flight when needed */
    double gather_wait_s;
} tr_dp_zero_stats;

/* The config's parallel section (its defaults are the schema's, yaml/schema.c) as a dp
 * config; aligned ranges and kernels left empty. */
tr_dp_config tr_dp_config_from_parallel(const tr_parallel_config *p);

/* grads/params: the engine's flat buffers of n >= 1 floats. dp_comm: the data-parallel
 * group (NULL = D 1). Bad sizes or ranges: TR_ERR_INVALID / TR_ERR_CONFIG with the reason. */
TR_MUST_CHECK int tr_dp_create(const tr_dp_config *cfg, tr_comm *dp_comm, float *grads, float *params,
                 size_t n, tr_dp **out);
/* Waits for anything still in flight (errors ignored), then frees; call it before the
 * communicator is destroyed. NULL is a no-op. */
void tr_dp_free(tr_dp *dp);

/* Pure layout: the number of buckets and rank d's shard size (elements) for these settings;
 * no buffers or communicator needed (planning, benchmarks). */
TR_MUST_CHECK int tr_dp_layout(const tr_dp_config *cfg, size_t n, int dp_size, int dp_rank,
                 int *n_buckets, size_t *shard_numel);

int tr_dp_size(const tr_dp *dp);
int tr_dp_rank(const tr_dp *dp);
int tr_dp_sharded(const tr_dp *dp); /* 1 when ZeRO-1 is in effect (requested and D > 1) */
int tr_dp_zero_stage(const tr_dp *dp); /* the stage in effect: 0 when D == 1 */
void tr_dp_get_zero_stats(const tr_dp *dp, tr_dp_zero_stats *out);
int tr_dp_num_buckets(const tr_dp *dp);
TR_MUST_CHECK int tr_dp_bucket(const tr_dp *dp, int b, tr_dp_bucket_info *out);
void tr_dp_get_timing(const tr_dp *dp, tr_dp_timing *out);

/* ---------------------------------------------------------------- one iteration */

/* Open an accumulation window of num_microbatches >= 1. Fails if the previous window's
 * reductions were not finished. Does not touch the buffers. */
TR_MUST_CHECK int tr_dp_start(tr_dp *dp, int num_microbatches);
/* [offset, offset + count) got its last contribution of one micro-batch. Checked form. */
TR_MUST_CHECK int tr_dp_report(tr_dp *dp, size_t offset, size_t count);
/* The same with the model's hook signature (ctx = the tr_dp); an error is kept for finish. */
void tr_dp_grad_ready(void *dp, size_t offset, size_t count);
/* Advance the reductions in flight without blocking (one tr_comm_test each; records their
 * end times). Reports already do this; an engine whose communicator has no progress thread
 * may call it between kernels too, so reductions move on more often than once per layer. */
TR_MUST_CHECK int tr_dp_progress(tr_dp *dp);
/* Start the buckets not started yet, wait for all, average over D. Afterwards the gradient
 * is final on this rank's shard (the whole buffer without ZeRO-1). */
TR_MUST_CHECK int tr_dp_finish(tr_dp *dp);

/* After tr_dp_finish(): gradients of parameters replicated over TP (under sequence
 * parallelism partial per TP rank) are all-reduced over tp_comm, tied embeddings over
 * emb_comm; each list packed into one scratch so each group costs ONE all-reduce (a lone
 * contiguous range goes in place). Either comm may be NULL (nothing to do). With ZeRO-1
 * only this rank's shard of each range is reduced, and every embedding range must be one
 * of the aligned ranges. Peers must pass matching lists. */
TR_MUST_CHECK int tr_dp_finalize_grads(tr_dp *dp, tr_comm *tp_comm, const tr_dp_range *tp_ranges,
                         size_t n_tp, tr_comm *emb_comm, const tr_dp_range *emb_ranges,
                         size_t n_emb);

/* Global L2 norm of the gradient: sum of squares (double) of the ranges this rank counts
 * (disjoint; each parameter counted by exactly one rank of norm_comm per element), with
 * ZeRO-1 only their part in this rank's shard; one all-reduce of one double over norm_comm
 * (the model-parallel group without ZeRO-1, the world with it; NULL = this rank alone);
 * sqrt. Bit-identical on every member of norm_comm. */
TR_MUST_CHECK int tr_dp_grad_norm(tr_dp *dp, const tr_dp_range *ranges, size_t n_ranges,
                    tr_comm *norm_comm, double *norm_out);
/* Megatron's clipping factor: min(1, max_norm / (norm + 1e-6)); 1 when max_norm <= 0 or
 * the norm is not finite (the caller decides what a NaN / Inf norm means). */
float tr_dp_clip_factor(double norm, double max_norm);

/* ---------------------------------------------------------------- ZeRO-1 shard */

/* This rank's shard in increasing offset order (one range [0, n) without ZeRO-1). */
size_t tr_dp_shard_numel(const tr_dp *dp);
const tr_dp_shard_range *tr_dp_shard_ranges(const tr_dp *dp, size_t *n_ranges);
/* fn(ctx, offset, count, shard_offset) for each piece of [offset, offset + count) this rank
 * owns, in order (e.g. per tensor: AdamW with that tensor's weight decay). */
TR_MUST_CHECK int tr_dp_shard_foreach(const tr_dp *dp, size_t offset, size_t count,
                        void (*fn)(void *ctx, size_t offset, size_t count,
                                   size_t shard_offset),
                        void *ctx);

/* After the step on the shard: all-gather the parameters, one async all-gather per bucket
 * (no-op without ZeRO-1). Wait before the parameters are read: all of them, or only the
 * buckets covering a range (forward may start on the buffer's end first). */
TR_MUST_CHECK int tr_dp_gather_params_start(tr_dp *dp);
TR_MUST_CHECK int tr_dp_gather_params_wait(tr_dp *dp);
TR_MUST_CHECK int tr_dp_gather_params_wait_range(tr_dp *dp, size_t offset, size_t count);

/* ---------------------------------------------------------------- ZeRO-2/3 (dp/zero.c) */

/* Stage 2: grads (stage 3: and params) are compact buffers of tr_dp_shard_numel floats the
 * engine allocated; call once after tr_dp_create. Other stages ignore them. */
TR_MUST_CHECK int tr_dp_set_shards(tr_dp *dp, float *shard_grads, float *shard_params);
float *tr_dp_shard_grads(const tr_dp *dp);  /* NULL below stage 2 */
float *tr_dp_shard_params(const tr_dp *dp); /* NULL below stage 3 */
/* Stage 3 (no-ops otherwise): all-gather the buckets covering the range into the flat
 * parameter buffer and wait / start without waiting / release them. */
TR_MUST_CHECK int tr_dp_params_need(tr_dp *dp, size_t offset, size_t count);
TR_MUST_CHECK int tr_dp_params_prefetch(tr_dp *dp, size_t offset, size_t count);
TR_MUST_CHECK int tr_dp_params_done(tr_dp *dp, size_t offset, size_t count);
/* Stage 3: wait for every gather in flight and release every bucket (end of a pass). */
TR_MUST_CHECK int tr_dp_params_release_all(tr_dp *dp);
/* Stage 3: copy this rank's blocks of the range of the flat parameter buffer into the
 * compact shard (after initialising or loading the range there). */
TR_MUST_CHECK int tr_dp_params_keep_own(tr_dp *dp, size_t offset, size_t count);

#endif
