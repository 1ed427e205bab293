/* eval/regex_parse.c's tree of a pattern, for eval/regex_compile.c (internal to eval/). */
#ifndef TR_EVAL_REGEX_TREE_H
#define TR_EVAL_REGEX_TREE_H

#include "eval/regex_internal.h"

enum { INF = -1 };

typedef enum { N_EMPTY, N_CHAR, N_ANY, N_CLASS, N_CAT, N_ALT, N_GROUP, N_REPEAT, N_ASSERT,
               N_LOOK, N_BACKREF } nkind;
typedef struct {
    nkind kind;
    uint32_t c;          /* N_CHAR: the code point; N_CLASS: its index; N_ASSERT: A_*;
                          * N_LOOK: L_* bits; N_BACKREF: the group */
    int child, next;     /* first child (N_CAT, N_ALT, N_GROUP, N_REPEAT, N_LOOK) and next
                          * sibling */
    int group;           /* N_GROUP: capture index (>= 1) or 0 */
    int min, max, lazy;  /* N_REPEAT (max INF: unbounded) */
    int width;           /* N_LOOK with L_BEHIND: its body's width */
    int flags;           /* F_* in force where it stands */
} node;

typedef struct {
    const uint32_t *p;
    int n, i, depth;
    int flags;           /* F_* in force at ps->i */
    int at_start;        /* global flags may still come (nothing but comments before) */
    int behind_groups;   /* inside a lookbehind: the groups before it (a reference to a later
                          * one is refused, as Python's); else -1 */
    node *nodes;
    int n_nodes, cap_nodes, cap_classes, cap_ranges, cap_prog;
    int (*names)[3];     /* the group names seen: {start, length in p, group} */
    int n_names, cap_names;
    int *group_node;     /* each group's N_GROUP node, -1 while it is open */
    int cap_group_node;
    tr_regex *re;
} parser;

static inline int regex_peek(const parser *ps, int k)
{
    return ps->i + k < ps->n ? (int)ps->p[ps->i + k] : -1;
}

/* The pattern ps->p[0, n) as a tree: *root (an N_ALT node). */
int regex_parse(parser *ps, int *root);
/* TR_ERR_INVALID "regex 'PATTERN': why at position AT". */
int regex_bad(const parser *ps, int at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int regex_grow(void **p, int *cap, int need, size_t size);
/* A new node (index in *out), with the flags in force. */
int regex_node(parser *ps, nkind kind, uint32_t c, int *out);
/* What an escape (ps->i just past the backslash) stands for: a literal code point (*lit),
 * a class escape (*cats) or, outside a class, an assertion (*assert_kind) or a backreference
 * (*group > 0). */
int regex_escape(parser *ps, int in_class, uint32_t *lit, int *cats, int *assert_kind,
                 int *group);
/* A class [...] (ps->i just past "["): a N_CLASS node in *out. */
int regex_class(parser *ps, int *out);

#endif
