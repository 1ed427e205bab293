// tests/cuda: the hidden dropout's thread bodies (kernels/cuda/dropout.cuh), the very source the
// GPU build compiles, run on the host over the grids dropout.cu launches (dropout_emu.h).
#include "kernels/cuda/dropout.cuh"

extern "C" {
#include "tests/cuda/dropout_emu.h"
}

int emu_dropout(float *out, const float *inp, emu_hidden_drop d, int N, int C, int T, int row0,
                int C_total, int col0, int reverse)
{
    drop::hidden_args a = {out, inp, drop::params_of(d), N, C, T, row0, C_total, col0};
    if (N <= 0 || C <= 0)
        return 0;
    bool vec = drop::vec4_fits(a);
    long per_row = drop::blocks_per_row(C);
    size_t n = vec ? (size_t)N * C / 4 : (size_t)N * per_row;
    for (size_t i = 0; i < n; i++) { // every thread of the grid, in order or the last first
        size_t x = reverse ? n - 1 - i : i;
        if (vec)
            drop::hidden_vec4(a, x);
        else
            drop::hidden_block(a, (long)(x / per_row), (long)(x % per_row));
    }
    return vec ? 4 : 1;
}
