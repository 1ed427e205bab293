/* A Megatron-LM checkpoint's args (argparse.Namespace) -> trident's model section, and the
 * agreement of every rank file's args (megatron.h states what is read and refused). */
#include "hf/megatron_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    pt_pickle *p;
    uint32_t ns;
    const char *path;
} ns_ref;

/* args.KEY: 1 present and not None (*v), 0 absent or None */
static int get(const ns_ref *a, const char *key, uint32_t *v)
{
    return pt_value_get(a->p, a->ns, key, v) && pt_value_kind(a->p, *v) != PT_V_NONE;
}

static int bad(const ns_ref *a, const char *key, const char *fmt, const char *what)
{
    return tr_fail(TR_ERR_INVALID, "%s: args.%s %s%s", a->path, key, fmt, what);
}

/* an int >= lo (absent or None: dflt; dflt INT32_MIN: required) */
static int arg_int(const ns_ref *a, const char *key, int dflt, int lo, int *out)
{
    uint32_t v;
    int64_t i;
    if (!get(a, key, &v)) {
        if (dflt == INT32_MIN)
            return bad(a, key, "is missing (or None): ", "it is required");
        *out = dflt;
        return TR_OK;
    }
    if (!pt_value_int(a->p, v, &i))
        return tr_fail(TR_ERR_INVALID, "%s: args.%s is %s, not an int", a->path, key,
                       pt_value_kind_name(a->p, v));
    if (i < lo || i > (1 << 30))
        return tr_fail(TR_ERR_INVALID, "%s: args.%s is %lld: not in [%d, %d]", a->path, key,
                       (long long)i, lo, 1 << 30);
    *out = (int)i;
    return TR_OK;
}

static int arg_bool(const ns_ref *a, const char *key, int dflt, int *out)
{
    uint32_t v;
    if (!get(a, key, &v)) {
        *out = dflt;
        return TR_OK;
    }
    if (!pt_value_bool(a->p, v, out))
        return tr_fail(TR_ERR_INVALID, "%s: args.%s is %s, not a bool", a->path, key,
                       pt_value_kind_name(a->p, v));
    return TR_OK;
}

/* a finite number > 0 */
static int arg_num(const ns_ref *a, const char *key, double dflt, double *out)
{
    uint32_t v;
    if (!get(a, key, &v)) {
        *out = dflt;
        return TR_OK;
    }
    if (!pt_value_number(a->p, v, out) || !isfinite(*out) || !(*out > 0))
        return tr_fail(TR_ERR_INVALID, "%s: args.%s is %s, not a positive number", a->path, key,
                       pt_value_kind_name(a->p, v));
    return TR_OK;
}

/* a string (absent or None: dflt) */
static int arg_str(const ns_ref *a, const char *key, const char *dflt, const char **out)
{
    uint32_t v;
    if (!get(a, key, &v)) {
        *out = dflt;
        return TR_OK;
    }
    if (!(*out = pt_value_str(a->p, v)))
        return tr_fail(TR_ERR_INVALID, "%s: args.%s is %s, not a string", a->path, key,
                       pt_value_kind_name(a->p, v));
    return TR_OK;
}

/* refused when set: True, or any value but None / False / 0 (an int key) */
static int refuse_set(const ns_ref *a, const char *key, const char *why)
{
    uint32_t v;
    int b = 0;
    int64_t i = 0;
    if (!get(a, key, &v) || (pt_value_bool(a->p, v, &b) && !b) ||
        (pt_value_int(a->p, v, &i) && i == 0))
        return TR_OK;
    return bad(a, key, "is set: ", why);
}

/* the keys trident cannot represent */
static int refusals(const ns_ref *a)
{
    static const struct {
        const char *key, *why;
    } keys[] = {
        {"squared_relu", "trident's MLPs are GELU, SwiGLU or ReLU, not squared ReLU"},
        {"apply_residual_connection_post_layernorm",
         "trident's layers add the residual before the norm (pre-LN)"},
        {"qk_layernorm", "trident has no norm of the queries and keys"},
        {"multi_latent_attention", "trident's attention is multi-head or grouped-query"},
        {"rotary_interleaved", "trident's rope turns the halves of a head (rotate_half), not "
                               "interleaved pairs"},
        {"window_size", "trident's attention is causal over every position"},
        {"mtp_num_layers", "multi-token prediction layers are not part of trident's model"},
        {"fp8_param_gather", "the weights are kept in FP8 (float8 tensors) in the checkpoint"},
        {"pipeline_model_parallel_split_rank", "an encoder-decoder model's split"},
        {"heterogeneous_layers_config_path", "layers of different shapes"},
        {"use_mup", "muP's scaled attention and output"},
    };
    int rc = TR_OK;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0] && !rc; i++)
        rc = refuse_set(a, keys[i].key, keys[i].why);
    int ep = 1, freq = 1;
    if (!rc && !(rc = arg_int(a, "expert_model_parallel_size", 1, 1, &ep)) && ep > 1)
        rc = bad(a, "expert_model_parallel_size", "is above 1: ",
                 "the experts are cut over expert-parallel ranks' files, which are not merged "
                 "(save with expert_model_parallel_size 1)");
    if (!rc && !(rc = arg_int(a, "moe_layer_freq", 1, 1, &freq)) && freq > 1)
        rc = bad(a, "moe_layer_freq", "is above 1: ",
                 "trident's experts are in every layer when in one");
    return rc;
}

/* a number >= 0 (absent or None: 0) */
static int arg_nonneg(const ns_ref *a, const char *key, double *out)
{
    uint32_t v;
    *out = 0.0;
    if (!get(a, key, &v))
        return TR_OK;
    if (!pt_value_number(a->p, v, out))
        return tr_fail(TR_ERR_INVALID, "%s: args.%s is %s, not a number", a->path, key,
                       pt_value_kind_name(a->p, v));
    if (!isfinite(*out) || *out < 0)
        return tr_fail(TR_ERR_INVALID, "%s: args.%s is %g, not a number >= 0", a->path, key,
                       *out);
    return TR_OK;
}

/* a dropout probability, 0 <= p < 1 (absent or None: dflt) */
static int arg_prob(const ns_ref *a, const char *key, double dflt, double *out)
{
    uint32_t v;
    *out = dflt;
    if (!get(a, key, &v))
        return TR_OK;
    if (!pt_value_number(a->p, v, out) || !(*out >= 0 && *out < 1))
        return tr_fail(TR_ERR_INVALID, "%s: args.%s is %s, not a dropout probability (a number "
                       "from 0 to below 1)", a->path, key, pt_value_kind_name(a->p, v));
    return TR_OK;
}

/* a mixture of experts: num_experts and the router's keys (megatron-core 0.8's MoE layer with
 * SequentialMLP, dropless: what trident's model/gpt_moe.c computes) */
static int read_moe(const ns_ref *a, tr_model_config *m)
{
    int rc = arg_int(a, "num_experts", 0, 1, &m->num_experts);
    if (rc || !m->num_experts)
        return rc; /* (the moe_* keys of a dense model: Megatron-LM's defaults, not read) */
    static const struct {
        const char *key, *why;
    } no[] = {
        {"moe_grouped_gemm", "GroupedMLP's weight1 / weight2 layout is not mapped (SequentialMLP's "
                             "local_experts.N.linear_fc1 / linear_fc2 are)"},
        {"moe_expert_capacity_factor", "token dropping: trident's experts are dropless"},
        {"moe_pad_expert_input_to_capacity", "token dropping: trident's experts are dropless"},
        {"moe_shared_expert_intermediate_size", "shared experts are not in trident's model"},
        {"moe_input_jitter_eps", "trident's router has no input jitter"},
    };
    for (size_t i = 0; i < sizeof no / sizeof no[0] && !rc; i++)
        rc = refuse_set(a, no[i].key, no[i].why);
    const char *lb = NULL;
    if (!rc)
        rc = arg_int(a, "moe_router_topk", 2, 1, &m->moe_router_topk);
    if (!rc && m->moe_router_topk > m->num_experts)
        rc = tr_fail(TR_ERR_INVALID, "%s: args.moe_router_topk %d is above args.num_experts %d",
                     a->path, m->moe_router_topk, m->num_experts);
    if (!rc)
        rc = arg_bool(a, "moe_router_pre_softmax", 0, &m->moe_router_pre_softmax);
    if (!rc && m->moe_router_topk == 1 && !m->moe_router_pre_softmax)
        rc = bad(a, "moe_router_topk", "is 1 without moe_router_pre_softmax: ",
                 "trident refuses it (the softmax of one logit is 1: no gradient reaches "
                 "the router)");
    if (!rc)
        rc = arg_str(a, "moe_router_load_balancing_type", "aux_loss", &lb);
    if (!rc && strcmp(lb, "aux_loss") && strcmp(lb, "none"))
        rc = bad(a, "moe_router_load_balancing_type", "is not aux_loss or none: ", lb);
    if (!rc)
        m->moe_router_load_balancing_type = !strcmp(lb, "none") ? "none" : "aux_loss";
    if (!rc)
        rc = arg_nonneg(a, "moe_aux_loss_coeff", &m->moe_aux_loss_coeff);
    if (!rc && !strcmp(lb, "none"))
        m->moe_aux_loss_coeff = 0.0; /* (Megatron-LM computes none then) */
    if (!rc)
        rc = arg_nonneg(a, "moe_z_loss_coeff", &m->moe_z_loss_coeff);
    return rc;
}

/* positions and norms */
static int read_kinds(const ns_ref *a, tr_model_config *m)
{
    const char *norm = NULL, *pos = NULL;
    int rope_old = 0, add_pos = 1;
    int rc = arg_str(a, "normalization", "LayerNorm", &norm);
    if (!rc && strcmp(norm, "LayerNorm") && strcmp(norm, "RMSNorm"))
        rc = bad(a, "normalization", "is not LayerNorm or RMSNorm: ", norm);
    if (!rc)
        m->normalization = !strcmp(norm, "RMSNorm") ? "RMSNorm" : "LayerNorm";
    if (!rc && !(rc = arg_bool(a, "use_rotary_position_embeddings", 0, &rope_old)))
        rc = arg_bool(a, "add_position_embedding", 1, &add_pos);
    if (!rc)
        rc = arg_str(a, "position_embedding_type",
                     rope_old ? "rope" : add_pos ? "learned_absolute" : "none", &pos);
    if (!rc && strcmp(pos, "learned_absolute") && strcmp(pos, "rope"))
        rc = bad(a, "position_embedding_type", "is not learned_absolute or rope: ", pos);
    if (!rc)
        m->position_embedding_type = !strcmp(pos, "rope") ? "rope" : "learned_absolute";
    return rc;
}

/* the MLP: SwiGLU, or GELU (tanh: openai_gelu, or Megatron's fused bias-GELU, which is the tanh
 * formula, where the linear layers have biases) */
static int read_mlp(const ns_ref *a, tr_model_config *m)
{
    int openai = 0, onnx = 0, fusion = 0;
    int rc = arg_bool(a, "swiglu", 0, &m->swiglu);
    if (!rc)
        rc = arg_bool(a, "openai_gelu", 0, &openai);
    if (!rc)
        rc = arg_bool(a, "onnx_safe", 0, &onnx);
    if (!rc)
        rc = arg_bool(a, "bias_gelu_fusion", 0, &fusion);
    m->gelu_approximate = m->swiglu || openai || (!onnx && fusion && m->add_bias_linear)
                              ? "tanh" : "none"; /* (SwiGLU: the config's default, no GELU) */
    return rc;
}

static int read_rope(const ns_ref *a, tr_model_config *m)
{
    int rc = arg_num(a, "rotary_base", 10000, &m->rotary_base);
    if (!rc)
        rc = arg_num(a, "rotary_percent", 1.0, &m->rotary_percent);
    if (!rc && m->rotary_percent > 1.0)
        rc = bad(a, "rotary_percent", "is above 1", "");
    if (!rc)
        rc = arg_num(a, "rotary_seq_len_interpolation_factor", 1.0,
                     &m->rotary_seq_len_interpolation_factor);
    if (!rc)
        rc = arg_bool(a, "use_rope_scaling", 0, &m->use_rope_scaling);
    if (!rc)
        rc = arg_num(a, "rope_scaling_factor", 8.0, &m->rope_scaling_factor);
    /* megatron-core's apply_rope_scaling: low 1, high 4, 8192 original positions */
    m->rope_scaling_low_freq_factor = 1.0, m->rope_scaling_high_freq_factor = 4.0;
    m->rope_scaling_original_max_position_embeddings = 8192;
    int hs = tr_model_head_size(m), dims = (int)(hs * m->rotary_percent);
    if (!rc && !strcmp(m->position_embedding_type, "rope") && (dims < 2 || dims % 2))
        rc = tr_fail(TR_ERR_INVALID, "%s: args.rotary_percent %g of heads of %d turns %d "
                     "dimensions: not an even number >= 2", a->path, m->rotary_percent, hs, dims);
    return rc;
}

/* sizes, groups and the vocabulary */
static int read_sizes(const ns_ref *a, mlm_args *o)
{
    tr_model_config *m = &o->m;
    int gqa = 0, kv = 0, vocab = 0, maxpos = 0, rc = TR_OK;
    if (!rc)
        rc = arg_int(a, "num_layers", INT32_MIN, 1, &m->num_layers);
    if (!rc)
        rc = arg_int(a, "hidden_size", INT32_MIN, 1, &m->hidden_size);
    if (!rc)
        rc = arg_int(a, "num_attention_heads", INT32_MIN, 1, &m->num_attention_heads);
    if (!rc)
        rc = arg_int(a, "kv_channels", 0, 1, &kv);
    if (!rc && !kv && m->hidden_size % m->num_attention_heads)
        rc = tr_fail(TR_ERR_INVALID, "%s: args.hidden_size %d is not divisible by "
                     "args.num_attention_heads %d (and args.kv_channels is not set)", a->path,
                     m->hidden_size, m->num_attention_heads);
    m->kv_channels = kv && kv * m->num_attention_heads != m->hidden_size ? kv : 0;
    if (!rc)
        rc = arg_bool(a, "group_query_attention", 0, &gqa);
    m->num_query_groups = m->num_attention_heads;
    if (!rc && gqa)
        rc = arg_int(a, "num_query_groups", INT32_MIN, 1, &m->num_query_groups);
    if (!rc && m->num_attention_heads % m->num_query_groups)
        rc = tr_fail(TR_ERR_INVALID, "%s: args.num_attention_heads %d is not divisible by "
                     "args.num_query_groups %d", a->path, m->num_attention_heads,
                     m->num_query_groups);
    if (!rc)
        rc = arg_int(a, "ffn_hidden_size", 0, 1, &m->ffn_hidden_size);
    if (!rc && !m->ffn_hidden_size)
        m->ffn_hidden_size = tr_model_ffn_hidden(m);
    if (!rc)
        rc = arg_int(a, "seq_length", INT32_MIN, 1, &m->seq_length);
    if (!rc)
        rc = arg_int(a, "max_position_embeddings", m->seq_length, 1, &maxpos);
    if (!rc && maxpos < m->seq_length && !strcmp(m->position_embedding_type, "learned_absolute"))
        rc = tr_fail(TR_ERR_INVALID, "%s: args.max_position_embeddings %d is below "
                     "args.seq_length %d", a->path, maxpos, m->seq_length);
    m->max_position_embeddings = maxpos > m->seq_length ? maxpos : m->seq_length;
    if (!rc)
        rc = arg_int(a, "padded_vocab_size", INT32_MIN, 1, &o->padded_vocab);
    if (!rc)
        rc = arg_int(a, "vocab_size", o->padded_vocab, 1, &vocab);
    if (!rc && vocab > o->padded_vocab)
        rc = tr_fail(TR_ERR_INVALID, "%s: args.vocab_size %d is above args.padded_vocab_size %d",
                     a->path, vocab, o->padded_vocab);
    m->vocab_size = vocab;
    if (!rc)
        rc = arg_int(a, "make_vocab_size_divisible_by", 128, 1,
                     &m->make_vocab_size_divisible_by);
    return rc;
}

/* the parallel layout and what must divide by it */
static int read_layout(const ns_ref *a, mlm_args *o)
{
    const tr_model_config *m = &o->m;
    int per_chunk = 0;
    int rc = arg_int(a, "tensor_model_parallel_size", 1, 1, &o->tp);
    if (!rc)
        rc = arg_int(a, "pipeline_model_parallel_size", 1, 1, &o->pp);
    if (!rc)
        rc = arg_int(a, "virtual_pipeline_model_parallel_size", 1, 1, &o->vp);
    if (!rc && o->vp == 1)
        rc = arg_int(a, "num_layers_per_virtual_pipeline_stage", 0, 1, &per_chunk);
    if (!rc && per_chunk && m->num_layers % (o->pp * per_chunk))
        rc = tr_fail(TR_ERR_INVALID, "%s: args.num_layers %d is not a multiple of "
                     "pipeline_model_parallel_size x num_layers_per_virtual_pipeline_stage",
                     a->path, m->num_layers);
    if (!rc && per_chunk)
        o->vp = m->num_layers / (o->pp * per_chunk);
    if (!rc && o->vp > MLM_MAX_VP)
        rc = tr_fail(TR_ERR_INVALID, "%s: %d virtual pipeline chunks (at most %d are read)",
                     a->path, o->vp, MLM_MAX_VP);
    const struct {
        const char *what;
        int n;
    } split[] = {{"num_attention_heads", m->num_attention_heads},
                 {"num_query_groups", m->num_query_groups},
                 {"ffn_hidden_size", m->ffn_hidden_size},
                 {"padded_vocab_size", o->padded_vocab}};
    for (size_t i = 0; i < sizeof split / sizeof split[0] && !rc; i++)
        if (split[i].n % o->tp)
            rc = tr_fail(TR_ERR_INVALID, "%s: args.%s %d is not divisible by "
                         "args.tensor_model_parallel_size %d", a->path, split[i].what,
                         split[i].n, o->tp);
    return rc;
}

int mlm_read_args(pt_pickle *p, uint32_t args, const char *path, mlm_args *o)
{
    ns_ref a = {p, args, path};
    tr_model_config *m = &o->m;
    memset(o, 0, sizeof *o);
    if (pt_value_kind(p, args) != PT_V_NAMESPACE)
        return tr_fail(TR_ERR_INVALID, "%s: args is %s, not an argparse.Namespace", path,
                       pt_value_kind_name(p, args));
    m->init_method_std = 0.02;
    m->embedding_multiplier = 1.0;
    int rc = refusals(&a);
    if (!rc)
        rc = arg_bool(&a, "add_bias_linear", 1, &m->add_bias_linear);
    if (!rc)
        rc = arg_bool(&a, "add_qkv_bias", 0, &m->add_qkv_bias);
    if (!rc)
        rc = arg_bool(&a, "untie_embeddings_and_output_weights", 0,
                      &m->untie_embeddings_and_output_weights);
    if (!rc)
        rc = read_kinds(&a, m);
    if (!rc)
        rc = read_sizes(&a, o);
    if (!rc)
        rc = read_mlp(&a, m);
    if (!rc)
        rc = read_rope(&a, m);
    if (!rc && !get(&a, "norm_epsilon", &(uint32_t){0}))
        rc = arg_num(&a, "layernorm_epsilon", 1e-5, &m->layernorm_epsilon);
    else if (!rc)
        rc = arg_num(&a, "norm_epsilon", 1e-5, &m->layernorm_epsilon);
    if (!rc)
        rc = arg_bool(&a, "apply_layernorm_1p", 0, &m->apply_layernorm_1p);
    if (!rc)
        rc = arg_num(&a, "init_method_std", 0.02, &m->init_method_std);
    if (!rc)
        rc = read_moe(&a, m);
    /* the rates it trained with (Megatron-LM's defaults 0.1), for the manifest's dropout line */
    if (!rc)
        rc = arg_prob(&a, "hidden_dropout", 0.1, &m->hidden_dropout);
    if (!rc)
        rc = arg_prob(&a, "attention_dropout", 0.1, &m->attention_dropout);
    if (!rc)
        rc = read_layout(&a, o);
    return rc;
}

/* the keys whose values must be the same in every rank's file */
static const char *const model_keys[] = {
    "num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads",
    "group_query_attention", "num_query_groups", "kv_channels", "seq_length",
    "max_position_embeddings", "padded_vocab_size", "vocab_size",
    "make_vocab_size_divisible_by", "normalization", "norm_epsilon", "layernorm_epsilon",
    "apply_layernorm_1p", "swiglu", "openai_gelu", "onnx_safe", "bias_gelu_fusion",
    "position_embedding_type", "use_rotary_position_embeddings", "add_position_embedding",
    "rotary_base", "rotary_percent", "rotary_seq_len_interpolation_factor", "use_rope_scaling",
    "rope_scaling_factor", "untie_embeddings_and_output_weights", "add_bias_linear",
    "add_qkv_bias", "tensor_model_parallel_size", "pipeline_model_parallel_size",
    "virtual_pipeline_model_parallel_size", "num_layers_per_virtual_pipeline_stage",
    "num_experts", "expert_model_parallel_size", "moe_router_topk", "moe_router_pre_softmax",
    "moe_grouped_gemm", "moe_router_load_balancing_type", "moe_aux_loss_coeff",
    "moe_z_loss_coeff", "transformer_impl", "use_mcore_models",
    "use_legacy_models", "decoder_first_pipeline_num_layers",
    "decoder_last_pipeline_num_layers", "standalone_embedding_stage"};

/* a value's text for a message */
static void text_of(pt_pickle *p, int present, uint32_t v, char *buf, size_t cap)
{
    int64_t i;
    double d;
    int b;
    const char *s;
    if (!present)
        snprintf(buf, cap, "absent");
    else if (pt_value_bool(p, v, &b))
        snprintf(buf, cap, "%s", b ? "True" : "False");
    else if (pt_value_int(p, v, &i))
        snprintf(buf, cap, "%lld", (long long)i);
    else if (pt_value_number(p, v, &d))
        snprintf(buf, cap, "%.17g", d);
    else if ((s = pt_value_str(p, v)))
        snprintf(buf, cap, "'%.100s'", s);
    else
        snprintf(buf, cap, "%s", pt_value_kind_name(p, v));
}

int mlm_same_args(pt_pickle *pa, uint32_t a, const char *path_a, pt_pickle *pb, uint32_t b,
                  const char *path_b)
{
    for (size_t k = 0; k < sizeof model_keys / sizeof model_keys[0]; k++) {
        uint32_t va = 0, vb = 0;
        int ha = pt_value_get(pa, a, model_keys[k], &va);
        int hb = pt_value_get(pb, b, model_keys[k], &vb);
        char ta[160], tb[160];
        text_of(pa, ha, va, ta, sizeof ta);
        text_of(pb, hb, vb, tb, sizeof tb);
        if (strcmp(ta, tb))
            return tr_fail(TR_ERR_INVALID, "%s: args.%s is %s, but %s says %s: the rank files "
                           "are not of one model", path_b, model_keys[k], tb, path_a, ta);
    }
    return TR_OK;
}
