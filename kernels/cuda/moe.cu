// The mixture-of-experts ops of both CUDA tables (kernels.h, "mixture of experts"), fp32 in
// both: the bf16 mode keeps its storage ops fp32 (its twin "cpu-bf16" rounds the scatter's
// output and dsrc as it rounds the embedding's and the linear layers' outputs, which the
// CUDA tables keep fp32 too). The threads' bodies are moe.cuh's (run on the host by
// tests/cuda's cuda-moe-emulated against kernels/cpu/moe.c).
//   router forward / backward: a thread a token row (E any size: no per-row storage; the
//     top-k k passes over the row, k E comparisons). k outside 1 .. E is refused by name
//     (nothing launched, the error kept for tr_cuda_status).
//   gather_rows: a thread an element.
//   scatter_add_rows: deterministic, no atomics, the CPU's bits: a row's contributions are
//     added in i order. Up to SCATTER_COLUMN_MAX_M routed rows: a thread a column walks
//     i = 0 .. M-1 (the CPU's loop). Beyond: the (idx[i], i) pairs sorted by idx with CUB's
//     radix sort (stable: equal rows keep i's order), then a thread a (run of equal rows,
//     column) adds the run in order into its row: each output element read and written once.
//     The sort's scratch (4 M int32 and CUB's temporary bytes) is this file's buffer, grown
//     to the largest call: compute stream only (cu_shared_stream); where cudaMalloc cannot
//     have it, the column walk runs (said once).
//   scatter_add_rows_backward: a warp a routed row; dw's double sum by the warp's butterfly.
#include "kernels/cuda/moe.cuh"

#include <cub/device/device_radix_sort.cuh>
#include <mutex>

#include "kernels/cuda/grid.cuh"

namespace {

constexpr int ROUTER_THREADS = 128;
constexpr int SCATTER_THREADS = 128;    // columns a block of the sorted scatter
constexpr int SCATTER_COLUMN_MAX_M = 64; // fewer dependent steps than the sort's 4 launches
constexpr int BACKWARD_WARPS = 8;

__global__ void __launch_bounds__(ROUTER_THREADS) router_forward_kernel(moe::router_args a)
{
    int n = blockIdx.x * ROUTER_THREADS + threadIdx.x;
    if (n < a.N)
        moe::router_forward_row(a, n);
}

__global__ void __launch_bounds__(ROUTER_THREADS) router_backward_kernel(moe::router_args a)
{
    int n = blockIdx.x * ROUTER_THREADS + threadIdx.x;
    if (n < a.N)
        moe::router_backward_row(a, n);
}

__global__ void gather_kernel(moe::rows_args a, size_t n)
{
    TR_CU_GRID_STRIDE(e, n) moe::gather_element(a, e);
}

__global__ void __launch_bounds__(SCATTER_THREADS) scatter_column_kernel(moe::rows_args a)
{
    int c = blockIdx.x * SCATTER_THREADS + threadIdx.x;
    if (c < a.C)
        moe::scatter_column(a, c);
}

// the sort's input: keys idx[i], values i
__global__ void scatter_pairs_kernel(int32_t *keys, int32_t *pos, const int32_t *idx, int M)
{
    TR_CU_GRID_STRIDE(i, (size_t)M)
    {
        keys[i] = idx[i];
        pos[i] = (int32_t)i;
    }
}

// grid (chunks of SCATTER_CHUNK sorted positions, column blocks)
__global__ void __launch_bounds__(SCATTER_THREADS) scatter_sorted_kernel(moe::rows_args a)
{
    int c = blockIdx.y * SCATTER_THREADS + threadIdx.x;
    if (c < a.C)
        moe::scatter_chunk(a, (int)blockIdx.x * moe::SCATTER_CHUNK, c);
}

// a warp a routed row (the row is the warp's: its lanes leave together)
__global__ void __launch_bounds__(BACKWARD_WARPS * 32) scatter_backward_kernel(moe::rows_args a)
{
    int i = blockIdx.x * BACKWARD_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (i >= a.M)
        return;
    double dot = moe::scatter_backward_lane(a, i, lane);
    if (!a.dw)
        return;
    dot = tr_cu_warp_sum_d(dot);
    if (lane == 0)
        a.dw[i] = (float)dot;
}

std::mutex sort_mu; // held from the buffer's growth through the scatter's launch
void *sort_buf;
size_t sort_have;

size_t align256(size_t b) { return (b + 255) & ~(size_t)255; }

bool refuse_router(const char *op, int E, int k)
{
    if (E >= 1 && k >= 1 && k <= E)
        return false;
    cu_keep_error("cuda: %s: k %d outside 1 .. E (%d experts)", op, k, E);
    return true;
}

// (idx[i], i) sorted by idx, stably, into a.rows and a.pos; false (nothing launched) where the
// scratch cannot be had
bool sort_rows(cudaStream_t st, moe::rows_args &a)
{
    size_t temp = 0;
    cub::DoubleBuffer<int32_t> none_k(nullptr, nullptr), none_v(nullptr, nullptr);
    if (cu_note(cub::DeviceRadixSort::SortPairs(nullptr, temp, none_k, none_v, a.M, 0, 32, st),
                "scatter_add_rows (its sort's size)"))
        return false;
    size_t arr = align256((size_t)a.M * sizeof(int32_t)), bytes = 4 * arr + temp;
    if (!cu_grow_buffer(&sort_buf, &sort_have, bytes, 0, st, "scatter_add_rows: its sort")) {
        static bool told;
        if (!told)
            tr_warn("cuda: no %.1f MiB for scatter_add_rows' sort: a thread a column walks "
                    "the rows instead", (double)bytes / 1048576.0);
        told = true;
        return false;
    }
    char *b = (char *)sort_buf;
    int32_t *k0 = (int32_t *)b, *k1 = (int32_t *)(b + arr), *v0 = (int32_t *)(b + 2 * arr),
            *v1 = (int32_t *)(b + 3 * arr);
    scatter_pairs_kernel<<<tr_cu_blocks((size_t)a.M), CU_THREADS, 0, st>>>(k0, v0, a.idx, a.M);
    cu_launched("scatter_add_rows (its sort's pairs)");
    cub::DoubleBuffer<int32_t> keys(k0, k1), vals(v0, v1);
    cu_note(cub::DeviceRadixSort::SortPairs(b + 4 * arr, temp, keys, vals, a.M, 0, 32, st),
            "scatter_add_rows (its sort)");
    a.rows = keys.Current(), a.pos = vals.Current();
    return true;
}

} // namespace

extern "C" {

void cu_moe_router_forward(tr_stream s, int32_t *idx, float *weights, float *probs, float *lse,
                           const float *logits, int N, int E, int k, int pre_softmax)
{
    if (N <= 0 || refuse_router("moe_router_forward", E, k))
        return;
    moe::router_args a = {};
    a.idx = idx, a.weights = weights, a.probs = probs, a.lse = lse, a.logits = logits;
    a.N = N, a.E = E, a.k = k, a.pre_softmax = pre_softmax;
    router_forward_kernel<<<(N + ROUTER_THREADS - 1) / ROUTER_THREADS, ROUTER_THREADS, 0,
                            cu_stream(s)>>>(a);
    cu_launched("moe_router_forward");
}

void cu_moe_router_backward(tr_stream s, float *dlogits, const float *dweights,
                            const int32_t *idx, const float *weights, const float *probs,
                            const float *lse, const float *aux_grad, float z_grad, int N, int E,
                            int k, int pre_softmax)
{
    if (N <= 0 || refuse_router("moe_router_backward", E, k))
        return;
    moe::router_args a = {};
    a.dlogits = dlogits, a.dweights = dweights, a.cidx = idx, a.cweights = weights;
    a.cprobs = probs, a.clse = lse, a.aux_grad = aux_grad, a.z_grad = z_grad;
    a.N = N, a.E = E, a.k = k, a.pre_softmax = pre_softmax;
    router_backward_kernel<<<(N + ROUTER_THREADS - 1) / ROUTER_THREADS, ROUTER_THREADS, 0,
                             cu_stream(s)>>>(a);
    cu_launched("moe_router_backward");
}

void cu_gather_rows(tr_stream s, float *out, const float *src, const int32_t *idx, int M, int C)
{
    size_t n = (size_t)(M > 0 ? M : 0) * (size_t)(C > 0 ? C : 0);
    if (!n)
        return;
    moe::rows_args a = {};
    a.out = out, a.src = src, a.idx = idx, a.M = M, a.C = C;
    gather_kernel<<<tr_cu_blocks(n), CU_THREADS, 0, cu_stream(s)>>>(a, n);
    cu_launched("gather_rows");
}

void cu_scatter_add_rows(tr_stream s, float *out, const float *src, const int32_t *idx,
                         const float *w, int M, int C)
{
    if (M <= 0 || C <= 0)
        return;
    moe::rows_args a = {};
    a.out = out, a.src = src, a.idx = idx, a.w = w, a.M = M, a.C = C;
    unsigned col_blocks = (unsigned)((C + SCATTER_THREADS - 1) / SCATTER_THREADS);
    if (col_blocks > 65535u) { /* the sorted grid's y */
        cu_keep_error("cuda: scatter_add_rows: C %d past %d columns", C, 65535 * SCATTER_THREADS);
        return;
    }
    if (M > SCATTER_COLUMN_MAX_M) {
        cudaStream_t st = cu_shared_stream(s, "scatter_add_rows");
        std::lock_guard<std::mutex> hold(sort_mu);
        if (sort_rows(st, a)) {
            dim3 grid((unsigned)((M + moe::SCATTER_CHUNK - 1) / moe::SCATTER_CHUNK), col_blocks);
            scatter_sorted_kernel<<<grid, SCATTER_THREADS, 0, st>>>(a);
            cu_launched("scatter_add_rows");
            return;
        }
    }
    scatter_column_kernel<<<col_blocks, SCATTER_THREADS, 0, cu_stream(s)>>>(a);
    cu_launched("scatter_add_rows (columns)");
}

void cu_scatter_add_rows_backward(tr_stream s, float *dsrc, float *dw, const float *dout,
                                  const float *src, const int32_t *idx, const float *w, int M,
                                  int C)
{
    if (M <= 0)
        return;
    moe::rows_args a = {};
    a.dsrc = dsrc, a.dw = dw, a.dout = dout, a.src = src, a.idx = idx, a.w = w, a.M = M;
    a.C = C > 0 ? C : 0;
    scatter_backward_kernel<<<(M + BACKWARD_WARPS - 1) / BACKWARD_WARPS, BACKWARD_WARPS * 32, 0,
                              cu_stream(s)>>>(a);
    cu_launched("scatter_add_rows_backward");
}

} // extern "C"
