/* tokenizer/: SentencePiece-style BPE in a tokenizer.json (Llama-2's shape). A hand-made file
 * whose ids for each text (and texts for each id list) are tokenizers 0.23's: the Prepend +
 * Replace normalizer per segment between added tokens, merges over characters, byte fallback
 * (a missing <0xA9> sends é to <unk>, fused, after the fallback bytes of the characters
 * between: tokenizers' order), Metaspace's prepend schemes and split, and decoding (a run of
 * byte tokens that is not UTF-8 is one U+FFFD a token; Strip removes one leading space). Then
 * every shape this reader does not reproduce exactly is refused naming the field, and mutated
 * files are refused or work. Runs under the sanitizers. */
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

#define SP "\xE2\x96\x81" /* U+2581 */

static const char *const added =
    "[{\"id\":0,\"content\":\"<unk>\",\"special\":true,\"normalized\":false},"
    "{\"id\":1,\"content\":\"<s>\",\"special\":true,\"normalized\":false},"
    "{\"id\":2,\"content\":\"</s>\",\"special\":true,\"normalized\":false}]";
static const char *const llama2_normalizer =
    "{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":\"" SP "\"},"
    "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"" SP "\"}]}";
static const char *const llama2_decoder =
    "{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":\"" SP
    "\"},\"content\":\" \"},{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},{\"type\":\"Strip\","
    "\"content\":\" \",\"start\":1,\"stop\":0}]}";

/* A tokenizer.json: <unk> <s> </s>, <0x00>..<0xFF> at 3 + byte except <0xA9>, then
 * ▁ 259, a 260, b 261, ▁a 262, ab 263, ▁ab 264; merges "▁ a", "a b", "▁a b". The other
 * fields as given (NULL: Llama-2's; "null" for JSON null); model_extra: more of the model's
 * keys (",\"key\":value..."; its unk_token replaces "<unk>"). */
static char *sp_json(const char *normalizer, const char *pre_tokenizer, const char *decoder,
                     const char *model_extra, size_t *len)
{
    char *j = malloc(1 << 16);
    size_t o = (size_t)sprintf(j, "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,"
                                  "\"added_tokens\":%s,\"normalizer\":%s,\"pre_tokenizer\":%s,"
                                  "\"post_processor\":null,\"decoder\":%s,\"model\":{\"type\":"
                                  "\"BPE\",\"fuse_unk\":true,\"byte_fallback\":true%s%s,\"vocab\":{"
                                  "\"<unk>\":0,\"<s>\":1,\"</s>\":2",
                               added, normalizer ? normalizer : llama2_normalizer,
                               pre_tokenizer ? pre_tokenizer : "null",
                               decoder ? decoder : llama2_decoder, model_extra ? model_extra : "",
                               model_extra && strstr(model_extra, "unk_token")
                                   ? "" : ",\"unk_token\":\"<unk>\"");
    for (int b = 0; b < 256; b++)
        if (b != 0xA9)
            o += (size_t)sprintf(j + o, ",\"<0x%02X>\":%d", b, 3 + b);
    o += (size_t)sprintf(j + o, ",\"" SP "\":259,\"a\":260,\"b\":261,\"" SP "a\":262,\"ab\":263,"
                                "\"" SP "ab\":264},\"merges\":[\"" SP " a\",\"a b\",\"" SP
                                "a b\"]}}");
    *len = o;
    return j;
}

static tr_tokenizer *open_json(const char *j, size_t len)
{
    write_file(scratch("sp.json"), j, len);
    return open_ok("HFTokenizer", NULL, NULL, scratch("sp.json"));
}

static void expect_ids(tr_tokenizer *t, const char *text, const int32_t *want, size_t n_want)
{
    size_t n;
    int32_t *ids = encode(t, text, strlen(text), 0, &n);
    if (n != n_want || memcmp(ids, want, n * sizeof *ids)) {
        fprintf(stderr, "'%s': got", text);
        for (size_t i = 0; i < n; i++)
            fprintf(stderr, " %d", (int)ids[i]);
        fprintf(stderr, "\n");
    }
    assert_int_equal(n, n_want);
    assert_memory_equal(ids, want, n * sizeof *ids);
    free(ids);
}

#define IDS(...) ((const int32_t[]){__VA_ARGS__}), sizeof((const int32_t[]){__VA_ARGS__}) / 4

static void expect_text(tr_tokenizer *t, const int32_t *ids, size_t n, const char *want)
{
    char *text;
    size_t len;
    assert_int_equal(tr_decode(t, ids, n, &text, &len), TR_OK);
    assert_int_equal(len, strlen(want));
    assert_string_equal(text, want);
    free(text);
}

static void test_llama2_shape(void **state)
{
    (void)state;
    size_t len;
    char *j = sp_json(NULL, NULL, NULL, NULL, &len);
    tr_tokenizer *t = open_json(j, len);
    free(j);
    assert_int_equal(tr_tokenizer_vocab_size(t), 265);
    assert_int_equal(tr_tokenizer_eod(t), 2); /* </s> */
    expect_ids(t, "ab ab", IDS(264, 264));
    expect_ids(t, "b a", IDS(259, 261, 262));
    expect_ids(t, "\xC3\xA9", IDS(259, 0));                     /* é: <0xA9> is missing */
    expect_ids(t, "\xC3\xA9\xC3\xA9", IDS(259, 0));             /* fused */
    expect_ids(t, "\xC3\xA9x\xC3\xA9", IDS(259, 3 + 'x', 0));   /* x's byte first */
    expect_ids(t, "a</s>b", IDS(262, 2, 259, 261));             /* Prepend per segment */
    expect_ids(t, "  a", IDS(259, 259, 262));
    expect_ids(t, "x" SP "a", IDS(259, 3 + 'x', 262));          /* U+2581 is a space */
    expect_text(t, IDS(3 + 0xE2, 3 + 0x82, 3 + 0xAC), "\xE2\x82\xAC");  /* € */
    expect_text(t, IDS(3 + 0xC3, 260), "\xEF\xBF\xBD" "a");
    expect_text(t, IDS(262, 2, 259, 261), "a</s> b");
    expect_text(t, IDS(259, 259, 260), " a");
    size_t l;
    assert_memory_equal(tr_token_bytes(t, 3 + 0x41, &l), "A", 1); /* <0x41> is the byte */
    assert_int_equal(l, 1);
    assert_memory_equal(tr_token_bytes(t, 262, &l), " a", 2);
    tr_tokenizer_free(t);
}

static void test_metaspace(void **state)
{
    (void)state;
    static const struct {
        const char *scheme;
        int split;
        int32_t a[3], b[2], c[3];
    } cases[] = { /* "a</s>a", " ab ab", "ab  ab" (tokenizers' ids) */
        {"first", 0, {262, 2, 260}, {264, 264}, {264, 259, 264}},
        {"always", 1, {262, 2, 262}, {264, 264}, {264, 259, 264}},
        {"never", 0, {260, 2, 260}, {264, 264}, {263, 259, 264}},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char pre[200];
        snprintf(pre, sizeof pre, "{\"type\":\"Metaspace\",\"replacement\":\"" SP "\","
                                  "\"prepend_scheme\":\"%s\",\"split\":%s}",
                 cases[k].scheme, cases[k].split ? "true" : "false");
        size_t len;
        char *j = sp_json("null", pre, NULL, NULL, &len);
        tr_tokenizer *t = open_json(j, len);
        free(j);
        expect_ids(t, "a</s>a", cases[k].a, 3);
        expect_ids(t, " ab ab", cases[k].b, 2);
        expect_ids(t, "ab  ab", cases[k].c, 3);
        tr_tokenizer_free(t);
    }
}

static void expect_json_refused(const char *normalizer, const char *pre, const char *decoder,
                                const char *model_extra, const char *needle)
{
    size_t len;
    char *j = sp_json(normalizer, pre, decoder, model_extra, &len);
    write_file(scratch("bad.json"), j, len);
    free(j);
    expect_refused("HFTokenizer", NULL, NULL, scratch("bad.json"), needle);
}

static void test_refused(void **state)
{
    (void)state;
    const char *replace_only = "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\""
                               SP "\"}";
    const char *meta = "{\"type\":\"Metaspace\",\"replacement\":\"" SP "\"}";
    expect_json_refused("{\"type\":\"NFD\"}", NULL, NULL, NULL, "normalizer: a NFD normalizer");
    expect_json_refused("{\"type\":\"Prepend\",\"prepend\":\"" SP "\"}", NULL, NULL, NULL,
                        "has no Replace");
    expect_json_refused(replace_only, meta, NULL, NULL, "with a Metaspace pre-tokenizer");
    expect_json_refused(NULL, "{\"type\":\"ByteLevel\"}", NULL, NULL, "must be null with a normalizer");
    expect_json_refused("null", "{\"type\":\"Metaspace\",\"replacement\":\"_\"}", NULL, NULL,
                        "pre_tokenizer.replacement");
    expect_json_refused("null", "{\"type\":\"Metaspace\",\"replacement\":\"" SP "\","
                                "\"prepend_scheme\":\"sometimes\"}", NULL, NULL, "prepend_scheme");
    expect_json_refused(NULL, NULL, "null", NULL, "decoder: expected a Sequence of Replace");
    expect_json_refused(NULL, NULL, "{\"type\":\"ByteLevel\"}", NULL, "decoder");
    expect_json_refused(NULL, NULL, "{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"ByteFallback\"},"
                                    "{\"type\":\"Replace\",\"pattern\":{\"String\":\"" SP "\"},"
                                    "\"content\":\" \"}]}", NULL, "decoder");
    expect_json_refused(NULL, NULL, "{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\","
                                    "\"pattern\":{\"String\":\"" SP "\"},\"content\":\" \"},"
                                    "{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}]}",
                        NULL, "decoder"); /* Strip without Fuse strips every token */
    expect_json_refused(NULL, NULL, "{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\","
                                    "\"pattern\":{\"String\":\"" SP "\"},\"content\":\" \"},"
                                    "{\"type\":\"Fuse\"},{\"type\":\"Strip\",\"content\":\" \","
                                    "\"start\":1,\"stop\":1}]}", NULL, "decoder");
    expect_json_refused(NULL, NULL, NULL, ",\"unk_token\":\"<nope>\"", "model.unk_token");
    expect_json_refused(NULL, NULL, NULL, ",\"dropout\":0.1", "dropout");
    /* a vocabulary token with a literal space; an added token matched after the normalizer */
    size_t len;
    char *j = sp_json(NULL, NULL, NULL, NULL, &len);
    char *at = strstr(j, "\"" SP "ab\":264");
    memcpy(at, "\"   ab\":264", 11); /* three spaces where U+2581's three bytes were */
    write_file(scratch("bad.json"), j, len);
    expect_refused("HFTokenizer", NULL, NULL, scratch("bad.json"), "spelled with a space");
    free(j);
    j = sp_json(NULL, NULL, NULL, NULL, &len);
    at = strstr(j, "\"content\":\"</s>\",\"special\":true,\"normalized\":false");
    memcpy(strstr(at, "false"), "true ", 5);
    write_file(scratch("bad.json"), j, len);
    expect_refused("HFTokenizer", NULL, NULL, scratch("bad.json"), "\"normalized\" is true");
    free(j);
}

static void test_fuzzed_files(void **state)
{
    (void)state;
    size_t len;
    char *j = sp_json(NULL, NULL, NULL, NULL, &len), *buf = malloc(12 * len + 64);
    int opened = 0, refused = 0;
    for (int trial = 0; trial < 500; trial++) {
        size_t n = mutate(j, len, buf);
        write_file(scratch("fuzz.json"), buf, n);
        int ok = open_mutated("HFTokenizer", NULL, NULL, scratch("fuzz.json"));
        opened += ok;
        refused += !ok;
    }
    fprintf(stderr, "fuzzed SentencePiece-style files: %d opened, %d refused\n", opened, refused);
    assert_true(refused > 100 && opened > 10);
    free(buf);
    free(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama2_shape),
        cmocka_unit_test(test_metaspace),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_fuzzed_files),
    };
    return tok_test_main("sp-test", tests, sizeof tests / sizeof tests[0]);
}
