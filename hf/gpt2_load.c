/* A GPT-2 folder of transformers into a trident model: every tensor found, checked, converted
 * to trident's layout and cut to this rank's shard; anything else in the files refused. */
#include "hf/hf_internal.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PREFIX "transformer."

/* ------------------------------------------------------------------ names */

/* 1 when name (without "transformer.") is a tensor of a GPT-2 of n_layer layers, or a buffer
 * transformers may save (attn.bias, attn.masked_bias: *ignored = 1), or lm_head.weight. */
static int known_name(const char *name, int n_layer, int *ignored)
{
    static const char *const layer[] = {
        "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
        "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
        "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"};
    static const char *const top[] = {"wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias",
                                      "lm_head.weight"};
    *ignored = 0;
    if (!strncmp(name, PREFIX, strlen(PREFIX)) && strcmp(name, PREFIX "lm_head.weight"))
        name += strlen(PREFIX);
    for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
        if (!strcmp(name, top[i]))
            return 1;
    int l = -1, used = 0;
    if (strncmp(name, "h.", 2) || !isdigit((unsigned char)name[2]) ||
        (name[2] == '0' && name[3] != '.')) /* digits only, no leading zero */
        return 0;
    if (sscanf(name, "h.%d.%n", &l, &used) != 1 || used == 0 || l < 0 || l >= n_layer)
        return 0;
    if (!strcmp(name + used, "attn.bias") || !strcmp(name + used, "attn.masked_bias"))
        return *ignored = 1;
    for (size_t i = 0; i < sizeof layer / sizeof layer[0]; i++)
        if (!strcmp(name + used, layer[i]))
            return 1;
    return 0;
}

/* Every tensor of the set is one a GPT-2 of this size has (or may carry). */
static int check_names(const tr_st_set *s, const char *dir, int n_layer)
{
    for (size_t i = 0; i < tr_st_set_count(s); i++) {
        tr_st_file *f;
        const tr_st_tensor *t = tr_st_set_at(s, i, &f);
        int ignored;
        if (!known_name(t->name, n_layer, &ignored))
            return tr_fail(TR_ERR_INVALID, "%s: tensor '%.200s' is not part of a GPT-2 "
                           "(GPT2LMHeadModel) of %d layers as %s/config.json describes it",
                           tr_st_path(f), t->name, n_layer, dir);
    }
    return TR_OK;
}

/* Elements of a GPT-2 of c (its tensors, the tied head once; a double: any int sizes fit). */
static double gpt2_numel(const tr_hf_gpt2_config *c)
{
    double C = c->n_embd;
    return (double)c->vocab_size * C + (double)c->n_positions * C + 2 * C +
           (double)c->n_layer * (12 * C * C + 13 * C);
}

int hf_gpt2_check_files(const char *dir, const tr_hf_gpt2_config *c)
{
    tr_st_set *s = NULL;
    int rc = tr_st_set_open(dir, &s);
    if (!rc)
        rc = check_names(s, dir, c->n_layer);
    uint64_t held = 0;
    for (size_t i = 0; !rc && i < tr_st_set_count(s); i++) {
        int ignored;
        const tr_st_tensor *t = tr_st_set_at(s, i, NULL);
        if (known_name(t->name, c->n_layer, &ignored) && !ignored)
            held += t->numel;
    }
    /* coarse: the precise errors (a tensor missing, a wrong shape) come from the loading */
    if (!rc && gpt2_numel(c) > 2.0 * (double)held + 1e6)
        rc = tr_fail(TR_ERR_INVALID, "%s/config.json describes a GPT-2 of %.0f parameters; its "
                     "weights hold %llu: config.json is not theirs", dir,
                     gpt2_numel(c), (unsigned long long)held);
    tr_st_set_close(s);
    return rc;
}

/* The set's tensor named name ("transformer.X"), saved with or without the prefix. */
static int find_tensor(const tr_st_set *s, const char *dir, const char *name, tr_st_file **f,
                       const tr_st_tensor **t)
{
    tr_st_file *f2 = NULL;
    const tr_st_tensor *with = tr_st_set_find(s, name, f);
    const tr_st_tensor *without = tr_st_set_find(s, name + strlen(PREFIX), &f2);
    if (with && without)
        return tr_fail(TR_ERR_INVALID, "%s holds both '%s' and '%s'", dir, name,
                       name + strlen(PREFIX));
    if (!with && !without)
        return tr_fail(TR_ERR_INVALID, "%s: no tensor '%s' (nor '%s'): not a complete GPT-2 "
                       "checkpoint", dir, name, name + strlen(PREFIX));
    if (without)
        *f = f2;
    *t = with ? with : without;
    return TR_OK;
}

/* dtype a float one, shape m's. */
static int check_tensor(tr_st_file *f, const tr_st_tensor *t, const tr_hf_tensor_map *m)
{
    if (t->dtype != TR_ST_F32 && t->dtype != TR_ST_F16 && t->dtype != TR_ST_BF16 &&
        t->dtype != TR_ST_F64)
        return tr_fail(TR_ERR_INVALID, "%s: tensor '%s' is %s; GPT-2 weights are F32, F16, BF16 "
                       "or F64", tr_st_path(f), t->name, tr_st_dtype_name(t->dtype));
    int same = t->ndim == m->ndim;
    for (int d = 0; same && d < m->ndim; d++)
        same = t->shape[d] == m->shape[d];
    if (!same) {
        tr_st_tensor want = {.ndim = m->ndim, .shape = {m->shape[0], m->shape[1]}};
        return tr_fail(TR_ERR_INVALID, "%s: tensor '%s' is %s; a GPT-2 of this config.json has %s",
                       tr_st_path(f), t->name, st_shape_text(t).text, st_shape_text(&want).text);
    }
    return TR_OK;
}

/* lm_head.weight, when a file holds it, must be wte (tied). */
static int check_tied_head(const tr_st_set *s, const char *dir, size_t vocab_numel, float *a,
                           float *b)
{
    tr_st_file *fh = NULL, *fw = NULL;
    const tr_st_tensor *head = tr_st_set_find(s, "lm_head.weight", &fh), *wte = NULL;
    if (!head)
        return TR_OK;
    int rc = find_tensor(s, dir, PREFIX "wte.weight", &fw, &wte);
    if (!rc && (head->ndim != wte->ndim || head->numel != vocab_numel ||
                head->shape[0] != wte->shape[0]))
        rc = tr_fail(TR_ERR_INVALID, "%s: lm_head.weight is %s, wte %s: trident ties the head to "
                     "wte", tr_st_path(fh), st_shape_text(head).text, st_shape_text(wte).text);
    if (!rc && head->dtype != TR_ST_F32 && head->dtype != TR_ST_F16 &&
        head->dtype != TR_ST_BF16 && head->dtype != TR_ST_F64)
        rc = tr_fail(TR_ERR_INVALID, "%s: lm_head.weight is %s", tr_st_path(fh),
                     tr_st_dtype_name(head->dtype));
    if (!rc)
        rc = tr_st_read_f32(fh, head, a);
    if (!rc)
        rc = tr_st_read_f32(fw, wte, b);
    if (!rc && memcmp(a, b, vocab_numel * sizeof(float)))
        rc = tr_fail(TR_ERR_INVALID, "%s: lm_head.weight differs from wte; trident ties the head "
                     "to the word embedding (an untied head cannot be converted)", tr_st_path(fh));
    return rc;
}

/* ------------------------------------------------------------------ loading */

static int same_model(const tr_hf_gpt2_config *c, const tr_gpt_shape *s, const char *dir)
{
    if (c->n_layer == s->num_layers && c->n_embd == s->C && c->n_head == s->NH &&
        c->vocab_size == s->V && c->n_positions == s->max_T)
        return TR_OK;
    return tr_fail(TR_ERR_INVALID, "%s is a GPT-2 of n_layer %d, n_embd %d, n_head %d, "
                   "vocab_size %d, n_positions %d; the model has %d, %d, %d, %d, %d", dir,
                   c->n_layer, c->n_embd, c->n_head, c->vocab_size, c->n_positions,
                   s->num_layers, s->C, s->NH, s->V, s->max_T);
}

/* One trident tensor from the set: read, checked, converted, cut. hf and full: scratch. */
static int load_tensor(const tr_st_set *s, const char *dir, const tr_param_tensor *t,
                       const tr_gpt_shape *sh, float *dst, float *hf, float *full)
{
    tr_hf_tensor_map m;
    tr_st_file *f = NULL;
    const tr_st_tensor *st = NULL;
    int rc = tr_hf_gpt2_map(t, sh->V, &m);
    if (!rc)
        rc = find_tensor(s, dir, m.name, &f, &st);
    if (!rc)
        rc = check_tensor(f, st, &m);
    if (!rc)
        rc = hf_read_weight(f, st, hf);
    if (rc)
        return rc;
    int whole = t->split_dim < 0; /* convert straight into the parameters */
    float *out = whole ? dst : full;
    size_t full_numel = (size_t)t->full_rows * (size_t)t->full_cols;
    if (st->numel < full_numel) /* the vocabulary's padding rows */
        memset(out + st->numel, 0, (full_numel - st->numel) * sizeof(float));
    if ((rc = tr_hf_to_trident(&m, t, sh->NH, hf, out)))
        return rc;
    if (!whole)
        tr_param_copy_shard(t, sh->tp_rank, full, (size_t)t->full_rows, (size_t)t->full_cols,
                            dst);
    return TR_OK;
}

int tr_hf_load_gpt2(const char *dir, tr_gpt *g, float *params)
{
    const tr_gpt_shape *sh = tr_gpt_get_shape(g);
    tr_hf_gpt2_config c;
    tr_st_set *s = NULL;
    int rc = tr_hf_read_gpt2_config(dir, &c);
    if (!rc)
        rc = same_model(&c, sh, dir);
    if (!rc)
        rc = tr_st_set_open(dir, &s);
    if (!rc)
        rc = check_names(s, dir, c.n_layer);
    size_t most = 0; /* the largest full tensor */
    for (int i = 0; !rc && i < tr_gpt_num_tensors(g); i++) {
        const tr_param_tensor *t = tr_gpt_tensor(g, i);
        size_t n = (size_t)t->full_rows * (size_t)t->full_cols;
        most = n > most ? n : most;
    }
    float *hf = rc ? NULL : malloc(most * sizeof(float) + 1);
    float *full = rc || sh->tp_size == 1 ? NULL : malloc(most * sizeof(float) + 1);
    if (!rc && (!hf || (sh->tp_size > 1 && !full)))
        rc = tr_fail(TR_ERR_NOMEM, "out of memory for a tensor of %zu floats", most);
    for (int i = 0; !rc && i < tr_gpt_num_tensors(g); i++) {
        const tr_param_tensor *t = tr_gpt_tensor(g, i);
        if ((rc = load_tensor(s, dir, t, sh, params + t->offset, hf, full)))
            break;
    }
    if (!rc) {
        float *b = full ? full : malloc((size_t)sh->V * (size_t)sh->C * sizeof(float) + 1);
        rc = b ? check_tied_head(s, dir, (size_t)sh->V * (size_t)sh->C, hf, b)
               : tr_fail(TR_ERR_NOMEM, "out of memory checking lm_head.weight");
        if (b != full)
            free(b);
    }
    free(hf);
    free(full);
    tr_st_set_close(s);
    return rc;
}
