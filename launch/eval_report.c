/* `trident eval`'s report: text lines or one JSON object of what eval_results holds. */
#include "launch/eval_report.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

static double ratio(double a, double b) { return b > 0 ? a / b : NAN; }

/* A filter's exact_match counts, by name over the files that have it. */
typedef struct {
    const char *name;
    uint64_t targets, exact;
} filter_sums;

/* What the tasks' requests sum to (free with free_sums). */
typedef struct {
    uint64_t requests, ll_requests, ll_tokens, greedy, mc_requests, acc, acc_norm;
    uint64_t gen_requests, gen_tokens, gen_targets, exact; /* generation requests */
    double ll_nll;
    filter_sums *filters;
    int n_filters;
} task_sums;

static void free_sums(task_sums *s) { free(s->filters); }

/* The sums of the filter named `name` in s (added). */
static filter_sums *filter_slot(task_sums *s, const char *name)
{
    for (int k = 0; k < s->n_filters; k++)
        if (!strcmp(s->filters[k].name, name))
            return &s->filters[k];
    s->filters[s->n_filters] = (filter_sums){.name = name};
    return &s->filters[s->n_filters++];
}

/* Of files [first, end). */
static task_sums sum_tasks(const eval_results *res, int first, int end)
{
    task_sums s = {0};
    int most = 0;
    for (int f = first; f < end; f++)
        most += res->files[f].tasks.settings.n_filters;
    s.filters = calloc((size_t)most + 1, sizeof *s.filters); /* (NULL: no filter sums) */
    for (int f = first; f < end; f++) {
        const eval_file *ef = &res->files[f];
        const tr_eval_settings *set = &ef->tasks.settings;
        size_t nf = (size_t)set->n_filters;
        for (size_t i = 0; i < ef->tasks.n; i++) {
            const tr_eval_request *r = &ef->tasks.r[i];
            const double *ll = ef->ll + ef->first[i];
            s.requests++;
            if (r->generate) {
                s.gen_requests++;
                s.gen_tokens += (uint64_t)ef->gen_tokens[i];
                for (size_t k = 0; s.filters && k < nf; k++) {
                    filter_sums *fs = filter_slot(&s, set->filters[k].name);
                    fs->targets += r->target != NULL;
                    fs->exact += r->target && ef->exact[i * (nf + 1) + 1 + k];
                }
                if (r->target) {
                    s.gen_targets++;
                    s.exact += ef->exact[i * (nf + 1)];
                }
            } else if (r->label < 0) {
                s.ll_requests++;
                s.ll_tokens += (uint64_t)r->n_cont[0];
                s.ll_nll -= ll[0];
                s.greedy += ef->greedy[ef->first[i]];
            } else {
                s.mc_requests++;
                s.acc += tr_eval_argmax(ll, r->chars, r->n_choices, 0) == r->label;
                s.acc_norm += tr_eval_argmax(ll, r->chars, r->n_choices, 1) == r->label;
            }
        }
    }
    return s;
}

/* "WHAT: N streams, ... bits/byte" of perplexity sums p (bytes 0: a dataset's samples). */
static void print_ppl_text(const char *what, const tr_eval_sums *p, int streams, uint64_t bytes)
{
    double mean = ratio(p->nll, (double)p->tokens);
    printf("%s: %llu %s, %llu tokens in %llu windows: nll %.4f/token, perplexity %.4f", what,
           (unsigned long long)p->streams, streams ? "streams" : "samples",
           (unsigned long long)p->tokens, (unsigned long long)p->windows, mean, exp(mean));
    if (streams)
        printf(", %.4f bits/byte", ratio(p->nll, (double)bytes * log(2.0)));
    printf("\n");
}

static void print_tasks_text(const char *what, const task_sums *s)
{
    double mean = ratio(s->ll_nll, (double)s->ll_tokens);
    if (s->ll_requests)
        printf("%sloglikelihood: %llu requests, %llu tokens: greedy accuracy %.4f, nll "
               "%.4f/token, perplexity %.4f\n", what, (unsigned long long)s->ll_requests,
               (unsigned long long)s->ll_tokens, ratio((double)s->greedy, (double)s->ll_requests),
               mean, exp(mean));
    if (s->mc_requests)
        printf("%smultiple choice: %llu requests: acc %.4f, acc_norm %.4f\n", what,
               (unsigned long long)s->mc_requests, ratio((double)s->acc, (double)s->mc_requests),
               ratio((double)s->acc_norm, (double)s->mc_requests));
    if (s->gen_requests) {
        printf("%sgenerate_until: %llu requests, %llu tokens generated", what,
               (unsigned long long)s->gen_requests, (unsigned long long)s->gen_tokens);
        if (s->gen_targets)
            printf(": exact_match %.4f (%llu with a target)",
                   ratio((double)s->exact, (double)s->gen_targets),
                   (unsigned long long)s->gen_targets);
        printf("\n");
        for (int k = 0; k < s->n_filters; k++)
            if (s->filters[k].targets)
                printf("%sgenerate_until, filter %s: exact_match %.4f\n", what,
                       s->filters[k].name,
                       ratio((double)s->filters[k].exact, (double)s->filters[k].targets));
    }
}

void eval_print_text(const eval_options *o, const infer_model *im, int C, int stride,
                     const eval_results *res)
{
    printf("trident eval: iteration %d of %s, context %d", im->iteration, o->dir, C);
    if (o->n_inputs)
        printf(", stride %d", stride);
    printf("\n");
    char what[4200];
    for (int f = 0; f < res->n_files && res->n_files > 1; f++) {
        const eval_file *ef = &res->files[f];
        if (o->n_inputs) {
            snprintf(what, sizeof what, "%s: perplexity", ef->path);
            print_ppl_text(what, &ef->ppl, 1, ef->bytes);
        } else {
            task_sums s = sum_tasks(res, f, f + 1);
            snprintf(what, sizeof what, "%s: ", ef->path);
            print_tasks_text(what, &s);
            free_sums(&s);
        }
    }
    if (res->have_ppl)
        print_ppl_text("perplexity", &res->ppl, o->n_inputs > 0, res->bytes);
    if (o->n_tasks) {
        task_sums s = sum_tasks(res, 0, res->n_files);
        print_tasks_text(res->n_files > 1 ? "all: " : "", &s);
        free_sums(&s);
    }
}

static void json_ppl(tr_json *j, const char *key, const char *path, const tr_eval_sums *p,
                     int streams, uint64_t bytes)
{
    double mean = ratio(p->nll, (double)p->tokens);
    tr_json_object_begin(j, key);
    if (path)
        tr_json_string(j, "path", path);
    tr_json_int(j, "streams", (long long)p->streams);
    tr_json_int(j, "windows", (long long)p->windows);
    tr_json_int(j, "tokens", (long long)p->tokens);
    tr_json_double(j, "nll_sum", p->nll);
    tr_json_double(j, "nll_mean", mean);
    tr_json_double(j, "perplexity", exp(mean));
    if (streams) {
        tr_json_int(j, "bytes", (long long)bytes);
        tr_json_double(j, "bits_per_byte", ratio(p->nll, (double)bytes * log(2.0)));
    } else {
        tr_json_null(j, "bytes");
        tr_json_null(j, "bits_per_byte");
    }
}

/* The summary of task sums s: requests, loglikelihood {...}, multiple_choice {...},
 * generate_until {...}. */
static void json_task_sums(tr_json *j, const task_sums *s)
{
    double mean = ratio(s->ll_nll, (double)s->ll_tokens);
    tr_json_int(j, "requests", (long long)s->requests);
    tr_json_object_begin(j, "loglikelihood");
    tr_json_int(j, "requests", (long long)s->ll_requests);
    tr_json_int(j, "tokens", (long long)s->ll_tokens);
    tr_json_double(j, "greedy_accuracy", ratio((double)s->greedy, (double)s->ll_requests));
    tr_json_double(j, "nll_mean", mean);
    tr_json_double(j, "perplexity", exp(mean));
    tr_json_object_end(j);
    tr_json_object_begin(j, "multiple_choice");
    tr_json_int(j, "requests", (long long)s->mc_requests);
    tr_json_double(j, "acc", ratio((double)s->acc, (double)s->mc_requests));
    tr_json_double(j, "acc_norm", ratio((double)s->acc_norm, (double)s->mc_requests));
    tr_json_object_end(j);
    tr_json_object_begin(j, "generate_until");
    tr_json_int(j, "requests", (long long)s->gen_requests);
    tr_json_int(j, "tokens", (long long)s->gen_tokens);
    tr_json_int(j, "with_target", (long long)s->gen_targets);
    tr_json_double(j, "exact_match", ratio((double)s->exact, (double)s->gen_targets));
    tr_json_object_begin(j, "filters"); /* each filter's, by name */
    for (int k = 0; k < s->n_filters; k++) {
        tr_json_object_begin(j, s->filters[k].name);
        tr_json_int(j, "with_target", (long long)s->filters[k].targets);
        tr_json_double(j, "exact_match",
                       ratio((double)s->filters[k].exact, (double)s->filters[k].targets));
        tr_json_object_end(j);
    }
    tr_json_object_end(j);
    tr_json_object_end(j);
}

static void json_request(tr_json *j, int file, const eval_file *ef, size_t i)
{
    const tr_eval_request *r = &ef->tasks.r[i];
    const double *ll = ef->ll + ef->first[i];
    const unsigned char *g = ef->greedy + ef->first[i];
    tr_json_object_begin(j, NULL);
    tr_json_int(j, "file", file);
    tr_json_int(j, "line", (long long)r->line);
    if (r->generate) {
        tr_json_string(j, "generated", ef->generated[i]);
        tr_json_int(j, "generated_tokens", ef->gen_tokens[i]);
        const tr_eval_settings *set = &ef->tasks.settings;
        size_t nf = (size_t)set->n_filters;
        if (r->target)
            tr_json_bool(j, "exact_match", ef->exact[i * (nf + 1)]);
        if (nf)
            tr_json_object_begin(j, "filtered");
        for (size_t k = 0; k < nf; k++) {
            tr_json_object_begin(j, set->filters[k].name);
            tr_json_string(j, "text", ef->filtered[i * nf + k]);
            if (r->target)
                tr_json_bool(j, "exact_match", ef->exact[i * (nf + 1) + 1 + k]);
            tr_json_object_end(j);
        }
        if (nf)
            tr_json_object_end(j);
        tr_json_object_end(j);
        return;
    }
    tr_json_array_begin(j, "loglikelihood");
    for (int c = 0; c < r->n_choices; c++)
        tr_json_double(j, NULL, ll[c]);
    tr_json_array_end(j);
    tr_json_array_begin(j, "greedy");
    for (int c = 0; c < r->n_choices; c++)
        tr_json_bool(j, NULL, g[c]);
    tr_json_array_end(j);
    tr_json_array_begin(j, "tokens");
    for (int c = 0; c < r->n_choices; c++)
        tr_json_int(j, NULL, r->n_cont[c]);
    tr_json_array_end(j);
    if (r->label >= 0) {
        tr_json_int(j, "label", r->label);
        tr_json_int(j, "pred", tr_eval_argmax(ll, r->chars, r->n_choices, 0));
        tr_json_int(j, "pred_norm", tr_eval_argmax(ll, r->chars, r->n_choices, 1));
    }
    tr_json_object_end(j);
}

void eval_print_json(const eval_options *o, const infer_model *im, int C, int stride,
                     const eval_results *res)
{
    tr_json j;
    tr_json_begin(&j, stdout);
    tr_json_object_begin(&j, NULL);
    tr_json_string(&j, "checkpoint", o->dir);
    tr_json_int(&j, "iteration", im->iteration);
    tr_json_int(&j, "context", C);
    if (o->n_inputs)
        tr_json_int(&j, "stride", stride);
    else
        tr_json_null(&j, "stride");
    if (res->have_ppl) {
        json_ppl(&j, "perplexity", NULL, &res->ppl, o->n_inputs > 0, res->bytes);
        if (o->n_inputs) { /* each file's */
            tr_json_array_begin(&j, "files");
            for (int f = 0; f < res->n_files; f++) {
                json_ppl(&j, NULL, res->files[f].path, &res->files[f].ppl, 1,
                         res->files[f].bytes);
                tr_json_object_end(&j);
            }
            tr_json_array_end(&j);
        }
        tr_json_object_end(&j);
    }
    if (o->n_tasks) {
        task_sums all = sum_tasks(res, 0, res->n_files);
        tr_json_object_begin(&j, "tasks");
        json_task_sums(&j, &all);
        free_sums(&all);
        tr_json_array_begin(&j, "files");
        for (int f = 0; f < res->n_files; f++) {
            task_sums s = sum_tasks(res, f, f + 1);
            tr_json_object_begin(&j, NULL);
            tr_json_string(&j, "path", res->files[f].path);
            json_task_sums(&j, &s);
            free_sums(&s);
            tr_json_object_end(&j);
        }
        tr_json_array_end(&j);
        tr_json_array_begin(&j, "results");
        for (int f = 0; f < res->n_files; f++)
            for (size_t i = 0; i < res->files[f].tasks.n; i++)
                json_request(&j, f, &res->files[f], i);
        tr_json_array_end(&j);
        tr_json_object_end(&j);
    }
    tr_json_object_end(&j);
    putchar('\n');
}
