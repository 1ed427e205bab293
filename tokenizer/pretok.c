/* Pre-tokenization: a text -> pre-tokens through the tokenizer's steps (tokenizers'
 * Split, ByteLevel, Punctuation and Digits pre-tokenizers), regexes in PCRE2; and the UTF-8
 * checks.
 *
 * A step cuts each piece it is given into segments (start, end, is_match): the regex's
 * matches, left to right, and the gaps between them (tokenizers' find_matches; `invert`
 * flips is_match), then groups them by the step's behavior exactly as tokenizers does
 * (Isolated: each segment; Removed: the gaps; MergedWithPrevious / MergedWithNext: a match
 * joins the gap before / after it; Contiguous: runs of one kind), and hands each non-empty
 * group to the next step. The last step's pieces are the pre-tokens.
 *
 * tokenizers' ByteLevel step rewrites its pieces in GPT-2's byte alphabet (each byte one
 * character: '0' stays '0', the bytes of U+00B2 become U+00C2 and U+00B2), and the steps
 * after it see that text. Here the pieces stay raw bytes; a step after a ByteLevel ("mapped")
 * matches its regex on the piece spelled in that alphabet and maps the boundaries back (a
 * character there is a byte here), so a Digits after ByteLevel splits U+00B2 (C2 B2) between
 * its bytes, as tokenizers does. Punctuation and Digits are Splits on a character class made
 * from tokenizers' own tables (pretok_classes.h): a match is one character, as their
 * char-predicate patterns match. */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "tokenizer/pretok_classes.h"
#include "tokenizer/tok_internal.h"

/* tokenizers' ByteLevel regex (tiktoken's gpt2 pattern is the same language). */
const char *const gpt2_pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* Unicode White_Space, the meaning of \s in Oniguruma and Rust regex (PCRE2's own \s differs:
 * it takes U+180E), as the inside of a character class. */
static const char ws_class[] = "\\x{9}-\\x{d}\\x{20}\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}"
                               "\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}";

typedef struct {
    char *s;
    size_t n, cap;
} strbuf;

static int sb_add(strbuf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = 2 * (b->n + n) + 64;
        char *p = realloc(b->s, cap);
        if (!p)
            return -1;
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = '\0';
    return 0;
}

/* The pattern with \s, \S replaced and nested classes flattened; a literal is escaped. */
static int rewrite(const char *p, size_t n, int literal, strbuf *out, const char **problem)
{
    int depth = 0, err = 0;
    size_t class_start = 0; /* where a ']' would be the first member of the class */
    for (size_t i = 0; i < n && !err; i++) {
        char c = p[i];
        if (literal) {
            int plain = (unsigned char)c >= 0x80 || (c >= '0' && c <= '9') ||
                        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
            err = (!plain && sb_add(out, "\\", 1)) || sb_add(out, &c, 1);
            continue;
        }
        if (c == '\\' && i + 1 < n) {
            char d = p[++i];
            if (d == 's')
                err = depth ? sb_add(out, ws_class, strlen(ws_class))
                            : sb_add(out, "[", 1) || sb_add(out, ws_class, strlen(ws_class)) ||
                                  sb_add(out, "]", 1);
            else if (d == 'S' && depth) {
                *problem = "\\S inside a character class";
                return -1;
            } else if (d == 'S')
                err = sb_add(out, "[^", 2) || sb_add(out, ws_class, strlen(ws_class)) ||
                      sb_add(out, "]", 1);
            else
                err = sb_add(out, p + i - 1, 2);
            continue;
        }
        if (depth && c == '[' && i + 1 < n && p[i + 1] == ':') { /* [:alpha:] */
            const char *end = strstr(p + i, ":]");
            if (!end || (size_t)(end - p) >= n) {
                *problem = "an unterminated [: :] class";
                return -1;
            }
            err = sb_add(out, p + i, (size_t)(end - (p + i)) + 2);
            i = (size_t)(end - p) + 1;
        } else if (c == '[') {
            if (depth && i + 1 < n && p[i + 1] == '^') {
                *problem = "a negated class inside a class";
                return -1;
            }
            if (!depth++)
                err = sb_add(out, "[", 1);
            if (i + 1 < n && p[i + 1] == '^' && depth == 1)
                err = err || sb_add(out, "^", 1), i++;
            class_start = i + 1;
        } else if (c == ']' && depth && i != class_start) {
            if (!--depth)
                err = sb_add(out, "]", 1);
        } else {
            err = sb_add(out, &c, 1);
        }
    }
    if (err) {
        *problem = "out of memory";
        return -1;
    }
    return 0;
}

int compile_pattern(const char *pattern, size_t len, int literal, const char *file,
                    pcre2_code **out)
{
    strbuf b = {0};
    const char *problem = NULL;
    *out = NULL;
    if (rewrite(pattern, len, literal, &b, &problem) || !b.s) {
        free(b.s);
        return tr_fail(TR_ERR_INVALID, "%s: pre-tokenizer pattern '%.80s': %s", file, pattern,
                       problem ? problem : "empty");
    }
    int code;
    PCRE2_SIZE at;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)b.s, b.n, PCRE2_UTF | PCRE2_UCP, &code, &at, NULL);
    free(b.s);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        return tr_fail(TR_ERR_INVALID, "%s: pre-tokenizer pattern '%.80s': PCRE2 refuses it: %s",
                       file, pattern, (const char *)msg);
    }
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* without JIT it still matches, slower */
    *out = re;
    return TR_OK;
}

int compile_class(int which, const char *file, pcre2_code **out)
{
    const uint32_t(*r)[2] = which == CLASS_PUNCTUATION ? punct_ranges : numeric_ranges;
    size_t n = which == CLASS_PUNCTUATION ? sizeof punct_ranges / sizeof *punct_ranges
                                          : sizeof numeric_ranges / sizeof *numeric_ranges;
    char *p = malloc(32 * n + 3);
    *out = NULL;
    if (!p)
        return tr_fail(TR_ERR_NOMEM, "out of memory reading %s", file);
    size_t at = 0;
    p[at++] = '[';
    for (size_t i = 0; i < n; i++)
        at += (size_t)sprintf(p + at, "\\x{%X}-\\x{%X}", (unsigned)r[i][0], (unsigned)r[i][1]);
    p[at++] = ']';
    int code;
    PCRE2_SIZE where;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)p, at, PCRE2_UTF, &code, &where, NULL);
    free(p);
    if (!re)
        return tr_fail(TR_ERR_INVALID, "%s: the %s class: PCRE2 error %d", file,
                       which == CLASS_PUNCTUATION ? "Punctuation" : "Digits", code);
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    *out = re;
    return TR_OK;
}

/* ---- steps ---- */

int pretok_state_init(pretok_state *s, const tr_tokenizer *t)
{
    memset(s, 0, sizeof *s);
    for (int k = 0; k < t->n_steps; k++)
        if (t->steps[k].re && !(s->md[k] = pcre2_match_data_create_from_pattern(t->steps[k].re, NULL))) {
            pretok_state_free(s);
            return tr_fail(TR_ERR_NOMEM, "out of memory for regex match data");
        }
    return TR_OK;
}

void pretok_state_free(pretok_state *s)
{
    for (int k = 0; k < TOK_MAX_STEPS; k++) {
        pcre2_match_data_free(s->md[k]);
        free(s->seg[k]);
        free(s->space[k]);
        free(s->mapped[k]);
    }
    memset(s, 0, sizeof *s);
}

static int add_segment(pretok_state *s, int k, size_t a, size_t b, int is_match)
{
    if (s->n_seg[k] == s->cap_seg[k]) {
        size_t cap = s->cap_seg[k] ? 2 * s->cap_seg[k] : 256;
        segment *p = realloc(s->seg[k], cap * sizeof *p);
        if (!p)
            return tr_fail(TR_ERR_NOMEM, "out of memory splitting a text");
        s->seg[k] = p;
        s->cap_seg[k] = cap;
    }
    s->seg[k][s->n_seg[k]++] = (segment){a, b, is_match};
    return TR_OK;
}

/* The next match of the step's regex in text[0 .. len) at or after *at: 1 with [*a, *b), 0 when
 * there is none, -1 after tr_fail when PCRE2 gives up (a limit). An empty match moves *at past the next character, as Oniguruma's find_iter
 * does. */
static int next_match(const pretok_step *st, pcre2_match_data *md, const char *text, size_t len,
                      size_t *at, size_t *a, size_t *b)
{
    if (*at > len)
        return 0;
    int m = pcre2_match(st->re, (PCRE2_SPTR)text, len, *at, PCRE2_NO_UTF_CHECK, md, NULL);
    if (m == PCRE2_ERROR_NOMATCH)
        return 0;
    if (m < 0) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(m, msg, sizeof msg);
        tr_fail(TR_ERR_INVALID, "a pre-tokenizer regex failed on a text of %zu bytes: %s", len,
                (const char *)msg);
        return -1;
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    *a = ov[0];
    *b = ov[1];
    *at = *b;
    if (*b == *a) {
        ++*at;
        while (*at < len && ((unsigned char)text[*at] & 0xC0) == 0x80)
            ++*at;
    }
    return 1;
}

/* A mapped step's subject: the piece in GPT-2's byte alphabet, into s->mapped[k]. */
static int map_piece(pretok_state *s, int k, const char *text, size_t len, size_t *out_len)
{
    if (len > (SIZE_MAX - 1) / 2)
        return tr_fail(TR_ERR_NOMEM, "out of memory for a text of %zu bytes", len);
    if (2 * len + 1 > s->mapped_cap[k]) {
        char *p = realloc(s->mapped[k], 2 * len + 1);
        if (!p)
            return tr_fail(TR_ERR_NOMEM, "out of memory for a text of %zu bytes", len);
        s->mapped[k] = p;
        s->mapped_cap[k] = 2 * len + 1;
    }
    unsigned char *o = (unsigned char *)s->mapped[k];
    for (size_t i = 0; i < len; i++) {
        uint32_t c = byte_char[(unsigned char)text[i]]; /* < 0x800: one or two bytes */
        if (c < 0x80) {
            *o++ = (unsigned char)c;
        } else {
            *o++ = (unsigned char)(0xC0 | c >> 6);
            *o++ = (unsigned char)(0x80 | (c & 0x3F));
        }
    }
    *out_len = (size_t)(o - (unsigned char *)s->mapped[k]);
    return TR_OK;
}

/* Offsets in a step's subject -> offsets in its piece: the same for an unmapped step; for a
 * mapped one, a forward walk (offsets come in order) counting characters, one per raw byte. */
typedef struct {
    const char *subject;
    int mapped;
    size_t at, raw; /* subject offset `at` is raw offset `raw` */
} raw_walk;

static size_t raw_of(raw_walk *w, size_t off)
{
    if (!w->mapped)
        return off;
    while (w->at < off) {
        w->at += (unsigned char)w->subject[w->at] < 0x80 ? 1 : 2;
        w->raw++;
    }
    return w->raw;
}

/* The regex's matches and the gaps between them, as tokenizers' find_matches lists them
 * (offsets in the piece; the regex runs on w's subject, len bytes). */
static int find_segments(const pretok_step *st, pretok_state *s, int k, raw_walk *w,
                         size_t len, size_t raw_len)
{
    size_t prev = 0, at = 0, a, b;
    int rc = TR_OK, m;
    s->n_seg[k] = 0;
    while (!rc && (m = next_match(st, s->md[k], w->subject, len, &at, &a, &b)) != 0) {
        if (m < 0)
            return TR_ERR_INVALID;
        a = raw_of(w, a);
        b = raw_of(w, b);
        if (prev != a)
            rc = add_segment(s, k, prev, a, st->invert);
        if (!rc)
            rc = add_segment(s, k, a, b, !st->invert);
        prev = b;
    }
    if (!rc && prev != raw_len)
        rc = add_segment(s, k, prev, raw_len, st->invert);
    return rc;
}

/* Group segments by behavior in place (tokenizers' split with SplitDelimiterBehavior). */
static size_t group(segment *g, size_t n, int behavior)
{
    size_t o = 0;
    int prev_match = 0;
    switch (behavior) {
    case SPLIT_ISOLATED:
        return n;
    case SPLIT_REMOVED:
        for (size_t i = 0; i < n; i++)
            if (!g[i].is_match)
                g[o++] = g[i];
        return o;
    case SPLIT_MERGED_PREV:
        for (size_t i = 0; i < n; i++) {
            if (g[i].is_match && !prev_match && o)
                g[o - 1].end = g[i].end;
            else
                g[o++] = g[i];
            prev_match = g[i].is_match;
        }
        return o;
    case SPLIT_MERGED_NEXT: /* from the end: a match joins the segment after it */
        o = n;
        for (size_t i = n; i-- > 0;) {
            int m = g[i].is_match;
            if (m && !prev_match && o < n)
                g[o].start = g[i].start;
            else
                g[--o] = g[i];
            prev_match = m;
        }
        memmove(g, g + o, (n - o) * sizeof *g);
        return n - o;
    default: /* SPLIT_CONTIGUOUS */
        for (size_t i = 0; i < n; i++) {
            if (g[i].is_match == prev_match && o)
                g[o - 1].end = g[i].end;
            else
                g[o++] = g[i];
            prev_match = g[i].is_match;
        }
        return o;
    }
}

int pretokenize(const tr_tokenizer *t, pretok_state *s, int k, const char *text, size_t len,
                piece_fn fn, void *ctx)
{
    if (len == 0)
        return TR_OK;
    if (k == t->n_steps)
        return fn(ctx, text, len);
    const pretok_step *st = &t->steps[k];
    if (st->kind == STEP_BYTELEVEL && st->add_prefix_space && text[0] != ' ') {
        if (len + 1 > s->space_cap[k]) {
            char *p = realloc(s->space[k], len + 1);
            if (!p)
                return tr_fail(TR_ERR_NOMEM, "out of memory for a text of %zu bytes", len);
            s->space[k] = p;
            s->space_cap[k] = len + 1;
        }
        s->space[k][0] = ' ';
        memcpy(s->space[k] + 1, text, len);
        text = s->space[k];
        len++;
    }
    if (!st->re)
        return pretokenize(t, s, k + 1, text, len, fn, ctx);
    int behavior = st->kind == STEP_BYTELEVEL ? SPLIT_ISOLATED : st->behavior, rc = TR_OK;
    raw_walk w = {text, st->mapped, 0, 0};
    size_t subject_len = len;
    if (st->mapped && (rc = map_piece(s, k, text, len, &subject_len)))
        return rc;
    if (st->mapped)
        w.subject = s->mapped[k];
    if (behavior == SPLIT_ISOLATED || behavior == SPLIT_REMOVED) { /* streamed, nothing kept */
        int keep_match = behavior == SPLIT_ISOLATED || st->invert;
        int keep_gap = behavior == SPLIT_ISOLATED || !st->invert;
        size_t prev = 0, at = 0, a, b;
        int m;
        while (!rc && (m = next_match(st, s->md[k], w.subject, subject_len, &at, &a, &b)) != 0) {
            if (m < 0)
                return TR_ERR_INVALID;
            a = raw_of(&w, a);
            b = raw_of(&w, b);
            if (keep_gap && prev != a)
                rc = pretokenize(t, s, k + 1, text + prev, a - prev, fn, ctx);
            if (!rc && keep_match)
                rc = pretokenize(t, s, k + 1, text + a, b - a, fn, ctx);
            prev = b;
        }
        if (!rc && keep_gap)
            rc = pretokenize(t, s, k + 1, text + prev, len - prev, fn, ctx);
        return rc;
    }
    rc = find_segments(st, s, k, &w, subject_len, len);
    size_t n = rc ? 0 : group(s->seg[k], s->n_seg[k], behavior);
    for (size_t i = 0; i < n && !rc; i++) {
        segment g = s->seg[k][i]; /* deeper steps never touch step k's list */
        rc = pretokenize(t, s, k + 1, text + g.start, g.end - g.start, fn, ctx);
    }
    return rc;
}
