/* The NCCL backend's operations, posted: each request is routed by where its buffers live
 * (host -> the group's UCX communicator; device -> NCCL, staging through pinned memory, or
 * local copies) and started; progress.c advances it (test/wait). */
#include <stdlib.h>
#include <string.h>

#include "comm/nccl/nccl_internal.h"
#include "core/core.h"
#include "kernels/cuda/cuda.h"

static nccl_group *G(const tr_comm *c) { return tr_comm_impl(c); }

/* ---------------------------------------------------------------- small pieces */

static tr_nccl_memkind memkind(const void *p)
{
    if (!p)
        return TR_NCCL_MEM_NONE;
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return TR_NCCL_MEM_HOST;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged ? TR_NCCL_MEM_DEVICE
                                                                             : TR_NCCL_MEM_HOST;
}

static ncclDataType_t nccl_dtype(tr_comm_dtype dt)
{
    switch (dt) {
    case TR_COMM_F64: return ncclFloat64;
    case TR_COMM_I32: return ncclInt32;
    case TR_COMM_I64: return ncclInt64;
    default: return ncclFloat32;
    }
}

static ncclRedOp_t nccl_redop(tr_comm_redop op)
{
    return op == TR_COMM_MAX ? ncclMax : op == TR_COMM_MIN ? ncclMin : ncclSum;
}

static nccl_op *op_new(nccl_group *g, tr_comm_opkind kind)
{
    nccl_op *op = calloc(1, sizeof *op);
    if (!op) {
        tr_fail(TR_ERR_NOMEM, "comm: out of memory");
        return NULL;
    }
    op->g = g;
    op->kind = kind;
    op->seq = g->next_seq++;
    op->dt = TR_COMM_I32;
    return op;
}

void nccl_op_free(nccl_op *op)
{
    if (op->ready)
        cudaEventDestroy(op->ready);
    if (op->ev)
        cudaEventDestroy(op->ev);
    if (!op->leak_pins) {
        nccl_pin_put(op->g->e, op->pin_a);
        nccl_pin_put(op->g->e, op->pin_b);
    }
    free(op);
}

/* The op's status as the thread's error; frees it. */
int nccl_finish(nccl_op *op)
{
    int rc = op->status;
    if (rc)
        tr_fail(rc, "%s", op->err);
    nccl_op_free(op);
    return rc;
}

int nccl_cuda_check(nccl_op *op, cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return 0;
    (void)cudaGetLastError();
    return nccl_op_fail(op, TR_ERR_INTERNAL, "%s: %s", what, cudaGetErrorString(e));
}

static int make_events(nccl_op *op)
{
    if (nccl_cuda_check(op, cudaEventCreateWithFlags(&op->ready, cudaEventDisableTiming),
                        "cudaEventCreate") ||
        nccl_cuda_check(op, cudaEventCreateWithFlags(&op->ev, cudaEventDisableTiming),
                        "cudaEventCreate"))
        return -1;
    return 0;
}

/* The group stream waits for what the compute stream has queued so far. */
static int after_compute(nccl_op *op)
{
    nccl_group *g = op->g;
    if (nccl_cuda_check(op, cudaEventRecord(op->ready, g->e->compute), "cudaEventRecord") ||
        nccl_cuda_check(op, cudaStreamWaitEvent(g->stream, op->ready, 0), "cudaStreamWaitEvent"))
        return -1;
    return 0;
}

int nccl_record_done(nccl_op *op)
{
    if (nccl_cuda_check(op, cudaEventRecord(op->ev, op->g->stream), "cudaEventRecord"))
        return -1;
    op->ev_recorded = 1;
    op->state = OP_EVENT;
    return 0;
}

/* ---------------------------------------------------------------- starting an op */

static int start_nccl(nccl_op *op)
{
    nccl_group *g = op->g;
    if (make_events(op) ||
        nccl_cuda_check(op, cudaEventRecord(op->ready, g->e->compute), "cudaEventRecord"))
        return -1;
    if (op->kind == TR_COMM_OP_SEND || op->kind == TR_COMM_OP_RECV) {
        nccl_engine *e = g->e;
        op->state = OP_P2P_QUEUED;
        nccl_list_push(&e->p2p, op);
        return 0;
    }
    if (nccl_cuda_check(op, cudaStreamWaitEvent(g->stream, op->ready, 0), "cudaStreamWaitEvent"))
        return -1;
    ncclDataType_t dt = nccl_dtype(op->dt);
    size_t es = tr_comm_dtype_size(op->dt), n = (size_t)g->size;
    ncclResult_t r = ncclSuccess;
    const char *call = "";
    switch (op->kind) {
    case TR_COMM_OP_ALLREDUCE:
        call = "ncclAllReduce";
        r = ncclAllReduce(op->send, op->recv, op->count, dt, nccl_redop(op->redop), g->nccl,
                          g->stream);
        break;
    case TR_COMM_OP_BROADCAST:
        call = "ncclBroadcast";
        r = ncclBroadcast(op->recv, op->recv, op->count, dt, op->root, g->nccl, g->stream);
        break;
    case TR_COMM_OP_REDUCE_SCATTER:
        call = "ncclReduceScatter";
        if (op->count % n == 0) {
            r = ncclReduceScatter(op->send, op->recv, op->count / n, dt, nccl_redop(op->redop),
                                  g->nccl, g->stream);
            break;
        }
        /* uneven blocks (comm.h's partition): one reduce per block, rooted at its owner */
        ncclGroupStart();
        for (int b = 0; b < g->size && (r == ncclSuccess || r == ncclInProgress); b++) {
            size_t off, len;
            tr_comm_block(op->count, g->size, b, &off, &len);
            if (!len)
                continue;
            const char *src = (const char *)op->send + off * es;
            r = ncclReduce(src, b == g->rank ? op->recv : (void *)src, len, dt,
                           nccl_redop(op->redop), b, g->nccl, g->stream);
        }
        {
            ncclResult_t end = ncclGroupEnd();
            if (r == ncclSuccess || r == ncclInProgress)
                r = end;
        }
        break;
    case TR_COMM_OP_ALLGATHER:
        call = "ncclAllGather";
        if (op->count % n == 0) {
            r = ncclAllGather(op->send, op->recv, op->count / n, dt, g->nccl, g->stream);
            break;
        }
        /* uneven blocks: one broadcast per block from its owner */
        ncclGroupStart();
        for (int b = 0; b < g->size && (r == ncclSuccess || r == ncclInProgress); b++) {
            size_t off, len;
            tr_comm_block(op->count, g->size, b, &off, &len);
            if (!len)
                continue;
            char *dst = (char *)op->recv + off * es;
            r = ncclBroadcast(b == g->rank ? op->send : dst, dst, len, dt, b, g->nccl, g->stream);
        }
        {
            ncclResult_t end = ncclGroupEnd();
            if (r == ncclSuccess || r == ncclInProgress)
                r = end;
        }
        break;
    default: return nccl_op_fail(op, TR_ERR_INTERNAL, "no NCCL route for this operation");
    }
    if (r != ncclSuccess && r != ncclInProgress) {
        nccl_op_fail(op, TR_ERR_COMM, "%s: %s (%s)", call, ncclGetErrorString(r),
                     ncclGetLastError(g->nccl));
        return -1;
    }
    if (nccl_settle(g, g->nccl, tr_now() + tr_comm_timeout(g->host), op, call))
        return -1;
    return nccl_record_done(op);
}

/* A group of one: results are copies (or nothing). */
static int start_local(nccl_op *op)
{
    if (make_events(op) || after_compute(op))
        return -1;
    size_t bytes = op->count * tr_comm_dtype_size(op->dt);
    if (op->kind != TR_COMM_OP_BROADCAST && op->send != op->recv && bytes &&
        nccl_cuda_check(
            op, cudaMemcpyAsync(op->recv, op->send, bytes, cudaMemcpyDeviceToDevice, op->g->stream),
            "cudaMemcpyAsync"))
        return -1;
    return nccl_record_done(op);
}

static int start_staged(nccl_op *op)
{
    nccl_group *g = op->g;
    size_t es = tr_comm_dtype_size(op->dt), off = 0, len = 0;
    tr_comm_block(op->count, g->size, g->rank, &off, &len);
    size_t na = 0, nb = 0;
    int d2h = 1;
    switch (op->kind) {
    case TR_COMM_OP_ALLREDUCE: na = op->count * es; break;
    case TR_COMM_OP_BROADCAST: na = op->count * es, d2h = g->rank == op->root; break;
    case TR_COMM_OP_REDUCE_SCATTER: na = op->count * es, nb = len * es; break;
    case TR_COMM_OP_ALLGATHER: na = len * es, nb = op->count * es; break;
    case TR_COMM_OP_SEND: na = op->bytes; break;
    default: na = op->bytes, d2h = 0; break; /* recv */
    }
    if ((na && !(op->pin_a = nccl_pin_get(g->e, na))) ||
        (nb && !(op->pin_b = nccl_pin_get(g->e, nb)))) {
        op->status = TR_ERR_NOMEM;
        snprintf(op->err, sizeof op->err, "%s", tr_errmsg());
        return -1;
    }
    if (make_events(op))
        return -1;
    /* the copy back to the device after the host transfer */
    switch (op->kind) {
    case TR_COMM_OP_ALLREDUCE:
    case TR_COMM_OP_RECV: op->back_src = op->pin_a, op->back_bytes = na; break;
    case TR_COMM_OP_BROADCAST:
        if (!d2h)
            op->back_src = op->pin_a, op->back_bytes = na;
        break;
    case TR_COMM_OP_REDUCE_SCATTER:
    case TR_COMM_OP_ALLGATHER: op->back_src = op->pin_b, op->back_bytes = nb; break;
    default: break;
    }
    op->back_dst = op->recv;
    /* every staged operation is ordered after the compute stream: a receive's (or a
     * non-root broadcast's) copy back to the device must not overwrite a buffer that kernels
     * queued before it still read */
    if (after_compute(op))
        return -1;
    if (d2h && na) {
        if (nccl_cuda_check(
                op, cudaMemcpyAsync(op->pin_a, op->send, na, cudaMemcpyDeviceToHost, g->stream),
                "cudaMemcpyAsync (device to host)") ||
            nccl_cuda_check(op, cudaEventRecord(op->ev, g->stream), "cudaEventRecord"))
            return -1;
        op->ev_wait = 1;
    }
    if (op->kind == TR_COMM_OP_RECV)
        return nccl_post_host(op);
    if (op->kind == TR_COMM_OP_SEND) {
        if (!op->ev_wait)
            return nccl_post_host(op);
        op->state = OP_D2H;
        nccl_list_push(&g->e->d2h, op);
        return 0;
    }
    op->state = OP_FIFO;
    nccl_list_push(&g->fifo, op);
    nccl_pump(g);
    return 0;
}

/* Route and start op; on failure it is freed and the error set. */
static int post(nccl_op *op, tr_nccl_memkind ks, tr_nccl_memkind kr, size_t bytes, void **handle)
{
    nccl_group *g = op->g;
    *handle = NULL;
    tr_cuda_use_device();
    nccl_ordered_retire(g); /* an ordered op may have failed since */
    if (g->broken) {
        int rc = tr_fail(TR_ERR_COMM,
                         "rank %d: group '%s' is unusable after an earlier failure (timeout or "
                         "transport error); %s not started%s%s",
                         g->e->rank, g->name, tr_comm_opkind_name(op->kind),
                         g->ordered_status ? ". The failure: " : "", g->ordered_err);
        nccl_op_free(op);
        return rc;
    }
    int rc = tr_nccl_choose_route(g->mode, ks, kr, bytes, g->name, tr_comm_opkind_name(op->kind),
                                  &op->route);
    if (rc) {
        nccl_op_free(op);
        return rc;
    }
    /* queued NCCL P2P start before anything posted after them, except more P2P: those
     * join the same ncclGroup (a batch of sends and receives must start together) */
    int p2p = op->kind == TR_COMM_OP_SEND || op->kind == TR_COMM_OP_RECV;
    if (!(p2p && op->route == TR_NCCL_ROUTE_NCCL))
        nccl_engine_progress(g->e);
    int failed = 0;
    switch (op->route) {
    case TR_NCCL_ROUTE_NCCL: failed = start_nccl(op); break;
    case TR_NCCL_ROUTE_LOCAL: failed = start_local(op); break;
    case TR_NCCL_ROUTE_STAGED: failed = start_staged(op); break;
    default:
        if (p2p) {
            failed = nccl_post_host(op);
        } else {
            op->state = OP_FIFO;
            nccl_list_push(&g->fifo, op);
            nccl_pump(g);
        }
        break;
    }
    if (failed || (op->state == OP_DONE && op->status)) {
        if (!op->status) {
            op->status = TR_ERR_INTERNAL;
            snprintf(op->err, sizeof op->err, "comm '%s': %s could not be started", g->name,
                     tr_comm_opkind_name(op->kind));
        }
        if (op->state == OP_FIFO)
            nccl_list_unlink(&g->fifo, op);
        op->leak_pins = 1;
        return nccl_finish(op);
    }
    *handle = op;
    return TR_OK;
}

/* ---------------------------------------------------------------- tr_comm_ops entries */

static nccl_op *coll(tr_comm *c, tr_comm_opkind kind, const void *send, void *recv, size_t count,
                     tr_comm_dtype dt)
{
    nccl_op *op = op_new(G(c), kind);
    if (op) {
        op->send = send;
        op->recv = recv;
        op->count = count;
        op->dt = dt;
    }
    return op;
}

int nccl_allreduce(tr_comm *c, const void *send, void *recv, size_t count, tr_comm_dtype dt,
                   tr_comm_redop redop, void **handle)
{
    nccl_op *op = coll(c, TR_COMM_OP_ALLREDUCE, send, recv, count, dt);
    if (!op)
        return TR_ERR_NOMEM;
    op->redop = redop;
    return post(op, memkind(send), memkind(recv), count * tr_comm_dtype_size(dt), handle);
}

int nccl_reduce_scatter(tr_comm *c, const void *send, void *recv, size_t count, tr_comm_dtype dt,
                        tr_comm_redop redop, void **handle)
{
    nccl_op *op = coll(c, TR_COMM_OP_REDUCE_SCATTER, send, recv, count, dt);
    if (!op)
        return TR_ERR_NOMEM;
    op->redop = redop;
    size_t off, len;
    tr_comm_block(count, tr_comm_size(c), tr_comm_rank(c), &off, &len);
    return post(op, memkind(send), len ? memkind(recv) : TR_NCCL_MEM_NONE,
                count * tr_comm_dtype_size(dt), handle);
}

int nccl_allgather(tr_comm *c, const void *send, void *recv, size_t count, tr_comm_dtype dt,
                   void **handle)
{
    nccl_op *op = coll(c, TR_COMM_OP_ALLGATHER, send, recv, count, dt);
    if (!op)
        return TR_ERR_NOMEM;
    size_t off, len;
    tr_comm_block(count, tr_comm_size(c), tr_comm_rank(c), &off, &len);
    return post(op, len ? memkind(send) : TR_NCCL_MEM_NONE, memkind(recv),
                count * tr_comm_dtype_size(dt), handle);
}

int nccl_broadcast(tr_comm *c, void *buf, size_t count, tr_comm_dtype dt, int root, void **handle)
{
    nccl_op *op = coll(c, TR_COMM_OP_BROADCAST, buf, buf, count, dt);
    if (!op)
        return TR_ERR_NOMEM;
    op->root = root;
    tr_nccl_memkind k = memkind(buf);
    return post(op, k, k, count * tr_comm_dtype_size(dt), handle);
}

int nccl_send(tr_comm *c, const void *buf, size_t bytes, int peer, int tag, void **handle)
{
    nccl_op *op = op_new(G(c), TR_COMM_OP_SEND);
    if (!op)
        return TR_ERR_NOMEM;
    op->send = buf;
    op->bytes = bytes;
    op->peer = peer;
    op->tag = tag;
    return post(op, memkind(buf), TR_NCCL_MEM_NONE, bytes, handle);
}

int nccl_recv(tr_comm *c, void *buf, size_t bytes, int peer, int tag, void **handle)
{
    nccl_op *op = op_new(G(c), TR_COMM_OP_RECV);
    if (!op)
        return TR_ERR_NOMEM;
    op->recv = buf;
    op->bytes = bytes;
    op->peer = peer;
    op->tag = tag;
    return post(op, TR_NCCL_MEM_NONE, memkind(buf), bytes, handle);
}

int nccl_barrier(tr_comm *c, void **handle)
{
    nccl_op *op = op_new(G(c), TR_COMM_OP_BARRIER);
    if (!op)
        return TR_ERR_NOMEM;
    return post(op, TR_NCCL_MEM_NONE, TR_NCCL_MEM_NONE, 0, handle);
}
