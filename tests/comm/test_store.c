/* The rendezvous store: get/set/wait/add/check, parked waiters, limits, job token, session
 * retry, connect timeout, the key table's seed, and a client facing malformed replies. Hostile
 * peers (fuzzed frames, unauthenticated floods, stalled and idle peers, the drop log) are in
 * test_store_hostile.c. */
#include "comm/comm.h"
#include "comm/store/store_internal.h" /* store_server_start_with(), the key table */
#include "test_store_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>


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
    snprintf(where, sizeof where, "store 127.0.0.1:%d: no answer for key 'absent' within 0.3 s",
             port);
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
    expect_error(tr_store_connect("127.0.0.1", p, "t2", NULL, -1, 0, 0.5, &st), TR_ERR_TIMEOUT,
                 where);
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

/* The store's memory cap counts keys too: many 1000-byte keys with empty values fill it (they
 * took memory without bound before), and a full store still serves reads and replacements. */
static void test_cap_counts_keys(void **state)
{
    (void)state;
    tr_store_server *s = NULL;
    store_server_options small = {.max_bytes = 64 << 10};
    assert_int_equal(store_server_start_with("127.0.0.1", 0, "tok", "s1", 0, &small, &s), TR_OK);
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

/* ---------------------------------------------------------------- the key table's seed */

/* The reference vectors of SipHash-2-4 (key 00..0f; messages 00..len-1). */
static void test_siphash_reference_vectors(void **state)
{
    (void)state;
    const uint64_t key[2] = {0x0706050403020100ull, 0x0f0e0d0c0b0a0908ull};
    uint8_t msg[64];
    for (int i = 0; i < 64; i++)
        msg[i] = (uint8_t)i;
    assert_true(store_siphash(key, msg, 0) == 0x726fdb47dd0e0e31ull);
    assert_true(store_siphash(key, msg, 7) == 0xab0200f58b01d137ull);
    assert_true(store_siphash(key, msg, 8) == 0x93f5f5799a932462ull);
    assert_true(store_siphash(key, msg, 15) == 0xa129ca6149be45e5ull);
    assert_true(store_siphash(key, msg, 63) == 0x958a324ceb064572ull);
}

/* How many of 256 keys two tables put in different buckets. */
static int buckets_differing(const store_table *a, const store_table *b)
{
    int n = 0;
    for (int i = 0; i < 256; i++) {
        char key[32];
        snprintf(key, sizeof key, "tr/s/ucx/%d", i);
        n += store_table_bucket(a, key) != store_table_bucket(b, key);
    }
    return n;
}

/* Each server's table draws its own seed, so the same keys land in other buckets (a fixed seed
 * let a peer aim keys at one chain); the fallback's seeds differ draw to draw too. The table
 * still finds every key (nothing depends on which bucket holds it). */
static void test_each_server_seeds_its_table(void **state)
{
    (void)state;
    tr_store_server *a = NULL, *b = NULL;
    assert_int_equal(tr_store_server_start("127.0.0.1", 0, "tok", "s1", 0, &a), TR_OK);
    assert_int_equal(tr_store_server_start("127.0.0.1", 0, "tok", "s1", 0, &b), TR_OK);
    /* both seeds equal by chance: 2^-128; 256 keys in the same of 1024 buckets: ~2^-2560 */
    assert_false(a->table.seed[0] == b->table.seed[0] && a->table.seed[1] == b->table.seed[1]);
    assert_true(buckets_differing(&a->table, &b->table) > 128);
    tr_store_server_stop(a);
    tr_store_server_stop(b);
    store_table t1, t2;
    store_table_init(&t1, 1 << 20);
    store_table_init(&t2, 1 << 20);
    assert_int_equal(store_seed_draw(t1.seed, 0), 0);
    assert_int_equal(store_seed_draw(t2.seed, 0), 0);
    assert_false(t1.seed[0] == t2.seed[0] && t1.seed[1] == t2.seed[1]);
    assert_true(buckets_differing(&t1, &t2) > 128);
    const char *why = NULL;
    for (int i = 0; i < 256; i++) {
        char key[32];
        snprintf(key, sizeof key, "k%d", i);
        assert_non_null(store_table_put(&t1, key, (const uint8_t *)key, strlen(key), &why));
    }
    for (int i = 0; i < 256; i++) {
        char key[32];
        snprintf(key, sizeof key, "k%d", i);
        store_entry *e = store_table_find(&t1, key);
        assert_non_null(e);
        assert_int_equal(e->len, strlen(key));
        assert_memory_equal(e->value, key, e->len);
    }
    assert_null(store_table_find(&t1, "k256"));
    store_table_free(&t1);
    store_table_free(&t2);
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
        cmocka_unit_test(test_foreign_rank_stops_rendezvous),
        cmocka_unit_test(test_other_world_size_stops_rendezvous),
        cmocka_unit_test(test_foreign_rank_after_join_is_only_refused),
        cmocka_unit_test(test_world_larger_than_1024),
        cmocka_unit_test(test_cap_counts_keys),
        cmocka_unit_test(test_client_refuses_malformed_replies),
        cmocka_unit_test(test_siphash_reference_vectors),
        cmocka_unit_test(test_each_server_seeds_its_table),
    };
    return cmocka_run_group_tests(tests, store_setup, store_teardown);
}
