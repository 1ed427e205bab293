/* Packed sequences (model/gpt.h, tr_gpt_acts_set_packing): several fine-tuning examples in
 * one row, kept apart by segment ids (the attention's mask), position ids restarting per
 * example (rows of wpe gathered by id instead of by t) and per-token loss weights.
 * Sizes as in gpt_internal.h. */
#include "model/gpt_internal.h"

#include <string.h>

#include "core/core.h"

int tr_gpt_acts_set_packing(tr_gpt_acts *a, const int32_t *segments, const int32_t *positions,
                            const float *loss_weights)
{
    tr_gpt *g = a->g;
    const tr_kernels *k = g->k;
    int N = a->B * g->s.T;
    if (!a->packing_memory) {
        a->packing_memory = k->alloc(3 * (size_t)N * sizeof(int32_t));
        a->loss_weights_host = tr_alloc((size_t)N * sizeof(float), "loss weights");
        if (!a->packing_memory || !a->loss_weights_host)
            return tr_fail(TR_ERR_NOMEM, "out of memory for packed-sequence ids of %d tokens", N);
    }
    int32_t *mem = a->packing_memory;
    /* wpe has max_T rows; the rope tables hold T positions (tr_gpt_create; ids restarting per
     * example in a row of T tokens are < T, and T <= max_T). ALiBi reads no ids. */
    int rope = g->s.position == TR_POS_ROPE, limit = rope ? g->s.T * gpt_cp_size(g) : g->s.max_T;
    for (int n = 0; positions && n < N; n++)
        if (positions[n] < 0 || positions[n] >= limit)
            return tr_fail(TR_ERR_INVALID, "position id %d of token %d is outside [0, %d) (%s)",
                           positions[n], n, limit, rope ? "the sequence length: rotary "
                           "positions restart in each row" : "max_position_embeddings");
    a->segments = segments ? mem : NULL;
    a->positions = positions ? mem + N : NULL;
    a->loss_weights = loss_weights ? (float *)(mem + 2 * (size_t)N) : NULL;
    size_t bytes = (size_t)N * sizeof(int32_t);
    if (segments)
        k->to_device(NULL, a->segments, segments, bytes);
    if (positions)
        k->to_device(NULL, a->positions, positions, bytes);
    if (loss_weights) {
        k->to_device(NULL, a->loss_weights, loss_weights, bytes);
        memcpy(a->loss_weights_host, loss_weights, bytes);
    }
    return TR_OK;
}

void gpt_add_position_ids(tr_gpt *g, const tr_gpt_acts *a, float *out, float *scratch, int r0,
                          int Nl)
{
    int C = g->s.C;
    g->k->embedding_forward(NULL, scratch, a->positions + r0, g->tensors[g->wpe].param, Nl, C, 0,
                            g->s.max_T);
    g->k->add(NULL, out, out, scratch, (size_t)Nl * C);
}

void gpt_position_ids_backward(tr_gpt *g, const tr_gpt_acts *a, const float *dall)
{
    g->k->embedding_backward(NULL, g->tensors[g->wpe].grad, dall, a->positions, a->B * g->s.T,
                             g->s.C, 0, g->s.max_T);
}

double gpt_weighted_loss(const tr_gpt_acts *a, const float *losses, int N)
{
    double sum = 0, weight = 0;
    for (int n = 0; n < N; n++) {
        sum += (double)a->loss_weights_host[n] * losses[n];
        weight += a->loss_weights_host[n];
    }
    return weight > 0 ? sum / weight : 0.0;
}
