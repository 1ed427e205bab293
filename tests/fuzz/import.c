/* Fuzz target import: a Hugging Face model folder, config.json "\n@@@\n" model.safetensors,
 * through tr_hf_import into a trident checkpoint (removed again after a success). Only "no
 * crash, no leak" is checked; the import's own checks (shapes, dtypes, names) must reject
 * whatever does not fit the config. */
#include <string.h>

#include "hf/hf.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_write_hf_folder(data, size);
    char out[1024];
    fz_path(out, sizeof out, "ckpt");
    tr_model_config m;
    memset(&m, 0, sizeof m);
    if (!tr_hf_import(fz_dir(), out, &m)) FZ_IGNORE(tr_hf_remove_import(out));
    return 0;
}
