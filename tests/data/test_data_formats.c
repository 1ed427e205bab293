/* data/ formats: Megatron .bin/.idx and llm.c shards written and read back, every token
 * dtype, format detection, and every class of bad file (TR_ERR_INVALID + message). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdint.h>

#include "data_test_util.h"

/* The reference dataset "good": 4 documents, 14 uint16 tokens. .idx layout: sizes at 34,
 * pointers at 50, doc_idx at 82, 122 bytes; .bin 28 bytes, pointers 0, 8, 14, 24. */
static const uint16_t good_tokens[14] = {10, 11, 12, 0, 20, 21, 0, 30, 31, 32, 33, 0, 40, 0};
static const uint64_t good_lengths[4] = {4, 3, 5, 2};
enum { SIZES_AT = 34, POINTERS_AT = 50, DOC_IDX_AT = 82, IDX_BYTES = 122 };

static void write_good(void)
{
    assert_int_equal(tr_indexed_write(scratch("good"), good_tokens, good_lengths, 4), TR_OK);
}

static void read_all(tr_data *d, int S, int32_t *out)
{
    assert_int_equal(tr_data_num_samples(d, TR_SPLIT_TRAIN), 1);
    assert_int_equal(tr_data_sample(d, TR_SPLIT_TRAIN, 0, out), TR_OK);
    (void)S;
}

static void test_indexed_round_trip(void **state)
{
    (void)state;
    write_good();
    size_t n;
    unsigned char *idx = read_bytes(scratch("good.idx"), &n);
    assert_int_equal(n, IDX_BYTES);
    assert_memory_equal(idx, "MMIDIDX\0\0", 9);
    assert_int_equal(idx[9], 1);  /* version */
    assert_int_equal(idx[17], 8); /* uint16 */
    assert_int_equal(idx[18], 4); /* sequences */
    assert_int_equal(idx[26], 5); /* documents + 1 */
    int64_t ptr3;
    memcpy(&ptr3, idx + POINTERS_AT + 24, 8);
    assert_int_equal(ptr3, 24);
    free(idx);
    unsigned char *bin = read_bytes(scratch("good.bin"), &n);
    assert_int_equal(n, 28);
    assert_memory_equal(bin, good_tokens, 28);
    free(bin);
    assert_int_equal(access(scratch("good.bin.tmp"), F_OK), -1);
    assert_int_equal(access(scratch("good.idx.tmp"), F_OK), -1);

    /* S = 13: the single sample is every token */
    tr_data *d = open_expect(scratch("good"), "auto", "1,0,0", 13, 256, TR_OK, NULL);
    assert_int_equal(tr_data_num_documents(d), 4);
    assert_int_equal(tr_data_num_tokens(d), 14);
    int32_t got[14];
    read_all(d, 13, got);
    for (int i = 0; i < 14; i++)
        assert_int_equal(got[i], good_tokens[i]);
    tr_data_close(d);
    /* the prefix may be spelled with its .idx or .bin suffix, and "megatron" forced */
    tr_data_close(open_expect(scratch("good.idx"), "auto", "1,0,0", 13, 256, TR_OK, NULL));
    tr_data_close(open_expect(scratch("good.bin"), "megatron", "1,0,0", 13, 256, TR_OK, NULL));
    tr_data_close(open_expect(scratch("good"), "", "1,0,0", 13, 256, TR_OK, NULL));
}

/* Every integer dtype read back, through a hand-made index. */
static void test_indexed_dtypes(void **state)
{
    (void)state;
    const int32_t sizes[2] = {3, 2};
    const int64_t doc_idx[3] = {0, 1, 2};
    const int64_t want[5] = {7, 300, 0, 99, 0};
    struct {
        int code, itemsize;
        const char *name;
    } types[] = {{1, 1, "u8"}, {2, 1, "i8"}, {3, 2, "i16"}, {4, 4, "i32"}, {5, 8, "i64"},
                 {8, 2, "u16"}};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        unsigned char bytes[40];
        for (int i = 0; i < 5; i++) {
            int64_t v = want[i] == 300 && types[t].itemsize == 1 ? 100 : want[i];
            memcpy(bytes + i * types[t].itemsize, &v, (size_t)types[t].itemsize);
        }
        write_raw_indexed(scratch(types[t].name), types[t].code, types[t].itemsize, bytes,
                          sizes, 2, doc_idx, 3);
        tr_data *d = open_expect(scratch(types[t].name), "megatron", "1,0,0", 4, 1000, TR_OK,
                                 NULL);
        int32_t got[5];
        read_all(d, 4, got);
        for (int i = 0; i < 5; i++)
            assert_int_equal(got[i], want[i] == 300 && types[t].itemsize == 1 ? 100 : want[i]);
        assert_int_equal(tr_data_num_documents(d), 2);
        tr_data_close(d);
    }
}

/* Sentence-split: several sequences per document; documents follow doc_idx. */
static void test_indexed_multi_sequence_documents(void **state)
{
    (void)state;
    const uint16_t tokens[7] = {1, 2, 3, 4, 5, 6, 0};
    const int32_t sizes[4] = {2, 1, 3, 1};
    const int64_t doc_idx[3] = {0, 3, 4};
    write_raw_indexed(scratch("sent"), 8, 2, tokens, sizes, 4, doc_idx, 3);
    tr_data *d = open_expect(scratch("sent"), "auto", "1,0,0", 6, 256, TR_OK, NULL);
    assert_int_equal(tr_data_num_documents(d), 2);
    assert_int_equal(tr_data_num_tokens(d), 7);
    uint64_t doc, off;
    assert_int_equal(tr_data_locate(d, TR_SPLIT_TRAIN, 5, &doc, &off), TR_OK);
    assert_int_equal(doc, 0);
    assert_int_equal(off, 5);
    assert_int_equal(tr_data_locate(d, TR_SPLIT_TRAIN, 6, &doc, &off), TR_OK);
    assert_int_equal(doc, 1);
    assert_int_equal(off, 0);
    tr_data_close(d);
}

static void test_empty_dataset(void **state)
{
    (void)state;
    assert_int_equal(tr_indexed_write(scratch("empty"), NULL, NULL, 0), TR_OK);
    tr_data *d = open_expect(scratch("empty"), "auto", "1,0,0", 4, 256, TR_OK, NULL);
    assert_int_equal(tr_data_num_documents(d), 0);
    assert_int_equal(tr_data_num_tokens(d), 0);
    assert_int_equal(tr_data_num_samples(d, TR_SPLIT_TRAIN), 0);
    int32_t t[5];
    assert_int_equal(tr_data_sample(d, TR_SPLIT_TRAIN, 0, t), TR_ERR_INVALID);
    assert_non_null(strstr(tr_errmsg(), "train split has no sample of 5 tokens"));
    tr_data_close(d);
}

/* ---- bad Megatron files: start from "good", patch, expect TR_ERR_INVALID + needle ---- */

static unsigned char *good_idx(void)
{
    write_good();
    size_t n;
    unsigned char *b = read_bytes(scratch("good.idx"), &n);
    assert_int_equal(n, IDX_BYTES);
    return b;
}

/* bad.idx = the first idx_len bytes of idx, bad.bin = good.bin; open must fail. */
static void expect_bad_idx(const unsigned char *idx, size_t idx_len, const char *needle)
{
    copy_file(scratch("good.bin"), scratch("bad.bin"));
    write_bytes(scratch("bad.idx"), idx, idx_len);
    open_expect(scratch("bad"), "auto", "1,0,0", 2, 256, TR_ERR_INVALID, needle);
    /* the message names the file */
    assert_non_null(strstr(tr_errmsg(), scratch("bad.")));
}

static void test_bad_idx_header(void **state)
{
    (void)state;
    unsigned char *idx = good_idx();
    expect_bad_idx(idx, 20, "file is 20 bytes, shorter than the 34-byte MMIDIDX header");
    expect_bad_idx(idx, 100, "file is 100 bytes, but sequence count 4 and document count 5 "
                             "imply 122 bytes");
    expect_bad_idx(idx, 0, "file is 0 bytes");
    unsigned char b[IDX_BYTES];
    memcpy(b, idx, IDX_BYTES);
    b[0] = 'X';
    expect_bad_idx(b, IDX_BYTES, "magic is \"XMIDIDX\\x00\\x00\", expected");
    memcpy(b, idx, IDX_BYTES);
    put_u64(b + 9, 2);
    expect_bad_idx(b, IDX_BYTES, "version is 2, expected 1");
    memcpy(b, idx, IDX_BYTES);
    b[17] = 9;
    expect_bad_idx(b, IDX_BYTES, "dtype code is 9, expected 1..8");
    b[17] = 0;
    expect_bad_idx(b, IDX_BYTES, "dtype code is 0, expected 1..8");
    b[17] = 7;
    expect_bad_idx(b, IDX_BYTES, "dtype code 7 (float32) is a floating-point type");
    b[17] = 6;
    expect_bad_idx(b, IDX_BYTES, "dtype code 6 (float64) is a floating-point type");
    /* a mislabelled dtype: int32 over a uint16 file */
    b[17] = 4;
    expect_bad_idx(b, IDX_BYTES, "pointers[1] is 8, expected 16");
    free(idx);
}

static void test_bad_idx_counts(void **state)
{
    (void)state;
    unsigned char *idx = good_idx(), b[IDX_BYTES];
    memcpy(b, idx, IDX_BYTES);
    put_u64(b + 18, 1ull << 62); /* 12 * 2^62 overflows */
    expect_bad_idx(b, IDX_BYTES, "sequence count 4611686018427387904 and document count 5 "
                                 "overflow the index size");
    memcpy(b, idx, IDX_BYTES);
    put_u64(b + 26, UINT64_MAX);
    expect_bad_idx(b, IDX_BYTES, "overflow the index size (file is 122 bytes)");
    memcpy(b, idx, IDX_BYTES);
    put_u64(b + 18, (UINT64_MAX - 100) / 12); /* fits, sum with the header overflows */
    put_u64(b + 26, (UINT64_MAX - 100) / 8 / 2);
    expect_bad_idx(b, IDX_BYTES, "overflow the index size");
    memcpy(b, idx, IDX_BYTES);
    put_u64(b + 18, 5);
    expect_bad_idx(b, IDX_BYTES, "sequence count 5 and document count 5 imply 134 bytes");
    memcpy(b, idx, IDX_BYTES);
    put_u64(b + 18, 1ull << 40);
    expect_bad_idx(b, IDX_BYTES, "file is 122 bytes, but sequence count 1099511627776");
    /* no doc_idx at all: count 0 and the array cut off, so the length agrees */
    memcpy(b, idx, IDX_BYTES);
    put_u64(b + 26, 0);
    expect_bad_idx(b, DOC_IDX_AT, "document count is 0, expected at least 1");
    free(idx);
}

static void test_bad_idx_sizes_pointers(void **state)
{
    (void)state;
    unsigned char *idx = good_idx(), b[IDX_BYTES];
    memcpy(b, idx, IDX_BYTES);
    put_i32(b + SIZES_AT + 4, -1);
    expect_bad_idx(b, IDX_BYTES, "sizes[1] is -1, expected >= 0");
    memcpy(b, idx, IDX_BYTES);
    put_i32(b + SIZES_AT + 12, 1000);
    expect_bad_idx(b, IDX_BYTES, "sequence 3 (pointer 24, size 1000 x 2 bytes) ends at byte "
                                 "2024, past the end of");
    memcpy(b, idx, IDX_BYTES);
    put_i32(b + SIZES_AT + 12, INT32_MAX);
    expect_bad_idx(b, IDX_BYTES, "ends at byte 4294967318, past the end of");
    memcpy(b, idx, IDX_BYTES);
    put_i32(b + SIZES_AT, 5);
    expect_bad_idx(b, IDX_BYTES, "pointers[1] is 8, expected 10 (pointers[0] + sizes[0] * 2 "
                                 "bytes)");
    memcpy(b, idx, IDX_BYTES);
    put_i64(b + POINTERS_AT + 16, 16);
    expect_bad_idx(b, IDX_BYTES, "pointers[2] is 16, expected 14");
    memcpy(b, idx, IDX_BYTES);
    put_i64(b + POINTERS_AT, 2);
    expect_bad_idx(b, IDX_BYTES, "pointers[0] is 2, expected 0");
    memcpy(b, idx, IDX_BYTES);
    put_i64(b + POINTERS_AT + 8, -8);
    expect_bad_idx(b, IDX_BYTES, "pointers[1] is -8, expected 8");
    memcpy(b, idx, IDX_BYTES);
    put_i64(b + POINTERS_AT + 24, INT64_MAX);
    expect_bad_idx(b, IDX_BYTES, "pointers[3] is 9223372036854775807, expected 24");
    free(idx);
}

static void test_bad_idx_doc_idx(void **state)
{
    (void)state;
    unsigned char *idx = good_idx(), b[IDX_BYTES];
    memcpy(b, idx, IDX_BYTES);
    put_i64(b + DOC_IDX_AT + 16, 3);
    put_i64(b + DOC_IDX_AT + 24, 2);
    expect_bad_idx(b, IDX_BYTES, "doc_idx[3] is 2, less than doc_idx[2] = 3 (must not "
                                 "decrease)");
    memcpy(b, idx, IDX_BYTES);
    put_i64(b + DOC_IDX_AT, 1);
    expect_bad_idx(b, IDX_BYTES, "doc_idx[0] is 1, expected 0");
    memcpy(b, idx, IDX_BYTES);
    put_i64(b + DOC_IDX_AT + 32, 3);
    expect_bad_idx(b, IDX_BYTES, "doc_idx[4] (the last) is 3, expected the sequence count 4");
    memcpy(b, idx, IDX_BYTES);
    put_i64(b + DOC_IDX_AT + 16, 7);
    expect_bad_idx(b, IDX_BYTES, "doc_idx[2] is 7, past the sequence count 4");
    memcpy(b, idx, IDX_BYTES);
    put_i64(b + DOC_IDX_AT + 8, -1);
    expect_bad_idx(b, IDX_BYTES, "doc_idx[1] is -1, less than doc_idx[0] = 0");
    free(idx);
}

static void test_bad_bin(void **state)
{
    (void)state;
    write_good();
    copy_file(scratch("good.idx"), scratch("tb.idx"));
    write_bytes(scratch("tb.bin"), good_tokens, 14); /* half of it */
    open_expect(scratch("tb"), "auto", "1,0,0", 2, 256, TR_ERR_INVALID,
                "sequence 2 (pointer 14, size 5 x 2 bytes) ends at byte 24, past the end of");
    assert_non_null(strstr(tr_errmsg(), "tb.bin (14 bytes; truncated data file?)"));
    write_bytes(scratch("tb.bin"), NULL, 0);
    open_expect(scratch("tb"), "auto", "1,0,0", 2, 256, TR_ERR_INVALID, "past the end of");
    uint16_t longer[15];
    memcpy(longer, good_tokens, sizeof good_tokens);
    longer[14] = 5;
    write_bytes(scratch("tb.bin"), longer, sizeof longer);
    open_expect(scratch("tb"), "auto", "1,0,0", 2, 256, TR_ERR_INVALID,
                "tb.bin: file is 30 bytes, but");
    assert_non_null(strstr(tr_errmsg(), "describes 28 bytes (14 tokens of uint16)"));
    remove(scratch("tb.bin"));
    open_expect(scratch("tb"), "auto", "1,0,0", 2, 256, TR_ERR_INVALID, "tb.bin: missing");
}

static void test_bad_tokens(void **state)
{
    (void)state;
    write_good();
    open_expect(scratch("good"), "auto", "1,0,0", 2, 33, TR_ERR_INVALID,
                "good.bin: token 33 at position 10 (document 2, offset 3) is >= vocab_size "
                "(vocab_size is 33)");
    tr_data_close(open_expect(scratch("good"), "auto", "1,0,0", 2, 41, TR_OK, NULL));
    open_expect(scratch("good"), "auto", "1,0,0", 2, 40, TR_ERR_INVALID,
                "token 40 at position 12 (document 3, offset 0)");
    /* negative ids in a signed dtype */
    const int8_t tokens[3] = {1, -3, 0};
    const int32_t sizes[1] = {3};
    const int64_t doc_idx[2] = {0, 1};
    write_raw_indexed(scratch("neg"), 2, 1, tokens, sizes, 1, doc_idx, 2);
    open_expect(scratch("neg"), "auto", "1,0,0", 2, 256, TR_ERR_INVALID,
                "token -3 at position 1 (document 0, offset 1) is negative");
    /* an out-of-range token far into a long file (past the first scan block) */
    uint64_t n = 200000;
    uint16_t *big = calloc(n, sizeof *big);
    assert_non_null(big);
    big[150001] = 256;
    assert_int_equal(tr_indexed_write(scratch("big"), big, &n, 1), TR_OK);
    open_expect(scratch("big"), "auto", "1,0,0", 2, 256, TR_ERR_INVALID,
                "token 256 at position 150001 (document 0, offset 150001)");
    free(big);
}

/* ---- llm.c shards ---- */

static void test_llmc_round_trip(void **state)
{
    (void)state;
    uint16_t tokens[100];
    for (int i = 0; i < 100; i++)
        tokens[i] = (uint16_t)(i * 500);
    assert_int_equal(tr_llmc_shard_write(scratch("shard.bin"), tokens, 100), TR_OK);
    size_t n;
    unsigned char *b = read_bytes(scratch("shard.bin"), &n);
    assert_int_equal(n, 1024 + 200);
    int32_t h[4];
    memcpy(h, b, sizeof h);
    assert_int_equal(h[0], 20240520);
    assert_int_equal(h[1], 1);
    assert_int_equal(h[2], 100);
    assert_int_equal(h[3], 0);
    assert_memory_equal(b + 1024, tokens, 200);
    free(b);
    assert_int_equal(access(scratch("shard.bin.tmp"), F_OK), -1);
    /* "auto" sees no shard.idx, so it is an llm.c shard even though named .bin */
    const char *formats[2] = {"auto", "llmc"};
    for (int f = 0; f < 2; f++) {
        tr_data *d = open_expect(scratch("shard.bin"), formats[f], "1,0,0", 99, 50257, TR_OK,
                                 NULL);
        assert_int_equal(tr_data_num_tokens(d), 100);
        assert_int_equal(tr_data_num_documents(d), 1);
        int32_t got[100];
        read_all(d, 99, got);
        for (int i = 0; i < 100; i++)
            assert_int_equal(got[i], tokens[i]);
        tr_data_close(d);
    }
    open_expect(scratch("shard.bin"), "auto", "1,0,0", 99, 49500, TR_ERR_INVALID,
                "shard.bin: token 49500 at position 99 (document 0, offset 99) is >= "
                "vocab_size");
}

static void expect_bad_shard(const unsigned char *bytes, size_t n, const char *needle)
{
    write_bytes(scratch("badshard.bin"), bytes, n);
    open_expect(scratch("badshard.bin"), "llmc", "1,0,0", 2, 50257, TR_ERR_INVALID, needle);
    assert_non_null(strstr(tr_errmsg(), scratch("badshard.bin")));
}

static void test_llmc_bad(void **state)
{
    (void)state;
    uint16_t tokens[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    assert_int_equal(tr_llmc_shard_write(scratch("s.bin"), tokens, 10), TR_OK);
    size_t n;
    unsigned char *good = read_bytes(scratch("s.bin"), &n), b[1024 + 24];
    assert_int_equal(n, 1044);
    expect_bad_shard(good, 100, "file is 100 bytes, shorter than the 1024-byte llm.c shard "
                                "header");
    memcpy(b, good, n);
    put_i32(b, 20240521);
    expect_bad_shard(b, n, "header magic is 20240521, expected 20240520");
    memcpy(b, good, n);
    put_i32(b + 4, 2);
    expect_bad_shard(b, n, "header version is 2, expected 1");
    memcpy(b, good, n);
    put_i32(b + 8, 11);
    expect_bad_shard(b, n, "file is 1044 bytes, but the header token count 11 implies 1046 "
                           "bytes");
    expect_bad_shard(good, n - 3, "file is 1041 bytes, but the header token count 10 implies "
                                  "1044 bytes");
    memcpy(b, good, n);
    memset(b + n, 0, 4);
    expect_bad_shard(b, n + 4, "file is 1048 bytes");
    memcpy(b, good, n);
    put_i32(b + 8, -5);
    expect_bad_shard(b, n, "header token count is -5, expected >= 0");
    memcpy(b, good, n);
    put_i32(b + 8, INT32_MAX);
    expect_bad_shard(b, n, "header token count 2147483647 implies 4294968318 bytes");
    /* a Megatron index is not a shard */
    write_good();
    size_t m;
    unsigned char *idx = read_bytes(scratch("good.idx"), &m);
    expect_bad_shard(idx, m, "shorter than the 1024-byte");
    free(idx);
    free(good);
}

static void test_format_selection(void **state)
{
    (void)state;
    write_good();
    uint16_t tokens[4] = {1, 2, 3, 4};
    assert_int_equal(tr_llmc_shard_write(scratch("only.bin"), tokens, 4), TR_OK);
    open_expect(scratch("only.bin"), "megatron", "1,0,0", 2, 256, TR_ERR_CONFIG,
                "no Megatron dataset at");
    open_expect(scratch("good"), "llmc", "1,0,0", 2, 256, TR_ERR_CONFIG, "no llm.c shard at");
    open_expect(scratch("good"), "hdf5", "1,0,0", 2, 256, TR_ERR_CONFIG,
                "data format \"hdf5\" is not one of auto, megatron, llmc");
    open_expect(scratch("nothing"), "auto", "1,0,0", 2, 256, TR_ERR_CONFIG,
                "no dataset at");
    assert_non_null(strstr(tr_errmsg(), "nothing.idx (Megatron prefix)"));
    open_expect(scratch_dir, "llmc", "1,0,0", 2, 256, TR_ERR_CONFIG, "no llm.c shard");
    open_expect(scratch("good"), "auto", "1,0,0", 0, 256, TR_ERR_CONFIG,
                "seq_length must be positive");
    open_expect(scratch("good"), "auto", "1,0,0", 2, 0, TR_ERR_CONFIG,
                "vocab_size must be positive");
    open_expect("", "auto", "1,0,0", 2, 256, TR_ERR_CONFIG, "data path is empty");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_indexed_round_trip),
        cmocka_unit_test(test_indexed_dtypes),
        cmocka_unit_test(test_indexed_multi_sequence_documents),
        cmocka_unit_test(test_empty_dataset),
        cmocka_unit_test(test_bad_idx_header),
        cmocka_unit_test(test_bad_idx_counts),
        cmocka_unit_test(test_bad_idx_sizes_pointers),
        cmocka_unit_test(test_bad_idx_doc_idx),
        cmocka_unit_test(test_bad_bin),
        cmocka_unit_test(test_bad_tokens),
        cmocka_unit_test(test_llmc_round_trip),
        cmocka_unit_test(test_llmc_bad),
        cmocka_unit_test(test_format_selection),
    };
    return cmocka_run_group_tests_name("data formats", tests, scratch_setup, scratch_teardown);
}
