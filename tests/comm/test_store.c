/* The rendezvous store: get/set/wait/add/check, parked waiters, limits, job token, session
 * retry, connect timeout, and a fuzz test that throws random, truncated and oversized frames
 * at a live server and then checks it still serves a good client. */
#include "comm/comm.h"

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
#include <sys/socket.h>
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
    if (tr_store_server_start("127.0.0.1", 0, "tok", "s1", &server))
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
    if (tr_store_connect("127.0.0.1", port, "tok", "s1", timeout, &st))
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
    if (tr_store_connect("127.0.0.1", a->port, "tok", "s1", 5, &st) == TR_OK) {
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
    expect_error(tr_store_connect("127.0.0.1", port, "other-job", "s1", 2, &st), TR_ERR_COMM,
                 "rejected this rank: job token mismatch");
    assert_null(st);
    double t0 = tr_now();
    expect_error(tr_store_connect("127.0.0.1", port, "tok", "s2", 0.5, &st), TR_ERR_TIMEOUT,
                 "server of another session");
    assert_true(tr_now() - t0 < 3);
    expect_error(tr_store_connect("127.0.0.1", 0, "tok", "s1", 1, &st), TR_ERR_INVALID,
                 "port 0 out of range");
    expect_error(tr_store_connect("127.0.0.1", port, "tok", "s1", 0, &st), TR_ERR_INVALID,
                 "timeout must be > 0");
    tr_store_server *bad = NULL;
    expect_error(tr_store_server_start("127.0.0.1", 70000, NULL, NULL, &bad), TR_ERR_INVALID,
                 "port 70000 out of range");
    assert_null(bad);
}

static void test_connect_retries_until_server_up(void **state)
{
    (void)state;
    /* a port nobody serves yet: the client retries; start the server 0.4 s later */
    tr_store_server *tmp = NULL;
    assert_int_equal(tr_store_server_start("127.0.0.1", 0, "t2", NULL, &tmp), TR_OK);
    int p = tr_store_server_port(tmp);
    tr_store_server_stop(tmp);
    tr_store *st = NULL;
    char where[64];
    snprintf(where, sizeof where, "rendezvous store at 127.0.0.1:%d", p);
    double t0 = tr_now();
    expect_error(tr_store_connect("127.0.0.1", p, "t2", NULL, 0.5, &st), TR_ERR_TIMEOUT, where);
    assert_true(tr_now() - t0 >= 0.45);
    tmp = NULL;
    pid_t child = fork();
    if (child == 0) {
        usleep(400000);
        tr_store_server *s2 = NULL;
        if (tr_store_server_start("127.0.0.1", p, "t2", NULL, &s2))
            _exit(1);
        sleep(3);
        tr_store_server_stop(s2);
        _exit(0);
    }
    assert_int_equal(tr_store_connect("127.0.0.1", p, "t2", NULL, 5, &st), TR_OK);
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
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
