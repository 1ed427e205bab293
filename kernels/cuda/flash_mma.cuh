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
// (a bf16 qkv16 loaded as it is, 8 bytes a lane where fp32 takes 16; row stride D + 8 halves:
// the fragment loads of 8 rows x 4 words hit 32 banks); a score tile S (16 x 64 per warp)
// lives in the mma accumulators and is turned into the A operand of the next product in
// registers (the C fragment of columns 16k.. 16k + 15 is the A fragment of that k step).
// Operands that enter a product as B with the sum over their rows (V in P V, dO in P^T dO, Q
// in dS^T Q, K in dS K) are also stored transposed.
//   forward   block (query tile of 64, b * NH + h): over key tiles at or left of the diagonal
//             S = Q K^T, the online softmax in registers (row max and sum over the 4 lanes
//             of a row), O += P V; out = O / l, lse = m + log l.
//   dK dV     block (key tile of 64, b * NG + g): over the group's R heads and the query
//             tiles of BQ rows from the key tile on: S^T = K Q^T, dP^T = V dO^T,
//             P = exp(S - lse), dS = P (dP - Drow); dV += P^T dO, dK += dS^T Q.
//   dQ        block (query tile of 64, b * NH + h): over key tiles, S and dP again,
//             dQ += dS K.
// No atomics: every output element is written by one thread, its sum in a fixed order, so
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

namespace fm {

constexpr int THREADS = 128, WARPS = 4;
constexpr int BM = 64;  // query rows of a forward or dQ block (16 per warp)
constexpr int BN = 64;  // keys per tile (16 per warp in dK dV)
constexpr int PAD = 8;  // halves past each shared row: conflict-free fragment loads

struct args {
    union { const float *qkv; const uint16_t *qkv16; }; // the kernels' Q: the input's storage
    union { const float *dout; const uint16_t *dout16; }; // the backward's: Q's storage too
    const float *alibi, *lse_in, *Drow;
    const int32_t *seg, *starts;
    float *out, *lse;
    union { float *dqkv; uint16_t *dqkv16; }; // the backward's Q
    uint16_t *out16; // forward<D, uint16_t>'s output
    int B, T, NH, NG, R, C, C3; // C = NH D, C3 = NG (R + 2) D
    float scale;
};

// The sizes and scale of a call (pointers left null): qkv (B, T, NG, R+2, D), NH = NG R.
inline args make_args(int B, int T, int NH, int NG, int D, const float *alibi)
{
    args a = {};
    a.B = B, a.T = T, a.NH = NH, a.NG = NG, a.R = NH / NG;
    a.C = NH * D, a.C3 = NG * (a.R + 2) * D;
    a.scale = 1.0f / sqrtf((float)D);
    a.alibi = alibi;
    return a;
}

// Query rows of a dK dV step: fewer for D = 128, so that the two accumulators fit registers.
FM_HD constexpr int bq_for(int D) { return D > 64 ? 32 : 64; }

// Bytes of shared memory of each kernel (the carving order below).
FM_HD constexpr size_t forward_bytes(int D)
{
    return (size_t)(BM + BN) * (D + PAD) * 2 + (size_t)D * (BN + PAD) * 2 + BM * 4;
}
FM_HD constexpr size_t backward_kv_bytes(int D)
{
    return (size_t)(2 * BN + 2 * bq_for(D)) * (D + PAD) * 2 +
           (size_t)2 * D * (bq_for(D) + PAD) * 2 + (size_t)3 * bq_for(D) * 4;
}
FM_HD constexpr size_t backward_q_bytes(int D)
{
    return (size_t)(2 * BM + 2 * BN) * (D + PAD) * 2 + (size_t)D * (BN + PAD) * 2;
}

FM_DEV size_t q_off(const args &a, int h, int D)
{
    return (size_t)(h / a.R) * (a.R + 2) * D + (size_t)(h % a.R) * D;
}
FM_DEV size_t k_off(const args &a, int g, int D)
{
    return (size_t)g * (a.R + 2) * D + (size_t)a.R * D;
}

// Rows [r0, r0 + n) of a D-wide fp32 or bf16 (S) slice (row stride ld) as a ROWS x D bf16
// tile: row-major into dst (row stride D + PAD) and/or transposed into dst_t (D x ROWS, row
// stride ROWS + PAD), zero past n rows. A warp converts a block of 16 rows x 8 columns a step,
// a lane 4 columns of one row (one 16-byte load; bf16: 8 bytes): each row's 32 bytes are one
// sector (bf16: 16 bytes, half of one), and the transposed stores of a step fall in 16 banks
// per column group, the two groups 16 banks apart (no conflict). A lane issues up to 4 loads
// before it stores any (their latencies overlap). bf16 values are widened by the load and
// rounded back by the stores: the same bits.
template <int D, int ROWS, typename S>
FM_DEV void load_tile(uint16_t *dst, uint16_t *dst_t, const S *src, int ld, int r0, int n)
{
    constexpr int STEPS = ROWS / 16 * (D / 8) / WARPS, BATCH = STEPS < 4 ? STEPS : 4;
    static_assert(STEPS % BATCH == 0, "steps in whole batches");
    int lane = fm_tid() & 31, warp = fm_tid() / 32;
    for (int b0 = 0; b0 < STEPS; b0 += BATCH) {
        float v[BATCH][4];
        FM_UNROLL
        for (int k = 0; k < BATCH; k++) {
            int blk = warp + (b0 + k) * WARPS;
            int i = blk / (D / 8) * 16 + (lane & 15), d = blk % (D / 8) * 8 + (lane >> 4) * 4;
            v[k][0] = v[k][1] = v[k][2] = v[k][3] = 0.0f;
            if (i < n)
                fm_ldg4(src + (size_t)(r0 + i) * ld + d, v[k]);
        }
        FM_UNROLL
        for (int k = 0; k < BATCH; k++) {
            int blk = warp + (b0 + k) * WARPS;
            int i = blk / (D / 8) * 16 + (lane & 15), d = blk % (D / 8) * 8 + (lane >> 4) * 4;
            if (dst) {
                fm_st32(dst + i * (D + PAD) + d, fm_pack(v[k][0], v[k][1]));
                fm_st32(dst + i * (D + PAD) + d + 2, fm_pack(v[k][2], v[k][3]));
            }
            if (dst_t)
                for (int e = 0; e < 4; e++)
                    fm_st16(dst_t + (d + e) * (ROWS + PAD) + i, fm_bf16(v[k][e]));
        }
    }
}

// acc[n] (16 x 8, n < N8) += A_k B_k^T for one k step of 16: fa the A fragment, B's rows
// 8n .. 8n + 7 in shared memory (row stride ldb) from column 16 kk.
template <int N8>
FM_DEV void mma_step(float (*acc)[4], const uint32_t fa[4], const uint16_t *b, int ldb, int kk)
{
    int lane = fm_tid() & 31, g = lane >> 2, t = lane & 3;
    FM_UNROLL
    for (int n = 0; n < N8; n++) {
        uint32_t fb[2];
        fb[0] = fm_ld32(b + (8 * n + g) * ldb + 16 * kk + 2 * t);
        fb[1] = fm_ld32(b + (8 * n + g) * ldb + 16 * kk + 8 + 2 * t);
        fm_mma(acc[n], fa, fb);
    }
}

// acc[n] += A B^T: A the warp's 16 rows (row stride lda) and B's rows 8n .. 8n + 7 (row
// stride ldb), both K long, bf16 in shared memory.
template <int K, int N8>
FM_DEV void mma_abt(float (*acc)[4], const uint16_t *a, int lda, const uint16_t *b, int ldb)
{
    int lane = fm_tid() & 31, g = lane >> 2, t = lane & 3;
    FM_UNROLL
    for (int kk = 0; kk < K / 16; kk++) {
        uint32_t fa[4];
        fa[0] = fm_ld32(a + g * lda + 16 * kk + 2 * t);
        fa[1] = fm_ld32(a + (g + 8) * lda + 16 * kk + 2 * t);
        fa[2] = fm_ld32(a + g * lda + 16 * kk + 8 + 2 * t);
        fa[3] = fm_ld32(a + (g + 8) * lda + 16 * kk + 8 + 2 * t);
        mma_step<N8>(acc, fa, b, ldb, kk);
    }
}

// acc[n] += P B^T: P (16 x K) as the accumulator fragments p[0 .. K/8) of an earlier product
// (rounded to bf16 here), B's rows 8n .. 8n + 7 K long in shared memory (row stride ldb).
template <int K, int N8>
FM_DEV void mma_pbt(float (*acc)[4], const float (*p)[4], const uint16_t *b, int ldb)
{
    FM_UNROLL
    for (int kk = 0; kk < K / 16; kk++) {
        uint32_t fa[4] = {fm_pack(p[2 * kk][0], p[2 * kk][1]), fm_pack(p[2 * kk][2], p[2 * kk][3]),
                          fm_pack(p[2 * kk + 1][0], p[2 * kk + 1][1]),
                          fm_pack(p[2 * kk + 1][2], p[2 * kk + 1][3])};
        mma_step<N8>(acc, fa, b, ldb, kk);
    }
}

// st[i] = the first position of row r0 + i's segment (0 without segments), i < BM; rows past
// n repeat the last. Warp 0 finds row r0's by a backward scan 32 positions a step, then lane 0
// carries it along the tile. The caller synchronises before reading.
FM_DEV void tile_starts(const args &a, int *st, int b, int r0, int n)
{
    if (fm_tid() >= 32)
        return;
    if (!a.seg) {
        for (int i = fm_tid(); i < BM; i += 32)
            st[i] = 0;
        return;
    }
    const int32_t *sg = a.seg + (size_t)b * a.T;
    int lane = fm_tid(), first = 0;
    for (int top = r0 - 1; top >= 0; top -= 32) { // warp-uniform: the ballot decides
        int j = top - lane;
        uint32_t differs = fm_ballot(j >= 0 && sg[j] != sg[r0]);
        if (differs) {
            first = top - (fm_ffs(differs) - 1) + 1;
            break;
        }
    }
    if (lane == 0) {
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

// The scaled score of query i and key j with ALiBi's bias (s: q . k).
FM_DEV float score(const args &a, float s, float slope, int i, int j)
{
    return s * a.scale + slope * (float)(j - i);
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

// ---------------------------------------------------------------- forward
// O: the output's storage, float (out) or uint16_t (bf16 bits, out16); Q: qkv's.
template <int D, typename O = float, typename Q = float> FM_KERNEL forward(args a)
{
    constexpr int LD = D + PAD, LT = BN + PAD;
    uint16_t *Qs = reinterpret_cast<uint16_t *>(fm_shared());
    uint16_t *Ks = Qs + BM * LD, *Vt = Ks + BN * LD;
    int *st0 = reinterpret_cast<int *>(Vt + D * LT);

    int qt = fm_gridx() - 1 - fm_bidx(); // the largest query tiles first
    int bh = fm_bidy(), b = bh / a.NH, h = bh % a.NH, g = h / a.R, T = a.T;
    int r0 = qt * BM, rows = fm_min(BM, T - r0);
    const Q *base = in_of(a, (const Q *)nullptr) + (size_t)b * T * a.C3;
    load_tile<D, BM>(Qs, nullptr, base + q_off(a, h, D), a.C3, r0, rows);
    tile_starts(a, st0, b, r0, rows);
    fm_sync();

    int w = fm_tid() / 32, lane = fm_tid() & 31, gq = lane >> 2, tq = lane & 3;
    int row[2] = {16 * w + gq, 16 * w + gq + 8}; // this lane's rows of the tile
    int first[2] = {st0[row[0]], st0[row[1]]};
    float slope = a.alibi ? a.alibi[h] : 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    float o[D / 8][4] = {};
    for (int c = st0[0] / BN; c <= qt; c++) {
        int c0 = c * BN, cols = fm_min(BN, T - c0);
        fm_sync(); // the previous tile's readers of Ks and Vt are done
        load_tile<D, BN>(Ks, nullptr, base + k_off(a, g, D), a.C3, c0, cols);
        load_tile<D, BN>(nullptr, Vt, base + k_off(a, g, D) + D, a.C3, c0, cols);
        fm_sync();
        float s[BN / 8][4] = {};
        mma_abt<D, BN / 8>(s, Qs + 16 * w * LD, LD, Ks, LD);
        float mx[2] = {-INFINITY, -INFINITY};
        FM_UNROLL
        for (int n = 0; n < BN / 8; n++)
            FM_UNROLL
            for (int e = 0; e < 4; e++) {
                int hf = e >> 1, i = r0 + row[hf], j = c0 + 8 * n + 2 * tq + (e & 1);
                float v = visible(a, i, j, first[hf]) ? score(a, s[n][e], slope, i, j) : -INFINITY;
                s[n][e] = v;
                mx[hf] = fmaxf(mx[hf], v);
            }
        float corr[2], sum[2] = {0.0f, 0.0f};
        for (int hf = 0; hf < 2; hf++) {
            mx[hf] = fmaxf(mx[hf], fm_shfl_xor(mx[hf], 1));
            mx[hf] = fmaxf(mx[hf], fm_shfl_xor(mx[hf], 2));
            float mnew = fmaxf(m[hf], mx[hf]);
            corr[hf] = mnew == -INFINITY ? 1.0f : fm_exp(m[hf] - mnew);
            m[hf] = mnew;
        }
        FM_UNROLL
        for (int n = 0; n < BN / 8; n++)
            FM_UNROLL
            for (int e = 0; e < 4; e++) {
                int hf = e >> 1;
                float p = m[hf] == -INFINITY ? 0.0f : fm_exp(s[n][e] - m[hf]);
                s[n][e] = p;
                sum[hf] += p;
            }
        for (int hf = 0; hf < 2; hf++)
            l[hf] = l[hf] * corr[hf] + sum[hf]; // this lane's part of the row sum
        FM_UNROLL
        for (int n = 0; n < D / 8; n++) {
            o[n][0] *= corr[0], o[n][1] *= corr[0];
            o[n][2] *= corr[1], o[n][3] *= corr[1];
        }
        mma_pbt<BN, D / 8>(o, s, Vt, LT);
    }
    O *ob = out_of(a, (O *)nullptr) + (size_t)b * T * a.C + (size_t)h * D;
    for (int hf = 0; hf < 2; hf++) {
        l[hf] += fm_shfl_xor(l[hf], 1);
        l[hf] += fm_shfl_xor(l[hf], 2);
        if (row[hf] >= rows)
            continue;
        size_t i = (size_t)(r0 + row[hf]);
        float inv = 1.0f / l[hf];
        for (int n = 0; n < D / 8; n++)
            store_pair(ob + i * a.C + 8 * n + 2 * tq, o[n][2 * hf] * inv,
                       o[n][2 * hf + 1] * inv);
        if (tq == 0)
            a.lse[(size_t)bh * T + i] = m[hf] + fm_log(l[hf]);
    }
}

// ---------------------------------------------------------------- backward
// dK, dV of key tile fm_bidx() of (batch, group) fm_bidy(); Q: qkv's storage, dqkv's and
// dout's.
template <int D, typename Q = float> FM_KERNEL backward_kv(args a)
{
    constexpr int BQ = bq_for(D), LD = D + PAD, LQ = BQ + PAD;
    uint16_t *Ks = reinterpret_cast<uint16_t *>(fm_shared());
    uint16_t *Vs = Ks + BN * LD, *Qs = Vs + BN * LD, *dOs = Qs + BQ * LD;
    uint16_t *Qt = dOs + BQ * LD, *dOt = Qt + D * LQ;
    float *lse_s = reinterpret_cast<float *>(dOt + D * LQ), *D_s = lse_s + BQ;
    int *s0_s = reinterpret_cast<int *>(D_s + BQ);

    int c = fm_bidx(), bg = fm_bidy(), b = bg / a.NG, g = bg % a.NG, T = a.T;
    int c0 = c * BN, cols = fm_min(BN, T - c0);
    const Q *base = in_of(a, (const Q *)nullptr) + (size_t)b * T * a.C3;
    const int32_t *starts = a.starts + (size_t)b * T;
    load_tile<D, BN>(Ks, nullptr, base + k_off(a, g, D), a.C3, c0, cols);
    load_tile<D, BN>(Vs, nullptr, base + k_off(a, g, D) + D, a.C3, c0, cols);

    int w = fm_tid() / 32, lane = fm_tid() & 31, gq = lane >> 2, tq = lane & 3;
    int key0 = c0 + 16 * w + gq; // this lane's keys: key0 and key0 + 8
    float dk[D / 8][4] = {}, dv[D / 8][4] = {};
    for (int r = 0; r < a.R; r++) {
        int h = g * a.R + r, bh = b * a.NH + h;
        float slope = a.alibi ? a.alibi[h] : 0.0f;
        const Q *dO = dout_of(a, (const Q *)nullptr) + (size_t)b * T * a.C + (size_t)h * D;
        for (int q0 = c0; q0 < T; q0 += BQ) {
            int rows = fm_min(BQ, T - q0);
            if (starts[q0] >= c0 + cols)
                continue; // the key tile lies wholly before these queries' segments (uniform)
            fm_sync(); // the previous step's readers are done
            load_tile<D, BQ>(Qs, Qt, base + q_off(a, h, D), a.C3, q0, rows);
            load_tile<D, BQ>(dOs, dOt, dO, a.C, q0, rows);
            for (int i = fm_tid(); i < BQ; i += THREADS) {
                size_t t = (size_t)q0 + fm_min(i, rows - 1);
                lse_s[i] = a.lse_in[(size_t)bh * T + t];
                D_s[i] = a.Drow[(size_t)bh * T + t];
                s0_s[i] = starts[t];
            }
            fm_sync();
            float st[BQ / 8][4] = {}, dpt[BQ / 8][4] = {}; // S^T, dP^T: 16 keys x BQ queries
            mma_abt<D, BQ / 8>(st, Ks + 16 * w * LD, LD, Qs, LD);
            mma_abt<D, BQ / 8>(dpt, Vs + 16 * w * LD, LD, dOs, LD);
            FM_UNROLL
            for (int n = 0; n < BQ / 8; n++)
                FM_UNROLL
                for (int e = 0; e < 4; e++) {
                    int j = key0 + (e >> 1) * 8, qc = 8 * n + 2 * tq + (e & 1), i = q0 + qc;
                    bool ok = i < T && j <= i && j >= s0_s[qc]; // visible(), T in a register
                    float p = ok ? fm_exp(score(a, st[n][e], slope, i, j) - lse_s[qc]) : 0.0f;
                    st[n][e] = p;
                    dpt[n][e] = p * (dpt[n][e] - D_s[qc]);
                }
            mma_pbt<BQ, D / 8>(dv, st, dOt, LQ);
            mma_pbt<BQ, D / 8>(dk, dpt, Qt, LQ);
        }
    }
    Q *out = grad_of(a, (const Q *)nullptr) + (size_t)b * T * a.C3 + k_off(a, g, D);
    for (int hf = 0; hf < 2; hf++) {
        if (key0 + 8 * hf >= c0 + cols)
            continue;
        size_t j = (size_t)(key0 + 8 * hf);
        for (int n = 0; n < D / 8; n++) {
            store_pair(out + j * a.C3 + 8 * n + 2 * tq, dk[n][2 * hf] * a.scale,
                       dk[n][2 * hf + 1] * a.scale);
            store_pair(out + j * a.C3 + D + 8 * n + 2 * tq, dv[n][2 * hf], dv[n][2 * hf + 1]);
        }
    }
}

// dQ of query tile (from the last) fm_bidx() of (batch, head) fm_bidy(); Q: qkv's, dqkv's and
// dout's storage.
template <int D, typename Q = float> FM_KERNEL backward_q(args a)
{
    constexpr int LD = D + PAD, LT = BN + PAD;
    uint16_t *Qs = reinterpret_cast<uint16_t *>(fm_shared());
    uint16_t *dOs = Qs + BM * LD, *Ks = dOs + BM * LD, *Vs = Ks + BN * LD, *Kt = Vs + BN * LD;

    int qt = fm_gridx() - 1 - fm_bidx(), bh = fm_bidy(), b = bh / a.NH, h = bh % a.NH;
    int g = h / a.R, T = a.T, r0 = qt * BM, rows = fm_min(BM, T - r0);
    const Q *base = in_of(a, (const Q *)nullptr) + (size_t)b * T * a.C3;
    const int32_t *starts = a.starts + (size_t)b * T;
    load_tile<D, BM>(Qs, nullptr, base + q_off(a, h, D), a.C3, r0, rows);
    const Q *dO = dout_of(a, (const Q *)nullptr) + (size_t)b * T * a.C + (size_t)h * D;
    load_tile<D, BM>(dOs, nullptr, dO, a.C, r0, rows);

    int w = fm_tid() / 32, lane = fm_tid() & 31, gq = lane >> 2, tq = lane & 3;
    int row[2] = {16 * w + gq, 16 * w + gq + 8};
    float lse_r[2], D_r[2];
    int first[2];
    for (int hf = 0; hf < 2; hf++) {
        size_t t = (size_t)r0 + fm_min(row[hf], rows - 1);
        lse_r[hf] = a.lse_in[(size_t)bh * T + t];
        D_r[hf] = a.Drow[(size_t)bh * T + t];
        first[hf] = starts[t];
    }
    float slope = a.alibi ? a.alibi[h] : 0.0f;
    float dq[D / 8][4] = {};
    for (int c = starts[r0] / BN; c <= qt; c++) {
        int c0 = c * BN, cols = fm_min(BN, T - c0);
        fm_sync(); // the previous tile's readers are done
        load_tile<D, BN>(Ks, Kt, base + k_off(a, g, D), a.C3, c0, cols);
        load_tile<D, BN>(Vs, nullptr, base + k_off(a, g, D) + D, a.C3, c0, cols);
        fm_sync();
        float s[BN / 8][4] = {}, dp[BN / 8][4] = {};
        mma_abt<D, BN / 8>(s, Qs + 16 * w * LD, LD, Ks, LD);
        mma_abt<D, BN / 8>(dp, dOs + 16 * w * LD, LD, Vs, LD);
        FM_UNROLL
        for (int n = 0; n < BN / 8; n++)
            FM_UNROLL
            for (int e = 0; e < 4; e++) {
                int hf = e >> 1, i = r0 + row[hf], j = c0 + 8 * n + 2 * tq + (e & 1);
                float p = visible(a, i, j, first[hf])
                              ? fm_exp(score(a, s[n][e], slope, i, j) - lse_r[hf])
                              : 0.0f;
                s[n][e] = p * (dp[n][e] - D_r[hf]); // dS
            }
        mma_pbt<BN, D / 8>(dq, s, Kt, LT);
    }
    Q *out = grad_of(a, (const Q *)nullptr) + (size_t)b * T * a.C3 + q_off(a, h, D);
    for (int hf = 0; hf < 2; hf++) {
        if (row[hf] >= rows)
            continue;
        size_t i = (size_t)(r0 + row[hf]);
        for (int n = 0; n < D / 8; n++)
            store_pair(out + i * a.C3 + 8 * n + 2 * tq, dq[n][2 * hf] * a.scale,
                       dq[n][2 * hf + 1] * a.scale);
    }
}

} // namespace fm

#endif
