/* `trident sweep GRID.yaml [--out DIR] [--dry-run] [--cluster PRESET]` */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "launch/args.h"
#include "launch/commands.h"
#include "launch/sweep.h"

static void sweep_usage(FILE *f)
{
    fprintf(f,
            "usage: trident sweep GRID.yaml [options]\n"
            "\n"
            "Run every point of a grid spec (a base config, dotted keys with lists of values,\n"
            "run settings) through the launcher and record what each measured.\n"
            "\n"
            "  --out DIR          where results.csv, results.jsonl, chart.svg and one folder per\n"
            "                     point go (default: runs/sweep-<grid name>)\n"
            "  --dry-run          list the points and why any would be skipped; run nothing\n"
            "  --cluster PRESET   planner preset for the predicted time beside each point\n"
            "                     (default cpu-host: this machine)\n"
            "  -h, --help         this text\n"
            "\n"
            "Grid spec:\n"
            "  base: tiny.yaml                 # relative to the grid file, or inline sections\n"
            "  grid:\n"
            "    parallel.tensor_model_parallel_size: [1, 2, 4]\n"
            "    training.micro_batch_size: [1, 2]\n"
            "  run: {world_size: 8, iterations: 10, warmup_iterations: 2}\n"
            "Exit status: 0 when the sweep ran (failed points are recorded), 2 bad usage or spec.\n");
}

int tr_cmd_sweep(int argc, char **argv)
{
    enum { OUT, CLUSTER, DRY_RUN };
    static const arg_opt options[] = {
        [OUT] = {.name = "--out", .kind = ARG_VALUE},
        [CLUSTER] = {.name = "--cluster", .kind = ARG_VALUE},
        [DRY_RUN] = {.name = "--dry-run", .kind = ARG_FLAG},
        {.name = NULL},
    };
    arg_parser a = {.cmd = "trident sweep", .opts = options, .usage = sweep_usage, .argc = argc,
                 .argv = argv};
    tr_sweep_options o = {.log = stdout};
    const char *v;
    for (int k; (k = args_next(&a, &v)) != ARGS_END;) {
        if (k == ARGS_HELP || k == ARGS_ERROR)
            return k == ARGS_HELP ? 0 : 2;
        if (k == OUT)
            o.out_dir = v;
        else if (k == CLUSTER)
            o.cluster = v;
        else if (k == DRY_RUN)
            o.dry_run = 1;
        else if (o.grid_path)
            return args_error(&a, "more than one grid spec given");
        else
            o.grid_path = v;
    }
    if (!o.grid_path) {
        fprintf(stderr, "trident sweep: no grid spec given\n\n");
        sweep_usage(stderr);
        return 2;
    }
    char out[512];
    if (!o.out_dir) {
        const char *base = strrchr(o.grid_path, '/');
        base = base ? base + 1 : o.grid_path;
        snprintf(out, sizeof out, "runs/sweep-%.*s", (int)strcspn(base, "."), base);
        o.out_dir = out;
    }
    tr_sweep_point *pts = NULL;
    size_t n = 0;
    int rc = tr_sweep_run(&o, &pts, &n);
    if (rc) {
        fprintf(stderr, "trident sweep: %s\n", tr_errmsg());
        return rc == TR_ERR_CONFIG || rc == TR_ERR_INVALID ? 2 : 1;
    }
    size_t ok = 0, skipped = 0, failed = 0, best = n;
    for (size_t i = 0; i < n; i++) {
        if (pts[i].status == TR_POINT_OK) {
            ok++;
            if (best == n || pts[i].tokens_per_s > pts[best].tokens_per_s)
                best = i;
        } else if (pts[i].status == TR_POINT_SKIPPED) {
            skipped++;
        } else if (pts[i].status == TR_POINT_FAILED) {
            failed++;
        }
    }
    if (o.dry_run)
        printf("sweep: %zu points, %zu would be skipped (dry run)\n", n, skipped);
    else {
        printf("sweep: %zu points: %zu ran, %zu skipped, %zu failed; results in %s/results.csv, "
               "chart in %s/chart.svg\n", n, ok, skipped, failed, o.out_dir, o.out_dir);
        if (best < n)
            printf("sweep: best layout: point %zu (dp %d tp %d pp %d micro-batch %d) at %.0f "
                   "tokens/s, %.1f ms/iter\n", best, pts[best].dp, pts[best].tp, pts[best].pp,
                   pts[best].mb, pts[best].tokens_per_s, pts[best].median_ms);
    }
    free(pts);
    return 0;
}
