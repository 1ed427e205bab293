/* Ops of the Llama, Bloom and Gemma families (kernels.h, "model families"): RMSNorm, SwiGLU,
 * GeGLU and rotary position embedding. Same rules as the rest of the backend: pieces cut by
 * the sizes alone, row statistics in double, parameter gradients reduced over rows by column
 * blocks (no per-thread partials), so results do not depend on the thread count. */
#include "kernels/cpu/cpu_ops.h"

#include <math.h>

typedef struct {
    float *out, *rstd, *dweight;
    const float *inp, *weight, *dout, *crstd;
    int N, C;
    float eps;
} rms_args;

/* rows [lo, hi): out = inp * rstd * weight */
static void rmsnorm_forward_rows(void *ctx, size_t lo, size_t hi)
{
    const rms_args *a = ctx;
    int C = a->C;
    for (size_t n = lo; n < hi; n++) {
        const float *restrict x = a->inp + n * C, *restrict w = a->weight;
        float *restrict y = a->out + n * C;
        double ss = 0.0;
#pragma omp simd reduction(+ : ss)
        for (int c = 0; c < C; c++)
            ss += (double)x[c] * x[c];
        float r = (float)(1.0 / sqrt(ss / C + a->eps));
#pragma omp simd
        for (int c = 0; c < C; c++)
            y[c] = x[c] * r * w[c];
        a->rstd[n] = r;
    }
}

void cpu_rmsnorm_forward(tr_stream s, float *out, float *rstd, const float *inp,
                         const float *weight, int N, int C, float eps)
{
    (void)s;
    rms_args a = {.out = out, .rstd = rstd, .inp = inp, .weight = weight, .N = N, .C = C,
                  .eps = eps};
    cpu_for_ranges((size_t)N * C >= CPU_PAR_MIN, (size_t)N, cpu_rows_per_piece((size_t)C),
                   rmsnorm_forward_rows, &a);
}

/* rows [lo, hi): dinp += rstd (dn - xhat mean(dn xhat)), dn = dout * weight, xhat = x rstd */
static void rmsnorm_backward_rows(void *ctx, size_t lo, size_t hi)
{
    const rms_args *a = ctx;
    int C = a->C;
    for (size_t n = lo; n < hi; n++) {
        const float *restrict x = a->inp + n * C, *restrict dy = a->dout + n * C;
        const float *restrict w = a->weight;
        float *restrict dx = a->out + n * C;
        float r = a->crstd[n];
        double sum = 0.0;
#pragma omp simd reduction(+ : sum)
        for (int c = 0; c < C; c++)
            sum += (double)(dy[c] * w[c]) * (x[c] * r);
        float m = (float)(sum / C);
#pragma omp simd
        for (int c = 0; c < C; c++)
            dx[c] += r * (dy[c] * w[c] - x[c] * r * m);
    }
}

#define COLS 64

/* column blocks [lo, hi): dweight += sum_n dout * x * rstd, rows in order */
static void rmsnorm_backward_blocks(void *ctx, size_t lo, size_t hi)
{
    const rms_args *a = ctx;
    int C = a->C;
    for (size_t blk = lo; blk < hi; blk++) {
        int c0 = (int)blk * COLS, wd = C - c0 < COLS ? C - c0 : COLS;
        double acc[COLS] = {0};
        for (int n = 0; n < a->N; n++) {
            const float *restrict x = a->inp + (size_t)n * C + c0;
            const float *restrict dy = a->dout + (size_t)n * C + c0;
            float r = a->crstd[n];
#pragma omp simd
            for (int c = 0; c < wd; c++)
                acc[c] += dy[c] * (x[c] * r);
        }
        for (int c = 0; c < wd; c++)
            a->dweight[c0 + c] = (float)(a->dweight[c0 + c] + acc[c]);
    }
}

void cpu_rmsnorm_backward(tr_stream s, float *dinp, float *dweight, const float *dout,
                          const float *inp, const float *weight, const float *rstd, int N, int C)
{
    (void)s;
    int par = (size_t)N * C >= CPU_PAR_MIN;
    rms_args a = {.out = dinp, .dweight = dweight, .inp = inp, .weight = weight, .dout = dout,
                  .crstd = rstd, .N = N, .C = C};
    cpu_for_ranges(par, (size_t)N, cpu_rows_per_piece((size_t)C), rmsnorm_backward_rows, &a);
    cpu_for_ranges(par, (size_t)((C + COLS - 1) / COLS), 1, rmsnorm_backward_blocks, &a);
}

/* ------------------------------------------------------------------ SwiGLU
 * out = silu(g) * u = g sig(g) u; d/dg = u sig(g) (1 + g (1 - sig(g))), d/du = silu(g). */
typedef struct {
    float *out;
    const float *inp, *dout;
} swiglu_args;

static void swiglu_forward_range(void *ctx, size_t lo, size_t hi)
{
    const swiglu_args *a = ctx;
    float *restrict out = a->out;
    const float *restrict in = a->inp;
#pragma omp simd simdlen(CPU_SIMDLEN)
    for (size_t i = lo; i < hi; i++) {
        float g = in[2 * i], u = in[2 * i + 1];
        out[i] = g / (1.0f + cpu_expf(-g)) * u;
    }
}

void cpu_swiglu_forward(tr_stream s, float *out, const float *inp, size_t n)
{
    (void)s;
    swiglu_args a = {out, inp, NULL};
    cpu_for_ranges(n >= CPU_PAR_MIN, n, CPU_PIECE, swiglu_forward_range, &a);
}

static void swiglu_backward_range(void *ctx, size_t lo, size_t hi)
{
    const swiglu_args *a = ctx;
    float *restrict din = a->out;
    const float *restrict in = a->inp, *restrict dout = a->dout;
#pragma omp simd simdlen(CPU_SIMDLEN)
    for (size_t i = lo; i < hi; i++) {
        float g = in[2 * i], u = in[2 * i + 1], sg = 1.0f / (1.0f + cpu_expf(-g));
        din[2 * i] = dout[i] * u * sg * (1.0f + g * (1.0f - sg));
        din[2 * i + 1] = dout[i] * g * sg;
    }
}

void cpu_swiglu_backward(tr_stream s, float *dinp, const float *inp, const float *dout,
                         size_t n)
{
    (void)s;
    swiglu_args a = {dinp, inp, dout};
    cpu_for_ranges(n >= CPU_PAR_MIN, n, CPU_PIECE, swiglu_backward_range, &a);
}

/* ------------------------------------------------------------------ GeGLU
 * out = gelu(g) * u; d/dg = u gelu'(g), d/du = gelu(g). The GELU's value and slope are
 * cpu_ops.h's, gelu.c's: gelu(g) here equals gelu_forward's (gelu_exact_forward's) bits. */
static void geglu_forward_range(void *ctx, size_t lo, size_t hi)
{
    const swiglu_args *a = ctx;
    float *restrict out = a->out;
    const float *restrict in = a->inp;
#pragma omp simd simdlen(CPU_SIMDLEN)
    for (size_t i = lo; i < hi; i++)
        out[i] = cpu_gelu_tanh(in[2 * i]) * in[2 * i + 1];
}

static void geglu_exact_forward_range(void *ctx, size_t lo, size_t hi)
{
    const swiglu_args *a = ctx;
    float *restrict out = a->out;
    const float *restrict in = a->inp;
#pragma omp simd simdlen(CPU_SIMDLEN)
    for (size_t i = lo; i < hi; i++)
        out[i] = cpu_gelu_exact(in[2 * i]) * in[2 * i + 1];
}

void cpu_geglu_forward(tr_stream s, float *out, const float *inp, size_t n, int exact)
{
    (void)s;
    swiglu_args a = {out, inp, NULL};
    cpu_for_ranges(n >= CPU_PAR_MIN, n, CPU_PIECE,
                   exact ? geglu_exact_forward_range : geglu_forward_range, &a);
}

static void geglu_backward_range(void *ctx, size_t lo, size_t hi)
{
    const swiglu_args *a = ctx;
    float *restrict din = a->out;
    const float *restrict in = a->inp, *restrict dout = a->dout;
#pragma omp simd simdlen(CPU_SIMDLEN)
    for (size_t i = lo; i < hi; i++) {
        float gelu, slope = cpu_gelu_tanh_slope(in[2 * i], &gelu);
        din[2 * i] = dout[i] * in[2 * i + 1] * slope;
        din[2 * i + 1] = dout[i] * gelu;
    }
}

static void geglu_exact_backward_range(void *ctx, size_t lo, size_t hi)
{
    const swiglu_args *a = ctx;
    float *restrict din = a->out;
    const float *restrict in = a->inp, *restrict dout = a->dout;
#pragma omp simd simdlen(CPU_SIMDLEN)
    for (size_t i = lo; i < hi; i++) {
        float gelu, slope = cpu_gelu_exact_slope(in[2 * i], &gelu);
        din[2 * i] = dout[i] * in[2 * i + 1] * slope;
        din[2 * i + 1] = dout[i] * gelu;
    }
}

void cpu_geglu_backward(tr_stream s, float *dinp, const float *inp, const float *dout, size_t n,
                        int exact)
{
    (void)s;
    swiglu_args a = {dinp, inp, dout};
    cpu_for_ranges(n >= CPU_PAR_MIN, n, CPU_PIECE,
                   exact ? geglu_exact_backward_range : geglu_backward_range, &a);
}

/* ------------------------------------------------------------------ rotary embedding
 * One piece = token rows [lo, hi) of the (B*T) rows; each row's R+1 rotated heads. */
typedef struct {
    float *qkv;
    const float *cos, *sin;
    int T, NG, R, HS, rot;
    float sign;
    const int32_t *pos;
} rope_args;

static void rope_rows(void *ctx, size_t lo, size_t hi)
{
    const rope_args *a = ctx;
    int half = a->rot / 2, unit = (a->R + 2) * a->HS;
    for (size_t n = lo; n < hi; n++) {
        int t = a->pos ? a->pos[n] : (int)(n % (size_t)a->T);
        const float *restrict cs = a->cos + (size_t)t * half, *restrict sn = a->sin + (size_t)t * half;
        float *row = a->qkv + n * (size_t)a->NG * unit;
        for (int g = 0; g < a->NG; g++)
            for (int h = 0; h <= a->R; h++) {
                float *restrict x = row + (size_t)g * unit + (size_t)h * a->HS;
#pragma omp simd
                for (int i = 0; i < half; i++) {
                    float x1 = x[i], x2 = x[i + half], c = cs[i], si = a->sign * sn[i];
                    x[i] = x1 * c - x2 * si;
                    x[i + half] = x2 * c + x1 * si;
                }
            }
    }
}

void cpu_rope(tr_stream s, float *qkv, const float *cos, const float *sin, int B, int T, int NG,
              int R, int HS, int rot, int inverse, const int32_t *positions)
{
    (void)s;
    rope_args a = {qkv, cos, sin, T, NG, R, HS, rot, inverse ? -1.0f : 1.0f, positions};
    size_t rows = (size_t)B * T, per_row = (size_t)NG * (R + 1) * rot;
    cpu_for_ranges(rows * per_row >= CPU_PAR_MIN, rows, cpu_rows_per_piece(per_row), rope_rows,
                   &a);
}
