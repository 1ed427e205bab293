/* Multi-process check of every collective against a serial reference (run as N ranks by
 * `trident launch`). On the world and on split groups (half, third, odd), for counts 0, 1, 7,
 * 1000, in-place and out-of-place, with the default algorithm choice, with the ring forced
 * onto small messages and with recursive halving forced; the count 1<<20 + 3 (every
 * collective in-place and out-of-place; broadcast, which has one buffer, from two roots) on
 * the world and every split group with --big, on the world only with --big-world; then
 * several async operations in flight on different groups at once, ordered requests
 * (tr_comm_order_after + tr_comm_flush), and the counters. tr_comm_alltoallv with uneven
 * and zero per-pair counts (small, and past the eager limit) on every group.
 *   coll_check [--big | --big-world] [--timeout S] [--progress-thread]
 * Data are small integers so fp32 sums are exact and results compare bit for bit; one
 * random-float allreduce compares with a tolerance. Exit 0 when everything matched. */
#include "comm/comm.h"
#include "tests/common/check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int world_rank;

static int expect_reduced(const char *what, tr_comm *c, const void *got, tr_comm_dtype dt,
                          size_t first, size_t n, int salt, tr_comm_redop op)
{
    for (size_t k = 0; k < n; k++) {
        double want = tc_data_reduce(tr_comm_size(c), first + k, salt, op);
        double have = tc_data_get(got, dt, k);
        if (have != want) {
            CHECK(0, "%s on '%s' (size %d): element %zu is %g, expected %g", what,
                  tr_comm_name(c), tr_comm_size(c), first + k, have, want);
            return 0;
        }
    }
    return 1;
}

static int expect_inputs(const char *what, tr_comm *c, const void *got, tr_comm_dtype dt,
                         size_t count, int salt)
{
    int n = tr_comm_size(c);
    for (int r = 0; r < n; r++) {
        size_t off, len;
        tr_comm_block(count, n, r, &off, &len);
        for (size_t k = 0; k < len; k++) {
            double want = tc_data_val(r, off + k, salt), have = tc_data_get(got, dt, off + k);
            if (have != want) {
                CHECK(0, "%s on '%s' (size %d): element %zu (from rank %d) is %g, expected %g",
                      what, tr_comm_name(c), n, off + k, r, have, want);
                return 0;
            }
        }
    }
    return 1;
}

static size_t expected_ops[TR_COMM_NOPKINDS];

static void check_allreduce(tr_comm *c, size_t count, tr_comm_dtype dt, tr_comm_redop op,
                            int in_place, int salt)
{
    size_t es = tr_comm_dtype_size(dt);
    void *a = malloc(count * es + 8), *b = malloc(count * es + 8);
    tc_data_fill(a, dt, count, tr_comm_rank(c), salt);
    char what[96];
    snprintf(what, sizeof what, "allreduce(count %zu, dtype %d, op %d, %s)", count, dt, op,
             in_place ? "in-place" : "out-of-place");
    OK(tr_comm_allreduce(c, a, in_place ? a : b, count, dt, op));
    expected_ops[TR_COMM_OP_ALLREDUCE]++;
    expect_reduced(what, c, in_place ? a : b, dt, 0, count, salt, op);
    if (!in_place) { /* the input is untouched */
        void *orig = malloc(count * es + 8);
        tc_data_fill(orig, dt, count, tr_comm_rank(c), salt);
        CHECK(!memcmp(orig, a, count * es), "%s modified its send buffer", what);
        free(orig);
    }
    free(a);
    free(b);
}

static void check_reduce_scatter(tr_comm *c, size_t count, tr_comm_dtype dt, tr_comm_redop op,
                                 int in_place, int salt)
{
    size_t es = tr_comm_dtype_size(dt), off, len;
    tr_comm_block(count, tr_comm_size(c), tr_comm_rank(c), &off, &len);
    uint8_t *a = malloc(count * es + 8), *b = malloc(len * es + 8);
    tc_data_fill(a, dt, count, tr_comm_rank(c), salt);
    char what[96];
    snprintf(what, sizeof what, "reduce_scatter(count %zu, dtype %d, op %d, %s)", count, dt, op,
             in_place ? "in-place" : "out-of-place");
    void *out = in_place ? a + off * es : b;
    OK(tr_comm_reduce_scatter(c, a, out, count, dt, op));
    expected_ops[TR_COMM_OP_REDUCE_SCATTER]++;
    expect_reduced(what, c, out, dt, off, len, salt, op);
    free(a);
    free(b);
}

static void check_allgather(tr_comm *c, size_t count, tr_comm_dtype dt, int in_place, int salt)
{
    size_t es = tr_comm_dtype_size(dt), off, len;
    int r = tr_comm_rank(c);
    tr_comm_block(count, tr_comm_size(c), r, &off, &len);
    uint8_t *all = malloc(count * es + 8), *mine = malloc(len * es + 8), *full = malloc(count * es + 8);
    tc_data_fill(full, dt, count, r, salt);
    memcpy(mine, full + off * es, len * es);
    memset(all, 0x7f, count * es);
    if (in_place)
        memcpy(all + off * es, mine, len * es);
    char what[96];
    snprintf(what, sizeof what, "allgather(count %zu, dtype %d, %s)", count, dt,
             in_place ? "in-place" : "out-of-place");
    OK(tr_comm_allgather(c, in_place ? all + off * es : mine, all, count, dt));
    expected_ops[TR_COMM_OP_ALLGATHER]++;
    expect_inputs(what, c, all, dt, count, salt);
    free(all);
    free(mine);
    free(full);
}

static void check_broadcast(tr_comm *c, size_t count, tr_comm_dtype dt, int root, int salt)
{
    size_t es = tr_comm_dtype_size(dt);
    uint8_t *a = malloc(count * es + 8), *want = malloc(count * es + 8);
    tc_data_fill(want, dt, count, root, salt);
    if (tr_comm_rank(c) == root)
        memcpy(a, want, count * es);
    else
        memset(a, 0x55, count * es);
    OK(tr_comm_broadcast(c, a, count, dt, root));
    expected_ops[TR_COMM_OP_BROADCAST]++;
    CHECK(!memcmp(a, want, count * es), "broadcast(count %zu, root %d) on '%s' differs", count,
          root, tr_comm_name(c));
    free(a);
    free(want);
}

/* Everyone sends to r+1 and receives from r-1, async, both directions in flight. */
static void check_sendrecv(tr_comm *c, size_t count, int salt)
{
    int n = tr_comm_size(c), r = tr_comm_rank(c);
    if (n < 2)
        return;
    float *out = malloc(count * 4 + 8), *in = malloc(count * 4 + 8), *want = malloc(count * 4 + 8);
    tc_data_fill(out, TR_COMM_F32, count, r, salt);
    tc_data_fill(want, TR_COMM_F32, count, (r + n - 1) % n, salt);
    tr_comm_request *req[2];
    OK(tr_comm_recv_async(c, in, count, TR_COMM_F32, (r + n - 1) % n, 77 + salt, &req[0]));
    OK(tr_comm_send_async(c, out, count, TR_COMM_F32, (r + 1) % n, 77 + salt, &req[1]));
    OK(tr_comm_wait_all(req, 2));
    expected_ops[TR_COMM_OP_SEND]++;
    expected_ops[TR_COMM_OP_RECV]++;
    CHECK(!memcmp(in, want, count * 4), "send/recv(count %zu) on '%s' differs", count,
          tr_comm_name(c));
    free(out);
    free(in);
    free(want);
}

/* Elements rank s sends rank d: uneven, zero for about one pair in five (self included). */
static size_t a2a_count(int s, int d, int salt, size_t scale)
{
    return (size_t)((s * 7 + d * 3 + salt) % 5) * scale + (size_t)((s + 2 * d + salt) % 3) * 3;
}

/* Block d of rank s's send holds tc_data_val(s, d * 1000003 + k); rank d checks every block. */
static void check_alltoallv(tr_comm *c, size_t scale, int salt)
{
    int n = tr_comm_size(c), r = tr_comm_rank(c);
    size_t *sc = malloc(sizeof *sc * (size_t)n), *rc = malloc(sizeof *rc * (size_t)n);
    size_t ns = 0, nr = 0;
    for (int q = 0; q < n; q++) {
        ns += sc[q] = a2a_count(r, q, salt, scale);
        nr += rc[q] = a2a_count(q, r, salt, scale);
    }
    float *out = malloc(ns * 4 + 4), *in = malloc(nr * 4 + 4);
    size_t off = 0;
    for (int q = 0; q < n; q++)
        for (size_t k = 0; k < sc[q]; k++)
            out[off++] = (float)tc_data_val(r, (size_t)q * 1000003 + k, salt);
    OK(tr_comm_alltoallv(c, out, sc, in, rc, TR_COMM_F32));
    off = 0;
    for (int q = 0; q < n; q++) {
        expected_ops[TR_COMM_OP_SEND] += q != r && sc[q];
        expected_ops[TR_COMM_OP_RECV] += q != r && rc[q];
        for (size_t k = 0; k < rc[q]; k++, off++) {
            float want = (float)tc_data_val(q, (size_t)r * 1000003 + k, salt);
            if (in[off] != want) {
                CHECK(0, "alltoallv(scale %zu) on '%s' (size %d): element %zu from rank %d is "
                      "%g, expected %g", scale, tr_comm_name(c), n, k, q, in[off], want);
                q = n;
                break;
            }
        }
    }
    free(out);
    free(in);
    free(sc);
    free(rc);
}

static void random_float_allreduce(tr_comm *c, int salt)
{
    size_t count = 5003;
    int n = tr_comm_size(c), r = tr_comm_rank(c);
    float *a = malloc(count * 4), *b = malloc(count * 4);
    for (size_t i = 0; i < count; i++)
        a[i] = (float)tr_rand_uniform(42, (uint64_t)(salt * 64 + r), i) * 2.0f - 1.0f;
    OK(tr_comm_allreduce(c, a, b, count, TR_COMM_F32, TR_COMM_SUM));
    expected_ops[TR_COMM_OP_ALLREDUCE]++;
    for (size_t i = 0; i < count; i++) {
        double want = 0;
        for (int q = 0; q < n; q++)
            want += (float)tr_rand_uniform(42, (uint64_t)(salt * 64 + q), i) * 2.0f - 1.0f;
        if (fabs(b[i] - want) > 1e-5 * (1 + fabs(want))) {
            CHECK(0, "random allreduce on '%s': element %zu is %.9g, expected %.9g",
                  tr_comm_name(c), i, b[i], want);
            break;
        }
    }
    free(a);
    free(b);
}

/* The count 1<<20 + 3 (4 MiB of fp32: pipelined ring / chain, halving for allreduce on more
 * than two ranks, then the ring forced for allreduce). */
static void run_big(tr_comm *c)
{
    size_t n = ((size_t)1 << 20) + 3;
    const tr_comm_tuning dflt = *tr_comm_get_tuning(c);
    for (int ip = 0; ip < 2; ip++) {
        check_allreduce(c, n, TR_COMM_F32, TR_COMM_SUM, ip, 60 + ip);
        check_reduce_scatter(c, n, TR_COMM_F32, TR_COMM_SUM, ip, 62 + ip);
        check_allgather(c, n, TR_COMM_F32, ip, 64 + ip);
    }
    check_broadcast(c, n, TR_COMM_F32, 0, 66);
    check_broadcast(c, n, TR_COMM_F32, tr_comm_size(c) / 2, 67); /* the chain starts mid-group */
    const tr_comm_tuning big_ring = {.halving_max_bytes = 1};     /* ring, default chunks */
    OK(tr_comm_set_tuning(c, &big_ring));
    check_allreduce(c, n, TR_COMM_F32, TR_COMM_SUM, 0, 68);
    check_allreduce(c, n, TR_COMM_F64, TR_COMM_MAX, 1, 69);
    OK(tr_comm_set_tuning(c, &dflt));
}

static void run_suite(tr_comm *c, int big)
{
    static const size_t counts[] = {0, 1, 7, 1000};
    const tr_comm_tuning dflt = *tr_comm_get_tuning(c);
    /* default choice; the ring forced onto small messages (small chunks, a window smaller
     * than the lanes); recursive halving forced */
    const tr_comm_tuning ring = {.ring_min_bytes = 1, .chunk_bytes = 64, .ring_window = 3,
                                 .halving_max_bytes = 1};
    const tr_comm_tuning halving = {.ring_min_bytes = 1, .halving_max_bytes = (size_t)1 << 40};
    const tr_comm_tuning *tunings[] = {&dflt, &ring, &halving};
    for (int t = 0; t < 3; t++) {
        OK(tr_comm_set_tuning(c, tunings[t]));
        for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
            size_t n = counts[k];
            int salt = (int)k + 10 * t;
            for (int ip = 0; ip < 2; ip++) {
                check_allreduce(c, n, TR_COMM_F32, TR_COMM_SUM, ip, salt);
                check_reduce_scatter(c, n, TR_COMM_F32, TR_COMM_SUM, ip, salt + 1);
                check_allgather(c, n, TR_COMM_F32, ip, salt + 2);
            }
            check_allreduce(c, n, TR_COMM_F64, TR_COMM_MAX, 0, salt + 3);
            check_allreduce(c, n, TR_COMM_I64, TR_COMM_SUM, 1, salt + 4);
            check_allreduce(c, n, TR_COMM_I32, TR_COMM_MIN, 0, salt + 5);
            check_reduce_scatter(c, n, TR_COMM_F64, TR_COMM_MAX, 0, salt + 6);
            check_allgather(c, n, TR_COMM_I64, 0, salt + 7);
            check_broadcast(c, n, TR_COMM_F64, (int)(n % (size_t)tr_comm_size(c)), salt + 8);
            check_broadcast(c, n, TR_COMM_F32, tr_comm_size(c) - 1, salt + 9);
            check_sendrecv(c, n, salt);
            check_alltoallv(c, n, salt);
            OK(tr_comm_barrier(c));
            expected_ops[TR_COMM_OP_BARRIER]++;
        }
        random_float_allreduce(c, 50 + t);
    }
    check_alltoallv(c, 20000, 70); /* blocks up to 320 KB: UCX's rendezvous protocol */
    OK(tr_comm_set_tuning(c, &dflt));
    if (big)
        run_big(c);
}

/* Async operations in flight at once on different groups (and two on one group). */
static void concurrent(tr_comm *world, tr_comm *half, tr_comm *third)
{
    enum { N1 = 1000, N2 = 100003, N3 = 4099 };
    int wr = tr_comm_rank(world);
    float *a = malloc(N1 * 4), *b = malloc(N2 * 4), *c = malloc(N3 * 4 * 8), *d = malloc(N1 * 4);
    float *e = malloc(N2 * 4);
    size_t off, len;
    tr_comm_block(N3, tr_comm_size(third), tr_comm_rank(third), &off, &len);
    tc_data_fill(a, TR_COMM_F32, N1, wr, 70);
    tc_data_fill(b, TR_COMM_F32, N2, tr_comm_rank(half), 71);
    tc_data_fill(c, TR_COMM_F32, N3, tr_comm_rank(third), 72);
    tc_data_fill(e, TR_COMM_F32, N2, tr_comm_rank(world), 74);
    if (wr == 0)
        tc_data_fill(d, TR_COMM_F32, N1, 0, 73);
    tr_comm_request *req[5];
    /* issued in a different order than they will complete; the same order on every rank */
    OK(tr_comm_allreduce_async(world, e, e, N2, TR_COMM_F32, TR_COMM_SUM, &req[0]));
    OK(tr_comm_allreduce_async(half, b, b, N2, TR_COMM_F32, TR_COMM_SUM, &req[1]));
    OK(tr_comm_reduce_scatter_async(third, c, c + off, N3, TR_COMM_F32, TR_COMM_MAX, &req[2]));
    OK(tr_comm_allreduce_async(world, a, a, N1, TR_COMM_F32, TR_COMM_MIN, &req[3]));
    OK(tr_comm_broadcast_async(world, d, N1, TR_COMM_F32, 0, &req[4]));
    int done = 0;
    OK(tr_comm_test(&req[4], &done)); /* polling works too */
    if (done)
        req[4] = NULL;
    OK(tr_comm_wait_all(req, 5));
    expect_reduced("concurrent world allreduce", world, e, TR_COMM_F32, 0, N2, 74, TR_COMM_SUM);
    expect_reduced("concurrent half allreduce", half, b, TR_COMM_F32, 0, N2, 71, TR_COMM_SUM);
    expect_reduced("concurrent third reduce_scatter", third, c + off, TR_COMM_F32, off, len, 72,
                   TR_COMM_MAX);
    expect_reduced("concurrent world min", world, a, TR_COMM_F32, 0, N1, 70, TR_COMM_MIN);
    float *want = malloc(N1 * 4);
    tc_data_fill(want, TR_COMM_F32, N1, 0, 73);
    CHECK(!memcmp(d, want, N1 * 4), "concurrent broadcast differs");
    free(want);
    free(a);
    free(b);
    free(c);
    free(d);
    free(e);
}

/* Ordered requests (tr_comm_order_after, then tr_comm_flush): the results of the blocking
 * calls, a chain of them reading each other's outputs, on two groups interleaved. */
static void ordered(tr_comm *world, tr_comm *half)
{
    enum { N = 100003 };
    size_t off, len;
    tr_comm_block(N, tr_comm_size(world), tr_comm_rank(world), &off, &len);
    float *a = malloc(N * 4), *b = malloc(N * 4), *g = malloc(N * 4);
    tc_data_fill(a, TR_COMM_F32, N, tr_comm_rank(world), 80);
    tc_data_fill(b, TR_COMM_F32, N, tr_comm_rank(half), 81);
    tr_comm_request *req = NULL;
    OK(tr_comm_allreduce_async(world, a, a, N, TR_COMM_F32, TR_COMM_SUM, &req));
    OK(tr_comm_order_after(&req, NULL));
    CHECK(req == NULL, "order_after left the request");
    OK(tr_comm_allreduce_async(half, b, b, N, TR_COMM_F32, TR_COMM_MAX, &req));
    OK(tr_comm_order_after(&req, NULL));
    /* the allreduced a, reduce-scattered in place and all-gathered again: size * sum */
    OK(tr_comm_reduce_scatter_async(world, a, a + off, N, TR_COMM_F32, TR_COMM_SUM, &req));
    OK(tr_comm_order_after(&req, NULL));
    OK(tr_comm_allgather_async(world, a + off, g, N, TR_COMM_F32, &req));
    OK(tr_comm_order_after(&req, NULL));
    OK(tr_comm_flush(world));
    OK(tr_comm_flush(half));
    expect_reduced("ordered half allreduce", half, b, TR_COMM_F32, 0, N, 81, TR_COMM_MAX);
    for (size_t i = 0; i < N; i++)
        if (g[i] != (float)tr_comm_size(world) * tc_data_reduce(tr_comm_size(world), i, 80,
                                                                TR_COMM_SUM)) {
            CHECK(0, "ordered chain on '%s': element %zu is %g", tr_comm_name(world), i, g[i]);
            break;
        }
    CHECK(tr_comm_order_after(NULL, NULL) == TR_ERR_INVALID, "order_after(NULL) accepted");
    CHECK(tr_comm_order_after(&req, NULL) == TR_ERR_INVALID, "order_after of no request");
    CHECK(tr_comm_flush(NULL) == TR_ERR_INVALID, "flush(NULL) accepted");
    free(a);
    free(b);
    free(g);
}

static void check_counters(tr_comm *c)
{
    tr_comm_counters k;
    tr_comm_get_counters(c, &k);
    for (int i = 0; i < TR_COMM_OP_SPLIT; i++)
        CHECK(k.ops[i] == expected_ops[i], "counter of %s on '%s' is %llu, expected %zu",
              tr_comm_opkind_name((tr_comm_opkind)i), tr_comm_name(c),
              (unsigned long long)k.ops[i], expected_ops[i]);
    tr_comm_reset_counters(c);
    memset(expected_ops, 0, sizeof expected_ops);
}

int main(int argc, char **argv)
{
    int big = 0, big_splits = 0; /* the big count on the world / on the split groups */
    int progress_thread = 0;
    double timeout_s = 60;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--big"))
            big = big_splits = 1;
        else if (!strcmp(argv[i], "--big-world"))
            big = 1;
        else if (!strcmp(argv[i], "--progress-thread"))
            progress_thread = 1;
        else if (!strcmp(argv[i], "--timeout") && i + 1 < argc)
            timeout_s = atof(argv[++i]);
        else {
            fprintf(stderr, "coll_check: unknown argument '%s'\n", argv[i]);
            return 2;
        }
    }
    double t0 = tr_now();
    tr_comm *world = tc_world(timeout_s, progress_thread), *half = NULL, *third = NULL, *odd = NULL;
    world_rank = tc_rank;
    int n = tr_comm_size(world);
    run_suite(world, big);
    check_counters(world);

    /* reversed order inside the halves: key = -rank */
    OK(tr_comm_split(world, world_rank % 2, -world_rank, "half", &half));
    CHECK(tr_comm_size(half) == (n + 1 - world_rank % 2) / 2, "half has size %d",
          tr_comm_size(half));
    CHECK(tr_comm_world_rank(half, tr_comm_rank(half)) == world_rank, "world rank mapping");
    run_suite(half, big_splits);
    check_counters(half);
    OK(tr_comm_split(world, world_rank % 3, world_rank, "third", &third));
    /* a split where some ranks join nothing */
    OK(tr_comm_split(world, world_rank % 2 ? 0 : TR_COMM_COLOR_NONE, 0, "odd", &odd));
    CHECK((odd != NULL) == (world_rank % 2), "odd split membership");
    if (odd) {
        run_suite(odd, big_splits);
        check_counters(odd);
    }
    run_suite(third, big_splits);
    check_counters(third);
    concurrent(world, half, third);
    ordered(world, half);

    tr_comm_destroy(odd);
    tr_comm_destroy(third);
    tr_comm_destroy(half);
    tr_comm_destroy(world);
    if (world_rank == 0)
        printf("coll_check: %d ranks, %s, %.2f s\n", n, tc_failures ? "FAILED" : "all matched",
               tr_now() - t0);
    return tc_failures ? 1 : 0;
}
