/* A restricted unpickler: the opcodes Python's pickler (protocols 2 to 5) emits for what
 * torch.save writes of a state dict, and the globals of tensors and dicts only, as
 * torch.load(weights_only=True) allows; anything else is refused naming it and its byte.
 * Objects live in one pool (indices, no reference counts: freed together); nothing recurses,
 * so a deep or cyclic structure costs no stack. Every count has a limit (pt_internal.h). */
#include "hf/torch_pickle.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const kind_names[] = {"None", "a bool", "an int", "a float", "a string",
                                         "bytes", "a tuple", "a list", "a dict", "a class",
                                         "a storage", "a tensor", "an opaque object"};

const char *pk_kind_name(int kind)
{
    return kind_names[kind];
}

int pt_bad(const char *path, const char *fmt, ...)
{
    char what[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return tr_fail(TR_ERR_INVALID, "%s: %s", path, what);
}

int pk_fail(pt_pickle *p, const char *fmt, ...)
{
    char what[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return tr_fail(TR_ERR_INVALID, "%s: %s byte %zu: %s", p->path, p->what, p->at, what);
}

int pk_nomem(pt_pickle *p)
{
    return tr_fail(TR_ERR_NOMEM, "out of memory reading %s of %s", p->what, p->path);
}

/* Grow *v (elements of esize, *cap of them) to hold n. */
int pk_grow(void **v, size_t *cap, size_t n, size_t esize)
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
        return pk_fail(p, "more than %u objects and container items", PT_MAX_ITEMS);
    p->items += n;
    return TR_OK;
}

/* A new object of kind k: its index in *out. */
int pk_new_obj(pt_pickle *p, int k, uint32_t *out)
{
    int rc = count_items(p, 1);
    if (rc)
        return rc;
    if (pk_grow((void **)&p->objs, &p->cap_objs, p->n_objs + 1, sizeof *p->objs))
        return pk_nomem(p);
    memset(&p->objs[p->n_objs], 0, sizeof *p->objs);
    p->objs[p->n_objs].kind = (uint8_t)k;
    *out = (uint32_t)p->n_objs++;
    return TR_OK;
}

int pk_push(pt_pickle *p, uint32_t o)
{
    if (p->sp >= PT_MAX_STACK)
        return pk_fail(p, "the stack passes %u values", PT_MAX_STACK);
    p->stack[p->sp++] = o;
    return TR_OK;
}

static int push_new(pt_pickle *p, int k, obj **o)
{
    uint32_t i = 0;
    int rc = pk_new_obj(p, k, &i);
    if (!rc && !(rc = pk_push(p, i)))
        *o = &p->objs[i];
    return rc;
}

/* The values above the innermost mark (count and where they start), or an error. */
static int above_mark(pt_pickle *p, const char *op, size_t *from)
{
    if (p->n_marks == 0)
        return pk_fail(p, "%s without a MARK", op);
    *from = p->marks[--p->n_marks];
    return TR_OK;
}

static int need(pt_pickle *p, size_t k, const char *op)
{
    size_t floor = p->n_marks ? p->marks[p->n_marks - 1] : 0;
    if (p->sp - floor < k)
        return pk_fail(p, "%s pops %zu value(s) from a stack of %zu (stack underflow)", op, k,
                       p->sp - floor);
    return TR_OK;
}

int pk_add_items(pt_pickle *p, uint32_t c, const uint32_t *items, size_t n)
{
    int rc = count_items(p, n);
    obj *o = &p->objs[c];
    size_t cap = o->cap;
    if (rc)
        return rc;
    if (pk_grow((void **)&o->u.items, &cap, (size_t)o->len + n, sizeof *o->u.items))
        return pk_nomem(p);
    memcpy(o->u.items + o->len, items, n * sizeof *items);
    o->len += (uint32_t)n, o->cap = (uint32_t)cap;
    return TR_OK;
}

/* A tuple of the stack's values from `from` up, replacing them. */
static int make_tuple(pt_pickle *p, size_t from)
{
    uint32_t t = 0;
    size_t n = p->sp - from;
    int rc = pk_new_obj(p, O_TUPLE, &t);
    if (!rc && n)
        rc = pk_add_items(p, t, p->stack + from, n);
    p->sp = from;
    return rc ? rc : pk_push(p, t);
}

const char *pk_kind_of(const pt_pickle *p, uint32_t o)
{
    return kind_names[p->objs[o].kind];
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
        return pk_fail(p, "the pickle ends inside %s (truncated)", op_name(c->b[p->at]));
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
        return pk_fail(p, "a string of %llu bytes (at most %u are read)", (unsigned long long)len,
                       PT_MAX_STRING);
    int rc = take(p, c, (size_t)len, &b);
    if (!rc)
        rc = count_items(p, (size_t)len / 16);
    if (!rc)
        rc = push_new(p, kind, &o);
    if (!rc && !(o->u.s = malloc((size_t)len + 1)))
        rc = pk_nomem(p);
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
        return pk_fail(p, "GLOBAL's module and name are not two lines (truncated?)");
    }
    c->at += (size_t)(nl2 + 1 - s);
    return pk_global(p, s, (size_t)(nl1 - s), nl1 + 1, (size_t)(nl2 - nl1 - 1));
}

static int memo_put(pt_pickle *p, uint64_t i)
{
    if (p->sp == 0)
        return pk_fail(p, "memo put with an empty stack (stack underflow)");
    if (i > p->n_memo)
        return pk_fail(p, "memo index %llu out of order (%zu are set)", (unsigned long long)i,
                       p->n_memo);
    if (i == p->n_memo) {
        int rc = count_items(p, 1);
        if (rc)
            return rc;
        if (pk_grow((void **)&p->memo, &p->cap_memo, p->n_memo + 1, sizeof *p->memo))
            return pk_nomem(p);
        p->n_memo++;
    }
    p->memo[i] = p->stack[p->sp - 1];
    return TR_OK;
}

static int memo_get(pt_pickle *p, uint64_t i)
{
    if (i >= p->n_memo)
        return pk_fail(p, "memo get of index %llu, which is not set", (unsigned long long)i);
    return pk_push(p, p->memo[i]);
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
            rc = pk_fail(p, "pickle protocol %llu (at most 5 is read)", (unsigned long long)v);
        return rc;
    case 0x95: /* FRAME: the length is a transport detail; it must fit */
        if (!(rc = take_le(p, c, 8, &v)) && v > c->n - c->at)
            rc = pk_fail(p, "a FRAME of %llu bytes runs past the pickle", (unsigned long long)v);
        return rc;
    case '.':
        if ((rc = need(p, 1, "STOP")))
            return rc;
        if (p->n_marks || p->sp != 1)
            return pk_fail(p, "STOP leaves %zu values and %d marks on the stack", p->sp,
                           p->n_marks);
        p->top = p->stack[0];
        *stop = 1;
        return TR_OK;
    case '(':
        if (p->n_marks == PT_MAX_MARKS)
            return pk_fail(p, "more than %d nested MARKs", PT_MAX_MARKS);
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
            return pk_fail(p, "DICT of an odd number of values");
        if (!(rc = pk_new_obj(p, op == 'l' ? O_LIST : O_DICT, &l)) && p->sp > from)
            rc = pk_add_items(p, l, p->stack + from, p->sp - from);
        p->sp = from;
        return rc ? rc : pk_push(p, l);
    }
    case 'a': case 's': {
        size_t k = op == 'a' ? 1 : 2;
        if ((rc = need(p, k + 1, op_name(op))))
            return rc;
        uint32_t tgt = p->stack[p->sp - k - 1];
        if (p->objs[tgt].kind != (op == 'a' ? O_LIST : O_DICT))
            return pk_fail(p, "%s to %s", op_name(op), pk_kind_of(p, tgt));
        rc = pk_add_items(p, tgt, p->stack + p->sp - k, k);
        p->sp -= k;
        return rc;
    }
    case 'e': case 'u': {
        if ((rc = above_mark(p, op_name(op), &from)))
            return rc;
        if (from == 0 || (from > 0 && p->n_marks && p->marks[p->n_marks - 1] >= from))
            return pk_fail(p, "%s without its container (stack underflow)", op_name(op));
        uint32_t tgt = p->stack[from - 1];
        if (p->objs[tgt].kind != (op == 'e' ? O_LIST : O_DICT))
            return pk_fail(p, "%s to %s", op_name(op), pk_kind_of(p, tgt));
        if (op == 'u' && (p->sp - from) % 2)
            return pk_fail(p, "SETITEMS of an odd number of values");
        if (p->sp > from)
            rc = pk_add_items(p, tgt, p->stack + from, p->sp - from);
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
            return pk_fail(p, "an integer of %llu bytes (at most 8 are read)",
                           (unsigned long long)n);
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
            return pk_fail(p, "STACK_GLOBAL of %s and %s", kind_names[m->kind],
                           kind_names[n->kind]);
        p->sp -= 2;
        return pk_global(p, m->u.s, m->len, n->u.s, n->len);
    }
    case 'R': case 0x81:
        if ((rc = need(p, 2, op_name(op))))
            return rc;
        p->sp -= 2;
        return pk_call(p, p->stack[p->sp], p->stack[p->sp + 1], op_name(op));
    case 'b': /* BUILD: pk_build */
        if ((rc = need(p, 2, "BUILD")))
            return rc;
        p->sp--;
        return pk_build(p, p->stack[p->sp - 1], p->stack[p->sp]);
    case 'Q':
        if ((rc = need(p, 1, "BINPERSID")))
            return rc;
        return pk_persistent(p, p->stack[--p->sp]);
    case 'q': case 'r':
        return (rc = take_le(p, c, op == 'q' ? 1 : 4, &v)) ? rc : memo_put(p, v);
    case 0x94: return memo_put(p, p->n_memo);
    case 'h': case 'j':
        return (rc = take_le(p, c, op == 'h' ? 1 : 4, &v)) ? rc : memo_get(p, v);
    default:
        return pk_fail(p, "opcode 0x%02x (%s) is not read (only what torch.save writes for a state "
                       "dict is)", op, op_name(op));
    }
}

int pt_pickle_run(const char *path, const char *what, const unsigned char *buf, size_t n,
                  int flags, pt_pickle **out, size_t *used)
{
    *out = NULL;
    if (n > PT_MAX_PICKLE)
        return pt_bad(path, "%s is %zu bytes (at most %u are read)", what, n, PT_MAX_PICKLE);
    pt_pickle *p = calloc(1, sizeof *p);
    if (!p || !(p->stack = malloc(PT_MAX_STACK * sizeof *p->stack))) {
        free(p);
        return tr_fail(TR_ERR_NOMEM, "out of memory reading %s", path);
    }
    p->path = path, p->what = what, p->legacy = !!(flags & PT_LEGACY);
    p->objects = !!(flags & PT_OBJECTS), p->dcp = !!(flags & PT_DCP);
    cursor c = {buf, n, 0};
    int rc = TR_OK, stop = 0;
    while (!rc && !stop) {
        p->at = c.at;
        if (c.at >= n) {
            p->ran_out = 1;
            rc = pk_fail(p, "the pickle ends without STOP (truncated)");
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

