/* tests/cuda: kernels/cuda/xent_fused.cuh's cross-entropy row run on the host (xent_emu.cc,
 * through warp_emu.hpp) as xent_fused.cu launches it on the GPU: N blocks of 512 threads, the
 * row's bytes of shared memory, 16-byte steps where V is a multiple of 8 and logits16 is
 * 16-byte aligned. The arguments are kernels.h's xent_stats_loss_backward16's (no stream). */
#ifndef TR_TESTS_CUDA_XENT_EMU_H
#define TR_TESTS_CUDA_XENT_EMU_H

#include <stdint.h>

void emu_xent_stats_loss_backward16(float *losses, float *maxv, float *sumexp, float *picked,
                                    uint16_t *logits16, const int32_t *targets,
                                    const float *weights, int N, int V, int n_valid,
                                    int v_start, float scale);

#endif
