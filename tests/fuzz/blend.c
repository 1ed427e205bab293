/* Fuzz target blend: weighted data_path lists (tr_config_blend) over six llm.c shards of
 * 30..380 tokens, opened as a blended dataset (data/blend.c): whatever tr_config_blend accepts
 * (weights whose sum overflows included) must open or be refused. Bytes 0..2: global batch
 * 1 + b0 % 64, sources 1 + b1 % 6, seq_length 1 + b2 % 8; then one little-endian double per
 * source (weight; 1.0 once the input runs out). After a successful open: in every split the
 * first 3 global batches (up to 200 samples) read, each naming a source in range, and seeking
 * back to sample 0 works. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data.h"
#include "yaml/config.h"
#include "fuzz.h"

#define N_SHARDS 6

static void check_blend(const char **paths, const double *weights, int n, int gb, int seq)
{
    tr_data_spec sp = {.data_path = {paths, weights, n}, .format = "llmc", .split = "5,2,1",
                       .seq_length = seq, .vocab_size = 256, .global_batch = gb, .seed = 1};
    tr_data *d;
    if (tr_data_open_spec(&sp, &d)) return;
    int32_t tok[16];
    for (int s = 0; s < 3; s++) {
        uint64_t ns = tr_data_num_samples(d, s);
        int src;
        uint64_t j;
        for (uint64_t g = 0; ns && g < 3 * (uint64_t)gb && g < 200; g++) {
            if (tr_data_sample_source(d, s, g, &src, &j)) abort();
            if (src < 0 || src >= n) abort();
            if (tr_data_sample(d, s, g, tok)) abort();
        }
        if (ns && tr_data_sample_source(d, s, 0, &src, &j)) abort();
    }
    tr_data_close(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char shard[N_SHARDS][1024];
    if (!shard[0][0]) {
        uint16_t tokens[400];
        for (int k = 0; k < 400; k++) tokens[k] = (uint16_t)(k % 200 + 1);
        for (int i = 0; i < N_SHARDS; i++) {
            char name[32];
            snprintf(name, sizeof name, "s%d.llmc", i);
            fz_path(shard[i], sizeof shard[i], name);
            fz_must(tr_llmc_shard_write(shard[i], tokens, (uint64_t)(30 + 70 * i)), "shard");
        }
    }
    if (size < 3) return 0;
    int gb = 1 + data[0] % 64, n = 1 + data[1] % N_SHARDS, seq = 1 + data[2] % 8;
    data += 3;
    size -= 3;
    char wtext[N_SHARDS][64];
    char *list[2 * N_SHARDS];
    int nl = 0;
    for (int i = 0; i < n; i++) {
        double w = 1.0;
        if (size >= 8) {
            memcpy(&w, data, 8);
            data += 8;
            size -= 8;
        }
        snprintf(wtext[i], sizeof wtext[i], "%.17g", w);
        list[nl++] = wtext[i];
        list[nl++] = shard[i];
    }
    const char **paths;
    double *weights;
    int np;
    if (tr_config_blend(list, nl, &paths, &weights, &np)) return 0;
    check_blend(paths, weights, np, gb, seq);
    free(paths);
    free(weights);
    return 0;
}
