/* GPT stage forward: embeddings (first stage), transformer layers, head + loss (last stage).
 * Shapes: B micro-batch, T sequence, C hidden, NH heads, HS = C/NH, Vp padded vocabulary. */
#include "model/gpt_internal.h"

#include "core/core.h"

void tr_linear_forward(tr_gpt *g, float *y, const float *x, const float *W, const float *b,
                       int N, int IC, int OC, float beta)
{
    /* y (N, OC) = x (N, IC) @ W^T (IC, OC) + beta * y */
    g->k->gemm(NULL, 0, 1, N, OC, IC, 1.0f, x, IC, W, IC, beta, y, OC);
    if (b)
        g->k->bias_add(NULL, y, b, N, OC);
}

/* One transformer layer: x (BT, C) -> L->residual3 (BT, C). */
static void layer_forward(tr_gpt *g, int l, tr_layer_acts *L, const float *x, int B)
{
    const tr_kernels *k = g->k;
    int T = g->s.T, C = g->s.C, NH = g->s.NH, BT = B * T;
    k->layernorm_forward(NULL, L->ln1, L->ln1_mean, L->ln1_rstd, x, layer_param(g, l, L_LN1_W),
                         layer_param(g, l, L_LN1_B), BT, C, g->s.eps);
    tr_linear_forward(g, L->qkv, L->ln1, layer_param(g, l, L_QKV_W), layer_param(g, l, L_QKV_B),
                      BT, C, 3 * C, 0.0f);
    k->attention_forward(NULL, L->atty, L->att, L->qkv, B, T, NH, C / NH);
    /* residual2 = x + atty @ Wproj^T + bproj */
    k->copy(NULL, L->residual2, x, (size_t)BT * C * sizeof(float));
    tr_linear_forward(g, L->residual2, L->atty, layer_param(g, l, L_ATTPROJ_W),
                      layer_param(g, l, L_ATTPROJ_B), BT, C, C, 1.0f);
    k->layernorm_forward(NULL, L->ln2, L->ln2_mean, L->ln2_rstd, L->residual2,
                         layer_param(g, l, L_LN2_W), layer_param(g, l, L_LN2_B), BT, C, g->s.eps);
    tr_linear_forward(g, L->fch, L->ln2, layer_param(g, l, L_FC_W), layer_param(g, l, L_FC_B), BT,
                      C, 4 * C, 0.0f);
    k->gelu_forward(NULL, L->fch_gelu, L->fch, (size_t)BT * 4 * C);
    /* residual3 = residual2 + gelu(fc) @ Wfcproj^T + bfcproj */
    k->copy(NULL, L->residual3, L->residual2, (size_t)BT * C * sizeof(float));
    tr_linear_forward(g, L->residual3, L->fch_gelu, layer_param(g, l, L_FCPROJ_W),
                      layer_param(g, l, L_FCPROJ_B), BT, 4 * C, C, 1.0f);
}

/* Final LN, tied head, cross-entropy; with loss_grad_scale != 0 also the head's backward,
 * leaving the gradient of h in a->dhead. h: (BT, C). */
static int head_forward(tr_gpt *g, tr_gpt_acts *a, const float *h, const int32_t *targets,
                        float loss_grad_scale, float *loss_out)
{
    const tr_kernels *k = g->k;
    tr_gpt_scratch *sc = &g->scratch;
    int B = a->B, BT = B * g->s.T, C = g->s.C, Vp = g->s.Vp, V = g->s.V;
    for (int i = 0; i < BT; i++)
        if (targets[i] < 0 || targets[i] >= V)
            return tr_fail(TR_ERR_INVALID, "target token %d at position %d is outside the vocabulary [0, %d)",
                           targets[i], i, V);
    k->to_device(NULL, sc->targets, targets, (size_t)BT * sizeof(int32_t));
    const float *lnf_w = g->tensors[g->lnf_w].param, *lnf_b = g->tensors[g->lnf_b].param;
    const float *wte = g->tensors[g->head_wte].param;
    k->layernorm_forward(NULL, sc->lnf, sc->lnf_mean, sc->lnf_rstd, h, lnf_w, lnf_b, BT, C,
                         g->s.eps);
    /* logits (BT, Vp) = lnf @ wte^T */
    tr_linear_forward(g, sc->logits, sc->lnf, wte, NULL, BT, C, Vp, 0.0f);
    k->xent_row_max(NULL, sc->maxv, sc->logits, BT, Vp, V);
    k->xent_row_sumexp(NULL, sc->sumexp, sc->logits, sc->maxv, BT, Vp, V);
    k->xent_pick(NULL, sc->picked, sc->logits, sc->targets, BT, Vp, 0);
    k->xent_loss(NULL, sc->losses, sc->maxv, sc->sumexp, sc->picked, BT);
    k->to_host(NULL, g->losses_host, sc->losses, (size_t)BT * sizeof(float));
    double sum = 0;
    for (int i = 0; i < BT; i++)
        sum += g->losses_host[i];
    *loss_out = (float)(sum / BT);
    if (loss_grad_scale == 0.0f)
        return TR_OK;
    k->xent_backward(NULL, sc->dlogits, sc->logits, sc->maxv, sc->sumexp, sc->targets, BT, Vp, V,
                     0, loss_grad_scale);
    /* dlnf = dlogits @ wte; dwte += dlogits^T @ lnf */
    tr_linear_backward(g, sc->dln, g->tensors[g->head_wte].grad, NULL, sc->dlogits, sc->lnf, wte,
                       BT, C, Vp);
    k->zero(NULL, a->dhead, (size_t)BT * C * sizeof(float));
    k->layernorm_backward(NULL, a->dhead, g->tensors[g->lnf_w].grad, g->tensors[g->lnf_b].grad,
                          sc->dln, h, lnf_w, sc->lnf_mean, sc->lnf_rstd, BT, C);
    return TR_OK;
}

int tr_gpt_forward(tr_gpt *g, tr_gpt_acts *a, const int32_t *tokens, const float *hidden_in,
                   const int32_t *targets, float loss_grad_scale, float *loss_out)
{
    const tr_kernels *k = g->k;
    const tr_gpt_shape *s = &g->s;
    int B = a->B, T = s->T, C = s->C, BT = B * T;
    if (s->is_first) {
        if (!tokens)
            return tr_fail(TR_ERR_INVALID, "the first stage needs token ids");
        for (int i = 0; i < BT; i++)
            if (tokens[i] < 0 || tokens[i] >= s->V)
                return tr_fail(TR_ERR_INVALID,
                               "token %d at position %d is outside the vocabulary [0, %d)",
                               tokens[i], i, s->V);
        k->to_device(NULL, a->tokens, tokens, (size_t)BT * sizeof(int32_t));
        k->embedding_forward(NULL, a->stage_in, a->tokens, g->tensors[g->wte].param, BT, C, 0,
                             s->Vp);
        k->position_forward(NULL, a->stage_in, g->tensors[g->wpe].param, B, T, C);
    } else {
        if (!hidden_in)
            return tr_fail(TR_ERR_INVALID, "a stage after the first needs the hidden state");
        k->copy(NULL, a->stage_in, hidden_in, (size_t)BT * C * sizeof(float));
    }
    const float *x = a->stage_in;
    for (int l = 0; l < s->layer_count; l++) {
        layer_forward(g, l, &a->layers[l], x, B);
        x = a->layers[l].residual3;
    }
    if (s->is_last) {
        if (!targets || !loss_out)
            return tr_fail(TR_ERR_INVALID, "the last stage needs targets and a loss output");
        return head_forward(g, a, x, targets, loss_grad_scale, loss_out);
    }
    return TR_OK;
}
