/* launch/args.h — the one option parser of the `trident` subcommands. Each cmd_*.c lists its
 * options in a table and walks its command line with args_next(), which knows
 *   --flag VALUE and --flag=VALUE; flags that take no value (--json=1 is an error); options
 *   that take the words after them up to the next option (--input a b c);
 *   -h / --help (the command's usage on stdout);
 * and prints, prefixed with the command's name, the messages for an unknown option, a
 * missing value and a value given to a flag. An argument is an option when it starts with
 * '-' and is not "-" alone. Exit status of every usage error: 2. */
#ifndef TR_LAUNCH_ARGS_H
#define TR_LAUNCH_ARGS_H

#include <stdio.h>

#include "comm/comm.h"
#include "core/core.h"
#include "model/gpt.h"
#include "tokenizer/tokenizer.h"
#include "yaml/config.h"

typedef enum {
    ARG_FLAG,   /* no value */
    ARG_VALUE,  /* one value: the next word, whatever it is, or the text after '=' */
    ARG_VALUES, /* the next words up to the next option (at least one), or one after '=' */
} arg_kind;

typedef struct {
    const char *name; /* "--tp" */
    arg_kind kind;
    const char *what; /* ARG_VALUES: one value, for "--input needs at least one file" */
} arg_opt;

typedef struct {
    /* set by the command */
    const char *cmd;         /* "trident topo": the start of every message */
    const arg_opt *opts;  /* ended by {NULL} */
    void (*usage)(FILE *f);  /* printed to stdout for -h / --help */
    const char *unknown;     /* message for an unknown option, a printf format given the
                                argument; NULL: "unknown option '%s' (see CMD --help)" */
    int stop_at_command;     /* the first argument that is not an option, or "--", ends the
                                options: what follows is a command to run (trident launch) */
    int argc;                /* the subcommand's arguments; argv[0], its name, is skipped */
    char **argv;
    /* the parser's */
    int next;                     /* index of the next argument to read */
    const arg_opt *values_of; /* the ARG_VALUES option still taking words */
} arg_parser;

enum {
    ARGS_END = -1,        /* no more options; with stop_at_command, argv[next] is the command */
    ARGS_POSITIONAL = -2, /* *value is an argument that is not an option */
    ARGS_HELP = -3,       /* -h or --help: the usage is printed; exit 0 */
    ARGS_ERROR = -4,      /* the message is printed; exit 2 */
};

/* The next item of the command line: the index in opts of an option, with *value its value
 * (NULL for a flag; a ARG_VALUES option comes back once per value), or a TR_ARGS_* code. */
TR_MUST_CHECK int args_next(arg_parser *a, const char **value);

/* "CMD: MESSAGE" on stderr; returns 2, the exit status of bad usage. */
int args_error(const arg_parser *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* 1 when text is a whole decimal integer in [min, max] (stored in *out), else 0. */
TR_MUST_CHECK int args_parse_int(const char *text, int min, int max, int *out);

/* args_parse_int, or the message "FLAG needs an integer in [MIN, MAX], got 'TEXT'"
 * (">= MIN" when max is INT_MAX; "FLAG needs an integer (got 'TEXT')" when any int will do)
 * and 2. Returns 0 on success. */
TR_MUST_CHECK int args_int(const arg_parser *a, const char *flag, const char *text, int min,
                              int max, int *out);

/* ranks.c, for the subcommands that run as ranks (train, generate):
 * `trident SUBCOMMAND ARGS` (ARGS without --nproc and --max-restarts) as nproc local ranks,
 * started again up to max_restarts times after a failure; the exit code. */
int run_as_local_ranks(const char *subcommand, int nproc, int max_restarts, int argc,
                       char **argv);
/* Under Slurm or Open MPI, publish the rank's identity in torchrun's names (RANK, WORLD_SIZE,
 * MASTER_ADDR, ...), which the communicator reads. 0, or 2 after a message prefixed `who`. */
int adopt_scheduler_identity(const char *who);

/* infer_model.c, for the subcommands that run a model for inference (generate, eval): the
 * latest checkpoint of `dir` (a run's checkpoint.save folder; its manifest says the family,
 * or `config`, the run's config, does; a LoRA run's adapters are merged into the config's
 * finetune.load base, W += (alpha / r) B A, on the host) or a Hugging Face GPT-2 / Llama /
 * Mistral / Qwen2 / Bloom folder, whole on one pipeline stage, split by tensor parallelism
 * over the size / data_parallel consecutive ranks of each replica (an HF family folder: no
 * tensor parallelism), on kernel backend `device`. */
typedef struct {
    const char *dir, *config, *device; /* set by the caller */
    int data_parallel;                 /* set by the caller: model replicas (0, 1: one) */
    tr_comm *world, *tp, *dp;          /* tp: this replica's ranks; dp: the replicas' ranks of
                                        * this tp_rank (NULL on one rank) */
    int rank, size, tp_rank, tp_size, dp_rank;
    tr_config cfg; /* the model section as the checkpoint holds it, defaults elsewhere */
    int have_cfg;
    tr_config run; /* `config`, the run's (when given) */
    int have_run;
    const tr_kernels *k;
    tr_gpt_shape shape;
    tr_gpt *g;
    float *params; /* the weights (k's memory), bound to g */
    int iteration; /* the checkpoint's (0 for an HF folder) */
    int family;    /* the HF folder's TR_HF_* (TR_HF_GPT2 for a checkpoint) */
} infer_model;
/* The communicator, config, model and weights: TR_OK, or the error (tr_errmsg) with what
 * was made so far left for infer_model_close. */
TR_MUST_CHECK int infer_model_open(infer_model *im);
void infer_model_close(infer_model *im);
/* PEFT adapters imported by `convert --adapters`: 1 when dir's latest checkpoint is a LoRA
 * run's and dir/base (into base) holds a checkpoint, the base. */
int infer_lora_base(const char *dir, char *base, size_t cap);
/* The config of the LoRA run of checkpoint folder dir from its manifest alone: the model (its
 * family line), finetune.lora's rank, alpha and targets (its lora line) and finetune.load base
 * (NULL: none), every other key at the schema's default. */
TR_MUST_CHECK int infer_lora_run_config(const char *dir, const char *base, tr_config *cfg);
/* The files infer_tokenizer_open found in an HF folder (*tok points into them). */
typedef struct {
    char model[4200], vocab[4200], merges[4200], config[4200];
} infer_tok_paths;
/* The tokenizer of the options in *tok, or, when none is given and `dir` is an HF folder, the
 * folder's: its tokenizer.json (HFTokenizer), else its vocab.json + merges.txt
 * (GPT2BPETokenizer, with the tokenizer_config.json beside them as config_file when there is
 * one: add_bos_token's BOS); in any folder, a tokenizer.model in tiktoken's format
 * (Llama3Tokenizer; also given alone as --tokenizer-model); tok's paths then point into *p and
 * a line on stderr says so;
 * *out NULL when neither (bytes). Returns the exit status: 0, or 1 / 2 after the message
 * prefixed `who`. */
int infer_tokenizer_open(const char *who, const char *dir, tr_tokenizer_files *tok,
                         infer_tok_paths *p, tr_tokenizer **out);
/* The options generate and eval share, by name: --config, --device, --nproc and the
 * tokenizer's (--tokenizer-type, --vocab-file, --merge-file, --tokenizer-model,
 * --tiktoken-pattern, --tiktoken-num-special-tokens) into *config, *device, *nproc and *tok. 1
 * when `flag` is one of them (*rc: --nproc's or the special count's parse status), else 0. */
int infer_shared_option(const arg_parser *a, const char *flag, const char *v, const char **config,
                        const char **device, int *nproc, tr_tokenizer_files *tok, int *rc);

#endif
