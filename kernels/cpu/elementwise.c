/* Elementwise ops and the bias: vectorised loops over pieces of the team (cpu_ops.h). */
#include "kernels/cpu/cpu_ops.h"

typedef struct {
    float *out;
    const float *a, *b;
    float alpha;
    int C;
} ew_args;

/* out[i] = a[i] + b[i]; out may alias a or b, so no restrict. */
static void add_range(void *ctx, size_t lo, size_t hi)
{
    const ew_args *e = ctx;
#pragma omp simd
    for (size_t i = lo; i < hi; i++)
        e->out[i] = e->a[i] + e->b[i];
}

void cpu_add(tr_stream s, float *out, const float *a, const float *b, size_t n)
{
    (void)s;
    ew_args e = {.out = out, .a = a, .b = b};
    cpu_for_ranges(n >= CPU_PAR_MIN * 4, n, CPU_PIECE, add_range, &e);
}

static void axpy_range(void *ctx, size_t lo, size_t hi)
{
    const ew_args *e = ctx;
    float *restrict y = e->out;
    const float *restrict x = e->a;
#pragma omp simd
    for (size_t i = lo; i < hi; i++)
        y[i] += e->alpha * x[i];
}

void cpu_axpy(tr_stream s, float *y, float alpha, const float *x, size_t n)
{
    (void)s;
    ew_args e = {.out = y, .a = x, .alpha = alpha};
    cpu_for_ranges(n >= CPU_PAR_MIN * 4, n, CPU_PIECE, axpy_range, &e);
}

static void scale_range(void *ctx, size_t lo, size_t hi)
{
    const ew_args *e = ctx;
    float *restrict x = e->out;
#pragma omp simd
    for (size_t i = lo; i < hi; i++)
        x[i] *= e->alpha;
}

void cpu_scale(tr_stream s, float *x, float alpha, size_t n)
{
    (void)s;
    ew_args e = {.out = x, .alpha = alpha};
    cpu_for_ranges(n >= CPU_PAR_MIN * 4, n, CPU_PIECE, scale_range, &e);
}

/* rows [lo, hi) of x (N, C) *= w[row] */
static void scale_rows_range(void *ctx, size_t lo, size_t hi)
{
    const ew_args *e = ctx;
    for (size_t n = lo; n < hi; n++) {
        float *restrict x = e->out + n * (size_t)e->C, w = e->b[n];
#pragma omp simd
        for (int c = 0; c < e->C; c++)
            x[c] *= w;
    }
}

void cpu_scale_rows(tr_stream s, float *x, const float *w, int N, int C)
{
    (void)s;
    ew_args e = {.out = x, .b = w, .C = C};
    cpu_for_ranges((size_t)N * C >= CPU_PAR_MIN * 4, (size_t)N, cpu_rows_per_piece((size_t)C),
                   scale_rows_range, &e);
}

/* rows [lo, hi) of out (N, C) += bias (C) */
static void bias_add_rows(void *ctx, size_t lo, size_t hi)
{
    const ew_args *e = ctx;
    int C = e->C;
    for (size_t n = lo; n < hi; n++) {
        float *restrict row = e->out + n * C;
        const float *restrict bb = e->a;
#pragma omp simd
        for (int c = 0; c < C; c++)
            row[c] += bb[c];
    }
}

void cpu_bias_add(tr_stream s, float *out, const float *bias, int N, int C)
{
    (void)s;
    ew_args e = {.out = out, .a = bias, .C = C};
    cpu_for_ranges((size_t)N * C >= CPU_PAR_MIN * 4, (size_t)N,
                      cpu_rows_per_piece((size_t)C), bias_add_rows, &e);
}

/* Columns per block in column-split reductions over rows. */
#define COLS 64

typedef struct {
    float *dbias;
    const float *dout;
    int N, C;
} bias_bwd_args;

/* blocks [lo, hi) of COLS columns: rows summed in order in double */
static void bias_backward_blocks(void *ctx, size_t lo, size_t hi)
{
    const bias_bwd_args *a = ctx;
    for (size_t blk = lo; blk < hi; blk++) {
        int c0 = (int)blk * COLS, w = a->C - c0 < COLS ? a->C - c0 : COLS;
        double acc[COLS] = {0};
        for (int n = 0; n < a->N; n++) {
            const float *restrict row = a->dout + (size_t)n * a->C + c0;
#pragma omp simd
            for (int c = 0; c < w; c++)
                acc[c] += row[c];
        }
        for (int c = 0; c < w; c++)
            a->dbias[c0 + c] = (float)(a->dbias[c0 + c] + acc[c]);
    }
}

/* dbias (C) += sum over rows of dout (N, C): blocks of columns over the team, rows summed in
 * order in double, so the result does not depend on the thread count. */
void cpu_bias_backward(tr_stream s, float *dbias, const float *dout, int N, int C)
{
    (void)s;
    bias_bwd_args a = {dbias, dout, N, C};
    cpu_for_ranges((size_t)N * C >= CPU_PAR_MIN, (size_t)((C + COLS - 1) / COLS), 1,
                      bias_backward_blocks, &a);
}
