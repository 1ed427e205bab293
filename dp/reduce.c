/* dp/ reduction: the accumulation window, readiness counters fed by the grad hook, bucket
 * reductions started in order while backward runs, and the final wait + 1/D average. */
#include "dp/dp_internal.h"

#include <stdio.h>

int dp_keep_error(tr_dp *dp, int code)
{
    if (!dp->err) {
        dp->err = code;
        snprintf(dp->errmsg, sizeof dp->errmsg, "%s", tr_errmsg());
    }
    return code;
}

/* Called after a failure or when freeing: the error that matters was already returned, so a
 * request that fails while draining is only logged. */
void dp_drain(tr_dp *dp)
{
    for (int i = 0; i < dp->nb; i++) {
        if (dp->b[i].req && tr_comm_wait(&dp->b[i].req))
            tr_debug("dp: draining bucket %d's reduction: %s", i, tr_errmsg());
        if (dp->b[i].gather_req && tr_comm_wait(&dp->b[i].gather_req))
            tr_debug("dp: draining bucket %d's parameter gather: %s", i, tr_errmsg());
    }
}

int tr_dp_start(tr_dp *dp, int num_microbatches)
{
    if (num_microbatches < 1)
        return tr_fail(TR_ERR_INVALID, "dp: an accumulation window needs >= 1 micro-batch, "
                                       "got %d",
                       num_microbatches);
    if (dp->open)
        return tr_fail(TR_ERR_INVALID, "dp: tr_dp_start called again before tr_dp_finish "
                                       "closed the previous accumulation window");
    if (dp->stage >= 2 && !dp->shard_grads)
        return tr_fail(TR_ERR_INVALID, "dp: ZeRO stage %d needs the compact shard buffers "
                                       "(tr_dp_set_shards) before the first window", dp->stage);
    size_t m = (size_t)num_microbatches;
    if (dp->n > SIZE_MAX / m)
        return tr_fail(TR_ERR_INVALID, "dp: %d micro-batches x %zu elements overflows",
                       num_microbatches, dp->n);
    for (int i = 0; i < dp->nb; i++) {
        dp_bucket *b = &dp->b[i];
        b->reported = 0;
        b->ready = b->started = b->by_report = b->scaled = 0;
        b->t_start = b->t_end = 0;
    }
    dp->mb = m;
    dp->next_start = dp->next_unfinished = dp->hint = 0;
    dp->err = 0;
    dp->errmsg[0] = '\0';
    dp->timing = (tr_dp_timing){0};
    dp->open = 1;
    return TR_OK;
}

/* Start bucket i's reduction (in place, async); D == 1 has nothing to do. */
static int start_bucket(tr_dp *dp, int i, int by_report)
{
    dp_bucket *b = &dp->b[i];
    b->started = 1;
    b->by_report = by_report;
    b->t_start = tr_now();
    if (by_report)
        dp->timing.buckets_started_by_report++;
    if (!dp->comm) {
        b->t_end = b->t_start;
        return TR_OK;
    }
    float *base = dp->grads + b->offset;
    int rc = dp->sharded
                 ? tr_comm_reduce_scatter_async(dp->comm, base,
                                                dp_grad(dp, b->own_offset, b->shard_offset),
                                                b->count, TR_COMM_F32, TR_COMM_SUM, &b->req)
                 : tr_comm_allreduce_async(dp->comm, base, base, b->count, TR_COMM_F32,
                                           TR_COMM_SUM, &b->req);
    if (rc)
        return tr_fail_context(rc, "dp: starting the reduction of bucket %d [%zu, +%zu)", i,
                               b->offset, b->count);
    return TR_OK;
}

/* Start every ready bucket that has all earlier buckets started (same order on every rank). */
static int start_ready(tr_dp *dp)
{
    while (dp->next_start < dp->nb && dp->b[dp->next_start].ready) {
        int rc = start_bucket(dp, dp->next_start, 1);
        dp->next_start++;
        if (rc)
            return rc;
    }
    return TR_OK;
}

/* Average what this rank keeps of a reduced bucket: the ONE place gradients are scaled by
 * 1/D (1/average_over where given; after the sum, so the sum itself is the plain sum of the
 * ranks' local gradients). Done as soon as the reduction is seen complete, so only the last
 * buckets' scaling is left for tr_dp_finish after backward. */
static void scale_bucket(tr_dp *dp, dp_bucket *b)
{
    if (dp->avg > 1 && b->own_count && !b->scaled)
        dp->k->scale(NULL, dp_grad(dp, b->own_offset, b->shard_offset), 1.0f / (float)dp->avg,
                     b->own_count);
    b->scaled = 1;
}

/* Advance and notice completed reductions (records t_end, averages); never blocks. */
static int poll_started(tr_dp *dp)
{
    for (int i = dp->next_unfinished; i < dp->next_start; i++) {
        dp_bucket *b = &dp->b[i];
        if (b->req) {
            int done = 0;
            int rc = tr_comm_test(&b->req, &done);
            if (rc)
                return tr_fail_context(rc, "dp: reduction of bucket %d", i);
            if (!done)
                continue;
            b->t_end = tr_now();
            scale_bucket(dp, b);
        }
        if (i == dp->next_unfinished)
            dp->next_unfinished++;
    }
    return TR_OK;
}

static int finish_bucket(tr_dp *dp, int i);

/* The bucket holding element `off` (off < n); starts from the last report's bucket. */
static int find_bucket(tr_dp *dp, size_t off)
{
    int h = dp->hint;
    if (h < dp->nb && dp->b[h].offset <= off && off < dp->b[h].offset + dp->b[h].count)
        return h;
    if (h + 1 < dp->nb && dp->b[h + 1].offset <= off &&
        off < dp->b[h + 1].offset + dp->b[h + 1].count)
        return h + 1;
    int lo = 0, hi = dp->nb - 1; /* last bucket with offset <= off */
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (dp->b[mid].offset <= off)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

int tr_dp_report(tr_dp *dp, size_t offset, size_t count)
{
    if (dp->err)
        return tr_fail(dp->err, "%s", dp->errmsg);
    if (!dp->open)
        return dp_keep_error(dp, tr_fail(TR_ERR_INVALID,
                                         "dp: gradient range [%zu, +%zu) reported outside an "
                                         "accumulation window (call tr_dp_start first)",
                                         offset, count));
    int rc = dp_check_range(dp, offset, count, "reported range", 0);
    if (rc)
        return dp_keep_error(dp, rc);
    if (count == 0)
        return TR_OK;
    dp_sample_window(dp); /* what backward wrote so far, before anything is given back */
    size_t end = offset + count;
    int i = find_bucket(dp, offset);
    while (offset < end && i < dp->nb) {
        dp_bucket *b = &dp->b[i];
        size_t bend = b->offset + b->count;
        if (offset < b->offset) /* an excluded range: not this instance's */
            offset = b->offset < end ? b->offset : end;
        if (offset >= bend || offset == end) {
            i++;
            continue;
        }
        size_t piece = (end < bend ? end : bend) - offset;
        size_t expect = dp->mb * b->count;
        if (b->reported + piece > expect)
            return dp_keep_error(
                dp, tr_fail(TR_ERR_INVALID,
                            "dp: bucket %d [%zu, +%zu) got more than %zu micro-batch(es) worth "
                            "of reports (a range reported twice in one micro-batch, or more "
                            "micro-batches than tr_dp_start was told?)",
                            i, b->offset, b->count, dp->mb));
        b->reported += piece;
        if (dp->stage >= 2 && !b->live)
            dp_grads_live(dp, i);
        if (b->reported == expect)
            b->ready = 1;
        offset += piece;
        dp->hint = i;
        i++;
    }
    if (dp->overlap && (rc = start_ready(dp)))
        return dp_keep_error(dp, rc);
    if ((rc = poll_started(dp)))
        return dp_keep_error(dp, rc);
    /* ZeRO-2/3: every bucket started before the newest is waited for and its full gradient
     * given back now, so the window holds at most that one in flight plus the buckets
     * backward is still filling, whatever the timing (and peaks are reproducible) */
    for (int j = 0; dp->stage >= 2 && j + 1 < dp->next_start && !rc; j++)
        if (dp->b[j].live && !(rc = finish_bucket(dp, j)))
            dp_release_grads(dp, j);
    return rc ? dp_keep_error(dp, rc) : TR_OK;
}

int tr_dp_progress(tr_dp *dp)
{
    if (dp->err)
        return tr_fail(dp->err, "%s", dp->errmsg);
    int rc = dp->open ? poll_started(dp) : TR_OK;
    return rc ? dp_keep_error(dp, rc) : TR_OK;
}

void tr_dp_grad_ready(void *dp, size_t offset, size_t count)
{
    /* tr_dp_report keeps a failure in dp->err; tr_dp_finish returns it */
    if (tr_dp_report(dp, offset, count))
        tr_debug("dp: gradient range [%zu, +%zu): %s", offset, count, tr_errmsg());
}

/* Wait for bucket i and average what this rank keeps (if not done yet). */
static int finish_bucket(tr_dp *dp, int i)
{
    dp_bucket *b = &dp->b[i];
    if (b->req) {
        int rc = tr_comm_wait(&b->req);
        if (rc)
            return tr_fail_context(rc, "dp: reduction of bucket %d [%zu, +%zu)", i, b->offset,
                                   b->count);
        b->t_end = tr_now();
    } else if (b->t_end == 0) {
        b->t_end = tr_now();
    }
    scale_bucket(dp, b);
    return TR_OK;
}

int tr_dp_finish(tr_dp *dp)
{
    if (!dp->open && !dp->err)
        return tr_fail(TR_ERR_INVALID, "dp: tr_dp_finish without an open accumulation window "
                                       "(call tr_dp_start first)");
    dp->timing.t_finish_begin = tr_now();
    dp_sample_window(dp);
    int rc = dp->err;
    if (!rc) {
        for (int i = dp->next_start; i < dp->nb && !rc; i++) {
            dp_bucket *b = &dp->b[i];
            if (b->reported && !b->ready && !dp->warned_partial) {
                dp->warned_partial = 1;
                tr_warn("dp: bucket %d [%zu, +%zu) got %zu of %zu element reports: some "
                        "gradient ranges were not reported; its reduction starts only now",
                        i, b->offset, b->count, b->reported, dp->mb * b->count);
            }
            rc = start_bucket(dp, i, 0);
            dp->next_start = i + 1;
        }
        for (int i = 0; i < dp->nb && !rc; i++)
            rc = finish_bucket(dp, i);
        for (int i = 0; i < dp->nb && !rc && dp->stage >= 2; i++)
            dp_release_grads(dp, i); /* ZeRO-2/3: only the shard is kept */
    } else {
        tr_fail(rc, "%s", dp->errmsg);
    }
    if (rc) {
        char keep[512];
        snprintf(keep, sizeof keep, "%s", tr_errmsg());
        dp_drain(dp);
        tr_fail(rc, "%s", keep);
    }
    dp->open = 0;
    dp->err = 0;
    dp->timing.t_finish_end = tr_now();
    dp->timing.exposed_s = dp->timing.t_finish_end - dp->timing.t_finish_begin;
    return rc;
}
