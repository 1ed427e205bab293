/* One layout on one cluster: memory per rank (largest stage) and the step time, assembled from
 * the formulas (formulas.c) and the pp/ event simulation of the schedule's op lists. */
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

/* What dp/ makes of one stage's gradient buffer (per rank). */
typedef struct {
    double params;    /* elements of the stage's parameters (under LoRA: base + adapters) */
    double trainable; /* of them with gradients and optimizer state (LoRA: the adapters) */
    int n_buckets;    /* gradient buckets */
    double shard;     /* DP rank 0's optimizer shard (the largest; params without ZeRO-1) */
} stage_dp;

/* Stage st's buckets and shard from dp/'s own layout (tr_dp_layout), with the tied embedding
 * copies aligned as the engine passes them when P > 1: tensors lie in reverse forward order,
 * so the first stage's wte ends its buffer and the last stage's copy starts it. */
static int stage_dp_layout(const tr_config *cfg, const tr_plan_layout *L, int vocab_padded,
                           int st, tr_plan_ws *ws, stage_dp *out)
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

/* How a group of `size` ranks sits on the nodes: the link it uses and the bandwidth one
 * member sees. Inter-node: the node's NICs are shared by every rank of the node running the
 * same kind of collective at once, a group with k members per node getting k of them. */
typedef struct {
    tr_plan_link link;
    double bw, lat;
} link_view;

static link_view view_of(const tr_plan_cluster *c, tr_plan_link l, int members_per_node,
                         int ranks_per_node)
{
    link_view v = {l, 0, 0};
    double ie = c->intra_efficiency > 0 ? c->intra_efficiency : 1.0;
    double xe = c->inter_efficiency > 0 ? c->inter_efficiency : 1.0;
    if (l == TR_PLAN_LINK_INTER) {
        int k = members_per_node < 1 ? 1 : members_per_node;
        v.bw = c->inter_bw * xe * k / ranks_per_node;
        v.lat = c->inter_latency;
    } else {
        v.bw = c->intra_bw * ie;
        v.lat = c->intra_latency;
    }
    return v;
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
                         const tr_pp_partition *part, const int *peaks, const stage_dp *sd,
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
    /* trident's kernels keep activations in fp32 whatever the compute precision */
    int act16 = L->bf16 && !L->trident_kernels;
    double act = tr_plan_layer_activation_bytes(s, b, h, m->num_attention_heads, t,
                                                L->sequence_parallel, stored, act16) +
                 (stored == TR_PLAN_RECOMPUTE_FULL ? 0 : lse);
    double act_none = tr_plan_layer_activation_bytes(
                          s, b, h, m->num_attention_heads, t, L->sequence_parallel,
                          L->trident_kernels ? TR_PLAN_RECOMPUTE_SELECTIVE : TR_PLAN_RECOMPUTE_NONE,
                          act16) +
                      lse;
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
        if (L->recompute == TR_PLAN_RECOMPUTE_FULL)
            mm.recompute = act_none;
        else if (L->recompute == TR_PLAN_RECOMPUTE_SELECTIVE && !L->trident_kernels)
            mm.recompute = 5.0 * m->num_attention_heads * (double)s * s * b / t * esize;
        if (st == 0)
            mm.embedding = (double)peaks[st] / L->v * s * b * h / (sp ? t : 1) * esize;
        if (st == P - 1) { /* one head chunk's fp32 logits, their gradient in place */
            int Vl = r->vocab_padded / t;
            mm.loss = 4.0 * tr_gpt_head_chunk_rows(s * b, Vl) * (double)Vl;
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

typedef struct {
    double tf, tb; /* one micro-batch, the whole stage (all its chunks) */
    plan_cost k;   /* the same by part */
} stage_cost;

/* Per stage (whole) and per chunk (tfc, tbc [P v]): the embedding is chunk 0 of stage 0's,
 * the output layer the last chunk of stage P-1's. */
static void stage_costs(const tr_pp_partition *part, const plan_cost_ctx *x, int P, int v,
                        stage_cost *sc, double *tfc, double *tbc)
{
    plan_cost layer, emb, out;
    plan_layer_cost(x, &layer);
    plan_embedding_cost(x, &emb);
    plan_output_cost(x, &out);
    double lf = 0, lb = 0, ef = 0, eb = 0, of = 0, ob = 0;
    for (int k = 0; k <= TR_PLAN_PART_TP; k++) {
        lf += layer.f[k];
        lb += layer.b[k];
        ef += emb.f[k];
        eb += emb.b[k];
        of += out.f[k];
        ob += out.b[k];
    }
    for (int st = 0; st < P; st++) {
        int layers = 0;
        for (int ch = 0; ch < v; ch++) {
            int n = tr_pp_layer_count(part, st, ch);
            layers += n;
            int first = st == 0 && ch == 0, last = st == P - 1 && ch == v - 1;
            tfc[st * v + ch] = n * lf + (first ? ef : 0) + (last ? of : 0);
            tbc[st * v + ch] = n * lb + (first ? eb : 0) + (last ? ob : 0);
        }
        stage_cost *c = &sc[st];
        c->tf = c->tb = 0;
        for (int k = 0; k <= TR_PLAN_PART_TP; k++) {
            c->k.f[k] = layers * layer.f[k] + (st == 0 ? emb.f[k] : 0) +
                        (st == P - 1 ? out.f[k] : 0);
            c->k.b[k] = layers * layer.b[k] + (st == 0 ? emb.b[k] : 0) +
                        (st == P - 1 ? out.b[k] : 0);
            c->tf += c->k.f[k];
            c->tb += c->k.b[k];
        }
    }
}

/* The link a group of `kind` uses (inter-node when any group of the kind spans nodes) and
 * its members per node. */
static link_view kind_view(const tr_node_report *rep, const tr_plan_cluster *c,
                           tr_group_kind kind, int size, int ranks_per_node)
{
    if (size <= 1)
        return (link_view){TR_PLAN_LINK_NONE, 0, 0};
    int nodes = rep->max_nodes[kind] > 0 ? rep->max_nodes[kind] : 1;
    return view_of(c, nodes > 1 ? TR_PLAN_LINK_INTER : TR_PLAN_LINK_INTRA,
                   (size + nodes - 1) / nodes, ranks_per_node);
}

static int time_model(const tr_config *cfg, const tr_plan_cluster *c, const tr_pp_partition *part,
                      const stage_dp *sd, int ranks_per_node, tr_plan_ws *ws, tr_plan_result *r,
                      tr_plan_explain *ex)
{
    const tr_model_config *m = &cfg->model;
    const tr_plan_layout *L = &r->layout;
    int t = L->tp, P = L->pp, d = L->dp, s = m->seq_length, b = L->micro_batch, h = m->hidden_size;
    int M = L->num_micro_batches;
    tr_topo topo;
    int rc = tr_topo_init(&topo, r->world, t, P, tr_topo_order_name(L->order));
    if (rc)
        return rc;
    int key[5] = {r->world, t, P, (int)L->order, c->gpus_per_node};
    if (!ws->rep_valid || memcmp(key, ws->rep_key, sizeof key)) {
        ws->rep_valid = 0;
        rc = tr_topo_node_report(&topo, c->gpus_per_node, &ws->rep);
        if (rc)
            return rc;
        memcpy(ws->rep_key, key, sizeof key);
        ws->rep_valid = 1;
    }
    const tr_node_report rep = ws->rep;
    link_view tpv = kind_view(&rep, c, TR_GROUP_TP, t, ranks_per_node);
    link_view dpv = kind_view(&rep, c, TR_GROUP_DP, d, ranks_per_node);
    r->tp_link = tpv.link;
    r->dp_link = dpv.link;
    double rate = c->peak_flops * c->gemm_efficiency /
                  (c->device == TR_PLAN_DEVICE_CPU ? ranks_per_node : 1);
    r->compute_rate = rate;
    double elem = L->bf16 ? 2.0 : 4.0;
    double act_msg = (double)s * b * h * elem;
    plan_cost_ctx x = {.c = c, .m = m, .L = L, .vocab_padded = r->vocab_padded, .rate = rate,
                       .ar_tp = tr_plan_allreduce_s(act_msg, t, tpv.bw, tpv.lat),
                       .tp_bw = tpv.bw, .tp_lat = tpv.lat};

    /* per stage: costs (sc), P2P per link, then 5 arrays of results */
    stage_cost *sc = tr_alloc(sizeof *sc * (size_t)P, "stage costs");
    double *buf = tr_alloc(sizeof(double) * (6 + 2 * (size_t)L->v) * (size_t)P, "stage times");
    if (!sc || !buf) {
        tr_free(sc);
        tr_free(buf);
        return TR_ERR_NOMEM;
    }
    double *p2p = buf, *fin = buf + P, *opt = buf + 2 * P, *gath = buf + 3 * P,
           *pp_b = buf + 4 * P, *tfc = buf + 5 * P, *tbc = tfc + (size_t)P * L->v;
    stage_costs(part, &x, P, L->v, sc, tfc, tbc);
    r->slow_stage = 0;
    for (int st = 1; st < P; st++)
        if (sc[st].tf + sc[st].tb > sc[r->slow_stage].tf + sc[r->slow_stage].tb)
            r->slow_stage = st;
    const stage_cost *w = &sc[r->slow_stage];
    r->tf_s = w->tf;
    r->tb_s = w->tb;
    r->compute_f_s = w->tf - w->k.f[TR_PLAN_PART_TP];
    r->compute_b_s = w->tb - w->k.b[TR_PLAN_PART_TP];
    r->tp_comm_s = w->k.f[TR_PLAN_PART_TP] + w->k.b[TR_PLAN_PART_TP];

    /* P2P over the link between stage st and st+1 (mod P: the interleaved wrap) */
    int sp = L->sequence_parallel && t > 1;
    double msg = act_msg / (sp ? t : 1);
    double ie = c->intra_efficiency > 0 ? c->intra_efficiency : 1.0;
    double xe = c->inter_efficiency > 0 ? c->inter_efficiency : 1.0;
    r->pp_link = P > 1 ? TR_PLAN_LINK_INTRA : TR_PLAN_LINK_NONE;
    r->p2p_s = 0;
    for (int st = 0; st < P; st++) {
        p2p[st] = 0;
        if (P == 1)
            break;
        int q = (st + 1) % P;
        int na = tr_topo_node_of(&topo, c->gpus_per_node,
                                 tr_topo_rank(&topo, (tr_coords){.dp = 0, .tp = 0, .pp = st}));
        int nz = tr_topo_node_of(&topo, c->gpus_per_node,
                                 tr_topo_rank(&topo, (tr_coords){.dp = 0, .tp = 0, .pp = q}));
        if (na != nz) {
            double bw = c->inter_bw * xe / ranks_per_node; /* every rank of the node sends */
            if (t > 1 && !sp && L->scatter_gather)
                p2p[st] = msg / t / bw + c->inter_latency +
                          tr_plan_allgather_s(msg, t, tpv.link == TR_PLAN_LINK_INTRA
                                                          ? tpv.bw
                                                          : c->intra_bw * ie,
                                              c->intra_latency);
            else
                p2p[st] = msg / bw + c->inter_latency;
            if (q != 0)
                r->pp_link = TR_PLAN_LINK_INTER;
        } else {
            p2p[st] = msg / (c->intra_bw * ie) + c->intra_latency;
        }
        if ((q != 0 || L->v > 1) && p2p[st] > r->p2p_s)
            r->p2p_s = p2p[st];
    }
    int uniform = 1;
    for (int i = 0; i < P * L->v; i++)
        if (tfc[i] != tfc[0] || tbc[i] != tbc[0])
            uniform = 0;
    for (int st = 0; st < P; st++) {
        if (p2p[st] != 0)
            uniform = 0;
        /* what one backward of the stage moves over P2P: a gradient in, a gradient out */
        pp_b[st] = (st + 1 < P || L->v > 1 ? p2p[st] : 0) +
                   (st > 0 || L->v > 1 ? p2p[(st + P - 1) % P] : 0);
    }
    plan_pipe_out po;
    rc = plan_ws_simulate(ws, P, M, L->schedule, L->v, tfc, tbc, p2p, L->p2p_batched, &po);
    if (rc)
        goto done;
    r->pipeline_s = po.makespan;
    r->bubble_fraction = po.bubble_fraction;
    r->bubble_fraction_theory = tr_pp_bubble_theory(P, M, L->schedule, L->v);
    if (uniform && fabs(r->bubble_fraction - r->bubble_fraction_theory) > 1e-9) {
        rc = tr_fail(TR_ERR_INTERNAL,
                     "pipeline bubble: the event simulation gives %.12f but the closed "
                     "formula %.12f for equal stages (P=%d, M=%d, %s, v=%d)",
                     r->bubble_fraction, r->bubble_fraction_theory, P, M,
                     tr_pp_kind_name(L->schedule), L->v);
        goto done;
    }

    /* Data parallel: gradient buckets during each stage's last backward, sharing the link
     * with that backward's TP collectives and P2P when they use the same one. */
    double wb, gb, ob;
    tr_plan_state_bytes(L->bf16, L->distributed_optimizer, d, &wb, &gb, &ob);
    double step_core = 0, dp_comm = 0, gather = 0, opt_max = 0;
    for (int st = 0; st < P; st++) {
        double finish = po.end[st];
        gath[st] = 0;
        if (d > 1) {
            double grads = sd[st].trainable * gb;
            int nb = sd[st].n_buckets;
            double per = L->distributed_optimizer
                             ? tr_plan_reduce_scatter_s(grads / nb, d, dpv.bw, dpv.lat)
                             : tr_plan_allreduce_s(grads / nb, d, dpv.bw, dpv.lat);
            double window = tbc[st * L->v]; /* the last backward: chunk 0 */
            double busy = (tpv.link == dpv.link
                               ? sc[st].k.b[TR_PLAN_PART_TP] * window / sc[st].tb
                               : 0) +
                          (r->pp_link == dpv.link ? pp_b[st] : 0);
            double u = window > 0 ? busy / window : 0;
            if (u > 0.9)
                u = 0.9;
            double exposed = tr_plan_dp_exposed_s(per / (1 - u), nb, window,
                                                  L->overlap_grad_reduce);
            if (po.end_b[st] + exposed > finish)
                finish = po.end_b[st] + exposed;
            if (per * nb > dp_comm)
                dp_comm = per * nb;
            if (L->distributed_optimizer)
                gath[st] = tr_plan_allgather_s(sd[st].trainable * wb, d, dpv.bw, dpv.lat);
        }
        if (gath[st] > gather)
            gather = gath[st];
        fin[st] = finish;
        if (finish > step_core)
            step_core = finish;
        opt[st] = plan_optimizer_s(c, sd[st].trainable, sd[st].shard, L->bf16);
        if (opt[st] > opt_max)
            opt_max = opt[st];
    }
    r->dp_comm_s = dp_comm;
    r->dp_exposed_s = step_core - r->pipeline_s;
    r->param_gather_s = gather;
    r->optimizer_s = opt_max;
    r->embed_sync_s = 0;
    if (P > 1) {
        int n0 = tr_topo_node_of(&topo, c->gpus_per_node, 0);
        int nl = tr_topo_node_of(&topo, c->gpus_per_node,
                                 tr_topo_rank(&topo, (tr_coords){.pp = P - 1}));
        link_view ev = view_of(c, n0 != nl ? TR_PLAN_LINK_INTER : TR_PLAN_LINK_INTRA, 1,
                               ranks_per_node);
        r->embed_sync_s = tr_plan_allreduce_s(4.0 * r->vocab_padded * h / t, 2, ev.bw, ev.lat);
    }
    r->step_time_s = step_core + r->embed_sync_s + opt_max + r->param_gather_s;

    if (ex) {
        for (int st = 0; st < P; st++) {
            double *pt = ex->parts + (size_t)st * TR_PLAN_PARTS;
            for (int k = 0; k < TR_PLAN_PARTS; k++)
                pt[k] = 0;
            for (int k = 0; k <= TR_PLAN_PART_TP; k++)
                pt[k] = M * (sc[st].k.f[k] + sc[st].k.b[k]);
            pt[TR_PLAN_PART_PP] = po.transfer[st];
            pt[TR_PLAN_PART_BUBBLE] = po.wait[st];
            pt[TR_PLAN_PART_DP] = fin[st] - po.end[st];
            int member = P > 1 && (st == 0 || st == P - 1);
            pt[TR_PLAN_PART_EMBED_SYNC] = member ? r->embed_sync_s : 0;
            pt[TR_PLAN_PART_OPTIMIZER] = opt[st];
            pt[TR_PLAN_PART_ZERO_GATHER] = gath[st];
            pt[TR_PLAN_PART_IDLE] = (step_core - fin[st]) + (member ? 0 : r->embed_sync_s) +
                                    (opt_max - opt[st]) + (gather - gath[st]);
        }
        ex->step_time_s = r->step_time_s;
    }
done:
    tr_free(sc);
    tr_free(buf);
    return rc;
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
    int ranks_per_node = c->gpus_per_node < world ? c->gpus_per_node : world;

    tr_pp_partition *part = tr_alloc(sizeof *part, "partition");
    stage_dp *sd = tr_alloc(sizeof *sd * (size_t)L.pp, "stage gradient buckets");
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
    rc = time_model(cfg, c, part, sd, ranks_per_node, ws, out, ex);
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
    out->train_tokens = train_tokens > 0 ? train_tokens
                                         : (double)cfg->training.train_iters *
                                               cfg->training.global_batch_size * m->seq_length;
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
