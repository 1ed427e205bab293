/* kernels/: backend lookup, memory, elementwise ops, bias, GEMM against double references
 * and finite differences. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "kernels/cuda/bf16.h"
#include "kt.h"

static void test_backend_lookup(void **state)
{
    (void)state;
    const tr_kernels *cpu = tr_kernels_get("cpu");
    assert_non_null(cpu);
    assert_ptr_equal(cpu, tr_kernels_cpu());
    assert_string_equal(cpu->name, "cpu");
    /* every slot of the table is filled but the bf16-storage ops (the head's seven, four for
     * the layers' GEMM inputs, gelu_backward16, the exact GELU's two, ReLU's two, the norms'
     * two backwards, the MLP's two GELU fusions, the attention output's four, the attention
     * input's two), which only the 16-bit tables have ("cpu-bf16", not "cpu-fp16") */
    const void *const *slot = (const void *const *)&cpu->alloc;
    size_t slots = (sizeof(tr_kernels) - offsetof(tr_kernels, alloc)) / sizeof(void *);
    size_t first16 = (offsetof(tr_kernels, gemm_out16) - offsetof(tr_kernels, alloc)) / sizeof(void *);
    for (size_t i = 0; i < slots; i++)
        if (i < first16 || i >= first16 + 26)
            assert_non_null(slot[i]);
        else
            assert_null(slot[i]);
    const tr_kernels *b16 = tr_kernels_get("cpu-bf16"), *f16 = tr_kernels_get("cpu-fp16");
    /* tr_kernels_without_bf16_storage takes out every op "cpu" lacks and the fused linear
     * ops (a *16 op added to kernels.h but not there fails here), and nothing else */
    tr_kernels plain = *b16;
    tr_kernels_without_bf16_storage(&plain);
    const void *const *pslot = (const void *const *)&plain.alloc;
    const void *const *bslot = (const void *const *)&b16->alloc;
    for (size_t i = 0; i < slots; i++)
        if (!slot[i] || pslot + i == (const void *const *)&plain.linear_forward ||
            pslot + i == (const void *const *)&plain.linear_backward)
            assert_null(pslot[i]);
        else
            assert_ptr_equal(pslot[i], bslot[i]);
    assert_true(b16->gemm_out16 && b16->gemm_a16 && b16->xent_stats16 &&
                b16->xent_loss_backward16 && b16->xent_stats_loss_backward16 &&
                b16->narrow16 && b16->gemm_mixed16 && !f16->narrow16 && !f16->gemm_mixed16);
    assert_true(b16->gelu_forward16 && b16->gemm_b16 && b16->layernorm_forward16 &&
                b16->rmsnorm_forward16 && b16->gelu_backward16 && b16->linear_backward &&
                b16->layernorm_backward16 && b16->rmsnorm_backward16 &&
                !f16->layernorm_backward16 && !f16->rmsnorm_backward16 &&
                b16->linear_gelu_forward16 && b16->linear_backward_gelu16 &&
                !f16->linear_gelu_forward16 && !f16->linear_backward_gelu16);
    assert_true(b16->attention_forward16 && b16->attention_backward16 &&
                b16->attention_gqa_forward16 && b16->attention_gqa_backward16);
    assert_true(!f16->attention_forward16 && !f16->attention_gqa_forward16);
    assert_true(b16->attention_forward_qkv16 && b16->attention_backward_qkv16 &&
                !f16->attention_forward_qkv16 && !f16->attention_backward_qkv16);
    assert_true(!f16->gemm_out16 && !f16->gemm_a16 && !f16->xent_stats16 &&
                !f16->xent_loss_backward16 && !f16->xent_stats_loss_backward16 &&
                !f16->gelu_forward16 && !f16->gemm_b16 &&
                !f16->layernorm_forward16 && !f16->rmsnorm_forward16 && !f16->gelu_backward16);

    tr_clear_error();
#ifdef TR_HAVE_CUDA /* built in: NULL only where no GPU is usable (tests/cuda covers the rest) */
    if (!tr_kernels_get("cuda"))
        assert_memory_equal(tr_errmsg(), "no CUDA device: ", 16);
#else
    assert_null(tr_kernels_get("cuda"));
    assert_string_equal(tr_errmsg(), "the CUDA backend is not built in");
#endif
    assert_null(tr_kernels_get("tpu"));
    assert_string_equal(tr_errmsg(), "unknown kernel backend \"tpu\" (expected \"cpu\" or \"cuda\")");
    assert_null(tr_kernels_get(""));
    assert_string_equal(tr_errmsg(), "unknown kernel backend \"\" (expected \"cpu\" or \"cuda\")");
    assert_null(tr_kernels_get(NULL));
    assert_string_equal(tr_errmsg(), "no kernel backend named (expected \"cpu\" or \"cuda\")");
}

/* linear_forward = copy of the residual, gemm (beta 1, or 0 without one), bias_add: the same
 * bits on the CPU, with the residual none, in place or another buffer, with and without bias */
static void test_linear_forward(void **state)
{
    (void)state;
    const int N = 37, IC = 29, OC = 53;
    float *x = kt_floats((size_t)N * IC), *W = kt_floats((size_t)OC * IC), *b = kt_floats(OC);
    float *res = kt_floats((size_t)N * OC), *y = kt_floats((size_t)N * OC);
    float *want = kt_floats((size_t)N * OC);
    kt_seed(91);
    kt_fill(x, (size_t)N * IC, -1, 1), kt_fill(W, (size_t)OC * IC, -1, 1), kt_fill(b, OC, -1, 1);
    kt_fill(res, (size_t)N * OC, -1, 1);
    for (int mode = 0; mode < 3; mode++)
        for (int with_b = 0; with_b < 2; with_b++) {
            memcpy(want, res, (size_t)N * OC * sizeof(float));
            K->gemm(NULL, 0, 1, N, OC, IC, 1.0f, x, IC, W, IC, mode ? 1.0f : 0.0f, want, OC);
            if (with_b)
                K->bias_add(NULL, want, b, N, OC);
            memcpy(y, res, (size_t)N * OC * sizeof(float));
            const float *r = mode == 0 ? NULL : mode == 1 ? y : res;
            K->linear_forward(NULL, y, NULL, x, NULL, W, with_b ? b : NULL, r, N, IC, OC);
            kt_check_same("linear_forward", y, want, (size_t)N * OC);
        }
    /* a bf16-storage input: the same as its exact fp32 widening */
    uint16_t *x16 = malloc((size_t)N * IC * sizeof *x16);
    for (size_t i = 0; i < (size_t)N * IC; i++)
        x16[i] = bf16_from_f32(x[i]), x[i] = bf16_to_f32(x16[i]);
    K->gemm(NULL, 0, 1, N, OC, IC, 1.0f, x, IC, W, IC, 0.0f, want, OC);
    K->bias_add(NULL, want, b, N, OC);
    K->linear_forward(NULL, y, NULL, NULL, x16, W, b, NULL, N, IC, OC);
    kt_check_same("linear_forward (bf16 input)", y, want, (size_t)N * OC);
    /* and a bf16-storage output: the same rounded to bf16 */
    uint16_t *y16 = malloc((size_t)N * OC * sizeof *y16);
    K->linear_forward(NULL, NULL, y16, NULL, x16, W, b, NULL, N, IC, OC);
    for (size_t i = 0; i < (size_t)N * OC; i++)
        assert_int_equal(y16[i], bf16_from_f32(want[i]));
    free(x16), free(y16);
    free(x), free(W), free(b), free(res), free(y), free(want);
}

/* linear_backward = its two gemm calls, the same bits on the CPU */
static void test_linear_backward(void **state)
{
    (void)state;
    const int N = 37, IC = 29, OC = 53;
    float *x = kt_floats((size_t)N * IC), *W = kt_floats((size_t)OC * IC);
    float *dy = kt_floats((size_t)N * OC), *dx = kt_floats((size_t)N * IC);
    float *dW = kt_floats((size_t)OC * IC), *want_dx = kt_floats((size_t)N * IC);
    float *want_dW = kt_floats((size_t)OC * IC);
    kt_seed(93);
    kt_fill(x, (size_t)N * IC, -1, 1), kt_fill(W, (size_t)OC * IC, -1, 1);
    kt_fill(dy, (size_t)N * OC, -1, 1), kt_fill(dW, (size_t)OC * IC, -1, 1);
    memcpy(want_dW, dW, (size_t)OC * IC * sizeof(float));
    K->gemm(NULL, 0, 0, N, IC, OC, 1.0f, dy, OC, W, IC, 0.0f, want_dx, IC);
    K->gemm(NULL, 1, 0, OC, IC, N, 1.0f, dy, OC, x, IC, 1.0f, want_dW, IC);
    float *db = kt_floats((size_t)OC), *want_db = kt_floats((size_t)OC);
    kt_fill(db, (size_t)OC, -1, 1);
    memcpy(want_db, db, (size_t)OC * sizeof(float));
    K->bias_backward(NULL, want_db, dy, N, OC);
    K->linear_backward(NULL, dx, NULL, dW, db, dy, NULL, x, NULL, W, N, IC, OC);
    kt_check_same("linear_backward dx", dx, want_dx, (size_t)N * IC);
    kt_check_same("linear_backward dW", dW, want_dW, (size_t)OC * IC);
    kt_check_same("linear_backward db", db, want_db, (size_t)OC);
    /* a bf16-storage input: dW as from its exact fp32 widening (dx does not read it) */
    uint16_t *x16 = malloc((size_t)N * IC * sizeof *x16);
    for (size_t i = 0; i < (size_t)N * IC; i++)
        x16[i] = bf16_from_f32(x[i]), x[i] = bf16_to_f32(x16[i]);
    K->gemm(NULL, 1, 0, OC, IC, N, 1.0f, dy, OC, x, IC, 1.0f, want_dW, IC);
    K->linear_backward(NULL, dx, NULL, dW, NULL, dy, NULL, NULL, x16, W, N, IC, OC);
    kt_check_same("linear_backward dW (bf16 input)", dW, want_dW, (size_t)OC * IC);
    /* and a bf16-storage output gradient: as its exact widening */
    uint16_t *dy16 = malloc((size_t)N * OC * sizeof *dy16);
    for (size_t i = 0; i < (size_t)N * OC; i++)
        dy16[i] = bf16_from_f32(dy[i]), dy[i] = bf16_to_f32(dy16[i]);
    K->gemm(NULL, 0, 0, N, IC, OC, 1.0f, dy, OC, W, IC, 0.0f, want_dx, IC);
    K->gemm(NULL, 1, 0, OC, IC, N, 1.0f, dy, OC, x, IC, 1.0f, want_dW, IC);
    K->linear_backward(NULL, dx, NULL, dW, NULL, NULL, dy16, NULL, x16, W, N, IC, OC);
    kt_check_same("linear_backward dx (bf16 output gradient)", dx, want_dx, (size_t)N * IC);
    kt_check_same("linear_backward dW (bf16 output gradient)", dW, want_dW, (size_t)OC * IC);
    /* and a bf16-storage input gradient (dy fp32): dx rounded to bf16 */
    uint16_t *dx16 = malloc((size_t)N * IC * sizeof *dx16);
    K->gemm(NULL, 0, 0, N, IC, OC, 1.0f, dy, OC, W, IC, 0.0f, want_dx, IC);
    K->gemm(NULL, 1, 0, OC, IC, N, 1.0f, dy, OC, x, IC, 1.0f, want_dW, IC);
    K->linear_backward(NULL, NULL, dx16, dW, NULL, dy, NULL, NULL, x16, W, N, IC, OC);
    for (size_t i = 0; i < (size_t)N * IC; i++)
        assert_int_equal(dx16[i], bf16_from_f32(want_dx[i]));
    kt_check_same("linear_backward dW (bf16 input gradient)", dW, want_dW, (size_t)OC * IC);
    free(x16), free(dy16), free(dx16), free(db), free(want_db);
    free(x), free(W), free(dy), free(dx), free(dW), free(want_dx), free(want_dW);
}

/* An activation's bf16-storage pair of "cpu-bf16" (fwd16, bwd16) against its fp32-storage pair
 * (fwd, bwd) there: the bf16 rounding of their values (and the bias gradient their sum), from
 * fp32 or bf16 inputs in [-4, 4] (pre[0] = 0: ReLU's kink) */
static void check_act16(const char *what, tr_act_fn fwd, tr_act_backward_fn bwd,
                        tr_act16_fn fwd16, tr_act_backward16_fn bwd16)
{
    const tr_kernels *b16 = tr_kernels_get("cpu-bf16");
    const int N = 7, F = 13;
    size_t nf = (size_t)N * F;
    float *pre = kt_floats(nf), *dout = kt_floats(nf), *y = kt_floats(nf), *d = kt_floats(nf);
    float *db = kt_floats((size_t)F), *want_db = kt_floats((size_t)F);
    uint16_t *pre16 = malloc(nf * sizeof *pre16), *g16 = malloc(nf * sizeof *g16);
    kt_seed(95);
    kt_fill(pre, nf, -4, 4), kt_fill(dout, nf, -1, 1), kt_fill(db, (size_t)F, -1, 1);
    pre[0] = 0.0f;
    for (size_t i = 0; i < nf; i++) /* values bf16 holds, so both input kinds agree */
        pre16[i] = bf16_from_f32(pre[i]), pre[i] = bf16_to_f32(pre16[i]);
    memcpy(want_db, db, (size_t)F * sizeof(float));
    fwd(NULL, y, pre, nf);
    bwd(NULL, d, pre, dout, nf);
    b16->bias_backward(NULL, want_db, d, N, F);
    for (int from16 = 0; from16 < 2; from16++) {
        fwd16(NULL, g16, from16 ? NULL : pre, from16 ? pre16 : NULL, nf);
        for (size_t i = 0; i < nf; i++)
            if (g16[i] != bf16_from_f32(y[i]))
                fail_msg("%s forward16 [%zu]", what, i);
        bwd16(NULL, g16, from16 ? NULL : db, from16 ? NULL : pre, from16 ? pre16 : NULL, dout,
              NULL, N, F);
        for (size_t i = 0; i < nf; i++)
            if (g16[i] != bf16_from_f32(d[i]))
                fail_msg("%s backward16 [%zu]", what, i);
    }
    kt_check_same(what, db, want_db, (size_t)F);
    free(pre), free(dout), free(y), free(d), free(db), free(want_db), free(pre16), free(g16);
}

/* "cpu-bf16"'s exact-GELU ops in bf16 storage (check_act16); "cpu-fp16" (no bf16 storage) has
 * none, "cpu" has the fp32 pair. */
static void test_gelu_exact16(void **state)
{
    (void)state;
    const tr_kernels *b16 = tr_kernels_get("cpu-bf16"), *f16 = tr_kernels_get("cpu-fp16");
    const tr_kernels *cpu = tr_kernels_cpu();
    assert_true(cpu->gelu_exact_forward && cpu->gelu_exact_backward &&
                !cpu->gelu_exact_forward16 && b16->gelu_exact_forward16 &&
                b16->gelu_exact_backward16 && !f16->gelu_exact_forward16 &&
                !f16->gelu_exact_backward16 && f16->gelu_exact_forward);
    check_act16("gelu_exact", b16->gelu_exact_forward, b16->gelu_exact_backward,
                b16->gelu_exact_forward16, b16->gelu_exact_backward16);
}

/* ReLU likewise; and the rounded tables' fp32-storage ReLU is the "cpu" one's rounded (exact
 * on bf16 inputs: ReLU keeps or zeroes them) */
static void test_relu16(void **state)
{
    (void)state;
    const tr_kernels *b16 = tr_kernels_get("cpu-bf16"), *f16 = tr_kernels_get("cpu-fp16");
    const tr_kernels *cpu = tr_kernels_cpu();
    assert_true(cpu->relu_forward && cpu->relu_backward && !cpu->relu_forward16 &&
                !cpu->relu_backward16 && b16->relu_forward16 && b16->relu_backward16 &&
                !f16->relu_forward16 && !f16->relu_backward16 && f16->relu_forward &&
                b16->relu_forward != cpu->relu_forward && f16->relu_backward != cpu->relu_backward);
    check_act16("relu", b16->relu_forward, b16->relu_backward, b16->relu_forward16,
                b16->relu_backward16);
    const size_t n = 5;
    float x[5] = {1.0f + 0x1p-12f, -1.0f, 0.0f, 3.0f, 1e-3f};
    float dout[5] = {1, 1, 1, 1.0f + 0x1p-12f, 1};
    float y[5], d[5];
    b16->relu_forward(NULL, y, x, n);
    f16->relu_backward(NULL, d, x, dout, n);
    float yw[5] = {1.0f, 0, 0, 3.0f, tr_round_bf16(1e-3f)}, dw[5] = {1, 0, 0, 1, 1};
    kt_check_same("cpu-bf16 relu_forward", y, yw, n);
    kt_check_same("cpu-fp16 relu_backward", d, dw, n);
}

/* "cpu-bf16"'s gelu_backward16 (the input gradient stored bf16, the bias gradient summed in
 * the same pass) and the linear_backward that reads it: the same bits as gelu_backward,
 * bias_backward and the two gemm calls on the kept (already rounded) gradient */
static void test_gelu_backward16(void **state)
{
    (void)state;
    const tr_kernels *b16 = tr_kernels_get("cpu-bf16");
    const int N = 19, F = 34, C = 12;
    size_t nf = (size_t)N * F;
    float *pre = kt_floats(nf), *dout = kt_floats(nf), *d = kt_floats(nf);
    float *ln = kt_floats((size_t)N * C), *W = kt_floats((size_t)F * C);
    float *db = kt_floats((size_t)F), *want_db = kt_floats((size_t)F);
    float *dW = kt_floats((size_t)F * C), *want_dW = kt_floats((size_t)F * C);
    float *dx = kt_floats((size_t)N * C), *want_dx = kt_floats((size_t)N * C);
    uint16_t *d16 = malloc(nf * sizeof *d16);
    kt_seed(94);
    kt_fill(pre, nf, -3, 3), kt_fill(dout, nf, -1, 1), kt_fill(ln, (size_t)N * C, -1, 1);
    kt_fill(W, (size_t)F * C, -1, 1), kt_fill(db, (size_t)F, -1, 1);
    kt_fill(dW, (size_t)F * C, -1, 1);
    memcpy(want_db, db, (size_t)F * sizeof(float));
    memcpy(want_dW, dW, (size_t)F * C * sizeof(float));
    b16->gelu_backward(NULL, d, pre, dout, nf);
    b16->bias_backward(NULL, want_db, d, N, F);
    b16->gemm(NULL, 0, 0, N, C, F, 1.0f, d, F, W, C, 0.0f, want_dx, C);
    b16->gemm(NULL, 1, 0, F, C, N, 1.0f, d, F, ln, C, 1.0f, want_dW, C);
    b16->gelu_backward16(NULL, d16, db, pre, NULL, dout, NULL, N, F);
    kt_check_same("gelu_backward16 dbias", db, want_db, (size_t)F);
    for (size_t i = 0; i < nf; i++)
        assert_int_equal(d16[i], bf16_from_f32(d[i]));
    b16->linear_backward(NULL, dx, NULL, dW, NULL, NULL, d16, ln, NULL, W, N, C, F);
    /* the GELU ops on a bf16-storage input (fc's output): as on its exact widening */
    uint16_t *pre16 = malloc(nf * sizeof *pre16), *g16 = malloc(nf * sizeof *g16);
    uint16_t *want16 = malloc(nf * sizeof *want16);
    for (size_t i = 0; i < nf; i++)
        pre16[i] = bf16_from_f32(pre[i]), pre[i] = bf16_to_f32(pre16[i]);
    b16->gelu_forward16(NULL, want16, pre, NULL, nf);
    b16->gelu_forward16(NULL, g16, NULL, pre16, nf);
    assert_memory_equal(g16, want16, nf * sizeof *g16);
    b16->gelu_backward16(NULL, want16, NULL, pre, NULL, dout, NULL, N, F);
    b16->gelu_backward16(NULL, g16, NULL, NULL, pre16, dout, NULL, N, F);
    assert_memory_equal(g16, want16, nf * sizeof *g16);
    /* ... and on a bf16-storage output gradient (fc_proj's dx16) */
    uint16_t *dout16 = malloc(nf * sizeof *dout16);
    for (size_t i = 0; i < nf; i++)
        dout16[i] = bf16_from_f32(dout[i]), dout[i] = bf16_to_f32(dout16[i]);
    b16->gelu_backward16(NULL, want16, NULL, NULL, pre16, dout, NULL, N, F);
    b16->gelu_backward16(NULL, g16, NULL, NULL, pre16, NULL, dout16, N, F);
    assert_memory_equal(g16, want16, nf * sizeof *g16);
    free(dout16);
    free(pre16), free(g16), free(want16);
    kt_check_same("linear_backward (dy16) dx", dx, want_dx, (size_t)N * C);
    kt_check_same("linear_backward (dy16) dW", dW, want_dW, (size_t)F * C);
    free(pre), free(dout), free(d), free(ln), free(W), free(db), free(want_db), free(dW);
    free(want_dW), free(dx), free(want_dx), free(d16);
}

/* "cpu-bf16"'s linear ops with fp32 input and output (LoRA's way: no bf16 tensor) on a thread
 * whose bf16 staging was never grown: the same bits as the unfused pieces (they once returned
 * without computing anything there: the staging of 0 floats was a NULL pointer). The thread's
 * staging buffers are freed when it ends (the sanitizer build's leak check). */
static void *fp32_linear_on_new_thread(void *arg)
{
    const tr_kernels *b16 = tr_kernels_get("cpu-bf16");
    const int N = 7, IC = 5, OC = 6;
    float x[35], W[30], b[6], y[42], want[42], dy[42], dx[35], want_dx[35];
    float dW[30] = {0}, want_dW[30] = {0}, db[6] = {0}, want_db[6] = {0};
    for (int i = 0; i < 42; i++)
        dy[i] = sinf((float)i), y[i] = -1.0f;
    for (int i = 0; i < 35; i++)
        x[i] = cosf((float)i);
    for (int i = 0; i < 30; i++)
        W[i] = sinf(0.5f * (float)i);
    for (int i = 0; i < 6; i++)
        b[i] = 0.1f * (float)i;
    b16->gemm(NULL, 0, 1, N, OC, IC, 1.0f, x, IC, W, IC, 0.0f, want, OC);
    b16->bias_add(NULL, want, b, N, OC);
    b16->gemm(NULL, 0, 0, N, IC, OC, 1.0f, dy, OC, W, IC, 0.0f, want_dx, IC);
    b16->gemm(NULL, 1, 0, OC, IC, N, 1.0f, dy, OC, x, IC, 1.0f, want_dW, IC);
    b16->bias_backward(NULL, want_db, dy, N, OC);
    b16->linear_forward(NULL, y, NULL, x, NULL, W, b, NULL, N, IC, OC);
    b16->linear_backward(NULL, dx, NULL, dW, db, dy, NULL, x, NULL, W, N, IC, OC);
    int *same = arg;
    *same = !memcmp(y, want, sizeof y) && !memcmp(dx, want_dx, sizeof dx) &&
            !memcmp(dW, want_dW, sizeof dW) && !memcmp(db, want_db, sizeof db);
    return NULL;
}

static void test_bf16_table_fp32_linear(void **state)
{
    (void)state;
    pthread_t t;
    int same = 0;
    assert_int_equal(pthread_create(&t, NULL, fp32_linear_on_new_thread, &same), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_true(same);
}

static void test_memory(void **state)
{
    (void)state;
    /* small and large (split over threads) transfers, zero-filled allocation */
    size_t sizes[] = {0, 1, 37, (size_t)5 << 20};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        size_t n = sizes[s];
        unsigned char *host = malloc(n + 1), *back = malloc(n + 1);
        assert_non_null(host);
        assert_non_null(back);
        for (size_t i = 0; i < n; i++)
            host[i] = (unsigned char)(i * 131 + 7);
        unsigned char *d = K->alloc(n), *d2 = K->alloc(n);
        assert_non_null(d);
        assert_non_null(d2);
        for (size_t i = 0; i < n; i++)
            assert_int_equal(d[i], 0);
        K->to_device(NULL, d, host, n);
        K->copy(NULL, d2, d, n);
        K->synchronize(NULL);
        K->to_host(NULL, back, d2, n);
        if (n)
            assert_memory_equal(host, back, n);
        K->zero(NULL, d2, n);
        for (size_t i = 0; i < n; i++)
            assert_int_equal(d2[i], 0);
        K->free(d);
        K->free(d2);
        free(host);
        free(back);
    }
    K->free(NULL);
}

static void test_elementwise(void **state)
{
    (void)state;
    size_t sizes[] = {0, 1, 19, 300001};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        size_t n = sizes[s];
        float *a = kt_floats(n), *b = kt_floats(n), *out = kt_floats(n);
        double *ref = kt_doubles(n);
        kt_fill(a, n, -2, 2);
        kt_fill(b, n, -2, 2);
        K->add(NULL, out, a, b, n);
        for (size_t i = 0; i < n; i++)
            ref[i] = (double)a[i] + b[i];
        kt_check("add", out, ref, NULL, n, 1e-7, 0);
        /* aliasing: out is a */
        memcpy(out, a, n * sizeof(float));
        K->add(NULL, out, out, b, n);
        kt_check("add in place", out, ref, NULL, n, 1e-7, 0);
        memcpy(out, b, n * sizeof(float));
        K->axpy(NULL, out, -0.75f, a, n);
        for (size_t i = 0; i < n; i++)
            ref[i] = (double)b[i] - 0.75 * a[i];
        kt_check("axpy", out, ref, NULL, n, 1e-6, 1e-7);
        memcpy(out, a, n * sizeof(float));
        K->scale(NULL, out, 3.5f, n);
        for (size_t i = 0; i < n; i++)
            ref[i] = 3.5 * a[i];
        kt_check("scale", out, ref, NULL, n, 1e-7, 0);
        free(a);
        free(b);
        free(out);
        free(ref);
    }
}

struct bias_ctx {
    float *x, *bias, *w, *out;
    int N, C;
};

static double bias_loss(void *p)
{
    struct bias_ctx *c = p;
    size_t n = (size_t)c->N * c->C;
    memcpy(c->out, c->x, n * sizeof(float));
    K->bias_add(NULL, c->out, c->bias, c->N, c->C);
    return kt_dot(c->out, c->w, n);
}

static void test_bias(void **state)
{
    (void)state;
    int shapes[][2] = {{7, 13}, {1, 1}, {0, 5}, {513, 130}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        int N = shapes[s][0], C = shapes[s][1];
        size_t n = (size_t)N * C;
        struct bias_ctx c = {kt_floats(n), kt_floats(C), kt_floats(n), kt_floats(n), N, C};
        kt_fill(c.x, n, -1, 1);
        kt_fill(c.bias, C, -1, 1);
        kt_fill(c.w, n, -1, 1);
        double *ref = kt_doubles(n > (size_t)C ? n : (size_t)C), *abs_sum = kt_doubles(C);
        memcpy(c.out, c.x, n * sizeof(float));
        K->bias_add(NULL, c.out, c.bias, N, C);
        for (size_t i = 0; i < n; i++)
            ref[i] = (double)c.x[i] + c.bias[i % C];
        kt_check("bias_add", c.out, ref, NULL, n, 1e-7, 0);
        /* backward accumulates: dbias = prior + sum_n dout */
        float *dbias = kt_floats(C);
        kt_fill(dbias, C, -1, 1);
        for (int j = 0; j < C; j++) {
            ref[j] = dbias[j];
            abs_sum[j] = fabs(dbias[j]);
        }
        for (size_t i = 0; i < n; i++) {
            ref[i % C] += c.w[i];
            abs_sum[i % C] += fabs(c.w[i]);
        }
        K->bias_backward(NULL, dbias, c.w, N, C);
        kt_check("bias_backward", dbias, ref, abs_sum, C, 1e-6, 0);
        if (N > 0 && N < 100) {
            double *fd = kt_doubles(C);
            float *g = kt_floats(C);
            K->bias_backward(NULL, g, c.w, N, C);
            kt_fd_grad(c.bias, C, 1e-3f, bias_loss, &c, fd);
            kt_check_fd("bias_backward vs finite differences", g, fd, C, 1e-2, 1e-3);
            free(fd);
            free(g);
        }
        free(c.x);
        free(c.bias);
        free(c.w);
        free(c.out);
        free(ref);
        free(abs_sum);
        free(dbias);
    }
}

/* op(X)[i, j] for a row-major stored X with row stride ld */
static double at(const float *X, int ld, int trans, int i, int j)
{
    return trans ? X[(size_t)j * ld + i] : X[(size_t)i * ld + j];
}

static void check_gemm(int ta, int tb, int M, int N, int K_, float alpha, float beta, int pad)
{
    /* stored shapes: A is (M, K) or (K, M) when transposed, with padding in the row stride */
    int arows = ta ? K_ : M, acols = ta ? M : K_, brows = tb ? N : K_, bcols = tb ? K_ : N;
    int lda = acols + pad, ldb = bcols + pad, ldc = N + pad;
    float *A = kt_floats((size_t)arows * lda), *B = kt_floats((size_t)brows * ldb);
    float *C = kt_floats((size_t)M * ldc);
    double *ref = kt_doubles((size_t)M * ldc), *scale = kt_doubles((size_t)M * ldc);
    kt_fill(A, (size_t)arows * lda, -1, 1);
    kt_fill(B, (size_t)brows * ldb, -1, 1);
    kt_fill(C, (size_t)M * ldc, -1, 1);
    if (beta == 0.0f)
        for (size_t i = 0; i < (size_t)M * ldc; i += 3)
            C[i] = NAN; /* beta == 0 must not read C */
    float *C0 = kt_floats((size_t)M * ldc);
    memcpy(C0, C, (size_t)M * ldc * sizeof(float));
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            size_t o = (size_t)i * ldc + j;
            double s = 0, sa = 0;
            for (int k = 0; k < K_; k++) {
                double t = at(A, lda, ta, i, k) * at(B, ldb, tb, k, j);
                s += t;
                sa += fabs(t);
            }
            ref[o] = alpha * s + (beta == 0.0f ? 0.0 : beta * (double)C[o]);
            scale[o] = fabs(alpha) * sa + (beta == 0.0f ? 0.0 : fabs(beta * (double)C[o]));
        }
    K->gemm(NULL, ta, tb, M, N, K_, alpha, A, lda, B, ldb, beta, C, ldc);
    for (int i = 0; i < M; i++) /* the padding of each row is untouched */
        for (int j = N; j < ldc; j++)
            assert_memory_equal(&C[(size_t)i * ldc + j], &C0[(size_t)i * ldc + j], sizeof(float));
    for (int i = 0; i < M; i++)
        kt_check("gemm", C + (size_t)i * ldc, ref + (size_t)i * ldc, scale + (size_t)i * ldc, N,
                 1e-5, 1e-6);
    free(A);
    free(B);
    free(C);
    free(C0);
    free(ref);
    free(scale);
}

static void test_gemm(void **state)
{
    (void)state;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            check_gemm(ta, tb, 7, 13, 5, 1.0f, 0.0f, 0);
            check_gemm(ta, tb, 7, 13, 5, -0.5f, 1.0f, 3);
            check_gemm(ta, tb, 1, 1, 1, 2.0f, 0.5f, 0);
            check_gemm(ta, tb, 5, 3, 0, 1.0f, 0.5f, 0); /* K == 0: C = beta C */
            check_gemm(ta, tb, 5, 3, 0, 1.0f, 0.0f, 1);
            /* large enough to be split over threads, by columns and by rows */
            check_gemm(ta, tb, 67, 301, 97, 1.0f, 1.0f, 2);
            check_gemm(ta, tb, 301, 67, 97, 0.25f, 0.0f, 0);
        }
}

struct gemm_ctx {
    float *A, *B, *C, *W;
    int M, N, K;
};

/* L = sum(C * W), C = A (M, K) @ B^T, B stored (N, K) */
static double gemm_loss(void *p)
{
    struct gemm_ctx *c = p;
    K->gemm(NULL, 0, 1, c->M, c->N, c->K, 1.0f, c->A, c->K, c->B, c->K, 0.0f, c->C, c->N);
    return kt_dot(c->C, c->W, (size_t)c->M * c->N);
}

/* The linear layer's backward through gemm: dA = W @ B, dB = W^T @ A. */
static void test_gemm_gradients(void **state)
{
    (void)state;
    int M = 7, N = 13, Kd = 5;
    struct gemm_ctx c = {kt_floats(M * Kd), kt_floats(N * Kd), kt_floats(M * N),
                         kt_floats(M * N), M, N, Kd};
    kt_fill(c.A, M * Kd, -1, 1);
    kt_fill(c.B, N * Kd, -1, 1);
    kt_fill(c.W, M * N, -1, 1);
    float *dA = kt_floats(M * Kd), *dB = kt_floats(N * Kd);
    K->gemm(NULL, 0, 0, M, Kd, N, 1.0f, c.W, N, c.B, Kd, 0.0f, dA, Kd);
    K->gemm(NULL, 1, 0, N, Kd, M, 1.0f, c.W, N, c.A, Kd, 0.0f, dB, Kd);
    double *fdA = kt_doubles(M * Kd), *fdB = kt_doubles(N * Kd);
    kt_fd_grad(c.A, M * Kd, 1e-3f, gemm_loss, &c, fdA);
    kt_fd_grad(c.B, N * Kd, 1e-3f, gemm_loss, &c, fdB);
    kt_check_fd("gemm dA vs finite differences", dA, fdA, M * Kd, 1e-2, 1e-3);
    kt_check_fd("gemm dB vs finite differences", dB, fdB, N * Kd, 1e-2, 1e-3);
    free(c.A);
    free(c.B);
    free(c.C);
    free(c.W);
    free(dA);
    free(dB);
    free(fdA);
    free(fdB);
}

int main(void)
{
    K = tr_kernels_cpu();
    kt_seed(11);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_backend_lookup), cmocka_unit_test(test_memory),
        cmocka_unit_test(test_linear_forward), cmocka_unit_test(test_linear_backward),
        cmocka_unit_test(test_gelu_backward16),
        cmocka_unit_test(test_gelu_exact16),   cmocka_unit_test(test_relu16),
        cmocka_unit_test(test_bf16_table_fp32_linear),
        cmocka_unit_test(test_elementwise),    cmocka_unit_test(test_bias),
        cmocka_unit_test(test_gemm),           cmocka_unit_test(test_gemm_gradients),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
