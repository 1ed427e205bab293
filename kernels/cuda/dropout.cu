// kernels.h's dropout on the GPU (both tables: fp32 storage), the threads' bodies in
// dropout.cuh (run on the host by tests/cuda's cuda-dropout-emulated against the CPU's op):
// four elements a thread from one Philox block, by 16-byte loads and stores where every row
// starts a block (hidden_vec4), else a thread a (row, block) of any alignment (hidden_block).
// The backward is the same call on the gradient.
#include "kernels/cuda/dropout.cuh"

#include "kernels/cuda/grid.cuh"

namespace {

__global__ void hidden_vec4_kernel(drop::hidden_args a, size_t n)
{
    TR_CU_GRID_STRIDE(v, n) drop::hidden_vec4(a, v);
}

__global__ void hidden_block_kernel(drop::hidden_args a, size_t n)
{
    long per_row = drop::blocks_per_row(a.C);
    TR_CU_GRID_STRIDE(x, n) drop::hidden_block(a, (long)(x / per_row), (long)(x % per_row));
}

} // namespace

extern "C" void cu_dropout(tr_stream s, float *out, const float *inp, tr_dropout d, int N, int C,
                           int T, int row0, int C_total, int col0)
{
    if (N <= 0 || C <= 0)
        return;
    drop::hidden_args a = {out, inp, drop::params_of(d), N, C, T, row0, C_total, col0};
    cudaStream_t st = cu_stream(s);
    if (drop::vec4_fits(a)) {
        size_t n = (size_t)N * C / 4;
        hidden_vec4_kernel<<<tr_cu_blocks(n), CU_THREADS, 0, st>>>(a, n);
    } else {
        size_t n = (size_t)N * drop::blocks_per_row(C);
        hidden_block_kernel<<<tr_cu_blocks(n), CU_THREADS, 0, st>>>(a, n);
    }
    cu_launched("dropout");
}
