/* dp/ ZeRO-2/3: the compact shard buffers, giving back a reduced bucket's gradient pages
 * (stage >= 2), and stage 3's parameters gathered bucket by bucket on demand (need /
 * prefetch / done) with the flat parameter buffer as a window that holds only what is in
 * use. See dp/dp.h. */
#include "dp/dp_internal.h"

#include <string.h>

int tr_dp_set_shards(tr_dp *dp, float *shard_grads, float *shard_params)
{
    if (dp->stage < 2)
        return TR_OK;
    if (!shard_grads || (dp->stage == 3 && !shard_params))
        return tr_fail(TR_ERR_INVALID, "dp: ZeRO stage %d needs a compact %s buffer of %zu "
                                       "elements", dp->stage, !shard_grads ? "gradient" : "parameter",
                       dp->shard_numel);
    dp->shard_grads = shard_grads;
    dp->shard_params = dp->stage == 3 ? shard_params : NULL;
    return TR_OK;
}

float *tr_dp_shard_grads(const tr_dp *dp) { return dp->shard_grads; }
float *tr_dp_shard_params(const tr_dp *dp) { return dp->shard_params; }

static void give_back(tr_dp *dp, float *p, size_t count)
{
    if (dp->release)
        dp->release(dp->release_ctx, p, count);
    else
        dp->k->zero(NULL, p, count * sizeof(float));
}

void dp_sample_window(tr_dp *dp)
{
    if (!dp->resident || dp->stage < 2)
        return;
    size_t v = dp->resident(dp->release_ctx, dp->grads, dp->n);
    if (v > dp->zs.grad_live_peak_bytes)
        dp->zs.grad_live_peak_bytes = v;
}

void dp_grads_live(tr_dp *dp, int i)
{
    dp_bucket *b = &dp->b[i];
    b->live = 1;
    dp->zs.grad_live_bytes += b->count * sizeof(float);
    if (!dp->resident && dp->zs.grad_live_bytes > dp->zs.grad_live_peak_bytes)
        dp->zs.grad_live_peak_bytes = dp->zs.grad_live_bytes;
}

void dp_release_grads(tr_dp *dp, int i)
{
    dp_bucket *b = &dp->b[i];
    if (!b->live)
        return; /* not touched in this window: it reads as zeros already */
    give_back(dp, dp->grads + b->offset, b->count);
    b->live = 0;
    dp->zs.grad_live_bytes -= b->count * sizeof(float);
}

/* ---- stage 3: parameters ---- */

/* Buckets [*first, *last) covering [offset, offset + count); 0 when the range is empty. */
static int covering(const tr_dp *dp, size_t offset, size_t count, int *first, int *last)
{
    int rc = dp_check_range(dp, offset, count, "parameter range", 0);
    if (rc)
        return rc;
    *first = *last = 0;
    if (!count)
        return TR_OK;
    int lo = 0, hi = dp->nb - 1; /* last bucket starting at or before offset */
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (dp->b[mid].offset <= offset)
            lo = mid;
        else
            hi = mid - 1;
    }
    if (lo < dp->nb && dp->b[lo].offset + dp->b[lo].count <= offset)
        lo++; /* ends before the range (an excluded range follows it) */
    int e = lo;
    while (e < dp->nb && dp->b[e].offset < offset + count)
        e++;
    *first = lo;
    *last = e;
    return TR_OK;
}

/* Start bucket i's gather (own block of the compact shard -> its range of the window). */
static int gather_start(tr_dp *dp, int i)
{
    dp_bucket *b = &dp->b[i];
    if (b->resident)
        return TR_OK;
    int rc = tr_comm_allgather_async(dp->comm, dp->shard_params + b->shard_offset,
                                     dp->params + b->offset, b->count, TR_COMM_F32,
                                     &b->gather_req);
    if (rc)
        return tr_fail_context(rc, "dp: starting the parameter all-gather of bucket %d [%zu, +%zu)",
                               i, b->offset, b->count);
    b->resident = 1;
    dp->zs.gathers++;
    dp->zs.param_resident_bytes += b->count * sizeof(float);
    if (dp->zs.param_resident_bytes > dp->zs.param_resident_peak_bytes)
        dp->zs.param_resident_peak_bytes = dp->zs.param_resident_bytes;
    return TR_OK;
}

static int gather_wait(tr_dp *dp, int i)
{
    dp_bucket *b = &dp->b[i];
    if (!b->gather_req)
        return TR_OK;
    int done = 0;
    int rc = tr_comm_test(&b->gather_req, &done);
    if (!rc && !done) { /* prefetch did not hide it all: the wait is exposed */
        double t0 = tr_now();
        rc = tr_comm_wait(&b->gather_req);
        dp->zs.gather_wait_s += tr_now() - t0;
        dp->zs.gathers_waited++;
    }
    if (rc)
        return tr_fail_context(rc, "dp: parameter all-gather of bucket %d [%zu, +%zu)", i,
                               b->offset, b->count);
    return TR_OK;
}

static void params_release(tr_dp *dp, int i)
{
    dp_bucket *b = &dp->b[i];
    if (!b->resident)
        return;
    give_back(dp, dp->params + b->offset, b->count);
    b->resident = 0;
    dp->zs.param_resident_bytes -= b->count * sizeof(float);
}

int tr_dp_params_prefetch(tr_dp *dp, size_t offset, size_t count)
{
    int first, last, rc = TR_OK;
    if (dp->stage < 3 || (rc = covering(dp, offset, count, &first, &last)))
        return rc;
    for (int i = first; i < last && !rc; i++)
        rc = gather_start(dp, i);
    return rc;
}

int tr_dp_params_need(tr_dp *dp, size_t offset, size_t count)
{
    int first, last, rc = TR_OK;
    if (dp->stage < 3 || (rc = covering(dp, offset, count, &first, &last)))
        return rc;
    for (int i = first; i < last && !rc; i++)
        rc = gather_start(dp, i);
    for (int i = first; i < last && !rc; i++)
        rc = gather_wait(dp, i);
    return rc;
}

int tr_dp_params_done(tr_dp *dp, size_t offset, size_t count)
{
    int first, last, rc = TR_OK;
    if (dp->stage < 3 || (rc = covering(dp, offset, count, &first, &last)))
        return rc;
    for (int i = first; i < last && !rc; i++)
        rc = gather_wait(dp, i); /* never release pages a gather still writes */
    for (int i = first; i < last && !rc; i++)
        params_release(dp, i);
    return rc;
}

int tr_dp_params_release_all(tr_dp *dp)
{
    if (dp->stage < 3)
        return TR_OK;
    int rc = TR_OK;
    for (int i = 0; i < dp->nb && !rc; i++) {
        rc = gather_wait(dp, i);
        if (!rc)
            params_release(dp, i);
    }
    return rc;
}

int tr_dp_params_keep_own(tr_dp *dp, size_t offset, size_t count)
{
    int first, last, rc = TR_OK;
    if (dp->stage < 3 || (rc = covering(dp, offset, count, &first, &last)))
        return rc;
    for (int i = first; i < last; i++) {
        const dp_bucket *b = &dp->b[i];
        size_t lo = offset > b->own_offset ? offset : b->own_offset;
        size_t hi = offset + count < b->own_offset + b->own_count ? offset + count
                                                                   : b->own_offset + b->own_count;
        if (lo < hi)
            dp->k->copy(NULL, dp->shard_params + b->shard_offset + (lo - b->own_offset),
                        dp->params + lo, (hi - lo) * sizeof(float));
    }
    return TR_OK;
}
