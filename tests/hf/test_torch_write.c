/* hf/torch_write.c: a torch.save archive written and read back by trident's reader
 * (pt_objects_open): a dict holding an argparse.Namespace (ints small and past 32 bits, bools,
 * a float, a string, None, a torch dtype), a tuple, an F32 and a BF16 tensor (their bytes
 * exact, each entry 64-byte aligned), and again with TRIDENT_TEST_FORCE_ZIP64=1 (every ZIP64
 * record: the entries' extra fields, the end record and locator); ptw_open refuses an existing
 * file; ptw_close with an error removes the file. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "hf/pt_internal.h"
#include "hf/torch_write.h"

static char path[256];

static void write_file(void)
{
    ptw *w;
    unlink(path);
    assert_int_equal(ptw_open(path, &w), TR_OK);
    ptw_dict_begin(w);
    ptw_str(w, "args");
    ptw_namespace_begin(w);
    ptw_str(w, "num_layers"), ptw_int(w, 12);
    ptw_str(w, "negative"), ptw_int(w, -7);
    ptw_str(w, "big"), ptw_int(w, (int64_t)1 << 40);
    ptw_str(w, "swiglu"), ptw_bool(w, 1);
    ptw_str(w, "fp16"), ptw_bool(w, 0);
    ptw_str(w, "norm_epsilon"), ptw_float(w, 1e-5);
    ptw_str(w, "normalization"), ptw_str(w, "RMSNorm");
    ptw_str(w, "vp"), ptw_none(w);
    ptw_str(w, "params_dtype"), ptw_global(w, "torch", "float32");
    ptw_namespace_end(w);
    ptw_str(w, "pair");
    ptw_tuple_begin(w);
    ptw_int(w, 1), ptw_str(w, "two");
    ptw_tuple_end(w);
    ptw_str(w, "model");
    ptw_dict_begin(w);
    float f[6] = {1, -2, 3.5f, 0, 1e-30f, 7};
    uint16_t h[4] = {0x3f80, 0xc000, 0x0000, 0x7f80}; /* 1, -2, 0, inf */
    ptw_str(w, "a.weight");
    assert_int_equal(ptw_tensor(w, TR_ST_F32, 2, (uint64_t[]){2, 3}, f), TR_OK);
    ptw_str(w, "b.bias");
    assert_int_equal(ptw_tensor(w, TR_ST_BF16, 1, (uint64_t[]){4}, h), TR_OK);
    ptw_dict_end(w);
    ptw_dict_end(w);
    assert_int_equal(ptw_close(w, TR_OK), TR_OK);
}

/* The file write_file wrote, read back. */
static void check_file(void)
{
    pt_objects *o;
    assert_int_equal(pt_objects_open(path, &o), TR_OK);
    pt_pickle *p = pt_objects_pickle(o);
    uint32_t top = pt_pickle_top(p), args, v, model;
    assert_int_equal(pt_value_kind(p, top), PT_V_DICT);
    assert_true(pt_value_get(p, top, "args", &args));
    assert_int_equal(pt_value_kind(p, args), PT_V_NAMESPACE);
    int64_t i;
    int b;
    double d;
    assert_true(pt_value_get(p, args, "num_layers", &v) && pt_value_int(p, v, &i) && i == 12);
    assert_true(pt_value_get(p, args, "negative", &v) && pt_value_int(p, v, &i) && i == -7);
    assert_true(pt_value_get(p, args, "big", &v) && pt_value_int(p, v, &i) &&
                i == (int64_t)1 << 40);
    assert_true(pt_value_get(p, args, "swiglu", &v) && pt_value_bool(p, v, &b) && b == 1);
    assert_true(pt_value_get(p, args, "fp16", &v) && pt_value_bool(p, v, &b) && b == 0);
    assert_true(pt_value_get(p, args, "norm_epsilon", &v) && pt_value_number(p, v, &d) &&
                d == 1e-5);
    assert_true(pt_value_get(p, args, "normalization", &v));
    assert_string_equal(pt_value_str(p, v), "RMSNorm");
    assert_true(pt_value_get(p, args, "vp", &v) && pt_value_kind(p, v) == PT_V_NONE);
    assert_true(pt_value_get(p, args, "params_dtype", &v) && pt_value_kind(p, v) == PT_V_OPAQUE);
    assert_true(pt_value_get(p, top, "pair", &v) && pt_value_kind(p, v) == PT_V_TUPLE);
    assert_int_equal(pt_value_len(p, v), 2);
    assert_string_equal(pt_value_str(p, pt_value_item(p, v, 1)), "two");
    assert_true(pt_value_get(p, top, "model", &model));
    tr_st_file *f;
    assert_int_equal(pt_objects_state(o, model, &f), TR_OK);
    assert_int_equal(tr_st_count(f), 2);
    const tr_st_tensor *a = tr_st_find(f, "a.weight"), *bb = tr_st_find(f, "b.bias");
    assert_non_null(a);
    assert_non_null(bb);
    assert_int_equal(a->dtype, TR_ST_F32);
    assert_int_equal(a->ndim, 2);
    assert_int_equal(a->shape[0], 2);
    assert_int_equal(a->shape[1], 3);
    assert_int_equal(bb->dtype, TR_ST_BF16);
    assert_int_equal(a->begin % 64, 0); /* aligned as torch's writer aligns */
    assert_int_equal(bb->begin % 64, 0);
    float got[6], want[6] = {1, -2, 3.5f, 0, 1e-30f, 7}, hb[4];
    assert_int_equal(tr_st_read_f32(f, a, got), TR_OK);
    assert_memory_equal(got, want, sizeof want);
    assert_int_equal(tr_st_read_f32(f, bb, hb), TR_OK);
    assert_true(hb[0] == 1 && hb[1] == -2 && hb[2] == 0 && hb[3] > 1e38f);
    tr_st_close(f);
    pt_objects_close(o);
}

static void test_round_trip(void **state)
{
    (void)state;
    write_file();
    check_file();
}

static unsigned char file[1 << 16];
static size_t file_n;

static uint32_t le32(size_t i)
{
    return (uint32_t)(file[i] | file[i + 1] << 8 | file[i + 2] << 16 | (uint32_t)file[i + 3] << 24);
}

/* Occurrences of the 4-byte little-endian signature sig in the file. */
static int count_sig(uint32_t sig)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    file_n = fread(file, 1, sizeof file, f);
    fclose(f);
    int k = 0;
    for (size_t i = 0; i + 4 <= file_n; i++)
        k += le32(i) == sig;
    return k;
}

/* Every local header's sizes and every directory entry's sizes and offset all ones (ZIP64's
 * extra field holds them): the entries (count_sig read the file). */
static int all_fields_zip64(void)
{
    int k = 0;
    for (size_t i = 0; i + 46 <= file_n; i++)
        if (le32(i) == 0x04034b50u) {
            assert_true(le32(i + 18) == 0xffffffffu && le32(i + 22) == 0xffffffffu);
        } else if (le32(i) == 0x02014b50u) {
            assert_true(le32(i + 20) == 0xffffffffu && le32(i + 24) == 0xffffffffu &&
                        le32(i + 42) == 0xffffffffu);
            assert_int_equal(file[i + 30], 4 + 24); /* the extra field: 3 values */
            k++;
        }
    return k;
}

static void test_zip64(void **state)
{
    (void)state;
    write_file();
    assert_int_equal(count_sig(0x06064b50u), 0); /* small: no ZIP64 end record */
    setenv("TRIDENT_TEST_FORCE_ZIP64", "1", 1);
    write_file();
    unsetenv("TRIDENT_TEST_FORCE_ZIP64");
    assert_int_equal(count_sig(0x06064b50u), 1); /* the ZIP64 end record */
    assert_int_equal(count_sig(0x07064b50u), 1); /* its locator */
    assert_int_equal(all_fields_zip64(), 5); /* 2 tensors, data.pkl, version, byteorder */
    check_file(); /* the directory's sizes and offsets from the extra fields, aligned */
}

static void test_refusals(void **state)
{
    (void)state;
    write_file();
    ptw *w;
    assert_int_equal(ptw_open(path, &w), TR_ERR_IO); /* exists */
    assert_non_null(strstr(tr_errmsg(), path));
    unlink(path);
    assert_int_equal(ptw_open(path, &w), TR_OK);
    ptw_dict_begin(w);
    assert_int_equal(ptw_tensor(w, TR_ST_F16, 1, (uint64_t[]){1}, "\0\0"), TR_ERR_INTERNAL);
    assert_int_equal(ptw_close(w, TR_ERR_INVALID), TR_ERR_INVALID);
    struct stat st;
    assert_int_not_equal(stat(path, &st), 0); /* removed */
}

int main(void)
{
    snprintf(path, sizeof path, "/tmp/trident-torch-write-%d.pt", (int)getpid());
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_round_trip),
                                       cmocka_unit_test(test_zip64),
                                       cmocka_unit_test(test_refusals)};
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    unlink(path);
    return rc;
}
