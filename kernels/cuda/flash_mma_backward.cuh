// The backward kernels of flash_mma.cuh's tensor-core attention (its header states the
// shapes, the tiles and the fragments): dK dV a block per key tile, then dQ a block per query
// tile (S and dP computed in both), or, with FUSED, dK dV and dQ in one pass (S and dP once).
#ifndef TR_KERNELS_CUDA_FLASH_MMA_BACKWARD_CUH
#define TR_KERNELS_CUDA_FLASH_MMA_BACKWARD_CUH

#include "kernels/cuda/flash_mma.cuh"

#include <type_traits>

namespace fm {

// The flag of head bh's query tile from q0 (the fused backward's turns; fused_flags of them)
template <int BQ> FM_DEV int *turn_flag(const fused_args &a, int bh, int q0)
{
    return a.dq_flags + ((unsigned)bh * ((unsigned)(a.T + BQ - 1) / BQ) + (unsigned)q0 / BQ);
}

// The fused backward's dQ of a step: dQ (BQ query rows from q0 of head bh's batch x head) +=
// dS K over key tile c, dS^T (BN keys x BQ queries, row stride BQ + PAD) in shared memory at
// dSs and K at Ks (BN x LD). Warp w: the 16 rows 16 (w % RG) and the D / (4 / RG) columns
// d0 = D RG / 4 (w / RG) of them. The key tiles that reach these rows, c_first (the first
// row's segment start / BN) to c_last = q0 / BN (q0 is a multiple of BQ, which divides BN),
// add in turn from the last to the first (turn = c_last - c): a block of tile c + 1 took its
// ticket before this one (backward_kv's order), so a warp waits only on blocks that started
// before it (no deadlock) and, going tile by tile, reach a tile (BN / BQ) R steps before it
// does (no wait, mostly). Turn 0 starts from zeros, the others from the sums in
// dq_acc (after the tile's flag, turn_flag, says turn); the last, c_first, writes dQ times
// the scale into dqkv, the others store the sums. Returns what the block then posts to the
// flag, once, after the step's barrier (fm_post: one release a block, not a fence a warp):
// turn + 1, 0 from the last (the flag back to 0), or -1 (a tile's only adder: nothing to
// post). Every sum in the same order: the same bits run to run.
template <int D, int BQ, typename Q>
FM_DEV int dq_add(const fused_args &a, const uint16_t *dSs, const uint16_t *Ks, int bh, int h,
                  int q0, int c, bool last)
{
    constexpr int RG = BQ / 16, DC = D * RG / WARPS, N8 = DC / 8, LD = D + PAD;
    static_assert(WARPS % RG == 0 && N8 % 2 == 0, "whole warps, n in pairs");
    // (unsigned 32-bit offsets from 64-bit bases: the flags < 2^32 when B NH T < 2^35, a
    // head's T D sums < 2^31)
    unsigned w = fm_tid() / 32, lane = fm_tid() & 31, T = a.T, uq0 = q0;
    int turn = (int)(uq0 / BN) - c;
    unsigned rg = w % RG, d0 = w / RG * DC, r = uq0 + 16 * rg + (lane >> 2); // rows r, r + 8
    const int *flag = turn_flag<BQ>(a, bh, q0);
    float *sums = a.dq_acc + (size_t)(unsigned)bh * (T * D) + (r * D + d0 + 2 * (lane & 3));
    float prev[N8][4]; // the sums so far, loaded at once: their latency passes under the mma
    if (turn)
        fm_warp_wait(flag, turn);
    FM_UNROLL
    for (int n = 0; n < N8; n++)
        FM_UNROLL
        for (int hf = 0; hf < 2; hf++) {
            prev[n][2 * hf] = prev[n][2 * hf + 1] = 0.0f;
            if (turn && r + 8 * hf < T)
                fm_ldcg2(sums + 8 * hf * D + 8 * n, &prev[n][2 * hf]);
        }
    FM_UNROLL
    for (int n0 = 0; n0 < N8; n0 += 2) { // 16 columns at a time (registers: dK and dV live)
        float acc[2][4] = {};
        mma_tb<BN, 2>(acc, dSs + 16 * rg, BQ + PAD, Ks + d0 + 8 * n0, LD);
        FM_UNROLL
        for (int n = 0; n < 2; n++)
            FM_UNROLL
            for (int e = 0; e < 4; e++)
                acc[n][e] += prev[n0 + n][e];
        if (last) { // (a tile's last adder: rare beside the others)
            Q *out = grad_of(a, (const Q *)nullptr) + (size_t)(bh / a.NH) * T * a.C3 +
                     q_off(a, h, D) + d0 + 2 * (lane & 3) + 8 * n0;
            for (int hf = 0; hf < 2; hf++)
                if (r + 8 * hf < T)
                    for (int n = 0; n < 2; n++)
                        store_pair(out + (size_t)(r + 8 * hf) * a.C3 + 8 * n,
                                   acc[n][2 * hf] * a.scale, acc[n][2 * hf + 1] * a.scale);
        } else {
            FM_UNROLL
            for (int hf = 0; hf < 2; hf++)
                if (r + 8 * hf < T)
                    FM_UNROLL
                    for (int n = 0; n < 2; n++)
                        fm_stcg2(sums + 8 * hf * D + 8 * (n0 + n), acc[n][2 * hf],
                                 acc[n][2 * hf + 1]);
        }
    }
    return turn || !last ? (last ? 0 : turn + 1) : -1;
}

// dK, dV of key tile fm_bidx() of (batch, group) fm_bidy(); Q: qkv's storage, dqkv's and
// dout's. Steps: the group's R heads x the query tiles of BQ rows from the key tile on whose
// segments reach it (a prefix: segments' starts grow along T), each step's Q and dO tiles
// loaded while the one before is used. Shared memory: K, V (BN x LD), two stages of Q and dO
// (BQ x LD) and of the rows' lse, Drow and segment starts (BQ each), the warps' tile counts.
// BQ query rows a step; D <= 64 with BQ 32 or less: 3 blocks an SM (registers capped at 168).
// FUSED: dQ too (dq_add, each step's dS^T through shared memory after the warps' counts and
// the ticket's slot), no backward_q after it; the block's tile from its ticket, not its
// index: (batch x group) by (batch x group), the last key tile first (dq_add's order).
// DROP: kernels.h's attention_gqa_dropout_backward (drop_args, or fused_drop_args): P and dS
// with dropout's factors (probabilities<..., true>).
// (DROP at D = 32: 2 blocks an SM, whose registers hold the dropout's decisions without spills)
template <int D, typename Q = float, int BQ = bq_for(D), bool FUSED = false, bool DROP = false>
FM_KERNEL_MIN(D <= 32 || (D <= 64 && BQ <= 32) ? (DROP && D == 32 ? 2 : 3) : 1)
backward_kv(std::conditional_t<FUSED, std::conditional_t<DROP, fused_drop_args, fused_args>,
                               args_t<DROP>> a)
{
    constexpr int LD = D + PAD;
    uint16_t *Ks = reinterpret_cast<uint16_t *>(fm_shared());
    uint16_t *Vs = Ks + BN * LD, *QD = Vs + BN * LD; // stage s: Q at QD + 2 s BQ LD, dO after
    float *rows_s = reinterpret_cast<float *>(QD + 4 * BQ * LD); // stage s: lse, Drow, starts
    int *counts = reinterpret_cast<int *>(rows_s + 6 * BQ); // (4 warps' counts, then the ticket)
    uint16_t *dSs = reinterpret_cast<uint16_t *>(counts + 8);

    int c = fm_bidx(), bg = fm_bidy();
    auto tile_of_ticket = [&] { // (FUSED: the ticket in counts[4])
        int NC = fm_gridx();
        c = NC - 1 - counts[4] % NC, bg = counts[4] / NC;
    };
    if constexpr (FUSED) {
        if (fm_tid() == 0)
            counts[4] = fm_ticket(a.ticket, fm_gridx() * a.B * a.NG);
        fm_sync();
        tile_of_ticket();
    }
    int b = bg / a.NG, g = bg % a.NG, T = a.T;
    int c0 = c * BN, cols = fm_min(BN, T - c0);
    const Q *base = in_of(a, (const Q *)nullptr) + (size_t)b * T * a.C3;
    const int32_t *starts = a.starts + (size_t)b * T;
    load_kv<D>(Ks, base + k_off(a, g, D), a.C3, c0, T); // (V at Vs, BN rows after K)
    // the query tiles from c0 whose rows' segments reach the key tile: a prefix (segments'
    // starts grow along T), counted by all threads at once (one load each, not a chain)
    int w = fm_tid() / 32;
    float n_ok = 0.0f;
    for (int x = fm_tid(); c0 + x * BQ < T; x += THREADS)
        n_ok += starts[c0 + x * BQ] < c0 + cols ? 1.0f : 0.0f;
    for (int m = 16; m; m >>= 1)
        n_ok += fm_shfl_xor(n_ok, m); // (whole numbers: exact)
    if ((fm_tid() & 31) == 0)
        counts[w] = (int)n_ok;
    fm_sync();
    int tiles = counts[0] + counts[1] + counts[2] + counts[3], steps = a.R * tiles;
    static_assert(WARPS == 4 && BQ <= THREADS, "four warps' counts; a row's figures a thread");
    // step k (head g R + j, query tile t: k = j tiles + t, or k = t R + j when FUSED, counted
    // along, no division) loads
    // its tiles into stage k & 1 (Q and dO by cp.async) and its rows' lse (times log2 e),
    // Drow and segment starts into registers (thread x < BQ: row x), stored later by
    // store_rows, so their loads' latency passes while the step before computes
    const Q *q_base = base + (size_t)g * (a.R + 2) * D; // head g R + j's queries: + j D
    const Q *do_base = dout_of(a, (const Q *)nullptr) + (size_t)b * T * a.C + (size_t)g * a.R * D;
    size_t row_base = ((size_t)b * a.NH + (size_t)g * a.R) * T; // lse, Drow: + j T + row
    float r_lse2 = 0.0f, r_D = 0.0f;
    int r_start = 0;
    auto load_step = [&](int k, int j, int t) {
        int q0 = c0 + t * BQ, rows = fm_min(BQ, T - q0);
        uint16_t *Qn = QD + (k & 1) * 2 * BQ * LD;
        load_tile<D, BQ>(Qn, q_base + j * D, a.C3, q0, rows);
        load_tile<D, BQ>(Qn + BQ * LD, do_base + j * D, a.C, q0, rows);
        if (fm_tid() < BQ) {
            int row = q0 + fm_min(fm_tid(), rows - 1);
            size_t x = row_base + (size_t)j * T + row;
            r_lse2 = a.lse_in[x] * LOG2E;
            r_D = a.Drow[x];
            r_start = starts[row];
        }
    };
    auto store_rows = [&](int k) {
        float *rn = rows_s + (k & 1) * 3 * BQ;
        if (fm_tid() < BQ) {
            rn[fm_tid()] = r_lse2, rn[BQ + fm_tid()] = r_D;
            reinterpret_cast<int *>(rn)[2 * BQ + fm_tid()] = r_start;
        }
    };
    if (steps) {
        load_step(0, 0, 0);
        store_rows(0);
    }
    fm_cp_commit();
    fm_cp_wait0();
    fm_sync();

    float dk[D / 8][4] = {}, dv[D / 8][4] = {};
    int j = 0, t = 0; // this step's head (g R + j) and query tile
    for (int k = 0; k < steps; k++) {
        int h = g * a.R + j, q0 = c0 + t * BQ;
        // the next step's: FUSED tile by tile, each tile's heads in turn, so that the block of
        // key tile c + 1 reaches a (head, tile) BN / BQ tiles' steps before this one whatever
        // the two blocks' counts of tiles (dq_add's order; head by head, a block whose packed
        // segment ends soon would wait on the next one's later heads)
        int nj = FUSED ? (j + 1 < a.R ? j + 1 : 0) : t + 1 < tiles ? j : j + 1;
        int nt = FUSED ? (j + 1 < a.R ? t : t + 1) : t + 1 < tiles ? t + 1 : 0;
        const uint16_t *Qs = QD + (k & 1) * 2 * BQ * LD, *dOs = Qs + BQ * LD;
        const float *rs = rows_s + (k & 1) * 3 * BQ;
        const int *s0 = reinterpret_cast<const int *>(rs) + 2 * BQ;
        if (k + 1 < steps)
            load_step(k + 1, nj, nt); // into the other stage: its readers passed the last sync
        fm_cp_commit();
        float slope2 = a.alibi ? a.alibi[h] * LOG2E : 0.0f;
        float st[BQ / 8][4], dpt[BQ / 8][4]; // S^T, dP^T: 16 keys x BQ queries
        mma_sbt2<D, BQ / 8>(st, Ks + 16 * w * LD, Qs, dpt, Vs + 16 * w * LD, dOs, LD);
        // every key before every query of the tile, none past T, inside every segment
        bool full = q0 >= c0 + BN - 1 && q0 + BQ <= T && c0 >= s0[BQ - 1];
        if constexpr (DROP)
            probabilities_of<true, BQ / 8, true>(
                !full, a, st, dpt, slope2, q0, c0, rs, rs + BQ, s0, T,
                keep_bits<true, BQ / 8>(a.dr, drop::at(a.dr, b, h, T), q0, c0, T), a.dr.scale);
        else
            probabilities_of<true, BQ / 8>(!full, a, st, dpt, slope2, q0, c0, rs, rs + BQ, s0,
                                           T);
        if constexpr (FUSED) // dS^T of the warp's 16 keys, for dq_add
            FM_UNROLL
            for (int n = 0; n < BQ / 8; n++)
                FM_UNROLL
                for (int hf = 0; hf < 2; hf++)
                    fm_st32(dSs + (16 * w + (fm_tid() & 31) / 4 + 8 * hf) * (BQ + PAD) + 8 * n +
                                2 * (fm_tid() & 3),
                            fm_pack(dpt[n][2 * hf], dpt[n][2 * hf + 1]));
        mma_pb<BQ, D / 8>(dv, st, dOs, LD);  // dV += P^T dO
        mma_pb<BQ, D / 8>(dk, dpt, Qs, LD);  // dK += dS^T Q
        int post = -1; // (FUSED: what the block posts to the tile's flag, dq_add's)
        if constexpr (FUSED) {
            fm_sync(); // every warp's dS^T is in dSs
            post = dq_add<D, BQ, Q>(a, dSs, Ks, b * a.NH + h, h, q0, c, c == s0[0] / BN);
        }
        if (k + 1 < steps)
            store_rows(k + 1); // (the other stage's figures: read by no one now)
        fm_cp_wait0(); // the next step's tiles have landed, every warp is done with these
        fm_sync();
        if constexpr (FUSED) // every warp's sums are stored (the barrier): one release
            if (post >= 0 && fm_tid() == 0)
                fm_post(turn_flag<BQ>(a, b * a.NH + h, q0), post);
        j = nj, t = nt;
    }
    if constexpr (FUSED) { // the tile again from the ticket's slot: a register less in the loop
        tile_of_ticket();
        b = bg / a.NG, g = bg % a.NG, c0 = c * BN, cols = fm_min(BN, T - c0);
    }
    int tq = fm_tid() & 3, key0 = c0 + 16 * w + (fm_tid() & 31) / 4; // keys key0, key0 + 8
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
// dout's storage. Shared memory: Q, dO (BM x LD), two stages of K and V (BN x LD each).
// DROP: as backward_kv's.
template <int D, typename Q = float, bool DROP = false> FM_KERNEL backward_q(args_t<DROP> a)
{
    constexpr int LD = D + PAD;
    uint16_t *Qs = reinterpret_cast<uint16_t *>(fm_shared());
    uint16_t *dOs = Qs + BM * LD, *KV = dOs + BM * LD; // stage s: K at KV + 2 s BN LD, V after

    int qt = fm_gridx() - 1 - fm_bidx(), bh = fm_bidy(), b = bh / a.NH, h = bh % a.NH;
    int g = h / a.R, T = a.T, r0 = qt * BM, rows = fm_min(BM, T - r0);
    const Q *base = in_of(a, (const Q *)nullptr) + (size_t)b * T * a.C3;
    const Q *kbase = base + k_off(a, g, D);
    const int32_t *starts = a.starts + (size_t)b * T;
    int c_begin = starts[r0] / BN;
    load_tile<D, BM>(Qs, base + q_off(a, h, D), a.C3, r0, rows);
    load_tile<D, BM>(dOs, dout_of(a, (const Q *)nullptr) + (size_t)b * T * a.C + (size_t)h * D,
                     a.C, r0, rows);
    kv_stream<D, Q> kv = {KV, kbase, a.C3, c_begin, qt, T};
    kv.start();
    fm_cp_commit();

    int w = fm_tid() / 32, lane = fm_tid() & 31, gq = lane >> 2, tq = lane & 3;
    int row[2] = {16 * w + gq, 16 * w + gq + 8};
    float lse_r[2], D_r[2];
    int first[2];
    for (int hf = 0; hf < 2; hf++) {
        size_t t = (size_t)r0 + fm_min(row[hf], rows - 1);
        lse_r[hf] = a.lse_in[(size_t)bh * T + t] * LOG2E;
        D_r[hf] = a.Drow[(size_t)bh * T + t];
        first[hf] = starts[t];
    }
    int last_start = starts[r0 + rows - 1];
    float slope2 = a.alibi ? a.alibi[h] * LOG2E : 0.0f;
    fm_cp_wait0();
    fm_sync();
    float dq[D / 8][4] = {};
    for (int c = c_begin; c <= qt; c++) {
        int c0 = c * BN;
        const uint16_t *Ks = kv.at(c), *Vs = Ks + BN * LD;
        float s[BN / 8][4], dp[BN / 8][4];
        mma_sbt2<D, BN / 8>(s, Qs + 16 * w * LD, Ks, dp, dOs + 16 * w * LD, Vs, LD);
        bool full = c < qt && c0 >= last_start && r0 + BM <= T;
        if constexpr (DROP)
            probabilities_of<false, BN / 8, true>(
                !full, a, s, dp, slope2, r0, c0, lse_r, D_r, first, T,
                keep_bits<false, BN / 8>(a.dr, drop::at(a.dr, b, h, T), r0, c0, T), a.dr.scale);
        else
            probabilities_of<false, BN / 8>(!full, a, s, dp, slope2, r0, c0, lse_r, D_r, first,
                                            T);
        mma_pb<BN, D / 8>(dq, dp, Ks, LD); // dQ += dS K
        fm_cp_wait0(); // the next tile has landed, and every warp is done with this one
        fm_sync();
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
