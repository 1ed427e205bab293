/* GPT stage backward: transformer layers in reverse, then the embeddings (first stage).
 * Gradients of parameters accumulate (+=); see model/gpt.h. */
#include "model/gpt_internal.h"

#include "core/core.h"

void tr_linear_backward(tr_gpt *g, float *dx, float *dW, float *db, const float *dy,
                        const float *x, const float *W, int N, int IC, int OC)
{
    const tr_kernels *k = g->k;
    /* dx (N, IC) = dy (N, OC) @ W (OC, IC) */
    if (dx)
        k->gemm(NULL, 0, 0, N, IC, OC, 1.0f, dy, OC, W, IC, 0.0f, dx, IC);
    /* dW (OC, IC) += dy^T (OC, N) @ x (N, IC) */
    k->gemm(NULL, 1, 0, OC, IC, N, 1.0f, dy, OC, x, IC, 1.0f, dW, IC);
    if (db)
        k->bias_backward(NULL, db, dy, N, OC);
}

/* dres (BT, C): on entry the gradient of the layer output, on exit of the layer input x. */
static void layer_backward(tr_gpt *g, int l, const tr_layer_acts *L, const float *x, float *dres,
                           int B)
{
    const tr_kernels *k = g->k;
    tr_gpt_scratch *sc = &g->scratch;
    int T = g->s.T, C = g->s.C, NH = g->s.NH, BT = B * T;
    /* MLP: residual3 = residual2 + fc_proj(gelu(fc(ln2(residual2)))) */
    tr_linear_backward(g, sc->dfch_gelu, layer_grad(g, l, L_FCPROJ_W), layer_grad(g, l, L_FCPROJ_B),
                       dres, L->fch_gelu, layer_param(g, l, L_FCPROJ_W), BT, 4 * C, C);
    k->gelu_backward(NULL, sc->dfch, L->fch, sc->dfch_gelu, (size_t)BT * 4 * C);
    tr_linear_backward(g, sc->dln, layer_grad(g, l, L_FC_W), layer_grad(g, l, L_FC_B), sc->dfch,
                       L->ln2, layer_param(g, l, L_FC_W), BT, C, 4 * C);
    k->layernorm_backward(NULL, dres, layer_grad(g, l, L_LN2_W), layer_grad(g, l, L_LN2_B), sc->dln,
                          L->residual2, layer_param(g, l, L_LN2_W), L->ln2_mean, L->ln2_rstd, BT,
                          C);
    /* attention: residual2 = x + attn_proj(attention(qkv(ln1(x)))) */
    tr_linear_backward(g, sc->datty, layer_grad(g, l, L_ATTPROJ_W), layer_grad(g, l, L_ATTPROJ_B),
                       dres, L->atty, layer_param(g, l, L_ATTPROJ_W), BT, C, C);
    k->attention_backward(NULL, sc->dqkv, sc->datt, sc->datty, L->qkv, L->att, B, T, NH, C / NH);
    tr_linear_backward(g, sc->dln, layer_grad(g, l, L_QKV_W), layer_grad(g, l, L_QKV_B), sc->dqkv,
                       L->ln1, layer_param(g, l, L_QKV_W), BT, C, 3 * C);
    k->layernorm_backward(NULL, dres, layer_grad(g, l, L_LN1_W), layer_grad(g, l, L_LN1_B), sc->dln,
                          x, layer_param(g, l, L_LN1_W), L->ln1_mean, L->ln1_rstd, BT, C);
}

int tr_gpt_backward(tr_gpt *g, tr_gpt_acts *a, const float *dhidden_out)
{
    const tr_kernels *k = g->k;
    const tr_gpt_shape *s = &g->s;
    int B = a->B, T = s->T, C = s->C, BT = B * T;
    size_t bytes = (size_t)BT * C * sizeof(float);
    if (!s->is_last && !dhidden_out)
        return tr_fail(TR_ERR_INVALID, "a stage before the last needs the output gradient");
    /* work in place: the first stage in scratch, the others directly in their input grad */
    float *dres = s->is_first ? g->scratch.dres : a->dinput;
    k->copy(NULL, dres, s->is_last ? a->dhead : dhidden_out, bytes);
    for (int l = s->layer_count - 1; l >= 0; l--) {
        const float *x = l == 0 ? a->stage_in : a->layers[l - 1].residual3;
        layer_backward(g, l, &a->layers[l], x, dres, B);
    }
    if (s->is_first) {
        k->position_backward(NULL, g->tensors[g->wpe].grad, dres, B, T, C);
        k->embedding_backward(NULL, g->tensors[g->wte].grad, dres, a->tokens, BT, C, 0, s->Vp);
    }
    return TR_OK;
}
