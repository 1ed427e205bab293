/* tests/cuda: the "cuda" table's fused and bf16-storage ops against their CPU twins, on the
 * same random inputs, within TOL_BF16 (both round their operands, and the head's results, to
 * bf16; sums in another order may land one bf16 step apart):
 *  - linear_forward (the bias in cuBLASLt's epilogue) against "cpu"'s gemm + bias_add: with a
 *    16-byte aligned bias (the epilogue), a misaligned one (bias_add after), none, a residual
 *    in place and another;
 *  - linear_backward (dy converted once for both GEMMs, the bias gradient summed in that
 *    pass) against "cpu"'s two GEMMs and bias_backward, and both linear ops on a bf16-storage
 *    input; gelu_backward16 (fc's input gradient stored bf16, its bias gradient beside it)
 *    and the linear_backward that reads it in place, and with a bias gradient of its own
 *    (QKV's, whose dy16 is attention_backward_qkv16's);
 *  - fc's output in bf16 storage (linear_forward's y16) and the GELU ops reading it;
 *  - layernorm_forward16 and rmsnorm_forward16 against "cpu-bf16"'s;
 *  - the attention output in bf16 storage (attention_forward16 / _backward16, the GQA pair
 *    with groups and ALiBi; the mma and the wmma kernels) against "cpu-bf16"'s, and its
 *    input qkv too (attention_forward_qkv16 / _backward_qkv16);
 *  - the MLP activation's bf16 storage (gelu_forward16, and fc_proj's GEMMs reading it:
 *    gemm_a16 forward, gemm_b16 weight gradient) against "cpu-bf16"'s;
 *  - the chunked head's bf16-storage ops (kernels.h: gemm_out16, gemm_a16, xent_stats16,
 *    xent_loss_backward16) against "cpu-bf16"'s: the head's three GEMMs (logits = x W^T,
 *    dx = dlogits W, dW += dlogits^T x) with odd sizes and a beta = 1 accumulation, the
 *    cross-entropy on rows whose length is a multiple of 4 (vector path) and not (scalar),
 *    with padding columns, targets held elsewhere, loss weights, in place.
 * --blocked (run with TRIDENT_CUDA_STAGING_MIB=1): shapes past the staging, so gemm_out16 works
 * in blocks of C and gemm_a16 and linear_forward in slabs of K.
 * Exit 77 (SKIP) without a GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "kernels/cuda/bf16.h"
#include "kernels/cuda/cuda.h"
#include "tests/cuda/cuda_skip.h"
#include "tests/cuda/ops_check.h"

static const tr_kernels *TWIN; /* "cpu-bf16" */

static float *widen(const uint16_t *h, size_t n)
{
    float *f = malloc((n ? n : 1) * sizeof *f);
    for (size_t i = 0; i < n; i++)
        f[i] = bf16_to_f32(h[i]);
    return f;
}

static uint16_t *narrow(const float *f, size_t n)
{
    uint16_t *h = malloc((n ? n : 1) * sizeof *h);
    for (size_t i = 0; i < n; i++)
        h[i] = bf16_from_f32(f[i]);
    return h;
}

/* bf16 device array (n halves) back to host floats */
static float *back16(const uint16_t *d, size_t n)
{
    uint16_t *h = malloc((n ? n : 1) * sizeof *h);
    BF16->to_host(NULL, h, d, n * sizeof *h);
    float *f = widen(h, n);
    free(h);
    return f;
}

/* logits (n, V) = x (n, C) W^T (V, C), then dx = dl W and dW += dl^T x with dl bf16 */
static void test_gemms(int n, int C, int V)
{
    char what[96];
    float *x = host((size_t)n * C, -1, 1), *W = host((size_t)V * C, -1, 1);
    float *dW = host((size_t)V * C, -1, 1);
    uint16_t *l16 = malloc((size_t)n * V * 2);
    TWIN->gemm_out16(NULL, 0, 1, n, V, C, 1.0f, x, C, W, C, l16, V);
    float *gx = dev(BF16, x, (size_t)n * C * 4), *gW = dev(BF16, W, (size_t)V * C * 4);
    uint16_t *gl = dev(BF16, NULL, (size_t)n * V * 2);
    BF16->gemm_out16(NULL, 0, 1, n, V, C, 1.0f, gx, C, gW, C, gl, V);
    float *want = widen(l16, (size_t)n * V), *got = back16(gl, (size_t)n * V);
    snprintf(what, sizeof what, "gemm_out16 logits %dx%d K%d", n, V, C);
    compare(what, BF16, got, want, (size_t)n * V, TOL_BF16);
    free(want), free(got);
    /* the backward GEMMs on the same bf16 matrix (the CPU's result, sent to the GPU) */
    BF16->to_device(NULL, gl, l16, (size_t)n * V * 2);
    float *dx = malloc((size_t)n * C * 4), *gdx = dev(BF16, NULL, (size_t)n * C * 4);
    float *gdW = dev(BF16, dW, (size_t)V * C * 4);
    TWIN->gemm_a16(NULL, 0, 0, n, C, V, 1.0f, l16, V, W, C, 0.0f, dx, C);
    TWIN->gemm_a16(NULL, 1, 0, V, C, n, 0.5f, l16, V, x, C, 1.0f, dW, C);
    BF16->gemm_a16(NULL, 0, 0, n, C, V, 1.0f, gl, V, gW, C, 0.0f, gdx, C);
    BF16->gemm_a16(NULL, 1, 0, V, C, n, 0.5f, gl, V, gx, C, 1.0f, gdW, C);
    got = back(BF16, gdx, (size_t)n * C);
    snprintf(what, sizeof what, "gemm_a16 dx %dx%d K%d", n, C, V);
    compare(what, BF16, got, dx, (size_t)n * C, TOL_BF16);
    free(got);
    got = back(BF16, gdW, (size_t)V * C);
    snprintf(what, sizeof what, "gemm_a16 dW += (trans A) %dx%d K%d", V, C, n);
    compare(what, BF16, got, dW, (size_t)V * C, TOL_BF16);
    free(got);
    BF16->free(gx), BF16->free(gW), BF16->free(gl), BF16->free(gdx), BF16->free(gdW);
    free(x), free(W), free(dW), free(l16), free(dx);
}

/* stats and loss + backward (weighted, in place) on bf16 logits (N, V), n_valid columns */
static void test_xent16(int N, int V, int n_valid, int v_start)
{
    char what[96];
    size_t nl = (size_t)N * V;
    float *lf = host(nl, -8, 8), *weights = host((size_t)N, 0, 2);
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
    float *got = back(BF16, gst, (size_t)N * 3);
    snprintf(what, sizeof what, "xent_stats16 N%d V%d", N, V);
    compare(what, BF16, got, st, (size_t)N * 3, TOL_FP32);
    free(got);
    got = back(BF16, gloss, (size_t)N);
    snprintf(what, sizeof what, "xent_loss_backward16 losses N%d V%d", N, V);
    compare(what, BF16, got, loss, (size_t)N, TOL_FP32);
    free(got);
    float *want = widen(d16, nl);
    got = back16(gl, nl);
    snprintf(what, sizeof what, "xent_loss_backward16 dlogits N%d V%d", N, V);
    compare(what, BF16, got, want, nl, TOL_BF16);
    free(got), free(want);
    BF16->free(gl), BF16->free(gt), BF16->free(gst), BF16->free(gloss), BF16->free(gw);
    free(lf), free(weights), free(l16), free(targets), free(st), free(loss), free(d16);
}

/* the MLP activation's: gelu_forward16, then dW += dy^T gelu16 (gemm_b16, as fc_proj's weight
 * gradient) and y = gelu16 W^T (gemm_a16, its forward) */
static void test_mlp16(int N, int F, int C)
{
    char what[96];
    size_t nf = (size_t)N * F;
    float *pre = host(nf, -3, 3), *dy = host((size_t)N * C, -1, 1), *W = host((size_t)C * F, -1, 1);
    float *dW = host((size_t)C * F, -1, 1), *y = malloc((size_t)N * C * 4);
    uint16_t *g16 = malloc(nf * 2);
    TWIN->gelu_forward16(NULL, g16, pre, NULL, nf);
    TWIN->gemm_b16(NULL, 1, 0, C, F, N, 1.0f, dy, C, g16, F, 1.0f, dW, F);
    TWIN->gemm_a16(NULL, 0, 1, N, C, F, 1.0f, g16, F, W, F, 0.0f, y, C);
    float *gpre = dev(BF16, pre, nf * 4), *gdy = dev(BF16, dy, (size_t)N * C * 4);
    float *gW = dev(BF16, W, (size_t)C * F * 4), *gdW = dev(BF16, dW, (size_t)C * F * 4);
    float *gy = dev(BF16, NULL, (size_t)N * C * 4);
    uint16_t *gg = dev(BF16, NULL, nf * 2);
    BF16->gelu_forward16(NULL, gg, gpre, NULL, nf);
    float *want = widen(g16, nf), *got = back16(gg, nf);
    snprintf(what, sizeof what, "gelu_forward16 %zu", nf);
    compare(what, BF16, got, want, nf, TOL_BF16);
    free(want), free(got);
    BF16->to_device(NULL, gg, g16, nf * 2); /* the same bf16 input on both sides */
    BF16->gemm_b16(NULL, 1, 0, C, F, N, 1.0f, gdy, C, gg, F, 1.0f, gdW, F);
    BF16->gemm_a16(NULL, 0, 1, N, C, F, 1.0f, gg, F, gW, F, 0.0f, gy, C);
    got = back(BF16, gdW, (size_t)C * F);
    snprintf(what, sizeof what, "gemm_b16 dW += %dx%d K%d", C, F, N);
    compare(what, BF16, got, dW, (size_t)C * F, TOL_BF16);
    free(got);
    got = back(BF16, gy, (size_t)N * C);
    snprintf(what, sizeof what, "gemm_a16 fc_proj %dx%d K%d", N, C, F);
    compare(what, BF16, got, y, (size_t)N * C, TOL_BF16);
    free(got);
    BF16->free(gpre), BF16->free(gdy), BF16->free(gW), BF16->free(gdW), BF16->free(gy);
    BF16->free(gg);
    free(pre), free(dy), free(W), free(dW), free(y), free(g16);
}

/* layernorm_forward16 (the LayerNorm outputs feeding QKV and fc) against "cpu-bf16"'s */
static void test_layernorm16(int N, int C)
{
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
    float *want = widen(y16, n), *got = back16(gy, n);
    snprintf(what, sizeof what, "layernorm_forward16 %dx%d", N, C);
    compare(what, BF16, got, want, n, TOL_BF16);
    free(want), free(got);
    got = back(BF16, gr, (size_t)N);
    snprintf(what, sizeof what, "layernorm_forward16 rstd %d", N);
    compare(what, BF16, got, rstd, (size_t)N, TOL_FP32);
    free(got);
    BF16->free(gx), BF16->free(gw), BF16->free(gb), BF16->free(gm), BF16->free(gr), BF16->free(gy);
    free(x), free(w), free(b), free(mean), free(rstd), free(y16);
}

/* rmsnorm_forward16 (the RMSNorm families' way) against "cpu-bf16"'s */
static void test_rmsnorm16(int N, int C)
{
    char what[96];
    size_t n = (size_t)N * C;
    float *x = host(n, -2, 2), *w = host((size_t)C, 0.5f, 1.5f), *rstd = malloc((size_t)N * 4);
    uint16_t *y16 = malloc(n * 2);
    TWIN->rmsnorm_forward16(NULL, y16, rstd, x, w, N, C, 1e-5f);
    float *gx = dev(BF16, x, n * 4), *gw = dev(BF16, w, (size_t)C * 4);
    float *gr = dev(BF16, NULL, (size_t)N * 4);
    uint16_t *gy = dev(BF16, NULL, n * 2);
    BF16->rmsnorm_forward16(NULL, gy, gr, gx, gw, N, C, 1e-5f);
    float *want = widen(y16, n), *got = back16(gy, n);
    snprintf(what, sizeof what, "rmsnorm_forward16 %dx%d", N, C);
    compare(what, BF16, got, want, n, TOL_BF16);
    free(want), free(got);
    BF16->free(gx), BF16->free(gw), BF16->free(gr), BF16->free(gy);
    free(x), free(w), free(rstd), free(y16);
}

/* y (N, OC) = x W^T + b [+ residual]; boff: the bias's offset in floats (1: 4-byte aligned) */
static void test_linear(int N, int IC, int OC, int with_bias, int boff, int residual_mode)
{
    char what[128];
    size_t ny = (size_t)N * OC;
    float *x = host((size_t)N * IC, -1, 1), *W = host((size_t)OC * IC, -1, 1);
    float *b = host((size_t)OC + 16, -1, 1), *res = host(ny, -1, 1), *y = dup(res, ny);
    const float *bb = with_bias ? b + boff : NULL;
    /* residual_mode 0: none, 1: in place (y holds it), 2: another buffer */
    CPU->linear_forward(NULL, y, NULL, x, NULL, W, bb,
                        residual_mode == 1 ? y : residual_mode == 2 ? res : NULL, N, IC, OC);
    float *gx = dev(BF16, x, (size_t)N * IC * 4), *gW = dev(BF16, W, (size_t)OC * IC * 4);
    float *gb = dev(BF16, b, ((size_t)OC + 16) * 4), *gr = dev(BF16, res, ny * 4);
    float *gy = dev(BF16, res, ny * 4);
    BF16->linear_forward(NULL, gy, NULL, gx, NULL, gW, with_bias ? gb + boff : NULL,
                         residual_mode == 1 ? gy : residual_mode == 2 ? gr : NULL, N, IC, OC);
    float *got = back(BF16, gy, ny);
    snprintf(what, sizeof what, "linear_forward %dx%d K%d bias %s residual %s", N, OC, IC,
             !with_bias   ? "none"
             : boff == 1 ? "4-byte aligned"
             : boff      ? "16-64-byte aligned"
                         : "aligned",
             residual_mode == 1 ? "in place" : residual_mode == 2 ? "other" : "none");
    compare(what, BF16, got, y, ny, TOL_BF16);
    free(got);
    BF16->free(gx), BF16->free(gW), BF16->free(gb), BF16->free(gr), BF16->free(gy);
    free(x), free(W), free(b), free(res), free(y);
}

/* dx = dy W, dW += dy^T x, db += sum_n dy (linear_backward: dy converted once, db summed in
 * that pass) against "cpu"'s two GEMMs and bias_backward; with_db 0: no bias */
static void test_linear_backward(int N, int IC, int OC, int with_db)
{
    char what[96];
    float *x = host((size_t)N * IC, -1, 1), *W = host((size_t)OC * IC, -1, 1);
    float *dy = host((size_t)N * OC, -1, 1), *dW = host((size_t)OC * IC, -1, 1);
    float *db = host((size_t)OC, -1, 1), *dx = malloc((size_t)N * IC * 4);
    float *gx = dev(BF16, x, (size_t)N * IC * 4), *gW = dev(BF16, W, (size_t)OC * IC * 4);
    float *gdy = dev(BF16, dy, (size_t)N * OC * 4), *gdW = dev(BF16, dW, (size_t)OC * IC * 4);
    float *gdx = dev(BF16, NULL, (size_t)N * IC * 4), *gdb = dev(BF16, db, (size_t)OC * 4);
    CPU->linear_backward(NULL, dx, NULL, dW, with_db ? db : NULL, dy, NULL, x, NULL, W, N, IC,
                         OC);
    BF16->linear_backward(NULL, gdx, NULL, gdW, with_db ? gdb : NULL, gdy, NULL, gx, NULL, gW, N,
                          IC, OC);
    float *got = back(BF16, gdx, (size_t)N * IC);
    snprintf(what, sizeof what, "linear_backward dx %dx%d K%d", N, IC, OC);
    compare(what, BF16, got, dx, (size_t)N * IC, TOL_BF16);
    free(got);
    got = back(BF16, gdW, (size_t)OC * IC);
    snprintf(what, sizeof what, "linear_backward dW += %dx%d K%d", OC, IC, N);
    compare(what, BF16, got, dW, (size_t)OC * IC, TOL_BF16);
    free(got);
    got = back(BF16, gdb, (size_t)OC); /* fp32 sums of the fp32 dy (untouched without one) */
    snprintf(what, sizeof what, "linear_backward db += %d rows%s", N, with_db ? "" : " (none)");
    compare(what, BF16, got, db, (size_t)OC, TOL_FP32);
    free(got);
    BF16->free(gx), BF16->free(gW), BF16->free(gdy), BF16->free(gdW), BF16->free(gdx);
    BF16->free(gdb);
    free(x), free(W), free(dy), free(dW), free(dx), free(db);
}

/* gelu_backward16 (fc's input gradient stored bf16, its bias gradient summed in the same
 * pass) against "cpu"'s gelu_backward and bias_backward, then fc's linear_backward reading
 * that bf16 gradient in place (input x fp32, or x16 as the LayerNorm output's bf16 storage)
 * against "cpu"'s on the same bf16 values */
static void test_gelu_backward16(int N, int F, int C, int x_bf16)
{
    char what[96];
    size_t nf = (size_t)N * F, nx = (size_t)N * C, nw = (size_t)F * C;
    float *pre = host(nf, -3, 3), *dout = host(nf, -1, 1), *d = malloc(nf * 4);
    float *db = host((size_t)F, -1, 1), *xf = host(nx, -1, 1), *W = host(nw, -1, 1);
    float *dW = host(nw, -1, 1), *dx = malloc(nx * 4);
    uint16_t *x16 = narrow(xf, nx);
    float *gpre = dev(BF16, pre, nf * 4), *gdout = dev(BF16, dout, nf * 4);
    float *gdb = dev(BF16, db, (size_t)F * 4), *gx = dev(BF16, xf, nx * 4);
    float *gW = dev(BF16, W, nw * 4), *gdW = dev(BF16, dW, nw * 4), *gdx = dev(BF16, NULL, nx * 4);
    uint16_t *gd16 = dev(BF16, NULL, nf * 2), *gx16 = dev(BF16, x16, nx * 2);
    CPU->gelu_backward(NULL, d, pre, dout, nf);
    CPU->bias_backward(NULL, db, d, N, F);
    BF16->gelu_backward16(NULL, gd16, gdb, gpre, NULL, gdout, NULL, N, F);
    float *got = back(BF16, gdb, (size_t)F);
    snprintf(what, sizeof what, "gelu_backward16 dbias %d rows", N);
    compare(what, BF16, got, db, (size_t)F, TOL_FP32);
    free(got);
    got = back16(gd16, nf);
    snprintf(what, sizeof what, "gelu_backward16 dinp %dx%d", N, F);
    compare(what, BF16, got, d, nf, TOL_BF16);
    uint16_t *d16 = narrow(got, nf); /* the GPU's bf16 gradient, exact, on both sides */
    free(got);
    CPU->linear_backward(NULL, dx, NULL, dW, NULL, NULL, d16, x_bf16 ? NULL : xf,
                         x_bf16 ? x16 : NULL, W, N, C, F);
    BF16->linear_backward(NULL, gdx, NULL, gdW, NULL, NULL, gd16, x_bf16 ? NULL : gx,
                          x_bf16 ? gx16 : NULL, gW, N, C, F);
    got = back(BF16, gdx, nx);
    snprintf(what, sizeof what, "linear_backward (dy16%s) dx %dx%d", x_bf16 ? ", x16" : "", N, C);
    compare(what, BF16, got, dx, nx, TOL_BF16);
    free(got);
    got = back(BF16, gdW, nw);
    snprintf(what, sizeof what, "linear_backward (dy16%s) dW %dx%d", x_bf16 ? ", x16" : "", F, C);
    compare(what, BF16, got, dW, nw, TOL_BF16);
    free(got);
    BF16->free(gpre), BF16->free(gdout), BF16->free(gdb), BF16->free(gx), BF16->free(gW);
    BF16->free(gdW), BF16->free(gdx), BF16->free(gd16), BF16->free(gx16);
    free(pre), free(dout), free(d), free(db), free(xf), free(W), free(dW), free(dx), free(x16);
    free(d16);
}

/* linear_backward from a bf16 dy16 WITH a bias gradient (QKV's, from attention_backward_qkv16:
 * db += the column sums of dy16's values, a pass of its own), x fp32 or x16, against "cpu"'s on
 * the same bf16 values */
static void test_linear_backward_dy16_db(int N, int IC, int OC, int x_bf16)
{
    char what[96];
    size_t nx = (size_t)N * IC, ny = (size_t)N * OC, nw = (size_t)OC * IC;
    float *xf = host(nx, -1, 1), *W = host(nw, -1, 1), *dyf = host(ny, -1, 1);
    float *dW = host(nw, -1, 1), *db = host((size_t)OC, -1, 1), *dx = malloc(nx * 4);
    uint16_t *x16 = narrow(xf, nx), *dy16 = narrow(dyf, ny);
    float *gx = dev(BF16, xf, nx * 4), *gW = dev(BF16, W, nw * 4), *gdW = dev(BF16, dW, nw * 4);
    float *gdb = dev(BF16, db, (size_t)OC * 4), *gdx = dev(BF16, NULL, nx * 4);
    uint16_t *gx16 = dev(BF16, x16, nx * 2), *gdy16 = dev(BF16, dy16, ny * 2);
    CPU->linear_backward(NULL, dx, NULL, dW, db, NULL, dy16, x_bf16 ? NULL : xf,
                         x_bf16 ? x16 : NULL, W, N, IC, OC);
    BF16->linear_backward(NULL, gdx, NULL, gdW, gdb, NULL, gdy16, x_bf16 ? NULL : gx,
                          x_bf16 ? gx16 : NULL, gW, N, IC, OC);
    float *got = back(BF16, gdb, (size_t)OC); /* fp32 sums of the same bf16 values */
    snprintf(what, sizeof what, "linear_backward (dy16, db%s) db %d rows", x_bf16 ? ", x16" : "",
             N);
    compare(what, BF16, got, db, (size_t)OC, TOL_FP32);
    free(got);
    got = back(BF16, gdx, nx);
    snprintf(what, sizeof what, "  its dx %dx%d", N, IC);
    compare(what, BF16, got, dx, nx, TOL_BF16);
    free(got);
    got = back(BF16, gdW, nw);
    snprintf(what, sizeof what, "  its dW %dx%d", OC, IC);
    compare(what, BF16, got, dW, nw, TOL_BF16);
    free(got);
    BF16->free(gx), BF16->free(gW), BF16->free(gdW), BF16->free(gdb), BF16->free(gdx);
    BF16->free(gx16), BF16->free(gdy16);
    free(xf), free(W), free(dyf), free(dW), free(db), free(dx), free(x16), free(dy16);
}

/* linear_forward and linear_backward on a bf16-storage input (x16: the GELU output's way into
 * fc_proj) against "cpu"'s (which widens it exactly) */
static void test_linear16(int N, int IC, int OC, int separate_residual)
{
    char what[112];
    size_t nx = (size_t)N * IC, ny = (size_t)N * OC, nw = (size_t)OC * IC;
    float *xf = host(nx, -1, 1), *W = host(nw, -1, 1), *b = host((size_t)OC, -1, 1);
    float *y = host(ny, -1, 1), *dy = host(ny, -1, 1), *dW = host(nw, -1, 1);
    float *dx = malloc(nx * 4);
    uint16_t *x16 = narrow(xf, nx);
    float *gW = dev(BF16, W, nw * 4), *gb = dev(BF16, b, (size_t)OC * 4);
    float *gy = dev(BF16, y, ny * 4), *gdy = dev(BF16, dy, ny * 4);
    float *gdW = dev(BF16, dW, nw * 4), *gdx = dev(BF16, NULL, nx * 4);
    uint16_t *gx = dev(BF16, x16, nx * 2);
    /* onto a residual: in place, or another buffer (cuBLASLt's C input apart from y) */
    float *res = separate_residual ? dup(y, ny) : y;
    float *gres = separate_residual ? dev(BF16, y, ny * 4) : gy;
    if (separate_residual) /* y's old contents must not matter */
        for (size_t i = 0; i < ny; i++)
            y[i] = 7.0f;
    if (separate_residual)
        BF16->to_device(NULL, gy, y, ny * 4);
    CPU->linear_forward(NULL, y, NULL, NULL, x16, W, b, res, N, IC, OC);
    BF16->linear_forward(NULL, gy, NULL, NULL, gx, gW, gb, gres, N, IC, OC);
    CPU->linear_backward(NULL, dx, NULL, dW, NULL, dy, NULL, NULL, x16, W, N, IC, OC);
    BF16->linear_backward(NULL, gdx, NULL, gdW, NULL, gdy, NULL, NULL, gx, gW, N, IC, OC);
    float *got = back(BF16, gy, ny);
    snprintf(what, sizeof what, "linear_forward (bf16 input, residual %s) %dx%d K%d",
             separate_residual ? "apart" : "in place", N, OC, IC);
    compare(what, BF16, got, y, ny, TOL_BF16);
    free(got);
    got = back(BF16, gdx, nx);
    snprintf(what, sizeof what, "linear_backward (bf16 input) dx %dx%d", N, IC);
    compare(what, BF16, got, dx, nx, TOL_BF16);
    free(got);
    got = back(BF16, gdW, nw);
    snprintf(what, sizeof what, "linear_backward (bf16 input) dW %dx%d", OC, IC);
    compare(what, BF16, got, dW, nw, TOL_BF16);
    free(got);
    BF16->free(gW), BF16->free(gb), BF16->free(gy), BF16->free(gdy), BF16->free(gdW);
    BF16->free(gdx), BF16->free(gx);
    if (separate_residual)
        BF16->free(gres), free(res);
    free(xf), free(W), free(b), free(y), free(dy), free(dW), free(dx), free(x16);
}

/* fc_proj's backward with its input gradient stored bf16 (linear_backward's dx16; x16 the GELU
 * output, dy fp32 with its bias) against "cpu"'s (dx rounded), then gelu_backward16 reading
 * that bf16 gradient (dout16) against "cpu-bf16"'s on the same bf16 values */
static void test_dx16(int N, int IC, int OC)
{
    char what[96];
    size_t nx = (size_t)N * IC, ny = (size_t)N * OC, nw = (size_t)OC * IC;
    float *xf = host(nx, -1, 1), *W = host(nw, -1, 1), *dy = host(ny, -1, 1);
    float *dW = host(nw, -1, 1), *db = host((size_t)OC, -1, 1), *pre = host(nx, -3, 3);
    uint16_t *x16 = narrow(xf, nx), *dx16 = malloc(nx * 2), *d16 = malloc(nx * 2);
    float *gW = dev(BF16, W, nw * 4), *gdy = dev(BF16, dy, ny * 4), *gdW = dev(BF16, dW, nw * 4);
    float *gdb = dev(BF16, db, (size_t)OC * 4), *gpre = dev(BF16, pre, nx * 4);
    uint16_t *gx = dev(BF16, x16, nx * 2), *gdx = dev(BF16, NULL, nx * 2);
    uint16_t *gd = dev(BF16, NULL, nx * 2);
    CPU->linear_backward(NULL, NULL, dx16, dW, db, dy, NULL, NULL, x16, W, N, IC, OC);
    BF16->linear_backward(NULL, NULL, gdx, gdW, gdb, gdy, NULL, NULL, gx, gW, N, IC, OC);
    float *want = widen(dx16, nx), *got = back16(gdx, nx);
    snprintf(what, sizeof what, "linear_backward dx16 %dx%d K%d", N, IC, OC);
    compare(what, BF16, got, want, nx, TOL_BF16);
    free(want), free(got);
    got = back(BF16, gdW, nw);
    snprintf(what, sizeof what, "linear_backward (dx16) dW %dx%d", OC, IC);
    compare(what, BF16, got, dW, nw, TOL_BF16);
    free(got);
    got = back(BF16, gdb, (size_t)OC);
    snprintf(what, sizeof what, "linear_backward (dx16) db %d rows", N);
    compare(what, BF16, got, db, (size_t)OC, TOL_FP32);
    free(got);
    BF16->to_device(NULL, gdx, dx16, nx * 2); /* the same bf16 gradient on both sides */
    TWIN->gelu_backward16(NULL, d16, NULL, pre, NULL, NULL, dx16, N, IC);
    BF16->gelu_backward16(NULL, gd, NULL, gpre, NULL, NULL, gdx, N, IC);
    want = widen(d16, nx), got = back16(gd, nx);
    snprintf(what, sizeof what, "gelu_backward16 (dout16) %dx%d", N, IC);
    compare(what, BF16, got, want, nx, TOL_BF16);
    free(want), free(got);
    BF16->free(gW), BF16->free(gdy), BF16->free(gdW), BF16->free(gdb), BF16->free(gpre);
    BF16->free(gx), BF16->free(gdx), BF16->free(gd);
    free(xf), free(W), free(dy), free(dW), free(db), free(pre), free(x16), free(dx16), free(d16);
}

/* The attention output in bf16 storage (kernels.h's attention_forward16 / _backward16, or the
 * attention_gqa_ pair with groups or ALiBi) against "cpu-bf16"'s: out16, lse, and dqkv from the
 * same bf16 output on both sides. HS 64 runs flash_mma.cuh, HS 48 flash.cu's wmma kernels. */
static void test_attention16(int B, int T, int NH, int NG, int HS, int alibi)
{
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
    float *want = widen(o16, no), *got = back16(go, no);
    snprintf(what, sizeof what, "attention%s_forward16 B%d T%d NH%d NG%d HS%d", gqa ? "_gqa" : "",
             B, T, NH, NG, HS);
    compare(what, BF16, got, want, no, TOL_BF16);
    free(want), free(got);
    got = back(BF16, glse, nl);
    compare("  its lse", BF16, got, lse, nl, TOL_BF16);
    free(got);
    BF16->to_device(NULL, go, o16, no * 2); /* the same bf16 output and lse on both sides */
    BF16->to_device(NULL, glse, lse, nl * 4);
    if (gqa)
        BF16->attention_gqa_backward16(NULL, gdq, gscr, gdout, gqkv, go, glse, gsl, B, T, NH, NG,
                                       HS, NULL);
    else
        BF16->attention_backward16(NULL, gdq, gscr, gdout, gqkv, go, glse, B, T, NH, HS, NULL);
    got = back(BF16, gdq, nq);
    compare("  its backward16's dqkv", BF16, got, dq, nq, TOL_BF16);
    free(got);
    BF16->free(gqkv), BF16->free(gdout), BF16->free(glse), BF16->free(gdq), BF16->free(gscr);
    BF16->free(go);
    if (gsl)
        BF16->free(gsl);
    free(qkv), free(dout), free(sl), free(lse), free(dq), free(scr), free(o16);
}

/* qkv and dqkv in bf16 storage too (kernels.h's attention_forward_qkv16 / _backward_qkv16, one
 * pair for both layouts) against "cpu-bf16"'s: out16, lse, and dqkv16 from the same bf16 output
 * and lse on both sides. HS 64 runs flash_mma.cuh, HS 48 flash.cu's wmma kernels. */
static void test_attention_qkv16(int B, int T, int NH, int NG, int HS, int alibi)
{
    char what[112];
    size_t nq = (size_t)B * T * NG * (NH / NG + 2) * HS, no = (size_t)B * T * NH * HS;
    size_t nl = (size_t)B * NH * T, ns = (size_t)B * (NH + 1) * T;
    float *qkv = host(nq, -1, 1), *dout = host(no, -1, 1), *sl = host((size_t)NH, 0.01f, 0.5f);
    float *lse = malloc(nl * 4), *scr = malloc(ns * 4);
    const float *al = alibi ? sl : NULL;
    uint16_t *q16 = narrow(qkv, nq), *o16 = malloc(no * 2), *dq16 = malloc(nq * 2);
    uint16_t *gq16 = dev(BF16, q16, nq * 2), *go = dev(BF16, NULL, no * 2);
    float *gdout = dev(BF16, dout, no * 4), *glse = dev(BF16, NULL, nl * 4);
    float *gsl = alibi ? dev(BF16, sl, (size_t)NH * 4) : NULL, *gscr = dev(BF16, NULL, ns * 4);
    uint16_t *gdq = dev(BF16, NULL, nq * 2);
    TWIN->attention_forward_qkv16(NULL, o16, lse, q16, al, B, T, NH, NG, HS, NULL);
    TWIN->attention_backward_qkv16(NULL, dq16, scr, dout, q16, o16, lse, al, B, T, NH, NG, HS,
                                   NULL);
    BF16->attention_forward_qkv16(NULL, go, glse, gq16, gsl, B, T, NH, NG, HS, NULL);
    float *want = widen(o16, no), *got = back16(go, no);
    snprintf(what, sizeof what, "attention_forward_qkv16 B%d T%d NH%d NG%d HS%d%s", B, T, NH, NG,
             HS, alibi ? " alibi" : "");
    compare(what, BF16, got, want, no, TOL_BF16);
    free(want), free(got);
    got = back(BF16, glse, nl);
    compare("  its lse", BF16, got, lse, nl, TOL_BF16);
    free(got);
    BF16->to_device(NULL, go, o16, no * 2); /* the same bf16 output and lse on both sides */
    BF16->to_device(NULL, glse, lse, nl * 4);
    BF16->attention_backward_qkv16(NULL, gdq, gscr, gdout, gq16, go, glse, gsl, B, T, NH, NG, HS,
                                   NULL);
    want = widen(dq16, nq), got = back16(gdq, nq);
    compare("  its backward_qkv16's dqkv16", BF16, got, want, nq, TOL_BF16);
    free(want), free(got);
    BF16->free(gq16), BF16->free(go), BF16->free(gdout), BF16->free(glse), BF16->free(gdq);
    BF16->free(gscr);
    if (gsl)
        BF16->free(gsl);
    free(qkv), free(dout), free(sl), free(lse), free(dq16), free(scr), free(q16), free(o16);
}

/* fc's output in bf16 storage: linear_forward's y16 (input x fp32 or x16; the bias in the
 * epilogue as a bf16 vector) against "cpu-bf16"'s, then gelu_forward16 and gelu_backward16
 * reading that bf16 output, against "cpu-bf16"'s on the same bf16 values */
static void test_fc_out16(int N, int IC, int OC, int x_bf16, int with_bias)
{
    char what[112];
    size_t nx = (size_t)N * IC, ny = (size_t)N * OC, nw = (size_t)OC * IC;
    float *xf = host(nx, -1, 1), *W = host(nw, -1, 1), *b = host((size_t)OC, -1, 1);
    float *dout = host(ny, -1, 1), *db = host((size_t)OC, -1, 1);
    uint16_t *x16 = narrow(xf, nx), *y16 = malloc(ny * 2), *g16 = malloc(ny * 2);
    uint16_t *d16 = malloc(ny * 2);
    const float *bb = with_bias ? b : NULL;
    TWIN->linear_forward(NULL, NULL, y16, x_bf16 ? NULL : xf, x_bf16 ? x16 : NULL, W, bb, NULL,
                         N, IC, OC);
    float *gx = dev(BF16, xf, nx * 4), *gW = dev(BF16, W, nw * 4), *gb = dev(BF16, b, OC * 4);
    float *gdout = dev(BF16, dout, ny * 4), *gdb = dev(BF16, db, (size_t)OC * 4);
    uint16_t *gx16 = dev(BF16, x16, nx * 2), *gy16 = dev(BF16, NULL, ny * 2);
    uint16_t *gg16 = dev(BF16, NULL, ny * 2), *gd16 = dev(BF16, NULL, ny * 2);
    BF16->linear_forward(NULL, NULL, gy16, x_bf16 ? NULL : gx, x_bf16 ? gx16 : NULL, gW,
                         with_bias ? gb : NULL, NULL, N, IC, OC);
    float *want = widen(y16, ny), *got = back16(gy16, ny);
    snprintf(what, sizeof what, "linear_forward (bf16 output%s%s) %dx%d K%d",
             x_bf16 ? ", bf16 input" : "", with_bias ? ", bias" : "", N, OC, IC);
    compare(what, BF16, got, want, ny, TOL_BF16);
    free(want), free(got);
    BF16->to_device(NULL, gy16, y16, ny * 2); /* the same bf16 fc output on both sides */
    TWIN->gelu_forward16(NULL, g16, NULL, y16, ny);
    BF16->gelu_forward16(NULL, gg16, NULL, gy16, ny);
    want = widen(g16, ny), got = back16(gg16, ny);
    snprintf(what, sizeof what, "gelu_forward16 (bf16 input) %zu", ny);
    compare(what, BF16, got, want, ny, TOL_BF16);
    free(want), free(got);
    float *yw = widen(y16, ny), *dref = malloc(ny * 4);
    CPU->gelu_backward(NULL, dref, yw, dout, ny); /* fp32 products of the same input */
    CPU->bias_backward(NULL, db, dref, N, OC);
    BF16->gelu_backward16(NULL, gd16, gdb, NULL, gy16, gdout, NULL, N, OC);
    got = back(BF16, gdb, (size_t)OC);
    snprintf(what, sizeof what, "gelu_backward16 (bf16 input) dbias %d rows", N);
    compare(what, BF16, got, db, (size_t)OC, TOL_FP32);
    free(got);
    got = back16(gd16, ny);
    snprintf(what, sizeof what, "gelu_backward16 (bf16 input) dinp %dx%d", N, OC);
    compare(what, BF16, got, dref, ny, TOL_BF16);
    free(got), free(yw), free(dref);
    BF16->free(gx), BF16->free(gW), BF16->free(gb), BF16->free(gdout), BF16->free(gdb);
    BF16->free(gx16), BF16->free(gy16), BF16->free(gg16), BF16->free(gd16);
    free(xf), free(W), free(b), free(dout), free(db), free(x16), free(y16), free(g16), free(d16);
}

int main(int argc, char **argv)
{
    /* --blocked: shapes past a 1 MiB staging (TRIDENT_CUDA_STAGING_MIB=1): gemm_out16 in
     * blocks of C, gemm_a16 in slabs of K */
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
        !BF16->xent_loss_backward16 || F32->gemm_out16 || !BF16->linear_forward ||
        F32->linear_forward || !BF16->gelu_forward16 || !BF16->gemm_b16 || F32->gemm_b16 ||
        !BF16->layernorm_forward16 || F32->layernorm_forward16 || !BF16->rmsnorm_forward16 ||
        !BF16->linear_backward || F32->linear_backward || !BF16->gelu_backward16 ||
        F32->gelu_backward16) {
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
        test_linear16(600, 1024, 1000, 0);
        test_linear16(600, 1024, 1000, 1); /* slabs of K, the residual apart */
        test_linear_backward_dy16_db(600, 1024, 1000, 0); /* the GEMMs unfused */
        if (tr_cuda_status())
            failures++, fprintf(stderr, "FAIL %s\n", tr_errmsg());
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
    test_dx16(96, 256, 64);
    test_dx16(33, 100, 40);
    test_fc_out16(96, 64, 256, 0, 1);
    test_fc_out16(96, 64, 256, 1, 1);
    test_fc_out16(33, 40, 100, 0, 0);
    test_fc_out16(33, 40, 100, 1, 1);
    test_linear16(96, 256, 64, 0);
    test_linear16(96, 256, 64, 1);
    test_linear16(33, 100, 40, 0);
    test_linear_backward_dy16_db(96, 64, 192, 1); /* QKV's: x16, a bias gradient */
    test_linear_backward_dy16_db(2049, 40, 100, 0); /* row chunks of the column sums */
    test_layernorm16(513, 768);
    test_layernorm16(7, 34);
    test_rmsnorm16(513, 768);
    test_rmsnorm16(7, 34);
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
    test_xent16(37, 1000, 990, 500);
    test_xent16(9, 517, 517, 0); /* rows not a multiple of 4: the scalar path */
    if (tr_cuda_status()) {
        failures++;
        fprintf(stderr, "FAIL %s\n", tr_errmsg());
    }
    printf("%d of %d checks agree\n", checks - failures, checks);
    return failures ? 1 : 0;
}
