/* Backend lookup by name. */
#include "kernels/kernels.h"

#include "core/core.h"

#include <string.h>

#ifdef TR_HAVE_CUDA
#include "kernels/cuda/cuda.h"
#endif

void tr_kernels_without_bf16_storage(tr_kernels *t)
{
    t->linear_forward = NULL, t->linear_backward = NULL;
    t->gemm_out16 = NULL, t->gemm_a16 = NULL, t->xent_stats16 = NULL;
    t->xent_loss_backward16 = NULL, t->gelu_forward16 = NULL, t->gemm_b16 = NULL;
    t->xent_stats_loss_backward16 = NULL, t->narrow16 = NULL, t->gemm_mixed16 = NULL;
    t->layernorm_forward16 = NULL, t->rmsnorm_forward16 = NULL, t->gelu_backward16 = NULL;
    t->layernorm_backward16 = NULL, t->rmsnorm_backward16 = NULL;
    t->linear_gelu_forward16 = NULL, t->linear_backward_gelu16 = NULL;
    t->gelu_exact_forward16 = NULL, t->gelu_exact_backward16 = NULL;
    t->relu_forward16 = NULL, t->relu_backward16 = NULL;
    t->attention_forward16 = NULL, t->attention_backward16 = NULL;
    t->attention_gqa_forward16 = NULL, t->attention_gqa_backward16 = NULL;
    t->attention_forward_qkv16 = NULL, t->attention_backward_qkv16 = NULL;
}

int tr_kernels_known(const char *name)
{
    static const char *const names[] = {"cpu", "cpu-bf16", "cpu-fp16", "cuda", "cuda-fp32"};
    for (size_t i = 0; name && i < sizeof names / sizeof *names; i++)
        if (!strcmp(name, names[i]))
            return 1;
    return 0;
}

const tr_kernels *tr_kernels_get(const char *name)
{
    if (!name) {
        tr_fail(TR_ERR_CONFIG, "no kernel backend named (expected \"cpu\" or \"cuda\")");
        return NULL;
    }
    if (strcmp(name, "cpu") == 0)
        return tr_kernels_cpu();
    if (strcmp(name, "cpu-bf16") == 0 || strcmp(name, "cpu-fp16") == 0)
        return tr_kernels_cpu_rounded(name + 4);
    if (strcmp(name, "cuda") == 0 || strcmp(name, "cuda-fp32") == 0) {
#ifdef TR_HAVE_CUDA /* NULL with "no CUDA device: ..." where no GPU is usable */
        return tr_kernels_cuda(strcmp(name, "cuda") == 0 ? TR_CUDA_BF16 : TR_CUDA_FP32);
#else
        tr_fail(TR_ERR_CONFIG, "the CUDA backend is not built in");
        return NULL;
#endif
    }
    tr_fail(TR_ERR_CONFIG, "unknown kernel backend \"%s\" (expected \"cpu\" or \"cuda\")", name);
    return NULL;
}
