/* The CPU backend's op table. On first use OpenBLAS is set to one thread: the backend splits
 * GEMMs over its own team (pool.c) instead. The GEMM itself runs as fast as with OpenBLAS's
 * own threads, but OpenBLAS's workers keep spinning after each call and would take a core
 * from the loops that follow (measured: a GELU after a GEMM ran ~5x slower). */
#include "kernels/cpu/cpu_ops.h"

#include <cblas.h>
#include <pthread.h>

static void cpu_setup(void) { openblas_set_num_threads(1); }

static const tr_kernels cpu_table = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = cpu_free,
    .bytes_in_use = cpu_bytes_in_use,
    .to_device = cpu_to_device,
    .to_host = cpu_to_host,
    .copy = cpu_copy,
    .zero = cpu_zero,
    .synchronize = cpu_synchronize,
    .gemm = cpu_gemm,
    .linear_forward = cpu_linear_forward,
    .linear_backward = cpu_linear_backward,
    .add = cpu_add,
    .axpy = cpu_axpy,
    .scale = cpu_scale,
    .scale_rows = cpu_scale_rows,
    .bias_add = cpu_bias_add,
    .bias_backward = cpu_bias_backward,
    .layernorm_forward = cpu_layernorm_forward,
    .layernorm_backward = cpu_layernorm_backward,
    .gelu_forward = cpu_gelu_forward,
    .gelu_backward = cpu_gelu_backward,
    .attention_forward = cpu_attention_forward,
    .attention_backward = cpu_attention_backward,
    .attention_decode = cpu_attention_decode,
    .rmsnorm_forward = cpu_rmsnorm_forward,
    .rmsnorm_backward = cpu_rmsnorm_backward,
    .gelu_exact_forward = cpu_gelu_exact_forward,
    .gelu_exact_backward = cpu_gelu_exact_backward,
    .relu_forward = cpu_relu_forward,
    .relu_backward = cpu_relu_backward,
    .swiglu_forward = cpu_swiglu_forward,
    .swiglu_backward = cpu_swiglu_backward,
    .geglu_forward = cpu_geglu_forward,
    .geglu_backward = cpu_geglu_backward,
    .rope = cpu_rope,
    .attention_gqa_forward = cpu_attention_gqa_forward,
    .attention_gqa_backward = cpu_attention_gqa_backward,
    .attention_gqa_decode = cpu_attention_gqa_decode,
    .attention_rows_forward = cpu_attention_rows_forward,
    .attention_rows_backward = cpu_attention_rows_backward,
    .attention_rows_dropout_forward = cpu_attention_rows_dropout_forward,
    .attention_rows_dropout_backward = cpu_attention_rows_dropout_backward,
    .dropout = cpu_dropout,
    .attention_gqa_dropout_forward = cpu_attention_gqa_dropout_forward,
    .attention_gqa_dropout_backward = cpu_attention_gqa_dropout_backward,
    .xent_row_max = cpu_xent_row_max,
    .xent_row_sumexp = cpu_xent_row_sumexp,
    .xent_pick = cpu_xent_pick,
    .xent_loss = cpu_xent_loss,
    .xent_backward = cpu_xent_backward,
    .xent_stats = cpu_xent_stats,
    .xent_rescale = cpu_xent_rescale,
    .xent_loss_backward = cpu_xent_loss_backward,
    .embedding_forward = cpu_embedding_forward,
    .embedding_backward = cpu_embedding_backward,
    .position_forward = cpu_position_forward,
    .position_backward = cpu_position_backward,
    .moe_router_forward = cpu_moe_router_forward,
    .moe_router_backward = cpu_moe_router_backward,
    .gather_rows = cpu_gather_rows,
    .scatter_add_rows = cpu_scatter_add_rows,
    .scatter_add_rows_backward = cpu_scatter_add_rows_backward,
    .adamw = cpu_adamw,
    .sumsq = cpu_sumsq,
};

const tr_kernels *tr_kernels_cpu(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, cpu_setup);
    return &cpu_table;
}
