/* kernels/cuda/attention_rows.cu: context parallelism's attention_rows_forward / _backward and
 * attention_rows_dropout_forward / _backward (kernels.h), fp32: attention_rows.cuh's
 * flash-style kernels (forward out and lse; backward dK dV a block per key tile, dQ a block per
 * query tile, each added into dqkv once: no atomics, the same bits run to run). */
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
void cu_attention_rows_dropout_forward(tr_stream s, float *out, float *lse, const float *qkv,
                                       const float *alibi, int B, int Tk, int q0, int NH, int NG,
                                       int HS, int T, tr_dropout d);
void cu_attention_rows_dropout_backward(tr_stream s, float *dqkv, const float *dout,
                                        const float *qkv, const float *out, const float *lse,
                                        const float *alibi, int B, int Tk, int q0, int NH,
                                        int NG, int HS, int T, tr_dropout d);
#ifdef __cplusplus
}
#endif

#endif
