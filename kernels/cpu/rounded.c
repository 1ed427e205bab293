/* The CPU backend with 16-bit storage emulated ("cpu-bf16", "cpu-fp16"; kernels.h states the
 * contract): each op of the fp32 table runs on operands read through the 16-bit format and its
 * kept outputs are rounded to it afterwards. The arithmetic inside an op stays fp32, as on a
 * GPU whose kernels load bf16/fp16 and accumulate in fp32; statistics (mean, rstd, maxv,
 * sumexp, losses), the norm and the optimizer stay fp32, and the parameters the optimizer
 * updates are the fp32 master weights (ops read them rounded: the compute copy). */
#include "kernels/cpu/cpu_ops.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>

#include "kernels/cuda/bf16.h" /* the rounding the CUDA backend uses, host-callable */

float tr_round_bf16(float x) { return bf16_to_f32(bf16_from_f32(x)); }

float tr_round_fp16(float x)
{
    float a = fabsf(x);
    if (isnan(x))
        return x;
    if (a < 0x1p-14f) /* fp16 subnormals: multiples of 2^-24 (exact scaling, ties to even) */
        return rintf(x * 0x1p24f) * 0x1p-24f;
    uint32_t u = f32_bits(x);
    u += 0xFFFu + ((u >> 13) & 1u); /* 10 mantissa bits kept: ties to even */
    u &= 0xFFFFE000u;
    float r = f32_from_bits(u);
    return fabsf(r) > 65504.0f ? copysignf(INFINITY, x) : r; /* past the largest: infinity */
}

/* One table per format; which one a wrapper serves is fixed at compile time by the macro
 * below, so each format's wrappers call their own rounding. */
static void round_bf16_n(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = tr_round_bf16(x[i]);
}

static void round_fp16_n(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = tr_round_fp16(x[i]);
}

/* Rounded copies of the inputs an op reads as parameters or GEMM operands: per thread, a few
 * slots grown as needed and kept (the emulation's staging, as the CUDA backend's). */
enum { N_STAGE = 4 };
typedef struct {
    float *p;
    size_t cap;
} stage_slot;
static _Thread_local stage_slot stage[N_STAGE];

/* a thread's slots are freed when it ends (a key whose value is its slots, once grown) */
static pthread_key_t stage_key;
static pthread_once_t stage_key_once = PTHREAD_ONCE_INIT;

static void stage_free(void *slots)
{
    stage_slot *s = slots;
    for (int i = 0; i < N_STAGE; i++)
        free(s[i].p), s[i].p = NULL, s[i].cap = 0;
}

static void stage_key_make(void) { (void)pthread_key_create(&stage_key, stage_free); }

static const float *staged(int slot, const float *src, size_t n, void (*round_n)(float *, size_t))
{
    if (!src || !n)
        return src;
    if (stage[slot].cap < n) {
        float *p = realloc(stage[slot].p, n * sizeof(float));
        if (!p) /* out of memory: read it unrounded rather than crash (the emulation only) */
            return src;
        stage[slot].p = p, stage[slot].cap = n;
        pthread_once(&stage_key_once, stage_key_make);
        (void)pthread_setspecific(stage_key, stage);
    }
    memcpy(stage[slot].p, src, n * sizeof(float));
    round_n(stage[slot].p, n);
    return stage[slot].p;
}

/* Elements a row-major matrix of `rows` rows and stride ld spans. */
static size_t span(int rows, int cols, int ld)
{
    return rows > 0 ? (size_t)(rows - 1) * ld + cols : 0;
}

#define ROUNDED_TABLE(FMT)                                                                         \
    static void FMT##_gemm(tr_stream s, int ta, int tb, int M, int N, int K, float alpha,          \
                           const float *A, int lda, const float *B, int ldb, float beta,           \
                           float *C, int ldc)                                                      \
    {                                                                                              \
        const float *a = staged(0, A, ta ? span(K, M, lda) : span(M, K, lda), round_##FMT##_n);    \
        const float *b = staged(1, B, tb ? span(N, K, ldb) : span(K, N, ldb), round_##FMT##_n);    \
        tr_kernels_cpu()->gemm(s, ta, tb, M, N, K, alpha, a, lda, b, ldb, beta, C, ldc);           \
        for (int i = 0; i < M; i++)                                                                \
            round_##FMT##_n(C + (size_t)i * ldc, (size_t)N);                                       \
    }                                                                                              \
    static void FMT##_add(tr_stream s, float *out, const float *a, const float *b, size_t n)       \
    {                                                                                              \
        tr_kernels_cpu()->add(s, out, a, b, n);                                                    \
        round_##FMT##_n(out, n);                                                                   \
    }                                                                                              \
    static void FMT##_axpy(tr_stream s, float *y, float alpha, const float *x, size_t n)           \
    {                                                                                              \
        tr_kernels_cpu()->axpy(s, y, alpha, x, n);                                                 \
        round_##FMT##_n(y, n);                                                                     \
    }                                                                                              \
    static void FMT##_scale(tr_stream s, float *x, float alpha, size_t n)                          \
    {                                                                                              \
        tr_kernels_cpu()->scale(s, x, alpha, n);                                                   \
        round_##FMT##_n(x, n);                                                                     \
    }                                                                                              \
    static void FMT##_scale_rows(tr_stream s, float *x, const float *w, int N, int C)              \
    {                                                                                              \
        tr_kernels_cpu()->scale_rows(s, x, w, N, C);                                               \
        round_##FMT##_n(x, (size_t)N * C);                                                         \
    }                                                                                              \
    static void FMT##_bias_add(tr_stream s, float *out, const float *bias, int N, int C)           \
    {                                                                                              \
        tr_kernels_cpu()->bias_add(s, out, staged(0, bias, (size_t)C, round_##FMT##_n), N, C);     \
        round_##FMT##_n(out, (size_t)N * C);                                                       \
    }                                                                                              \
    static void FMT##_bias_backward(tr_stream s, float *dbias, const float *dout, int N, int C)    \
    {                                                                                              \
        tr_kernels_cpu()->bias_backward(s, dbias, dout, N, C);                                     \
        round_##FMT##_n(dbias, (size_t)C);                                                         \
    }                                                                                              \
    static void FMT##_layernorm_forward(tr_stream s, float *out, float *mean, float *rstd,         \
                                        const float *inp, const float *weight,                     \
                                        const float *bias, int N, int C, float eps)                \
    {                                                                                              \
        tr_kernels_cpu()->layernorm_forward(s, out, mean, rstd, inp,                               \
                                        staged(0, weight, (size_t)C, round_##FMT##_n),             \
                                        staged(1, bias, (size_t)C, round_##FMT##_n), N, C,         \
                                        eps);                                                      \
        round_##FMT##_n(out, (size_t)N * C);                                                       \
    }                                                                                              \
    static void FMT##_layernorm_backward(tr_stream s, float *dinp, float *dweight,                 \
                                         float *dbias, const float *dout, const float *inp,        \
                                         const float *weight, const float *mean,                   \
                                         const float *rstd, int N, int C)                          \
    {                                                                                              \
        tr_kernels_cpu()->layernorm_backward(s, dinp, dweight, dbias, dout, inp,                   \
                                         staged(0, weight, (size_t)C, round_##FMT##_n), mean,      \
                                         rstd, N, C);                                              \
        round_##FMT##_n(dinp, (size_t)N * C);                                                      \
        round_##FMT##_n(dweight, (size_t)C);                                                       \
        round_##FMT##_n(dbias, (size_t)C);                                                         \
    }                                                                                              \
    static void FMT##_gelu_forward(tr_stream s, float *out, const float *inp, size_t n)            \
    {                                                                                              \
        tr_kernels_cpu()->gelu_forward(s, out, inp, n);                                            \
        round_##FMT##_n(out, n);                                                                   \
    }                                                                                              \
    static void FMT##_gelu_backward(tr_stream s, float *dinp, const float *inp,                    \
                                    const float *dout, size_t n)                                   \
    {                                                                                              \
        tr_kernels_cpu()->gelu_backward(s, dinp, inp, dout, n);                                    \
        round_##FMT##_n(dinp, n);                                                                  \
    }                                                                                              \
    static void FMT##_gelu_exact_forward(tr_stream s, float *out, const float *inp, size_t n)      \
    {                                                                                              \
        tr_kernels_cpu()->gelu_exact_forward(s, out, inp, n);                                      \
        round_##FMT##_n(out, n);                                                                   \
    }                                                                                              \
    static void FMT##_gelu_exact_backward(tr_stream s, float *dinp, const float *inp,              \
                                          const float *dout, size_t n)                             \
    {                                                                                              \
        tr_kernels_cpu()->gelu_exact_backward(s, dinp, inp, dout, n);                              \
        round_##FMT##_n(dinp, n);                                                                  \
    }                                                                                              \
    static void FMT##_relu_forward(tr_stream s, float *out, const float *inp, size_t n)            \
    {                                                                                              \
        tr_kernels_cpu()->relu_forward(s, out, inp, n);                                            \
        round_##FMT##_n(out, n);                                                                   \
    }                                                                                              \
    static void FMT##_relu_backward(tr_stream s, float *dinp, const float *inp,                    \
                                    const float *dout, size_t n)                                   \
    {                                                                                              \
        tr_kernels_cpu()->relu_backward(s, dinp, inp, dout, n);                                    \
        round_##FMT##_n(dinp, n);                                                                  \
    }                                                                                              \
    static void FMT##_attention_forward(tr_stream s, float *out, float *lse, const float *qkv,     \
                                        int B, int T, int NH, int HS, const int32_t *segments)     \
    {                                                                                              \
        tr_kernels_cpu()->attention_forward(s, out, lse, qkv, B, T, NH, HS, segments);             \
        round_##FMT##_n(out, (size_t)B * T * NH * HS);                                             \
    }                                                                                              \
    static void FMT##_attention_backward(tr_stream s, float *dqkv, float *scratch,                 \
                                         const float *dout, const float *qkv, const float *out,    \
                                         const float *lse, int B, int T, int NH, int HS,           \
                                         const int32_t *segments)                                  \
    {                                                                                              \
        tr_kernels_cpu()->attention_backward(s, dqkv, scratch, dout, qkv, out, lse, B, T, NH, HS,  \
                                             segments);                                            \
        round_##FMT##_n(dqkv, (size_t)B * T * NH * 3 * HS);                                        \
    }                                                                                              \
    static void FMT##_rmsnorm_forward(tr_stream s, float *out, float *rstd, const float *inp,      \
                                      const float *weight, int N, int C, float eps)                \
    {                                                                                              \
        tr_kernels_cpu()->rmsnorm_forward(s, out, rstd, inp,                                       \
                                      staged(0, weight, (size_t)C, round_##FMT##_n), N, C,         \
                                      eps);                                                        \
        round_##FMT##_n(out, (size_t)N * C);                                                       \
    }                                                                                              \
    static void FMT##_rmsnorm_backward(tr_stream s, float *dinp, float *dweight,                   \
                                       const float *dout, const float *inp, const float *weight,   \
                                       const float *rstd, int N, int C)                            \
    {                                                                                              \
        tr_kernels_cpu()->rmsnorm_backward(s, dinp, dweight, dout, inp,                            \
                                       staged(0, weight, (size_t)C, round_##FMT##_n), rstd, N,     \
                                       C);                                                         \
        round_##FMT##_n(dinp, (size_t)N * C);                                                      \
        round_##FMT##_n(dweight, (size_t)C);                                                       \
    }                                                                                              \
    static void FMT##_swiglu_forward(tr_stream s, float *out, const float *inp, size_t n)          \
    {                                                                                              \
        tr_kernels_cpu()->swiglu_forward(s, out, inp, n);                                          \
        round_##FMT##_n(out, n);                                                                   \
    }                                                                                              \
    static void FMT##_swiglu_backward(tr_stream s, float *dinp, const float *inp,                  \
                                      const float *dout, size_t n)                                 \
    {                                                                                              \
        tr_kernels_cpu()->swiglu_backward(s, dinp, inp, dout, n);                                  \
        round_##FMT##_n(dinp, 2 * n);                                                              \
    }                                                                                              \
    static void FMT##_geglu_forward(tr_stream s, float *out, const float *inp, size_t n,           \
                                    int exact)                                                     \
    {                                                                                              \
        tr_kernels_cpu()->geglu_forward(s, out, inp, n, exact);                                    \
        round_##FMT##_n(out, n);                                                                   \
    }                                                                                              \
    static void FMT##_geglu_backward(tr_stream s, float *dinp, const float *inp,                   \
                                     const float *dout, size_t n, int exact)                       \
    {                                                                                              \
        tr_kernels_cpu()->geglu_backward(s, dinp, inp, dout, n, exact);                            \
        round_##FMT##_n(dinp, 2 * n);                                                              \
    }                                                                                              \
    static void FMT##_rope(tr_stream s, float *qkv, const float *cos, const float *sin, int B,     \
                           int T, int NG, int R, int HS, int rot, int inverse,                     \
                           const int32_t *positions)                                               \
    {                                                                                              \
        tr_kernels_cpu()->rope(s, qkv, cos, sin, B, T, NG, R, HS, rot, inverse, positions);        \
        round_##FMT##_n(qkv, (size_t)B * T * NG * (R + 2) * HS);                                   \
    }                                                                                              \
    static void FMT##_attention_gqa_forward(tr_stream s, float *out, float *lse,                   \
                                            const float *qkv, const float *alibi, int B, int T,    \
                                            int NH, int NG, int HS, const int32_t *segments)       \
    {                                                                                              \
        tr_kernels_cpu()->attention_gqa_forward(s, out, lse, qkv, alibi, B, T, NH, NG, HS,         \
                                            segments);                                             \
        round_##FMT##_n(out, (size_t)B * T * NH * HS);                                             \
    }                                                                                              \
    static void FMT##_attention_gqa_backward(tr_stream s, float *dqkv, float *scratch,             \
                                             const float *dout, const float *qkv,                  \
                                             const float *out, const float *lse,                   \
                                             const float *alibi, int B, int T, int NH, int NG,     \
                                             int HS, const int32_t *segments)                      \
    {                                                                                              \
        tr_kernels_cpu()->attention_gqa_backward(s, dqkv, scratch, dout, qkv, out, lse, alibi, B,  \
                                                 T, NH, NG, HS, segments);                         \
        round_##FMT##_n(dqkv, (size_t)B * T * NG * (NH / NG + 2) * HS);                            \
    }                                                                                              \
    static void FMT##_dropout(tr_stream s, float *out, const float *inp, tr_dropout d, int N,      \
                              int C, int T, int row0, int C_total, int col0)                       \
    {                                                                                              \
        tr_kernels_cpu()->dropout(s, out, inp, d, N, C, T, row0, C_total, col0);                   \
        round_##FMT##_n(out, (size_t)N * C);                                                       \
    }                                                                                              \
    static void FMT##_attention_gqa_dropout_forward(tr_stream s, float *out, float *lse,           \
                                                    const float *qkv, const float *alibi, int B,   \
                                                    int T, int NH, int NG, int HS,                 \
                                                    const int32_t *segments, tr_dropout d)         \
    {                                                                                              \
        tr_kernels_cpu()->attention_gqa_dropout_forward(s, out, lse, qkv, alibi, B, T, NH, NG, HS, \
                                                        segments, d);                              \
        round_##FMT##_n(out, (size_t)B * T * NH * HS);                                             \
    }                                                                                              \
    static void FMT##_attention_gqa_dropout_backward(                                              \
        tr_stream s, float *dqkv, float *scratch, const float *dout, const float *qkv,             \
        const float *out, const float *lse, const float *alibi, int B, int T, int NH, int NG,      \
        int HS, const int32_t *segments, tr_dropout d)                                             \
    {                                                                                              \
        tr_kernels_cpu()->attention_gqa_dropout_backward(s, dqkv, scratch, dout, qkv, out, lse,    \
                                                         alibi, B, T, NH, NG, HS, segments, d);    \
        round_##FMT##_n(dqkv, (size_t)B * T * NG * (NH / NG + 2) * HS);                            \
    }                                                                                              \
    static void FMT##_xent_backward(tr_stream s, float *dlogits, const float *logits,              \
                                    const float *maxv, const float *sumexp,                        \
                                    const int32_t *targets, int N, int V, int n_valid,             \
                                    int v_start, float scale)                                      \
    {                                                                                              \
        tr_kernels_cpu()->xent_backward(s, dlogits, logits, maxv, sumexp, targets, N, V, n_valid,  \
                                    v_start, scale);                                               \
        round_##FMT##_n(dlogits, (size_t)N * V);                                                   \
    }                                                                                              \
    /* xent_backward's rounding, then scale_rows's: the unfused pieces' bits */                 \
    static void FMT##_xent_loss_backward(                                                          \
        tr_stream s, float *losses, float *dlogits, const float *logits, const float *maxv,        \
        const float *sumexp, const float *picked, const int32_t *targets, const float *weights,    \
        int N, int V, int n_valid, int v_start, float scale)                                       \
    {                                                                                              \
        tr_kernels_cpu()->xent_loss_backward(s, losses, dlogits, logits, maxv, sumexp, picked,     \
                                             targets, NULL, N, V, n_valid, v_start, scale);        \
        if (scale == 0.0f)                                                                         \
            return;                                                                                \
        round_##FMT##_n(dlogits, (size_t)N * V);                                                   \
        if (weights)                                                                               \
            FMT##_scale_rows(s, dlogits, weights, N, V);                                           \
    }                                                                                              \
    static void FMT##_embedding_forward(tr_stream s, float *out, const int32_t *ids,               \
                                        const float *table, int N, int C, int v_start, int V)      \
    {                                                                                              \
        tr_kernels_cpu()->embedding_forward(s, out, ids, table, N, C, v_start, V);                 \
        round_##FMT##_n(out, (size_t)N * C); /* = the rounded table's rows */                      \
    }                                                                                              \
    static void FMT##_embedding_backward(tr_stream s, float *dtable, const float *dout,            \
                                         const int32_t *ids, int N, int C, int v_start, int V)     \
    {                                                                                              \
        tr_kernels_cpu()->embedding_backward(s, dtable, dout, ids, N, C, v_start, V);              \
        round_##FMT##_n(dtable, (size_t)V * C);                                                    \
    }                                                                                              \
    static void FMT##_scatter_add_rows(tr_stream s, float *out, const float *src,                  \
                                       const int32_t *idx, const float *w, int M, int C)           \
    {                                                                                              \
        tr_kernels_cpu()->scatter_add_rows(s, out, src, idx, w, M, C);                             \
        for (int i = 0; i < M; i++) /* the rows it wrote (a row rounded twice: the same) */       \
            round_##FMT##_n(out + (size_t)idx[i] * C, (size_t)C);                                  \
    }                                                                                              \
    static void FMT##_scatter_add_rows_backward(tr_stream s, float *dsrc, float *dw,               \
                                                const float *dout, const float *src,               \
                                                const int32_t *idx, const float *w, int M, int C)  \
    {                                                                                              \
        tr_kernels_cpu()->scatter_add_rows_backward(s, dsrc, dw, dout, src, idx, w, M, C);         \
        round_##FMT##_n(dsrc, (size_t)M * C); /* dw: the router's, fp32 */                        \
    }                                                                                              \
    static void FMT##_position_forward(tr_stream s, float *out, const float *wpe, int B, int T,    \
                                       int C)                                                      \
    {                                                                                              \
        tr_kernels_cpu()->position_forward(s, out, staged(0, wpe, (size_t)T * C, round_##FMT##_n), \
                                       B, T, C);                                                   \
        round_##FMT##_n(out, (size_t)B * T * C);                                                   \
    }                                                                                              \
    static void FMT##_position_backward(tr_stream s, float *dwpe, const float *dout, int B,        \
                                        int T, int C)                                              \
    {                                                                                              \
        tr_kernels_cpu()->position_backward(s, dwpe, dout, B, T, C);                               \
        round_##FMT##_n(dwpe, (size_t)T * C);                                                      \
    }

ROUNDED_TABLE(bf16)
ROUNDED_TABLE(fp16)

/* The fp32 table with the wrappers above in place of its ops (the rest: memory, the
 * statistics of the cross-entropy, generation, the optimizer, the norm, are the fp32 ones). */
#define FILL(t, FMT)                                                                               \
    do {                                                                                           \
        t.gemm = FMT##_gemm, t.add = FMT##_add, t.axpy = FMT##_axpy, t.scale = FMT##_scale;        \
        t.linear_forward = NULL; /* the unfused pieces above: gemm, then bias_add */              \
        t.linear_backward = NULL;                                                                  \
        t.scale_rows = FMT##_scale_rows, t.bias_add = FMT##_bias_add;                              \
        t.bias_backward = FMT##_bias_backward, t.layernorm_forward = FMT##_layernorm_forward;      \
        t.layernorm_backward = FMT##_layernorm_backward, t.gelu_forward = FMT##_gelu_forward;      \
        t.gelu_backward = FMT##_gelu_backward;                                                     \
        t.gelu_exact_forward = FMT##_gelu_exact_forward;                                           \
        t.gelu_exact_backward = FMT##_gelu_exact_backward;                                         \
        if (t.relu_forward)                                                                        \
            t.relu_forward = FMT##_relu_forward, t.relu_backward = FMT##_relu_backward;            \
        t.attention_forward = FMT##_attention_forward;                                             \
        t.attention_backward = FMT##_attention_backward;                                           \
        if (t.rmsnorm_forward)                                                                     \
            t.rmsnorm_forward = FMT##_rmsnorm_forward,                                             \
            t.rmsnorm_backward = FMT##_rmsnorm_backward;                                           \
        if (t.swiglu_forward)                                                                      \
            t.swiglu_forward = FMT##_swiglu_forward, t.swiglu_backward = FMT##_swiglu_backward;    \
        if (t.geglu_forward)                                                                       \
            t.geglu_forward = FMT##_geglu_forward, t.geglu_backward = FMT##_geglu_backward;        \
        if (t.rope)                                                                                \
            t.rope = FMT##_rope;                                                                   \
        if (t.attention_gqa_forward)                                                               \
            t.attention_gqa_forward = FMT##_attention_gqa_forward,                                 \
            t.attention_gqa_backward = FMT##_attention_gqa_backward;                               \
        if (t.dropout)                                                                             \
            t.dropout = FMT##_dropout,                                                             \
            t.attention_gqa_dropout_forward = FMT##_attention_gqa_dropout_forward,                 \
            t.attention_gqa_dropout_backward = FMT##_attention_gqa_dropout_backward;               \
        t.xent_backward = FMT##_xent_backward;                                                     \
        t.xent_loss_backward = FMT##_xent_loss_backward;                                           \
        t.embedding_forward = FMT##_embedding_forward;                                             \
        t.embedding_backward = FMT##_embedding_backward;                                           \
        t.position_forward = FMT##_position_forward;                                               \
        t.position_backward = FMT##_position_backward;                                             \
        t.scatter_add_rows = FMT##_scatter_add_rows;                                               \
        t.scatter_add_rows_backward = FMT##_scatter_add_rows_backward;                             \
    } while (0)

static tr_kernels bf16_table, fp16_table;

static void make_tables(void)
{
    bf16_table = *tr_kernels_cpu();
    bf16_table.name = "cpu-bf16";
    FILL(bf16_table, bf16);
    cpu_bf16_storage_fill(&bf16_table); /* bf16 storage, as the CUDA bf16 mode's */
    fp16_table = *tr_kernels_cpu();
    fp16_table.name = "cpu-fp16";
    FILL(fp16_table, fp16);
}

const tr_kernels *tr_kernels_cpu_rounded(const char *format)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, make_tables);
    if (format && !strcmp(format, "bf16"))
        return &bf16_table;
    if (format && !strcmp(format, "fp16"))
        return &fp16_table;
    return NULL;
}
