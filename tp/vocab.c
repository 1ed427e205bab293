/* Vocabulary-parallel embedding and cross-entropy: rank t holds vocabulary ids
 * [t*Vl, (t+1)*Vl) of the padded vocabulary (embedding rows, logit columns). */
#include "tp/tp.h"

#include "core/core.h"

int tr_tp_vocab_embedding_forward(const tr_tp *tp, float *out, const int32_t *ids,
                                  const float *table, int N, int C, int Vl, float *scratch)
{
    if (tp->size == 1) {
        tp->k->embedding_forward(NULL, out, ids, table, N, C, 0, Vl);
        return TR_OK;
    }
    /* partial (N, C): rows of ids held here, 0 elsewhere; each id is held by one rank */
    tp->k->embedding_forward(NULL, scratch, ids, table, N, C, tp->rank * Vl, Vl);
    return tr_tp_reduce_scatter_to_sequence_region_forward(tp, scratch, out, N, C);
}

int tr_tp_vocab_embedding_backward(const tr_tp *tp, float *dtable, const float *dout,
                                   const int32_t *ids, int N, int C, int Vl, float *scratch,
                                   const float **dout_all)
{
    const float *all = dout; /* without SP every rank holds the whole (replicated) gradient */
    if (tp->sequence_parallel) {
        int rc = tr_tp_gather_from_sequence_region_forward(tp, dout, scratch, N, C);
        if (rc)
            return rc;
        all = scratch;
    }
    tp->k->embedding_backward(NULL, dtable, all, ids, N, C, tp->rank * Vl, Vl);
    if (dout_all)
        *dout_all = all;
    return TR_OK;
}

/* Real (non-padding) columns among this rank's Vl: global ids below V. */
static int valid_columns(const tr_tp *tp, int Vl, int V)
{
    long held = (long)V - (long)tp->rank * Vl;
    return held <= 0 ? 0 : held >= Vl ? Vl : (int)held;
}

int tr_tp_vocab_cross_entropy_forward(const tr_tp *tp, float *losses, float *stats,
                                      const float *logits, const int32_t *targets, int N,
                                      int Vl, int V)
{
    const tr_kernels *k = tp->k;
    float *maxv = stats, *sumexp = stats + N, *picked = stats + 2 * (size_t)N;
    int n_valid = valid_columns(tp, Vl, V), v_start = tp->rank * Vl, rc;
    k->xent_row_max(NULL, maxv, logits, N, Vl, n_valid);
    rc = tr_tp_allreduce(tp, maxv, (size_t)N, TR_COMM_MAX, "all-reduce of the logit maxima");
    if (rc)
        return rc;
    k->xent_row_sumexp(NULL, sumexp, logits, maxv, N, Vl, n_valid);
    k->xent_pick(NULL, picked, logits, targets, N, Vl, v_start);
    /* sumexp and picked are adjacent: one all-reduce of 2N */
    rc = tr_tp_allreduce(tp, sumexp, 2 * (size_t)N, TR_COMM_SUM,
                         "all-reduce of the sums of exponentials and target logits");
    if (rc)
        return rc;
    k->xent_loss(NULL, losses, maxv, sumexp, picked, N);
    return TR_OK;
}

int tr_tp_vocab_cross_entropy_backward(const tr_tp *tp, float *dlogits, const float *logits,
                                       const float *stats, const int32_t *targets, int N,
                                       int Vl, int V, float scale)
{
    const float *maxv = stats, *sumexp = stats + N;
    tp->k->xent_backward(NULL, dlogits, logits, maxv, sumexp, targets, N, Vl,
                         valid_columns(tp, Vl, V), tp->rank * Vl, scale);
    return TR_OK;
}

/* Whether the head runs on the backend's bf16 storage (kernels.h): each chunk's logits and
 * their gradient stored in bf16, twice tr_tp_head_chunks.rows rows in the same buffer; fp32
 * when a tool observes them */
static int head_in_bf16(const tr_kernels *k, const tr_tp_head_chunks *ch)
{
    return k->gemm_out16 && k->gemm_a16 && k->xent_stats16 && k->xent_loss_backward16 &&
           !ch->observe && !ch->bias;
}

/* W16: W converted once (ch->W16 where the table has the pair; else NULL) */
static const uint16_t *head_w16(const tr_kernels *k, const tr_tp_head_chunks *ch, int half)
{
    return half && ch->W16 && k->narrow16 && k->gemm_mixed16 ? ch->W16 : NULL;
}

/* A chunk's backward from its gradient dlogits (n, Vl) in lg (bf16 storage when half): dx rows
 * (n, C) = dlogits @ W (W16: its bf16 copy), this rank's partial sum; dW (Vl, C) += dlogits^T
 * @ x rows (xr). */
static int head_chunk_backward(const tr_kernels *k, float *dx, float *dW, float *lg,
                               const float *xr, const float *W, const uint16_t *W16, int r0,
                               int n, int C, int Vl, int half, float scale)
{
    if (scale == 0.0f)
        return TR_OK;
    const uint16_t *lg16 = (const uint16_t *)lg;
    float *dxr = dx ? dx + (size_t)r0 * C : NULL;
    if (dx && W16)
        k->gemm_mixed16(NULL, 0, 0, n, C, Vl, 1.0f, NULL, lg16, Vl, NULL, W16, C, 0.0f, dxr, NULL,
                        C);
    else if (dx && half)
        k->gemm_a16(NULL, 0, 0, n, C, Vl, 1.0f, lg16, Vl, W, C, 0.0f, dxr, C);
    else if (dx)
        k->gemm(NULL, 0, 0, n, C, Vl, 1.0f, lg, Vl, W, C, 0.0f, dxr, C);
    if (dW && half)
        k->gemm_a16(NULL, 1, 0, Vl, C, n, 1.0f, lg16, Vl, xr, C, 1.0f, dW, C);
    else if (dW)
        k->gemm(NULL, 1, 0, Vl, C, n, 1.0f, lg, Vl, xr, C, 1.0f, dW, C);
    return TR_OK;
}

/* One chunk of tr_tp_vocab_head_loss: rows [r0, r0 + n). */
static int head_chunk(const tr_tp *tp, const tr_tp_head_chunks *ch, float *losses, float *dx,
                      float *dW, const float *x, const float *W, const int32_t *targets,
                      const float *weights, int r0, int n, int C, int Vl, int V, float scale)
{
    const tr_kernels *k = tp->k;
    int n_valid = valid_columns(tp, Vl, V), v_start = tp->rank * Vl, rc;
    float *lg = ch->logits, *maxv = ch->stats, *sumexp = maxv + n, *picked = sumexp + n;
    float *local_max = picked + n;
    const float *xr = x + (size_t)r0 * C;
    int half = head_in_bf16(k, ch);
    uint16_t *lg16 = (uint16_t *)lg;
    const float *wr = weights ? weights + r0 : NULL;
    const uint16_t *W16 = head_w16(k, ch, half);
    /* logits (n, Vl) = x rows @ W^T */
    if (W16)
        k->gemm_mixed16(NULL, 0, 1, n, Vl, C, 1.0f, xr, NULL, C, NULL, W16, C, 0.0f, NULL, lg16,
                        Vl);
    else if (half)
        k->gemm_out16(NULL, 0, 1, n, Vl, C, 1.0f, xr, C, W, C, lg16, Vl);
    if (half) {
        if (tp->size == 1 && k->xent_stats_loss_backward16) {
            /* one rank holds every column: its statistics are the row's, and the loss and
             * the gradient follow in the same pass over the logits */
            k->xent_stats_loss_backward16(NULL, losses + r0, maxv, sumexp, picked, lg16,
                                          targets + r0, wr, n, Vl, n_valid, v_start, scale);
            return head_chunk_backward(k, dx, dW, lg, xr, W, W16, r0, n, C, Vl, half, scale);
        }
        k->xent_stats16(NULL, maxv, sumexp, picked, lg16, targets + r0, n, Vl, n_valid,
                        v_start);
    } else {
        k->gemm(NULL, 0, 1, n, Vl, C, 1.0f, xr, C, W, C, 0.0f, lg, Vl);
        if (ch->bias)
            k->bias_add(NULL, lg, ch->bias, n, Vl);
        if (ch->observe)
            ch->observe(ch->observe_ctx, r0, n, lg);
        k->xent_stats(NULL, maxv, sumexp, picked, lg, targets + r0, n, Vl, n_valid, v_start);
    }
    if (tp->size > 1) {
        k->copy(NULL, local_max, maxv, (size_t)n * sizeof(float));
        rc = tr_tp_allreduce(tp, maxv, (size_t)n, TR_COMM_MAX, "all-reduce of the logit maxima");
        if (rc)
            return rc;
        k->xent_rescale(NULL, sumexp, local_max, maxv, n);
        /* sumexp and picked are adjacent: one all-reduce of 2n */
        rc = tr_tp_allreduce(tp, sumexp, 2 * (size_t)n, TR_COMM_SUM,
                             "all-reduce of the sums of exponentials and target logits");
        if (rc)
            return rc;
    }
    /* losses; with scale != 0 dlogits in place of the logits */
    if (half)
        k->xent_loss_backward16(NULL, losses + r0, lg16, lg16, maxv, sumexp, picked,
                                targets + r0, wr, n, Vl, n_valid, v_start, scale);
    else
        k->xent_loss_backward(NULL, losses + r0, lg, lg, maxv, sumexp, picked, targets + r0, wr,
                              n, Vl, n_valid, v_start, scale);
    if (scale != 0.0f && ch->dbias) /* (padding columns' gradient is 0) */
        k->bias_backward(NULL, ch->dbias, lg, n, Vl);
    return head_chunk_backward(k, dx, dW, lg, xr, W, W16, r0, n, C, Vl, half, scale);
}

int tr_tp_vocab_head_loss(const tr_tp *tp, const tr_tp_head_chunks *chunks, float *losses,
                          float *dx, float *dW, float *x, const float *W,
                          const int32_t *targets, const float *weights, int N, int C, int Vl,
                          int V, float scale)
{
    int first, count, rc;
    if (chunks->rows < 1)
        return tr_fail(TR_ERR_INVALID, "head chunk of %d rows: must be >= 1", chunks->rows);
    tr_tp_rows(tp, N, &first, &count);
    /* f forward is the identity; under SP the input is gathered from the sequence slices */
    rc = tr_tp_gather_from_sequence_region_forward(tp, x + (size_t)first * C, x, N, C);
    if (rc)
        return rc;
    /* (bf16 storage: a chunk of twice the rows fills the same bytes; fewer chunks re-read
     * W and re-accumulate dW fewer times) */
    int half = head_in_bf16(tp->k, chunks), rows = half ? 2 * chunks->rows : chunks->rows;
    uint16_t *W16 = (uint16_t *)head_w16(tp->k, chunks, half);
    if (W16) /* W in bf16 once for every chunk's two GEMMs that read it */
        tp->k->narrow16(NULL, W16, W, (size_t)Vl * C);
    for (int r0 = 0; r0 < N; r0 += rows) {
        int n = N - r0 < rows ? N - r0 : rows;
        rc = head_chunk(tp, chunks, losses, dx, dW, x, W, targets, weights, r0, n, C, Vl, V,
                        scale);
        if (rc)
            return rc;
    }
    if (scale == 0.0f || !dx)
        return TR_OK;
    if (tp->sequence_parallel) /* the column backward's reduction, once for every chunk */
        return tr_tp_reduce_scatter_to_sequence_region_forward(tp, dx, dx + (size_t)first * C,
                                                               N, C);
    return tr_tp_copy_to_region_backward(tp, dx, (size_t)N * C);
}
