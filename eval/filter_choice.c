/* The harness's map (transformation.py's MapFilter) and multi_choice_regex (extraction.py's
 * MultiChoiceRegexFilter) steps (eval/eval.h). */
#include <stdlib.h>
#include <string.h>

#include "eval/filter_internal.h"
#include "eval/text.h"

void filter_step_free(tr_eval_filter_step *st)
{
    tr_regex_free(st->regex);
    free(st->fallback);
    for (int k = 0; k < st->n_map; k++) {
        free(st->keys[k]);
        free(st->values[k]);
    }
    free(st->keys);
    free(st->values);
    free(st->default_value);
    for (int k = 0; k < st->n_ignore; k++)
        tr_regex_free(st->ignore[k]);
    free(st->ignore);
}

/* A string without NUL characters, copied. */
static int text_arg(const char *where, const char *name, const char *what, const json_t *v,
                    char **out)
{
    if (!json_is_string(v))
        return filter_bad(where, "filter '%s': %s is not a string", name, what);
    if (strlen(json_string_value(v)) != json_string_length(v))
        return filter_bad(where, "filter '%s': %s holds a NUL character", name, what);
    *out = filter_dup(json_string_value(v), json_string_length(v));
    return *out ? TR_OK : tr_fail(TR_ERR_NOMEM, "out of memory");
}

int filter_map_parse(const char *where, const char *name, json_t *o, tr_eval_filter_step *st)
{
    json_t *dict = json_object_get(o, "mapping_dict"), *dflt = json_object_get(o, "default_value");
    if (dict && !json_is_null(dict) && !json_is_object(dict))
        return filter_bad(where, "filter '%s': map's \"mapping_dict\" is not an object", name);
    if (!dflt || json_is_null(dflt))
        return filter_bad(where, "filter '%s': map needs \"default_value\", a string (the "
                          "harness's None for a text outside mapping_dict is no text to score)",
                          name);
    int rc = text_arg(where, name, "map's \"default_value\"", dflt, &st->default_value);
    size_t n = json_is_object(dict) ? json_object_size(dict) : 0;
    if (rc || !n)
        return rc;
    if (!(st->keys = calloc(n, sizeof *st->keys)) || !(st->values = calloc(n, sizeof *st->values)))
        return tr_fail(TR_ERR_NOMEM, "out of memory");
    const char *key;
    json_t *v;
    json_object_foreach(dict, key, v) {
        char what[200];
        snprintf(what, sizeof what, "map's mapping_dict[\"%.100s\"]", key);
        if ((rc = text_arg(where, name, what, v, &st->values[st->n_map])))
            return rc;
        if (!(st->keys[st->n_map++] = filter_dup(key, strlen(key))))
            return tr_fail(TR_ERR_NOMEM, "out of memory");
    }
    return TR_OK;
}

int filter_map_apply(const tr_eval_filter_step *st, const char *text, char **out)
{
    const char *v = st->default_value;
    for (int k = 0; k < st->n_map; k++)
        if (!strcmp(st->keys[k], text))
            v = st->values[k];
    *out = filter_dup(v, strlen(v));
    return *out ? TR_OK : tr_fail(TR_ERR_NOMEM, "out of memory");
}

int filter_choice_parse(const char *where, const char *name, json_t *o,
                        tr_eval_filter_step *st)
{
    json_t *ic = json_object_get(o, "ignore_case"), *ip = json_object_get(o, "ignore_punctuation");
    json_t *ig = json_object_get(o, "regexes_to_ignore");
    if ((ic && !json_is_boolean(ic)) || (ip && !json_is_boolean(ip)))
        return filter_bad(where, "filter '%s': multi_choice_regex's \"%s\" is not true or false",
                          name, ic && !json_is_boolean(ic) ? "ignore_case" : "ignore_punctuation");
    st->ignore_case = json_is_true(ic);
    st->ignore_punctuation = json_is_true(ip);
    if (!ig || json_is_null(ig))
        return TR_OK;
    if (!json_is_array(ig) || json_array_size(ig) > 256)
        return filter_bad(where, "filter '%s': multi_choice_regex's \"regexes_to_ignore\" is not "
                          "a list of (at most 256) patterns", name);
    if (!(st->ignore = calloc(json_array_size(ig) + 1, sizeof *st->ignore)))
        return tr_fail(TR_ERR_NOMEM, "out of memory");
    for (size_t k = 0; k < json_array_size(ig); k++) {
        json_t *p = json_array_get(ig, k);
        char what[300];
        snprintf(what, sizeof what, "filter '%s': multi_choice_regex's regexes_to_ignore[%zu]",
                 name, k);
        if (!json_is_string(p))
            return filter_bad(where, "%s is not a string", what);
        int rc = filter_compile(where, what, p, &st->ignore[st->n_ignore]);
        if (rc)
            return rc;
        st->n_ignore++;
    }
    return TR_OK;
}

/* s with the step's ignores, as the harness's filter_ignores: regexes_to_ignore removed in
 * turn, then str.lower(), then every code point of a category P* removed; malloc'ed. */
static int ignores(const tr_eval_filter_step *st, const char *s, char **out)
{
    char *cur = filter_dup(s, strlen(s)), *next = NULL;
    int rc = cur ? TR_OK : tr_fail(TR_ERR_NOMEM, "out of memory");
    for (int k = 0; k < st->n_ignore && !rc; k++) {
        rc = tr_regex_sub(st->ignore[k], cur, strlen(cur), "", &next);
        free(cur);
        cur = next;
    }
    size_t len;
    if (!rc && st->ignore_case) {
        rc = tr_text_case(cur, strlen(cur), 0, &next, &len);
        free(cur);
        cur = next;
    }
    if (!rc && st->ignore_punctuation) {
        size_t n = strlen(cur), w = 0;
        for (size_t i = 0; i < n;) {
            size_t at = i;
            if (!tr_text_ispunct(tr_text_next(cur, n, &i)))
                while (at < i)
                    cur[w++] = cur[at++];
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

/* The harness's find_match: the pick of re in text (stripped), or NULL where it is none or
 * empty; one equal to keys[i] becomes values[i] (the last such i: a dictionary's later key
 * wins). */
static int find_match(const tr_regex *re, long group_select, const char *text, char **keys,
                      char **values, int n, char **out)
{
    size_t a, b;
    int found, rc = filter_pick(re, group_select, text, &found, &a, &b);
    *out = NULL;
    if (rc || !found || a == b)
        return rc;
    for (int k = n - 1; k >= 0; k--)
        if (strlen(keys[k]) == b - a && !memcmp(keys[k], text + a, b - a)) {
            text = values[k];
            a = 0;
            b = strlen(values[k]);
            break;
        }
    *out = filter_dup(text + a, b - a);
    return *out ? TR_OK : tr_fail(TR_ERR_NOMEM, "out of memory");
}

/* s as re.escape writes it (Python >= 3.7) at *w in o. */
static void escape_into(char *o, size_t *w, const char *s)
{
    for (; *s; s++) {
        if (*s && strchr("()[]{}?*+-|^$\\.&~# \t\n\r\v\f", *s))
            o[(*w)++] = '\\';
        o[(*w)++] = *s;
    }
}

/* The choices' patterns: the ignores' texts m[i] of r's choices (stripped), "m[0]|m[1]|..."
 * re.escape'd, ":[\s]*(A|B|...)"; labels[i] "(A)", letters[i] "A". */
typedef struct {
    char **m, **labels, **letters;
    int n;
    tr_regex *choices, *letters_re;
} choice_set;

static void choice_set_free(choice_set *c)
{
    for (int k = 0; k < c->n; k++) {
        free(c->m ? c->m[k] : NULL);
        free(c->labels ? c->labels[k] : NULL);
        free(c->letters ? c->letters[k] : NULL);
    }
    free(c->m);
    free(c->labels);
    free(c->letters);
    tr_regex_free(c->choices);
    tr_regex_free(c->letters_re);
}

static int choice_set_make(const tr_eval_filter_step *st, const tr_eval_request *r,
                           choice_set *c)
{
    int n = r->n_doc_choices, rc = TR_OK;
    size_t room = 16 + 4 * (size_t)n;
    c->m = calloc((size_t)n + 1, sizeof *c->m);
    c->labels = calloc((size_t)n + 1, sizeof *c->labels);
    c->letters = calloc((size_t)n + 1, sizeof *c->letters);
    if (!c->m || !c->labels || !c->letters)
        return tr_fail(TR_ERR_NOMEM, "out of memory");
    for (; c->n < n && !rc; c->n++) {
        const char *s = r->doc_choices[c->n];
        size_t a, b;
        tr_text_strip(s, strlen(s), 1, 1, &a, &b);
        char *stripped = filter_dup(s + a, b - a), label[4] = {'(', (char)('A' + c->n), ')', 0};
        rc = stripped ? ignores(st, stripped, &c->m[c->n]) : tr_fail(TR_ERR_NOMEM, "out of memory");
        free(stripped);
        c->labels[c->n] = filter_dup(label, 3);
        c->letters[c->n] = filter_dup(label + 1, 1);
        if (!rc && (!c->labels[c->n] || !c->letters[c->n]))
            rc = tr_fail(TR_ERR_NOMEM, "out of memory");
        if (!rc)
            room += 2 * strlen(c->m[c->n]) + 1;
    }
    char *p = rc ? NULL : malloc(room);
    if (!rc && !p)
        rc = tr_fail(TR_ERR_NOMEM, "out of memory");
    size_t w = 0;
    for (int k = 0; !rc && k < n; k++) {
        if (k)
            p[w++] = '|';
        escape_into(p, &w, c->m[k]);
    }
    if (!rc && !(rc = tr_regex_compile(p, w, &c->choices))) {
        w = 0;
        memcpy(p, ":[\\s]*(", 7);
        w = 7;
        for (int k = 0; k < n; k++) {
            if (k)
                p[w++] = '|';
            p[w++] = (char)('A' + k);
        }
        p[w++] = ')';
        rc = tr_regex_compile(p, w, &c->letters_re);
    }
    free(p);
    return rc;
}

int filter_choice_apply(const tr_eval_filter_step *st, const tr_eval_request *r,
                        const char *text, char **out)
{
    *out = NULL;
    if (!r || !r->doc_choices)
        return tr_fail(TR_ERR_INVALID, "multi_choice_regex needs the request's \"choices\"");
    choice_set c = {0};
    char *ignored = NULL;
    int rc = find_match(st->regex, st->group_select, text, NULL, NULL, 0, out);
    if (!rc && !*out && !(rc = choice_set_make(st, r, &c)) && !(rc = ignores(st, text, &ignored)))
        rc = find_match(c.choices, st->group_select, ignored, c.m, c.labels, c.n, out);
    if (!rc && !*out)
        rc = find_match(c.letters_re, st->group_select, text, c.letters, c.labels, c.n, out);
    if (!rc && !*out && !(*out = filter_dup(st->fallback, strlen(st->fallback))))
        rc = tr_fail(TR_ERR_NOMEM, "out of memory");
    free(ignored);
    choice_set_free(&c);
    if (rc) {
        free(*out);
        *out = NULL;
    }
    return rc;
}
