/* Slurm's compressed host lists: "node[01-04,07]", "gpu-a[3,5]", "n1,n2",
 * "rack[1-2]-n[1-3]" (several bracket groups: the last varies fastest), zero padding kept.
 *
 * A list is comma-separated items (commas inside brackets do not split); an item is text
 * with bracket groups, each a comma list of numbers or LO-HI ranges. */
#include "launch/launch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

#define MAX_BRACKETS 8

typedef struct {
    const char *start; /* first range inside the brackets */
    const char *end;   /* the closing bracket */
    long count;        /* numbers the group stands for */
} bracket;

/* Parses "LO" or "LO-HI" at p; *width is the digits of LO (for zero padding). */
static int parse_range(const char *list, const char *p, const char *stop, long *lo, long *hi,
                       int *width, const char **next)
{
    const char *q = p;
    while (q < stop && *q >= '0' && *q <= '9')
        q++;
    if (q == p || q - p > 9)
        return tr_fail(TR_ERR_CONFIG, "host list '%s': expected a number at '%.*s'", list,
                       (int)(stop - p), p);
    *width = (int)(q - p);
    *lo = strtol(p, NULL, 10);
    *hi = *lo;
    if (q < stop && *q == '-') {
        const char *r = ++q;
        while (q < stop && *q >= '0' && *q <= '9')
            q++;
        if (q == r || q - r > 9)
            return tr_fail(TR_ERR_CONFIG, "host list '%s': expected a number after '-' in '%.*s'",
                           list, (int)(stop - p), p);
        *hi = strtol(r, NULL, 10);
        if (*hi < *lo)
            return tr_fail(TR_ERR_CONFIG, "host list '%s': range %ld-%ld runs backwards", list,
                           *lo, *hi);
    }
    if (q < stop && *q != ',')
        return tr_fail(TR_ERR_CONFIG, "host list '%s': unexpected '%c' in brackets", list, *q);
    *next = q < stop ? q + 1 : q;
    return TR_OK;
}

/* Finds the bracket groups of the item [p, stop) and how many hosts it expands to. */
static int scan_item(const char *list, const char *p, const char *stop, bracket *br, int *nbr,
                     long *hosts)
{
    *nbr = 0;
    *hosts = 1;
    if (p == stop)
        return tr_fail(TR_ERR_CONFIG, "host list '%s': empty host name", list);
    for (const char *q = p; q < stop; q++) {
        if (*q == ']')
            return tr_fail(TR_ERR_CONFIG, "host list '%s': ']' without '['", list);
        if (*q != '[')
            continue;
        const char *close = memchr(q, ']', (size_t)(stop - q));
        if (!close)
            return tr_fail(TR_ERR_CONFIG, "host list '%s': '[' without ']'", list);
        if (*nbr == MAX_BRACKETS)
            return tr_fail(TR_ERR_CONFIG, "host list '%s': more than %d bracket groups in one "
                                          "name", list, MAX_BRACKETS);
        bracket *b = &br[(*nbr)++];
        b->start = q + 1;
        b->end = close;
        b->count = 0;
        for (const char *r = b->start; r < close;) {
            long lo, hi;
            int width;
            int rc = parse_range(list, r, close, &lo, &hi, &width, &r);
            if (rc)
                return rc;
            b->count += hi - lo + 1;
            if (r == close && r[-1] == ',')
                return tr_fail(TR_ERR_CONFIG, "host list '%s': trailing ',' in brackets", list);
        }
        if (b->count == 0)
            return tr_fail(TR_ERR_CONFIG, "host list '%s': empty brackets", list);
        if (*hosts > 1000000000L / b->count)
            return tr_fail(TR_ERR_CONFIG, "host list '%s' is too long", list);
        *hosts *= b->count;
        q = close;
    }
    return TR_OK;
}

/* The item's end: the next top-level comma, or the end of the list. */
static const char *item_end(const char *p)
{
    int depth = 0;
    for (; *p; p++) {
        if (*p == '[')
            depth++;
        else if (*p == ']')
            depth--;
        else if (*p == ',' && depth == 0)
            break;
    }
    return p;
}

/* Writes host `index` of the item into out. */
static int item_host(const char *list, const char *p, const char *stop, const bracket *br,
                     int nbr, long index, char *out, size_t cap)
{
    long digit[MAX_BRACKETS];
    for (int b = nbr - 1; b >= 0; b--) {
        digit[b] = index % br[b].count;
        index /= br[b].count;
    }
    size_t len = 0;
    const char *q = p;
    for (int b = 0; b <= nbr; b++) {
        const char *text_end = b < nbr ? br[b].start - 1 : stop;
        int n = snprintf(out + len, cap - len, "%.*s", (int)(text_end - q), q);
        if (n < 0 || (size_t)n >= cap - len)
            return tr_fail(TR_ERR_CONFIG, "host list '%s': host name longer than %zu bytes",
                           list, cap - 1);
        len += (size_t)n;
        if (b == nbr)
            break;
        long want = digit[b];
        for (const char *r = br[b].start; r < br[b].end;) {
            long lo, hi;
            int width;
            parse_range(list, r, br[b].end, &lo, &hi, &width, &r);
            if (want <= hi - lo) {
                n = snprintf(out + len, cap - len, "%0*ld", width, lo + want);
                if (n < 0 || (size_t)n >= cap - len)
                    return tr_fail(TR_ERR_CONFIG,
                                   "host list '%s': host name longer than %zu bytes", list,
                                   cap - 1);
                len += (size_t)n;
                break;
            }
            want -= hi - lo + 1;
        }
        q = br[b].end + 1;
    }
    return TR_OK;
}

/* Checks the whole list and counts its hosts; with want >= 0 also writes host `want`. */
static int walk(const char *list, long want, long *count, char *out, size_t cap)
{
    if (!list || !*list)
        return tr_fail(TR_ERR_CONFIG, "host list is empty");
    long total = 0;
    for (const char *p = list;;) {
        const char *stop = item_end(p);
        bracket br[MAX_BRACKETS];
        int nbr;
        long hosts;
        int rc = scan_item(list, p, stop, br, &nbr, &hosts);
        if (rc)
            return rc;
        if (want >= total && want < total + hosts) {
            rc = item_host(list, p, stop, br, nbr, want - total, out, cap);
            if (rc)
                return rc;
        }
        total += hosts;
        if (!*stop)
            break;
        p = stop + 1;
    }
    if (want >= total)
        return tr_fail(TR_ERR_INVALID, "host list '%s' has %ld hosts; there is no host %ld", list,
                       total, want);
    if (count)
        *count = total;
    return TR_OK;
}

int tr_hostlist_count(const char *list, int *count)
{
    long n = 0;
    int rc = walk(list, -1, &n, NULL, 0);
    if (rc)
        return rc;
    if (n > 1000000000L)
        return tr_fail(TR_ERR_CONFIG, "host list '%s' is too long", list);
    *count = (int)n;
    return TR_OK;
}

int tr_hostlist_host(const char *list, int index, char *out, size_t cap)
{
    if (cap == 0)
        return tr_fail(TR_ERR_INVALID, "no room for a host name");
    out[0] = '\0';
    if (index < 0)
        return tr_fail(TR_ERR_INVALID, "host index %d is negative", index);
    return walk(list, index, NULL, out, cap);
}
