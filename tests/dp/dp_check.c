/* Multi-process checks of dp/ (run as D ranks by `trident launch --nproc D`, D = 1, 2, 4):
 *  - averaged buckets equal the serial average, for many bucket sizes, aligned cuts, report
 *    orders (front to back, rank-dependent shuffles, no reports at all), M micro-batches,
 *    all-reduce and ZeRO-1, overlap on and off; two windows in a row;
 *  - skip-sync: DP collectives per iteration == number of buckets (0 when D = 1), for M = 1
 *    and M = 3 (comm counters);
 *  - ZeRO-1 shards cover the buffer exactly once across the DP ranks, compactly numbered,
 *    and agree with tr_dp_layout();
 *  - reduce-scatter + shard update + all-gather == all-reduce + full update (toy momentum
 *    optimizer with per-tensor weight decay), bit for bit over several steps;
 *  - two instances on one buffer (excluded ranges, average_over: expert parallelism's), at
 *    ZeRO stages 0-3;
 *  - dp_check_groups.c: grad norm and finalize over TP / embedding groups;
 *  - dp_check_overlap.c: bucket timestamps of a synthetic backward.
 *   dp_check [--progress-thread] [--no-overlap-check]
 * Exit 0 when everything matched. */
#include "dp_check.h"

#include <string.h>

float gval(int who, int m, size_t i, int salt)
{
    unsigned v = (unsigned)(who * 31 + m * 17 + salt * 5) + (unsigned)(i % 100003) * 7u;
    return (float)((int)(v % 23u) - 11) / 8.0f;
}

void make_tensors(size_t n, int nt, unsigned seed, size_t *bounds)
{
    /* nt - 1 distinct cut points from a fixed LCG; sorted. */
    bounds[0] = 0;
    bounds[nt] = n;
    unsigned s = seed * 2654435761u + 12345u;
    for (int t = 1; t < nt; t++) {
        for (;;) {
            s = s * 1103515245u + 12345u;
            size_t c = 1 + (size_t)(s >> 8) % (n - 1);
            int dup = 0;
            for (int u = 1; u < t; u++)
                dup |= bounds[u] == c;
            if (!dup) {
                bounds[t] = c;
                break;
            }
        }
    }
    for (int a = 1; a < nt; a++) /* insertion sort of bounds[1..nt-1] */
        for (int b = a; b > 1 && bounds[b - 1] > bounds[b]; b--) {
            size_t x = bounds[b];
            bounds[b] = bounds[b - 1];
            bounds[b - 1] = x;
        }
}

double mb_of(size_t elems) { return (double)elems * 4.0 / 1048576.0; }

void run_window(tr_dp *dp, float *grads, const size_t *bounds, int nt, const int *order, int M,
                int who, int salt, int report)
{
    OK(tr_dp_start(dp, M));
    for (int m = 0; m < M; m++)
        for (int k = 0; k < nt; k++) {
            int t = order ? order[k] : k;
            for (size_t i = bounds[t]; i < bounds[t + 1]; i++)
                grads[i] += gval(who, m, i, salt);
            if (report)
                tr_dp_grad_ready(dp, bounds[t], bounds[t + 1] - bounds[t]);
        }
    OK(tr_dp_finish(dp));
}

static uint64_t dp_collectives(tr_comm *c)
{
    tr_comm_counters k;
    tr_comm_get_counters(c, &k);
    uint64_t total = 0;
    for (int i = 0; i < TR_COMM_NOPKINDS; i++)
        total += k.ops[i];
    return total;
}

/* Averages and skip-sync over one configuration. */
static void check_average(tr_comm *dpc, const tr_dp_config *cfg, size_t n, int nt, int M,
                          int order_kind, int salt)
{
    int D = tr_comm_size(dpc), d = tr_comm_rank(dpc);
    float *g = calloc(n, sizeof *g), *p = calloc(n, sizeof *p);
    size_t *bounds = malloc((size_t)(nt + 1) * sizeof *bounds);
    int *order = malloc((size_t)nt * sizeof *order);
    make_tensors(n, nt, (unsigned)salt, bounds);
    for (int k = 0; k < nt; k++) /* 1: reversed on odd ranks, rotated by the rank on even */
        order[k] = order_kind == 1 ? ((d & 1) ? nt - 1 - k : (k + d) % nt) : k;
    tr_dp *dp = NULL;
    OK(tr_dp_create(cfg, dpc, g, p, n, &dp));
    int nb = tr_dp_num_buckets(dp);
    for (int iter = 0; iter < 2; iter++) {
        memset(g, 0, n * sizeof *g);
        tr_comm_reset_counters(dpc);
        run_window(dp, g, bounds, nt, order_kind == 1 ? order : NULL, M, d, salt + iter,
                   order_kind != 2);
        uint64_t ops = dp_collectives(dpc);
        CHECK(ops == (D > 1 ? (uint64_t)nb : 0),
              "skip-sync: %llu DP collectives in a window of %d micro-batches, %d buckets",
              (unsigned long long)ops, M, nb);
        size_t nsh = 0, bad = 0;
        const tr_dp_shard_range *sh = tr_dp_shard_ranges(dp, &nsh);
        for (size_t k = 0; k < nsh; k++)
            for (size_t i = sh[k].offset; i < sh[k].offset + sh[k].count; i++) {
                float want = 0;
                for (int r = 0; r < D; r++)
                    for (int m = 0; m < M; m++)
                        want += gval(r, m, i, salt + iter);
                want /= (float)D;
                if (g[i] != want && bad++ < 3)
                    CHECK(0, "element %zu: %g, serial average %g (D %d, M %d, %d buckets, "
                             "zero %d, overlap %d, order %d)",
                          i, g[i], want, D, M, nb, cfg->distributed_optimizer,
                          cfg->overlap_grad_reduce, order_kind);
            }
        tr_dp_timing tm;
        tr_dp_get_timing(dp, &tm);
        if (cfg->overlap_grad_reduce && order_kind == 0)
            CHECK(tm.buckets_started_by_report == nb,
                  "%d of %d buckets started by reports (front-to-back order)",
                  tm.buckets_started_by_report, nb);
        if (order_kind == 2 || !cfg->overlap_grad_reduce)
            CHECK(tm.buckets_started_by_report == 0, "%d buckets started without reports",
                  tm.buckets_started_by_report);
    }
    tr_dp_free(dp);
    free(order);
    free(bounds);
    free(g);
    free(p);
}

/* Shards of every rank cover [0, n) exactly once; compact offsets; tr_dp_layout agrees. */
static void check_cover(tr_comm *dpc, const tr_dp_config *cfg, size_t n)
{
    int D = tr_comm_size(dpc), d = tr_comm_rank(dpc);
    float *g = calloc(n, sizeof *g), *p = calloc(n, sizeof *p);
    int32_t *cov = calloc(n, sizeof *cov);
    tr_dp *dp = NULL;
    OK(tr_dp_create(cfg, dpc, g, p, n, &dp));
    size_t nsh = 0, pos = 0;
    const tr_dp_shard_range *sh = tr_dp_shard_ranges(dp, &nsh);
    for (size_t k = 0; k < nsh; k++) {
        CHECK(sh[k].shard_offset == pos, "shard range %zu at compact offset %zu, want %zu", k,
              sh[k].shard_offset, pos);
        CHECK(k == 0 || sh[k].offset >= sh[k - 1].offset + sh[k - 1].count,
              "shard ranges out of order");
        for (size_t i = sh[k].offset; i < sh[k].offset + sh[k].count; i++)
            cov[i]++;
        pos += sh[k].count;
    }
    CHECK(pos == tr_dp_shard_numel(dp), "shard numel %zu, ranges add to %zu",
          tr_dp_shard_numel(dp), pos);
    int nb = 0;
    size_t numel = 0;
    OK(tr_dp_layout(cfg, n, D, d, &nb, &numel));
    CHECK(nb == tr_dp_num_buckets(dp) && numel == tr_dp_shard_numel(dp),
          "tr_dp_layout: %d buckets / %zu elements, object %d / %zu", nb, numel,
          tr_dp_num_buckets(dp), tr_dp_shard_numel(dp));
    OK(tr_comm_allreduce(dpc, cov, cov, n, TR_COMM_I32, TR_COMM_SUM));
    int32_t want = tr_dp_sharded(dp) ? 1 : D;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        if (cov[i] != want && bad++ < 3)
            CHECK(0, "element %zu covered %d times across %d ranks (want %d)", i, cov[i], D,
                  want);
    if (tr_dp_sharded(dp) && D > 1)
        CHECK(numel <= n / (size_t)D + (size_t)nb, "shard of %zu elements of %zu over %d", numel,
              n, D);
    tr_dp_free(dp);
    free(cov);
    free(g);
    free(p);
}

/* Toy optimizer with momentum and per-tensor weight decay, one step on [off, off + cnt). */
typedef struct {
    float *p, *g, *mom;
    float wd;
} toy_ctx;

static void toy_update(void *ctx, size_t off, size_t cnt, size_t shard_off)
{
    toy_ctx *c = ctx;
    for (size_t j = 0; j < cnt; j++) {
        float *m = &c->mom[shard_off + j];
        *m = 0.5f * *m + c->g[off + j];
        c->p[off + j] -= 0.25f * (*m + c->wd * c->p[off + j]);
    }
}

static void check_zero_step(tr_comm *dpc, size_t n, int nt, double bucket_mb)
{
    int d = tr_comm_rank(dpc);
    float *ga = calloc(n, 4), *pa = calloc(n, 4), *gz = calloc(n, 4), *pz = calloc(n, 4);
    size_t *bounds = malloc((size_t)(nt + 1) * sizeof *bounds);
    make_tensors(n, nt, 77, bounds);
    for (size_t i = 0; i < n; i++)
        pa[i] = pz[i] = gval(99, 0, i, 3);
    tr_dp_config ca = {.bucket_size_mb = bucket_mb, .overlap_grad_reduce = 1};
    tr_dp_config cz = ca;
    cz.distributed_optimizer = 1;
    tr_dp *da = NULL, *dz = NULL;
    OK(tr_dp_create(&ca, dpc, ga, pa, n, &da));
    OK(tr_dp_create(&cz, dpc, gz, pz, n, &dz));
    float *ma = calloc(n, 4), *mz = calloc(tr_dp_shard_numel(dz) + 1, 4);
    for (int step = 0; step < 3; step++) {
        memset(ga, 0, n * 4);
        memset(gz, 0, n * 4);
        run_window(da, ga, bounds, nt, NULL, 2, d, step, 1);
        run_window(dz, gz, bounds, nt, NULL, 2, d, step, 1);
        for (int t = 0; t < nt; t++) {
            toy_ctx a = {pa, ga, ma, (t % 2) * 0.125f}, z = {pz, gz, mz, (t % 2) * 0.125f};
            toy_update(&a, bounds[t], bounds[t + 1] - bounds[t], bounds[t]);
            OK(tr_dp_shard_foreach(dz, bounds[t], bounds[t + 1] - bounds[t], toy_update, &z));
        }
        OK(tr_dp_gather_params_start(dz));
        if (step == 1) { /* wait tensor by tensor, last first, as a forward would */
            for (int t = nt - 1; t >= 0; t--)
                OK(tr_dp_gather_params_wait_range(dz, bounds[t], bounds[t + 1] - bounds[t]));
        }
        OK(tr_dp_gather_params_wait(dz));
        CHECK(memcmp(pa, pz, n * 4) == 0,
              "step %d: ZeRO-1 parameters differ from the all-reduce path", step);
    }
    CHECK(!tr_dp_sharded(dz) || tr_comm_size(dpc) == 1 || tr_dp_shard_numel(dz) < n,
          "ZeRO-1 shard is not smaller than the buffer");
    tr_dp_free(da);
    tr_dp_free(dz);
    free(ma);
    free(mz);
    free(bounds);
    free(ga);
    free(pa);
    free(gz);
    free(pz);
}

/* Two instances on one buffer (expert parallelism's): dp excluding X, xdp excluding the rest
 * with average_over 2 D. After one window each element is its instance's average on this
 * rank's shards, and the shards of both instances over every rank cover each element once
 * (ZeRO-1) or D times; at stage 3 a range starting in an excluded gap gathers only the
 * buckets inside it. */
static void check_excluded(tr_comm *dpc, int zero)
{
    enum { N = 10007, NT = 9 };
    int D = tr_comm_size(dpc), d = tr_comm_rank(dpc);
    tr_dp_range x[2] = {{1000, 500}, {6000, 2000}}, rest[3] = {{0, 1000}, {1500, 4500},
                                                               {8000, N - 8000}};
    tr_dp_config c = {.bucket_size_mb = mb_of(300), .overlap_grad_reduce = 1,
                      .zero_stage = zero, .excluded = x, .n_excluded = 2};
    tr_dp_config cx = c;
    cx.excluded = rest;
    cx.n_excluded = 3;
    cx.average_over = 2 * D;
    float *g = calloc(N, sizeof *g), *p = calloc(N, sizeof *p), *sg = NULL, *sp = NULL;
    int32_t *cov = calloc(N, sizeof *cov);
    size_t bounds[NT + 1];
    make_tensors(N, NT, 5, bounds);
    tr_dp *dp[2] = {NULL, NULL};
    OK(tr_dp_create(&c, dpc, g, p, N, &dp[0]));
    OK(tr_dp_create(&cx, dpc, g, p, N, &dp[1]));
    size_t s0 = tr_dp_shard_numel(dp[0]), s1 = tr_dp_shard_numel(dp[1]);
    sg = calloc(s0 + s1 + 1, sizeof *sg);
    sp = calloc(s0 + s1 + 1, sizeof *sp);
    OK(tr_dp_set_shards(dp[0], sg, sp));
    OK(tr_dp_set_shards(dp[1], sg + s0, sp + s0));
    for (int k = 0; k < 2; k++)
        OK(tr_dp_start(dp[k], 1));
    for (int t = 0; t < NT; t++) {
        for (size_t i = bounds[t]; i < bounds[t + 1]; i++)
            g[i] = gval(d, 0, i, 7);
        for (int k = 0; k < 2; k++)
            tr_dp_grad_ready(dp[k], bounds[t], bounds[t + 1] - bounds[t]);
    }
    size_t bad = 0;
    for (int k = 0; k < 2; k++) {
        OK(tr_dp_finish(dp[k]));
        size_t nsh = 0;
        const tr_dp_shard_range *sh = tr_dp_shard_ranges(dp[k], &nsh);
        float *own = tr_dp_shard_grads(dp[k]);
        for (size_t j = 0; j < nsh; j++)
            for (size_t i = sh[j].offset; i < sh[j].offset + sh[j].count; i++) {
                int in_x = (i >= 1000 && i < 1500) || (i >= 6000 && i < 8000);
                float want = 0, got = own ? own[sh[j].shard_offset + i - sh[j].offset] : g[i];
                for (int r = 0; r < D; r++)
                    want += gval(r, 0, i, 7);
                want /= (float)(k ? 2 * D : D);
                cov[i]++;
                if ((in_x != k || got != want) && bad++ < 3)
                    CHECK(0, "instance %d, element %zu: %g, want %g (zero %d, D %d)", k, i,
                          got, want, zero, D);
            }
    }
    OK(tr_comm_allreduce(dpc, cov, cov, N, TR_COMM_I32, TR_COMM_SUM));
    for (size_t i = 0; i < N; i++)
        if (cov[i] != (tr_dp_sharded(dp[0]) ? 1 : D) && bad++ < 3)
            CHECK(0, "element %zu covered %d times (zero %d, D %d)", i, cov[i], zero, D);
    if (tr_dp_zero_stage(dp[1]) == 3) { /* [5990, +20): dp's last bucket before X's second
                                         * range, xdp's first bucket of it */
        tr_dp_zero_stats zs;
        OK(tr_dp_params_need(dp[1], 5990, 20));
        tr_dp_get_zero_stats(dp[1], &zs);
        CHECK(zs.gathers == 1, "xdp gathered %ld buckets for [5990, +20), want 1", zs.gathers);
        OK(tr_dp_params_release_all(dp[1]));
    }
    for (int k = 0; k < 2; k++)
        tr_dp_free(dp[k]);
    free(cov);
    free(sg);
    free(sp);
    free(g);
    free(p);
}

void check_dp(tr_comm *world)
{
    const size_t n = 10007;
    tr_dp_range al[2] = {{3000, 2500}, {9000, 1007}};
    const double sizes[] = {0.0, mb_of(97), mb_of(1500), 1e9};
    int salt = 0;
    for (int z = 0; z <= 1; z++)
        for (int ov = 0; ov <= 1; ov++)
            for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
                for (int a = 0; a <= 1; a++) {
                    tr_dp_config c = {.bucket_size_mb = sizes[s],
                                      .overlap_grad_reduce = ov,
                                      .distributed_optimizer = z,
                                      .aligned = a ? al : NULL,
                                      .n_aligned = a ? 2 : 0};
                    check_cover(world, &c, n);
                    for (int order = 0; order < 3; order++)
                        for (int M = 1; M <= 3; M += 2)
                            check_average(world, &c, n, 13, M, order, salt++);
                }
    /* a bucket smaller than the rank count, and more ranks' blocks than elements */
    tr_dp_config tiny = {.bucket_size_mb = mb_of(3), .overlap_grad_reduce = 1,
                         .distributed_optimizer = 1};
    check_cover(world, &tiny, 37);
    check_average(world, &tiny, 37, 5, 2, 0, salt++);
    check_zero_step(world, n, 11, mb_of(1000));
    check_zero_step(world, n, 11, 0.0);
    check_zero_step(world, 5, 2, mb_of(2));
    for (int zero = 0; zero <= 3; zero++)
        check_excluded(world, zero);
}

int main(int argc, char **argv)
{
    int progress_thread = 0, overlap = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--progress-thread"))
            progress_thread = 1;
        else if (!strcmp(argv[i], "--no-overlap-check"))
            overlap = 0;
        else {
            fprintf(stderr, "usage: dp_check [--progress-thread] [--no-overlap-check]\n");
            return 2;
        }
    }
    tr_comm *world = tc_world(60, progress_thread);
    check_dp(world);
    check_groups(world);
    if (overlap)
        check_overlap(world, progress_thread);
    int total = tc_job_failures(world), size = tr_comm_size(world);
    tr_comm_destroy(world);
    if (tc_rank == 0)
        printf("dp_check: %d ranks, progress thread %s: %s\n", size,
               progress_thread ? "on" : "off", total ? "FAILED" : "all checks passed");
    return total ? 1 : 0;
}
