/* Fuzz target llmcmodel: one llm.c model file (gpt2_124M.bin's format) -> tr_llmc_import
 * (hf/llmc.c). A passing import's checkpoint must read back with the model section it
 * reported and export (tr_llmc_export, the file's version) to a file of the input's bytes when
 * the input's unread parts are zero (the header after Vp, wte's padding rows). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hf/hf.h"
#include "hf/llmc.h"
#include "train/train.h"
#include "fuzz.h"

/* Whether the header's words 8..255 and wte's rows V..Vp (of C words each) are zero. */
static int unread_zero(const uint8_t *data, size_t size, const tr_model_config *m, int bf16,
                       int Vp)
{
    int32_t h[256];
    memcpy(h, data, sizeof h);
    for (int i = 8; i < 256; i++)
        if (h[i])
            return 0;
    size_t es = bf16 ? 2 : 4, from = 1024 + (size_t)m->vocab_size * m->hidden_size * es;
    size_t to = 1024 + (size_t)Vp * m->hidden_size * es;
    for (size_t i = from; i < to && i < size; i++)
        if (data[i])
            return 0;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char in[1024], ck[1024], out[1024];
    fz_write("model.bin", data, size);
    fz_path(in, sizeof in, "model.bin");
    fz_path(ck, sizeof ck, "ck");
    fz_path(out, sizeof out, "back.bin");
    FZ_IGNORE(tr_hf_remove_import(ck));
    unlink(out);
    tr_model_config m, back = {0};
    tr_llmc_info info, info2;
    if (tr_llmc_import(in, ck, &m, &info))
        return 0;
    int it = -1;
    if (tr_checkpoint_read_model(ck, &back, &it) || back.num_layers != m.num_layers ||
        back.hidden_size != m.hidden_size || back.vocab_size != m.vocab_size ||
        back.max_position_embeddings != m.max_position_embeddings)
        abort();
    int bf16 = info.version == 5;
    fz_must(tr_llmc_export(ck, out, bf16, &it, &info2), "export of a passing import");
    size_t n;
    uint8_t *again = fz_slurp(out, &n);
    int same_vp = info2.padded_vocab == info.padded_vocab;
    if (same_vp && unread_zero(data, size, &m, bf16, info.padded_vocab) &&
        (n != size || memcmp(again, data, n)))
        abort();
    free(again);
    FZ_IGNORE(tr_hf_remove_import(ck));
    unlink(out);
    return 0;
}
