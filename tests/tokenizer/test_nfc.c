/* tokenizer/: the NFC normalizer of a Qwen2-shaped tokenizer.json (NFC, Qwen2's Split regex +
 * ByteLevel, ByteLevel post-processor and decoder, the BPE model's "" affixes, added tokens
 * matched in the raw text): NFC of fixed strings, bytes in and bytes out (a byte-level BPE
 * decodes to the normalized text), the pieces around added tokens normalized apart, a
 * normalized added token matched after NFC, and the fields refused with their names. Runs under
 * the sanitizers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok_test_util.h"
#include "tokenizer/tokenizer.h"

/* Qwen2's tokenizer.json shape over the 256 byte tokens; VOCAB, NORMALIZER, MODEL and ADDED are
 * filled in by qwen2_json. */
static const char *qwen2_shape =
    "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":["
    "{\"id\":256,\"content\":\"<|endoftext|>\",\"single_word\":false,\"lstrip\":false,"
    "\"rstrip\":false,\"normalized\":false,\"special\":true},"
    "{\"id\":257,\"content\":\"<|im_start|>\",\"single_word\":false,\"lstrip\":false,"
    "\"rstrip\":false,\"normalized\":false,\"special\":true},"
    "{\"id\":258,\"content\":\"<|im_end|>\",\"single_word\":false,\"lstrip\":false,"
    "\"rstrip\":false,\"normalized\":false,\"special\":true}ADDED],"
    "\"normalizer\":NORMALIZER,"
    "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":"
    "{\"Regex\":\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}| "
    "?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"},"
    "\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\","
    "\"add_prefix_space\":false,\"trim_offsets\":false,\"use_regex\":false}]},"
    "\"post_processor\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":false,"
    "\"use_regex\":false},"
    "\"decoder\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":false,"
    "\"use_regex\":false},"
    "\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":null,MODEL\"fuse_unk\":false,"
    "\"byte_fallback\":false,\"ignore_merges\":false,\"vocab\":VOCAB,\"merges\":[]}}";

/* qwen2_shape with its placeholders replaced (NULL: Qwen2's own) written to dir/name. */
static const char *qwen2_json(const char *name, const char *normalizer, const char *model,
                              const char *added)
{
    char *v = malloc(8192), *out = malloc(16384);
    size_t vo = byte_vocab(v);
    strcpy(v + vo, "}");
    const char *fill[4][2] = {
        {"ADDED", added ? added : ""},
        {"NORMALIZER", normalizer ? normalizer : "{\"type\":\"NFC\"}"},
        {"MODEL",
         model ? model : "\"continuing_subword_prefix\":\"\",\"end_of_word_suffix\":\"\","},
        {"VOCAB", v},
    };
    strcpy(out, qwen2_shape);
    for (int k = 0; k < 4; k++) {
        char *at = strstr(out, fill[k][0]), *rest = strdup(at + strlen(fill[k][0]));
        strcpy(at, fill[k][1]);
        strcat(at, rest);
        free(rest);
    }
    const char *path = scratch(name);
    write_file(path, out, strlen(out));
    free(v);
    free(out);
    return path;
}

/* NFC of fixed strings: encoded, then decoded (the byte-level BPE gives back the normalized
 * bytes), as tokenizers' NFC gives them. */
static void test_nfc_strings(void **state)
{
    (void)state;
    const char *path = qwen2_json("qwen2.json", NULL, NULL, NULL);
    tr_tokenizer *t = open_ok("HFTokenizer", NULL, NULL, path);
    static const struct { const char *in, *out; } cases[] = {
        {"e\xCC\x81", "\xC3\xA9"},                                   /* e U+0301 -> U+00E9 */
        {"a\xCC\xA3\xCC\x82", "\xE1\xBA\xAD"},                       /* a U+0323 U+0302 -> U+1EAD */
        {"a\xCC\x82\xCC\xA3", "\xE1\xBA\xAD"},                       /* reordered first */
        {"\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8", "\xEA\xB0\x81"},    /* jamo L V T -> U+AC01 */
        {"\xE2\x84\xA6", "\xCE\xA9"},                                /* OHM SIGN -> U+03A9 */
        {"\xE0\xA5\x98", "\xE0\xA4\x95\xE0\xA4\xBC"},                /* U+0958: an exclusion */
        {"\xEF\xA4\x80", "\xE8\xB1\x88"},                            /* U+F900 -> U+8C48 */
        {"o\xCC\x88\xCC\x84 e\xCC\x81\xCC\x81", "\xC8\xAB \xC3\xA9\xCC\x81"},
        {"hello world\r\n\r\n", "hello world\r\n\r\n"},
        {"\xFF" "e\xCC\x81", "\xEF\xBF\xBD\xC3\xA9"},                /* repaired, then NFC */
        {"e\0\xCC\x81", "e\0\xCC\x81"},                              /* NUL is a starter */
        {"a\xE1\xB7\xB6\xCC\x81", "a\xE1\xB7\xB6\xCC\x81"},          /* U+1DF6: after Unicode 9 */
        {"\xE4\xB8\xAD\xE6\x96\x87 \xEA\xB0\x81", "\xE4\xB8\xAD\xE6\x96\x87 \xEA\xB0\x81"},
        {"<|im_end|>\xCC\x81", "<|im_end|>\xCC\x81"},                /* no starter before it */
        {"e<|im_start|>\xCC\x81", "e<|im_start|>\xCC\x81"},          /* normalized apart */
    };
    static const size_t in_len[] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        size_t n, len, want = in_len[c] ? in_len[c] : strlen(cases[c].out);
        int32_t *ids = encode(t, cases[c].in, in_len[c] ? in_len[c] : strlen(cases[c].in), 1, &n);
        char *text;
        assert_int_equal(tr_decode(t, ids, n, &text, &len), TR_OK);
        if (len != want || memcmp(text, cases[c].out, want))
            fail_msg("case %zu: %zu bytes back, %zu wanted", c, len, want);
        free(text);
        free(ids);
    }
    /* the ids where an added token sits between e and its accent: e, <|im_start|>, 0xCC 0x81 */
    size_t n;
    int32_t *ids = encode(t, "e<|im_start|>\xCC\x81", 15, 1, &n), want[] = {'e', 257, 0xCC, 0x81};
    assert_int_equal(n, 4);
    assert_memory_equal(ids, want, sizeof want);
    free(ids);
    tr_tokenizer_free(t);
}

/* An added token with "normalized": true is NFC'd and matched in the NFC'd text (tokenizers'
 * rule); one with false only as it is spelled, in the raw text. */
static void test_normalized_added(void **state)
{
    (void)state;
    const char *angstrom = ",{\"id\":259,\"content\":\"\\u212b\",\"single_word\":false,"
                           "\"lstrip\":false,\"rstrip\":false,\"normalized\":%s,\"special\":false}";
    char added[256];
    for (int normalized = 0; normalized < 2; normalized++) {
        snprintf(added, sizeof added, angstrom, normalized ? "true" : "false");
        tr_tokenizer *t = open_ok("HFTokenizer", NULL, NULL,
                                  qwen2_json("qwen2-added.json", NULL, NULL, added));
        static const char *const texts[] = {"\xE2\x84\xAB", "\xC3\x85", "A\xCC\x8A"};
        for (int k = 0; k < 3; k++) {
            size_t n;
            int32_t *ids = encode(t, texts[k], strlen(texts[k]), 1, &n);
            int one = n == 1 && ids[0] == 259;
            if (one != (normalized || k == 0))
                fail_msg("normalized %d, text %d: %zu ids, the first %d", normalized, k, n,
                         (int)ids[0]);
            free(ids);
        }
        tr_tokenizer_free(t);
    }
}

/* The model's "" affixes are unset; others are refused naming the field; normalizers other
 * than NFC are refused naming them. */
static void test_refused(void **state)
{
    (void)state;
    tr_tokenizer_free(open_ok("HFTokenizer", NULL, NULL,
                              qwen2_json("seq.json", "{\"type\":\"Sequence\",\"normalizers\":["
                                                     "{\"type\":\"NFC\"}]}", NULL, NULL)));
    const char *plain = qwen2_json("none.json", "null", "", NULL); /* no affixes, no NFC */
    tr_tokenizer_free(open_ok("HFTokenizer", NULL, NULL, plain));
    /* an empty Sequence normalizes nothing (tokenizers' too): the ids of no normalizer */
    tr_tokenizer *none = open_ok("HFTokenizer", NULL, NULL, plain);
    tr_tokenizer *empty = open_ok("HFTokenizer", NULL, NULL,
                                  qwen2_json("empty.json", "{\"type\":\"Sequence\","
                                                           "\"normalizers\":[]}", "", NULL));
    const char *text = "Cafe\xCC\x81 \xE2\x84\xA6 <|im_end|>";
    size_t n0, n1;
    int32_t *a = encode(none, text, strlen(text), 1, &n0), *b = encode(empty, text, strlen(text), 1, &n1);
    assert_int_equal(n0, n1);
    assert_memory_equal(a, b, n0 * sizeof *a);
    assert_int_equal(n0, 12); /* the accent and the ohm sign as their bytes: not composed (10) */
    free(a);
    free(b);
    tr_tokenizer_free(none);
    tr_tokenizer_free(empty);
    static const struct { const char *normalizer, *model, *needle; } bad[] = {
        {NULL, "\"continuing_subword_prefix\":\"xyz\",", "model.continuing_subword_prefix"},
        {NULL, "\"end_of_word_suffix\":\"</w>\",", "model.end_of_word_suffix"},
        {NULL, "\"continuing_subword_prefix\":7,", "model.continuing_subword_prefix"},
        {"{\"type\":\"NFD\"}", NULL, "normalizer: a NFD normalizer is not supported"},
        {"{\"type\":\"NFKC\"}", NULL, "a NFKC normalizer"},
        {"{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFC\"},{\"type\":\"NFKD\"}]}", NULL,
         "a NFKD normalizer"},
        {"{\"type\":\"Lowercase\"}", NULL, "a Lowercase normalizer"},
        {"\"NFC\"", NULL, "normalizer"},
    };
    for (size_t c = 0; c < sizeof bad / sizeof bad[0]; c++)
        expect_refused("HFTokenizer", NULL, NULL,
                       qwen2_json("bad.json", bad[c].normalizer, bad[c].model, NULL),
                       bad[c].needle);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nfc_strings),
        cmocka_unit_test(test_normalized_added),
        cmocka_unit_test(test_refused),
    };
    return tok_test_main("tok-nfc", tests, sizeof tests / sizeof tests[0]);
}
