/* The communicator front end: argument checks, counters, blocking = async + wait, ordered
 * requests, split, and the dispatch through the backend's tr_comm_ops table (the world itself:
 * comm_world.c). */
#include "comm/comm_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct tr_comm {
    const tr_comm_ops *ops;
    void *impl;
    int rank, size;
    char name[TR_COMM_MAX_NAME];
    double timeout_s;
    tr_comm_tuning tuning;
    tr_comm_counters counters;
};

struct tr_comm_request {
    tr_comm *comm;
    void *handle;
};

static const char *const kind_names[TR_COMM_NOPKINDS] = {
    "allreduce", "reduce_scatter", "allgather", "broadcast", "send", "recv", "barrier", "split",
};

const char *tr_comm_opkind_name(tr_comm_opkind kind)
{
    return (unsigned)kind < TR_COMM_NOPKINDS ? kind_names[kind] : "?";
}

tr_comm_config tr_comm_config_default(void)
{
    return (tr_comm_config){.timeout_s = 300.0, .progress_thread = 0, .name = "world",
                            .backend = TR_COMM_BACKEND_UCX};
}

size_t tr_comm_dtype_size(tr_comm_dtype dt)
{
    switch (dt) {
    case TR_COMM_F32:
    case TR_COMM_I32:
        return 4;
    case TR_COMM_F64:
    case TR_COMM_I64:
        return 8;
    default:
        return 0;
    }
}

void tr_comm_block(size_t count, int size, int r, size_t *offset, size_t *len)
{
    size_t n = (size_t)(size > 0 ? size : 1), q = count / n, rem = count % n, ur = (size_t)r;
    *len = q + (ur < rem);
    *offset = ur * q + (ur < rem ? ur : rem);
}

int tr_comm_wrap(const tr_comm_ops *ops, void *impl, int rank, int size, const char *name,
                 double timeout_s, tr_comm **out)
{
    tr_comm *c = calloc(1, sizeof *c);
    if (!c)
        return tr_fail(TR_ERR_NOMEM, "comm: out of memory");
    c->ops = ops;
    c->impl = impl;
    c->rank = rank;
    c->size = size;
    snprintf(c->name, sizeof c->name, "%s", name && *name ? name : "group");
    c->timeout_s = timeout_s;
    c->tuning = (tr_comm_tuning){.ring_min_bytes = 64 << 10, .chunk_bytes = 256 << 10,
                                 .ring_window = 4, .halving_max_bytes = 16 << 20};
    *out = c;
    return TR_OK;
}

void *tr_comm_impl(const tr_comm *comm) { return comm->impl; }
int tr_comm_rank(const tr_comm *comm) { return comm->rank; }
int tr_comm_size(const tr_comm *comm) { return comm->size; }
const char *tr_comm_name(const tr_comm *comm) { return comm->name; }
const char *tr_comm_backend(const tr_comm *comm) { return comm->ops->name; }
double tr_comm_timeout(const tr_comm *comm) { return comm->timeout_s; }

tr_store *tr_comm_store(const tr_comm *comm, const char **session)
{
    const char *s = NULL;
    tr_store *st = comm && comm->ops->store ? comm->ops->store(comm, &s) : NULL;
    if (session)
        *session = st ? s : NULL;
    return st;
}
const tr_comm_tuning *tr_comm_get_tuning(const tr_comm *comm) { return &comm->tuning; }

void tr_comm_set_timeout(tr_comm *comm, double timeout_s)
{
    if (timeout_s > 0)
        comm->timeout_s = timeout_s;
}

int tr_comm_set_tuning(tr_comm *comm, const tr_comm_tuning *t)
{
    if (!comm || !t)
        return tr_fail(TR_ERR_INVALID, "comm: set_tuning needs a communicator and a tuning");
    if (t->chunk_bytes && t->chunk_bytes < 64)
        return tr_fail(TR_ERR_INVALID, "comm: chunk_bytes %zu is below the minimum of 64",
                       t->chunk_bytes);
    if (t->ring_window < 0 || t->ring_window > 256)
        return tr_fail(TR_ERR_INVALID, "comm: ring_window %d out of range 1..256", t->ring_window);
    if (t->ring_window)
        comm->tuning.ring_window = t->ring_window;
    if (t->ring_min_bytes)
        comm->tuning.ring_min_bytes = t->ring_min_bytes;
    if (t->halving_max_bytes)
        comm->tuning.halving_max_bytes = t->halving_max_bytes;
    if (t->chunk_bytes)
        comm->tuning.chunk_bytes = t->chunk_bytes;
    return TR_OK;
}

void tr_comm_get_counters(const tr_comm *comm, tr_comm_counters *out) { *out = comm->counters; }
void tr_comm_reset_counters(tr_comm *comm) { memset(&comm->counters, 0, sizeof comm->counters); }

int tr_comm_world_rank(const tr_comm *comm, int group_rank)
{
    if (!comm || group_rank < 0 || group_rank >= comm->size)
        return -1;
    return comm->ops->world_rank(comm, group_rank);
}

/* ---------------------------------------------------------------- argument checks */

static int check_common(tr_comm *c, tr_comm_opkind kind, size_t count, tr_comm_dtype dt,
                        size_t *bytes)
{
    if (!c)
        return tr_fail(TR_ERR_INVALID, "comm: %s on a NULL communicator", kind_names[kind]);
    size_t es = tr_comm_dtype_size(dt);
    if (!es)
        return tr_fail(TR_ERR_INVALID, "comm '%s': %s: invalid dtype %d", c->name,
                       kind_names[kind], (int)dt);
    if (tr_mul_size(count, es, bytes))
        return tr_fail(TR_ERR_INVALID, "comm '%s': %s: count %zu overflows", c->name,
                       kind_names[kind], count);
    return TR_OK;
}

static int check_redop(tr_comm *c, tr_comm_opkind kind, tr_comm_redop op)
{
    if ((unsigned)op >= TR_COMM_NREDOPS)
        return tr_fail(TR_ERR_INVALID, "comm '%s': %s: invalid reduction op %d", c->name,
                       kind_names[kind], (int)op);
    return TR_OK;
}

static int check_buf(tr_comm *c, tr_comm_opkind kind, const void *p, size_t bytes,
                     const char *which)
{
    if (bytes && !p)
        return tr_fail(TR_ERR_INVALID, "comm '%s': %s: %s buffer is NULL", c->name,
                       kind_names[kind], which);
    return TR_OK;
}

static int check_rank(tr_comm *c, tr_comm_opkind kind, int r, const char *which)
{
    if (r < 0 || r >= c->size)
        return tr_fail(TR_ERR_INVALID, "comm '%s': %s: %s %d out of range 0..%d", c->name,
                       kind_names[kind], which, r, c->size - 1);
    return TR_OK;
}

static int make_request(tr_comm *c, void *handle, tr_comm_request **req)
{
    tr_comm_request *r = malloc(sizeof *r);
    if (!r) {
        c->ops->wait(c, handle, c->timeout_s);
        return tr_fail(TR_ERR_NOMEM, "comm: out of memory");
    }
    r->comm = c;
    r->handle = handle;
    *req = r;
    return TR_OK;
}

static void count_op(tr_comm *c, tr_comm_opkind kind, size_t bytes)
{
    c->counters.ops[kind]++;
    c->counters.bytes[kind] += bytes;
}

/* ---------------------------------------------------------------- async operations */

int tr_comm_allreduce_async(tr_comm *c, const void *send, void *recv, size_t count,
                            tr_comm_dtype dt, tr_comm_redop op, tr_comm_request **req)
{
    size_t bytes = 0;
    int rc = check_common(c, TR_COMM_OP_ALLREDUCE, count, dt, &bytes);
    if (!rc)
        rc = check_redop(c, TR_COMM_OP_ALLREDUCE, op);
    if (!rc)
        rc = check_buf(c, TR_COMM_OP_ALLREDUCE, send, bytes, "send");
    if (!rc)
        rc = check_buf(c, TR_COMM_OP_ALLREDUCE, recv, bytes, "recv");
    void *h = NULL;
    if (!rc)
        rc = c->ops->allreduce(c, send, recv, count, dt, op, &h);
    if (rc)
        return rc;
    count_op(c, TR_COMM_OP_ALLREDUCE, bytes);
    return make_request(c, h, req);
}

int tr_comm_reduce_scatter_async(tr_comm *c, const void *send, void *recv, size_t count,
                                 tr_comm_dtype dt, tr_comm_redop op, tr_comm_request **req)
{
    size_t bytes = 0, off = 0, len = 0;
    int rc = check_common(c, TR_COMM_OP_REDUCE_SCATTER, count, dt, &bytes);
    if (!rc)
        rc = check_redop(c, TR_COMM_OP_REDUCE_SCATTER, op);
    if (!rc) {
        tr_comm_block(count, c->size, c->rank, &off, &len);
        rc = check_buf(c, TR_COMM_OP_REDUCE_SCATTER, send, bytes, "send");
    }
    if (!rc)
        rc = check_buf(c, TR_COMM_OP_REDUCE_SCATTER, recv, len, "recv");
    void *h = NULL;
    if (!rc)
        rc = c->ops->reduce_scatter(c, send, recv, count, dt, op, &h);
    if (rc)
        return rc;
    count_op(c, TR_COMM_OP_REDUCE_SCATTER, bytes);
    return make_request(c, h, req);
}

int tr_comm_allgather_async(tr_comm *c, const void *send, void *recv, size_t count,
                            tr_comm_dtype dt, tr_comm_request **req)
{
    size_t bytes = 0, off = 0, len = 0;
    int rc = check_common(c, TR_COMM_OP_ALLGATHER, count, dt, &bytes);
    if (!rc) {
        tr_comm_block(count, c->size, c->rank, &off, &len);
        rc = check_buf(c, TR_COMM_OP_ALLGATHER, send, len, "send");
    }
    if (!rc)
        rc = check_buf(c, TR_COMM_OP_ALLGATHER, recv, bytes, "recv");
    void *h = NULL;
    if (!rc)
        rc = c->ops->allgather(c, send, recv, count, dt, &h);
    if (rc)
        return rc;
    count_op(c, TR_COMM_OP_ALLGATHER, bytes);
    return make_request(c, h, req);
}

int tr_comm_broadcast_async(tr_comm *c, void *buf, size_t count, tr_comm_dtype dt, int root,
                            tr_comm_request **req)
{
    size_t bytes = 0;
    int rc = check_common(c, TR_COMM_OP_BROADCAST, count, dt, &bytes);
    if (!rc)
        rc = check_rank(c, TR_COMM_OP_BROADCAST, root, "root");
    if (!rc)
        rc = check_buf(c, TR_COMM_OP_BROADCAST, buf, bytes, "data");
    void *h = NULL;
    if (!rc)
        rc = c->ops->broadcast(c, buf, count, dt, root, &h);
    if (rc)
        return rc;
    count_op(c, TR_COMM_OP_BROADCAST, bytes);
    return make_request(c, h, req);
}

static int check_p2p(tr_comm *c, tr_comm_opkind kind, const void *buf, size_t count,
                     tr_comm_dtype dt, int peer, int tag, size_t *bytes)
{
    int rc = check_common(c, kind, count, dt, bytes);
    if (!rc && (tag < 0 || tag > TR_COMM_TAG_MAX))
        rc = tr_fail(TR_ERR_INVALID, "comm '%s': %s: tag %d out of range 0..%d", c->name,
                     kind_names[kind], tag, TR_COMM_TAG_MAX);
    if (!rc)
        rc = check_rank(c, kind, peer, "peer");
    if (!rc && peer == c->rank)
        rc = tr_fail(TR_ERR_INVALID, "comm '%s': %s: peer %d is this rank itself", c->name,
                     kind_names[kind], peer);
    if (!rc)
        rc = check_buf(c, kind, buf, *bytes, "data");
    return rc;
}

int tr_comm_send_async(tr_comm *c, const void *buf, size_t count, tr_comm_dtype dt, int peer,
                       int tag, tr_comm_request **req)
{
    size_t bytes = 0;
    int rc = check_p2p(c, TR_COMM_OP_SEND, buf, count, dt, peer, tag, &bytes);
    void *h = NULL;
    if (!rc)
        rc = c->ops->send(c, buf, bytes, peer, tag, &h);
    if (rc)
        return rc;
    count_op(c, TR_COMM_OP_SEND, bytes);
    return make_request(c, h, req);
}

int tr_comm_recv_async(tr_comm *c, void *buf, size_t count, tr_comm_dtype dt, int peer, int tag,
                       tr_comm_request **req)
{
    size_t bytes = 0;
    int rc = check_p2p(c, TR_COMM_OP_RECV, buf, count, dt, peer, tag, &bytes);
    void *h = NULL;
    if (!rc)
        rc = c->ops->recv(c, buf, bytes, peer, tag, &h);
    if (rc)
        return rc;
    count_op(c, TR_COMM_OP_RECV, bytes);
    return make_request(c, h, req);
}

int tr_comm_barrier_async(tr_comm *c, tr_comm_request **req)
{
    if (!c)
        return tr_fail(TR_ERR_INVALID, "comm: barrier on a NULL communicator");
    void *h = NULL;
    int rc = c->ops->barrier(c, &h);
    if (rc)
        return rc;
    count_op(c, TR_COMM_OP_BARRIER, 0);
    return make_request(c, h, req);
}

/* ---------------------------------------------------------------- completion */

int tr_comm_wait(tr_comm_request **req)
{
    if (!req || !*req)
        return tr_fail(TR_ERR_INVALID, "comm: wait on a NULL request");
    tr_comm_request *r = *req;
    *req = NULL;
    int rc = r->comm->ops->wait(r->comm, r->handle, r->comm->timeout_s);
    free(r);
    return rc;
}

int tr_comm_wait_all(tr_comm_request **reqs, size_t n)
{
    int first = TR_OK;
    char msg[1024] = "";
    for (size_t i = 0; i < n; i++) {
        if (!reqs[i])
            continue;
        int rc = tr_comm_wait(&reqs[i]);
        if (rc && !first) {
            first = rc;
            snprintf(msg, sizeof msg, "%s", tr_errmsg());
        }
    }
    if (first)
        tr_fail(first, "%s", msg);
    return first;
}

int tr_comm_test(tr_comm_request **req, int *done)
{
    *done = 0;
    if (!req || !*req)
        return tr_fail(TR_ERR_INVALID, "comm: test on a NULL request");
    tr_comm_request *r = *req;
    int rc = r->comm->ops->test(r->comm, r->handle, done);
    if (*done) {
        free(r);
        *req = NULL;
    }
    return rc;
}

int tr_comm_order_after(tr_comm_request **req, void *stream)
{
    if (!req || !*req)
        return tr_fail(TR_ERR_INVALID, "comm: order_after on a NULL request");
    tr_comm_request *r = *req;
    if (r->comm->ops->order_after) {
        int taken = 0;
        int rc = r->comm->ops->order_after(r->comm, r->handle, stream, &taken);
        if (taken) {
            *req = NULL;
            free(r);
            return rc;
        }
    }
    return tr_comm_wait(req);
}

int tr_comm_flush(tr_comm *c)
{
    if (!c)
        return tr_fail(TR_ERR_INVALID, "comm: flush of a NULL communicator");
    return c->ops->flush ? c->ops->flush(c, c->timeout_s) : TR_OK;
}

/* ---------------------------------------------------------------- blocking operations */

#define BLOCKING(call)                                                                         \
    do {                                                                                       \
        tr_comm_request *req_ = NULL;                                                          \
        int rc_ = (call);                                                                      \
        return rc_ ? rc_ : tr_comm_wait(&req_);                                                \
    } while (0)

int tr_comm_allreduce(tr_comm *c, const void *send, void *recv, size_t count, tr_comm_dtype dt,
                      tr_comm_redop op)
{
    BLOCKING(tr_comm_allreduce_async(c, send, recv, count, dt, op, &req_));
}

int tr_comm_reduce_scatter(tr_comm *c, const void *send, void *recv, size_t count,
                           tr_comm_dtype dt, tr_comm_redop op)
{
    BLOCKING(tr_comm_reduce_scatter_async(c, send, recv, count, dt, op, &req_));
}

int tr_comm_allgather(tr_comm *c, const void *send, void *recv, size_t count, tr_comm_dtype dt)
{
    BLOCKING(tr_comm_allgather_async(c, send, recv, count, dt, &req_));
}

int tr_comm_broadcast(tr_comm *c, void *buf, size_t count, tr_comm_dtype dt, int root)
{
    BLOCKING(tr_comm_broadcast_async(c, buf, count, dt, root, &req_));
}

int tr_comm_send(tr_comm *c, const void *buf, size_t count, tr_comm_dtype dt, int peer, int tag)
{
    BLOCKING(tr_comm_send_async(c, buf, count, dt, peer, tag, &req_));
}

int tr_comm_recv(tr_comm *c, void *buf, size_t count, tr_comm_dtype dt, int peer, int tag)
{
    BLOCKING(tr_comm_recv_async(c, buf, count, dt, peer, tag, &req_));
}

int tr_comm_barrier(tr_comm *c) { BLOCKING(tr_comm_barrier_async(c, &req_)); }

/* ---------------------------------------------------------------- split / destroy */

int tr_comm_split(tr_comm *comm, int color, int key, const char *name, tr_comm **out)
{
    if (!out)
        return tr_fail(TR_ERR_INVALID, "comm: split needs an output pointer");
    *out = NULL;
    if (!comm)
        return tr_fail(TR_ERR_INVALID, "comm: split of a NULL communicator");
    if (color < 0 && color != TR_COMM_COLOR_NONE)
        return tr_fail(TR_ERR_INVALID,
                       "comm '%s': split: color %d is negative (use TR_COMM_COLOR_NONE = -1 to "
                       "join no group)",
                       comm->name, color);
    if (!name || !*name || strlen(name) >= TR_COMM_MAX_NAME)
        return tr_fail(TR_ERR_INVALID, "comm '%s': split: the group needs a name of 1..%d chars",
                       comm->name, TR_COMM_MAX_NAME - 1);
    int rc = comm->ops->split(comm, color, key, name, out);
    if (rc)
        return rc;
    count_op(comm, TR_COMM_OP_SPLIT, 0);
    if (*out) {
        (*out)->tuning = comm->tuning;
        (*out)->timeout_s = comm->timeout_s;
    }
    return TR_OK;
}

void tr_comm_destroy(tr_comm *comm)
{
    if (!comm)
        return;
    comm->ops->destroy(comm);
    free(comm);
}
