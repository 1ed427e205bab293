/* GEMM through OpenBLAS (single-threaded, see table.c), split over the team by blocks of
 * rows or columns of C. Each element of C is computed by the same kernel sequence over K
 * whatever the split, so the split does not change the result. */
#include "kernels/cpu/cpu_ops.h"

#include <cblas.h>
#include <omp.h>

/* C[M,N] = alpha op(A) op(B) + beta C on the calling thread. */
void tr_cpu_gemm_serial(int trans_a, int trans_b, int M, int N, int K, float alpha,
                        const float *A, int lda, const float *B, int ldb, float beta, float *C,
                        int ldc)
{
    if (M <= 0 || N <= 0)
        return;
    if (K <= 0 || alpha == 0.0f) {
        /* BLAS semantics: beta == 0 overwrites C without reading it */
        for (int i = 0; i < M; i++) {
            float *row = C + (size_t)i * ldc;
            if (beta == 0.0f)
                memset(row, 0, (size_t)N * sizeof(float));
            else
                for (int j = 0; j < N; j++)
                    row[j] *= beta;
        }
        return;
    }
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C,
                ldc);
}

/* Rows or columns per piece are rounded to this (a multiple of OpenBLAS's unrolls). */
#define ALIGN 32

void tr_cpu_gemm(tr_stream s, int trans_a, int trans_b, int M, int N, int K, float alpha,
                 const float *A, int lda, const float *B, int ldb, float beta, float *C,
                 int ldc)
{
    (void)s;
    int threads = tr_cpu_threads();
    double flops = (double)M * N * (K > 0 ? K : 1);
    if (threads <= 1 || flops < (double)(1 << 20) || (M < 2 * ALIGN && N < 2 * ALIGN)) {
        tr_cpu_gemm_serial(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    /* Split the larger of M and N: each thread then re-packs only the smaller operand. */
    int split_n = N >= M;
    int dim = split_n ? N : M;
    int piece = (dim + threads - 1) / threads;
    piece = (piece + ALIGN - 1) / ALIGN * ALIGN;
    int pieces = (dim + piece - 1) / piece;
#pragma omp parallel for schedule(static) num_threads(pieces)
    for (int p = 0; p < pieces; p++) {
        int lo = p * piece, len = dim - lo < piece ? dim - lo : piece;
        if (split_n) {
            /* columns [lo, lo+len) of C and of op(B) */
            const float *Bp = trans_b ? B + (size_t)lo * ldb : B + lo;
            tr_cpu_gemm_serial(trans_a, trans_b, M, len, K, alpha, A, lda, Bp, ldb, beta,
                               C + lo, ldc);
        } else {
            /* rows [lo, lo+len) of C and of op(A) */
            const float *Ap = trans_a ? A + lo : A + (size_t)lo * lda;
            tr_cpu_gemm_serial(trans_a, trans_b, len, N, K, alpha, Ap, lda, B, ldb, beta,
                               C + (size_t)lo * ldc, ldc);
        }
    }
}
