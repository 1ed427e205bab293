/* tests/tokenizer: what the tokenizer tests share (see tok_test_util.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tok_test_util.h"

char dir[256];
static uint64_t rng_state = 18;

uint32_t rnd(void)
{
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(rng_state >> 33);
}

const char *scratch(const char *name)
{
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

void write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    fclose(f);
}

int32_t *encode(tr_tokenizer *t, const char *text, size_t len, int special, size_t *n)
{
    tr_encoder *e;
    assert_int_equal(tr_encoder_create(t, &e), TR_OK);
    int32_t *ids = NULL;
    size_t cap = 0;
    *n = 0;
    assert_int_equal(tr_encode(e, text, len, special, &ids, n, &cap), TR_OK);
    tr_encoder_free(e);
    return ids;
}

/* Each malformed file: an error (not OK), with a message, and no crash. */
void expect_refused(const char *type, const char *vocab, const char *merges, const char *model,
                    const char *needle)
{
    tr_tokenizer_files f = {.type = type, .vocab_file = vocab, .merge_file = merges,
                            .tokenizer_model = model};
    tr_tokenizer *t = NULL;
    int rc = tr_tokenizer_open(&f, &t);
    if (rc == TR_OK || (needle && !strstr(tr_errmsg(), needle)))
        fprintf(stderr, "expected an error with '%s', got %d: %s\n", needle ? needle : "", rc, tr_errmsg());
    assert_int_not_equal(rc, TR_OK);
    assert_null(t);
    assert_true(tr_errmsg()[0] != '\0');
    if (needle)
        assert_non_null(strstr(tr_errmsg(), needle));
}

/* A mutated copy of data: bytes flipped, inserted, deleted, or the end cut off. */
size_t mutate(const char *data, size_t n, char *out)
{
    static const char *const junk[] = {"{", "}", "[", "]", "\"", ":", ",", "-1", "1e999", "\\u0000",
                                       "\\ud800", "\xff", "null", "true", " ", "\n", "\"\\", "9999999999"};
    size_t o = 0;
    int kind = (int)(rnd() % 4);
    if (kind == 3) { /* cut */
        size_t cut = rnd() % (n + 1);
        memcpy(out, data, cut);
        return cut;
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t r = rnd() % 2000;
        if (r < 2 && kind == 0)
            out[o++] = (char)(rnd() & 0xff);
        else if (r < 2 && kind == 1) {
            const char *s = junk[rnd() % (sizeof junk / sizeof junk[0])];
            memcpy(out + o, s, strlen(s));
            o += strlen(s);
            out[o++] = data[i];
        } else if (!(r < 2 && kind == 2))
            out[o++] = data[i];
    }
    return o;
}

/* Whatever opens must encode anything and decode it back to the repaired text. */
void exercise(tr_tokenizer *t)
{
    char text[600];
    for (int k = 0; k < 4; k++) {
        size_t n = rnd() % sizeof text;
        for (size_t i = 0; i < n; i++)
            text[i] = (char)(rnd() % 4 ? "ab c'\nS<|"[rnd() % 10] : (int)(rnd() & 0xff));
        size_t m;
        int32_t *ids = encode(t, text, n, 1, &m);
        char *back;
        assert_int_equal(tr_decode(t, ids, m, &back, NULL), TR_OK);
        free(back);
        free(ids);
    }
}

int open_mutated(const char *type, const char *vocab, const char *merges, const char *model)
{
    tr_tokenizer_files f = {.type = type, .vocab_file = vocab, .merge_file = merges,
                            .tokenizer_model = model};
    tr_tokenizer *t = NULL;
    int rc = tr_tokenizer_open(&f, &t);
    if (rc == TR_OK) {
        exercise(t);
        tr_tokenizer_free(t);
        return 1;
    }
    assert_int_equal(rc, TR_ERR_INVALID);
    assert_null(t);
    return 0;
}

int tok_test_main(const char *name, const struct CMUnitTest *tests, size_t n)
{
    snprintf(dir, sizeof dir, "/tmp/trident-%s-%d", name, (int)getpid());
    char cmd[400];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
    if (system(cmd))
        return 1;
    int rc = _cmocka_run_group_tests(name, tests, n, NULL, NULL);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) ? 1 : rc;
}

void expect_encoded(tr_tokenizer *t, const char *text, int special, const int32_t *want,
                    size_t n_want)
{
    size_t n;
    int32_t *ids = encode(t, text, strlen(text), special, &n);
    int same = n == n_want && (!n || !memcmp(ids, want, n * sizeof *ids));
    if (!same) {
        fprintf(stderr, "text '%s': got", text);
        for (size_t i = 0; i < n; i++)
            fprintf(stderr, " %d", ids[i]);
        fprintf(stderr, "\n");
    }
    free(ids);
    assert_true(same);
}

tr_tokenizer *open_ok(const char *type, const char *vocab, const char *merges, const char *model)
{
    tr_tokenizer_files f = {.type = type, .vocab_file = vocab, .merge_file = merges,
                            .tokenizer_model = model};
    tr_tokenizer *t = NULL;
    int rc = tr_tokenizer_open(&f, &t);
    if (rc)
        fprintf(stderr, "open: %s\n", tr_errmsg());
    assert_int_equal(rc, TR_OK);
    return t;
}

/* GPT-2's byte -> character map, written out as UTF-8 into out; returns bytes written. */
size_t spell_byte(int b, char *out)
{
    int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE, cp = b;
    if (!printable) {
        cp = 256;
        for (int x = 0; x < b; x++)
            cp += !((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE);
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | cp >> 6);
    out[1] = (char)(0x80 | (cp & 63));
    return 2;
}

/* "{" and the 256 byte tokens of a vocabulary object ("spelled byte": id), no closing brace. */
size_t byte_vocab(char *v)
{
    size_t vo = (size_t)sprintf(v, "{");
    for (int b = 0; b < 256; b++) {
        char s[4];
        size_t n = spell_byte(b, s);
        vo += (size_t)sprintf(v + vo, "%s\"", b ? "," : "");
        if (s[0] == '"' || s[0] == '\\')
            v[vo++] = '\\';
        memcpy(v + vo, s, n);
        vo += n;
        vo += (size_t)sprintf(v + vo, "\":%d", b);
    }
    return vo;
}
