/* One training iteration of one rank: the pipeline schedule over this stage's micro-batches,
 * gradient reduction across data-parallel replicas, finalisation of replicated gradients,
 * global-norm clipping and AdamW; and forward-only evaluation. */
#include "train/engine_internal.h"

#include <math.h>
#include <string.h>

#include "core/core.h"

/* ---- activation slots: one per in-flight micro-batch of each chunk ---- */

static tr_gpt_acts *slot_acquire(tr_engine *e, int chunk, int mb)
{
    engine_chunk *ch = &e->chunks[chunk];
    if (ch->slot_of_mb[mb] >= 0)
        return ch->slots[ch->slot_of_mb[mb]];
    for (int s = 0; s < e->n_slots; s++)
        if (!ch->slot_busy[s]) {
            ch->slot_busy[s] = 1;
            ch->slot_of_mb[mb] = s;
            return ch->slots[s];
        }
    tr_fail(TR_ERR_INTERNAL, "stage %d chunk %d: more than %d micro-batches in flight", e->stage,
            chunk, e->n_slots);
    return NULL;
}

static void slot_release(tr_engine *e, int chunk, int mb)
{
    engine_chunk *ch = &e->chunks[chunk];
    int s = ch->slot_of_mb[mb];
    if (s >= 0) {
        ch->slot_busy[s] = 0;
        ch->slot_of_mb[mb] = -1;
    }
}

static void slots_reset(tr_engine *e)
{
    e->released_mb = -1;
    for (int c = 0; c < e->v; c++) {
        for (int s = 0; s < e->n_slots; s++)
            e->chunks[c].slot_busy[s] = 0;
        for (int m = 0; m < e->M_max; m++)
            e->chunks[c].slot_of_mb[m] = -1;
    }
}

/* ---- the stage as the pipeline runner sees it ---- */

static float *stage_input_buffer(void *ctx, int mb, int chunk)
{
    tr_gpt_acts *a = slot_acquire(ctx, chunk, mb);
    return a ? tr_gpt_acts_input_buffer(a) : NULL;
}

static float *stage_output_grad_buffer(void *ctx, int mb, int chunk)
{
    tr_engine *e = ctx;
    engine_chunk *ch = &e->chunks[chunk];
    int s = ch->slot_of_mb[mb];
    return s >= 0 ? tr_gpt_acts_output_grad_buffer(ch->slots[s]) : NULL;
}

static int stage_forward(tr_engine *e, int chunk, int mb, float grad_scale, const float **output)
{
    tr_gpt *model = e->chunks[chunk].model;
    const tr_gpt_shape *s = tr_gpt_get_shape(model);
    tr_gpt_acts *a = slot_acquire(e, chunk, mb);
    if (!a)
        return TR_ERR_INTERNAL;
    if (s->is_first || s->is_last || e->sft) { /* sft: every stage needs the segments */
        int rc = engine_load_micro_batch(e, mb, e->inputs, e->targets);
        if (!rc && e->sft)
            rc = engine_sft_bind(e, a, s);
        if (rc)
            return rc;
    }
    /* MoE: the aux losses of each micro-batch weigh 1 / M (times the fp16 loss scale) on every
     * stage, as Megatron's MoEAuxLossAutoScaler; none in evaluation */
    tr_gpt_acts_set_moe_aux_weight(a, grad_scale != 0.0f ? (float)e->scaler.scale / (float)e->M
                                                         : 0.0f);
    /* LoRA dropout: on while training, keyed by the micro-batch's samples (layout-free) */
    tr_gpt_acts_set_dropout(a, e->split == TR_SPLIT_TRAIN, e->first_sample + (uint64_t)mb * e->mb);
    float loss = 0;
    int rc = tr_gpt_forward(model, a, s->is_first ? e->inputs : NULL,
                            s->is_first ? NULL : tr_gpt_acts_input_buffer(a),
                            s->is_last ? e->targets : NULL, grad_scale,
                            s->is_last ? &loss : NULL);
    if (rc)
        return rc;
    if (e->sft && s->is_last)
        engine_sft_account(e, loss); /* loss_sum += weighted sum of the token losses */
    else
        e->loss_sum += loss;
    if (e->split == TR_SPLIT_TRAIN) /* (0 without experts) */
        e->moe_balancing_sum += tr_gpt_acts_moe_loss(a, TR_GPT_MOE_BALANCING);
    if (output)
        *output = s->is_last ? NULL : tr_gpt_acts_output(a);
    return TR_OK;
}

static int train_forward(void *ctx, int mb, int chunk, const float **output)
{
    tr_engine *e = ctx;
    /* the activations of this micro-batch stay stored until its backward: never more of
     * them than the schedule's peak (1F1B: P - stage, whatever M is; GPipe: M) */
    if (++e->stored > e->stored_limit)
        return tr_fail(TR_ERR_INTERNAL,
                       "stage %d: %d micro-batches' activations stored at once; the %s schedule "
                       "keeps at most %d", e->stage, e->stored,
                       tr_pp_kind_name(e->schedule.kind), e->stored_limit);
    if (e->stored > e->stored_peak)
        e->stored_peak = e->stored;
    return stage_forward(e, chunk, mb, e->loss_scale * (float)e->scaler.scale, output);
}

static int train_backward(void *ctx, int mb, int chunk, int is_last_backward,
                          const float **input_grad)
{
    (void)is_last_backward;
    tr_engine *e = ctx;
    /* the runner has completed every send before this backward: the slot whose input
     * gradient was being sent is free now */
    if (e->released_mb >= 0)
        slot_release(e, e->released_chunk, e->released_mb);
    e->released_mb = -1;
    engine_chunk *ch = &e->chunks[chunk];
    int s = ch->slot_of_mb[mb];
    if (s < 0)
        return tr_fail(TR_ERR_INTERNAL, "stage %d: backward of micro-batch %d before its forward",
                       e->stage, mb);
    tr_gpt_acts *a = ch->slots[s];
    const tr_gpt_shape *sh = tr_gpt_get_shape(ch->model);
    e->stored--;
    int rc = tr_gpt_backward(ch->model, a, sh->is_last ? NULL : tr_gpt_acts_output_grad_buffer(a));
    if (rc)
        return rc;
    *input_grad = sh->is_first ? NULL : tr_gpt_acts_input_grad(a);
    /* its input gradient goes out now and must stay untouched until the next backward
     * (the runner's guarantee): neither a receive nor the last stage's head may reuse the
     * slot before then */
    e->released_mb = mb;
    e->released_chunk = chunk;
    return TR_OK;
}

/* Every TP collective of the schedule complete (the host had waited for none on NCCL):
 * a failure or timeout of one is reported here, within the iteration, naming the group. */
static int engine_flush_tp(tr_engine *e)
{
    int rc = e->world.tp ? tr_comm_flush(e->world.tp) : TR_OK;
    return rc ? tr_fail_context(rc, "stage %d: tensor-parallel collectives", e->stage) : TR_OK;
}

/* ---- gradient reduction and finalisation ---- */

/* After the schedule: the data-parallel buckets (most already reduced during backward),
 * then the TP (sequence parallel) and tied-embedding all-reduces, in dp/'s one place. */
static int reduce_gradients(tr_engine *e)
{
    int rc = tr_dp_finish(e->dp), rc2 = e->xdp ? tr_dp_finish(e->xdp) : TR_OK;
    if (!rc)
        rc = rc2;
    if (!rc)
        rc = tr_dp_finalize_grads(e->dp, e->n_tp_ranges ? e->world.tp : NULL, e->tp_ranges,
                                  (size_t)e->n_tp_ranges, e->n_embed_ranges ? e->world.embed : NULL,
                                  e->embed_ranges, (size_t)e->n_embed_ranges);
    return rc;
}

/* The mean loss of the global batch, known on every rank: the last stages' local means
 * averaged over data-parallel replicas and context-parallel ranks (each holds T / CP tokens of
 * every sample: one contribution per (replica, cp rank): tp rank 0). */
static int global_loss(tr_engine *e, double local_mean, double *out)
{
    const tr_gpt_shape *s = tr_gpt_get_shape(e->chunks[e->v - 1].model);
    double v = s->is_last && e->world.groups.coords.tp == 0 ? local_mean / (e->D * e->CP) : 0.0;
    int rc = tr_comm_allreduce(e->world.world, &v, &v, 1, TR_COMM_F64, TR_COMM_SUM);
    *out = v;
    return rc;
}

/* Whether the model reports a load-balancing loss (experts with the aux_loss balancing). */
static int moe_balancing_on(const tr_engine *e)
{
    const tr_model_config *m = &e->cfg->model;
    return m->num_experts > 0 && (!m->moe_router_load_balancing_type ||
                                  strcmp(m->moe_router_load_balancing_type, "none"));
}

/* The global batch's load-balancing loss: every stage's layers (TP rank 0 of each) summed,
 * averaged over the M micro-batches and the data-parallel replicas. */
static int moe_balancing(tr_engine *e)
{
    double v = e->world.groups.coords.tp == 0 ? e->moe_balancing_sum / ((double)e->M * e->D) : 0;
    int rc = tr_comm_allreduce(e->world.world, &v, &v, 1, TR_COMM_F64, TR_COMM_SUM);
    e->moe_balancing = v;
    return rc;
}

/* The trace's data-parallel spans: each bucket's reduction from its start to when dp saw it
 * complete, and the wait after backward (what backward did not hide). */
static void trace_grad_reductions(tr_engine *e)
{
    if (e->D * e->CP < 2)
        return;
    for (int x = 0, id = 0; x < engine_n_dp(e); x++) { /* EP: the experts' buckets next */
        const tr_dp *dp = engine_dp_at(e, x);
        for (int b = 0; b < tr_dp_num_buckets(dp); b++, id++) {
            tr_dp_bucket_info bi;
            if (tr_dp_bucket(dp, b, &bi) == TR_OK && bi.t_start > 0)
                tr_pp_trace_add(&e->trace, TR_PP_SPAN_GRAD_REDUCE, id, bi.t_start,
                                bi.t_end > bi.t_start ? bi.t_end : bi.t_start);
        }
    }
    tr_dp_timing t, xt = {0};
    tr_dp_get_timing(e->dp, &t);
    if (e->xdp) /* finished after dp's */
        tr_dp_get_timing(e->xdp, &xt);
    if (t.t_finish_begin > 0)
        tr_pp_trace_add(&e->trace, TR_PP_SPAN_GRAD_WAIT, 0, t.t_finish_begin,
                        xt.t_finish_end > t.t_finish_end ? xt.t_finish_end : t.t_finish_end);
}

int engine_begin_batch(tr_engine *e)
{
    const tr_training_config *t = &e->cfg->training;
    int batch = tr_training_batch_at(t, e->consumed_samples), M = batch / (e->mb * e->D);
    if (batch % (e->mb * e->D) || M < 1 || M > e->M_max) /* world.c checked the ramp's steps */
        return tr_fail(TR_ERR_INTERNAL, "global batch %d after %llu samples: not %d to %d "
                       "micro-batches of %d x data-parallel %d", batch,
                       (unsigned long long)e->consumed_samples, 1, e->M_max, e->mb, e->D);
    e->batch = batch;
    /* the loss of the iteration is the mean over its own samples' tokens */
    e->loss_scale = 1.0f / ((float)M * (float)e->mb * (float)(e->T / e->CP));
    if (M == e->M)
        return TR_OK;
    tr_pp_schedule s;
    int rc = tr_pp_schedule_build(e->P, e->stage, M, e->kind, e->v, &s);
    if (rc)
        return tr_fail_context(rc, "%s: the pipeline schedule of a global batch of %d",
                               tr_config_where(e->cfg, "training.rampup_batch_size"), batch);
    tr_pp_schedule_free(&e->schedule);
    e->schedule = s;
    e->M = M;
    e->stored_limit = tr_pp_peak_activations(&e->schedule);
    return TR_OK;
}

int tr_engine_forward_backward(tr_engine *e, int iteration, double *loss_out)
{
    (void)iteration;
    int rc = engine_begin_batch(e);
    if (rc)
        return rc;
    if (e->zero < 2) /* ZeRO-2/3: every reduced bucket's window was given back as zeros */
        e->k->zero(NULL, e->grads, e->n_params * sizeof(float));
    else if (e->xdp && tr_dp_zero_stage(e->xdp) < 2) /* (experts over an EDP of one rank) */
        for (int i = 0; i < e->n_expert_ranges; i++)
            e->k->zero(NULL, e->grads + e->expert_ranges[i].offset,
                       e->expert_ranges[i].count * sizeof(float));
    e->split = TR_SPLIT_TRAIN;
    e->first_sample = e->consumed_samples + (uint64_t)e->dp_rank * (uint64_t)(e->batch / e->D);
    e->loss_sum = 0;
    e->weight_sum = 0;
    e->moe_balancing_sum = 0;
    e->stored = 0;
    slots_reset(e);
    tr_pp_stage_ops ops = {
        .ctx = e,
        .numel = tr_gpt_hidden_numel(e->chunks[0].model, e->mb),
        .input_buffer = stage_input_buffer,
        .output_grad_buffer = stage_output_grad_buffer,
        .forward = train_forward,
        .backward = train_backward,
    };
    if (e->tracing)
        tr_pp_trace_clear(&e->trace);
    rc = e->sft ? engine_sft_begin(e) : TR_OK; /* the loss scale: 1 / learned tokens */
    if (!rc)
        rc = tr_dp_start(e->dp, e->M);
    if (!rc && e->xdp)
        rc = tr_dp_start(e->xdp, e->M);
    if (!rc)
        rc = tr_pp_run(&e->schedule, e->world.pp, &ops, e->tracing ? &e->trace : NULL);
    if (!rc) /* the TP collectives the host did not wait for (comm.h's ordered requests) */
        rc = engine_flush_tp(e);
    if (!rc) /* ZeRO-3: prefetches nobody used */
        rc = zero_release_all(e);
    if (!rc)
        rc = reduce_gradients(e);
    if (!rc && e->tracing)
        trace_grad_reductions(e);
    if (!rc)
        rc = e->sft ? engine_sft_loss(e, e->loss_sum, e->weight_sum, loss_out)
                    : global_loss(e, e->loss_sum / e->M, loss_out);
    if (!rc && moe_balancing_on(e))
        rc = moe_balancing(e);
    return rc;
}

typedef struct {
    tr_engine *e;
    const tr_dp *dp; /* the tensor's instance (expert parallelism: xdp for an expert's) */
    const tr_param_tensor *t;
    float lr, grad_scale;
    int step;
    size_t base; /* of the instance's shard in the moments */
} adamw_ctx;

/* AdamW on one piece of a tensor that this rank owns (its ZeRO-1 shard, or all of it). */
static void adamw_piece(void *ctx, size_t offset, size_t count, size_t shard_offset)
{
    adamw_ctx *c = ctx;
    const tr_training_config *t = &c->e->cfg->training;
    /* ZeRO-2: the reduced gradient is in the compact shard; ZeRO-3: the parameters too */
    float *sp = tr_dp_shard_params(c->dp), *sg = tr_dp_shard_grads(c->dp);
    float *p = sp ? sp + shard_offset : c->e->params + offset;
    float *g = sg ? sg + shard_offset : c->e->grads + offset;
    c->e->k->adamw(NULL, p, g, c->e->adam_m + c->base + shard_offset,
                   c->e->adam_v + c->base + shard_offset, count, c->lr, (float)t->adam_beta1,
                   (float)t->adam_beta2, (float)t->adam_eps,
                   c->t->weight_decay ? (float)t->weight_decay : 0.0f, c->grad_scale, c->step);
}

int tr_engine_optimizer_step(tr_engine *e, int iteration, tr_step_stats *stats)
{
    const tr_training_config *t = &e->cfg->training;
    double t_start = tr_now();
    /* each parameter counted once: over the model-parallel group, or over the world when
     * ZeRO-1 spreads the gradient over data-parallel ranks */
    double norm = 0;
    int rc = tr_dp_grad_norm(e->dp, e->norm_ranges, (size_t)e->n_norm_ranges,
                             tr_dp_sharded(e->dp) ? e->world.world : e->world.mp, &norm);
    if (!rc && e->xdp) { /* the experts': each counted once over the world (EDP rank 0's, or
                          * every EDP rank's ZeRO-1 shard), so an overflow anywhere is seen */
        double x = 0;
        int counts = tr_dp_sharded(e->xdp) || tr_comm_rank(e->world.edp) == 0;
        rc = tr_dp_grad_norm(e->xdp, e->norm_ranges, counts ? (size_t)e->n_norm_ranges : 0,
                             e->world.world, &x);
        norm = sqrt(norm * norm + x * x);
    }
    if (rc)
        return rc;
    /* fp16: the norm of the scaled gradients; an overflow skips the step on every rank */
    double scale = e->scaler.scale;
    /* the optimizer step this is: a skipped iteration advances neither Adam's step count nor
     * the learning-rate schedule (Megatron steps its scheduler only after a successful update) */
    int step = iteration - (int)e->scaler.skipped;
    int skip = engine_scaler_update(&e->scaler, t, !isfinite(norm));
    if (!skip && !isfinite(norm))
        return tr_fail(TR_ERR_INVALID, "iteration %d: the gradient norm is %g (training diverged)",
                       iteration, norm);
    norm /= scale;
    /* sample-based: Megatron's scheduler counts the samples of the steps taken, this one's
     * global batch included (the LR it logs for this iteration) */
    uint64_t lr_samples = e->consumed_samples + (uint64_t)e->batch - e->scaler.skipped_samples;
    double lr = tr_lr_of_step(t, step, lr_samples);
    adamw_ctx c = {.e = e, .lr = (float)lr,
                   .grad_scale = (float)(tr_dp_clip_factor(norm, t->clip_grad) / scale),
                   .step = step};
    for (int ci = 0; ci < e->v && !rc && !skip; ci++) {
        engine_chunk *ch = &e->chunks[ci];
        for (int i = 0; i < tr_gpt_num_tensors(ch->model) && !rc; i++) {
            c.t = tr_gpt_tensor(ch->model, i);
            tr_dp *dp = engine_dp_of(e, c.t);
            c.dp = dp;
            c.base = engine_moments_base(e, dp);
            rc = tr_dp_shard_foreach(dp, ch->offset + c.t->offset, c.t->numel, adamw_piece, &c);
        }
    }
    if (!rc)
        rc = tr_dp_gather_params_start(e->dp);
    if (!rc && e->xdp)
        rc = tr_dp_gather_params_start(e->xdp);
    if (!rc)
        rc = tr_dp_gather_params_wait(e->dp);
    if (!rc && e->xdp)
        rc = tr_dp_gather_params_wait(e->xdp);
    if (e->tracing)
        tr_pp_trace_add(&e->trace, TR_PP_SPAN_OPTIMIZER, iteration, t_start, tr_now());
    stats->iteration = iteration;
    stats->lr = lr;
    stats->grad_norm = norm;
    stats->loss_scale = scale;
    stats->skipped_iterations = e->scaler.skipped;
    stats->has_balancing = moe_balancing_on(e);
    stats->load_balancing_loss = e->moe_balancing;
    stats->global_batch_size = e->batch;
    if (!rc) {
        e->consumed_samples += (uint64_t)e->batch;
        if (skip)
            e->scaler.skipped_samples += (uint64_t)e->batch;
    }
    stats->consumed_samples = (double)e->consumed_samples;
    return rc;
}

/* ---- evaluation: forward only, each micro-batch passed down the virtual stages in order ---- */

int tr_engine_evaluate(tr_engine *e, double *val_loss)
{
    const tr_training_config *t = &e->cfg->training;
    if (tr_data_num_samples(e->data, TR_SPLIT_VALID) == 0)
        return tr_fail(TR_ERR_INVALID, "the validation split is empty");
    size_t numel = tr_gpt_hidden_numel(e->chunks[0].model, e->mb);
    int P = e->P, last_vs = P * e->v - 1;
    double sum = 0, sft_sum = 0;
    int rc = TR_OK;
    e->split = TR_SPLIT_VALID;
    e->weight_sum = 0; /* sft: over every evaluation batch */
    engine_set_grad_hooks(e, 0); /* forward only: nothing reaches dp/ */
    /* the final global batch (M_max micro-batches) whatever the ramp-up's is now, so val_loss
     * values stay comparable across the run */
    for (int it = 0; it < t->eval_iters && !rc; it++) {
        e->first_sample = (uint64_t)it * t->global_batch_size +
                          (uint64_t)e->dp_rank * (uint64_t)(t->global_batch_size / e->D);
        e->loss_sum = 0;
        slots_reset(e);
        for (int mb = 0; mb < e->M_max && !rc; mb++) {
            for (int c = 0; c < e->v && !rc; c++) {
                int vs = c * P + e->stage;
                tr_gpt_acts *a = slot_acquire(e, c, 0);
                if (vs > 0) /* from the previous virtual stage: stage-1, or the last stage's chunk c-1 */
                    rc = tr_comm_recv(e->world.pp, tr_gpt_acts_input_buffer(a), numel, TR_COMM_F32,
                                      (e->stage + P - 1) % P, mb * (last_vs + 1) + vs);
                const float *out = NULL;
                if (!rc) /* stage_forward reads micro-batch 0 of first_sample (advanced below) */
                    rc = stage_forward(e, c, 0, 0.0f, &out);
                if (!rc && vs < last_vs)
                    rc = tr_comm_send(e->world.pp, out, numel, TR_COMM_F32, (e->stage + 1) % P,
                                      mb * (last_vs + 1) + vs + 1);
            }
            e->first_sample += (uint64_t)e->mb;
        }
        sum += e->loss_sum / e->M_max;
        sft_sum += e->loss_sum;
    }
    engine_set_grad_hooks(e, 1);
    if (!rc)
        rc = engine_flush_tp(e);
    int rc2 = zero_release_all(e); /* ZeRO-3: prefetches nobody used */
    if (rc || (rc = rc2))
        return rc;
    if (e->sft)
        return engine_sft_loss(e, sft_sum, e->weight_sum, val_loss);
    return global_loss(e, sum / t->eval_iters, val_loss);
}
