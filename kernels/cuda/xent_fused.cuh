// kernels/cuda/ — internal: the row of the fused cross-entropy (xent_fused.cu's kernel,
// kernels.h's xent_stats_loss_backward16), written on mma_prims.cuh's primitives so that
// tests/cuda's warp emulator (warp_emu.hpp, included instead of them) runs the very source
// the GPU does.
//   xf::args                      a launch's arrays and sizes (below)
//   xf::shared_bytes<THREADS>(V)  the dynamic shared memory a block of THREADS takes
//   xf::row<THREADS>(a)           block fm_bidx()'s row, every thread of the block calling it
// One block per row of bf16 logits, copied once into shared memory; the row's max, sum of
// exponentials and target logit found there, its loss written, and with scale != 0 its
// gradient written over the logits from the shared copy. 4 bytes an element move instead of
// the two ops' 6 (xent_stats16 reads the row, xent_loss_backward16 reads and writes it). With
// 16-byte rows the exponentials are the MUFU's (fm_exp2) and both passes take 8 columns a
// step: the sum their max first (one rescale a step instead of a branch and an accurate expf a
// column), the gradient's padding tested once a step and its target's column written again
// after (counted from the SASS, sm_90: 92 and 82 instructions a step, where they were 119 and
// 378 and the kernel was bound by issuing them).
#ifndef TR_KERNELS_CUDA_XENT_FUSED_CUH
#define TR_KERNELS_CUDA_XENT_FUSED_CUH

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include <type_traits>

#include "kernels/cuda/bf16.h"
#include "kernels/cuda/online_softmax.cuh"

namespace xf {

// e^(x - m) as fm_exp2 (mma_prims.cuh: the MUFU's ex2.approx.ftz, 2 ulp, results under 2^-126
// flushed to 0, 2^-inf = 0, 2^0 = 1) of (x - m) log2 e: exactly 1 at x = m (an FFMA of
// x log2 e - m log2 e is not: the rounding of m log2 e shrank a row's sum a step, a
// reviewer's simulation found)
constexpr float LOG2E = 1.4426950408889634f;

// Row n of logits16 (V bf16, columns >= n_valid padding): stats (maxv, sumexp relative to it,
// picked: the target's logit where this rank holds it), losses[n] = log(sumexp) + max - picked;
// with scale != 0 the row becomes scale (softmax - onehot) [* weights[n]], 0 for padding.
// vec: V a multiple of 8 and the rows 16-byte aligned (16-byte loads and stores).
struct args {
    float *losses, *maxv, *sumexp, *picked;
    uint16_t *logits16;
    const int32_t *targets;
    const float *weights; // NULL: none
    int V, n_valid, v_start;
    float scale;
    bool vec;
};

// The row (V bf16 rounded up to 16 bytes), then the warps' (max, sum) pairs and the row's.
FM_HD constexpr size_t row_bytes(int V)
{
    return ((size_t)(V > 0 ? V : 1) * sizeof(uint16_t) + 15) & ~(size_t)15;
}
template <int THREADS> FM_HD constexpr size_t shared_bytes(int V)
{
    return row_bytes(V) + (2 * THREADS / 32 + 2) * sizeof(float);
}

template <int THREADS> FM_DEV void row(const args &a)
{
    uint4 *row4 = reinterpret_cast<uint4 *>(fm_shared());
    uint16_t *row = reinterpret_cast<uint16_t *>(row4);
    float *part = reinterpret_cast<float *>(fm_shared() + row_bytes(a.V));
    float *row_stat = part + 2 * THREADS / 32;
    const int V = a.V, n_valid = a.n_valid, tid = fm_tid();
    const int n = fm_bidx();
    uint16_t *x = a.logits16 + (size_t)n * V;
    // the copy first, its loads independent of each other
    if (a.vec) {
        const uint4 *src = reinterpret_cast<const uint4 *>(x);
        FM_UNROLL_4
        for (int i = tid; i < V / 8; i += THREADS)
            row4[i] = src[i];
    } else {
        for (int c = tid; c < V; c += THREADS)
            row[c] = x[c];
    }
    fm_sync();
    float m = -INFINITY, s = 0.0f;
    if (a.vec) { // 8 columns a step (one 16-byte shared load): their max, then one rescale
        for (int i = tid; i < V / 8 && 8 * i < n_valid; i += THREADS) {
            uint4 v = row4[i];
            uint32_t h[4] = {v.x, v.y, v.z, v.w};
            float f[8], cm = -INFINITY;
            FM_UNROLL
            for (int j = 0; j < 8; j++)
                f[j] = bf16_to_f32((uint16_t)(h[j / 2] >> (16 * (j & 1))));
            if (8 * i + 8 > n_valid) // (the row's padding, past n_valid: no term)
                FM_UNROLL
                for (int j = 0; j < 8; j++)
                    f[j] = 8 * i + j < n_valid ? f[j] : -INFINITY;
            FM_UNROLL
            for (int j = 0; j < 8; j++)
                cm = fmaxf(cm, f[j]);
            // r: the new max, or 0 while every value is -inf (no -inf - -inf; a NaN stays)
            float mn = fmaxf(m, cm), r = mn == -INFINITY ? 0.0f : mn, acc = 0.0f;
            FM_UNROLL
            for (int j = 0; j < 8; j++)
                acc += fm_exp2((f[j] - r) * LOG2E); // (2^-inf = 0; 2^0 = 1 at the max)
            s = s * fm_exp2((m - r) * LOG2E) + acc; // (exactly s while the max stays)
            m = mn;
        }
    } else {
        for (int c = tid; c < n_valid; c += THREADS)
            tr_cu_online_one(m, s, bf16_to_f32(row[c]));
    }
    tr_cu_block_online<THREADS>(m, s, part);
    long long col = (long long)a.targets[n] - a.v_start;
    if (tid == 0) {
        float p = col >= 0 && col < V ? bf16_to_f32(row[col]) : 0.0f;
        a.maxv[n] = m, a.sumexp[n] = s, a.picked[n] = p;
        a.losses[n] = (float)(log((double)s) + (double)m - (double)p);
        row_stat[0] = m, row_stat[1] = s;
    }
    if (a.scale == 0.0f)
        return;
    fm_sync();
    const float scale = a.scale, mx = row_stat[0], k = scale / row_stat[1];
    const float w = a.weights ? a.weights[n] : 1.0f;
    if (a.vec) {
        // 8 columns a step: g = k e^(x - max) [* w], 0 past n_valid, rounded to bf16 in pairs
        // by the hardware (fm_pack, nearest even: bf16_from_f32's bits but a NaN's payload);
        // the steps wholly inside n_valid without a test a column. The target's column is
        // written again afterwards by the thread that wrote its step, (k e^(x - max) - scale)
        // [* w].
        uint4 *dst = reinterpret_cast<uint4 *>(x);
        auto grad = [&](float xv) { return k * fm_exp2((xv - mx) * LOG2E); };
        auto pass = [&](auto weighted) {
            int full = n_valid / 8 < V / 8 ? n_valid / 8 : V / 8; // steps with no padding
            for (int i = tid; i < V / 8; i += THREADS) {
                uint4 v = row4[i]; /* (one 16-byte shared load: no bank conflicts) */
                uint32_t h[4] = {v.x, v.y, v.z, v.w};
                float g[8];
                FM_UNROLL
                for (int j = 0; j < 8; j++) {
                    g[j] = grad(bf16_to_f32((uint16_t)(h[j / 2] >> (16 * (j & 1)))));
                    if (decltype(weighted)::value)
                        g[j] *= w;
                }
                if (i >= full)
                    FM_UNROLL
                    for (int j = 0; j < 8; j++)
                        g[j] = 8 * i + j < n_valid ? g[j] : 0.0f;
                FM_UNROLL
                for (int j = 0; j < 8; j += 2)
                    h[j / 2] = fm_pack(g[j], g[j + 1]);
                dst[i] = make_uint4(h[0], h[1], h[2], h[3]);
            }
        };
        a.weights ? pass(std::true_type()) : pass(std::false_type());
        if (col >= 0 && col < n_valid && (int)(col / 8) % THREADS == tid) {
            float g = grad(bf16_to_f32(row[col])) - scale; // (its step's writer: in order)
            x[col] = fm_bf16(a.weights ? g * w : g);
        }
        return;
    }
    for (int c = tid; c < V; c += THREADS) {
        float g = c < n_valid ? k * expf(bf16_to_f32(row[c]) - mx) : 0.0f;
        if (col == c && c < n_valid)
            g -= scale;
        x[c] = bf16_from_f32(a.weights ? g * w : g);
    }
}

} // namespace xf

#endif
