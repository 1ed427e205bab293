/* A restricted unpickler: the opcodes Python's pickler (protocols 2 to 5) emits for what
 * torch.save writes of a state dict, and the globals of tensors and dicts only, as
 * torch.load(weights_only=True) allows; anything else is refused naming it and its byte.
 * Objects live in one pool (indices, no reference counts: freed together); nothing recurses,
 * so a deep or cyclic structure costs no stack. Every count has a limit (pt_internal.h). */
#include "hf/pt_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { O_NONE, O_BOOL, O_INT, O_FLOAT, O_STR, O_BYTES, O_TUPLE, O_LIST, O_DICT, O_GLOBAL,
       O_STORAGE, O_TENSOR };
static const char *const kind_names[] = {"None", "a bool", "an int", "a float", "a string",
                                         "bytes", "a tuple", "a list", "a dict", "a class",
                                         "a storage", "a tensor"};

/* the allowed globals */
enum { G_ORDERED_DICT = 100, G_REBUILD_V2, G_REBUILD_PARAMETER }; /* below 100: storages */
static const struct {
    const char *module, *name;
    int what;
} globals[] = {
    {"collections", "OrderedDict", G_ORDERED_DICT},
    {"torch._utils", "_rebuild_tensor_v2", G_REBUILD_V2},
    {"torch._utils", "_rebuild_parameter", G_REBUILD_PARAMETER},
    {"torch", "FloatStorage", TR_ST_F32},   {"torch", "HalfStorage", TR_ST_F16},
    {"torch", "BFloat16Storage", TR_ST_BF16}, {"torch", "DoubleStorage", TR_ST_F64},
    {"torch", "LongStorage", TR_ST_I64},    {"torch", "IntStorage", TR_ST_I32},
    {"torch", "ShortStorage", TR_ST_I16},   {"torch", "CharStorage", TR_ST_I8},
    {"torch", "ByteStorage", TR_ST_U8},     {"torch", "BoolStorage", TR_ST_BOOL},
};

typedef struct {
    uint8_t kind;
    uint8_t sub;  /* O_GLOBAL: G_* or a dtype; O_STORAGE: its dtype; O_BOOL: the value */
    uint32_t len; /* O_STR / O_BYTES: bytes; containers: items (a dict: 2 per entry) */
    uint32_t cap;
    union {
        int64_t i;          /* O_INT */
        double f;           /* O_FLOAT */
        char *s;            /* O_STR / O_BYTES: len bytes + NUL */
        uint32_t *items;    /* O_TUPLE, O_LIST, O_DICT (key, value, ...) */
        struct {            /* O_STORAGE: key (an O_STR), numel */
            uint32_t key;
            int64_t numel;
        } st;
        uint32_t tensor;    /* O_TENSOR: index into tensors */
    } u;
} obj;

typedef struct {
    uint32_t storage; /* O_STORAGE */
    int64_t offset;
    int ndim;
    int64_t size[TR_ST_MAX_DIMS], stride[TR_ST_MAX_DIMS];
} raw_tensor;

struct pt_pickle {
    const char *path, *what;
    obj *objs;
    size_t n_objs, cap_objs;
    raw_tensor *tensors;
    size_t n_tensors, cap_tensors;
    uint32_t *stack;
    size_t sp;
    size_t marks[PT_MAX_MARKS];
    int n_marks;
    uint32_t *memo;
    size_t n_memo, cap_memo;
    size_t items; /* objects plus container slots (PT_MAX_ITEMS) */
    uint32_t top; /* the object STOP returned */
    size_t at;    /* the current opcode's byte */
    int legacy;
    int ran_out; /* the error is the end of the bytes */
};

int pt_bad(const char *path, const char *fmt, ...)
{
    char what[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return tr_fail(TR_ERR_INVALID, "%s: %s", path, what);
}

static int fail(pt_pickle *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(pt_pickle *p, const char *fmt, ...)
{
    char what[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return tr_fail(TR_ERR_INVALID, "%s: %s byte %zu: %s", p->path, p->what, p->at, what);
}

static int nomem(pt_pickle *p)
{
    return tr_fail(TR_ERR_NOMEM, "out of memory reading %s of %s", p->what, p->path);
}

/* Grow *v (elements of esize, *cap of them) to hold n. */
static int grow(void **v, size_t *cap, size_t n, size_t esize)
{
    if (n <= *cap)
        return 0;
    size_t c = *cap ? *cap : 16;
    while (c < n)
        c *= 2;
    void *m = realloc(*v, c * esize);
    if (!m)
        return -1;
    *v = m, *cap = c;
    return 0;
}

static int count_items(pt_pickle *p, size_t n)
{
    if (n > PT_MAX_ITEMS - p->items)
        return fail(p, "more than %u objects and container items", PT_MAX_ITEMS);
    p->items += n;
    return TR_OK;
}

/* A new object of kind k: its index in *out. */
static int new_obj(pt_pickle *p, int k, uint32_t *out)
{
    int rc = count_items(p, 1);
    if (rc)
        return rc;
    if (grow((void **)&p->objs, &p->cap_objs, p->n_objs + 1, sizeof *p->objs))
        return nomem(p);
    memset(&p->objs[p->n_objs], 0, sizeof *p->objs);
    p->objs[p->n_objs].kind = (uint8_t)k;
    *out = (uint32_t)p->n_objs++;
    return TR_OK;
}

static int push(pt_pickle *p, uint32_t o)
{
    if (p->sp >= PT_MAX_STACK)
        return fail(p, "the stack passes %u values", PT_MAX_STACK);
    p->stack[p->sp++] = o;
    return TR_OK;
}

static int push_new(pt_pickle *p, int k, obj **o)
{
    uint32_t i = 0;
    int rc = new_obj(p, k, &i);
    if (!rc && !(rc = push(p, i)))
        *o = &p->objs[i];
    return rc;
}

/* The values above the innermost mark (count and where they start), or an error. */
static int above_mark(pt_pickle *p, const char *op, size_t *from)
{
    if (p->n_marks == 0)
        return fail(p, "%s without a MARK", op);
    *from = p->marks[--p->n_marks];
    return TR_OK;
}

static int need(pt_pickle *p, size_t k, const char *op)
{
    size_t floor = p->n_marks ? p->marks[p->n_marks - 1] : 0;
    if (p->sp - floor < k)
        return fail(p, "%s pops %zu value(s) from a stack of %zu (stack underflow)", op, k,
                    p->sp - floor);
    return TR_OK;
}

/* Append items[0, n) to container c (a list or a dict). */
static int add_items(pt_pickle *p, uint32_t c, const uint32_t *items, size_t n)
{
    int rc = count_items(p, n);
    obj *o = &p->objs[c];
    size_t cap = o->cap;
    if (rc)
        return rc;
    if (grow((void **)&o->u.items, &cap, (size_t)o->len + n, sizeof *o->u.items))
        return nomem(p);
    memcpy(o->u.items + o->len, items, n * sizeof *items);
    o->len += (uint32_t)n, o->cap = (uint32_t)cap;
    return TR_OK;
}

/* A tuple of the stack's values from `from` up, replacing them. */
static int make_tuple(pt_pickle *p, size_t from)
{
    uint32_t t = 0;
    size_t n = p->sp - from;
    int rc = new_obj(p, O_TUPLE, &t);
    if (!rc && n)
        rc = add_items(p, t, p->stack + from, n);
    p->sp = from;
    return rc ? rc : push(p, t);
}

static const char *kind_of(const pt_pickle *p, uint32_t o)
{
    return kind_names[p->objs[o].kind];
}

/* ------------------------------------------------------------------ globals, calls */

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

static int global(pt_pickle *p, const char *mod, size_t ml, const char *name, size_t nl)
{
    for (size_t i = 0; i < sizeof globals / sizeof globals[0]; i++)
        if (strlen(globals[i].module) == ml && !memcmp(globals[i].module, mod, ml) &&
            strlen(globals[i].name) == nl && !memcmp(globals[i].name, name, nl)) {
            obj *o;
            int rc = push_new(p, O_GLOBAL, &o);
            if (!rc)
                o->sub = (uint8_t)globals[i].what;
            return rc;
        }
    char m[160], n[160];
    printable(m, sizeof m, mod, ml);
    printable(n, sizeof n, name, nl);
    return fail(p, "pickle calls GLOBAL '%s.%s', which is not a tensor or a dict (only state "
                "dicts are read)", m, n);
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
        return fail(p, "_rebuild_tensor_v2 takes 6 or 7 arguments, not %u", args->len);
    if (p->objs[a[0]].kind != O_STORAGE)
        return fail(p, "_rebuild_tensor_v2's storage is %s", kind_of(p, a[0]));
    raw_tensor t = {.storage = a[0]};
    if (!is_int(p, a[1], &t.offset))
        return fail(p, "_rebuild_tensor_v2's storage_offset is %s", kind_of(p, a[1]));
    const obj *size = &p->objs[a[2]], *stride = &p->objs[a[3]];
    if (size->kind != O_TUPLE || stride->kind != O_TUPLE || size->len != stride->len)
        return fail(p, "_rebuild_tensor_v2's size and stride are not two tuples of one length");
    if (size->len > TR_ST_MAX_DIMS)
        return fail(p, "a tensor of %u dimensions (at most %d are read)", size->len,
                    TR_ST_MAX_DIMS);
    t.ndim = (int)size->len;
    for (int d = 0; d < t.ndim; d++)
        if (!is_int(p, size->u.items[d], &t.size[d]) ||
            !is_int(p, stride->u.items[d], &t.stride[d]))
            return fail(p, "_rebuild_tensor_v2's size or stride holds a value other than an int");
    if (p->objs[a[5]].kind != O_DICT || (args->len == 7 && p->objs[a[6]].kind != O_DICT &&
                                         p->objs[a[6]].kind != O_NONE))
        return fail(p, "_rebuild_tensor_v2's backward_hooks or metadata is not a dict");
    if (grow((void **)&p->tensors, &p->cap_tensors, p->n_tensors + 1, sizeof t))
        return nomem(p);
    int rc = new_obj(p, O_TENSOR, out);
    if (!rc) {
        p->tensors[p->n_tensors] = t;
        p->objs[*out].u.tensor = (uint32_t)p->n_tensors++;
    }
    return rc;
}

/* REDUCE / NEWOBJ: callable f with the tuple args -> the result on the stack. */
static int call(pt_pickle *p, uint32_t f, uint32_t args, const char *op)
{
    const obj *a = &p->objs[args];
    if (p->objs[f].kind != O_GLOBAL)
        return fail(p, "%s calls %s, not an allowed class or function", op, kind_of(p, f));
    if (a->kind != O_TUPLE)
        return fail(p, "%s's arguments are %s, not a tuple", op, kind_of(p, args));
    uint32_t r = 0;
    int rc = TR_OK;
    switch (p->objs[f].sub) {
    case G_ORDERED_DICT:
        if (a->len)
            return fail(p, "OrderedDict is called with arguments");
        rc = new_obj(p, O_DICT, &r);
        break;
    case G_REBUILD_V2:
        if (strcmp(op, "REDUCE"))
            return fail(p, "%s of _rebuild_tensor_v2", op);
        rc = rebuild_tensor(p, a, &r);
        break;
    case G_REBUILD_PARAMETER: /* (data, requires_grad, backward_hooks): the tensor */
        if (strcmp(op, "REDUCE") || a->len != 3 || p->objs[a->u.items[0]].kind != O_TENSOR)
            return fail(p, "_rebuild_parameter is not given (tensor, requires_grad, hooks)");
        r = a->u.items[0];
        break;
    default:
        return fail(p, "%s calls a storage class (storages come from persistent ids)", op);
    }
    return rc ? rc : push(p, r);
}

/* BINPERSID: ('storage', STORAGE_CLASS, key, location, numel) (+ view_metadata None in
 * legacy files) -> a storage object. */
static int persistent(pt_pickle *p, uint32_t pid)
{
    const obj *t = &p->objs[pid];
    unsigned want = p->legacy ? 6 : 5;
    if (t->kind != O_TUPLE || t->len != want)
        return fail(p, "a persistent id is not a tuple of %u values", want);
    const uint32_t *a = t->u.items;
    const obj *tag = &p->objs[a[0]], *cls = &p->objs[a[1]];
    if (tag->kind != O_STR || strcmp(tag->u.s, "storage"))
        return fail(p, "a persistent id other than ('storage', ...)");
    if (cls->kind != O_GLOBAL || cls->sub >= G_ORDERED_DICT)
        return fail(p, "a persistent id's storage type is not a torch storage class");
    int64_t numel;
    if (p->objs[a[2]].kind != O_STR || p->objs[a[3]].kind != O_STR || !is_int(p, a[4], &numel) ||
        numel < 0)
        return fail(p, "a persistent id's key, location or size is not a string, a string and "
                    "an int >= 0");
    if (p->legacy && p->objs[a[5]].kind != O_NONE)
        return fail(p, "a storage view (view_metadata) in a persistent id");
    uint8_t dtype = cls->sub;
    uint32_t s = 0, key = a[2];
    int rc = new_obj(p, O_STORAGE, &s); /* moves the objects: t, tag and cls are stale */
    if (!rc) {
        p->objs[s].sub = dtype;
        p->objs[s].u.st.key = key, p->objs[s].u.st.numel = numel;
        rc = push(p, s);
    }
    return rc;
}

/* ------------------------------------------------------------------ the machine */

static const struct {
    unsigned char op;
    const char *name;
} op_names[] = {
    {0x80, "PROTO"}, {0x95, "FRAME"}, {'.', "STOP"}, {'(', "MARK"}, {'0', "POP"},
    {'1', "POP_MARK"}, {'}', "EMPTY_DICT"}, {']', "EMPTY_LIST"}, {')', "EMPTY_TUPLE"},
    {'t', "TUPLE"}, {0x85, "TUPLE1"}, {0x86, "TUPLE2"}, {0x87, "TUPLE3"}, {'l', "LIST"},
    {'d', "DICT"}, {'a', "APPEND"}, {'e', "APPENDS"}, {'s', "SETITEM"}, {'u', "SETITEMS"},
    {'J', "BININT"}, {'K', "BININT1"}, {'M', "BININT2"}, {0x8a, "LONG1"}, {0x88, "NEWTRUE"},
    {0x89, "NEWFALSE"}, {'N', "NONE"}, {'G', "BINFLOAT"}, {'X', "BINUNICODE"},
    {0x8c, "SHORT_BINUNICODE"}, {0x8d, "BINUNICODE8"}, {'T', "BINSTRING"},
    {'U', "SHORT_BINSTRING"}, {'B', "BINBYTES"}, {'C', "SHORT_BINBYTES"}, {'c', "GLOBAL"},
    {0x93, "STACK_GLOBAL"}, {'R', "REDUCE"}, {'b', "BUILD"}, {0x81, "NEWOBJ"},
    {'Q', "BINPERSID"}, {'q', "BINPUT"}, {'r', "LONG_BINPUT"}, {'h', "BINGET"},
    {'j', "LONG_BINGET"}, {0x94, "MEMOIZE"},
    /* refused */
    {'I', "INT"}, {'L', "LONG"}, {'S', "STRING"}, {'V', "UNICODE"}, {'F', "FLOAT"},
    {'P', "PERSID"}, {'g', "GET"}, {'p', "PUT"}, {'i', "INST"}, {'o', "OBJ"}, {'2', "DUP"},
    {0x82, "EXT1"}, {0x83, "EXT2"}, {0x84, "EXT4"}, {0x8b, "LONG4"}, {0x8e, "BINBYTES8"},
    {0x8f, "EMPTY_SET"}, {0x90, "ADDITEMS"}, {0x91, "FROZENSET"}, {0x92, "NEWOBJ_EX"},
    {0x96, "BYTEARRAY8"}, {0x97, "NEXT_BUFFER"}, {0x98, "READONLY_BUFFER"},
};

static const char *op_name(unsigned char op)
{
    for (size_t i = 0; i < sizeof op_names / sizeof op_names[0]; i++)
        if (op_names[i].op == op)
            return op_names[i].name;
    return "unknown";
}

/* The reader of the opcodes' arguments. */
typedef struct {
    const unsigned char *b;
    size_t n, at;
} cursor;

static int take(pt_pickle *p, cursor *c, size_t k, const unsigned char **out)
{
    if (k > c->n - c->at) {
        p->ran_out = 1;
        return fail(p, "the pickle ends inside %s (truncated)", op_name(c->b[p->at]));
    }
    *out = c->b + c->at;
    c->at += k;
    return TR_OK;
}

static int take_le(pt_pickle *p, cursor *c, int k, uint64_t *v)
{
    const unsigned char *b = NULL;
    int rc = take(p, c, (size_t)k, &b);
    *v = 0;
    for (int i = k - 1; !rc && i >= 0; i--)
        *v = *v << 8 | b[i];
    return rc;
}

/* A string / bytes value of len bytes. */
static int push_text(pt_pickle *p, cursor *c, int kind, uint64_t len)
{
    const unsigned char *b = NULL;
    obj *o = NULL;
    if (len > PT_MAX_STRING)
        return fail(p, "a string of %llu bytes (at most %u are read)", (unsigned long long)len,
                    PT_MAX_STRING);
    int rc = take(p, c, (size_t)len, &b);
    if (!rc)
        rc = count_items(p, (size_t)len / 16);
    if (!rc)
        rc = push_new(p, kind, &o);
    if (!rc && !(o->u.s = malloc((size_t)len + 1)))
        rc = nomem(p);
    if (!rc) {
        memcpy(o->u.s, b, (size_t)len);
        o->u.s[len] = '\0';
        o->len = (uint32_t)len;
    }
    return rc;
}

/* GLOBAL's two text lines "module\nname\n". */
static int global_lines(pt_pickle *p, cursor *c)
{
    const char *s = (const char *)c->b + c->at;
    size_t left = c->n - c->at;
    const char *nl1 = memchr(s, '\n', left < 512 ? left : 512);
    const char *nl2 = nl1 ? memchr(nl1 + 1, '\n', (size_t)(s + (left < 512 ? left : 512) -
                                                           nl1 - 1)) : NULL;
    if (!nl2) {
        p->ran_out = left < 512;
        return fail(p, "GLOBAL's module and name are not two lines (truncated?)");
    }
    c->at += (size_t)(nl2 + 1 - s);
    return global(p, s, (size_t)(nl1 - s), nl1 + 1, (size_t)(nl2 - nl1 - 1));
}

static int memo_put(pt_pickle *p, uint64_t i)
{
    if (p->sp == 0)
        return fail(p, "memo put with an empty stack (stack underflow)");
    if (i > p->n_memo)
        return fail(p, "memo index %llu out of order (%zu are set)", (unsigned long long)i,
                    p->n_memo);
    if (i == p->n_memo) {
        int rc = count_items(p, 1);
        if (rc)
            return rc;
        if (grow((void **)&p->memo, &p->cap_memo, p->n_memo + 1, sizeof *p->memo))
            return nomem(p);
        p->n_memo++;
    }
    p->memo[i] = p->stack[p->sp - 1];
    return TR_OK;
}

static int memo_get(pt_pickle *p, uint64_t i)
{
    if (i >= p->n_memo)
        return fail(p, "memo get of index %llu, which is not set", (unsigned long long)i);
    return push(p, p->memo[i]);
}

/* One opcode at c->at (p->at). *stop: STOP reached. */
static int step(pt_pickle *p, cursor *c, int *stop)
{
    unsigned char op = c->b[c->at++];
    uint64_t v = 0;
    const unsigned char *b = NULL;
    size_t from = 0;
    obj *o = NULL;
    int rc = TR_OK;
    switch (op) {
    case 0x80: /* PROTO */
        if (!(rc = take_le(p, c, 1, &v)) && v > 5)
            rc = fail(p, "pickle protocol %llu (at most 5 is read)", (unsigned long long)v);
        return rc;
    case 0x95: /* FRAME: the length is a transport detail; it must fit */
        if (!(rc = take_le(p, c, 8, &v)) && v > c->n - c->at)
            rc = fail(p, "a FRAME of %llu bytes runs past the pickle", (unsigned long long)v);
        return rc;
    case '.':
        if ((rc = need(p, 1, "STOP")))
            return rc;
        if (p->n_marks || p->sp != 1)
            return fail(p, "STOP leaves %zu values and %d marks on the stack", p->sp, p->n_marks);
        p->top = p->stack[0];
        *stop = 1;
        return TR_OK;
    case '(':
        if (p->n_marks == PT_MAX_MARKS)
            return fail(p, "more than %d nested MARKs", PT_MAX_MARKS);
        p->marks[p->n_marks++] = p->sp;
        return TR_OK;
    case '0':
        if (!(rc = need(p, 1, "POP")))
            p->sp--;
        return rc;
    case '1':
        if (!(rc = above_mark(p, "POP_MARK", &from)))
            p->sp = from;
        return rc;
    case '}': return push_new(p, O_DICT, &o);
    case ']': return push_new(p, O_LIST, &o);
    case ')': return make_tuple(p, p->sp);
    case 't':
        return (rc = above_mark(p, "TUPLE", &from)) ? rc : make_tuple(p, from);
    case 0x85: case 0x86: case 0x87:
        return (rc = need(p, op - 0x84u, op_name(op))) ? rc : make_tuple(p, p->sp - (op - 0x84u));
    case 'l': case 'd': {
        uint32_t l = 0;
        if ((rc = above_mark(p, op_name(op), &from)))
            return rc;
        if (op == 'd' && (p->sp - from) % 2)
            return fail(p, "DICT of an odd number of values");
        if (!(rc = new_obj(p, op == 'l' ? O_LIST : O_DICT, &l)) && p->sp > from)
            rc = add_items(p, l, p->stack + from, p->sp - from);
        p->sp = from;
        return rc ? rc : push(p, l);
    }
    case 'a': case 's': {
        size_t k = op == 'a' ? 1 : 2;
        if ((rc = need(p, k + 1, op_name(op))))
            return rc;
        uint32_t tgt = p->stack[p->sp - k - 1];
        if (p->objs[tgt].kind != (op == 'a' ? O_LIST : O_DICT))
            return fail(p, "%s to %s", op_name(op), kind_of(p, tgt));
        rc = add_items(p, tgt, p->stack + p->sp - k, k);
        p->sp -= k;
        return rc;
    }
    case 'e': case 'u': {
        if ((rc = above_mark(p, op_name(op), &from)))
            return rc;
        if (from == 0 || (from > 0 && p->n_marks && p->marks[p->n_marks - 1] >= from))
            return fail(p, "%s without its container (stack underflow)", op_name(op));
        uint32_t tgt = p->stack[from - 1];
        if (p->objs[tgt].kind != (op == 'e' ? O_LIST : O_DICT))
            return fail(p, "%s to %s", op_name(op), kind_of(p, tgt));
        if (op == 'u' && (p->sp - from) % 2)
            return fail(p, "SETITEMS of an odd number of values");
        if (p->sp > from)
            rc = add_items(p, tgt, p->stack + from, p->sp - from);
        p->sp = from;
        return rc;
    }
    case 'J': case 'K': case 'M': {
        int k = op == 'J' ? 4 : op == 'K' ? 1 : 2;
        if (!(rc = take_le(p, c, k, &v)) && !(rc = push_new(p, O_INT, &o)))
            o->u.i = k == 4 ? (int64_t)(int32_t)(uint32_t)v : (int64_t)v;
        return rc;
    }
    case 0x8a: { /* LONG1: n bytes of two's complement, little-endian */
        uint64_t n = 0;
        if ((rc = take_le(p, c, 1, &n)))
            return rc;
        if (n > 8)
            return fail(p, "an integer of %llu bytes (at most 8 are read)", (unsigned long long)n);
        if ((rc = take(p, c, (size_t)n, &b)) || (rc = push_new(p, O_INT, &o)))
            return rc;
        uint64_t u = n && (b[n - 1] & 0x80) ? ~(uint64_t)0 : 0;
        for (size_t i = (size_t)n; i-- > 0;)
            u = u << 8 | b[i];
        memcpy(&o->u.i, &u, sizeof u);
        return TR_OK;
    }
    case 0x88: case 0x89:
        if (!(rc = push_new(p, O_BOOL, &o)))
            o->sub = op == 0x88;
        return rc;
    case 'N': return push_new(p, O_NONE, &o);
    case 'G': /* big-endian double */
        if ((rc = take(p, c, 8, &b)) || (rc = push_new(p, O_FLOAT, &o)))
            return rc;
        v = 0;
        for (int i = 0; i < 8; i++)
            v = v << 8 | b[i];
        memcpy(&o->u.f, &v, sizeof v);
        return TR_OK;
    case 'X': case 'T': case 'B':
        return (rc = take_le(p, c, 4, &v)) ? rc
                                           : push_text(p, c, op == 'B' ? O_BYTES : O_STR, v);
    case 0x8c: case 'U': case 'C':
        return (rc = take_le(p, c, 1, &v)) ? rc
                                           : push_text(p, c, op == 'C' ? O_BYTES : O_STR, v);
    case 0x8d:
        return (rc = take_le(p, c, 8, &v)) ? rc : push_text(p, c, O_STR, v);
    case 'c': return global_lines(p, c);
    case 0x93: { /* STACK_GLOBAL: module, name */
        if ((rc = need(p, 2, "STACK_GLOBAL")))
            return rc;
        const obj *m = &p->objs[p->stack[p->sp - 2]], *n = &p->objs[p->stack[p->sp - 1]];
        if (m->kind != O_STR || n->kind != O_STR)
            return fail(p, "STACK_GLOBAL of %s and %s", kind_names[m->kind],
                        kind_names[n->kind]);
        p->sp -= 2;
        return global(p, m->u.s, m->len, n->u.s, n->len);
    }
    case 'R': case 0x81:
        if ((rc = need(p, 2, op_name(op))))
            return rc;
        p->sp -= 2;
        return call(p, p->stack[p->sp], p->stack[p->sp + 1], op_name(op));
    case 'b': /* BUILD: a dict's state (OrderedDict's _metadata) is ignored */
        if ((rc = need(p, 2, "BUILD")))
            return rc;
        if (p->objs[p->stack[p->sp - 2]].kind != O_DICT)
            return fail(p, "BUILD of %s (only a dict's state is accepted, and ignored)",
                        kind_of(p, p->stack[p->sp - 2]));
        p->sp--;
        return TR_OK;
    case 'Q':
        if ((rc = need(p, 1, "BINPERSID")))
            return rc;
        return persistent(p, p->stack[--p->sp]);
    case 'q': case 'r':
        return (rc = take_le(p, c, op == 'q' ? 1 : 4, &v)) ? rc : memo_put(p, v);
    case 0x94: return memo_put(p, p->n_memo);
    case 'h': case 'j':
        return (rc = take_le(p, c, op == 'h' ? 1 : 4, &v)) ? rc : memo_get(p, v);
    default:
        return fail(p, "opcode 0x%02x (%s) is not read (only what torch.save writes for a state "
                    "dict is)", op, op_name(op));
    }
}

int pt_pickle_run(const char *path, const char *what, const unsigned char *buf, size_t n,
                  int legacy, pt_pickle **out, size_t *used)
{
    *out = NULL;
    if (n > PT_MAX_PICKLE)
        return pt_bad(path, "%s is %zu bytes (at most %u are read)", what, n, PT_MAX_PICKLE);
    pt_pickle *p = calloc(1, sizeof *p);
    if (!p || !(p->stack = malloc(PT_MAX_STACK * sizeof *p->stack))) {
        free(p);
        return tr_fail(TR_ERR_NOMEM, "out of memory reading %s", path);
    }
    p->path = path, p->what = what, p->legacy = legacy;
    cursor c = {buf, n, 0};
    int rc = TR_OK, stop = 0;
    while (!rc && !stop) {
        p->at = c.at;
        if (c.at >= n) {
            p->ran_out = 1;
            rc = fail(p, "the pickle ends without STOP (truncated)");
        } else {
            rc = step(p, &c, &stop);
        }
    }
    free(p->stack);
    p->stack = NULL;
    if (rc) {
        *used = p->ran_out ? SIZE_MAX : 0;
        pt_pickle_free(p);
        return rc;
    }
    *used = c.at;
    *out = p;
    return TR_OK;
}

void pt_pickle_free(pt_pickle *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n_objs; i++) {
        obj *o = &p->objs[i];
        if (o->kind == O_STR || o->kind == O_BYTES)
            free(o->u.s);
        else if (o->kind == O_TUPLE || o->kind == O_LIST || o->kind == O_DICT)
            free(o->u.items);
    }
    free(p->objs);
    free(p->tensors);
    free(p->stack);
    free(p->memo);
    free(p);
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

int pt_pickle_state(pt_pickle *p, pt_tensor **out, size_t *n_out)
{
    *out = NULL, *n_out = 0;
    const obj *d = &p->objs[p->top];
    if (d->kind != O_DICT)
        return pt_bad(p->path, "the pickle holds %s, not a state dict", kind_names[d->kind]);
    size_t n = d->len / 2;
    pt_tensor *t = calloc(n + 1, sizeof *t);
    if (!t)
        return tr_fail(TR_ERR_NOMEM, "out of memory reading %s", p->path);
    int rc = TR_OK;
    for (size_t i = 0; i < n && !rc; i++) {
        const obj *k = &p->objs[d->u.items[2 * i]], *v = &p->objs[d->u.items[2 * i + 1]];
        if (!valid_name(k))
            rc = pt_bad(p->path, "the state dict has a key that is %s", k->kind == O_STR ?
                        "not UTF-8 or holds a NUL" : kind_names[k->kind]);
        else if (v->kind != O_TENSOR)
            rc = pt_bad(p->path, "state dict entry '%.200s' is %s, not a tensor (only tensors "
                        "are read)", k->u.s, kind_names[v->kind]);
        else if (!(rc = check_tensor(p, &p->tensors[v->u.tensor], k->u.s, &t[i])))
            (*n_out)++;
    }
    if (rc) {
        pt_tensors_free(t, *n_out);
        *n_out = 0;
        return rc;
    }
    *out = t;
    return TR_OK;
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
        return pt_bad(p->path, "the legacy storage keys are %s, not a list", kind_names[l->kind]);
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
