// kernels/cuda/ — internal: context parallelism's attention (kernels.h attention_rows_* and
// attention_rows_dropout_*), the kernels attention_rows.cu launches, written on mma_prims.cuh's
// primitives so that tests/cuda's warp emulator (warp_emu.hpp, included instead of them) runs
// the very source the GPU does (tests/cuda/rows_emu.cc).
//   ar::args / ar::drop_args     a launch's arrays and sizes (below)
//   ar::tile_for(HS)             the tile (64, 32 or 16 rows) whose dK dV kernel fits SMEM_CAP
//   ar::with_tile(tile, f)       (host) f(std::integral_constant<int, tile>{})
//   ar::forward_bytes, kv_bytes, q_bytes (tile, HS)   each kernel's dynamic shared memory
//   ar::forward<TILE, DROP>      grid (query tiles, B NH), the largest tiles first
//   ar::backward_kv<TILE, DROP>  grid (key tiles of Tk, B NG)
//   ar::backward_q<TILE, DROP>   grid (query tiles, B NH), the largest tiles first
// Query row i (i < nq = Tk - q0) is qkv row q0 + i, at position q0 + i, and attends keys 0 ..
// q0 + i; score = scale q.k + slope_h (j - (q0 + i)). The flash scheme in fp32 (the fp32
// products as fmaf in a fixed order): forward keeps out and lse = m + log l per query row, key
// tiles past the block's last row skipped; backward recomputes P = exp(S - lse) tile by tile
// with D = rowsum(dO * O) made per query tile (no scratch), a block per (batch, group, key tile)
// sums dK, dV of its rows over the group's R heads and the query tiles in order, a block per
// (batch, head, query tile) dQ over the key tiles in order; each ADDS its sums into dqkv once
// (kernels.h: backward accumulates). No atomics: the same bits run to run. DROP (kernels.h's
// attention_rows_dropout_*): P(t, j) of local head h times dropout.cuh's factor of element
// ((head0 + h) T + t) T + j of sample sample0 + b, where it enters P V and P^T dO, and
// dS = P (z dP - D); lse and l undropped (the CPU's kernels/cpu/attention_rows.c).
// Tiles in shared memory: inputs TILE x HS with an odd row stride (HS | 1: a column's reads hit
// distinct banks), scores TILE x (TILE + 1); one thread a row for the softmax statistics.
#ifndef TR_KERNELS_CUDA_ATTENTION_ROWS_CUH
#define TR_KERNELS_CUDA_ATTENTION_ROWS_CUH

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include <type_traits>

#include "kernels/cuda/dropout.cuh"

namespace ar {

constexpr int THREADS = 128; // FM_KERNEL's launch bound
constexpr int MAX_HS = 256;
constexpr size_t SMEM_CAP = 120 * 1024;
constexpr float LOG2E = 1.4426950408889634f;

// qkv (B, Tk, NG, R+2, HS): row floats a row; out, dout (B, nq, NH, HS): C = NH HS; lse
// (B, NH, nq); T the dropout mask's sequence length
struct args {
    const float *qkv, *dout, *out_c, *lse_c, *alibi;
    float *out, *lse, *dqkv;
    int B, Tk, q0, nq, NH, NG, R, HS, row, C, T;
    float scale;
};
struct drop_args : args {
    drop::params dr;
};
template <bool DROP> using args_t = std::conditional_t<DROP, drop_args, args>;

FM_HD constexpr int ld_in(int HS) { return HS | 1; }
FM_HD constexpr size_t pad4(size_t n) { return (n + 3) & ~(size_t)3; } // 16-byte pieces

FM_HD inline size_t forward_bytes(int tile, int HS)
{
    size_t tl = (size_t)tile * ld_in(HS), tt = (size_t)tile * (tile + 1), td = (size_t)tile * HS;
    return 4 * (3 * pad4(tl) + pad4(tt) + pad4(td) + 3 * pad4(tile));
}
// the backward kernels': their bwd_tiles, then `sums` TILE x HS sums (dK dV: 2, dQ: 1), lse, D
FM_HD inline size_t backward_bytes(int tile, int HS, int sums)
{
    size_t tl = (size_t)tile * ld_in(HS), tt = (size_t)tile * (tile + 1), td = (size_t)tile * HS;
    return 4 * (4 * pad4(tl) + 2 * pad4(tt) + sums * pad4(td) + 2 * pad4(tile));
}
FM_HD inline size_t kv_bytes(int tile, int HS) { return backward_bytes(tile, HS, 2); }
FM_HD inline size_t q_bytes(int tile, int HS) { return backward_bytes(tile, HS, 1); }
FM_HD inline int tile_for(int HS)
{
    return kv_bytes(64, HS) <= SMEM_CAP ? 64 : kv_bytes(32, HS) <= SMEM_CAP ? 32 : 16;
}

// (host: the launchers) f(std::integral_constant<int, TILE>{}) for tile 64, 32 or 16
template <class F> inline void with_tile(int tile, F f)
{
    if (tile == 64)
        f(std::integral_constant<int, 64>{});
    else if (tile == 32)
        f(std::integral_constant<int, 32>{});
    else
        f(std::integral_constant<int, 16>{});
}

// Shared memory carved in 16-byte pieces, in the order the *_bytes above count them
struct carve {
    float *p;
    FM_DEV float *take(size_t n)
    {
        float *r = p;
        p += pad4(n);
        return r;
    }
};

// Offsets in a qkv row of head h's query and of group g's key (its value follows)
FM_DEV size_t q_off(const args &a, int h)
{
    return ((size_t)(h / a.R) * (a.R + 2) + h % a.R) * a.HS;
}
FM_DEV size_t k_off(const args &a, int g) { return ((size_t)g * (a.R + 2) + a.R) * a.HS; }

// e^x by the MUFU's exp2 (exactly 1 at x = 0, 0 at -inf)
FM_DEV float ex(float x) { return fm_exp2(x * LOG2E); }

// dst (TILE rows, stride ld_in(HS)) = rows [r0, r0 + n) of the HS-wide slice at src (row
// stride ld), zeros past n rows
template <int TILE>
FM_DEV void load_tile(float *dst, const float *src, size_t ld, int r0, int n, int HS)
{
    const int LT = ld_in(HS);
    for (int idx = fm_tid(); idx < TILE * HS; idx += THREADS) {
        int i = idx / HS, d = idx % HS;
        dst[i * LT + d] = i < n ? src[(size_t)(r0 + i) * ld + d] : 0.0f;
    }
}

// C (M x N, row stride ldc) = (acc ? C, row i times rs[i] when rs : 0) + alpha sum_k A(i, k)
// B(k, j) with A(i, k) = A[i ai + k ak], B(k, j) = B[k bk + j bj]: fmaf in k order, the
// block's threads over (i, j) (j fastest). Read by others only after the caller's fm_sync.
FM_DEV void mm(float *C, int ldc, const float *A, int ai, int ak, const float *B, int bk, int bj,
               int M, int N, int K, float alpha, bool acc, const float *rs = nullptr)
{
    for (int idx = fm_tid(); idx < M * N; idx += THREADS) {
        int i = idx / N, j = idx % N;
        const float *x = A + i * ai, *y = B + j * bj;
        float s = 0.0f;
        for (int k = 0; k < K; k++)
            s = fmaf(x[k * ak], y[k * bk], s);
        float *c = C + i * ldc + j;
        *c = acc ? (rs ? *c * rs[i] : *c) + alpha * s : alpha * s;
    }
}

// The scaled score of position t and key j (+ ALiBi), -inf where masked (or !live)
FM_DEV float score(const args &a, float s, int h, int t, int j, bool live)
{
    if (!live || j > t)
        return -INFINITY;
    s *= a.scale;
    if (a.alibi)
        s += a.alibi[h] * (float)(j - t);
    return s;
}

// Dropout's factor of element e of `sample`, the Philox block of w (index blk) reused along a
// row
FM_DEV float row_factor(const drop::params &p, uint64_t sample, uint64_t e, uint32_t w[4],
                        uint64_t &blk)
{
    if (e >> 2 != blk) {
        blk = e >> 2;
        tr_dropout_words(p.seed, sample, p.site, e, w);
    }
    return drop::word(w, (unsigned)e & 3) >= p.threshold ? p.scale : 0.0f;
}

// ---------------------------------------------------------------- forward
// One thread's row i of a score tile s (cols keys from c0; Q K^T on entry, P after: times
// dropout's factors with DROP): the online softmax's m, l and the output's rescale corr.
template <bool DROP>
FM_DEV void softmax_row(const args_t<DROP> &a, float *s, float &m, float &l, float &corr, int b,
                        int h, int t, bool live, int c0, int cols)
{
    float mx = -INFINITY;
    for (int j = 0; j < cols; j++) {
        s[j] = score(a, s[j], h, t, c0 + j, live);
        mx = fmaxf(mx, s[j]);
    }
    float mnew = fmaxf(m, mx), sum = 0.0f;
    uint32_t w[4] = {0, 0, 0, 0};
    uint64_t blk = ~(uint64_t)0;
    for (int j = 0; j < cols; j++) {
        float p = mnew == -INFINITY ? 0.0f : ex(s[j] - mnew);
        sum += p;
        if constexpr (DROP) {
            drop::head_at x = drop::at(a.dr, b, h, a.T);
            p *= row_factor(a.dr, x.sample, drop::element(x, t, c0 + j, a.T), w, blk);
        }
        s[j] = p;
    }
    corr = mnew == -INFINITY ? 1.0f : ex(m - mnew);
    l = l * corr + sum;
    m = mnew;
}

template <int TILE, bool DROP> FM_KERNEL forward(const args_t<DROP> a)
{
    const int HS = a.HS, LT = ld_in(HS), SL = TILE + 1;
    carve cv{reinterpret_cast<float *>(fm_shared())};
    float *Qs = cv.take((size_t)TILE * LT), *Ks = cv.take((size_t)TILE * LT);
    float *Vs = cv.take((size_t)TILE * LT), *S = cv.take((size_t)TILE * SL);
    float *Os = cv.take((size_t)TILE * HS);
    float *m = cv.take(TILE), *l = cv.take(TILE), *corr = cv.take(TILE);

    int qt = fm_gridx() - 1 - fm_bidx(), bh = fm_bidy(), b = bh / a.NH, h = bh % a.NH;
    int g = h / a.R, i0 = qt * TILE, rows = fm_min(TILE, a.nq - i0), r0 = a.q0 + i0;
    int end = r0 + rows; // keys [0, end) are this tile's
    const float *base = a.qkv + (size_t)b * a.Tk * a.row;
    load_tile<TILE>(Qs, base + q_off(a, h), a.row, r0, rows, HS);
    for (int idx = fm_tid(); idx < TILE * HS; idx += THREADS)
        Os[idx] = 0.0f;
    for (int i = fm_tid(); i < TILE; i += THREADS)
        m[i] = -INFINITY, l[i] = 0.0f;
    fm_sync();
    for (int c0 = 0; c0 < end; c0 += TILE) {
        int cols = fm_min(TILE, end - c0);
        load_tile<TILE>(Ks, base + k_off(a, g), a.row, c0, cols, HS);
        load_tile<TILE>(Vs, base + k_off(a, g) + HS, a.row, c0, cols, HS);
        fm_sync();
        mm(S, SL, Qs, LT, 1, Ks, 1, LT, TILE, TILE, HS, 1.0f, false); // Q K^T
        fm_sync();
        for (int i = fm_tid(); i < TILE; i += THREADS)
            softmax_row<DROP>(a, S + i * SL, m[i], l[i], corr[i], b, h, r0 + i, i < rows, c0,
                              cols);
        fm_sync();
        mm(Os, HS, S, SL, 1, Vs, LT, 1, TILE, HS, cols, 1.0f, true, corr); // O corr + P V
        fm_sync();
    }
    float *o = a.out + ((size_t)b * a.nq + i0) * a.C + (size_t)h * HS;
    for (int idx = fm_tid(); idx < rows * HS; idx += THREADS) {
        int i = idx / HS, d = idx % HS;
        o[(size_t)i * a.C + d] = Os[idx] / l[i];
    }
    for (int i = fm_tid(); i < rows; i += THREADS) // every row saw its own key: l > 0
        a.lse[((size_t)b * a.NH + h) * a.nq + i0 + i] = m[i] + fm_log(l[i]);
}

// ---------------------------------------------------------------- backward
// Both backward kernels' tiles: K, V, Q, dO (TILE x ld_in(HS)), S and dP (TILE x (TILE + 1))
struct bwd_tiles {
    float *Ks, *Vs, *Qs, *dOs, *S, *dP;
};
template <int TILE> FM_DEV bwd_tiles take_tiles(carve &cv, int HS)
{
    size_t tl = (size_t)TILE * ld_in(HS), tt = (size_t)TILE * (TILE + 1);
    bwd_tiles t;
    t.Ks = cv.take(tl), t.Vs = cv.take(tl), t.Qs = cv.take(tl), t.dOs = cv.take(tl);
    t.S = cv.take(tt), t.dP = cv.take(tt);
    return t;
}

// lse and D = dO . O of query rows i0 .. (rows of them; the last repeated past them) of head h
template <int TILE>
FM_DEV void row_stats(const args &a, float *lse_s, float *D_s, int b, int h, int i0, int rows)
{
    for (int i = fm_tid(); i < TILE; i += THREADS) {
        int r = i0 + fm_min(i, rows - 1);
        size_t at = ((size_t)b * a.nq + r) * a.C + (size_t)h * a.HS;
        float s = 0.0f;
        for (int d = 0; d < a.HS; d++)
            s = fmaf(a.dout[at + d], a.out_c[at + d], s);
        D_s[i] = s;
        lse_s[i] = a.lse_c[((size_t)b * a.NH + h) * a.nq + r];
    }
}

// P into S and dS / scale into dP (S, dP: Q K^T and dO V^T on entry) of query rows from
// position r0 (rows of them) and keys from c0 (cols); DROP: S = P z, dP = P (z dP - D)
template <int TILE, bool DROP>
FM_DEV void tile_grads(const args_t<DROP> &a, float *S, float *dP, const float *lse_s,
                       const float *D_s, int b, int h, int r0, int rows, int c0, int cols)
{
    const int SL = TILE + 1;
    for (int idx = fm_tid(); idx < TILE * TILE; idx += THREADS) {
        int i = idx / TILE, j = idx % TILE, k = i * SL + j;
        float s = score(a, S[k], h, r0 + i, c0 + j, i < rows && j < cols);
        float p = s == -INFINITY ? 0.0f : ex(s - lse_s[i]);
        if constexpr (DROP) {
            drop::head_at x = drop::at(a.dr, b, h, a.T);
            float z = drop::factor(a.dr, x.sample, drop::element(x, r0 + i, c0 + j, a.T));
            S[k] = p * z;
            dP[k] = p * (z * dP[k] - D_s[i]);
        } else {
            S[k] = p;
            dP[k] = p * (dP[k] - D_s[i]);
        }
    }
}

template <int TILE, bool DROP> FM_KERNEL backward_kv(const args_t<DROP> a)
{
    const int HS = a.HS, LT = ld_in(HS), SL = TILE + 1;
    carve cv{reinterpret_cast<float *>(fm_shared())};
    bwd_tiles tiles = take_tiles<TILE>(cv, HS);
    float *Ks = tiles.Ks, *Vs = tiles.Vs, *Qs = tiles.Qs, *dOs = tiles.dOs, *S = tiles.S;
    float *dP = tiles.dP, *dK = cv.take((size_t)TILE * HS), *dV = cv.take((size_t)TILE * HS);
    float *lse_s = cv.take(TILE), *D_s = cv.take(TILE);

    int bg = fm_bidy(), b = bg / a.NG, g = bg % a.NG, c0 = fm_bidx() * TILE;
    int cols = fm_min(TILE, a.Tk - c0), qtiles = (a.nq + TILE - 1) / TILE;
    const float *base = a.qkv + (size_t)b * a.Tk * a.row;
    load_tile<TILE>(Ks, base + k_off(a, g), a.row, c0, cols, HS);
    load_tile<TILE>(Vs, base + k_off(a, g) + HS, a.row, c0, cols, HS);
    for (int idx = fm_tid(); idx < TILE * HS; idx += THREADS)
        dK[idx] = dV[idx] = 0.0f;
    for (int h = g * a.R; h < (g + 1) * a.R; h++)
        for (int qt = 0; qt < qtiles; qt++) {
            int i0 = qt * TILE, rows = fm_min(TILE, a.nq - i0), r0 = a.q0 + i0;
            if (r0 + rows <= c0)
                continue; // every row before the key tile (uniform)
            fm_sync(); // the previous pair's readers of Qs, dOs, S, dP are done
            load_tile<TILE>(Qs, base + q_off(a, h), a.row, r0, rows, HS);
            load_tile<TILE>(dOs, a.dout + (size_t)b * a.nq * a.C + (size_t)h * HS, a.C, i0,
                            rows, HS);
            row_stats<TILE>(a, lse_s, D_s, b, h, i0, rows);
            fm_sync();
            mm(S, SL, Qs, LT, 1, Ks, 1, LT, TILE, TILE, HS, 1.0f, false);  // Q K^T
            mm(dP, SL, dOs, LT, 1, Vs, 1, LT, TILE, TILE, HS, 1.0f, false); // dO V^T
            fm_sync();
            tile_grads<TILE, DROP>(a, S, dP, lse_s, D_s, b, h, r0, rows, c0, cols);
            fm_sync();
            mm(dV, HS, S, 1, SL, dOs, LT, 1, cols, HS, rows, 1.0f, true);    // += P^T dO
            mm(dK, HS, dP, 1, SL, Qs, LT, 1, cols, HS, rows, a.scale, true); // += scale dS^T Q
        }
    fm_sync();
    float *dk = a.dqkv + (size_t)b * a.Tk * a.row + k_off(a, g);
    for (int idx = fm_tid(); idx < cols * HS; idx += THREADS) {
        int j = idx / HS, d = idx % HS;
        float *at = dk + (size_t)(c0 + j) * a.row + d;
        at[0] += dK[idx];
        at[HS] += dV[idx];
    }
}

template <int TILE, bool DROP> FM_KERNEL backward_q(const args_t<DROP> a)
{
    const int HS = a.HS, LT = ld_in(HS), SL = TILE + 1;
    carve cv{reinterpret_cast<float *>(fm_shared())};
    bwd_tiles tiles = take_tiles<TILE>(cv, HS);
    float *Ks = tiles.Ks, *Vs = tiles.Vs, *Qs = tiles.Qs, *dOs = tiles.dOs, *S = tiles.S;
    float *dP = tiles.dP, *dQ = cv.take((size_t)TILE * HS);
    float *lse_s = cv.take(TILE), *D_s = cv.take(TILE);

    int qt = fm_gridx() - 1 - fm_bidx(), bh = fm_bidy(), b = bh / a.NH, h = bh % a.NH;
    int g = h / a.R, i0 = qt * TILE, rows = fm_min(TILE, a.nq - i0), r0 = a.q0 + i0;
    int end = r0 + rows;
    const float *base = a.qkv + (size_t)b * a.Tk * a.row;
    load_tile<TILE>(Qs, base + q_off(a, h), a.row, r0, rows, HS);
    load_tile<TILE>(dOs, a.dout + (size_t)b * a.nq * a.C + (size_t)h * HS, a.C, i0, rows, HS);
    row_stats<TILE>(a, lse_s, D_s, b, h, i0, rows);
    for (int idx = fm_tid(); idx < TILE * HS; idx += THREADS)
        dQ[idx] = 0.0f;
    for (int c0 = 0; c0 < end; c0 += TILE) {
        int cols = fm_min(TILE, end - c0);
        fm_sync(); // (the previous tile's readers of Ks and dP are done)
        load_tile<TILE>(Ks, base + k_off(a, g), a.row, c0, cols, HS);
        load_tile<TILE>(Vs, base + k_off(a, g) + HS, a.row, c0, cols, HS);
        fm_sync();
        mm(S, SL, Qs, LT, 1, Ks, 1, LT, TILE, TILE, HS, 1.0f, false);
        mm(dP, SL, dOs, LT, 1, Vs, 1, LT, TILE, TILE, HS, 1.0f, false);
        fm_sync();
        tile_grads<TILE, DROP>(a, S, dP, lse_s, D_s, b, h, r0, rows, c0, cols);
        fm_sync();
        mm(dQ, HS, dP, SL, 1, Ks, LT, 1, TILE, HS, cols, a.scale, true); // += scale dS K
    }
    fm_sync();
    float *dq = a.dqkv + (size_t)b * a.Tk * a.row + q_off(a, h);
    for (int idx = fm_tid(); idx < rows * HS; idx += THREADS) {
        int i = idx / HS, d = idx % HS;
        dq[(size_t)(r0 + i) * a.row + d] += dQ[idx];
    }
}

} // namespace ar

#endif
