// tests/cuda: the fused cross-entropy's row (kernels/cuda/xent_fused.cuh), the very source the
// GPU build compiles, run on the host through warp_emu.hpp (xent_emu.h states the call).
#include "tests/cuda/warp_emu.hpp"

#include <stdint.h>

#include "kernels/cuda/xent_fused.cuh"

extern "C" {
#include "tests/cuda/xent_emu.h"
}

namespace {
constexpr int THREADS = 512; // xent_fused.cu's block
}

void emu_xent_stats_loss_backward16(float *losses, float *maxv, float *sumexp, float *picked,
                                    uint16_t *logits16, const int32_t *targets,
                                    const float *weights, int N, int V, int n_valid,
                                    int v_start, float scale)
{
    xf::args a = {losses, maxv,   sumexp,  picked, logits16, targets, weights,
                  V,      n_valid, v_start, scale,  V % 8 == 0 && ((uintptr_t)logits16 & 15) == 0};
    emu::launch(N, 1, xf::shared_bytes<THREADS>(V), [&a] { xf::row<THREADS>(a); }, THREADS);
}
