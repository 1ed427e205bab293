/* `trident preprocess --input FILE... --output-prefix PREFIX [--document-per-file]`:
 * text files -> a Megatron indexed dataset (PREFIX.bin + PREFIX.idx) with the byte-level
 * tokenizer. Flag names follow Megatron's tools/preprocess_data.py. */
#include "launch/commands.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "data/data.h"

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

static void usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "trident preprocess: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see trident preprocess --help)\n");
    va_end(ap);
}

static int positive_int(const char *s)
{
    char *end;
    long v = strtol(s, &end, 10);
    return *s && !*end && v > 0 && v < 1000000;
}

int tr_cmd_preprocess(int argc, char **argv)
{
    const char **inputs = calloc((size_t)argc + 1, sizeof *inputs);
    const char *prefix = NULL;
    int n_inputs = 0, per_file = 0, rc = 2;
    if (!inputs) {
        fprintf(stderr, "trident preprocess: out of memory\n");
        return 1;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            preprocess_usage(stdout);
            rc = 0;
            goto done;
        } else if (!strcmp(a, "--input")) {
            int before = n_inputs;
            while (i + 1 < argc && !(argv[i + 1][0] == '-' && argv[i + 1][1] != '\0'))
                inputs[n_inputs++] = argv[++i];
            if (n_inputs == before) {
                usage_error("%s needs at least one file", a);
                goto done;
            }
        } else if (!strncmp(a, "--input=", 8)) {
            if (!a[8]) {
                usage_error("%s needs a file name", "--input=");
                goto done;
            }
            inputs[n_inputs++] = a + 8;
        } else if (!strcmp(a, "--output-prefix") || !strcmp(a, "--workers")) {
            if (i + 1 >= argc) {
                usage_error("%s needs a value", a);
                goto done;
            }
            if (!strcmp(a, "--output-prefix"))
                prefix = argv[++i];
            else if (!positive_int(argv[++i])) {
                usage_error("--workers needs a positive integer, got '%s'", argv[i]);
                goto done;
            }
        } else if (!strncmp(a, "--output-prefix=", 16)) {
            prefix = a + 16;
        } else if (!strncmp(a, "--workers=", 10)) {
            if (!positive_int(a + 10)) {
                usage_error("--workers needs a positive integer, got '%s'", a + 10);
                goto done;
            }
        } else if (!strcmp(a, "--document-per-file")) {
            per_file = 1;
        } else if (!strcmp(a, "--append-eod")) {
            /* always on */
        } else if (!strcmp(a, "--split-sentences")) {
            usage_error("%s is not supported (the byte-level tokenizer has no sentence "
                        "splitter)", a);
            goto done;
        } else if (a[0] == '-' && a[1] != '\0') {
            usage_error("unknown option '%s'", a);
            goto done;
        } else {
            usage_error("unexpected argument '%s' (input files go after --input)", a);
            goto done;
        }
    }
    if (n_inputs == 0) {
        usage_error("%s", "no input files (give --input FILE...)");
        goto done;
    }
    if (!prefix || !prefix[0]) {
        usage_error("%s", prefix ? "--output-prefix is empty" : "missing --output-prefix PREFIX");
        goto done;
    }
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
