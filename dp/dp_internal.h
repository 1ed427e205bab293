/* dp/ internal: the tr_dp object shared by layout.c, reduce.c, finalize.c and shard.c. */
#ifndef TR_DP_INTERNAL_H
#define TR_DP_INTERNAL_H

#include "dp/dp.h"

typedef struct {
    size_t offset, count;         /* the bucket, elements of the flat buffers */
    size_t own_offset, own_count; /* this rank's block (ZeRO-1) or the whole bucket */
    size_t reported;              /* elements reported in the open window (all micro-batches) */
    int ready;                    /* reported == window's micro-batches * count */
    int started;                  /* reduction started in this window */
    int by_report;                /* started from a report (during backward) */
    int scaled;                   /* reduced and averaged (1/D) in this window */
    tr_comm_request *req;         /* gradient reduction in flight */
    tr_comm_request *gather_req;  /* parameter all-gather in flight (ZeRO-1, stage 3) */
    size_t shard_offset;          /* of the own block in the compact shard buffers */
    int live;                     /* stage >= 2: touched in this window, not yet released */
    int resident;                 /* stage 3: parameters gathered (or in flight), not released */
    double t_start, t_end;
} dp_bucket;

struct tr_dp {
    const tr_kernels *k;
    tr_comm *comm; /* NULL when D == 1 */
    int D, d;
    int overlap, sharded;
    int stage;          /* ZeRO stage in effect (0 when D == 1) */
    float *shard_grads, *shard_params; /* stage >= 2 / stage 3: compact, shard_numel */
    void (*release)(void *ctx, float *p, size_t count);
    size_t (*resident)(void *ctx, const float *p, size_t count);
    void *release_ctx;
    tr_dp_zero_stats zs;
    float *grads, *params;
    size_t n;
    tr_dp_range *aligned; /* sorted by offset */
    size_t n_aligned;
    size_t n_excluded;    /* ranges without buckets (tr_dp_config.excluded) */
    int avg;              /* the average's divisor (tr_dp_config.average_over, else D) */

    dp_bucket *b;
    int nb;
    tr_dp_shard_range *shard; /* this rank's pieces, increasing offset */
    size_t n_shard, shard_numel;

    /* the accumulation window */
    int open;          /* between tr_dp_start and tr_dp_finish */
    size_t mb;         /* micro-batches of the window */
    int next_start;    /* buckets < next_start have been started, in order */
    int next_unfinished; /* buckets < next_unfinished have been seen complete */
    int hint;          /* bucket of the last report (reports arrive front to back) */
    int warned_partial;

    /* first error inside the hook, returned by tr_dp_finish */
    int err;
    char errmsg[512];

    tr_dp_timing timing;
    float *scratch; /* packing for finalize: backend memory (k->alloc), like the gradients */
    size_t scratch_cap;
};

/* Keep the first error (code and the thread's message) for tr_dp_finish; returns code. */
int dp_keep_error(tr_dp *dp, int code);
/* Wait for every request still in flight (gradients and parameters), errors ignored. */
void dp_drain(tr_dp *dp);
/* Where the gradient of flat element `off` (shard position shard_off) lives after the
 * reduction: the compact shard buffer at stage >= 2, else the flat buffer. */
static inline float *dp_grad(const tr_dp *dp, size_t off, size_t shard_off)
{
    return dp->shard_grads ? dp->shard_grads + shard_off : dp->grads + off;
}
/* Stage >= 2: bucket i's flat gradient range is reduced: give its pages back. */
void dp_release_grads(tr_dp *dp, int i);
/* Stage >= 2: measure the gradient window's pages held now (cfg->resident). */
void dp_sample_window(tr_dp *dp);
/* Stage >= 2: a report touched bucket i in this window. */
void dp_grads_live(tr_dp *dp, int i);
/* Check [offset, offset + count) lies in the buffer; `what` names the argument. */
int dp_check_range(const tr_dp *dp, size_t offset, size_t count, const char *what, size_t i);

#endif
