// The chunked head's cross-entropy in one pass (kernels.h's xent_stats_loss_backward16): one
// block per row of bf16 logits, copied once into shared memory; the row's max, sum of
// exponentials and target logit found there, its loss written, and with scale != 0 its
// gradient written over the logits from the shared copy. 4 bytes an element move instead of
// the two ops' 6 (xent_stats16 reads the row, xent_loss_backward16 reads and writes it). With
// 16-byte rows the exponentials are the MUFU's (fm_exp2) and both passes take 8
// columns a step: the sum their max first (one rescale a step instead of a branch and an
// accurate expf a column), the gradient's padding tested once a step and its target's column
// written again after (counted from the SASS, sm_90: 92 and 82 instructions a step, where
// they were 119 and 378 and the kernel was bound by issuing them).
// Rows past the shared memory, and TRIDENT_CUDA_XENT=two-pass, take the two ops (softmax.cu).
#include <math.h>
#include <stdint.h>

#include <type_traits>

#include "kernels/cuda/bf16.h"
#include "kernels/cuda/grid.cuh"
#include "kernels/cuda/mma_prims.cuh"

namespace {

constexpr int THREADS = 512; // two blocks an SM with rows of up to ~100 KiB

// e^(x - m) as fm_exp2 (mma_prims.cuh: the MUFU's ex2.approx.ftz, 2 ulp, results under 2^-126
// flushed to 0, 2^-inf = 0, 2^0 = 1) of (x - m) log2 e: exactly 1 at x = m (an FFMA of
// x log2 e - m log2 e is not: the rounding of m log2 e shrank a row's sum a step, a
// reviewer's simulation found)
constexpr float LOG2E = 1.4426950408889634f;

// Row n of logits16 (V bf16, columns >= n_valid padding): stats (maxv, sumexp relative to it,
// picked: the target's logit where this rank holds it), losses[n] = log(sumexp) + max - picked;
// with scale != 0 the row becomes scale (softmax - onehot) [* weights[n]], 0 for padding.
// vec: V a multiple of 8 and the rows 16-byte aligned (16-byte loads and stores).
__global__ void __launch_bounds__(THREADS, 2)
    xent_fused16_kernel(float *losses, float *maxv, float *sumexp, float *picked,
                        uint16_t *logits16, const int32_t *targets, const float *weights, int V,
                        int n_valid, int v_start, float scale, bool vec)
{
    extern __shared__ uint4 row4[]; // the row, V bf16 rounded up to 16 bytes
    __shared__ float row_stat[2];
    uint16_t *row = reinterpret_cast<uint16_t *>(row4);
    int n = blockIdx.x;
    uint16_t *x = logits16 + (size_t)n * V;
    // the copy first, its loads independent of each other
    if (vec) {
        const uint4 *src = reinterpret_cast<const uint4 *>(x);
#pragma unroll 4
        for (int i = threadIdx.x; i < V / 8; i += THREADS)
            row4[i] = src[i];
    } else {
        for (int c = threadIdx.x; c < V; c += THREADS)
            row[c] = x[c];
    }
    __syncthreads();
    float m = -INFINITY, s = 0.0f;
    if (vec) { // 8 columns a step (one 16-byte shared load): their max, then one rescale
        for (int i = threadIdx.x; i < V / 8 && 8 * i < n_valid; i += THREADS) {
            uint4 v = row4[i];
            uint32_t h[4] = {v.x, v.y, v.z, v.w};
            float f[8], cm = -INFINITY;
#pragma unroll
            for (int j = 0; j < 8; j++)
                f[j] = bf16_to_f32((uint16_t)(h[j / 2] >> (16 * (j & 1))));
            if (8 * i + 8 > n_valid) // (the row's padding, past n_valid: no term)
#pragma unroll
                for (int j = 0; j < 8; j++)
                    f[j] = 8 * i + j < n_valid ? f[j] : -INFINITY;
#pragma unroll
            for (int j = 0; j < 8; j++)
                cm = fmaxf(cm, f[j]);
            // r: the new max, or 0 while every value is -inf (no -inf - -inf; a NaN stays)
            float mn = fmaxf(m, cm), r = mn == -INFINITY ? 0.0f : mn, acc = 0.0f;
#pragma unroll
            for (int j = 0; j < 8; j++)
                acc += fm_exp2((f[j] - r) * LOG2E); // (2^-inf = 0; 2^0 = 1 at the max)
            s = s * fm_exp2((m - r) * LOG2E) + acc; // (exactly s while the max stays)
            m = mn;
        }
    } else {
        for (int c = threadIdx.x; c < n_valid; c += THREADS)
            tr_cu_online_one(m, s, bf16_to_f32(row[c]));
    }
    tr_cu_block_online<THREADS>(m, s);
    long long col = (long long)targets[n] - v_start;
    if (threadIdx.x == 0) {
        float p = col >= 0 && col < V ? bf16_to_f32(row[col]) : 0.0f;
        maxv[n] = m, sumexp[n] = s, picked[n] = p;
        losses[n] = (float)(log((double)s) + (double)m - (double)p);
        row_stat[0] = m, row_stat[1] = s;
    }
    if (scale == 0.0f)
        return;
    __syncthreads();
    float mx = row_stat[0], k = scale / row_stat[1], w = weights ? weights[n] : 1.0f;
    if (vec) {
        // 8 columns a step: g = k e^(x - max) [* w], 0 past n_valid, rounded to bf16 in pairs
        // by the hardware (fm_pack, nearest even: bf16_from_f32's bits but a NaN's payload);
        // the steps wholly inside n_valid without a test a column. The target's column is
        // written again afterwards by the thread that wrote its step, (k e^(x - max) - scale)
        // [* w].
        uint4 *dst = reinterpret_cast<uint4 *>(x);
        auto grad = [&](float xv) { return k * fm_exp2((xv - mx) * LOG2E); };
        auto pass = [&](auto weighted) {
            int full = n_valid / 8 < V / 8 ? n_valid / 8 : V / 8; // steps with no padding
            for (int i = threadIdx.x; i < V / 8; i += THREADS) {
                uint4 v = row4[i]; /* (one 16-byte shared load: no bank conflicts) */
                uint32_t h[4] = {v.x, v.y, v.z, v.w};
                float g[8];
#pragma unroll
                for (int j = 0; j < 8; j++) {
                    g[j] = grad(bf16_to_f32((uint16_t)(h[j / 2] >> (16 * (j & 1)))));
                    if (decltype(weighted)::value)
                        g[j] *= w;
                }
                if (i >= full)
#pragma unroll
                    for (int j = 0; j < 8; j++)
                        g[j] = 8 * i + j < n_valid ? g[j] : 0.0f;
#pragma unroll
                for (int j = 0; j < 8; j += 2)
                    h[j / 2] = fm_pack(g[j], g[j + 1]);
                dst[i] = make_uint4(h[0], h[1], h[2], h[3]);
            }
        };
        weights ? pass(std::true_type()) : pass(std::false_type());
        if (col >= 0 && col < n_valid && (int)(col / 8) % THREADS == (int)threadIdx.x) {
            float g = grad(bf16_to_f32(row[col])) - scale; // (its step's writer: in order)
            x[col] = fm_bf16(weights ? g * w : g);
        }
        return;
    }
    for (int c = threadIdx.x; c < V; c += THREADS) {
        float g = c < n_valid ? k * expf(bf16_to_f32(row[c]) - mx) : 0.0f;
        if (col == c && c < n_valid)
            g -= scale;
        x[c] = bf16_from_f32(weights ? g * w : g);
    }
}

bool two_pass()
{
    static const bool on = cu_env_is("TRIDENT_CUDA_XENT", "two-pass");
    return on;
}

} // namespace

extern "C" {

void cu_xent_stats_loss_backward16(tr_stream s, float *losses, float *maxv, float *sumexp,
                                   float *picked, uint16_t *logits16, const int32_t *targets,
                                   const float *weights, int N, int V, int n_valid, int v_start,
                                   float scale)
{
    if (N <= 0)
        return;
    /* the row's bytes, beside the kernel's static shared memory (the block's partial sums) */
    static size_t static_bytes = (size_t)-1;
    static int opted; /* the dynamic bytes opted into so far */
    if (static_bytes == (size_t)-1) {
        struct cudaFuncAttributes fa;
        static_bytes = cudaFuncGetAttributes(&fa, xent_fused16_kernel) == cudaSuccess
                           ? fa.sharedSizeBytes
                           : 1024;
    }
    size_t bytes = ((size_t)(V > 0 ? V : 1) * sizeof(uint16_t) + 15) & ~(size_t)15;
    /* (refused: the two ops instead) */
    bool fits = bytes + static_bytes <= (size_t)cu_smem_optin() &&
                tr_cu_opt_in_once(xent_fused16_kernel, bytes, static_bytes, opted);
    if (two_pass() || V <= 0 || !fits) {
        cu_xent_stats16(s, maxv, sumexp, picked, logits16, targets, N, V, n_valid, v_start);
        cu_xent_loss_backward16(s, losses, logits16, logits16, maxv, sumexp, picked, targets,
                                weights, N, V, n_valid, v_start, scale);
        return;
    }
    bool vec = V % 8 == 0 && ((uintptr_t)logits16 & 15) == 0;
    xent_fused16_kernel<<<N, THREADS, bytes, cu_stream(s)>>>(losses, maxv, sumexp, picked,
                                                             logits16, targets, weights, V,
                                                             n_valid, v_start, scale, vec);
    cu_launched("xent_stats_loss_backward16");
}

} // extern "C"
