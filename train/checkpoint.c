/* Checkpoints that do not depend on the layout: one file per whole (unsharded) tensor, so a
 * run saved under one (DP, TP, PP) layout resumes under any other.
 *
 *   DIR/latest_checkpointed_iteration.txt    "K\n" (Megatron's tracker file), replaced atomically
 *   DIR/iter_000000K/manifest.txt             format, iteration, model shape, the data line
 *                                             (consumed samples, global batch, seed, the
 *                                             dataset's tokens and documents, split: a
 *                                             resume with other data is refused), the
 *                                             family line (the model's switches), a LoRA
 *                                             run's lora line (rank, alpha, target modules:
 *                                             a resume or export with others is refused), and per
 *                                             tensor: name, rows, cols and a checksum of
 *                                             each array
 *   DIR/iter_000000K/NAME.bin                 three fp32 arrays of rows x cols (row-major):
 *                                             the parameter, Adam's exp_avg, Adam's exp_avg_sq
 *
 * Shapes are the single-process ones; the word embedding keeps its vocab_size real rows (the
 * padding depends on T and its rows never see a token). Saving: each rank writes the pieces it
 * is the one owner of (DP rank 0 for parameters and, without ZeRO-1, the moments; each DP
 * rank its ZeRO-1 shard of the moments; TP rank 0 for replicated tensors; stage 0 for the
 * tied embedding; with expert parallelism an expert's EDP rank 0 and EDP shards, under the
 * expert's global name) with pwrite into a temporary directory, and the sum over its elements of a
 * hash of (position, bits); rank 0 adds the partial sums into the manifest, renames the
 * directory into place and then replaces the tracker. Loading: the tensors of the manifest
 * are verified (size and checksums, each by one rank), then each rank reads its pieces. */
#include "train/checkpoint_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"

const char *const ckpt_array_names[N_ARRAYS] = {"parameter", "exp_avg", "exp_avg_sq"};

void ckpt_split_text(const char *split, char *out, size_t cap)
{
    size_t n = 0;
    for (const char *p = split; *p && n + 1 < cap; p++)
        if (*p != ' ' && *p != '\t')
            out[n++] = *p == '/' ? ',' : *p;
    out[n] = '\0';
}

/* ------------------------------------------------------------------ checksums */

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* Sum (mod 2^64) over elements of hash(position, bits): order-free, so the ranks that write
 * pieces of one array can each sum theirs and the sums add up to the whole array's. */
uint64_t ckpt_checksum(const float *v, uint64_t first, size_t n)
{
    uint64_t s = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, &v[i], sizeof bits);
        s += mix64(mix64(first + i) ^ bits);
    }
    return s;
}

/* ------------------------------------------------------------------ tensor geometry */

/* Rows of the tensor kept in a checkpoint: the real vocabulary for the word embedding. */
size_t ckpt_saved_rows(const tr_engine *e, const tr_param_tensor *t)
{
    int V = tr_gpt_get_shape(e->chunks[0].model)->V;
    return t->vocab_rows && t->full_rows > V ? (size_t)V : (size_t)t->full_rows;
}

/* Splits the local elements [a, b) of tensor t (this TP rank's shard) into runs that are
 * contiguous in the saved whole tensor, and calls fn with each run's local index, position in
 * the saved array and length. Rows past the saved ones (vocabulary padding) are skipped. */
int ckpt_for_each_segment(const tr_param_tensor *t, int tp_rank, size_t rows_saved, size_t a,
                             size_t b, ckpt_segment_fn fn, void *ctx)
{
    size_t cols = (size_t)t->cols, full_cols = (size_t)t->full_cols;
    while (a < b) {
        size_t r = a / cols, c = a % cols;
        size_t R = t->split_dim == 0 ? (size_t)tp_rank * (size_t)t->rows + r : r;
        if (R >= rows_saved)
            break; /* rows only grow from here */
        size_t C = t->split_dim == 1 ? (size_t)tp_rank * cols + c : c;
        size_t n = t->split_dim == 1 ? cols - c : (rows_saved - R) * cols - c;
        if (n > b - a)
            n = b - a;
        int rc = fn(ctx, a, (uint64_t)R * full_cols + C, n);
        if (rc)
            return rc;
        a += n;
    }
    return TR_OK;
}

/* ------------------------------------------------------------------ files */

int ckpt_join(char *buf, size_t cap, const char *dir, const char *name)
{
    if (snprintf(buf, cap, "%s/%s", dir, name) >= (int)cap)
        return tr_fail(TR_ERR_IO, "checkpoint path too long: %s/%s", dir, name);
    return TR_OK;
}

static int unlink_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

/* rm -r (nothing to do when it does not exist) */
static int remove_tree(const char *path)
{
    struct stat st;
    if (lstat(path, &st) && errno == ENOENT)
        return TR_OK;
    if (nftw(path, unlink_entry, 16, FTW_DEPTH | FTW_PHYS))
        return tr_fail(TR_ERR_IO, "cannot remove %s: %s", path, strerror(errno));
    return TR_OK;
}

int ckpt_sync_path(const char *path)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return tr_fail(TR_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    int rc = fsync(fd) ? tr_fail(TR_ERR_IO, "cannot sync %s: %s", path, strerror(errno)) : TR_OK;
    close(fd);
    return rc;
}

/* Write a small text file through NAME.tmp + fsync + rename, so readers see the old or the
 * new contents, never a part. */
int ckpt_write_file_atomic(const char *dir, const char *name, const char *text)
{
    char path[4200], tmp[4300];
    int rc = ckpt_join(path, sizeof path, dir, name);
    if (rc)
        return rc;
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return tr_fail(TR_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
    int bad = fputs(text, f) < 0;
    bad |= fflush(f) != 0 || fsync(fileno(f)) != 0;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path))
        return tr_fail(TR_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    return ckpt_sync_path(dir);
}

/* ------------------------------------------------------------------ saving */

typedef struct {
    int fd;
    const char *path;
    int array;
    uint64_t numel;   /* of one array in the file */
    const float *src; /* host copy: the tensor's local elements start here */
    uint64_t sum;
} write_ctx;

static int write_segment(void *ctx, size_t local, uint64_t elem, size_t count)
{
    write_ctx *w = ctx;
    const float *v = w->src + local;
    if (tr_pwrite_all(w->fd, v, count * sizeof(float), ((uint64_t)w->array * w->numel + elem) * sizeof(float)))
        return tr_fail(TR_ERR_IO, "cannot write %s: %s", w->path, strerror(errno));
    w->sum += ckpt_checksum(v, elem, count);
    return TR_OK;
}

int ckpt_for_each_moment_piece(const tr_engine *e, size_t offset, size_t numel,
                                  ckpt_piece_fn fn, void *ctx)
{
    for (int x = 0; x < engine_n_dp(e); x++) { /* expert parallelism: xdp's too */
        const tr_dp *dp = engine_dp_at(e, x);
        size_t n_ranges = 0, base = engine_moments_base(e, dp);
        const tr_dp_shard_range *ranges = tr_dp_shard_ranges(dp, &n_ranges);
        for (size_t i = 0; i < n_ranges; i++) {
            size_t lo = ranges[i].offset, hi = lo + ranges[i].count;
            size_t a = lo > offset ? lo : offset, b = hi < offset + numel ? hi : offset + numel;
            if (a >= b)
                continue;
            int rc = fn(ctx, a - offset, b - a, base + ranges[i].shard_offset + (a - lo));
            if (rc)
                return rc;
        }
    }
    return TR_OK;
}

typedef struct {
    const tr_param_tensor *t;
    int tp_rank;
    size_t rows_saved;
    const float *moment; /* host copy of this rank's compact exp_avg or exp_avg_sq */
    write_ctx *w;
} moment_write_ctx;

static int write_moment_piece(void *ctx, size_t local, size_t count, size_t shard_at)
{
    moment_write_ctx *m = ctx;
    m->w->src = m->moment + shard_at - local; /* so that src + local is the piece */
    return ckpt_for_each_segment(m->t, m->tp_rank, m->rows_saved, local, local + count,
                                    write_segment, m->w);
}

/* Whether this rank writes the parameter of t (its moments: see write_tensor). */
static int writes_tensor(const tr_engine *e, const tr_param_tensor *t)
{
    if (t->split_dim == -1 && tr_gpt_get_shape(e->chunks[0].model)->tp_rank != 0)
        return 0; /* replicated over TP: the copy of TP rank 0 */
    if (t->word_embedding && e->stage != 0)
        return 0; /* the last stage's tied copy is the same tensor */
    return 1;
}

static int write_tensor(const tr_engine *e, const char *tmp_dir, const tr_param_tensor *t,
                        size_t tensor_offset, const float *params, const float *const moments[2],
                        FILE *sums)
{
    char path[4200];
    int rc = ckpt_join(path, sizeof path, tmp_dir, t->name);
    if (rc)
        return rc;
    size_t rows_saved = ckpt_saved_rows(e, t);
    write_ctx w = {.path = path, .numel = (uint64_t)rows_saved * (uint64_t)t->full_cols};
    w.fd = open(path, O_WRONLY | O_CREAT, 0644);
    if (w.fd < 0)
        return tr_fail(TR_ERR_IO, "cannot create %s: %s", path, strerror(errno));
    /* every writer sets the same size (pieces not yet written read as zeros until they are) */
    if (ftruncate(w.fd, (off_t)(N_ARRAYS * w.numel * sizeof(float))))
        rc = tr_fail(TR_ERR_IO, "cannot size %s: %s", path, strerror(errno));
    int tp_rank = tr_gpt_get_shape(e->chunks[0].model)->tp_rank;
    uint64_t sums_of[N_ARRAYS] = {0};
    int wrote[N_ARRAYS] = {0};
    /* (CP ranks hold the same weights; an expert's: its EDP group) */
    int replica0 = engine_first_replica(e, t);
    if (!rc && replica0) { /* the parameters are the same on every DP rank */
        w.array = 0;
        w.src = params + tensor_offset;
        rc = ckpt_for_each_segment(t, tp_rank, rows_saved, 0, t->numel, write_segment, &w);
        sums_of[0] = w.sum;
        wrote[0] = 1;
    }
    /* the moments: with ZeRO-1 each DP rank writes its shard; without, DP rank 0 all of them */
    for (int m = 0; m < 2 && !rc && (tr_dp_sharded(engine_dp_of(e, t)) || replica0); m++) {
        moment_write_ctx mc = {.t = t, .tp_rank = tp_rank, .rows_saved = rows_saved,
                               .moment = moments[m], .w = &w};
        w.array = 1 + m;
        w.sum = 0;
        rc = ckpt_for_each_moment_piece(e, tensor_offset, t->numel, write_moment_piece, &mc);
        sums_of[1 + m] = w.sum;
        wrote[1 + m] = 1;
    }
    if (!rc && fsync(w.fd))
        rc = tr_fail(TR_ERR_IO, "cannot sync %s: %s", path, strerror(errno));
    if (close(w.fd) && !rc)
        rc = tr_fail(TR_ERR_IO, "cannot close %s: %s", path, strerror(errno));
    for (int a = 0; a < N_ARRAYS && !rc; a++)
        if (wrote[a] && fprintf(sums, "%s %zu %d %d %016" PRIx64 "\n", t->name, rows_saved,
                                t->full_cols, a, sums_of[a]) < 0)
            rc = tr_fail(TR_ERR_IO, "cannot write the checksums of %s", path);
    return rc;
}

int ckpt_cmp_record(const void *a, const void *b)
{
    return strcmp(((const ckpt_record *)a)->name, ((const ckpt_record *)b)->name);
}

/* Rank 0: add up the ranks' partial checksums (sums.rankR.txt) into the manifest. */
static int write_manifest(tr_engine *e, const char *tmp_dir, int iteration, uint64_t consumed,
                          const engine_scaler *sc)
{
    ckpt_record *recs = NULL;
    size_t n = 0, cap = 0;
    int rc = TR_OK;
    for (int r = 0; r < e->world.size && !rc; r++) {
        char name[64], path[4200];
        snprintf(name, sizeof name, "sums.rank%d.txt", r);
        if ((rc = ckpt_join(path, sizeof path, tmp_dir, name)))
            break;
        FILE *f = fopen(path, "r");
        if (!f) {
            rc = tr_fail(TR_ERR_IO, "cannot read %s: %s", path, strerror(errno));
            break;
        }
        ckpt_record t = {0};
        int array;
        uint64_t sum;
        while (!rc && fscanf(f, "%47s %zu %d %d %" SCNx64, t.name, &t.rows, &t.cols, &array, &sum) == 5) {
            if (array < 0 || array >= N_ARRAYS) {
                rc = tr_fail(TR_ERR_INTERNAL, "%s: array %d", path, array);
                break;
            }
            if (n == cap) {
                cap = cap ? 2 * cap : 256;
                ckpt_record *grown = realloc(recs, cap * sizeof *recs);
                if (!grown) {
                    rc = tr_fail(TR_ERR_NOMEM, "out of memory merging checkpoint checksums");
                    break;
                }
                recs = grown;
            }
            recs[n] = t;
            recs[n].sum[array] = sum;
            recs[n].have[array] = 1;
            n++;
        }
        fclose(f);
        remove(path);
    }
    if (!rc)
        qsort(recs, n, sizeof *recs, ckpt_cmp_record);
    /* merge the records of one tensor: its arrays' partial sums add up */
    size_t m = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        if (m > 0 && !strcmp(recs[m - 1].name, recs[i].name)) {
            ckpt_record *d = &recs[m - 1];
            if (d->rows != recs[i].rows || d->cols != recs[i].cols)
                rc = tr_fail(TR_ERR_INTERNAL, "checkpoint: ranks disagree on the shape of %s", d->name);
            for (int a = 0; a < N_ARRAYS; a++) {
                d->sum[a] += recs[i].sum[a];
                d->have[a] |= recs[i].have[a];
            }
        } else {
            recs[m++] = recs[i];
        }
    }
    for (size_t i = 0; i < m && !rc; i++)
        for (int a = 0; a < N_ARRAYS; a++)
            if (!recs[i].have[a])
                rc = tr_fail(TR_ERR_INTERNAL, "checkpoint: no rank wrote the %s of %s", ckpt_array_names[a],
                             recs[i].name);
    char path[4200];
    if (!rc)
        rc = ckpt_join(path, sizeof path, tmp_dir, "manifest.txt");
    if (!rc) {
        const tr_model_config *mc = &e->cfg->model;
        const tr_training_config *t = &e->cfg->training;
        ckpt_manifest mf = {
            .iteration = iteration, .num_layers = mc->num_layers, .hidden_size = mc->hidden_size,
            .num_attention_heads = mc->num_attention_heads, .vocab_size = mc->vocab_size,
            .max_position_embeddings = mc->max_position_embeddings, .has_data = 1,
            .consumed_samples = (unsigned long long)consumed,
            .global_batch_size = t->global_batch_size, .seed = (unsigned long long)t->seed,
            .tokens = (unsigned long long)tr_data_num_tokens(e->data),
            .documents = (unsigned long long)tr_data_num_documents(e->data), .tensors = recs,
            .n = m, .has_scaler = sc->on, .loss_scale = sc->scale, .scaler_growth = sc->growth,
            .scaler_hysteresis_left = sc->hysteresis_left, .skipped_iterations = sc->skipped,
            .skipped_samples = (unsigned long long)sc->skipped_samples};
        ckpt_split_text(e->cfg->data.split, mf.split, sizeof mf.split);
        ckpt_manifest_family(&mf, tr_gpt_get_shape(e->chunks[0].model));
        ckpt_manifest_lora(&mf, tr_gpt_get_shape(e->chunks[0].model));
        ckpt_manifest_dropout(&mf, tr_gpt_get_shape(e->chunks[0].model));
        rc = ckpt_write_manifest(path, &mf);
    }
    free(recs);
    return rc;
}

int ckpt_stage(const tr_engine *e, ckpt_staging *st)
{
    size_t shard = engine_moments_numel(e);
    st->params = tr_alloc(e->n_params * sizeof(float), "checkpoint staging");
    st->m = tr_alloc(shard * sizeof(float) + 1, "checkpoint staging");
    st->v = tr_alloc(shard * sizeof(float) + 1, "checkpoint staging");
    if (!st->params || !st->m || !st->v) {
        ckpt_staging_free(st);
        return tr_fail(TR_ERR_NOMEM, "out of memory for the checkpoint's copy of %zu parameters",
                       e->n_params);
    }
    /* device memory on GPUs */
    e->k->to_host(NULL, st->params, e->params, e->n_params * sizeof(float));
    e->k->to_host(NULL, st->m, e->adam_m, shard * sizeof(float));
    e->k->to_host(NULL, st->v, e->adam_v, shard * sizeof(float));
    return TR_OK;
}

void ckpt_staging_free(ckpt_staging *st)
{
    tr_free(st->params);
    tr_free(st->m);
    tr_free(st->v);
    st->params = st->m = st->v = NULL;
}

int ckpt_write_staged(const tr_engine *e, const char *tmp_dir, const ckpt_staging *st)
{
    char name[64], path[4200];
    snprintf(name, sizeof name, "sums.rank%d.txt", e->world.rank);
    int rc = ckpt_join(path, sizeof path, tmp_dir, name);
    FILE *sums = NULL;
    if (!rc && !(sums = fopen(path, "w")))
        rc = tr_fail(TR_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    const float *const moments[2] = {st->m, st->v};
    for (int c = 0; c < e->v && !rc; c++)
        for (int i = 0; i < tr_gpt_num_tensors(e->chunks[c].model) && !rc; i++) {
            const tr_param_tensor *t = tr_gpt_tensor(e->chunks[c].model, i);
            if (writes_tensor(e, t))
                rc = write_tensor(e, tmp_dir, t, e->chunks[c].offset + t->offset, st->params,
                                  moments, sums);
        }
    if (sums && (fflush(sums) || fsync(fileno(sums))) && !rc)
        rc = tr_fail(TR_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    if (sums && fclose(sums) && !rc)
        rc = tr_fail(TR_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    return rc;
}

/* The iter_*.tmp folders that saves which failed midway left behind (the new checkpoint is
 * in place: they hold nothing anyone can load). */
static int remove_leftovers(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return tr_fail(TR_ERR_IO, "cannot list %s: %s", dir, strerror(errno));
    int rc = TR_OK;
    for (struct dirent *de; !rc && (de = readdir(d));) {
        int it = 0, used = 0;
        char path[4300];
        if (sscanf(de->d_name, "iter_%7d.tmp%n", &it, &used) == 1 && used > 0 &&
            !de->d_name[used] && !(rc = ckpt_join(path, sizeof path, dir, de->d_name)))
            rc = remove_tree(path);
    }
    closedir(d);
    return rc;
}

/* checkpoint.keep_last K: the complete checkpoints (iter_NNNNNNN) of DIR but the K newest. */
static int keep_last(const char *dir, int k)
{
    DIR *d = opendir(dir);
    if (!d)
        return tr_fail(TR_ERR_IO, "cannot list %s: %s", dir, strerror(errno));
    int *its = NULL, n = 0, cap = 0, rc = TR_OK;
    for (struct dirent *de; (de = readdir(d));) {
        int it = 0, used = 0;
        if (sscanf(de->d_name, "iter_%7d%n", &it, &used) != 1 || de->d_name[used] || used != 12)
            continue;
        if (n == cap) {
            int *grown = realloc(its, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *its);
            if (!grown) {
                rc = TR_ERR_NOMEM;
                break;
            }
            its = grown;
        }
        its[n++] = it;
    }
    closedir(d);
    for (int i = 0; i < n && !rc; i++) { /* remove those with K newer ones */
        int newer = 0;
        for (int j = 0; j < n; j++)
            newer += its[j] > its[i];
        char leaf[32], path[4300];
        snprintf(leaf, sizeof leaf, "iter_%07d", its[i]);
        if (newer >= k && !(rc = ckpt_join(path, sizeof path, dir, leaf)))
            rc = remove_tree(path);
    }
    free(its);
    return rc;
}

int ckpt_begin(tr_engine *e, const char *dir, int iteration, ckpt_paths *p)
{
    char leaf[32];
    snprintf(leaf, sizeof leaf, "iter_%07d", iteration);
    int rc = ckpt_join(p->final_dir, sizeof p->final_dir, dir, leaf);
    snprintf(p->tmp_dir, sizeof p->tmp_dir, "%s.tmp", p->final_dir);
    snprintf(p->old_dir, sizeof p->old_dir, "%s.old", p->final_dir);
    p->consumed_samples = e->consumed_samples;
    p->scaler = e->scaler;
    if (!rc && e->world.rank == 0) { /* a fresh temporary directory (a crashed save may have left one) */
        rc = tr_make_dirs(dir);
        if (!rc)
            rc = remove_tree(p->tmp_dir);
        if (!rc && mkdir(p->tmp_dir, 0755))
            rc = tr_fail(TR_ERR_IO, "cannot create %s: %s", p->tmp_dir, strerror(errno));
    }
    return tr_engine_agree(e, rc, "saving the checkpoint");
}

int ckpt_finish(tr_engine *e, const char *dir, int iteration, const ckpt_paths *p)
{
    int rc = TR_OK;
    if (e->world.rank == 0) {
        rc = write_manifest(e, p->tmp_dir, iteration, p->consumed_samples, &p->scaler);
        if (!rc)
            rc = ckpt_sync_path(p->tmp_dir);
        /* replace an earlier save of this iteration: move it aside, move the new one in */
        if (!rc)
            rc = remove_tree(p->old_dir);
        if (!rc && rename(p->final_dir, p->old_dir) && errno != ENOENT)
            rc = tr_fail(TR_ERR_IO, "cannot move %s aside: %s", p->final_dir, strerror(errno));
        if (!rc && rename(p->tmp_dir, p->final_dir))
            rc = tr_fail(TR_ERR_IO, "cannot rename %s to %s: %s", p->tmp_dir, p->final_dir,
                         strerror(errno));
        if (!rc)
            rc = ckpt_sync_path(dir);
        char text[32];
        snprintf(text, sizeof text, "%d\n", iteration);
        if (!rc)
            rc = ckpt_write_file_atomic(dir, TRACKER, text);
        if (!rc)
            rc = remove_tree(p->old_dir);
        if (!rc)
            rc = remove_leftovers(dir);
        if (!rc && e->cfg->checkpoint.keep_last > 0)
            rc = keep_last(dir, e->cfg->checkpoint.keep_last);
    }
    return tr_engine_agree(e, rc, "saving the checkpoint");
}

int tr_checkpoint_save(tr_engine *e, const char *dir, int iteration)
{
    if (e->cfg->checkpoint.async_save)
        return ckpt_save_async(e, dir, iteration);
    ckpt_paths p;
    ckpt_staging st = {0};
    int rc = ckpt_begin(e, dir, iteration, &p);
    if (rc)
        return rc;
    rc = ckpt_stage(e, &st);
    if (!rc)
        rc = ckpt_write_staged(e, p.tmp_dir, &st);
    ckpt_staging_free(&st);
    if ((rc = tr_engine_agree(e, rc, "saving the checkpoint")))
        return rc;
    return ckpt_finish(e, dir, iteration, &p);
}
