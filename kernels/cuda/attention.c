/* Causal self-attention (kernels.h): the fused kernels of flash.cu (no T x T tensor; fp32
 * FMA products in the fp32 mode, bf16 tensor-core tiles with fp32 accumulation in the bf16
 * mode, whose *16 ops keep the output in bf16 storage), GPT-2's layout being the grouped one
 * with NG = NH and no ALiBi; and generation's decode against the key/value cache from batched
 * cuBLASLt products.
 * Layouts: qkv (B, T, NH, 3, HS), out (B, T, NH, HS), lse (B, NH, T). */
#include <math.h>

#include "kernels/cuda/cuda_internal.h"

void cu_attention_forward_fp32(tr_stream s, float *out, float *lse, const float *qkv, int B,
                               int T, int NH, int HS, const int32_t *segments)
{
    cu_flash_forward_fp32(s, out, lse, qkv, NULL, B, T, NH, NH, HS, segments);
}

void cu_attention_backward_fp32(tr_stream s, float *dqkv, float *scratch, const float *dout,
                                const float *qkv, const float *out, const float *lse, int B,
                                int T, int NH, int HS, const int32_t *segments)
{
    cu_flash_backward_fp32(s, dqkv, scratch, dout, qkv, out, lse, NULL, B, T, NH, NH, HS,
                           segments);
}

void cu_attention_forward_bf16(tr_stream s, float *out, float *lse, const float *qkv, int B,
                               int T, int NH, int HS, const int32_t *segments)
{
    cu_flash_forward_bf16(s, out, NULL, lse, qkv, NULL, B, T, NH, NH, HS, segments);
}

void cu_attention_backward_bf16(tr_stream s, float *dqkv, float *scratch, const float *dout,
                                const float *qkv, const float *out, const float *lse, int B,
                                int T, int NH, int HS, const int32_t *segments)
{
    cu_flash_backward_bf16(s, dqkv, scratch, dout, qkv, out, NULL, lse, NULL, B, T, NH, NH, HS,
                           segments);
}

void cu_attention_forward16(tr_stream s, uint16_t *out16, float *lse, const float *qkv, int B,
                            int T, int NH, int HS, const int32_t *segments)
{
    cu_flash_forward_bf16(s, NULL, out16, lse, qkv, NULL, B, T, NH, NH, HS, segments);
}

void cu_attention_backward16(tr_stream s, float *dqkv, float *scratch, const float *dout,
                             const float *qkv, const uint16_t *out16, const float *lse, int B,
                             int T, int NH, int HS, const int32_t *segments)
{
    cu_flash_backward_bf16(s, dqkv, scratch, dout, qkv, NULL, out16, lse, NULL, B, T, NH, NH, HS,
                           segments);
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

#ifndef TR_HAVE_CUDNN
/* Built without cuDNN's and its frontend's headers (meson.build's cudnn_include): trident's own
 * attention kernels run whatever TRIDENT_CUDA_ATTENTION says. */
int cu_cudnn_attention_forward(cudaStream_t st, uint16_t *out16, float *lse,
                               const uint16_t *qkv16, int B, int T, int NH, int NG, int HS,
                               int alibi, int segments)
{
    (void)st, (void)out16, (void)lse, (void)qkv16, (void)B, (void)T, (void)NH, (void)NG;
    (void)HS, (void)alibi, (void)segments;
    return 0;
}

int cu_cudnn_attention_backward(cudaStream_t st, uint16_t *dqkv16, const uint16_t *dout16,
                                const uint16_t *qkv16, const uint16_t *out16, const float *lse,
                                int B, int T, int NH, int NG, int HS, int alibi, int segments)
{
    (void)st, (void)dqkv16, (void)dout16, (void)qkv16, (void)out16, (void)lse, (void)B, (void)T;
    (void)NH, (void)NG, (void)HS, (void)alibi, (void)segments;
    return 0;
}

int tr_cuda_cudnn_attention_counts(long *ran, long *refused)
{
    *ran = *refused = 0;
    return -1;
}
#endif
