/* `trident launch --nproc N [--nnodes K --node-rank I --master-addr A --master-port P]
 * [--grace-period S] [--no-prefix] -- COMMAND...`: start N local ranks of COMMAND. */
#include "launch/commands.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "launch/args.h"
#include "launch/launch.h"

static void launch_usage(FILE *f)
{
    fprintf(f,
            "usage: trident launch --nproc N [options] [--] COMMAND [ARGS...]\n"
            "\n"
            "Start N local ranks of COMMAND with torchrun's environment: RANK, WORLD_SIZE,\n"
            "LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, plus TRIDENT_JOB_TOKEN,\n"
            "OPENBLAS_NUM_THREADS and OMP_NUM_THREADS (cores / N; values you set are kept).\n"
            "Each output line of rank r is printed as \"[rR] line\" on the same stream.\n"
            "If a rank fails (non-zero exit or a signal) or the launcher gets SIGINT/SIGTERM,\n"
            "every rank gets SIGTERM, then SIGKILL after the grace period.\n"
            "\n"
            "options:\n"
            "  --nproc N            ranks on this node (required)\n"
            "  --nnodes K           nodes in the job (default 1); start one launcher per node\n"
            "  --node-rank I        this node's index, 0..K-1 (default 0); RANK = I*N + local\n"
            "  --master-addr A      address of node 0 (default 127.0.0.1; required if K > 1)\n"
            "  --master-port P      store port (default: a free port on one node, else 29500)\n"
            "  --grace-period S     seconds between SIGTERM and SIGKILL when stopping (default 3)\n"
            "  --signal-grace-period S\n"
            "                       the same when the launcher itself got SIGINT/SIGTERM (ranks\n"
            "                       with training.exit_signal_handler save first; default: the\n"
            "                       grace period; trident train --nproc uses 300)\n"
            "  --max-restarts K     after a rank fails, stop the others and start the whole\n"
            "                       group again, up to K times (torchrun's meaning; each\n"
            "                       attempt gets a fresh port and job token; single node).\n"
            "                       Failures are seen at once (no --monitor-interval needed)\n"
            "  --no-prefix          do not prefix output lines with the rank\n"
            "  -h, --help           this text\n"
            "\n"
            "Exit status: 0 when every rank exits 0 (after a signal too, when every rank then\n"
            "exits 0 on its own); else the first failed rank's exit status\n"
            "(128 + signal if it was killed); 2 for bad usage.\n");
}

int tr_cmd_launch(int argc, char **argv)
{
    enum { NPROC, NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT, GRACE, SIGNAL_GRACE, RESTARTS,
           NO_PREFIX };
    static const arg_opt options[] = {
        [NPROC] = {.name = "--nproc", .kind = ARG_VALUE},
        [NNODES] = {.name = "--nnodes", .kind = ARG_VALUE},
        [NODE_RANK] = {.name = "--node-rank", .kind = ARG_VALUE},
        [MASTER_ADDR] = {.name = "--master-addr", .kind = ARG_VALUE},
        [MASTER_PORT] = {.name = "--master-port", .kind = ARG_VALUE},
        [GRACE] = {.name = "--grace-period", .kind = ARG_VALUE},
        [SIGNAL_GRACE] = {.name = "--signal-grace-period", .kind = ARG_VALUE},
        [RESTARTS] = {.name = "--max-restarts", .kind = ARG_VALUE},
        [NO_PREFIX] = {.name = "--no-prefix", .kind = ARG_FLAG},
        {.name = NULL},
    };
    arg_parser a = {.cmd = "trident launch", .opts = options, .usage = launch_usage,
                 .stop_at_command = 1, .argc = argc, .argv = argv};
    tr_launch_options opts = {.nproc = 0, .nnodes = 1};
    int rc = 0, have_nproc = 0, max_restarts = 0, o;
    const char *v;
    while (!rc && (o = args_next(&a, &v)) != ARGS_END) {
        if (o == ARGS_HELP || o == ARGS_ERROR)
            return o == ARGS_HELP ? 0 : 2;
        if (o == NPROC) {
            rc = args_int(&a, "--nproc", v, 1, 4096, &opts.nproc);
            have_nproc = 1;
        } else if (o == NNODES) {
            rc = args_int(&a, "--nnodes", v, 1, INT_MAX, &opts.nnodes);
        } else if (o == NODE_RANK) {
            rc = args_int(&a, "--node-rank", v, 0, INT_MAX, &opts.node_rank);
        } else if (o == MASTER_PORT) {
            rc = args_int(&a, "--master-port", v, 1, 65535, &opts.master_port);
        } else if (o == MASTER_ADDR) {
            opts.master_addr = v;
        } else if (o == RESTARTS) {
            rc = args_int(&a, "--max-restarts", v, 0, 1000, &max_restarts);
        } else if (o == NO_PREFIX) {
            opts.no_prefix = 1;
        } else {
            char *end;
            double *dst = o == GRACE ? &opts.grace_s : &opts.signal_grace_s;
            errno = 0;
            *dst = strtod(v, &end);
            if (!*v || *end || errno || !(*dst > 0 && *dst <= 3600))
                rc = args_error(&a, "%s needs seconds in (0, 3600], got '%s'", options[o].name, v);
        }
    }
    if (rc)
        return rc;
    if (!have_nproc)
        return args_error(&a, "--nproc is required (see trident launch --help)");
    if (a.next >= argc)
        return args_error(&a, "no command given (trident launch --nproc N -- COMMAND...)");
    int exit_code = 1;
    rc = tr_launch_local_restarting(&opts, argv + a.next, max_restarts, &exit_code);
    if (rc) {
        fprintf(stderr, "trident launch: %s\n", tr_errmsg());
        return rc == TR_ERR_CONFIG ? 2 : 1;
    }
    return exit_code;
}
