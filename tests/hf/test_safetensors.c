/* hf/: safetensors reading and writing, and the GPT-2 layouts.
 *  - a written file reads back (every dtype, a scalar, an empty tensor, metadata), also as
 *    floats from F16 / BF16 / F64; the header is padded to 8 bytes;
 *  - the float formats: every F16 and BF16 value round-trips, ties round to even, subnormals,
 *    overflow to infinity, NaN;
 *  - every malformed case of the contract is refused (TR_ERR_INVALID, the file named, the
 *    cause said);
 *  - fuzz: random byte mutations of a valid file and random headers from a grammar either open
 *    (and then every tensor reads) or are refused with TR_ERR_INVALID: no crash, no leak (run
 *    under ASan/UBSan in the sanitizer build);
 *  - shards: the folder writer splits by size and writes the index, the set reader finds every
 *    tensor, and a broken index is refused;
 *  - GPT-2: the qkv permutation and the Conv1D transposes invert each other. */
#include <fcntl.h>
#include <math.h>
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

static void path_of(char *buf, size_t cap, const char *name)
{
    snprintf(buf, cap, "%s/%s", dir, name);
}

/* (a new file each time: rewriting one in place makes ext4 flush it at every close) */
static void write_bytes(const char *path, const void *data, size_t n)
{
    unlink(path);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

/* A file of header text h (length as given) and n_data data bytes (0, 1, 2, ...). */
static void write_st(const char *path, const char *h, uint64_t header_len, size_t n_data)
{
    size_t hl = strlen(h);
    unsigned char *buf = malloc(8 + hl + n_data + 1);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)(header_len >> (8 * i));
    memcpy(buf + 8, h, hl);
    for (size_t i = 0; i < n_data; i++)
        buf[8 + hl + i] = (unsigned char)i;
    write_bytes(path, buf, 8 + hl + n_data);
    free(buf);
}

static uint64_t xs = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void)
{
    xs ^= xs << 13;
    xs ^= xs >> 7;
    xs ^= xs << 17;
    return xs;
}

/* ------------------------------------------------------------------ round trip */

static void test_round_trip(void **state)
{
    (void)state;
    char path[512];
    path_of(path, sizeof path, "rt.safetensors");
    float a[6] = {1.5f, -2.25f, 3.0e-8f, 65504.0f, 0.0f, -0.0f};
    uint16_t h[6], b[6];
    double d[6];
    int64_t ints[3] = {-1, 1LL << 40, 7};
    for (int i = 0; i < 6; i++)
        h[i] = tr_f32_to_f16(a[i]), b[i] = tr_f32_to_bf16(a[i]), d[i] = a[i];
    float scalar = 42.0f;
    tr_st_tensor list[] = {
        {.name = "a.f32", .dtype = TR_ST_F32, .ndim = 2, .shape = {2, 3}},
        {.name = "a.f16", .dtype = TR_ST_F16, .ndim = 2, .shape = {3, 2}},
        {.name = "a.bf16", .dtype = TR_ST_BF16, .ndim = 1, .shape = {6}},
        {.name = "a.f64", .dtype = TR_ST_F64, .ndim = 3, .shape = {1, 6, 1}},
        {.name = "ints", .dtype = TR_ST_I64, .ndim = 1, .shape = {3}},
        {.name = "empty", .dtype = TR_ST_F32, .ndim = 2, .shape = {0, 5}},
        {.name = "scalar", .dtype = TR_ST_F32, .ndim = 0},
        {.name = "\xc3\xa9t\xc3\xa9 \"quoted\"", .dtype = TR_ST_U8, .ndim = 1, .shape = {3}},
    };
    const char *meta[] = {"format", "pt", "note", "h\xc3\xa9", NULL};
    tr_st_writer *w;
    assert_int_equal(tr_st_create(path, list, 8, meta, &w), TR_OK);
    assert_int_equal(tr_st_put_f32(w, a), TR_OK);
    assert_int_equal(tr_st_put(w, h), TR_OK);
    assert_int_equal(tr_st_put_f32(w, a), TR_OK); /* converted to BF16 */
    assert_int_equal(tr_st_put(w, d), TR_OK);
    assert_int_equal(tr_st_put(w, ints), TR_OK);
    assert_int_equal(tr_st_put(w, NULL), TR_OK);
    assert_int_equal(tr_st_put(w, &scalar), TR_OK);
    assert_int_equal(tr_st_put(w, "xyz"), TR_OK);
    assert_int_equal(tr_st_finish(w), TR_OK);

    tr_st_file *f;
    assert_int_equal(tr_st_open(path, &f), TR_OK);
    assert_int_equal(tr_st_count(f), 8);
    assert_string_equal(tr_st_meta(f, "format"), "pt");
    assert_string_equal(tr_st_meta(f, "note"), "h\xc3\xa9");
    assert_null(tr_st_meta(f, "absent"));
    assert_null(tr_st_find(f, "absent"));
    for (size_t i = 0; i < tr_st_count(f); i++) /* data order = the order written */
        assert_string_equal(tr_st_at(f, i)->name, list[i].name);
    float out[6];
    const tr_st_tensor *t = tr_st_find(f, "a.f32");
    assert_int_equal(t->ndim, 2);
    assert_int_equal(t->shape[1], 3);
    assert_int_equal(tr_st_read_f32(f, t, out), TR_OK);
    assert_memory_equal(out, a, sizeof a);
    assert_int_equal(tr_st_read_f32(f, tr_st_find(f, "a.f16"), out), TR_OK);
    for (int i = 0; i < 6; i++)
        assert_true(out[i] == tr_f16_to_f32(h[i]));
    assert_int_equal(tr_st_read_f32(f, tr_st_find(f, "a.bf16"), out), TR_OK);
    for (int i = 0; i < 6; i++)
        assert_true(out[i] == tr_bf16_to_f32(b[i]));
    assert_int_equal(tr_st_read_f32(f, tr_st_find(f, "a.f64"), out), TR_OK);
    assert_memory_equal(out, a, sizeof a);
    int64_t ints_back[3];
    t = tr_st_find(f, "ints");
    assert_int_equal(tr_st_read(f, t, ints_back), TR_OK);
    assert_memory_equal(ints_back, ints, sizeof ints);
    assert_int_equal(tr_st_read_f32(f, t, out), TR_ERR_INVALID); /* not floats */
    t = tr_st_find(f, "empty");
    assert_int_equal(t->numel, 0);
    assert_int_equal(tr_st_read_f32(f, t, out), TR_OK);
    t = tr_st_find(f, "scalar");
    assert_int_equal(t->ndim, 0);
    assert_int_equal(t->numel, 1);
    assert_int_equal(tr_st_read_f32(f, t, out), TR_OK);
    assert_true(out[0] == 42.0f);
    assert_non_null(tr_st_find(f, "\xc3\xa9t\xc3\xa9 \"quoted\""));
    tr_st_close(f);

    /* the header is padded to a multiple of 8 bytes */
    FILE *raw = fopen(path, "rb");
    unsigned char n8[8];
    assert_int_equal(fread(n8, 1, 8, raw), 8);
    fclose(raw);
    assert_int_equal(n8[0] % 8, 0);
}

static void test_writer_refusals(void **state)
{
    (void)state;
    char path[512];
    path_of(path, sizeof path, "w.safetensors");
    tr_st_writer *w = NULL;
    tr_st_tensor twice[] = {{.name = "x", .dtype = TR_ST_F32, .ndim = 1, .shape = {1}},
                            {.name = "x", .dtype = TR_ST_F32, .ndim = 1, .shape = {1}}};
    assert_int_equal(tr_st_create(path, twice, 2, NULL, &w), TR_ERR_INVALID);
    assert_null(w);
    tr_st_tensor reserved[] = {{.name = "__metadata__", .dtype = TR_ST_F32, .ndim = 0}};
    assert_int_equal(tr_st_create(path, reserved, 1, NULL, &w), TR_ERR_INVALID);
    tr_st_tensor huge[] = {{.name = "h", .dtype = TR_ST_F64, .ndim = 2,
                            .shape = {1ULL << 40, 1ULL << 40}}};
    assert_int_equal(tr_st_create(path, huge, 1, NULL, &w), TR_ERR_INVALID);
    tr_st_tensor one[] = {{.name = "i", .dtype = TR_ST_I32, .ndim = 1, .shape = {2}},
                          {.name = "j", .dtype = TR_ST_F32, .ndim = 1, .shape = {2}}};
    assert_int_equal(tr_st_create(path, one, 2, NULL, &w), TR_OK);
    float v[2] = {1, 2};
    assert_int_equal(tr_st_put_f32(w, v), TR_ERR_INVALID); /* I32 from floats */
    int32_t iv[2] = {1, 2};
    assert_int_equal(tr_st_put(w, iv), TR_OK);
    assert_int_equal(tr_st_finish(w), TR_ERR_INVALID); /* one tensor never put: removed */
    assert_int_equal(access(path, F_OK), -1);
    /* a finite float beyond BF16's (3.3895e38) or F16's (65504) largest was written as
     * infinity (an export with --dtype bf16 of finite weights gave inf without a word) */
    tr_st_tensor narrow[] = {{.name = "b", .dtype = TR_ST_BF16, .ndim = 1, .shape = {2}},
                             {.name = "h", .dtype = TR_ST_F16, .ndim = 1, .shape = {2}}};
    float big_b[2] = {1, 3.4e38f}, fine_b[2] = {-3.38e38f, 1}, big_h[2] = {70000.0f, 1};
    assert_int_equal(tr_st_create(path, narrow, 2, NULL, &w), TR_OK);
    assert_int_equal(tr_st_put_f32(w, big_b), TR_ERR_INVALID);
    assert_non_null(strstr(tr_errmsg(), "'b' holds 3.4e+38 at element 1, beyond BF16's range"));
    assert_int_equal(tr_st_put_f32(w, fine_b), TR_OK);
    assert_int_equal(tr_st_put_f32(w, big_h), TR_ERR_INVALID);
    assert_non_null(strstr(tr_errmsg(), "beyond F16's range"));
    tr_st_abort(w);
    assert_int_equal(access(path, F_OK), -1);
}

/* ------------------------------------------------------------------ float formats */

static void test_float_formats(void **state)
{
    (void)state;
    for (uint32_t v = 0; v < 65536; v++) { /* every value that is not NaN comes back */
        float x = tr_f16_to_f32((uint16_t)v), y = tr_bf16_to_f32((uint16_t)v);
        if (!isnan(x))
            assert_int_equal(tr_f32_to_f16(x), v);
        else
            assert_true(isnan(tr_f16_to_f32(tr_f32_to_f16(x))));
        if (!isnan(y))
            assert_int_equal(tr_f32_to_bf16(y), v);
    }
    /* ties to even, for both */
    assert_int_equal(tr_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);           /* tie, even below */
    assert_int_equal(tr_f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);       /* tie, even above */
    assert_int_equal(tr_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81); /* past the tie */
    assert_int_equal(tr_f32_to_f16(1.0f + 0x1p-11f), 0x3c00);
    assert_int_equal(tr_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);
    assert_int_equal(tr_f32_to_f16(0x1p-25f), 0x0000);     /* half the smallest subnormal */
    assert_int_equal(tr_f32_to_f16(0x1.8p-25f), 0x0001);   /* above it */
    assert_int_equal(tr_f32_to_f16(3 * 0x1p-25f), 0x0002); /* 1.5 subnormals: tie to even 2 */
    assert_int_equal(tr_f32_to_f16(0x1p-14f - 0x1p-26f), 0x0400); /* rounds up to the smallest normal */
    assert_int_equal(tr_f32_to_f16(65504.0f), 0x7bff);
    assert_int_equal(tr_f32_to_f16(65519.0f), 0x7bff);
    assert_int_equal(tr_f32_to_f16(65520.0f), 0x7c00); /* overflow: infinity */
    assert_int_equal(tr_f32_to_f16(-INFINITY), 0xfc00);
    assert_int_equal(tr_f32_to_bf16(3.4e38f), 0x7f80); /* rounds past the largest: infinity */
    assert_true(isnan(tr_bf16_to_f32(tr_f32_to_bf16(NAN))));
    assert_int_equal(tr_f32_to_f16(-0.0f), 0x8000);
}

/* ------------------------------------------------------------------ malformed files */

/* path refused: TR_ERR_INVALID, its message naming the file and saying `cause`. */
static void expect_refused(const char *path, const char *cause)
{
    tr_st_file *f = NULL;
    int rc = tr_st_open(path, &f);
    if (rc != TR_ERR_INVALID || !strstr(tr_errmsg(), path) || !strstr(tr_errmsg(), cause))
        print_error("expected '%s'; got rc %d: %s\n", cause, rc, tr_errmsg());
    assert_int_equal(rc, TR_ERR_INVALID);
    assert_null(f);
    assert_non_null(strstr(tr_errmsg(), path));
    assert_non_null(strstr(tr_errmsg(), cause));
}

#define E(dtype, shape, b, e) "{\"dtype\":\"" dtype "\",\"shape\":" shape ",\"data_offsets\":[" #b "," #e "]}"

static void test_malformed(void **state)
{
    (void)state;
    static const struct {
        const char *header; /* NULL: special below */
        size_t n_data;
        const char *cause;
    } cases[] = {
        {"{\"a\":" E("F32", "[2]", 0, 8) "}", 4, "run past the end of the data"},
        {"{\"a\":" E("F32", "[2]", 0, 8) "}", 12, "last 4 bytes of the data belong to no tensor"},
        {"{\"a\":" E("F32", "[3]", 0, 8) "}", 8, "data_offsets hold 8 bytes"},
        {"{\"a\":" E("F32", "[2]", 0, 8) ",\"b\":" E("F32", "[2]", 4, 12) "}", 12, "overlap"},
        {"{\"a\":" E("F32", "[1]", 0, 4) ",\"b\":" E("F32", "[1]", 8, 12) "}", 12,
         "bytes [4, 8) of the data belong to no tensor"},
        {"{\"a\":" E("F32", "[2]", 0, 8) ",\"a\":" E("F32", "[2]", 0, 8) "}", 8, "a name appears twice"},
        {"{\"a\":" E("F33", "[2]", 0, 8) "}", 8, "unknown dtype 'F33'"},
        {"{\"a\":{\"dtype\":3,\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "unknown dtype"},
        {"{\"a\":" E("F32", "[-2]", 0, 8) "}", 8, "shape[0] is not an integer"},
        {"{\"a\":" E("F32", "[2.0]", 0, 8) "}", 8, "shape[0] is not an integer"},
        {"{\"a\":" E("F32", "[9007199254740993]", 0, 8) "}", 8, "shape[0] is not an integer"},
        {"{\"a\":" E("F32", "[1,1,1,1,1,1,1,1,2]", 0, 8) "}", 8, "at most 8 sizes"},
        {"{\"a\":" E("F32", "2", 0, 8) "}", 8, "shape must be an array"},
        {"{\"a\":" E("F32", "[4294967296,4294967296,4294967296]", 0, 8) "}", 8, "overflows"},
        {"{\"a\":" E("F32", "[2]", 8, 0) "}", 8, "end before they begin"},
        {"{\"a\":" E("F32", "[2]", -8, 0) "}", 8, "data_offsets must be two integers"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8, "data_offsets must be two"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "exactly the keys"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", 8, "exactly the keys"},
        {"{\"a\":[1,2]}", 8, "is not an object"},
        {"{\"__metadata__\":[1]}", 0, "__metadata__ is not an object"},
        {"{\"__metadata__\":{\"k\":1}}", 0, "is not a string"},
        {"{\"a\":" E("F32", "[2]", 0, 8) "", 8, "not valid JSON"},
        {"{\"a\":" E("F32", "[2]", 0, 8) "}xyz", 8, "not valid JSON"},
        {"{\"a\\u0000b\":" E("F32", "[2]", 0, 8) "}", 8, "not valid JSON"},
        {"[1,2]", 0, "does not start with '{'"},
        {"", 0, "does not start with '{'"},
        {"{\"\xff\":" E("F32", "[2]", 0, 8) "}", 8, "not UTF-8 (byte 2 of it)"},
        {"{\"\xc0\xaf\":" E("F32", "[2]", 0, 8) "}", 8, "not UTF-8"},        /* overlong '/' */
        {"{\"\xed\xa0\x80\":" E("F32", "[2]", 0, 8) "}", 8, "not UTF-8"},    /* a surrogate */
        {"{\"\xf4\x90\x80\x80\":" E("F32", "[2]", 0, 8) "}", 8, "not UTF-8"}, /* past U+10FFFF */
        {"{\"a\":" E("F32", "[2]", 0, 8) "}   \n", 8, ""}, /* trailing whitespace: opens */
    };
    char path[512];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(path, sizeof path, "%s/bad%02zu.safetensors", dir, i);
        write_st(path, cases[i].header, strlen(cases[i].header), cases[i].n_data);
        if (i == sizeof cases / sizeof cases[0] - 1) { /* trailing JSON whitespace is fine */
            tr_st_file *f;
            assert_int_equal(tr_st_open(path, &f), TR_OK);
            tr_st_close(f);
            continue;
        }
        expect_refused(path, cases[i].cause);
    }
    /* the length prefix and the file itself */
    path_of(path, sizeof path, "short.safetensors");
    write_bytes(path, "\x10\0\0", 3);
    expect_refused(path, "shorter than the 8-byte header length");
    write_bytes(path, "", 0);
    expect_refused(path, "0 bytes, shorter than");
    write_st(path, "{}", 200, 0);
    expect_refused(path, "the header length 200 runs past the end of the file (10 bytes)");
    write_st(path, "{}", UINT64_MAX, 0);
    expect_refused(path, "over the limit");
    /* a real 100 MB header (a sparse file): refused by its length, nothing read */
    write_st(path, "{", (uint64_t)TR_ST_MAX_HEADER + 1, 0);
    assert_int_equal(truncate(path, 8 + (off_t)TR_ST_MAX_HEADER + 1), 0);
    expect_refused(path, "a header of 100000001 bytes is over the limit of 100000000");
    assert_int_equal(truncate(path, 0), 0);
    expect_refused(path, "0 bytes");
    expect_refused(dir, "not a regular file");
    tr_st_file *f;
    path_of(path, sizeof path, "absent.safetensors");
    assert_int_equal(tr_st_open(path, &f), TR_ERR_INVALID);
    assert_non_null(strstr(tr_errmsg(), "No such file"));
}

/* ------------------------------------------------------------------ fuzz */

/* Open path: TR_OK (then every tensor reads) or TR_ERR_INVALID with a message; 1 if opened. */
static int open_any(const char *path, float *scratch, size_t cap)
{
    tr_st_file *f = NULL;
    int rc = tr_st_open(path, &f);
    if (rc) {
        if (rc != TR_ERR_INVALID)
            print_error("rc %d: %s\n", rc, tr_errmsg());
        assert_int_equal(rc, TR_ERR_INVALID);
        assert_non_null(strstr(tr_errmsg(), path));
        return 0;
    }
    for (size_t i = 0; i < tr_st_count(f); i++) {
        const tr_st_tensor *t = tr_st_at(f, i);
        assert_true(t->end <= cap * sizeof(float));
        assert_int_equal(tr_st_read(f, t, scratch), TR_OK);
        if (t->dtype == TR_ST_F32 || t->dtype == TR_ST_F16 || t->dtype == TR_ST_BF16 ||
            t->dtype == TR_ST_F64)
            assert_int_equal(tr_st_read_f32(f, t, scratch), TR_OK);
        assert_true(tr_st_find(f, t->name) == t);
    }
    tr_st_close(f);
    return 1;
}

static void test_fuzz_bytes(void **state)
{
    (void)state;
    char path[512], seed_path[512];
    path_of(seed_path, sizeof seed_path, "seed.safetensors");
    path_of(path, sizeof path, "fuzz.safetensors");
    tr_st_tensor list[] = {
        {.name = "w", .dtype = TR_ST_F32, .ndim = 2, .shape = {3, 4}},
        {.name = "h", .dtype = TR_ST_F16, .ndim = 1, .shape = {5}},
        {.name = "b", .dtype = TR_ST_BF16, .ndim = 1, .shape = {4}},
        {.name = "d", .dtype = TR_ST_F64, .ndim = 1, .shape = {2}},
    };
    const char *meta[] = {"format", "pt", NULL};
    unsigned char data[128] = {0};
    tr_st_writer *w;
    assert_int_equal(tr_st_create(seed_path, list, 4, meta, &w), TR_OK);
    for (int i = 0; i < 4; i++)
        assert_int_equal(tr_st_put(w, data), TR_OK);
    assert_int_equal(tr_st_finish(w), TR_OK);
    FILE *sf = fopen(seed_path, "rb");
    unsigned char seed[4096];
    size_t n_seed = fread(seed, 1, sizeof seed, sf);
    fclose(sf);
    float *scratch = malloc(1 << 16);
    int opened = 0, rounds = 6000;
    unsigned char buf[4200];
    for (int r = 0; r < rounds; r++) {
        size_t n = n_seed;
        memcpy(buf, seed, n);
        int edits = 1 + (int)(rnd() % 4);
        for (int e = 0; e < edits; e++) {
            size_t at = (size_t)(rnd() % n);
            switch (rnd() % 6) {
            case 0: buf[at] ^= (unsigned char)(1u << (rnd() % 8)); break;  /* flip a bit */
            case 1: buf[at] = (unsigned char)rnd(); break;                  /* a random byte */
            case 2: buf[at] = "{}[]\",:0123456789-.eE \\u"[rnd() % 25]; break; /* a JSON byte */
            case 3: n = at; break;                                          /* cut */
            case 4: buf[rnd() % 8] = (unsigned char)rnd(); break;           /* the length */
            case 5: if (n < sizeof buf - 1) { memmove(buf + at + 1, buf + at, n - at); n++; } break;
            }
            if (n == 0)
                break;
        }
        write_bytes(path, buf, n);
        opened += open_any(path, scratch, (1 << 16) / sizeof(float));
    }
    free(scratch);
    print_message("byte fuzz: %d of %d mutants opened (the rest refused)\n", opened, rounds);
    assert_true(opened > 0 && opened < rounds);
}

/* A random header from the format's grammar: names, dtypes, shapes and offsets mostly right,
 * sometimes not. */
static size_t random_header(char *h, size_t cap, size_t *n_data)
{
    static const char *const dts[] = {"F32", "F16", "BF16", "F64", "I64", "U8", "BOOL", "F8_E4M3", "X"};
    size_t o = 0;
    uint64_t at = 0;
    int n = (int)(rnd() % 5);
    o += (size_t)snprintf(h + o, cap - o, "{");
    if (rnd() % 3 == 0)
        o += (size_t)snprintf(h + o, cap - o, "\"__metadata__\":{\"format\":\"pt\"}%s", n ? "," : "");
    for (int i = 0; i < n; i++) {
        int d = (int)(rnd() % 9), nd = (int)(rnd() % 4);
        size_t es = d == 0 ? 4 : d == 3 || d == 4 ? 8 : d == 1 || d == 2 ? 2 : 1;
        uint64_t numel = 1;
        char shape[128] = "[";
        size_t so = 1;
        for (int k = 0; k < nd; k++) {
            uint64_t dim = rnd() % 4;
            numel *= dim;
            so += (size_t)snprintf(shape + so, sizeof shape - so, "%s%llu", k ? "," : "",
                                   (unsigned long long)dim);
        }
        snprintf(shape + so, sizeof shape - so, "]");
        uint64_t b = at, e = at + numel * es;
        if (rnd() % 8 == 0)
            b += rnd() % 3, e += rnd() % 3; /* off by a little */
        if (rnd() % 16 == 0)
            e = rnd() % 64;
        at = e;
        o += (size_t)snprintf(h + o, cap - o, "%s\"t%d\":{\"dtype\":\"%s\",\"shape\":%s,\"data_offsets\":[%llu,%llu]}",
                              i ? "," : "", (int)(rnd() % 4), dts[d], shape,
                              (unsigned long long)b, (unsigned long long)e);
    }
    o += (size_t)snprintf(h + o, cap - o, "}");
    *n_data = (size_t)at + (rnd() % 8 == 0 ? rnd() % 3 : 0);
    return o;
}

static void test_fuzz_headers(void **state)
{
    (void)state;
    char path[512], h[4096];
    path_of(path, sizeof path, "gram.safetensors");
    float *scratch = malloc(1 << 16);
    int opened = 0, rounds = 4000;
    for (int r = 0; r < rounds; r++) {
        size_t n_data;
        random_header(h, sizeof h, &n_data);
        if (n_data > 4096)
            n_data = 4096;
        write_st(path, h, strlen(h), n_data);
        opened += open_any(path, scratch, (1 << 16) / sizeof(float));
    }
    free(scratch);
    print_message("grammar fuzz: %d of %d headers opened (the rest refused)\n", opened, rounds);
    assert_true(opened > rounds / 10 && opened < rounds);
}

/* ------------------------------------------------------------------ shards */

static void test_shards(void **state)
{
    (void)state;
    char sub[512], path[600];
    path_of(sub, sizeof sub, "sharded");
    assert_int_equal(mkdir(sub, 0755), 0);
    tr_st_tensor list[5];
    float v[64];
    for (int i = 0; i < 64; i++)
        v[i] = (float)i;
    char names[5][16];
    for (int i = 0; i < 5; i++) {
        snprintf(names[i], sizeof names[i], "t%d", i);
        list[i] = (tr_st_tensor){.name = names[i], .dtype = TR_ST_F32, .ndim = 1, .shape = {16}};
    }
    tr_st_writer *w;
    /* 64 bytes each, shards of at most 150: [t0 t1] [t2 t3] [t4] */
    assert_int_equal(tr_st_create_sharded(sub, list, 5, NULL, 150, &w), TR_OK);
    for (int i = 0; i < 5; i++)
        assert_int_equal(tr_st_put_f32(w, v + i), TR_OK);
    assert_int_equal(tr_st_finish(w), TR_OK);
    snprintf(path, sizeof path, "%s/model-00003-of-00003.safetensors", sub);
    assert_int_equal(access(path, F_OK), 0);
    tr_st_set *s;
    assert_int_equal(tr_st_set_open(sub, &s), TR_OK);
    assert_int_equal(tr_st_set_count(s), 5);
    for (int i = 0; i < 5; i++) {
        tr_st_file *f;
        const tr_st_tensor *t = tr_st_set_find(s, names[i], &f);
        assert_non_null(t);
        float back[16];
        assert_int_equal(tr_st_read_f32(f, t, back), TR_OK);
        assert_memory_equal(back, v + i, sizeof back);
        assert_non_null(strstr(tr_st_path(f), i < 2 ? "00001" : i < 4 ? "00002" : "00003"));
    }
    tr_st_set_close(s);

    /* broken indexes */
    static const struct {
        const char *index, *cause;
    } bad[] = {
        {"{\"weight_map\":{\"t0\":\"model-00001-of-00003.safetensors\"}}", "does not list"},
        {"{\"weight_map\":{\"t0\":\"../x\"}}", "is not a file name in the folder"},
        {"{\"weight_map\":{\"t0\":\"model-00001-of-00003.safetensors\",\"t1\":\"model-00001-of-00003.safetensors\",\"zz\":\"model-00001-of-00003.safetensors\"}}", "lists tensor 'zz'"},
        {"{\"weight_map\":{\"t0\":\"model-00001-of-00003.safetensors\",\"t1\":\"model-00002-of-00003.safetensors\"}}", "places in"},
        {"{\"weight_map\":{\"t9\":\"absent.safetensors\"}}", "No such file"},
        {"{\"weight_map\":[]}", "no \"weight_map\" object"},
        {"{\"weight_map\":{}, \"weight_map\":{}}", "a key appears twice"},
        {"{", "model.safetensors.index.json:1:"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", sub);
        write_bytes(path, bad[i].index, strlen(bad[i].index));
        s = NULL;
        int rc = tr_st_set_open(sub, &s);
        if (rc != TR_ERR_INVALID || !strstr(tr_errmsg(), bad[i].cause))
            print_error("index %zu: expected '%s'; got rc %d: %s\n", i, bad[i].cause, rc, tr_errmsg());
        assert_int_equal(rc, TR_ERR_INVALID);
        assert_null(s);
    }
    char empty[512];
    path_of(empty, sizeof empty, "nothing");
    assert_int_equal(mkdir(empty, 0755), 0);
    assert_int_equal(tr_st_set_open(empty, &s), TR_ERR_INVALID);
    assert_non_null(strstr(tr_errmsg(), "holds no weights: none of model.safetensors"));
}

/* ------------------------------------------------------------------ GPT-2 layouts */

static void test_gpt2_layouts(void **state)
{
    (void)state;
    enum { C = 8, NH = 2, HS = C / NH };
    tr_param_tensor qkv = {.name = "layers.0.qkv.weight", .full_rows = 3 * C, .full_cols = C};
    tr_param_tensor qkvb = {.name = "layers.0.qkv.bias", .full_rows = 3 * C, .full_cols = 1};
    tr_param_tensor fc = {.name = "layers.0.fc.weight", .full_rows = 4 * C, .full_cols = C};
    tr_hf_tensor_map m;
    assert_int_equal(tr_hf_gpt2_map(&qkv, 50, &m), TR_OK);
    assert_string_equal(m.name, "transformer.h.0.attn.c_attn.weight");
    assert_int_equal(m.shape[0], C);
    assert_int_equal(m.shape[1], 3 * C);
    float hf[3 * C * C], tr[3 * C * C], back[3 * C * C];
    for (int i = 0; i < 3 * C * C; i++)
        hf[i] = (float)i;
    assert_int_equal(tr_hf_to_trident(&m, &qkv, NH, hf, tr), TR_OK);
    /* trident row (h, p, d), column c = HF [c][p*C + h*HS + d] */
    for (int h = 0; h < NH; h++)
        for (int p = 0; p < 3; p++)
            for (int d = 0; d < HS; d++)
                for (int c = 0; c < C; c++)
                    assert_true(tr[(h * 3 * HS + p * HS + d) * C + c] == hf[c * 3 * C + p * C + h * HS + d]);
    assert_int_equal(tr_hf_from_trident(&m, &qkv, NH, tr, back), TR_OK);
    assert_memory_equal(back, hf, sizeof hf);
    assert_int_equal(tr_hf_gpt2_map(&qkvb, 50, &m), TR_OK);
    assert_int_equal(m.ndim, 1);
    assert_int_equal(tr_hf_to_trident(&m, &qkvb, NH, hf, tr), TR_OK);
    assert_true(tr[1 * 3 * HS + 2 * HS + 3] == hf[2 * C + 1 * HS + 3]); /* head 1, v, d 3 */
    assert_int_equal(tr_hf_from_trident(&m, &qkvb, NH, tr, back), TR_OK);
    assert_memory_equal(back, hf, 3 * C * sizeof(float));
    assert_int_equal(tr_hf_gpt2_map(&fc, 50, &m), TR_OK);
    assert_string_equal(m.name, "transformer.h.0.mlp.c_fc.weight");
    assert_int_equal(m.shape[0], C); /* Conv1D: [in, out] */
    assert_int_equal(m.shape[1], 4 * C);
    float hf4[4 * C * C], tr4[4 * C * C], back4[4 * C * C];
    for (int i = 0; i < 4 * C * C; i++)
        hf4[i] = (float)i;
    assert_int_equal(tr_hf_to_trident(&m, &fc, NH, hf4, tr4), TR_OK);
    assert_true(tr4[5 * C + 3] == hf4[3 * 4 * C + 5]);
    assert_int_equal(tr_hf_from_trident(&m, &fc, NH, tr4, back4), TR_OK);
    assert_memory_equal(back4, hf4, sizeof hf4);
    tr_param_tensor wte = {.name = "wte", .full_rows = 64, .full_cols = C, .word_embedding = 1,
                           .vocab_rows = 1};
    assert_int_equal(tr_hf_gpt2_map(&wte, 50, &m), TR_OK);
    assert_string_equal(m.name, "transformer.wte.weight");
    assert_int_equal(m.shape[0], 50); /* the real vocabulary */
}

static int remove_all(void)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd);
}

int main(void)
{
    snprintf(dir, sizeof dir, "%s/trident-hf-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),    cmocka_unit_test(test_writer_refusals),
        cmocka_unit_test(test_float_formats), cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_fuzz_bytes),    cmocka_unit_test(test_fuzz_headers),
        cmocka_unit_test(test_shards),        cmocka_unit_test(test_gpt2_layouts),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    if (remove_all())
        fprintf(stderr, "could not remove %s\n", dir);
    return failed;
}
