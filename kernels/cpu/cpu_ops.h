/* kernels/cpu/ — internal: the CPU backend's ops (fp32, host memory), one file per concern.
 *
 * Threading: every parallel loop and every GEMM split runs on the backend's team (pool.c:
 * the caller and OMP_NUM_THREADS - 1 workers, pieces handed out dynamically, no spinning on
 * a shared core); OpenBLAS is set to one thread (see table.c) and is called from inside
 * the pieces, so the two never oversubscribe the cores.
 * Determinism: work is cut into pieces by the sizes alone (never by the thread count), each
 * piece computes its outputs with a fixed sequence of operations, and there are no atomics
 * and no reductions whose order depends on scheduling (reductions over rows are split by
 * columns). So results do not depend on the thread count or on which thread ran what. */
#ifndef TR_KERNELS_CPU_OPS_H
#define TR_KERNELS_CPU_OPS_H

#include "kernels/kernels.h"

#include <stdint.h>
#include <string.h>

/* Work (in elements or flops) below which a loop stays on the calling thread. */
#define CPU_PAR_MIN 32768

/* a * b + c, fused where the CPU has FMA (C17 mode compiles with -ffp-contract=off) */
#ifdef __FMA__
#define CPU_FMA(a, b, c) __builtin_fmaf((a), (b), (c))
#else
#define CPU_FMA(a, b, c) ((a) * (b) + (c))
#endif

/* SIMD width for loops bound by arithmetic (exp): 16 floats = one AVX-512 register. */
#define CPU_SIMDLEN 16

/* max(init, x[0..n)) by comparisons (NaN elements are passed over): CPU_SIMDLEN running
 * maxima, then folded, a loop GCC and clang both vectorise (clang does not vectorise a
 * `reduction(max)` of selects). The maximum is exact, so the order gives the same value. */
static inline float cpu_max_f32(const float *restrict x, int n, float init)
{
    float lane[CPU_SIMDLEN];
    for (int l = 0; l < CPU_SIMDLEN; l++)
        lane[l] = init;
    int c = 0;
    for (; c + CPU_SIMDLEN <= n; c += CPU_SIMDLEN)
#pragma omp simd
        for (int l = 0; l < CPU_SIMDLEN; l++)
            lane[l] = x[c + l] > lane[l] ? x[c + l] : lane[l];
    float mx = init;
    for (int l = 0; l < CPU_SIMDLEN; l++)
        mx = lane[l] > mx ? lane[l] : mx;
    for (; c < n; c++)
        mx = x[c] > mx ? x[c] : mx;
    return mx;
}

/* exp(x) for fp32, written so GCC vectorises loops that call it: Cody-Waite range
 * reduction x = k ln2 + r, |r| <= ln2/2, a degree-7 polynomial for e^r and 2^k from the
 * exponent bits. Relative error about 2 ulp; inputs below -87.3 give 0, above 88 give e^88. */
static inline float cpu_expf(float x)
{
    float xc = x > 88.0f ? 88.0f : x;
    xc = xc < -87.3f ? -87.3f : xc;
    /* k = round(x / ln2) by the 1.5 * 2^23 trick (exact in round-to-nearest): the low bits of
     * t hold k, so 2^k is built with unsigned integer arithmetic only (defined even for NaN) */
    float t = CPU_FMA(xc, 1.44269504088896341f, 12582912.0f);
    float kf = t - 12582912.0f;
    float r = CPU_FMA(kf, -0.693359375f, xc); /* ln2 high part (exact product) */
    r = CPU_FMA(kf, 2.12194440e-4f, r);       /* ln2 low part */
    float p = 1.9875691500e-4f;
    p = CPU_FMA(p, r, 1.3981999507e-3f);
    p = CPU_FMA(p, r, 8.3334519073e-3f);
    p = CPU_FMA(p, r, 4.1665795894e-2f);
    p = CPU_FMA(p, r, 1.6666665459e-1f);
    p = CPU_FMA(p, r, 5.0000001201e-1f);
    p = CPU_FMA(p, r * r, r + 1.0f);
    uint32_t tbits;
    memcpy(&tbits, &t, sizeof tbits);
    uint32_t bits = (tbits - 0x4B400000u + 127u) << 23;
    float two_k;
    memcpy(&two_k, &bits, sizeof two_k);
    float e = p * two_k;
    return x < -87.3f ? 0.0f : e;
}

/* GELU's scalar pieces, shared by gelu.c's ops and family.c's GeGLU so that GeGLU's gelu(gate)
 * equals gelu_forward's (gelu_exact_forward's) bit for bit on the same input.
 * Tanh approximation (GPT-2's), in the equivalent sigmoid form:
 *   gelu(x) = 0.5 x (1 + tanh(u)) = x * sig(2u),  u = sqrt(2/pi) (x + 0.044715 x^3),
 *   gelu'(x) = sig(2u) + 2 x sig(2u) (1 - sig(2u)) u'(x),  u' = sqrt(2/pi) (1 + 3*0.044715 x^2),
 * which needs one exp per element and keeps full relative accuracy for large negative x. */
#define CPU_SQRT_2_OVER_PI 0.7978845608028654f
#define CPU_GELU_K 0.044715f

static inline float cpu_gelu_tanh(float x)
{
    float u = CPU_SQRT_2_OVER_PI * (x + CPU_GELU_K * x * x * x);
    return x / (1.0f + cpu_expf(-2.0f * u));
}

/* gelu'(x); value: NULL, or set to gelu(x), cpu_gelu_tanh's bits (the same exp) */
static inline float cpu_gelu_tanh_slope(float x, float *value)
{
    float u = CPU_SQRT_2_OVER_PI * (x + CPU_GELU_K * x * x * x);
    float du = CPU_SQRT_2_OVER_PI * (1.0f + 3.0f * CPU_GELU_K * x * x);
    float den = 1.0f + cpu_expf(-2.0f * u);
    float sg = 1.0f / den;
    if (value)
        *value = x / den;
    return sg + 2.0f * x * sg * (1.0f - sg) * du;
}

/* GELU, exact: gelu(x) = x Phi(x), Phi(x) = erfc(-x / sqrt 2) / 2, gelu'(x) = Phi(x) + x phi(x),
 * phi(x) = exp(-x^2 / 2) / sqrt(2 pi). cpu_gelu_phi returns Phi(x) and, density not NULL, sets
 * it to phi(x). erfc(z) for z = |x| / sqrt 2 >= 0 as
 *   erfc(z) = t exp(-z^2 + P(t)),  t = 1 / (1 + z/2),
 * P of degree 9 fitted (Chebyshev least squares, in double against mpmath) to
 * log(erfc(z) / t) + z^2 over t in (0, 1]: relative error 1.0e-7 in double for every z >= 0,
 * so both Phi(x) = 1 - erfc(z)/2 (x >= 0) and Phi(x) = erfc(z)/2 (x < 0) keep their relative
 * accuracy; in float32 gelu is within 2e-6 relative of the exact value for x > -5 (beyond,
 * it is below 1.5e-6 in size). Branch-free: one division and one exp (two with the density). */
static inline float cpu_gelu_phi(float x, float *density)
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

static inline float cpu_gelu_exact(float x) { return x * cpu_gelu_phi(x, NULL); }

/* gelu'(x) = Phi(x) + x phi(x); value: NULL, or set to gelu(x), cpu_gelu_exact's bits */
static inline float cpu_gelu_exact_slope(float x, float *value)
{
    float density, phi = cpu_gelu_phi(x, &density);
    if (value)
        *value = x * phi;
    return CPU_FMA(x, density, phi);
}

/* pool.c: fn(ctx, lo, hi) over [0, count) in pieces of `per` items (the last shorter), on
 * the team when `parallel`, else in order on the caller: the same cut either way. */
void cpu_for_ranges(int parallel, size_t count, size_t per,
                       void (*fn)(void *ctx, size_t lo, size_t hi), void *ctx);
/* Items per piece for loops over elements, and rows per piece for rows of C columns. */
#define CPU_PIECE 16384
static inline size_t cpu_rows_per_piece(size_t C)
{
    return C >= CPU_PIECE ? 1 : C == 0 ? CPU_PIECE : CPU_PIECE / C;
}

/* memory.c */
void *cpu_alloc(size_t bytes);
void cpu_free(void *p);
size_t cpu_bytes_in_use(size_t *peak);
void cpu_to_device(tr_stream s, void *dst, const void *host_src, size_t bytes);
void cpu_to_host(tr_stream s, void *host_dst, const void *src, size_t bytes);
void cpu_copy(tr_stream s, void *dst, const void *src, size_t bytes);
void cpu_zero(tr_stream s, void *dst, size_t bytes);
void cpu_synchronize(tr_stream s);

/* elementwise.c */
void cpu_add(tr_stream s, float *out, const float *a, const float *b, size_t n);
void cpu_axpy(tr_stream s, float *y, float alpha, const float *x, size_t n);
void cpu_scale(tr_stream s, float *x, float alpha, size_t n);
void cpu_scale_rows(tr_stream s, float *x, const float *w, int N, int C);
void cpu_bias_add(tr_stream s, float *out, const float *bias, int N, int C);
void cpu_bias_backward(tr_stream s, float *dbias, const float *dout, int N, int C);

/* gemm.c: cpu_gemm_serial runs on the calling thread (used inside parallel regions). */
void cpu_gemm_serial(int trans_a, int trans_b, int M, int N, int K, float alpha,
                        const float *A, int lda, const float *B, int ldb, float beta, float *C,
                        int ldc);
void cpu_gemm(tr_stream s, int trans_a, int trans_b, int M, int N, int K, float alpha,
                 const float *A, int lda, const float *B, int ldb, float beta, float *C,
                 int ldc);
void cpu_linear_forward(tr_stream s, float *y, uint16_t *y16, const float *x,
                        const uint16_t *x16, const float *W, const float *b,
                        const float *residual, int N, int IC, int OC);
void cpu_linear_backward(tr_stream s, float *dx, uint16_t *dx16, float *dW, float *db,
                         const float *dy, const uint16_t *dy16, const float *x,
                         const uint16_t *x16, const float *W, int N, int IC, int OC);

/* bf16_storage.c: n values stored bf16 (bf16.h's rounding to nearest even) and back (exact) */
void cpu_bf16_narrow(uint16_t *dst, const float *src, size_t n);
void cpu_bf16_widen(float *dst, const uint16_t *src, size_t n);

/* bf16_storage.c: the bf16-storage ops (kernels.h: the head's, the MLP activation's) into t,
 * wrapping t's own gemm, gelu_forward, xent_stats and xent_loss_backward ("cpu-bf16"). */
void cpu_bf16_storage_fill(tr_kernels *t);

/* moe.c: the mixture-of-experts ops (kernels.h) */
void cpu_moe_router_forward(tr_stream s, int32_t *idx, float *weights, float *probs, float *lse,
                            const float *logits, int N, int E, int k, int pre_softmax);
void cpu_moe_router_backward(tr_stream s, float *dlogits, const float *dweights,
                             const int32_t *idx, const float *weights, const float *probs,
                             const float *lse, const float *aux_grad, float z_grad, int N, int E,
                             int k, int pre_softmax);
void cpu_gather_rows(tr_stream s, float *out, const float *src, const int32_t *idx, int M,
                     int C);
void cpu_scatter_add_rows(tr_stream s, float *out, const float *src, const int32_t *idx,
                          const float *w, int M, int C);
void cpu_scatter_add_rows_backward(tr_stream s, float *dsrc, float *dw, const float *dout,
                                   const float *src, const int32_t *idx, const float *w, int M,
                                   int C);

/* dropout.c: out[j] = inp[j] * d->scale where element e0 + j of `sample` at d's site is kept
 * (core/philox.h), else 0, for j < n (out may be inp); and the dropout op (kernels.h) */
void cpu_dropout_row(const tr_dropout *d, uint64_t sample, uint64_t e0, float *out,
                     const float *inp, int n);
void cpu_dropout(tr_stream s, float *out, const float *inp, tr_dropout d, int N, int C, int T,
                 int row0, int C_total, int col0);
/* Attention dropout of query t (global position) of local head h, batch b, in sequences of T:
 * p[j] (keys k0 + j, j < n) *= keep * scale, element ((d->head0 + h) T + t) T + k0 + j of
 * sample d->first_sample + b (the attention ops of attention.c and attention_rows.c) */
void cpu_dropout_probs(const tr_dropout *d, int T, int b, int h, int t, int k0, float *p, int n);

/* layernorm.c */
void cpu_layernorm_forward(tr_stream s, float *out, float *mean, float *rstd,
                              const float *inp, const float *weight, const float *bias, int N,
                              int C, float eps);
void cpu_layernorm_backward(tr_stream s, float *dinp, float *dweight, float *dbias,
                               const float *dout, const float *inp, const float *weight,
                               const float *mean, const float *rstd, int N, int C);

/* gelu.c: GELU (both kinds) and ReLU */
void cpu_gelu_forward(tr_stream s, float *out, const float *inp, size_t n);
void cpu_gelu_backward(tr_stream s, float *dinp, const float *inp, const float *dout,
                          size_t n);
void cpu_gelu_exact_forward(tr_stream s, float *out, const float *inp, size_t n);
void cpu_gelu_exact_backward(tr_stream s, float *dinp, const float *inp, const float *dout,
                             size_t n);
void cpu_relu_forward(tr_stream s, float *out, const float *inp, size_t n);
void cpu_relu_backward(tr_stream s, float *dinp, const float *inp, const float *dout, size_t n);

/* attention.c */
void cpu_attention_forward(tr_stream s, float *out, float *lse, const float *qkv, int B, int T,
                           int NH, int HS, const int32_t *segments);
void cpu_attention_backward(tr_stream s, float *dqkv, float *scratch, const float *dout,
                            const float *qkv, const float *out, const float *lse, int B, int T,
                            int NH, int HS, const int32_t *segments);
void cpu_attention_decode(tr_stream s, float *out, float *kcache, float *vcache, float *scores,
                          const float *qkv, int B, int n, int past, int max_T, int NH, int HS);

/* attention.c: grouped query heads and ALiBi (kernels.h, attention_gqa_*) */
void cpu_attention_gqa_forward(tr_stream s, float *out, float *lse, const float *qkv,
                               const float *alibi, int B, int T, int NH, int NG, int HS,
                               const int32_t *segments);
void cpu_attention_gqa_backward(tr_stream s, float *dqkv, float *scratch, const float *dout,
                                const float *qkv, const float *out, const float *lse,
                                const float *alibi, int B, int T, int NH, int NG, int HS,
                                const int32_t *segments);
void cpu_attention_gqa_decode(tr_stream s, float *out, float *kcache, float *vcache,
                              float *scores, const float *qkv, const float *alibi, int B, int n,
                              int past, int max_T, int NH, int NG, int HS);

/* attention.c: attention_gqa_* with dropout on the probabilities (kernels.h) */
void cpu_attention_gqa_dropout_forward(tr_stream s, float *out, float *lse, const float *qkv,
                                       const float *alibi, int B, int T, int NH, int NG, int HS,
                                       const int32_t *segments, tr_dropout d);
void cpu_attention_gqa_dropout_backward(tr_stream s, float *dqkv, float *scratch,
                                        const float *dout, const float *qkv, const float *out,
                                        const float *lse, const float *alibi, int B, int T,
                                        int NH, int NG, int HS, const int32_t *segments,
                                        tr_dropout d);

/* attention_rows.c: context parallelism's query rows against earlier keys (kernels.h) */
void cpu_attention_rows_forward(tr_stream s, float *out, float *lse, const float *qkv,
                                const float *alibi, int B, int Tk, int q0, int NH, int NG, int HS);
void cpu_attention_rows_backward(tr_stream s, float *dqkv, const float *dout, const float *qkv,
                                 const float *out, const float *lse, const float *alibi, int B,
                                 int Tk, int q0, int NH, int NG, int HS);
void cpu_attention_rows_dropout_forward(tr_stream s, float *out, float *lse, const float *qkv,
                                        const float *alibi, int B, int Tk, int q0, int NH,
                                        int NG, int HS, int T, tr_dropout d);
void cpu_attention_rows_dropout_backward(tr_stream s, float *dqkv, const float *dout,
                                         const float *qkv, const float *out, const float *lse,
                                         const float *alibi, int B, int Tk, int q0, int NH,
                                         int NG, int HS, int T, tr_dropout d);

/* family.c: RMSNorm, SwiGLU, GeGLU, rotary embedding */
void cpu_rmsnorm_forward(tr_stream s, float *out, float *rstd, const float *inp,
                         const float *weight, int N, int C, float eps);
void cpu_rmsnorm_backward(tr_stream s, float *dinp, float *dweight, const float *dout,
                          const float *inp, const float *weight, const float *rstd, int N, int C);
void cpu_swiglu_forward(tr_stream s, float *out, const float *inp, size_t n);
void cpu_swiglu_backward(tr_stream s, float *dinp, const float *inp, const float *dout,
                         size_t n);
void cpu_geglu_forward(tr_stream s, float *out, const float *inp, size_t n, int exact);
void cpu_geglu_backward(tr_stream s, float *dinp, const float *inp, const float *dout, size_t n,
                        int exact);
void cpu_rope(tr_stream s, float *qkv, const float *cos, const float *sin, int B, int T, int NG,
              int R, int HS, int rot, int inverse, const int32_t *positions);

/* crossentropy.c */
void cpu_xent_row_max(tr_stream s, float *maxv, const float *logits, int N, int V,
                         int n_valid);
void cpu_xent_row_sumexp(tr_stream s, float *sumexp, const float *logits, const float *maxv,
                            int N, int V, int n_valid);
void cpu_xent_pick(tr_stream s, float *picked, const float *logits, const int32_t *targets,
                      int N, int V, int v_start);
void cpu_xent_loss(tr_stream s, float *losses, const float *maxv, const float *sumexp,
                      const float *picked, int N);
void cpu_xent_backward(tr_stream s, float *dlogits, const float *logits, const float *maxv,
                          const float *sumexp, const int32_t *targets, int N, int V,
                          int n_valid, int v_start, float scale);
void cpu_xent_stats(tr_stream s, float *maxv, float *sumexp, float *picked, const float *logits,
                    const int32_t *targets, int N, int V, int n_valid, int v_start);
void cpu_xent_rescale(tr_stream s, float *sumexp, const float *local_max, const float *maxv,
                      int N);
void cpu_xent_loss_backward(tr_stream s, float *losses, float *dlogits, const float *logits,
                            const float *maxv, const float *sumexp, const float *picked,
                            const int32_t *targets, const float *weights, int N, int V,
                            int n_valid, int v_start, float scale);

/* embedding.c */
void cpu_embedding_forward(tr_stream s, float *out, const int32_t *ids, const float *table,
                              int N, int C, int v_start, int V);
void cpu_embedding_backward(tr_stream s, float *dtable, const float *dout,
                               const int32_t *ids, int N, int C, int v_start, int V);
void cpu_position_forward(tr_stream s, float *out, const float *wpe, int B, int T, int C);
void cpu_position_backward(tr_stream s, float *dwpe, const float *dout, int B, int T, int C);

/* optimizer.c */
void cpu_adamw(tr_stream s, float *params, const float *grads, float *m, float *v, size_t n,
                  float lr, float beta1, float beta2, float eps, float weight_decay,
                  float grad_scale, int step);
double cpu_sumsq(tr_stream s, const float *x, size_t n);

#endif
