// kernels/cuda/ — internal to the .cu files: the online softmax's (max, sum) pairs, written on
// mma_prims.cuh's primitives (include it, or tests/cuda/warp_emu.hpp on the host, first) so
// that tests/cuda's warp emulator runs the very source the GPU does.
//   tr_cu_online_one(m, s, v)        (m, s) += one value v: m the running max, s the sum of
//                                    e^(x - m) so far (s == 0: nothing yet; -inf values add
//                                    nothing, a NaN makes s NaN)
//   tr_cu_online_add(m, s, m2, s2)   (m, s) += another pair
//   tr_cu_block_online<THREADS>(m, s, part)   the pairs of a block of THREADS threads (a
//                                    multiple of 32, at most 1024) combined: within each warp,
//                                    then warp 0 over the warps' pairs; thread 0 holds the
//                                    block's. part: 2 THREADS / 32 floats of shared memory.
//                                    Every thread calls it (one barrier inside).
#ifndef TR_KERNELS_CUDA_ONLINE_SOFTMAX_CUH
#define TR_KERNELS_CUDA_ONLINE_SOFTMAX_CUH

#include <math.h>

FM_DEV void tr_cu_online_one(float &m, float &s, float v)
{
    if (v > m) {
        s = s * expf(m - v) + 1.0f;
        m = v;
    } else if (v != -INFINITY) { // (e^-inf adds nothing: no -inf - -inf while m is -inf)
        s += expf(v - m);
    }
}

FM_DEV void tr_cu_online_add(float &m, float &s, float m2, float s2)
{
    float mn = fmaxf(m, m2);
    s = (s == 0.0f ? 0.0f : s * expf(m - mn)) + (s2 == 0.0f ? 0.0f : s2 * expf(m2 - mn));
    m = mn;
}

template <int THREADS> FM_DEV void tr_cu_block_online(float &m, float &s, float *part)
{
    static_assert(THREADS % 32 == 0 && THREADS <= 1024, "a block of whole warps");
    float *part_m = part, *part_s = part + THREADS / 32;
    int lane = fm_tid() % 32, warp = fm_tid() / 32;
    for (int o = 16; o > 0; o >>= 1)
        tr_cu_online_add(m, s, fm_shfl_xor(m, o), fm_shfl_xor(s, o));
    if (lane == 0)
        part_m[warp] = m, part_s[warp] = s;
    fm_sync();
    if (warp != 0)
        return;
    m = lane < THREADS / 32 ? part_m[lane] : -INFINITY;
    s = lane < THREADS / 32 ? part_s[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1)
        tr_cu_online_add(m, s, fm_shfl_xor(m, o), fm_shfl_xor(s, o));
}

#endif
