/* tok_encode: a test tool. `tok_encode TYPE VOCAB MERGES MODEL [TIKTOKEN...] [--special] FILE...`
 * encodes each
 * FILE whole (one text) and writes the ids as int32 little-endian to stdout, one file after
 * another, each preceded by its id count (int64). With --decode instead of --special, each FILE
 * holds int32 ids and their decoded text is written, preceded by its length (int64).
 * TYPE/VOCAB/MERGES/MODEL: "-" for none. TIKTOKEN: --tiktoken-pattern P,
 * --tiktoken-num-special-tokens S, --tiktoken-special-tokens A,B,C, --tiktoken-vocab-size V
 * (TikTokenizer's). Exit 2 with the message when the tokenizer or a file
 * is refused, 1 on other failures. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer.h"

static const char *opt(const char *s) { return strcmp(s, "-") ? s : NULL; }

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, n = 0, got;
    char *buf = malloc(cap);
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            char *p = realloc(buf, cap *= 2);
            if (!p)
                free(buf);
            buf = p;
        }
    }
    fclose(f);
    *len = n;
    return buf;
}

int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: tok_encode TYPE VOCAB MERGES MODEL [--special] FILE...\n");
        return 2;
    }
    tr_tokenizer_files files = {.type = opt(argv[1]), .vocab_file = opt(argv[2]),
                                .merge_file = opt(argv[3]), .tokenizer_model = opt(argv[4])};
    const char *specials[64];
    int first = 5;
    for (; first + 1 < argc && !strncmp(argv[first], "--tiktoken-", 11); first += 2) {
        const char *flag = argv[first] + 11;
        if (!strcmp(flag, "pattern"))
            files.tiktoken_pattern = argv[first + 1];
        else if (!strcmp(flag, "num-special-tokens"))
            files.tiktoken_num_special_tokens = atoi(argv[first + 1]);
        else if (!strcmp(flag, "vocab-size"))
            files.tiktoken_vocab_size = atoi(argv[first + 1]);
        else /* special-tokens: comma-separated, in place */
            for (char *s = argv[first + 1], *c; s && files.n_tiktoken_special_tokens < 64; s = c) {
                if ((c = strchr(s, ',')))
                    *c++ = '\0';
                specials[files.n_tiktoken_special_tokens++] = s;
                files.tiktoken_special_tokens = specials;
            }
    }
    tr_tokenizer *t;
    tr_encoder *e;
    int rc = tr_tokenizer_open(&files, &t);
    if (rc) {
        fprintf(stderr, "tok_encode: %s\n", tr_errmsg());
        return rc == TR_ERR_IO ? 1 : 2;
    }
    if (tr_encoder_create(t, &e)) {
        fprintf(stderr, "tok_encode: %s\n", tr_errmsg());
        return 1;
    }
    int special = 0, decode = 0;
    if (first < argc && !strcmp(argv[first], "--special"))
        special = 1, first++;
    else if (first < argc && !strcmp(argv[first], "--decode"))
        decode = 1, first++;
    int32_t *ids = NULL;
    size_t cap = 0;
    for (int i = first; i < argc; i++) {
        size_t len, n = 0;
        char *text = read_all(argv[i], &len);
        if (!text) {
            fprintf(stderr, "tok_encode: cannot read %s\n", argv[i]);
            return 1;
        }
        char *out = NULL; /* --decode: the text, n bytes; else the ids, n of them */
        int failed = decode ? tr_decode(t, (const int32_t *)(const void *)text, len / 4, &out, &n)
                            : tr_encode(e, text, len, special, &ids, &n, &cap);
        if (failed) {
            fprintf(stderr, "tok_encode: %s: %s\n", argv[i], tr_errmsg());
            return 2;
        }
        int64_t count = (int64_t)n;
        fwrite(&count, 8, 1, stdout);
        fwrite(decode ? (const void *)out : (const void *)ids, decode ? 1 : 4, n, stdout);
        free(out);
        free(text);
    }
    free(ids);
    tr_encoder_free(e);
    tr_tokenizer_free(t);
    return 0;
}
