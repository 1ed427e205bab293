/* Shared helpers of the fuzz targets (fuzz.h). */
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"
#include "fuzz.h"

#ifndef FUZZ_FIXTURE_DIR
#define FUZZ_FIXTURE_DIR "tests/fuzz/fixtures"
#endif

static char g_dir[512];
static pid_t g_owner;

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb; (void)flag; (void)ftw;
    return remove(p);
}

void fz_rmtree(const char *path)
{
    nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void cleanup(void)
{
    /* only the process that made it (libFuzzer's -fork/-jobs children share nothing) */
    if (g_dir[0] && getpid() == g_owner) fz_rmtree(g_dir);
}

const char *fz_dir(void)
{
    if (g_dir[0]) return g_dir;
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp) tmp = access("/dev/shm", W_OK | X_OK) ? "/tmp" : "/dev/shm";
    snprintf(g_dir, sizeof g_dir, "%s/trident-fuzz-XXXXXX", tmp);
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        abort();
    }
    g_owner = getpid();
    atexit(cleanup);
    FZ_IGNORE(tr_log_set_level_name("error"));
    return g_dir;
}

void fz_path(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/%s", fz_dir(), name);
}

void fz_write_path(const char *path, const uint8_t *d, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        abort();
    }
    if (n && fwrite(d, 1, n, f) != n) abort();
    if (fclose(f)) abort();
}

void fz_write(const char *name, const uint8_t *d, size_t n)
{
    char p[1024];
    fz_path(p, sizeof p, name);
    fz_write_path(p, d, n);
}

uint8_t *fz_slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        abort();
    }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *d = malloc((size_t)len + 1);
    if (!d || fread(d, 1, (size_t)len, f) != (size_t)len) abort();
    fclose(f);
    *n = (size_t)len;
    return d;
}

int fz_split(const uint8_t *data, size_t size, const uint8_t **part, size_t *len, int k)
{
    int m = 0;
    size_t start = 0;
    for (size_t i = 0; i + 5 <= size && m < k - 1; i++) {
        if (memcmp(data + i, "\n@@@\n", 5)) continue;
        part[m] = data + start;
        len[m] = i - start;
        m++;
        start = i + 5;
        i += 4;
    }
    part[m] = data + start;
    len[m] = size - start;
    m++;
    for (int j = m; j < k; j++) {
        part[j] = data + size;
        len[j] = 0;
    }
    return m;
}

void fz_check_finite(const char *what, const float *v, size_t n, int nonneg)
{
    for (size_t i = 0; i < n; i++) {
        if (isfinite(v[i]) && !(nonneg && v[i] < 0)) continue;
        fprintf(stderr, "loaded a bad value: %s[%zu] = %g\n", what, i, (double)v[i]);
        abort();
    }
}

const char *fz_fixture_dir(void)
{
    const char *d = getenv("FUZZ_FIXTURE_DIR");
    return d && *d ? d : FUZZ_FIXTURE_DIR;
}

void fz_must(int rc, const char *what)
{
    if (!rc) return;
    fprintf(stderr, "fuzz setup: %s: %s\n", what, tr_errmsg());
    abort();
}

void fz_write_hf_folder(const uint8_t *data, size_t size)
{
    const uint8_t *part[2];
    size_t len[2];
    fz_split(data, size, part, len, 2);
    fz_write("config.json", part[0], len[0]);
    fz_write("model.safetensors", part[1], len[1]);
}
