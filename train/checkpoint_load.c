/* Loading a checkpoint (format: checkpoint.c): the tracker, the manifest, every tensor file
 * verified against its checksums, then this rank's pieces of every tensor it holds. */
#include "train/checkpoint_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"

/* The tracker's iteration: 0 for a release checkpoint, -1 when DIR has no checkpoint. */
int ckpt_read_tracker(const char *dir, int *iteration)
{
    char path[4200], buf[64];
    int rc = ckpt_join(path, sizeof path, dir, TRACKER);
    if (rc)
        return rc;
    *iteration = -1;
    FILE *f = fopen(path, "r");
    if (!f)
        return errno == ENOENT ? TR_OK : tr_fail(TR_ERR_IO, "cannot read %s: %s", path, strerror(errno));
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *end;
    long it = strtol(buf, &end, 10);
    if (end == buf && !strncmp(buf, RELEASE, strlen(RELEASE)))
        it = 0, end = buf + strlen(RELEASE);
    while (*end == '\n' || *end == '\r' || *end == ' ')
        end++;
    if (end == buf || *end || it < 0 || it > 1000000000 || (it == 0 && buf[0] != 'r'))
        return tr_fail(TR_ERR_INVALID, "%s: expected an iteration number >= 1 or '" RELEASE "', "
                       "found '%.20s'", path, buf);
    *iteration = (int)it;
    return TR_OK;
}

int ckpt_folder(char *buf, size_t cap, const char *dir, int iteration)
{
    char leaf[32];
    if (iteration == 0)
        snprintf(leaf, sizeof leaf, RELEASE);
    else
        snprintf(leaf, sizeof leaf, "iter_%07d", iteration);
    return ckpt_join(buf, cap, dir, leaf);
}

/* Size and the checksums of the first n_arrays arrays of one tensor file against the manifest. */
int ckpt_verify_tensor(const char *ckpt_dir, const ckpt_record *t, int n_arrays)
{
    char path[4200];
    int rc = ckpt_join(path, sizeof path, ckpt_dir, t->name);
    if (rc)
        return rc;
    uint64_t numel = (uint64_t)t->rows * (uint64_t)t->cols, want = N_ARRAYS * numel * sizeof(float);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return tr_fail(TR_ERR_INVALID, "checkpoint file %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) || (uint64_t)st.st_size != want) {
        close(fd);
        return tr_fail(TR_ERR_INVALID, "checkpoint file %s is %lld bytes; the manifest says %" PRIu64
                       " (%zu x %d x 3 fp32): truncated or replaced", path, (long long)st.st_size, want,
                       t->rows, t->cols);
    }
    enum { CHUNK = 1 << 18 };
    float *buf = tr_alloc(CHUNK * sizeof(float), "checkpoint verification");
    if (!buf) {
        close(fd);
        return TR_ERR_NOMEM;
    }
    for (int a = 0; a < n_arrays && !rc; a++) {
        uint64_t sum = 0, bad = numel; /* the first value that cannot be: its element */
        float bad_value = 0;
        for (uint64_t i = 0; i < numel && !rc; i += CHUNK) {
            size_t n = numel - i < CHUNK ? (size_t)(numel - i) : CHUNK;
            if (tr_pread_all(fd, buf, n * sizeof(float), (a * numel + i) * sizeof(float))) {
                rc = tr_fail(TR_ERR_IO, "cannot read %s: %s", path,
                             errno ? strerror(errno) : "short file");
                break;
            }
            sum += ckpt_checksum(buf, i, n);
            for (size_t j = 0; j < n && bad == numel; j++)
                if (!isfinite(buf[j]) || (a == 2 && buf[j] < 0))
                    bad = i + j, bad_value = buf[j];
        }
        if (!rc && sum != t->sum[a])
            rc = tr_fail(TR_ERR_INVALID, "checkpoint file %s: the checksum of its %s is %016" PRIx64
                         ", the manifest says %016" PRIx64 " (corrupt data)", path, ckpt_array_names[a], sum,
                         t->sum[a]);
        /* a matching checksum says the file holds what was written, not that it is sound: a
         * non-finite parameter or moment, or a negative exp_avg_sq (Adam takes its square
         * root), would be trained on silently */
        else if (!rc && bad < numel)
            rc = tr_fail(TR_ERR_INVALID, "checkpoint file %s: its %s holds %g at element %" PRIu64
                         " (row %" PRIu64 ", column %" PRIu64 "), where a checkpoint holds finite "
                         "values%s (corrupt data)", path, ckpt_array_names[a], (double)bad_value,
                         bad, bad / (uint64_t)t->cols, bad % (uint64_t)t->cols,
                         a == 2 ? " >= 0" : "");
    }
    tr_free(buf);
    close(fd);
    return rc;
}

int ckpt_read_segment(void *ctx, size_t local, uint64_t elem, size_t count)
{
    ckpt_read_ctx *r = ctx;
    if (tr_pread_all(r->fd, r->dst + local, count * sizeof(float),
                   ((uint64_t)r->array * r->numel + elem) * sizeof(float)))
        return tr_fail(TR_ERR_IO, "cannot read %s: %s", r->path, errno ? strerror(errno) : "short file");
    return TR_OK;
}

typedef struct {
    const tr_param_tensor *t;
    int tp_rank;
    size_t rows_saved;
    float *moment; /* host, compact shard */
    ckpt_read_ctx *r;
} moment_read_ctx;

static int read_moment_piece(void *ctx, size_t local, size_t count, size_t shard_at)
{
    moment_read_ctx *m = ctx;
    m->r->dst = m->moment + shard_at - local;
    return ckpt_for_each_segment(m->t, m->tp_rank, m->rows_saved, local, local + count,
                                 ckpt_read_segment, m->r);
}

/* This rank's pieces of every tensor it holds (every copy, every replica). */
static int read_rank_pieces(tr_engine *e, const char *ckpt_dir, const ckpt_manifest *mf)
{
    size_t shard = engine_moments_numel(e);
    float *params = tr_alloc(e->n_params * sizeof(float), "checkpoint staging");
    float *m = tr_alloc(shard * sizeof(float) + 1, "checkpoint staging");
    float *v = tr_alloc(shard * sizeof(float) + 1, "checkpoint staging");
    int rc = params && m && v ? TR_OK : TR_ERR_NOMEM;
    if (!rc) /* rows the checkpoint does not hold (vocabulary padding) keep their initial values */
        e->k->to_host(NULL, params, e->params, e->n_params * sizeof(float));
    int tp_rank = tr_gpt_get_shape(e->chunks[0].model)->tp_rank;
    float *const moments[2] = {m, v};
    for (int c = 0; c < e->v && !rc; c++)
        for (int i = 0; i < tr_gpt_num_tensors(e->chunks[c].model) && !rc; i++) {
            const tr_param_tensor *t = tr_gpt_tensor(e->chunks[c].model, i);
            ckpt_record key = {0};
            snprintf(key.name, sizeof key.name, "%s", t->name);
            const ckpt_record *rec = bsearch(&key, mf->tensors, mf->n, sizeof key, ckpt_cmp_record);
            size_t rows_saved = ckpt_saved_rows(e, t);
            if (!rec) {
                rc = tr_fail(TR_ERR_INVALID, "checkpoint %s has no tensor %s", ckpt_dir, t->name);
                break;
            }
            if (rec->rows != rows_saved || rec->cols != t->full_cols) {
                rc = tr_fail(TR_ERR_INVALID, "checkpoint %s: tensor %s is %zu x %d; this model's is %zu x %d",
                             ckpt_dir, t->name, rec->rows, rec->cols, rows_saved, t->full_cols);
                break;
            }
            char path[4200];
            if ((rc = ckpt_join(path, sizeof path, ckpt_dir, t->name)))
                break;
            size_t offset = e->chunks[c].offset + t->offset;
            ckpt_read_ctx r = {.path = path, .numel = (uint64_t)rec->rows * (uint64_t)rec->cols,
                          .dst = params + offset};
            if ((r.fd = open(path, O_RDONLY)) < 0) {
                rc = tr_fail(TR_ERR_INVALID, "checkpoint file %s: %s", path, strerror(errno));
                break;
            }
            rc = ckpt_for_each_segment(t, tp_rank, rows_saved, 0, t->numel, ckpt_read_segment, &r);
            for (int k = 0; k < 2 && !rc; k++) {
                moment_read_ctx mc = {.t = t, .tp_rank = tp_rank, .rows_saved = rows_saved,
                                      .moment = moments[k], .r = &r};
                r.array = 1 + k;
                rc = ckpt_for_each_moment_piece(e, offset, t->numel, read_moment_piece, &mc);
            }
            close(r.fd);
        }
    const tr_gpt_shape *s = tr_gpt_get_shape(e->chunks[0].model);
    int one_stage = e->v == 1 && s->is_first && s->is_last; /* all names, else its layers' */
    for (int c = 0; c < e->v && !rc; c++)
        rc = ckpt_no_other_tensors(mf, ckpt_dir, e->chunks[c].model, 0, !one_stage);
    if (!rc) {
        e->k->to_device(NULL, e->params, params, e->n_params * sizeof(float));
        e->k->to_device(NULL, e->adam_m, m, shard * sizeof(float));
        e->k->to_device(NULL, e->adam_v, v, shard * sizeof(float));
    }
    tr_free(params);
    tr_free(m);
    tr_free(v);
    return rc;
}

int tr_checkpoint_load(tr_engine *e, const char *dir, int *iteration)
{
    *iteration = -1;
    int it = -1;
    int rc = ckpt_read_tracker(dir, &it);
    if ((rc = tr_engine_agree(e, rc, "loading the checkpoint")) || it < 0)
        return rc;
    char ckpt_dir[4200], path[4300];
    ckpt_manifest mf = {0};
    rc = ckpt_folder(ckpt_dir, sizeof ckpt_dir, dir, it);
    if (!rc)
        rc = ckpt_join(path, sizeof path, ckpt_dir, "manifest.txt");
    if (!rc)
        rc = ckpt_read_manifest(path, it, &mf);
    if (!rc)
        rc = ckpt_same_model(&e->cfg->model, &mf, path);
    if (!rc)
        rc = ckpt_same_family(tr_gpt_get_shape(e->chunks[0].model), &mf, path);
    if (!rc)
        rc = ckpt_same_lora(tr_gpt_get_shape(e->chunks[0].model), &mf, path, 1,
                            e->world.rank == 0);
    if (!rc)
        rc = ckpt_same_data(e, &mf, path);
    if (!rc && e->world.rank == 0) { /* other rates are the run's to choose: a note */
        char what[4300];
        snprintf(what, sizeof what, "checkpoint %s", ckpt_dir);
        ckpt_note_dropout(tr_gpt_get_shape(e->chunks[0].model), &mf, what);
    }
    if ((rc = tr_engine_agree(e, rc, "loading the checkpoint"))) {
        free(mf.tensors);
        return rc;
    }
    /* every tensor file is checked whole by one rank */
    for (size_t j = (size_t)e->world.rank; j < mf.n && !rc; j += (size_t)e->world.size)
        rc = ckpt_verify_tensor(ckpt_dir, &mf.tensors[j], N_ARRAYS);
    if (!(rc = tr_engine_agree(e, rc, "verifying the checkpoint")))
        rc = tr_engine_agree(e, read_rank_pieces(e, ckpt_dir, &mf), "loading the checkpoint");
    if (!rc) /* the data position: by consumed samples, so another global batch size goes on
              * with the next unseen samples */
        e->consumed_samples = mf.has_data ? mf.consumed_samples
                                          : (uint64_t)it * (uint64_t)e->cfg->training.global_batch_size;
    if (!rc && mf.has_scaler && e->scaler.on) { /* fp16: the scaler goes on where it was */
        if (e->scaler.dynamic)
            e->scaler.scale = mf.loss_scale, e->scaler.growth = mf.scaler_growth,
            e->scaler.hysteresis_left = mf.scaler_hysteresis_left;
        e->scaler.skipped = mf.skipped_iterations; /* Adam's steps and the LR: it - skipped */
        /* a sample-based LR: consumed - the skipped steps' samples (written when a ramp-up
         * made them other than skipped x the batch) */
        e->scaler.skipped_samples =
            mf.skipped_samples != ~0ull ? mf.skipped_samples
                                        : (uint64_t)mf.skipped_iterations *
                                              (uint64_t)(mf.has_data ? mf.global_batch_size
                                                                     : e->cfg->training.global_batch_size);
    }
    free(mf.tensors);
    if (!rc)
        *iteration = it;
    return rc;
}

int ckpt_same_data(const tr_engine *e, const ckpt_manifest *mf, const char *path)
{
    if (!mf->has_data)
        return TR_OK; /* written before the data line, or imported: nothing to compare */
    const tr_config *cfg = e->cfg;
    const tr_training_config *t = &cfg->training;
    char split[64], diff[1024] = "";
    ckpt_split_text(cfg->data.split, split, sizeof split);
    size_t n = 0;
#define DIFF(cond, ...)                                                                            \
    if ((cond) && n < sizeof diff)                                                                 \
        n += (size_t)snprintf(diff + n, sizeof diff - n, __VA_ARGS__);
    DIFF(mf->seed != (unsigned long long)t->seed, "; training.seed %llu (the checkpoint's run: %llu)",
         (unsigned long long)t->seed, mf->seed)
    DIFF(strcmp(mf->split, split), "; data.split %s (the checkpoint's run: %s)", split, mf->split)
    DIFF(mf->tokens != tr_data_num_tokens(e->data) || mf->documents != tr_data_num_documents(e->data),
         "; data.data_path %s holds %llu tokens in %llu documents (the checkpoint's run read %llu "
         "in %llu)", tr_data_name(e->data), (unsigned long long)tr_data_num_tokens(e->data),
         (unsigned long long)tr_data_num_documents(e->data), mf->tokens, mf->documents)
#undef DIFF
    if (!n)
        return TR_OK;
    return tr_fail(TR_ERR_CONFIG, "%s: resuming with other data than the checkpoint's run would "
                   "skip or repeat samples (it consumed %llu): %s; resume with its values, or "
                   "start a new run", path, mf->consumed_samples, diff + 2);
}

void ckpt_note_dropout(const tr_gpt_shape *s, const ckpt_manifest *mf, const char *what)
{
    double hidden = mf->has_dropout ? mf->hidden_dropout : 0.0;
    double attention = mf->has_dropout ? mf->attention_dropout : 0.0;
    if ((float)hidden == s->hidden_dropout && (float)attention == s->attention_dropout)
        return;
    tr_warn("%s was trained with hidden_dropout %g and attention_dropout %g (%s); this run "
            "uses model.hidden_dropout %g and model.attention_dropout %g (the config's, which "
            "win)", what, hidden, attention,
            mf->has_dropout ? "its manifest's dropout line" : "its manifest has no dropout line",
            (double)s->hidden_dropout, (double)s->attention_dropout);
}

int ckpt_same_family(const tr_gpt_shape *s, const ckpt_manifest *mf, const char *path)
{
    if (!mf->has_family)
        return TR_OK; /* written before the family line: nothing to compare */
    ckpt_manifest my = {0};
    ckpt_manifest_family(&my, s);
    static const char *const norm[2] = {"LayerNorm", "RMSNorm"};
    static const char *const pos[3] = {"learned_absolute", "rope", "alibi"};
    static const char *const rope_kind[3] = {"none", "linear", "llama3"}; /* TR_ROPE_SCALING_* */
    char diff[1024] = "";
    size_t n = 0;
#define DIFF(cond, ...)                                                                            \
    if ((cond) && n < sizeof diff)                                                                 \
        n += (size_t)snprintf(diff + n, sizeof diff - n, __VA_ARGS__);
    DIFF(my.rmsnorm != mf->rmsnorm, "; normalization %s (the checkpoint's: %s)", norm[my.rmsnorm],
         norm[mf->rmsnorm])
    DIFF(my.position != mf->position, "; position_embedding_type %s (the checkpoint's: %s)",
         pos[my.position], pos[mf->position])
    DIFF(my.position == 1 && mf->position == 1 && (my.rotary_dims != mf->rotary_dims ||
                                                   (float)my.rotary_base != (float)mf->rotary_base),
         "; %d rotary dimensions of base %g (the checkpoint's: %d of base %g)", my.rotary_dims,
         my.rotary_base, mf->rotary_dims, mf->rotary_base)
    DIFF(my.swiglu != mf->swiglu, "; swiglu %d (the checkpoint's: %d)", my.swiglu, mf->swiglu)
    DIFF(my.ffn != mf->ffn, "; ffn_hidden_size %d (the checkpoint's: %d)", my.ffn, mf->ffn)
    DIFF(my.query_groups != mf->query_groups, "; num_query_groups %d (the checkpoint's: %d)",
         my.query_groups, mf->query_groups)
    DIFF(my.untie != mf->untie, "; untie_embeddings_and_output_weights %d (the checkpoint's: %d)",
         my.untie, mf->untie)
    DIFF(my.linear_bias != mf->linear_bias, "; add_bias_linear %d (the checkpoint's: %d)",
         my.linear_bias, mf->linear_bias)
    DIFF(my.qkv_bias != mf->qkv_bias, "; add_qkv_bias %d (the checkpoint's: %d)", my.qkv_bias,
         mf->qkv_bias)
    DIFF(my.mlp_bias != mf->mlp_bias, "; add_mlp_bias %d (the checkpoint's: %d)", my.mlp_bias,
         mf->mlp_bias)
    DIFF(my.no_norm_bias != mf->no_norm_bias, "; layernorm_bias %d (the checkpoint's: %d)",
         !my.no_norm_bias, !mf->no_norm_bias)
    DIFF(my.sliding_window != mf->sliding_window, "; sliding_window %d (the checkpoint's: %d)",
         my.sliding_window, mf->sliding_window)
    DIFF(my.parallel_residual != mf->parallel_residual,
         "; parallel_residual %d (the checkpoint's: %d)", my.parallel_residual,
         mf->parallel_residual)
    DIFF(my.output_bias != mf->output_bias, "; output_layer_bias %d (the checkpoint's: %d)",
         my.output_bias, mf->output_bias)
    DIFF(my.parallel_shared_norm != mf->parallel_shared_norm,
         "; parallel_shared_norm %d (the checkpoint's: %d)", my.parallel_shared_norm,
         mf->parallel_shared_norm)
    DIFF(my.gelu_exact != mf->gelu_exact, "; gelu_approximate %s (the checkpoint's: %s)",
         my.gelu_exact ? "none" : "tanh", mf->gelu_exact ? "none" : "tanh")
    DIFF(my.emb_ln != mf->emb_ln, "; embedding_layernorm %d (the checkpoint's: %d)", my.emb_ln,
         mf->emb_ln)
    DIFF(my.kv_channels != mf->kv_channels, "; kv_channels %d (the checkpoint's: %d; 0: hidden "
         "/ heads)", my.kv_channels, mf->kv_channels)
    DIFF(my.layernorm_1p != mf->layernorm_1p, "; apply_layernorm_1p %d (the checkpoint's: %d)",
         my.layernorm_1p, mf->layernorm_1p)
    DIFF((float)my.embedding_multiplier != (float)mf->embedding_multiplier,
         "; embedding_multiplier %g (the checkpoint's: %g)",
         my.embedding_multiplier ? my.embedding_multiplier : 1.0,
         mf->embedding_multiplier ? mf->embedding_multiplier : 1.0)
    DIFF(my.geglu != mf->geglu, "; geglu %d (the checkpoint's: %d)", my.geglu, mf->geglu)
    DIFF(my.relu != mf->relu, "; relu %d (the checkpoint's: %d)", my.relu, mf->relu)
    DIFF(my.hf_phi3 != mf->hf_phi3, "; hf_family %s (the checkpoint's: %s)",
         my.hf_phi3 ? "phi3" : "auto", mf->hf_phi3 ? "phi3" : "auto")
    DIFF(my.rope_scaling != mf->rope_scaling || (float)my.rope_factor != (float)mf->rope_factor ||
             (float)my.rope_low != (float)mf->rope_low ||
             (float)my.rope_high != (float)mf->rope_high || my.rope_original != mf->rope_original,
         "; rope scaling %s factor %g (the checkpoint's: %s factor %g)",
         rope_kind[my.rope_scaling], my.rope_factor, rope_kind[mf->rope_scaling], mf->rope_factor)
    DIFF((float)my.eps != (float)mf->eps, "; layernorm_epsilon %g (the checkpoint's: %g)", my.eps,
         mf->eps)
    DIFF(my.moe_experts != mf->moe_experts || my.moe_topk != mf->moe_topk ||
             my.moe_pre_softmax != mf->moe_pre_softmax || my.moe_aux_loss != mf->moe_aux_loss,
         "; num_experts %d top-%d pre_softmax %d balancing %s (the checkpoint's: %d top-%d "
         "pre_softmax %d balancing %s)", my.moe_experts, my.moe_topk, my.moe_pre_softmax,
         my.moe_aux_loss ? "aux_loss" : "none", mf->moe_experts, mf->moe_topk,
         mf->moe_pre_softmax, mf->moe_aux_loss ? "aux_loss" : "none")
#undef DIFF
    if (!n)
        return TR_OK;
    return tr_fail(TR_ERR_INVALID, "%s: the checkpoint is of another model than the config's "
                   "(its manifest's family line): %s", path, diff + 2);
}

int ckpt_same_lora(const tr_gpt_shape *s, const ckpt_manifest *mf, const char *path,
                   int refuse_plain, int warn)
{
    char have[32], want[32];
    if (!mf->has_lora) {
        int adapters = 0; /* written before the lora line: the config's alpha, unchecked */
        for (size_t j = 0; j < mf->n && !adapters; j++)
            adapters = strstr(mf->tensors[j].name, ".lora_A") != NULL;
        if (adapters && s->lora_rank && warn)
            tr_warn("%s has no lora line (a checkpoint written before trident recorded "
                    "finetune.lora.alpha): the config's finetune.lora.alpha %g is taken as the "
                    "one its adapters were trained with, unchecked", path, (double)s->lora_alpha);
        return TR_OK;
    }
    ckpt_lora_targets_text(mf->lora_targets, have, sizeof have);
    if (!s->lora_rank) {
        if (!refuse_plain)
            return TR_OK;
        return tr_fail(TR_ERR_CONFIG, "%s: the checkpoint holds a LoRA run's adapters "
                       "(finetune.lora.rank %d, alpha %g, target_modules [%s]); the config has "
                       "no finetune.lora.rank: use the run's finetune.lora settings", path,
                       mf->lora_rank, mf->lora_alpha, have);
    }
    ckpt_lora_targets_text(s->lora_targets, want, sizeof want);
    char diff[512] = "";
    size_t n = 0;
#define DIFF(cond, ...)                                                                            \
    if ((cond) && n < sizeof diff)                                                                 \
        n += (size_t)snprintf(diff + n, sizeof diff - n, __VA_ARGS__);
    DIFF(s->lora_rank != mf->lora_rank, "; finetune.lora.rank %d (the checkpoint's: %d)",
         s->lora_rank, mf->lora_rank)
    /* compared as the model keeps it: a float */
    DIFF(s->lora_alpha != (float)mf->lora_alpha, "; finetune.lora.alpha %g (the checkpoint's: "
         "%g)", (double)s->lora_alpha, mf->lora_alpha)
    DIFF(s->lora_targets != mf->lora_targets, "; finetune.lora.target_modules [%s] (the "
         "checkpoint's: [%s])", want, have)
#undef DIFF
    if (!n)
        return TR_OK;
    return tr_fail(TR_ERR_CONFIG, "%s: the config's LoRA settings are not those the checkpoint's "
                   "adapters were trained with (its manifest's lora line): %s; with them a resume "
                   "or an export would be another model (the adapters are scaled by alpha / rank, "
                   "and only the configured targets' are read): use the run's values", path,
                   diff + 2);
}

int ckpt_same_model(const tr_model_config *mc, const ckpt_manifest *mf, const char *path)
{
    if (mf->num_layers == mc->num_layers && mf->hidden_size == mc->hidden_size &&
        mf->num_attention_heads == mc->num_attention_heads && mf->vocab_size == mc->vocab_size &&
        mf->max_position_embeddings == mc->max_position_embeddings)
        return TR_OK;
    return tr_fail(TR_ERR_INVALID, "%s: the checkpoint is of a different model (num_layers %d, "
                   "hidden_size %d, num_attention_heads %d, vocab_size %d, "
                   "max_position_embeddings %d); the config has %d, %d, %d, %d, %d", path,
                   mf->num_layers, mf->hidden_size, mf->num_attention_heads, mf->vocab_size,
                   mf->max_position_embeddings, mc->num_layers, mc->hidden_size,
                   mc->num_attention_heads, mc->vocab_size, mc->max_position_embeddings);
}
