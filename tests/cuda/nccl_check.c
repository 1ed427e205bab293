/* tests/cuda: the NCCL communicator across ranks (run as N ranks by `trident launch`; the
 * world asks for TR_COMM_BACKEND_NCCL; TRIDENT_NCCL_STAGE=1 forces the host-staged path). On the
 * world and on split groups (halves by rank parity; a group of one; a rank in no group):
 * allreduce (sum/max/min, f32/f64/i32/i64), reduce_scatter and allgather (even and uneven
 * counts, in place and not), broadcast, a ring of tagged sends and receives, barrier,
 * several operations in flight on different groups, and host buffers through the same
 * communicators. Small integers, so every result compares exactly.
 *   nccl_check [--hang | --ordered] [--timeout S]
 * --hang: ranks other than 0 skip one allreduce; rank 0 must fail within the timeout with a message
 * naming the group and the operation, and the group must refuse later operations.
 * --ordered: ordered requests on the NCCL route (exit 77 unless every rank has its own GPU)
 * and an ordered allreduce that ranks other than 0 skip (flush fails within the timeout). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm.h"
#include "comm/nccl/nccl.h"
#include "core/core.h"
#include "kernels/cuda/cuda.h"
#include "tests/cuda/cuda_skip.h"
#include "tests/common/check.h"

static const tr_kernels *K;

/* A buffer in device memory (device = 1) or host memory, and its host image. */
static void *buf_new(int device, size_t bytes)
{
    return device ? K->alloc(bytes ? bytes : 4) : calloc(1, bytes ? bytes : 4);
}
static void buf_free(int device, void *p) { device ? K->free(p) : free(p); }
static void put(int device, void *dst, const void *src, size_t bytes)
{
    device ? K->to_device(NULL, dst, src, bytes) : (void)memcpy(dst, src, bytes);
}
static void take(int device, void *dst, const void *src, size_t bytes)
{
    device ? K->to_host(NULL, dst, src, bytes) : (void)memcpy(dst, src, bytes);
}

static void check_allreduce(tr_comm *c, int device, tr_comm_dtype dt, tr_comm_redop op,
                            size_t count, int in_place, int salt)
{
    int r = tr_comm_rank(c), n = tr_comm_size(c);
    size_t es = tr_comm_dtype_size(dt), bytes = count * es;
    void *h = malloc(bytes ? bytes : 4);
    tc_data_fill(h, dt, count, r, salt);
    void *s = buf_new(device, bytes), *d = in_place ? s : buf_new(device, bytes);
    put(device, s, h, bytes);
    OK(tr_comm_allreduce(c, s, d, count, dt, op));
    take(device, h, d, bytes);
    for (size_t i = 0; i < count; i++)
        if (tc_data_get(h, dt, i) != tc_data_reduce(n, i, salt, op)) {
            CHECK(0, "%s allreduce (%s, dt %d, op %d, %zu, in place %d) element %zu: %g != %g",
                  tr_comm_name(c), device ? "device" : "host", dt, op, count, in_place, i,
                  tc_data_get(h, dt, i), tc_data_reduce(n, i, salt, op));
            break;
        }
    buf_free(device, s);
    if (!in_place)
        buf_free(device, d);
    free(h);
}

static void check_reduce_scatter(tr_comm *c, int device, size_t count, int in_place, int salt)
{
    int r = tr_comm_rank(c), n = tr_comm_size(c);
    size_t off, len;
    tr_comm_block(count, n, r, &off, &len);
    float *h = malloc((count ? count : 1) * 4);
    tc_data_fill(h, TR_COMM_F32, count, r, salt);
    float *s = buf_new(device, count * 4);
    put(device, s, h, count * 4);
    float *d = in_place ? s + off : buf_new(device, len * 4);
    OK(tr_comm_reduce_scatter(c, s, d, count, TR_COMM_F32, TR_COMM_SUM));
    take(device, h, d, len * 4);
    for (size_t i = 0; i < len; i++)
        if (h[i] != tc_data_reduce(n, off + i, salt, TR_COMM_SUM)) {
            CHECK(0, "%s reduce_scatter (%s, %zu, in place %d) element %zu", tr_comm_name(c),
                  device ? "device" : "host", count, in_place, i);
            break;
        }
    buf_free(device, s);
    if (!in_place)
        buf_free(device, d);
    free(h);
}

static void check_allgather(tr_comm *c, int device, size_t count, int in_place, int salt)
{
    int r = tr_comm_rank(c), n = tr_comm_size(c);
    size_t off, len;
    tr_comm_block(count, n, r, &off, &len);
    float *h = malloc((count ? count : 1) * 4);
    tc_data_fill(h, TR_COMM_F32, count, 0, salt); /* everyone's view of the whole */
    float *d = buf_new(device, count * 4);
    float *s = in_place ? d + off : buf_new(device, len * 4);
    put(device, s, h + off, len * 4);
    OK(tr_comm_allgather(c, s, d, count, TR_COMM_F32));
    float *got = malloc((count ? count : 1) * 4);
    take(device, got, d, count * 4);
    CHECK(!memcmp(got, h, count * 4), "%s allgather (%s, %zu, in place %d)", tr_comm_name(c),
          device ? "device" : "host", count, in_place);
    buf_free(device, d);
    if (!in_place)
        buf_free(device, s);
    free(h), free(got);
}

static void check_broadcast(tr_comm *c, int device, size_t count, int root, int salt)
{
    int r = tr_comm_rank(c);
    float *want = malloc((count ? count : 1) * 4), *h = malloc((count ? count : 1) * 4);
    tc_data_fill(want, TR_COMM_F32, count, root, salt);
    tc_data_fill(h, TR_COMM_F32, count, r, salt);
    float *b = buf_new(device, count * 4);
    put(device, b, h, count * 4);
    OK(tr_comm_broadcast(c, b, count, TR_COMM_F32, root));
    take(device, h, b, count * 4);
    CHECK(!memcmp(h, want, count * 4), "%s broadcast (%s, %zu, root %d)", tr_comm_name(c),
          device ? "device" : "host", count, root);
    buf_free(device, b);
    free(want), free(h);
}

/* Ring: send to the next rank, receive from the previous, two tags at once. */
static void check_ring(tr_comm *c, int device, size_t count)
{
    int r = tr_comm_rank(c), n = tr_comm_size(c);
    if (n < 2)
        return;
    int next = (r + 1) % n, prev = (r + n - 1) % n;
    float *h = malloc(count * 4);
    float *s1 = buf_new(device, count * 4), *s2 = buf_new(device, count * 4),
          *d1 = buf_new(device, count * 4), *d2 = buf_new(device, count * 4);
    tc_data_fill(h, TR_COMM_F32, count, r, 1);
    put(device, s1, h, count * 4);
    tc_data_fill(h, TR_COMM_F32, count, r, 2);
    put(device, s2, h, count * 4);
    tr_comm_request *req[4];
    OK(tr_comm_recv_async(c, d1, count, TR_COMM_F32, prev, 11, &req[0]));
    OK(tr_comm_recv_async(c, d2, count, TR_COMM_F32, prev, 12, &req[1]));
    OK(tr_comm_send_async(c, s1, count, TR_COMM_F32, next, 11, &req[2]));
    OK(tr_comm_send_async(c, s2, count, TR_COMM_F32, next, 12, &req[3]));
    OK(tr_comm_wait_all(req, 4));
    float *want = malloc(count * 4);
    for (int t = 1; t <= 2; t++) {
        tc_data_fill(want, TR_COMM_F32, count, prev, t);
        take(device, h, t == 1 ? d1 : d2, count * 4);
        CHECK(!memcmp(h, want, count * 4), "%s ring (%s, %zu) tag %d", tr_comm_name(c),
              device ? "device" : "host", count, 10 + t);
    }
    buf_free(device, s1), buf_free(device, s2), buf_free(device, d1), buf_free(device, d2);
    free(h), free(want);
}

/* Ordered requests on device buffers (tr_comm_order_after on the compute stream, then
 * tr_comm_flush): an allreduce, a kernel queued after it (x2), a reduce-scatter in place and
 * an all-gather of the blocks (uneven count), a broadcast; every result as the blocking
 * calls'. The host waits for none on the NCCL and LOCAL routes (staged: it does). */
static void check_ordered(tr_comm *c, int salt)
{
    enum { N = 100003 };
    int n = tr_comm_size(c), r = tr_comm_rank(c);
    size_t off, len;
    tr_comm_block(N, n, r, &off, &len);
    float *h = malloc(N * 4), *a = K->alloc(N * 4), *g = K->alloc(N * 4), *b = K->alloc(N * 4);
    tc_data_fill(h, TR_COMM_F32, N, r, salt);
    K->to_device(NULL, a, h, N * 4);
    tc_data_fill(h, TR_COMM_F32, N, r, salt + 1);
    K->to_device(NULL, b, h, N * 4);
    tr_comm_request *req = NULL;
    OK(tr_comm_allreduce_async(c, a, a, N, TR_COMM_F32, TR_COMM_SUM, &req));
    OK(tr_comm_order_after(&req, NULL));
    K->scale(NULL, a, 2.0f, N); /* must see the sum */
    OK(tr_comm_reduce_scatter_async(c, a, a + off, N, TR_COMM_F32, TR_COMM_SUM, &req));
    OK(tr_comm_order_after(&req, NULL));
    OK(tr_comm_allgather_async(c, a + off, g, N, TR_COMM_F32, &req));
    OK(tr_comm_order_after(&req, NULL));
    OK(tr_comm_broadcast_async(c, b, N, TR_COMM_F32, n - 1, &req));
    OK(tr_comm_order_after(&req, NULL));
    OK(tr_comm_flush(c));
    K->to_host(NULL, h, g, N * 4);
    for (size_t i = 0; i < N; i++)
        if (h[i] != 2.0f * (float)n * (float)tc_data_reduce(n, i, salt, TR_COMM_SUM)) {
            CHECK(0, "%s ordered chain element %zu: %g", tr_comm_name(c), i, h[i]);
            break;
        }
    float *want = malloc(N * 4);
    tc_data_fill(want, TR_COMM_F32, N, n - 1, salt + 1);
    K->to_host(NULL, h, b, N * 4);
    CHECK(!memcmp(h, want, N * 4), "%s ordered broadcast", tr_comm_name(c));
    K->free(a), K->free(g), K->free(b);
    free(h), free(want);
}

/* An ordered allreduce that ranks other than 0 never join: rank 0's flush must fail within
 * the timeout naming the group and the operation (the NCCL communicator aborted, so the
 * compute stream that waits for it goes on), and the group refuse later operations quoting
 * the failure. */
static void ordered_hang(tr_comm *w)
{
    float *d = K->alloc(4096);
    tr_comm_set_timeout(w, 5);
    if (tr_comm_rank(w) != 0) {
        sleep(5 + 5);
        K->free(d);
        return;
    }
    double t0 = tr_now();
    tr_comm_request *req = NULL;
    OK(tr_comm_allreduce_async(w, d, d, 1024, TR_COMM_F32, TR_COMM_SUM, &req));
    int rc = tr_comm_order_after(&req, NULL);
    if (!rc)
        rc = tr_comm_flush(w);
    CHECK(rc == TR_ERR_TIMEOUT && strstr(tr_errmsg(), "allreduce") &&
              strstr(tr_errmsg(), "timed out") && strstr(tr_errmsg(), tr_comm_name(w)),
          "ordered hang: %d %s", rc, tr_errmsg());
    printf("rank 0: %s (after %.1f s)\n", tr_errmsg(), tr_now() - t0);
    float x[4];
    K->to_host(NULL, x, d, sizeof x); /* the stream was released */
    rc = tr_comm_allreduce(w, d, d, 1024, TR_COMM_F32, TR_COMM_SUM);
    CHECK(rc == TR_ERR_COMM && strstr(tr_errmsg(), "unusable") && strstr(tr_errmsg(), "timed out"),
          "after the ordered timeout: %d %s", rc, tr_errmsg());
    K->free(d);
}

static void check_group(tr_comm *c, int salt)
{
    static const size_t counts[] = {0, 1, 7, 1000, (1 << 20) + 3};
    for (int device = 1; device >= 0; device--) {
        for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
            size_t n = counts[k];
            check_allreduce(c, device, TR_COMM_F32, TR_COMM_SUM, n, 0, salt);
            check_allreduce(c, device, TR_COMM_F32, TR_COMM_SUM, n, 1, salt + 1);
            check_reduce_scatter(c, device, n, 0, salt + 2);
            check_reduce_scatter(c, device, n, 1, salt + 3);
            check_allgather(c, device, n, 0, salt + 4);
            check_allgather(c, device, n, 1, salt + 5);
            check_broadcast(c, device, n, tr_comm_size(c) - 1, salt + 6);
            if (n)
                check_ring(c, device, n);
        }
        check_allreduce(c, device, TR_COMM_F64, TR_COMM_MAX, 333, 0, salt + 7);
        check_allreduce(c, device, TR_COMM_I32, TR_COMM_MIN, 333, 0, salt + 8);
        check_allreduce(c, device, TR_COMM_I64, TR_COMM_SUM, 333, 1, salt + 9);
        OK(tr_comm_barrier(c));
    }
    check_ordered(c, salt + 10);
}

/* Device and host operations in flight together on two groups. */
static void check_overlap(tr_comm *a, tr_comm *b)
{
    size_t n = 100000;
    float *h = malloc(n * 4);
    float *d1 = K->alloc(n * 4), *d2 = b ? K->alloc(n * 4) : NULL;
    double *x = calloc(4, sizeof *x);
    tc_data_fill(h, TR_COMM_F32, n, tr_comm_rank(a), 3);
    K->to_device(NULL, d1, h, n * 4);
    if (b) {
        tc_data_fill(h, TR_COMM_F32, n, tr_comm_rank(b), 4);
        K->to_device(NULL, d2, h, n * 4);
    }
    tc_data_fill(x, TR_COMM_F64, 4, tr_comm_rank(a), 5);
    tr_comm_request *req[3] = {0};
    OK(tr_comm_allreduce_async(a, d1, d1, n, TR_COMM_F32, TR_COMM_SUM, &req[0]));
    OK(tr_comm_allreduce_async(a, x, x, 4, TR_COMM_F64, TR_COMM_SUM, &req[1]));
    if (b)
        OK(tr_comm_allreduce_async(b, d2, d2, n, TR_COMM_F32, TR_COMM_SUM, &req[2]));
    OK(tr_comm_wait_all(req, 3));
    K->to_host(NULL, h, d1, n * 4);
    for (size_t i = 0; i < n; i += 997)
        CHECK(h[i] == tc_data_reduce(tr_comm_size(a), i, 3, TR_COMM_SUM), "overlap %s element %zu",
              tr_comm_name(a), i);
    for (size_t i = 0; i < 4; i++)
        CHECK(x[i] == tc_data_reduce(tr_comm_size(a), i, 5, TR_COMM_SUM), "overlap host %zu", i);
    if (b) {
        K->to_host(NULL, h, d2, n * 4);
        for (size_t i = 0; i < n; i += 997)
            CHECK(h[i] == tc_data_reduce(tr_comm_size(b), i, 4, TR_COMM_SUM), "overlap %s %zu",
                  tr_comm_name(b), i);
        K->free(d2);
    }
    K->free(d1);
    free(h), free(x);
}

static int hang(tr_comm *w)
{
    float *d = K->alloc(4096);
    if (tr_comm_rank(w) != 0) {
        /* skip the allreduce; stay alive until rank 0 has given up */
        sleep((unsigned)tr_comm_timeout(w) + 3);
        K->free(d);
        return 0;
    }
    int rc = tr_comm_allreduce(w, d, d, 1024, TR_COMM_F32, TR_COMM_SUM);
    CHECK(rc == TR_ERR_TIMEOUT, "hang: allreduce returned %d (%s), want a timeout", rc,
          tr_errmsg());
    CHECK(strstr(tr_errmsg(), "allreduce") && strstr(tr_errmsg(), "timed out"),
          "hang message: %s", tr_errmsg());
    printf("rank 0: %s\n", tr_errmsg());
    rc = tr_comm_allreduce(w, d, d, 1024, TR_COMM_F32, TR_COMM_SUM);
    CHECK(rc == TR_ERR_COMM && strstr(tr_errmsg(), "unusable"), "after the timeout: %d %s", rc,
          tr_errmsg());
    K->free(d);
    return 0;
}

int main(int argc, char **argv)
{
    int do_hang = 0, do_ordered = 0;
    double timeout = 30; /* a GPU check's minutes are few: a stuck transfer fails in 30 s */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--hang"))
            do_hang = 1;
        else if (!strcmp(argv[i], "--ordered"))
            do_ordered = 1;
        else if (!strcmp(argv[i], "--timeout") && i + 1 < argc)
            timeout = atof(argv[++i]);
    }
    tc_data_period = 1009; /* the test data of this check: small integers, int64 unscaled */
    tc_data_i64_scale = 1;
    K = tr_kernels_get("cuda-fp32");
    if (!K)
        return cuda_unusable(); /* SKIP without a GPU, FAIL with one */
    tr_comm_config cfg = tr_comm_config_default();
    cfg.timeout_s = do_hang ? 5 : timeout;
    cfg.backend = TR_COMM_BACKEND_NCCL;
    tr_comm *w = NULL;
    OK(tr_comm_init_world(&cfg, &w));
    tc_rank = tr_comm_rank(w);
    CHECK(!strcmp(tr_comm_backend(w), "nccl"), "backend %s, not nccl",
          tr_comm_backend(w));
    int n = tr_comm_size(w);
    if (do_ordered) { /* the NCCL route itself: every rank on its own GPU */
        if (tr_comm_nccl_mode(w) != TR_NCCL_MODE_NCCL) {
            if (tc_rank == 0)
                printf("SKIP: the world of %d ranks is %s, not nccl: NCCL cannot put two ranks "
                       "of one communicator on one GPU (this needs %d GPUs)\n",
                       n, tr_nccl_mode_name((tr_nccl_mode)tr_comm_nccl_mode(w)), n);
            tr_comm_destroy(w);
            return 77;
        }
        tr_comm *half = NULL;
        OK(tr_comm_split(w, tc_rank % 2, tc_rank, "half", &half));
        check_ordered(w, 100);
        check_ordered(half, 110);
        tr_comm_destroy(half);
        ordered_hang(w);
        tr_comm_destroy(w);
        if (tc_rank == 0)
            printf("nccl_check --ordered: %s\n", tc_failures ? "FAILED" : "all results exact");
        return tc_failures ? 1 : 0;
    }
    if (do_hang) {
        hang(w);
        tr_comm_destroy(w);
        return tc_failures ? 1 : 0;
    }
    tr_comm *half = NULL, *solo = NULL, *some = NULL;
    OK(tr_comm_split(w, tc_rank % 2, tc_rank, "half", &half));
    OK(tr_comm_split(w, tc_rank, 0, "solo", &solo));
    OK(tr_comm_split(w, tc_rank == 0 ? TR_COMM_COLOR_NONE : 0, n - tc_rank, "some", &some));
    CHECK(tc_rank == 0 ? some == NULL : some != NULL, "color none");
    if (tc_rank == 0)
        printf("world of %d: mode %s; half %s; solo %s\n", n,
               tr_nccl_mode_name((tr_nccl_mode)tr_comm_nccl_mode(w)),
               tr_nccl_mode_name((tr_nccl_mode)tr_comm_nccl_mode(half)),
               tr_nccl_mode_name((tr_nccl_mode)tr_comm_nccl_mode(solo)));
    check_group(w, 0);
    check_group(half, 20);
    check_group(solo, 40);
    if (some)
        check_group(some, 60);
    check_overlap(w, half);
    if (tr_cuda_status()) {
        tc_failures++;
        fprintf(stderr, "rank %d: FAIL %s\n", tc_rank, tr_errmsg());
    }
    tr_comm_destroy(some);
    tr_comm_destroy(solo);
    tr_comm_destroy(half);
    tr_comm_destroy(w);
    if (tc_rank == 0)
        printf("nccl_check: %s\n", tc_failures ? "FAILED" : "all results exact");
    return tc_failures ? 1 : 0;
}
