// Fused causal attention on the tensor cores, bf16 mode (kernels.h's attention_* and
// attention_gqa_* with bf16 products): the flash-attention scheme of flash.cu with the tile
// products in registers, mma.sync m16n8k16 (bf16 operands, fp32 accumulation; sm_80, sm_90),
// written against the primitives of mma_prims.cuh so that tests/cuda/warp_emu.hpp runs this
// same source on the host (tests/cuda/flash_emu.cc).
//
// Shapes: qkv (B, T, NG, R+2, D) fp32 (R = NH / NG query heads per group, then the group's
// key and value), or qkv16 bf16 (the kernels' Q = uint16_t: kernels.h's attention_*_qkv16;
// the backward's dqkv then dqkv16, bf16, as each lane's column pair rounded and stored at once),
// out (B, T, NH, D) fp32, or out16 bf16 (forward<D, uint16_t>: kernels.h's
// attention_*forward16), lse and the backward's row sums Drow (B, NH, T), seg
// (B, T) segment ids or null, starts (B, T) the first position of each row's segment (the
// backward's, from flash.cu's fa_prepare). D, the head size, is 16, 32, 64 or 128.
//
// Blocks of 4 warps; a warp owns 16 rows of the block's tile (queries in forward and dQ,
// keys in dK dV). Tiles are rounded to bf16 when loaded from global memory into shared memory
// (a bf16 qkv16 copied as it is by cp.async, so the next tile streams in while the block
// computes on this one: two stages of the streamed tiles; row stride D + 8 halves, so the 8
// rows of an ldmatrix fall in 32 banks). Fragments come from shared memory by ldmatrix: A
// operands and B operands whose sum runs along their rows (K in Q K^T, V in dO V^T, Q in K
// Q^T, dO in V dO^T) as they are stored, B operands whose sum runs down their columns (V in
// P V, dO in P^T dO, Q in dS^T Q, K in dS K) by ldmatrix .trans: no transposed copies. A
// score tile S (16 x 64 per warp) lives in the mma accumulators and is turned into the A
// operand of the next product in registers (the C fragment of columns 16k .. 16k + 15 is the
// A fragment of that k step). The forward keeps its 16 query rows' fragments in registers
// for all key tiles. Masks are applied only to tiles that need them (the diagonal, segment
// edges, rows past T).
//   forward   block (query tile of 64, b * NH + h): over key tiles at or left of the diagonal
//             S = Q K^T, the online softmax in registers (row max and sum over the 4 lanes
//             of a row), O += P V; out = O / l, lse = m + log l.
//   dK dV     block (key tile of 64, b * NG + g): over the group's R heads and the query
//             tiles of BQ rows from the key tile on: S^T = K Q^T, dP^T = V dO^T,
//             P = exp(S - lse), dS = P (dP - Drow); dV += P^T dO, dK += dS^T Q.
//   dQ        block (query tile of 64, b * NH + h): over key tiles, S and dP again,
//             dQ += dS K.
//   fused     (TRIDENT_CUDA_ATTENTION_BWD=fused) dK dV's blocks also add dS K into dQ: each
//             step's dS^T through shared memory, dQ's partial sums passed from block to block
//             in a fixed order (the last key tile first) through an fp32 scratch and a flag a
//             warp (flash_mma_backward.cuh's dq_add): S and dP once, 5 products, not 7.
//   dropout   (kernels.h's attention_gqa_dropout_*, fp32 storage) the kernels' DROP variants
//             (drop_args): each lane decides its fragment elements' (query, key) in a rolled
//             loop (keep_bits: core/philox.h's Philox, a block of 4 shared by 2 lanes in forward
//             and dQ, by 4 in dK dV's transposed tiles where T is a multiple of 4, else a
//             block per pair of columns or per element) into a bit mask, then P times scale or
//             0 before P V and P^T dO, dS = P (z dP - Drow); the mask never stored.
//             The other variants' code is unchanged (their registers too).
// No atomic adds: every output element is written by one thread, its sum in a fixed order, so
// results are the same run to run. Probabilities and dS are rounded to bf16 as operands, the
// softmax statistics stay fp32 (as flash.cu's wmma kernels, which remain for other head
// sizes).
#ifndef TR_KERNELS_CUDA_FLASH_MMA_CUH
#define TR_KERNELS_CUDA_FLASH_MMA_CUH

#ifdef __CUDACC__
#include "kernels/cuda/mma_prims.cuh"
#endif
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <type_traits>

#include "kernels/cuda/dropout.cuh"

namespace fm {

constexpr int THREADS = 128, WARPS = 4;
constexpr int BM = 64;  // query rows of a forward or dQ block (16 per warp)
constexpr int BN = 64;  // keys per tile (16 per warp in dK dV)
constexpr int PAD = 8;  // halves past each shared row: conflict-free fragment loads
constexpr float LOG2E = 1.4426950408889634f;

struct args {
    union { const float *qkv; const uint16_t *qkv16; }; // the kernels' Q: the input's storage
    union { const float *dout; const uint16_t *dout16; }; // the backward's: Q's storage too
    const float *alibi, *lse_in, *Drow;
    const int32_t *seg, *starts;
    float *out, *lse;
    union { float *dqkv; uint16_t *dqkv16; }; // the backward's Q
    uint16_t *out16; // forward<D, uint16_t>'s output
    int B, T, NH, NG, R, C, C3; // C = NH D, C3 = NG (R + 2) D
    float scale, scale2; // 1 / sqrt(D), and times log2(e): scores in base 2 (fm_exp2)
};

// backward_kv<D, Q, BQ, true>'s (the fused backward), apart so that the other kernels' code
// stays as it was (their parameters' layout steers ptxas's register choices at the cap): dQ's
// partial sums (B, NH, T, D) fp32, a flag per (batch x head, query tile of BQ, warp) and the
// blocks' ticket, the flags and the ticket 0 at a launch and again at its end.
struct fused_args : args {
    float *dq_acc;
    int *dq_flags, *ticket;
};

// The kernels' DROP variants (kernels.h's attention_gqa_dropout_*), apart as fused_args: the
// probabilities P(i, j) of (batch b, head h) times dropout's factor (drop::factor of element
// ((head0 + h) T + i) T + j of sample sample0 + b: scale or 0) before P V in forward, and
// in backward before P^T dO, dS = P (factor dP - Drow).
struct drop_args : args {
    drop::params dr;
};
struct fused_drop_args : fused_args {
    drop::params dr;
};
template <bool DROP> using args_t = std::conditional_t<DROP, drop_args, args>;

// The sizes and scale of a call (pointers left null): qkv (B, T, NG, R+2, D), NH = NG R.
inline args make_args(int B, int T, int NH, int NG, int D, const float *alibi)
{
    args a = {};
    a.B = B, a.T = T, a.NH = NH, a.NG = NG, a.R = NH / NG;
    a.C = NH * D, a.C3 = NG * (a.R + 2) * D;
    a.scale = 1.0f / sqrtf((float)D);
    a.scale2 = a.scale * LOG2E;
    a.alibi = alibi;
    return a;
}

// Query rows of a dK dV step: 32 from D = 64 on, so that the accumulators fit registers (at
// D = 64, 3 blocks an SM instead of 2 with 64 rows: TRIDENT_CUDA_ATTENTION_KV=64 takes 64).
FM_HD constexpr int bq_for(int D) { return D >= 64 ? 32 : 64; }

// Bytes of shared memory of each kernel (the carving order below): the tiles a block keeps,
// and two stages of those it streams.
FM_HD constexpr size_t forward_bytes(int D)
{
    return (size_t)(BM + 4 * BN) * (D + PAD) * 2 + BM * 4 + 4 * 4;
}
FM_HD constexpr size_t backward_kv_bytes(int D, int BQ)
{
    return (size_t)(2 * BN + 4 * BQ) * (D + PAD) * 2 + (size_t)2 * 3 * BQ * 4 + 4 * 4;
}
// The fused backward's scratch for a call (flash_mma.cu's, and the emulator's): dQ's sums
// (floats) and the flags (ints; the ticket is one more, before them)
FM_HD inline size_t fused_sums(const args &a, int D) { return (size_t)a.B * a.NH * a.T * D; }
FM_HD inline size_t fused_flags(const args &a, int BQ)
{
    return (size_t)a.B * a.NH * ((a.T + BQ - 1) / BQ); // (one a head's query tile)
}

// the fused backward's: also the ticket's slot (4 ints) and dS^T (BN x (BQ + PAD) bf16)
FM_HD constexpr size_t backward_fused_bytes(int D, int BQ)
{
    return backward_kv_bytes(D, BQ) + 4 * 4 + (size_t)BN * (BQ + PAD) * 2;
}
FM_HD constexpr size_t backward_q_bytes(int D)
{
    return (size_t)(2 * BM + 4 * BN) * (D + PAD) * 2;
}

FM_DEV size_t q_off(const args &a, int h, int D)
{
    return (size_t)(h / a.R) * (a.R + 2) * D + (size_t)(h % a.R) * D;
}
FM_DEV size_t k_off(const args &a, int g, int D)
{
    return (size_t)g * (a.R + 2) * D + (size_t)a.R * D;
}

// Rows [r0, r0 + n) of a D-wide slice (row stride ld) as a ROWS x D bf16 tile, row-major
// into dst (row stride D + PAD), zeros past n rows. A lane moves 8 columns of a row a step
// (16 bytes of bf16; consecutive lanes along a row): thread x the columns 8 (x % (D / 8)) of
// rows x / (D / 8) + k RSTEP (32-bit byte offsets from the tile's first row: no
// 64-bit arithmetic a row). bf16 (S = uint16_t): cp.async, landing at the caller's fm_cp_wait0 and
// fm_sync, so a tile loads while the block computes on the other; fp32: loaded, rounded and
// stored now (the same bits as the bf16 copy of its values).
template <int D, int ROWS>
FM_DEV void load_tile(uint16_t *dst, const uint16_t *src, int ld, int r0, int n)
{
    constexpr int CH = D / 8, RSTEP = THREADS / CH, STEPS = ROWS / RSTEP;
    static_assert(THREADS % CH == 0 && ROWS % RSTEP == 0, "whole steps");
    static_assert(ROWS <= 64, "2 i ld < 2^32 below");
    int i0 = fm_tid() / CH, d = fm_tid() % CH * 8;
    const char *first = reinterpret_cast<const char *>(src + (size_t)r0 * ld + d);
    FM_UNROLL
    for (int k = 0; k < STEPS; k++) {
        int i = i0 + k * RSTEP; // a row of the tile: 2 i ld < 2^32 (ROWS <= 64, ld < 2^25)
        bool ok = i < n;        // (a row past n reads nothing: its address is the first row's)
        unsigned bytes = ok ? (unsigned)i * (unsigned)ld * 2u : 0u;
        fm_cp16(dst + i * (D + PAD) + d, reinterpret_cast<const uint16_t *>(first + bytes), ok);
    }
}
template <int D, int ROWS>
FM_DEV void load_tile(uint16_t *dst, const float *src, int ld, int r0, int n)
{
    constexpr int CH = D / 8, RSTEP = THREADS / CH, STEPS = ROWS / RSTEP;
    static_assert(THREADS % CH == 0 && ROWS % RSTEP == 0, "whole steps");
    int i0 = fm_tid() / CH, d = fm_tid() % CH * 8;
    FM_UNROLL_2 // (two steps' loads in flight; more hold too many registers at D = 128)
    for (int k = 0; k < STEPS; k++) {
        float v[8] = {};
        if (i0 + k * RSTEP < n) { // (a row's address only where it is read)
            const float *p = src + ((size_t)r0 + i0 + k * RSTEP) * ld + d;
            fm_ldg4(p, v);
            fm_ldg4(p + 4, v + 4);
        }
        FM_UNROLL
        for (int e = 0; e < 8; e += 2)
            fm_st32(dst + (i0 + k * RSTEP) * (D + PAD) + d + e, fm_pack(v[e], v[e + 1]));
    }
}

// The key tile from c0 (rows c0 .. min(c0 + BN, T) - 1) of the group whose keys start at
// kbase (values D after them): K into the stage at kv, V BN rows after it (load_tile's rules).
template <int D, typename S>
FM_DEV void load_kv(uint16_t *kv, const S *kbase, int ld, int c0, int T)
{
    int n = fm_min(BN, T - c0);
    load_tile<D, BN>(kv, kbase, ld, c0, n);
    load_tile<D, BN>(kv + BN * (D + PAD), kbase + D, ld, c0, n);
}

// The key tiles c_begin .. last of the group whose keys start at kbase, streamed through two
// stages at KV (K, then V BN rows after it, in each): the forward's and dQ's loop over them.
template <int D, typename S> struct kv_stream {
    uint16_t *KV;
    const S *kbase;
    int ld, c_begin, last, T;
    FM_DEV uint16_t *stage(int c) const { return KV + ((c - c_begin) & 1) * 2 * BN * (D + PAD); }
    FM_DEV void start() const { load_kv<D>(stage(c_begin), kbase, ld, c_begin * BN, T); }
    // tile c's stage, once tile c + 1's copy into the other stage is issued and committed (its
    // readers passed the last sync)
    FM_DEV const uint16_t *at(int c) const
    {
        if (c < last)
            load_kv<D>(stage(c + 1), kbase, ld, (c + 1) * BN, T);
        fm_cp_commit();
        return stage(c);
    }
};

// The A fragment (16 x 16, columns 16 kk ..) of the 16 rows at a (row stride lda): one
// ldmatrix (matrices: rows 0-7 | 8-15 of columns 0-7, then of columns 8-15).
FM_DEV void frag_a(uint32_t fa[4], const uint16_t *a, int lda, int kk)
{
    int lane = fm_tid() & 31;
    fm_ldsm4(fa, a + ((lane & 7) + (lane >> 3 & 1) * 8) * lda + 16 * kk + (lane >> 4) * 8);
}

// acc[n] (16 x 8, n < N8) += A_kk B^T for one k step: B's rows 8n .. 8n + 7 (row-major, the
// sum over its columns 16 kk ..; row stride ldb), two n a ldmatrix (b0, b1 of n, then of n + 1).
template <int N8>
FM_DEV void mma_step_bt(float (*acc)[4], const uint32_t fa[4], const uint16_t *b, int ldb, int kk)
{
    static_assert(N8 % 2 == 0, "n in pairs");
    int lane = fm_tid() & 31, j = lane >> 3;
    const uint16_t *p = b + (8 * (j >> 1) + (lane & 7)) * ldb + 16 * kk + (j & 1) * 8;
    FM_UNROLL
    for (int n = 0; n < N8; n += 2) {
        uint32_t fb[4];
        fm_ldsm4(fb, p + 8 * n * ldb);
        fm_mma(acc[n], fa, fb);
        fm_mma(acc[n + 1], fa, fb + 2);
    }
}

// acc[n] += A B^T over K: A the fragments fa[K / 16] of a warp's 16 rows (registers), B's rows
// 8n .. 8n + 7 K long in shared memory (row-major, row stride ldb).
template <int K, int N8>
FM_DEV void mma_rbt(float (*acc)[4], const uint32_t (*fa)[4], const uint16_t *b, int ldb)
{
    FM_UNROLL
    for (int kk = 0; kk < K / 16; kk++)
        mma_step_bt<N8>(acc, fa[kk], b, ldb, kk);
}

// x[n] = A B^T and y[n] = C E^T (set, not added to), two products of the same shapes at
// once: A and C a warp's 16 rows in shared memory, B and E as mma_rbt's (row stride ld for
// all four). Each k step's two groups of mma are independent of each other, so one's latency
// passes under the other's; the first k step runs on zeroed accumulators (which ptxas folds
// into the mma's zero register: no zeroing a step), the rest in a loop.
template <int K, int N8>
FM_DEV void mma_sbt2(float (*x)[4], const uint16_t *a, const uint16_t *b, float (*y)[4],
                     const uint16_t *c, const uint16_t *e, int ld)
{
    uint32_t fa[4], fc[4];
    frag_a(fa, a, ld, 0);
    frag_a(fc, c, ld, 0);
    FM_UNROLL
    for (int n = 0; n < N8; n++)
        FM_UNROLL
        for (int q = 0; q < 4; q++)
            x[n][q] = y[n][q] = 0.0f;
    mma_step_bt<N8>(x, fa, b, ld, 0);
    mma_step_bt<N8>(y, fc, e, ld, 0);
    FM_UNROLL_2 // (fully unrolled, the loads of every k step are hoisted: registers run out)
    for (int kk = 1; kk < K / 16; kk++) {
        frag_a(fa, a, ld, kk);
        frag_a(fc, c, ld, kk);
        mma_step_bt<N8>(x, fa, b, ld, kk);
        mma_step_bt<N8>(y, fc, e, ld, kk);
    }
}

// acc[n] += A_kk B for one k step: A the fragment fa (16 x 16), B (rows 16 kk .. + 15, columns
// 8n ..; n < N8) row-major in shared memory (row stride ldb), read transposed by ldmatrix
// .trans (b0, b1 of n, then of n + 1).
template <int N8>
FM_DEV void mma_step_b(float (*acc)[4], const uint32_t fa[4], const uint16_t *b, int ldb, int kk)
{
    static_assert(N8 % 2 == 0, "n in pairs");
    int lane = fm_tid() & 31, j = lane >> 3;
    const uint16_t *q = b + (16 * kk + (j & 1) * 8 + (lane & 7)) * ldb + 8 * (j >> 1);
    FM_UNROLL
    for (int n = 0; n < N8; n += 2) {
        uint32_t fb[4];
        fm_ldsm4_t(fb, q + 8 * n);
        fm_mma(acc[n], fa, fb);
        fm_mma(acc[n + 1], fa, fb + 2);
    }
}

// acc[n] += P B: P (16 x K) as the accumulator fragments p[0 .. K/8) of an earlier product
// (rounded to bf16 here: the C fragment of columns 16 kk .. + 15 is the A fragment of step
// kk), B (K x 8 N8) as mma_step_b's.
template <int K, int N8>
FM_DEV void mma_pb(float (*acc)[4], const float (*p)[4], const uint16_t *b, int ldb)
{
    FM_UNROLL
    for (int kk = 0; kk < K / 16; kk++) {
        uint32_t fa[4] = {fm_pack(p[2 * kk][0], p[2 * kk][1]), fm_pack(p[2 * kk][2], p[2 * kk][3]),
                          fm_pack(p[2 * kk + 1][0], p[2 * kk + 1][1]),
                          fm_pack(p[2 * kk + 1][2], p[2 * kk + 1][3])};
        mma_step_b<N8>(acc, fa, b, ldb, kk);
    }
}

// acc[n] += A B: A (16 x K) stored transposed in shared memory (K rows of A^T from at, the
// warp's 16 columns from there; row stride lda), read by ldmatrix .trans (matrices: rows 0-7
// | 8-15 of A over its columns 0-7, then over 8-15); B (K x 8 N8) as mma_step_b's.
template <int K, int N8>
FM_DEV void mma_tb(float (*acc)[4], const uint16_t *at, int lda, const uint16_t *b, int ldb)
{
    int lane = fm_tid() & 31, j = lane >> 3;
    const uint16_t *q = at + ((j >> 1) * 8 + (lane & 7)) * lda + (j & 1) * 8;
    FM_UNROLL
    for (int kk = 0; kk < K / 16; kk++) {
        uint32_t fa[4];
        fm_ldsm4_t(fa, q + 16 * kk * lda);
        mma_step_b<N8>(acc, fa, b, ldb, kk);
    }
}

// st[i] = the first position of row r0 + i's segment (0 without segments), i < BM; rows past
// n repeat the last. Every thread of the block calls it (found: 4 ints of shared memory). Row
// r0's start: the block scans back 4 x 128 positions a step (each thread 4 independent loads,
// the warps' nearest position of another segment combined through found[]), then lane 0
// carries it along the tile. The caller synchronises before reading st.
FM_DEV void tile_starts(const args &a, int *st, int *found, int b, int r0, int n)
{
    if (!a.seg) {
        for (int i = fm_tid(); i < BM; i += THREADS)
            st[i] = 0;
        return;
    }
    const int32_t *sg = a.seg + (size_t)b * a.T;
    int tid = fm_tid(), key = sg[r0], first = 0;
    for (int top = r0 - 1; top >= 0; top -= 4 * THREADS) { // block-uniform: found[] decides
        float near = -1.0f; // the nearest position before r0 in another segment (exact: < 2^24)
        FM_UNROLL
        for (int k = 0; k < 4; k++) {
            int j = top - k * THREADS - tid;
            if (j >= 0 && sg[j] != key)
                near = fmaxf(near, (float)j);
        }
        for (int m = 16; m; m >>= 1)
            near = fmaxf(near, fm_shfl_xor(near, m));
        if ((tid & 31) == 0)
            found[tid / 32] = (int)near;
        fm_sync();
        int nearest = found[0] > found[1] ? found[0] : found[1];
        nearest = nearest > found[2] ? nearest : found[2];
        nearest = nearest > found[3] ? nearest : found[3];
        fm_sync(); // (found[] is written again by the next step)
        if (nearest >= 0) {
            first = nearest + 1;
            break;
        }
    }
    if (tid == 0) {
        st[0] = first;
        for (int i = 1; i < BM; i++)
            st[i] = i < n && sg[r0 + i] != sg[r0 + i - 1] ? r0 + i : st[i - 1];
    }
}

// Whether query i sees key j: not a key after it, not a query past T, not a key before the
// query's segment start `first`.
FM_DEV bool visible(const args &a, int i, int j, int first)
{
    return i < a.T && j <= i && j >= first;
}

// The scaled score of query i and key j in base 2 (s: q . k; slope2: ALiBi's slope times
// log2 e): log2 e (s / sqrt(D) + slope (j - i)), so exp(x) is fm_exp2 of it.
template <bool ALIBI> FM_DEV float score2(const args &a, float s, float slope2, int i, int j)
{
    return ALIBI ? s * a.scale2 + slope2 * (float)(j - i) : s * a.scale2;
}

// qkv in its storage Q: fp32 or bf16 bits
FM_DEV const float *in_of(const args &a, const float *) { return a.qkv; }
FM_DEV const uint16_t *in_of(const args &a, const uint16_t *) { return a.qkv16; }
FM_DEV float *grad_of(const args &a, const float *) { return a.dqkv; }
FM_DEV uint16_t *grad_of(const args &a, const uint16_t *) { return a.dqkv16; }
FM_DEV const float *dout_of(const args &a, const float *) { return a.dout; }
FM_DEV const uint16_t *dout_of(const args &a, const uint16_t *) { return a.dout16; }

// The forward's output: columns c, c + 1 of a row, fp32 or rounded to bf16 (one 32-bit store).
FM_DEV float *out_of(const args &a, float *) { return a.out; }
FM_DEV uint16_t *out_of(const args &a, uint16_t *) { return a.out16; }
FM_DEV void store_pair(float *p, float x, float y) { p[0] = x, p[1] = y; }
FM_DEV void store_pair(uint16_t *p, float x, float y) { fm_stg32(p, fm_pack(x, y)); }

// The scaled scores (base 2: score2) of a warp's 16 x 8 N8 tile in place (rows i[hf],
// columns j0 + 8 n + 2 t + e & 1 of accumulator s[n][e]), -inf where not visible() unless the
// whole tile is (MASK false: left of the diagonal, inside every row's segment, no row past
// T); mx[hf] gets this lane's largest of row hf. Without a mask or ALiBi the products stay
// as they are (the caller scales them in its exponential's FFMA, and the max: scale2 > 0).
template <bool MASK, bool ALIBI, int N8>
FM_DEV void scores(const args &a, float (*s)[4], float slope2, const int i[2], int j0,
                   const int first[2], float mx[2])
{
    int tq = fm_tid() & 3;
    FM_UNROLL
    for (int n = 0; n < N8; n++)
        FM_UNROLL
        for (int e = 0; e < 4; e++) {
            int hf = e >> 1, j = j0 + 8 * n + 2 * tq + (e & 1);
            float v = !MASK && !ALIBI ? s[n][e]
                      : !MASK || visible(a, i[hf], j, first[hf])
                          ? score2<ALIBI>(a, s[n][e], slope2, i[hf], j)
                          : -INFINITY;
            s[n][e] = v;
            mx[hf] = fmaxf(mx[hf], v);
        }
}
template <int N8>
FM_DEV void scores_of(bool mask, const args &a, float (*s)[4], float slope2, const int i[2],
                      int j0, const int first[2], float mx[2])
{
    if (mask)
        a.alibi ? scores<true, true, N8>(a, s, slope2, i, j0, first, mx)
                : scores<true, false, N8>(a, s, slope2, i, j0, first, mx);
    else
        a.alibi ? scores<false, true, N8>(a, s, slope2, i, j0, first, mx)
                : scores<false, false, N8>(a, s, slope2, i, j0, first, mx);
}

// P (in place of the scores s) = exp(s - lse of the row), or 0 where not visible; dS = P (dP
// - Drow) in place of dP. Rows and columns as scores(): a warp's 16 rows i x 8 N8 columns j
// (TRANS: s holds S^T, rows the keys j0 + ..., columns the queries i0 + ..., whose lse, Drow
// and segment starts are per column). lse2: the rows' lse times log2 e.
// DROP: bit 4 n + e of kept (keep_bits) says whether element s[n][e] is kept: s gets P times
// its factor z (scale or 0: dV's), dS = P (z dP - Drow).
template <bool MASK, bool TRANS, bool ALIBI, int N8, bool DROP = false>
FM_DEV void probabilities(const args &a, float (*s)[4], float (*dp)[4], float slope2, int r0,
                          int c0, const float *lse2, const float *Dr, const int *first, int T,
                          uint32_t kept = 0, float scale = 0.0f)
{
    int lane = fm_tid() & 31, gq = lane >> 2, tq = lane & 3, w = fm_tid() / 32;
    FM_UNROLL
    for (int n = 0; n < N8; n++)
        FM_UNROLL
        for (int e = 0; e < 4; e++) {
            int rr = 16 * w + gq + (e >> 1) * 8, cc = 8 * n + 2 * tq + (e & 1);
            int x = TRANS ? cc : (e >> 1); // the query's index into lse2, Dr, first
            int i = TRANS ? r0 + cc : r0 + rr, j = TRANS ? c0 + rr : c0 + cc;
            bool ok = !MASK || (i < T && j <= i && j >= first[x]); // visible(), T in a register
            float p = ok ? fm_exp2(score2<ALIBI>(a, s[n][e], slope2, i, j) - lse2[x]) : 0.0f;
            if constexpr (DROP) {
                float z = kept >> (4 * n + e) & 1 ? scale : 0.0f;
                s[n][e] = p * z;
                dp[n][e] = p * (z * dp[n][e] - Dr[x]);
            } else {
                s[n][e] = p;
                dp[n][e] = p * (dp[n][e] - Dr[x]);
            }
        }
}
template <bool TRANS, int N8, bool DROP = false>
FM_DEV void probabilities_of(bool mask, const args &a, float (*s)[4], float (*dp)[4],
                             float slope2, int r0, int c0, const float *lse2, const float *Dr,
                             const int *first, int T, uint32_t kept = 0, float scale = 0.0f)
{
#define FM_PROBABILITIES(MASK, ALIBI)                                                           \
    probabilities<MASK, TRANS, ALIBI, N8, DROP>(a, s, dp, slope2, r0, c0, lse2, Dr, first, T, \
                                                kept, scale)
    if (mask)
        a.alibi ? FM_PROBABILITIES(true, true) : FM_PROBABILITIES(true, false);
    else
        a.alibi ? FM_PROBABILITIES(false, true) : FM_PROBABILITIES(false, false);
#undef FM_PROBABILITIES
}

// Dropout's decisions for a lane's elements of a warp's 16 x 8 N8 tile (rows and columns as
// probabilities(): element s[n][e] at query i, key j; TRANS: rows the keys), bit 4 n + e set
// where kept. A rolled loop, one decision (TRANS) or one pair of a row's columns (one Philox
// block, or two where the pair crosses one) a step: the Philox rounds' registers once, beside
// the tile's accumulators. When T is a multiple of 4, lanes share Philox blocks (one block a
// lane a step, passed by shuffles): not TRANS, every 4 columns from 8 n + 4 (t >> 1) are one
// block, whose two rows lanes t and t ^ 1 share, each drawing one (t & 1); TRANS, the keys
// (rows) 4 m .. 4 m + 3 of the 4 lanes g = 4 m + q are one block for each of their 4 (query
// column, row half) pairs: lane q draws pair q for all four.
template <bool TRANS, int N8>
FM_DEV uint32_t keep_bits(const drop::params &dr, drop::head_at dz, int r0, int c0, int T)
{
    static_assert(N8 <= 8, "32 bits");
    int lane = fm_tid() & 31, gq = lane >> 2, tq = lane & 3, w = fm_tid() / 32;
    uint32_t bits = 0;
    if (TRANS && T % 4 == 0) { // (block-uniform)
        int q = gq & 3, j = c0 + 16 * w + (gq & ~3) + 8 * (q >> 1);
        FM_ROLLED
        for (int n = 0; n < N8; n++) {
            uint64_t e = drop::element(dz, r0 + 8 * n + 2 * tq + (q & 1), j, T);
            unsigned b4 = drop::keep4(dr, dz.sample, e);
            FM_UNROLL
            for (int m = 0; m < 4; m++) { // lane g ^ m's pair (q ^ m): element e = q ^ m
                unsigned got = m ? (unsigned)fm_shfl_xor((float)b4, 4 * m) : b4;
                bits |= (got >> q & 1u) << (4 * n + (q ^ m));
            }
        }
        return bits;
    }
    if (!TRANS && T % 4 == 0) { // (block-uniform)
        int mine = tq & 1, i = r0 + 16 * w + gq + 8 * mine;
        FM_ROLLED
        for (int n = 0; n < N8; n++) {
            uint64_t e = drop::element(dz, i, c0 + 8 * n + 4 * (tq >> 1), T);
            unsigned b4 = drop::keep4(dr, dz.sample, e);
            unsigned other = (unsigned)fm_shfl_xor((float)b4, 1); // (whole numbers: exact)
            unsigned row0 = mine ? other : b4, row1 = mine ? b4 : other;
            bits |= (row0 >> 2 * mine & 3u) << 4 * n | (row1 >> 2 * mine & 3u) << (4 * n + 2);
        }
        return bits;
    }
    FM_ROLLED
    for (int x = 0; x < (TRANS ? 4 : 2) * N8; x++) {
        int n = TRANS ? x >> 2 : x >> 1, hf = TRANS ? (x >> 1) & 1 : x & 1;
        int rr = 16 * w + gq + 8 * hf, cc = 8 * n + 2 * tq + (TRANS ? x & 1 : 0);
        int i = TRANS ? r0 + cc : r0 + rr, j = TRANS ? c0 + rr : c0 + cc;
        uint64_t e = drop::element(dz, i, j, T);
        uint32_t k = TRANS ? (uint32_t)drop::keep(dr, dz.sample, e)
                           : drop::keep_pair(dr, dz.sample, e);
        bits |= k << (TRANS ? x : 4 * n + 2 * hf);
    }
    return bits;
}

// ---------------------------------------------------------------- forward
// O: the output's storage, float (out) or uint16_t (bf16 bits, out16); Q: qkv's.
// Shared memory: Q (BM x LD), then two stages of K and V (BN x LD each), then the rows'
// segment starts and tile_starts' 4 ints; the next key tile loads while this one is used.
// D <= 64: 4 blocks an SM (registers capped at 128, no spills; 3 blocks at 129 and more).
// DROP: kernels.h's attention_gqa_dropout_forward (drop_args): each tile's probabilities
// times their factors after the row sums (l: the undropped ones), before P V (at D = 64: 3
// blocks an SM, whose registers hold keep_bits' without spills).
template <int D, typename O = float, typename Q = float, bool DROP = false>
FM_KERNEL_MIN(D <= 64 ? (DROP && D == 64 ? 3 : 4) : 1) forward(args_t<DROP> a)
{
    constexpr int LD = D + PAD;
    uint16_t *Qs = reinterpret_cast<uint16_t *>(fm_shared());
    uint16_t *KV = Qs + BM * LD; // stage s: K at KV + 2 s BN LD, V BN LD after it
    int *st0 = reinterpret_cast<int *>(KV + 4 * BN * LD), *found = st0 + BM;

    int qt = fm_gridx() - 1 - fm_bidx(); // the largest query tiles first
    int bh = fm_bidy(), b = bh / a.NH, h = bh % a.NH, g = h / a.R, T = a.T;
    int r0 = qt * BM, rows = fm_min(BM, T - r0);
    const Q *base = in_of(a, (const Q *)nullptr) + (size_t)b * T * a.C3;
    const Q *kbase = base + k_off(a, g, D);
    load_tile<D, BM>(Qs, base + q_off(a, h, D), a.C3, r0, rows);
    tile_starts(a, st0, found, b, r0, rows);
    fm_sync();
    int c_begin = st0[0] / BN;
    kv_stream<D, Q> kv = {KV, kbase, a.C3, c_begin, qt, T};
    kv.start();
    fm_cp_commit();
    fm_cp_wait0();
    fm_sync();

    int w = fm_tid() / 32, lane = fm_tid() & 31, gq = lane >> 2, tq = lane & 3;
    int row[2] = {16 * w + gq, 16 * w + gq + 8}; // this lane's rows of the tile
    int i[2] = {r0 + row[0], r0 + row[1]};
    int first[2] = {st0[row[0]], st0[row[1]]};
    int last_start = st0[BM - 1]; // (rows past the tile's repeat its last)
    uint32_t qf[D / 16][4]; // the warp's 16 query rows as A fragments, for every key tile
    FM_UNROLL
    for (int kk = 0; kk < D / 16; kk++)
        frag_a(qf[kk], Qs + 16 * w * LD, LD, kk);
    float slope2 = a.alibi ? a.alibi[h] * LOG2E : 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}; // base 2: m of the scores2
    float o[D / 8][4] = {};
    for (int c = c_begin; c <= qt; c++) {
        int c0 = c * BN;
        const uint16_t *Ks = kv.at(c), *Vs = Ks + BN * LD;
        float s[BN / 8][4] = {};
        mma_rbt<D, BN / 8>(s, qf, Ks, LD);
        float mx[2] = {-INFINITY, -INFINITY};
        // no mask left of the diagonal inside every row's segment; there without ALiBi the
        // scores are the raw products, scaled by k2 in the exponential below
        bool mask = !(c < qt && c0 >= last_start);
        float k2 = mask || a.alibi ? 1.0f : a.scale2;
        scores_of<BN / 8>(mask, a, s, slope2, i, c0, first, mx);
        float corr[2], sum[2] = {0.0f, 0.0f};
        for (int hf = 0; hf < 2; hf++) {
            mx[hf] = fmaxf(mx[hf], fm_shfl_xor(mx[hf], 1));
            mx[hf] = fmaxf(mx[hf], fm_shfl_xor(mx[hf], 2));
            mx[hf] *= k2; // (-inf stays -inf)
            float mnew = fmaxf(m[hf], mx[hf]);
            corr[hf] = mnew == -INFINITY ? 1.0f : fm_exp2(m[hf] - mnew);
            m[hf] = mnew;
        }
        // a row that sees no key yet: every score -inf, 2^(-inf - 0) = 0 (no -inf - -inf)
        float mref[2] = {m[0] == -INFINITY ? 0.0f : m[0], m[1] == -INFINITY ? 0.0f : m[1]};
        FM_UNROLL
        for (int n = 0; n < BN / 8; n++)
            FM_UNROLL
            for (int e = 0; e < 4; e++) {
                float p = fm_exp2(fmaf(s[n][e], k2, -mref[e >> 1])); // (k2 1: s - mref)
                s[n][e] = p;
                sum[e >> 1] += p;
            }
        for (int hf = 0; hf < 2; hf++)
            l[hf] = l[hf] * corr[hf] + sum[hf]; // this lane's part of the row sum
        if constexpr (DROP) { // P V with P times dropout's factors (l: the undropped sums)
            uint32_t kept = keep_bits<false, BN / 8>(a.dr, drop::at(a.dr, b, h, T), r0, c0, T);
            FM_UNROLL
            for (int n = 0; n < BN / 8; n++)
                FM_UNROLL
                for (int e = 0; e < 4; e++)
                    s[n][e] *= kept >> (4 * n + e) & 1 ? a.dr.scale : 0.0f;
        }
        FM_UNROLL
        for (int n = 0; n < D / 8; n++) {
            o[n][0] *= corr[0], o[n][1] *= corr[0];
            o[n][2] *= corr[1], o[n][3] *= corr[1];
        }
        mma_pb<BN, D / 8>(o, s, Vs, LD);
        fm_cp_wait0(); // the next tile has landed, and every warp is done with this one
        fm_sync();
    }
    O *ob = out_of(a, (O *)nullptr) + (size_t)b * T * a.C + (size_t)h * D;
    for (int hf = 0; hf < 2; hf++) {
        l[hf] += fm_shfl_xor(l[hf], 1);
        l[hf] += fm_shfl_xor(l[hf], 2);
        if (row[hf] >= rows)
            continue;
        float inv = 1.0f / l[hf];
        for (int n = 0; n < D / 8; n++)
            store_pair(ob + (size_t)i[hf] * a.C + 8 * n + 2 * tq, o[n][2 * hf] * inv,
                       o[n][2 * hf + 1] * inv);
        if (tq == 0)
            a.lse[(size_t)bh * T + i[hf]] = m[hf] * (1.0f / LOG2E) + fm_log(l[hf]);
    }
}

} // namespace fm

#endif
