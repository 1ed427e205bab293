/* kernels/cuda/attention_rows.cu: context parallelism's attention_rows_forward / _backward
 * (kernels.h), fp32. One warp per query row (lanes over the head's dims), an online softmax
 * over its keys; backward adds dK and dV with atomics (several query rows share a key), so
 * unlike the CPU backend its sums' order, and their last bits, vary from run to run. */
#ifndef TR_KERNELS_CUDA_ATTENTION_ROWS_H
#define TR_KERNELS_CUDA_ATTENTION_ROWS_H

#include "kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif
void cu_attention_rows_forward(tr_stream s, float *out, float *lse, const float *qkv,
                               const float *alibi, int B, int Tk, int q0, int NH, int NG, int HS);
void cu_attention_rows_backward(tr_stream s, float *dqkv, const float *dout, const float *qkv,
                                const float *out, const float *lse, const float *alibi, int B,
                                int Tk, int q0, int NH, int NG, int HS);
#ifdef __cplusplus
}
#endif

#endif
