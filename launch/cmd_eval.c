/* `trident eval CHECKPOINT_DIR|HF_DIR (--input FILE... | --data-path PREFIX | --tasks FILE...)`:
 * the perplexity of text or of a dataset, and lm-evaluation-harness-style loglikelihood and
 * multiple-choice requests, with a trained model or a Hugging Face folder (eval/). */
#include "launch/commands.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "data/data.h"
#include "eval/eval.h"
#include "launch/args.h"
#include "launch/eval_report.h"

static void eval_usage(FILE *f)
{
    fprintf(f,
            "usage: trident eval CHECKPOINT_DIR|HF_DIR (--input FILE... | --data-path PREFIX |\n"
            "                    --tasks FILE.jsonl...) [options]\n"
            "\n"
            "How well a model predicts text: the model of CHECKPOINT_DIR's latest checkpoint or\n"
            "of a Hugging Face folder, loaded as trident generate loads it (the same tokenizer,\n"
            "--config, --device and --nproc options; an HF folder's tokenizer.json, else its\n"
            "vocab.json + merges.txt, is used when no tokenizer option is given, else bytes).\n"
            "\n"
            "  --input FILE...      perplexity of text files, each one stream tokenized whole\n"
            "                       (with the tokenizer's template, e.g. Llama's BOS, as\n"
            "                       tokenizer(text) gives), scored in windows of --context\n"
            "                       tokens --stride apart as Hugging Face's perplexity recipe:\n"
            "                       each token once, the tokens of a window before the ones it\n"
            "                       scores read as context; bits per byte of the files too\n"
            "  --data-path PREFIX   perplexity of an indexed dataset (or llm.c shard) as training\n"
            "                       reads it with seq_length = --context: every sample of the\n"
            "                       split, the model reading its first C tokens\n"
            "  --split A,B,C        --data-path: data.split (default 1,0,0: all of it in train)\n"
            "  --split-name NAME    --data-path: train (default), valid or test\n"
            "  --tasks FILE.jsonl...\n"
            "                       lm-evaluation-harness's requests, a JSON object\n"
            "                       a line: {\"context\": S, \"continuation\": S} (its\n"
            "                       log-likelihood; greedy: every token is the argmax, LAMBADA's\n"
            "                       accuracy) or {\"context\": S, \"choices\": [S, ...],\n"
            "                       \"label\": N} (multiple choice: acc, and acc_norm by\n"
            "                       length in characters). A continuation is appended as given\n"
            "                       (\" Paris\"); the context's trailing whitespace moves to its\n"
            "                       front and the ids are encode(context + continuation) past\n"
            "                       encode(context); or {\"context\": S, \"until\": [S, ...],\n"
            "                       \"max_gen_toks\": N, \"target\": S} (generate_until: greedy\n"
            "                       tokens until a stop string, the end-of-document token or N\n"
            "                       (default 256 or half the context), cut before the stop\n"
            "                       strings; exact_match against target, both stripped). A\n"
            "                       first line {\"filter_list\": [...], \"metric_list\":\n"
            "                       [...]} as the harness's task YAML gives its filters (regex,\n"
            "                       take_first, take_first_k, majority_vote, lowercase,\n"
            "                       uppercase, remove_whitespace, map, multi_choice_regex on a\n"
            "                       line's \"choices\"; each scored alone, e.g. GSM8K's\n"
            "                       strict-match), exact_match's options (ignore_case,\n"
            "                       ignore_punctuation, ignore_numbers, regexes_to_ignore) and\n"
            "                       \"repeats\"\n"
            "  --special-tokens     --tasks: encode with the tokenizer's template (e.g. a BOS);\n"
            "                       default without, as lm-evaluation-harness does\n"
            "  --context C          tokens the model reads at once (default: its positions, or\n"
            "                       its sliding window when smaller)\n"
            "  --stride S           --input: windows S tokens apart (default C: no overlap;\n"
            "                       smaller: more context for each scored token, slower)\n"
            "  --limit N            the first N --input files, samples, or requests of each\n"
            "                       --tasks file\n"
            "  --json               one JSON object on stdout (each file's figures and each\n"
            "                       request's scores included)\n"
            "  --data-parallel D    D replicas of the model share the work (windows, samples,\n"
            "                       requests), each over --nproc / D ranks by tensor\n"
            "                       parallelism (default 1: one replica over all ranks); the\n"
            "                       same figures, up to rounding\n"
            "  --tokenizer-type T, --vocab-file F, --merge-file F, --tokenizer-model F,\n"
            "  --tiktoken-pattern P, --tiktoken-num-special-tokens S,\n"
            "  --tiktoken-special-tokens T...,\n"
            "  --config FILE, --device cpu|cuda|cuda-fp32, --nproc N\n"
            "                       as in trident generate\n"
            "  -h, --help           this text\n"
            "\n"
            "Prints the measurements on stdout, each file's and (several) all of them together\n"
            "(natural-log nll per token, perplexity = its exp, bits per byte = nll / ln 2 per\n"
            "byte of the files; acc over all requests), and the time on stderr.\n"
            "Exit status: 0 success, 1 runtime failure, 2 bad usage or input.\n");
}

/* --input: each file one stream. */
static int eval_files(const eval_options *o, tr_evaluator *ev, eval_results *res)
{
    tr_encoder *e = NULL;
    int32_t *ids = NULL;
    size_t cap = 0;
    int rc = o->tokenizer ? tr_encoder_create(o->tokenizer, &e) : TR_OK;
    /* each file as tokenizer(text) gives it, which HF's perplexity recipe scores: with the
     * template (an HFTokenizer's, e.g. Llama's BOS; a GPT2BPETokenizer's tokenizer_config.json
     * add_bos_token, OPT's </s>: one BOS at the start of the stream, as for Llama) */
    int special = o->tokenizer != NULL;
    for (int f = 0; f < o->n_inputs && (!o->limit || f < o->limit) && !rc; f++) {
        char *text = NULL;
        size_t len = 0, n = 0;
        rc = tr_read_file(o->inputs[f], (size_t)1 << 34, "a text file", &text, &len);
        if (!rc)
            rc = tr_eval_encode(e, special, text, len, &ids, &n, &cap);
        free(text);
        eval_file *ef = &res->files[res->n_files++];
        ef->path = o->inputs[f];
        ef->bytes = len;
        if (!rc && (rc = tr_eval_stream(ev, ids, n, o->stride, o->part, o->parts, &ef->ppl)))
            rc = tr_fail_context(rc, "%s", o->inputs[f]);
        res->bytes += len; /* (the sums: gather_results) */
    }
    free(ids);
    tr_encoder_free(e);
    res->have_ppl = 1;
    return rc;
}

/* --data-path: every sample of the split. */
static int eval_dataset(const eval_options *o, int V, tr_evaluator *ev, eval_results *res)
{
    static const char *const names[3] = {"train", "valid", "test"};
    int split = 0;
    while (split < 3 && strcmp(o->split_name, names[split]))
        split++;
    tr_data *d = NULL;
    int C = tr_evaluator_context(ev);
    int rc = tr_data_open(o->data_path, "auto", o->split, C, V, 1234, &d);
    uint64_t n = rc ? 0 : tr_data_num_samples(d, split);
    if (!rc && n == 0)
        rc = tr_fail(TR_ERR_INVALID, "%s: its %s split has no sample of %d + 1 tokens (split "
                     "%s)", o->data_path, names[split], C, o->split);
    if (o->limit && n > (uint64_t)o->limit)
        n = (uint64_t)o->limit;
    int32_t *ids = malloc(((size_t)C + 1) * sizeof *ids);
    double *logp = malloc((size_t)C * sizeof *logp);
    if (!rc && (!ids || !logp))
        rc = tr_fail(TR_ERR_NOMEM, "out of memory");
    for (uint64_t g = (uint64_t)o->part; g < n && !rc; g += (uint64_t)o->parts) {
        if (!(rc = tr_data_sample(d, split, g, ids)))
            rc = tr_eval_score(ev, ids, C + 1, 1, logp, NULL);
        for (int j = 0; !rc && j < C; j++)
            res->ppl.nll -= logp[j];
        res->ppl.tokens += rc ? 0 : (uint64_t)C;
        res->ppl.windows += !rc;
    }
    res->ppl.streams = o->part == 0 ? n : 0; /* (summed over the replicas) */
    res->have_ppl = 1;
    free(ids);
    free(logp);
    tr_data_close(d);
    return rc;
}

/* --tasks: every request's continuations, file by file. */
static int eval_tasks(const eval_options *o, int V, tr_evaluator *ev, eval_results *res)
{
    int rc = TR_OK;
    for (int f = 0; f < o->n_tasks && !rc; f++) {
        eval_file *ef = &res->files[res->n_files++];
        ef->path = o->tasks[f];
        rc = tr_eval_tasks_load(ef->path, o->tokenizer, o->special, V, tr_evaluator_context(ev),
                                (size_t)o->limit, &ef->tasks);
        size_t total = 0;
        if (!rc && !(ef->first = malloc(ef->tasks.n * sizeof *ef->first)))
            rc = tr_fail(TR_ERR_NOMEM, "out of memory");
        for (size_t i = 0; !rc && i < ef->tasks.n; i++) {
            ef->first[i] = total;
            total += (size_t)ef->tasks.r[i].n_choices;
        }
        ef->n_scores = total;
        /* (another replica's requests stay 0 here, summed over the replicas) */
        if (!rc && (!(ef->ll = calloc(total, sizeof *ef->ll)) || !(ef->greedy = calloc(total, 1))))
            rc = tr_fail(TR_ERR_NOMEM, "out of memory");
        if (!rc && (!(ef->generated = calloc(ef->tasks.n + 1, sizeof *ef->generated)) ||
                    !(ef->gen_tokens = calloc(ef->tasks.n + 1, sizeof *ef->gen_tokens))))
            rc = tr_fail(TR_ERR_NOMEM, "out of memory");
        int32_t eod = o->tokenizer ? tr_tokenizer_eod(o->tokenizer) : -1;
        for (size_t i = (size_t)o->part; i < ef->tasks.n && !rc; i += (size_t)o->parts) {
            const tr_eval_request *r = &ef->tasks.r[i];
            rc = r->generate ? tr_eval_generate(ev, o->tokenizer, eod, r, &ef->generated[i],
                                                &ef->gen_tokens[i])
                             : tr_eval_request_score(ev, r, ef->ll + ef->first[i],
                                                     ef->greedy + ef->first[i]);
        }
    }
    return rc;
}

/* v[0, n) summed over the replicas (--data-parallel), on every rank; through the
 * communicator's memory (the device's under NCCL). */
static int sum_over_replicas(const infer_model *im, double *v, size_t n)
{
    if (!im->dp || tr_comm_size(im->dp) == 1 || n == 0)
        return TR_OK;
    double *d = im->k->alloc(n * sizeof *d);
    if (!d)
        return tr_fail(TR_ERR_NOMEM, "out of memory for %zu sums", n);
    im->k->to_device(NULL, d, v, n * sizeof *d);
    int rc = tr_comm_allreduce(im->dp, d, d, n, TR_COMM_F64, TR_COMM_SUM);
    if (!rc)
        im->k->to_host(NULL, v, d, n * sizeof *d);
    im->k->free(d);
    return rc;
}

static int sum_sums(const infer_model *im, tr_eval_sums *s)
{
    double v[4] = {s->nll, (double)s->tokens, (double)s->windows, (double)s->streams};
    int rc = sum_over_replicas(im, v, 4);
    *s = (tr_eval_sums){.nll = v[0], .tokens = (uint64_t)v[1], .windows = (uint64_t)v[2],
                        .streams = (uint64_t)v[3]};
    return rc;
}

/* The bytes of buf[0, n) summed over the replicas (each byte set by one of them), through
 * 32-bit integers. */
static int sum_bytes_over_replicas(const infer_model *im, char *buf, size_t n)
{
    if (!im->dp || tr_comm_size(im->dp) == 1 || n == 0)
        return TR_OK;
    int32_t *h = malloc(n * sizeof *h), *d = im->k->alloc(n * sizeof *d);
    int rc = h && d ? TR_OK : tr_fail(TR_ERR_NOMEM, "out of memory for %zu bytes of text", n);
    for (size_t i = 0; !rc && i < n; i++)
        h[i] = (unsigned char)buf[i];
    if (!rc) {
        im->k->to_device(NULL, d, h, n * sizeof *d);
        rc = tr_comm_allreduce(im->dp, d, d, n, TR_COMM_I32, TR_COMM_SUM);
    }
    if (!rc)
        im->k->to_host(NULL, h, d, n * sizeof *d);
    for (size_t i = 0; !rc && i < n; i++)
        buf[i] = (char)h[i];
    free(h);
    if (d)
        im->k->free(d);
    return rc;
}

/* The generated texts and token counts of file ef, each made by one replica, on every rank
 * in request order: their lengths summed, then their bytes. */
static int gather_generations(const infer_model *im, eval_file *ef)
{
    size_t n = ef->tasks.n, total = 0;
    if (!im->dp || tr_comm_size(im->dp) == 1)
        return TR_OK;
    double *v = calloc(2 * n + 1, sizeof *v);
    if (!v)
        return tr_fail(TR_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        v[2 * i] = ef->generated[i] ? (double)strlen(ef->generated[i]) : 0;
        v[2 * i + 1] = ef->generated[i] ? ef->gen_tokens[i] : 0;
    }
    int rc = sum_over_replicas(im, v, 2 * n);
    for (size_t i = 0; !rc && i < n; i++)
        total += (size_t)v[2 * i];
    char *all = rc ? NULL : calloc(total + 1, 1);
    if (!rc && !all)
        rc = tr_fail(TR_ERR_NOMEM, "out of memory for %zu bytes of text", total);
    for (size_t i = 0, at = 0; !rc && i < n; at += (size_t)v[2 * i], i++)
        if (ef->generated[i])
            memcpy(all + at, ef->generated[i], (size_t)v[2 * i]);
    if (!rc)
        rc = sum_bytes_over_replicas(im, all, total);
    for (size_t i = 0, at = 0; !rc && i < n; at += (size_t)v[2 * i], i++) {
        if (!ef->tasks.r[i].generate)
            continue;
        char *t = malloc((size_t)v[2 * i] + 1);
        if (!t) {
            rc = tr_fail(TR_ERR_NOMEM, "out of memory");
            break;
        }
        memcpy(t, all + at, (size_t)v[2 * i]);
        t[(size_t)v[2 * i]] = '\0';
        free(ef->generated[i]);
        ef->generated[i] = t;
        ef->gen_tokens[i] = (int)v[2 * i + 1];
    }
    free(all);
    free(v);
    return rc;
}

/* Each generation request's exact_match and filtered texts (file ef's settings). */
static int score_generations(eval_file *ef)
{
    const tr_eval_settings *s = &ef->tasks.settings;
    size_t n = ef->tasks.n, nf = (size_t)s->n_filters;
    if (!(ef->exact = calloc(n * (nf + 1) + 1, 1)) ||
        !(ef->filtered = calloc(n * nf + 1, sizeof *ef->filtered)))
        return tr_fail(TR_ERR_NOMEM, "out of memory");
    int rc = TR_OK, equal;
    for (size_t i = 0; !rc && i < n; i++) {
        const tr_eval_request *r = &ef->tasks.r[i];
        if (!r->generate)
            continue;
        if (r->target && !(rc = tr_eval_exact_match(s, ef->generated[i], r->target, &equal)))
            ef->exact[i * (nf + 1)] = (unsigned char)equal;
        for (size_t f = 0; !rc && f < nf; f++) {
            rc = tr_eval_filter_apply(&s->filters[f], r, ef->generated[i],
                                      &ef->filtered[i * nf + f]);
            if (!rc && r->target &&
                !(rc = tr_eval_exact_match(s, ef->filtered[i * nf + f], r->target, &equal)))
                ef->exact[i * (nf + 1) + 1 + f] = (unsigned char)equal;
        }
        if (rc)
            rc = tr_fail_context(rc, "%s:%llu", ef->path, (unsigned long long)r->line);
    }
    return rc;
}

/* Every replica's share of the results added up. */
static int gather_results(const infer_model *im, eval_results *res)
{
    int rc = TR_OK;
    if (res->have_ppl && !res->n_files)
        rc = sum_sums(im, &res->ppl);
    for (int f = 0; f < res->n_files && !rc; f++) {
        eval_file *ef = &res->files[f];
        if (res->have_ppl) {
            rc = sum_sums(im, &ef->ppl);
            continue;
        }
        size_t total = ef->n_scores;
        double *g = malloc((total ? total : 1) * sizeof *g);
        if (!g)
            return tr_fail(TR_ERR_NOMEM, "out of memory");
        for (size_t i = 0; i < total; i++)
            g[i] = ef->greedy[i];
        if (!(rc = sum_over_replicas(im, ef->ll, total)) && !(rc = sum_over_replicas(im, g, total)))
            for (size_t i = 0; i < total; i++)
                ef->greedy[i] = g[i] > 0.5;
        free(g);
        if (!rc)
            rc = gather_generations(im, ef);
        if (!rc)
            rc = score_generations(ef);
    }
    if (res->have_ppl && res->n_files) { /* the totals of the files' sums */
        res->ppl = (tr_eval_sums){0};
        for (int f = 0; f < res->n_files; f++) {
            res->ppl.nll += res->files[f].ppl.nll;
            res->ppl.tokens += res->files[f].ppl.tokens;
            res->ppl.windows += res->files[f].ppl.windows;
            res->ppl.streams += res->files[f].ppl.streams;
        }
    }
    return rc;
}

static int run_eval(const eval_options *o)
{
    infer_model im = {.dir = o->dir, .config = o->config, .device = o->device,
                      .data_parallel = o->data_parallel};
    tr_evaluator *ev = NULL;
    eval_results res = {0};
    double t0 = tr_now();
    int rc = infer_model_open(&im);
    int V = im.shape.V, C = o->context, stride = o->stride;
    if (!rc && !C)
        C = tr_model_longest_seq(&im.cfg.model);
    if (!rc && !stride)
        stride = C;
    if (!rc && stride > C)
        rc = tr_fail(TR_ERR_INVALID, "--stride %d is more than the context of %d tokens", stride,
                     C);
    if (!rc && o->tokenizer && tr_tokenizer_vocab_size(o->tokenizer) > V)
        rc = tr_fail(TR_ERR_INVALID, "the tokenizer's %d ids do not fit the model's vocabulary of "
                     "%d (the checkpoint was trained with another tokenizer?)",
                     tr_tokenizer_vocab_size(o->tokenizer), V);
    if (!rc)
        rc = tr_evaluator_create(im.g, C, &ev);
    eval_options with_stride = *o; /* and this replica's share */
    with_stride.stride = stride;
    with_stride.part = im.dp_rank;
    with_stride.parts = o->data_parallel > 1 ? o->data_parallel : 1;
    int n_files = o->n_inputs + o->n_tasks;
    if (!rc && n_files && !(res.files = calloc((size_t)n_files, sizeof *res.files)))
        rc = tr_fail(TR_ERR_NOMEM, "out of memory");
    double t1 = tr_now();
    if (!rc && o->n_inputs)
        rc = eval_files(&with_stride, ev, &res);
    else if (!rc && o->data_path)
        rc = eval_dataset(&with_stride, V, ev, &res);
    else if (!rc)
        rc = eval_tasks(&with_stride, V, ev, &res);
    if (!rc)
        rc = gather_results(&im, &res);
    if (!rc && im.rank == 0) {
        if (o->json)
            eval_print_json(o, &im, C, stride, &res);
        else
            eval_print_text(o, &im, C, stride, &res);
        fflush(stdout);
        fprintf(stderr, "trident eval: %d replica%s of %d tensor-parallel rank%s, loaded in "
                "%.1f s, evaluated in %.1f s\n", im.size / im.tp_size,
                im.size > im.tp_size ? "s" : "",
                im.tp_size, im.tp_size > 1 ? "s" : "", t1 - t0, tr_now() - t1);
    }
    tr_evaluator_free(ev);
    for (int f = 0; f < res.n_files; f++) {
        eval_file *ef = &res.files[f];
        size_t n_filtered = ef->tasks.n * (size_t)ef->tasks.settings.n_filters;
        for (size_t i = 0; ef->generated && i < ef->tasks.n; i++)
            free(ef->generated[i]);
        for (size_t i = 0; ef->filtered && i < n_filtered; i++)
            free(ef->filtered[i]);
        tr_eval_tasks_free(&ef->tasks);
        free(ef->ll);
        free(ef->greedy);
        free(ef->first);
        free(ef->generated);
        free(ef->gen_tokens);
        free(ef->filtered);
        free(ef->exact);
    }
    free(res.files);
    infer_model_close(&im);
    return rc;
}

int tr_cmd_eval(int argc, char **argv)
{
    enum { INPUT, DATA, SPLIT, SPLIT_NAME, TASKS, SPECIAL, CONTEXT, STRIDE, LIMIT, JSON, DEVICE,
           NPROC, TOK_TYPE, VOCAB, MERGES, TOK_MODEL, CONFIG, DATA_PARALLEL, TIK_PATTERN,
           TIK_NUM, TIK_SPECIALS };
    static const arg_opt options[] = {
        [INPUT] = {.name = "--input", .kind = ARG_VALUES, .what = "text file"},
        [DATA] = {.name = "--data-path", .kind = ARG_VALUE},
        [SPLIT] = {.name = "--split", .kind = ARG_VALUE},
        [SPLIT_NAME] = {.name = "--split-name", .kind = ARG_VALUE},
        [TASKS] = {.name = "--tasks", .kind = ARG_VALUES, .what = "JSON Lines file"},
        [SPECIAL] = {.name = "--special-tokens", .kind = ARG_FLAG},
        [CONTEXT] = {.name = "--context", .kind = ARG_VALUE},
        [STRIDE] = {.name = "--stride", .kind = ARG_VALUE},
        [LIMIT] = {.name = "--limit", .kind = ARG_VALUE},
        [JSON] = {.name = "--json", .kind = ARG_FLAG},
        [DEVICE] = {.name = "--device", .kind = ARG_VALUE},
        [NPROC] = {.name = "--nproc", .kind = ARG_VALUE},
        [TOK_TYPE] = {.name = "--tokenizer-type", .kind = ARG_VALUE},
        [VOCAB] = {.name = "--vocab-file", .kind = ARG_VALUE},
        [MERGES] = {.name = "--merge-file", .kind = ARG_VALUE},
        [TOK_MODEL] = {.name = "--tokenizer-model", .kind = ARG_VALUE},
        [CONFIG] = {.name = "--config", .kind = ARG_VALUE},
        [DATA_PARALLEL] = {.name = "--data-parallel", .kind = ARG_VALUE},
        [TIK_PATTERN] = {.name = "--tiktoken-pattern", .kind = ARG_VALUE},
        [TIK_NUM] = {.name = "--tiktoken-num-special-tokens", .kind = ARG_VALUE},
        [TIK_SPECIALS] = {.name = "--tiktoken-special-tokens", .kind = ARG_VALUES, .what = "token"},
        {.name = NULL},
    };
    arg_parser a = {.cmd = "trident eval", .opts = options, .usage = eval_usage, .argc = argc,
                    .argv = argv};
    eval_options o = {.device = "cpu"};
    const char **inputs = calloc((size_t)argc + 1, sizeof *inputs);
    const char **tasks = calloc((size_t)argc + 1, sizeof *tasks);
    if (!inputs || !tasks) {
        free(inputs);
        free(tasks);
        fprintf(stderr, "trident eval: out of memory\n");
        return 1;
    }
    o.inputs = inputs;
    o.tasks = tasks;
    const char *v;
    int rc = 0, nproc = 0, opt;
    while (!rc && (opt = args_next(&a, &v)) != ARGS_END) {
        if (opt == ARGS_HELP || opt == ARGS_ERROR) {
            free(inputs);
            free(tasks);
            return opt == ARGS_HELP ? 0 : 2;
        }
        if (opt == INPUT)
            inputs[o.n_inputs++] = v;
        else if (opt == DATA)
            o.data_path = v;
        else if (opt == SPLIT)
            o.split = v;
        else if (opt == SPLIT_NAME)
            o.split_name = v;
        else if (opt == TASKS)
            tasks[o.n_tasks++] = v;
        else if (opt == SPECIAL)
            o.special = 1;
        else if (opt == CONTEXT)
            rc = args_int(&a, "--context", v, 1, 1 << 24, &o.context);
        else if (opt == STRIDE)
            rc = args_int(&a, "--stride", v, 1, 1 << 24, &o.stride);
        else if (opt == LIMIT)
            rc = args_int(&a, "--limit", v, 1, 0x7fffffff, &o.limit);
        else if (opt == DATA_PARALLEL)
            rc = args_int(&a, "--data-parallel", v, 1, 4096, &o.data_parallel);
        else if (opt == JSON)
            o.json = 1;
        else if (opt >= 0 && infer_shared_option(&a, options[opt].name, v, &o.config, &o.device,
                                                 &nproc, &o.tok, &rc))
            ; /* (stored) */
        else if (o.dir)
            rc = args_error(&a, "more than one checkpoint folder given ('%s' and '%s')", o.dir, v);
        else
            o.dir = v;
    }
    int kinds = (o.n_inputs > 0) + !!o.data_path + (o.n_tasks > 0);
    if (!rc && !o.dir)
        rc = args_error(&a, "no checkpoint folder given (see trident eval --help)");
    if (!rc && kinds != 1)
        rc = args_error(&a, "give one of --input FILE..., --data-path PREFIX or --tasks FILE "
                            "(%s)", kinds ? "more than one given" : "none given");
    if (!rc && o.stride && !o.n_inputs)
        rc = args_error(&a, "--stride is for --input (a dataset's samples do not overlap; "
                            "requests are scored whole)");
    if (!rc && o.stride && o.context && o.stride > o.context)
        rc = args_error(&a, "--stride %d is more than --context %d", o.stride, o.context);
    if (!rc && (o.split || o.split_name) && !o.data_path)
        rc = args_error(&a, "--split and --split-name are for --data-path");
    if (!rc && o.special && !o.n_tasks)
        rc = args_error(&a, "--special-tokens is for --tasks (--input streams get the "
                            "tokenizer's template already)");
    if (!rc && o.split_name && strcmp(o.split_name, "train") && strcmp(o.split_name, "valid") &&
        strcmp(o.split_name, "test"))
        rc = args_error(&a, "--split-name is train, valid or test, not '%s'", o.split_name);
    if (rc) {
        free(inputs);
        free(tasks);
        return rc;
    }
    if (!o.split)
        o.split = "1,0,0";
    if (!o.split_name)
        o.split_name = "train";
    if (nproc > 0) {
        free(inputs);
        free(tasks);
        return run_as_local_ranks("eval", nproc, 0, argc, argv);
    }
    if (adopt_scheduler_identity("trident eval")) {
        free(inputs);
        free(tasks);
        return 2;
    }
    infer_tok_paths hf_tokenizer;
    if ((rc = infer_tokenizer_open("trident eval", o.dir, &o.tok, &hf_tokenizer, &o.tokenizer))) {
        free(inputs);
        free(tasks);
        return rc;
    }
    rc = run_eval(&o);
    tr_tokenizer_free(o.tokenizer);
    free(inputs);
    free(tasks);
    if (rc) {
        fprintf(stderr, "trident eval: %s\n", tr_errmsg());
        return rc == TR_ERR_CONFIG || rc == TR_ERR_INVALID ? 2 : 1;
    }
    return 0;
}
