/* `trident convert --from megatron` of a --ckpt-format torch_dist save (megatron.h): common.pt's
 * args, .metadata's chunks of each global tensor (checked to tile it exactly), each chunk's
 * torch.save archive inside its .distcp file, into one whole trident model. */
#include "hf/hf_internal.h"
#include "hf/megatron_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "train/train.h"

/* One chunk of a global tensor: its offsets and sizes in it, its _StorageInfo (0: none yet). */
typedef struct {
    uint64_t off[TR_ST_MAX_DIMS], size[TR_ST_MAX_DIMS];
    uint32_t info;
    int has_info;
} dist_chunk;

/* A model tensor of .metadata: its key, global shape, chunks. */
typedef struct {
    const char *key; /* the pickle's string */
    int ndim;
    uint64_t shape[TR_ST_MAX_DIMS];
    dist_chunk *chunks;
    size_t n_chunks;
    int used;
} dist_key;

/* An opened .distcp file. */
typedef struct {
    char *name;
    int fd;
    uint64_t size;
} dist_file;

typedef struct {
    const char *dir;
    char md_path[4400];
    pt_pickle *md;
    dist_key *keys;
    size_t n_keys;
    dist_file *files;
    size_t n_files;
    mlm_args a;
} dist_ckpt;

/* ------------------------------------------------------------------ metadata.json, common.pt */

static int read_backend(const char *dir)
{
    char path[4400];
    json_t *root = NULL;
    snprintf(path, sizeof path, "%s/metadata.json", dir);
    int rc = hf_load_json(path, 1 << 16, &root);
    if (rc)
        return rc;
    json_t *b = json_object_get(root, "sharded_backend");
    const char *name = json_is_string(b) ? json_string_value(b) : NULL;
    if (!name)
        rc = tr_fail(TR_ERR_INVALID, "%s: sharded_backend is %s (megatron-core's "
                     "dist_checkpointing writes \"torch_dist\")", path,
                     b ? "not a string" : "missing");
    else if (strcmp(name, "torch_dist"))
        rc = tr_fail(TR_ERR_INVALID, "%s: sharded_backend \"%.40s\" is not read (only torch_dist: "
                     "Megatron-LM's --ckpt-format torch_dist, or torch)", path, name);
    json_decref(root);
    return rc;
}

/* common.pt: args (-> k->a), iteration, checkpoint_version. */
static int read_common(dist_ckpt *k, tr_megatron_info *info)
{
    char path[4400];
    pt_objects *f = NULL;
    snprintf(path, sizeof path, "%s/common.pt", k->dir);
    int rc = pt_objects_open(path, &f);
    if (rc)
        return rc;
    pt_pickle *p = pt_objects_pickle(f);
    uint32_t top = pt_pickle_top(p), v = 0;
    int64_t it = 0;
    if (pt_value_kind(p, top) != PT_V_DICT)
        rc = tr_fail(TR_ERR_INVALID, "%s holds %s, not Megatron-LM's dict of args, iteration, ...",
                     path, pt_value_kind_name(p, top));
    else if (!pt_value_get(p, top, "args", &v))
        rc = tr_fail(TR_ERR_INVALID, "%s has no args (Megatron-LM's save_checkpoint writes them; "
                     "they are needed)", path);
    else
        rc = mlm_read_args(p, v, path, &k->a);
    if (!rc && pt_value_get(p, top, "iteration", &v) && pt_value_int(p, v, &it))
        info->iteration = (int)it;
    if (!rc && pt_value_get(p, top, "checkpoint_version", &v))
        (void)pt_value_number(p, v, &info->version);
    pt_objects_close(f);
    return rc;
}

/* ------------------------------------------------------------------ .metadata */

static int is_model_key(const char *key)
{
    return !strncmp(key, "embedding.", 10) || !strncmp(key, "decoder.", 8) ||
           !strncmp(key, "output_layer.", 13);
}

/* attribute name of object o (of class cls, named what), or an error */
static int attr(const dist_ckpt *k, uint32_t o, int cls, const char *name, const char *what,
                uint32_t *v)
{
    if (pt_value_class(k->md, o) != cls || !pt_value_get(k->md, o, name, v))
        return tr_fail(TR_ERR_INVALID, "%s: %s is %s without %s (not torch.distributed."
                       "checkpoint's Metadata)", k->md_path, what, pt_value_kind_name(k->md, o),
                       name);
    return TR_OK;
}

/* a tuple of n ints >= 0 (torch.Size) into out; *n its length */
static int dims(const dist_ckpt *k, uint32_t t, const char *key, const char *what, uint64_t *out,
                int *n)
{
    size_t len = pt_value_len(k->md, t);
    if (pt_value_kind(k->md, t) != PT_V_TUPLE || len > TR_ST_MAX_DIMS || len == 0)
        return tr_fail(TR_ERR_INVALID, "%s: %s of tensor %s is %s, not a torch.Size of 1 to %d "
                       "ints", k->md_path, what, key, pt_value_kind_name(k->md, t), TR_ST_MAX_DIMS);
    for (size_t i = 0; i < len; i++) {
        int64_t v;
        if (!pt_value_int(k->md, pt_value_item(k->md, t, i), &v) || v < 0 || v > (INT64_C(1) << 40))
            return tr_fail(TR_ERR_INVALID, "%s: %s of tensor %s holds %s, not a size", k->md_path,
                           what, key, pt_value_kind_name(k->md, pt_value_item(k->md, t, i)));
        out[i] = (uint64_t)v;
    }
    *n = (int)len;
    return TR_OK;
}

/* "(off+size, ...)" of a chunk; off NULL: "[size, ...]" of a shape */
static void box_text(char *buf, size_t cap, const uint64_t *off, const uint64_t *size, int n)
{
    size_t at = 0;
    for (int d = 0; d < n && at < cap; d++)
        at += off ? (size_t)snprintf(buf + at, cap - at, "%s%llu+%llu", d ? ", " : "(",
                                     (unsigned long long)off[d], (unsigned long long)size[d])
                  : (size_t)snprintf(buf + at, cap - at, "%s%llu", d ? ", " : "[",
                                     (unsigned long long)size[d]);
    if (at < cap)
        snprintf(buf + at, cap - at, off ? ")" : "]");
}

static int by_first_offset(const void *a, const void *b)
{
    const dist_chunk *x = a, *y = b;
    return (x->off[0] > y->off[0]) - (x->off[0] < y->off[0]);
}

/* The chunks of x tile its global shape: each inside it, no two overlapping (sorted by their
 * first offset, a chunk meets only those that start before its first dimension ends), their
 * elements adding up to the shape's (so no gap). */
static int check_tiling(const dist_ckpt *k, dist_key *x)
{
    char a[160], b[160];
    uint64_t total = 1, sum = 0;
    for (int d = 0; d < x->ndim; d++)
        if (x->shape[d] && total > (UINT64_C(1) << 50) / x->shape[d])
            return tr_fail(TR_ERR_INVALID, "%s: tensor %s: a global shape of more than 2^50 "
                           "elements", k->md_path, x->key);
        else
            total *= x->shape[d];
    qsort(x->chunks, x->n_chunks, sizeof *x->chunks, by_first_offset);
    for (size_t i = 0; i < x->n_chunks; i++) {
        const dist_chunk *c = &x->chunks[i];
        uint64_t n = 1;
        box_text(a, sizeof a, c->off, c->size, x->ndim);
        for (int d = 0; d < x->ndim; d++) {
            if (c->off[d] > x->shape[d] || c->size[d] > x->shape[d] - c->off[d])
                return tr_fail(TR_ERR_INVALID, "%s: tensor %s: chunk %s runs outside its global "
                               "shape (dimension %d of %llu)", k->md_path, x->key, a, d,
                               (unsigned long long)x->shape[d]);
            n *= c->size[d]; /* (inside the shape: at most total) */
        }
        for (size_t j = i + 1; n && j < x->n_chunks && x->chunks[j].off[0] < c->off[0] +
                                                          c->size[0]; j++) {
            const dist_chunk *o = &x->chunks[j];
            int meet = 1;
            for (int d = 0; d < x->ndim && meet; d++)
                meet = c->off[d] < o->off[d] + o->size[d] && o->off[d] < c->off[d] + c->size[d];
            if (meet) {
                box_text(b, sizeof b, o->off, o->size, x->ndim);
                return tr_fail(TR_ERR_INVALID, "%s: tensor %s: chunks %s and %s overlap",
                               k->md_path, x->key, a, b);
            }
        }
        sum += n; /* (disjoint boxes inside the shape: at most total) */
    }
    if (sum != total)
        return tr_fail(TR_ERR_INVALID, "%s: tensor %s: its chunks hold %llu of its %llu elements "
                       "(a gap: a chunk is missing)", k->md_path, x->key, (unsigned long long)sum,
                       (unsigned long long)total);
    return TR_OK;
}

/* state_dict_metadata's model tensors into k->keys */
static int read_keys(dist_ckpt *k, uint32_t sdm)
{
    pt_pickle *p = k->md;
    size_t n = pt_value_len(p, sdm);
    int rc = TR_OK;
    if (pt_value_kind(p, sdm) != PT_V_DICT)
        return tr_fail(TR_ERR_INVALID, "%s: state_dict_metadata is %s, not a dict", k->md_path,
                       pt_value_kind_name(p, sdm));
    if (!(k->keys = calloc(n + 1, sizeof *k->keys)))
        return tr_fail(TR_ERR_NOMEM, "out of memory reading %s", k->md_path);
    for (size_t i = 0; i < n && !rc; i++) {
        const char *key = pt_value_str(p, pt_value_item(p, sdm, 2 * i));
        uint32_t v = pt_value_item(p, sdm, 2 * i + 1), size = 0, chunks = 0;
        if (!key)
            return tr_fail(TR_ERR_INVALID, "%s: state_dict_metadata has a key that is not a "
                           "string", k->md_path);
        if (!is_model_key(key) || pt_value_class(p, v) == PT_C_BYTES_MD)
            continue; /* optimizer, rng_state, ...; _extra_state objects */
        dist_key *x = &k->keys[k->n_keys];
        x->key = key;
        if ((rc = attr(k, v, PT_C_TENSOR_MD, "size", key, &size)) ||
            (rc = attr(k, v, PT_C_TENSOR_MD, "chunks", key, &chunks)) ||
            (rc = dims(k, size, key, "the size", x->shape, &x->ndim)))
            return rc;
        size_t nc = pt_value_len(p, chunks);
        if (pt_value_kind(p, chunks) != PT_V_LIST || nc == 0)
            return tr_fail(TR_ERR_INVALID, "%s: tensor %s: chunks is %s, not a list of chunks",
                           k->md_path, key, pt_value_kind_name(p, chunks));
        if (!(x->chunks = calloc(nc, sizeof *x->chunks)))
            return tr_fail(TR_ERR_NOMEM, "out of memory reading %s", k->md_path);
        k->n_keys++;
        for (size_t j = 0; j < nc && !rc; j++) {
            uint32_t c = pt_value_item(p, chunks, j), o = 0, s = 0;
            int no = 0, ns = 0;
            if (!(rc = attr(k, c, PT_C_CHUNK, "offsets", key, &o)) &&
                !(rc = attr(k, c, PT_C_CHUNK, "sizes", key, &s)) &&
                !(rc = dims(k, o, key, "a chunk's offsets", x->chunks[j].off, &no)) &&
                !(rc = dims(k, s, key, "a chunk's sizes", x->chunks[j].size, &ns)) &&
                (no != x->ndim || ns != x->ndim))
                rc = tr_fail(TR_ERR_INVALID, "%s: tensor %s of %d dimensions has a chunk of %d",
                             k->md_path, key, x->ndim, no != x->ndim ? no : ns);
            x->n_chunks += !rc;
        }
        if (!rc)
            rc = check_tiling(k, x);
    }
    if (!rc && k->n_keys == 0)
        rc = tr_fail(TR_ERR_INVALID, "%s holds no model tensor (embedding.*, decoder.*, "
                     "output_layer.*): an optimizer-only save? (the model is needed)", k->md_path);
    return rc;
}

static dist_key *find_key(const dist_ckpt *k, const char *key)
{
    for (size_t i = 0; i < k->n_keys; i++)
        if (!strcmp(k->keys[i].key, key))
            return &k->keys[i];
    return NULL;
}

/* storage_data: each model chunk's _StorageInfo (MetadataIndex fqn and offset -> it) */
static int read_storage(dist_ckpt *k, uint32_t sd)
{
    pt_pickle *p = k->md;
    if (pt_value_kind(p, sd) != PT_V_DICT)
        return tr_fail(TR_ERR_INVALID, "%s: storage_data is %s, not a dict", k->md_path,
                       pt_value_kind_name(p, sd));
    for (size_t i = 0; i < pt_value_len(p, sd); i++) {
        uint32_t idx = pt_value_item(p, sd, 2 * i), fqn = 0, off = 0;
        int rc = attr(k, idx, PT_C_INDEX, "fqn", "a storage_data key", &fqn);
        const char *name = rc ? NULL : pt_value_str(p, fqn);
        if (!rc && !name)
            rc = tr_fail(TR_ERR_INVALID, "%s: a MetadataIndex's fqn is not a string", k->md_path);
        if (rc)
            return rc;
        dist_key *x = find_key(k, name);
        if (!x)
            continue;
        uint64_t o[TR_ST_MAX_DIMS];
        int n = 0;
        if ((rc = attr(k, idx, PT_C_INDEX, "offset", name, &off)) ||
            (rc = dims(k, off, name, "a MetadataIndex's offset", o, &n)))
            return rc;
        dist_chunk *c = NULL;
        for (size_t j = 0; j < x->n_chunks && !c; j++)
            if (n == x->ndim && !memcmp(o, x->chunks[j].off, (size_t)n * sizeof *o))
                c = &x->chunks[j];
        if (!c || c->has_info)
            return tr_fail(TR_ERR_INVALID, "%s: storage_data %s tensor %s at an offset that %s",
                           k->md_path, c ? "names twice" : "places", name,
                           c ? "has a storage already" : "is no chunk's");
        c->info = pt_value_item(p, sd, 2 * i + 1), c->has_info = 1;
    }
    for (size_t i = 0; i < k->n_keys; i++)
        for (size_t j = 0; j < k->keys[i].n_chunks; j++)
            if (!k->keys[i].chunks[j].has_info) {
                char a[160];
                const dist_chunk *c = &k->keys[i].chunks[j];
                box_text(a, sizeof a, c->off, c->size, k->keys[i].ndim);
                return tr_fail(TR_ERR_INVALID, "%s: tensor %s: chunk %s has no storage_data entry "
                               "(no file holds it)", k->md_path, k->keys[i].key, a);
            }
    return TR_OK;
}

static int read_metadata(dist_ckpt *k)
{
    snprintf(k->md_path, sizeof k->md_path, "%s/.metadata", k->dir);
    int fd = open(k->md_path, O_RDONLY | O_CLOEXEC), rc = TR_OK;
    struct stat st;
    if (fd < 0)
        return tr_fail(errno == ENOENT ? TR_ERR_INVALID : TR_ERR_IO, "cannot open %s: %s (a "
                       "torch_dist save writes it last: an unfinished save?)", k->md_path,
                       strerror(errno));
    if (fstat(fd, &st))
        rc = tr_fail(TR_ERR_IO, "cannot stat %s: %s", k->md_path, strerror(errno));
    else if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > PT_MAX_PICKLE)
        rc = pt_bad(k->md_path, "not a regular file of at most %u bytes", PT_MAX_PICKLE);
    size_t n = rc ? 0 : (size_t)st.st_size, used = 0;
    unsigned char *buf = rc ? NULL : malloc(n + 1);
    if (!rc && !buf)
        rc = tr_fail(TR_ERR_NOMEM, "out of memory reading %s", k->md_path);
    if (!rc)
        rc = pt_read_at(fd, k->md_path, buf, n, 0);
    close(fd);
    if (!rc)
        rc = pt_pickle_run(k->md_path, "the Metadata pickle", buf, n, PT_OBJECTS | PT_DCP, &k->md,
                           &used);
    free(buf);
    uint32_t top = rc ? 0 : pt_pickle_top(k->md), sdm = 0, sd = 0;
    if (!rc && !(rc = attr(k, top, PT_C_METADATA, "state_dict_metadata", "the pickle", &sdm)) &&
        !(rc = attr(k, top, PT_C_METADATA, "storage_data", "the pickle", &sd)) &&
        !(rc = read_keys(k, sdm)))
        rc = read_storage(k, sd);
    return rc;
}

/* ------------------------------------------------------------------ chunks */

/* chunk c of x as a tr_st_file of its one tensor (its .distcp opened once) */
static int open_chunk(dist_ckpt *k, const dist_key *x, const dist_chunk *c, tr_st_file **out)
{
    pt_pickle *p = k->md;
    uint32_t rp = 0, o = 0, l = 0;
    int64_t off = 0, len = 0;
    const char *name = NULL;
    int rc = TR_OK;
    if ((rc = attr(k, c->info, PT_C_STORAGE_INFO, "relative_path", x->key, &rp)) ||
        (rc = attr(k, c->info, PT_C_STORAGE_INFO, "offset", x->key, &o)) ||
        (rc = attr(k, c->info, PT_C_STORAGE_INFO, "length", x->key, &l)))
        return rc;
    name = pt_value_str(p, rp);
    if (!name || !*name || strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, "..") ||
        !pt_value_int(p, o, &off) || !pt_value_int(p, l, &len) || off < 0 || len < 0)
        return tr_fail(TR_ERR_INVALID, "%s: tensor %s: a chunk's storage is not (a file name of "
                       "the folder, an offset, a length)", k->md_path, x->key);
    dist_file *f = NULL;
    for (size_t i = 0; i < k->n_files && !f; i++)
        if (!strcmp(k->files[i].name, name))
            f = &k->files[i];
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", k->dir, name);
    if (!f) {
        dist_file *m = realloc(k->files, (k->n_files + 1) * sizeof *m);
        if (!m)
            return tr_fail(TR_ERR_NOMEM, "out of memory reading %s", k->dir);
        k->files = m;
        f = &k->files[k->n_files];
        struct stat st;
        if ((f->fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
            return tr_fail(errno == ENOENT ? TR_ERR_INVALID : TR_ERR_IO, "cannot open %s: %s "
                           "(.metadata places tensor %s in it)", path, strerror(errno), x->key);
        if (fstat(f->fd, &st) || !(f->name = strdup(name))) {
            close(f->fd);
            return tr_fail(TR_ERR_IO, "cannot stat %s: %s", path, strerror(errno));
        }
        f->size = (uint64_t)st.st_size;
        k->n_files++;
    }
    if ((uint64_t)off > f->size || (uint64_t)len > f->size - (uint64_t)off)
        return tr_fail(TR_ERR_INVALID, "%s: tensor %s: a chunk of %lld bytes at %lld runs past "
                       "the end of %s (%llu bytes)", k->md_path, x->key, (long long)len,
                       (long long)off, path, (unsigned long long)f->size);
    return pt_tensor_at(f->fd, path, (uint64_t)off, (uint64_t)len, x->key, out);
}

/* Layer l's slice (l < 0: the whole) of x into trident tensor t at dst (split: MLM_GLU for
 * SwiGLU's fc1, whose global rows are [gate; up]). */
static int fill(dist_ckpt *k, dist_key *x, int l, const tr_param_tensor *t, int split, float *dst)
{
    int lead = l >= 0, nd = x->ndim - lead, rc = TR_OK;
    size_t R = (size_t)x->shape[lead], cols = nd == 2 ? (size_t)x->shape[lead + 1] : 1;
    x->used = 1;
    for (size_t i = 0; i < x->n_chunks && !rc; i++) {
        const dist_chunk *c = &x->chunks[i];
        if (lead && ((uint64_t)l < c->off[0] || (uint64_t)l >= c->off[0] + c->size[0]))
            continue;
        tr_st_file *f = NULL;
        if ((rc = open_chunk(k, x, c, &f)))
            break;
        const tr_st_tensor *y = tr_st_at(f, 0);
        char a[160];
        box_text(a, sizeof a, c->off, c->size, x->ndim);
        int same = y->ndim == x->ndim;
        for (int d = 0; d < x->ndim && same; d++)
            same = y->shape[d] == c->size[d];
        if (!same)
            rc = tr_fail(TR_ERR_INVALID, "%s: tensor %s: chunk %s holds a tensor of %s",
                         tr_st_path(f), x->key, a, st_shape_text(y).text);
        else if (y->dtype != TR_ST_F32 && y->dtype != TR_ST_BF16 && y->dtype != TR_ST_F16 &&
                 y->dtype != TR_ST_F64)
            rc = tr_fail(TR_ERR_INVALID, "%s: tensor %s: chunk %s is %s, not a floating-point "
                         "weight", tr_st_path(f), x->key, a, tr_st_dtype_name(y->dtype));
        float *buf = rc ? NULL : malloc(y->numel * sizeof(float) + 1);
        if (!rc && !buf)
            rc = tr_fail(TR_ERR_NOMEM, "out of memory for a chunk of %s", x->key);
        if (!rc)
            rc = hf_read_weight(f, y, buf);
        size_t sr = (size_t)c->size[lead], sc = nd == 2 ? (size_t)c->size[lead + 1] : 1;
        size_t r0 = (size_t)c->off[lead], c0 = nd == 2 ? (size_t)c->off[lead + 1] : 0;
        const float *src = rc ? NULL : buf + (lead ? (size_t)(l - (int)c->off[0]) * sr * sc : 0);
        for (size_t r = 0; !rc && r < sr; r++) {
            size_t row = mlm_whole_row(split, 0, R, r0 + r);
            if (row < (size_t)t->full_rows) /* (else the vocabulary's padding) */
                memcpy(dst + row * cols + c0, src + r * sc, sc * sizeof(float));
        }
        free(buf);
        tr_st_close(f);
    }
    return rc;
}

static int check_shape(const dist_ckpt *k, const dist_key *x, const uint64_t *want, int n)
{
    int ok = x->ndim == n;
    for (int d = 0; d < n && ok; d++)
        ok = x->shape[d] == want[d];
    if (!ok) {
        char a[160], b[160];
        box_text(a, sizeof a, NULL, x->shape, x->ndim);
        box_text(b, sizeof b, NULL, want, n);
        return tr_fail(TR_ERR_INVALID, "%s: tensor %s has the global shape %s, the args make it "
                       "%s", k->md_path, x->key, a, b);
    }
    return TR_OK;
}

/* Before the model is allocated: the tensors of its largest sizes (vocabulary, hidden, layers,
 * heads x kv_channels, ffn) have the args' shapes, and each chunk's storage holds at least 2
 * bytes an element (BF16), so the allocation is of the files' size, not of the args' word. */
static int check_sizes(const dist_ckpt *k)
{
    const tr_model_config *m = &k->a.m;
    uint64_t L = (uint64_t)m->num_layers, C = (uint64_t)m->hidden_size;
    uint64_t A = (uint64_t)m->num_attention_heads *
                 (uint64_t)(m->kv_channels ? m->kv_channels : m->hidden_size /
                                                              m->num_attention_heads);
    const struct {
        const char *key;
        uint64_t want[3];
        int n;
    } big[] = {{"embedding.word_embeddings.weight", {(uint64_t)k->a.padded_vocab, C}, 2},
               {"decoder.layers.self_attention.linear_proj.weight", {L, C, A}, 3},
               {"decoder.layers.mlp.linear_fc2.weight", {L, C, (uint64_t)m->ffn_hidden_size}, 3}};
    int rc = TR_OK;
    for (size_t i = 0; i < sizeof big / sizeof big[0] && !rc; i++) {
        const dist_key *x = find_key(k, big[i].key);
        rc = x ? check_shape(k, x, big[i].want, big[i].n)
               : tr_fail(TR_ERR_INVALID, "%s: tensor %s is missing", k->md_path, big[i].key);
    }
    for (size_t i = 0; i < k->n_keys && !rc; i++)
        for (size_t j = 0; j < k->keys[i].n_chunks && !rc; j++) {
            const dist_chunk *c = &k->keys[i].chunks[j];
            uint32_t l = 0;
            int64_t len = 0;
            uint64_t n = 1;
            for (int d = 0; d < k->keys[i].ndim; d++)
                n *= c->size[d]; /* (checked: at most 2^50) */
            if (!(rc = attr(k, c->info, PT_C_STORAGE_INFO, "length", k->keys[i].key, &l)) &&
                (!pt_value_int(k->md, l, &len) || len < 0 || (uint64_t)len / 2 < n)) {
                char a[160];
                box_text(a, sizeof a, c->off, c->size, k->keys[i].ndim);
                rc = tr_fail(TR_ERR_INVALID, "%s: tensor %s: chunk %s of %llu elements is "
                             "stored in %lld bytes", k->md_path, k->keys[i].key, a,
                             (unsigned long long)n, (long long)len);
            }
        }
    return rc;
}

/* Trident tensor t from its key: the layer tables' megatron-core names, layers stacked. */
static int load_tensor(dist_ckpt *k, const tr_param_tensor *t, float *dst)
{
    int l = -1, used = 0;
    const mlm_name *m = NULL;
    int layer = sscanf(t->name, "layers.%d.%n", &l, &used) == 1 && used > 0;
    for (int i = 0; layer && i < MLM_LAYER_NAMES && !m; i++)
        if (!strcmp(t->name + used, mlm_layer_names[0][i].trident))
            m = &mlm_layer_names[0][i];
    for (int i = 0; !layer && i < MLM_TOP_NAMES && !m; i++)
        if (!strcmp(t->name, mlm_top_names[0][i].trident))
            m = &mlm_top_names[0][i];
    if (!m)
        return tr_fail(TR_ERR_INTERNAL, "no Megatron-LM name for trident tensor '%s'", t->name);
    char key[2][300] = {"", ""};
    dist_key *x = NULL;
    for (int j = 0; j < 2 && m->names[j] && !x; j++) {
        snprintf(key[j], sizeof key[j], "%s%s", layer ? "decoder.layers." : "", m->names[j]);
        x = find_key(k, key[j]);
    }
    if (!x)
        return tr_fail(TR_ERR_INVALID, "%s: tensor %s%s%s is missing", k->md_path, key[0],
                       key[1][0] ? " (or " : "", key[1][0] ? key[1] : "");
    /* the global shape: ([layers,] rows[, cols]) */
    uint64_t want[3];
    int n = 0, rc;
    if (layer)
        want[n++] = (uint64_t)k->a.m.num_layers;
    want[n++] = t->vocab_rows ? (uint64_t)k->a.padded_vocab : (uint64_t)t->full_rows;
    if (t->full_cols > 1)
        want[n++] = (uint64_t)t->full_cols;
    if ((rc = check_shape(k, x, want, n)))
        return rc;
    int split = k->a.m.swiglu && layer && !strncmp(t->name + used, "fc.", 3) ? MLM_GLU : MLM_REP;
    return fill(k, x, layer ? l : -1, t, split, dst);
}

/* Every model tensor of .metadata read (rope's inv_freq excepted). */
static int all_used(const dist_ckpt *k)
{
    for (size_t i = 0; i < k->n_keys; i++) {
        size_t n = strlen(k->keys[i].key);
        if (!k->keys[i].used && !(n > 9 && !strcmp(k->keys[i].key + n - 9, ".inv_freq")))
            return tr_fail(TR_ERR_INVALID, "%s: tensor %s is not part of the model its args "
                           "describe", k->md_path, k->keys[i].key);
    }
    return TR_OK;
}

int mlm_dist_import(const char *dir, const char *ckpt_dir, tr_model_config *model,
                    tr_megatron_info *info)
{
    dist_ckpt k = {.dir = dir};
    tr_gpt *g = NULL;
    float *params = NULL;
    hf_out_dir o;
    int rc = read_backend(dir);
    if (!rc)
        rc = read_common(&k, info);
    if (!rc && k.a.m.num_experts)
        rc = tr_fail(TR_ERR_INVALID, "%s/common.pt: args.num_experts %d: a mixture of experts in a "
                     "torch_dist save is not read (its --ckpt-format torch files are)", dir,
                     k.a.m.num_experts);
    if (!rc)
        rc = read_metadata(&k);
    if (!rc)
        rc = check_sizes(&k);
    if (!rc)
        rc = hf_whole_model(&k.a.m, TR_HF_LLAMA, &g, &params);
    for (int i = 0; !rc && i < tr_gpt_num_tensors(g); i++)
        rc = load_tensor(&k, tr_gpt_tensor(g, i), params + tr_gpt_tensor(g, i)->offset);
    if (!rc)
        rc = all_used(&k);
    if (!rc && !(rc = hf_out_begin(ckpt_dir, &o)))
        rc = hf_out_end(&o, tr_checkpoint_save_model(o.tmp, g, params));
    tr_gpt_free(g);
    free(params);
    for (size_t i = 0; i < k.n_keys; i++)
        free(k.keys[i].chunks);
    free(k.keys);
    for (size_t i = 0; i < k.n_files; i++)
        close(k.files[i].fd), free(k.files[i].name);
    free(k.files);
    pt_pickle_free(k.md);
    if (!rc) {
        info->tp = k.a.tp, info->pp = k.a.pp, info->vp = k.a.vp, info->mcore = 1;
        info->padded_vocab = k.a.padded_vocab, info->dist = 1;
        if (model)
            *model = k.a.m;
    }
    return rc;
}
