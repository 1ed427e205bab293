/* The rendezvous store's client: one blocking TCP connection, every call bounded by the
 * store's timeout. Connecting retries (connection refused, unreachable, a server of an older
 * session) until the deadline, so ranks may start before rank 0 serves. After a timeout the
 * connection is dropped and the next call reconnects. */
#include "comm/store/store_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct tr_store {
    int fd;
    char host[256];
    int port;
    char token[TR_STORE_MAX_KEY + 1], session[TR_STORE_MAX_KEY + 1];
    int rank, world_size; /* the claim HELLO carries; rank -1: not a rank */
    double timeout_s;
};

static void sleep_s(double s)
{
    struct timespec ts = {.tv_sec = (time_t)s, .tv_nsec = (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* One connection attempt; 0 ok, else errno-ish in *err. */
static int try_connect(tr_store *st, double deadline, int *err, int *fatal)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", st->port);
    int g = getaddrinfo(st->host, portstr, &hints, &res);
    if (g) {
        *err = g == EAI_SYSTEM ? errno : EHOSTUNREACH;
        *fatal = g == EAI_NONAME;
        return -1;
    }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        *err = errno;
        freeaddrinfo(res);
        return -1;
    }
    int r = connect(fd, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    if (r < 0 && errno != EINPROGRESS) {
        *err = errno;
        close(fd);
        return -1;
    }
    if (r < 0) {
        double left = deadline - tr_now();
        double step = left < 1.0 ? left : 1.0;
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int pr = step > 0 ? poll(&p, 1, (int)(step * 1000) + 1) : 0;
        int so = 0;
        socklen_t sl = sizeof so;
        if (pr <= 0) {
            *err = ETIMEDOUT;
            close(fd);
            return -1;
        }
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &sl);
        if (so) {
            *err = so;
            close(fd);
            return -1;
        }
    }
    /* connected to itself: on one host, a connect to a port of the ephemeral range that nobody
     * listens on yet may take that very port as its own (TCP's simultaneous open). Holding it
     * would keep rank 0's store from listening there: let it go at once and try again. */
    struct sockaddr_in me, peer;
    socklen_t ml = sizeof me, pl = sizeof peer;
    if (!getsockname(fd, (struct sockaddr *)&me, &ml) &&
        !getpeername(fd, (struct sockaddr *)&peer, &pl) && me.sin_port == peer.sin_port &&
        me.sin_addr.s_addr == peer.sin_addr.s_addr) {
        *err = ECONNREFUSED;
        close(fd);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    st->fd = fd;
    return 0;
}

static int send_request(tr_store *st, uint8_t op, const char *key, size_t klen,
                        const void *val, size_t vlen, double deadline)
{
    uint8_t hdr[STORE_REQ_HDR];
    memcpy(hdr, STORE_MAGIC, 4);
    hdr[4] = op;
    store_put_u32(hdr + 5, (uint32_t)klen);
    store_put_u32(hdr + 9, (uint32_t)vlen);
    int rc = store_write_all(st->fd, hdr, sizeof hdr, deadline);
    if (!rc && klen)
        rc = store_write_all(st->fd, key, klen, deadline);
    if (!rc && vlen)
        rc = store_write_all(st->fd, val, vlen, deadline);
    return rc;
}

/* Reads a response; *payload malloc'ed (NUL-terminated for convenience). A header no store
 * sends (an unknown status, a length over the cap) is TR_ERR_INVALID with the message set: the
 * peer is not a trident store, or the stream is out of step. */
static int read_response(tr_store *st, uint8_t *status, uint8_t **payload, size_t *len,
                         double deadline)
{
    uint8_t hdr[STORE_RESP_HDR];
    int rc = store_read_all(st->fd, hdr, sizeof hdr, deadline);
    if (rc)
        return rc;
    *status = hdr[0];
    *len = store_get_u32(hdr + 1);
    if (*status > STORE_ABORTED || *len > TR_STORE_MAX_VALUE)
        return tr_fail(TR_ERR_INVALID,
                       "store %s:%d sent a malformed reply (status %u, length %zu; at most %u): "
                       "is MASTER_ADDR:MASTER_PORT a trident store of this version?",
                       st->host, st->port, (unsigned)*status, *len, TR_STORE_MAX_VALUE);
    *payload = malloc(*len + 1);
    if (!*payload)
        return TR_ERR_NOMEM;
    rc = store_read_all(st->fd, *payload, *len, deadline);
    if (rc) {
        free(*payload);
        *payload = NULL;
        return rc;
    }
    (*payload)[*len] = 0;
    return TR_OK;
}

static void drop(tr_store *st)
{
    if (st->fd >= 0)
        close(st->fd);
    st->fd = -1;
}

/* Connect + HELLO, retrying until the deadline. */
static int establish(tr_store *st, double deadline)
{
    int err = ECONNREFUSED;
    const char *last = NULL;
    while (tr_now() < deadline) {
        int fatal = 0;
        if (try_connect(st, deadline, &err, &fatal) == 0) {
            uint8_t status = 0, *msg = NULL, hello[TR_STORE_MAX_KEY + 1 + STORE_CLAIM_LEN];
            size_t len = 0, slen = strlen(st->session);
            memcpy(hello, st->session, slen);
            hello[slen] = 0;
            store_put_u32(hello + slen + 1, st->rank < 0 ? STORE_NO_RANK : (uint32_t)st->rank);
            store_put_u32(hello + slen + 5, (uint32_t)st->world_size);
            int rc = send_request(st, STORE_OP_HELLO, st->token, strlen(st->token), hello,
                                  slen + 1 + STORE_CLAIM_LEN, deadline);
            if (!rc)
                rc = read_response(st, &status, &msg, &len, deadline);
            if (!rc && status == STORE_OK) {
                free(msg);
                return TR_OK;
            }
            drop(st);
            if (rc == TR_ERR_INVALID) /* not a store: waiting will not make it one */
                return TR_ERR_COMM;
            if (!rc && (status == STORE_ERROR || status == STORE_ABORTED)) {
                int r = tr_fail(TR_ERR_CONFIG, status == STORE_ERROR
                                                   ? "store %s:%d rejected this rank: %s"
                                                   : "store %s:%d: the rendezvous was stopped: %s",
                                st->host, st->port, msg ? (char *)msg : "?");
                free(msg);
                return r;
            }
            free(msg);
            last = rc ? "connection closed during hello" : "server of another session";
        } else {
            last = NULL;
            if (fatal)
                return tr_fail(TR_ERR_CONFIG, "store: cannot resolve host '%s' (MASTER_ADDR)",
                               st->host);
        }
        double left = deadline - tr_now();
        sleep_s(left > 0.1 ? 0.1 : (left > 0 ? left : 0));
    }
    return tr_fail(TR_ERR_TIMEOUT,
                   "could not reach the rendezvous store at %s:%d (MASTER_ADDR:MASTER_PORT) "
                   "within %g s: %s",
                   st->host, st->port, st->timeout_s, last ? last : strerror(err));
}

int tr_store_connect(const char *host, int port, const char *token, const char *session,
                     int rank, int world_size, double timeout_s, tr_store **out)
{
    *out = NULL;
    if (!host || !*host || strlen(host) >= 256)
        return tr_fail(TR_ERR_INVALID, "store: bad host name");
    if (port <= 0 || port > 65535)
        return tr_fail(TR_ERR_INVALID, "store: port %d out of range 1..65535", port);
    token = token ? token : "";
    session = session ? session : "";
    if (strlen(token) > TR_STORE_MAX_KEY || strlen(session) > TR_STORE_MAX_KEY)
        return tr_fail(TR_ERR_INVALID, "store: job token or session longer than 1 KiB");
    if (!(timeout_s > 0))
        return tr_fail(TR_ERR_INVALID, "store: timeout must be > 0 (got %g)", timeout_s);
    if (world_size < 0 || world_size > (1 << 20) || rank >= world_size)
        return tr_fail(TR_ERR_INVALID, "store: rank %d of world size %d is impossible", rank,
                       world_size);
    tr_store *st = calloc(1, sizeof *st);
    if (!st)
        return tr_fail(TR_ERR_NOMEM, "store: out of memory");
    st->fd = -1;
    strcpy(st->host, host);
    st->port = port;
    strcpy(st->token, token);
    strcpy(st->session, session);
    st->rank = rank < 0 ? -1 : rank;
    st->world_size = world_size;
    st->timeout_s = timeout_s;
    int rc = establish(st, tr_now() + timeout_s);
    if (rc) {
        free(st);
        return rc;
    }
    *out = st;
    return TR_OK;
}

void tr_store_close(tr_store *st)
{
    if (!st)
        return;
    drop(st);
    free(st);
}

static int check_key(const char *key)
{
    if (!key || !*key)
        return tr_fail(TR_ERR_INVALID, "store: empty key");
    if (strlen(key) > TR_STORE_MAX_KEY)
        return tr_fail(TR_ERR_INVALID, "store: key of %zu bytes is longer than the limit of %d",
                       strlen(key), TR_STORE_MAX_KEY);
    return TR_OK;
}

/* A key in a message: its first 64 bytes, so that the server's reason after it survives. */
#define KEY_FMT "'%.64s%s'"
#define KEY_ARG(k) (k), strlen(k) > 64 ? "..." : ""

static const char *op_name(uint8_t op)
{
    return op == STORE_OP_SET ? "set" : op == STORE_OP_GET ? "get" : op == STORE_OP_ADD ? "add"
         : op == STORE_OP_WAIT ? "wait" : "check";
}

/* One request/response round trip; on OK returns the payload (malloc'ed), which must be
 * `want` bytes long (-1: any length). */
static int roundtrip(tr_store *st, uint8_t op, const char *key, const void *val, size_t vlen,
                     long want, uint8_t **payload, size_t *plen)
{
    double deadline = tr_now() + st->timeout_s;
    if (st->fd < 0) {
        int rc = establish(st, deadline);
        if (rc)
            return rc;
    }
    uint8_t status = 0, *msg = NULL;
    size_t len = 0;
    int rc = send_request(st, op, key, strlen(key), val, vlen, deadline);
    if (!rc)
        rc = read_response(st, &status, &msg, &len, deadline);
    if (rc == TR_ERR_INVALID) {
        drop(st);
        return tr_fail_context(TR_ERR_COMM, "key " KEY_FMT, KEY_ARG(key));
    }
    if (rc == TR_ERR_TIMEOUT) {
        drop(st);
        return tr_fail(TR_ERR_TIMEOUT, "store %s:%d: no answer for key " KEY_FMT " within %g s",
                       st->host, st->port, KEY_ARG(key), st->timeout_s);
    }
    if (rc) {
        int e = errno;
        drop(st);
        return tr_fail(TR_ERR_COMM, "store %s:%d: connection lost (%s)", st->host, st->port,
                       strerror(e));
    }
    if (status != STORE_OK) {
        int r = status == STORE_ABORTED
                    ? tr_fail(TR_ERR_CONFIG, "store %s:%d: the rendezvous was stopped: %s",
                              st->host, st->port, msg ? (char *)msg : "?")
                    : tr_fail(TR_ERR_COMM, "store %s:%d refused the request on key " KEY_FMT ": %s",
                              st->host, st->port, KEY_ARG(key), msg ? (char *)msg : "?");
        free(msg);
        drop(st);
        return r;
    }
    if (want >= 0 && len != (size_t)want) { /* out of step with the server: trust no more */
        free(msg);
        drop(st);
        return tr_fail(TR_ERR_COMM, "store %s:%d: malformed answer to %s of key " KEY_FMT " (%zu "
                                    "bytes, expected %ld)", st->host, st->port, op_name(op),
                       KEY_ARG(key), len, want);
    }
    if (payload)
        *payload = msg, *plen = len;
    else
        free(msg);
    return TR_OK;
}

int tr_store_set(tr_store *st, const char *key, const void *value, size_t len)
{
    int rc = check_key(key);
    if (rc)
        return rc;
    if (len > TR_STORE_MAX_VALUE)
        return tr_fail(TR_ERR_INVALID, "store: value of %zu bytes for key '%s' exceeds the 1 MiB limit",
                       len, key);
    if (len && !value)
        return tr_fail(TR_ERR_INVALID, "store: NULL value");
    return roundtrip(st, STORE_OP_SET, key, value, len, 0, NULL, NULL);
}

int tr_store_get(tr_store *st, const char *key, void **value, size_t *len)
{
    *value = NULL;
    *len = 0;
    int rc = check_key(key);
    if (rc)
        return rc;
    uint8_t *p = NULL;
    rc = roundtrip(st, STORE_OP_GET, key, NULL, 0, -1, &p, len);
    if (rc)
        return rc;
    *value = p;
    return TR_OK;
}

int tr_store_add(tr_store *st, const char *key, int64_t delta, int64_t *result)
{
    int rc = check_key(key);
    if (rc)
        return rc;
    uint8_t buf[8], *p = NULL;
    size_t len = 0;
    store_put_i64(buf, delta);
    rc = roundtrip(st, STORE_OP_ADD, key, buf, 8, 8, &p, &len);
    if (rc)
        return rc;
    if (result)
        *result = store_get_i64(p);
    free(p);
    return TR_OK;
}

int tr_store_wait(tr_store *st, const char *const *keys, size_t nkeys)
{
    for (size_t i = 0; i < nkeys; i++) {
        int rc = check_key(keys[i]);
        if (!rc)
            rc = roundtrip(st, STORE_OP_WAIT, keys[i], NULL, 0, 0, NULL, NULL);
        if (rc)
            return rc;
    }
    return TR_OK;
}

int tr_store_check(tr_store *st, const char *key, int *exists)
{
    *exists = 0;
    int rc = check_key(key);
    if (rc)
        return rc;
    uint8_t *p = NULL;
    size_t len = 0;
    rc = roundtrip(st, STORE_OP_CHECK, key, NULL, 0, 1, &p, &len);
    if (rc)
        return rc;
    uint8_t answer = p[0];
    free(p);
    if (answer > 1) {
        drop(st);
        return tr_fail(TR_ERR_COMM, "store %s:%d: malformed answer to check of key " KEY_FMT
                                    " (%u)", st->host, st->port, KEY_ARG(key), (unsigned)answer);
    }
    *exists = answer;
    return TR_OK;
}
