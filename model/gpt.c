/* GPT stage: shape, parameter layout (with tensor-parallel shards), layout-free
 * initialisation, binding, the grad-ready hook. */
#include "model/gpt_internal.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"

int tr_gpt_padded_vocab(const tr_model_config *m, int tp)
{
    long long div = m->make_vocab_size_divisible_by > 0 ? m->make_vocab_size_divisible_by : 1;
    div *= tp > 0 ? tp : 1;
    long long vp = ((long long)m->vocab_size + div - 1) / div * div;
    return vp <= INT_MAX ? (int)vp : 0;
}

void tr_param_copy_shard(const tr_param_tensor *t, int tp_rank, const float *whole, size_t rows,
                         size_t cols, float *dst)
{
    size_t R0 = t->split_dim == 0 ? (size_t)tp_rank * (size_t)t->rows : 0;
    size_t C0 = t->split_dim == 1 ? (size_t)tp_rank * (size_t)t->cols : 0;
    size_t tc = (size_t)t->cols;
    for (size_t r = 0; r < (size_t)t->rows; r++) {
        size_t n = R0 + r < rows && C0 < cols ? (cols - C0 < tc ? cols - C0 : tc) : 0;
        if (n)
            memcpy(dst + r * tc, whole + (R0 + r) * cols + C0, n * sizeof(float));
        if (n < tc)
            memset(dst + r * tc + n, 0, (tc - n) * sizeof(float));
    }
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
}

int tr_gpt_is_gpt2(const tr_gpt_shape *s)
{
    return !s->rmsnorm && s->position == TR_POS_LEARNED && !s->swiglu &&
           (!s->ffn || s->ffn == 4 * s->C) && (!s->query_groups || s->query_groups == s->NH) &&
           !s->untie && !s->output_bias && !s->no_linear_bias && !s->embedding_ln &&
           !s->parallel_residual && !s->parallel_shared_norm && !s->gelu_exact &&
           !s->kv_channels && !s->layernorm_1p && !s->embedding_multiplier && !s->geglu &&
           !s->rope_scaling && !s->no_norm_bias && !s->relu;
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

/* Add a tensor of full shape (rows, cols), split over TP along split_dim (-1: replicated). */
static int add_tensor(tr_gpt *g, const char *name, int rows, int cols, int split_dim)
{
    tr_param_tensor *t = &g->tensors[g->n_tensors];
    const tr_gpt_shape *s = &g->s;
    snprintf(t->name, sizeof t->name, "%s", name);
    t->full_rows = rows;
    t->full_cols = cols;
    t->split_dim = s->tp_size > 1 ? split_dim : -1;
    t->rows = t->split_dim == 0 ? rows / s->tp_size : rows;
    t->cols = t->split_dim == 1 ? cols / s->tp_size : cols;
    t->numel = (size_t)t->rows * (size_t)t->cols;
    t->forward_offset = g->n_params;
    t->weight_decay = cols > 1;
    t->count_in_norm = t->split_dim >= 0 || s->tp_rank == 0;
    g->n_params += t->numel;
    return g->n_tensors++;
}

/* Gradient range covering tensors [first, last] (forward order, contiguous). */
static grad_range tensors_range(const tr_gpt *g, int first, int last)
{
    grad_range r = {g->tensors[last].offset, 0};
    for (int i = first; i <= last; i++)
        r.count += g->tensors[i].numel;
    return r;
}

static int check_shape(const tr_gpt_shape *s)
{
    if (s->C < 1 || s->NH < 1 || (!s->kv_channels && s->C % s->NH) || s->kv_channels < 0 ||
        s->T < 1 || s->max_T < s->T || s->V < 1 ||
        s->Vp < s->V || s->layer_count < 1)
        return tr_fail(TR_ERR_INVALID, "invalid GPT shape (C=%d NH=%d T=%d max_T=%d V=%d Vp=%d)",
                       s->C, s->NH, s->T, s->max_T, s->V, s->Vp);
    if (s->tp_size < 1 || s->tp_rank < 0 || s->tp_rank >= s->tp_size)
        return tr_fail(TR_ERR_INVALID, "invalid tensor-parallel rank %d of size %d", s->tp_rank,
                       s->tp_size);
    if (s->NH % s->tp_size || s->Vp % s->tp_size)
        return tr_fail(TR_ERR_INVALID,
                       "tensor-parallel size %d must divide the heads (%d) and the padded "
                       "vocabulary (%d)", s->tp_size, s->NH, s->Vp);
    int ng = s->query_groups ? s->query_groups : s->NH, f = s->ffn ? s->ffn : 4 * s->C;
    if (ng < 1 || s->NH % ng || ng % s->tp_size || f < 1 || f % s->tp_size)
        return tr_fail(TR_ERR_INVALID, "invalid family shape: %d query groups for %d heads, "
                       "MLP width %d, tensor-parallel size %d", ng, s->NH, f, s->tp_size);
    if (s->position == TR_POS_ROPE &&
        (s->rotary_dims < 2 || s->rotary_dims % 2 || s->rotary_dims > tr_gpt_head_size(s)))
        return tr_fail(TR_ERR_INVALID, "invalid rotary dimensions %d for head size %d",
                       s->rotary_dims, tr_gpt_head_size(s));
    if (s->position < TR_POS_LEARNED || s->position > TR_POS_ALIBI)
        return tr_fail(TR_ERR_INVALID, "invalid position embedding type %d", s->position);
    if (s->parallel_shared_norm && !s->parallel_residual)
        return tr_fail(TR_ERR_INVALID, "a shared norm needs the parallel residual");
    if (s->output_bias && !s->untie)
        return tr_fail(TR_ERR_INVALID, "an output-layer bias needs the untied output layer");
    if (s->geglu && s->swiglu)
        return tr_fail(TR_ERR_INVALID, "the gated MLP is SwiGLU or GeGLU, not both");
    if (s->relu && (tr_gpt_gated_mlp(s) || s->gelu_exact))
        return tr_fail(TR_ERR_INVALID, "a ReLU MLP is neither gated (SwiGLU, GeGLU) nor GELU");
    if (!(fabsf(s->embedding_multiplier) <= FLT_MAX))
        return tr_fail(TR_ERR_INVALID, "invalid embedding multiplier %g",
                       (double)s->embedding_multiplier);
    if (s->rope_scaling < TR_ROPE_SCALING_NONE || s->rope_scaling > TR_ROPE_SCALING_LLAMA3 ||
        (s->rope_scaling && (s->position != TR_POS_ROPE || !(s->rope_factor > 0) ||
                             !(s->rope_factor <= FLT_MAX))) ||
        (s->rope_scaling == TR_ROPE_SCALING_LLAMA3 &&
         (!(s->rope_low_freq_factor > 0) || !(s->rope_high_freq_factor > s->rope_low_freq_factor) ||
          !(s->rope_high_freq_factor <= FLT_MAX) || s->rope_original_positions < 1)))
        return tr_fail(TR_ERR_INVALID, "invalid rope scaling (kind %d, factor %g, frequency "
                       "factors %g and %g, %d original positions)", s->rope_scaling,
                       (double)s->rope_factor, (double)s->rope_low_freq_factor,
                       (double)s->rope_high_freq_factor, s->rope_original_positions);
    return TR_OK;
}

static int check_comm(const tr_gpt_shape *s, const tr_comm *tp_comm)
{
    if ((s->tp_size > 1) != (tp_comm != NULL))
        return tr_fail(TR_ERR_INVALID, "a tensor-parallel communicator is needed iff "
                       "tp_size > 1 (tp_size %d, communicator %s)", s->tp_size,
                       tp_comm ? "given" : "NULL");
    if (tp_comm && (tr_comm_size(tp_comm) != s->tp_size || tr_comm_rank(tp_comm) != s->tp_rank))
        return tr_fail(TR_ERR_INVALID, "the tensor-parallel communicator is rank %d of %d but "
                       "the shape says rank %d of %d", tr_comm_rank(tp_comm),
                       tr_comm_size(tp_comm), s->tp_rank, s->tp_size);
    return TR_OK;
}

/* The MLP width, query groups and which layer tensors the family has (g->slot). */
static void family_sizes(tr_gpt *g)
{
    const tr_gpt_shape *s = &g->s;
    g->Cl = s->C / s->tp_size;
    g->NHl = s->NH / s->tp_size;
    g->Vl = s->Vp / s->tp_size;
    g->HS = tr_gpt_head_size(s);
    g->A = s->NH * g->HS;
    g->Al = g->A / s->tp_size;
    g->NG = s->query_groups ? s->query_groups : s->NH;
    g->NGl = g->NG / s->tp_size;
    g->QKVl = (g->NHl + 2 * g->NGl) * g->HS;
    g->F = s->ffn ? s->ffn : 4 * s->C;
    g->Fl = g->F / s->tp_size;
    g->Fwl = tr_gpt_gated_mlp(s) ? 2 * g->Fl : g->Fl;
    g->per_layer = 0;
    for (int j = 0; j < L_COUNT; j++) {
        int is_bias = j == L_QKV_B || j == L_ATTPROJ_B || j == L_FC_B || j == L_FCPROJ_B;
        int kept = (j == L_QKV_B && s->qkv_bias) ||
                   ((j == L_FC_B || j == L_FCPROJ_B) && s->mlp_bias); /* without linear ones */
        int absent = (is_bias && s->no_linear_bias && !kept) ||
                     ((s->rmsnorm || s->no_norm_bias) && (j == L_LN1_B || j == L_LN2_B));
        if (s->parallel_shared_norm && (j == L_LN2_W || j == L_LN2_B))
            g->slot[j] = g->slot[j == L_LN2_W ? L_LN1_W : L_LN1_B]; /* ln1's tensors */
        else
            g->slot[j] = absent ? -1 : g->per_layer++;
    }
}

static void add_layers(tr_gpt *g)
{
    static const char *names[L_COUNT] = {
        "ln1.weight",   "ln1.bias",     "qkv.weight", "qkv.bias", "attn_proj.weight",
        "attn_proj.bias", "ln2.weight", "ln2.bias",   "fc.weight", "fc.bias",
        "fc_proj.weight", "fc_proj.bias"};
    int C = g->s.C, qkv = g->A + 2 * g->NG * g->HS, fc = tr_gpt_gated_mlp(&g->s) ? 2 * g->F : g->F;
    int rows[L_COUNT] = {C, C, qkv, qkv, C, C, C, C, fc, fc, C, C};
    int cols[L_COUNT] = {1, 1, C, 1, g->A, 1, 1, 1, C, 1, g->F, 1};
    /* column-parallel qkv, fc (weight and bias rows); row-parallel projections (columns) */
    int split[L_COUNT] = {-1, -1, 0, 0, 1, -1, -1, -1, 0, 0, 1, -1};
    for (int i = 0; i < g->s.layer_count; i++)
        for (int j = 0; j < L_COUNT; j++) {
            if (g->slot[j] < 0 || (g->s.parallel_shared_norm && (j == L_LN2_W || j == L_LN2_B)))
                continue; /* absent, or ln1's (a shared norm) */
            char name[48];
            snprintf(name, sizeof name, "layers.%d.%s", g->s.layer_first + i, names[j]);
            int t = add_tensor(g, name, rows[j], cols[j], split[j]);
            /* under SP, LN and row-parallel bias gradients are sums over this rank's rows */
            g->tensors[t].tp_grad_allreduce = g->s.sequence_parallel && split[j] < 0;
        }
}

static int max_tensors(const tr_gpt_shape *s) { return 8 + s->layer_count * L_COUNT; }

/* The tensor table of g->s (the embeddings, the layers, the final LN and the head's copy of
 * wte) and each tensor's offset in the flat buffers; g->tensors holds max_tensors(&g->s). */
static void add_tensors(tr_gpt *g)
{
    const tr_gpt_shape *s = &g->s;
    int C = s->C;
    g->wte = g->wpe = g->lnf_w = g->lnf_b = g->head_wte = g->emb_ln_w = g->emb_ln_b = -1;
    g->head_bias = -1;
    family_sizes(g);
    if (s->is_first) {
        g->wte = add_tensor(g, "wte", s->Vp, C, 0);
        g->tensors[g->wte].word_embedding = !s->untie;
        g->tensors[g->wte].vocab_rows = 1;
        /* wpe's gradient is made from all N rows on every rank (see gpt_backward.c) */
        if (s->position == TR_POS_LEARNED)
            g->wpe = add_tensor(g, "wpe", s->max_T, C, -1);
        if (s->embedding_ln) {
            g->emb_ln_w = add_tensor(g, "emb_ln.weight", C, 1, -1);
            g->tensors[g->emb_ln_w].tp_grad_allreduce = g->s.sequence_parallel;
            if (!s->rmsnorm && !s->no_norm_bias) {
                g->emb_ln_b = add_tensor(g, "emb_ln.bias", C, 1, -1);
                g->tensors[g->emb_ln_b].tp_grad_allreduce = g->s.sequence_parallel;
            }
        }
    }
    g->layer0 = g->n_tensors;
    add_layers(g);
    if (s->is_last) {
        g->lnf_w = add_tensor(g, "lnf.weight", C, 1, -1);
        g->tensors[g->lnf_w].tp_grad_allreduce = g->s.sequence_parallel;
        if (!s->rmsnorm && !s->no_norm_bias) {
            g->lnf_b = add_tensor(g, "lnf.bias", C, 1, -1);
            g->tensors[g->lnf_b].tp_grad_allreduce = g->s.sequence_parallel;
        }
        if (s->untie) { /* its own vocab-parallel output layer */
            g->head_wte = add_tensor(g, "output_layer", s->Vp, C, 0);
            g->tensors[g->head_wte].vocab_rows = 1;
            if (s->output_bias) { /* split with the vocabulary rows */
                g->head_bias = add_tensor(g, "output_layer.bias", s->Vp, 1, 0);
                g->tensors[g->head_bias].vocab_rows = 1;
            }
        } else if (s->is_first) {
            g->head_wte = g->wte;
        } else {
            /* the tied head's own copy: same name, so identical initial values; the first
             * stage's copy is the one counted in the gradient norm */
            g->head_wte = add_tensor(g, "wte", s->Vp, C, 0);
            g->tensors[g->head_wte].word_embedding = 1;
            g->tensors[g->head_wte].vocab_rows = 1;
            g->tensors[g->head_wte].count_in_norm = 0;
        }
    }
    for (int i = 0; i < g->n_tensors; i++) {
        tr_param_tensor *t = &g->tensors[i];
        t->offset = g->n_params - t->forward_offset - t->numel;
    }
}

int tr_gpt_count_params(const tr_gpt_shape *shape, size_t *n_params)
{
    int rc = check_shape(shape);
    if (rc)
        return rc;
    tr_gpt g = {0};
    g.s = *shape;
    g.s.sequence_parallel = shape->tp_size > 1 && shape->sequence_parallel;
    g.tensors = tr_alloc(sizeof *g.tensors * (size_t)max_tensors(shape), "model tensor table");
    if (!g.tensors)
        return TR_ERR_NOMEM;
    add_tensors(&g);
    *n_params = g.n_params;
    tr_free(g.tensors);
    return TR_OK;
}

/* Bloom's ALiBi slopes of n heads (transformers' build_alibi_tensor): for the largest power
 * of two p <= n, base^1 .. base^p with base = 2^(-8/p); the n - p others are the odd powers
 * 1, 3, 5, ... of 2^(-4/p) (the base of 2p heads). */
static double alibi_slope(int n, int h)
{
    int p = 1;
    while (p * 2 <= n)
        p *= 2;
    if (h < p)
        return pow(pow(2.0, -8.0 / p), h + 1);
    return pow(pow(2.0, -4.0 / p), 2 * (h - p) + 1);
}

float tr_gpt_rope_inv_freq(const tr_gpt_shape *s, int i)
{
    float inv_freq = (float)(1.0 / pow(s->rotary_base, (float)(2 * i) / (float)s->rotary_dims));
    if (s->rope_scaling != TR_ROPE_SCALING_LLAMA3)
        return inv_freq;
    /* transformers' _compute_llama3_parameters: long wavelengths (low frequencies) divided by
     * the factor, short ones kept, those between blended by where the original context puts
     * them */
    double factor = s->rope_factor, low = s->rope_low_freq_factor,
           high = s->rope_high_freq_factor, original = s->rope_original_positions;
    double wavelen = 2.0 * M_PI / inv_freq;
    if (wavelen > original / low)
        return (float)(inv_freq / factor);
    if (wavelen < original / high)
        return inv_freq;
    double smooth = (original / wavelen - low) / (high - low);
    return (float)((1.0 - smooth) * inv_freq / factor + smooth * inv_freq);
}

int gpt_rope_reserve(tr_gpt *g, int positions)
{
    const tr_gpt_shape *s = &g->s;
    const tr_kernels *k = g->k;
    if (s->position != TR_POS_ROPE || positions <= g->rope_positions)
        return TR_OK;
    /* cos, sin: (positions, half) each; a row depends on its position only, so a longer
     * table repeats a shorter one's rows bit for bit */
    int half = s->rotary_dims / 2;
    size_t n = (size_t)positions * half;
    float *host = tr_alloc(2 * n * sizeof(float), "rotary tables");
    float *cos_t = host ? k->alloc(n * sizeof(float)) : NULL;
    float *sin_t = cos_t ? k->alloc(n * sizeof(float)) : NULL;
    if (!sin_t) {
        k->free(cos_t);
        tr_free(host);
        return tr_fail(TR_ERR_NOMEM, "out of memory for the rotary tables of %d positions "
                       "(2 x %zu MiB)", positions, n * sizeof(float) >> 20);
    }
    for (int i = 0; i < half; i++) {
        float inv_freq = tr_gpt_rope_inv_freq(s, i);
        for (int t = 0; t < positions; t++) {
            /* linear interpolation: the position t / factor (transformers' linear scaling
             * divides the float positions first) */
            float pos = s->rope_scaling == TR_ROPE_SCALING_LINEAR ? (float)t / s->rope_factor
                                                                  : (float)t;
            float angle = pos * inv_freq;
            host[(size_t)t * half + i] = (float)cos(angle);
            host[n + (size_t)t * half + i] = (float)sin(angle);
        }
    }
    k->to_device(NULL, cos_t, host, n * sizeof(float));
    k->to_device(NULL, sin_t, host + n, n * sizeof(float));
    tr_free(host);
    k->free(g->rope_cos);
    k->free(g->rope_sin);
    g->rope_cos = cos_t;
    g->rope_sin = sin_t;
    g->rope_positions = positions;
    return TR_OK;
}

/* The rope cos/sin tables of the T training positions (angles as Hugging Face Llama makes
 * them, in fp32; a generation cache of more positions grows them: gpt_rope_reserve) and this
 * rank's ALiBi slopes, in backend memory; the family's training ops must exist in the
 * backend. */
static int family_tables(tr_gpt *g)
{
    const tr_gpt_shape *s = &g->s;
    const tr_kernels *k = g->k;
    struct { int needed; const void *op; const char *name; } ops[] = {
        {s->rmsnorm, (const void *)k->rmsnorm_forward, "RMSNorm"},
        {s->rmsnorm, (const void *)k->rmsnorm_backward, "RMSNorm"},
        {s->swiglu, (const void *)k->swiglu_forward, "SwiGLU"},
        {s->swiglu, (const void *)k->swiglu_backward, "SwiGLU"},
        {s->geglu, (const void *)k->geglu_forward, "GeGLU"},
        {s->geglu, (const void *)k->geglu_backward, "GeGLU"},
        {s->gelu_exact && !s->geglu, (const void *)k->gelu_exact_forward, "exact GELU"},
        {s->gelu_exact && !s->geglu, (const void *)k->gelu_exact_backward, "exact GELU"},
        {s->relu, (const void *)k->relu_forward, "ReLU"},
        {s->relu, (const void *)k->relu_backward, "ReLU"},
        {s->position == TR_POS_ROPE, (const void *)k->rope, "rotary embedding"},
        {uses_gqa_attention(g) || s->position == TR_POS_ALIBI,
         (const void *)k->attention_gqa_forward, "grouped-query / ALiBi attention"},
        {uses_gqa_attention(g) || s->position == TR_POS_ALIBI,
         (const void *)k->attention_gqa_backward, "grouped-query / ALiBi attention"}};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (ops[i].needed && !ops[i].op)
            return tr_fail(TR_ERR_CONFIG, "the %s backend has no %s kernels yet; this model "
                           "family runs on training.device cpu", k->name, ops[i].name);
    int rc = gpt_rope_reserve(g, s->T); /* training positions are < T */
    if (rc)
        return rc;
    if (s->layernorm_1p) { /* C ones, then the C floats norm_scale writes 1 + weight into */
        float *ones = tr_alloc((size_t)s->C * sizeof(float), "norm offset staging");
        if (!ones || !(g->norm_1p = k->alloc(2 * (size_t)s->C * sizeof(float)))) {
            tr_free(ones);
            return tr_fail(TR_ERR_NOMEM, "out of memory for the norms' 1 + weight scale");
        }
        for (int c = 0; c < s->C; c++)
            ones[c] = 1.0f;
        k->to_device(NULL, g->norm_1p, ones, (size_t)s->C * sizeof(float));
        tr_free(ones);
    }
    /* layernorm_bias false: C zeros the LayerNorm kernels read as the bias, C floats their bias
     * gradient accumulates into (a sink never read) */
    if (s->no_norm_bias && !(g->norm_zero = k->alloc(2 * (size_t)s->C * sizeof(float))))
        return tr_fail(TR_ERR_NOMEM, "out of memory for the norms' zero bias");
    if (s->position == TR_POS_ALIBI) {
        float host[1024];
        if (g->NHl > 1024)
            return tr_fail(TR_ERR_INVALID, "ALiBi with %d heads per rank (at most 1024)", g->NHl);
        for (int h = 0; h < g->NHl; h++)
            host[h] = (float)alibi_slope(s->NH, s->tp_rank * g->NHl + h);
        if (!(g->alibi = k->alloc((size_t)g->NHl * sizeof(float))))
            return tr_fail(TR_ERR_NOMEM, "out of memory for the ALiBi slopes");
        k->to_device(NULL, g->alibi, host, (size_t)g->NHl * sizeof(float));
    }
    return TR_OK;
}

int tr_gpt_create(const tr_gpt_shape *shape, const tr_kernels *k, tr_comm *tp_comm,
                  tr_gpt **out)
{
    const tr_gpt_shape *s = shape;
    int rc = check_shape(s);
    if (!rc)
        rc = check_comm(s, tp_comm);
    if (rc)
        return rc;
    tr_gpt *g = tr_alloc(sizeof *g, "model");
    if (!g)
        return TR_ERR_NOMEM;
    g->s = *s;
    g->s.sequence_parallel = s->tp_size > 1 && s->sequence_parallel;
    g->k = k;
    if ((rc = tr_tp_init(&g->tp, k, tp_comm, g->s.sequence_parallel))) {
        tr_free(g);
        return rc;
    }
    g->Cl = s->C / s->tp_size;
    g->NHl = s->NH / s->tp_size;
    g->Vl = s->Vp / s->tp_size;
    g->tensors = tr_alloc(sizeof *g->tensors * (size_t)max_tensors(s), "model tensor table");
    g->layer_ranges = tr_alloc(sizeof *g->layer_ranges * (size_t)s->layer_count, "model ranges");
    g->tp.comm_time = tr_alloc(sizeof *g->tp.comm_time, "tensor-parallel communication timer");
    if (!g->tensors || !g->layer_ranges || !g->tp.comm_time) {
        tr_gpt_free(g);
        return TR_ERR_NOMEM;
    }
    add_tensors(g);
    for (int l = 0; l < s->layer_count; l++)
        g->layer_ranges[l] = tensors_range(g, g->layer0 + l * g->per_layer,
                                           g->layer0 + (l + 1) * g->per_layer - 1);
    if (s->is_last) /* the final norm and the head's weight are the last tensors */
        g->head_range = tensors_range(g, g->lnf_w, g->n_tensors - 1);
    if (s->is_first) /* wte, wpe, emb_ln: everything before the layers */
        g->embedding_range = tensors_range(g, g->wte, g->layer0 - 1);
    if ((rc = family_tables(g)) || (s->lora_rank && (rc = gpt_lora_setup(g)))) {
        tr_gpt_free(g);
        return rc;
    }
    *out = g;
    return TR_OK;
}

void tr_gpt_free(tr_gpt *g)
{
    if (!g)
        return;
    g->k->free(g->scratch.memory);
    g->k->free(g->scratch.layer_memory);
    g->k->free(g->rope_cos);
    g->k->free(g->rope_sin);
    g->k->free(g->alibi);
    g->k->free(g->norm_1p);
    g->k->free(g->norm_zero);
    tr_free(g->losses_host);
    gpt_lora_free(g);
    tr_free(g->layer_ranges);
    tr_free(g->tensors);
    tr_free(g->tp.comm_time);
    tr_free(g);
}

double tr_gpt_tp_comm_seconds(const tr_gpt *g, long *calls)
{
    if (calls)
        *calls = g->tp.comm_time->calls;
    return g->tp.comm_time->seconds;
}

void tr_gpt_tp_comm_reset(tr_gpt *g) { tr_tp_comm_time_reset(g->tp.comm_time); }

const tr_gpt_shape *tr_gpt_get_shape(const tr_gpt *g) { return &g->s; }
/* The trainable tensors: the adapters under LoRA, else the model's */
int tr_gpt_num_tensors(const tr_gpt *g) { return g->lora ? g->n_lora : g->n_tensors; }
tr_param_tensor *tr_gpt_tensor(tr_gpt *g, int i) { return g->lora ? &g->lora[i] : &g->tensors[i]; }
size_t tr_gpt_num_params(const tr_gpt *g) { return g->lora ? g->n_lora_params : g->n_params; }
int tr_gpt_num_base_tensors(const tr_gpt *g) { return g->n_tensors; }
tr_param_tensor *tr_gpt_base_tensor(tr_gpt *g, int i) { return &g->tensors[i]; }

void tr_gpt_set_grad_hook(tr_gpt *g, void (*fn)(void *ctx, size_t offset, size_t count),
                          void *ctx)
{
    g->grad_hook = fn;
    g->grad_hook_ctx = fn ? ctx : NULL;
}

void tr_gpt_set_param_hook(tr_gpt *g, int (*fn)(void *ctx, int what, size_t offset, size_t count),
                           void *ctx)
{
    g->param_hook = fn;
    g->param_hook_ctx = fn ? ctx : NULL;
}

void tr_gpt_bind(tr_gpt *g, float *params, float *grads)
{
    for (int i = 0; i < tr_gpt_num_tensors(g); i++) {
        tr_param_tensor *t = tr_gpt_tensor(g, i);
        t->param = params + t->offset;
        t->grad = grads ? grads + t->offset : NULL;
    }
}

/* Initial value std of a tensor: LN weights 1 (0 with apply_layernorm_1p: the norm scales by
 * 1 + weight), biases 0, output projections scaled. */
static int init_kind(const char *name, int cols, float *std, const tr_gpt_shape *s)
{
    size_t n = strlen(name);
    if (strstr(name, ".lora_B"))
        return 0; /* zeros: the adapted model starts as the base */
    if (strstr(name, ".lora_A")) { /* PEFT's kaiming-uniform variance, 1 / (3 in) */
        *std = 1.0f / sqrtf(3.0f * (float)cols);
        return 2;
    }
    if (n > 5 && !strcmp(name + n - 5, ".bias"))
        return 0; /* zeros */
    if (strstr(name, "ln") == name || strstr(name, ".ln") || !strncmp(name, "lnf", 3) ||
        !strncmp(name, "emb_ln", 6))
        return s->layernorm_1p ? 0 : 1; /* ones (the scale 1 + 0 with the 1p offset) */
    *std = s->init_std;
    if (strstr(name, "attn_proj.weight") || strstr(name, "fc_proj.weight"))
        *std = s->init_std / sqrtf(2.0f * (float)s->num_layers);
    return 2;
}

/* Index in the full tensor of element e of this rank's shard. */
static uint64_t global_index(const tr_param_tensor *t, int tp_rank, size_t e)
{
    size_t r = e / (size_t)t->cols, c = e % (size_t)t->cols;
    if (t->split_dim == 0)
        r += (size_t)tp_rank * (size_t)t->rows;
    else if (t->split_dim == 1)
        c += (size_t)tp_rank * (size_t)t->cols;
    return (uint64_t)(r * (size_t)t->full_cols + c);
}

/* Elements per piece of the initialisation on the CPU backend's team. */
#define INIT_PIECE 65536

typedef struct {
    float *host;
    const tr_param_tensor *t;
    const tr_gpt_shape *s;
    uint64_t name_hash;
    float std;
    int kind;
} init_job;

/* Elements [i * INIT_PIECE, ...) of one tensor: each a pure function of its global index,
 * so any split over threads gives the same values. */
static void init_piece(void *ctx, size_t i)
{
    const init_job *j = ctx;
    size_t lo = i * INIT_PIECE, hi = j->t->numel - lo < INIT_PIECE ? j->t->numel : lo + INIT_PIECE;
    for (size_t e = lo; e < hi; e++)
        j->host[e] = j->kind == 0   ? 0.0f
                     : j->kind == 1 ? 1.0f
                                    : j->std * tr_init_normal(j->s->seed, j->name_hash,
                                                              global_index(j->t, j->s->tp_rank, e));
}

int tr_gpt_init_params(tr_gpt *g)
{
    return tr_gpt_init_params_range(g, 0, tr_gpt_num_params(g));
}

int tr_gpt_init_params_range(tr_gpt *g, size_t offset, size_t count)
{
    return g->lora ? gpt_init_tensors(g, g->lora, g->n_lora, offset, count)
                   : gpt_init_tensors(g, g->tensors, g->n_tensors, offset, count);
}

int gpt_init_tensors(tr_gpt *g, tr_param_tensor *tensors, int n, size_t offset, size_t count)
{
    float *host = NULL;
    size_t max_numel = 0;
    for (int i = 0; i < n; i++)
        if (tensors[i].numel > max_numel)
            max_numel = tensors[i].numel;
    host = tr_alloc(max_numel * sizeof(float) + 1, "initial parameter staging");
    if (!host)
        return TR_ERR_NOMEM;
    for (int i = 0; i < n; i++) {
        tr_param_tensor *t = &tensors[i];
        if (t->offset < offset || t->offset - offset >= count)
            continue;
        init_job j = {.host = host, .t = t, .s = &g->s, .name_hash = tr_hash_name(t->name)};
        j.kind = init_kind(t->name, t->full_cols, &j.std, &g->s);
        tr_kernels_cpu_parallel_for((t->numel + INIT_PIECE - 1) / INIT_PIECE, init_piece, &j);
        g->k->to_device(NULL, t->param, host, t->numel * sizeof(float));
    }
    tr_free(host);
    return TR_OK;
}

double tr_gpt_flops_per_token(const tr_gpt_shape *s, double n_params_total)
{
    return 6.0 * n_params_total +
           12.0 * s->num_layers * (double)s->NH * (double)tr_gpt_head_size(s) * s->T;
}
