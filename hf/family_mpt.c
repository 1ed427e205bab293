/* MPT (MptForCausalLM of transformers 4.38: mosaicml/mpt-7b, mpt-30b) to and from a trident
 * model: config.json both ways, the tensors' names, which models are MPT. family.c and
 * family_config.c dispatch here (hf.h states the mapping).
 *
 * transformers 4.38's MptBlock: h = x + out_proj(attn(norm_1(x))), out = h +
 * down_proj(gelu(up_proj(norm_2(h)))) with the exact GELU, up_proj 4 d_model wide; every
 * LayerNorm without its bias (norm_1, norm_2, norm_f: bias None) and every nn.Linear without one
 * (Wqkv, out_proj, up_proj, down_proj: bias=False), whatever no_bias says; no position table:
 * ALiBi of alibi_bias_max 8 (build_mpt_alibi_tensor: for n heads of the power of two n2 >= n the
 * slopes 2^(-8 i / n2), i = 1 .. n2, odd i after even ones, the first n: Bloom's slopes, so
 * trident's ALiBi); lm_head tied to transformer.wte. Wqkv [3 d_model, d_model] (nn.Linear, [out,
 * in]) is [Q | K | V], each (head, d): permuted into trident's qkv rows (head, {q, k, v}, d)
 * (family.c FAM_QKV_FUSED). trident: LayerNorm with layernorm_bias false, alibi,
 * add_bias_linear false, gelu_approximate none, tied, no embedding norm. transformers 4.38 reads
 * neither expansion_ratio, alibi, alibi_bias_max, qk_ln, clip_qkv, attn_type nor no_bias (nor
 * logit_scale, prefix_lm, ffn_config): a config.json whose values of them would make the model
 * it was trained as another is refused naming the key, as softmax_scale other than
 * 1/sqrt(head_dim) (which it does read). */
#include "hf/hf_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ config.json */

/* attn_config (absent or null: MptAttentionConfig's defaults), hs the head size */
static int read_attn_config(json_t *root, const char *path, int heads, int hs)
{
    json_t *a = json_object_get(root, "attn_config");
    if (!a || json_is_null(a))
        return TR_OK;
    if (!json_is_object(a))
        return tr_fail(TR_ERR_INVALID, "%s: attn_config must be an object", path);
    json_t *v = json_object_get(a, "attn_type");
    if (v && !(json_is_string(v) && !strcmp(json_string_value(v), "multihead_attention")))
        return hf_refuse(path, "attn_config.attn_type other than \"multihead_attention\"",
                         "transformers 4.38's MptAttention has a key and value head per head");
    if ((v = json_object_get(a, "alibi")) && !json_is_true(v))
        return hf_refuse(path, "attn_config.alibi false",
                         "transformers 4.38's MPT always adds ALiBi (a model trained with "
                         "learned positions instead would be another model)");
    if ((v = json_object_get(a, "alibi_bias_max")) &&
        !(json_is_number(v) && json_number_value(v) == 8))
        return hf_refuse(path, "attn_config.alibi_bias_max other than 8",
                         "transformers 4.38's MPT and trident's ALiBi use slopes of 8");
    if ((v = json_object_get(a, "qk_ln")) && !json_is_false(v))
        return hf_refuse(path, "attn_config.qk_ln true",
                         "neither transformers 4.38's MPT nor trident normalises queries and keys");
    if ((v = json_object_get(a, "clip_qkv")) && !json_is_null(v))
        return hf_refuse(path, "attn_config.clip_qkv other than null",
                         "neither transformers 4.38's MPT nor trident clips q, k and v");
    if ((v = json_object_get(a, "prefix_lm")) && !json_is_false(v))
        return hf_refuse(path, "attn_config.prefix_lm true", "trident's attention is causal");
    if ((v = json_object_get(a, "softmax_scale")) && !json_is_null(v) &&
        !(json_is_number(v) && fabs(json_number_value(v) * sqrt((double)hs) - 1) < 1e-6))
        return hf_refuse(path, "attn_config.softmax_scale other than null or 1/sqrt(head_dim)",
                         "trident's attention scales the scores by 1/sqrt(head_dim)");
    if ((v = json_object_get(a, "kv_n_heads")) &&
        !(json_is_integer(v) && json_integer_value(v) == heads))
        return hf_refuse(path, "attn_config.kv_n_heads other than n_heads",
                         "transformers 4.38's MptAttention has a key and value head per head");
    return TR_OK;
}

int hf_read_mpt(json_t *root, const char *path, tr_model_config *m)
{
    /* (MptConfig's defaults for the others: max_seq_len 2048, expansion_ratio 4, epsilon 1e-5,
     * no_bias true, tied) */
    int rc = hf_get_int(root, path, "n_layers", -1, &m->num_layers);
    if (!rc)
        rc = hf_get_int(root, path, "d_model", -1, &m->hidden_size);
    if (!rc)
        rc = hf_get_int(root, path, "n_heads", -1, &m->num_attention_heads);
    if (!rc)
        rc = hf_get_int(root, path, "vocab_size", -1, &m->vocab_size);
    if (!rc)
        rc = hf_get_int(root, path, "max_seq_len", 2048, &m->max_position_embeddings);
    if (!rc)
        rc = hf_get_num(root, path, "layer_norm_epsilon", 1e-5, &m->layernorm_epsilon);
    if (!rc && m->hidden_size % m->num_attention_heads)
        rc = tr_fail(TR_ERR_INVALID, "%s: d_model %d is not divisible by n_heads %d (transformers' "
                     "MptAttention needs whole heads)", path, m->hidden_size,
                     m->num_attention_heads);
    json_t *v = json_object_get(root, "expansion_ratio");
    if (!rc && v && !(json_is_number(v) && json_number_value(v) == 4))
        rc = hf_refuse(path, "expansion_ratio other than 4",
                       "transformers 4.38's MptMLP is 4 d_model wide whatever it says");
    int no_bias = 1, tie = 1;
    if (!rc)
        rc = hf_get_bool(root, path, "no_bias", 1, &no_bias);
    if (!rc && !no_bias)
        rc = hf_refuse(path, "no_bias false", "transformers 4.38's MPT has no biases (its norms' "
                       "and linear layers' are None whatever no_bias says, and a checkpoint's "
                       "biases would be dropped)");
    if (!rc)
        rc = hf_get_bool(root, path, "tie_word_embeddings", 1, &tie);
    if (!rc && !tie)
        rc = hf_refuse(path, "tie_word_embeddings false",
                       "MptForCausalLM's lm_head is the word embedding");
    if (!rc && (v = json_object_get(root, "logit_scale")) && !json_is_null(v))
        rc = hf_refuse(path, "logit_scale other than null",
                       "transformers 4.38's MPT does not scale the logits");
    if (!rc && (v = json_object_get(root, "norm_type")) &&
        !(json_is_string(v) && (!strcmp(json_string_value(v), "low_precision_layernorm") ||
                                !strcmp(json_string_value(v), "layernorm"))))
        rc = hf_refuse(path, "norm_type other than \"low_precision_layernorm\" or \"layernorm\"",
                       "transformers 4.38's MPT and trident's use LayerNorm");
    json_t *ffn = json_object_get(root, "ffn_config");
    if (!rc && ffn && !json_is_null(ffn) &&
        !(json_is_object(ffn) &&
          (!(v = json_object_get(ffn, "ffn_type")) ||
           (json_is_string(v) && !strcmp(json_string_value(v), "mptmlp")))))
        rc = hf_refuse(path, "ffn_config.ffn_type other than \"mptmlp\"",
                       "transformers 4.38's MptMLP is up_proj, the exact GELU, down_proj");
    if (!rc)
        rc = read_attn_config(root, path, m->num_attention_heads,
                              m->hidden_size / m->num_attention_heads);
    m->num_query_groups = m->num_attention_heads;
    m->ffn_hidden_size = 4 * m->hidden_size;
    m->normalization = "LayerNorm";
    m->position_embedding_type = "alibi";
    m->rotary_base = 10000.0;
    m->rotary_percent = 1.0;
    m->swiglu = 0;
    m->untie_embeddings_and_output_weights = 0;
    m->add_bias_linear = 0;
    m->no_layernorm_bias = 1;
    m->embedding_layernorm = 0;
    m->parallel_residual = 0;
    m->gelu_approximate = "none";
    return rc;
}

double hf_mpt_numel(const tr_model_config *m)
{
    double C = m->hidden_size, V = m->vocab_size, L = m->num_layers;
    /* wte (lm_head tied), norm_f's weight; per layer norm_1, norm_2 (weights), Wqkv, out_proj,
     * up_proj and down_proj (no biases) */
    return V * C + C + L * (2 * C + 12 * C * C);
}

int hf_write_mpt_config(const char *dir, const tr_model_config *m, const tr_hf_export_options *o)
{
    json_t *attn = json_pack("{s:s, s:i, s:s, s:n, s:n, s:b, s:b, s:b, s:b, s:i}", "attn_type",
                             "multihead_attention", "attn_pdrop", 0, "attn_impl", "torch",
                             "clip_qkv", "softmax_scale", "prefix_lm", 0, "qk_ln", 0,
                             "attn_uses_sequence_id", 0, "alibi", 1, "alibi_bias_max", 8);
    json_t *root = attn ? json_pack(
        "{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:b, s:b, s:s, s:n, s:f, s:f, s:f,"
        " s:f, s:b, s:b, s:o, s:s}",
        "architectures", "MptForCausalLM", "model_type", "mpt", "vocab_size", m->vocab_size,
        "max_seq_len", m->max_position_embeddings, "d_model", m->hidden_size, "n_layers",
        m->num_layers, "n_heads", m->num_attention_heads, "expansion_ratio", 4,
        "layer_norm_epsilon", m->layernorm_epsilon, "no_bias", 1, "learned_pos_emb", 0,
        "norm_type", "low_precision_layernorm", "logit_scale", "embedding_fraction", 1.0,
        "resid_pdrop", 0.0, "emb_pdrop", 0.0, "initializer_range", 0.02, "tie_word_embeddings",
        1, "use_cache", 0, "attn_config", attn, "torch_dtype", o->bf16 ? "bfloat16" : "float32")
        : NULL;
    return hf_write_config_json(dir, root, TR_HF_MPT, m, o);
}

/* ------------------------------------------------------------------ which models, the names */

int hf_mpt_shape(const tr_gpt_shape *s)
{
    /* LayerNorm without biases, ALiBi, the exact GELU in 4C, no linear biases, a key/value head
     * per head, tied, the sequential residual; no embedding norm, no window, none of Gemma's
     * switches */
    return !s->rmsnorm && s->no_norm_bias && s->position == TR_POS_ALIBI && !s->swiglu &&
                   !s->geglu && s->gelu_exact && (!s->ffn || s->ffn == 4 * s->C) &&
                   s->no_linear_bias && !s->qkv_bias && !s->mlp_bias &&
                   (!s->query_groups || s->query_groups == s->NH) && !s->untie &&
                   !s->output_bias && !s->parallel_residual && !s->embedding_ln &&
                   !s->sliding_window && !s->kv_channels && !s->layernorm_1p &&
                   !s->embedding_multiplier && !s->rope_scaling
               ? TR_HF_MPT
               : -1;
}

int hf_mpt_map(const tr_param_tensor *t, char name[112], int *qkv)
{
    static const struct { const char *trident, *hf; } layer[] = {
        {"ln1.weight", "norm_1.weight"},
        {"qkv.weight", "attn.Wqkv.weight"},
        {"attn_proj.weight", "attn.out_proj.weight"},
        {"ln2.weight", "norm_2.weight"},
        {"fc.weight", "ffn.up_proj.weight"},
        {"fc_proj.weight", "ffn.down_proj.weight"}};
    static const struct { const char *trident, *hf; } top[] = {
        {"wte", "transformer.wte.weight"},
        {"lnf.weight", "transformer.norm_f.weight"}};
    int l = -1, used = 0;
    name[0] = '\0';
    *qkv = 0;
    if (sscanf(t->name, "layers.%d.%n", &l, &used) == 1 && used > 0) {
        *qkv = !strcmp(t->name + used, "qkv.weight");
        for (size_t i = 0; i < sizeof layer / sizeof layer[0]; i++)
            if (!strcmp(t->name + used, layer[i].trident))
                snprintf(name, 112, "transformer.blocks.%d.%s", l, layer[i].hf);
    } else
        for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
            if (!strcmp(t->name, top[i].trident))
                snprintf(name, 112, "%s", top[i].hf);
    if (!name[0])
        return tr_fail(TR_ERR_INTERNAL, "no MPT name for trident tensor '%s'", t->name);
    return TR_OK;
}
