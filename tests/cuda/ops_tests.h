/* tests/cuda: the executable test_cuda_ops (meson test cuda-ops) in three files:
 * test_cuda_ops.c (memory, the arena, bf16 conversion, GEMM, elementwise, the norms, Llama's
 * ops, cross-entropy, embeddings, the optimizer, and main, which calls every check in a fixed
 * order and prints "N of M checks agree"), test_cuda_attention.c (the attention ops),
 * test_cuda_moe.c (the mixture-of-experts ops) and test_cuda_dropout.c (dropout), declared
 * here. Each check counts through
 * ops_check.h's compare; the tables (ops_check.h's CPU, F32 and BF16) are set by main before
 * any check runs. Shapes: B rows, T positions, NH heads in NG groups of head size HS; decode: n
 * new positions after `past` cached ones, caches of max_T positions. */
#ifndef TR_TESTS_CUDA_OPS_TESTS_H
#define TR_TESTS_CUDA_OPS_TESTS_H

#include "kernels/kernels.h"
#include "tests/cuda/ops_check.h"

/* the tolerance of a table's products: TOL_BF16 for "cuda", TOL_FP32 for "cuda-fp32" */
static inline double tol_of(const tr_kernels *k) { return k == BF16 ? TOL_BF16 : TOL_FP32; }

/* test_cuda_attention.c. gqa 0: attention_forward/backward (NG = NH, no ALiBi); 1: the
 * attention_gqa_* pair (ALiBi slopes when use_alibi); packed: segment ids per row */
void test_flash(const tr_kernels *k, int gqa, int B, int T, int NH, int NG, int HS,
                int use_alibi, int packed);
void test_attention_gqa_decode(const tr_kernels *k, int B, int n, int past, int max_T, int NH,
                               int NG, int HS);
void test_attention_decode(const tr_kernels *k, int B, int n, int past, int max_T, int NH,
                           int HS);

/* test_cuda_moe.c: the mixture-of-experts ops; the refusal of k > E (its kept error ends the
 * run: --moe-refusal alone), 0 when refused by name */
void test_moe(const tr_kernels *k);
int test_moe_refusal(const tr_kernels *k);

/* test_cuda_dropout.c: kernels.h's dropout and attention_gqa_dropout_* against the CPU's
 * (the masks exactly) */
void test_dropout(const tr_kernels *k);

#endif
