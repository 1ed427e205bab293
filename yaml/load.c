/* tr_config_load(): file or text -> tree -> which node sets which table key (file, then
 * --set overrides) -> struct fields -> defaults -> marks -> validation. Also where/free. */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "yaml/config_internal.h"

/* The node that sets one table key, and where its key was written. */
typedef struct {
    const ydoc *doc;
    const ynode *node;
    const ysource *src;
    int key_line, key_col; /* 0, 0 for --set */
} value_ref;

typedef struct {
    int present, line, col;
} section_ref;

typedef struct {
    const char *name; /* file path or "<string>" */
    ysource src;
    ydoc doc;
    value_ref *values;      /* [config_n_keys] */
    section_ref *sections;  /* [number of sections] */
    int n_sections;
    ydoc *set_docs;      /* [n_overrides] */
    ysource *set_srcs;   /* [n_overrides] */
    char **set_labels;      /* [n_overrides] "--set section.key" */
    int n_set;
} loader;

static int fail_loc(const char *loc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail_loc(const char *loc, const char *fmt, ...)
{
    char what[1900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return tr_fail(TR_ERR_CONFIG, "%s: %s", loc, what);
}

static void list_sections(char *buf, size_t cap)
{
    size_t o = 0;
    buf[0] = '\0';
    for (int i = 0; config_sections[i] && o < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%s", i ? ", " : "", config_sections[i]);
}

/* "unknown section 'x'; allowed sections: ... (did you mean 'y'?)" */
static int unknown_section(const char *loc, const char *name, size_t len)
{
    char q[160], allowed[300], hint[200] = "";
    list_sections(allowed, sizeof allowed);
    int n = 0;
    while (config_sections[n])
        n++;
    const char *near = config_closest(name, config_sections, n);
    if (near) {
        snprintf(hint, sizeof hint, " (did you mean '%s'?)", near);
    } else {
        for (int i = 0; i < config_n_keys; i++)
            if (!strcmp(config_keys[i].key, name)) {
                snprintf(hint, sizeof hint, " ('%s' is a key of section '%s')", name,
                         config_keys[i].section);
                break;
            }
    }
    return fail_loc(loc, "unknown section %s; allowed sections: %s%s", yquote(name, len, q, sizeof q),
                    allowed, hint);
}

/* "unknown key 'x' in section 's'; allowed keys: ... (did you mean 'y'?)" */
static int unknown_key(const char *loc, const char *section, const char *name, size_t len)
{
    const char *names[128] = {0};
    char q[160], allowed[1600], hint[200] = "";
    int n = 0;
    size_t o = 0;
    allowed[0] = '\0';
    for (int i = 0; i < config_n_keys && n < 128; i++) {
        if (strcmp(config_keys[i].section, section))
            continue;
        names[n++] = config_keys[i].key;
        if (o < sizeof allowed)
            o += (size_t)snprintf(allowed + o, sizeof allowed - o, "%s%s", n > 1 ? ", " : "",
                                  config_keys[i].key);
    }
    const char *near = config_closest(name, names, n);
    if (near) {
        snprintf(hint, sizeof hint, " (did you mean '%s'?)", near);
    } else {
        for (int i = 0; i < config_n_keys; i++)
            if (!strcmp(config_keys[i].key, name)) {
                snprintf(hint, sizeof hint, " ('%s' belongs in section '%s')", name,
                         config_keys[i].section);
                break;
            }
    }
    return fail_loc(loc, "unknown key %s in section '%s'; allowed keys: %s%s",
                    yquote(name, len, q, sizeof q), section, allowed, hint);
}

static const char *node_loc(const loader *L, const ynode *n, char *buf, size_t cap)
{
    return yloc(&L->src, n->line, n->col, buf, cap);
}

/* 1 when some key of the section is "prefix.something": prefix names a nested mapping
 * (data.tokenizer). */
static int has_subkeys(const char *section, const char *prefix)
{
    size_t n = strlen(prefix);
    for (int i = 0; i < config_n_keys; i++)
        if (!strcmp(config_keys[i].section, section) && !strncmp(config_keys[i].key, prefix, n) &&
            config_keys[i].key[n] == '.')
            return 1;
    return 0;
}

/* The keys of `map` (nested mappings give dotted keys: tokenizer: {type: x} = tokenizer.type). */
static int collect_keys(loader *L, const char *section, const char *prefix, const ynode *map)
{
    const ydoc *d = &L->doc;
    char loc[1200], q[160], full[256];
    for (int k = map->first; k >= 0; k = d->nodes[k].next) {
        const ynode *key = &d->nodes[k];
        int v = key->next;
        k = v; /* pairs: key, value */
        if (v < 0)
            return fail_loc(node_loc(L, key, loc, sizeof loc), "a key without a value");
        if (key->kind != YSCALAR || key->is_null)
            return fail_loc(node_loc(L, key, loc, sizeof loc),
                            "a key of section '%s' is %s; allowed: a plain key name", section,
                            ydescribe(key, q, sizeof q));
        snprintf(full, sizeof full, "%s%.*s", prefix, (int)(key->len < 128 ? key->len : 128), key->text);
        const config_key_spec *spec =
            memchr(key->text, '\0', key->len) ? NULL : config_find_key(section, full);
        if (!spec && d->nodes[v].kind == YMAPPING && !memchr(key->text, '\0', key->len) &&
            has_subkeys(section, full)) {
            strncat(full, ".", sizeof full - strlen(full) - 1);
            int rc = collect_keys(L, section, full, &d->nodes[v]);
            if (rc)
                return rc;
            continue;
        }
        if (!spec) /* a nested key by its dotted name; a top one as written (NUL bytes too) */
            return unknown_key(node_loc(L, key, loc, sizeof loc), section, prefix[0] ? full : key->text,
                               prefix[0] ? strlen(full) : key->len);
        value_ref *r = &L->values[spec - config_keys];
        if (r->node)
            return fail_loc(node_loc(L, key, loc, sizeof loc),
                            "duplicate key '%s' in section '%s' (first at line %d); each key may "
                            "appear once",
                            spec->key, section, r->key_line);
        *r = (value_ref){.doc = d, .node = &d->nodes[v], .src = &L->src, .key_line = key->line,
                         .key_col = key->col};
    }
    return TR_OK;
}

static int collect_section(loader *L, const char *section, const ynode *map)
{
    return collect_keys(L, section, "", map);
}

static int collect_file(loader *L)
{
    const ydoc *d = &L->doc;
    char loc[1200], q[160], allowed[300];
    list_sections(allowed, sizeof allowed);
    if (d->root < 0 || (d->nodes[d->root].kind == YSCALAR && d->nodes[d->root].is_null))
        return fail_loc(yloc(&L->src, 1, 1, loc, sizeof loc),
                        "empty document; expected a mapping with sections %s", allowed);
    const ynode *root = &d->nodes[d->root];
    if (root->kind != YMAPPING)
        return fail_loc(node_loc(L, root, loc, sizeof loc),
                        "the document is %s; expected a mapping with sections %s",
                        ydescribe(root, q, sizeof q), allowed);
    for (int k = root->first; k >= 0; k = d->nodes[k].next) {
        const ynode *key = &d->nodes[k];
        int v = key->next;
        k = v;
        if (v < 0)
            return fail_loc(node_loc(L, key, loc, sizeof loc), "a key without a value");
        if (key->kind != YSCALAR || key->is_null)
            return fail_loc(node_loc(L, key, loc, sizeof loc),
                            "a section name is %s; allowed sections: %s",
                            ydescribe(key, q, sizeof q), allowed);
        int s = memchr(key->text, '\0', key->len) ? -1 : config_section_index(key->text);
        if (s < 0)
            return unknown_section(node_loc(L, key, loc, sizeof loc), key->text, key->len);
        section_ref *sr = &L->sections[s];
        if (sr->present)
            return fail_loc(node_loc(L, key, loc, sizeof loc),
                            "duplicate section '%s' (first at line %d); each section may appear "
                            "once",
                            config_sections[s], sr->line);
        *sr = (section_ref){1, key->line, key->col};
        const ynode *val = &d->nodes[v];
        if (val->kind == YSCALAR && val->is_null)
            continue; /* an empty section: all defaults */
        if (val->kind != YMAPPING)
            return fail_loc(node_loc(L, val, loc, sizeof loc),
                            "section '%s' is %s; expected a mapping of keys (`key: value` lines)",
                            config_sections[s], ydescribe(val, q, sizeof q));
        int rc = collect_section(L, config_sections[s], val);
        if (rc)
            return rc;
    }
    return TR_OK;
}

/* One "--set section.key=value": the value is a YAML document of its own. */
static int collect_override(loader *L, int i, const char *arg)
{
    char q[160], label[200];
    const char *eq = strchr(arg, '=');
    const char *dot = memchr(arg, '.', eq ? (size_t)(eq - arg) : strlen(arg));
    if (!eq || !dot) {
        size_t klen = eq ? (size_t)(eq - arg) : strlen(arg);
        char key[128];
        snprintf(key, sizeof key, "%.*s", (int)(klen < 100 ? klen : 100), arg);
        for (int k = 0; !dot && k < config_n_keys; k++)
            if (!strcmp(config_keys[k].key, key))
                return tr_fail(TR_ERR_CONFIG,
                               "--set %s: expected SECTION.KEY=VALUE; did you mean --set %s.%s=...?",
                               yquote(arg, strlen(arg), q, sizeof q), config_keys[k].section,
                               key);
        return tr_fail(TR_ERR_CONFIG, "--set %s: expected SECTION.KEY=VALUE (e.g. training.lr=3e-4)",
                       yquote(arg, strlen(arg), q, sizeof q));
    }
    size_t slen = (size_t)(dot - arg), klen = (size_t)(eq - dot - 1);
    snprintf(label, sizeof label, "--set %.*s", (int)((size_t)(eq - arg) < 120 ? eq - arg : 120),
             arg);
    char section[64], key[128];
    if (slen >= sizeof section || klen >= sizeof key) {
        return tr_fail(TR_ERR_CONFIG, "%s: key too long; expected SECTION.KEY=VALUE", label);
    }
    memcpy(section, arg, slen);
    section[slen] = '\0';
    memcpy(key, dot + 1, klen);
    key[klen] = '\0';
    if (config_section_index(section) < 0)
        return unknown_section(label, section, slen);
    const config_key_spec *spec = config_find_key(section, key);
    if (!spec)
        return unknown_key(label, section, key, klen);
    L->set_labels[i] = strdup(label);
    if (!L->set_labels[i])
        return tr_fail(TR_ERR_NOMEM, "out of memory");
    L->set_srcs[i] = (ysource){.name = L->name, .set_label = L->set_labels[i]};
    ydoc *d = &L->set_docs[i];
    L->n_set = i + 1;
    int rc = ydoc_parse(eq + 1, strlen(eq + 1), &L->set_srcs[i], d);
    if (rc)
        return rc;
    if (d->root < 0)
        return tr_fail(TR_ERR_CONFIG, "%s: found no value after '='; expected a value (YAML)",
                       label);
    L->values[spec - config_keys] = (value_ref){.doc = d, .node = &d->nodes[d->root],
                                                    .src = &L->set_srcs[i]};
    return TR_OK;
}

static const char *type_words(const config_key_spec *s, char *buf, size_t cap)
{
    switch (s->type) {
    case KEY_INT:
    case KEY_DOUBLE:
        return yrange_text(s, buf, cap);
    case KEY_UINT64:
        return "a non-negative integer";
    case KEY_BOOL:
        return "true or false";
    case KEY_INT_LIST:
        return "a list of integers";
    case KEY_STRING_LIST:
        return "a list of strings";
    case KEY_STRING:
        break;
    }
    return "a string";
}

/* Values given -> fields; then required keys, defaults and derived defaults. */
static int resolve(loader *L, tr_config *cfg)
{
    for (int i = 0; i < config_n_keys; i++) {
        const value_ref *r = &L->values[i];
        if (!r->node)
            continue;
        int rc = config_set_field(cfg, &config_keys[i], r->doc, r->node, r->src);
        if (rc)
            return rc;
    }
    for (int pass = 0; pass < 2; pass++) { /* plain defaults first, then "=other.key" */
        for (int i = 0; i < config_n_keys; i++) {
            const config_key_spec *s = &config_keys[i];
            if (L->values[i].node)
                continue;
            char loc[1200], words[160];
            if (s->required) {
                int si = config_section_index(s->section);
                const section_ref *sr = &L->sections[si];
                yloc(&L->src, sr->present ? sr->line : 1, sr->present ? sr->col : 1, loc,
                        sizeof loc);
                return fail_loc(loc, "missing required key %s.%s; add it to section '%s' (%s)",
                                s->section, s->key, s->section, type_words(s, words, sizeof words));
            }
            if (!s->def || (s->def[0] == '=') != pass)
                continue;
            if (pass == 1) {
                int from = config_key_index(s->def + 1);
                if (from < 0 || config_keys[from].type != s->type || s->type != KEY_INT)
                    return tr_fail(TR_ERR_INTERNAL, "config key %s.%s: bad default '%s'",
                                   s->section, s->key, s->def);
                *(int *)((char *)cfg + s->offset) =
                    *(const int *)((const char *)cfg + config_keys[from].offset);
                continue;
            }
            ynode node = {.kind = YSCALAR, .line = 0, .col = 0, .text = (char *)s->def,
                             .len = strlen(s->def), .first = -1, .next = -1};
            ysource src = {.name = "<default>"};
            ydoc none = {.root = -1};
            int rc = config_set_field(cfg, s, &none, &node, &src);
            if (rc)
                return tr_fail_context(TR_ERR_INTERNAL, "default of %s.%s", s->section, s->key);
        }
    }
    return TR_OK;
}

static int add_mark(tr_config *cfg, const char *key, int line, int col)
{
    char *copy = strdup(key);
    if (!copy)
        return tr_fail(TR_ERR_NOMEM, "out of memory");
    cfg->marks[cfg->n_marks++] = (tr_config_mark){copy, line, col};
    return TR_OK;
}

static int record_marks(loader *L, tr_config *cfg)
{
    cfg->marks = calloc((size_t)(config_n_keys + L->n_sections), sizeof *cfg->marks);
    if (!cfg->marks)
        return tr_fail(TR_ERR_NOMEM, "out of memory");
    int rc = TR_OK;
    for (int s = 0; s < L->n_sections && !rc; s++)
        if (L->sections[s].present)
            rc = add_mark(cfg, config_sections[s], L->sections[s].line, L->sections[s].col);
    for (int i = 0; i < config_n_keys && !rc; i++) {
        const value_ref *r = &L->values[i];
        if (!r->node)
            continue;
        char dotted[200];
        snprintf(dotted, sizeof dotted, "%s.%s", config_keys[i].section, config_keys[i].key);
        rc = add_mark(cfg, dotted, r->key_line, r->key_col);
    }
    return rc;
}

static void loader_free(loader *L)
{
    ydoc_free(&L->doc);
    for (int i = 0; i < L->n_set; i++) {
        ydoc_free(&L->set_docs[i]);
        free(L->set_labels[i]);
    }
    free(L->set_docs);
    free(L->set_srcs);
    free(L->set_labels);
    free(L->values);
    free(L->sections);
}

int tr_config_load_string(const char *text, size_t len, const char *name,
                          const char *const *overrides, int n_overrides, tr_config *out)
{
    memset(out, 0, sizeof *out);
    loader L = {.name = name ? name : "<string>"};
    L.src.name = L.name;
    L.doc.root = -1;
    while (config_sections[L.n_sections])
        L.n_sections++;
    if (n_overrides < 0 || (n_overrides > 0 && !overrides))
        return tr_fail(TR_ERR_INVALID, "tr_config_load: bad override list");
    size_t n_set = (size_t)n_overrides + 1;
    L.values = calloc((size_t)config_n_keys, sizeof *L.values);
    L.sections = calloc((size_t)L.n_sections, sizeof *L.sections);
    L.set_docs = calloc(n_set, sizeof *L.set_docs);
    L.set_srcs = calloc(n_set, sizeof *L.set_srcs);
    L.set_labels = calloc(n_set, sizeof *L.set_labels);
    int rc = TR_OK;
    if (!L.values || !L.sections || !L.set_docs || !L.set_srcs || !L.set_labels)
        rc = tr_fail(TR_ERR_NOMEM, "out of memory loading the config");
    if (!rc && !text)
        rc = tr_fail(TR_ERR_INVALID, "tr_config_load_string: no text");
    if (!rc)
        rc = ydoc_parse(text, len, &L.src, &L.doc);
    if (!rc)
        rc = collect_file(&L);
    for (int i = 0; i < n_overrides && !rc; i++)
        rc = overrides[i] ? collect_override(&L, i, overrides[i])
                          : tr_fail(TR_ERR_INVALID, "override %d is NULL", i);
    if (!rc)
        rc = resolve(&L, out);
    if (!rc) {
        out->source = strdup(L.name);
        rc = out->source ? record_marks(&L, out) : tr_fail(TR_ERR_NOMEM, "out of memory");
    }
    if (!rc)
        rc = config_validate(out);
    if (!rc) { /* one spelling of the ZeRO stage from here on (config.yaml reloads the same) */
        out->parallel.zero_stage = tr_zero_stage(&out->parallel);
        out->parallel.use_distributed_optimizer = out->parallel.zero_stage >= 1;
    }
    loader_free(&L);
    if (rc)
        tr_config_free(out);
    return rc;
}

int yaml_read_file(const char *path, char **text_out, size_t *len_out)
{
    *text_out = NULL;
    *len_out = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return tr_fail(TR_ERR_CONFIG, "%s: cannot open (%s); expected a readable YAML file", path,
                       strerror(errno));
    size_t cap = 1 << 16, len = 0;
    char *text = malloc(cap);
    int rc = text ? TR_OK : tr_fail(TR_ERR_NOMEM, "out of memory reading %s", path);
    while (!rc) {
        if (len == cap) {
            if (cap > YAML_MAX_BYTES) {
                rc = tr_fail(TR_ERR_CONFIG, "%s: more than %u bytes; a config may be at most %u "
                             "bytes", path, YAML_MAX_BYTES, YAML_MAX_BYTES);
                break;
            }
            char *p = realloc(text, cap * 2);
            if (!p) {
                rc = tr_fail(TR_ERR_NOMEM, "out of memory reading %s", path);
                break;
            }
            text = p;
            cap *= 2;
        }
        size_t got = fread(text + len, 1, cap - len, f);
        len += got;
        if (got == 0) {
            if (ferror(f))
                rc = tr_fail(TR_ERR_CONFIG, "%s: cannot read (%s); expected a readable YAML file",
                             path, strerror(errno));
            break;
        }
    }
    fclose(f);
    if (rc) {
        free(text);
        return rc;
    }
    *text_out = text;
    *len_out = len;
    return TR_OK;
}

int tr_config_load(const char *path, const char *const *overrides, int n_overrides,
                   tr_config *out)
{
    memset(out, 0, sizeof *out);
    if (!path)
        return tr_fail(TR_ERR_INVALID, "tr_config_load: no path");
    char *text;
    size_t len;
    int rc = yaml_read_file(path, &text, &len);
    if (!rc)
        rc = tr_config_load_string(text, len, path, overrides, n_overrides, out);
    free(text);
    return rc;
}

const tr_config_mark *config_find_mark(const tr_config *c, const char *dotted_key)
{
    if (!c || !dotted_key)
        return NULL;
    for (int i = 0; i < c->n_marks; i++)
        if (c->marks[i].key && !strcmp(c->marks[i].key, dotted_key))
            return &c->marks[i];
    return NULL;
}

const char *tr_config_where(const tr_config *c, const char *dotted_key)
{
    static _Thread_local char buf[1200];
    const char *source = c && c->source ? c->source : "<config>";
    const tr_config_mark *m = config_find_mark(c, dotted_key);
    if (!m)
        snprintf(buf, sizeof buf, "%s", source);
    else if (m->line == 0)
        snprintf(buf, sizeof buf, "--set %s", m->key);
    else
        snprintf(buf, sizeof buf, "%s:%d:%d", source, m->line, m->col);
    return buf;
}

void tr_config_free(tr_config *c)
{
    if (!c)
        return;
    for (int i = 0; i < config_n_keys; i++)
        if (config_keys[i].type == KEY_STRING) {
            free(*(char **)((char *)c + config_keys[i].offset));
        } else if (config_keys[i].type == KEY_STRING_LIST) {
            char **list = *(char ***)((char *)c + config_keys[i].offset);
            for (int k = 0; list && k < *(int *)((char *)c + config_keys[i].count_offset); k++)
                free(list[k]);
            free(list);
        }
    for (int i = 0; i < c->n_marks; i++)
        free(c->marks[i].key);
    free(c->marks);
    free(c->source);
    memset(c, 0, sizeof *c);
}
