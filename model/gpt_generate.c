/* GPT inference with a key/value cache: the forward pass of new positions only (each layer's
 * keys and values of earlier positions are kept), the logits over the whole vocabulary on
 * every tensor-parallel rank, and sampling (greedy, temperature, top-k, top-p).
 * Sizes: B sequences, n new positions per call, R = B*n rows, L = past + n cached positions,
 * C hidden, l = this TP rank's share (Al = NH HS/tp, NHl = NH/tp, Vl = Vp/tp), HS head size. */
#include "model/gpt_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

struct tr_gpt_cache {
    tr_gpt *g;
    int B, max_T, len;
    float *memory;     /* one device allocation; everything below points into it */
    float *k, *v;      /* (layers, B, NGl, max_T, HS) each (NGl = NHl but with GQA) */
    int32_t *ids;      /* (B*max_T) device token ids */
    float *x, *res2;   /* (B*max_T, C) residual stream */
    float *ln;         /* (B*max_T, C) layernorm output (also the last rows for the head) */
    float *mean, *rstd;/* (B*max_T) */
    float *qkv;        /* (B*max_T, QKVl) */
    float *atty;       /* (B*max_T, Al) */
    float *fch, *fch_gelu; /* (B*max_T, Fwl), (B*max_T, Fl) */
    float *scores;     /* (B, NHl, max_T, max_T) */
    float *wide;       /* (B*max_T, C): TP scratch of the embedding and row-parallel layers */
    /* the head, grown on demand: rows of logits asked for at once */
    int head_rows;
    float *logits, *logits_full, *gather; /* (rows, Vl), (rows, Vp), (tp*rows*Vl) */
    float *host;                          /* (rows, Vp) host */
    /* mixture of experts (gpt_moe_mlp on R rows; fch and fch_gelu then k R rows): the
     * routing's buffers, (R, E) logits, (R, C) the weighted sum, host counts and losses */
    layer_acts moe;
    float *moe_logits, *moe_sum;
    int *moe_counts;
    double moe_losses[2];
};

static size_t padded(size_t count) { return (count + 15) & ~(size_t)15; }

static float *take(float **cursor, size_t count)
{
    float *p = *cursor;
    *cursor += padded(count);
    return p;
}

/* Floats of the cache and the per-call activations (carve = 0 counts, 1 carves). */
static size_t cache_layout(tr_gpt_cache *c, int carve)
{
    const tr_gpt *g = c->g;
    size_t R = (size_t)c->B * c->max_T, C = g->s.C, Al = g->Al, HS = g->HS;
    size_t kv = (size_t)g->s.layer_count * c->B * g->NGl * c->max_T * HS;
    size_t E = (size_t)g->s.num_experts, M = E ? R * g->s.moe_topk : 0, X = E ? M : R;
    layer_acts *m = &c->moe;
    size_t sizes[] = {kv, kv, R, R * C, R * C, R * C, R, R, R * (size_t)g->QKVl, R * Al,
                      X * (size_t)g->Fwl, X * (size_t)g->Fl,
                      (size_t)c->B * g->NHl * c->max_T * c->max_T, g->s.tp_size > 1 ? R * C : 0,
                      R * E, E ? R : 0, M, M, M, M, M, M * C, M * C, R * E, E ? R * C : 0};
    float **dst[] = {&c->k, &c->v, (float **)&c->ids, &c->x, &c->res2, &c->ln, &c->mean,
                     &c->rstd, &c->qkv, &c->atty, &c->fch, &c->fch_gelu, &c->scores, &c->wide,
                     &m->moe_probs, &m->moe_lse, (float **)&m->moe_idx, &m->moe_weights,
                     (float **)&m->moe_tok, (float **)&m->moe_slot, &m->moe_w, &m->moe_x,
                     &m->moe_y, &c->moe_logits, &c->moe_sum};
    size_t total = 0;
    float *cursor = c->memory;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        total += padded(sizes[i]);
        if (carve)
            *dst[i] = take(&cursor, sizes[i]);
    }
    return total;
}

int tr_gpt_cache_create(tr_gpt *g, int B, int max_T, tr_gpt_cache **out)
{
    *out = NULL;
    const tr_gpt_shape *s = &g->s;
    if (!s->is_first || !s->is_last)
        return tr_fail(TR_ERR_INVALID, "generation needs the whole model in one stage (layers "
                                       "%d..%d of a pipeline stage given)",
                       s->layer_first, s->layer_first + s->layer_count - 1);
    if (s->sequence_parallel)
        return tr_fail(TR_ERR_INVALID, "generation runs without sequence parallelism");
    if (!tr_gpt_is_gpt2(s) && !g->k->attention_gqa_decode)
        return tr_fail(TR_ERR_CONFIG, "the %s kernel backend has no cached attention for "
                                      "Llama / Bloom models", g->k->name);
    if (!g->k->attention_decode)
        return tr_fail(TR_ERR_CONFIG, "the %s kernel backend has no cached attention for "
                                      "generation", g->k->name);
    if (B < 1 || max_T < 1 || max_T > s->max_T)
        return tr_fail(TR_ERR_INVALID, "a cache of %d sequences of %d positions (the model "
                                       "has %d positions)", B, max_T, s->max_T);
    int rc = gpt_rope_reserve(g, max_T); /* rope: positions 0 .. max_T - 1 of the cache */
    if (rc)
        return rc;
    tr_gpt_cache *c = tr_alloc(sizeof *c, "generation cache");
    if (!c)
        return TR_ERR_NOMEM;
    *c = (tr_gpt_cache){.g = g, .B = B, .max_T = max_T};
    size_t floats = cache_layout(c, 0);
    c->memory = g->k->alloc(floats * sizeof(float));
    if (!c->memory) {
        tr_free(c);
        return tr_fail(TR_ERR_NOMEM, "out of memory for a generation cache of %zu MiB",
                       floats * sizeof(float) >> 20);
    }
    cache_layout(c, 1);
    if (s->num_experts) { /* the router's host values (gpt_moe_mlp) */
        c->moe.fch = c->fch, c->moe.fch_gelu = c->fch_gelu;
        c->moe.moe_counts = c->moe_counts =
            tr_alloc((size_t)s->num_experts * sizeof(int), "expert counts");
        c->moe.moe_losses = c->moe_losses;
        rc = c->moe_counts ? gpt_moe_host_ensure(g, B * max_T) : TR_ERR_NOMEM;
        if (rc) {
            tr_gpt_cache_free(c);
            return rc;
        }
    }
    *out = c;
    return TR_OK;
}

static void free_head(tr_gpt_cache *c)
{
    const tr_kernels *k = c->g->k;
    k->free(c->logits);
    k->free(c->logits_full);
    k->free(c->gather);
    tr_free(c->host);
    c->logits = c->logits_full = c->gather = c->host = NULL;
    c->head_rows = 0;
}

void tr_gpt_cache_free(tr_gpt_cache *c)
{
    if (!c)
        return;
    free_head(c);
    c->g->k->free(c->memory);
    tr_free(c->moe_counts);
    tr_free(c);
}

int tr_gpt_cache_length(const tr_gpt_cache *c) { return c->len; }
void tr_gpt_cache_reset(tr_gpt_cache *c) { c->len = 0; }
void tr_gpt_cache_truncate(tr_gpt_cache *c, int len)
{
    if (len >= 0 && len < c->len)
        c->len = len;
}

static int ensure_head(tr_gpt_cache *c, int rows)
{
    if (rows <= c->head_rows)
        return TR_OK;
    free_head(c);
    const tr_gpt *g = c->g;
    const tr_kernels *k = g->k;
    size_t R = (size_t)rows, Vl = (size_t)g->Vl, Vp = (size_t)g->s.Vp;
    c->logits = k->alloc(R * Vl * sizeof(float));
    c->logits_full = k->alloc(R * Vp * sizeof(float));
    c->gather = k->alloc((size_t)g->s.tp_size * R * Vl * sizeof(float));
    c->host = tr_alloc(R * Vp * sizeof(float), "logits");
    if (!c->logits || !c->logits_full || !c->gather || !c->host) {
        free_head(c);
        return tr_fail(TR_ERR_NOMEM, "out of memory for the logits of %d rows", rows);
    }
    c->head_rows = rows;
    return TR_OK;
}

/* Layer l on R = B*n rows of c->x (in place): the llm.c order of gpt_layer_forward, with
 * attention against the cache. */
static int layer_decode(tr_gpt_cache *c, int l, int n)
{
    tr_gpt *g = c->g;
    const tr_kernels *k = g->k;
    const tr_tp *tp = &g->tp;
    int C = g->s.C, Al = g->Al, HS = g->HS, R = c->B * n, rc;
    size_t kv = (size_t)c->B * g->NGl * c->max_T * HS * l;
    norm_forward(g, c->ln, c->mean, c->rstd, c->x, layer_param(g, l, L_LN1_W),
                 layer_param(g, l, L_LN1_B), R);
    rc = tr_tp_column_linear_forward(tp, c->qkv, c->ln, layer_param(g, l, L_QKV_W),
                                     layer_param(g, l, L_QKV_B), R, C, g->QKVl, NULL, NULL);
    if (rc)
        return rc;
    if (g->s.position == TR_POS_ROPE) { /* positions past .. past + n - 1 of each sequence
                                          * (< c->max_T <= g->rope_positions) */
        size_t at = (size_t)c->len * (size_t)(g->s.rotary_dims / 2);
        k->rope(NULL, c->qkv, g->rope_cos + at, g->rope_sin + at, c->B, n, g->NGl,
                g->NHl / g->NGl, HS, g->s.rotary_dims, 0, NULL);
    }
    if (uses_gqa_attention(g))
        k->attention_gqa_decode(NULL, c->atty, c->k + kv, c->v + kv, c->scores, c->qkv, g->alibi,
                                c->B, n, c->len, c->max_T, g->NHl, g->NGl, HS);
    else
        k->attention_decode(NULL, c->atty, c->k + kv, c->v + kv, c->scores, c->qkv, c->B, n,
                            c->len, c->max_T, g->NHl, HS);
    rc = tr_tp_row_linear_forward(tp, c->res2, c->x, c->atty, layer_param(g, l, L_ATTPROJ_W),
                                  layer_param(g, l, L_ATTPROJ_B), R, Al, C, c->wide);
    if (rc)
        return rc;
    /* the MLP's norm reads res2, or the layer input x (still in c->x) with the parallel
     * residual */
    norm_forward(g, c->ln, c->mean, c->rstd, g->s.parallel_residual ? c->x : c->res2,
                 layer_param(g, l, L_LN2_W), layer_param(g, l, L_LN2_B), R);
    if (g->s.num_experts) { /* each new token routed to its experts (gpt_moe.c) */
        rc = gpt_moe_mlp(g, l, &c->moe, c->ln, R, c->moe_logits, c->moe_sum);
        return rc ? rc : tr_tp_row_reduce(tp, c->x, c->res2, c->moe_sum, NULL, NULL, R, C);
    }
    rc = tr_tp_column_linear_forward(tp, c->fch, c->ln, layer_param(g, l, L_FC_W),
                                     layer_param(g, l, L_FC_B), R, C, g->Fwl, NULL, NULL);
    if (rc)
        return rc;
    gpt_mlp_act_forward(g, c->fch_gelu, c->fch, (size_t)R * g->Fl);
    return tr_tp_row_linear_forward(tp, c->x, c->res2, c->fch_gelu,
                                    layer_param(g, l, L_FCPROJ_W), layer_param(g, l, L_FCPROJ_B),
                                    R, g->Fl, C, c->wide);
}

int tr_gpt_decode(tr_gpt_cache *c, const int32_t *tokens, int n, int all_positions,
                  float *logits)
{
    tr_gpt *g = c->g;
    const tr_kernels *k = g->k;
    const tr_gpt_shape *s = &g->s;
    int B = c->B, C = s->C, V = s->V, Vp = s->Vp, R = B * n, rc;
    if (n < 1 || c->len + n > c->max_T)
        return tr_fail(TR_ERR_INVALID, "%d new positions after %d do not fit the cache of %d "
                                       "positions", n, c->len, c->max_T);
    for (int i = 0; i < R; i++)
        if (tokens[i] < 0 || tokens[i] >= V)
            return tr_fail(TR_ERR_INVALID, "token %d at position %d is outside the vocabulary "
                                           "[0, %d)", tokens[i], i, V);
    int rows = all_positions ? R : B;
    if ((rc = ensure_head(c, rows)))
        return rc;
    /* embeddings: x (R, C) = wte[ids] + wpe[past .. past+n) */
    k->to_device(NULL, c->ids, tokens, (size_t)R * sizeof(int32_t));
    rc = tr_tp_vocab_embedding_forward(&g->tp, c->x, c->ids, g->tensors[g->wte].param, R, C,
                                       g->Vl, c->wide);
    if (rc)
        return rc;
    if (s->position == TR_POS_LEARNED)
        k->position_forward(NULL, c->x, g->tensors[g->wpe].param + (size_t)c->len * C, B, n, C);
    if (s->embedding_multiplier) /* Gemma's sqrt(hidden_size) */
        k->scale(NULL, c->x, s->embedding_multiplier, (size_t)R * C);
    if (s->embedding_ln) { /* Bloom: the norm of the embeddings (res2 is free until the layers) */
        k->copy(NULL, c->res2, c->x, (size_t)R * C * sizeof(float));
        norm_forward(g, c->x, c->mean, c->rstd, c->res2, g->tensors[g->emb_ln_w].param,
                     g->emb_ln_b >= 0 ? g->tensors[g->emb_ln_b].param : NULL, R);
    }
    for (int l = 0; l < s->layer_count; l++)
        if ((rc = layer_decode(c, l, n)))
            return rc;
    /* head on the rows asked for: every position, or the last new one of each sequence */
    const float *h = c->x;
    if (!all_positions) {
        for (int b = 0; b < B; b++)
            k->copy(NULL, c->res2 + (size_t)b * C, c->x + ((size_t)b * n + n - 1) * C,
                    (size_t)C * sizeof(float));
        h = c->res2;
    }
    norm_forward(g, c->ln, c->mean, c->rstd, h, g->tensors[g->lnf_w].param,
                 g->lnf_b >= 0 ? g->tensors[g->lnf_b].param : NULL, rows);
    rc = tr_tp_column_linear_forward(&g->tp, c->logits, c->ln, g->tensors[g->head_wte].param,
                                     g->head_bias >= 0 ? g->tensors[g->head_bias].param : NULL,
                                     rows, C, g->Vl, s->tp_size > 1 ? c->logits_full : NULL,
                                     c->gather);
    if (!rc) /* the host reads the logits: the TP gather must have completed */
        rc = tr_tp_flush(&g->tp);
    if (rc)
        return rc;
    const float *full = s->tp_size > 1 ? c->logits_full : c->logits;
    k->to_host(NULL, c->host, full, (size_t)rows * Vp * sizeof(float));
    for (int r = 0; r < rows; r++) /* the V real columns: padding is not a token */
        memcpy(logits + (size_t)r * V, c->host + (size_t)r * Vp, (size_t)V * sizeof(float));
    c->len += n;
    return TR_OK;
}

/* ------------------------------------------------------------------ sampling */

typedef struct {
    float logit;
    int id;
} candidate;

static int by_logit_desc(const void *a, const void *b)
{
    const candidate *x = a, *y = b;
    if (x->logit != y->logit)
        return x->logit < y->logit ? 1 : -1;
    return x->id - y->id; /* ties: the smaller id first, so the order is total */
}

int tr_sample_token(const float *logits, int V, const tr_sampling *o, double u, void *scratch)
{
    int best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best])
            best = i;
    if (o->temperature <= 0 || o->top_k == 1)
        return best; /* greedy; the first of equal maxima */
    candidate *cand = scratch;
    for (int i = 0; i < V; i++)
        cand[i] = (candidate){logits[i], i};
    qsort(cand, (size_t)V, sizeof *cand, by_logit_desc);
    int keep = o->top_k > 0 && o->top_k < V ? o->top_k : V;
    /* probabilities of the kept candidates at the temperature, in double */
    double total = 0, *p = (double *)(cand + V);
    for (int i = 0; i < keep; i++)
        total += p[i] = exp(((double)cand[i].logit - cand[0].logit) / o->temperature);
    if (o->top_p > 0 && o->top_p < 1) { /* the smallest prefix whose mass reaches top_p */
        double mass = 0;
        for (int i = 0; i < keep; i++) {
            mass += p[i] / total;
            if (mass >= o->top_p) {
                keep = i + 1;
                break;
            }
        }
        total = 0;
        for (int i = 0; i < keep; i++)
            total += p[i];
    }
    double target = u * total, acc = 0;
    for (int i = 0; i < keep; i++) {
        acc += p[i];
        if (target < acc)
            return cand[i].id;
    }
    return cand[keep - 1].id;
}

size_t tr_sample_scratch_bytes(int V)
{
    return (size_t)V * (sizeof(candidate) + sizeof(double)) + sizeof(double);
}
