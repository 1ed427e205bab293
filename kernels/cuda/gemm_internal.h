/* kernels/cuda/gemm_internal.h — internal to the CUDA backend's GEMM files (not a contract):
 * the pieces of gemm_plan.c's cuBLASLt plans and calls and gemm.c's bf16 staging that
 * linear.c's fused linear ops (kernels.h's linear_forward / linear_backward, bf16 mode) are
 * built from, and the probe benchmarks/gemm_choose times algorithms with. Full comments at
 * the definitions in gemm_plan.c and gemm.c.
 * Rules:
 *  - The bf16 staging buffer (cu_gemm_staging, tr_cuda_staging_bytes) is the backend's one
 *    copy and unlocked: only ops on the compute stream may pack into it or read it (the
 *    single-stream rule, cuda_internal.h's cu_shared_stream), each op's packs and the GEMMs
 *    that read them in that stream's order. An op that calls a staging GEMM (cu_gemm_staged,
 *    cu_gemm_a16_on, cu_gemm_ex in BF16 mode, cu_gemm_out16, cu_gemm_b16) must not hold its
 *    own data in the staging across the call: the GEMM overwrites it.
 *  - Sizes and layouts as cuda_internal.h's cu_gemm_ex (row-major, element strides). */
#ifndef TR_KERNELS_CUDA_GEMM_INTERNAL_H
#define TR_KERNELS_CUDA_GEMM_INTERNAL_H

#include <stdint.h>

#include <cublasLt.h>

#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/gemm_choice.h"

/* The staging buffer, its size in bf16 elements, and whether TRIDENT_CUDA_GEMM=fast is set
 * (BF16 mode computes with 32F_FAST_16BF on the fp32 operands instead of staging them). */
uint16_t *cu_gemm_staging(void);
size_t cu_gemm_staging_elems(void);
int cu_gemm_fast(void);

/* n bf16 elements rounded up to whole 128-element (256-byte) blocks: where the next operand
 * packed after them in the staging starts, aligned for cuBLASLt */
static inline size_t cu_align128(size_t n) { return (n + 127) & ~(size_t)127; }

/* One cuBLASLt call on operands already in the mode's element type, C fp32 or (out16) bf16:
 * C = alpha op(A) op(B) + beta Cin [+ bias] (Cin NULL: C). 0, or -1 when cuBLASLt has no
 * algorithm for it (nothing launched, nothing noted: the caller may fall back). */
int cu_matmul_from(cudaStream_t st, cu_gemm_mode mode, int ta, int tb, int M, int N, int K,
                   float alpha, const void *A, int lda, long long sA, const void *B, int ldb,
                   long long sB, float beta, void *C, const void *Cin, int out16, int ldc,
                   long long sC, int batch, const void *bias);
/* cu_matmul_gelu's epilogues: GELU_AUX(_BIAS) (forward) and DGELU (backward); BGRADB:
 * cu_matmul_bgrad's */
enum { CU_GELU_FORWARD = 1, CU_GELU_BACKWARD = 2, CU_BGRADB = 3 };
/* C16 = gelu(op(A) op(B) + bias16) with the sum to aux (CU_GELU_FORWARD), or C16 = gelu'(aux)
 * op(A) op(B) (CU_GELU_BACKWARD, no bias), bf16 operands, aux bf16 (M x N, row stride ld_aux,
 * a multiple of 8). 0, or -1 (nothing launched: the caller falls back). */
int cu_matmul_gelu(cudaStream_t st, int gelu, int ta, int tb, int M, int N, int K,
                   const uint16_t *A, int lda, const uint16_t *B, int ldb, uint16_t *C16, int ldc,
                   const uint16_t *bias16, const uint16_t *aux, int ld_aux);
/* C (fp32) = op(A) op(B) + beta C, bf16 operands, and colsum (M floats, overwritten) = the
 * row sums of op(A) over K (cuBLASLt's BGRADB). 0, or -1 (nothing launched). */
int cu_matmul_bgrad(cudaStream_t st, int ta, int tb, int M, int N, int K, const uint16_t *A,
                    int lda, const uint16_t *B, int ldb, float beta, float *C, int ldc,
                    float *colsum);
/* cu_matmul_from with Cin = C and no bias; cu_matmul with an fp32 C as well */
int cu_matmul_to(cudaStream_t st, cu_gemm_mode mode, int ta, int tb, int M, int N, int K,
                 float alpha, const void *A, int lda, long long sA, const void *B, int ldb,
                 long long sB, float beta, void *C, int out16, int ldc, long long sC, int batch);
int cu_matmul(cudaStream_t st, cu_gemm_mode mode, int ta, int tb, int M, int N, int K, float alpha,
              const void *A, int lda, long long sA, const void *B, int ldb, long long sB,
              float beta, float *C, int ldc, long long sC, int batch);
/* BF16 mode on fp32 operands, staged in slabs of K; C0 (NULL: C) the matrix beta scales. With
 * bias, the first slab tries the bias epilogue; returns whether the bias was added. */
int cu_gemm_staged(cudaStream_t st, int ta, int tb, int M, int N, int K, float alpha,
                   const float *A, int lda, const float *B, int ldb, float beta, float *C,
                   const float *C0, int ldc, const float *bias);
/* kernels.h's gemm_a16 on stream st (A16 bf16 in place, B staged in slabs of K); C0 and bias
 * as cu_gemm_staged's */
int cu_gemm_a16_on(cudaStream_t st, int ta, int tb, int M, int N, int K, float alpha,
                   const uint16_t *A16, int lda, const float *B, int ldb, float beta, float *C,
                   const float *C0, int ldc, const float *bias);
/* C (rows x cols, row stride ldc) = C0 (NULL or C: nothing), on st */
void cu_gemm_copy_in(cudaStream_t st, float *C, const float *C0, int rows, int cols, int ldc);
/* Notes "op (M, N, K): no cuBLASLt algorithm or staging room" as an error for tr_cuda_status. */
void cu_gemm_note_none(const char *op, int M, int N, int K);
/* "gemm (mode .., M .., ...)": k in words, for messages */
void cu_gemm_describe(char *buf, size_t n, const cu_gemm_key *k);

/* ---- A probe: one key's descriptors outside the plan cache, and any algorithm run on them
 * (benchmarks/gemm_choose times the heuristic's candidates with it). Operands as the key
 * says (our row-major A and B, C / Cin of its type, bias: the bias vector or BGRADB's column
 * sums, aux: the GELU epilogues' matrix); one probe used by one thread at a time. */
#define CU_GEMM_CANDIDATES 16 /* the most candidates a probe lists */
typedef struct cu_gemm_probe cu_gemm_probe;
cu_gemm_probe *cu_gemm_probe_make(const cu_gemm_key *k); /* NULL: cuBLASLt cannot describe it */
/* the heuristic's first n (<= CU_GEMM_CANDIDATES) algorithms, best first; returns how many */
int cu_gemm_probe_candidates(const cu_gemm_probe *q, int n, cublasLtMatmulAlgo_t *algos);
/* whether cuBLASLt accepts algo for the key (cublasLtMatmulAlgoCheck, within the workspace) */
int cu_gemm_probe_accepts(const cu_gemm_probe *q, const cublasLtMatmulAlgo_t *algo);
/* one call: C = alpha op(A) op(B) + beta Cin (NULL: C) [epilogue]; 0, or -1 where cuBLASLt
 * refuses it */
int cu_gemm_probe_run(cu_gemm_probe *q, cudaStream_t st, const cublasLtMatmulAlgo_t *algo,
                      float alpha, const void *A, const void *B, float beta, const void *Cin,
                      void *C, const void *bias, const void *aux);
void cu_gemm_probe_free(cu_gemm_probe *q);
/* key k's GEMM as trident's own calls make it (the plan cache, a recorded choice and all):
 * operands as cu_gemm_probe_run's; 0, or -1 (no algorithm, or a refused epilogue call) */
int cu_gemm_key_run(cudaStream_t st, const cu_gemm_key *k, float alpha, const void *A,
                    const void *B, float beta, const void *Cin, void *C, const void *bias,
                    const void *aux);

#endif
