/* GPT-2 as transformers stores it, against trident's tensors: the config, the names and the
 * layouts (hf.h states the mapping). */
#include "hf/hf_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ config.json */

static int config_error(const char *path, const char *key, const char *what)
{
    return tr_fail(TR_ERR_INVALID, "%s: %s %s", path, key, what);
}

/* A required integer in [1, 2^31 - 1]. */
static int get_size(json_t *root, const char *path, const char *key, int *out)
{
    json_t *v = json_object_get(root, key);
    if (!v)
        return config_error(path, key, "is missing (a GPT-2 config names n_layer, n_embd, "
                                       "n_head, n_positions and vocab_size)");
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 0x7fffffff)
        return config_error(path, key, "must be an integer in [1, 2147483647]");
    *out = (int)json_integer_value(v);
    return TR_OK;
}

/* A token id: absent or null -> -1. */
static int get_token(json_t *root, const char *path, const char *key, int *out)
{
    json_t *v = json_object_get(root, key);
    *out = -1;
    if (!v || json_is_null(v))
        return TR_OK;
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 0x7fffffff)
        return config_error(path, key, "must be a token id (an integer >= 0) or null");
    *out = (int)json_integer_value(v);
    return TR_OK;
}

/* An optional boolean that trident supports only at `want`. */
static int check_bool(json_t *root, const char *path, const char *key, int want, const char *why)
{
    json_t *v = json_object_get(root, key);
    if (!v)
        return TR_OK;
    if (!json_is_boolean(v))
        return config_error(path, key, "must be true or false");
    if (json_is_true(v) != want)
        return tr_fail(TR_ERR_INVALID, "%s: %s is %s; trident's GPT-2 %s", path, key,
                       want ? "false" : "true", why);
    return TR_OK;
}

/* model_type, architectures, activation, n_inner, epsilon: what trident's model is. */
static int check_architecture(json_t *root, const char *path, int n_embd)
{
    json_t *v = json_object_get(root, "model_type");
    if (v && (!json_is_string(v) || strcmp(json_string_value(v), "gpt2")))
        return config_error(path, "model_type", "is not \"gpt2\", \"llama\", \"mistral\", "
                                                "\"qwen2\", \"bloom\", \"gpt_neox\", \"falcon\" "
                                                "or \"phi\" (the families trident converts)");
    if ((v = json_object_get(root, "architectures")) && !json_is_null(v)) {
        int ok = 0;
        for (size_t i = 0; json_is_array(v) && i < json_array_size(v); i++) {
            const char *a = json_string_value(json_array_get(v, i));
            ok |= a && (!strcmp(a, "GPT2LMHeadModel") || !strcmp(a, "GPT2Model"));
        }
        if (!ok)
            return config_error(path, "architectures", "names neither GPT2LMHeadModel nor "
                                                       "GPT2Model");
    }
    v = json_object_get(root, "activation_function");
    if (v && (!json_is_string(v) || (strcmp(json_string_value(v), "gelu_new") &&
                                     strcmp(json_string_value(v), "gelu_pytorch_tanh"))))
        return config_error(path, "activation_function", "must be \"gelu_new\" or "
                            "\"gelu_pytorch_tanh\" (trident's MLP uses the tanh GELU)");
    v = json_object_get(root, "n_inner");
    if (v && !json_is_null(v) && (!json_is_integer(v) || json_integer_value(v) != 4LL * n_embd))
        return config_error(path, "n_inner", "must be null or 4 x n_embd (trident's MLP is 4h)");
    v = json_object_get(root, "layer_norm_epsilon");
    if (v && (!json_is_number(v) || !(fabs(json_number_value(v) - 1e-5) <= 1e-12)))
        return config_error(path, "layer_norm_epsilon", "must be 1e-5 (trident checkpoints do "
                                                        "not record another)");
    return TR_OK;
}

int tr_hf_read_gpt2_config(const char *dir, tr_hf_gpt2_config *out)
{
    char path[4200];
    json_t *root = NULL;
    int rc = hf_load_config(dir, path, sizeof path, &root);
    if (rc)
        return rc;
    tr_hf_gpt2_config c = {0};
    if (!json_is_object(root))
        rc = tr_fail(TR_ERR_INVALID, "%s: not a JSON object", path);
    if (!rc)
        rc = get_size(root, path, "n_layer", &c.n_layer);
    if (!rc)
        rc = get_size(root, path, "n_embd", &c.n_embd);
    if (!rc)
        rc = get_size(root, path, "n_head", &c.n_head);
    if (!rc)
        rc = get_size(root, path, "n_positions", &c.n_positions);
    if (!rc)
        rc = get_size(root, path, "vocab_size", &c.vocab_size);
    if (!rc && c.n_embd > (1 << 26)) /* 4 n_embd and trident's row counts stay ints */
        rc = config_error(path, "n_embd", "is above 67108864");
    if (!rc && c.n_embd % c.n_head)
        rc = tr_fail(TR_ERR_INVALID, "%s: n_embd %d is not a multiple of n_head %d", path,
                     c.n_embd, c.n_head);
    if (!rc)
        rc = check_architecture(root, path, c.n_embd);
    if (!rc)
        rc = check_bool(root, path, "scale_attn_weights", 1, "scales attention by 1/sqrt(d)");
    if (!rc)
        rc = check_bool(root, path, "scale_attn_by_inverse_layer_idx", 0,
                        "does not scale attention by the layer");
    if (!rc)
        rc = check_bool(root, path, "add_cross_attention", 0, "has no cross-attention");
    if (!rc)
        rc = check_bool(root, path, "tie_word_embeddings", 1, "ties the head to wte");
    if (!rc)
        rc = get_token(root, path, "bos_token_id", &c.bos_token_id);
    if (!rc)
        rc = get_token(root, path, "eos_token_id", &c.eos_token_id);
    json_decref(root);
    if (!rc)
        *out = c;
    return rc;
}

void tr_hf_gpt2_model_config(const tr_hf_gpt2_config *c, tr_model_config *m)
{
    m->num_layers = c->n_layer;
    m->hidden_size = c->n_embd;
    m->num_attention_heads = c->n_head;
    m->vocab_size = c->vocab_size;
    m->max_position_embeddings = c->n_positions;
    m->layernorm_epsilon = 1e-5;
}

/* ------------------------------------------------------------------ names */

static const struct {
    const char *trident, *hf;
    tr_hf_layout layout;
} layer_names[] = {
    {"ln1.weight", "ln_1.weight", TR_HF_SAME},
    {"ln1.bias", "ln_1.bias", TR_HF_SAME},
    {"qkv.weight", "attn.c_attn.weight", TR_HF_QKV_W},
    {"qkv.bias", "attn.c_attn.bias", TR_HF_QKV_B},
    {"attn_proj.weight", "attn.c_proj.weight", TR_HF_TRANSPOSE},
    {"attn_proj.bias", "attn.c_proj.bias", TR_HF_SAME},
    {"ln2.weight", "ln_2.weight", TR_HF_SAME},
    {"ln2.bias", "ln_2.bias", TR_HF_SAME},
    {"fc.weight", "mlp.c_fc.weight", TR_HF_TRANSPOSE},
    {"fc.bias", "mlp.c_fc.bias", TR_HF_SAME},
    {"fc_proj.weight", "mlp.c_proj.weight", TR_HF_TRANSPOSE},
    {"fc_proj.bias", "mlp.c_proj.bias", TR_HF_SAME},
};
enum { N_LAYER_NAMES = sizeof layer_names / sizeof layer_names[0] };

int tr_hf_gpt2_map(const tr_param_tensor *t, int V, tr_hf_tensor_map *out)
{
    memset(out, 0, sizeof *out);
    const char *hf = NULL;
    int layer = -1, used = 0;
    out->layout = TR_HF_SAME;
    if (!strcmp(t->name, "wte"))
        hf = "wte.weight";
    else if (!strcmp(t->name, "wpe"))
        hf = "wpe.weight";
    else if (!strcmp(t->name, "lnf.weight"))
        hf = "ln_f.weight";
    else if (!strcmp(t->name, "lnf.bias"))
        hf = "ln_f.bias";
    else if (sscanf(t->name, "layers.%d.%n", &layer, &used) == 1 && used > 0)
        for (int i = 0; i < N_LAYER_NAMES && !hf; i++)
            if (!strcmp(t->name + used, layer_names[i].trident))
                hf = layer_names[i].hf, out->layout = layer_names[i].layout;
    if (!hf)
        return tr_fail(TR_ERR_INTERNAL, "no GPT-2 name for trident tensor '%s'", t->name);
    if (layer >= 0)
        snprintf(out->name, sizeof out->name, "transformer.h.%d.%s", layer, hf);
    else
        snprintf(out->name, sizeof out->name, "transformer.%s", hf);
    uint64_t rows = t->vocab_rows ? (uint64_t)V : (uint64_t)t->full_rows;
    uint64_t cols = (uint64_t)t->full_cols;
    if (cols == 1) { /* vectors */
        out->ndim = 1;
        out->shape[0] = rows;
    } else if (out->layout == TR_HF_SAME) {
        out->ndim = 2;
        out->shape[0] = rows, out->shape[1] = cols;
    } else { /* Conv1D: [in, out] */
        out->ndim = 2;
        out->shape[0] = cols, out->shape[1] = rows;
    }
    return TR_OK;
}

/* ------------------------------------------------------------------ layouts */

/* dst (C x R) gets src (R x C) transposed, with source row i going to column rmap[i] and
 * source column j to row cmap[j] (NULL: the identity). Tiles of 32 x 32, each written along
 * dst's rows. */
static void transpose(const float *src, size_t R, size_t C, float *dst, const size_t *rmap,
                      const size_t *cmap)
{
    enum { TILE = 32 };
    size_t to_col[TILE];
    for (size_t i0 = 0; i0 < R; i0 += TILE) {
        size_t i1 = i0 + TILE < R ? i0 + TILE : R;
        for (size_t i = i0; i < i1; i++)
            to_col[i - i0] = rmap ? rmap[i] : i;
        for (size_t j0 = 0; j0 < C; j0 += TILE) {
            size_t j1 = j0 + TILE < C ? j0 + TILE : C;
            for (size_t j = j0; j < j1; j++) {
                float *row = dst + (cmap ? cmap[j] : j) * R;
                for (size_t i = i0; i < i1; i++)
                    row[to_col[i - i0]] = src[i * C + j];
            }
        }
    }
}

/* to_trident[j]: trident's qkv row of HF's c_attn output j ([Q|K|V], each (head, d)), or the
 * inverse; rows (head, {q,k,v}, d). n = 3C entries. */
static size_t *qkv_permutation(size_t C, int n_head, int to_trident)
{
    size_t HS = C / (size_t)n_head, *map = malloc(3 * C * sizeof *map);
    if (!map) {
        tr_fail(TR_ERR_NOMEM, "out of memory for the qkv permutation");
        return NULL;
    }
    for (size_t j = 0; j < 3 * C; j++) {
        size_t p = j / C, h = (j % C) / HS, d = j % HS, r = h * 3 * HS + p * HS + d;
        if (to_trident)
            map[j] = r;
        else
            map[r] = j;
    }
    return map;
}

int tr_hf_to_trident(const tr_hf_tensor_map *m, const tr_param_tensor *t, int n_head,
                     const float *hf, float *dst)
{
    size_t R = (size_t)t->full_rows, C = (size_t)t->full_cols;
    if (m->layout == TR_HF_SAME) {
        memcpy(dst, hf, m->shape[0] * (m->ndim == 2 ? m->shape[1] : 1) * sizeof(float));
    } else if (m->layout == TR_HF_TRANSPOSE) {
        transpose(hf, C, R, dst, NULL, NULL);
    } else {
        size_t *map = qkv_permutation(m->layout == TR_HF_QKV_W ? C : R / 3, n_head, 1);
        if (!map)
            return TR_ERR_NOMEM;
        if (m->layout == TR_HF_QKV_W)
            transpose(hf, C, R, dst, NULL, map);
        else
            for (size_t j = 0; j < R; j++)
                dst[map[j]] = hf[j];
        free(map);
    }
    return TR_OK;
}

int tr_hf_from_trident(const tr_hf_tensor_map *m, const tr_param_tensor *t, int n_head,
                       const float *src, float *hf)
{
    size_t R = (size_t)t->full_rows, C = (size_t)t->full_cols;
    if (m->layout == TR_HF_SAME) {
        memcpy(hf, src, m->shape[0] * (m->ndim == 2 ? m->shape[1] : 1) * sizeof(float));
    } else if (m->layout == TR_HF_TRANSPOSE) {
        transpose(src, R, C, hf, NULL, NULL);
    } else {
        size_t *map = qkv_permutation(m->layout == TR_HF_QKV_W ? C : R / 3, n_head, 0);
        if (!map)
            return TR_ERR_NOMEM;
        if (m->layout == TR_HF_QKV_W)
            transpose(src, R, C, hf, map, NULL);
        else
            for (size_t r = 0; r < R; r++)
                hf[map[r]] = src[r];
        free(map);
    }
    return TR_OK;
}
