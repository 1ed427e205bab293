/* Hidden and attention dropout (model.hidden_dropout, model.attention_dropout; model/gpt.h):
 * each site's mask is core/philox.h's decision at global coordinates (the global layer, the
 * micro-batch's global samples, positions and features, global heads), recomputed in backward
 * and by recompute from the same arguments, so every layout drops the same elements. */
#include "model/gpt_internal.h"

#include "data/data.h"

static tr_dropout site_args(const tr_gpt *g, int l, int kind, double p)
{
    p = gpt_dropout_p(p);
    return (tr_dropout){.seed = g->s.seed, .first_sample = g->dropout_sample,
                        .site = tr_dropout_site(g->s.layer_first + l, kind),
                        .threshold = tr_dropout_threshold(p),
                        .scale = (float)(1.0 / (1.0 - p)), .head0 = g->s.tp_rank * g->NHl};
}

/* x (Nl, C): this rank's rows (from r0 of the micro-batch's B*T) through site (l, kind)'s
 * mask, in place or into out. With context parallelism a local chunk's c rows are c
 * consecutive positions of a sample of T = Tl CP: one call per (sample, chunk) run of the rows
 * at its global row (2 B calls at most). */
static void drop_rows(tr_gpt *g, float *out, const float *x, int l, int kind, int B)
{
    int r0, Nl, cp = gpt_cp_size(g), Tl = g->s.T, C = g->s.C;
    gpt_rows(g, B, &r0, &Nl);
    tr_dropout d = site_args(g, l, kind, g->s.hidden_dropout);
    if (cp == 1) {
        g->k->dropout(NULL, out, x, d, Nl, C, Tl, r0, C, 0);
        return;
    }
    int c = Tl / 2, T = Tl * cp;
    for (int n = r0, end; n < r0 + Nl; n = end) {
        end = (n / c + 1) * c < r0 + Nl ? (n / c + 1) * c : r0 + Nl;
        int row = n / Tl * T + tr_cp_position(T, cp, g->s.cp_rank, n % Tl);
        size_t at = (size_t)(n - r0) * C;
        g->k->dropout(NULL, out + at, x + at, d, end - n, C, T, row, C, 0);
    }
}

void gpt_dropout_rows(tr_gpt *g, float *x, int l, int kind, int B)
{
    if (gpt_hidden_drop(g))
        drop_rows(g, x, x, l, kind, B);
}

void gpt_dropout_add(tr_gpt *g, float *y, const float *residual, int l, int kind, int B)
{
    if (!gpt_hidden_drop(g))
        return;
    int r0, Nl;
    gpt_rows(g, B, &r0, &Nl);
    drop_rows(g, y, y, l, kind, B);
    g->k->add(NULL, y, y, residual, (size_t)Nl * g->s.C);
}

const float *gpt_dropout_grad(tr_gpt *g, const float *dres, int l, int kind, int B)
{
    if (!gpt_hidden_drop(g))
        return dres;
    drop_rows(g, g->scratch.drop_dy, dres, l, kind, B);
    return g->scratch.drop_dy;
}

tr_dropout gpt_attention_dropout_site(const tr_gpt *g, int l)
{
    return site_args(g, l, TR_DROPOUT_ATTN_PROBS, g->s.attention_dropout);
}

void gpt_attention_dropout_forward(tr_gpt *g, const layer_acts *L, int l, int B)
{
    g->k->attention_gqa_dropout_forward(NULL, L->atty, L->lse, L->qkv, g->alibi, B, g->s.T,
                                        g->NHl, g->NGl, g->HS, g->segments,
                                        gpt_attention_dropout_site(g, l));
}

void gpt_attention_dropout_backward(tr_gpt *g, const layer_acts *L, int l, int B)
{
    gpt_scratch *sc = &g->scratch;
    g->k->attention_gqa_dropout_backward(NULL, sc->dqkv, sc->att_rowsum, sc->datty, L->qkv,
                                         L->atty, L->lse, g->alibi, B, g->s.T, g->NHl, g->NGl,
                                         g->HS, g->segments, gpt_attention_dropout_site(g, l));
}
