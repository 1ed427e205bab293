/* tests/cuda: kernels/cuda/moe.cuh's thread bodies run on the host (moe_emu.cc) as moe.cu
 * launches them: every thread of each grid in turn, in launch order or (reverse 1) the last
 * thread first, which gives the same bits where no thread reads what another writes. The
 * arguments are kernels.h's ops' (no stream). emu_scatter_add_rows: sorted 1 the path of
 * more than 64 routed rows (std::stable_sort of (idx[i], i) by idx standing in for CUB's
 * radix sort: the stable order is the one order), 0 the column walk. dw: the warp's
 * butterfly of moe.cu (tr_cu_warp_sum_d) over the 32 lanes' parts. */
#ifndef TR_TESTS_CUDA_MOE_EMU_H
#define TR_TESTS_CUDA_MOE_EMU_H

#include <stdint.h>

void emu_moe_router_forward(int32_t *idx, float *weights, float *probs, float *lse,
                            const float *logits, int N, int E, int k, int pre_softmax,
                            int reverse);
void emu_moe_router_backward(float *dlogits, const float *dweights, const int32_t *idx,
                             const float *weights, const float *probs, const float *lse,
                             const float *aux_grad, float z_grad, int N, int E, int k,
                             int pre_softmax, int reverse);
void emu_gather_rows(float *out, const float *src, const int32_t *idx, int M, int C,
                     int reverse);
void emu_scatter_add_rows(float *out, const float *src, const int32_t *idx, const float *w,
                          int M, int C, int sorted, int reverse);
void emu_scatter_add_rows_backward(float *dsrc, float *dw, const float *dout, const float *src,
                                   const int32_t *idx, const float *w, int M, int C,
                                   int reverse);

#endif
