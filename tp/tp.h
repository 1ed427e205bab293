/* tp/ — tensor-parallel layers (Megatron-style) on the kernel table and a communicator.
 *
 * Contract:
 *  - A tr_tp is the tensor-parallel context of one rank: the TP group's communicator (NULL
 *    iff size == 1), size T, rank t, sequence_parallel (only ever 1 when T > 1) and the
 *    kernel table. With T == 1 no function communicates and the layers are exactly the
 *    unsplit ones (same kernel calls as a plain linear).
 *  - Token rows: activations are (N, ·) with N = B*S token rows in row-major (b, s) order.
 *    Without sequence parallelism every TP rank holds all N rows of the replicated
 *    activations (residual stream, LayerNorm in/out). With it, rank t holds the contiguous
 *    rows [t*N/T, (t+1)*N/T) (N % T == 0 required): tr_tp_rows(). "Nl" below is the number
 *    of rows this rank holds (N, or N/T under SP).
 *  - Mappings (the only places that communicate; the layers are built from them):
 *      f  copy_to_region:         forward identity,        backward all-reduce
 *      g  reduce_from_region:     forward all-reduce,      backward identity
 *      gather_from_region (last dim): forward all-gather,  backward split
 *      scatter_to_region  (last dim): forward split,       backward all-gather
 *      gather_from_sequence_region:   forward all-gather rows, backward reduce-scatter rows
 *      reduce_scatter_to_sequence_region: forward reduce-scatter rows, backward all-gather
 *    A mapping's backward is its conjugate's forward, so each is written once.
 *  - Layers (weights in PyTorch Linear layout (out, in), y = x W^T + b):
 *      column-parallel linear: W holds output rows [t*OC/T, (t+1)*OC/T) of the full (OC, IC)
 *        weight; input replicated (f) or, under SP, gathered from the sequence slices;
 *        output split by features, optionally gathered.
 *      row-parallel linear: W holds input columns [t*IC/T, ...) of the full weight; input
 *        already split by features; partial outputs all-reduced (g) or, under SP,
 *        reduce-scattered to the sequence slices; bias added once, after the reduction.
 *      vocab-parallel embedding: rank t holds vocabulary rows [t*Vp/T, (t+1)*Vp/T);
 *        out-of-slice ids give 0; partial embeddings all-reduced (reduce-scattered under SP).
 *      vocab-parallel cross-entropy: loss from this rank's logit columns without gathering
 *        them: all-reduce MAX of the row maxima, then one SUM all-reduce of (sum of
 *        exponentials, target logit); losses identical on every TP rank.
 *  - Gradients of parameters ACCUMULATE (+=), activation gradients are overwritten (as in
 *    kernels/). Every function returns a tr_status; a communication failure is returned
 *    with the message naming the TP operation.
 *  - Host synchronisation: every collective is ordered before the kernels queued after it on
 *    the default stream (tr_comm_order_after): where the backend can (NCCL on distinct
 *    GPUs) the host does not wait for it, and its failure is returned by tr_tp_flush or by
 *    a later collective of the group; elsewhere (UCX, staging) the call waits, as before.
 *  - Buffers are kernel-table ("device") memory; the communicator must be able to move it.
 *  - Measurement: with comm_time set (tr_tp_init leaves it NULL), every collective of the
 *    mappings and of the vocab-parallel loss adds its wall time (two tr_now() calls; posting
 *    only, where the host does not wait) and one call to *comm_time; nothing else changes.
 *    T == 1 never communicates, so never counts.
 *  - Layering: tp/ uses kernels/ and comm/ only; model/ calls tp/. */
#ifndef TR_TP_H
#define TR_TP_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "kernels/kernels.h"

/* Wall time spent inside TP collectives (caller-owned; see "Measurement"). */
typedef struct {
    double seconds;
    long calls;
} tr_tp_comm_time;

typedef struct {
    tr_comm *comm;         /* the TP group; NULL iff size == 1 */
    int size, rank;        /* T and t */
    int sequence_parallel; /* 1 only when size > 1 */
    const tr_kernels *k;
    tr_tp_comm_time *comm_time; /* NULL: collectives are not timed */
} tr_tp;

/* Fill *tp (comm_time NULL). comm NULL = one rank (sequence_parallel is then ignored). */
TR_MUST_CHECK int tr_tp_init(tr_tp *tp, const tr_kernels *k, tr_comm *comm, int sequence_parallel);
/* Zero a communication timer. */
void tr_tp_comm_time_reset(tr_tp_comm_time *t);
/* Sum (op SUM) or max (op MAX) all-reduce of n floats in place over the TP group, timed;
 * `what` names it in an error. The vocab-parallel loss uses it. */
TR_MUST_CHECK int tr_tp_allreduce(const tr_tp *tp, float *buf, size_t n, tr_comm_redop op, const char *what);
/* Wait until every TP collective posted so far is complete (tr_comm_flush of the group; a
 * no-op for T == 1 and on host backends). Its failure names the TP group and the operation.
 * Call it before the host reads a result of the layers or blocks on the stream. */
TR_MUST_CHECK int tr_tp_flush(const tr_tp *tp);

/* Rows of N token rows this rank holds: all of them, or its sequence-parallel slice
 * [*first, *first + *count). Requires N % T == 0 under SP (checked by tr_tp_check_rows). */
void tr_tp_rows(const tr_tp *tp, int N, int *first, int *count);
TR_MUST_CHECK int tr_tp_check_rows(const tr_tp *tp, int N);

/* ------------------------------------------------------------------ mappings */

/* f backward: all-reduce (sum) of n floats in place. (f forward is the identity.) */
TR_MUST_CHECK int tr_tp_copy_to_region_backward(const tr_tp *tp, float *grad, size_t n);
/* g forward: out = sum over ranks of partial (n floats; out may equal partial).
 * (g backward is the identity.) */
TR_MUST_CHECK int tr_tp_reduce_from_region_forward(const tr_tp *tp, const float *partial, float *out,
                                     size_t n);
/* Last-dimension gather: out (N, T*cols) from every rank's in (N, cols); scratch holds
 * T*N*cols floats (unused when T == 1). Backward of scatter_to_region. */
TR_MUST_CHECK int tr_tp_gather_from_region_forward(const tr_tp *tp, float *out, const float *in, int N,
                                     int cols, float *scratch);
/* Last-dimension split: out (N, cols) = columns [t*cols, (t+1)*cols) of in (N, T*cols).
 * Backward of gather_from_region. */
TR_MUST_CHECK int tr_tp_scatter_to_region_forward(const tr_tp *tp, float *out, const float *in, int N,
                                    int cols);
/* SP row gather: full (N, C) = every rank's local (N/T, C) rows in rank order. In place
 * when local == full + first*C (tr_tp_rows). Without SP: full = local (no copy when they
 * are the same). Backward of reduce_scatter_to_sequence_region. */
TR_MUST_CHECK int tr_tp_gather_from_sequence_region_forward(const tr_tp *tp, const float *local, float *full,
                                              int N, int C);
/* SP row reduce-scatter: local (N/T, C) = this rank's rows of the sum over ranks of
 * full (N, C) (full may be clobbered). Without SP: an all-reduce, local (N, C).
 * Backward of gather_from_sequence_region. */
TR_MUST_CHECK int tr_tp_reduce_scatter_to_sequence_region_forward(const tr_tp *tp, float *full, float *local,
                                                    int N, int C);

/* ------------------------------------------------------------------ parallel linears
 * N: token rows of the full micro-batch. IC/OC: this rank's in/out features as named. */

/* Column-parallel: y (N, OCl) = x (N, IC) @ W^T (W: OCl x IC) + b (b may be NULL).
 * x must hold N rows: under SP the caller writes its own rows at their place and this
 * gathers the others into x in place (x is kept for the backward). With y_full non-NULL
 * the output is also gathered to y_full (N, T*OCl) (scratch: T*N*OCl floats). */
TR_MUST_CHECK int tr_tp_column_linear_forward(const tr_tp *tp, float *y, float *x, const float *W,
                                const float *b, int N, int IC, int OCl, float *y_full,
                                float *scratch);
/* dy (N, OCl) (with gathered output: split it first with tr_tp_scatter_to_region_forward);
 * dW += dy^T x (dW NULL: a frozen weight, skipped); db += colsum(dy) (db may be NULL); dx (N, IC) is overwritten with the
 * input gradient: without SP all N rows, summed over ranks (f backward); under SP only this
 * rank's rows are valid, at their place (dx + first*IC) (reduce-scatter; the rest is
 * scratch). dx NULL skips the input gradient (no communication). */
TR_MUST_CHECK int tr_tp_column_linear_backward(const tr_tp *tp, float *dx, float *dW, float *db,
                                 const float *dy, const float *x, const float *W, int N,
                                 int IC, int OCl);

/* Row-parallel: y (Nl, OC) = [residual (Nl, OC) +] reduce(x (N, ICl) @ W^T) + b.
 * residual and b may be NULL; residual may equal y. scratch: N*OC floats when T > 1. */
TR_MUST_CHECK int tr_tp_row_linear_forward(const tr_tp *tp, float *y, const float *residual, const float *x,
                             const float *W, const float *b, int N, int ICl, int OC,
                             float *scratch);
/* dy (Nl, OC); dx (N, ICl) overwritten; dW += dy_all^T x (dW NULL: frozen, skipped); db += colsum(dy) over this rank's
 * rows (under SP a partial sum: all-reduce it over TP later). scratch: N*OC floats under SP
 * (the gathered dy). */
TR_MUST_CHECK int tr_tp_row_linear_backward(const tr_tp *tp, float *dx, float *dW, float *db,
                              const float *dy, const float *x, const float *W, int N, int ICl,
                              int OC, float *scratch);

/* ------------------------------------------------------------------ LoRA adapters
 * y += scale * (x A^T) B^T next to a parallel linear (scale = alpha / r), its base frozen.
 * Column-parallel base: A (r, IC) replicated, B (OCl, r) split by output rows like W; the
 * gradient of A is then a partial sum per rank (all-reduce it over TP) and x A^T's input
 * gradient joins the base layer's (one all-reduce / reduce-scatter for both).
 * Row-parallel base: A (r, ICl) split by input columns like W, B (OC, r) replicated; x A^T is
 * a partial sum, and so is its product with B: added to the base layer's partial output
 * before the reduction, so the forward has no communication of its own and is exact. B's
 * gradient is then a partial sum per rank (all-reduce it over TP); A's is whole. */
typedef struct {
    const float *A, *B;
    float *dA, *dB; /* gradients (+=); dB NULL and dA NULL: no parameter gradients */
    float *h;       /* (N, r): x A^T, written by forward, read by backward (row: partial) */
    float *dh;      /* (N, r) scratch for backward */
    int r;
    float scale;
    /* dropout (NULL: none): mask (N, IC) of this rank's inputs (keep / (1 - p) or 0), xd
     * (N, IC) scratch for the dropped input x * mask (recomputed in backward) */
    const float *mask;
    float *xd;
} tr_tp_lora;

/* The parallel linears above with an adapter (lora NULL: exactly the plain layer). */
TR_MUST_CHECK int tr_tp_column_linear_forward_lora(const tr_tp *tp, float *y, float *x, const float *W,
                                     const float *b, int N, int IC, int OCl,
                                     const tr_tp_lora *lora);
TR_MUST_CHECK int tr_tp_column_linear_backward_lora(const tr_tp *tp, float *dx, float *dW, float *db,
                                      const float *dy, const float *x, const float *W, int N,
                                      int IC, int OCl, const tr_tp_lora *lora);
TR_MUST_CHECK int tr_tp_row_linear_forward_lora(const tr_tp *tp, float *y, const float *residual,
                                  const float *x, const float *W, const float *b, int N,
                                  int ICl, int OC, float *scratch, const tr_tp_lora *lora);
TR_MUST_CHECK int tr_tp_row_linear_backward_lora(const tr_tp *tp, float *dx, float *dW, float *db,
                                   const float *dy, const float *x, const float *W, int N,
                                   int ICl, int OC, float *scratch, const tr_tp_lora *lora);
/* The parallel residual's two row-parallel layers (attention projection and fc_proj) with one
 * reduction instead of two (T > 1): each tr_tp_row_linear_partial* puts this rank's partial
 * product x W^T (and its adapter's) into sum (N, OC) (accumulate 0: overwrite, 1: add; no
 * communication), then tr_tp_row_reduce gives y (Nl, OC) = residual + reduce(sum) + b1 + b2
 * (residual, b1, b2 may be NULL; sum is scratch after). Equal to the two
 * tr_tp_row_linear_forward within fp32 rounding. */
TR_MUST_CHECK int tr_tp_row_linear_partial_lora(const tr_tp *tp, float *sum, int accumulate,
                                                const float *x, const float *W, int N, int ICl,
                                                int OC, const tr_tp_lora *lora);
TR_MUST_CHECK int tr_tp_row_linear_partial16(const tr_tp *tp, float *sum, int accumulate,
                                             const uint16_t *x16, const float *W, int N,
                                             int ICl, int OC);
TR_MUST_CHECK int tr_tp_row_reduce(const tr_tp *tp, float *y, const float *residual,
                                   float *sum, const float *b1, const float *b2, int N, int OC);
/* The column-parallel linear on an input in bf16 storage (x16 (N, IC) bf16 bits, IC even: the
 * LayerNorm outputs where the table has layernorm_forward16, gemm_a16 and gemm_b16; no
 * adapter): as tr_tp_column_linear_forward / _backward; under SP the rows are gathered as
 * stored (IC/2 floats' bytes a row). */
TR_MUST_CHECK int tr_tp_column_linear_forward16(const tr_tp *tp, float *y, uint16_t *x16,
                                                const float *W, const float *b, int N, int IC,
                                                int OCl);
TR_MUST_CHECK int tr_tp_column_linear_backward16(const tr_tp *tp, float *dx, float *dW, float *db,
                                                 const float *dy, const uint16_t *x16,
                                                 const float *W, int N, int IC, int OCl);
/* The column-parallel linear with its output in bf16 storage (y16 (N, OCl): fc's, where the
 * table's linear_forward writes it), its input x fp32 or x16 bf16 (the other NULL; IC even);
 * no adapter; under SP the input rows are gathered as stored. gelu16 (or NULL): also gelu(y)
 * stored bf16 (fc's GELU: the table's linear_gelu_forward16 where it has it, else
 * gelu_forward16 on y16). */
TR_MUST_CHECK int tr_tp_column_linear_forward_out16(const tr_tp *tp, uint16_t *y16,
                                                    uint16_t *gelu16, float *x, uint16_t *x16,
                                                    const float *W, const float *b, int N,
                                                    int IC, int OCl);
/* The column-parallel linear's backward from an output gradient in bf16 storage (dy16 (N, OCl):
 * fc's from kernels.h's gelu_backward16, which summed the bias gradient (db NULL), or from
 * linear_backward_gelu16, or QKV's from attention_backward_qkv16: their bias gradient db
 * (OCl, or NULL) += sum_n dy16; the
 * table's linear_backward reads it in place), its input x fp32 or x16 bf16 (the other NULL);
 * no adapter. dx16: the input gradient stored bf16 instead of dx (dx NULL; one rank, no
 * sequence parallelism: nothing to reduce), for layernorm_backward16 (kernels.h). */
TR_MUST_CHECK int tr_tp_column_linear_backward_dy16(const tr_tp *tp, float *dx, uint16_t *dx16,
                                                    float *dW, float *db, const uint16_t *dy16,
                                                    const float *x, const uint16_t *x16,
                                                    const float *W, int N, int IC, int OCl);
/* The row-parallel linear on an input in bf16 storage (x16 (N, ICl) bf16 bits: the MLP's GELU
 * output where the table has gelu_forward16, gemm_a16 and gemm_b16; no adapter): as
 * tr_tp_row_linear_forward / _backward, the GEMMs reading x16 in place. */
TR_MUST_CHECK int tr_tp_row_linear_forward16(const tr_tp *tp, float *y, const float *residual,
                                             const uint16_t *x16, const float *W,
                                             const float *b, int N, int ICl, int OC,
                                             float *scratch);
TR_MUST_CHECK int tr_tp_row_linear_backward16(const tr_tp *tp, float *dx, float *dW, float *db,
                                              const float *dy, const uint16_t *x16,
                                              const float *W, int N, int ICl, int OC,
                                              float *scratch);
/* ... with the input gradient stored bf16 (dx16 (N, ICl): fc_proj's, which gelu_backward16
 * reads, or the attention projection's, which attention_backward_qkv16 reads; the table's
 * linear_backward writes it, kernels.h) */
TR_MUST_CHECK int tr_tp_row_linear_backward16_dx16(const tr_tp *tp, uint16_t *dx16, float *dW,
                                                   float *db, const float *dy,
                                                   const uint16_t *x16, const float *W, int N,
                                                   int ICl, int OC, float *scratch);
/* ... and through the GELU before it into fc's output gradient (kernels.h's
 * linear_backward_gelu16; the table must have it): dpre16 (N, ICl) = bf16(gelu'(pre16) dy W),
 * dpre_bias (ICl, or NULL: fc's bias gradient) += its column sums; dW, db, dy, x16 (the GELU
 * output) and scratch as tr_tp_row_linear_backward16's. */
TR_MUST_CHECK int tr_tp_row_linear_backward_gelu16(const tr_tp *tp, uint16_t *dpre16,
                                                   float *dpre_bias, float *dW, float *db,
                                                   const float *dy, const uint16_t *x16,
                                                   const uint16_t *pre16, const float *W, int N,
                                                   int ICl, int OC, float *scratch);

/* ------------------------------------------------------------------ vocabulary parallel
 * Vl = Vp/T rows of the embedding table (and logit columns) per rank; this rank's first
 * global id is v_start = t*Vl. ids/targets: N device int32, global ids. */

/* out (Nl, C) = table rows of ids (0 where not held here), summed over ranks.
 * scratch: N*C floats when T > 1. */
TR_MUST_CHECK int tr_tp_vocab_embedding_forward(const tr_tp *tp, float *out, const int32_t *ids,
                                  const float *table, int N, int C, int Vl, float *scratch);
/* dout (Nl, C): dtable[id - v_start] += dout_all[n] for held ids. Under SP dout is first
 * gathered into scratch (N*C floats). *dout_all (may be NULL) is set to the (N, C)
 * gradient used (dout itself without SP), for replicated consumers such as positions. */
TR_MUST_CHECK int tr_tp_vocab_embedding_backward(const tr_tp *tp, float *dtable, const float *dout,
                                   const int32_t *ids, int N, int C, int Vl, float *scratch,
                                   const float **dout_all);

/* losses (N) = logsumexp(row) - target logit over the V real ids (ids >= V are padding),
 * the same on every rank. logits (N, Vl). stats: 3*N floats (max, sumexp, picked), kept for
 * the backward. */
TR_MUST_CHECK int tr_tp_vocab_cross_entropy_forward(const tr_tp *tp, float *losses, float *stats,
                                      const float *logits, const int32_t *targets, int N,
                                      int Vl, int V);
/* dlogits (N, Vl) = scale * (softmax - onehot(target)) on this rank's columns (0 on padding);
 * no communication. dlogits may equal logits. */
TR_MUST_CHECK int tr_tp_vocab_cross_entropy_backward(const tr_tp *tp, float *dlogits, const float *logits,
                                       const float *stats, const int32_t *targets, int N,
                                       int Vl, int V, float scale);

/* The vocabulary-parallel head (logits = x W^T, W (Vl, C): this rank's vocabulary rows) and
 * its cross-entropy, fused and chunked so that only one chunk's logits ever exist: for each
 * chunk of `rows` token rows, the logits GEMM, the statistics in one read (xent_stats; under
 * TP their two all-reduces: the max, then the rescaled sums of exponentials with the target
 * logits), the losses, and with scale != 0 the logits' gradient in place (scale * (softmax -
 * onehot), times weights[n] when weights != NULL), the chunk's rows of dx = dlogits W and
 * dW += dlogits^T x. Equal to column_linear_forward + cross_entropy_forward / _backward +
 * scale_rows + column_linear_backward within fp32 rounding (summation order of dW over
 * chunks, the online max). Where the table has the bf16-storage head ops (kernels.h:
 * gemm_out16 ...; "cuda" and "cpu-bf16") the chunk's logits and their gradient are stored
 * in bf16, chunks of 2 * rows rows filling `logits` (fp32, chunks of rows, when observe is
 * set); with W16 and the table's narrow16 / gemm_mixed16, W is converted to bf16 once for
 * every chunk's logits and input gradient (not once in each of those GEMMs). */
typedef struct {
    float *logits; /* rows * Vl floats: one chunk's logits, then their gradient */
    float *stats;  /* 8 * rows floats: max, sum of exponentials, target logit, local max of
                    * each row of a chunk (2 * rows of them in bf16 storage) */
    int rows;      /* token rows per chunk (>= 1) */
    /* optional: sees each chunk's logits (rows r0 .. r0+n-1) before the loss (tools) */
    void (*observe)(void *ctx, int r0, int n, const float *logits);
    void *observe_ctx;
    uint16_t *W16; /* optional: Vl * C bf16, room for W converted once (bf16 storage only) */
    /* optional: the logits' bias (Vl, this rank's columns) added to each chunk's logits, and
     * dbias (Vl) += the column sums of their gradient (NULL: frozen); the head then runs in
     * fp32 (no bf16-storage head op takes a bias) */
    const float *bias;
    float *dbias;
} tr_tp_head_chunks;

/* x (N, C) as column_linear_forward's (under SP this rank's rows at their place, the others
 * gathered here; kept). losses: N device floats, the same on every rank. With scale != 0:
 * dx (N, C) as column_linear_backward's (reduced over TP once, after the last chunk; NULL:
 * skipped), dW += (NULL: frozen). targets: N global ids, weights: N floats or NULL. */
TR_MUST_CHECK int tr_tp_vocab_head_loss(const tr_tp *tp, const tr_tp_head_chunks *chunks,
                                        float *losses, float *dx, float *dW, float *x,
                                        const float *W, const int32_t *targets,
                                        const float *weights, int N, int C, int Vl, int V,
                                        float scale);

#endif
