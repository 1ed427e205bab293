/* Checkpoint fixtures of the fuzz targets (fixture.h). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"
#include "data/data.h"
#include "train/checkpoint_internal.h"
#include "train/train.h"
#include "fixture.h"
#include "fuzz.h"

void fz_fixture_config(const char *yaml, const char *const *overrides, int n, tr_config *cfg)
{
    char shard[1024], path[2048], set[1100];
    fz_path(shard, sizeof shard, "fixture-data.llmc");
    if (access(shard, F_OK)) {
        uint16_t tokens[4096];
        for (int i = 0; i < 4096; i++) tokens[i] = (uint16_t)((i * 7 + i / 5) % 5);
        fz_must(tr_llmc_shard_write(shard, tokens, 4096), "fixture data");
    }
    const char *all[16];
    if (n > 15) abort();
    for (int i = 0; i < n; i++) all[i] = overrides[i];
    snprintf(set, sizeof set, "data.data_path=%s", shard);
    all[n] = set;
    snprintf(path, sizeof path, "%s/%s", fz_fixture_dir(), yaml);
    fz_must(tr_config_load(path, all, n + 1, cfg), path);
}

void fz_make_checkpoint(const tr_config *cfg, const char *dir, int steps)
{
    tr_engine *e;
    fz_must(tr_engine_create(cfg, &e), "fixture engine");
    for (int it = 1; it <= steps; it++) {
        double loss;
        tr_step_stats stats;
        fz_must(tr_engine_forward_backward(e, it, &loss), "fixture step");
        fz_must(tr_engine_optimizer_step(e, it, &stats), "fixture step");
    }
    if (steps >= 0) {
        fz_must(tr_checkpoint_save(e, dir, steps), "fixture save");
    } else {
        if (mkdir(dir, 0700)) abort();
        fz_must(tr_checkpoint_save_model(dir, tr_engine_model(e), tr_engine_params(e)),
                "fixture save");
    }
    tr_engine_free(e);
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

void fz_fixture_init(fz_fixture *x, const char *dir)
{
    memset(x, 0, sizeof *x);
    snprintf(x->root, sizeof x->root, "%s", dir);
    fz_fixture_file *tracker = &x->file[0];
    snprintf(tracker->path, sizeof tracker->path, "%s/latest_checkpointed_iteration.txt", dir);
    tracker->data = fz_slurp(tracker->path, &tracker->size);
    char it[32];
    snprintf(it, sizeof it, "%.*s", (int)(tracker->size < 31 ? tracker->size : 31),
             (const char *)tracker->data);
    it[strcspn(it, "\n")] = 0;
    if (!strcmp(it, "release")) snprintf(x->iter_dir, sizeof x->iter_dir, "%s/release", dir);
    else snprintf(x->iter_dir, sizeof x->iter_dir, "%s/iter_%07d", dir, atoi(it));
    DIR *d = opendir(x->iter_dir);
    if (!d) abort();
    char *names[FZ_FIXTURE_FILES];
    int k = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (de->d_name[0] != '.' && k < FZ_FIXTURE_FILES - 1) names[k++] = strdup(de->d_name);
    closedir(d);
    qsort(names, (size_t)k, sizeof *names, cmp_names);
    x->n = 1;
    for (int i = 0; i < k; i++, x->n++) {
        fz_fixture_file *f = &x->file[x->n];
        snprintf(f->path, sizeof f->path, "%s/%s", x->iter_dir, names[i]);
        f->data = fz_slurp(f->path, &f->size);
        free(names[i]);
    }
}

void fz_fixture_init_files(fz_fixture *x, const char *dir, const char *const *names, int n)
{
    memset(x, 0, sizeof *x);
    if (n > FZ_FIXTURE_FILES) abort();
    snprintf(x->root, sizeof x->root, "%s", dir);
    snprintf(x->iter_dir, sizeof x->iter_dir, "%s", dir);
    for (x->n = 0; x->n < n; x->n++) {
        fz_fixture_file *f = &x->file[x->n];
        snprintf(f->path, sizeof f->path, "%s/%s", dir, names[x->n]);
        f->data = fz_slurp(f->path, &f->size);
    }
}

void fz_fixture_restore(fz_fixture *x)
{
    for (int i = 0; i < x->n; i++) fz_write_path(x->file[i].path, x->file[i].data, x->file[i].size);
}

/* The manifest's tensor lines whose file has the size they say (12 bytes an element: the
 * parameter and Adam's two moments) get the checksums of that file's contents. */
static void fixup_checksums(fz_fixture *x)
{
    char mp[1200];
    snprintf(mp, sizeof mp, "%s/manifest.txt", x->iter_dir);
    FILE *f = fopen(mp, "rb");
    if (!f) return;
    char *out = NULL, *line = NULL;
    size_t out_len = 0, cap = 0;
    FILE *o = open_memstream(&out, &out_len);
    if (!o) abort();
    ssize_t len;
    while ((len = getline(&line, &cap, f)) >= 0) {
        char name[64];
        size_t rows;
        int cols, used = 0;
        unsigned long long s0, s1, s2;
        if (len < 400 && !memchr(line, 0, (size_t)len) &&
            sscanf(line, "tensor %47s %zu %d %llx %llx %llx%n", name, &rows, &cols, &s0, &s1,
                   &s2, &used) == 6 &&
            line[used] == '\n' && !strchr(name, '/') && cols > 0 && rows > 0 &&
            rows * (size_t)cols < (1u << 22)) {
            char tp[1300];
            struct stat st;
            size_t numel = rows * (size_t)cols;
            snprintf(tp, sizeof tp, "%s/%s", x->iter_dir, name);
            if (!stat(tp, &st) && S_ISREG(st.st_mode) && (size_t)st.st_size == 12 * numel) {
                size_t n;
                uint8_t *d = fz_slurp(tp, &n);
                uint64_t s[3];
                for (int a = 0; a < 3; a++)
                    s[a] = ckpt_checksum((const float *)(void *)d + a * numel, 0, numel);
                free(d);
                fprintf(o, "tensor %s %zu %d %016llx %016llx %016llx\n", name, rows, cols,
                        (unsigned long long)s[0], (unsigned long long)s[1],
                        (unsigned long long)s[2]);
                continue;
            }
        }
        fwrite(line, 1, (size_t)len, o);
    }
    free(line);
    fclose(f);
    fclose(o);
    fz_write_path(mp, (const uint8_t *)out, out_len);
    free(out);
}

static void patch_file(const fz_fixture_file *f, const uint8_t *p, size_t n)
{
    size_t size = f->size, cap = f->size + 1024;
    uint8_t *b = malloc(cap);
    if (!b) abort();
    memcpy(b, f->data, size);
    for (size_t j = 0; j + 4 <= n;) {
        size_t off = (p[j] | p[j + 1] << 8 | (size_t)p[j + 2] << 16) % (size + 1);
        size_t len = p[j + 3];
        j += 4;
        if (!len) {
            size = off;
            continue;
        }
        if (len > n - j) len = n - j;
        if (off + len > cap) len = cap - off;
        memcpy(b + off, p + j, len);
        if (off + len > size) size = off + len;
        j += len;
    }
    fz_write_path(f->path, b, size);
    free(b);
}

void fz_fixture_apply(fz_fixture *x, const uint8_t *data, size_t size)
{
    if (size < 3) return;
    const uint8_t *part[2];
    size_t len[2];
    fz_split(data + 3, size - 3, part, len, 2);
    for (int k = 0; k < 2; k++) {
        int i = data[1 + k] % (x->n + 4);
        if (i >= x->n || !len[k]) continue;
        if (data[0] & (2 << k)) {
            patch_file(&x->file[i], part[k], len[k]);
        } else if (len[k] == 1 && part[k][0] == 'X') {
            unlink(x->file[i].path);
        } else {
            fz_write_path(x->file[i].path, part[k], len[k]);
        }
    }
    if (data[0] & 1) fixup_checksums(x);
}
