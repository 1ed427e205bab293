/* torch.save's objects in the restricted unpickler (torch_pickle.h): the allowed globals
 * (OrderedDict, _rebuild_tensor_v2, _rebuild_parameter, the storage classes), what calling
 * them and a persistent id make, and the pickle's result read as a state dict (tensors checked
 * contiguous and inside their storage), legacy sys_info or a list of storage keys. */
#include "hf/torch_pickle.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the allowed globals; objects: 1 under PT_OBJECTS only, 2 under PT_DCP only */
static const struct {
    const char *module, *name;
    int what, objects;
} globals[] = {
    {"collections", "OrderedDict", G_ORDERED_DICT, 0},
    {"torch._utils", "_rebuild_tensor_v2", G_REBUILD_V2, 0},
    {"torch._utils", "_rebuild_parameter", G_REBUILD_PARAMETER, 0},
    {"torch", "FloatStorage", TR_ST_F32, 0},   {"torch", "HalfStorage", TR_ST_F16, 0},
    {"torch", "BFloat16Storage", TR_ST_BF16, 0}, {"torch", "DoubleStorage", TR_ST_F64, 0},
    {"torch", "LongStorage", TR_ST_I64, 0},    {"torch", "IntStorage", TR_ST_I32, 0},
    {"torch", "ShortStorage", TR_ST_I16, 0},   {"torch", "CharStorage", TR_ST_I8, 0},
    {"torch", "ByteStorage", TR_ST_U8, 0},     {"torch", "BoolStorage", TR_ST_BOOL, 0},
    /* a training checkpoint's other objects */
    {"argparse", "Namespace", G_NAMESPACE, 1},
    {"torch._utils", "_rebuild_parameter_with_state", G_REBUILD_PARAMETER_STATE, 1},
    {"torch._tensor", "_rebuild_from_type_v2", G_REBUILD_FROM_TYPE, 1},
    {"torch", "Tensor", G_TENSOR_TYPE, 1},
    {"torch.nn.parameter", "Parameter", G_TENSOR_TYPE, 1},
    {"numpy.core.multiarray", "_reconstruct", G_OPAQUE_CALL, 1},
    {"numpy._core.multiarray", "_reconstruct", G_OPAQUE_CALL, 1},
    {"numpy.core.multiarray", "scalar", G_OPAQUE_CALL, 1},
    {"numpy._core.multiarray", "scalar", G_OPAQUE_CALL, 1},
    {"numpy", "ndarray", G_OPAQUE_CALL, 1},   {"numpy", "dtype", G_OPAQUE_CALL, 1},
    {"_codecs", "encode", G_OPAQUE_CALL, 1},  {"_io", "BytesIO", G_OPAQUE_CALL, 1},
    {"io", "BytesIO", G_OPAQUE_CALL, 1},      {"torch", "Size", G_SIZE, 1},
    {"builtins", "set", G_OPAQUE_CALL, 1},    {"__builtin__", "set", G_OPAQUE_CALL, 1},
    {"builtins", "bytes", G_OPAQUE_CALL, 1},  {"__builtin__", "bytes", G_OPAQUE_CALL, 1},
    {"torch", "float32", G_OPAQUE_VALUE, 1},  {"torch", "float16", G_OPAQUE_VALUE, 1},
    {"torch", "bfloat16", G_OPAQUE_VALUE, 1}, {"torch", "float64", G_OPAQUE_VALUE, 1},
    {"torch", "int64", G_OPAQUE_VALUE, 1},    {"torch", "int32", G_OPAQUE_VALUE, 1},
    {"torch", "uint8", G_OPAQUE_VALUE, 1},    {"torch", "int8", G_OPAQUE_VALUE, 1},
    {"torch", "bool", G_OPAQUE_VALUE, 1},
    /* torch.distributed.checkpoint's .metadata */
    {"torch.distributed.checkpoint.metadata", "Metadata", G_CLASS + PT_C_METADATA, 2},
    {"torch.distributed.checkpoint.metadata", "TensorStorageMetadata", G_CLASS + PT_C_TENSOR_MD, 2},
    {"torch.distributed.checkpoint.metadata", "BytesStorageMetadata", G_CLASS + PT_C_BYTES_MD, 2},
    {"torch.distributed.checkpoint.metadata", "ChunkStorageMetadata", G_CLASS + PT_C_CHUNK, 2},
    {"torch.distributed.checkpoint.metadata", "MetadataIndex", G_CLASS + PT_C_INDEX, 2},
    {"torch.distributed.checkpoint.metadata", "StorageMeta", G_CLASS + PT_C_STORAGE_META, 2},
    {"torch.distributed.checkpoint.filesystem", "_StorageInfo", G_CLASS + PT_C_STORAGE_INFO, 2},
    {"torch.distributed.checkpoint.metadata", "TensorProperties", G_OPAQUE_CALL, 2},
    {"torch.distributed.checkpoint.metadata", "_MEM_FORMAT_ENCODING", G_OPAQUE_CALL, 2},
    {"torch.serialization", "_get_layout", G_OPAQUE_CALL, 2},
    {"pathlib", "PosixPath", G_OPAQUE_CALL, 2},
};

static const char *const class_names[PT_C_COUNT] = {
    NULL, "Namespace", "Metadata", "TensorStorageMetadata", "BytesStorageMetadata",
    "ChunkStorageMetadata", "MetadataIndex", "StorageMeta", "_StorageInfo"};

/* A Megatron enum (megatron.PATH CLASS of identifiers): its members are opaque values. */
static int megatron_enum(const char *mod, size_t ml, const char *name, size_t nl)
{
    if (ml <= 9 || memcmp(mod, "megatron.", 9) || nl == 0)
        return 0;
    for (size_t i = 0; i < ml; i++)
        if (!(isalnum((unsigned char)mod[i]) || mod[i] == '_' || mod[i] == '.'))
            return 0;
    for (size_t i = 0; i < nl; i++)
        if (!(isalnum((unsigned char)name[i]) || name[i] == '_'))
            return 0;
    return 1;
}

/* printable text of untrusted bytes for a message */
static void printable(char *out, size_t cap, const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n && k + 5 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        k += (size_t)snprintf(out + k, cap - k, c >= 32 && c < 127 ? "%c" : "\\x%02x", c);
    }
    out[k] = '\0';
}

int pk_global(pt_pickle *p, const char *mod, size_t ml, const char *name, size_t nl)
{
    int what = -1;
    for (size_t i = 0; i < sizeof globals / sizeof globals[0] && what < 0; i++)
        if (strlen(globals[i].module) == ml && !memcmp(globals[i].module, mod, ml) &&
            strlen(globals[i].name) == nl && !memcmp(globals[i].name, name, nl) &&
            globals[i].objects <= (p->dcp && p->objects ? 2 : p->objects))
            what = globals[i].what;
    if (what < 0 && p->objects && megatron_enum(mod, ml, name, nl))
        what = G_OPAQUE_CALL;
    if (what >= 0) {
        uint32_t o = 0;
        int rc = pk_new_obj(p, O_GLOBAL, &o);
        if (!rc)
            p->objs[o].sub = (uint8_t)what;
        return rc ? rc : pk_push(p, o);
    }
    char m[160], n[160];
    printable(m, sizeof m, mod, ml);
    printable(n, sizeof n, name, nl);
    return pk_fail(p, "pickle calls GLOBAL '%s.%s', which is not a tensor or a dict (only %s "
                   "are read)", m, n, p->dcp       ? "a distributed checkpoint's metadata"
                                     : p->objects ? "a training checkpoint's values"
                                                  : "state dicts");
}

static int is_int(const pt_pickle *p, uint32_t o, int64_t *v)
{
    if (p->objs[o].kind != O_INT && p->objs[o].kind != O_BOOL)
        return 0;
    *v = p->objs[o].kind == O_INT ? p->objs[o].u.i : p->objs[o].sub;
    return 1;
}

/* _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks
 * [, metadata]): a tensor object (checked when the state dict names it). */
static int rebuild_tensor(pt_pickle *p, const obj *args, uint32_t *out)
{
    const uint32_t *a = args->u.items;
    if (args->len != 6 && args->len != 7)
        return pk_fail(p, "_rebuild_tensor_v2 takes 6 or 7 arguments, not %u", args->len);
    if (p->objs[a[0]].kind != O_STORAGE)
        return pk_fail(p, "_rebuild_tensor_v2's storage is %s", pk_kind_of(p, a[0]));
    raw_tensor t = {.storage = a[0]};
    if (!is_int(p, a[1], &t.offset))
        return pk_fail(p, "_rebuild_tensor_v2's storage_offset is %s", pk_kind_of(p, a[1]));
    const obj *size = &p->objs[a[2]], *stride = &p->objs[a[3]];
    if (size->kind != O_TUPLE || stride->kind != O_TUPLE || size->len != stride->len)
        return pk_fail(p, "_rebuild_tensor_v2's size and stride are not two tuples of one length");
    if (size->len > TR_ST_MAX_DIMS)
        return pk_fail(p, "a tensor of %u dimensions (at most %d are read)", size->len,
                       TR_ST_MAX_DIMS);
    t.ndim = (int)size->len;
    for (int d = 0; d < t.ndim; d++)
        if (!is_int(p, size->u.items[d], &t.size[d]) ||
            !is_int(p, stride->u.items[d], &t.stride[d]))
            return pk_fail(p, "_rebuild_tensor_v2's size or stride holds a value other than an "
                           "int");
    if (p->objs[a[5]].kind != O_DICT || (args->len == 7 && p->objs[a[6]].kind != O_DICT &&
                                         p->objs[a[6]].kind != O_NONE))
        return pk_fail(p, "_rebuild_tensor_v2's backward_hooks or metadata is not a dict");
    if (pk_grow((void **)&p->tensors, &p->cap_tensors, p->n_tensors + 1, sizeof t))
        return pk_nomem(p);
    int rc = pk_new_obj(p, O_TENSOR, out);
    if (!rc) {
        p->tensors[p->n_tensors] = t;
        p->objs[*out].u.tensor = (uint32_t)p->n_tensors++;
    }
    return rc;
}

/* REDUCE / NEWOBJ: callable f with the tuple args -> the result on the stack. */
int pk_call(pt_pickle *p, uint32_t f, uint32_t args, const char *op)
{
    const obj *a = &p->objs[args];
    if (p->objs[f].kind != O_GLOBAL)
        return pk_fail(p, "%s calls %s, not an allowed class or function", op, pk_kind_of(p, f));
    if (a->kind != O_TUPLE)
        return pk_fail(p, "%s's arguments are %s, not a tuple", op, pk_kind_of(p, args));
    uint32_t r = 0;
    int rc = TR_OK;
    switch (p->objs[f].sub) {
    case G_ORDERED_DICT:
        if (a->len)
            return pk_fail(p, "OrderedDict is called with arguments");
        rc = pk_new_obj(p, O_DICT, &r);
        break;
    case G_REBUILD_V2:
        if (strcmp(op, "REDUCE"))
            return pk_fail(p, "%s of _rebuild_tensor_v2", op);
        rc = rebuild_tensor(p, a, &r);
        break;
    case G_REBUILD_PARAMETER: /* (data, requires_grad, backward_hooks): the tensor */
        if (strcmp(op, "REDUCE") || a->len != 3 || p->objs[a->u.items[0]].kind != O_TENSOR)
            return pk_fail(p, "_rebuild_parameter is not given (tensor, requires_grad, hooks)");
        r = a->u.items[0];
        break;
    case G_REBUILD_PARAMETER_STATE: /* (data, requires_grad, hooks, state): the tensor */
        if (strcmp(op, "REDUCE") || a->len != 4 || p->objs[a->u.items[0]].kind != O_TENSOR)
            return pk_fail(p, "_rebuild_parameter_with_state is not given (tensor, "
                           "requires_grad, hooks, state)");
        r = a->u.items[0];
        break;
    case G_REBUILD_FROM_TYPE: { /* (func, type, args, state): func(*args) of torch's types */
        const uint32_t *i = a->u.items;
        if (strcmp(op, "REDUCE") || a->len != 4 || p->objs[i[0]].kind != O_GLOBAL ||
            (p->objs[i[0]].sub != G_REBUILD_V2 && p->objs[i[0]].sub != G_REBUILD_PARAMETER) ||
            p->objs[i[1]].kind != O_GLOBAL || p->objs[i[1]].sub != G_TENSOR_TYPE)
            return pk_fail(p, "_rebuild_from_type_v2 is not given (_rebuild_tensor_v2 or "
                           "_rebuild_parameter, torch.Tensor or Parameter, args, state): a "
                           "tensor subclass is not read");
        return pk_call(p, i[0], i[2], op);
    }
    case G_NAMESPACE: /* an empty Namespace; BUILD gives its attributes */
        if (a->len)
            return pk_fail(p, "argparse.Namespace is called with arguments");
        if (!(rc = pk_new_obj(p, O_DICT, &r)))
            p->objs[r].sub = 1;
        break;
    case G_OPAQUE_CALL: /* never called: its result is never looked at */
        rc = pk_new_obj(p, O_OPAQUE, &r);
        break;
    case G_SIZE: { /* torch.Size((ints)): the tuple */
        int64_t v;
        const obj *t = a->len == 1 ? &p->objs[a->u.items[0]] : NULL;
        for (uint32_t i = 0; t && t->kind == O_TUPLE && i < t->len; i++)
            if (!is_int(p, t->u.items[i], &v))
                t = NULL;
        if (!t || t->kind != O_TUPLE)
            return pk_fail(p, "torch.Size is not given one tuple of ints");
        r = a->u.items[0];
        break;
    }
    case G_OPAQUE_VALUE:
    case G_TENSOR_TYPE:
        return pk_fail(p, "%s calls a torch dtype or tensor type", op);
    default:
        if (p->objs[f].sub > G_CLASS && p->objs[f].sub < G_CLASS + PT_C_COUNT) {
            uint8_t c = (uint8_t)(p->objs[f].sub - G_CLASS);
            if (a->len) /* (a dataclass: NEWOBJ of no arguments, BUILD's dict) */
                return pk_fail(p, "%s is called with arguments", class_names[c]);
            if (!(rc = pk_new_obj(p, O_DICT, &r)))
                p->objs[r].sub = c;
            break;
        }
        return pk_fail(p, "%s calls a storage class (storages come from persistent ids)", op);
    }
    return rc ? rc : pk_push(p, r);
}

int pk_build(pt_pickle *p, uint32_t o, uint32_t state)
{
    const obj *x = &p->objs[o], *st = &p->objs[state];
    if (x->kind == O_OPAQUE || (x->kind == O_DICT && !x->sub))
        return TR_OK; /* OrderedDict's _metadata; an opaque object's state */
    if (x->kind != O_DICT)
        return pk_fail(p, "BUILD of %s (only a dict's, a Namespace's or an opaque object's state "
                       "is accepted)", pk_kind_of(p, o));
    if (st->kind != O_DICT || st->sub || state == o)
        return pk_fail(p, "BUILD of a Namespace with %s, not a dict of its attributes",
                       state == o ? "itself" : pk_kind_of(p, state));
    return st->len ? pk_add_items(p, o, st->u.items, st->len) : TR_OK;
}

/* BINPERSID: ('storage', STORAGE_CLASS, key, location, numel) (+ view_metadata None in
 * legacy files) -> a storage object. */
int pk_persistent(pt_pickle *p, uint32_t pid)
{
    const obj *t = &p->objs[pid];
    unsigned want = p->legacy ? 6 : 5;
    if (t->kind != O_TUPLE || t->len != want)
        return pk_fail(p, "a persistent id is not a tuple of %u values", want);
    const uint32_t *a = t->u.items;
    const obj *tag = &p->objs[a[0]], *cls = &p->objs[a[1]];
    if (tag->kind != O_STR || strcmp(tag->u.s, "storage"))
        return pk_fail(p, "a persistent id other than ('storage', ...)");
    if (cls->kind != O_GLOBAL || cls->sub >= G_ORDERED_DICT)
        return pk_fail(p, "a persistent id's storage type is not a torch storage class");
    int64_t numel;
    if (p->objs[a[2]].kind != O_STR || p->objs[a[3]].kind != O_STR || !is_int(p, a[4], &numel) ||
        numel < 0)
        return pk_fail(p, "a persistent id's key, location or size is not a string, a string and "
                       "an int >= 0");
    if (p->legacy && p->objs[a[5]].kind != O_NONE)
        return pk_fail(p, "a storage view (view_metadata) in a persistent id");
    uint8_t dtype = cls->sub;
    uint32_t s = 0, key = a[2];
    int rc = pk_new_obj(p, O_STORAGE, &s); /* moves the objects: t, tag and cls are stale */
    if (!rc) {
        p->objs[s].sub = dtype;
        p->objs[s].u.st.key = key, p->objs[s].u.st.numel = numel;
        rc = pk_push(p, s);
    }
    return rc;
}

/* ------------------------------------------------------------------ results */

static int valid_name(const obj *s)
{
    return s->kind == O_STR && !memchr(s->u.s, 0, s->len) &&
           tr_utf8_valid_prefix((const unsigned char *)s->u.s, s->len) == s->len;
}

/* Raw tensor r named name into t: sizes, contiguity, inside its storage. */
static int check_tensor(pt_pickle *p, const raw_tensor *r, const char *name, pt_tensor *t)
{
    const obj *s = &p->objs[r->storage], *key = &p->objs[s->u.st.key];
    if (!valid_name(key))
        return pt_bad(p->path, "tensor '%.200s': its storage key is not a name", name);
    uint64_t numel = 1, want = 1, esize = tr_st_dtype_size((tr_st_dtype)s->sub);
    for (int d = 0; d < r->ndim; d++)
        if (r->size[d] < 0 || r->stride[d] < 0)
            return pt_bad(p->path, "tensor '%.200s' has a negative size or stride", name);
        else if (r->size[d] && numel > UINT64_MAX / 2 / esize / (uint64_t)r->size[d])
            return pt_bad(p->path, "tensor '%.200s': its size overflows", name);
        else
            numel *= (uint64_t)r->size[d];
    /* row-major: stride[d] = product of the sizes after d (any for a dimension of 1) */
    for (int d = r->ndim - 1; numel && d >= 0; d--) {
        if (r->size[d] != 1 && (uint64_t)r->stride[d] != want)
            return pt_bad(p->path, "tensor '%.200s' is not contiguous (stride %lld of dimension "
                          "%d, %llu for row-major order): save it after .contiguous()", name,
                          (long long)r->stride[d], d, (unsigned long long)want);
        want *= (uint64_t)r->size[d];
    }
    if (r->offset < 0 || (numel && ((uint64_t)r->offset > (uint64_t)s->u.st.numel ||
                                    numel > (uint64_t)s->u.st.numel - (uint64_t)r->offset)))
        return pt_bad(p->path, "tensor '%.200s' (%llu elements at %lld) runs past its storage "
                      "'%.200s' of %lld", name, (unsigned long long)numel, (long long)r->offset,
                      key->u.s, (long long)s->u.st.numel);
    *t = (pt_tensor){.dtype = (tr_st_dtype)s->sub, .storage_numel = (uint64_t)s->u.st.numel,
                     .offset = (uint64_t)r->offset, .ndim = r->ndim, .numel = numel};
    for (int d = 0; d < r->ndim; d++)
        t->shape[d] = (uint64_t)r->size[d];
    if (!(t->name = strdup(name)) || !(t->key = strdup(key->u.s)))
        return tr_fail(TR_ERR_NOMEM, "out of memory reading %s", p->path);
    return TR_OK;
}

/* "_extra_state", or a name ending in ".\_extra_state" (Transformer Engine's and megatron-core's
 * modules' extra state: None, bytes, an io.BytesIO or a tensor; skipped) */
static int extra_state(const char *name)
{
    size_t n = strlen(name), k = strlen("_extra_state");
    return n >= k && !strcmp(name + n - k, "_extra_state") && (n == k || name[n - k - 1] == '.');
}

/* Raw tensor r named name checked onto (*t)[*n] (*cap of them). */
static int add_tensor(pt_pickle *p, const raw_tensor *r, const char *name, pt_tensor **t,
                      size_t *cap, size_t *n)
{
    if (pk_grow((void **)t, cap, *n + 1, sizeof **t))
        return tr_fail(TR_ERR_NOMEM, "out of memory reading %s", p->path);
    memset(&(*t)[*n], 0, sizeof **t);
    int rc = check_tensor(p, r, name, &(*t)[*n]);
    if (!rc)
        (*n)++;
    return rc;
}

/* One level of a nested state dict being walked: dict d, its next entry, the name prefix's
 * length in the name buffer. */
typedef struct {
    uint32_t d, next;
    size_t prefix;
} walk_level;

int pt_pickle_state_of(pt_pickle *p, uint32_t top, int nested, pt_tensor **out, size_t *n_out)
{
    *out = NULL, *n_out = 0;
    const obj *d = &p->objs[top];
    if (d->kind != O_DICT)
        return pt_bad(p->path, "the pickle holds %s, not a state dict", pk_kind_name(d->kind));
    size_t cap = 0, n_t = 0;
    pt_tensor *t = NULL;
    char name[PT_MAX_NAME + 1] = "";
    walk_level lv[PT_MAX_DEPTH];
    int depth = 1, rc = TR_OK;
    lv[0] = (walk_level){top, 0, 0};
    while (depth > 0 && !rc) {
        walk_level *w = &lv[depth - 1];
        const obj *dict = &p->objs[w->d];
        if (w->next * 2 >= dict->len) {
            depth--;
            continue;
        }
        const obj *k = &p->objs[dict->u.items[2 * w->next]];
        uint32_t vi = dict->u.items[2 * w->next + 1];
        const obj *v = &p->objs[vi];
        w->next++;
        name[w->prefix] = '\0';
        if (!valid_name(k)) {
            rc = pt_bad(p->path, "the state dict %s%shas a key that is %s", name,
                        *name ? " " : "", k->kind == O_STR ? "not UTF-8 or holds a NUL"
                                                          : pk_kind_name(k->kind));
            break;
        }
        if (!nested) { /* the key as it is, of any length */
            if (v->kind != O_TENSOR)
                rc = pt_bad(p->path, "state dict entry '%.200s' is %s, not a tensor (only "
                            "tensors are read)", k->u.s, pk_kind_name(v->kind));
            else
                rc = add_tensor(p, &p->tensors[v->u.tensor], k->u.s, &t, &cap, &n_t);
            continue;
        }
        if (w->prefix + (w->prefix ? 1 : 0) + k->len > PT_MAX_NAME) {
            rc = pt_bad(p->path, "state dict entry '%.200s.%.100s' has a name of more than %d "
                        "bytes", name, k->u.s, PT_MAX_NAME);
            break;
        }
        size_t at = w->prefix;
        if (at)
            name[at++] = '.';
        memcpy(name + at, k->u.s, k->len + 1);
        if (extra_state(name))
            continue;
        if (v->kind == O_DICT && !v->sub) {
            if (depth == PT_MAX_DEPTH)
                rc = pt_bad(p->path, "state dict entry '%.200s' nests dicts more than %d deep",
                            name, PT_MAX_DEPTH);
            else
                lv[depth++] = (walk_level){vi, 0, at + k->len};
            continue;
        }
        if (v->kind != O_TENSOR)
            rc = pt_bad(p->path, "state dict entry '%.200s' is %s, not a tensor (only tensors "
                        "are read)", name, pk_kind_name(v->kind));
        else
            rc = add_tensor(p, &p->tensors[v->u.tensor], name, &t, &cap, &n_t);
    }
    if (rc) {
        pt_tensors_free(t, n_t);
        return rc;
    }
    if (!t && !(t = calloc(1, sizeof *t)))
        return tr_fail(TR_ERR_NOMEM, "out of memory reading %s", p->path);
    *out = t, *n_out = n_t;
    return TR_OK;
}

int pt_pickle_tensor(pt_pickle *p, const char *name, pt_tensor *t)
{
    memset(t, 0, sizeof *t);
    const obj *o = &p->objs[p->top];
    if (o->kind != O_TENSOR)
        return pt_bad(p->path, "%.200s: the pickle holds %s, not a tensor", name,
                      pk_kind_name(o->kind));
    return check_tensor(p, &p->tensors[o->u.tensor], name, t);
}

int pt_pickle_state(pt_pickle *p, pt_tensor **out, size_t *n_out)
{
    return pt_pickle_state_of(p, p->top, 0, out, n_out);
}

void pt_tensors_free(pt_tensor *t, size_t n)
{
    for (size_t i = 0; t && i < n; i++)
        free(t[i].name), free(t[i].key);
    free(t);
}

int pt_pickle_sys_info(pt_pickle *p)
{
    const obj *d = &p->objs[p->top];
    for (uint32_t i = 0; d->kind == O_DICT && i + 1 < d->len; i += 2) {
        const obj *k = &p->objs[d->u.items[i]], *v = &p->objs[d->u.items[i + 1]];
        if (k->kind == O_STR && !strcmp(k->u.s, "little_endian")) {
            if (v->kind == O_BOOL && v->sub)
                return TR_OK;
            return pt_bad(p->path, "a legacy torch.save file of a big-endian machine "
                          "(sys_info little_endian is not True); only little-endian ones are "
                          "read");
        }
    }
    return pt_bad(p->path, "a legacy torch.save file without sys_info's little_endian");
}

int pt_pickle_keys(pt_pickle *p, char ***keys, size_t *n)
{
    *keys = NULL, *n = 0;
    const obj *l = &p->objs[p->top];
    if (l->kind != O_LIST)
        return pt_bad(p->path, "the legacy storage keys are %s, not a list", pk_kind_name(l->kind));
    char **k = calloc(l->len + 1, sizeof *k);
    if (!k)
        return tr_fail(TR_ERR_NOMEM, "out of memory reading %s", p->path);
    int rc = TR_OK;
    for (uint32_t i = 0; i < l->len && !rc; i++) {
        const obj *s = &p->objs[l->u.items[i]];
        if (!valid_name(s))
            rc = pt_bad(p->path, "legacy storage key %u is not a name", i);
        else if (!(k[i] = strdup(s->u.s)))
            rc = tr_fail(TR_ERR_NOMEM, "out of memory reading %s", p->path);
        else
            (*n)++;
    }
    if (rc) {
        for (size_t i = 0; i < *n; i++)
            free(k[i]);
        free(k);
        *n = 0;
        return rc;
    }
    *keys = k;
    return TR_OK;
}

/* ------------------------------------------------------------------ values (PT_OBJECTS) */

uint32_t pt_pickle_top(const pt_pickle *p) { return p->top; }

int pt_value_kind(const pt_pickle *p, uint32_t v)
{
    static const int kinds[] = {
        [O_NONE] = PT_V_NONE,     [O_BOOL] = PT_V_BOOL,     [O_INT] = PT_V_INT,
        [O_FLOAT] = PT_V_FLOAT,   [O_STR] = PT_V_STR,       [O_BYTES] = PT_V_BYTES,
        [O_TUPLE] = PT_V_TUPLE,   [O_LIST] = PT_V_LIST,     [O_DICT] = PT_V_DICT,
        [O_GLOBAL] = PT_V_OPAQUE, [O_STORAGE] = PT_V_OPAQUE, [O_TENSOR] = PT_V_TENSOR,
        [O_OPAQUE] = PT_V_OPAQUE};
    const obj *o = &p->objs[v];
    return o->kind == O_DICT && o->sub ? PT_V_NAMESPACE : kinds[o->kind];
}

const char *pt_value_kind_name(const pt_pickle *p, uint32_t v)
{
    const obj *o = &p->objs[v];
    static const char *const names[PT_C_COUNT] = {
        NULL, "a Namespace", "a Metadata", "a TensorStorageMetadata", "a BytesStorageMetadata",
        "a ChunkStorageMetadata", "a MetadataIndex", "a StorageMeta", "a _StorageInfo"};
    return o->kind == O_DICT && o->sub ? names[o->sub] : pk_kind_name(o->kind);
}

int pt_value_class(const pt_pickle *p, uint32_t v)
{
    const obj *o = &p->objs[v];
    return o->kind == O_DICT ? o->sub : PT_C_NONE;
}

int pt_value_get(const pt_pickle *p, uint32_t d, const char *key, uint32_t *v)
{
    const obj *o = &p->objs[d];
    size_t kl = strlen(key);
    int found = 0;
    for (uint32_t i = 0; o->kind == O_DICT && i + 1 < o->len; i += 2) { /* the last one wins */
        const obj *k = &p->objs[o->u.items[i]];
        if (k->kind == O_STR && k->len == kl && !memcmp(k->u.s, key, kl))
            *v = o->u.items[i + 1], found = 1;
    }
    return found;
}

int pt_value_int(const pt_pickle *p, uint32_t v, int64_t *out)
{
    if (p->objs[v].kind != O_INT)
        return 0;
    *out = p->objs[v].u.i;
    return 1;
}

int pt_value_bool(const pt_pickle *p, uint32_t v, int *out)
{
    if (p->objs[v].kind != O_BOOL)
        return 0;
    *out = p->objs[v].sub;
    return 1;
}

int pt_value_number(const pt_pickle *p, uint32_t v, double *out)
{
    const obj *o = &p->objs[v];
    if (o->kind != O_FLOAT && o->kind != O_INT)
        return 0;
    *out = o->kind == O_FLOAT ? o->u.f : (double)o->u.i;
    return 1;
}

const char *pt_value_str(const pt_pickle *p, uint32_t v)
{
    return valid_name(&p->objs[v]) ? p->objs[v].u.s : NULL;
}

size_t pt_value_len(const pt_pickle *p, uint32_t v)
{
    const obj *o = &p->objs[v];
    return o->kind == O_TUPLE || o->kind == O_LIST ? o->len : o->kind == O_DICT ? o->len / 2 : 0;
}

uint32_t pt_value_item(const pt_pickle *p, uint32_t v, size_t i)
{
    return p->objs[v].u.items[i];
}
