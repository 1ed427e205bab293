/* The validated token array behind every format: file mapping, dtype table, document
 * lookup and the vocabulary check. */
#include "data/data_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"

const char *dtype_name(int code)
{
    switch (code) {
    case DT_UINT8: return "uint8";
    case DT_INT8: return "int8";
    case DT_INT16: return "int16";
    case DT_INT32: return "int32";
    case DT_INT64: return "int64";
    case DT_FLOAT64: return "float64";
    case DT_FLOAT32: return "float32";
    case DT_UINT16: return "uint16";
    default: return "unknown";
    }
}

int dtype_size(int code)
{
    switch (code) {
    case DT_UINT8:
    case DT_INT8: return 1;
    case DT_INT16:
    case DT_UINT16: return 2;
    case DT_INT32:
    case DT_FLOAT32: return 4;
    case DT_INT64:
    case DT_FLOAT64: return 8;
    default: return 0;
    }
}

int map_file(const char *path, data_mapping *m)
{
    m->map = NULL;
    m->bytes = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return tr_fail(TR_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return tr_fail(TR_ERR_IO, "cannot stat %s: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return tr_fail(TR_ERR_IO, "%s is not a regular file", path);
    }
    if ((uint64_t)st.st_size > SIZE_MAX) {
        close(fd);
        return tr_fail(TR_ERR_IO, "%s is too large to map (%lld bytes)", path,
                       (long long)st.st_size);
    }
    m->bytes = (size_t)st.st_size;
    if (m->bytes > 0) {
        void *p = mmap(NULL, m->bytes, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            m->bytes = 0;
            return tr_fail(TR_ERR_IO, "cannot mmap %s (%lld bytes): %s", path,
                           (long long)st.st_size, strerror(e));
        }
        m->map = p;
    }
    close(fd);
    return TR_OK;
}

void unmap_file(data_mapping *m)
{
    if (m->map)
        munmap(m->map, m->bytes);
    m->map = NULL;
    m->bytes = 0;
}

void token_store_close(token_store *s)
{
    unmap_file(&s->bin);
    unmap_file(&s->idx);
    free(s->path);
    memset(s, 0, sizeof *s);
}

uint64_t token_store_doc_start(const token_store *s, uint64_t d)
{
    if (!s->doc_idx) /* llm.c: one document */
        return d == 0 ? 0 : s->n_tokens;
    uint64_t seq = (uint64_t)load_i64(s->doc_idx + 8 * d);
    if (seq >= s->n_seqs)
        return s->n_tokens;
    return (uint64_t)load_i64(s->pointers + 8 * seq) / (uint64_t)s->itemsize;
}

uint64_t token_store_doc_of(const token_store *s, uint64_t offset)
{
    /* largest d in [0, n_docs) with start(d) <= offset; empty documents share a start with
     * their successor, so this is the document that holds the token */
    uint64_t lo = 0, hi = s->n_docs; /* answer in [lo, hi) */
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (token_store_doc_start(s, mid) <= offset)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

int64_t token_store_token(const token_store *s, uint64_t i)
{
    const unsigned char *p = s->base + i * (uint64_t)s->itemsize;
    switch (s->dtype) {
    case DT_UINT8: return *p;
    case DT_INT8: return (int8_t)*p;
    case DT_INT16: { int16_t v; memcpy(&v, p, 2); return v; }
    case DT_UINT16: { uint16_t v; memcpy(&v, p, 2); return v; }
    case DT_INT32: return load_i32(p);
    default: return load_i64(p);
    }
}

/* Smallest and largest token of [i0, i1): loops the compiler vectorises. */
#define RANGE_OF(T)                                                                            \
    do {                                                                                       \
        const T *t = (const T *)(const void *)s->base;                                         \
        T lo = t[i0], hi = t[i0];                                                              \
        for (uint64_t i = i0; i < i1; i++) {                                                   \
            lo = t[i] < lo ? t[i] : lo;                                                        \
            hi = t[i] > hi ? t[i] : hi;                                                        \
        }                                                                                      \
        *min = lo;                                                                             \
        *max = hi;                                                                             \
    } while (0)

static void token_range(const token_store *s, uint64_t i0, uint64_t i1, int64_t *min,
                        int64_t *max)
{
    switch (s->dtype) {
    case DT_UINT8: RANGE_OF(uint8_t); break;
    case DT_INT8: RANGE_OF(int8_t); break;
    case DT_INT16: RANGE_OF(int16_t); break;
    case DT_UINT16: RANGE_OF(uint16_t); break;
    case DT_INT32: RANGE_OF(int32_t); break;
    default: RANGE_OF(int64_t); break;
    }
}

int token_store_check_vocab(const token_store *s, const char *file, int vocab_size)
{
    if (vocab_size <= 0)
        return tr_fail(TR_ERR_INVALID, "%s: vocab_size must be positive, got %d", file,
                       vocab_size);
    /* tokens were written aligned to their size (pointers are multiples of itemsize from a
     * page-aligned mapping), so typed loads are safe */
    const uint64_t block = 1u << 16;
    for (uint64_t i0 = 0; i0 < s->n_tokens; i0 += block) {
        uint64_t i1 = s->n_tokens - i0 < block ? s->n_tokens : i0 + block;
        int64_t lo, hi;
        token_range(s, i0, i1, &lo, &hi);
        if (lo >= 0 && hi < vocab_size)
            continue;
        for (uint64_t i = i0; i < i1; i++) {
            int64_t v = token_store_token(s, i);
            if (v >= 0 && v < vocab_size)
                continue;
            uint64_t d = token_store_doc_of(s, i);
            return tr_fail(TR_ERR_INVALID,
                           "%s: token %lld at position %llu (document %llu, offset %llu) is %s "
                           "(vocab_size is %d)",
                           file, (long long)v, (unsigned long long)i, (unsigned long long)d,
                           (unsigned long long)(i - token_store_doc_start(s, d)),
                           v < 0 ? "negative" : ">= vocab_size", vocab_size);
        }
    }
    return TR_OK;
}
