/* GEMMs through cuBLASLt (gemm_plan.c's plans and calls). Row-major C = alpha op(A) op(B) +
 * beta C is computed as the column-major product C^T = op(B)^T op(A)^T: cuBLASLt's "A" is our
 * B and its "B" our A, each stored matrix read in place (a row-major r x c matrix with row
 * stride ld is a column-major c x r matrix with leading dimension ld).
 *
 * BF16 mode converts the operands to bf16 (bf16.h's rounding) in a staging workspace,
 * in slabs along K when they do not fit: C = alpha sum_k op(A)[:, k] op(B)[k, :] + beta C,
 * the first slab with the caller's beta, the others with 1. The head's bf16-storage GEMMs
 * (end of file) write a bf16 C (blocks of C, never slabs of K: one rounding) or read a bf16
 * A in place.
 *
 * kernels.h's fused linear ops (linear_forward / linear_backward, bf16 mode) live in linear.c,
 * built from this file's calls and staging as gemm_internal.h exports them. */
#include <stdint.h>

#include "core/core.h"
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/gemm_internal.h"

/* fp32 operands: mode FAST_BF16 (falling back to FP32 when cuBLASLt has no algorithm for
 * these strides and alignments) or FP32; noted as an error when neither has one. */
static void matmul_f32(cudaStream_t st, cu_gemm_mode mode, int ta, int tb, int M, int N,
                       int K, float alpha, const float *A, int lda, long long sA, const float *B,
                       int ldb, long long sB, float beta, float *C, int ldc, long long sC,
                       int batch)
{
    if (mode == CU_GEMM_FAST_BF16 && !cu_matmul(st, mode, ta, tb, M, N, K, alpha, A, lda, sA, B,
                                                ldb, sB, beta, C, ldc, sC, batch))
        return;
    if (!cu_matmul(st, CU_GEMM_FP32, ta, tb, M, N, K, alpha, A, lda, sA, B, ldb, sB, beta, C, ldc,
                   sC, batch))
        return;
    cu_gemm_key k = {.mode = mode, .ta = ta, .tb = tb, .M = M, .N = N, .K = K, .lda = lda,
                  .ldb = ldb, .ldc = ldc, .batch = batch};
    char what[256];
    cu_gemm_describe(what, sizeof what, &k);
    cu_note(cudaErrorNotSupported, what);
}

/* BF16 mode: operands converted into the staging buffer, in slabs of K. With bias, the
 * first slab tries the bias epilogue; returns whether the bias was added. C0 (NULL: C): the
 * matrix beta scales, read by the first slab (a residual: no copy into C first). */
int cu_gemm_staged(cudaStream_t st, int ta, int tb, int M, int N, int K, float alpha,
                   const float *A, int lda, const float *B, int ldb, float beta, float *C,
                   const float *C0, int ldc, const float *bias)
{
    int biased = 0;
    size_t cap = cu_gemm_staging_elems() - 128; /* room for B's 256-byte start */
    size_t per_k = (size_t)M + (size_t)N;
    size_t kc = cap / per_k;
    if (kc >= 64)
        kc &= ~(size_t)63;
    if (kc < 16) { /* operands too wide to stage even 16 columns: let cuBLASLt round */
        cu_gemm_copy_in(st, C, C0, M, N, ldc);
        matmul_f32(st, CU_GEMM_FAST_BF16, ta, tb, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta,
                   C, ldc, 0, 1);
        return 0;
    }
    if (kc > (size_t)K)
        kc = (size_t)K;
    uint16_t *sa = cu_gemm_staging();
    /* the B slab starts on a 256-byte boundary after A's */
    size_t a_elems = cu_align128((size_t)M * kc);
    for (int k0 = 0; k0 < K; k0 += (int)kc) {
        int w = K - k0 < (int)kc ? K - k0 : (int)kc;
        uint16_t *sb = sa + a_elems;
        /* op(A)[:, k0:k0+w]: ta ? rows k0.. of the stored K x M : columns k0.. of M x K */
        if (ta)
            cu_pack_bf16(st, sa, A + (size_t)k0 * lda, w, M, lda);
        else
            cu_pack_bf16(st, sa, A + k0, M, w, lda);
        /* op(B)[k0:k0+w, :]: tb ? columns k0.. of the stored N x K : rows k0.. of K x N */
        if (tb)
            cu_pack_bf16(st, sb, B + k0, N, w, ldb);
        else
            cu_pack_bf16(st, sb, B + (size_t)k0 * ldb, w, N, ldb);
        float b = k0 == 0 ? beta : 1.0f;
        const float *cin = k0 == 0 ? C0 : NULL;
        if (k0 == 0 && bias)
            biased = !cu_matmul_from(st, CU_GEMM_BF16, ta, tb, M, N, w, alpha, sa, ta ? M : w, 0,
                                     sb, tb ? w : N, 0, b, C, cin, 0, ldc, 0, 1, bias);
        if (k0 == 0 && biased)
            continue;
        if (!cu_matmul_from(st, CU_GEMM_BF16, ta, tb, M, N, w, alpha, sa, ta ? M : w, 0, sb,
                            tb ? w : N, 0, b, C, cin, 0, ldc, 0, 1, NULL))
            continue;
        /* no bf16 algorithm for these shapes: this slab on the fp32 operands */
        cu_gemm_copy_in(st, C, cin, M, N, ldc);
        matmul_f32(st, CU_GEMM_FAST_BF16, ta, tb, M, N, w, alpha,
                       ta ? A + (size_t)k0 * lda : A + k0, lda, 0,
                       tb ? B + k0 : B + (size_t)k0 * ldb, ldb, 0, b, C, ldc, 0, 1);
    }
    return biased;
}

void cu_gemm_ex(cudaStream_t st, cu_gemm_mode mode, int trans_a, int trans_b, int M,
                   int N, int K, float alpha, const float *A, int lda, long long sA,
                   const float *B, int ldb, long long sB, float beta, float *C, int ldc,
                   long long sC, int batch)
{
    if (M <= 0 || N <= 0 || batch <= 0)
        return;
    if (K <= 0 || alpha == 0.0f) { /* BLAS semantics: C = beta C (beta 0 writes zeros) */
        for (int i = 0; i < batch; i++)
            cu_scale_2d(st, C + (size_t)i * (size_t)sC, M, N, ldc, beta);
        return;
    }
    if (mode == CU_GEMM_BF16 && cu_gemm_fast())
        mode = CU_GEMM_FAST_BF16;
    if (mode == CU_GEMM_BF16) {
        for (int i = 0; i < batch; i++)
            cu_gemm_staged(st, trans_a, trans_b, M, N, K, alpha, A + (size_t)i * (size_t)sA, lda,
                           B + (size_t)i * (size_t)sB, ldb, beta, C + (size_t)i * (size_t)sC, NULL,
                           ldc, NULL);
        return;
    }
    matmul_f32(st, mode, trans_a, trans_b, M, N, K, alpha, A, lda, sA, B, ldb, sB, beta, C, ldc,
               sC, batch);
}

void cu_gemm_fp32(tr_stream s, int trans_a, int trans_b, int M, int N, int K, float alpha,
                     const float *A, int lda, const float *B, int ldb, float beta, float *C,
                     int ldc)
{
    cu_gemm_ex(cu_shared_stream(s, "gemm"), CU_GEMM_FP32, trans_a, trans_b, M, N, K, alpha, A, lda, 0,
                  B, ldb, 0, beta, C, ldc, 0, 1);
}

void cu_gemm_bf16(tr_stream s, int trans_a, int trans_b, int M, int N, int K, float alpha,
                     const float *A, int lda, const float *B, int ldb, float beta, float *C,
                     int ldc)
{
    cu_gemm_ex(cu_shared_stream(s, "gemm"), CU_GEMM_BF16, trans_a, trans_b, M, N, K, alpha, A, lda, 0,
                  B, ldb, 0, beta, C, ldc, 0, 1);
}

/* ---- the head's bf16-storage GEMMs (kernels.h's gemm_out16, gemm_a16) */

void cu_gemm_note_none(const char *op, int M, int N, int K)
{
    char what[160];
    snprintf(what, sizeof what, "%s (M %d, N %d, K %d): no cuBLASLt algorithm or staging room",
             op, M, N, K);
    cu_note(cudaErrorNotSupported, what);
}

/* C (fp32, beta) or C16 (bf16) = alpha op(A) op(B), each operand fp32 (staged whole along K,
 * so each result is rounded once) or bf16 (A16, B16: read in place); in blocks of C's rows
 * and columns when the staged operands do not fit together. what names the op. */
static void gemm_mixed(cudaStream_t st, const char *what, int ta, int tb, int M, int N, int K,
                       float alpha, const float *A, const uint16_t *A16, int lda,
                       const float *B, const uint16_t *B16, int ldb, float beta, float *C,
                       uint16_t *C16, int ldc)
{
    if (M <= 0 || N <= 0)
        return;
    if (K <= 0 || alpha == 0.0f) {
        if (C16)
            cu_note(cudaMemset2DAsync(C16, (size_t)ldc * 2, 0, (size_t)N * 2, (size_t)M, st),
                    what);
        else
            cu_scale_2d(st, C, M, N, ldc, beta);
        return;
    }
    /* staged bf16 elements per row of op(A), per column of op(B) (0: read in place) */
    size_t ka = A ? (size_t)K : 0, kb = B ? (size_t)K : 0;
    size_t cap = cu_gemm_staging_elems() - 128, mb = (size_t)M, nb = (size_t)N;
    if ((size_t)M * ka + (size_t)N * kb > cap) {
        size_t cap_a = kb ? cap / 2 : cap; /* A's blocks take half when B is staged too */
        if (ka)
            mb = (size_t)M * ka <= cap_a ? (size_t)M : cap_a / ka;
        if (kb)
            nb = (cap - mb * ka) / kb;
        nb = nb > (size_t)N ? (size_t)N : nb;
    }
    if (mb >= 8 && mb < (size_t)M) /* blocks of whole 8 rows and columns: C's blocks stay */
        mb &= ~(size_t)7;         /* 16-byte aligned where C is */
    if (nb >= 8 && nb < (size_t)N)
        nb &= ~(size_t)7;
    if (mb < 1 || nb < 1) {
        cu_gemm_note_none(what, M, N, K);
        return;
    }
    uint16_t *sa = cu_gemm_staging(), *sb = sa + cu_align128(mb * ka);
    for (int i0 = 0; i0 < M; i0 += (int)mb) {
        int m = M - i0 < (int)mb ? M - i0 : (int)mb, la = lda;
        /* op(A) rows i0..: columns i0.. of the stored K x M, or rows i0.. of M x K */
        const uint16_t *a = A16 ? (ta ? A16 + i0 : A16 + (size_t)i0 * lda) : sa;
        if (A && ta)
            cu_pack_bf16(st, sa, A + i0, K, m, lda), la = m;
        else if (A)
            cu_pack_bf16(st, sa, A + (size_t)i0 * lda, m, K, lda), la = K;
        for (int j0 = 0; j0 < N; j0 += (int)nb) {
            int n = N - j0 < (int)nb ? N - j0 : (int)nb, lb = ldb;
            /* op(B) columns j0..: rows j0.. of the stored N x K, or columns j0.. of K x N */
            const uint16_t *b = B16 ? (tb ? B16 + (size_t)j0 * ldb : B16 + j0) : sb;
            if (B && tb)
                cu_pack_bf16(st, sb, B + (size_t)j0 * ldb, n, K, ldb), lb = K;
            else if (B)
                cu_pack_bf16(st, sb, B + j0, K, n, ldb), lb = n;
            void *c = C16 ? (void *)(C16 + (size_t)i0 * ldc + j0)
                          : (void *)(C + (size_t)i0 * ldc + j0);
            if (cu_matmul_to(st, CU_GEMM_BF16, ta, tb, m, n, K, alpha, a, la, 0, b, lb, 0,
                             C16 ? 0.0f : beta, c, C16 != NULL, ldc, 0, 1))
                cu_gemm_note_none(what, m, n, K);
        }
    }
}

/* C16 = alpha op(A) op(B): both operands staged whole along K (each result rounded to bf16
 * once), in blocks of C's rows and columns when they do not fit the staging together. */
void cu_gemm_out16(tr_stream s, int ta, int tb, int M, int N, int K, float alpha,
                   const float *A, int lda, const float *B, int ldb, uint16_t *C16, int ldc)
{
    gemm_mixed(cu_shared_stream(s, "gemm_out16"), "gemm_out16", ta, tb, M, N, K, alpha, A, NULL,
               lda, B, NULL, ldb, 0.0f, NULL, C16, ldc);
}

/* kernels.h's gemm_mixed16 (the head's GEMMs on its weight converted once) */
void cu_gemm_mixed16(tr_stream s, int ta, int tb, int M, int N, int K, float alpha,
                     const float *A, const uint16_t *A16, int lda, const float *B,
                     const uint16_t *B16, int ldb, float beta, float *C, uint16_t *C16, int ldc)
{
    gemm_mixed(cu_shared_stream(s, "gemm_mixed16"), "gemm_mixed16", ta, tb, M, N, K, alpha, A,
               A16, lda, B, B16, ldb, beta, C, C16, ldc);
}

void cu_narrow16(tr_stream s, uint16_t *dst16, const float *src, size_t n)
{
    cu_to_bf16(s, dst16, src, n);
}

/* C = alpha op(A16) op(B) + beta C: A read in place, B staged in slabs of K (the first with
 * the caller's beta, the others accumulating in the fp32 C). */
/* cu_gemm_a16 on stream st; with bias, the first K slab tries the bias epilogue (returns
 * whether the bias was added), and C0 is the matrix beta scales, as cu_gemm_staged's */
int cu_gemm_a16_on(cudaStream_t st, int ta, int tb, int M, int N, int K, float alpha,
                   const uint16_t *A16, int lda, const float *B, int ldb, float beta, float *C,
                   const float *C0, int ldc, const float *bias)
{
    if (M <= 0 || N <= 0)
        return 0;
    if (K <= 0 || alpha == 0.0f) {
        cu_gemm_copy_in(st, C, C0, M, N, ldc);
        cu_scale_2d(st, C, M, N, ldc, beta);
        return 0;
    }
    size_t kc = cu_gemm_staging_elems() / (size_t)N;
    if (kc >= 64)
        kc &= ~(size_t)63;
    if (kc < 1) {
        cu_gemm_note_none("gemm_a16", M, N, K);
        return 0;
    }
    if (kc > (size_t)K)
        kc = (size_t)K;
    int biased = 0;
    for (int k0 = 0; k0 < K; k0 += (int)kc) {
        int w = K - k0 < (int)kc ? K - k0 : (int)kc;
        if (tb) /* op(B) rows k0..: columns k0.. of the stored N x K */
            cu_pack_bf16(st, cu_gemm_staging(), B + k0, N, w, ldb);
        else
            cu_pack_bf16(st, cu_gemm_staging(), B + (size_t)k0 * ldb, w, N, ldb);
        /* op(A) columns k0..: rows k0.. of the stored K x M, or columns k0.. of M x K */
        const uint16_t *a = ta ? A16 + (size_t)k0 * lda : A16 + k0;
        float b = k0 ? 1.0f : beta;
        const float *cin = k0 == 0 ? C0 : NULL;
        if (k0 == 0 && bias)
            biased = !cu_matmul_from(st, CU_GEMM_BF16, ta, tb, M, N, w, alpha, a, lda, 0, cu_gemm_staging(),
                                     tb ? w : N, 0, b, C, cin, 0, ldc, 0, 1, bias);
        if (k0 == 0 && biased)
            continue;
        if (cu_matmul_from(st, CU_GEMM_BF16, ta, tb, M, N, w, alpha, a, lda, 0, cu_gemm_staging(),
                           tb ? w : N, 0, b, C, cin, 0, ldc, 0, 1, NULL))
            cu_gemm_note_none("gemm_a16", M, N, w);
    }
    return biased;
}

void cu_gemm_a16(tr_stream s, int ta, int tb, int M, int N, int K, float alpha,
                 const uint16_t *A16, int lda, const float *B, int ldb, float beta, float *C,
                 int ldc)
{
    cu_gemm_a16_on(cu_shared_stream(s, "gemm_a16"), ta, tb, M, N, K, alpha, A16, lda, B, ldb, beta,
                   C, NULL, ldc, NULL);
}

/* C = alpha op(A) op(B16) + beta C: B read in place, A staged in slabs of K (the first with
 * the caller's beta, the others accumulating in the fp32 C). */
void cu_gemm_b16(tr_stream s, int ta, int tb, int M, int N, int K, float alpha, const float *A,
                 int lda, const uint16_t *B16, int ldb, float beta, float *C, int ldc)
{
    cudaStream_t st = cu_shared_stream(s, "gemm_b16");
    if (M <= 0 || N <= 0)
        return;
    if (K <= 0 || alpha == 0.0f) {
        cu_scale_2d(st, C, M, N, ldc, beta);
        return;
    }
    size_t kc = cu_gemm_staging_elems() / (size_t)M;
    if (kc >= 64)
        kc &= ~(size_t)63;
    if (kc < 1) {
        cu_gemm_note_none("gemm_b16", M, N, K);
        return;
    }
    if (kc > (size_t)K)
        kc = (size_t)K;
    for (int k0 = 0; k0 < K; k0 += (int)kc) {
        int w = K - k0 < (int)kc ? K - k0 : (int)kc;
        if (ta) /* op(A) columns k0..: rows k0.. of the stored K x M */
            cu_pack_bf16(st, cu_gemm_staging(), A + (size_t)k0 * lda, w, M, lda);
        else
            cu_pack_bf16(st, cu_gemm_staging(), A + k0, M, w, lda);
        /* op(B) rows k0..: columns k0.. of the stored N x K, or rows k0.. of K x N */
        const uint16_t *b = tb ? B16 + k0 : B16 + (size_t)k0 * ldb;
        if (cu_matmul_to(st, CU_GEMM_BF16, ta, tb, M, N, w, alpha, cu_gemm_staging(), ta ? M : w, 0, b, ldb,
                         0, k0 ? 1.0f : beta, C, 0, ldc, 0, 1))
            cu_gemm_note_none("gemm_b16", M, N, w);
    }
}
