/* The rendezvous store's wire format, shared by server and client (private to comm/store/).
 *
 * Request:  "TRS1" | op u8 | key_len u32le | value_len u32le | key | value      (13-byte header)
 * Response: status u8 | len u32le | payload                                       (5-byte header)
 * The first request on a connection must be HELLO (key = job token, value = session, then
 * optionally NUL + rank u32le + world size u32le); the server refuses any other request
 * before it at its header, so an unauthenticated peer never makes it buffer more than a
 * HELLO's 2 KiB. */
#include "comm/store/store_internal.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>

void store_put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

uint32_t store_get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

void store_put_i64(uint8_t *p, int64_t v)
{
    uint64_t u = (uint64_t)v;
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(u >> (8 * i));
}

int64_t store_get_i64(const uint8_t *p)
{
    uint64_t u = 0;
    for (int i = 0; i < 8; i++)
        u |= (uint64_t)p[i] << (8 * i);
    return (int64_t)u;
}

int store_valid_request(uint8_t op, uint32_t klen, uint32_t vlen, const char **why)
{
    switch (op) {
    case STORE_OP_HELLO:
        if (klen > TR_STORE_MAX_KEY || vlen > TR_STORE_MAX_KEY + 1 + STORE_CLAIM_LEN) {
            *why = "hello fields too long";
            return 0;
        }
        return 1;
    case STORE_OP_SET:
        break;
    case STORE_OP_GET:
    case STORE_OP_WAIT:
    case STORE_OP_CHECK:
        if (vlen != 0) {
            *why = "unexpected value";
            return 0;
        }
        break;
    case STORE_OP_ADD:
        if (vlen != 8) {
            *why = "add needs an 8-byte value";
            return 0;
        }
        break;
    default:
        *why = "unknown operation";
        return 0;
    }
    if (klen == 0 || klen > TR_STORE_MAX_KEY) {
        *why = klen ? "key longer than 1 KiB" : "empty key";
        return 0;
    }
    if (vlen > TR_STORE_MAX_VALUE) {
        *why = "value larger than 1 MiB";
        return 0;
    }
    return 1;
}

/* Blocking I/O on a socket with a deadline (tr_now() seconds). 0 ok, TR_ERR_TIMEOUT,
 * TR_ERR_COMM (closed / error; errno kept). */
static int wait_fd(int fd, short events, double deadline)
{
    for (;;) {
        double left = deadline - tr_now();
        if (left <= 0)
            return TR_ERR_TIMEOUT;
        struct pollfd p = {.fd = fd, .events = events};
        int ms = left > 1000 ? 1000 : (int)(left * 1000) + 1;
        int r = poll(&p, 1, ms);
        if (r < 0 && errno != EINTR)
            return TR_ERR_COMM;
        if (r > 0)
            return TR_OK;
    }
}

int store_write_all(int fd, const void *buf, size_t len, double deadline)
{
    const uint8_t *p = buf;
    while (len > 0) {
        ssize_t w = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            p += w;
            len -= (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            int rc = wait_fd(fd, POLLOUT, deadline);
            if (rc)
                return rc;
            continue;
        }
        return TR_ERR_COMM;
    }
    return TR_OK;
}

int store_read_all(int fd, void *buf, size_t len, double deadline)
{
    uint8_t *p = buf;
    while (len > 0) {
        ssize_t r = recv(fd, p, len, MSG_DONTWAIT);
        if (r > 0) {
            p += r;
            len -= (size_t)r;
            continue;
        }
        if (r == 0) {
            errno = ECONNRESET;
            return TR_ERR_COMM;
        }
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            int rc = wait_fd(fd, POLLIN, deadline);
            if (rc)
                return rc;
            continue;
        }
        return TR_ERR_COMM;
    }
    return TR_OK;
}
