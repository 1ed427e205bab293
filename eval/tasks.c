/* Loglikelihood requests from a JSON Lines file, encoded as lm-evaluation-harness encodes a
 * (context, continuation) pair, and generation requests (its generate_until). */
#include "eval/eval.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "eval/text.h"

/* Bytes of s[0, n) without its trailing whitespace (Python's str.rstrip()). */
static size_t rstrip_len(const char *s, size_t n)
{
    size_t begin, end;
    tr_text_strip(s, n, 0, 1, &begin, &end);
    return end;
}

static int64_t code_points(const char *s, size_t n)
{
    int64_t count = 0;
    for (size_t i = 0; i < n; i++)
        count += ((unsigned char)s[i] & 0xc0) != 0x80;
    return count;
}

typedef struct {
    tr_encoder *e;      /* NULL: one id per byte */
    int special, vocab;
    int32_t *ids;
    size_t n, cap;
} encoding;

int tr_eval_encode(tr_encoder *e, int special, const char *text, size_t len, int32_t **ids,
                   size_t *n, size_t *cap)
{
    *n = 0;
    if (e)
        return tr_encode(e, text, len, special, ids, n, cap);
    if (len > *cap) {
        int32_t *p = realloc(*ids, len * sizeof *p);
        if (!p)
            return tr_fail(TR_ERR_NOMEM, "out of memory for %zu tokens", len);
        *ids = p;
        *cap = len;
    }
    for (size_t i = 0; i < len; i++)
        (*ids)[(*n)++] = (unsigned char)text[i];
    return TR_OK;
}

/* Ids of text into enc->ids[0, enc->n). */
static int encode(encoding *enc, const char *text, size_t len)
{
    return tr_eval_encode(enc->e, enc->special, text, len, &enc->ids, &enc->n, &enc->cap);
}

static int32_t *copy_ids(const int32_t *ids, size_t n)
{
    int32_t *p = malloc((n ? n : 1) * sizeof *p);
    if (p)
        memcpy(p, ids, n * sizeof *p);
    return p;
}

static void request_free(tr_eval_request *r)
{
    for (int i = 0; r->cont && i < r->n_choices; i++)
        free(r->cont[i]);
    free(r->cont);
    free(r->n_cont);
    free(r->chars);
    free(r->ctx);
    for (int i = 0; r->until && i < r->n_until; i++)
        free(r->until[i]);
    free(r->until);
    free(r->target);
    for (int i = 0; r->doc_choices && i < r->n_doc_choices; i++)
        free(r->doc_choices[i]);
    free(r->doc_choices);
    memset(r, 0, sizeof *r);
}

void tr_eval_tasks_free(tr_eval_tasks *tasks)
{
    for (size_t i = 0; i < tasks->n; i++)
        request_free(&tasks->r[i]);
    free(tasks->r);
    tasks->r = NULL;
    tasks->n = 0;
    tr_eval_settings_free(&tasks->settings);
}

static int bad_line(const char *path, uint64_t line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int bad_line(const char *path, uint64_t line, const char *fmt, ...)
{
    char why[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return tr_fail(TR_ERR_INVALID, "%s:%llu: %s", path, (unsigned long long)line, why);
}

static const char *kind(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "a list";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

/* Continuation i of r: the pair (context, text) encoded as _encode_pair does. ctx / n_ctx:
 * the context without its trailing whitespace. */
static int encode_choice(encoding *enc, const char *path, tr_eval_request *r, int i,
                         const char *context, size_t n_ctx_bytes, size_t n_ws, const char *text,
                         size_t len, int context_limit)
{
    if (len == 0)
        return bad_line(path, r->line, "%s is empty",
                        r->label < 0 ? "the continuation" : "a choice");
    size_t whole_len = n_ctx_bytes + n_ws + len;
    char *whole = malloc(whole_len + 1);
    if (!whole)
        return tr_fail(TR_ERR_NOMEM, "out of memory");
    memcpy(whole, context, n_ctx_bytes + n_ws);
    memcpy(whole + n_ctx_bytes + n_ws, text, len);
    int rc = encode(enc, whole, whole_len);
    free(whole);
    if (rc)
        return rc;
    size_t m = enc->n > (size_t)r->n_ctx ? enc->n - (size_t)r->n_ctx : 0;
    if (m == 0)
        return bad_line(path, r->line, "%s has no tokens after the context's",
                        r->label < 0 ? "the continuation" : "a choice");
    if (m > (size_t)context_limit)
        return bad_line(path, r->line, "%s is %zu tokens, more than the context of %d",
                        r->label < 0 ? "the continuation" : "a choice", m, context_limit);
    for (size_t j = 0; j < enc->n; j++)
        if (enc->ids[j] >= enc->vocab)
            return bad_line(path, r->line, "token %d is outside the model's vocabulary [0, %d)",
                            enc->ids[j], enc->vocab);
    r->n_cont[i] = (int)m;
    r->chars[i] = code_points(text, len);
    if (!(r->cont[i] = copy_ids(enc->ids + r->n_ctx, m)))
        return tr_fail(TR_ERR_NOMEM, "out of memory");
    return TR_OK;
}

static char *copy_string(const json_t *v)
{
    size_t n = json_string_length(v);
    char *p = malloc(n + 1);
    if (p) {
        memcpy(p, json_string_value(v), n);
        p[n] = '\0';
    }
    return p;
}

/* A generation line's "choices" into r->doc_choices (0 to 26 strings: multi_choice_regex
 * labels them A..Z). */
static int parse_doc_choices(const char *path, json_t *choices, tr_eval_request *r)
{
    if (!json_is_array(choices))
        return bad_line(path, r->line, "\"choices\" is %s, not a list of strings", kind(choices));
    size_t n = json_array_size(choices);
    if (n > 26)
        return bad_line(path, r->line, "\"choices\" holds %zu strings: multi_choice_regex labels "
                        "at most 26, (A) to (Z)", n);
    if (!(r->doc_choices = calloc(n + 1, sizeof *r->doc_choices)))
        return tr_fail(TR_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *c = json_array_get(choices, i);
        if (!json_is_string(c))
            return bad_line(path, r->line, "\"choices\"[%zu] is %s, not a string", i, kind(c));
        if (strlen(json_string_value(c)) != json_string_length(c))
            return bad_line(path, r->line, "\"choices\"[%zu] holds a NUL character", i);
        if (!(r->doc_choices[r->n_doc_choices++] = copy_string(c)))
            return tr_fail(TR_ERR_NOMEM, "out of memory");
    }
    return TR_OK;
}

/* A generation line into r: "until" (a list of strings, or one string), "max_gen_toks",
 * "target", "choices" (the doc's, when the settings need them); the context encoded as it is,
 * its last context_limit - max_gen_toks ids kept. */
static int parse_generation(encoding *enc, const char *path, json_t *root, tr_eval_request *r,
                            int context_limit, const tr_eval_settings *set)
{
    json_t *c = json_object_get(root, "context"), *until = json_object_get(root, "until"),
           *most = json_object_get(root, "max_gen_toks"), *target = json_object_get(root, "target");
    r->generate = 1;
    r->label = -1;
    /* lm-evaluation-harness's default, or half the context where that is less (the harness
     * would keep no prompt at all) */
    r->max_gen_toks = context_limit / 2 < 256 ? context_limit / 2 : 256;
    if (most && !json_is_integer(most))
        return bad_line(path, r->line, "\"max_gen_toks\" is %s, not an integer", kind(most));
    if (most)
        r->max_gen_toks = json_integer_value(most) < 1 || json_integer_value(most) > 1 << 30
                              ? -1 : (int)json_integer_value(most);
    if (most && (r->max_gen_toks < 1 || r->max_gen_toks >= context_limit))
        return bad_line(path, r->line, "\"max_gen_toks\" %lld: it must be at least 1 and less "
                        "than the context of %d tokens (the prompt keeps the rest)",
                        (long long)json_integer_value(most), context_limit);
    if (target && !json_is_string(target))
        return bad_line(path, r->line, "\"target\" is %s, not a string", kind(target));
    json_t *choices = json_object_get(root, "choices");
    if (set->needs_choices && !choices)
        return bad_line(path, r->line, "no key \"choices\": the task's multi_choice_regex filter "
                        "needs the line's choices");
    int rc = choices ? parse_doc_choices(path, choices, r) : TR_OK;
    if (rc)
        return rc;
    size_t n_until = 0;
    if (until && json_is_string(until))
        n_until = 1;
    else if (until && json_is_array(until))
        n_until = json_array_size(until);
    else if (until)
        return bad_line(path, r->line, "\"until\" is %s, not a list of strings", kind(until));
    if (n_until > 1024)
        return bad_line(path, r->line, "\"until\" holds %zu strings (at most 1024)", n_until);
    r->until = calloc(n_until ? n_until : 1, sizeof *r->until);
    if (!r->until || (target && !(r->target = copy_string(target))))
        return tr_fail(TR_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n_until; i++) {
        json_t *u = json_is_string(until) ? until : json_array_get(until, i);
        if (!json_is_string(u))
            return bad_line(path, r->line, "\"until\"[%zu] is %s, not a string", i, kind(u));
        if (json_string_length(u) == 0)
            return bad_line(path, r->line, "\"until\"[%zu] is empty: a stop string needs a "
                            "character", i);
        if (strlen(json_string_value(u)) != json_string_length(u))
            return bad_line(path, r->line, "\"until\"[%zu] holds a NUL character", i);
        if (!(r->until[r->n_until++] = copy_string(u)))
            return tr_fail(TR_ERR_NOMEM, "out of memory");
    }
    rc = encode(enc, json_string_value(c), json_string_length(c));
    if (rc)
        return rc;
    if (enc->n == 0)
        return bad_line(path, r->line, "the context has no tokens");
    for (size_t j = 0; j < enc->n; j++)
        if (enc->ids[j] >= enc->vocab)
            return bad_line(path, r->line, "token %d is outside the model's vocabulary [0, %d)",
                            enc->ids[j], enc->vocab);
    size_t keep = (size_t)(context_limit - r->max_gen_toks);
    size_t skip = enc->n > keep ? enc->n - keep : 0;
    r->n_ctx = (int)(enc->n - skip);
    if (!(r->ctx = copy_ids(enc->ids + skip, (size_t)r->n_ctx)))
        return tr_fail(TR_ERR_NOMEM, "out of memory");
    return TR_OK;
}

/* One JSON object into r (r->line set). */
static int parse_request(encoding *enc, const char *path, json_t *root, tr_eval_request *r,
                         int context_limit, const tr_eval_settings *set)
{
    json_t *c = json_object_get(root, "context"), *cont = json_object_get(root, "continuation"),
           *choices = json_object_get(root, "choices"), *label = json_object_get(root, "label");
    if (!c)
        return bad_line(path, r->line, "no key \"context\"");
    if (!json_is_string(c))
        return bad_line(path, r->line, "\"context\" is %s, not a string", kind(c));
    int generation = json_object_get(root, "until") || json_object_get(root, "max_gen_toks");
    if (generation && (cont || (choices && !set->needs_choices)))
        return bad_line(path, r->line, "\"%s\" with \"%s\": a line is a generation request "
                        "(\"until\", \"max_gen_toks\") or a loglikelihood one, not both",
                        json_object_get(root, "until") ? "until" : "max_gen_toks",
                        cont ? "continuation" : "choices");
    if (generation)
        return parse_generation(enc, path, root, r, context_limit, set);
    if (!cont == !choices)
        return bad_line(path, r->line, "%s: give \"continuation\" (a loglikelihood request), "
                        "\"choices\" with \"label\" (multiple choice) or \"until\" (generation)",
                        cont ? "both \"continuation\" and \"choices\"" : "neither "
                        "\"continuation\" nor \"choices\"");
    if (cont && !json_is_string(cont))
        return bad_line(path, r->line, "\"continuation\" is %s, not a string", kind(cont));
    size_t n_choices = 1;
    r->label = -1;
    if (choices) {
        if (!json_is_array(choices))
            return bad_line(path, r->line, "\"choices\" is %s, not a list of strings",
                            kind(choices));
        n_choices = json_array_size(choices);
        if (n_choices == 0 || n_choices > 1 << 20)
            return bad_line(path, r->line, "\"choices\" holds %zu strings (1 or more)", n_choices);
        for (size_t i = 0; i < n_choices; i++)
            if (!json_is_string(json_array_get(choices, i)))
                return bad_line(path, r->line, "\"choices\"[%zu] is %s, not a string", i,
                                kind(json_array_get(choices, i)));
        if (!label)
            return bad_line(path, r->line, "no key \"label\" (the right choice's index)");
        if (!json_is_integer(label))
            return bad_line(path, r->line, "\"label\" is %s, not an integer", kind(label));
        json_int_t l = json_integer_value(label);
        if (l < 0 || (size_t)l >= n_choices)
            return bad_line(path, r->line, "\"label\" %lld is not an index of the %zu choices",
                            (long long)l, n_choices);
        r->label = (int)l;
    }
    const char *ctx = json_string_value(c);
    size_t ctx_len = json_string_length(c), kept = rstrip_len(ctx, ctx_len);
    if (kept == 0)
        return bad_line(path, r->line, "the context is empty%s: the first token would have "
                        "nothing to be predicted from", ctx_len ? " (whitespace only)" : "");
    int rc = encode(enc, ctx, kept);
    if (rc)
        return rc;
    if (enc->n == 0)
        return bad_line(path, r->line, "the context has no tokens");
    if (enc->n > 1 << 30)
        return bad_line(path, r->line, "the context has %zu tokens", enc->n);
    r->n_ctx = (int)enc->n;
    r->n_choices = (int)n_choices;
    r->ctx = copy_ids(enc->ids, enc->n);
    r->cont = calloc(n_choices, sizeof *r->cont);
    r->n_cont = calloc(n_choices, sizeof *r->n_cont);
    r->chars = calloc(n_choices, sizeof *r->chars);
    if (!r->ctx || !r->cont || !r->n_cont || !r->chars)
        return tr_fail(TR_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n_choices && !rc; i++) {
        json_t *s = choices ? json_array_get(choices, i) : cont;
        rc = encode_choice(enc, path, r, (int)i, ctx, kept, ctx_len - kept, json_string_value(s),
                           json_string_length(s), context_limit);
    }
    return rc;
}

int tr_eval_tasks_load(const char *path, const tr_tokenizer *t, int special, int vocab,
                       int context, size_t limit, tr_eval_tasks *out)
{
    memset(out, 0, sizeof *out);
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return tr_fail(TR_ERR_INVALID, "%s: a folder, not a JSON Lines file", path);
    FILE *f = fopen(path, "rb");
    if (!f)
        return tr_fail(TR_ERR_INVALID, "%s: %s", path, strerror(errno));
    encoding enc = {.special = special, .vocab = vocab};
    int rc = t ? tr_encoder_create(t, &enc.e) : TR_OK;
    char *line = NULL;
    size_t cap = 0, room = 0;
    ssize_t len;
    uint64_t number = 0;
    int settings_seen = 0;
    while (!rc && (!limit || out->n < limit) && (len = getline(&line, &cap, f)) >= 0) {
        number++;
        size_t n = (size_t)len;
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' ' ||
                         line[n - 1] == '\t'))
            n--;
        size_t lead = 0;
        while (lead < n && (line[lead] == ' ' || line[lead] == '\t'))
            lead++;
        if (lead == n)
            continue; /* a blank line */
        json_error_t err;
        json_t *root = json_loadb(line, n, JSON_ALLOW_NUL, &err);
        if (!root) {
            rc = bad_line(path, number, "not JSON: %s (column %d)", err.text, err.column);
            break;
        }
        if (!json_is_object(root)) {
            rc = bad_line(path, number, "the line is %s, not a JSON object", kind(root));
            json_decref(root);
            break;
        }
        if (!json_object_get(root, "context") && (json_object_get(root, "filter_list") ||
                                                   json_object_get(root, "metric_list"))) {
            /* the task's settings: the first line only */
            char where[4200];
            snprintf(where, sizeof where, "%s:%llu", path, (unsigned long long)number);
            rc = settings_seen ? bad_line(path, number, "a second settings line (filter_list, "
                                          "metric_list): the task's settings come first")
                 : out->n ? bad_line(path, number, "the task's settings (filter_list, "
                                     "metric_list) come on its first line, before the requests")
                 : tr_eval_settings_parse(line, n, where, &out->settings);
            settings_seen = 1;
            json_decref(root);
            continue;
        }
        if (out->n == room) {
            size_t grow = room ? 2 * room : 64;
            tr_eval_request *p = realloc(out->r, grow * sizeof *p);
            if (!p) {
                rc = tr_fail(TR_ERR_NOMEM, "out of memory for %zu requests", grow);
                json_decref(root);
                break;
            }
            out->r = p;
            room = grow;
        }
        tr_eval_request *r = &out->r[out->n++];
        memset(r, 0, sizeof *r);
        r->line = number;
        rc = parse_request(&enc, path, root, r, context, &out->settings);
        json_decref(root);
    }
    if (!rc && ferror(f))
        rc = tr_fail(TR_ERR_IO, "%s: read error", path);
    if (!rc && out->n == 0)
        rc = tr_fail(TR_ERR_INVALID, "%s: no requests (a JSON object per line: \"context\" with "
                     "\"continuation\", with \"choices\" and \"label\", or with \"until\")",
                     path);
    fclose(f);
    free(line);
    free(enc.ids);
    tr_encoder_free(enc.e);
    if (rc)
        tr_eval_tasks_free(out);
    return rc;
}
