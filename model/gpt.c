/* GPT stage: shape, parameter layout (with tensor-parallel shards), layout-free
 * initialisation, binding, the grad-ready hook. */
#include "model/gpt_internal.h"

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
    out->recompute = !strcmp(cfg->training.recompute, "full");
    out->recompute_attention = !strcmp(cfg->training.recompute, "selective");
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
    if (s->C < 1 || s->NH < 1 || s->C % s->NH || s->T < 1 || s->max_T < s->T || s->V < 1 ||
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

static void add_layers(tr_gpt *g)
{
    static const char *names[L_COUNT] = {
        "ln1.weight",   "ln1.bias",     "qkv.weight", "qkv.bias", "attn_proj.weight",
        "attn_proj.bias", "ln2.weight", "ln2.bias",   "fc.weight", "fc.bias",
        "fc_proj.weight", "fc_proj.bias"};
    int C = g->s.C;
    int rows[L_COUNT] = {C, C, 3 * C, 3 * C, C, C, C, C, 4 * C, 4 * C, C, C};
    int cols[L_COUNT] = {1, 1, C, 1, C, 1, 1, 1, C, 1, 4 * C, 1};
    /* column-parallel qkv, fc (weight and bias rows); row-parallel projections (columns) */
    int split[L_COUNT] = {-1, -1, 0, 0, 1, -1, -1, -1, 0, 0, 1, -1};
    for (int i = 0; i < g->s.layer_count; i++)
        for (int j = 0; j < L_COUNT; j++) {
            char name[48];
            snprintf(name, sizeof name, "layers.%d.%s", g->s.layer_first + i, names[j]);
            int t = add_tensor(g, name, rows[j], cols[j], split[j]);
            /* under SP, LN and row-parallel bias gradients are sums over this rank's rows */
            g->tensors[t].tp_grad_allreduce = g->s.sequence_parallel && split[j] < 0;
        }
}

static int max_tensors(const tr_gpt_shape *s) { return 5 + s->layer_count * L_COUNT; }

/* The tensor table of g->s (the embeddings, the layers, the final LN and the head's copy of
 * wte) and each tensor's offset in the flat buffers; g->tensors holds max_tensors(&g->s). */
static void add_tensors(tr_gpt *g)
{
    const tr_gpt_shape *s = &g->s;
    int C = s->C;
    g->wte = g->wpe = g->lnf_w = g->lnf_b = g->head_wte = -1;
    if (s->is_first) {
        g->wte = add_tensor(g, "wte", s->Vp, C, 0);
        g->tensors[g->wte].word_embedding = 1;
        /* wpe's gradient is made from all N rows on every rank (see gpt_backward.c) */
        g->wpe = add_tensor(g, "wpe", s->max_T, C, -1);
    }
    g->layer0 = g->n_tensors;
    add_layers(g);
    if (s->is_last) {
        g->lnf_w = add_tensor(g, "lnf.weight", C, 1, -1);
        g->lnf_b = add_tensor(g, "lnf.bias", C, 1, -1);
        g->tensors[g->lnf_w].tp_grad_allreduce = g->s.sequence_parallel;
        g->tensors[g->lnf_b].tp_grad_allreduce = g->s.sequence_parallel;
        if (s->is_first) {
            g->head_wte = g->wte;
        } else {
            /* the tied head's own copy: same name, so identical initial values; the first
             * stage's copy is the one counted in the gradient norm */
            g->head_wte = add_tensor(g, "wte", s->Vp, C, 0);
            g->tensors[g->head_wte].word_embedding = 1;
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
        g->layer_ranges[l] = tensors_range(g, g->layer0 + l * L_COUNT,
                                           g->layer0 + (l + 1) * L_COUNT - 1);
    if (s->is_last)
        g->head_range = tensors_range(g, g->lnf_w, s->is_first ? g->lnf_b : g->head_wte);
    if (s->is_first)
        g->embedding_range = tensors_range(g, g->wte, g->wpe);
    *out = g;
    return TR_OK;
}

void tr_gpt_free(tr_gpt *g)
{
    if (!g)
        return;
    g->k->free(g->scratch.memory);
    g->k->free(g->scratch.layer_memory);
    tr_free(g->losses_host);
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
int tr_gpt_num_tensors(const tr_gpt *g) { return g->n_tensors; }
tr_param_tensor *tr_gpt_tensor(tr_gpt *g, int i) { return &g->tensors[i]; }
size_t tr_gpt_num_params(const tr_gpt *g) { return g->n_params; }

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
    for (int i = 0; i < g->n_tensors; i++) {
        tr_param_tensor *t = &g->tensors[i];
        t->param = params + t->offset;
        t->grad = grads ? grads + t->offset : NULL;
    }
}

/* Initial value std of a tensor: LN weights 1, biases 0, output projections scaled. */
static int init_kind(const char *name, float *std, const tr_gpt_shape *s)
{
    size_t n = strlen(name);
    if (n > 5 && !strcmp(name + n - 5, ".bias"))
        return 0; /* zeros */
    if (strstr(name, "ln") == name || strstr(name, ".ln") || !strncmp(name, "lnf", 3))
        return 1; /* ones */
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

int tr_gpt_init_params(tr_gpt *g) { return tr_gpt_init_params_range(g, 0, g->n_params); }

int tr_gpt_init_params_range(tr_gpt *g, size_t offset, size_t count)
{
    float *host = NULL;
    size_t max_numel = 0;
    for (int i = 0; i < g->n_tensors; i++)
        if (g->tensors[i].numel > max_numel)
            max_numel = g->tensors[i].numel;
    host = tr_alloc(max_numel * sizeof(float), "initial parameter staging");
    if (!host)
        return TR_ERR_NOMEM;
    for (int i = 0; i < g->n_tensors; i++) {
        tr_param_tensor *t = &g->tensors[i];
        if (t->offset < offset || t->offset - offset >= count)
            continue;
        init_job j = {.host = host, .t = t, .s = &g->s, .name_hash = tr_hash_name(t->name)};
        j.kind = init_kind(t->name, &j.std, &g->s);
        tr_kernels_cpu_parallel_for((t->numel + INIT_PIECE - 1) / INIT_PIECE, init_piece, &j);
        g->k->to_device(NULL, t->param, host, t->numel * sizeof(float));
    }
    tr_free(host);
    return TR_OK;
}

double tr_gpt_flops_per_token(const tr_gpt_shape *s, double n_params_total)
{
    return 6.0 * n_params_total + 12.0 * s->num_layers * (double)s->C * s->T;
}
