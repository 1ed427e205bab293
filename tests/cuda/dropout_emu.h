/* tests/cuda: kernels/cuda/dropout.cuh's hidden dropout run on the host (dropout_emu.cc), the
 * arguments of kernels.h's dropout (d: tr_dropout's fields). Every thread of dropout.cu's grid
 * in turn, in order or (reverse) the last first. Returns the path taken: 4 (hidden_vec4, every
 * row on whole Philox blocks and 16-byte pointers), 1 (hidden_block), 0 (nothing to do). */
#ifndef TR_TESTS_CUDA_DROPOUT_EMU_H
#define TR_TESTS_CUDA_DROPOUT_EMU_H

#include <stdint.h>

typedef struct emu_hidden_drop {
    uint64_t seed, first_sample;
    uint32_t site, threshold;
    float scale;
    int head0;
} emu_hidden_drop;

int emu_dropout(float *out, const float *inp, emu_hidden_drop d, int N, int C, int T, int row0,
                int C_total, int col0, int reverse);

#endif
