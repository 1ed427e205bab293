/* `trident plan CONFIG [--json] [--search] [--world-size W] [--set k=v]... [--tokens N]
 * [--calibrate METRICS.jsonl] [--top K]`: memory and step time of the config's layout on the
 * config's cluster, or the best layouts for it (plan/). */
#include "launch/commands.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "launch/args.h"
#include "plan/plan.h"
#include "yaml/config.h"

#define MAX_SETS 64

static void plan_usage(FILE *f)
{
    fprintf(f,
            "usage: trident plan CONFIG.yaml [options]\n"
            "\n"
            "Predict, without starting any rank, whether the config's layout fits in memory on\n"
            "the cluster its `cluster` section describes and how fast a step runs: memory per\n"
            "GPU with a breakdown, step time, tokens/s, TFLOP/s per GPU (hardware and model\n"
            "FLOPs), MFU and the time to train. Formulas: plan/plan.h.\n"
            "\n"
            "options:\n"
            "  --json               one JSON object instead of the text report\n"
            "  --search             rank every (TP, PP, DP, micro-batch, recompute, ZeRO-1)\n"
            "                       layout that fits by tokens/s; say why the others do not\n"
            "  --top K              layouts listed by --search (default 10)\n"
            "  --world-size W       ranks to plan for (default cluster.nodes x gpus_per_node)\n"
            "  --set KEY=VALUE      override a config key (repeatable), e.g.\n"
            "                       --set parallel.tensor_model_parallel_size=1\n"
            "                       --set cluster.preset=h100-80gb\n"
            "  --tokens N           tokens to train for the time estimate (e.g. 366e9, 366B,\n"
            "                       1.2T; default training.train_iters x global batch x seq)\n"
            "  --calibrate FILE     a run's metrics.jsonl (`trident train --run-dir`): take the\n"
            "                       cluster's gemm_efficiency from its measured ms_per_iter\n"
            "                       (same config and world size), then predict with it\n"
            "  -h, --help           this text\n"
            "\n"
            "Exit status: 0 a prediction was made (fitting or not), 1 runtime failure,\n"
            "2 bad usage or bad config.\n");
}

static int parse_tokens(const char *text, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    double scale = 1;
    if (end != text && *end) {
        if (!strcmp(end, "K") || !strcmp(end, "k"))
            scale = 1e3;
        else if (!strcmp(end, "M"))
            scale = 1e6;
        else if (!strcmp(end, "B") || !strcmp(end, "G"))
            scale = 1e9;
        else if (!strcmp(end, "T"))
            scale = 1e12;
        else
            end = (char *)text;
        if (end != text)
            end += strlen(end);
    }
    if (end == text || *end || errno || !isfinite(v) || v <= 0) {
        fprintf(stderr, "trident plan: --tokens needs a positive number (e.g. 366e9 or 366B), "
                        "got '%s'\n", text);
        return 2;
    }
    *out = v * scale;
    return 0;
}

/* Bad config, bad input file or unreadable file: 2; anything else: 1. */
static int exit_code(int rc)
{
    return rc == TR_ERR_CONFIG || rc == TR_ERR_INVALID || rc == TR_ERR_IO ? 2 : 1;
}

int tr_cmd_plan(int argc, char **argv)
{
    enum { JSON, SEARCH, TOP, WORLD, SET, TOKENS, CALIBRATE };
    static const arg_opt options[] = {
        [JSON] = {"--json", ARG_FLAG},
        [SEARCH] = {"--search", ARG_FLAG},
        [TOP] = {"--top", ARG_VALUE},
        [WORLD] = {"--world-size", ARG_VALUE},
        [SET] = {"--set", ARG_VALUE},
        [TOKENS] = {"--tokens", ARG_VALUE},
        [CALIBRATE] = {"--calibrate", ARG_VALUE},
        {NULL},
    };
    arg_parser a = {.cmd = "trident plan", .opts = options, .usage = plan_usage,
                 .unknown = "unknown option or missing value: '%s' (see trident plan --help)",
                 .argc = argc, .argv = argv};
    const char *path = NULL, *calibrate = NULL, *sets[MAX_SETS], *v;
    int n_sets = 0, json = 0, search = 0, top = 10, world = 0, rc = 0, o;
    double tokens = 0;
    while (!rc && (o = args_next(&a, &v)) != ARGS_END) {
        if (o == ARGS_HELP || o == ARGS_ERROR)
            return o == ARGS_HELP ? 0 : 2;
        if (o == JSON)
            json = 1;
        else if (o == SEARCH)
            search = 1;
        else if (o == TOP || o == WORLD)
            rc = args_int(&a, options[o].name, v, 1, INT_MAX, o == TOP ? &top : &world);
        else if (o == SET && n_sets == MAX_SETS)
            rc = args_error(&a, "at most %d --set options", MAX_SETS);
        else if (o == SET)
            sets[n_sets++] = v;
        else if (o == TOKENS)
            rc = parse_tokens(v, &tokens);
        else if (o == CALIBRATE)
            calibrate = v;
        else if (path)
            rc = args_error(&a, "one config file only (got '%s' and '%s')", path, v);
        else
            path = v;
    }
    if (rc)
        return rc;
    if (!path) {
        plan_usage(stderr);
        return 2;
    }
    tr_config cfg;
    rc = tr_config_load(path, sets, n_sets, &cfg);
    if (rc) {
        fprintf(stderr, "trident plan: %s\n", tr_errmsg());
        return exit_code(rc);
    }
    tr_plan_cluster cluster;
    rc = tr_plan_cluster_from_config(&cfg, &cluster);
    if (!rc && calibrate) {
        double measured, eff;
        int n_points = 0;
        rc = tr_plan_read_measured_step(calibrate, &measured, &n_points);
        if (!rc)
            rc = tr_plan_calibrate(&cfg, world, &cluster, measured, &eff);
        if (!rc) {
            fprintf(json ? stderr : stdout,
                    "calibrated: measured %.4g ms per iteration (median of %d) -> "
                    "gemm_efficiency %.4g (was %.4g)\n",
                    measured * 1e3, n_points, eff, cluster.gemm_efficiency);
            cluster.gemm_efficiency = eff;
            cluster.overridden = 1;
        }
    }
    if (rc) {
        fprintf(stderr, "trident plan: %s\n", tr_errmsg());
        tr_config_free(&cfg);
        return exit_code(rc);
    }
    if (search) {
        tr_plan_search_result s;
        rc = tr_plan_search(&cfg, world, &cluster, &s);
        if (!rc) {
            if (json)
                tr_plan_write_search_json(stdout, &cfg, &cluster, &s, top);
            else
                tr_plan_print_search(stdout, &cfg, &cluster, &s, top);
            tr_plan_search_free(&s);
        }
    } else {
        tr_plan_result *r = tr_alloc(sizeof *r, "plan result");
        rc = r ? TR_OK : TR_ERR_NOMEM;
        if (!rc) {
            int w = 0;
            tr_plan_layout L;
            rc = tr_plan_world(&cluster, world, &w);
            if (!rc)
                rc = tr_plan_layout_from_config(&cfg, w, &L);
            if (!rc)
                rc = tr_plan_evaluate(&cfg, &L, w, &cluster, 1, tokens, r);
        }
        if (!rc) {
            if (json)
                tr_plan_write_json(stdout, &cfg, &cluster, r);
            else
                tr_plan_print(stdout, &cfg, &cluster, r);
        }
        tr_free(r);
    }
    if (rc)
        fprintf(stderr, "trident plan: %s\n", tr_errmsg());
    tr_config_free(&cfg);
    return rc ? exit_code(rc) : 0;
}
