/* LoRA adapters of a trident fine-tuning run out to Hugging Face (issue 20, item 3):
 *  - PEFT's format (adapter_config.json + adapter_model.safetensors) that peft 0.7.1 loads
 *    onto the base model. GPT-2: trident's "layers.L.qkv.lora_A" (r, C) is
 *    base_model.model.transformer.h.L.attn.c_attn.lora_A.weight (r, C), lora_B (3C, r) with
 *    its rows from (head, {q, k, v}, d) to ({q, k, v}, head, d) as c_attn's columns;
 *    attn_proj, fc, fc_proj are attn.c_proj, mlp.c_fc, mlp.c_proj in the same layout
 *    (Conv1D: fan_in_fan_out); GPT-BigCode: GPT-2's names, every adapter in trident's layout
 *    (nn.Linear; c_attn's rows are trident's qkv rows). Bloom: query_key_value, dense,
 *    dense_h_to_4h, dense_4h_to_h, all in trident's layout; GPT-NeoX: the same under
 *    gpt_neox.layers.L (attention.*, mlp.*); Falcon: Bloom's names
 *    (transformer.h.L.self_attention.*, mlp.*); Phi: Llama's q_proj, k_proj, v_proj, then
 *    self_attn.dense, mlp.fc1, mlp.fc2 as they are; GPT-J: transformer.h.L.attn.q_proj,
 *    k_proj, v_proj cut as a Llama's with q's and k's rotary rows of each head interleaved as
 *    the import reads them (hf_gptj_rotary_row), then attn.out_proj, mlp.fc_in, mlp.fc_out as
 *    they are; MPT: transformer.blocks.L.attn.Wqkv (lora_B's rows as GPT-2's c_attn's:
 *    ({q, k, v}, head, d), nn.Linear: no fan_in_fan_out), attn.out_proj, ffn.up_proj,
 *    ffn.down_proj as they are; OPT: model.decoder.layers.L.self_attn.q_proj, k_proj, v_proj cut
 *    as a Llama's, then self_attn.out_proj, fc1, fc2 as they are; Phi-3: the fused qkv's
 *    adapter is one on self_attn.qkv_proj (lora_B's rows [Q | K | V] as the weight's), fc's
 *    one on mlp.gate_up_proj (lora_B's rows [gate | up]), o_proj, down_proj. Llama: the
 *    fused qkv's adapter becomes q_proj, k_proj and v_proj with the same A each and B's rows
 *    of each projection (from (group, {q.., k, v}, d)), fc's becomes gate_proj and up_proj
 *    (B's rows from (feature, {gate, up})): the same function, exactly;
 *  - the merged model: W += (alpha / r) B A in trident's layout on the base (finetune.load),
 *    then written as `trident convert --to hf` writes a model (any family). */
#include "hf/hf_internal.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "train/train.h"

static const char *const lora_modules[4] = {"qkv", "attn_proj", "fc", "fc_proj"};

int hf_lora_parse(const char *name, int *layer, char *ab)
{
    char mod[32];
    if (sscanf(name, "layers.%d.%31[a-z_].lora_%c", layer, mod, ab) != 3)
        return -1;
    for (int m = 0; m < 4; m++)
        if (!strcmp(mod, lora_modules[m]))
            return m;
    return -1;
}

/* trident row of PEFT row h of part p (see hf_lora_part's kind) */
size_t hf_lora_row(const tr_gpt_shape *s, const hf_lora_part *p, size_t h)
{
    int NH = s->NH, HS = tr_gpt_head_size(s), NG = s->query_groups ? s->query_groups : NH;
    int R = NH / NG;
    if (p->kind == 1) /* HF [Q (NH heads) | K | V (NG each)] <- trident (group, {q.., k, v}, d) */
        return (size_t)hf_fused_qkv_row(h, s);
    if (p->kind == 5) /* HF [gate | up] <- trident (f, {gate, up}) */
        return (size_t)hf_fused_swiglu_row(h, s);
    if (p->kind == 2 || p->kind == 4) { /* q_proj (head, d), k/v_proj (group, d) <- (group,
                                          * {q.., k, v}, d) */
        if (p->kind == 4 && p->part < 2) /* GPT-J's rotate_every_two pairs */
            h = h - h % HS + (size_t)hf_gptj_rotary_row(h % HS, s->rotary_dims);
        return (size_t)hf_qkv_row(h, p->part, HS, R);
    }
    if (p->kind == 3) /* gate / up rows f <- trident (f, {gate, up}) */
        return 2 * h + (size_t)p->part;
    return h;
}

int hf_lora_family(const tr_gpt_shape *s)
{
    /* (the parallel residual: GPT-NeoX's and Falcon's; the exact GELU not Bloom's; Falcon:
     * what GPT-NeoX cannot be, tr_hf_family_of's rule) */
    int seq = !s->parallel_residual;
    int shape = hf_shape_family(s);
    return shape == TR_HF_PHI3 ? HF_LORA_PHI3
           : s->hf_phi3 ? -1
           : s->no_norm_bias ? (shape == TR_HF_MPT ? HF_LORA_MPT : -1)
           : s->relu ? (shape == TR_HF_OPT ? HF_LORA_OPT : -1)
           : tr_gpt_is_gpt2(s) ? HF_LORA_GPT2
           : shape == TR_HF_BIGCODE ? HF_LORA_BIGCODE
           : shape == TR_HF_OPT ? HF_LORA_OPT
           : shape == TR_HF_GPTJ ? HF_LORA_GPTJ
           : shape == TR_HF_GEMMA ? HF_LORA_LLAMA /* (Llama's names) */
           : shape == TR_HF_MISTRAL && s->kv_channels ? HF_LORA_LLAMA /* (head_dim) */
           : s->kv_channels || s->layernorm_1p || s->embedding_multiplier || s->geglu ? -1
           : shape == TR_HF_FALCON ? HF_LORA_FALCON
           : shape == TR_HF_PHI ? HF_LORA_PHI
           : shape == TR_HF_STABLELM ? HF_LORA_LLAMA /* (the Llama's names) */
           : s->position == TR_POS_ROPE && s->rmsnorm && s->swiglu && seq ? HF_LORA_LLAMA
           : s->position == TR_POS_ALIBI && seq && !s->gelu_exact ? HF_LORA_BLOOM
           : s->position == TR_POS_ROPE && !s->rmsnorm && !s->swiglu && !s->parallel_shared_norm
               ? HF_LORA_NEOX
               : -1;
}

static const char *const gpt2[4] = {"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"};
static const char *const bloom[4] = {"self_attention.query_key_value", "self_attention.dense",
                                     "mlp.dense_h_to_4h", "mlp.dense_4h_to_h"};
static const char *const neox[4] = {"attention.query_key_value", "attention.dense",
                                    "mlp.dense_h_to_4h", "mlp.dense_4h_to_h"};
static const char *const llama_qkv[3] = {"q_proj", "k_proj", "v_proj"};
static const char *const phi[4] = {"", "dense", "fc1", "fc2"}; /* (qkv: llama_qkv) */
static const char *const gptj[4] = {"", "out_proj", "fc_in", "fc_out"}; /* (attn., mlp.) */
static const char *const mpt[4] = {"attn.Wqkv", "attn.out_proj", "ffn.up_proj",
                                   "ffn.down_proj"};
static const char *const opt[4] = {"", "out_proj", "fc1", "fc2"}; /* (self_attn.: qkv, 1) */
static const char *const phi3[4] = {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"};

int hf_lora_parts(const tr_gpt_shape *s, int fam, int layer, int m, char ab, int rows,
                  hf_lora_part out[3])
{
    int HS = tr_gpt_head_size(s), NG = s->query_groups ? s->query_groups : s->NH;
    int parts = (fam == HF_LORA_LLAMA || fam == HF_LORA_PHI || fam == HF_LORA_GPTJ ||
                 fam == HF_LORA_OPT) && m == 0
                    ? 3
                : fam == HF_LORA_LLAMA && m == 2 ? 2
                                                 : 1;
    for (int k = 0; k < parts; k++) {
        hf_lora_part *p = &out[k];
        *p = (hf_lora_part){.rows = rows, .part = k};
        if (fam == HF_LORA_GPT2 || fam == HF_LORA_BIGCODE) { /* (BigCode's: trident's rows) */
            snprintf(p->name, sizeof p->name, "base_model.model.transformer.h.%d.%s.lora_%c.weight",
                     layer, gpt2[m], ab);
            p->kind = fam == HF_LORA_GPT2 && m == 0 && ab == 'B';
        } else if (fam == HF_LORA_MPT) { /* Wqkv's B rows ({q, k, v}, head, d) as GPT-2's */
            snprintf(p->name, sizeof p->name,
                     "base_model.model.transformer.blocks.%d.%s.lora_%c.weight", layer, mpt[m], ab);
            p->kind = m == 0 && ab == 'B';
        } else if (fam == HF_LORA_BLOOM || fam == HF_LORA_FALCON) {
            snprintf(p->name, sizeof p->name, "base_model.model.transformer.h.%d.%s.lora_%c.weight",
                     layer, bloom[m], ab);
        } else if (fam == HF_LORA_GPTJ) { /* q/k/v_proj cut as a Llama's, the rest as is */
            snprintf(p->name, sizeof p->name,
                     "base_model.model.transformer.h.%d.%s.%s.lora_%c.weight", layer,
                     m < 2 ? "attn" : "mlp", m == 0 ? llama_qkv[k] : gptj[m], ab);
            if (ab == 'B' && m == 0)
                p->kind = 4, p->rows = s->C;
        } else if (fam == HF_LORA_OPT) { /* q/k/v_proj cut as a Llama's, the rest as is */
            snprintf(p->name, sizeof p->name,
                     "base_model.model.model.decoder.layers.%d.%s%s.lora_%c.weight", layer,
                     m < 2 ? "self_attn." : "", m == 0 ? llama_qkv[k] : opt[m], ab);
            if (ab == 'B' && m == 0)
                p->kind = 2, p->rows = s->C;
        } else if (fam == HF_LORA_PHI3) { /* B's rows as the fused weights' */
            snprintf(p->name, sizeof p->name,
                     "base_model.model.model.layers.%d.%s.%s.lora_%c.weight", layer,
                     m < 2 ? "self_attn" : "mlp", phi3[m], ab);
            p->kind = ab != 'B' ? 0 : m == 0 ? 1 : m == 2 ? 5 : 0;
        } else if (fam == HF_LORA_NEOX) {
            snprintf(p->name, sizeof p->name,
                     "base_model.model.gpt_neox.layers.%d.%s.lora_%c.weight", layer, neox[m], ab);
        } else {
            const char *mod = m == 0               ? llama_qkv[k]
                              : fam == HF_LORA_PHI ? phi[m]
                              : m == 1             ? "o_proj"
                              : m == 2             ? (k ? "up_proj" : "gate_proj")
                                                   : "down_proj";
            snprintf(p->name, sizeof p->name, "base_model.model.model.layers.%d.%s.%s.lora_%c.weight",
                     layer, m < 2 ? "self_attn" : "mlp", mod, ab);
            if (ab == 'B' && m == 0) { /* each projection's rows of the fused qkv */
                p->kind = 2;
                p->rows = (k == 0 ? s->NH : NG) * HS;
            } else if (ab == 'B' && m == 2 && fam == HF_LORA_LLAMA) {
                p->kind = 3;
                p->rows = rows / 2;
            } /* A: the fused layer's one A, the same for each projection */
        }
    }
    return parts;
}

int tr_hf_write_lora_adapter(const char *dir, tr_gpt *g, const float *params)
{
    const tr_gpt_shape *s = tr_gpt_get_shape(g);
    if (!s->lora_rank)
        return tr_fail(TR_ERR_INVALID, "the model has no LoRA adapters");
    if (s->tp_size != 1 || !s->is_first || !s->is_last)
        return tr_fail(TR_ERR_INVALID, "adapters are written from a whole model (one stage, TP 1)");
    int fam = hf_lora_family(s);
    if (fam < 0)
        return tr_fail(TR_ERR_INVALID, "PEFT adapters are written for GPT-2, Llama, Bloom, "
                       "GPT-NeoX, Falcon, Phi, StableLM, Gemma, GPTBigCode, GPT-J, MPT, OPT, "
                       "Phi3 and Mistral models; "
                       "this model's switches are none of them");
    int n = tr_gpt_num_tensors(g);
    /* one tensor of PEFT's file: rows of trident adapter t (all, or picked by hf_lora_row) */
    struct peft_tensor {
        hf_lora_part p;
        const tr_param_tensor *t;
    } *list = calloc((size_t)3 * n + 1, sizeof *list);
    int np = 0, rc = list ? TR_OK : tr_fail(TR_ERR_NOMEM, "out of memory");
    size_t most = 0;
    for (int i = 0; i < n && !rc; i++) {
        const tr_param_tensor *t = tr_gpt_tensor(g, i);
        int layer;
        char ab;
        int m = hf_lora_parse(t->name, &layer, &ab);
        if (m < 0) {
            rc = tr_fail(TR_ERR_INVALID, "tensor %s is not a LoRA adapter", t->name);
            break;
        }
        most = t->numel > most ? t->numel : most;
        hf_lora_part parts[3];
        int k = hf_lora_parts(s, fam, layer, m, ab, t->rows, parts);
        for (int j = 0; j < k; j++)
            list[np++] = (struct peft_tensor){.p = parts[j], .t = t};
    }
    tr_st_tensor *st = rc ? NULL : calloc((size_t)np + 1, sizeof *st);
    if (!rc && !st)
        rc = tr_fail(TR_ERR_NOMEM, "out of memory");
    for (int i = 0; i < np && !rc; i++)
        st[i] = (tr_st_tensor){.name = list[i].p.name, .dtype = TR_ST_F32, .ndim = 2,
                               .shape = {(uint64_t)list[i].p.rows, (uint64_t)list[i].t->cols}};
    static const char *const meta[] = {"format", "pt", NULL};
    tr_st_writer *w = NULL;
    float *hf = rc ? NULL : malloc(most * sizeof(float) + 1);
    if (!rc && !hf)
        rc = tr_fail(TR_ERR_NOMEM, "out of memory");
    char path[4300];
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    if (!rc)
        rc = tr_st_create(path, st, (size_t)np, meta, &w);
    for (int i = 0; i < np && !rc; i++) {
        const hf_lora_part *p = &list[i].p;
        const tr_param_tensor *t = list[i].t;
        int c = t->cols;
        for (int h = 0; h < p->rows; h++)
            memcpy(hf + (size_t)h * c, params + t->offset + hf_lora_row(s, p, (size_t)h) * c,
                   (size_t)c * sizeof(float));
        rc = tr_st_put_f32(w, hf);
    }
    if (w)
        rc = rc ? (tr_st_abort(w), rc) : tr_st_finish(w);
    free(hf);
    free(st);
    free(list);
    if (rc)
        return rc;
    static const char *const llama_mods[4][3] = {{"q_proj", "k_proj", "v_proj"}, {"o_proj"},
                                                 {"gate_proj", "up_proj"}, {"down_proj"}};
    json_t *targets = json_array();
    for (int m = 0; m < 4; m++)
        if (s->lora_targets & (1 << m)) {
            if (fam != HF_LORA_LLAMA &&
                !((fam == HF_LORA_PHI || fam == HF_LORA_GPTJ || fam == HF_LORA_OPT) && m == 0))
                json_array_append_new(targets, json_string(fam == HF_LORA_GPT2 || fam == HF_LORA_BIGCODE
                                                               ? gpt2[m]
                                                           : fam == HF_LORA_NEOX ? neox[m]
                                                           : fam == HF_LORA_PHI  ? phi[m]
                                                           : fam == HF_LORA_GPTJ ? gptj[m]
                                                           : fam == HF_LORA_MPT  ? mpt[m]
                                                           : fam == HF_LORA_OPT  ? opt[m]
                                                           : fam == HF_LORA_PHI3 ? phi3[m]
                                                                             : bloom[m]));
            else
                for (int k = 0; k < 3 && llama_mods[m][k]; k++)
                    json_array_append_new(targets, json_string(llama_mods[m][k]));
        }
    /* the run's finetune.lora.dropout (the shape's float) as its shortest decimal: 0.05 */
    char dtext[32];
    snprintf(dtext, sizeof dtext, "%.7g", (double)s->lora_dropout);
    double dropout = strtod(dtext, NULL);
    json_t *root = json_pack(
        "{s:n, s:s, s:s, s:i, s:f, s:f, s:o, s:b, s:s, s:b, s:b, s:n, s:n, s:n, s:{}, s:{}, s:n,"
        " s:n}",
        "base_model_name_or_path", "peft_type", "LORA", "task_type", "CAUSAL_LM", "r",
        s->lora_rank, "lora_alpha", (double)s->lora_alpha, "lora_dropout", dropout, "target_modules",
        targets, "fan_in_fan_out", fam == HF_LORA_GPT2, "bias", "none", "inference_mode", 1,
        "init_lora_weights", 1, "modules_to_save", "layers_to_transform", "layers_pattern",
        "rank_pattern", "alpha_pattern", "revision", "auto_mapping");
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
        mA = hf_lora_parse(A->name, &layer, &ab);
        mB = hf_lora_parse(B->name, &layer, &ab);
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
        /* finite adapters can still overflow: an infinite weight written without a word */
        const float *w = plain_params + W->offset;
        for (size_t j = 0; j < W->numel; j++)
            if (!isfinite(w[j]))
                return tr_fail(TR_ERR_INVALID, "merging %s and %s into %s gives %g at row %zu, "
                               "column %zu: the adapters (times lora alpha / rank = %g) or the "
                               "base hold values too large for a float", A->name, B->name, wname,
                               (double)w[j], j / (size_t)W->cols, j % (size_t)W->cols,
                               (double)scale);
    }
    return TR_OK;
}
