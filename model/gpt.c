/* GPT stage: the parameter layout (with tensor-parallel shards), the position tables, creation,
 * binding, the grad-ready hook (its shape: gpt_shape.c; its initial values: gpt_init.c). */
#include "model/gpt_internal.h"

#include <float.h>
#include <math.h>
#include <stdio.h>

#include "core/core.h"

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
    if (s->num_experts < 0 || s->num_experts > 1024 ||
        (s->num_experts && (s->moe_topk < 1 || s->moe_topk > s->num_experts ||
                            s->parallel_residual || s->lora_rank ||
                            !(s->moe_aux_coeff >= 0) || !(s->moe_z_coeff >= 0))))
        return tr_fail(TR_ERR_INVALID, "invalid mixture of experts: %d experts, top-%d (1 .. "
                       "experts; not with the parallel residual or LoRA), coefficients %g and %g",
                       s->num_experts, s->moe_topk, (double)s->moe_aux_coeff,
                       (double)s->moe_z_coeff);
    if (s->ep_size > 1 && (s->ep_size > TR_MOE_MAX_EP || !s->num_experts ||
                           s->num_experts % s->ep_size || s->ep_rank < 0 ||
                           s->ep_rank >= s->ep_size))
        return tr_fail(TR_ERR_INVALID, "invalid expert-parallel split: rank %d of %d over %d "
                       "experts", s->ep_rank, s->ep_size, s->num_experts);
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
    g->per_layer = g->per_expert = 0;
    for (int j = 0; j < L_COUNT; j++) {
        int is_bias = j == L_QKV_B || j == L_ATTPROJ_B || j == L_FC_B || j == L_FCPROJ_B;
        int kept = (j == L_QKV_B && s->qkv_bias) ||
                   ((j == L_FC_B || j == L_FCPROJ_B) && s->mlp_bias); /* without linear ones */
        int absent = (is_bias && s->no_linear_bias && !kept) ||
                     ((s->rmsnorm || s->no_norm_bias) && (j == L_LN1_B || j == L_LN2_B)) ||
                     (j == L_ROUTER_W && !s->num_experts);
        if (s->parallel_shared_norm && (j == L_LN2_W || j == L_LN2_B))
            g->slot[j] = g->slot[j == L_LN2_W ? L_LN1_W : L_LN1_B]; /* ln1's tensors */
        else
            g->slot[j] = absent ? -1 : g->per_layer++;
        g->per_expert += j >= L_FC_W && !absent; /* the MLP's tensors: one expert's */
    }
    if (s->num_experts) /* this rank's experts 1 .. after its first one's slots */
        g->per_layer += (s->num_experts / gpt_ep_split(s) - 1) * g->per_expert;
}

static void add_layers(tr_gpt *g)
{
    static const char *names[L_COUNT] = {
        "ln1.weight",   "ln1.bias",     "qkv.weight", "qkv.bias", "attn_proj.weight",
        "attn_proj.bias", "ln2.weight", "ln2.bias",   "router.weight", "fc.weight", "fc.bias",
        "fc_proj.weight", "fc_proj.bias"};
    int C = g->s.C, qkv = g->A + 2 * g->NG * g->HS, fc = tr_gpt_gated_mlp(&g->s) ? 2 * g->F : g->F;
    int rows[L_COUNT] = {C, C, qkv, qkv, C, C, C, C, g->s.num_experts, fc, fc, C, C};
    int cols[L_COUNT] = {1, 1, C, 1, g->A, 1, 1, 1, C, C, 1, g->F, 1};
    /* column-parallel qkv, fc (weight and bias rows); row-parallel projections (columns) */
    int split[L_COUNT] = {-1, -1, 0, 0, 1, -1, -1, -1, -1, 0, 0, 1, -1};
    int E = g->s.num_experts, El = E / gpt_ep_split(&g->s), e0 = g->s.ep_rank * El;
    for (int i = 0; i < g->s.layer_count; i++) {
        int layer = g->s.layer_first + i;
        for (int j = 0; j < L_COUNT; j++) {
            if (g->slot[j] < 0 || (g->s.parallel_shared_norm && (j == L_LN2_W || j == L_LN2_B)) ||
                (E && j >= L_FC_W))
                continue; /* absent, ln1's (a shared norm), or the experts' (below) */
            char name[48];
            snprintf(name, sizeof name, "layers.%d.%s", layer, names[j]);
            int t = add_tensor(g, name, rows[j], cols[j], split[j]);
            /* under SP, LN and row-parallel bias gradients are sums over this rank's rows; the
             * router's, under any TP, a sum of each rank's share of the experts' outputs */
            g->tensors[t].tp_grad_allreduce =
                j == L_ROUTER_W ? g->s.tp_size > 1 : g->s.sequence_parallel && split[j] < 0;
        }
        /* every expert's MLP (this EP rank's), in index order; its fc_proj bias gradient is
         * made from the whole output gradient (gathered under SP) on every rank: not partial */
        for (int e = e0; E && e < e0 + El; e++)
            for (int j = L_FC_W; j < L_COUNT; j++) {
                if (g->slot[j] < 0)
                    continue;
                char name[48];
                snprintf(name, sizeof name, "layers.%d.experts.%d.%s", layer, e, names[j]);
                g->tensors[add_tensor(g, name, rows[j], cols[j], split[j])].expert = 1;
            }
    }
}

static int max_tensors(const tr_gpt_shape *s)
{
    return 8 + s->layer_count * (L_COUNT + 4 * s->num_experts);
}

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
        {s->num_experts > 0, (const void *)k->moe_router_forward, "mixture-of-experts"},
        {s->num_experts > 0, (const void *)k->moe_router_backward, "mixture-of-experts"},
        {s->num_experts > 0, (const void *)k->gather_rows, "mixture-of-experts"},
        {s->num_experts > 0, (const void *)k->scatter_add_rows, "mixture-of-experts"},
        {s->num_experts > 0, (const void *)k->scatter_add_rows_backward, "mixture-of-experts"},
        {s->position == TR_POS_ROPE, (const void *)k->rope, "rotary embedding"},
        {s->hidden_dropout > 0, (const void *)k->dropout, "dropout (model.hidden_dropout)"},
        {s->attention_dropout > 0, (const void *)k->attention_gqa_dropout_forward,
         "attention dropout (model.attention_dropout)"},
        {s->attention_dropout > 0, (const void *)k->attention_gqa_dropout_backward,
         "attention dropout (model.attention_dropout)"},
        {uses_gqa_attention(g) || s->position == TR_POS_ALIBI,
         (const void *)k->attention_gqa_forward, "grouped-query / ALiBi attention"},
        {uses_gqa_attention(g) || s->position == TR_POS_ALIBI,
         (const void *)k->attention_gqa_backward, "grouped-query / ALiBi attention"}};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (ops[i].needed && !ops[i].op)
            return tr_fail(TR_ERR_CONFIG, "the %s backend has no %s kernels yet; this model "
                           "family runs on training.device cpu", k->name, ops[i].name);
    int rc = gpt_rope_reserve(g, s->T * gpt_cp_size(g)); /* training positions are < T (all
                                                             * CP ranks' tokens) */
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
    gpt_cp_free(g);
    g->k->free(g->scratch.memory);
    g->k->free(g->scratch.layer_memory);
    g->k->free(g->rope_cos);
    g->k->free(g->rope_sin);
    g->k->free(g->alibi);
    g->k->free(g->norm_1p);
    g->k->free(g->norm_zero);
    tr_free(g->losses_host);
    gpt_moe_host_free(g);
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
