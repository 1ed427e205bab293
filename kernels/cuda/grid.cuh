// kernels/cuda/ — internal to the .cu files: grid sizing and warp reductions.
#ifndef TR_KERNELS_CUDA_GRID_CUH
#define TR_KERNELS_CUDA_GRID_CUH

#include "kernels/cuda/cuda_internal.h"

// Blocks of CU_THREADS for a grid-stride loop over n elements (at least 1).
static inline unsigned tr_cu_blocks(size_t n)
{
    size_t b = (n + CU_THREADS - 1) / CU_THREADS;
    if (b > CU_MAX_BLOCKS)
        b = CU_MAX_BLOCKS;
    return (unsigned)(b ? b : 1);
}

#define TR_CU_GRID_STRIDE(i, n)                                                             \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                  \
         i += (size_t)gridDim.x * blockDim.x)

static __device__ __forceinline__ float tr_cu_warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __device__ __forceinline__ double tr_cu_warp_sum_d(double v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __device__ __forceinline__ float tr_cu_warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// kernel opted into `bytes` of dynamic shared memory where they and its static bytes pass
// 48 KiB (once per size it grows to: opted); false when the device refuses (nothing noted: the
// caller falls back)
template <typename K>
static bool tr_cu_opt_in_once(K kernel, size_t bytes, size_t static_bytes, int &opted)
{
    if (bytes + static_bytes <= 48 * 1024 || (int)bytes <= opted)
        return true;
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes) !=
        cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    opted = (int)bytes;
    return true;
}

#endif
