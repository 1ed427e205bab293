/* Python re patterns into a tree (eval/regex_tree.h): escapes, classes, groups, lookarounds,
 * backreferences, quantifiers and flags, with Python's syntax errors (escapes and classes:
 * regex_class.c). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "eval/regex_tree.h"
#include "eval/text.h"

enum { MAX_DEPTH = 200 };

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
        int c = regex_peek(ps, 0);
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f')
            ps->i++;
        else if (c == '#')
            while (regex_peek(ps, 0) >= 0 && regex_peek(ps, 0) != '\n')
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
    int c = regex_peek(ps, 0);
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
        c = regex_peek(ps, 0);
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
        c = regex_peek(ps, 0);
        if (c < 0 || !(flag_bit(c) || c == 'L'))
            return regex_bad(ps, ps->i, c >= 0 && c < 128 && ((c | 32) >= 'a' && (c | 32) <= 'z')
                             ? "unknown flag" : "missing flag");
        for (;;) {
            if (c == 'a' || c == 'u' || c == 'L')
                return regex_bad(ps, ps->i, "bad inline flags: cannot turn off flags 'a', 'u' "
                                 "and 'L'");
            *del |= flag_bit(c);
            ps->i++;
            c = regex_peek(ps, 0);
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
    if (regex_peek(ps, 0) != ')')
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
    if (rc || (rc = regex_node(ps, N_LOOK, (uint32_t)kind, atom)))
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
    while (regex_peek(ps, 0) >= 0 && regex_peek(ps, 0) != ')')
        ps->i++;
    if (regex_peek(ps, 0) != ')')
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
    return regex_node(ps, N_BACKREF, (uint32_t)g, atom);
}

/* A group's atom (ps->i past "("): *atom, or -1 for a comment or global flags (nothing). */
static int parse_group(parser *ps, int at, int *atom)
{
    int group = 0, flags = ps->flags, rc, d = regex_peek(ps, 1);
    *atom = -1;
    if (regex_peek(ps, 0) == '?') {
        ps->i += 2;
        if (d == ':') {
        } else if (d == 'P' && regex_peek(ps, 0) == '<') {
            ps->i++;
            int start = ps->i;
            while (regex_peek(ps, 0) >= 0 && regex_peek(ps, 0) != '>')
                ps->i++;
            if (regex_peek(ps, 0) != '>' || ps->i == start)
                return regex_bad(ps, at, "missing group name");
            if ((rc = open_group(ps, start, ps->i - start, &group)))
                return rc;
            ps->i++;
        } else if (d == 'P' && regex_peek(ps, 0) == '=') {
            ps->i++;
            return parse_named_reference(ps, at, atom);
        } else if (d == '#') {
            while (regex_peek(ps, 0) >= 0 && regex_peek(ps, 0) != ')')
                ps->i++;
            if (regex_peek(ps, 0) < 0)
                return regex_bad(ps, at, "missing ), unterminated comment");
            ps->i++;
            return TR_OK;
        } else if (d == '=' || d == '!') {
            return parse_look(ps, at, d == '!' ? L_NEG : 0, atom);
        } else if (d == '<' && (regex_peek(ps, 0) == '=' || regex_peek(ps, 0) == '!')) {
            ps->i++;
            return parse_look(ps, at, L_BEHIND | (regex_peek(ps, -1) == '!' ? L_NEG : 0), atom);
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
    if ((rc = parse_body(ps, at, flags, &body)) || (rc = regex_node(ps, N_GROUP, 0, atom)))
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
    int c = regex_peek(ps, 0), at = ps->i, rc = TR_OK, atom = -1, is_assert = 0;
    *out = -1;
    if (c < 0 || c == '|' || c == ')')
        return TR_OK;
    ps->i++;
    if (c == '(') {
        if ((rc = parse_group(ps, at, &atom)))
            return rc;
        if (atom < 0) /* a comment or global flags: at the start still, if it was */
            return regex_node(ps, N_EMPTY, 0, out);
    }
    ps->at_start = 0;
    if (c == '(') {
    } else if (c == '[') {
        rc = regex_class(ps, &atom);
    } else if (c == '.') {
        rc = regex_node(ps, N_ANY, 0, &atom);
    } else if (c == '^' || c == '$') {
        rc = regex_node(ps, N_ASSERT, c == '^' ? A_BOL : A_EOL, &atom);
        is_assert = 1;
    } else if (c == '*' || c == '+' || c == '?') {
        return regex_bad(ps, at, "nothing to repeat");
    } else if (c == '{') {
        int min, max, err;
        ps->i = at;
        if (parse_braces(ps, &min, &max, &err))
            return err ? err : regex_bad(ps, at, "nothing to repeat");
        ps->i = at + 1;
        rc = regex_node(ps, N_CHAR, '{', &atom);
    } else if (c == '\\') {
        uint32_t lit = 0;
        int cats, assert_kind, group;
        if ((rc = regex_escape(ps, 0, &lit, &cats, &assert_kind, &group)))
            return rc;
        if (group) {
            if (!(rc = check_reference(ps, group, at)))
                rc = regex_node(ps, N_BACKREF, (uint32_t)group, &atom);
        } else if (assert_kind >= 0) {
            rc = regex_node(ps, N_ASSERT, (uint32_t)assert_kind, &atom);
            is_assert = 1;
        } else if (cats) { /* a class of one escape */
            tr_regex *re = ps->re;
            if ((rc = regex_grow((void **)&re->classes, &ps->cap_classes, re->n_classes + 1,
                                 sizeof *re->classes)))
                return rc;
            re->classes[re->n_classes] = (cls){.first = re->n_ranges, .cats = cats};
            rc = regex_node(ps, N_CLASS, (uint32_t)re->n_classes++, &atom);
        } else
            rc = regex_node(ps, N_CHAR, lit, &atom);
    } else {
        rc = regex_node(ps, N_CHAR, (uint32_t)c, &atom);
    }
    if (rc)
        return rc;
    /* quantifiers */
    for (int repeated = 0;;) {
        skip_verbose(ps);
        int q = regex_peek(ps, 0), qat = ps->i, min, max, err = 0;
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
        if (regex_peek(ps, 0) == '?') {
            lazy = 1;
            ps->i++;
        } else if (regex_peek(ps, 0) == '+')
            return regex_bad(ps, qat, "possessive quantifiers are not supported");
        int r;
        if ((rc = regex_node(ps, N_REPEAT, 0, &r)))
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
    int rc = regex_node(ps, N_CAT, 0, out), last = -1, piece;
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
    int rc = regex_node(ps, N_ALT, 0, out), last = -1, seq;
    while (!rc && !(rc = parse_seq(ps, &seq))) {
        if (last < 0)
            ps->nodes[*out].child = seq;
        else
            ps->nodes[last].next = seq;
        last = seq;
        if (regex_peek(ps, 0) != '|')
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
