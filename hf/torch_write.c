/* torch.save's ZIP archive written (torch_write.h): STORED entries with CRC-32, a pickle of
 * protocol 2 with tensors as _rebuild_tensor_v2 of persistent storages. */
#include "hf/torch_write.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ARCHIVE "archive"
#define ALIGN 64                      /* data entries start at multiples of this (as torch's) */
#define ZIP32_MAX 0xffffffffull       /* a size or offset from this on is ZIP64's */
#define ZIP64_ENV "TRIDENT_TEST_FORCE_ZIP64" /* 1: every ZIP64 record, whatever the sizes */

typedef struct {
    char *name;
    uint32_t crc;
    uint64_t size, header; /* bytes, the local header's offset */
} ptw_entry;

struct ptw {
    char *path;
    FILE *f;
    uint64_t at; /* bytes written */
    unsigned char *pkl;
    size_t n, cap;
    ptw_entry *e;
    size_t n_e, cap_e;
    int keys;  /* storages written */
    int zip64; /* 1: every entry and the end with ZIP64's records (tests) */
    int error; /* the first error's code (its message set) */
};

static uint32_t crc32_of(const unsigned char *p, size_t n, uint32_t crc)
{
    static uint32_t table[256];
    if (!table[1])
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++)
                c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
            table[i] = c;
        }
    crc = ~crc;
    for (size_t i = 0; i < n; i++)
        crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

static void fail_once(ptw *w, int rc)
{
    if (!w->error)
        w->error = rc;
}

/* ------------------------------------------------------------------ the pickle */

static void emit(ptw *w, const void *b, size_t n)
{
    if (w->error)
        return;
    if (w->n + n > w->cap) {
        size_t cap = w->cap ? w->cap : 4096;
        while (cap < w->n + n)
            cap *= 2;
        unsigned char *p = realloc(w->pkl, cap);
        if (!p) {
            fail_once(w, tr_fail(TR_ERR_NOMEM, "out of memory writing %s's pickle", w->path));
            return;
        }
        w->pkl = p, w->cap = cap;
    }
    memcpy(w->pkl + w->n, b, n);
    w->n += n;
}

static void op(ptw *w, char c)
{
    emit(w, &c, 1);
}

static void le_put(unsigned char *b, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        b[i] = (unsigned char)(v >> (8 * i));
}

void ptw_none(ptw *w)
{
    op(w, 'N');
}

void ptw_bool(ptw *w, int v)
{
    op(w, v ? '\x88' : '\x89'); /* NEWTRUE, NEWFALSE */
}

void ptw_int(ptw *w, int64_t v)
{
    unsigned char b[10];
    if (v >= INT32_MIN && v <= INT32_MAX) { /* BININT */
        b[0] = 'J';
        le_put(b + 1, (uint64_t)(int32_t)v, 4);
        emit(w, b, 5);
    } else { /* LONG1: 8 bytes two's complement */
        b[0] = '\x8a', b[1] = 8;
        le_put(b + 2, (uint64_t)v, 8);
        emit(w, b, 10);
    }
}

void ptw_float(ptw *w, double v)
{
    unsigned char b[9] = {'G'}; /* BINFLOAT: big endian */
    uint64_t u;
    memcpy(&u, &v, 8);
    for (int i = 0; i < 8; i++)
        b[1 + i] = (unsigned char)(u >> (56 - 8 * i));
    emit(w, b, 9);
}

void ptw_str(ptw *w, const char *s)
{
    unsigned char b[5] = {'X'}; /* BINUNICODE */
    size_t n = strlen(s);
    le_put(b + 1, n, 4);
    emit(w, b, 5);
    emit(w, s, n);
}

void ptw_global(ptw *w, const char *module, const char *name)
{
    op(w, 'c');
    emit(w, module, strlen(module));
    op(w, '\n');
    emit(w, name, strlen(name));
    op(w, '\n');
}

void ptw_dict_begin(ptw *w)
{
    emit(w, "}(", 2); /* EMPTY_DICT MARK */
}

void ptw_dict_end(ptw *w)
{
    op(w, 'u'); /* SETITEMS */
}

void ptw_tuple_begin(ptw *w)
{
    op(w, '('); /* MARK */
}

void ptw_tuple_end(ptw *w)
{
    op(w, 't'); /* TUPLE */
}

void ptw_namespace_begin(ptw *w)
{
    ptw_global(w, "argparse", "Namespace");
    emit(w, ")R", 2); /* Namespace() */
    ptw_dict_begin(w);
}

void ptw_namespace_end(ptw *w)
{
    ptw_dict_end(w);
    op(w, 'b'); /* BUILD: the dict as its attributes */
}

/* ------------------------------------------------------------------ the archive */

static void put(ptw *w, const void *b, size_t n)
{
    if (w->error)
        return;
    if (fwrite(b, 1, n, w->f) != n) {
        fail_once(w, tr_fail(TR_ERR_IO, "cannot write %s: %s", w->path, strerror(errno)));
        return;
    }
    w->at += n;
}

/* Entry ARCHIVE/rel of n bytes: its local header (a ZIP64 extra field of both sizes where n
 * needs it, then padding so the bytes start aligned) and its bytes. */
static void entry(ptw *w, const char *rel, const void *data, size_t n)
{
    if (w->error)
        return;
    char name[256];
    int nl = snprintf(name, sizeof name, ARCHIVE "/%s", rel);
    if (w->n_e == w->cap_e) {
        size_t cap = w->cap_e ? 2 * w->cap_e : 64;
        ptw_entry *e = realloc(w->e, cap * sizeof *e);
        if (!e) {
            fail_once(w, tr_fail(TR_ERR_NOMEM, "out of memory writing %s", w->path));
            return;
        }
        w->e = e, w->cap_e = cap;
    }
    ptw_entry *e = &w->e[w->n_e];
    if (!(e->name = strdup(name))) {
        fail_once(w, tr_fail(TR_ERR_NOMEM, "out of memory writing %s", w->path));
        return;
    }
    w->n_e++;
    e->crc = crc32_of(data, n, 0), e->size = n, e->header = w->at;
    int big = w->zip64 || n >= ZIP32_MAX;
    size_t x64 = big ? 20 : 0; /* ID 1, 16, uncompressed and compressed size */
    /* an extra field of padding (ID 'FB', as torch's writer) aligns the data */
    size_t pad = (size_t)((ALIGN - (w->at + 30 + (uint64_t)nl + x64 + 4) % ALIGN) % ALIGN);
    unsigned char h[30 + 256 + 20 + 4 + ALIGN] = {0}, *x = h + 30 + nl;
    le_put(h, 0x04034b50u, 4);
    le_put(h + 4, big ? 45 : 20, 2); /* version needed: 4.5 for ZIP64 */
    le_put(h + 14, e->crc, 4);
    le_put(h + 18, big ? ZIP32_MAX : n, 4), le_put(h + 22, big ? ZIP32_MAX : n, 4);
    le_put(h + 26, (uint64_t)nl, 2);
    le_put(h + 28, x64 + 4 + pad, 2);
    memcpy(h + 30, name, (size_t)nl);
    if (big) {
        le_put(x, 1, 2), le_put(x + 2, 16, 2);
        le_put(x + 4, n, 8), le_put(x + 12, n, 8);
        x += 20;
    }
    x[0] = 'F', x[1] = 'B';
    le_put(x + 2, pad, 2);
    put(w, h, 30 + (size_t)nl + x64 + 4 + pad);
    put(w, data, n);
}

int ptw_open(const char *path, ptw **out)
{
    *out = NULL;
    ptw *w = calloc(1, sizeof *w);
    if (!w || !(w->path = strdup(path))) {
        free(w);
        return tr_fail(TR_ERR_NOMEM, "out of memory writing %s", path);
    }
    if (!(w->f = fopen(path, "wbx"))) {
        int rc = tr_fail(TR_ERR_IO, "cannot create %s: %s", path, strerror(errno));
        free(w->path);
        free(w);
        return rc;
    }
    const char *z = getenv(ZIP64_ENV);
    w->zip64 = z && !strcmp(z, "1");
    emit(w, "\x80\x02", 2); /* PROTO 2 */
    *out = w;
    return w->error;
}

int ptw_tensor(ptw *w, tr_st_dtype dtype, int ndim, const uint64_t *shape, const void *data)
{
    if (dtype != TR_ST_F32 && dtype != TR_ST_BF16)
        return tr_fail(TR_ERR_INTERNAL, "ptw_tensor: dtype %s is not written",
                       tr_st_dtype_name(dtype));
    uint64_t numel = 1, stride[TR_ST_MAX_DIMS];
    for (int i = ndim; i-- > 0;)
        stride[i] = numel, numel *= shape[i];
    char key[32];
    snprintf(key, sizeof key, "%d", w->keys++);
    char rel[48];
    snprintf(rel, sizeof rel, "data/%s", key);
    entry(w, rel, data, numel * (dtype == TR_ST_F32 ? 4 : 2));
    ptw_global(w, "torch._utils", "_rebuild_tensor_v2");
    ptw_tuple_begin(w);
    ptw_tuple_begin(w); /* the persistent id */
    ptw_str(w, "storage");
    ptw_global(w, "torch", dtype == TR_ST_F32 ? "FloatStorage" : "BFloat16Storage");
    ptw_str(w, key);
    ptw_str(w, "cpu");
    ptw_int(w, (int64_t)numel);
    ptw_tuple_end(w);
    op(w, 'Q');    /* BINPERSID */
    ptw_int(w, 0); /* storage_offset */
    ptw_tuple_begin(w);
    for (int i = 0; i < ndim; i++)
        ptw_int(w, (int64_t)shape[i]);
    ptw_tuple_end(w);
    ptw_tuple_begin(w);
    for (int i = 0; i < ndim; i++)
        ptw_int(w, (int64_t)stride[i]);
    ptw_tuple_end(w);
    ptw_bool(w, 0); /* requires_grad */
    ptw_global(w, "collections", "OrderedDict");
    emit(w, ")R", 2); /* backward_hooks */
    ptw_tuple_end(w);
    op(w, 'R');
    return w->error;
}

/* The central directory (a ZIP64 extra field of the sizes and offset past 32 bits, in that
 * order) and its end record (after ZIP64's end record and locator where the count, size or
 * offset passes the end record's fields). */
static void directory(ptw *w)
{
    uint64_t start = w->at;
    for (size_t i = 0; i < w->n_e && !w->error; i++) {
        const ptw_entry *e = &w->e[i];
        size_t nl = strlen(e->name), nx = 0;
        int big_size = w->zip64 || e->size >= ZIP32_MAX;
        int big_off = w->zip64 || e->header >= ZIP32_MAX;
        unsigned char c[46] = {0}, x[4 + 24];
        if (big_size)
            le_put(x + 4 + nx, e->size, 8), le_put(x + 12 + nx, e->size, 8), nx += 16;
        if (big_off)
            le_put(x + 4 + nx, e->header, 8), nx += 8;
        le_put(x, 1, 2), le_put(x + 2, nx, 2);
        le_put(c, 0x02014b50u, 4);
        le_put(c + 4, nx ? 45 : 20, 2), le_put(c + 6, nx ? 45 : 20, 2);
        le_put(c + 16, e->crc, 4);
        le_put(c + 20, big_size ? ZIP32_MAX : e->size, 4);
        le_put(c + 24, big_size ? ZIP32_MAX : e->size, 4);
        le_put(c + 28, nl, 2);
        le_put(c + 30, nx ? 4 + nx : 0, 2);
        le_put(c + 42, big_off ? ZIP32_MAX : e->header, 4);
        put(w, c, 46);
        put(w, e->name, nl);
        if (nx)
            put(w, x, 4 + nx);
    }
    uint64_t size = w->at - start, n = w->n_e;
    int big = w->zip64 || n >= 0xffff || size >= ZIP32_MAX || start >= ZIP32_MAX;
    if (big) {
        uint64_t rec = w->at;
        unsigned char r[56] = {0}, l[20] = {0};
        le_put(r, 0x06064b50u, 4);
        le_put(r + 4, 56 - 12, 8); /* the record's size after this field */
        le_put(r + 12, 45, 2), le_put(r + 14, 45, 2);
        le_put(r + 24, n, 8), le_put(r + 32, n, 8);
        le_put(r + 40, size, 8), le_put(r + 48, start, 8);
        put(w, r, 56);
        le_put(l, 0x07064b50u, 4);
        le_put(l + 8, rec, 8);
        le_put(l + 16, 1, 4); /* disks */
        put(w, l, 20);
    }
    unsigned char end[22] = {0};
    le_put(end, 0x06054b50u, 4);
    le_put(end + 8, big ? 0xffff : n, 2), le_put(end + 10, big ? 0xffff : n, 2);
    le_put(end + 12, big ? ZIP32_MAX : size, 4), le_put(end + 16, big ? ZIP32_MAX : start, 4);
    put(w, end, 22);
}

int ptw_close(ptw *w, int rc)
{
    if (!w)
        return rc;
    if (!rc) {
        op(w, '.'); /* STOP */
        entry(w, "data.pkl", w->pkl, w->n);
        entry(w, "version", "3\n", 2);
        entry(w, "byteorder", "little", 6);
        directory(w);
        rc = w->error;
    }
    if (fclose(w->f) && !rc)
        rc = tr_fail(TR_ERR_IO, "cannot write %s: %s", w->path, strerror(errno));
    if (rc)
        unlink(w->path);
    for (size_t i = 0; i < w->n_e; i++)
        free(w->e[i].name);
    free(w->e);
    free(w->pkl);
    free(w->path);
    free(w);
    return rc;
}
