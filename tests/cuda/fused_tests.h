/* tests/cuda: the executable test_cuda_fused (meson tests cuda-fused-ops and
 * cuda-fused-ops-blocked) in two files: test_cuda_fused.c (the bf16-storage ops, and main,
 * which calls every check in a fixed order and prints "N of M checks agree") and
 * test_cuda_linear.c (the fused linear ops, declared here). Each check counts through
 * ops_check.h's compare; the tables (ops_check.h's CPU, BF16, and TWIN here) are set by main
 * before any check runs. Sizes: N rows (tokens), IC input and OC output features. */
#ifndef TR_TESTS_CUDA_FUSED_TESTS_H
#define TR_TESTS_CUDA_FUSED_TESTS_H

#include "kernels/kernels.h"

extern const tr_kernels *TWIN; /* "cpu-bf16" */

/* test_cuda_linear.c */
void test_linear(int N, int IC, int OC, int with_bias, int boff, int residual_mode);
void test_linear_backward(int N, int IC, int OC, int with_db);
void test_gelu_backward16(int N, int F, int C, int x_bf16);
void test_gelu_exact16(int N, int F);
void test_relu16(int N, int F);
void test_linear_backward_dy16_db(int N, int IC, int OC, int x_bf16);
void test_linear16(int N, int IC, int OC, int separate_residual);
void test_dx16(int N, int IC, int OC);
void test_fc_out16(int N, int IC, int OC, int x_bf16, int with_bias);
void test_linear_gelu16(int N, int IC, int F, int C, int x_bf16);

#endif
