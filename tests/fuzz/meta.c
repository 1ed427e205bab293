/* Fuzz target meta: the input is params.json of a Meta Llama folder whose consolidated.00.pth is
 * a fixture (fixtures/lora-llama.yaml's model after two steps, exported by tr_meta_export) ->
 * tr_meta_import (hf/meta.c). A passing import's checkpoint must read back with the model section
 * it reported, and its layers and sizes must be the fixture's (the tensors fix them). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hf/hf.h"
#include "hf/meta.h"
#include "train/train.h"
#include "fixture.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char meta[1024], ck[1024];
    static tr_config cfg;
    if (!meta[0]) {
        char base[1024];
        fz_path(base, sizeof base, "base");
        fz_path(meta, sizeof meta, "meta");
        fz_path(ck, sizeof ck, "ck");
        fz_fixture_config("lora-llama.yaml", NULL, 0, &cfg);
        fz_make_checkpoint(&cfg, base, 2);
        fz_must(tr_meta_export(base, meta, 1, 0, NULL, NULL), "the Meta folder");
    }
    char params[1100];
    snprintf(params, sizeof params, "%s/params.json", meta);
    fz_write_path(params, data, size);
    FZ_IGNORE(tr_hf_remove_import(ck));
    tr_model_config m, back = {0};
    tr_meta_info info;
    if (tr_meta_import(meta, ck, &m, &info))
        return 0;
    int it = -1;
    const tr_model_config *f = &cfg.model;
    if (tr_checkpoint_read_model(ck, &back, &it) || back.num_layers != m.num_layers ||
        back.hidden_size != m.hidden_size || back.vocab_size != m.vocab_size ||
        m.num_layers != f->num_layers || m.hidden_size != f->hidden_size ||
        m.vocab_size != f->vocab_size || m.num_query_groups != f->num_query_groups ||
        m.ffn_hidden_size != f->ffn_hidden_size || info.mp != 1)
        abort();
    FZ_IGNORE(tr_hf_remove_import(ck));
    return 0;
}
