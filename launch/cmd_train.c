/* `trident train CONFIG.yaml [--set k=v]... [--run-dir DIR]` */
#include "launch/commands.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "core/core.h"
#include "launch/args.h"
#include "launch/launch.h"
#include "train/train.h"
#include "yaml/config.h"

static void train_usage(FILE *f)
{
    fprintf(f,
            "usage: trident train CONFIG.yaml [options]\n"
            "\n"
            "Train the model described by CONFIG.yaml (sections model, parallel, training,\n"
            "data, logging; Megatron-LM's key names).\n"
            "\n"
            "options:\n"
            "  --set SECTION.KEY=VALUE  override one config key; VALUE is parsed as YAML\n"
            "                           (e.g. --set training.lr=3e-4 --set parallel.pipeline_layers=[1,3]);\n"
            "                           may be repeated\n"
            "  --run-dir DIR            where metrics.jsonl and config.yaml go\n"
            "                           (default: runs/<config name>)\n"
            "  --nproc N                start N local ranks (short for\n"
            "                           trident launch --nproc N -- trident train ...)\n"
            "  --max-restarts K         with --nproc: after a rank fails, start every rank\n"
            "                           again, up to K times (torchrun's meaning); with\n"
            "                           checkpoint.load = checkpoint.save each attempt resumes\n"
            "                           from the latest checkpoint\n"
            "  --quiet                  no per-iteration lines\n"
            "  --dump-grads DIR         write iteration 1's reduced gradients (per rank, with\n"
            "                           shard layout) to DIR, for layout-equivalence checks\n"
            "  --dump-grads-iters N     with --dump-grads: iterations 2..N too, into DIR/iter_K\n"
            "  -h, --help               this text\n"
            "\n"
            "Each iteration prints one line (iteration, loss, lr, grad norm, ms/iter, tokens/s,\n"
            "GFLOP/s, eta) and appends a JSON object to RUN_DIR/metrics.jsonl.\n"
            "Exit status: 0 success, 1 runtime failure, 2 bad usage, config or input.\n");
}

static int exit_code_for(int rc) { return rc == TR_ERR_CONFIG || rc == TR_ERR_INVALID ? 2 : 1; }

int tr_cmd_train(int argc, char **argv)
{
    enum { SET, RUN_DIR, NPROC, MAX_RESTARTS, DUMP_GRADS, DUMP_GRADS_ITERS, QUIET };
    static const arg_opt options[] = {
        [SET] = {.name = "--set", .kind = ARG_VALUE},
        [RUN_DIR] = {.name = "--run-dir", .kind = ARG_VALUE},
        [NPROC] = {.name = "--nproc", .kind = ARG_VALUE},
        [MAX_RESTARTS] = {.name = "--max-restarts", .kind = ARG_VALUE},
        [DUMP_GRADS] = {.name = "--dump-grads", .kind = ARG_VALUE},
        [DUMP_GRADS_ITERS] = {.name = "--dump-grads-iters", .kind = ARG_VALUE},
        [QUIET] = {.name = "--quiet", .kind = ARG_FLAG},
        {.name = NULL},
    };
    arg_parser a = {.cmd = "trident train", .opts = options, .usage = train_usage, .argc = argc,
                 .argv = argv};
    const char *config_path = NULL, *run_dir = NULL, *dump_grads = NULL, *v;
    const char **overrides = calloc((size_t)argc + 1, sizeof *overrides);
    int n_overrides = 0, quiet = 0, nproc = 0, max_restarts = 0, dump_grads_iters = 1, rc = 0, o;
    if (!overrides)
        return 1;
    while (!rc && (o = args_next(&a, &v)) != ARGS_END) {
        if (o == ARGS_HELP || o == ARGS_ERROR) {
            free(overrides);
            return o == ARGS_HELP ? 0 : 2;
        }
        if (o == SET)
            overrides[n_overrides++] = v;
        else if (o == RUN_DIR)
            run_dir = v;
        else if (o == NPROC)
            rc = args_int(&a, "--nproc", v, 1, 4096, &nproc);
        else if (o == MAX_RESTARTS)
            rc = args_int(&a, "--max-restarts", v, 0, 1000, &max_restarts);
        else if (o == DUMP_GRADS)
            dump_grads = v;
        else if (o == DUMP_GRADS_ITERS)
            rc = args_int(&a, "--dump-grads-iters", v, 1, 1000000, &dump_grads_iters);
        else if (o == QUIET)
            quiet = 1;
        else if (config_path)
            rc = args_error(&a, "more than one config given ('%s' and '%s')", config_path, v);
        else
            config_path = v;
    }
    if (!rc && !config_path) {
        fprintf(stderr, "trident train: no config given\n\n");
        train_usage(stderr);
        rc = 2;
    }
    if (rc) {
        free(overrides);
        return rc;
    }
    if (max_restarts > 0 && nproc == 0) {
        free(overrides);
        return args_error(&a, "--max-restarts needs --nproc N (a launcher to restart the ranks)");
    }
    if (nproc > 0) {
        free(overrides);
        return run_as_local_ranks("train", nproc, max_restarts, argc, argv);
    }
    if (adopt_scheduler_identity("trident train")) {
        free(overrides);
        return 2;
    }
    tr_config cfg;
    rc = tr_config_load(config_path, overrides, n_overrides, &cfg);
    free(overrides);
    if (rc) {
        fprintf(stderr, "trident train: %s\n", tr_errmsg());
        return 2;
    }
    /* logging.level, unless TRIDENT_LOG_LEVEL (applied in main) chose for this invocation */
    const char *env_level = getenv("TRIDENT_LOG_LEVEL");
    if ((!env_level || !*env_level) && tr_log_set_level_name(cfg.logging.level)) {
        fprintf(stderr, "trident train: %s\n", tr_errmsg());
        tr_config_free(&cfg);
        return 2;
    }
    char default_dir[512];
    if (!run_dir) {
        const char *base = strrchr(config_path, '/');
        base = base ? base + 1 : config_path;
        size_t len = strcspn(base, ".");
        snprintf(default_dir, sizeof default_dir, "runs/%.*s", (int)len, base);
        run_dir = default_dir;
    }
    tr_train_options opts = {.run_dir = run_dir, .quiet = quiet, .dump_grads_dir = dump_grads,
                             .dump_grads_iters = dump_grads_iters};
    rc = tr_train_run(&cfg, &opts);
    tr_config_free(&cfg);
    if (rc) {
        fprintf(stderr, "trident train: %s\n", tr_errmsg());
        return exit_code_for(rc);
    }
    return 0;
}
