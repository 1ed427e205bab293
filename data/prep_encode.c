/* One batch of preprocess items -> ids per key, as Megatron's Encoder.encode does for a JSON
 * line: for each key, the value's sentences (a string, or a list of strings) each tokenized
 * into one sequence (none when it has no ids), then the EOD id added to the last sequence
 * when append_eod and the document has ids. A text item is one sentence whose document
 * always ends with the EOD id. A line that cannot be read is marked bad, whole: no key of it
 * is kept. Runs on a worker thread: touches only the batch and the encoder. */
#include <ctype.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "data/prep_internal.h"

/* Ids of one sentence for key output o, item i: a new sequence if it has any. */
static int encode_sentence(const prep_spec *spec, tr_encoder *e, prep_out *o, size_t i,
                           const char *text, size_t len)
{
    size_t before = o->n_ids;
    int rc = tr_encode(e, text, len, spec->add_special, &o->ids, &o->n_ids, &o->cap_ids);
    if (rc || o->n_ids == before)
        return rc;
    if ((rc = prep_reserve((void **)&o->len, &o->cap_len, o->n_len + 1, sizeof *o->len)))
        return rc;
    o->len[o->n_len++] = (int64_t)(o->n_ids - before);
    o->nseq[i]++;
    return TR_OK;
}

static int add_eod(const prep_spec *spec, prep_out *o, size_t i)
{
    if (!o->nseq[i])
        return TR_OK;
    int rc = prep_reserve((void **)&o->ids, &o->cap_ids, o->n_ids + 1, sizeof *o->ids);
    if (!rc) {
        o->ids[o->n_ids++] = spec->eod;
        o->len[o->n_len - 1]++;
    }
    return rc;
}

#define message prep_message
char *prep_message(const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return strdup(buf);
}

#define json_kind prep_json_kind
const char *prep_json_kind(const void *v_)
{
    const json_t *v = v_;
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "a list";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: case JSON_REAL: return "a number";
    case JSON_TRUE: case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

/* Length of the JSON number at s (RFC 8259's grammar), or 0. */
static size_t number_length(const char *s, size_t n)
{
    size_t i = s[0] == '-';
    if (i < n && s[i] == '0')
        i++;
    else if (i < n && s[i] >= '1' && s[i] <= '9')
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
    else
        return 0;
    size_t mark = i;
    if (i < n && s[i] == '.' && ++i < n && s[i] >= '0' && s[i] <= '9')
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
    else
        i = mark;
    mark = i;
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i += i + 1 < n && (s[i + 1] == '+' || s[i + 1] == '-');
        if (++i < n && s[i] >= '0' && s[i] <= '9')
            while (i < n && s[i] >= '0' && s[i] <= '9')
                i++;
        else
            i = mark;
    }
    return i;
}

static int is_word(char c) { return c && (isalnum((unsigned char)c) || strchr(".+-_", c)); }

/* A copy of the line (malloc'ed; NULL: nothing to change or no memory) whose numbers and
 * NaN / Infinity / -Infinity, outside strings, are 0. Python's json (Megatron's reader) takes
 * every number (integers beyond int64, 1e400 as inf) and those literals; jansson refuses them
 * ("too big integer", "real number overflow", "invalid token"), which refused whole lines
 * (dropped them with --skip-bad-lines) over a field such as an id that no key reads. A token
 * followed by a letter or a digit is left as it is (not a number: the line stays invalid). */
static char *numbers_zeroed(const char *s, size_t n, size_t *out_len)
{
    char *t = malloc(n + 1);
    size_t o = 0, changed = 0;
    for (size_t i = 0; t && i < n;) {
        if (s[i] == '"') { /* a string, escapes and all, copied */
            size_t j = i + 1;
            while (j < n && s[j] != '"')
                j += s[j] == '\\' ? 2 : 1;
            j = j < n ? j + 1 : n;
            memcpy(t + o, s + i, j - i);
            o += j - i, i = j;
            continue;
        }
        static const char *const literal[] = {"NaN", "Infinity", "-Infinity"};
        size_t len = number_length(s + i, n - i);
        for (int k = 0; k < 3 && !len; k++) {
            size_t l = strlen(literal[k]);
            len = n - i >= l && !memcmp(s + i, literal[k], l) ? l : 0;
        }
        if (len && (i + len == n || !is_word(s[i + len]))) {
            t[o++] = '0', i += len, changed++;
            continue;
        }
        /* one character, or a word that is not a number whole (no number starts inside it) */
        int word = is_word(s[i]);
        do
            t[o++] = s[i++];
        while (word && i < n && is_word(s[i]));
    }
    if (t && !changed)
        free(t), t = NULL;
    *out_len = o;
    return t;
}

/* One JSON line: every key's sentences, or *bad (the line is skipped whole). */
static int encode_json(const prep_spec *spec, tr_encoder *e, prep_batch *b, size_t i, char **bad)
{
    const prep_item *it = &b->items[i];
    json_error_t err;
    json_t *root = json_loadb(b->text + it->off, it->len, JSON_ALLOW_NUL, &err);
    if (!root) { /* numbers jansson cannot hold, that Python's json reads? */
        size_t n;
        char *zeroed = numbers_zeroed(b->text + it->off, it->len, &n);
        json_error_t again;
        root = zeroed ? json_loadb(zeroed, n, JSON_ALLOW_NUL, &again) : NULL;
        free(zeroed);
    }
    if (!root) {
        *bad = message("%s (column %d): %s", strstr(err.text, "decode") ? "invalid UTF-8"
                       : "not valid JSON", err.column, err.text);
        return TR_OK;
    }
    int rc = TR_OK;
    if (!json_is_object(root))
        *bad = message("the line is %s, not a JSON object", json_kind(root));
    else if (spec->sft) {
        rc = prep_encode_sft(spec, e, b, i, root, bad);
        json_decref(root);
        return rc;
    }
    for (int k = 0; k < spec->n_keys && !rc && !*bad; k++) {
        json_t *v = json_object_get(root, spec->json_keys[k]);
        prep_out *o = &b->out[k];
        if (!v) {
            *bad = message("no key \"%s\"", spec->json_keys[k]);
        } else if (json_is_string(v)) {
            rc = encode_sentence(spec, e, o, i, json_string_value(v), json_string_length(v));
        } else if (json_is_array(v)) {
            size_t j;
            json_t *s;
            json_array_foreach(v, j, s) {
                if (!json_is_string(s)) {
                    *bad = message("\"%s\"[%zu] is %s, not a string", spec->json_keys[k], j,
                                   json_kind(s));
                    break;
                }
                if ((rc = encode_sentence(spec, e, o, i, json_string_value(s), json_string_length(s))))
                    break;
            }
        } else {
            *bad = message("\"%s\" is %s, not a string or a list of strings", spec->json_keys[k],
                           json_kind(v));
        }
        if (!rc && !*bad && spec->append_eod)
            rc = add_eod(spec, o, i);
    }
    json_decref(root);
    return rc;
}

void prep_encode_batch(const prep_spec *spec, tr_encoder *e, prep_batch *b)
{
    int n_out = spec->sft ? 2 : spec->n_keys ? spec->n_keys : 1, rc = TR_OK;
    for (int k = 0; k < n_out; k++) {
        prep_out *o = &b->out[k];
        o->n_ids = o->n_len = 0;
        memset(o->nseq, 0, b->n_items * sizeof *o->nseq);
    }
    for (size_t i = 0; i < b->n_items && !rc; i++) {
        if (!spec->n_keys) {
            const prep_item *it = &b->items[i];
            rc = encode_sentence(spec, e, &b->out[0], i, b->text + it->off, it->len);
            if (!rc)
                rc = add_eod(spec, &b->out[0], i);
            continue;
        }
        /* a bad line keeps nothing: remember where each output stood */
        size_t ids0[PREP_MAX_KEYS], len0[PREP_MAX_KEYS];
        for (int k = 0; k < n_out; k++) {
            ids0[k] = b->out[k].n_ids;
            len0[k] = b->out[k].n_len;
        }
        rc = encode_json(spec, e, b, i, &b->bad[i]);
        if (!rc && b->bad[i])
            for (int k = 0; k < n_out; k++) {
                b->out[k].n_ids = ids0[k];
                b->out[k].n_len = len0[k];
                b->out[k].nseq[i] = 0;
            }
    }
    if (rc) {
        b->rc = rc;
        b->msg = strdup(tr_errmsg());
    }
}
