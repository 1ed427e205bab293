/* Causal attention with grouped query heads and ALiBi (kernels.h, attention_gqa_*): the fused
 * kernels of flash.cu (query head h = gR + i of group g at (g (R+2) + i) HS in a qkv row, the
 * group's key at (g (R+2) + R) HS and value after it; ALiBi's slope (j - i) added to the
 * scaled scores); generation's decode from cuBLASLt products and the softmax kernels.
 * Layouts: qkv (B, T, NG, R+2, HS), out (B, T, NH, HS), lse (B, NH, T). */
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

/* offset in a qkv row of query head h */
static size_t q_at(const gqa_dims *d, int h)
{
    return (size_t)(h / d->R) * (d->R + 2) * d->HS + (size_t)(h % d->R) * d->HS;
}

void cu_attention_gqa_forward_fp32(tr_stream s, float *out, float *lse, const float *qkv,
                                   const float *alibi, int B, int T, int NH, int NG, int HS,
                                   const int32_t *segments)
{
    cu_flash_forward_fp32(s, out, lse, qkv, alibi, B, T, NH, NG, HS, segments);
}

void cu_attention_gqa_backward_fp32(tr_stream s, float *dqkv, float *scratch, const float *dout,
                                    const float *qkv, const float *out, const float *lse,
                                    const float *alibi, int B, int T, int NH, int NG, int HS,
                                    const int32_t *segments)
{
    cu_flash_backward_fp32(s, dqkv, scratch, dout, qkv, out, lse, alibi, B, T, NH, NG, HS,
                           segments);
}

void cu_attention_gqa_forward_bf16(tr_stream s, float *out, float *lse, const float *qkv,
                                   const float *alibi, int B, int T, int NH, int NG, int HS,
                                   const int32_t *segments)
{
    cu_flash_forward_bf16(s, out, NULL, lse, qkv, alibi, B, T, NH, NG, HS, segments);
}

void cu_attention_gqa_backward_bf16(tr_stream s, float *dqkv, float *scratch, const float *dout,
                                    const float *qkv, const float *out, const float *lse,
                                    const float *alibi, int B, int T, int NH, int NG, int HS,
                                    const int32_t *segments)
{
    cu_flash_backward_bf16(s, dqkv, scratch, dout, qkv, out, NULL, lse, alibi, B, T, NH, NG, HS,
                           segments);
}

void cu_attention_gqa_forward16(tr_stream s, uint16_t *out16, float *lse, const float *qkv,
                                const float *alibi, int B, int T, int NH, int NG, int HS,
                                const int32_t *segments)
{
    cu_flash_forward_bf16(s, NULL, out16, lse, qkv, alibi, B, T, NH, NG, HS, segments);
}

void cu_attention_gqa_backward16(tr_stream s, float *dqkv, float *scratch, const float *dout,
                                 const float *qkv, const uint16_t *out16, const float *lse,
                                 const float *alibi, int B, int T, int NH, int NG, int HS,
                                 const int32_t *segments)
{
    cu_flash_backward_bf16(s, dqkv, scratch, dout, qkv, NULL, out16, lse, alibi, B, T, NH, NG, HS,
                           segments);
}

/* kernels.h's attention_gqa_dropout_*: flash.cu's kernels with dropout on the probabilities
 * (never cuDNN's, which cannot reproduce core/philox.h's masks) */
void cu_attention_gqa_dropout_forward_fp32(tr_stream s, float *out, float *lse, const float *qkv,
                                           const float *alibi, int B, int T, int NH, int NG,
                                           int HS, const int32_t *segments, tr_dropout d)
{
    cu_flash_dropout_forward(s, 0, out, lse, qkv, alibi, B, T, NH, NG, HS, segments, d);
}

void cu_attention_gqa_dropout_backward_fp32(tr_stream s, float *dqkv, float *scratch,
                                            const float *dout, const float *qkv, const float *out,
                                            const float *lse, const float *alibi, int B, int T,
                                            int NH, int NG, int HS, const int32_t *segments,
                                            tr_dropout d)
{
    cu_flash_dropout_backward(s, 0, dqkv, scratch, dout, qkv, out, lse, alibi, B, T, NH, NG, HS,
                              segments, d);
}

void cu_attention_gqa_dropout_forward_bf16(tr_stream s, float *out, float *lse, const float *qkv,
                                           const float *alibi, int B, int T, int NH, int NG,
                                           int HS, const int32_t *segments, tr_dropout d)
{
    cu_flash_dropout_forward(s, 1, out, lse, qkv, alibi, B, T, NH, NG, HS, segments, d);
}

void cu_attention_gqa_dropout_backward_bf16(tr_stream s, float *dqkv, float *scratch,
                                            const float *dout, const float *qkv, const float *out,
                                            const float *lse, const float *alibi, int B, int T,
                                            int NH, int NG, int HS, const int32_t *segments,
                                            tr_dropout d)
{
    cu_flash_dropout_backward(s, 1, dqkv, scratch, dout, qkv, out, lse, alibi, B, T, NH, NG, HS,
                              segments, d);
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
