/* Helpers the store's tests share (test_store.c, test_store_hostile.c): raw frames on raw
 * sockets, reading a peer's fate, and the server's log captured from stderr. */
#ifndef TR_TEST_STORE_UTIL_H
#define TR_TEST_STORE_UTIL_H

#include "comm/comm.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The server of each test (token "tok", session "s1", any free port), started and stopped by
 * the cmocka setup and teardown; client(): a rank-less connection to it. */
extern tr_store_server *server;
extern int port;
int store_setup(void **state);
int store_teardown(void **state);
tr_store *client(double timeout);
/* rc is `code` and tr_errmsg() holds needle (a cmocka failure otherwise). */
void expect_error(int rc, int code, const char *needle);
/* A blocking TCP connection to 127.0.0.1:p, or -1. */
int raw_connect_to(int p);
/* Appends a request header (op, key length, value length) at buf + *len. */
void put_frame(uint8_t *buf, size_t *len, uint8_t op, uint32_t klen, uint32_t vlen);
/* Appends a HELLO of token "tok", session "s1" (no rank claim). */
void put_hello(uint8_t *buf, size_t *len);
/* "127.0.0.1:<local port of fd>": how the server names this peer. */
void peer_name(int fd, char *out, size_t n);
/* Reads until the server closes (wait_s at most): the reply bytes, NUL-terminated; -1 if the
 * connection stayed open that long. */
ssize_t read_to_eof(int fd, uint8_t *buf, size_t cap, double wait_s);
/* stderr into a file until release_stderr (the server thread logs there); release_stderr is a
 * cmocka teardown too, for a test that failed before it gave stderr back. */
void capture_stderr(void);
int release_stderr(void **state);
/* The captured log line holding both a and b (within `wait` seconds), copied into line (n
 * bytes); 0 if none. line may be NULL. */
int log_line(const char *a, const char *b, double wait, char *line, size_t n);
/* Whether the captured log has a line with both a and b, within `wait` seconds. */
int log_has(const char *a, const char *b, double wait);
/* Reads whatever the server answers within a short time (it must not hang us). */
void drain(int fd);
/* The number after `tag` in line (e.g. "connected 0.512 s ago"), or -1. */
double number_after(const char *line, const char *tag);
/* CPU seconds this process has used (every thread, the server's included). */
double cpu_seconds(void);

#endif
