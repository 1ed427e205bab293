/* tests/cuda: the NCCL backend's host-side decisions, on any machine: the group's mode from
 * its ranks' devices (one GPU each, or ranks sharing one and staging through the host), the
 * route of each operation, and the communicator backend's choice from tr_comm_config. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "comm/nccl/nccl.h"
#include "core/core.h"

/* ---------------------------------------------------------------- NCCL decisions */

static tr_nccl_device_id gpu(uint8_t u, const char *bus, const char *host)
{
    tr_nccl_device_id d;
    memset(&d, 0, sizeof d);
    if (u)
        memset(d.uuid, u, sizeof d.uuid);
    snprintf(d.bus_id, sizeof d.bus_id, "%s", bus);
    snprintf(d.host, sizeof d.host, "%s", host);
    return d;
}

static void test_nccl_group_mode(void **state)
{
    (void)state;
    char why[256];
    tr_nccl_device_id ids[4] = {gpu(1, "0000:41:00.0", "node7"), gpu(2, "0000:42:00.0", "node7"),
                                gpu(3, "0000:41:00.0", "node8"), gpu(4, "0000:43:00.0", "node7")};
    assert_int_equal(tr_nccl_group_mode(ids, 1, 0, why, sizeof why), TR_NCCL_MODE_LOCAL);
    assert_string_equal(why, "a group of one: device copies only");
    assert_int_equal(tr_nccl_group_mode(ids, 1, 1, why, sizeof why), TR_NCCL_MODE_LOCAL);
    assert_int_equal(tr_nccl_group_mode(ids, 4, 0, why, sizeof why), TR_NCCL_MODE_NCCL);
    assert_string_equal(why, "4 ranks on 4 distinct GPUs");
    assert_int_equal(tr_nccl_group_mode(ids, 4, 1, why, sizeof why), TR_NCCL_MODE_STAGED);
    assert_string_equal(why, "TRIDENT_NCCL_STAGE=1: staging through host memory");
    /* two ranks on one GPU (same UUID) */
    ids[3] = ids[1];
    assert_int_equal(tr_nccl_group_mode(ids, 4, 0, why, sizeof why), TR_NCCL_MODE_STAGED);
    assert_string_equal(why, "ranks 1 and 3 share GPU 0000:42:00.0 on node7: staging through "
                             "host memory (NCCL needs one GPU per rank)");
    assert_int_equal(tr_nccl_group_mode(ids, 3, 0, NULL, 0), TR_NCCL_MODE_NCCL);
    /* UUIDs unknown: the same bus id on different hosts is two GPUs, on one host one */
    tr_nccl_device_id anon[3] = {gpu(0, "0000:41:00.0", "a"), gpu(0, "0000:41:00.0", "b"),
                                 gpu(0, "0000:41:00.0", "a")};
    assert_int_equal(tr_nccl_group_mode(anon, 2, 0, NULL, 0), TR_NCCL_MODE_NCCL);
    assert_int_equal(tr_nccl_group_mode(anon, 3, 0, why, sizeof why), TR_NCCL_MODE_STAGED);
    assert_string_equal(why, "ranks 0 and 2 share GPU 0000:41:00.0 on a: staging through host "
                             "memory (NCCL needs one GPU per rank)");
    /* eight ranks on one GPU: the (DP=2, TP=2, PP=2) test layout */
    tr_nccl_device_id one[8];
    for (int i = 0; i < 8; i++)
        one[i] = gpu(9, "0000:01:00.0", "box");
    assert_int_equal(tr_nccl_group_mode(one, 8, 0, NULL, 0), TR_NCCL_MODE_STAGED);
    assert_int_equal(tr_nccl_group_mode(one, 1, 0, NULL, 0), TR_NCCL_MODE_LOCAL);
    assert_string_equal(tr_nccl_mode_name(TR_NCCL_MODE_STAGED), "staged");
    assert_string_equal(tr_nccl_mode_name(TR_NCCL_MODE_NCCL), "nccl");
    assert_string_equal(tr_nccl_mode_name(TR_NCCL_MODE_LOCAL), "local");
}

static void test_nccl_route(void **state)
{
    (void)state;
    const tr_nccl_memkind N = TR_NCCL_MEM_NONE, H = TR_NCCL_MEM_HOST, D = TR_NCCL_MEM_DEVICE;
    tr_nccl_route r = TR_NCCL_ROUTE_NCCL;
    /* nothing to move: host (every member agrees) */
    assert_int_equal(tr_nccl_choose_route(TR_NCCL_MODE_NCCL, D, D, 0, "dp", "allreduce", &r), 0);
    assert_int_equal(r, TR_NCCL_ROUTE_HOST);
    assert_int_equal(tr_nccl_choose_route(TR_NCCL_MODE_NCCL, N, N, 0, "dp", "barrier", &r), 0);
    assert_int_equal(r, TR_NCCL_ROUTE_HOST);
    /* host buffers: UCX in every mode */
    for (int m = 0; m < 3; m++) {
        assert_int_equal(tr_nccl_choose_route((tr_nccl_mode)m, H, H, 8, "w", "allreduce", &r), 0);
        assert_int_equal(r, TR_NCCL_ROUTE_HOST);
        assert_int_equal(tr_nccl_choose_route((tr_nccl_mode)m, H, N, 8, "w", "send", &r), 0);
        assert_int_equal(r, TR_NCCL_ROUTE_HOST);
    }
    /* device buffers: by mode */
    assert_int_equal(tr_nccl_choose_route(TR_NCCL_MODE_NCCL, D, D, 8, "tp", "allreduce", &r), 0);
    assert_int_equal(r, TR_NCCL_ROUTE_NCCL);
    assert_int_equal(tr_nccl_choose_route(TR_NCCL_MODE_STAGED, D, D, 8, "tp", "allreduce", &r),
                     0);
    assert_int_equal(r, TR_NCCL_ROUTE_STAGED);
    assert_int_equal(tr_nccl_choose_route(TR_NCCL_MODE_LOCAL, D, D, 8, "tp", "allreduce", &r), 0);
    assert_int_equal(r, TR_NCCL_ROUTE_LOCAL);
    assert_int_equal(tr_nccl_choose_route(TR_NCCL_MODE_NCCL, N, D, 8, "pp", "recv", &r), 0);
    assert_int_equal(r, TR_NCCL_ROUTE_NCCL);
    /* reduce_scatter whose block here is empty: the send buffer decides */
    assert_int_equal(tr_nccl_choose_route(TR_NCCL_MODE_STAGED, D, N, 8, "dp", "reduce_scatter",
                                          &r),
                     0);
    assert_int_equal(r, TR_NCCL_ROUTE_STAGED);
    /* mixed: an error naming the group and the operation */
    assert_int_equal(tr_nccl_choose_route(TR_NCCL_MODE_NCCL, D, H, 8, "dp", "allreduce", &r),
                     TR_ERR_INVALID);
    assert_string_equal(tr_errmsg(), "comm 'dp': allreduce: the send buffer is in device memory "
                                     "but the receive buffer in host memory; both must be in "
                                     "the same place");
    assert_int_equal(tr_nccl_choose_route(TR_NCCL_MODE_STAGED, H, D, 4, "tp", "allgather", &r),
                     TR_ERR_INVALID);
    assert_string_equal(tr_errmsg(), "comm 'tp': allgather: the send buffer is in host memory "
                                     "but the receive buffer in device memory; both must be in "
                                     "the same place");
}

/* Which operations tr_comm_order_after leaves to the stream: collectives whose completion
 * event exists when posted (NCCL, LOCAL); the host waits for staged and host routes, P2P
 * (started later, in one ncclGroup) and barriers. */
static void test_nccl_route_ordered(void **state)
{
    (void)state;
    for (int k = 0; k < TR_COMM_NOPKINDS; k++) {
        tr_comm_opkind kind = (tr_comm_opkind)k;
        int coll = kind == TR_COMM_OP_ALLREDUCE || kind == TR_COMM_OP_REDUCE_SCATTER ||
                   kind == TR_COMM_OP_ALLGATHER || kind == TR_COMM_OP_BROADCAST;
        assert_int_equal(tr_nccl_route_ordered(TR_NCCL_ROUTE_NCCL, kind), coll);
        assert_int_equal(tr_nccl_route_ordered(TR_NCCL_ROUTE_LOCAL, kind), coll);
        assert_int_equal(tr_nccl_route_ordered(TR_NCCL_ROUTE_STAGED, kind), 0);
        assert_int_equal(tr_nccl_route_ordered(TR_NCCL_ROUTE_HOST, kind), 0);
    }
}

/* The communicator backend from tr_comm_config.backend (chosen by comm's front end), in a
 * one-rank world. */
static void test_comm_backend_choice(void **state)
{
    (void)state;
    unsetenv("WORLD_SIZE"), unsetenv("RANK"), unsetenv("MASTER_ADDR"), unsetenv("MASTER_PORT");
    tr_comm *w = NULL;
    tr_comm_config cfg = tr_comm_config_default();
    assert_int_equal(cfg.backend, TR_COMM_BACKEND_UCX);
    cfg.backend = TR_COMM_NBACKENDS;
    assert_int_equal(tr_comm_init_world(&cfg, &w), TR_ERR_CONFIG);
    assert_null(w);
    assert_string_equal(tr_errmsg(), "comm: unknown backend 2 (expected TR_COMM_BACKEND_UCX or "
                                     "TR_COMM_BACKEND_NCCL)");
    cfg.backend = TR_COMM_BACKEND_NCCL;
    int rc = tr_comm_init_world(&cfg, &w);
#ifdef TR_HAVE_CUDA
    if (rc) { /* no GPU here */
        assert_int_equal(rc, TR_ERR_CONFIG);
        assert_non_null(
            strstr(tr_errmsg(), "comm: the NCCL backend needs a GPU: no CUDA device: "));
        assert_null(w);
    } else {
        assert_string_equal(tr_comm_backend(w), "nccl");
        assert_int_equal(tr_comm_nccl_mode(w), TR_NCCL_MODE_LOCAL);
        assert_null(tr_comm_store(w, NULL)); /* the NCCL backend lends no store */
        tr_comm_destroy(w);
    }
#else
    assert_int_equal(rc, TR_ERR_CONFIG);
    assert_null(w);
    assert_string_equal(tr_errmsg(), "comm: the nccl backend is not in this build (it needs "
                                     "CUDA: -Dcuda=enabled)");
#endif
    cfg.backend = TR_COMM_BACKEND_UCX;
    assert_int_equal(tr_comm_init_world(&cfg, &w), TR_OK);
    assert_string_equal(tr_comm_backend(w), "ucx");
    const char *session = "x";
    assert_null(tr_comm_store(w, &session)); /* one rank, no MASTER_ADDR: no store */
    assert_null(session);
    tr_comm_destroy(w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nccl_group_mode),
        cmocka_unit_test(test_nccl_route),
        cmocka_unit_test(test_nccl_route_ordered),
        cmocka_unit_test(test_comm_backend_choice),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
