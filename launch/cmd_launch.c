/* `trident launch --nproc N [--nnodes K --node-rank I --master-addr A --master-port P]
 * [--grace-period S] [--no-prefix] -- COMMAND...`: start N local ranks of COMMAND. */
#include "launch/commands.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
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
            "  --no-prefix          do not prefix output lines with the rank\n"
            "  -h, --help           this text\n"
            "\n"
            "Exit status: 0 when every rank exits 0; else the first failed rank's exit status\n"
            "(128 + signal if it was killed); 2 for bad usage.\n");
}

static int parse_int(const char *flag, const char *text, int min, int max, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (!*text || *end || errno || v < min || v > max) {
        fprintf(stderr, "trident launch: %s needs an integer in [%d, %d], got '%s'\n", flag, min,
                max, text);
        return 2;
    }
    *out = (int)v;
    return 0;
}

int tr_cmd_launch(int argc, char **argv)
{
    tr_launch_options opts = {.nproc = 0, .nnodes = 1};
    int i = 1, rc = 0, have_nproc = 0;
    for (; i < argc && !rc; i++) {
        const char *a = argv[i], *value = NULL;
        if (!strcmp(a, "--")) {
            i++;
            break;
        }
        if (a[0] != '-')
            break; /* the command starts here */
        char flag[32];
        const char *eq = strchr(a, '=');
        if (!strncmp(a, "--", 2) && eq && (size_t)(eq - a) < sizeof flag) {
            memcpy(flag, a, (size_t)(eq - a));
            flag[eq - a] = '\0';
            value = eq + 1;
        } else {
            snprintf(flag, sizeof flag, "%s", a);
        }
        if (!strcmp(flag, "-h") || !strcmp(flag, "--help")) {
            launch_usage(stdout);
            return 0;
        }
        if (!strcmp(flag, "--no-prefix")) {
            opts.no_prefix = 1;
            continue;
        }
        static const char *with_value[] = {"--nproc",       "--nnodes",      "--node-rank",
                                           "--master-addr", "--master-port", "--grace-period"};
        int known = 0;
        for (size_t k = 0; k < sizeof with_value / sizeof with_value[0]; k++)
            known |= !strcmp(flag, with_value[k]);
        if (!known) {
            fprintf(stderr, "trident launch: unknown option '%s' (see trident launch --help)\n",
                    a);
            return 2;
        }
        if (!value) {
            if (i + 1 >= argc) {
                fprintf(stderr, "trident launch: %s needs a value\n", flag);
                return 2;
            }
            value = argv[++i];
        }
        if (!strcmp(flag, "--nproc")) {
            rc = parse_int(flag, value, 1, 4096, &opts.nproc);
            have_nproc = 1;
        } else if (!strcmp(flag, "--nnodes")) {
            rc = parse_int(flag, value, 1, INT_MAX, &opts.nnodes);
        } else if (!strcmp(flag, "--node-rank")) {
            rc = parse_int(flag, value, 0, INT_MAX, &opts.node_rank);
        } else if (!strcmp(flag, "--master-port")) {
            rc = parse_int(flag, value, 1, 65535, &opts.master_port);
        } else if (!strcmp(flag, "--master-addr")) {
            opts.master_addr = value;
        } else {
            char *end;
            errno = 0;
            opts.grace_s = strtod(value, &end);
            if (!*value || *end || errno || !(opts.grace_s > 0 && opts.grace_s <= 3600)) {
                fprintf(stderr,
                        "trident launch: --grace-period needs seconds in (0, 3600], got '%s'\n",
                        value);
                rc = 2;
            }
        }
    }
    if (rc)
        return rc;
    if (!have_nproc) {
        fprintf(stderr, "trident launch: --nproc is required (see trident launch --help)\n");
        return 2;
    }
    if (i >= argc) {
        fprintf(stderr, "trident launch: no command given (trident launch --nproc N -- "
                        "COMMAND...)\n");
        return 2;
    }
    int exit_code = 1;
    rc = tr_launch_local(&opts, argv + i, &exit_code);
    if (rc) {
        fprintf(stderr, "trident launch: %s\n", tr_errmsg());
        return rc == TR_ERR_CONFIG ? 2 : 1;
    }
    return exit_code;
}
