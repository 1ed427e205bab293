/* A job where one rank hangs: run by test_hang.py through `trident launch`.
 *   hang_check --hang-rank R --timeout S [--marker M] [--ordered]
 * Every rank joins the world and a "tp" split (pairs of ranks); rank R then sleeps instead of
 * entering the collective while the others run allreduce on "tp" and then on the world. A
 * waiting rank must fail after S seconds with TR_ERR_TIMEOUT and a message naming itself,
 * the group, the operation and the peer; it prints the message and exits 3. --marker only
 * tags the command line so the test can look for leftover processes. --ordered: the "tp"
 * allreduce is ordered (tr_comm_order_after + tr_comm_flush) instead of blocking. */
#include "comm/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    int hang_rank = 1;
    int ordered = 0;
    tr_comm_config cfg = tr_comm_config_default();
    cfg.timeout_s = 3;
    for (int i = 1; i + 1 < argc; i++) {
        if (!strcmp(argv[i], "--hang-rank"))
            hang_rank = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--timeout"))
            cfg.timeout_s = atof(argv[++i]);
        else if (!strcmp(argv[i], "--marker"))
            ++i;
    }
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--ordered"))
            ordered = 1;
    tr_comm *world = NULL, *tp = NULL;
    if (tr_comm_init_world(&cfg, &world) ||
        tr_comm_split(world, tr_comm_rank(world) / 2, 0, "tp", &tp)) {
        fprintf(stderr, "hang_check: setup failed: %s\n", tr_errmsg());
        return 2;
    }
    if (tr_comm_rank(world) == hang_rank) {
        for (;;)
            pause(); /* never enters the collective; the launcher must stop us */
    }
    float x[1000] = {0};
    int rc;
    if (ordered) { /* the failure comes back from order_after (UCX waits) or the flush */
        tr_comm_request *req = NULL;
        rc = tr_comm_allreduce_async(tp, x, x, 1000, TR_COMM_F32, TR_COMM_SUM, &req);
        if (!rc)
            rc = tr_comm_order_after(&req, NULL);
        if (!rc)
            rc = tr_comm_flush(tp);
    } else {
        rc = tr_comm_allreduce(tp, x, x, 1000, TR_COMM_F32, TR_COMM_SUM);
    }
    if (!rc)
        rc = tr_comm_allreduce(world, x, x, 1000, TR_COMM_F32, TR_COMM_SUM);
    if (rc) {
        fprintf(stderr, "hang_check: error %d: %s\n", rc, tr_errmsg());
        tr_comm_destroy(tp);
        tr_comm_destroy(world);
        return rc == TR_ERR_TIMEOUT ? 3 : 4;
    }
    fprintf(stderr, "hang_check: unexpectedly completed\n");
    return 0;
}
