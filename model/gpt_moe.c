/* The mixture-of-experts MLP (model/gpt.h "Mixture of experts"; Megatron-core 0.8's MoE layer,
 * dropless): the router's top-k, the experts' MLPs on their tokens' rows, the weighted sum
 * reduced once over TP; the load-balancing and z losses. Sizes as in gpt_internal.h; E
 * experts, k per token, M = N k routed rows, sorted by expert and within one by token (the
 * host makes the order from the chosen experts: every expert's row count is a GEMM size).
 * With expert parallelism (gpt_moe_ep.c) the routed rows go to their experts' EP owners and
 * the experts here run every peer's rows for them. */
#include "model/gpt_internal.h"

#include "core/core.h"

int gpt_moe_host_ensure(tr_gpt *g, int N)
{
    size_t E = (size_t)g->s.num_experts, M = (size_t)N * g->s.moe_topk;
    if (N <= g->moe_host_rows)
        return TR_OK;
    gpt_moe_host_free(g);
    g->moe_idx_host = tr_alloc(M * sizeof(int32_t), "routing staging");
    g->moe_perm_host = tr_alloc(2 * M * sizeof(int32_t), "routing staging");
    g->moe_probs_host = tr_alloc((size_t)N * E * sizeof(float), "routing staging");
    g->moe_aux_host = tr_alloc(E * sizeof(float), "routing staging");
    if (!g->moe_idx_host || !g->moe_perm_host || !g->moe_probs_host || !g->moe_aux_host)
        return TR_ERR_NOMEM;
    g->moe_host_rows = N;
    return TR_OK;
}

void gpt_moe_host_free(tr_gpt *g)
{
    tr_free(g->moe_idx_host);
    tr_free(g->moe_perm_host);
    tr_free(g->moe_probs_host);
    tr_free(g->moe_aux_host);
    g->moe_idx_host = g->moe_perm_host = NULL;
    g->moe_probs_host = g->moe_aux_host = NULL;
    g->moe_host_rows = 0;
}

static float *expert_param(tr_gpt *g, int l, int e, int which)
{
    tr_param_tensor *t = expert_tensor(g, l, e, which);
    return t ? t->param : NULL;
}

static float *expert_grad(tr_gpt *g, int l, int e, int which)
{
    tr_param_tensor *t = expert_tensor(g, l, e, which);
    return t ? t->grad : NULL;
}

/* The row blocks the experts here run, in order: block b = p El + j is source p's (0 without
 * expert parallelism) rows of expert e0 + j, counts[b] rows, blocks laid end to end. */
typedef struct {
    int blocks, El, e0;
    const int *counts;
    int ep; /* 1: the rows are L->moe_ex, exchanged with the EP peers */
} expert_blocks;

static expert_blocks blocks_of(const tr_gpt *g, const layer_acts *L)
{
    int ep = g->ep && L->moe_ex, P = ep ? g->ep_size : 1, El = g->s.num_experts / P;
    return (expert_blocks){P * El, El, ep ? g->ep_rank * El : 0,
                           ep ? L->moe_ep_counts : L->moe_counts, ep};
}

/* y (n, OC) = x (n, IC) W^T (+ b) */
static void linear(const tr_kernels *k, float *y, const float *x, const float *W, const float *b,
                   int n, int IC, int OC)
{
    k->gemm(NULL, 0, 1, n, OC, IC, 1.0f, x, IC, W, IC, 0.0f, y, OC);
    if (b)
        k->bias_add(NULL, y, b, n, OC);
}

/* dx (n, IC) = dy W; dW (OC, IC) += dy^T x; db (or NULL) += colsum dy */
static void linear_backward(const tr_kernels *k, float *dx, float *dW, float *db, const float *dy,
                            const float *x, const float *W, int n, int IC, int OC)
{
    k->gemm(NULL, 0, 0, n, IC, OC, 1.0f, dy, OC, W, IC, 0.0f, dx, IC);
    k->gemm(NULL, 1, 0, OC, IC, n, 1.0f, dy, OC, x, IC, 1.0f, dW, IC);
    if (db)
        k->bias_backward(NULL, db, dy, n, OC);
}

/* The routed rows from the chosen experts idx (N, k) (device): the expert counts into
 * L->moe_counts (host) and L->moe_tok / moe_slot (device), sorted by expert, then token. */
static void route(tr_gpt *g, const layer_acts *L, int N)
{
    const tr_kernels *k = g->k;
    int E = g->s.num_experts, K = g->s.moe_topk, M = N * K;
    int32_t *idx = g->moe_idx_host, *tok = g->moe_perm_host, *slot = g->moe_perm_host + M;
    k->to_host(NULL, idx, L->moe_idx, (size_t)M * sizeof(int32_t));
    int *count = L->moe_counts, next[1024];
    for (int e = 0; e < E; e++)
        count[e] = 0;
    for (int i = 0; i < M; i++)
        count[idx[i]]++;
    for (int e = 0, at = 0; e < E; at += count[e], e++)
        next[e] = at;
    for (int n = 0; n < N; n++)
        for (int j = 0; j < K; j++) {
            int i = next[idx[n * K + j]]++;
            tok[i] = n;
            slot[i] = n * K + j;
        }
    k->to_device(NULL, L->moe_tok, tok, (size_t)M * sizeof(int32_t));
    k->to_device(NULL, L->moe_slot, slot, (size_t)M * sizeof(int32_t));
}

/* The layer's losses without their coefficients into L->moe_losses: Megatron's switch load
 * balancing E / (N^2 k) sum_e P_e f_e (P_e = sum_n probs[n, e], f_e tokens of expert e; with
 * moe_aux_loss, else 0) and the z-loss mean_n lse_n^2. */
static void layer_losses(tr_gpt *g, const layer_acts *L, int N)
{
    int E = g->s.num_experts, K = g->s.moe_topk;
    float *p = g->moe_probs_host;
    double sum = 0;
    if (g->s.moe_aux_loss) {
        g->k->to_host(NULL, p, L->moe_probs, (size_t)N * E * sizeof(float));
        for (int e = 0; e < E; e++) {
            double P = 0;
            for (int n = 0; n < N; n++)
                P += p[(size_t)n * E + e];
            sum += P * L->moe_counts[e];
        }
    }
    L->moe_losses[0] = sum * E / ((double)N * N * K);
    g->k->to_host(NULL, p, L->moe_lse, (size_t)N * sizeof(float));
    double z = 0;
    for (int n = 0; n < N; n++)
        z += (double)p[n] * p[n];
    L->moe_losses[1] = z / N;
}

int gpt_moe_mlp(tr_gpt *g, int l, const layer_acts *L, const float *h, int N, float *logits,
                float *sum)
{
    const tr_kernels *k = g->k;
    const tr_gpt_shape *s = &g->s;
    int C = s->C, E = s->num_experts, K = s->moe_topk, M = N * K;
    int rc = gpt_moe_host_ensure(g, N);
    if (rc)
        return rc;
    k->gemm(NULL, 0, 1, N, E, C, 1.0f, h, C, layer_param(g, l, L_ROUTER_W), C, 0.0f, logits, E);
    k->moe_router_forward(NULL, L->moe_idx, L->moe_weights, L->moe_probs, L->moe_lse, logits, N,
                          E, K, s->moe_pre_softmax);
    route(g, L, N);
    layer_losses(g, L, N);
    k->gather_rows(NULL, L->moe_x, h, L->moe_tok, M, C);
    k->gather_rows(NULL, L->moe_w, L->moe_weights, L->moe_slot, M, 1);
    expert_blocks eb = blocks_of(g, L);
    const float *x = L->moe_x;
    float *y = L->moe_y;
    if (eb.ep) { /* the rows to their experts' owners, the owners' rows here */
        if ((rc = gpt_moe_ep_counts(g, L)) || (rc = gpt_moe_ep_rows(g, L, x, L->moe_ex, C, 1)))
            return rc;
        x = L->moe_ex;
        y = g->scratch.moe_ey;
    }
    /* each expert on its rows: fc, the activation, fc_proj's partial product (its bias once,
     * on TP rank 0, inside the weighted sum as Megatron's expert output) */
    for (int b = 0, o = 0; b < eb.blocks; o += eb.counts[b], b++) {
        int n = eb.counts[b], e = eb.e0 + b % eb.El;
        if (!n)
            continue;
        float *fc = L->fch + (size_t)o * g->Fwl, *act = L->fch_gelu + (size_t)o * g->Fl;
        linear(k, fc, x + (size_t)o * C, expert_param(g, l, e, L_FC_W),
               expert_param(g, l, e, L_FC_B), n, C, g->Fwl);
        gpt_mlp_act_forward(g, act, fc, (size_t)n * g->Fl);
        linear(k, y + (size_t)o * C, act, expert_param(g, l, e, L_FCPROJ_W),
               s->tp_rank == 0 ? expert_param(g, l, e, L_FCPROJ_B) : NULL, n, g->Fl, C);
    }
    if (eb.ep && (rc = gpt_moe_ep_rows(g, L, y, L->moe_y, C, 0))) /* the outputs come back */
        return rc;
    k->zero(NULL, sum, (size_t)N * C * sizeof(float));
    k->scatter_add_rows(NULL, sum, L->moe_y, L->moe_tok, L->moe_w, M, C);
    return TR_OK;
}

int gpt_moe_forward(tr_gpt *g, int l, const layer_acts *L, int B)
{
    gpt_scratch *sc = &g->scratch;
    int C = g->s.C, N = B * g->s.T, r0, Nl;
    gpt_rows(g, B, &r0, &Nl);
    /* ln2 of this rank's rows, then all N (gathered under SP): the router's and experts' input */
    norm_forward(g, L->ln2 + (size_t)r0 * C, L->ln2_mean, L->ln2_rstd, L->residual2,
                 layer_param(g, l, L_LN2_W), layer_param(g, l, L_LN2_B), Nl);
    int rc = tr_tp_gather_from_sequence_region_forward(&g->tp, L->ln2 + (size_t)r0 * C, L->ln2, N,
                                                       C);
    if (!rc)
        rc = gpt_moe_mlp(g, l, L, L->ln2, N, sc->moe_logits, sc->moe_sum);
    if (rc)
        return rc;
    /* one reduction over TP (reduce-scatter under SP) with the residual, as fc_proj's */
    rc = tr_tp_row_reduce(&g->tp, L->residual3, gpt_hidden_drop(g) ? NULL : L->residual2,
                          sc->moe_sum, NULL, NULL, N, C);
    if (!rc) /* hidden dropout: residual3 = residual2 + drop(experts') */
        gpt_dropout_add(g, L->residual3, L->residual2, l, TR_DROPOUT_MLP_OUT, B);
    return rc;
}

/* The balancing and z losses' gradients of layer l's router (weight g->moe_aux_weight): on TP
 * rank 0 only, since the router's input gradient and weight gradient are summed over TP. *aux
 * (E device floats) or NULL, *z the z-loss's factor. */
static void loss_gradients(tr_gpt *g, const layer_acts *L, int N, const float **aux, float *z)
{
    const tr_gpt_shape *s = &g->s;
    int E = s->num_experts, K = s->moe_topk;
    float w = g->moe_aux_weight;
    *aux = NULL;
    *z = 0.0f;
    if (s->tp_rank != 0 || w == 0.0f)
        return;
    if (s->moe_aux_coeff != 0.0f) { /* d/dprobs[n, e] = coeff E f_e / (N^2 k) */
        for (int e = 0; e < E; e++)
            g->moe_aux_host[e] = (float)((double)w * s->moe_aux_coeff * E * L->moe_counts[e] /
                                         ((double)N * N * K));
        g->k->to_device(NULL, g->scratch.moe_aux_grad, g->moe_aux_host, (size_t)E * sizeof(float));
        *aux = g->scratch.moe_aux_grad;
    }
    *z = (float)((double)w * s->moe_z_coeff / N); /* of z_coeff mean_n lse_n^2 */
}

int gpt_moe_backward(tr_gpt *g, int l, const layer_acts *L, float *dres, int B)
{
    const tr_kernels *k = g->k;
    const tr_gpt_shape *s = &g->s;
    gpt_scratch *sc = &g->scratch;
    int C = s->C, N = B * s->T, E = s->num_experts, K = s->moe_topk, M = N * K, r0, Nl, rc;
    gpt_rows(g, B, &r0, &Nl);
    /* the output gradient of all N rows (gathered under SP: the reduce-scatter's conjugate) */
    const float *dy = gpt_dropout_grad(g, dres, l, TR_DROPOUT_MLP_OUT, B); /* (dres: none) */
    if (s->sequence_parallel) {
        rc = tr_tp_gather_from_sequence_region_forward(&g->tp, dy, sc->moe_sum, N, C);
        if (rc)
            return rc;
        dy = sc->moe_sum;
    }
    /* routed rows' gradients w dy[tok] and the weights' dy[tok] . y */
    k->scatter_add_rows_backward(NULL, sc->moe_dx, sc->moe_dw, dy, L->moe_y, L->moe_tok, L->moe_w,
                                 M, C);
    expert_blocks eb = blocks_of(g, L);
    const float *x = L->moe_x;
    float *dxs = sc->moe_dx;
    if (eb.ep) { /* the rows' output gradients to their experts' owners */
        if ((rc = gpt_moe_ep_rows(g, L, sc->moe_dx, sc->moe_ey, C, 1)))
            return rc;
        x = L->moe_ex;
        dxs = sc->moe_ey;
    }
    for (int b = 0, o = 0; b < eb.blocks; o += eb.counts[b], b++) {
        int n = eb.counts[b], e = eb.e0 + b % eb.El;
        if (!n)
            continue;
        float *dx = dxs + (size_t)o * C, *dact = sc->moe_dact + (size_t)o * g->Fl;
        float *dh = sc->moe_dfch + (size_t)o * g->Fwl;
        linear_backward(k, dact, expert_grad(g, l, e, L_FCPROJ_W), expert_grad(g, l, e, L_FCPROJ_B),
                        dx, L->fch_gelu + (size_t)o * g->Fl, expert_param(g, l, e, L_FCPROJ_W), n,
                        g->Fl, C);
        gpt_mlp_act_backward(g, dh, L->fch + (size_t)o * g->Fwl, dact, (size_t)n * g->Fl);
        /* (its rows of moe_dx are read: now the expert's input gradient) */
        linear_backward(k, dx, expert_grad(g, l, e, L_FC_W), expert_grad(g, l, e, L_FC_B), dh,
                        x + (size_t)o * C, expert_param(g, l, e, L_FC_W), n, C, g->Fwl);
    }
    if (eb.ep && (rc = gpt_moe_ep_rows(g, L, sc->moe_ey, sc->moe_dx, C, 0))) /* input grads back */
        return rc;
    /* d ln2 (N, C), partial over TP: the experts' input gradients, then the router's */
    float *dln = sc->dln;
    k->zero(NULL, dln, (size_t)N * C * sizeof(float));
    k->scatter_add_rows(NULL, dln, sc->moe_dx, L->moe_tok, NULL, M, C);
    k->zero(NULL, sc->moe_dweights, (size_t)M * sizeof(float));
    k->scatter_add_rows(NULL, sc->moe_dweights, sc->moe_dw, L->moe_slot, NULL, M, 1);
    const float *aux;
    float z;
    loss_gradients(g, L, N, &aux, &z);
    k->moe_router_backward(NULL, sc->moe_dlogits, sc->moe_dweights, L->moe_idx, L->moe_weights,
                           L->moe_probs, L->moe_lse, aux, z, N, E, K, s->moe_pre_softmax);
    k->gemm(NULL, 1, 0, E, C, N, 1.0f, sc->moe_dlogits, E, L->ln2, C, 1.0f,
            layer_grad(g, l, L_ROUTER_W), C);
    k->gemm(NULL, 0, 0, N, C, E, 1.0f, sc->moe_dlogits, E, layer_param(g, l, L_ROUTER_W), C, 1.0f,
            dln, C);
    /* summed over TP: all-reduced, or reduce-scattered to this rank's rows under SP */
    if (s->sequence_parallel)
        rc = tr_tp_reduce_scatter_to_sequence_region_forward(&g->tp, dln, dln + (size_t)r0 * C, N,
                                                             C);
    else
        rc = tr_tp_copy_to_region_backward(&g->tp, dln, (size_t)N * C);
    if (rc)
        return rc;
    norm_backward(g, dres, layer_grad(g, l, L_LN2_W), layer_grad(g, l, L_LN2_B),
                  dln + (size_t)r0 * C, NULL, L->residual2, layer_param(g, l, L_LN2_W),
                  L->ln2_mean, L->ln2_rstd, Nl);
    return TR_OK;
}
