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
    .alloc = tr_cpu_alloc,
    .free = tr_cpu_free,
    .to_device = tr_cpu_to_device,
    .to_host = tr_cpu_to_host,
    .copy = tr_cpu_copy,
    .zero = tr_cpu_zero,
    .synchronize = tr_cpu_synchronize,
    .gemm = tr_cpu_gemm,
    .add = tr_cpu_add,
    .axpy = tr_cpu_axpy,
    .scale = tr_cpu_scale,
    .bias_add = tr_cpu_bias_add,
    .bias_backward = tr_cpu_bias_backward,
    .layernorm_forward = tr_cpu_layernorm_forward,
    .layernorm_backward = tr_cpu_layernorm_backward,
    .gelu_forward = tr_cpu_gelu_forward,
    .gelu_backward = tr_cpu_gelu_backward,
    .attention_forward = tr_cpu_attention_forward,
    .attention_backward = tr_cpu_attention_backward,
    .xent_row_max = tr_cpu_xent_row_max,
    .xent_row_sumexp = tr_cpu_xent_row_sumexp,
    .xent_pick = tr_cpu_xent_pick,
    .xent_loss = tr_cpu_xent_loss,
    .xent_backward = tr_cpu_xent_backward,
    .embedding_forward = tr_cpu_embedding_forward,
    .embedding_backward = tr_cpu_embedding_backward,
    .position_forward = tr_cpu_position_forward,
    .position_backward = tr_cpu_position_backward,
    .adamw = tr_cpu_adamw,
    .sumsq = tr_cpu_sumsq,
};

const tr_kernels *tr_kernels_cpu(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, cpu_setup);
    return &cpu_table;
}
