/* The tensors of Llama (LlamaForCausalLM), Qwen2 (Qwen2ForCausalLM), Bloom
 * (BloomForCausalLM), GPT-NeoX (GPTNeoXForCausalLM) and Falcon (FalconForCausalLM) folders of
 * transformers to and from a trident model (issue 17), in trident's layout (hf.h states the
 * mappings; config.json: family_config.c). */
#include "hf/hf_internal.h"

#include <ctype.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ names and layouts */

/* ROT: GPT-J's q, k rows; FUSED: one tensor of rows [Q | K | V] (MPT's Wqkv, Phi-3's qkv_proj);
 * POS_OFFSET: OPT's embed_positions, trident's rows after POS_OFFSET_ROWS that no position
 * reads; SWIGLU_FUSED: one tensor of rows [gate | up] (Phi-3's gate_up_proj) */
enum { FAM_SAME, FAM_QKV, FAM_SWIGLU, FAM_QKV_ROT, FAM_QKV_FUSED, FAM_POS_OFFSET,
       FAM_SWIGLU_FUSED };
enum { POS_OFFSET_ROWS = 2 }; /* (OPTLearnedPositionalEmbedding's offset) */
#define NO_ROW UINT64_MAX /* trident_row of an HF row that is no trident row's */

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
    int HS = tr_gpt_head_size(s), NG = s->query_groups ? s->query_groups : s->NH;
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
    else if (rest && (!strcmp(rest, "qkv.weight") || !strcmp(rest, "qkv.bias"))) {
        m->kind = FAM_QKV, m->n = 3; /* (the bias: Qwen2's) */
        const char *p[3] = {"q", "k", "v"}, *what = rest + 4;
        for (int i = 0; i < 3; i++)
            snprintf(m->name[i], sizeof m->name[i], "model.layers.%d.self_attn.%s_proj.%s", l,
                     p[i], what);
        m->rows[0] = (uint64_t)s->NH * HS, m->rows[1] = m->rows[2] = (uint64_t)NG * HS;
    } else if (rest && !strcmp(rest, "fc.weight")) {
        m->kind = FAM_SWIGLU, m->n = 2;
        snprintf(m->name[0], sizeof m->name[0], "model.layers.%d.mlp.gate_proj.weight", l);
        snprintf(m->name[1], sizeof m->name[1], "model.layers.%d.mlp.up_proj.weight", l);
        m->rows[0] = m->rows[1] = (uint64_t)F;
    } else
        return tr_fail(TR_ERR_INTERNAL, "no Llama / Qwen2 name for trident tensor '%s'",
                       t->name);
    return TR_OK;
}

/* a trident tensor name and its HF one */
typedef struct {
    const char *trident, *hf;
} fam_name;

/* t's one HF tensor in trident's layout (FAM_SAME): layers.L.X is layer_prefix L.Y for the
 * {X, Y} of layer, any other name top_prefix Y for that of top; TR_ERR_INTERNAL naming the
 * family when there is none */
static int map_table(const tr_param_tensor *t, fam_map *m, const fam_name *layer, size_t n_layer,
                     const char *layer_prefix, const fam_name *top, size_t n_top,
                     const char *top_prefix, const char *family)
{
    int l = -1, used = 0;
    m->kind = FAM_SAME, m->n = 1;
    m->rows[0] = (uint64_t)t->full_rows;
    m->name[0][0] = '\0';
    if (sscanf(t->name, "layers.%d.%n", &l, &used) == 1 && used > 0) {
        for (size_t i = 0; i < n_layer; i++)
            if (!strcmp(t->name + used, layer[i].trident))
                snprintf(m->name[0], sizeof m->name[0], "%s%d.%s", layer_prefix, l, layer[i].hf);
    } else
        for (size_t i = 0; i < n_top; i++)
            if (!strcmp(t->name, top[i].trident))
                snprintf(m->name[0], sizeof m->name[0], "%s%s", top_prefix, top[i].hf);
    if (!m->name[0][0])
        return tr_fail(TR_ERR_INTERNAL, "no %s name for trident tensor '%s'", family, t->name);
    return TR_OK;
}

static int map_bloom(const tr_param_tensor *t, fam_map *m)
{
    static const fam_name layer[] = {
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
    static const fam_name top[] = {
        {"wte", "word_embeddings.weight"},
        {"emb_ln.weight", "word_embeddings_layernorm.weight"},
        {"emb_ln.bias", "word_embeddings_layernorm.bias"},
        {"lnf.weight", "ln_f.weight"},
        {"lnf.bias", "ln_f.bias"}};
    /* qkv rows are (head, {q, k, v}, d) in both: query_key_value is trident's layout */
    return map_table(t, m, layer, sizeof layer / sizeof layer[0], "transformer.h.", top,
                     sizeof top / sizeof top[0], "transformer.", "Bloom");
}

/* GPT-NeoX: every tensor in trident's layout (query_key_value's rows, viewed by transformers
 * as (heads, 3 * head_size), are (head, {q, k, v}, d)) */
static int map_neox(const tr_param_tensor *t, fam_map *m)
{
    static const fam_name layer[] = {
        {"ln1.weight", "input_layernorm.weight"},
        {"ln1.bias", "input_layernorm.bias"},
        {"qkv.weight", "attention.query_key_value.weight"},
        {"qkv.bias", "attention.query_key_value.bias"},
        {"attn_proj.weight", "attention.dense.weight"},
        {"attn_proj.bias", "attention.dense.bias"},
        {"ln2.weight", "post_attention_layernorm.weight"},
        {"ln2.bias", "post_attention_layernorm.bias"},
        {"fc.weight", "mlp.dense_h_to_4h.weight"},
        {"fc.bias", "mlp.dense_h_to_4h.bias"},
        {"fc_proj.weight", "mlp.dense_4h_to_h.weight"},
        {"fc_proj.bias", "mlp.dense_4h_to_h.bias"}};
    static const fam_name top[] = {
        {"wte", "gpt_neox.embed_in.weight"},
        {"output_layer", "embed_out.weight"},
        {"lnf.weight", "gpt_neox.final_layer_norm.weight"},
        {"lnf.bias", "gpt_neox.final_layer_norm.bias"}};
    return map_table(t, m, layer, sizeof layer / sizeof layer[0], "gpt_neox.layers.", top,
                     sizeof top / sizeof top[0], "", "GPT-NeoX");
}

/* Falcon: Bloom's names under transformer.h.L (self_attention.*, mlp.*), lm_head.weight; the
 * norms by the architecture (the shape's): new_decoder_architecture's ln_attn and ln_mlp (the
 * parallel residual with two norms), else input_layernorm and, with the sequential residual,
 * post_attention_layernorm. Every tensor in trident's layout: query_key_value's rows are
 * (group, {q_0 .. q_R-1, k, v}, d) in all three (transformers' _split_heads). */
static int map_falcon(const tr_param_tensor *t, const tr_gpt_shape *s, fam_map *m)
{
    int new_arch = s->parallel_residual && !s->parallel_shared_norm;
    int l = -1, used = 0;
    const char *rest = NULL;
    if (sscanf(t->name, "layers.%d.%n", &l, &used) == 1 && used > 0)
        rest = t->name + used;
    if (rest && (!strncmp(rest, "ln1.", 4) || !strncmp(rest, "ln2.", 4))) {
        const char *norm = rest[2] == '1' ? (new_arch ? "ln_attn" : "input_layernorm")
                                          : (new_arch ? "ln_mlp" : "post_attention_layernorm");
        m->kind = FAM_SAME, m->n = 1;
        m->rows[0] = (uint64_t)t->full_rows;
        snprintf(m->name[0], sizeof m->name[0], "transformer.h.%d.%s.%s", l, norm, rest + 4);
        return TR_OK;
    }
    if (!strcmp(t->name, "output_layer")) {
        m->kind = FAM_SAME, m->n = 1;
        m->rows[0] = (uint64_t)t->full_rows;
        snprintf(m->name[0], sizeof m->name[0], "lm_head.weight");
        return TR_OK;
    }
    if (map_bloom(t, m) || !strncmp(t->name, "emb_ln.", 7))
        return tr_fail(TR_ERR_INTERNAL, "no Falcon name for trident tensor '%s'", t->name);
    return TR_OK;
}

/* StableLM: the Llama's names with the LayerNorm biases (input_layernorm.bias,
 * post_attention_layernorm.bias, model.norm.bias) */
static int map_stablelm(const tr_param_tensor *t, const tr_gpt_shape *s, fam_map *m)
{
    static const fam_name layer[] = {{"ln1.bias", "input_layernorm.bias"},
                                     {"ln2.bias", "post_attention_layernorm.bias"}};
    static const fam_name top[] = {{"lnf.bias", "norm.bias"}};
    const char *dot = strrchr(t->name, '.');
    if (dot && !strcmp(dot, ".bias") && dot - t->name >= 3 && !strncmp(dot - 3, "ln", 2))
        return map_table(t, m, layer, sizeof layer / sizeof layer[0], "model.layers.", top,
                         sizeof top / sizeof top[0], "model.", "StableLM");
    return map_llama(t, s, m);
}

/* Phi: family_phi.c's names (q/k/v_proj cut as a Llama's) */
static int map_phi(const tr_param_tensor *t, const tr_gpt_shape *s, fam_map *m)
{
    int qkv = 0, rc = hf_phi_map(t, s, m->name, m->rows, &qkv);
    m->kind = qkv ? FAM_QKV : FAM_SAME, m->n = qkv ? 3 : 1;
    return rc;
}

/* GPT-BigCode: family_bigcode.c's names, every tensor in trident's layout */
static int map_bigcode(const tr_param_tensor *t, fam_map *m)
{
    m->kind = FAM_SAME, m->n = 1;
    m->rows[0] = (uint64_t)t->full_rows;
    return hf_bigcode_map(t, m->name[0]);
}

/* GPT-J: family_gptj.c's names; q_proj's and k_proj's rotary rows interleaved (FAM_QKV_ROT) */
static int map_gptj(const tr_param_tensor *t, const tr_gpt_shape *s, fam_map *m)
{
    int qkv = 0, rc = hf_gptj_map(t, m->name, &qkv);
    m->kind = qkv ? FAM_QKV_ROT : FAM_SAME, m->n = qkv ? 3 : 1;
    m->rows[0] = qkv ? (uint64_t)s->C : (uint64_t)t->full_rows;
    m->rows[1] = m->rows[2] = (uint64_t)s->C;
    return rc;
}

/* MPT: family_mpt.c's names; Wqkv's [Q | K | V] rows (FAM_QKV_FUSED) */
static int map_mpt(const tr_param_tensor *t, fam_map *m)
{
    int qkv = 0, rc = hf_mpt_map(t, m->name[0], &qkv);
    m->kind = qkv ? FAM_QKV_FUSED : FAM_SAME, m->n = 1;
    m->rows[0] = (uint64_t)t->full_rows;
    return rc;
}

/* OPT: family_opt.c's names; q/k/v_proj as a Llama's (FAM_QKV), embed_positions' offset rows */
static int map_opt(const tr_param_tensor *t, const tr_gpt_shape *s, fam_map *m)
{
    int qkv = 0, rc = hf_opt_map(t, m->name, &qkv);
    int wpe = !strcmp(t->name, "wpe");
    m->kind = qkv ? FAM_QKV : wpe ? FAM_POS_OFFSET : FAM_SAME, m->n = qkv ? 3 : 1;
    m->rows[0] = qkv ? (uint64_t)s->C : (uint64_t)t->full_rows + (wpe ? POS_OFFSET_ROWS : 0);
    m->rows[1] = m->rows[2] = (uint64_t)s->C;
    return rc;
}

/* Phi-3: family_phi3.c's fused qkv_proj (FAM_QKV_FUSED) and gate_up_proj (FAM_SWIGLU_FUSED),
 * the Llama's other names */
static int map_phi3(const tr_param_tensor *t, const tr_gpt_shape *s, fam_map *m)
{
    int fused = hf_phi3_map(t, m->name[0]);
    if (!fused)
        return map_llama(t, s, m);
    m->kind = fused == 1 ? FAM_QKV_FUSED : FAM_SWIGLU_FUSED, m->n = 1;
    m->rows[0] = (uint64_t)t->full_rows;
    return TR_OK;
}

/* Mixtral: family_mixtral.c's router and experts (w1 / w3 as gate / up_proj: FAM_SWIGLU), the
 * Llama's other names */
static int map_mixtral(const tr_param_tensor *t, const tr_gpt_shape *s, fam_map *m)
{
    int n = hf_mixtral_map(t, m->name);
    if (!n)
        return map_llama(t, s, m);
    m->kind = n == 2 ? FAM_SWIGLU : FAM_SAME, m->n = n;
    m->rows[0] = m->rows[1] = (uint64_t)(n == 2 ? t->full_rows / 2 : t->full_rows);
    return TR_OK;
}

uint64_t hf_qkv_row(uint64_t r, int k, int HS, int R)
{
    uint64_t unit = r / (uint64_t)HS, d = r % (uint64_t)HS;
    uint64_t g = k == 0 ? unit / (uint64_t)R : unit;
    uint64_t u = k == 0 ? unit % (uint64_t)R : (uint64_t)(R + k - 1);
    return (g * (uint64_t)(R + 2) + u) * (uint64_t)HS + d;
}

uint64_t hf_fused_qkv_row(uint64_t r, const tr_gpt_shape *s)
{
    int HS = tr_gpt_head_size(s), NG = s->query_groups ? s->query_groups : s->NH;
    uint64_t q = (uint64_t)s->NH * HS, kv = (uint64_t)NG * HS;
    int k = r < q ? 0 : 1 + (int)((r - q) / kv); /* which block, then its row */
    return hf_qkv_row(k == 0 ? r : (r - q) % kv, k, HS, s->NH / NG);
}

uint64_t hf_fused_swiglu_row(uint64_t r, const tr_gpt_shape *s)
{
    uint64_t F = (uint64_t)(s->ffn ? s->ffn : 4 * s->C);
    return 2 * (r % F) + r / F;
}

/* The trident row of row r of HF tensor k of a map of `kind` (not FAM_SAME): SwiGLU's rows
 * (feature, {gate, up}); q/k/v_proj's (k: 0 q, 1 k, 2 v), GPT-J's with q's and k's rotary
 * pairs interleaved; a fused [Q (NH heads) | K | V (NG each)] or [gate | up] tensor's (k 0);
 * OPT's positions r - 2 (NO_ROW for its first 2) */
static uint64_t trident_row(int kind, int k, uint64_t r, const tr_gpt_shape *s)
{
    int HS = tr_gpt_head_size(s), NG = s->query_groups ? s->query_groups : s->NH;
    if (kind == FAM_POS_OFFSET)
        return r < POS_OFFSET_ROWS ? NO_ROW : r - POS_OFFSET_ROWS;
    if (kind == FAM_SWIGLU)
        return 2 * r + (uint64_t)k;
    if (kind == FAM_SWIGLU_FUSED)
        return hf_fused_swiglu_row(r, s);
    if (kind == FAM_QKV_FUSED)
        return hf_fused_qkv_row(r, s);
    if (kind == FAM_QKV_ROT && k < 2) /* GPT-J's interleaved pairs */
        r = r - r % (uint64_t)HS + hf_gptj_rotary_row(r % (uint64_t)HS, s->rotary_dims);
    return hf_qkv_row(r, k, HS, s->NH / NG);
}

static int map_family(int family, const tr_param_tensor *t, const tr_gpt_shape *s, fam_map *m)
{
    return family == TR_HF_BIGCODE  ? map_bigcode(t, m)
           : family == TR_HF_MPT    ? map_mpt(t, m)
           : family == TR_HF_OPT    ? map_opt(t, s, m)
           : family == TR_HF_GPTJ   ? map_gptj(t, s, m)
           : family == TR_HF_BLOOM  ? map_bloom(t, m)
           : family == TR_HF_NEOX   ? map_neox(t, m)
           : family == TR_HF_FALCON ? map_falcon(t, s, m)
           : family == TR_HF_PHI    ? map_phi(t, s, m)
           : family == TR_HF_STABLELM ? map_stablelm(t, s, m)
           : family == TR_HF_PHI3   ? map_phi3(t, s, m)
           : family == TR_HF_MIXTRAL ? map_mixtral(t, s, m)
                                    : map_llama(t, s, m);
}

/* The name of a family's output head (a tied model's may be in a file: check_tied_head) */
static const char *head_name(int family)
{
    return family == TR_HF_NEOX ? "embed_out.weight" : "lm_head.weight";
}

/* A buffer (not a parameter) that older checkpoints of the family carry: rotary inverse
 * frequencies; GPT-NeoX's causal mask and masked_bias (gpt_neox.layers.L.attention.bias,
 * .masked_bias: Pythia's files, saved before transformers made them non-persistent); GPT-J's
 * (transformer.h.L.attn.bias, .masked_bias: gpt-j-6b's files) */
static int ignored_buffer(int family, const char *n)
{
    size_t len = strlen(n);
    int l = -1, used = 0;
    if (len > 9 && !strcmp(n + len - 9, ".inv_freq"))
        return 1;
    if (family == TR_HF_GPTJ && sscanf(n, "transformer.h.%d.%n", &l, &used) == 1 && used)
        return !strcmp(n + used, "attn.bias") || !strcmp(n + used, "attn.masked_bias");
    if (family != TR_HF_NEOX || sscanf(n, "gpt_neox.layers.%d.%n", &l, &used) != 1 || !used)
        return 0;
    return !strcmp(n + used, "attention.bias") || !strcmp(n + used, "attention.masked_bias");
}

/* The prefix of a family's names that its files may leave out, the base model's, where the
 * released files are the base model's state (no lm_head: tied): OPTForCausalLM's model.
 * (facebook/opt-*: decoder.*), BloomForCausalLM's transformer. (bigscience/bloom*: h.N.*,
 * word_embeddings.*); NULL for the others */
static const char *base_prefix(int family)
{
    return family == TR_HF_OPT ? "model." : family == TR_HF_BLOOM ? "transformer." : NULL;
}

/* HF name `name` of the family is the set's name n: the same, or without base_prefix */
static int same_name(int family, const char *name, const char *n)
{
    const char *p = base_prefix(family);
    size_t len = p ? strlen(p) : 0;
    return !strcmp(name, n) || (p && !strncmp(name, p, len) && !strcmp(name + len, n));
}

/* The set's tensor `name` (or the family's without base_prefix; not both), a float one of
 * rows x cols (cols 1: a vector). */
static int find_checked(const tr_st_set *set, const char *dir, int family, const char *name,
                        uint64_t rows, uint64_t cols, tr_st_file **f, const tr_st_tensor **t)
{
    const char *p = base_prefix(family);
    const char *alt = p && !strncmp(name, p, strlen(p)) ? name + strlen(p) : NULL;
    tr_st_file *f2 = NULL;
    const tr_st_tensor *short_name = alt ? tr_st_set_find(set, alt, &f2) : NULL;
    *t = tr_st_set_find(set, name, f);
    if (*t && short_name)
        return tr_fail(TR_ERR_INVALID, "%s holds both '%s' and '%s'", dir, name, alt);
    if (short_name)
        *t = short_name, *f = f2;
    if (!*t && alt)
        return tr_fail(TR_ERR_INVALID, "%s: no tensor '%s' (nor '%s'): not a complete "
                       "checkpoint of the model config.json describes", dir, name, alt);
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

/* Every tensor of the set is one the model uses (buffers aside: ignored_buffer; a tied model's
 * head is checked against the embedding by check_tied_head). */
static int check_all_used(const tr_st_set *set, const char *dir, tr_gpt *g, int family)
{
    const tr_gpt_shape *s = tr_gpt_get_shape(g);
    for (size_t i = 0; i < tr_st_set_count(set); i++) {
        tr_st_file *f;
        const tr_st_tensor *st = tr_st_set_at(set, i, &f);
        const char *n = st->name;
        size_t len = strlen(n);
        if ((!s->untie && !strcmp(n, head_name(family))) || ignored_buffer(family, n))
            continue;
        int found = 0;
        for (int j = 0; j < tr_gpt_num_tensors(g) && !found; j++) {
            fam_map m;
            const tr_param_tensor *t = tr_gpt_tensor(g, j);
            if (map_family(family, t, s, &m))
                return tr_fail(TR_ERR_INTERNAL, "%s", tr_errmsg());
            for (int k = 0; k < m.n; k++)
                found |= same_name(family, m.name[k], n);
        }
        int qkv_bias = (family == TR_HF_LLAMA || family == TR_HF_STABLELM) &&
                       strstr(n, ".self_attn.") &&
                       len > 10 && !strcmp(n + len - 10, "_proj.bias") && !strstr(n, "o_proj");
        int norm = family == TR_HF_FALCON &&
                   (strstr(n, ".ln_attn.") || strstr(n, ".ln_mlp.") ||
                    strstr(n, ".input_layernorm.") || strstr(n, ".post_attention_layernorm."));
        int bias = family == TR_HF_FALCON && len > 5 && !strcmp(n + len - 5, ".bias") &&
                   !strstr(n, "ln") && s->no_linear_bias;
        if (!found)
            return tr_fail(TR_ERR_INVALID, "%s: tensor '%.200s' is not part of the %s model "
                           "%s/config.json describes%s", tr_st_path(f), n,
                           tr_hf_family_name(family), dir,
                           qkv_bias && family == TR_HF_STABLELM
                               ? " (q, k and v biases: config.json's use_qkv_bias is false)"
                           : qkv_bias ? " (q, k and v biases alone: a Qwen2, model_type qwen2)"
                           : norm ? " (its norms say another Falcon layer: "
                                    "new_decoder_architecture true has ln_attn and ln_mlp, "
                                    "parallel_attn true one input_layernorm, parallel_attn "
                                    "false input_layernorm and post_attention_layernorm)"
                           : bias ? " (config.json's bias is false)"
                                  : "");
    }
    return TR_OK;
}

/* Floats of scratch for any HF piece of trident tensor t (OPT's positions: 2 rows more) */
static size_t piece_floats(const tr_param_tensor *t)
{
    return t->numel + (size_t)POS_OFFSET_ROWS * (size_t)t->full_cols;
}

/* One trident tensor (whole, TP 1) from its HF pieces; vocabulary padding rows 0. */
static int load_tensor(const tr_st_set *set, const char *dir, const tr_param_tensor *t,
                       const tr_gpt_shape *s, int family, float *dst, float *piece)
{
    fam_map m;
    int rc = map_family(family, t, s, &m);
    uint64_t cols = (uint64_t)t->full_cols;
    if (m.kind == FAM_SAME && t->vocab_rows)
        m.rows[0] = (uint64_t)s->V;
    size_t full = (size_t)t->full_rows * (size_t)t->full_cols;
    memset(dst, 0, full * sizeof(float));
    for (int k = 0; !rc && k < m.n; k++) {
        tr_st_file *f;
        const tr_st_tensor *st;
        rc = find_checked(set, dir, family, m.name[k], m.rows[k], cols, &f, &st);
        if (!rc)
            rc = hf_read_weight(f, st, m.kind == FAM_SAME ? dst : piece);
        if (rc || m.kind == FAM_SAME)
            continue;
        for (uint64_t r = 0; r < m.rows[k]; r++) {
            uint64_t to = trident_row(m.kind, k, r, s);
            if (to != NO_ROW) /* (OPT's position rows that no position reads: dropped) */
                memcpy(dst + to * cols, piece + r * cols, cols * sizeof(float));
        }
    }
    return rc;
}

/* A tied model (Bloom; Llama, GPT-NeoX with tie_word_embeddings): its head (lm_head.weight;
 * GPT-NeoX's embed_out.weight), when a file holds it,
 * must be the embedding (wte, loaded) in shape and in value as float32, as GPT-2's is
 * (gpt2_load.c); a different head cannot be represented. piece: V x C floats of scratch. */
static int check_tied_head(const tr_st_set *set, tr_gpt *g, int family, const float *params,
                           float *piece)
{
    const tr_gpt_shape *s = tr_gpt_get_shape(g);
    tr_st_file *f = NULL;
    const char *hname = head_name(family);
    const tr_st_tensor *head = tr_st_set_find(set, hname, &f);
    if (s->untie || !head)
        return TR_OK;
    const tr_param_tensor *wte = NULL;
    for (int i = 0; i < tr_gpt_num_tensors(g) && !wte; i++)
        if (!strcmp(tr_gpt_tensor(g, i)->name, "wte"))
            wte = tr_gpt_tensor(g, i);
    fam_map m;
    int rc = !wte ? tr_fail(TR_ERR_INTERNAL, "the model has no wte")
             : map_family(family, wte, s, &m);
    if (rc)
        return rc;
    const char *emb = m.name[0];
    tr_st_tensor want = {.ndim = 2, .shape = {(uint64_t)s->V, (uint64_t)s->C}};
    if (head->ndim != 2 || head->shape[0] != want.shape[0] || head->shape[1] != want.shape[1])
        return tr_fail(TR_ERR_INVALID, "%s: %s is %s, %s %s: the model of config.json ties "
                       "the head to the word embedding", tr_st_path(f), hname,
                       st_shape_text(head).text, emb, st_shape_text(&want).text);
    if ((rc = tr_st_read_f32(f, head, piece))) /* (a dtype not a float's refused there) */
        return rc;
    if (memcmp(piece, params + wte->offset, (size_t)s->V * (size_t)s->C * sizeof(float)))
        return tr_fail(TR_ERR_INVALID, "%s: %s differs from %s; the model of config.json "
                       "ties the head to the word embedding (an untied head cannot be "
                       "converted)", tr_st_path(f), hname, emb);
    return TR_OK;
}

int tr_hf_load_family(const char *dir, int family, tr_gpt *g, float *params)
{
    const tr_gpt_shape *s = tr_gpt_get_shape(g);
    if (s->tp_size != 1 || !s->is_first || !s->is_last)
        return tr_fail(TR_ERR_INVALID, "Llama / Qwen2 / Bloom / GPT-NeoX / Falcon folders load "
                       "into a whole model (one stage, no tensor parallelism)");
    tr_st_set *set = NULL;
    int rc = tr_st_set_open(dir, &set);
    if (!rc)
        rc = check_all_used(set, dir, g, family);
    size_t most = 0;
    for (int i = 0; i < tr_gpt_num_tensors(g); i++) {
        size_t n = piece_floats(tr_gpt_tensor(g, i));
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

int tr_hf_write_family(const char *dir, int family, tr_gpt *g, const float *params,
                       const tr_model_config *m, const tr_hf_export_options *o)
{
    const tr_gpt_shape *s = tr_gpt_get_shape(g);
    if (family == TR_HF_FALCON) {
        int rc = hf_falcon_check(m);
        if (rc)
            return rc;
    }
    int n = tr_gpt_num_tensors(g), total = 0, rc = TR_OK;
    fam_map *maps = calloc((size_t)n + 1, sizeof *maps);
    tr_st_tensor *list = calloc(3 * (size_t)n + 1, sizeof *list);
    size_t most = 0;
    if (!maps || !list)
        rc = tr_fail(TR_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n && !rc; i++) {
        const tr_param_tensor *t = tr_gpt_tensor(g, i);
        if ((rc = map_family(family, t, s, &maps[i])))
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
        most = piece_floats(t) > most ? piece_floats(t) : most;
    }
    static const char *const meta[] = {"format", "pt", NULL};
    tr_st_writer *w = NULL;
    float *piece = rc ? NULL : malloc(most * sizeof(float) + 1);
    if (!rc && !piece)
        rc = tr_fail(TR_ERR_NOMEM, "out of memory for a tensor of %zu floats", most);
    if (!rc)
        rc = tr_st_create_sharded(dir, list, (size_t)total, meta, o->max_shard_bytes, &w);
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
                uint64_t from = trident_row(maps[i].kind, k, r, s);
                if (from == NO_ROW) /* OPT's 2 position rows that no position reads: zeros */
                    memset(piece + r * cols, 0, cols * sizeof(float));
                else
                    memcpy(piece + r * cols, src + from * cols, cols * sizeof(float));
            }
            rc = tr_st_put_f32(w, piece);
        }
    }
    if (w)
        rc = rc ? (tr_st_abort(w), rc) : tr_st_finish(w);
    if (!rc)
        rc = hf_write_family_config(dir, family, m, o);
    free(piece);
    free(list);
    free(maps);
    return rc;
}
