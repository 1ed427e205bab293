/* The rendezvous store's server: one background thread, poll() over non-blocking sockets.
 * Each connection carries one request at a time; GET/WAIT on a missing key park the
 * connection until a SET (or ADD) creates the key. A malformed frame (bad magic, unknown op,
 * oversized key/value, request before HELLO) gets an error reply and closes that connection
 * only; a wrong job token likewise. What a request does is in request.c, a connection's I/O
 * and deadlines in conn.c, the key table in table.c.
 *
 * Every connection the server drops for what its peer sent (a malformed frame, a wrong token,
 * no HELLO within 10 s, a request cut off by the peer closing, or stalled midway for 10 s of
 * its first byte) is logged as a warning naming the peer's address and the reason, at most 20
 * lines per 10 s (then, and at the end, a count of those not shown), so rank 0's log says who
 * sent what even under a flood. The store's cap of 512 MiB counts keys and a 64-byte overhead
 * per entry besides values, so many keys with empty values fill it too.
 *
 * Unauthenticated peers are bounded: any request but HELLO (at most ~2 KiB) is refused at its
 * header before its body is read, so a connection costs at most ~3 KiB until its HELLO passes;
 * at most 1024 such connections are kept (~3 MiB), each for at most 10 s, the oldest making
 * room for a newcomer, so idle peers cannot lock ranks out. The table holds world_size + 1024
 * connections: every rank keeps its own for the job's lifetime, however many ranks there are.
 * An authenticated peer holds a request's buffer (up to 1 MiB + 1 KiB) at most 10 s of its
 * first byte. The thread sleeps in poll() until a socket is ready or the nearest of these
 * deadlines: it never wakes on a timer otherwise.
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
#include <limits.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define LOG_WINDOW_S 10.0
#define LOG_PER_WINDOW 20

void store_log_drop(tr_store_server *s, const store_conn *c, const char *why)
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

/* poll()'s timeout: until the nearest connection deadline (rounded up, so the round after it
 * finds that deadline passed and drops the connection), or none (-1: sleep until a socket or
 * the stop pipe is ready). */
static int poll_timeout_ms(const tr_store_server *s, double now)
{
    double nearest = INFINITY;
    for (int i = 0; i < s->nconns; i++) {
        double d = store_conn_deadline(s, s->conns[i]);
        nearest = d < nearest ? d : nearest;
    }
    if (nearest == INFINITY)
        return -1;
    double ms = ceil((nearest - now) * 1e3) + 1;
    return ms <= 0 ? 0 : ms >= INT_MAX ? INT_MAX : (int)ms;
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
            store_conn *c = s->conns[i];
            short ev = POLLRDHUP;
            if (c->out_len > c->out_sent)
                ev |= POLLOUT;
            else if (!c->parked_key && !c->close_after_write)
                ev |= POLLIN;
            fds[n++] = (struct pollfd){.fd = c->fd, .events = ev};
        }
        int r = poll(fds, (nfds_t)n, poll_timeout_ms(s, tr_now()));
        if (r < 0 && errno != EINTR)
            break;
        if (fds[0].revents)
            break; /* stop requested */
        int nbefore = s->nconns;
        for (int i = 0; i < nbefore; i++) {
            store_conn *c = s->conns[i];
            short re = fds[2 + i].revents;
            int drop = 0;
            if (re & POLLOUT)
                drop = store_conn_writable(c) < 0;
            if (!drop && (re & POLLIN))
                drop = store_conn_readable(s, c) < 0;
            if (!drop && c->out_len > c->out_sent)
                drop = store_conn_writable(c) < 0; /* reply right away when possible */
            if (!drop && (re & (POLLERR | POLLHUP | POLLNVAL))) {
                if (c->hdr_got > 0)
                    store_log_drop(s, c, "connection reset in the middle of a request");
                drop = 1;
            }
            if (!drop && (re & POLLRDHUP) && !(re & POLLIN) && c->out_len == c->out_sent)
                drop = 1;
            char why[192];
            if (!drop && store_conn_expired(s, c, tr_now(), why, sizeof why)) {
                store_log_drop(s, c, why);
                drop = 1;
            }
            /* to be closed, nothing left to send (its error reply did not fit in memory) */
            if (!drop && c->close_after_write && c->out_len == c->out_sent)
                drop = 1;
            if (drop) {
                store_conn_free(s, c);
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
                store_conn_accept(s);
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
    return store_server_start_with(bind_host, port, token, session, world_size, NULL, out);
}

int store_server_start_with(const char *bind_host, int port, const char *token,
                            const char *session, int world_size, const store_server_options *opts,
                            tr_store_server **out)
{
    *out = NULL;
    store_server_options o = opts ? *opts : (store_server_options){0};
    if (port < 0 || port > 65535)
        return tr_fail(TR_ERR_INVALID, "store: port %d out of range 0..65535", port);
    if (world_size < 0 || world_size > (1 << 20))
        return tr_fail(TR_ERR_INVALID, "store: world size %d out of range 0..%d", world_size,
                       1 << 20);
    if (!(o.hello_timeout_s >= 0) || !(o.request_timeout_s >= 0))
        return tr_fail(TR_ERR_INVALID, "store: a negative timeout (hello %g s, request %g s)",
                       o.hello_timeout_s, o.request_timeout_s);
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
    store_table_init(&s->table, o.max_bytes ? o.max_bytes : STORE_MAX_TOTAL_BYTES);
    s->hello_timeout_s = o.hello_timeout_s > 0 ? o.hello_timeout_s : STORE_HELLO_TIMEOUT_S;
    s->request_timeout_s = o.request_timeout_s > 0 ? o.request_timeout_s : STORE_REQUEST_TIMEOUT_S;
    s->joined = calloc((size_t)world_size / 8 + 1, 1);
    s->cap = world_size + STORE_MAX_UNAUTH;
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
        store_conn_free(s, s->conns[i]);
    free(s->conns);
    store_table_free(&s->table);
    close(s->listen_fd);
    close(s->wake_pipe[0]);
    close(s->wake_pipe[1]);
    free(s->joined);
    free(s);
}
