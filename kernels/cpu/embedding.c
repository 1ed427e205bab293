/* Token and position embeddings. The token backward is split by blocks of columns (each
 * piece walks all rows in order), so repeated ids never race and the sum order is fixed. */
#include "kernels/cpu/cpu_ops.h"

typedef struct {
    float *out;
    const float *in; /* table / wpe / dout */
    const int32_t *ids;
    int N, B, T, C, v_start, V;
} emb_args;

/* rows [lo, hi) of out (N, C) = table[ids[n] - v_start] for held ids, else 0 */
static void embedding_forward_rows(void *ctx, size_t lo, size_t hi)
{
    const emb_args *a = ctx;
    size_t row_bytes = (size_t)a->C * sizeof(float);
    for (size_t n = lo; n < hi; n++) {
        int64_t row = (int64_t)a->ids[n] - a->v_start;
        float *dst = a->out + n * a->C;
        if (row >= 0 && row < a->V)
            memcpy(dst, a->in + (size_t)row * a->C, row_bytes);
        else
            memset(dst, 0, row_bytes);
    }
}

void cpu_embedding_forward(tr_stream s, float *out, const int32_t *ids, const float *table,
                              int N, int C, int v_start, int V)
{
    (void)s;
    emb_args a = {.out = out, .in = table, .ids = ids, .N = N, .C = C, .v_start = v_start, .V = V};
    cpu_for_ranges((size_t)N * C >= CPU_PAR_MIN * 4, (size_t)N,
                      cpu_rows_per_piece((size_t)C), embedding_forward_rows, &a);
}

#define COLS 256

/* column blocks [lo, hi): dtable[ids[n] - v_start] += dout[n] for held ids, rows in order */
static void embedding_backward_blocks(void *ctx, size_t lo, size_t hi)
{
    const emb_args *a = ctx;
    for (size_t blk = lo; blk < hi; blk++) {
        int c0 = (int)blk * COLS, w = a->C - c0 < COLS ? a->C - c0 : COLS;
        for (int n = 0; n < a->N; n++) {
            int64_t row = (int64_t)a->ids[n] - a->v_start;
            if (row < 0 || row >= a->V)
                continue;
            float *restrict dst = a->out + (size_t)row * a->C + c0;
            const float *restrict src = a->in + (size_t)n * a->C + c0;
#pragma omp simd
            for (int c = 0; c < w; c++)
                dst[c] += src[c];
        }
    }
}

/* dtable[ids[n] - v_start] += dout[n] for held ids; dout: (N, C) */
void cpu_embedding_backward(tr_stream s, float *dtable, const float *dout,
                               const int32_t *ids, int N, int C, int v_start, int V)
{
    (void)s;
    emb_args a = {.out = dtable, .in = dout, .ids = ids, .N = N, .C = C, .v_start = v_start, .V = V};
    cpu_for_ranges((size_t)N * C >= CPU_PAR_MIN, (size_t)((C + COLS - 1) / COLS), 1,
                      embedding_backward_blocks, &a);
}

/* rows [lo, hi) of out (B*T, C) += wpe[row % T] */
static void position_forward_rows(void *ctx, size_t lo, size_t hi)
{
    const emb_args *a = ctx;
    for (size_t bt = lo; bt < hi; bt++) {
        float *restrict dst = a->out + bt * a->C;
        const float *restrict src = a->in + (bt % (size_t)a->T) * a->C;
#pragma omp simd
        for (int c = 0; c < a->C; c++)
            dst[c] += src[c];
    }
}

/* out (B, T, C) += wpe (T, C) */
void cpu_position_forward(tr_stream s, float *out, const float *wpe, int B, int T, int C)
{
    (void)s;
    emb_args a = {.out = out, .in = wpe, .B = B, .T = T, .C = C};
    size_t rows = (size_t)B * T;
    cpu_for_ranges(rows * C >= CPU_PAR_MIN * 4, rows, cpu_rows_per_piece((size_t)C),
                      position_forward_rows, &a);
}

/* positions [lo, hi): dwpe[t] += sum_b dout[b, t], batches added in order */
static void position_backward_rows(void *ctx, size_t lo, size_t hi)
{
    const emb_args *a = ctx;
    for (size_t t = lo; t < hi; t++) {
        float *restrict dst = a->out + t * a->C;
        for (int b = 0; b < a->B; b++) {
            const float *restrict src = a->in + ((size_t)b * a->T + t) * a->C;
#pragma omp simd
            for (int c = 0; c < a->C; c++)
                dst[c] += src[c];
        }
    }
}

/* dwpe (T, C) += sum_b dout (B, T, C) */
void cpu_position_backward(tr_stream s, float *dwpe, const float *dout, int B, int T, int C)
{
    (void)s;
    emb_args a = {.out = dwpe, .in = dout, .B = B, .T = T, .C = C};
    cpu_for_ranges((size_t)B * T * C >= CPU_PAR_MIN, (size_t)T,
                      cpu_rows_per_piece((size_t)C * B), position_backward_rows, &a);
}
