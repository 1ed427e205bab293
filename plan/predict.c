/* One layout on one cluster: memory per rank (largest stage) and the step time, assembled from
 * the formulas (formulas.c) and the pp/ event simulation of the schedule's op lists. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "dp/dp.h"
#include "model/gpt.h"
#include "plan/plan.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

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
    out->distributed_optimizer = p->use_distributed_optimizer;
    out->sequence_parallel = p->sequence_parallel;
    out->bf16 = t->precision && !strcmp(t->precision, "bf16");
    out->bucket_size_mb = p->ddp_bucket_size_mb;
    out->overlap_grad_reduce = p->overlap_grad_reduce;
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
    double params;    /* elements of the stage's flat buffers */
    int n_buckets;    /* gradient buckets */
    double shard;     /* DP rank 0's optimizer shard (the largest; params without ZeRO-1) */
} stage_dp;

/* Stage st's buckets and shard from dp/'s own layout (tr_dp_layout), with the tied embedding
 * copies aligned as the engine passes them when P > 1: tensors lie in reverse forward order,
 * so the first stage's wte ends its buffer and the last stage's copy starts it. */
static int stage_dp_layout(const tr_config *cfg, const tr_plan_layout *L, int vocab_padded,
                           int st, stage_dp *out)
{
    size_t n = (size_t)out->params;
    size_t wte = (size_t)vocab_padded * (size_t)cfg->model.hidden_size / (size_t)L->tp;
    tr_dp_config dc = {.bucket_size_mb = L->bucket_size_mb,
                       .overlap_grad_reduce = L->overlap_grad_reduce,
                       .distributed_optimizer = L->distributed_optimizer};
    tr_dp_range al = {st == 0 ? n - wte : 0, wte};
    if (L->pp > 1 && (st == 0 || st == L->pp - 1)) {
        dc.aligned = &al;
        dc.n_aligned = 1;
    }
    size_t shard = 0;
    int rc = tr_dp_layout(&dc, n, L->dp, 0, &out->n_buckets, &shard);
    if (rc)
        return tr_fail_context(rc, "%s: pipeline stage %d (%zu gradient elements per rank)",
                               tr_config_where(cfg, "parallel.ddp_bucket_size_mb"), st, n);
    out->shard = (double)shard;
    return TR_OK;
}

/* Bandwidth and latency a rank sees on a link. */
static void link_figures(const tr_plan_cluster *c, tr_plan_link l, int ranks_per_node,
                         double *bw, double *lat)
{
    if (l == TR_PLAN_LINK_INTER) {
        *bw = c->inter_bw / ranks_per_node;
        *lat = c->inter_latency;
    } else {
        *bw = c->intra_bw;
        *lat = c->intra_latency;
    }
}

static tr_plan_link group_link(const tr_node_report *rep, tr_group_kind k, int size)
{
    if (size <= 1)
        return TR_PLAN_LINK_NONE;
    return rep->max_nodes[k] > 1 ? TR_PLAN_LINK_INTER : TR_PLAN_LINK_INTRA;
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

/* Memory of every stage; fills the memory fields of r. peaks[P]: stored chunks per stage;
 * sd[P]: their parameters and optimizer shards. */
static void memory_model(const tr_config *cfg, const tr_plan_cluster *c,
                         const tr_pp_partition *part, const int *peaks, const stage_dp *sd,
                         int ranks_per_node, tr_plan_result *r)
{
    const tr_model_config *m = &cfg->model;
    const tr_plan_layout *L = &r->layout;
    int t = L->tp, P = L->pp, s = m->seq_length, b = L->micro_batch, h = m->hidden_size;
    double wb, gb, ob; /* ob: optimizer bytes per element of the shard (nothing sharded) */
    tr_plan_state_bytes(L->bf16, 0, 1, &wb, &gb, &ob);
    double act = tr_plan_layer_activation_bytes(s, b, h, m->num_attention_heads, t,
                                                L->sequence_parallel, L->recompute, L->bf16);
    double act_none = tr_plan_layer_activation_bytes(s, b, h, m->num_attention_heads, t,
                                                     L->sequence_parallel,
                                                     TR_PLAN_RECOMPUTE_NONE, L->bf16);
    double esize = L->bf16 ? 1.0 : 2.0;
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
        mm.grads = params * gb;
        mm.optimizer = sd[st].shard * ob;
        mm.activations = (double)peaks[st] * layers / L->v * act;
        if (L->recompute == TR_PLAN_RECOMPUTE_FULL)
            mm.recompute = act_none;
        else if (L->recompute == TR_PLAN_RECOMPUTE_SELECTIVE)
            mm.recompute = 5.0 * m->num_attention_heads * (double)s * s * b / t * esize;
        if (st == 0)
            mm.embedding = (double)peaks[st] / L->v * s * b * h / (sp ? t : 1) * esize;
        if (st == P - 1)
            mm.loss = 8.0 * s * b * (double)r->vocab_padded / t;
        mm.reserved = c->reserved_bytes;
        mm.total = mm.weights + mm.grads + mm.optimizer + mm.activations + mm.recompute +
                   mm.embedding + mm.loss + mm.reserved;
        r->stage_memory[st] = mm.total;
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
    double tf[TR_PP_MAX_STAGES], tb[TR_PP_MAX_STAGES]; /* per micro-batch, whole stage */
    double cf[TR_PP_MAX_STAGES], cb[TR_PP_MAX_STAGES]; /* compute parts */
} stage_costs;

/* Per-stage forward/backward costs of one micro-batch. */
static void stage_time_model(const tr_config *cfg, const tr_pp_partition *part, double rate,
                             double ar_tp, stage_costs *sc, tr_plan_result *r)
{
    const tr_model_config *m = &cfg->model;
    const tr_plan_layout *L = &r->layout;
    int t = L->tp, P = L->pp, s = m->seq_length, b = L->micro_batch, h = m->hidden_size;
    double f1 = tr_plan_layer_forward_flops(s, b, h) / t; /* one layer, one rank */
    double logits = 2.0 * s * b * (double)h * r->vocab_padded / t;
    double rc_flops = 0; /* recomputed in backward */
    if (L->recompute == TR_PLAN_RECOMPUTE_FULL)
        rc_flops = f1;
    else if (L->recompute == TR_PLAN_RECOMPUTE_SELECTIVE)
        rc_flops = 4.0 * b * (double)s * s * h / t; /* the attention core */
    double rc_comm = L->recompute == TR_PLAN_RECOMPUTE_FULL ? 2 * ar_tp : 0;
    for (int st = 0; st < P; st++) {
        int layers = 0;
        for (int ch = 0; ch < L->v; ch++)
            layers += tr_pp_layer_count(part, st, ch);
        double cf = layers * f1 / rate, cb = layers * (2 * f1 + rc_flops) / rate;
        double tf = cf + layers * 2 * ar_tp, tb = cb + layers * (2 * ar_tp + rc_comm);
        if (st == 0)
            tf += ar_tp; /* vocab-parallel embedding */
        if (st == P - 1) {
            cf += logits / rate;
            cb += 2 * logits / rate;
            tf += logits / rate;
            tb += 2 * logits / rate + ar_tp;
        }
        sc->cf[st] = cf;
        sc->cb[st] = cb;
        sc->tf[st] = tf;
        sc->tb[st] = tb;
    }
}

/* The pipeline: simulate the op lists; per stage the end of its last op and of its last
 * backward. */
static int run_pipeline(const tr_plan_layout *L, const stage_costs *sc, double p2p,
                        const tr_pp_schedule *stages, double *end_last, double *end_lastb,
                        tr_plan_result *r)
{
    int P = L->pp, rc = TR_OK;
    double tfc[TR_PP_MAX_STAGES], tbc[TR_PP_MAX_STAGES];
    int uniform = p2p == 0;
    for (int st = 0; st < P; st++) {
        tfc[st] = sc->tf[st] / L->v;
        tbc[st] = sc->tb[st] / L->v;
        if (tfc[st] != tfc[0] || tbc[st] != tbc[0])
            uniform = 0;
    }
    long total = 0;
    for (int st = 0; st < P; st++)
        total += stages[st].n_ops;
    double *ends = tr_alloc(sizeof(double) * (size_t)(total + 1), "pipeline simulation");
    double **rows = tr_alloc(sizeof(double *) * (size_t)P, "pipeline simulation");
    if (!ends || !rows) {
        tr_free(ends);
        tr_free(rows);
        return TR_ERR_NOMEM;
    }
    for (long st = 0, off = 0; st < P; off += stages[st].n_ops, st++)
        rows[st] = ends + off;
    tr_pp_costs costs = {.tf = tfc[0], .tb = tbc[0], .tf_stage = tfc, .tb_stage = tbc, .p2p = p2p};
    tr_pp_sim_result sim;
    rc = tr_pp_simulate(stages, P, TR_PP_COMM_BATCHED, &costs, &sim, NULL, rows);
    if (!rc) {
        r->pipeline_s = sim.makespan;
        r->bubble_fraction = sim.bubble_fraction;
        r->bubble_fraction_theory =
            tr_pp_bubble_theory(P, L->num_micro_batches, L->schedule, L->v);
        for (int st = 0; st < P; st++) {
            const tr_pp_schedule *s = &stages[st];
            end_last[st] = s->n_ops ? rows[st][s->n_ops - 1] : 0;
            end_lastb[st] = 0;
            for (int i = s->n_ops - 1; i >= 0; i--)
                if (s->ops[i].kind == TR_PP_OP_BACKWARD) {
                    end_lastb[st] = rows[st][i];
                    break;
                }
        }
        if (uniform && fabs(r->bubble_fraction - r->bubble_fraction_theory) > 1e-9)
            rc = tr_fail(TR_ERR_INTERNAL,
                         "pipeline bubble: the event simulation gives %.12f but the closed "
                         "formula %.12f for equal stages (P=%d, M=%d, %s, v=%d)",
                         r->bubble_fraction, r->bubble_fraction_theory, P,
                         L->num_micro_batches, tr_pp_kind_name(L->schedule), L->v);
    }
    tr_free(ends);
    tr_free(rows);
    return rc;
}

static int time_model(const tr_config *cfg, const tr_plan_cluster *c, const tr_pp_partition *part,
                      const tr_pp_schedule *stages, const stage_dp *sd, int ranks_per_node,
                      tr_plan_result *r)
{
    const tr_model_config *m = &cfg->model;
    const tr_plan_layout *L = &r->layout;
    int t = L->tp, P = L->pp, d = L->dp, s = m->seq_length, b = L->micro_batch, h = m->hidden_size;
    tr_topo topo;
    int rc = tr_topo_init(&topo, r->world, t, P, tr_topo_order_name(L->order));
    if (rc)
        return rc;
    tr_node_report rep;
    rc = tr_topo_node_report(&topo, c->gpus_per_node, &rep);
    if (rc)
        return rc;
    r->tp_link = group_link(&rep, TR_GROUP_TP, t);
    r->dp_link = group_link(&rep, TR_GROUP_DP, d);
    /* PP: inter-node as soon as one pair of adjacent stages sits on different nodes. */
    r->pp_link = P > 1 ? TR_PLAN_LINK_INTRA : TR_PLAN_LINK_NONE;
    for (int st = 0; st + 1 < P; st++) {
        int a = tr_topo_node_of(&topo, c->gpus_per_node,
                                tr_topo_rank(&topo, (tr_coords){.dp = 0, .tp = 0, .pp = st}));
        int z = tr_topo_node_of(&topo, c->gpus_per_node,
                                tr_topo_rank(&topo, (tr_coords){.dp = 0, .tp = 0, .pp = st + 1}));
        if (a != z)
            r->pp_link = TR_PLAN_LINK_INTER;
    }
    tr_plan_link embed_link = TR_PLAN_LINK_NONE;
    if (P > 1)
        embed_link = tr_topo_node_of(&topo, c->gpus_per_node, 0) !=
                             tr_topo_node_of(&topo, c->gpus_per_node,
                                             tr_topo_rank(&topo, (tr_coords){.pp = P - 1}))
                         ? TR_PLAN_LINK_INTER
                         : TR_PLAN_LINK_INTRA;

    double bw, lat;
    double rate = c->peak_flops * c->gemm_efficiency /
                  (c->device == TR_PLAN_DEVICE_CPU ? ranks_per_node : 1);
    r->compute_rate = rate;
    double elem = L->bf16 ? 2.0 : 4.0;
    double act_msg = (double)s * b * h * elem;
    link_figures(c, r->tp_link, ranks_per_node, &bw, &lat);
    double ar_tp = tr_plan_allreduce_s(act_msg, t, bw, lat);

    stage_costs *sc = tr_alloc(sizeof *sc, "stage costs");
    double *end_last = tr_alloc(sizeof(double) * 2 * (size_t)P, "stage ends");
    if (!sc || !end_last) {
        tr_free(sc);
        tr_free(end_last);
        return TR_ERR_NOMEM;
    }
    double *end_lastb = end_last + P;
    stage_time_model(cfg, part, rate, ar_tp, sc, r);
    r->slow_stage = 0;
    for (int st = 1; st < P; st++)
        if (sc->tf[st] + sc->tb[st] > sc->tf[r->slow_stage] + sc->tb[r->slow_stage])
            r->slow_stage = st;
    int w = r->slow_stage;
    r->tf_s = sc->tf[w];
    r->tb_s = sc->tb[w];
    r->compute_f_s = sc->cf[w];
    r->compute_b_s = sc->cb[w];
    r->tp_comm_s = sc->tf[w] + sc->tb[w] - sc->cf[w] - sc->cb[w];
    if (r->tp_comm_s < 0) /* rounding when there is none */
        r->tp_comm_s = 0;

    r->p2p_s = 0;
    if (P > 1) {
        link_figures(c, r->pp_link, ranks_per_node, &bw, &lat);
        r->p2p_s = act_msg / (L->sequence_parallel && t > 1 ? t : 1) / bw + lat;
    }
    rc = run_pipeline(L, sc, r->p2p_s, stages, end_last, end_lastb, r);
    if (rc) {
        tr_free(sc);
        tr_free(end_last);
        return rc;
    }

    /* Data parallel: gradient buckets during each stage's last backward. */
    double wb, gb, ob;
    tr_plan_state_bytes(L->bf16, L->distributed_optimizer, d, &wb, &gb, &ob);
    link_figures(c, r->dp_link, ranks_per_node, &bw, &lat);
    double step_core = 0, dp_comm = 0, gather = 0;
    for (int st = 0; st < P; st++) {
        double finish = end_last[st];
        if (d > 1) {
            double grads = sd[st].params * gb;
            int nb = sd[st].n_buckets;
            double per = L->distributed_optimizer
                             ? tr_plan_reduce_scatter_s(grads / nb, d, bw, lat)
                             : tr_plan_allreduce_s(grads / nb, d, bw, lat);
            double exposed =
                tr_plan_dp_exposed_s(per, nb, sc->tb[st] / L->v, L->overlap_grad_reduce);
            if (end_lastb[st] + exposed > finish)
                finish = end_lastb[st] + exposed;
            if (per * nb > dp_comm)
                dp_comm = per * nb;
            if (L->distributed_optimizer) {
                double g = tr_plan_allgather_s(sd[st].params * wb, d, bw, lat);
                if (g > gather)
                    gather = g;
            }
        }
        if (finish > step_core)
            step_core = finish;
    }
    r->dp_comm_s = dp_comm;
    r->dp_exposed_s = step_core - r->pipeline_s;
    r->param_gather_s = gather;
    r->embed_sync_s = 0;
    if (P > 1) {
        link_figures(c, embed_link, ranks_per_node, &bw, &lat);
        r->embed_sync_s = tr_plan_allreduce_s(4.0 * r->vocab_padded * h / t, 2, bw, lat);
    }
    r->step_time_s = step_core + r->embed_sync_s + r->param_gather_s;
    tr_free(sc);
    tr_free(end_last);
    return TR_OK;
}

int tr_plan_evaluate(const tr_config *cfg, const tr_plan_layout *layout, int world,
                     const tr_plan_cluster *c, int time, double train_tokens, tr_plan_result *out)
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
    tr_pp_schedule *stages = tr_alloc(sizeof *stages * (size_t)L.pp, "schedules");
    int *peaks = tr_alloc(sizeof(int) * (size_t)L.pp, "peaks");
    stage_dp *sd = tr_alloc(sizeof *sd * (size_t)L.pp, "stage gradient buckets");
    if (!part || !stages || !peaks || !sd) {
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
    rc = tr_pp_schedule_build_all(L.pp, L.num_micro_batches, L.schedule, L.v, stages);
    if (rc)
        goto done;
    for (int st = 0; st < L.pp; st++) {
        peaks[st] = tr_pp_peak_activations(&stages[st]);
        int layers = 0;
        for (int ch = 0; ch < L.v; ch++)
            layers += tr_pp_layer_count(part, st, ch);
        sd[st].params = tr_plan_stage_params(m, out->vocab_padded, L.tp, L.pp, st, layers);
        if ((rc = stage_dp_layout(cfg, &L, out->vocab_padded, st, &sd[st]))) {
            tr_pp_schedule_free_all(stages, L.pp);
            goto done;
        }
        if (sd[st].n_buckets > out->dp_buckets)
            out->dp_buckets = sd[st].n_buckets;
    }
    memory_model(cfg, c, part, peaks, sd, ranks_per_node, out);
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
    if (time)
        rc = time_model(cfg, c, part, stages, sd, ranks_per_node, out);
    tr_pp_schedule_free_all(stages, L.pp);
    if (rc || !time)
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
    tr_free(stages);
    tr_free(peaks);
    tr_free(sd);
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
