/* StableLM (StableLmForCausalLM of transformers 4.38: StableLM-3B-4E1T, StableLM-2-1.6B,
 * StableLM-Zephyr) to and from a trident model: config.json both ways, which models are
 * StableLM. family.c (the names: the Llama's and the LayerNorm biases) and family_config.c
 * dispatch here (hf.h states the mapping).
 *
 * transformers' StableLmDecoderLayer: h = x + o_proj(attn(input_layernorm(x))); out = h +
 * down_proj(silu(gate_proj(y)) * up_proj(y)), y = post_attention_layernorm(h), with LayerNorm
 * (weight and bias) as both norms and model.norm; q_proj, k_proj, v_proj with biases iff
 * use_qkv_bias (num_key_value_heads groups: GQA), o_proj and the MLP without; rotary positions
 * over the first int(partial_rotary_factor * head_dim) dimensions of each head (rotate_half);
 * lm_head without a bias, tied iff tie_word_embeddings. trident: LayerNorm, rope,
 * rotary_percent, swiglu, add_bias_linear false, add_qkv_bias, the sequential residual. */
#include "hf/hf_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ config.json */

int hf_read_stablelm(json_t *root, const char *path, tr_model_config *m)
{
    /* (StableLmConfig's defaults: 32 key/value heads, 4096 positions, a quarter of each head
     * rotated) */
    int rc = hf_read_phi_keys(root, path, 32, 4096, 0.25, m);
    json_t *act = json_object_get(root, "hidden_act");
    if (!rc && act && !(json_is_string(act) && !strcmp(json_string_value(act), "silu")))
        rc = tr_fail(TR_ERR_INVALID, "%s: hidden_act is not supported: trident's SwiGLU uses "
                     "silu", path);
    int qkv_bias = 0, tie = 0, parallel = 0;
    if (!rc)
        rc = hf_get_bool(root, path, "use_qkv_bias", 0, &qkv_bias);
    if (!rc)
        rc = hf_get_bool(root, path, "tie_word_embeddings", 0, &tie);
    /* a key of later transformers (StableLM-2-12B's, as qk_layernorm) that 4.38 does not read */
    if (!rc)
        rc = hf_get_bool(root, path, "use_parallel_residual", 0, &parallel);
    if (!rc && parallel)
        rc = tr_fail(TR_ERR_INVALID, "%s: use_parallel_residual true is not supported: "
                     "transformers 4.38's StableLM adds attention and MLP in turn (trident's "
                     "parallel residual with the SwiGLU MLP is no StableLM of that version)", path);
    m->normalization = "LayerNorm";
    m->position_embedding_type = "rope";
    m->swiglu = 1;
    m->untie_embeddings_and_output_weights = !tie;
    m->add_bias_linear = 0;
    m->add_qkv_bias = qkv_bias;
    m->embedding_layernorm = 0;
    m->parallel_residual = 0;
    return rc;
}

double hf_stablelm_numel(const tr_model_config *m)
{
    double C = m->hidden_size, V = m->vocab_size, L = m->num_layers, F = m->ffn_hidden_size;
    double HS = C / m->num_attention_heads, KV = 2.0 * m->num_query_groups * HS;
    /* embed_tokens (lm_head), model.norm; per layer two LayerNorms, q/k/v (their biases with
     * use_qkv_bias), o_proj, gate/up/down_proj */
    return V * C * (m->untie_embeddings_and_output_weights ? 2 : 1) + 2 * C +
           L * (4 * C + (C + KV) * C + C * C + 3 * F * C + (m->add_qkv_bias ? C + KV : 0));
}

int hf_write_stablelm_config(const char *dir, const tr_model_config *m,
                             const tr_hf_export_options *o)
{
    /* qk_layernorm and use_parallel_residual: later transformers' keys, false as in 4.38 */
    json_t *root = json_pack(
        "{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:f, s:f, s:s, s:f, s:b, s:b,"
        " s:f, s:n, s:b, s:b, s:b, s:s}",
        "architectures", "StableLmForCausalLM", "model_type", "stablelm", "vocab_size",
        m->vocab_size, "hidden_size", m->hidden_size, "intermediate_size", tr_model_ffn_hidden(m),
        "num_hidden_layers", m->num_layers, "num_attention_heads", m->num_attention_heads,
        "num_key_value_heads", m->num_query_groups, "max_position_embeddings",
        m->max_position_embeddings, "layer_norm_eps", m->layernorm_epsilon, "hidden_dropout", 0.0,
        "attention_dropout", 0.0, "initializer_range", 0.02, "hidden_act", "silu",
        "partial_rotary_factor", m->rotary_percent, "use_cache", 1, "tie_word_embeddings",
        !m->untie_embeddings_and_output_weights, "rope_theta", m->rotary_base, "rope_scaling",
        "use_qkv_bias", m->add_qkv_bias != 0, "qk_layernorm", 0, "use_parallel_residual", 0,
        "torch_dtype", o->bf16 ? "bfloat16" : "float32");
    return hf_write_config_json(dir, root, TR_HF_STABLELM, m, o);
}

/* ------------------------------------------------------------------ which models */

int hf_stablelm_shape(const tr_gpt_shape *s)
{
    /* LayerNorm, rope over any even share of the head, the SwiGLU MLP of any width, no linear
     * biases (q, k and v with theirs or not), GQA or not, tied or not, the sequential
     * residual; no embedding norm, no window, no head bias */
    return !s->rmsnorm && s->position == TR_POS_ROPE && s->swiglu && s->no_linear_bias &&
                   !s->output_bias && !s->parallel_residual && !s->embedding_ln &&
                   !s->sliding_window
               ? TR_HF_STABLELM
               : -1;
}
