/* comm/ units on a one-rank world (no launcher needed): the partition, the reductions, every
 * operation's result and counters on one rank, and every bad argument with its code and
 * message; the environment parsing and a store that never comes up. */
#include "comm/comm.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

static void expect_error(int rc, int code, const char *needle)
{
    assert_int_equal(rc, code);
    if (!strstr(tr_errmsg(), needle))
        fail_msg("message '%s' lacks '%s'", tr_errmsg(), needle);
}

/* A port on 127.0.0.1 that refuses connections for as long as *fd stays open: bound, never
 * listened on. Holding it (rather than finding a free port and freeing it again) keeps tests
 * that run beside this one from taking it in between. */
static int refusing_port(int *fd)
{
    *fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(*fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(*fd, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t len = sizeof a;
    assert_int_equal(getsockname(*fd, (struct sockaddr *)&a, &len), 0);
    return ntohs(a.sin_port);
}

static void clear_env(void)
{
    unsetenv("WORLD_SIZE");
    unsetenv("RANK");
    unsetenv("MASTER_ADDR");
    unsetenv("MASTER_PORT");
}

static void test_block_partition(void **state)
{
    (void)state;
    static const size_t counts[] = {0, 1, 7, 8, 1000, (1u << 20) + 3};
    for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++)
        for (int n = 1; n <= 9; n++) {
            size_t next = 0;
            for (int r = 0; r < n; r++) {
                size_t off, len;
                tr_comm_block(counts[k], n, r, &off, &len);
                assert_int_equal(off, next);
                assert_true(len == counts[k] / (size_t)n || len == counts[k] / (size_t)n + 1);
                next = off + len;
            }
            assert_int_equal(next, counts[k]);
        }
}

static void test_sizes_and_names(void **state)
{
    (void)state;
    assert_int_equal(tr_comm_dtype_size(TR_COMM_F32), 4);
    assert_int_equal(tr_comm_dtype_size(TR_COMM_F64), 8);
    assert_int_equal(tr_comm_dtype_size(TR_COMM_I32), 4);
    assert_int_equal(tr_comm_dtype_size(TR_COMM_I64), 8);
    assert_int_equal(tr_comm_dtype_size((tr_comm_dtype)99), 0);
    assert_string_equal(tr_comm_opkind_name(TR_COMM_OP_REDUCE_SCATTER), "reduce_scatter");
    assert_string_equal(tr_comm_opkind_name((tr_comm_opkind)99), "?");
    tr_comm_config c = tr_comm_config_default();
    assert_true(c.timeout_s == 300.0);
    assert_int_equal(c.progress_thread, 0);
}

static tr_comm *one_rank_world(void)
{
    clear_env();
    tr_comm *w = NULL;
    int rc = tr_comm_init_world(NULL, &w);
    if (rc)
        fail_msg("init_world: %s", tr_errmsg());
    return w;
}

static void test_one_rank_operations(void **state)
{
    (void)state;
    tr_comm *w = one_rank_world();
    assert_int_equal(tr_comm_rank(w), 0);
    assert_int_equal(tr_comm_size(w), 1);
    assert_string_equal(tr_comm_name(w), "world");
    assert_string_equal(tr_comm_backend(w), "ucx");
    assert_int_equal(tr_comm_world_rank(w, 0), 0);
    assert_int_equal(tr_comm_world_rank(w, 1), -1);
    float a[5] = {1, 2, 3, 4, 5}, b[5] = {0};
    assert_int_equal(tr_comm_allreduce(w, a, b, 5, TR_COMM_F32, TR_COMM_SUM), TR_OK);
    assert_memory_equal(a, b, sizeof a);
    assert_int_equal(tr_comm_allreduce(w, a, a, 5, TR_COMM_F32, TR_COMM_MAX), TR_OK);
    memset(b, 0, sizeof b);
    assert_int_equal(tr_comm_reduce_scatter(w, a, b, 5, TR_COMM_F32, TR_COMM_SUM), TR_OK);
    assert_memory_equal(a, b, sizeof a);
    memset(b, 0, sizeof b);
    assert_int_equal(tr_comm_allgather(w, a, b, 5, TR_COMM_F32), TR_OK);
    assert_memory_equal(a, b, sizeof a);
    assert_int_equal(tr_comm_broadcast(w, a, 5, TR_COMM_F32, 0), TR_OK);
    assert_int_equal(tr_comm_barrier(w), TR_OK);
    assert_int_equal(tr_comm_allreduce(w, NULL, NULL, 0, TR_COMM_F64, TR_COMM_SUM), TR_OK);
    tr_comm_request *req = NULL;
    assert_int_equal(tr_comm_allreduce_async(w, a, b, 5, TR_COMM_F32, TR_COMM_MIN, &req), TR_OK);
    int done = 0;
    assert_int_equal(tr_comm_test(&req, &done), TR_OK);
    assert_int_equal(done, 1);
    assert_null(req);

    tr_comm_counters k;
    tr_comm_get_counters(w, &k);
    assert_int_equal(k.ops[TR_COMM_OP_ALLREDUCE], 4);
    assert_int_equal(k.bytes[TR_COMM_OP_ALLREDUCE], 60);
    assert_int_equal(k.ops[TR_COMM_OP_REDUCE_SCATTER], 1);
    assert_int_equal(k.ops[TR_COMM_OP_ALLGATHER], 1);
    assert_int_equal(k.bytes[TR_COMM_OP_ALLGATHER], 20);
    assert_int_equal(k.ops[TR_COMM_OP_BROADCAST], 1);
    assert_int_equal(k.ops[TR_COMM_OP_BARRIER], 1);
    tr_comm_reset_counters(w);
    tr_comm_get_counters(w, &k);
    assert_int_equal(k.ops[TR_COMM_OP_ALLREDUCE], 0);

    tr_comm *sub = NULL, *none = (tr_comm *)1;
    assert_int_equal(tr_comm_split(w, 5, 0, "tp", &sub), TR_OK);
    assert_non_null(sub);
    assert_string_equal(tr_comm_name(sub), "tp");
    assert_int_equal(tr_comm_size(sub), 1);
    assert_int_equal(tr_comm_allreduce(sub, a, b, 5, TR_COMM_F32, TR_COMM_SUM), TR_OK);
    assert_int_equal(tr_comm_split(w, TR_COMM_COLOR_NONE, 0, "dp", &none), TR_OK);
    assert_null(none);
    tr_comm_get_counters(w, &k);
    assert_int_equal(k.ops[TR_COMM_OP_SPLIT], 2);
    assert_int_equal(k.ops[TR_COMM_OP_ALLGATHER], 0); /* split's own traffic is not counted */
    tr_comm_destroy(sub);
    tr_comm_destroy(w);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    tr_comm *w = one_rank_world();
    float a[4] = {0}, b[4] = {0};
    tr_comm_request *req = NULL;
    expect_error(tr_comm_allreduce(w, NULL, b, 4, TR_COMM_F32, TR_COMM_SUM), TR_ERR_INVALID,
                 "allreduce: send buffer is NULL");
    expect_error(tr_comm_allreduce(w, a, NULL, 4, TR_COMM_F32, TR_COMM_SUM), TR_ERR_INVALID,
                 "allreduce: recv buffer is NULL");
    expect_error(tr_comm_allreduce(w, a, b, 4, (tr_comm_dtype)17, TR_COMM_SUM), TR_ERR_INVALID,
                 "invalid dtype 17");
    expect_error(tr_comm_allreduce(w, a, b, 4, TR_COMM_F32, (tr_comm_redop)9), TR_ERR_INVALID,
                 "invalid reduction op 9");
    expect_error(tr_comm_allreduce(w, a, b, SIZE_MAX / 2, TR_COMM_F32, TR_COMM_SUM),
                 TR_ERR_INVALID, "overflows");
    expect_error(tr_comm_allreduce(NULL, a, b, 4, TR_COMM_F32, TR_COMM_SUM), TR_ERR_INVALID,
                 "NULL communicator");
    expect_error(tr_comm_reduce_scatter(w, a, NULL, 4, TR_COMM_F32, TR_COMM_SUM), TR_ERR_INVALID,
                 "reduce_scatter: recv buffer is NULL");
    expect_error(tr_comm_allgather(w, NULL, b, 4, TR_COMM_F32), TR_ERR_INVALID,
                 "allgather: send buffer is NULL");
    expect_error(tr_comm_broadcast(w, a, 4, TR_COMM_F32, 1), TR_ERR_INVALID,
                 "broadcast: root 1 out of range 0..0");
    expect_error(tr_comm_broadcast(w, a, 4, TR_COMM_F32, -1), TR_ERR_INVALID,
                 "root -1 out of range");
    expect_error(tr_comm_send(w, a, 4, TR_COMM_F32, 0, 0), TR_ERR_INVALID,
                 "send: peer 0 is this rank itself");
    expect_error(tr_comm_recv(w, a, 4, TR_COMM_F32, 3, 0), TR_ERR_INVALID,
                 "recv: peer 3 out of range 0..0");
    expect_error(tr_comm_send_async(w, a, 4, TR_COMM_F32, 0, TR_COMM_TAG_MAX + 1, &req),
                 TR_ERR_INVALID, "send: tag 8388608 out of range 0..8388607");
    expect_error(tr_comm_barrier(NULL), TR_ERR_INVALID, "barrier on a NULL communicator");
    expect_error(tr_comm_wait(&req), TR_ERR_INVALID, "wait on a NULL request");
    int done = 0;
    expect_error(tr_comm_test(NULL, &done), TR_ERR_INVALID, "test on a NULL request");
    tr_comm *sub = NULL;
    expect_error(tr_comm_split(w, -2, 0, "tp", &sub), TR_ERR_INVALID, "color -2 is negative");
    expect_error(tr_comm_split(w, 0, 0, "", &sub), TR_ERR_INVALID, "needs a name");
    expect_error(tr_comm_split(w, 0, 0, "a-name-that-is-much-too-long-for-a-group", &sub),
                 TR_ERR_INVALID, "needs a name");
    expect_error(tr_comm_split(NULL, 0, 0, "tp", &sub), TR_ERR_INVALID, "split of a NULL");
    size_t one = 4, zero = 0, three = 3, huge = SIZE_MAX / 2;
    expect_error(tr_comm_alltoallv(NULL, a, &one, b, &one, TR_COMM_F32), TR_ERR_INVALID,
                 "alltoallv on a NULL communicator");
    expect_error(tr_comm_alltoallv(w, a, NULL, b, &one, TR_COMM_F32), TR_ERR_INVALID,
                 "alltoallv: the send counts are NULL");
    expect_error(tr_comm_alltoallv(w, a, &one, b, NULL, TR_COMM_F32), TR_ERR_INVALID,
                 "alltoallv: the recv counts are NULL");
    expect_error(tr_comm_alltoallv(w, NULL, &one, b, &one, TR_COMM_F32), TR_ERR_INVALID,
                 "alltoallv: send buffer is NULL");
    expect_error(tr_comm_alltoallv(w, a, &one, NULL, &one, TR_COMM_F32), TR_ERR_INVALID,
                 "alltoallv: recv buffer is NULL");
    expect_error(tr_comm_alltoallv(w, a, &one, b, &three, TR_COMM_F32), TR_ERR_INVALID,
                 "alltoallv: rank 0 sends itself 4 elements but expects 3");
    expect_error(tr_comm_alltoallv(w, a, &huge, b, &huge, TR_COMM_F32), TR_ERR_INVALID,
                 "alltoallv: send count 9223372036854775807 overflows");
    expect_error(tr_comm_alltoallv(w, a, &one, b, &one, (tr_comm_dtype)17), TR_ERR_INVALID,
                 "alltoallv: invalid dtype 17");
    assert_int_equal(tr_comm_alltoallv(w, NULL, &zero, NULL, &zero, TR_COMM_F32), TR_OK);
    a[0] = 1, a[1] = 2, a[2] = 3, a[3] = 4;
    assert_int_equal(tr_comm_alltoallv(w, a, &one, b, &one, TR_COMM_F32), TR_OK);
    assert_memory_equal(a, b, sizeof a); /* one rank: its own block, copied */
    tr_comm_tuning t = {.chunk_bytes = 10};
    expect_error(tr_comm_set_tuning(w, &t), TR_ERR_INVALID, "chunk_bytes 10 is below");
    tr_comm_destroy(w);
}

static void test_bad_config_and_env(void **state)
{
    (void)state;
    tr_comm *w = NULL;
    clear_env();
    tr_comm_config cfg = tr_comm_config_default();
    cfg.timeout_s = 0;
    expect_error(tr_comm_init_world(&cfg, &w), TR_ERR_CONFIG, "timeout must be > 0");
    setenv("WORLD_SIZE", "abc", 1);
    expect_error(tr_comm_init_world(NULL, &w), TR_ERR_CONFIG, "WORLD_SIZE='abc'");
    setenv("WORLD_SIZE", "2", 1);
    expect_error(tr_comm_init_world(NULL, &w), TR_ERR_CONFIG, "RANK is not set");
    setenv("RANK", "2", 1);
    expect_error(tr_comm_init_world(NULL, &w), TR_ERR_CONFIG, "RANK='2' is not an integer in 0..1");
    setenv("RANK", "1", 1);
    expect_error(tr_comm_init_world(NULL, &w), TR_ERR_CONFIG, "MASTER_ADDR is not set");
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    expect_error(tr_comm_init_world(NULL, &w), TR_ERR_CONFIG, "MASTER_PORT is not set");
    setenv("MASTER_PORT", "70000", 1);
    expect_error(tr_comm_init_world(NULL, &w), TR_ERR_CONFIG, "MASTER_PORT='70000'");
    tr_comm_rendezvous rv = {.rank = 3, .size = 2};
    expect_error(tr_comm_init(&rv, NULL, &w), TR_ERR_CONFIG, "rank 3 of world size 2");
    assert_null(w);
    clear_env();
}

/* Rank 1 of 2 whose rank 0 never serves: fails after the timeout naming the address. */
static void test_master_never_up(void **state)
{
    (void)state;
    int fd = -1;
    int port = refusing_port(&fd);
    tr_comm_rendezvous rv = {.rank = 1, .size = 2, .master_addr = "127.0.0.1", .master_port = port,
                             .job_token = "j"};
    tr_comm_config cfg = tr_comm_config_default();
    cfg.timeout_s = 1.0;
    tr_comm *w = NULL;
    double t0 = tr_now();
    char where[64];
    snprintf(where, sizeof where, "127.0.0.1:%d", port);
    expect_error(tr_comm_init(&rv, &cfg, &w), TR_ERR_TIMEOUT, where);
    expect_error(TR_ERR_TIMEOUT, TR_ERR_TIMEOUT, "rank 1 of 2");
    double dt = tr_now() - t0;
    assert_true(dt >= 0.9 && dt < 5.0);
    assert_null(w);
    close(fd);
}

/* The world's store, as another backend borrows it (tr_comm_store): present on a world that
 * has one, the same on its splits, absent on a one-rank world without MASTER_ADDR. */
/* A socket listening on a port of 127.0.0.1 (returned), until *fd is closed */
static int listening_port(int *fd)
{
    int port = refusing_port(fd);
    assert_int_equal(listen(*fd, 1), 0);
    return port;
}

static void *close_later(void *fd)
{
    struct timespec ts = {.tv_sec = 0, .tv_nsec = 300 * 1000 * 1000};
    nanosleep(&ts, NULL);
    close(*(int *)fd);
    return NULL;
}

/* The store's port in use: it waits up to 2 s for the port (a rank's connect may have taken it
 * as its own, client.c), then says so; a port freed within that time (0.3 s here) is served.
 * (No timing asserted: the served port is what shows the wait.) */
static void test_store_port_in_use(void **state)
{
    (void)state;
    int fd, port = listening_port(&fd);
    tr_store_server *s = NULL;
    assert_int_equal(tr_store_server_start("127.0.0.1", port, NULL, NULL, 0, &s), TR_ERR_COMM);
    assert_non_null(strstr(tr_errmsg(), "cannot listen"));
    assert_null(s);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, close_later, &fd), 0);
    assert_int_equal(tr_store_server_start("127.0.0.1", port, NULL, NULL, 0, &s), TR_OK);
    assert_int_equal(tr_store_server_port(s), port);
    pthread_join(t, NULL);
    tr_store_server_stop(s);
}

static void test_world_store(void **state)
{
    (void)state;
    clear_env();
    tr_comm *w = NULL, *sub = NULL, *bare = NULL;
    /* find a free port, free it, start the world's store on it; tests running beside this one
     * may take the port in between, so a few tries */
    int rc = TR_ERR_INTERNAL;
    for (int attempt = 0; attempt < 5 && rc != TR_OK; attempt++) {
        tr_store_server *s = NULL;
        assert_int_equal(tr_store_server_start("127.0.0.1", 0, NULL, NULL, 0, &s), TR_OK);
        int port = tr_store_server_port(s);
        tr_store_server_stop(s);
        tr_comm_rendezvous rv = {.rank = 0, .size = 1, .master_addr = "127.0.0.1",
                                 .master_port = port};
        rc = tr_comm_init(&rv, NULL, &w);
    }
    assert_int_equal(rc, TR_OK);
    assert_string_equal(tr_comm_backend(w), "ucx");
    const char *session = NULL;
    tr_store *st = tr_comm_store(w, &session);
    assert_non_null(st);
    assert_non_null(session);
    assert_true(session[0] == 'w'); /* "w<generation>" */
    assert_int_equal(tr_comm_split(w, 0, 0, "sub", &sub), TR_OK);
    assert_ptr_equal(tr_comm_store(sub, NULL), st);
    int64_t v = 0;
    assert_int_equal(tr_store_add(st, "borrowed", 2, &v), TR_OK);
    assert_int_equal(v, 2);
    tr_comm_destroy(sub);
    tr_comm_destroy(w);
    assert_int_equal(tr_comm_init_world(NULL, &bare), TR_OK);
    session = "x";
    assert_null(tr_comm_store(bare, &session));
    assert_null(session);
    assert_null(tr_comm_store(NULL, NULL));
    tr_comm_destroy(bare);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_block_partition),
        cmocka_unit_test(test_sizes_and_names),
        cmocka_unit_test(test_one_rank_operations),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_bad_config_and_env),
        cmocka_unit_test(test_master_never_up),
        cmocka_unit_test(test_world_store),
        cmocka_unit_test(test_store_port_in_use),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
