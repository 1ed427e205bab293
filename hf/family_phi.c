/* Phi (PhiForCausalLM of transformers 4.38: Phi-1, Phi-1.5, Phi-2) to and from a trident model:
 * config.json both ways, the tensors' names, which models are Phi. family.c and
 * family_config.c dispatch here (hf.h states the mapping).
 *
 * transformers' PhiDecoderLayer: out = x + dense(attn(ln(x))) + fc2(gelu(fc1(ln(x)))) with one
 * input_layernorm (trident: parallel_residual + parallel_shared_norm, no ln2), q_proj, k_proj,
 * v_proj with biases (num_key_value_heads groups: GQA), rotary positions over the first
 * int(partial_rotary_factor * head_dim) dimensions of each head (rotate_half), final_layernorm,
 * an untied lm_head with a bias (trident's output_layer_bias). */
#include "hf/hf_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ config.json */

int hf_read_phi_keys(json_t *root, const char *path, int kv, int positions, double factor,
                     tr_model_config *m)
{
    int rc = hf_get_int(root, path, "num_hidden_layers", -1, &m->num_layers);
    if (!rc)
        rc = hf_get_int(root, path, "hidden_size", -1, &m->hidden_size);
    if (!rc)
        rc = hf_get_int(root, path, "num_attention_heads", -1, &m->num_attention_heads);
    if (!rc)
        rc = hf_get_int(root, path, "num_key_value_heads", kv ? kv : m->num_attention_heads,
                        &m->num_query_groups);
    if (!rc)
        rc = hf_get_int(root, path, "intermediate_size", -1, &m->ffn_hidden_size);
    if (!rc)
        rc = hf_get_int(root, path, "vocab_size", -1, &m->vocab_size);
    if (!rc)
        rc = hf_get_int(root, path, "max_position_embeddings", positions,
                        &m->max_position_embeddings);
    if (!rc)
        rc = hf_get_num(root, path, "layer_norm_eps", 1e-5, &m->layernorm_epsilon);
    if (!rc)
        rc = hf_get_num(root, path, "rope_theta", 10000.0, &m->rotary_base);
    if (!rc)
        rc = hf_get_num(root, path, "partial_rotary_factor", factor, &factor);
    json_t *scaling = json_object_get(root, "rope_scaling");
    if (!rc && scaling && !json_is_null(scaling))
        rc = tr_fail(TR_ERR_INVALID, "%s: rope_scaling is not supported: no rope scaling in "
                     "trident (null converts)", path);
    int qk_ln = 0;
    if (!rc)
        rc = hf_get_bool(root, path, "qk_layernorm", 0, &qk_ln);
    if (!rc && qk_ln)
        rc = tr_fail(TR_ERR_INVALID, "%s: qk_layernorm true is not supported: trident's "
                     "attention has no LayerNorm of the queries and keys (q_layernorm, "
                     "k_layernorm)", path);
    /* transformers rotates int(partial_rotary_factor * head_dim) dimensions; trident keeps
     * their share of the head (exact: head_dim * rotary_percent is whole, also as the %.9g
     * the config's text holds) */
    if (!rc)
        rc = hf_rotary_share(path, "partial_rotary_factor", "partial_rotary_factor * head_dim",
                             "head_dim", factor, m);
    return rc;
}

int hf_read_phi(json_t *root, const char *path, tr_model_config *m)
{
    /* microsoft/phi-* of trust_remote_code before transformers 4.37 (PhiForCausalLM of
     * modeling_phi.py in the repository: transformer.embd.wte, layers.L.mixer.Wqkv, n_embd) */
    const char *type = json_string_value(json_object_get(root, "model_type"));
    if (type && strcmp(type, "phi"))
        return tr_fail(TR_ERR_INVALID, "%s: model_type \"%s\" is not supported: it is the Phi of "
                       "trust_remote_code (its own modeling_phi.py and names: layers.L.mixer.Wqkv, "
                       "n_embd, ...); transformers' own is model_type \"phi\" (PhiForCausalLM, "
                       "PhiConfig's keys: hidden_size, partial_rotary_factor, ...), which trident "
                       "converts: use the model's config.json and weights of transformers 4.37 or "
                       "later", path, type);
    /* (PhiConfig's defaults: a key/value head per head, 2048 positions, half of each head
     * rotated) */
    int rc = hf_read_phi_keys(root, path, 0, 2048, 0.5, m), tie = 0;
    if (!rc)
        rc = hf_get_bool(root, path, "tie_word_embeddings", 0, &tie);
    if (!rc && tie)
        rc = tr_fail(TR_ERR_INVALID, "%s: tie_word_embeddings true is not supported: "
                     "transformers' tied Phi head keeps its own lm_head.bias, and trident's head "
                     "has a bias only when untied (model.output_layer_bias with "
                     "untie_embeddings_and_output_weights)", path);
    int exact = 0;
    if (!rc)
        rc = hf_gelu_act(root, path, "hidden_act", "gelu_new", "Phi MLP", &exact);
    m->normalization = "LayerNorm";
    m->position_embedding_type = "rope";
    m->swiglu = 0;
    m->untie_embeddings_and_output_weights = 1;
    m->output_layer_bias = 1;
    m->add_bias_linear = 1;
    m->embedding_layernorm = 0;
    m->parallel_residual = 1;
    m->parallel_shared_norm = 1;
    m->gelu_approximate = exact ? "none" : "tanh";
    return rc;
}

double hf_phi_numel(const tr_model_config *m)
{
    double C = m->hidden_size, V = m->vocab_size, L = m->num_layers, F = m->ffn_hidden_size;
    double HS = C / m->num_attention_heads, QKV = C + 2.0 * m->num_query_groups * HS;
    /* embed_tokens, lm_head and its bias, final_layernorm; per layer input_layernorm, q/k/v,
     * dense, fc1, fc2 with their biases */
    return 2 * V * C + V + 2 * C + L * (2 * C + QKV * C + QKV + C * C + C + 2 * F * C + F + C);
}

int hf_write_phi_config(const char *dir, const tr_model_config *m, const tr_hf_export_options *o)
{
    int exact = m->gelu_approximate && !strcmp(m->gelu_approximate, "none");
    json_t *root = json_pack(
        "{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:f, s:f, s:s, s:f, s:b, s:b,"
        " s:f, s:n, s:f, s:b, s:s}",
        "architectures", "PhiForCausalLM", "model_type", "phi", "vocab_size", m->vocab_size,
        "hidden_size", m->hidden_size, "intermediate_size", tr_model_ffn_hidden(m),
        "num_hidden_layers", m->num_layers, "num_attention_heads", m->num_attention_heads,
        "num_key_value_heads", m->num_query_groups, "max_position_embeddings",
        m->max_position_embeddings, "layer_norm_eps", m->layernorm_epsilon, "resid_pdrop", 0.0,
        "embd_pdrop", 0.0, "attention_dropout", 0.0, "hidden_act", exact ? "gelu" : "gelu_new",
        "initializer_range", 0.02, "use_cache", 1, "tie_word_embeddings", 0, "rope_theta",
        m->rotary_base, "rope_scaling", "partial_rotary_factor", m->rotary_percent,
        "qk_layernorm", 0, "torch_dtype", o->bf16 ? "bfloat16" : "float32");
    return hf_write_config_json(dir, root, TR_HF_PHI, m, o);
}

/* ------------------------------------------------------------------ which models, the names */

int hf_phi_shape(const tr_gpt_shape *s)
{
    /* LayerNorm, rope over any even share of the head, a GELU MLP of any width, biases on
     * every linear layer, GQA or not, one norm feeding both branches of the parallel residual,
     * the untied head with its bias; no embedding norm, no window */
    return !s->rmsnorm && s->position == TR_POS_ROPE && !s->swiglu && !s->no_linear_bias &&
                   s->untie && s->output_bias && s->parallel_residual &&
                   s->parallel_shared_norm && !s->embedding_ln && !s->sliding_window
               ? TR_HF_PHI
               : -1;
}

int hf_phi_map(const tr_param_tensor *t, const tr_gpt_shape *s, char name[3][112],
               uint64_t rows[3], int *qkv)
{
    static const struct { const char *trident, *hf; } layer[] = {
        {"ln1.weight", "input_layernorm.weight"},
        {"ln1.bias", "input_layernorm.bias"},
        {"attn_proj.weight", "self_attn.dense.weight"},
        {"attn_proj.bias", "self_attn.dense.bias"},
        {"fc.weight", "mlp.fc1.weight"},
        {"fc.bias", "mlp.fc1.bias"},
        {"fc_proj.weight", "mlp.fc2.weight"},
        {"fc_proj.bias", "mlp.fc2.bias"}};
    static const struct { const char *trident, *hf; } top[] = {
        {"wte", "model.embed_tokens.weight"},
        {"output_layer", "lm_head.weight"},
        {"output_layer.bias", "lm_head.bias"},
        {"lnf.weight", "model.final_layernorm.weight"},
        {"lnf.bias", "model.final_layernorm.bias"}};
    int l = -1, used = 0;
    *qkv = 0;
    rows[0] = (uint64_t)t->full_rows;
    name[0][0] = '\0';
    if (sscanf(t->name, "layers.%d.%n", &l, &used) == 1 && used > 0) {
        const char *rest = t->name + used;
        if (!strcmp(rest, "qkv.weight") || !strcmp(rest, "qkv.bias")) {
            /* rows (group, {q_0 .. q_R-1, k, v}, d) from q_proj, k_proj, v_proj (Llama's) */
            int HS = tr_gpt_head_size(s), NG = s->query_groups ? s->query_groups : s->NH;
            const char *p[3] = {"q", "k", "v"};
            for (int i = 0; i < 3; i++)
                snprintf(name[i], 112, "model.layers.%d.self_attn.%s_proj.%s", l, p[i], rest + 4);
            rows[0] = (uint64_t)s->NH * HS, rows[1] = rows[2] = (uint64_t)NG * HS;
            *qkv = 1;
            return TR_OK;
        }
        for (size_t i = 0; i < sizeof layer / sizeof layer[0]; i++)
            if (!strcmp(rest, layer[i].trident))
                snprintf(name[0], 112, "model.layers.%d.%s", l, layer[i].hf);
    } else
        for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
            if (!strcmp(t->name, top[i].trident))
                snprintf(name[0], 112, "%s", top[i].hf);
    if (!name[0][0])
        return tr_fail(TR_ERR_INTERNAL, "no Phi name for trident tensor '%s'", t->name);
    return TR_OK;
}
