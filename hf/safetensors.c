/* safetensors reading: the header validated whole at open (hf.h lists what is refused), then
 * tensors read with pread (no mapping: a file cut short later is an error, not a SIGBUS). */
#include "hf/hf_internal.h"
#include "hf/pt_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct tr_st_file {
    char *path;
    int fd;
    uint64_t data_start, data_bytes; /* file offset of the data, its length (.bin: 0, 0) */
    tr_st_tensor *tensors;           /* [n], data order */
    const tr_st_tensor **by_name;    /* [n], sorted by name */
    size_t n;
    char **meta; /* KEY, VALUE pairs: [2 * n_meta] */
    size_t n_meta;
};

static const struct {
    const char *name;
    size_t size;
} dtypes[TR_ST_N_DTYPES] = {
    [TR_ST_BOOL] = {"BOOL", 1}, [TR_ST_U8] = {"U8", 1},         [TR_ST_I8] = {"I8", 1},
    [TR_ST_F8_E4M3] = {"F8_E4M3", 1}, [TR_ST_F8_E5M2] = {"F8_E5M2", 1},
    [TR_ST_I16] = {"I16", 2},   [TR_ST_U16] = {"U16", 2},       [TR_ST_F16] = {"F16", 2},
    [TR_ST_BF16] = {"BF16", 2}, [TR_ST_I32] = {"I32", 4},       [TR_ST_U32] = {"U32", 4},
    [TR_ST_F32] = {"F32", 4},   [TR_ST_I64] = {"I64", 8},       [TR_ST_U64] = {"U64", 8},
    [TR_ST_F64] = {"F64", 8},
};

const char *tr_st_dtype_name(tr_st_dtype d)
{
    return (unsigned)d < TR_ST_N_DTYPES ? dtypes[d].name : "?";
}

size_t tr_st_dtype_size(tr_st_dtype d)
{
    return (unsigned)d < TR_ST_N_DTYPES ? dtypes[d].size : 0;
}

int st_dtype_from_name(const char *name, tr_st_dtype *out)
{
    for (int d = 0; d < TR_ST_N_DTYPES; d++)
        if (!strcmp(name, dtypes[d].name)) {
            *out = (tr_st_dtype)d;
            return 1;
        }
    return 0;
}

/* ------------------------------------------------------------------ the header */

static int bad(const tr_st_file *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(const tr_st_file *f, const char *fmt, ...)
{
    char what[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return tr_fail(TR_ERR_INVALID, "%s: %s (not a valid safetensors file)", f->path, what);
}

/* A JSON integer in [0, 2^53] (what a double, Python's and JavaScript's writers, holds). */
static int get_u64(const json_t *v, uint64_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        json_integer_value(v) > (json_int_t)1 << 53)
        return 0;
    *out = (uint64_t)json_integer_value(v);
    return 1;
}

static int parse_metadata(tr_st_file *f, json_t *obj)
{
    if (!json_is_object(obj))
        return bad(f, "__metadata__ is not an object");
    f->meta = calloc(2 * json_object_size(obj) + 1, sizeof *f->meta);
    if (!f->meta)
        return tr_fail(TR_ERR_NOMEM, "out of memory reading %s", f->path);
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        if (!json_is_string(v))
            return bad(f, "__metadata__ value of '%.200s' is not a string", key);
        f->meta[2 * f->n_meta] = strdup(key);
        f->meta[2 * f->n_meta + 1] = strdup(json_string_value(v));
        f->n_meta++;
        if (!f->meta[2 * f->n_meta - 2] || !f->meta[2 * f->n_meta - 1])
            return tr_fail(TR_ERR_NOMEM, "out of memory reading %s", f->path);
    }
    return TR_OK;
}

/* One entry {dtype, shape, data_offsets} into *t (name set by the caller). */
static int parse_entry(tr_st_file *f, const char *name, json_t *e, tr_st_tensor *t)
{
    if (!json_is_object(e))
        return bad(f, "tensor '%.200s' is not an object", name);
    json_t *dtype = json_object_get(e, "dtype"), *shape = json_object_get(e, "shape");
    json_t *offs = json_object_get(e, "data_offsets");
    if (!dtype || !shape || !offs || json_object_size(e) != 3)
        return bad(f, "tensor '%.200s' must have exactly the keys dtype, shape and data_offsets",
                   name);
    if (!json_is_string(dtype) || !st_dtype_from_name(json_string_value(dtype), &t->dtype))
        return bad(f, "tensor '%.200s': unknown dtype %.40s%.40s%.40s", name,
                   json_is_string(dtype) ? "'" : "", json_is_string(dtype)
                   ? json_string_value(dtype) : "(not a string)", json_is_string(dtype) ? "'" : "");
    if (!json_is_array(shape) || json_array_size(shape) > TR_ST_MAX_DIMS)
        return bad(f, "tensor '%.200s': shape must be an array of at most %d sizes", name,
                   TR_ST_MAX_DIMS);
    t->ndim = (int)json_array_size(shape);
    t->numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (!get_u64(json_array_get(shape, (size_t)d), &t->shape[d]))
            return bad(f, "tensor '%.200s': shape[%d] is not an integer in [0, 2^53]", name, d);
        if (__builtin_mul_overflow(t->numel, t->shape[d], &t->numel))
            return bad(f, "tensor '%.200s': the shape's element count overflows", name);
    }
    if (!json_is_array(offs) || json_array_size(offs) != 2 ||
        !get_u64(json_array_get(offs, 0), &t->begin) || !get_u64(json_array_get(offs, 1), &t->end))
        return bad(f, "tensor '%.200s': data_offsets must be two integers in [0, 2^53]", name);
    if (t->begin > t->end)
        return bad(f, "tensor '%.200s': data_offsets [%llu, %llu) end before they begin", name,
                   (unsigned long long)t->begin, (unsigned long long)t->end);
    uint64_t bytes;
    if (__builtin_mul_overflow(t->numel, (uint64_t)tr_st_dtype_size(t->dtype), &bytes) ||
        bytes != t->end - t->begin)
        return bad(f, "tensor '%.200s': shape %s of %s is %llu elements of %zu bytes, but "
                      "data_offsets hold %llu bytes", name, st_shape_text(t).text,
                   tr_st_dtype_name(t->dtype), (unsigned long long)t->numel,
                   tr_st_dtype_size(t->dtype), (unsigned long long)(t->end - t->begin));
    if (t->end > f->data_bytes)
        return bad(f, "tensor '%.200s': data_offsets [%llu, %llu) run past the end of the data "
                      "(%llu bytes): truncated?", name, (unsigned long long)t->begin,
                   (unsigned long long)t->end, (unsigned long long)f->data_bytes);
    return TR_OK;
}

static int cmp_begin(const void *a, const void *b)
{
    const tr_st_tensor *x = a, *y = b;
    return x->begin != y->begin ? (x->begin < y->begin ? -1 : 1)
           : x->end != y->end   ? (x->end < y->end ? -1 : 1)
                                : strcmp(x->name, y->name);
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp((*(const tr_st_tensor *const *)a)->name, (*(const tr_st_tensor *const *)b)->name);
}

static int index_names(tr_st_file *f);

/* The tensors, sorted by offset, must tile the data exactly. */
static int check_tiling(const tr_st_file *f)
{
    uint64_t at = 0;
    for (size_t i = 0; i < f->n; i++) {
        const tr_st_tensor *t = &f->tensors[i];
        if (t->begin < at)
            return bad(f, "tensors '%.200s' and '%.200s' overlap (bytes [%llu, %llu) and "
                          "[%llu, %llu))", f->tensors[i - 1].name, t->name,
                       (unsigned long long)f->tensors[i - 1].begin,
                       (unsigned long long)f->tensors[i - 1].end,
                       (unsigned long long)t->begin, (unsigned long long)t->end);
        if (t->begin > at)
            return bad(f, "bytes [%llu, %llu) of the data belong to no tensor",
                       (unsigned long long)at, (unsigned long long)t->begin);
        at = t->end;
    }
    if (at != f->data_bytes)
        return bad(f, "the last %llu bytes of the data belong to no tensor",
                   (unsigned long long)(f->data_bytes - at));
    return TR_OK;
}

/* The JSON header text (n bytes) into f's tables. */
static int parse_header(tr_st_file *f, const char *text, size_t n)
{
    size_t bad_at = tr_utf8_valid_prefix((const unsigned char *)text, n);
    if (bad_at < n)
        return bad(f, "the header is not UTF-8 (byte %zu of it)", bad_at);
    if (n == 0 || text[0] != '{')
        return bad(f, "the header does not start with '{'");
    json_error_t err;
    json_t *root = json_loadb(text, n, JSON_REJECT_DUPLICATES, &err);
    if (!root)
        return bad(f, "the header is not valid JSON: %s (line %d, column %d)",
                   json_error_code(&err) == json_error_duplicate_key
                       ? "a name appears twice" : err.text, err.line, err.column);
    int rc = TR_OK;
    if (!json_is_object(root))
        rc = bad(f, "the header is not a JSON object");
    size_t cap = json_object_size(root);
    if (!rc && !(f->tensors = calloc(cap + 1, sizeof *f->tensors)))
        rc = tr_fail(TR_ERR_NOMEM, "out of memory reading %s", f->path);
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (rc)
            break;
        if (!strcmp(key, "__metadata__")) {
            rc = parse_metadata(f, v);
            continue;
        }
        tr_st_tensor *t = &f->tensors[f->n];
        if (!(t->name = strdup(key)))
            rc = tr_fail(TR_ERR_NOMEM, "out of memory reading %s", f->path);
        else
            f->n++, rc = parse_entry(f, key, v, t);
    }
    json_decref(root);
    if (rc)
        return rc;
    qsort(f->tensors, f->n, sizeof *f->tensors, cmp_begin);
    if ((rc = check_tiling(f)))
        return rc;
    return index_names(f);
}

/* The by-name index of f's tensors; a name given twice is refused. */
static int index_names(tr_st_file *f)
{
    if (!(f->by_name = calloc(f->n + 1, sizeof *f->by_name)))
        return tr_fail(TR_ERR_NOMEM, "out of memory reading %s", f->path);
    for (size_t i = 0; i < f->n; i++)
        f->by_name[i] = &f->tensors[i];
    qsort(f->by_name, f->n, sizeof *f->by_name, cmp_name);
    for (size_t i = 1; i < f->n; i++)
        if (!strcmp(f->by_name[i]->name, f->by_name[i - 1]->name))
            return tr_fail(TR_ERR_INVALID, "%s: tensor '%.200s' is given twice", f->path,
                           f->by_name[i]->name);
    return TR_OK;
}

int st_file_adopt(const char *path, int fd, tr_st_tensor *t, size_t n, tr_st_file **out)
{
    *out = NULL;
    tr_st_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) {
        for (size_t i = 0; i < n; i++)
            free((char *)t[i].name);
        free(t);
        free(f);
        close(fd);
        return tr_fail(TR_ERR_NOMEM, "out of memory opening %s", path);
    }
    f->fd = fd, f->tensors = t, f->n = n; /* data_start 0: begin and end are file offsets */
    qsort(f->tensors, f->n, sizeof *f->tensors, cmp_begin);
    int rc = index_names(f);
    if (rc) {
        tr_st_close(f);
        return rc;
    }
    *out = f;
    return TR_OK;
}

/* The header's length and text; checks the length against the file. */
static int read_header(tr_st_file *f, uint64_t file_size, char **text, uint64_t *len)
{
    unsigned char b[8];
    if (file_size < 8)
        return bad(f, "%llu bytes, shorter than the 8-byte header length",
                   (unsigned long long)file_size);
    if (tr_pread_all(f->fd, b, 8, 0))
        return tr_fail(TR_ERR_IO, "cannot read %s: %s", f->path, errno ? strerror(errno) : "short file");
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | b[i];
    if (n > TR_ST_MAX_HEADER)
        return bad(f, "a header of %llu bytes is over the limit of %d", (unsigned long long)n,
                   TR_ST_MAX_HEADER);
    if (n > file_size - 8)
        return bad(f, "the header length %llu runs past the end of the file (%llu bytes)",
                   (unsigned long long)n, (unsigned long long)file_size);
    if (!(*text = malloc(n + 1)))
        return tr_fail(TR_ERR_NOMEM, "out of memory for the header of %s", f->path);
    if (tr_pread_all(f->fd, *text, n, 8))
        return tr_fail(TR_ERR_IO, "cannot read %s: %s", f->path, errno ? strerror(errno) : "short file");
    (*text)[n] = '\0';
    *len = n;
    return TR_OK;
}

int tr_st_open(const char *path, tr_st_file **out)
{
    *out = NULL;
    tr_st_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) {
        free(f);
        return tr_fail(TR_ERR_NOMEM, "out of memory opening %s", path);
    }
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0) {
        int rc = tr_fail(errno == ENOENT ? TR_ERR_INVALID : TR_ERR_IO, "cannot open %s: %s", path,
                         strerror(errno));
        tr_st_close(f);
        return rc;
    }
    struct stat st;
    char *text = NULL;
    uint64_t len = 0;
    int rc = TR_OK;
    if (fstat(f->fd, &st))
        rc = tr_fail(TR_ERR_IO, "cannot stat %s: %s", path, strerror(errno));
    else if (!S_ISREG(st.st_mode))
        rc = bad(f, "not a regular file");
    if (!rc)
        rc = read_header(f, (uint64_t)st.st_size, &text, &len);
    if (!rc) {
        f->data_start = 8 + len;
        f->data_bytes = (uint64_t)st.st_size - f->data_start;
        rc = parse_header(f, text, len);
    }
    free(text);
    if (rc) {
        tr_st_close(f);
        return rc;
    }
    *out = f;
    return TR_OK;
}

void tr_st_close(tr_st_file *f)
{
    if (!f)
        return;
    if (f->fd >= 0)
        close(f->fd);
    for (size_t i = 0; i < f->n; i++)
        free((char *)f->tensors[i].name);
    for (size_t i = 0; i < 2 * f->n_meta; i++)
        free(f->meta[i]);
    free(f->meta);
    free(f->tensors);
    free(f->by_name);
    free(f->path);
    free(f);
}

const char *tr_st_path(const tr_st_file *f) { return f->path; }
size_t tr_st_count(const tr_st_file *f) { return f->n; }

const tr_st_tensor *tr_st_at(const tr_st_file *f, size_t i)
{
    return i < f->n ? &f->tensors[i] : NULL;
}

const tr_st_tensor *tr_st_find(const tr_st_file *f, const char *name)
{
    tr_st_tensor key = {.name = name};
    const tr_st_tensor *k = &key, *const *hit = bsearch(&k, f->by_name, f->n, sizeof *f->by_name,
                                                         cmp_name);
    return hit ? *hit : NULL;
}

const char *tr_st_meta(const tr_st_file *f, const char *key)
{
    for (size_t i = 0; i < f->n_meta; i++)
        if (!strcmp(f->meta[2 * i], key))
            return f->meta[2 * i + 1];
    return NULL;
}

/* ------------------------------------------------------------------ the data */

int tr_st_read(tr_st_file *f, const tr_st_tensor *t, void *out)
{
    if (tr_pread_all(f->fd, out, t->end - t->begin, f->data_start + t->begin))
        return tr_fail(errno ? TR_ERR_IO : TR_ERR_INVALID, "cannot read tensor '%.200s' of %s: %s",
                       t->name, f->path, errno ? strerror(errno) : "the file is shorter than its "
                       "header says (truncated since it was opened?)");
    return TR_OK;
}

int tr_st_read_f32(tr_st_file *f, const tr_st_tensor *t, float *out)
{
    size_t n = t->numel;
    if (t->dtype == TR_ST_F32)
        return tr_st_read(f, t, out);
    if (t->dtype == TR_ST_F16 || t->dtype == TR_ST_BF16) {
        /* the 2-byte values into the front of out, then widened from the back: element i's
         * float overwrites bytes 4i..4i+3, values 2i and 2i+1, which are already read */
        int rc = tr_st_read(f, t, out);
        if (rc)
            return rc;
        const uint16_t *h = (const uint16_t *)out;
        for (size_t i = n; i-- > 0;) {
            uint16_t v = h[i];
            out[i] = t->dtype == TR_ST_F16 ? tr_f16_to_f32(v) : tr_bf16_to_f32(v);
        }
        return TR_OK;
    }
    if (t->dtype == TR_ST_F64) {
        enum { CHUNK = 8192 };
        double *buf = malloc(CHUNK * sizeof *buf);
        if (!buf)
            return tr_fail(TR_ERR_NOMEM, "out of memory reading %s", f->path);
        int rc = TR_OK;
        for (size_t i = 0; i < n && !rc; i += CHUNK) {
            size_t m = n - i < CHUNK ? n - i : CHUNK;
            tr_st_tensor part = *t;
            part.begin = t->begin + i * sizeof(double);
            part.end = part.begin + m * sizeof(double);
            if (!(rc = tr_st_read(f, &part, buf)))
                for (size_t k = 0; k < m; k++)
                    out[i + k] = (float)buf[k];
        }
        free(buf);
        return rc;
    }
    return tr_fail(TR_ERR_INVALID, "%s: tensor '%.200s' is %s; floats are read from F32, F16, "
                   "BF16 or F64", f->path, t->name, tr_st_dtype_name(t->dtype));
}
