/* Recorded cuBLASLt algorithm choices: the key's text form and the choices table's parser
 * (gemm_choice.h). Pure C: compiled into builds without CUDA for tests/cuda's host tests. */
#include "kernels/cuda/gemm_choice.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cu_gemm_key_format(const cu_gemm_key *k, char *buf, size_t n)
{
    snprintf(buf, n, "%d %d %d %d %d %d %d %d %d %d %lld %lld %lld %d %d %d %d %d %d %d %d %lld",
             k->mode, k->ta, k->tb, k->M, k->N, k->K, k->lda, k->ldb, k->ldc, k->batch, k->sA,
             k->sB, k->sC, k->alA, k->alB, k->alC, k->out16, k->bias, k->alBias, k->gelu,
             k->alAux, k->ldAux);
}

/* One decimal integer in [lo, hi] at *s (leading blanks skipped); 0 or -1. */
static int read_int(const char **s, long long lo, long long hi, long long *v)
{
    const char *p = *s;
    while (*p == ' ' || *p == '\t')
        p++;
    if (!(isdigit((unsigned char)*p) || (*p == '-' && isdigit((unsigned char)p[1]))))
        return -1;
    char *e;
    errno = 0;
    long long x = strtoll(p, &e, 10);
    if (errno || x < lo || x > hi || (*e && *e != ' ' && *e != '\t' && *e != '\n'))
        return -1;
    *v = x, *s = e;
    return 0;
}

static int is_alignment(long long a, int zero_ok)
{
    return (zero_ok && a == 0) || (a >= 1 && a <= 256 && (a & (a - 1)) == 0);
}

int cu_gemm_key_parse(const char *s, cu_gemm_key *k, const char **end)
{
    long long v[CU_GEMM_KEY_FIELDS];
    /* each field's range, cu_gemm_key's order */
    static const long long range[CU_GEMM_KEY_FIELDS][2] = {
        {0, 2},         {0, 1},         {0, 1},         {1, 0x7fffffff}, {1, 0x7fffffff},
        {1, 0x7fffffff}, {1, 0x7fffffff}, {1, 0x7fffffff}, {1, 0x7fffffff}, {1, 0x7fffffff},
        {0, 1LL << 50}, {0, 1LL << 50}, {0, 1LL << 50}, {1, 256},        {1, 256},
        {1, 256},       {0, 1},         {0, 2},         {0, 256},        {0, 3},
        {0, 256},       {0, 0x7fffffff}};
    for (int i = 0; i < CU_GEMM_KEY_FIELDS; i++)
        if (read_int(&s, range[i][0], range[i][1], &v[i]))
            return -1;
    /* alignments: powers of two (the bias's and aux's 0 where there is none) */
    if (!is_alignment(v[13], 0) || !is_alignment(v[14], 0) || !is_alignment(v[15], 0) ||
        !is_alignment(v[18], 1) || !is_alignment(v[20], 1))
        return -1;
    /* across fields, what gemm_plan.c's keys are: strides only with a batch, a bias's and the
     * aux matrix's alignment with them, BGRADB with its sums (its bias pointer), the GELU
     * epilogues with a bf16 C and an aux matrix of rows a multiple of 8 elements >= N, DGELU
     * with no bias (cu_matmul_gelu's rules) */
    int batch1 = v[9] == 1, bias = (int)v[17], gelu = (int)v[19], aux = gelu == 1 || gelu == 2;
    if ((batch1 && (v[10] || v[11] || v[12])) || (!bias != !v[18]) || (!aux != !v[20]) ||
        (gelu == 3 && (bias != 1 || v[16])) ||
        (aux && (!v[16] || v[21] < v[4] || v[21] % 8 || (gelu == 2 && bias))) ||
        (!aux && v[21]) || (bias == 2 && !v[16]))
        return -1;
    memset(k, 0, sizeof *k);
    k->mode = (int)v[0], k->ta = (int)v[1], k->tb = (int)v[2];
    k->M = (int)v[3], k->N = (int)v[4], k->K = (int)v[5];
    k->lda = (int)v[6], k->ldb = (int)v[7], k->ldc = (int)v[8], k->batch = (int)v[9];
    k->sA = v[10], k->sB = v[11], k->sC = v[12];
    k->alA = (int)v[13], k->alB = (int)v[14], k->alC = (int)v[15];
    k->out16 = (int)v[16], k->bias = (int)v[17], k->alBias = (int)v[18];
    k->gelu = (int)v[19], k->alAux = (int)v[20], k->ldAux = v[21];
    if (end)
        *end = s;
    return 0;
}

/* The parse's failure: *t freed (nothing kept), "ORIGIN:LINE: what" in err; -1. */
static int fail(cu_gemm_choices *t, char *err, size_t n, const char *origin, int line,
                const char *fmt, ...)
{
    cu_gemm_choices_free(t);
    int off = snprintf(err, n, "%s:%d: ", origin, line);
    if (off < 0 || (size_t)off >= n)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err + off, n - (size_t)off, fmt, ap);
    va_end(ap);
    return -1;
}

/* Grows *p (of *cap elements of size es) to hold at least need; 0 or -1. */
static int grow(void **p, int *cap, int need, size_t es)
{
    if (need <= *cap)
        return 0;
    int c = *cap ? *cap * 2 : 16;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, (size_t)c * es);
    if (!q)
        return -1;
    *p = q, *cap = c;
    return 0;
}

static int same_key(const cu_gemm_key *a, const cu_gemm_key *b)
{
    return !memcmp(a, b, sizeof *a);
}

int cu_gemm_choices_parse(const char *text, const char *origin, cu_gemm_choices *t, char *err,
                          size_t n_err)
{
    memset(t, 0, sizeof *t);
    int cap_rows = 0, cap_blocks = 0, line_no = 0;
    char line[1024];
    for (const char *p = text ? text : ""; *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        line_no++;
        if (len >= sizeof line)
            return fail(t, err, n_err, origin, line_no, "line longer than %zu characters",
                        sizeof line - 1);
        memcpy(line, p, len);
        line[len] = 0;
        p += len + (nl ? 1 : 0);
        for (char *h = line; (h = strchr(h, '#')); h++) /* a comment: '#' first or after a blank */
            if (h == line || h[-1] == ' ' || h[-1] == '\t') {
                *h = 0;
                break;
            }
        char *s = line;
        while (*s == ' ' || *s == '\t' || *s == '\r')
            s++;
        size_t l = strlen(s);
        while (l && (s[l - 1] == ' ' || s[l - 1] == '\t' || s[l - 1] == '\r'))
            s[--l] = 0;
        if (!*s)
            continue;
        const char *rest;
        long long v;
        if (!strncmp(s, "device", 6) && (s[6] == ' ' || s[6] == '\t')) {
            rest = s + 6;
            if (read_int(&rest, 1, 100000, &v))
                return fail(t, err, n_err, origin, line_no, "device: expected <SM count> <name>");
            while (*rest == ' ' || *rest == '\t')
                rest++;
            if (!*rest || strlen(rest) >= sizeof t->blocks[0].name)
                return fail(t, err, n_err, origin, line_no, "device: a name of 1-%zu characters",
                            sizeof t->blocks[0].name - 1);
            if (grow((void **)&t->blocks, &cap_blocks, t->n_blocks + 1, sizeof *t->blocks))
                return fail(t, err, n_err, origin, line_no, "out of memory");
            cu_gemm_device *d = &t->blocks[t->n_blocks++];
            memset(d, 0, sizeof *d);
            d->sms = (int)v;
            snprintf(d->name, sizeof d->name, "%s", rest);
        } else if (!strncmp(s, "cublaslt", 8) && (s[8] == ' ' || s[8] == '\t')) {
            rest = s + 8;
            if (!t->n_blocks || t->blocks[t->n_blocks - 1].version)
                return fail(t, err, n_err, origin, line_no,
                            "cublaslt: one a block, after its device line");
            if (read_int(&rest, 1, 0x7fffffff, &v) || *rest)
                return fail(t, err, n_err, origin, line_no,
                            "cublaslt: expected one version number");
            cu_gemm_device *d = &t->blocks[t->n_blocks - 1];
            for (int b = 0; b + 1 < t->n_blocks; b++)
                if (t->blocks[b].version == (int)v && t->blocks[b].sms == d->sms &&
                    !strcmp(t->blocks[b].name, d->name))
                    return fail(t, err, n_err, origin, line_no,
                                "cublaslt: a second block for this device and version (one a "
                                "device and version: replace the old block)");
            d->version = (int)v;
        } else if (!strncmp(s, "choice", 6) && (s[6] == ' ' || s[6] == '\t')) {
            cu_gemm_choice c;
            memset(&c, 0, sizeof c);
            if (!t->n_blocks)
                return fail(t, err, n_err, origin, line_no, "choice before any device line");
            if (cu_gemm_key_parse(s + 6, &c.key, &rest))
                return fail(t, err, n_err, origin, line_no,
                            "choice: expected %d key integers in range, then %d hex words",
                            CU_GEMM_KEY_FIELDS, CU_GEMM_ALGO_WORDS);
            for (int w = 0; w < CU_GEMM_ALGO_WORDS; w++) {
                while (*rest == ' ' || *rest == '\t')
                    rest++;
                char *e;
                errno = 0;
                unsigned long long x = isxdigit((unsigned char)*rest) ? strtoull(rest, &e, 16) : 0;
                if (!isxdigit((unsigned char)*rest) || errno || (*e && *e != ' ' && *e != '\t'))
                    return fail(t, err, n_err, origin, line_no,
                                "choice: algorithm word %d is not a 64-bit hex number", w + 1);
                c.algo[w] = x, rest = e;
            }
            while (*rest == ' ' || *rest == '\t')
                rest++;
            if (*rest)
                return fail(t, err, n_err, origin, line_no, "choice: unexpected text after the %d "
                            "algorithm words", CU_GEMM_ALGO_WORDS);
            c.block = t->n_blocks - 1;
            for (int i = t->n - 1; i >= 0 && t->rows[i].block == c.block; i--)
                if (same_key(&t->rows[i].key, &c.key))
                    return fail(t, err, n_err, origin, line_no,
                                "choice: this key already has a choice (line order: one a key)");
            if (grow((void **)&t->rows, &cap_rows, t->n + 1, sizeof *t->rows))
                return fail(t, err, n_err, origin, line_no, "out of memory");
            t->rows[t->n++] = c;
        } else
            return fail(t, err, n_err, origin, line_no, "expected `device`, `cublaslt` or "
                        "`choice` (see kernels/cuda/gemm_choice.h)");
    }
    return 0;
}

int cu_gemm_choices_select(cu_gemm_choices *t, const char *device, int sms, int version)
{
    int kept = 0;
    for (int i = 0; i < t->n; i++) {
        const cu_gemm_device *d = &t->blocks[t->rows[i].block];
        if (d->version && d->version == version && d->sms == sms && !strcmp(d->name, device))
            t->rows[kept++] = t->rows[i];
    }
    t->n = kept;
    return kept;
}

const uint64_t *cu_gemm_choices_find(const cu_gemm_choices *t, const cu_gemm_key *k)
{
    for (int i = 0; t && i < t->n; i++)
        if (same_key(&t->rows[i].key, k))
            return t->rows[i].algo;
    return NULL;
}

void cu_gemm_choices_free(cu_gemm_choices *t)
{
    free(t->rows);
    free(t->blocks);
    memset(t, 0, sizeof *t);
}

/* kernels/cuda/gemm_choices.inc: the recorded tables, one C string a line */
static const char *const builtin_lines[] = {
#include "kernels/cuda/gemm_choices.inc"
    NULL};

const char *cu_gemm_choices_builtin(void)
{
    static char *text;
    static int made;
    if (!made) { /* (joined once; first called from the backend's one-time init) */
        size_t n = 1;
        for (int i = 0; builtin_lines[i]; i++)
            n += strlen(builtin_lines[i]) + 1;
        text = malloc(n);
        if (text) {
            char *q = text;
            for (int i = 0; builtin_lines[i]; i++) {
                size_t l = strlen(builtin_lines[i]);
                memcpy(q, builtin_lines[i], l);
                q += l;
                *q++ = '\n';
            }
            *q = 0;
        }
        made = 1;
    }
    return text ? text : "";
}
