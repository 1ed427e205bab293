/* Expert parallelism (model/gpt.h tr_gpt_set_ep): EP rank r runs experts [r El, (r+1) El) of
 * every MoE layer, El = E / EP. A layer's routed rows are sorted by expert, so the rows of
 * peer p's experts are one contiguous block: the counts go out first (each peer its El
 * experts' counts), then the rows (tr_comm_alltoallv), and the outputs come back the same way
 * reversed. The rows an owner receives are source-major, then by expert (the peer's order). */
#include <string.h>

#include "model/gpt_internal.h"

#include "core/core.h"

int tr_gpt_set_ep(tr_gpt *g, tr_comm *ep_comm)
{
    if (!ep_comm || tr_comm_size(ep_comm) == 1)
        return g->s.ep_size > 1 ? tr_fail(TR_ERR_INVALID, "the model holds EP rank %d of %d's "
                                          "experts but has no expert-parallel group",
                                          g->s.ep_rank, g->s.ep_size)
                                : TR_OK;
    int ep = tr_comm_size(ep_comm), E = g->s.num_experts;
    if (!E)
        return tr_fail(TR_ERR_INVALID, "an expert-parallel group of %d given to a model without "
                       "experts", ep);
    if (E % ep)
        return tr_fail(TR_ERR_INVALID, "%d experts do not split over %d expert-parallel ranks",
                       E, ep);
    if (strcmp(tr_comm_backend(ep_comm), "ucx"))
        return tr_fail(TR_ERR_CONFIG, "expert parallelism exchanges host rows (a UCX group, "
                       "training.device cpu); the EP group's backend is %s",
                       tr_comm_backend(ep_comm));
    if (g->scratch.B)
        return tr_fail(TR_ERR_INVALID, "tr_gpt_set_ep after activations were made");
    if (g->s.ep_size > 1 && (g->s.ep_size != ep || g->s.ep_rank != tr_comm_rank(ep_comm)))
        return tr_fail(TR_ERR_INVALID, "the model's experts are EP rank %d of %d's but the "
                       "expert-parallel group is rank %d of %d", g->s.ep_rank, g->s.ep_size,
                       tr_comm_rank(ep_comm), ep);
    g->ep = ep_comm;
    g->ep_size = ep;
    g->ep_rank = tr_comm_rank(ep_comm);
    return TR_OK;
}

void tr_gpt_shape_set_ep(tr_gpt_shape *s, int ep, int rank)
{
    s->ep_size = ep > 1 ? ep : 0;
    s->ep_rank = ep > 1 ? rank : 0;
}

void tr_gpt_local_experts(const tr_gpt *g, int *first, int *count)
{
    *count = g->s.num_experts / gpt_ep_split(&g->s);
    *first = g->s.ep_rank * *count;
}

int gpt_moe_ep_counts(tr_gpt *g, const layer_acts *L)
{
    size_t el = (size_t)(g->s.num_experts / g->ep_size), n[TR_MOE_MAX_EP];
    for (int p = 0; p < g->ep_size; p++)
        n[p] = el;
    return tr_comm_alltoallv(g->ep, L->moe_counts, n, L->moe_ep_counts, n, TR_COMM_I32);
}

int gpt_moe_ep_rows(tr_gpt *g, const layer_acts *L, const float *src, float *dst, int width,
                    int to_owner)
{
    int el = g->s.num_experts / g->ep_size;
    size_t tok[TR_MOE_MAX_EP], own[TR_MOE_MAX_EP];
    for (int p = 0; p < g->ep_size; p++) {
        tok[p] = own[p] = 0;
        for (int j = 0; j < el; j++) {
            tok[p] += (size_t)L->moe_counts[p * el + j] * (size_t)width;
            own[p] += (size_t)L->moe_ep_counts[p * el + j] * (size_t)width;
        }
    }
    return tr_comm_alltoallv(g->ep, src, to_owner ? tok : own, dst, to_owner ? own : tok,
                             TR_COMM_F32);
}
