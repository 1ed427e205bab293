/* tests/cuda: kernels/cuda/attention_rows.cuh's kernels (the CUDA attention_rows_* and
 * attention_rows_dropout_*) run on the host (rows_emu.cc, through warp_emu.hpp) over the grids
 * attention_rows.cu launches. Arguments and layouts as kernels.h's ops: qkv (B, Tk, NG, R+2,
 * HS), out (B, Tk - q0, NH, HS), lse (B, NH, Tk - q0); backward ADDS into dqkv. drop: NULL, or
 * dropout with mask length T (the DROP kernels). tile: the kernels' rows a tile (16, 32, 64),
 * 0: the launcher's (attention_rows.cuh's tile_for). Returns the tile run. */
#ifndef TR_TESTS_CUDA_ROWS_EMU_H
#define TR_TESTS_CUDA_ROWS_EMU_H

#include <stdint.h>

typedef struct emu_rows_drop { /* kernels.h's tr_dropout */
    uint64_t seed, first_sample;
    uint32_t site, threshold;
    float scale;
    int head0;
} emu_rows_drop;

int emu_rows_forward(float *out, float *lse, const float *qkv, const float *alibi, int B,
                     int Tk, int q0, int NH, int NG, int HS, int T, const emu_rows_drop *drop,
                     int tile);
int emu_rows_backward(float *dqkv, const float *dout, const float *qkv, const float *out,
                      const float *lse, const float *alibi, int B, int Tk, int q0, int NH,
                      int NG, int HS, int T, const emu_rows_drop *drop, int tile);

#endif
