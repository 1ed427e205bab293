/* The rendezvous store: get/set/wait/add/check, parked waiters, limits, job token, session
 * retry, connect timeout, and a fuzz test that throws random, truncated and oversized frames
 * at a live server and then checks it still serves a good client. */
#include "comm/comm.h"
#include "comm/store/store_internal.h" /* store_server_start_capped() */

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

static void expect_error(int rc, int code, const char *needle)
{
    assert_int_equal(rc, code);
    if (!strstr(tr_errmsg(), needle))
        fail_msg("message '%s' lacks '%s'", tr_errmsg(), needle);
}

static tr_store_server *server;
static int port;

static int setup(void **state)
{
    (void)state;
    if (tr_store_server_start("127.0.0.1", 0, "tok", "s1", 0, &server))
        return -1;
    port = tr_store_server_port(server);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tr_store_server_stop(server);
    server = NULL;
    return 0;
}

static tr_store *client(double timeout)
{
    tr_store *st = NULL;
    if (tr_store_connect("127.0.0.1", port, "tok", "s1", -1, 0, timeout, &st))
        fail_msg("connect: %s", tr_errmsg());
    return st;
}

static void test_set_get_add_check(void **state)
{
    (void)state;
    tr_store *st = client(5);
    assert_int_equal(tr_store_set(st, "k1", "hello", 5), TR_OK);
    void *v = NULL;
    size_t len = 0;
    assert_int_equal(tr_store_get(st, "k1", &v, &len), TR_OK);
    assert_int_equal(len, 5);
    assert_memory_equal(v, "hello", 5);
    free(v);
    assert_int_equal(tr_store_set(st, "k1", "", 0), TR_OK); /* replace with an empty value */
    assert_int_equal(tr_store_get(st, "k1", &v, &len), TR_OK);
    assert_int_equal(len, 0);
    free(v);
    int64_t x = 0;
    assert_int_equal(tr_store_add(st, "ctr", 5, &x), TR_OK);
    assert_int_equal(x, 5);
    assert_int_equal(tr_store_add(st, "ctr", -7, &x), TR_OK);
    assert_int_equal(x, -2);
    int exists = 1;
    assert_int_equal(tr_store_check(st, "nope", &exists), TR_OK);
    assert_int_equal(exists, 0);
    assert_int_equal(tr_store_check(st, "ctr", &exists), TR_OK);
    assert_int_equal(exists, 1);
    expect_error(tr_store_add(st, "k1", 1, &x), TR_ERR_COMM, "add on a non-counter key");
    /* a big value round-trips */
    size_t big = TR_STORE_MAX_VALUE;
    char *data = malloc(big);
    for (size_t i = 0; i < big; i++)
        data[i] = (char)(i * 31);
    assert_int_equal(tr_store_set(st, "big", data, big), TR_OK);
    assert_int_equal(tr_store_get(st, "big", &v, &len), TR_OK);
    assert_int_equal(len, big);
    assert_memory_equal(v, data, big);
    free(v);
    free(data);
    tr_store_close(st);
}

static void test_limits(void **state)
{
    (void)state;
    tr_store *st = client(5);
    char key[TR_STORE_MAX_KEY + 2];
    memset(key, 'k', sizeof key);
    key[TR_STORE_MAX_KEY + 1] = 0;
    expect_error(tr_store_set(st, key, "v", 1), TR_ERR_INVALID,
                 "key of 1025 bytes is longer than the limit of 1024");
    key[TR_STORE_MAX_KEY] = 0; /* exactly 1 KiB is fine */
    assert_int_equal(tr_store_set(st, key, "v", 1), TR_OK);
    expect_error(tr_store_set(st, "", "v", 1), TR_ERR_INVALID, "empty key");
    static char huge[TR_STORE_MAX_VALUE + 1];
    expect_error(tr_store_set(st, "h", huge, sizeof huge), TR_ERR_INVALID,
                 "exceeds the 1 MiB limit");
    expect_error(tr_store_set(st, "h", NULL, 3), TR_ERR_INVALID, "NULL value");
    tr_store_close(st);
}

typedef struct {
    int port;
    double delay;
} setter_arg;

static void *late_setter(void *p)
{
    setter_arg *a = p;
    usleep((useconds_t)(a->delay * 1e6));
    tr_store *st = NULL;
    if (tr_store_connect("127.0.0.1", a->port, "tok", "s1", -1, 0, 5, &st) == TR_OK) {
        if (tr_store_set(st, "late", "v42", 3))
            fprintf(stderr, "late_setter: %s\n", tr_errmsg()); /* the waiter then times out */
        tr_store_close(st);
    }
    return NULL;
}

static void test_wait_and_get_block_until_set(void **state)
{
    (void)state;
    setter_arg a = {port, 0.3};
    pthread_t t;
    pthread_create(&t, NULL, late_setter, &a);
    tr_store *st1 = client(5), *st2 = client(5);
    const char *keys[] = {"late"};
    assert_int_equal(tr_store_wait(st1, keys, 1), TR_OK);
    void *v = NULL;
    size_t len = 0;
    assert_int_equal(tr_store_get(st2, "late", &v, &len), TR_OK);
    assert_memory_equal(v, "v42", 3);
    free(v);
    pthread_join(t, NULL);
    tr_store_close(st1);
    tr_store_close(st2);
}

static void test_get_timeout_then_reconnect(void **state)
{
    (void)state;
    tr_store *st = client(0.3);
    void *v = NULL;
    size_t len = 0;
    char where[64];
    snprintf(where, sizeof where, "store 127.0.0.1:%d: no answer for key 'absent' within 0.3 s", port);
    expect_error(tr_store_get(st, "absent", &v, &len), TR_ERR_TIMEOUT, where);
    assert_int_equal(tr_store_set(st, "after", "x", 1), TR_OK); /* reconnects */
    tr_store_close(st);
}

static void test_token_and_session(void **state)
{
    (void)state;
    tr_store *st = NULL;
    expect_error(tr_store_connect("127.0.0.1", port, "other-job", "s1", -1, 0, 2, &st),
                 TR_ERR_CONFIG, "rejected this rank: another job's identity");
    assert_null(st);
    double t0 = tr_now();
    expect_error(tr_store_connect("127.0.0.1", port, "tok", "s2", -1, 0, 0.5, &st), TR_ERR_TIMEOUT,
                 "server of another session");
    assert_true(tr_now() - t0 < 3);
    expect_error(tr_store_connect("127.0.0.1", 0, "tok", "s1", -1, 0, 1, &st), TR_ERR_INVALID,
                 "port 0 out of range");
    expect_error(tr_store_connect("127.0.0.1", port, "tok", "s1", -1, 0, 0, &st), TR_ERR_INVALID,
                 "timeout must be > 0");
    tr_store_server *bad = NULL;
    expect_error(tr_store_server_start("127.0.0.1", 70000, NULL, NULL, 0, &bad), TR_ERR_INVALID,
                 "port 70000 out of range");
    assert_null(bad);
}

static void test_connect_retries_until_server_up(void **state)
{
    (void)state;
    /* a port nobody serves yet: the client retries; start the server 0.4 s later */
    tr_store_server *tmp = NULL;
    assert_int_equal(tr_store_server_start("127.0.0.1", 0, "t2", NULL, 0, &tmp), TR_OK);
    int p = tr_store_server_port(tmp);
    tr_store_server_stop(tmp);
    tr_store *st = NULL;
    char where[64];
    snprintf(where, sizeof where, "rendezvous store at 127.0.0.1:%d", p);
    double t0 = tr_now();
    expect_error(tr_store_connect("127.0.0.1", p, "t2", NULL, -1, 0, 0.5, &st), TR_ERR_TIMEOUT, where);
    assert_true(tr_now() - t0 >= 0.45);
    tmp = NULL;
    pid_t child = fork();
    if (child == 0) {
        usleep(400000);
        tr_store_server *s2 = NULL;
        if (tr_store_server_start("127.0.0.1", p, "t2", NULL, 0, &s2))
            _exit(1);
        sleep(3);
        tr_store_server_stop(s2);
        _exit(0);
    }
    assert_int_equal(tr_store_connect("127.0.0.1", p, "t2", NULL, -1, 0, 5, &st), TR_OK);
    assert_int_equal(tr_store_set(st, "x", "1", 1), TR_OK);
    tr_store_close(st);
    kill(child, 15);
    waitpid(child, NULL, 0);
}

/* ---------------------------------------------------------------- fuzz */

static int raw_connect(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static void put_frame(uint8_t *buf, size_t *len, uint8_t op, uint32_t klen, uint32_t vlen)
{
    memcpy(buf + *len, "TRS1", 4);
    buf[*len + 4] = op;
    for (int i = 0; i < 4; i++) {
        buf[*len + 5 + i] = (uint8_t)(klen >> (8 * i));
        buf[*len + 9 + i] = (uint8_t)(vlen >> (8 * i));
    }
    *len += 13;
}

/* Read whatever the server answers within a short time (it must not hang us). */
static void drain(int fd)
{
    uint8_t buf[4096];
    struct pollfd p = {.fd = fd, .events = POLLIN};
    while (poll(&p, 1, 20) > 0 && recv(fd, buf, sizeof buf, MSG_DONTWAIT) > 0) {
    }
}

static void test_fuzz_frames(void **state)
{
    (void)state;
    uint64_t seed = 12345;
    tr_store *good = client(5);
    static uint8_t buf[1 << 16];
    for (int iter = 0; iter < 400; iter++) {
        int fd = raw_connect();
        assert_true(fd >= 0);
        size_t len = 0;
        double u = tr_rand_uniform(seed, 1, (uint64_t)iter);
        int kind = iter % 8;
        if (kind == 0) { /* pure noise */
            len = 1 + (size_t)(u * 4000);
            for (size_t i = 0; i < len; i++)
                buf[i] = (uint8_t)(tr_rand_uniform(seed, 2, (uint64_t)iter * 8192 + i) * 256);
        } else if (kind == 1) { /* oversized key length in the header */
            put_frame(buf, &len, 2, 0xfffffff0u, 4);
        } else if (kind == 2) { /* oversized value after a good hello */
            put_frame(buf, &len, 1, 3, 2);
            memcpy(buf + len, "toks1", 5);
            len += 5;
            put_frame(buf, &len, 2, 1, (1u << 20) + 1);
        } else if (kind == 3) { /* truncated frame: header promises more than is sent */
            put_frame(buf, &len, 1, 3, 2);
            memcpy(buf + len, "to", 2);
            len += 2;
        } else if (kind == 4) { /* request before hello */
            put_frame(buf, &len, 3, 1, 0);
            buf[len++] = 'k';
        } else if (kind == 5) { /* unknown op, then garbage */
            put_frame(buf, &len, (uint8_t)(7 + (int)(u * 200)), 1, 0);
            buf[len++] = 'z';
            for (int i = 0; i < 50; i++)
                buf[len++] = (uint8_t)i;
        } else if (kind == 6) { /* hello, then a key with a NUL, an add with a bad length */
            put_frame(buf, &len, 1, 3, 2);
            memcpy(buf + len, "toks1", 5);
            len += 5;
            put_frame(buf, &len, 2, 3, 1);
            memcpy(buf + len, "a\0bv", 4);
            len += 4;
            put_frame(buf, &len, 4, 1, 3);
            memcpy(buf + len, "c123", 4);
            len += 4;
        } else { /* a valid hello and a random-sized partial body, then close */
            put_frame(buf, &len, 1, 3, 2);
            memcpy(buf + len, "toks1", 5);
            len += 5;
            put_frame(buf, &len, 2, 5, (uint32_t)(u * 100000));
            memcpy(buf + len, "fuzzk", 5);
            len += 5 + (size_t)(u * 1000);
        }
        ssize_t w = send(fd, buf, len, MSG_NOSIGNAL);
        (void)w;
        if (iter % 3 == 0)
            drain(fd);
        close(fd);
        if (iter % 50 == 0) { /* the server keeps serving a good client meanwhile */
            char key[32];
            snprintf(key, sizeof key, "alive%d", iter);
            assert_int_equal(tr_store_set(good, key, "y", 1), TR_OK);
        }
    }
    /* many idle connections open at once do not block others */
    int idle[64];
    for (int i = 0; i < 64; i++)
        idle[i] = raw_connect();
    tr_store *fresh = client(5);
    assert_int_equal(tr_store_set(fresh, "final", "ok", 2), TR_OK);
    void *v = NULL;
    size_t vlen = 0;
    assert_int_equal(tr_store_get(good, "final", &v, &vlen), TR_OK);
    assert_memory_equal(v, "ok", 2);
    free(v);
    int exists = 0;
    assert_int_equal(tr_store_check(fresh, "fuzzk", &exists), TR_OK);
    assert_int_equal(exists, 0); /* no truncated set went through */
    for (int i = 0; i < 64; i++)
        if (idle[i] >= 0)
            close(idle[i]);
    tr_store_close(fresh);
    tr_store_close(good);
}

/* The server answers a malformed header with an error frame naming the problem. */
static void test_malformed_gets_error_reply(void **state)
{
    (void)state;
    int fd = raw_connect();
    uint8_t buf[64];
    size_t len = 0;
    put_frame(buf, &len, 1, 3, 2);
    memcpy(buf + len, "toks1", 5);
    len += 5;
    put_frame(buf, &len, 2, 2000, 1);
    assert_int_equal(send(fd, buf, len, MSG_NOSIGNAL), (ssize_t)len);
    uint8_t resp[256];
    size_t got = 0;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    while (poll(&p, 1, 2000) > 0) {
        ssize_t r = recv(fd, resp + got, sizeof resp - 1 - got, 0);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    resp[got] = 0;
    assert_true(got > 10);
    assert_int_equal(resp[0], 0); /* hello ok */
    assert_int_equal(resp[5], 1); /* then an error */
    assert_non_null(strstr((char *)resp + 10, "key longer than 1 KiB"));
}

/* ---------------------------------------------------------------- unauthenticated peers */

static long rss_kib(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, resident = 0;
    if (!f || fscanf(f, "%ld %ld", &pages, &resident) != 2)
        fail_msg("cannot read /proc/self/statm");
    fclose(f);
    return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

/* Sends what it can of len bytes (blocking, 5 s at most); the server may close on us. */
static void send_some(int fd, const uint8_t *p, size_t len)
{
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    while (len > 0) {
        ssize_t w = send(fd, p, len, MSG_NOSIGNAL);
        if (w <= 0)
            return;
        p += w;
        len -= (size_t)w;
    }
}

/* 200 connections that never say hello, each sending a 1 MiB set: the server buffers none of
 * it (it refuses the request at its header), so rank 0's memory does not grow by ~200 MiB;
 * a real client is served meanwhile. */
static void test_unauthenticated_memory_bound(void **state)
{
    (void)state;
    enum { N = 200 };
    static uint8_t frame[13 + 1 + TR_STORE_MAX_VALUE];
    size_t len = 0;
    put_frame(frame, &len, 2, 1, TR_STORE_MAX_VALUE);
    memset(frame + len, 'x', sizeof frame - len); /* touched now: not growth later */
    tr_store *good = client(5);
    assert_int_equal(tr_store_set(good, "before", "1", 1), TR_OK);
    long before = rss_kib();
    int fds[N];
    for (int i = 0; i < N; i++) {
        fds[i] = raw_connect();
        assert_true(fds[i] >= 0);
        send_some(fds[i], frame, sizeof frame - 1); /* all but the last byte: never complete */
    }
    for (int i = 0; i < 3; i++) /* the server has read what the sockets held */
        assert_int_equal(tr_store_set(good, "during", "2", 1), TR_OK);
    long grown = rss_kib() - before;
    for (int i = 0; i < N; i++)
        close(fds[i]);
    print_message("rss growth with %d unauthenticated 1 MiB sets in flight: %ld KiB\n", N, grown);
    if (grown > 16 * 1024)
        fail_msg("rank 0's memory grew by %ld KiB for %d unauthenticated connections", grown, N);
    tr_store_close(good);
}

/* The connection table full of peers that never say hello: a real rank still gets in at once
 * (the oldest unauthenticated connection makes room), instead of after their 10 s. */
static void test_full_table_admits_a_rank(void **state)
{
    (void)state;
    enum { N = 1100 };
    static int fds[N];
    for (int i = 0; i < N; i++)
        fds[i] = raw_connect();
    usleep(200000); /* the server has accepted them */
    tr_store *st = NULL;
    double t0 = tr_now();
    int rc = tr_store_connect("127.0.0.1", port, "tok", "s1", -1, 0, 3, &st);
    double dt = tr_now() - t0;
    for (int i = 0; i < N; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    if (rc)
        fail_msg("a rank could not connect next to %d idle connections: %s", N, tr_errmsg());
    assert_true(dt < 2.0);
    assert_int_equal(tr_store_set(st, "in", "1", 1), TR_OK);
    tr_store_close(st);
}

/* ---------------------------------------------------------------- job identity */

typedef struct {
    int port, rank, size;
    const char *key;
    int rc;
    char msg[512];
} waiter_arg;

/* A rank of the job waiting at rendezvous (a get of a key nobody sets). */
static void *waiter(void *p)
{
    waiter_arg *a = p;
    tr_store *st = NULL;
    a->rc = tr_store_connect("127.0.0.1", a->port, "job", "w0", a->rank, a->size, 30, &st);
    if (!a->rc) {
        void *v = NULL;
        size_t len = 0;
        a->rc = tr_store_get(st, a->key, &v, &len);
        free(v);
    }
    snprintf(a->msg, sizeof a->msg, "%s", a->rc ? tr_errmsg() : "");
    tr_store_close(st);
    return NULL;
}

/* A server for `world` ranks whose rank 0 waits at rendezvous; then a client presenting
 * (token, rank, size) is refused with `told_claimant`, and rank 0's wait fails within 2 s with
 * `told_rank0`. Returns the server (its port in *p) for more checks. */
static tr_store_server *refused_claim(int world, const char *token, int rank, int size,
                                     const char *told_claimant, const char *told_rank0, int *p)
{
    tr_store_server *s = NULL;
    assert_int_equal(tr_store_server_start("127.0.0.1", 0, "job", "w0", world, &s), TR_OK);
    *p = tr_store_server_port(s);
    waiter_arg w = {.port = *p, .rank = 0, .size = world, .key = "tr/w0/ucx/1"};
    pthread_t t;
    pthread_create(&t, NULL, waiter, &w);
    usleep(200000); /* rank 0 is parked on rank 1's key */
    tr_store *st = NULL;
    double t0 = tr_now();
    expect_error(tr_store_connect("127.0.0.1", *p, token, "w0", rank, size, 5, &st),
                 TR_ERR_CONFIG, told_claimant);
    assert_null(st);
    pthread_join(t, NULL);
    assert_int_equal(w.rc, TR_ERR_CONFIG);
    if (!strstr(w.msg, told_rank0))
        fail_msg("rank 0 was told: %s", w.msg);
    assert_true(tr_now() - t0 < 2.0);
    return s;
}

/* A rank of this world refused for another job's token while the world forms stops the
 * rendezvous: the job's waiting rank fails at once naming it, and so does a late rank. */
static void test_foreign_rank_stops_rendezvous(void **state)
{
    (void)state;
    int p = 0;
    tr_store_server *s = refused_claim(3, "other-job", 1, 3,
                                       "rejected this rank: another job's identity",
                                       "rendezvous was stopped: rank 1 of 3 presented another "
                                       "job's identity", &p);
    tr_store *st = NULL; /* rank 2, of the right job, comes late: told the same */
    expect_error(tr_store_connect("127.0.0.1", p, "job", "w0", 2, 3, 5, &st), TR_ERR_CONFIG,
                 "rendezvous was stopped: rank 1 of 3");
    assert_null(st);
    tr_store_server_stop(s);
}

/* A rank of this job that claims another world size is refused, and stops the rendezvous. */
static void test_other_world_size_stops_rendezvous(void **state)
{
    (void)state;
    int p = 0;
    tr_store_server_stop(refused_claim(2, "job", 1, 3, "this rank (1) says WORLD_SIZE=3 but the "
                                                       "job's rank 0 has WORLD_SIZE=2",
                                       "rank 1 says WORLD_SIZE=3 but this job has WORLD_SIZE=2",
                                       &p));
}

/* Once every rank has joined, or for a rank that has, another job's rank that finds this
 * store (the same port) is refused and nothing else happens: the job goes on. */
static void test_foreign_rank_after_join_is_only_refused(void **state)
{
    (void)state;
    tr_store_server *s = NULL;
    assert_int_equal(tr_store_server_start("127.0.0.1", 0, "job", "w0", 3, &s), TR_OK);
    int p = tr_store_server_port(s);
    tr_store *r0 = NULL, *r1 = NULL, *r2 = NULL, *x = NULL;
    assert_int_equal(tr_store_connect("127.0.0.1", p, "job", "w0", 0, 3, 5, &r0), TR_OK);
    assert_int_equal(tr_store_connect("127.0.0.1", p, "job", "w0", 1, 3, 5, &r1), TR_OK);
    /* rank 1 has joined: a foreign rank 1 is not the one the world waits for */
    expect_error(tr_store_connect("127.0.0.1", p, "other", "w0", 1, 3, 5, &x), TR_ERR_CONFIG,
                 "another job's identity");
    /* a foreign rank of another world size: another job's, not this world's rank 2 */
    expect_error(tr_store_connect("127.0.0.1", p, "other", "w0", 2, 4, 5, &x), TR_ERR_CONFIG,
                 "another job's identity");
    assert_int_equal(tr_store_connect("127.0.0.1", p, "job", "w0", 2, 3, 5, &r2), TR_OK);
    /* formed: even a foreign claim of a rank slot stops nothing */
    expect_error(tr_store_connect("127.0.0.1", p, "other", "w0", 2, 3, 5, &x), TR_ERR_CONFIG,
                 "another job's identity");
    expect_error(tr_store_connect("127.0.0.1", p, "job", "w0", 1, 5, 5, &x), TR_ERR_CONFIG,
                 "says WORLD_SIZE=5");
    assert_int_equal(tr_store_set(r0, "k", "v", 1), TR_OK);
    void *v = NULL;
    size_t len = 0;
    assert_int_equal(tr_store_get(r2, "k", &v, &len), TR_OK);
    free(v);
    /* a rank that reconnects (after a timeout) is welcome again */
    tr_store_close(r1);
    assert_int_equal(tr_store_connect("127.0.0.1", p, "job", "w0", 1, 3, 5, &r1), TR_OK);
    assert_int_equal(tr_store_set(r1, "k2", "v", 1), TR_OK);
    tr_store_close(r0);
    tr_store_close(r1);
    tr_store_close(r2);
    tr_store_server_stop(s);
}

/* One poll round that drops a connection and then serves a set on another (which looks for
 * parked waiters among all connections) must not touch the dropped one. The server runs in a
 * child that is stopped while both frames are queued, so they arrive in the same round. */
static void test_drop_and_set_in_one_round(void **state)
{
    (void)state;
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    pid_t child = fork();
    if (child == 0) {
        tr_store_server *s = NULL;
        if (tr_store_server_start("127.0.0.1", 0, "tok", "s1", 0, &s))
            _exit(3);
        int sp = tr_store_server_port(s);
        if (write(pfd[1], &sp, sizeof sp) != (ssize_t)sizeof sp)
            _exit(3);
        pause();
        _exit(0);
    }
    int saved = port;
    assert_int_equal(read(pfd[0], &port, sizeof port), (ssize_t)sizeof port);
    int bad = raw_connect(), good = raw_connect(); /* bad is accepted first: a lower slot */
    assert_true(bad >= 0 && good >= 0);
    uint8_t buf[64], resp[64];
    size_t len = 0;
    put_frame(buf, &len, 1, 3, 2);
    memcpy(buf + len, "toks1", 5);
    len += 5;
    assert_int_equal(send(good, buf, len, MSG_NOSIGNAL), (ssize_t)len);
    assert_int_equal(recv(good, resp, 5, MSG_WAITALL), 5);
    assert_int_equal(resp[0], 0);
    usleep(100000);
    kill(child, SIGSTOP);
    assert_int_equal(send(bad, "XXXXXXXXXXXXX", 13, MSG_NOSIGNAL), 13); /* bad magic: dropped */
    len = 0;
    put_frame(buf, &len, 2, 1, 1);
    buf[len++] = 'k';
    buf[len++] = 'v';
    assert_int_equal(send(good, buf, len, MSG_NOSIGNAL), (ssize_t)len);
    usleep(100000);
    kill(child, SIGCONT);
    struct pollfd pf = {.fd = good, .events = POLLIN};
    assert_true(poll(&pf, 1, 5000) > 0);
    ssize_t got = recv(good, resp, 5, MSG_WAITALL);
    int status = 0;
    kill(child, SIGTERM);
    waitpid(child, &status, 0);
    close(bad);
    close(good);
    close(pfd[0]);
    close(pfd[1]);
    port = saved;
    if (got != 5 || resp[0] != 0)
        fail_msg("the set got no answer (%zd bytes); the server %s", got,
                 WIFSIGNALED(status) && WTERMSIG(status) != SIGTERM ? "crashed" : "did not crash");
}

/* A world of more ranks than the table's 1024 slots for unauthenticated peers: every rank gets
 * in and stays connected (ranks keep their connection for the job's lifetime). */
static void test_world_larger_than_1024(void **state)
{
    (void)state;
    enum { W = 1300 };
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur < 2 * W + 64) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
        if (rl.rlim_cur < 2 * W + 64)
            skip(); /* both ends of W connections in this process */
    }
    tr_store_server *s = NULL;
    assert_int_equal(tr_store_server_start("127.0.0.1", 0, "job", "w0", W, &s), TR_OK);
    int p = tr_store_server_port(s);
    static tr_store *ranks[W];
    for (int r = 0; r < W; r++)
        if (tr_store_connect("127.0.0.1", p, "job", "w0", r, W, 2, &ranks[r]))
            fail_msg("rank %d of %d: %s", r, W, tr_errmsg());
    int64_t n = 0;
    for (int r = 0; r < W; r++)
        assert_int_equal(tr_store_add(ranks[r], "joined", 1, &n), TR_OK);
    assert_int_equal(n, W);
    for (int r = 0; r < W; r++)
        tr_store_close(ranks[r]);
    tr_store_server_stop(s);
}

/* ---------------------------------------------------------------- hostile peers */

static int raw_connect_to(int p)
{
    int saved = port;
    port = p;
    int fd = raw_connect();
    port = saved;
    return fd;
}

/* "127.0.0.1:<local port of fd>": how the server names this peer. */
static void peer_name(int fd, char *out, size_t n)
{
    struct sockaddr_in a;
    socklen_t l = sizeof a;
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &l), 0);
    snprintf(out, n, "127.0.0.1:%u", (unsigned)ntohs(a.sin_port));
}

/* Reads until the server closes (5 s at most): the reply bytes, NUL-terminated; -1 if the
 * connection stayed open. */
static ssize_t read_to_eof(int fd, uint8_t *buf, size_t cap)
{
    size_t got = 0;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    while (poll(&p, 1, 5000) > 0) {
        ssize_t r = recv(fd, buf + got, cap - 1 - got, 0);
        if (r <= 0) {
            buf[got] = 0;
            return r == 0 ? (ssize_t)got : -1;
        }
        got += (size_t)r;
        if (got == cap - 1)
            return -1;
    }
    return -1;
}

/* stderr into a file for a while (the server thread logs there). */
static int stderr_saved = -1, stderr_file = -1;

static void capture_stderr(void)
{
    char path[] = "/tmp/test_store_log_XXXXXX";
    stderr_file = mkstemp(path);
    assert_true(stderr_file >= 0);
    unlink(path);
    fflush(stderr);
    stderr_saved = dup(2);
    dup2(stderr_file, 2);
}

/* A teardown too: a failed assertion leaves the test before it could give stderr back. */
static int release_stderr(void **state)
{
    (void)state;
    if (stderr_saved < 0)
        return 0;
    fflush(stderr);
    dup2(stderr_saved, 2);
    close(stderr_saved);
    close(stderr_file);
    stderr_saved = stderr_file = -1;
    return 0;
}

/* Whether the captured log has a line with both a and b, within `wait` seconds. */
static int log_has(const char *a, const char *b, double wait)
{
    static char text[1 << 16];
    double t0 = tr_now();
    do {
        fflush(stderr);
        ssize_t n = pread(stderr_file, text, sizeof text - 1, 0);
        text[n > 0 ? n : 0] = 0;
        for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"))
            if (strstr(line, a) && strstr(line, b))
                return 1;
        usleep(20000);
    } while (tr_now() - t0 < wait);
    return 0;
}

/* Every hostile peer is dropped with a warning on the server naming its address and what it
 * did; the bad ones get an error reply first; a good client is served all along. */
static void test_bad_peers_logged_by_address(void **state)
{
    (void)state;
    tr_store_server *s = NULL; /* its own server: the log's rate limit is fresh */
    assert_int_equal(tr_store_server_start("127.0.0.1", 0, "tok", "s1", 0, &s), TR_OK);
    int p = tr_store_server_port(s);
    capture_stderr();
    double t0 = tr_now();
    int idle = raw_connect_to(p); /* connects and never says anything */
    tr_store *good = NULL;
    assert_int_equal(tr_store_connect("127.0.0.1", p, "tok", "s1", -1, 0, 5, &good), TR_OK);
    char who[4][64], fail[256] = "";
    uint8_t buf[256], resp[512];
    size_t len;
    int fd[4];
    for (int i = 0; i < 4; i++) {
        fd[i] = raw_connect_to(p);
        assert_true(fd[i] >= 0);
        peer_name(fd[i], who[i], sizeof who[i]);
    }
    /* 0: garbage with no magic */
    assert_int_equal(send(fd[0], "GET / HTTP/1.1\r\n\r\n", 18, MSG_NOSIGNAL), 18);
    /* 1: a good hello, then a header with a 4 GiB key */
    len = 0;
    put_frame(buf, &len, 1, 3, 2);
    memcpy(buf + len, "toks1", 5);
    len += 5;
    put_frame(buf, &len, 2, 0xffffffffu, 0xffffffffu);
    assert_int_equal(send(fd[1], buf, len, MSG_NOSIGNAL), (ssize_t)len);
    /* 2: 5 bytes of a header, then close */
    assert_int_equal(send(fd[2], "TRS1\x02", 5, MSG_NOSIGNAL), 5);
    /* 3: a good hello and a set promising 100 bytes of value, 10 of them, then close */
    len = 0;
    put_frame(buf, &len, 1, 3, 2);
    memcpy(buf + len, "toks1", 5);
    len += 5;
    put_frame(buf, &len, 2, 1, 100);
    memset(buf + len, 'v', 11);
    len += 11;
    assert_int_equal(send(fd[3], buf, len, MSG_NOSIGNAL), (ssize_t)len);
    ssize_t got = read_to_eof(fd[0], resp, sizeof resp);
    assert_true(got > 5);
    assert_int_equal(resp[0], 1); /* an error reply, then the server closed */
    assert_non_null(strstr((char *)resp + 5, "bad magic"));
    got = read_to_eof(fd[1], resp, sizeof resp);
    assert_true(got > 10);
    assert_int_equal(resp[0], 0);
    assert_int_equal(resp[5], 1);
    assert_non_null(strstr((char *)resp + 10, "key longer than 1 KiB"));
    close(fd[2]);
    struct pollfd pf = {.fd = fd[3], .events = POLLIN}; /* the hello's answer */
    assert_true(poll(&pf, 1, 5000) > 0);
    assert_int_equal(recv(fd[3], resp, 5, MSG_WAITALL), 5);
    close(fd[3]);
    assert_int_equal(tr_store_set(good, "k", "v", 1), TR_OK);
    if (!log_has(who[0], "bad magic", 5))
        snprintf(fail, sizeof fail, "no warning naming %s for bad magic", who[0]);
    else if (!log_has(who[1], "key longer than 1 KiB", 5))
        snprintf(fail, sizeof fail, "no warning naming %s for a 4 GiB key", who[1]);
    else if (!log_has(who[2], "in the middle of a request header (5 of 13 bytes)", 5))
        snprintf(fail, sizeof fail, "no warning naming %s for a cut header", who[2]);
    else if (!log_has(who[3], "in the middle of a request (11 of 101 bytes", 5))
        snprintf(fail, sizeof fail, "no warning naming %s for a cut body", who[3]);
    /* the idle peer: dropped after 10 s without a hello, the good client served meanwhile */
    char idle_who[64];
    peer_name(idle, idle_who, sizeof idle_who);
    assert_true(tr_now() - t0 < 9);
    assert_int_equal(tr_store_set(good, "k2", "v", 1), TR_OK);
    got = -1; /* 5 s at most per call: the drop comes within 10 to 11 s */
    while (got < 0 && tr_now() - t0 < 14)
        got = read_to_eof(idle, resp, sizeof resp);
    double dt = tr_now() - t0;
    if (!fail[0] && got != 0)
        snprintf(fail, sizeof fail, "the idle peer was not dropped (%zd)", got);
    if (!fail[0] && !log_has(idle_who, "no hello within 10 s", 3))
        snprintf(fail, sizeof fail, "no warning naming %s for an idle peer", idle_who);
    release_stderr(NULL);
    close(idle);
    close(fd[0]);
    close(fd[1]);
    if (fail[0])
        fail_msg("%s", fail);
    assert_true(dt > 9.5 && dt < 13.5);
    assert_int_equal(tr_store_set(good, "k3", "v", 1), TR_OK);
    tr_store_close(good);
    tr_store_server_stop(s);
}

/* The store's memory cap counts keys too: many 1000-byte keys with empty values fill it (they
 * took memory without bound before), and a full store still serves reads and replacements. */
static void test_cap_counts_keys(void **state)
{
    (void)state;
    tr_store_server *s = NULL;
    assert_int_equal(store_server_start_capped("127.0.0.1", 0, "tok", "s1", 0, 64 << 10, &s),
                     TR_OK);
    tr_store *st = NULL;
    assert_int_equal(tr_store_connect("127.0.0.1", tr_store_server_port(s), "tok", "s1", -1, 0, 5,
                                      &st), TR_OK);
    char key[1001];
    memset(key, 'k', 1000);
    key[1000] = 0;
    int n = 0, rc = TR_OK;
    for (; n < 1000 && rc == TR_OK; n++) {
        snprintf(key, sizeof key, "%04d", n);
        key[4] = 'k';
        rc = tr_store_set(st, key, "", 0);
    }
    expect_error(rc, TR_ERR_COMM, "store is full");
    assert_true(n > 50 && n < 70); /* 64 KiB over ~1 KiB per entry */
    snprintf(key, sizeof key, "%04d", 0);
    key[4] = 'k';
    assert_int_equal(tr_store_set(st, key, "", 0), TR_OK); /* a replacement fits */
    int exists = 0;
    assert_int_equal(tr_store_check(st, key, &exists), TR_OK);
    assert_int_equal(exists, 1);
    tr_store_close(st);
    tr_store_server_stop(s);
}

/* A fake store: answers each of the client's requests with the next scripted reply, then
 * closes. */
typedef struct {
    int lfd;
    const char *reply[2];
    size_t rlen[2];
} fake_arg;

static void *fake_server(void *p)
{
    fake_arg *a = p;
    int fd = accept(a->lfd, NULL, NULL);
    if (fd < 0)
        return NULL;
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    for (int i = 0; i < 2 && a->reply[i]; i++) {
        uint8_t h[13], junk[4096];
        if (recv(fd, h, 13, MSG_WAITALL) != 13)
            break;
        size_t body = 0;
        for (int b = 0; b < 4; b++)
            body += ((size_t)h[5 + b] << (8 * b)) + ((size_t)h[9 + b] << (8 * b));
        while (body > 0) {
            ssize_t r = recv(fd, junk, body < sizeof junk ? body : sizeof junk, 0);
            if (r <= 0)
                goto out;
            body -= (size_t)r;
        }
        if (send(fd, a->reply[i], a->rlen[i], MSG_NOSIGNAL) != (ssize_t)a->rlen[i])
            break;
    }
out:
    close(fd);
    return NULL;
}

#define HELLO_OK "\0\0\0\0\0"

/* A client whose hello gets reply r0 (HELLO_OK: a good one) and whose op (a check, a set, a
 * get or a wait of key "k") then gets r1 must fail with `code` and a message holding `needle`
 * before half the store's timeout of 30 s (at once, not after retrying until the timeout: a
 * bound no machine's speed comes near), not crash, hang or take the bytes for an answer. */
static void expect_client_refuses(const char *r0, size_t l0, char op, const char *r1, size_t l1,
                                  int code, const char *needle)
{
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof a;
    assert_int_equal(bind(lfd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(lfd, 4), 0);
    assert_int_equal(getsockname(lfd, (struct sockaddr *)&a, &al), 0);
    fake_arg f = {.lfd = lfd, .reply = {r0, r1}, .rlen = {l0, l1}};
    pthread_t t;
    pthread_create(&t, NULL, fake_server, &f);
    tr_store *st = NULL;
    double t0 = tr_now();
    int rc = tr_store_connect("127.0.0.1", ntohs(a.sin_port), "tok", "s1", -1, 0, 30, &st);
    if (!rc) {
        int exists = 0;
        void *v = NULL;
        size_t vlen = 0;
        const char *keys[] = {"k"};
        rc = op == 'c' ? tr_store_check(st, "k", &exists)
           : op == 's' ? tr_store_set(st, "k", "v", 1)
           : op == 'w' ? tr_store_wait(st, keys, 1)
                       : tr_store_get(st, "k", &v, &vlen);
        free(v);
    }
    double dt = tr_now() - t0;
    char msg[512];
    snprintf(msg, sizeof msg, "%s", rc ? tr_errmsg() : "(no error)");
    tr_store_close(st);
    shutdown(lfd, SHUT_RDWR); /* a fake that never got a connection stops waiting */
    pthread_join(t, NULL);
    close(lfd);
    if (rc != code || !strstr(msg, needle) || dt > 15)
        fail_msg("op '%c': rc %d after %.2f s: '%s'; wanted rc %d with '%s'", op, rc, dt, msg,
                 code, needle);
}

static void test_client_refuses_malformed_replies(void **state)
{
    (void)state;
    const char http[] = "HTTP/1.1 400 Bad Request\r\n\r\n";
    /* another service at MASTER_PORT: said at once, not retried until the timeout */
    expect_client_refuses(http, sizeof http - 1, 'c', NULL, 0, TR_ERR_COMM,
                          "sent a malformed reply (status 72, length");
    expect_client_refuses(HELLO_OK, 5, 'c', "\0\4\0\0\0\1\0\0\0", 9, TR_ERR_COMM,
                          "malformed answer to check of key 'k' (4 bytes, expected 1)");
    expect_client_refuses(HELLO_OK, 5, 'c', "\0\1\0\0\0\7", 6, TR_ERR_COMM,
                          "malformed answer to check of key 'k' (7)");
    expect_client_refuses(HELLO_OK, 5, 's', "\0\3\0\0\0abc", 8, TR_ERR_COMM,
                          "malformed answer to set of key 'k' (3 bytes, expected 0)");
    expect_client_refuses(HELLO_OK, 5, 'w', "\0\2\0\0\0ab", 7, TR_ERR_COMM,
                          "malformed answer to wait of key 'k'");
    expect_client_refuses(HELLO_OK, 5, 'g', "\0\xff\xff\xff\x7f", 5, TR_ERR_COMM,
                          "malformed reply (status 0, length 2147483647; at most 1048576)");
    expect_client_refuses(HELLO_OK, 5, 'g', "\x09\0\0\0\0", 5, TR_ERR_COMM,
                          "malformed reply (status 9, length 0");
    expect_client_refuses(HELLO_OK, 5, 'g', "\0\1\0", 3, TR_ERR_COMM, "connection lost");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_set_get_add_check),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_wait_and_get_block_until_set),
        cmocka_unit_test(test_get_timeout_then_reconnect),
        cmocka_unit_test(test_token_and_session),
        cmocka_unit_test(test_connect_retries_until_server_up),
        cmocka_unit_test(test_malformed_gets_error_reply),
        cmocka_unit_test(test_fuzz_frames),
        cmocka_unit_test(test_unauthenticated_memory_bound),
        cmocka_unit_test(test_full_table_admits_a_rank),
        cmocka_unit_test(test_foreign_rank_stops_rendezvous),
        cmocka_unit_test(test_other_world_size_stops_rendezvous),
        cmocka_unit_test(test_foreign_rank_after_join_is_only_refused),
        cmocka_unit_test(test_drop_and_set_in_one_round),
        cmocka_unit_test(test_world_larger_than_1024),
        cmocka_unit_test_teardown(test_bad_peers_logged_by_address, release_stderr),
        cmocka_unit_test(test_cap_counts_keys),
        cmocka_unit_test(test_client_refuses_malformed_replies),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
