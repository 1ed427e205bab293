/* The eval-filters test's C side: eval/regex.c and eval/filter.c on inputs from a JSON file,
 * results as JSON Lines on stdout for test_eval_filters.py to compare with Python.
 *   eval_filter_tool regex CASES.json     CASES: [{"pattern": P, "text": T, "steps": N
 *       (optional budget)}, ...]; a line each: {"findall": re.findall's list (strings, or
 *       lists of strings for several groups), "sub": re.sub(P, "", T)} or {"error": MESSAGE}
 *   eval_filter_tool filter SETTINGS.json TEXTS.json   TEXTS: [{"text": T, "target": S,
 *       "choices": [STR...] (optional: the request's, for multi_choice_regex)}, ...];
 *       a line each: {"filtered": [each filter's text], "exact": [exact_match unfiltered, then
 *       each filter's]} or {"error": MESSAGE} (settings refused: one line, exit 2) */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "eval/eval.h"

static json_t *load(const char *path)
{
    json_error_t err;
    json_t *v = json_load_file(path, JSON_ALLOW_NUL, &err);
    if (!v) {
        fprintf(stderr, "%s: %s\n", path, err.text);
        exit(2);
    }
    return v;
}

static void print_line(json_t *o)
{
    char *s = json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII);
    puts(s);
    free(s);
    json_decref(o);
}

static json_t *span_text(const char *text, tr_regex_span sp)
{
    return sp.begin == SIZE_MAX ? json_string("")
                                : json_stringn(text + sp.begin, sp.end - sp.begin);
}

static int regex_cases(json_t *cases)
{
    size_t i;
    json_t *c;
    json_array_foreach(cases, i, c) {
        const char *pattern = json_string_value(json_object_get(c, "pattern"));
        json_t *t = json_object_get(c, "text"), *steps = json_object_get(c, "steps");
        const char *text = json_string_value(t);
        size_t len = json_string_length(t);
        tr_regex *re = NULL;
        tr_regex_span *spans = NULL;
        size_t n = 0;
        char *sub = NULL;
        int rc = tr_regex_compile(pattern, json_string_length(json_object_get(c, "pattern")), &re);
        if (!rc && steps)
            tr_regex_set_steps(re, (long)json_integer_value(steps));
        if (!rc)
            rc = tr_regex_findall(re, text, len, &spans, &n);
        if (!rc)
            rc = tr_regex_sub(re, text, len, "", &sub);
        if (rc) {
            print_line(json_pack("{ss}", "error", tr_errmsg()));
            tr_regex_free(re);
            continue;
        }
        int groups = tr_regex_groups(re);
        json_t *all = json_array();
        for (size_t k = 0; k < n; k++) {
            const tr_regex_span *m = &spans[k * (size_t)(groups + 1)];
            if (groups <= 1) {
                json_array_append_new(all, span_text(text, m[groups]));
                continue;
            }
            json_t *tuple = json_array();
            for (int g = 1; g <= groups; g++)
                json_array_append_new(tuple, span_text(text, m[g]));
            json_array_append_new(all, tuple);
        }
        print_line(json_pack("{soss}", "findall", all, "sub", sub));
        free(sub);
        free(spans);
        tr_regex_free(re);
    }
    return 0;
}

static int filter_texts(const char *settings_path, json_t *texts)
{
    char *raw = NULL;
    size_t raw_len = 0;
    tr_eval_settings s;
    int rc = tr_read_file(settings_path, 1 << 20, "settings", &raw, &raw_len);
    if (!rc)
        rc = tr_eval_settings_parse(raw, raw_len, settings_path, &s);
    free(raw);
    if (rc) {
        print_line(json_pack("{ss}", "error", tr_errmsg()));
        return 2;
    }
    size_t i;
    json_t *c;
    json_array_foreach(texts, i, c) {
        const char *text = json_string_value(json_object_get(c, "text"));
        const char *target = json_string_value(json_object_get(c, "target"));
        json_t *filtered = json_array(), *exact = json_array(), *ch = json_object_get(c, "choices");
        int equal = 0;
        tr_eval_request req = {.n_doc_choices = (int)json_array_size(ch)};
        req.doc_choices = calloc((size_t)req.n_doc_choices + 1, sizeof *req.doc_choices);
        for (int k = 0; k < req.n_doc_choices; k++) /* (the tool's own strings, never freed) */
            req.doc_choices[k] = (char *)json_string_value(json_array_get(ch, (size_t)k));
        rc = tr_eval_exact_match(&s, text, target, &equal);
        json_array_append_new(exact, json_boolean(equal));
        for (int f = 0; !rc && f < s.n_filters; f++) {
            char *out = NULL;
            if (!(rc = tr_eval_filter_apply(&s.filters[f], ch ? &req : NULL, text, &out)))
                rc = tr_eval_exact_match(&s, out, target, &equal);
            json_array_append_new(filtered, json_string(out ? out : ""));
            json_array_append_new(exact, json_boolean(equal));
            free(out);
        }
        free(req.doc_choices);
        if (rc) {
            json_decref(filtered);
            json_decref(exact);
            print_line(json_pack("{ss}", "error", tr_errmsg()));
        } else
            print_line(json_pack("{soso}", "filtered", filtered, "exact", exact));
    }
    tr_eval_settings_free(&s);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "regex")) {
        json_t *cases = load(argv[2]);
        int rc = regex_cases(cases);
        json_decref(cases);
        return rc;
    }
    if (argc == 4 && !strcmp(argv[1], "filter")) {
        json_t *texts = load(argv[3]);
        int rc = filter_texts(argv[2], texts);
        json_decref(texts);
        return rc;
    }
    fprintf(stderr, "usage: eval_filter_tool regex CASES.json | filter SETTINGS.json TEXTS.json\n");
    return 2;
}
