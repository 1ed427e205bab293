/* Gemma (GemmaForCausalLM of transformers 4.38: Gemma-2B, -7B) to and from a trident model:
 * config.json's Gemma keys both ways, which models are Gemma. The rest is the Llama's:
 * family_config.c's Llama reader reads the shared keys and calls hf_read_gemma, family.c maps
 * the tensors with the Llama's names and layouts (hf.h states the mapping).
 *
 * transformers' GemmaModel: h = embed_tokens(ids) * hidden_size**0.5 (in the model's dtype:
 * float32 (float)sqrt(C)); per layer h += o_proj(attn(norm1(h))), h += down_proj(act(
 * gate_proj(y)) * up_proj(y)), y = norm2(h); then model.norm; the head tied to embed_tokens.
 * GemmaRMSNorm is x / sqrt(mean(x^2) + eps) * (1 + weight) (weights stored as the offset from
 * 1: trident's apply_layernorm_1p, copied as they are); q_proj (NH x head_dim rows), k_proj,
 * v_proj (num_key_value_heads x head_dim), o_proj (NH x head_dim columns), no biases; rotary
 * positions over the whole head (rope_theta, rotate_half). trident: RMSNorm, layernorm_1p,
 * rope, geglu (fc rows (feature, {gate, up}) as swiglu's), embedding_multiplier, kv_channels
 * where head_dim is not C / NH, tied, the sequential residual. */
#include "hf/hf_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ config.json */

/* The embedding's scale of a model of hidden size C: transformers' hidden_size**0.5 in
 * float32 */
static float gemma_multiplier(int C) { return (float)sqrt((double)C); }

int hf_read_head_dim(json_t *root, const char *path, int dflt, const char *family,
                     tr_model_config *m)
{
    int C = m->hidden_size, NH = m->num_attention_heads, head_dim = 0;
    json_t *v = json_object_get(root, "head_dim");
    if (!dflt && (!v || json_is_null(v)))
        return TR_OK; /* (C / NH) */
    int rc = hf_get_int(root, path, "head_dim", dflt, &head_dim);
    if (!rc && head_dim % 2) /* (rotate_half turns pairs of the head's dimensions) */
        rc = tr_fail(TR_ERR_INVALID, "%s: head_dim %d is odd: %s's rotary positions turn "
                     "the head's dimensions in pairs", path, head_dim, family);
    if (!rc)
        m->kv_channels = NH > 0 && C % NH == 0 && head_dim == C / NH ? 0 : head_dim;
    return rc;
}

int hf_read_gemma(json_t *root, const char *path, tr_model_config *m)
{
    /* (absent: GemmaConfig's head_dim 256, tied) */
    int tie = 1;
    int rc = hf_read_head_dim(root, path, 256, "Gemma", m);
    if (!rc)
        rc = hf_get_bool(root, path, "tie_word_embeddings", 1, &tie);
    if (!rc && !tie)
        rc = tr_fail(TR_ERR_INVALID, "%s: tie_word_embeddings false is not supported: trident's "
                     "Gemma ties lm_head to embed_tokens, as every Gemma release does", path);
    /* The activation: later transformers (and Gemma's own code) read hidden_activation, 4.38
     * hidden_act (later config.json files carry both: "gelu" beside "gelu_pytorch_tanh");
     * hidden_activation wins when present and not null, else hidden_act (absent: GemmaConfig's
     * "gelu", the exact GELU) */
    json_t *hact = json_object_get(root, "hidden_activation");
    const char *key = hact && !json_is_null(hact) ? "hidden_activation" : "hidden_act";
    int exact = 0;
    if (!rc)
        rc = hf_gelu_act(root, path, key, "gelu", "Gemma MLP (GeGLU)", &exact);
    /* (the Llama reader's switches stand: RMSNorm, rope over whole heads, no biases) */
    m->apply_layernorm_1p = 1;
    m->embedding_multiplier = gemma_multiplier(m->hidden_size);
    m->swiglu = 0;
    m->geglu = 1;
    m->gelu_approximate = exact ? "none" : "tanh";
    m->untie_embeddings_and_output_weights = 0;
    return rc;
}

int hf_write_gemma_config(const char *dir, const tr_model_config *m, const tr_hf_export_options *o)
{
    /* hidden_act for transformers 4.38, hidden_activation (the same) for later ones, which
     * take gelu_pytorch_tanh without it */
    const char *act = m->gelu_approximate && !strcmp(m->gelu_approximate, "none")
                          ? "gelu"
                          : "gelu_pytorch_tanh";
    json_t *root = json_pack(
        "{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:s, s:s, s:f, s:f, s:f, s:b, s:b,"
        " s:b, s:f, s:n, s:s}",
        "architectures", "GemmaForCausalLM", "model_type", "gemma", "vocab_size", m->vocab_size,
        "hidden_size", m->hidden_size, "intermediate_size", tr_model_ffn_hidden(m),
        "num_hidden_layers", m->num_layers, "num_attention_heads", m->num_attention_heads,
        "num_key_value_heads", m->num_query_groups, "head_dim", tr_model_head_size(m),
        "max_position_embeddings", m->max_position_embeddings, "hidden_act", act,
        "hidden_activation", act, "rms_norm_eps", m->layernorm_epsilon, "rope_theta",
        m->rotary_base, "initializer_range", 0.02, "use_cache", 1, "tie_word_embeddings", 1,
        "attention_bias", 0, "attention_dropout", 0.0, "rope_scaling", "torch_dtype",
        o->bf16 ? "bfloat16" : "float32");
    return hf_write_config_json(dir, root, TR_HF_GEMMA, m, o);
}

/* ------------------------------------------------------------------ which models */

int hf_gemma_shape(const tr_gpt_shape *s)
{
    /* RMSNorm with the 1p offset, rope over whole heads (of any size), GeGLU of any width, no
     * biases, GQA or not, tied, the embedding times (float)sqrt(C), the sequential residual;
     * no embedding norm, no window */
    float mult = s->embedding_multiplier ? s->embedding_multiplier : 1.0f;
    return s->rmsnorm && s->layernorm_1p && s->position == TR_POS_ROPE &&
                   s->rotary_dims == tr_gpt_head_size(s) && s->geglu && s->no_linear_bias &&
                   !s->qkv_bias && !s->untie && !s->embedding_ln && !s->parallel_residual &&
                   !s->sliding_window && mult == gemma_multiplier(s->C)
               ? TR_HF_GEMMA
               : -1;
}
