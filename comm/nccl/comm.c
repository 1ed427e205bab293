/* The NCCL backend's communicators: the world (a UCX world underneath, GPU identities
 * all-gathered, the mode decided, the NCCL communicator from a unique id in the store),
 * splits (ncclCommSplit, or a fresh NCCL communicator for a group on distinct GPUs inside a
 * staged parent), destroy, and the helpers the operations share. */
#include <sched.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm/nccl/nccl_internal.h"
#include "core/core.h"
#include "kernels/cuda/cuda.h"

static nccl_group *G(const tr_comm *c) { return tr_comm_impl(c); }

/* ---------------------------------------------------------------- shared helpers */

void nccl_pause(double idle_s)
{
    if (idle_s < 1e-3) {
        sched_yield();
        return;
    }
    struct timespec ts = {0, 50 * 1000};
    nanosleep(&ts, NULL);
}

static const char *route_name(tr_nccl_route r)
{
    switch (r) {
    case TR_NCCL_ROUTE_HOST: return "host";
    case TR_NCCL_ROUTE_NCCL: return "nccl";
    case TR_NCCL_ROUTE_STAGED: return "staged";
    case TR_NCCL_ROUTE_LOCAL: return "local";
    }
    return "?";
}

int nccl_op_prefix(const nccl_op *op, char *buf, size_t len)
{
    const nccl_group *g = op->g;
    size_t bytes = op->kind == TR_COMM_OP_SEND || op->kind == TR_COMM_OP_RECV
                       ? op->bytes
                       : op->count * tr_comm_dtype_size(op->dt);
    return snprintf(buf, len, "rank %d (group '%s', rank %d of %d): %s #%u (%zu bytes) [%s]",
                    g->e->rank, g->name, g->rank, g->size, tr_comm_opkind_name(op->kind),
                    op->seq, bytes, route_name(op->route));
}

int nccl_op_fail(nccl_op *op, int code, const char *fmt, ...)
{
    op->g->broken = 1;
    if (op->status) /* keep the first failure */
        return -1;
    char what[400], pre[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    nccl_op_prefix(op, pre, sizeof pre);
    snprintf(op->err, sizeof op->err, "%s: %s", pre, what);
    op->status = code;
    op->state = OP_DONE;
    return -1;
}

int nccl_settle(nccl_group *g, ncclComm_t comm, double deadline, nccl_op *op, const char *what)
{
    double start = tr_now(), last = start;
    for (;;) {
        ncclResult_t st = ncclInProgress;
        ncclResult_t r = ncclCommGetAsyncError(comm, &st);
        if (r != ncclSuccess)
            st = r;
        if (st == ncclSuccess)
            return TR_OK;
        double now = tr_now();
        if (st != ncclInProgress || now > deadline) {
            char msg[400];
            if (st != ncclInProgress)
                snprintf(msg, sizeof msg, "%s: NCCL error: %s (%s)", what, ncclGetErrorString(st),
                         ncclGetLastError(comm));
            else
                snprintf(msg, sizeof msg, "%s: timed out after %.3g s; the NCCL communicator is "
                                          "aborted",
                         what, now - start);
            ncclCommAbort(comm);
            if (comm == g->nccl)
                g->nccl = NULL;
            g->broken = 1;
            int code = st != ncclInProgress ? TR_ERR_COMM : TR_ERR_TIMEOUT;
            if (op) {
                nccl_op_fail(op, code, "%s", msg);
                return code;
            }
            return tr_fail(code, "rank %d (group '%s', rank %d of %d): %s", g->e->rank, g->name,
                           g->rank, g->size, msg);
        }
        nccl_pause(now - last);
    }
}

void *nccl_pin_get(nccl_engine *e, size_t bytes)
{
    int best = -1;
    for (int i = 0; i < e->n_pins; i++)
        if (!e->pins[i].busy && e->pins[i].bytes >= bytes &&
            (best < 0 || e->pins[i].bytes < e->pins[best].bytes))
            best = i;
    if (best >= 0) {
        e->pins[best].busy = 1;
        return e->pins[best].p;
    }
    size_t sz = 4096;
    while (sz < bytes && sz < ((size_t)1 << 62))
        sz <<= 1;
    nccl_pin *np = realloc(e->pins, sizeof *np * (size_t)(e->n_pins + 1));
    if (!np) {
        tr_fail(TR_ERR_NOMEM, "comm: out of memory");
        return NULL;
    }
    e->pins = np;
    void *p = NULL;
    if (cudaMallocHost(&p, sz) != cudaSuccess) {
        (void)cudaGetLastError();
        tr_fail(TR_ERR_NOMEM, "comm: cannot allocate %zu bytes of pinned host memory for staging",
                sz);
        return NULL;
    }
    e->pins[e->n_pins++] = (nccl_pin){p, sz, 1};
    return p;
}

void nccl_pin_put(nccl_engine *e, void *p)
{
    for (int i = 0; p && i < e->n_pins; i++)
        if (e->pins[i].p == p)
            e->pins[i].busy = 0;
}

/* ---------------------------------------------------------------- engine and groups */

static void engine_release(nccl_engine *e)
{
    if (!e || --e->refs > 0)
        return;
    for (int i = 0; i < e->n_pins; i++)
        if (!e->pins[i].busy) /* busy ones may still be written by a failed transfer */
            cudaFreeHost(e->pins[i].p);
    free(e->pins);
    free(e->ids);
    free(e->groups);
    free(e);
}

static nccl_group *group_new(nccl_engine *e, tr_comm *host, const char *name, const char *key)
{
    nccl_group *g = calloc(1, sizeof *g);
    nccl_group **list = realloc(e->groups, sizeof *list * (size_t)(e->n_groups + 1));
    if (!g || !list) {
        free(g);
        if (list)
            e->groups = list;
        tr_fail(TR_ERR_NOMEM, "comm: out of memory");
        return NULL;
    }
    e->groups = list;
    if (cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking) != cudaSuccess) {
        (void)cudaGetLastError();
        free(g);
        tr_fail(TR_ERR_INTERNAL, "comm: cannot create a CUDA stream for group '%s'", name);
        return NULL;
    }
    e->groups[e->n_groups++] = g;
    e->refs++;
    g->e = e;
    g->host = host;
    g->rank = tr_comm_rank(host);
    g->size = tr_comm_size(host);
    snprintf(g->name, sizeof g->name, "%s", name);
    snprintf(g->key, sizeof g->key, "%s", key);
    return g;
}

/* Frees the group (not its host communicator). */
static void group_free(nccl_group *g)
{
    nccl_engine *e = g->e;
    if (g->nccl) {
        if (g->broken) {
            ncclCommAbort(g->nccl);
        } else {
            ncclResult_t r = ncclCommFinalize(g->nccl);
            if (r == ncclSuccess || r == ncclInProgress)
                r = nccl_settle(g, g->nccl, tr_now() + tr_comm_timeout(g->host), NULL,
                                "finalizing the NCCL communicator") ? ncclInternalError
                                                                    : ncclSuccess;
            if (r != ncclSuccess) {
                tr_warn("%s", tr_errmsg());
                if (g->nccl)
                    ncclCommAbort(g->nccl);
            } else {
                ncclCommDestroy(g->nccl);
            }
        }
        g->nccl = NULL;
    }
    if (g->stream)
        cudaStreamDestroy(g->stream);
    for (int i = 0; i < e->n_groups; i++)
        if (e->groups[i] == g) {
            e->groups[i] = e->groups[--e->n_groups];
            break;
        }
    free(g);
    engine_release(e);
}

/* A new NCCL communicator for g's members; rank 0 of g makes the unique id and publishes it
 * under the group's key in the store. */
static int nccl_from_store(nccl_group *g, double timeout_s)
{
    nccl_engine *e = g->e;
    if (!e->store)
        return tr_fail(TR_ERR_INTERNAL, "comm '%s': no rendezvous store for the NCCL unique id",
                       g->name);
    char key[256];
    snprintf(key, sizeof key, "tr/%s/nccl/%s/uid", e->session, g->key);
    ncclUniqueId uid;
    int rc = TR_OK;
    if (g->rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&uid);
        if (r != ncclSuccess)
            return tr_fail(TR_ERR_COMM, "rank %d (group '%s'): ncclGetUniqueId: %s", e->rank,
                           g->name, ncclGetErrorString(r));
        rc = tr_store_set(e->store, key, &uid, sizeof uid);
    } else {
        void *v = NULL;
        size_t len = 0;
        rc = tr_store_get(e->store, key, &v, &len);
        if (!rc && len != sizeof uid)
            rc = tr_fail(TR_ERR_COMM, "store key %s holds %zu bytes, not an NCCL unique id (%zu)",
                         key, len, sizeof uid);
        if (!rc)
            memcpy(&uid, v, sizeof uid);
        free(v);
    }
    if (rc)
        return tr_fail_context(rc, "rank %d (group '%s'): sharing the NCCL unique id", e->rank,
                               g->name);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    config.commName = g->name;
    ncclComm_t comm = NULL;
    ncclResult_t r = ncclCommInitRankConfig(&comm, g->size, uid, g->rank, &config);
    if (r != ncclSuccess && r != ncclInProgress)
        return tr_fail(TR_ERR_COMM, "rank %d (group '%s', rank %d of %d): ncclCommInitRank: %s",
                       e->rank, g->name, g->rank, g->size, ncclGetErrorString(r));
    g->nccl = comm;
    return nccl_settle(g, comm, tr_now() + timeout_s, NULL, "creating the NCCL communicator");
}

static int device_identity(tr_nccl_device_id *id)
{
    memset(id, 0, sizeof *id);
    int dev = tr_cuda_device();
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, dev) != cudaSuccess ||
        cudaDeviceGetPCIBusId(id->bus_id, (int)sizeof id->bus_id, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return tr_fail(TR_ERR_INTERNAL, "comm: cannot read the identity of GPU %d", dev);
    }
    memcpy(id->uuid, prop.uuid.bytes, sizeof id->uuid);
    gethostname(id->host, sizeof id->host - 1);
    return TR_OK;
}

/* ---------------------------------------------------------------- the world */

int comm_nccl_init(const tr_comm_rendezvous *rv, const tr_comm_config *cfg_in, tr_comm **out)
{
    if (!out || !rv)
        return tr_fail(TR_ERR_INVALID, "comm: init needs a rendezvous and an output pointer");
    *out = NULL;
    int rc = tr_cuda_init();
    if (rc)
        return tr_fail_context(rc, "comm: the NCCL backend needs a GPU");
    tr_cuda_use_device();
    tr_comm_config cfg = cfg_in ? *cfg_in : tr_comm_config_default();
    cfg.progress_thread = 1;
    cfg.backend = TR_COMM_BACKEND_UCX; /* the host communicator underneath */
    tr_comm *host = NULL;
    if ((rc = tr_comm_init(rv, &cfg, &host)))
        return rc;
    nccl_engine *e = calloc(1, sizeof *e);
    if (!e) {
        tr_comm_destroy(host);
        return tr_fail(TR_ERR_NOMEM, "comm: out of memory");
    }
    e->refs = 1;
    e->rank = tr_comm_rank(host);
    e->size = tr_comm_size(host);
    e->compute = (cudaStream_t)tr_cuda_stream();
    const char *stage = getenv("TRIDENT_NCCL_STAGE");
    e->force_staged = stage && !strcmp(stage, "1");
    {
        const char *session = NULL;
        e->store = tr_comm_store(host, &session);
        snprintf(e->session, sizeof e->session, "%s", session ? session : "");
    }
    e->ids = calloc((size_t)e->size, sizeof *e->ids);
    tr_nccl_device_id mine;
    if (!e->ids)
        rc = tr_fail(TR_ERR_NOMEM, "comm: out of memory");
    if (!rc)
        rc = device_identity(&mine);
    /* all-gather the identities as 32-bit words (sizeof is a multiple of 4) */
    size_t words = sizeof mine / 4;
    if (!rc)
        rc = tr_comm_allgather(host, &mine, e->ids, words * (size_t)e->size, TR_COMM_I32);
    nccl_group *g = NULL;
    if (!rc && !(g = group_new(e, host, cfg.name ? cfg.name : "world", "world")))
        rc = TR_ERR_NOMEM;
    if (!rc) {
        char why[256];
        g->mode = tr_nccl_group_mode(e->ids, e->size, e->force_staged, why, sizeof why);
        tr_debug("nccl: world of %d ranks, mode %s: %s", e->size, tr_nccl_mode_name(g->mode),
                 why);
        if (g->mode == TR_NCCL_MODE_NCCL)
            rc = nccl_from_store(g, cfg.timeout_s);
    }
    if (!rc)
        rc = tr_comm_wrap(&nccl_ops, g, g->rank, g->size, tr_comm_name(host), cfg.timeout_s,
                          out);
    if (rc) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", tr_errmsg());
        if (g)
            group_free(g);
        engine_release(e);
        tr_comm_destroy(host);
        return tr_fail(rc, "%s", msg);
    }
    g->comm = *out;
    engine_release(e); /* the group holds it */
    return TR_OK;
}

int tr_comm_nccl_mode(const tr_comm *c)
{
    if (!c || strcmp(tr_comm_backend(c), nccl_ops.name))
        return -1;
    return (int)G(c)->mode;
}

/* ---------------------------------------------------------------- split, destroy */

static int n_world_rank(const tr_comm *c, int group_rank)
{
    return tr_comm_world_rank(G(c)->host, group_rank);
}

static int n_split(tr_comm *c, int color, int key, const char *name, tr_comm **out)
{
    nccl_group *g = G(c);
    nccl_engine *e = g->e;
    *out = NULL;
    tr_cuda_use_device();
    if (g->broken)
        return tr_fail(TR_ERR_COMM, "rank %d: group '%s' is unusable after an earlier failure; "
                                    "split not started",
                       e->rank, g->name);
    double timeout = tr_comm_timeout(c);
    int rc = nccl_drain_fifo(g, timeout);
    tr_comm *hchild = NULL;
    if (!rc)
        rc = tr_comm_split(g->host, color, key, name, &hchild);
    if (rc)
        return rc;
    uint32_t seq = g->split_seq++;
    /* the child's mode from its members' GPUs */
    tr_nccl_mode cmode = TR_NCCL_MODE_LOCAL;
    int n = hchild ? tr_comm_size(hchild) : 0;
    if (n > 1) {
        tr_nccl_device_id *ids = calloc((size_t)n, sizeof *ids);
        if (!ids) {
            tr_comm_destroy(hchild);
            return tr_fail(TR_ERR_NOMEM, "comm: out of memory");
        }
        for (int i = 0; i < n; i++)
            ids[i] = e->ids[tr_comm_world_rank(hchild, i)];
        cmode = tr_nccl_group_mode(ids, n, e->force_staged, NULL, 0);
        free(ids);
    }
    ncclComm_t nc = NULL;
    if (g->mode == TR_NCCL_MODE_NCCL) { /* collective over the parent, members or not */
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
        config.blocking = 0;
        config.commName = name;
        int ncolor = cmode == TR_NCCL_MODE_NCCL ? color : NCCL_SPLIT_NOCOLOR;
        ncclResult_t r = ncclCommSplit(g->nccl, ncolor, key, &nc, &config);
        double deadline = tr_now() + timeout;
        if (r != ncclSuccess && r != ncclInProgress)
            rc = tr_fail(TR_ERR_COMM, "rank %d (group '%s'): ncclCommSplit: %s", e->rank,
                         g->name, ncclGetErrorString(r));
        if (!rc)
            rc = nccl_settle(g, g->nccl, deadline, NULL, "ncclCommSplit");
        if (!rc && nc && (rc = nccl_settle(g, nc, deadline, NULL,
                                           "ncclCommSplit (new communicator)")))
            nc = NULL; /* aborted by nccl_settle */
    }
    nccl_group *cg = NULL;
    if (!rc && hchild) {
        char ckey[160];
        snprintf(ckey, sizeof ckey, "%.100s.%u.%d", g->key, seq, color);
        cg = group_new(e, hchild, name, ckey);
        if (!cg)
            rc = TR_ERR_NOMEM;
    }
    if (cg) {
        cg->mode = cmode;
        cg->nccl = nc;
        nc = NULL;
        if (cmode == TR_NCCL_MODE_NCCL && !cg->nccl) /* parent staged: a fresh communicator */
            rc = nccl_from_store(cg, timeout);
        if (!rc)
            rc = tr_comm_wrap(&nccl_ops, cg, cg->rank, cg->size, name, timeout, out);
    }
    if (rc) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", tr_errmsg());
        if (nc)
            ncclCommAbort(nc);
        if (cg) {
            cg->broken = 1;
            group_free(cg);
        }
        tr_comm_destroy(hchild);
        *out = NULL;
        return tr_fail(rc, "%s", msg);
    }
    if (cg)
        cg->comm = *out;
    return TR_OK;
}

static void n_destroy(tr_comm *c)
{
    nccl_group *g = G(c);
    tr_cuda_use_device();
    nccl_engine_progress(g->e);
    if (g->ordered.head && nccl_flush_group(g, tr_comm_timeout(c)))
        tr_warn("%s", tr_errmsg());
    tr_comm *host = g->host;
    group_free(g);
    tr_comm_destroy(host);
}

const tr_comm_ops nccl_ops = {
    .name = "nccl",
    .allreduce = nccl_allreduce,
    .reduce_scatter = nccl_reduce_scatter,
    .allgather = nccl_allgather,
    .broadcast = nccl_broadcast,
    .send = nccl_send,
    .recv = nccl_recv,
    .barrier = nccl_barrier,
    .test = nccl_test,
    .wait = nccl_wait,
    .order_after = nccl_order_after,
    .flush = nccl_flush,
    .world_rank = n_world_rank,
    .split = n_split,
    .destroy = n_destroy,
};
