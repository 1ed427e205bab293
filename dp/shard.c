/* dp/ ZeRO-1 shard: enumeration and intersection of this rank's shard, and the parameter
 * all-gather after the optimizer step (one async all-gather per bucket, in place). */
#include "dp/dp_internal.h"

#include <stdio.h>

const tr_dp_shard_range *tr_dp_shard_ranges(const tr_dp *dp, size_t *n_ranges)
{
    if (n_ranges)
        *n_ranges = dp->n_shard;
    return dp->shard;
}

int tr_dp_shard_foreach(const tr_dp *dp, size_t offset, size_t count,
                        void (*fn)(void *ctx, size_t offset, size_t count, size_t shard_offset),
                        void *ctx)
{
    int rc = dp_check_range(dp, offset, count, "range", 0);
    if (rc)
        return rc;
    if (!fn)
        return tr_fail(TR_ERR_INVALID, "dp: tr_dp_shard_foreach needs a function");
    size_t end = offset + count;
    /* first shard range ending after offset */
    size_t lo = 0, hi = dp->n_shard;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (dp->shard[mid].offset + dp->shard[mid].count <= offset)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (size_t i = lo; i < dp->n_shard && dp->shard[i].offset < end; i++) {
        const tr_dp_shard_range *s = &dp->shard[i];
        size_t a = s->offset > offset ? s->offset : offset;
        size_t b = s->offset + s->count < end ? s->offset + s->count : end;
        if (a < b)
            fn(ctx, a, b - a, s->shard_offset + (a - s->offset));
    }
    return TR_OK;
}

int tr_dp_gather_params_start(tr_dp *dp)
{
    if (!dp->sharded || dp->stage == 3) /* stage 3 gathers per layer, when used */
        return TR_OK;
    for (int i = dp->nb - 1; i >= 0; i--)
        if (dp->b[i].gather_req)
            return tr_fail(TR_ERR_INVALID, "dp: parameter all-gather started again before the "
                                           "previous one was waited for");
    for (int i = dp->nb - 1; i >= 0; i--) {
        dp_bucket *b = &dp->b[i];
        int rc = tr_comm_allgather_async(dp->comm, dp->params + b->own_offset,
                                         dp->params + b->offset, b->count, TR_COMM_F32,
                                         &b->gather_req);
        if (rc)
            return tr_fail_context(rc, "dp: starting the parameter all-gather of bucket %d", i);
    }
    return TR_OK;
}

static int wait_gather(tr_dp *dp, int i)
{
    if (!dp->b[i].gather_req)
        return TR_OK;
    int rc = tr_comm_wait(&dp->b[i].gather_req);
    if (rc)
        return tr_fail_context(rc, "dp: parameter all-gather of bucket %d [%zu, +%zu)", i,
                               dp->b[i].offset, dp->b[i].count);
    return TR_OK;
}

int tr_dp_gather_params_wait(tr_dp *dp)
{
    int first = TR_OK;
    char msg[512] = "";
    for (int i = dp->nb - 1; i >= 0; i--) {
        int rc = wait_gather(dp, i);
        if (rc && !first) {
            first = rc;
            snprintf(msg, sizeof msg, "%s", tr_errmsg());
        }
    }
    return first ? tr_fail(first, "%s", msg) : TR_OK;
}

int tr_dp_gather_params_wait_range(tr_dp *dp, size_t offset, size_t count)
{
    int rc = dp_check_range(dp, offset, count, "range", 0);
    if (rc)
        return rc;
    for (int i = dp->nb - 1; i >= 0; i--) {
        const dp_bucket *b = &dp->b[i];
        if (b->offset < offset + count && offset < b->offset + b->count &&
            (rc = wait_gather(dp, i)))
            return rc;
    }
    return TR_OK;
}
