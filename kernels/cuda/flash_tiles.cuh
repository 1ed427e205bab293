// flash.cu's building blocks (included by flash.cu alone: its anonymous namespace): the
// kernels' arguments, offsets into a qkv row, the storages' conversions, a tile's load into
// shared memory, the block's tile products (fp32 FMA, or bf16 wmma with fp32 accumulation),
// shared-memory carving and sizes, the masked score. Shapes and storages as flash.cu says.
#ifndef TR_KERNELS_CUDA_FLASH_TILES_CUH
#define TR_KERNELS_CUDA_FLASH_TILES_CUH

#include <mma.h>
#include <type_traits>

#include "kernels/cuda/bf16.h"
#include "kernels/cuda/dropout.cuh"

#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

namespace {

constexpr int FA_THREADS = 128; // 4 warps
constexpr int FA_WARPS = FA_THREADS / 32;
constexpr size_t FA_SMEM_CAP = 120 * 1024;
constexpr int FA_MAX_HS = 256;

// The output is fp32 (out, out_c) or bf16 bits (out16, out16_c) as the kernel's O says: one
// pointer either way (a larger struct made ptxas spill in fa_backward_kv<bf16, 32>).
struct fa_args {
    union { const float *qkv; const uint16_t *qkv16; }; // the kernels' Q
    union { const float *dout; const uint16_t *dout16; }; // the backward's: Q's storage
    union { const float *out_c; const uint16_t *out16_c; }; // the backward's
    const float *lse_c, *alibi;
    const int32_t *seg;
    union { float *out; uint16_t *out16; }; // the forward's
    float *lse;
    union { float *dqkv; uint16_t *dqkv16; }; // the backward's Q
    float *D; // D: (B, NH, T) row sums, then (B, T) segment starts (int)
    int B, T, NH, NG, R, HS, C, C3;
    float scale;
};

// The kernels' DROP variants' (kernels.h's attention_gqa_dropout_*): apart, so that the others'
// parameters stay as they were
struct fa_drop_args : fa_args {
    drop::params dr;
};
template <bool DROP> using fa_args_t = std::conditional_t<DROP, fa_drop_args, fa_args>;

__device__ __forceinline__ size_t q_off(const fa_args &a, int h)
{
    return (size_t)(h / a.R) * (a.R + 2) * a.HS + (size_t)(h % a.R) * a.HS;
}

__device__ __forceinline__ size_t k_off(const fa_args &a, int g)
{
    return (size_t)g * (a.R + 2) * a.HS + (size_t)a.R * a.HS;
}

__device__ __forceinline__ int *seg_starts(const fa_args &a)
{
    return reinterpret_cast<int *>(a.D + (size_t)a.B * a.NH * a.T);
}

template <typename Tin> __device__ __forceinline__ Tin to_in(float x);
template <> __device__ __forceinline__ float to_in<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 to_in<__nv_bfloat16>(float x)
{
    return __float2bfloat16_rn(x);
}
// One element of the output in storage O: fp32, or bf16 bits (bf16.h's rounding, the CPU's).
__device__ __forceinline__ void put(float *p, float v) { *p = v; }
__device__ __forceinline__ void put(uint16_t *p, float v) { *p = bf16_from_f32(v); }
// The same as a value of storage Q (the backward's dqkv; put's pointer form made ptxas spill
// in fa_backward_kv<bf16, 32>).
template <typename Q> __device__ __forceinline__ Q stored(float v);
template <> __device__ __forceinline__ float stored<float>(float v) { return v; }
template <> __device__ __forceinline__ uint16_t stored<uint16_t>(float v)
{
    return bf16_from_f32(v);
}
__device__ __forceinline__ float get(const float *p) { return *p; }
__device__ __forceinline__ float get(const uint16_t *p) { return bf16_to_f32(*p); }
__device__ __forceinline__ const float *qkv_of(const fa_args &a, const float *) { return a.qkv; }
__device__ __forceinline__ const uint16_t *qkv_of(const fa_args &a, const uint16_t *)
{
    return a.qkv16;
}
__device__ __forceinline__ const float *dout_of(const fa_args &a, const float *) { return a.dout; }
__device__ __forceinline__ const uint16_t *dout_of(const fa_args &a, const uint16_t *)
{
    return a.dout16;
}
__device__ __forceinline__ float *dqkv_of(const fa_args &a, const float *) { return a.dqkv; }
__device__ __forceinline__ uint16_t *dqkv_of(const fa_args &a, const uint16_t *)
{
    return a.dqkv16;
}

// Row stride of an input tile: fp32 odd (no bank conflicts in the scalar products), bf16
// DP (wmma's 32-byte aligned rows).
template <typename Tin> __host__ __device__ constexpr int tile_ld(int DP)
{
    return sizeof(Tin) == 4 ? DP + 1 : DP;
}

// dst (TILE x DP, row stride tile_ld) = rows [r0, r0 + n) of the HS-wide slice at src (row
// stride ld; fp32 or bf16 bits), zero past n rows and past HS columns.
template <typename Tin, int TILE, typename S>
__device__ void load_tile(Tin *dst, const S *src, int ld, int r0, int n, int HS, int DP)
{
    int LT = tile_ld<Tin>(DP);
    for (int idx = threadIdx.x; idx < TILE * DP; idx += FA_THREADS) {
        int i = idx / DP, d = idx % DP;
        float v = i < n && d < HS ? get(src + (size_t)(r0 + i) * ld + d) : 0.0f;
        dst[i * LT + d] = to_in<Tin>(v);
    }
}

// C (M x N, row stride ldc) = (acc ? C : 0) + alpha op(A) op(B), op(A) M x K, op(B) K x N.
// A is stored M x K (row stride lda), or K x M when TA; B is K x N (ldb), or N x K when TB.
// M, N, K multiples of 16. The block's threads share the work; C is not read by other
// threads before the caller's __syncthreads.
template <bool TA, bool TB>
__device__ void block_mm(float *C, int ldc, const float *A, int lda, const float *B, int ldb,
                         int M, int N, int K, float alpha, bool acc)
{
    for (int idx = threadIdx.x; idx < M * N; idx += FA_THREADS) {
        int i = idx / N, j = idx % N;
        float s = 0.0f;
        for (int k = 0; k < K; k++) {
            float x = TA ? A[k * lda + i] : A[i * lda + k];
            float y = TB ? B[j * ldb + k] : B[k * ldb + j];
            s = fmaf(x, y, s);
        }
        C[i * ldc + j] = acc ? C[i * ldc + j] + alpha * s : alpha * s;
    }
}

template <bool TA, bool TB>
__device__ void block_mm(float *C, int ldc, const __nv_bfloat16 *A, int lda,
                         const __nv_bfloat16 *B, int ldb, int M, int N, int K, float alpha,
                         bool acc)
{
    using namespace nvcuda;
    using la = typename std::conditional<TA, wmma::col_major, wmma::row_major>::type;
    using lb = typename std::conditional<TB, wmma::col_major, wmma::row_major>::type;
    int warp = threadIdx.x / 32, tn = N / 16, tiles = (M / 16) * tn;
#pragma unroll 1
    for (int tile = warp; tile < tiles; tile += FA_WARPS) {
        int i = tile / tn * 16, j = tile % tn * 16;
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> prod;
        wmma::fill_fragment(prod, 0.0f);
#pragma unroll 1
        for (int k = 0; k < K; k += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, la> fa;
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, lb> fb;
            wmma::load_matrix_sync(fa, TA ? A + k * lda + i : A + i * lda + k, lda);
            wmma::load_matrix_sync(fb, TB ? B + j * ldb + k : B + k * ldb + j, ldb);
            wmma::mma_sync(prod, fa, fb, prod);
        }
        float *c = C + i * ldc + j;
        if (acc) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> old;
            wmma::load_matrix_sync(old, c, ldc, wmma::mem_row_major);
            for (int e = 0; e < old.num_elements; e++)
                old.x[e] += alpha * prod.x[e];
            wmma::store_matrix_sync(c, old, ldc, wmma::mem_row_major);
        } else {
            for (int e = 0; e < prod.num_elements; e++)
                prod.x[e] *= alpha;
            wmma::store_matrix_sync(c, prod, ldc, wmma::mem_row_major);
        }
    }
}

// Shared memory carving: 128-byte aligned pieces.
struct carver {
    unsigned char *p;
    template <typename T> __device__ T *take(size_t count)
    {
        T *r = reinterpret_cast<T *>(p);
        p += (count * sizeof(T) + 127) & ~(size_t)127;
        return r;
    }
};

__host__ __device__ constexpr size_t piece(size_t bytes) { return (bytes + 127) & ~(size_t)127; }

// Bytes of each kernel's shared memory (the carving order of the kernels below).
__host__ __device__ inline size_t fwd_smem(int tile, int DP, size_t in)
{
    size_t td = (size_t)tile * DP, tt = (size_t)tile * tile, tl = (size_t)tile * (DP + 1);
    return 3 * piece(tl * in) + piece(tt * 4) + piece(tt * in) + piece(td * 4) +
           3 * piece(tile * 4) + piece(tile * 4);
}

__host__ __device__ inline size_t dkv_smem(int tile, int DP, size_t in)
{
    size_t td = (size_t)tile * DP, tt = (size_t)tile * tile, tl = (size_t)tile * (DP + 1);
    return 4 * piece(tl * in) + 2 * piece(tt * 4) + 2 * piece(tt * in) + 2 * piece(td * 4) +
           3 * piece(tile * 4);
}

__host__ __device__ inline size_t dq_smem(int tile, int DP, size_t in)
{
    size_t td = (size_t)tile * DP, tt = (size_t)tile * tile, tl = (size_t)tile * (DP + 1);
    return 4 * piece(tl * in) + 2 * piece(tt * 4) + piece(tt * in) + piece(td * 4) +
           3 * piece(tile * 4);
}

// Scaled, masked score of query row t (segment start s0) and key j: -INF when masked.
__device__ __forceinline__ float masked_score(const fa_args &a, float s, int h, int t, int j,
                                              int s0, bool valid_rc)
{
    if (!valid_rc || j > t || j < s0)
        return -INFINITY;
    s *= a.scale;
    if (a.alibi)
        s += a.alibi[h] * (float)(j - t);
    return s;
}

} // namespace

#endif
