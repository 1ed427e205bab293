/* `trident train CONFIG.yaml [--set k=v]... [--run-dir DIR]` */
#include "launch/commands.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
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
            "  --quiet                  no per-iteration lines\n"
            "  -h, --help               this text\n"
            "\n"
            "Each iteration prints one line (iteration, loss, lr, grad norm, ms/iter, tokens/s,\n"
            "GFLOP/s, eta) and appends a JSON object to RUN_DIR/metrics.jsonl.\n"
            "Exit status: 0 success, 1 runtime failure, 2 bad usage, config or input.\n");
}

static int exit_code_for(int rc) { return rc == TR_ERR_CONFIG || rc == TR_ERR_INVALID ? 2 : 1; }

int tr_cmd_train(int argc, char **argv)
{
    const char *config_path = NULL, *run_dir = NULL;
    const char **overrides = calloc((size_t)argc + 1, sizeof *overrides);
    int n_overrides = 0, quiet = 0;
    if (!overrides)
        return 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            train_usage(stdout);
            free(overrides);
            return 0;
        } else if (!strcmp(a, "--set") || !strcmp(a, "--run-dir")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "trident train: %s needs a value\n", a);
                free(overrides);
                return 2;
            }
            if (!strcmp(a, "--set"))
                overrides[n_overrides++] = argv[++i];
            else
                run_dir = argv[++i];
        } else if (!strncmp(a, "--set=", 6)) {
            overrides[n_overrides++] = a + 6;
        } else if (!strncmp(a, "--run-dir=", 10)) {
            run_dir = a + 10;
        } else if (!strcmp(a, "--quiet")) {
            quiet = 1;
        } else if (a[0] == '-') {
            fprintf(stderr, "trident train: unknown option '%s' (see trident train --help)\n", a);
            free(overrides);
            return 2;
        } else if (!config_path) {
            config_path = a;
        } else {
            fprintf(stderr, "trident train: more than one config given ('%s' and '%s')\n",
                    config_path, a);
            free(overrides);
            return 2;
        }
    }
    if (!config_path) {
        fprintf(stderr, "trident train: no config given\n\n");
        train_usage(stderr);
        free(overrides);
        return 2;
    }
    tr_config cfg;
    int rc = tr_config_load(config_path, overrides, n_overrides, &cfg);
    free(overrides);
    if (rc) {
        fprintf(stderr, "trident train: %s\n", tr_errmsg());
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
    tr_train_options opts = {.run_dir = run_dir, .quiet = quiet};
    rc = tr_train_run(&cfg, &opts);
    tr_config_free(&cfg);
    if (rc) {
        fprintf(stderr, "trident train: %s\n", tr_errmsg());
        return exit_code_for(rc);
    }
    return 0;
}
