/* The CUDA backend's two op tables: "cuda" (bf16 products, fp32 storage) and "cuda-fp32".
 * They differ only in the GEMM and attention entries. */
#include "core/core.h"
#include "kernels/cuda/cuda_internal.h"

#define COMMON_OPS                                                                           \
    .alloc = tr_cu_alloc, .free = tr_cu_free, .to_device = tr_cu_to_device,                  \
    .to_host = tr_cu_to_host, .copy = tr_cu_copy, .zero = tr_cu_zero,                        \
    .synchronize = tr_cu_synchronize, .add = tr_cu_add, .axpy = tr_cu_axpy,                  \
    .scale = tr_cu_scale, .bias_add = tr_cu_bias_add, .bias_backward = tr_cu_bias_backward,  \
    .layernorm_forward = tr_cu_layernorm_forward,                                            \
    .layernorm_backward = tr_cu_layernorm_backward, .gelu_forward = tr_cu_gelu_forward,      \
    .gelu_backward = tr_cu_gelu_backward, .xent_row_max = tr_cu_xent_row_max,                \
    .xent_row_sumexp = tr_cu_xent_row_sumexp, .xent_pick = tr_cu_xent_pick,                  \
    .xent_loss = tr_cu_xent_loss, .xent_backward = tr_cu_xent_backward,                      \
    .embedding_forward = tr_cu_embedding_forward,                                            \
    .embedding_backward = tr_cu_embedding_backward,                                          \
    .position_forward = tr_cu_position_forward,                                              \
    .position_backward = tr_cu_position_backward, .adamw = tr_cu_adamw, .sumsq = tr_cu_sumsq

static const tr_kernels cuda_bf16_table = {
    .name = "cuda",
    COMMON_OPS,
    .gemm = tr_cu_gemm_bf16,
    .attention_forward = tr_cu_attention_forward_bf16,
    .attention_backward = tr_cu_attention_backward_bf16,
};

static const tr_kernels cuda_fp32_table = {
    .name = "cuda-fp32",
    COMMON_OPS,
    .gemm = tr_cu_gemm_fp32,
    .attention_forward = tr_cu_attention_forward_fp32,
    .attention_backward = tr_cu_attention_backward_fp32,
};

const tr_kernels *tr_kernels_cuda(tr_cuda_precision precision)
{
    if (tr_cuda_init())
        return NULL;
    return precision == TR_CUDA_BF16 ? &cuda_bf16_table : &cuda_fp32_table;
}

void tr_cuda_to_bf16(tr_stream s, uint16_t *dst, const float *src, size_t n)
{
    tr_cu_to_bf16(s, dst, src, n);
}

void tr_cuda_from_bf16(tr_stream s, float *dst, const uint16_t *src, size_t n)
{
    tr_cu_from_bf16(s, dst, src, n);
}
