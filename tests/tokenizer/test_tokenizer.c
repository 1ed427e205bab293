/* tokenizer/: merges against a naive reference (short and long pre-tokens), UTF-8 repair as
 * Python's decode("utf-8", "replace"), added tokens and templates, decode(encode(x)) = x,
 * Falcon's Punctuation and Digits pre-tokenizers (and their refusals); and
 * malformed files (hand-made and fuzzed: flipped, inserted and deleted bytes, cuts) refused
 * with an error, never a crash, also for JSON Lines through tr_preprocess. Runs under the
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
#include <unistd.h>

#include "data/data.h"
#include "tok_test_util.h"
#include "tokenizer/tokenizer.h"

/* A vocabulary of the 256 bytes plus merged tokens of the merge list "l r" pairs (raw bytes,
 * ASCII letters only here); writes vocab.json and merges.txt. */
static void write_gpt2(const char *const *merges, int n_merges, const char *vocab, const char *mf)
{
    char *v = malloc(1 << 16), *m = malloc(1 << 16);
    size_t vo = byte_vocab(v), mo = 0;
    mo += (size_t)sprintf(m, "#version: 0.2\n");
    for (int i = 0; i < n_merges; i++) {
        const char *sp = strchr(merges[i], ' ');
        vo += (size_t)sprintf(v + vo, ",\"%.*s%s\":%d", (int)(sp - merges[i]), merges[i], sp + 1, 256 + i);
        mo += (size_t)sprintf(m + mo, "%s\n", merges[i]);
    }
    vo += (size_t)sprintf(v + vo, ",\"<|endoftext|>\":%d}", 256 + n_merges);
    write_file(vocab, v, vo);
    write_file(mf, m, mo);
    free(v);
    free(m);
}

static tr_tokenizer *open_gpt2(const char *vocab, const char *merges)
{
    return open_ok("GPT2BPETokenizer", vocab, merges, NULL);
}

/* Naive merging of a word over the test vocabulary (byte b = id b, merge r = id 256 + r, its
 * parts' ids in left[r], right[r]): repeatedly the lowest-ranked pair, leftmost first. */
static size_t naive_bpe(const int *left, const int *right, int n_merges, const char *w, size_t n,
                        int32_t *out)
{
    size_t m = n;
    for (size_t i = 0; i < n; i++)
        out[i] = (unsigned char)w[i];
    for (;;) {
        int best = -1;
        size_t at = 0;
        for (size_t i = 0; i + 1 < m; i++)
            for (int r = 0; r < n_merges && (best < 0 || r < best); r++)
                if (left[r] == out[i] && right[r] == out[i + 1])
                    best = r, at = i;
        if (best < 0)
            return m;
        out[at] = 256 + best;
        memmove(out + at + 1, out + at + 2, (m - at - 2) * sizeof *out);
        m--;
    }
}

/* The id of a token's text in the test vocabulary. */
static int id_of(const char *const *merges, int n_merges, const char *s, size_t len)
{
    if (len == 1)
        return (unsigned char)s[0];
    for (int r = 0; r < n_merges; r++) {
        const char *sp = strchr(merges[r], ' ');
        size_t a = (size_t)(sp - merges[r]), b = strlen(sp + 1);
        if (a + b == len && !memcmp(merges[r], s, a) && !memcmp(sp + 1, s + a, b))
            return 256 + r;
    }
    return -1;
}

static void test_merges_match_naive(void **state)
{
    (void)state;
    static const char *const merges[] = {"a b", "b a", "a a", "ab a", "aa aa", "b b", "ba b", "c a",
                                         "aaaa aaaa", "ab ab", "abab a", "c c"};
    int nm = (int)(sizeof merges / sizeof merges[0]);
    write_gpt2(merges, nm, scratch("v.json"), scratch("m.txt"));
    tr_tokenizer *t = open_gpt2(scratch("v.json"), scratch("m.txt"));
    assert_int_equal(tr_tokenizer_vocab_size(t), 256 + nm + 1);
    assert_int_equal(tr_tokenizer_eod(t), 256 + nm);
    static int32_t want[2000];
    int left[16], right[16];
    char w[2000];
    for (int r = 0; r < nm; r++) {
        const char *sp = strchr(merges[r], ' ');
        left[r] = id_of(merges, nm, merges[r], (size_t)(sp - merges[r]));
        right[r] = id_of(merges, nm, sp + 1, strlen(sp + 1));
        assert_true(left[r] >= 0 && right[r] >= 0);
    }
    for (int trial = 0; trial < 330; trial++) { /* one word: letters only, short and long */
        size_t n = trial < 300 ? 1 + rnd() % 40 : 129 + rnd() % 1500;
        for (size_t i = 0; i < n; i++)
            w[i] = "abc"[rnd() % (trial % 2 ? 2 : 3)];
        size_t nw = naive_bpe(left, right, nm, w, n, want), got;
        int32_t *ids = encode(t, w, n, 0, &got);
        assert_int_equal(got, nw);
        assert_memory_equal(ids, want, nw * sizeof *ids);
        free(ids);
    }
    tr_tokenizer_free(t);
}

/* Python: bytes.decode("utf-8", "replace").encode() of each input. */
static void test_utf8_repair(void **state)
{
    (void)state;
    static const struct { const char *in, *out; } cases[] = {
        {"\x80", "\xEF\xBF\xBD"},
        {"a\xE2\x82z", "a\xEF\xBF\xBDz"},
        {"\xF0\x9F\x98", "\xEF\xBF\xBD"},
        {"\xED\xA0\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
        {"\xC0\xAF", "\xEF\xBF\xBD\xEF\xBF\xBD"},
        {"\xE1\x80\xE1\x80\x80", "\xEF\xBF\xBD\xE1\x80\x80"},
        {"\xF4\x90\x80\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
        {"\xE0\x80\xAF", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
        {"ok \xC3\xA9 \xF0\x9F\x98\x80", "ok \xC3\xA9 \xF0\x9F\x98\x80"},
        {"\xFF\xFE", "\xEF\xBF\xBD\xEF\xBF\xBD"},
    };
    write_gpt2(NULL, 0, scratch("v0.json"), scratch("m0.txt"));
    tr_tokenizer *t = open_gpt2(scratch("v0.json"), scratch("m0.txt"));
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        size_t n, len;
        int32_t *ids = encode(t, cases[c].in, strlen(cases[c].in), 0, &n);
        char *text;
        assert_int_equal(tr_decode(t, ids, n, &text, &len), TR_OK);
        assert_string_equal(text, cases[c].out);
        free(text);
        free(ids);
    }
    int32_t bad = 99999;
    char *text;
    assert_int_equal(tr_decode(t, &bad, 1, &text, NULL), TR_ERR_INVALID);
    tr_tokenizer_free(t);
}

/* An HF file: Split (Llama-3's regex) + ByteLevel, added tokens, a BOS template. */
static const char *hf_json =
    "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,"
    "\"added_tokens\":[{\"id\":259,\"content\":\"<|bos|>\",\"special\":true},"
    "{\"id\":260,\"content\":\"<|eot|>\",\"special\":true}],\"normalizer\":null,"
    "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":"
    "{\"Regex\":\"(?i:'s|'t)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+|\\\\s+(?!\\\\S)|\\\\s+\"},"
    "\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\",\"add_prefix_space\":false,"
    "\"use_regex\":false}]},\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":["
    "{\"SpecialToken\":{\"id\":\"<|bos|>\",\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],"
    "\"special_tokens\":{\"<|bos|>\":{\"id\":\"<|bos|>\",\"ids\":[259],\"tokens\":[\"<|bos|>\"]}}},"
    "\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\",\"dropout\":null,"
    "\"unk_token\":null,\"ignore_merges\":true,\"vocab\":VOCAB,\"merges\":[[\"a\",\"b\"],\"ab c\"]}}";

/* hf_json with the 256 bytes + "ab" (256), "abc" (257), "cab" (258, no merge makes it). */
static char *hf_text(size_t *len)
{
    char *v = malloc(8192), *out = malloc(16384);
    size_t vo = byte_vocab(v);
    vo += (size_t)sprintf(v + vo, ",\"ab\":256,\"abc\":257,\"cab\":258}");
    const char *at = strstr(hf_json, "VOCAB");
    size_t head = (size_t)(at - hf_json);
    memcpy(out, hf_json, head);
    memcpy(out + head, v, vo);
    strcpy(out + head + vo, at + 5);
    *len = strlen(out);
    free(v);
    return out;
}

static void test_hf_features(void **state)
{
    (void)state;
    size_t len, n;
    char *j = hf_text(&len);
    write_file(scratch("tok.json"), j, len);
    free(j);
    tr_tokenizer_files f = {.type = "HFTokenizer", .tokenizer_model = scratch("tok.json")};
    tr_tokenizer *t;
    assert_int_equal(tr_tokenizer_open(&f, &t), TR_OK);
    assert_int_equal(tr_tokenizer_vocab_size(t), 261);
    assert_int_equal(tr_tokenizer_eod(t), -1); /* no known name, no tokenizer_config.json */
    /* "abc<|eot|>cab it'S": bos, abc, eot, cab (ignore_merges: whole word), " ", "it", "'S" */
    const char *text = "abc<|eot|>cab it'S";
    int32_t *ids = encode(t, text, strlen(text), 1, &n);
    int32_t want[] = {259, 257, 260, 258, ' ', 'i', 't', '\'', 'S'};
    assert_int_equal(n, sizeof want / sizeof want[0]);
    assert_memory_equal(ids, want, sizeof want);
    char *back;
    assert_int_equal(tr_decode(t, ids + 1, n - 1, &back, NULL), TR_OK);
    assert_string_equal(back, text);
    free(back);
    free(ids);
    tr_tokenizer_free(t);
}

static void test_malformed_files(void **state)
{
    (void)state;
    static const char *const merges[] = {"a b"};
    write_gpt2(merges, 1, scratch("good.json"), scratch("good.txt"));
    char m[512], v[512]; /* scratch() names rotate: keep copies */
    snprintf(m, sizeof m, "%s", scratch("good.txt"));
    snprintf(v, sizeof v, "%s", scratch("good.json"));
    static const struct { const char *vocab, *merges, *needle; } gpt2[] = {
        {"[1, 2]", NULL, "not a JSON object"},
        {"{\"a\": -1}", NULL, "id -1, out of range"},
        {"{\"a\": 1.5}", NULL, "not an integer"},
        {"{\"a\": 1, \"a\": 2}", NULL, "not valid JSON"},
        {"{\"a\": 1, \"b\": 1}", NULL, "two different tokens"},
        {"{\"\\u4e00\": 1}", NULL, "byte alphabet"},
        {"{\"a\": 0}", NULL, "single byte"},
        {"{\"a\": 3000000000}", NULL, "out of range"},
        {"{\"a\": 1", NULL, "not valid JSON"},
        {NULL, "#version: 0.2\na b c\n", "two tokens"},
        {NULL, "a b\n\nb a\n", "empty line"},
        {NULL, "x y\n", "not in the vocabulary"},
        {NULL, "a\n", "two tokens"},
        {NULL, "\xe4\xb8\x80 a\n", "byte alphabet"},
    };
    for (size_t c = 0; c < sizeof gpt2 / sizeof gpt2[0]; c++) {
        if (gpt2[c].vocab)
            write_file(scratch("bad.json"), gpt2[c].vocab, strlen(gpt2[c].vocab));
        if (gpt2[c].merges)
            write_file(scratch("bad.txt"), gpt2[c].merges, strlen(gpt2[c].merges));
        expect_refused("GPT2BPETokenizer", gpt2[c].vocab ? scratch("bad.json") : v,
                       gpt2[c].merges ? scratch("bad.txt") : m, NULL, gpt2[c].needle);
    }
    expect_refused("GPT2BPETokenizer", scratch("missing.json"), m, NULL, "cannot open");
    expect_refused("GPT2BPETokenizer", v, NULL, NULL, "needs --merge-file");
    expect_refused("Sentencepiece", NULL, NULL, NULL, "not one of");
    expect_refused("HFTokenizer", v, NULL, scratch("x"), "not used");
    size_t len;
    char *good = hf_text(&len);
    static const struct { const char *from, *to, *needle; } hf[] = {
        {"\"normalizer\":null", "\"normalizer\":{\"type\":\"NFD\"}", "normalizer: a NFD normalizer"},
        {"\"type\":\"BPE\"", "\"type\":\"WordPiece\"", "WordPiece"},
        {"\"dropout\":null", "\"dropout\":0.1", "dropout"},
        {"{\"type\":\"Split\"", "{\"type\":\"Metaspace\"", "Metaspace"},
        {"(?i:'s|'t)", "(?i:'s|'t", "PCRE2 refuses"},
        {"\"Isolated\"", "\"Sideways\"", "behavior"},
        {"\"special\":true},{", "\"special\":true,\"lstrip\":true},{", "lstrip"},
        {"\"ids\":[259]", "\"ids\":[99999]", "outside the vocabulary"},
        {"\"ids\":[259]", "\"ids\":[\"x\"]", "integers"},
        {"{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}", "{\"type\":\"Split\",\"pattern\":{\"String\":\"x\"},\"behavior\":\"Removed\"}", "no ByteLevel"},
        {"\"decoder\":{\"type\":\"ByteLevel\"}", "\"decoder\":{\"type\":\"WordPiece\"}", "decoder"},
        {"[[\"a\",\"b\"],", "[[\"a\",\"q\"],", "merged token"},
        {"[[\"a\",\"b\"],", "[[\"a\"],", "expected"},
        {"\"ab c\"", "\"ab  c\"", "one space"},
        {"\"truncation\":null", "\"truncation\":{}", "truncation"},
        {"{\"version\"", "[{\"version\"", "not valid JSON"},
        {"\"content\":\"<|bos|>\"", "\"content\":\"\"", "non-empty"},
    };
    for (size_t c = 0; c < sizeof hf / sizeof hf[0]; c++) {
        char *at = strstr(good, hf[c].from);
        assert_non_null(at);
        char *bad = malloc(len + 256);
        size_t head = (size_t)(at - good);
        memcpy(bad, good, head);
        strcpy(bad + head, hf[c].to);
        strcat(bad, at + strlen(hf[c].from));
        write_file(scratch("bad-hf.json"), bad, strlen(bad));
        expect_refused("HFTokenizer", NULL, NULL, scratch("bad-hf.json"), hf[c].needle);
        free(bad);
    }
    free(good);
}

/* Falcon's pre-tokenizer (tiiuae/falcon-7b): Punctuation (Contiguous), ByteLevel, Digits (not
 * individual), Split "[0-9][0-9][0-9]"; PRE replaced by the test's steps. */
static const char *falcon_json =
    "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":[{\"id\":0,"
    "\"content\":\">>TITLE<<\",\"special\":true,\"normalized\":false}],\"normalizer\":null,"
    "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[PRE]},\"post_processor\":"
    "{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"trim_offsets\":false,\"use_regex\":true},"
    "\"decoder\":{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"trim_offsets\":true,"
    "\"use_regex\":true},\"model\":{\"type\":\"BPE\","
    "\"dropout\":null,\"unk_token\":null,\"continuing_subword_prefix\":null,"
    "\"end_of_word_suffix\":null,\"fuse_unk\":false,\"vocab\":VOCAB,\"merges\":[\"1 2\","
    "\"12 3\",\"4 5\",\"123 4\",\", ,\",\"\u00c2 \u00b2\",\"\u00d0 \u00bc\",\"\u00d9 \u00a3\"]}}";
static const char *falcon_pre =
    "{\"type\":\"Punctuation\",\"behavior\":\"Contiguous\"},{\"type\":\"ByteLevel\","
    "\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":true},{\"type\":\"Digits\","
    "\"individual_digits\":false},{\"type\":\"Split\",\"pattern\":{\"Regex\":"
    "\"[0-9][0-9][0-9]\"},\"behavior\":\"Isolated\",\"invert\":false}";

/* falcon_json with `pre` as its steps, written to scratch(name): ids 0 >>TITLE<<, 1-256 the
 * bytes (byte b is 1 + b), then 257 "12", 258 "123", 259 "45", 260 "1234", 261 ",,",
 * 262 "\u00b2" (C2 B2), 263 "\u043c" (D0 BC), 264 "\u0663" (D9 A3). */
static const char *write_falcon(const char *name, const char *pre)
{
    char *v = malloc(8192), *out = malloc(16384);
    if (!v || !out) abort();
    size_t vo = (size_t)sprintf(v, "{\">>TITLE<<\":0");
    for (int b = 0; b < 256; b++) {
        vo += (size_t)sprintf(v + vo, ",\"");
        vo += spell_byte(b, v + vo);
        if (b == '"' || b == '\\') { /* escaped in JSON */
            v[vo - 1] = '\\';
            v[vo++] = (char)b;
        }
        vo += (size_t)sprintf(v + vo, "\":%d", 1 + b);
    }
    sprintf(v + vo, ",\"12\":257,\"123\":258,\"45\":259,\"1234\":260,\",,\":261,"
                    "\"\u00c2\u00b2\":262,\"\u00d0\u00bc\":263,\"\u00d9\u00a3\":264}");
    const char *at_pre = strstr(falcon_json, "PRE"), *at_v = strstr(falcon_json, "VOCAB");
    sprintf(out, "%.*s%s%.*s%s%s", (int)(at_pre - falcon_json), falcon_json, pre,
            (int)(at_v - at_pre - 3), at_pre + 3, v, at_v + 5);
    write_file(scratch(name), out, strlen(out));
    free(v);
    free(out);
    return scratch(name);
}

static void expect_ids(tr_tokenizer *t, const char *text, const int32_t *want, size_t n_want)
{
    size_t n;
    int32_t *ids = encode(t, text, strlen(text), 0, &n);
    if (n != n_want || memcmp(ids, want, n * sizeof *ids)) {
        fprintf(stderr, "'%s': got", text);
        for (size_t i = 0; i < n; i++)
            fprintf(stderr, " %d", ids[i]);
        fprintf(stderr, "\n");
    }
    assert_int_equal(n, n_want);
    assert_memory_equal(ids, want, n * sizeof *ids);
    char *back;
    assert_int_equal(tr_decode(t, ids, n, &back, NULL), TR_OK);
    assert_string_equal(back, text);
    free(back);
    free(ids);
}

/* Punctuation and Digits (Falcon's Sequence; the figures are tokenizers 0.23.3's): punctuation
 * runs one piece, digits cut in threes, and after ByteLevel the Digits step sees GPT-2's byte
 * alphabet, where the second byte of "\u00b2" (C2 B2) and of "\u043c" (D0 BC) are the numeric
 * U+00B2 and U+00BC: their merges never apply. Digits before ByteLevel: Unicode digits. And each
 * refusal names its field. */
static void test_punctuation_digits(void **state)
{
    (void)state;
    tr_tokenizer *t = open_ok("HFTokenizer", NULL, NULL, write_falcon("falcon.json", falcon_pre));
    const int32_t a = 1 + 'a', sp = 1 + ' ';
    expect_ids(t, "12345", (int32_t[]){258, 259}, 2);              /* "123" "45", not "1234" */
    expect_ids(t, "1234", (int32_t[]){258, 1 + '4'}, 2);
    expect_ids(t, "a,,b", (int32_t[]){a, 261, 1 + 'b'}, 3);         /* Contiguous: ",," */
    expect_ids(t, ">>TITLE<<12", (int32_t[]){0, 257}, 2);
    expect_ids(t, "\u00b2\u043c\u0663", (int32_t[]){1 + 0xC2, 1 + 0xB2, 1 + 0xD0, 1 + 0xBC, 264},
               5);
    expect_ids(t, "x \u00b2", (int32_t[]){1 + 'x', sp, 1 + 0xC2, 1 + 0xB2}, 4);
    tr_tokenizer_free(t);
    /* Digits (individual) before ByteLevel: "\u0663" is a digit of its own, "12" two pieces */
    t = open_ok("HFTokenizer", NULL, NULL, write_falcon("digits-first.json",
        "{\"type\":\"Digits\",\"individual_digits\":true},{\"type\":\"ByteLevel\","
        "\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":false}"));
    expect_ids(t, "\u00b2\u043c\u066312", (int32_t[]){262, 263, 264, 1 + '1', 1 + '2'}, 5);
    tr_tokenizer_free(t);
    /* Punctuation's default is Isolated: ",," two pieces */
    t = open_ok("HFTokenizer", NULL, NULL, write_falcon("punct-default.json",
        "{\"type\":\"Punctuation\"},{\"type\":\"ByteLevel\",\"use_regex\":false,"
        "\"add_prefix_space\":false,\"trim_offsets\":true}"));
    expect_ids(t, "a,,1234", (int32_t[]){a, 1 + ',', 1 + ',', 260}, 4);
    tr_tokenizer_free(t);
    static const struct { const char *pre, *needle; } bad[] = {
        {"{\"type\":\"Punctuation\",\"behavior\":\"Sideways\"},{\"type\":\"ByteLevel\"}",
         "pre_tokenizer.behavior: Punctuation's behavior \"Sideways\" is not one of Isolated"},
        {"{\"type\":\"Punctuation\",\"behavior\":\"contiguous\"},{\"type\":\"ByteLevel\"}",
         "pre_tokenizer.behavior: Punctuation's behavior \"contiguous\""},
        {"{\"type\":\"Punctuation\",\"behavior\":null},{\"type\":\"ByteLevel\"}",
         "pre_tokenizer.behavior: Punctuation's behavior (not a string)"},
        {"{\"type\":\"ByteLevel\"},{\"type\":\"Digits\",\"individual_digits\":\"true\"}",
         "pre_tokenizer.individual_digits: Digits needs true or false"},
        {"{\"type\":\"ByteLevel\"},{\"type\":\"Digits\",\"individual_digits\":1}",
         "pre_tokenizer.individual_digits"},
        {"{\"type\":\"ByteLevel\"},{\"type\":\"Digits\"}", "pre_tokenizer.individual_digits"},
        {"{\"type\":\"Split\",\"pattern\":{\"String\":\"x\"}},{\"type\":\"ByteLevel\"}",
         "pre_tokenizer.behavior: Split's behavior (absent)"},
        {"{\"type\":\"ByteLevel\"},{\"type\":\"ByteLevel\"}", "a second ByteLevel"},
        {"{\"type\":\"UnicodeScripts\"},{\"type\":\"ByteLevel\"}", "\"UnicodeScripts\" is not"},
        {"{\"type\":\"Punctuation\"},{\"type\":\"Digits\",\"individual_digits\":false}",
         "no ByteLevel"},
    };
    for (size_t c = 0; c < sizeof bad / sizeof bad[0]; c++)
        expect_refused("HFTokenizer", NULL, NULL, write_falcon("bad-falcon.json", bad[c].pre),
                       bad[c].needle);
}

/* The end of document from a tokenizer_config.json beside tokenizer.json (in a folder of its
 * own): its eos_token as a string or an AddedToken object, else (no file, or no eos_token in it)
 * the first known name; a file that is there but broken (not JSON, a repeated key, not an
 * object, an eos_token of another shape or naming no token) is refused naming the file. */
static void test_tokenizer_config_eos(void **state)
{
    (void)state;
    char cfg_dir[300], model[400], cfg[400];
    snprintf(cfg_dir, sizeof cfg_dir, "%s/cfg", dir);
    snprintf(model, sizeof model, "%s/tokenizer.json", cfg_dir);
    snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", cfg_dir);
    assert_int_equal(mkdir(cfg_dir, 0755), 0);
    size_t len;
    char *j = hf_text(&len), *at = strstr(j, "<|eot|>"); /* 260 becomes <|endoftext|> */
    assert_non_null(at);
    char *named = malloc(len + 32);
    if (!named) abort();
    sprintf(named, "%.*s<|endoftext|>%s", (int)(at - j), j, at + strlen("<|eot|>"));
    write_file(model, named, strlen(named));
    free(named);
    free(j);
    tr_tokenizer_files f = {.type = "HFTokenizer", .tokenizer_model = model};
    static const struct { const char *config; int32_t eod; } good[] = {
        {NULL, 260}, /* no tokenizer_config.json: the first known name */
        {"{\"eos_token\": \"<|bos|>\"}", 259},
        {"{\"add_bos_token\": true, \"eos_token\": {\"__type\": \"AddedToken\", \"content\": "
         "\"<|bos|>\", \"lstrip\": false, \"normalized\": false, \"rstrip\": false, "
         "\"single_word\": false, \"special\": true}}", 259},
        {"{\"eos_token\": \"abc\"}", 257}, /* a vocabulary entry */
        {"{\"bos_token\": \"<|bos|>\"}", 260}, /* no eos_token: the first known name */
        {"{\"eos_token\": null}", 260},           /* (transformers' way of saying none) */
    };
    for (size_t c = 0; c < sizeof good / sizeof good[0]; c++) {
        unlink(cfg);
        if (good[c].config)
            write_file(cfg, good[c].config, strlen(good[c].config));
        tr_tokenizer *t = NULL;
        int rc = tr_tokenizer_open(&f, &t);
        if (rc)
            fprintf(stderr, "config %zu: %s\n", c, tr_errmsg());
        assert_int_equal(rc, TR_OK);
        assert_int_equal(tr_tokenizer_eod(t), good[c].eod);
        tr_tokenizer_free(t);
    }
    static const struct { const char *config, *needle; } bad[] = {
        {"{\"eos_token\": \"<|eot_id|>\"", "not valid JSON"}, /* the fuzzer's truncated file */
        {"", "not valid JSON"},
        {"{\"eos_token\": \"<|bos|>\", \"eos_token\": \"<|bos|>\"}", "duplicate"},
        {"{\"eos_token\": \"<|bos|>\", \"x\": 1, \"x\": 2}", "duplicate"},
        {"[\"<|bos|>\"]", "expected a JSON object"},
        {"{\"eos_token\": 260}", "eos_token"},
        {"{\"eos_token\": [\"<|bos|>\"]}", "eos_token"},
        {"{\"eos_token\": {\"id\": 259}}", "content"},
        {"{\"eos_token\": {\"content\": 259}}", "content"},
        {"{\"eos_token\": \"<|eot_id|>\"}", "neither an added token nor in the vocabulary"},
        {"{\"eos_token\": {\"content\": \"<|eot_id|>\"}}", "'<|eot_id|>'"},
        {"{\"eos_token\": \"\"}", "neither an added token"},
        {"{\"eos_token\": \"<|bos|>\\u0000\"}", "not valid JSON"},
    };
    for (size_t c = 0; c < sizeof bad / sizeof bad[0]; c++) {
        write_file(cfg, bad[c].config, strlen(bad[c].config));
        expect_refused("HFTokenizer", NULL, NULL, model, bad[c].needle);
        assert_non_null(strstr(tr_errmsg(), cfg)); /* the message names the file */
        assert_int_equal(tr_tokenizer_open(&f, &(tr_tokenizer *){NULL}), TR_ERR_INVALID);
    }
    unlink(cfg); /* a folder in its place: an error too, not the fallback */
    assert_int_equal(mkdir(cfg, 0755), 0);
    expect_refused("HFTokenizer", NULL, NULL, model, "tokenizer_config.json");
    rmdir(cfg);
}

/* Ids are below 2^24: the id table is sized by the largest id (12 bytes each), so a tiny file
 * naming id 2^31-2 would cost ~26 GB. An added token, a tokenizer.json vocabulary entry and a
 * vocab.json entry at 2^24 - 1 open (vocabulary 2^24: ~200 MB); at 2^24 and above they are
 * refused naming the file, the token and the id. The cases go up from 2^24, so a loader that
 * lost the cap fails at the first (~200 MB) and never reaches the gigabytes. */
static void test_id_cap(void **state)
{
    (void)state;
    size_t len;
    char *good = hf_text(&len), *bad = malloc(len + 256);
    if (!bad) abort();
    const char *added = "{\"id\":260,\"content\":\"<|eot|>\"", *entry = "\"cab\":258";
    char *at_added = strstr(good, added), *at_entry = strstr(good, entry);
    assert_non_null(at_added);
    assert_non_null(at_entry);
    static const long long ids[] = {(1 << 24) - 1, 1 << 24, (1 << 24) + 1, 100000000, 2147483646,
                                    2147483647, 1LL << 40};
    for (int where = 0; where < 3; where++) {
        for (size_t c = 0; c < sizeof ids / sizeof ids[0]; c++) {
            const char *token = where == 0 ? "<|eot|>" : where == 1 ? "cab" : "<|endoftext|>";
            char rep[96], needle[64], path[300], merges[300];
            snprintf(path, sizeof path, "%s", scratch(where < 2 ? "big-id.json" : "big-id-v.json"));
            snprintf(merges, sizeof merges, "%s", scratch("big-id-m.txt"));
            if (where < 2) { /* tokenizer.json: the added token <|eot|>, or the entry "cab" */
                char *at = where == 0 ? at_added : at_entry;
                size_t from = strlen(where == 0 ? added : entry);
                snprintf(rep, sizeof rep, where == 0 ? "{\"id\":%lld,\"content\":\"<|eot|>\""
                                                     : "\"cab\":%lld", ids[c]);
                sprintf(bad, "%.*s%s%s", (int)(at - good), good, rep, at + from);
                write_file(path, bad, strlen(bad));
            } else { /* vocab.json: the 256 bytes and <|endoftext|>; no merges */
                char *v = malloc(1 << 16);
                size_t vo = byte_vocab(v);
                vo += (size_t)sprintf(v + vo, ",\"<|endoftext|>\":%lld}", ids[c]);
                write_file(path, v, vo);
                free(v);
                write_file(merges, "", 0);
            }
            tr_tokenizer_files f = {.type = where < 2 ? "HFTokenizer" : "GPT2BPETokenizer",
                                    .vocab_file = where < 2 ? NULL : path,
                                    .merge_file = where < 2 ? NULL : merges,
                                    .tokenizer_model = where < 2 ? path : NULL};
            if (ids[c] < 1 << 24) {
                tr_tokenizer *t = NULL;
                int rc = tr_tokenizer_open(&f, &t);
                if (rc)
                    fprintf(stderr, "id %lld: %s\n", ids[c], tr_errmsg());
                assert_int_equal(rc, TR_OK);
                assert_int_equal(tr_tokenizer_vocab_size(t), 1 << 24);
                size_t n;
                const char *b = tr_token_bytes(t, (int32_t)ids[c], &n);
                assert_non_null(b);
                assert_memory_equal(b, token, n);
                tr_tokenizer_free(t);
                continue;
            }
            snprintf(needle, sizeof needle, "has id %lld, out of range", ids[c]);
            expect_refused(f.type, f.vocab_file, f.merge_file, f.tokenizer_model, needle);
            assert_non_null(strstr(tr_errmsg(), path));
            snprintf(needle, sizeof needle, "token '%s'", token);
            assert_non_null(strstr(tr_errmsg(), needle));
        }
    }
    free(bad);
    free(good);
}

static void test_fuzzed_files(void **state)
{
    (void)state;
    static const char *const merges[] = {"a b", "ab c", "c c"};
    write_gpt2(merges, 3, scratch("fz.json"), scratch("fz.txt"));
    size_t lens[3];
    char *orig[3];
    FILE *f;
    for (int k = 0; k < 2; k++) {
        f = fopen(scratch(k ? "fz.txt" : "fz.json"), "rb");
        orig[k] = malloc(1 << 16);
        lens[k] = fread(orig[k], 1, 1 << 16, f);
        fclose(f);
    }
    orig[2] = hf_text(&lens[2]);
    char *buf = malloc(1 << 18);
    int opened = 0, refused = 0;
    for (int trial = 0; trial < 600; trial++) {
        int which = trial % 3;
        size_t n = mutate(orig[which], lens[which], buf);
        write_file(scratch("fuzz"), buf, n);
        int ok = open_mutated(which == 2 ? "HFTokenizer" : "GPT2BPETokenizer",
                              which == 2 ? NULL : which == 0 ? scratch("fuzz") : scratch("fz.json"),
                              which == 2 ? NULL : which == 1 ? scratch("fuzz") : scratch("fz.txt"),
                              which == 2 ? scratch("fuzz") : NULL);
        opened += ok;
        refused += !ok;
    }
    fprintf(stderr, "fuzzed files: %d opened, %d refused\n", opened, refused);
    assert_true(refused > 100 && opened > 20);
    /* JSON Lines: fuzzed lines are bad lines, never a crash */
    const char *good = "{\"text\": \"abc cab\", \"n\": [1, 2.5, null]}\n{\"text\": [\"a\", \"\"]}\n";
    tr_tokenizer_files fl = {.type = "GPT2BPETokenizer", .vocab_file = scratch("fz.json"),
                             .merge_file = scratch("fz.txt")};
    tr_tokenizer *t;
    assert_int_equal(tr_tokenizer_open(&fl, &t), TR_OK);
    for (int trial = 0; trial < 200; trial++) {
        size_t n = 0;
        for (int rep = 0; rep < 20; rep++)
            n += mutate(good, strlen(good), buf + n);
        write_file(scratch("fuzz.jsonl"), buf, n);
        const char *inputs[] = {scratch("fuzz.jsonl")}, *keys[] = {"text"};
        tr_preprocess_options o = {inputs, 1, scratch("fz-out"), keys, 1, 0, t, 1, 1 + trial % 3,
                                   trial % 2, 0, TR_SFT_NONE};
        tr_preprocess_stats st;
        int rc = tr_preprocess(&o, &st);
        assert_true(rc == TR_OK || (rc == TR_ERR_INVALID && !(trial % 2)));
    }
    tr_tokenizer_free(t);
    free(buf);
    for (int k = 0; k < 3; k++)
        free(orig[k]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_merges_match_naive), cmocka_unit_test(test_utf8_repair),
        cmocka_unit_test(test_hf_features), cmocka_unit_test(test_punctuation_digits),
        cmocka_unit_test(test_malformed_files),
        cmocka_unit_test(test_tokenizer_config_eos), cmocka_unit_test(test_id_cap),
        cmocka_unit_test(test_fuzzed_files),
    };
    return tok_test_main("tok-test", tests, sizeof tests / sizeof tests[0]);
}
