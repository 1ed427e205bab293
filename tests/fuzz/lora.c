/* Fuzz targets lora, lora-llama and lora-bloom: a LoRA fine-tuning's checkpoint exported to
 * Hugging Face (tr_hf_export_lora, hf/).
 *
 * lora (GPT-2): at start, two steps of fixtures/ckpt.yaml saved as the base, two steps of
 * fixtures/lora.yaml on it saved as the adapters' checkpoint. Byte 0: bit 0 merge the adapters
 * into the base (model.safetensors) rather than write them alone (adapter_model.safetensors),
 * bit 1 the input patches the base instead of the adapters.
 *
 * lora-llama, lora-bloom (FUZZ_LORA_FAMILY "lora-llama.yaml" / "lora-bloom.yaml": the base model's
 * fixture; PEFT's split of the fused qkv and gate/up adapters, and Bloom's names): the base
 * trained and saved likewise, rank-2 alpha-4 adapters on all four targets trained on it, and
 * the base also exported as a Hugging Face folder (config.json, model.safetensors), which
 * finetune.load may name instead. Byte 0: bit 0 merge; bits 1-2: 0 the input patches the
 * adapters' checkpoint, 1 the base checkpoint, 2 the Hugging Face base (which finetune.load
 * then names), 3 the adapters with the Hugging Face base.
 *
 * lora-llama, lora-bloom, byte 0 of 0x08..0x0f (bits 3-7 exactly 00001): PEFT's import
 * (tr_hf_import_lora, hf/lora_read.c) of the adapters' --adapters-only export (written once at
 * start: adapter_config.json, adapter_model.safetensors, which the input patches) onto the Hugging
 * Face base; an import that succeeds must hold rank = PEFT's rank x blocks in its lora line.
 *
 * The rest goes to fz_fixture_apply. After a successful export the written file opens, every
 * value in it is finite, and each adapter has the run's rank. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hf/hf.h"
#include "train/train.h"
#include "fixture.h"
#include "fuzz.h"

#define RANK 2

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static fz_fixture adapters, base, hf;
#ifdef FUZZ_LORA_FAMILY
    static fz_fixture peft; /* PEFT's files of the adapters */
#endif
    static tr_config cfg, cfg_hf;
    static char out[1024];
    if (!out[0]) {
        char base_dir[1024], lora_dir[1024], hf_dir[1024], set[1100];
        tr_config base_cfg;
        fz_path(base_dir, sizeof base_dir, "base");
        fz_path(lora_dir, sizeof lora_dir, "lora");
        snprintf(set, sizeof set, "finetune.load=%s", base_dir);
#ifdef FUZZ_LORA_FAMILY
        fz_fixture_config(FUZZ_LORA_FAMILY, NULL, 0, &base_cfg);
        fz_make_checkpoint(&base_cfg, base_dir, 2);
        fz_path(hf_dir, sizeof hf_dir, "hfbase");
        tr_hf_export_options o = {.eos_token_id = -1, .model = &base_cfg.model};
        fz_must(tr_hf_export(base_dir, hf_dir, &o, NULL), "the Hugging Face base");
        static const char *const hf_files[] = {"config.json", "model.safetensors"};
        fz_fixture_init_files(&hf, hf_dir, hf_files, 2);
        const char *overrides[] = {set, "finetune.lora.rank=2", "finetune.lora.alpha=4"};
        fz_fixture_config(FUZZ_LORA_FAMILY, overrides, 3, &cfg);
        snprintf(set, sizeof set, "finetune.load=%s", hf_dir);
        fz_fixture_config(FUZZ_LORA_FAMILY, overrides, 3, &cfg_hf);
        char peft_dir[1024];
        fz_path(peft_dir, sizeof peft_dir, "peft");
        fz_make_checkpoint(&cfg, lora_dir, 2);
        fz_must(tr_hf_export_lora(lora_dir, peft_dir, &cfg, 0, &o, NULL), "the PEFT adapters");
        static const char *const peft_files[] = {"adapter_config.json", "adapter_model.safetensors"};
        fz_fixture_init_files(&peft, peft_dir, peft_files, 2);
#else
        (void)hf_dir;
        fz_fixture_config("ckpt.yaml", NULL, 0, &base_cfg);
        fz_make_checkpoint(&base_cfg, base_dir, 2);
        const char *overrides[] = {set};
        fz_fixture_config("lora.yaml", overrides, 1, &cfg);
#endif
        tr_config_free(&base_cfg);
#ifndef FUZZ_LORA_FAMILY
        fz_make_checkpoint(&cfg, lora_dir, 2);
#endif
        fz_fixture_init(&adapters, lora_dir);
        fz_fixture_init(&base, base_dir);
        fz_path(out, sizeof out, "out");
    }
    if (size < 1) return 0;
#ifdef FUZZ_LORA_FAMILY
    int merge = data[0] & 1, which = (data[0] >> 1) & 3;
    fz_fixture_restore(&hf);
    if ((data[0] & 0xf8) == 0x08) {
        tr_model_config m;
        tr_hf_lora_import li;
        int rank = 0;
        double alpha, dropout;
        char targets[64];
        fz_fixture_restore(&peft);
        fz_fixture_apply(&peft, data + 1, size - 1);
        fz_rmtree(out);
        if (tr_hf_import_lora(hf.root, peft.root, out, &m, &li)) return 0;
        if (tr_checkpoint_read_lora(out, &rank, &alpha, &dropout, targets, sizeof targets) ||
            rank != li.rank || li.rank != li.peft_rank * li.blocks) {
            fprintf(stderr, "the import's lora line says rank %d; PEFT's %d in %d blocks\n", rank,
                    li.peft_rank, li.blocks);
            abort();
        }
        return 0;
    }
#else
    int merge = data[0] & 1, which = (data[0] >> 1) & 1;
#endif
    data++;
    size--;
    fz_fixture_restore(&adapters);
    fz_fixture_restore(&base);
    fz_fixture_apply(which == 1 ? &base : which == 2 ? &hf : &adapters, data, size);
    fz_rmtree(out);
    const tr_config *c = which >= 2 ? &cfg_hf : &cfg;
    tr_hf_export_options o = {.eos_token_id = -1, .model = &c->model};
    int iteration;
    if (tr_hf_export_lora(adapters.root, out, c, merge, &o, &iteration)) return 0;
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
        /* PEFT's A is (rank, in), B (out, rank) */
        if (!merge && (t->ndim != 2 || t->shape[strstr(t->name, "lora_A") ? 0 : 1] != RANK)) {
            fprintf(stderr, "adapter %s of a shape without the run's rank %d\n", t->name, RANK);
            abort();
        }
    }
    tr_st_close(f);
    return 0;
}
