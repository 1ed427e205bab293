/* tests/cuda: the mixture-of-experts kernels' thread bodies (kernels/cuda/moe.cuh, the GPU's
 * moe_router_forward / _backward, gather_rows, scatter_add_rows / _backward) run on the host
 * over moe.cu's grids (moe_emu.h) against the CPU table's ops (kernels/cpu/moe.c), on every
 * machine. Bit for bit: the router's idx, weights, probs, lse and dlogits (random logits, many
 * ties, -0 beside +0, -inf, rows with NaN; k = 1, k = E up to 256, both pre_softmax modes, aux
 * and z terms or none, N not a multiple of the 128-thread blocks), gather_rows, the scatter by
 * both of its paths (the sort's and the column walk; weighted or not, repeated rows, one row
 * taking every routed row across many chunks, M not a multiple of the 8-row chunks, C not one
 * of the 128-column blocks, one column), and dsrc; dw within one float ulp (the CPU's dot is
 * vectorised, adding in another order). Each launch runs its threads in order and the last
 * first, with the same bits. Exit 0 when all agree, 1 otherwise. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "tests/cuda/moe_emu.h"

static const tr_kernels *CPU;
static uint64_t rng = 0x9E3779B97F4A7C15ull;
static int failures, checks;

static float uniform(float lo, float hi)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return lo + (hi - lo) * (float)((rng >> 40) * (1.0 / 16777216.0));
}

static float *floats(size_t n, float lo, float hi)
{
    float *p = malloc((n ? n : 1) * sizeof *p);
    for (size_t i = 0; i < n; i++)
        p[i] = uniform(lo, hi);
    return p;
}

static void verdict(int ok, const char *what)
{
    checks++;
    failures += !ok;
    if (!ok)
        printf("FAIL %s\n", what);
}

/* the same bits (floats: or NaN where the CPU has NaN) */
static void compare_bits(const char *what, const void *got, const void *ref, size_t n,
                         int is_float)
{
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++) {
        const char *g = (const char *)got + i * 4, *r = (const char *)ref + i * 4;
        int nan = is_float && isnan(*(const float *)r) && isnan(*(const float *)g);
        if (memcmp(g, r, 4) && !nan && !bad++)
            first = i;
    }
    char label[240];
    snprintf(label, sizeof label, "%s: %zu of %zu differ (first at %zu)", what, bad, n, first);
    verdict(!bad, label);
}

/* logits: 0 uniform, 1 ties (five values, -0 and +0 among them, a -inf), 2 NaN in some rows */
static void same(const char *what, const float *got, const float *ref, size_t n)
{
    compare_bits(what, got, ref, n, 1);
}

static float *logits_of(int N, int E, int mode)
{
    float *l = floats((size_t)N * E, -3, 3);
    static const float tie[6] = {-1.0f, 0.5f, -0.0f, 0.0f, 1.0f, 0.5f};
    for (size_t i = 0; mode && i < (size_t)N * E; i++) {
        if (mode == 1)
            l[i] = i % 97 == 5 ? -INFINITY : tie[(size_t)uniform(0, 6) % 6];
        else if (i % 11 == 3)
            l[i] = NAN;
    }
    return l;
}

static void check_router(int N, int E, int k, int pre, int mode)
{
    char what[160];
    size_t ne = (size_t)N * E, nk = (size_t)N * k;
    float *l = logits_of(N, E, mode);
    int32_t *ri = malloc(nk * 4), *gi = malloc(nk * 4);
    float *rw = malloc(nk * 4), *rp = malloc(ne * 4), *rl = malloc((size_t)N * 4);
    float *gw = malloc(nk * 4), *gp = malloc(ne * 4), *gl = malloc((size_t)N * 4);
    CPU->moe_router_forward(NULL, ri, rw, rp, rl, l, N, E, k, pre);
    float *dw = floats(nk, -1, 1), *aux = floats((size_t)E, -1, 1);
    float *rd = malloc(ne * 4), *gd = malloc(ne * 4);
    for (int reverse = 0; reverse < 2; reverse++) {
        memset(gi, 0xff, nk * 4);
        emu_moe_router_forward(gi, gw, gp, gl, l, N, E, k, pre, reverse);
        const char *ord = reverse ? ", last thread first" : "";
        snprintf(what, sizeof what, "router N %d E %d k %d pre %d logits %d%s", N, E, k, pre,
                 mode, ord);
        char w2[200];
        snprintf(w2, sizeof w2, "%s: idx", what);
        compare_bits(w2, gi, ri, nk, 0);
        snprintf(w2, sizeof w2, "%s: weights", what);
        same(w2, gw, rw, nk);
        snprintf(w2, sizeof w2, "%s: probs", what);
        same(w2, gp, rp, ne);
        snprintf(w2, sizeof w2, "%s: lse", what);
        same(w2, gl, rl, (size_t)N);
        for (int terms = 0; terms < 2; terms++) { /* aux and z, or neither */
            const float *a = terms ? aux : NULL;
            float z = terms ? 0.3f : 0.0f;
            CPU->moe_router_backward(NULL, rd, dw, ri, rw, rp, rl, a, z, N, E, k, pre);
            memset(gd, 0xff, ne * 4);
            emu_moe_router_backward(gd, dw, ri, rw, rp, rl, a, z, N, E, k, pre, reverse);
            snprintf(w2, sizeof w2, "%s: dlogits (%s)", what, terms ? "aux, z" : "weights only");
            same(w2, gd, rd, ne);
        }
    }
    free(l), free(ri), free(gi), free(rw), free(rp), free(rl), free(gw), free(gp), free(gl);
    free(dw), free(aux), free(rd), free(gd);
}

/* idx patterns: 0 repeats ((i 7 + i / 3) % N), 1 every routed row into row 0, 2 random */
static int32_t *rows_of(int M, int N, int pattern)
{
    int32_t *idx = malloc((size_t)M * 4);
    for (int i = 0; i < M; i++)
        idx[i] = pattern == 0 ? (int32_t)((i * 7 + i / 3) % N)
                 : pattern == 1 ? 0
                                : (int32_t)((size_t)uniform(0, (float)N) % (size_t)N);
    return idx;
}

static void check_rows(int N, int M, int C, int weighted, int pattern)
{
    char what[160];
    size_t nc = (size_t)N * C, mc = (size_t)M * C;
    int32_t *idx = rows_of(M, N, pattern);
    float *src = floats(nc, -1, 1), *routed = floats(mc, -1, 1), *w = floats((size_t)M, 0, 1);
    const float *wp = weighted ? w : NULL;
    snprintf(what, sizeof what, "rows N %d M %d C %d weighted %d pattern %d", N, M, C, weighted,
             pattern);
    char w2[220];
    float *rg = malloc(mc * 4), *gg = malloc(mc * 4);
    CPU->gather_rows(NULL, rg, src, idx, M, C);
    for (int reverse = 0; reverse < 2; reverse++) {
        memset(gg, 0xff, mc * 4);
        emu_gather_rows(gg, src, idx, M, C, reverse);
        snprintf(w2, sizeof w2, "%s: gather_rows%s", what, reverse ? " (reverse)" : "");
        same(w2, gg, rg, mc);
    }
    float *out0 = floats(nc, -1, 1), *ref = malloc(nc * 4), *got = malloc(nc * 4);
    memcpy(ref, out0, nc * 4);
    CPU->scatter_add_rows(NULL, ref, routed, idx, wp, M, C);
    for (int sorted = 0; sorted < 2; sorted++)
        for (int reverse = 0; reverse < 2; reverse++) {
            memcpy(got, out0, nc * 4);
            emu_scatter_add_rows(got, routed, idx, wp, M, C, sorted, reverse);
            snprintf(w2, sizeof w2, "%s: scatter_add_rows (%s%s)", what,
                     sorted ? "sorted" : "columns", reverse ? ", reverse" : "");
            same(w2, got, ref, nc);
        }
    float *dout = floats(nc, -1, 1), *rd = malloc(mc * 4), *gd = malloc(mc * 4);
    float *rdw = malloc((size_t)M * 4), *gdw = malloc((size_t)M * 4);
    CPU->scatter_add_rows_backward(NULL, rd, rdw, dout, routed, idx, wp, M, C);
    for (int reverse = 0; reverse < 2; reverse++) {
        memset(gd, 0xff, mc * 4);
        memset(gdw, 0xff, (size_t)M * 4);
        emu_scatter_add_rows_backward(gd, gdw, dout, routed, idx, wp, M, C, reverse);
        snprintf(w2, sizeof w2, "%s: scatter backward dsrc%s", what, reverse ? " (reverse)" : "");
        same(w2, gd, rd, mc);
        int ulp_ok = 1;
        for (int i = 0; i < M; i++) /* one float step apart at most */
            ulp_ok &= gdw[i] == rdw[i] || gdw[i] == nextafterf(rdw[i], INFINITY) ||
                      gdw[i] == nextafterf(rdw[i], -INFINITY);
        snprintf(w2, sizeof w2, "%s: scatter backward dw within one ulp%s", what,
                 reverse ? " (reverse)" : "");
        verdict(ulp_ok, w2);
        memset(gd, 0xff, mc * 4);
        emu_scatter_add_rows_backward(gd, NULL, dout, routed, idx, wp, M, C, reverse);
        snprintf(w2, sizeof w2, "%s: scatter backward dsrc, no dw%s", what,
                 reverse ? " (reverse)" : "");
        same(w2, gd, rd, mc);
    }
    free(idx), free(src), free(routed), free(w), free(rg), free(gg), free(out0), free(ref);
    free(got), free(dout), free(rd), free(gd), free(rdw), free(gdw);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    CPU = tr_kernels_cpu();
    for (int pre = 0; pre < 2; pre++) {
        check_router(300, 8, 2, pre, 0);  /* Mixtral's top-2; 300 rows: 2 full blocks + 44 */
        check_router(131, 6, 1, pre, 0);  /* k = 1 */
        check_router(77, 6, 6, pre, 0);   /* k = E */
        check_router(129, 64, 8, pre, 1); /* ties, -0 beside +0, -inf */
        check_router(33, 5, 5, pre, 1);   /* ties with k = E */
        check_router(40, 256, 8, pre, 0); /* E = 256 */
        check_router(9, 7, 3, pre, 2);    /* NaN: the CPU's own selection loop */
    }
    check_router(6, 256, 256, 0, 0); /* k = E = 256 */
    check_router(6, 256, 256, 1, 1);
    for (int weighted = 0; weighted < 2; weighted++) {
        check_rows(64, 1001, 300, weighted, 0); /* 3 column blocks, the last of 44 */
        check_rows(16, 37, 1, weighted, 2);     /* one column */
        check_rows(5, 300, 129, weighted, 0);   /* runs of 60 across chunks */
        check_rows(2000, 1500, 40, weighted, 2); /* rows taken once, twice, never */
        check_rows(3, 100, 130, weighted, 1);   /* one run of 100 into row 0 */
    }
    printf("%d of %d checks agree\n", checks - failures, checks);
    return failures ? 1 : 0;
}
