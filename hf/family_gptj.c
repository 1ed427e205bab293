/* GPT-J (GPTJForCausalLM of transformers 4.38: EleutherAI/gpt-j-6b) to and from a trident model:
 * config.json both ways, the tensors' names, which models are GPT-J. family.c and
 * family_config.c dispatch here (hf.h states the mapping).
 *
 * transformers' GPTJBlock: out = x + out_proj(attn(ln_1(x))) + fc_out(gelu(fc_in(ln_1(x))))
 * with one ln_1 (trident: parallel_residual + parallel_shared_norm, no ln2); q_proj, k_proj,
 * v_proj and out_proj without biases, fc_in and fc_out with them (add_bias_linear false +
 * add_mlp_bias); no position table: rotary positions (base 10000, fixed) over the first
 * rotary_dim dimensions of each head, rotate_every_two: the INTERLEAVED pairs (x0, x1),
 * (x2, x3), .. of pair frequency i for pair i. trident's rope pairs the two halves of the
 * rotated part (rotate_half: (x_i, x_{i + r/2})), so q_proj's and k_proj's rows are permuted
 * inside the rotary part of each head: HF row 2i -> trident row i, HF row 2i + 1 -> trident
 * row r/2 + i (hf_gptj_rotary_row; the same for the export, which reads trident's row of each
 * HF row). ln_f; lm_head untied with a bias (output_layer_bias). */
#include "hf/hf_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ config.json */

int hf_read_gptj(json_t *root, const char *path, tr_model_config *m)
{
    /* (GPTJConfig's defaults for the others: 2048 positions, rotary_dim 64, n_inner null
     * (4 n_embd), gelu_new, epsilon 1e-5, untied) */
    int rc = hf_read_gpt_dims(root, path, 2048, "GPTJAttention", m);
    int hs = rc ? 0 : m->hidden_size / m->num_attention_heads, rot = 0;
    json_t *rd = json_object_get(root, "rotary_dim");
    if (!rc && rd && json_is_null(rd))
        rc = tr_fail(TR_ERR_INVALID, "%s: rotary_dim null is not supported: transformers 4.38's "
                     "GPT-J then makes sin / cos tables of n_embd dimensions, which fit a head "
                     "only when n_head is 1; set rotary_dim to the head size %d for rotary "
                     "positions over whole heads", path, hs);
    if (!rc)
        rc = hf_get_int(root, path, "rotary_dim", 64, &rot);
    if (!rc && (rot % 2 || rot > hs))
        rc = tr_fail(TR_ERR_INVALID, "%s: rotary_dim %d is not supported: GPT-J rotates pairs of "
                     "dimensions of a head; trident rotates an even number of them, at most the "
                     "head size n_embd / n_head = %d", path, rot, hs);
    if (!rc)
        rc = hf_rotary_share(path, "rotary_dim", "rotary_dim", "head_dim", (double)rot / hs, m);
    int exact = 0, tie = 0;
    if (!rc)
        rc = hf_gelu_act(root, path, "activation_function", "gelu_new", "GPT-J MLP", &exact);
    if (!rc)
        rc = hf_get_bool(root, path, "tie_word_embeddings", 0, &tie);
    if (!rc && tie)
        rc = tr_fail(TR_ERR_INVALID, "%s: tie_word_embeddings true is not supported: GPT-J's "
                     "lm_head has a bias, and trident's head has one only when untied "
                     "(model.output_layer_bias with untie_embeddings_and_output_weights)", path);
    m->num_query_groups = m->num_attention_heads;
    m->normalization = "LayerNorm";
    m->position_embedding_type = "rope";
    m->rotary_base = 10000.0; /* (GPT-J's create_sinusoidal_positions: fixed) */
    m->swiglu = 0;
    m->untie_embeddings_and_output_weights = 1;
    m->output_layer_bias = 1;
    m->add_bias_linear = 0;
    m->add_mlp_bias = 1;
    m->embedding_layernorm = 0;
    m->parallel_residual = 1;
    m->parallel_shared_norm = 1;
    m->gelu_approximate = exact ? "none" : "tanh";
    return rc;
}

double hf_gptj_numel(const tr_model_config *m)
{
    double C = m->hidden_size, V = m->vocab_size, L = m->num_layers, F = m->ffn_hidden_size;
    /* wte, lm_head and its bias, ln_f; per layer ln_1, q/k/v/out_proj, fc_in and fc_out with
     * their biases */
    return 2 * V * C + V + 2 * C + L * (2 * C + 4 * C * C + 2 * F * C + F + C);
}

int hf_write_gptj_config(const char *dir, const tr_model_config *m, const tr_hf_export_options *o)
{
    int exact = m->gelu_approximate && !strcmp(m->gelu_approximate, "none");
    int rot = (int)(tr_model_head_size(m) * m->rotary_percent);
    json_t *root = json_pack(
        "{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:s, s:b, s:f, s:f, s:f, s:f,"
        " s:b, s:s}",
        "architectures", "GPTJForCausalLM", "model_type", "gptj", "vocab_size", m->vocab_size,
        "n_positions", m->max_position_embeddings, "n_embd", m->hidden_size, "n_layer",
        m->num_layers, "n_head", m->num_attention_heads, "rotary_dim", rot, "n_inner",
        tr_model_ffn_hidden(m), "layer_norm_epsilon", m->layernorm_epsilon,
        "activation_function", exact ? "gelu" : "gelu_new", "tie_word_embeddings", 0,
        "resid_pdrop", 0.0, "embd_pdrop", 0.0, "attn_pdrop", 0.0, "initializer_range", 0.02,
        "use_cache", 1, "torch_dtype", o->bf16 ? "bfloat16" : "float32");
    return hf_write_config_json(dir, root, TR_HF_GPTJ, m, o);
}

/* ------------------------------------------------------------------ which models, the names */

int hf_gptj_shape(const tr_gpt_shape *s)
{
    /* LayerNorm, rope of base 10000 over any even share of the head, a GELU MLP of any width
     * with its biases and an attention without them, a key/value head per head, one norm
     * feeding both branches of the parallel residual, the untied head with its bias; no
     * embedding norm, no window, none of Gemma's switches, no rope scaling */
    return !s->rmsnorm && s->position == TR_POS_ROPE && s->rotary_base == 10000.0f &&
                   !s->swiglu && !s->geglu && s->no_linear_bias && !s->qkv_bias && s->mlp_bias &&
                   (!s->query_groups || s->query_groups == s->NH) && s->untie && s->output_bias &&
                   s->parallel_residual && s->parallel_shared_norm && !s->embedding_ln &&
                   !s->sliding_window && !s->kv_channels && !s->layernorm_1p &&
                   !s->embedding_multiplier && !s->rope_scaling
               ? TR_HF_GPTJ
               : -1;
}

uint64_t hf_gptj_rotary_row(uint64_t d, int rotary_dims)
{
    uint64_t r = (uint64_t)rotary_dims;
    return d >= r ? d : d % 2 ? r / 2 + d / 2 : d / 2;
}

int hf_gptj_map(const tr_param_tensor *t, char name[3][112], int *qkv)
{
    static const struct { const char *trident, *hf; } layer[] = {
        {"ln1.weight", "ln_1.weight"},
        {"ln1.bias", "ln_1.bias"},
        {"attn_proj.weight", "attn.out_proj.weight"},
        {"fc.weight", "mlp.fc_in.weight"},
        {"fc.bias", "mlp.fc_in.bias"},
        {"fc_proj.weight", "mlp.fc_out.weight"},
        {"fc_proj.bias", "mlp.fc_out.bias"}};
    static const struct { const char *trident, *hf; } top[] = {
        {"wte", "transformer.wte.weight"},
        {"output_layer", "lm_head.weight"},
        {"output_layer.bias", "lm_head.bias"},
        {"lnf.weight", "transformer.ln_f.weight"},
        {"lnf.bias", "transformer.ln_f.bias"}};
    int l = -1, used = 0;
    *qkv = 0;
    name[0][0] = '\0';
    if (sscanf(t->name, "layers.%d.%n", &l, &used) == 1 && used > 0) {
        const char *rest = t->name + used;
        if (!strcmp(rest, "qkv.weight")) {
            const char *p[3] = {"q", "k", "v"};
            for (int i = 0; i < 3; i++)
                snprintf(name[i], 112, "transformer.h.%d.attn.%s_proj.weight", l, p[i]);
            *qkv = 1;
            return TR_OK;
        }
        for (size_t i = 0; i < sizeof layer / sizeof layer[0]; i++)
            if (!strcmp(rest, layer[i].trident))
                snprintf(name[0], 112, "transformer.h.%d.%s", l, layer[i].hf);
    } else
        for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
            if (!strcmp(t->name, top[i].trident))
                snprintf(name[0], 112, "%s", top[i].hf);
    if (!name[0][0])
        return tr_fail(TR_ERR_INTERNAL, "no GPT-J name for trident tensor '%s'", t->name);
    return TR_OK;
}
