/* Parquet's bit-level readers on hand-made bytes (data/parquet_internal.h): the Thrift compact
 * protocol (values, skipping, each malformation an error), the RLE / bit-packing hybrid,
 * DELTA_BINARY_PACKED, the Snappy decoder and the page codecs' size checks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdint.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

#include "data/parquet_internal.h"

static pq_thrift cursor(const uint8_t *b, size_t n) { return (pq_thrift){b, b + n, 0, NULL}; }

/* {1: i32 5, 2: "ab", 4: list<i32> [1, 2], 5: {1: true}, 100 (long form): i64 -1} */
static const uint8_t sample[] = {0x15, 0x0a, 0x18, 0x02, 'a', 'b', 0x29, 0x25, 0x02, 0x04,
                                 0x1c, 0x11, 0x00, 0x06, 0xc8, 0x01, 0x01, 0x00};

static void test_thrift_values(void **state)
{
    (void)state;
    pq_thrift t = cursor(sample, sizeof sample);
    int last = 0, id, type, seen = 0;
    while (pq_field(&t, &last, &id, &type)) {
        size_t n;
        int et;
        if (id == 1) {
            assert_int_equal(pq_int(&t, type), 5);
        } else if (id == 2) {
            const uint8_t *s = pq_binary(&t, type, &n);
            assert_int_equal(n, 2);
            assert_memory_equal(s, "ab", 2);
        } else if (id == 4) {
            assert_true(pq_list(&t, type, &et, &n));
            assert_int_equal(n, 2);
            assert_int_equal(pq_int(&t, et), 1);
            assert_int_equal(pq_int(&t, et), 2);
        } else if (id == 5) {
            int l2 = 0, id2, t2;
            assert_true(pq_struct_begin(&t, type));
            assert_true(pq_field(&t, &l2, &id2, &t2));
            assert_int_equal(id2, 1);
            assert_true(pq_bool(&t, t2));
            assert_false(pq_field(&t, &l2, &id2, &t2));
            pq_struct_end(&t);
        } else {
            assert_int_equal(id, 100);
            assert_int_equal(pq_int(&t, type), -1);
        }
        seen++;
    }
    assert_null(t.err);
    assert_int_equal(seen, 5);
    assert_ptr_equal(t.p, sample + sizeof sample);

    pq_thrift s = cursor(sample, sizeof sample); /* skipped whole, as a struct */
    pq_skip(&s, PQ_T_STRUCT);
    assert_null(s.err);
    assert_ptr_equal(s.p, sample + sizeof sample);
}

static const char *error_of(const uint8_t *b, size_t n, int as_binary)
{
    static pq_thrift t;
    t = cursor(b, n);
    int last = 0, id, type;
    if (pq_field(&t, &last, &id, &type)) {
        size_t len;
        if (as_binary)
            (void)pq_binary(&t, type, &len);
        else
            pq_skip(&t, type);
    }
    return t.err;
}

static void test_thrift_errors(void **state)
{
    (void)state;
    static const uint8_t str_past[] = {0x18, 0x05, 'a'}, list_past[] = {0x19, 0xf5, 0x7f, 0x02},
                         unknown[] = {0x1d, 0x00}, varint_past[] = {0x16, 0x80, 0x80},
                         i32_range[] = {0x15, 0xff, 0xff, 0xff, 0xff, 0x7f},
                         map_past[] = {0x1b, 0x7f, 0x55, 0x02};
    assert_non_null(strstr(error_of(sample, 2, 1), "wrong type"));
    assert_non_null(strstr(error_of(str_past, sizeof str_past, 0), "string runs past"));
    assert_non_null(strstr(error_of(list_past, sizeof list_past, 0), "list longer"));
    assert_non_null(strstr(error_of(unknown, sizeof unknown, 0), "unknown type"));
    assert_non_null(strstr(error_of(varint_past, sizeof varint_past, 0), "past its bytes"));
    assert_non_null(strstr(error_of(i32_range, sizeof i32_range, 0), "range"));
    assert_non_null(strstr(error_of(map_past, sizeof map_past, 0), "map longer"));
    pq_thrift t = cursor(sample, 13); /* a struct without its stop */
    pq_skip(&t, PQ_T_STRUCT);
    assert_non_null(strstr(t.err, "struct runs past"));
    uint8_t deep[64];
    memset(deep, 0x1c, sizeof deep); /* structs in structs */
    assert_non_null(strstr(error_of(deep, sizeof deep, 0), "too deep"));
}

/* vals (bw bits each, LSB first) packed into out: the bit-packed run's bytes. */
static size_t pack(const uint32_t *vals, size_t n, int bw, uint8_t *out)
{
    size_t bytes = (n * (size_t)bw + 7) / 8;
    memset(out, 0, bytes);
    for (size_t i = 0; i < n; i++)
        for (int b = 0; b < bw; b++) {
            size_t bit = i * (size_t)bw + (size_t)b;
            if (vals[i] >> b & 1)
                out[bit / 8] |= (uint8_t)(1u << (bit % 8));
        }
    return bytes;
}

static void test_rle(void **state)
{
    (void)state;
    uint8_t buf[64];
    uint32_t seq[16], out[16];
    for (int i = 0; i < 16; i++)
        seq[i] = (uint32_t)(i * 5 % 8);
    size_t n = 0;
    buf[n++] = 4 << 1, buf[n++] = 6;     /* a run: 4 times 6 */
    buf[n++] = (2 << 1) | 1;             /* bit-packed: 2 groups of 8 */
    n += pack(seq, 16, 3, buf + n);
    assert_null(pq_rle_decode(buf, n, 3, out, 20 - 4 - 4)); /* 12 of the 20: stops inside */
    for (int i = 0; i < 4; i++)
        assert_int_equal(out[i], 6);
    for (int i = 4; i < 12; i++)
        assert_int_equal(out[i], seq[i - 4]);
    uint32_t big[20];
    assert_null(pq_rle_decode(buf, n, 3, big, 20));
    assert_int_equal(big[19], seq[15]);
    /* bit width 32 and 0 */
    uint8_t w32[] = {2 << 1, 0xff, 0xff, 0xff, 0xff};
    assert_null(pq_rle_decode(w32, sizeof w32, 32, out, 2));
    assert_int_equal(out[1], 0xffffffffu);
    uint8_t w0[] = {3 << 1};
    assert_null(pq_rle_decode(w0, sizeof w0, 0, out, 3));
    assert_int_equal(out[2], 0);
    /* malformed */
    uint8_t empty[] = {0x00, 0x01}, short_bp[] = {0x03, 0xff}, wide[] = {0x02, 0x02};
    assert_string_equal(pq_rle_decode(empty, 2, 1, out, 1), "an empty RLE run");
    assert_string_equal(pq_rle_decode(short_bp, 2, 3, out, 8), "a bit-packed run past its bytes");
    assert_string_equal(pq_rle_decode(wide, 2, 1, out, 1), "an RLE value wider than its bit width");
    assert_string_equal(pq_rle_decode(wide, 2, 33, out, 1), "a bit width past 32");
    assert_string_equal(pq_rle_decode(wide, 1, 8, out, 1), "an RLE run past its bytes");
    assert_string_equal(pq_rle_decode(wide, 2, 8, out, 2), "an RLE run header past its bytes");
}

static void test_delta(void **state)
{
    (void)state;
    /* block 128 of 4 miniblocks, 5 values, first 7; min delta -1, widths 2 0 0 0, deltas
     * 3 0 2 1 (+ -1 each): 7 9 8 9 9 */
    uint8_t d[18] = {0x80, 0x01, 0x04, 0x05, 0x0e, 0x01, 0x02, 0x00, 0x00, 0x00, 0x63};
    int64_t out[8];
    size_t used = 0;
    assert_null(pq_delta_decode(d, sizeof d, out, 5, &used));
    assert_int_equal(used, 18);
    int64_t want[] = {7, 9, 8, 9, 9};
    assert_memory_equal(out, want, sizeof want);
    assert_non_null(strstr(pq_delta_decode(d, sizeof d, out, 4, &used), "disagrees"));
    assert_non_null(strstr(pq_delta_decode(d, 17, out, 5, &used), "miniblock past its bytes"));
    assert_non_null(strstr(pq_delta_decode(d, 3, out, 5, &used), "header past its bytes"));
    d[6] = 65;
    assert_non_null(strstr(pq_delta_decode(d, sizeof d, out, 5, &used), "bit width past 64"));
    d[2] = 3; /* 128 values in 3 miniblocks */
    assert_non_null(strstr(pq_delta_decode(d, sizeof d, out, 5, &used), "block size"));
}

static void test_snappy(void **state)
{
    (void)state;
    /* "abc" then a copy of 9 from 3 back (overlapping): "abcabcabcabc" */
    static const uint8_t s[] = {12, 0x08, 'a', 'b', 'c', 0x15, 3};
    uint8_t out[16];
    assert_null(pq_snappy_decode(s, sizeof s, out, 12));
    assert_memory_equal(out, "abcabcabcabc", 12);
    assert_non_null(strstr(pq_snappy_decode(s, sizeof s, out, 13), "disagrees"));
    static const uint8_t zero_off[] = {12, 0x08, 'a', 'b', 'c', 0x15, 0};
    assert_non_null(strstr(pq_snappy_decode(zero_off, sizeof zero_off, out, 12), "before the"));
    static const uint8_t long_lit[] = {3, 0x08, 'a'};
    assert_non_null(strstr(pq_snappy_decode(long_lit, sizeof long_lit, out, 3), "past its bytes"));
    static const uint8_t short_out[] = {4, 0x08, 'a', 'b', 'c'};
    assert_non_null(strstr(pq_snappy_decode(short_out, sizeof short_out, out, 4), "shorter"));
}

static void test_codecs(void **state)
{
    (void)state;
    uint8_t text[300], packed[600], out[400];
    for (size_t i = 0; i < sizeof text; i++)
        text[i] = (uint8_t)("parquet "[i % 8]);
    uLongf zn = sizeof packed;
    assert_int_equal(compress(packed, &zn, text, sizeof text), Z_OK);
    const size_t n = sizeof text;
    assert_null(pq_decompress(PQ_CODEC_GZIP, packed, zn, out, n));
    assert_memory_equal(out, text, n);
    assert_non_null(strstr(pq_decompress(PQ_CODEC_GZIP, packed, zn, out, n + 1), "shorter"));
    assert_non_null(strstr(pq_decompress(PQ_CODEC_GZIP, packed, zn, out, n - 1), "longer"));
    assert_non_null(strstr(pq_decompress(PQ_CODEC_GZIP, packed, zn - 5, out, n), "truncated"));
    size_t sn = ZSTD_compress(packed, sizeof packed, text, n, 3);
    assert_false(ZSTD_isError(sn));
    assert_null(pq_decompress(PQ_CODEC_ZSTD, packed, sn, out, n));
    assert_memory_equal(out, text, n);
    assert_non_null(strstr(pq_decompress(PQ_CODEC_ZSTD, packed, sn, out, n + 1), "shorter"));
    assert_non_null(strstr(pq_decompress(PQ_CODEC_ZSTD, packed, sn, out, n - 1), "longer"));
    assert_non_null(strstr(pq_decompress(PQ_CODEC_UNCOMPRESSED, text, 10, out, 11), "differ"));
    assert_string_equal(pq_codec_name(7), "LZ4_RAW");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_thrift_values), cmocka_unit_test(test_thrift_errors),
        cmocka_unit_test(test_rle),           cmocka_unit_test(test_delta),
        cmocka_unit_test(test_snappy),
        cmocka_unit_test(test_codecs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
