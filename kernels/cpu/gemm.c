/* GEMM through OpenBLAS (single-threaded, see table.c), split over the team by blocks of
 * rows or columns of C fixed by the shape (see cpu_gemm). */
#include "kernels/cpu/cpu_ops.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>

/* C[M,N] = alpha op(A) op(B) + beta C on the calling thread. */
void cpu_gemm_serial(int trans_a, int trans_b, int M, int N, int K, float alpha,
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

/* The larger of M and N is cut into blocks of ALIGN rows or columns (OpenBLAS's unrolls; the
 * last block shorter), and the blocks into `pieces` runs of consecutive blocks as even as
 * whole blocks allow: one piece per MIN_PIECE_MACS multiply-adds (a small piece costs more
 * in call overhead and re-packing the other operand than it gains in balance), at most
 * MAX_PIECES. The cut depends on the shape alone: OpenBLAS's kernels compute an element of C
 * differently depending on where it falls in the piece it was given (tail handling), so a
 * cut that followed the thread count would change results with it. Threads take pieces
 * dynamically (pool.c); one thread runs them in order. */
#define ALIGN 32
#define MAX_PIECES 8
#define MIN_PIECE_MACS (4.0 * 1024 * 1024)

typedef struct {
    int trans_a, trans_b, M, N, K, lda, ldb, ldc, split_n, blocks, pieces;
    float alpha, beta;
    const float *A, *B;
    float *C;
} gemm_job;

static void gemm_piece(void *ctx, size_t p)
{
    const gemm_job *g = ctx;
    int dim = g->split_n ? g->N : g->M;
    /* blocks [p blocks / pieces, (p + 1) blocks / pieces) */
    int b0 = (int)((long long)p * g->blocks / g->pieces);
    int b1 = (int)((long long)(p + 1) * g->blocks / g->pieces);
    int lo = b0 * ALIGN, hi = b1 * ALIGN < dim ? b1 * ALIGN : dim, len = hi - lo;
    if (g->split_n) {
        /* columns [lo, lo+len) of C and of op(B) */
        const float *Bp = g->trans_b ? g->B + (size_t)lo * g->ldb : g->B + lo;
        cpu_gemm_serial(g->trans_a, g->trans_b, g->M, len, g->K, g->alpha, g->A, g->lda, Bp,
                           g->ldb, g->beta, g->C + lo, g->ldc);
    } else {
        /* rows [lo, lo+len) of C and of op(A) */
        const float *Ap = g->trans_a ? g->A + lo : g->A + (size_t)lo * g->lda;
        cpu_gemm_serial(g->trans_a, g->trans_b, len, g->N, g->K, g->alpha, Ap, g->lda, g->B,
                           g->ldb, g->beta, g->C + (size_t)lo * g->ldc, g->ldc);
    }
}

void cpu_gemm(tr_stream s, int trans_a, int trans_b, int M, int N, int K, float alpha,
                 const float *A, int lda, const float *B, int ldb, float beta, float *C,
                 int ldc)
{
    (void)s;
    double macs = (double)M * N * (K > 0 ? K : 1);
    if (macs < (double)(1 << 20) || (M < 2 * ALIGN && N < 2 * ALIGN)) {
        cpu_gemm_serial(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    /* Split the larger of M and N: each piece then re-packs only the smaller operand. */
    int split_n = N >= M;
    int dim = split_n ? N : M;
    int blocks = (dim + ALIGN - 1) / ALIGN;
    int pieces = macs / MIN_PIECE_MACS < MAX_PIECES ? (int)(macs / MIN_PIECE_MACS) : MAX_PIECES;
    if (pieces > blocks / 2)
        pieces = blocks / 2;
    if (pieces < 1)
        pieces = 1;
    gemm_job g = {trans_a, trans_b, M, N, K, lda, ldb, ldc, split_n, blocks, pieces,
                  alpha, beta, A, B, C};
    tr_kernels_cpu_parallel_for((size_t)pieces, gemm_piece, &g);
}

/* x, or x16 widened (exactly) into a new array; NULL when out of memory (said on stderr) */
static const float *fp32_input(const float *x, const uint16_t *x16, size_t n, float **owned)
{
    *owned = NULL;
    if (x)
        return x;
    float *w = malloc((n ? n : 1) * sizeof *w);
    if (!w) {
        fprintf(stderr, "cpu: out of memory widening a %zu-element bf16 input\n", n);
        return NULL;
    }
    cpu_bf16_widen(w, x16, n);
    return *owned = w;
}

/* kernels.h's linear_forward as its unfused pieces (the same bits as gemm, then bias_add,
 * then for y16 rounding to bf16) */
void cpu_linear_forward(tr_stream s, float *y, uint16_t *y16, const float *x,
                        const uint16_t *x16, const float *W, const float *b,
                        const float *residual, int N, int IC, int OC)
{
    size_t ny = (size_t)N * OC;
    float *owned, *out = y16 ? malloc((ny ? ny : 1) * sizeof *out) : y;
    const float *in = out ? fp32_input(x, x16, (size_t)N * IC, &owned) : NULL;
    if (!in) {
        if (y16)
            free(out), fprintf(stderr, "cpu: out of memory for a bf16 linear output\n");
        return;
    }
    if (residual && residual != out)
        cpu_copy(s, out, residual, ny * sizeof(float));
    cpu_gemm(s, 0, 1, N, OC, IC, 1.0f, in, IC, W, IC, residual ? 1.0f : 0.0f, out, OC);
    if (b)
        cpu_bias_add(s, out, b, N, OC);
    if (y16) {
        cpu_bf16_narrow(y16, out, ny);
        free(out);
    }
    free(owned);
}

/* kernels.h's linear_backward as its two GEMMs and bias_backward (the same bits as those
 * calls) */
void cpu_linear_backward(tr_stream s, float *dx, uint16_t *dx16, float *dW, float *db,
                         const float *dy, const uint16_t *dy16, const float *x,
                         const uint16_t *x16, const float *W, int N, int IC, int OC)
{
    float *owned, *owned_dy;
    size_t nx = (size_t)N * IC;
    const float *in = fp32_input(x, x16, nx, &owned);
    const float *g = in ? fp32_input(dy, dy16, (size_t)N * OC, &owned_dy) : NULL;
    float *d = g && dx16 ? malloc((nx ? nx : 1) * sizeof *d) : dx; /* dx16: fp32 first */
    if (g && !d)
        fprintf(stderr, "cpu: out of memory for a bf16 input gradient\n"), free(owned_dy);
    if (g && d) {
        cpu_gemm(s, 0, 0, N, IC, OC, 1.0f, g, OC, W, IC, 0.0f, d, IC);
        if (dx16) {
            cpu_bf16_narrow(dx16, d, nx);
            free(d);
        }
        cpu_gemm(s, 1, 0, OC, IC, N, 1.0f, g, OC, in, IC, 1.0f, dW, IC);
        if (db)
            cpu_bias_backward(s, db, g, N, OC);
        free(owned_dy);
    }
    free(owned);
}
