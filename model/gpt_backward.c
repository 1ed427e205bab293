/* GPT stage backward: transformer layers in reverse, then the embeddings (first stage).
 * Gradients of parameters accumulate (+=); see model/gpt.h. Sizes as in gpt_internal.h. */
#include "model/gpt_internal.h"

#include "core/core.h"

/* The column-parallel QKV or fc layer's backward into sc->dln, its input ln kept by the
 * forward (bf16 storage where gpt_ln16). W, b: layer tensor slots; t: the LoRA target. */
static int column_backward_of(tr_gpt *g, const layer_acts *L, int l, int B, const float *dy,
                              const float *ln, int W, int b, int OCl, int t)
{
    int C = g->s.C, N = B * g->s.T;
    if (gpt_ln16(g))
        return tr_tp_column_linear_backward16(&g->tp, g->scratch.dln, layer_grad(g, l, W),
                                              layer_grad(g, l, b), dy, (const uint16_t *)ln,
                                              layer_param(g, l, W), N, C, OCl);
    tr_tp_lora lo; /* the LoRA adapter (NULL: none), made right before its layer */
    return tr_tp_column_linear_backward_lora(&g->tp, g->scratch.dln, layer_grad(g, l, W),
                                             layer_grad(g, l, b), dy, ln, layer_param(g, l, W),
                                             N, C, OCl, gpt_lora(g, L, l, t, B, &lo));
}

/* The attention projection's backward from dres (Nl, C), then the fused attention's into
 * sc->dqkv (bf16 storage where gpt_qkv16): the probabilities are recomputed inside the kernel
 * from qkv (bf16 storage where gpt_qkv16), the output L->atty (bf16 storage where gpt_atty16)
 * and the saved log-sum-exps (so selective recompute has nothing to do). */
static int projection_then_attention(tr_gpt *g, const layer_acts *L, int l, const float *dres,
                                     int B)
{
    const tr_kernels *k = g->k;
    gpt_scratch *sc = &g->scratch;
    int T = g->s.T, C = g->s.C, Al = g->Al, N = B * T, rc;
    float *dW = layer_grad(g, l, L_ATTPROJ_W), *db = layer_grad(g, l, L_ATTPROJ_B);
    const float *W = layer_param(g, l, L_ATTPROJ_W);
    dres = gpt_dropout_grad(g, dres, l, TR_DROPOUT_ATTN_OUT, B); /* (dres itself: no dropout) */
    if (gpt_atty16(g)) {
        const uint16_t *atty16 = (const uint16_t *)L->atty;
        int qkv16 = gpt_qkv16(g); /* qkv, its gradient and the output's gradient bf16 too */
        rc = qkv16 ? tr_tp_row_linear_backward16_dx16(&g->tp, (uint16_t *)sc->datty, dW, db, dres,
                                                       atty16, W, N, Al, C, sc->wide)
                   : tr_tp_row_linear_backward16(&g->tp, sc->datty, dW, db, dres, atty16, W, N,
                                                 Al, C, sc->wide);
        if (rc)
            return rc;
        if (qkv16)
            k->attention_backward_qkv16(NULL, (uint16_t *)sc->dqkv, sc->att_rowsum,
                                        (const uint16_t *)sc->datty, (const uint16_t *)L->qkv,
                                        atty16, L->lse, g->alibi, B, T, g->NHl, g->NGl, g->HS,
                                        g->segments);
        else if (uses_gqa_attention(g))
            k->attention_gqa_backward16(NULL, sc->dqkv, sc->att_rowsum, sc->datty, L->qkv, atty16,
                                        L->lse, g->alibi, B, T, g->NHl, g->NGl, g->HS,
                                        g->segments);
        else
            k->attention_backward16(NULL, sc->dqkv, sc->att_rowsum, sc->datty, L->qkv, atty16,
                                    L->lse, B, T, g->NHl, g->HS, g->segments);
        return TR_OK;
    }
    tr_tp_lora lo; /* the LoRA adapter (NULL: none), made right before its layer */
    rc = tr_tp_row_linear_backward_lora(&g->tp, sc->datty, dW, db, dres, L->atty, W, N, Al, C,
                                        sc->wide, gpt_lora(g, L, l, LORA_PROJ, B, &lo));
    if (rc)
        return rc;
    if (gpt_cp_size(g) > 1)
        return gpt_cp_attention_backward(g, sc->dqkv, sc->datty, L->qkv, L->atty, L->lse, l,
                                         B);
    if (gpt_attn_drop(g))
        gpt_attention_dropout_backward(g, L, l, B);
    else if (uses_gqa_attention(g))
        k->attention_gqa_backward(NULL, sc->dqkv, sc->att_rowsum, sc->datty, L->qkv, L->atty,
                                  L->lse, g->alibi, B, T, g->NHl, g->NGl, g->HS, g->segments);
    else
        k->attention_backward(NULL, sc->dqkv, sc->att_rowsum, sc->datty, L->qkv, L->atty,
                              L->lse, B, T, g->NHl, g->HS, g->segments);
    return TR_OK;
}

/* The MLP's backward: residual3 = residual2 + fc_proj(act(fc(ln2(mlp_in)))) (mlp_in:
 * residual2, or x with the parallel residual), from dres (Nl, C) = d residual3 through ln2
 * into dres (+= d mlp_in). */
static int mlp_backward(tr_gpt *g, int l, const layer_acts *L, const float *mlp_in, float *dres,
                        int B)
{
    const tr_tp *tp = &g->tp;
    gpt_scratch *sc = &g->scratch;
    int C = g->s.C, N = B * g->s.T, r0, Nl, rc;
    gpt_rows(g, B, &r0, &Nl);
    const float *dln_own = sc->dln + (size_t)r0 * C; /* this rank's rows of dln */
    tr_tp_lora lo; /* LoRA adapters (NULL: none), each made right before its layer */
    int dact16 = gpt_dact16(g); /* fc_proj's input gradient in bf16 storage */
    /* or straight through the GELU into fc's output gradient, in the GEMM (kernels.h's
     * linear_backward_gelu16, where fc's output and its gradient are bf16; fc's bias gradient
     * then with fc's weight gradient, its linear_backward's db) */
    int through_gelu = dact16 && gpt_fch16(g) && g->k->linear_backward_gelu16 &&
                       gpt_gelu_in_gemm(g);
    /* fc_proj's output gradient: dres through the hidden dropout's mask (else dres itself);
     * dres stays the residual's, which ln2's backward adds to */
    const float *dy = gpt_dropout_grad(g, dres, l, TR_DROPOUT_MLP_OUT, B);
    if (through_gelu)
        rc = tr_tp_row_linear_backward_gelu16(tp, (uint16_t *)sc->dfch, NULL,
                                              layer_grad(g, l, L_FCPROJ_W),
                                              layer_grad(g, l, L_FCPROJ_B), dy,
                                              (const uint16_t *)L->fch_gelu,
                                              (const uint16_t *)L->fch,
                                              layer_param(g, l, L_FCPROJ_W), N, g->Fl, C,
                                              sc->wide);
    else if (dact16)
        rc = tr_tp_row_linear_backward16_dx16(tp, (uint16_t *)sc->dfch_gelu,
                                              layer_grad(g, l, L_FCPROJ_W),
                                              layer_grad(g, l, L_FCPROJ_B), dy,
                                              (const uint16_t *)L->fch_gelu,
                                              layer_param(g, l, L_FCPROJ_W), N, g->Fl, C,
                                              sc->wide);
    else if (gpt_gelu16(g)) /* the GELU output kept in bf16 storage */
        rc = tr_tp_row_linear_backward16(tp, sc->dfch_gelu, layer_grad(g, l, L_FCPROJ_W),
                                         layer_grad(g, l, L_FCPROJ_B), dy,
                                         (const uint16_t *)L->fch_gelu,
                                         layer_param(g, l, L_FCPROJ_W), N, g->Fl, C, sc->wide);
    else
        rc = tr_tp_row_linear_backward_lora(tp, sc->dfch_gelu, layer_grad(g, l, L_FCPROJ_W),
                                            layer_grad(g, l, L_FCPROJ_B), dy, L->fch_gelu,
                                            layer_param(g, l, L_FCPROJ_W), N, g->Fl, C,
                                            sc->wide, gpt_lora(g, L, l, LORA_FC2, B, &lo));
    if (rc)
        return rc;
    int dln16 = 0; /* this norm's output gradient in bf16 storage (gpt_dln16) */
    if (gpt_dgelu16(g)) { /* fc's output gradient in bf16, its bias gradient summed beside */
        uint16_t *dfch16 = (uint16_t *)sc->dfch;
        int ln16 = gpt_ln16(g), fch16 = gpt_fch16(g);
        dln16 = gpt_dln16(g);
        if (!through_gelu) /* (else done in fc_proj's backward) */
            gpt_gelu_backward16(g)(NULL, dfch16, layer_grad(g, l, L_FC_B),
                                   fch16 ? NULL : L->fch, fch16 ? (const uint16_t *)L->fch : NULL,
                                   dact16 ? NULL : sc->dfch_gelu,
                                   dact16 ? (const uint16_t *)sc->dfch_gelu : NULL, N, g->Fl);
        rc = tr_tp_column_linear_backward_dy16(tp, sc->dln, dln16 ? (uint16_t *)sc->dln : NULL,
                                               layer_grad(g, l, L_FC_W),
                                               through_gelu ? layer_grad(g, l, L_FC_B) : NULL,
                                               dfch16,
                                               ln16 ? NULL : L->ln2,
                                               ln16 ? (const uint16_t *)L->ln2 : NULL,
                                               layer_param(g, l, L_FC_W), N, C, g->Fwl);
    } else {
        gpt_mlp_act_backward(g, sc->dfch, L->fch, sc->dfch_gelu, (size_t)N * g->Fl);
        rc = column_backward_of(g, L, l, B, sc->dfch, L->ln2, L_FC_W, L_FC_B, g->Fwl,
                                LORA_FC1);
    }
    if (rc)
        return rc;
    norm_backward(g, dres, layer_grad(g, l, L_LN2_W), layer_grad(g, l, L_LN2_B),
                  dln16 ? NULL : dln_own, dln16 ? (const uint16_t *)sc->dln : NULL, mlp_in,
                  layer_param(g, l, L_LN2_W), L->ln2_mean, L->ln2_rstd, Nl);
    return TR_OK;
}

/* The QKV layer's backward from sc->dqkv (the attention's, rotated back) through ln1 into
 * dres (+= d x): residual2 = x + attn_proj(attention(qkv(ln1(x)))). */
static int qkv_backward(tr_gpt *g, int l, const layer_acts *L, const float *x, float *dres,
                        int B)
{
    const tr_tp *tp = &g->tp;
    gpt_scratch *sc = &g->scratch;
    int C = g->s.C, N = B * g->s.T, r0, Nl, rc;
    gpt_rows(g, B, &r0, &Nl);
    const float *dln_own = sc->dln + (size_t)r0 * C; /* this rank's rows of dln */
    int dln16 = 0;
    if (gpt_qkv16(g)) { /* dqkv in bf16, read in place, QKV's bias gradient summed from it */
        int ln16 = gpt_ln16(g);
        dln16 = gpt_dln16(g);
        rc = tr_tp_column_linear_backward_dy16(tp, sc->dln, dln16 ? (uint16_t *)sc->dln : NULL,
                                               layer_grad(g, l, L_QKV_W),
                                               layer_grad(g, l, L_QKV_B), (uint16_t *)sc->dqkv,
                                               ln16 ? NULL : L->ln1,
                                               ln16 ? (const uint16_t *)L->ln1 : NULL,
                                               layer_param(g, l, L_QKV_W), N, C, g->QKVl);
    } else {
        rc = column_backward_of(g, L, l, B, sc->dqkv, L->ln1, L_QKV_W, L_QKV_B, g->QKVl,
                                LORA_QKV);
    }
    if (rc)
        return rc;
    norm_backward(g, dres, layer_grad(g, l, L_LN1_W), layer_grad(g, l, L_LN1_B),
                  dln16 ? NULL : dln_own, dln16 ? (const uint16_t *)sc->dln : NULL, x,
                  layer_param(g, l, L_LN1_W), L->ln1_mean, L->ln1_rstd, Nl);
    return TR_OK;
}

/* dres (Nl, C): on entry the gradient of the layer output, on exit of the layer input x.
 * Sequential: the MLP's backward first (it adds d residual2's part from ln2), then the
 * attention's from the whole d residual2. Parallel residual (out = x + attn(ln1(x)) +
 * mlp(ln2(x))): the attention projection reads d out before the MLP's norm adds to dres. */
static int layer_backward(tr_gpt *g, int l, const layer_acts *L, const float *x, float *dres,
                          int B)
{
    int rc, parallel = g->s.parallel_residual;
    if (g->s.num_experts ? (rc = gpt_moe_backward(g, l, L, dres, B))
                         : !parallel && (rc = mlp_backward(g, l, L, L->residual2, dres, B)))
        return rc;
    if ((rc = projection_then_attention(g, L, l, dres, B)))
        return rc;
    if (g->s.position == TR_POS_ROPE) /* to the gradient of the unrotated q and k */
        g->k->rope(NULL, g->scratch.dqkv, g->rope_cos, g->rope_sin, B, g->s.T, g->NGl,
                   g->NHl / g->NGl, g->HS, g->s.rotary_dims, 1, g->positions);
    if (parallel && (rc = mlp_backward(g, l, L, x, dres, B)))
        return rc;
    return qkv_backward(g, l, L, x, dres, B);
}

int tr_gpt_backward(tr_gpt *g, tr_gpt_acts *a, const float *dhidden_out)
{
    const tr_kernels *k = g->k;
    const tr_gpt_shape *s = &g->s;
    int B = a->B, T = s->T, C = s->C, N = B * T, r0, Nl, rc;
    gpt_rows(g, B, &r0, &Nl);
    g->segments = a->segments;
    g->positions = a->positions;
    g->dropout_on = a->dropout_on;
    g->dropout_sample = a->dropout_sample;
    g->moe_aux_weight = a->moe_aux_weight;
    if (!s->is_last && !dhidden_out)
        return tr_fail(TR_ERR_INVALID, "a stage before the last needs the output gradient");
    /* work in place in a->dres; the last stage's head already left its gradient there */
    float *dres = a->dres;
    if (!s->is_last && dhidden_out != dres)
        k->copy(NULL, dres, dhidden_out, (size_t)Nl * C * sizeof(float));
    for (int l = s->layer_count - 1; l >= 0; l--) {
        const float *x = l == 0 ? a->stage_in : a->layers[l - 1].residual3;
        layer_acts L = layer_acts_for(g, a, l);
        if ((rc = params_use(g, TR_GPT_PARAMS_NEED, g->layer_ranges[l])) ||
            (rc = params_use(g, TR_GPT_PARAMS_PREFETCH,
                             l > 0 ? g->layer_ranges[l - 1] : (grad_range){0, 0})))
            return rc;
        if (s->recompute && (rc = gpt_layer_forward(g, l, &L, x, B)))
            return rc; /* rebuild the layer's activations from its stored input */
        rc = layer_backward(g, l, &L, x, dres, B);
        if (!rc)
            rc = params_use(g, TR_GPT_PARAMS_DONE, g->layer_ranges[l]);
        if (rc)
            return rc;
        grad_ready(g, g->layer_ranges[l]);
    }
    if (s->is_first && !g->lora) { /* (LoRA: the embeddings are frozen) */
        /* the word embedding needs all N rows' gradient (gathered under SP); positions are
         * then reduced from those same rows, so wpe's gradient is whole on every rank */
        const float *dall = NULL;
        const float *demb = dres;
        if (s->embedding_ln) { /* through the embedding norm, into the free dln rows */
            float *d = g->scratch.dln;
            if ((rc = params_use(g, TR_GPT_PARAMS_NEED, g->embedding_range)))
                return rc; /* the norm's weight (ZeRO-3 gathers it again) */
            k->zero(NULL, d, (size_t)Nl * C * sizeof(float));
            norm_backward(g, d, g->tensors[g->emb_ln_w].grad,
                          g->emb_ln_b >= 0 ? g->tensors[g->emb_ln_b].grad : NULL, dres, NULL,
                          a->emb, g->tensors[g->emb_ln_w].param, a->emb_mean, a->emb_rstd, Nl);
            demb = d;
        }
        if (gpt_hidden_drop(g)) /* through the embedding dropout's mask: dres or dln rows */
            gpt_dropout_rows(g, (float *)demb, 0, TR_DROPOUT_EMBEDDING, B);
        if (s->embedding_multiplier) { /* d emb = m d (m emb), in the free dln rows */
            float *d = g->scratch.dln;
            if (demb != d)
                k->copy(NULL, d, demb, (size_t)Nl * C * sizeof(float));
            k->scale(NULL, d, s->embedding_multiplier, (size_t)Nl * C);
            demb = d;
        }
        rc = tr_tp_vocab_embedding_backward(&g->tp, g->tensors[g->wte].grad, demb, a->tokens, N,
                                            C, g->Vl, g->scratch.wide, &dall);
        if (rc)
            return rc;
        if (s->position != TR_POS_LEARNED)
            ; /* no position table */
        else if (a->positions)
            gpt_position_ids_backward(g, a, dall);
        else
            k->position_backward(NULL, g->tensors[g->wpe].grad, dall, B, T, C);
        /* released after the embedding gradients are written (released before them, ZeRO-3
         * lost wte and wpe gradients: tests/layouts bloom-d4-t2-zero3) */
        if (s->embedding_ln && (rc = params_use(g, TR_GPT_PARAMS_DONE, g->embedding_range)))
            return rc;
        grad_ready(g, g->embedding_range);
    }
    return TR_OK;
}
