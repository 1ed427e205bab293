/* LayerNorm over the last dimension. Row statistics in double; the backward's parameter
 * gradients are reduced over rows by blocks of columns (no per-thread partials), so results
 * do not depend on the thread count. Rows and column blocks are pieces of the team. */
#include "kernels/cpu/cpu_ops.h"

#include <math.h>

typedef struct {
    float *out, *mean, *rstd, *dweight, *dbias;
    const float *inp, *weight, *bias, *dout;
    const float *cmean, *crstd;
    int N, C;
    float eps;
} ln_args;

/* rows [lo, hi): out = (inp - mean) * rstd * weight + bias; mean, rstd saved */
static void layernorm_forward_rows(void *ctx, size_t lo, size_t hi)
{
    const ln_args *a = ctx;
    int C = a->C;
    for (size_t n = lo; n < hi; n++) {
        const float *restrict x = a->inp + n * C;
        float *restrict y = a->out + n * C;
        const float *restrict w = a->weight, *restrict b = a->bias;
        double sum = 0.0;
#pragma omp simd reduction(+ : sum)
        for (int c = 0; c < C; c++)
            sum += x[c];
        double mu = sum / C;
        double var = 0.0;
#pragma omp simd reduction(+ : var)
        for (int c = 0; c < C; c++) {
            double d = x[c] - mu;
            var += d * d;
        }
        float m = (float)mu, r = (float)(1.0 / sqrt(var / C + a->eps));
#pragma omp simd
        for (int c = 0; c < C; c++)
            y[c] = (x[c] - m) * r * w[c] + b[c];
        a->mean[n] = m;
        a->rstd[n] = r;
    }
}

/* out (N, C) = (inp - mean) * rstd * weight + bias; mean, rstd: (N) */
void cpu_layernorm_forward(tr_stream s, float *out, float *mean, float *rstd,
                              const float *inp, const float *weight, const float *bias, int N,
                              int C, float eps)
{
    (void)s;
    ln_args a = {.out = out, .mean = mean, .rstd = rstd, .inp = inp, .weight = weight,
                 .bias = bias, .N = N, .C = C, .eps = eps};
    cpu_for_ranges((size_t)N * C >= CPU_PAR_MIN, (size_t)N,
                      cpu_rows_per_piece((size_t)C), layernorm_forward_rows, &a);
}

#define COLS 64

/* rows [lo, hi): dinp += rstd (dnorm - mean(dnorm) - xhat mean(dnorm xhat)) */
static void layernorm_backward_rows(void *ctx, size_t lo, size_t hi)
{
    const ln_args *a = ctx;
    int C = a->C;
    for (size_t n = lo; n < hi; n++) {
        const float *restrict x = a->inp + n * C;
        const float *restrict dy = a->dout + n * C;
        const float *restrict w = a->weight;
        float *restrict dx = a->out + n * C;
        float m = a->cmean[n], r = a->crstd[n];
        double sum_dn = 0.0, sum_dnx = 0.0;
#pragma omp simd reduction(+ : sum_dn, sum_dnx)
        for (int c = 0; c < C; c++) {
            float dn = dy[c] * w[c];
            sum_dn += dn;
            sum_dnx += dn * ((x[c] - m) * r);
        }
        float ma = (float)(sum_dn / C), mb = (float)(sum_dnx / C);
#pragma omp simd
        for (int c = 0; c < C; c++) {
            float xhat = (x[c] - m) * r;
            dx[c] += r * (dy[c] * w[c] - ma - xhat * mb);
        }
    }
}

/* column blocks [lo, hi): dweight += sum_n dout xhat, dbias += sum_n dout, rows in order */
static void layernorm_backward_blocks(void *ctx, size_t lo, size_t hi)
{
    const ln_args *a = ctx;
    int C = a->C;
    for (size_t blk = lo; blk < hi; blk++) {
        int c0 = (int)blk * COLS, wd = C - c0 < COLS ? C - c0 : COLS;
        double acc_w[COLS] = {0}, acc_b[COLS] = {0};
        for (int n = 0; n < a->N; n++) {
            const float *restrict x = a->inp + (size_t)n * C + c0;
            const float *restrict dy = a->dout + (size_t)n * C + c0;
            float m = a->cmean[n], r = a->crstd[n];
#pragma omp simd
            for (int c = 0; c < wd; c++) {
                acc_w[c] += dy[c] * ((x[c] - m) * r);
                acc_b[c] += dy[c];
            }
        }
        for (int c = 0; c < wd; c++) {
            a->dweight[c0 + c] = (float)(a->dweight[c0 + c] + acc_w[c]);
            a->dbias[c0 + c] = (float)(a->dbias[c0 + c] + acc_b[c]);
        }
    }
}

/* dinp (N, C) += rstd (dnorm - mean(dnorm) - xhat mean(dnorm xhat)), dnorm = dout * weight;
 * dweight (C) += sum_n dout xhat; dbias (C) += sum_n dout. */
void cpu_layernorm_backward(tr_stream s, float *dinp, float *dweight, float *dbias,
                               const float *dout, const float *inp, const float *weight,
                               const float *mean, const float *rstd, int N, int C)
{
    (void)s;
    int par = (size_t)N * C >= CPU_PAR_MIN;
    ln_args a = {.out = dinp, .dweight = dweight, .dbias = dbias, .inp = inp, .weight = weight,
                 .dout = dout, .cmean = mean, .crstd = rstd, .N = N, .C = C};
    cpu_for_ranges(par, (size_t)N, cpu_rows_per_piece((size_t)C), layernorm_backward_rows,
                      &a);
    cpu_for_ranges(par, (size_t)((C + COLS - 1) / COLS), 1, layernorm_backward_blocks, &a);
}
