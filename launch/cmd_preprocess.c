/* `trident preprocess --input FILE... --output-prefix PREFIX [--document-per-file]`:
 * text files -> a Megatron indexed dataset (PREFIX.bin + PREFIX.idx) with the byte-level
 * tokenizer. Flag names follow Megatron's tools/preprocess_data.py. */
#include "launch/commands.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "data/data.h"
#include "launch/args.h"

static void preprocess_usage(FILE *f)
{
    fprintf(f,
            "usage: trident preprocess --input FILE [FILE...] --output-prefix PREFIX [options]\n"
            "\n"
            "Turn text files into a Megatron indexed dataset, PREFIX.bin + PREFIX.idx (dtype\n"
            "uint16), with the byte-level tokenizer: token = byte value (vocab 256), NUL bytes\n"
            "dropped, token 0 ends every document.\n"
            "\n"
            "options:\n"
            "  --input FILE [FILE...]   text files, in order; may be repeated, or --input=FILE\n"
            "  --output-prefix PREFIX   writes PREFIX.bin and PREFIX.idx (atomically, through\n"
            "                           PREFIX.bin.tmp / PREFIX.idx.tmp)\n"
            "  --document-per-file      each file is one document (default: documents are\n"
            "                           separated by blank lines, i.e. empty or whitespace-only\n"
            "                           lines, and by lines that are exactly \"%%\", the\n"
            "                           separator of fortune(6) files)\n"
            "  --append-eod             accepted for Megatron compatibility (always on)\n"
            "  --workers N              accepted for Megatron compatibility (ignored)\n"
            "  -h, --help               this text\n"
            "\n"
            "Prints the number of documents and tokens.\n"
            "Exit status: 0 success, 1 I/O error (e.g. a missing input), 2 bad usage or input.\n");
}

int tr_cmd_preprocess(int argc, char **argv)
{
    enum { INPUT, OUTPUT_PREFIX, WORKERS, PER_FILE, APPEND_EOD, SPLIT_SENTENCES };
    static const arg_opt options[] = {
        [INPUT] = {"--input", ARG_VALUES, "file"},
        [OUTPUT_PREFIX] = {"--output-prefix", ARG_VALUE},
        [WORKERS] = {"--workers", ARG_VALUE},
        [PER_FILE] = {"--document-per-file", ARG_FLAG},
        [APPEND_EOD] = {"--append-eod", ARG_FLAG},
        [SPLIT_SENTENCES] = {"--split-sentences", ARG_FLAG},
        {NULL},
    };
    arg_parser a = {.cmd = "trident preprocess", .opts = options, .usage = preprocess_usage,
                 .argc = argc, .argv = argv};
    const char **inputs = calloc((size_t)argc + 1, sizeof *inputs);
    const char *prefix = NULL, *v;
    int n_inputs = 0, per_file = 0, rc = 0, workers, o;
    if (!inputs) {
        fprintf(stderr, "trident preprocess: out of memory\n");
        return 1;
    }
    while (!rc && (o = args_next(&a, &v)) != ARGS_END) {
        if (o == ARGS_HELP || o == ARGS_ERROR) {
            free(inputs);
            return o == ARGS_HELP ? 0 : 2;
        }
        if (o == INPUT && !*v)
            rc = args_error(&a, "--input= needs a file name");
        else if (o == INPUT)
            inputs[n_inputs++] = v;
        else if (o == OUTPUT_PREFIX)
            prefix = v;
        else if (o == WORKERS && !args_parse_int(v, 1, 999999, &workers))
            rc = args_error(&a, "--workers needs a positive integer, got '%s'", v);
        else if (o == PER_FILE)
            per_file = 1;
        else if (o == SPLIT_SENTENCES)
            rc = args_error(&a, "--split-sentences is not supported (the byte-level tokenizer "
                                   "has no sentence splitter)");
        else if (o == ARGS_POSITIONAL)
            rc = args_error(&a, "unexpected argument '%s' (input files go after --input)", v);
        /* --append-eod: always on; --workers: ignored */
    }
    if (!rc && n_inputs == 0)
        rc = args_error(&a, "no input files (give --input FILE...)");
    if (!rc && (!prefix || !prefix[0]))
        rc = args_error(&a, "%s", prefix ? "--output-prefix is empty"
                                            : "missing --output-prefix PREFIX");
    if (rc)
        goto done;
    uint64_t n_docs = 0, n_tokens = 0;
    double t0 = tr_now();
    int st = tr_preprocess_text(inputs, n_inputs, prefix, !per_file, &n_docs, &n_tokens);
    if (st) {
        fprintf(stderr, "trident preprocess: %s\n", tr_errmsg());
        rc = st == TR_ERR_INVALID || st == TR_ERR_CONFIG ? 2 : 1;
        goto done;
    }
    printf("preprocess: %d file%s, %llu documents, %llu tokens -> %s.bin, %s.idx (%.2f s)\n",
           n_inputs, n_inputs == 1 ? "" : "s", (unsigned long long)n_docs,
           (unsigned long long)n_tokens, prefix, prefix, tr_now() - t0);
    if (n_docs == 0)
        fprintf(stderr, "trident preprocess: warning: the inputs hold no document\n");
    rc = 0;
done:
    free(inputs);
    return rc;
}
