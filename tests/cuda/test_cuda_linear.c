/* tests/cuda: the "cuda" table's fused linear ops against their CPU twins, on the same random
 * inputs, within TOL_BF16 (part of test_cuda_fused: fused_tests.h; main in test_cuda_fused.c):
 *  - linear_forward (the bias in cuBLASLt's epilogue) against "cpu"'s gemm + bias_add: with a
 *    16-byte aligned bias (the epilogue), a misaligned one (bias_add after), none, a residual
 *    in place and another;
 *  - linear_backward (dy converted once for both GEMMs, the bias gradient summed in that
 *    pass) against "cpu"'s two GEMMs and bias_backward, and both linear ops on a bf16-storage
 *    input; gelu_backward16 (fc's input gradient stored bf16, its bias gradient beside it)
 *    and the linear_backward that reads it in place, and with a bias gradient of its own
 *    (QKV's, whose dy16 is attention_backward_qkv16's); fc_proj's input gradient stored bf16
 *    (dx16) and the gelu_backward16 that reads it;
 *  - fc's output in bf16 storage (linear_forward's y16) and the GELU ops reading it;
 *  - the GELU in the MLP's GEMMs (linear_gelu_forward16: cuBLASLt's GELU_AUX_BIAS epilogue;
 *    linear_backward_gelu16: its DGELU) against "cpu-bf16"'s pairs of ops. */
#include <stdio.h>
#include <stdlib.h>

#include "kernels/cuda/cuda.h"

#include "tests/cuda/fused_tests.h"
#include "tests/cuda/ops_check.h"
/* y (N, OC) = x W^T + b [+ residual]; boff: the bias's offset in floats (1: 4-byte aligned) */
void test_linear(int N, int IC, int OC, int with_bias, int boff, int residual_mode)
{
    ops_check_group("linear N%d IC%d OC%d bias %d boff %d residual %d", N, IC, OC, with_bias, boff,
                    residual_mode);
    char what[128];
    size_t ny = (size_t)N * OC;
    float *x = host((size_t)N * IC, -1, 1), *W = host((size_t)OC * IC, -1, 1);
    float *b = host((size_t)OC + 16, -1, 1), *res = host(ny, -1, 1), *y = host_copy(res, ny);
    const float *bb = with_bias ? b + boff : NULL;
    /* residual_mode 0: none, 1: in place (y holds it), 2: another buffer */
    CPU->linear_forward(NULL, y, NULL, x, NULL, W, bb,
                        residual_mode == 1 ? y : residual_mode == 2 ? res : NULL, N, IC, OC);
    float *gx = dev(BF16, x, (size_t)N * IC * 4), *gW = dev(BF16, W, (size_t)OC * IC * 4);
    float *gb = dev(BF16, b, ((size_t)OC + 16) * 4), *gr = dev(BF16, res, ny * 4);
    float *gy = dev(BF16, res, ny * 4);
    BF16->linear_forward(NULL, gy, NULL, gx, NULL, gW, with_bias ? gb + boff : NULL,
                         residual_mode == 1 ? gy : residual_mode == 2 ? gr : NULL, N, IC, OC);
    snprintf(what, sizeof what, "linear_forward %dx%d K%d bias %s residual %s", N, OC, IC,
             !with_bias   ? "none"
             : boff == 1 ? "4-byte aligned"
             : boff      ? "16-64-byte aligned"
                         : "aligned",
             residual_mode == 1 ? "in place" : residual_mode == 2 ? "other" : "none");
    compare_back(what, BF16, gy, y, ny, TOL_BF16);
    BF16->free(gx), BF16->free(gW), BF16->free(gb), BF16->free(gr), BF16->free(gy);
    free(x), free(W), free(b), free(res), free(y);
}

/* dx = dy W, dW += dy^T x, db += sum_n dy (linear_backward: dy converted once, db summed in
 * that pass) against "cpu"'s two GEMMs and bias_backward; with_db 0: no bias */
void test_linear_backward(int N, int IC, int OC, int with_db)
{
    ops_check_group("linear_backward N%d IC%d OC%d db %d", N, IC, OC, with_db);
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
    snprintf(what, sizeof what, "linear_backward dx %dx%d K%d", N, IC, OC);
    compare_back(what, BF16, gdx, dx, (size_t)N * IC, TOL_BF16);
    snprintf(what, sizeof what, "linear_backward dW += %dx%d K%d", OC, IC, N);
    compare_back(what, BF16, gdW, dW, (size_t)OC * IC, TOL_BF16);
    snprintf(what, sizeof what, "linear_backward db += %d rows%s", N, with_db ? "" : " (none)");
    /* fp32 sums of the fp32 dy (untouched without one) */
    compare_back(what, BF16, gdb, db, (size_t)OC, TOL_FP32);
    BF16->free(gx), BF16->free(gW), BF16->free(gdy), BF16->free(gdW), BF16->free(gdx);
    BF16->free(gdb);
    free(x), free(W), free(dy), free(dW), free(dx), free(db);
}

/* gelu_backward16 (fc's input gradient stored bf16, its bias gradient summed in the same
 * pass) against "cpu"'s gelu_backward and bias_backward, then fc's linear_backward reading
 * that bf16 gradient in place (input x fp32, or x16 as the LayerNorm output's bf16 storage)
 * against "cpu"'s on the same bf16 values */
void test_gelu_backward16(int N, int F, int C, int x_bf16)
{
    ops_check_group("gelu_backward16 N%d F%d C%d x16 %d", N, F, C, x_bf16);
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
    snprintf(what, sizeof what, "gelu_backward16 dbias %d rows", N);
    compare_back(what, BF16, gdb, db, (size_t)F, TOL_FP32);
    float *got = back16(BF16, gd16, nf);
    snprintf(what, sizeof what, "gelu_backward16 dinp %dx%d", N, F);
    compare(what, BF16, got, d, nf, TOL_BF16);
    uint16_t *d16 = narrow(got, nf); /* the GPU's bf16 gradient, exact, on both sides */
    free(got);
    CPU->linear_backward(NULL, dx, NULL, dW, NULL, NULL, d16, x_bf16 ? NULL : xf,
                         x_bf16 ? x16 : NULL, W, N, C, F);
    BF16->linear_backward(NULL, gdx, NULL, gdW, NULL, NULL, gd16, x_bf16 ? NULL : gx,
                          x_bf16 ? gx16 : NULL, gW, N, C, F);
    snprintf(what, sizeof what, "linear_backward (dy16%s) dx %dx%d", x_bf16 ? ", x16" : "", N, C);
    compare_back(what, BF16, gdx, dx, nx, TOL_BF16);
    snprintf(what, sizeof what, "linear_backward (dy16%s) dW %dx%d", x_bf16 ? ", x16" : "", F, C);
    compare_back(what, BF16, gdW, dW, nw, TOL_BF16);
    BF16->free(gpre), BF16->free(gdout), BF16->free(gdb), BF16->free(gx), BF16->free(gW);
    BF16->free(gdW), BF16->free(gdx), BF16->free(gd16), BF16->free(gx16);
    free(pre), free(dout), free(d), free(db), free(xf), free(W), free(dW), free(dx), free(x16);
    free(d16);
}

/* An MLP activation's bf16-storage pair of the bf16 table (fwd16 from fp32 and bf16 inputs,
 * bwd16 with fc's bias gradient) against "cpu"'s fp32 pair (fwd, bwd) */
static void check_act16(const char *name, tr_act_fn fwd, tr_act_backward_fn bwd,
                        tr_act16_fn fwd16, tr_act_backward16_fn bwd16, int N, int F)
{
    ops_check_group("%s16 N%d F%d", name, N, F);
    char what[96];
    size_t nf = (size_t)N * F;
    float *pre = host(nf, -4, 4), *dout = host(nf, -1, 1), *y = malloc(nf * 4);
    float *d = malloc(nf * 4), *db = host((size_t)F, -1, 1);
    pre[0] = 0.0f; /* ReLU's kink: value 0, slope 0 */
    uint16_t *pre16 = narrow(pre, nf);
    float *pre_w = widen(pre16, nf); /* the bf16 input's values */
    float *gpre = dev(BF16, pre, nf * 4), *gdout = dev(BF16, dout, nf * 4);
    float *gdb = dev(BF16, db, (size_t)F * 4);
    uint16_t *gpre16 = dev(BF16, pre16, nf * 2), *g16 = dev(BF16, NULL, nf * 2);
    fwd(NULL, y, pre, nf);
    fwd16(NULL, g16, gpre, NULL, nf);
    float *got = back16(BF16, g16, nf);
    snprintf(what, sizeof what, "%s_forward16 (fp32 input)", name);
    compare(what, BF16, got, y, nf, TOL_BF16);
    free(got);
    fwd(NULL, y, pre_w, nf);
    fwd16(NULL, g16, NULL, gpre16, nf);
    got = back16(BF16, g16, nf);
    snprintf(what, sizeof what, "%s_forward16 (bf16 input)", name);
    compare(what, BF16, got, y, nf, TOL_BF16);
    free(got);
    bwd(NULL, d, pre, dout, nf);
    CPU->bias_backward(NULL, db, d, N, F);
    bwd16(NULL, g16, gdb, gpre, NULL, gdout, NULL, N, F);
    snprintf(what, sizeof what, "%s_backward16 dbias %d rows", name, N);
    compare_back(what, BF16, gdb, db, (size_t)F, TOL_FP32);
    got = back16(BF16, g16, nf);
    snprintf(what, sizeof what, "%s_backward16 dinp", name);
    compare(what, BF16, got, d, nf, TOL_BF16);
    free(got);
    BF16->free(gpre), BF16->free(gdout), BF16->free(gdb), BF16->free(gpre16), BF16->free(g16);
    free(pre), free(dout), free(y), free(d), free(db), free(pre16), free(pre_w);
}

/* The exact GELU's bf16-storage ops (GPT-NeoX's MLP) */
void test_gelu_exact16(int N, int F)
{
    check_act16("gelu_exact", CPU->gelu_exact_forward, CPU->gelu_exact_backward,
                BF16->gelu_exact_forward16, BF16->gelu_exact_backward16, N, F);
}

/* ReLU's (OPT's MLP) */
void test_relu16(int N, int F)
{
    check_act16("relu", CPU->relu_forward, CPU->relu_backward, BF16->relu_forward16,
                BF16->relu_backward16, N, F);
}

/* linear_backward from a bf16 dy16 WITH a bias gradient (QKV's, from attention_backward_qkv16:
 * db += the column sums of dy16's values, in dW's BGRADB epilogue), x fp32 or x16, against
 * "cpu"'s on the same bf16 values; then with dx16 (the fused and, at 600 x 1024 x 1000 under
 * --blocked, the unfused gemm_mixed16 path) */
void test_linear_backward_dy16_db(int N, int IC, int OC, int x_bf16)
{
    ops_check_group("linear_backward dy16 db N%d IC%d OC%d x16 %d", N, IC, OC, x_bf16);
    char what[96];
    long ran0, refused0, ran1, refused1;
    tr_cuda_epilogue_counts(&ran0, &refused0);
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
    snprintf(what, sizeof what, "linear_backward (dy16, db%s) db %d rows", x_bf16 ? ", x16" : "",
             N);
    compare_back(what, BF16, gdb, db, (size_t)OC, TOL_FP32); /* fp32 sums of the same bf16 values */
    snprintf(what, sizeof what, "  its dx %dx%d", N, IC);
    compare_back(what, BF16, gdx, dx, nx, TOL_BF16);
    snprintf(what, sizeof what, "  its dW %dx%d", OC, IC);
    compare_back(what, BF16, gdW, dW, nw, TOL_BF16);
    /* within the staging db came with dW, in its BGRADB epilogue (the fallback pass gives the
     * same values: only the counts tell) */
    tr_cuda_epilogue_counts(&ran1, &refused1);
    if (!getenv("TRIDENT_CUDA_STAGING_MIB") && OC % 8 == 0 && IC % 8 == 0) {
        checks++; /* (other widths: cuBLASLt may have no BGRADB kernel; the fallback did it) */
        if (ran1 - ran0 >= 1 && refused1 == refused0) {
            printf("ok   the bias gradient's BGRADB epilogue ran\n");
        } else {
            failures++;
            fprintf(stderr, "FAIL the BGRADB epilogue: %ld ran, %ld refused by cuBLASLt (a "
                            "pass of its own did the work)\n", ran1 - ran0, refused1 - refused0);
        }
    }
    /* and dx stored bf16 (dx16: QKV's and fc's input gradient at TP 1, which
     * layernorm_backward16 reads); its dW into a scratch */
    uint16_t *gdx16 = dev(BF16, NULL, nx * 2);
    float *gdW2 = dev(BF16, NULL, nw * 4);
    BF16->linear_backward(NULL, NULL, gdx16, gdW2, NULL, NULL, gdy16, x_bf16 ? NULL : gx,
                          x_bf16 ? gx16 : NULL, gW, N, IC, OC);
    snprintf(what, sizeof what, "  its dx16 %dx%d", N, IC);
    compare_back16(what, BF16, gdx16, dx, nx, TOL_BF16);
    BF16->free(gdx16), BF16->free(gdW2);
    BF16->free(gx), BF16->free(gW), BF16->free(gdW), BF16->free(gdb), BF16->free(gdx);
    BF16->free(gx16), BF16->free(gdy16);
    free(xf), free(W), free(dyf), free(dW), free(db), free(dx), free(x16), free(dy16);
}

/* linear_forward and linear_backward on a bf16-storage input (x16: the GELU output's way into
 * fc_proj) against "cpu"'s (which widens it exactly) */
void test_linear16(int N, int IC, int OC, int separate_residual)
{
    ops_check_group("linear16 N%d IC%d OC%d residual apart %d", N, IC, OC, separate_residual);
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
    float *res = separate_residual ? host_copy(y, ny) : y;
    float *gres = separate_residual ? dev(BF16, y, ny * 4) : gy;
    if (separate_residual) { /* y's old contents must not matter */
        for (size_t i = 0; i < ny; i++)
            y[i] = 7.0f;
        BF16->to_device(NULL, gy, y, ny * 4);
    }
    CPU->linear_forward(NULL, y, NULL, NULL, x16, W, b, res, N, IC, OC);
    BF16->linear_forward(NULL, gy, NULL, NULL, gx, gW, gb, gres, N, IC, OC);
    CPU->linear_backward(NULL, dx, NULL, dW, NULL, dy, NULL, NULL, x16, W, N, IC, OC);
    BF16->linear_backward(NULL, gdx, NULL, gdW, NULL, gdy, NULL, NULL, gx, gW, N, IC, OC);
    snprintf(what, sizeof what, "linear_forward (bf16 input, residual %s) %dx%d K%d",
             separate_residual ? "apart" : "in place", N, OC, IC);
    compare_back(what, BF16, gy, y, ny, TOL_BF16);
    snprintf(what, sizeof what, "linear_backward (bf16 input) dx %dx%d", N, IC);
    compare_back(what, BF16, gdx, dx, nx, TOL_BF16);
    snprintf(what, sizeof what, "linear_backward (bf16 input) dW %dx%d", OC, IC);
    compare_back(what, BF16, gdW, dW, nw, TOL_BF16);
    BF16->free(gW), BF16->free(gb), BF16->free(gy), BF16->free(gdy), BF16->free(gdW);
    BF16->free(gdx), BF16->free(gx);
    if (separate_residual)
        BF16->free(gres), free(res);
    free(xf), free(W), free(b), free(y), free(dy), free(dW), free(dx), free(x16);
}

/* fc_proj's backward with its input gradient stored bf16 (linear_backward's dx16; x16 the GELU
 * output, dy fp32 with its bias) against "cpu"'s (dx rounded), then gelu_backward16 reading
 * that bf16 gradient (dout16) against "cpu-bf16"'s on the same bf16 values */
void test_dx16(int N, int IC, int OC)
{
    ops_check_group("dx16 N%d IC%d OC%d", N, IC, OC);
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
    float *want = widen(dx16, nx);
    snprintf(what, sizeof what, "linear_backward dx16 %dx%d K%d", N, IC, OC);
    compare_back16(what, BF16, gdx, want, nx, TOL_BF16);
    free(want);
    snprintf(what, sizeof what, "linear_backward (dx16) dW %dx%d", OC, IC);
    compare_back(what, BF16, gdW, dW, nw, TOL_BF16);
    snprintf(what, sizeof what, "linear_backward (dx16) db %d rows", N);
    compare_back(what, BF16, gdb, db, (size_t)OC, TOL_FP32);
    BF16->to_device(NULL, gdx, dx16, nx * 2); /* the same bf16 gradient on both sides */
    TWIN->gelu_backward16(NULL, d16, NULL, pre, NULL, NULL, dx16, N, IC);
    BF16->gelu_backward16(NULL, gd, NULL, gpre, NULL, NULL, gdx, N, IC);
    want = widen(d16, nx);
    snprintf(what, sizeof what, "gelu_backward16 (dout16) %dx%d", N, IC);
    compare_back16(what, BF16, gd, want, nx, TOL_BF16);
    free(want);
    BF16->free(gW), BF16->free(gdy), BF16->free(gdW), BF16->free(gdb), BF16->free(gpre);
    BF16->free(gx), BF16->free(gdx), BF16->free(gd);
    free(xf), free(W), free(dy), free(dW), free(db), free(pre), free(x16), free(dx16), free(d16);
}

/* fc's output in bf16 storage: linear_forward's y16 (input x fp32 or x16; the bias in the
 * epilogue as a bf16 vector) against "cpu-bf16"'s, then gelu_forward16 and gelu_backward16
 * reading that bf16 output, against "cpu-bf16"'s on the same bf16 values */
void test_fc_out16(int N, int IC, int OC, int x_bf16, int with_bias)
{
    ops_check_group("fc_out16 N%d IC%d OC%d x16 %d bias %d", N, IC, OC, x_bf16, with_bias);
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
    float *want = widen(y16, ny);
    snprintf(what, sizeof what, "linear_forward (bf16 output%s%s) %dx%d K%d",
             x_bf16 ? ", bf16 input" : "", with_bias ? ", bias" : "", N, OC, IC);
    compare_back16(what, BF16, gy16, want, ny, TOL_BF16);
    free(want);
    BF16->to_device(NULL, gy16, y16, ny * 2); /* the same bf16 fc output on both sides */
    TWIN->gelu_forward16(NULL, g16, NULL, y16, ny);
    BF16->gelu_forward16(NULL, gg16, NULL, gy16, ny);
    want = widen(g16, ny);
    snprintf(what, sizeof what, "gelu_forward16 (bf16 input) %zu", ny);
    compare_back16(what, BF16, gg16, want, ny, TOL_BF16);
    free(want);
    float *yw = widen(y16, ny), *dref = malloc(ny * 4);
    CPU->gelu_backward(NULL, dref, yw, dout, ny); /* fp32 products of the same input */
    CPU->bias_backward(NULL, db, dref, N, OC);
    BF16->gelu_backward16(NULL, gd16, gdb, NULL, gy16, gdout, NULL, N, OC);
    snprintf(what, sizeof what, "gelu_backward16 (bf16 input) dbias %d rows", N);
    compare_back(what, BF16, gdb, db, (size_t)OC, TOL_FP32);
    snprintf(what, sizeof what, "gelu_backward16 (bf16 input) dinp %dx%d", N, OC);
    compare_back16(what, BF16, gd16, dref, ny, TOL_BF16);
    free(yw), free(dref);
    BF16->free(gx), BF16->free(gW), BF16->free(gb), BF16->free(gdout), BF16->free(gdb);
    BF16->free(gx16), BF16->free(gy16), BF16->free(gg16), BF16->free(gd16);
    free(xf), free(W), free(b), free(dout), free(db), free(x16), free(y16), free(g16), free(d16);
}

/* The MLP with its GELU in the GEMMs: fc (x (N, IC) -> pre16, gelu16 (N, F)) by
 * linear_gelu_forward16, then fc_proj's backward (dy (N, C), W2 (C, F)) through the GELU by
 * linear_backward_gelu16, against "cpu-bf16"'s pairs of ops on the same inputs (F a multiple
 * of 8: cuBLASLt's epilogues; else their fallbacks) */
void test_linear_gelu16(int N, int IC, int F, int C, int x_bf16)
{
    ops_check_group("linear_gelu16 N%d IC%d F%d C%d x16 %d", N, IC, F, C, x_bf16);
    long ran0, refused0, ran1, refused1;
    tr_cuda_epilogue_counts(&ran0, &refused0);
    int biases = N % 2; /* odd N: fc's bias and both gradients; even: none (GELU_AUX alone) */
    char what[128];
    size_t nx = (size_t)N * IC, nf = (size_t)N * F, ny = (size_t)N * C;
    float *x = host(nx, -1, 1), *W = host((size_t)F * IC, -1, 1), *b = host((size_t)F, -1, 1);
    float *W2 = host((size_t)C * F, -0.2f, 0.2f), *dy = host(ny, -1, 1);
    float *dW = host((size_t)C * F, -1, 1), *db = host((size_t)C, -1, 1);
    float *dpb = host((size_t)F, -1, 1);
    uint16_t *x16 = narrow(x, nx), *pre16 = malloc(nf * 2), *gelu16 = malloc(nf * 2);
    uint16_t *dpre16 = malloc(nf * 2);
    TWIN->linear_gelu_forward16(NULL, pre16, gelu16, x_bf16 ? NULL : x, x_bf16 ? x16 : NULL, W,
                                biases ? b : NULL, N, IC, F);
    float *gx = dev(BF16, x, nx * 4), *gW = dev(BF16, W, (size_t)F * IC * 4);
    float *gb = dev(BF16, b, (size_t)F * 4), *gW2 = dev(BF16, W2, (size_t)C * F * 4);
    float *gdy = dev(BF16, dy, ny * 4), *gdW = dev(BF16, dW, (size_t)C * F * 4);
    float *gdb = dev(BF16, db, (size_t)C * 4), *gdpb = dev(BF16, dpb, (size_t)F * 4);
    uint16_t *gx16 = dev(BF16, x16, nx * 2), *gpre = dev(BF16, NULL, nf * 2);
    uint16_t *ggelu = dev(BF16, NULL, nf * 2), *gdpre = dev(BF16, NULL, nf * 2);
    BF16->linear_gelu_forward16(NULL, gpre, ggelu, x_bf16 ? NULL : gx, x_bf16 ? gx16 : NULL, gW,
                                biases ? gb : NULL, N, IC, F);
    float *want = widen(pre16, nf);
    snprintf(what, sizeof what, "linear_gelu_forward16%s pre %dx%d K%d", x_bf16 ? " (x16)" : "",
             N, F, IC);
    compare_back16(what, BF16, gpre, want, nf, TOL_BF16);
    free(want);
    want = widen(gelu16, nf);
    snprintf(what, sizeof what, "  its gelu %dx%d", N, F);
    compare_back16(what, BF16, ggelu, want, nf, TOL_BF16);
    free(want);
    /* the backward on the CPU's pre16 and gelu16 on both sides */
    BF16->to_device(NULL, gpre, pre16, nf * 2), BF16->to_device(NULL, ggelu, gelu16, nf * 2);
    TWIN->linear_backward_gelu16(NULL, dpre16, biases ? dpb : NULL, dW, biases ? db : NULL, dy,
                                 gelu16, pre16, W2, N, F, C);
    BF16->linear_backward_gelu16(NULL, gdpre, biases ? gdpb : NULL, gdW, biases ? gdb : NULL, gdy,
                                 ggelu, gpre, gW2, N, F, C);
    want = widen(dpre16, nf);
    snprintf(what, sizeof what, "linear_backward_gelu16 dpre %dx%d K%d", N, F, C);
    compare_back16(what, BF16, gdpre, want, nf, TOL_BF16);
    free(want);
    snprintf(what, sizeof what, "  its fc bias gradient %d", F);
    compare_back(what, BF16, gdpb, dpb, (size_t)F, TOL_BF16);
    snprintf(what, sizeof what, "  its dW %dx%d", C, F);
    compare_back(what, BF16, gdW, dW, (size_t)C * F, TOL_BF16);
    snprintf(what, sizeof what, "  its db %d", C);
    compare_back(what, BF16, gdb, db, (size_t)C, TOL_BF16);
    /* F a multiple of 8 within the staging: both GEMMs must have run with their epilogue (the
     * fallbacks give the same values: only the counts tell) */
    tr_cuda_epilogue_counts(&ran1, &refused1);
    if (F % 8 == 0 && !getenv("TRIDENT_CUDA_STAGING_MIB")) {
        checks++;
        if (ran1 - ran0 >= 2 && refused1 == refused0) {
            printf("ok   the GELU epilogues ran (%ld GEMMs)\n", ran1 - ran0);
        } else {
            failures++;
            fprintf(stderr, "FAIL the GELU epilogues: %ld ran, %ld refused by cuBLASLt (the "
                            "fallbacks did the work)\n", ran1 - ran0, refused1 - refused0);
        }
    }
    BF16->free(gx), BF16->free(gW), BF16->free(gb), BF16->free(gW2), BF16->free(gdy);
    BF16->free(gdW), BF16->free(gdb), BF16->free(gdpb), BF16->free(gx16), BF16->free(gpre);
    BF16->free(ggelu), BF16->free(gdpre);
    free(x), free(W), free(b), free(W2), free(dy), free(dW), free(db), free(dpb), free(x16);
    free(pre16), free(gelu16), free(dpre16);
}
