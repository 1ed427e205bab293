/* tr_pt_open: a pytorch_model.bin (torch.save of a state dict) as a tr_st_file. A ZIP archive
 * (PyTorch >= 1.6): ARCHIVE/data.pkl, ARCHIVE/data/KEY per storage, ARCHIVE/byteorder; or a
 * legacy file: magic, protocol 1001, sys_info, the pickle, the storage keys, then per key an
 * 8-byte element count and the bytes. Tensors' begin/end are file offsets (data_start 0). */
#include "hf/pt_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* pickle.dumps(0x1950a86a20f9469cfc6c, protocol=2) and pickle.dumps(1001, protocol=2) */
static const unsigned char legacy_magic[] = {0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46,
                                             0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19, 0x2e};
static const unsigned char legacy_proto[] = {0x80, 0x02, 0x4d, 0xe9, 0x03, 0x2e};

/* The tr_st_tensor of p whose bytes start at file offset data (the storage's first byte). */
static tr_st_tensor st_tensor(pt_tensor *p, uint64_t data)
{
    uint64_t es = tr_st_dtype_size(p->dtype);
    tr_st_tensor t = {.name = p->name, .dtype = p->dtype, .ndim = p->ndim, .numel = p->numel};
    memcpy(t.shape, p->shape, sizeof t.shape);
    t.begin = data + (p->numel ? p->offset * es : 0); /* inside the storage: checked */
    t.end = t.begin + p->numel * es;
    p->name = NULL; /* moved */
    return t;
}

/* storage_numel elements of dtype fit in `bytes` (storage s of tensor t; what names it). */
static int storage_fits(const char *path, const pt_tensor *t, const char *what, uint64_t bytes)
{
    uint64_t es = tr_st_dtype_size(t->dtype);
    if (t->storage_numel > bytes / es)
        return pt_bad(path, "tensor '%.200s': storage %s holds %llu bytes, fewer than its %llu "
                      "elements of %s need", t->name, what, (unsigned long long)bytes,
                      (unsigned long long)t->storage_numel, tr_st_dtype_name(t->dtype));
    return TR_OK;
}

/* The state dict pickle `what` in buf[0, n) (flags: PT_LEGACY or 0) into t[*n_t]; *used: its bytes. */
static int state_dict(const char *path, const char *what, const unsigned char *buf, size_t n,
                      int flags, pt_tensor **t, size_t *n_t, size_t *used)
{
    pt_pickle *p = NULL;
    int rc = pt_pickle_run(path, what, buf, n, flags, &p, used);
    if (!rc)
        rc = pt_pickle_state(p, t, n_t);
    pt_pickle_free(p);
    return rc;
}

/* data.pkl of the archive z in fd, run with flags (PT_*) into *p. */
static int zip_pickle(const char *path, int fd, const pt_zip *z, int flags, pt_pickle **p)
{
    const pt_zip_entry *pkl = pt_zip_find(z, "data.pkl"), *order = pt_zip_find(z, "byteorder");
    unsigned char *buf = NULL;
    char bo[8] = "";
    int rc = TR_OK;
    *p = NULL;
    if (order && order->size <= 6)
        rc = pt_read_at(fd, path, bo, (size_t)order->size, order->offset);
    if (rc) {
    } else if (!pkl) {
        rc = pt_bad(path, "the ZIP archive has no %.200s/data.pkl (not a torch.save file)",
                    z->archive);
    } else if (order && strcmp(bo, "little")) {
        rc = pt_bad(path, "%.200s/byteorder is '%s': only little-endian archives are read",
                    z->archive, order->size <= 6 ? bo : "(longer than 'little')");
    } else if (pkl->size > PT_MAX_PICKLE) {
        rc = pt_bad(path, "data.pkl is %llu bytes (at most %u are read)",
                    (unsigned long long)pkl->size, PT_MAX_PICKLE);
    } else if (!(buf = malloc(pkl->size ? (size_t)pkl->size : 1))) {
        rc = tr_fail(TR_ERR_NOMEM, "out of memory reading %s", path);
    } else if (!(rc = pt_read_at(fd, path, buf, (size_t)pkl->size, pkl->offset))) {
        size_t used;
        rc = pt_pickle_run(path, "data.pkl", buf, (size_t)pkl->size, flags, p, &used);
    }
    free(buf);
    return rc;
}

/* The tensors pt[0, n) of archive z as tr_st_tensors *out (each storage data/KEY, inside it). */
static int zip_tensors(const char *path, const pt_zip *z, pt_tensor *pt, size_t n,
                       tr_st_tensor **out)
{
    int rc = TR_OK;
    if (!(*out = calloc(n + 1, sizeof **out)))
        return tr_fail(TR_ERR_NOMEM, "out of memory reading %s", path);
    for (size_t i = 0; !rc && i < n; i++) {
        pt_tensor *t = &pt[i];
        char rel[300];
        snprintf(rel, sizeof rel, "data/%.250s", t->key);
        const pt_zip_entry *e = strlen(t->key) <= 250 ? pt_zip_find(z, rel) : NULL;
        if (!e)
            rc = pt_bad(path, "tensor '%.200s': its storage %.200s/data/%.200s is not in the "
                        "archive", t->name, z->archive, t->key);
        else if (!(rc = storage_fits(path, t, e->name, e->size)))
            (*out)[i] = st_tensor(t, e->offset);
    }
    return rc;
}

static int open_zip(const char *path, int fd, uint64_t size, pt_tensor **pt, size_t *n_pt,
                    tr_st_tensor **out)
{
    pt_zip z;
    pt_pickle *p = NULL;
    int rc = pt_zip_open(fd, size, path, &z);
    if (rc)
        return rc;
    if (!(rc = zip_pickle(path, fd, &z, 0, &p)))
        rc = pt_pickle_state(p, pt, n_pt);
    pt_pickle_free(p);
    if (!rc)
        rc = zip_tensors(path, &z, *pt, *n_pt, out);
    pt_zip_free(&z);
    return rc;
}

/* ------------------------------------------------------------------ legacy files */

typedef struct {
    const char *key;
    size_t tensor; /* the first of its tensors */
} key_ref;

static int cmp_key(const void *a, const void *b)
{
    const key_ref *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    return c ? c : (x->tensor > y->tensor) - (x->tensor < y->tensor);
}

/* The pickles of a legacy file in buf[0, n): the tensors and storage keys; *data: the offset
 * of the first storage's count (on failure: UINT64_MAX when buf ended first). */
static int legacy_pickles(const char *path, const unsigned char *buf, size_t n, pt_tensor **pt,
                          size_t *n_pt, char ***keys, size_t *n_keys, uint64_t *data)
{
    size_t at = sizeof legacy_magic, used = 0;
    *data = 0;
    if (n < at + sizeof legacy_proto || memcmp(buf + at, legacy_proto, sizeof legacy_proto))
        return pt_bad(path, "a legacy torch.save file of a protocol other than 1001");
    at += sizeof legacy_proto;
    pt_pickle *p = NULL;
    int rc = pt_pickle_run(path, "sys_info", buf + at, n - at, PT_LEGACY, &p, &used);
    if (!rc)
        rc = pt_pickle_sys_info(p);
    pt_pickle_free(p), p = NULL;
    if (!rc) {
        at += used;
        rc = state_dict(path, "the pickle", buf + at, n - at, PT_LEGACY, pt, n_pt, &used);
    }
    if (!rc) {
        at += used;
        if (!(rc = pt_pickle_run(path, "the storage keys", buf + at, n - at, PT_LEGACY, &p, &used)))
            rc = pt_pickle_keys(p, keys, n_keys);
        pt_pickle_free(p);
    }
    *data = !rc ? at + used : used == SIZE_MAX ? UINT64_MAX : 0;
    return rc;
}

/* Walk the storages of a legacy file from `at`: each key's count and bytes into out. */
static int legacy_storages(const char *path, int fd, uint64_t size, uint64_t at, pt_tensor *pt,
                           size_t n_pt, char **keys, size_t n_keys, tr_st_tensor *out)
{
    key_ref *refs = calloc(n_pt + 1, sizeof *refs);
    uint64_t *start = calloc(n_pt + 1, sizeof *start); /* by tensor: its storage's data */
    int rc = refs && start ? TR_OK : tr_fail(TR_ERR_NOMEM, "out of memory reading %s", path);
    for (size_t i = 0; !rc && i < n_pt; i++)
        refs[i] = (key_ref){pt[i].key, i};
    if (!rc)
        qsort(refs, n_pt, sizeof *refs, cmp_key);
    for (size_t k = 0; !rc && k < n_keys; k++) {
        size_t lo = 0, hi = n_pt; /* the key's first tensor in refs */
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (strcmp(refs[mid].key, keys[k]) < 0)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo == n_pt || strcmp(refs[lo].key, keys[k]))
            rc = pt_bad(path, "legacy storage '%.200s' belongs to no tensor", keys[k]);
        unsigned char c[8];
        if (!rc && (at > size || size - at < 8))
            rc = pt_bad(path, "the file ends before storage '%.200s'", keys[k]);
        if (!rc)
            rc = pt_read_at(fd, path, c, 8, at);
        uint64_t count = 0;
        for (int b = 7; !rc && b >= 0; b--)
            count = count << 8 | c[b];
        const pt_tensor *t = rc ? NULL : &pt[refs[lo].tensor];
        uint64_t es = t ? tr_st_dtype_size(t->dtype) : 1;
        if (!rc && start[refs[lo].tensor])
            rc = pt_bad(path, "legacy storage '%.200s' is listed twice", keys[k]);
        else if (!rc && count != t->storage_numel)
            rc = pt_bad(path, "legacy storage '%.200s' holds %llu elements; its tensors say %llu",
                        keys[k], (unsigned long long)count, (unsigned long long)t->storage_numel);
        else if (!rc && count > (size - at - 8) / es)
            rc = pt_bad(path, "legacy storage '%.200s' (%llu elements of %s) runs past the end "
                        "of the file", keys[k], (unsigned long long)count,
                        tr_st_dtype_name(t->dtype));
        for (size_t j = lo; !rc && j < n_pt && !strcmp(refs[j].key, keys[k]); j++) {
            const pt_tensor *u = &pt[refs[j].tensor];
            if (u->dtype != t->dtype || u->storage_numel != t->storage_numel)
                rc = pt_bad(path, "tensors '%.200s' and '%.200s' give storage '%.200s' two "
                            "types or sizes", t->name, u->name, keys[k]);
            start[refs[j].tensor] = at + 8;
        }
        if (!rc)
            at += 8 + count * es;
    }
    for (size_t i = 0; !rc && i < n_pt; i++)
        if (!start[i])
            rc = pt_bad(path, "tensor '%.200s': its storage '%.200s' is not in the file",
                        pt[i].name, pt[i].key);
        else
            out[i] = st_tensor(&pt[i], start[i]);
    free(refs);
    free(start);
    return rc;
}

static int open_legacy(const char *path, int fd, uint64_t size, pt_tensor **pt, size_t *n_pt,
                       tr_st_tensor **out)
{
    char **keys = NULL;
    size_t n_keys = 0;
    uint64_t data = 0;
    int rc = TR_OK;
    /* the pickles' bytes are unknown: read 1 MiB, then twice as much while that is short */
    for (size_t cap = 1u << 20;; cap *= 2) {
        size_t n = size < cap ? (size_t)size : cap;
        unsigned char *buf = malloc(n);
        if (!buf)
            return tr_fail(TR_ERR_NOMEM, "out of memory reading %s", path);
        rc = pt_read_at(fd, path, buf, n, 0);
        if (!rc)
            rc = legacy_pickles(path, buf, n, pt, n_pt, &keys, &n_keys, &data);
        free(buf);
        if (!rc || data != UINT64_MAX || n == size || cap >= PT_MAX_PICKLE)
            break;
        pt_tensors_free(*pt, *n_pt), *pt = NULL, *n_pt = 0;
        for (size_t i = 0; i < n_keys; i++)
            free(keys[i]);
        free(keys), keys = NULL, n_keys = 0;
    }
    if (!rc && !(*out = calloc(*n_pt + 1, sizeof **out)))
        rc = tr_fail(TR_ERR_NOMEM, "out of memory reading %s", path);
    if (!rc)
        rc = legacy_storages(path, fd, size, data, *pt, *n_pt, keys, n_keys, *out);
    for (size_t i = 0; i < n_keys; i++)
        free(keys[i]);
    free(keys);
    return rc;
}

/* ------------------------------------------------------------------ tr_pt_open */

/* path opened for reading: *fd, *size and its first bytes head[0, PT_HEAD) (zeros past the end) */
enum { PT_HEAD = sizeof legacy_magic };
static int open_file(const char *path, int *fd, uint64_t *size, unsigned char *head)
{
    *fd = open(path, O_RDONLY | O_CLOEXEC);
    if (*fd < 0)
        return tr_fail(errno == ENOENT ? TR_ERR_INVALID : TR_ERR_IO, "cannot open %s: %s", path,
                       strerror(errno));
    struct stat st;
    int rc = TR_OK;
    memset(head, 0, PT_HEAD);
    if (fstat(*fd, &st))
        rc = tr_fail(TR_ERR_IO, "cannot stat %s: %s", path, strerror(errno));
    else if (!S_ISREG(st.st_mode))
        rc = pt_bad(path, "not a regular file");
    *size = rc ? 0 : (uint64_t)st.st_size;
    if (!rc && *size >= 4)
        rc = pt_read_at(*fd, path, head, *size < PT_HEAD ? (size_t)*size : PT_HEAD, 0);
    if (rc)
        close(*fd), *fd = -1;
    return rc;
}

int tr_pt_open(const char *path, tr_st_file **out)
{
    *out = NULL;
    int fd = -1;
    uint64_t size = 0;
    unsigned char head[PT_HEAD];
    int rc = open_file(path, &fd, &size, head);
    if (rc)
        return rc;
    pt_tensor *pt = NULL;
    size_t n_pt = 0;
    tr_st_tensor *t = NULL;
    if (size >= 4 && !memcmp(head, "PK\3\4", 4)) {
        rc = open_zip(path, fd, size, &pt, &n_pt, &t);
    } else if (size >= sizeof head && !memcmp(head, legacy_magic, sizeof head)) {
        rc = open_legacy(path, fd, size, &pt, &n_pt, &t);
    } else {
        rc = pt_bad(path, "neither a ZIP archive (torch.save since PyTorch 1.6) nor a legacy "
                    "torch.save file (not a PyTorch weights file)");
    }
    if (rc) {
        for (size_t i = 0; t && i < n_pt; i++)
            free((char *)t[i].name);
        free(t);
        pt_tensors_free(pt, n_pt);
        close(fd);
        return rc;
    }
    pt_tensors_free(pt, n_pt);
    return st_file_adopt(path, fd, t, n_pt, out);
}

/* ------------------------------------------------------------------ objects (PT_OBJECTS) */

struct pt_objects {
    char *path;
    int fd;
    pt_zip z;
    pt_pickle *p;
};

int pt_objects_open(const char *path, pt_objects **out)
{
    *out = NULL;
    pt_objects *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) {
        free(f);
        return tr_fail(TR_ERR_NOMEM, "out of memory reading %s", path);
    }
    uint64_t size = 0;
    unsigned char head[PT_HEAD];
    int rc = open_file(path, &f->fd, &size, head), zip = 0;
    if (!rc && (size < 4 || memcmp(head, "PK\3\4", 4)))
        rc = pt_bad(path, "not a ZIP archive (torch.save since PyTorch 1.6%s)",
                    size >= sizeof head && !memcmp(head, legacy_magic, sizeof head)
                        ? ": a legacy torch.save file, which is read for state dicts alone"
                        : "; not a torch.save file");
    if (!rc && !(rc = pt_zip_open(f->fd, size, path, &f->z)))
        zip = 1;
    if (!rc)
        rc = zip_pickle(path, f->fd, &f->z, PT_OBJECTS, &f->p);
    if (rc) {
        if (zip)
            pt_zip_free(&f->z);
        if (f->fd >= 0)
            close(f->fd);
        free(f->path);
        free(f);
        return rc;
    }
    *out = f;
    return TR_OK;
}

pt_pickle *pt_objects_pickle(pt_objects *f) { return f->p; }

int pt_objects_state(pt_objects *f, uint32_t d, tr_st_file **out)
{
    pt_tensor *pt = NULL;
    size_t n = 0;
    tr_st_tensor *t = NULL;
    *out = NULL;
    int rc = pt_pickle_state_of(f->p, d, 1, &pt, &n), fd = -1;
    if (!rc)
        rc = zip_tensors(f->path, &f->z, pt, n, &t);
    if (!rc && (fd = dup(f->fd)) < 0)
        rc = tr_fail(TR_ERR_IO, "cannot reopen %s: %s", f->path, strerror(errno));
    if (rc) {
        for (size_t i = 0; t && i < n; i++)
            free((char *)t[i].name);
        free(t);
        pt_tensors_free(pt, n);
        return rc;
    }
    pt_tensors_free(pt, n);
    return st_file_adopt(f->path, fd, t, n, out);
}

void pt_objects_close(pt_objects *f)
{
    if (!f)
        return;
    pt_pickle_free(f->p);
    pt_zip_free(&f->z);
    close(f->fd);
    free(f->path);
    free(f);
}

/* ------------------------------------------------------------------ one tensor at an offset */

int pt_tensor_at(int fd, const char *path, uint64_t base, uint64_t size, const char *name,
                 tr_st_file **out)
{
    *out = NULL;
    pt_zip z;
    pt_pickle *p = NULL;
    pt_tensor pt = {0};
    tr_st_tensor *t = NULL;
    int rc = pt_zip_open_at(fd, base, size, path, &z), dfd = -1;
    if (rc)
        return rc;
    if (!(rc = zip_pickle(path, fd, &z, 0, &p)))
        rc = pt_pickle_tensor(p, name, &pt);
    pt_pickle_free(p);
    if (!rc)
        rc = zip_tensors(path, &z, &pt, 1, &t);
    pt_zip_free(&z);
    if (!rc && (dfd = dup(fd)) < 0)
        rc = tr_fail(TR_ERR_IO, "cannot reopen %s: %s", path, strerror(errno));
    free(pt.name), free(pt.key);
    if (rc) {
        if (t)
            free((char *)t[0].name);
        free(t);
        return rc;
    }
    return st_file_adopt(path, dfd, t, 1, out);
}
