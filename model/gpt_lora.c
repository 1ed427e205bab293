/* LoRA fine-tuning (model/gpt.h, "LoRA"): the adapters' tensor table (the trainable tensors),
 * the frozen base's model-owned memory, and each layer's adapter for tp/'s linears.
 * Sizes as in gpt_internal.h; r = lora_rank. */
#include "model/gpt_internal.h"

#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "data/data.h"

/* An adapter tensor of full shape (rows, cols) split along split_dim (-1: replicated). */
static int add_adapter(tr_gpt *g, const char *name, int rows, int cols, int split_dim,
                       int tp_partial)
{
    const tr_gpt_shape *s = &g->s;
    tr_param_tensor *t = &g->lora[g->n_lora];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->full_rows = rows;
    t->full_cols = cols;
    t->split_dim = s->tp_size > 1 ? split_dim : -1;
    t->rows = t->split_dim == 0 ? rows / s->tp_size : rows;
    t->cols = t->split_dim == 1 ? cols / s->tp_size : cols;
    t->numel = (size_t)t->rows * (size_t)t->cols;
    t->forward_offset = g->n_lora_params;
    t->weight_decay = 1;
    /* a replicated adapter whose gradient is a partial sum per TP rank (tp/tp.h) */
    t->tp_grad_allreduce = s->tp_size > 1 && tp_partial;
    t->count_in_norm = t->split_dim >= 0 || s->tp_rank == 0;
    g->n_lora_params += t->numel;
    return g->n_lora++;
}

int gpt_lora_setup(tr_gpt *g)
{
    const tr_gpt_shape *s = &g->s;
    static const char *const names[4] = {"qkv", "attn_proj", "fc", "fc_proj"};
    int r = s->lora_rank, C = s->C, n_targets = 0;
    if (r < 1 || !(s->lora_targets & 15))
        return tr_fail(TR_ERR_INVALID, "LoRA needs a rank >= 1 and a target (rank %d)", r);
    for (int t = 0; t < 4; t++)
        g->lora_slot[t] = s->lora_targets & (1 << t) ? 2 * n_targets++ : -1;
    g->lora_per_layer = 2 * n_targets;
    g->lora = tr_alloc(sizeof *g->lora * (size_t)(g->lora_per_layer * s->layer_count) + 1,
                       "adapter tensor table");
    if (!g->lora)
        return TR_ERR_NOMEM;
    int qkv = g->A + 2 * g->NG * g->HS, fc = tr_gpt_gated_mlp(s) ? 2 * g->F : g->F;
    /* per target: in, out features; column-parallel (1) or row-parallel (0) base */
    int in[4] = {C, g->A, C, g->F}, out[4] = {qkv, C, fc, C}, column[4] = {1, 0, 1, 0};
    for (int l = 0; l < s->layer_count; l++) {
        int first = g->n_lora;
        for (int t = 0; t < 4; t++) {
            if (g->lora_slot[t] < 0)
                continue;
            char name[48];
            snprintf(name, sizeof name, "layers.%d.%s.lora_A", s->layer_first + l, names[t]);
            add_adapter(g, name, r, in[t], column[t] ? -1 : 1, column[t]);
            snprintf(name, sizeof name, "layers.%d.%s.lora_B", s->layer_first + l, names[t]);
            add_adapter(g, name, out[t], r, column[t] ? 0 : -1, !column[t]);
        }
        g->layer_ranges[l].count = 0;
        for (int i = first; i < g->n_lora; i++)
            g->layer_ranges[l].count += g->lora[i].numel;
    }
    for (int i = 0; i < g->n_lora; i++) { /* reverse forward order, as the base's */
        tr_param_tensor *t = &g->lora[i];
        t->offset = g->n_lora_params - t->forward_offset - t->numel;
    }
    for (int l = 0; l < s->layer_count; l++) /* a layer's adapters: its last one comes first */
        g->layer_ranges[l].offset = g->lora[(l + 1) * g->lora_per_layer - 1].offset;
    g->head_range = (grad_range){0, 0};
    g->embedding_range = (grad_range){0, 0};
    /* the frozen base: parameters, and a gradient sink for its vectors only */
    size_t vectors = 0;
    for (int i = 0; i < g->n_tensors; i++)
        if (g->tensors[i].cols == 1)
            vectors += g->tensors[i].numel;
    g->base_params = g->k->alloc(g->n_params * sizeof(float) + 64);
    g->base_vector_grads = g->k->alloc(vectors * sizeof(float) + 64);
    if (!g->base_params || !g->base_vector_grads)
        return tr_fail(TR_ERR_NOMEM, "out of memory for the frozen base model (%zu MiB)",
                       g->n_params * sizeof(float) >> 20);
    g->k->zero(NULL, g->base_vector_grads, vectors * sizeof(float));
    size_t v = 0;
    for (int i = 0; i < g->n_tensors; i++) {
        tr_param_tensor *t = &g->tensors[i];
        t->param = g->base_params + t->offset;
        t->grad = NULL;
        if (t->cols == 1) {
            t->grad = g->base_vector_grads + v;
            v += t->numel;
        }
    }
    return gpt_init_tensors(g, g->tensors, g->n_tensors, 0, g->n_params);
}

size_t tr_gpt_frozen_bytes(const tr_gpt *g)
{
    if (!g->lora)
        return 0;
    size_t vectors = 0;
    for (int i = 0; i < g->n_tensors; i++)
        if (g->tensors[i].cols == 1)
            vectors += g->tensors[i].numel;
    return (g->n_params + vectors) * sizeof(float) + 128;
}

void gpt_lora_free(tr_gpt *g)
{
    if (g->base_params)
        g->k->free(g->base_params);
    if (g->base_vector_grads)
        g->k->free(g->base_vector_grads);
    tr_free(g->lora);
    tr_free(g->lora_mask_host);
}

/* The dropout mask (N, ICl) of target t of layer l into the scratch: keep / (1 - p), each
 * element from Philox of (seed, the global layer and target; the sample, global position and
 * global input feature), so every layout draws the same (context parallelism: a local row's
 * position is its chunk's, data/data.h tr_cp_position). */
static void dropout_mask(tr_gpt *g, int l, int t, int B)
{
    const tr_gpt_shape *s = &g->s;
    int Tl = s->T, N = B * Tl, cp = gpt_cp_size(g), T = Tl * cp;
    int column = t == LORA_QKV || t == LORA_FC1;
    int IC = t == LORA_FC2 ? g->F : t == LORA_PROJ ? g->A : s->C;
    int ICl = column ? IC : IC / s->tp_size, col0 = column ? 0 : s->tp_rank * ICl;
    float p = (float)gpt_dropout_p(s->lora_dropout); /* (exact: the bound is a float) */
    float keep = 1.0f / (1.0f - p), *m = g->lora_mask_host;
    uint32_t threshold = tr_dropout_threshold(p);
    uint32_t key[2] = {(uint32_t)s->seed ^ 0x4c6f5241u, (uint32_t)(s->seed >> 32)};
    for (int n = 0; n < N; n++) {
        int pos = cp > 1 ? tr_cp_position(T, cp, s->cp_rank, n % Tl) : n % Tl;
        uint64_t row = (g->dropout_sample + (uint64_t)(n / Tl)) * (uint64_t)T + (uint64_t)pos;
        for (int i = 0; i < ICl; i++) {
            uint64_t e = row * (uint64_t)IC + (uint64_t)(col0 + i);
            uint32_t ctr[4] = {(uint32_t)e, (uint32_t)(e >> 32),
                               (uint32_t)((s->layer_first + l) * 4 + t), 0x64726f70u}, r[4];
            tr_philox4x32_10(ctr, key, r);
            m[(size_t)n * ICl + i] = r[0] >= threshold ? keep : 0.0f;
        }
    }
    g->k->to_device(NULL, g->scratch.lora_mask, m, (size_t)N * ICl * sizeof(float));
}

const tr_tp_lora *gpt_lora(tr_gpt *g, const layer_acts *L, int l, int t, int B, tr_tp_lora *out)
{
    if (!g->lora || g->lora_slot[t] < 0)
        return NULL;
    int drop = g->dropout_on && g->s.lora_dropout > 0;
    if (drop)
        dropout_mask(g, l, t, B);
    const tr_param_tensor *A = &g->lora[l * g->lora_per_layer + g->lora_slot[t]], *Bt = A + 1;
    int r = g->s.lora_rank;
    *out = (tr_tp_lora){.A = A->param, .B = Bt->param, .dA = A->grad, .dB = Bt->grad,
                        .h = L->lora_h + (size_t)t * B * g->s.T * r, .dh = g->scratch.lora_dh,
                        .r = r, .scale = g->s.lora_alpha / (float)r,
                        .mask = drop ? g->scratch.lora_mask : NULL,
                        .xd = drop ? g->scratch.lora_xd : NULL};
    return out;
}
