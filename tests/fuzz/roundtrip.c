/* Fuzz target roundtrip: a Hugging Face model folder, config.json "\n@@@\n" model.safetensors
 * (the import target's input), imported (tr_hf_import) and exported back (tr_hf_export, the
 * family from the checkpoint's manifest). What trident imports it must export: an import that
 * succeeds and an export that fails aborts, and every tensor of the input must come back as
 * the same float32 values (F16 and BF16 inputs: their float32 values), bit for bit, except
 * what the export leaves out on purpose (a tied lm_head or embed_out, rotary inv_freq and
 * GPT-2's and GPT-NeoX's causal-mask buffers); names the input gives without transformers'
 * prefix are looked for with it, a Falcon's that GPT-NeoX's export writes by GPT-NeoX's names.
 * OPT: embed_positions' first 2 rows (no position reads them) come back as zeros, the rest as
 * they were; an OPT that GPT-2 or GPT-BigCode expresses (GELU with biases) exports as that
 * family, whose tensors are compared by convert-opt-cli (exported, imported: the same
 * checkpoint), not here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hf/hf.h"
#include "fuzz.h"

/* a tensor an import reads or skips and the export need not write (GPT-NeoX's tied head
 * embed_out.weight, its causal-mask buffers attention.bias and attention.masked_bias) */
static int left_out(const char *name)
{
    return !strcmp(name, "lm_head.weight") || !strcmp(name, "embed_out.weight") ||
           strstr(name, "inv_freq") || strstr(name, "attn.bias") ||
           strstr(name, "attn.masked_bias") || strstr(name, "attention.bias") ||
           strstr(name, "attention.masked_bias");
}

/* A Falcon tensor's name in GPT-NeoX's form (into out; 0 when it has none): a Falcon with
 * biases and a key/value head per attention head, two norms or the sequential residual, is
 * GPT-NeoX's model too (rope over whole heads), which the export writes as GPTNeoXForCausalLM */
static int falcon_as_neox(const char *name, char *out, size_t cap)
{
    static const char *const pairs[][2] = {
        {"transformer.word_embeddings.", "gpt_neox.embed_in."},
        {"transformer.ln_f.", "gpt_neox.final_layer_norm."},
        {"lm_head.", "embed_out."},
        {"transformer.h.", "gpt_neox.layers."}};
    static const char *const parts[][2] = {
        {".ln_attn.", ".input_layernorm."},
        {".ln_mlp.", ".post_attention_layernorm."},
        {".self_attention.", ".attention."}};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        size_t n = strlen(pairs[i][0]);
        if (strncmp(name, pairs[i][0], n)) continue;
        char mid[600];
        snprintf(mid, sizeof mid, "%s%s", pairs[i][1], name + n);
        for (size_t j = 0; j < sizeof parts / sizeof parts[0]; j++) {
            char *at = strstr(mid, parts[j][0]);
            if (!at) continue;
            char rest[600];
            snprintf(rest, sizeof rest, "%s", at + strlen(parts[j][0]));
            snprintf(at, sizeof mid - (size_t)(at - mid), "%s%s", parts[j][1], rest);
            break;
        }
        snprintf(out, cap, "%s", mid);
        return 1;
    }
    return 0;
}

/* the exported tensor of an input name, which the input may give without the model's prefix
 * (the export writes transformers' prefixed names), or a Falcon's as GPT-NeoX's */
static const tr_st_tensor *exported(const tr_st_file *b, const char *name)
{
    static const char *const prefixes[] = {"", "transformer.", "model."};
    char full[600], neox[700];
    for (int i = 0; i < 3; i++) {
        snprintf(full, sizeof full, "%s%s", prefixes[i], name);
        const tr_st_tensor *u = tr_st_find(b, full);
        if (u) return u;
        if (falcon_as_neox(full, neox, sizeof neox) && (u = tr_st_find(b, neox))) return u;
    }
    return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_write_hf_folder(data, size);
    char ckpt[1024], back[1024], in_st[1100], out_st[1100];
    fz_path(ckpt, sizeof ckpt, "ckpt");
    fz_path(back, sizeof back, "back");
    fz_rmtree(back);
    tr_model_config m;
    memset(&m, 0, sizeof m);
    if (tr_hf_import(fz_dir(), ckpt, &m)) return 0;
    tr_hf_export_options o = {.eos_token_id = -1};
    if (tr_hf_export(ckpt, back, &o, NULL)) {
        fprintf(stderr, "imported, but the export of the import failed: %s\n", tr_errmsg());
        abort();
    }
    snprintf(in_st, sizeof in_st, "%s/model.safetensors", fz_dir());
    snprintf(out_st, sizeof out_st, "%s/model.safetensors", back);
    tr_model_config mc;
    int fam_in = -1, fam_out = -1;
    if (tr_hf_read_family_config(fz_dir(), &mc, &fam_in)) abort(); /* the import read it */
    if (tr_hf_read_family_config(back, &mc, &fam_out)) {
        fprintf(stderr, "the export wrote a config.json it cannot read: %s\n", tr_errmsg());
        abort();
    }
    if (fam_in == TR_HF_OPT && fam_out != TR_HF_OPT) { /* (GPT-2's or GPT-BigCode's names) */
        FZ_IGNORE(tr_hf_remove_import(ckpt));
        fz_rmtree(back);
        return 0;
    }
    tr_st_file *a, *b;
    if (tr_st_open(in_st, &a)) abort(); /* the import read it */
    if (tr_st_open(out_st, &b)) {
        fprintf(stderr, "the export wrote no readable %s: %s\n", out_st, tr_errmsg());
        abort();
    }
    for (size_t i = 0; i < tr_st_count(a); i++) {
        const tr_st_tensor *t = tr_st_at(a, i), *u = exported(b, t->name);
        if (!u) {
            if (left_out(t->name)) continue;
            fprintf(stderr, "round trip: %s imported, not exported\n", t->name);
            abort();
        }
        if (u->numel != t->numel) {
            fprintf(stderr, "round trip: %s of %llu elements exported with %llu\n", t->name,
                    (unsigned long long)t->numel, (unsigned long long)u->numel);
            abort();
        }
        float *x = malloc(t->numel * sizeof(float) + 1), *y = malloc(u->numel * sizeof(float) + 1);
        if (!x || !y || tr_st_read_f32(a, t, x) || tr_st_read_f32(b, u, y)) abort();
        /* OPT's position rows 0 and 1: zeros in the export */
        size_t skip = fam_in == TR_HF_OPT && strstr(t->name, "embed_positions") && t->ndim == 2
                          ? 2 * (size_t)t->shape[1]
                          : 0;
        for (size_t k = 0; k < skip && k < u->numel; k++)
            x[k] = 0.0f;
        if (memcmp(x, y, t->numel * sizeof(float))) {
            fprintf(stderr, "round trip: %s exported with other values\n", t->name);
            abort();
        }
        free(x);
        free(y);
    }
    tr_st_close(a);
    tr_st_close(b);
    FZ_IGNORE(tr_hf_remove_import(ckpt));
    fz_rmtree(back);
    return 0;
}
