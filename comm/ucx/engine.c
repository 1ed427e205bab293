/* The UCX engine's moving parts: endpoints, tagged transfers, progress (by the waiting thread
 * or the background thread), timeouts, and the lifetime of operations. */
#include "comm/ucx/ucx_internal.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Waiting without progress: yield the CPU for the first IDLE_YIELD_S, then sleep until UCX
 * signals an event on its file descriptor (at most IDLE_POLL_MS per sleep), or for
 * IDLE_SLEEP_NS where the transports offer no event descriptor. */
#define IDLE_YIELD_S 1e-4
#define IDLE_POLL_MS 1
#define IDLE_SLEEP_NS 50000

/* ---------------------------------------------------------------- operations */

ucx_op *ucx_op_new(ucx_group *g, tr_comm_opkind kind, int nx)
{
    ucx_op *op = calloc(1, sizeof *op);
    if (!op)
        return NULL;
    op->g = g;
    op->kind = kind;
    op->nx = nx;
    if (nx) {
        op->x = calloc((size_t)nx, sizeof *op->x);
        if (!op->x) {
            free(op);
            return NULL;
        }
    }
    return op;
}

void ucx_op_free(ucx_op *op)
{
    if (!op)
        return;
    free(op->scratch);
    free(op->lanes);
    free(op->free_slots);
    free(op->x);
    free(op);
}

typedef void (*xfer_fn)(ucx_op *op, ucx_xfer *x, void *arg);

static void for_each_xfer(ucx_op *op, xfer_fn fn, void *arg)
{
    for (int i = 0; i < op->nx; i++)
        fn(op, &op->x[i], arg);
    for (int i = 0; op->lanes && i < op->nlanes; i++) {
        fn(op, &op->lanes[i].snd, arg);
        fn(op, &op->lanes[i].rcv, arg);
    }
}

static void count_posted(ucx_op *op, ucx_xfer *x, void *arg)
{
    (void)op;
    if (x->state == XF_POSTED)
        ++*(int *)arg;
}

static void cancel_recv(ucx_op *op, ucx_xfer *x, void *arg)
{
    (void)arg;
    if (x->state == XF_POSTED && !x->is_send && x->req)
        ucp_request_cancel(op->g->eng->worker, x->req);
}

static void free_done_request(ucx_op *op, ucx_xfer *x, void *arg)
{
    (void)op;
    (void)arg;
    if (x->state == XF_DONE && x->req) {
        ucp_request_free(x->req);
        x->req = NULL;
    }
}

/* The transfer a stuck operation waits for: a posted receive first, else a posted send. */
typedef struct {
    ucx_xfer *recv, *send;
} waiting_for;

static void find_waiting(ucx_op *op, ucx_xfer *x, void *arg)
{
    (void)op;
    waiting_for *w = arg;
    if (x->state != XF_POSTED)
        return;
    if (!x->is_send && !w->recv)
        w->recv = x;
    if (x->is_send && !w->send)
        w->send = x;
}

static int prefix(const ucx_op *op, char *buf, size_t len)
{
    const ucx_group *g = op->g;
    return snprintf(buf, len, "rank %d (group '%s', rank %d of %d): %s #%u (%zu bytes)",
                    g->eng->rank, g->name, g->rank, g->size, tr_comm_opkind_name(op->kind),
                    op->seq, op->count * op->es);
}

int ucx_op_fail(ucx_op *op, const char *fmt, ...)
{
    if (op->status) /* keep the first failure */
        return -1;
    char what[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    char pre[200];
    prefix(op, pre, sizeof pre);
    snprintf(op->err, sizeof op->err, "%s: %s", pre, what);
    op->status = TR_ERR_COMM;
    op->g->broken = 1;
    op->g->eng->broken = 1;
    return -1;
}

/* ---------------------------------------------------------------- transfers */

uint64_t ucx_coll_tag(const ucx_op *op, uint32_t step)
{
    return (uint64_t)op->g->id << 44 | (uint64_t)(op->seq & 0x7ffffu) << 24 |
           (uint64_t)(step & UCX_MAX_STEP);
}

uint64_t ucx_p2p_tag(uint32_t group_id, int src, int tag)
{
    return (uint64_t)group_id << 44 | (uint64_t)1 << 43 | (uint64_t)(src & 0xfffff) << 23 |
           (uint64_t)(unsigned)tag;
}

static void send_cb(void *request, ucs_status_t status, void *user_data)
{
    (void)request;
    ucx_xfer *x = user_data;
    x->status = status;
    x->state = XF_DONE;
}

static void recv_cb(void *request, ucs_status_t status, const ucp_tag_recv_info_t *info,
                    void *user_data)
{
    (void)request;
    ucx_xfer *x = user_data;
    x->status = status;
    if (status == UCS_OK && info)
        x->got = info->length;
    x->state = XF_DONE;
}

static void ep_error_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    ucx_engine *e = arg;
    for (int r = 0; r < e->size; r++)
        if (e->eps[r] == ep && e->ep_status[r] == UCS_OK)
            e->ep_status[r] = status;
}

static int get_ep(ucx_op *op, int peer, ucp_ep_h *ep)
{
    ucx_engine *e = op->g->eng;
    int wr = op->g->world[peer];
    if (e->ep_status[wr] != UCS_OK)
        return ucx_op_fail(op, "connection to rank %d (group rank %d) failed earlier: %s", wr,
                           peer, ucs_status_string(e->ep_status[wr]));
    if (!e->eps[wr]) {
        ucp_ep_params_t p = {
            .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                          UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER,
            .address = e->addr[wr],
            .err_mode = UCP_ERR_HANDLING_MODE_NONE,
            .err_handler = {.cb = ep_error_cb, .arg = e},
        };
        ucs_status_t s = ucp_ep_create(e->worker, &p, &e->eps[wr]);
        if (s != UCS_OK) {
            e->eps[wr] = NULL;
            return ucx_op_fail(op, "cannot create a UCX endpoint to rank %d: %s", wr,
                               ucs_status_string(s));
        }
    }
    *ep = e->eps[wr];
    return 0;
}

int ucx_post_send(ucx_op *op, ucx_xfer *x, int peer, uint64_t tag, const void *buf, size_t len)
{
    *x = (ucx_xfer){.peer = peer, .is_send = 1, .op = op, .expected = len, .state = XF_DONE};
    ucp_ep_h ep = NULL;
    if (get_ep(op, peer, &ep))
        return -1;
    ucp_request_param_t p = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.send = send_cb,
        .user_data = x,
    };
    x->state = XF_POSTED; /* before the call: a callback may run inside it */
    ucs_status_ptr_t r = ucp_tag_send_nbx(ep, buf, len, tag, &p);
    if (r == NULL) {
        x->state = XF_DONE;
        return 0;
    }
    if (UCS_PTR_IS_ERR(r)) {
        x->state = XF_DONE;
        x->status = UCS_PTR_STATUS(r);
        return ucx_op_fail(op, "send of %zu bytes to rank %d failed: %s", len,
                           op->g->world[peer], ucs_status_string(x->status));
    }
    x->req = r;
    return 0;
}

int ucx_post_recv(ucx_op *op, ucx_xfer *x, int peer, uint64_t tag, void *buf, size_t len)
{
    *x = (ucx_xfer){.peer = peer, .is_send = 0, .op = op, .expected = len, .state = XF_DONE};
    ucx_engine *e = op->g->eng;
    int wr = op->g->world[peer];
    if (e->ep_status[wr] != UCS_OK)
        return ucx_op_fail(op, "connection to rank %d (group rank %d) failed earlier: %s", wr,
                           peer, ucs_status_string(e->ep_status[wr]));
    ucp_request_param_t p = {
        /* always through the callback: UCX 1.13 leaves recv_info unset on immediate
         * completion, and the length check needs it */
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                        UCP_OP_ATTR_FLAG_NO_IMM_CMPL,
        .cb.recv = recv_cb,
        .user_data = x,
    };
    x->state = XF_POSTED; /* before the call: the callback may run inside it */
    ucs_status_ptr_t r = ucp_tag_recv_nbx(e->worker, buf, len, tag, (ucp_tag_t)-1, &p);
    if (UCS_PTR_IS_ERR(r) || r == NULL) {
        x->state = XF_DONE;
        x->status = r ? UCS_PTR_STATUS(r) : UCS_ERR_NO_PROGRESS;
        return ucx_op_fail(op, "receive of %zu bytes from rank %d failed: %s", len, wr,
                           ucs_status_string(x->status));
    }
    x->req = r;
    return 0;
}

int ucx_xfer_finish(ucx_op *op, ucx_xfer *x)
{
    if (x->req) {
        ucp_request_free(x->req);
        x->req = NULL;
    }
    x->state = XF_IDLE;
    int wr = op->g->world[x->peer];
    if (x->status == UCS_ERR_MESSAGE_TRUNCATED)
        return ucx_op_fail(op,
                           "rank %d (group rank %d) sent more than the %zu bytes expected; do "
                           "all ranks pass the same count?",
                           wr, x->peer, x->expected);
    if (x->status != UCS_OK)
        return ucx_op_fail(op, "%s rank %d (group rank %d) failed: %s",
                           x->is_send ? "send to" : "receive from", wr, x->peer,
                           ucs_status_string(x->status));
    if (!x->is_send && x->got != x->expected)
        return ucx_op_fail(op,
                           "rank %d (group rank %d) sent %zu bytes where %zu were expected; do "
                           "all ranks pass the same count?",
                           wr, x->peer, x->got, x->expected);
    return 0;
}

/* ---------------------------------------------------------------- progress */

static void unlink_op(ucx_op **head, ucx_op *op)
{
    if (op->prev)
        op->prev->next = op->next;
    else
        *head = op->next;
    if (op->next)
        op->next->prev = op->prev;
    op->prev = op->next = NULL;
}

static void link_op(ucx_op **head, ucx_op *op)
{
    op->prev = NULL;
    op->next = *head;
    if (*head)
        (*head)->prev = op;
    *head = op;
}

static void complete(ucx_engine *e, ucx_op *op)
{
    if (op->listed) {
        unlink_op(&e->active, op);
        op->listed = 0;
        e->nactive--;
    }
    op->done = 1;
    if (e->use_thread)
        pthread_cond_broadcast(&e->done_cv);
}

/* One pass: drive UCX, advance every active operation, reap zombies. Returns 1 if anything
 * happened. Engine locked. */
int ucx_progress_locked(ucx_engine *e)
{
    int made = 0;
    while (ucp_worker_progress(e->worker))
        made = 1;
    for (ucx_op *op = e->active, *next; op; op = next) {
        next = op->next;
        int r = op->advance(op);
        if (r != 0) {
            complete(e, op);
            made = 1;
        }
    }
    for (ucx_op *op = e->zombies, *next; op; op = next) {
        next = op->next;
        int posted = 0;
        for_each_xfer(op, free_done_request, NULL);
        for_each_xfer(op, count_posted, &posted);
        if (!posted) {
            unlink_op(&e->zombies, op);
            ucx_op_free(op);
        }
    }
    return made;
}

/* Called with the engine locked after a pass without progress; returns locked. */
static void idle_pause_locked(ucx_engine *e, double idle_s)
{
    if (idle_s < IDLE_YIELD_S) {
        pthread_mutex_unlock(&e->mu);
        sched_yield();
        pthread_mutex_lock(&e->mu);
        return;
    }
    if (e->efd >= 0) {
        ucs_status_t s = ucp_worker_arm(e->worker);
        if (s == UCS_ERR_BUSY)
            return; /* events arrived meanwhile: progress again */
        if (s == UCS_OK) {
            struct pollfd p = {.fd = e->efd, .events = POLLIN};
            pthread_mutex_unlock(&e->mu);
            poll(&p, 1, IDLE_POLL_MS);
            pthread_mutex_lock(&e->mu);
            return;
        }
    }
    pthread_mutex_unlock(&e->mu);
    struct timespec ts = {0, IDLE_SLEEP_NS};
    nanosleep(&ts, NULL);
    pthread_mutex_lock(&e->mu);
}

void *ucx_progress_thread(void *arg)
{
    ucx_engine *e = arg;
    pthread_mutex_lock(&e->mu);
    double last = tr_now();
    while (!e->stop) {
        if (!e->active && !e->zombies) {
            pthread_cond_wait(&e->work_cv, &e->mu);
            last = tr_now();
            continue;
        }
        double now = tr_now();
        if (ucx_progress_locked(e)) {
            last = now;
            continue;
        }
        idle_pause_locked(e, now - last);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

int ucx_submit(ucx_op *op)
{
    ucx_group *g = op->g;
    ucx_engine *e = g->eng;
    pthread_mutex_lock(&e->mu);
    if (g->broken) {
        pthread_mutex_unlock(&e->mu);
        int rc = tr_fail(TR_ERR_COMM,
                         "rank %d: group '%s' is unusable after an earlier failure (timeout or "
                         "transport error); %s not started",
                         e->rank, g->name, tr_comm_opkind_name(op->kind));
        ucx_op_free(op);
        return rc;
    }
    /* Only collectives take a sequence number: every member issues the same collectives in
     * the same order, but not the same point-to-point operations (a middle pipeline stage
     * sends and receives twice as often as the ends), whose tags carry the user tag. */
    if (op->kind != TR_COMM_OP_SEND && op->kind != TR_COMM_OP_RECV)
        op->seq = g->next_seq++;
    int r = op->advance(op);
    if (r != 0) {
        op->done = 1;
    } else {
        link_op(&e->active, op);
        op->listed = 1;
        e->nactive++;
        if (e->use_thread) {
            pthread_cond_signal(&e->work_cv);
            if (e->efd >= 0)
                ucp_worker_signal(e->worker); /* the thread may sleep on the descriptor */
        }
    }
    pthread_mutex_unlock(&e->mu);
    return TR_OK;
}

static void fail_timeout(ucx_op *op, double timeout_s)
{
    waiting_for w = {0};
    for_each_xfer(op, find_waiting, &w);
    ucx_xfer *x = w.recv ? w.recv : w.send;
    if (x)
        ucx_op_fail(op, "timed out after %g s waiting for rank %d (group rank %d) to %s",
                    timeout_s, op->g->world[x->peer], x->peer,
                    x->is_send ? "receive our data" : "send its data");
    else
        ucx_op_fail(op, "timed out after %g s", timeout_s);
    op->status = TR_ERR_TIMEOUT;
    complete(op->g->eng, op);
}

/* Free the op now, or park it until its posted transfers have called back. */
static void release_locked(ucx_engine *e, ucx_op *op)
{
    int posted = 0;
    for_each_xfer(op, cancel_recv, NULL);
    for_each_xfer(op, free_done_request, NULL);
    for_each_xfer(op, count_posted, &posted);
    if (posted) {
        op->zombie = 1;
        link_op(&e->zombies, op);
    } else {
        ucx_op_free(op);
    }
}

static int finish_locked(ucx_engine *e, ucx_op *op)
{
    int st = op->status;
    if (st)
        tr_fail(st, "%s", op->err);
    release_locked(e, op);
    return st;
}

int ucx_wait(ucx_op *op, double timeout_s)
{
    ucx_engine *e = op->g->eng;
    pthread_mutex_lock(&e->mu);
    double start = tr_now(), deadline = start + timeout_s, last = start;
    while (!op->done) {
        double now;
        if (!e->use_thread) {
            int made = ucx_progress_locked(e);
            if (op->done)
                break;
            now = tr_now();
            if (made)
                last = now;
            if (now >= deadline) {
                fail_timeout(op, timeout_s);
                break;
            }
            idle_pause_locked(e, now - last);
        } else {
            now = tr_now();
            if (now >= deadline) {
                fail_timeout(op, timeout_s);
                break;
            }
            double until = deadline < now + 0.5 ? deadline : now + 0.5;
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            double add = until - now;
            ts.tv_sec += (time_t)add;
            ts.tv_nsec += (long)((add - (double)(time_t)add) * 1e9);
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&e->done_cv, &e->mu, &ts);
        }
    }
    int st = finish_locked(e, op);
    pthread_mutex_unlock(&e->mu);
    return st;
}

int ucx_test(ucx_op *op, int *status)
{
    ucx_engine *e = op->g->eng;
    pthread_mutex_lock(&e->mu);
    if (!op->done && !e->use_thread)
        ucx_progress_locked(e);
    int done = op->done;
    if (done)
        *status = finish_locked(e, op);
    pthread_mutex_unlock(&e->mu);
    return done;
}
