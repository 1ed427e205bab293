/* Token and position embeddings. The token backward is split by blocks of columns (each
 * thread walks all rows in order), so repeated ids never race and the sum order is fixed. */
#include "kernels/cpu/cpu_ops.h"

#include <omp.h>

/* out (N, C) = table[ids[n] - v_start] for held ids, else 0; table: (V, C) */
void tr_cpu_embedding_forward(tr_stream s, float *out, const int32_t *ids, const float *table,
                              int N, int C, int v_start, int V)
{
    (void)s;
#pragma omp parallel for schedule(static) if ((size_t)N * C >= TR_CPU_PAR_MIN * 4)
    for (int n = 0; n < N; n++) {
        int64_t row = (int64_t)ids[n] - v_start;
        float *dst = out + (size_t)n * C;
        if (row >= 0 && row < V)
            memcpy(dst, table + (size_t)row * C, (size_t)C * sizeof(float));
        else
            memset(dst, 0, (size_t)C * sizeof(float));
    }
}

#define COLS 256

/* dtable[ids[n] - v_start] += dout[n] for held ids; dout: (N, C) */
void tr_cpu_embedding_backward(tr_stream s, float *dtable, const float *dout,
                               const int32_t *ids, int N, int C, int v_start, int V)
{
    (void)s;
    int blocks = (C + COLS - 1) / COLS;
#pragma omp parallel for schedule(static) if ((size_t)N * C >= TR_CPU_PAR_MIN)
    for (int blk = 0; blk < blocks; blk++) {
        int c0 = blk * COLS, w = C - c0 < COLS ? C - c0 : COLS;
        for (int n = 0; n < N; n++) {
            int64_t row = (int64_t)ids[n] - v_start;
            if (row < 0 || row >= V)
                continue;
            float *restrict dst = dtable + (size_t)row * C + c0;
            const float *restrict src = dout + (size_t)n * C + c0;
#pragma omp simd
            for (int c = 0; c < w; c++)
                dst[c] += src[c];
        }
    }
}

/* out (B, T, C) += wpe (T, C) */
void tr_cpu_position_forward(tr_stream s, float *out, const float *wpe, int B, int T, int C)
{
    (void)s;
    int rows = B * T;
#pragma omp parallel for schedule(static) if ((size_t)rows * C >= TR_CPU_PAR_MIN * 4)
    for (int bt = 0; bt < rows; bt++) {
        float *restrict dst = out + (size_t)bt * C;
        const float *restrict src = wpe + (size_t)(bt % T) * C;
#pragma omp simd
        for (int c = 0; c < C; c++)
            dst[c] += src[c];
    }
}

/* dwpe (T, C) += sum_b dout (B, T, C), batches added in order */
void tr_cpu_position_backward(tr_stream s, float *dwpe, const float *dout, int B, int T, int C)
{
    (void)s;
#pragma omp parallel for schedule(static) if ((size_t)B * T * C >= TR_CPU_PAR_MIN)
    for (int t = 0; t < T; t++) {
        float *restrict dst = dwpe + (size_t)t * C;
        for (int b = 0; b < B; b++) {
            const float *restrict src = dout + ((size_t)b * T + t) * C;
#pragma omp simd
            for (int c = 0; c < C; c++)
                dst[c] += src[c];
        }
    }
}
