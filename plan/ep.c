/* Expert parallelism in the planner (parallel.expert_model_parallel_size, Megatron-core 0.8's
 * rules): EP divides DP and the expert count and goes without context parallelism; an EP group
 * is EP consecutive dp coordinates of one (tp, pp) (Megatron's order tp-cp-ep-dp-pp); a rank
 * runs E/EP experts of every MoE layer (split over TP as the dense MLP), the router,
 * attention, norms and embeddings replicated. Per MoE layer and micro-batch the peers exchange
 * their per-expert row counts, each rank's k N routed rows go to their experts' owners and the
 * outputs come back: an all-to-all each way over the EP group, forward and backward (and full
 * recompute's forward again). Routing is assumed balanced, as everywhere in the planner: a
 * rank receives as many rows as it sends, its E/EP experts k T EP / E rows each (costs_moe.c).
 * Every runtime holds E/EP experts a rank, their gradients summed (ZeRO: sharded) over the
 * EDP group, the D/EP ranks holding the same experts (predict.c, step_time.c); trident's
 * engine (model/gpt_moe_ep.c, train/: a second tr_dp over EDP) does so at every ZeRO stage and
 * sizes its experts' row buffers for EP k N received rows (acts.c). */
#include <string.h>

#include "core/core.h"
#include "plan/plan_internal.h"

int plan_ep_check(const tr_config *cfg, const tr_plan_layout *L)
{
    const tr_model_config *m = &cfg->model;
    int ep = plan_ep(L), cp = L->cp > 1 ? L->cp : 1;
    if (ep == 1)
        return TR_OK;
    const char *at = tr_config_where(cfg, "parallel.expert_model_parallel_size");
    if (m->num_experts <= 0)
        return tr_fail(TR_ERR_CONFIG, "%s: parallel.expert_model_parallel_size = %d needs "
                       "experts (model.num_experts is 0); allowed: 1", at, ep);
    if (L->dp % ep || m->num_experts % ep)
        return tr_fail(TR_ERR_CONFIG, "%s: parallel.expert_model_parallel_size = %d must "
                       "divide DP %d and model.num_experts %d; allowed: a common divisor of "
                       "the two", at, ep, L->dp, m->num_experts);
    if (cp > 1)
        return tr_fail(TR_ERR_CONFIG, "%s: parallel.expert_model_parallel_size = %d with "
                       "context_parallel_size %d is not built (Megatron-core 0.8's rule); "
                       "allowed: EP 1 or CP 1", at, ep, cp);
    return TR_OK;
}

int plan_ep_supported(const tr_plan_cluster *c, const tr_plan_layout *L)
{
    /* trident's expert parallelism (yaml/validate_moe.c) exchanges the rows in host memory
     * over UCX: the CPU backend; Megatron's runtimes run it as Megatron does */
    if (plan_ep(L) == 1 || !L->trident_kernels || c->device == TR_PLAN_DEVICE_CPU)
        return TR_OK;
    return tr_fail(TR_ERR_CONFIG,
                   "parallel.expert_model_parallel_size = %d on runtime trident: trident's "
                   "expert parallelism exchanges the routed rows in host memory on the CPU "
                   "backend (here: a GPU cluster); plan it with cluster.runtime megatron, or "
                   "EP 1", plan_ep(L));
}

int plan_ep_pinned(const tr_config *cfg)
{
    for (int i = 0; i < cfg->n_marks; i++)
        if (cfg->marks[i].key && !strcmp(cfg->marks[i].key, "parallel.expert_model_parallel_size"))
            return 1;
    return 0;
}

int plan_ep_choices(const tr_config *cfg, const tr_plan_cluster *c, const tr_plan_layout *L,
                    int *eps)
{
    int E = cfg->model.num_experts, pinned = cfg->parallel.expert_model_parallel_size;
    if (plan_ep_pinned(cfg)) {
        eps[0] = pinned > 1 ? pinned : 1;
        return 1;
    }
    int n = 0, d = L->dp;
    eps[n++] = 1;
    tr_plan_layout two = *L;
    two.ep = 2;
    if (L->cp > 1 || plan_ep_supported(c, &two)) { /* (the runtime's rule: none tried) */
        tr_clear_error();
        return n;
    }
    for (int ep = 2; E > 0 && ep <= d && n < 32; ep++)
        if (d % ep == 0 && E % ep == 0)
            eps[n++] = ep;
    return n;
}

void plan_ep_spans(const tr_topo *topo, int gpus_per_node, int ep, int *ep_nodes,
                   int *edp_nodes)
{
    /* a group's ranks grow with dp in both orders, and block placement puts rank r on node
     * r / gpus_per_node: a group spans the nodes of its first and last member and those
     * between */
    int d = topo->dp, t = topo->tp, P = topo->pp;
    *ep_nodes = *edp_nodes = 1;
    for (int pp = 0; pp < P; pp++)
        for (int tp = 0; tp < t; tp++)
            for (int g = 0; g < d / ep; g++) {
                int first = tr_topo_rank(topo, (tr_coords){.dp = g * ep, .tp = tp, .pp = pp});
                int last = tr_topo_rank(topo, (tr_coords){.dp = g * ep + ep - 1, .tp = tp,
                                                          .pp = pp});
                int n = tr_topo_node_of(topo, gpus_per_node, last) -
                        tr_topo_node_of(topo, gpus_per_node, first) + 1;
                if (n > *ep_nodes)
                    *ep_nodes = n;
                if (g >= ep) /* (EDP groups: ep of them, dp = j, j + EP, ...) */
                    continue;
                first = tr_topo_rank(topo, (tr_coords){.dp = g, .tp = tp, .pp = pp});
                last = tr_topo_rank(topo, (tr_coords){.dp = d - ep + g, .tp = tp, .pp = pp});
                n = tr_topo_node_of(topo, gpus_per_node, last) -
                    tr_topo_node_of(topo, gpus_per_node, first) + 1;
                if (n > *edp_nodes)
                    *edp_nodes = n;
            }
}

double plan_alltoall_s(double bytes, int n, int nodes, double intra_bw, double intra_lat,
                       double inter_bw, double inter_lat)
{
    if (n <= 1)
        return 0;
    nodes = nodes < 1 ? 1 : nodes > n ? n : nodes;
    int m = (n + nodes - 1) / nodes; /* members a node */
    double intra = (m - 1.0) / n * bytes / intra_bw;
    double inter = nodes > 1 ? (double)(n - m) / n * bytes / inter_bw : 0;
    return (intra > inter ? intra : inter) + (n - 1) * (nodes > 1 ? inter_lat : intra_lat);
}

void plan_ep_cost(const plan_cost_ctx *x, plan_cost *o)
{
    if (x->ep <= 1 || !plan_moe(x))
        return;
    double forward = x->a2a_counts + 2 * x->a2a;
    o->f[TR_PLAN_PART_EP] += forward;
    o->b[TR_PLAN_PART_EP] += 2 * x->a2a + (x->L->recompute == TR_PLAN_RECOMPUTE_FULL ? forward : 0);
}
