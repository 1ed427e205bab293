/* Fuzz targets idx and llmc (data/): built twice, FUZZ_LLMC selecting an llm.c shard,
 * otherwise a Megatron dataset (.idx "\n@@@\n" .bin). Bytes 0..3: seq_length 1 + b0 % 16,
 * vocab 1 + (b1 | b2 << 8), b3 unused. After a successful open: in every split, the first
 * samples (twice the split's count, up to 40: past the end wraps into later epochs) read with
 * tokens in [0, vocab), and their index and document locate. */
#include <stdlib.h>

#include "data/data.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4) return 0;
    int seq = 1 + data[0] % 16, vocab = 1 + (data[1] | data[2] << 8);
    data += 4;
    size -= 4;
    char path[1024];
#ifdef FUZZ_LLMC
    fz_write("d.llmc", data, size);
    fz_path(path, sizeof path, "d.llmc");
    const char *format = "llmc";
#else
    const uint8_t *part[2];
    size_t len[2];
    fz_split(data, size, part, len, 2);
    fz_write("d.idx", part[0], len[0]);
    fz_write("d.bin", part[1], len[1]);
    fz_path(path, sizeof path, "d");
    const char *format = "megatron";
#endif
    tr_data *d;
    if (tr_data_open(path, format, "8,1,1", seq, vocab, 1234, &d)) return 0;
    int32_t tok[32];
    for (int s = 0; s < 3; s++) {
        uint64_t n = tr_data_num_samples(d, s);
        for (uint64_t g = 0; g < 2 * n && g < 40; g++) {
            if (tr_data_sample(d, s, g, tok)) abort();
            for (int i = 0; i <= seq; i++)
                if (tok[i] < 0 || tok[i] >= vocab) abort();
            uint64_t j, doc, off;
            if (tr_data_sample_index(d, s, g, &j)) abort();
            FZ_IGNORE(tr_data_locate(d, s, j * (uint64_t)seq, &doc, &off));
        }
    }
    tr_data_close(d);
    return 0;
}
