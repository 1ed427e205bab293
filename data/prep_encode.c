/* One batch of preprocess items -> ids per key, as Megatron's Encoder.encode does for a JSON
 * line: for each key, the value's sentences (a string, or a list of strings) each tokenized
 * into one sequence (none when it has no ids), then the EOD id added to the last sequence
 * when append_eod and the document has ids. A text item is one sentence whose document
 * always ends with the EOD id. A line that cannot be read is marked bad, whole: no key of it
 * is kept. Runs on a worker thread: touches only the batch and the encoder. */
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

/* One JSON line: every key's sentences, or *bad (the line is skipped whole). */
static int encode_json(const prep_spec *spec, tr_encoder *e, prep_batch *b, size_t i, char **bad)
{
    const prep_item *it = &b->items[i];
    json_error_t err;
    json_t *root = json_loadb(b->text + it->off, it->len, JSON_ALLOW_NUL, &err);
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
