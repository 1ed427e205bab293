/* lm-evaluation-harness's filters (its filters/extraction.py and transformation.py) and
 * exact_match's options, from a task file's settings line (eval/eval.h). */
#include "eval/filter_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval/text.h"

#define GSM8K_STRICT "#### (\\-?[0-9\\.\\,]+)"

int filter_bad(const char *where, const char *fmt, ...)
{
    char why[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return tr_fail(TR_ERR_INVALID, "%s: %s", where, why);
}

char *filter_dup(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

void tr_eval_settings_free(tr_eval_settings *s)
{
    for (int f = 0; f < s->n_filters; f++) {
        tr_eval_filter *fl = &s->filters[f];
        for (int k = 0; k < fl->n_steps; k++)
            filter_step_free(&fl->steps[k]);
        free(fl->steps);
        free(fl->name);
    }
    free(s->filters);
    for (int k = 0; k < s->n_ignore; k++)
        tr_regex_free(s->ignore[k]);
    free(s->ignore);
    memset(s, 0, sizeof *s);
}

int filter_compile(const char *where, const char *what, const json_t *v, tr_regex **out)
{
    int rc = tr_regex_compile(json_string_value(v), json_string_length(v), out);
    return rc ? tr_fail_context(rc, "%s: %s", where, what) : TR_OK;
}

/* The functions (TR_FILTER_* order) and the arguments each takes. */
static const struct {
    const char *name, *args;
} functions[] = {
    {"take_first", ""}, {"regex", "regex_pattern group_select fallback"}, {"lowercase", ""},
    {"uppercase", ""}, {"remove_whitespace", ""}, {"take_first_k", "k"}, {"majority_vote", ""},
    {"map", "mapping_dict default_value"},
    {"multi_choice_regex", "regex_pattern group_select fallback ignore_case ignore_punctuation "
                           "regexes_to_ignore"}};
enum { N_FUNCTIONS = sizeof functions / sizeof functions[0] };

/* Whether key is a word of the space-separated list args. */
static int takes(const char *args, const char *key)
{
    size_t n = strlen(key);
    for (const char *p = args; n && (p = strstr(p, key)); p += n)
        if ((p == args || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0'))
            return 1;
    return 0;
}

/* regex and multi_choice_regex: regex_pattern, group_select, fallback. */
static int parse_regex_args(const char *where, const char *name, json_t *o,
                            tr_eval_filter_step *st)
{
    json_t *pattern = json_object_get(o, "regex_pattern"), *fb = json_object_get(o, "fallback");
    json_t *gs = json_object_get(o, "group_select");
    if (pattern && !json_is_string(pattern))
        return filter_bad(where, "filter '%s': \"regex_pattern\" is not a string", name);
    if (fb && !json_is_string(fb))
        return filter_bad(where, "filter '%s': \"fallback\" is not a string", name);
    if (gs && (!json_is_integer(gs) || json_integer_value(gs) < -(1 << 30) ||
               json_integer_value(gs) > 1 << 30))
        return filter_bad(where, "filter '%s': \"group_select\" is not an integer", name);
    st->group_select = gs ? (long)json_integer_value(gs) : 0;
    st->fallback = fb ? filter_dup(json_string_value(fb), json_string_length(fb))
                      : filter_dup("[invalid]", 9);
    if (!st->fallback)
        return tr_fail(TR_ERR_NOMEM, "out of memory");
    if (!pattern)
        return tr_regex_compile(GSM8K_STRICT, strlen(GSM8K_STRICT), &st->regex);
    char what[300];
    snprintf(what, sizeof what, "filter '%s'", name);
    return filter_compile(where, what, pattern, &st->regex);
}

/* One step {"function": ..., its arguments} of filter `name` (repeats: the settings'). */
static int parse_step(const char *where, const char *name, int k, json_t *o, int repeats,
                      tr_eval_filter_step *st)
{
    if (!json_is_object(o))
        return filter_bad(where, "filter '%s' step %d is not an object {\"function\": ...}", name,
                          k);
    json_t *fn = json_object_get(o, "function");
    if (!json_is_string(fn))
        return filter_bad(where, "filter '%s' step %d: \"function\" (a string) is missing", name,
                          k);
    st->function = -1;
    for (int f = 0; f < N_FUNCTIONS; f++)
        if (!strcmp(json_string_value(fn), functions[f].name))
            st->function = f;
    if (st->function < 0)
        return filter_bad(where, "filter '%s': function '%s' is not supported (regex, take_first, "
                          "take_first_k, majority_vote, lowercase, uppercase, remove_whitespace, "
                          "map, multi_choice_regex)", name, json_string_value(fn));
    const char *key, *args = functions[st->function].args;
    json_t *v;
    json_object_foreach(o, key, v)
        if (strcmp(key, "function") && !takes(args, key))
            return filter_bad(where, "filter '%s': %s takes no argument \"%s\"%s%s%s", name,
                              functions[st->function].name, key, *args ? " (" : "", args,
                              *args ? ")" : "");
    switch (st->function) {
    case TR_FILTER_REGEX:
        return parse_regex_args(where, name, o, st);
    case TR_FILTER_MULTI_CHOICE: {
        int rc = parse_regex_args(where, name, o, st);
        return rc ? rc : filter_choice_parse(where, name, o, st);
    }
    case TR_FILTER_MAP:
        return filter_map_parse(where, name, o, st);
    case TR_FILTER_TAKE_FIRST_K:
        v = json_object_get(o, "k");
        if (!json_is_integer(v))
            return filter_bad(where, "filter '%s': take_first_k needs \"k\", an integer", name);
        if (json_integer_value(v) < 1 || json_integer_value(v) > repeats)
            return filter_bad(where, "filter '%s': take_first_k's \"k\" %lld is not in [1, "
                              "repeats = %d] (the harness needs k generations a request: "
                              "\"repeats\")", name, (long long)json_integer_value(v), repeats);
        st->k = (int)json_integer_value(v);
        return TR_OK;
    default:
        return TR_OK;
    }
}

static int parse_filters(const char *where, json_t *list, tr_eval_settings *s)
{
    if (!json_is_array(list))
        return filter_bad(where, "\"filter_list\" is not a list of {\"name\": ..., \"filter\": "
                          "[...]}");
    size_t n = json_array_size(list);
    if (n > 256)
        return filter_bad(where, "\"filter_list\" holds %zu filters (at most 256)", n);
    if (!(s->filters = calloc(n ? n : 1, sizeof *s->filters)))
        return tr_fail(TR_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(list, i), *name = json_object_get(e, "name");
        json_t *steps = json_object_get(e, "filter");
        if (!json_is_object(e) || !json_is_string(name) || !json_string_length(name))
            return filter_bad(where, "\"filter_list\"[%zu] is not an object with a \"name\"", i);
        const char *nm = json_string_value(name), *key;
        json_t *v;
        json_object_foreach(e, key, v)
            if (strcmp(key, "name") && strcmp(key, "filter"))
                return filter_bad(where, "filter '%s': unknown key \"%s\" (name, filter)", nm, key);
        for (int f = 0; f < s->n_filters; f++)
            if (!strcmp(s->filters[f].name, nm))
                return filter_bad(where, "two filters named '%s'", nm);
        if (!json_is_array(steps))
            return filter_bad(where, "filter '%s': \"filter\" is not a list of steps", nm);
        tr_eval_filter *fl = &s->filters[s->n_filters++];
        size_t n_steps = json_array_size(steps);
        if (n_steps > 64)
            return filter_bad(where, "filter '%s' has %zu steps (at most 64)", nm, n_steps);
        if (!(fl->name = filter_dup(nm, strlen(nm))) ||
            !(fl->steps = calloc(n_steps ? n_steps : 1, sizeof *fl->steps)))
            return tr_fail(TR_ERR_NOMEM, "out of memory");
        for (size_t k = 0; k < n_steps; k++) {
            int rc = parse_step(where, nm, (int)k, json_array_get(steps, k), s->repeats,
                                &fl->steps[k]);
            fl->n_steps++;
            s->needs_choices |= fl->steps[k].function == TR_FILTER_MULTI_CHOICE;
            if (rc)
                return rc;
        }
    }
    return TR_OK;
}

static int parse_metrics(const char *where, json_t *list, tr_eval_settings *s)
{
    if (!json_is_array(list))
        return filter_bad(where, "\"metric_list\" is not a list of {\"metric\": ...}");
    int seen = 0;
    for (size_t i = 0; i < json_array_size(list); i++) {
        json_t *e = json_array_get(list, i), *metric = json_object_get(e, "metric");
        if (!json_is_object(e) || !json_is_string(metric))
            return filter_bad(where, "\"metric_list\"[%zu] is not an object with a \"metric\"", i);
        if (strcmp(json_string_value(metric), "exact_match"))
            return filter_bad(where, "metric '%s': trident eval scores generations by exact_match "
                              "only", json_string_value(metric));
        if (seen++)
            return filter_bad(where, "\"metric_list\" names exact_match twice");
        const char *key;
        json_t *v;
        json_object_foreach(e, key, v) {
            int *flag = !strcmp(key, "ignore_case")          ? &s->ignore_case
                        : !strcmp(key, "ignore_punctuation") ? &s->ignore_punctuation
                        : !strcmp(key, "ignore_numbers")     ? &s->ignore_numbers : NULL;
            if (flag && !json_is_boolean(v))
                return filter_bad(where, "exact_match: \"%s\" is not true or false", key);
            if (flag)
                *flag = json_is_true(v);
            else if (!strcmp(key, "aggregation") &&
                     (!json_is_string(v) || strcmp(json_string_value(v), "mean")))
                return filter_bad(where, "exact_match: \"aggregation\" is not \"mean\" (the only "
                                  "one)");
            else if (!strcmp(key, "higher_is_better") && !json_is_true(v))
                return filter_bad(where, "exact_match: \"higher_is_better\" is not true");
            else if (!strcmp(key, "regexes_to_ignore")) {
                if (!json_is_array(v) || json_array_size(v) > 256)
                    return filter_bad(where, "exact_match: \"regexes_to_ignore\" is not a list "
                                      "of (at most 256) patterns");
                if (!(s->ignore = calloc(json_array_size(v) + 1, sizeof *s->ignore)))
                    return tr_fail(TR_ERR_NOMEM, "out of memory");
                for (size_t k = 0; k < json_array_size(v); k++) {
                    json_t *p = json_array_get(v, k);
                    if (!json_is_string(p))
                        return filter_bad(where, "exact_match: \"regexes_to_ignore\"[%zu] is "
                                          "not a string", k);
                    int rc = filter_compile(where, "exact_match's regexes_to_ignore", p,
                                            &s->ignore[s->n_ignore]);
                    if (rc)
                        return rc;
                    s->n_ignore++;
                }
            } else if (strcmp(key, "metric") && strcmp(key, "aggregation") &&
                       strcmp(key, "higher_is_better"))
                return filter_bad(where, "exact_match: unknown key \"%s\" (ignore_case, "
                                  "ignore_punctuation, ignore_numbers, regexes_to_ignore, "
                                  "aggregation, higher_is_better)", key);
        }
    }
    return TR_OK;
}

int tr_eval_settings_parse(const char *text, size_t len, const char *where, tr_eval_settings *out)
{
    memset(out, 0, sizeof *out);
    json_error_t err;
    json_t *root = json_loadb(text, len, 0, &err);
    if (!root)
        return filter_bad(where, "not JSON: %s (column %d)", err.text, err.column);
    int rc = json_is_object(root) ? TR_OK
                                  : filter_bad(where, "the settings are not a JSON object");
    json_t *filters = json_object_get(root, "filter_list"), *metrics = json_object_get(root,
                                                                                "metric_list");
    json_t *repeats = json_object_get(root, "repeats"), *gen = json_object_get(root,
                                                                          "generation_kwargs");
    out->repeats = 1;
    if (!rc && repeats && (!json_is_integer(repeats) || json_integer_value(repeats) < 1 ||
                           json_integer_value(repeats) > 1 << 20))
        rc = filter_bad(where, "\"repeats\" is not an integer in [1, 2^20]");
    if (!rc && repeats)
        out->repeats = (int)json_integer_value(repeats);
    if (!rc && gen && !json_is_object(gen))
        rc = filter_bad(where, "\"generation_kwargs\" is not an object");
    if (!rc && gen && json_is_true(json_object_get(gen, "do_sample")))
        rc = filter_bad(where, "\"generation_kwargs\": \"do_sample\" true: trident eval generates "
                        "greedily (its repeats of a request are one text)");
    if (!rc && filters)
        rc = parse_filters(where, filters, out);
    if (!rc && metrics)
        rc = parse_metrics(where, metrics, out);
    json_decref(root);
    if (rc)
        tr_eval_settings_free(out);
    return rc;
}

int filter_pick(const tr_regex *re, long group_select, const char *text, int *found, size_t *a,
                size_t *b)
{
    tr_regex_span *sp;
    size_t n, row = (size_t)tr_regex_groups(re) + 1;
    *found = 0;
    *a = *b = 0;
    int rc = tr_regex_findall(re, text, strlen(text), &sp, &n);
    if (rc)
        return rc;
    long k = group_select < 0 ? (long)n + group_select : group_select;
    const tr_regex_span *pick = NULL;
    if (n > 0 && k >= 0 && (size_t)k < n) {
        const tr_regex_span *m = &sp[(size_t)k * row];
        if (row == 1)
            pick = &m[0];
        else if (row == 2)
            pick = &m[1];
        else /* findall's tuple: its first non-empty group */
            for (size_t g = 1; g < row && !pick; g++)
                if (m[g].begin != SIZE_MAX && m[g].end > m[g].begin)
                    pick = &m[g];
    }
    if (pick && pick->begin != SIZE_MAX) {
        tr_text_strip(text + pick->begin, pick->end - pick->begin, 1, 1, a, b);
        *a += pick->begin;
        *b += pick->begin;
    }
    free(sp);
    *found = pick != NULL;
    return TR_OK;
}

/* RegexFilter: the selected match's text (or the fallback) into *out. */
static int regex_step(const tr_eval_filter_step *st, const char *text, char **out)
{
    size_t a, b;
    int found, rc = filter_pick(st->regex, st->group_select, text, &found, &a, &b);
    if (rc)
        return rc;
    *out = found ? filter_dup(text + a, b - a) : filter_dup(st->fallback, strlen(st->fallback));
    return *out ? TR_OK : tr_fail(TR_ERR_NOMEM, "out of memory");
}

static int apply_step(const tr_eval_filter_step *st, const tr_eval_request *r,
                      const char *text, char **out)
{
    size_t len = strlen(text), a;
    switch (st->function) {
    case TR_FILTER_REGEX:
        return regex_step(st, text, out);
    case TR_FILTER_MULTI_CHOICE:
        return filter_choice_apply(st, r, text, out);
    case TR_FILTER_MAP:
        return filter_map_apply(st, text, out);
    case TR_FILTER_LOWERCASE:
    case TR_FILTER_UPPERCASE:
        return tr_text_case(text, len, st->function == TR_FILTER_UPPERCASE, out, &a);
    case TR_FILTER_REMOVE_WHITESPACE: /* (one leading space, as the harness's WhitespaceFilter) */
        *out = filter_dup(text + (text[0] == ' '), len - (text[0] == ' '));
        break;
    default:
        *out = filter_dup(text, len);
    }
    return *out ? TR_OK : tr_fail(TR_ERR_NOMEM, "out of memory");
}

int tr_eval_filter_apply(const tr_eval_filter *f, const tr_eval_request *r, const char *text,
                         char **out)
{
    char *cur = filter_dup(text, strlen(text));
    int rc = cur ? TR_OK : tr_fail(TR_ERR_NOMEM, "out of memory");
    for (int k = 0; k < f->n_steps && !rc; k++) {
        char *next = NULL;
        rc = apply_step(&f->steps[k], r, cur, &next);
        free(cur);
        cur = next;
    }
    if (rc) {
        free(cur);
        cur = NULL;
        rc = tr_fail_context(rc, "filter '%s'", f->name);
    }
    *out = cur;
    return rc;
}

/* text with exact_match's options of s, into *out. */
static int normalize(const tr_eval_settings *s, const char *text, char **out)
{
    char *cur = filter_dup(text, strlen(text)), *next = NULL;
    int rc = cur ? TR_OK : tr_fail(TR_ERR_NOMEM, "out of memory");
    for (int k = 0; s && k < s->n_ignore && !rc; k++) {
        rc = tr_regex_sub(s->ignore[k], cur, strlen(cur), "", &next);
        free(cur);
        cur = next;
    }
    size_t len;
    if (!rc && s && s->ignore_case) {
        rc = tr_text_case(cur, strlen(cur), 0, &next, &len);
        free(cur);
        cur = next;
    }
    if (!rc && s && (s->ignore_punctuation || s->ignore_numbers)) {
        size_t w = 0;
        for (size_t i = 0; cur[i]; i++) {
            unsigned char c = (unsigned char)cur[i];
            int punct = c < 128 && c > 32 && c < 127 && !(c >= '0' && c <= '9') &&
                        !((c | 32) >= 'a' && (c | 32) <= 'z');
            if (!(s->ignore_punctuation && punct) && !(s->ignore_numbers && c >= '0' && c <= '9'))
                cur[w++] = cur[i];
        }
        cur[w] = '\0';
    }
    if (rc) {
        free(cur);
        cur = NULL;
    }
    *out = cur;
    return rc;
}

int tr_eval_exact_match(const tr_eval_settings *s, const char *text, const char *target,
                        int *equal)
{
    char *x = NULL, *y = NULL;
    int rc = normalize(s, text, &x);
    if (!rc)
        rc = normalize(s, target, &y);
    *equal = 0;
    if (!rc) {
        size_t a, b, c, d;
        tr_text_strip(x, strlen(x), 1, 1, &a, &b);
        tr_text_strip(y, strlen(y), 1, 1, &c, &d);
        *equal = b - a == d - c && !memcmp(x + a, y + c, b - a);
    }
    free(x);
    free(y);
    return rc ? tr_fail_context(rc, "exact_match") : TR_OK;
}
