/* GPT stage: activation storage of one micro-batch and the scratch shared by all of them.
 * Sizes as in gpt_internal.h (N token rows, Nl held rows, l = this TP rank's share). */
#include "model/gpt_internal.h"

#include <string.h>

#include "core/core.h"

/* Floats rounded up to keep 64-byte alignment. */
static size_t padded(size_t count) { return (count + 15) & ~(size_t)15; }

/* Carve `count` floats from a bump pointer. */
static float *take(float **cursor, size_t count)
{
    float *p = *cursor;
    *cursor += padded(count);
    return p;
}

/* LoRA: whether the input of `target` (LORA_*) is only read by a frozen weight's gradient,
 * so one shared copy in the scratch serves every layer (gpt_scratch.frozen_*). */
static int input_shared(const tr_gpt *g, int target)
{
    return g->lora && !(g->s.lora_targets & (1 << target));
}

/* Floats that hold n elements of the GELU output, or of a LayerNorm output: half as many in
 * bf16 storage; */
static size_t gelu_floats(const tr_gpt *g, size_t n) { return gpt_gelu16(g) ? (n + 1) / 2 : n; }
static size_t ln_floats(const tr_gpt *g, size_t n) { return gpt_ln16(g) ? (n + 1) / 2 : n; }
static size_t fch_floats(const tr_gpt *g, size_t n) { return gpt_fch16(g) ? (n + 1) / 2 : n; }
/* ... and of the attention output (gpt_atty16) and its input qkv (gpt_qkv16) */
static size_t atty_floats(const tr_gpt *g, size_t n) { return gpt_atty16(g) ? (n + 1) / 2 : n; }
static size_t qkv_floats(const tr_gpt *g, size_t n) { return gpt_qkv16(g) ? (n + 1) / 2 : n; }

/* Floats of a layer's router and routed rows (MoE; M = N k): probs, lse, idx, weights, the
 * routed rows' token, slot and weight, their inputs and outputs (fch and fch_gelu: M rows);
 * with expert parallelism the EP M rows the experts may receive (gpt_ep_rows). */
static size_t moe_acts_floats(const tr_gpt *g, int B)
{
    if (!g->s.num_experts)
        return 0;
    size_t N = (size_t)B * g->s.T, E = (size_t)g->s.num_experts, M = N * g->s.moe_topk;
    size_t C = (size_t)g->s.C, ex = g->ep ? padded(gpt_ep_rows(g) * M * C) : 0;
    return padded(N * E) + padded(N) + 2 * padded(M) + 3 * padded(M) + 2 * padded(M * C) + ex;
}

static void moe_acts_carve(const tr_gpt *g, int B, layer_acts *L, float **c)
{
    size_t N = (size_t)B * g->s.T, E = (size_t)g->s.num_experts, M = N * g->s.moe_topk;
    size_t C = (size_t)g->s.C;
    L->moe_probs = take(c, N * E);
    L->moe_lse = take(c, N);
    L->moe_idx = (int32_t *)take(c, M);
    L->moe_weights = take(c, M);
    L->moe_tok = (int32_t *)take(c, M);
    L->moe_slot = (int32_t *)take(c, M);
    L->moe_w = take(c, M);
    L->moe_x = take(c, M * C);
    L->moe_y = take(c, M * C);
    L->moe_ex = g->ep ? take(c, gpt_ep_rows(g) * M * C) : NULL;
}

/* Floats of one layer's activations (everything of layer_acts). */
static size_t layer_acts_floats(const tr_gpt *g, int B)
{
    int first, Nl_;
    gpt_rows(g, B, &first, &Nl_);
    size_t N = (size_t)B * g->s.T, Nl = (size_t)Nl_, C = g->s.C, Al = g->Al;
    size_t lse = (size_t)B * g->NHl * g->s.T; /* fused attention: no T x T tensor */
    size_t Q = (size_t)g->QKVl, Fw = (size_t)g->Fwl, F = (size_t)g->Fl;
    size_t lora = g->lora ? 4 * N * (size_t)g->s.lora_rank : 0;
    size_t ln1 = input_shared(g, LORA_QKV) ? 0 : ln_floats(g, N * C);
    size_t ln2 = input_shared(g, LORA_FC1) ? 0 : ln_floats(g, N * C);
    size_t gelu = input_shared(g, LORA_FC2) ? 0 : gelu_floats(g, N * F);
    size_t atty = atty_floats(g, N * Al);
    size_t R = g->s.num_experts ? (size_t)g->s.moe_topk * gpt_ep_rows(g) : 1; /* MLP rows
                                                                                  * per token */
    size_t sizes[] = {ln1,    Nl,     Nl, qkv_floats(g, N * Q), atty, lse, Nl * C,
                      ln2,    Nl,     Nl, fch_floats(g, R * N * Fw), R * gelu, Nl * C, lora};
    size_t total = moe_acts_floats(g, B);
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        total += padded(sizes[i]);
    return total;
}

/* Carve one layer's activations (all of them, or with only_output just residual3). */
static void layer_acts_carve(const tr_gpt *g, int B, layer_acts *L, float **c, int only_output)
{
    int first, Nl_;
    gpt_rows(g, B, &first, &Nl_);
    size_t N = (size_t)B * g->s.T, Nl = (size_t)Nl_, C = g->s.C, Al = g->Al;
    size_t lse = (size_t)B * g->NHl * g->s.T;
    memset(L, 0, sizeof *L);
    if (!only_output) { /* a NULL input: the scratch's frozen_* (layer_acts_for) */
        L->ln1 = input_shared(g, LORA_QKV) ? NULL : take(c, ln_floats(g, N * C));
        L->ln1_mean = take(c, Nl);
        L->ln1_rstd = take(c, Nl);
        L->qkv = take(c, qkv_floats(g, N * (size_t)g->QKVl));
        L->atty = take(c, atty_floats(g, N * Al));
        L->lse = take(c, lse);
        L->residual2 = take(c, Nl * C);
        L->ln2 = input_shared(g, LORA_FC1) ? NULL : take(c, ln_floats(g, N * C));
        L->ln2_mean = take(c, Nl);
        L->ln2_rstd = take(c, Nl);
        size_t R = g->s.num_experts ? (size_t)g->s.moe_topk * gpt_ep_rows(g) : 1;
        L->fch = take(c, fch_floats(g, R * N * (size_t)g->Fwl));
        L->fch_gelu =
            input_shared(g, LORA_FC2) ? NULL : take(c, R * gelu_floats(g, N * g->Fl));
        L->lora_h = g->lora ? take(c, 4 * N * (size_t)g->s.lora_rank) : NULL;
        if (g->s.num_experts)
            moe_acts_carve(g, B, L, c);
    }
    L->residual3 = take(c, Nl * C);
}

/* Floats of the shared scratch (without the recompute layer set). */
/* Floats of room for the head's weight in bf16 (tp/'s tr_tp_head_chunks.W16): the last stage,
 * where the table converts it once (kernels.h's narrow16 and gemm_mixed16). */
static size_t head_w16_floats(const tr_gpt *g)
{
    const tr_kernels *k = g->k;
    if (!g->s.is_last || !k->narrow16 || !k->gemm_mixed16)
        return 0;
    return ((size_t)g->Vl * g->s.C + 1) / 2;
}

/* Floats of the MoE scratch (gpt_scratch.moe_*; M = N k; X = EP M the experts' rows). */
static size_t moe_scratch_floats(const tr_gpt *g, int B)
{
    if (!g->s.num_experts)
        return 0;
    size_t N = (size_t)B * g->s.T, E = (size_t)g->s.num_experts, M = N * g->s.moe_topk;
    size_t C = (size_t)g->s.C, X = gpt_ep_rows(g) * M, ey = g->ep ? padded(X * C) : 0;
    return 2 * padded(N * E) + padded(N * C) + padded(M * C) + padded(X * (size_t)g->Fwl) +
           padded(X * (size_t)g->Fl) + 2 * padded(M) + padded(E) + ey;
}

static void moe_scratch_carve(const tr_gpt *g, int B, gpt_scratch *sc, float **c)
{
    size_t N = (size_t)B * g->s.T, E = (size_t)g->s.num_experts, M = N * g->s.moe_topk;
    size_t C = (size_t)g->s.C;
    sc->moe_logits = take(c, N * E);
    sc->moe_sum = take(c, N * C);
    sc->moe_dx = take(c, M * C);
    sc->moe_dfch = take(c, gpt_ep_rows(g) * M * (size_t)g->Fwl);
    sc->moe_dact = take(c, gpt_ep_rows(g) * M * (size_t)g->Fl);
    sc->moe_dlogits = take(c, N * E);
    sc->moe_dweights = take(c, M);
    sc->moe_dw = take(c, M);
    sc->moe_aux_grad = take(c, E);
    sc->moe_ey = g->ep ? take(c, gpt_ep_rows(g) * M * C) : NULL;
}

static size_t scratch_floats(const tr_gpt *g, int B)
{
    const tr_gpt_shape *s = &g->s;
    int first, Nl;
    gpt_rows(g, B, &first, &Nl);
    size_t N = (size_t)B * s->T, C = s->C, Al = g->Al, Vl = s->is_last ? g->Vl : 0;
    size_t att = (size_t)B * (g->NHl + 1) * s->T; /* attention backward's scratch */
    size_t wide = s->tp_size > 1 ? N * C : 0;
    size_t Q = (size_t)g->QKVl, Fw = (size_t)g->Fwl, F = (size_t)g->Fl;
    size_t lora = g->lora ? N * (size_t)s->lora_rank : 0;
    size_t drop = g->lora && s->lora_dropout > 0 ? N * gpt_lora_widest_input(g) : 0;
    size_t frozen_ln1 = input_shared(g, LORA_QKV) ? N * C : 0;
    size_t frozen_ln2 = input_shared(g, LORA_FC1) ? N * C : 0;
    size_t frozen_gelu = input_shared(g, LORA_FC2) ? N * F : 0;
    size_t R = (size_t)tr_gpt_head_chunk_rows((int)N, (int)Vl); /* one chunk of the logits */
    size_t sizes[] = {N,      N * C,      Nl,  Nl,     R * Vl,     8 * R,      head_w16_floats(g),
                      N,
                      N * C,  wide,       qkv_floats(g, N * Q), N * Al, att, N * Fw, N * F,
                      lora, drop, drop, frozen_ln1, frozen_ln2, frozen_gelu,
                      s->hidden_dropout > 0 ? (size_t)Nl * C : 0};
    size_t total = moe_scratch_floats(g, B);
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        total += padded(sizes[i]);
    return total;
}

/* Floats of the embedding norm's input and statistics (first stage with embedding_ln). */
static size_t emb_ln_floats(const tr_gpt *g, int B)
{
    int first, Nl;
    gpt_rows(g, B, &first, &Nl);
    if (!g->s.is_first || !g->s.embedding_ln)
        return 0;
    return padded((size_t)Nl * g->s.C) + 2 * padded((size_t)Nl);
}

/* Floats of one micro-batch's activation storage. */
static size_t acts_floats(const tr_gpt *g, int B)
{
    const tr_gpt_shape *s = &g->s;
    int first, Nl;
    gpt_rows(g, B, &first, &Nl);
    size_t N = (size_t)B * s->T;
    /* with recompute a micro-batch keeps only each layer's output (the next one's input) */
    size_t per_layer = s->recompute ? padded((size_t)Nl * s->C) : layer_acts_floats(g, B);
    return padded(N) + 2 * padded((size_t)Nl * s->C) + per_layer * (size_t)s->layer_count +
           emb_ln_floats(g, B);
}

size_t tr_gpt_activation_bytes(const tr_gpt *g, int B, int n_slots)
{
    size_t floats = scratch_floats(g, B) + (size_t)n_slots * acts_floats(g, B);
    if (g->s.recompute)
        floats += layer_acts_floats(g, B);
    return floats * sizeof(float) + gpt_cp_bytes(g, B);
}

int gpt_scratch_ensure(tr_gpt *g, int B)
{
    gpt_scratch *sc = &g->scratch;
    if (sc->memory && sc->B >= B)
        return TR_OK;
    g->k->free(sc->memory);
    g->k->free(sc->layer_memory);
    tr_free(g->losses_host);
    tr_free(g->lora_mask_host);
    g->lora_mask_host = NULL;
    memset(sc, 0, sizeof *sc);
    const tr_gpt_shape *s = &g->s;
    int first, Nl;
    gpt_rows(g, B, &first, &Nl);
    size_t N = (size_t)B * s->T, C = s->C, Al = g->Al, Vl = s->is_last ? g->Vl : 0;
    size_t att = (size_t)B * (g->NHl + 1) * s->T;
    size_t wide = s->tp_size > 1 ? N * C : 0;
    size_t total = scratch_floats(g, B);
    int rc;
    sc->memory = g->k->alloc(total * sizeof(float));
    g->losses_host = tr_alloc(N * sizeof(float), "loss staging");
    if (!sc->memory || !g->losses_host)
        return tr_fail(TR_ERR_NOMEM, "out of memory for model scratch (%zu MiB)",
                       total * sizeof(float) >> 20);
    float *c = sc->memory;
    sc->targets = (int32_t *)take(&c, N);
    sc->lnf = take(&c, N * C);
    sc->lnf_mean = take(&c, Nl);
    sc->lnf_rstd = take(&c, Nl);
    size_t R = (size_t)tr_gpt_head_chunk_rows((int)N, (int)Vl); /* >= gpt_head_rows */
    sc->logits = take(&c, R * Vl);
    sc->xent_stats = take(&c, 8 * R); /* (tr_tp_head_chunks.stats) */
    size_t w16 = head_w16_floats(g);
    sc->head_w16 = w16 ? (uint16_t *)take(&c, w16) : NULL;
    sc->losses = take(&c, N);
    sc->dln = take(&c, N * C);
    sc->wide = take(&c, wide);
    sc->dqkv = take(&c, qkv_floats(g, N * (size_t)g->QKVl));
    sc->datty = take(&c, N * Al);
    sc->att_rowsum = take(&c, att);
    sc->dfch = take(&c, N * (size_t)g->Fwl);
    sc->dfch_gelu = take(&c, N * (size_t)g->Fl);
    sc->lora_dh = g->lora ? take(&c, N * (size_t)s->lora_rank) : NULL;
    size_t wide_in = gpt_lora_widest_input(g) * N, drop = g->lora && s->lora_dropout > 0;
    sc->lora_mask = drop ? take(&c, wide_in) : NULL;
    sc->lora_xd = drop ? take(&c, wide_in) : NULL;
    if (drop && !(g->lora_mask_host = tr_alloc(wide_in * sizeof(float), "dropout mask")))
        return TR_ERR_NOMEM;
    sc->frozen_ln1 = input_shared(g, LORA_QKV) ? take(&c, N * C) : NULL;
    sc->frozen_ln2 = input_shared(g, LORA_FC1) ? take(&c, N * C) : NULL;
    sc->frozen_fch_gelu = input_shared(g, LORA_FC2) ? take(&c, N * (size_t)g->Fl) : NULL;
    sc->drop_dy = s->hidden_dropout > 0 ? take(&c, (size_t)Nl * C) : NULL;
    if (s->num_experts) {
        moe_scratch_carve(g, B, sc, &c);
        if ((rc = gpt_moe_host_ensure(g, (int)N)))
            return rc;
    }
    if (s->recompute) {
        sc->layer_memory = g->k->alloc(layer_acts_floats(g, B) * sizeof(float));
        if (!sc->layer_memory)
            return tr_fail(TR_ERR_NOMEM, "out of memory for the recompute buffer");
        float *lc = sc->layer_memory;
        layer_acts_carve(g, B, &sc->layer, &lc, 0);
    }
    sc->B = B;
    return TR_OK;
}

int tr_gpt_acts_create(tr_gpt *g, int B, tr_gpt_acts **out)
{
    const tr_gpt_shape *s = &g->s;
    if (B < 1)
        return tr_fail(TR_ERR_INVALID, "micro-batch size must be >= 1, got %d", B);
    int rc = tr_tp_check_rows(&g->tp, B * s->T);
    if (rc)
        return rc;
    rc = gpt_scratch_ensure(g, B);
    if (rc)
        return rc;
    tr_gpt_acts *a = tr_alloc(sizeof *a, "activations");
    if (!a)
        return TR_ERR_NOMEM;
    a->g = g;
    a->B = B;
    a->layers = tr_alloc(sizeof *a->layers * (size_t)s->layer_count, "layer activations");
    if (!a->layers) {
        tr_free(a);
        return TR_ERR_NOMEM;
    }
    int first, Nl_;
    gpt_rows(g, B, &first, &Nl_);
    size_t N = (size_t)B * s->T, Nl = (size_t)Nl_, C = s->C;
    size_t total = acts_floats(g, B);
    a->memory = g->k->alloc(total * sizeof(float));
    if (!a->memory) {
        tr_free(a->layers);
        tr_free(a);
        return tr_fail(TR_ERR_NOMEM, "out of memory for activations (%zu MiB)",
                       total * sizeof(float) >> 20);
    }
    float *c = a->memory;
    a->tokens = (int32_t *)take(&c, N);
    a->stage_in = take(&c, Nl * C);
    a->dres = take(&c, Nl * C);
    for (int l = 0; l < s->layer_count; l++)
        layer_acts_carve(g, B, &a->layers[l], &c, s->recompute);
    if (s->num_experts) { /* host: each layer's losses and expert counts (and EP peers') */
        size_t E = (size_t)s->num_experts, n = (size_t)s->layer_count, ep = g->ep ? 2 : 1;
        a->moe_host = tr_alloc(n * (ep * E * sizeof(int) + 2 * sizeof(double)), "expert counts");
        if (!a->moe_host) {
            tr_gpt_acts_free(a);
            return TR_ERR_NOMEM;
        }
        for (size_t l = 0; l < n; l++) {
            a->layers[l].moe_losses = (double *)a->moe_host + 2 * l;
            a->layers[l].moe_counts = (int *)((double *)a->moe_host + 2 * n) + l * E;
            if (g->ep)
                a->layers[l].moe_ep_counts = (int *)((double *)a->moe_host + 2 * n) + (n + l) * E;
        }
    }
    if (emb_ln_floats(g, B)) {
        a->emb = take(&c, Nl * C);
        a->emb_mean = take(&c, Nl);
        a->emb_rstd = take(&c, Nl);
    }
    if (gpt_cp_size(g) > 1 && (rc = gpt_cp_positions(a))) {
        tr_gpt_acts_free(a);
        return rc;
    }
    *out = a;
    return TR_OK;
}

void tr_gpt_acts_free(tr_gpt_acts *a)
{
    if (!a)
        return;
    a->g->k->free(a->memory);
    a->g->k->free(a->packing_memory);
    tr_free(a->loss_weights_host);
    tr_free(a->moe_host);
    tr_free(a->layers);
    tr_free(a);
}

size_t tr_gpt_hidden_numel(const tr_gpt *g, int B)
{
    int first, Nl;
    gpt_rows(g, B, &first, &Nl);
    return (size_t)Nl * (size_t)g->s.C;
}

void tr_gpt_acts_set_dropout(tr_gpt_acts *a, int on, uint64_t first_sample)
{
    a->dropout_on = on;
    a->dropout_sample = first_sample;
}

float *tr_gpt_acts_input_buffer(tr_gpt_acts *a) { return a->stage_in; }
float *tr_gpt_acts_output_grad_buffer(tr_gpt_acts *a) { return a->dres; }

const float *tr_gpt_acts_output(const tr_gpt_acts *a)
{
    return a->layers[a->g->s.layer_count - 1].residual3;
}

const float *tr_gpt_acts_input_grad(const tr_gpt_acts *a) { return a->dres; }

void tr_gpt_acts_set_moe_aux_weight(tr_gpt_acts *a, float weight)
{
    a->moe_aux_next = weight;
    a->moe_aux_given = 1;
}

double tr_gpt_acts_moe_loss(const tr_gpt_acts *a, int which)
{
    double sum = 0;
    for (int l = 0; a->moe_host && l < a->g->s.layer_count; l++)
        sum += a->layers[l].moe_losses[which != 0];
    return sum;
}
