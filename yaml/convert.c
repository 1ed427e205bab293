/* YAML node -> struct field, typed by the key table, with messages that say what was found
 * and what is allowed; plus the small text helpers those messages use. */
#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "yaml/config_internal.h"

const char *yquote(const char *s, size_t len, char *buf, size_t cap)
{
    const size_t shown = 48;
    size_t o = 0;
    if (cap < 16)
        return "";
    buf[o++] = '\'';
    for (size_t i = 0; i < len && i < shown && o + 8 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\\' || c == '\'') {
            buf[o++] = '\\';
            buf[o++] = (char)c;
        } else if (c >= 0x20 && c < 0x7f) {
            buf[o++] = (char)c;
        } else {
            o += (size_t)snprintf(buf + o, cap - o, "\\x%02X", c);
        }
    }
    if (len > shown && o + 5 < cap) {
        memcpy(buf + o, "...", 3);
        o += 3;
    }
    buf[o++] = '\'';
    buf[o] = '\0';
    return buf;
}

const char *ydescribe(const ynode *node, char *buf, size_t cap)
{
    if (node->kind == YMAPPING)
        return "a mapping";
    if (node->kind == YSEQUENCE)
        return "a list";
    if (node->is_null)
        return "an empty value";
    return yquote(node->text, node->len, buf, cap);
}

static void append(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void append(char *buf, size_t cap, const char *fmt, ...)
{
    size_t o = strlen(buf);
    if (o + 1 >= cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + o, cap - o, fmt, ap);
    va_end(ap);
}

const char *yrange_text(const config_key_spec *spec, char *buf, size_t cap)
{
    int integer = spec->type == KEY_INT || spec->type == KEY_INT_LIST;
    buf[0] = '\0';
    append(buf, cap, "%s", integer ? "an integer" : "a number");
    int has_hi = integer ? spec->hi < INT_MAX : spec->hi < DBL_MAX;
    if (integer && has_hi && !spec->lo_open && !spec->hi_open) {
        append(buf, cap, " from %.17g to %.17g", spec->lo, spec->hi);
        return buf;
    }
    append(buf, cap, " %s %.17g", spec->lo_open ? ">" : ">=", spec->lo);
    if (has_hi)
        append(buf, cap, " and %s %.17g", spec->hi_open ? "<" : "<=", spec->hi);
    return buf;
}

/* Levenshtein distance of two short strings (each < 64 bytes). */
static int edit_distance(const char *a, const char *b)
{
    int la = (int)strlen(a), lb = (int)strlen(b), row[64];
    for (int j = 0; j <= lb; j++)
        row[j] = j;
    for (int i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = i;
        for (int j = 1; j <= lb; j++) {
            int up = row[j];
            int sub = diag + (tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]));
            int best = sub < up + 1 ? sub : up + 1;
            row[j] = best < row[j - 1] + 1 ? best : row[j - 1] + 1;
            diag = up;
        }
    }
    return row[lb];
}

const char *config_closest(const char *word, const char *const *candidates, int n)
{
    size_t lw = strlen(word);
    if (lw == 0 || lw >= 64)
        return NULL;
    const char *best = NULL;
    int best_d = INT_MAX, limit = (int)lw / 3 > 2 ? (int)lw / 3 : 2;
    for (int i = 0; i < n; i++) {
        if (strlen(candidates[i]) >= 64)
            continue;
        int d = edit_distance(word, candidates[i]);
        if (d < best_d) {
            best_d = d;
            best = candidates[i];
        }
    }
    return best_d <= limit ? best : NULL;
}

const char *config_check_split(const char *value)
{
    const char *allowed = "1 to 3 non-negative weights separated by commas (train,validation,"
                          "test), not all zero, e.g. \"969,30,1\"";
    double sum = 0;
    int n = 0;
    const char *p = value;
    for (;;) {
        while (*p == ' ')
            p++;
        if (!isdigit((unsigned char)*p) && *p != '.')
            return allowed;
        char *end;
        errno = 0;
        double w = strtod(p, &end);
        if (end == p || errno || !isfinite(w) || w < 0 || ++n > 3)
            return allowed;
        sum += w;
        p = end;
        while (*p == ' ')
            p++;
        if (*p == '\0')
            break;
        if (*p != ',' && *p != '/')
            return allowed;
        p++;
    }
    return sum > 0 && isfinite(sum) ? NULL : allowed;
}

static int is_number(const char *s, double *v)
{
    char *end;
    errno = 0;
    *v = strtod(s, &end);
    return end != s && *end == '\0' && !errno && !isspace((unsigned char)s[0]);
}

int tr_config_blend(char *const *list, int n, const char ***paths, double **weights, int *n_paths)
{
    *paths = NULL;
    *weights = NULL;
    *n_paths = 0;
    if (n <= 0)
        return tr_fail(TR_ERR_CONFIG, "an empty list; expected [PATH] or [W1, PATH1, W2, PATH2, ...]");
    int numbers = 0, pairs = n % 2 == 0;
    double v;
    for (int i = 0; pairs && i < n; i += 2)
        numbers += is_number(list[i], &v);
    int weighted = pairs && numbers == n / 2;
    if (pairs && numbers && !weighted)
        return tr_fail(TR_ERR_CONFIG, "%d of the %d weights are numbers; expected [W1, PATH1, W2, "
                       "PATH2, ...] with every weight a number, or a list of paths only", numbers, n / 2);
    int m = weighted ? n / 2 : n;
    *paths = malloc((size_t)m * sizeof **paths);
    *weights = weighted ? malloc((size_t)m * sizeof **weights) : NULL;
    if (!*paths || (weighted && !*weights)) {
        free(*paths);
        free(*weights);
        *paths = NULL;
        *weights = NULL;
        return tr_fail(TR_ERR_NOMEM, "out of memory for a data path list");
    }
    double sum = 0;
    for (int i = 0; i < m; i++) {
        (*paths)[i] = list[weighted ? 2 * i + 1 : i];
        if (weighted) {
            (void)is_number(list[2 * i], &(*weights)[i]);
            sum += (*weights)[i];
            if (!isfinite((*weights)[i]) || (*weights)[i] < 0) {
                free(*paths);
                free(*weights);
                *paths = NULL;
                *weights = NULL;
                return tr_fail(TR_ERR_CONFIG, "weight %d is '%s'; weights are finite numbers >= 0",
                               i + 1, list[2 * i]);
            }
        }
    }
    if (weighted && !(sum > 0)) {
        free(*paths);
        free(*weights);
        *paths = NULL;
        *weights = NULL;
        return tr_fail(TR_ERR_CONFIG, "the weights are all 0");
    }
    *n_paths = m;
    return TR_OK;
}

/* ---- conversion ---- */

typedef struct {
    const config_key_spec *spec;
    const ysource *src;
    char label[160]; /* "section.key" or "section.key[i]" */
} field_ctx;

static int fail_node(const field_ctx *f, const ynode *node, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail_node(const field_ctx *f, const ynode *node, const char *fmt, ...)
{
    char loc[1200], what[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    yloc(f->src, node->line, node->col, loc, sizeof loc);
    /* "--set training.lr: expected ..." rather than "--set training.lr: training.lr: ..." */
    if (f->src->set_label && !strcmp(f->src->set_label + strlen("--set "), f->label))
        return tr_fail(TR_ERR_CONFIG, "%s: %s", loc, what);
    return tr_fail(TR_ERR_CONFIG, "%s: %s: %s", loc, f->label, what);
}

static int expected(const field_ctx *f, const ynode *node, const char *what)
{
    char q[160];
    return fail_node(f, node, "expected %s, found %s", what, ydescribe(node, q, sizeof q));
}

static int out_of_range(const field_ctx *f, const ynode *node)
{
    char q[160], r[160];
    return fail_node(f, node, "found %s; allowed: %s", ydescribe(node, q, sizeof q),
                     yrange_text(f->spec, r, sizeof r));
}

static int in_range(const config_key_spec *s, double v)
{
    if (s->lo_open ? !(v > s->lo) : !(v >= s->lo))
        return 0;
    return s->hi_open ? v < s->hi : v <= s->hi;
}

static int parse_int(const field_ctx *f, const ynode *node, int *out)
{
    if (node->kind != YSCALAR || node->is_null)
        return expected(f, node, "an integer");
    const char *s = node->text;
    if (!(isdigit((unsigned char)s[0]) || ((s[0] == '-' || s[0] == '+') && isdigit((unsigned char)s[1]))))
        return expected(f, node, "an integer");
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end != s + node->len)
        return expected(f, node, "an integer");
    if (errno == ERANGE || v < INT_MIN || v > INT_MAX || !in_range(f->spec, (double)v))
        return out_of_range(f, node);
    *out = (int)v;
    return TR_OK;
}

static int parse_uint64(const field_ctx *f, const ynode *node, uint64_t *out)
{
    if (node->kind != YSCALAR || node->is_null)
        return expected(f, node, "a non-negative integer");
    const char *s = node->text;
    if (!(isdigit((unsigned char)s[0]) || (s[0] == '+' && isdigit((unsigned char)s[1]))))
        return expected(f, node, "a non-negative integer");
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (end != s + node->len)
        return expected(f, node, "a non-negative integer");
    if (errno == ERANGE) {
        char q[160];
        return fail_node(f, node, "found %s; allowed: an integer from 0 to %" PRIu64,
                         ydescribe(node, q, sizeof q), UINT64_MAX);
    }
    *out = (uint64_t)v;
    return TR_OK;
}

static int parse_double(const field_ctx *f, const ynode *node, double *out)
{
    if (node->kind != YSCALAR || node->is_null)
        return expected(f, node, "a number");
    const char *s = node->text;
    const char *digits = s[0] == '-' || s[0] == '+' ? s + 1 : s;
    int lead_ok = isdigit((unsigned char)digits[0]) || digits[0] == '.';
    int named = !strncasecmp(digits, "inf", 3) || !strncasecmp(digits, "nan", 3);
    if (!lead_ok && !named)
        return expected(f, node, "a number");
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end != s + node->len || end == s)
        return expected(f, node, "a number");
    if (!isfinite(v) || !in_range(f->spec, v))
        return out_of_range(f, node);
    *out = v;
    return TR_OK;
}

static int parse_bool(const field_ctx *f, const ynode *node, int *out)
{
    static const char *const yes[] = {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"};
    static const char *const no[] = {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF"};
    if (node->kind == YSCALAR && !node->is_null) {
        for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
            if (!strcmp(node->text, yes[i]) && strlen(yes[i]) == node->len) {
                *out = 1;
                return TR_OK;
            }
            if (!strcmp(node->text, no[i]) && strlen(no[i]) == node->len) {
                *out = 0;
                return TR_OK;
            }
        }
    }
    return expected(f, node, "a boolean (true/false/yes/no)");
}

static int parse_string(const field_ctx *f, const ynode *node, char **out)
{
    const config_key_spec *s = f->spec;
    if (node->kind != YSCALAR || node->is_null)
        return expected(f, node, s->choices ? "one of the allowed names" : "a string");
    char q[160], allowed[600];
    if (s->choices) {
        int n = 0, found = 0;
        allowed[0] = '\0';
        for (; s->choices[n]; n++) {
            append(allowed, sizeof allowed, "%s%s", n ? ", " : "", s->choices[n]);
            found |= strlen(s->choices[n]) == node->len && !strcmp(s->choices[n], node->text);
        }
        if (!found) {
            const char *near = config_closest(node->text, s->choices, n);
            return fail_node(f, node, "found %s; allowed: %s%s%s%s", ydescribe(node, q, sizeof q),
                             allowed, near ? " (did you mean '" : "", near ? near : "",
                             near ? "'?)" : "");
        }
    } else {
        if (memchr(node->text, '\0', node->len))
            return fail_node(f, node, "found %s, which holds a NUL byte; allowed: text without NUL",
                             ydescribe(node, q, sizeof q));
        if (node->len == 0 && !s->allow_empty)
            return fail_node(f, node, "found an empty string; allowed: a non-empty string");
        if (node->len > YAML_MAX_STRING)
            return fail_node(f, node, "found a string of %zu bytes; allowed: at most %d bytes",
                             node->len, YAML_MAX_STRING);
        const char *problem = s->check_string ? s->check_string(node->text) : NULL;
        if (problem)
            return fail_node(f, node, "found %s; allowed: %s", ydescribe(node, q, sizeof q),
                             problem);
    }
    char *copy = strdup(node->text);
    if (!copy)
        return tr_fail(TR_ERR_NOMEM, "out of memory copying %s", f->label);
    free(*out);
    *out = copy;
    return TR_OK;
}

static int parse_int_list(field_ctx *f, const ydoc *doc, const ynode *node, int *values,
                          int *count)
{
    if (node->kind != YSEQUENCE)
        return expected(f, node, "a list of integers like [1, 3]");
    if (node->n_children > f->spec->max_count) {
        return fail_node(f, node, "found a list of %d entries; allowed: at most %d",
                         node->n_children, f->spec->max_count);
    }
    char base[sizeof f->label];
    memcpy(base, f->label, sizeof base);
    int n = 0, rc = TR_OK;
    for (int c = node->first; c >= 0 && !rc; c = doc->nodes[c].next, n++) {
        snprintf(f->label, sizeof f->label, "%.140s[%d]", base, n);
        rc = parse_int(f, &doc->nodes[c], &values[n]);
    }
    memcpy(f->label, base, sizeof base);
    if (!rc)
        *count = n;
    return rc;
}

/* A list of strings (numbers stay text: Megatron's blend weights), or one string. */
static int parse_string_list(field_ctx *f, const ydoc *doc, const ynode *node, char ***out,
                             int *count)
{
    int n = node->kind == YSEQUENCE ? node->n_children : 1;
    if (node->kind == YMAPPING || (node->kind == YSCALAR && node->is_null))
        return expected(f, node, "a list of strings like [0.3, prefixA, 0.7, prefixB], or a string");
    if (n > f->spec->max_count)
        return fail_node(f, node, "found a list of %d entries; allowed: at most %d", n,
                         f->spec->max_count);
    char **items = calloc((size_t)n + 1, sizeof *items);
    if (!items)
        return tr_fail(TR_ERR_NOMEM, "out of memory copying %s", f->label);
    char base[sizeof f->label];
    memcpy(base, f->label, sizeof base);
    int rc = TR_OK, k = 0;
    const ynode *item = node->kind == YSEQUENCE ? (node->first >= 0 ? &doc->nodes[node->first] : NULL) : node;
    for (; item && k < n && !rc; k++) {
        if (node->kind == YSEQUENCE)
            snprintf(f->label, sizeof f->label, "%.140s[%d]", base, k);
        rc = parse_string(f, item, &items[k]);
        item = node->kind == YSEQUENCE && item->next >= 0 ? &doc->nodes[item->next] : NULL;
    }
    memcpy(f->label, base, sizeof base);
    if (rc) {
        for (int i = 0; i < n; i++)
            free(items[i]);
        free(items);
        return rc;
    }
    for (int i = 0; i < *count; i++)
        free((*out)[i]);
    free(*out);
    *out = items;
    *count = n;
    return TR_OK;
}

int config_set_field(tr_config *cfg, const config_key_spec *spec, const ydoc *doc,
                        const ynode *node, const ysource *src)
{
    field_ctx f = {.spec = spec, .src = src};
    snprintf(f.label, sizeof f.label, "%s.%s", spec->section, spec->key);
    void *field = (char *)cfg + spec->offset;
    switch (spec->type) {
    case KEY_INT:
        return parse_int(&f, node, field);
    case KEY_UINT64:
        return parse_uint64(&f, node, field);
    case KEY_DOUBLE:
        return parse_double(&f, node, field);
    case KEY_BOOL: {
        int rc = parse_bool(&f, node, field);
        if (!rc && spec->negate)
            *(int *)field = !*(int *)field;
        return rc;
    }
    case KEY_STRING:
        return parse_string(&f, node, field);
    case KEY_STRING_LIST:
        return parse_string_list(&f, doc, node, field, (int *)((char *)cfg + spec->count_offset));
    case KEY_INT_LIST: {
        int values[TR_MAX_STAGES], count = 0;
        int rc = parse_int_list(&f, doc, node, values, &count);
        if (!rc) {
            memcpy(field, values, (size_t)count * sizeof(int));
            *(int *)((char *)cfg + spec->count_offset) = count;
        }
        return rc;
    }
    }
    return tr_fail(TR_ERR_INTERNAL, "config key %s has no type", f.label);
}
