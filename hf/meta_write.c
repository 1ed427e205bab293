/* `trident convert --to meta`: a trident Llama checkpoint cut into Meta's model-parallel files
 * (meta.h states the contract): the inverse of meta.c's merge, through the same table. */
#include "hf/meta_internal.h"
#include "hf/torch_write.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/kernels.h"
#include "train/train.h"

/* A model Meta's Llama (llama/model.py's Transformer) computes, and mp divides its sizes */
static int check_model(const tr_model_config *m, const meta_dims *d)
{
    int family = m->normalization ? tr_hf_family_of(m) : TR_HF_GPT2;
    if (family != TR_HF_LLAMA)
        return tr_fail(TR_ERR_INVALID, "the checkpoint's model is %s: Meta's Llama format holds "
                       "a Llama (RMSNorm, rope over whole heads of hidden_size / heads, SwiGLU, "
                       "no biases, no sliding window)", family < 0 ? "no Hugging Face family"
                       : tr_hf_family_name(family));
    if (m->rotary_seq_len_interpolation_factor != 1.0)
        return tr_fail(TR_ERR_INVALID, "the model has rotary_seq_len_interpolation_factor %g: "
                       "params.json has no linear rope scaling",
                       m->rotary_seq_len_interpolation_factor);
    if (m->use_rope_scaling && (m->rope_scaling_low_freq_factor != 1.0 ||
                                m->rope_scaling_original_max_position_embeddings != 8192))
        return tr_fail(TR_ERR_INVALID, "the model's rope scaling has low_freq_factor %g and "
                       "original_max_position_embeddings %d: Meta's use_scaled_rope fixes them "
                       "at 1 and 8192", m->rope_scaling_low_freq_factor,
                       m->rope_scaling_original_max_position_embeddings);
    const struct {
        const char *what;
        int n;
    } sizes[] = {{"num_attention_heads", d->NH}, {"num_query_groups", d->NKV},
                 {"ffn_hidden_size", d->F}, {"hidden_size", d->C}, {"vocab_size", d->V}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (sizes[i].n % d->mp)
            return tr_fail(TR_ERR_INVALID, "%s %d is not divisible by --mp %d", sizes[i].what,
                           sizes[i].n, d->mp);
    return TR_OK;
}

/* params.json: Meta's keys, the FFN width as multiple_of (and ffn_dim_multiplier) give it */
static int write_params(const char *dir, const tr_model_config *m)
{
    int C = m->hidden_size, F = tr_model_ffn_hidden(m);
    long h0 = (long)((double)(2L * 4 * C) / 3.0);
    long plain = 256 * ((h0 + 255) / 256);
    json_t *root = json_pack("{s:i, s:i, s:i}", "dim", C, "n_layers", m->num_layers, "n_heads",
                             m->num_attention_heads);
    if (!root)
        return tr_fail(TR_ERR_NOMEM, "out of memory for params.json");
    int bad = 0;
    if (m->num_query_groups != m->num_attention_heads) /* (absent: one per head, as Meta's) */
        bad |= json_object_set_new(root, "n_kv_heads", json_integer(m->num_query_groups));
    bad |= json_object_set_new(root, "vocab_size", json_integer(m->vocab_size));
    /* 256 alone where that gives F (Llama 2 7B, 13B); else F rounds itself up (h <= F) */
    bad |= json_object_set_new(root, "multiple_of", json_integer(plain == F ? 256 : F));
    if (plain != F && F < h0) /* (absent otherwise, as in Meta's files without one) */
        bad |= json_object_set_new(root, "ffn_dim_multiplier", json_real((double)F / (double)h0));
    bad |= json_object_set_new(root, "norm_eps", json_real(m->layernorm_epsilon));
    bad |= json_object_set_new(root, "rope_theta", json_real(m->rotary_base));
    if (m->use_rope_scaling) {
        bad |= json_object_set_new(root, "use_scaled_rope", json_true());
        /* (llama-models' later key; without it, an import takes meta_default_rope_factor) */
        if (m->rope_scaling_factor != meta_default_rope_factor(m->hidden_size, m->num_layers))
            bad |= json_object_set_new(root, "rope_scaling_factor",
                                       json_real(m->rope_scaling_factor));
        if (m->rope_scaling_high_freq_factor != 4.0)
            bad |= json_object_set_new(root, "rope_high_freq_factor",
                                       json_real(m->rope_scaling_high_freq_factor));
    }
    char *text = bad ? NULL : json_dumps(root, JSON_INDENT(4) | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (!text)
        return tr_fail(TR_ERR_NOMEM, "out of memory for params.json");
    size_t n = strlen(text);
    char *line = realloc(text, n + 2);
    if (!line) {
        free(text);
        return tr_fail(TR_ERR_NOMEM, "out of memory for params.json");
    }
    memcpy(line + n, "\n", 2);
    int rc = hf_write_text(dir, "params.json", line);
    free(line);
    return rc;
}

/* Trident tensor `name` of g (NULL when the model has none) */
static const tr_param_tensor *find_tensor(tr_gpt *g, const char *name)
{
    for (int i = 0; i < tr_gpt_num_tensors(g); i++)
        if (!strcmp(tr_gpt_tensor(g, i)->name, name))
            return tr_gpt_tensor(g, i);
    return NULL;
}

/* Meta tensor `name` (part p of trident tensor t, whole at src) of rank s into w */
static int write_part(ptw *w, const meta_part *p, const meta_dims *d, const char *name,
                      const tr_param_tensor *t, const float *src, int s, int bf16, float *buf)
{
    size_t sr = meta_shard_rows(p, d), sc = meta_shard_cols(p, d);
    size_t scols = sc ? sc : 1, cols = (size_t)t->full_cols, c0 = meta_whole_col(p, d, s);
    for (size_t i = 0; i < sr; i++) {
        uint64_t row = meta_trident_row(p, d, meta_whole_row(p, d, s, i));
        memcpy(buf + i * scols, src + row * cols + c0, scols * sizeof(float));
    }
    int rc = bf16 ? hf_bf16_in_place(buf, sr * scols, name) : TR_OK;
    uint64_t shape[2] = {sr, sc};
    ptw_str(w, name);
    return rc ? rc : ptw_tensor(w, bf16 ? TR_ST_BF16 : TR_ST_F32, sc ? 2 : 1, shape, buf);
}

/* consolidated.SS.pth: rank s's tensors in Meta's order */
static int write_rank(const char *dir, tr_gpt *g, const float *params, const meta_dims *d,
                      int s, int bf16, float *buf)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/consolidated.%02d.pth", dir, s);
    ptw *w;
    int rc = ptw_open(path, &w);
    if (rc)
        return rc;
    ptw_dict_begin(w);
    for (int part = -1; part <= d->L && !rc; part++) { /* -1: the embedding, L: norm, output */
        int top = part < 0 || part == d->L;
        int first = part < 0 ? 0 : part == d->L ? 1 : 0;
        int last = part < 0 ? 0 : part == d->L ? META_TOP_PARTS - 1 : META_LAYER_PARTS - 1;
        for (int j = first; j <= last && !rc; j++) {
            const meta_part *p = top ? &meta_top_parts[j] : &meta_layer_parts[j];
            char name[300], tname[300];
            if (top) {
                snprintf(name, sizeof name, "%s", p->meta);
                snprintf(tname, sizeof tname, "%s", p->trident);
            } else {
                snprintf(name, sizeof name, "layers.%d.%s", part, p->meta);
                snprintf(tname, sizeof tname, "layers.%d.%s", part, p->trident);
            }
            const tr_param_tensor *t = find_tensor(g, tname);
            if (!t && !strcmp(tname, "output_layer")) /* tied: the embedding is the head */
                t = find_tensor(g, "wte");
            if (!t)
                rc = tr_fail(TR_ERR_INTERNAL, "no trident tensor '%s' for Meta's %s", tname,
                             name);
            else
                rc = write_part(w, p, d, name, t, params + t->offset, s, bf16, buf);
        }
    }
    ptw_dict_end(w);
    return ptw_close(w, rc);
}

int tr_meta_export(const char *ckpt_dir, const char *out_dir, int mp, int bf16, int *iteration,
                   tr_meta_info *info)
{
    tr_model_config m = {0};
    meta_dims d;
    int it = 0, rc = tr_checkpoint_read_model(ckpt_dir, &m, &it);
    if (!rc) {
        meta_dims_of(&m, mp, &d);
        rc = check_model(&m, &d);
    }
    tr_gpt *g = NULL;
    float *params = NULL, *buf = NULL;
    hf_out_dir o;
    if (!rc)
        rc = hf_whole_model(&m, TR_HF_LLAMA, &g, &params);
    if (!rc)
        rc = tr_checkpoint_load_model(ckpt_dir, g, tr_kernels_cpu(), params, &it);
    size_t most = (size_t)d.V * (size_t)d.C; /* the largest shard: at most a whole tensor */
    for (int i = 0; !rc && i < tr_gpt_num_tensors(g); i++) {
        const tr_param_tensor *t = tr_gpt_tensor(g, i);
        if ((size_t)t->full_rows * (size_t)t->full_cols > most)
            most = (size_t)t->full_rows * (size_t)t->full_cols;
    }
    if (!rc && !(buf = malloc(most * sizeof(float) + 1)))
        rc = tr_fail(TR_ERR_NOMEM, "out of memory for a tensor of %zu floats", most);
    char tok[4200];
    snprintf(tok, sizeof tok, "%s/tokenizer.model", ckpt_dir);
    int copied = 0;
    if (!rc && !(rc = hf_out_begin(out_dir, &o))) {
        rc = write_params(o.tmp, &m);
        for (int s = 0; s < mp && !rc; s++)
            rc = write_rank(o.tmp, g, params, &d, s, bf16, buf);
        copied = !rc && !access(tok, F_OK);
        const char *files[] = {tok, "tokenizer.model", NULL};
        tr_hf_export_options eo = {.files = copied ? files : NULL};
        rc = hf_out_end_export(&o, rc, &eo);
    }
    free(buf);
    tr_gpt_free(g);
    free(params);
    if (!rc && iteration)
        *iteration = it;
    if (!rc && info)
        *info = (tr_meta_info){
            .mp = mp, .tokenizer = copied, .tied = !m.untie_embeddings_and_output_weights,
            .dtype = bf16 ? "BF16" : "F32", .positions = m.max_position_embeddings,
            .import_positions = meta_default_positions(m.use_rope_scaling, m.rotary_base)};
    return rc;
}
