/* benchmarks/gpu_step: one GPU's training step of GPT-2 124M (12 layers, 768 hidden, 12 heads,
 * sequence 1024, vocabulary 50257 padded to 50304) on the CUDA table: forward, backward,
 * global gradient norm, AdamW, at the largest micro-batch that fits.
 *
 * The micro-batch: for each candidate (largest first) the activation memory is measured by
 * a dry run (the model's allocation requests through a table whose alloc only counts), the
 * budget (parameters, gradients, Adam, activations, workspace, 1 GiB reserved) is checked
 * against the free memory (tr_cuda_budget_check), and the first that fits is used; the
 * planner's estimate (plan/: Korthikanti et al.) is printed beside the measurement. Then
 * tr_cuda_reserve() makes one arena for all of it.
 *
 * Reports ms/iter (median), tokens/s, model TFLOP/s (PaLM: 6N + 12 l h s per token) and
 * MFU against the GPU's dense bf16 peak (H100 SXM / H200 989 TFLOP/s, H100 PCIe 756, A100
 * 312, or --peak-tflops). --json prints one JSON object (benchmarks/gpu_step.sh reads it).
 * --profile then runs 2 more steps with every op of the table timed on its own (synchronise,
 * call, synchronise): the per-op split of a step (GEMMs of the LM head apart from the
 * others, with their TFLOP/s), which says where the time goes when the step is slow.
 *   gpu_step [--precision bf16|fp32] [--micro-batch B] [--iters N] [--warmup W] [--seq T]
 *            [--layers L] [--hidden C] [--heads NH] [--vocab V] [--peak-tflops P] [--json]
 *            [--profile]
 * Exit 77 (with the reason) where no GPU is usable. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "kernels/cuda/cuda.h"
#include "model/gpt.h"
#include "plan/plan.h"

/* ---------------------------------------------------------------- dry run */

static size_t requests[256];
static int n_requests;
static uintptr_t fake_next = 1u << 20;

/* Counts; returns distinct, never dereferenced addresses (the model only carves views). */
static void *counting_alloc(size_t bytes)
{
    if (n_requests < 256)
        requests[n_requests++] = bytes;
    void *p = (void *)fake_next;
    fake_next += (bytes + 4095) & ~(size_t)4095;
    return p;
}

static void counting_free(void *p) { (void)p; }

/* Bytes of one activation slot + the shared scratch for micro-batch B (arena-rounded). */
static size_t measure_activations(const tr_kernels *k, const tr_gpt_shape *s, int B)
{
    tr_kernels counting = *k;
    counting.alloc = counting_alloc;
    counting.free = counting_free;
    tr_gpt *g = NULL;
    tr_gpt_acts *a = NULL;
    n_requests = 0;
    if (tr_gpt_create(s, &counting, NULL, &g) || tr_gpt_acts_create(g, B, &a)) {
        fprintf(stderr, "gpu_step: dry run: %s\n", tr_errmsg());
        exit(1);
    }
    size_t bytes = tr_arena_bytes_for(requests, (size_t)n_requests, 256);
    tr_gpt_acts_free(a);
    tr_gpt_free(g);
    return bytes;
}

/* ---------------------------------------------------------------- per-op profile */

/* A copy of the table whose ops time themselves while prof_on: each call is bracketed by
 * synchronisations (so launch gaps are charged to the op that follows them); otherwise they
 * only pass the call on. */
enum {
    OP_GEMM_HEAD, OP_GEMM, OP_TO_DEVICE, OP_TO_HOST, OP_COPY, OP_ZERO, OP_ADD, OP_AXPY,
    OP_SCALE, OP_BIAS_ADD, OP_BIAS_BACKWARD, OP_LN_FORWARD, OP_LN_BACKWARD, OP_GELU_FORWARD,
    OP_GELU_BACKWARD, OP_ATTN_FORWARD, OP_ATTN_BACKWARD, OP_XENT_ROW_MAX, OP_XENT_ROW_SUMEXP,
    OP_XENT_PICK, OP_XENT_LOSS, OP_XENT_BACKWARD, OP_XENT_STATS, OP_XENT_RESCALE,
    OP_XENT_LOSS_BACKWARD, OP_EMB_FORWARD, OP_EMB_BACKWARD,
    OP_POS_FORWARD, OP_POS_BACKWARD, OP_ADAMW, OP_SUMSQ, OP_LINEAR, OP_GEMM_OUT16,
    OP_GEMM_A16, OP_XENT_STATS16, OP_XENT_LOSS_BACKWARD16, OP_GELU_FORWARD16, OP_GEMM_B16,
    OP_LINEAR_BACKWARD, OP_LN_FORWARD16, OP_RMS_FORWARD16, OP_GELU_BACKWARD16,
    OP_XENT_FUSED16, OP_NARROW16, OP_GEMM_MIXED16, OP_LN_BACKWARD16, OP_RMS_BACKWARD16,
    OP_LINEAR_GELU, OP_LINEAR_BACKWARD_GELU, N_OPS
};
static const char *const op_names[N_OPS] = {
    "gemm (LM head)", "gemm (layers)", "to_device", "to_host", "copy", "zero", "add", "axpy",
    "scale", "bias_add", "bias_backward", "layernorm_forward", "layernorm_backward",
    "gelu_forward", "gelu_backward", "attention_forward", "attention_backward", "xent_row_max",
    "xent_row_sumexp", "xent_pick", "xent_loss", "xent_backward", "xent_stats", "xent_rescale",
    "xent_loss_backward", "embedding_forward",
    "embedding_backward", "position_forward", "position_backward", "adamw", "sumsq",
    "gemm (layers) + bias", "gemm (LM head) bf16 out", "gemm (LM head) bf16 in",
    "xent_stats16", "xent_loss_backward16", "gelu_forward16", "gemm (layers) bf16 B",
    "gemm (layers) backward pair", "layernorm_forward16", "rmsnorm_forward16",
    "gelu_backward16", "xent_stats_loss_backward16", "gemm (LM head) weight to bf16",
    "gemm (LM head) bf16 weight", "layernorm_backward16", "rmsnorm_backward16",
    "gemm (layers) + GELU", "gemm (layers) backward pair + dGELU"};
static tr_kernels base;
static int prof_on, prof_vp;
static double prof_ms[N_OPS], prof_flops[N_OPS];
static long prof_calls[N_OPS];

#define PROF_BEGIN                                                                            \
    double t0_ = 0;                                                                           \
    if (prof_on) {                                                                            \
        base.synchronize(s);                                                                  \
        t0_ = tr_now();                                                                       \
    }
#define PROF_END(op)                                                                          \
    if (prof_on) {                                                                            \
        base.synchronize(s);                                                                  \
        prof_ms[op] += (tr_now() - t0_) * 1e3;                                                \
        prof_calls[op]++;                                                                     \
    }
#define WRAP(op, fn, params, args)                                                            \
    static void p_##fn params                                                                 \
    {                                                                                         \
        PROF_BEGIN base.fn args;                                                              \
        PROF_END(op)                                                                          \
    }

static void p_gemm(tr_stream s, int ta, int tb, int M, int N, int K, float alpha, const float *A,
                   int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    int op = (M == prof_vp || N == prof_vp || K == prof_vp) ? OP_GEMM_HEAD : OP_GEMM;
    PROF_BEGIN base.gemm(s, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    PROF_END(op)
    if (prof_on)
        prof_flops[op] += 2.0 * M * N * K;
}
/* the optional fused and bf16-storage ops (kernels.h), wrapped where the table has them */
static void p_linear_forward(tr_stream s, float *y, uint16_t *y16, const float *x,
                             const uint16_t *x16, const float *W, const float *b, const float *r,
                             int N, int IC, int OC)
{
    PROF_BEGIN base.linear_forward(s, y, y16, x, x16, W, b, r, N, IC, OC);
    PROF_END(OP_LINEAR)
    if (prof_on)
        prof_flops[OP_LINEAR] += 2.0 * N * IC * OC;
}
static void p_linear_backward(tr_stream s, float *dx, uint16_t *dx16, float *dW, float *db,
                              const float *dy, const uint16_t *dy16, const float *x,
                              const uint16_t *x16, const float *W, int N, int IC, int OC)
{
    PROF_BEGIN base.linear_backward(s, dx, dx16, dW, db, dy, dy16, x, x16, W, N, IC, OC);
    PROF_END(OP_LINEAR_BACKWARD)
    if (prof_on)
        prof_flops[OP_LINEAR_BACKWARD] += 4.0 * N * IC * OC;
}
static void p_gemm_out16(tr_stream s, int ta, int tb, int M, int N, int K, float alpha,
                         const float *A, int lda, const float *B, int ldb, uint16_t *C, int ldc)
{
    PROF_BEGIN base.gemm_out16(s, ta, tb, M, N, K, alpha, A, lda, B, ldb, C, ldc);
    PROF_END(OP_GEMM_OUT16)
    if (prof_on)
        prof_flops[OP_GEMM_OUT16] += 2.0 * M * N * K;
}
static void p_gemm_a16(tr_stream s, int ta, int tb, int M, int N, int K, float alpha,
                       const uint16_t *A, int lda, const float *B, int ldb, float beta, float *C,
                       int ldc)
{
    /* the head's (its vocabulary-wide dimension) or fc_proj's forward (the layers') */
    int op = (M == prof_vp || N == prof_vp || K == prof_vp) ? OP_GEMM_A16 : OP_GEMM;
    PROF_BEGIN base.gemm_a16(s, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    PROF_END(op)
    if (prof_on)
        prof_flops[op] += 2.0 * M * N * K;
}
static void p_gemm_mixed16(tr_stream s, int ta, int tb, int M, int N, int K, float alpha,
                           const float *A, const uint16_t *A16, int lda, const float *B,
                           const uint16_t *B16, int ldb, float beta, float *C, uint16_t *C16,
                           int ldc)
{
    /* the head's (its vocabulary-wide dimension), else the layers' */
    int op = (M == prof_vp || N == prof_vp || K == prof_vp) ? OP_GEMM_MIXED16 : OP_GEMM;
    PROF_BEGIN base.gemm_mixed16(s, ta, tb, M, N, K, alpha, A, A16, lda, B, B16, ldb, beta, C,
                                 C16, ldc);
    PROF_END(op)
    if (prof_on)
        prof_flops[op] += 2.0 * M * N * K;
}
static void p_linear_gelu_forward16(tr_stream s, uint16_t *pre16, uint16_t *out16,
                                    const float *x, const uint16_t *x16, const float *W,
                                    const float *b, int N, int IC, int OC)
{
    PROF_BEGIN base.linear_gelu_forward16(s, pre16, out16, x, x16, W, b, N, IC, OC);
    PROF_END(OP_LINEAR_GELU)
    if (prof_on)
        prof_flops[OP_LINEAR_GELU] += 2.0 * N * IC * OC;
}
static void p_linear_backward_gelu16(tr_stream s, uint16_t *dpre16, float *dpre_bias, float *dW,
                                     float *db, const float *dy, const uint16_t *x16,
                                     const uint16_t *pre16, const float *W, int N, int IC,
                                     int OC)
{
    PROF_BEGIN base.linear_backward_gelu16(s, dpre16, dpre_bias, dW, db, dy, x16, pre16, W, N, IC,
                                           OC);
    PROF_END(OP_LINEAR_BACKWARD_GELU)
    if (prof_on)
        prof_flops[OP_LINEAR_BACKWARD_GELU] += 4.0 * N * IC * OC;
}
static void p_gemm_b16(tr_stream s, int ta, int tb, int M, int N, int K, float alpha,
                       const float *A, int lda, const uint16_t *B, int ldb, float beta, float *C,
                       int ldc)
{
    PROF_BEGIN base.gemm_b16(s, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    PROF_END(OP_GEMM_B16)
    if (prof_on)
        prof_flops[OP_GEMM_B16] += 2.0 * M * N * K;
}
WRAP(OP_GELU_FORWARD16, gelu_forward16,
     (tr_stream s, uint16_t *o, const float *x, const uint16_t *x16, size_t n), (s, o, x, x16, n))
WRAP(OP_LN_FORWARD16, layernorm_forward16,
     (tr_stream s, uint16_t *o, float *m, float *r, const float *x, const float *w,
      const float *b, int N, int C, float eps),
     (s, o, m, r, x, w, b, N, C, eps))
WRAP(OP_RMS_FORWARD16, rmsnorm_forward16,
     (tr_stream s, uint16_t *o, float *r, const float *x, const float *w, int N, int C,
      float eps),
     (s, o, r, x, w, N, C, eps))
WRAP(OP_XENT_STATS16, xent_stats16,
     (tr_stream s, float *m, float *se, float *pk, const uint16_t *l, const int32_t *t, int N,
      int V, int nv, int v0),
     (s, m, se, pk, l, t, N, V, nv, v0))
WRAP(OP_XENT_LOSS_BACKWARD16, xent_loss_backward16,
     (tr_stream s, float *ls, uint16_t *dl, const uint16_t *l, const float *m, const float *se,
      const float *pk, const int32_t *t, const float *w, int N, int V, int nv, int v0,
      float sc),
     (s, ls, dl, l, m, se, pk, t, w, N, V, nv, v0, sc))
WRAP(OP_TO_DEVICE, to_device, (tr_stream s, void *d, const void *h, size_t n), (s, d, h, n))
WRAP(OP_TO_HOST, to_host, (tr_stream s, void *h, const void *d, size_t n), (s, h, d, n))
WRAP(OP_COPY, copy, (tr_stream s, void *d, const void *x, size_t n), (s, d, x, n))
WRAP(OP_ZERO, zero, (tr_stream s, void *d, size_t n), (s, d, n))
WRAP(OP_ADD, add, (tr_stream s, float *o, const float *a, const float *b, size_t n),
     (s, o, a, b, n))
WRAP(OP_AXPY, axpy, (tr_stream s, float *y, float a, const float *x, size_t n), (s, y, a, x, n))
WRAP(OP_SCALE, scale, (tr_stream s, float *x, float a, size_t n), (s, x, a, n))
WRAP(OP_BIAS_ADD, bias_add, (tr_stream s, float *o, const float *b, int N, int C),
     (s, o, b, N, C))
WRAP(OP_BIAS_BACKWARD, bias_backward, (tr_stream s, float *db, const float *d, int N, int C),
     (s, db, d, N, C))
WRAP(OP_LN_FORWARD, layernorm_forward,
     (tr_stream s, float *o, float *mean, float *rstd, const float *x, const float *w,
      const float *b, int N, int C, float eps),
     (s, o, mean, rstd, x, w, b, N, C, eps))
WRAP(OP_LN_BACKWARD, layernorm_backward,
     (tr_stream s, float *dx, float *dw, float *db, const float *d, const float *x,
      const float *w, const float *mean, const float *rstd, int N, int C),
     (s, dx, dw, db, d, x, w, mean, rstd, N, C))
WRAP(OP_GELU_FORWARD, gelu_forward, (tr_stream s, float *o, const float *x, size_t n),
     (s, o, x, n))
WRAP(OP_GELU_BACKWARD, gelu_backward,
     (tr_stream s, float *dx, const float *x, const float *d, size_t n), (s, dx, x, d, n))
WRAP(OP_GELU_BACKWARD16, gelu_backward16,
     (tr_stream s, uint16_t *dx16, float *db, const float *x, const uint16_t *x16, const float *d,
      const uint16_t *d16, int N, int C),
     (s, dx16, db, x, x16, d, d16, N, C))
WRAP(OP_ATTN_FORWARD, attention_forward,
     (tr_stream s, float *o, float *lse, const float *qkv, int B, int T, int NH, int HS,
      const int32_t *seg),
     (s, o, lse, qkv, B, T, NH, HS, seg))
WRAP(OP_ATTN_BACKWARD, attention_backward,
     (tr_stream s, float *dqkv, float *scratch, const float *d, const float *qkv, const float *o,
      const float *lse, int B, int T, int NH, int HS, const int32_t *seg),
     (s, dqkv, scratch, d, qkv, o, lse, B, T, NH, HS, seg))
/* the attention output in bf16 storage: the same kernels, charged to the same two lines */
WRAP(OP_ATTN_FORWARD, attention_forward16,
     (tr_stream s, uint16_t *o16, float *lse, const float *qkv, int B, int T, int NH, int HS,
      const int32_t *seg),
     (s, o16, lse, qkv, B, T, NH, HS, seg))
WRAP(OP_ATTN_BACKWARD, attention_backward16,
     (tr_stream s, float *dqkv, float *scratch, const float *d, const float *qkv,
      const uint16_t *o16, const float *lse, int B, int T, int NH, int HS, const int32_t *seg),
     (s, dqkv, scratch, d, qkv, o16, lse, B, T, NH, HS, seg))
/* ... and with its input qkv and dqkv in bf16 storage too (both layouts' one pair) */
WRAP(OP_ATTN_FORWARD, attention_forward_qkv16,
     (tr_stream s, uint16_t *o16, float *lse, const uint16_t *q16, const float *al, int B, int T,
      int NH, int NG, int HS, const int32_t *seg),
     (s, o16, lse, q16, al, B, T, NH, NG, HS, seg))
WRAP(OP_ATTN_BACKWARD, attention_backward_qkv16,
     (tr_stream s, uint16_t *dq16, float *scratch, const uint16_t *d, const uint16_t *q16,
      const uint16_t *o16, const float *lse, const float *al, int B, int T, int NH, int NG,
      int HS, const int32_t *seg),
     (s, dq16, scratch, d, q16, o16, lse, al, B, T, NH, NG, HS, seg))
WRAP(OP_XENT_FUSED16, xent_stats_loss_backward16,
     (tr_stream s, float *o, float *m, float *se, float *p, uint16_t *l16, const int32_t *t,
      const float *w, int N, int V, int nv, int v0, float scale),
     (s, o, m, se, p, l16, t, w, N, V, nv, v0, scale))
WRAP(OP_NARROW16, narrow16, (tr_stream s, uint16_t *d, const float *x, size_t n), (s, d, x, n))
WRAP(OP_LN_BACKWARD16, layernorm_backward16,
     (tr_stream s, float *dx, float *dw, float *db, const uint16_t *d16, const float *x,
      const float *w, const float *m, const float *r, int N, int C),
     (s, dx, dw, db, d16, x, w, m, r, N, C))
WRAP(OP_RMS_BACKWARD16, rmsnorm_backward16,
     (tr_stream s, float *dx, float *dw, const uint16_t *d16, const float *x, const float *w,
      const float *r, int N, int C),
     (s, dx, dw, d16, x, w, r, N, C))
WRAP(OP_XENT_ROW_MAX, xent_row_max,
     (tr_stream s, float *m, const float *l, int N, int V, int nv), (s, m, l, N, V, nv))
WRAP(OP_XENT_ROW_SUMEXP, xent_row_sumexp,
     (tr_stream s, float *se, const float *l, const float *m, int N, int V, int nv),
     (s, se, l, m, N, V, nv))
WRAP(OP_XENT_PICK, xent_pick,
     (tr_stream s, float *p, const float *l, const int32_t *t, int N, int V, int v0),
     (s, p, l, t, N, V, v0))
WRAP(OP_XENT_LOSS, xent_loss,
     (tr_stream s, float *o, const float *m, const float *se, const float *p, int N),
     (s, o, m, se, p, N))
WRAP(OP_XENT_BACKWARD, xent_backward,
     (tr_stream s, float *dl, const float *l, const float *m, const float *se, const int32_t *t,
      int N, int V, int nv, int v0, float scale),
     (s, dl, l, m, se, t, N, V, nv, v0, scale))
WRAP(OP_XENT_STATS, xent_stats,
     (tr_stream s, float *m, float *se, float *p, const float *l, const int32_t *t, int N, int V,
      int nv, int v0),
     (s, m, se, p, l, t, N, V, nv, v0))
WRAP(OP_XENT_RESCALE, xent_rescale,
     (tr_stream s, float *se, const float *lm, const float *m, int N), (s, se, lm, m, N))
WRAP(OP_XENT_LOSS_BACKWARD, xent_loss_backward,
     (tr_stream s, float *o, float *dl, const float *l, const float *m, const float *se,
      const float *p, const int32_t *t, const float *w, int N, int V, int nv, int v0, float scale),
     (s, o, dl, l, m, se, p, t, w, N, V, nv, v0, scale))
WRAP(OP_EMB_FORWARD, embedding_forward,
     (tr_stream s, float *o, const int32_t *ids, const float *tab, int N, int C, int v0, int V),
     (s, o, ids, tab, N, C, v0, V))
WRAP(OP_EMB_BACKWARD, embedding_backward,
     (tr_stream s, float *dt, const float *d, const int32_t *ids, int N, int C, int v0, int V),
     (s, dt, d, ids, N, C, v0, V))
WRAP(OP_POS_FORWARD, position_forward, (tr_stream s, float *o, const float *w, int B, int T, int C),
     (s, o, w, B, T, C))
WRAP(OP_POS_BACKWARD, position_backward,
     (tr_stream s, float *dw, const float *d, int B, int T, int C), (s, dw, d, B, T, C))
WRAP(OP_ADAMW, adamw,
     (tr_stream s, float *p, const float *g, float *m, float *v, size_t n, float lr, float b1,
      float b2, float eps, float wd, float gs, int step),
     (s, p, g, m, v, n, lr, b1, b2, eps, wd, gs, step))

static double p_sumsq(tr_stream s, const float *x, size_t n)
{
    PROF_BEGIN double r = base.sumsq(s, x, n);
    PROF_END(OP_SUMSQ)
    return r;
}

/* The profiling copy of table k (Vp: the padded vocabulary, which tells the head's GEMMs). */
static tr_kernels profiled(const tr_kernels *k, int Vp)
{
    base = *k;
    prof_vp = Vp;
    tr_kernels p = *k;
    p.gemm = p_gemm, p.to_device = p_to_device, p.to_host = p_to_host, p.copy = p_copy;
    p.zero = p_zero, p.add = p_add, p.axpy = p_axpy, p.scale = p_scale, p.bias_add = p_bias_add;
    p.bias_backward = p_bias_backward, p.layernorm_forward = p_layernorm_forward;
    p.layernorm_backward = p_layernorm_backward, p.gelu_forward = p_gelu_forward;
    p.gelu_backward = p_gelu_backward, p.attention_forward = p_attention_forward;
    p.attention_backward = p_attention_backward, p.xent_row_max = p_xent_row_max;
    p.xent_row_sumexp = p_xent_row_sumexp, p.xent_pick = p_xent_pick, p.xent_loss = p_xent_loss;
    p.xent_backward = p_xent_backward, p.xent_stats = p_xent_stats;
    p.xent_rescale = p_xent_rescale, p.xent_loss_backward = p_xent_loss_backward;
    p.embedding_forward = p_embedding_forward;
    p.embedding_backward = p_embedding_backward, p.position_forward = p_position_forward;
    p.position_backward = p_position_backward, p.adamw = p_adamw, p.sumsq = p_sumsq;
/* each optional op wrapped where the table has it */
#define WRAP_IF_SET(fn)                                                                        \
    if (k->fn)                                                                                 \
        p.fn = p_##fn;
    WRAP_IF_SET(linear_forward)
    WRAP_IF_SET(linear_backward)
    WRAP_IF_SET(gemm_out16)
    WRAP_IF_SET(gemm_a16)
    WRAP_IF_SET(xent_stats16)
    WRAP_IF_SET(xent_loss_backward16)
    WRAP_IF_SET(gelu_forward16)
    WRAP_IF_SET(gemm_b16)
    WRAP_IF_SET(layernorm_forward16)
    WRAP_IF_SET(rmsnorm_forward16)
    WRAP_IF_SET(gelu_backward16)
    WRAP_IF_SET(attention_forward16)
    WRAP_IF_SET(attention_backward16)
    WRAP_IF_SET(attention_forward_qkv16)
    WRAP_IF_SET(attention_backward_qkv16)
    WRAP_IF_SET(xent_stats_loss_backward16)
    WRAP_IF_SET(narrow16)
    WRAP_IF_SET(gemm_mixed16)
    WRAP_IF_SET(layernorm_backward16)
    WRAP_IF_SET(rmsnorm_backward16)
    WRAP_IF_SET(linear_gelu_forward16)
    WRAP_IF_SET(linear_backward_gelu16)
#undef WRAP_IF_SET
    return p;
}

static double peak_for(const char *name)
{
    if (strstr(name, "H100") && strstr(name, "PCIe"))
        return 756e12;
    if (strstr(name, "H100") || strstr(name, "H200") || strstr(name, "GH200"))
        return 989.4e12;
    if (strstr(name, "A100"))
        return 312e12;
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    const char *precision = "bf16";
    int B = 0, iters = 10, warmup = 3, T = 1024, L = 12, C = 768, NH = 12, V = 50257, json = 0,
        profile = 0;
    double peak = 0;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(o, "--json") || !strcmp(o, "--profile")) {
            *(!strcmp(o, "--json") ? &json : &profile) = 1;
            continue;
        }
        if (!v) {
            fprintf(stderr, "gpu_step: %s needs a value\n", o);
            return 2;
        }
        i++;
        if (!strcmp(o, "--precision")) precision = v;
        else if (!strcmp(o, "--micro-batch")) B = atoi(v);
        else if (!strcmp(o, "--iters")) iters = atoi(v);
        else if (!strcmp(o, "--warmup")) warmup = atoi(v);
        else if (!strcmp(o, "--seq")) T = atoi(v);
        else if (!strcmp(o, "--layers")) L = atoi(v);
        else if (!strcmp(o, "--hidden")) C = atoi(v);
        else if (!strcmp(o, "--heads")) NH = atoi(v);
        else if (!strcmp(o, "--vocab")) V = atoi(v);
        else if (!strcmp(o, "--peak-tflops")) peak = atof(v) * 1e12;
        else {
            fprintf(stderr, "gpu_step: unknown option %s\n", o);
            return 2;
        }
    }
    int bf16 = strcmp(precision, "fp32") != 0;
    const tr_kernels *k = tr_kernels_get(bf16 ? "cuda" : "cuda-fp32");
    if (!k) {
        printf("SKIP: %s\n", tr_errmsg());
        return 77;
    }
    if (iters < 1 || warmup < 0 || T < 1 || L < 1 || C < 1 || NH < 1 || C % NH || V < 1) {
        fprintf(stderr, "gpu_step: impossible shape or counts\n");
        return 2;
    }
    int Vp = (V + 127) / 128 * 128;
    tr_gpt_shape s = {.num_layers = L, .C = C, .NH = NH, .T = T, .max_T = T, .V = V, .Vp = Vp,
                      .eps = 1e-5f, .init_std = 0.02f, .seed = 1234, .layer_first = 0,
                      .layer_count = L, .is_first = 1, .is_last = 1, .tp_size = 1};
    if (!peak)
        peak = peak_for(tr_cuda_device_name());

    /* parameters: a model on the counting table tells their number */
    tr_kernels counting = *k;
    counting.alloc = counting_alloc;
    counting.free = counting_free;
    tr_gpt *probe = NULL;
    if (tr_gpt_create(&s, &counting, NULL, &probe)) {
        fprintf(stderr, "gpu_step: %s\n", tr_errmsg());
        return 1;
    }
    size_t n_params = tr_gpt_num_params(probe);
    tr_gpt_free(probe);
    size_t pbytes = n_params * sizeof(float);

    /* the largest micro-batch that fits */
    static const int candidates[] = {128, 96, 64, 48, 32, 24, 16, 12, 8, 6, 4, 2, 1};
    size_t free_b = 0, total_b = 0;
    if (tr_cuda_mem_info(&free_b, &total_b)) {
        fprintf(stderr, "gpu_step: %s\n", tr_errmsg());
        return 1;
    }
    tr_cuda_budget budget = {0};
    int chosen = 0;
    for (size_t c = 0; c < sizeof candidates / sizeof candidates[0]; c++) {
        int b = B ? B : candidates[c];
        tr_cuda_budget t = {.params = pbytes, .grads = pbytes, .optimizer = 2 * pbytes,
                            .activations = measure_activations(k, &s, b),
                            .workspace = tr_cuda_workspace_bytes(),
                            .reserved = (size_t)1 << 30};
        double planned = L * tr_plan_layer_activation_bytes(T, b, C, NH, 1, 0,
                                                            TR_PLAN_RECOMPUTE_NONE, bf16) +
                         8.0 * T * b * Vp;
        int fits = tr_cuda_budget_check(&t, free_b, total_b, tr_cuda_device(),
                                        tr_cuda_device_name()) == TR_OK;
        if (!json)
            printf("micro-batch %3d: activations %.2f GiB measured (planner: %.2f GiB), total "
                   "%.2f GiB of %.2f free: %s\n",
                   b, (double)t.activations / (1 << 30), planned / (1 << 30),
                   (double)tr_cuda_budget_total(&t) / (1 << 30), (double)free_b / (1 << 30),
                   fits ? "fits" : "too big");
        if (fits || B) {
            if (!fits) {
                fprintf(stderr, "gpu_step: %s\n", tr_errmsg());
                return 1;
            }
            budget = t, chosen = b;
            break;
        }
    }
    if (!chosen) {
        fprintf(stderr, "gpu_step: not even micro-batch 1 fits: %s\n", tr_errmsg());
        return 1;
    }
    B = chosen;
    if (tr_cuda_reserve(&budget)) {
        fprintf(stderr, "gpu_step: %s\n", tr_errmsg());
        return 1;
    }

    /* the model, its buffers (one arena block each), one activation slot; the model and the
     * step call the profiling copy of the table (a pass-through until --profile's steps) */
    tr_kernels kp = profiled(k, Vp);
    k = &kp;
    tr_gpt *g = NULL;
    tr_gpt_acts *a = NULL;
    float *params = k->alloc(pbytes), *grads = k->alloc(pbytes), *m = k->alloc(pbytes),
          *v = k->alloc(pbytes);
    if (!params || !grads || !m || !v || tr_gpt_create(&s, k, NULL, &g)) {
        fprintf(stderr, "gpu_step: %s\n", tr_errmsg());
        return 1;
    }
    tr_gpt_bind(g, params, grads);
    if (tr_gpt_init_params(g) || tr_gpt_acts_create(g, B, &a)) {
        fprintf(stderr, "gpu_step: %s\n", tr_errmsg());
        return 1;
    }
    size_t ntok = (size_t)B * T;
    int32_t *tokens = malloc(ntok * sizeof *tokens), *targets = malloc(ntok * sizeof *targets);
    uint64_t x = 99;
    for (size_t i = 0; i < ntok; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        tokens[i] = (int32_t)(x % (uint64_t)V);
        targets[i] = (int32_t)((x >> 24) % (uint64_t)V);
    }
    double *ms = calloc((size_t)iters, sizeof *ms);
    float loss = 0;
    double norm = 0;
    int n_prof = profile ? 2 : 0;
    for (int it = 0; it < warmup + iters + n_prof; it++) {
        prof_on = it >= warmup + iters;
        k->synchronize(NULL);
        double t0 = tr_now();
        k->zero(NULL, grads, pbytes);
        if (tr_gpt_forward(g, a, tokens, NULL, targets, 1.0f / (float)ntok, &loss) ||
            tr_gpt_backward(g, a, NULL)) {
            fprintf(stderr, "gpu_step: %s\n", tr_errmsg());
            return 1;
        }
        norm = sqrt(k->sumsq(NULL, grads, n_params));
        float clip = norm > 1.0 ? (float)(1.0 / norm) : 1.0f;
        k->adamw(NULL, params, grads, m, v, n_params, 6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, clip,
                 it + 1);
        k->synchronize(NULL);
        if (it >= warmup && it < warmup + iters)
            ms[it - warmup] = (tr_now() - t0) * 1e3;
    }
    prof_on = 0;
    double prof_total = 0;
    for (int o = 0; o < N_OPS; o++)
        prof_total += prof_ms[o] / (n_prof ? n_prof : 1);
    if (tr_cuda_status()) {
        fprintf(stderr, "gpu_step: %s\n", tr_errmsg());
        return 1;
    }
    qsort(ms, (size_t)iters, sizeof *ms, cmp_double);
    double med = ms[iters / 2];
    double tok_s = (double)ntok / (med / 1e3);
    double tflops = tr_gpt_flops_per_token(&s, (double)n_params) * tok_s / 1e12;
    double mfu = peak > 0 ? tflops * 1e12 / peak : NAN;
    size_t free_after = 0, total_after = 0;
    if (tr_cuda_mem_info(&free_after, &total_after))
        fprintf(stderr, "gpu_step: %s\n", tr_errmsg());
    if (json) {
        char mfu_s[32] = "null";
        if (peak > 0)
            snprintf(mfu_s, sizeof mfu_s, "%.4f", mfu);
        printf("{\"impl\": \"trident\", \"precision\": \"%s\", \"gpu\": \"%s\", \"micro_batch\": "
               "%d, \"seq\": %d, \"params\": %zu, \"ms_per_iter\": %.3f, \"tokens_per_s\": %.1f, "
               "\"tflops\": %.2f, \"mfu\": %s, \"peak_tflops\": %.1f, \"loss\": %.4f, "
               "\"memory_gib\": %.2f",
               precision, tr_cuda_device_name(), B, T, n_params, med, tok_s, tflops, mfu_s,
               peak / 1e12, loss, (double)(total_after - free_after) / (1 << 30));
        long n_chosen, n_refused; /* plans on recorded algorithms (kernels/cuda/gemm_choice.h) */
        tr_cuda_gemm_choice_counts(&n_chosen, &n_refused);
        printf(", \"gemm_choices\": %ld, \"gemm_choices_refused\": %ld", n_chosen, n_refused);
        long dnn_ran, dnn_refused; /* cuDNN's attention (TRIDENT_CUDA_ATTENTION=cudnn) */
        tr_cuda_cudnn_attention_counts(&dnn_ran, &dnn_refused);
        printf(", \"cudnn_attention\": %ld, \"cudnn_attention_refused\": %ld", dnn_ran,
               dnn_refused);
        if (profile) {
            printf(", \"profiled_ms_per_iter\": %.3f, \"ops\": [", prof_total);
            for (int o = 0, first = 1; o < N_OPS; o++) {
                if (!prof_calls[o])
                    continue;
                double op_ms = prof_ms[o] / n_prof;
                printf("%s{\"op\": \"%s\", \"ms_per_iter\": %.3f, \"calls_per_iter\": %ld, "
                       "\"share\": %.4f, \"tflops\": %.2f}",
                       first ? "" : ", ", op_names[o], op_ms, prof_calls[o] / n_prof,
                       op_ms / prof_total,
                       prof_ms[o] > 0 ? prof_flops[o] / (prof_ms[o] / 1e3) / 1e12 : 0.0);
                first = 0;
            }
            printf("]");
        }
        printf("}\n");
    } else {
        printf("trident %s on %s: GPT %dL %dh, %zu parameters, micro-batch %d x %d tokens\n",
               precision, tr_cuda_device_name(), L, C, n_params, B, T);
        printf("  %.2f ms/iter (median of %d), %.0f tokens/s, %.1f TFLOP/s, MFU %.1f%% (peak "
               "%.0f TFLOP/s), loss %.4f, grad norm %.3f, %.2f GiB in use\n",
               med, iters, tok_s, tflops, 100 * mfu, peak / 1e12, loss, norm,
               (double)(total_after - free_after) / (1 << 30));
        if (profile) {
            printf("  per op (each timed alone, %.2f ms per profiled step):\n", prof_total);
            for (int o = 0; o < N_OPS; o++)
                if (prof_calls[o]) {
                    printf("  %-20s %8.3f ms %5.1f%% %5ld calls", op_names[o], prof_ms[o] / n_prof,
                           100 * prof_ms[o] / n_prof / prof_total, prof_calls[o] / n_prof);
                    if (prof_flops[o] > 0)
                        printf(" %7.1f TFLOP/s", prof_flops[o] / (prof_ms[o] / 1e3) / 1e12);
                    printf("\n");
                }
        }
    }
    tr_gpt_acts_free(a);
    tr_gpt_free(g);
    k->free(params), k->free(grads), k->free(m), k->free(v);
    free(tokens), free(targets), free(ms);
    return 0;
}
