/* Causal attention with grouped query heads and ALiBi (kernels.h, attention_gqa_*), from the
 * same cuBLASLt products and softmax kernels as attention.c, one product per (batch, head):
 * query head h = gR + i of group g sits at (g (R+2) + i) HS in a qkv row, its group's key
 * at (g (R+2) + R) HS and value after it. ALiBi's slope (j - i) is added to the scaled
 * scores before the softmax. The key/value gradients of a group sum its R heads in head
 * order (beta 0, then 1), as the CPU twin (kernels/cpu/attention.c) does. Compiled, never
 * yet run: tests/cuda compares it with the CPU twin on a GPU.
 * Layouts: qkv (B, T, NG, R+2, HS), out (B, T, NH, HS), att/datt (B, NH, T, T). */
#include <math.h>

#include "kernels/cuda/cuda_internal.h"

typedef struct {
    int B, T, NH, NG, R, HS, C, C3;
    long long TT;
    float scale;
} gqa_dims;

static gqa_dims dims_of(int B, int T, int NH, int NG, int HS)
{
    gqa_dims d = {B, T, NH, NG, NH / NG, HS, NH * HS, 0, (long long)T * T,
                  1.0f / sqrtf((float)HS)};
    d.C3 = NG * (d.R + 2) * HS;
    return d;
}

/* offsets in a qkv row: query head h, and the key of h's group (value: + HS) */
static size_t q_at(const gqa_dims *d, int h)
{
    return (size_t)(h / d->R) * (d->R + 2) * d->HS + (size_t)(h % d->R) * d->HS;
}

static size_t k_at(const gqa_dims *d, int h)
{
    return (size_t)(h / d->R) * (d->R + 2) * d->HS + (size_t)d->R * d->HS;
}

static void forward(tr_stream s, cu_gemm_mode mode, float *out, float *att, const float *qkv,
                    const float *alibi, int B, int T, int NH, int NG, int HS,
                    const int32_t *segments)
{
    cudaStream_t st = cu_shared_stream(s, "attention_gqa"); /* its GEMMs use the workspace */
    gqa_dims d = dims_of(B, T, NH, NG, HS);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float *row = qkv + (size_t)b * T * d.C3;
            /* S_h = scale Q_h K_g^T (T x T) */
            cu_gemm_ex(st, mode, 0, 1, T, T, HS, d.scale, row + q_at(&d, h), d.C3, 0,
                       row + k_at(&d, h), d.C3, 0, 0.0f, att + ((size_t)b * NH + h) * d.TT, T,
                       0, 1);
        }
    if (alibi)
        cu_alibi_add(st, att, alibi, B * NH * T, T, NH);
    if (segments)
        cu_softmax_causal_segments(st, att, segments, B * NH * T, T, NH);
    else
        cu_softmax_causal(st, att, B * NH * T, T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float *row = qkv + (size_t)b * T * d.C3;
            /* O_h = P_h V_g (T x HS) */
            cu_gemm_ex(st, mode, 0, 0, T, HS, T, 1.0f, att + ((size_t)b * NH + h) * d.TT, T, 0,
                       row + k_at(&d, h) + HS, d.C3, 0, 0.0f,
                       out + (size_t)b * T * d.C + (size_t)h * HS, d.C, 0, 1);
        }
}

static void backward(tr_stream s, cu_gemm_mode mode, float *dqkv, float *datt,
                     const float *dout, const float *qkv, const float *att, int B, int T, int NH,
                     int NG, int HS)
{
    cudaStream_t st = cu_shared_stream(s, "attention_gqa"); /* its GEMMs use the workspace */
    gqa_dims d = dims_of(B, T, NH, NG, HS);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float *row = qkv + (size_t)b * T * d.C3;
            /* dP_h = dO_h V_g^T */
            cu_gemm_ex(st, mode, 0, 1, T, T, HS, 1.0f, dout + (size_t)b * T * d.C + (size_t)h * HS,
                       d.C, 0, row + k_at(&d, h) + HS, d.C3, 0, 0.0f,
                       datt + ((size_t)b * NH + h) * d.TT, T, 0, 1);
        }
    /* dS = P (dP - rowsum(P dP)), 0 above the diagonal */
    cu_softmax_causal_backward(st, datt, att, B * NH * T, T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            size_t base = (size_t)b * T * d.C3;
            const float *q = qkv + base + q_at(&d, h), *k = qkv + base + k_at(&d, h);
            float *dq = dqkv + base + q_at(&d, h), *dk = dqkv + base + k_at(&d, h);
            const float *dS = datt + ((size_t)b * NH + h) * d.TT;
            const float *P = att + ((size_t)b * NH + h) * d.TT;
            const float *dO = dout + (size_t)b * T * d.C + (size_t)h * HS;
            float beta = h % d.R ? 1.0f : 0.0f; /* the group's first head writes, others add */
            /* dQ_h = scale dS_h K_g */
            cu_gemm_ex(st, mode, 0, 0, T, HS, T, d.scale, dS, T, 0, k, d.C3, 0, 0.0f, dq, d.C3, 0,
                       1);
            /* dK_g (+)= scale dS_h^T Q_h */
            cu_gemm_ex(st, mode, 1, 0, T, HS, T, d.scale, dS, T, 0, q, d.C3, 0, beta, dk, d.C3, 0,
                       1);
            /* dV_g (+)= P_h^T dO_h */
            cu_gemm_ex(st, mode, 1, 0, T, HS, T, 1.0f, P, T, 0, dO, d.C, 0, beta, dk + HS, d.C3,
                       0, 1);
        }
}

void cu_attention_gqa_forward_fp32(tr_stream s, float *out, float *att, const float *qkv,
                                   const float *alibi, int B, int T, int NH, int NG, int HS,
                                   const int32_t *segments)
{
    forward(s, CU_GEMM_FP32, out, att, qkv, alibi, B, T, NH, NG, HS, segments);
}

void cu_attention_gqa_backward_fp32(tr_stream s, float *dqkv, float *datt, const float *dout,
                                    const float *qkv, const float *att, int B, int T, int NH,
                                    int NG, int HS)
{
    backward(s, CU_GEMM_FP32, dqkv, datt, dout, qkv, att, B, T, NH, NG, HS);
}

void cu_attention_gqa_forward_bf16(tr_stream s, float *out, float *att, const float *qkv,
                                   const float *alibi, int B, int T, int NH, int NG, int HS,
                                   const int32_t *segments)
{
    forward(s, CU_GEMM_FAST_BF16, out, att, qkv, alibi, B, T, NH, NG, HS, segments);
}

void cu_attention_gqa_backward_bf16(tr_stream s, float *dqkv, float *datt, const float *dout,
                                    const float *qkv, const float *att, int B, int T, int NH,
                                    int NG, int HS)
{
    backward(s, CU_GEMM_FAST_BF16, dqkv, datt, dout, qkv, att, B, T, NH, NG, HS);
}

/* Generation: the groups' new keys/values into the (B, NG, max_T, HS) caches, then per
 * (batch, head) S (n, L) = scale Q_h K_g[0:L]^T, ALiBi, the offset causal softmax,
 * O_h = P_h V_g[0:L]. The CPU twin is kernels/cpu/attention.c's cpu_attention_gqa_decode. */
static void decode(tr_stream s, cu_gemm_mode mode, float *out, float *kc, float *vc,
                   float *scores, const float *qkv, const float *alibi, int B, int n, int past,
                   int max_T, int NH, int NG, int HS)
{
    cudaStream_t st = cu_shared_stream(s, "attention_gqa_decode");
    gqa_dims d = dims_of(B, n, NH, NG, HS);
    int L = past + n;
    long long SL = (long long)n * L;
    cu_kv_append_gqa(st, kc, vc, qkv, B, n, NG, d.R, HS, past, max_T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float *k = kc + ((size_t)b * NG + (size_t)(h / d.R)) * max_T * HS;
            cu_gemm_ex(st, mode, 0, 1, n, L, HS, d.scale, qkv + (size_t)b * n * d.C3 + q_at(&d, h),
                       d.C3, 0, k, HS, 0, 0.0f, scores + ((size_t)b * NH + h) * SL, L, 0, 1);
        }
    if (alibi)
        cu_alibi_add_decode(st, scores, alibi, B * NH * n, NH, n, L, past);
    cu_softmax_decode(st, scores, B * NH * n, L, n, past);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float *v = vc + ((size_t)b * NG + (size_t)(h / d.R)) * max_T * HS;
            cu_gemm_ex(st, mode, 0, 0, n, HS, L, 1.0f, scores + ((size_t)b * NH + h) * SL, L, 0, v,
                       HS, 0, 0.0f, out + (size_t)b * n * d.C + (size_t)h * HS, d.C, 0, 1);
        }
}

void cu_attention_gqa_decode_fp32(tr_stream s, float *out, float *kcache, float *vcache,
                                  float *scores, const float *qkv, const float *alibi, int B,
                                  int n, int past, int max_T, int NH, int NG, int HS)
{
    decode(s, CU_GEMM_FP32, out, kcache, vcache, scores, qkv, alibi, B, n, past, max_T, NH, NG, HS);
}

void cu_attention_gqa_decode_bf16(tr_stream s, float *out, float *kcache, float *vcache,
                                  float *scores, const float *qkv, const float *alibi, int B,
                                  int n, int past, int max_T, int NH, int NG, int HS)
{
    decode(s, CU_GEMM_FAST_BF16, out, kcache, vcache, scores, qkv, alibi, B, n, past, max_T, NH,
           NG, HS);
}
