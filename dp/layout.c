/* dp/ layout: bucket boundaries (size limit + cuts at aligned ranges), this rank's ZeRO-1
 * shard, creation and queries. */
#include "dp/dp_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define FP32_PER_MIB 262144.0 /* 2^20 bytes / 4 */

tr_dp_config tr_dp_config_from_parallel(const tr_parallel_config *p)
{
    return (tr_dp_config){.bucket_size_mb = p->ddp_bucket_size_mb,
                          .overlap_grad_reduce = p->overlap_grad_reduce,
                          .distributed_optimizer = p->use_distributed_optimizer,
                          .zero_stage = tr_zero_stage(p)};
}

/* Largest bucket in elements; 0 = no limit (one bucket per piece). */
static int bucket_limit(const tr_dp_config *cfg, size_t n, size_t *limit)
{
    double mb = cfg->bucket_size_mb;
    *limit = 0;
    if (isnan(mb) || isinf(mb) || mb < 0)
        return tr_fail(TR_ERR_CONFIG,
                       "parallel.ddp_bucket_size_mb must be a finite number >= 0 (MiB per "
                       "gradient bucket; 0 = one bucket), got %g",
                       mb);
    if (mb == 0 || !cfg->overlap_grad_reduce)
        return TR_OK;
    double elems = floor(mb * FP32_PER_MIB);
    if (elems < 1)
        return tr_fail(TR_ERR_CONFIG,
                       "parallel.ddp_bucket_size_mb %g is below one fp32 element (4 bytes = "
                       "%.3g MiB); use 0 for one bucket",
                       mb, 1.0 / FP32_PER_MIB);
    if (elems < (double)n)
        *limit = (size_t)elems;
    return TR_OK;
}

static int cmp_range(const void *a, const void *b)
{
    const tr_dp_range *x = a, *y = b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Validated copy of lists a and b (`what` ranges, none empty, inside [0, n), none
 * overlapping another), sorted by offset (*out NULL when there are none). */
static int sorted_ranges(const tr_dp_range *a, size_t na, const tr_dp_range *b, size_t nb,
                         size_t n, const char *what, tr_dp_range **out)
{
    *out = NULL;
    if ((na && !a) || (nb && !b))
        return tr_fail(TR_ERR_INVALID, "dp: n_%s is %zu but %s is NULL", what,
                       na && !a ? na : nb, what);
    size_t total = na + nb;
    if (total == 0)
        return TR_OK;
    tr_dp_range *r = malloc(total * sizeof *r);
    if (!r)
        return tr_fail(TR_ERR_NOMEM, "dp: out of memory for %zu %s ranges", total, what);
    if (na)
        memcpy(r, a, na * sizeof *r);
    if (nb)
        memcpy(r + na, b, nb * sizeof *r);
    int rc = TR_OK;
    for (size_t i = 0; i < total && !rc; i++)
        if (r[i].count == 0 || r[i].offset > n || r[i].count > n - r[i].offset)
            rc = tr_fail(TR_ERR_INVALID,
                         "dp: %s range %zu [%zu, %zu + %zu) is empty or outside the buffer of "
                         "%zu elements",
                         what, i, r[i].offset, r[i].offset, r[i].count, n);
    if (!rc)
        qsort(r, total, sizeof *r, cmp_range);
    for (size_t i = 1; i < total && !rc; i++)
        if (r[i].offset < r[i - 1].offset + r[i - 1].count)
            rc = tr_fail(TR_ERR_INVALID, "dp: %s ranges [%zu, +%zu) and [%zu, +%zu) overlap",
                         what, r[i - 1].offset, r[i - 1].count, r[i].offset, r[i].count);
    if (rc) {
        free(r);
        return rc;
    }
    *out = r;
    return TR_OK;
}

static int sorted_aligned(const tr_dp_config *cfg, size_t n, tr_dp_range **out)
{
    return sorted_ranges(cfg->aligned, cfg->n_aligned, NULL, 0, n, "aligned", out);
}

/* The cuts of the buckets: the aligned and the excluded ranges, sorted (checked apart). */
static int sorted_cuts(const tr_dp_config *cfg, size_t n, tr_dp_range **out)
{
    tr_dp_range *x = NULL, *y = NULL;
    int rc = sorted_ranges(cfg->excluded, cfg->n_excluded, NULL, 0, n, "excluded", &x);
    if (!rc)
        rc = sorted_aligned(cfg, n, &y);
    free(x);
    free(y);
    return rc ? rc
              : sorted_ranges(cfg->aligned, cfg->n_aligned, cfg->excluded, cfg->n_excluded, n,
                              "aligned or excluded", out);
}

/* Drops the buckets inside an excluded range (cut at their ends: a bucket is in one or in
 * none); returns the number left. */
static int drop_excluded(const tr_dp_config *cfg, dp_bucket *b, int nb)
{
    int k = 0;
    for (int i = 0; i < nb; i++) {
        int out = 0;
        for (size_t j = 0; j < cfg->n_excluded && !out; j++)
            out = b[i].offset >= cfg->excluded[j].offset &&
                  b[i].offset < cfg->excluded[j].offset + cfg->excluded[j].count;
        if (!out)
            b[k++] = b[i];
    }
    return k;
}

/* Calls add(ctx, offset, count) for each bucket in order; returns the number of buckets.
 * Pieces between cuts (aligned range ends) are split every `limit` elements from their
 * start. */
static size_t each_bucket(size_t n, size_t limit, const tr_dp_range *al, size_t nal,
                          dp_bucket *out)
{
    size_t nb = 0, pos = 0, ai = 0;
    while (pos < n) {
        /* the piece [pos, end): up to the next cut */
        size_t end = n;
        if (ai < nal) {
            if (al[ai].offset == pos) {
                end = al[ai].offset + al[ai].count;
                ai++;
            } else {
                end = al[ai].offset;
            }
        }
        for (size_t o = pos; o < end;) {
            size_t c = end - o;
            if (limit && c > limit)
                c = limit;
            if (out) {
                memset(&out[nb], 0, sizeof out[nb]);
                out[nb].offset = o;
                out[nb].count = c;
            }
            nb++;
            o += c;
        }
        pos = end;
    }
    return nb;
}

/* Buckets for cfg over n elements: *out malloc'ed, *nb set. */
static int build_buckets(const tr_dp_config *cfg, size_t n, const tr_dp_range *al, size_t nal,
                         dp_bucket **out, int *nb)
{
    size_t limit;
    int rc = bucket_limit(cfg, n, &limit);
    if (rc)
        return rc;
    size_t count = each_bucket(n, limit, al, nal, NULL);
    if (count > TR_DP_MAX_BUCKETS)
        return tr_fail(TR_ERR_CONFIG,
                       "parallel.ddp_bucket_size_mb %g cuts %zu gradient elements into %zu "
                       "buckets; at most %d are allowed (raise the bucket size)",
                       cfg->bucket_size_mb, n, count, TR_DP_MAX_BUCKETS);
    dp_bucket *b = calloc(count ? count : 1, sizeof *b);
    if (!b)
        return tr_fail(TR_ERR_NOMEM, "dp: out of memory for %zu buckets", count);
    each_bucket(n, limit, al, nal, b);
    *out = b;
    *nb = drop_excluded(cfg, b, (int)count);
    return TR_OK;
}

/* Rank d's block of every bucket (own_*), and its shard size. */
static size_t assign_blocks(dp_bucket *b, int nb, int sharded, int D, int d)
{
    size_t total = 0;
    for (int i = 0; i < nb; i++) {
        size_t off = 0, len = b[i].count;
        if (sharded)
            tr_comm_block(b[i].count, D, d, &off, &len);
        b[i].own_offset = b[i].offset + off;
        b[i].own_count = len;
        total += len;
    }
    return total;
}

/* The ZeRO stage in effect for cfg on D ranks (0 when D == 1). */
static int dp_stage(const tr_dp_config *cfg, int D)
{
    int z = cfg->zero_stage > 0 ? cfg->zero_stage : cfg->distributed_optimizer ? 1 : 0;
    return D > 1 ? z : 0;
}

static int check_config(const tr_dp_config *cfg, size_t n, int D, int d)
{
    if (!cfg)
        return tr_fail(TR_ERR_INVALID, "dp: config is NULL");
    if (n == 0)
        return tr_fail(TR_ERR_INVALID, "dp: the gradient buffer is empty (n = 0)");
    if (D < 1 || d < 0 || d >= D)
        return tr_fail(TR_ERR_INVALID, "dp: rank %d of a data-parallel size %d is impossible",
                       d, D);
    if (cfg->average_over < 0)
        return tr_fail(TR_ERR_INVALID, "dp: average_over %d (0: the group's size)",
                       cfg->average_over);
    if (cfg->zero_stage < 0 || cfg->zero_stage > 3)
        return tr_fail(TR_ERR_CONFIG, "parallel.zero_stage must be 0, 1, 2 or 3, got %d",
                       cfg->zero_stage);
    return TR_OK;
}

int tr_dp_layout(const tr_dp_config *cfg, size_t n, int dp_size, int dp_rank, int *n_buckets,
                 size_t *shard_numel)
{
    int rc = check_config(cfg, n, dp_size, dp_rank);
    if (rc)
        return rc;
    tr_dp_range *al = NULL;
    if ((rc = sorted_cuts(cfg, n, &al)))
        return rc;
    dp_bucket *b = NULL;
    int nb = 0;
    rc = build_buckets(cfg, n, al, cfg->n_aligned + cfg->n_excluded, &b, &nb);
    free(al);
    if (rc)
        return rc;
    size_t numel = assign_blocks(b, nb, dp_stage(cfg, dp_size) >= 1, dp_size, dp_rank);
    free(b);
    if (n_buckets)
        *n_buckets = nb;
    if (shard_numel)
        *shard_numel = numel;
    return TR_OK;
}

/* The shard as ranges with their compact offsets: one per non-empty block (ZeRO-1), else
 * [0, n). */
static int build_shard(tr_dp *dp)
{
    size_t cnt = 0;
    for (int i = 0; i < dp->nb; i++)
        cnt += dp->b[i].own_count > 0;
    if (!dp->sharded && !dp->n_excluded)
        cnt = 1;
    dp->shard = calloc(cnt ? cnt : 1, sizeof *dp->shard);
    if (!dp->shard)
        return tr_fail(TR_ERR_NOMEM, "dp: out of memory for %zu shard ranges", cnt);
    if (!dp->sharded && !dp->n_excluded) {
        dp->shard[0] = (tr_dp_shard_range){0, dp->n, 0};
        dp->n_shard = 1;
        dp->shard_numel = dp->n;
        return TR_OK;
    }
    size_t k = 0, pos = 0;
    for (int i = 0; i < dp->nb; i++) {
        if (!dp->b[i].own_count)
            continue;
        dp->b[i].shard_offset = pos;
        dp->shard[k++] = (tr_dp_shard_range){dp->b[i].own_offset, dp->b[i].own_count, pos};
        pos += dp->b[i].own_count;
    }
    dp->n_shard = k;
    dp->shard_numel = pos;
    return TR_OK;
}

int tr_dp_create(const tr_dp_config *cfg, tr_comm *dp_comm, float *grads, float *params,
                 size_t n, tr_dp **out)
{
    if (!out)
        return tr_fail(TR_ERR_INVALID, "dp: out is NULL");
    *out = NULL;
    int D = dp_comm ? tr_comm_size(dp_comm) : 1, d = dp_comm ? tr_comm_rank(dp_comm) : 0;
    int rc = check_config(cfg, n, D, d);
    if (rc)
        return rc;
    if (!grads || !params)
        return tr_fail(TR_ERR_INVALID, "dp: the %s buffer is NULL",
                       !grads ? "gradient" : "parameter");
    tr_dp *dp = calloc(1, sizeof *dp);
    if (!dp)
        return tr_fail(TR_ERR_NOMEM, "dp: out of memory");
    dp->k = cfg->kernels ? cfg->kernels : tr_kernels_cpu();
    dp->comm = D > 1 ? dp_comm : NULL;
    dp->D = D;
    dp->d = d;
    dp->overlap = cfg->overlap_grad_reduce != 0;
    dp->stage = dp_stage(cfg, D);
    dp->sharded = dp->stage >= 1;
    dp->release = cfg->release;
    dp->resident = cfg->resident;
    dp->release_ctx = cfg->release_ctx;
    dp->grads = grads;
    dp->params = params;
    dp->n = n;
    dp->n_aligned = cfg->n_aligned;
    dp->n_excluded = cfg->n_excluded;
    dp->avg = cfg->average_over > 0 ? cfg->average_over : D;
    tr_dp_range *cuts = NULL;
    if ((rc = sorted_aligned(cfg, n, &dp->aligned)) || (rc = sorted_cuts(cfg, n, &cuts)) ||
        (rc = build_buckets(cfg, n, cuts, dp->n_aligned + dp->n_excluded, &dp->b, &dp->nb))) {
        free(cuts);
        tr_dp_free(dp);
        return rc;
    }
    free(cuts);
    assign_blocks(dp->b, dp->nb, dp->sharded, D, d);
    if ((rc = build_shard(dp))) {
        tr_dp_free(dp);
        return rc;
    }
    if ((cfg->distributed_optimizer || cfg->zero_stage) && D == 1)
        tr_info("dp: use_distributed_optimizer with a data-parallel size of 1 has nothing to "
                "shard; the optimizer runs on the whole buffer");
    tr_debug("dp: %zu gradient elements in %d bucket(s), D = %d, %s (ZeRO stage %d), shard %zu "
             "elements", n, dp->nb, D, dp->sharded ? "reduce-scatter" : "all-reduce", dp->stage,
             dp->shard_numel);
    *out = dp;
    return TR_OK;
}

void tr_dp_free(tr_dp *dp)
{
    if (!dp)
        return;
    dp_drain(dp);
    free(dp->b);
    free(dp->shard);
    free(dp->aligned);
    if (dp->scratch)
        dp->k->free(dp->scratch);
    free(dp);
}

int dp_check_range(const tr_dp *dp, size_t offset, size_t count, const char *what, size_t i)
{
    if (offset > dp->n || count > dp->n - offset)
        return tr_fail(TR_ERR_INVALID,
                       "dp: %s %zu [%zu, %zu + %zu) lies outside the gradient buffer of %zu "
                       "elements",
                       what, i, offset, offset, count, dp->n);
    return TR_OK;
}

int tr_dp_size(const tr_dp *dp) { return dp->D; }
int tr_dp_rank(const tr_dp *dp) { return dp->d; }
int tr_dp_sharded(const tr_dp *dp) { return dp->sharded; }
int tr_dp_zero_stage(const tr_dp *dp) { return dp->stage; }
void tr_dp_get_zero_stats(const tr_dp *dp, tr_dp_zero_stats *out) { *out = dp->zs; }
int tr_dp_num_buckets(const tr_dp *dp) { return dp->nb; }
size_t tr_dp_shard_numel(const tr_dp *dp) { return dp->shard_numel; }

int tr_dp_bucket(const tr_dp *dp, int b, tr_dp_bucket_info *out)
{
    if (b < 0 || b >= dp->nb)
        return tr_fail(TR_ERR_INVALID, "dp: bucket %d does not exist (there are %d)", b,
                       dp->nb);
    const dp_bucket *x = &dp->b[b];
    *out = (tr_dp_bucket_info){x->offset, x->count, x->own_offset, x->own_count,
                               x->t_start,  x->t_end, x->by_report};
    return TR_OK;
}

void tr_dp_get_timing(const tr_dp *dp, tr_dp_timing *out) { *out = dp->timing; }
