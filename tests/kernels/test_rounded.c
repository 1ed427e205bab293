/* The CPU backend's 16-bit storage emulation (kernels.h: tr_kernels_cpu_rounded): the two
 * roundings at their edges (ties to even, fp16 subnormals and overflow, NaN), and the tables:
 * a GEMM equals the fp32 GEMM of rounded operands rounded after, its operands (master weights)
 * untouched; a LayerNorm reads its weight rounded; an accumulating op rounds the sum. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kt.h"



static void test_fp16_rounding(void **state)
{
    (void)state;
    assert_true(tr_round_fp16(65504.0f) == 65504.0f);           /* the largest */
    assert_true(tr_round_fp16(65519.99f) == 65504.0f);          /* below the halfway point */
    assert_true(isinf(tr_round_fp16(65520.0f)) && tr_round_fp16(65520.0f) > 0); /* at it */
    assert_true(isinf(tr_round_fp16(-1e6f)) && tr_round_fp16(-1e6f) < 0);
    assert_true(tr_round_fp16(1.0f + 0x1p-11f) == 1.0f);        /* tie: to even */
    assert_true(tr_round_fp16(1.0f + 3 * 0x1p-11f) == 1.0f + 0x1p-9f);
    assert_true(tr_round_fp16(1.0f + 0x1p-11f + 0x1p-20f) == 1.0f + 0x1p-10f);
    assert_true(tr_round_fp16(0x1p-14f) == 0x1p-14f);           /* the smallest normal */
    assert_true(tr_round_fp16(0x1p-25f) == 0.0f);               /* subnormal tie: to even (0) */
    assert_true(tr_round_fp16(3 * 0x1p-25f) == 0x1p-23f);       /* subnormal tie: to even */
    assert_true(tr_round_fp16(-5 * 0x1p-24f) == -5 * 0x1p-24f); /* a subnormal, exact */
    assert_true(tr_round_fp16(0x1p-26f) == 0.0f);
    assert_true(isnan(tr_round_fp16(NAN)));
    assert_true(isinf(tr_round_fp16(INFINITY)));
    assert_true(tr_round_fp16(0.1f) == 0.0999755859375f);       /* 0x2E66 */
}

static void test_bf16_rounding(void **state)
{
    (void)state;
    assert_true(tr_round_bf16(1.0f + 0x1p-8f) == 1.0f);          /* tie: to even */
    assert_true(tr_round_bf16(1.0f + 3 * 0x1p-8f) == 1.0f + 0x1p-6f);
    assert_true(tr_round_bf16(0.1f) == 0.10009765625f);          /* 0x3DCD */
    assert_true(isinf(tr_round_bf16(3.4e38f)));                 /* past the largest bf16 */
    assert_true(isnan(tr_round_bf16(NAN)));
}

static void test_tables(void **state)
{
    (void)state;
    const tr_kernels *cpu = tr_kernels_cpu();
    const tr_kernels *b16 = tr_kernels_get("cpu-bf16"), *f16 = tr_kernels_get("cpu-fp16");
    assert_non_null(b16);
    assert_non_null(f16);
    assert_string_equal(b16->name, "cpu-bf16");
    assert_string_equal(f16->name, "cpu-fp16");
    assert_null(tr_kernels_cpu_rounded("fp8"));
    enum { M = 7, N = 5, KK = 9 };
    float A[M * KK], W[N * KK], A0[M * KK], W0[N * KK], Ar[M * KK], Wr[N * KK];
    float C1[M * N], C2[M * N];
    kt_seed(7);
    kt_fill(A, M * KK, -3, 3);
    kt_fill(W, N * KK, -3, 3);
    memcpy(A0, A, sizeof A), memcpy(W0, W, sizeof W);
    for (int i = 0; i < M * KK; i++)
        Ar[i] = tr_round_fp16(A[i]);
    for (int i = 0; i < N * KK; i++)
        Wr[i] = tr_round_fp16(W[i]);
    /* C = A W^T, as the linear layers call it */
    f16->gemm(NULL, 0, 1, M, N, KK, 1.0f, A, KK, W, KK, 0.0f, C1, N);
    cpu->gemm(NULL, 0, 1, M, N, KK, 1.0f, Ar, KK, Wr, KK, 0.0f, C2, N);
    for (int i = 0; i < M * N; i++)
        C2[i] = tr_round_fp16(C2[i]);
    kt_check_same("fp16 gemm = fp32 gemm of rounded operands, rounded", C1, C2, M * N);
    kt_check_same("the operands (master weights) are untouched", A, A0, M * KK);
    kt_check_same("the weight operand is untouched", W, W0, N * KK);
    /* an accumulating op rounds the sum: bias_backward into a gradient */
    float db[N] = {0}, want[N];
    f16->bias_backward(NULL, db, C1, M, N);
    cpu->bias_backward(NULL, want, C1, M, N); /* want starts as garbage: zero it first */
    memset(want, 0, sizeof want);
    cpu->bias_backward(NULL, want, C1, M, N);
    for (int i = 0; i < N; i++)
        want[i] = tr_round_fp16(want[i]);
    kt_check_same("bias_backward's sum rounded", db, want, N);
    /* LayerNorm reads its weight rounded, keeps mean and rstd in fp32 */
    float x[2 * N], w[N], b[N], out1[2 * N], out2[2 * N], mean[2], rstd[2], mean2[2], rstd2[2];
    float wr[N], br[N];
    kt_fill(x, 2 * N, -1, 1);
    kt_fill(w, N, 0.5f, 1.5f);
    kt_fill(b, N, -0.1f, 0.1f);
    for (int i = 0; i < N; i++)
        wr[i] = tr_round_bf16(w[i]), br[i] = tr_round_bf16(b[i]);
    b16->layernorm_forward(NULL, out1, mean, rstd, x, w, b, 2, N, 1e-5f);
    cpu->layernorm_forward(NULL, out2, mean2, rstd2, x, wr, br, 2, N, 1e-5f);
    for (int i = 0; i < 2 * N; i++)
        out2[i] = tr_round_bf16(out2[i]);
    kt_check_same("bf16 layernorm: rounded weight in, rounded out", out1, out2, 2 * N);
    kt_check_same("bf16 layernorm: mean in fp32", mean, mean2, 2);
    kt_check_same("bf16 layernorm: rstd in fp32", rstd, rstd2, 2);
    /* fp16 overflows to infinity where fp32 does not */
    float big[2] = {40000.0f, 40000.0f}, sum[2];
    f16->add(NULL, sum, big, big, 2);
    assert_true(isinf(sum[0]) && isinf(sum[1]));
    b16->add(NULL, sum, big, big, 2);
    assert_true(sum[0] == 79872.0f); /* 80000 in bf16 (8 significant bits) */
}

int main(void)
{
    K = tr_kernels_cpu();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fp16_rounding),
        cmocka_unit_test(test_bf16_rounding),
        cmocka_unit_test(test_tables),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
