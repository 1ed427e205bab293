/* The CUDA backend's two op tables: "cuda" (bf16 products, fp32 storage but for the head's
 * logits) and "cuda-fp32". They differ in the GEMM and attention entries and the head's
 * bf16-storage ops (the bf16 table's alone). */
#include <pthread.h>

#include "core/core.h"
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/attention_rows.h"

#define COMMON_OPS                                                                           \
    .alloc = cu_alloc, .free = cu_free, .to_device = cu_to_device,                  \
    .to_host = cu_to_host, .copy = cu_copy, .zero = cu_zero,                        \
    .synchronize = cu_synchronize, .add = cu_add, .axpy = cu_axpy,                  \
    .scale = cu_scale, .scale_rows = cu_scale_rows, .bias_add = cu_bias_add, .bias_backward = cu_bias_backward,  \
    .layernorm_forward = cu_layernorm_forward,                                            \
    .layernorm_backward = cu_layernorm_backward, .gelu_forward = cu_gelu_forward,      \
    .gelu_backward = cu_gelu_backward, .xent_row_max = cu_xent_row_max,                \
    .xent_row_sumexp = cu_xent_row_sumexp, .xent_pick = cu_xent_pick,                  \
    .xent_loss = cu_xent_loss, .xent_backward = cu_xent_backward,                      \
    .xent_stats = cu_xent_stats, .xent_rescale = cu_xent_rescale,                      \
    .xent_loss_backward = cu_xent_loss_backward,                                          \
    .embedding_forward = cu_embedding_forward,                                            \
    .embedding_backward = cu_embedding_backward,                                          \
    .position_forward = cu_position_forward,                                              \
    .position_backward = cu_position_backward, .adamw = cu_adamw, .sumsq = cu_sumsq,       \
    .rmsnorm_forward = cu_rmsnorm_forward, .rmsnorm_backward = cu_rmsnorm_backward,        \
    .swiglu_forward = cu_swiglu_forward, .swiglu_backward = cu_swiglu_backward,            \
    .geglu_forward = cu_geglu_forward, .geglu_backward = cu_geglu_backward,                \
    .gelu_exact_forward = cu_gelu_exact_forward,                                          \
    .gelu_exact_backward = cu_gelu_exact_backward, .relu_forward = cu_relu_forward,      \
    .relu_backward = cu_relu_backward, .rope = cu_rope,                                     \
    .moe_router_forward = cu_moe_router_forward,                                          \
    .moe_router_backward = cu_moe_router_backward, .gather_rows = cu_gather_rows,          \
    .scatter_add_rows = cu_scatter_add_rows,                                              \
    .scatter_add_rows_backward = cu_scatter_add_rows_backward, .dropout = cu_dropout

/* not const: TRIDENT_CUDA_HEAD=fp32 takes the head's bf16-storage ops out (the head's logits
 * then stay fp32, as before they existed), TRIDENT_CUDA_EPILOGUE=0 the fused linear_forward
 * and linear_backward (gemm, then bias_add; two gemm calls and bias_backward),
 * TRIDENT_CUDA_ACTIVATIONS=fp32 the MLP activation's and the norms' bf16 storage, forward and
 * backward (fp32 again), TRIDENT_CUDA_ATTENTION_OUT=fp32 the attention output's (kernels.h's
 * attention_*16: fp32 again; its input's go with it), TRIDENT_CUDA_ATTENTION_IN=fp32 the
 * attention input's and its gradient's (attention_*_qkv16: qkv and dqkv fp32 again),
 * TRIDENT_CUDA_GELU=separate the GELU in the MLP's GEMMs' epilogues (linear_gelu_forward16,
 * linear_backward_gelu16: its own passes again; the EPILOGUE and ACTIVATIONS switches take them
 * out too) */
static tr_kernels cuda_bf16_table = {
    .name = "cuda",
    COMMON_OPS,
    .gemm = cu_gemm_bf16,
    .linear_forward = cu_linear_forward_bf16,
    .linear_backward = cu_linear_backward_bf16,
    .gemm_out16 = cu_gemm_out16,
    .gemm_a16 = cu_gemm_a16,
    .xent_stats16 = cu_xent_stats16,
    .xent_loss_backward16 = cu_xent_loss_backward16,
    .xent_stats_loss_backward16 = cu_xent_stats_loss_backward16,
    .narrow16 = cu_narrow16,
    .gemm_mixed16 = cu_gemm_mixed16,
    .gelu_forward16 = cu_gelu_forward16,
    .gemm_b16 = cu_gemm_b16,
    .layernorm_forward16 = cu_layernorm_forward16,
    .rmsnorm_forward16 = cu_rmsnorm_forward16,
    .gelu_backward16 = cu_gelu_backward16,
    .gelu_exact_forward16 = cu_gelu_exact_forward16,
    .gelu_exact_backward16 = cu_gelu_exact_backward16,
    .relu_forward16 = cu_relu_forward16,
    .relu_backward16 = cu_relu_backward16,
    .layernorm_backward16 = cu_layernorm_backward16,
    .rmsnorm_backward16 = cu_rmsnorm_backward16,
    .linear_gelu_forward16 = cu_linear_gelu_forward16,
    .linear_backward_gelu16 = cu_linear_backward_gelu16,
    .attention_forward = cu_attention_forward_bf16,
    .attention_backward = cu_attention_backward_bf16,
    .attention_decode = cu_attention_decode_bf16,
    .attention_gqa_forward = cu_attention_gqa_forward_bf16,
    .attention_gqa_backward = cu_attention_gqa_backward_bf16,
    .attention_gqa_decode = cu_attention_gqa_decode_bf16,
    .attention_gqa_dropout_forward = cu_attention_gqa_dropout_forward_bf16,
    .attention_gqa_dropout_backward = cu_attention_gqa_dropout_backward_bf16,
    .attention_rows_forward = cu_attention_rows_forward, /* (context parallelism: fp32, as in */
    .attention_rows_backward = cu_attention_rows_backward, /* the CPU's rounded tables) */
    .attention_rows_dropout_forward = cu_attention_rows_dropout_forward,
    .attention_rows_dropout_backward = cu_attention_rows_dropout_backward,
    .attention_forward16 = cu_attention_forward16,
    .attention_backward16 = cu_attention_backward16,
    .attention_gqa_forward16 = cu_attention_gqa_forward16,
    .attention_gqa_backward16 = cu_attention_gqa_backward16,
    .attention_forward_qkv16 = cu_attention_forward_qkv16,
    .attention_backward_qkv16 = cu_attention_backward_qkv16,
};

static const tr_kernels cuda_fp32_table = {
    .name = "cuda-fp32",
    COMMON_OPS,
    .gemm = cu_gemm_fp32,
    .attention_forward = cu_attention_forward_fp32,
    .attention_backward = cu_attention_backward_fp32,
    .attention_decode = cu_attention_decode_fp32,
    .attention_gqa_forward = cu_attention_gqa_forward_fp32,
    .attention_gqa_backward = cu_attention_gqa_backward_fp32,
    .attention_gqa_decode = cu_attention_gqa_decode_fp32,
    .attention_rows_forward = cu_attention_rows_forward, /* (context parallelism: fp32) */
    .attention_rows_backward = cu_attention_rows_backward,
    .attention_rows_dropout_forward = cu_attention_rows_dropout_forward,
    .attention_rows_dropout_backward = cu_attention_rows_dropout_backward,
    .attention_gqa_dropout_forward = cu_attention_gqa_dropout_forward_fp32,
    .attention_gqa_dropout_backward = cu_attention_gqa_dropout_backward_fp32,
};

static void table_choices(void)
{
    int head32 = cu_env_is("TRIDENT_CUDA_HEAD", "fp32");
    int unfused = cu_env_is("TRIDENT_CUDA_EPILOGUE", "0");
    int act32 = cu_env_is("TRIDENT_CUDA_ACTIVATIONS", "fp32");
    int out32 = cu_env_is("TRIDENT_CUDA_ATTENTION_OUT", "fp32");
    int in32 = cu_env_is("TRIDENT_CUDA_ATTENTION_IN", "fp32");
    if (cu_env_is("TRIDENT_CUDA_GELU", "separate") || unfused || act32)
        cuda_bf16_table.linear_gelu_forward16 = NULL,
        cuda_bf16_table.linear_backward_gelu16 = NULL;
    if (head32) /* (gemm_a16 stays: the GELU output's forward reads it) */
        cuda_bf16_table.gemm_out16 = NULL, cuda_bf16_table.xent_stats16 = NULL,
        cuda_bf16_table.xent_loss_backward16 = NULL,
        cuda_bf16_table.xent_stats_loss_backward16 = NULL, cuda_bf16_table.narrow16 = NULL,
        cuda_bf16_table.gemm_mixed16 = NULL;
    if (unfused) /* (the activations' backward16 go too: their output needs linear_backward) */
        cuda_bf16_table.linear_forward = NULL, cuda_bf16_table.linear_backward = NULL,
        cuda_bf16_table.gelu_backward16 = NULL, cuda_bf16_table.gelu_exact_backward16 = NULL,
        cuda_bf16_table.relu_backward16 = NULL;
    if (act32) /* (gemm_a16 stays: the head's backward reads it) */
        cuda_bf16_table.gelu_forward16 = NULL, cuda_bf16_table.gemm_b16 = NULL,
        cuda_bf16_table.layernorm_forward16 = NULL, cuda_bf16_table.rmsnorm_forward16 = NULL,
        cuda_bf16_table.gelu_backward16 = NULL, cuda_bf16_table.layernorm_backward16 = NULL,
        cuda_bf16_table.gelu_exact_forward16 = NULL, cuda_bf16_table.gelu_exact_backward16 = NULL,
        cuda_bf16_table.relu_forward16 = NULL, cuda_bf16_table.relu_backward16 = NULL,
        cuda_bf16_table.rmsnorm_backward16 = NULL;
    if (out32) /* the attention output in fp32 again */
        cuda_bf16_table.attention_forward16 = NULL, cuda_bf16_table.attention_backward16 = NULL,
        cuda_bf16_table.attention_gqa_forward16 = NULL,
        cuda_bf16_table.attention_gqa_backward16 = NULL;
    if (in32 || out32) /* qkv, dqkv fp32 again */
        cuda_bf16_table.attention_forward_qkv16 = NULL,
        cuda_bf16_table.attention_backward_qkv16 = NULL;
}

const tr_kernels *tr_kernels_cuda(tr_cuda_precision precision)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    if (tr_cuda_init())
        return NULL;
    pthread_once(&once, table_choices);
    return precision == TR_CUDA_BF16 ? &cuda_bf16_table : &cuda_fp32_table;
}

void tr_cuda_to_bf16(tr_stream s, uint16_t *dst, const float *src, size_t n)
{
    cu_to_bf16(s, dst, src, n);
}

void tr_cuda_from_bf16(tr_stream s, float *dst, const uint16_t *src, size_t n)
{
    cu_from_bf16(s, dst, src, n);
}
