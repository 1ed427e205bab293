/* GPT stage's shape: the model section and the layout made into tr_gpt_shape (what every
 * rank's stage is), the padded vocabulary, the FLOPs of a token. */
#include "model/gpt_internal.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <string.h>

#include "core/core.h"

int tr_gpt_padded_vocab(const tr_model_config *m, int tp)
{
    long long div = m->make_vocab_size_divisible_by > 0 ? m->make_vocab_size_divisible_by : 1;
    div *= tp > 0 ? tp : 1;
    long long vp = ((long long)m->vocab_size + div - 1) / div * div;
    return vp <= INT_MAX ? (int)vp : 0;
}

void tr_gpt_shape_family(const tr_model_config *m, tr_gpt_shape *s)
{
    s->rmsnorm = m->normalization && !strcmp(m->normalization, "RMSNorm");
    s->position = !m->position_embedding_type                        ? TR_POS_LEARNED
                  : !strcmp(m->position_embedding_type, "rope")  ? TR_POS_ROPE
                  : !strcmp(m->position_embedding_type, "alibi") ? TR_POS_ALIBI
                                                                 : TR_POS_LEARNED;
    int hs = tr_model_head_size(m);
    s->rotary_dims = s->position == TR_POS_ROPE ? (int)(hs * m->rotary_percent) : 0;
    s->rotary_base = s->position == TR_POS_ROPE ? (float)m->rotary_base : 0.0f;
    s->swiglu = m->swiglu;
    int ffn = tr_model_ffn_hidden(m);
    s->ffn = ffn == 4 * m->hidden_size ? 0 : ffn;
    s->query_groups = m->num_query_groups == m->num_attention_heads ? 0 : m->num_query_groups;
    s->untie = m->untie_embeddings_and_output_weights;
    s->output_bias = s->untie && m->output_layer_bias;
    s->no_linear_bias = !m->add_bias_linear;
    s->qkv_bias = s->no_linear_bias && m->add_qkv_bias;
    s->mlp_bias = s->no_linear_bias && m->add_mlp_bias;
    s->sliding_window = m->sliding_window;
    s->embedding_ln = m->embedding_layernorm;
    s->parallel_residual = m->parallel_residual;
    s->parallel_shared_norm = m->parallel_residual && m->parallel_shared_norm;
    s->relu = m->relu;
    s->hf_phi3 = m->hf_family && !strcmp(m->hf_family, "phi3");
    s->gelu_exact = !s->swiglu && !s->relu && m->gelu_approximate &&
                    !strcmp(m->gelu_approximate, "none");
    s->geglu = !s->swiglu && m->geglu;
    s->kv_channels = m->kv_channels > 0 && m->num_attention_heads > 0 &&
                             m->kv_channels * m->num_attention_heads != m->hidden_size
                         ? m->kv_channels
                         : 0;
    s->layernorm_1p = m->apply_layernorm_1p;
    s->no_norm_bias = !s->rmsnorm && m->no_layernorm_bias;
    s->rope_scaling = s->position != TR_POS_ROPE                    ? TR_ROPE_SCALING_NONE
                      : m->use_rope_scaling                         ? TR_ROPE_SCALING_LLAMA3
                      : m->rotary_seq_len_interpolation_factor != 1.0 &&
                              m->rotary_seq_len_interpolation_factor > 0 ? TR_ROPE_SCALING_LINEAR
                                                                         : TR_ROPE_SCALING_NONE;
    if (s->rope_scaling == TR_ROPE_SCALING_LINEAR)
        s->rope_factor = (float)m->rotary_seq_len_interpolation_factor;
    if (s->rope_scaling == TR_ROPE_SCALING_LLAMA3) {
        s->rope_factor = (float)m->rope_scaling_factor;
        s->rope_low_freq_factor = (float)m->rope_scaling_low_freq_factor;
        s->rope_high_freq_factor = (float)m->rope_scaling_high_freq_factor;
        s->rope_original_positions = m->rope_scaling_original_max_position_embeddings;
    }
    s->embedding_multiplier = m->embedding_multiplier != 1.0 && m->embedding_multiplier != 0
                                  ? (float)m->embedding_multiplier
                                  : 0.0f;
    s->num_experts = m->num_experts;
    if (s->num_experts) {
        s->moe_topk = m->moe_router_topk;
        s->moe_pre_softmax = m->moe_router_pre_softmax;
        s->moe_aux_loss = !m->moe_router_load_balancing_type ||
                          !strcmp(m->moe_router_load_balancing_type, "aux_loss");
        s->moe_aux_coeff = s->moe_aux_loss ? (float)m->moe_aux_loss_coeff : 0.0f;
        s->moe_z_coeff = (float)m->moe_z_loss_coeff;
    }
}

int tr_gpt_is_gpt2(const tr_gpt_shape *s)
{
    return !s->rmsnorm && s->position == TR_POS_LEARNED && !s->swiglu &&
           (!s->ffn || s->ffn == 4 * s->C) && (!s->query_groups || s->query_groups == s->NH) &&
           !s->untie && !s->output_bias && !s->no_linear_bias && !s->embedding_ln &&
           !s->parallel_residual && !s->parallel_shared_norm && !s->gelu_exact &&
           !s->kv_channels && !s->layernorm_1p && !s->embedding_multiplier && !s->geglu &&
           !s->rope_scaling && !s->no_norm_bias && !s->relu && !s->hf_phi3 && !s->num_experts;
}

int tr_gpt_shape_from_config(const tr_config *cfg, int layer_first, int layer_count,
                             int tp_rank, tr_gpt_shape *out)
{
    const tr_model_config *m = &cfg->model;
    const tr_parallel_config *p = &cfg->parallel;
    int tp = p->tensor_model_parallel_size;
    memset(out, 0, sizeof *out);
    if (layer_first < 0 || layer_count < 1 || layer_first + layer_count > m->num_layers)
        return tr_fail(TR_ERR_CONFIG, "stage layers [%d, %d) are not inside the model's %d layers",
                       layer_first, layer_first + layer_count, m->num_layers);
    if (tp < 1 || tp_rank < 0 || tp_rank >= tp)
        return tr_fail(TR_ERR_CONFIG, "tensor-parallel rank %d is outside [0, %d) "
                       "(parallel.tensor_model_parallel_size = %d)", tp_rank, tp, tp);
    if (tp > 1 && p->sequence_parallel &&
        ((long)cfg->training.micro_batch_size * m->seq_length) % tp)
        return tr_fail(TR_ERR_CONFIG,
                       "parallel.sequence_parallel splits the training.micro_batch_size x "
                       "model.seq_length = %d x %d = %ld token rows of a micro-batch over "
                       "parallel.tensor_model_parallel_size = %d ranks; they must be divisible",
                       cfg->training.micro_batch_size, m->seq_length,
                       (long)cfg->training.micro_batch_size * m->seq_length, tp);
    out->num_layers = m->num_layers;
    out->C = m->hidden_size;
    out->NH = m->num_attention_heads;
    out->T = m->seq_length;
    out->max_T = m->max_position_embeddings;
    out->V = m->vocab_size;
    out->Vp = tr_gpt_padded_vocab(m, tp);
    if (out->Vp == 0)
        return tr_fail(TR_ERR_CONFIG,
                       "model.vocab_size %d padded to a multiple of "
                       "model.make_vocab_size_divisible_by x parallel.tensor_model_parallel_size "
                       "= %d x %d does not fit in an int",
                       m->vocab_size, m->make_vocab_size_divisible_by, tp);
    /* the values the model keeps as float: past its range they would be infinity (a config,
     * a checkpoint's manifest or an HF config.json may hold 1e300), and below its smallest
     * (about 1.4e-45) 0: an epsilon of 1e-50 would be a model of epsilon 0 whose exported
     * config.json says 1e-50, which no float32 model (trident's import, transformers in fp32)
     * computes with either */
    const struct {
        const char *key;
        double v;
    } as_float[] = {{"model.layernorm_epsilon", m->layernorm_epsilon},
                    {"model.init_method_std", m->init_method_std},
                    {"model.rotary_base", m->rotary_base},
                    {"model.embedding_multiplier", m->embedding_multiplier},
                    {"finetune.lora.alpha", cfg->finetune.lora_alpha}};
    for (size_t i = 0; i < sizeof as_float / sizeof *as_float; i++) {
        if (!(fabs(as_float[i].v) <= FLT_MAX))
            return tr_fail(TR_ERR_CONFIG, "%s is %g: past the largest float (%g), which the "
                           "model keeps it as", as_float[i].key, as_float[i].v, (double)FLT_MAX);
        if (as_float[i].v != 0 && (float)as_float[i].v == 0.0f)
            return tr_fail(TR_ERR_CONFIG, "%s is %g: below the smallest float (%g), which the "
                           "model keeps it as, so it would be 0", as_float[i].key, as_float[i].v,
                           (double)FLT_TRUE_MIN);
    }
    out->eps = (float)m->layernorm_epsilon;
    out->init_std = (float)m->init_method_std;
    out->seed = cfg->training.seed;
    out->layer_first = layer_first;
    out->layer_count = layer_count;
    out->is_first = layer_first == 0;
    out->is_last = layer_first + layer_count == m->num_layers;
    out->tp_size = tp;
    out->tp_rank = tp_rank;
    out->sequence_parallel = tp > 1 && p->sequence_parallel;
    out->lora_rank = cfg->finetune.lora_rank;
    out->lora_alpha = (float)cfg->finetune.lora_alpha;
    out->lora_dropout = out->lora_rank ? (float)cfg->finetune.lora_dropout : 0.0f;
    out->hidden_dropout = (float)m->hidden_dropout;
    out->attention_dropout = (float)m->attention_dropout;
    if (out->lora_rank) { /* finetune.lora.target_modules, default all four */
        static const char *const targets[] = {"qkv", "proj", "fc1", "fc2"};
        for (int i = 0; i < cfg->finetune.n_lora_targets; i++)
            for (int t = 0; t < 4; t++)
                if (!strcmp(cfg->finetune.lora_targets[i], targets[t]))
                    out->lora_targets |= 1 << t;
        if (!cfg->finetune.n_lora_targets)
            out->lora_targets = 15;
    }
    out->recompute = !strcmp(cfg->training.recompute, "full");
    out->recompute_attention = !strcmp(cfg->training.recompute, "selective");
    tr_gpt_shape_family(m, out);
    return TR_OK;
}

double tr_gpt_flops_per_token(const tr_gpt_shape *s, double n_params_total)
{
    if (s->num_experts) { /* a token runs k of the E experts: the others' parameters idle */
        double F = s->ffn ? s->ffn : 4.0 * s->C, fc = tr_gpt_gated_mlp(s) ? 2 * F : F;
        int biases = !s->no_linear_bias || s->mlp_bias;
        double expert = fc * s->C + (double)s->C * F + (biases ? fc + s->C : 0);
        n_params_total -= (double)s->num_layers * (s->num_experts - s->moe_topk) * expert;
    }
    return 6.0 * n_params_total +
           12.0 * s->num_layers * (double)s->NH * (double)tr_gpt_head_size(s) * s->T;
}
