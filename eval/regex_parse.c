/* Python re patterns into a tree (eval/regex_tree.h): escapes, classes, groups, lookarounds,
 * backreferences, quantifiers and flags, with Python's syntax errors; (?i) classes are stored
 * folded (the lowered code points of their members, re's extra cases too). */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval/regex_tree.h"
#include "eval/text.h"

enum { MAX_DEPTH = 200, BMP = 0x10000 };

int regex_bad(const parser *ps, int at, const char *fmt, ...)
{
    char why[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return tr_fail(TR_ERR_INVALID, "regex '%.300s': %s at position %d", ps->re->pattern, why, at);
}

int regex_grow(void **p, int *cap, int need, size_t size)
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

/* A new node (index in *out), with the flags in force. */
static int new_node(parser *ps, nkind kind, uint32_t c, int *out)
{
    int rc = regex_grow((void **)&ps->nodes, &ps->cap_nodes, ps->n_nodes + 1, sizeof(node));
    if (rc)
        return rc;
    ps->nodes[ps->n_nodes] = (node){.kind = kind, .c = c, .child = -1, .next = -1,
                                    .flags = ps->flags};
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
static int is_digit(int c) { return c >= '0' && c <= '9'; }

/* What an escape (ps->i just past the backslash) stands for: a literal code point (*lit),
 * a class escape (*cats) or, outside a class, an assertion (*assert_kind) or a backreference
 * (*group > 0). */
static int parse_escape(parser *ps, int in_class, uint32_t *lit, int *cats, int *assert_kind,
                        int *group)
{
    int at = ps->i - 1, c = peek(ps, 0);
    *cats = 0;
    *assert_kind = -1;
    *group = 0;
    if (c < 0)
        return regex_bad(ps, at, "a pattern that ends in a backslash");
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
                return regex_bad(ps, at, "incomplete escape \\%c", c);
            v = v << 4 | (uint32_t)h;
            ps->i++;
        }
        if (v > 0x10FFFF)
            return regex_bad(ps, at, "bad escape \\%c (past U+10FFFF)", c);
        *lit = v;
        return TR_OK;
    }
    if (c == 'N')
        return regex_bad(ps, at, "\\N{...} (a named character) is not supported");
    if (c == '0' || (is_octal(c) && is_octal(peek(ps, 0)) && is_octal(peek(ps, 1))) ||
        (in_class && is_octal(c))) {
        uint32_t v = (uint32_t)(c - '0');
        for (int k = 0; k < 2 && is_octal(peek(ps, 0)); k++)
            v = v * 8 + (uint32_t)(peek(ps, 0) - '0'), ps->i++;
        if (v > 0377)
            return regex_bad(ps, at, "octal escape value \\%o outside of range 0-0o377", v);
        *lit = v;
        return TR_OK;
    }
    if (is_digit(c) && in_class)
        return regex_bad(ps, at, "bad escape \\%c", c);
    if (is_digit(c)) { /* \1 .. \99 */
        *group = c - '0';
        if (is_digit(peek(ps, 0)))
            *group = *group * 10 + peek(ps, 0) - '0', ps->i++;
        return TR_OK;
    }
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
        return regex_bad(ps, at, "bad escape \\%c", c);
    *lit = (uint32_t)c;
    return TR_OK;
}

static int add_range(parser *ps, uint32_t lo, uint32_t hi)
{
    tr_regex *re = ps->re;
    int rc = regex_grow((void **)&re->ranges, &ps->cap_ranges, re->n_ranges + 1,
                        sizeof *re->ranges);
    if (!rc) {
        re->ranges[re->n_ranges][0] = lo;
        re->ranges[re->n_ranges][1] = hi;
        re->n_ranges++;
    }
    return rc;
}

static uint32_t lower(int flags, uint32_t c)
{
    if (flags & F_ASCII)
        return c >= 'A' && c <= 'Z' ? c + 32 : c;
    return tr_text_lower1(c);
}

/* Class k's ranges (from k->first) replaced by the lowered code points of their members and
 * re's extra cases of those (Python's charset under IGNORECASE; past U+FFFF refused). */
static int fold_class(parser *ps, cls *k, int at)
{
    tr_regex *re = ps->re;
    unsigned char *in = calloc(BMP / 8, 1);
    if (!in)
        return tr_fail(TR_ERR_NOMEM, "out of memory for a regex");
    int rc = TR_OK;
    for (int r = k->first; r < re->n_ranges && !rc; r++) {
        if (re->ranges[r][1] >= BMP) {
            rc = regex_bad(ps, at, "a case-insensitive class with a code point past U+FFFF is "
                           "not supported");
            break;
        }
        for (uint32_t c = re->ranges[r][0]; c <= re->ranges[r][1]; c++) {
            uint32_t y = lower(ps->flags, c), extra[2];
            in[y / 8] |= (unsigned char)(1 << y % 8);
            int n = ps->flags & F_ASCII ? 0 : tr_text_case_extra(y, extra);
            for (int e = 0; e < n; e++)
                in[extra[e] / 8] |= (unsigned char)(1 << extra[e] % 8);
        }
    }
    re->n_ranges = k->first;
    for (uint32_t c = 0; c < BMP && !rc; c++) {
        if (!(in[c / 8] >> c % 8 & 1))
            continue;
        uint32_t end = c;
        while (end + 1 < BMP && in[(end + 1) / 8] >> (end + 1) % 8 & 1)
            end++;
        rc = add_range(ps, c, end);
        c = end;
    }
    free(in);
    k->folded = 1;
    return rc;
}

/* A class [...] (ps->i just past "["): a N_CLASS node in *out. */
static int parse_class(parser *ps, int *out)
{
    tr_regex *re = ps->re;
    int at = ps->i - 1, rc = regex_grow((void **)&re->classes, &ps->cap_classes,
                                        re->n_classes + 1, sizeof *re->classes);
    if (rc)
        return rc;
    cls k = {.first = re->n_ranges};
    if (peek(ps, 0) == '^') {
        k.negate = 1;
        ps->i++;
    }
    int items = 0;
    for (;;) {
        int c = peek(ps, 0), group;
        if (c < 0)
            return regex_bad(ps, at, "unterminated character set");
        ps->i++;
        if (c == ']' && items)
            break;
        uint32_t lo = (uint32_t)c;
        int cats = 0, assert_kind;
        if (c == '\\' && (rc = parse_escape(ps, 1, &lo, &cats, &assert_kind, &group)))
            return rc;
        items++;
        if (peek(ps, 0) == '-' && peek(ps, 1) != ']' && peek(ps, 1) >= 0) {
            ps->i++;
            int d = peek(ps, 0), cats2 = 0;
            uint32_t hi = (uint32_t)d;
            ps->i++;
            if (d == '\\' && (rc = parse_escape(ps, 1, &hi, &cats2, &assert_kind, &group)))
                return rc;
            if (cats || cats2)
                return regex_bad(ps, at, "bad character range (a class escape as an end)");
            if (hi < lo)
                return regex_bad(ps, at, "bad character range U+%04X-U+%04X", lo, hi);
            if ((rc = add_range(ps, lo, hi)))
                return rc;
        } else if (cats)
            k.cats |= cats;
        else if ((rc = add_range(ps, lo, lo)))
            return rc;
    }
    if ((ps->flags & F_IGNORE) && (rc = fold_class(ps, &k, at)))
        return rc;
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
        *err = regex_bad(ps, ps->i, "min repeat greater than max repeat");
    else if (*min > 65535 || *max > 65535)
        *err = regex_bad(ps, ps->i, "a repeat count above 65535");
    ps->i = i + 1;
    return 1;
}

/* Group name p[start, start + len): an identifier (Python's rules, with \w's letters). */
static int check_name(const parser *ps, int start, int len)
{
    for (int k = 0; k < len; k++) {
        uint32_t c = ps->p[start + k];
        if (!tr_text_isword(c) || (k == 0 && c < 128 && c >= '0' && c <= '9'))
            return regex_bad(ps, start, "bad character in group name");
    }
    return TR_OK;
}

/* The group named p[start, start + len), or 0. */
static int find_name(const parser *ps, int start, int len)
{
    for (int k = 0; k < ps->n_names; k++)
        if (ps->names[k][1] == len &&
            !memcmp(ps->p + ps->names[k][0], ps->p + start, (size_t)len * sizeof *ps->p))
            return ps->names[k][2];
    return 0;
}

/* A new capture group (its number in *group), named p[start, start + len) when len > 0. */
static int open_group(parser *ps, int start, int len, int *group)
{
    int rc;
    if (len > 0) {
        if ((rc = check_name(ps, start, len)))
            return rc;
        if (find_name(ps, start, len))
            return regex_bad(ps, start, "redefinition of group name");
        if ((rc = regex_grow((void **)&ps->names, &ps->cap_names, ps->n_names + 1,
                             sizeof *ps->names)))
            return rc;
        ps->names[ps->n_names][0] = start;
        ps->names[ps->n_names][1] = len;
        ps->names[ps->n_names++][2] = ps->re->groups + 1;
    }
    *group = ++ps->re->groups;
    if ((rc = regex_grow((void **)&ps->group_node, &ps->cap_group_node, *group + 1,
                         sizeof *ps->group_node)))
        return rc;
    ps->group_node[*group] = -1;
    return TR_OK;
}

/* A reference to group g at `at`: Python's checks. */
static int check_reference(const parser *ps, int g, int at)
{
    if (g < 1 || g > ps->re->groups)
        return regex_bad(ps, at, "invalid group reference %d", g);
    if (ps->group_node[g] < 0)
        return regex_bad(ps, at, "cannot refer to an open group");
    if (ps->behind_groups >= 0 && g > ps->behind_groups)
        return regex_bad(ps, at, "cannot refer to group defined in the same lookbehind "
                         "subpattern");
    return TR_OK;
}

/* Node k's width in code points, [*lo, *hi] (Python's getwidth; capped). */
static void width(const parser *ps, int k, long long *lo, long long *hi)
{
    const long long cap = 1LL << 40;
    const node *nd = &ps->nodes[k];
    long long a, b;
    *lo = *hi = 0;
    switch (nd->kind) {
    case N_CHAR:
    case N_ANY:
    case N_CLASS:
        *lo = *hi = 1;
        return;
    case N_CAT:
    case N_ALT:
        for (int c = nd->child, first = 1; c >= 0; c = ps->nodes[c].next, first = 0) {
            width(ps, c, &a, &b);
            if (nd->kind == N_CAT) {
                *lo = *lo + a < cap ? *lo + a : cap;
                *hi = *hi + b < cap ? *hi + b : cap;
            } else {
                *lo = first || a < *lo ? a : *lo;
                *hi = b > *hi ? b : *hi;
            }
        }
        return;
    case N_GROUP:
        width(ps, nd->child, lo, hi);
        return;
    case N_REPEAT:
        width(ps, nd->child, &a, &b);
        *lo = a * nd->min < cap ? a * nd->min : cap;
        *hi = nd->max == INF ? (b ? cap : 0) : b * nd->max < cap ? b * nd->max : cap;
        return;
    case N_BACKREF:
        width(ps, ps->group_node[nd->c], lo, hi);
        return;
    default: /* assertions and lookarounds */
        return;
    }
}

static void skip_verbose(parser *ps)
{
    while (ps->flags & F_VERBOSE) {
        int c = peek(ps, 0);
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f')
            ps->i++;
        else if (c == '#')
            while (peek(ps, 0) >= 0 && peek(ps, 0) != '\n')
                ps->i++;
        else
            break;
    }
}

static int flag_bit(int c)
{
    return c == 'i' ? F_IGNORE : c == 'm' ? F_MULTILINE : c == 's' ? F_DOTALL
           : c == 'x' ? F_VERBOSE : c == 'a' ? F_ASCII : c == 'u' ? F_UNICODE : 0;
}

/* Flags "(?aimsux-imsx:" or "(?aimsux)" (ps->i at the first letter or "-"), as Python's
 * _parse_flags: *global 1 for the latter (applied), else the scoped *add and *del. */
static int parse_flags(parser *ps, int at, int *global, int *add, int *del)
{
    *global = *add = *del = 0;
    int c = peek(ps, 0);
    while (c != '-') {
        if (c == 'L')
            return regex_bad(ps, ps->i, "bad inline flags: cannot use 'L' flag with a str "
                             "pattern");
        if (!flag_bit(c))
            return regex_bad(ps, ps->i, "flag '%c' is not supported (a, i, m, s, u, x)",
                             c > 32 && c < 127 ? c : '?');
        *add |= flag_bit(c);
        if ((*add & F_ASCII) && (*add & F_UNICODE))
            return regex_bad(ps, ps->i, "bad inline flags: flags 'a', 'u' and 'L' are "
                             "incompatible");
        ps->i++;
        c = peek(ps, 0);
        if (c < 0)
            return regex_bad(ps, ps->i, "missing -, : or )");
        if (c == ')' || c == ':')
            break;
        if (c != '-' && !flag_bit(c) && c != 'L')
            return regex_bad(ps, ps->i, (c < 128 && ((c | 32) >= 'a' && (c | 32) <= 'z'))
                             ? "unknown flag" : "missing -, : or )");
    }
    if (c == ')') {
        ps->i++;
        if (!ps->at_start)
            return regex_bad(ps, at, "global flags not at the start of the expression");
        if ((*add | ps->flags) & F_ASCII && (*add | ps->flags) & F_UNICODE)
            return regex_bad(ps, at, "ASCII and UNICODE flags are incompatible");
        ps->flags |= *add;
        *global = 1;
        return TR_OK;
    }
    if (c == '-') {
        ps->i++;
        c = peek(ps, 0);
        if (c < 0 || !(flag_bit(c) || c == 'L'))
            return regex_bad(ps, ps->i, c >= 0 && c < 128 && ((c | 32) >= 'a' && (c | 32) <= 'z')
                             ? "unknown flag" : "missing flag");
        for (;;) {
            if (c == 'a' || c == 'u' || c == 'L')
                return regex_bad(ps, ps->i, "bad inline flags: cannot turn off flags 'a', 'u' "
                                 "and 'L'");
            *del |= flag_bit(c);
            ps->i++;
            c = peek(ps, 0);
            if (c < 0)
                return regex_bad(ps, ps->i, "missing :");
            if (c == ':')
                break;
            if (!flag_bit(c) && c != 'L')
                return regex_bad(ps, ps->i, c < 128 && ((c | 32) >= 'a' && (c | 32) <= 'z')
                                 ? "unknown flag" : "missing :");
        }
    }
    ps->i++; /* ":" */
    if (*add & *del)
        return regex_bad(ps, at, "bad inline flags: flag turned on and off");
    return TR_OK;
}

/* The body of a group (ps->i past its opening) up to its ")", with `flags` in force: *body. */
static int parse_body(parser *ps, int at, int flags, int *body)
{
    if (++ps->depth > MAX_DEPTH)
        return regex_bad(ps, at, "groups nested more than %d deep", MAX_DEPTH);
    int saved = ps->flags;
    ps->flags = flags;
    ps->at_start = 0;
    int rc = parse_alt(ps, body);
    ps->flags = saved;
    ps->depth--;
    if (rc)
        return rc;
    if (peek(ps, 0) != ')')
        return regex_bad(ps, at, "missing ), unterminated subpattern");
    ps->i++;
    return TR_OK;
}

/* A lookaround of kind L_* (ps->i past "(?=", "(?!", "(?<=" or "(?<!"): *atom. */
static int parse_look(parser *ps, int at, int kind, int *atom)
{
    int saved = ps->behind_groups, body, rc;
    if ((kind & L_BEHIND) && saved < 0)
        ps->behind_groups = ps->re->groups;
    rc = parse_body(ps, at, ps->flags, &body);
    ps->behind_groups = saved;
    if (rc || (rc = new_node(ps, N_LOOK, (uint32_t)kind, atom)))
        return rc;
    ps->nodes[*atom].child = body;
    if (kind & L_BEHIND) {
        long long lo, hi;
        width(ps, body, &lo, &hi);
        if (lo != hi)
            return regex_bad(ps, at, "look-behind requires fixed-width pattern");
        if (lo > INT_MAX / 4)
            return regex_bad(ps, at, "looks too much behind");
        ps->nodes[*atom].width = (int)lo;
    }
    return TR_OK;
}

/* "(?P=name)" (ps->i past "(?P="): a N_BACKREF node. */
static int parse_named_reference(parser *ps, int at, int *atom)
{
    int start = ps->i;
    while (peek(ps, 0) >= 0 && peek(ps, 0) != ')')
        ps->i++;
    if (peek(ps, 0) != ')')
        return regex_bad(ps, at, "missing ), unterminated name");
    if (ps->i == start)
        return regex_bad(ps, at, "missing group name");
    int len = ps->i - start, rc = check_name(ps, start, len), g;
    ps->i++;
    if (rc)
        return rc;
    if (!(g = find_name(ps, start, len)))
        return regex_bad(ps, start, "unknown group name");
    if ((rc = check_reference(ps, g, start)))
        return rc;
    return new_node(ps, N_BACKREF, (uint32_t)g, atom);
}

/* A group's atom (ps->i past "("): *atom, or -1 for a comment or global flags (nothing). */
static int parse_group(parser *ps, int at, int *atom)
{
    int group = 0, flags = ps->flags, rc, d = peek(ps, 1);
    *atom = -1;
    if (peek(ps, 0) == '?') {
        ps->i += 2;
        if (d == ':') {
        } else if (d == 'P' && peek(ps, 0) == '<') {
            ps->i++;
            int start = ps->i;
            while (peek(ps, 0) >= 0 && peek(ps, 0) != '>')
                ps->i++;
            if (peek(ps, 0) != '>' || ps->i == start)
                return regex_bad(ps, at, "missing group name");
            if ((rc = open_group(ps, start, ps->i - start, &group)))
                return rc;
            ps->i++;
        } else if (d == 'P' && peek(ps, 0) == '=') {
            ps->i++;
            return parse_named_reference(ps, at, atom);
        } else if (d == '#') {
            while (peek(ps, 0) >= 0 && peek(ps, 0) != ')')
                ps->i++;
            if (peek(ps, 0) < 0)
                return regex_bad(ps, at, "missing ), unterminated comment");
            ps->i++;
            return TR_OK;
        } else if (d == '=' || d == '!') {
            return parse_look(ps, at, d == '!' ? L_NEG : 0, atom);
        } else if (d == '<' && (peek(ps, 0) == '=' || peek(ps, 0) == '!')) {
            ps->i++;
            return parse_look(ps, at, L_BEHIND | (peek(ps, -1) == '!' ? L_NEG : 0), atom);
        } else if (d == '(') {
            return regex_bad(ps, at, "conditional groups are not supported");
        } else if (d == '>') {
            return regex_bad(ps, at, "atomic groups are not supported");
        } else if (d == '-' || flag_bit(d) || d == 'L') {
            int global, add, del;
            ps->i--;
            if ((rc = parse_flags(ps, at, &global, &add, &del)) || global)
                return rc;
            if (add & (F_ASCII | F_UNICODE))
                flags &= ~(F_ASCII | F_UNICODE);
            flags = (flags | add) & ~del;
        } else if (d < 0) {
            return regex_bad(ps, at, "unexpected end of pattern");
        } else {
            return regex_bad(ps, at, "unknown extension ?%c", d > 32 && d < 127 ? d : '?');
        }
    } else if ((rc = open_group(ps, 0, 0, &group)))
        return rc;
    int body;
    if ((rc = parse_body(ps, at, flags, &body)) || (rc = new_node(ps, N_GROUP, 0, atom)))
        return rc;
    ps->nodes[*atom].child = body;
    ps->nodes[*atom].group = group;
    if (group)
        ps->group_node[group] = *atom;
    return TR_OK;
}

/* One atom and its quantifiers; *out -1 at the end of a sequence, N_EMPTY for nothing. */
static int parse_piece(parser *ps, int *out)
{
    skip_verbose(ps);
    int c = peek(ps, 0), at = ps->i, rc = TR_OK, atom = -1, is_assert = 0;
    *out = -1;
    if (c < 0 || c == '|' || c == ')')
        return TR_OK;
    ps->i++;
    if (c == '(') {
        if ((rc = parse_group(ps, at, &atom)))
            return rc;
        if (atom < 0) /* a comment or global flags: at the start still, if it was */
            return new_node(ps, N_EMPTY, 0, out);
    }
    ps->at_start = 0;
    if (c == '(') {
    } else if (c == '[') {
        rc = parse_class(ps, &atom);
    } else if (c == '.') {
        rc = new_node(ps, N_ANY, 0, &atom);
    } else if (c == '^' || c == '$') {
        rc = new_node(ps, N_ASSERT, c == '^' ? A_BOL : A_EOL, &atom);
        is_assert = 1;
    } else if (c == '*' || c == '+' || c == '?') {
        return regex_bad(ps, at, "nothing to repeat");
    } else if (c == '{') {
        int min, max, err;
        ps->i = at;
        if (parse_braces(ps, &min, &max, &err))
            return err ? err : regex_bad(ps, at, "nothing to repeat");
        ps->i = at + 1;
        rc = new_node(ps, N_CHAR, '{', &atom);
    } else if (c == '\\') {
        uint32_t lit = 0;
        int cats, assert_kind, group;
        if ((rc = parse_escape(ps, 0, &lit, &cats, &assert_kind, &group)))
            return rc;
        if (group) {
            if (!(rc = check_reference(ps, group, at)))
                rc = new_node(ps, N_BACKREF, (uint32_t)group, &atom);
        } else if (assert_kind >= 0) {
            rc = new_node(ps, N_ASSERT, (uint32_t)assert_kind, &atom);
            is_assert = 1;
        } else if (cats) { /* a class of one escape */
            tr_regex *re = ps->re;
            if ((rc = regex_grow((void **)&re->classes, &ps->cap_classes, re->n_classes + 1,
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
        skip_verbose(ps);
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
            return regex_bad(ps, qat, "nothing to repeat");
        if (repeated)
            return regex_bad(ps, qat, "multiple repeat");
        int lazy = 0;
        if (peek(ps, 0) == '?') {
            lazy = 1;
            ps->i++;
        } else if (peek(ps, 0) == '+')
            return regex_bad(ps, qat, "possessive quantifiers are not supported");
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
        ps->at_start = 0;
    }
    return rc;
}

int regex_parse(parser *ps, int *root)
{
    ps->at_start = 1;
    ps->behind_groups = -1;
    int rc = parse_alt(ps, root);
    if (!rc && ps->i < ps->n)
        rc = regex_bad(ps, ps->i, "unbalanced parenthesis");
    return rc;
}
