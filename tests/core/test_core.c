/* core/: Philox known-answer, init layout-freedom, errors, JSON. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"

static void test_philox_known_answer(void **state)
{
    (void)state;
    /* Random123 known-answer vectors for philox4x32-10. */
    uint32_t ctr0[4] = {0, 0, 0, 0}, key0[2] = {0, 0}, out[4];
    tr_philox4x32_10(ctr0, key0, out);
    assert_int_equal(out[0], 0x6627e8d5u);
    assert_int_equal(out[1], 0xe169c58du);
    assert_int_equal(out[2], 0xbc57ac4cu);
    assert_int_equal(out[3], 0x9b00dbd8u);
    uint32_t ctr1[4] = {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu};
    uint32_t key1[2] = {0xffffffffu, 0xffffffffu};
    tr_philox4x32_10(ctr1, key1, out);
    assert_int_equal(out[0], 0x408f276du);
    assert_int_equal(out[1], 0x41c83b0eu);
    assert_int_equal(out[2], 0xa20bc7c6u);
    assert_int_equal(out[3], 0x6d5451fdu);
}

static void test_init_normal_statistics(void **state)
{
    (void)state;
    uint64_t h = tr_hash_name("layers.0.mlp.fc.weight");
    double sum = 0, sumsq = 0;
    const int n = 200000;
    for (int i = 0; i < n; i++) {
        float x = tr_init_normal(1234, h, (uint64_t)i);
        assert_true(isfinite(x));
        sum += x;
        sumsq += (double)x * x;
    }
    double mean = sum / n, var = sumsq / n - mean * mean;
    assert_true(fabs(mean) < 0.01);
    assert_true(fabs(var - 1.0) < 0.02);
    /* pure function: same inputs, same value; other name, other value */
    assert_true(tr_init_normal(1234, h, 77) == tr_init_normal(1234, h, 77));
    assert_true(tr_init_normal(1234, h, 77) != tr_init_normal(1234, h + 1, 77));
    assert_true(tr_init_normal(1234, h, 77) != tr_init_normal(1235, h, 77));
}

static void test_error_messages(void **state)
{
    (void)state;
    assert_int_equal(tr_fail(TR_ERR_IO, "cannot open %s", "x.bin"), TR_ERR_IO);
    assert_string_equal(tr_errmsg(), "cannot open x.bin");
    tr_fail_context(TR_ERR_IO, "loading %d", 3);
    assert_string_equal(tr_errmsg(), "loading 3: cannot open x.bin");
    size_t out;
    assert_int_equal(tr_mul_size(SIZE_MAX / 2, 3, &out), TR_ERR_INVALID);
    assert_int_equal(tr_mul_size(6, 7, &out), TR_OK);
    assert_int_equal(out, 42);
}

static void test_json_writer(void **state)
{
    (void)state;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    tr_json j;
    tr_json_begin(&j, f);
    tr_json_object_begin(&j, NULL);
    tr_json_int(&j, "iteration", 3);
    tr_json_double(&j, "loss", 2.5);
    tr_json_double(&j, "nan", NAN);
    tr_json_string(&j, "s", "a\"b");
    tr_json_array_begin(&j, "l");
    tr_json_int(&j, NULL, 1);
    tr_json_int(&j, NULL, 2);
    tr_json_array_end(&j);
    tr_json_object_end(&j);
    fclose(f);
    assert_string_equal(buf, "{\"iteration\":3,\"loss\":2.5,\"nan\":null,\"s\":\"a\\\"b\",\"l\":[1,2]}");
    free(buf);
}

/* JSON strings of any bytes are valid JSON: well-formed UTF-8 as it is, each ill-formed
 * subpart (Unicode's maximal subpart: a character cut short, a stray continuation byte, an
 * overlong form, a surrogate, past U+10FFFF) one \ufffd, as Python's errors="replace" decodes
 * (generate --json of tokens that end inside a character printed raw 0xeb 0xe0 before) */
static void test_json_utf8(void **state)
{
    (void)state;
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"caf\xc3\xa9 \xe4\xb8\xad \xf0\x9f\x98\x80", "\"caf\xc3\xa9 \xe4\xb8\xad \xf0\x9f\x98\x80\""},
        {"\xeb\xe0", "\"\\ufffd\\ufffd\""},              /* two leads, each cut short */
        {"a\xe4\xb8", "\"a\\ufffd\""},                   /* a 3-byte character's first 2 */
        {"\x80x", "\"\\ufffdx\""},                       /* a stray continuation byte */
        {"\xc0\xaf", "\"\\ufffd\\ufffd\""},              /* overlong '/' */
        {"\xed\xa0\x80", "\"\\ufffd\\ufffd\\ufffd\""},   /* a surrogate */
        {"\xf4\x90\x80\x80", "\"\\ufffd\\ufffd\\ufffd\\ufffd\""}, /* past U+10FFFF */
        {"\xf0\x9f\x98", "\"\\ufffd\""},                 /* a 4-byte character's first 3 */
        {"q\"\n\x01", "\"q\\\"\\n\\u0001\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        tr_json j;
        tr_json_begin(&j, f);
        tr_json_string(&j, NULL, cases[i].in);
        fclose(f);
        assert_string_equal(buf, cases[i].out);
        free(buf);
    }
    const unsigned char ok[] = "abcdefghij\xc3\xa9", cut[] = "abcdefghij\xc3";
    assert_int_equal(tr_utf8_valid_prefix(ok, sizeof ok - 1), sizeof ok - 1);
    assert_int_equal(tr_utf8_valid_prefix(cut, sizeof cut - 1), 10);
    assert_int_equal(tr_utf8_invalid_len((const unsigned char *)"\xe4\xb8", 2), 2);
    assert_int_equal(tr_utf8_invalid_len((const unsigned char *)"\xe4\xb8\xad", 3), 0);
}

/* tr_read_file: a whole file with a NUL after it, and each refusal with its message */
static void test_read_file(void **state)
{
    (void)state;
    char dir[] = "/tmp/trident-read-XXXXXX", path[64], *text = (char *)1;
    size_t n = 99;
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/f.txt", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("abc\ndef", f);
    fclose(f);
    assert_int_equal(tr_read_file(path, 7, "a test file", &text, &n), TR_OK);
    assert_int_equal(n, 7);
    assert_string_equal(text, "abc\ndef");
    free(text);
    assert_int_equal(tr_read_file(path, 6, "a test file", &text, &n), TR_ERR_INVALID);
    assert_null(text);
    assert_non_null(strstr(tr_errmsg(), "f.txt: 7 bytes, more than the 6 a test file may have"));
    assert_int_equal(tr_read_file(dir, 100, "a test file", &text, &n), TR_ERR_INVALID);
    assert_non_null(strstr(tr_errmsg(), "not a regular file"));
    assert_int_equal(unlink(path), 0);
    assert_int_equal(tr_read_file(path, 100, "a test file", &text, &n), TR_ERR_INVALID);
    assert_non_null(strstr(tr_errmsg(), "cannot open"));
    assert_null(text);
    assert_int_equal(rmdir(dir), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_philox_known_answer),
        cmocka_unit_test(test_init_normal_statistics),
        cmocka_unit_test(test_error_messages),
        cmocka_unit_test(test_json_writer),
        cmocka_unit_test(test_json_utf8),
        cmocka_unit_test(test_read_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
