/* Mixtral (MixtralForCausalLM of transformers 4.38: Mixtral-8x7B, -8x22B) to and from a trident
 * model with experts: config.json's expert keys both ways and the expert tensors' names.
 * family_config.c reads the rest of config.json as a Mistral's (read_llama) and dispatches here;
 * family.c maps the other tensors as a Llama's (hf.h states the mapping).
 *
 * transformers 4.38's MixtralSparseMoeBlock: logits = gate(x) (E, C, no bias), the softmax over
 * all E experts in float32, the top num_experts_per_tok of it, those weights divided by their sum,
 * each expert w2(silu(w1 x) * w3 x). Dividing the top-k probabilities by their sum is the softmax
 * of the k logits: trident's router with moe_router_pre_softmax false (model/gpt.h). The
 * load-balancing loss (router_aux_loss_coef) is added by transformers only with
 * output_router_logits; the import records the coefficient as moe_aux_loss_coeff either way. */
#include "hf/hf_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

int hf_read_mixtral(json_t *root, const char *path, tr_model_config *m)
{
    /* (MixtralConfig's defaults: Mixtral-8x7B's 8 experts, 2 a token, 0.001) */
    int rc = hf_get_int(root, path, "num_local_experts", 8, &m->num_experts);
    if (!rc)
        rc = hf_get_int(root, path, "num_experts_per_tok", 2, &m->moe_router_topk);
    if (!rc && m->moe_router_topk > m->num_experts)
        rc = tr_fail(TR_ERR_INVALID, "%s: num_experts_per_tok %d is more than num_local_experts "
                     "%d", path, m->moe_router_topk, m->num_experts);
    if (!rc && m->moe_router_topk == 1)
        rc = hf_refuse(path, "num_experts_per_tok", "1 is refused by trident's router (Megatron's "
                       "rule: the softmax of one logit is 1, the router would get no gradient); "
                       "2 or more converts");
    json_t *coef = json_object_get(root, "router_aux_loss_coef");
    m->moe_aux_loss_coeff = 0.001;
    if (!rc && coef && !(json_is_number(coef) && json_number_value(coef) >= 0.0 &&
                         isfinite(json_number_value(coef))))
        rc = tr_fail(TR_ERR_INVALID, "%s: router_aux_loss_coef must be a number >= 0", path);
    else if (coef)
        m->moe_aux_loss_coeff = json_number_value(coef);
    int logits = 0; /* (checked, not kept: whether transformers adds the loss) */
    if (!rc)
        rc = hf_get_bool(root, path, "output_router_logits", 0, &logits);
    /* later transformers' keys 4.38 does not read */
    json_t *jitter = json_object_get(root, "router_jitter_noise");
    if (!rc && jitter && !json_is_null(jitter) &&
        !(json_is_number(jitter) && json_number_value(jitter) == 0.0))
        rc = hf_refuse(path, "router_jitter_noise", "trident's router has no jitter (the "
                       "experts' inputs scaled by noise while training); 0 converts");
    m->moe_z_loss_coeff = 0.0;
    m->moe_router_pre_softmax = 0;
    m->moe_router_load_balancing_type = "aux_loss";
    return rc;
}

int hf_write_mixtral_config(const char *dir, const tr_model_config *m,
                            const tr_hf_export_options *o)
{
    int aux = !m->moe_router_load_balancing_type ||
              !strcmp(m->moe_router_load_balancing_type, "aux_loss");
    json_t *root = json_pack(
        "{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:i, s:b, s:s, s:f, s:b, s:s, s:f,"
        " s:o, s:i, s:i, s:f, s:b}",
        "architectures", "MixtralForCausalLM", "model_type", "mixtral", "hidden_size",
        m->hidden_size, "intermediate_size", tr_model_ffn_hidden(m), "num_hidden_layers",
        m->num_layers, "num_attention_heads", m->num_attention_heads, "num_key_value_heads",
        m->num_query_groups, "max_position_embeddings", m->max_position_embeddings,
        "rms_norm_eps", m->layernorm_epsilon, "rope_theta", m->rotary_base, "vocab_size",
        m->vocab_size, "tie_word_embeddings", !m->untie_embeddings_and_output_weights,
        "hidden_act", "silu", "initializer_range", 0.02, "use_cache", 1, "torch_dtype",
        o->bf16 ? "bfloat16" : "float32", "attention_dropout", 0.0, "sliding_window",
        m->sliding_window ? json_integer(m->sliding_window) : json_null(), "num_local_experts",
        m->num_experts, "num_experts_per_tok", m->moe_router_topk, "router_aux_loss_coef",
        aux ? m->moe_aux_loss_coeff : 0.0, "output_router_logits", 0);
    /* a head size other than hidden / heads: later transformers' head_dim (4.38 has none) */
    if (root && m->kv_channels && json_object_set_new(root, "head_dim",
                                                      json_integer(m->kv_channels)))
        root = (json_decref(root), NULL);
    return hf_write_config_json(dir, root, TR_HF_MIXTRAL, m, o);
}

int hf_mixtral_map(const tr_param_tensor *t, char name[2][112])
{
    int l = -1, e = -1, used = 0, used2 = 0;
    if (sscanf(t->name, "layers.%d.%n", &l, &used) != 1 || !used)
        return 0;
    const char *rest = t->name + used;
    if (!strcmp(rest, "router.weight")) {
        snprintf(name[0], 112, "model.layers.%d.block_sparse_moe.gate.weight", l);
        return 1;
    }
    if (sscanf(rest, "experts.%d.%n", &e, &used2) != 1 || !used2)
        return 0;
    const char *p = "model.layers.%d.block_sparse_moe.experts.%d.w%d.weight";
    if (!strcmp(rest + used2, "fc_proj.weight")) {
        snprintf(name[0], 112, p, l, e, 2);
        return 1;
    }
    if (!strcmp(rest + used2, "fc.weight")) { /* rows (feature, {gate, up}): w1, w3 */
        snprintf(name[0], 112, p, l, e, 1);
        snprintf(name[1], 112, p, l, e, 3);
        return 2;
    }
    return 0;
}
