/* tests/cuda: every op of the CUDA tables against the CPU table on the same random inputs.
 * Error of an output = max_i |gpu_i - cpu_i| / max_i |cpu_i| (relative to the array's
 * largest magnitude, so sums whose terms cancel are judged against their scale).
 * "cuda-fp32" must agree within 1e-5 (the fused attention 1e-4), "cuda" (bf16 products) within
 * 1e-2. Shapes include
 * odd sizes, strided sub-matrices and operands that are only 4-byte aligned (views into a
 * flat parameter buffer are).
 * The attention ops' checks are test_cuda_attention.c's (ops_tests.h), called from main here.
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
#include "tests/cuda/ops_tests.h"
#include "kernels/kernels.h"

/* ---------------------------------------------------------------- GEMM */

static void check_gemm(const tr_kernels *k, int ta, int tb, int M, int N, int K, float alpha,
                       float beta, int pad, int misalign)
{
    ops_check_group("gemm ta%d tb%d %dx%dx%d pad %d misalign %d [%s]", ta, tb, M, N, K, pad,
                    misalign, k->name);
    int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
    size_t na = (size_t)(ta ? K : M) * lda + 1, nb = (size_t)(tb ? N : K) * ldb + 1,
           nc = (size_t)M * ldc + 1;
    float *A = host(na, -1, 1), *B = host(nb, -1, 1), *C = host(nc, -1, 1);
    float *Cref = host_copy(C, nc);
    CPU->gemm(NULL, ta, tb, M, N, K, alpha, A + misalign, lda, B + misalign, ldb, beta,
              Cref + misalign, ldc);
    float *dA = dev(k, A, na * 4), *dB = dev(k, B, nb * 4), *dC = dev(k, C, nc * 4);
    k->gemm(NULL, ta, tb, M, N, K, alpha, dA + misalign, lda, dB + misalign, ldb, beta,
            dC + misalign, ldc);
    char what[96];
    snprintf(what, sizeof what, "gemm %c%c %dx%dx%d a%.1f b%.1f%s%s", ta ? 'T' : 'N',
             tb ? 'T' : 'N', M, N, K, alpha, beta, pad ? " strided" : "",
             misalign ? " 4B-aligned" : "");
    compare_back(what, k, dC, Cref, nc, tol_of(k));
    k->free(dA), k->free(dB), k->free(dC);
    free(A), free(B), free(C), free(Cref);
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
    ops_check_group("elementwise, bias [%s]", k->name);
    size_t n = 1000003;
    float *a = host(n, -2, 2), *b = host(n, -2, 2);
    float *ref = malloc(n * 4);
    float *da = dev(k, a, n * 4), *db = dev(k, b, n * 4), *dout = dev(k, NULL, n * 4);
    CPU->add(NULL, ref, a, b, n);
    k->add(NULL, dout, da, db, n);
    compare_back("add", k, dout, ref, n, TOL_FP32);
    float *y = host_copy(a, n);
    CPU->axpy(NULL, y, 0.3f, b, n);
    k->axpy(NULL, da, 0.3f, db, n);
    compare_back("axpy", k, da, y, n, TOL_FP32);
    CPU->scale(NULL, y, -1.7f, n);
    k->scale(NULL, da, -1.7f, n);
    compare_back("scale", k, da, y, n, TOL_FP32);
    CPU->scale_rows(NULL, y, b, (int)n, 1); /* n rows of one column */
    k->scale_rows(NULL, da, db, (int)n, 1);
    compare_back("scale_rows", k, da, y, n, TOL_FP32);
    CPU->gelu_forward(NULL, ref, b, n);
    k->gelu_forward(NULL, dout, db, n);
    compare_back("gelu_forward", k, dout, ref, n, TOL_FP32);
    CPU->gelu_backward(NULL, ref, b, a, n);
    k->to_device(NULL, da, a, n * 4);
    k->gelu_backward(NULL, dout, db, da, n);
    compare_back("gelu_backward", k, dout, ref, n, TOL_FP32);
    /* the exact GELU (normcdff on the GPU, the CPU's fitted erfc: within 4e-6 of each other) */
    CPU->gelu_exact_forward(NULL, ref, b, n);
    k->gelu_exact_forward(NULL, dout, db, n);
    compare_back("gelu_exact_forward", k, dout, ref, n, TOL_FP32);
    CPU->gelu_exact_backward(NULL, ref, b, a, n);
    k->gelu_exact_backward(NULL, dout, db, da, n);
    compare_back("gelu_exact_backward", k, dout, ref, n, TOL_FP32);
    /* ReLU: the same select on both, exactly (b[0] = 0 and a NaN pinned: value 0 / NaN kept,
     * slope 0) */
    b[0] = 0.0f, b[1] = NAN;
    k->to_device(NULL, db, b, 2 * 4);
    CPU->relu_forward(NULL, ref, b, n);
    k->relu_forward(NULL, dout, db, n);
    compare_back("relu_forward", k, dout, ref, n, 0);
    CPU->relu_backward(NULL, ref, b, a, n);
    k->relu_backward(NULL, dout, db, da, n);
    compare_back("relu_backward", k, dout, ref, n, 0);
    /* bias over (N, C) */
    int N = 1000, C = 333;
    float *x = host((size_t)N * C, -1, 1), *bias = host((size_t)C, -1, 1);
    float *dbias = host((size_t)C, -1, 1);
    float *xr = host_copy(x, (size_t)N * C), *dbr = host_copy(dbias, (size_t)C);
    float *dx = dev(k, x, (size_t)N * C * 4), *dbi = dev(k, bias, (size_t)C * 4),
          *ddb = dev(k, dbias, (size_t)C * 4);
    CPU->bias_add(NULL, xr, bias, N, C);
    k->bias_add(NULL, dx, dbi, N, C);
    compare_back("bias_add", k, dx, xr, (size_t)N * C, TOL_FP32);
    CPU->bias_backward(NULL, dbr, x, N, C);
    k->to_device(NULL, dx, x, (size_t)N * C * 4);
    k->bias_backward(NULL, ddb, dx, N, C);
    compare_back("bias_backward (accumulates)", k, ddb, dbr, (size_t)C, TOL_FP32);
    k->free(da), k->free(db), k->free(dout), k->free(dx), k->free(dbi), k->free(ddb);
    free(a), free(b), free(ref), free(y), free(x), free(bias), free(dbias), free(xr), free(dbr);
}

/* ---------------------------------------------------------------- layernorm */

static void test_layernorm(const tr_kernels *k, int N, int C)
{
    ops_check_group("layernorm %dx%d [%s]", N, C, k->name);
    size_t nc = (size_t)N * C;
    float *x = host(nc, -3, 3), *w = host((size_t)C, 0.5f, 1.5f), *b = host((size_t)C, -1, 1);
    float *dy = host(nc, -1, 1), *dx0 = host(nc, -1, 1), *dw0 = host((size_t)C, -1, 1),
          *db0 = host((size_t)C, -1, 1);
    float *out = malloc(nc * 4), *mean = malloc((size_t)N * 4), *rstd = malloc((size_t)N * 4);
    float *dx = host_copy(dx0, nc), *dw = host_copy(dw0, (size_t)C),
          *db = host_copy(db0, (size_t)C);
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
#define CMP(name, d, ref, n)                                                                   \
    snprintf(what, sizeof what, "layernorm %s %dx%d", name, N, C);                             \
    compare_back(what, k, d, ref, n, TOL_FP32);
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
    ops_check_group("rmsnorm, swiglu, geglu, rope %dx%d [%s]", N, C, k->name);
    size_t nc = (size_t)N * C;
    float *x = host(nc, -3, 3), *w = host((size_t)C, 0.5f, 1.5f), *dy = host(nc, -1, 1);
    float *dx0 = host(nc, -1, 1), *dw0 = host((size_t)C, -1, 1);
    float *out = malloc(nc * 4), *rstd = malloc((size_t)N * 4);
    float *dx = host_copy(dx0, nc), *dw = host_copy(dw0, (size_t)C), *sw = malloc(nc * 2),
          *dsw = malloc(nc * 4);
    float *gg[2] = {malloc(nc * 2), malloc(nc * 2)}, *dgg[2] = {malloc(nc * 4), malloc(nc * 4)};
    CPU->rmsnorm_forward(NULL, out, rstd, x, w, N, C, 1e-6f);
    CPU->rmsnorm_backward(NULL, dx, dw, dy, x, w, rstd, N, C);
    CPU->swiglu_forward(NULL, sw, x, nc / 2);
    CPU->swiglu_backward(NULL, dsw, x, dy, nc / 2);
    for (int e = 0; e < 2; e++) { /* GeGLU, tanh GELU (e 0) and exact (e 1) */
        CPU->geglu_forward(NULL, gg[e], x, nc / 2, e);
        CPU->geglu_backward(NULL, dgg[e], x, dy, nc / 2, e);
    }
    float *gx = dev(k, x, nc * 4), *gw = dev(k, w, (size_t)C * 4), *gdy = dev(k, dy, nc * 4);
    float *gout = dev(k, NULL, nc * 4), *grstd = dev(k, NULL, (size_t)N * 4);
    float *gdx = dev(k, dx0, nc * 4), *gdw = dev(k, dw0, (size_t)C * 4);
    float *gsw = dev(k, NULL, nc * 2), *gdsw = dev(k, NULL, nc * 4);
    k->rmsnorm_forward(NULL, gout, grstd, gx, gw, N, C, 1e-6f);
    k->rmsnorm_backward(NULL, gdx, gdw, gdy, gx, gw, grstd, N, C);
    k->swiglu_forward(NULL, gsw, gx, nc / 2);
    k->swiglu_backward(NULL, gdsw, gx, gdy, nc / 2);
    float *ggg[2], *gdgg[2];
    for (int e = 0; e < 2; e++) {
        ggg[e] = dev(k, NULL, nc * 2), gdgg[e] = dev(k, NULL, nc * 4);
        k->geglu_forward(NULL, ggg[e], gx, nc / 2, e);
        k->geglu_backward(NULL, gdgg[e], gx, gdy, nc / 2, e);
    }
    char what[64];
#define CMP(name, d, ref, n)                                                                   \
    snprintf(what, sizeof what, "%s %dx%d", name, N, C);                                       \
    compare_back(what, k, d, ref, n, TOL_FP32);
    CMP("rmsnorm out", gout, out, nc);
    CMP("rmsnorm rstd", grstd, rstd, (size_t)N);
    CMP("rmsnorm dinp (accumulates)", gdx, dx, nc);
    CMP("rmsnorm dweight", gdw, dw, (size_t)C);
    CMP("swiglu out", gsw, sw, nc / 2);
    CMP("swiglu dinp", gdsw, dsw, nc);
    CMP("geglu out", ggg[0], gg[0], nc / 2);
    CMP("geglu dinp", gdgg[0], dgg[0], nc);
    CMP("geglu (exact) out", ggg[1], gg[1], nc / 2);
    CMP("geglu (exact) dinp", gdgg[1], dgg[1], nc);
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
    for (int e = 0; e < 2; e++)
        k->free(ggg[e]), k->free(gdgg[e]), free(gg[e]), free(dgg[e]);
}

/* ---------------------------------------------------------------- cross-entropy */

static void test_xent(const tr_kernels *k)
{
    ops_check_group("cross-entropy [%s]", k->name);
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
    compare_back("xent_row_max", k, gmax, maxv, (size_t)N, TOL_FP32);
    compare_back("xent_row_sumexp", k, gsum, sumexp, (size_t)N, TOL_FP32);
    compare_back("xent_pick", k, gpick, picked, (size_t)N, TOL_FP32);
    compare_back("xent_loss", k, gloss, losses, (size_t)N, TOL_FP32);
    compare_back("xent_backward (in place)", k, gl, dlogits, nl, TOL_FP32);
    /* the chunked head's fused ops (issue 24 item 8): stats in one read, the rescale of a
     * rank's sums to another max, loss + backward with loss weights, in place */
    float *weights = host((size_t)N, 0, 2), *cmax = malloc((size_t)N * 4);
    float *csum = malloc((size_t)N * 4), *cpick = malloc((size_t)N * 4);
    float *closs = malloc((size_t)N * 4), *cd = host_copy(logits, nl);
    float *shifted = malloc((size_t)N * 4);
    for (int n = 0; n < N; n++)
        shifted[n] = maxv[n] + 0.5f; /* as if another rank held a larger max */
    CPU->xent_stats(NULL, cmax, csum, cpick, logits, targets, N, V, n_valid, v_start);
    CPU->xent_loss_backward(NULL, closs, cd, cd, cmax, csum, cpick, targets, weights, N, V,
                            n_valid, v_start, 0.25f);
    float *gl2 = dev(k, logits, nl * 4), *gw = dev(k, weights, (size_t)N * 4);
    float *gshift = dev(k, shifted, (size_t)N * 4);
    k->xent_stats(NULL, gmax, gsum, gpick, gl2, gt, N, V, n_valid, v_start);
    compare_back("xent_stats: max", k, gmax, cmax, (size_t)N, TOL_FP32);
    compare_back("xent_stats: sumexp", k, gsum, csum, (size_t)N, TOL_FP32);
    compare_back("xent_stats: picked", k, gpick, cpick, (size_t)N, TOL_FP32);
    k->xent_loss_backward(NULL, gloss, gl2, gl2, gmax, gsum, gpick, gt, gw, N, V, n_valid,
                          v_start, 0.25f);
    compare_back("xent_loss_backward: losses", k, gloss, closs, (size_t)N, TOL_FP32);
    compare_back("xent_loss_backward: weighted dlogits (in place)", k, gl2, cd, nl, TOL_FP32);
    float *before = back(k, gl2, nl);
    k->xent_loss_backward(NULL, gloss, gl2, gl2, gmax, gsum, gpick, gt, NULL, N, V, n_valid,
                          v_start, 0.0f); /* scale 0: the losses alone, logits untouched */
    got = back(k, gl2, nl);
    compare("xent_loss_backward scale 0: untouched", k, got, before, nl, 0.0);
    free(got), free(before);
    CPU->xent_rescale(NULL, csum, cmax, shifted, N);
    k->xent_rescale(NULL, gsum, gmax, gshift, N);
    compare_back("xent_rescale", k, gsum, csum, (size_t)N, TOL_FP32);
    /* odd row length (no float4 rows) */
    int Vo = 37;
    float *lo = host((size_t)N * Vo, -4, 4), *lod = host_copy(lo, (size_t)N * Vo);
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
    compare_back("xent_loss_backward (37 columns)", k, glo, lod, (size_t)N * Vo, TOL_FP32);
    compare_back("xent_loss_backward: losses (37 columns)", k, gloss, closs, (size_t)N, TOL_FP32);
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
    ops_check_group("embeddings [%s]", k->name);
    int B = 4, T = 64, C = 96, V = 300, v_start = 100;
    int N = B * T;
    int32_t *ids = malloc((size_t)N * sizeof *ids);
    for (int n = 0; n < N; n++) /* repeats, and ids held by other ranks */
        ids[n] = (n * 37) % 450;
    float *table = host((size_t)V * C, -1, 1), *wpe = host((size_t)T * C, -1, 1);
    float *dout = host((size_t)N * C, -1, 1), *dtab0 = host((size_t)V * C, -1, 1),
          *dwpe0 = host((size_t)T * C, -1, 1);
    float *out = malloc((size_t)N * C * 4), *dtab = host_copy(dtab0, (size_t)V * C),
          *dwpe = host_copy(dwpe0, (size_t)T * C);
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
    compare_back("embedding + position forward", k, gout, out, (size_t)N * C, TOL_FP32);
    compare_back("embedding_backward (accumulates)", k, gdtab, dtab, (size_t)V * C, TOL_FP32);
    compare_back("position_backward (accumulates)", k, gdwpe, dwpe, (size_t)T * C, TOL_FP32);
    k->free(gids), k->free(gtab), k->free(gwpe), k->free(gdout), k->free(gout), k->free(gdtab);
    k->free(gdwpe);
    free(ids), free(table), free(wpe), free(dout), free(dtab0), free(dwpe0), free(out);
    free(dtab), free(dwpe);
}

/* ---------------------------------------------------------------- optimizer, norms */

static void test_optimizer(const tr_kernels *k)
{
    ops_check_group("adamw, sumsq [%s]", k->name);
    size_t n = 100003;
    float *p = host(n, -1, 1), *g = host(n, -1, 1), *m = host(n, -0.1f, 0.1f),
          *v = host(n, 0, 0.01f);
    float *pr = host_copy(p, n), *mr = host_copy(m, n), *vr = host_copy(v, n);
    CPU->adamw(NULL, pr, g, mr, vr, n, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 3);
    float *gp = dev(k, p, n * 4), *gg = dev(k, g, n * 4), *gm = dev(k, m, n * 4),
          *gv = dev(k, v, n * 4);
    k->adamw(NULL, gp, gg, gm, gv, n, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 3);
    compare_back("adamw params", k, gp, pr, n, TOL_FP32);
    compare_back("adamw m", k, gm, mr, n, TOL_FP32);
    compare_back("adamw v", k, gv, vr, n, TOL_FP32);
    double s_cpu = CPU->sumsq(NULL, g, n), s_gpu = k->sumsq(NULL, gg, n);
    float a = (float)s_gpu, b = (float)s_cpu;
    compare("sumsq", k, &a, &b, 1, TOL_FP32);
    k->free(gp), k->free(gg), k->free(gm), k->free(gv);
    free(p), free(g), free(m), free(v), free(pr), free(mr), free(vr);
}

/* ---------------------------------------------------------------- memory, bf16 */

static void test_memory(const tr_kernels *k)
{
    ops_check_group("memory [%s]", k->name);
    size_t n = 12345;
    float *z = dev(k, NULL, n * 4);
    float *zeros = calloc(n, 4);
    compare_back("alloc is zero-filled", k, z, zeros, n, 0);
    float *h = host(n, -5, 5);
    float *a = dev(k, h, n * 4), *b = dev(k, NULL, n * 4);
    k->copy(NULL, b, a, n * 4);
    compare_back("to_device + copy + to_host", k, b, h, n, 0);
    k->zero(NULL, b + 100, 50 * 4);
    memset(h + 100, 0, 50 * 4);
    compare_back("zero (a range)", k, b, h, n, 0);
    k->synchronize(NULL);
    k->free(z), k->free(a), k->free(b);
    free(h), free(zeros);
}

static void test_bf16_device(void)
{
    ops_check_group("bf16 conversion on the device");
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
    ops_check_group("arena");
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
    /* served by the arena: the GPU's free memory unchanged by the allocations (it is the whole
     * GPU's: meson runs the other GPU tests beside this one, whose allocations may land in
     * between, so a few tries) */
    size_t free_after = 0, free_after_alloc = 0;
    float *p = NULL, *q = NULL;
    int info_rc = 0;
    for (int attempt = 0; attempt < 5; attempt++) {
        F32->free(p), F32->free(q);
        info_rc = tr_cuda_mem_info(&free_after, &total_b);
        p = F32->alloc((size_t)8 << 20), q = F32->alloc(1000);
        info_rc = info_rc ? info_rc : tr_cuda_mem_info(&free_after_alloc, &total_b);
        if (info_rc || !p || !q || free_after_alloc == free_after)
            break;
    }
    checks++;
    if (info_rc || !p || !q || free_after_alloc != free_after) {
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

/* The attention ops of the bf16 table alone (--attention: with TRIDENT_CUDA_ATTENTION_BWD=fused,
 * the fused backward's check) */
static void test_flash_all(const tr_kernels *km)
{
    test_flash(km, 0, 2, 64, 4, 4, 16, 0, 0);
    test_flash(km, 0, 1, 257, 2, 2, 64, 0, 0);
    test_flash(km, 0, 2, 130, 3, 3, 128, 0, 0);
    test_flash(km, 0, 4, 1024, 12, 12, 64, 0, 0); /* gpt2's heads: many blocks at once */
    test_flash(km, 0, 2, 70, 2, 2, 16, 0, 1);
    test_flash(km, 1, 2, 64, 4, 2, 16, 0, 0);
    test_flash(km, 1, 1, 70, 6, 6, 16, 1, 0); /* Bloom: 6 heads, ALiBi */
    test_flash(km, 1, 2, 33, 8, 1, 32, 1, 0); /* multi-query */
    test_flash(km, 1, 2, 200, 8, 2, 40, 1, 1); /* groups, ALiBi, packed, HS not of 16 */
    test_flash(km, 1, 2, 1024, 8, 2, 64, 1, 0); /* groups of 4 heads over 16 key tiles */
}

/* The backend's kept error fails the run too; the count, and the exit status */
static int finish(void)
{
    if (tr_cuda_status()) {
        failures++;
        fprintf(stderr, "FAIL %s\n", tr_errmsg());
    }
    printf("%d of %d checks agree\n", checks - failures, checks);
    return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
    ops_check_report_crashes(); /* line-buffered output, a backtrace on a crash */
    CPU = tr_kernels_cpu();
    F32 = tr_kernels_get("cuda-fp32");
    if (!F32)
        return cuda_unusable(); /* SKIP without a GPU, FAIL with one */
    BF16 = tr_kernels_get("cuda");
    printf("GPU %d: %s\n", tr_cuda_device(), tr_cuda_device_name());
    if (argc > 1 && strcmp(argv[1], "--moe-refusal") == 0)
        return test_moe_refusal(F32);
    if (argc > 1 && strcmp(argv[1], "--dropout") == 0) {
        test_dropout(F32);
        test_dropout(BF16);
        return finish();
    }
    if (argc > 1 && strcmp(argv[1], "--attention") == 0) {
        test_flash_all(BF16);
        return finish();
    }
    test_memory(F32);
    test_arena_device();
    test_bf16_device();
    test_gemm(F32);
    test_gemm(BF16);
    test_elementwise(F32);
    test_layernorm(F32, 513, 768);
    test_layernorm(F32, 7, 33);
    /* the fused backward with fewer warps a block and opted-in shared memory (64 KiB of sums a
     * warp), and a width past the shared memory: the two-pass kernels */
    test_layernorm(F32, 1031, 8192);
    test_layernorm(F32, 9, 40000);
    test_family(F32, 512, 768);
    test_family(F32, 16, 34);
    test_family(F32, 1031, 8192);
    test_family(F32, 9, 64000);
    /* fused attention: GPT-2's op, then grouped heads, ALiBi, packed rows; T across the
     * tiles and not a multiple of them; head sizes 16 .. 128 (the tile sizes 64 and 32) */
    test_flash_all(F32);
    test_flash_all(BF16);
    test_attention_gqa_decode(F32, 2, 3, 5, 16, 4, 2, 16);
    test_attention_gqa_decode(F32, 1, 1, 40, 64, 6, 6, 32);
    test_attention_decode(F32, 2, 3, 5, 16, 4, 16);   /* a few new positions after a cache */
    test_attention_decode(F32, 1, 1, 200, 257, 2, 64); /* one token after 200 */
    test_attention_decode(F32, 2, 64, 0, 64, 4, 16);  /* a prompt at once */
    test_attention_decode(BF16, 2, 3, 5, 16, 4, 16);
    test_xent(F32);
    test_embedding(F32);
    test_moe(F32);
    test_moe(BF16);
    test_dropout(F32);
    test_dropout(BF16);
    test_optimizer(F32);
    return finish();
}
