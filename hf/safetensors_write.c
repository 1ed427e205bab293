/* safetensors writing: one file, or a folder of shards with model.safetensors.index.json.
 * Offsets are fixed when the writer is made (tensors in the order given), so the header is
 * written first and each tensor's bytes stream after it. */
#include "hf/hf_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    char *path;
    size_t first, count; /* tensors [first, first + count) */
    uint64_t bytes;      /* of their data */
} st_shard;

struct tr_st_writer {
    tr_st_tensor *tensors; /* [n] own copies; begin/end within their shard */
    size_t n, next;        /* next: the tensor the next put writes */
    st_shard *shards;
    size_t n_shards, cur; /* cur: the shard being written (its file open as fd) */
    int fd;
    char **meta; /* KEY, VALUE, ..., NULL (own copy) */
    char *index_path; /* sharded with more than one shard: the index to write at the end */
    int created;      /* shards whose file was created (for abort) */
};

static void writer_free(tr_st_writer *w)
{
    if (!w)
        return;
    if (w->fd >= 0)
        close(w->fd);
    for (size_t i = 0; i < w->n; i++)
        free((char *)w->tensors[i].name);
    for (size_t i = 0; i < w->n_shards; i++)
        free(w->shards[i].path);
    for (size_t i = 0; w->meta && w->meta[i]; i++)
        free(w->meta[i]);
    free(w->meta);
    free(w->shards);
    free(w->tensors);
    free(w->index_path);
    free(w);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Copies of the tensors (numel from the shape) and meta; refuses empty or repeated names, an
 * unknown dtype, too many dimensions, an overflowing size. */
static int copy_tensors(tr_st_writer *w, const tr_st_tensor *tensors, size_t n,
                        const char *const *meta)
{
    w->tensors = calloc(n + 1, sizeof *w->tensors);
    const char **names = calloc(n + 1, sizeof *names);
    int rc = w->tensors && names ? TR_OK : tr_fail(TR_ERR_NOMEM, "out of memory for a header");
    for (size_t i = 0; i < n && !rc; i++) {
        tr_st_tensor *t = &w->tensors[i];
        *t = tensors[i];
        t->name = NULL;
        t->numel = 1;
        uint64_t bytes = 0;
        int ok = tensors[i].name && *tensors[i].name && strcmp(tensors[i].name, "__metadata__") &&
                 (unsigned)t->dtype < TR_ST_N_DTYPES && t->ndim >= 0 && t->ndim <= TR_ST_MAX_DIMS;
        for (int d = 0; ok && d < t->ndim; d++)
            ok = !__builtin_mul_overflow(t->numel, t->shape[d], &t->numel);
        ok = ok && !__builtin_mul_overflow(t->numel, (uint64_t)tr_st_dtype_size(t->dtype), &bytes);
        if (!ok) {
            rc = tr_fail(TR_ERR_INVALID, "safetensors writer: tensor %zu ('%.200s') has no name, "
                         "a reserved one, an unknown dtype or an impossible shape", i,
                         tensors[i].name ? tensors[i].name : "");
            break;
        }
        if (!(t->name = strdup(tensors[i].name)))
            rc = tr_fail(TR_ERR_NOMEM, "out of memory for a header");
        else
            w->n++;
        t->end = bytes; /* for now: the byte count */
        names[i] = t->name;
    }
    if (!rc) {
        qsort(names, n, sizeof *names, cmp_str);
        for (size_t i = 1; i < n && !rc; i++)
            if (!strcmp(names[i - 1], names[i]))
                rc = tr_fail(TR_ERR_INVALID, "safetensors writer: tensor '%.200s' given twice",
                             names[i]);
    }
    free(names);
    size_t m = 0;
    while (meta && meta[m] && meta[m + 1])
        m += 2;
    if (!rc && !(w->meta = calloc(m + 1, sizeof *w->meta)))
        rc = tr_fail(TR_ERR_NOMEM, "out of memory for a header");
    for (size_t i = 0; i < m && !rc; i++)
        if (!(w->meta[i] = strdup(meta[i])))
            rc = tr_fail(TR_ERR_NOMEM, "out of memory for a header");
    return rc;
}

/* Shards of at most max bytes (0: one), each tensor's begin/end within its shard. */
static int plan_shards(tr_st_writer *w, uint64_t max)
{
    w->shards = calloc(w->n + 1, sizeof *w->shards);
    if (!w->shards)
        return tr_fail(TR_ERR_NOMEM, "out of memory planning shards");
    for (size_t i = 0; i < w->n; i++) {
        tr_st_tensor *t = &w->tensors[i];
        uint64_t bytes = t->end;
        st_shard *s = w->n_shards ? &w->shards[w->n_shards - 1] : NULL;
        if (!s || (max && s->count && s->bytes + bytes > max)) {
            s = &w->shards[w->n_shards++];
            s->first = i;
        }
        t->begin = s->bytes;
        t->end = s->bytes + bytes;
        s->bytes += bytes;
        s->count++;
    }
    if (!w->n_shards)
        w->n_shards = 1; /* no tensors: one file with an empty header */
    return TR_OK;
}

/* The JSON header of shard s, padded with spaces to a multiple of 8 bytes. */
static int shard_header(const tr_st_writer *w, const st_shard *s, char **out, size_t *len)
{
    json_t *root = json_object(), *meta = json_object();
    int rc = root && meta ? TR_OK : tr_fail(TR_ERR_NOMEM, "out of memory for a header");
    for (size_t i = 0; !rc && w->meta[i] && w->meta[i + 1]; i += 2)
        if (json_object_set_new(meta, w->meta[i], json_string(w->meta[i + 1])))
            rc = tr_fail(TR_ERR_INVALID, "safetensors writer: metadata '%.200s' is not UTF-8",
                         w->meta[i]);
    if (!rc && json_object_size(meta))
        rc = json_object_set(root, "__metadata__", meta) ? tr_fail(TR_ERR_NOMEM, "out of memory") : 0;
    for (size_t i = s->first; i < s->first + s->count && !rc; i++) {
        const tr_st_tensor *t = &w->tensors[i];
        json_t *shape = json_array(), *e = json_object();
        for (int d = 0; d < t->ndim && shape; d++)
            json_array_append_new(shape, json_integer((json_int_t)t->shape[d]));
        json_t *offs = json_pack("[II]", (json_int_t)t->begin, (json_int_t)t->end);
        if (!shape || !e || !offs || json_object_set_new(e, "dtype", json_string(tr_st_dtype_name(t->dtype))) ||
            json_object_set_new(e, "shape", shape) || json_object_set_new(e, "data_offsets", offs) ||
            json_object_set_new(root, t->name, e))
            rc = tr_fail(TR_ERR_INVALID, "safetensors writer: cannot add tensor '%.200s' to the "
                         "header (a name that is not UTF-8, or out of memory)", t->name);
    }
    char *text = rc ? NULL : json_dumps(root, JSON_COMPACT);
    json_decref(root);
    json_decref(meta);
    if (!rc && !text)
        rc = tr_fail(TR_ERR_NOMEM, "out of memory for a header");
    if (rc)
        return rc;
    size_t n = strlen(text), padded = (n + 7) / 8 * 8;
    char *buf = realloc(text, padded + 1);
    if (!buf) {
        free(text);
        return tr_fail(TR_ERR_NOMEM, "out of memory for a header");
    }
    memset(buf + n, ' ', padded - n);
    buf[padded] = '\0';
    *out = buf;
    *len = padded;
    return TR_OK;
}

/* Create shard `cur`'s file and write its header. */
static int open_shard(tr_st_writer *w)
{
    st_shard *s = &w->shards[w->cur];
    char *header = NULL;
    size_t len = 0;
    int rc = shard_header(w, s, &header, &len);
    if (rc)
        return rc;
    w->fd = open(s->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        free(header);
        return tr_fail(TR_ERR_IO, "cannot create %s: %s", s->path, strerror(errno));
    }
    w->created = (int)w->cur + 1;
    unsigned char n8[8];
    for (int i = 0; i < 8; i++)
        n8[i] = (unsigned char)((uint64_t)len >> (8 * i));
    if (tr_write_all(w->fd, n8, 8) || tr_write_all(w->fd, header, len))
        rc = tr_fail(TR_ERR_IO, "cannot write %s: %s", s->path, strerror(errno));
    free(header);
    return rc;
}

static int close_shard(tr_st_writer *w)
{
    const char *path = w->shards[w->cur].path;
    int rc = fsync(w->fd) ? tr_fail(TR_ERR_IO, "cannot write %s: %s", path, strerror(errno)) : TR_OK;
    if (close(w->fd) && !rc)
        rc = tr_fail(TR_ERR_IO, "cannot close %s: %s", path, strerror(errno));
    w->fd = -1;
    w->cur++;
    return rc;
}

static int writer_make(const tr_st_tensor *tensors, size_t n, const char *const *meta,
                       uint64_t max_shard_bytes, tr_st_writer **out)
{
    *out = NULL;
    tr_st_writer *w = calloc(1, sizeof *w);
    if (!w)
        return tr_fail(TR_ERR_NOMEM, "out of memory for a safetensors writer");
    w->fd = -1;
    int rc = copy_tensors(w, tensors, n, meta);
    if (!rc)
        rc = plan_shards(w, max_shard_bytes);
    if (rc) {
        writer_free(w);
        return rc;
    }
    *out = w;
    return TR_OK;
}

int tr_st_create(const char *path, const tr_st_tensor *tensors, size_t n,
                 const char *const *meta, tr_st_writer **out)
{
    int rc = writer_make(tensors, n, meta, 0, out);
    if (!rc && !((*out)->shards[0].path = strdup(path)))
        rc = tr_fail(TR_ERR_NOMEM, "out of memory");
    if (!rc)
        rc = open_shard(*out);
    if (rc) {
        tr_st_abort(*out);
        *out = NULL;
    }
    return rc;
}

int tr_st_create_sharded(const char *dir, const tr_st_tensor *tensors, size_t n,
                         const char *const *meta, uint64_t max_shard_bytes, tr_st_writer **out)
{
    int rc = writer_make(tensors, n, meta, max_shard_bytes, out);
    tr_st_writer *w = *out;
    char path[4200], name[64];
    for (size_t i = 0; !rc && i < w->n_shards; i++) {
        if (w->n_shards == 1)
            snprintf(name, sizeof name, "model.safetensors");
        else
            snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", i + 1, w->n_shards);
        if (!(rc = hf_join(path, sizeof path, dir, name)) && !(w->shards[i].path = strdup(path)))
            rc = tr_fail(TR_ERR_NOMEM, "out of memory");
    }
    if (!rc && w->n_shards > 1 &&
        !(rc = hf_join(path, sizeof path, dir, "model.safetensors.index.json")) &&
        !(w->index_path = strdup(path)))
        rc = tr_fail(TR_ERR_NOMEM, "out of memory");
    if (!rc)
        rc = open_shard(w);
    if (rc && w) {
        tr_st_abort(w);
        *out = NULL;
    }
    return rc;
}

int tr_st_put(tr_st_writer *w, const void *data)
{
    if (w->next >= w->n)
        return tr_fail(TR_ERR_INVALID, "safetensors writer: more tensors put than declared (%zu)",
                       w->n);
    const tr_st_tensor *t = &w->tensors[w->next];
    if (w->fd < 0) {
        int rc = open_shard(w);
        if (rc)
            return rc;
    }
    if (tr_write_all(w->fd, data, t->end - t->begin))
        return tr_fail(TR_ERR_IO, "cannot write %s: %s", w->shards[w->cur].path, strerror(errno));
    w->next++;
    const st_shard *s = &w->shards[w->cur];
    return w->next == s->first + s->count ? close_shard(w) : TR_OK;
}

int tr_st_put_f32(tr_st_writer *w, const float *v)
{
    if (w->next >= w->n)
        return tr_st_put(w, v);
    const tr_st_tensor *t = &w->tensors[w->next];
    if (t->dtype == TR_ST_F32)
        return tr_st_put(w, v);
    if (t->dtype != TR_ST_F16 && t->dtype != TR_ST_BF16)
        return tr_fail(TR_ERR_INVALID, "safetensors writer: tensor '%.200s' is %s; floats are "
                       "written as F32, F16 or BF16", t->name, tr_st_dtype_name(t->dtype));
    uint16_t *h = malloc(t->numel * sizeof *h + 1);
    if (!h)
        return tr_fail(TR_ERR_NOMEM, "out of memory converting '%.200s'", t->name);
    int bf16 = t->dtype == TR_ST_BF16;
    for (size_t i = 0; i < t->numel; i++) {
        h[i] = bf16 ? tr_f32_to_bf16(v[i]) : tr_f32_to_f16(v[i]);
        /* a finite value beyond the format's largest rounds to infinity: refused, not written
         * as inf (BF16's largest is 3.3895e38, below float32's; F16's 65504) */
        if (isfinite(v[i]) && (h[i] & (bf16 ? 0x7f80u : 0x7c00u)) == (bf16 ? 0x7f80u : 0x7c00u)) {
            free(h);
            return tr_fail(TR_ERR_INVALID, "tensor '%.200s' holds %g at element %zu, beyond %s's "
                           "range (it would be written as infinity): export it as F32",
                           t->name, (double)v[i], i, tr_st_dtype_name(t->dtype));
        }
    }
    int rc = tr_st_put(w, h);
    free(h);
    return rc;
}

/* {"metadata": {"total_size": BYTES}, "weight_map": {NAME: FILE}} */
static int write_index(const tr_st_writer *w)
{
    json_t *map = json_object();
    uint64_t total = 0;
    int rc = map ? TR_OK : tr_fail(TR_ERR_NOMEM, "out of memory");
    for (size_t s = 0; s < w->n_shards && !rc; s++) {
        const char *file = strrchr(w->shards[s].path, '/');
        file = file ? file + 1 : w->shards[s].path;
        total += w->shards[s].bytes;
        for (size_t i = w->shards[s].first; i < w->shards[s].first + w->shards[s].count && !rc; i++)
            if (json_object_set_new(map, w->tensors[i].name, json_string(file)))
                rc = tr_fail(TR_ERR_NOMEM, "out of memory");
    }
    json_t *root = rc ? NULL : json_pack("{s:{s:I},s:O}", "metadata", "total_size",
                                         (json_int_t)total, "weight_map", map);
    char *text = root ? json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
    json_decref(root);
    json_decref(map);
    if (!rc && !text)
        rc = tr_fail(TR_ERR_NOMEM, "out of memory");
    if (!rc) {
        char dir[4200];
        snprintf(dir, sizeof dir, "%s", w->index_path);
        *strrchr(dir, '/') = '\0';
        size_t n = strlen(text);
        char *nl = realloc(text, n + 2);
        if (nl)
            text = nl, text[n] = '\n', text[n + 1] = '\0';
        rc = hf_write_text(dir, strrchr(w->index_path, '/') + 1, text);
    }
    free(text);
    return rc;
}

int tr_st_finish(tr_st_writer *w)
{
    int rc = TR_OK;
    if (w->next != w->n)
        rc = tr_fail(TR_ERR_INVALID, "safetensors writer: %zu of %zu tensors were put", w->next,
                     w->n);
    else if (w->n == 0 && w->fd >= 0)
        rc = close_shard(w);
    if (!rc && w->index_path)
        rc = write_index(w);
    if (rc) {
        tr_st_abort(w);
        return rc;
    }
    writer_free(w);
    return TR_OK;
}

void tr_st_abort(tr_st_writer *w)
{
    if (!w)
        return;
    if (w->fd >= 0)
        close(w->fd);
    w->fd = -1;
    for (int i = 0; i < w->created; i++)
        unlink(w->shards[i].path);
    if (w->index_path)
        unlink(w->index_path);
    writer_free(w);
}
