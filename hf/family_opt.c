/* OPT (OPTForCausalLM of transformers 4.38: facebook/opt-125m .. opt-66b) to and from a trident
 * model: config.json both ways, the tensors' names, which models are OPT. family.c and
 * family_config.c dispatch here (hf.h states the mapping).
 *
 * transformers 4.38's OPTDecoderLayer with do_layer_norm_before (every released OPT but 350m):
 * h = x + out_proj(attn(self_attn_layer_norm(x))), out = h + fc2(act(fc1(final_layer_norm(h))))
 * (trident's sequential pre-LN layer: ln1, ln2), act ReLU (activation_function relu, OPT's
 * default: model.relu) or a GELU; q_proj, k_proj, v_proj, out_proj, fc1, fc2 with
 * biases unless enable_bias is false; the LayerNorms always with theirs; q_proj's output (its
 * bias included) times head_dim^-0.5 before q k^T: trident's scaled scores, the same model.
 * Learned positions: embed_positions has max_position_embeddings + 2 rows and position t reads
 * row t + 2 (OPTLearnedPositionalEmbedding's offset; positions = cumsum(attention_mask) - 1, so
 * 0 .. T-1 when the mask is absent or all ones): the import drops rows 0 and 1, which no position
 * reads, and the export writes them as zeros (family.c FAM_POS_OFFSET). model.decoder's
 * final_layer_norm -> lnf; lm_head (no bias) tied to embed_tokens unless tie_word_embeddings is
 * false. OPT-350m's post-LN layer (do_layer_norm_before false) and its project_in / project_out
 * (word_embed_proj_dim != hidden_size), _remove_final_layer_norm and norms without weights are
 * refused by name. */
#include "hf/hf_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ config.json */

int hf_read_opt(json_t *root, const char *path, tr_model_config *m)
{
    /* (OPTConfig's defaults: opt-125m's sizes, 2048 positions, relu, enable_bias, tied) */
    int rc = hf_get_int(root, path, "num_hidden_layers", 12, &m->num_layers);
    if (!rc)
        rc = hf_get_int(root, path, "hidden_size", 768, &m->hidden_size);
    if (!rc)
        rc = hf_get_int(root, path, "num_attention_heads", 12, &m->num_attention_heads);
    if (!rc)
        rc = hf_get_int(root, path, "ffn_dim", 3072, &m->ffn_hidden_size);
    if (!rc)
        rc = hf_get_int(root, path, "vocab_size", 50272, &m->vocab_size);
    if (!rc)
        rc = hf_get_int(root, path, "max_position_embeddings", 2048, &m->max_position_embeddings);
    if (!rc && m->hidden_size % m->num_attention_heads)
        rc = tr_fail(TR_ERR_INVALID, "%s: hidden_size %d is not divisible by num_attention_heads "
                     "%d (transformers' OPTAttention refuses it too)", path, m->hidden_size,
                     m->num_attention_heads);
    int pre_ln = 1, bias = 1, affine = 1, remove_lnf = 0, tie = 1, proj = m->hidden_size;
    if (!rc)
        rc = hf_get_bool(root, path, "do_layer_norm_before", 1, &pre_ln);
    if (!rc && !pre_ln)
        rc = hf_refuse(path, "do_layer_norm_before false",
                       "OPT-350m's post-LN layer (the norms after each residual addition); "
                       "trident's layer normalises its input (pre-LN)");
    if (!rc)
        rc = hf_get_int(root, path, "word_embed_proj_dim", m->hidden_size, &proj);
    if (!rc && proj != m->hidden_size)
        rc = tr_fail(TR_ERR_INVALID, "%s: word_embed_proj_dim %d other than hidden_size %d is "
                     "not supported: OPT-350m's project_in / project_out around the layers; "
                     "trident's embedding is hidden_size wide", path, proj, m->hidden_size);
    if (!rc)
        rc = hf_get_bool(root, path, "_remove_final_layer_norm", 0, &remove_lnf);
    if (!rc && remove_lnf)
        rc = hf_refuse(path, "_remove_final_layer_norm true",
                       "trident's model ends with the final LayerNorm");
    if (!rc)
        rc = hf_get_bool(root, path, "layer_norm_elementwise_affine", 1, &affine);
    if (!rc && !affine)
        rc = hf_refuse(path, "layer_norm_elementwise_affine false",
                       "trident's LayerNorms have a weight and a bias");
    if (!rc)
        rc = hf_get_bool(root, path, "enable_bias", 1, &bias);
    if (!rc)
        rc = hf_get_bool(root, path, "tie_word_embeddings", 1, &tie);
    json_t *act = json_object_get(root, "activation_function");
    int exact = 0, relu = !act || (json_is_string(act) && !strcmp(json_string_value(act), "relu"));
    if (!rc && !relu) /* (relu: OPT's default, every released OPT's) */
        rc = hf_gelu_act(root, path, "activation_function", "relu",
                         "OPT MLP, when not ReLU (relu),", &exact);
    m->num_query_groups = m->num_attention_heads;
    m->layernorm_epsilon = 1e-5; /* (OPT's nn.LayerNorm default; config.json has no key) */
    m->normalization = "LayerNorm";
    m->position_embedding_type = "learned_absolute";
    m->rotary_base = 10000.0;
    m->rotary_percent = 1.0;
    m->swiglu = 0;
    m->untie_embeddings_and_output_weights = !tie;
    m->add_bias_linear = bias;
    m->embedding_layernorm = 0;
    m->parallel_residual = 0;
    m->relu = relu;
    m->gelu_approximate = exact ? "none" : "tanh";
    return rc;
}

double hf_opt_numel(const tr_model_config *m)
{
    double C = m->hidden_size, V = m->vocab_size, L = m->num_layers, F = m->ffn_hidden_size;
    double P = m->max_position_embeddings + 2.0, b = m->add_bias_linear ? 1 : 0;
    /* embed_tokens (lm_head: tied, or its own without a bias), embed_positions of P + 2 rows,
     * final_layer_norm; per layer 2 LayerNorms, q/k/v/out_proj, fc1, fc2 (their biases with
     * enable_bias) */
    return V * C * (m->untie_embeddings_and_output_weights ? 2 : 1) + P * C + 2 * C +
           L * (4 * C + 4 * C * C + 2 * F * C + b * (4 * C + F + C));
}

int hf_write_opt_config(const char *dir, const tr_model_config *m, const tr_hf_export_options *o)
{
    int exact = m->gelu_approximate && !strcmp(m->gelu_approximate, "none");
    json_t *root = json_pack(
        "{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:s, s:b, s:b, s:b, s:b, s:b, s:f,"
        " s:f, s:f, s:f, s:b, s:s}",
        "architectures", "OPTForCausalLM", "model_type", "opt", "vocab_size", m->vocab_size,
        "max_position_embeddings", m->max_position_embeddings, "hidden_size", m->hidden_size,
        "word_embed_proj_dim", m->hidden_size, "num_hidden_layers", m->num_layers,
        "num_attention_heads", m->num_attention_heads, "ffn_dim", tr_model_ffn_hidden(m),
        "activation_function", m->relu ? "relu" : exact ? "gelu" : "gelu_new",
        "do_layer_norm_before", 1,
        "enable_bias", m->add_bias_linear != 0, "layer_norm_elementwise_affine", 1,
        "_remove_final_layer_norm", 0, "tie_word_embeddings",
        !m->untie_embeddings_and_output_weights, "dropout", 0.0, "attention_dropout", 0.0,
        "layerdrop", 0.0, "init_std", 0.02, "use_cache", 1, "torch_dtype",
        o->bf16 ? "bfloat16" : "float32");
    return hf_write_config_json(dir, root, TR_HF_OPT, m, o);
}

/* ------------------------------------------------------------------ which models, the names */

int hf_opt_shape(const tr_gpt_shape *s)
{
    /* LayerNorm with biases, learned positions, a ReLU or GELU MLP of any width, biases on
     * every linear layer or none, a key/value head per head, tied or untied without a head
     * bias, the sequential residual; no embedding norm, no window, none of Gemma's switches
     * (GPT-2's and GPT-BigCode's shapes, which include the GELU ones with biases, are tested
     * for first) */
    return !s->rmsnorm && !s->no_norm_bias && s->position == TR_POS_LEARNED && !s->swiglu &&
                   !s->geglu && !s->qkv_bias && !s->mlp_bias &&
                   (!s->query_groups || s->query_groups == s->NH) && !s->output_bias &&
                   !s->parallel_residual && !s->embedding_ln && !s->sliding_window &&
                   !s->kv_channels && !s->layernorm_1p && !s->embedding_multiplier &&
                   !s->rope_scaling
               ? TR_HF_OPT
               : -1;
}

int hf_opt_map(const tr_param_tensor *t, char name[3][112], int *qkv)
{
    static const struct { const char *trident, *hf; } layer[] = {
        {"ln1.weight", "self_attn_layer_norm.weight"},
        {"ln1.bias", "self_attn_layer_norm.bias"},
        {"attn_proj.weight", "self_attn.out_proj.weight"},
        {"attn_proj.bias", "self_attn.out_proj.bias"},
        {"ln2.weight", "final_layer_norm.weight"},
        {"ln2.bias", "final_layer_norm.bias"},
        {"fc.weight", "fc1.weight"},
        {"fc.bias", "fc1.bias"},
        {"fc_proj.weight", "fc2.weight"},
        {"fc_proj.bias", "fc2.bias"}};
    static const struct { const char *trident, *hf; } top[] = {
        {"wte", "model.decoder.embed_tokens.weight"},
        {"wpe", "model.decoder.embed_positions.weight"},
        {"output_layer", "lm_head.weight"},
        {"lnf.weight", "model.decoder.final_layer_norm.weight"},
        {"lnf.bias", "model.decoder.final_layer_norm.bias"}};
    int l = -1, used = 0;
    *qkv = 0;
    name[0][0] = '\0';
    if (sscanf(t->name, "layers.%d.%n", &l, &used) == 1 && used > 0) {
        const char *rest = t->name + used;
        if (!strcmp(rest, "qkv.weight") || !strcmp(rest, "qkv.bias")) {
            const char *p[3] = {"q", "k", "v"};
            for (int i = 0; i < 3; i++)
                snprintf(name[i], 112, "model.decoder.layers.%d.self_attn.%s_proj.%s", l, p[i],
                         rest + 4);
            *qkv = 1;
            return TR_OK;
        }
        for (size_t i = 0; i < sizeof layer / sizeof layer[0]; i++)
            if (!strcmp(rest, layer[i].trident))
                snprintf(name[0], 112, "model.decoder.layers.%d.%s", l, layer[i].hf);
    } else
        for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
            if (!strcmp(t->name, top[i].trident))
                snprintf(name[0], 112, "%s", top[i].hf);
    if (!name[0][0])
        return tr_fail(TR_ERR_INTERNAL, "no OPT name for trident tensor '%s'", t->name);
    return TR_OK;
}
