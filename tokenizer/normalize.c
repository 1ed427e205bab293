/* The NFC normalizer (Unicode canonical composition; Qwen2's tokenizer.json) in utf8proc, with a
 * fast path for text that is already NFC by a quick look at its characters, and tokenizers'
 * Unicode version kept.
 *
 * tokenizers applies its normalizer to each piece of text between the added tokens matched in
 * the raw text (those with "normalized": false); tokenizer.c calls tok_nfc() on those pieces,
 * after the UTF-8 repair, so the text is always valid UTF-8 here. */
#include <string.h>
#include <utf8proc.h>

#include "core/core.h"
#include "tokenizer/tok_internal.h"

/* Characters with canonical combining class 0 whose NFC quick check is Yes (no decomposition
 * that NFC keeps, never the second of a composition pair), as inclusive ranges: a text made
 * only of them is NFC already (Unicode's quick-check algorithm answers YES). Checked against
 * Python's unicodedata (Unicode 14): every code point below U+0300 is one; CJK ideographs,
 * kana without the combining sound marks U+3099/U+309A, Hangul syllables (the trailing jamo
 * U+11A8.. that compose with them are not in the list), CJK punctuation before the combining
 * tone marks U+302A.., and the halfwidth and fullwidth forms. */
static const uint32_t nfc_safe[][2] = {
    {0x3000, 0x3029}, {0x3041, 0x3096}, {0x30A0, 0x30FF}, {0x4E00, 0x9FFF},
    {0xAC00, 0xD7A3}, {0xFF00, 0xFFEF},
};

/* 1 when valid UTF-8 s[0 .. len) is made only of the characters above. */
static int nfc_quick_yes(const unsigned char *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        if (i + 8 <= len) { /* 8 bytes below 0xCC (code points below U+0300) at once */
            uint64_t v;
            memcpy(&v, s + i, 8);
            /* a byte >= 0x80 is checked one at a time below */
            if (!(v & 0x8080808080808080ULL)) {
                i += 8;
                continue;
            }
        }
        unsigned char c = s[i];
        if (c < 0xCC) { /* ASCII, or a 2-byte lead of U+0080 .. U+02FF (its tail follows) */
            i += c < 0x80 ? 1 : 2;
            continue;
        }
        if (c < 0xE0 || c >= 0xF0) /* U+0300 .. U+07FF, or beyond the BMP */
            return 0;
        uint32_t cp = (uint32_t)(c & 0x0F) << 12 | (uint32_t)(s[i + 1] & 0x3F) << 6 |
                      (uint32_t)(s[i + 2] & 0x3F);
        int ok = 0;
        for (size_t k = 0; k < sizeof nfc_safe / sizeof nfc_safe[0] && !ok; k++)
            ok = cp >= nfc_safe[k][0] && cp <= nfc_safe[k][1];
        if (!ok)
            return 0;
        i += 3;
    }
    return 1;
}

/* Code points that matter to NFC in utf8proc's Unicode (15.0) but that tokenizers' NFC (the
 * crate unicode-normalization-alignments, Unicode 9.0 tables) does not know, so treats as
 * starters (combining class 0) without a decomposition that compose with nothing: combining
 * marks and composition parts assigned since 9.0 (U+1DF6.., U+0898.., Dives Akuru's U+11935 +
 * U+11930, ...). Found by comparing both on every code point c alone and in "a" c U+0301 and
 * "a" c U+0323 (tokenizers 0.23.3, utf8proc 2.8.0), and on the canonical pairs of Python's
 * unicodedata. tok_nfc keeps them as such a starter does: NFC(x c y) = NFC(x) c NFC(y). */
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

int tok_nfc(tok_nfc_buf *b, const char *s, size_t len, const char **out, size_t *out_len)
{
    *out = s;
    *out_len = len;
    if (nfc_quick_yes((const unsigned char *)s, len))
        return TR_OK;
    const unsigned char *u = (const unsigned char *)s;
    size_t run = 0, i = 0, n;
    int rc = TR_OK, split = 0;
    b->out_len = 0;
    while (i < len && !rc) { /* runs between tokenizers' unknown characters, NFC'd one by one */
        if (u[i] < 0xDF || !is_newer(utf8_at(u + i, &n))) { /* (U+07FD is the first) */
            i += u[i] < 0x80 ? 1 : u[i] < 0xE0 ? 2 : u[i] < 0xF0 ? 3 : 4;
            continue;
        }
        split = 1;
        const char *norm;
        size_t norm_len;
        if (!(rc = nfc_utf8proc(b, s + run, i - run, &norm, &norm_len)) &&
            !(rc = out_add(b, norm, norm_len)))
            rc = out_add(b, s + i, n);
        i += n;
        run = i;
    }
    if (!split || rc)
        return rc ? rc : nfc_utf8proc(b, s, len, out, out_len);
    const char *norm;
    size_t norm_len;
    if ((rc = nfc_utf8proc(b, s + run, len - run, &norm, &norm_len)) ||
        (rc = out_add(b, norm, norm_len)))
        return rc;
    *out = b->out;
    *out_len = b->out_len;
    return TR_OK;
}

void tok_nfc_free(tok_nfc_buf *b)
{
    free(b->cp);
    free(b->out);
    *b = (tok_nfc_buf){0};
}
