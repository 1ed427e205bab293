/* GPT-BigCode (GPTBigCodeForCausalLM of transformers 4.38: StarCoder, StarCoderBase, SantaCoder)
 * to and from a trident model: config.json both ways, the tensors' names, which models are
 * GPT-BigCode. family.c and family_config.c dispatch here (hf.h states the mapping).
 *
 * transformers' GPTBigCodeBlock is GPT-2's (ln_1, attention, ln_2, the GELU MLP of n_inner, the
 * sequential residual; wte, learned wpe, ln_f, lm_head tied unless tie_word_embeddings is false)
 * with nn.Linear weights [out, in] (trident's layout, GPT-2's Conv1D is [in, out]). c_attn's
 * rows, with multi_query: [Q (NH heads) | K (1 head) | V (1 head)], each (head, d) = trident's
 * qkv rows (group, {q_0 .. q_R-1, k, v}, d) of one group; without: viewed as (NH, 3 * head_dim)
 * and split (q, k, v) per head = trident's rows (head, {q, k, v}, d). So every tensor is in
 * trident's layout. In float32 the softmax switches (attention_softmax_in_fp32,
 * scale_attention_softmax_in_fp32) change nothing: they act only when the weights are not
 * float32 (upcast). */
#include "hf/hf_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ config.json */

int hf_read_bigcode(json_t *root, const char *path, tr_model_config *m)
{
    /* (GPTBigCodeConfig's defaults for the others: 1024 positions, n_inner null (4 n_embd),
     * gelu_pytorch_tanh, epsilon 1e-5, multi_query true, tied) */
    int rc = hf_read_gpt_dims(root, path, 1024, "GPTBigCodeAttention", m);
    int exact = 0, multi_query = 1, tie = 1, scale = 1, cross = 0, fp32 = 1;
    if (!rc)
        rc = hf_gelu_act(root, path, "activation_function", "gelu_pytorch_tanh",
                         "GPT-BigCode MLP", &exact);
    if (!rc)
        rc = hf_get_bool(root, path, "multi_query", 1, &multi_query);
    if (!rc)
        rc = hf_get_bool(root, path, "tie_word_embeddings", 1, &tie);
    if (!rc)
        rc = hf_get_bool(root, path, "scale_attn_weights", 1, &scale);
    if (!rc && !scale)
        rc = tr_fail(TR_ERR_INVALID, "%s: scale_attn_weights false is not supported: trident's "
                     "attention scales the scores by 1/sqrt(head_dim)", path);
    if (!rc)
        rc = hf_get_bool(root, path, "add_cross_attention", 0, &cross);
    if (!rc && cross)
        rc = tr_fail(TR_ERR_INVALID, "%s: add_cross_attention true is not supported: trident's "
                     "layers have no cross-attention (crossattention, ln_cross_attn)", path);
    /* float32 weights: no upcast, so neither switch changes the math (booleans all the same) */
    if (!rc)
        rc = hf_get_bool(root, path, "attention_softmax_in_fp32", 1, &fp32);
    if (!rc)
        rc = hf_get_bool(root, path, "scale_attention_softmax_in_fp32", 1, &fp32);
    m->num_query_groups = multi_query ? 1 : m->num_attention_heads;
    m->normalization = "LayerNorm";
    m->position_embedding_type = "learned_absolute";
    m->rotary_percent = 1.0;
    m->rotary_base = 10000.0;
    m->swiglu = 0;
    m->untie_embeddings_and_output_weights = !tie;
    m->add_bias_linear = 1;
    m->embedding_layernorm = 0;
    m->parallel_residual = 0;
    m->gelu_approximate = exact ? "none" : "tanh";
    return rc;
}

double hf_bigcode_numel(const tr_model_config *m)
{
    double C = m->hidden_size, V = m->vocab_size, L = m->num_layers, F = m->ffn_hidden_size;
    double P = m->max_position_embeddings, HS = C / m->num_attention_heads;
    double QKV = C + 2.0 * m->num_query_groups * HS;
    /* wte (lm_head untied), wpe, ln_f; per layer ln_1, ln_2, c_attn, c_proj, c_fc, mlp.c_proj
     * with their biases */
    return V * C * (m->untie_embeddings_and_output_weights ? 2 : 1) + P * C + 2 * C +
           L * (4 * C + QKV * C + QKV + C * C + C + 2 * F * C + F + C);
}

int hf_write_bigcode_config(const char *dir, const tr_model_config *m,
                            const tr_hf_export_options *o)
{
    int exact = m->gelu_approximate && !strcmp(m->gelu_approximate, "none");
    json_t *root = json_pack(
        "{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:s, s:b, s:b, s:b, s:b, s:b, s:f, s:f,"
        " s:f, s:f, s:b, s:s}",
        "architectures", "GPTBigCodeForCausalLM", "model_type", "gpt_bigcode", "vocab_size",
        m->vocab_size, "n_positions", m->max_position_embeddings, "n_embd", m->hidden_size,
        "n_layer", m->num_layers, "n_head", m->num_attention_heads, "n_inner",
        tr_model_ffn_hidden(m), "layer_norm_epsilon", m->layernorm_epsilon,
        "activation_function", exact ? "gelu" : "gelu_pytorch_tanh", "multi_query",
        m->num_query_groups == 1, "tie_word_embeddings", !m->untie_embeddings_and_output_weights,
        "scale_attn_weights", 1, "attention_softmax_in_fp32", 1,
        "scale_attention_softmax_in_fp32", 1, "resid_pdrop", 0.0, "embd_pdrop", 0.0,
        "attn_pdrop", 0.0, "initializer_range", 0.02, "use_cache", 1, "torch_dtype",
        o->bf16 ? "bfloat16" : "float32");
    return hf_write_config_json(dir, root, TR_HF_BIGCODE, m, o);
}

/* ------------------------------------------------------------------ which models, the names */

int hf_bigcode_shape(const tr_gpt_shape *s)
{
    /* LayerNorm, learned positions, a GELU MLP of any width (exact or tanh), biases on every
     * linear layer, one key/value head (multi_query) or one per head, tied or not, the
     * sequential residual; no embedding norm, no head bias, no window (a GPT-2, which these
     * include, is tested for first by hf_shape_family) */
    return !s->rmsnorm && s->position == TR_POS_LEARNED && !s->swiglu && !s->geglu &&
                   !s->no_linear_bias && !s->output_bias && !s->parallel_residual &&
                   !s->embedding_ln && !s->sliding_window && !s->kv_channels &&
                   !s->layernorm_1p && !s->embedding_multiplier &&
                   (!s->query_groups || s->query_groups == 1)
               ? TR_HF_BIGCODE
               : -1;
}

int hf_bigcode_map(const tr_param_tensor *t, char name[112])
{
    static const struct { const char *trident, *hf; } layer[] = {
        {"ln1.weight", "ln_1.weight"},
        {"ln1.bias", "ln_1.bias"},
        {"qkv.weight", "attn.c_attn.weight"},
        {"qkv.bias", "attn.c_attn.bias"},
        {"attn_proj.weight", "attn.c_proj.weight"},
        {"attn_proj.bias", "attn.c_proj.bias"},
        {"ln2.weight", "ln_2.weight"},
        {"ln2.bias", "ln_2.bias"},
        {"fc.weight", "mlp.c_fc.weight"},
        {"fc.bias", "mlp.c_fc.bias"},
        {"fc_proj.weight", "mlp.c_proj.weight"},
        {"fc_proj.bias", "mlp.c_proj.bias"}};
    static const struct { const char *trident, *hf; } top[] = {
        {"wte", "transformer.wte.weight"},
        {"wpe", "transformer.wpe.weight"},
        {"output_layer", "lm_head.weight"},
        {"lnf.weight", "transformer.ln_f.weight"},
        {"lnf.bias", "transformer.ln_f.bias"}};
    int l = -1, used = 0;
    name[0] = '\0';
    if (sscanf(t->name, "layers.%d.%n", &l, &used) == 1 && used > 0) {
        for (size_t i = 0; i < sizeof layer / sizeof layer[0]; i++)
            if (!strcmp(t->name + used, layer[i].trident))
                snprintf(name, 112, "transformer.h.%d.%s", l, layer[i].hf);
    } else
        for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
            if (!strcmp(t->name, top[i].trident))
                snprintf(name, 112, "%s", top[i].hf);
    if (!name[0])
        return tr_fail(TR_ERR_INTERNAL, "no GPT-BigCode name for trident tensor '%s'", t->name);
    return TR_OK;
}
