/* kernels/cuda/ — internal (not a contract): the backend's state and the launchers the .cu
 * files export to the C files. Included by C (gcc) and CUDA (nvcc) translation units.
 *
 * Files: device.c (init, device choice, error capture, budget/reserve), memory.c (alloc,
 * copies), gemm.c (cuBLASLt GEMMs and their plan cache), linear.c (the fused linear ops, on
 * gemm.c's calls and staging: gemm_internal.h), attention.c (attention from GEMMs
 * and the softmax kernels), table.c (the two tables); elementwise.cu, layernorm.cu,
 * softmax.cu (attention softmax and cross-entropy), embedding.cu, moe.cu (mixture of
 * experts), optimizer.cu.
 * Sizes as in kernels.h. Every launcher takes the tr_stream of the op (NULL = the compute
 * stream) and notes a launch error under its op's name. */
#ifndef TR_KERNELS_CUDA_INTERNAL_H
#define TR_KERNELS_CUDA_INTERNAL_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/cuda/cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Threads per block of the elementwise launchers; the most blocks a grid-stride loop uses. */
#define CU_THREADS 256
#define CU_MAX_BLOCKS 8192

/* Row chunks of the two-stage column reductions (bias and layernorm parameter gradients):
 * partial sums of chunk r go to the reduction scratch, then are added in chunk order. */
#define CU_MAX_CHUNKS 64

/* The compute stream for tr_stream s (NULL = the backend's own); switches the calling thread
 * to the backend's device the first time it calls. */
cudaStream_t cu_stream(tr_stream s);
/* Keep the first error (logged once); what names the op. Returns 1 if e is an error. */
int cu_note(cudaError_t e, const char *what);
/* Keep an op's own error (printf format: an argument it refuses, named), as cu_note does. */
void cu_keep_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* After a launch: cu_note(cudaGetLastError(), what). */
void cu_launched(const char *what);
/* 1 once an error has been kept. */
int cu_failed(void);
/* cuBLASLt is loaded on its first call (cublaslt_lazy.c): NULL once it is, else why it does
 * not load (each of its functions then returns CUBLAS_STATUS_NOT_INITIALIZED). */
const char *cu_cublaslt_error(void);

/* The single-stream rule: the reduction scratch, the pinned scalar, the cuBLASLt workspace
 * and the bf16 staging are the backend's one copy each, so the ops that use them (gemm,
 * bias_backward, layernorm_backward, rmsnorm_backward, sumsq) run on the compute stream only
 * (s NULL or the backend's own). cu_shared_stream returns that stream; another stream is an
 * error kept for tr_cuda_status ("... uses the backend's shared scratch: compute stream
 * only"), and the op runs on the stream it was given (the caller must not rely on its
 * result). */
cudaStream_t cu_shared_stream(tr_stream s, const char *op);

/* Reduction scratch (device): CU_SCRATCH_BYTES, used by one op at a time on the compute
 * stream (the single-stream rule above). */
#define CU_SCRATCH_BYTES ((size_t)16 << 20)
void *cu_scratch(void);
/* A pinned host double for sumsq's result. */
double *cu_host_scalar(void);
/* The shared memory (bytes) one block may opt into past 48 KiB. */
int cu_smem_optin(void);
/* A device buffer of at least `bytes` outside the arena, grown as calls need (the smaller one
 * freed first, which waits for the device; zeroed on st when zero): 1, or 0 when cudaMalloc
 * cannot have it (the error cleared, *mem NULL, *have 0; the caller says so). `what` names
 * the user in a failed free. */
int cu_grow_buffer(void **mem, size_t *have, size_t bytes, int zero, cudaStream_t st,
                   const char *what);
/* 1 when the environment variable name is set to value (the TRIDENT_CUDA_* switches) */
int cu_env_is(const char *name, const char *value);
/* Chunks for a column reduction of N rows and `cols` columns with `arrays` partial arrays. */
int cu_chunks(int N, int cols, int arrays);

/* ---- layernorm.cu: the norms' backward in one read of dout and the input (LayerNorm with
 * mean and dbias; RMSNorm with mean and dbias NULL), on the compute stream st (it uses the
 * reduction scratch; dout fp32, or dout16 bf16 with dout NULL): 0 when it does not apply (a
 * row's sums past the shared memory, or TRIDENT_CUDA_NORM_BACKWARD=two-pass) and the caller
 * runs its two-pass kernels. */
int cu_norm_backward_fused(cudaStream_t st, float *dinp, float *dweight, float *dbias,
                           const float *dout, const uint16_t *dout16, const float *inp,
                           const float *weight, const float *mean, const float *rstd, int N,
                           int C);

/* ---- family.cu: RMSNorm, SwiGLU, GeGLU, rotary embedding (kernels.h, "model families") */
void cu_rmsnorm_forward(tr_stream s, float *out, float *rstd, const float *inp,
                        const float *weight, int N, int C, float eps);
void cu_rmsnorm_backward(tr_stream s, float *dinp, float *dweight, const float *dout,
                         const float *inp, const float *weight, const float *rstd, int N, int C);
void cu_rmsnorm_backward16(tr_stream s, float *dinp, float *dweight, const uint16_t *dout16,
                           const float *inp, const float *weight, const float *rstd, int N,
                           int C);
void cu_swiglu_forward(tr_stream s, float *out, const float *inp, size_t n);
void cu_swiglu_backward(tr_stream s, float *dinp, const float *inp, const float *dout, size_t n);
void cu_geglu_forward(tr_stream s, float *out, const float *inp, size_t n, int exact);
void cu_geglu_backward(tr_stream s, float *dinp, const float *inp, const float *dout, size_t n,
                       int exact);
void cu_rope(tr_stream s, float *qkv, const float *cos, const float *sin, int B, int T, int NG,
             int R, int HS, int rot, int inverse, const int32_t *positions);
/* rows of B*NH*T scores (T each): row (b, h, t) += slope_h * (j - t) for keys j <= t */
void cu_alibi_add(cudaStream_t st, float *att, const float *slopes, int rows, int T, int NH);

/* Generation with grouped heads: the groups' new keys/values (qkv (B, n, NG, R+2, HS)) into
 * rows [past, past + n) of the caches (B, NG, max_T, HS); ALiBi on decode scores (rows
 * (b, h, i) of L keys, new row i at position past + i). */
void cu_kv_append_gqa(cudaStream_t st, float *kc, float *vc, const float *qkv, int B, int n,
                      int NG, int R, int HS, int past, int max_T);
void cu_alibi_add_decode(cudaStream_t st, float *scores, const float *slopes, int rows, int NH,
                         int n, int L, int past);

/* ---- attention_gqa.c: grouped query heads and ALiBi (kernels.h, attention_gqa_*) */
void cu_attention_gqa_forward_fp32(tr_stream s, float *out, float *lse, const float *qkv,
                                   const float *alibi, int B, int T, int NH, int NG, int HS,
                                   const int32_t *segments);
void cu_attention_gqa_backward_fp32(tr_stream s, float *dqkv, float *scratch, const float *dout,
                                    const float *qkv, const float *out, const float *lse,
                                    const float *alibi, int B, int T, int NH, int NG, int HS,
                                    const int32_t *segments);
void cu_attention_gqa_forward_bf16(tr_stream s, float *out, float *lse, const float *qkv,
                                   const float *alibi, int B, int T, int NH, int NG, int HS,
                                   const int32_t *segments);
void cu_attention_gqa_backward_bf16(tr_stream s, float *dqkv, float *scratch, const float *dout,
                                    const float *qkv, const float *out, const float *lse,
                                    const float *alibi, int B, int T, int NH, int NG, int HS,
                                    const int32_t *segments);
/* kernels.h's attention_gqa_dropout_forward / _backward (fp32 or bf16 products) */
void cu_attention_gqa_dropout_forward_fp32(tr_stream s, float *out, float *lse, const float *qkv,
                                           const float *alibi, int B, int T, int NH, int NG,
                                           int HS, const int32_t *segments, tr_dropout d);
void cu_attention_gqa_dropout_backward_fp32(tr_stream s, float *dqkv, float *scratch,
                                            const float *dout, const float *qkv, const float *out,
                                            const float *lse, const float *alibi, int B, int T,
                                            int NH, int NG, int HS, const int32_t *segments,
                                            tr_dropout d);
void cu_attention_gqa_dropout_forward_bf16(tr_stream s, float *out, float *lse, const float *qkv,
                                           const float *alibi, int B, int T, int NH, int NG,
                                           int HS, const int32_t *segments, tr_dropout d);
void cu_attention_gqa_dropout_backward_bf16(tr_stream s, float *dqkv, float *scratch,
                                            const float *dout, const float *qkv, const float *out,
                                            const float *lse, const float *alibi, int B, int T,
                                            int NH, int NG, int HS, const int32_t *segments,
                                            tr_dropout d);
/* kernels.h's attention_gqa_forward16 / _backward16 (bf16 mode: the output in bf16 storage) */
void cu_attention_gqa_forward16(tr_stream s, uint16_t *out16, float *lse, const float *qkv,
                                const float *alibi, int B, int T, int NH, int NG, int HS,
                                const int32_t *segments);
void cu_attention_gqa_backward16(tr_stream s, float *dqkv, float *scratch, const float *dout,
                                 const float *qkv, const uint16_t *out16, const float *lse,
                                 const float *alibi, int B, int T, int NH, int NG, int HS,
                                 const int32_t *segments);
/* ---- flash.cu: the fused attention of both layouts (GPT-2's: NG = NH, alibi NULL); fp32
 * products or bf16 tensor-core tiles. scratch: B*(NH+1)*T floats (kernels.h). The bf16 ones
 * keep the output in bf16 storage where out16 is set (out NULL): forward writes it, backward
 * reads it (kernels.h's attention_*16). */
void cu_flash_forward_fp32(tr_stream s, float *out, float *lse, const float *qkv,
                           const float *alibi, int B, int T, int NH, int NG, int HS,
                           const int32_t *segments);
void cu_flash_forward_bf16(tr_stream s, float *out, uint16_t *out16, float *lse,
                           const float *qkv, const float *alibi, int B, int T, int NH, int NG,
                           int HS, const int32_t *segments);
void cu_flash_backward_fp32(tr_stream s, float *dqkv, float *scratch, const float *dout,
                            const float *qkv, const float *out, const float *lse,
                            const float *alibi, int B, int T, int NH, int NG, int HS,
                            const int32_t *segments);
void cu_flash_backward_bf16(tr_stream s, float *dqkv, float *scratch, const float *dout,
                            const float *qkv, const float *out, const uint16_t *out16,
                            const float *lse, const float *alibi, int B, int T, int NH, int NG,
                            int HS, const int32_t *segments);
/* kernels.h's attention_forward_qkv16 / _backward_qkv16 (bf16 mode: qkv, its gradient and the
 * output in bf16 storage; both layouts) */
void cu_attention_forward_qkv16(tr_stream s, uint16_t *out16, float *lse, const uint16_t *qkv16,
                                const float *alibi, int B, int T, int NH, int NG, int HS,
                                const int32_t *segments);
void cu_attention_backward_qkv16(tr_stream s, uint16_t *dqkv16, float *scratch,
                                 const uint16_t *dout16, const uint16_t *qkv16,
                                 const uint16_t *out16, const float *lse, const float *alibi,
                                 int B, int T, int NH, int NG, int HS, const int32_t *segments);
void cu_attention_gqa_decode_fp32(tr_stream s, float *out, float *kcache, float *vcache,
                                  float *scores, const float *qkv, const float *alibi, int B,
                                  int n, int past, int max_T, int NH, int NG, int HS);
void cu_attention_gqa_decode_bf16(tr_stream s, float *out, float *kcache, float *vcache,
                                  float *scores, const float *qkv, const float *alibi, int B,
                                  int n, int past, int max_T, int NH, int NG, int HS);

/* ---- elementwise.cu */
void cu_add(tr_stream s, float *out, const float *a, const float *b, size_t n);
void cu_axpy(tr_stream s, float *y, float alpha, const float *x, size_t n);
void cu_scale(tr_stream s, float *x, float alpha, size_t n);
void cu_scale_rows(tr_stream s, float *x, const float *w, int N, int C);
void cu_bias_add(tr_stream s, float *out, const float *bias, int N, int C);
void cu_bias_backward(tr_stream s, float *dbias, const float *dout, int N, int C);
void cu_gelu_forward(tr_stream s, float *out, const float *inp, size_t n);
void cu_gelu_forward16(tr_stream s, uint16_t *out16, const float *inp, const uint16_t *inp16,
                       size_t n);
void cu_layernorm_forward16(tr_stream s, uint16_t *out16, float *mean, float *rstd,
                            const float *inp, const float *weight, const float *bias, int N,
                            int C, float eps);
void cu_rmsnorm_forward16(tr_stream s, uint16_t *out16, float *rstd, const float *inp,
                          const float *weight, int N, int C, float eps);
void cu_gelu_backward(tr_stream s, float *dinp, const float *inp, const float *dout,
                         size_t n);
/* kernels.h's gelu_backward16 (dbias summed as cu_bias_backward sums: the same bits) */
void cu_gelu_backward16(tr_stream s, uint16_t *dinp16, float *dbias, const float *inp,
                        const uint16_t *inp16, const float *dout, const uint16_t *dout16, int N,
                        int C);
/* the exact GELU's four (kernels.h's gelu_exact_*: x normcdff(x)) */
void cu_gelu_exact_forward(tr_stream s, float *out, const float *inp, size_t n);
void cu_gelu_exact_backward(tr_stream s, float *dinp, const float *inp, const float *dout,
                            size_t n);
void cu_gelu_exact_forward16(tr_stream s, uint16_t *out16, const float *inp,
                             const uint16_t *inp16, size_t n);
void cu_gelu_exact_backward16(tr_stream s, uint16_t *dinp16, float *dbias, const float *inp,
                              const uint16_t *inp16, const float *dout, const uint16_t *dout16,
                              int N, int C);
/* ReLU's four (kernels.h's relu_*: max(x, 0), the backward a select), the GELU's kernels of
 * elementwise.cu with ReLU's value and slope */
void cu_relu_forward(tr_stream s, float *out, const float *inp, size_t n);
void cu_relu_backward(tr_stream s, float *dinp, const float *inp, const float *dout, size_t n);
void cu_relu_forward16(tr_stream s, uint16_t *out16, const float *inp, const uint16_t *inp16,
                       size_t n);
void cu_relu_backward16(tr_stream s, uint16_t *dinp16, float *dbias, const float *inp,
                        const uint16_t *inp16, const float *dout, const uint16_t *dout16, int N,
                        int C);
/* C[r, c] = beta * C[r, c] for a rows x cols block with row stride ldc (beta 0 writes 0). */
void cu_scale_2d(cudaStream_t st, float *C, int rows, int cols, int ldc, float beta);
/* Pack a rows x cols block (row stride ld) into contiguous bf16 (row stride cols). */
void cu_pack_bf16(cudaStream_t st, uint16_t *dst, const float *src, int rows, int cols,
                     long long ld);
/* Pack N x C contiguous src into bf16 dst and add its column sums to dbias (C floats), in
 * one pass: linear_backward's dy and its bias gradient (cu_bias_backward's bits). Compute
 * stream only (the reduction scratch). */
void cu_pack_bf16_colsum(cudaStream_t st, uint16_t *dst, float *dbias, const float *src, int N,
                         int C);
/* dbias (C) += the column sums of src16 (N, C) bf16 (linear_backward's dy16 with a bias
 * gradient: QKV's), in cu_bias_backward's order. Compute stream only (the reduction scratch). */
void cu_bias_backward16(cudaStream_t st, float *dbias, const uint16_t *src16, int N, int C);
/* out16[r, c] = bf16(out16[r, c] + bias16[c]) for rows x cols with row stride ld
 * (linear_forward's bf16 output where cuBLASLt has no bias epilogue for it) */
void cu_bias_add16(cudaStream_t st, uint16_t *out16, const uint16_t *bias16, int rows, int cols,
                   int ld);
void cu_to_bf16(tr_stream s, uint16_t *dst, const float *src, size_t n);
void cu_from_bf16(tr_stream s, float *dst, const uint16_t *src, size_t n);

/* ---- layernorm.cu */
void cu_layernorm_forward(tr_stream s, float *out, float *mean, float *rstd,
                             const float *inp, const float *weight, const float *bias, int N,
                             int C, float eps);
void cu_layernorm_backward(tr_stream s, float *dinp, float *dweight, float *dbias,
                              const float *dout, const float *inp, const float *weight,
                              const float *mean, const float *rstd, int N, int C);
void cu_layernorm_backward16(tr_stream s, float *dinp, float *dweight, float *dbias,
                             const uint16_t *dout16, const float *inp, const float *weight,
                             const float *mean, const float *rstd, int N, int C);

/* ---- softmax.cu: attention's causal softmax (rows of att, (B*NH*T) rows of T) and the
 * cross-entropy pieces */
/* att row (bh, t) holds scaled scores in [0, t]; becomes probabilities, 0 above t. */
void cu_softmax_causal(cudaStream_t st, float *att, int rows, int T);
/* The same with packed sequences: row (b, h, t) of B*NH*T sees keys j <= t with
 * seg[b*T + j] == seg[b*T + t] (seg: (B, T) device ids, contiguous runs); 0 elsewhere. */
void cu_softmax_causal_segments(cudaStream_t st, float *att, const int32_t *seg, int rows,
                                int T, int NH);
/* Generation: rows of L scores, row r of a (bh) block of n new positions sees keys
 * [0, past + r % n]; probabilities there, 0 after. */
void cu_softmax_decode(cudaStream_t st, float *scores, int rows, int L, int n, int past);
/* Keys and values of n new positions (qkv (B, n, NH, 3, HS)) into rows [past, past + n) of
 * the caches (B, NH, max_T, HS). */
void cu_kv_append(cudaStream_t st, float *kc, float *vc, const float *qkv, int B, int n, int NH,
                  int HS, int past, int max_T);
/* datt = att * (datt - sum_j att * datt) for j <= t, 0 above t (in place). */
void cu_softmax_causal_backward(cudaStream_t st, float *datt, const float *att, int rows,
                                   int T);
void cu_xent_row_max(tr_stream s, float *maxv, const float *logits, int N, int V,
                        int n_valid);
void cu_xent_row_sumexp(tr_stream s, float *sumexp, const float *logits, const float *maxv,
                           int N, int V, int n_valid);
void cu_xent_pick(tr_stream s, float *picked, const float *logits, const int32_t *targets,
                     int N, int V, int v_start);
void cu_xent_loss(tr_stream s, float *losses, const float *maxv, const float *sumexp,
                     const float *picked, int N);
void cu_xent_backward(tr_stream s, float *dlogits, const float *logits, const float *maxv,
                         const float *sumexp, const int32_t *targets, int N, int V,
                         int n_valid, int v_start, float scale);
void cu_xent_stats(tr_stream s, float *maxv, float *sumexp, float *picked, const float *logits,
                   const int32_t *targets, int N, int V, int n_valid, int v_start);
void cu_xent_rescale(tr_stream s, float *sumexp, const float *local_max, const float *maxv,
                     int N);
void cu_xent_loss_backward(tr_stream s, float *losses, float *dlogits, const float *logits,
                           const float *maxv, const float *sumexp, const float *picked,
                           const int32_t *targets, const float *weights, int N, int V,
                           int n_valid, int v_start, float scale);
/* ---- flash_mma.cu: the tensor-core attention of the bf16 mode (flash_mma.cuh); 0 (nothing
 * launched) where it does not take the call: a head size other than 16, 32, 64, 128, a tensor
 * not 16-byte aligned, or TRIDENT_CUDA_ATTENTION=wmma. Shapes as kernels.h's attention_gqa_*;
 * both read qkv, or qkv16 (bf16; qkv NULL, and then the forward's out16 is set and the
 * backward reads dout16 and writes dqkv16, bf16, in place of dout and dqkv); the forward
 * writes out, or out16 (bf16) where set; the backward takes flash.cu's fa_prepare
 * results: Drow (B, NH, T) = rowsum(dout * out) and starts (B, T), each row's segment start.
 * drop: NULL, or the attention dropout (kernels.h's attention_gqa_dropout_*: fp32 out, qkv,
 * dout and dqkv only; the backward's two kernels, never TRIDENT_CUDA_ATTENTION_BWD=fused's). */
int cu_flash_mma_forward(cudaStream_t st, float *out, uint16_t *out16, float *lse,
                         const float *qkv, const uint16_t *qkv16, const float *alibi, int B,
                         int T, int NH, int NG, int HS, const int32_t *segments,
                         const tr_dropout *drop);
int cu_flash_mma_backward(cudaStream_t st, float *dqkv, uint16_t *dqkv16, const float *Drow,
                          const int32_t *starts, const float *dout, const uint16_t *dout16,
                          const float *qkv, const uint16_t *qkv16, const float *lse,
                          const float *alibi, int B, int T, int NH, int NG, int HS,
                          const tr_dropout *drop);
/* ---- attention_cudnn.cpp: cuDNN's attention on kernels.h's attention_*_qkv16 tensors
 * (attention_cudnn.h): 1 when it ran, 0 when the caller's kernels must run (not asked for by
 * TRIDENT_CUDA_ATTENTION, a call it does not take, cuDNN missing or refusing; alibi and
 * segments: whether the call has them). Builds without cuDNN's headers define both as 0. */
int cu_cudnn_attention_forward(cudaStream_t st, uint16_t *out16, float *lse,
                               const uint16_t *qkv16, int B, int T, int NH, int NG, int HS,
                               int alibi, int segments);
int cu_cudnn_attention_backward(cudaStream_t st, uint16_t *dqkv16, const uint16_t *dout16,
                                const uint16_t *qkv16, const uint16_t *out16, const float *lse,
                                int B, int T, int NH, int NG, int HS, int alibi, int segments);
/* the same on the head's bf16-storage logits (kernels.h's xent_stats16, xent_loss_backward16) */
void cu_xent_stats16(tr_stream s, float *maxv, float *sumexp, float *picked,
                     const uint16_t *logits16, const int32_t *targets, int N, int V, int n_valid,
                     int v_start);
void cu_xent_loss_backward16(tr_stream s, float *losses, uint16_t *dlogits16,
                             const uint16_t *logits16, const float *maxv, const float *sumexp,
                             const float *picked, const int32_t *targets, const float *weights,
                             int N, int V, int n_valid, int v_start, float scale);
/* ---- xent_fused.cu: both in one pass over each row (kernels.h's xent_stats_loss_backward16) */
void cu_xent_stats_loss_backward16(tr_stream s, float *losses, float *maxv, float *sumexp,
                                   float *picked, uint16_t *logits16, const int32_t *targets,
                                   const float *weights, int N, int V, int n_valid, int v_start,
                                   float scale);

/* ---- embedding.cu */
void cu_embedding_forward(tr_stream s, float *out, const int32_t *ids, const float *table,
                             int N, int C, int v_start, int V);
void cu_embedding_backward(tr_stream s, float *dtable, const float *dout,
                              const int32_t *ids, int N, int C, int v_start, int V);
void cu_position_forward(tr_stream s, float *out, const float *wpe, int B, int T, int C);
void cu_position_backward(tr_stream s, float *dwpe, const float *dout, int B, int T, int C);

/* ---- dropout.cu: kernels.h's dropout (dropout.cuh the threads' bodies) */
void cu_dropout(tr_stream s, float *out, const float *inp, tr_dropout d, int N, int C, int T,
                int row0, int C_total, int col0);
/* ---- flash.cu: kernels.h's attention_gqa_dropout_forward / _backward, fp32 products (the
 * fp32 mode) or bf16 ones (bf16: flash_mma.cu's kernels where they take the call) */
void cu_flash_dropout_forward(tr_stream s, int bf16, float *out, float *lse, const float *qkv,
                              const float *alibi, int B, int T, int NH, int NG, int HS,
                              const int32_t *segments, tr_dropout d);
void cu_flash_dropout_backward(tr_stream s, int bf16, float *dqkv, float *scratch,
                               const float *dout, const float *qkv, const float *out,
                               const float *lse, const float *alibi, int B, int T, int NH,
                               int NG, int HS, const int32_t *segments, tr_dropout d);

/* ---- moe.cu: the mixture-of-experts ops (kernels.h; moe.cuh the threads' bodies) */
void cu_moe_router_forward(tr_stream s, int32_t *idx, float *weights, float *probs, float *lse,
                           const float *logits, int N, int E, int k, int pre_softmax);
void cu_moe_router_backward(tr_stream s, float *dlogits, const float *dweights,
                            const int32_t *idx, const float *weights, const float *probs,
                            const float *lse, const float *aux_grad, float z_grad, int N, int E,
                            int k, int pre_softmax);
void cu_gather_rows(tr_stream s, float *out, const float *src, const int32_t *idx, int M, int C);
void cu_scatter_add_rows(tr_stream s, float *out, const float *src, const int32_t *idx,
                         const float *w, int M, int C);
void cu_scatter_add_rows_backward(tr_stream s, float *dsrc, float *dw, const float *dout,
                                  const float *src, const int32_t *idx, const float *w, int M,
                                  int C);

/* ---- optimizer.cu */
void cu_adamw(tr_stream s, float *params, const float *grads, float *m, float *v, size_t n,
                 float lr, float beta1, float beta2, float eps, float weight_decay,
                 float grad_scale, int step);
double cu_sumsq(tr_stream s, const float *x, size_t n);

/* ---- memory.c */
void *cu_alloc(size_t bytes);
void cu_free(void *p);
void cu_to_device(tr_stream s, void *dst, const void *host_src, size_t bytes);
void cu_to_host(tr_stream s, void *host_dst, const void *src, size_t bytes);
void cu_copy(tr_stream s, void *dst, const void *src, size_t bytes);
void cu_zero(tr_stream s, void *dst, size_t bytes);
void cu_synchronize(tr_stream s);
/* The arena (device.c's reserve makes it): adopt [base, base + bytes); release it. */
TR_MUST_CHECK int cu_arena_adopt(void *base, size_t bytes);
TR_MUST_CHECK int cu_arena_release(void);

/* ---- gemm.c
 * Row-major C = alpha op(A) op(B) + beta C over `batch` matrices at element strides
 * sA, sB, sC. mode: how the product is computed. */
typedef enum {
    CU_GEMM_FP32 = 0,      /* fp32 inputs, fp32 compute (no TF32) */
    CU_GEMM_BF16 = 1,      /* operands converted to bf16 (RNE) in the workspace */
    CU_GEMM_FAST_BF16 = 2, /* fp32 buffers, cuBLASLt's 32F_FAST_16BF compute */
} cu_gemm_mode;
void cu_gemm_ex(cudaStream_t st, cu_gemm_mode mode, int trans_a, int trans_b, int M,
                   int N, int K, float alpha, const float *A, int lda, long long sA,
                   const float *B, int ldb, long long sB, float beta, float *C, int ldc,
                   long long sC, int batch);
/* The table's gemm for each precision. */
void cu_gemm_fp32(tr_stream s, int trans_a, int trans_b, int M, int N, int K, float alpha,
                     const float *A, int lda, const float *B, int ldb, float beta, float *C,
                     int ldc);
void cu_gemm_bf16(tr_stream s, int trans_a, int trans_b, int M, int N, int K, float alpha,
                     const float *A, int lda, const float *B, int ldb, float beta, float *C,
                     int ldc);
/* ---- linear.c
 * kernels.h's linear_forward in bf16 mode: the bias in cuBLASLt's epilogue where it can be, the
 * residual its C input; a bf16 output y16 written by the GEMM. */
void cu_linear_forward_bf16(tr_stream s, float *y, uint16_t *y16, const float *x,
                            const uint16_t *x16, const float *W, const float *b,
                            const float *residual, int N, int IC, int OC);
/* kernels.h's linear_backward in bf16 mode: dy converted once for both GEMMs, db summed in
 * that pass; a bf16 dy16 read in place. */
void cu_linear_backward_bf16(tr_stream s, float *dx, uint16_t *dx16, float *dW, float *db,
                             const float *dy, const uint16_t *dy16, const float *x,
                             const uint16_t *x16, const float *W, int N, int IC, int OC);
/* The MLP's GELU in fc's and fc_proj's GEMMs (kernels.h's linear_gelu_forward16,
 * linear_backward_gelu16), bf16 mode. */
void cu_linear_gelu_forward16(tr_stream s, uint16_t *pre16, uint16_t *out16, const float *x,
                              const uint16_t *x16, const float *W, const float *b, int N, int IC,
                              int OC);
void cu_linear_backward_gelu16(tr_stream s, uint16_t *dpre16, float *dpre_bias, float *dW,
                               float *db, const float *dy, const uint16_t *x16,
                               const uint16_t *pre16, const float *W, int N, int IC, int OC);
/* The head's bf16-storage GEMMs (kernels.h's gemm_out16, gemm_a16), bf16 mode. */
void cu_gemm_out16(tr_stream s, int trans_a, int trans_b, int M, int N, int K, float alpha,
                   const float *A, int lda, const float *B, int ldb, uint16_t *C16, int ldc);
void cu_gemm_a16(tr_stream s, int trans_a, int trans_b, int M, int N, int K, float alpha,
                 const uint16_t *A16, int lda, const float *B, int ldb, float beta, float *C,
                 int ldc);
/* kernels.h's gemm_mixed16 (gemm_out16 is its case of two fp32 operands) and narrow16 */
void cu_gemm_mixed16(tr_stream s, int trans_a, int trans_b, int M, int N, int K, float alpha,
                     const float *A, const uint16_t *A16, int lda, const float *B,
                     const uint16_t *B16, int ldb, float beta, float *C, uint16_t *C16, int ldc);
void cu_narrow16(tr_stream s, uint16_t *dst16, const float *src, size_t n);
/* The MLP activation's (kernels.h's gemm_b16), bf16 mode. */
void cu_gemm_b16(tr_stream s, int trans_a, int trans_b, int M, int N, int K, float alpha,
                 const float *A, int lda, const uint16_t *B16, int ldb, float beta, float *C,
                 int ldc);
/* staging_bytes: tr_cuda_staging_bytes; device and sms: the GPU's name and SM count, which
 * pick its recorded algorithm choices (gemm_choice.h) */
TR_MUST_CHECK int cu_gemm_init(size_t staging_bytes, const char *device, int sms);
size_t cu_gemm_workspace_bytes(void);

/* ---- attention.c (flash.cu's kernels; decode: fp32 products for FP32, bf16 tensor-core
 * products for BF16) */
void cu_attention_forward_fp32(tr_stream s, float *out, float *lse, const float *qkv, int B,
                               int T, int NH, int HS, const int32_t *segments);
void cu_attention_backward_fp32(tr_stream s, float *dqkv, float *scratch, const float *dout,
                                const float *qkv, const float *out, const float *lse, int B,
                                int T, int NH, int HS, const int32_t *segments);
void cu_attention_forward_bf16(tr_stream s, float *out, float *lse, const float *qkv, int B,
                               int T, int NH, int HS, const int32_t *segments);
void cu_attention_backward_bf16(tr_stream s, float *dqkv, float *scratch, const float *dout,
                                const float *qkv, const float *out, const float *lse, int B,
                                int T, int NH, int HS, const int32_t *segments);
/* kernels.h's attention_forward16 / _backward16 (bf16 mode: the output in bf16 storage) */
void cu_attention_forward16(tr_stream s, uint16_t *out16, float *lse, const float *qkv, int B,
                            int T, int NH, int HS, const int32_t *segments);
void cu_attention_backward16(tr_stream s, float *dqkv, float *scratch, const float *dout,
                             const float *qkv, const uint16_t *out16, const float *lse, int B,
                             int T, int NH, int HS, const int32_t *segments);
void cu_attention_decode_fp32(tr_stream s, float *out, float *kcache, float *vcache,
                              float *scores, const float *qkv, int B, int n, int past, int max_T,
                              int NH, int HS);
void cu_attention_decode_bf16(tr_stream s, float *out, float *kcache, float *vcache,
                              float *scores, const float *qkv, int B, int n, int past, int max_T,
                              int NH, int HS);

#ifdef __cplusplus
}
#endif

#endif
