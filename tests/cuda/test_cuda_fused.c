/* tests/cuda: the "cuda" table's fused and bf16-storage ops against their CPU twins, on the
 * same random inputs, within TOL_BF16 (both round their operands, and the head's results, to
 * bf16; sums in another order may land one bf16 step apart):
 *  - the fused linear ops (linear_forward, linear_backward, their bf16 inputs and outputs,
 *    and the GELU ops beside them): test_cuda_linear.c's (fused_tests.h), called from main;
 *  - layernorm_forward16 and rmsnorm_forward16, and their backward16 on a bf16 output
 *    gradient, against "cpu-bf16"'s;
 *  - the attention output in bf16 storage (attention_forward16 / _backward16, the GQA pair
 *    with groups and ALiBi; the mma and the wmma kernels) against "cpu-bf16"'s, and its
 *    input qkv too (attention_forward_qkv16 / _backward_qkv16);
 *  - the MLP activation's bf16 storage (gelu_forward16, and fc_proj's GEMMs reading it:
 *    gemm_a16 forward, gemm_b16 weight gradient) against "cpu-bf16"'s;
 *  - the chunked head's bf16-storage ops (kernels.h: gemm_out16, gemm_a16, xent_stats16,
 *    xent_loss_backward16) against "cpu-bf16"'s: the head's three GEMMs (logits = x W^T,
 *    dx = dlogits W, dW += dlogits^T x) with odd sizes and a beta = 1 accumulation, the
 *    cross-entropy on rows whose length is a multiple of 4 (vector path) and not (scalar),
 *    with padding columns, targets held elsewhere, loss weights, rows starting with -inf
 *    logits, in place; the logits and
 *    dx GEMMs again on W converted once (narrow16, gemm_mixed16); and the two in one
 *    pass (xent_stats_loss_backward16: rows in shared memory, 16-byte and scalar, and a row
 *    past it, which takes the two ops).
 * --blocked (run with TRIDENT_CUDA_STAGING_MIB=1): shapes past the staging, so gemm_out16 works
 * in blocks of C and gemm_a16 and linear_forward in slabs of K.
 * --attention-cudnn (run with TRIDENT_CUDA_ATTENTION=cudnn): the qkv16 attention pair on cuDNN
 * (kernels/cuda/attention_cudnn.h) against "cpu-bf16"'s, its backward run twice for the same
 * bits, and proof from tr_cuda_cudnn_attention_counts that cuDNN ran every call it takes.
 * Exit 77 (SKIP) without a GPU (and in the cuDNN mode, where cuDNN's library does not load). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "kernels/cuda/cuda.h"
#include "tests/cuda/cuda_skip.h"
#include "tests/cuda/fused_tests.h"
#include "tests/cuda/ops_check.h"

const tr_kernels *TWIN;
static int repeat_backward; /* test_attention_qkv16 runs the backward twice: the same bits */

/* logits (n, V) = x (n, C) W^T (V, C), then dx = dl W and dW += dl^T x with dl bf16 */
static void test_gemms(int n, int C, int V)
{
    ops_check_group("the head's GEMMs n%d C%d V%d", n, C, V);
    char what[96];
    float *x = host((size_t)n * C, -1, 1), *W = host((size_t)V * C, -1, 1);
    float *dW = host((size_t)V * C, -1, 1);
    uint16_t *l16 = malloc((size_t)n * V * 2);
    TWIN->gemm_out16(NULL, 0, 1, n, V, C, 1.0f, x, C, W, C, l16, V);
    float *gx = dev(BF16, x, (size_t)n * C * 4), *gW = dev(BF16, W, (size_t)V * C * 4);
    uint16_t *gl = dev(BF16, NULL, (size_t)n * V * 2);
    BF16->gemm_out16(NULL, 0, 1, n, V, C, 1.0f, gx, C, gW, C, gl, V);
    float *want = widen(l16, (size_t)n * V);
    snprintf(what, sizeof what, "gemm_out16 logits %dx%d K%d", n, V, C);
    compare_back16(what, BF16, gl, want, (size_t)n * V, TOL_BF16);
    free(want);
    /* the backward GEMMs on the same bf16 matrix (the CPU's result, sent to the GPU) */
    BF16->to_device(NULL, gl, l16, (size_t)n * V * 2);
    float *dx = malloc((size_t)n * C * 4), *gdx = dev(BF16, NULL, (size_t)n * C * 4);
    float *gdW = dev(BF16, dW, (size_t)V * C * 4);
    TWIN->gemm_a16(NULL, 0, 0, n, C, V, 1.0f, l16, V, W, C, 0.0f, dx, C);
    TWIN->gemm_a16(NULL, 1, 0, V, C, n, 0.5f, l16, V, x, C, 1.0f, dW, C);
    BF16->gemm_a16(NULL, 0, 0, n, C, V, 1.0f, gl, V, gW, C, 0.0f, gdx, C);
    BF16->gemm_a16(NULL, 1, 0, V, C, n, 0.5f, gl, V, gx, C, 1.0f, gdW, C);
    snprintf(what, sizeof what, "gemm_a16 dx %dx%d K%d", n, C, V);
    compare_back(what, BF16, gdx, dx, (size_t)n * C, TOL_BF16);
    snprintf(what, sizeof what, "gemm_a16 dW += (trans A) %dx%d K%d", V, C, n);
    compare_back(what, BF16, gdW, dW, (size_t)V * C, TOL_BF16);
    /* the same on W converted once (narrow16, gemm_mixed16): the logits from x and W16 into a
     * bf16 C, dx from the bf16 logits and W16 into an fp32 C, accumulating (beta 1) */
    size_t nw = (size_t)V * C;
    uint16_t *W16 = malloc(nw * 2), *gW16 = dev(BF16, NULL, nw * 2);
    uint16_t *gl2 = dev(BF16, NULL, (size_t)n * V * 2);
    TWIN->narrow16(NULL, W16, W, nw);
    BF16->narrow16(NULL, gW16, gW, nw);
    want = widen(W16, nw);
    compare_back16("narrow16 W", BF16, gW16, want, nw, 0.0);
    free(want);
    BF16->gemm_mixed16(NULL, 0, 1, n, V, C, 1.0f, gx, NULL, C, NULL, gW16, C, 0.0f, NULL, gl2,
                       V);
    want = widen(l16, (size_t)n * V);
    snprintf(what, sizeof what, "gemm_mixed16 logits (x, W16) %dx%d K%d", n, V, C);
    compare_back16(what, BF16, gl2, want, (size_t)n * V, TOL_BF16);
    free(want);
    TWIN->gemm_mixed16(NULL, 0, 0, n, C, V, 1.0f, NULL, l16, V, NULL, W16, C, 1.0f, dx, NULL, C);
    BF16->gemm_mixed16(NULL, 0, 0, n, C, V, 1.0f, NULL, gl, V, NULL, gW16, C, 1.0f, gdx, NULL,
                       C);
    snprintf(what, sizeof what, "gemm_mixed16 dx += (l16, W16) %dx%d K%d", n, C, V);
    compare_back(what, BF16, gdx, dx, (size_t)n * C, TOL_BF16);
    BF16->free(gW16), BF16->free(gl2), free(W16);
    BF16->free(gx), BF16->free(gW), BF16->free(gl), BF16->free(gdx), BF16->free(gdW);
    free(x), free(W), free(dW), free(l16), free(dx);
}

/* stats and loss + backward (weighted, in place) on bf16 logits (N, V), n_valid columns, the
 * first neg_inf columns of each row -inf */
static void test_xent16(int N, int V, int n_valid, int v_start, int neg_inf)
{
    ops_check_group("xent16 N%d V%d n_valid %d v_start %d -inf %d", N, V, n_valid, v_start,
                    neg_inf);
    char what[96];
    size_t nl = (size_t)N * V;
    float *lf = host(nl, -8, 8), *weights = host((size_t)N, 0, 2);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < neg_inf && c < V; c++)
            lf[(size_t)n * V + c] = -INFINITY;
    uint16_t *l16 = narrow(lf, nl);
    int32_t *targets = malloc((size_t)N * sizeof *targets);
    for (int n = 0; n < N; n++) /* some held here, some on other ranks */
        targets[n] = n % 5 == 0 ? v_start + V + 3 : v_start + (n * 97) % n_valid;
    float *st = malloc((size_t)N * 3 * 4), *loss = malloc((size_t)N * 4);
    TWIN->xent_stats16(NULL, st, st + N, st + 2 * N, l16, targets, N, V, n_valid, v_start);
    uint16_t *d16 = malloc(nl * 2);
    memcpy(d16, l16, nl * 2);
    TWIN->xent_loss_backward16(NULL, loss, d16, d16, st, st + N, st + 2 * N, targets, weights,
                               N, V, n_valid, v_start, 0.25f);
    uint16_t *gl = dev(BF16, l16, nl * 2);
    int32_t *gt = dev(BF16, targets, (size_t)N * 4);
    float *gst = dev(BF16, NULL, (size_t)N * 3 * 4), *gloss = dev(BF16, NULL, (size_t)N * 4);
    float *gw = dev(BF16, weights, (size_t)N * 4);
    BF16->xent_stats16(NULL, gst, gst + N, gst + 2 * N, gl, gt, N, V, n_valid, v_start);
    BF16->xent_loss_backward16(NULL, gloss, gl, gl, gst, gst + N, gst + 2 * N, gt, gw, N, V,
                               n_valid, v_start, 0.25f);
    snprintf(what, sizeof what, "xent_stats16 N%d V%d", N, V);
    compare_back(what, BF16, gst, st, (size_t)N * 3, TOL_FP32);
    snprintf(what, sizeof what, "xent_loss_backward16 losses N%d V%d", N, V);
    compare_back(what, BF16, gloss, loss, (size_t)N, TOL_FP32);
    float *want = widen(d16, nl);
    snprintf(what, sizeof what, "xent_loss_backward16 dlogits N%d V%d", N, V);
    compare_back16(what, BF16, gl, want, nl, TOL_BF16);
    /* the two in one pass (rows in shared memory; wider ones: the two ops) */
    BF16->to_device(NULL, gl, l16, nl * 2);
    BF16->zero(NULL, gst, (size_t)N * 3 * 4), BF16->zero(NULL, gloss, (size_t)N * 4);
    BF16->xent_stats_loss_backward16(NULL, gloss, gst, gst + N, gst + 2 * N, gl, gt, gw, N, V,
                                     n_valid, v_start, 0.25f);
    snprintf(what, sizeof what, "xent_stats_loss_backward16 stats N%d V%d", N, V);
    compare_back(what, BF16, gst, st, (size_t)N * 3, TOL_FP32);
    snprintf(what, sizeof what, "xent_stats_loss_backward16 losses N%d V%d", N, V);
    compare_back(what, BF16, gloss, loss, (size_t)N, TOL_FP32);
    snprintf(what, sizeof what, "xent_stats_loss_backward16 dlogits N%d V%d", N, V);
    compare_back16(what, BF16, gl, want, nl, TOL_BF16);
    free(want);
    BF16->free(gl), BF16->free(gt), BF16->free(gst), BF16->free(gloss), BF16->free(gw);
    free(lf), free(weights), free(l16), free(targets), free(st), free(loss), free(d16);
}

/* the MLP activation's: gelu_forward16, then dW += dy^T gelu16 (gemm_b16, as fc_proj's weight
 * gradient) and y = gelu16 W^T (gemm_a16, its forward) */
static void test_mlp16(int N, int F, int C)
{
    ops_check_group("mlp16 N%d F%d C%d", N, F, C);
    char what[96];
    size_t nf = (size_t)N * F;
    float *pre = host(nf, -3, 3), *dy = host((size_t)N * C, -1, 1), *W = host((size_t)C * F, -1, 1);
    float *dW = host((size_t)C * F, -1, 1), *y = malloc((size_t)N * C * 4);
    uint16_t *g16 = malloc(nf * 2);
    /* the device copies first: the twin's gemm_b16 accumulates into the host dW */
    float *gpre = dev(BF16, pre, nf * 4), *gdy = dev(BF16, dy, (size_t)N * C * 4);
    float *gW = dev(BF16, W, (size_t)C * F * 4), *gdW = dev(BF16, dW, (size_t)C * F * 4);
    float *gy = dev(BF16, NULL, (size_t)N * C * 4);
    uint16_t *gg = dev(BF16, NULL, nf * 2);
    TWIN->gelu_forward16(NULL, g16, pre, NULL, nf);
    TWIN->gemm_b16(NULL, 1, 0, C, F, N, 1.0f, dy, C, g16, F, 1.0f, dW, F);
    TWIN->gemm_a16(NULL, 0, 1, N, C, F, 1.0f, g16, F, W, F, 0.0f, y, C);
    BF16->gelu_forward16(NULL, gg, gpre, NULL, nf);
    float *want = widen(g16, nf);
    snprintf(what, sizeof what, "gelu_forward16 %zu", nf);
    compare_back16(what, BF16, gg, want, nf, TOL_BF16);
    free(want);
    BF16->to_device(NULL, gg, g16, nf * 2); /* the same bf16 input on both sides */
    BF16->gemm_b16(NULL, 1, 0, C, F, N, 1.0f, gdy, C, gg, F, 1.0f, gdW, F);
    BF16->gemm_a16(NULL, 0, 1, N, C, F, 1.0f, gg, F, gW, F, 0.0f, gy, C);
    snprintf(what, sizeof what, "gemm_b16 dW += %dx%d K%d", C, F, N);
    compare_back(what, BF16, gdW, dW, (size_t)C * F, TOL_BF16);
    snprintf(what, sizeof what, "gemm_a16 fc_proj %dx%d K%d", N, C, F);
    compare_back(what, BF16, gy, y, (size_t)N * C, TOL_BF16);
    BF16->free(gpre), BF16->free(gdy), BF16->free(gW), BF16->free(gdW), BF16->free(gy);
    BF16->free(gg);
    free(pre), free(dy), free(W), free(dW), free(y), free(g16);
}

/* layernorm_forward16 (the LayerNorm outputs feeding QKV and fc) against "cpu-bf16"'s */
static void test_layernorm16(int N, int C)
{
    ops_check_group("layernorm16 %dx%d", N, C);
    char what[96];
    size_t n = (size_t)N * C;
    float *x = host(n, -2, 2), *w = host((size_t)C, 0.5f, 1.5f), *b = host((size_t)C, -0.5f, 0.5f);
    float *mean = malloc((size_t)N * 4), *rstd = malloc((size_t)N * 4);
    uint16_t *y16 = malloc(n * 2);
    TWIN->layernorm_forward16(NULL, y16, mean, rstd, x, w, b, N, C, 1e-5f);
    float *gx = dev(BF16, x, n * 4), *gw = dev(BF16, w, (size_t)C * 4);
    float *gb = dev(BF16, b, (size_t)C * 4);
    float *gm = dev(BF16, NULL, (size_t)N * 4), *gr = dev(BF16, NULL, (size_t)N * 4);
    uint16_t *gy = dev(BF16, NULL, n * 2);
    BF16->layernorm_forward16(NULL, gy, gm, gr, gx, gw, gb, N, C, 1e-5f);
    float *want = widen(y16, n);
    snprintf(what, sizeof what, "layernorm_forward16 %dx%d", N, C);
    compare_back16(what, BF16, gy, want, n, TOL_BF16);
    free(want);
    snprintf(what, sizeof what, "layernorm_forward16 rstd %d", N);
    compare_back(what, BF16, gr, rstd, (size_t)N, TOL_FP32);
    /* the backward on a bf16 output gradient (layernorm_backward16), the CPU's statistics */
    float *dy = host(n, -1, 1), *dx = host(n, -1, 1), *dw = host((size_t)C, -1, 1);
    float *db = host((size_t)C, -1, 1);
    uint16_t *dy16 = narrow(dy, n);
    float *gdx = dev(BF16, dx, n * 4), *gdw = dev(BF16, dw, (size_t)C * 4);
    float *gdb = dev(BF16, db, (size_t)C * 4);
    uint16_t *gdy = dev(BF16, dy16, n * 2);
    BF16->to_device(NULL, gm, mean, (size_t)N * 4), BF16->to_device(NULL, gr, rstd, (size_t)N * 4);
    TWIN->layernorm_backward16(NULL, dx, dw, db, dy16, x, w, mean, rstd, N, C);
    BF16->layernorm_backward16(NULL, gdx, gdw, gdb, gdy, gx, gw, gm, gr, N, C);
    snprintf(what, sizeof what, "layernorm_backward16 dinp %dx%d", N, C);
    compare_back(what, BF16, gdx, dx, n, TOL_BF16);
    snprintf(what, sizeof what, "layernorm_backward16 dweight %d", C);
    compare_back(what, BF16, gdw, dw, (size_t)C, TOL_BF16);
    snprintf(what, sizeof what, "layernorm_backward16 dbias %d", C);
    compare_back(what, BF16, gdb, db, (size_t)C, TOL_BF16);
    BF16->free(gdx), BF16->free(gdw), BF16->free(gdb), BF16->free(gdy);
    free(dy), free(dx), free(dw), free(db), free(dy16);
    BF16->free(gx), BF16->free(gw), BF16->free(gb), BF16->free(gm), BF16->free(gr), BF16->free(gy);
    free(x), free(w), free(b), free(mean), free(rstd), free(y16);
}

/* rmsnorm_forward16 (the RMSNorm families' way) against "cpu-bf16"'s */
static void test_rmsnorm16(int N, int C)
{
    ops_check_group("rmsnorm16 %dx%d", N, C);
    char what[96];
    size_t n = (size_t)N * C;
    float *x = host(n, -2, 2), *w = host((size_t)C, 0.5f, 1.5f), *rstd = malloc((size_t)N * 4);
    uint16_t *y16 = malloc(n * 2);
    TWIN->rmsnorm_forward16(NULL, y16, rstd, x, w, N, C, 1e-5f);
    float *gx = dev(BF16, x, n * 4), *gw = dev(BF16, w, (size_t)C * 4);
    float *gr = dev(BF16, NULL, (size_t)N * 4);
    uint16_t *gy = dev(BF16, NULL, n * 2);
    BF16->rmsnorm_forward16(NULL, gy, gr, gx, gw, N, C, 1e-5f);
    float *want = widen(y16, n);
    snprintf(what, sizeof what, "rmsnorm_forward16 %dx%d", N, C);
    compare_back16(what, BF16, gy, want, n, TOL_BF16);
    free(want);
    /* the backward on a bf16 output gradient (rmsnorm_backward16), the CPU's statistics */
    float *dy = host(n, -1, 1), *dx = host(n, -1, 1), *dw = host((size_t)C, -1, 1);
    uint16_t *dy16 = narrow(dy, n);
    float *gdx = dev(BF16, dx, n * 4), *gdw = dev(BF16, dw, (size_t)C * 4);
    uint16_t *gdy = dev(BF16, dy16, n * 2);
    BF16->to_device(NULL, gr, rstd, (size_t)N * 4);
    TWIN->rmsnorm_backward16(NULL, dx, dw, dy16, x, w, rstd, N, C);
    BF16->rmsnorm_backward16(NULL, gdx, gdw, gdy, gx, gw, gr, N, C);
    snprintf(what, sizeof what, "rmsnorm_backward16 dinp %dx%d", N, C);
    compare_back(what, BF16, gdx, dx, n, TOL_BF16);
    snprintf(what, sizeof what, "rmsnorm_backward16 dweight %d", C);
    compare_back(what, BF16, gdw, dw, (size_t)C, TOL_BF16);
    BF16->free(gdx), BF16->free(gdw), BF16->free(gdy);
    free(dy), free(dx), free(dw), free(dy16);
    BF16->free(gx), BF16->free(gw), BF16->free(gr), BF16->free(gy);
    free(x), free(w), free(rstd), free(y16);
}

/* The attention output in bf16 storage (kernels.h's attention_forward16 / _backward16, or the
 * attention_gqa_ pair with groups or ALiBi) against "cpu-bf16"'s: out16, lse, and dqkv from the
 * same bf16 output on both sides. HS 64 runs flash_mma.cuh, HS 48 flash.cu's wmma kernels. */
static void test_attention16(int B, int T, int NH, int NG, int HS, int alibi)
{
    ops_check_group("attention16 B%d T%d NH%d NG%d HS%d alibi %d", B, T, NH, NG, HS, alibi);
    char what[96];
    size_t nq = (size_t)B * T * NG * (NH / NG + 2) * HS, no = (size_t)B * T * NH * HS;
    size_t nl = (size_t)B * NH * T, ns = (size_t)B * (NH + 1) * T;
    float *qkv = host(nq, -1, 1), *dout = host(no, -1, 1), *sl = host((size_t)NH, 0.01f, 0.5f);
    float *lse = malloc(nl * 4), *dq = malloc(nq * 4), *scr = malloc(ns * 4);
    const float *al = alibi ? sl : NULL;
    uint16_t *o16 = malloc(no * 2);
    int gqa = NG != NH || alibi;
    float *gqkv = dev(BF16, qkv, nq * 4), *gdout = dev(BF16, dout, no * 4);
    float *gsl = alibi ? dev(BF16, sl, (size_t)NH * 4) : NULL, *glse = dev(BF16, NULL, nl * 4);
    float *gdq = dev(BF16, NULL, nq * 4), *gscr = dev(BF16, NULL, ns * 4);
    uint16_t *go = dev(BF16, NULL, no * 2);
    if (gqa) {
        TWIN->attention_gqa_forward16(NULL, o16, lse, qkv, al, B, T, NH, NG, HS, NULL);
        TWIN->attention_gqa_backward16(NULL, dq, scr, dout, qkv, o16, lse, al, B, T, NH, NG, HS,
                                       NULL);
        BF16->attention_gqa_forward16(NULL, go, glse, gqkv, gsl, B, T, NH, NG, HS, NULL);
    } else {
        TWIN->attention_forward16(NULL, o16, lse, qkv, B, T, NH, HS, NULL);
        TWIN->attention_backward16(NULL, dq, scr, dout, qkv, o16, lse, B, T, NH, HS, NULL);
        BF16->attention_forward16(NULL, go, glse, gqkv, B, T, NH, HS, NULL);
    }
    float *want = widen(o16, no);
    snprintf(what, sizeof what, "attention%s_forward16 B%d T%d NH%d NG%d HS%d", gqa ? "_gqa" : "",
             B, T, NH, NG, HS);
    compare_back16(what, BF16, go, want, no, TOL_BF16);
    free(want);
    compare_back("  its lse", BF16, glse, lse, nl, TOL_BF16);
    BF16->to_device(NULL, go, o16, no * 2); /* the same bf16 output and lse on both sides */
    BF16->to_device(NULL, glse, lse, nl * 4);
    if (gqa)
        BF16->attention_gqa_backward16(NULL, gdq, gscr, gdout, gqkv, go, glse, gsl, B, T, NH, NG,
                                       HS, NULL);
    else
        BF16->attention_backward16(NULL, gdq, gscr, gdout, gqkv, go, glse, B, T, NH, HS, NULL);
    compare_back("  its backward16's dqkv", BF16, gdq, dq, nq, TOL_BF16);
    BF16->free(gqkv), BF16->free(gdout), BF16->free(glse), BF16->free(gdq), BF16->free(gscr);
    BF16->free(go);
    if (gsl)
        BF16->free(gsl);
    free(qkv), free(dout), free(sl), free(lse), free(dq), free(scr), free(o16);
}

/* qkv, dqkv and the output's gradient in bf16 storage too (kernels.h's attention_forward_qkv16
 * / _backward_qkv16, one pair for both layouts) against "cpu-bf16"'s: out16, lse, and dqkv16
 * from the same bf16 output and lse on both sides. HS 64 runs flash_mma.cuh, HS 48 flash.cu's
 * wmma kernels. */
static void test_attention_qkv16(int B, int T, int NH, int NG, int HS, int alibi)
{
    ops_check_group("attention_qkv16 B%d T%d NH%d NG%d HS%d alibi %d", B, T, NH, NG, HS, alibi);
    char what[112];
    size_t nq = (size_t)B * T * NG * (NH / NG + 2) * HS, no = (size_t)B * T * NH * HS;
    size_t nl = (size_t)B * NH * T, ns = (size_t)B * (NH + 1) * T;
    float *qkv = host(nq, -1, 1), *dout = host(no, -1, 1), *sl = host((size_t)NH, 0.01f, 0.5f);
    float *lse = malloc(nl * 4), *scr = malloc(ns * 4);
    const float *al = alibi ? sl : NULL;
    uint16_t *q16 = narrow(qkv, nq), *o16 = malloc(no * 2), *dq16 = malloc(nq * 2);
    uint16_t *d16 = narrow(dout, no); /* the output's gradient in bf16 too */
    uint16_t *gq16 = dev(BF16, q16, nq * 2), *go = dev(BF16, NULL, no * 2);
    uint16_t *gdout = dev(BF16, d16, no * 2);
    float *glse = dev(BF16, NULL, nl * 4);
    float *gsl = alibi ? dev(BF16, sl, (size_t)NH * 4) : NULL, *gscr = dev(BF16, NULL, ns * 4);
    uint16_t *gdq = dev(BF16, NULL, nq * 2);
    TWIN->attention_forward_qkv16(NULL, o16, lse, q16, al, B, T, NH, NG, HS, NULL);
    TWIN->attention_backward_qkv16(NULL, dq16, scr, d16, q16, o16, lse, al, B, T, NH, NG, HS,
                                   NULL);
    BF16->attention_forward_qkv16(NULL, go, glse, gq16, gsl, B, T, NH, NG, HS, NULL);
    float *want = widen(o16, no);
    snprintf(what, sizeof what, "attention_forward_qkv16 B%d T%d NH%d NG%d HS%d%s", B, T, NH, NG,
             HS, alibi ? " alibi" : "");
    compare_back16(what, BF16, go, want, no, TOL_BF16);
    free(want);
    compare_back("  its lse", BF16, glse, lse, nl, TOL_BF16);
    BF16->to_device(NULL, go, o16, no * 2); /* the same bf16 output and lse on both sides */
    BF16->to_device(NULL, glse, lse, nl * 4);
    BF16->attention_backward_qkv16(NULL, gdq, gscr, gdout, gq16, go, glse, gsl, B, T, NH, NG, HS,
                                   NULL);
    want = widen(dq16, nq);
    compare_back16("  its backward_qkv16's dqkv16", BF16, gdq, want, nq, TOL_BF16);
    free(want);
    if (repeat_backward) {
        uint16_t *again = dev(BF16, NULL, nq * 2), *h1 = malloc(nq * 2), *h2 = malloc(nq * 2);
        BF16->attention_backward_qkv16(NULL, again, gscr, gdout, gq16, go, glse, gsl, B, T, NH,
                                       NG, HS, NULL);
        BF16->to_host(NULL, h1, gdq, nq * 2);
        BF16->to_host(NULL, h2, again, nq * 2); /* (to_host waits for the stream) */
        checks++;
        if (memcmp(h1, h2, nq * 2))
            failures++, fprintf(stderr, "FAIL   its backward_qkv16 twice: different bits\n");
        else
            printf("ok     its backward_qkv16 twice: the same bits\n");
        BF16->free(again), free(h1), free(h2);
    }
    BF16->free(gq16), BF16->free(go), BF16->free(gdout), BF16->free(glse), BF16->free(gdq);
    BF16->free(gscr);
    if (gsl)
        BF16->free(gsl);
    free(qkv), free(dout), free(sl), free(lse), free(dq16), free(scr), free(q16), free(o16);
    free(d16);
}

/* --attention-cudnn: the qkv16 pair on cuDNN where it takes the call (NG = NH, no ALiBi), on
 * trident's kernels where it does not (groups and ALiBi), each backward twice. GPT-2's head
 * size (a partial tile; batches and heads) must run on cuDNN: its 6 calls and the repeats'
 * counted; head sizes 128 and 48 are checked whichever runs them (a cuDNN version may refuse
 * a shape: its message says why, and trident's kernels must then give the same results). */
static int run_attention_cudnn(void)
{
    repeat_backward = 1;
    long ran0, refused0, ran, refused;
    tr_cuda_cudnn_attention_counts(&ran0, &refused0);
    test_attention_qkv16(1, 100, 2, 2, 64, 0);
    int state = tr_cuda_cudnn_attention_counts(&ran, &refused);
    if (state <= 0) {
        printf("SKIP: %s\n", state < 0 ? "built without cuDNN's headers (meson.build's "
                                          "cudnn_include)"
                                        : "cuDNN's library does not load here "
                                          "(libcudnn.so.9, or TRIDENT_CUDNN_LIBRARY=PATH)");
        return 77;
    }
    test_attention_qkv16(2, 257, 4, 4, 64, 0);
    tr_cuda_cudnn_attention_counts(&ran, &refused);
    checks++;
    if (ran - ran0 != 6 || refused != refused0) {
        failures++;
        fprintf(stderr, "FAIL cuDNN ran %ld of the 6 attention calls at head size 64, fell back "
                        "on %ld (its messages above say why)\n", ran - ran0, refused - refused0);
    } else {
        printf("ok   cuDNN ran the 6 attention calls at head size 64\n");
    }
    ran0 = ran, refused0 = refused;
    test_attention_qkv16(1, 130, 2, 2, 128, 0);
    test_attention_qkv16(2, 70, 2, 2, 48, 0);
    test_attention_qkv16(1, 130, 4, 2, 64, 1); /* groups, ALiBi: trident's kernels */
    tr_cuda_cudnn_attention_counts(&ran, &refused);
    printf("head sizes 128 and 48: cuDNN ran %ld of their 6 calls, fell back on %ld\n",
           ran - ran0, refused - refused0);
    if (tr_cuda_status())
        failures++, fprintf(stderr, "FAIL %s\n", tr_errmsg());
    printf("%d of %d checks agree\n", checks - failures, checks);
    return failures ? 1 : 0;
}

/* the plans made on recorded GEMM algorithms (tests/cuda/test_gemm_choose.py reads it) */
static void print_choice_counts(void)
{
    long chosen, refused;
    tr_cuda_gemm_choice_counts(&chosen, &refused);
    printf("gemm choices: %ld chosen, %ld refused\n", chosen, refused);
}

int main(int argc, char **argv)
{
    /* --blocked: shapes past a 1 MiB staging (TRIDENT_CUDA_STAGING_MIB=1): gemm_out16 in
     * blocks of C, gemm_a16 in slabs of K */
    ops_check_report_crashes(); /* line-buffered output, a backtrace on a crash */
    int blocked = argc > 1 && !strcmp(argv[1], "--blocked");
    CPU = tr_kernels_cpu();
    F32 = tr_kernels_get("cuda-fp32");
    if (!F32)
        return cuda_unusable(); /* SKIP without a GPU, FAIL with one */
    BF16 = tr_kernels_get("cuda");
    TWIN = tr_kernels_get("cpu-bf16");
    printf("GPU %d: %s\n", tr_cuda_device(), tr_cuda_device_name());
    checks++;
    if (!BF16->gemm_out16 || !BF16->gemm_a16 || !BF16->xent_stats16 ||
        !BF16->xent_loss_backward16 || !BF16->xent_stats_loss_backward16 || F32->gemm_out16 ||
        !BF16->linear_forward || !BF16->linear_gelu_forward16 || !BF16->linear_backward_gelu16 ||
        F32->linear_forward || !BF16->gelu_forward16 || !BF16->gemm_b16 || F32->gemm_b16 ||
        !BF16->layernorm_forward16 || F32->layernorm_forward16 || !BF16->rmsnorm_forward16 ||
        !BF16->linear_backward || F32->linear_backward || !BF16->gelu_backward16 ||
        F32->gelu_backward16 || !BF16->gelu_exact_forward16 || !BF16->gelu_exact_backward16 ||
        F32->gelu_exact_forward16 || !F32->gelu_exact_forward || !BF16->relu_forward16 ||
        !BF16->relu_backward16 || F32->relu_forward16 || !F32->relu_forward) {
        failures++;
        fprintf(stderr, "FAIL the bf16 table lacks its fused or bf16-storage ops "
                        "(or fp32 has them)\n");
        return 1;
    }
    if (!BF16->attention_forward16 || !BF16->attention_backward16 ||
        !BF16->attention_gqa_forward16 || !BF16->attention_gqa_backward16 ||
        F32->attention_forward16 || F32->attention_gqa_forward16 ||
        !BF16->attention_forward_qkv16 || !BF16->attention_backward_qkv16 ||
        F32->attention_forward_qkv16) {
        failures++;
        fprintf(stderr, "FAIL the bf16 table lacks the attention output's bf16 ops (or fp32 "
                        "has them; TRIDENT_CUDA_ATTENTION_OUT or _IN=fp32 set?)\n");
        return 1;
    }
    if (argc > 1 && !strcmp(argv[1], "--attention-cudnn"))
        return run_attention_cudnn();
    if (blocked) {
        test_gemms(600, 1024, 1000);
        test_mlp16(600, 1024, 1000);
        test_linear(600, 1024, 1000, 1, 0, 1);
        test_linear_backward(600, 1024, 1000, 1); /* past the staging: the GEMMs unfused */
        test_gelu_backward16(600, 1000, 1024, 0);
        test_gelu_backward16(600, 1000, 1024, 1);
        test_dx16(600, 1000, 1024); /* past the staging: dx16 through gemm_out16's blocks */
        test_linear(600, 1024, 1000, 1, 0, 2); /* a residual apart, read by the first slab */
        test_fc_out16(600, 1024, 1000, 0, 1); /* W in blocks of 128 rows, x in blocks of rows */
        test_fc_out16(600, 1024, 1000, 1, 1); /* W in blocks of 384 rows */
        test_fc_out16(600, 1024, 256, 0, 1);  /* W whole, x in 3 blocks of rows */
        test_linear_gelu16(600, 1024, 1000, 1024, 0); /* the GELU epilogue per block; the
                                                       * backward past the staging: fallback */
        test_linear16(600, 1024, 1000, 0);
        test_linear16(600, 1024, 1000, 1); /* slabs of K, the residual apart */
        test_linear_backward_dy16_db(600, 1024, 1000, 0); /* the GEMMs unfused */
        if (tr_cuda_status())
            failures++, fprintf(stderr, "FAIL %s\n", tr_errmsg());
        print_choice_counts();
        printf("%d of %d checks agree\n", checks - failures, checks);
        return failures ? 1 : 0;
    }
    test_linear(96, 64, 192, 1, 0, 0);
    test_linear(96, 64, 192, 1, 1, 0); /* a bias view only 4-byte aligned */
    test_linear(96, 64, 192, 1, 4, 0); /* 16, 32, 64 bytes: the epilogue, as views into */
    test_linear(96, 64, 192, 1, 8, 1); /* the flat parameter buffer are aligned */
    test_linear(96, 64, 192, 1, 16, 2);
    test_linear(33, 40, 72, 0, 0, 1);
    test_linear(33, 40, 72, 1, 0, 1);
    test_linear(50, 128, 64, 1, 0, 2);
    test_linear_backward(96, 64, 192, 1);
    test_linear_backward(33, 40, 72, 1);
    test_linear_backward(33, 40, 72, 0);
    test_gelu_backward16(96, 256, 64, 0);
    test_gelu_backward16(96, 256, 64, 1);
    test_gelu_backward16(2049, 100, 40, 1); /* row chunks of the column sums, odd columns */
    test_gelu_exact16(96, 256);
    test_gelu_exact16(2049, 100); /* row chunks of the column sums */
    test_relu16(96, 256);
    test_relu16(2049, 100);
    test_dx16(96, 256, 64);
    test_dx16(33, 100, 40);
    test_fc_out16(96, 64, 256, 0, 1);
    test_fc_out16(96, 64, 256, 1, 1);
    test_fc_out16(33, 40, 100, 0, 0);
    test_fc_out16(33, 40, 100, 1, 1);
    test_linear16(96, 256, 64, 0);
    test_linear16(96, 256, 64, 1);
    test_linear16(33, 100, 40, 0);
    test_linear_gelu16(96, 64, 256, 64, 0); /* the GELU epilogues */
    test_linear_gelu16(37, 48, 128, 40, 1); /* x16 */
    test_linear_gelu16(33, 40, 36, 24, 0);  /* F not a multiple of 8: the fallbacks */
    test_linear_backward_dy16_db(96, 64, 192, 1); /* QKV's: x16, a bias gradient */
    test_linear_backward_dy16_db(2049, 40, 100, 0); /* row chunks of the column sums */
    test_layernorm16(513, 768);
    test_layernorm16(7, 34);
    test_rmsnorm16(513, 768);
    test_rmsnorm16(7, 34);
    test_layernorm16(9, 40000); /* rows past the shared memory: the two-pass backward */
    test_rmsnorm16(9, 64000);
    test_attention16(1, 100, 2, 2, 64, 0); /* flash_mma, a partial second tile */
    test_attention16(2, 70, 2, 2, 48, 0);  /* the wmma kernels */
    test_attention16(1, 130, 4, 2, 64, 1); /* groups, ALiBi */
    test_attention_qkv16(1, 100, 2, 2, 64, 0); /* flash_mma reading qkv16 */
    test_attention_qkv16(2, 70, 2, 2, 48, 0);  /* the wmma kernels reading it */
    test_attention_qkv16(1, 130, 4, 2, 64, 1); /* groups, ALiBi */
    test_attention_qkv16(1, 70, 4, 1, 48, 1);  /* wmma, one key/value head, ALiBi */
    test_mlp16(96, 256, 64);
    test_mlp16(33, 100, 40);
    test_gemms(37, 64, 1000);
    test_gemms(130, 96, 517); /* odd vocabulary */
    test_xent16(37, 1000, 990, 500, 0);
    test_xent16(9, 517, 517, 0, 0); /* rows not a multiple of 4: the scalar path */
    test_xent16(9, 517, 517, 0, 5); /* ... whose threads' first values are -inf (no NaN) */
    test_xent16(5, 50304, 50257, 0, 0); /* GPT-2's padded vocabulary: 16-byte rows in shared memory */
    test_xent16(5, 50304, 50257, 0, 40); /* ... a thread's first 8 columns -inf */
    test_xent16(3, 131072, 131000, 0, 0); /* a row past the shared memory: the two ops */
    if (tr_cuda_status()) {
        failures++;
        fprintf(stderr, "FAIL %s\n", tr_errmsg());
    }
    print_choice_counts();
    printf("%d of %d checks agree\n", checks - failures, checks);
    return failures ? 1 : 0;
}
