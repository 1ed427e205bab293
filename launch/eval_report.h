/* What `trident eval` measured, and how it prints it (launch/eval_report.c): internal to
 * cmd_eval.c and eval_report.c, not part of the contract. */
#ifndef TR_LAUNCH_EVAL_REPORT_H
#define TR_LAUNCH_EVAL_REPORT_H

#include <stddef.h>
#include <stdint.h>

#include "eval/eval.h"
#include "launch/args.h"

typedef struct {
    const char *dir, *config, *device, *data_path, *split, *split_name;
    const char *const *inputs, *const *tasks;
    int n_inputs, n_tasks, context, stride, limit, special, json, data_parallel;
    int part, parts; /* this replica's share of the work: index % parts == part */
    tr_tokenizer_files tok;
    tr_tokenizer *tokenizer;
} eval_options;

/* What one --input or --tasks file gave. */
typedef struct {
    const char *path;
    tr_eval_sums ppl;      /* --input */
    uint64_t bytes;
    tr_eval_tasks tasks;   /* --tasks */
    double *ll;            /* per request, per choice: log-likelihoods and greedy flags */
    unsigned char *greedy;
    size_t *first;         /* request i's choices start at ll[first[i]] */
    size_t n_scores;       /* of ll and greedy: every request's choices */
    char **generated;      /* per request: a generation request's text (else NULL) */
    int *gen_tokens;       /* and the tokens generated */
    /* per generation request with a target, of the file's settings' n filters:
     * exact[i * (n + 1)] its text's exact_match, exact[i * (n + 1) + 1 + f] filter f's;
     * filtered[i * n + f] filter f's text (every generation request) */
    unsigned char *exact;
    char **filtered;
} eval_file;

typedef struct {
    tr_eval_sums ppl;      /* --input (all files) or --data-path */
    int have_ppl;
    uint64_t bytes;        /* --input: the files' sizes */
    eval_file *files;      /* --input or --tasks: each file's */
    int n_files;
} eval_results;

/* The results as text lines (each file's when there are several, then all) or one JSON
 * object, on stdout; C, stride: the context and the stride used. */
void eval_print_text(const eval_options *o, const infer_model *im, int C, int stride,
                     const eval_results *res);
void eval_print_json(const eval_options *o, const infer_model *im, int C, int stride,
                     const eval_results *res);

#endif
