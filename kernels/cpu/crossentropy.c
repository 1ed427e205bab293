/* Softmax cross-entropy in pieces over this rank's vocabulary columns (see kernels.h).
 * logits: (N, V), columns >= n_valid are padding. One row per iteration, rows over the team. */
#include "kernels/cpu/cpu_ops.h"

#include <math.h>
#include <omp.h>

void tr_cpu_xent_row_max(tr_stream s, float *maxv, const float *logits, int N, int V,
                         int n_valid)
{
    (void)s;
#pragma omp parallel for schedule(static) if ((size_t)N * n_valid >= TR_CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *restrict x = logits + (size_t)n * V;
        float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
        for (int c = 0; c < n_valid; c++)
            mx = x[c] > mx ? x[c] : mx;
        maxv[n] = mx;
    }
}

/* Columns per partial sum in row_sumexp: float SIMD partials, added in double. */
#define SUM_BLOCK 1024

/* sumexp[n] = sum_{c < n_valid} exp(logits[n, c] - maxv[n]): blocks of SUM_BLOCK columns
 * summed in float SIMD lanes, the block sums added in double. */
void tr_cpu_xent_row_sumexp(tr_stream s, float *sumexp, const float *logits, const float *maxv,
                            int N, int V, int n_valid)
{
    (void)s;
#pragma omp parallel for schedule(static) if ((size_t)N * n_valid >= TR_CPU_PAR_MIN / 4)
    for (int n = 0; n < N; n++) {
        const float *restrict x = logits + (size_t)n * V;
        float mx = maxv[n];
        double total = 0.0;
        for (int c0 = 0; c0 < n_valid; c0 += SUM_BLOCK) {
            int w = n_valid - c0 < SUM_BLOCK ? n_valid - c0 : SUM_BLOCK;
            float sum = 0.0f;
#pragma omp simd reduction(+ : sum) simdlen(TR_SIMDLEN)
            for (int c = 0; c < w; c++)
                sum += tr_cpu_expf(x[c0 + c] - mx);
            total += sum;
        }
        sumexp[n] = (float)total;
    }
}

void tr_cpu_xent_pick(tr_stream s, float *picked, const float *logits, const int32_t *targets,
                      int N, int V, int v_start)
{
    (void)s;
    for (int n = 0; n < N; n++) {
        int64_t col = (int64_t)targets[n] - v_start;
        picked[n] = col >= 0 && col < V ? logits[(size_t)n * V + col] : 0.0f;
    }
}

/* losses[n] = log(sumexp[n]) + maxv[n] - picked[n] */
void tr_cpu_xent_loss(tr_stream s, float *losses, const float *maxv, const float *sumexp,
                      const float *picked, int N)
{
    (void)s;
    for (int n = 0; n < N; n++)
        losses[n] = (float)(log((double)sumexp[n]) + (double)maxv[n] - (double)picked[n]);
}

/* dlogits[n, c] = scale (exp(logits - maxv) / sumexp - [c is the target]) for c < n_valid,
 * 0 for padding. dlogits may be logits itself. */
void tr_cpu_xent_backward(tr_stream s, float *dlogits, const float *logits, const float *maxv,
                          const float *sumexp, const int32_t *targets, int N, int V,
                          int n_valid, int v_start, float scale)
{
    (void)s;
#pragma omp parallel for schedule(static) if ((size_t)N * V >= TR_CPU_PAR_MIN / 4)
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * V;
        float *dx = dlogits + (size_t)n * V;
        float mx = maxv[n], k = scale / sumexp[n];
#pragma omp simd simdlen(TR_SIMDLEN)
        for (int c = 0; c < n_valid; c++)
            dx[c] = k * tr_cpu_expf(x[c] - mx);
        for (int c = n_valid; c < V; c++)
            dx[c] = 0.0f;
        int64_t col = (int64_t)targets[n] - v_start;
        if (col >= 0 && col < n_valid)
            dx[col] -= scale;
    }
}
