/* The validated token array behind every format: file mapping, dtype table, document
 * lookup and the vocabulary check. */
#include "data/data_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
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

/* ---- a data file truncated under a running job: SIGBUS on its mapping becomes an error
 * naming the file (exit 2) instead of a crash with a communication library's backtrace.
 * Mappings register here; other SIGBUS go to the handler that was there before. */
#define MAX_GUARDED 64
static struct {
    const unsigned char *volatile start;
    size_t bytes;
    char path[240];
} guarded[MAX_GUARDED];
static struct sigaction previous_sigbus;
static int sigbus_installed;

static void put(const char *s)
{
    size_t n = strlen(s);
    while (n) {
        ssize_t k = write(2, s, n);
        if (k <= 0)
            return;
        s += k;
        n -= (size_t)k;
    }
}

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
    const unsigned char *a = si->si_addr;
    for (int i = 0; i < MAX_GUARDED; i++) {
        const unsigned char *start = guarded[i].start;
        if (start && a >= start && a < start + guarded[i].bytes) {
            put("trident: data file ");
            put(guarded[i].path);
            put(" is shorter than when it was opened (truncated or replaced while training): "
                "reading it failed (SIGBUS)\n");
            _exit(2);
        }
    }
    if (previous_sigbus.sa_flags & SA_SIGINFO) {
        if (previous_sigbus.sa_sigaction) {
            previous_sigbus.sa_sigaction(sig, si, uc);
            return;
        }
    } else if (previous_sigbus.sa_handler != SIG_DFL && previous_sigbus.sa_handler != SIG_IGN) {
        previous_sigbus.sa_handler(sig);
        return;
    }
    signal(SIGBUS, SIG_DFL);
    raise(SIGBUS);
}

static void guard_mapping(const char *path, const void *map, size_t bytes)
{
    if (!sigbus_installed) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_sigbus;
        sa.sa_flags = SA_SIGINFO;
        sigemptyset(&sa.sa_mask);
        if (sigaction(SIGBUS, &sa, &previous_sigbus) == 0)
            sigbus_installed = 1;
    }
    for (int i = 0; i < MAX_GUARDED; i++)
        if (!guarded[i].start) {
            snprintf(guarded[i].path, sizeof guarded[i].path, "%s", path);
            guarded[i].bytes = bytes;
            guarded[i].start = map;
            return;
        }
}

static void unguard_mapping(const void *map)
{
    for (int i = 0; i < MAX_GUARDED; i++)
        if (guarded[i].start == map)
            guarded[i].start = NULL;
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
        guard_mapping(path, p, m->bytes);
    }
    close(fd);
    return TR_OK;
}

void unmap_file(data_mapping *m)
{
    if (m->map) {
        unguard_mapping(m->map);
        munmap(m->map, m->bytes);
    }
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
