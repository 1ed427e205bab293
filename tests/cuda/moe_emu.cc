// tests/cuda: the mixture-of-experts kernels' thread bodies (kernels/cuda/moe.cuh), the very
// source the GPU build compiles, run on the host over the grids moe.cu launches (moe_emu.h).
#include "kernels/cuda/moe.cuh"

#include <algorithm>
#include <functional>
#include <numeric>
#include <vector>

extern "C" {
#include "tests/cuda/moe_emu.h"
}

namespace {

constexpr int ROUTER_THREADS = 128, SCATTER_THREADS = 128, BACKWARD_WARPS = 8; // moe.cu's

// every (block, thread) of a grid of `blocks` x `threads`, in order or the last first
void launch(long blocks, int threads, bool reverse, const std::function<void(long, int)> &body)
{
    for (long b = 0; b < blocks; b++)
        for (int t = 0; t < threads; t++) {
            long bb = reverse ? blocks - 1 - b : b;
            int tt = reverse ? threads - 1 - t : t;
            body(bb, tt);
        }
}

long cdiv(long a, long b) { return (a + b - 1) / b; }

} // namespace

void emu_moe_router_forward(int32_t *idx, float *weights, float *probs, float *lse,
                            const float *logits, int N, int E, int k, int pre_softmax,
                            int reverse)
{
    moe::router_args a = {};
    a.idx = idx, a.weights = weights, a.probs = probs, a.lse = lse, a.logits = logits;
    a.N = N, a.E = E, a.k = k, a.pre_softmax = pre_softmax;
    launch(cdiv(N, ROUTER_THREADS), ROUTER_THREADS, reverse, [&](long b, int t) {
        long n = b * ROUTER_THREADS + t;
        if (n < N)
            moe::router_forward_row(a, (int)n);
    });
}

void emu_moe_router_backward(float *dlogits, const float *dweights, const int32_t *idx,
                             const float *weights, const float *probs, const float *lse,
                             const float *aux_grad, float z_grad, int N, int E, int k,
                             int pre_softmax, int reverse)
{
    moe::router_args a = {};
    a.dlogits = dlogits, a.dweights = dweights, a.cidx = idx, a.cweights = weights;
    a.cprobs = probs, a.clse = lse, a.aux_grad = aux_grad, a.z_grad = z_grad;
    a.N = N, a.E = E, a.k = k, a.pre_softmax = pre_softmax;
    launch(cdiv(N, ROUTER_THREADS), ROUTER_THREADS, reverse, [&](long b, int t) {
        long n = b * ROUTER_THREADS + t;
        if (n < N)
            moe::router_backward_row(a, (int)n);
    });
}

void emu_gather_rows(float *out, const float *src, const int32_t *idx, int M, int C,
                     int reverse)
{
    moe::rows_args a = {};
    a.out = out, a.src = src, a.idx = idx, a.M = M, a.C = C;
    size_t n = (size_t)M * C;
    launch(cdiv((long)n, 256), 256, reverse, [&](long b, int t) {
        size_t e = (size_t)b * 256 + t; // (one pass of the grid-stride loop)
        if (e < n)
            moe::gather_element(a, e);
    });
}

void emu_scatter_add_rows(float *out, const float *src, const int32_t *idx, const float *w,
                          int M, int C, int sorted, int reverse)
{
    moe::rows_args a = {};
    a.out = out, a.src = src, a.idx = idx, a.w = w, a.M = M, a.C = C;
    long col_blocks = cdiv(C, SCATTER_THREADS);
    if (!sorted) {
        launch(col_blocks, SCATTER_THREADS, reverse, [&](long b, int t) {
            long c = b * SCATTER_THREADS + t;
            if (c < C)
                moe::scatter_column(a, (int)c);
        });
        return;
    }
    std::vector<int32_t> pos(M), rows(M);
    std::iota(pos.begin(), pos.end(), 0);
    std::stable_sort(pos.begin(), pos.end(), [idx](int32_t x, int32_t y) {
        return idx[x] < idx[y];
    });
    for (int j = 0; j < M; j++)
        rows[j] = idx[pos[j]];
    a.rows = rows.data(), a.pos = pos.data();
    // grid (chunks, column blocks): blockIdx.x the chunk, blockIdx.y the column block
    long chunks = cdiv(M, moe::SCATTER_CHUNK);
    launch(chunks * col_blocks, SCATTER_THREADS, reverse, [&](long b, int t) {
        long x = b % chunks, y = b / chunks, c = y * SCATTER_THREADS + t;
        if (c < C)
            moe::scatter_chunk(a, (int)(x * moe::SCATTER_CHUNK), (int)c);
    });
}

void emu_scatter_add_rows_backward(float *dsrc, float *dw, const float *dout, const float *src,
                                   const int32_t *idx, const float *w, int M, int C,
                                   int reverse)
{
    moe::rows_args a = {};
    a.dsrc = dsrc, a.dw = dw, a.dout = dout, a.src = src, a.idx = idx, a.w = w, a.M = M;
    a.C = C;
    std::vector<double> part((size_t)M * moe::WARP);
    launch(cdiv(M, BACKWARD_WARPS), BACKWARD_WARPS * 32, reverse, [&](long b, int t) {
        long i = b * BACKWARD_WARPS + t / 32;
        if (i < M)
            part[(size_t)i * moe::WARP + t % 32] = moe::scatter_backward_lane(a, (int)i, t % 32);
    });
    if (!dw)
        return;
    for (int i = 0; i < M; i++) { // tr_cu_warp_sum_d: v += shfl_xor(v, o), o = 16 .. 1
        double *v = &part[(size_t)i * moe::WARP], nv[moe::WARP];
        for (int o = 16; o > 0; o >>= 1) {
            for (int l = 0; l < moe::WARP; l++)
                nv[l] = v[l] + v[l ^ o];
            std::copy(nv, nv + moe::WARP, v);
        }
        dw[i] = (float)v[0];
    }
}
