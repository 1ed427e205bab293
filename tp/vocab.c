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
