/* `trident convert --from megatron`: a Megatron-LM checkpoint's rank files (megatron.h) merged
 * into one whole trident model and written as a release checkpoint. */
#include "hf/hf_internal.h"
#include "hf/megatron_internal.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "train/train.h"

/* One rank file: its objects, args and model chunks (each a state dict). */
typedef struct {
    char path[4400];
    pt_objects *f;
    uint32_t args;
    int n_chunks;
    tr_st_file *chunk[MLM_MAX_VP];
    uint8_t *used[MLM_MAX_VP]; /* by tensor (tr_st_at's order) */
    int layers[MLM_MAX_VP];    /* layers in the chunk */
    int first[MLM_MAX_VP];     /* the global number of its layer 0 */
} mlm_file;

typedef struct {
    mlm_args a;
    int tp, pp, vp, mcore;
    const char *layer_prefix; /* "decoder.layers." or "language_model.encoder.layers." ... */
    const char *top_prefix;   /* "" or "language_model." */
    mlm_file *files;          /* [pp * tp], (p, t) at p * tp + t */
} mlm_ckpt;

/* ------------------------------------------------------------------ files */

/* SAVE's tracker: an iteration >= 0 or "release" (*release 1) */
static int read_tracker(const char *save, int *iteration, int *release)
{
    char path[4400], text[64] = "";
    snprintf(path, sizeof path, "%s/latest_checkpointed_iteration.txt", save);
    FILE *f = fopen(path, "r");
    if (!f)
        return tr_fail(errno == ENOENT ? TR_ERR_INVALID : TR_ERR_IO, "cannot open %s: %s (not "
                       "a Megatron-LM --save folder? --iteration N names one)", path,
                       strerror(errno));
    size_t n = fread(text, 1, sizeof text - 1, f);
    int more = fgetc(f) != EOF;
    fclose(f);
    text[n] = '\0';
    while (n && (text[n - 1] == '\n' || text[n - 1] == ' ' || text[n - 1] == '\r'))
        text[--n] = '\0';
    char *end = NULL;
    long v = strtol(text, &end, 10);
    *release = !more && !strcmp(text, "release");
    if (*release) {
        *iteration = 0;
        return TR_OK;
    }
    if (more || !n || *end || v < 0 || v > 9999999 || text[0] == '-' || text[0] == '+')
        return tr_fail(TR_ERR_INVALID, "%s: '%.40s' is neither an iteration nor 'release'", path,
                       text);
    *iteration = (int)v;
    return TR_OK;
}

static void rank_name(char *buf, size_t cap, int pp, int t, int p)
{
    if (pp > 1)
        snprintf(buf, cap, "mp_rank_%02d_%03d", t, p);
    else
        snprintf(buf, cap, "mp_rank_%02d", t);
}

/* Every mp_rank_* entry of dir is one of the layout's. */
static int no_extra_ranks(const char *dir, int tp, int pp)
{
    DIR *d = opendir(dir);
    if (!d)
        return tr_fail(TR_ERR_IO, "cannot list %s: %s", dir, strerror(errno));
    int rc = TR_OK;
    for (struct dirent *de; !rc && (de = readdir(d));) {
        int ok = strncmp(de->d_name, "mp_rank_", 8) != 0;
        for (int p = 0; p < pp && !ok; p++)
            for (int t = 0; t < tp && !ok; t++) {
                char want[64];
                rank_name(want, sizeof want, pp, t, p);
                ok = !strcmp(want, de->d_name);
            }
        if (!ok)
            rc = tr_fail(TR_ERR_INVALID, "%s/%.200s: a rank folder the args do not have "
                         "(tensor_model_parallel_size %d, pipeline_model_parallel_size %d%s)",
                         dir, de->d_name, tp, pp, pp > 1 ? ": mp_rank_TT_PPP" : ": mp_rank_TT");
    }
    closedir(d);
    return rc;
}

/* The file's objects: args, checkpoint_version, its chunks' state dicts. */
static int open_rank(mlm_file *r, int vp)
{
    int rc = pt_objects_open(r->path, &r->f);
    if (rc)
        return rc;
    pt_pickle *p = pt_objects_pickle(r->f);
    uint32_t top = pt_pickle_top(p), v = 0;
    double version = 0;
    if (pt_value_kind(p, top) != PT_V_DICT)
        return tr_fail(TR_ERR_INVALID, "%s holds %s, not Megatron-LM's dict of args, model, ...",
                       r->path, pt_value_kind_name(p, top));
    if (!pt_value_get(p, top, "args", &r->args))
        return tr_fail(TR_ERR_INVALID, "%s has no args (Megatron-LM's save_checkpoint writes "
                       "them; --no-save-args? they are needed)", r->path);
    if (!pt_value_get(p, top, "checkpoint_version", &v) || !pt_value_number(p, v, &version) ||
        version < 2.0)
        return tr_fail(TR_ERR_INVALID, "%s: checkpoint_version is missing or below 2.0 (older "
                       "files lay out query_key_value's rows otherwise)", r->path);
    int has_model = pt_value_get(p, top, "model", &v);
    if (vp == 1 && !has_model)
        return tr_fail(TR_ERR_INVALID, "%s has no model (its state dict)", r->path);
    if (vp > 1 && has_model)
        return tr_fail(TR_ERR_INVALID, "%s has model, but the args say %d virtual pipeline "
                       "chunks (model0, model1, ...)", r->path, vp);
    for (int c = 0; c < vp && !rc; c++) {
        char key[32];
        snprintf(key, sizeof key, vp > 1 ? "model%d" : "model", c);
        if (!pt_value_get(p, top, key, &v))
            return tr_fail(TR_ERR_INVALID, "%s has no %s (the args say %d virtual pipeline "
                           "chunks)", r->path, key, vp);
        if (pt_value_kind(p, v) != PT_V_DICT)
            return tr_fail(TR_ERR_INVALID, "%s: %s is %s, not a state dict", r->path, key,
                           pt_value_kind_name(p, v));
        if (!(rc = pt_objects_state(r->f, v, &r->chunk[c]))) {
            r->n_chunks++;
            if (!(r->used[c] = calloc(tr_st_count(r->chunk[c]) + 1, 1)))
                rc = tr_fail(TR_ERR_NOMEM, "out of memory reading %s", r->path);
        }
    }
    return rc;
}

static void close_rank(mlm_file *r)
{
    for (int c = 0; c < r->n_chunks; c++) {
        tr_st_close(r->chunk[c]);
        free(r->used[c]);
    }
    pt_objects_close(r->f);
}

/* The iteration's folder, its rank files opened, their args read and compared. */
/* SAVE/release or SAVE/iter_NNNNNNN */
static void iteration_dir(char *dir, size_t cap, const char *save, int iteration, int release)
{
    if (release)
        snprintf(dir, cap, "%s/release", save);
    else
        snprintf(dir, cap, "%s/iter_%07d", save, iteration);
}

static int open_ranks(const char *save, int iteration, int release, mlm_ckpt *k,
                      tr_megatron_info *info)
{
    char dir[4300], first[4400];
    iteration_dir(dir, sizeof dir, save, iteration, release);
    struct stat st;
    if (stat(dir, &st) || !S_ISDIR(st.st_mode))
        return tr_fail(TR_ERR_INVALID, "%s: no such checkpoint folder (iteration %s)", dir,
                       release ? "release" : "from --iteration or the tracker");
    /* rank 0's file tells the layout: mp_rank_00, else mp_rank_00_000 */
    snprintf(first, sizeof first, "%s/mp_rank_00/model_optim_rng.pt", dir);
    if (stat(first, &st))
        snprintf(first, sizeof first, "%s/mp_rank_00_000/model_optim_rng.pt", dir);
    mlm_file r0 = {0};
    snprintf(r0.path, sizeof r0.path, "%s", first);
    int rc = pt_objects_open(r0.path, &r0.f);
    pt_pickle *p0 = rc ? NULL : pt_objects_pickle(r0.f);
    if (!rc && !pt_value_get(p0, pt_pickle_top(p0), "args", &r0.args))
        rc = tr_fail(TR_ERR_INVALID, "%s has no args (Megatron-LM's save_checkpoint writes them; "
                     "they are needed)", r0.path);
    if (!rc)
        rc = mlm_read_args(p0, r0.args, r0.path, &k->a);
    pt_objects_close(r0.f);
    if (rc)
        return rc;
    k->tp = k->a.tp, k->pp = k->a.pp, k->vp = k->a.vp;
    if (!(rc = no_extra_ranks(dir, k->tp, k->pp)) &&
        !(k->files = calloc((size_t)(k->tp * k->pp), sizeof *k->files)))
        rc = tr_fail(TR_ERR_NOMEM, "out of memory for %d rank files", k->tp * k->pp);
    for (int i = 0; !rc && i < k->tp * k->pp; i++) {
        mlm_file *r = &k->files[i];
        char name[64];
        rank_name(name, sizeof name, k->pp, i % k->tp, i / k->tp);
        snprintf(r->path, sizeof r->path, "%s/%s/model_optim_rng.pt", dir, name);
        if (stat(r->path, &st))
            rc = tr_fail(TR_ERR_INVALID, "%s: missing (the args say tensor_model_parallel_size "
                         "%d, pipeline_model_parallel_size %d)", r->path, k->tp, k->pp);
        if (!rc)
            rc = open_rank(r, k->vp);
        mlm_args a;
        if (!rc && i)
            rc = mlm_same_args(pt_objects_pickle(k->files[0].f), k->files[0].args, k->files[0].path,
                               pt_objects_pickle(r->f), r->args, r->path);
        if (!rc && i) /* (the same keys: the same model, checked again for the types) */
            rc = mlm_read_args(pt_objects_pickle(r->f), r->args, r->path, &a);
    }
    if (!rc) {
        pt_pickle *p = pt_objects_pickle(k->files[0].f);
        uint32_t v;
        int64_t it = 0;
        double version = 0;
        if (pt_value_get(p, pt_pickle_top(p), "iteration", &v) && pt_value_int(p, v, &it))
            info->iteration = (int)it;
        if (pt_value_get(p, pt_pickle_top(p), "checkpoint_version", &v) &&
            pt_value_number(p, v, &version))
            info->version = version;
    }
    return rc;
}

/* ------------------------------------------------------------------ names and layers */

/* Which names the files use, and each chunk's layers (1 + the largest local number). */
static int find_layers(mlm_ckpt *k)
{
    static const char *const legacy_layers[] = {"language_model.encoder.layers.",
                                                "language_model.transformer.layers."};
    int mcore = 0, legacy = 0, transformer = 0;
    for (int i = 0; i < k->tp * k->pp; i++)
        for (int c = 0; c < k->vp; c++)
            for (size_t j = 0; j < tr_st_count(k->files[i].chunk[c]); j++) {
                const char *n = tr_st_at(k->files[i].chunk[c], j)->name;
                mcore |= !strncmp(n, "decoder.", 8) || !strncmp(n, "embedding.", 10) ||
                         !strcmp(n, "output_layer.weight");
                legacy |= !strncmp(n, "language_model.", 15);
                transformer |= !strncmp(n, legacy_layers[1], strlen(legacy_layers[1]));
            }
    if (mcore == legacy)
        return tr_fail(TR_ERR_INVALID, "%s: %s", k->files[0].path, mcore
                       ? "its tensors mix megatron-core's names (decoder.*, embedding.*) and the "
                         "legacy model's (language_model.*)"
                       : "no tensor has megatron-core's names (decoder.*, embedding.*) or the "
                         "legacy model's (language_model.*)");
    k->mcore = mcore;
    k->layer_prefix = mcore ? "decoder.layers." : legacy_layers[transformer];
    k->top_prefix = mcore ? "" : "language_model.";
    size_t pl = strlen(k->layer_prefix);
    int next = 0;
    for (int c = 0; c < k->vp; c++)
        for (int p = 0; p < k->pp; p++) {
            for (int t = 0; t < k->tp; t++) {
                mlm_file *r = &k->files[p * k->tp + t];
                int most = -1;
                for (size_t j = 0; j < tr_st_count(r->chunk[c]); j++) {
                    const char *n = tr_st_at(r->chunk[c], j)->name;
                    char *end = NULL;
                    long l = strncmp(n, k->layer_prefix, pl) ? -1 : strtol(n + pl, &end, 10);
                    if (l >= 0 && end && *end == '.' && l < (1 << 20) && l > most)
                        most = (int)l;
                }
                r->layers[c] = most + 1, r->first[c] = next;
                if (r->layers[c] != k->files[p * k->tp].layers[c])
                    return tr_fail(TR_ERR_INVALID, "%s: chunk %d holds %d layers, %s's %d",
                                   r->path, c, r->layers[c], k->files[p * k->tp].path,
                                   k->files[p * k->tp].layers[c]);
            }
            next += k->files[p * k->tp].layers[c];
        }
    if (next != k->a.m.num_layers)
        return tr_fail(TR_ERR_INVALID, "%s: the rank files hold %d layers (%s0..), args.num_layers "
                       "says %d", k->files[0].path, next, k->layer_prefix, k->a.m.num_layers);
    return TR_OK;
}

/* per layer: megatron-core's names, then the legacy model's */
const mlm_name mlm_layer_names[2][MLM_LAYER_NAMES] = {
    {{"ln1.weight", {"input_layernorm.weight", "self_attention.linear_qkv.layer_norm_weight"}, MLM_REP},
     {"ln1.bias", {"input_layernorm.bias", "self_attention.linear_qkv.layer_norm_bias"}, MLM_REP},
     {"qkv.weight", {"self_attention.linear_qkv.weight"}, MLM_ROWS},
     {"qkv.bias", {"self_attention.linear_qkv.bias"}, MLM_ROWS},
     {"attn_proj.weight", {"self_attention.linear_proj.weight"}, MLM_COLS},
     {"attn_proj.bias", {"self_attention.linear_proj.bias"}, MLM_REP},
     {"ln2.weight", {"pre_mlp_layernorm.weight", "mlp.linear_fc1.layer_norm_weight"}, MLM_REP},
     {"ln2.bias", {"pre_mlp_layernorm.bias", "mlp.linear_fc1.layer_norm_bias"}, MLM_REP},
     {"fc.weight", {"mlp.linear_fc1.weight"}, MLM_ROWS},
     {"fc.bias", {"mlp.linear_fc1.bias"}, MLM_ROWS},
     {"fc_proj.weight", {"mlp.linear_fc2.weight"}, MLM_COLS},
     {"fc_proj.bias", {"mlp.linear_fc2.bias"}, MLM_REP}},
    {{"ln1.weight", {"input_norm.weight", "input_layernorm.weight"}, MLM_REP},
     {"ln1.bias", {"input_norm.bias", "input_layernorm.bias"}, MLM_REP},
     {"qkv.weight", {"self_attention.query_key_value.weight"}, MLM_ROWS},
     {"qkv.bias", {"self_attention.query_key_value.bias"}, MLM_ROWS},
     {"attn_proj.weight", {"self_attention.dense.weight"}, MLM_COLS},
     {"attn_proj.bias", {"self_attention.dense.bias"}, MLM_REP},
     {"ln2.weight", {"post_attention_norm.weight", "post_attention_layernorm.weight"}, MLM_REP},
     {"ln2.bias", {"post_attention_norm.bias", "post_attention_layernorm.bias"}, MLM_REP},
     {"fc.weight", {"mlp.dense_h_to_4h.weight"}, MLM_ROWS},
     {"fc.bias", {"mlp.dense_h_to_4h.bias"}, MLM_ROWS},
     {"fc_proj.weight", {"mlp.dense_4h_to_h.weight"}, MLM_COLS},
     {"fc_proj.bias", {"mlp.dense_4h_to_h.bias"}, MLM_REP}}};

/* outside the layers (after the top prefix); lnf's legacy names after the layers' folder */
const mlm_name mlm_top_names[2][MLM_TOP_NAMES] = {
    {{"wte", {"embedding.word_embeddings.weight"}, MLM_ROWS},
     {"wpe", {"embedding.position_embeddings.weight"}, MLM_REP},
     {"lnf.weight", {"decoder.final_layernorm.weight"}, MLM_REP},
     {"lnf.bias", {"decoder.final_layernorm.bias"}, MLM_REP},
     {"output_layer", {"output_layer.weight"}, MLM_ROWS}},
    {{"wte", {"embedding.word_embeddings.weight"}, MLM_ROWS},
     {"wpe", {"embedding.position_embeddings.weight"}, MLM_REP},
     {"lnf.weight", {"final_norm.weight", "final_layernorm.weight"}, MLM_REP},
     {"lnf.bias", {"final_norm.bias", "final_layernorm.bias"}, MLM_REP},
     {"output_layer", {"output_layer.weight"}, MLM_ROWS}}};

int mlm_moe_name(const char *rest, int swiglu, char *name, size_t cap, int *split)
{
    int e = -1, used = 0;
    if (!strcmp(rest, "router.weight")) {
        snprintf(name, cap, "mlp.router.weight");
        *split = MLM_REP;
        return 1;
    }
    if (sscanf(rest, "experts.%d.%n", &e, &used) != 1 || !used)
        return 0;
    int fc = !strcmp(rest + used, "fc.weight"), proj = !strcmp(rest + used, "fc_proj.weight");
    if (!fc && !proj)
        return 0;
    snprintf(name, cap, "mlp.experts.local_experts.%d.linear_fc%d.weight", e, fc ? 1 : 2);
    *split = proj ? MLM_COLS : swiglu ? MLM_GLU : MLM_ROWS;
    return 1;
}

/* Where trident tensor `name` is: the stage p and chunk c, the candidates' full names, its
 * split. */
typedef struct {
    int p, c, split;
    char names[2][256];
} mlm_source;

static int find_source(const mlm_ckpt *k, const tr_param_tensor *t, int swiglu, mlm_source *s)
{
    int l = -1, used = 0, legacy = !k->mcore, moe_split = MLM_REP;
    const mlm_name *m = NULL;
    mlm_name moe = {0};
    char moe_part[128];
    memset(s, 0, sizeof *s);
    if (sscanf(t->name, "layers.%d.%n", &l, &used) == 1 && used > 0) {
        for (int i = 0; i < MLM_LAYER_NAMES && !m; i++)
            if (!strcmp(t->name + used, mlm_layer_names[legacy][i].trident))
                m = &mlm_layer_names[legacy][i];
        if (!m && !legacy &&
            mlm_moe_name(t->name + used, swiglu, moe_part, sizeof moe_part, &moe_split)) {
            moe = (mlm_name){t->name + used, {moe_part, NULL}, moe_split};
            m = &moe;
        }
        for (int c = 0; c < k->vp && m && !s->names[0][0]; c++)
            for (int p = 0; p < k->pp; p++) {
                const mlm_file *r = &k->files[p * k->tp];
                if (l >= r->first[c] && l < r->first[c] + r->layers[c]) {
                    s->p = p, s->c = c;
                    for (int j = 0; j < 2 && m->names[j]; j++)
                        snprintf(s->names[j], sizeof s->names[j], "%s%d.%s", k->layer_prefix,
                                 l - r->first[c], m->names[j]);
                    break;
                }
            }
    } else {
        for (int i = 0; i < MLM_TOP_NAMES && !m; i++)
            if (!strcmp(t->name, mlm_top_names[legacy][i].trident))
                m = &mlm_top_names[legacy][i];
        int last = m && (!strncmp(t->name, "lnf.", 4) || !strcmp(t->name, "output_layer"));
        s->p = last ? k->pp - 1 : 0, s->c = last ? k->vp - 1 : 0;
        /* the legacy final norm is in the layers' folder (language_model.encoder.final_norm) */
        size_t folder = strlen(k->layer_prefix) - strlen("layers.");
        for (int j = 0; m && j < 2 && m->names[j]; j++)
            snprintf(s->names[j], sizeof s->names[j], "%.*s%s",
                     legacy && last && strcmp(t->name, "output_layer") ? (int)folder
                                                                       : (int)strlen(k->top_prefix),
                     legacy && last && strcmp(t->name, "output_layer") ? k->layer_prefix
                                                                       : k->top_prefix,
                     m->names[j]);
    }
    if (!m || !s->names[0][0])
        return tr_fail(TR_ERR_INTERNAL, "no Megatron-LM name for trident tensor '%s'", t->name);
    s->split = swiglu && !strncmp(t->name + used, "fc.", 3) && used ? MLM_GLU : m->split;
    if (m == &moe)
        s->split = moe_split;
    return TR_OK;
}

/* ------------------------------------------------------------------ merging */

/* TP rank t's shard of s (the rank file, its tensor, marked used): its shape checked against
 * rows x cols (cols 0: a vector). */
static int shard(const mlm_ckpt *k, const mlm_source *s, int t, size_t rows, size_t cols,
                 tr_st_file **f, const tr_st_tensor **x)
{
    mlm_file *r = &k->files[s->p * k->tp + t];
    tr_st_file *ch = r->chunk[s->c];
    *f = ch, *x = NULL;
    for (int j = 0; j < 2 && !*x && s->names[j][0]; j++)
        *x = tr_st_find(ch, s->names[j]);
    char chunk[32] = "";
    if (k->vp > 1)
        snprintf(chunk, sizeof chunk, " (model%d)", s->c);
    if (!*x)
        return tr_fail(TR_ERR_INVALID, "%s%s: tensor %s is missing%s%s", r->path, chunk,
                       s->names[0], s->names[1][0] ? " (or " : "",
                       s->names[1][0] ? s->names[1] : "");
    r->used[s->c][*x - tr_st_at(ch, 0)] = 1;
    const tr_st_tensor *y = *x;
    int ok = cols ? y->ndim == 2 && y->shape[0] == rows && y->shape[1] == cols
                  : y->ndim == 1 && y->shape[0] == rows;
    if (!ok) {
        st_text have = st_shape_text(y);
        return tr_fail(TR_ERR_INVALID, "%s%s: tensor %s is %s, the args make it [%zu%s%.0zu] on "
                       "each of %d tensor-parallel ranks", r->path, chunk, y->name, have.text,
                       rows, cols ? ", " : "", cols, k->tp);
    }
    if (y->dtype != TR_ST_F32 && y->dtype != TR_ST_BF16 && y->dtype != TR_ST_F16 &&
        y->dtype != TR_ST_F64)
        return tr_fail(TR_ERR_INVALID, "%s%s: tensor %s is %s, not a floating-point weight",
                       r->path, chunk, y->name, tr_st_dtype_name(y->dtype));
    return TR_OK;
}

/* Trident tensor t (whole, at dst) from its TP shards; buf holds one shard. */
static int merge(const mlm_ckpt *k, const tr_param_tensor *t, const mlm_source *s, float *dst,
                 float *buf)
{
    int TP = k->tp;
    size_t R = t->vocab_rows ? (size_t)k->a.padded_vocab : (size_t)t->full_rows;
    size_t C = t->full_cols > 1 ? (size_t)t->full_cols : 0; /* 0: a vector (cols 1) */
    size_t cols = C ? C : 1;
    int rc = TR_OK;
    for (int r = 0; r < TP && !rc; r++) {
        size_t sr = mlm_shard_rows(s->split, R, TP), sc = mlm_shard_cols(s->split, C, TP);
        tr_st_file *f;
        const tr_st_tensor *x;
        if ((rc = shard(k, s, r, sr, sc, &f, &x)) || (s->split == MLM_REP && r > 0))
            continue;
        if ((rc = hf_read_weight(f, x, buf)))
            break;
        size_t scols = sc ? sc : 1;
        for (size_t i = 0; i < sr; i++) {
            size_t row = mlm_whole_row(s->split, r, sr, i);
            if (row >= (size_t)t->full_rows)
                continue; /* the vocabulary's padding */
            memcpy(dst + row * cols + (s->split == MLM_COLS ? r * scols : 0), buf + i * scols,
                   scols * sizeof(float));
        }
    }
    return rc;
}

/* Every tensor of every chunk used (a tied head's copy excepted, and rope's inv_freq). */
static int all_used(const mlm_ckpt *k)
{
    for (int i = 0; i < k->tp * k->pp; i++)
        for (int c = 0; c < k->vp; c++) {
            const mlm_file *r = &k->files[i];
            for (size_t j = 0; j < tr_st_count(r->chunk[c]); j++) {
                const char *n = tr_st_at(r->chunk[c], j)->name;
                size_t nl = strlen(n);
                int head_copy = !k->a.m.untie_embeddings_and_output_weights && i / k->tp == k->pp - 1 &&
                                k->pp > 1 && (!strcmp(n, "output_layer.weight") ||
                                              !strcmp(n, "word_embeddings_for_head.weight"));
                int inv_freq = nl > 9 && !strcmp(n + nl - 9, ".inv_freq");
                if (!r->used[c][j] && !head_copy && !inv_freq)
                    return tr_fail(TR_ERR_INVALID, "%s: tensor %s%s is not part of the model "
                                   "its args describe (%s names)", r->path, n,
                                   k->vp > 1 ? " (a virtual chunk's)" : "",
                                   k->mcore ? "megatron-core" : "legacy");
            }
        }
    return TR_OK;
}

/* The whole model g from the rank files. */
static int load_model(const mlm_ckpt *k, tr_gpt *g, float *params)
{
    size_t most = 0;
    int n = tr_gpt_num_tensors(g), rc = TR_OK;
    for (int i = 0; i < n; i++) {
        const tr_param_tensor *t = tr_gpt_tensor(g, i);
        size_t rows = t->vocab_rows ? (size_t)k->a.padded_vocab : (size_t)t->full_rows;
        if (rows * (size_t)t->full_cols > most)
            most = rows * (size_t)t->full_cols;
    }
    float *buf = malloc(most * sizeof(float) + 1);
    if (!buf)
        return tr_fail(TR_ERR_NOMEM, "out of memory for a tensor of %zu floats", most);
    for (int i = 0; i < n && !rc; i++) {
        const tr_param_tensor *t = tr_gpt_tensor(g, i);
        mlm_source s;
        if (!(rc = find_source(k, t, k->a.m.swiglu, &s)))
            rc = merge(k, t, &s, params + t->offset, buf);
    }
    free(buf);
    return rc ? rc : all_used(k);
}

int tr_megatron_import(const char *save_dir, int iteration, const char *ckpt_dir,
                       tr_model_config *model, tr_megatron_info *info)
{
    mlm_ckpt k = {0};
    tr_megatron_info in = {0};
    int release = 0, rc = TR_OK;
    if (iteration < 0)
        rc = read_tracker(save_dir, &iteration, &release);
    in.iteration = iteration, in.release = release;
    char dir[4300], json[4400];
    struct stat st;
    iteration_dir(dir, sizeof dir, save_dir, iteration, release);
    snprintf(json, sizeof json, "%s/metadata.json", dir);
    if (!rc && !stat(json, &st)) { /* --ckpt-format torch_dist (megatron_dist.c) */
        if (!(rc = mlm_dist_import(dir, ckpt_dir, model, &in)) && info)
            *info = in;
        return rc;
    }
    if (!rc)
        rc = open_ranks(save_dir, iteration, release, &k, &in);
    if (!rc)
        rc = find_layers(&k);
    tr_gpt *g = NULL;
    float *params = NULL;
    hf_out_dir o;
    if (!rc)
        rc = hf_whole_model(&k.a.m, k.a.m.num_experts ? TR_HF_MIXTRAL : TR_HF_LLAMA, &g,
                            &params); /* (experts: a Mixtral's layer, as hf_whole_model allows) */
    if (!rc)
        rc = load_model(&k, g, params);
    if (!rc && !(rc = hf_out_begin(ckpt_dir, &o)))
        rc = hf_out_end(&o, tr_checkpoint_save_model(o.tmp, g, params));
    tr_gpt_free(g);
    free(params);
    for (int i = 0; k.files && i < k.tp * k.pp; i++)
        close_rank(&k.files[i]);
    free(k.files);
    if (!rc) {
        in.tp = k.tp, in.pp = k.pp, in.vp = k.vp, in.mcore = k.mcore;
        in.padded_vocab = k.a.padded_vocab;
        if (model)
            *model = k.a.m;
        if (info)
            *info = in;
    }
    return rc;
}
