/* GELU, tanh approximation, in the equivalent sigmoid form:
 *   gelu(x) = 0.5 x (1 + tanh(u)) = x * sig(2u),  u = sqrt(2/pi) (x + 0.044715 x^3),
 *   gelu'(x) = sig(2u) + 2 x sig(2u) (1 - sig(2u)) u'(x),  u' = sqrt(2/pi) (1 + 3*0.044715 x^2),
 * which needs one exp per element and keeps full relative accuracy for large negative x. */
#include "kernels/cpu/cpu_ops.h"

#define SQRT_2_OVER_PI 0.7978845608028654f
#define GELU_K 0.044715f

typedef struct {
    float *out;
    const float *inp, *dout;
} gelu_args;

static void gelu_forward_range(void *ctx, size_t lo, size_t hi)
{
    const gelu_args *g = ctx;
    float *restrict out = g->out;
    const float *restrict inp = g->inp;
#pragma omp simd simdlen(CPU_SIMDLEN)
    for (size_t i = lo; i < hi; i++) {
        float x = inp[i];
        float u = SQRT_2_OVER_PI * (x + GELU_K * x * x * x);
        out[i] = x / (1.0f + cpu_expf(-2.0f * u));
    }
}

void cpu_gelu_forward(tr_stream s, float *out, const float *inp, size_t n)
{
    (void)s;
    gelu_args g = {out, inp, NULL};
    cpu_for_ranges(n >= CPU_PAR_MIN, n, CPU_PIECE, gelu_forward_range, &g);
}

static void gelu_backward_range(void *ctx, size_t lo, size_t hi)
{
    const gelu_args *g = ctx;
    float *restrict dinp = g->out;
    const float *restrict inp = g->inp, *restrict dout = g->dout;
#pragma omp simd simdlen(CPU_SIMDLEN)
    for (size_t i = lo; i < hi; i++) {
        float x = inp[i];
        float u = SQRT_2_OVER_PI * (x + GELU_K * x * x * x);
        float du = SQRT_2_OVER_PI * (1.0f + 3.0f * GELU_K * x * x);
        float sg = 1.0f / (1.0f + cpu_expf(-2.0f * u));
        dinp[i] = (sg + 2.0f * x * sg * (1.0f - sg) * du) * dout[i];
    }
}

void cpu_gelu_backward(tr_stream s, float *dinp, const float *inp, const float *dout,
                          size_t n)
{
    (void)s;
    gelu_args g = {dinp, inp, dout};
    cpu_for_ranges(n >= CPU_PAR_MIN, n, CPU_PIECE, gelu_backward_range, &g);
}
