/* The MLP's elementwise activations on the backend's threads: GELU, the tanh approximation
 * (GPT-2's) and the exact one (GPT-NeoX's), whose scalar formulas (and their accuracy) are
 * cpu_ops.h's cpu_gelu_tanh, cpu_gelu_tanh_slope, cpu_gelu_exact and cpu_gelu_exact_slope, which
 * GeGLU shares; and ReLU (OPT's): max(x, 0) with NaN kept, slope 1 where x > 0, else 0. */
#include "kernels/cpu/cpu_ops.h"

typedef struct {
    float *out;
    const float *inp, *dout;
} gelu_args;

/* range(lo, hi) over [0, n) on the backend's threads: out (or dinp), inp, dout (or NULL) */
static void gelu_run(void (*range)(void *, size_t, size_t), float *out, const float *inp,
                     const float *dout, size_t n)
{
    gelu_args g = {out, inp, dout};
    cpu_for_ranges(n >= CPU_PAR_MIN, n, CPU_PIECE, range, &g);
}

static void gelu_forward_range(void *ctx, size_t lo, size_t hi)
{
    const gelu_args *g = ctx;
    float *restrict out = g->out;
    const float *restrict inp = g->inp;
#pragma omp simd simdlen(CPU_SIMDLEN)
    for (size_t i = lo; i < hi; i++)
        out[i] = cpu_gelu_tanh(inp[i]);
}

void cpu_gelu_forward(tr_stream s, float *out, const float *inp, size_t n)
{
    (void)s;
    gelu_run(gelu_forward_range, out, inp, NULL, n);
}

static void gelu_backward_range(void *ctx, size_t lo, size_t hi)
{
    const gelu_args *g = ctx;
    float *restrict dinp = g->out;
    const float *restrict inp = g->inp, *restrict dout = g->dout;
#pragma omp simd simdlen(CPU_SIMDLEN)
    for (size_t i = lo; i < hi; i++)
        dinp[i] = cpu_gelu_tanh_slope(inp[i], NULL) * dout[i];
}

void cpu_gelu_backward(tr_stream s, float *dinp, const float *inp, const float *dout,
                          size_t n)
{
    (void)s;
    gelu_run(gelu_backward_range, dinp, inp, dout, n);
}

static void gelu_exact_forward_range(void *ctx, size_t lo, size_t hi)
{
    const gelu_args *g = ctx;
    float *restrict out = g->out;
    const float *restrict inp = g->inp;
#pragma omp simd simdlen(CPU_SIMDLEN)
    for (size_t i = lo; i < hi; i++)
        out[i] = cpu_gelu_exact(inp[i]);
}

void cpu_gelu_exact_forward(tr_stream s, float *out, const float *inp, size_t n)
{
    (void)s;
    gelu_run(gelu_exact_forward_range, out, inp, NULL, n);
}

static void gelu_exact_backward_range(void *ctx, size_t lo, size_t hi)
{
    const gelu_args *g = ctx;
    float *restrict dinp = g->out;
    const float *restrict inp = g->inp, *restrict dout = g->dout;
#pragma omp simd simdlen(CPU_SIMDLEN)
    for (size_t i = lo; i < hi; i++)
        dinp[i] = cpu_gelu_exact_slope(inp[i], NULL) * dout[i];
}

void cpu_gelu_exact_backward(tr_stream s, float *dinp, const float *inp, const float *dout,
                             size_t n)
{
    (void)s;
    gelu_run(gelu_exact_backward_range, dinp, inp, dout, n);
}

static void relu_forward_range(void *ctx, size_t lo, size_t hi)
{
    const gelu_args *g = ctx;
    float *restrict out = g->out;
    const float *restrict inp = g->inp;
#pragma omp simd simdlen(CPU_SIMDLEN)
    for (size_t i = lo; i < hi; i++)
        out[i] = inp[i] < 0.0f ? 0.0f : inp[i]; /* (NaN is not < 0: kept) */
}

void cpu_relu_forward(tr_stream s, float *out, const float *inp, size_t n)
{
    (void)s;
    gelu_run(relu_forward_range, out, inp, NULL, n);
}

static void relu_backward_range(void *ctx, size_t lo, size_t hi)
{
    const gelu_args *g = ctx;
    float *restrict dinp = g->out;
    const float *restrict inp = g->inp, *restrict dout = g->dout;
#pragma omp simd simdlen(CPU_SIMDLEN)
    for (size_t i = lo; i < hi; i++)
        dinp[i] = inp[i] > 0.0f ? dout[i] : 0.0f;
}

void cpu_relu_backward(tr_stream s, float *dinp, const float *inp, const float *dout, size_t n)
{
    (void)s;
    gelu_run(relu_backward_range, dinp, inp, dout, n);
}
