/* Phi-3 (Phi3ForCausalLM of transformers 4.44: Phi-3-mini-4k, Phi-3-medium-4k) to and from a
 * trident model: config.json both ways, the fused tensors' names, which models are Phi-3.
 * family.c and family_config.c dispatch here (hf.h states the mapping).
 *
 * transformers 4.44's Phi3DecoderLayer is a Llama's (RMSNorm input_layernorm /
 * post_attention_layernorm, rope over whole heads of base rope_theta, SwiGLU with silu, no
 * biases, model.norm, lm_head untied unless tie_word_embeddings) with two fused tensors:
 * self_attn.qkv_proj, rows [q (heads x d); k (kv_heads x d); v (kv_heads x d)], and
 * mlp.gate_up_proj, rows [gate (intermediate); up (intermediate)]. Its eager and sdpa
 * attentions (what transformers runs on a CPU) are full causal: sliding_window (Phi-3-mini-4k:
 * 2047 of 4096 positions) is read only by the flash_attention_2 path, so the import keeps every
 * position (no model.sliding_window) and the export writes sliding_window null, which every
 * path then computes alike. A Llama's switches become a Phi-3 only by model.hf_family phi3
 * (the manifest's " hf_family phi3"): nothing else tells the two apart. */
#include "hf/hf_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ config.json */

/* key absent, null or false; else refused naming it, with why */
static int refuse_true(json_t *root, const char *path, const char *key, const char *why)
{
    int on = 0;
    json_t *v = json_object_get(root, key);
    if (v && json_is_null(v))
        return TR_OK;
    int rc = hf_get_bool(root, path, key, 0, &on);
    return !rc && on ? hf_refuse(path, key, why) : rc;
}

int hf_read_phi3(json_t *root, const char *path, tr_model_config *m)
{
    /* (Phi3Config's defaults: Phi-3-mini-4k's sizes, a key/value head per head) */
    int rc = hf_get_int(root, path, "num_hidden_layers", 32, &m->num_layers);
    if (!rc)
        rc = hf_get_int(root, path, "hidden_size", 3072, &m->hidden_size);
    if (!rc)
        rc = hf_get_int(root, path, "num_attention_heads", 32, &m->num_attention_heads);
    if (!rc)
        rc = hf_get_int(root, path, "num_key_value_heads", m->num_attention_heads,
                        &m->num_query_groups);
    if (!rc)
        rc = hf_get_int(root, path, "intermediate_size", 8192, &m->ffn_hidden_size);
    if (!rc)
        rc = hf_get_int(root, path, "vocab_size", 32064, &m->vocab_size);
    if (!rc)
        rc = hf_get_int(root, path, "max_position_embeddings", 4096, &m->max_position_embeddings);
    if (!rc)
        rc = hf_get_num(root, path, "rms_norm_eps", 1e-5, &m->layernorm_epsilon);
    if (!rc)
        rc = hf_get_num(root, path, "rope_theta", 10000.0, &m->rotary_base);
    json_t *act = json_object_get(root, "hidden_act");
    if (!rc && act && !(json_is_string(act) && !strcmp(json_string_value(act), "silu")))
        rc = hf_refuse(path, "hidden_act", "trident's Phi-3 MLP is SwiGLU: silu");
    json_t *scaling = json_object_get(root, "rope_scaling");
    if (!rc && scaling && !json_is_null(scaling))
        rc = hf_refuse(path, "rope_scaling", "Phi-3-128k's and Phi-3.5's \"su\" / \"longrope\" "
                       "(per-dimension short and long factors) is not in trident; Phi-3 with "
                       "rope_scaling null (the 4k models) converts");
    double factor = 1.0;
    if (!rc)
        rc = hf_get_num(root, path, "partial_rotary_factor", 1.0, &factor);
    if (!rc && factor != 1.0)
        rc = hf_refuse(path, "partial_rotary_factor", "transformers 4.44's Phi-3 rotates whole "
                       "heads (1; a share of each head is later transformers' Phi-4-mini)");
    if (!rc) /* (4.44's Phi-3 reads neither: its linear layers have no biases) */
        rc = refuse_true(root, path, "attention_bias", "transformers 4.44's Phi-3 has no "
                         "attention biases");
    if (!rc)
        rc = refuse_true(root, path, "mlp_bias", "transformers 4.44's Phi-3 has no MLP biases");
    json_t *head_dim = json_object_get(root, "head_dim");
    if (!rc && head_dim && !json_is_null(head_dim) &&
        !(json_is_integer(head_dim) &&
          json_integer_value(head_dim) * m->num_attention_heads == m->hidden_size))
        rc = tr_fail(TR_ERR_INVALID, "%s: head_dim is not supported unless it is hidden_size / "
                     "num_attention_heads (%d / %d): transformers 4.44's Phi-3 has no head_dim",
                     path, m->hidden_size, m->num_attention_heads);
    /* sliding_window: read by flash_attention_2 alone; eager and sdpa attend to every earlier
     * position, as trident does (checked for its type, then not kept) */
    json_t *window = json_object_get(root, "sliding_window");
    if (!rc && window && !json_is_null(window) &&
        !(json_is_integer(window) && json_integer_value(window) >= 1))
        rc = tr_fail(TR_ERR_INVALID, "%s: sliding_window must be an integer >= 1 or null", path);
    int tie = 0;
    if (!rc)
        rc = hf_get_bool(root, path, "tie_word_embeddings", 0, &tie);
    m->normalization = "RMSNorm";
    m->position_embedding_type = "rope";
    m->rotary_percent = 1.0;
    m->swiglu = 1;
    m->untie_embeddings_and_output_weights = !tie;
    m->add_bias_linear = 0;
    m->embedding_layernorm = 0;
    m->hf_family = "phi3";
    return rc;
}

int hf_write_phi3_config(const char *dir, const tr_model_config *m, const tr_hf_export_options *o)
{
    /* pad_token_id null: Phi3Config's default 32000 is an embedding row a smaller vocabulary
     * lacks (nn.Embedding's padding_idx) */
    json_t *root = json_pack(
        "{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:n, s:n, s:b, s:s,"
        " s:f, s:f, s:f, s:f, s:b, s:s, s:n}",
        "architectures", "Phi3ForCausalLM", "model_type", "phi3", "vocab_size", m->vocab_size,
        "hidden_size", m->hidden_size, "intermediate_size", tr_model_ffn_hidden(m),
        "num_hidden_layers", m->num_layers, "num_attention_heads", m->num_attention_heads,
        "num_key_value_heads", m->num_query_groups, "max_position_embeddings",
        m->max_position_embeddings, "original_max_position_embeddings",
        m->max_position_embeddings, "rms_norm_eps", m->layernorm_epsilon, "rope_theta",
        m->rotary_base, "rope_scaling", "sliding_window", "tie_word_embeddings",
        !m->untie_embeddings_and_output_weights, "hidden_act", "silu", "attention_dropout", 0.0,
        "resid_pdrop", 0.0, "embd_pdrop", 0.0, "initializer_range", 0.02, "use_cache", 1,
        "torch_dtype", o->bf16 ? "bfloat16" : "float32", "pad_token_id");
    return hf_write_config_json(dir, root, TR_HF_PHI3, m, o);
}

/* ------------------------------------------------------------------ which models, the names */

int hf_phi3_shape(const tr_gpt_shape *s)
{
    /* a Llama's layer (RMSNorm, rope over whole heads without scaling, SwiGLU, no biases, the
     * sequential residual, no embedding norm), GQA and tying either way, no window (Phi-3's
     * is not computed by transformers' eager attention: a model that needs one is not its),
     * heads of C / NH, none of Gemma's switches */
    return s->hf_phi3 && s->rmsnorm && s->position == TR_POS_ROPE &&
                   s->rotary_dims == tr_gpt_head_size(s) && s->swiglu && s->no_linear_bias &&
                   !s->qkv_bias && !s->mlp_bias && !s->embedding_ln && !s->parallel_residual &&
                   !s->sliding_window && !s->kv_channels && !s->rope_scaling &&
                   !s->layernorm_1p && !s->embedding_multiplier && !s->geglu && !s->output_bias
               ? TR_HF_PHI3
               : -1;
}

int hf_phi3_map(const tr_param_tensor *t, char name[112])
{
    int l = -1, used = 0;
    name[0] = '\0';
    if (sscanf(t->name, "layers.%d.%n", &l, &used) != 1 || !used)
        return 0;
    if (!strcmp(t->name + used, "qkv.weight")) {
        snprintf(name, 112, "model.layers.%d.self_attn.qkv_proj.weight", l);
        return 1;
    }
    if (!strcmp(t->name + used, "fc.weight")) {
        snprintf(name, 112, "model.layers.%d.mlp.gate_up_proj.weight", l);
        return 2;
    }
    return 0;
}
