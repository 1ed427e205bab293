/* Python re patterns into programs (eval/regex_internal.h): a parser into a tree, then a
 * compiler that unrolls each repetition to its minimum, then a loop or a chain of optional
 * copies, each iteration past the minimum guarded by its loop's mark (no iteration after an
 * empty one, as Python's). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval/regex_internal.h"
#include "eval/text.h"

enum { MAX_INST = 1 << 16, MAX_DEPTH = 200, INF = -1 };

typedef enum { N_EMPTY, N_CHAR, N_ANY, N_CLASS, N_CAT, N_ALT, N_GROUP, N_REPEAT, N_ASSERT } nkind;
typedef struct {
    nkind kind;
    uint32_t c;          /* N_CHAR: the code point; N_CLASS: its index; N_ASSERT: A_* */
    int child, next;     /* first child (N_CAT, N_ALT, N_GROUP, N_REPEAT) and next sibling */
    int group;           /* N_GROUP: capture index (>= 1) or 0 */
    int min, max, lazy;  /* N_REPEAT (max INF: unbounded) */
} node;

typedef struct {
    const uint32_t *p;
    int n, i, depth;
    node *nodes;
    int n_nodes, cap_nodes, cap_classes, cap_ranges, cap_prog;
    int (*names)[2];     /* the group names seen: {start, length} in p */
    int n_names, cap_names;
    tr_regex *re;
} parser;

static int bad(const parser *ps, int at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int bad(const parser *ps, int at, const char *fmt, ...)
{
    char why[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return tr_fail(TR_ERR_INVALID, "regex '%.300s': %s at position %d", ps->re->pattern, why, at);
}

static int grow(void **p, int *cap, int need, size_t size)
{
    if (need <= *cap)
        return TR_OK;
    int cap2 = *cap ? 2 * *cap : 16;
    while (cap2 < need)
        cap2 *= 2;
    void *q = realloc(*p, (size_t)cap2 * size);
    if (!q)
        return tr_fail(TR_ERR_NOMEM, "out of memory for a regex");
    *p = q;
    *cap = cap2;
    return TR_OK;
}

/* A new node (index in *out). */
static int new_node(parser *ps, nkind kind, uint32_t c, int *out)
{
    int rc = grow((void **)&ps->nodes, &ps->cap_nodes, ps->n_nodes + 1, sizeof(node));
    if (rc)
        return rc;
    ps->nodes[ps->n_nodes] = (node){.kind = kind, .c = c, .child = -1, .next = -1};
    *out = ps->n_nodes++;
    return TR_OK;
}

static int peek(const parser *ps, int k) { return ps->i + k < ps->n ? (int)ps->p[ps->i + k] : -1; }

static int hex_value(int c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static int is_octal(int c) { return c >= '0' && c <= '7'; }

/* What an escape (ps->i just past the backslash) stands for: a literal code point (*lit),
 * a class escape (*cats) or, outside a class, an assertion (*assert_kind). */
static int parse_escape(parser *ps, int in_class, uint32_t *lit, int *cats, int *assert_kind)
{
    int at = ps->i - 1, c = peek(ps, 0);
    *cats = 0;
    *assert_kind = -1;
    if (c < 0)
        return bad(ps, at, "a pattern that ends in a backslash");
    ps->i++;
    static const char ctl[] = "a\af\fn\nr\rt\tv\v";
    for (int k = 0; ctl[k]; k += 2)
        if (c == ctl[k]) {
            *lit = (uint32_t)ctl[k + 1];
            return TR_OK;
        }
    static const char cat[] = "dDwWsS";
    for (int k = 0; cat[k]; k++)
        if (c == cat[k]) {
            *cats = 1 << k;
            return TR_OK;
        }
    if (c == 'b' && in_class) {
        *lit = 8;
        return TR_OK;
    }
    if (!in_class && (c == 'b' || c == 'B' || c == 'A' || c == 'Z')) {
        *assert_kind = c == 'b' ? A_BOUND : c == 'B' ? A_NBOUND : c == 'A' ? A_START : A_END;
        return TR_OK;
    }
    if (c == 'x' || c == 'u' || c == 'U') {
        int digits = c == 'x' ? 2 : c == 'u' ? 4 : 8;
        uint32_t v = 0;
        for (int k = 0; k < digits; k++) {
            int h = hex_value(peek(ps, 0));
            if (h < 0)
                return bad(ps, at, "incomplete escape \\%c", c);
            v = v << 4 | (uint32_t)h;
            ps->i++;
        }
        if (v > 0x10FFFF)
            return bad(ps, at, "bad escape \\%c (past U+10FFFF)", c);
        *lit = v;
        return TR_OK;
    }
    if (c == 'N')
        return bad(ps, at, "\\N{...} (a named character) is not supported");
    if (c == '0' || (is_octal(c) && is_octal(peek(ps, 0)) && is_octal(peek(ps, 1))) ||
        (in_class && is_octal(c))) {
        uint32_t v = (uint32_t)(c - '0');
        for (int k = 0; k < 2 && is_octal(peek(ps, 0)); k++)
            v = v * 8 + (uint32_t)(peek(ps, 0) - '0'), ps->i++;
        if (v > 0377)
            return bad(ps, at, "octal escape value \\%o outside of range 0-0o377", v);
        *lit = v;
        return TR_OK;
    }
    if (c >= '0' && c <= '9')
        return bad(ps, at, in_class ? "bad escape \\%c" : "backreferences (\\%c) are not "
                   "supported", c);
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
        return bad(ps, at, "bad escape \\%c", c);
    *lit = (uint32_t)c;
    return TR_OK;
}

static int add_range(parser *ps, uint32_t lo, uint32_t hi)
{
    tr_regex *re = ps->re;
    int rc = grow((void **)&re->ranges, &ps->cap_ranges, re->n_ranges + 1, sizeof *re->ranges);
    if (!rc) {
        re->ranges[re->n_ranges][0] = lo;
        re->ranges[re->n_ranges][1] = hi;
        re->n_ranges++;
    }
    return rc;
}

/* A class [...] (ps->i just past "["): a N_CLASS node in *out. */
static int parse_class(parser *ps, int *out)
{
    tr_regex *re = ps->re;
    int at = ps->i - 1, rc = grow((void **)&re->classes, &ps->cap_classes, re->n_classes + 1,
                                  sizeof *re->classes);
    if (rc)
        return rc;
    cls k = {.first = re->n_ranges};
    if (peek(ps, 0) == '^') {
        k.negate = 1;
        ps->i++;
    }
    int items = 0;
    for (;;) {
        int c = peek(ps, 0);
        if (c < 0)
            return bad(ps, at, "unterminated character set");
        ps->i++;
        if (c == ']' && items)
            break;
        uint32_t lo = (uint32_t)c;
        int cats = 0, assert_kind;
        if (c == '\\' && (rc = parse_escape(ps, 1, &lo, &cats, &assert_kind)))
            return rc;
        items++;
        if (peek(ps, 0) == '-' && peek(ps, 1) != ']' && peek(ps, 1) >= 0) {
            ps->i++;
            int d = peek(ps, 0), cats2 = 0;
            uint32_t hi = (uint32_t)d;
            ps->i++;
            if (d == '\\' && (rc = parse_escape(ps, 1, &hi, &cats2, &assert_kind)))
                return rc;
            if (cats || cats2)
                return bad(ps, at, "bad character range (a class escape as an end)");
            if (hi < lo)
                return bad(ps, at, "bad character range U+%04X-U+%04X", lo, hi);
            if ((rc = add_range(ps, lo, hi)))
                return rc;
        } else if (cats)
            k.cats |= cats;
        else if ((rc = add_range(ps, lo, lo)))
            return rc;
    }
    k.count = re->n_ranges - k.first;
    re->classes[re->n_classes] = k;
    return new_node(ps, N_CLASS, (uint32_t)re->n_classes++, out);
}

static int parse_alt(parser *ps, int *out);

/* "{m}", "{m,}", "{,n}", "{m,n}" at ps->i ("{"): 1 with *min, *max and ps->i past it, or 0
 * (a literal "{"). */
static int parse_braces(parser *ps, int *min, int *max, int *err)
{
    int i = ps->i + 1, lo = -1, hi = -1, comma = 0;
    *err = 0;
    if (i < ps->n && ps->p[i] == '}')
        return 0;
    for (; i < ps->n && ps->p[i] >= '0' && ps->p[i] <= '9'; i++)
        lo = lo > 100000000 ? lo : (lo < 0 ? 0 : lo) * 10 + (int)(ps->p[i] - '0');
    if (i < ps->n && ps->p[i] == ',') {
        comma = 1;
        for (i++; i < ps->n && ps->p[i] >= '0' && ps->p[i] <= '9'; i++)
            hi = hi > 100000000 ? hi : (hi < 0 ? 0 : hi) * 10 + (int)(ps->p[i] - '0');
    } else
        hi = lo;
    if (i >= ps->n || ps->p[i] != '}')
        return 0;
    *min = lo < 0 ? 0 : lo;
    *max = comma && hi < 0 ? INF : hi;
    if (*max != INF && *max < *min)
        *err = bad(ps, ps->i, "min repeat greater than max repeat");
    else if (*min > 65535 || *max > 65535)
        *err = bad(ps, ps->i, "a repeat count above 65535");
    ps->i = i + 1;
    return 1;
}

/* Group name p[start, start + len): an identifier not used before (Python's rules, with
 * \w's letters), remembered. */
static int check_name(parser *ps, int start, int len)
{
    for (int k = 0; k < len; k++) {
        uint32_t c = ps->p[start + k];
        if (!tr_text_isword(c) || (k == 0 && c < 128 && c >= '0' && c <= '9'))
            return bad(ps, start, "bad character in group name");
    }
    for (int k = 0; k < ps->n_names; k++)
        if (ps->names[k][1] == len &&
            !memcmp(ps->p + ps->names[k][0], ps->p + start, (size_t)len * sizeof *ps->p))
            return bad(ps, start, "redefinition of group name");
    int rc = grow((void **)&ps->names, &ps->cap_names, ps->n_names + 1, sizeof *ps->names);
    if (!rc) {
        ps->names[ps->n_names][0] = start;
        ps->names[ps->n_names++][1] = len;
    }
    return rc;
}

/* One atom and its quantifiers; *out -1 at the end of a sequence. */
static int parse_piece(parser *ps, int *out)
{
    int c = peek(ps, 0), at = ps->i, rc = TR_OK, atom = -1, is_assert = 0;
    *out = -1;
    if (c < 0 || c == '|' || c == ')')
        return TR_OK;
    ps->i++;
    if (c == '(') {
        int group = 0;
        if (peek(ps, 0) == '?') {
            int d = peek(ps, 1);
            if (d == ':') {
                ps->i += 2;
            } else if (d == 'P' && peek(ps, 2) == '<') {
                ps->i += 3;
                int start = ps->i;
                while (peek(ps, 0) >= 0 && peek(ps, 0) != '>')
                    ps->i++;
                if (peek(ps, 0) != '>' || ps->i == start)
                    return bad(ps, at, "missing group name");
                if ((rc = check_name(ps, start, ps->i - start)))
                    return rc;
                ps->i++;
                group = ++ps->re->groups;
            } else if (d == '#') {
                while (peek(ps, 0) >= 0 && peek(ps, 0) != ')')
                    ps->i++;
                if (peek(ps, 0) < 0)
                    return bad(ps, at, "missing ), unterminated comment");
                ps->i++;
                return new_node(ps, N_EMPTY, 0, out);
            } else if (d == '=' || d == '!' ||
                       (d == '<' && (peek(ps, 2) == '=' || peek(ps, 2) == '!')))
                return bad(ps, at, "lookarounds ((?=, (?!, (?<=, (?<!) are not supported");
            else if (d == 'P' && peek(ps, 2) == '=')
                return bad(ps, at, "backreferences ((?P=name)) are not supported");
            else if (d == '(')
                return bad(ps, at, "conditional groups are not supported");
            else if (d == '>')
                return bad(ps, at, "atomic groups are not supported");
            else
                return bad(ps, at, "flags (?%c...) are supported only as (?s), (?m), (?a) or "
                           "(?u) at the start", d > 32 && d < 127 ? d : '?');
        } else
            group = ++ps->re->groups;
        if (++ps->depth > MAX_DEPTH)
            return bad(ps, at, "groups nested more than %d deep", MAX_DEPTH);
        int body;
        if ((rc = parse_alt(ps, &body)))
            return rc;
        ps->depth--;
        if (peek(ps, 0) != ')')
            return bad(ps, at, "missing ), unterminated subpattern");
        ps->i++;
        if ((rc = new_node(ps, N_GROUP, 0, &atom)))
            return rc;
        ps->nodes[atom].child = body;
        ps->nodes[atom].group = group;
    } else if (c == '[') {
        rc = parse_class(ps, &atom);
    } else if (c == '.') {
        rc = new_node(ps, N_ANY, 0, &atom);
    } else if (c == '^' || c == '$') {
        rc = new_node(ps, N_ASSERT, c == '^' ? A_BOL : A_EOL, &atom);
        is_assert = 1;
    } else if (c == '*' || c == '+' || c == '?') {
        return bad(ps, at, "nothing to repeat");
    } else if (c == '{') {
        int min, max, err;
        ps->i = at;
        if (parse_braces(ps, &min, &max, &err))
            return err ? err : bad(ps, at, "nothing to repeat");
        ps->i = at + 1;
        rc = new_node(ps, N_CHAR, '{', &atom);
    } else if (c == '\\') {
        uint32_t lit = 0;
        int cats, assert_kind;
        if ((rc = parse_escape(ps, 0, &lit, &cats, &assert_kind)))
            return rc;
        if (assert_kind >= 0) {
            rc = new_node(ps, N_ASSERT, (uint32_t)assert_kind, &atom);
            is_assert = 1;
        } else if (cats) { /* a class of one escape */
            tr_regex *re = ps->re;
            if ((rc = grow((void **)&re->classes, &ps->cap_classes, re->n_classes + 1,
                           sizeof *re->classes)))
                return rc;
            re->classes[re->n_classes] = (cls){.first = re->n_ranges, .cats = cats};
            rc = new_node(ps, N_CLASS, (uint32_t)re->n_classes++, &atom);
        } else
            rc = new_node(ps, N_CHAR, lit, &atom);
    } else {
        rc = new_node(ps, N_CHAR, (uint32_t)c, &atom);
    }
    if (rc)
        return rc;
    /* quantifiers */
    for (int repeated = 0;;) {
        int q = peek(ps, 0), qat = ps->i, min, max, err = 0;
        if (q == '*' || q == '+' || q == '?') {
            ps->i++;
            min = q == '+';
            max = q == '?' ? 1 : INF;
        } else if (q == '{' && parse_braces(ps, &min, &max, &err)) {
            if (err)
                return err;
        } else
            break;
        if (is_assert)
            return bad(ps, qat, "nothing to repeat");
        if (repeated)
            return bad(ps, qat, "multiple repeat");
        int lazy = 0;
        if (peek(ps, 0) == '?') {
            lazy = 1;
            ps->i++;
        } else if (peek(ps, 0) == '+')
            return bad(ps, qat, "possessive quantifiers are not supported");
        int r;
        if ((rc = new_node(ps, N_REPEAT, 0, &r)))
            return rc;
        ps->nodes[r].child = atom;
        ps->nodes[r].min = min;
        ps->nodes[r].max = max;
        ps->nodes[r].lazy = lazy;
        atom = r;
        repeated = 1;
    }
    *out = atom;
    return TR_OK;
}

/* A sequence: an N_CAT node. */
static int parse_seq(parser *ps, int *out)
{
    int rc = new_node(ps, N_CAT, 0, out), last = -1, piece;
    while (!rc && !(rc = parse_piece(ps, &piece)) && piece >= 0) {
        if (last < 0)
            ps->nodes[*out].child = piece;
        else
            ps->nodes[last].next = piece;
        last = piece;
    }
    return rc;
}

static int parse_alt(parser *ps, int *out)
{
    int rc = new_node(ps, N_ALT, 0, out), last = -1, seq;
    while (!rc && !(rc = parse_seq(ps, &seq))) {
        if (last < 0)
            ps->nodes[*out].child = seq;
        else
            ps->nodes[last].next = seq;
        last = seq;
        if (peek(ps, 0) != '|')
            break;
        ps->i++;
    }
    return rc;
}

static int emit(parser *ps, iop op, uint32_t c, int x, int y)
{
    tr_regex *re = ps->re;
    if (re->n_prog >= MAX_INST)
        return tr_fail(TR_ERR_INVALID, "regex '%.300s': more than %d instructions once its "
                       "repetitions are unrolled (smaller {m,n} counts)", re->pattern, MAX_INST);
    int rc = grow((void **)&re->prog, &ps->cap_prog, re->n_prog + 1, sizeof *re->prog);
    if (!rc)
        re->prog[re->n_prog++] = (inst){.op = op, .c = c, .x = x, .y = y};
    return rc;
}

static int gen(parser *ps, int k);

/* One optional iteration of repeat node r with loop slot `slot`: its exits are patched to the
 * end later (listed in exits). */
static int gen_iteration(parser *ps, const node *r, int slot, int *exits, int *n_exits)
{
    tr_regex *re = ps->re;
    int rc;
    exits[(*n_exits)++] = re->n_prog;
    if ((rc = emit(ps, I_CHECK, (uint32_t)slot, -1, 0)))
        return rc;
    int split = re->n_prog;
    exits[(*n_exits)++] = split;
    if ((rc = emit(ps, I_SPLIT, 0, -1, -1)) || (rc = emit(ps, I_SAVE, (uint32_t)slot, 0, 0)))
        return rc;
    /* prefer the iteration (greedy) or the exit (lazy): the exit's target is patched */
    re->prog[split].x = r->lazy ? -1 : split + 1;
    re->prog[split].y = r->lazy ? split + 1 : -1;
    return gen(ps, r->child);
}

static int gen_repeat(parser *ps, const node *r)
{
    tr_regex *re = ps->re;
    int rc = TR_OK;
    for (int k = 0; k < r->min && !rc; k++)
        rc = gen(ps, r->child);
    if (rc || r->max == r->min)
        return rc;
    int slot = re->n_slots++, optional = r->max == INF ? 1 : r->max - r->min;
    int *exits = malloc(2 * (size_t)optional * sizeof *exits), n_exits = 0;
    if (!exits)
        return tr_fail(TR_ERR_NOMEM, "out of memory for a regex");
    rc = emit(ps, I_UNMARK, (uint32_t)slot, 0, 0);
    int top = re->n_prog;
    for (int k = 0; k < optional && !rc; k++)
        rc = gen_iteration(ps, r, slot, exits, &n_exits);
    if (!rc && r->max == INF)
        rc = emit(ps, I_JMP, 0, top, 0);
    for (int k = 0; !rc && k < n_exits; k++) {
        inst *in = &re->prog[exits[k]];
        if (in->op == I_CHECK)
            in->x = re->n_prog;
        else if (in->x < 0)
            in->x = re->n_prog;
        else
            in->y = re->n_prog;
    }
    free(exits);
    return rc;
}

static int gen(parser *ps, int k)
{
    tr_regex *re = ps->re;
    const node *nd = &ps->nodes[k];
    int rc = TR_OK;
    switch (nd->kind) {
    case N_EMPTY:
        return TR_OK;
    case N_CHAR:
        return emit(ps, I_CHAR, nd->c, 0, 0);
    case N_ANY:
        return emit(ps, re->flags & F_DOTALL ? I_ANYNL : I_ANY, 0, 0, 0);
    case N_CLASS:
        return emit(ps, I_CLASS, nd->c, 0, 0);
    case N_ASSERT:
        return emit(ps, I_ASSERT, nd->c, 0, 0);
    case N_CAT:
        for (int c = nd->child; c >= 0 && !rc; c = ps->nodes[c].next)
            rc = gen(ps, c);
        return rc;
    case N_GROUP:
        if (nd->group && (rc = emit(ps, I_SAVE, (uint32_t)(2 * nd->group), 0, 0)))
            return rc;
        if ((rc = gen(ps, nd->child)) || !nd->group)
            return rc;
        return emit(ps, I_SAVE, (uint32_t)(2 * nd->group + 1), 0, 0);
    case N_REPEAT:
        return gen_repeat(ps, nd);
    case N_ALT: {
        int jumps = -1; /* a chain of the JMPs to the end, through their x */
        for (int c = nd->child; c >= 0 && !rc; c = ps->nodes[c].next) {
            int last = ps->nodes[c].next < 0, split = re->n_prog;
            if (!last && (rc = emit(ps, I_SPLIT, 0, split + 1, -1)))
                break;
            if ((rc = gen(ps, c)))
                break;
            if (!last) {
                if ((rc = emit(ps, I_JMP, 0, jumps, 0)))
                    break;
                jumps = re->n_prog - 1;
                re->prog[split].y = re->n_prog;
            }
        }
        while (!rc && jumps >= 0) {
            int next = re->prog[jumps].x;
            re->prog[jumps].x = re->n_prog;
            jumps = next;
        }
        return rc;
    }
    }
    return rc;
}

/* Global flags (?sma u) at the pattern's start. */
static int parse_flags(parser *ps)
{
    while (peek(ps, 0) == '(' && peek(ps, 1) == '?') {
        int j = ps->i + 2, flags = 0;
        for (; j < ps->n; j++) {
            uint32_t f = ps->p[j];
            if (f == 's')
                flags |= F_DOTALL;
            else if (f == 'm')
                flags |= F_MULTILINE;
            else if (f == 'a')
                flags |= F_ASCII;
            else if (f != 'u')
                break;
        }
        if (j == ps->i + 2 || j >= ps->n)
            return TR_OK;
        if (ps->p[j] != ')') {
            if (ps->p[j] == ':' || ps->p[j] == '-')
                return bad(ps, ps->i, "scoped flags (?%c:...) are not supported",
                           (int)ps->p[ps->i + 2]);
            return bad(ps, j, "flag '%c' is not supported (only s, m, a and u)",
                       ps->p[j] > 32 && ps->p[j] < 127 ? (int)ps->p[j] : '?');
        }
        ps->re->flags |= flags;
        ps->i = j + 1;
    }
    return TR_OK;
}

int tr_regex_compile(const char *pattern, size_t len, tr_regex **out)
{
    *out = NULL;
    tr_regex *re = calloc(1, sizeof *re);
    uint32_t *cps = malloc((len + 1) * sizeof *cps);
    parser ps = {.p = cps, .re = re};
    if (re)
        re->pattern = malloc(len + 1);
    int rc = re && cps && re->pattern ? TR_OK : tr_fail(TR_ERR_NOMEM, "out of memory for a regex");
    if (!rc) {
        memcpy(re->pattern, pattern, len);
        re->pattern[len] = '\0';
        re->steps = TR_REGEX_STEPS;
        for (size_t i = 0; i < len;)
            cps[ps.n++] = tr_text_next(pattern, len, &i);
        rc = parse_flags(&ps);
    }
    int root = -1;
    if (!rc)
        rc = parse_alt(&ps, &root);
    if (!rc && ps.i < ps.n)
        rc = bad(&ps, ps.i, "unbalanced parenthesis");
    if (!rc) {
        re->n_slots = 2 * (re->groups + 1);
        if (!(rc = emit(&ps, I_SAVE, 0, 0, 0)) && !(rc = gen(&ps, root)) &&
            !(rc = emit(&ps, I_SAVE, 1, 0, 0)))
            rc = emit(&ps, I_MATCH, 0, 0, 0);
    }
    free(cps);
    free(ps.nodes);
    free(ps.names);
    if (rc) {
        tr_regex_free(re);
        return rc;
    }
    *out = re;
    return TR_OK;
}

void tr_regex_free(tr_regex *re)
{
    if (!re)
        return;
    free(re->pattern);
    free(re->prog);
    free(re->classes);
    free(re->ranges);
    free(re);
}

int tr_regex_groups(const tr_regex *re) { return re->groups; }

const char *tr_regex_pattern(const tr_regex *re) { return re->pattern; }

void tr_regex_set_steps(tr_regex *re, long steps) { re->steps = steps > 0 ? steps : 1; }

