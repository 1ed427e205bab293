/* `trident convert --from meta`: Meta's Llama checkpoint (params.json + consolidated.NN.pth,
 * meta.h) merged into one whole trident model and written as a release checkpoint. */
#include "hf/meta_internal.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train/train.h"

/* ------------------------------------------------------------------ the tensors */

const meta_part meta_layer_parts[META_LAYER_PARTS] = {
    {"attention.wq.weight", "qkv.weight", META_ROWS, META_QKV, 0, META_D_Q, META_D_C},
    {"attention.wk.weight", "qkv.weight", META_ROWS, META_QKV, 1, META_D_KV, META_D_C},
    {"attention.wv.weight", "qkv.weight", META_ROWS, META_QKV, 2, META_D_KV, META_D_C},
    {"attention.wo.weight", "attn_proj.weight", META_COLS, META_SAME, 0, META_D_C, META_D_Q},
    {"feed_forward.w1.weight", "fc.weight", META_ROWS, META_GLU, 0, META_D_F, META_D_C},
    {"feed_forward.w2.weight", "fc_proj.weight", META_COLS, META_SAME, 0, META_D_C, META_D_F},
    {"feed_forward.w3.weight", "fc.weight", META_ROWS, META_GLU, 1, META_D_F, META_D_C},
    {"attention_norm.weight", "ln1.weight", META_REP, META_SAME, 0, META_D_C, META_D_NONE},
    {"ffn_norm.weight", "ln2.weight", META_REP, META_SAME, 0, META_D_C, META_D_NONE}};

const meta_part meta_top_parts[META_TOP_PARTS] = {
    {"tok_embeddings.weight", "wte", META_COLS, META_SAME, 0, META_D_V, META_D_C},
    {"norm.weight", "lnf.weight", META_REP, META_SAME, 0, META_D_C, META_D_NONE},
    {"output.weight", "output_layer", META_ROWS, META_SAME, 0, META_D_V, META_D_C}};

uint64_t meta_trident_row(const meta_part *p, const meta_dims *d, uint64_t r)
{
    uint64_t hs = (uint64_t)d->HS;
    if (p->kind == META_GLU)
        return 2 * r + (uint64_t)p->k;
    if (p->kind != META_QKV)
        return r;
    if (p->k < 2) /* Meta's pairs (2i, 2i + 1) of a head -> halves (i, hs / 2 + i) */
        r = r - r % hs + hf_gptj_rotary_row(r % hs, d->HS);
    return hf_qkv_row(r, p->k, d->HS, d->NH / d->NKV);
}

void meta_dims_of(const tr_model_config *m, int mp, meta_dims *d)
{
    *d = (meta_dims){.L = m->num_layers, .C = m->hidden_size, .NH = m->num_attention_heads,
                     .NKV = m->num_query_groups, .HS = tr_model_head_size(m),
                     .F = tr_model_ffn_hidden(m), .V = m->vocab_size, .mp = mp};
}

/* ------------------------------------------------------------------ params.json */

int meta_default_positions(int scaled_rope, double rope_theta)
{
    return scaled_rope                ? 131072 /* Llama 3.1, 3.2 */
           : rope_theta == 500000.0   ? 8192   /* Llama 3 */
           : rope_theta == 1000000.0  ? 16384  /* Code Llama */
                                      : 4096;  /* Llama 2 (Llama 1: 2048) */
}

double meta_default_rope_factor(int dim, int n_layers)
{
    return (dim == 2048 && n_layers == 16) || (dim == 3072 && n_layers == 28) ? 32.0 : 8.0;
}

/* Meta's FFN width (llama/model.py's FeedForward) */
static long meta_ffn(int dim, int multiple_of, double multiplier)
{
    long h = (long)((double)(2L * 4 * dim) / 3.0);
    if (multiplier > 0)
        h = (long)(multiplier * (double)h);
    return (long)multiple_of * ((h + multiple_of - 1) / multiple_of);
}

/* params.json's keys that change the model in a way trident's Llama has no counterpart for */
static const struct {
    const char *key, *why;
} refused_keys[] = {
    {"moe_args", "a mixture of experts (Llama 4's MoE layers)"},
    {"vision_args", "a vision encoder (Llama 4's)"},
    {"vision_chunk_size", "a vision model (Llama 3.2 Vision's cross-attention layers)"},
    {"vision_max_num_chunks", "a vision model (Llama 3.2 Vision's cross-attention layers)"},
    {"vision_num_cross_attention_layers", "a vision model (Llama 3.2 Vision's cross-attention "
                                          "layers)"},
    {"quantization_args", "quantized weights (int4 / fp8 checkpoints)"},
    {"lora_args", "LoRA adapters (QLoRA checkpoints)"},
    {"use_qk_norm", "norms of the queries and keys (Llama 4's)"},
    {"nope_layer_interval", "layers without positions (Llama 4's)"},
    {"attention_chunk_size", "chunked attention (Llama 4's)"},
};

/* The keys read (or ignored) */
static const char *const known_keys[] = {
    "dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "multiple_of",
    "ffn_dim_multiplier", "norm_eps", "rope_theta", "use_scaled_rope", "rope_scaling_factor",
    "rope_high_freq_factor", "max_seq_len", "max_batch_size"};

static int check_keys(json_t *root, const char *path)
{
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        for (size_t i = 0; i < sizeof refused_keys / sizeof refused_keys[0]; i++)
            if (!strcmp(key, refused_keys[i].key) && !json_is_null(v))
                return hf_refuse(path, key, refused_keys[i].why);
        int known = 0;
        for (size_t i = 0; i < sizeof known_keys / sizeof known_keys[0] && !known; i++)
            known = !strcmp(key, known_keys[i]);
        for (size_t i = 0; i < sizeof refused_keys / sizeof refused_keys[0] && !known; i++)
            known = !strcmp(key, refused_keys[i].key); /* (null: absent) */
        if (!known)
            return tr_fail(TR_ERR_INVALID, "%s: %.200s is not a key trident reads (dim, "
                           "n_layers, n_heads, n_kv_heads, vocab_size, multiple_of, "
                           "ffn_dim_multiplier, norm_eps, rope_theta, use_scaled_rope, "
                           "max_seq_len, ...): it may change the model", path, key);
    }
    return TR_OK;
}

/* root's key, absent or null: none (*out 0), else hf_get_num's */
static int optional_num(json_t *root, const char *path, const char *key, double dflt,
                        double *out)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) {
        *out = dflt;
        return TR_OK;
    }
    return hf_get_num(root, path, key, dflt, out);
}

int meta_read_params(const char *dir, tr_model_config *m)
{
    char path[4200];
    json_t *root = NULL;
    int rc = hf_join(path, sizeof path, dir, "params.json");
    if (!rc && access(path, F_OK))
        rc = tr_fail(TR_ERR_INVALID, "%s: missing (Meta's checkpoint folder holds params.json "
                     "and consolidated.NN.pth, one per model-parallel rank)", path);
    if (!rc)
        rc = hf_load_json(path, 1 << 20, &root);
    if (rc)
        return rc;
    if (!json_is_object(root)) {
        json_decref(root);
        return tr_fail(TR_ERR_INVALID, "%s: not a JSON object", path);
    }
    memset(m, 0, sizeof *m);
    int multiple_of = 256, scaled = 0;
    double multiplier = 0, factor = 0, high = 4;
    rc = check_keys(root, path);
    if (!rc)
        rc = hf_get_int(root, path, "dim", -1, &m->hidden_size);
    if (!rc)
        rc = hf_get_int(root, path, "n_layers", -1, &m->num_layers);
    if (!rc)
        rc = hf_get_int(root, path, "n_heads", -1, &m->num_attention_heads);
    if (!rc)
        rc = hf_get_int(root, path, "n_kv_heads", m->num_attention_heads, &m->num_query_groups);
    json_t *vocab = json_object_get(root, "vocab_size");
    if (!rc && vocab && !(json_is_integer(vocab) && json_integer_value(vocab) == -1))
        rc = hf_get_int(root, path, "vocab_size", -1, &m->vocab_size); /* (else: the tensors') */
    if (!rc)
        rc = hf_get_int(root, path, "multiple_of", 256, &multiple_of);
    if (!rc)
        rc = optional_num(root, path, "ffn_dim_multiplier", 0, &multiplier);
    if (!rc && !json_object_get(root, "norm_eps"))
        rc = tr_fail(TR_ERR_INVALID, "%s: norm_eps is missing", path);
    if (!rc)
        rc = hf_get_num(root, path, "norm_eps", 1e-5, &m->layernorm_epsilon);
    if (!rc)
        rc = optional_num(root, path, "rope_theta", 10000.0, &m->rotary_base);
    if (!rc)
        rc = hf_get_bool(root, path, "use_scaled_rope", 0, &scaled);
    if (!rc)
        rc = optional_num(root, path, "rope_scaling_factor", 0.0, &factor);
    json_t *given = json_object_get(root, "rope_scaling_factor"); /* (absent: factor 0) */
    if (!rc && given && !json_is_null(given) && !(factor >= 1.0))
        rc = tr_fail(TR_ERR_INVALID, "%s: rope_scaling_factor %g is below 1", path, factor);
    if (!rc)
        rc = optional_num(root, path, "rope_high_freq_factor", 4.0, &high);
    if (!rc && !(high > 1.0))
        rc = tr_fail(TR_ERR_INVALID, "%s: rope_high_freq_factor %g is not above the low "
                     "frequency factor 1", path, high);
    if (!rc)
        rc = hf_get_int(root, path, "max_seq_len", meta_default_positions(scaled, m->rotary_base),
                        &m->max_position_embeddings);
    json_decref(root);
    if (rc)
        return rc;
    if (m->hidden_size % m->num_attention_heads ||
        m->num_attention_heads % m->num_query_groups || (m->hidden_size / m->num_attention_heads) % 2)
        return tr_fail(TR_ERR_INVALID, "%s: n_heads %d (n_kv_heads %d) do not divide dim %d into "
                       "heads of an even size (n_kv_heads must divide n_heads)", path,
                       m->num_attention_heads, m->num_query_groups, m->hidden_size);
    long F = meta_ffn(m->hidden_size, multiple_of, multiplier);
    if (F < 1 || F > (1L << 26))
        return tr_fail(TR_ERR_INVALID, "%s: dim %d, multiple_of %d and ffn_dim_multiplier %g "
                       "give an FFN width of %ld", path, m->hidden_size, multiple_of, multiplier,
                       F);
    m->ffn_hidden_size = (int)F;
    /* the rest as a Llama config.json of these sizes is read (family_config.c) */
    m->make_vocab_size_divisible_by = 128;
    m->init_method_std = 0.02;
    m->embedding_multiplier = 1.0;
    m->normalization = "RMSNorm";
    m->position_embedding_type = "rope";
    m->rotary_percent = 1.0;
    m->swiglu = 1;
    m->untie_embeddings_and_output_weights = 1;
    m->rotary_seq_len_interpolation_factor = 1.0;
    if (scaled) {
        m->use_rope_scaling = 1;
        m->rope_scaling_factor = factor ? factor
                                        : meta_default_rope_factor(m->hidden_size, m->num_layers);
        m->rope_scaling_low_freq_factor = 1.0;
        m->rope_scaling_high_freq_factor = high;
        m->rope_scaling_original_max_position_embeddings = 8192;
    }
    m->seq_length = tr_model_longest_seq(m);
    return TR_OK;
}

/* ------------------------------------------------------------------ the files */

typedef struct {
    char dir[4096];
    int mp;
    tr_st_file **f;   /* [mp] */
    uint8_t **used;   /* [mp][tensors] */
    meta_dims d;
} meta_ckpt;

/* consolidated.NN.pth, NN from 00 without a gap: *mp of them */
static int count_files(const char *dir, int *mp)
{
    DIR *dd = opendir(dir);
    if (!dd)
        return tr_fail(errno == ENOENT || errno == ENOTDIR ? TR_ERR_INVALID : TR_ERR_IO,
                       "cannot list %s: %s", dir, strerror(errno));
    enum { MAX_MP = 1024 };
    static const char pre[] = "consolidated.", suf[] = ".pth";
    unsigned char seen[MAX_MP] = {0};
    int most = -1, rc = TR_OK;
    for (struct dirent *de; !rc && (de = readdir(dd));) {
        const char *n = de->d_name;
        size_t len = strlen(n);
        if (strncmp(n, pre, sizeof pre - 1) || len < sizeof pre - 1 + sizeof suf - 1 ||
            strcmp(n + len - (sizeof suf - 1), suf))
            continue;
        char *end = NULL;
        long k = strtol(n + sizeof pre - 1, &end, 10);
        char want[64];
        snprintf(want, sizeof want, "consolidated.%02ld.pth", k);
        if (end == n + sizeof pre - 1 || k < 0 || k >= MAX_MP || strcmp(want, n))
            rc = tr_fail(TR_ERR_INVALID, "%s/%.200s: not a model-parallel rank's file name "
                         "(consolidated.00.pth, consolidated.01.pth, ...)", dir, n);
        else {
            seen[k] = 1;
            most = k > most ? (int)k : most;
        }
    }
    closedir(dd);
    for (int k = 0; !rc && k <= most; k++)
        if (!seen[k])
            rc = tr_fail(TR_ERR_INVALID, "%s/consolidated.%02d.pth is missing (the folder has "
                         "consolidated.%02d.pth: %d model-parallel ranks)", dir, k, most,
                         most + 1);
    if (!rc && most < 0)
        rc = tr_fail(TR_ERR_INVALID, "%s has no consolidated.00.pth (Meta's checkpoint: "
                     "params.json and consolidated.NN.pth, one per model-parallel rank)", dir);
    *mp = most + 1;
    return rc;
}

static int open_files(meta_ckpt *k)
{
    if (!(k->f = calloc((size_t)k->mp, sizeof *k->f)) ||
        !(k->used = calloc((size_t)k->mp, sizeof *k->used)))
        return tr_fail(TR_ERR_NOMEM, "out of memory for %d files", k->mp);
    int rc = TR_OK;
    for (int s = 0; s < k->mp && !rc; s++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/consolidated.%02d.pth", k->dir, s);
        if (!(rc = tr_pt_open(path, &k->f[s])) &&
            !(k->used[s] = calloc(tr_st_count(k->f[s]) + 1, 1)))
            rc = tr_fail(TR_ERR_NOMEM, "out of memory reading %s", path);
    }
    return rc;
}

static void close_files(meta_ckpt *k)
{
    for (int s = 0; k->f && s < k->mp; s++) {
        tr_st_close(k->f[s]);
        if (k->used)
            free(k->used[s]);
    }
    free(k->f);
    free(k->used);
}

/* The sizes divide by MP as Meta's parallel layers split them. */
static int check_split(const meta_ckpt *k)
{
    const meta_dims *d = &k->d;
    const struct {
        const char *what;
        int n;
    } sizes[] = {{"n_heads", d->NH}, {"n_kv_heads", d->NKV}, {"the FFN width", d->F},
                 {"dim", d->C}, {"vocab_size", d->V}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (sizes[i].n % d->mp)
            return tr_fail(TR_ERR_INVALID, "%s: %s %d is not divisible by the %d model-parallel "
                           "files (consolidated.00 .. %02d)%s", k->dir, sizes[i].what, sizes[i].n,
                           d->mp, d->mp - 1, i == 1 ? ": Meta's code has no kv heads to "
                           "replicate (n_kv_heads / MP local heads)" : "");
    return TR_OK;
}

/* Rank s's tensor `name` of part p, marked used, its shape and dtype checked */
static int shard(meta_ckpt *k, const meta_part *p, const char *name, int s,
                 const tr_st_tensor **x)
{
    tr_st_file *f = k->f[s];
    const char *path = tr_st_path(f);
    if (!(*x = tr_st_find(f, name)))
        return tr_fail(TR_ERR_INVALID, "%s: tensor %s is missing", path, name);
    k->used[s][*x - tr_st_at(f, 0)] = 1;
    size_t rows = meta_shard_rows(p, &k->d), cols = meta_shard_cols(p, &k->d);
    const tr_st_tensor *y = *x;
    int ok = cols ? y->ndim == 2 && y->shape[0] == rows && y->shape[1] == cols
                  : y->ndim == 1 && y->shape[0] == rows;
    if (!ok) {
        st_text have = st_shape_text(y);
        return tr_fail(TR_ERR_INVALID, "%s: tensor %s is %s, params.json makes it [%zu%s%.0zu] "
                       "on each of %d model-parallel ranks (dim %d, n_heads %d, n_kv_heads %d, "
                       "FFN width %d from multiple_of and ffn_dim_multiplier, vocabulary %d)",
                       path, name, have.text, rows, cols ? ", " : "", cols, k->d.mp, k->d.C,
                       k->d.NH, k->d.NKV, k->d.F, k->d.V);
    }
    if (y->dtype != TR_ST_F32 && y->dtype != TR_ST_BF16 && y->dtype != TR_ST_F16)
        return tr_fail(TR_ERR_INVALID, "%s: tensor %s is %s, not a F32, BF16 or F16 weight",
                       path, name, tr_st_dtype_name(y->dtype));
    return TR_OK;
}

/* Part p (Meta's `name`) of trident tensor t (whole, at dst) from every rank; buf: one shard */
static int merge_part(meta_ckpt *k, const meta_part *p, const char *name,
                      const tr_param_tensor *t, float *dst, float *buf)
{
    size_t sr = meta_shard_rows(p, &k->d), sc = meta_shard_cols(p, &k->d);
    size_t scols = sc ? sc : 1, cols = (size_t)t->full_cols;
    int rc = TR_OK;
    for (int s = 0; s < k->mp && !rc; s++) {
        const tr_st_tensor *x;
        if ((rc = shard(k, p, name, s, &x)) || (p->split == META_REP && s > 0))
            continue; /* (replicated: rank 0's; the others' shapes checked) */
        if ((rc = hf_read_weight(k->f[s], x, buf)))
            break;
        size_t c0 = meta_whole_col(p, &k->d, s);
        for (size_t i = 0; i < sr; i++) {
            uint64_t row = meta_trident_row(p, &k->d, meta_whole_row(p, &k->d, s, i));
            memcpy(dst + row * cols + c0, buf + i * scols, scols * sizeof(float));
        }
    }
    return rc;
}

/* Every trident tensor of g from its parts */
static int load_model(meta_ckpt *k, tr_gpt *g, float *params)
{
    size_t most = 0;
    int n = tr_gpt_num_tensors(g), rc = TR_OK;
    for (int i = 0; i < n; i++) {
        const tr_param_tensor *t = tr_gpt_tensor(g, i);
        if ((size_t)t->full_rows * (size_t)t->full_cols > most)
            most = (size_t)t->full_rows * (size_t)t->full_cols;
    }
    float *buf = malloc(most * sizeof(float) + 1);
    if (!buf)
        return tr_fail(TR_ERR_NOMEM, "out of memory for a tensor of %zu floats", most);
    for (int i = 0; i < n && !rc; i++) {
        const tr_param_tensor *t = tr_gpt_tensor(g, i);
        int l = -1, used = 0, found = 0;
        char name[300];
        if (sscanf(t->name, "layers.%d.%n", &l, &used) == 1 && used > 0) {
            for (int j = 0; j < META_LAYER_PARTS && !rc; j++)
                if (!strcmp(t->name + used, meta_layer_parts[j].trident)) {
                    snprintf(name, sizeof name, "layers.%d.%s", l, meta_layer_parts[j].meta);
                    rc = merge_part(k, &meta_layer_parts[j], name, t, params + t->offset, buf);
                    found = 1;
                }
        } else
            for (int j = 0; j < META_TOP_PARTS && !rc; j++)
                if (!strcmp(t->name, meta_top_parts[j].trident)) {
                    rc = merge_part(k, &meta_top_parts[j], meta_top_parts[j].meta, t,
                                    params + t->offset, buf);
                    found = 1;
                }
        if (!rc && !found)
            rc = tr_fail(TR_ERR_INTERNAL, "no Meta name for trident tensor '%s'", t->name);
    }
    free(buf);
    return rc;
}

/* Every tensor of every file used (rope.freqs aside: Meta's older files keep the table) */
static int all_used(const meta_ckpt *k)
{
    for (int s = 0; s < k->mp; s++)
        for (size_t j = 0; j < tr_st_count(k->f[s]); j++) {
            const char *n = tr_st_at(k->f[s], j)->name;
            if (!k->used[s][j] && strcmp(n, "rope.freqs"))
                return tr_fail(TR_ERR_INVALID, "%s: tensor %.200s is not part of the Llama "
                               "params.json describes (%d layers)", tr_st_path(k->f[s]), n,
                               k->d.L);
        }
    return TR_OK;
}

/* The vocabulary (params.json's, else tok_embeddings' rows) and whether the head is tied */
static int vocab_and_head(meta_ckpt *k, tr_model_config *m)
{
    const tr_st_tensor *e = tr_st_find(k->f[0], "tok_embeddings.weight");
    if (!e)
        return tr_fail(TR_ERR_INVALID, "%s: tensor tok_embeddings.weight is missing",
                       tr_st_path(k->f[0]));
    if (!m->vocab_size) { /* params.json's -1 (Llama 1 and 2) */
        if (e->ndim != 2 || e->shape[0] < 1 || e->shape[0] > (1u << 26))
            return tr_fail(TR_ERR_INVALID, "%s: tensor tok_embeddings.weight is %s, not [vocab, "
                           "dim / MP] (params.json's vocab_size -1 takes its rows)",
                           tr_st_path(k->f[0]), st_shape_text(e).text);
        m->vocab_size = (int)e->shape[0];
    }
    m->untie_embeddings_and_output_weights = tr_st_find(k->f[0], "output.weight") != NULL;
    return TR_OK;
}

/* META_DIR/tokenizer.model, when there, copied into dir, with the params.json beside it (a
 * Llama 3 tokenizer names its special tokens by the Llama version params.json tells) */
static int copy_tokenizer(const char *meta_dir, const hf_out_dir *o, int rc, int *copied)
{
    char src[4200], params[4200];
    snprintf(src, sizeof src, "%s/tokenizer.model", meta_dir);
    snprintf(params, sizeof params, "%s/params.json", meta_dir);
    *copied = !rc && !access(src, F_OK);
    const char *files[] = {src, "tokenizer.model", params, "params.json", NULL};
    tr_hf_export_options eo = {.files = *copied ? files : NULL};
    return hf_out_end_export(o, rc, &eo);
}

int tr_meta_import(const char *meta_dir, const char *ckpt_dir, tr_model_config *model,
                   tr_meta_info *info)
{
    meta_ckpt k = {0};
    tr_model_config m;
    snprintf(k.dir, sizeof k.dir, "%s", meta_dir);
    int rc = meta_read_params(meta_dir, &m);
    if (!rc)
        rc = count_files(meta_dir, &k.mp);
    if (!rc)
        rc = open_files(&k);
    if (!rc)
        rc = vocab_and_head(&k, &m);
    if (!rc) {
        meta_dims_of(&m, k.mp, &k.d);
        rc = check_split(&k);
    }
    tr_gpt *g = NULL;
    float *params = NULL;
    hf_out_dir o;
    int copied = 0;
    if (!rc)
        rc = hf_whole_model(&m, TR_HF_LLAMA, &g, &params);
    if (!rc)
        rc = load_model(&k, g, params);
    if (!rc)
        rc = all_used(&k);
    if (!rc && !(rc = hf_out_begin(ckpt_dir, &o)))
        rc = copy_tokenizer(meta_dir, &o, tr_checkpoint_save_model(o.tmp, g, params), &copied);
    if (!rc && info)
        *info = (tr_meta_info){
            .mp = k.mp, .tokenizer = copied, .tied = !m.untie_embeddings_and_output_weights,
            .dtype = tr_st_dtype_name(tr_st_find(k.f[0], "tok_embeddings.weight")->dtype)};
    tr_gpt_free(g);
    free(params);
    close_files(&k);
    if (!rc && model)
        *model = m;
    return rc;
}
