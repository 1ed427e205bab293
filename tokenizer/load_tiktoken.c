/* tiktoken's BPE rank files: Megatron's TikTokenizer and Meta's Llama-3 tokenizer.model.
 *
 * One table, token bytes -> rank, in two spellings:
 *  - tiktoken's (tiktoken.load.load_tiktoken_bpe; Meta's tokenizer.model): a line per token,
 *    the base64 of its bytes, a space, its rank in decimal; empty lines skipped, CRLF taken;
 *  - Megatron's JSON (reload_mergeable_ranks; NVIDIA's Nemotron vocabularies): a list of
 *    {"rank": i, "token_bytes": base64, "token_str": ...}, element i of rank i, the first 256
 *    the single bytes 0..255 in order (Megatron asserts both).
 * The ranks are 0..N-1, each once. A rank is a merge priority: tiktoken's _byte_pair_merge
 * merges the adjacent pair whose concatenation has the lowest rank, the leftmost among equals,
 * and takes a piece that is a token whole. Here every split of a token into two tokens is a
 * merge (left, right) -> token ranked by the token's rank, so bpe.c's loop is tiktoken's
 * (ignore_merges: the whole-piece lookup).
 *
 * Ids (tokenizer.h): TikTokenizer (Megatron's CustomTikTokenizer) puts num_special_tokens
 * special tokens first and the ranks after them; Llama3Tokenizer (Meta's llama3/tokenizer.py)
 * keeps the ranks as ids and puts Meta's 256 special tokens after them, named as Llama 3.0
 * names them when the params.json beside the file has no use_scaled_rope (Llama 3.0's), else
 * as Llama 3.1 and later do. */
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "tokenizer/tok_internal.h"

#define TIK_FILE_MAX ((size_t)1 << 30)
#define TIK_LINE_MAX 4096   /* a line's bytes; real tokens are at most a few hundred */
#define MEGATRON_SPECIALS 1000 /* --tiktoken-num-special-tokens' default */
#define LLAMA3_SPECIALS 256    /* Meta's num_reserved_special_tokens */

/* Megatron's PATTERN_TIKTOKEN (v1) and PATTERN_TIKTOKEN_V2, and Meta's Llama-3 pat_str. */
static const char v1_pattern[] =
    "[^\\r\\n\\p{L}\\p{N}]?+\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]++[\\r\\n]*|\\s*[\\r\\n]|"
    "\\s+(?!\\S)|\\s+";
static const char v2_pattern[] =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|"
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|"
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char llama3_pattern[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* Meta's special tokens after the ranks: the named ones, then <|reserved_special_token_K|>
 * from K = first_reserved up to 256 in all. Llama 3.1 to 3.3: llama-models' llama3
 * tokenizer; Llama 3.0: Meta's llama3 repository's tokenizer.py (and its Hugging Face
 * tokenizer.json), the same ids with five of the names reserved ones. */
static const char *const llama31_named[] = {
    "<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
    "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|step_id|>",
    "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>",
    "<|image|>"};
static const char *const llama30_named[] = {
    "<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
    "<|reserved_special_token_1|>", "<|reserved_special_token_2|>",
    "<|reserved_special_token_3|>", "<|start_header_id|>", "<|end_header_id|>",
    "<|reserved_special_token_4|>", "<|eot_id|>"};
typedef struct {
    const char *const *named;
    int n_named, first_reserved;
} llama3_names;
static const llama3_names llama31_names = {llama31_named, 12, 2};
static const llama3_names llama30_names = {llama30_named, 10, 5};
/* Megatron's required special tokens (its defaults); </s> is the end of document */
static const char *const megatron_required[] = {"<unk>", "<s>", "</s>"};

typedef struct {
    uint64_t off; /* the token's bytes in t->pool */
    uint32_t len;
    int32_t rank;
    long where; /* text: its line; JSON: its element */
} tik_entry;

typedef struct {
    tik_entry *e;
    size_t n, cap;
    int json; /* where is an element index */
} tik_table;

static const char *where_word(const tik_table *tb) { return tb->json ? "element" : "line"; }

static int b64_value(unsigned char c)
{
    return c >= 'A' && c <= 'Z'   ? c - 'A'
           : c >= 'a' && c <= 'z' ? c - 'a' + 26
           : c >= '0' && c <= '9' ? c - '0' + 52
           : c == '+'             ? 62
           : c == '/'             ? 63
                                  : -1;
}

/* Standard base64 (padding required) s[0 .. n) into out (room for n / 4 * 3); its length, or
 * -1 with *why. */
static long b64_decode(const char *s, size_t n, unsigned char *out, const char **why)
{
    if (!n || n % 4) {
        *why = n ? "the token's base64 has a length that is not a multiple of 4" : "an empty token";
        return -1;
    }
    size_t o = 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4], pad = 0;
        for (int k = 0; k < 4; k++) {
            unsigned char c = (unsigned char)s[i + k];
            if (c == '=' && i + 4 == n && k >= 2) {
                v[k] = 0;
                pad++;
                continue;
            }
            v[k] = pad ? -1 : b64_value(c);
            if (v[k] < 0) {
                *why = pad ? "base64 padding '=' followed by a character"
                           : "a character outside base64's alphabet in the token";
                return -1;
            }
        }
        uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 |
                     (uint32_t)v[3];
        out[o++] = (unsigned char)(w >> 16);
        if (pad < 2)
            out[o++] = (unsigned char)(w >> 8);
        if (pad < 1)
            out[o++] = (unsigned char)w;
    }
    if (!o) {
        *why = "an empty token";
        return -1;
    }
    return (long)o;
}

static int bad_at(const char *file, const tik_table *tb, long where, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int bad_at(const char *file, const tik_table *tb, long where, const char *fmt, ...)
{
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return tr_fail(TR_ERR_INVALID, tb->json ? "%s: element %ld: %s" : "%s:%ld: %s", file, where,
                   what);
}

/* One token's base64 decoded into the pool and listed with its rank. */
static int add_entry(tr_tokenizer *t, tik_table *tb, const char *file, const char *b64, size_t n,
                     long long rank, long where, unsigned char *scratch)
{
    const char *why = NULL;
    long len = b64_decode(b64, n, scratch, &why);
    if (len < 0)
        return bad_at(file, tb, where, "%s", why);
    if (tb->n == tb->cap) {
        size_t cap = tb->cap ? 2 * tb->cap : 4096;
        if (!tok_grow(&tb->e, cap, sizeof *tb->e))
            return tr_fail(TR_ERR_NOMEM, "out of memory reading %s", file);
        tb->cap = cap;
    }
    tik_entry *e = &tb->e[tb->n++];
    e->len = (uint32_t)len;
    e->rank = (int32_t)rank;
    e->where = where;
    return tok_pool_add(t, scratch, (size_t)len, &e->off);
}

/* tiktoken's "base64 rank" lines. */
static int parse_text(tr_tokenizer *t, tik_table *tb, const char *file, const char *data,
                      size_t n)
{
    unsigned char scratch[TIK_LINE_MAX];
    long line = 0;
    for (size_t at = 0; at < n;) {
        const char *s = data + at, *nl = memchr(s, '\n', n - at);
        size_t len = nl ? (size_t)(nl - s) : n - at;
        at += len + 1;
        line++;
        if (len && s[len - 1] == '\r')
            len--;
        if (!len)
            continue;
        if (len > TIK_LINE_MAX)
            return bad_at(file, tb, line, "a line of %zu bytes (at most 4096: 'base64 rank')", len);
        size_t sp = 0;
        while (sp < len && s[sp] != ' ' && s[sp] != '\t')
            sp++;
        size_t r = sp;
        while (r < len && (s[r] == ' ' || s[r] == '\t'))
            r++;
        if (r == len)
            return bad_at(file, tb, line, "no rank after the token (a line is 'base64 rank')");
        long long rank = 0;
        size_t d = r;
        for (; d < len && s[d] >= '0' && s[d] <= '9'; d++)
            if ((rank = rank * 10 + (s[d] - '0')) > TOK_MAX_ID)
                return bad_at(file, tb, line, "rank too large (ids are below 2^24 = %d)",
                              TOK_ID_LIMIT);
        if (d < len) {
            char shown[64];
            return bad_at(file, tb, line, "rank '%s' is not a number (a line is 'base64 rank')",
                          tok_show(s + r, len - r, shown, sizeof shown));
        }
        int rc = add_entry(t, tb, file, s, sp, rank, line, scratch);
        if (rc)
            return rc;
    }
    return TR_OK;
}

/* Megatron's JSON list, checked as reload_mergeable_ranks asserts. */
static int parse_json(tr_tokenizer *t, tik_table *tb, const char *file, const char *data,
                      size_t n)
{
    json_error_t err;
    json_t *root = json_loadb(data, n, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &err);
    if (!root)
        return tr_fail(TR_ERR_INVALID, "%s:%d:%d: not valid JSON: %s", file, err.line, err.column,
                       err.text);
    int rc = TR_OK;
    unsigned char scratch[TIK_LINE_MAX];
    if (!json_is_array(root))
        rc = tr_fail(TR_ERR_INVALID, "%s: expected a JSON list of {\"rank\", \"token_bytes\", "
                     "\"token_str\"} (Megatron's TikTokenizer vocabulary)", file);
    for (size_t i = 0; !rc && i < json_array_size(root); i++) {
        json_t *x = json_array_get(root, i), *rank = json_object_get(x, "rank"),
               *b64 = json_object_get(x, "token_bytes");
        if (!json_is_object(x) || json_object_size(x) != 3 || !rank || !b64 ||
            !json_object_get(x, "token_str"))
            rc = bad_at(file, tb, (long)i, "expected an object of exactly \"rank\", "
                        "\"token_bytes\", \"token_str\"");
        else if (!json_is_integer(rank) || json_integer_value(rank) != (json_int_t)i)
            rc = bad_at(file, tb, (long)i, "\"rank\" is not %zu (its position in the list)", i);
        else if (i > TOK_MAX_ID)
            rc = bad_at(file, tb, (long)i, "too many tokens (ids are below 2^24 = %d)",
                        TOK_ID_LIMIT);
        else if (!json_is_string(b64) || json_string_length(b64) > TIK_LINE_MAX)
            rc = bad_at(file, tb, (long)i, "\"token_bytes\" is not a base64 string of at most "
                        "4096 characters");
        else
            rc = add_entry(t, tb, file, json_string_value(b64), json_string_length(b64),
                           (long long)i, (long)i, scratch);
        if (!rc && i < 256 && (tb->e[i].len != 1 || (unsigned char)t->pool[tb->e[i].off] != i))
            rc = bad_at(file, tb, (long)i, "rank %zu is not the single byte of that value "
                        "(Megatron's first 256 ranks are the bytes in order)", i);
    }
    json_decref(root);
    return rc;
}

static int by_rank(const void *a, const void *b)
{
    const tik_entry *x = a, *y = b;
    return x->rank != y->rank ? (x->rank > y->rank) - (x->rank < y->rank)
                              : (x->where > y->where) - (x->where < y->where);
}

/* Ranks 0..N-1 each once (sorted into rank order), every token once, the byte tokens; the
 * tables with each rank at id rank + shift and the merges. */
static int build(tr_tokenizer *t, tik_table *tb, const char *file, int32_t shift, int32_t after)
{
    if (!tb->n)
        return tr_fail(TR_ERR_INVALID, "%s: no token in the file (an empty rank file)", file);
    qsort(tb->e, tb->n, sizeof *tb->e, by_rank);
    for (size_t i = 0; i < tb->n; i++) {
        const tik_entry *e = &tb->e[i];
        if (i && e->rank == e[-1].rank)
            return bad_at(file, tb, e->where, "rank %d is given twice (also %s %ld)",
                          (int)e->rank, where_word(tb), e[-1].where);
        if (e->rank != (int32_t)i) {
            char other[64];
            snprintf(other, sizeof other, "%s %ld", where_word(tb), e->where);
            return tr_fail(TR_ERR_INVALID, "%s: the ranks are not 0..%zu: rank %zu is missing "
                           "(next: %d at %s)", file, tb->n - 1, i, (int)e->rank, other);
        }
    }
    if ((long long)tb->n + shift + after > TOK_ID_LIMIT)
        return tr_fail(TR_ERR_INVALID, "%s: %zu tokens and %d special ones are too many (ids are "
                       "below 2^24)", file, tb->n, (int)(shift + after));
    int rc = tok_ids_reserve(t, (int32_t)tb->n + shift + after);
    if (!rc)
        rc = bmap_init(&t->vocab, (uint32_t)tb->n);
    if (!rc)
        rc = mmap_init(&t->merges, (uint32_t)tb->n);
    for (size_t i = 0; i < tb->n && !rc; i++) {
        const tik_entry *e = &tb->e[i];
        int dup;
        rc = bmap_put(&t->vocab, t->pool, e->off, e->len, e->rank + shift, &dup);
        if (!rc && dup) {
            char shown[80];
            int32_t first = bmap_get(&t->vocab, t->pool, t->pool + e->off, e->len) - shift;
            return bad_at(file, tb, e->where, "token '%s' is given twice (also rank %d)",
                          tok_show(t->pool + e->off, e->len, shown, sizeof shown), (int)first);
        }
        if (!rc)
            rc = tok_set_id(t, e->rank + shift, e->off, e->len, "a rank");
    }
    for (size_t i = 0; i < tb->n && !rc; i++) {
        const tik_entry *e = &tb->e[i];
        const char *s = t->pool + e->off;
        for (uint32_t k = 1; k < e->len && !rc; k++) {
            int32_t a = bmap_get(&t->vocab, t->pool, s, k);
            int32_t b = a < 0 ? -1 : bmap_get(&t->vocab, t->pool, s + k, e->len - k);
            if (b >= 0)
                rc = mmap_put(&t->merges, a, b, (uint32_t)e->rank, e->rank + shift);
        }
    }
    if (!rc)
        rc = tok_finish_bytes(t);
    t->ignore_merges = 1;
    return rc;
}

/* A special token's text at id (decoded as its text; matched in the text when `match`). */
static int add_special(tr_tokenizer *t, int32_t id, const char *text, int match)
{
    size_t len = strlen(text);
    uint64_t off;
    int rc = tok_pool_add(t, text, len, &off);
    if (!rc)
        rc = tok_set_id(t, id, off, (uint32_t)len, text);
    if (rc || !match)
        return rc;
    added_token *a = &t->added[t->n_added];
    if (!(a->text = strdup(text)))
        return tr_fail(TR_ERR_NOMEM, "out of memory for special tokens");
    a->len = a->match_len = len;
    a->match = a->text;
    a->id = id;
    t->n_added++;
    t->added_first[(unsigned char)text[0]] |= ADDED_RAW;
    t->added_kinds |= ADDED_RAW;
    return TR_OK;
}

/* Megatron's special token list: the given one (default <unk> <s> </s>) checked as
 * CustomTikTokenizer asserts, filled up to num with <SPECIAL_i>; ids 0..num-1. */
static int megatron_specials(tr_tokenizer *t, const tr_tokenizer_files *f, int num)
{
    const char *const *list = f->tiktoken_special_tokens ? f->tiktoken_special_tokens
                                                         : megatron_required;
    int n = f->tiktoken_special_tokens ? f->n_tiktoken_special_tokens : 3, rc = TR_OK;
    if (n > num)
        return tr_fail(TR_ERR_CONFIG, "%d special tokens (--tiktoken-special-tokens) are more than "
                       "--tiktoken-num-special-tokens %d", n, num);
    for (int i = 0; i < n; i++) {
        if (!list[i] || !list[i][0])
            return tr_fail(TR_ERR_CONFIG, "--tiktoken-special-tokens: token %d is empty", i);
        for (int j = 0; j < i; j++)
            if (!strcmp(list[i], list[j]))
                return tr_fail(TR_ERR_CONFIG, "--tiktoken-special-tokens: '%s' is given twice",
                               list[i]);
        int filler = -1;
        char name[32];
        if (sscanf(list[i], "<SPECIAL_%d>", &filler) == 1 &&
            snprintf(name, sizeof name, "<SPECIAL_%d>", filler) > 0 && !strcmp(name, list[i]) &&
            filler >= n && filler < num)
            return tr_fail(TR_ERR_CONFIG, "--tiktoken-special-tokens: '%s' is the name of filler "
                           "token %d (Megatron fills ids %d..%d with <SPECIAL_id>)", list[i],
                           filler, n, num - 1);
    }
    for (int r = 0; r < 3; r++) {
        int found = -1;
        for (int i = 0; i < n; i++)
            found = !strcmp(list[i], megatron_required[r]) ? i : found;
        if (found < 0)
            return tr_fail(TR_ERR_CONFIG, "--tiktoken-special-tokens must include <unk>, <s> and "
                           "</s> (Megatron's CustomTikTokenizer); %s is missing",
                           megatron_required[r]);
        if (r == 2)
            t->eod = found;
    }
    for (int i = 0; i < num && !rc; i++) {
        char filler[32];
        snprintf(filler, sizeof filler, "<SPECIAL_%d>", i);
        rc = add_special(t, i, i < n ? list[i] : filler, 0);
    }
    return rc;
}

/* The names of Llama 3.0 when the params.json beside `file` (Meta's download and the
 * original/ folder of Hugging Face's repositories hold both) has no use_scaled_rope, else
 * (no params.json too) those of Llama 3.1 and later. A params.json that is there but not a
 * JSON object, or whose use_scaled_rope is not a boolean, is an error naming it. */
static int llama3_names_for(const char *file, const llama3_names **names)
{
    *names = &llama31_names;
    const char *slash = strrchr(file, '/');
    size_t dir = slash ? (size_t)(slash - file) + 1 : 0;
    char *path = malloc(dir + sizeof "params.json");
    if (!path)
        return tr_fail(TR_ERR_NOMEM, "out of memory reading %s", file);
    memcpy(path, file, dir);
    strcpy(path + dir, "params.json");
    json_t *root = NULL;
    int rc = access(path, F_OK) && errno == ENOENT ? TR_OK
                                                    : load_json_file(path, "params.json", 0, &root);
    json_t *scaled = json_object_get(root, "use_scaled_rope");
    if (!rc && root && !json_is_object(root))
        rc = tr_fail(TR_ERR_INVALID, "%s: expected a JSON object (Meta's params.json beside %s, "
                     "read for the Llama 3 version of its special tokens)", path, file);
    else if (!rc && scaled && !json_is_boolean(scaled))
        rc = tr_fail(TR_ERR_INVALID, "%s: use_scaled_rope: expected true or false", path);
    else if (!rc && root && !scaled)
        *names = &llama30_names;
    json_decref(root);
    free(path);
    return rc;
}

/* Meta's 256 after the n ranks, matched in the text; BOS first with add_special. */
static int llama3_specials(tr_tokenizer *t, int32_t n, const char *file)
{
    const llama3_names *ln;
    int rc = llama3_names_for(file, &ln);
    if (rc)
        return rc;
    if (!(t->added = calloc(LLAMA3_SPECIALS, sizeof *t->added)))
        rc = tr_fail(TR_ERR_NOMEM, "out of memory for special tokens");
    for (int i = 0; i < LLAMA3_SPECIALS && !rc; i++) {
        char name[48];
        snprintf(name, sizeof name, "<|reserved_special_token_%d|>",
                 ln->first_reserved + i - ln->n_named);
        rc = add_special(t, n + i, i < ln->n_named ? ln->named[i] : name, 1);
    }
    qsort(t->added, (size_t)t->n_added, sizeof *t->added, tok_cmp_added);
    t->prefix[t->n_prefix++] = n; /* <|begin_of_text|> */
    t->eod = n + 1;               /* <|end_of_text|> */
    return rc;
}

int tiktoken_sniff(const char *data, size_t n)
{
    size_t i = 0;
    while (i < n && (data[i] == ' ' || data[i] == '\t' || data[i] == '\r' || data[i] == '\n'))
        i++;
    if (i < n && data[i] == '[')
        return TIK_JSON;
    /* a first line "base64 rank" */
    size_t b = 0;
    while (b < n && b64_value((unsigned char)data[b]) >= 0)
        b++;
    while (b < n && data[b] == '=')
        b++;
    if (!b || b >= n || data[b] != ' ')
        return TIK_NONE;
    size_t d = ++b;
    while (d < n && data[d] >= '0' && data[d] <= '9')
        d++;
    return d > b && (d == n || data[d] == '\n' || data[d] == '\r') ? TIK_TEXT : TIK_NONE;
}

int load_tiktoken(tr_tokenizer *t, const tr_tokenizer_files *f)
{
    const char *file = f->tokenizer_model, *pattern = llama3_pattern;
    int megatron = t->kind == TOK_TIKTOKEN, num = 0, keep = 0;
    if (megatron) {
        const char *p = f->tiktoken_pattern;
        if (!p || !p[0])
            return tr_fail(TR_ERR_CONFIG, "tokenizer TikTokenizer needs --tiktoken-pattern v1 or "
                           "v2 (data.tokenizer.tiktoken_pattern)");
        if (strcmp(p, "v1") && strcmp(p, "v2"))
            return tr_fail(TR_ERR_CONFIG, "--tiktoken-pattern '%s' is not v1 or v2", p);
        pattern = !strcmp(p, "v1") ? v1_pattern : v2_pattern;
        num = f->tiktoken_num_special_tokens ? f->tiktoken_num_special_tokens : MEGATRON_SPECIALS;
        if (num < 3 || num >= TOK_ID_LIMIT)
            return tr_fail(TR_ERR_CONFIG, "--tiktoken-num-special-tokens %d is not in [3, 2^24)",
                           num);
        int v = f->tiktoken_vocab_size; /* Megatron's --vocab-size: the first v - num ranks */
        if (v && (v <= num || v > TOK_ID_LIMIT))
            return tr_fail(TR_ERR_CONFIG, "--vocab-size %d is not above --tiktoken-num-special-"
                           "tokens %d (or is past 2^24)", v, num);
        keep = v ? v - num : 0;
    }
    char *data;
    size_t n;
    int rc = tok_read_model(file, TIK_FILE_MAX, "a tiktoken rank file", &data, &n);
    if (rc)
        return rc;
    tik_table tb = {0};
    int kind = tiktoken_sniff(data, n);
    tb.json = kind == TIK_JSON;
    if (!n)
        rc = tr_fail(TR_ERR_INVALID, "%s: an empty file (no token)", file);
    else if (kind == TIK_NONE)
        rc = tr_fail(TR_ERR_INVALID, "%s:1: not a tiktoken rank file: expected 'base64 rank' lines "
                     "(Meta's tokenizer.model) or Megatron's JSON list%s", file,
                     data[0] == '\n' ? " (a sentencepiece model is Llama2Tokenizer's)" : "");
    else
        rc = tb.json ? parse_json(t, &tb, file, data, n) : parse_text(t, &tb, file, data, n);
    free(data);
    size_t kept = 0;
    for (size_t i = 0; keep && i < tb.n; i++) /* Megatron's vocab[:max_vocab] */
        if (tb.e[i].rank < keep)
            tb.e[kept++] = tb.e[i];
    tb.n = keep ? kept : tb.n;
    if (!rc)
        rc = build(t, &tb, file, num, megatron ? 0 : LLAMA3_SPECIALS);
    if (!rc && keep && tb.n < (size_t)keep)
        rc = tr_fail(TR_ERR_INVALID, "%s: %zu ranks, fewer than the %d that --vocab-size %d less "
                     "%d special tokens takes", file, tb.n, keep, keep + num, num);
    if (!rc)
        rc = megatron ? megatron_specials(t, f, num) : llama3_specials(t, (int32_t)tb.n, file);
    free(tb.e);
    pretok_step s = {.kind = STEP_SPLIT, .behavior = SPLIT_REMOVED, .invert = 1};
    if (!rc) /* tiktoken keeps the matches only (find_iter) */
        rc = compile_pattern(pattern, strlen(pattern), 0, file, &s.re);
    if (!rc)
        t->steps[t->n_steps++] = s;
    return rc;
}

const char *tr_tokenizer_model_type(const char *path)
{
    char head[TIK_LINE_MAX];
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t n = fread(head, 1, sizeof head, f);
    fclose(f);
    return tiktoken_sniff(head, n) == TIK_TEXT ? "Llama3Tokenizer" : "Llama2Tokenizer";
}
