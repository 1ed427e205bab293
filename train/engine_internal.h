/* train/ internals: the engine's state, shared by engine.c (building it), step.c (the
 * iteration) and run.c (the loop). Not part of the contract. */
#ifndef TR_ENGINE_INTERNAL_H
#define TR_ENGINE_INTERNAL_H

#include "data/data.h"
#include "dp/dp.h"
#include "pp/runner.h"
#include "train/train.h"
#include "train/world.h"

/* One model chunk of this stage: the whole stage (v = 1), or one of the v chunks of the
 * interleaved schedule (chunk c holds layer block c*P + stage). */
typedef struct {
    struct tr_engine *e;
    tr_gpt *model;
    size_t offset;              /* of its tensors in the flat buffers */
    tr_gpt_acts **slots;        /* [n_slots] activation slots */
    int *slot_busy;             /* [n_slots] */
    int *slot_of_mb;            /* [M], -1 when none */
} engine_chunk;

/* fp16 loss scaling (loss_scale.c): scale multiplies the backward's seed; skipped counts
 * the steps skipped for an overflow; growth / hysteresis_left: Megatron's trackers. */
typedef struct {
    int on, dynamic;
    double scale;
    int growth, hysteresis_left;
    long skipped;
    uint64_t skipped_samples; /* their global batches: a sample-based LR schedule counts
                               * consumed_samples - skipped_samples (Megatron's scheduler) */
} engine_scaler;
void engine_scaler_init(engine_scaler *s, const tr_training_config *t);
/* After the norm of the scaled gradients: 1 when this step is to be skipped (overflow). */
int engine_scaler_update(engine_scaler *s, const tr_training_config *t, int overflow);

struct tr_engine {
    const tr_config *cfg;
    const tr_kernels *k;
    train_world world;
    int stage, P, dp_rank, D;   /* this rank's pipeline stage and data-parallel coordinate */
    int cp_rank, CP;            /* context parallel: each sample's T tokens split over CP ranks
                                 * (T / CP each: the model's T); gradients summed over D x CP */
    tr_data *data;
    tr_pp_partition partition;
    tr_pp_schedule schedule;    /* this stage's op list for one iteration */
    int v;                      /* model chunks of this stage */
    engine_chunk *chunks;           /* [v]; chunk v-1 first in the flat buffers (backward order) */
    size_t n_params;
    float *params, *grads;      /* flat, n_params each */
    float *adam_m, *adam_v;     /* this rank's optimizer shard (ZeRO-1) or all of it */
    tr_dp *dp;                  /* gradient buckets, reduction, norm, shards */
    /* expert parallelism (EP > 1): a rank holds its EP rank's E / EP experts of each layer;
     * their gradients are reduced over the EDP group by xdp (over the expert ranges, which
     * dp excludes), with dp's 1 / D; xdp's Adam moments follow dp's in adam_m / adam_v */
    int EP;                     /* 1 without */
    tr_dp *xdp;
    tr_dp_range *expert_ranges;
    int n_expert_ranges;
    int zero;                   /* ZeRO stage in effect (0 when D == 1); >= 2: grads, 3: also
                                 * params are windows (train/zero.c) over compact shards */
    float *shard_grads, *shard_params; /* stage >= 2 / 3: tr_dp_shard_numel each */
    tr_dp_range *units;         /* stage 3: gather units (a layer, or one other tensor) */
    int n_units;
    int mb, T, M;               /* micro-batch size, sequence, micro-batches this iteration */
    int M_max;                  /* of the final global batch (slots, evaluation) */
    int batch;                  /* this iteration's global batch (training.rampup_batch_size:
                                 * Megatron's of consumed_samples; else global_batch_size) */
    tr_pp_kind kind;            /* the pipeline schedule's */
    float loss_scale;           /* d(rank-local mean loss)/d(token loss) */
    engine_scaler scaler;       /* fp16 loss scaling (loss_scale.c); scale 1 otherwise */
    int n_slots;                /* per chunk: in flight + one being received + one being sent */
    int released_mb, released_chunk; /* slot that frees at the next backward, or mb -1: its
                                 * input gradient may still be under send until then */
    int stored, stored_limit;   /* micro-batches forwarded but not yet backwarded (all chunks),
                                 * and the schedule's peak: more is an error (1F1B: P - stage) */
    int stored_peak;            /* the most seen over the run */
    int32_t *sample, *inputs, *targets; /* host staging, one micro-batch */
    double loss_sum;            /* last stage: sum of micro-batch losses this iteration */
    /* mixture of experts: this rank's layers' load-balancing losses summed over the
     * iteration's micro-batches, and the global batch's (Megatron's logged value: summed over
     * layers, averaged over micro-batches and data-parallel replicas) */
    double moe_balancing_sum, moe_balancing;
    /* data.dataset_type sft (engine_sft.c): the micro-batch's packing (host staging), the
     * last stage's sum of loss weights (loss_sum then sums weighted losses) */
    int sft;
    float *weights;
    int32_t *segments, *positions;
    double weight_sum;
    int split;                  /* the data split being run (train or validation) */
    uint64_t first_sample;      /* this rank's first sample of the current global batch */
    struct ckpt_async *pending_save; /* checkpoint.async_save: the save being written */
    /* the backend allocator's bytes taken by each part at creation (the planner's split);
     * 0 where the backend does not count (kernels.h bytes_in_use) */
    size_t mem_params, mem_grads, mem_optimizer, mem_activations;
    uint64_t consumed_samples;  /* training samples of the iterations done (Megatron's
                                 * consumed_train_samples): where the next global batch starts,
                                 * whatever global batch size earlier iterations had */
    /* gradient bookkeeping (ranges of the flat buffers) */
    tr_dp_range *tp_ranges, *embed_ranges, *norm_ranges;
    int n_tp_ranges, n_embed_ranges, n_norm_ranges;
    tr_pp_trace trace;
    int tracing;
};

/* The engine's dp/ instances in their order (gradients, moments, buckets): dp, then with
 * expert parallelism xdp (the experts' over EDP). */
static inline int engine_n_dp(const tr_engine *e) { return 1 + (e->xdp != NULL); }
static inline tr_dp *engine_dp_at(const tr_engine *e, int x) { return x ? e->xdp : e->dp; }

/* Expert parallelism: the dp/ instance reducing t's gradient (xdp for an expert's, else dp);
 * the elements of the Adam moments (dp's shard, then xdp's) and where t's dp's start; 1 if
 * this rank writes t's parameter into a checkpoint (its first replica: DP rank 0, or for an
 * expert EDP rank 0: DP ranks 0 .. EP-1; CP rank 0). */
tr_dp *engine_dp_of(const tr_engine *e, const tr_param_tensor *t);
size_t engine_moments_numel(const tr_engine *e);
size_t engine_moments_base(const tr_engine *e, const tr_dp *dp);
int engine_first_replica(const tr_engine *e, const tr_param_tensor *t);

/* Point every chunk's grad hook at dp/ (on) or nowhere (off, for forward-only passes). */
void engine_set_grad_hooks(tr_engine *e, int on);

/* train/zero.c: ZeRO-2/3 windows, shards, units, hooks (see there). */
float *zero_window_alloc(size_t n);
void zero_window_free(float *p, size_t n);
void zero_window_release(void *ctx, float *p, size_t count);
size_t zero_window_resident(void *ctx, const float *p, size_t count);
TR_MUST_CHECK int zero_units(tr_engine *e, tr_dp_range **out, int *n_out);
TR_MUST_CHECK int zero_setup(tr_engine *e);
TR_MUST_CHECK int zero_params_materialize(tr_engine *e);
TR_MUST_CHECK int zero_params_release(tr_engine *e, int keep);
/* Stage 3: every gather waited for and every bucket given back (both instances with EP). */
TR_MUST_CHECK int zero_release_all(tr_engine *e);

/* train/engine_sft.c: fine-tuning data (packed examples, loss weights). */
TR_MUST_CHECK int engine_sft_create(tr_engine *e);
void engine_sft_free(tr_engine *e);
/* The sample's packing into the staging arrays at row b of the micro-batch. */
TR_MUST_CHECK int engine_sft_sample(tr_engine *e, int split, uint64_t g, int b);
/* Context parallelism: the staged packing of the micro-batch compacted to this rank's two
 * chunks of each sample, as its tokens (data/data.h tr_cp_keep); nothing without SFT data. */
void engine_sft_keep_chunks(tr_engine *e);
/* Before an iteration's schedule: loss_scale = D CP / (loss weights of the global batch), the
 * weights' sum reduced over the last stages' D x CP ranks (world_grad_comm). */
TR_MUST_CHECK int engine_sft_begin(tr_engine *e);
/* After a stage's forward of a loaded micro-batch: its packing into the slot's activations;
 * the last stage's weighted loss into loss_sum / weight_sum. */
TR_MUST_CHECK int engine_sft_bind(tr_engine *e, tr_gpt_acts *a, const tr_gpt_shape *s);
void engine_sft_account(tr_engine *e, float mean_loss);
/* The job's loss: the last stages' weighted sums over their weights, one world all-reduce. */
TR_MUST_CHECK int engine_sft_loss(tr_engine *e, double sum, double weight, double *out);

/* The global batch of the iteration starting at consumed_samples: e->batch, e->M and, when M
 * changed, the stage's schedule rebuilt for it (step.c). */
TR_MUST_CHECK int engine_begin_batch(tr_engine *e);

/* Fill a slot's micro-batch tokens (inputs and targets of mb*T each). */
TR_MUST_CHECK int engine_load_micro_batch(tr_engine *e, int micro_batch, int32_t *inputs, int32_t *targets);

#endif
