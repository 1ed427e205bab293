/* hf/: pytorch_model.bin reading (tr_pt_open: zip_read.c, torch_pickle.c, torch_bin.c) on
 * hand-made files: pickles written opcode by opcode, ZIP archives (ZIP64 too) and legacy
 * files built here.
 *  - a state dict reads back (F32, BF16, a view at an offset, tied tensors, a scalar), from a
 *    ZIP, a ZIP64 and a legacy file, and through tr_st_set_open (pytorch_model.bin and
 *    pytorch_model.bin.index.json);
 *  - every refusal names its cause: an opcode outside the allowlist, a GLOBAL outside it
 *    (os.system, builtins.eval by STACK_GLOBAL), a memo get of an unset index, stack
 *    underflow, deep nesting, truncation, a deflated entry, an entry past the end, a missing
 *    storage, a storage too small, a non-contiguous stride, a big-endian archive, counts that
 *    would overflow, a non-tensor value, duplicates;
 *  - fuzz: random byte mutations of a valid ZIP and legacy file open (and every tensor reads)
 *    or are refused with TR_ERR_INVALID (the sanitizer build checks for the rest). */
#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "hf/hf.h"

static char dir[256];

/* ------------------------------------------------------------------ byte builders */

typedef struct {
    unsigned char *b;
    size_t n, cap;
} buf;

static void put(buf *o, const void *p, size_t n)
{
    if (n == 0)
        return;
    if (o->n + n > o->cap) {
        o->cap = (o->n + n) * 2 + 64;
        o->b = realloc(o->b, o->cap);
        assert_non_null(o->b);
    }
    memcpy(o->b + o->n, p, n);
    o->n += n;
}

static void op(buf *o, int c)
{
    unsigned char b = (unsigned char)c;
    put(o, &b, 1);
}

static void le(buf *o, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        op(o, (int)(v >> (8 * i) & 0xff));
}

static void pk_str(buf *o, const char *s)
{
    op(o, 'X');
    le(o, strlen(s), 4);
    put(o, s, strlen(s));
}

static void pk_int(buf *o, int64_t v)
{
    if (v >= 0 && v < 256) {
        op(o, 'K');
        op(o, (int)v);
    } else {
        op(o, 0x8a);
        op(o, 8);
        le(o, (uint64_t)v, 8);
    }
}

static void pk_global(buf *o, const char *mod, const char *name)
{
    op(o, 'c');
    put(o, mod, strlen(mod));
    op(o, '\n');
    put(o, name, strlen(name));
    op(o, '\n');
}

typedef struct {
    const char *name, *storage, *key; /* storage: "FloatStorage" */
    int64_t numel, offset;            /* the storage's elements; the tensor's offset in it */
    int ndim;
    int64_t size[4], stride[4];
} tspec;

static int legacy; /* persistent ids of 6 fields */

static void pk_tensor(buf *o, const tspec *t)
{
    pk_global(o, "torch._utils", "_rebuild_tensor_v2");
    op(o, '(');
    op(o, '(');
    pk_str(o, "storage");
    pk_global(o, "torch", t->storage);
    pk_str(o, t->key);
    pk_str(o, "cpu");
    pk_int(o, t->numel);
    if (legacy)
        op(o, 'N');
    op(o, 't');
    op(o, 'Q');
    pk_int(o, t->offset);
    op(o, '(');
    for (int d = 0; d < t->ndim; d++)
        pk_int(o, t->size[d]);
    op(o, 't');
    op(o, '(');
    for (int d = 0; d < t->ndim; d++)
        pk_int(o, t->stride[d]);
    op(o, 't');
    op(o, 0x89);
    pk_global(o, "collections", "OrderedDict");
    op(o, ')');
    op(o, 'R');
    op(o, 't');
    op(o, 'R');
}

/* torch.save's pickle of an OrderedDict of the tensors, with its _metadata BUILD */
static void pk_state(buf *o, const tspec *t, int n)
{
    put(o, "\x80\x02", 2);
    pk_global(o, "collections", "OrderedDict");
    op(o, 'q'), op(o, 0);
    op(o, ')');
    op(o, 'R');
    op(o, '(');
    for (int i = 0; i < n; i++) {
        pk_str(o, t[i].name);
        pk_tensor(o, &t[i]);
    }
    op(o, 'u');
    op(o, '}');
    pk_str(o, "_metadata");
    op(o, 'h'), op(o, 0);
    op(o, ')');
    op(o, 'R');
    op(o, 's');
    op(o, 'b');
    op(o, '.');
}

typedef struct {
    const char *name;
    const void *data;
    size_t len;
    int method;
} zent;

/* A ZIP archive of the entries (zip64: every size and offset through ZIP64's fields). */
static void zip_build(buf *o, const zent *e, int n, int zip64)
{
    uint64_t off[16];
    for (int i = 0; i < n; i++) {
        off[i] = o->n;
        le(o, 0x04034b50, 4), le(o, 20, 2), le(o, 0, 2), le(o, (uint64_t)e[i].method, 2);
        le(o, 0, 4), le(o, 0, 4), le(o, e[i].len, 4), le(o, e[i].len, 4);
        le(o, strlen(e[i].name), 2), le(o, 0, 2);
        put(o, e[i].name, strlen(e[i].name));
        put(o, e[i].data, e[i].len);
    }
    uint64_t cd = o->n;
    for (int i = 0; i < n; i++) {
        le(o, 0x02014b50, 4), le(o, 20, 2), le(o, 20, 2), le(o, 0, 2);
        le(o, (uint64_t)e[i].method, 2), le(o, 0, 4), le(o, 0, 4);
        le(o, zip64 ? 0xffffffffu : e[i].len, 4), le(o, zip64 ? 0xffffffffu : e[i].len, 4);
        le(o, strlen(e[i].name), 2), le(o, zip64 ? 28 : 0, 2), le(o, 0, 2), le(o, 0, 2);
        le(o, 0, 2), le(o, 0, 4), le(o, zip64 ? 0xffffffffu : off[i], 4);
        put(o, e[i].name, strlen(e[i].name));
        if (zip64) {
            le(o, 1, 2), le(o, 24, 2), le(o, e[i].len, 8), le(o, e[i].len, 8), le(o, off[i], 8);
        }
    }
    uint64_t cd_size = o->n - cd;
    if (zip64) {
        uint64_t rec = o->n;
        le(o, 0x06064b50, 4), le(o, 44, 8), le(o, 45, 2), le(o, 45, 2), le(o, 0, 4), le(o, 0, 4);
        le(o, (uint64_t)n, 8), le(o, (uint64_t)n, 8), le(o, cd_size, 8), le(o, cd, 8);
        le(o, 0x07064b50, 4), le(o, 0, 4), le(o, rec, 8), le(o, 1, 4);
    }
    le(o, 0x06054b50, 4), le(o, 0, 2), le(o, 0, 2);
    le(o, zip64 ? 0xffff : (uint64_t)n, 2), le(o, zip64 ? 0xffff : (uint64_t)n, 2);
    le(o, zip64 ? 0xffffffffu : cd_size, 4), le(o, zip64 ? 0xffffffffu : cd, 4), le(o, 0, 2);
}

static const float f0[6] = {0, 1, 2, 3, 4, 5};
static const uint16_t b1[4] = {0x3f80, 0x4000, 0x4040, 0xbf80}; /* 1 2 3 -1 in BF16 */
static const tspec good[] = {
    {"a.weight", "FloatStorage", "0", 6, 0, 2, {2, 3}, {3, 1}},
    {"b", "BFloat16Storage", "1", 4, 0, 1, {4}, {1}},
    {"tied", "FloatStorage", "0", 6, 0, 2, {2, 3}, {3, 1}},
    {"row", "FloatStorage", "0", 6, 3, 2, {1, 3}, {7, 1}}, /* a view; any stride of size 1 */
    {"s", "FloatStorage", "0", 6, 5, 0, {0}, {0}},          /* a scalar */
};

static void write_bytes(const char *path, const void *data, size_t n)
{
    unlink(path);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static void path_of(char *out, size_t cap, const char *name)
{
    (void)!snprintf(out, cap, "%s/%s", dir, name);
}

/* A torch.save ZIP of pickle pk with storages 0 and 1 (and `extra` entries) into out. */
static void zip_of(buf *out, const buf *pk, const zent *extra, int n_extra, int zip64)
{
    zent e[12] = {
        {"archive/data.pkl", pk->b, pk->n, 0},
        {"archive/data/0", f0, sizeof f0, 0},
        {"archive/data/1", b1, sizeof b1, 0},
        {"archive/version", "3\n", 2, 0},
    };
    for (int i = 0; i < n_extra; i++)
        e[4 + i] = extra[i];
    zip_build(out, e, 4 + n_extra, zip64);
}

/* The legacy file of the tensors (storage keys 0 then 1, counts as given). */
static void legacy_of(buf *out, const tspec *t, int n, uint64_t count0, const char *endian)
{
    buf pk = {0};
    put(out, "\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19\x2e", 15);
    put(out, "\x80\x02\x4d\xe9\x03\x2e", 6);
    put(out, "\x80\x02}(X\x0d\0\0\0little_endian", 22);
    op(out, endian[0] == 'l' ? 0x88 : 0x89);
    put(out, "u.", 2);
    legacy = 1;
    pk_state(&pk, t, n);
    legacy = 0;
    put(out, pk.b, pk.n);
    put(out, "\x80\x02](X\x01\0\0\0" "0X\x01\0\0\0" "1e.", 18);
    le(out, count0, 8);
    put(out, f0, sizeof f0);
    le(out, 4, 8);
    put(out, b1, sizeof b1);
    free(pk.b);
}

/* The file of bytes b opens and holds good[] with its values. */
static void expect_good(const char *path)
{
    tr_st_file *f = NULL;
    int rc = tr_pt_open(path, &f);
    if (rc)
        print_error("%s\n", tr_errmsg());
    assert_int_equal(rc, TR_OK);
    assert_int_equal(tr_st_count(f), 5);
    assert_null(tr_st_meta(f, "format"));
    float v[6];
    const tr_st_tensor *t = tr_st_find(f, "a.weight");
    assert_non_null(t);
    assert_int_equal(t->ndim, 2);
    assert_int_equal(t->shape[1], 3);
    assert_int_equal(tr_st_read_f32(f, t, v), TR_OK);
    assert_memory_equal(v, f0, sizeof f0);
    assert_int_equal(tr_st_read_f32(f, tr_st_find(f, "tied"), v), TR_OK);
    assert_memory_equal(v, f0, sizeof f0);
    t = tr_st_find(f, "b");
    assert_int_equal(t->dtype, TR_ST_BF16);
    assert_int_equal(tr_st_read_f32(f, t, v), TR_OK);
    assert_true(v[0] == 1 && v[1] == 2 && v[2] == 3 && v[3] == -1);
    t = tr_st_find(f, "row");
    assert_int_equal(t->numel, 3);
    assert_int_equal(tr_st_read_f32(f, t, v), TR_OK);
    assert_true(v[0] == 3 && v[1] == 4 && v[2] == 5);
    t = tr_st_find(f, "s");
    assert_int_equal(t->ndim, 0);
    assert_int_equal(tr_st_read_f32(f, t, v), TR_OK);
    assert_true(v[0] == 5);
    for (size_t i = 1; i < tr_st_count(f); i++) /* file order */
        assert_true(tr_st_at(f, i - 1)->begin <= tr_st_at(f, i)->begin);
    tr_st_close(f);
}

static void test_reads(void **state)
{
    (void)state;
    char path[700];
    buf pk = {0}, z = {0}, z64 = {0}, lg = {0};
    pk_state(&pk, good, 5);
    zip_of(&z, &pk, NULL, 0, 0);
    path_of(path, sizeof path, "good.bin");
    write_bytes(path, z.b, z.n);
    expect_good(path);
    zip_of(&z64, &pk, NULL, 0, 1);
    path_of(path, sizeof path, "good64.bin");
    write_bytes(path, z64.b, z64.n);
    expect_good(path);
    legacy_of(&lg, good, 5, 6, "little");
    path_of(path, sizeof path, "legacy.bin");
    write_bytes(path, lg.b, lg.n);
    expect_good(path);

    /* a folder: pytorch_model.bin, then an index of two .bin shards */
    char sub[512];
    path_of(sub, sizeof sub, "folder");
    assert_int_equal(mkdir(sub, 0755), 0);
    snprintf(path, sizeof path, "%s/pytorch_model.bin", sub);
    write_bytes(path, z.b, z.n);
    tr_st_set *s = NULL;
    assert_int_equal(tr_st_set_open(sub, &s), TR_OK);
    assert_int_equal(tr_st_set_count(s), 5);
    tr_st_set_close(s);
    snprintf(path, sizeof path, "%s/pytorch_model-00002-of-00002.bin", sub);
    write_bytes(path, lg.b, lg.n);
    snprintf(path, sizeof path, "%s/pytorch_model.bin.index.json", sub);
    const char *idx = "{\"weight_map\": {\"a.weight\": \"pytorch_model.bin\", \"b\": "
                      "\"pytorch_model.bin\", \"tied\": \"pytorch_model.bin\", \"row\": "
                      "\"pytorch_model.bin\", \"s\": \"pytorch_model.bin\"}}";
    write_bytes(path, idx, strlen(idx));
    assert_int_equal(tr_st_set_open(sub, &s), TR_OK);
    assert_int_equal(tr_st_set_count(s), 5);
    tr_st_set_close(s);
    idx = "{\"weight_map\": {\"a.weight\": \"pytorch_model-00002-of-00002.bin\"}}";
    write_bytes(path, idx, strlen(idx));
    assert_int_equal(tr_st_set_open(sub, &s), TR_ERR_INVALID); /* the shard holds 5 */
    assert_non_null(strstr(tr_errmsg(), "pytorch_model.bin.index.json does not list"));
    /* model.safetensors comes first */
    snprintf(path, sizeof path, "%s/model.safetensors", sub);
    write_bytes(path, "\x02\0\0\0\0\0\0\0{}", 10);
    assert_int_equal(tr_st_set_open(sub, &s), TR_OK);
    assert_int_equal(tr_st_set_count(s), 0);
    tr_st_set_close(s);
    char empty[512];
    path_of(empty, sizeof empty, "empty");
    assert_int_equal(mkdir(empty, 0755), 0);
    assert_int_equal(tr_st_set_open(empty, &s), TR_ERR_INVALID);
    assert_non_null(strstr(tr_errmsg(), "holds no weights: none of model.safetensors.index.json, "
                                        "model.safetensors, pytorch_model.bin.index.json, "
                                        "pytorch_model.bin"));
    free(pk.b), free(z.b), free(z64.b), free(lg.b);
}

/* The object pool grows (moves) at powers of two: with 0 to 63 objects made and dropped first,
 * it moves at every point of a state dict's pickle once; the sanitizer build sees any pointer
 * into it kept across a move. Then 300 tensors of one storage. */
static void test_pool_moves(void **state)
{
    (void)state;
    enum { N = 300 };
    static tspec t[N];
    static char names[N][16];
    for (int i = 0; i < N; i++) {
        t[i] = good[i % 2 ? 0 : 3];
        snprintf(names[i], sizeof names[i], "t%d", i);
        t[i].name = names[i];
    }
    char path[512];
    path_of(path, sizeof path, "many.bin");
    for (int filler = 0; filler < 64; filler++) {
        buf pk = {0}, z = {0}, sd = {0};
        put(&pk, "\x80\x02", 2);
        for (int k = 0; k < filler; k++)
            put(&pk, "N0", 2);
        int n = filler == 63 ? N : 2;
        pk_state(&sd, t, n);
        put(&pk, sd.b + 2, sd.n - 2);
        zip_of(&z, &pk, NULL, 0, 0);
        write_bytes(path, z.b, z.n);
        tr_st_file *f = NULL;
        assert_int_equal(tr_pt_open(path, &f), TR_OK);
        assert_int_equal(tr_st_count(f), n);
        for (int i = 0; i < n; i++) {
            float v[6];
            const tr_st_tensor *x = tr_st_find(f, names[i]);
            assert_int_equal(x->dtype, TR_ST_F32);
            assert_int_equal(tr_st_read_f32(f, x, v), TR_OK);
            assert_true(v[0] == (i % 2 ? 0 : 3));
        }
        tr_st_close(f);
        free(pk.b), free(z.b), free(sd.b);
    }
}

/* A legacy file whose pickle passes 1 MiB, the first read of one: read again, whole (names of
 * 7 to 12 and of 3000 bytes: the first read ends between opcodes or inside an argument). */
static void test_legacy_long_pickle(void **state)
{
    (void)state;
    for (int round = 0; round < 7; round++) {
        int n = round == 6 ? 400 : 12000;
        size_t len = round == 6 ? 3000 : 7 + (size_t)round;
        tspec *t = calloc((size_t)n, sizeof *t);
        char *names = calloc((size_t)n, len + 1);
        for (int i = 0; i < n; i++) {
            t[i] = good[i % 2];
            char *name = names + (size_t)i * (len + 1);
            memset(name, 'x', len);
            snprintf(name + len - 6, 7, "%06u", (unsigned)i % 1000000u);
            t[i].name = name;
        }
        buf lg = {0};
        legacy_of(&lg, t, n, 6, "little");
        assert_true(lg.n > (1u << 20) + 1000);
        char path[512];
        path_of(path, sizeof path, "long.bin");
        write_bytes(path, lg.b, lg.n);
        tr_st_file *f = NULL;
        assert_int_equal(tr_pt_open(path, &f), TR_OK);
        assert_int_equal(tr_st_count(f), n);
        float v[6];
        assert_int_equal(tr_st_read_f32(f, tr_st_find(f, t[n - 1].name), v), TR_OK);
        assert_true(v[0] == 1 && v[3] == -1);
        tr_st_close(f);
        free(lg.b), free(t), free(names);
    }
}

/* path holds bytes b; tr_pt_open refuses it with cause in the message. */
static void expect_refused(const char *what, const void *b, size_t n, const char *cause)
{
    char path[512];
    path_of(path, sizeof path, "bad.bin");
    write_bytes(path, b, n);
    tr_st_file *f = NULL;
    int rc = tr_pt_open(path, &f);
    if (rc != TR_ERR_INVALID || !strstr(tr_errmsg(), cause) || !strstr(tr_errmsg(), path))
        print_error("%s: expected '%s'; got rc %d: %s\n", what, cause, rc,
                    rc ? tr_errmsg() : "(opened)");
    assert_int_equal(rc, TR_ERR_INVALID);
    assert_non_null(strstr(tr_errmsg(), cause));
    assert_null(f);
}

/* A ZIP of the pickle bytes p (storages 0 and 1) refused with cause. */
static void expect_pickle_refused(const char *what, const void *p, size_t n, const char *cause)
{
    buf pk = {0}, z = {0};
    put(&pk, p, n);
    zip_of(&z, &pk, NULL, 0, 0);
    expect_refused(what, z.b, z.n, cause);
    free(pk.b), free(z.b);
}

/* A ZIP of the state dict of t[0, n) refused with cause. */
static void expect_state_refused(const char *what, const tspec *t, int n, const char *cause)
{
    buf pk = {0};
    pk_state(&pk, t, n);
    expect_pickle_refused(what, pk.b, pk.n, cause);
    free(pk.b);
}

#define B(lit) lit, sizeof(lit) - 1

static void test_pickle_refusals(void **state)
{
    (void)state;
    static const struct {
        const char *what, *bytes;
        size_t n;
        const char *cause;
    } bad[] = {
        {"INST", B("\x80\x02i"), "data.pkl byte 2: opcode 0x69 (INST) is not read"},
        {"unknown opcode", B("\x80\x02\xff"), "opcode 0xff (unknown)"},
        {"os.system", B("\x80\x02" "cos\nsystem\nX\x02\0\0\0lsR."),
         "pickle calls GLOBAL 'os.system', which is not a tensor or a dict (only state dicts "
         "are read)"},
        {"builtins.eval by STACK_GLOBAL", B("\x80\x04\x8c\x08" "builtins\x8c\x04" "eval\x93."),
         "GLOBAL 'builtins.eval'"},
        {"memo get unset", B("\x80\x02h\x05."), "memo get of index 5, which is not set"},
        {"memo put out of order", B("\x80\x02Nq\x03."), "memo index 3 out of order"},
        {"stack underflow", B("\x80\x02" "0."), "stack underflow"},
        {"SETITEM on nothing", B("\x80\x02}s."), "stack underflow"},
        {"POP below a mark", B("\x80\x02N(0."), "POP pops 1 value(s) from a stack of 0 (stack "
                                                     "underflow)"},
        {"APPENDS below a mark", B("\x80\x02(]e."), "stack underflow"},
        {"truncated", B("\x80\x02X\x10\0\0\0ab"), "truncated"},
        {"no STOP", B("\x80\x02N"), "without STOP (truncated)"},
        {"protocol 6", B("\x80\x06N."), "pickle protocol 6"},
        {"a long integer", B("\x80\x02\x8a\x09" "123456789."), "an integer of 9 bytes"},
        {"two values left", B("\x80\x02NN."), "STOP leaves 2 values"},
        {"not a dict", B("\x80\x02]."), "holds a list, not a state dict"},
        {"a non-string key", B("\x80\x02}K\x01K\x02s."), "a key that is an int"},
        {"a non-tensor value", B("\x80\x02}X\x01\0\0\0kK\x02s."),
         "state dict entry 'k' is an int, not a tensor"},
        {"a key with a NUL", B("\x80\x02}X\x01\0\0\0\0K\x02s."), "not UTF-8 or holds a NUL"},
        {"BUILD of a list", B("\x80\x02]N" "b."), "BUILD of a list"},
        {"a call of a tuple", B("\x80\x02))R."), "REDUCE calls a tuple"},
        {"a storage called", B("\x80\x02" "ctorch\nFloatStorage\n)R."),
         "calls a storage class"},
        {"a foreign persistent id", B("\x80\x02X\x01\0\0\0x\x85Q."),
         "persistent id is not a tuple of 5"},
        {"a huge string", B("\x80\x02X\xff\xff\xff\x7f."), "a string of 2147483647 bytes"},
        {"a FRAME past the end", B("\x80\x04\x95\xff\0\0\0\0\0\0\0N."), "runs past the pickle"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_pickle_refused(bad[i].what, bad[i].bytes, bad[i].n, bad[i].cause);

    /* deep nesting: 65 open marks */
    char deep[80] = "\x80\x02";
    memset(deep + 2, '(', 65);
    deep[67] = '.';
    expect_pickle_refused("deep nesting", deep, 68, "more than 64 nested MARKs");
    /* a stack of 2^17 values */
    size_t n = 2 + (1u << 17) + 2;
    char *wide = malloc(n);
    memcpy(wide, "\x80\x02", 2);
    memset(wide + 2, 'N', n - 3);
    wide[n - 1] = '.';
    expect_pickle_refused("a wide stack", wide, n, "the stack passes 131072 values");
    free(wide);
    /* a truncated state dict: cut everywhere */
    buf pk = {0};
    pk_state(&pk, good, 2);
    for (size_t cut = 0; cut < pk.n; cut += 7)
        expect_pickle_refused("a state dict cut short", pk.b, cut, "data.pkl");
    free(pk.b);
}

static void test_tensor_refusals(void **state)
{
    (void)state;
    tspec t = good[0];
    t.stride[0] = 1, t.stride[1] = 2; /* the transpose's layout */
    expect_state_refused("non-contiguous", &t, 1, "tensor 'a.weight' is not contiguous (stride "
                         "2 of dimension 1, 1 for row-major order)");
    t = good[0];
    t.stride[0] = 4;
    expect_state_refused("padded rows", &t, 1, "stride 4 of dimension 0, 3 for row-major");
    t = good[0];
    t.offset = 1;
    expect_state_refused("past its storage", &t, 1, "tensor 'a.weight' (6 elements at 1) runs "
                         "past its storage '0' of 6");
    t = good[0];
    t.numel = 7;
    expect_state_refused("storage too small", &t, 1, "storage archive/data/0 holds 24 bytes, "
                         "fewer than its 7 elements of F32 need");
    t.numel = INT64_MAX;
    expect_state_refused("a huge storage", &t, 1, "fewer than its 9223372036854775807 elements");
    t = good[0];
    t.size[0] = t.size[1] = (int64_t)1 << 40;
    expect_state_refused("a size that overflows", &t, 1, "tensor 'a.weight': its size overflows");
    t = good[0];
    t.size[0] = -1;
    expect_state_refused("a negative size", &t, 1, "negative size or stride");
    t = good[0];
    t.offset = INT64_MAX;
    expect_state_refused("a huge offset", &t, 1, "runs past its storage");
    t = good[0];
    t.key = "7";
    expect_state_refused("a missing storage", &t, 1, "tensor 'a.weight': its storage "
                         "archive/data/7 is not in the archive");
    t = good[0];
    t.storage = "ComplexFloatStorage";
    expect_state_refused("a complex storage", &t, 1, "GLOBAL 'torch.ComplexFloatStorage'");
    tspec two[2] = {good[0], good[0]};
    expect_state_refused("a name twice", two, 2, "tensor 'a.weight' is given twice");
    t = good[0];
    t.ndim = 0;
    t.numel = 0;
    t.key = "0"; /* an empty storage is fine for an empty tensor, not for a scalar */
    expect_state_refused("a scalar of an empty storage", &t, 1, "runs past its storage");
}

static void test_zip_refusals(void **state)
{
    (void)state;
    buf pk = {0}, z = {0};
    pk_state(&pk, good, 5);
    zent deflated = {"archive/data/9", "x", 1, 8};
    zip_of(&z, &pk, &deflated, 1, 0);
    expect_refused("deflate", z.b, z.n, "ZIP entry 'archive/data/9' is compressed (method 8)");
    free(z.b), z = (buf){0};
    zent big = {"archive/byteorder", "big", 3, 0};
    zip_of(&z, &pk, &big, 1, 0);
    expect_refused("big-endian", z.b, z.n, "archive/byteorder is 'big': only little-endian");
    free(z.b), z = (buf){0};
    zent little = {"archive/byteorder", "little", 6, 0};
    zip_of(&z, &pk, &little, 1, 0);
    char path[512];
    path_of(path, sizeof path, "little.bin");
    write_bytes(path, z.b, z.n);
    expect_good(path);
    free(z.b), z = (buf){0};
    zent twice = {"archive/data/0", "x", 1, 0};
    zip_of(&z, &pk, &twice, 1, 0);
    expect_refused("a name twice", z.b, z.n, "ZIP entry 'archive/data/0' appears twice");
    free(z.b), z = (buf){0};
    zent nul = {"archive/da\0a", "x", 1, 0};
    zent e_nul[1] = {nul};
    e_nul[0].name = "archive/daXa";
    zip_of(&z, &pk, e_nul, 1, 0);
    size_t cd0 = (size_t)(z.b[z.n - 6] | z.b[z.n - 5] << 8);
    unsigned char *at = memmem(z.b + cd0, z.n - cd0, "archive/daXa", 12);
    assert_non_null(at);
    at[10] = 0; /* in the central directory's copy */
    expect_refused("a NUL in a name", z.b, z.n, "holds a NUL byte");
    free(z.b), z = (buf){0};

    /* the good archive, patched */
    zip_of(&z, &pk, NULL, 0, 0);
    size_t eocd = z.n - 22, cd = (size_t)(z.b[eocd + 16] | z.b[eocd + 17] << 8);
    unsigned char *b = malloc(z.n);
    static const struct {
        size_t at; /* 0: EOCD, 1: the first central entry, 2: the first local header */
        size_t off;
        uint32_t value;
        int bytes;
        const char *cause;
    } patch[] = {
        {1, 20, 0x7fffffff, 4, "is stored with 2147483647 bytes for"},
        {1, 42, 0x7fffffff, 4, "local header at 2147483647 is past the end of the file"},
        {1, 42, 3, 4, "no matching local header at 3"},
        {1, 0, 0, 4, "broken ZIP central directory entry"},
        {1, 28, 0xffff, 2, "runs past the directory"},
        {1, 8, 1, 2, "is encrypted"},
        {0, 8, 0xffffffff, 4, "no ZIP64 end of central directory locator"},
        {0, 8, 0x07d007d0, 4, "cannot hold 2000 entries"},
        {0, 8, 3, 2, "several disks"},
        {0, 16, 0x7ffffff0, 4, "runs past its end record"},
        {0, 12, 2, 4, "cannot hold 4 entries"},
        {0, 8, 0, 4, "an empty ZIP archive"},
        {0, 20, 1, 2, "no ZIP end of central directory record"},
        {2, 26, 300, 2, "no matching local header"},
    };
    for (size_t i = 0; i < sizeof patch / sizeof patch[0]; i++) {
        memcpy(b, z.b, z.n);
        size_t base = patch[i].at == 0 ? eocd : patch[i].at == 1 ? cd : 0;
        for (int k = 0; k < patch[i].bytes; k++)
            b[base + patch[i].off + (size_t)k] = (unsigned char)(patch[i].value >> (8 * k));
        expect_refused("patched", b, z.n, patch[i].cause);
    }
    memcpy(b, z.b, z.n); /* both sizes: the entry runs past the end */
    for (int k = 0; k < 8; k++)
        b[cd + 20 + (size_t)k] = k % 4 == 3 ? 0x7f : 0xff;
    expect_refused("an entry past the end", b, z.n, "ZIP entry 'archive/data.pkl' (2147483647 "
                   "bytes at 46) runs past the end of the file");
    /* ZIP64: a count that would overflow */
    free(z.b), z = (buf){0};
    zip_of(&z, &pk, NULL, 0, 1);
    memcpy(b = realloc(b, z.n), z.b, z.n);
    size_t rec = z.n - 22 - 20 - 56;
    for (int k = 0; k < 8; k++)
        b[rec + 24 + (size_t)k] = b[rec + 32 + (size_t)k] = 0xff;
    expect_refused("a ZIP64 count", b, z.n, "a ZIP archive of 18446744073709551615 entries");
    memcpy(b, z.b, z.n);
    for (int k = 0; k < 8; k++)
        b[rec + 40 + (size_t)k] = 0xff;
    expect_refused("a ZIP64 size", b, z.n, "runs past its end record");
    memcpy(b, z.b, z.n);
    for (int k = 0; k < 8; k++) /* 8 bytes later: the record would overlap the locator */
        b[z.n - 22 - 20 + 8 + (size_t)k] = (unsigned char)((rec + 8) >> (8 * k));
    expect_refused("a ZIP64 record out of place", b, z.n, "is out of place");
    free(b);
    /* no data.pkl, no folder, not a ZIP at all */
    free(z.b), z = (buf){0};
    zent only = {"archive/version", "3\n", 2, 0};
    zip_build(&z, &only, 1, 0);
    expect_refused("no data.pkl", z.b, z.n, "has no archive/data.pkl");
    free(z.b), z = (buf){0};
    zent flat = {"data.pkl", "x", 1, 0};
    zip_build(&z, &flat, 1, 0);
    expect_refused("no folder", z.b, z.n, "is not in a folder");
    expect_refused("PK", "PK", 2, "neither a ZIP archive");
    expect_refused("PK\\3\\4", "PK\3\4", 4, "too short for a ZIP archive");
    free(z.b), free(pk.b);
}

static void test_legacy_refusals(void **state)
{
    (void)state;
    buf lg = {0};
    legacy_of(&lg, good, 5, 6, "big");
    expect_refused("big-endian", lg.b, lg.n, "a legacy torch.save file of a big-endian machine");
    free(lg.b), lg = (buf){0};
    legacy_of(&lg, good, 5, 5, "little");
    expect_refused("a wrong count", lg.b, lg.n, "legacy storage '0' holds 5 elements; its "
                   "tensors say 6");
    free(lg.b), lg = (buf){0};
    tspec t[5];
    memcpy(t, good, sizeof t);
    t[0].numel = t[2].numel = t[3].numel = t[4].numel = (int64_t)1 << 61;
    legacy_of(&lg, t, 5, (uint64_t)1 << 61, "little");
    expect_refused("a huge count", lg.b, lg.n, "legacy storage '0' (2305843009213693952 "
                   "elements of F32) runs past the end of the file");
    free(lg.b), lg = (buf){0};
    legacy_of(&lg, good, 2, 6, "little");
    lg.n -= 4;
    expect_refused("cut short", lg.b, lg.n, "legacy storage '1' (4 elements of BF16) runs past");
    free(lg.b), lg = (buf){0};
    legacy_of(&lg, good, 1, 6, "little"); /* storage 1 is no tensor's */
    expect_refused("an unused storage", lg.b, lg.n, "legacy storage '1' belongs to no tensor");
    free(lg.b), lg = (buf){0};
    legacy_of(&lg, good, 5, 6, "little");
    unsigned char *k1 = memmem(lg.b, lg.n, "1e.", 3);
    assert_non_null(k1);
    k1[0] = '0'; /* the keys ['0', '0'] */
    expect_refused("a key twice", lg.b, lg.n, "legacy storage '0' is listed twice");
    k1[0] = '1';
    lg.b[18] = 0xea; /* protocol 1002 */
    expect_refused("protocol", lg.b, lg.n, "a protocol other than 1001");
    lg.b[18] = 0xe9;
    for (size_t cut = 21; cut < lg.n - 40; cut += 13)
        expect_refused("a legacy file cut short", lg.b, cut, "bad.bin");
    free(lg.b);
}

/* xorshift */
static uint64_t xs = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void)
{
    xs ^= xs << 13;
    xs ^= xs >> 7;
    xs ^= xs << 17;
    return xs;
}

static void fuzz(const buf *seed, int rounds)
{
    char path[512];
    path_of(path, sizeof path, "fuzz.bin");
    unsigned char *b = malloc(seed->n);
    for (int r = 0; r < rounds; r++) {
        memcpy(b, seed->b, seed->n);
        int flips = 1 + (int)(rnd() % 4);
        for (int k = 0; k < flips; k++)
            b[rnd() % seed->n] = (unsigned char)rnd();
        write_bytes(path, b, seed->n);
        tr_st_file *f = NULL;
        int rc = tr_pt_open(path, &f);
        if (rc) {
            assert_int_equal(rc, TR_ERR_INVALID);
            continue;
        }
        for (size_t i = 0; i < tr_st_count(f); i++) {
            const tr_st_tensor *t = tr_st_at(f, i);
            void *v = malloc(t->end - t->begin + 1);
            int rr = tr_st_read(f, t, v);
            assert_true(rr == TR_OK || rr == TR_ERR_INVALID);
            free(v);
        }
        tr_st_close(f);
    }
    free(b);
}

static void test_fuzz(void **state)
{
    (void)state;
    buf pk = {0}, z = {0}, lg = {0};
    pk_state(&pk, good, 5);
    zip_of(&z, &pk, NULL, 0, 0);
    fuzz(&z, 1500);
    free(z.b), z = (buf){0};
    zip_of(&z, &pk, NULL, 0, 1);
    fuzz(&z, 500);
    legacy_of(&lg, good, 5, 6, "little");
    fuzz(&lg, 1500);
    free(pk.b), free(z.b), free(lg.b);
}

static int rm_one(const char *p, const struct stat *s, int flag, struct FTW *w)
{
    (void)s, (void)flag, (void)w;
    return remove(p);
}

int main(void)
{
    snprintf(dir, sizeof dir, "%s/trident-pt-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reads),          cmocka_unit_test(test_pool_moves),
        cmocka_unit_test(test_pickle_refusals),
        cmocka_unit_test(test_tensor_refusals), cmocka_unit_test(test_zip_refusals),
        cmocka_unit_test(test_legacy_refusals), cmocka_unit_test(test_legacy_long_pickle),
        cmocka_unit_test(test_fuzz),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    if (nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS))
        fprintf(stderr, "could not remove %s\n", dir);
    return failed;
}
