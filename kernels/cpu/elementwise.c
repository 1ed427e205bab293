/* Elementwise ops and the bias: vectorised loops, split over the team when large. */
#include "kernels/cpu/cpu_ops.h"

#include <omp.h>

/* out[i] = a[i] + b[i]; out may alias a or b, so no restrict. */
void tr_cpu_add(tr_stream s, float *out, const float *a, const float *b, size_t n)
{
    (void)s;
#pragma omp parallel for simd schedule(static) if (n >= TR_CPU_PAR_MIN * 4)
    for (size_t i = 0; i < n; i++)
        out[i] = a[i] + b[i];
}

void tr_cpu_axpy(tr_stream s, float *y, float alpha, const float *x, size_t n)
{
    (void)s;
#pragma omp parallel for simd schedule(static) if (n >= TR_CPU_PAR_MIN * 4)
    for (size_t i = 0; i < n; i++)
        y[i] += alpha * x[i];
}

void tr_cpu_scale(tr_stream s, float *x, float alpha, size_t n)
{
    (void)s;
#pragma omp parallel for simd schedule(static) if (n >= TR_CPU_PAR_MIN * 4)
    for (size_t i = 0; i < n; i++)
        x[i] *= alpha;
}

/* out (N, C) += bias (C) per row */
void tr_cpu_bias_add(tr_stream s, float *out, const float *bias, int N, int C)
{
    (void)s;
#pragma omp parallel for schedule(static) if ((size_t)N * C >= TR_CPU_PAR_MIN * 4)
    for (int n = 0; n < N; n++) {
        float *restrict row = out + (size_t)n * C;
        const float *restrict bb = bias;
#pragma omp simd
        for (int c = 0; c < C; c++)
            row[c] += bb[c];
    }
}

/* Columns per block in column-split reductions over rows. */
#define COLS 64

/* dbias (C) += sum over rows of dout (N, C): blocks of columns over the team, rows summed in
 * order in double, so the result does not depend on the thread count. */
void tr_cpu_bias_backward(tr_stream s, float *dbias, const float *dout, int N, int C)
{
    (void)s;
    int blocks = (C + COLS - 1) / COLS;
#pragma omp parallel for schedule(static) if ((size_t)N * C >= TR_CPU_PAR_MIN)
    for (int blk = 0; blk < blocks; blk++) {
        int c0 = blk * COLS, w = C - c0 < COLS ? C - c0 : COLS;
        double acc[COLS] = {0};
        for (int n = 0; n < N; n++) {
            const float *restrict row = dout + (size_t)n * C + c0;
#pragma omp simd
            for (int c = 0; c < w; c++)
                acc[c] += row[c];
        }
        for (int c = 0; c < w; c++)
            dbias[c0 + c] = (float)(dbias[c0 + c] + acc[c]);
    }
}
