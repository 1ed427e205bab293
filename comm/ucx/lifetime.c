/* The UCX engine's lifetime: context, worker, optional progress thread; teardown closes the
 * endpoints (flushing, or forced after a failure), reaps parked operations, stops the store. */
#include "comm/ucx/ucx_internal.h"

#include <sched.h>
#include <stdlib.h>

/* ---------------------------------------------------------------- engine lifetime */

int ucx_engine_create(ucx_engine **out, int rank, int size, int use_thread, double timeout_s)
{
    *out = NULL;
    ucx_engine *e = calloc(1, sizeof *e);
    if (!e)
        return tr_fail(TR_ERR_NOMEM, "comm: out of memory");
    e->rank = rank;
    e->size = size;
    e->timeout_s = timeout_s;
    e->refs = 1;
    e->eps = calloc((size_t)size, sizeof *e->eps);
    e->ep_status = calloc((size_t)size, sizeof *e->ep_status);
    e->addr = calloc((size_t)size, sizeof *e->addr);
    e->addr_len = calloc((size_t)size, sizeof *e->addr_len);
    if (!e->eps || !e->ep_status || !e->addr || !e->addr_len) {
        ucx_engine_release(e);
        return tr_fail(TR_ERR_NOMEM, "comm: out of memory");
    }
    pthread_mutex_init(&e->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&e->done_cv, &ca);
    pthread_cond_init(&e->work_cv, &ca);
    pthread_condattr_destroy(&ca);

    ucp_config_t *cfg = NULL;
    ucs_status_t s = ucp_config_read(NULL, NULL, &cfg);
    if (s != UCS_OK) {
        ucx_engine_release(e);
        return tr_fail(TR_ERR_COMM, "rank %d: UCX configuration: %s", rank, ucs_status_string(s));
    }
    /* Eager up to 64 KiB: UCX's default switches to rendezvous (a round trip that both
     * sides must progress) from a few KiB on shared memory; measured here, 64 KiB made
     * 16-64 KiB allreduces 1.5-2x faster on 2 and 8 ranks. A user's UCX_RNDV_THRESH wins. */
    if (!getenv("UCX_RNDV_THRESH"))
        ucp_config_modify(cfg, "RNDV_THRESH", "65536");
    ucp_params_t p = {
        .field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_ESTIMATED_NUM_EPS |
                      UCP_PARAM_FIELD_MT_WORKERS_SHARED,
        .features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP,
        .estimated_num_eps = (size_t)size,
        .mt_workers_shared = 0,
    };
    s = ucp_init(&p, cfg, &e->ctx);
    ucp_config_release(cfg);
    if (s != UCS_OK) {
        e->ctx = NULL;
        ucx_engine_release(e);
        return tr_fail(TR_ERR_COMM, "rank %d: UCX init failed: %s", rank, ucs_status_string(s));
    }
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SERIALIZED};
    s = ucp_worker_create(e->ctx, &wp, &e->worker);
    if (s != UCS_OK) {
        e->worker = NULL;
        ucx_engine_release(e);
        return tr_fail(TR_ERR_COMM, "rank %d: UCX worker: %s", rank, ucs_status_string(s));
    }
    if (ucp_worker_get_efd(e->worker, &e->efd) != UCS_OK)
        e->efd = -1; /* no event descriptor: waiters sleep briefly instead */
    e->use_thread = use_thread;
    if (use_thread) {
        if (pthread_create(&e->thread, NULL, ucx_progress_thread, e) != 0) {
            ucx_engine_release(e);
            return tr_fail(TR_ERR_COMM, "rank %d: cannot start the progress thread", rank);
        }
        e->thread_started = 1;
    }
    *out = e;
    return TR_OK;
}

int ucx_engine_worker_address(ucx_engine *e, void **addr, size_t *len)
{
    ucp_address_t *a = NULL;
    ucs_status_t s = ucp_worker_get_address(e->worker, &a, len);
    if (s != UCS_OK)
        return tr_fail(TR_ERR_COMM, "rank %d: UCX worker address: %s", e->rank,
                       ucs_status_string(s));
    *addr = a;
    return TR_OK;
}

static void close_endpoints(ucx_engine *e)
{
    void **reqs = calloc((size_t)e->size, sizeof *reqs);
    double deadline = tr_now() + (e->timeout_s < 10 ? e->timeout_s : 10);
    for (int r = 0; r < e->size; r++) {
        if (!e->eps[r])
            continue;
        int force = e->broken || e->ep_status[r] != UCS_OK;
        ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                 .flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0};
        ucs_status_ptr_t req = ucp_ep_close_nbx(e->eps[r], &p);
        if (UCS_PTR_IS_PTR(req) && reqs)
            reqs[r] = req;
        e->eps[r] = NULL;
    }
    for (int r = 0; reqs && r < e->size; r++) {
        while (reqs[r] && ucp_request_check_status(reqs[r]) == UCS_INPROGRESS &&
               tr_now() < deadline) {
            if (!ucp_worker_progress(e->worker))
                sched_yield();
        }
        if (reqs[r] && ucp_request_check_status(reqs[r]) != UCS_INPROGRESS)
            ucp_request_free(reqs[r]);
    }
    free(reqs);
}

void ucx_engine_release(ucx_engine *e)
{
    if (!e || --e->refs > 0)
        return;
    if (e->thread_started) {
        pthread_mutex_lock(&e->mu);
        e->stop = 1;
        pthread_cond_signal(&e->work_cv);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->thread, NULL);
    }
    if (e->worker) {
        pthread_mutex_lock(&e->mu);
        close_endpoints(e);
        for (int i = 0; i < 100 && e->zombies; i++)
            ucx_progress_locked(e);
        pthread_mutex_unlock(&e->mu);
        ucp_worker_destroy(e->worker);
    }
    for (ucx_op *op = e->zombies, *next; op; op = next) {
        next = op->next;
        ucx_op_free(op);
    }
    if (e->ctx)
        ucp_cleanup(e->ctx);
    for (int r = 0; e->addr && r < e->size; r++)
        free(e->addr[r]);
    tr_store_close(e->store);
    tr_store_server_stop(e->server);
    free(e->eps);
    free(e->ep_status);
    free(e->addr);
    free(e->addr_len);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->done_cv);
    pthread_cond_destroy(&e->work_cv);
    free(e);
}
