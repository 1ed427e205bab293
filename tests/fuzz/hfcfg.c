/* Fuzz target hfcfg: a Hugging Face config.json (hf/): the family, then for GPT-2 the GPT-2
 * reader and its model config. Only "no crash, no leak" is checked. */
#include <string.h>

#include "hf/hf.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_write("config.json", data, size);
    tr_model_config m;
    int family;
    memset(&m, 0, sizeof m);
    if (tr_hf_read_family_config(fz_dir(), &m, &family) || family != TR_HF_GPT2) return 0;
    tr_hf_gpt2_config c;
    if (!tr_hf_read_gpt2_config(fz_dir(), &c)) tr_hf_gpt2_model_config(&c, &m);
    return 0;
}
