/* The step time of one layout on one cluster (plan_time_model): each stage's compute and TP
 * costs per micro-batch (costs.c), the links its TP, DP and P2P groups use on the nodes, the
 * pipeline's op lists simulated (pipeline.c), then the data-parallel gradient reduction, the
 * embedding sync, the optimizer and the ZeRO parameter gather; predict.c calls it after the
 * memory model. */
#include <math.h>
#include <string.h>

#include "core/core.h"
#include "plan/plan.h"
#include "plan/plan_internal.h"

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
    plan_cp_cost(x, x->L->bf16 ? 2.0 : 4.0, &layer);
    plan_ep_cost(x, &layer);
    plan_embedding_cost(x, &emb);
    plan_output_cost(x, &out);
    double lf = 0, lb = 0, ef = 0, eb = 0, of = 0, ob = 0;
    for (int k = 0; k < PLAN_COST_PARTS; k++) {
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
        for (int k = 0; k < PLAN_COST_PARTS; k++) {
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

int plan_time_model(const tr_config *cfg, const tr_plan_cluster *c, const tr_pp_partition *part,
                    const plan_stage_dp *sd, int ranks_per_node, tr_plan_ws *ws,
                    tr_plan_result *r, tr_plan_explain *ex)
{
    const tr_model_config *m = &cfg->model;
    const tr_plan_layout *L = &r->layout;
    int cp = L->cp > 1 ? L->cp : 1;
    int t = L->tp, P = L->pp, d = L->dp, b = L->micro_batch, h = m->hidden_size;
    int M = L->num_micro_batches;
    /* context parallelism: a rank's costs are those of s / CP tokens a sample (the attention
     * scores them against all s keys: plan_keys), its gradients are summed over DP x CP */
    tr_model_config local = *m;
    local.seq_length = m->seq_length / cp;
    int s = local.seq_length, dcp = d * cp;
    tr_topo topo;
    int rc = tr_topo_init_cp(&topo, r->world, t, cp, P, tr_topo_order_name(L->order));
    if (rc)
        return rc;
    int key[6] = {r->world, t, P, (int)L->order, c->gpus_per_node, cp};
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
    link_view dpv = kind_view(&rep, c, cp > 1 ? TR_GROUP_DP_CP : TR_GROUP_DP, dcp, ranks_per_node);
    link_view cpv = kind_view(&rep, c, TR_GROUP_CP, cp, ranks_per_node);
    r->tp_link = tpv.link;
    r->dp_link = dpv.link;
    r->cp_link = cpv.link;
    /* expert parallelism: the EP group's all-to-all (every rank of a node exchanging at once
     * shares its NICs) and the EDP group's expert gradients */
    int ep = plan_ep(L), edp = d / ep, ep_nodes = 1, edp_nodes = 1;
    if (ep > 1)
        plan_ep_spans(&topo, c->gpus_per_node, ep, &ep_nodes, &edp_nodes);
    link_view edpv = edp <= 1 ? (link_view){TR_PLAN_LINK_NONE, 0, 0}
                              : view_of(c, edp_nodes > 1 ? TR_PLAN_LINK_INTER : TR_PLAN_LINK_INTRA,
                                        (edp + edp_nodes - 1) / edp_nodes, ranks_per_node);
    r->ep_link = ep <= 1 ? TR_PLAN_LINK_NONE
                 : ep_nodes > 1 ? TR_PLAN_LINK_INTER : TR_PLAN_LINK_INTRA;
    r->edp_link = plan_ep_split(L) ? edpv.link : TR_PLAN_LINK_NONE;
    double rate = c->peak_flops * c->gemm_efficiency /
                  (c->device == TR_PLAN_DEVICE_CPU ? ranks_per_node : 1);
    r->compute_rate = rate;
    double elem = L->bf16 ? 2.0 : 4.0;
    double act_msg = (double)s * b * h * elem;
    plan_cost_ctx x = {.c = c, .m = &local, .L = L, .vocab_padded = r->vocab_padded, .rate = rate,
                       .ar_tp = tr_plan_allreduce_s(act_msg, t, tpv.bw, tpv.lat),
                       .tp_bw = tpv.bw, .tp_lat = tpv.lat, .ft = &cfg->finetune, .cp = cp,
                       .keys = m->seq_length, .cp_bw = cpv.bw, .cp_lat = cpv.lat, .ep = ep};
    if (ep > 1) {
        /* the routed rows of the rank's N tokens, k a token, of h elements (trident's: fp32):
         * N = b s (trident: every TP rank routes the whole micro-batch), b s / t where
         * Megatron's sequence parallelism splits them over TP (its TP all-gather of the
         * received rows not counted apart); and the rows' per-expert counts */
        link_view in = view_of(c, TR_PLAN_LINK_INTRA, 1, ranks_per_node);
        link_view out = view_of(c, TR_PLAN_LINK_INTER, 1, ranks_per_node);
        int sp_ep = L->sequence_parallel && t > 1 && !L->trident_kernels;
        double rows = (double)m->moe_router_topk * s * b / (sp_ep ? t : 1);
        x.a2a = plan_alltoall_s(rows * h * (L->trident_kernels ? 4.0 : elem), ep, ep_nodes,
                                in.bw, in.lat, out.bw, out.lat);
        x.a2a_counts = plan_alltoall_s(4.0 * m->num_experts, ep, ep_nodes, in.bw, in.lat, out.bw,
                                       out.lat);
    }

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
    r->compute_f_s = w->tf - w->k.f[TR_PLAN_PART_TP] - w->k.f[TR_PLAN_PART_CP] -
                     w->k.f[TR_PLAN_PART_EP];
    r->compute_b_s = w->tb - w->k.b[TR_PLAN_PART_TP] - w->k.b[TR_PLAN_PART_CP] -
                     w->k.b[TR_PLAN_PART_EP];
    r->tp_comm_s = w->k.f[TR_PLAN_PART_TP] + w->k.b[TR_PLAN_PART_TP];
    r->cp_comm_s = w->k.f[TR_PLAN_PART_CP] + w->k.b[TR_PLAN_PART_CP];
    r->ep_comm_s = w->k.f[TR_PLAN_PART_EP] + w->k.b[TR_PLAN_PART_EP];

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
    tr_plan_state_bytes(L->bf16, L->distributed_optimizer, dcp, &wb, &gb, &ob);
    double step_core = 0, dp_comm = 0, gather = 0, opt_max = 0;
    for (int st = 0; st < P; st++) {
        double finish = po.end[st];
        gath[st] = 0;
        if (dcp > 1) {
            double grads = (sd[st].trainable - sd[st].experts) * gb;
            int nb = sd[st].n_buckets;
            double per = L->distributed_optimizer
                             ? tr_plan_reduce_scatter_s(grads / nb, dcp, dpv.bw, dpv.lat)
                             : tr_plan_allreduce_s(grads / nb, dcp, dpv.bw, dpv.lat);
            if (sd[st].n_expert_buckets > 0) {
                /* EP: the experts' buckets over EDP after the dense ones over DP, timed as
                 * one run of buckets of their mean length */
                int ne = sd[st].n_expert_buckets;
                double eg = sd[st].experts * gb / ne;
                double pe = L->distributed_optimizer
                                ? tr_plan_reduce_scatter_s(eg, edp, edpv.bw, edpv.lat)
                                : tr_plan_allreduce_s(eg, edp, edpv.bw, edpv.lat);
                per = (per * nb + pe * ne) / (nb + ne);
                nb += ne;
            }
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
                gath[st] = tr_plan_allgather_s((sd[st].trainable - sd[st].experts) * wb, dcp,
                                               dpv.bw, dpv.lat) +
                           tr_plan_allgather_s(sd[st].experts * wb, edp, edpv.bw, edpv.lat);
        }
        if (gath[st] > gather)
            gather = gath[st];
        fin[st] = finish;
        if (finish > step_core)
            step_core = finish;
        opt[st] = plan_optimizer_s(c, sd[st].trainable, sd[st].shard + sd[st].expert_shard,
                                   L->bf16);
        if (opt[st] > opt_max)
            opt_max = opt[st];
    }
    r->dp_comm_s = dp_comm;
    r->dp_exposed_s = step_core - r->pipeline_s;
    r->param_gather_s = gather;
    r->optimizer_s = opt_max;
    r->embed_sync_s = 0;
    /* the tied word embedding's two copies (first and last stage); an untied output layer has
     * none to keep equal (the engine's embedding ranges are the tied copies alone) */
    int tied = !(m->normalization && m->untie_embeddings_and_output_weights);
    if (P > 1 && tied) {
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
            for (int k = 0; k < PLAN_COST_PARTS; k++)
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
