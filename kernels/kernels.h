/* kernels/ — the backend-neutral table of operations the model is written against.
 *
 * Contract:
 *  - One table (tr_kernels) per backend: cpu/ (OpenBLAS + C loops, fp32; its constructor
 *    below) and cuda/ (cuBLASLt + CUDA kernels, fp32/bf16; cuda/cuda.h, CUDA builds).
 *    Every pointer argument is backend memory ("device pointer"); on the CPU that is host
 *    memory. Every op takes a stream (NULL on the CPU) and is ordered on it.
 *  - All matrices are row-major. Sizes: B batch, T sequence, C channels, NH heads,
 *    HS = head size, V vocabulary columns held by this rank, N = rows (B*T).
 *  - Ops named *_backward ACCUMULATE (+=) into parameter gradients (dweight, dbias), so
 *    gradient accumulation over micro-batches is free; activation gradients (dinp) are
 *    OVERWRITTEN unless the op's comment says it accumulates.
 *  - No op allocates; scratch space is passed in. Ops never fail (sizes are checked by
 *    the caller), so they return void. */
#ifndef TR_KERNELS_H
#define TR_KERNELS_H

#include <stddef.h>
#include <stdint.h>

typedef void *tr_stream;

/* The signatures of the MLP's elementwise activations in the table below (gelu_*, gelu_exact_*,
 * relu_*: forward, backward, and their bf16-storage forward16, backward16), for code that picks
 * one of them */
typedef void (*tr_act_fn)(tr_stream s, float *out, const float *inp, size_t n);
typedef void (*tr_act_backward_fn)(tr_stream s, float *dinp, const float *inp, const float *dout,
                                   size_t n);
typedef void (*tr_act16_fn)(tr_stream s, uint16_t *out16, const float *inp,
                            const uint16_t *inp16, size_t n);
typedef void (*tr_act_backward16_fn)(tr_stream s, uint16_t *dinp16, float *dbias,
                                     const float *inp, const uint16_t *inp16, const float *dout,
                                     const uint16_t *dout16, int N, int C);

/* One dropout's arguments (core/philox.h's decision; model.hidden_dropout and
 * model.attention_dropout), passed by value to the dropout ops below. */
typedef struct tr_dropout {
    uint64_t seed;         /* the run's seed: Philox's key */
    uint64_t first_sample; /* global index of the micro-batch's sample 0 (b = 0) */
    uint32_t site;         /* tr_dropout_site(global layer, kind) */
    uint32_t threshold;    /* tr_dropout_threshold(p): an element whose word is below: dropped */
    float scale;           /* 1 / (1 - p): a kept element is multiplied by it */
    int head0;             /* attention dropout: global index of this rank's query head 0 */
} tr_dropout;

typedef struct tr_kernels {
    const char *name; /* "cpu" | "cuda" */

    /* --- memory --- */
    void *(*alloc)(size_t bytes);                 /* zero-filled; NULL on failure */
    void (*free)(void *p);
    /* Bytes allocated through alloc and not yet freed (*peak: the most at any time since the
     * process started); NULL where the backend does not count. */
    size_t (*bytes_in_use)(size_t *peak);
    void (*to_device)(tr_stream s, void *dst, const void *host_src, size_t bytes);
    void (*to_host)(tr_stream s, void *host_dst, const void *src, size_t bytes);
    void (*copy)(tr_stream s, void *dst, const void *src, size_t bytes);
    void (*zero)(tr_stream s, void *dst, size_t bytes);
    void (*synchronize)(tr_stream s);

    /* --- GEMM ---
     * C[M,N] = alpha * op(A)[M,K] @ op(B)[K,N] + beta * C, op = transpose when trans != 0.
     * lda/ldb/ldc are row strides of the stored matrices. */
    void (*gemm)(tr_stream s, int trans_a, int trans_b, int M, int N, int K, float alpha,
                 const float *A, int lda, const float *B, int ldb, float beta, float *C,
                 int ldc);

    /* --- a linear layer's forward, fused: optional (NULL: gemm, then bias_add) ---
     * y (N, OC) = x (N, IC) W^T (W (OC, IC)) + b (OC floats, or NULL) + residual (N, OC, or
     * NULL; may be y itself: accumulate in place). The input is x (fp32), or x16 (bf16
     * storage, as the *16 ops' below) with x NULL; the output y (fp32), or y16 (bf16 storage:
     * fc's output where the table has gelu_backward16, QKV's where it has
     * attention_forward_qkv16) with y NULL and no residual. Equal to
     * copying residual into y, gemm (gemm_a16 for x16) with beta 1 (0 without residual), then
     * bias_add, then for y16 rounding to bf16, within fp32 rounding (a backend may add the
     * bias before its one rounding of the result: CUDA's cuBLASLt bias epilogue; for y16 a
     * bf16-rounded bias, as cpu-bf16's bias_add reads it). */
    void (*linear_forward)(tr_stream s, float *y, uint16_t *y16, const float *x,
                           const uint16_t *x16, const float *W, const float *b,
                           const float *residual, int N, int IC, int OC);
    /* Its backward, fused: optional (NULL: two gemm calls and bias_backward)
     * dx (N, IC) = dy (N, OC) W; dW (OC, IC) += dy^T x (N, IC); db (OC, or NULL) += sum_n dy.
     * x fp32 or (x16, x NULL) bf16 storage; dy fp32, or (dy16, dy NULL) bf16 storage (fc's,
     * from gelu_backward16, which summed its bias gradient: db NULL, or from
     * linear_backward_gelu16: db the sum of dy16's bf16 values; QKV's, from
     * attention_backward_qkv16: likewise). Equal to those gemm calls (gemm_b16 for x16,
     * gemm_a16 for dy16) and bias_backward (of dy16 widened) within fp32 rounding (CUDA's bf16
     * mode converts dy to bf16 once for both GEMMs and sums db in that same pass; dy16's
     * column sums in the weight gradient's GEMM, cuBLASLt's BGRADB epilogue, or a pass of
     * their own). dx16: dx stored bf16 instead
     * (dx NULL: fc_proj's input gradient, which gelu_backward16 reads, and the attention
     * projection's, which attention_backward_qkv16 reads; with dy16 QKV's and fc's at TP 1,
     * which layernorm_backward16 reads), equal to dx rounded to bf16. */
    void (*linear_backward)(tr_stream s, float *dx, uint16_t *dx16, float *dW, float *db,
                            const float *dy, const uint16_t *dy16, const float *x,
                            const uint16_t *x16, const float *W, int N, int IC, int OC);

    /* --- elementwise --- */
    /* out[i] = a[i] + b[i] (out may alias a or b) */
    void (*add)(tr_stream s, float *out, const float *a, const float *b, size_t n);
    /* y[i] += alpha * x[i] */
    void (*axpy)(tr_stream s, float *y, float alpha, const float *x, size_t n);
    /* x[i] *= alpha */
    void (*scale)(tr_stream s, float *x, float alpha, size_t n);
    /* x[n, c] *= w[n] for n < N (per-row weights, e.g. of the loss) */
    void (*scale_rows)(tr_stream s, float *x, const float *w, int N, int C);
    /* out[n, c] += bias[c] for n < N */
    void (*bias_add)(tr_stream s, float *out, const float *bias, int N, int C);
    /* dbias[c] += sum_n dout[n, c] */
    void (*bias_backward)(tr_stream s, float *dbias, const float *dout, int N, int C);

    /* --- layernorm over the last dimension ---
     * out = (inp - mean) * rstd * weight + bias; mean/rstd (N floats each) saved for backward.
     * backward: dinp += (accumulates: the residual stream), dweight += , dbias += . */
    void (*layernorm_forward)(tr_stream s, float *out, float *mean, float *rstd,
                              const float *inp, const float *weight, const float *bias, int N,
                              int C, float eps);
    void (*layernorm_backward)(tr_stream s, float *dinp, float *dweight, float *dbias,
                               const float *dout, const float *inp, const float *weight,
                               const float *mean, const float *rstd, int N, int C);

    /* --- GELU, tanh approximation --- dinp = gelu'(inp) * dout (overwrites) */
    void (*gelu_forward)(tr_stream s, float *out, const float *inp, size_t n);
    void (*gelu_backward)(tr_stream s, float *dinp, const float *inp, const float *dout,
                          size_t n);

    /* --- causal multi-head self-attention, fused (flash attention: no T x T tensor) ---
     * qkv: (B, T, NH, 3, HS) — for each head its query, key and value, contiguous;
     * out: (B, T, NH, HS); lse: (B, NH, T) the log-sum-exp of each query row's scaled,
     * masked scores, saved for backward with out. Scale 1/sqrt(HS).
     * segments: NULL, or (B, T) int32 ids of packed sequences (contiguous runs, backend
     * memory): query t attends only to keys j <= t of its own run (forward and backward).
     * backward: reads dout, qkv, out and lse (the probabilities are recomputed tile by
     * tile); dqkv overwritten; scratch: B*(NH+1)*T floats (rowsum(dout * out), and each
     * row's segment start). */
    void (*attention_forward)(tr_stream s, float *out, float *lse, const float *qkv, int B,
                              int T, int NH, int HS, const int32_t *segments);
    void (*attention_backward)(tr_stream s, float *dqkv, float *scratch, const float *dout,
                               const float *qkv, const float *out, const float *lse, int B,
                               int T, int NH, int HS, const int32_t *segments);
    /* Generation with a key/value cache: n new positions past .. past+n-1 of B sequences.
     * qkv: (B, n, NH, 3, HS) of the new positions; kcache, vcache: (B, NH, max_T, HS), whose
     * rows [past, past+n) are first written from qkv; out: (B, n, NH, HS); new position i
     * attends to cached positions 0 .. past+i (scale 1/sqrt(HS)). scores: scratch of
     * B*NH*n*(past+n) floats. With past = 0 and n = T, out equals attention_forward's. */
    void (*attention_decode)(tr_stream s, float *out, float *kcache, float *vcache,
                             float *scores, const float *qkv, int B, int n, int past,
                             int max_T, int NH, int HS);

    /* --- model families (Llama, Bloom); NULL in a backend that lacks them (the model refuses
     * such a family there) ---
     * RMSNorm: out = inp * rstd * weight, rstd = 1/sqrt(mean(inp^2) + eps) saved (N floats);
     *   backward: dinp += (accumulates, as layernorm), dweight += . */
    void (*rmsnorm_forward)(tr_stream s, float *out, float *rstd, const float *inp,
                            const float *weight, int N, int C, float eps);
    void (*rmsnorm_backward)(tr_stream s, float *dinp, float *dweight, const float *dout,
                             const float *inp, const float *weight, const float *rstd, int N,
                             int C);
    /* GELU, exact (GPT-NeoX's; model.gelu_approximate none), gelu_forward / gelu_backward's
     * contracts: gelu(x) = x Phi(x) = x erfc(-x / sqrt 2) / 2, gelu'(x) = Phi(x) + x phi(x),
     * Phi and phi the standard normal distribution and density. */
    void (*gelu_exact_forward)(tr_stream s, float *out, const float *inp, size_t n);
    void (*gelu_exact_backward)(tr_stream s, float *dinp, const float *inp, const float *dout,
                                size_t n);
    /* ReLU (OPT's; model.relu), gelu_forward / gelu_backward's contracts: relu(x) = max(x, 0)
     * (NaN kept), relu'(x) = 1 where x > 0, else 0 (0 at x = 0, as PyTorch): dinp = dout where
     * inp > 0, else 0 (a select, so an infinite dout where inp <= 0 still gives 0). */
    void (*relu_forward)(tr_stream s, float *out, const float *inp, size_t n);
    void (*relu_backward)(tr_stream s, float *dinp, const float *inp, const float *dout,
                          size_t n);
    /* SwiGLU on n (gate, up) pairs stored interleaved, inp (n, 2):
     *   out[i] = silu(inp[2i]) * inp[2i+1]; backward: dinp (n, 2) overwritten. */
    void (*swiglu_forward)(tr_stream s, float *out, const float *inp, size_t n);
    void (*swiglu_backward)(tr_stream s, float *dinp, const float *inp, const float *dout,
                            size_t n);
    /* GeGLU on n (gate, up) pairs stored interleaved, inp (n, 2) (swiglu's layout):
     *   out[i] = gelu(inp[2i]) * inp[2i+1], gelu the tanh approximation (gelu_forward's) or,
     *   exact != 0, the exact x Phi(x) (gelu_exact_forward's); backward: dinp (n, 2)
     *   overwritten: dgate = dout * up * gelu'(gate), dup = dout * gelu(gate). */
    void (*geglu_forward)(tr_stream s, float *out, const float *inp, size_t n, int exact);
    void (*geglu_backward)(tr_stream s, float *dinp, const float *inp, const float *dout,
                           size_t n, int exact);
    /* Rotary position embedding in place on qkv (B, T, NG, R+2, HS) (layout of
     * attention_gqa): units 0..R of each group (query heads and key head; not the value) are
     * rotated on their first rot dims, Hugging Face Llama's rotate_half pairing (i, i + rot/2)
     * by the angle t * theta_i of the row's position t; cos, sin: (T, rot/2) tables of those
     * angles. inverse != 0 rotates by minus the angle: the backward (rotation is orthogonal).
     * positions: NULL (row n of the B*T is at position n % T), or B*T device ids (packed
     * sequences restart them). */
    void (*rope)(tr_stream s, float *qkv, const float *cos, const float *sin, int B, int T,
                 int NG, int R, int HS, int rot, int inverse, const int32_t *positions);
    /* Causal attention with grouped query heads and optional ALiBi. qkv (B, T, NG, R+2, HS),
     * R = NH/NG: group g holds query heads gR .. gR+R-1, then the key and the value head they
     * share; out (B, T, NH, HS); lse (B, NH, T). alibi: NULL or NH slopes (backend memory):
     * score(i, j) = q_i.k_j / sqrt(HS) + slope_h * (j - i); segments, lse and scratch as
     * attention_forward's (backward takes the same alibi and segments as forward).
     * With NG = NH and no alibi it is attention_forward / attention_backward (same layout,
     * same results). */
    void (*attention_gqa_forward)(tr_stream s, float *out, float *lse, const float *qkv,
                                  const float *alibi, int B, int T, int NH, int NG, int HS,
                                  const int32_t *segments);
    void (*attention_gqa_backward)(tr_stream s, float *dqkv, float *scratch, const float *dout,
                                   const float *qkv, const float *out, const float *lse,
                                   const float *alibi, int B, int T, int NH, int NG, int HS,
                                   const int32_t *segments);
    /* --- context parallelism: a block of query rows against the keys before them ---
     * attention_rows_forward: qkv (B, Tk, NG, R+2, HS) in attention_gqa's layout; query row i
     *   (i < nq = Tk - q0) is row q0 + i of qkv, at position q0 + i, and attends keys 0 ..
     *   q0 + i (causal), score = q.k / sqrt(HS) + slope_h * (j - (q0 + i)) with alibi (NULL or
     *   NH slopes); rows before q0 carry keys and values only (their queries are not read).
     *   out (B, nq, NH, HS), lse (B, NH, nq). With q0 = 0 it is attention_gqa_forward without
     *   segments (same layout, results equal to rounding).
     * attention_rows_backward: the same arguments and dout (B, nq, NH, HS), out and lse from
     *   the forward; ACCUMULATES (+=) into dqkv (B, Tk, NG, R+2, HS): dQ of rows q0.., dK and
     *   dV of rows 0 .. Tk-1 (the caller zeroes it once, then adds several blocks). No scratch.
     * NULL where a backend lacks them (context parallelism is refused there). */
    void (*attention_rows_forward)(tr_stream s, float *out, float *lse, const float *qkv,
                                   const float *alibi, int B, int Tk, int q0, int NH, int NG,
                                   int HS);
    void (*attention_rows_backward)(tr_stream s, float *dqkv, const float *dout, const float *qkv,
                                    const float *out, const float *lse, const float *alibi,
                                    int B, int Tk, int q0, int NH, int NG, int HS);
    /* attention_rows_dropout_forward / _backward: attention_rows_*'s arguments with dropout on
     *   the probabilities as attention_gqa_dropout_*'s (tr_dropout): qkv row t is position
     *   t of a sample of T >= Tk positions (T: the whole sequence, the mask's length), batch b
     *   is sample d.first_sample + b; P(t, j) of local head h is kept iff
     *   tr_dropout_keep(d.seed, d.first_sample + b, d.site, ((d.head0 + h) * T + t) * T + j,
     *   d.threshold), times d.scale; lse undropped. Backward ACCUMULATES as
     *   attention_rows_backward. With T = Tk and q0 = 0: attention_gqa_dropout_*'s results
     *   (no segments, to rounding). Both backends have them. */
    void (*attention_rows_dropout_forward)(tr_stream s, float *out, float *lse, const float *qkv,
                                           const float *alibi, int B, int Tk, int q0, int NH,
                                           int NG, int HS, int T, tr_dropout d);
    void (*attention_rows_dropout_backward)(tr_stream s, float *dqkv, const float *dout,
                                            const float *qkv, const float *out,
                                            const float *lse, const float *alibi, int B,
                                            int Tk, int q0, int NH, int NG, int HS, int T,
                                            tr_dropout d);
    /* attention_decode for that layout: qkv (B, n, NG, R+2, HS) of n new positions; kcache,
     * vcache (B, NG, max_T, HS) (one key/value head per group); ALiBi slopes or NULL. */
    void (*attention_gqa_decode)(tr_stream s, float *out, float *kcache, float *vcache,
                                 float *scores, const float *qkv, const float *alibi, int B,
                                 int n, int past, int max_T, int NH, int NG, int HS);

    /* --- softmax cross-entropy in pieces, so the vocabulary may be split over ranks ---
     * logits: (N, V) this rank's columns; columns >= n_valid are padding and ignored.
     * targets are global ids; this rank holds ids [v_start, v_start + V).
     *  row_max:    maxv[n] = max_{c < n_valid} logits[n, c] (-INF if n_valid == 0)
     *  row_sumexp: sumexp[n] = sum_{c < n_valid} exp(logits[n, c] - maxv[n])
     *  pick:       picked[n] = logits[n, targets[n] - v_start] if held here, else 0
     *  backward:   dlogits[n, c] = scale * (exp(logits - maxv)/sumexp - [c is target]),
     *              0 for padding columns (overwrites). maxv/sumexp are the global values. */
    void (*xent_row_max)(tr_stream s, float *maxv, const float *logits, int N, int V,
                         int n_valid);
    void (*xent_row_sumexp)(tr_stream s, float *sumexp, const float *logits, const float *maxv,
                            int N, int V, int n_valid);
    void (*xent_pick)(tr_stream s, float *picked, const float *logits, const int32_t *targets,
                      int N, int V, int v_start);
    /* losses[n] = log(sumexp[n]) + maxv[n] - picked[n] */
    void (*xent_loss)(tr_stream s, float *losses, const float *maxv, const float *sumexp,
                      const float *picked, int N);
    void (*xent_backward)(tr_stream s, float *dlogits, const float *logits, const float *maxv,
                          const float *sumexp, const int32_t *targets, int N, int V,
                          int n_valid, int v_start, float scale);
    /* The same in fewer passes (the chunked head, tp/'s tr_tp_vocab_head_loss):
     *  stats:      row_max, row_sumexp and pick in one read of the logits (online max): maxv as
     *              row_max's, sumexp relative to that (this rank's) max, picked as pick's;
     *              sumexp equals row_sumexp's within fp32 rounding (bit for bit on the CPU
     *              when a row's max lies in its first 1024 columns).
     *  rescale:    sumexp[n] *= exp(local_max[n] - maxv[n]) (0 where local_max is -INF): a
     *              rank's sum made relative to the all-reduced max, before summing over ranks.
     *  loss_backward: losses as xent_loss; with scale != 0 also dlogits as xent_backward,
     *              times weights[n] when weights != NULL (= xent_backward then scale_rows);
     *              dlogits may be logits itself; scale == 0 leaves dlogits untouched. */
    void (*xent_stats)(tr_stream s, float *maxv, float *sumexp, float *picked,
                       const float *logits, const int32_t *targets, int N, int V, int n_valid,
                       int v_start);
    void (*xent_rescale)(tr_stream s, float *sumexp, const float *local_max, const float *maxv,
                         int N);
    void (*xent_loss_backward)(tr_stream s, float *losses, float *dlogits, const float *logits,
                               const float *maxv, const float *sumexp, const float *picked,
                               const int32_t *targets, const float *weights, int N, int V,
                               int n_valid, int v_start, float scale);

    /* --- the chunked head in bf16 storage: optional (NULL in a table that keeps the head's
     * logits fp32: "cpu", "cpu-fp16", "cuda-fp32"); tp/'s tr_tp_vocab_head_loss takes this
     * path when all four are set. Arrays named *16 hold bf16 bits (uint16_t, rounded to
     * nearest even, as bf16.h), row-major with the row strides given in elements.
     *  gemm_out16:  C16 (M, N) = alpha op(A) op(B): gemm with beta 0, the result stored bf16
     *  gemm_a16:    C = alpha op(A16) op(B) + beta C: gemm with A read from bf16
     *  xent_stats16, xent_loss_backward16: xent_stats and xent_loss_backward on bf16 logits;
     *               dlogits16 (may be logits16) stored bf16.
     * Each equals its fp32-storage op followed (or preceded) by rounding to bf16; in "cpu-bf16",
     * whose ops already round what they keep, bit for bit (with loss weights the gradient is
     * rounded there before and after the weighting, on CUDA once: one bf16 step apart). */
    void (*gemm_out16)(tr_stream s, int trans_a, int trans_b, int M, int N, int K, float alpha,
                       const float *A, int lda, const float *B, int ldb, uint16_t *C16, int ldc);
    void (*gemm_a16)(tr_stream s, int trans_a, int trans_b, int M, int N, int K, float alpha,
                     const uint16_t *A16, int lda, const float *B, int ldb, float beta, float *C,
                     int ldc);
    void (*xent_stats16)(tr_stream s, float *maxv, float *sumexp, float *picked,
                         const uint16_t *logits16, const int32_t *targets, int N, int V,
                         int n_valid, int v_start);
    void (*xent_loss_backward16)(tr_stream s, float *losses, uint16_t *dlogits16,
                                 const uint16_t *logits16, const float *maxv,
                                 const float *sumexp, const float *picked,
                                 const int32_t *targets, const float *weights, int N, int V,
                                 int n_valid, int v_start, float scale);
    /* xent_stats_loss_backward16: xent_stats16, then xent_loss_backward16 with dlogits16 =
     * logits16, in one op (optional; the head takes it where one rank holds the whole
     * vocabulary, so this rank's statistics are the row's, with no all-reduce between):
     * maxv, sumexp, picked and losses as theirs, and with scale != 0 logits16 overwritten by
     * the gradient. CUDA reads each row once (into shared memory): 4 bytes an element move,
     * not 6. Equal to the two ops within fp32 rounding; in "cpu-bf16" (they, in turn) bit
     * for bit. */
    void (*xent_stats_loss_backward16)(tr_stream s, float *losses, float *maxv, float *sumexp,
                                       float *picked, uint16_t *logits16,
                                       const int32_t *targets, const float *weights, int N,
                                       int V, int n_valid, int v_start, float scale);
    /* The head's weight converted to bf16 once for all its chunks (optional, the pair; the
     * head takes it where both are set and its caller gives room for the copy):
     *  narrow16:     dst16[i] = bf16(src[i]), n elements
     *  gemm_mixed16: C = alpha op(A) op(B) + beta C with each operand fp32 (A, B) or bf16
     *                storage (A16, B16 in its place: the other pointer NULL) and C fp32, or C16
     *                bf16 storage (C NULL, beta 0: gemm_out16's rounding); with both operands
     *                fp32 it is gemm (C) or gemm_out16 (C16), with A16 and B fp32 gemm_a16,
     *                with B16 and A fp32 gemm_b16. */
    void (*narrow16)(tr_stream s, uint16_t *dst16, const float *src, size_t n);
    void (*gemm_mixed16)(tr_stream s, int trans_a, int trans_b, int M, int N, int K,
                         float alpha, const float *A, const uint16_t *A16, int lda,
                         const float *B, const uint16_t *B16, int ldb, float beta, float *C,
                         uint16_t *C16, int ldc);
    /* --- the layers' GEMM inputs in bf16 storage: optional, as the head's (the model keeps the
     * GELU output that feeds fc_proj in bf16 when all of gelu_forward16, gemm_a16 and
     * gemm_b16 are set, and no LoRA adapter reads it; the LayerNorm outputs likewise with
     * layernorm_forward16).
     *  gelu_forward16: out16[i] = gelu(inp[i]) stored bf16; the input inp fp32, or inp16
     *                  bf16 storage with inp NULL (fc's output where linear_forward wrote y16)
     *  gemm_b16:       C = alpha op(A) op(B16) + beta C: gemm with B read from bf16 */
    void (*gelu_forward16)(tr_stream s, uint16_t *out16, const float *inp, const uint16_t *inp16,
                           size_t n);
    /* layernorm_forward16: layernorm_forward with out16 stored bf16 (mean and rstd fp32): the
     * LayerNorm outputs that feed QKV and fc, kept in bf16 by the model as the GELU output */
    void (*layernorm_forward16)(tr_stream s, uint16_t *out16, float *mean, float *rstd,
                                const float *inp, const float *weight, const float *bias, int N,
                                int C, float eps);
    /* rmsnorm_forward16: rmsnorm_forward with out16 stored bf16 (the RMSNorm families') */
    void (*rmsnorm_forward16)(tr_stream s, uint16_t *out16, float *rstd, const float *inp,
                              const float *weight, int N, int C, float eps);
    void (*gemm_b16)(tr_stream s, int trans_a, int trans_b, int M, int N, int K, float alpha,
                     const float *A, int lda, const uint16_t *B16, int ldb, float beta, float *C,
                     int ldc);
    /* gelu_backward16: the GELU's input gradient stored bf16 for fc's backward, which reads
     * it in place (linear_backward's dy16), and fc's bias gradient summed in the same pass:
     * dinp16 (N, C) = bf16(gelu'(inp) * dout); dbias (C, or NULL) += sum_n of the unrounded
         * products (bias_backward of gelu_backward's output); inp fp32, or inp16 bf16 storage
     * (inp NULL); dout fp32, or dout16 bf16 storage (dout NULL: linear_backward's dx16). Set
     * only in a table whose linear_backward reads dy16 and writes dx16 and whose
     * linear_forward writes y16. */
    void (*gelu_backward16)(tr_stream s, uint16_t *dinp16, float *dbias, const float *inp,
                            const uint16_t *inp16, const float *dout, const uint16_t *dout16,
                            int N, int C);
    /* gelu_exact_forward16, gelu_exact_backward16: gelu_forward16 / gelu_backward16 of the
     * exact GELU (gelu_exact_forward's), the same contracts; set where those are and the
     * backend has the exact GELU. No GEMM epilogue fuses the exact GELU: the model runs
     * these beside linear_forward's y16 and linear_backward's dy16 instead. */
    void (*gelu_exact_forward16)(tr_stream s, uint16_t *out16, const float *inp,
                                 const uint16_t *inp16, size_t n);
    void (*gelu_exact_backward16)(tr_stream s, uint16_t *dinp16, float *dbias, const float *inp,
                                  const uint16_t *inp16, const float *dout,
                                  const uint16_t *dout16, int N, int C);
    /* relu_forward16, relu_backward16: gelu_forward16 / gelu_backward16 of ReLU
     * (relu_forward's), the same contracts (dbias += the column sums of the unrounded
     * dout where inp > 0); set where those are and the backend has relu_forward. No GEMM
     * epilogue: the model runs them beside linear_forward's y16 and linear_backward's dy16. */
    void (*relu_forward16)(tr_stream s, uint16_t *out16, const float *inp, const uint16_t *inp16,
                           size_t n);
    void (*relu_backward16)(tr_stream s, uint16_t *dinp16, float *dbias, const float *inp,
                            const uint16_t *inp16, const float *dout, const uint16_t *dout16,
                            int N, int C);
    /* layernorm_backward16, rmsnorm_backward16: layernorm_backward / rmsnorm_backward reading
     * their output gradient dout16 in bf16 storage (QKV's and fc's input gradient at TP 1,
     * linear_backward's dx16), exactly as those ops on its widened values. */
    void (*layernorm_backward16)(tr_stream s, float *dinp, float *dweight, float *dbias,
                                 const uint16_t *dout16, const float *inp, const float *weight,
                                 const float *mean, const float *rstd, int N, int C);
    void (*rmsnorm_backward16)(tr_stream s, float *dinp, float *dweight, const uint16_t *dout16,
                               const float *inp, const float *weight, const float *rstd, int N,
                               int C);
    /* The GELU fused into the MLP's GEMMs (optional; the model takes them where it keeps fc's
     * output, its GELU and their gradients in bf16: gpt_fch16):
     *  linear_gelu_forward16: fc's forward, pre16 (N, OC) = bf16(x W^T + b) (linear_forward's
     *      y16) and out16 = bf16(gelu(x W^T + b)); x fp32 or x16 as linear_forward's. Equal to
     *      linear_forward (y16) then gelu_forward16 (inp16 = pre16) within bf16 rounding (CUDA:
     *      cuBLASLt's GELU_AUX_BIAS epilogue, GELU of the unrounded sum; "cpu-bf16": those two
     *      ops, bit for bit).
     *  linear_backward_gelu16: fc_proj's backward through the GELU into fc's output gradient:
     *      dW (OC, IC) += dy^T x16, db (OC, or NULL) += sum_n dy, dpre16 (N, IC) =
     *      bf16(gelu'(pre16) (dy W)) and dpre_bias (IC, or NULL) += its column sums. Equal to
     *      linear_backward (dx16) then gelu_backward16 (inp16 = pre16) within bf16 rounding
     *      (CUDA: the DGELU epilogue on the unrounded product, dpre_bias summed from dpre16;
     *      "cpu-bf16": those two ops, bit for bit). */
    void (*linear_gelu_forward16)(tr_stream s, uint16_t *pre16, uint16_t *out16, const float *x,
                                  const uint16_t *x16, const float *W, const float *b, int N,
                                  int IC, int OC);
    void (*linear_backward_gelu16)(tr_stream s, uint16_t *dpre16, float *dpre_bias, float *dW,
                                   float *db, const float *dy, const uint16_t *x16,
                                   const uint16_t *pre16, const float *W, int N, int IC, int OC);
    /* --- the attention output in bf16 storage: optional, as the *16 ops above (the model keeps
     * it, the attention projection's input, in bf16 where its layout's pair is set with
     * gemm_a16 and gemm_b16, no LoRA adapter reads it and C/tp is even).
     *  attention_forward16, attention_gqa_forward16: attention_forward / _gqa_forward with
     *      out16 (B, T, NH, HS) stored bf16 (lse fp32)
     *  attention_backward16, attention_gqa_backward16: their backward reading out16 (for
     *      rowsum(dout * out)); dqkv, scratch and the rest as theirs.
     * Each equals its fp32-storage op with the output rounded to bf16 (widened, exactly, for
     * the backward); in "cpu-bf16", whose attention already rounds its output, bit for bit. */
    void (*attention_forward16)(tr_stream s, uint16_t *out16, float *lse, const float *qkv,
                                int B, int T, int NH, int HS, const int32_t *segments);
    void (*attention_backward16)(tr_stream s, float *dqkv, float *scratch, const float *dout,
                                 const float *qkv, const uint16_t *out16, const float *lse,
                                 int B, int T, int NH, int HS, const int32_t *segments);
    void (*attention_gqa_forward16)(tr_stream s, uint16_t *out16, float *lse, const float *qkv,
                                    const float *alibi, int B, int T, int NH, int NG, int HS,
                                    const int32_t *segments);
    void (*attention_gqa_backward16)(tr_stream s, float *dqkv, float *scratch, const float *dout,
                                     const float *qkv, const uint16_t *out16, const float *lse,
                                     const float *alibi, int B, int T, int NH, int NG, int HS,
                                     const int32_t *segments);
    /* --- the attention's input qkv and its gradient dqkv in bf16 storage too: optional (the
     * model keeps qkv, QKV's output, in bf16 where both are set, the attention output is bf16
     * as above, the table's linear_forward writes qkv (y16) and its linear_backward reads dqkv
     * in place (dy16, summing QKV's bias gradient), and no rope rotates them in place;
     * TRIDENT_CUDA_ATTENTION_IN=fp32 takes them out of "cuda"). One pair for both layouts:
     * attention_gqa_forward16 / _backward16's arguments (NG = NH and alibi NULL: GPT-2's
     * attention_forward16 / _backward16), qkv16 (B, T, NG, R+2, HS) bf16 in place of qkv, and
     * the backward's dqkv16 (the same layout) bf16 in place of dqkv and dout16 (B, T, NH, HS:
     * the projection's input gradient, linear_backward's dx16) bf16 in place of dout.
     * Each equals its fp32 op on qkv16's and dout16's values (widened, exactly) with dqkv
     * rounded to bf16; in "cpu-bf16", whose QKV GEMM already rounds qkv, the projection's
     * backward dout and attention backward dqkv, bit for bit. */
    void (*attention_forward_qkv16)(tr_stream s, uint16_t *out16, float *lse,
                                    const uint16_t *qkv16, const float *alibi, int B, int T,
                                    int NH, int NG, int HS, const int32_t *segments);
    void (*attention_backward_qkv16)(tr_stream s, uint16_t *dqkv16, float *scratch,
                                     const uint16_t *dout16, const uint16_t *qkv16,
                                     const uint16_t *out16, const float *lse, const float *alibi,
                                     int B, int T, int NH, int NG, int HS,
                                     const int32_t *segments);

    /* --- dropout, counter-based: the mask is a function of global coordinates (core/philox.h),
     * recomputed in backward (none stored), the same in every layout and on every backend;
     * NULL where a backend lacks them (the model refuses dropout > 0 there) ---
     * dropout: out (N, C) = inp * scale where element e is kept, else 0 (out may be inp: in
     *   place). Local row n is row g = row0 + n of the micro-batch's B*T token rows in (b, t)
     *   order (row0 > 0: a sequence-parallel slice, tr_tp_rows): sample d.first_sample + g / T,
     *   position g % T; local column c is feature col0 + c of C_total: e = (g % T) * C_total
     *   + col0 + c, decided by tr_dropout_keep(d.seed, sample, d.site, e, d.threshold) (the
     *   low 32 bits of the sample). The backward is the same call on the gradient
     *   (dinp = dout * mask * scale). d.head0 unused. */
    void (*dropout)(tr_stream s, float *out, const float *inp, tr_dropout d, int N, int C, int T,
                    int row0, int C_total, int col0);
    /* attention_gqa_dropout_forward / _backward: attention_gqa_forward / _backward's arguments
     *   and layout (GQA, ALiBi, segments) with dropout on the probabilities: for batch b, local
     *   head h (global head d.head0 + h), query t, key j, P(t, j) = softmax of the scaled,
     *   masked scores, kept iff tr_dropout_keep(d.seed, d.first_sample + b, d.site,
     *   e = ((d.head0 + h) * T + t) * T + j, d.threshold), and
     *   out[t] = sum_j P(t, j) keep(t, j) d.scale V[j]; lse is that of the undropped scores
     *   (as attention_gqa_forward's). Backward: dP = keep * d.scale * (dO V^T),
     *   dS = P (dP - D), D = rowsum(dO * out) (out the dropped output: sum_j P dP =
     *   dO . sum_j P keep scale V = dO . out, so the identity holds with dropout), then dQ, dK,
     *   dV as attention_gqa_backward's (dV += (P keep scale)^T dO); scratch as its. With
     *   d.threshold 0 (p = 0) each equals its op without dropout. */
    void (*attention_gqa_dropout_forward)(tr_stream s, float *out, float *lse, const float *qkv,
                                          const float *alibi, int B, int T, int NH, int NG,
                                          int HS, const int32_t *segments, tr_dropout d);
    void (*attention_gqa_dropout_backward)(tr_stream s, float *dqkv, float *scratch,
                                           const float *dout, const float *qkv,
                                           const float *out, const float *lse,
                                           const float *alibi, int B, int T, int NH, int NG,
                                           int HS, const int32_t *segments, tr_dropout d);

    /* --- embeddings ---
     * embedding_forward: out[n] = table[ids[n] - v_start] if held here (v_start <= id <
     *   v_start + V), else 0 (overwrites). table: (V, C).
     * embedding_backward: dtable[ids[n] - v_start] += dout[n] for held ids.
     * position_forward: out[b, t] += wpe[t] (accumulates); wpe: (T, C).
     * position_backward: dwpe[t] += sum_b dout[b, t]. */
    void (*embedding_forward)(tr_stream s, float *out, const int32_t *ids, const float *table,
                              int N, int C, int v_start, int V);
    void (*embedding_backward)(tr_stream s, float *dtable, const float *dout,
                               const int32_t *ids, int N, int C, int v_start, int V);
    void (*position_forward)(tr_stream s, float *out, const float *wpe, int B, int T, int C);
    void (*position_backward)(tr_stream s, float *dwpe, const float *dout, int B, int T, int C);

    /* --- mixture of experts (model.num_experts > 0); NULL where a backend lacks them ---
     * N token rows, E experts, k experts per token (1 <= k <= E), M = N k routed rows.
     * moe_router_forward, per row n of logits (N, E) (fp32 always):
     *   probs (N, E) = softmax over all E; lse (N) = log sum_e exp(logits[n, e]);
     *   idx (N, k) int32 = the k largest logits in descending order, ties to the lower
     *   expert index; weights (N, k) = pre_softmax ? probs[n, idx[n, j]] (not renormalised)
     *   : the softmax of the k chosen logits (Mixtral's weights).
     * moe_router_backward: dlogits (N, E) OVERWRITTEN with the gradient of
     *   sum_{n,j} dweights[n, j] weights[n, j]  (dweights (N, k))
     *   + sum_{n,e} aux_grad[e] probs[n, e]     (aux_grad (E) or NULL: the load-balancing
     *                                           loss's gradient with respect to probs)
     *   + z_grad sum_n lse[n]^2                 (the z-loss; z_grad 0: none)
     *   through the forward above (its idx, weights, probs, lse). */
    void (*moe_router_forward)(tr_stream s, int32_t *idx, float *weights, float *probs,
                               float *lse, const float *logits, int N, int E, int k,
                               int pre_softmax);
    void (*moe_router_backward)(tr_stream s, float *dlogits, const float *dweights,
                                const int32_t *idx, const float *weights, const float *probs,
                                const float *lse, const float *aux_grad, float z_grad, int N,
                                int E, int k, int pre_softmax);
    /* gather_rows: out (M, C) row i = src row idx[i] (idx (M) int32, rows of src). */
    void (*gather_rows)(tr_stream s, float *out, const float *src, const int32_t *idx, int M,
                        int C);
    /* scatter_add_rows: out row idx[i] += w[i] * src row i (src (M, C); w (M) or NULL: 1)
     * for i = 0 .. M-1 in that order: a row's contributions are summed in i order (the same
     * bits on every backend and thread count). Accumulates into out.
     * scatter_add_rows_backward: dsrc (M, C) row i = w[i] * dout row idx[i] (OVERWRITTEN);
     * dw (M, or NULL) [i] = dout row idx[i] . src row i (OVERWRITTEN).
     * CUDA (kernels/cuda/moe.cu): fp32 in both tables (the bf16 mode's storage ops round no
     * output, cpu-bf16's do); the scatter's bits are the CPU's; past 64 routed rows it sorts
     * idx in a scratch of its own: compute stream only; k outside 1 .. E is refused. */
    void (*scatter_add_rows)(tr_stream s, float *out, const float *src, const int32_t *idx,
                             const float *w, int M, int C);
    void (*scatter_add_rows_backward)(tr_stream s, float *dsrc, float *dw, const float *dout,
                                      const float *src, const int32_t *idx, const float *w,
                                      int M, int C);

    /* --- optimizer and norms ---
     * AdamW on n elements: m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
     * p -= lr * (m_hat / (sqrt(v_hat) + eps) + wd * p), m_hat = m/(1-b1^t), v_hat = v/(1-b2^t).
     * grad_scale multiplies g first (1/dp or the clipping factor). */
    void (*adamw)(tr_stream s, float *params, const float *grads, float *m, float *v, size_t n,
                  float lr, float beta1, float beta2, float eps, float weight_decay,
                  float grad_scale, int step);
    /* sum of squares, accumulated in double, returned to the host (synchronises). */
    double (*sumsq)(tr_stream s, const float *x, size_t n);
} tr_kernels;

/* The CPU backend's table. Its parallel loops and GEMM splits run on one team of threads
 * (the caller and threads - 1 workers that sleep between jobs; pieces of work are handed
 * out dynamically); the first call sets OpenBLAS to one thread so the two never
 * oversubscribe the cores. Work is cut by the sizes alone, so results are bit-identical run
 * to run, for any thread count and on any schedule. */
const tr_kernels *tr_kernels_cpu(void);
/* The team's size: OMP_NUM_THREADS if set (the launcher sets it per rank), else the CPUs
 * this process may run on; set_threads changes it (>= 1) for the calls that follow. */
int tr_kernels_cpu_threads(void);
void tr_kernels_cpu_set_threads(int threads);
/* Host work on the team: fn(ctx, i) for every i in [0, n), returning when all are done.
 * Called from inside a piece (or while another thread's job runs) it runs in order on the
 * caller. */
void tr_kernels_cpu_parallel_for(size_t n, void (*fn)(void *ctx, size_t i), void *ctx);

/* The CPU backend with 16-bit storage emulated (training.precision bf16 | fp16 on the CPU),
 * format "bf16" or "fp16" (NULL otherwise), named "cpu-bf16" / "cpu-fp16": the same ops, but
 * each reads its GEMM operands and the parameters it applies (LayerNorm / RMSNorm weight and
 * bias, biases, wpe; embedding rows) rounded to the format, computes in fp32, and rounds the
 * outputs it keeps (activations, activation gradients, parameter gradients; accumulating ops
 * round the sum) to the format. fp16 overflows to infinity past 65504. Unrounded: the fp32
 * statistics (mean, rstd, row max, sum of exponentials, attention's lse, losses), the
 * cross-entropy's other pieces, the MoE router's ops and the routing weights' gradient (fp32,
 * as Megatron's router), generation, AdamW (fp32 master weights and moments) and sumsq;
 * attention's probabilities (recomputed inside its ops) stay fp32 too. The GEMMs of the
 * CUDA backend's bf16 mode read their operands the same way (its twin on a CPU). */
const tr_kernels *tr_kernels_cpu_rounded(const char *format);
/* Round to nearest, ties to even, to bf16 / fp16 and back to fp32 (NaN stays NaN). */
float tr_round_bf16(float x);
float tr_round_fp16(float x);

/* The table for a backend name ("cpu", "cpu-bf16", "cpu-fp16", "cuda", "cuda-fp32"); NULL
 * with the error set when the backend is unknown or not built in. */
const tr_kernels *tr_kernels_get(const char *name);
/* 1 when name is one of those backend names (built in or not), else 0; nothing is started. */
int tr_kernels_known(const char *name);

/* t with every optional bf16-storage op (the *16 ops) and the fused linear ops (whose y16,
 * dx16 and dy16 only those users pass) set NULL: the same table computing in fp32 storage
 * (in "cpu-bf16", whose ops round what they keep, the same bits: the tests' reference). */
void tr_kernels_without_bf16_storage(tr_kernels *t);

#endif
