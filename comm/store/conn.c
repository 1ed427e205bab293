/* A store connection's I/O (private to comm/store/): non-blocking reads of one request at a
 * time (header, then key and value into a buffer sized by the header), replies written as the
 * socket takes them, accepting, and the deadlines that bound what a peer may hold:
 *  - no HELLO within hello_timeout_s (STORE_HELLO_TIMEOUT_S) of being accepted: dropped;
 *  - a request not whole within request_timeout_s (STORE_REQUEST_TIMEOUT_S) of its first byte
 *    (a peer that stalls in the middle of a header, key or value): dropped, its buffer freed.
 * A request received whole is not timed: a GET/WAIT parked on a missing key waits as long as
 * its client does. Only a partial request's own connection is dropped; parked waiters on the
 * key it would have set stay parked. Every drop is logged with the peer's address, the reason
 * and, for a deadline, how long the server waited by its own clock. */
#include "comm/store/store_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* c's two deadlines (INFINITY: none): its HELLO's, and its partial request's. The one that
 * passes first is the reason c is dropped. */
static void deadlines(const tr_store_server *s, const store_conn *c, double *hello_by,
                      double *request_by)
{
    *hello_by = c->authed ? INFINITY : c->opened + s->hello_timeout_s;
    *request_by = c->hdr_got > 0 && !c->close_after_write
                      ? c->request_started + s->request_timeout_s : INFINITY;
}

double store_conn_deadline(const tr_store_server *s, const store_conn *c)
{
    double hello_by, request_by;
    deadlines(s, c, &hello_by, &request_by);
    return hello_by < request_by ? hello_by : request_by;
}

int store_conn_expired(const tr_store_server *s, const store_conn *c, double now, char *why,
                       size_t why_len)
{
    double hello_by, request_by;
    deadlines(s, c, &hello_by, &request_by);
    if (now < hello_by && now < request_by)
        return 0;
    if (hello_by <= request_by) {
        snprintf(why, why_len, "no hello within %g s (connected %.3f s ago)", s->hello_timeout_s,
                 now - c->opened);
        return 1;
    }
    double waited = now - c->request_started;
    if (c->hdr_got < STORE_REQ_HDR)
        snprintf(why, why_len, "stalled in the middle of a request header (%zu of %d bytes) for "
                               "%.3f s (limit %g s)", c->hdr_got, STORE_REQ_HDR, waited,
                 s->request_timeout_s);
    else
        snprintf(why, why_len, "stalled in the middle of a request (%zu of %zu bytes after its "
                               "header) for %.3f s (limit %g s)", c->body_got, c->body_len, waited,
                 s->request_timeout_s);
    return 1;
}

void store_conn_free(tr_store_server *s, store_conn *c)
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

/* Reads what is available, one request at a time. */
int store_conn_readable(tr_store_server *s, store_conn *c)
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
                store_log_drop(s, c, why);
            }
            return -1;
        }
        if (r < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;
            if (c->hdr_got > 0)
                store_log_drop(s, c, strerror(errno));
            return -1;
        }
        if (c->hdr_got < STORE_REQ_HDR) {
            if (c->hdr_got == 0) /* a request's first byte: its deadline counts from here */
                c->request_started = tr_now();
            c->hdr_got += (size_t)r;
            if (c->hdr_got < STORE_REQ_HDR)
                continue;
            const char *why = NULL;
            c->op = c->hdr[4];
            c->klen = store_get_u32(c->hdr + 5);
            c->vlen = store_get_u32(c->hdr + 9);
            if (memcmp(c->hdr, STORE_MAGIC, 4)) {
                store_refuse(s, c, "bad magic: not a trident store client");
                return 0;
            }
            if (!store_valid_request(c->op, c->klen, c->vlen, &why)) {
                store_refuse(s, c, why);
                return 0;
            }
            /* authenticate before reading anything large: a peer without a hello gets no
             * buffer for its body */
            if (!c->authed && c->op != STORE_OP_HELLO) {
                store_refuse(s, c, "hello expected first");
                return 0;
            }
            if (c->authed && c->op == STORE_OP_HELLO) {
                store_refuse(s, c, "duplicate hello");
                return 0;
            }
            c->body_len = (size_t)c->klen + c->vlen;
            c->body_got = 0;
            free(c->body);
            c->body = malloc(c->body_len ? c->body_len : 1);
            if (!c->body) {
                store_log_drop(s, c, "out of memory for a request");
                return -1;
            }
        } else {
            c->body_got += (size_t)r;
        }
        if (c->body_got == c->body_len) {
            store_handle_request(s, c);
            c->hdr_got = 0;
            free(c->body);
            c->body = NULL;
        }
    }
}

int store_conn_writable(store_conn *c)
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

void store_conn_accept(tr_store_server *s)
{
    struct sockaddr_in a = {0};
    socklen_t alen = sizeof a;
    int fd = accept4(s->listen_fd, (struct sockaddr *)&a, &alen, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0)
        return;
    int slot = s->nconns;
    if (s->n_unauth >= STORE_MAX_UNAUTH || slot == s->cap) { /* the oldest without a hello */
        slot = -1;
        for (int i = 0; i < s->nconns; i++)
            if (!s->conns[i]->authed && (slot < 0 || s->conns[i]->opened < s->conns[slot]->opened))
                slot = i;
    }
    store_conn *c = slot >= 0 ? calloc(1, sizeof *c) : NULL;
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
        store_log_drop(s, s->conns[slot], "no hello yet, and a newcomer needs its slot");
        store_conn_free(s, s->conns[slot]);
    } else
        s->nconns++;
    s->conns[slot] = c;
    s->n_unauth++;
}

