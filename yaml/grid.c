/* Grid specs for `trident sweep`: a base config, axes of values, run settings. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "yaml/config_internal.h"

#define MAX_POINTS 100000

static int fail_node(const ysource *src, const ynode *n, const char *fmt, const char *what)
{
    char where[512];
    return tr_fail(TR_ERR_CONFIG, "%s: %s %s", yloc(src, n->line, n->col, where, sizeof where),
                   fmt, what ? what : "");
}

/* A node's value back as YAML text: scalars as they are (quoted when they need it), flat
 * sequences as [a,b]. Nested collections are not values of a config key. */
static int node_text(const ydoc *d, const ysource *src, int idx, char **out)
{
    const ynode *n = &d->nodes[idx];
    if (n->kind == YSCALAR) {
        size_t len = strlen(n->text);
        char *t = malloc(len + 3);
        if (!t)
            return tr_fail(TR_ERR_NOMEM, "out of memory");
        int plain = len > 0 && strcspn(n->text, ":#[]{},&*!|>'\"%@`\n") == len;
        if (plain)
            memcpy(t, n->text, len + 1);
        else if (!strchr(n->text, '\'') && !strchr(n->text, '\n'))
            snprintf(t, len + 3, "'%s'", n->text);
        else {
            free(t);
            return fail_node(src, n, "a value with quotes or newlines cannot be swept", NULL);
        }
        *out = t;
        return TR_OK;
    }
    if (n->kind == YSEQUENCE) {
        size_t cap = 64, len = 1;
        char *t = malloc(cap);
        if (!t)
            return tr_fail(TR_ERR_NOMEM, "out of memory");
        t[0] = '[';
        for (int c = n->first; c >= 0; c = d->nodes[c].next) {
            char *item = NULL;
            if (d->nodes[c].kind != YSCALAR) {
                free(t);
                return fail_node(src, &d->nodes[c], "found a nested collection;",
                                 "allowed: scalars or flat lists");
            }
            int rc = node_text(d, src, c, &item);
            if (rc) {
                free(t);
                return rc;
            }
            size_t il = strlen(item);
            if (len + il + 3 > cap) {
                cap = 2 * (len + il + 3);
                char *p = realloc(t, cap);
                if (!p) {
                    free(item);
                    free(t);
                    return tr_fail(TR_ERR_NOMEM, "out of memory");
                }
                t = p;
            }
            if (len > 1)
                t[len++] = ',';
            memcpy(t + len, item, il);
            len += il;
            free(item);
        }
        t[len++] = ']';
        t[len] = '\0';
        *out = t;
        return TR_OK;
    }
    return fail_node(src, n, "found a mapping;", "allowed: a scalar or a flat list");
}

static int parse_int(const ydoc *d, const ysource *src, int idx, const char *what, int lo,
                     int hi, int *out)
{
    const ynode *n = &d->nodes[idx];
    char *end = NULL;
    long v = n->kind == YSCALAR ? strtol(n->text, &end, 10) : 0;
    if (n->kind != YSCALAR || !end || *end || end == n->text || v < lo || v > hi) {
        char found[96], allowed[64];
        snprintf(found, sizeof found, "found a bad value for %s;", what);
        snprintf(allowed, sizeof allowed, "allowed: an integer from %d to %d", lo, hi);
        return fail_node(src, n, found, allowed);
    }
    *out = (int)v;
    return TR_OK;
}

/* The key at node k of a mapping checked as a plain name (a scalar, not null, no NUL byte)
 * with a value after it, whose index goes to *v; `what` names the mapping in the error. */
static int plain_key(const ydoc *d, const ysource *src, int k, const char *what, int *v)
{
    const ynode *key = &d->nodes[k];
    char found[200], q[120];
    if (key->next < 0)
        return fail_node(src, key, "found a key without a value;", "allowed: key: value");
    if (key->kind != YSCALAR || key->is_null || memchr(key->text, '\0', key->len)) {
        snprintf(found, sizeof found, "found a key of %s that is %s;", what,
                 ydescribe(key, q, sizeof q));
        return fail_node(src, key, found, "allowed: a plain key name");
    }
    *v = key->next;
    return TR_OK;
}

/* The error for a name (its first len bytes) given twice in one mapping, at its second key */
static int twice(const ysource *src, const ynode *key, const char *what, const char *name,
                 size_t len)
{
    char found[300];
    snprintf(found, sizeof found, "found %s '%.*s' twice;", what, (int)(len < 200 ? len : 200),
             name);
    return fail_node(src, key, found, "each may appear once");
}

static int add_string(char ***list, int *n, char *s)
{
    char **p = realloc(*list, (size_t)(*n + 1) * sizeof **list);
    if (!p) {
        free(s);
        return tr_fail(TR_ERR_NOMEM, "out of memory");
    }
    p[(*n)++] = s;
    *list = p;
    return TR_OK;
}

/* Inline base: {section: {key: value}} -> "section.key=value" overrides, each key once. */
static int inline_base(tr_grid_spec *g, const ydoc *d, const ysource *src, int idx)
{
    for (int s = d->nodes[idx].first; s >= 0; s = d->nodes[d->nodes[s].next].next) {
        int body, rc = plain_key(d, src, s, "base", &body);
        if (rc)
            return rc;
        if (d->nodes[body].kind != YMAPPING)
            return fail_node(src, &d->nodes[body], "found a section that is not a mapping;",
                             "allowed: key: value pairs");
        for (int k = d->nodes[body].first; k >= 0; k = d->nodes[d->nodes[k].next].next) {
            int v;
            if ((rc = plain_key(d, src, k, "a base section", &v)))
                return rc;
            char *value = NULL;
            if ((rc = node_text(d, src, v, &value)))
                return rc;
            /* set = "section.key=value"; its first name_len + 1 bytes, "section.key=", once */
            size_t name_len = strlen(d->nodes[s].text) + strlen(d->nodes[k].text) + 1;
            size_t len = name_len + strlen(value) + 2;
            char *set = malloc(len);
            if (!set) {
                free(value);
                return tr_fail(TR_ERR_NOMEM, "out of memory");
            }
            snprintf(set, len, "%s.%s=%s", d->nodes[s].text, d->nodes[k].text, value);
            free(value);
            for (int i = 0; i < g->n_base_sets; i++)
                if (!strncmp(g->base_sets[i], set, name_len + 1)) {
                    rc = twice(src, &d->nodes[k], "base key", set, name_len);
                    free(set);
                    return rc;
                }
            if ((rc = add_string(&g->base_sets, &g->n_base_sets, set)))
                return rc;
        }
    }
    return TR_OK;
}

static int parse_spec(tr_grid_spec *g, const ydoc *d, const ysource *src, const char *path)
{
    const ynode *root = &d->nodes[d->root];
    if (root->kind != YMAPPING)
        return fail_node(src, root, "found a grid spec that is not a mapping;",
                         "allowed: sections base, grid, run");
    int have_base = 0, have_grid = 0, have_run = 0;
    for (int k = root->first; k >= 0; k = d->nodes[d->nodes[k].next].next) {
        const ynode *key = &d->nodes[k];
        int v, rc = plain_key(d, src, k, "the grid spec", &v);
        if (rc)
            return rc;
        const ynode *val = &d->nodes[v];
        int *have = !strcmp(key->text, "base")   ? &have_base
                    : !strcmp(key->text, "grid") ? &have_grid
                    : !strcmp(key->text, "run")  ? &have_run
                                                 : NULL;
        if (have && (*have)++)
            return twice(src, key, "section", key->text, key->len);
        if (!strcmp(key->text, "base")) {
            if (val->kind == YSCALAR) {
                /* relative to the grid file's folder */
                const char *slash = strrchr(path, '/');
                size_t dir = slash && val->text[0] != '/' ? (size_t)(slash - path + 1) : 0;
                g->base_path = malloc(dir + strlen(val->text) + 1);
                if (!g->base_path)
                    return tr_fail(TR_ERR_NOMEM, "out of memory");
                memcpy(g->base_path, path, dir);
                strcpy(g->base_path + dir, val->text);
            } else if (val->kind == YMAPPING) {
                rc = inline_base(g, d, src, v);
            } else {
                rc = fail_node(src, val, "found a list for base;",
                               "allowed: a config path or inline sections");
            }
        } else if (!strcmp(key->text, "grid")) {
            if (val->kind != YMAPPING)
                return fail_node(src, val, "found a grid that is not a mapping;",
                                 "allowed: section.key: [values]");
            for (int a = val->first; a >= 0 && !rc; a = d->nodes[d->nodes[a].next].next) {
                int avi;
                if ((rc = plain_key(d, src, a, "grid", &avi)))
                    return rc;
                const ynode *ak = &d->nodes[a], *av = &d->nodes[avi];
                for (int i = 0; i < g->n_axes; i++)
                    if (!strcmp(g->axes[i].key, ak->text))
                        return twice(src, ak, "grid axis", ak->text, ak->len);
                if (!strchr(ak->text, '.'))
                    return fail_node(src, ak, "found a grid key without a section;",
                                     "allowed: dotted keys like training.micro_batch_size");
                if (av->kind != YSEQUENCE || av->n_children < 1)
                    return fail_node(src, av, "found a grid axis that is not a non-empty list;",
                                     "allowed: [value, ...]");
                tr_grid_axis *axes = realloc(g->axes, (size_t)(g->n_axes + 1) * sizeof *axes);
                if (!axes)
                    return tr_fail(TR_ERR_NOMEM, "out of memory");
                g->axes = axes;
                tr_grid_axis *ax = &g->axes[g->n_axes++];
                memset(ax, 0, sizeof *ax);
                ax->key = strdup(ak->text);
                if (!ax->key)
                    return tr_fail(TR_ERR_NOMEM, "out of memory");
                for (int c = av->first; c >= 0 && !rc; c = d->nodes[c].next) {
                    char *text = NULL;
                    rc = node_text(d, src, c, &text);
                    if (!rc) {
                        size_t len = strlen(ax->key) + strlen(text) + 2;
                        char *set = malloc(len);
                        if (!set) {
                            free(text);
                            return tr_fail(TR_ERR_NOMEM, "out of memory");
                        }
                        snprintf(set, len, "%s=%s", ax->key, text);
                        free(text);
                        rc = add_string(&ax->values, &ax->n_values, set);
                    }
                }
            }
        } else if (!strcmp(key->text, "run")) {
            if (val->kind != YMAPPING)
                return fail_node(src, val, "found run settings that are not a mapping;",
                                 "allowed: world_size, iterations, warmup_iterations");
            const struct {
                const char *name, *full;
                int lo, hi, *out;
            } settings[] = {{"world_size", "run.world_size", 1, 4096, &g->world_size},
                            {"iterations", "run.iterations", 1, 1000000, &g->iterations},
                            {"warmup_iterations", "run.warmup_iterations", 0, 1000000,
                             &g->warmup_iterations}};
            int given[3] = {0}, j;
            for (int r = val->first; r >= 0 && !rc; r = d->nodes[d->nodes[r].next].next) {
                const ynode *rk = &d->nodes[r];
                int rv;
                if ((rc = plain_key(d, src, r, "run", &rv)))
                    return rc;
                for (j = 0; j < 3 && strcmp(rk->text, settings[j].name); j++) {
                }
                if (j == 3)
                    rc = fail_node(src, rk, "found an unknown run setting;",
                                   "allowed: world_size, iterations, warmup_iterations");
                else if (given[j]++)
                    rc = twice(src, rk, "run setting", rk->text, rk->len);
                else
                    rc = parse_int(d, src, rv, settings[j].full, settings[j].lo, settings[j].hi,
                                   settings[j].out);
            }
        } else {
            rc = fail_node(src, key, "found an unknown section;", "allowed: base, grid, run");
        }
        if (rc)
            return rc;
    }
    if (!have_base)
        return fail_node(src, root, "found no base;", "allowed: base: CONFIG.yaml or inline sections");
    if (!have_grid)
        return fail_node(src, root, "found no grid;", "allowed: grid: {section.key: [values]}");
    if (g->warmup_iterations >= g->iterations)
        return tr_fail(TR_ERR_CONFIG, "%s: run.warmup_iterations (%d) must be below run.iterations (%d)",
                       path, g->warmup_iterations, g->iterations);
    if (tr_grid_num_points(g) > MAX_POINTS)
        return tr_fail(TR_ERR_CONFIG, "%s: the grid has more than %d points", path, MAX_POINTS);
    return TR_OK;
}

int tr_grid_load(const char *path, tr_grid_spec *out)
{
    memset(out, 0, sizeof *out);
    out->world_size = 1;
    out->iterations = 10;
    out->warmup_iterations = 2;
    out->source = strdup(path);
    char *text = NULL;
    size_t len = 0;
    int rc = out->source ? yaml_read_file(path, &text, &len) : tr_fail(TR_ERR_NOMEM, "out of memory");
    ysource src = {.name = path, .set_label = NULL};
    ydoc doc = {0};
    if (!rc)
        rc = ydoc_parse(text, len, &src, &doc);
    if (!rc && doc.root < 0)
        rc = tr_fail(TR_ERR_CONFIG, "%s: empty grid spec; allowed: sections base, grid, run", path);
    if (!rc)
        rc = parse_spec(out, &doc, &src, path);
    ydoc_free(&doc);
    free(text);
    if (rc)
        tr_grid_free(out);
    return rc;
}

size_t tr_grid_num_points(const tr_grid_spec *g)
{
    size_t n = 1;
    for (int a = 0; a < g->n_axes; a++) {
        if (n > MAX_POINTS)
            return n;
        n *= (size_t)g->axes[a].n_values;
    }
    return n;
}

void tr_grid_point(const tr_grid_spec *g, size_t index, const char **out)
{
    for (int a = g->n_axes - 1; a >= 0; a--) {
        size_t n = (size_t)g->axes[a].n_values;
        out[a] = g->axes[a].values[index % n];
        index /= n;
    }
}

int tr_grid_point_config(const tr_grid_spec *g, size_t index, const char *const *extra,
                         int n_extra, tr_config *out)
{
    int n = g->n_base_sets + g->n_axes + n_extra;
    const char **sets = calloc((size_t)n + 1, sizeof *sets);
    if (!sets)
        return tr_fail(TR_ERR_NOMEM, "out of memory");
    for (int i = 0; i < g->n_base_sets; i++)
        sets[i] = g->base_sets[i];
    tr_grid_point(g, index, sets + g->n_base_sets);
    for (int i = 0; i < n_extra; i++)
        sets[g->n_base_sets + g->n_axes + i] = extra[i];
    int rc = g->base_path ? tr_config_load(g->base_path, sets, n, out)
                          : tr_config_load_string("{}", 2, g->source, sets, n, out);
    free(sets);
    return rc;
}

void tr_grid_free(tr_grid_spec *g)
{
    free(g->source);
    free(g->base_path);
    for (int i = 0; i < g->n_base_sets; i++)
        free(g->base_sets[i]);
    free(g->base_sets);
    for (int a = 0; a < g->n_axes; a++) {
        free(g->axes[a].key);
        for (int v = 0; v < g->axes[a].n_values; v++)
            free(g->axes[a].values[v]);
        free(g->axes[a].values);
    }
    free(g->axes);
    memset(g, 0, sizeof *g);
}
