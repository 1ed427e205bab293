/* The NCCL backend's progress: posting to the UCX communicator in call order (the group
 * FIFO), the NCCL P2P queue started as one ncclGroup, and test/wait with their timeouts,
 * through the states of nccl_internal.h. */
#include <stdlib.h>
#include <string.h>

#include "comm/nccl/nccl_internal.h"
#include "core/core.h"
#include "kernels/cuda/cuda.h"

/* ---------------------------------------------------------------- the host communicator */

/* Post op to the group's UCX communicator (user buffers, or the pinned copies). */
int nccl_post_host(nccl_op *op)
{
    nccl_group *g = op->g;
    int staged = op->route == TR_NCCL_ROUTE_STAGED;
    const void *hs = staged ? op->pin_a : op->send;
    void *hr = staged ? (op->kind == TR_COMM_OP_REDUCE_SCATTER || op->kind == TR_COMM_OP_ALLGATHER
                             ? op->pin_b
                             : op->pin_a)
                      : op->recv;
    tr_comm *h = g->host;
    tr_comm_request **req = &op->host_req;
    int rc;
    switch (op->kind) {
    case TR_COMM_OP_ALLREDUCE:
        rc = tr_comm_allreduce_async(h, hs, hr, op->count, op->dt, op->redop, req);
        break;
    case TR_COMM_OP_REDUCE_SCATTER:
        rc = tr_comm_reduce_scatter_async(h, hs, hr, op->count, op->dt, op->redop, req);
        break;
    case TR_COMM_OP_ALLGATHER:
        rc = tr_comm_allgather_async(h, hs, hr, op->count, op->dt, req);
        break;
    case TR_COMM_OP_BROADCAST:
        rc = tr_comm_broadcast_async(h, hr, op->count, op->dt, op->root, req);
        break;
    case TR_COMM_OP_SEND:
        rc = tr_comm_send_async(h, hs, op->bytes / 4, TR_COMM_I32, op->peer, op->tag, req);
        break;
    case TR_COMM_OP_RECV:
        rc = tr_comm_recv_async(h, hr, op->bytes / 4, TR_COMM_I32, op->peer, op->tag, req);
        break;
    default: rc = tr_comm_barrier_async(h, req); break;
    }
    if (rc) {
        g->broken = 1;
        op->status = rc;
        op->state = OP_DONE;
        snprintf(op->err, sizeof op->err, "%s", tr_errmsg());
        return -1;
    }
    op->state = OP_HOST;
    return 0;
}

void nccl_list_push(nccl_op_list *l, nccl_op *op)
{
    op->next = NULL;
    if (l->tail)
        l->tail->next = op;
    else
        l->head = op;
    l->tail = op;
}

void nccl_list_unlink(nccl_op_list *l, nccl_op *op)
{
    nccl_op **pp = &l->head, *prev = NULL;
    while (*pp && *pp != op) {
        prev = *pp;
        pp = &(*pp)->next;
    }
    if (!*pp)
        return;
    *pp = op->next;
    if (l->tail == op)
        l->tail = prev;
    op->next = NULL;
}

/* Post the FIFO's ready head entries, in order. */
void nccl_pump(nccl_group *g)
{
    while (g->fifo.head) {
        nccl_op *op = g->fifo.head;
        if (g->broken) {
            nccl_list_unlink(&g->fifo, op);
            op->leak_pins = 1; /* its copy may still be running */
            nccl_op_fail(op, TR_ERR_COMM, "not started: the group broke earlier");
            continue;
        }
        if (op->ev_wait) {
            cudaError_t q = cudaEventQuery(op->ev);
            if (q == cudaErrorNotReady)
                return;
            nccl_list_unlink(&g->fifo, op);
            if (nccl_cuda_check(op, q, "device-to-host copy"))
                continue;
        } else {
            nccl_list_unlink(&g->fifo, op);
        }
        nccl_post_host(op);
    }
}

/* ---------------------------------------------------------------- staged sends */

/* Post the staged sends whose copy to pinned memory is done, in call order (the head waits
 * for its copy; the ones behind it wait too, so two sends to one peer keep their order). */
static void d2h_pump(nccl_engine *e)
{
    while (e->d2h.head) {
        nccl_op *op = e->d2h.head;
        cudaError_t q = cudaEventQuery(op->ev);
        if (q == cudaErrorNotReady)
            return;
        nccl_list_unlink(&e->d2h, op);
        if (!nccl_cuda_check(op, q, "device-to-host copy"))
            nccl_post_host(op);
    }
}

/* ---------------------------------------------------------------- NCCL P2P queue */

static void p2p_flush(nccl_engine *e)
{
    nccl_op *list = e->p2p.head;
    if (!list)
        return;
    e->p2p.head = e->p2p.tail = NULL;
    ncclGroupStart();
    for (nccl_op *op = list; op; op = op->next) {
        nccl_group *g = op->g;
        if (!g->nccl) {
            nccl_op_fail(op, TR_ERR_COMM, "not started: the NCCL communicator was aborted");
            continue;
        }
        if (nccl_cuda_check(op, cudaStreamWaitEvent(g->stream, op->ready, 0),
                            "cudaStreamWaitEvent"))
            continue;
        ncclResult_t r =
            op->kind == TR_COMM_OP_SEND
                ? ncclSend(op->send, op->bytes, ncclUint8, op->peer, g->nccl, g->stream)
                : ncclRecv(op->recv, op->bytes, ncclUint8, op->peer, g->nccl, g->stream);
        if (r != ncclSuccess && r != ncclInProgress)
            nccl_op_fail(op, TR_ERR_COMM, "%s: %s (%s)",
                         op->kind == TR_COMM_OP_SEND ? "ncclSend" : "ncclRecv",
                         ncclGetErrorString(r), ncclGetLastError(g->nccl));
    }
    ncclResult_t end = ncclGroupEnd();
    for (nccl_op *op = list, *next; op; op = next) {
        next = op->next;
        op->next = NULL;
        if (op->state == OP_DONE)
            continue;
        nccl_group *g = op->g;
        if (end != ncclSuccess && end != ncclInProgress) {
            nccl_op_fail(op, TR_ERR_COMM, "ncclGroupEnd: %s", ncclGetErrorString(end));
            continue;
        }
        if (nccl_settle(g, g->nccl, tr_now() + tr_comm_timeout(g->host), op, "ncclGroupEnd"))
            continue;
        nccl_record_done(op);
    }
}

/* ---------------------------------------------------------------- ordered requests */

/* The first failure of an ordered op is the group's to report (flush, refused operations). */
static void ordered_keep(nccl_group *g, nccl_op *op)
{
    if (!op->status || g->ordered_status)
        return;
    g->ordered_status = op->status;
    snprintf(g->ordered_err, sizeof g->ordered_err, "%s", op->err);
}

/* Take every ordered op out of the list, fail it with `why` (an op that failed already keeps
 * its own message; the group keeps the first) and free it. */
static void ordered_fail_all(nccl_group *g, int code, const char *why)
{
    for (nccl_op *op; (op = g->ordered.head);) {
        nccl_list_unlink(&g->ordered, op);
        op->leak_pins = 1;
        nccl_op_fail(op, code, "%s", why);
        ordered_keep(g, op);
        nccl_op_free(op);
    }
}

/* Retire the completed head of the ordered list (the ops of one group stream complete in
 * posting order); an NCCL error reported for the communicator fails them all. */
void nccl_ordered_retire(nccl_group *g)
{
    while (g->ordered.head) {
        nccl_op *op = g->ordered.head;
        cudaError_t q = cudaEventQuery(op->ev);
        if (q == cudaErrorNotReady)
            break;
        nccl_list_unlink(&g->ordered, op);
        if (nccl_cuda_check(op, q, "device transfer"))
            ordered_keep(g, op);
        nccl_op_free(op);
    }
    if (!g->ordered.head || !g->nccl)
        return;
    ncclResult_t st = ncclSuccess;
    if (ncclCommGetAsyncError(g->nccl, &st) == ncclSuccess && st != ncclSuccess &&
        st != ncclInProgress) {
        char why[400];
        snprintf(why, sizeof why, "NCCL error: %s (%s); the communicator is aborted",
                 ncclGetErrorString(st), ncclGetLastError(g->nccl));
        ncclCommAbort(g->nccl);
        g->nccl = NULL;
        ordered_fail_all(g, TR_ERR_COMM, why);
    }
}

void nccl_engine_progress(nccl_engine *e)
{
    p2p_flush(e);
    d2h_pump(e);
    for (int i = 0; i < e->n_groups; i++) {
        nccl_pump(e->groups[i]);
        nccl_ordered_retire(e->groups[i]);
    }
}

int nccl_drain_fifo(nccl_group *g, double timeout_s)
{
    double start = tr_now(), last = start;
    for (;;) {
        nccl_engine_progress(g->e);
        if (!g->fifo.head)
            return TR_OK;
        double now = tr_now();
        if (now - start > timeout_s)
            return tr_fail(TR_ERR_TIMEOUT,
                           "rank %d (group '%s', rank %d of %d): split: timed out after %g s "
                           "waiting for earlier operations of the group to start",
                           g->e->rank, g->name, g->rank, g->size, timeout_s);
        nccl_pause(now - last);
    }
}

/* ---------------------------------------------------------------- advancing */

/* 1 when op is done (status set), else 0. */
static int advance(nccl_op *op)
{
    nccl_group *g = op->g;
    tr_cuda_use_device();
    nccl_engine_progress(g->e);
    for (;;) {
        switch (op->state) {
        case OP_DONE: return 1;
        case OP_P2P_QUEUED:
        case OP_FIFO: return 0;
        case OP_D2H: return 0; /* the engine posts it (d2h_pump) */
        case OP_HOST: {
            int done = 0;
            int rc = tr_comm_test(&op->host_req, &done);
            if (!done)
                return 0;
            if (rc) {
                g->broken = 1;
                op->leak_pins = 1;
                op->status = rc;
                op->state = OP_DONE;
                snprintf(op->err, sizeof op->err, "%s", tr_errmsg());
                return 1;
            }
            if (op->back_bytes) {
                if (nccl_cuda_check(op,
                                    cudaMemcpyAsync(op->back_dst, op->back_src, op->back_bytes,
                                                    cudaMemcpyHostToDevice, g->stream),
                                    "cudaMemcpyAsync (host to device)") ||
                    nccl_record_done(op))
                    return 1;
                continue;
            }
            op->state = OP_DONE;
            return 1;
        }
        default: { /* OP_EVENT */
            cudaError_t q = cudaEventQuery(op->ev);
            if (q == cudaErrorNotReady)
                return 0;
            if (nccl_cuda_check(op, q, "device transfer"))
                return 1;
            /* kernels queued on the compute stream from now on see the result */
            nccl_cuda_check(op, cudaStreamWaitEvent(g->e->compute, op->ev, 0),
                            "cudaStreamWaitEvent");
            op->state = OP_DONE;
            return 1;
        }
        }
    }
}

int nccl_test(tr_comm *c, void *handle, int *done)
{
    (void)c;
    nccl_op *op = handle;
    *done = advance(op);
    return *done ? nccl_finish(op) : TR_OK;
}

/* A note for a timeout where another group's ordered op is still pending: the compute
 * stream waits for it, and so does every device operation posted after it. */
static void ordered_note(const nccl_op *op, char *buf, size_t len)
{
    buf[0] = 0;
    const nccl_engine *e = op->g->e;
    for (int i = 0; i < e->n_groups; i++) {
        const nccl_group *o = e->groups[i];
        if (o == op->g || !o->ordered.head)
            continue;
        char pre[200];
        nccl_op_prefix(o->ordered.head, pre, sizeof pre);
        snprintf(buf, len, "; the compute stream waits for an earlier ordered operation not "
                           "complete either: %s", pre);
        return;
    }
}

static void fail_timeout(nccl_op *op, double timeout_s)
{
    nccl_group *g = op->g;
    int p2p = op->kind == TR_COMM_OP_SEND || op->kind == TR_COMM_OP_RECV;
    int peer_world = p2p ? tr_comm_world_rank(g->host, op->peer) : -1;
    const char *peer_does = op->kind == TR_COMM_OP_SEND ? "receive our data" : "send its data";
    char note[300];
    ordered_note(op, note, sizeof note);
    op->leak_pins = 1;
    switch (op->state) {
    case OP_HOST: {
        /* let the UCX request time out at once: its message names the peer it waits for */
        double t = tr_comm_timeout(g->host);
        tr_comm_set_timeout(g->host, 1e-3);
        int rc = tr_comm_wait(&op->host_req);
        tr_comm_set_timeout(g->host, t);
        nccl_op_fail(op, TR_ERR_TIMEOUT, "timed out after %g s in the host transfer: %s", timeout_s,
                     rc ? tr_errmsg() : "(it completed just now)");
        break;
    }
    case OP_P2P_QUEUED:
        nccl_list_unlink(&g->e->p2p, op);
        nccl_op_fail(op, TR_ERR_TIMEOUT, "timed out after %g s before NCCL started it", timeout_s);
        break;
    case OP_FIFO:
        nccl_list_unlink(&g->fifo, op);
        nccl_op_fail(op, TR_ERR_TIMEOUT, "timed out after %g s waiting for %s", timeout_s,
                     op->ev_wait ? "its device-to-host copy"
                                 : "earlier operations of the group to start");
        break;
    case OP_D2H:
        nccl_list_unlink(&g->e->d2h, op);
        nccl_op_fail(op, TR_ERR_TIMEOUT,
                     "timed out after %g s waiting for its device-to-host "
                     "copy",
                     timeout_s);
        break;
    default: /* OP_EVENT */
        if (op->route == TR_NCCL_ROUTE_NCCL && g->nccl) {
            ncclCommAbort(g->nccl);
            g->nccl = NULL;
            if (p2p)
                nccl_op_fail(op, TR_ERR_TIMEOUT,
                             "timed out after %g s waiting for rank %d (group rank %d) to %s; "
                             "the NCCL communicator is aborted",
                             timeout_s, peer_world, op->peer, peer_does);
            else
                nccl_op_fail(op, TR_ERR_TIMEOUT,
                             "timed out after %g s waiting for the other %d ranks of the group; "
                             "the NCCL communicator is aborted",
                             timeout_s, g->size - 1);
        } else {
            nccl_op_fail(op, TR_ERR_TIMEOUT, "timed out after %g s waiting for the GPU copy",
                         timeout_s);
        }
        break;
    }
    op->status = TR_ERR_TIMEOUT;
    g->broken = 1;
    size_t used = strlen(op->err);
    if (note[0] && used < sizeof op->err - 1)
        snprintf(op->err + used, sizeof op->err - used, "%s", note);
}

int nccl_wait(tr_comm *c, void *handle, double timeout_s)
{
    (void)c;
    nccl_op *op = handle;
    nccl_group *g = op->g;
    double start = tr_now(), last = start;
    while (!advance(op)) {
        double now = tr_now();
        if (op->route == TR_NCCL_ROUTE_NCCL && g->nccl && op->state == OP_EVENT) {
            ncclResult_t st = ncclSuccess;
            if (ncclCommGetAsyncError(g->nccl, &st) == ncclSuccess && st != ncclSuccess &&
                st != ncclInProgress) {
                nccl_op_fail(op, TR_ERR_COMM, "NCCL error: %s (%s); the communicator is aborted",
                             ncclGetErrorString(st), ncclGetLastError(g->nccl));
                ncclCommAbort(g->nccl);
                g->nccl = NULL;
                op->leak_pins = 1;
                break;
            }
        }
        if (now - start > timeout_s) {
            fail_timeout(op, timeout_s);
            break;
        }
        nccl_pause(now - last);
    }
    return nccl_finish(op);
}

/* ---------------------------------------------------------------- ordered completion */

int nccl_order_after(tr_comm *c, void *handle, void *stream, int *taken)
{
    (void)c;
    nccl_op *op = handle;
    nccl_group *g = op->g;
    *taken = 0;
    if (!tr_nccl_route_ordered(op->route, op->kind) || op->state != OP_EVENT)
        return TR_OK; /* the front end waits for it */
    tr_cuda_use_device();
    cudaStream_t s = stream ? (cudaStream_t)stream : g->e->compute;
    if (cudaStreamWaitEvent(s, op->ev, 0) != cudaSuccess) {
        (void)cudaGetLastError();
        return TR_OK; /* waited for on the host instead */
    }
    *taken = 1;
    nccl_list_push(&g->ordered, op);
    nccl_ordered_retire(g); /* what is already complete (not a progress call: queued NCCL
                             * P2P must start together with the ones still to come) */
    return TR_OK;
}

int nccl_flush_group(nccl_group *g, double timeout_s)
{
    tr_cuda_use_device();
    double start = tr_now(), last = start;
    for (;;) {
        nccl_engine_progress(g->e); /* retires, and fails the list on an NCCL error */
        nccl_op *op = g->ordered.head;
        if (!op)
            break;
        double now = tr_now();
        if (now - start > timeout_s) {
            nccl_list_unlink(&g->ordered, op);
            fail_timeout(op, timeout_s); /* aborts the NCCL communicator: the streams go on */
            ordered_keep(g, op);
            nccl_op_free(op);
            ordered_fail_all(g, TR_ERR_TIMEOUT, "not completed: an earlier operation of the "
                                                "group timed out");
            break;
        }
        nccl_pause(now - last);
    }
    if (g->ordered_status)
        return tr_fail(g->ordered_status, "%s", g->ordered_err);
    return TR_OK;
}

int nccl_flush(tr_comm *c, double timeout_s)
{
    return nccl_flush_group(tr_comm_impl(c), timeout_s);
}
