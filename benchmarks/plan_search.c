/* benchmarks/plan_search: how long `trident plan --search` takes (issue 22's target: 10,000
 * layouts under 2 s). Searches, each timed in wall and CPU seconds (a busy machine stretches
 * wall time; CPU time is what the search costs):
 *   bloom      configs/bloom-176b.yaml's model on its 384 GPUs (the shipped example);
 *   gpt-10k    a 120-layer, 120-head GPT (h 15360, ~340B) on 2880 A100s, global batch 11520:
 *              10,641 layouts, 1,570 that fit, pipelines of up to 120 stages and 11520
 *              micro-batches (the worst case the search meets: long pipeline simulations);
 *   gpt-8k     the same at global batch 3840 (8,169 layouts).
 * Prints one line per search and the layouts per CPU second; --json for one object.
 *   plan_search [--repeat N] [--json]   (run from the repository root: it reads configs/) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/core.h"
#include "plan/plan.h"
#include "yaml/config.h"

static const char gpt_yaml[] =
    "model: {num_layers: 120, hidden_size: 15360, num_attention_heads: 120, seq_length: 2048,\n"
    "        max_position_embeddings: 2048, vocab_size: 51200}\n"
    "parallel: {tensor_model_parallel_size: 8, pipeline_model_parallel_size: 15}\n"
    "training: {micro_batch_size: 1, global_batch_size: 11520, train_iters: 1, lr: 1.0e-4,\n"
    "           recompute: full, precision: bf16}\n"
    "data: {data_path: x}\n"
    "cluster: {preset: a100-80gb, nodes: 360}\n";

static double cpu_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

typedef struct {
    const char *name;
    int layouts, fit;
    double wall, cpu;
} timing;

static int run(const char *name, const tr_config *cfg, int repeat, timing *out)
{
    tr_plan_cluster c;
    int rc = tr_plan_cluster_from_config(cfg, &c);
    if (rc)
        return rc;
    out->name = name;
    out->wall = out->cpu = 1e30;
    for (int r = 0; r < repeat; r++) {
        tr_plan_search_result s;
        double w0 = tr_now(), c0 = cpu_now();
        rc = tr_plan_search(cfg, 0, &c, &s);
        double w = tr_now() - w0, cp = cpu_now() - c0;
        if (rc)
            return rc;
        out->layouts = s.n_candidates;
        out->fit = s.n_fit;
        if (w < out->wall)
            out->wall = w;
        if (cp < out->cpu)
            out->cpu = cp;
        tr_plan_search_free(&s);
    }
    return TR_OK;
}

int main(int argc, char **argv)
{
    int repeat = 3, json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--repeat") && i + 1 < argc)
            repeat = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--json"))
            json = 1;
        else {
            fprintf(stderr, "usage: plan_search [--repeat N] [--json]\n");
            return 2;
        }
    }
    if (repeat < 1)
        repeat = 1;
    timing t[3];
    tr_config cfg;
    int rc = tr_config_load("configs/bloom-176b.yaml", NULL, 0, &cfg);
    if (!rc) {
        rc = run("bloom", &cfg, repeat, &t[0]);
        tr_config_free(&cfg);
    }
    if (!rc && !(rc = tr_config_load_string(gpt_yaml, strlen(gpt_yaml), "gpt-10k", NULL, 0,
                                            &cfg))) {
        rc = run("gpt-10k", &cfg, repeat, &t[1]);
        tr_config_free(&cfg);
    }
    const char *gb3840[] = {"training.global_batch_size=3840"};
    if (!rc && !(rc = tr_config_load_string(gpt_yaml, strlen(gpt_yaml), "gpt-8k", gb3840, 1,
                                            &cfg))) {
        rc = run("gpt-8k", &cfg, repeat, &t[2]);
        tr_config_free(&cfg);
    }
    if (rc) {
        fprintf(stderr, "plan_search: %s\n", tr_errmsg());
        return 1;
    }
    if (json) {
        printf("{\"repeat\": %d, \"searches\": [", repeat);
        for (int i = 0; i < 3; i++)
            printf("%s{\"name\": \"%s\", \"layouts\": %d, \"fit\": %d, \"wall_s\": %.4f, "
                   "\"cpu_s\": %.4f}",
                   i ? ", " : "", t[i].name, t[i].layouts, t[i].fit, t[i].wall, t[i].cpu);
        printf("]}\n");
        return 0;
    }
    printf("%-8s %8s %6s %8s %8s %14s\n", "search", "layouts", "fit", "wall s", "CPU s",
           "layouts/CPU s");
    for (int i = 0; i < 3; i++)
        printf("%-8s %8d %6d %8.3f %8.3f %14.0f\n", t[i].name, t[i].layouts, t[i].fit,
               t[i].wall, t[i].cpu, t[i].layouts / t[i].cpu);
    printf("(best of %d; target: 10,000 layouts under 2 s)\n", repeat);
    return 0;
}
