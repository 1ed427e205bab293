/* Token scores from the model's logits: the evaluator (a key/value cache and one chunk of
 * logits rows), streams in windows, and a request's continuations after a shared context.
 * Sizes: V the real vocabulary, R <= TR_EVAL_CHUNK rows of logits per decode call. */
#include "eval/eval.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct tr_evaluator {
    tr_gpt_cache *cache; /* B = 1, max_T = context */
    int context, V;
    float *logits;       /* (TR_EVAL_CHUNK, V) host */
    int32_t *cached;     /* (context) the ids whose keys and values the cache holds */
};

int tr_evaluator_create(tr_gpt *g, int context, tr_evaluator **out)
{
    *out = NULL;
    const tr_gpt_shape *s = tr_gpt_get_shape(g);
    if (context < 1 || context > s->max_T)
        return tr_fail(TR_ERR_INVALID, "a context of %d tokens (the model has %d positions)",
                       context, s->max_T);
    if (s->sliding_window && context > s->sliding_window)
        return tr_fail(TR_ERR_INVALID, "a context of %d tokens exceeds the model's sliding "
                       "window of %d positions: trident's attention is full causal, the "
                       "model's only within its window", context, s->sliding_window);
    tr_evaluator *ev = calloc(1, sizeof *ev);
    if (!ev)
        return tr_fail(TR_ERR_NOMEM, "out of memory for an evaluator");
    ev->context = context;
    ev->V = s->V;
    ev->logits = malloc((size_t)TR_EVAL_CHUNK * (size_t)s->V * sizeof(float));
    ev->cached = malloc((size_t)context * sizeof *ev->cached);
    int rc = ev->logits && ev->cached ? tr_gpt_cache_create(g, 1, context, &ev->cache)
                        : tr_fail(TR_ERR_NOMEM, "out of memory for %d rows of %d logits",
                                  TR_EVAL_CHUNK, s->V);
    if (rc) {
        tr_evaluator_free(ev);
        return rc;
    }
    *out = ev;
    return TR_OK;
}

void tr_evaluator_free(tr_evaluator *ev)
{
    if (!ev)
        return;
    tr_gpt_cache_free(ev->cache);
    free(ev->logits);
    free(ev->cached);
    free(ev);
}

int tr_evaluator_context(const tr_evaluator *ev) { return ev->context; }

void tr_evaluator_reset(tr_evaluator *ev) { tr_gpt_cache_reset(ev->cache); }

/* log softmax(row)[t] in double, and whether t is the row's first maximum. */
static double row_logp(const float *row, int V, int32_t t, unsigned char *greedy)
{
    float max = row[0];
    int first_max = 0;
    for (int v = 1; v < V; v++)
        if (row[v] > max) {
            max = row[v];
            first_max = v;
        }
    double sum = 0;
    for (int v = 0; v < V; v++)
        sum += exp((double)row[v] - (double)max);
    if (greedy)
        *greedy = first_max == t;
    return (double)row[t] - (double)max - log(sum);
}

/* Checks ids[0, n) against the vocabulary, keeps the cached keys and values of the prefix
 * shared with the ids (at most `most` positions: they depend on that prefix alone) in *keep,
 * and records ids[*keep, read) as the positions the caller decodes next. */
static int keep_prefix(tr_evaluator *ev, const int32_t *ids, int n, int most, int read,
                       int *keep)
{
    for (int j = 0; j < n; j++)
        if (ids[j] < 0 || ids[j] >= ev->V)
            return tr_fail(TR_ERR_INVALID, "token %d at position %d is outside the model's "
                           "vocabulary [0, %d)", ids[j], j, ev->V);
    int k = 0, len = tr_gpt_cache_length(ev->cache);
    while (k < len && k < most && ev->cached[k] == ids[k])
        k++;
    tr_gpt_cache_truncate(ev->cache, k);
    if (read > k)
        memcpy(ev->cached + k, ids + k, (size_t)(read - k) * sizeof *ids);
    *keep = k;
    return TR_OK;
}

int tr_eval_score(tr_evaluator *ev, const int32_t *ids, int n, int first, double *logp,
                  unsigned char *greedy)
{
    if (first < 1 || first > n || n - 1 > ev->context)
        return tr_fail(TR_ERR_INVALID, "scoring tokens [%d, %d) with a context of %d", first, n,
                       ev->context);
    int keep, rc = keep_prefix(ev, ids, n, first - 1, n - 1, &keep);
    if (rc)
        return rc;
    /* position p reads ids[p] and predicts ids[p + 1] */
    for (int p = keep; p < n - 1;) {
        int rows = n - 1 - p < TR_EVAL_CHUNK ? n - 1 - p : TR_EVAL_CHUNK;
        int all = p + rows >= first; /* some target of these rows is scored */
        rc = tr_gpt_decode(ev->cache, ids + p, rows, all, ev->logits);
        if (rc)
            return rc;
        for (int r = 0; all && r < rows; r++) {
            int j = p + r + 1;
            if (j >= first)
                logp[j - first] = row_logp(ev->logits + (size_t)r * ev->V, ev->V, ids[j],
                                           greedy ? greedy + (j - first) : NULL);
        }
        p += rows;
    }
    return TR_OK;
}

int tr_eval_greedy_next(tr_evaluator *ev, const int32_t *ids, int n, int32_t *next)
{
    if (n < 1 || n > ev->context)
        return tr_fail(TR_ERR_INVALID, "the next token after %d tokens with a context of %d", n,
                       ev->context);
    /* the cached prefix stays, but the last id is read again for its logits row */
    int keep, rc = keep_prefix(ev, ids, n, n - 1, n, &keep);
    if (rc)
        return rc;
    for (int p = keep; p < n;) {
        int rows = n - p < TR_EVAL_CHUNK ? n - p : TR_EVAL_CHUNK;
        rc = tr_gpt_decode(ev->cache, ids + p, rows, 0, ev->logits); /* last row's */
        if (rc)
            return rc;
        p += rows;
    }
    const float *row = ev->logits;
    int32_t best = 0;
    for (int v = 1; v < ev->V; v++)
        if (row[v] > row[best])
            best = v;
    *next = best;
    return TR_OK;
}

int tr_eval_stream(tr_evaluator *ev, const int32_t *ids, size_t n, int stride, int part,
                   int parts, tr_eval_sums *sums)
{
    if (stride < 1 || stride > ev->context)
        return tr_fail(TR_ERR_INVALID, "a stride of %d tokens with a context of %d", stride,
                       ev->context);
    if (parts < 1 || part < 0 || part >= parts)
        return tr_fail(TR_ERR_INVALID, "part %d of %d", part, parts);
    double *logp = malloc((size_t)ev->context * sizeof *logp);
    if (!logp)
        return tr_fail(TR_ERR_NOMEM, "out of memory");
    int rc = TR_OK;
    size_t prev_end = 0, k = 0;
    sums->streams += part == 0;
    for (size_t begin = 0; begin < n && !rc; begin += (size_t)stride, k++) {
        size_t end = begin + (size_t)ev->context < n ? begin + (size_t)ev->context : n;
        size_t first = begin + 1 > prev_end ? begin + 1 : prev_end;
        if (first < end && k % (size_t)parts == (size_t)part) {
            rc = tr_eval_score(ev, ids + begin, (int)(end - begin), (int)(first - begin), logp,
                               NULL);
            for (size_t j = 0; !rc && j < end - first; j++)
                sums->nll -= logp[j];
            if (!rc) {
                sums->tokens += end - first;
                sums->windows++;
            }
        }
        prev_end = end;
        if (end == n)
            break;
    }
    free(logp);
    return rc;
}

int tr_eval_request_score(tr_evaluator *ev, const tr_eval_request *r, double *ll,
                          unsigned char *greedy)
{
    int C = ev->context, most = 0;
    for (int i = 0; i < r->n_choices; i++)
        most = r->n_cont[i] > most ? r->n_cont[i] : most;
    int32_t *ids = malloc(((size_t)r->n_ctx + (size_t)most) * sizeof *ids);
    double *logp = malloc((size_t)most * sizeof *logp);
    unsigned char *g = malloc((size_t)most);
    int rc = ids && logp && g ? TR_OK : tr_fail(TR_ERR_NOMEM, "out of memory");
    if (!rc)
        memcpy(ids, r->ctx, (size_t)r->n_ctx * sizeof *ids);
    for (int i = 0; i < r->n_choices && !rc; i++) {
        int m = r->n_cont[i], n = r->n_ctx + m;
        memcpy(ids + r->n_ctx, r->cont[i], (size_t)m * sizeof *ids);
        /* whole, or the last C + 1 ids (the model reads C of them) */
        int skip = n - 1 <= C ? 0 : n - (C + 1);
        rc = tr_eval_score(ev, ids + skip, n - skip, r->n_ctx - skip, logp, g);
        ll[i] = 0;
        greedy[i] = 1;
        for (int j = 0; !rc && j < m; j++) {
            ll[i] += logp[j];
            greedy[i] &= g[j];
        }
    }
    free(ids);
    free(logp);
    free(g);
    return rc;
}

int tr_eval_argmax(const double *ll, const int64_t *chars, int n, int norm)
{
    int best = 0;
    for (int i = 1; i < n; i++) {
        double a = norm ? ll[i] / (double)chars[i] : ll[i];
        double b = norm ? ll[best] / (double)chars[best] : ll[best];
        if (a > b)
            best = i;
    }
    return best;
}
