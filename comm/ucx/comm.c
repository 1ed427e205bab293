/* The UCX backend's tr_comm_ops: operations, split, destroy, and the world (store
 * rendezvous of UCX worker addresses). */
#include "comm/ucx/ucx_internal.h"

#include <stdlib.h>
#include <string.h>

static const tr_comm_ops ucx_ops;

static ucx_group *G(const tr_comm *c) { return tr_comm_impl(c); }

static int start(ucx_op *op, int setup_rc, void **handle)
{
    if (setup_rc) {
        ucx_op_free(op);
        return setup_rc;
    }
    int rc = ucx_submit(op);
    if (rc)
        return rc;
    *handle = op;
    return TR_OK;
}

static ucx_op *new_op(const tr_comm *c, tr_comm_opkind kind, const void *send, void *recv,
                      size_t count, tr_comm_dtype dt)
{
    ucx_op *op = ucx_op_new(G(c), kind, 0);
    if (!op) {
        tr_fail(TR_ERR_NOMEM, "comm: out of memory");
        return NULL;
    }
    op->send = send;
    op->recv = recv;
    op->count = count;
    op->dt = dt;
    op->es = tr_comm_dtype_size(dt);
    return op;
}

static int u_allreduce(tr_comm *c, const void *send, void *recv, size_t count, tr_comm_dtype dt,
                       tr_comm_redop redop, void **h)
{
    ucx_op *op = new_op(c, TR_COMM_OP_ALLREDUCE, send, recv, count, dt);
    if (!op)
        return TR_ERR_NOMEM;
    op->redop = redop;
    return start(op, ucx_setup_allreduce(op, tr_comm_get_tuning(c)), h);
}

static int u_reduce_scatter(tr_comm *c, const void *send, void *recv, size_t count,
                            tr_comm_dtype dt, tr_comm_redop redop, void **h)
{
    ucx_op *op = new_op(c, TR_COMM_OP_REDUCE_SCATTER, send, recv, count, dt);
    if (!op)
        return TR_ERR_NOMEM;
    op->redop = redop;
    return start(op, ucx_setup_reduce_scatter(op, tr_comm_get_tuning(c)), h);
}

static int u_allgather(tr_comm *c, const void *send, void *recv, size_t count, tr_comm_dtype dt,
                       void **h)
{
    ucx_op *op = new_op(c, TR_COMM_OP_ALLGATHER, send, recv, count, dt);
    if (!op)
        return TR_ERR_NOMEM;
    return start(op, ucx_setup_allgather(op, tr_comm_get_tuning(c)), h);
}

static int u_broadcast(tr_comm *c, void *buf, size_t count, tr_comm_dtype dt, int root, void **h)
{
    ucx_op *op = new_op(c, TR_COMM_OP_BROADCAST, buf, buf, count, dt);
    if (!op)
        return TR_ERR_NOMEM;
    op->root = root;
    return start(op, ucx_setup_broadcast(op, tr_comm_get_tuning(c)), h);
}

static int u_send(tr_comm *c, const void *buf, size_t bytes, int peer, int tag, void **h)
{
    ucx_op *op = new_op(c, TR_COMM_OP_SEND, buf, NULL, bytes, TR_COMM_NDTYPES);
    if (!op)
        return TR_ERR_NOMEM;
    op->es = 1;
    op->peer = peer;
    op->tag = tag;
    return start(op, ucx_setup_p2p(op, 1), h);
}

static int u_recv(tr_comm *c, void *buf, size_t bytes, int peer, int tag, void **h)
{
    ucx_op *op = new_op(c, TR_COMM_OP_RECV, NULL, buf, bytes, TR_COMM_NDTYPES);
    if (!op)
        return TR_ERR_NOMEM;
    op->es = 1;
    op->peer = peer;
    op->tag = tag;
    return start(op, ucx_setup_p2p(op, 0), h);
}

static int u_barrier(tr_comm *c, void **h)
{
    ucx_op *op = new_op(c, TR_COMM_OP_BARRIER, NULL, NULL, 0, TR_COMM_I32);
    if (!op)
        return TR_ERR_NOMEM;
    return start(op, ucx_setup_barrier(op), h);
}

static int u_test(tr_comm *c, void *handle, int *done)
{
    (void)c;
    int st = TR_OK;
    *done = ucx_test(handle, &st);
    return *done ? st : TR_OK;
}

static int u_wait(tr_comm *c, void *handle, double timeout_s)
{
    (void)c;
    return ucx_wait(handle, timeout_s);
}

static int u_world_rank(const tr_comm *c, int group_rank) { return G(c)->world[group_rank]; }

/* ---------------------------------------------------------------- internal collectives
 * (split and destroy use these directly: they do not count in the communicator's counters) */

static int internal_run(ucx_op *op, int setup_rc, double timeout_s)
{
    void *h = NULL;
    int rc = start(op, setup_rc, &h);
    return rc ? rc : ucx_wait(h, timeout_s);
}

static int internal_barrier(ucx_group *g, double timeout_s)
{
    ucx_op *op = ucx_op_new(g, TR_COMM_OP_BARRIER, 0);
    if (!op)
        return tr_fail(TR_ERR_NOMEM, "comm: out of memory");
    return internal_run(op, ucx_setup_barrier(op), timeout_s);
}

static const tr_comm_tuning small_tuning = {.ring_min_bytes = (size_t)1 << 40, .chunk_bytes = 1 << 18};

static int internal_allgather(ucx_group *g, const int64_t *mine, int64_t *all, size_t per_rank,
                              double timeout_s)
{
    ucx_op *op = ucx_op_new(g, TR_COMM_OP_SPLIT, 0);
    if (!op)
        return tr_fail(TR_ERR_NOMEM, "comm: out of memory");
    op->send = (const uint8_t *)mine;
    op->recv = (uint8_t *)all;
    op->count = per_rank * (size_t)g->size;
    op->dt = TR_COMM_I64;
    op->es = 8;
    return internal_run(op, ucx_setup_allgather(op, &small_tuning), timeout_s);
}

static int internal_bcast(ucx_group *g, int64_t *v, double timeout_s)
{
    ucx_op *op = ucx_op_new(g, TR_COMM_OP_SPLIT, 0);
    if (!op)
        return tr_fail(TR_ERR_NOMEM, "comm: out of memory");
    op->send = op->recv = (uint8_t *)v;
    op->count = 1;
    op->dt = TR_COMM_I64;
    op->es = 8;
    op->root = 0;
    return internal_run(op, ucx_setup_broadcast(op, &small_tuning), timeout_s);
}

/* ---------------------------------------------------------------- groups */

static ucx_group *group_new(ucx_engine *e, uint32_t id, int rank, int size, const char *name)
{
    ucx_group *g = calloc(1, sizeof *g);
    if (!g || !(g->world = calloc((size_t)size, sizeof *g->world))) {
        free(g);
        tr_fail(TR_ERR_NOMEM, "comm: out of memory");
        return NULL;
    }
    g->eng = e;
    g->id = id;
    g->rank = rank;
    g->size = size;
    snprintf(g->name, sizeof g->name, "%s", name);
    return g;
}

static int cmp_member(const void *pa, const void *pb)
{
    const int64_t *a = pa, *b = pb; /* (key, parent rank) */
    if (a[0] != b[0])
        return a[0] < b[0] ? -1 : 1;
    return (a[1] > b[1]) - (a[1] < b[1]);
}

/* New group ids: rank 0 of the parent reserves one per distinct color from the store's
 * counter (job-wide, so ids never collide across groups) and broadcasts the base. */
static int reserve_ids(ucx_group *g, int ncolors, double timeout_s, int64_t *base)
{
    ucx_engine *e = g->eng;
    *base = 0;
    if (g->rank == 0) {
        if (e->store) {
            char key[96];
            snprintf(key, sizeof key, "tr/%s/group_ids", e->session);
            int64_t last = 0;
            int rc = tr_store_add(e->store, key, ncolors, &last);
            if (rc)
                return tr_fail_context(rc, "rank %d: split of '%s'", e->rank, g->name);
            *base = last - ncolors + 1;
        } else {
            *base = (int64_t)e->local_group_ids + 1;
            e->local_group_ids += (uint32_t)ncolors;
        }
    }
    return internal_bcast(g, base, timeout_s);
}

static int u_split(tr_comm *c, int color, int key, const char *name, tr_comm **out)
{
    ucx_group *g = G(c);
    int n = g->size;
    double timeout_s = tr_comm_timeout(c);
    int64_t mine[2] = {color, key};
    int64_t *all = malloc(sizeof(int64_t) * 2 * (size_t)n);
    int64_t *members = malloc(sizeof(int64_t) * 2 * (size_t)n);
    int rc = all && members ? TR_OK : tr_fail(TR_ERR_NOMEM, "comm: out of memory");
    if (!rc)
        rc = internal_allgather(g, mine, all, 2, timeout_s);
    int ncolors = 0, color_index = 0, size = 0, rank = -1;
    if (!rc) {
        for (int i = 0; i < n; i++) { /* distinct colors: count first occurrences */
            int64_t ci = all[2 * i];
            int first = ci >= 0;
            for (int j = 0; j < i && first; j++)
                first = all[2 * j] != ci;
            ncolors += first;
            color_index += first && ci < color;
        }
        int64_t base = 0;
        rc = reserve_ids(g, ncolors, timeout_s, &base);
        if (!rc && color >= 0) {
            for (int i = 0; i < n; i++)
                if (all[2 * i] == color) {
                    members[2 * size] = all[2 * i + 1];
                    members[2 * size + 1] = i;
                    size++;
                }
            qsort(members, (size_t)size, 2 * sizeof(int64_t), cmp_member);
            int64_t id = base + color_index;
            if (id > UCX_MAX_GROUP_ID)
                rc = tr_fail(TR_ERR_COMM, "rank %d: split of '%s': group ids exhausted (%d)",
                             g->eng->rank, g->name, UCX_MAX_GROUP_ID);
            ucx_group *ng = rc ? NULL : group_new(g->eng, (uint32_t)id, 0, size, name);
            if (!rc && !ng)
                rc = TR_ERR_NOMEM;
            for (int i = 0; !rc && i < size; i++) {
                int pr = (int)members[2 * i + 1];
                ng->world[i] = g->world[pr];
                if (pr == g->rank)
                    rank = i;
            }
            if (!rc) {
                ng->rank = rank;
                rc = tr_comm_wrap(&ucx_ops, ng, rank, size, name, timeout_s, out);
            }
            if (rc && ng) {
                free(ng->world);
                free(ng);
            } else if (!rc) {
                ng->comm = *out;
                g->eng->refs++;
            }
        }
    }
    free(all);
    free(members);
    return rc;
}

static void u_destroy(tr_comm *c)
{
    ucx_group *g = G(c);
    ucx_engine *e = g->eng;
    int busy = 0;
    pthread_mutex_lock(&e->mu);
    for (ucx_op *op = e->active; op; op = op->next)
        busy += op->g == g;
    pthread_mutex_unlock(&e->mu);
    if (busy)
        tr_warn("rank %d: group '%s' destroyed with %d operations not waited for (their "
                "requests must not be used any more)",
                e->rank, g->name, busy);
    if (g->is_world && !e->broken && g->size > 1 &&
        internal_barrier(g, tr_comm_timeout(c)) != TR_OK)
        tr_warn("rank %d: barrier at communicator teardown failed: %s", e->rank, tr_errmsg());
    free(g->world);
    free(g);
    ucx_engine_release(e);
}

static tr_store *u_store(const tr_comm *c, const char **session)
{
    ucx_engine *e = G(c)->eng;
    *session = e->session;
    return e->store;
}

static const tr_comm_ops ucx_ops = {
    .name = "ucx",
    .allreduce = u_allreduce,
    .reduce_scatter = u_reduce_scatter,
    .allgather = u_allgather,
    .broadcast = u_broadcast,
    .send = u_send,
    .recv = u_recv,
    .barrier = u_barrier,
    .test = u_test,
    .wait = u_wait,
    .world_rank = u_world_rank,
    .split = u_split,
    .destroy = u_destroy,
    .store = u_store,
};

/* ---------------------------------------------------------------- the world */

/* Publish this rank's worker address, fetch everyone's. */
static int exchange_addresses(ucx_engine *e)
{
    void *addr = NULL;
    size_t len = 0;
    int rc = ucx_engine_worker_address(e, &addr, &len);
    if (rc)
        return rc;
    char key[96];
    snprintf(key, sizeof key, "tr/%s/ucx/%d", e->session, e->rank);
    rc = tr_store_set(e->store, key, addr, len);
    ucp_worker_release_address(e->worker, addr);
    for (int r = 0; !rc && r < e->size; r++) {
        snprintf(key, sizeof key, "tr/%s/ucx/%d", e->session, r);
        rc = tr_store_get(e->store, key, &e->addr[r], &e->addr_len[r]);
    }
    return rc;
}

static int world_generation; /* worlds created by this process: keys and session differ */

int comm_ucx_init(const tr_comm_rendezvous *rv, const tr_comm_config *cfg, tr_comm **out)
{
    *out = NULL;
    int rank = rv->rank, size = rv->size, port = rv->master_port;
    const char *host = rv->master_addr;
    int need_store = size > 1 || (host && *host);
    ucx_engine *e = NULL;
    int rc = ucx_engine_create(&e, rank, size, cfg->progress_thread, cfg->timeout_s);
    if (rc)
        return rc;
    snprintf(e->session, sizeof e->session, "w%d", world_generation++);
    if (need_store) {
        if (rank == 0)
            rc = tr_store_server_start(host, port, rv->job_token, e->session, size, &e->server);
        if (!rc)
            rc = tr_store_connect(host, port, rv->job_token, e->session, rank, size,
                                  cfg->timeout_s, &e->store);
        if (!rc)
            rc = exchange_addresses(e);
        if (rc) {
            tr_fail_context(rc, "rank %d of %d: rendezvous", rank, size);
            ucx_engine_release(e);
            return rc;
        }
    }
    ucx_group *g = group_new(e, 0, rank, size, cfg->name);
    if (!g) {
        ucx_engine_release(e);
        return TR_ERR_NOMEM;
    }
    for (int r = 0; r < size; r++)
        g->world[r] = r;
    g->is_world = 1;
    rc = tr_comm_wrap(&ucx_ops, g, rank, size, cfg->name, cfg->timeout_s, out);
    if (rc) {
        free(g->world);
        free(g);
        ucx_engine_release(e);
        return rc;
    }
    g->comm = *out;
    if (size > 1 && (rc = internal_barrier(g, cfg->timeout_s)) != TR_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", tr_errmsg());
        tr_comm_destroy(*out);
        *out = NULL;
        return tr_fail(rc, "connectivity check after rendezvous: %s", msg);
    }
    return TR_OK;
}
