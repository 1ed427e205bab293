/* GELU, the tanh approximation (GPT-2's), in the equivalent sigmoid form:
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
    for (size_t i = lo; i < hi; i++) {
        float x = inp[i];
        float u = SQRT_2_OVER_PI * (x + GELU_K * x * x * x);
        out[i] = x / (1.0f + cpu_expf(-2.0f * u));
    }
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
    gelu_run(gelu_backward_range, dinp, inp, dout, n);
}

/* GELU, exact: gelu(x) = x Phi(x), Phi(x) = erfc(-x / sqrt 2) / 2, gelu'(x) = Phi(x) + x phi(x),
 * phi(x) = exp(-x^2 / 2) / sqrt(2 pi). erfc(z) for z = |x| / sqrt 2 >= 0 as
 *   erfc(z) = t exp(-z^2 + P(t)),  t = 1 / (1 + z/2),
 * P of degree 9 fitted (Chebyshev least squares, in double against mpmath) to
 * log(erfc(z) / t) + z^2 over t in (0, 1]: relative error 1.0e-7 in double for every z >= 0,
 * so both Phi(x) = 1 - erfc(z)/2 (x >= 0) and Phi(x) = erfc(z)/2 (x < 0) keep their relative
 * accuracy; in float32 gelu is within 2e-6 relative of the exact value for x > -5 (beyond,
 * it is below 1.5e-6 in size). Branch-free: one division and one exp (two in backward). */
static inline float phi_from_erfc(float x, float *density)
{
    float z = (x < 0.0f ? -x : x) * 0.70710678118654752f;
    float t = 1.0f / CPU_FMA(0.5f, z, 1.0f);
    float p = 1.7087277768e-01f;
    p = CPU_FMA(p, t, -8.2215223445e-01f);
    p = CPU_FMA(p, t, 1.4885158893e+00f);
    p = CPU_FMA(p, t, -1.1352040004e+00f);
    p = CPU_FMA(p, t, 2.7886808451e-01f);
    p = CPU_FMA(p, t, -1.8628806168e-01f);
    p = CPU_FMA(p, t, 9.6784189494e-02f);
    p = CPU_FMA(p, t, 3.7409195972e-01f);
    p = CPU_FMA(p, t, 1.0000236802e+00f);
    p = CPU_FMA(p, t, -1.2655122251e+00f);
    float half_erfc = 0.5f * t * cpu_expf(p - z * z);
    if (density)
        *density = 0.39894228040143268f * cpu_expf(-z * z);
    return x < 0.0f ? half_erfc : 1.0f - half_erfc;
}

static void gelu_exact_forward_range(void *ctx, size_t lo, size_t hi)
{
    const gelu_args *g = ctx;
    float *restrict out = g->out;
    const float *restrict inp = g->inp;
#pragma omp simd simdlen(CPU_SIMDLEN)
    for (size_t i = lo; i < hi; i++)
        out[i] = inp[i] * phi_from_erfc(inp[i], NULL);
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
    for (size_t i = lo; i < hi; i++) {
        float x = inp[i], density;
        float phi = phi_from_erfc(x, &density);
        dinp[i] = CPU_FMA(x, density, phi) * dout[i];
    }
}

void cpu_gelu_exact_backward(tr_stream s, float *dinp, const float *inp, const float *dout,
                             size_t n)
{
    (void)s;
    gelu_run(gelu_exact_backward_range, dinp, inp, dout, n);
}
