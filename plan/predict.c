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
    int cp = p->context_parallel_size > 1 ? p->context_parallel_size : 1;
    if (world < 1 || tp < 1 || pp < 1 || world % ((long)tp * pp * cp))
        return tr_fail(TR_ERR_CONFIG,
                       "world size %d is not a multiple of tensor_model_parallel_size x "
                       "context_parallel_size x pipeline_model_parallel_size = %d x %d x %d; "
                       "allowed: a multiple of %ld",
                       world, tp, cp, pp, (long)tp * pp * cp);
    out->tp = tp;
    out->pp = pp;
    out->cp = cp;
    out->ep = p->expert_model_parallel_size > 1 ? p->expert_model_parallel_size : 1;
    out->dp = world / (tp * pp * cp);
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
    /* the config's dropout (model.hidden_dropout / attention_dropout); Megatron's runtimes keep
     * its masks, trident's recomputes them (acts.c: its attention then stays fp32) */
    out->dropout = cfg->model.hidden_dropout > 0 || cfg->model.attention_dropout > 0;
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
    int cp = L->cp > 1 ? L->cp : 1;
    if (L->tp < 1 || L->pp < 1 || L->dp < 1 || (long)L->tp * L->pp * L->dp * cp != world)
        return tr_fail(TR_ERR_CONFIG,
                       "layout TP %d x CP %d x PP %d x DP %d does not make %d ranks", L->tp, cp,
                       L->pp, L->dp, world);
    if (m->seq_length % (2 * cp))
        return tr_fail(TR_ERR_CONFIG,
                       "CP %d: model.seq_length %d is not divisible by 2 x CP (each sample is "
                       "2 x CP chunks)", cp, m->seq_length);
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
    int rc = plan_ep_check(cfg, L);
    if (rc)
        return rc;
    return tr_pp_validate(L->pp, L->num_micro_batches, L->schedule, L->v);
}

/* The ranks that sum a stage's gradients and shard its optimizer: DP x CP. */
static int dp_cp(const tr_plan_layout *L) { return L->dp * (L->cp > 1 ? L->cp : 1); }

/* dp/'s buckets and shard (tr_dp_layout) of an n-element buffer over `ranks`, with `al` (when
 * non-NULL) aligned; the search asks for the same layouts again (recompute variants):
 * remembered in ws. */
static int dp_layout_of(const tr_config *cfg, const tr_plan_layout *L, size_t n, int ranks,
                        const tr_dp_range *al, int st, tr_plan_ws *ws, int *n_buckets,
                        double *shard_out)
{
    tr_dp_config dc = {.bucket_size_mb = L->bucket_size_mb,
                       .overlap_grad_reduce = L->overlap_grad_reduce,
                       .distributed_optimizer = L->distributed_optimizer};
    if (al) {
        dc.aligned = al;
        dc.n_aligned = 1;
    }
    struct plan_dp_memo key = {1, ranks, L->distributed_optimizer, L->overlap_grad_reduce, 0,
                               L->bucket_size_mb, n, al ? al->offset : 0, al ? al->count : 0, 0};
    size_t h = (n * 31 + (size_t)key.dp * 7 + (size_t)key.zero * 3 + (size_t)key.overlap +
                key.al_start * 13 + (size_t)(L->bucket_size_mb * 1000)) % 256;
    struct plan_dp_memo *m = &ws->dp_memo[h];
    if (m->used && m->dp == key.dp && m->zero == key.zero && m->overlap == key.overlap &&
        m->bucket_mb == key.bucket_mb && m->n == key.n && m->al_start == key.al_start &&
        m->al_len == key.al_len) {
        *n_buckets = m->n_buckets;
        *shard_out = (double)m->shard;
        return TR_OK;
    }
    size_t shard = 0;
    int rc = tr_dp_layout(&dc, n, ranks, 0, n_buckets, &shard);
    if (rc)
        return tr_fail_context(rc, "%s: pipeline stage %d (%zu gradient elements per rank)",
                               tr_config_where(cfg, "parallel.ddp_bucket_size_mb"), st, n);
    *shard_out = (double)shard;
    key.n_buckets = *n_buckets;
    key.shard = shard;
    *m = key;
    return TR_OK;
}

/* Stage st's buckets and shard from dp/'s own layout, with the tied embedding copies aligned
 * as the engine passes them when P > 1: tensors lie in reverse forward order, so the first
 * stage's wte ends its buffer and the last stage's copy starts it. With EP > 1 the experts'
 * elements are a buffer of their own over EDP = DP/EP, the rest over DP. */
static int stage_dp_layout(const tr_config *cfg, const tr_plan_layout *L, int vocab_padded,
                           int st, tr_plan_ws *ws, plan_stage_dp *out)
{
    size_t n = (size_t)(out->trainable - out->experts);
    size_t wte = (size_t)vocab_padded * (size_t)cfg->model.hidden_size / (size_t)L->tp;
    tr_dp_range al = {st == 0 ? n - wte : 0, wte};
    int aligned = L->pp > 1 && (st == 0 || st == L->pp - 1) && !cfg->finetune.lora_rank;
    int rc = dp_layout_of(cfg, L, n, dp_cp(L), aligned ? &al : NULL, st, ws, &out->n_buckets,
                          &out->shard);
    out->n_expert_buckets = 0;
    out->expert_shard = 0;
    if (rc || out->experts <= 0)
        return rc;
    return dp_layout_of(cfg, L, (size_t)out->experts, L->dp / plan_ep(L), NULL, st, ws,
                        &out->n_expert_buckets, &out->expert_shard);
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
                      !L->distributed_optimizer && dp_cp(L) > 1
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
    double h = m->hidden_size, t = L->tp, ep = plan_ep(L);
    /* a layer's elements on this rank (Megatron's EP: its E/EP experts) */
    double layer = layers > 0 ? tr_plan_stage_params(m, vocab_padded, L->tp, 3, 1, 1) : 0;
    if (layers > 0 && plan_ep_split(L))
        layer -= plan_stage_expert_params(m, L->tp, 1) * (1 - 1 / ep);
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

/* The activation part of stage st's memory with trident's kernels (tr_plan_trident_acts):
 * peak micro-batches (chunks) in flight of layers / v layers and their slot each, every
 * chunk's scratch (and full recompute's layer, context parallelism's rows), the first chunk's
 * embedding norm, the last one's head. */
static void trident_stage_memory(const tr_plan_trident_acts *a, const tr_plan_layout *L,
                                 int st, int layers, int peak, tr_plan_memory *mm)
{
    double chunks = peak, v = L->v;
    mm->activations = chunks * (layers / v * a->layer + a->slot) + v * (a->scratch + a->cp) +
                      (st == L->pp - 1 ? v - 1 : v) * a->head_other;
    if (L->recompute == TR_PLAN_RECOMPUTE_FULL)
        mm->recompute = v * a->layer_whole;
    if (st == 0)
        mm->embedding = chunks / v * a->embedding_ln;
    if (st == L->pp - 1)
        mm->loss = a->head;
}

/* ... and with Megatron's (Korthikanti's count in the model's widths): peak micro-batches x
 * layers / v layers; full recompute re-materialises one layer, selective one layer's scores;
 * the first stage's embedding dropout mask, the last one's head chunk of fp32 logits. */
static void megatron_stage_memory(const tr_config *cfg, const tr_plan_layout *L,
                                  int vocab_padded, int st, int layers, int peak,
                                  tr_plan_memory *mm)
{
    const tr_model_config *m = &cfg->model;
    int t = L->tp, cp = L->cp > 1 ? L->cp : 1, s = m->seq_length, b = L->micro_batch;
    int sp = L->sequence_parallel && t > 1, act16 = L->bf16;
    double sl = (double)s / cp, esize = act16 ? 1.0 : 2.0, h = m->hidden_size;
    /* experts: k routed rows a token through the MLP, their gathers, the router's outputs */
    double moe_layer = tr_plan_moe_layer_bytes(m, (int)sl, b, t, act16 ? 2 : 4);
    int full = L->recompute == TR_PLAN_RECOMPUTE_FULL;
    double act = tr_plan_layer_activation_bytes_model(m, s, b, t, cp, L->sequence_parallel,
                                                      L->recompute, act16) +
                 (full ? 0 : moe_layer);
    mm->activations = (double)peak * layers / L->v * act;
    if (layers > 0) /* the MoE backward's scratch, once a stage */
        mm->activations += tr_plan_moe_scratch_bytes(m, (int)sl, b, t);
    if (full)
        mm->recompute = tr_plan_layer_activation_bytes_model(
                            m, s, b, t, cp, L->sequence_parallel, TR_PLAN_RECOMPUTE_NONE, act16) +
                        moe_layer;
    else if (L->recompute == TR_PLAN_RECOMPUTE_SELECTIVE)
        mm->recompute = 5.0 * m->num_attention_heads * sl * s * b / t * esize;
    if (st == 0)
        mm->embedding = (double)peak / L->v * sl * b * h / (sp ? t : 1) * esize;
    if (st == L->pp - 1) { /* one head chunk's fp32 logits, their gradient in place */
        int Vl = vocab_padded / t;
        mm->loss = 4.0 * tr_gpt_head_chunk_rows((int)(sl * b), Vl) * (double)Vl;
    }
}

/* Memory of every stage; fills the memory fields of r. peaks[P]: stored chunks per stage;
 * sd[P]: their parameters and optimizer shards. */
static void memory_model(const tr_config *cfg, const tr_plan_cluster *c,
                         const tr_pp_partition *part, const int *peaks, const plan_stage_dp *sd,
                         int ranks_per_node, tr_plan_result *r, tr_plan_memory *per_stage)
{
    const tr_model_config *m = &cfg->model;
    const tr_plan_layout *L = &r->layout;
    int P = L->pp;
    double wb, gb, ob; /* ob: optimizer bytes per element of the shard (nothing sharded) */
    tr_plan_state_bytes(L->bf16, 0, 1, &wb, &gb, &ob);
    tr_plan_trident_acts ta;
    if (L->trident_kernels)
        tr_plan_trident_activations(cfg, L, r->vocab_padded, &ta);
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
        mm.optimizer = (sd[st].shard + sd[st].expert_shard) * ob;
        if (dp_cp(L) > 1 && L->zero_stage >= 2 && !cfg->finetune.lora_rank) /* LoRA: adapters whole */
            zero_windows(m, L, r->vocab_padded, st, layers, sd[st].shard + sd[st].expert_shard,
                         wb, gb, &mm);
        if (L->trident_kernels)
            trident_stage_memory(&ta, L, st, layers, peaks[st], &mm);
        else
            megatron_stage_memory(cfg, L, r->vocab_padded, st, layers, peaks[st], &mm);
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


int plan_cp_supported(const tr_config *cfg, const tr_plan_cluster *c, const tr_plan_layout *L)
{
    /* trident's context parallelism (model/gpt_cp.c, yaml/validate_cp.c): any backend and
     * precision, LoRA included, but not experts; Megatron's runtimes run it as Megatron does */
    (void)c;
    if (L->cp <= 1 || !L->trident_kernels || cfg->model.num_experts <= 0)
        return TR_OK;
    return tr_fail(TR_ERR_CONFIG,
                   "CP %d on runtime trident: trident's context parallelism does not run "
                   "experts (model.num_experts %d); plan it with cluster.runtime megatron, or "
                   "CP 1", L->cp, cfg->model.num_experts);
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
    if ((rc = plan_cp_supported(cfg, c, layout)) || (rc = plan_ep_supported(c, layout)))
        return rc;
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
        sd[st].experts = 0;
        if (plan_ep_split(&L)) { /* E/EP experts a rank (Megatron's) */
            double all = plan_stage_expert_params(m, L.tp, layers);
            sd[st].experts = all / plan_ep(&L);
            sd[st].params -= all - sd[st].experts;
        }
        sd[st].trainable = sd[st].params;
        if (cfg->finetune.lora_rank) { /* LoRA: the base frozen, the adapters trained */
            sd[st].trainable = tr_plan_stage_adapters(cfg, L.tp, layers);
            sd[st].params += sd[st].trainable;
            sd[st].experts = 0; /* (frozen with the base) */
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
