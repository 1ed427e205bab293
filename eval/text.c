/* Python's str classes, strip and case maps on UTF-8 text (eval/text.h); the tables come from
 * Python's Unicode database (eval/text_tables.h, generated). */
#include "eval/text.h"

#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "eval/text_tables.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

uint32_t tr_text_next(const char *s, size_t n, size_t *i)
{
    const unsigned char *u = (const unsigned char *)s + *i;
    size_t left = n - *i;
    if (u[0] < 0x80 || tr_utf8_invalid_len(u, left)) {
        *i += 1;
        return u[0] < 0x80 ? u[0] : 0xFFFD;
    }
    size_t len = u[0] < 0xe0 ? 2 : u[0] < 0xf0 ? 3 : 4;
    uint32_t c = len == 2 ? u[0] & 0x1fu : len == 3 ? u[0] & 0x0fu : u[0] & 0x07u;
    for (size_t k = 1; k < len; k++)
        c = c << 6 | (u[k] & 0x3fu);
    *i += len;
    return c;
}

static int in_ranges(const uint32_t (*r)[2], size_t n, uint32_t c)
{
    size_t lo = 0, hi = n; /* the first range whose end is >= c */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (r[mid][1] < c)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && r[lo][0] <= c;
}

int tr_text_isspace(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
           c == 0x202f || c == 0x205f || c == 0x3000;
}

int tr_text_isword(uint32_t c) { return in_ranges(word_ranges, COUNT(word_ranges), c); }

int tr_text_isdecimal(uint32_t c) { return in_ranges(decimal_ranges, COUNT(decimal_ranges), c); }

int tr_text_ispunct(uint32_t c) { return in_ranges(punct_ranges, COUNT(punct_ranges), c); }

int tr_text_case_extra(uint32_t lowered, uint32_t out[2])
{
    size_t lo = 0, hi = COUNT(extra_cases);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (extra_cases[mid][0] < lowered)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == COUNT(extra_cases) || extra_cases[lo][0] != lowered)
        return 0;
    out[0] = extra_cases[lo][1];
    out[1] = extra_cases[lo][2];
    return out[1] ? 2 : 1;
}

void tr_text_strip(const char *s, size_t n, int left, int right, size_t *begin, size_t *end)
{
    size_t a = 0, b = 0, i = 0;
    int leading = 1;
    while (i < n) { /* b: the end of the last non-space code point */
        int space = tr_text_isspace(tr_text_next(s, n, &i));
        if (leading && space)
            a = i;
        else if (!space) {
            leading = 0;
            b = i;
        }
    }
    *begin = left ? a : 0;
    *end = !right ? n : b > *begin ? b : *begin;
}

/* c's mapping of one code point through runs r, or c. */
static uint32_t map_runs(const int32_t (*r)[4], size_t n, uint32_t c)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if ((uint32_t)r[mid][1] < c)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < n && (uint32_t)r[lo][0] <= c && (c - (uint32_t)r[lo][0]) % (uint32_t)r[lo][3] == 0)
        return (uint32_t)((int32_t)c + r[lo][2]);
    return c;
}

/* c's mapping of several code points (a special's, else one), in m[0, 3); the count. */
static int map_case(int upper, uint32_t c, uint32_t m[3])
{
    const uint32_t (*sp)[4] = upper ? upper_special : lower_special;
    size_t n_sp = upper ? COUNT(upper_special) : COUNT(lower_special);
    for (size_t k = 0; k < n_sp && sp[k][0] <= c; k++)
        if (sp[k][0] == c) {
            m[0] = sp[k][1];
            m[1] = sp[k][2];
            m[2] = sp[k][3];
            return m[2] ? 3 : m[1] ? 2 : 1;
        }
    m[0] = upper ? map_runs(upper_runs, COUNT(upper_runs), c)
                 : map_runs(lower_runs, COUNT(lower_runs), c);
    return 1;
}

/* (U+0130's lower() is two code points, its simple lowercase "i") */
uint32_t tr_text_lower1(uint32_t c)
{
    return c == 0x130 ? 0x69 : map_runs(lower_runs, COUNT(lower_runs), c);
}

static int cased(uint32_t c)
{
    uint32_t m[3];
    return map_case(0, c, m) > 1 || m[0] != c || map_case(1, c, m) > 1 || m[0] != c;
}

static size_t put_utf8(char *o, uint32_t c)
{
    if (c < 0x80) {
        o[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        o[0] = (char)(0xc0 | c >> 6);
        o[1] = (char)(0x80 | (c & 0x3f));
        return 2;
    }
    if (c < 0x10000) {
        o[0] = (char)(0xe0 | c >> 12);
        o[1] = (char)(0x80 | (c >> 6 & 0x3f));
        o[2] = (char)(0x80 | (c & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | c >> 18);
    o[1] = (char)(0x80 | (c >> 12 & 0x3f));
    o[2] = (char)(0x80 | (c >> 6 & 0x3f));
    o[3] = (char)(0x80 | (c & 0x3f));
    return 4;
}

int tr_text_case(const char *s, size_t n, int upper, char **out, size_t *out_len)
{
    char *o = malloc(3 * 4 * n + 1); /* each code point at most 3 of 4 bytes */
    if (!o)
        return tr_fail(TR_ERR_NOMEM, "out of memory for a text of %zu bytes", n);
    size_t len = 0, i = 0;
    uint32_t prev = 0;
    while (i < n) {
        const unsigned char *u = (const unsigned char *)s + i;
        if (u[0] >= 0x80 && tr_utf8_invalid_len(u, n - i)) { /* a byte that is not UTF-8 */
            o[len++] = s[i++];
            prev = 0xFFFD;
            continue;
        }
        uint32_t c = tr_text_next(s, n, &i), m[3];
        int k = map_case(upper, c, m);
        if (!upper && c == 0x3A3 && cased(prev)) { /* final sigma */
            size_t j = i;
            if (j >= n || !cased(tr_text_next(s, n, &j)))
                m[0] = 0x3C2;
        }
        for (int q = 0; q < k; q++)
            len += put_utf8(o + len, m[q]);
        prev = c;
    }
    o[len] = '\0';
    *out = o;
    *out_len = len;
    return TR_OK;
}
