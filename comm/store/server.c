/* The rendezvous store's server: one background thread, poll() over non-blocking sockets.
 * Each connection carries one request at a time; GET/WAIT on a missing key park the
 * connection until a SET (or ADD) creates the key. A malformed frame (bad magic, unknown op,
 * oversized key/value, request before HELLO) gets an error reply and closes that connection
 * only; a wrong job token likewise.
 *
 * Every connection the server drops for what its peer sent (a malformed frame, a wrong token,
 * no HELLO within 10 s, a request cut off by the peer closing) is logged as a warning naming the
 * peer's address and the reason, at most 20 lines per 10 s (then, and at the end, a count of
 * those not shown), so rank 0's log says who sent what even under a flood. The store's cap of
 * 512 MiB counts keys and a 64-byte overhead per entry besides values, so many keys with empty
 * values fill it too.
 *
 * Unauthenticated peers are bounded: any request but HELLO (at most ~2 KiB) is refused at its
 * header before its body is read, so a connection costs at most ~3 KiB until its HELLO passes;
 * at most 1024 such connections are kept (~3 MiB), each for at most 10 s, the oldest making
 * room for a newcomer, so idle peers cannot lock ranks out. The table holds world_size + 1024
 * connections: every rank keeps its own for the job's lifetime, however many ranks there are.
 *
 * Job identity: a server that knows its world size (world_size > 0) records which ranks have
 * joined (HELLO's claim). Until every rank has, a rank of this world refused for another
 * job's token, or a rank of this job that claims another world size, stops the rendezvous:
 * every parked and later request gets STORE_ABORTED with the reason, so the job's ranks fail
 * at once, naming it, instead of waiting out their timeout for a rank that went elsewhere. */
#include "comm/store/store_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_UNAUTH 1024 /* connections without a good HELLO yet */
#define NBUCKETS 1024
#define MAX_TOTAL_BYTES ((size_t)512 << 20)
#define ENTRY_OVERHEAD 64 /* bytes charged per entry besides its key and value (allocator, links) */
#define LOG_WINDOW_S 10.0
#define LOG_PER_WINDOW 20
#define HELLO_TIMEOUT_S 10.0

typedef struct entry {
    struct entry *next;
    char *key;
    uint8_t *value;
    size_t len;
} entry;

typedef struct {
    int fd;
    int authed;
    char peer[64]; /* "address:port" of the peer, for the log */
    double opened;
    uint8_t hdr[STORE_REQ_HDR];
    size_t hdr_got;
    uint8_t *body; /* key then value */
    size_t body_len, body_got;
    uint8_t op;
    uint32_t klen, vlen;
    char *parked_key; /* GET/WAIT waiting for this key */
    uint8_t parked_op;
    uint8_t *out;
    size_t out_len, out_sent;
    int close_after_write;
} conn;

struct tr_store_server {
    int listen_fd, wake_pipe[2], port;
    char token[TR_STORE_MAX_KEY + 1], session[TR_STORE_MAX_KEY + 1];
    pthread_t thread;
    int running;
    entry *buckets[NBUCKETS];
    size_t total_bytes, max_bytes; /* values, keys and ENTRY_OVERHEAD per entry */
    conn **conns; /* cap slots, nconns used */
    int nconns, cap;
    int n_unauth; /* connections not authenticated yet */
    int world_size;        /* 0: not told; no claims checked */
    uint8_t *joined;       /* bit r: rank r has said hello */
    int n_joined;          /* distinct ranks joined; == world_size: formed */
    char aborted[512];     /* the reason the rendezvous was stopped, "" while it was not */
    double log_window;     /* start of the current window of dropped-peer warnings */
    int logged, unlogged;  /* warnings printed in it, and those held back */
};

/* Warn that the connection from c's peer is dropped, and why (rate-limited). */
static void log_drop(tr_store_server *s, const conn *c, const char *why)
{
    double now = tr_now();
    if (now - s->log_window >= LOG_WINDOW_S) {
        if (s->unlogged)
            tr_warn("store: %d more dropped connections not shown", s->unlogged);
        s->log_window = now;
        s->logged = s->unlogged = 0;
    }
    if (s->logged >= LOG_PER_WINDOW) {
        s->unlogged++;
        return;
    }
    s->logged++;
    tr_warn("store: dropped the connection from %s: %s", c->peer, why);
}

static size_t bucket_of(const char *key)
{
    return (size_t)(tr_hash_name(key) % NBUCKETS);
}

static entry *find(tr_store_server *s, const char *key)
{
    for (entry *e = s->buckets[bucket_of(key)]; e; e = e->next)
        if (!strcmp(e->key, key))
            return e;
    return NULL;
}

static void conn_free(tr_store_server *s, conn *c)
{
    if (!c->authed)
        s->n_unauth--;
    if (c->fd >= 0)
        close(c->fd);
    free(c->body);
    free(c->parked_key);
    free(c->out);
    free(c);
}

/* Queue a response; returns 0 or -1 (out of memory: caller closes). */
static int respond(conn *c, uint8_t status, const void *payload, size_t len)
{
    size_t need = c->out_len + STORE_RESP_HDR + len;
    uint8_t *o = realloc(c->out, need);
    if (!o)
        return -1;
    c->out = o;
    o += c->out_len;
    o[0] = status;
    store_put_u32(o + 1, (uint32_t)len);
    if (len)
        memcpy(o + STORE_RESP_HDR, payload, len);
    c->out_len = need;
    return 0;
}

static void respond_error_and_close(tr_store_server *s, conn *c, const char *msg)
{
    log_drop(s, c, msg);
    respond(c, STORE_ERROR, msg, strlen(msg));
    c->close_after_write = 1;
}

static void respond_aborted(tr_store_server *s, conn *c)
{
    respond(c, STORE_ABORTED, s->aborted, strlen(s->aborted));
    c->close_after_write = 1;
}

static int formed(const tr_store_server *s)
{
    return s->world_size > 0 && s->n_joined == s->world_size;
}

/* Stop the rendezvous (the first reason is kept): every parked request is answered now. */
static void abort_rendezvous(tr_store_server *s, const char *why)
{
    if (s->aborted[0])
        return;
    snprintf(s->aborted, sizeof s->aborted, "%s", why);
    for (int i = 0; i < s->nconns; i++) {
        conn *c = s->conns[i];
        if (c && c->parked_key) {
            free(c->parked_key);
            c->parked_key = NULL;
            respond_aborted(s, c);
        }
    }
}

/* Answer a GET/WAIT on an existing entry. */
static void answer_lookup(conn *c, uint8_t op, const entry *e)
{
    if (op == STORE_OP_GET) {
        if (respond(c, STORE_OK, e->value, e->len))
            c->close_after_write = 1;
    } else {
        respond(c, STORE_OK, NULL, 0);
    }
}

static void wake_parked(tr_store_server *s, const entry *e)
{
    for (int i = 0; i < s->nconns; i++) {
        conn *c = s->conns[i]; /* NULL: dropped earlier in this poll round */
        if (c && c->parked_key && !strcmp(c->parked_key, e->key)) {
            answer_lookup(c, c->parked_op, e);
            free(c->parked_key);
            c->parked_key = NULL;
        }
    }
}

/* Insert or replace; returns the entry or NULL (with *why) when over the memory cap. */
static entry *put(tr_store_server *s, const char *key, const uint8_t *val, size_t len,
                  const char **why)
{
    entry *e = find(s, key);
    size_t old = e ? e->len : 0;
    /* a new entry costs its key and bookkeeping too: many keys with empty values fill it */
    size_t add = e ? len : len + strlen(key) + 1 + ENTRY_OVERHEAD;
    if (s->total_bytes - old + add > s->max_bytes) {
        *why = "store is full: its keys and values reached its memory limit";
        return NULL;
    }
    uint8_t *copy = malloc(len ? len : 1);
    if (!copy) {
        *why = "out of memory";
        return NULL;
    }
    if (len)
        memcpy(copy, val, len);
    if (!e) {
        e = calloc(1, sizeof *e);
        char *k = strdup(key);
        if (!e || !k) {
            free(e);
            free(k);
            free(copy);
            *why = "out of memory";
            return NULL;
        }
        e->key = k;
        size_t b = bucket_of(key);
        e->next = s->buckets[b];
        s->buckets[b] = e;
    }
    free(e->value);
    e->value = copy;
    e->len = len;
    s->total_bytes = s->total_bytes - old + add;
    return e;
}

static int token_equal(const char *a, const char *b, size_t blen)
{
    size_t alen = strlen(a);
    unsigned diff = (unsigned)(alen != blen);
    for (size_t i = 0; i < blen; i++)
        diff |= (unsigned)(uint8_t)b[i] ^ (unsigned)(uint8_t)(i < alen ? a[i] : 0);
    return diff == 0;
}

/* HELLO: key = job token, value = session [NUL rank size]. */
static void hello(tr_store_server *s, conn *c)
{
    const uint8_t *val = c->body + c->klen, *nul = memchr(val, 0, c->vlen);
    size_t slen = nul ? (size_t)(nul - val) : c->vlen;
    uint32_t rank = STORE_NO_RANK, size = 0;
    if (nul) {
        if (c->vlen - slen - 1 != STORE_CLAIM_LEN) {
            respond_error_and_close(s, c, "malformed hello");
            return;
        }
        rank = store_get_u32(nul + 1);
        size = store_get_u32(nul + 5);
    }
    uint32_t w = (uint32_t)s->world_size;
    int is_rank = rank != STORE_NO_RANK && w > 0;
    int of_world = is_rank && size == w && rank < w; /* a rank slot of this world */
    int slot_open = of_world && !(s->joined[rank / 8] & (1u << (rank % 8)));
    char why[256];
    if (!token_equal(s->token, (const char *)c->body, c->klen)) {
        /* a rank this world still waits for went to another job: it will not come here */
        if (slot_open && !formed(s)) {
            snprintf(why, sizeof why, "rank %u of %u presented another job's identity and was "
                                      "refused", rank, size);
            abort_rendezvous(s, why);
        }
        respond_error_and_close(s, c, "another job's identity: the store at this address serves "
                                   "another job");
        return;
    }
    if (!token_equal(s->session, (const char *)val, slen)) {
        respond(c, STORE_RETRY, "session mismatch", 16);
        c->close_after_write = 1;
        return;
    }
    if (s->aborted[0]) {
        respond_aborted(s, c);
        return;
    }
    if (is_rank && !of_world) {
        if (!formed(s)) {
            snprintf(why, sizeof why, "rank %u says WORLD_SIZE=%u but this job has "
                                      "WORLD_SIZE=%u", rank, size, w);
            abort_rendezvous(s, why);
        }
        snprintf(why, sizeof why, "this rank (%u) says WORLD_SIZE=%u but the job's rank 0 has "
                                  "WORLD_SIZE=%u", rank, size, w);
        respond_error_and_close(s, c, why);
        return;
    }
    if (slot_open) {
        s->joined[rank / 8] |= (uint8_t)(1u << (rank % 8));
        s->n_joined++;
    }
    c->authed = 1;
    s->n_unauth--;
    respond(c, STORE_OK, NULL, 0);
}

/* Handle one complete request in c->body. */
static void handle(tr_store_server *s, conn *c)
{
    const char *kbytes = (const char *)c->body;
    const uint8_t *val = c->body + c->klen;
    if (c->op == STORE_OP_HELLO) {
        hello(s, c);
        return;
    }
    if (!c->authed) {
        respond_error_and_close(s, c, "hello expected first");
        return;
    }
    if (s->aborted[0]) {
        respond_aborted(s, c);
        return;
    }
    if (memchr(kbytes, 0, c->klen)) {
        respond_error_and_close(s, c, "key contains a NUL byte");
        return;
    }
    char key[TR_STORE_MAX_KEY + 1];
    memcpy(key, kbytes, c->klen);
    key[c->klen] = '\0';
    const char *why = NULL;
    entry *e;
    switch (c->op) {
    case STORE_OP_SET:
        e = put(s, key, val, c->vlen, &why);
        if (!e) {
            respond(c, STORE_ERROR, why, strlen(why));
            return;
        }
        respond(c, STORE_OK, NULL, 0);
        wake_parked(s, e);
        return;
    case STORE_OP_ADD: {
        e = find(s, key);
        int64_t cur = 0;
        if (e && e->len == 8)
            cur = store_get_i64(e->value);
        else if (e) {
            respond(c, STORE_ERROR, "add on a non-counter key", 24);
            return;
        }
        uint8_t buf[8];
        store_put_i64(buf, (int64_t)((uint64_t)cur + (uint64_t)store_get_i64(val)));
        e = put(s, key, buf, 8, &why);
        if (!e) {
            respond(c, STORE_ERROR, why, strlen(why));
            return;
        }
        respond(c, STORE_OK, buf, 8);
        wake_parked(s, e);
        return;
    }
    case STORE_OP_CHECK: {
        uint8_t present = find(s, key) != NULL;
        respond(c, STORE_OK, &present, 1);
        return;
    }
    case STORE_OP_GET:
    case STORE_OP_WAIT:
        e = find(s, key);
        if (e) {
            answer_lookup(c, c->op, e);
        } else {
            c->parked_key = strdup(key);
            c->parked_op = c->op;
            if (!c->parked_key)
                respond_error_and_close(s, c, "out of memory");
        }
        return;
    default:
        respond_error_and_close(s, c, "unknown operation");
    }
}

/* Read what is available; returns -1 when the connection must close now. */
static int on_readable(tr_store_server *s, conn *c)
{
    for (;;) {
        if (c->parked_key || c->close_after_write || c->out_len > c->out_sent)
            return 0; /* one request at a time */
        uint8_t *dst;
        size_t want;
        if (c->hdr_got < STORE_REQ_HDR) {
            dst = c->hdr + c->hdr_got;
            want = STORE_REQ_HDR - c->hdr_got;
        } else {
            dst = c->body + c->body_got;
            want = c->body_len - c->body_got;
        }
        ssize_t r = want ? recv(c->fd, dst, want, MSG_DONTWAIT) : 0;
        if (want && r == 0) {
            if (c->hdr_got > 0) { /* between requests a close is normal; inside one it is not */
                char why[128];
                if (c->hdr_got < STORE_REQ_HDR)
                    snprintf(why, sizeof why, "closed in the middle of a request header (%zu of "
                                              "%d bytes)", c->hdr_got, STORE_REQ_HDR);
                else
                    snprintf(why, sizeof why, "closed in the middle of a request (%zu of %zu "
                                              "bytes after its header)", c->body_got, c->body_len);
                log_drop(s, c, why);
            }
            return -1;
        }
        if (r < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;
            if (c->hdr_got > 0)
                log_drop(s, c, strerror(errno));
            return -1;
        }
        if (c->hdr_got < STORE_REQ_HDR) {
            c->hdr_got += (size_t)r;
            if (c->hdr_got < STORE_REQ_HDR)
                continue;
            const char *why = NULL;
            c->op = c->hdr[4];
            c->klen = store_get_u32(c->hdr + 5);
            c->vlen = store_get_u32(c->hdr + 9);
            if (memcmp(c->hdr, STORE_MAGIC, 4)) {
                respond_error_and_close(s, c, "bad magic: not a trident store client");
                return 0;
            }
            if (!store_valid_request(c->op, c->klen, c->vlen, &why)) {
                respond_error_and_close(s, c, why);
                return 0;
            }
            /* authenticate before reading anything large: a peer without a hello gets no
             * buffer for its body */
            if (!c->authed && c->op != STORE_OP_HELLO) {
                respond_error_and_close(s, c, "hello expected first");
                return 0;
            }
            if (c->authed && c->op == STORE_OP_HELLO) {
                respond_error_and_close(s, c, "duplicate hello");
                return 0;
            }
            c->body_len = (size_t)c->klen + c->vlen;
            c->body_got = 0;
            free(c->body);
            c->body = malloc(c->body_len ? c->body_len : 1);
            if (!c->body) {
                log_drop(s, c, "out of memory for a request");
                return -1;
            }
        } else {
            c->body_got += (size_t)r;
        }
        if (c->body_got == c->body_len) {
            handle(s, c);
            c->hdr_got = 0;
            free(c->body);
            c->body = NULL;
        }
    }
}

static int on_writable(conn *c)
{
    while (c->out_sent < c->out_len) {
        ssize_t w = send(c->fd, c->out + c->out_sent, c->out_len - c->out_sent,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -1;
        }
        c->out_sent += (size_t)w;
    }
    free(c->out);
    c->out = NULL;
    c->out_len = c->out_sent = 0;
    if (!c->close_after_write)
        return 0;
    /* what the peer sent beyond the refused header: closing with it unread would send a reset
     * that can overtake the error reply, so the peer would never read why */
    uint8_t junk[4096];
    for (int i = 0; i < 16 && recv(c->fd, junk, sizeof junk, MSG_DONTWAIT) > 0; i++) {
    }
    return -1;
}

static void accept_one(tr_store_server *s)
{
    struct sockaddr_in a = {0};
    socklen_t alen = sizeof a;
    int fd = accept4(s->listen_fd, (struct sockaddr *)&a, &alen, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0)
        return;
    int slot = s->nconns;
    if (s->n_unauth >= MAX_UNAUTH || slot == s->cap) { /* the oldest without a hello makes room */
        slot = -1;
        for (int i = 0; i < s->nconns; i++)
            if (!s->conns[i]->authed && (slot < 0 || s->conns[i]->opened < s->conns[slot]->opened))
                slot = i;
    }
    conn *c = slot >= 0 ? calloc(1, sizeof *c) : NULL;
    if (!c) {
        close(fd);
        return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    c->fd = fd;
    c->opened = tr_now();
    char ip[INET_ADDRSTRLEN] = "?";
    inet_ntop(AF_INET, &a.sin_addr, ip, sizeof ip);
    snprintf(c->peer, sizeof c->peer, "%s:%u", ip, (unsigned)ntohs(a.sin_port));
    if (slot < s->nconns) {
        log_drop(s, s->conns[slot], "no hello yet, and a newcomer needs its slot");
        conn_free(s, s->conns[slot]);
    } else
        s->nconns++;
    s->conns[slot] = c;
    s->n_unauth++;
}

static void *serve(void *arg)
{
    tr_store_server *s = arg;
    struct pollfd *fds = calloc((size_t)s->cap + 2, sizeof *fds);
    if (!fds)
        return NULL;
    for (;;) {
        int n = 0;
        fds[n++] = (struct pollfd){.fd = s->wake_pipe[0], .events = POLLIN};
        fds[n++] = (struct pollfd){.fd = s->listen_fd, .events = POLLIN};
        for (int i = 0; i < s->nconns; i++) {
            conn *c = s->conns[i];
            short ev = POLLRDHUP;
            if (c->out_len > c->out_sent)
                ev |= POLLOUT;
            else if (!c->parked_key && !c->close_after_write)
                ev |= POLLIN;
            fds[n++] = (struct pollfd){.fd = c->fd, .events = ev};
        }
        int r = poll(fds, (nfds_t)n, 1000);
        if (r < 0 && errno != EINTR)
            break;
        if (fds[0].revents)
            break; /* stop requested */
        int nbefore = s->nconns;
        double now = tr_now();
        for (int i = 0; i < nbefore; i++) {
            conn *c = s->conns[i];
            short re = fds[2 + i].revents;
            int drop = 0;
            if (re & POLLOUT)
                drop = on_writable(c) < 0;
            if (!drop && (re & POLLIN))
                drop = on_readable(s, c) < 0;
            if (!drop && c->out_len > c->out_sent)
                drop = on_writable(c) < 0; /* reply right away when possible */
            if (!drop && (re & (POLLERR | POLLHUP | POLLNVAL))) {
                if (c->hdr_got > 0)
                    log_drop(s, c, "connection reset in the middle of a request");
                drop = 1;
            }
            if (!drop && (re & POLLRDHUP) && !(re & POLLIN) && c->out_len == c->out_sent)
                drop = 1;
            if (!drop && !c->authed && now - c->opened > HELLO_TIMEOUT_S) {
                log_drop(s, c, "no hello within 10 s");
                drop = 1;
            }
            /* to be closed, nothing left to send (its error reply did not fit in memory) */
            if (!drop && c->close_after_write && c->out_len == c->out_sent)
                drop = 1;
            if (drop) {
                conn_free(s, c);
                s->conns[i] = NULL;
            }
        }
        int k = 0;
        for (int i = 0; i < s->nconns; i++)
            if (s->conns[i])
                s->conns[k++] = s->conns[i];
        s->nconns = k;
        if (fds[1].revents & POLLIN)
            for (int i = 0; i < 16; i++)
                accept_one(s);
    }
    free(fds);
    return NULL;
}

static int bind_listen(tr_store_server *s, const char *host, int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    if (host && *host) {
        struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
        int g = getaddrinfo(host, NULL, &hints, &res);
        if (g)
            return tr_fail(TR_ERR_CONFIG, "store: cannot resolve '%s': %s", host, gai_strerror(g));
        a.sin_addr = ((struct sockaddr_in *)res->ai_addr)->sin_addr;
        freeaddrinfo(res);
    }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return tr_fail(TR_ERR_COMM, "store: socket: %s", strerror(errno));
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    int rc = bind(fd, (struct sockaddr *)&a, sizeof a);
    if (rc < 0 && host && *host && errno == EADDRNOTAVAIL) {
        a.sin_addr.s_addr = htonl(INADDR_ANY); /* the name is not a local address: serve all */
        rc = bind(fd, (struct sockaddr *)&a, sizeof a);
    }
    /* a given port in use: for up to 2 s it may be a rank's connect that took the port as its
     * own before this listen (client.c lets such a connection go at once): try again */
    for (int tries = 0; rc < 0 && errno == EADDRINUSE && port != 0 && tries < 100; tries++) {
        struct timespec ts = {.tv_sec = 0, .tv_nsec = 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
        rc = bind(fd, (struct sockaddr *)&a, sizeof a);
    }
    if (rc < 0 || listen(fd, 512) < 0) {
        int e = errno;
        close(fd);
        return tr_fail(TR_ERR_COMM, "store: cannot listen on %s:%d: %s", host && *host ? host : "*",
                       port, strerror(e));
    }
    socklen_t len = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &len);
    s->listen_fd = fd;
    s->port = ntohs(a.sin_port);
    return TR_OK;
}

int tr_store_server_start(const char *bind_host, int port, const char *token,
                          const char *session, int world_size, tr_store_server **out)
{
    return store_server_start_capped(bind_host, port, token, session, world_size,
                                     MAX_TOTAL_BYTES, out);
}

int store_server_start_capped(const char *bind_host, int port, const char *token,
                              const char *session, int world_size, size_t max_bytes,
                              tr_store_server **out)
{
    *out = NULL;
    if (port < 0 || port > 65535)
        return tr_fail(TR_ERR_INVALID, "store: port %d out of range 0..65535", port);
    if (world_size < 0 || world_size > (1 << 20))
        return tr_fail(TR_ERR_INVALID, "store: world size %d out of range 0..%d", world_size,
                       1 << 20);
    token = token ? token : "";
    session = session ? session : "";
    if (strlen(token) > TR_STORE_MAX_KEY || strlen(session) > TR_STORE_MAX_KEY)
        return tr_fail(TR_ERR_INVALID, "store: job token or session longer than 1 KiB");
    tr_store_server *s = calloc(1, sizeof *s);
    if (!s)
        return tr_fail(TR_ERR_NOMEM, "store: out of memory");
    strcpy(s->token, token);
    strcpy(s->session, session);
    s->listen_fd = s->wake_pipe[0] = s->wake_pipe[1] = -1;
    s->world_size = world_size;
    s->max_bytes = max_bytes;
    s->joined = calloc((size_t)world_size / 8 + 1, 1);
    s->cap = world_size + MAX_UNAUTH;
    s->conns = calloc((size_t)s->cap, sizeof *s->conns);
    int rc = s->joined && s->conns ? TR_OK : tr_fail(TR_ERR_NOMEM, "store: out of memory");
    if (!rc)
        rc = bind_listen(s, bind_host, port);
    if (!rc && pipe2(s->wake_pipe, O_CLOEXEC) < 0)
        rc = tr_fail(TR_ERR_COMM, "store: pipe: %s", strerror(errno));
    if (!rc && pthread_create(&s->thread, NULL, serve, s) != 0)
        rc = tr_fail(TR_ERR_COMM, "store: cannot start the server thread");
    if (rc) {
        if (s->listen_fd >= 0)
            close(s->listen_fd);
        if (s->wake_pipe[0] >= 0) {
            close(s->wake_pipe[0]);
            close(s->wake_pipe[1]);
        }
        free(s->joined);
        free(s->conns);
        free(s);
        return rc;
    }
    s->running = 1;
    *out = s;
    return TR_OK;
}

int tr_store_server_port(const tr_store_server *s) { return s ? s->port : -1; }

void tr_store_server_stop(tr_store_server *s)
{
    if (!s)
        return;
    if (s->running) {
        ssize_t w = write(s->wake_pipe[1], "x", 1);
        (void)w;
        pthread_join(s->thread, NULL);
    }
    if (s->unlogged)
        tr_warn("store: %d more dropped connections not shown", s->unlogged);
    for (int i = 0; i < s->nconns; i++)
        conn_free(s, s->conns[i]);
    free(s->conns);
    for (size_t b = 0; b < NBUCKETS; b++)
        for (entry *e = s->buckets[b], *n; e; e = n) {
            n = e->next;
            free(e->key);
            free(e->value);
            free(e);
        }
    close(s->listen_fd);
    close(s->wake_pipe[0]);
    close(s->wake_pipe[1]);
    free(s->joined);
    free(s);
}
