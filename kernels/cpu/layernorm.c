/* LayerNorm over the last dimension. Row statistics in double; the backward's parameter
 * gradients are reduced over rows by blocks of columns (no per-thread partials), so results
 * do not depend on the thread count. */
#include "kernels/cpu/cpu_ops.h"

#include <math.h>
#include <omp.h>

/* out (N, C) = (inp - mean) * rstd * weight + bias; mean, rstd: (N) */
void tr_cpu_layernorm_forward(tr_stream s, float *out, float *mean, float *rstd,
                              const float *inp, const float *weight, const float *bias, int N,
                              int C, float eps)
{
    (void)s;
#pragma omp parallel for schedule(static) if ((size_t)N * C >= TR_CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *restrict x = inp + (size_t)n * C;
        float *restrict y = out + (size_t)n * C;
        const float *restrict w = weight, *restrict b = bias;
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
        float m = (float)mu, r = (float)(1.0 / sqrt(var / C + eps));
#pragma omp simd
        for (int c = 0; c < C; c++)
            y[c] = (x[c] - m) * r * w[c] + b[c];
        mean[n] = m;
        rstd[n] = r;
    }
}

#define COLS 64

/* dinp (N, C) += rstd (dnorm - mean(dnorm) - xhat mean(dnorm xhat)), dnorm = dout * weight;
 * dweight (C) += sum_n dout xhat; dbias (C) += sum_n dout. */
void tr_cpu_layernorm_backward(tr_stream s, float *dinp, float *dweight, float *dbias,
                               const float *dout, const float *inp, const float *weight,
                               const float *mean, const float *rstd, int N, int C)
{
    (void)s;
    int par = (size_t)N * C >= TR_CPU_PAR_MIN;
#pragma omp parallel if (par)
    {
        /* rows: the input gradient */
#pragma omp for schedule(static)
        for (int n = 0; n < N; n++) {
            const float *restrict x = inp + (size_t)n * C;
            const float *restrict dy = dout + (size_t)n * C;
            const float *restrict w = weight;
            float *restrict dx = dinp + (size_t)n * C;
            float m = mean[n], r = rstd[n];
            double sum_dn = 0.0, sum_dnx = 0.0;
#pragma omp simd reduction(+ : sum_dn, sum_dnx)
            for (int c = 0; c < C; c++) {
                float dn = dy[c] * w[c];
                sum_dn += dn;
                sum_dnx += dn * ((x[c] - m) * r);
            }
            float a = (float)(sum_dn / C), b = (float)(sum_dnx / C);
#pragma omp simd
            for (int c = 0; c < C; c++) {
                float xhat = (x[c] - m) * r;
                dx[c] += r * (dy[c] * w[c] - a - xhat * b);
            }
        }
        /* blocks of columns: the parameter gradients, rows summed in order */
        int blocks = (C + COLS - 1) / COLS;
#pragma omp for schedule(static)
        for (int blk = 0; blk < blocks; blk++) {
            int c0 = blk * COLS, wd = C - c0 < COLS ? C - c0 : COLS;
            double acc_w[COLS] = {0}, acc_b[COLS] = {0};
            for (int n = 0; n < N; n++) {
                const float *restrict x = inp + (size_t)n * C + c0;
                const float *restrict dy = dout + (size_t)n * C + c0;
                float m = mean[n], r = rstd[n];
#pragma omp simd
                for (int c = 0; c < wd; c++) {
                    acc_w[c] += dy[c] * ((x[c] - m) * r);
                    acc_b[c] += dy[c];
                }
            }
            for (int c = 0; c < wd; c++) {
                dweight[c0 + c] = (float)(dweight[c0 + c] + acc_w[c]);
                dbias[c0 + c] = (float)(dbias[c0 + c] + acc_b[c]);
            }
        }
    }
}
