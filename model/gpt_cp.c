/* Context parallelism (model/gpt.h tr_gpt_set_cp): each CP rank holds chunks r and 2 CP-1-r of
 * the 2 CP chunks of every sample (data/data.h). A layer's attention all-gathers the group's
 * qkv rows (whole rows, queries included: each piece stays one contiguous copy), lays them out
 * in sequence order, and runs each local chunk's query rows at their global positions against
 * the keys before them (kernels.h attention_rows_*: Llama 3's all-gather scheme, exact).
 * Backward gathers again, accumulates every chunk's dQ, dK, dV into a sequence-order buffer
 * and reduce-scatters it back to the rows' owners (the sum over CP ranks of dK, dV).
 * Sizes: Tl = s.T local tokens per sample, c = Tl / 2 per chunk, T = Tl * CP, W = QKVl. */
#include "model/gpt_internal.h"

#include "core/core.h"
#include "data/data.h"

void tr_gpt_shape_set_cp(tr_gpt_shape *s, int cp, int rank)
{
    s->cp_size = cp;
    s->cp_rank = rank;
    if (cp > 1)
        s->T /= cp;
}

int tr_gpt_set_cp(tr_gpt *g, tr_comm *cp_comm)
{
    const tr_gpt_shape *s = &g->s;
    int cp = gpt_cp_size(g);
    if (cp == 1)
        return cp_comm ? tr_fail(TR_ERR_INVALID, "a CP group given to a model without context "
                                 "parallelism") : TR_OK;
    if (!cp_comm || tr_comm_size(cp_comm) != cp || tr_comm_rank(cp_comm) != s->cp_rank)
        return tr_fail(TR_ERR_INVALID, "the context-parallel group must be rank %d of %d",
                       s->cp_rank, cp);
    if (s->T % 2)
        return tr_fail(TR_ERR_INVALID, "context parallelism: %d local tokens are not two chunks",
                       s->T);
    if (!g->k->attention_rows_forward || !g->k->attention_rows_backward)
        return tr_fail(TR_ERR_CONFIG, "the %s backend has no attention_rows kernels: context "
                       "parallelism runs on training.device cpu", g->k->name);
    if (gpt_atty16(g) || gpt_qkv16(g) || s->num_experts)
        return tr_fail(TR_ERR_CONFIG, "context parallelism runs fp32 attention without experts");
    g->cp = cp_comm;
    return TR_OK;
}

void gpt_cp_free(tr_gpt *g)
{
    g->k->free(g->cp_gathered);
    g->k->free(g->cp_full);
    g->k->free(g->cp_dfull);
    g->cp_gathered = g->cp_full = g->cp_dfull = NULL;
    g->cp_floats = 0;
}

int gpt_cp_positions(tr_gpt_acts *a)
{
    tr_gpt *g = a->g;
    int N = a->B * g->s.T, Tl = g->s.T, cp = gpt_cp_size(g);
    int32_t *pos = tr_alloc((size_t)N * sizeof *pos, "context-parallel positions");
    if (!pos)
        return TR_ERR_NOMEM;
    for (int n = 0; n < N; n++)
        pos[n] = tr_cp_position(Tl * cp, cp, g->s.cp_rank, n % Tl);
    int rc = tr_gpt_acts_set_packing(a, NULL, pos, NULL);
    tr_free(pos);
    return rc;
}

static int ensure_buffers(tr_gpt *g, int B)
{
    size_t n = (size_t)B * g->s.T * gpt_cp_size(g) * g->QKVl;
    if (n <= g->cp_floats)
        return TR_OK;
    gpt_cp_free(g);
    g->cp_gathered = g->k->alloc(n * sizeof(float));
    g->cp_full = g->k->alloc(n * sizeof(float));
    g->cp_dfull = g->k->alloc(n * sizeof(float));
    if (!g->cp_gathered || !g->cp_full || !g->cp_dfull) {
        gpt_cp_free(g);
        return tr_fail(TR_ERR_NOMEM, "out of memory for context-parallel attention (3 x %zu MiB)",
                       n * sizeof(float) >> 20);
    }
    g->cp_floats = n;
    return TR_OK;
}

/* Copy every rank's chunks between rank order (CP, B, Tl, W) and sequence order (B, T, W):
 * to_sequence 1 gathers, 0 scatters back. */
static void reorder(tr_gpt *g, float *rank_order, float *seq_order, int B, int to_sequence)
{
    int cp = gpt_cp_size(g), Tl = g->s.T, c = Tl / 2, T = Tl * cp;
    size_t W = (size_t)g->QKVl, bytes = (size_t)c * W * sizeof(float);
    for (int p = 0; p < cp; p++)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < 2; h++) {
                float *r = rank_order + (((size_t)p * B + b) * Tl + (size_t)h * c) * W;
                float *q = seq_order + ((size_t)b * T + (size_t)tr_cp_chunk(cp, p, h) * c) * W;
                if (to_sequence)
                    g->k->copy(NULL, q, r, bytes);
                else
                    g->k->copy(NULL, r, q, bytes);
            }
}

/* The group's qkv rows in sequence order in cp_full. */
static int gather_rows(tr_gpt *g, const float *qkv, int B)
{
    int rc = ensure_buffers(g, B);
    if (!rc)
        rc = tr_comm_allgather(g->cp, qkv, g->cp_gathered,
                               (size_t)B * g->s.T * gpt_cp_size(g) * g->QKVl, TR_COMM_F32);
    if (rc)
        return tr_fail_context(rc, "context-parallel all-gather of qkv");
    reorder(g, g->cp_gathered, g->cp_full, B, 1);
    return TR_OK;
}

int gpt_cp_attention_forward(tr_gpt *g, float *out, float *lse, const float *qkv, int B)
{
    if (g->segments)
        return tr_fail(TR_ERR_INVALID, "context parallelism with packed sequences");
    int rc = gather_rows(g, qkv, B);
    if (rc)
        return rc;
    int cp = gpt_cp_size(g), Tl = g->s.T, c = Tl / 2, T = Tl * cp, r = g->s.cp_rank;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < 2; h++) {
            int q0 = tr_cp_chunk(cp, r, h) * c;
            g->k->attention_rows_forward(NULL, out + ((size_t)b * Tl + (size_t)h * c) * g->Al,
                                         lse + ((size_t)b * 2 + h) * g->NHl * c,
                                         g->cp_full + (size_t)b * T * g->QKVl, g->alibi, 1,
                                         q0 + c, q0, g->NHl, g->NGl, g->HS);
        }
    return TR_OK;
}

int gpt_cp_attention_backward(tr_gpt *g, float *dqkv, const float *dout, const float *qkv,
                              const float *out, const float *lse, int B)
{
    int rc = gather_rows(g, qkv, B);
    if (rc)
        return rc;
    int cp = gpt_cp_size(g), Tl = g->s.T, c = Tl / 2, T = Tl * cp, r = g->s.cp_rank;
    size_t rows = (size_t)B * Tl * g->QKVl;
    g->k->zero(NULL, g->cp_dfull, rows * cp * sizeof(float));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < 2; h++) {
            int q0 = tr_cp_chunk(cp, r, h) * c;
            size_t o = ((size_t)b * Tl + (size_t)h * c) * g->Al;
            g->k->attention_rows_backward(NULL, g->cp_dfull + (size_t)b * T * g->QKVl, dout + o,
                                          g->cp_full + (size_t)b * T * g->QKVl, out + o,
                                          lse + ((size_t)b * 2 + h) * g->NHl * c, g->alibi, 1,
                                          q0 + c, q0, g->NHl, g->NGl, g->HS);
        }
    /* each owner's rows: the sum over ranks of their dK, dV (and its own dQ) */
    reorder(g, g->cp_gathered, g->cp_dfull, B, 0);
    rc = tr_comm_reduce_scatter(g->cp, g->cp_gathered, dqkv, rows * cp, TR_COMM_F32,
                                TR_COMM_SUM);
    return rc ? tr_fail_context(rc, "context-parallel reduce-scatter of dqkv") : TR_OK;
}
