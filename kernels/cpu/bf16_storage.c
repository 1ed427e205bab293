/* The bf16-storage ops of "cpu-bf16" (kernels.h: the chunked head's gemm_out16, gemm_a16,
 * xent_stats16, xent_loss_backward16 and the two in one, xent_stats_loss_backward16; the layers'
 * GEMM inputs' gelu_forward16 (and the exact GELU's and ReLU's), layernorm_forward16,
 * rmsnorm_forward16, gemm_b16; the backward's gelu_backward16 (likewise) and the linear_backward
 * that reads its output), the twin of the CUDA bf16 mode's: each widens its bf16 input into a
 * staging buffer (exact), runs the table's own fp32-storage op, whose outputs are already
 * rounded to bf16, and packs the kept result back (exact again). So bf16 storage gives
 * "cpu-bf16"'s bits; what it tests is the path: the halved buffers, the strides, the aliasing of
 * logits and their gradient. Staging is per thread, grown as needed (out of memory: the op
 * leaves its output untouched and says so on stderr, once). The attention output's
 * attention_forward16 / _gqa_forward16 and their backwards (kernels.h) likewise, and
 * attention_forward_qkv16 / _backward_qkv16, which read qkv in bf16 too. */
#include "kernels/cpu/cpu_ops.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/cuda/bf16.h"

typedef struct {
    float *p;
    size_t cap;
} wide_staging;
static _Thread_local wide_staging wide;

static const tr_kernels *table; /* "cpu-bf16": the fp32-storage ops wrapped here */

/* a thread's staging is freed when it ends (a key whose value is the staging, once grown) */
static pthread_key_t wide_key;
static pthread_once_t wide_key_once = PTHREAD_ONCE_INIT;

static void wide_free(void *staging)
{
    wide_staging *w = staging;
    free(w->p), w->p = NULL, w->cap = 0;
}

static void wide_key_make(void) { (void)pthread_key_create(&wide_key, wide_free); }

static float *wide_buffer(size_t n)
{
    if (wide.cap < n || !wide.p) { /* (n 0: still a buffer, never a NULL that means "no") */
        float *p = realloc(wide.p, (n ? n : 1) * sizeof(float));
        if (!p) {
            static int told;
            if (!told++)
                fprintf(stderr, "cpu-bf16: out of memory for a %zu-float bf16 staging\n", n);
            return NULL;
        }
        wide.p = p, wide.cap = n;
        pthread_once(&wide_key_once, wide_key_make);
        (void)pthread_setspecific(wide_key, &wide);
    }
    return wide.p;
}

void cpu_bf16_narrow(uint16_t *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = bf16_from_f32(src[i]);
}

void cpu_bf16_widen(float *dst, const uint16_t *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = bf16_to_f32(src[i]);
}

/* rows x cols of a bf16 matrix (row stride ld) widened into the staging buffer, the same
 * stride; NULL when out of memory */
static float *widened(const uint16_t *src, int rows, int cols, int ld)
{
    float *dst = wide_buffer(rows > 0 ? (size_t)rows * ld : 0);
    for (int i = 0; dst && i < rows; i++)
        cpu_bf16_widen(dst + (size_t)i * ld, src + (size_t)i * ld, (size_t)cols);
    return dst;
}

static void s16_gemm_out16(tr_stream s, int ta, int tb, int M, int N, int K, float alpha,
                              const float *A, int lda, const float *B, int ldb, uint16_t *C16,
                              int ldc)
{
    float *c = wide_buffer(M > 0 ? (size_t)M * ldc : 0);
    if (!c)
        return;
    table->gemm(s, ta, tb, M, N, K, alpha, A, lda, B, ldb, 0.0f, c, ldc);
    for (int i = 0; i < M; i++) /* row by row: the stride may exceed N */
        cpu_bf16_narrow(C16 + (size_t)i * ldc, c + (size_t)i * ldc, (size_t)N);
}

static void s16_gemm_a16(tr_stream s, int ta, int tb, int M, int N, int K, float alpha,
                            const uint16_t *A16, int lda, const float *B, int ldb, float beta,
                            float *C, int ldc)
{
    int rows = ta ? K : M, cols = ta ? M : K; /* A as stored */
    float *a = widened(A16, rows, cols, lda);
    if (!a)
        return;
    table->gemm(s, ta, tb, M, N, K, alpha, a, lda, B, ldb, beta, C, ldc);
}

static void s16_xent_stats16(tr_stream s, float *maxv, float *sumexp, float *picked,
                                const uint16_t *logits16, const int32_t *targets, int N, int V,
                                int n_valid, int v_start)
{
    float *x = widened(logits16, N, V, V);
    if (!x)
        return;
    table->xent_stats(s, maxv, sumexp, picked, x, targets, N, V, n_valid, v_start);
}

static void s16_xent_loss_backward16(tr_stream s, float *losses, uint16_t *dlogits16,
                                        const uint16_t *logits16, const float *maxv,
                                        const float *sumexp, const float *picked,
                                        const int32_t *targets, const float *weights, int N,
                                        int V, int n_valid, int v_start, float scale)
{
    float *x = widened(logits16, N, V, V);
    if (!x)
        return;
    table->xent_loss_backward(s, losses, x, x, maxv, sumexp, picked, targets, weights, N, V,
                              n_valid, v_start, scale);
    if (scale != 0.0f)
        cpu_bf16_narrow(dlogits16, x, (size_t)N * V);
}

static void s16_xent_stats_loss_backward16(tr_stream s, float *losses, float *maxv,
                                           float *sumexp, float *picked, uint16_t *logits16,
                                           const int32_t *targets, const float *weights, int N,
                                           int V, int n_valid, int v_start, float scale)
{
    s16_xent_stats16(s, maxv, sumexp, picked, logits16, targets, N, V, n_valid, v_start);
    s16_xent_loss_backward16(s, losses, logits16, logits16, maxv, sumexp, picked, targets,
                             weights, N, V, n_valid, v_start, scale);
}

static void s16_narrow16(tr_stream s, uint16_t *dst16, const float *src, size_t n)
{
    (void)s;
    cpu_bf16_narrow(dst16, src, n);
}

/* the table's gemm on the bf16 operands widened side by side in the staging (A, B, then a
 * bf16 C's fp32 result), C16 narrowed from the rounded result (exact) */
static void s16_gemm_mixed16(tr_stream s, int ta, int tb, int M, int N, int K, float alpha,
                             const float *A, const uint16_t *A16, int lda, const float *B,
                             const uint16_t *B16, int ldb, float beta, float *C, uint16_t *C16,
                             int ldc)
{
    int ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N; /* as stored */
    size_t na = A16 && ar > 0 ? (size_t)ar * lda : 0, nb = B16 && br > 0 ? (size_t)br * ldb : 0;
    size_t nc = C16 && M > 0 ? (size_t)M * ldc : 0;
    float *w = wide_buffer(na + nb + nc);
    if (!w)
        return;
    for (int i = 0; A16 && i < ar; i++)
        cpu_bf16_widen(w + (size_t)i * lda, A16 + (size_t)i * lda, (size_t)ac);
    for (int i = 0; B16 && i < br; i++)
        cpu_bf16_widen(w + na + (size_t)i * ldb, B16 + (size_t)i * ldb, (size_t)bc);
    float *c = C16 ? w + na + nb : C;
    table->gemm(s, ta, tb, M, N, K, alpha, A16 ? w : A, lda, B16 ? w + na : B, ldb,
                C16 ? 0.0f : beta, c, ldc);
    for (int i = 0; C16 && i < M; i++) /* row by row: the stride may exceed N */
        cpu_bf16_narrow(C16 + (size_t)i * ldc, c + (size_t)i * ldc, (size_t)N);
}

/* n bf16 values widened into the staging from offset `at` (a second input beside another) */
static const float *widened_at(const uint16_t *src, size_t n, float *w, size_t at)
{
    cpu_bf16_widen(w + at, src, n);
    return w + at;
}


/* gelu_forward16 of the table's activation forward `gelu` (GELU tanh or exact, ReLU) */
static void gelu_forward16_of(tr_act_fn gelu, tr_stream s, uint16_t *out16,
                              const float *inp, const uint16_t *inp16, size_t n)
{
    float *y = wide_buffer(inp16 ? 2 * n : n); /* the output, then a bf16 input widened */
    if (!y)
        return;
    gelu(s, y, inp16 ? widened_at(inp16, n, y, n) : inp, n);
    cpu_bf16_narrow(out16, y, n);
}

static void s16_gelu_forward16(tr_stream s, uint16_t *out16, const float *inp,
                               const uint16_t *inp16, size_t n)
{
    gelu_forward16_of(table->gelu_forward, s, out16, inp, inp16, n);
}

static void s16_gelu_exact_forward16(tr_stream s, uint16_t *out16, const float *inp,
                                     const uint16_t *inp16, size_t n)
{
    gelu_forward16_of(table->gelu_exact_forward, s, out16, inp, inp16, n);
}

static void s16_relu_forward16(tr_stream s, uint16_t *out16, const float *inp,
                               const uint16_t *inp16, size_t n)
{
    gelu_forward16_of(table->relu_forward, s, out16, inp, inp16, n);
}

static void s16_layernorm_forward16(tr_stream s, uint16_t *out16, float *mean, float *rstd,
                                    const float *inp, const float *weight, const float *bias,
                                    int N, int C, float eps)
{
    size_t n = (size_t)N * C;
    float *y = wide_buffer(n);
    if (!y)
        return;
    table->layernorm_forward(s, y, mean, rstd, inp, weight, bias, N, C, eps);
    cpu_bf16_narrow(out16, y, n);
}

static void s16_rmsnorm_forward16(tr_stream s, uint16_t *out16, float *rstd, const float *inp,
                                  const float *weight, int N, int C, float eps)
{
    size_t n = (size_t)N * C;
    float *y = wide_buffer(n);
    if (!y)
        return;
    table->rmsnorm_forward(s, y, rstd, inp, weight, N, C, eps);
    cpu_bf16_narrow(out16, y, n);
}

/* The attention output (B*T rows of NH*HS), the attention projection's input: forward into the
 * staging and narrowed; backward on out16 widened (the row sums rowsum(dout * out) read it). */
static void s16_attention_forward16(tr_stream s, uint16_t *out16, float *lse, const float *qkv,
                                    int B, int T, int NH, int HS, const int32_t *segments)
{
    size_t n = (size_t)B * T * NH * HS;
    float *y = wide_buffer(n);
    if (!y)
        return;
    table->attention_forward(s, y, lse, qkv, B, T, NH, HS, segments);
    cpu_bf16_narrow(out16, y, n);
}

static void s16_attention_backward16(tr_stream s, float *dqkv, float *scratch, const float *dout,
                                     const float *qkv, const uint16_t *out16, const float *lse,
                                     int B, int T, int NH, int HS, const int32_t *segments)
{
    float *o = widened(out16, B * T, NH * HS, NH * HS);
    if (!o)
        return;
    table->attention_backward(s, dqkv, scratch, dout, qkv, o, lse, B, T, NH, HS, segments);
}

static void s16_attention_gqa_forward16(tr_stream s, uint16_t *out16, float *lse,
                                        const float *qkv, const float *alibi, int B, int T,
                                        int NH, int NG, int HS, const int32_t *segments)
{
    size_t n = (size_t)B * T * NH * HS;
    float *y = wide_buffer(n);
    if (!y)
        return;
    table->attention_gqa_forward(s, y, lse, qkv, alibi, B, T, NH, NG, HS, segments);
    cpu_bf16_narrow(out16, y, n);
}

static void s16_attention_gqa_backward16(tr_stream s, float *dqkv, float *scratch,
                                         const float *dout, const float *qkv,
                                         const uint16_t *out16, const float *lse,
                                         const float *alibi, int B, int T, int NH, int NG, int HS,
                                         const int32_t *segments)
{
    float *o = widened(out16, B * T, NH * HS, NH * HS);
    if (!o)
        return;
    table->attention_gqa_backward(s, dqkv, scratch, dout, qkv, o, lse, alibi, B, T, NH, NG, HS,
                                  segments);
}

/* The attention's input qkv in bf16 too (attention_forward_qkv16 / _backward_qkv16): qkv16
 * widened beside the output (forward) or the widened output (backward) in the staging, then the
 * table's attention_gqa_ op, which GPT-2's layout is with NG = NH and no ALiBi; the backward's
 * dqkv (rounded by it) into the staging too and narrowed into dqkv16. */
static void s16_attention_forward_qkv16(tr_stream s, uint16_t *out16, float *lse,
                                        const uint16_t *qkv16, const float *alibi, int B, int T,
                                        int NH, int NG, int HS, const int32_t *segments)
{
    size_t no = (size_t)B * T * NH * HS, nq = (size_t)B * T * NG * (NH / NG + 2) * HS;
    float *y = wide_buffer(no + nq);
    if (!y)
        return;
    table->attention_gqa_forward(s, y, lse, widened_at(qkv16, nq, y, no), alibi, B, T, NH, NG,
                                 HS, segments);
    cpu_bf16_narrow(out16, y, no);
}

static void s16_attention_backward_qkv16(tr_stream s, uint16_t *dqkv16, float *scratch,
                                         const uint16_t *dout16, const uint16_t *qkv16,
                                         const uint16_t *out16, const float *lse,
                                         const float *alibi, int B, int T, int NH, int NG, int HS,
                                         const int32_t *segments)
{
    size_t no = (size_t)B * T * NH * HS, nq = (size_t)B * T * NG * (NH / NG + 2) * HS;
    float *w = wide_buffer(2 * no + 2 * nq); /* the output, qkv, dqkv, then dout */
    if (!w)
        return;
    const float *o = widened_at(out16, no, w, 0), *qkv = widened_at(qkv16, nq, w, no);
    float *dqkv = w + no + nq;
    const float *dout = widened_at(dout16, no, w, no + 2 * nq);
    table->attention_gqa_backward(s, dqkv, scratch, dout, qkv, o, lse, alibi, B, T, NH, NG, HS,
                                  segments);
    cpu_bf16_narrow(dqkv16, dqkv, nq);
}

static void s16_gemm_b16(tr_stream s, int ta, int tb, int M, int N, int K, float alpha,
                            const float *A, int lda, const uint16_t *B16, int ldb, float beta,
                            float *C, int ldc)
{
    int rows = tb ? N : K, cols = tb ? K : N; /* B as stored */
    float *b = widened(B16, rows, cols, ldb);
    if (!b)
        return;
    table->gemm(s, ta, tb, M, N, K, alpha, A, lda, b, ldb, beta, C, ldc);
}

/* kernels.h's linear_forward as the unfused pieces of the model's fallback (copy of the
 * residual, the table's gemm, bias_add), its bf16 input widened, its bf16 output (fc's: y16)
 * narrowed from the rounded result (exact) */
static void s16_linear_forward(tr_stream s, float *y, uint16_t *y16, const float *x,
                               const uint16_t *x16, const float *W, const float *b,
                               const float *residual, int N, int IC, int OC)
{
    size_t ny = y16 ? (size_t)N * OC : 0, nx = x16 ? (size_t)N * IC : 0;
    float *w = wide_buffer(ny + nx);
    if (!w)
        return;
    float *out = y16 ? w : y;
    const float *in = x16 ? widened_at(x16, nx, w, ny) : x;
    if (residual && residual != out)
        table->copy(s, out, residual, (size_t)N * OC * sizeof(float));
    table->gemm(s, 0, 1, N, OC, IC, 1.0f, in, IC, W, IC, residual ? 1.0f : 0.0f, out, OC);
    if (b)
        table->bias_add(s, out, b, N, OC);
    if (y16)
        cpu_bf16_narrow(y16, out, ny);
}

/* fc's backward on the GELU's bf16 input gradient, QKV's on the attention's: the unfused pieces
 * of kernels.h's linear_backward (the table's gemm twice, bias_backward of the widened dy16),
 * its bf16 inputs widened side by side in the staging (dy first, then x, then a bf16 dx) */
static void s16_linear_backward(tr_stream s, float *dx, uint16_t *dx16, float *dW, float *db,
                                const float *dy, const uint16_t *dy16, const float *x,
                                const uint16_t *x16, const float *W, int N, int IC, int OC)
{
    size_t ny = dy16 ? (size_t)N * OC : 0, nx = x16 ? (size_t)N * IC : 0;
    size_t nd = dx16 ? (size_t)N * IC : 0; /* (then dy, x, dx side by side) */
    float *w = wide_buffer(ny + nx + nd);
    if (!w)
        return;
    const float *g = dy16 ? widened_at(dy16, ny, w, 0) : dy;
    const float *in = x16 ? widened_at(x16, nx, w, ny) : x;
    float *d = dx16 ? w + ny + nx : dx;
    table->gemm(s, 0, 0, N, IC, OC, 1.0f, g, OC, W, IC, 0.0f, d, IC);
    if (dx16) /* (exact: the table's gemm rounded it) */
        cpu_bf16_narrow(dx16, d, nd);
    table->gemm(s, 1, 0, OC, IC, N, 1.0f, g, OC, in, IC, 1.0f, dW, IC);
    if (db)
        table->bias_backward(s, db, g, N, OC);
}

/* gelu_backward16 of the table's activation backward `gelu` (GELU tanh or exact, ReLU) */
static void gelu_backward16_of(tr_act_backward_fn gelu, tr_stream s, uint16_t *dinp16,
                               float *dbias, const float *inp, const uint16_t *inp16,
                               const float *dout, const uint16_t *dout16, int N, int C)
{
    size_t n = (size_t)N * C;
    /* the gradient, then the bf16 inputs widened */
    float *d = wide_buffer(n + (inp16 ? n : 0) + (dout16 ? n : 0));
    if (!d)
        return;
    const float *x = inp16 ? widened_at(inp16, n, d, n) : inp;
    const float *g = dout16 ? widened_at(dout16, n, d, inp16 ? 2 * n : n) : dout;
    gelu(s, d, x, g, n);
    if (dbias)
        table->bias_backward(s, dbias, d, N, C);
    cpu_bf16_narrow(dinp16, d, n);
}

static void s16_gelu_backward16(tr_stream s, uint16_t *dinp16, float *dbias, const float *inp,
                                const uint16_t *inp16, const float *dout,
                                const uint16_t *dout16, int N, int C)
{
    gelu_backward16_of(table->gelu_backward, s, dinp16, dbias, inp, inp16, dout, dout16, N, C);
}

static void s16_gelu_exact_backward16(tr_stream s, uint16_t *dinp16, float *dbias,
                                      const float *inp, const uint16_t *inp16, const float *dout,
                                      const uint16_t *dout16, int N, int C)
{
    gelu_backward16_of(table->gelu_exact_backward, s, dinp16, dbias, inp, inp16, dout, dout16,
                       N, C);
}

static void s16_relu_backward16(tr_stream s, uint16_t *dinp16, float *dbias, const float *inp,
                                const uint16_t *inp16, const float *dout,
                                const uint16_t *dout16, int N, int C)
{
    gelu_backward16_of(table->relu_backward, s, dinp16, dbias, inp, inp16, dout, dout16, N, C);
}

static void s16_layernorm_backward16(tr_stream s, float *dinp, float *dweight, float *dbias,
                                     const uint16_t *dout16, const float *inp,
                                     const float *weight, const float *mean, const float *rstd,
                                     int N, int C)
{
    float *d = widened(dout16, N, C, C);
    if (d)
        table->layernorm_backward(s, dinp, dweight, dbias, d, inp, weight, mean, rstd, N, C);
}

static void s16_rmsnorm_backward16(tr_stream s, float *dinp, float *dweight,
                                   const uint16_t *dout16, const float *inp, const float *weight,
                                   const float *rstd, int N, int C)
{
    float *d = widened(dout16, N, C, C);
    if (d)
        table->rmsnorm_backward(s, dinp, dweight, d, inp, weight, rstd, N, C);
}

/* fc's forward and its GELU: the two ops the CUDA backend fuses, in turn */
static void s16_linear_gelu_forward16(tr_stream s, uint16_t *pre16, uint16_t *out16,
                                      const float *x, const uint16_t *x16, const float *W,
                                      const float *b, int N, int IC, int OC)
{
    s16_linear_forward(s, NULL, pre16, x, x16, W, b, NULL, N, IC, OC);
    s16_gelu_forward16(s, out16, NULL, pre16, (size_t)N * OC);
}

/* fc_proj's backward into dpre16, then the GELU's backward on it in place (the staging widens
 * its input first) */
static void s16_linear_backward_gelu16(tr_stream s, uint16_t *dpre16, float *dpre_bias,
                                       float *dW, float *db, const float *dy,
                                       const uint16_t *x16, const uint16_t *pre16,
                                       const float *W, int N, int IC, int OC)
{
    s16_linear_backward(s, NULL, dpre16, dW, db, dy, NULL, NULL, x16, W, N, IC, OC);
    s16_gelu_backward16(s, dpre16, dpre_bias, NULL, pre16, NULL, dpre16, N, IC);
}

void cpu_bf16_storage_fill(tr_kernels *t)
{
    table = t;
    t->gemm_out16 = s16_gemm_out16;
    t->gemm_a16 = s16_gemm_a16;
    t->xent_stats16 = s16_xent_stats16;
    t->xent_loss_backward16 = s16_xent_loss_backward16;
    t->xent_stats_loss_backward16 = s16_xent_stats_loss_backward16;
    t->narrow16 = s16_narrow16;
    t->gemm_mixed16 = s16_gemm_mixed16;
    if (t->attention_gqa_forward) /* (the CPU table has both layouts) */
        t->attention_gqa_forward16 = s16_attention_gqa_forward16,
        t->attention_gqa_backward16 = s16_attention_gqa_backward16,
        t->attention_forward_qkv16 = s16_attention_forward_qkv16,
        t->attention_backward_qkv16 = s16_attention_backward_qkv16;
    t->attention_forward16 = s16_attention_forward16;
    t->attention_backward16 = s16_attention_backward16;
    t->gelu_forward16 = s16_gelu_forward16;
    t->gemm_b16 = s16_gemm_b16;
    t->layernorm_forward16 = s16_layernorm_forward16;
    t->rmsnorm_forward16 = s16_rmsnorm_forward16;
    t->gelu_backward16 = s16_gelu_backward16;
    t->layernorm_backward16 = s16_layernorm_backward16;
    t->rmsnorm_backward16 = s16_rmsnorm_backward16;
    if (t->gelu_exact_forward && t->gelu_exact_backward)
        t->gelu_exact_forward16 = s16_gelu_exact_forward16,
        t->gelu_exact_backward16 = s16_gelu_exact_backward16;
    if (t->relu_forward && t->relu_backward)
        t->relu_forward16 = s16_relu_forward16, t->relu_backward16 = s16_relu_backward16;
    t->linear_gelu_forward16 = s16_linear_gelu_forward16;
    t->linear_backward_gelu16 = s16_linear_backward_gelu16;
    t->linear_backward = s16_linear_backward; /* it reads dy16 */
    t->linear_forward = s16_linear_forward;   /* it writes y16 */
}
