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

// Sums of exponentials relative to a running maximum (the online softmax): (m, s) += one value
// v, and (m, s) += (m2, s2), a pair of its own (s == 0: empty).
static __device__ __forceinline__ void tr_cu_online_one(float &m, float &s, float v)
{
    if (v > m) {
        s = s * expf(m - v) + 1.0f;
        m = v;
    } else {
        s += expf(v - m);
    }
}

static __device__ __forceinline__ void tr_cu_online_add(float &m, float &s, float m2, float s2)
{
    float mn = fmaxf(m, m2);
    s = (s == 0.0f ? 0.0f : s * expf(m - mn)) + (s2 == 0.0f ? 0.0f : s2 * expf(m2 - mn));
    m = mn;
}

// The threads' (m, s) pairs combined over a block of THREADS (a multiple of 32, at most 1024):
// within each warp, then warp 0 over the warps' pairs; thread 0 holds the block's. Every
// thread of the block calls it (one barrier inside).
template <int THREADS> static __device__ void tr_cu_block_online(float &m, float &s)
{
    __shared__ float part_m[THREADS / 32], part_s[THREADS / 32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int o = 16; o > 0; o >>= 1)
        tr_cu_online_add(m, s, __shfl_xor_sync(0xffffffffu, m, o),
                         __shfl_xor_sync(0xffffffffu, s, o));
    if (lane == 0)
        part_m[warp] = m, part_s[warp] = s;
    __syncthreads();
    if (warp != 0)
        return;
    m = lane < THREADS / 32 ? part_m[lane] : -INFINITY;
    s = lane < THREADS / 32 ? part_s[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1)
        tr_cu_online_add(m, s, __shfl_xor_sync(0xffffffffu, m, o),
                         __shfl_xor_sync(0xffffffffu, s, o));
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
