/* tokenizer/ internals: the tokenizer's tables (vocab.c), the two file loaders (load_gpt2.c,
 * load_hf.c), the regex pre-tokenizer (pretok.c), the merge loop (bpe.c) and the front end
 * (tokenizer.c). Not part of the contract.
 *
 * Every token is kept as the raw BYTES it stands for (the files spell byte-level tokens
 * through GPT-2's byte -> printable-character map; loading undoes it), so merging works on
 * the text's own bytes and decoding is concatenation. */
#ifndef TR_TOK_INTERNAL_H
#define TR_TOK_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "tokenizer/tokenizer.h"

enum { TOK_BYTES, TOK_GPT2, TOK_HF, TOK_LLAMA2, TOK_GPT_SP, /* these two: load_spm.c */
       TOK_TIKTOKEN, TOK_LLAMA3, /* load_tiktoken.c */
       TOK_KINDS };

/* Ids are below 2^24 (16,777,216; the largest real vocabularies have ~256k): the id table
 * takes 12 bytes per id up to the largest, so a tiny file naming id 2^31-2 would cost ~26 GB.
 * Every id from a file is checked against this before the table is sized, and
 * tok_ids_reserve() refuses more. */
#define TOK_ID_LIMIT (1 << 24)
#define TOK_MAX_ID (TOK_ID_LIMIT - 1)
#define TOK_MAX_STEPS 8       /* pre-tokenizer steps of a Sequence */
#define TOK_MAX_TEMPLATE 8    /* special ids before / after the text in a template */
#define TOK_NO_RANK UINT32_MAX
#define BYTE_VOCAB 256 /* ByteLevel: token = byte */

/* ---- vocab.c: tables ---- */

/* Open-addressing map from byte strings (kept in the owner's pool) to int32 values. */
typedef struct {
    uint32_t *slot; /* index + 1 into keys, 0 = empty; capacity mask + 1 */
    uint32_t mask;
    uint32_t n, cap_keys;
    uint64_t *key_off; /* per entry: offset of the key in *pool (shared with the owner) */
    uint32_t *key_len;
    int32_t *value;
} bytes_map;

/* (left id, right id) -> (rank, merged id). */
typedef struct {
    uint64_t *key; /* left << 32 | right, UINT64_MAX = empty */
    uint32_t *rank;
    int32_t *merged;
    uint32_t mask, n;
} merge_map;

/* A Split (regex) or ByteLevel pre-tokenizer step. tokenizers' Punctuation and Digits are
 * Splits on a class of single characters (pretok_classes.h), each character one match. */
enum { STEP_SPLIT, STEP_BYTELEVEL };
enum { SPLIT_ISOLATED, SPLIT_REMOVED, SPLIT_MERGED_PREV, SPLIT_MERGED_NEXT, SPLIT_CONTIGUOUS };
typedef struct {
    int kind;
    pcre2_code *re;       /* NULL: ByteLevel without its regex */
    int behavior, invert; /* Split */
    int add_prefix_space; /* ByteLevel */
    /* a ByteLevel step came before: tokenizers runs this one on its output, the text spelled
     * in GPT-2's byte alphabet (one character a byte), so the regex sees that spelling and
     * the pieces may cut a character's bytes apart */
    int mapped;
} pretok_step;

typedef struct {
    char *text; /* raw text, NUL-terminated */
    size_t len;
    int32_t id;
    int normalized; /* matched after the normalizer (in `match`), else in the raw text */
    char *match;    /* normalized: the text NFC'd when the tokenizer has NFC (else = text) */
    size_t match_len;
} added_token;

struct tr_tokenizer {
    int kind;
    char *source; /* the file messages name */
    /* id -> bytes: token i is pool[tok_off[i] .. + tok_len[i]); tok_len UINT32_MAX = hole */
    char *pool;
    size_t pool_len, pool_cap;
    uint64_t *tok_off;
    uint32_t *tok_len;
    int32_t n_ids; /* table size = vocab_size */
    bytes_map vocab; /* model vocabulary: bytes -> id (added tokens are not in it) */
    merge_map merges;
    int32_t byte_id[256]; /* the token of each single byte */
    int ignore_merges;    /* a pre-token that is a whole vocabulary entry is one token */
    pretok_step steps[TOK_MAX_STEPS];
    int n_steps;
    added_token *added; /* sorted by length (of `match`), longest first */
    int n_added;
    /* bit ADDED_RAW / ADDED_NORMALIZED: some added token of that kind starts with this byte */
    uint8_t added_first[256];
    int added_kinds; /* the bits of added_first that some token sets */
    int nfc; /* the normalizer is NFC (alone, in a Sequence, or with a SentencePiece one) */
    int32_t prefix[TOK_MAX_TEMPLATE], suffix[TOK_MAX_TEMPLATE];
    int n_prefix, n_suffix;
    int32_t eod;
    /* SentencePiece-style BPE (load_sp.c): the symbols are characters, not bytes, and U+2581
     * is the files' space; the tables keep it as ' ' (the text's spaces and U+2581 are one
     * symbol either way, as the normalizer or Metaspace makes them). */
    int sp;
    int sp_prepend;          /* SP_PREPEND_*: the space put before a segment of text */
    int sp_split;            /* Metaspace split: a piece per space, the space starting it */
    int byte_fallback;       /* a character without a token becomes its bytes' <0xHH> */
    int fuse_unk;            /* consecutive unknown characters are one unk_id */
    int32_t unk_id;          /* -1: none (an unknown character is dropped, as tokenizers does) */
    int32_t fallback_id[256]; /* <0xHH> of each byte, -1 when missing */
    int decode_bytes;        /* the decoder's ByteFallback: a token spelled <0xHH> is a byte */
    int decode_strip;        /* leading spaces the decoder strips from the text (its Strip) */
    /* sentencepiece's own model file (load_spm.c; sp is 1 too): each id's piece type, the
     * normalizer's switches; the tables hold each id's text as decoding gives it (a BYTE
     * piece its byte, CONTROL nothing, UNKNOWN the unk surface) */
    uint8_t *spm_type; /* NULL: not such a model */
    int spm_dummy_prefix, spm_remove_spaces;
};

enum { ADDED_RAW = 1, ADDED_NORMALIZED = 2 };
enum { SP_PREPEND_NEVER, SP_PREPEND_ALWAYS, SP_PREPEND_UNLESS_SPACE, SP_PREPEND_FIRST };
#define SP_SPACE "\xE2\x96\x81" /* U+2581, SentencePiece's spelling of a space */

/* realloc *p to n items of `size` bytes; 0 (and *p unchanged) when that fails. */
static inline int tok_grow(void *p, size_t n, size_t size)
{
    void *q = n <= SIZE_MAX / size ? realloc(*(void **)p, n * size) : NULL;
    if (q)
        *(void **)p = q;
    return q != NULL;
}

uint64_t tok_hash(const void *p, size_t n);
/* Append bytes to the pool; *off is where they start. */
TR_MUST_CHECK int tok_pool_add(tr_tokenizer *t, const void *bytes, size_t n, uint64_t *off);
/* Size the id table for ids < n (holes until set); n past TOK_ID_LIMIT is TR_ERR_INVALID. */
TR_MUST_CHECK int tok_ids_reserve(tr_tokenizer *t, int32_t n);
/* Give id its bytes (already in the pool at off). A second, different token for one id is
 * refused (naming `what`). */
TR_MUST_CHECK int tok_set_id(tr_tokenizer *t, int32_t id, uint64_t off, uint32_t len,
                             const char *what);

TR_MUST_CHECK int bmap_init(bytes_map *m, uint32_t expected);
void bmap_free(bytes_map *m);
/* Insert key (bytes at pool + off, len) -> value; 1 in *dup (and nothing changed) when the
 * key is there already. */
TR_MUST_CHECK int bmap_put(bytes_map *m, const char *pool, uint64_t off, uint32_t len,
                           int32_t value, int *dup);
/* The value of key, or -1. */
int32_t bmap_get(const bytes_map *m, const char *pool, const void *key, size_t len);

TR_MUST_CHECK int mmap_init(merge_map *m, uint32_t expected);
void mmap_free(merge_map *m);
/* Set (left, right) -> (rank, merged); a later merge of the same pair replaces the earlier
 * one, as tokenizers' map does. */
TR_MUST_CHECK int mmap_put(merge_map *m, int32_t left, int32_t right, uint32_t rank,
                           int32_t merged);
static inline uint32_t mmap_get(const merge_map *m, int32_t left, int32_t right,
                                int32_t *merged)
{
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    uint64_t h = key * 0x9E3779B97F4A7C15ULL;
    for (uint32_t i = (uint32_t)(h >> 40) & m->mask;; i = (i + 1) & m->mask) {
        if (m->key[i] == key) {
            *merged = m->merged[i];
            return m->rank[i];
        }
        if (m->key[i] == UINT64_MAX)
            return TOK_NO_RANK;
    }
}

/* GPT-2's byte <-> printable character map (bytes_to_unicode). byte_char[b] is the code point
 * that spells byte b in the files; char_byte() undoes it (-1: not in the alphabet). */
extern uint16_t byte_char[256];
void byte_map_init(void);
int char_byte(uint32_t cp);
/* A token as spelled in a file -> its raw bytes, into out (room for len bytes: the raw form
 * is never longer). -1 when a character is outside the byte alphabet or the UTF-8 is bad. */
long unmap_token(const char *s, size_t len, char *out);

/* The byte tables once the vocabulary is in: byte_id[] of every byte (each must exist), and
 * the eod default. */
TR_MUST_CHECK int tok_finish_bytes(tr_tokenizer *t);

/* ---- load_gpt2.c, load_hf.c, load_sp.c ---- */
TR_MUST_CHECK int load_gpt2(tr_tokenizer *t, const char *vocab_file, const char *merge_file);
TR_MUST_CHECK int load_hf(tr_tokenizer *t, const char *path);
/* tr_tokenizer_files.config_file of a GPT2BPETokenizer (load_hf.c): add_bos_token's BOS as
 * t->prefix (see tokenizer.h). */
TR_MUST_CHECK int gpt2_bos_from_config(tr_tokenizer *t, const char *path);
struct json_t;
/* load_hf.c's pieces load_sp.c shares: TR_ERR_INVALID "FILE: FIELD: WHAT"; obj[key] as a
 * boolean, dflt when it is not one. */
TR_MUST_CHECK int hf_bad(const char *file, const char *field, const char *what);
int hf_flag(struct json_t *obj, const char *key, int dflt);
/* tokenizer.json's normalizer (t->nfc = 1 when it has NFC; an empty Sequence does nothing)
 * and pre_tokenizer when they make a SentencePiece-style BPE (t->sp = 1: the pre_tokenizer is
 * read here, not by load_hf); any other non-null normalizer is refused, naming it; *read: 1
 * when the normalizer was one of these (0: null, for the caller to check). The model's
 * byte_fallback / unk_token / fuse_unk (after the vocabulary); its decoder. */
TR_MUST_CHECK int sp_load_normalizer(tr_tokenizer *t, const char *file, struct json_t *root,
                                     int *read);
TR_MUST_CHECK int sp_load_model(tr_tokenizer *t, const char *file, struct json_t *model);
TR_MUST_CHECK int sp_load_decoder(tr_tokenizer *t, const char *file, struct json_t *dec);
/* A token as spelled in a SentencePiece vocabulary -> its text (U+2581 -> ' ') into out (room
 * for len bytes); -1 when it holds a literal space, 0 when empty. */
long sp_unspace(const char *s, size_t len, char *out);
/* The id of a SentencePiece vocabulary's token spelled s (len bytes), or -1. */
int32_t sp_vocab_get(const tr_tokenizer *t, const char *s, size_t len);
/* A text with U+2581 -> ' ' (the decoder's Replace) into out (may be s); its length. */
size_t sp_decoded_text(const char *s, size_t len, char *out);
/* The byte that ByteFallback's decoder reads in token s: "<0xHH>" (hex digits of either case,
 * or '+' and one digit, as Rust's from_str_radix takes them), else -1. *exact: spelled as
 * tokenizers spells a fallback byte when encoding ("<0x%02X>"). */
int sp_byte_token(const char *s, size_t len, int *exact);
/* Read a whole JSON file with jansson (duplicate keys refused, and jansson's decoding flags);
 * `what` names it in messages. */
TR_MUST_CHECK int load_json_file(const char *path, const char *what, size_t flags,
                                 struct json_t **out);
/* A --tokenizer-model file whole, at most max_bytes (tr_read_file: `what` names its kind); a
 * missing one is TR_ERR_IO. */
TR_MUST_CHECK int tok_read_model(const char *path, size_t max_bytes, const char *what, char **data,
                                 size_t *n);
/* A token for messages: escaped (\xNN for bytes outside printable ASCII) and shortened to fit
 * buf's cap bytes. */
const char *tok_show(const char *s, size_t len, char *buf, size_t cap);
/* TR_ERR_INVALID for a token (s, len bytes) whose id is past TOK_MAX_ID or negative, naming
 * file, where (NULL: nothing) the token and the id. */
TR_MUST_CHECK int tok_bad_id(const char *file, const char *where, const char *s, size_t len,
                             long long id);
/* Vocabulary object {token: id} and merge list into the tables (shared by both loaders);
 * file names the source in messages. */
TR_MUST_CHECK int add_vocab_object(tr_tokenizer *t, struct json_t *vocab, const char *file);
TR_MUST_CHECK int add_merge(tr_tokenizer *t, const char *a, size_t la, const char *b,
                            size_t lb, uint32_t rank, const char *file, const char *where);
/* qsort order of t->added: the longest match first, then by id. */
int tok_cmp_added(const void *a, const void *b);

/* ---- spm_proto.c, load_spm.c: sentencepiece's tokenizer.model ---- */
enum { SPM_NORMAL = 1, SPM_UNKNOWN, SPM_CONTROL, SPM_USER_DEFINED, SPM_UNUSED, SPM_BYTE };
typedef struct {
    const char *s; /* into the file's bytes, not NUL-terminated */
    size_t len;
} spm_str;
typedef struct {
    spm_str piece;
    float score;
    int type; /* SPM_* */
} spm_piece;
typedef struct {
    spm_str name;
    size_t charsmap_len; /* precompiled_charsmap's bytes (0: none, the identity) */
    int add_dummy_prefix, remove_extra_whitespaces, escape_whitespaces;
} spm_normalizer;
/* The fields of a ModelProto that encoding and decoding depend on (defaults as the proto's). */
typedef struct {
    spm_piece *pieces; /* id = index */
    int n_pieces, cap_pieces;
    int model_type; /* trainer_spec: 1 UNIGRAM, 2 BPE, 3 WORD, 4 CHAR */
    int byte_fallback, whitespace_as_suffix;
    spm_str unk_surface, bos_piece, eos_piece;
    spm_normalizer norm, denorm;
    int has_denorm;
} spm_model;
/* The ModelProto in data[0 .. len) into *m (m->pieces malloc'ed, even on failure; the strings
 * point into data); TR_ERR_INVALID naming file, the field and the byte for bad bytes. */
TR_MUST_CHECK int spm_parse(const uint8_t *data, size_t len, const char *file, spm_model *m);
/* A tokenizer.model into t (kind TOK_LLAMA2: BOS as the template). */
TR_MUST_CHECK int load_spm(tr_tokenizer *t, const char *path);
/* sentencepiece's normalizer (identity rule) of valid UTF-8 s[0 .. n) into out (room for n + 1
 * bytes), spelled as the tables spell text (U+2581 as ' '); its length. */
size_t spm_normalize(const tr_tokenizer *t, const char *s, size_t n, char *out);
/* sentencepiece's decode of valid ids into s (room for spm_decoded_cap bytes); its length. */
size_t spm_decoded_cap(const tr_tokenizer *t, const int32_t *ids, size_t n);
size_t spm_decode(const tr_tokenizer *t, const int32_t *ids, size_t n, char *s);

/* ---- load_tiktoken.c: tiktoken's rank files ---- */
enum { TIK_NONE, TIK_TEXT, TIK_JSON };
/* What data[0 .. n) looks like: tiktoken's "base64 rank" lines (TIK_TEXT, from its first
 * line), a JSON list (TIK_JSON, Megatron's), or neither. */
int tiktoken_sniff(const char *data, size_t n);
/* f->tokenizer_model into t (kind TOK_TIKTOKEN or TOK_LLAMA3): the ranks, the merges, the
 * special tokens and the pattern of the type (see tokenizer.h). */
TR_MUST_CHECK int load_tiktoken(tr_tokenizer *t, const tr_tokenizer_files *f);

/* ---- pretok.c ---- */
/* GPT-2's pre-tokenizer regex (tokenizers' ByteLevel, tiktoken's gpt2). */
extern const char *const gpt2_pattern;
/* Compile a pattern written for Oniguruma / Rust regex (see tokenizer.h); file names the
 * source in messages. */
TR_MUST_CHECK int compile_pattern(const char *pattern, size_t len, int literal, const char *file,
                                  pcre2_code **out);
/* The single-character classes of tokenizers' Punctuation and Digits pre-tokenizers. */
enum { CLASS_PUNCTUATION, CLASS_NUMERIC };
TR_MUST_CHECK int compile_class(int which, const char *file, pcre2_code **out);
/* Called once per final pre-token (its bytes: not UTF-8 when a mapped step cut a character). */
typedef int (*piece_fn)(void *ctx, const char *piece, size_t len);
typedef struct {
    size_t start, end;
    int is_match;
} segment;
typedef struct { /* per step k */
    pcre2_match_data *md[TOK_MAX_STEPS];
    segment *seg[TOK_MAX_STEPS]; /* a piece's segments (behaviors that group them) */
    size_t n_seg[TOK_MAX_STEPS], cap_seg[TOK_MAX_STEPS];
    char *space[TOK_MAX_STEPS]; /* ByteLevel add_prefix_space: " " + the piece */
    size_t space_cap[TOK_MAX_STEPS];
    char *mapped[TOK_MAX_STEPS]; /* a mapped step's piece in GPT-2's byte alphabet */
    size_t mapped_cap[TOK_MAX_STEPS];
} pretok_state;
TR_MUST_CHECK int pretok_state_init(pretok_state *s, const tr_tokenizer *t);
void pretok_state_free(pretok_state *s);
/* Run the steps from `step` on text[0 .. len), valid UTF-8. */
TR_MUST_CHECK int pretokenize(const tr_tokenizer *t, pretok_state *s, int step, const char *text,
                              size_t len, piece_fn fn, void *ctx);

/* ---- normalize.c ---- */
/* Scratch for tok_nfc (per encoder; zeroed = empty). */
typedef struct {
    int32_t *cp; /* code points, then the result's bytes; room for cap + 1 */
    size_t cap;
    char *out; /* the result, when made of several pieces */
    size_t out_len, out_cap;
} tok_nfc_buf;
/* The NFC of valid UTF-8 s[0 .. len) as tokenizers makes it (utf8proc: UTF8PROC_STABLE |
 * UTF8PROC_COMPOSE, with the characters tokenizers' Unicode 9.0 tables lack kept as they are):
 * *out is s itself when it is NFC by the quick check (pure ASCII among others), else b's
 * bytes, valid until the next call with b. Fails only for memory. */
TR_MUST_CHECK int tok_nfc(tok_nfc_buf *b, const char *s, size_t len, const char **out,
                          size_t *out_len);
void tok_nfc_free(tok_nfc_buf *b);
/* TR_OK when the utf8proc linked has the Unicode version normalize.c's tables were made for,
 * else TR_ERR_INVALID naming file (a tokenizer with NFC is then refused). */
TR_MUST_CHECK int tok_nfc_usable(const char *file);

/* ---- bpe.c ---- */
typedef struct bpe_cache bpe_cache;
TR_MUST_CHECK int bpe_cache_create(bpe_cache **out);
void bpe_cache_free(bpe_cache *c);
/* Ids of one pre-token appended to *ids (see tr_encode); a SentencePiece-style model's
 * (t->sp) pre-token starts as its characters (their bytes' <0xHH> tokens, or unk_id, for
 * those without a token). */
TR_MUST_CHECK int bpe_word(const tr_tokenizer *t, bpe_cache *c, const char *w, size_t n,
                           int32_t **ids, size_t *n_ids, size_t *cap);
/* Make room for `more` ids. */
TR_MUST_CHECK int ids_reserve(int32_t **ids, size_t n, size_t *cap, size_t more);

#endif
