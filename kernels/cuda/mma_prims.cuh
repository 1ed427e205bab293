// kernels/cuda/ — the few warp-level primitives the tensor-core kernels (flash_mma.cuh) are
// written against, as the GPU runs them. tests/cuda/warp_emu.hpp defines the same names on the
// host (one thread per lane, shuffles and mma through per-warp exchange), so the same kernel
// source is run and tested without a GPU. Contract of each:
//   fm_tid() fm_bidx() fm_bidy() fm_gridx()   threadIdx.x, blockIdx.x/.y, gridDim.x
//   fm_sync()                  __syncthreads: every thread of the block, uniform control flow
//   fm_shared()                the block's dynamic shared memory
//   fm_shfl_xor(v, m)          v of lane (lane ^ m); every lane of the warp calls it
//   fm_mma(c, a, b)            c (16 x 8 fp32, 4 per lane) += A (16 x 16 bf16, 4 x 2 per lane)
//                              B (16 x 8 bf16, 2 x 2 per lane): mma.sync m16n8k16 row.col, the
//                              PTX fragment layouts (lane = 4 g + t: A rows g, g + 8, columns
//                              2t, 2t + 1 and those + 8; B rows 2t, 2t + 1 (+ 8), column g; C
//                              rows g, g + 8, columns 2t, 2t + 1); a 32-bit register holds two
//                              bf16, the lower-indexed one in the low half
//   fm_pack(lo, hi)            two floats rounded to bf16 (nearest even) in one register
//   fm_bf16(x)                 one float rounded to bf16 bits
//   fm_st32(p, v)              32-bit shared-memory store at an even bf16 index
//   fm_ldsm4(r, p)             ldmatrix .x4: four 8 x 8 bf16 matrices from shared memory, lane
//                              L giving the 16-byte-aligned address of row L % 8 of matrix L / 8;
//                              r[j] of lane L = matrix j's row L / 4, columns 2 (L % 4) and + 1
//   fm_ldsm4_t(r, p)           the same with .trans: r[j] of lane L = matrix j's rows 2 (L % 4)
//                              and + 1 of column L / 4 (the lower row in the low half)
//   fm_cp16(dst, src, full)    cp.async of 16 bytes global -> shared (both 16-byte aligned);
//                              zeros into dst when !full (src then not read). Lands by the
//                              issuing thread's fm_cp_wait0 (then fm_sync for the block)
//   fm_cp_commit() fm_cp_wait0()  close the thread's group of copies; wait for all of them
//   fm_ldg4(p, v)              v[0..3] = p[0..3] (global fp32, 16-byte aligned)
//   fm_stg32(p, v)             two bf16 (a fm_pack) into global memory at an even bf16 index
//   fm_ldcg2(p, v) fm_stcg2(p, x, y)  8 bytes of fp32 global memory through L2 (not the SM's
//                              L1, which does not see other blocks' writes), 8-byte aligned
//   fm_ticket(p, n)            (one thread) atomicAdd(p, 1): the block's place in the order the
//                              blocks started, 0 .. n - 1; the last of n sets *p back to 0
//   fm_warp_wait(p, want)      (every lane of a warp) until the global int *p is want, set by
//                              another block's fm_post; the warp's later loads see what that
//                              block stored before its barrier (lane 0's acquire load, no fence).
//                              After ~4 s of waiting: a trap (the process's CUDA context is
//                              lost, an error kept: not a hang)
//   fm_post(p, v)              (one thread, after a block barrier) *p = v, released: the
//                              block's global stores before the barrier are seen by a warp
//                              whose fm_warp_wait sees v (one release a block, where a fence a
//                              warp would cost each warp a MEMBAR)
//   fm_exp2 fm_log fm_min      (fm_exp2: 2^x, the MUFU's approximation)
//   FM_DEV FM_HD FM_KERNEL     qualifiers of device, host-and-device, kernel functions
//   FM_UNROLL FM_UNROLL_2 FM_UNROLL_4  unroll a loop fully, by 2, by 4; FM_ROLLED not at all
//   FM_KERNEL_MIN(n)           a kernel the compiler fits n blocks an SM (registers capped)
#ifndef TR_KERNELS_CUDA_MMA_PRIMS_CUH
#define TR_KERNELS_CUDA_MMA_PRIMS_CUH

#include <cuda_bf16.h>
#include <stdint.h>

#define FM_DEV __device__ __forceinline__
#define FM_KERNEL __global__ void __launch_bounds__(128)
#define FM_KERNEL_MIN(blocks) __global__ void __launch_bounds__(128, blocks) // blocks per SM
#define FM_UNROLL _Pragma("unroll")
#define FM_UNROLL_2 _Pragma("unroll 2")
#define FM_UNROLL_4 _Pragma("unroll 4")
#define FM_ROLLED _Pragma("unroll 1")
#define FM_HD __host__ __device__

FM_DEV int fm_tid() { return (int)threadIdx.x; }
FM_DEV int fm_bidx() { return (int)blockIdx.x; }
FM_DEV int fm_bidy() { return (int)blockIdx.y; }
FM_DEV int fm_gridx() { return (int)gridDim.x; }
FM_DEV void fm_sync() { __syncthreads(); }
FM_DEV unsigned char *fm_shared()
{
    extern __shared__ __align__(16) unsigned char fm_dynamic_smem[];
    return fm_dynamic_smem;
}
FM_DEV float fm_shfl_xor(float v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }
FM_DEV int fm_min(int a, int b) { return min(a, b); }
FM_DEV float fm_exp2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
FM_DEV float fm_log(float x) { return logf(x); }

FM_DEV void fm_mma(float c[4], const uint32_t a[4], const uint32_t b[2])
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

FM_DEV uint32_t fm_pack(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi); // .x = lo: the low half
    return *reinterpret_cast<uint32_t *>(&v);
}

FM_DEV uint16_t fm_bf16(float x)
{
    __nv_bfloat16 v = __float2bfloat16_rn(x);
    return *reinterpret_cast<uint16_t *>(&v);
}

FM_DEV void fm_st32(uint16_t *p, uint32_t v) { *reinterpret_cast<uint32_t *>(p) = v; }
FM_DEV uint32_t fm_smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}
FM_DEV void fm_ldsm4(uint32_t r[4], const uint16_t *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(fm_smem_addr(p)));
}
FM_DEV void fm_ldsm4_t(uint32_t r[4], const uint16_t *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(fm_smem_addr(p)));
}
FM_DEV void fm_cp16(uint16_t *dst, const uint16_t *src, bool full)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(fm_smem_addr(dst)),
                 "l"(src), "r"(full ? 16 : 0)
                 : "memory");
}
FM_DEV void fm_cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
FM_DEV void fm_cp_wait0() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }
FM_DEV void fm_stg32(uint16_t *p, uint32_t v) { *reinterpret_cast<uint32_t *>(p) = v; }
FM_DEV void fm_ldg4(const float *p, float v[4])
{
    float4 x = __ldg(reinterpret_cast<const float4 *>(p));
    v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
}
FM_DEV void fm_ldcg2(const float *p, float v[2])
{
    float2 x = __ldcg(reinterpret_cast<const float2 *>(p));
    v[0] = x.x, v[1] = x.y;
}
FM_DEV void fm_stcg2(float *p, float x, float y)
{
    __stcg(reinterpret_cast<float2 *>(p), make_float2(x, y));
}
FM_DEV int fm_ticket(int *p, int n)
{
    int t = atomicAdd(p, 1);
    if (t == n - 1)
        atomicExch(p, 0);
    return t;
}
FM_DEV int fm_ld_acquire(const int *p)
{
    int v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}
FM_DEV void fm_warp_wait(const int *p, int want)
{
    // An acquire load, not a fence: sm_90 makes it the load and an L1 invalidation
    // (CCTL.IVALL), where fence.acq_rel.gpu adds a MEMBAR.ALL.GPU, a full fence that waits
    // until the warp's earlier memory operations are performed (perhaps the next tiles'
    // cp.async too), once a step. Mostly the flag is set already: one load. Else relaxed
    // polls (an acquire each would drop the L1 each time), then the acquire again (still
    // want: only this block's post, after its barrier, changes the flag next).
    if ((threadIdx.x & 31) == 0 && fm_ld_acquire(p) != want) {
        unsigned ns = 32;
        for (int polls = 0;; polls++) {
            int v;
            __nanosleep(ns);
            ns = ns < 256 ? 2 * ns : ns;
            asm volatile("ld.relaxed.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
            if (v == want)
                break;
            if (polls == 1 << 24) // (~4 s at 256 ns a poll)
                __trap();
        }
        (void)fm_ld_acquire(p);
    }
    __syncwarp(); // (lane 0's acquire, then the other lanes' loads)
}
FM_DEV void fm_post(int *p, int v)
{
    asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

#endif
