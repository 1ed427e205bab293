/* One layout on one cluster: the layout from the config and its checks, each stage's
 * parameters and dp/ gradient buckets, the memory per rank (largest stage) with why a layout
 * does not fit, then the step time (step_time.c) and the throughput derived from it; the
 * public entry points (tr_plan_evaluate, tr_plan_explain_layout, tr_plan_predict). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "dp/dp.h"
#include "model/gpt.h"
#include "plan/plan.h"
#include "plan/plan_internal.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

int tr_plan_runtime_apply(const char *runtime, tr_plan_layout *L)
{
    static const struct {
        const char *name;
        int p2p_batched, scatter_gather, grad_accum_fused, trident_kernels;
    } runtimes[] = {
        {"trident", 1, 0, 1, 1},       /* pp/'s runner: batched, whole tensors; kernels/cuda */
        {"megatron", 1, 1, 1, 0},      /* Megatron-LM since 2022 */
        {"megatron-2021", 1, 1, 0, 0}, /* Megatron-LM of the SC21 paper */
        {"deepspeed", 0, 0, 0, 0},     /* DeepSpeed's pipeline engine and bf16/fp16 optimizer */
    };
    const char *r = runtime && *runtime ? runtime : "trident";
    for (size_t i = 0; i < sizeof runtimes / sizeof runtimes[0]; i++)
        if (!strcmp(r, runtimes[i].name)) {
            L->p2p_batched = runtimes[i].p2p_batched;
            L->scatter_gather = runtimes[i].scatter_gather;
            L->grad_accum_fused = runtimes[i].grad_accum_fused;
            L->trident_kernels = runtimes[i].trident_kernels;
            return TR_OK;
        }
    return tr_fail(TR_ERR_CONFIG, "unknown cluster.runtime '%s'; allowed: trident, megatron, "
                   "megatron-2021, deepspeed", r);
}

int tr_plan_layout_from_config(const tr_config *cfg, int world, tr_plan_layout *out)
{
    const tr_parallel_config *p = &cfg->parallel;
    const tr_training_config *t = &cfg->training;
    memset(out, 0, sizeof *out);
    int tp = p->tensor_model_parallel_size, pp = p->pipeline_model_parallel_size;
    if (world < 1 || tp < 1 || pp < 1 || world % ((long)tp * pp))
        return tr_fail(TR_ERR_CONFIG,
                       "world size %d is not a multiple of tensor_model_parallel_size x "
                       "pipeline_model_parallel_size = %d x %d; allowed: a multiple of %ld",
                       world, tp, pp, (long)tp * pp);
    out->tp = tp;
    out->pp = pp;
    out->dp = world / (tp * pp);
    int rc = tr_pp_kind_parse(p->pipeline_schedule, &out->schedule);
    if (rc)
        return rc;
    out->v = out->schedule == TR_PP_INTERLEAVED ? p->virtual_pipeline_model_parallel_size : 1;
    out->micro_batch = t->micro_batch_size;
    out->global_batch = t->global_batch_size;
    rc = tr_plan_recompute_parse(t->recompute, &out->recompute);
    if (rc)
        return tr_fail_context(rc, "%s", tr_config_where(cfg, "training.recompute"));
    out->zero_stage = tr_zero_stage(p);
    out->distributed_optimizer = out->zero_stage >= 1;
    out->sequence_parallel = p->sequence_parallel;
    out->bf16 = t->precision && !strcmp(t->precision, "bf16");
    out->bucket_size_mb = p->ddp_bucket_size_mb;
    out->overlap_grad_reduce = p->overlap_grad_reduce;
    out->dropout = 0; /* trident trains without dropout */
    rc = tr_plan_runtime_apply(cfg->cluster.runtime, out);
    if (rc)
        return tr_fail_context(rc, "%s", tr_config_where(cfg, "cluster.runtime"));
    rc = tr_topo_parse_order(p->order, &out->order);
    if (rc)
        return rc;
    long per_step = (long)out->micro_batch * out->dp;
    out->num_micro_batches = (int)((out->global_batch + per_step - 1) / per_step);
    out->batch_ok = out->global_batch % per_step == 0;
    return TR_OK;
}

static int check_layout(const tr_config *cfg, const tr_plan_layout *L, int world)
{
    const tr_model_config *m = &cfg->model;
    if (L->tp < 1 || L->pp < 1 || L->dp < 1 || (long)L->tp * L->pp * L->dp != world)
        return tr_fail(TR_ERR_CONFIG, "layout TP %d x PP %d x DP %d does not make %d ranks",
                       L->tp, L->pp, L->dp, world);
    if (m->num_attention_heads % L->tp || m->hidden_size % L->tp)
        return tr_fail(TR_ERR_CONFIG,
                       "TP %d does not divide num_attention_heads %d and hidden_size %d", L->tp,
                       m->num_attention_heads, m->hidden_size);
    int groups = m->num_query_groups > 0 ? m->num_query_groups : m->num_attention_heads;
    if (groups % L->tp || tr_model_ffn_hidden(m) % L->tp)
        return tr_fail(TR_ERR_CONFIG, "TP %d does not divide num_query_groups %d and the MLP "
                       "width %d", L->tp, groups, tr_model_ffn_hidden(m));
    if (L->pp * L->v > m->num_layers)
        return tr_fail(TR_ERR_CONFIG, "PP %d x %d chunks is more than num_layers %d", L->pp,
                       L->v, m->num_layers);
    if (L->micro_batch < 1 || L->global_batch < 1 || L->num_micro_batches < 1)
        return tr_fail(TR_ERR_CONFIG, "micro-batch %d / global batch %d: both must be >= 1",
                       L->micro_batch, L->global_batch);
    return tr_pp_validate(L->pp, L->num_micro_batches, L->schedule, L->v);
}

/* Stage st's buckets and shard from dp/'s own layout (tr_dp_layout), with the tied embedding
 * copies aligned as the engine passes them when P > 1: tensors lie in reverse forward order,
 * so the first stage's wte ends its buffer and the last stage's copy starts it. */
static int stage_dp_layout(const tr_config *cfg, const tr_plan_layout *L, int vocab_padded,
                           int st, tr_plan_ws *ws, plan_stage_dp *out)
{
    size_t n = (size_t)out->trainable;
    size_t wte = (size_t)vocab_padded * (size_t)cfg->model.hidden_size / (size_t)L->tp;
    tr_dp_config dc = {.bucket_size_mb = L->bucket_size_mb,
                       .overlap_grad_reduce = L->overlap_grad_reduce,
                       .distributed_optimizer = L->distributed_optimizer};
    tr_dp_range al = {st == 0 ? n - wte : 0, wte};
    int aligned = L->pp > 1 && (st == 0 || st == L->pp - 1) && !cfg->finetune.lora_rank;
    if (aligned) {
        dc.aligned = &al;
        dc.n_aligned = 1;
    }
    /* the search asks for the same layouts again (recompute variants): remember them */
    struct plan_dp_memo key = {1, L->dp, L->distributed_optimizer, L->overlap_grad_reduce, 0,
                               L->bucket_size_mb, n, aligned ? al.offset : 0,
                               aligned ? al.count : 0, 0};
    size_t h = (n * 31 + (size_t)L->dp * 7 + (size_t)key.zero * 3 + (size_t)key.overlap +
                key.al_start * 13 + (size_t)(L->bucket_size_mb * 1000)) % 256;
    struct plan_dp_memo *m = &ws->dp_memo[h];
    if (m->used && m->dp == key.dp && m->zero == key.zero && m->overlap == key.overlap &&
        m->bucket_mb == key.bucket_mb && m->n == key.n && m->al_start == key.al_start &&
        m->al_len == key.al_len) {
        out->n_buckets = m->n_buckets;
        out->shard = (double)m->shard;
        return TR_OK;
    }
    size_t shard = 0;
    int rc = tr_dp_layout(&dc, n, L->dp, 0, &out->n_buckets, &shard);
    if (rc)
        return tr_fail_context(rc, "%s: pipeline stage %d (%zu gradient elements per rank)",
                               tr_config_where(cfg, "parallel.ddp_bucket_size_mb"), st, n);
    out->shard = (double)shard;
    key.n_buckets = out->n_buckets;
    key.shard = shard;
    *m = key;
    return TR_OK;
}

static double gib(double b) { return b / GIB; }

/* Why a layout does not fit, with the term to attack. */
static void explain_memory(const tr_plan_result *r, const tr_plan_cluster *c, char *buf,
                           size_t n)
{
    const tr_plan_memory *mm = &r->memory;
    const tr_plan_layout *L = &r->layout;
    double state = mm->weights + mm->grads + mm->optimizer;
    double usable = r->capacity - mm->reserved;
    const char *unit = c->device == TR_PLAN_DEVICE_CPU ? "rank" : "GPU";
    int o = snprintf(buf, n,
                     "needs %.1f GiB per %s on stage %d (weights %.1f + gradients %.1f + "
                     "optimizer %.1f + activations %.1f [in flight: %d micro-batch%s x %d layers] "
                     "+ other %.1f) but a %s has %.1f GiB; ",
                     gib(mm->total), unit, r->memory_stage, gib(mm->weights), gib(mm->grads),
                     gib(mm->optimizer), gib(mm->activations), r->in_flight,
                     r->in_flight == 1 ? "" : "es", r->stage_layers,
                     gib(mm->recompute + mm->embedding + mm->loss + mm->reserved), unit,
                     gib(r->capacity));
    if (o < 0 || (size_t)o >= n)
        return;
    if (state > usable) {
        double need = ceil(state / usable * L->tp * L->pp);
        o += snprintf(buf + o, n - (size_t)o,
                      "the model state alone (%.1f GiB) exceeds it: split the model over more "
                      "ranks (TP x PP >= %.0f)%s",
                      gib(state), need,
                      !L->distributed_optimizer && L->dp > 1
                          ? " or shard the optimizer (use_distributed_optimizer)"
                          : "");
    } else {
        o += snprintf(buf + o, n - (size_t)o,
                      "activations are the excess: %s a smaller micro-batch or more pipeline "
                      "stages",
                      L->recompute == TR_PLAN_RECOMPUTE_FULL
                          ? "use"
                          : L->recompute == TR_PLAN_RECOMPUTE_SELECTIVE
                                ? "use full recompute,"
                                : "use recompute (selective or full),");
    }
}

/* ZeRO-2/3 (plan.h): the shard plus the window of full tensors held at once, per part. */
static void zero_windows(const tr_model_config *m, const tr_plan_layout *L, int vocab_padded,
                         int st, int layers, double shard, double wb, double gb,
                         tr_plan_memory *mm)
{
    double h = m->hidden_size, t = L->tp;
    double layer = layers > 0 ? tr_plan_stage_params(m, vocab_padded, L->tp, 3, 1, 1) : 0;
    double wte = (double)vocab_padded * h / t, wpe = (double)m->max_position_embeddings * h;
    double bucket = L->bucket_size_mb > 0 && L->overlap_grad_reduce
                        ? L->bucket_size_mb * 262144.0 : layer;
    int first = st == 0, last = st == L->pp - 1;
    double g = layer + (bucket < layer ? bucket : layer);
    if (first && last)
        g = wte + layer + (bucket < layer ? bucket : layer);
    else if (first && wte + wpe > g)
        g = wte + wpe;
    else if (last && wte > g)
        g = wte;
    mm->grads = shard * gb + g * gb;
    if (L->zero_stage < 3)
        return;
    double w = 2 * layer;
    if (first && wte + wpe + layer > w)
        w = wte + wpe + layer;
    if (last && wte + 2 * h > w)
        w = wte + 2 * h;
    mm->weights = shard * wb + w * wb;
}

/* Memory of every stage; fills the memory fields of r. peaks[P]: stored chunks per stage;
 * sd[P]: their parameters and optimizer shards. */
static void memory_model(const tr_config *cfg, const tr_plan_cluster *c,
                         const tr_pp_partition *part, const int *peaks, const plan_stage_dp *sd,
                         int ranks_per_node, tr_plan_result *r, tr_plan_memory *per_stage)
{
    const tr_model_config *m = &cfg->model;
    const tr_plan_layout *L = &r->layout;
    int t = L->tp, P = L->pp, s = m->seq_length, b = L->micro_batch, h = m->hidden_size;
    double wb, gb, ob; /* ob: optimizer bytes per element of the shard (nothing sharded) */
    tr_plan_state_bytes(L->bf16, 0, 1, &wb, &gb, &ob);
    /* fused attention stores no scores: none is selective's bytes + the log-sum-exps */
    tr_plan_recompute stored = L->trident_kernels && L->recompute != TR_PLAN_RECOMPUTE_FULL
                                   ? TR_PLAN_RECOMPUTE_SELECTIVE
                                   : L->recompute;
    double lse = L->trident_kernels ? 4.0 * m->num_attention_heads * (double)s * b / t : 0;
    /* trident's kernels keep activations in fp32 whatever the compute precision, */
    int act16 = L->bf16 && !L->trident_kernels;
    /* but the GELU output that feeds fc_proj, kept in bf16 storage (model/gpt_internal.h's
     * gpt_gelu16: bf16 on trident's kernels, GELU, no LoRA): 2 bytes an element less */
    /* (none of these with experts: the experts' gathers and GEMMs read fp32) */
    int moe = m->num_experts > 0;
    double gelu16 = L->trident_kernels && L->bf16 && !m->swiglu && !m->geglu &&
                            !cfg->finetune.lora_rank && !moe &&
                            stored != TR_PLAN_RECOMPUTE_FULL
                        ? 2.0 * s * b * (double)tr_model_ffn_hidden(m) / t
                        : 0;
    /* and the two norms' outputs that feed QKV and fc (gpt_ln16: h even): 2 bytes an element
     * less of the (s b, h) each that the formula counts (split over t under SP) */
    int sp_split = L->sequence_parallel && t > 1;
    /* and fc's output, the GELU's input (gpt_fch16: where the GELU output is bf16), alike */
    double fch16 = gelu16;
    double ln16 = L->trident_kernels && L->bf16 && !cfg->finetune.lora_rank && !moe &&
                          stored != TR_PLAN_RECOMPUTE_FULL && h % 2 == 0
                      ? 2 * 2.0 * s * b * h / (sp_split ? t : 1)
                      : 0;
    /* and the attention output that feeds the projection (gpt_atty16: aw/t even, aw = heads x
     * head size): 2 bytes of its (s b, aw/t) */
    double aw = tr_plan_attention_width(m);
    double atty16 = L->trident_kernels && L->bf16 && !cfg->finetune.lora_rank &&
                            stored != TR_PLAN_RECOMPUTE_FULL && (long)(aw / t) % 2 == 0
                        ? 2.0 * s * b * aw / t
                        : 0;
    /* and its input qkv (gpt_qkv16: where the attention output is and no rope rotates it): 2
     * bytes of its (s b, qkv/t) (GPT-2: qkv = 3h) */
    double qkv_w, ffn_w, fc_w;
    tr_plan_layer_dims(m, &qkv_w, &ffn_w, &fc_w);
    int rope = m->position_embedding_type && !strcmp(m->position_embedding_type, "rope");
    double qkv16 = atty16 > 0 && !rope ? 2.0 * s * b * qkv_w / t : 0;
    /* experts: k routed rows a token through the MLP, their gathers, the router's outputs */
    double moe_layer = tr_plan_moe_layer_bytes(m, s, b, t, act16 ? 2 : 4);
    double act = tr_plan_layer_activation_bytes(s, b, h, m->num_attention_heads, t,
                                                L->sequence_parallel, stored, act16) +
                 (stored == TR_PLAN_RECOMPUTE_FULL ? 0 : lse + moe_layer) - gelu16 - fch16 -
                 ln16 - atty16 - qkv16;
    double act_none = tr_plan_layer_activation_bytes(
                          s, b, h, m->num_attention_heads, t, L->sequence_parallel,
                          L->trident_kernels ? TR_PLAN_RECOMPUTE_SELECTIVE : TR_PLAN_RECOMPUTE_NONE,
                          act16) +
                      lse + moe_layer;
    double esize = act16 ? 1.0 : 2.0;
    int sp = L->sequence_parallel && t > 1;
    r->capacity = c->device == TR_PLAN_DEVICE_CPU ? c->memory_bytes / ranks_per_node
                                                  : c->memory_bytes;
    double worst = -1;
    for (int st = 0; st < P; st++) {
        int layers = 0;
        for (int ch = 0; ch < L->v; ch++)
            layers += tr_pp_layer_count(part, st, ch);
        double params = sd[st].params;
        tr_plan_memory mm = {0};
        mm.weights = params * wb;
        mm.grads = sd[st].trainable * gb;
        mm.optimizer = sd[st].shard * ob;
        if (L->dp > 1 && L->zero_stage >= 2 && !cfg->finetune.lora_rank) /* LoRA: adapters whole */
            zero_windows(m, L, r->vocab_padded, st, layers, sd[st].shard, wb, gb, &mm);
        mm.activations = (double)peaks[st] * layers / L->v * act;
        if (layers > 0) /* the MoE backward's scratch, once a stage */
            mm.activations += tr_plan_moe_scratch_bytes(m, s, b, t);
        if (L->recompute == TR_PLAN_RECOMPUTE_FULL)
            mm.recompute = act_none;
        else if (L->recompute == TR_PLAN_RECOMPUTE_SELECTIVE && !L->trident_kernels)
            mm.recompute = 5.0 * m->num_attention_heads * (double)s * s * b / t * esize;
        if (st == 0)
            mm.embedding = (double)peaks[st] / L->v * s * b * h / (sp ? t : 1) * esize;
        if (st == P - 1) { /* one head chunk's fp32 logits, their gradient in place */
            int Vl = r->vocab_padded / t;
            mm.loss = 4.0 * tr_gpt_head_chunk_rows(s * b, Vl) * (double)Vl;
            if (L->trident_kernels && L->bf16) /* and the head's weight in bf16 (W16) */
                mm.loss += 2.0 * Vl * h;
        }
        mm.reserved = c->reserved_bytes;
        mm.total = mm.weights + mm.grads + mm.optimizer + mm.activations + mm.recompute +
                   mm.embedding + mm.loss + mm.reserved;
        r->stage_memory[st] = mm.total;
        if (per_stage)
            per_stage[st] = mm;
        if (mm.total > worst) {
            worst = mm.total;
            r->memory = mm;
            r->memory_stage = st;
            r->in_flight = peaks[st];
            r->stage_layers = layers;
        }
    }
    r->fits = r->memory.total <= r->capacity;
}


int plan_evaluate(const tr_config *cfg, const tr_plan_layout *layout, int world,
                  const tr_plan_cluster *c, int time, double train_tokens, tr_plan_ws *ws,
                  tr_plan_result *out, tr_plan_explain *ex)
{
    memset(out, 0, sizeof *out);
    int rc = check_layout(cfg, layout, world);
    if (rc)
        return rc;
    const tr_model_config *m = &cfg->model;
    tr_plan_layout L = *layout;
    out->layout = L;
    out->world = world;
    out->vocab_padded = tr_gpt_padded_vocab(m, L.tp);
    if (!out->vocab_padded)
        return tr_fail(TR_ERR_CONFIG,
                       "model.vocab_size %d padded to a multiple of "
                       "make_vocab_size_divisible_by x TP = %d x %d does not fit in an int",
                       m->vocab_size, m->make_vocab_size_divisible_by, L.tp);
    out->n_params = tr_plan_model_params(m, out->vocab_padded);
    out->n_active_params = tr_plan_model_active_params(m, out->vocab_padded);
    int ranks_per_node = c->gpus_per_node < world ? c->gpus_per_node : world;

    tr_pp_partition *part = tr_alloc(sizeof *part, "partition");
    plan_stage_dp *sd = tr_alloc(sizeof *sd * (size_t)L.pp, "stage gradient buckets");
    int *peaks = tr_alloc(sizeof(int) * (size_t)L.pp, "peaks");
    if (!part || !sd || !peaks) {
        rc = TR_ERR_NOMEM;
        goto done;
    }
    const tr_parallel_config *pc = &cfg->parallel;
    int use_list = pc->num_pipeline_layers > 0 && L.pp == pc->pipeline_model_parallel_size &&
                   pc->num_pipeline_layers == L.pp * L.v;
    rc = tr_pp_partition_layers(m->num_layers, L.pp, L.v, use_list ? pc->pipeline_layers : NULL,
                                use_list ? pc->num_pipeline_layers : 0, part);
    if (rc)
        goto done;
    plan_schedule_peaks(L.pp, L.num_micro_batches, L.schedule, L.v, peaks);
    for (int st = 0; st < L.pp; st++) {
        int layers = 0;
        for (int ch = 0; ch < L.v; ch++)
            layers += tr_pp_layer_count(part, st, ch);
        sd[st].params = tr_plan_stage_params(m, out->vocab_padded, L.tp, L.pp, st, layers);
        sd[st].trainable = sd[st].params;
        if (cfg->finetune.lora_rank) { /* LoRA: the base frozen, the adapters trained */
            sd[st].trainable = tr_plan_stage_adapters(cfg, L.tp, layers);
            sd[st].params += sd[st].trainable;
        }
        if ((rc = stage_dp_layout(cfg, &L, out->vocab_padded, st, ws, &sd[st])))
            goto done;
        if (sd[st].n_buckets > out->dp_buckets)
            out->dp_buckets = sd[st].n_buckets;
    }
    memory_model(cfg, c, part, peaks, sd, ranks_per_node, out, ex ? ex->memory : NULL);
    out->valid = out->fits && L.batch_ok;
    out->problem[0] = '\0';
    if (!out->fits)
        explain_memory(out, c, out->problem, sizeof out->problem);
    if (!L.batch_ok) {
        size_t o = strlen(out->problem);
        snprintf(out->problem + o, sizeof out->problem - o,
                 "%sglobal batch %d is not a multiple of micro_batch x DP = %d x %d = %ld (timed "
                 "as %d micro-batches)",
                 o ? "; " : "", L.global_batch, L.micro_batch, L.dp, (long)L.micro_batch * L.dp,
                 L.num_micro_batches);
    }
    if (!time)
        goto done;
    rc = plan_time_model(cfg, c, part, sd, ranks_per_node, ws, out, ex);
    if (rc)
        goto done;

    double batch = (double)L.num_micro_batches * L.micro_batch * L.dp;
    out->tokens_per_step = batch * m->seq_length;
    out->tokens_per_s = out->tokens_per_step / out->step_time_s;
    out->hardware_flops = tr_plan_hardware_flops(m, out->vocab_padded, (int)batch, L.recompute);
    out->model_flops = tr_plan_model_flops(m, out->vocab_padded, (int)batch);
    out->tflops_per_gpu = out->hardware_flops / out->step_time_s / world / 1e12;
    out->model_tflops_per_gpu = out->model_flops / out->step_time_s / world / 1e12;
    double peak_rank = c->peak_flops / (c->device == TR_PLAN_DEVICE_CPU ? ranks_per_node : 1);
    out->mfu = out->model_tflops_per_gpu * 1e12 / peak_rank;
    /* sample-based training: its samples (a ramp-up's smaller batches are timed as steps of
     * the final batch, which is what the layout is planned for) */
    const tr_training_config *t = &cfg->training;
    out->train_tokens = train_tokens > 0             ? train_tokens
                        : tr_training_by_samples(t) ? (double)t->train_samples * m->seq_length
                                                    : (double)t->train_iters *
                                                          t->global_batch_size * m->seq_length;
    out->time_to_train_s = out->train_tokens / out->tokens_per_s;
done:
    tr_free(part);
    tr_free(sd);
    tr_free(peaks);
    return rc;
}

int tr_plan_evaluate(const tr_config *cfg, const tr_plan_layout *layout, int world,
                     const tr_plan_cluster *c, int time, double train_tokens, tr_plan_result *out)
{
    tr_plan_ws ws = {0};
    int rc = plan_evaluate(cfg, layout, world, c, time, train_tokens, &ws, out, NULL);
    plan_ws_free(&ws);
    return rc;
}

void tr_plan_explain_free(tr_plan_explain *e)
{
    if (!e)
        return;
    free(e->parts);
    free(e->memory);
    memset(e, 0, sizeof *e);
}

double tr_plan_explain_stage_total(const tr_plan_explain *e, int stage)
{
    double sum = 0;
    for (int k = 0; k < TR_PLAN_PARTS; k++)
        sum += e->parts[(size_t)stage * TR_PLAN_PARTS + k];
    return sum;
}

int tr_plan_explain_layout(const tr_config *cfg, const tr_plan_layout *layout, int world,
                           const tr_plan_cluster *c, double train_tokens, tr_plan_result *result,
                           tr_plan_explain *out)
{
    memset(out, 0, sizeof *out);
    int P = layout->pp > 0 ? layout->pp : 1;
    out->P = P;
    out->parts = calloc((size_t)P * TR_PLAN_PARTS, sizeof *out->parts);
    out->memory = calloc((size_t)P, sizeof *out->memory);
    if (!out->parts || !out->memory) {
        tr_plan_explain_free(out);
        return tr_fail(TR_ERR_NOMEM, "plan --explain: out of memory");
    }
    tr_plan_ws ws = {0};
    int rc = plan_evaluate(cfg, layout, world, c, 1, train_tokens, &ws, result, out);
    plan_ws_free(&ws);
    if (rc)
        tr_plan_explain_free(out);
    return rc;
}

int tr_plan_world(const tr_plan_cluster *c, int world_size, int *world)
{
    long long w = world_size > 0 ? world_size : (long long)c->nodes * c->gpus_per_node;
    if (w < 1 || w > TR_TOPO_MAX_WORLD)
        return tr_fail(TR_ERR_CONFIG, "world size %lld (%s): expected 1 .. %d ranks", w,
                       world_size > 0 ? "--world-size" : "cluster.nodes x cluster.gpus_per_node",
                       TR_TOPO_MAX_WORLD);
    *world = (int)w;
    return TR_OK;
}

int tr_plan_predict(const tr_config *cfg, int world_size, const tr_plan_cluster *cluster,
                    tr_plan_result *out)
{
    int world = 0;
    int rc = tr_plan_world(cluster, world_size, &world);
    if (rc)
        return rc;
    tr_plan_layout L;
    rc = tr_plan_layout_from_config(cfg, world, &L);
    if (rc)
        return rc;
    return tr_plan_evaluate(cfg, &L, world, cluster, 1, 0, out);
}
