/* Causal self-attention from batched cuBLASLt products and the row-softmax kernels, with
 * the probabilities materialised in `att` as kernels.h's contract asks (backward reads
 * them). For each batch b one product covers all NH heads: a head's q, k and v sit at
 * stride 3*HS in qkv (row stride 3C), its output at stride HS in out (row stride C), its
 * (T, T) matrices at stride T*T. The full T x T scores are computed and the softmax zeroes
 * the part above the diagonal (correct first; a fused kernel that skips it and never writes
 * the T x T matrix is the performance goal, see the issue).
 * Layouts: qkv (B, T, NH, 3, HS), out (B, T, NH, HS), att/datt (B, NH, T, T). */
#include <math.h>

#include "kernels/cuda/cuda_internal.h"

static void forward(tr_stream s, cu_gemm_mode mode, float *out, float *att, const float *qkv,
                    int B, int T, int NH, int HS, const int32_t *segments)
{
    cudaStream_t st = cu_shared_stream(s, "attention"); /* its GEMMs use the workspace */
    int C = NH * HS, C3 = 3 * C;
    long long TT = (long long)T * T;
    float scale = 1.0f / sqrtf((float)HS);
    for (int b = 0; b < B; b++) {
        const float *q = qkv + (size_t)b * T * C3, *k = q + HS;
        float *P = att + (size_t)b * NH * TT;
        /* S_h = scale Q_h K_h^T (T x T) */
        cu_gemm_ex(st, mode, 0, 1, T, T, HS, scale, q, C3, 3 * HS, k, C3, 3 * HS, 0.0f, P, T,
                      TT, NH);
    }
    if (segments) /* packed sequences: each query's own segment only */
        cu_softmax_causal_segments(st, att, segments, B * NH * T, T, NH);
    else
        cu_softmax_causal(st, att, B * NH * T, T);
    for (int b = 0; b < B; b++) {
        const float *v = qkv + (size_t)b * T * C3 + 2 * HS;
        const float *P = att + (size_t)b * NH * TT;
        /* O_h = P_h V_h (T x HS) */
        cu_gemm_ex(st, mode, 0, 0, T, HS, T, 1.0f, P, T, TT, v, C3, 3 * HS, 0.0f,
                      out + (size_t)b * T * C, C, HS, NH);
    }
}

static void backward(tr_stream s, cu_gemm_mode mode, float *dqkv, float *datt,
                     const float *dout, const float *qkv, const float *att, int B, int T, int NH,
                     int HS)
{
    cudaStream_t st = cu_shared_stream(s, "attention"); /* its GEMMs use the workspace */
    int C = NH * HS, C3 = 3 * C;
    long long TT = (long long)T * T;
    float scale = 1.0f / sqrtf((float)HS);
    for (int b = 0; b < B; b++) {
        const float *v = qkv + (size_t)b * T * C3 + 2 * HS;
        const float *dO = dout + (size_t)b * T * C;
        /* dP_h = dO_h V_h^T */
        cu_gemm_ex(st, mode, 0, 1, T, T, HS, 1.0f, dO, C, HS, v, C3, 3 * HS, 0.0f,
                      datt + (size_t)b * NH * TT, T, TT, NH);
    }
    /* dS = P (dP - rowsum(P dP)), 0 above the diagonal */
    cu_softmax_causal_backward(st, datt, att, B * NH * T, T);
    for (int b = 0; b < B; b++) {
        size_t base = (size_t)b * T * C3;
        const float *q = qkv + base, *k = q + HS;
        float *dq = dqkv + base, *dk = dq + HS, *dv = dq + 2 * HS;
        const float *dS = datt + (size_t)b * NH * TT, *P = att + (size_t)b * NH * TT;
        const float *dO = dout + (size_t)b * T * C;
        /* dQ_h = scale dS_h K_h */
        cu_gemm_ex(st, mode, 0, 0, T, HS, T, scale, dS, T, TT, k, C3, 3 * HS, 0.0f, dq, C3,
                      3 * HS, NH);
        /* dK_h = scale dS_h^T Q_h */
        cu_gemm_ex(st, mode, 1, 0, T, HS, T, scale, dS, T, TT, q, C3, 3 * HS, 0.0f, dk, C3,
                      3 * HS, NH);
        /* dV_h = P_h^T dO_h */
        cu_gemm_ex(st, mode, 1, 0, T, HS, T, 1.0f, P, T, TT, dO, C, HS, 0.0f, dv, C3, 3 * HS,
                      NH);
    }
}

void cu_attention_forward_fp32(tr_stream s, float *out, float *att, const float *qkv, int B,
                                  int T, int NH, int HS, const int32_t *segments)
{
    forward(s, CU_GEMM_FP32, out, att, qkv, B, T, NH, HS, segments);
}

void cu_attention_backward_fp32(tr_stream s, float *dqkv, float *datt, const float *dout,
                                   const float *qkv, const float *att, int B, int T, int NH,
                                   int HS)
{
    backward(s, CU_GEMM_FP32, dqkv, datt, dout, qkv, att, B, T, NH, HS);
}

/* bf16 tensor-core products on the fp32 buffers (cuBLASLt rounds inside the kernel). */
void cu_attention_forward_bf16(tr_stream s, float *out, float *att, const float *qkv, int B,
                                  int T, int NH, int HS, const int32_t *segments)
{
    forward(s, CU_GEMM_FAST_BF16, out, att, qkv, B, T, NH, HS, segments);
}

void cu_attention_backward_bf16(tr_stream s, float *dqkv, float *datt, const float *dout,
                                   const float *qkv, const float *att, int B, int T, int NH,
                                   int HS)
{
    backward(s, CU_GEMM_FAST_BF16, dqkv, datt, dout, qkv, att, B, T, NH, HS);
}

/* Generation: append the new keys/values, S_h (n, L) = scale Q_h K_h[0:L]^T with L = past+n
 * (K_h at batch stride max_T*HS in the cache), the offset causal softmax, O_h = P_h V_h[0:L].
 * The CPU twin is kernels/cpu/attention.c's cpu_attention_decode. */
static void decode(tr_stream s, cu_gemm_mode mode, float *out, float *kc, float *vc,
                   float *scores, const float *qkv, int B, int n, int past, int max_T, int NH,
                   int HS)
{
    cudaStream_t st = cu_shared_stream(s, "attention"); /* its GEMMs use the workspace */
    int C = NH * HS, C3 = 3 * C, L = past + n;
    long long SL = (long long)n * L, KV = (long long)max_T * HS;
    float scale = 1.0f / sqrtf((float)HS);
    cu_kv_append(st, kc, vc, qkv, B, n, NH, HS, past, max_T);
    for (int b = 0; b < B; b++) {
        const float *q = qkv + (size_t)b * n * C3;
        const float *k = kc + (size_t)b * NH * KV;
        cu_gemm_ex(st, mode, 0, 1, n, L, HS, scale, q, C3, 3 * HS, k, HS, KV, 0.0f,
                   scores + (size_t)b * NH * SL, L, SL, NH);
    }
    cu_softmax_decode(st, scores, B * NH * n, L, n, past);
    for (int b = 0; b < B; b++) {
        const float *v = vc + (size_t)b * NH * KV;
        cu_gemm_ex(st, mode, 0, 0, n, HS, L, 1.0f, scores + (size_t)b * NH * SL, L, SL, v, HS,
                   KV, 0.0f, out + (size_t)b * n * C, C, HS, NH);
    }
}

void cu_attention_decode_fp32(tr_stream s, float *out, float *kcache, float *vcache,
                              float *scores, const float *qkv, int B, int n, int past, int max_T,
                              int NH, int HS)
{
    decode(s, CU_GEMM_FP32, out, kcache, vcache, scores, qkv, B, n, past, max_T, NH, HS);
}

void cu_attention_decode_bf16(tr_stream s, float *out, float *kcache, float *vcache,
                              float *scores, const float *qkv, int B, int n, int past, int max_T,
                              int NH, int HS)
{
    decode(s, CU_GEMM_FAST_BF16, out, kcache, vcache, scores, qkv, B, n, past, max_T, NH, HS);
}
