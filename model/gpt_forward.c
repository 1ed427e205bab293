/* GPT stage forward: embeddings (first stage), transformer layers, head + loss (last stage),
 * written once for every tensor-parallel size on the tp/ layers.
 * Sizes as in gpt_internal.h: N = B*T token rows, Nl held rows starting at row r0. */
#include "model/gpt_internal.h"

#include <string.h>

#include "core/core.h"

/* y = column_linear(norm(x)) (the QKV or fc layer after its norm): ln keeps the norm's output,
 * this rank's rows at their place (the linear gathers the others under SP), in bf16 storage
 * where gpt_ln16; y16: y holds the output in bf16 storage (fc's where gpt_fch16, QKV's where
 * gpt_qkv16); act16 (with y16, or NULL): also gelu(y) stored bf16 (fc's GELU, in the GEMM
 * where the table fuses it). nw, nb, W, b: layer tensor slots; t: the LoRA target. */
static int norm_then_column(tr_gpt *g, const layer_acts *L, int l, int B, float *ln, float *mean,
                            float *rstd, const float *x, int nw, int nb, float *y, int y16,
                            uint16_t *act16, int W, int b, int OCl, int t)
{
    int C = g->s.C, N = B * g->s.T, r0, Nl;
    gpt_rows(g, B, &r0, &Nl);
    if (gpt_ln16(g)) {
        uint16_t *ln16 = (uint16_t *)ln;
        const float *w = norm_scale(g, layer_param(g, l, nw));
        if (g->s.rmsnorm)
            g->k->rmsnorm_forward16(NULL, ln16 + (size_t)r0 * C, rstd, x, w, Nl, C, g->s.eps);
        else
            g->k->layernorm_forward16(NULL, ln16 + (size_t)r0 * C, mean, rstd, x, w,
                                      norm_bias(g, layer_param(g, l, nb)), Nl, C, g->s.eps);
        if (y16)
            return tr_tp_column_linear_forward_out16(&g->tp, (uint16_t *)y, act16, NULL, ln16,
                                                     layer_param(g, l, W), layer_param(g, l, b),
                                                     N, C, OCl);
        return tr_tp_column_linear_forward16(&g->tp, y, ln16, layer_param(g, l, W),
                                             layer_param(g, l, b), N, C, OCl);
    }
    tr_tp_lora lo; /* the LoRA adapter (NULL: none), made right before its layer */
    norm_forward(g, ln + (size_t)r0 * C, mean, rstd, x, layer_param(g, l, nw),
                 layer_param(g, l, nb), Nl);
    if (y16)
        return tr_tp_column_linear_forward_out16(&g->tp, (uint16_t *)y, act16, ln, NULL,
                                                 layer_param(g, l, W), layer_param(g, l, b), N,
                                                 C, OCl);
    return tr_tp_column_linear_forward_lora(&g->tp, y, ln, layer_param(g, l, W),
                                            layer_param(g, l, b), N, C, OCl,
                                            gpt_lora(g, L, l, t, B, &lo));
}

/* L->residual2 (Nl, C) = x + attn_proj(attention(L->qkv)): the attention output kept in
 * L->atty, in bf16 storage where gpt_atty16 (the projection's GEMMs read it in place); qkv
 * read in bf16 storage where gpt_qkv16. sum (N, C) instead (not NULL: the parallel residual
 * under TP): the projection's partial product there, without its bias and reduction. */
static int attention_then_projection(tr_gpt *g, const layer_acts *L, int l, const float *x, int B,
                                     float *sum)
{
    const tr_kernels *k = g->k;
    int T = g->s.T, C = g->s.C, Al = g->Al, N = B * T;
    const float *W = layer_param(g, l, L_ATTPROJ_W), *b = layer_param(g, l, L_ATTPROJ_B);
    /* hidden dropout: residual2 = x + drop(attn_proj(..) + b), the residual added after */
    const float *res = gpt_hidden_drop(g) ? NULL : x;
    if (gpt_atty16(g)) {
        uint16_t *atty16 = (uint16_t *)L->atty;
        if (gpt_qkv16(g)) /* (its input bf16 too: one op for both layouts) */
            k->attention_forward_qkv16(NULL, atty16, L->lse, (const uint16_t *)L->qkv, g->alibi,
                                       B, T, g->NHl, g->NGl, g->HS, g->segments);
        else if (uses_gqa_attention(g))
            k->attention_gqa_forward16(NULL, atty16, L->lse, L->qkv, g->alibi, B, T, g->NHl,
                                       g->NGl, g->HS, g->segments);
        else
            k->attention_forward16(NULL, atty16, L->lse, L->qkv, B, T, g->NHl, g->HS,
                                   g->segments);
        if (sum)
            return tr_tp_row_linear_partial16(&g->tp, sum, 0, atty16, W, N, Al, C);
        int rc = tr_tp_row_linear_forward16(&g->tp, L->residual2, res, atty16, W, b, N, Al, C,
                                            g->scratch.wide);
        if (!rc)
            gpt_dropout_add(g, L->residual2, x, l, TR_DROPOUT_ATTN_OUT, B);
        return rc;
    }
    int rc;
    if (gpt_cp_size(g) > 1) {
        if ((rc = gpt_cp_attention_forward(g, L->atty, L->lse, L->qkv, l, B)))
            return rc;
    } else if (gpt_attn_drop(g)) {
        gpt_attention_dropout_forward(g, L, l, B);
    } else if (uses_gqa_attention(g))
        k->attention_gqa_forward(NULL, L->atty, L->lse, L->qkv, g->alibi, B, T, g->NHl,
                                 g->NGl, g->HS, g->segments);
    else
        k->attention_forward(NULL, L->atty, L->lse, L->qkv, B, T, g->NHl, g->HS, g->segments);
    tr_tp_lora lo; /* the LoRA adapter (NULL: none), made right before its layer */
    const tr_tp_lora *adapter = gpt_lora(g, L, l, LORA_PROJ, B, &lo);
    if (sum)
        return tr_tp_row_linear_partial_lora(&g->tp, sum, 0, L->atty, W, N, Al, C, adapter);
    int err = tr_tp_row_linear_forward_lora(&g->tp, L->residual2, res, L->atty, W, b, N, Al,
                                            C, g->scratch.wide, adapter);
    if (!err)
        gpt_dropout_add(g, L->residual2, x, l, TR_DROPOUT_ATTN_OUT, B);
    return err;
}

/* One transformer layer: x (Nl, C) -> L->residual3 (Nl, C). */
int gpt_layer_forward(tr_gpt *g, int l, layer_acts *L, const float *x, int B)
{
    const tr_kernels *k = g->k;
    const tr_tp *tp = &g->tp;
    int T = g->s.T, C = g->s.C, N = B * T, rc;
    tr_tp_lora lo; /* LoRA adapters (NULL: none), each made right before its layer */
    /* attention: residual2 = x + attn_proj(attention(qkv(ln1(x)))) */
    rc = norm_then_column(g, L, l, B, L->ln1, L->ln1_mean, L->ln1_rstd, x, L_LN1_W, L_LN1_B,
                          L->qkv, gpt_qkv16(g), NULL, L_QKV_W, L_QKV_B, g->QKVl, LORA_QKV);
    if (rc)
        return rc;
    if (g->s.position == TR_POS_ROPE) /* q and k rotated in place: qkv keeps the roped ones */
        k->rope(NULL, L->qkv, g->rope_cos, g->rope_sin, B, T, g->NGl, g->NHl / g->NGl, g->HS,
                g->s.rotary_dims, 0, g->positions);
    /* the parallel residual under TP: the attention projection's and fc_proj's partial
     * products summed in scratch.wide (nothing between them uses it: the column-parallel fc
     * gathers in place) and reduced once, residual3 = x + reduce(sum) + their biases (no
     * residual2); else each row-parallel layer reduces its own */
    float *sum = g->s.parallel_residual && g->s.tp_size > 1 && !gpt_hidden_drop(g)
                     ? g->scratch.wide /* (hidden dropout: each output has its own mask) */
                     : NULL;
    rc = attention_then_projection(g, L, l, x, B, sum);
    if (rc)
        return rc;
    if (g->s.num_experts) /* residual3 = residual2 + the experts' (gpt_moe.c) */
        return gpt_moe_forward(g, l, L, B);
    /* MLP: residual3 = residual2 + fc_proj(act(fc(ln2(residual2)))), act GELU, SwiGLU or GeGLU;
     * with the parallel residual ln2 reads the layer input x instead of residual2 */
    const float *mlp_in = g->s.parallel_residual ? x : L->residual2;
    const float *res3 = gpt_hidden_drop(g) ? NULL : L->residual2; /* (added after dropout) */
    int fch16 = gpt_fch16(g);                          /* fc's output in bf16 */
    int gelu_with_fc = fch16 && gpt_gelu_in_gemm(g); /* its GELU made with it */
    rc = norm_then_column(g, L, l, B, L->ln2, L->ln2_mean, L->ln2_rstd, mlp_in, L_LN2_W,
                          L_LN2_B, L->fch, fch16, gelu_with_fc ? (uint16_t *)L->fch_gelu : NULL,
                          L_FC_W, L_FC_B, g->Fwl, LORA_FC1);
    if (rc)
        return rc;
    if (gpt_gelu16(g)) { /* the GELU output in bf16 storage, read as it is by fc_proj */
        uint16_t *gelu16 = (uint16_t *)L->fch_gelu;
        if (!gelu_with_fc) /* (else made above) */
            gpt_gelu_forward16(g)(NULL, gelu16, fch16 ? NULL : L->fch,
                                  fch16 ? (const uint16_t *)L->fch : NULL, (size_t)N * g->Fl);
        if (!sum) {
            rc = tr_tp_row_linear_forward16(tp, L->residual3, res3, gelu16,
                                            layer_param(g, l, L_FCPROJ_W),
                                            layer_param(g, l, L_FCPROJ_B), N, g->Fl, C,
                                            g->scratch.wide);
            if (!rc)
                gpt_dropout_add(g, L->residual3, L->residual2, l, TR_DROPOUT_MLP_OUT, B);
            return rc;
        }
        rc = tr_tp_row_linear_partial16(tp, sum, 1, gelu16, layer_param(g, l, L_FCPROJ_W), N,
                                        g->Fl, C);
    } else {
        gpt_mlp_act_forward(g, L->fch_gelu, L->fch, (size_t)N * g->Fl);
        const tr_tp_lora *adapter = gpt_lora(g, L, l, LORA_FC2, B, &lo);
        if (!sum) {
            rc = tr_tp_row_linear_forward_lora(tp, L->residual3, res3, L->fch_gelu,
                                               layer_param(g, l, L_FCPROJ_W),
                                               layer_param(g, l, L_FCPROJ_B), N, g->Fl, C,
                                               g->scratch.wide, adapter);
            if (!rc)
                gpt_dropout_add(g, L->residual3, L->residual2, l, TR_DROPOUT_MLP_OUT, B);
            return rc;
        }
        rc = tr_tp_row_linear_partial_lora(tp, sum, 1, L->fch_gelu,
                                           layer_param(g, l, L_FCPROJ_W), N, g->Fl, C, adapter);
    }
    if (rc)
        return rc;
    return tr_tp_row_reduce(tp, L->residual3, x, sum, layer_param(g, l, L_ATTPROJ_B),
                            layer_param(g, l, L_FCPROJ_B), N, C);
}

/* out (Nl, C) += wpe[position of each held row]; rows r0.. of the flattened (B, T). */
static void add_positions(tr_gpt *g, float *out, int r0, int Nl)
{
    int T = g->s.T, C = g->s.C;
    const float *wpe = g->tensors[g->wpe].param;
    if (r0 == 0 && Nl % T == 0) {
        g->k->position_forward(NULL, out, wpe, Nl / T, T, C);
        return;
    }
    for (int n = 0; n < Nl;) { /* a sequence-parallel slice: one call per sequence piece */
        int pos = (r0 + n) % T, len = T - pos < Nl - n ? T - pos : Nl - n;
        g->k->position_forward(NULL, out + (size_t)n * C, wpe + (size_t)pos * C, 1, len, C);
        n += len;
    }
}

static int check_ids(const int32_t *ids, int N, int V, const char *what)
{
    for (int i = 0; i < N; i++)
        if (ids[i] < 0 || ids[i] >= V)
            return tr_fail(TR_ERR_INVALID, "%s %d at position %d is outside the vocabulary [0, %d)",
                           what, ids[i], i, V);
    return TR_OK;
}

int tr_gpt_head_chunk_rows(int N, int Vl)
{
    if (N < 1 || Vl < 1)
        return N > 1 ? N : 1;
    long max_rows = (1L << 27) / Vl; /* a chunk's logits: at most 2^27 floats (512 MiB) */
    if (max_rows >= 64)
        max_rows -= max_rows % 64; /* whole 64-row GEMM tiles */
    if (max_rows < 1)
        max_rows = 1;
    if (N <= max_rows)
        return N;
    long chunks = (N + max_rows - 1) / max_rows, rows = (N + chunks - 1) / chunks;
    if (max_rows >= 64) /* even chunks, rounded up to a tile: still <= max_rows */
        rows = (rows + 63) / 64 * 64;
    return (int)(rows < max_rows ? rows : max_rows);
}

void tr_gpt_set_head_chunk_rows(tr_gpt *g, int rows) { g->head_chunk_rows = rows > 0 ? rows : 0; }

/* Rows per chunk of this micro-batch's head: the rule, or fewer when a test asked. */
int gpt_head_rows(const tr_gpt *g, int B)
{
    int N = B * g->s.T, rows = tr_gpt_head_chunk_rows(N, g->Vl);
    return g->head_chunk_rows && g->head_chunk_rows < rows ? g->head_chunk_rows : rows;
}

/* tr_gpt_forward_logits: each chunk's logits (n, Vp) to the host rows r0.. (V columns). */
static void logits_to_host(void *ctx, int r0, int n, const float *logits)
{
    tr_gpt *g = ctx;
    int V = g->s.V, Vp = g->s.Vp;
    g->k->to_host(NULL, g->logits_stage, logits, (size_t)n * Vp * sizeof(float));
    for (int i = 0; i < n; i++)
        memcpy(g->logits_out + (size_t)(r0 + i) * V, g->logits_stage + (size_t)i * Vp,
               (size_t)V * sizeof(float));
}

/* Final LN, tied vocab-parallel head, cross-entropy; with loss_grad_scale != 0 also the
 * head's backward, leaving the gradient of h in a->dres. h: (Nl, C). Parameters in place.
 * The head and the loss run over chunks of rows (tr_tp_vocab_head_loss): the scratch holds
 * one chunk's logits, never (N, Vl). */
static int head_compute(tr_gpt *g, tr_gpt_acts *a, const float *h, tr_param_tensor *lnf_w,
                        tr_param_tensor *lnf_b, tr_param_tensor *wte, float loss_grad_scale,
                        float *loss_out)
{
    const tr_kernels *k = g->k;
    gpt_scratch *sc = &g->scratch;
    int B = a->B, N = B * g->s.T, C = g->s.C, r0, Nl, rc;
    gpt_rows(g, B, &r0, &Nl);
    norm_forward(g, sc->lnf + (size_t)r0 * C, sc->lnf_mean, sc->lnf_rstd, h, lnf_w->param,
                 lnf_b ? lnf_b->param : NULL, Nl);
    /* logits (rows, Vl) = lnf @ wte^T per chunk (column-parallel over the vocabulary), the
     * losses, and with a backward dlogits in place (times each token's loss weight: packed
     * fine-tuning data), dlnf = dlogits @ wte (summed over ranks), dwte += dlogits^T @ lnf */
    tr_tp_head_chunks ch = {.logits = sc->logits, .stats = sc->xent_stats,
                            .rows = gpt_head_rows(g, B), .W16 = sc->head_w16};
    if (g->head_bias >= 0) /* (frozen under LoRA: no gradient) */
        ch.bias = g->tensors[g->head_bias].param,
        ch.dbias = g->lora ? NULL : g->tensors[g->head_bias].grad;
    if (g->logits_out)
        ch.observe = logits_to_host, ch.observe_ctx = g;
    rc = tr_tp_vocab_head_loss(&g->tp, &ch, sc->losses, sc->dln, wte->grad, sc->lnf, wte->param,
                               sc->targets, a->loss_weights, N, C, g->Vl, g->s.V,
                               loss_grad_scale);
    if (!rc) /* the host reads the losses: the TP collectives must have completed */
        rc = tr_tp_flush(&g->tp);
    if (rc)
        return rc;
    k->to_host(NULL, g->losses_host, sc->losses, (size_t)N * sizeof(float));
    double sum = 0;
    for (int i = 0; i < N; i++)
        sum += g->losses_host[i];
    *loss_out = (float)(a->loss_weights ? gpt_weighted_loss(a, g->losses_host, N) : sum / N);
    if (loss_grad_scale == 0.0f)
        return TR_OK;
    k->zero(NULL, a->dres, (size_t)Nl * C * sizeof(float));
    norm_backward(g, a->dres, lnf_w->grad, lnf_b ? lnf_b->grad : NULL, sc->dln + (size_t)r0 * C,
                  NULL, h, lnf_w->param, sc->lnf_mean, sc->lnf_rstd, Nl);
    return TR_OK;
}

/* head_compute with its targets checked and its parameters in place (the use hook). */
static int head_forward(tr_gpt *g, tr_gpt_acts *a, const float *h, const int32_t *targets,
                        float loss_grad_scale, float *loss_out)
{
    gpt_scratch *sc = &g->scratch;
    int N = a->B * g->s.T, rc;
    rc = check_ids(targets, N, g->s.V, "target token");
    if (rc)
        return rc;
    g->k->to_device(NULL, sc->targets, targets, (size_t)N * sizeof(int32_t));
    tr_param_tensor *lnf_w = &g->tensors[g->lnf_w];
    tr_param_tensor *lnf_b = g->lnf_b >= 0 ? &g->tensors[g->lnf_b] : NULL; /* RMSNorm: none */
    tr_param_tensor *wte = &g->tensors[g->head_wte]; /* the tied wte or output_layer */
    /* the embedding's wte on a one-stage model (else, and output_layer, in head_range) */
    grad_range tied = {wte->offset, g->s.is_first && !g->s.untie ? wte->numel : 0};
    if ((rc = params_use(g, TR_GPT_PARAMS_NEED, g->head_range)) ||
        (rc = params_use(g, TR_GPT_PARAMS_NEED, tied)))
        return rc;
    rc = head_compute(g, a, h, lnf_w, lnf_b, wte, loss_grad_scale, loss_out);
    if (!rc)
        rc = params_use(g, TR_GPT_PARAMS_DONE, g->head_range);
    if (!rc)
        rc = params_use(g, TR_GPT_PARAMS_DONE, tied);
    if (!rc && loss_grad_scale != 0.0f)
        grad_ready(g, g->head_range);
    return rc;
}

int tr_gpt_forward(tr_gpt *g, tr_gpt_acts *a, const int32_t *tokens, const float *hidden_in,
                   const int32_t *targets, float loss_grad_scale, float *loss_out)
{
    const tr_kernels *k = g->k;
    const tr_gpt_shape *s = &g->s;
    int B = a->B, N = B * s->T, C = s->C, r0, Nl, rc;
    gpt_rows(g, B, &r0, &Nl);
    g->segments = a->segments;
    g->positions = a->positions;
    g->dropout_on = a->dropout_on;
    g->dropout_sample = a->dropout_sample;
    /* MoE: the aux losses weigh as the micro-batch's mean loss does (backward reads it) */
    g->moe_aux_weight = a->moe_aux_weight =
        a->moe_aux_given ? a->moe_aux_next : loss_grad_scale * (float)N;
    a->moe_aux_given = 0;
    if (s->is_last && (!targets || !loss_out))
        return tr_fail(TR_ERR_INVALID, "the last stage needs targets and a loss output");
    if (s->is_first) {
        if (!tokens)
            return tr_fail(TR_ERR_INVALID, "the first stage needs token ids");
        rc = check_ids(tokens, N, s->V, "token");
        if (rc)
            return rc;
        k->to_device(NULL, a->tokens, tokens, (size_t)N * sizeof(int32_t));
        if ((rc = params_use(g, TR_GPT_PARAMS_NEED, g->embedding_range)) ||
            (rc = params_use(g, TR_GPT_PARAMS_PREFETCH, g->layer_ranges[0])))
            return rc;
        float *emb = s->embedding_ln ? a->emb : a->stage_in;
        rc = tr_tp_vocab_embedding_forward(&g->tp, emb, a->tokens, g->tensors[g->wte].param, N,
                                           C, g->Vl, g->scratch.wide);
        if (rc)
            return rc;
        if (s->position != TR_POS_LEARNED)
            ; /* rope and ALiBi act inside the attention */
        else if (a->positions)
            gpt_add_position_ids(g, a, emb, g->scratch.dln, r0, Nl);
        else
            add_positions(g, emb, r0, Nl);
        if (s->embedding_multiplier) /* Gemma's sqrt(hidden_size) */
            k->scale(NULL, emb, s->embedding_multiplier, (size_t)Nl * C);
        gpt_dropout_rows(g, emb, 0, TR_DROPOUT_EMBEDDING, B); /* (Megatron's embedding_dropout) */
        if (s->embedding_ln) /* Bloom's word_embeddings_layernorm */
            norm_forward(g, a->stage_in, a->emb_mean, a->emb_rstd, emb,
                         g->tensors[g->emb_ln_w].param,
                         g->emb_ln_b >= 0 ? g->tensors[g->emb_ln_b].param : NULL, Nl);
        if ((rc = params_use(g, TR_GPT_PARAMS_DONE, g->embedding_range)))
            return rc;
    } else {
        if (!hidden_in)
            return tr_fail(TR_ERR_INVALID, "a stage after the first needs the hidden state");
        if (hidden_in != a->stage_in)
            k->copy(NULL, a->stage_in, hidden_in, (size_t)Nl * C * sizeof(float));
    }
    const float *x = a->stage_in;
    for (int l = 0; l < s->layer_count; l++) {
        layer_acts L = layer_acts_for(g, a, l);
        grad_range next = l + 1 < s->layer_count ? g->layer_ranges[l + 1]
                          : s->is_last           ? g->head_range
                                                 : (grad_range){0, 0};
        if ((rc = params_use(g, TR_GPT_PARAMS_NEED, g->layer_ranges[l])) ||
            (rc = params_use(g, TR_GPT_PARAMS_PREFETCH, next)))
            return rc;
        rc = gpt_layer_forward(g, l, &L, x, B);
        if (!rc)
            rc = params_use(g, TR_GPT_PARAMS_DONE, g->layer_ranges[l]);
        if (rc)
            return rc;
        x = a->layers[l].residual3;
    }
    if (s->is_last)
        return head_forward(g, a, x, targets, loss_grad_scale, loss_out);
    return TR_OK;
}

int tr_gpt_forward_logits(tr_gpt *g, tr_gpt_acts *a, const int32_t *tokens, float *logits)
{
    const tr_gpt_shape *s = &g->s;
    int N = a->B * s->T, rc;
    if (!s->is_first || !s->is_last || s->tp_size != 1)
        return tr_fail(TR_ERR_INVALID, "logits need the whole model on one stage without "
                                       "tensor parallelism");
    int32_t *targets_host = tr_alloc((size_t)N * sizeof(int32_t), "logits targets");
    if (!targets_host)
        return TR_ERR_NOMEM;
    memset(targets_host, 0, (size_t)N * sizeof(int32_t));
    /* the forward with target 0 everywhere; each chunk's logits (rows, Vp) go to `logits` */
    float loss;
    g->logits_stage = tr_alloc((size_t)gpt_head_rows(g, a->B) * s->Vp * sizeof(float), "logits");
    if (!g->logits_stage) {
        tr_free(targets_host);
        return TR_ERR_NOMEM;
    }
    g->logits_out = logits;
    rc = tr_gpt_forward(g, a, tokens, NULL, targets_host, 0.0f, &loss);
    g->logits_out = NULL;
    tr_free(g->logits_stage);
    g->logits_stage = NULL;
    tr_free(targets_host);
    return rc;
}
