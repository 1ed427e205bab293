/* Helpers shared by the data/ tests: a scratch directory, whole-file read/write, byte
 * patching, and a hand-made indexed dataset of any dtype. Include after cmocka.h. */
#ifndef TR_DATA_TEST_UTIL_H
#define TR_DATA_TEST_UTIL_H

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "data/data.h"

static char scratch_dir[256];

static inline int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static inline int scratch_setup(void **state)
{
    (void)state;
    snprintf(scratch_dir, sizeof scratch_dir, "/tmp/trident-data-test-XXXXXX");
    return mkdtemp(scratch_dir) ? 0 : -1;
}

static inline int scratch_teardown(void **state)
{
    (void)state;
    return nftw(scratch_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* scratch_dir/name, in a rotating set of buffers */
static inline const char *scratch(const char *name)
{
    static char bufs[8][512];
    static int next;
    char *b = bufs[next++ % 8];
    snprintf(b, 512, "%s/%s", scratch_dir, name);
    return b;
}

static inline void write_bytes(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (n)
        assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

/* Whole file into a malloc'ed buffer (+1 spare byte); *n = its size. */
static inline unsigned char *read_bytes(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)len + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return b;
}

static inline void copy_file(const char *from, const char *to)
{
    size_t n;
    unsigned char *b = read_bytes(from, &n);
    write_bytes(to, b, n);
    free(b);
}

/* Little-endian field writes into a buffer. */
static inline void put_u64(unsigned char *p, uint64_t v) { memcpy(p, &v, 8); }
static inline void put_i64(unsigned char *p, int64_t v) { memcpy(p, &v, 8); }
static inline void put_i32(unsigned char *p, int32_t v) { memcpy(p, &v, 4); }

/* PREFIX.bin + PREFIX.idx by hand: dtype `code` of `itemsize` bytes, sequence sizes, the
 * token bytes, and doc_idx (n_entries values). Pointers are the consistent ones. */
static inline void write_raw_indexed(const char *prefix, int code, int itemsize, const void *tokens,
                              const int32_t *sizes, uint64_t n_seqs, const int64_t *doc_idx,
                              uint64_t n_entries)
{
    size_t idx_bytes = 34 + 12 * n_seqs + 8 * n_entries;
    unsigned char *idx = calloc(1, idx_bytes);
    assert_non_null(idx);
    memcpy(idx, "MMIDIDX\0\0", 9);
    put_u64(idx + 9, 1);
    idx[17] = (unsigned char)code;
    put_u64(idx + 18, n_seqs);
    put_u64(idx + 26, n_entries);
    int64_t ptr = 0;
    for (uint64_t i = 0; i < n_seqs; i++) {
        put_i32(idx + 34 + 4 * i, sizes[i]);
        put_i64(idx + 34 + 4 * n_seqs + 8 * i, ptr);
        ptr += (int64_t)sizes[i] * itemsize;
    }
    for (uint64_t d = 0; d < n_entries; d++)
        put_i64(idx + 34 + 12 * n_seqs + 8 * d, doc_idx[d]);
    char path[512];
    snprintf(path, sizeof path, "%s.idx", prefix);
    write_bytes(path, idx, idx_bytes);
    snprintf(path, sizeof path, "%s.bin", prefix);
    write_bytes(path, tokens, (size_t)ptr);
    free(idx);
}

/* Open with the usual test settings; asserts the status and, on failure, that the message
 * holds `needle`. */
static inline tr_data *open_expect(const char *path, const char *format, const char *split, int S,
                            int vocab, int want_rc, const char *needle)
{
    tr_data *d = NULL;
    tr_clear_error();
    int rc = tr_data_open(path, format, split, S, vocab, 1234, &d);
    if (rc != want_rc || (needle && !strstr(tr_errmsg(), needle)))
        print_error("tr_data_open(%s): rc %d (want %d), message: %s (want '%s')\n", path, rc,
                    want_rc, tr_errmsg(), needle ? needle : "");
    assert_int_equal(rc, want_rc);
    if (needle)
        assert_non_null(strstr(tr_errmsg(), needle));
    if (rc)
        assert_null(d);
    return d;
}

#endif
