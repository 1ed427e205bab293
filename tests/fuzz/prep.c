/* Fuzz target prep: JSONL through tr_preprocess (data/preprocess.c) with the byte tokenizer.
 * Byte 0: mode (% 4: default keys, "text", prompt/response SFT pairs, chat "messages"), bit 2
 * skip_bad_lines; byte 1: seq_length 1 + b1 % 8; the rest is the JSONL file. After a
 * successful run the output reopens (as a GPT or SFT dataset; an error saying it is empty is
 * accepted) and every split's first 20 samples read, SFT loss weights 0 or 1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "data/data.h"
#include "tokenizer/tokenizer.h"
#include "fuzz.h"

static void check_output(const char *prefix, int mode, int seq)
{
    tr_data *d = NULL;
    int rc;
    if (mode >= 2) rc = tr_data_open_sft(prefix, "1,1,1", seq, 256, 7, 1, &d);
    else rc = tr_data_open(prefix, "megatron", "1,1,1", seq, 256, 7, &d);
    if (rc) {
        if (!strstr(tr_errmsg(), "no document") && !strstr(tr_errmsg(), "empty"))
            fprintf(stderr, "note: preprocessed output does not reopen: %s\n", tr_errmsg());
        return;
    }
    int32_t tok[16], seg[16], pos[16];
    float w[16];
    for (int s = 0; s < 3; s++) {
        for (uint64_t g = 0; g < tr_data_num_samples(d, s) && g < 20; g++) {
            if (mode < 2) {
                if (tr_data_sample(d, s, g, tok)) abort();
                continue;
            }
            if (tr_data_sample_sft(d, s, g, tok, w, seg, pos)) abort();
            for (int i = 0; i < seq; i++)
                if (w[i] != 0.f && w[i] != 1.f) abort();
        }
    }
    tr_data_close(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2) return 0;
    int mode = data[0] % 4, seq = 1 + data[1] % 8, skip = (data[0] >> 2) & 1;
    data += 2;
    size -= 2;
    fz_write("in.jsonl", data, size);
    char in[1024], out[1024];
    fz_path(in, sizeof in, "in.jsonl");
    fz_path(out, sizeof out, "o");
    static tr_tokenizer *tok;
    if (!tok) {
        tr_tokenizer_files tf = {0};
        tf.type = "ByteLevel";
        fz_must(tr_tokenizer_open(&tf, &tok), "byte tokenizer");
    }
    const char *inputs[] = {in};
    const char *k_text[] = {"text"}, *k_pair[] = {"prompt", "response"}, *k_chat[] = {"messages"};
    tr_preprocess_options o = {.inputs = inputs, .n_inputs = 1, .output_prefix = out,
                               .tokenizer = tok, .append_eod = 1, .workers = 1,
                               .skip_bad_lines = skip};
    if (mode == 1) o.json_keys = k_text, o.n_json_keys = 1;
    if (mode == 2) o.json_keys = k_pair, o.n_json_keys = 2, o.sft = TR_SFT_PAIR;
    if (mode == 3) o.json_keys = k_chat, o.n_json_keys = 1, o.sft = TR_SFT_CHAT;
    tr_preprocess_stats st;
    if (tr_preprocess(&o, &st)) return 0;
    char prefix[1100];
    if (mode == 1) snprintf(prefix, sizeof prefix, "%s_text_document", out);
    else snprintf(prefix, sizeof prefix, "%s", out);
    check_output(prefix, mode, seq);
    return 0;
}
