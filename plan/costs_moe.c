/* The mixture-of-experts MLP of one layer on one rank for one micro-batch of T token rows
 * (model/gpt_moe.c as written; Megatron-core's dropless layer takes the same steps): the
 * router's GEMM (T, E, h) on every TP rank (the router is replicated), its top-k, the k T
 * routed rows' experts copied to the host and sorted there (each expert's row count is a GEMM
 * size: a stream sync a layer), the rows gathered, each expert's fc and fc_proj on its rows
 * (the dense MLP's shapes split over TP, one expert after the other), the weighted
 * scatter-add; backward the same in reverse and the router's two gradient GEMMs. The load is
 * assumed balanced: each expert runs k T / E rows (a real router's imbalance changes the GEMM
 * shapes, not the FLOPs). Costs by costs.c's and costs_trident.c's GEMM functions and
 * device.c's streaming model; rows of h are `e` bytes an element (trident's kernels: fp32),
 * the router's outputs fp32, indices int32. Not timed: the experts' bias adds and bias
 * gradients (experts with biases, GPT-2's), the activation's launch per expert (one pass over
 * the k T rows is), the CUDA scatter's sort of its rows. */
#include <string.h>

#include "plan/plan_internal.h"

/* One copy between host and device with the stream sync it makes (cudaMemcpy: the queue
 * drains, the host sorts, the next kernels are launched after it), and the host link's
 * bandwidth: estimates (PCIe 4.0 x16 less protocol), not yet measured on trident's kernels. */
#define PLAN_HOST_COPY_S 10e-6
#define PLAN_HOST_BW 25e9

static double host_copy_s(const tr_plan_cluster *c, double bytes)
{
    return PLAN_HOST_COPY_S + c->kernel_overhead_s + bytes / PLAN_HOST_BW;
}

void plan_moe_expert_gemms(const plan_cost_ctx *x, double T, plan_gemm_fn gemm_s, double *fwd,
                           double *bwd)
{
    const tr_plan_cluster *c = x->c;
    double qkv, F, fc, h = x->m->hidden_size, t = x->L->tp;
    tr_plan_layer_dims(x->m, &qkv, &F, &fc);
    /* the rank's E/EP experts, each on k T EP / E rows: under expert parallelism the EP ranks'
     * rows for them (balanced: as many as the rank sends away) */
    double ep = x->ep > 1 ? x->ep : 1, E = x->m->num_experts / ep;
    double r = x->m->moe_router_topk * T * ep / x->m->num_experts; /* rows an expert */
    /* fc (r, fc/t, h), fc_proj (r, h, F/t); backward each one's dX and dW (accumulating) */
    *fwd = E * (gemm_s(c, r, fc / t, h, 0) + gemm_s(c, r, h, F / t, 0));
    *bwd = E * (gemm_s(c, r, h, fc / t, 0) + gemm_s(c, fc / t, h, r, 1) +
                gemm_s(c, r, F / t, h, 0) + gemm_s(c, h, F / t, r, 1));
}

void plan_moe_routing_cost(const plan_cost_ctx *x, double T, double e, plan_gemm_fn gemm_s,
                           double *fwd, double *bwd)
{
    const tr_plan_cluster *c = x->c;
    const tr_model_config *m = x->m;
    double h = m->hidden_size, E = m->num_experts, M = m->moe_router_topk * T;
    int aux = !m->moe_router_load_balancing_type ||
              !strcmp(m->moe_router_load_balancing_type, "aux_loss");
    /* forward: the router's GEMM; its softmax and top-k (logits in; probabilities, log-sum-exps,
     * experts and weights out); to the host the experts (and the probabilities for the
     * balancing loss) and the log-sum-exps, back the sorted rows' tokens and slots; the rows
     * and their weights gathered; the output zeroed and the weighted rows added into it */
    *fwd = gemm_s(c, T, E, h, 0) + tr_plan_stream_s(c, 4 * (2 * T * E + T + 2 * M)) +
           host_copy_s(c, 4 * M) + (aux ? host_copy_s(c, 4 * T * E) : 0) + host_copy_s(c, 4 * T) +
           2 * host_copy_s(c, 4 * M) + tr_plan_stream_s(c, 4 * M + 2 * e * M * h) +
           tr_plan_stream_s(c, 12 * M) + tr_plan_stream_s(c, e * T * h) +
           tr_plan_stream_s(c, 8 * M + e * M * h + 2 * e * T * h);
    /* backward: the rows' gradients and their weights' (dy gathered, y read); the input
     * gradient zeroed and the rows' added into it, the weights' likewise; the router's backward
     * (and on TP rank 0 the balancing loss's gradient copied to the device); its two GEMMs */
    double aux_grad = m->moe_aux_loss_coeff != 0 ? host_copy_s(c, 4 * E) : 0;
    *bwd = tr_plan_stream_s(c, 12 * M + 3 * e * M * h) + tr_plan_stream_s(c, e * T * h) +
           tr_plan_stream_s(c, 4 * M + e * M * h + 2 * e * T * h) +
           tr_plan_stream_s(c, 4 * M) + tr_plan_stream_s(c, 16 * M) +
           tr_plan_stream_s(c, 4 * (2 * T * E + T + 3 * M)) + aux_grad +
           gemm_s(c, E, h, T, 1) + gemm_s(c, T, h, E, 1);
}
