/* trident — the command-line entry point: dispatches to a subcommand. */
#include "launch/commands.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: trident COMMAND [ARGS]\n"
            "\n"
            "Trains GPT-style language models with data x tensor x pipeline parallelism.\n"
            "\n"
            "commands:\n"
            "  train CONFIG.yaml [--set k=v]... [--run-dir DIR] [--nproc N]\n"
            "                     train a model from one YAML config\n"
            "  generate CHECKPOINT_DIR --prompt TEXT [--temperature T] [--nproc N]\n"
            "                     continue a prompt with a trained model (key/value cache)\n"
            "  eval CHECKPOINT_DIR (--input FILE... | --data-path PREFIX | --tasks FILE.jsonl)\n"
            "                     perplexity, loglikelihood and multiple-choice accuracy\n"
            "  convert --from hf|--to hf --input DIR --output DIR\n"
            "                     GPT-2, Llama, Qwen2, Bloom, GPT-NeoX, Falcon, Phi from /\n"
            "                     to Hugging Face\n"
            "  preprocess --input FILE... --output-prefix PREFIX\n"
            "                     turn text files into a Megatron indexed dataset\n"
            "  launch --nproc N [...] -- COMMAND...\n"
            "                     start N local ranks (torchrun-style environment)\n"
            "  topo --world-size W --tp T --pp P [--json]\n"
            "                     print the process groups of a layout\n"
            "  schedule --pp P --microbatches M [--schedule KIND] [--json]\n"
            "                     print a pipeline schedule\n"
            "  plan CONFIG.yaml [--search] [--json]\n"
            "                     predict memory and step time of a layout on a cluster\n"
            "  sweep GRID.yaml [--dry-run]\n"
            "                     run every layout of a grid spec, write CSV/JSONL/SVG\n"
            "\n"
            "`trident COMMAND --help` describes each command's options.\n"
            "TRIDENT_LOG_LEVEL=debug|info|warning|error sets which log messages are printed\n"
            "(default info; the ranks a command starts inherit it).\n");
}

/* OpenBLAS 0.3.21 picks its Haswell kernels on AVX-512 CPUs unless told otherwise (about
 * 1.7x slower GEMMs). The choice is made when the library loads, so set the variable and
 * re-execute once; a value the user set is left alone. */
static void prefer_avx512_blas_kernels(char **argv)
{
    if (getenv("OPENBLAS_CORETYPE") || !__builtin_cpu_supports("avx512f"))
        return;
    setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
    execv("/proc/self/exe", argv); /* on failure, carry on with the default kernels */
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1], *level = getenv("TRIDENT_LOG_LEVEL");
    if (level && *level && tr_log_set_level_name(level)) {
        fprintf(stderr, "trident: TRIDENT_LOG_LEVEL: %s\n", tr_errmsg());
        return 2;
    }
    if (!strcmp(cmd, "train") || !strcmp(cmd, "generate") || !strcmp(cmd, "eval"))
        prefer_avx512_blas_kernels(argv);
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    static const struct {
        const char *name;
        int (*fn)(int, char **);
    } commands[] = {
        {"train", tr_cmd_train},   {"preprocess", tr_cmd_preprocess}, {"launch", tr_cmd_launch},
        {"topo", tr_cmd_topo},     {"schedule", tr_cmd_schedule}, {"plan", tr_cmd_plan},
        {"sweep", tr_cmd_sweep},   {"generate", tr_cmd_generate}, {"convert", tr_cmd_convert},
        {"eval", tr_cmd_eval},
    };
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(cmd, commands[i].name))
            return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "trident: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return 2;
}
