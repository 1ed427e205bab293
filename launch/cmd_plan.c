/* `trident plan CONFIG [--json] [--search] [--explain [--svg FILE]] [--world-size W]
 * [--set k=v]... [--tokens N] [--calibrate METRICS.jsonl] [--gemm-table FILE] [--top K]`:
 * memory and step time of the config's layout on the config's cluster, where they go, or the
 * best layouts for it; `trident plan --references`: the planner against published runs
 * (plan/). */
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
            "       trident plan --references\n"
            "\n"
            "Predict, without starting any rank, whether the config's layout fits in memory on\n"
            "the cluster its `cluster` section describes and how fast a step runs: memory per\n"
            "GPU with a breakdown, step time, tokens/s, TFLOP/s per GPU (hardware and model\n"
            "FLOPs), MFU and the time to train. Formulas: plan/plan.h.\n"
            "\n"
            "options:\n"
            "  --json               one JSON object instead of the text report\n"
            "  --search             rank every (TP, PP, DP, CP, EP, micro-batch, recompute,\n"
            "                       ZeRO) layout that fits by tokens/s; say why the others\n"
            "                       do not\n"
            "  --top K              layouts listed by --search (default 10)\n"
            "  --world-size W       ranks to plan for (default cluster.nodes x gpus_per_node)\n"
            "  --set KEY=VALUE      override a config key (repeatable), e.g.\n"
            "                       --set parallel.tensor_model_parallel_size=1\n"
            "                       --set cluster.preset=h100-80gb\n"
            "  --tokens N           tokens to train for the time estimate (e.g. 366e9, 366B,\n"
            "                       1.2T; default training.train_iters x global batch x seq, or\n"
            "                       training.train_samples x seq)\n"
            "  --explain            where the step goes on every stage (compute by kind,\n"
            "                       exposed communication by group, bubble, optimizer) and\n"
            "                       where the memory goes; parts add up to the step time\n"
            "  --svg FILE           with --explain: the same as stacked bars in an SVG\n"
            "  --calibrate FILE     a run's metrics.jsonl (`trident train --run-dir`): take the\n"
            "                       cluster's gemm_efficiency from its measured ms_per_iter\n"
            "                       (same config and world size), then predict with it\n"
            "  --dropout            time the layout as trained with dropout (Megatron's\n"
            "                       default 0.1; trident trains without): its kernels' traffic\n"
            "  --gemm-table FILE    measured GEMM times (benchmarks/gemm_shapes output) that\n"
            "                       correct the GEMM model instead of the preset's table\n"
            "  --references         no config: predict every published run the planner is\n"
            "                       calibrated against and print the errors\n"
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

/* --explain: the prediction, then where its time and memory go (text or JSON), and the SVG. */
static int run_explain(const tr_config *cfg, const tr_plan_cluster *cluster, int world_size,
                       double tokens, int dropout, int json, const char *svg)
{
    tr_plan_result *r = tr_alloc(sizeof *r, "plan result");
    if (!r)
        return TR_ERR_NOMEM;
    tr_plan_explain e = {0};
    int w = 0;
    tr_plan_layout L;
    int rc = tr_plan_world(cluster, world_size, &w);
    if (!rc)
        rc = tr_plan_layout_from_config(cfg, w, &L);
    L.dropout = dropout;
    if (!rc)
        rc = tr_plan_explain_layout(cfg, &L, w, cluster, tokens, r, &e);
    if (!rc) {
        if (json) {
            tr_plan_write_explain_json(stdout, cfg, cluster, r, &e);
        } else {
            tr_plan_print(stdout, cfg, cluster, r);
            tr_plan_print_explain(stdout, cluster, r, &e);
        }
    }
    if (!rc && svg) {
        FILE *f = fopen(svg, "w");
        if (!f) {
            rc = tr_fail(TR_ERR_IO, "cannot write %s: %s", svg, strerror(errno));
        } else {
            rc = tr_plan_write_explain_svg(f, cluster, r, &e, cfg->source);
            if (fclose(f) && !rc)
                rc = tr_fail(TR_ERR_IO, "writing %s failed: %s", svg, strerror(errno));
            if (!rc && !json)
                printf("chart: %s\n", svg);
        }
    }
    tr_plan_explain_free(&e);
    tr_free(r);
    return rc;
}

/* Bad config, bad input file or unreadable file: 2; anything else: 1. */
static int exit_code(int rc)
{
    return rc == TR_ERR_CONFIG || rc == TR_ERR_INVALID || rc == TR_ERR_IO ? 2 : 1;
}

int tr_cmd_plan(int argc, char **argv)
{
    enum { JSON, SEARCH, TOP, WORLD, SET, TOKENS, CALIBRATE, EXPLAIN, SVG, GEMM_TABLE,
           REFERENCES, DROPOUT };
    static const arg_opt options[] = {
        [JSON] = {.name = "--json", .kind = ARG_FLAG},
        [SEARCH] = {.name = "--search", .kind = ARG_FLAG},
        [TOP] = {.name = "--top", .kind = ARG_VALUE},
        [WORLD] = {.name = "--world-size", .kind = ARG_VALUE},
        [SET] = {.name = "--set", .kind = ARG_VALUE},
        [TOKENS] = {.name = "--tokens", .kind = ARG_VALUE},
        [CALIBRATE] = {.name = "--calibrate", .kind = ARG_VALUE},
        [EXPLAIN] = {.name = "--explain", .kind = ARG_FLAG},
        [SVG] = {.name = "--svg", .kind = ARG_VALUE},
        [GEMM_TABLE] = {.name = "--gemm-table", .kind = ARG_VALUE},
        [REFERENCES] = {.name = "--references", .kind = ARG_FLAG},
        [DROPOUT] = {.name = "--dropout", .kind = ARG_FLAG},
        {.name = NULL},
    };
    arg_parser a = {.cmd = "trident plan", .opts = options, .usage = plan_usage,
                 .unknown = "unknown option or missing value: '%s' (see trident plan --help)",
                 .argc = argc, .argv = argv};
    const char *path = NULL, *calibrate = NULL, *svg = NULL, *gemm_table = NULL, *sets[MAX_SETS],
               *v;
    int n_sets = 0, json = 0, search = 0, top = 10, world = 0, rc = 0, o, explain = 0,
        references = 0, dropout = 0;
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
        else if (o == EXPLAIN)
            explain = 1;
        else if (o == SVG)
            svg = v;
        else if (o == GEMM_TABLE)
            gemm_table = v;
        else if (o == REFERENCES)
            references = 1;
        else if (o == DROPOUT)
            dropout = 1;
        else if (path)
            rc = args_error(&a, "one config file only (got '%s' and '%s')", path, v);
        else
            path = v;
    }
    if (rc)
        return rc;
    if (references) {
        if (path) {
            fprintf(stderr, "trident plan: --references takes no config (got '%s')\n", path);
            return 2;
        }
        rc = tr_plan_print_references(stdout);
        if (rc)
            fprintf(stderr, "trident plan: %s\n", tr_errmsg());
        return rc ? exit_code(rc) : 0;
    }
    if (!path) {
        plan_usage(stderr);
        return 2;
    }
    if (svg && !explain) {
        fprintf(stderr, "trident plan: --svg needs --explain\n");
        return 2;
    }
    if (dropout && search) {
        fprintf(stderr, "trident plan: --dropout applies to one layout, not to --search\n");
        return 2;
    }
    if (explain && search) {
        fprintf(stderr, "trident plan: --explain and --search do not go together (explain one "
                        "layout: the config's, or set it with --set)\n");
        return 2;
    }
    tr_config cfg;
    rc = tr_config_load(path, sets, n_sets, &cfg);
    if (rc) {
        fprintf(stderr, "trident plan: %s\n", tr_errmsg());
        return exit_code(rc);
    }
    tr_plan_cluster cluster;
    tr_plan_gemm_row *table = NULL;
    int n_table = 0;
    rc = tr_plan_cluster_from_config(&cfg, &cluster);
    if (!rc && gemm_table) {
        rc = tr_plan_gemm_table_read(gemm_table, &table, &n_table);
        if (!rc) {
            cluster.gemm_table = table;
            cluster.n_gemm_table = n_table;
        }
    }
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
        free(table);
        return exit_code(rc);
    }
    if (explain) {
        rc = run_explain(&cfg, &cluster, world, tokens, dropout, json, svg);
    } else if (search) {
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
            L.dropout = dropout;
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
    free(table);
    return rc ? exit_code(rc) : 0;
}
