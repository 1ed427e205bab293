/* Fuzz target megatron: one Megatron-LM rank file (model_optim_rng.pt: a torch.save archive whose
 * pickle runs under PT_OBJECTS' allowlist) as SAVE/iter_0000001/mp_rank_00 of a --save folder
 * -> tr_megatron_import (hf/megatron.c). A passing import's checkpoint must read back: its
 * model section is the one the import reported. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "hf/hf.h"
#include "hf/megatron.h"
#include "train/train.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char save[1024], dir[1100], file[1200], ck[1024];
    fz_path(save, sizeof save, "save");
    fz_path(ck, sizeof ck, "ck");
    snprintf(dir, sizeof dir, "%s/iter_0000001", save);
    mkdir(save, 0755);
    mkdir(dir, 0755);
    snprintf(file, sizeof file, "%s/mp_rank_00", dir);
    mkdir(file, 0755);
    snprintf(file, sizeof file, "%s/mp_rank_00/model_optim_rng.pt", dir);
    fz_write_path(file, data, size);
    fz_write("save/latest_checkpointed_iteration.txt", (const uint8_t *)"1\n", 2);
    FZ_IGNORE(tr_hf_remove_import(ck));
    tr_model_config m, back = {0};
    tr_megatron_info info;
    if (tr_megatron_import(save, -1, ck, &m, &info))
        return 0;
    int it = -1;
    if (tr_checkpoint_read_model(ck, &back, &it) || back.num_layers != m.num_layers ||
        back.hidden_size != m.hidden_size || back.vocab_size != m.vocab_size)
        abort();
    FZ_IGNORE(tr_hf_remove_import(ck));
    return 0;
}
