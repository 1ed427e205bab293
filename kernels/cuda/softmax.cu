// Row softmaxes: attention's causal softmax (forward and backward, one warp per row of T)
// and the cross-entropy pieces over the vocabulary (one block per row).
#include <math.h>

#include "kernels/cuda/bf16.h"
#include "kernels/cuda/grid.cuh"
#include "kernels/cuda/mma_prims.cuh"
#include "kernels/cuda/online_softmax.cuh"

namespace {

constexpr int WARPS = 8;      // rows per block in the attention softmax
constexpr int XENT_THREADS = 256;

// Reduce over the block (XENT_THREADS threads); every thread gets the result.
template <bool IS_MAX> __device__ float block_reduce(float v)
{
    __shared__ float part[XENT_THREADS / 32];
    __shared__ float total;
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    v = IS_MAX ? tr_cu_warp_max(v) : tr_cu_warp_sum(v);
    if (lane == 0)
        part[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float w = lane < XENT_THREADS / 32 ? part[lane] : (IS_MAX ? -INFINITY : 0.0f);
        w = IS_MAX ? tr_cu_warp_max(w) : tr_cu_warp_sum(w);
        if (lane == 0)
            total = w;
    }
    __syncthreads();
    return total;
}

// Row r of att (rows of T): scores in [0, t] -> probabilities, 0 above t, where
// t = past + r % n (training: n = T, past = 0; generation: n new positions after past).
__global__ void softmax_causal_kernel(float *att, int rows, int T, int n, int past)
{
    int r = blockIdx.x * WARPS + threadIdx.y;
    if (r >= rows)
        return;
    int t = past + r % n, lane = threadIdx.x;
    float *row = att + (size_t)r * T;
    float mx = -INFINITY;
    for (int j = lane; j <= t; j += 32)
        mx = fmaxf(mx, row[j]);
    mx = tr_cu_warp_max(mx);
    float sum = 0.0f;
    for (int j = lane; j <= t; j += 32) {
        float e = expf(row[j] - mx);
        row[j] = e;
        sum += e;
    }
    float inv = 1.0f / tr_cu_warp_sum(sum);
    for (int j = lane; j < T; j += 32)
        row[j] = j <= t ? row[j] * inv : 0.0f;
}

// Packed sequences: row r = (b, h, t) of B*NH*T rows: keys [lo, t] where lo is the first
// key of t's segment (seg (B, T), contiguous runs), 0 elsewhere.
__global__ void softmax_causal_segments_kernel(float *att, const int32_t *seg, int rows, int T,
                                               int NH)
{
    int r = blockIdx.x * WARPS + threadIdx.y;
    if (r >= rows)
        return;
    int t = r % T, lane = threadIdx.x;
    const int32_t *sg = seg + (size_t)(r / T / NH) * T;
    float *row = att + (size_t)r * T;
    float first = (float)t; // the smallest j <= t of t's segment (exact: T < 2^24)
    for (int j = lane; j <= t; j += 32)
        if (sg[j] == sg[t])
            first = fminf(first, (float)j);
    int lo = (int)(-tr_cu_warp_max(-first));
    float mx = -INFINITY;
    for (int j = lo + lane; j <= t; j += 32)
        mx = fmaxf(mx, row[j]);
    mx = tr_cu_warp_max(mx);
    float sum = 0.0f;
    for (int j = lo + lane; j <= t; j += 32) {
        float e = expf(row[j] - mx);
        row[j] = e;
        sum += e;
    }
    float inv = 1.0f / tr_cu_warp_sum(sum);
    for (int j = lane; j < T; j += 32)
        row[j] = j >= lo && j <= t ? row[j] * inv : 0.0f;
}

// dS = P (dP - sum_j P dP) for j <= t, 0 above (datt holds dP and becomes dS).
__global__ void softmax_causal_backward_kernel(float *datt, const float *att, int rows, int T)
{
    int r = blockIdx.x * WARPS + threadIdx.y;
    if (r >= rows)
        return;
    int t = r % T, lane = threadIdx.x;
    const float *p = att + (size_t)r * T;
    float *d = datt + (size_t)r * T;
    float dot = 0.0f;
    for (int j = lane; j <= t; j += 32)
        dot += p[j] * d[j];
    dot = tr_cu_warp_sum(dot);
    for (int j = lane; j < T; j += 32)
        d[j] = j <= t ? p[j] * (d[j] - dot) : 0.0f;
}

__global__ void row_max_kernel(float *maxv, const float *logits, int V, int n_valid)
{
    const float *x = logits + (size_t)blockIdx.x * V;
    float m = -INFINITY;
    for (int c = threadIdx.x; c < n_valid; c += XENT_THREADS)
        m = fmaxf(m, x[c]);
    m = block_reduce<true>(m);
    if (threadIdx.x == 0)
        maxv[blockIdx.x] = m;
}

__global__ void row_sumexp_kernel(float *sumexp, const float *logits, const float *maxv, int V,
                                  int n_valid)
{
    const float *x = logits + (size_t)blockIdx.x * V;
    float mx = maxv[blockIdx.x], s = 0.0f;
    for (int c = threadIdx.x; c < n_valid; c += XENT_THREADS)
        s += expf(x[c] - mx);
    s = block_reduce<false>(s);
    if (threadIdx.x == 0)
        sumexp[blockIdx.x] = s;
}

__global__ void pick_kernel(float *picked, const float *logits, const int32_t *targets, int N,
                            int V, int v_start)
{
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N)
        return;
    long long col = (long long)targets[n] - v_start;
    picked[n] = col >= 0 && col < V ? logits[(size_t)n * V + col] : 0.0f;
}

__global__ void loss_kernel(float *losses, const float *maxv, const float *sumexp,
                            const float *picked, int N)
{
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n < N)
        losses[n] = (float)(log((double)sumexp[n]) + (double)maxv[n] - (double)picked[n]);
}

// grid (N, column blocks): dlogits = scale (softmax - onehot), 0 for padding; may alias logits
__global__ void xent_backward_kernel(float *dlogits, const float *logits, const float *maxv,
                                     const float *sumexp, const int32_t *targets, int V,
                                     int n_valid, int v_start, float scale)
{
    int n = blockIdx.x;
    int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= V)
        return;
    size_t i = (size_t)n * V + c;
    if (c >= n_valid) {
        dlogits[i] = 0.0f;
        return;
    }
    float k = scale / sumexp[n];
    float g = k * expf(logits[i] - maxv[n]);
    long long col = (long long)targets[n] - v_start;
    if (col == c)
        g -= scale;
    dlogits[i] = g;
}

// The head's logits in fp32 or in bf16 storage (kernels.h's *16 ops): one element, and four
// consecutive ones at a 4-aligned column of a row whose length is a multiple of 4.
__device__ __forceinline__ float logit_at(const float *p, size_t i) { return p[i]; }
__device__ __forceinline__ float logit_at(const uint16_t *p, size_t i) { return bf16_to_f32(p[i]); }
__device__ __forceinline__ void logit_put(float *p, size_t i, float v) { p[i] = v; }
__device__ __forceinline__ void logit_put(uint16_t *p, size_t i, float v)
{
    p[i] = bf16_from_f32(v);
}
__device__ __forceinline__ void logits4(const float *p, size_t i, float e[4])
{
    float4 v = *reinterpret_cast<const float4 *>(p + i);
    e[0] = v.x, e[1] = v.y, e[2] = v.z, e[3] = v.w;
}
__device__ __forceinline__ void logits4(const uint16_t *p, size_t i, float e[4])
{
    uint2 v = *reinterpret_cast<const uint2 *>(p + i);
    e[0] = bf16_to_f32((uint16_t)(v.x & 0xffffu)), e[1] = bf16_to_f32((uint16_t)(v.x >> 16));
    e[2] = bf16_to_f32((uint16_t)(v.y & 0xffffu)), e[3] = bf16_to_f32((uint16_t)(v.y >> 16));
}
__device__ __forceinline__ void put4(float *p, size_t i, const float e[4])
{
    *reinterpret_cast<float4 *>(p + i) = make_float4(e[0], e[1], e[2], e[3]);
}
__device__ __forceinline__ void put4(uint16_t *p, size_t i, const float e[4])
{
    uint2 v;
    v.x = (uint32_t)bf16_from_f32(e[0]) | (uint32_t)bf16_from_f32(e[1]) << 16;
    v.y = (uint32_t)bf16_from_f32(e[2]) | (uint32_t)bf16_from_f32(e[3]) << 16;
    *reinterpret_cast<uint2 *>(p + i) = v;
}

// One block per row: max, sum of exponentials (relative to it) and target logit in one read
// of the row (online max per thread, then (max, sum) pairs combined over the block).
template <typename L>
__global__ void xent_stats_kernel(float *maxv, float *sumexp, float *picked, const L *logits,
                                  const int32_t *targets, int V, int n_valid, int v_start)
{
    int n = blockIdx.x;
    const L *x = logits + (size_t)n * V;
    float m = -INFINITY, s = 0.0f;
    for (int c = threadIdx.x; c < n_valid; c += XENT_THREADS)
        tr_cu_online_one(m, s, logit_at(x, c));
    __shared__ float part[2 * XENT_THREADS / 32];
    tr_cu_block_online<XENT_THREADS>(m, s, part);
    if (threadIdx.x == 0) {
        long long col = (long long)targets[n] - v_start;
        maxv[n] = m;
        sumexp[n] = s;
        picked[n] = col >= 0 && col < V ? logit_at(x, col) : 0.0f;
    }
}

__global__ void xent_rescale_kernel(float *sumexp, const float *local_max, const float *maxv,
                                    int N)
{
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n < N)
        sumexp[n] = local_max[n] == -INFINITY
                        ? 0.0f
                        : (float)((double)sumexp[n] * exp((double)local_max[n] - (double)maxv[n]));
}

constexpr int LB_COLS = 4; // columns per thread in xent_loss_backward

// grid (N, column blocks of XENT_THREADS * LB_COLS): the row's loss (block 0, thread 0) and
// dlogits = scale (softmax - onehot) [* weights[n]], 0 for padding; may alias logits.
template <typename L>
__global__ void xent_loss_backward_kernel(float *losses, L *dlogits, const L *logits,
                                          const float *maxv, const float *sumexp,
                                          const float *picked, const int32_t *targets,
                                          const float *weights, int V, int n_valid, int v_start,
                                          float scale)
{
    int n = blockIdx.x;
    float mx = maxv[n], se = sumexp[n];
    if (blockIdx.y == 0 && threadIdx.x == 0)
        losses[n] = (float)(log((double)se) + (double)mx - (double)picked[n]);
    float k = scale / se, w = weights ? weights[n] : 1.0f;
    long long col = (long long)targets[n] - v_start;
    size_t row = (size_t)n * V;
    int c0 = (blockIdx.y * XENT_THREADS + threadIdx.x) * LB_COLS;
    if ((V & 3) == 0 && c0 + LB_COLS <= V) { // aligned rows: one vector load and store
        float e[LB_COLS];
        logits4(logits, row + c0, e);
#pragma unroll
        for (int j = 0; j < LB_COLS; j++) {
            float g = c0 + j < n_valid ? k * expf(e[j] - mx) : 0.0f;
            if (col == c0 + j && c0 + j < n_valid)
                g -= scale;
            e[j] = weights ? g * w : g;
        }
        put4(dlogits, row + c0, e);
        return;
    }
    for (int c = c0; c < c0 + LB_COLS && c < V; c++) {
        float g = c < n_valid ? k * expf(logit_at(logits, row + c) - mx) : 0.0f;
        if (col == c && c < n_valid)
            g -= scale;
        logit_put(dlogits, row + c, weights ? g * w : g);
    }
}

// losses, and with scale != 0 dlogits (fp32 or bf16 storage; may alias logits)
template <typename L>
void loss_backward(tr_stream s, float *losses, L *dlogits, const L *logits, const float *maxv,
                   const float *sumexp, const float *picked, const int32_t *targets,
                   const float *weights, int N, int V, int n_valid, int v_start, float scale,
                   const char *what)
{
    if (N <= 0)
        return;
    if (scale == 0.0f || V <= 0) { // the losses alone
        loss_kernel<<<(N + 255) / 256, 256, 0, cu_stream(s)>>>(losses, maxv, sumexp, picked, N);
        cu_launched(what);
        return;
    }
    int per_block = XENT_THREADS * LB_COLS;
    dim3 grid(N, (V + per_block - 1) / per_block);
    xent_loss_backward_kernel<<<grid, XENT_THREADS, 0, cu_stream(s)>>>(
        losses, dlogits, logits, maxv, sumexp, picked, targets, weights, V, n_valid, v_start,
        scale);
    cu_launched(what);
}

} // namespace

extern "C" {

void cu_softmax_causal(cudaStream_t st, float *att, int rows, int T)
{
    if (rows <= 0 || T <= 0)
        return;
    softmax_causal_kernel<<<(rows + WARPS - 1) / WARPS, dim3(32, WARPS), 0, st>>>(att, rows, T,
                                                                                  T, 0);
    cu_launched("attention_forward (softmax)");
}

void cu_softmax_causal_segments(cudaStream_t st, float *att, const int32_t *seg, int rows,
                                int T, int NH)
{
    if (rows <= 0 || T <= 0)
        return;
    softmax_causal_segments_kernel<<<(rows + WARPS - 1) / WARPS, dim3(32, WARPS), 0, st>>>(
        att, seg, rows, T, NH);
    cu_launched("attention_forward (softmax, segments)");
}

void cu_softmax_decode(cudaStream_t st, float *scores, int rows, int L, int n, int past)
{
    if (rows <= 0 || L <= 0)
        return;
    softmax_causal_kernel<<<(rows + WARPS - 1) / WARPS, dim3(32, WARPS), 0, st>>>(scores, rows, L,
                                                                                  n, past);
    cu_launched("attention_decode (softmax)");
}

// The new positions' keys and values into the cache: thread (e, i, bh) copies element e of
// head h's k and v of new position i of sequence b. qkv (B, n, NH, 3, HS); caches
// (B, NH, max_T, HS).
__global__ void kv_append_kernel(float *kc, float *vc, const float *qkv, int n, int NH, int HS,
                                 int past, int max_T)
{
    int e = blockIdx.x * blockDim.x + threadIdx.x, i = blockIdx.y, bh = blockIdx.z;
    if (e >= HS)
        return;
    int b = bh / NH, h = bh % NH;
    const float *row = qkv + ((size_t)b * n + i) * 3 * NH * HS + (size_t)h * 3 * HS;
    size_t at = ((size_t)bh * max_T + past + i) * HS + e;
    kc[at] = row[HS + e];
    vc[at] = row[2 * HS + e];
}

void cu_kv_append(cudaStream_t st, float *kc, float *vc, const float *qkv, int B, int n, int NH,
                  int HS, int past, int max_T)
{
    if (B <= 0 || n <= 0)
        return;
    dim3 grid((HS + 127) / 128, n, B * NH);
    kv_append_kernel<<<grid, 128, 0, st>>>(kc, vc, qkv, n, NH, HS, past, max_T);
    cu_launched("attention_decode (cache append)");
}

void cu_softmax_causal_backward(cudaStream_t st, float *datt, const float *att, int rows,
                                   int T)
{
    if (rows <= 0 || T <= 0)
        return;
    softmax_causal_backward_kernel<<<(rows + WARPS - 1) / WARPS, dim3(32, WARPS), 0, st>>>(
        datt, att, rows, T);
    cu_launched("attention_backward (softmax)");
}

void cu_xent_row_max(tr_stream s, float *maxv, const float *logits, int N, int V,
                        int n_valid)
{
    if (N <= 0)
        return;
    row_max_kernel<<<N, XENT_THREADS, 0, cu_stream(s)>>>(maxv, logits, V, n_valid);
    cu_launched("xent_row_max");
}

void cu_xent_row_sumexp(tr_stream s, float *sumexp, const float *logits, const float *maxv,
                           int N, int V, int n_valid)
{
    if (N <= 0)
        return;
    row_sumexp_kernel<<<N, XENT_THREADS, 0, cu_stream(s)>>>(sumexp, logits, maxv, V, n_valid);
    cu_launched("xent_row_sumexp");
}

void cu_xent_pick(tr_stream s, float *picked, const float *logits, const int32_t *targets,
                     int N, int V, int v_start)
{
    if (N <= 0)
        return;
    pick_kernel<<<(N + 255) / 256, 256, 0, cu_stream(s)>>>(picked, logits, targets, N, V,
                                                              v_start);
    cu_launched("xent_pick");
}

void cu_xent_loss(tr_stream s, float *losses, const float *maxv, const float *sumexp,
                     const float *picked, int N)
{
    if (N <= 0)
        return;
    loss_kernel<<<(N + 255) / 256, 256, 0, cu_stream(s)>>>(losses, maxv, sumexp, picked, N);
    cu_launched("xent_loss");
}

void cu_xent_backward(tr_stream s, float *dlogits, const float *logits, const float *maxv,
                         const float *sumexp, const int32_t *targets, int N, int V,
                         int n_valid, int v_start, float scale)
{
    if (N <= 0 || V <= 0)
        return;
    xent_backward_kernel<<<dim3(N, (V + 255) / 256), 256, 0, cu_stream(s)>>>(
        dlogits, logits, maxv, sumexp, targets, V, n_valid, v_start, scale);
    cu_launched("xent_backward");
}

void cu_xent_stats(tr_stream s, float *maxv, float *sumexp, float *picked, const float *logits,
                   const int32_t *targets, int N, int V, int n_valid, int v_start)
{
    if (N <= 0)
        return;
    xent_stats_kernel<<<N, XENT_THREADS, 0, cu_stream(s)>>>(maxv, sumexp, picked, logits,
                                                             targets, V, n_valid, v_start);
    cu_launched("xent_stats");
}

void cu_xent_stats16(tr_stream s, float *maxv, float *sumexp, float *picked,
                     const uint16_t *logits16, const int32_t *targets, int N, int V, int n_valid,
                     int v_start)
{
    if (N <= 0)
        return;
    xent_stats_kernel<<<N, XENT_THREADS, 0, cu_stream(s)>>>(maxv, sumexp, picked, logits16,
                                                             targets, V, n_valid, v_start);
    cu_launched("xent_stats16");
}

void cu_xent_rescale(tr_stream s, float *sumexp, const float *local_max, const float *maxv,
                     int N)
{
    if (N <= 0)
        return;
    xent_rescale_kernel<<<(N + 255) / 256, 256, 0, cu_stream(s)>>>(sumexp, local_max, maxv, N);
    cu_launched("xent_rescale");
}

void cu_xent_loss_backward(tr_stream s, float *losses, float *dlogits, const float *logits,
                           const float *maxv, const float *sumexp, const float *picked,
                           const int32_t *targets, const float *weights, int N, int V,
                           int n_valid, int v_start, float scale)
{
    loss_backward(s, losses, dlogits, logits, maxv, sumexp, picked, targets, weights, N, V,
                  n_valid, v_start, scale, "xent_loss_backward");
}

void cu_xent_loss_backward16(tr_stream s, float *losses, uint16_t *dlogits16,
                             const uint16_t *logits16, const float *maxv, const float *sumexp,
                             const float *picked, const int32_t *targets, const float *weights,
                             int N, int V, int n_valid, int v_start, float scale)
{
    loss_backward(s, losses, dlogits16, logits16, maxv, sumexp, picked, targets, weights, N, V,
                  n_valid, v_start, scale, "xent_loss_backward16");
}

} // extern "C"
