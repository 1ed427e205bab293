/* The NFC normalizer (Unicode canonical composition; Qwen2's tokenizer.json) in utf8proc, only
 * where the text needs it, with tokenizers' Unicode version kept.
 *
 * tokenizers applies its normalizer to each piece of text between the added tokens matched in
 * the raw text (those with "normalized": false); tokenizer.c calls tok_nfc() on those pieces,
 * after the UTF-8 repair, so the text is always valid UTF-8 here.
 *
 * "Safe" characters (below) are starters that NFC keeps and that compose with nothing before
 * them: NFC(x s y) = NFC(x) NFC(s y) for such an s, so a text is cut before each one, and only
 * the spans that hold another character (from the safe character before it, which may compose
 * with what follows, to the next safe one) go through utf8proc; ASCII, Latin-1 and CJK text
 * never does. */
#include <string.h>
#include <utf8proc.h>

#include "core/core.h"
#include "tokenizer/tok_internal.h"

/* Safe characters besides every code point below U+0300: combining class 0, NFC quick check
 * Yes (no decomposition that NFC keeps, never the second of a composition pair, so never
 * joined to what is before them), in tokenizers' Unicode 9.0 as in utf8proc's 15.0. Checked
 * with Python's unicodedata (Unicode 14): CJK ideographs, Hangul syllables (the trailing
 * jamo U+11A8.. that compose with them are not safe), kana without the combining sound marks
 * U+3099/U+309A, CJK punctuation before the combining tone marks U+302A.., the halfwidth and
 * fullwidth forms. Inclusive ranges. */
static const uint32_t nfc_safe[][2] = { /* (the commonest first) */
    {0x4E00, 0x9FFF}, {0xAC00, 0xD7A3}, {0x3041, 0x3096}, {0x30A0, 0x30FF},
    {0x3000, 0x3029}, {0xFF00, 0xFFEF},
};

/* Bytes of the UTF-8 sequence led by c. */
static size_t seq_len(unsigned char c)
{
    return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

/* 1 when the character at s (valid UTF-8) is safe; *n: its bytes. */
static int safe_at(const unsigned char *s, size_t *n)
{
    unsigned char c = s[0];
    *n = seq_len(c);
    if (c < 0xCC) /* ASCII, or U+0080 .. U+02FF */
        return 1;
    if (*n != 3) /* U+0300 .. U+07FF, or beyond the BMP */
        return 0;
    uint32_t cp = (uint32_t)(c & 0x0F) << 12 | (uint32_t)(s[1] & 0x3F) << 6 |
                  (uint32_t)(s[2] & 0x3F);
    for (size_t k = 0; k < sizeof nfc_safe / sizeof nfc_safe[0]; k++)
        if (cp >= nfc_safe[k][0] && cp <= nfc_safe[k][1])
            return 1;
    return 0;
}

/* Code points that matter to NFC in utf8proc's Unicode (15.0) but that tokenizers' NFC (the
 * crate unicode-normalization-alignments, Unicode 9.0 tables) does not know, so treats as
 * starters (combining class 0) without a decomposition that compose with nothing: combining
 * marks and composition parts assigned since 9.0 (U+1DF6.., U+0898.., Dives Akuru's U+11935 +
 * U+11930, ...). Made by tests/tokenizer/nfc_newer.py (tokenizers 0.23.3, utf8proc 2.8.0),
 * which compares both on every code point. tok_nfc keeps them as such a starter does:
 * NFC(x c y) = NFC(x) c NFC(y). */
static const uint32_t nfc_newer[][2] = {
    {0x7FD, 0x7FD}, {0x898, 0x89F}, {0x8CA, 0x8D3}, {0x9FE, 0x9FE}, {0xC3C, 0xC3C}, {0xD3B, 0xD3C},
    {0xEBA, 0xEBA}, {0x1715, 0x1715}, {0x1ABF, 0x1ACE}, {0x1DF6, 0x1DFA}, {0xA82C, 0xA82C},
    {0x10D24, 0x10D27}, {0x10EAB, 0x10EAC}, {0x10EFD, 0x10EFF}, {0x10F46, 0x10F50},
    {0x10F82, 0x10F85}, {0x11070, 0x11070}, {0x1133B, 0x1133B}, {0x1145E, 0x1145E},
    {0x11839, 0x1183A}, {0x11930, 0x11930}, {0x11935, 0x11935}, {0x1193D, 0x1193E},
    {0x11943, 0x11943}, {0x119E0, 0x119E0}, {0x11A34, 0x11A34}, {0x11A47, 0x11A47},
    {0x11A99, 0x11A99}, {0x11D42, 0x11D42}, {0x11D44, 0x11D45}, {0x11D97, 0x11D97},
    {0x11F41, 0x11F42}, {0x16FF0, 0x16FF1}, {0x1E08F, 0x1E08F}, {0x1E130, 0x1E136},
    {0x1E2AE, 0x1E2AE}, {0x1E2EC, 0x1E2EF}, {0x1E4EC, 0x1E4EF},
};

static int is_newer(uint32_t cp)
{
    size_t lo = 0, hi = sizeof nfc_newer / sizeof nfc_newer[0];
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < nfc_newer[mid][0])
            hi = mid;
        else if (cp > nfc_newer[mid][1])
            lo = mid + 1;
        else
            return 1;
    }
    return 0;
}

/* The code point of valid UTF-8 at s (*n: its bytes). */
static uint32_t utf8_at(const unsigned char *s, size_t *n)
{
    if (s[0] < 0x80) {
        *n = 1;
        return s[0];
    }
    if (s[0] < 0xE0) {
        *n = 2;
        return (uint32_t)(s[0] & 0x1F) << 6 | (s[1] & 0x3F);
    }
    if (s[0] < 0xF0) {
        *n = 3;
        return (uint32_t)(s[0] & 0x0F) << 12 | (uint32_t)(s[1] & 0x3F) << 6 | (s[2] & 0x3F);
    }
    *n = 4;
    return (uint32_t)(s[0] & 0x07) << 18 | (uint32_t)(s[1] & 0x3F) << 12 |
           (uint32_t)(s[2] & 0x3F) << 6 | (s[3] & 0x3F);
}

/* utf8proc's NFC of s[0 .. len) into b->cp; *out, *out_len: its bytes there. */
static int nfc_utf8proc(tok_nfc_buf *b, const char *s, size_t len, const char **out,
                        size_t *out_len)
{
    const utf8proc_option_t opts = UTF8PROC_STABLE | UTF8PROC_COMPOSE;
    utf8proc_ssize_t n;
    *out = s;
    *out_len = 0;
    if (!len) /* (utf8proc_reencode writes a NUL into the buffer, which may not be there) */
        return TR_OK;
    for (;;) { /* decomposed and reordered into b->cp (code points), grown until it fits */
        n = utf8proc_decompose((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)len, b->cp,
                               (utf8proc_ssize_t)b->cap, opts);
        if (n < 0)
            return tr_fail(TR_ERR_INVALID, "NFC normalizer: %s (a text of %zu bytes)",
                           utf8proc_errmsg(n), len);
        if ((size_t)n <= b->cap)
            break;
        /* room for n code points and the NUL utf8proc_reencode writes after the bytes */
        if (!tok_grow(&b->cp, (size_t)n + 1, sizeof *b->cp))
            return tr_fail(TR_ERR_NOMEM, "out of memory normalizing a text of %zu bytes", len);
        b->cap = (size_t)n;
    }
    /* composed, then written back as UTF-8 into the same buffer (never longer: at most 4
     * bytes a code point) */
    utf8proc_ssize_t bytes = utf8proc_reencode(b->cp, n, opts);
    if (bytes < 0)
        return tr_fail(TR_ERR_INVALID, "NFC normalizer: %s (a text of %zu bytes)",
                       utf8proc_errmsg(bytes), len);
    *out = (const char *)b->cp;
    *out_len = (size_t)bytes;
    return TR_OK;
}

/* Append n bytes to b->out. */
static int out_add(tok_nfc_buf *b, const char *s, size_t n)
{
    if (!n)
        return TR_OK;
    if (b->out_len + n > b->out_cap) {
        size_t cap = 2 * (b->out_len + n);
        if (!tok_grow(&b->out, cap, 1))
            return tr_fail(TR_ERR_NOMEM, "out of memory normalizing a text");
        b->out_cap = cap;
    }
    memcpy(b->out + b->out_len, s, n);
    b->out_len += n;
    return TR_OK;
}

/* NFC of s[0 .. len) as tokenizers makes it, appended to b->out: utf8proc's on each run between
 * the characters tokenizers does not know, those kept as they are. */
static int nfc_append(tok_nfc_buf *b, const char *s, size_t len)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t run = 0, i = 0, n;
    const char *norm;
    size_t norm_len;
    int rc = TR_OK;
    while (i < len && !rc) {
        if (u[i] < 0xDF || !is_newer(utf8_at(u + i, &n))) { /* (U+07FD is the first) */
            i += seq_len(u[i]);
            continue;
        }
        if (!(rc = nfc_utf8proc(b, s + run, i - run, &norm, &norm_len)) &&
            !(rc = out_add(b, norm, norm_len)))
            rc = out_add(b, s + i, n);
        i += n;
        run = i;
    }
    if (!rc && run < len && !(rc = nfc_utf8proc(b, s + run, len - run, &norm, &norm_len)))
        rc = out_add(b, norm, norm_len);
    return rc;
}

int tok_nfc(tok_nfc_buf *b, const char *s, size_t len, const char **out, size_t *out_len)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, done = 0, safe = 0, n; /* safe: where the last safe character starts */
    int rc = TR_OK, changed = 0;
    *out = s;
    *out_len = len;
    b->out_len = 0;
    while (i < len && !rc) {
        if (i + 8 <= len) { /* 8 ASCII bytes at once */
            uint64_t v;
            memcpy(&v, u + i, 8);
            if (!(v & 0x8080808080808080ULL)) {
                safe = i + 7;
                i += 8;
                continue;
            }
        }
        if (safe_at(u + i, &n)) {
            safe = i;
            i += n;
            continue;
        }
        size_t end = i + n; /* the span [safe, end): up to the next safe character */
        while (end < len && !safe_at(u + end, &n))
            end += n;
        if (!(rc = out_add(b, s + done, safe - done)))
            rc = nfc_append(b, s + safe, end - safe);
        changed = 1;
        done = safe = i = end;
    }
    if (rc || !changed)
        return rc;
    if ((rc = out_add(b, s + done, len - done)))
        return rc;
    *out = b->out;
    *out_len = b->out_len;
    return TR_OK;
}

int tok_nfc_usable(const char *file)
{
    /* nfc_newer was found with utf8proc 2.8.0's Unicode 15.0 (15.1 adds no character NFC
     * moves); another version has other characters tokenizers does not know */
    const char *v = utf8proc_unicode_version();
    if (!strncmp(v, "15.", 3))
        return TR_OK;
    return tr_fail(TR_ERR_INVALID, "%s: normalizer: NFC needs utf8proc with Unicode 15 (2.8 or "
                                   "2.9) to give tokenizers' ids; this one has Unicode %s",
                   file, v);
}

void tok_nfc_free(tok_nfc_buf *b)
{
    free(b->cp);
    free(b->out);
    *b = (tok_nfc_buf){0};
}
