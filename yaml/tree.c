/* YAML text -> a small tree of nodes (libyaml's event API), with hard limits on size, depth,
 * node count and anchors, so that no input can make loading slow, deep or large.
 * Aliases are allowed for scalars only (they share the anchor's text), which rules out
 * "billion laughs" expansion. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "core/core.h"
#include "yaml/config_internal.h"

const char *yloc(const ysource *src, int line, int col, char *buf, size_t cap)
{
    if (src->set_label)
        snprintf(buf, cap, "%s", src->set_label);
    else
        snprintf(buf, cap, "%s:%d:%d", src->name, line, col);
    return buf;
}

void ydoc_free(ydoc *doc)
{
    for (int i = 0; i < doc->n; i++)
        if (doc->nodes[i].owns_text)
            free(doc->nodes[i].text);
    free(doc->nodes);
    memset(doc, 0, sizeof *doc);
    doc->root = -1;
}

typedef struct {
    char *name;
    int node;
} anchor;

typedef struct {
    const ysource *src;
    ydoc *doc;
    int stack[YAML_MAX_DEPTH + 1]; /* open collections */
    int last[YAML_MAX_DEPTH + 1];  /* their last child, -1 if none */
    int depth;
    anchor anchors[YAML_MAX_ANCHORS];
    int n_anchors;
    int n_documents;
} builder;

static int fail_at(const builder *b, int line, int col, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail_at(const builder *b, int line, int col, const char *fmt, ...)
{
    char loc[1200], what[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return tr_fail(TR_ERR_CONFIG, "%s: %s", yloc(b->src, line, col, loc, sizeof loc), what);
}

/* Appends a node under the open collection (or as the root); returns its index or -1. */
static int add_node(builder *b, ykind kind, const yaml_mark_t *mark)
{
    ydoc *d = b->doc;
    int line = (int)mark->line + 1, col = (int)mark->column + 1;
    if (d->n >= YAML_MAX_NODES) {
        fail_at(b, line, col, "more than %d YAML nodes; a config has a few hundred",
                YAML_MAX_NODES);
        return -1;
    }
    if (d->n == d->cap) {
        int cap = d->cap ? 2 * d->cap : 64;
        ynode *p = realloc(d->nodes, (size_t)cap * sizeof *p);
        if (!p) {
            tr_fail(TR_ERR_NOMEM, "out of memory reading YAML");
            return -1;
        }
        d->nodes = p;
        d->cap = cap;
    }
    int i = d->n++;
    ynode *nd = &d->nodes[i];
    memset(nd, 0, sizeof *nd);
    nd->kind = kind;
    nd->line = line;
    nd->col = col;
    nd->first = nd->next = -1;
    if (b->depth == 0) {
        d->root = i;
    } else {
        int parent = b->stack[b->depth - 1], prev = b->last[b->depth - 1];
        if (prev < 0)
            d->nodes[parent].first = i;
        else
            d->nodes[prev].next = i;
        b->last[b->depth - 1] = i;
        d->nodes[parent].n_children++;
    }
    return i;
}

static int open_collection(builder *b, ykind kind, const yaml_mark_t *mark)
{
    if (b->depth >= YAML_MAX_DEPTH) {
        return fail_at(b, (int)mark->line + 1, (int)mark->column + 1,
                       "collections nested more than %d deep; a config nests 3 deep",
                       YAML_MAX_DEPTH);
    }
    int i = add_node(b, kind, mark);
    if (i < 0)
        return TR_ERR_CONFIG;
    b->stack[b->depth] = i;
    b->last[b->depth] = -1;
    b->depth++;
    return TR_OK;
}

static int remember_anchor(builder *b, const yaml_char_t *name, int node, const yaml_mark_t *m)
{
    if (!name)
        return TR_OK;
    if (b->n_anchors >= YAML_MAX_ANCHORS)
        return fail_at(b, (int)m->line + 1, (int)m->column + 1,
                       "more than %d anchors; a config needs a handful",
                       YAML_MAX_ANCHORS);
    char *copy = strdup((const char *)name);
    if (!copy)
        return tr_fail(TR_ERR_NOMEM, "out of memory reading YAML");
    b->anchors[b->n_anchors].name = copy;
    b->anchors[b->n_anchors].node = node;
    b->n_anchors++;
    return TR_OK;
}

static int is_null_text(const char *s, size_t len)
{
    return len == 0 || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") ||
           !strcmp(s, "NULL");
}

static int on_scalar(builder *b, const yaml_event_t *ev)
{
    int i = add_node(b, YSCALAR, &ev->start_mark);
    if (i < 0)
        return TR_ERR_CONFIG;
    ynode *nd = &b->doc->nodes[i];
    size_t len = ev->data.scalar.length;
    nd->text = malloc(len + 1);
    if (!nd->text)
        return tr_fail(TR_ERR_NOMEM, "out of memory reading YAML");
    memcpy(nd->text, ev->data.scalar.value, len);
    nd->text[len] = '\0';
    nd->len = len;
    nd->owns_text = 1;
    nd->is_null = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE && is_null_text(nd->text, len);
    return remember_anchor(b, ev->data.scalar.anchor, i, &ev->start_mark);
}

static int on_alias(builder *b, const yaml_event_t *ev)
{
    const char *name = (const char *)ev->data.alias.anchor;
    int line = (int)ev->start_mark.line + 1, col = (int)ev->start_mark.column + 1;
    int target = -1;
    for (int k = b->n_anchors - 1; k >= 0 && target < 0; k--)
        if (!strcmp(b->anchors[k].name, name))
            target = b->anchors[k].node;
    if (target < 0)
        return fail_at(b, line, col, "alias *%.60s names no anchor defined before it; define &%.60s first",
                       name, name);
    if (b->doc->nodes[target].kind != YSCALAR)
        return fail_at(b, line, col,
                       "alias *%.60s refers to a %s; aliases are allowed only for scalar values",
                       name,
                       b->doc->nodes[target].kind == YMAPPING ? "mapping" : "list");
    int i = add_node(b, YSCALAR, &ev->start_mark);
    if (i < 0)
        return TR_ERR_CONFIG;
    const ynode *t = &b->doc->nodes[target];
    ynode *nd = &b->doc->nodes[i];
    nd->text = t->text;
    nd->len = t->len;
    nd->is_null = t->is_null;
    nd->owns_text = 0;
    return TR_OK;
}

/* libyaml's own error -> message with a position and a hint. */
static int parser_error(builder *b, const yaml_parser_t *p, const char *text, size_t len)
{
    if (p->error == YAML_MEMORY_ERROR)
        return tr_fail(TR_ERR_NOMEM, "out of memory reading YAML");
    if (p->error == YAML_READER_ERROR) {
        int line = 1, col = 1;
        for (size_t k = 0; k < p->problem_offset && k < len; k++) {
            if (text[k] == '\n') {
                line++;
                col = 1;
            } else {
                col++;
            }
        }
        char loc[1200];
        return tr_fail(TR_ERR_CONFIG,
                       "%s: %s (value 0x%X); a config must be UTF-8 text without control "
                       "characters",
                       yloc(b->src, line, col, loc, sizeof loc),
                       p->problem ? p->problem : "unreadable input", (unsigned)p->problem_value);
    }
    int line = (int)p->problem_mark.line + 1, col = (int)p->problem_mark.column + 1;
    size_t at = p->problem_mark.index;
    const char *hint = "fix the YAML syntax (indent with spaces, `key: value`, lists as [a, b])";
    if (at < len && text[at] == '\t')
        hint = "tabs cannot indent YAML; use spaces";
    char loc[1200];
    return tr_fail(TR_ERR_CONFIG, "%s: YAML syntax error: %s%s%s%s; %s",
                   yloc(b->src, line, col, loc, sizeof loc),
                   p->problem ? p->problem : "unreadable YAML", p->context ? " (" : "",
                   p->context ? p->context : "", p->context ? ")" : "", hint);
}

static int on_event(builder *b, const yaml_event_t *ev, int *done)
{
    switch (ev->type) {
    case YAML_DOCUMENT_START_EVENT:
        if (++b->n_documents > 1)
            return fail_at(b, (int)ev->start_mark.line + 1, (int)ev->start_mark.column + 1,
                           "a second YAML document; a config is exactly one document");
        return TR_OK;
    case YAML_SCALAR_EVENT:
        return on_scalar(b, ev);
    case YAML_ALIAS_EVENT:
        return on_alias(b, ev);
    case YAML_SEQUENCE_START_EVENT:
    case YAML_MAPPING_START_EVENT: {
        int mapping = ev->type == YAML_MAPPING_START_EVENT;
        int rc = open_collection(b, mapping ? YMAPPING : YSEQUENCE, &ev->start_mark);
        if (rc)
            return rc;
        return remember_anchor(b,
                               mapping ? ev->data.mapping_start.anchor
                                       : ev->data.sequence_start.anchor,
                               b->stack[b->depth - 1], &ev->start_mark);
    }
    case YAML_SEQUENCE_END_EVENT:
    case YAML_MAPPING_END_EVENT:
        if (b->depth > 0)
            b->depth--;
        return TR_OK;
    case YAML_STREAM_END_EVENT:
        *done = 1;
        return TR_OK;
    default: /* stream start, document end, no event */
        return TR_OK;
    }
}

int ydoc_parse(const char *text, size_t len, const ysource *src, ydoc *doc)
{
    memset(doc, 0, sizeof *doc);
    doc->root = -1;
    char loc[1200];
    if (len > YAML_MAX_BYTES)
        return tr_fail(TR_ERR_CONFIG, "%s: %zu bytes of YAML; a config may be at most %u bytes",
                       yloc(src, 1, 1, loc, sizeof loc), len, YAML_MAX_BYTES);
    builder *b = calloc(1, sizeof *b);
    if (!b)
        return tr_fail(TR_ERR_NOMEM, "out of memory reading YAML");
    b->src = src;
    b->doc = doc;
    yaml_parser_t p;
    if (!yaml_parser_initialize(&p)) {
        free(b);
        return tr_fail(TR_ERR_NOMEM, "out of memory starting the YAML parser");
    }
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
    int rc = TR_OK, done = 0;
    while (!rc && !done) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&p, &ev)) {
            rc = parser_error(b, &p, text, len);
            break;
        }
        rc = on_event(b, &ev, &done);
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&p);
    for (int k = 0; k < b->n_anchors; k++)
        free(b->anchors[k].name);
    free(b);
    return rc;
}
