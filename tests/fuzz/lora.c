/* Fuzz target lora: a LoRA fine-tuning's checkpoint exported to Hugging Face
 * (tr_hf_export_lora, hf/). At start: two steps of fixtures/ckpt.yaml saved as the base, two
 * steps of fixtures/lora.yaml on it saved as the adapters' checkpoint. Byte 0: bit 0 merge the
 * adapters into the base (model.safetensors) rather than write them alone
 * (adapter_model.safetensors), bit 1 the input patches the base instead of the adapters; the
 * rest goes to fz_fixture_apply. After a successful export the written file opens and every
 * value in it is finite. */
#include <stdio.h>
#include <stdlib.h>

#include "hf/hf.h"
#include "train/train.h"
#include "fixture.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static fz_fixture adapters, base;
    static tr_config cfg;
    static char out[1024];
    if (!out[0]) {
        char base_dir[1024], lora_dir[1024], set[1100];
        tr_config base_cfg;
        fz_fixture_config("ckpt.yaml", NULL, 0, &base_cfg);
        fz_path(base_dir, sizeof base_dir, "base");
        fz_make_checkpoint(&base_cfg, base_dir, 2);
        tr_config_free(&base_cfg);
        snprintf(set, sizeof set, "finetune.load=%s", base_dir);
        const char *overrides[] = {set};
        fz_fixture_config("lora.yaml", overrides, 1, &cfg);
        fz_path(lora_dir, sizeof lora_dir, "lora");
        fz_make_checkpoint(&cfg, lora_dir, 2);
        fz_fixture_init(&adapters, lora_dir);
        fz_fixture_init(&base, base_dir);
        fz_path(out, sizeof out, "out");
    }
    if (size < 1) return 0;
    int merge = data[0] & 1, patch_base = (data[0] >> 1) & 1;
    data++;
    size--;
    fz_fixture_restore(&adapters);
    fz_fixture_restore(&base);
    fz_fixture_apply(patch_base ? &base : &adapters, data, size);
    fz_rmtree(out);
    tr_hf_export_options o = {.eos_token_id = -1, .model = &cfg.model};
    int iteration;
    if (tr_hf_export_lora(adapters.root, out, &cfg, merge, &o, &iteration)) return 0;
    char path[1100];
    snprintf(path, sizeof path, "%s/%s", out,
             merge ? "model.safetensors" : "adapter_model.safetensors");
    tr_st_file *f;
    if (tr_st_open(path, &f)) {
        fprintf(stderr, "the export wrote no readable %s: %s\n", path, tr_errmsg());
        abort();
    }
    for (size_t i = 0; i < tr_st_count(f); i++) {
        const tr_st_tensor *t = tr_st_at(f, i);
        float *v = malloc(t->numel ? t->numel * sizeof(float) : 1);
        if (!v || tr_st_read_f32(f, t, v)) abort();
        fz_check_finite(t->name, v, t->numel, 0);
        free(v);
    }
    tr_st_close(f);
    return 0;
}
