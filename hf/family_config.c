/* Llama, Qwen2, Bloom and GPT-NeoX config.json files (issue 17): read into trident's model
 * section and written from it; which family a model is. The tensors: family.c. */
#include "hf/hf_internal.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* key absent, or equal to want (a JSON value: string, bool, null or integer) */
static int check_value(json_t *root, const char *path, const char *key, json_t *want,
                       const char *why)
{
    json_t *v = json_object_get(root, key);
    int ok = !v || json_equal(v, want);
    json_decref(want);
    return ok ? TR_OK : hf_refuse(path, key, why);
}

/* Llama, Mistral (mistral 1: a Llama with a sliding_window) or, family TR_HF_QWEN2, Qwen2: a
 * Llama with q, k and v biases, whose config.json has no attention_bias and its own defaults
 * (transformers 4.38's Qwen2Config: max_position_embeddings 32768) and window switch; or,
 * TR_HF_GEMMA, Gemma: these keys (8192 positions by default) and hf_read_gemma's; or,
 * TR_HF_MIXTRAL (with mistral 1), Mixtral: a Mistral's keys of MixtralConfig's defaults and
 * hf_read_mixtral's */
static int read_llama(json_t *root, const char *path, int family, int mistral,
                      tr_model_config *m)
{
    int qwen2 = family == TR_HF_QWEN2, gemma = family == TR_HF_GEMMA;
    int mixtral = family == TR_HF_MIXTRAL;
    int rc = hf_get_int(root, path, "num_hidden_layers", -1, &m->num_layers);
    if (!rc)
        rc = hf_get_int(root, path, "hidden_size", -1, &m->hidden_size);
    if (!rc)
        rc = hf_get_int(root, path, "num_attention_heads", -1, &m->num_attention_heads);
    /* (GemmaConfig's default: 16; MixtralConfig's 8, null taking the heads) */
    int kv = gemma ? 16
             : mixtral && !json_object_get(root, "num_key_value_heads") ? 8
                                                                         : m->num_attention_heads;
    if (!rc)
        rc = hf_get_int(root, path, "num_key_value_heads", kv, &m->num_query_groups);
    if (!rc)
        rc = hf_get_int(root, path, "intermediate_size", -1, &m->ffn_hidden_size);
    if (!rc)
        rc = hf_get_int(root, path, "vocab_size", -1, &m->vocab_size);
    if (!rc)
        rc = hf_get_int(root, path, "max_position_embeddings",
                        qwen2 ? 32768 : gemma ? 8192 : mixtral ? 131072 : 2048,
                        &m->max_position_embeddings);
    if (!rc)
        rc = hf_get_num(root, path, "rms_norm_eps", mixtral ? 1e-5 : 1e-6,
                        &m->layernorm_epsilon);
    if (!rc)
        rc = hf_get_num(root, path, "rope_theta", mixtral ? 1e6 : 10000.0, &m->rotary_base);
    if (!rc && !gemma) /* (Gemma's GELU: hf_read_gemma) */
        rc = check_value(root, path, "hidden_act", json_string("silu"), "trident's SwiGLU uses silu");
    if (!rc) /* (Llama's alone: transformers 4.38's Qwen2, Mistral and Gemma have none) */
        rc = family == TR_HF_LLAMA && !mistral
                 ? hf_read_rope_scaling(root, path, m)
                 : check_value(root, path, "rope_scaling", json_null(),
                               "no rope scaling in trident's Qwen2, Mistral, Mixtral or "
                               "Gemma");
    if (!rc && !qwen2)
        rc = check_value(root, path, "attention_bias", json_false(),
                         gemma ? "trident's Gemma has no attention biases"
                               : "trident's Llama has no attention biases (a Qwen2's q, k and v "
                                 "biases: model_type qwen2)");
    if (!rc)
        rc = check_value(root, path, "pretraining_tp", json_integer(1), "must be 1");
    /* later transformers' keys 4.38 does not read (a Llama 3.1 folder saved by 4.43 has
     * mlp_bias): refused unless they say what trident computes */
    if (!rc)
        rc = check_value(root, path, "mlp_bias", json_false(), "trident's MLP here has no biases");
    /* head_dim (Gemma's: hf_read_gemma): transformers reads Mistral's from 4.43 (Mistral-Nemo:
     * 128 in hidden 5120 of 32 heads) -> kv_channels; Llama's from 4.45 only, Qwen2's not in
     * 4.44: theirs must be hidden_size / num_attention_heads */
    json_t *head_dim = gemma ? NULL : json_object_get(root, "head_dim");
    if (!rc && mistral)
        rc = hf_read_head_dim(root, path, 0, mixtral ? "Mixtral" : "Mistral", m);
    else if (!rc && head_dim && !json_is_null(head_dim) &&
             !(json_is_integer(head_dim) && m->num_attention_heads > 0 &&
               json_integer_value(head_dim) * m->num_attention_heads == m->hidden_size))
        rc = tr_fail(TR_ERR_INVALID, "%s: head_dim is not supported unless it is hidden_size / "
                     "num_attention_heads (%d / %d): transformers 4.44's %s has no head_dim "
                     "(Mistral's is read: model_type mistral)", path, m->hidden_size,
                     m->num_attention_heads, qwen2 ? "Qwen2" : "Llama");
    /* The sliding window: Mistral's (a window of every position, or null, is none: Mistral-7B
     * v0.2 and later; v0.1's 4096 of 32768 is kept as model.sliding_window, and sequences
     * stay within it, where full causal attention is the windowed one); Qwen2's only with
     * use_sliding_window (its lower layers alone, max_window_layers: refused unless it spans
     * every position); a Llama's is not read by transformers */
    json_t *window = mistral || qwen2 ? json_object_get(root, "sliding_window") : NULL;
    json_t *use_window = json_object_get(root, "use_sliding_window"); /* Qwen2's switch */
    if (!rc && qwen2 && use_window && !json_is_boolean(use_window))
        rc = tr_fail(TR_ERR_INVALID, "%s: use_sliding_window must be true or false", path);
    if (qwen2 && !(use_window && json_is_true(use_window)))
        window = NULL; /* (off: transformers ignores sliding_window) */
    if (window && json_is_null(window))
        window = NULL;
    if (!rc && window && (!json_is_integer(window) || json_integer_value(window) < 1))
        rc = tr_fail(TR_ERR_INVALID, "%s: sliding_window must be an integer >= 1 or null", path);
    else if (!rc && window && json_integer_value(window) < m->max_position_embeddings) {
        if (qwen2)
            rc = tr_fail(TR_ERR_INVALID, "%s: sliding_window is not supported with "
                         "use_sliding_window: trident's attention is full causal, the same as "
                         "a window only of max_position_embeddings (%d) or more", path,
                         m->max_position_embeddings);
        else
            m->sliding_window = (int)json_integer_value(window);
    }
    json_t *tie = json_object_get(root, "tie_word_embeddings");
    m->normalization = "RMSNorm";
    m->position_embedding_type = "rope";
    m->rotary_percent = 1.0;
    m->swiglu = 1;
    m->untie_embeddings_and_output_weights = !(tie && json_is_true(tie));
    m->add_bias_linear = 0;
    m->add_qkv_bias = qwen2;
    m->embedding_layernorm = 0;
    if (!rc && gemma)
        rc = hf_read_gemma(root, path, m);
    if (!rc && mixtral)
        rc = hf_read_mixtral(root, path, m);
    return rc;
}

static int read_bloom(json_t *root, const char *path, tr_model_config *m)
{
    int rc = hf_get_int(root, path, "n_layer", -1, &m->num_layers);
    const char *hkey = json_object_get(root, "hidden_size") ? "hidden_size" : "n_embed";
    if (!rc)
        rc = hf_get_int(root, path, hkey, -1, &m->hidden_size);
    if (!rc)
        rc = hf_get_int(root, path, "n_head", -1, &m->num_attention_heads);
    if (!rc)
        rc = hf_get_int(root, path, "vocab_size", -1, &m->vocab_size);
    if (!rc)
        rc = hf_get_int(root, path, "seq_length", 2048, &m->max_position_embeddings);
    if (!rc)
        rc = hf_get_num(root, path, "layer_norm_epsilon", 1e-5, &m->layernorm_epsilon);
    if (!rc)
        rc = check_value(root, path, "apply_residual_connection_post_layernorm", json_false(),
                         "trident's residual is taken before the LayerNorm");
    if (!rc)
        rc = check_value(root, path, "pretraining_tp", json_integer(1), "must be 1");
    if (!rc)
        rc = check_value(root, path, "tie_word_embeddings", json_true(), "Bloom's head is tied");
    m->num_query_groups = m->num_attention_heads;
    m->ffn_hidden_size = 4 * m->hidden_size;
    m->normalization = "LayerNorm";
    m->position_embedding_type = "alibi";
    m->rotary_base = 10000.0;
    m->rotary_percent = 1.0;
    m->swiglu = 0;
    m->untie_embeddings_and_output_weights = 0;
    m->add_bias_linear = 1;
    m->embedding_layernorm = 1;
    return rc;
}

/* GPT-NeoX (GPTNeoXForCausalLM: Pythia, GPT-NeoX-20B): LayerNorm, rotary positions over the
 * first int(head_size * rotary_pct) dimensions of each head, biases on every linear layer, a
 * GELU MLP of intermediate_size, the parallel residual by default. An absent key takes
 * transformers 4.38's GPTNeoXConfig default (rotary_pct 0.25, rotary_emb_base 10000,
 * layer_norm_eps 1e-5, use_parallel_residual true, hidden_act gelu, tie_word_embeddings
 * false, attention_bias true, 2048 positions); the sizes are required. */
static int read_neox(json_t *root, const char *path, tr_model_config *m)
{
    int rc = hf_get_int(root, path, "num_hidden_layers", -1, &m->num_layers);
    if (!rc)
        rc = hf_get_int(root, path, "hidden_size", -1, &m->hidden_size);
    if (!rc)
        rc = hf_get_int(root, path, "num_attention_heads", -1, &m->num_attention_heads);
    if (!rc)
        rc = hf_get_int(root, path, "intermediate_size", -1, &m->ffn_hidden_size);
    if (!rc)
        rc = hf_get_int(root, path, "vocab_size", -1, &m->vocab_size);
    if (!rc)
        rc = hf_get_int(root, path, "max_position_embeddings", 2048, &m->max_position_embeddings);
    if (!rc)
        rc = hf_get_num(root, path, "layer_norm_eps", 1e-5, &m->layernorm_epsilon);
    if (!rc)
        rc = hf_get_num(root, path, "rotary_emb_base", 10000.0, &m->rotary_base);
    double pct = 0.25;
    if (!rc)
        rc = hf_get_num(root, path, "rotary_pct", 0.25, &pct);
    if (!rc)
        rc = check_value(root, path, "rope_scaling", json_null(), "no rope scaling in trident");
    if (!rc)
        rc = check_value(root, path, "attention_bias", json_true(), "trident's GPT-NeoX has "
                         "biases on every linear layer (attention_bias false drops those of "
                         "query_key_value and dense alone)");
    int parallel = 1, tie = 0;
    if (!rc)
        rc = hf_get_bool(root, path, "use_parallel_residual", 1, &parallel);
    if (!rc)
        rc = hf_get_bool(root, path, "tie_word_embeddings", 0, &tie);
    int exact = 0; /* (gelu_fast's constant is sqrt(2/pi) to 10 digits: the tanh formula) */
    if (!rc)
        rc = hf_gelu_act(root, path, "hidden_act", "gelu", "GPT-NeoX MLP", &exact);
    /* transformers rotates int(head_size * rotary_pct) dimensions; trident keeps their share
     * of the head (exact: head_size * rotary_percent is whole, also as the %.9g the
     * config's text holds) */
    if (!rc)
        rc = hf_rotary_share(path, "rotary_pct", "head_size * rotary_pct", "head_size", pct, m);
    m->num_query_groups = m->num_attention_heads;
    m->normalization = "LayerNorm";
    m->position_embedding_type = "rope";
    m->swiglu = 0;
    m->untie_embeddings_and_output_weights = !tie;
    m->add_bias_linear = 1;
    m->embedding_layernorm = 0;
    m->parallel_residual = parallel;
    m->gelu_approximate = exact ? "none" : "tanh";
    return rc;
}

/* Falcon (FalconForCausalLM, model_type falcon: Falcon-7B, -40B, -180B): LayerNorm, rotary
 * positions over whole heads (rope_theta), the exact GELU in an MLP of 4h, every linear layer
 * with a bias or none (bias), the head tied unless tie_word_embeddings is false. Three layers
 * (transformers 4.38's FalconDecoderLayer): new_decoder_architecture (Falcon-40B, -180B):
 * ln_attn and ln_mlp, the parallel residual, num_kv_heads key/value groups; else
 * parallel_attn (Falcon-7B): one input_layernorm feeding both (parallel_shared_norm), else
 * input_layernorm and post_attention_layernorm in turn; those two have one key/value head
 * (multi_query) or one per head. query_key_value is trident's qkv in all three (viewed as
 * (group, R + 2, head_dim), (NH + 2, head_dim) and (NH, 3, head_dim)). Absent keys take
 * FalconConfig's defaults (multi_query true, parallel_attn true, bias false,
 * 2048 positions, rope_theta 10000, layer_norm_epsilon 1e-5); the sizes are required
 * (n_embed, when not null, is hidden_size, as FalconConfig reads it). ALiBi and rope_scaling
 * are refused by name, and so are the later transformers' keys 4.38 does not read
 * (ffn_hidden_size other than 4h, activation other than gelu, num_ln_in_parallel_attn). */
static int read_falcon(json_t *root, const char *path, tr_model_config *m)
{
    json_t *n_embed = json_object_get(root, "n_embed");
    const char *hkey = n_embed && !json_is_null(n_embed) ? "n_embed" : "hidden_size";
    int rc = hf_get_int(root, path, "num_hidden_layers", -1, &m->num_layers);
    if (!rc)
        rc = hf_get_int(root, path, hkey, -1, &m->hidden_size);
    if (!rc)
        rc = hf_get_int(root, path, "num_attention_heads", -1, &m->num_attention_heads);
    if (!rc)
        rc = hf_get_int(root, path, "vocab_size", -1, &m->vocab_size);
    if (!rc)
        rc = hf_get_int(root, path, "max_position_embeddings", 2048, &m->max_position_embeddings);
    if (!rc)
        rc = hf_get_num(root, path, "layer_norm_epsilon", 1e-5, &m->layernorm_epsilon);
    if (!rc)
        rc = hf_get_num(root, path, "rope_theta", 10000.0, &m->rotary_base);
    int alibi = 0, new_arch = 0, multi_query = 1, parallel = 1, bias = 0, tie = 1, kv = 0;
    if (!rc)
        rc = hf_get_bool(root, path, "alibi", 0, &alibi);
    if (!rc && alibi)
        rc = tr_fail(TR_ERR_INVALID, "%s: alibi true is not supported: trident's ALiBi is "
                     "Bloom's, not verified against Falcon's (its slopes added before the "
                     "1/sqrt(head_dim) scaling); Falcon with rotary positions (alibi false) "
                     "converts", path);
    if (!rc)
        rc = check_value(root, path, "rope_scaling", json_null(), "no rope scaling in trident");
    if (!rc)
        rc = hf_get_bool(root, path, "new_decoder_architecture", 0, &new_arch);
    if (!rc)
        rc = hf_get_bool(root, path, "multi_query", 1, &multi_query);
    if (!rc)
        rc = hf_get_bool(root, path, "parallel_attn", 1, &parallel);
    if (!rc)
        rc = hf_get_bool(root, path, "bias", 0, &bias);
    if (!rc)
        rc = hf_get_bool(root, path, "tie_word_embeddings", 1, &tie);
    if (!rc)
        rc = check_value(root, path, "apply_residual_connection_post_layernorm", json_false(),
                         "trident's residual is taken before the LayerNorm (transformers' "
                         "Falcon does not read the key)");
    if (!rc)
        rc = hf_get_int(root, path, "num_kv_heads", m->num_attention_heads, &kv);
    /* keys of later transformers (Falcon2) that 4.38 does not read */
    json_t *ffn = json_object_get(root, "ffn_hidden_size");
    if (!rc && ffn && !json_is_null(ffn) &&
        !(json_is_integer(ffn) && json_integer_value(ffn) == 4 * (json_int_t)m->hidden_size))
        rc = tr_fail(TR_ERR_INVALID, "%s: ffn_hidden_size is not supported: transformers 4.38's "
                     "Falcon MLP is 4 x hidden_size (%d) wide", path, 4 * m->hidden_size);
    if (!rc)
        rc = check_value(root, path, "activation", json_string("gelu"), "transformers 4.38's "
                         "Falcon MLP uses the exact GELU (gelu)");
    json_t *nln = json_object_get(root, "num_ln_in_parallel_attn");
    if (!rc && nln && !json_is_null(nln))
        rc = tr_fail(TR_ERR_INVALID, "%s: num_ln_in_parallel_attn is not supported: "
                     "transformers 4.38's Falcon does not read it (new_decoder_architecture "
                     "has ln_attn and ln_mlp; the older one input_layernorm alone)", path);
    /* transformers' _split_heads: without the new architecture, query_key_value is (NH + 2,
     * head_dim) with multi_query, else (NH, 3, head_dim): num_kv_heads must be NH there */
    if (!rc && !new_arch && !multi_query && kv != m->num_attention_heads)
        rc = tr_fail(TR_ERR_INVALID, "%s: num_kv_heads %d with new_decoder_architecture false "
                     "and multi_query false is not supported: that query_key_value has one "
                     "key/value head per attention head (%d), which transformers' Falcon "
                     "reshapes to num_kv_heads", path, kv, m->num_attention_heads);
    m->num_query_groups = new_arch ? kv : multi_query ? 1 : m->num_attention_heads;
    m->ffn_hidden_size = 4 * m->hidden_size; /* (at most 2^28) */
    m->normalization = "LayerNorm";
    m->position_embedding_type = "rope";
    m->rotary_percent = 1.0;
    m->swiglu = 0;
    m->untie_embeddings_and_output_weights = !tie;
    m->add_bias_linear = bias;
    m->embedding_layernorm = 0;
    m->parallel_residual = new_arch || parallel;
    m->parallel_shared_norm = !new_arch && parallel;
    m->gelu_approximate = "none";
    return rc;
}

int tr_hf_read_family_config(const char *dir, tr_model_config *m, int *family)
{
    char path[4200];
    json_t *root = NULL;
    int rc = hf_load_config(dir, path, sizeof path, &root);
    if (rc)
        return rc;
    const char *type = json_string_value(json_object_get(root, "model_type"));
    *family = !type                   ? TR_HF_GPT2
              : !strcmp(type, "llama") || !strcmp(type, "mistral") ? TR_HF_LLAMA
              : !strcmp(type, "qwen2") ? TR_HF_QWEN2
              : !strcmp(type, "bloom") ? TR_HF_BLOOM
              : !strcmp(type, "gpt_neox") ? TR_HF_NEOX
              : !strcmp(type, "falcon") ? TR_HF_FALCON
              : !strcmp(type, "phi") || !strcmp(type, "phi-msft") ? TR_HF_PHI
              : !strcmp(type, "stablelm") ? TR_HF_STABLELM
              : !strcmp(type, "gemma") ? TR_HF_GEMMA
              : !strcmp(type, "gpt_bigcode") ? TR_HF_BIGCODE
              : !strcmp(type, "gptj") ? TR_HF_GPTJ
              : !strcmp(type, "mpt") ? TR_HF_MPT
              : !strcmp(type, "opt") ? TR_HF_OPT
              : !strcmp(type, "phi3") ? TR_HF_PHI3
              : !strcmp(type, "mixtral") ? TR_HF_MIXTRAL
                                       : TR_HF_GPT2;
    memset(m, 0, sizeof *m);
    /* the Falcon of trust_remote_code (tiiuae's RWForCausalLM, before transformers 4.33): other
     * keys (n_head, n_layer, n_head_kv, ...) that transformers' FalconConfig does not read */
    if (type && (!strcmp(type, "RefinedWebModel") || !strcmp(type, "RefinedWeb")))
        rc = tr_fail(TR_ERR_INVALID, "%s: model_type \"%s\" is not supported: it is the Falcon "
                     "of trust_remote_code (RWForCausalLM); transformers' own is model_type "
                     "\"falcon\" (FalconForCausalLM, FalconConfig's keys: num_hidden_layers, "
                     "num_attention_heads, num_kv_heads, new_decoder_architecture, ...), which "
                     "trident converts: use the model's config.json of transformers 4.33 or later",
                     path, type);
    m->make_vocab_size_divisible_by = 128;
    m->init_method_std = 0.02;
    m->embedding_multiplier = 1.0;
    if (!rc && (*family == TR_HF_LLAMA || *family == TR_HF_QWEN2 || *family == TR_HF_GEMMA ||
                *family == TR_HF_MIXTRAL))
        rc = read_llama(root, path, *family,
                        !strcmp(type, "mistral") || *family == TR_HF_MIXTRAL, m);
    else if (!rc && *family == TR_HF_BLOOM)
        rc = read_bloom(root, path, m);
    else if (!rc && *family == TR_HF_NEOX)
        rc = read_neox(root, path, m);
    else if (!rc && *family == TR_HF_FALCON)
        rc = read_falcon(root, path, m);
    else if (!rc && *family == TR_HF_PHI)
        rc = hf_read_phi(root, path, m);
    else if (!rc && *family == TR_HF_STABLELM)
        rc = hf_read_stablelm(root, path, m);
    else if (!rc && *family == TR_HF_BIGCODE)
        rc = hf_read_bigcode(root, path, m);
    else if (!rc && *family == TR_HF_GPTJ)
        rc = hf_read_gptj(root, path, m);
    else if (!rc && *family == TR_HF_MPT)
        rc = hf_read_mpt(root, path, m);
    else if (!rc && *family == TR_HF_OPT)
        rc = hf_read_opt(root, path, m);
    else if (!rc && *family == TR_HF_PHI3)
        rc = hf_read_phi3(root, path, m);
    if (!rc && *family != TR_HF_GPT2) {
        m->seq_length = tr_model_longest_seq(m);
        if ((!m->kv_channels && m->hidden_size % m->num_attention_heads) ||
            m->num_attention_heads % m->num_query_groups)
            rc = tr_fail(TR_ERR_INVALID, "%s: %d heads (%d key/value heads) do not divide the "
                         "hidden size %d", path, m->num_attention_heads, m->num_query_groups,
                         m->hidden_size);
    }
    json_decref(root);
    return rc;
}

const char *tr_hf_family_name(int family)
{
    return family == TR_HF_LLAMA     ? "Llama"
           : family == TR_HF_QWEN2   ? "Qwen2"
           : family == TR_HF_MISTRAL ? "Mistral"
           : family == TR_HF_BLOOM   ? "Bloom"
           : family == TR_HF_NEOX    ? "GPT-NeoX"
           : family == TR_HF_FALCON  ? "Falcon"
           : family == TR_HF_PHI     ? "Phi"
           : family == TR_HF_STABLELM ? "StableLM"
           : family == TR_HF_GEMMA   ? "Gemma"
           : family == TR_HF_BIGCODE ? "GPTBigCode"
           : family == TR_HF_GPTJ    ? "GPT-J"
           : family == TR_HF_MPT     ? "MPT"
           : family == TR_HF_OPT     ? "OPT"
           : family == TR_HF_PHI3    ? "Phi3"
           : family == TR_HF_MIXTRAL ? "Mixtral"
                                     : "GPT-2";
}

/* Elements of the Llama / Qwen2 / Bloom / GPT-NeoX / Falcon model of m (a double: any int
 * sizes fit). */
static double family_numel(const tr_model_config *m, int family)
{
    if (family == TR_HF_PHI)
        return hf_phi_numel(m);
    if (family == TR_HF_STABLELM)
        return hf_stablelm_numel(m);
    if (family == TR_HF_BIGCODE)
        return hf_bigcode_numel(m);
    if (family == TR_HF_GPTJ)
        return hf_gptj_numel(m);
    if (family == TR_HF_MPT)
        return hf_mpt_numel(m);
    if (family == TR_HF_OPT)
        return hf_opt_numel(m);
    double C = m->hidden_size, V = m->vocab_size, L = m->num_layers;
    if (family == TR_HF_FALCON) { /* word embeddings (lm_head), ln_f; per layer one or two
                                   * norms, query_key_value of NH + 2 NG heads, dense, the 4h
                                   * MLP, their biases with bias */
        double HS = C / m->num_attention_heads;
        double QKV = (m->num_attention_heads + 2.0 * m->num_query_groups) * HS;
        double norms = m->parallel_residual && m->parallel_shared_norm ? 2 * C : 4 * C;
        double biases = m->add_bias_linear ? QKV + C + 4 * C + C : 0;
        return V * C * (m->untie_embeddings_and_output_weights ? 2 : 1) + 2 * C +
               L * (norms + QKV * C + C * C + 8 * C * C + biases);
    }
    if (family == TR_HF_BLOOM) /* embedding, its norm and ln_f; per layer qkv, dense, 4h MLP */
        return V * C + 4 * C + L * (12 * C * C + 13 * C);
    if (family == TR_HF_NEOX) { /* embed_in (embed_out), final norm; per layer 2 norms, qkv,
                                 * dense, the MLP of F, their biases */
        double F = m->ffn_hidden_size;
        return V * C * (m->untie_embeddings_and_output_weights ? 2 : 1) + 2 * C +
               L * (4 * C + 4 * C * C + 4 * C + 2 * F * C + F + C);
    }
    /* Llama, Qwen2, Gemma, Phi-3: q_proj and o_proj of A = NH x head size, k_proj and v_proj
     * (KV; Phi-3's fused with q_proj); Mixtral: E experts' MLPs and the router (E, C) */
    double HS = tr_model_head_size(m), A = m->num_attention_heads * HS;
    double KV = 2.0 * m->num_query_groups * HS * C, E = m->num_experts;
    double F = m->ffn_hidden_size, qkv_bias = m->add_qkv_bias ? A + KV / C : 0;
    double mlp = E > 0 ? E * (3 * F * C + C) : 3 * F * C;
    return V * C * (m->untie_embeddings_and_output_weights ? 2 : 1) + C +
           L * (2 * C + 2 * A * C + KV + mlp + qkv_bias);
}

int hf_family_check_files(const char *dir, const tr_model_config *m, int family)
{
    tr_st_set *set = NULL;
    int rc = tr_st_set_open(dir, &set);
    double bytes = 0; /* the data of every file, as their headers give it */
    for (size_t i = 0; !rc && i < tr_st_set_count(set); i++) {
        const tr_st_tensor *t = tr_st_set_at(set, i, NULL);
        bytes += (double)(t->end - t->begin);
    }
    /* coarse: 2 bytes a parameter (F16 / BF16, the smallest weights read); the precise errors
     * (a tensor missing, a wrong shape) come from the loading */
    double n = family_numel(m, family);
    if (!rc && 2.0 * n > bytes)
        rc = tr_fail(TR_ERR_INVALID, "%s/config.json describes a %s model of %.0f parameters "
                     "(%.0f bytes at least, at 2 bytes each); its weights hold %.0f "
                     "bytes: config.json is not theirs", dir,
                     tr_hf_family_name(family), n, 2.0 * n, bytes);
    tr_st_set_close(set);
    return rc;
}

/* ------------------------------------------------------------------ export */

/* transformers' Llama, Qwen2 and Mistral: RMSNorm, rope over whole heads, SwiGLU, no linear
 * biases (q, k and v either way), no embedding norm, the sequential residual */
static int llama_like(const tr_gpt_shape *s)
{
    return s->rmsnorm && s->position == TR_POS_ROPE && s->rotary_dims == tr_gpt_head_size(s) &&
           s->swiglu && s->no_linear_bias && !s->embedding_ln && !s->parallel_residual;
}

int hf_shape_family(const tr_gpt_shape *s)
{
    if (s->num_experts) { /* a Mixtral (Mistral's layer, its MLP the experts') or nothing */
        tr_gpt_shape dense = *s;
        dense.num_experts = 0;
        int d = hf_shape_family(&dense);
        return (d == TR_HF_LLAMA || d == TR_HF_MISTRAL) && !s->rope_scaling &&
                       !s->moe_pre_softmax && s->moe_topk >= 2
                   ? TR_HF_MIXTRAL
                   : -1;
    }
    if (s->hf_phi3) /* model.hf_family phi3: a Phi-3 or nothing */
        return hf_phi3_shape(s);
    if (s->relu) /* a ReLU MLP: OPT's alone */
        return hf_opt_shape(s);
    if (tr_gpt_is_gpt2(s))
        return TR_HF_GPT2;
    if (s->no_norm_bias) /* LayerNorms without biases: MPT's alone (Bloom's have them) */
        return hf_mpt_shape(s);
    if (s->mlp_bias) /* the MLP's biases without the attention's: GPT-J's alone */
        return hf_gptj_shape(s);
    if (s->position == TR_POS_LEARNED) { /* GPT-BigCode's shapes first, then OPT's (no biases) */
        int bigcode = hf_bigcode_shape(s);
        return bigcode >= 0 ? bigcode : hf_opt_shape(s);
    }
    if (s->rope_scaling) { /* rope_scaling ("linear", Llama 3.1's "llama3"): a Llama's alone */
        tr_gpt_shape plain = *s;
        plain.rope_scaling = 0;
        return hf_shape_family(&plain) == TR_HF_LLAMA ? TR_HF_LLAMA : -1;
    }
    /* Gemma's switches (norms of 1 + weight, the embedding's scale, GeGLU) are no other
     * family's: a model with any of them is a Gemma or nothing; a head size other than C / NH
     * (kv_channels) without them is a Mistral's (head_dim, read by transformers from 4.43,
     * Llama's only from 4.45; 4.38 cannot load such an export) or nothing */
    if (s->layernorm_1p || s->embedding_multiplier || s->geglu)
        return hf_gemma_shape(s);
    if (s->kv_channels)
        return llama_like(s) && !s->qkv_bias ? TR_HF_MISTRAL : -1;
    if (s->output_bias) /* an lm_head.bias: Phi's alone */
        return hf_phi_shape(s);
    int HS = tr_gpt_head_size(s);
    /* transformers' Llama, Qwen2, Mistral and Bloom add attention and MLP in turn (Bloom with
     * the tanh GELU); GPT-NeoX's parallel residual has two norms (one shared: Falcon-7B's) */
    if (llama_like(s))
        return !s->sliding_window ? (s->qkv_bias ? TR_HF_QWEN2 : TR_HF_LLAMA)
               : s->qkv_bias      ? -1 /* (a Qwen2 with a window: its import refuses it) */
                                  : TR_HF_MISTRAL;
    if (!s->rmsnorm && s->position == TR_POS_ALIBI && s->embedding_ln && !s->swiglu &&
        !s->no_linear_bias && !s->untie && !s->ffn && !s->query_groups && !s->gelu_exact &&
        !s->parallel_residual)
        return TR_HF_BLOOM;
    /* Falcon: LayerNorm, rope over whole heads, the exact GELU in a 4h MLP, biases on every
     * linear layer or on none; it is what GPT-NeoX cannot be (no biases, GQA, one norm for
     * both branches of the parallel residual), and GPT-NeoX keeps the rest */
    if (!s->rmsnorm && s->position == TR_POS_ROPE && s->rotary_dims == HS && !s->swiglu &&
        !s->ffn && s->gelu_exact && !s->embedding_ln && !s->sliding_window && !s->qkv_bias &&
        (s->no_linear_bias || s->query_groups || s->parallel_shared_norm))
        return TR_HF_FALCON;
    /* (a NeoX is not a GPT-2: learned positions; not a Llama: RMSNorm; not a Bloom: ALiBi) */
    if (!s->rmsnorm && s->position == TR_POS_ROPE && !s->swiglu && !s->no_linear_bias &&
        !s->embedding_ln && !s->query_groups && !s->sliding_window && !s->parallel_shared_norm)
        return TR_HF_NEOX;
    return hf_stablelm_shape(s); /* (LayerNorm with SwiGLU: no other family's) */
}

int tr_hf_family_of(const tr_model_config *m)
{
    tr_gpt_shape s = {.C = m->hidden_size, .NH = m->num_attention_heads};
    tr_gpt_shape_family(m, &s);
    return hf_shape_family(&s);
}

int hf_falcon_check(const tr_model_config *m)
{
    int NH = m->num_attention_heads, NG = m->num_query_groups;
    if (m->parallel_residual && !m->parallel_shared_norm) /* new_decoder_architecture */
        return TR_OK;
    if (NG == 1 || NG == NH)
        return TR_OK;
    return tr_fail(TR_ERR_INVALID, "model.num_query_groups %d of %d heads with %s cannot be "
                   "exported: transformers' Falcon with %s (new_decoder_architecture false) has "
                   "one key/value head (multi_query) or one per head; any number of groups is "
                   "its new_decoder_architecture: model.parallel_residual true, "
                   "model.parallel_shared_norm false (two norms)", NG, NH,
                   m->parallel_residual ? "model.parallel_shared_norm true"
                                        : "model.parallel_residual false",
                   m->parallel_residual ? "one norm for both branches (parallel_attn true)"
                                        : "the sequential residual (parallel_attn false)");
}

int hf_write_family_config(const char *dir, int family, const tr_model_config *m,
                           const tr_hf_export_options *o)
{
    json_t *root;
    const char *dtype = o->bf16 ? "bfloat16" : "float32";
    if (family == TR_HF_PHI)
        return hf_write_phi_config(dir, m, o);
    if (family == TR_HF_STABLELM)
        return hf_write_stablelm_config(dir, m, o);
    if (family == TR_HF_GEMMA)
        return hf_write_gemma_config(dir, m, o);
    if (family == TR_HF_BIGCODE)
        return hf_write_bigcode_config(dir, m, o);
    if (family == TR_HF_GPTJ)
        return hf_write_gptj_config(dir, m, o);
    if (family == TR_HF_MPT)
        return hf_write_mpt_config(dir, m, o);
    if (family == TR_HF_OPT)
        return hf_write_opt_config(dir, m, o);
    if (family == TR_HF_PHI3)
        return hf_write_phi3_config(dir, m, o);
    if (family == TR_HF_MIXTRAL)
        return hf_write_mixtral_config(dir, m, o);
    if (family == TR_HF_LLAMA || family == TR_HF_QWEN2 || family == TR_HF_MISTRAL) {
        int qwen2 = family == TR_HF_QWEN2, mistral = family == TR_HF_MISTRAL;
        root = json_pack("{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:i, s:b, s:s,"
                         " s:f, s:b, s:s, s:f}",
                         "architectures", qwen2     ? "Qwen2ForCausalLM"
                                          : mistral ? "MistralForCausalLM"
                                                    : "LlamaForCausalLM",
                         "model_type", qwen2 ? "qwen2" : mistral ? "mistral" : "llama",
                         "hidden_size", m->hidden_size, "intermediate_size", tr_model_ffn_hidden(m),
                         "num_hidden_layers", m->num_layers, "num_attention_heads",
                         m->num_attention_heads, "num_key_value_heads", m->num_query_groups,
                         "max_position_embeddings", m->max_position_embeddings, "rms_norm_eps",
                         m->layernorm_epsilon, "rope_theta", m->rotary_base, "vocab_size",
                         m->vocab_size, "tie_word_embeddings",
                         !m->untie_embeddings_and_output_weights, "hidden_act", "silu",
                         "initializer_range", 0.02, "use_cache", 1, "torch_dtype", dtype,
                         "attention_dropout", 0.0);
        /* Llama's own keys; Qwen2's window over every position: none, as use_sliding_window;
         * Mistral's window */
        json_t *own = !root ? NULL
                      : qwen2 ? json_pack("{s:b, s:i, s:i}", "use_sliding_window", 0,
                                          "sliding_window", m->max_position_embeddings,
                                          "max_window_layers", m->num_layers)
                      : mistral ? json_pack("{s:o, s:i}", "sliding_window",
                                            m->sliding_window ? json_integer(m->sliding_window)
                                                              : json_null(),
                                            "head_dim", tr_model_head_size(m))
                                : json_pack("{s:b, s:o, s:i}", "attention_bias", 0, "rope_scaling",
                                            hf_rope_scaling_json(m), "pretraining_tp", 1);
        if (!own || json_object_update(root, own))
            root = (json_decref(root), NULL);
        json_decref(own);
    } else if (family == TR_HF_NEOX) {
        int exact = m->gelu_approximate && !strcmp(m->gelu_approximate, "none");
        root = json_pack("{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:f, s:b, s:b,"
                         " s:s, s:f, s:f, s:s, s:b, s:f, s:b, s:n}",
                         "architectures", "GPTNeoXForCausalLM", "model_type", "gpt_neox",
                         "hidden_size", m->hidden_size, "intermediate_size", tr_model_ffn_hidden(m),
                         "num_hidden_layers", m->num_layers, "num_attention_heads",
                         m->num_attention_heads, "max_position_embeddings",
                         m->max_position_embeddings, "vocab_size", m->vocab_size,
                         "layer_norm_eps", m->layernorm_epsilon, "rotary_pct", m->rotary_percent,
                         "rotary_emb_base", m->rotary_base, "use_parallel_residual",
                         m->parallel_residual != 0, "tie_word_embeddings",
                         !m->untie_embeddings_and_output_weights, "hidden_act",
                         exact ? "gelu" : "gelu_pytorch_tanh", "attention_dropout", 0.0,
                         "hidden_dropout", 0.0, "torch_dtype", dtype, "use_cache", 1,
                         "initializer_range", 0.02, "attention_bias", 1, "rope_scaling");
    } else if (family == TR_HF_FALCON) {
        /* the architecture flags that give trident's layer (hf_falcon_check: expressible) */
        int new_arch = m->parallel_residual && !m->parallel_shared_norm;
        root = json_pack("{s:[s], s:s, s:i, s:i, s:i, s:i, s:b, s:b, s:b, s:b, s:b, s:i, s:i,"
                         " s:f, s:f, s:n, s:b, s:f, s:f, s:s, s:b, s:f}",
                         "architectures", "FalconForCausalLM", "model_type", "falcon",
                         "hidden_size", m->hidden_size, "num_hidden_layers", m->num_layers,
                         "num_attention_heads", m->num_attention_heads, "num_kv_heads",
                         m->num_query_groups, "new_decoder_architecture", new_arch,
                         "multi_query", !new_arch && m->num_query_groups == 1, "parallel_attn",
                         m->parallel_residual != 0, "bias", m->add_bias_linear != 0, "alibi", 0,
                         "vocab_size", m->vocab_size, "max_position_embeddings",
                         m->max_position_embeddings, "layer_norm_epsilon", m->layernorm_epsilon,
                         "rope_theta", m->rotary_base, "rope_scaling", "tie_word_embeddings",
                         !m->untie_embeddings_and_output_weights, "attention_dropout", 0.0,
                         "hidden_dropout", 0.0, "torch_dtype", dtype, "use_cache", 1,
                         "initializer_range", 0.02);
    } else
        root = json_pack("{s:[s], s:s, s:i, s:i, s:i, s:i, s:f, s:b, s:f, s:f, s:i, s:b, s:b,"
                         " s:s, s:i, s:f, s:b}",
                         "architectures", "BloomForCausalLM", "model_type", "bloom",
                         "hidden_size", m->hidden_size, "n_layer", m->num_layers, "n_head",
                         m->num_attention_heads, "vocab_size", m->vocab_size,
                         "layer_norm_epsilon", m->layernorm_epsilon,
                         "apply_residual_connection_post_layernorm", 0, "attention_dropout", 0.0,
                         "hidden_dropout", 0.0, "pretraining_tp", 1, "slow_but_exact", 0,
                         "tie_word_embeddings", 1, "torch_dtype", dtype, "seq_length",
                         m->max_position_embeddings, "initializer_range", 0.02, "use_cache", 1);
    return hf_write_config_json(dir, root, family, m, o);
}

