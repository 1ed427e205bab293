/* tokenizer/load_tiktoken.c: tiktoken rank files built here. Merges by the rank of the
 * concatenation (not by a merge list), a piece that is a token taken whole, the leftmost of
 * equal ranks, long pieces (bpe.c's heap); TikTokenizer's special ids first, its defaults,
 * given list and <SPECIAL_i> fillers, special text left as text; Llama3Tokenizer's 256 after
 * the ranks, matched in the text, its BOS, Meta's cut of long runs; decoding; the type a
 * tokenizer.model is read as; then every malformed file (file:line or element named) and bad
 * option refused, and mutated files refused or working. The ids are worked out by tiktoken's
 * rules (test_tiktoken_oracle.py checks the same code against the library). Runs under the
 * sanitizers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/core.h"
#include "data/data.h"
#include "tok_test_util.h"
#include "tokenizer/tokenizer.h"
#include "yaml/config.h"

static void b64(const unsigned char *s, size_t n, char *out)
{
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t w = (uint32_t)s[i] << 16 | (i + 1 < n ? (uint32_t)s[i + 1] << 8 : 0) |
                     (i + 2 < n ? s[i + 2] : 0);
        out[o++] = a[w >> 18];
        out[o++] = a[(w >> 12) & 63];
        out[o++] = i + 1 < n ? a[(w >> 6) & 63] : '=';
        out[o++] = i + 2 < n ? a[w & 63] : '=';
    }
    out[o] = '\0';
}

/* The 256 bytes at ranks 0..255 (byte order, or reversed), then `extra` tokens at 256...,
 * as tiktoken's lines; returns bytes written. */
static size_t rank_lines(char *out, const char *const *extra, int n_extra, int reversed)
{
    size_t o = 0;
    char enc[64];
    for (int r = 0; r < 256; r++) {
        unsigned char c = (unsigned char)(reversed ? 255 - r : r);
        b64(&c, 1, enc);
        o += (size_t)sprintf(out + o, "%s %d\n", enc, r);
    }
    for (int i = 0; i < n_extra; i++) {
        b64((const unsigned char *)extra[i], strlen(extra[i]), enc);
        o += (size_t)sprintf(out + o, "%s %d\n", enc, 256 + i);
    }
    return o;
}

static tr_tokenizer *open_tik(const char *type, const char *model, const char *pattern, int num,
                              const char *const *specials, int n_specials, int *rc)
{
    tr_tokenizer_files f = {.type = type, .tokenizer_model = model, .tiktoken_pattern = pattern,
                            .tiktoken_num_special_tokens = num,
                            .tiktoken_special_tokens = specials,
                            .n_tiktoken_special_tokens = n_specials};
    tr_tokenizer *t = NULL;
    *rc = tr_tokenizer_open(&f, &t);
    if (*rc)
        assert_null(t);
    return t;
}

#define IDS(...) ((const int32_t[]){__VA_ARGS__}), sizeof((const int32_t[]){__VA_ARGS__}) / 4

/* ranks 256.. of the small vocabulary */
static const char *const extra[] = {"bc", "ab", "abc", "aa", "aaaa", " d", "12", "'s", "xyz"};
enum { BC = 256, AB, ABC, AA, AAAA, SP_D, N12, S_QUOTE, XYZ, N_RANKS };

static void test_encode(void **state)
{
    (void)state;
    static char text[1 << 15];
    write_file(scratch("small.tiktoken"), text, rank_lines(text, extra, 9, 0));
    int rc;
    tr_tokenizer *t = open_tik("Llama3Tokenizer", scratch("small.tiktoken"), NULL, 0, NULL, 0, &rc);
    assert_int_equal(rc, TR_OK);
    assert_int_equal(tr_tokenizer_vocab_size(t), N_RANKS + 256);
    assert_int_equal(tr_tokenizer_eod(t), N_RANKS + 1);
    /* "abc" is a token: whole; "abcd": bc (256) before ab (257), then a+bc = abc */
    expect_encoded(t, "abc", 0, IDS(ABC));
    expect_encoded(t, "abcd", 0, IDS(ABC, 'd'));
    expect_encoded(t, "abab", 0, IDS(AB, AB));
    /* no pair of xyz is a token: whole, or not at all */
    expect_encoded(t, "xyz", 0, IDS(XYZ));
    expect_encoded(t, "xyzw", 0, IDS('x', 'y', 'z', 'w'));
    expect_encoded(t, "aaa", 0, IDS(AA, 'a')); /* the leftmost of equal ranks */
    expect_encoded(t, "aab", 0, IDS('a', AB)); /* the lower rank, not the leftmost pair */
    expect_encoded(t, "aaaaa", 0, IDS(AAAA, 'a'));
    /* Llama-3's regex: digits by 3, contractions any case, " d" kept with its space */
    expect_encoded(t, "12345 d'S", 0, IDS(N12, '3', '4', '5', SP_D, '\'', 'S'));
    expect_encoded(t, "x's", 0, IDS('x', S_QUOTE));
    /* specials matched, BOS first */
    expect_encoded(t, "a<|eot_id|>b<|begin_of_text|>", 1,
               IDS(N_RANKS, 'a', N_RANKS + 9, 'b', N_RANKS));
    expect_encoded(t, "<|reserved_special_token_2|><|reserved_special_token_245|><|image|>", 0,
               IDS(N_RANKS + 12, N_RANKS + 255, N_RANKS + 11));
    /* a 300-byte piece through the heap: aaaa then aa */
    char a300[302];
    memset(a300, 'a', 301);
    a300[301] = '\0';
    size_t n;
    int32_t *ids = encode(t, a300, 301, 0, &n);
    assert_int_equal(n, 76);
    for (size_t i = 0; i < 75; i++)
        assert_int_equal(ids[i], AAAA);
    assert_int_equal(ids[75], 'a');
    free(ids);
    /* Meta's cut: "b" and 25,002 letters a are cut after 25,000 letters (b, 6249 aaaa, aa, a;
     * aa, a), not merged whole (b, 6250 aaaa, aa) */
    char *run = malloc(25004);
    memset(run, 'a', 25003);
    run[0] = 'b';
    run[25003] = '\0';
    ids = encode(t, run, 25003, 0, &n);
    assert_int_equal(n, 6254);
    assert_int_equal(ids[0], 'b');
    assert_int_equal(ids[6249], AAAA);
    assert_memory_equal(ids + 6250, ((const int32_t[]){AA, 'a', AA, 'a'}), 4 * sizeof *ids);
    free(ids);
    run[24999] = ' '; /* runs of 24,999, 1 and 3: no cut; pieces "baa...a" and " aaa" */
    ids = encode(t, run, 25003, 0, &n);
    assert_int_equal(n, 6254);
    assert_memory_equal(ids + 6249, ((const int32_t[]){AAAA, AA, ' ', AA, 'a'}), 5 * sizeof *ids);
    free(ids);
    free(run);
    /* decoding: bytes, specials as their text */
    char *back;
    size_t len;
    const int32_t dec[] = {N_RANKS + 9, ABC, 0xE2, 0x82, ' ', N_RANKS + 255};
    assert_int_equal(tr_decode(t, dec, 6, &back, &len), TR_OK);
    assert_string_equal(back, "<|eot_id|>abc\xE2\x82 <|reserved_special_token_245|>");
    free(back);
    const int32_t out_of_range[] = {N_RANKS + 256};
    assert_int_equal(tr_decode(t, out_of_range, 1, &back, &len), TR_ERR_INVALID);
    assert_string_equal(tr_tokenizer_type(t), "Llama3Tokenizer");
    assert_string_equal(tr_tokenizer_model_type(scratch("small.tiktoken")), "Llama3Tokenizer");
    write_file(scratch("proto.model"), "\n\x05hello", 7);
    assert_string_equal(tr_tokenizer_model_type(scratch("proto.model")), "Llama2Tokenizer");
    assert_null(tr_tokenizer_model_type(scratch("missing.model")));
    tr_tokenizer_free(t);

    /* TikTokenizer: 1000 specials first; their text is text; v1's digits one by one */
    t = open_tik("TikTokenizer", scratch("small.tiktoken"), "v1", 0, NULL, 0, &rc);
    assert_int_equal(rc, TR_OK);
    assert_int_equal(tr_tokenizer_vocab_size(t), 1000 + N_RANKS);
    assert_int_equal(tr_tokenizer_eod(t), 2);
    expect_encoded(t, "abc12<s>", 1, IDS(1000 + ABC, 1000 + '1', 1000 + '2', 1000 + '<', 1000 + 's',
                                     1000 + '>'));
    const int32_t sp[] = {0, 1, 2, 3, 999, 1000 + AB};
    assert_int_equal(tr_decode(t, sp, 6, &back, &len), TR_OK);
    assert_string_equal(back, "<unk><s></s><SPECIAL_3><SPECIAL_999>ab");
    free(back);
    tr_tokenizer_free(t);
    /* a given list, in any order, and v2 */
    const char *const given[] = {"<s>", "<mask>", "</s>", "<unk>"};
    t = open_tik("TikTokenizer", scratch("small.tiktoken"), "v2", 5, given, 4, &rc);
    assert_int_equal(rc, TR_OK);
    assert_int_equal(tr_tokenizer_eod(t), 2);
    assert_int_equal(tr_tokenizer_vocab_size(t), 5 + N_RANKS);
    expect_encoded(t, "Abc", 0, IDS(5 + 'A', 5 + BC));
    tr_tokenizer_free(t);
    /* Megatron's --vocab-size 263 with 3 specials: ranks 0..259, so no aaaa (260) */
    tr_tokenizer_files cut = {.type = "TikTokenizer", .tokenizer_model = scratch("small.tiktoken"),
                              .tiktoken_pattern = "v1", .tiktoken_num_special_tokens = 3,
                              .tiktoken_vocab_size = 263};
    assert_int_equal(tr_tokenizer_open(&cut, &t), TR_OK);
    assert_int_equal(tr_tokenizer_vocab_size(t), 263);
    expect_encoded(t, "aaaaa", 0, IDS(3 + AA, 3 + AA, 3 + 'a'));
    cut.tiktoken_vocab_size = 300;
    tr_tokenizer_free(t);
    assert_int_equal(tr_tokenizer_open(&cut, &t), TR_ERR_INVALID);
    assert_non_null(strstr(tr_errmsg(), "small.tiktoken: 265 ranks, fewer than the 297 that "
                                        "--vocab-size 300 less 3 special tokens takes"));
    cut.tiktoken_vocab_size = 3;
    assert_int_equal(tr_tokenizer_open(&cut, &t), TR_ERR_CONFIG);
    assert_non_null(strstr(tr_errmsg(), "--vocab-size 3 is not above"));
    cut.type = "Llama3Tokenizer";
    cut.tiktoken_pattern = NULL;
    cut.tiktoken_num_special_tokens = 0;
    cut.tiktoken_vocab_size = 300;
    assert_int_equal(tr_tokenizer_open(&cut, &t), TR_ERR_CONFIG);
    assert_non_null(strstr(tr_errmsg(), "TikTokenizer only"));
    t = open_tik("TikTokenizer", scratch("small.tiktoken"), "v2", 5, given, 4, &rc);
    const int32_t sp2[] = {4, 1};
    assert_int_equal(tr_decode(t, sp2, 2, &back, &len), TR_OK);
    assert_string_equal(back, "<SPECIAL_4><mask>");
    free(back);
    tr_tokenizer_free(t);
}

/* Megatron's JSON list of n tokens (the bytes, then extra), with element `bad` replaced by
 * `with` (bad < 0: none). */
static void json_file(const char *path, int n_extra, int bad, const char *with)
{
    static char text[1 << 16];
    size_t o = (size_t)sprintf(text, "[");
    char enc[64];
    for (int i = 0; i < 256 + n_extra; i++) {
        unsigned char c = (unsigned char)i;
        if (i < 256)
            b64(&c, 1, enc);
        else
            b64((const unsigned char *)extra[i - 256], strlen(extra[i - 256]), enc);
        if (i == bad)
            o += (size_t)sprintf(text + o, "%s%s", i ? "," : "", with);
        else
            o += (size_t)sprintf(text + o, "%s{\"rank\": %d, \"token_bytes\": \"%s\", "
                                 "\"token_str\": \"x\"}", i ? "," : "", i, enc);
    }
    o += (size_t)sprintf(text + o, "]");
    write_file(path, text, o);
}

static void test_json(void **state)
{
    (void)state;
    json_file(scratch("v.json"), 8, -1, NULL);
    int rc;
    tr_tokenizer *t = open_tik("TikTokenizer", scratch("v.json"), "v2", 3, NULL, 0, &rc);
    assert_int_equal(rc, TR_OK);
    expect_encoded(t, "abcd", 0, IDS(3 + ABC, 3 + 'd'));
    tr_tokenizer_free(t);
    t = open_tik("Llama3Tokenizer", scratch("v.json"), NULL, 0, NULL, 0, &rc);
    assert_int_equal(rc, TR_OK);
    tr_tokenizer_free(t);
}

/* Opening `model` as type fails with rc and a message holding needle. */
static void refused(const char *type, const char *model, const char *pattern, int num,
                    const char *const *specials, int n_specials, int want, const char *needle)
{
    int rc;
    tr_tokenizer *t = open_tik(type, model, pattern, num, specials, n_specials, &rc);
    if (rc != want || !strstr(tr_errmsg(), needle))
        fprintf(stderr, "expected %d '%s', got %d: %s\n", want, needle, rc, tr_errmsg());
    assert_int_equal(rc, want);
    assert_non_null(strstr(tr_errmsg(), needle));
    tr_tokenizer_free(t);
}

/* Llama 3.0's names (Meta's llama3 tokenizer.py) when the params.json beside the file has no
 * use_scaled_rope, 3.1's with it; a bad params.json refused naming it and the key. */
static void test_llama3_versions(void **state)
{
    (void)state;
    static char text[1 << 15];
    size_t n_text = rank_lines(text, extra, 9, 0);
    static const struct { const char *params; int v30; } cases[] = {
        {"{\"dim\": 4096, \"n_layers\": 32, \"vocab_size\": 128256, \"rope_theta\": 500000.0}", 1},
        {"{\"dim\": 4096, \"rope_theta\": 500000.0, \"use_scaled_rope\": true}", 0},
        {NULL, 0}, /* no params.json */
    };
    for (int c = 0; c < 3; c++) {
        char sub[32], path[320];
        snprintf(sub, sizeof sub, "v%d", c);
        assert_int_equal(mkdir(scratch(sub), 0755), 0);
        snprintf(path, sizeof path, "%s/tokenizer.model", scratch(sub));
        write_file(path, text, n_text);
        if (cases[c].params) {
            char pj[320];
            snprintf(pj, sizeof pj, "%s/params.json", scratch(sub));
            write_file(pj, cases[c].params, strlen(cases[c].params));
        }
        int rc;
        tr_tokenizer *t = open_tik("Llama3Tokenizer", path, NULL, 0, NULL, 0, &rc);
        assert_int_equal(rc, TR_OK);
        assert_int_equal(tr_tokenizer_vocab_size(t), N_RANKS + 256);
        expect_encoded(t, "<|begin_of_text|><|end_of_text|><|start_header_id|><|end_header_id|>"
                          "<|eot_id|>", 0, IDS(N_RANKS, N_RANKS + 1, N_RANKS + 6, N_RANKS + 7,
                                              N_RANKS + 9));
        size_t n;
        int32_t *ids = encode(t, "<|eom_id|>", 10, 0, &n); /* 3.0: text */
        assert_int_equal(n == 1 && ids[0] == N_RANKS + 8, !cases[c].v30);
        free(ids);
        if (cases[c].v30)
            expect_encoded(t, "<|reserved_special_token_2|><|reserved_special_token_3|>"
                              "<|reserved_special_token_4|><|reserved_special_token_5|>"
                              "<|reserved_special_token_250|>", 0,
                           IDS(N_RANKS + 4, N_RANKS + 5, N_RANKS + 8, N_RANKS + 10,
                               N_RANKS + 255));
        else
            expect_encoded(t, "<|finetune_right_pad_id|><|python_tag|><|reserved_special_token_2|>"
                              "<|reserved_special_token_245|>", 0,
                           IDS(N_RANKS + 4, N_RANKS + 10, N_RANKS + 12, N_RANKS + 255));
        char *back;
        size_t len;
        const int32_t dec[] = {N_RANKS + 4, N_RANKS + 8, N_RANKS + 11, N_RANKS + 255};
        assert_int_equal(tr_decode(t, dec, 4, &back, &len), TR_OK);
        assert_string_equal(back, cases[c].v30 ? "<|reserved_special_token_2|><|reserved_special_"
                                                 "token_4|><|reserved_special_token_6|><|reserved_"
                                                 "special_token_250|>"
                                               : "<|finetune_right_pad_id|><|eom_id|><|image|>"
                                                 "<|reserved_special_token_245|>");
        free(back);
        tr_tokenizer_free(t);
    }
    static const struct { const char *params, *needle; } bad[] = {
        {"{\"dim\": 4096,", "params.json:1:13: params.json is not valid JSON"},
        {"[1, 2]", "params.json: expected a JSON object (Meta's params.json beside"},
        {"{\"use_scaled_rope\": 1}", "params.json: use_scaled_rope: expected true or false"},
        {"{\"a\": 1, \"a\": 2}", "params.json:1:12: params.json is not valid JSON: duplicate"},
    };
    assert_int_equal(mkdir(scratch("vbad"), 0755), 0);
    char path[320], pj[320];
    snprintf(path, sizeof path, "%s/tokenizer.model", scratch("vbad"));
    snprintf(pj, sizeof pj, "%s/params.json", scratch("vbad"));
    write_file(path, text, n_text);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        write_file(pj, bad[i].params, strlen(bad[i].params));
        refused("Llama3Tokenizer", path, NULL, 0, NULL, 0, TR_ERR_INVALID, bad[i].needle);
    }
}

/* The small text file with `line` (1-based, counting the 256 byte lines) replaced by `with`
 * (NULL: the line dropped). */
static const char *text_with(const char *name, int line, const char *with)
{
    static char text[1 << 16], out[1 << 16];
    size_t n = rank_lines(text, extra, 8, 1), o = 0;
    int at = 1;
    for (char *s = text; s < text + n; at++) {
        char *nl = memchr(s, '\n', (size_t)(text + n - s));
        size_t len = (size_t)(nl - s) + 1;
        if (at != line)
            memcpy(out + o, s, len), o += len;
        else if (with)
            o += (size_t)sprintf(out + o, "%s\n", with);
        s += len;
    }
    const char *path = scratch(name);
    write_file(path, out, o);
    return path;
}

static void test_refused(void **state)
{
    (void)state;
    static char huge[6000];
    memset(huge, 'Q', 4996);
    strcpy(huge + 4996, " 300");
    const struct { const char *name; int line; const char *with, *needle; } bad[] = {
        {"b64.tik", 3, "Y!== 2", ".tik:3: a character outside base64's alphabet"},
        {"len.tik", 4, "YWJ 3", ".tik:4: the token's base64 has a length that is not a multiple"},
        {"pad.tik", 5, "YQ=a 4", ".tik:5: base64 padding '=' followed by a character"},
        {"duprank.tik", 7, "YWJjZA== 5", ".tik:7: rank 5 is given twice (also line 6)"},
        {"gap.tik", 260, NULL,
         "the ranks are not 0..262: rank 259 is missing (next: 260 at line 260)"},
        {"nan.tik", 9, "YQ== 8x", ".tik:9: rank '8x' is not a number"},
        {"neg.tik", 9, "YQ== -8", ".tik:9: rank '-8' is not a number"},
        {"large.tik", 10, "YWJjZA== 16777216", ".tik:10: rank too large"},
        {"norank.tik", 11, "YWJjZA==", ".tik:11: no rank after the token"},
        {"huge.tik", 12, huge, ".tik:12: a line of 5000 bytes"},
        {"duptok.tik", 259, "YWI= 258", ".tik:259: token 'ab' is given twice (also rank 257)"},
        {"nobyte.tik", 2, "YWJjZA== 1", "no token for the single byte 0xFE"},
        {"empty.tik", 2, " 1", ".tik:2: an empty token"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const char *p = text_with(bad[i].name, bad[i].line, bad[i].with);
        refused(i & 1 ? "Llama3Tokenizer" : "TikTokenizer", p, i & 1 ? NULL : "v2", 0, NULL, 0,
                TR_ERR_INVALID, bad[i].needle);
    }
    write_file(scratch("empty"), "", 0);
    refused("Llama3Tokenizer", scratch("empty"), NULL, 0, NULL, 0, TR_ERR_INVALID,
            "empty: an empty file");
    write_file(scratch("blank"), "\n\n", 2);
    refused("Llama3Tokenizer", scratch("blank"), NULL, 0, NULL, 0, TR_ERR_INVALID,
            "blank:1: not a tiktoken rank file");
    write_file(scratch("proto.model"), "\n\x05hello", 7);
    refused("Llama3Tokenizer", scratch("proto.model"), NULL, 0, NULL, 0, TR_ERR_INVALID,
            "(a sentencepiece model is Llama2Tokenizer's)");
    refused("Llama3Tokenizer", scratch("missing"), NULL, 0, NULL, 0, TR_ERR_IO, "missing");
    /* Megatron's JSON */
    const struct { int el; const char *with, *needle; } js[] = {
        {3, "{\"rank\": 4, \"token_bytes\": \"Aw==\", \"token_str\": \"\"}",
         "element 3: \"rank\" is not 3"},
        {257, "{\"rank\": 257, \"token_bytes\": \"YWI=\"}", "element 257: expected an object"},
        {258, "{\"rank\": 258, \"token_bytes\": \"YWJj\", \"token_str\": 1, \"x\": 2}",
         "element 258: expected an object"},
        {65, "{\"rank\": 65, \"token_bytes\": \"Qg==\", \"token_str\": \"B\"}",
         "element 65: rank 65 is not the single byte"},
        {259, "{\"rank\": 259, \"token_bytes\": 7, \"token_str\": \"\"}",
         "element 259: \"token_bytes\" is not a base64 string"},
        {260, "{\"rank\": 260, \"token_bytes\": \"YWJjZA=\", \"token_str\": \"\"}",
         "element 260: the token's base64 has a length"},
        {261, "{\"rank\": 261, \"token_bytes\": \"YWI=\", \"token_str\": \"\"}",
         "element 261: token 'ab' is given twice (also rank 257)"},
    };
    for (size_t i = 0; i < sizeof js / sizeof *js; i++) {
        json_file(scratch("bad.json"), 8, js[i].el, js[i].with);
        refused("TikTokenizer", scratch("bad.json"), "v1", 0, NULL, 0, TR_ERR_INVALID,
                js[i].needle);
    }
    write_file(scratch("obj.json"), "  [{}", 5);
    refused("TikTokenizer", scratch("obj.json"), "v1", 0, NULL, 0, TR_ERR_INVALID,
            "obj.json:1:");
    /* options */
    const char *p = text_with("good.tik", 0, NULL);
    const char *const no_eos[] = {"<unk>", "<s>"}, *const twice[] = {"<unk>", "<s>", "</s>", "<s>"},
                      *const filler[] = {"<unk>", "<s>", "</s>", "<SPECIAL_5>"};
    refused("TikTokenizer", p, NULL, 0, NULL, 0, TR_ERR_CONFIG,
            "needs --tiktoken-pattern v1 or v2");
    refused("TikTokenizer", p, "v3", 0, NULL, 0, TR_ERR_CONFIG, "'v3' is not v1 or v2");
    refused("TikTokenizer", p, "v1", 0, no_eos, 2, TR_ERR_CONFIG, "</s> is missing");
    refused("TikTokenizer", p, "v1", 0, twice, 4, TR_ERR_CONFIG, "'<s>' is given twice");
    refused("TikTokenizer", p, "v1", 10, filler, 4, TR_ERR_CONFIG, "filler token 5");
    refused("TikTokenizer", p, "v1", 3, twice, 4, TR_ERR_CONFIG, "are more than");
    refused("TikTokenizer", p, "v1", 2, NULL, 0, TR_ERR_CONFIG, "not in [3, 2^24)");
    refused("Llama3Tokenizer", p, "v1", 0, NULL, 0, TR_ERR_CONFIG, "TikTokenizer only");
    refused("HFTokenizer", p, NULL, 7, NULL, 0, TR_ERR_CONFIG, "TikTokenizer only");
    int rc;
    tr_tokenizer *t = open_tik("TikTokenizer", p, "v1", 10, filler + 1, 3, &rc); /* (no <unk>) */
    assert_int_equal(rc, TR_ERR_CONFIG);
    assert_null(t);
}

/* data.tokenizer's TikTokenizer keys: validated with file:line, and what reaches the tokenizer
 * (num_special_tokens in the vocabulary model.vocab_size must hold). */
static void expect_config(const char *data, int want, const char *needle)
{
    char text[2048];
    int n = snprintf(text, sizeof text,
                     "model: {num_layers: 1, hidden_size: 8, num_attention_heads: 1, "
                     "seq_length: 8, vocab_size: 256}\ntraining: {micro_batch_size: 1, "
                     "train_iters: 1, lr: 0.001}\ndata:\n  data_path: /nonexistent/x\n%s", data);
    tr_config c;
    int rc = tr_config_load_string(text, (size_t)n, "t.yaml", NULL, 0, &c);
    if (!rc) {
        tr_data *d = NULL;
        rc = tr_data_open_config(&c, &d);
        assert_null(d);
        tr_config_free(&c);
    }
    if (rc != want || !strstr(tr_errmsg(), needle))
        fprintf(stderr, "expected %d '%s', got %d: %s\n", want, needle, rc, tr_errmsg());
    assert_int_equal(rc, want);
    assert_non_null(strstr(tr_errmsg(), needle));
}

static void test_config(void **state)
{
    (void)state;
    static char text[1 << 15], data[1024];
    write_file(scratch("cfg.tiktoken"), text, rank_lines(text, extra, 9, 0));
    /* data.tokenizer = {type: TYPE, model: the file, OTHERS}; the last four: the keys reach
     * the tokenizer (1000 + 265 ids, 7 + 265, a bad list, 265 + 256) */
    const struct { const char *type, *others, *needle; } cases[] = {
        {"TikTokenizer", "", "t.yaml:5:"},
        {"TikTokenizer", "", "needs data.tokenizer.tiktoken_pattern v1 or v2"},
        {"Llama3Tokenizer", ", tiktoken_pattern: v1",
         "tiktoken_pattern is for data.tokenizer.type TikTokenizer"},
        {"HFTokenizer", ", tiktoken_special_tokens: [<s>]", "tiktoken_special_tokens is for"},
        {"TikTokenizer", ", tiktoken_pattern: v3", "tiktoken_pattern"},
        {"TikTokenizer", ", tiktoken_pattern: v2", "(1265 ids)"},
        {"TikTokenizer", ", tiktoken_pattern: v1, tiktoken_num_special_tokens: 7, "
         "tiktoken_special_tokens: [<s>, </s>, <unk>, <pad>]", "(272 ids)"},
        {"TikTokenizer", ", tiktoken_pattern: v1, tiktoken_special_tokens: [<s>, <unk>]",
         "</s> is missing"},
        {"Llama3Tokenizer", "", "(521 ids)"},
        {"TikTokenizer", ", tiktoken_pattern: v1, tiktoken_num_special_tokens: 7, "
         "tiktoken_vocab_size: 263", "(263 ids)"},
        {"Llama3Tokenizer", ", tiktoken_vocab_size: 263", "tiktoken_vocab_size is for"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        snprintf(data, sizeof data, "  tokenizer: {type: %s, model: %s%s}\n", cases[i].type,
                 scratch("cfg.tiktoken"), cases[i].others);
        expect_config(data, TR_ERR_CONFIG, cases[i].needle);
    }
}

static void test_mutated(void **state)
{
    (void)state;
    static char text[1 << 15], m[12 << 15];
    size_t n = rank_lines(text, extra, 8, 0);
    int opened = 0;
    for (int i = 0; i < 300; i++) {
        size_t k = mutate(text, n, m);
        write_file(scratch("mut.tik"), m, k);
        int rc;
        tr_tokenizer *t = open_tik(i & 1 ? "Llama3Tokenizer" : "TikTokenizer", scratch("mut.tik"),
                                   i & 1 ? NULL : "v2", 0, NULL, 0, &rc);
        if (!rc) {
            exercise(t);
            opened++;
        } else {
            if (rc != TR_ERR_INVALID)
                fprintf(stderr, "mutated file: %s\n", tr_errmsg());
            assert_int_equal(rc, TR_ERR_INVALID);
        }
        tr_tokenizer_free(t);
    }
    print_message("%d of 300 mutated files opened\n", opened);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encode),
        cmocka_unit_test(test_json),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_llama3_versions),
        cmocka_unit_test(test_config),
        cmocka_unit_test(test_mutated),
    };
    return tok_test_main("tiktoken", tests, sizeof tests / sizeof *tests);
}
