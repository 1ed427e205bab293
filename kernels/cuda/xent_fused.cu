// The chunked head's cross-entropy in one pass (kernels.h's xent_stats_loss_backward16): one
// block of 512 threads per row, xent_fused.cuh's xf::row (the row copied once into shared
// memory, its statistics and loss, its gradient over the logits: 4 bytes an element move, not
// the two ops' 6). Rows past the shared memory, and TRIDENT_CUDA_XENT=two-pass, take the two
// ops (softmax.cu).
#include <stdint.h>

#include "kernels/cuda/grid.cuh"
#include "kernels/cuda/mma_prims.cuh"
#include "kernels/cuda/xent_fused.cuh"

namespace {

constexpr int THREADS = 512; // two blocks an SM with rows of up to ~100 KiB

__global__ void __launch_bounds__(THREADS, 2) xent_fused16_kernel(xf::args a)
{
    xf::row<THREADS>(a);
}

bool two_pass()
{
    static const bool on = cu_env_is("TRIDENT_CUDA_XENT", "two-pass");
    return on;
}

} // namespace

extern "C" {

void cu_xent_stats_loss_backward16(tr_stream s, float *losses, float *maxv, float *sumexp,
                                   float *picked, uint16_t *logits16, const int32_t *targets,
                                   const float *weights, int N, int V, int n_valid, int v_start,
                                   float scale)
{
    if (N <= 0)
        return;
    /* the kernel's static shared memory (none expected: its row and sums are dynamic) */
    static size_t static_bytes = (size_t)-1;
    static int opted; /* the dynamic bytes opted into so far */
    if (static_bytes == (size_t)-1) {
        struct cudaFuncAttributes fa;
        static_bytes = cudaFuncGetAttributes(&fa, xent_fused16_kernel) == cudaSuccess
                           ? fa.sharedSizeBytes
                           : 1024;
    }
    size_t bytes = xf::shared_bytes<THREADS>(V);
    /* (refused: the two ops instead) */
    bool fits = bytes + static_bytes <= (size_t)cu_smem_optin() &&
                tr_cu_opt_in_once(xent_fused16_kernel, bytes, static_bytes, opted);
    if (two_pass() || V <= 0 || !fits) {
        cu_xent_stats16(s, maxv, sumexp, picked, logits16, targets, N, V, n_valid, v_start);
        cu_xent_loss_backward16(s, losses, logits16, logits16, maxv, sumexp, picked, targets,
                                weights, N, V, n_valid, v_start, scale);
        return;
    }
    xf::args a = {losses, maxv,   sumexp,  picked, logits16, targets, weights,
                  V,      n_valid, v_start, scale,  V % 8 == 0 && ((uintptr_t)logits16 & 15) == 0};
    xent_fused16_kernel<<<N, THREADS, bytes, cu_stream(s)>>>(a);
    cu_launched("xent_stats_loss_backward16");
}

} // extern "C"
