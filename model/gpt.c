/* GPT stage: parameter layout, layout-free initialisation, binding, activation storage. */
#include "model/gpt_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"

int tr_gpt_shape_from_config(const tr_config *cfg, int layer_first, int layer_count,
                             tr_gpt_shape *out)
{
    const tr_model_config *m = &cfg->model;
    memset(out, 0, sizeof *out);
    if (layer_first < 0 || layer_count < 1 || layer_first + layer_count > m->num_layers)
        return tr_fail(TR_ERR_CONFIG, "stage layers [%d, %d) are not inside the model's %d layers",
                       layer_first, layer_first + layer_count, m->num_layers);
    out->num_layers = m->num_layers;
    out->C = m->hidden_size;
    out->NH = m->num_attention_heads;
    out->T = m->seq_length;
    out->max_T = m->max_position_embeddings;
    out->V = m->vocab_size;
    int div = m->make_vocab_size_divisible_by * cfg->parallel.tensor_model_parallel_size;
    out->Vp = (m->vocab_size + div - 1) / div * div;
    out->eps = (float)m->layernorm_epsilon;
    out->init_std = (float)m->init_method_std;
    out->seed = cfg->training.seed;
    out->layer_first = layer_first;
    out->layer_count = layer_count;
    out->is_first = layer_first == 0;
    out->is_last = layer_first + layer_count == m->num_layers;
    return TR_OK;
}

static void add_tensor(tr_gpt *g, const char *name, int rows, int cols, int decay)
{
    tr_param_tensor *t = &g->tensors[g->n_tensors++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->rows = rows;
    t->cols = cols;
    t->numel = (size_t)rows * (size_t)cols;
    t->forward_offset = g->n_params;
    t->weight_decay = decay;
    g->n_params += t->numel;
}

int tr_gpt_create(const tr_gpt_shape *shape, const tr_kernels *k, tr_gpt **out)
{
    const tr_gpt_shape *s = shape;
    if (s->C < 1 || s->NH < 1 || s->C % s->NH || s->T < 1 || s->max_T < s->T || s->V < 1 ||
        s->Vp < s->V || s->layer_count < 1)
        return tr_fail(TR_ERR_INVALID, "invalid GPT shape (C=%d NH=%d T=%d max_T=%d V=%d Vp=%d)",
                       s->C, s->NH, s->T, s->max_T, s->V, s->Vp);
    tr_gpt *g = tr_alloc(sizeof *g, "model");
    if (!g)
        return TR_ERR_NOMEM;
    g->s = *s;
    g->k = k;
    int max_tensors = 5 + s->layer_count * L_COUNT;
    g->tensors = tr_alloc(sizeof *g->tensors * (size_t)max_tensors, "model tensor table");
    if (!g->tensors) {
        tr_free(g);
        return TR_ERR_NOMEM;
    }
    g->wte = g->wpe = g->lnf_w = g->lnf_b = g->head_wte = -1;
    int C = s->C;
    if (s->is_first) {
        g->wte = g->n_tensors;
        add_tensor(g, "wte", s->Vp, C, 1);
        g->wpe = g->n_tensors;
        add_tensor(g, "wpe", s->max_T, C, 1);
    }
    g->layer0 = g->n_tensors;
    static const char *names[L_COUNT] = {
        "ln1.weight",   "ln1.bias",     "qkv.weight", "qkv.bias", "attn_proj.weight",
        "attn_proj.bias", "ln2.weight", "ln2.bias",   "fc.weight", "fc.bias",
        "fc_proj.weight", "fc_proj.bias"};
    for (int i = 0; i < s->layer_count; i++) {
        int rows[L_COUNT] = {C, C, 3 * C, 3 * C, C, C, C, C, 4 * C, 4 * C, C, C};
        int cols[L_COUNT] = {1, 1, C, 1, C, 1, 1, 1, C, 1, 4 * C, 1};
        for (int j = 0; j < L_COUNT; j++) {
            char name[48];
            snprintf(name, sizeof name, "layers.%d.%s", s->layer_first + i, names[j]);
            add_tensor(g, name, rows[j], cols[j], cols[j] > 1);
        }
    }
    if (s->is_last) {
        g->lnf_w = g->n_tensors;
        add_tensor(g, "lnf.weight", C, 1, 0);
        g->lnf_b = g->n_tensors;
        add_tensor(g, "lnf.bias", C, 1, 0);
        if (s->is_first) {
            g->head_wte = g->wte;
        } else {
            /* the tied head's own copy: same name, so identical initial values */
            g->head_wte = g->n_tensors;
            add_tensor(g, "wte", s->Vp, C, 1);
        }
    }
    for (int i = 0; i < g->n_tensors; i++) {
        tr_param_tensor *t = &g->tensors[i];
        t->offset = g->n_params - t->forward_offset - t->numel;
    }
    *out = g;
    return TR_OK;
}

void tr_gpt_free(tr_gpt *g)
{
    if (!g)
        return;
    g->k->free(g->scratch.memory);
    tr_free(g->losses_host);
    tr_free(g->tensors);
    tr_free(g);
}

const tr_gpt_shape *tr_gpt_get_shape(const tr_gpt *g) { return &g->s; }
int tr_gpt_num_tensors(const tr_gpt *g) { return g->n_tensors; }
tr_param_tensor *tr_gpt_tensor(tr_gpt *g, int i) { return &g->tensors[i]; }
size_t tr_gpt_num_params(const tr_gpt *g) { return g->n_params; }

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

int tr_gpt_init_params(tr_gpt *g)
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
        float std = 0;
        int kind = init_kind(t->name, &std, &g->s);
        uint64_t h = tr_hash_name(t->name);
        for (size_t e = 0; e < t->numel; e++)
            host[e] = kind == 0 ? 0.0f
                      : kind == 1 ? 1.0f
                                  : std * tr_init_normal(g->s.seed, h, (uint64_t)e);
        g->k->to_device(NULL, t->param, host, t->numel * sizeof(float));
    }
    tr_free(host);
    return TR_OK;
}

/* Carve `count` floats from a bump pointer. */
static float *take(float **cursor, size_t count)
{
    float *p = *cursor;
    *cursor += (count + 15) & ~(size_t)15; /* keep 64-byte alignment */
    return p;
}

int tr_gpt_scratch_ensure(tr_gpt *g, int B)
{
    tr_gpt_scratch *sc = &g->scratch;
    if (sc->memory && sc->B >= B)
        return TR_OK;
    g->k->free(sc->memory);
    tr_free(g->losses_host);
    memset(sc, 0, sizeof *sc);
    const tr_gpt_shape *s = &g->s;
    size_t BT = (size_t)B * s->T, C = s->C, Vp = (size_t)s->Vp;
    size_t att = (size_t)B * s->NH * s->T * s->T;
    size_t total = 0;
    size_t sizes[] = {BT, BT * C, BT, BT, BT * Vp, BT * Vp, BT, BT, BT, BT,
                      BT * C, BT * C, BT * 3 * C, BT * C, att, BT * 4 * C, BT * 4 * C};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        total += (sizes[i] + 15) & ~(size_t)15;
    sc->memory = g->k->alloc(total * sizeof(float));
    g->losses_host = tr_alloc(BT * sizeof(float), "loss staging");
    if (!sc->memory || !g->losses_host)
        return tr_fail(TR_ERR_NOMEM, "out of memory for model scratch (%zu MiB)",
                       total * sizeof(float) >> 20);
    float *c = sc->memory;
    sc->targets = (int32_t *)take(&c, BT);
    sc->lnf = take(&c, BT * C);
    sc->lnf_mean = take(&c, BT);
    sc->lnf_rstd = take(&c, BT);
    sc->logits = take(&c, BT * Vp);
    sc->dlogits = take(&c, BT * Vp);
    sc->maxv = take(&c, BT);
    sc->sumexp = take(&c, BT);
    sc->picked = take(&c, BT);
    sc->losses = take(&c, BT);
    sc->dres = take(&c, BT * C);
    sc->dln = take(&c, BT * C);
    sc->dqkv = take(&c, BT * 3 * C);
    sc->datty = take(&c, BT * C);
    sc->datt = take(&c, att);
    sc->dfch = take(&c, BT * 4 * C);
    sc->dfch_gelu = take(&c, BT * 4 * C);
    sc->B = B;
    return TR_OK;
}

int tr_gpt_acts_create(tr_gpt *g, int B, tr_gpt_acts **out)
{
    const tr_gpt_shape *s = &g->s;
    if (B < 1)
        return tr_fail(TR_ERR_INVALID, "micro-batch size must be >= 1, got %d", B);
    int rc = tr_gpt_scratch_ensure(g, B);
    if (rc)
        return rc;
    tr_gpt_acts *a = tr_alloc(sizeof *a, "activations");
    if (!a)
        return TR_ERR_NOMEM;
    a->g = g;
    a->B = B;
    a->layers = tr_alloc(sizeof *a->layers * (size_t)s->layer_count, "layer activations");
    if (!a->layers) {
        tr_free(a);
        return TR_ERR_NOMEM;
    }
    size_t BT = (size_t)B * s->T, C = s->C, att = (size_t)B * s->NH * s->T * s->T;
    size_t per_layer = 0;
    size_t sizes[] = {BT * C, BT, BT, BT * 3 * C, BT * C, att, BT * C,
                      BT * C, BT, BT, BT * 4 * C, BT * 4 * C, BT * C};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        per_layer += (sizes[i] + 15) & ~(size_t)15;
    size_t total = 4 * ((BT * C + 15) & ~(size_t)15) + per_layer * (size_t)s->layer_count;
    a->memory = g->k->alloc(total * sizeof(float));
    if (!a->memory) {
        tr_free(a->layers);
        tr_free(a);
        return tr_fail(TR_ERR_NOMEM, "out of memory for activations (%zu MiB)",
                       total * sizeof(float) >> 20);
    }
    float *c = a->memory;
    a->tokens = (int32_t *)take(&c, BT);
    a->stage_in = take(&c, BT * C);
    a->dhead = take(&c, BT * C);
    a->dinput = take(&c, BT * C);
    for (int l = 0; l < s->layer_count; l++) {
        tr_layer_acts *L = &a->layers[l];
        L->ln1 = take(&c, BT * C);
        L->ln1_mean = take(&c, BT);
        L->ln1_rstd = take(&c, BT);
        L->qkv = take(&c, BT * 3 * C);
        L->atty = take(&c, BT * C);
        L->att = take(&c, att);
        L->residual2 = take(&c, BT * C);
        L->ln2 = take(&c, BT * C);
        L->ln2_mean = take(&c, BT);
        L->ln2_rstd = take(&c, BT);
        L->fch = take(&c, BT * 4 * C);
        L->fch_gelu = take(&c, BT * 4 * C);
        L->residual3 = take(&c, BT * C);
    }
    *out = a;
    return TR_OK;
}

void tr_gpt_acts_free(tr_gpt_acts *a)
{
    if (!a)
        return;
    a->g->k->free(a->memory);
    tr_free(a->layers);
    tr_free(a);
}

const float *tr_gpt_acts_output(const tr_gpt_acts *a)
{
    return a->layers[a->g->s.layer_count - 1].residual3;
}

const float *tr_gpt_acts_input_grad(const tr_gpt_acts *a) { return a->dinput; }

double tr_gpt_flops_per_token(const tr_gpt_shape *s, double n_params_total)
{
    return 6.0 * n_params_total + 12.0 * s->num_layers * (double)s->C * s->T;
}
