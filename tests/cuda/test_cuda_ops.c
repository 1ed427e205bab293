/* tests/cuda: every op of the CUDA tables against the CPU table on the same random inputs.
 * Error of an output = max_i |gpu_i - cpu_i| / max_i |cpu_i| (relative to the array's
 * largest magnitude, so sums whose terms cancel are judged against their scale).
 * "cuda-fp32" must agree within 1e-5 (the fused attention 1e-4), "cuda" (bf16 products) within
 * 1e-2. Shapes include
 * odd sizes, strided sub-matrices and operands that are only 4-byte aligned (views into a
 * flat parameter buffer are).
 * Exit 77 (SKIP) with the reason where there is no GPU; 0 when all agree; 1 otherwise (also
 * where a GPU is present but the backend cannot start: cuda_skip.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "kernels/cuda/bf16.h"
#include "kernels/cuda/cuda.h"
#include "tests/cuda/cuda_skip.h"
#include "tests/cuda/ops_check.h"
#include "kernels/kernels.h"

static double tol_of(const tr_kernels *k) { return k == BF16 ? TOL_BF16 : TOL_FP32; }

/* ---------------------------------------------------------------- GEMM */

static void check_gemm(const tr_kernels *k, int ta, int tb, int M, int N, int K, float alpha,
                       float beta, int pad, int misalign)
{
    int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
    size_t na = (size_t)(ta ? K : M) * lda + 1, nb = (size_t)(tb ? N : K) * ldb + 1,
           nc = (size_t)M * ldc + 1;
    float *A = host(na, -1, 1), *B = host(nb, -1, 1), *C = host(nc, -1, 1);
    float *Cref = dup(C, nc);
    CPU->gemm(NULL, ta, tb, M, N, K, alpha, A + misalign, lda, B + misalign, ldb, beta,
              Cref + misalign, ldc);
    float *dA = dev(k, A, na * 4), *dB = dev(k, B, nb * 4), *dC = dev(k, C, nc * 4);
    k->gemm(NULL, ta, tb, M, N, K, alpha, dA + misalign, lda, dB + misalign, ldb, beta,
            dC + misalign, ldc);
    float *got = back(k, dC, nc);
    char what[96];
    snprintf(what, sizeof what, "gemm %c%c %dx%dx%d a%.1f b%.1f%s%s", ta ? 'T' : 'N',
             tb ? 'T' : 'N', M, N, K, alpha, beta, pad ? " strided" : "",
             misalign ? " 4B-aligned" : "");
    compare(what, k, got, Cref, nc, tol_of(k));
    k->free(dA), k->free(dB), k->free(dC);
    free(A), free(B), free(C), free(Cref), free(got);
}

static void test_gemm(const tr_kernels *k)
{
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            check_gemm(k, ta, tb, 65, 47, 33, 1.0f, 0.0f, 0, 0);
            check_gemm(k, ta, tb, 256, 384, 128, 0.7f, 0.3f, 0, 0);
            check_gemm(k, ta, tb, 100, 72, 96, 1.0f, 1.0f, 5, 1);
        }
    check_gemm(k, 0, 1, 1024, 2304, 768, 1.0f, 0.0f, 0, 0); /* a GPT-2 qkv projection */
    check_gemm(k, 1, 0, 768, 2304, 1024, 1.0f, 1.0f, 0, 0); /* its weight gradient */
    check_gemm(k, 0, 0, 33, 17, 0, 1.0f, 0.5f, 0, 0);       /* K = 0: C = beta C */
    check_gemm(k, 0, 0, 33, 17, 9, 0.0f, 0.0f, 0, 0);       /* alpha 0, beta 0: zeros */
}

/* ---------------------------------------------------------------- elementwise, bias, GELU */

static void test_elementwise(const tr_kernels *k)
{
    size_t n = 1000003;
    float *a = host(n, -2, 2), *b = host(n, -2, 2);
    float *ref = malloc(n * 4);
    float *da = dev(k, a, n * 4), *db = dev(k, b, n * 4), *dout = dev(k, NULL, n * 4);
    CPU->add(NULL, ref, a, b, n);
    k->add(NULL, dout, da, db, n);
    float *got = back(k, dout, n);
    compare("add", k, got, ref, n, TOL_FP32);
    free(got);
    float *y = dup(a, n);
    CPU->axpy(NULL, y, 0.3f, b, n);
    k->axpy(NULL, da, 0.3f, db, n);
    got = back(k, da, n);
    compare("axpy", k, got, y, n, TOL_FP32);
    free(got);
    CPU->scale(NULL, y, -1.7f, n);
    k->scale(NULL, da, -1.7f, n);
    got = back(k, da, n);
    compare("scale", k, got, y, n, TOL_FP32);
    free(got);
    CPU->scale_rows(NULL, y, b, (int)n, 1); /* n rows of one column */
    k->scale_rows(NULL, da, db, (int)n, 1);
    got = back(k, da, n);
    compare("scale_rows", k, got, y, n, TOL_FP32);
    free(got);
    CPU->gelu_forward(NULL, ref, b, n);
    k->gelu_forward(NULL, dout, db, n);
    got = back(k, dout, n);
    compare("gelu_forward", k, got, ref, n, TOL_FP32);
    free(got);
    CPU->gelu_backward(NULL, ref, b, a, n);
    k->to_device(NULL, da, a, n * 4);
    k->gelu_backward(NULL, dout, db, da, n);
    got = back(k, dout, n);
    compare("gelu_backward", k, got, ref, n, TOL_FP32);
    free(got);
    /* bias over (N, C) */
    int N = 1000, C = 333;
    float *x = host((size_t)N * C, -1, 1), *bias = host((size_t)C, -1, 1);
    float *dbias = host((size_t)C, -1, 1);
    float *xr = dup(x, (size_t)N * C), *dbr = dup(dbias, (size_t)C);
    float *dx = dev(k, x, (size_t)N * C * 4), *dbi = dev(k, bias, (size_t)C * 4),
          *ddb = dev(k, dbias, (size_t)C * 4);
    CPU->bias_add(NULL, xr, bias, N, C);
    k->bias_add(NULL, dx, dbi, N, C);
    got = back(k, dx, (size_t)N * C);
    compare("bias_add", k, got, xr, (size_t)N * C, TOL_FP32);
    free(got);
    CPU->bias_backward(NULL, dbr, x, N, C);
    k->to_device(NULL, dx, x, (size_t)N * C * 4);
    k->bias_backward(NULL, ddb, dx, N, C);
    got = back(k, ddb, (size_t)C);
    compare("bias_backward (accumulates)", k, got, dbr, (size_t)C, TOL_FP32);
    free(got);
    k->free(da), k->free(db), k->free(dout), k->free(dx), k->free(dbi), k->free(ddb);
    free(a), free(b), free(ref), free(y), free(x), free(bias), free(dbias), free(xr), free(dbr);
}

/* ---------------------------------------------------------------- layernorm */

static void test_layernorm(const tr_kernels *k, int N, int C)
{
    size_t nc = (size_t)N * C;
    float *x = host(nc, -3, 3), *w = host((size_t)C, 0.5f, 1.5f), *b = host((size_t)C, -1, 1);
    float *dy = host(nc, -1, 1), *dx0 = host(nc, -1, 1), *dw0 = host((size_t)C, -1, 1),
          *db0 = host((size_t)C, -1, 1);
    float *out = malloc(nc * 4), *mean = malloc((size_t)N * 4), *rstd = malloc((size_t)N * 4);
    float *dx = dup(dx0, nc), *dw = dup(dw0, (size_t)C), *db = dup(db0, (size_t)C);
    CPU->layernorm_forward(NULL, out, mean, rstd, x, w, b, N, C, 1e-5f);
    CPU->layernorm_backward(NULL, dx, dw, db, dy, x, w, mean, rstd, N, C);
    float *gx = dev(k, x, nc * 4), *gw = dev(k, w, (size_t)C * 4), *gb = dev(k, b, (size_t)C * 4),
          *gdy = dev(k, dy, nc * 4), *gout = dev(k, NULL, nc * 4),
          *gmean = dev(k, NULL, (size_t)N * 4), *grstd = dev(k, NULL, (size_t)N * 4),
          *gdx = dev(k, dx0, nc * 4), *gdw = dev(k, dw0, (size_t)C * 4),
          *gdb = dev(k, db0, (size_t)C * 4);
    k->layernorm_forward(NULL, gout, gmean, grstd, gx, gw, gb, N, C, 1e-5f);
    k->layernorm_backward(NULL, gdx, gdw, gdb, gdy, gx, gw, gmean, grstd, N, C);
    char what[64];
    float *got;
#define CMP(name, d, ref, n)                                                                   \
    snprintf(what, sizeof what, "layernorm %s %dx%d", name, N, C);                             \
    got = back(k, d, n);                                                                       \
    compare(what, k, got, ref, n, TOL_FP32);                                                   \
    free(got);
    CMP("out", gout, out, nc);
    CMP("mean", gmean, mean, (size_t)N);
    CMP("rstd", grstd, rstd, (size_t)N);
    CMP("dinp (accumulates)", gdx, dx, nc);
    CMP("dweight", gdw, dw, (size_t)C);
    CMP("dbias", gdb, db, (size_t)C);
#undef CMP
    k->free(gx), k->free(gw), k->free(gb), k->free(gdy), k->free(gout), k->free(gmean);
    k->free(grstd), k->free(gdx), k->free(gdw), k->free(gdb);
    free(x), free(w), free(b), free(dy), free(dx0), free(dw0), free(db0), free(out), free(mean);
    free(rstd), free(dx), free(dw), free(db);
}

/* ---------------------------------------------------------------- Llama's ops (issue 17) */

static void test_family(const tr_kernels *k, int N, int C)
{
    size_t nc = (size_t)N * C;
    float *x = host(nc, -3, 3), *w = host((size_t)C, 0.5f, 1.5f), *dy = host(nc, -1, 1);
    float *dx0 = host(nc, -1, 1), *dw0 = host((size_t)C, -1, 1);
    float *out = malloc(nc * 4), *rstd = malloc((size_t)N * 4);
    float *dx = dup(dx0, nc), *dw = dup(dw0, (size_t)C), *sw = malloc(nc * 2), *dsw = malloc(nc * 4);
    CPU->rmsnorm_forward(NULL, out, rstd, x, w, N, C, 1e-6f);
    CPU->rmsnorm_backward(NULL, dx, dw, dy, x, w, rstd, N, C);
    CPU->swiglu_forward(NULL, sw, x, nc / 2);
    CPU->swiglu_backward(NULL, dsw, x, dy, nc / 2);
    float *gx = dev(k, x, nc * 4), *gw = dev(k, w, (size_t)C * 4), *gdy = dev(k, dy, nc * 4);
    float *gout = dev(k, NULL, nc * 4), *grstd = dev(k, NULL, (size_t)N * 4);
    float *gdx = dev(k, dx0, nc * 4), *gdw = dev(k, dw0, (size_t)C * 4);
    float *gsw = dev(k, NULL, nc * 2), *gdsw = dev(k, NULL, nc * 4);
    k->rmsnorm_forward(NULL, gout, grstd, gx, gw, N, C, 1e-6f);
    k->rmsnorm_backward(NULL, gdx, gdw, gdy, gx, gw, grstd, N, C);
    k->swiglu_forward(NULL, gsw, gx, nc / 2);
    k->swiglu_backward(NULL, gdsw, gx, gdy, nc / 2);
    char what[64];
    float *got;
#define CMP(name, d, ref, n)                                                                   \
    snprintf(what, sizeof what, "%s %dx%d", name, N, C);                                       \
    got = back(k, d, n);                                                                       \
    compare(what, k, got, ref, n, TOL_FP32);                                                   \
    free(got);
    CMP("rmsnorm out", gout, out, nc);
    CMP("rmsnorm rstd", grstd, rstd, (size_t)N);
    CMP("rmsnorm dinp (accumulates)", gdx, dx, nc);
    CMP("rmsnorm dweight", gdw, dw, (size_t)C);
    CMP("swiglu out", gsw, sw, nc / 2);
    CMP("swiglu dinp", gdsw, dsw, nc);
    /* rope on qkv rows of (NG 2, R 2 + 2, HS 16), rot 12, T = 8 positions, N / 8 sequences */
    int T = 8, NG = 2, R = 2, HS = 16, rot = 12, B = N / T;
    size_t nq = (size_t)B * T * NG * (R + 2) * HS, half = (size_t)rot / 2;
    float *q = host(nq, -1, 1), *cs = host((size_t)T * half, -1, 1), *sn = host((size_t)T * half, -1, 1);
    float *gq = dev(k, q, nq * 4), *gcs = dev(k, cs, (size_t)T * half * 4),
          *gsn = dev(k, sn, (size_t)T * half * 4);
    CPU->rope(NULL, q, cs, sn, B, T, NG, R, HS, rot, 0, NULL);
    k->rope(NULL, gq, gcs, gsn, B, T, NG, R, HS, rot, 0, NULL);
    CMP("rope", gq, q, nq);
    CPU->rope(NULL, q, cs, sn, B, T, NG, R, HS, rot, 1, NULL);
    k->rope(NULL, gq, gcs, gsn, B, T, NG, R, HS, rot, 1, NULL);
    CMP("rope inverse", gq, q, nq);
#undef CMP
    k->free(gx), k->free(gw), k->free(gdy), k->free(gout), k->free(grstd), k->free(gdx);
    k->free(gdw), k->free(gsw), k->free(gdsw), k->free(gq), k->free(gcs), k->free(gsn);
    free(x), free(w), free(dy), free(dx0), free(dw0), free(out), free(rstd), free(dx), free(dw);
    free(sw), free(dsw), free(q), free(cs), free(sn);
}

/* Fused attention (flash.cu) against the CPU twin: out, lse and the backward's dqkv, through
 * attention_forward/backward (gqa 0: NG = NH, no ALiBi) or attention_gqa_* (NG groups, ALiBi
 * slopes when use_alibi). packed: segment ids (runs of 7, 12, 17, ... tokens per row b). The
 * fp32 mode within TOL_ATT_FP32 (sums in another order, exp of another library), bf16 within
 * TOL_BF16. */
#define TOL_ATT_FP32 1e-4
static void test_flash(const tr_kernels *k, int gqa, int B, int T, int NH, int NG, int HS,
                       int use_alibi, int packed)
{
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
        k->attention_gqa_backward(NULL, gdq, gscr, gdo, gq, gout, glse, gal, B, T, NH, NG, HS,
                                  gseg);
    } else {
        CPU->attention_forward(NULL, out, lse, qkv, B, T, NH, HS, seg);
        CPU->attention_backward(NULL, dqkv, scr, dout, qkv, out, lse, B, T, NH, HS, seg);
        k->attention_forward(NULL, gout, glse, gq, B, T, NH, HS, gseg);
        k->attention_backward(NULL, gdq, gscr, gdo, gq, gout, glse, B, T, NH, HS, gseg);
    }
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
        float *got = back(k, devs[i], sizes[i]);
        compare(what, k, got, refs[i], sizes[i], tol);
        free(got);
    }
    k->free(gq), k->free(gdo), k->free(gsl), k->free(gout), k->free(glse), k->free(gscr);
    k->free(gdq);
    free(qkv), free(dout), free(slopes), free(out), free(lse), free(scr), free(dqkv);
    if (packed)
        k->free(gseg), free(seg);
}

/* generation with grouped heads and ALiBi: n new positions after past cached ones */
static void test_attention_gqa_decode(const tr_kernels *k, int B, int n, int past, int max_T,
                                      int NH, int NG, int HS)
{
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
    float *got = back(k, gout, no);
    compare(what, k, got, out, no, tol_of(k));
    free(got);
    snprintf(what, sizeof what, "attention_gqa_decode key cache B%d n%d past%d", B, n, past);
    got = back(k, gk, nc);
    compare(what, k, got, kc, nc, TOL_FP32);
    free(got);
    k->free(gq), k->free(gk), k->free(gv), k->free(gsl), k->free(gout), k->free(gsc);
    free(qkv), free(kc), free(vc), free(slopes), free(out), free(sc);
}

/* ---------------------------------------------------------------- attention */

/* Generation: n new positions after `past` cached ones against the CPU twin; the outputs and
 * both caches (random earlier rows, the new rows appended). */
static void test_attention_decode(const tr_kernels *k, int B, int n, int past, int max_T, int NH,
                                  int HS)
{
    int C = NH * HS, L = past + n;
    size_t nqkv = (size_t)B * n * 3 * C, nout = (size_t)B * n * C,
           ncache = (size_t)B * NH * max_T * HS, nsc = (size_t)B * NH * n * L;
    float *qkv = host(nqkv, -1, 1), *kc = host(ncache, -1, 1), *vc = host(ncache, -1, 1);
    float *gkc0 = dup(kc, ncache), *gvc0 = dup(vc, ncache);
    float *out = malloc(nout * 4), *sc = malloc(nsc * 4);
    CPU->attention_decode(NULL, out, kc, vc, sc, qkv, B, n, past, max_T, NH, HS);
    float *gqkv = dev(k, qkv, nqkv * 4), *gkc = dev(k, gkc0, ncache * 4),
          *gvc = dev(k, gvc0, ncache * 4), *gout = dev(k, NULL, nout * 4),
          *gsc = dev(k, NULL, nsc * 4);
    k->attention_decode(NULL, gout, gkc, gvc, gsc, gqkv, B, n, past, max_T, NH, HS);
    char what[96];
    float *got;
    const float *refs[] = {out, kc, vc};
    float *devs[] = {gout, gkc, gvc};
    size_t sizes[] = {nout, ncache, ncache};
    const char *names[] = {"out", "key cache", "value cache"};
    for (int i = 0; i < 3; i++) {
        snprintf(what, sizeof what, "attention_decode %s B%d n%d past%d NH%d HS%d", names[i], B,
                 n, past, NH, HS);
        got = back(k, devs[i], sizes[i]);
        compare(what, k, got, refs[i], sizes[i], tol_of(k));
        free(got);
    }
    k->free(gqkv), k->free(gkc), k->free(gvc), k->free(gout), k->free(gsc);
    free(qkv), free(kc), free(vc), free(gkc0), free(gvc0), free(out), free(sc);
}

/* ---------------------------------------------------------------- cross-entropy */

static void test_xent(const tr_kernels *k)
{
    int N = 37, V = 1000, n_valid = 990, v_start = 500;
    size_t nl = (size_t)N * V;
    float *logits = host(nl, -8, 8);
    int32_t *targets = malloc((size_t)N * sizeof *targets);
    for (int n = 0; n < N; n++) /* some held here, some on other ranks */
        targets[n] = n % 5 == 0 ? 17 : 500 + (n * 97) % n_valid;
    float *maxv = malloc((size_t)N * 4), *sumexp = malloc((size_t)N * 4),
          *picked = malloc((size_t)N * 4), *losses = malloc((size_t)N * 4),
          *dlogits = malloc(nl * 4);
    CPU->xent_row_max(NULL, maxv, logits, N, V, n_valid);
    CPU->xent_row_sumexp(NULL, sumexp, logits, maxv, N, V, n_valid);
    CPU->xent_pick(NULL, picked, logits, targets, N, V, v_start);
    CPU->xent_loss(NULL, losses, maxv, sumexp, picked, N);
    CPU->xent_backward(NULL, dlogits, logits, maxv, sumexp, targets, N, V, n_valid, v_start,
                       0.25f);
    float *gl = dev(k, logits, nl * 4);
    int32_t *gt = dev(k, targets, (size_t)N * 4);
    float *gmax = dev(k, NULL, (size_t)N * 4), *gsum = dev(k, NULL, (size_t)N * 4),
          *gpick = dev(k, NULL, (size_t)N * 4), *gloss = dev(k, NULL, (size_t)N * 4);
    k->xent_row_max(NULL, gmax, gl, N, V, n_valid);
    k->xent_row_sumexp(NULL, gsum, gl, gmax, N, V, n_valid);
    k->xent_pick(NULL, gpick, gl, gt, N, V, v_start);
    k->xent_loss(NULL, gloss, gmax, gsum, gpick, N);
    k->xent_backward(NULL, gl, gl, gmax, gsum, gt, N, V, n_valid, v_start, 0.25f); /* in place */
    float *got;
    got = back(k, gmax, (size_t)N);
    compare("xent_row_max", k, got, maxv, (size_t)N, TOL_FP32);
    free(got);
    got = back(k, gsum, (size_t)N);
    compare("xent_row_sumexp", k, got, sumexp, (size_t)N, TOL_FP32);
    free(got);
    got = back(k, gpick, (size_t)N);
    compare("xent_pick", k, got, picked, (size_t)N, TOL_FP32);
    free(got);
    got = back(k, gloss, (size_t)N);
    compare("xent_loss", k, got, losses, (size_t)N, TOL_FP32);
    free(got);
    got = back(k, gl, nl);
    compare("xent_backward (in place)", k, got, dlogits, nl, TOL_FP32);
    free(got);
    /* the chunked head's fused ops (issue 24 item 8): stats in one read, the rescale of a
     * rank's sums to another max, loss + backward with loss weights, in place */
    float *weights = host((size_t)N, 0, 2), *cmax = malloc((size_t)N * 4);
    float *csum = malloc((size_t)N * 4), *cpick = malloc((size_t)N * 4);
    float *closs = malloc((size_t)N * 4), *cd = dup(logits, nl), *shifted = malloc((size_t)N * 4);
    for (int n = 0; n < N; n++)
        shifted[n] = maxv[n] + 0.5f; /* as if another rank held a larger max */
    CPU->xent_stats(NULL, cmax, csum, cpick, logits, targets, N, V, n_valid, v_start);
    CPU->xent_loss_backward(NULL, closs, cd, cd, cmax, csum, cpick, targets, weights, N, V,
                            n_valid, v_start, 0.25f);
    float *gl2 = dev(k, logits, nl * 4), *gw = dev(k, weights, (size_t)N * 4);
    float *gshift = dev(k, shifted, (size_t)N * 4);
    k->xent_stats(NULL, gmax, gsum, gpick, gl2, gt, N, V, n_valid, v_start);
    got = back(k, gmax, (size_t)N);
    compare("xent_stats: max", k, got, cmax, (size_t)N, TOL_FP32);
    free(got);
    got = back(k, gsum, (size_t)N);
    compare("xent_stats: sumexp", k, got, csum, (size_t)N, TOL_FP32);
    free(got);
    got = back(k, gpick, (size_t)N);
    compare("xent_stats: picked", k, got, cpick, (size_t)N, TOL_FP32);
    free(got);
    k->xent_loss_backward(NULL, gloss, gl2, gl2, gmax, gsum, gpick, gt, gw, N, V, n_valid,
                          v_start, 0.25f);
    got = back(k, gloss, (size_t)N);
    compare("xent_loss_backward: losses", k, got, closs, (size_t)N, TOL_FP32);
    free(got);
    got = back(k, gl2, nl);
    compare("xent_loss_backward: weighted dlogits (in place)", k, got, cd, nl, TOL_FP32);
    free(got);
    float *before = back(k, gl2, nl);
    k->xent_loss_backward(NULL, gloss, gl2, gl2, gmax, gsum, gpick, gt, NULL, N, V, n_valid,
                          v_start, 0.0f); /* scale 0: the losses alone, logits untouched */
    got = back(k, gl2, nl);
    compare("xent_loss_backward scale 0: untouched", k, got, before, nl, 0.0);
    free(got), free(before);
    CPU->xent_rescale(NULL, csum, cmax, shifted, N);
    k->xent_rescale(NULL, gsum, gmax, gshift, N);
    got = back(k, gsum, (size_t)N);
    compare("xent_rescale", k, got, csum, (size_t)N, TOL_FP32);
    free(got);
    /* odd row length (no float4 rows) */
    int Vo = 37;
    float *lo = host((size_t)N * Vo, -4, 4), *lod = dup(lo, (size_t)N * Vo);
    int32_t *to = malloc((size_t)N * sizeof *to);
    for (int n = 0; n < N; n++)
        to[n] = (n * 7) % (Vo - 2);
    CPU->xent_stats(NULL, cmax, csum, cpick, lo, to, N, Vo, Vo - 2, 0);
    CPU->xent_loss_backward(NULL, closs, lod, lod, cmax, csum, cpick, to, weights, N, Vo, Vo - 2,
                            0, 0.5f);
    float *glo = dev(k, lo, (size_t)N * Vo * 4);
    int32_t *gto = dev(k, to, (size_t)N * 4);
    k->xent_stats(NULL, gmax, gsum, gpick, glo, gto, N, Vo, Vo - 2, 0);
    k->xent_loss_backward(NULL, gloss, glo, glo, gmax, gsum, gpick, gto, gw, N, Vo, Vo - 2, 0,
                          0.5f);
    got = back(k, glo, (size_t)N * Vo);
    compare("xent_loss_backward (37 columns)", k, got, lod, (size_t)N * Vo, TOL_FP32);
    free(got);
    got = back(k, gloss, (size_t)N);
    compare("xent_loss_backward: losses (37 columns)", k, got, closs, (size_t)N, TOL_FP32);
    free(got);
    k->free(gl2), k->free(gw), k->free(gshift), k->free(glo), k->free(gto);
    free(weights), free(cmax), free(csum), free(cpick), free(closs), free(cd), free(shifted);
    free(lo), free(lod), free(to);
    /* a row with no valid column: max is -inf on both */
    k->xent_row_max(NULL, gmax, gl, 1, V, 0);
    got = back(k, gmax, 1);
    checks++;
    if (!(isinf(got[0]) && got[0] < 0)) {
        failures++;
        fprintf(stderr, "FAIL xent_row_max with n_valid 0 [%s]: %g, want -inf\n", k->name,
                got[0]);
    }
    free(got);
    k->free(gl), k->free(gt), k->free(gmax), k->free(gsum), k->free(gpick), k->free(gloss);
    free(logits), free(targets), free(maxv), free(sumexp), free(picked), free(losses);
    free(dlogits);
}

/* ---------------------------------------------------------------- embeddings */

static void test_embedding(const tr_kernels *k)
{
    int B = 4, T = 64, C = 96, V = 300, v_start = 100;
    int N = B * T;
    int32_t *ids = malloc((size_t)N * sizeof *ids);
    for (int n = 0; n < N; n++) /* repeats, and ids held by other ranks */
        ids[n] = (n * 37) % 450;
    float *table = host((size_t)V * C, -1, 1), *wpe = host((size_t)T * C, -1, 1);
    float *dout = host((size_t)N * C, -1, 1), *dtab0 = host((size_t)V * C, -1, 1),
          *dwpe0 = host((size_t)T * C, -1, 1);
    float *out = malloc((size_t)N * C * 4), *dtab = dup(dtab0, (size_t)V * C),
          *dwpe = dup(dwpe0, (size_t)T * C);
    CPU->embedding_forward(NULL, out, ids, table, N, C, v_start, V);
    CPU->position_forward(NULL, out, wpe, B, T, C);
    CPU->embedding_backward(NULL, dtab, dout, ids, N, C, v_start, V);
    CPU->position_backward(NULL, dwpe, dout, B, T, C);
    int32_t *gids = dev(k, ids, (size_t)N * 4);
    float *gtab = dev(k, table, (size_t)V * C * 4), *gwpe = dev(k, wpe, (size_t)T * C * 4),
          *gdout = dev(k, dout, (size_t)N * C * 4), *gout = dev(k, NULL, (size_t)N * C * 4),
          *gdtab = dev(k, dtab0, (size_t)V * C * 4), *gdwpe = dev(k, dwpe0, (size_t)T * C * 4);
    k->embedding_forward(NULL, gout, gids, gtab, N, C, v_start, V);
    k->position_forward(NULL, gout, gwpe, B, T, C);
    k->embedding_backward(NULL, gdtab, gdout, gids, N, C, v_start, V);
    k->position_backward(NULL, gdwpe, gdout, B, T, C);
    float *got;
    got = back(k, gout, (size_t)N * C);
    compare("embedding + position forward", k, got, out, (size_t)N * C, TOL_FP32);
    free(got);
    got = back(k, gdtab, (size_t)V * C);
    compare("embedding_backward (accumulates)", k, got, dtab, (size_t)V * C, TOL_FP32);
    free(got);
    got = back(k, gdwpe, (size_t)T * C);
    compare("position_backward (accumulates)", k, got, dwpe, (size_t)T * C, TOL_FP32);
    free(got);
    k->free(gids), k->free(gtab), k->free(gwpe), k->free(gdout), k->free(gout), k->free(gdtab);
    k->free(gdwpe);
    free(ids), free(table), free(wpe), free(dout), free(dtab0), free(dwpe0), free(out);
    free(dtab), free(dwpe);
}

/* ---------------------------------------------------------------- optimizer, norms */

static void test_optimizer(const tr_kernels *k)
{
    size_t n = 100003;
    float *p = host(n, -1, 1), *g = host(n, -1, 1), *m = host(n, -0.1f, 0.1f),
          *v = host(n, 0, 0.01f);
    float *pr = dup(p, n), *mr = dup(m, n), *vr = dup(v, n);
    CPU->adamw(NULL, pr, g, mr, vr, n, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 3);
    float *gp = dev(k, p, n * 4), *gg = dev(k, g, n * 4), *gm = dev(k, m, n * 4),
          *gv = dev(k, v, n * 4);
    k->adamw(NULL, gp, gg, gm, gv, n, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 3);
    float *got;
    got = back(k, gp, n);
    compare("adamw params", k, got, pr, n, TOL_FP32);
    free(got);
    got = back(k, gm, n);
    compare("adamw m", k, got, mr, n, TOL_FP32);
    free(got);
    got = back(k, gv, n);
    compare("adamw v", k, got, vr, n, TOL_FP32);
    free(got);
    double s_cpu = CPU->sumsq(NULL, g, n), s_gpu = k->sumsq(NULL, gg, n);
    float a = (float)s_gpu, b = (float)s_cpu;
    compare("sumsq", k, &a, &b, 1, TOL_FP32);
    k->free(gp), k->free(gg), k->free(gm), k->free(gv);
    free(p), free(g), free(m), free(v), free(pr), free(mr), free(vr);
}

/* ---------------------------------------------------------------- memory, bf16 */

static void test_memory(const tr_kernels *k)
{
    size_t n = 12345;
    float *z = dev(k, NULL, n * 4);
    float *got = back(k, z, n), *zeros = calloc(n, 4);
    compare("alloc is zero-filled", k, got, zeros, n, 0);
    free(got);
    float *h = host(n, -5, 5);
    float *a = dev(k, h, n * 4), *b = dev(k, NULL, n * 4);
    k->copy(NULL, b, a, n * 4);
    got = back(k, b, n);
    compare("to_device + copy + to_host", k, got, h, n, 0);
    free(got);
    k->zero(NULL, b + 100, 50 * 4);
    memset(h + 100, 0, 50 * 4);
    got = back(k, b, n);
    compare("zero (a range)", k, got, h, n, 0);
    free(got);
    k->synchronize(NULL);
    k->free(z), k->free(a), k->free(b);
    free(h), free(zeros);
}

static void test_bf16_device(void)
{
    size_t n = (size_t)1 << 20;
    float *x = malloc(n * 4);
    uint16_t *want = malloc(n * 2), *got = malloc(n * 2);
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)(i & 0xFFFF) << 16 | (uint32_t)(i >> 16) * 0x1111u;
        memcpy(&x[i], &u, 4);
        want[i] = bf16_from_f32(x[i]);
    }
    float *dx = dev(F32, x, n * 4), *dy = dev(F32, NULL, n * 4);
    uint16_t *dh = dev(F32, NULL, n * 2);
    tr_cuda_to_bf16(NULL, dh, dx, n);
    F32->to_host(NULL, got, dh, n * 2);
    checks++;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += got[i] != want[i];
    tr_cuda_from_bf16(NULL, dy, dh, n);
    float *wide = back(F32, dy, n);
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &wide[i], 4);
        bad += u != (uint32_t)want[i] << 16;
    }
    if (bad) {
        failures++;
        fprintf(stderr, "FAIL bf16 conversion on the device: %zu of %zu differ from bf16.h\n",
                bad, 2 * n);
    } else {
        printf("ok   bf16 conversion on the device (%zu patterns, both ways)\n", n);
    }
    F32->free(dx), F32->free(dy), F32->free(dh);
    free(x), free(want), free(got), free(wide);
}

/* The arena: reserve, serve and return blocks, refuse an impossible budget by name. */
static void test_arena_device(void)
{
    size_t free_b = 0, total_b = 0;
    checks++;
    if (tr_cuda_mem_info(&free_b, &total_b)) {
        failures++;
        fprintf(stderr, "FAIL mem_info: %s\n", tr_errmsg());
        return;
    }
    tr_cuda_budget too_big = {.activations = total_b + ((size_t)1 << 30)};
    int rc = tr_cuda_reserve(&too_big);
    if (rc != TR_ERR_NOMEM || !strstr(tr_errmsg(), "short by")) {
        failures++;
        fprintf(stderr, "FAIL reserve beyond the GPU: %d %s\n", rc, tr_errmsg());
    }
    tr_cuda_budget b = {.params = 1 << 20, .activations = (size_t)64 << 20};
    if (tr_cuda_reserve(&b)) {
        failures++;
        fprintf(stderr, "FAIL reserve: %s\n", tr_errmsg());
        return;
    }
    size_t free_after = 0;
    int info_rc = tr_cuda_mem_info(&free_after, &total_b);
    float *p = F32->alloc((size_t)8 << 20), *q = F32->alloc(1000);
    size_t free_after_alloc = 0;
    info_rc = info_rc ? info_rc : tr_cuda_mem_info(&free_after_alloc, &total_b);
    checks++;
    if (info_rc || !p || !q || free_after_alloc != free_after) { /* served by the arena: no new memory */
        failures++;
        fprintf(stderr, "FAIL arena allocations (%p %p, free %zu -> %zu)\n", (void *)p,
                (void *)q, free_after, free_after_alloc);
    }
    rc = tr_cuda_reserve(&b);
    checks++;
    if (rc != TR_ERR_INVALID || !strstr(tr_errmsg(), "still has 2 blocks")) {
        failures++;
        fprintf(stderr, "FAIL reserve while blocks are in use: %d %s\n", rc, tr_errmsg());
    }
    F32->free(p), F32->free(q);
    tr_cuda_budget none = {0};
    checks++;
    if (tr_cuda_reserve(&none)) { /* releases the arena */
        failures++;
        fprintf(stderr, "FAIL releasing the arena: %s\n", tr_errmsg());
    } else {
        printf("ok   arena reserve / serve / release\n");
    }
}

int main(void)
{
    CPU = tr_kernels_cpu();
    F32 = tr_kernels_get("cuda-fp32");
    if (!F32)
        return cuda_unusable(); /* SKIP without a GPU, FAIL with one */
    BF16 = tr_kernels_get("cuda");
    printf("GPU %d: %s\n", tr_cuda_device(), tr_cuda_device_name());
    test_memory(F32);
    test_arena_device();
    test_bf16_device();
    test_gemm(F32);
    test_gemm(BF16);
    test_elementwise(F32);
    test_layernorm(F32, 513, 768);
    test_layernorm(F32, 7, 33);
    test_family(F32, 512, 768);
    test_family(F32, 16, 34);
    /* fused attention: GPT-2's op, then grouped heads, ALiBi, packed rows; T across the
     * tiles and not a multiple of them; head sizes 16 .. 128 (the tile sizes 64 and 32) */
    const tr_kernels *modes[] = {F32, BF16};
    for (int m = 0; m < 2; m++) {
        const tr_kernels *km = modes[m];
        test_flash(km, 0, 2, 64, 4, 4, 16, 0, 0);
        test_flash(km, 0, 1, 257, 2, 2, 64, 0, 0);
        test_flash(km, 0, 2, 130, 3, 3, 128, 0, 0);
        test_flash(km, 0, 2, 70, 2, 2, 16, 0, 1);
        test_flash(km, 1, 2, 64, 4, 2, 16, 0, 0);
        test_flash(km, 1, 1, 70, 6, 6, 16, 1, 0); /* Bloom: 6 heads, ALiBi */
        test_flash(km, 1, 2, 33, 8, 1, 32, 1, 0); /* multi-query */
        test_flash(km, 1, 2, 200, 8, 2, 40, 1, 1); /* groups, ALiBi, packed, HS not of 16 */
    }
    test_attention_gqa_decode(F32, 2, 3, 5, 16, 4, 2, 16);
    test_attention_gqa_decode(F32, 1, 1, 40, 64, 6, 6, 32);
    test_attention_decode(F32, 2, 3, 5, 16, 4, 16);   /* a few new positions after a cache */
    test_attention_decode(F32, 1, 1, 200, 257, 2, 64); /* one token after 200 */
    test_attention_decode(F32, 2, 64, 0, 64, 4, 16);  /* a prompt at once */
    test_attention_decode(BF16, 2, 3, 5, 16, 4, 16);
    test_xent(F32);
    test_embedding(F32);
    test_optimizer(F32);
    if (tr_cuda_status()) {
        failures++;
        fprintf(stderr, "FAIL %s\n", tr_errmsg());
    }
    printf("%d of %d checks agree\n", checks - failures, checks);
    return failures ? 1 : 0;
}
