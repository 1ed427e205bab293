/* Llama (LlamaForCausalLM) and Bloom (BloomForCausalLM) folders of transformers into a
 * trident model (issue 17): config.json to the model section, and every tensor to trident's
 * layout (hf.h states the mappings). */
#include "hf/hf_internal.h"

#include <ctype.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ config.json */

static int get_int(json_t *root, const char *path, const char *key, int dflt, int *out)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) {
        if (dflt < 0)
            return tr_fail(TR_ERR_INVALID, "%s: %s is missing", path, key);
        *out = dflt;
        return TR_OK;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > (1 << 26))
        return tr_fail(TR_ERR_INVALID, "%s: %s must be an integer in [1, 67108864]", path, key);
    *out = (int)json_integer_value(v);
    return TR_OK;
}

static int get_num(json_t *root, const char *path, const char *key, double dflt, double *out)
{
    json_t *v = json_object_get(root, key);
    *out = dflt;
    if (!v)
        return TR_OK;
    /* trident keeps it as a float32: a value float32 makes infinite or 0 is refused too */
    double x = json_is_number(v) ? json_number_value(v) : -1.0;
    if (!isfinite(x) || !(x > 0) || x > FLT_MAX || !((float)x > 0.0f))
        return tr_fail(TR_ERR_INVALID, "%s: %s must be a positive number that float32 holds "
                       "(%g to %g)", path, key, (double)FLT_TRUE_MIN, (double)FLT_MAX);
    *out = x;
    return TR_OK;
}

/* key absent, or equal to want (a JSON value: string, bool, null or integer) */
static int check_value(json_t *root, const char *path, const char *key, json_t *want,
                       const char *why)
{
    json_t *v = json_object_get(root, key);
    int ok = !v || json_equal(v, want);
    json_decref(want);
    return ok ? TR_OK : tr_fail(TR_ERR_INVALID, "%s: %s is not supported: %s", path, key, why);
}

static int read_llama(json_t *root, const char *path, tr_model_config *m)
{
    int rc = get_int(root, path, "num_hidden_layers", -1, &m->num_layers);
    if (!rc)
        rc = get_int(root, path, "hidden_size", -1, &m->hidden_size);
    if (!rc)
        rc = get_int(root, path, "num_attention_heads", -1, &m->num_attention_heads);
    if (!rc)
        rc = get_int(root, path, "num_key_value_heads", m->num_attention_heads,
                     &m->num_query_groups);
    if (!rc)
        rc = get_int(root, path, "intermediate_size", -1, &m->ffn_hidden_size);
    if (!rc)
        rc = get_int(root, path, "vocab_size", -1, &m->vocab_size);
    if (!rc)
        rc = get_int(root, path, "max_position_embeddings", 2048, &m->max_position_embeddings);
    if (!rc)
        rc = get_num(root, path, "rms_norm_eps", 1e-6, &m->layernorm_epsilon);
    if (!rc)
        rc = get_num(root, path, "rope_theta", 10000.0, &m->rotary_base);
    if (!rc)
        rc = check_value(root, path, "hidden_act", json_string("silu"), "trident's SwiGLU uses silu");
    if (!rc)
        rc = check_value(root, path, "rope_scaling", json_null(), "no rope scaling in trident");
    if (!rc)
        rc = check_value(root, path, "attention_bias", json_false(), "trident's Llama has no "
                         "attention biases");
    if (!rc)
        rc = check_value(root, path, "pretraining_tp", json_integer(1), "must be 1");
    /* Mistral's sliding window: full causal attention is the same only when the window spans
     * every position (none in Mistral-7B v0.2 and later; v0.1's 4096 of 32768 does not) */
    json_t *window = json_object_get(root, "sliding_window");
    if (!rc && window && !json_is_null(window) &&
        !(json_is_integer(window) && json_integer_value(window) >= m->max_position_embeddings))
        rc = tr_fail(TR_ERR_INVALID, "%s: sliding_window is not supported: trident's attention "
                     "is full causal, the same as a window only of max_position_embeddings (%d) "
                     "or more (null: none, as in Mistral-7B v0.2 and later)", path,
                     m->max_position_embeddings);
    json_t *tie = json_object_get(root, "tie_word_embeddings");
    m->normalization = "RMSNorm";
    m->position_embedding_type = "rope";
    m->rotary_percent = 1.0;
    m->swiglu = 1;
    m->untie_embeddings_and_output_weights = !(tie && json_is_true(tie));
    m->add_bias_linear = 0;
    m->embedding_layernorm = 0;
    return rc;
}

static int read_bloom(json_t *root, const char *path, tr_model_config *m)
{
    int rc = get_int(root, path, "n_layer", -1, &m->num_layers);
    const char *hkey = json_object_get(root, "hidden_size") ? "hidden_size" : "n_embed";
    if (!rc)
        rc = get_int(root, path, hkey, -1, &m->hidden_size);
    if (!rc)
        rc = get_int(root, path, "n_head", -1, &m->num_attention_heads);
    if (!rc)
        rc = get_int(root, path, "vocab_size", -1, &m->vocab_size);
    if (!rc)
        rc = get_int(root, path, "seq_length", 2048, &m->max_position_embeddings);
    if (!rc)
        rc = get_num(root, path, "layer_norm_epsilon", 1e-5, &m->layernorm_epsilon);
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

int tr_hf_read_family_config(const char *dir, tr_model_config *m, int *family)
{
    char path[4200];
    json_t *root = NULL;
    int rc = hf_join(path, sizeof path, dir, "config.json");
    if (!rc)
        rc = hf_load_json(path, 1 << 20, &root);
    if (rc)
        return rc;
    const char *type = json_string_value(json_object_get(root, "model_type"));
    *family = !type                   ? TR_HF_GPT2
              : !strcmp(type, "llama") || !strcmp(type, "mistral") ? TR_HF_LLAMA
              : !strcmp(type, "bloom") ? TR_HF_BLOOM
                                       : TR_HF_GPT2;
    memset(m, 0, sizeof *m);
    m->make_vocab_size_divisible_by = 128;
    m->init_method_std = 0.02;
    if (*family == TR_HF_LLAMA)
        rc = read_llama(root, path, m);
    else if (*family == TR_HF_BLOOM)
        rc = read_bloom(root, path, m);
    if (!rc && *family != TR_HF_GPT2) {
        m->seq_length = m->max_position_embeddings;
        if (m->hidden_size % m->num_attention_heads ||
            m->num_attention_heads % m->num_query_groups)
            rc = tr_fail(TR_ERR_INVALID, "%s: %d heads (%d key/value heads) do not divide the "
                         "hidden size %d", path, m->num_attention_heads, m->num_query_groups,
                         m->hidden_size);
    }
    json_decref(root);
    return rc;
}

/* Elements of the Llama / Bloom model of m (a double: any int sizes fit). */
static double family_numel(const tr_model_config *m, int family)
{
    double C = m->hidden_size, V = m->vocab_size, L = m->num_layers;
    if (family == TR_HF_BLOOM) /* embedding, its norm and ln_f; per layer qkv, dense, 4h MLP */
        return V * C + 4 * C + L * (12 * C * C + 13 * C);
    double HS = C / m->num_attention_heads, KV = 2.0 * m->num_query_groups * HS * C;
    double F = m->ffn_hidden_size;
    return V * C * (m->untie_embeddings_and_output_weights ? 2 : 1) + C +
           L * (2 * C + 2 * C * C + KV + 3 * F * C);
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
                     "(%.0f bytes at least, at 2 bytes each); its safetensors weights hold %.0f "
                     "bytes: config.json is not theirs", dir,
                     family == TR_HF_LLAMA ? "Llama" : "Bloom", n, 2.0 * n, bytes);
    tr_st_set_close(set);
    return rc;
}

/* ------------------------------------------------------------------ names and layouts */

enum { FAM_SAME, FAM_QKV, FAM_SWIGLU };

typedef struct {
    int kind, n;          /* layout; number of HF tensors */
    char name[3][112];    /* q, k, v / gate, up / the one */
    uint64_t rows[3];     /* each HF tensor's rows (its cols: the trident tensor's) */
} fam_map;

static int map_llama(const tr_param_tensor *t, const tr_gpt_shape *s, fam_map *m)
{
    int l = -1, used = 0;
    const char *rest = NULL;
    if (sscanf(t->name, "layers.%d.%n", &l, &used) == 1 && used > 0)
        rest = t->name + used;
    int HS = s->C / s->NH, NG = s->query_groups ? s->query_groups : s->NH;
    int F = s->ffn ? s->ffn : 4 * s->C;
    m->kind = FAM_SAME, m->n = 1;
    m->rows[0] = (uint64_t)t->full_rows;
    if (!strcmp(t->name, "wte"))
        snprintf(m->name[0], sizeof m->name[0], "model.embed_tokens.weight");
    else if (!strcmp(t->name, "output_layer"))
        snprintf(m->name[0], sizeof m->name[0], "lm_head.weight");
    else if (!strcmp(t->name, "lnf.weight"))
        snprintf(m->name[0], sizeof m->name[0], "model.norm.weight");
    else if (rest && !strcmp(rest, "ln1.weight"))
        snprintf(m->name[0], sizeof m->name[0], "model.layers.%d.input_layernorm.weight", l);
    else if (rest && !strcmp(rest, "ln2.weight"))
        snprintf(m->name[0], sizeof m->name[0], "model.layers.%d.post_attention_layernorm.weight", l);
    else if (rest && !strcmp(rest, "attn_proj.weight"))
        snprintf(m->name[0], sizeof m->name[0], "model.layers.%d.self_attn.o_proj.weight", l);
    else if (rest && !strcmp(rest, "fc_proj.weight"))
        snprintf(m->name[0], sizeof m->name[0], "model.layers.%d.mlp.down_proj.weight", l);
    else if (rest && !strcmp(rest, "qkv.weight")) {
        m->kind = FAM_QKV, m->n = 3;
        const char *p[3] = {"q", "k", "v"};
        for (int i = 0; i < 3; i++)
            snprintf(m->name[i], sizeof m->name[i], "model.layers.%d.self_attn.%s_proj.weight", l,
                     p[i]);
        m->rows[0] = (uint64_t)s->NH * HS, m->rows[1] = m->rows[2] = (uint64_t)NG * HS;
    } else if (rest && !strcmp(rest, "fc.weight")) {
        m->kind = FAM_SWIGLU, m->n = 2;
        snprintf(m->name[0], sizeof m->name[0], "model.layers.%d.mlp.gate_proj.weight", l);
        snprintf(m->name[1], sizeof m->name[1], "model.layers.%d.mlp.up_proj.weight", l);
        m->rows[0] = m->rows[1] = (uint64_t)F;
    } else
        return tr_fail(TR_ERR_INTERNAL, "no Llama name for trident tensor '%s'", t->name);
    return TR_OK;
}

static int map_bloom(const tr_param_tensor *t, fam_map *m)
{
    static const struct { const char *trident, *hf; } layer[] = {
        {"ln1.weight", "input_layernorm.weight"},
        {"ln1.bias", "input_layernorm.bias"},
        {"qkv.weight", "self_attention.query_key_value.weight"},
        {"qkv.bias", "self_attention.query_key_value.bias"},
        {"attn_proj.weight", "self_attention.dense.weight"},
        {"attn_proj.bias", "self_attention.dense.bias"},
        {"ln2.weight", "post_attention_layernorm.weight"},
        {"ln2.bias", "post_attention_layernorm.bias"},
        {"fc.weight", "mlp.dense_h_to_4h.weight"},
        {"fc.bias", "mlp.dense_h_to_4h.bias"},
        {"fc_proj.weight", "mlp.dense_4h_to_h.weight"},
        {"fc_proj.bias", "mlp.dense_4h_to_h.bias"}};
    static const struct { const char *trident, *hf; } top[] = {
        {"wte", "word_embeddings.weight"},
        {"emb_ln.weight", "word_embeddings_layernorm.weight"},
        {"emb_ln.bias", "word_embeddings_layernorm.bias"},
        {"lnf.weight", "ln_f.weight"},
        {"lnf.bias", "ln_f.bias"}};
    int l = -1, used = 0;
    m->kind = FAM_SAME, m->n = 1;
    m->rows[0] = (uint64_t)t->full_rows;
    m->name[0][0] = '\0';
    /* qkv rows are (head, {q, k, v}, d) in both: query_key_value is trident's layout */
    if (sscanf(t->name, "layers.%d.%n", &l, &used) == 1 && used > 0) {
        for (size_t i = 0; i < sizeof layer / sizeof layer[0]; i++)
            if (!strcmp(t->name + used, layer[i].trident))
                snprintf(m->name[0], sizeof m->name[0], "transformer.h.%d.%s", l, layer[i].hf);
    } else
        for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
            if (!strcmp(t->name, top[i].trident))
                snprintf(m->name[0], sizeof m->name[0], "transformer.%s", top[i].hf);
    if (!m->name[0][0])
        return tr_fail(TR_ERR_INTERNAL, "no Bloom name for trident tensor '%s'", t->name);
    return TR_OK;
}

/* The set's tensor `name`, a float one of rows x cols (cols 1: a vector). */
static int find_checked(const tr_st_set *set, const char *dir, const char *name, uint64_t rows,
                        uint64_t cols, tr_st_file **f, const tr_st_tensor **t)
{
    *t = tr_st_set_find(set, name, f);
    if (!*t)
        return tr_fail(TR_ERR_INVALID, "%s: no tensor '%s': not a complete checkpoint of the "
                       "model config.json describes", dir, name);
    tr_st_tensor want = {.ndim = cols > 1 ? 2 : 1, .shape = {rows, cols}};
    int same = (*t)->ndim == want.ndim && (*t)->shape[0] == rows &&
               (want.ndim == 1 || (*t)->shape[1] == cols);
    if ((*t)->dtype != TR_ST_F32 && (*t)->dtype != TR_ST_F16 && (*t)->dtype != TR_ST_BF16 &&
        (*t)->dtype != TR_ST_F64)
        return tr_fail(TR_ERR_INVALID, "%s: tensor '%s' is %s; weights are F32, F16, BF16 or "
                       "F64", tr_st_path(*f), name, tr_st_dtype_name((*t)->dtype));
    if (!same)
        return tr_fail(TR_ERR_INVALID, "%s: tensor '%s' is %s; the model of config.json has %s",
                       tr_st_path(*f), name, st_shape_text(*t).text, st_shape_text(&want).text);
    return TR_OK;
}

/* Every tensor of the set is one the model uses (rotary buffers aside; a tied model's
 * lm_head.weight is checked against the embedding by check_tied_head). */
static int check_all_used(const tr_st_set *set, const char *dir, tr_gpt *g, int family)
{
    const tr_gpt_shape *s = tr_gpt_get_shape(g);
    for (size_t i = 0; i < tr_st_set_count(set); i++) {
        tr_st_file *f;
        const tr_st_tensor *st = tr_st_set_at(set, i, &f);
        const char *n = st->name;
        size_t len = strlen(n);
        if ((!s->untie && !strcmp(n, "lm_head.weight")) ||
            (len > 9 && !strcmp(n + len - 9, ".inv_freq")))
            continue;
        int found = 0;
        for (int j = 0; j < tr_gpt_num_tensors(g) && !found; j++) {
            fam_map m;
            const tr_param_tensor *t = tr_gpt_tensor(g, j);
            if (family == TR_HF_LLAMA ? map_llama(t, s, &m) : map_bloom(t, &m))
                return tr_fail(TR_ERR_INTERNAL, "%s", tr_errmsg());
            for (int k = 0; k < m.n; k++)
                found |= !strcmp(m.name[k], n);
        }
        if (!found)
            return tr_fail(TR_ERR_INVALID, "%s: tensor '%.200s' is not part of the %s model "
                           "%s/config.json describes", tr_st_path(f), n,
                           family == TR_HF_LLAMA ? "Llama" : "Bloom", dir);
    }
    return TR_OK;
}

/* One trident tensor (whole, TP 1) from its HF pieces; vocabulary padding rows 0. */
static int load_tensor(const tr_st_set *set, const char *dir, const tr_param_tensor *t,
                       const tr_gpt_shape *s, int family, float *dst, float *piece)
{
    fam_map m;
    int rc = family == TR_HF_LLAMA ? map_llama(t, s, &m) : map_bloom(t, &m);
    uint64_t cols = (uint64_t)t->full_cols;
    if (m.kind == FAM_SAME && t->vocab_rows)
        m.rows[0] = (uint64_t)s->V;
    size_t full = (size_t)t->full_rows * (size_t)t->full_cols;
    memset(dst, 0, full * sizeof(float));
    int HS = s->C / s->NH, NG = s->query_groups ? s->query_groups : s->NH, R = s->NH / NG;
    for (int k = 0; !rc && k < m.n; k++) {
        tr_st_file *f;
        const tr_st_tensor *st;
        rc = find_checked(set, dir, m.name[k], m.rows[k], cols, &f, &st);
        if (!rc)
            rc = hf_read_weight(f, st, m.kind == FAM_SAME ? dst : piece);
        if (rc || m.kind == FAM_SAME)
            continue;
        for (uint64_t r = 0; r < m.rows[k]; r++) {
            uint64_t to;
            if (m.kind == FAM_SWIGLU) /* rows (feature, {gate, up}) */
                to = 2 * r + (uint64_t)k;
            else { /* rows (group, {q_0 .. q_R-1, k, v}, d) */
                uint64_t unit = r / (uint64_t)HS, d = r % (uint64_t)HS;
                uint64_t g = k == 0 ? unit / (uint64_t)R : unit;
                uint64_t u = k == 0 ? unit % (uint64_t)R : (uint64_t)(R + k - 1);
                to = (g * (uint64_t)(R + 2) + u) * (uint64_t)HS + d;
            }
            memcpy(dst + to * cols, piece + r * cols, cols * sizeof(float));
        }
    }
    return rc;
}

/* A tied model (Bloom; Llama with tie_word_embeddings): lm_head.weight, when a file holds it,
 * must be the embedding (wte, loaded) in shape and in value as float32, as GPT-2's is
 * (gpt2_load.c); a different head cannot be represented. piece: V x C floats of scratch. */
static int check_tied_head(const tr_st_set *set, tr_gpt *g, int family, const float *params,
                           float *piece)
{
    const tr_gpt_shape *s = tr_gpt_get_shape(g);
    tr_st_file *f = NULL;
    const tr_st_tensor *head = tr_st_set_find(set, "lm_head.weight", &f);
    if (s->untie || !head)
        return TR_OK;
    const tr_param_tensor *wte = NULL;
    for (int i = 0; i < tr_gpt_num_tensors(g) && !wte; i++)
        if (!strcmp(tr_gpt_tensor(g, i)->name, "wte"))
            wte = tr_gpt_tensor(g, i);
    fam_map m;
    int rc = !wte ? tr_fail(TR_ERR_INTERNAL, "the model has no wte")
             : family == TR_HF_LLAMA ? map_llama(wte, s, &m) : map_bloom(wte, &m);
    if (rc)
        return rc;
    const char *emb = m.name[0];
    tr_st_tensor want = {.ndim = 2, .shape = {(uint64_t)s->V, (uint64_t)s->C}};
    if (head->ndim != 2 || head->shape[0] != want.shape[0] || head->shape[1] != want.shape[1])
        return tr_fail(TR_ERR_INVALID, "%s: lm_head.weight is %s, %s %s: the model of "
                       "config.json ties the head to the word embedding", tr_st_path(f),
                       st_shape_text(head).text, emb, st_shape_text(&want).text);
    if ((rc = tr_st_read_f32(f, head, piece))) /* (a dtype not a float's refused there) */
        return rc;
    if (memcmp(piece, params + wte->offset, (size_t)s->V * (size_t)s->C * sizeof(float)))
        return tr_fail(TR_ERR_INVALID, "%s: lm_head.weight differs from %s; the model of "
                       "config.json ties the head to the word embedding (an untied head cannot "
                       "be converted)", tr_st_path(f), emb);
    return TR_OK;
}

int tr_hf_load_family(const char *dir, int family, tr_gpt *g, float *params)
{
    const tr_gpt_shape *s = tr_gpt_get_shape(g);
    if (s->tp_size != 1 || !s->is_first || !s->is_last)
        return tr_fail(TR_ERR_INVALID, "Llama / Bloom folders load into a whole model (one "
                       "stage, no tensor parallelism)");
    tr_st_set *set = NULL;
    int rc = tr_st_set_open(dir, &set);
    if (!rc)
        rc = check_all_used(set, dir, g, family);
    size_t most = 0;
    for (int i = 0; i < tr_gpt_num_tensors(g); i++) {
        size_t n = tr_gpt_tensor(g, i)->numel;
        most = n > most ? n : most;
    }
    float *piece = rc ? NULL : malloc(most * sizeof(float) + 1);
    if (!rc && !piece)
        rc = tr_fail(TR_ERR_NOMEM, "out of memory for a tensor of %zu floats", most);
    for (int i = 0; !rc && i < tr_gpt_num_tensors(g); i++) {
        const tr_param_tensor *t = tr_gpt_tensor(g, i);
        rc = load_tensor(set, dir, t, s, family, params + t->offset, piece);
    }
    if (!rc)
        rc = check_tied_head(set, g, family, params, piece);
    free(piece);
    tr_st_set_close(set);
    return rc;
}

/* ------------------------------------------------------------------ export */

int tr_hf_family_of(const tr_model_config *m)
{
    tr_gpt_shape s = {.C = m->hidden_size, .NH = m->num_attention_heads};
    tr_gpt_shape_family(m, &s);
    if (tr_gpt_is_gpt2(&s))
        return TR_HF_GPT2;
    int HS = m->num_attention_heads > 0 ? m->hidden_size / m->num_attention_heads : 0;
    if (s.rmsnorm && s.position == TR_POS_ROPE && s.rotary_dims == HS && s.swiglu &&
        s.no_linear_bias && !s.embedding_ln)
        return TR_HF_LLAMA;
    if (!s.rmsnorm && s.position == TR_POS_ALIBI && s.embedding_ln && !s.swiglu &&
        !s.no_linear_bias && !s.untie && !s.ffn && !s.query_groups)
        return TR_HF_BLOOM;
    return -1;
}

static int write_family_config(const char *dir, int family, const tr_model_config *m,
                               const tr_hf_export_options *o)
{
    json_t *root;
    const char *dtype = o->bf16 ? "bfloat16" : "float32";
    if (family == TR_HF_LLAMA)
        root = json_pack("{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:i, s:b, s:s,"
                         " s:b, s:n, s:f, s:i, s:b, s:s, s:f}",
                         "architectures", "LlamaForCausalLM", "model_type", "llama",
                         "hidden_size", m->hidden_size, "intermediate_size", tr_model_ffn_hidden(m),
                         "num_hidden_layers", m->num_layers, "num_attention_heads",
                         m->num_attention_heads, "num_key_value_heads", m->num_query_groups,
                         "max_position_embeddings", m->max_position_embeddings, "rms_norm_eps",
                         m->layernorm_epsilon, "rope_theta", m->rotary_base, "vocab_size",
                         m->vocab_size, "tie_word_embeddings",
                         !m->untie_embeddings_and_output_weights, "hidden_act", "silu",
                         "attention_bias", 0, "rope_scaling", "initializer_range", 0.02,
                         "pretraining_tp", 1, "use_cache", 1, "torch_dtype", dtype,
                         "attention_dropout", 0.0);
    else
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
    json_t *tok = o->eos_token_id >= 0 ? json_integer(o->eos_token_id) : json_null();
    if (root && (json_object_set(root, "bos_token_id", tok) ||
                 json_object_set(root, "eos_token_id", tok)))
        root = (json_decref(root), NULL);
    json_decref(tok);
    char *text = root ? json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(12))
                      : NULL;
    json_decref(root);
    if (!text)
        return tr_fail(TR_ERR_NOMEM, "out of memory writing config.json");
    size_t n = strlen(text);
    char *t = realloc(text, n + 2);
    if (t)
        text = t, text[n] = '\n', text[n + 1] = '\0';
    int rc = hf_write_text(dir, "config.json", text);
    free(text);
    return rc;
}

int tr_hf_write_family(const char *dir, int family, tr_gpt *g, const float *params,
                       const tr_model_config *m, const tr_hf_export_options *o)
{
    const tr_gpt_shape *s = tr_gpt_get_shape(g);
    int n = tr_gpt_num_tensors(g), total = 0, rc = TR_OK;
    fam_map *maps = calloc((size_t)n + 1, sizeof *maps);
    tr_st_tensor *list = calloc(3 * (size_t)n + 1, sizeof *list);
    size_t most = 0;
    if (!maps || !list)
        rc = tr_fail(TR_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n && !rc; i++) {
        const tr_param_tensor *t = tr_gpt_tensor(g, i);
        if ((rc = family == TR_HF_LLAMA ? map_llama(t, s, &maps[i]) : map_bloom(t, &maps[i])))
            break;
        if (maps[i].kind == FAM_SAME && t->vocab_rows)
            maps[i].rows[0] = (uint64_t)s->V;
        for (int k = 0; k < maps[i].n; k++) {
            uint64_t cols = (uint64_t)t->full_cols;
            list[total++] = (tr_st_tensor){.name = maps[i].name[k],
                                           .dtype = o->bf16 ? TR_ST_BF16 : TR_ST_F32,
                                           .ndim = cols > 1 ? 2 : 1,
                                           .shape = {maps[i].rows[k], cols}};
        }
        most = t->numel > most ? t->numel : most;
    }
    static const char *const meta[] = {"format", "pt", NULL};
    tr_st_writer *w = NULL;
    float *piece = rc ? NULL : malloc(most * sizeof(float) + 1);
    if (!rc && !piece)
        rc = tr_fail(TR_ERR_NOMEM, "out of memory for a tensor of %zu floats", most);
    if (!rc)
        rc = tr_st_create_sharded(dir, list, (size_t)total, meta, o->max_shard_bytes, &w);
    int HS = s->C / s->NH, NG = s->query_groups ? s->query_groups : s->NH, R = s->NH / NG;
    for (int i = 0; i < n && !rc; i++) {
        const tr_param_tensor *t = tr_gpt_tensor(g, i);
        const float *src = params + t->offset;
        size_t cols = (size_t)t->full_cols;
        for (int k = 0; k < maps[i].n && !rc; k++) {
            if (maps[i].kind == FAM_SAME) { /* the first rows as they are */
                rc = tr_st_put_f32(w, src);
                continue;
            }
            for (uint64_t r = 0; r < maps[i].rows[k]; r++) {
                uint64_t from;
                if (maps[i].kind == FAM_SWIGLU)
                    from = 2 * r + (uint64_t)k;
                else {
                    uint64_t unit = r / (uint64_t)HS, d = r % (uint64_t)HS;
                    uint64_t gr = k == 0 ? unit / (uint64_t)R : unit;
                    uint64_t u = k == 0 ? unit % (uint64_t)R : (uint64_t)(R + k - 1);
                    from = (gr * (uint64_t)(R + 2) + u) * (uint64_t)HS + d;
                }
                memcpy(piece + r * cols, src + from * cols, cols * sizeof(float));
            }
            rc = tr_st_put_f32(w, piece);
        }
    }
    if (w)
        rc = rc ? (tr_st_abort(w), rc) : tr_st_finish(w);
    if (!rc)
        rc = write_family_config(dir, family, m, o);
    free(piece);
    free(list);
    free(maps);
    return rc;
}
