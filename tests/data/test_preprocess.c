/* tr_preprocess_text: documents from blank lines, '%' lines, NUL bytes, files without a
 * trailing newline, empty files, whole-file documents; the output reads back through
 * tr_data_open; failures leave no partial output. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdint.h>

#include "data_test_util.h"

/* The documents of PREFIX as byte strings (EOD stripped) joined by '|', checking that
 * every document ends with exactly one EOD and holds no other 0. */
static char *documents_of(const char *prefix, uint64_t *n_docs)
{
    char path[512];
    snprintf(path, sizeof path, "%s.idx", prefix);
    size_t idx_n, bin_n;
    unsigned char *idx = read_bytes(path, &idx_n);
    snprintf(path, sizeof path, "%s.bin", prefix);
    unsigned char *bin = read_bytes(path, &bin_n);
    uint64_t n;
    memcpy(&n, idx + 18, 8);
    assert_int_equal(idx[17], 8); /* uint16 */
    assert_int_equal(idx_n, 34 + 20 * n + 8);
    const uint16_t *tok = (const uint16_t *)(const void *)bin;
    char *out = calloc(bin_n + 2, 1);
    assert_non_null(out);
    size_t pos = 0, at = 0;
    for (uint64_t d = 0; d < n; d++) {
        int32_t size;
        memcpy(&size, idx + 34 + 4 * d, 4);
        assert_true(size >= 1);
        for (int32_t i = 0; i + 1 < size; i++) {
            assert_true(tok[at + (size_t)i] > 0 && tok[at + (size_t)i] < 256);
            out[pos++] = (char)tok[at + (size_t)i];
        }
        assert_int_equal(tok[at + (size_t)size - 1], TR_EOD_TOKEN);
        at += (size_t)size;
        if (d + 1 < n)
            out[pos++] = '|';
    }
    assert_int_equal(at * 2, bin_n);
    free(idx);
    free(bin);
    *n_docs = n;
    return out;
}

static void run_preprocess(const char *const *inputs, int n, int blank_lines, const char *want,
                           uint64_t want_docs)
{
    uint64_t docs = 99, tokens = 99;
    int rc = tr_preprocess_text(inputs, n, scratch("pp"), blank_lines, &docs, &tokens);
    if (rc)
        print_error("preprocess: %s\n", tr_errmsg());
    assert_int_equal(rc, TR_OK);
    uint64_t n_docs;
    char *got = documents_of(scratch("pp"), &n_docs);
    if (strcmp(got, want))
        print_error("documents: \"%s\"\nwant:      \"%s\"\n", got, want);
    assert_string_equal(got, want);
    assert_int_equal(n_docs, want_docs);
    assert_int_equal(docs, want_docs);
    /* tokens = bytes kept + one EOD per document; every one of them readable as data */
    assert_int_equal(tokens, strlen(want) - (want_docs ? want_docs - 1 : 0) + want_docs);
    free(got);
    tr_data *d = open_expect(scratch("pp"), "auto", "1,0,0", 1, TR_BYTE_VOCAB, TR_OK, NULL);
    assert_int_equal(tr_data_num_documents(d), want_docs);
    assert_int_equal(tr_data_num_tokens(d), tokens);
    tr_data_close(d);
    assert_int_equal(access(scratch("pp.bin.tmp"), F_OK), -1);
    assert_int_equal(access(scratch("pp.idx.tmp"), F_OK), -1);
}

static void text_file(const char *name, const char *bytes, size_t n)
{
    write_bytes(scratch(name), bytes, n);
}
#define TEXT(name, literal) text_file(name, literal, sizeof literal - 1)

static void test_blank_line_documents(void **state)
{
    (void)state;
    TEXT("a.txt", "hello\nworld\n\nsecond doc\n\n\n\nthird\n");
    const char *in[] = {scratch("a.txt")};
    run_preprocess(in, 1, 1, "hello\nworld\n|second doc\n|third\n", 3);
    /* leading separators, whitespace-only lines, CRLF line endings */
    TEXT("b.txt", "\n \t\nx\r\n\r\ny\r\n  \n");
    const char *in_b[] = {scratch("b.txt")};
    run_preprocess(in_b, 1, 1, "x\r\n|y\r\n", 2);
}

static void test_percent_separators(void **state)
{
    (void)state;
    /* fortune(6) style; "%%" and "% " are text, a line of just "%" separates */
    TEXT("f", "one\n%\ntwo\nlines\n%\n%%\n% \n%\n%\n");
    const char *in[] = {scratch("f")};
    run_preprocess(in, 1, 1, "one\n|two\nlines\n|%%\n% \n", 3);
}

static void test_nul_bytes_and_file_ends(void **state)
{
    (void)state;
    /* NULs vanish; a line of only NULs is blank; the last line has no newline */
    text_file("n.txt", "a\0b\n\0\n\0c", 8);
    const char *in[] = {scratch("n.txt")};
    run_preprocess(in, 1, 1, "ab\n|c", 2);
    /* documents never span files; an empty file adds nothing; order is kept */
    TEXT("no_newline.txt", "tail without newline");
    TEXT("empty.txt", "");
    TEXT("more.txt", "first of more\n\nsecond of more\n");
    const char *in2[] = {scratch("no_newline.txt"), scratch("empty.txt"), scratch("more.txt"),
                         scratch("no_newline.txt")};
    run_preprocess(in2, 4, 1,
                   "tail without newline|first of more\n|second of more\n|tail without "
                   "newline",
                   4);
    /* only empty input: a valid, empty dataset */
    const char *in3[] = {scratch("empty.txt")};
    run_preprocess(in3, 1, 1, "", 0);
}

static void test_document_per_file(void **state)
{
    (void)state;
    TEXT("f", "one\n%\ntwo\n\nthree");
    TEXT("empty.txt", "");
    text_file("nul.txt", "\0x\0\n", 4);
    text_file("allnul.txt", "\0\0", 2);
    const char *in[] = {scratch("f"), scratch("empty.txt"), scratch("nul.txt"),
                        scratch("allnul.txt")};
    run_preprocess(in, 4, 0, "one\n%\ntwo\n\nthree|x\n", 2);
}

static void test_every_byte_value(void **state)
{
    (void)state;
    char all[255];
    for (int i = 0; i < 255; i++)
        all[i] = (char)(i + 1);
    /* bytes 1..255 contain '\n' (10): use whole-file mode to keep them in one document */
    text_file("bytes", all, sizeof all);
    const char *in[] = {scratch("bytes")};
    uint64_t docs, tokens;
    assert_int_equal(tr_preprocess_text(in, 1, scratch("pp"), 0, &docs, &tokens), TR_OK);
    assert_true(docs == 1 && tokens == 256);
    tr_data *d = open_expect(scratch("pp"), "auto", "1,0,0", 255, 256, TR_OK, NULL);
    int32_t t[256];
    assert_int_equal(tr_data_sample(d, TR_SPLIT_TRAIN, 0, t), TR_OK);
    for (int i = 0; i < 255; i++)
        assert_int_equal(t[i], i + 1);
    assert_int_equal(t[255], TR_EOD_TOKEN);
    tr_data_close(d);
}

static void test_long_lines_and_many_documents(void **state)
{
    (void)state;
    /* a 300 kB line (longer than any internal buffer) and 5000 short documents */
    size_t line = 300000, n = line + 1 + 5000 * 4;
    char *text = malloc(n);
    assert_non_null(text);
    memset(text, 'q', line);
    text[line] = '\n';
    for (size_t i = 0; i < 5000; i++)
        memcpy(text + line + 1 + 4 * i, "\nab\n", 4);
    text_file("long.txt", text, n);
    const char *in[] = {scratch("long.txt")};
    uint64_t docs, tokens;
    assert_int_equal(tr_preprocess_text(in, 1, scratch("pp"), 1, &docs, &tokens), TR_OK);
    assert_int_equal(docs, 5001);
    assert_int_equal(tokens, (line + 2) + 5000 * 4);
    tr_data *d = open_expect(scratch("pp"), "auto", "1,0,0", 1, 256, TR_OK, NULL);
    uint64_t doc, off;
    assert_int_equal(tr_data_locate(d, TR_SPLIT_TRAIN, line + 2, &doc, &off), TR_OK);
    assert_true(doc == 1 && off == 0);
    tr_data_close(d);
    free(text);
}

static void test_failures_leave_old_output(void **state)
{
    (void)state;
    TEXT("ok.txt", "good\n");
    const char *ok[] = {scratch("ok.txt")};
    run_preprocess(ok, 1, 1, "good\n", 1);
    size_t bin_n, idx_n;
    unsigned char *bin0 = read_bytes(scratch("pp.bin"), &bin_n);
    unsigned char *idx0 = read_bytes(scratch("pp.idx"), &idx_n);
    /* a missing second input: TR_ERR_IO naming it; the old dataset is untouched */
    const char *in[] = {scratch("ok.txt"), scratch("does-not-exist.txt")};
    tr_clear_error();
    assert_int_equal(tr_preprocess_text(in, 2, scratch("pp"), 1, NULL, NULL), TR_ERR_IO);
    assert_non_null(strstr(tr_errmsg(), "cannot open input"));
    assert_non_null(strstr(tr_errmsg(), "does-not-exist.txt: No such file or directory"));
    assert_int_equal(access(scratch("pp.bin.tmp"), F_OK), -1);
    assert_int_equal(access(scratch("pp.idx.tmp"), F_OK), -1);
    size_t n;
    unsigned char *bin1 = read_bytes(scratch("pp.bin"), &n);
    assert_int_equal(n, bin_n);
    assert_memory_equal(bin0, bin1, n);
    unsigned char *idx1 = read_bytes(scratch("pp.idx"), &n);
    assert_int_equal(n, idx_n);
    assert_memory_equal(idx0, idx1, n);
    free(bin0);
    free(bin1);
    free(idx0);
    free(idx1);
    /* a directory as input, an output directory that does not exist, no inputs */
    const char *dir[] = {scratch_dir};
    assert_int_equal(tr_preprocess_text(dir, 1, scratch("pp2"), 1, NULL, NULL), TR_ERR_IO);
    assert_non_null(strstr(tr_errmsg(), scratch_dir));
    assert_int_equal(access(scratch("pp2.bin.tmp"), F_OK), -1);
    assert_int_equal(tr_preprocess_text(ok, 1, scratch("no/such/dir/x"), 1, NULL, NULL),
                     TR_ERR_IO);
    assert_non_null(strstr(tr_errmsg(), "cannot create"));
    assert_non_null(strstr(tr_errmsg(), "no/such/dir/x.bin.tmp"));
    assert_int_equal(tr_preprocess_text(ok, 0, scratch("pp"), 1, NULL, NULL), TR_ERR_INVALID);
    assert_non_null(strstr(tr_errmsg(), "no input files"));
    assert_int_equal(tr_preprocess_text(ok, 1, "", 1, NULL, NULL), TR_ERR_INVALID);
    assert_non_null(strstr(tr_errmsg(), "empty output prefix"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_blank_line_documents),
        cmocka_unit_test(test_percent_separators),
        cmocka_unit_test(test_nul_bytes_and_file_ends),
        cmocka_unit_test(test_document_per_file),
        cmocka_unit_test(test_every_byte_value),
        cmocka_unit_test(test_long_lines_and_many_documents),
        cmocka_unit_test(test_failures_leave_old_output),
    };
    return cmocka_run_group_tests_name("data preprocess", tests, scratch_setup,
                                       scratch_teardown);
}
