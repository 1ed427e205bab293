/* dp/ finalize: TP and embedding-group all-reduces of replicated gradients (packed, one
 * collective per group), the global gradient norm and the clipping factor. */
#include "dp/dp_internal.h"

#include <math.h>
#include <string.h>

/* After tr_dp_finish(): no window open, nothing in flight. */
static int check_closed(const tr_dp *dp, const char *what)
{
    if (dp->open)
        return tr_fail(TR_ERR_INVALID, "dp: %s called while an accumulation window is open "
                                       "(call tr_dp_finish first)",
                       what);
    return TR_OK;
}

static int check_ranges(const tr_dp *dp, const tr_dp_range *r, size_t n, const char *what)
{
    if (n && !r)
        return tr_fail(TR_ERR_INVALID, "dp: %zu %s given but the list is NULL", n, what);
    for (size_t i = 0; i < n; i++) {
        int rc = dp_check_range(dp, r[i].offset, r[i].count, what, i);
        if (rc)
            return rc;
    }
    return TR_OK;
}

/* The pieces of a range list this rank works on: the ranges themselves, or with ZeRO-1 (or
 * excluded ranges) their intersection with the shard. fn(ctx, offset, count) in list order. */
typedef struct {
    const tr_dp *dp;
    float *first; /* the first piece's gradient */
    float *scratch;
    size_t pos, pieces, total;
    int unpack;
    const tr_kernels *k;
} pack_state;

static void count_piece(void *ctx, size_t off, size_t cnt, size_t shard_off)
{
    pack_state *s = ctx;
    if (!s->pieces)
        s->first = dp_grad(s->dp, off, shard_off);
    s->pieces++;
    s->total += cnt;
}

static void copy_piece(void *ctx, size_t off, size_t cnt, size_t shard_off)
{
    pack_state *s = ctx;
    size_t bytes = cnt * sizeof(float);
    float *g = dp_grad(s->dp, off, shard_off);
    if (s->unpack)
        s->k->copy(NULL, g, s->scratch + s->pos, bytes);
    else
        s->k->copy(NULL, s->scratch + s->pos, g, bytes);
    s->pos += cnt;
}

static int each_piece(const tr_dp *dp, const tr_dp_range *r, size_t n,
                      void (*fn)(void *, size_t, size_t, size_t), void *ctx)
{
    for (size_t i = 0; i < n; i++) {
        if (dp->sharded || dp->n_excluded) {
            int rc = tr_dp_shard_foreach(dp, r[i].offset, r[i].count, fn, ctx);
            if (rc)
                return rc;
        } else if (r[i].count) {
            fn(ctx, r[i].offset, r[i].count, 0);
        }
    }
    return TR_OK;
}

/* One all-reduce over `comm` of every piece of the list. */
static int allreduce_pieces(tr_dp *dp, tr_comm *comm, const tr_dp_range *r, size_t n,
                            const char *what)
{
    pack_state s = {.dp = dp, .k = dp->k};
    int rc = each_piece(dp, r, n, count_piece, &s);
    if (rc || s.total == 0 || tr_comm_size(comm) == 1)
        return rc;
    if (s.pieces == 1) {
        rc = tr_comm_allreduce(comm, s.first, s.first, s.total, TR_COMM_F32, TR_COMM_SUM);
    } else {
        if (s.total > dp->scratch_cap) {
            /* the backend's memory, as the gradients: on CUDA a device buffer, so the copies
             * are device-to-device and the all-reduce takes the NCCL route */
            if (dp->scratch)
                dp->k->free(dp->scratch);
            dp->scratch_cap = 0;
            dp->scratch = dp->k->alloc(s.total * sizeof(float));
            if (!dp->scratch)
                return tr_fail(TR_ERR_NOMEM, "dp: out of %s memory packing %zu %s elements",
                               dp->k->name, s.total, what);
            dp->scratch_cap = s.total;
        }
        s.scratch = dp->scratch;
        rc = each_piece(dp, r, n, copy_piece, &s);
        if (!rc)
            rc = tr_comm_allreduce(comm, s.scratch, s.scratch, s.total, TR_COMM_F32,
                                   TR_COMM_SUM);
        if (!rc) {
            s.pos = 0;
            s.unpack = 1;
            rc = each_piece(dp, r, n, copy_piece, &s);
        }
    }
    if (rc)
        return tr_fail_context(rc, "dp: all-reduce of the %s (%zu elements in %zu pieces)",
                               what, s.total, s.pieces);
    return TR_OK;
}

/* With ZeRO-1 an embedding range must be an aligned range, so both stages own the same
 * elements of it. */
static int check_embedding_aligned(const tr_dp *dp, const tr_dp_range *r, size_t n)
{
    if (!dp->sharded)
        return TR_OK;
    for (size_t i = 0; i < n; i++) {
        int found = 0;
        for (size_t j = 0; j < dp->n_aligned && !found; j++)
            found = dp->aligned[j].offset == r[i].offset && dp->aligned[j].count == r[i].count;
        if (!found && r[i].count)
            return tr_fail(TR_ERR_INVALID,
                           "dp: embedding range %zu [%zu, +%zu) is not one of the aligned "
                           "ranges given to tr_dp_create; with ZeRO-1 it must be, so that "
                           "every stage of the embedding group owns the same elements of it",
                           i, r[i].offset, r[i].count);
    }
    return TR_OK;
}

int tr_dp_finalize_grads(tr_dp *dp, tr_comm *tp_comm, const tr_dp_range *tp_ranges,
                         size_t n_tp, tr_comm *emb_comm, const tr_dp_range *emb_ranges,
                         size_t n_emb)
{
    int rc = check_closed(dp, "tr_dp_finalize_grads");
    if (rc)
        return rc;
    if (tp_comm) {
        if ((rc = check_ranges(dp, tp_ranges, n_tp, "tp range")) ||
            (rc = allreduce_pieces(dp, tp_comm, tp_ranges, n_tp, "TP-replicated gradients")))
            return rc;
    }
    if (emb_comm) {
        if ((rc = check_ranges(dp, emb_ranges, n_emb, "embedding range")) ||
            (rc = check_embedding_aligned(dp, emb_ranges, n_emb)) ||
            (rc = allreduce_pieces(dp, emb_comm, emb_ranges, n_emb, "embedding gradients")))
            return rc;
    }
    return TR_OK;
}

typedef struct {
    const tr_kernels *k;
    const tr_dp *dp;
    double sum;
} norm_state;

static void add_sumsq(void *ctx, size_t off, size_t cnt, size_t shard_off)
{
    norm_state *s = ctx;
    s->sum += s->k->sumsq(NULL, dp_grad(s->dp, off, shard_off), cnt);
}

int tr_dp_grad_norm(tr_dp *dp, const tr_dp_range *ranges, size_t n_ranges, tr_comm *norm_comm,
                    double *norm_out)
{
    int rc = check_closed(dp, "tr_dp_grad_norm");
    if (rc || (rc = check_ranges(dp, ranges, n_ranges, "norm range")))
        return rc;
    norm_state s = {dp->k, dp, 0.0};
    if ((rc = each_piece(dp, ranges, n_ranges, add_sumsq, &s)))
        return rc;
    if (norm_comm && tr_comm_size(norm_comm) > 1 &&
        (rc = tr_comm_allreduce(norm_comm, &s.sum, &s.sum, 1, TR_COMM_F64, TR_COMM_SUM)))
        return tr_fail_context(rc, "dp: all-reduce of the gradient norm");
    *norm_out = sqrt(s.sum);
    return TR_OK;
}

float tr_dp_clip_factor(double norm, double max_norm)
{
    if (!(max_norm > 0) || !isfinite(norm))
        return 1.0f;
    double f = max_norm / (norm + 1e-6);
    return f < 1.0 ? (float)f : 1.0f;
}
