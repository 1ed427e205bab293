/* A release checkpoint: a model's weights alone, for importers (hf/, `trident convert`).
 *
 *   DIR/latest_checkpointed_iteration.txt   "release\n" (Megatron's word for converted weights)
 *   DIR/release/manifest.txt                 the format of checkpoint.c, iteration 0, no data line
 *   DIR/release/NAME.bin                     three fp32 arrays of rows x cols: the parameter,
 *                                            then Adam's exp_avg and exp_avg_sq, both zero
 *                                            (left as holes of a sparse file)
 *
 * Loading it (tr_checkpoint_load) gives iteration 0: training starts at iteration 1 with
 * fresh optimizer state, the first batch of the data and the LR of iteration 1, in any
 * layout, exactly as a run from random weights would. */
#include "train/checkpoint_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"

/* ckpt_checksum of n zeros at positions [0, n): an exp_avg / exp_avg_sq array at the start */
static uint64_t zeros_checksum(size_t n)
{
    enum { CHUNK = 4096 };
    static const float zeros[CHUNK];
    uint64_t s = 0;
    for (size_t i = 0; i < n; i += CHUNK)
        s += ckpt_checksum(zeros, i, n - i < CHUNK ? n - i : CHUNK);
    return s;
}

/* FOLDER/NAME.bin of `rows` x t->full_cols parameters v (the moments: zeros); its record. */
static int write_tensor_file(const char *folder, const tr_param_tensor *t, size_t rows,
                             const float *v, ckpt_record *rec)
{
    char path[4300];
    int rc = ckpt_join(path, sizeof path, folder, t->name);
    if (rc)
        return rc;
    size_t numel = rows * (size_t)t->full_cols;
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0)
        return tr_fail(TR_ERR_IO, "cannot create %s: %s", path, strerror(errno));
    if (ftruncate(fd, (off_t)(N_ARRAYS * numel * sizeof(float))) ||
        tr_pwrite_all(fd, v, numel * sizeof(float), 0) || fsync(fd))
        rc = tr_fail(TR_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    if (close(fd) && !rc)
        rc = tr_fail(TR_ERR_IO, "cannot close %s: %s", path, strerror(errno));
    snprintf(rec->name, sizeof rec->name, "%s", t->name);
    rec->rows = rows;
    rec->cols = t->full_cols;
    rec->sum[0] = ckpt_checksum(v, 0, numel);
    rec->sum[1] = rec->sum[2] = zeros_checksum(numel);
    return rc;
}

int tr_checkpoint_save_model(const char *dir, tr_gpt *g, const float *params)
{
    const tr_gpt_shape *s = tr_gpt_get_shape(g);
    if (!s->is_first || !s->is_last || s->tp_size != 1)
        return tr_fail(TR_ERR_INVALID, "tr_checkpoint_save_model needs the whole model on one "
                                       "rank (one stage, no tensor parallelism)");
    char folder[4200];
    int rc = ckpt_folder(folder, sizeof folder, dir, 0);
    if (rc)
        return rc;
    if (mkdir(folder, 0755))
        return tr_fail(TR_ERR_IO, "cannot create %s: %s", folder, strerror(errno));
    int n = tr_gpt_num_tensors(g);
    ckpt_record *recs = calloc((size_t)n, sizeof *recs);
    if (!recs)
        return tr_fail(TR_ERR_NOMEM, "out of memory for %d checkpoint records", n);
    for (int i = 0; i < n && !rc; i++) {
        const tr_param_tensor *t = tr_gpt_tensor(g, i);
        /* the word embedding keeps its V real rows: the padding depends on the layout */
        size_t rows = t->vocab_rows && t->full_rows > s->V ? (size_t)s->V
                                                               : (size_t)t->full_rows;
        rc = write_tensor_file(folder, t, rows, params + t->offset, &recs[i]);
    }
    char path[4300];
    if (!rc && !(rc = ckpt_join(path, sizeof path, folder, "manifest.txt"))) {
        qsort(recs, (size_t)n, sizeof *recs, ckpt_cmp_record);
        ckpt_manifest mf = {.iteration = 0, .num_layers = s->num_layers, .hidden_size = s->C,
                            .num_attention_heads = s->NH, .vocab_size = s->V,
                            .max_position_embeddings = s->max_T, .tensors = recs, .n = (size_t)n};
        ckpt_manifest_family(&mf, s);
        ckpt_manifest_lora(&mf, s);
        ckpt_manifest_dropout(&mf, s);
        rc = ckpt_write_manifest(path, &mf);
    }
    free(recs);
    if (!rc)
        rc = ckpt_sync_path(folder);
    if (!rc)
        rc = ckpt_write_file_atomic(dir, TRACKER, RELEASE "\n");
    return rc;
}
