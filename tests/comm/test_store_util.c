/* Helpers the store's tests share; see test_store_util.h. */
#include "test_store_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

void expect_error(int rc, int code, const char *needle)
{
    assert_int_equal(rc, code);
    if (!strstr(tr_errmsg(), needle))
        fail_msg("message '%s' lacks '%s'", tr_errmsg(), needle);
}

int raw_connect_to(int p)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)p)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

void put_frame(uint8_t *buf, size_t *len, uint8_t op, uint32_t klen, uint32_t vlen)
{
    memcpy(buf + *len, "TRS1", 4);
    buf[*len + 4] = op;
    for (int i = 0; i < 4; i++) {
        buf[*len + 5 + i] = (uint8_t)(klen >> (8 * i));
        buf[*len + 9 + i] = (uint8_t)(vlen >> (8 * i));
    }
    *len += 13;
}

void put_hello(uint8_t *buf, size_t *len)
{
    put_frame(buf, len, 1, 3, 2);
    memcpy(buf + *len, "toks1", 5);
    *len += 5;
}

void peer_name(int fd, char *out, size_t n)
{
    struct sockaddr_in a;
    socklen_t l = sizeof a;
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &l), 0);
    snprintf(out, n, "127.0.0.1:%u", (unsigned)ntohs(a.sin_port));
}

ssize_t read_to_eof(int fd, uint8_t *buf, size_t cap, double wait_s)
{
    size_t got = 0;
    double t0 = tr_now();
    struct pollfd p = {.fd = fd, .events = POLLIN};
    for (;;) {
        double left = wait_s - (tr_now() - t0);
        if (left <= 0 || poll(&p, 1, (int)(left * 1e3) + 1) <= 0)
            return -1;
        ssize_t r = recv(fd, buf + got, cap - 1 - got, 0);
        if (r <= 0) {
            buf[got] = 0;
            return r == 0 ? (ssize_t)got : -1;
        }
        got += (size_t)r;
        if (got == cap - 1)
            return -1;
    }
}

static int stderr_saved = -1, stderr_file = -1;

void capture_stderr(void)
{
    char path[] = "/tmp/test_store_log_XXXXXX";
    stderr_file = mkstemp(path);
    assert_true(stderr_file >= 0);
    unlink(path);
    fflush(stderr);
    stderr_saved = dup(2);
    dup2(stderr_file, 2);
}

int release_stderr(void **state)
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

int log_line(const char *a, const char *b, double wait, char *line_out, size_t n)
{
    static char text[1 << 16];
    double t0 = tr_now();
    do {
        fflush(stderr);
        ssize_t got = pread(stderr_file, text, sizeof text - 1, 0);
        text[got > 0 ? got : 0] = 0;
        for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"))
            if (strstr(line, a) && strstr(line, b)) {
                if (line_out)
                    snprintf(line_out, n, "%s", line);
                return 1;
            }
        usleep(20000);
    } while (tr_now() - t0 < wait);
    return 0;
}

int log_has(const char *a, const char *b, double wait)
{
    return log_line(a, b, wait, NULL, 0);
}

void drain(int fd)
{
    uint8_t buf[4096];
    struct pollfd p = {.fd = fd, .events = POLLIN};
    while (poll(&p, 1, 20) > 0 && recv(fd, buf, sizeof buf, MSG_DONTWAIT) > 0) {
    }
}

double number_after(const char *line, const char *tag)
{
    const char *p = strstr(line, tag);
    return p ? strtod(p + strlen(tag), NULL) : -1;
}

double cpu_seconds(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + (double)u.ru_utime.tv_usec * 1e-6 +
           (double)u.ru_stime.tv_sec + (double)u.ru_stime.tv_usec * 1e-6;
}

/* ---- the server of each test */

tr_store_server *server;
int port;

int store_setup(void **state)
{
    (void)state;
    if (tr_store_server_start("127.0.0.1", 0, "tok", "s1", 0, &server))
        return -1;
    port = tr_store_server_port(server);
    return 0;
}

int store_teardown(void **state)
{
    (void)state;
    tr_store_server_stop(server);
    server = NULL;
    return 0;
}

tr_store *client(double timeout)
{
    tr_store *st = NULL;
    if (tr_store_connect("127.0.0.1", port, "tok", "s1", -1, 0, timeout, &st))
        fail_msg("connect: %s", tr_errmsg());
    return st;
}
