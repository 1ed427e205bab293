/* Generation requests (lm-evaluation-harness's generate_until): greedy tokens after the
 * context until a stop string, the end-of-document token, max_gen_toks or the full context;
 * the text cut before the stop strings. */
#include "eval/eval.h"

#include "core/core.h"

#include <stdlib.h>
#include <string.h>

/* text (*len bytes) with each maximal invalid UTF-8 subpart replaced by one U+FFFD, as the
 * harness's text is (tokenizers' and Python's lossy decoding); in place of *text. */
static int lossy_utf8(char **text, size_t len)
{
    const unsigned char *s = (const unsigned char *)*text;
    if (tr_utf8_valid_prefix(s, len) == len)
        return TR_OK;
    char *out = malloc(tr_utf8_lossy(s, len, 0, NULL) + 1);
    if (!out)
        return tr_fail(TR_ERR_NOMEM, "out of memory");
    out[tr_utf8_lossy(s, len, 0, out)] = '\0';
    free(*text);
    *text = out;
    return TR_OK;
}

/* The text of ids[0, n): the tokenizer's decoding, or the ids as bytes. An id the tokenizer
 * has no token for (a model's vocabulary padded past the tokenizer's) adds nothing, as
 * Hugging Face's decode skips it. */
static int decode_text(const tr_tokenizer *t, const int32_t *ids, int n, char **text)
{
    *text = NULL;
    if (t) {
        int32_t *known = malloc(((size_t)n + 1) * sizeof *known);
        if (!known)
            return tr_fail(TR_ERR_NOMEM, "out of memory");
        size_t m = 0, len;
        for (int i = 0; i < n; i++)
            if (tr_token_bytes(t, ids[i], &len))
                known[m++] = ids[i];
        int rc = tr_decode(t, known, m, text, &len);
        free(known);
        return rc ? rc : lossy_utf8(text, len);
    }
    char *s = malloc((size_t)n + 1);
    if (!s)
        return tr_fail(TR_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n; i++)
        s[i] = (char)ids[i];
    s[n] = '\0';
    *text = s;
    return lossy_utf8(text, (size_t)n);
}

static int holds_a_stop(const tr_eval_request *r, const char *text)
{
    for (int i = 0; i < r->n_until; i++)
        if (strstr(text, r->until[i]))
            return 1;
    return 0;
}

int tr_eval_generate(tr_evaluator *ev, const tr_tokenizer *t, int32_t eod,
                     const tr_eval_request *r, char **text, int *n_tokens)
{
    *text = NULL;
    *n_tokens = 0;
    int C = tr_evaluator_context(ev);
    if (!r->generate || r->n_ctx < 1 || r->n_ctx > C)
        return tr_fail(TR_ERR_INVALID, "line %llu: not a generation request of at most %d "
                       "context tokens", (unsigned long long)r->line, C);
    int cap = r->n_ctx + r->max_gen_toks < C ? r->n_ctx + r->max_gen_toks : C;
    int32_t *ids = malloc((size_t)(cap > r->n_ctx ? cap : r->n_ctx) * sizeof *ids);
    if (!ids)
        return tr_fail(TR_ERR_NOMEM, "out of memory");
    memcpy(ids, r->ctx, (size_t)r->n_ctx * sizeof *ids);
    int n = r->n_ctx, rc = TR_OK;
    char *out = NULL;
    /* one token at a time; the context's keys and values are decoded once (the evaluator
     * keeps the shared prefix) */
    while (!rc && n < cap) {
        int32_t next;
        rc = tr_eval_greedy_next(ev, ids, n, &next);
        if (rc || next == eod)
            break;
        ids[n++] = next;
        free(out);
        rc = decode_text(t, ids + r->n_ctx, n - r->n_ctx, &out);
        if (!rc && holds_a_stop(r, out))
            break;
    }
    if (!rc && !out)
        rc = decode_text(t, ids, 0, &out);
    if (!rc) /* before each stop string in turn, as the harness's s.split(term)[0] */
        for (int i = 0; i < r->n_until; i++) {
            char *at = strstr(out, r->until[i]);
            if (at)
                *at = '\0';
        }
    free(ids);
    if (rc) {
        free(out);
        return rc;
    }
    *text = out;
    *n_tokens = n - r->n_ctx;
    return TR_OK;
}
