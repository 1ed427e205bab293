/* LoRA adapters of a trident fine-tuning run out to Hugging Face (issue 20, item 3):
 *  - PEFT's format (adapter_config.json + adapter_model.safetensors) that peft 0.7.1 loads
 *    onto the base model's GPT2LMHeadModel: trident's "layers.L.qkv.lora_A" (r, C) is
 *    base_model.model.transformer.h.L.attn.c_attn.lora_A.weight (r, C), lora_B (3C, r) with
 *    its rows from (head, {q, k, v}, d) to ({q, k, v}, head, d) as c_attn's columns;
 *    attn_proj, fc, fc_proj are attn.c_proj, mlp.c_fc, mlp.c_proj in the same layout
 *    (Conv1D: fan_in_fan_out);
 *  - the merged model: W += (alpha / r) B A in trident's layout on the base (finetune.load),
 *    then written as `trident convert --to hf` writes a model (any family). */
#include "hf/hf_internal.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "train/train.h"

static const char *const lora_modules[4] = {"qkv", "attn_proj", "fc", "fc_proj"};
static const char *const gpt2_modules[4] = {"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"};

/* "layers.L.MODULE.lora_X" -> layer L, module index, X ('A' or 'B'); -1 when not one. */
static int parse_adapter(const char *name, int *layer, char *ab)
{
    char mod[32];
    if (sscanf(name, "layers.%d.%31[a-z_].lora_%c", layer, mod, ab) != 3)
        return -1;
    for (int m = 0; m < 4; m++)
        if (!strcmp(mod, lora_modules[m]))
            return m;
    return -1;
}

/* hf (rows, r) from trident's (rows, r) lora_B of the qkv: rows (h, qkv, d) -> (qkv, h, d) */
static void qkv_rows(const float *src, float *hf, int NH, int HS, int r)
{
    for (int h = 0; h < NH; h++)
        for (int q = 0; q < 3; q++)
            for (int d = 0; d < HS; d++)
                memcpy(hf + ((size_t)(q * NH + h) * HS + d) * r,
                       src + ((size_t)(h * 3 + q) * HS + d) * r, (size_t)r * sizeof(float));
}

int tr_hf_write_lora_adapter(const char *dir, tr_gpt *g, const float *params)
{
    const tr_gpt_shape *s = tr_gpt_get_shape(g);
    if (!s->lora_rank)
        return tr_fail(TR_ERR_INVALID, "the model has no LoRA adapters");
    if (!tr_gpt_is_gpt2(s))
        return tr_fail(TR_ERR_INVALID, "PEFT adapters of Llama and Bloom models are not "
                       "implemented yet (GPT-2 only); --merge-lora exports any family");
    if (s->tp_size != 1 || !s->is_first || !s->is_last)
        return tr_fail(TR_ERR_INVALID, "adapters are written from a whole model (one stage, TP 1)");
    int n = tr_gpt_num_tensors(g), HS = s->C / s->NH;
    char (*names)[96] = calloc((size_t)n + 1, sizeof *names);
    tr_st_tensor *list = calloc((size_t)n + 1, sizeof *list);
    size_t most = 0;
    int rc = names && list ? TR_OK : tr_fail(TR_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n && !rc; i++) {
        const tr_param_tensor *t = tr_gpt_tensor(g, i);
        int layer;
        char ab;
        int m = parse_adapter(t->name, &layer, &ab);
        if (m < 0) {
            rc = tr_fail(TR_ERR_INVALID, "tensor %s is not a LoRA adapter", t->name);
            break;
        }
        snprintf(names[i], sizeof names[i], "base_model.model.transformer.h.%d.%s.lora_%c.weight",
                 layer, gpt2_modules[m], ab);
        list[i] = (tr_st_tensor){.name = names[i], .dtype = TR_ST_F32, .ndim = 2,
                                 .shape = {(uint64_t)t->rows, (uint64_t)t->cols}};
        most = t->numel > most ? t->numel : most;
    }
    static const char *const meta[] = {"format", "pt", NULL};
    tr_st_writer *w = NULL;
    float *hf = rc ? NULL : malloc(most * sizeof(float) + 1);
    if (!rc && !hf)
        rc = tr_fail(TR_ERR_NOMEM, "out of memory");
    char path[4300];
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    if (!rc)
        rc = tr_st_create(path, list, (size_t)n, meta, &w);
    for (int i = 0; i < n && !rc; i++) {
        const tr_param_tensor *t = tr_gpt_tensor(g, i);
        int layer;
        char ab;
        if (parse_adapter(t->name, &layer, &ab) == 0 && ab == 'B') {
            qkv_rows(params + t->offset, hf, s->NH, HS, t->cols);
            rc = tr_st_put_f32(w, hf);
        } else {
            rc = tr_st_put_f32(w, params + t->offset);
        }
    }
    if (w)
        rc = rc ? (tr_st_abort(w), rc) : tr_st_finish(w);
    free(hf);
    free(list);
    free(names);
    if (rc)
        return rc;
    json_t *targets = json_array();
    for (int m = 0; m < 4; m++)
        if (s->lora_targets & (1 << m))
            json_array_append_new(targets, json_string(gpt2_modules[m]));
    json_t *root = json_pack(
        "{s:n, s:s, s:s, s:i, s:f, s:f, s:o, s:b, s:s, s:b, s:b, s:n, s:n, s:n, s:{}, s:{}, s:n,"
        " s:n}",
        "base_model_name_or_path", "peft_type", "LORA", "task_type", "CAUSAL_LM", "r",
        s->lora_rank, "lora_alpha", (double)s->lora_alpha, "lora_dropout", 0.0, "target_modules",
        targets, "fan_in_fan_out", 1, "bias", "none", "inference_mode", 1, "init_lora_weights", 1,
        "modules_to_save", "layers_to_transform", "layers_pattern", "rank_pattern",
        "alpha_pattern", "revision", "auto_mapping");
    char *text = root ? json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
    json_decref(root);
    if (!text)
        return tr_fail(TR_ERR_NOMEM, "out of memory writing adapter_config.json");
    rc = hf_write_text(dir, "adapter_config.json", text);
    free(text);
    return rc;
}

int tr_hf_merge_lora(tr_gpt *g, tr_gpt *plain, float *plain_params)
{
    const tr_gpt_shape *s = tr_gpt_get_shape(g);
    if (tr_gpt_num_base_tensors(g) != tr_gpt_num_tensors(plain))
        return tr_fail(TR_ERR_INVALID, "the merged model's tensors are not the base's");
    for (int i = 0; i < tr_gpt_num_tensors(plain); i++) { /* the base, as loaded */
        const tr_param_tensor *b = tr_gpt_base_tensor(g, i), *p = tr_gpt_tensor(plain, i);
        if (b->numel != p->numel || strcmp(b->name, p->name))
            return tr_fail(TR_ERR_INVALID, "base tensor %s does not match %s", b->name, p->name);
        memcpy(plain_params + p->offset, b->param, p->numel * sizeof(float));
    }
    float scale = s->lora_alpha / (float)s->lora_rank;
    const tr_kernels *k = tr_kernels_cpu();
    for (int i = 0; i + 1 < tr_gpt_num_tensors(g); i += 2) { /* A then B of each target */
        const tr_param_tensor *A = tr_gpt_tensor(g, i), *B = tr_gpt_tensor(g, i + 1);
        int layer, mA, mB;
        char ab;
        mA = parse_adapter(A->name, &layer, &ab);
        mB = parse_adapter(B->name, &layer, &ab);
        if (mA < 0 || mA != mB)
            return tr_fail(TR_ERR_INVALID, "adapter tensors %s, %s out of order", A->name, B->name);
        char wname[48];
        snprintf(wname, sizeof wname, "layers.%d.%s.weight", layer, lora_modules[mA]);
        const tr_param_tensor *W = NULL;
        for (int j = 0; j < tr_gpt_num_tensors(plain) && !W; j++)
            if (!strcmp(tr_gpt_tensor(plain, j)->name, wname))
                W = tr_gpt_tensor(plain, j);
        if (!W || W->rows != B->rows || W->cols != A->cols)
            return tr_fail(TR_ERR_INVALID, "no base weight %s of %d x %d for its adapter", wname,
                           B->rows, A->cols);
        /* W (out, in) += scale * B (out, r) @ A (r, in) */
        k->gemm(NULL, 0, 0, W->rows, W->cols, A->rows, scale, B->param, B->cols, A->param,
                A->cols, 1.0f, plain_params + W->offset, W->cols);
    }
    return TR_OK;
}
