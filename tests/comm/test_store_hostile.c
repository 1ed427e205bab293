/* The rendezvous store against hostile peers: fuzzed, truncated and oversized frames at a live
 * server (which then still serves a good client), unauthenticated floods and their memory
 * bound, a drop and a set in one poll round, each bad peer logged by address, and the
 * deadlines: an idle peer after its hello timeout, peers stalled in the middle of a request
 * after the request timeout (by the server's own clock; short timeouts set through
 * store_server_start_with), while parked and quiet ranks are left alone. */
#include "comm/comm.h"
#include "comm/store/store_internal.h" /* store_server_start_with(), the key table */
#include "test_store_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
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


/* ---------------------------------------------------------------- fuzz */

static int raw_connect(void)
{
    return raw_connect_to(port);
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

/* Every hostile peer is dropped with a warning on the server naming its address and what it
 * did; the bad ones get an error reply first; a good client is served all along. (Idle and
 * stalled peers: test_idle_peer_dropped_after_hello_timeout, test_stalled_requests_dropped.) */
static void test_bad_peers_logged_by_address(void **state)
{
    (void)state;
    tr_store_server *s = NULL; /* its own server: the log's rate limit is fresh */
    assert_int_equal(tr_store_server_start("127.0.0.1", 0, "tok", "s1", 0, &s), TR_OK);
    int p = tr_store_server_port(s);
    capture_stderr();
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
    ssize_t got = read_to_eof(fd[0], resp, sizeof resp, 5);
    assert_true(got > 5);
    assert_int_equal(resp[0], 1); /* an error reply, then the server closed */
    assert_non_null(strstr((char *)resp + 5, "bad magic"));
    got = read_to_eof(fd[1], resp, sizeof resp, 5);
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
    release_stderr(NULL);
    close(fd[0]);
    close(fd[1]);
    if (fail[0])
        fail_msg("%s", fail);
    assert_int_equal(tr_store_set(good, "k3", "v", 1), TR_OK);
    tr_store_close(good);
    tr_store_server_stop(s);
}

/* ---------------------------------------------------------------- deadlines */

/* A peer that connects and says nothing is dropped (closed, no reply) once the server's hello
 * timeout (0.5 s here) has passed by the server's own clock: the time since its connection it
 * logs is never less than the timeout, though a client's checks wake the server every few
 * milliseconds meanwhile. The only wall-clock bound is 60 s, which no machine's slowness comes
 * near. */
static void test_idle_peer_dropped_after_hello_timeout(void **state)
{
    (void)state;
    store_server_options o = {.hello_timeout_s = 0.5};
    tr_store_server *s = NULL;
    assert_int_equal(store_server_start_with("127.0.0.1", 0, "tok", "s1", 0, &o, &s), TR_OK);
    int p = tr_store_server_port(s);
    capture_stderr();
    int idle = raw_connect_to(p);
    assert_true(idle >= 0);
    char who[64], line[512] = "";
    peer_name(idle, who, sizeof who);
    tr_store *good = NULL; /* busy beside it: the server wakes often, not only at deadlines */
    assert_int_equal(tr_store_connect("127.0.0.1", p, "tok", "s1", -1, 0, 30, &good), TR_OK);
    uint8_t resp[64];
    ssize_t got = -1;
    struct pollfd pf = {.fd = idle, .events = POLLIN};
    for (double t0 = tr_now(); got < 0 && tr_now() - t0 < 60;) {
        int exists = 0;
        if (poll(&pf, 1, 10) > 0)
            got = read_to_eof(idle, resp, sizeof resp, 60);
        else if (tr_store_check(good, "x", &exists))
            break;
    }
    tr_store_close(good);
    int logged = log_line(who, "no hello within 0.5 s", 5, line, sizeof line);
    release_stderr(NULL);
    close(idle);
    tr_store_server_stop(s);
    if (got != 0)
        fail_msg("the idle peer was not dropped within 60 s (%zd)", got);
    if (!logged)
        fail_msg("no warning naming %s for an idle peer", who);
    double waited = number_after(line, "connected ");
    if (!(waited >= 0.5))
        fail_msg("dropped before its hello timeout of 0.5 s: %s", line);
}

typedef struct {
    int port;
    atomic_int done;
    int rc;
    char value[16];
} blocked_get;

/* A rank blocked in a GET of "k" (store timeout 60 s). */
static void *get_k(void *p)
{
    blocked_get *g = p;
    tr_store *st = NULL;
    g->rc = tr_store_connect("127.0.0.1", g->port, "tok", "s1", -1, 0, 60, &st);
    if (!g->rc) {
        void *v = NULL;
        size_t len = 0;
        g->rc = tr_store_get(st, "k", &v, &len);
        if (!g->rc)
            snprintf(g->value, sizeof g->value, "%.*s", (int)len, (const char *)v);
        free(v);
    }
    tr_store_close(st);
    atomic_store(&g->done, 1);
    return NULL;
}

/* Peers that stall in the middle of a request, with a request timeout of 0.5 s (and a hello
 * timeout of 60 s, so only the request deadline can drop them): 0: a good hello, then 5 bytes
 * of a header; 1: a good hello, then a set of "k" whose value stops after 10 of 100 bytes;
 * 2: 4 bytes of a hello's header. Each is dropped (its buffer freed) and logged with its
 * address, how far it got and how long the server waited by its own clock, never less than
 * the timeout (the only wall-clock bound is 60 s). While they wait to be dropped the server
 * sleeps: this process uses under a fifth of the wall time in CPU (a server polling in a loop
 * would take a core). A rank blocked in a GET of "k" meanwhile is neither answered nor dropped
 * (a request received whole is not timed, nor is the cut set applied), and gets the value a
 * good client sets afterwards. */
static void test_stalled_requests_dropped(void **state)
{
    (void)state;
    store_server_options o = {.hello_timeout_s = 60, .request_timeout_s = 0.5};
    tr_store_server *s = NULL;
    assert_int_equal(store_server_start_with("127.0.0.1", 0, "tok", "s1", 0, &o, &s), TR_OK);
    int p = tr_store_server_port(s);
    capture_stderr();
    blocked_get g = {.port = p};
    pthread_t t;
    pthread_create(&t, NULL, get_k, &g);
    usleep(200000); /* parked by now (were it not, the checks below only get weaker) */
    int fd[3];
    char who[3][64], line[3][512], fail[1024] = "";
    for (int i = 0; i < 3; i++) {
        fd[i] = raw_connect_to(p);
        assert_true(fd[i] >= 0);
        peer_name(fd[i], who[i], sizeof who[i]);
    }
    uint8_t buf[256], resp[256];
    size_t len = 0;
    put_hello(buf, &len);
    memcpy(buf + len, "TRS1\x02", 5);
    len += 5;
    double wall0 = tr_now(), cpu0 = cpu_seconds();
    assert_int_equal(send(fd[0], buf, len, MSG_NOSIGNAL), (ssize_t)len);
    len = 0;
    put_hello(buf, &len);
    put_frame(buf, &len, 2, 1, 100);
    buf[len++] = 'k';
    memset(buf + len, 'x', 10);
    len += 10;
    assert_int_equal(send(fd[1], buf, len, MSG_NOSIGNAL), (ssize_t)len);
    assert_int_equal(send(fd[2], "TRS1", 4, MSG_NOSIGNAL), 4);
    ssize_t got[3];
    for (int i = 0; i < 3; i++)
        got[i] = read_to_eof(fd[i], resp, sizeof resp, 60);
    double wall = tr_now() - wall0, cpu = cpu_seconds() - cpu0;
    const char *what[3] = {
        "stalled in the middle of a request header (5 of 13 bytes) for ",
        "stalled in the middle of a request (11 of 101 bytes after its header) for ",
        "stalled in the middle of a request header (4 of 13 bytes) for ",
    };
    for (int i = 0; i < 3 && !fail[0]; i++) {
        line[i][0] = 0;
        if (got[i] != (i < 2 ? 5 : 0)) /* the hello's answer, then closed; nothing */
            snprintf(fail, sizeof fail, "peer %d was not dropped within 60 s (%zd)", i, got[i]);
        else if (!log_line(who[i], what[i], 5, line[i], sizeof line[i]))
            snprintf(fail, sizeof fail, "no warning naming %s: %s", who[i], what[i]);
        else if (!(number_after(line[i], what[i]) >= 0.5))
            snprintf(fail, sizeof fail, "dropped before the request timeout of 0.5 s: %.500s",
                     line[i]);
    }
    release_stderr(NULL);
    for (int i = 0; i < 3; i++)
        close(fd[i]);
    if (!fail[0] && cpu > 0.2 * wall)
        snprintf(fail, sizeof fail, "%.3f s of CPU in %.3f s while peers stalled: polling in a "
                                    "loop?", cpu, wall);
    if (!fail[0] && atomic_load(&g.done))
        snprintf(fail, sizeof fail, "the blocked get ended (rc %d, '%s') before its key was set",
                 g.rc, g.value);
    tr_store *good = NULL;
    assert_int_equal(tr_store_connect("127.0.0.1", p, "tok", "s1", -1, 0, 30, &good), TR_OK);
    assert_int_equal(tr_store_set(good, "k", "good", 4), TR_OK);
    pthread_join(t, NULL);
    tr_store_close(good);
    tr_store_server_stop(s);
    if (fail[0])
        fail_msg("%s", fail);
    assert_int_equal(g.rc, TR_OK);
    assert_string_equal(g.value, "good");
}

/* A request that arrives whole is not timed: a rank that stays parked in a GET for several
 * request timeouts (0.2 s here), and a rank that sends one request a while after the last,
 * keep their connections. The checks' only wall-clock part is how long they wait, which can
 * only make a wrongly timed drop more certain. */
static void test_parked_and_quiet_ranks_not_timed(void **state)
{
    (void)state;
    store_server_options o = {.hello_timeout_s = 0.2, .request_timeout_s = 0.2};
    tr_store_server *s = NULL;
    assert_int_equal(store_server_start_with("127.0.0.1", 0, "tok", "s1", 0, &o, &s), TR_OK);
    int p = tr_store_server_port(s);
    int parked = raw_connect_to(p), quiet = raw_connect_to(p);
    assert_true(parked >= 0 && quiet >= 0);
    uint8_t buf[64], resp[64];
    size_t len = 0;
    put_hello(buf, &len);
    put_frame(buf, &len, 3, 1, 0); /* GET "k" */
    buf[len++] = 'k';
    assert_int_equal(send(parked, buf, len, MSG_NOSIGNAL), (ssize_t)len);
    len = 0;
    put_hello(buf, &len);
    assert_int_equal(send(quiet, buf, len, MSG_NOSIGNAL), (ssize_t)len);
    assert_int_equal(recv(parked, resp, 5, MSG_WAITALL), 5); /* the hellos' answers */
    assert_int_equal(recv(quiet, resp, 5, MSG_WAITALL), 5);
    usleep(1000000); /* five request timeouts, five hello timeouts */
    len = 0;
    put_frame(buf, &len, 2, 1, 2); /* SET "k" = "ok" from the quiet rank */
    memcpy(buf + len, "kok", 3);
    len += 3;
    assert_int_equal(send(quiet, buf, len, MSG_NOSIGNAL), (ssize_t)len);
    struct timeval tv = {.tv_sec = 60};
    setsockopt(quiet, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(parked, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ssize_t set_answer = recv(quiet, resp, 5, MSG_WAITALL);
    ssize_t get_answer = recv(parked, resp, 7, MSG_WAITALL);
    close(parked);
    close(quiet);
    tr_store_server_stop(s);
    assert_int_equal(set_answer, 5);
    assert_int_equal(get_answer, 7);
    assert_int_equal(resp[0], 0);
    assert_memory_equal(resp + 5, "ok", 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_malformed_gets_error_reply),
        cmocka_unit_test(test_fuzz_frames),
        cmocka_unit_test(test_unauthenticated_memory_bound),
        cmocka_unit_test(test_full_table_admits_a_rank),
        cmocka_unit_test(test_drop_and_set_in_one_round),
        cmocka_unit_test_teardown(test_bad_peers_logged_by_address, release_stderr),
        cmocka_unit_test_teardown(test_idle_peer_dropped_after_hello_timeout, release_stderr),
        cmocka_unit_test_teardown(test_stalled_requests_dropped, release_stderr),
        cmocka_unit_test(test_parked_and_quiet_ranks_not_timed),
    };
    return cmocka_run_group_tests(tests, store_setup, store_teardown);
}
