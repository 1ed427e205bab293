/* tokenizer/: sentencepiece's tokenizer.model (spm_proto.c, load_spm.c), from ModelProto bytes
 * built here: merges by score with the leftmost of equal scores first (not by id), user-defined
 * pieces never merged, byte fallback, one unk for a run of unknown characters, the
 * normalizer's dummy prefix and extra-space removal, Llama2Tokenizer's BOS, decoding (the
 * dummy prefix's space dropped, CONTROL pieces empty, invalid byte runs one U+FFFD a byte);
 * unknown fields and groups skipped; then every malformed or unsupported file refused as
 * TR_ERR_INVALID naming the field, and mutated files refused or working. The ids expected are
 * worked out by sentencepiece's rules (tests/tokenizer/test_sentencepiece_oracle.py checks
 * the same code against the library). Runs under the sanitizers. */
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

typedef struct {
    uint8_t b[1 << 14];
    size_t n;
} buf;

static void put_varint(buf *o, uint64_t v)
{
    do {
        o->b[o->n++] = (uint8_t)(v & 0x7f) | (v > 0x7f ? 0x80 : 0);
        v >>= 7;
    } while (v);
}

static void put_bytes(buf *o, unsigned field, const void *p, size_t n)
{
    put_varint(o, field << 3 | 2);
    put_varint(o, n);
    memcpy(o->b + o->n, p, n);
    o->n += n;
}

static void put_int(buf *o, unsigned field, uint64_t v)
{
    put_varint(o, field << 3);
    put_varint(o, v);
}

static void put_piece(buf *o, const char *piece, float score, int type)
{
    buf p = {.n = 0};
    uint32_t bits;
    memcpy(&bits, &score, 4);
    put_bytes(&p, 1, piece, strlen(piece));
    put_varint(&p, 2 << 3 | 5);
    memcpy(p.b + p.n, &bits, 4);
    p.n += 4;
    if (type != 1)
        put_int(&p, 3, (uint64_t)type);
    put_bytes(o, 1, p.b, p.n);
}

enum { NORMAL = 1, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE };

/* Options of the model made by model(). */
typedef struct {
    int byte_fallback, model_type, no_dummy, remove_spaces, bad; /* bad: a variant, below */
    const char *norm_name;
} opts;

/* Pieces: 0 <unk>, 1 <s>, 2 </s>, 3 ▁, 4 a, 5 b, 6 c, 7 d, 8 bc (-1), 9 ab (-1), 10 cd (-0.5),
 * 11 ▁a (-2), 12 <sep> (user-defined), 13 x, then <0x00>..<0xFF> at 14 + byte with
 * byte_fallback. */
static size_t model(opts o, uint8_t *out)
{
    buf m = {.n = 0}, t = {.n = 0}, nz = {.n = 0};
    put_piece(&m, "<unk>", 0, o.bad == 1 ? NORMAL : UNKNOWN);
    put_piece(&m, "<s>", 0, CONTROL);
    put_piece(&m, "</s>", 0, CONTROL);
    static const char *const normal[] = {SP, "a", "b", "c", "d", "bc", "ab", "cd", SP "a"};
    static const float score[] = {-3, -4, -5, -6, -7, -1, -1, -0.5f, -2};
    for (int i = 0; i < 9; i++)
        put_piece(&m, normal[i], score[i], NORMAL);
    put_piece(&m, "<sep>", 0, USER_DEFINED);
    put_piece(&m, o.bad == 2 ? "a" : "x", -8, NORMAL); /* 2: a duplicate */
    for (int b = 0; o.byte_fallback && b < (o.bad == 3 ? 255 : 256); b++) {
        char s[8];
        snprintf(s, sizeof s, o.bad == 4 && b == 65 ? "<0x4a>" : "<0x%02X>", b);
        put_piece(&m, s, 0, BYTE);
    }
    if (o.bad == 5)
        put_piece(&m, "bz", -0.1f, NORMAL); /* z is no piece */
    if (o.bad == 6)
        put_piece(&m, "abc", 0, UNUSED); /* ab + c */
    if (o.bad == 7)
        put_piece(&m, "a b", -9, NORMAL);
    if (o.bad == 8)
        put_piece(&m, "", -9, NORMAL);
    put_int(&t, 3, o.model_type ? (uint64_t)o.model_type : 2);
    if (o.byte_fallback || o.bad == 9)
        put_int(&t, 35, 1);
    put_bytes(&t, 1, "corpus.txt", 10); /* a training option: ignored */
    put_int(&t, 999, 7);                /* an unknown field: skipped */
    if (o.bad == 10)
        put_bytes(&t, 4, "x", 1); /* vocab_size as bytes */
    put_bytes(&m, 2, t.b, t.n);
    const char *name = o.norm_name ? o.norm_name : "identity";
    put_bytes(&nz, 1, name, strlen(name));
    put_int(&nz, 3, !o.no_dummy);
    put_int(&nz, 4, (uint64_t)o.remove_spaces);
    if (o.bad == 11)
        put_bytes(&nz, 2, "\x01\x02\x03\x04\x05", 5);
    put_bytes(&m, 3, nz.b, nz.n);
    put_varint(&m, 300 << 3 | 3); /* a group (an unknown field), skipped whole */
    put_int(&m, 1, 5);
    put_varint(&m, 300 << 3 | 4);
    if (o.bad == 12)
        put_piece(&m, "<s>", 0, 7); /* no such type */
    memcpy(out, m.b, m.n);
    return m.n;
}

static const char *write_model(opts o, const char *name)
{
    uint8_t b[1 << 14];
    size_t n = model(o, b);
    const char *p = scratch(name);
    write_file(p, b, n);
    return p;
}

#define IDS(t, text, special, ...)                                                                \
    do {                                                                                          \
        static const int32_t w_[] = {__VA_ARGS__};                                                \
        expect_encoded(t, text, special, w_, sizeof w_ / sizeof *w_);                                 \
    } while (0)

static void expect_text(tr_tokenizer *t, const int32_t *ids, size_t n, const char *want)
{
    char *s;
    size_t len;
    assert_int_equal(tr_decode(t, ids, n, &s, &len), TR_OK);
    if (len != strlen(want) || memcmp(s, want, len))
        fprintf(stderr, "decoded '%s', expected '%s'\n", s, want);
    assert_true(len == strlen(want) && !memcmp(s, want, len));
    free(s);
}

static void test_encode(void **state)
{
    (void)state;
    tr_tokenizer *t = open_ok("GPTSentencePieceTokenizer", NULL, NULL,
                              write_model((opts){.byte_fallback = 1}, "fb.model"));
    assert_int_equal(tr_tokenizer_vocab_size(t), 14 + 256);
    assert_int_equal(tr_tokenizer_eod(t), 2);
    assert_string_equal(tr_tokenizer_type(t), "GPTSentencePieceTokenizer");
    /* ▁abc: (▁,a) -2, (a,b) -1, (b,c) -1: the leftmost -1 pair, ab, though bc has the lower id;
     * then (▁,ab) and (ab,c) are no pieces */
    IDS(t, "abc", 0, 3, 9, 6);
    /* ▁bcd: (c,d) -0.5 first */
    IDS(t, "bcd", 0, 3, 5, 10);
    /* ▁a first (-2) when b does not follow; a space is ▁ (no extra-space removal) */
    IDS(t, "a  a", 0, 11, 3, 11);
    /* <sep> never merges, the dummy prefix only before the text */
    IDS(t, "a<sep>ab", 0, 11, 12, 9);
    /* é: no piece, its bytes C3 A9; <s> in the text is its characters' pieces, not BOS */
    IDS(t, "\xc3\xa9", 0, 3, 14 + 0xC3, 14 + 0xA9);
    expect_encoded(t, "", 0, NULL, 0);
    /* invalid UTF-8: one U+FFFD (EF BF BD) a byte */
    IDS(t, "\xe2\x96", 0, 3, 14 + 0xEF, 14 + 0xBF, 14 + 0xBD, 14 + 0xEF, 14 + 0xBF, 14 + 0xBD);
    /* decoding: the dummy prefix's space dropped once, CONTROL pieces empty, <unk> as " ⁇ " */
    expect_text(t, (const int32_t[]){1, 11, 3, 11, 2}, 5, "a  a");
    expect_text(t, (const int32_t[]){0, 3, 4}, 3, " \xE2\x81\x87  a");
    expect_text(t, (const int32_t[]){14 + 0xC3, 14 + 0xA9, 14 + 0xC3, 4}, 4, "\xc3\xa9\xef\xbf\xbd" "a");
    expect_text(t, (const int32_t[]){3, 3, 4}, 3, " a");
    expect_text(t, (const int32_t[]){14 + 0xE2, 14 + 0x41}, 2, "\xef\xbf\xbd" "A");
    tr_tokenizer_free(t);

    t = open_ok("Llama2Tokenizer", NULL, NULL, scratch("fb.model"));
    IDS(t, "abc", 1, 1, 3, 9, 6);
    IDS(t, "", 1, 1);
    IDS(t, "abc", 0, 3, 9, 6);
    tr_tokenizer_free(t);
}

static void test_normalizer(void **state)
{
    (void)state;
    /* no byte fallback: unknown characters, a run of them one <unk> */
    tr_tokenizer *t = open_ok("GPTSentencePieceTokenizer", NULL, NULL,
                              write_model((opts){.remove_spaces = 1}, "nofb.model"));
    IDS(t, "\xc3\xa9\xc3\xa9z a", 0, 3, 0, 11);
    /* extra spaces: leading and trailing ones dropped, runs one space (U+2581 at the end too) */
    IDS(t, "   a   a  " SP, 0, 11, 11);
    expect_encoded(t, "    ", 0, NULL, 0);
    expect_text(t, (const int32_t[]){3, 3, 4}, 3, "a");
    tr_tokenizer_free(t);
    t = open_ok("GPTSentencePieceTokenizer", NULL, NULL,
                write_model((opts){.no_dummy = 1}, "nodummy.model"));
    IDS(t, "a a", 0, 4, 11);
    expect_text(t, (const int32_t[]){11}, 1, " a");
    tr_tokenizer_free(t);
}

static void test_refused(void **state)
{
    (void)state;
    static const struct {
        opts o;
        const char *needle;
    } cases[] = {
        {{.bad = 1}, "pieces: no UNKNOWN piece"},
        {{.bad = 2}, "pieces[13] 'a': repeats pieces[4]"},
        {{.byte_fallback = 1, .bad = 3}, "trainer_spec.byte_fallback: true, but the BYTE piece <0xFF>"},
        {{.byte_fallback = 1, .bad = 4}, "'<0x4a>': a BYTE piece not spelled <0xHH>"},
        {{.bad = 5}, "'bz': holds 'z', which is no piece of its own"},
        {{.bad = 6}, "'abc': an UNUSED piece that merges make"},
        {{.bad = 7}, "'a b': holds a space"},
        {{.bad = 8}, "an empty piece"},
        {{.bad = 9}, "trainer_spec.byte_fallback: true, but the BYTE piece <0x00> is missing"},
        {{.bad = 10}, "trainer_spec.vocab_size (field 4): a length-delimited value, expected a varint"},
        {{.bad = 11}, "normalizer_spec.precompiled_charsmap"},
        {{.bad = 12}, "pieces[14].type: not one of NORMAL"},
        {{.model_type = 1}, "trainer_spec.model_type: UNIGRAM (the default) is not supported"},
        {{.model_type = 4}, "trainer_spec.model_type: CHAR"},
        {{.norm_name = "nmt_nfkc"}, "normalizer_spec.name: 'nmt_nfkc' is not supported"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        expect_refused("GPTSentencePieceTokenizer", NULL, NULL, write_model(cases[i].o, "bad.model"),
                       cases[i].needle);
    /* wire-level damage: a cut varint, a length past the end, wire type 7 */
    uint8_t b[1 << 14];
    size_t n = model((opts){0}, b);
    const char *p = scratch("cut.model");
    write_file(p, b, 2);
    expect_refused("Llama2Tokenizer", NULL, NULL, p, "a length of");
    b[n] = 0x80;
    write_file(p, b, n + 1);
    expect_refused("Llama2Tokenizer", NULL, NULL, p, "ModelProto: a varint runs past the end");
    b[n] = 0x0f;
    write_file(p, b, n + 1);
    expect_refused("Llama2Tokenizer", NULL, NULL, p, "wire type 6 or 7");
    expect_refused("Llama2Tokenizer", NULL, NULL, scratch("missing.model"), "cannot open");
    /* Llama2Tokenizer needs a CONTROL <s>; GPTSentencePieceTokenizer does not, and without a
     * CONTROL </s> has no end of document */
    buf m = {.n = 0};
    put_piece(&m, "<unk>", 0, UNKNOWN);
    put_piece(&m, "<s>", 0, USER_DEFINED);
    put_piece(&m, "a", 0, NORMAL);
    put_bytes(&m, 2, "\x18\x02", 2); /* trainer_spec {model_type: BPE} */
    write_file(p, m.b, m.n);
    expect_refused("Llama2Tokenizer", NULL, NULL, p, "trainer_spec.bos_piece: '<s>' is not a "
                                                      "CONTROL piece");
    tr_tokenizer *t = open_ok("GPTSentencePieceTokenizer", NULL, NULL, p);
    assert_int_equal(tr_tokenizer_eod(t), -1);
    tr_tokenizer_free(t);
}

static void test_mutated(void **state)
{
    (void)state;
    uint8_t b[1 << 14];
    static char m[12 << 14];
    size_t n = model((opts){.byte_fallback = 1}, b);
    int opened = 0;
    for (int i = 0; i < 400; i++) {
        size_t k = mutate((const char *)b, n, m);
        write_file(scratch("mut.model"), m, k);
        opened += open_mutated(i & 1 ? "Llama2Tokenizer" : "GPTSentencePieceTokenizer", NULL,
                               NULL, scratch("mut.model"));
    }
    print_message("%d of 400 mutated files opened\n", opened);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encode),
        cmocka_unit_test(test_normalizer),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_mutated),
    };
    return tok_test_main("spm", tests, sizeof tests / sizeof *tests);
}
