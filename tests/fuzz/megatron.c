/* Fuzz target megatron: one Megatron-LM rank file (model_optim_rng.pt: a torch.save archive whose
 * pickle runs under PT_OBJECTS' allowlist) as SAVE/iter_0000001/mp_rank_00 of a --save folder
 * -> tr_megatron_import (hf/megatron.c); or, when the input holds "\n@@@\n", a --ckpt-format
 * torch_dist iteration folder (hf/megatron_dist.c): common.pt @@@ .metadata (the Metadata pickle,
 * PT_DCP's allowlist) @@@ __0_0.distcp @@@ __0_1.distcp @@@ __1_0.distcp @@@ __1_1.distcp beside a
 * fixed metadata.json. A passing import's checkpoint must read back: its model section is the
 * one the import reported. */
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
    fz_rmtree(dir); /* (the last input's files: one layout at a time) */
    mkdir(save, 0755);
    mkdir(dir, 0755);
    static const char *const dist[] = {"common.pt", ".metadata", "__0_0.distcp", "__0_1.distcp",
                                       "__1_0.distcp", "__1_1.distcp"};
    const uint8_t *part[6];
    size_t len[6];
    if (fz_split(data, size, part, len, 6) > 1) {
        static const char json[] = "{\"sharded_backend\": \"torch_dist\"}";
        snprintf(file, sizeof file, "%s/metadata.json", dir);
        fz_write_path(file, (const uint8_t *)json, sizeof json - 1);
        for (int i = 0; i < 6; i++) {
            snprintf(file, sizeof file, "%s/%s", dir, dist[i]);
            fz_write_path(file, part[i], len[i]);
        }
    } else {
        snprintf(file, sizeof file, "%s/mp_rank_00", dir);
        mkdir(file, 0755);
        snprintf(file, sizeof file, "%s/mp_rank_00/model_optim_rng.pt", dir);
        fz_write_path(file, data, size);
    }
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
