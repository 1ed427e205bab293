/* Python re patterns' escapes and classes into eval/regex_tree.h's nodes; a (?i) class is
 * stored folded (the lowered code points of its members, re's extra cases too). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval/regex_tree.h"
#include "eval/text.h"

enum { BMP = 0x10000 };

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

int regex_node(parser *ps, nkind kind, uint32_t c, int *out)
{
    int rc = regex_grow((void **)&ps->nodes, &ps->cap_nodes, ps->n_nodes + 1, sizeof(node));
    if (rc)
        return rc;
    ps->nodes[ps->n_nodes] = (node){.kind = kind, .c = c, .child = -1, .next = -1,
                                    .flags = ps->flags};
    *out = ps->n_nodes++;
    return TR_OK;
}

static int hex_value(int c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static int is_octal(int c) { return c >= '0' && c <= '7'; }
static int is_digit(int c) { return c >= '0' && c <= '9'; }

int regex_escape(parser *ps, int in_class, uint32_t *lit, int *cats, int *assert_kind,
                 int *group)
{
    int at = ps->i - 1, c = regex_peek(ps, 0);
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
            int h = hex_value(regex_peek(ps, 0));
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
    if (c == '0' || (is_octal(c) && is_octal(regex_peek(ps, 0)) && is_octal(regex_peek(ps, 1))) ||
        (in_class && is_octal(c))) {
        uint32_t v = (uint32_t)(c - '0');
        for (int k = 0; k < 2 && is_octal(regex_peek(ps, 0)); k++)
            v = v * 8 + (uint32_t)(regex_peek(ps, 0) - '0'), ps->i++;
        if (v > 0377)
            return regex_bad(ps, at, "octal escape value \\%o outside of range 0-0o377", v);
        *lit = v;
        return TR_OK;
    }
    if (is_digit(c) && in_class)
        return regex_bad(ps, at, "bad escape \\%c", c);
    if (is_digit(c)) { /* \1 .. \99 */
        *group = c - '0';
        if (is_digit(regex_peek(ps, 0)))
            *group = *group * 10 + regex_peek(ps, 0) - '0', ps->i++;
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
            uint32_t y = regex_fold(ps->flags, c), extra[2];
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

int regex_class(parser *ps, int *out)
{
    tr_regex *re = ps->re;
    int at = ps->i - 1, rc = regex_grow((void **)&re->classes, &ps->cap_classes,
                                        re->n_classes + 1, sizeof *re->classes);
    if (rc)
        return rc;
    cls k = {.first = re->n_ranges};
    if (regex_peek(ps, 0) == '^') {
        k.negate = 1;
        ps->i++;
    }
    int items = 0;
    for (;;) {
        int c = regex_peek(ps, 0), group;
        if (c < 0)
            return regex_bad(ps, at, "unterminated character set");
        ps->i++;
        if (c == ']' && items)
            break;
        uint32_t lo = (uint32_t)c;
        int cats = 0, assert_kind;
        if (c == '\\' && (rc = regex_escape(ps, 1, &lo, &cats, &assert_kind, &group)))
            return rc;
        items++;
        if (regex_peek(ps, 0) == '-' && regex_peek(ps, 1) != ']' && regex_peek(ps, 1) >= 0) {
            ps->i++;
            int d = regex_peek(ps, 0), cats2 = 0;
            uint32_t hi = (uint32_t)d;
            ps->i++;
            if (d == '\\' && (rc = regex_escape(ps, 1, &hi, &cats2, &assert_kind, &group)))
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
    return regex_node(ps, N_CLASS, (uint32_t)re->n_classes++, out);
}
