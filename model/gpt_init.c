/* GPT parameters' values: the layout-free initialisation (each element a function of the
 * seed, the tensor's name and its index in the whole tensor) and a TP shard cut from a whole
 * tensor. */
#include "model/gpt_internal.h"

#include <math.h>
#include <string.h>

#include "core/core.h"

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
