/* The tokenizer's front end: opening by type, encoding (UTF-8 repair, added tokens matched in
 * the raw text, the NFC normalizer, added tokens matched in the normalized text,
 * pre-tokenization, merges, template), decoding. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "tokenizer/tok_internal.h"

struct tr_encoder {
    const tr_tokenizer *t;
    pretok_state ps;
    bpe_cache *cache;
    char *clean; /* the text with invalid UTF-8 replaced, when it had some */
    size_t clean_cap;
    char *norm; /* SentencePiece-style: a segment with its spaces, prepended one included */
    size_t norm_cap;
    tok_nfc_buf nfc; /* the NFC of a segment between raw-matched added tokens */
    /* where the current tr_encode appends */
    int32_t **ids;
    size_t *n, *cap;
};

static pthread_once_t byte_map_once = PTHREAD_ONCE_INIT;
static const unsigned char all_bytes[256] = {
#define R16(b) b, b + 1, b + 2, b + 3, b + 4, b + 5, b + 6, b + 7, b + 8, b + 9, b + 10, b + 11, \
               b + 12, b + 13, b + 14, b + 15
    R16(0), R16(16), R16(32), R16(48), R16(64), R16(80), R16(96), R16(112), R16(128), R16(144),
    R16(160), R16(176), R16(192), R16(208), R16(224), R16(240)
#undef R16
};

static int given(const char *s) { return s && s[0]; }

/* Megatron's names, by TOK_* */
static const char *const type_names[TOK_KINDS] = {
    "ByteLevel", "GPT2BPETokenizer", "HFTokenizer", "Llama2Tokenizer", "GPTSentencePieceTokenizer",
    "TikTokenizer", "Llama3Tokenizer"};

/* Which files a type needs: each needed one given, no other. */
static int check_files(const tr_tokenizer_files *f, int kind)
{
    struct { const char *value, *flag; int needed; } use[3] = {
        {f->vocab_file, "--vocab-file (data.tokenizer.vocab_file)", kind == TOK_GPT2},
        {f->merge_file, "--merge-file (data.tokenizer.merge_file)", kind == TOK_GPT2},
        {f->tokenizer_model, "--tokenizer-model (data.tokenizer.model)", kind >= TOK_HF},
    };
    if (given(f->config_file) && kind != TOK_GPT2)
        return tr_fail(TR_ERR_CONFIG, "a tokenizer_config.json (%s) is read by GPT2BPETokenizer "
                       "only, not by %s", f->config_file, type_names[kind]);
    if (kind != TOK_TIKTOKEN && (given(f->tiktoken_pattern) || f->tiktoken_num_special_tokens ||
                                 f->tiktoken_special_tokens || f->tiktoken_vocab_size))
        return tr_fail(TR_ERR_CONFIG, "the --tiktoken-* options are read by TikTokenizer only, not "
                       "by %s", type_names[kind]);
    for (int i = 0; i < 3; i++) {
        if (use[i].needed && !given(use[i].value))
            return tr_fail(TR_ERR_CONFIG, "tokenizer %s needs %s", type_names[kind],
                           use[i].flag);
        if (!use[i].needed && given(use[i].value))
            return tr_fail(TR_ERR_CONFIG, "%s is not used by tokenizer %s", use[i].flag,
                           type_names[kind]);
    }
    return TR_OK;
}

int tr_tokenizer_open(const tr_tokenizer_files *files, tr_tokenizer **out)
{
    *out = NULL;
    const char *type = given(files->type) ? files->type : "ByteLevel";
    int kind = -1;
    for (int k = 0; k < TOK_KINDS; k++)
        kind = !strcmp(type, type_names[k]) ? k : kind;
    if (kind < 0)
        return tr_fail(TR_ERR_CONFIG, "tokenizer type '%s' is not one of ByteLevel, "
                                      "GPT2BPETokenizer, HFTokenizer, Llama2Tokenizer, "
                                      "GPTSentencePieceTokenizer, TikTokenizer, Llama3Tokenizer",
                       type);
    int rc = check_files(files, kind);
    if (rc)
        return rc;
    pthread_once(&byte_map_once, byte_map_init);
    tr_tokenizer *t = calloc(1, sizeof *t);
    const char *src = kind == TOK_GPT2 ? files->vocab_file : kind >= TOK_HF ? files->tokenizer_model
                                                                             : "ByteLevel";
    if (!t || !(t->source = strdup(src))) {
        free(t);
        return tr_fail(TR_ERR_NOMEM, "out of memory opening a tokenizer");
    }
    t->kind = kind;
    t->eod = kind == TOK_BYTES ? 0 : -1;
    if (kind == TOK_GPT2) {
        rc = load_gpt2(t, files->vocab_file, files->merge_file);
        if (!rc) {
            pretok_step s = {.kind = STEP_BYTELEVEL};
            rc = compile_pattern(gpt2_pattern, strlen(gpt2_pattern), 0, t->source, &s.re);
            t->steps[t->n_steps++] = s;
        }
        if (!rc && given(files->config_file))
            rc = gpt2_bos_from_config(t, files->config_file);
    } else if (kind == TOK_HF) {
        rc = load_hf(t, files->tokenizer_model);
    } else if (kind == TOK_TIKTOKEN || kind == TOK_LLAMA3) {
        rc = load_tiktoken(t, files);
    } else if (kind != TOK_BYTES) {
        rc = load_spm(t, files->tokenizer_model);
    }
    if (rc) {
        tr_tokenizer_free(t);
        return rc;
    }
    *out = t;
    return TR_OK;
}

void tr_tokenizer_free(tr_tokenizer *t)
{
    if (!t)
        return;
    for (int k = 0; k < t->n_steps; k++)
        pcre2_code_free(t->steps[k].re);
    for (int i = 0; i < t->n_added; i++) {
        if (t->added[i].match != t->added[i].text)
            free(t->added[i].match);
        free(t->added[i].text);
    }
    free(t->added);
    bmap_free(&t->vocab);
    mmap_free(&t->merges);
    free(t->pool);
    free(t->tok_off);
    free(t->tok_len);
    free(t->source);
    free(t->spm_type);
    free(t);
}

int tr_tokenizer_vocab_size(const tr_tokenizer *t)
{
    return t->kind == TOK_BYTES ? BYTE_VOCAB : t->n_ids;
}

int32_t tr_tokenizer_eod(const tr_tokenizer *t) { return t->eod; }

const char *tr_tokenizer_type(const tr_tokenizer *t)
{
    return type_names[t->kind];
}

int tr_encoder_create(const tr_tokenizer *t, tr_encoder **out)
{
    tr_encoder *e = calloc(1, sizeof *e);
    if (!e)
        return tr_fail(TR_ERR_NOMEM, "out of memory for an encoder");
    e->t = t;
    int rc = pretok_state_init(&e->ps, t);
    if (!rc && t->kind != TOK_BYTES)
        rc = bpe_cache_create(&e->cache);
    if (rc) {
        pretok_state_free(&e->ps);
        free(e);
        return rc;
    }
    *out = e;
    return TR_OK;
}

void tr_encoder_free(tr_encoder *e)
{
    if (!e)
        return;
    pretok_state_free(&e->ps);
    bpe_cache_free(e->cache);
    free(e->clean);
    free(e->norm);
    tok_nfc_free(&e->nfc);
    free(e);
}

static int on_piece(void *ctx, const char *piece, size_t len)
{
    tr_encoder *e = ctx;
    return bpe_word(e->t, e->cache, piece, len, e->ids, e->n, e->cap);
}

static int append_ids(tr_encoder *e, const int32_t *src, int k)
{
    int rc = ids_reserve(e->ids, *e->n, e->cap, (size_t)k);
    if (!rc && k) {
        memcpy(*e->ids + *e->n, src, (size_t)k * sizeof *src);
        *e->n += (size_t)k;
    }
    return rc;
}

/* text with every maximal invalid UTF-8 subpart replaced by U+FFFD (EF BF BD); sentencepiece's
 * own models: every byte of one, as its normalizer does. */
static int repair_utf8(tr_encoder *e, const char **text, size_t *len)
{
    const unsigned char *s = (const unsigned char *)*text;
    size_t n = *len;
    if (tr_utf8_valid_prefix(s, n) == n)
        return TR_OK;
    size_t need = tr_utf8_lossy(s, n, e->t->spm_type != NULL, NULL) + 1;
    if (need > e->clean_cap) {
        char *p = realloc(e->clean, need);
        if (!p)
            return tr_fail(TR_ERR_NOMEM, "out of memory for a text of %zu bytes", n);
        e->clean = p;
        e->clean_cap = need;
    }
    *len = tr_utf8_lossy(s, n, e->t->spm_type != NULL, e->clean);
    *text = e->clean;
    return TR_OK;
}

/* The added token of `kind` (ADDED_RAW or ADDED_NORMALIZED) starting at text (longest
 * first), or NULL. */
static const added_token *added_at(const tr_tokenizer *t, int kind, const char *text,
                                   size_t left)
{
    for (int i = 0; i < t->n_added; i++) {
        const added_token *a = &t->added[i];
        if (a->normalized == (kind == ADDED_NORMALIZED) && a->match_len <= left &&
            !memcmp(text, a->match, a->match_len))
            return a;
    }
    return NULL;
}

/* e->norm with room for a segment of len bytes (and the space put first). */
static int norm_room(tr_encoder *e, size_t len)
{
    if (len + 1 <= e->norm_cap)
        return TR_OK;
    char *p = realloc(e->norm, len + 1);
    if (!p)
        return tr_fail(TR_ERR_NOMEM, "out of memory for a text of %zu bytes", len);
    e->norm = p;
    e->norm_cap = len + 1;
    return TR_OK;
}

/* A SentencePiece-style segment (text between added tokens; at_start: it begins the text):
 * U+2581 read as the space it stands for, the space the normalizer's Prepend or Metaspace's
 * prepend_scheme puts first, then one piece, or (Metaspace split) a piece per space, each
 * space starting its piece (tokenizers' MergedWithNext). */
static int sp_segment(tr_encoder *e, const char *text, size_t len, int at_start)
{
    const tr_tokenizer *t = e->t;
    int space_first = len && (text[0] == ' ' || (len >= 3 && !memcmp(text, SP_SPACE, 3)));
    int prepend = t->sp_prepend == SP_PREPEND_ALWAYS ||
                  (t->sp_prepend == SP_PREPEND_UNLESS_SPACE && !space_first) ||
                  (t->sp_prepend == SP_PREPEND_FIRST && at_start && !space_first);
    if (!len)
        return TR_OK;
    if (norm_room(e, len))
        return TR_ERR_NOMEM;
    e->norm[0] = ' ';
    size_t n = (size_t)prepend + sp_decoded_text(text, len, e->norm + prepend), start = 0;
    int rc = TR_OK;
    for (size_t i = 1; i < n && t->sp_split && !rc; i++)
        if (e->norm[i] == ' ') {
            rc = on_piece(e, e->norm + start, i - start);
            start = i;
        }
    return rc ? rc : on_piece(e, e->norm + start, n - start);
}

/* The text between two added tokens (or the text's ends); at_start: it begins the text. */
static int encode_segment(tr_encoder *e, const char *text, size_t len, int at_start)
{
    if (e->t->sp)
        return sp_segment(e, text, len, at_start);
    return pretokenize(e->t, &e->ps, 0, text, len, on_piece, e);
}

typedef int (*segment_fn)(tr_encoder *e, const char *text, size_t len, int at_start);

/* text cut at the added tokens of `kind` (tokenizers' split_with_indices: leftmost, the
 * longest there), each token's id appended in its place and each piece between (empty ones
 * too) given to next; at_start: text begins the whole text. */
static int split_added(tr_encoder *e, int kind, const char *text, size_t len, int at_start,
                       segment_fn next)
{
    const tr_tokenizer *t = e->t;
    if (!(t->added_kinds & kind))
        return next(e, text, len, at_start);
    size_t start = 0;
    int rc = TR_OK;
    for (size_t i = 0; i < len && !rc; i++) {
        if (!(t->added_first[(unsigned char)text[i]] & kind))
            continue;
        const added_token *a = added_at(t, kind, text + i, len - i);
        if (!a)
            continue;
        rc = next(e, text + start, i - start, at_start && start == 0);
        if (!rc)
            rc = append_ids(e, &a->id, 1);
        start = i + a->match_len;
        i = start - 1;
    }
    return rc ? rc : next(e, text + start, len - start, at_start && start == 0);
}

/* A piece of the text between added tokens matched in the raw text: the normalizer (NFC),
 * then the added tokens that are matched in normalized text (tokenizers'
 * AddedVocabulary::extract_and_normalize). */
static int normalize_segment(tr_encoder *e, const char *text, size_t len, int at_start)
{
    int rc = e->t->nfc ? tok_nfc(&e->nfc, text, len, &text, &len) : TR_OK;
    return rc ? rc : split_added(e, ADDED_NORMALIZED, text, len, at_start, encode_segment);
}

/* A piece of sentencepiece's normalized text between user-defined pieces. */
static int spm_segment(tr_encoder *e, const char *text, size_t len, int at_start)
{
    (void)at_start;
    return len ? on_piece(e, text, len) : TR_OK;
}

/* sentencepiece's own model: the whole text normalized, then cut at the user-defined pieces. */
static int spm_encode(tr_encoder *e, const char *text, size_t len)
{
    if (norm_room(e, len))
        return TR_ERR_NOMEM;
    size_t n = spm_normalize(e->t, text, len, e->norm);
    return split_added(e, ADDED_NORMALIZED, e->norm, n, 1, spm_segment);
}

/* Python's str.isspace (bidirectional class WS, B or S, or category Zs). */
static int py_isspace(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

/* Meta's Llama 3 encode: the text (valid UTF-8) cut into pieces of 400,000 characters, each
 * cut again before the character that makes a run of str.isspace characters, or of other
 * ones, longer than 25,000; tiktoken encodes each piece on its own (special tokens matched
 * inside it). */
#define META_PIECE_CHARS 400000
#define META_RUN_CHARS 25000
static int llama3_encode(tr_encoder *e, const char *text, size_t len)
{
    size_t start = 0, chars = 0, run = 0;
    int rc = TR_OK, run_space = 0;
    for (size_t i = 0; i < len && !rc;) {
        if (chars == META_PIECE_CHARS) {
            rc = split_added(e, ADDED_RAW, text + start, i - start, 1, normalize_segment);
            start = i;
            chars = 0;
        }
        const unsigned char *p = (const unsigned char *)text + i;
        size_t k = p[0] < 0x80 ? 1 : p[0] < 0xE0 ? 2 : p[0] < 0xF0 ? 3 : 4;
        uint32_t c = k == 1 ? p[0] : k == 2 ? (p[0] & 0x1Fu) << 6 | (p[1] & 0x3F)
                   : k == 3 ? (p[0] & 0x0Fu) << 12 | (p[1] & 0x3Fu) << 6 | (p[2] & 0x3F)
                            : 0x10000; /* (not a space) */
        int space = py_isspace(c);
        if (chars == 0)
            run_space = space, run = 0;
        if (space != run_space) {
            run_space = space;
            run = 1;
        } else if (++run > META_RUN_CHARS && !rc) {
            rc = split_added(e, ADDED_RAW, text + start, i - start, 1, normalize_segment);
            start = i;
            run = 1;
        }
        chars++;
        i += k;
    }
    return rc ? rc : split_added(e, ADDED_RAW, text + start, len - start, 1, normalize_segment);
}

int tr_encode(tr_encoder *e, const char *text, size_t len, int add_special, int32_t **ids,
              size_t *n, size_t *cap)
{
    const tr_tokenizer *t = e->t;
    e->ids = ids;
    e->n = n;
    e->cap = cap;
    if (t->kind == TOK_BYTES) { /* bytes, NUL dropped: token 0 ends documents */
        int rc = ids_reserve(ids, *n, cap, len);
        for (size_t i = 0; i < len && !rc; i++)
            if (text[i])
                (*ids)[(*n)++] = (unsigned char)text[i];
        return rc;
    }
    int rc = repair_utf8(e, &text, &len);
    if (!rc && add_special)
        rc = append_ids(e, t->prefix, t->n_prefix);
    if (!rc)
        rc = t->spm_type           ? spm_encode(e, text, len)
             : t->kind == TOK_LLAMA3 ? llama3_encode(e, text, len)
                                     : split_added(e, ADDED_RAW, text, len, 1, normalize_segment);
    if (!rc && add_special)
        rc = append_ids(e, t->suffix, t->n_suffix);
    return rc;
}

/* The byte that the decoder's ByteFallback reads in token id (a vocabulary id), or -1. */
static int fallback_byte(const tr_tokenizer *t, int32_t id)
{
    int exact;
    return t->decode_bytes && t->tok_len[id] == 6
               ? sp_byte_token(t->pool + t->tok_off[id], 6, &exact) : -1;
}

const char *tr_token_bytes(const tr_tokenizer *t, int32_t id, size_t *len)
{
    if (t->kind == TOK_BYTES) {
        if (id < 0 || id >= BYTE_VOCAB)
            return NULL;
        *len = id != 0; /* token 0 is the end of a document, no text */
        return (const char *)all_bytes + id;
    }
    if (id < 0 || id >= t->n_ids || t->tok_len[id] == UINT32_MAX)
        return NULL;
    int b = fallback_byte(t, id);
    *len = b >= 0 ? 1 : t->tok_len[id];
    return b >= 0 ? (const char *)all_bytes + b : t->pool + t->tok_off[id];
}

/* SentencePiece-style decoding (tokenizers' Replace, ByteFallback, Fuse, Strip) of valid ids
 * into s: the tokens' text, each run of byte tokens as its bytes when they are valid UTF-8 and
 * as one U+FFFD a token when not, then up to decode_strip leading spaces removed. Returns the
 * length. */
static size_t sp_decode(const tr_tokenizer *t, const int32_t *ids, size_t n, char *s)
{
    size_t o = 0, l;
    for (size_t i = 0; i < n;) {
        size_t run = 0, at = o;
        for (int byte; i + run < n && (byte = fallback_byte(t, ids[i + run])) >= 0; run++)
            s[o++] = (char)byte;
        if (run && tr_utf8_valid_prefix((const unsigned char *)s + at, o - at) != o - at)
            for (o = at; o < at + 3 * run; o += 3)
                memcpy(s + o, "\xEF\xBF\xBD", 3);
        if (run) {
            i += run;
            continue;
        }
        const char *b = tr_token_bytes(t, ids[i++], &l);
        memcpy(s + o, b, l);
        o += l;
    }
    size_t cut = 0;
    while (cut < o && cut < (size_t)t->decode_strip && s[cut] == ' ')
        cut++;
    memmove(s, s + cut, o - cut);
    return o - cut;
}

int tr_decode(const tr_tokenizer *t, const int32_t *ids, size_t n, char **text, size_t *len)
{
    size_t total = 0, l;
    for (size_t i = 0; i < n; i++) {
        if (!tr_token_bytes(t, ids[i], &l))
            return tr_fail(TR_ERR_INVALID, "token %d (position %zu) is not in the vocabulary of "
                                           "%s", (int)ids[i], i, t->source);
        total += l;
    }
    /* (a byte token may become U+FFFD) */
    char *s = malloc(t->spm_type ? spm_decoded_cap(t, ids, n) : (t->sp ? 3 : 1) * total + 1);
    if (!s)
        return tr_fail(TR_ERR_NOMEM, "out of memory decoding %zu tokens", n);
    size_t o = 0;
    if (t->spm_type)
        o = spm_decode(t, ids, n, s);
    else if (t->sp)
        o = sp_decode(t, ids, n, s);
    else
        for (size_t i = 0; i < n; i++) {
            const char *b = tr_token_bytes(t, ids[i], &l);
            memcpy(s + o, b, l);
            o += l;
        }
    s[o] = '\0';
    *text = s;
    if (len)
        *len = o;
    return TR_OK;
}
