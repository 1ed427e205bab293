/* tests/cuda: the attention ops of the CUDA tables against the CPU table (part of
 * test_cuda_ops: ops_tests.h; main in test_cuda_ops.c): the fused attention (flash.cu) forward
 * and backward, plain and with grouped heads, ALiBi and packed rows, and generation's decode
 * ops (attention_decode, attention_gqa_decode) with their caches. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/cuda/ops_check.h"
#include "tests/cuda/ops_tests.h"

/* Fused attention (flash.cu) against the CPU twin: out, lse and the backward's dqkv, through
 * attention_forward/backward (gqa 0: NG = NH, no ALiBi) or attention_gqa_* (NG groups, ALiBi
 * slopes when use_alibi). packed: segment ids (runs of 7, 12, 17, ... tokens per row b). The
 * fp32 mode within TOL_ATT_FP32 (sums in another order, exp of another library), bf16 within
 * TOL_BF16. */
#define TOL_ATT_FP32 1e-4
void test_flash(const tr_kernels *k, int gqa, int B, int T, int NH, int NG, int HS,
                int use_alibi, int packed)
{
    ops_check_group("attention gqa %d B%d T%d NH%d NG%d HS%d alibi %d packed %d [%s]", gqa, B, T,
                    NH, NG, HS, use_alibi, packed, k->name);
    int R = NH / NG;
    size_t nq = (size_t)B * T * NG * (R + 2) * HS, no = (size_t)B * T * NH * HS;
    size_t nl = (size_t)B * NH * T, ns = (size_t)B * (NH + 1) * T;
    int32_t *seg = packed ? malloc((size_t)B * T * sizeof *seg) : NULL;
    for (int i = 0; packed && i < B * T; i++)
        seg[i] = (i % T) / (7 + 5 * (i / T));
    int32_t *gseg = packed ? dev(k, seg, (size_t)B * T * sizeof *seg) : NULL;
    float *qkv = host(nq, -1, 1), *dout = host(no, -1, 1), *slopes = host((size_t)NH, 0.01f, 0.5f);
    float *out = malloc(no * 4), *lse = malloc(nl * 4), *scr = malloc(ns * 4), *dqkv = malloc(nq * 4);
    const float *al = use_alibi ? slopes : NULL;
    float *gq = dev(k, qkv, nq * 4), *gdo = dev(k, dout, no * 4), *gsl = dev(k, slopes, (size_t)NH * 4);
    float *gout = dev(k, NULL, no * 4), *glse = dev(k, NULL, nl * 4), *gscr = dev(k, NULL, ns * 4),
          *gdq = dev(k, NULL, nq * 4);
    const float *gal = use_alibi ? gsl : NULL;
    if (gqa) {
        CPU->attention_gqa_forward(NULL, out, lse, qkv, al, B, T, NH, NG, HS, seg);
        CPU->attention_gqa_backward(NULL, dqkv, scr, dout, qkv, out, lse, al, B, T, NH, NG, HS,
                                    seg);
        k->attention_gqa_forward(NULL, gout, glse, gq, gal, B, T, NH, NG, HS, gseg);
    } else {
        CPU->attention_forward(NULL, out, lse, qkv, B, T, NH, HS, seg);
        CPU->attention_backward(NULL, dqkv, scr, dout, qkv, out, lse, B, T, NH, HS, seg);
        k->attention_forward(NULL, gout, glse, gq, B, T, NH, HS, gseg);
    }
    /* the backward twice: the same bits (every sum in a fixed order; with
     * TRIDENT_CUDA_ATTENTION_BWD=fused too, whose dQ sums pass between blocks) */
    float *gdq2 = dev(k, NULL, nq * 4), *gdqs[2] = {gdq, gdq2};
    for (int r = 0; r < 2; r++) {
        if (gqa)
            k->attention_gqa_backward(NULL, gdqs[r], gscr, gdo, gq, gout, glse, gal, B, T, NH,
                                      NG, HS, gseg);
        else
            k->attention_backward(NULL, gdqs[r], gscr, gdo, gq, gout, glse, B, T, NH, HS, gseg);
    }
    float *h1 = back(k, gdq, nq), *h2 = back(k, gdq2, nq);
    checks++;
    if (memcmp(h1, h2, nq * 4) != 0) {
        failures++;
        printf("FAIL %s dqkv B%d T%d NH%d NG%d HS%d: a second backward differs\n",
               gqa ? "attention_gqa" : "attention", B, T, NH, NG, HS);
    }
    free(h1), free(h2), k->free(gdq2);
    double tol = k == BF16 ? TOL_BF16 : TOL_ATT_FP32;
    const char *names[] = {"out", "lse", "dqkv"};
    float *devs[] = {gout, glse, gdq};
    const float *refs[] = {out, lse, dqkv};
    size_t sizes[] = {no, nl, nq};
    for (int i = 0; i < 3; i++) {
        char what[128];
        snprintf(what, sizeof what, "%s %s B%d T%d NH%d NG%d HS%d%s%s",
                 gqa ? "attention_gqa" : "attention", names[i], B, T, NH, NG, HS,
                 use_alibi ? " alibi" : "", packed ? " packed" : "");
        compare_back(what, k, devs[i], refs[i], sizes[i], tol);
    }
    k->free(gq), k->free(gdo), k->free(gsl), k->free(gout), k->free(glse), k->free(gscr);
    k->free(gdq);
    free(qkv), free(dout), free(slopes), free(out), free(lse), free(scr), free(dqkv);
    if (packed)
        k->free(gseg), free(seg);
}

/* generation with grouped heads and ALiBi: n new positions after past cached ones */
void test_attention_gqa_decode(const tr_kernels *k, int B, int n, int past, int max_T, int NH,
                               int NG, int HS)
{
    ops_check_group("attention_gqa_decode B%d n%d past%d max_T%d NH%d NG%d HS%d [%s]", B, n, past,
                    max_T, NH, NG, HS, k->name);
    int R = NH / NG, L = past + n;
    size_t nq = (size_t)B * n * NG * (R + 2) * HS, no = (size_t)B * n * NH * HS;
    size_t nc = (size_t)B * NG * max_T * HS, ns = (size_t)B * NH * n * L;
    float *qkv = host(nq, -1, 1), *kc = host(nc, -1, 1), *vc = host(nc, -1, 1);
    float *slopes = host((size_t)NH, 0.01f, 0.5f), *out = malloc(no * 4), *sc = malloc(ns * 4);
    float *gq = dev(k, qkv, nq * 4), *gk = dev(k, kc, nc * 4), *gv = dev(k, vc, nc * 4);
    float *gsl = dev(k, slopes, (size_t)NH * 4), *gout = dev(k, NULL, no * 4),
          *gsc = dev(k, NULL, ns * 4);
    CPU->attention_gqa_decode(NULL, out, kc, vc, sc, qkv, slopes, B, n, past, max_T, NH, NG, HS);
    k->attention_gqa_decode(NULL, gout, gk, gv, gsc, gq, gsl, B, n, past, max_T, NH, NG, HS);
    char what[96];
    snprintf(what, sizeof what, "attention_gqa_decode B%d n%d past%d NH%d NG%d", B, n, past, NH,
             NG);
    compare_back(what, k, gout, out, no, tol_of(k));
    snprintf(what, sizeof what, "attention_gqa_decode key cache B%d n%d past%d", B, n, past);
    compare_back(what, k, gk, kc, nc, TOL_FP32);
    k->free(gq), k->free(gk), k->free(gv), k->free(gsl), k->free(gout), k->free(gsc);
    free(qkv), free(kc), free(vc), free(slopes), free(out), free(sc);
}

/* Generation: n new positions after `past` cached ones against the CPU twin; the outputs and
 * both caches (random earlier rows, the new rows appended). */
void test_attention_decode(const tr_kernels *k, int B, int n, int past, int max_T, int NH,
                           int HS)
{
    ops_check_group("attention_decode B%d n%d past%d max_T%d NH%d HS%d [%s]", B, n, past, max_T,
                    NH, HS, k->name);
    int C = NH * HS, L = past + n;
    size_t nqkv = (size_t)B * n * 3 * C, nout = (size_t)B * n * C,
           ncache = (size_t)B * NH * max_T * HS, nsc = (size_t)B * NH * n * L;
    float *qkv = host(nqkv, -1, 1), *kc = host(ncache, -1, 1), *vc = host(ncache, -1, 1);
    float *gkc0 = host_copy(kc, ncache), *gvc0 = host_copy(vc, ncache);
    float *out = malloc(nout * 4), *sc = malloc(nsc * 4);
    CPU->attention_decode(NULL, out, kc, vc, sc, qkv, B, n, past, max_T, NH, HS);
    float *gqkv = dev(k, qkv, nqkv * 4), *gkc = dev(k, gkc0, ncache * 4),
          *gvc = dev(k, gvc0, ncache * 4), *gout = dev(k, NULL, nout * 4),
          *gsc = dev(k, NULL, nsc * 4);
    k->attention_decode(NULL, gout, gkc, gvc, gsc, gqkv, B, n, past, max_T, NH, HS);
    char what[96];
    const float *refs[] = {out, kc, vc};
    float *devs[] = {gout, gkc, gvc};
    size_t sizes[] = {nout, ncache, ncache};
    const char *names[] = {"out", "key cache", "value cache"};
    for (int i = 0; i < 3; i++) {
        snprintf(what, sizeof what, "attention_decode %s B%d n%d past%d NH%d HS%d", names[i], B,
                 n, past, NH, HS);
        compare_back(what, k, devs[i], refs[i], sizes[i], tol_of(k));
    }
    k->free(gqkv), k->free(gkc), k->free(gvc), k->free(gout), k->free(gsc);
    free(qkv), free(kc), free(vc), free(gkc0), free(gvc0), free(out), free(sc);
}
