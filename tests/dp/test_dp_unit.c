/* dp/ units in one process (D = 1: no communicator, or a one-rank world): bucket layout and
 * aligned cuts, the pure layout function, ZeRO-1 with D = 1, the window's readiness
 * counters, and every bad input with its code and message. */
#include "dp/dp.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static void expect_error(int rc, int code, const char *needle)
{
    assert_int_equal(rc, code);
    if (!strstr(tr_errmsg(), needle))
        fail_msg("message '%s' lacks '%s'", tr_errmsg(), needle);
}

static double mb_of(size_t elems) { return (double)elems * 4.0 / 1048576.0; }

static float G[4096], P[4096];

static tr_dp *make(double mb, int overlap, int zero, const tr_dp_range *al, size_t nal,
                   size_t n)
{
    tr_dp_config c = {.bucket_size_mb = mb, .overlap_grad_reduce = overlap,
                      .distributed_optimizer = zero, .aligned = al, .n_aligned = nal};
    tr_dp *dp = NULL;
    if (tr_dp_create(&c, NULL, G, P, n, &dp))
        fail_msg("tr_dp_create: %s", tr_errmsg());
    return dp;
}

static void expect_buckets(tr_dp *dp, const size_t *want, int nwant)
{
    assert_int_equal(tr_dp_num_buckets(dp), nwant);
    size_t off = 0;
    for (int b = 0; b < nwant; b++) {
        tr_dp_bucket_info in;
        assert_int_equal(tr_dp_bucket(dp, b, &in), TR_OK);
        assert_int_equal(in.offset, off);
        assert_int_equal(in.count, want[b]);
        off += want[b];
    }
}

static void test_bucket_layout(void **state)
{
    (void)state;
    tr_dp *dp = make(mb_of(300), 1, 0, NULL, 0, 1000);
    expect_buckets(dp, (size_t[]){300, 300, 300, 100}, 4);
    tr_dp_free(dp);
    tr_dp_range al = {400, 250}; /* cut out [400, 650); pieces counted from their start */
    dp = make(mb_of(300), 1, 0, &al, 1, 1000);
    expect_buckets(dp, (size_t[]){300, 100, 250, 300, 50}, 5);
    tr_dp_free(dp);
    dp = make(0.0, 1, 0, &al, 1, 1000); /* 0 = one bucket per piece */
    expect_buckets(dp, (size_t[]){400, 250, 350}, 3);
    tr_dp_free(dp);
    dp = make(mb_of(300), 0, 0, NULL, 0, 1000); /* overlap off = one bucket */
    expect_buckets(dp, (size_t[]){1000}, 1);
    tr_dp_free(dp);
    dp = make(1e12, 1, 0, NULL, 0, 1000); /* absurdly large: one bucket */
    expect_buckets(dp, (size_t[]){1000}, 1);
    tr_dp_free(dp);
    tr_dp_range two[2] = {{900, 100}, {0, 100}}; /* unsorted, touching both ends */
    dp = make(mb_of(500), 1, 0, two, 2, 1000);
    expect_buckets(dp, (size_t[]){100, 500, 300, 100}, 4);
    tr_dp_free(dp);
}

static void test_bad_bucket_sizes(void **state)
{
    (void)state;
    tr_dp_config c = {.bucket_size_mb = -3, .overlap_grad_reduce = 1};
    tr_dp *dp = NULL;
    expect_error(tr_dp_create(&c, NULL, G, P, 100, &dp), TR_ERR_CONFIG,
                 "parallel.ddp_bucket_size_mb must be a finite number >= 0");
    assert_null(dp);
    c.bucket_size_mb = NAN;
    expect_error(tr_dp_create(&c, NULL, G, P, 100, &dp), TR_ERR_CONFIG, "got nan");
    c.bucket_size_mb = INFINITY;
    expect_error(tr_dp_create(&c, NULL, G, P, 100, &dp), TR_ERR_CONFIG, "got inf");
    c.bucket_size_mb = 1e-9;
    expect_error(tr_dp_create(&c, NULL, G, P, 100, &dp), TR_ERR_CONFIG,
                 "is below one fp32 element");
    c.bucket_size_mb = mb_of(1); /* 1 element per bucket over 100000 elements */
    int nb;
    size_t numel;
    expect_error(tr_dp_layout(&c, 100000, 1, 0, &nb, &numel), TR_ERR_CONFIG,
                 "buckets; at most 65536 are allowed");
    c.bucket_size_mb = mb_of(2); /* 50000 buckets: allowed */
    assert_int_equal(tr_dp_layout(&c, 100000, 1, 0, &nb, &numel), TR_OK);
    assert_int_equal(nb, 50000);
    /* a negative size is refused even when overlap is off */
    c.bucket_size_mb = -1;
    c.overlap_grad_reduce = 0;
    expect_error(tr_dp_layout(&c, 10, 1, 0, &nb, &numel), TR_ERR_CONFIG, "got -1");
}

static void test_bad_create(void **state)
{
    (void)state;
    tr_dp_config c = {.bucket_size_mb = 1, .overlap_grad_reduce = 1};
    tr_dp *dp = NULL;
    expect_error(tr_dp_create(&c, NULL, G, P, 0, &dp), TR_ERR_INVALID, "buffer is empty");
    expect_error(tr_dp_create(&c, NULL, NULL, P, 10, &dp), TR_ERR_INVALID,
                 "the gradient buffer is NULL");
    expect_error(tr_dp_create(&c, NULL, G, NULL, 10, &dp), TR_ERR_INVALID,
                 "the parameter buffer is NULL");
    expect_error(tr_dp_create(NULL, NULL, G, P, 10, &dp), TR_ERR_INVALID, "config is NULL");
    expect_error(tr_dp_create(&c, NULL, G, P, 10, NULL), TR_ERR_INVALID, "out is NULL");
    tr_dp_range bad[2] = {{5, 10}, {0, 3}};
    c.aligned = bad;
    c.n_aligned = 1;
    expect_error(tr_dp_create(&c, NULL, G, P, 10, &dp), TR_ERR_INVALID,
                 "aligned range 0 [5, 5 + 10) is empty or outside the buffer of 10");
    bad[0] = (tr_dp_range){5, 0};
    expect_error(tr_dp_create(&c, NULL, G, P, 10, &dp), TR_ERR_INVALID, "is empty or outside");
    bad[0] = (tr_dp_range){2, 3};
    c.n_aligned = 2;
    expect_error(tr_dp_create(&c, NULL, G, P, 10, &dp), TR_ERR_INVALID,
                 "aligned ranges [0, +3) and [2, +3) overlap");
    c.aligned = NULL;
    expect_error(tr_dp_create(&c, NULL, G, P, 10, &dp), TR_ERR_INVALID,
                 "n_aligned is 2 but aligned is NULL");
    expect_error(tr_dp_layout(&c, 10, 2, 2, NULL, NULL), TR_ERR_INVALID,
                 "rank 2 of a data-parallel size 2 is impossible");
    assert_null(dp);
}

static void test_layout_function(void **state)
{
    (void)state;
    tr_dp_config c = {.bucket_size_mb = mb_of(300), .overlap_grad_reduce = 1,
                      .distributed_optimizer = 1};
    int nb;
    size_t numel;
    assert_int_equal(tr_dp_layout(&c, 1000, 4, 1, &nb, &numel), TR_OK);
    assert_int_equal(nb, 4);
    assert_int_equal(numel, 75 + 75 + 75 + 25);
    assert_int_equal(tr_dp_layout(&c, 1000, 3, 0, &nb, &numel), TR_OK);
    assert_int_equal(numel, 100 + 100 + 100 + 34); /* first block takes the extra element */
    assert_int_equal(tr_dp_layout(&c, 1000, 1, 0, &nb, &numel), TR_OK);
    assert_int_equal(numel, 1000); /* D = 1: nothing to shard */
    c.distributed_optimizer = 0;
    assert_int_equal(tr_dp_layout(&c, 1000, 4, 3, &nb, &numel), TR_OK);
    assert_int_equal(numel, 1000);
    /* GPT-2 124M (padded vocabulary 50304), 25 MiB buckets, D = 8 */
    c = (tr_dp_config){.bucket_size_mb = 25, .overlap_grad_reduce = 1,
                       .distributed_optimizer = 1};
    assert_int_equal(tr_dp_layout(&c, 124475904, 8, 7, &nb, &numel), TR_OK);
    assert_int_equal(nb, 19); /* ceil(124475904 / 6553600) */
    assert_true(numel >= 124475904 / 8 - 19 && numel <= 124475904 / 8 + 19);
}

static void test_zero_with_one_rank(void **state)
{
    (void)state;
    tr_dp *dp = make(mb_of(100), 1, 1, NULL, 0, 1000);
    assert_int_equal(tr_dp_sharded(dp), 0);
    assert_int_equal(tr_dp_size(dp), 1);
    assert_int_equal(tr_dp_rank(dp), 0);
    assert_int_equal(tr_dp_shard_numel(dp), 1000);
    size_t nr = 0;
    const tr_dp_shard_range *r = tr_dp_shard_ranges(dp, &nr);
    assert_int_equal(nr, 1);
    assert_int_equal(r[0].offset, 0);
    assert_int_equal(r[0].count, 1000);
    assert_int_equal(tr_dp_gather_params_start(dp), TR_OK); /* no-op */
    assert_int_equal(tr_dp_gather_params_wait(dp), TR_OK);
    assert_int_equal(tr_dp_gather_params_wait_range(dp, 10, 20), TR_OK);
    tr_dp_free(dp);
}

static void test_window(void **state)
{
    (void)state;
    tr_dp *dp = make(mb_of(100), 1, 0, NULL, 0, 1000);
    for (int i = 0; i < 1000; i++)
        G[i] = (float)i;
    assert_int_equal(tr_dp_progress(dp), TR_OK); /* no window: nothing to do */
    assert_int_equal(tr_dp_start(dp, 2), TR_OK);
    assert_int_equal(tr_dp_progress(dp), TR_OK);
    /* micro-batch 0 then 1, each in two straddling reports */
    for (int m = 0; m < 2; m++) {
        assert_int_equal(tr_dp_report(dp, 0, 150), TR_OK);
        tr_dp_bucket_info b;
        assert_int_equal(tr_dp_bucket(dp, 0, &b), TR_OK);
        assert_true(m == 0 ? b.t_start == 0 : b.t_start > 0); /* skip-sync: ready on m=1 */
        tr_dp_grad_ready(dp, 150, 850);
    }
    tr_dp_timing t;
    tr_dp_get_timing(dp, &t);
    assert_int_equal(t.buckets_started_by_report, 10);
    assert_int_equal(tr_dp_finish(dp), TR_OK);
    for (int i = 0; i < 1000; i++) /* D = 1: untouched */
        assert_true(G[i] == (float)i);
    tr_dp_get_timing(dp, &t);
    assert_true(t.t_finish_end >= t.t_finish_begin && t.exposed_s >= 0);
    for (int b = 0; b < 10; b++) {
        tr_dp_bucket_info in;
        assert_int_equal(tr_dp_bucket(dp, b, &in), TR_OK);
        assert_true(in.started_by_report && in.t_end >= in.t_start && in.t_start > 0);
    }
    /* no reports at all: finish starts every bucket */
    assert_int_equal(tr_dp_start(dp, 3), TR_OK);
    assert_int_equal(tr_dp_finish(dp), TR_OK);
    tr_dp_get_timing(dp, &t);
    assert_int_equal(t.buckets_started_by_report, 0);
    /* partial reports: a warning, still finishes */
    assert_int_equal(tr_dp_start(dp, 1), TR_OK);
    assert_int_equal(tr_dp_report(dp, 0, 50), TR_OK);
    assert_int_equal(tr_dp_finish(dp), TR_OK);
    tr_dp_free(dp);
}

static void test_window_errors(void **state)
{
    (void)state;
    tr_dp *dp = make(mb_of(100), 1, 0, NULL, 0, 1000);
    expect_error(tr_dp_finish(dp), TR_ERR_INVALID, "without an open accumulation window");
    expect_error(tr_dp_start(dp, 0), TR_ERR_INVALID, "needs >= 1 micro-batch, got 0");
    expect_error(tr_dp_report(dp, 0, 10), TR_ERR_INVALID,
                 "reported outside an accumulation window");
    /* that error is kept until a finish returns it */
    expect_error(tr_dp_finish(dp), TR_ERR_INVALID, "reported outside an accumulation window");
    assert_int_equal(tr_dp_start(dp, 1), TR_OK);
    expect_error(tr_dp_start(dp, 1), TR_ERR_INVALID, "called again before tr_dp_finish");
    double norm;
    expect_error(tr_dp_grad_norm(dp, NULL, 0, NULL, &norm), TR_ERR_INVALID,
                 "while an accumulation window is open");
    expect_error(tr_dp_finalize_grads(dp, NULL, NULL, 0, NULL, NULL, 0), TR_ERR_INVALID,
                 "while an accumulation window is open");
    /* twice the same range in a one-micro-batch window, through the hook */
    tr_dp_grad_ready(dp, 0, 100);
    tr_dp_grad_ready(dp, 50, 20);
    expect_error(tr_dp_report(dp, 500, 10), TR_ERR_INVALID, "got more than 1 micro-batch");
    expect_error(tr_dp_progress(dp), TR_ERR_INVALID, "got more than 1 micro-batch");
    expect_error(tr_dp_finish(dp), TR_ERR_INVALID,
                 "bucket 0 [0, +100) got more than 1 micro-batch(es) worth of reports");
    /* the next window is clean */
    assert_int_equal(tr_dp_start(dp, 1), TR_OK);
    expect_error(tr_dp_report(dp, 990, 11), TR_ERR_INVALID,
                 "reported range 0 [990, 990 + 11) lies outside the gradient buffer of 1000");
    expect_error(tr_dp_finish(dp), TR_ERR_INVALID, "lies outside the gradient buffer");
    assert_int_equal(tr_dp_start(dp, 1), TR_OK);
    assert_int_equal(tr_dp_report(dp, 0, 0), TR_OK); /* empty report: nothing */
    assert_int_equal(tr_dp_finish(dp), TR_OK);
    tr_dp_bucket_info in;
    expect_error(tr_dp_bucket(dp, 10, &in), TR_ERR_INVALID, "bucket 10 does not exist");
    expect_error(tr_dp_bucket(dp, -1, &in), TR_ERR_INVALID, "bucket -1 does not exist");
    tr_dp_free(dp);
}

static void piece(void *ctx, size_t off, size_t cnt, size_t so);

/* Excluded ranges (expert parallelism's two instances on one buffer): no bucket covers them,
 * reports into them are ignored, the shard, the norm and shard_foreach leave them out;
 * average_over scales at D = 1 too; bad lists refused. */
static void test_excluded(void **state)
{
    (void)state;
    tr_dp_range x[2] = {{600, 100}, {200, 100}}, al = {0, 50};
    tr_dp_config c = {.bucket_size_mb = mb_of(150), .overlap_grad_reduce = 1, .aligned = &al,
                      .n_aligned = 1, .excluded = x, .n_excluded = 2, .average_over = 4};
    tr_dp *dp = NULL;
    assert_int_equal(tr_dp_create(&c, NULL, G, P, 1000, &dp), TR_OK);
    size_t want[][2] = {{0, 50}, {50, 150}, {300, 150}, {450, 150}, {700, 150}, {850, 150}};
    assert_int_equal(tr_dp_num_buckets(dp), 6);
    for (int b = 0; b < 6; b++) {
        tr_dp_bucket_info in;
        assert_int_equal(tr_dp_bucket(dp, b, &in), TR_OK);
        assert_true(in.offset == want[b][0] && in.count == want[b][1]);
    }
    size_t n_shard, numel;
    const tr_dp_shard_range *sh = tr_dp_shard_ranges(dp, &n_shard);
    assert_int_equal(n_shard, 6);
    assert_int_equal(tr_dp_shard_numel(dp), 800);
    assert_true(sh[2].offset == 300 && sh[2].shard_offset == 200);
    int nb;
    assert_int_equal(tr_dp_layout(&c, 1000, 1, 0, &nb, &numel), TR_OK);
    assert_true(nb == 6 && numel == 800);
    for (int i = 0; i < 1000; i++)
        G[i] = 2.0f;
    assert_int_equal(tr_dp_start(dp, 1), TR_OK);
    assert_int_equal(tr_dp_report(dp, 150, 700), TR_OK); /* straddles both excluded ranges */
    assert_int_equal(tr_dp_report(dp, 0, 150), TR_OK);
    assert_int_equal(tr_dp_report(dp, 610, 20), TR_OK);  /* inside one: ignored */
    assert_int_equal(tr_dp_report(dp, 850, 150), TR_OK);
    tr_dp_timing t;
    tr_dp_get_timing(dp, &t);
    assert_int_equal(t.buckets_started_by_report, 6); /* every bucket complete */
    assert_int_equal(tr_dp_finish(dp), TR_OK);
    for (int i = 0; i < 1000; i++) /* 1 / average_over on its own ranges only */
        assert_true(G[i] == ((i >= 200 && i < 300) || (i >= 600 && i < 700) ? 2.0f : 0.5f));
    double norm;
    tr_dp_range r = {150, 200}; /* [150, 200) and [300, 350): 100 of 0.5 */
    assert_int_equal(tr_dp_grad_norm(dp, &r, 1, NULL, &norm), TR_OK);
    assert_true(norm == 5.0);
    size_t got[4] = {0};
    assert_int_equal(tr_dp_shard_foreach(dp, 610, 20, piece, got), TR_OK);
    assert_int_equal(got[0], 0);
    tr_dp_free(dp);
    tr_dp_range bad[2] = {{0, 20}, {10, 5}};
    c.excluded = bad;
    expect_error(tr_dp_create(&c, NULL, G, P, 1000, &dp), TR_ERR_INVALID,
                 "excluded ranges [0, +20) and [10, +5) overlap");
    c.excluded = &al; /* the aligned range itself */
    c.n_excluded = 1;
    expect_error(tr_dp_create(&c, NULL, G, P, 1000, &dp), TR_ERR_INVALID,
                 "aligned or excluded ranges [0, +50) and [0, +50) overlap");
    c.excluded = NULL;
    expect_error(tr_dp_create(&c, NULL, G, P, 1000, &dp), TR_ERR_INVALID,
                 "n_excluded is 1 but excluded is NULL");
    c.n_excluded = 0;
    c.average_over = -1;
    expect_error(tr_dp_create(&c, NULL, G, P, 1000, &dp), TR_ERR_INVALID, "average_over -1");
}

static void piece(void *ctx, size_t off, size_t cnt, size_t so)
{
    size_t *s = ctx;
    s[0]++;
    s[1] = off;
    s[2] = cnt;
    s[3] = so;
}

static void test_norm_finalize_shard(void **state)
{
    (void)state;
    tr_dp *dp = make(mb_of(64), 1, 0, NULL, 0, 1000);
    for (int i = 0; i < 1000; i++)
        G[i] = (float)(i % 5) - 2.0f;
    double norm = 0, want = 0;
    for (int i = 100; i < 400; i++)
        want += (double)G[i] * G[i];
    tr_dp_range r[2] = {{100, 200}, {300, 100}};
    assert_int_equal(tr_dp_grad_norm(dp, r, 2, NULL, &norm), TR_OK);
    assert_true(norm == sqrt(want));
    tr_dp_range out = {999, 2};
    expect_error(tr_dp_grad_norm(dp, &out, 1, NULL, &norm), TR_ERR_INVALID,
                 "norm range 0 [999, 999 + 2) lies outside");
    expect_error(tr_dp_grad_norm(dp, NULL, 1, NULL, &norm), TR_ERR_INVALID,
                 "1 norm range given but the list is NULL");
    assert_int_equal(tr_dp_finalize_grads(dp, NULL, NULL, 0, NULL, NULL, 0), TR_OK);

    tr_comm *one = NULL; /* a one-rank group: nothing to add, no collective */
    unsetenv("WORLD_SIZE");
    unsetenv("MASTER_ADDR");
    assert_int_equal(tr_comm_init_world(NULL, &one), TR_OK);
    expect_error(tr_dp_finalize_grads(dp, one, &out, 1, NULL, NULL, 0), TR_ERR_INVALID,
                 "tp range 0 [999, 999 + 2) lies outside");
    expect_error(tr_dp_finalize_grads(dp, NULL, NULL, 0, one, &out, 1), TR_ERR_INVALID,
                 "embedding range 0");
    assert_int_equal(tr_dp_finalize_grads(dp, one, r, 2, one, r, 1), TR_OK);
    assert_int_equal(tr_dp_grad_norm(dp, r, 2, one, &norm), TR_OK);
    assert_true(norm == sqrt(want));
    tr_comm_counters k;
    tr_comm_get_counters(one, &k);
    assert_int_equal(k.ops[TR_COMM_OP_ALLREDUCE], 0);

    /* a DP group of one rank: no collective either */
    tr_dp_config c = {.bucket_size_mb = mb_of(64), .overlap_grad_reduce = 1,
                      .distributed_optimizer = 1};
    tr_dp *d1 = NULL;
    assert_int_equal(tr_dp_create(&c, one, G, P, 1000, &d1), TR_OK);
    assert_int_equal(tr_dp_sharded(d1), 0);
    assert_int_equal(tr_dp_start(d1, 2), TR_OK);
    for (int m = 0; m < 2; m++)
        tr_dp_grad_ready(d1, 0, 1000);
    assert_int_equal(tr_dp_finish(d1), TR_OK);
    tr_comm_get_counters(one, &k);
    for (int i = 0; i < TR_COMM_NOPKINDS; i++)
        assert_int_equal(k.ops[i], 0);
    tr_dp_free(d1);
    tr_comm_destroy(one);

    /* shard pieces of a range (whole buffer without ZeRO-1: shard offset = offset) */
    size_t seen[4] = {0};
    assert_int_equal(tr_dp_shard_foreach(dp, 10, 30, piece, seen), TR_OK);
    assert_int_equal(seen[0], 1);
    assert_int_equal(seen[1], 10);
    assert_int_equal(seen[2], 30);
    assert_int_equal(seen[3], 10);
    expect_error(tr_dp_shard_foreach(dp, 10, 30, NULL, NULL), TR_ERR_INVALID,
                 "needs a function");
    expect_error(tr_dp_shard_foreach(dp, 1001, 0, piece, seen), TR_ERR_INVALID,
                 "lies outside");
    tr_dp_free(dp);
}

static void test_clip_and_config(void **state)
{
    (void)state;
    assert_true(tr_dp_clip_factor(0.5, 1.0) == 1.0f);
    assert_true(tr_dp_clip_factor(4.0, 1.0) == (float)(1.0 / (4.0 + 1e-6)));
    assert_true(tr_dp_clip_factor(4.0, 0.0) == 1.0f); /* clipping off */
    assert_true(tr_dp_clip_factor(NAN, 1.0) == 1.0f);
    tr_parallel_config p = {0};
    p.ddp_bucket_size_mb = 7;
    p.overlap_grad_reduce = 0;
    p.use_distributed_optimizer = 1;
    tr_dp_config c = tr_dp_config_from_parallel(&p);
    assert_true(c.bucket_size_mb == 7 && !c.overlap_grad_reduce && c.distributed_optimizer);
    assert_null(c.aligned);
    tr_dp_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bucket_layout),   cmocka_unit_test(test_bad_bucket_sizes),
        cmocka_unit_test(test_bad_create),      cmocka_unit_test(test_layout_function),
        cmocka_unit_test(test_zero_with_one_rank), cmocka_unit_test(test_window),
        cmocka_unit_test(test_window_errors),   cmocka_unit_test(test_norm_finalize_shard),
        cmocka_unit_test(test_clip_and_config), cmocka_unit_test(test_excluded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
