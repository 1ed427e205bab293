/* Fuzz target parquet: a preprocess input told by its first bytes (Parquet, gzip, zstd JSON
 * Lines, data/prep_input.h). Byte 0: the columns (% 3: "text"; "text" and "content";
 * "content"), bit 2 skip_bad_lines, bit 3 the whole tr_preprocess with the byte tokenizer
 * (else the reader alone: every row's values read byte by byte, rows numbered 1, 2, ...; a
 * stream read to its end); the rest is the file. Pages are limited to 4096 values
 * (pq_max_page_values) so that a run stays short. After a successful tr_preprocess each output
 * reopens as a GPT dataset (an error saying it is empty is accepted) and every split's first
 * 20 samples read. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "data/data.h"
#include "data/parquet_internal.h"
#include "data/prep_input.h"
#include "tokenizer/tokenizer.h"
#include "fuzz.h"

static void check_output(const char *prefix)
{
    tr_data *d = NULL;
    if (tr_data_open(prefix, "megatron", "1,1,1", 4, 256, 7, &d)) {
        if (!strstr(tr_errmsg(), "no document") && !strstr(tr_errmsg(), "empty"))
            fprintf(stderr, "note: preprocessed output does not reopen: %s\n", tr_errmsg());
        return;
    }
    int32_t tok[8];
    for (int s = 0; s < 3; s++)
        for (uint64_t g = 0; g < tr_data_num_samples(d, s) && g < 20; g++)
            if (tr_data_sample(d, s, g, tok)) abort();
    tr_data_close(d);
}

static volatile unsigned g_sink;

static void read_alone(const char *path, const char *const *keys, int n_keys)
{
    prep_input *in;
    if (prep_input_open(path, &in)) return;
    if (prep_input_kind_of(in) != PREP_IN_PARQUET) {
        char buf[4096];
        while (fread(buf, 1, sizeof buf, prep_input_file(in)) > 0) {}
    } else {
        pq_reader *r;
        if (!pq_open(path, keys, n_keys, &r)) {
            pq_value v[2];
            uint64_t row, rows = 0;
            while (!pq_next_row(r, v, &row) && row) {
                if (row != ++rows) abort();
                for (int k = 0; k < n_keys; k++) /* (ASan checks each byte) */
                    for (size_t i = 0; v[k].s && i < v[k].len; i++)
                        g_sink += (unsigned char)v[k].s[i];
            }
            pq_close(r);
        }
    }
    (void)prep_input_close(in, TR_OK);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    int mode = data[0] % 3, skip = (data[0] >> 2) & 1;
    fz_write("in", data + 1, size - 1);
    char in[1024], out[1024];
    fz_path(in, sizeof in, "in");
    fz_path(out, sizeof out, "o");
    pq_max_page_values = 4096;
    static tr_tokenizer *tok;
    if (!tok) {
        tr_tokenizer_files tf = {0};
        tf.type = "ByteLevel";
        fz_must(tr_tokenizer_open(&tf, &tok), "byte tokenizer");
    }
    const char *inputs[] = {in};
    const char *keys[3][2] = {{"text"}, {"text", "content"}, {"content"}};
    tr_preprocess_options o = {.inputs = inputs, .n_inputs = 1, .output_prefix = out,
                               .tokenizer = tok, .append_eod = 1, .workers = 1,
                               .skip_bad_lines = skip, .json_keys = keys[mode],
                               .n_json_keys = mode == 1 ? 2 : 1};
    if (!(data[0] & 8)) {
        read_alone(in, keys[mode], o.n_json_keys);
        return 0;
    }
    tr_preprocess_stats st;
    if (tr_preprocess(&o, &st)) return 0;
    for (int k = 0; k < o.n_json_keys; k++) {
        char prefix[1100];
        snprintf(prefix, sizeof prefix, "%s_%s_document", out, keys[mode][k]);
        check_output(prefix);
    }
    return 0;
}
