/* GPT-2's files (Megatron's --vocab-file / --merge-file), and the pieces both loaders share:
 * reading JSON, a {token: id} vocabulary, one merge.
 *
 * vocab.json: one JSON object {"token": id, ...}; tokens are spelled in GPT-2's byte
 *   alphabet ("Ġthe" = " the"), ids are integers in [0, 2^24), each used once (the id table
 *   is sized by the largest id: 2^24 keeps a tiny file from costing gigabytes).
 * merges.txt: one merge per line, "left right" (one space, both spelled in the alphabet),
 *   rank = position among the merges; lines starting "#version" are skipped, and so is an
 *   empty last line; the merged token must be in the vocabulary (tokenizers refuses such a
 *   file too). */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "tokenizer/tok_internal.h"

int tok_bad_id(const char *file, const char *where, const char *s, size_t len, long long id)
{
    char shown[160];
    return tr_fail(TR_ERR_INVALID, "%s: %s%stoken '%s' has id %lld, out of range: ids are "
                   "integers from 0 to %d (2^24 - 1)", file, where ? where : "", where ? ": " : "",
                   tok_show(s, len, shown, sizeof shown), id, TOK_MAX_ID);
}

/* Shown in messages: a token, escaped and shortened. */
const char *tok_show(const char *s, size_t len, char *buf, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < len && o + 8 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7f && c != '\'')
            buf[o++] = (char)c;
        else
            o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", c);
    }
    buf[o] = '\0';
    return buf;
}

int load_json_file(const char *path, const char *what, size_t flags, json_t **out)
{
    json_error_t err;
    FILE *f = fopen(path, "rb");
    if (!f)
        return tr_fail(TR_ERR_IO, "cannot open %s %s: %s", what, path, strerror(errno));
    *out = json_loadf(f, JSON_REJECT_DUPLICATES | flags, &err);
    fclose(f);
    if (!*out)
        return tr_fail(TR_ERR_INVALID, "%s:%d:%d: %s is not valid JSON: %s", path, err.line,
                       err.column, what, err.text);
    return TR_OK;
}

int tok_read_model(const char *path, size_t max_bytes, const char *what, char **data, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return tr_fail(TR_ERR_IO, "cannot open --tokenizer-model %s: %s", path, strerror(errno));
    fclose(f);
    return tr_read_file(path, max_bytes, what, data, n);
}

int add_vocab_object(tr_tokenizer *t, json_t *vocab, const char *file)
{
    if (!json_is_object(vocab))
        return tr_fail(TR_ERR_INVALID, "%s: the vocabulary is not a JSON object {\"token\": id}",
                       file);
    size_t n = json_object_size(vocab);
    if (n > TOK_ID_LIMIT)
        return tr_fail(TR_ERR_INVALID, "%s: %zu tokens are too many (ids are below 2^24)", file, n);
    int rc = bmap_init(&t->vocab, (uint32_t)n);
    if (rc)
        return rc;
    char *raw = NULL, shown[160];
    size_t raw_cap = 0;
    const char *key;
    json_t *value;
    json_object_foreach(vocab, key, value) {
        size_t klen = json_object_iter_key_len(json_object_key_to_iter(key));
        if (!json_is_integer(value)) {
            rc = tr_fail(TR_ERR_INVALID, "%s: token '%s' has an id that is not an integer", file,
                         tok_show(key, klen, shown, sizeof shown));
            break;
        }
        if (json_integer_value(value) < 0 || json_integer_value(value) > TOK_MAX_ID) {
            rc = tok_bad_id(file, NULL, key, klen, (long long)json_integer_value(value));
            break;
        }
        if (klen + 1 > raw_cap) {
            raw_cap = 2 * klen + 64;
            char *p = realloc(raw, raw_cap);
            if (!p) {
                rc = tr_fail(TR_ERR_NOMEM, "out of memory reading %s", file);
                break;
            }
            raw = p;
        }
        long rlen = t->sp ? sp_unspace(key, klen, raw) : unmap_token(key, klen, raw);
        if (rlen <= 0) {
            rc = tr_fail(TR_ERR_INVALID, "%s: token '%s' is %s (%s)", file,
                         tok_show(key, klen, shown, sizeof shown),
                         rlen == 0 ? "empty" : t->sp ? "spelled with a space"
                                                     : "not in GPT-2's byte alphabet",
                         t->sp ? "a SentencePiece-style vocabulary spells a space U+2581"
                               : "a byte-level vocabulary spells every token in GPT-2's "
                                 "256-character byte alphabet");
            break;
        }
        int32_t id = (int32_t)json_integer_value(value);
        uint64_t off;
        int dup;
        if ((rc = tok_pool_add(t, raw, (size_t)rlen, &off)) ||
            (rc = bmap_put(&t->vocab, t->pool, off, (uint32_t)rlen, id, &dup)) ||
            (rc = tok_set_id(t, id, off, (uint32_t)rlen, tok_show(key, klen, shown, sizeof shown))))
            break;
    }
    free(raw);
    return rc;
}

int add_merge(tr_tokenizer *t, const char *a, size_t la, const char *b, size_t lb, uint32_t rank,
              const char *file, const char *where)
{
    char buf[512], shown[160], shown2[160];
    if (la + lb > sizeof buf)
        return tr_fail(TR_ERR_INVALID, "%s: %s: a merge of %zu bytes is longer than any token",
                       file, where, la + lb);
    long ra = t->sp ? sp_unspace(a, la, buf) : unmap_token(a, la, buf);
    long rb = ra <= 0 ? -1 : t->sp ? sp_unspace(b, lb, buf + ra) : unmap_token(b, lb, buf + ra);
    if (ra <= 0 || rb <= 0)
        return tr_fail(TR_ERR_INVALID, "%s: %s: merge '%s' '%s': %s", file, where,
                       tok_show(a, la, shown, sizeof shown), tok_show(b, lb, shown2, sizeof shown2),
                       ra == 0 || rb == 0 ? "an empty part"
                       : t->sp            ? "a part spelled with a space"
                                          : "a part outside GPT-2's byte alphabet");
    int32_t left = bmap_get(&t->vocab, t->pool, buf, (size_t)ra);
    int32_t right = bmap_get(&t->vocab, t->pool, buf + ra, (size_t)rb);
    int32_t merged = bmap_get(&t->vocab, t->pool, buf, (size_t)(ra + rb));
    if (left < 0 || right < 0 || merged < 0)
        return tr_fail(TR_ERR_INVALID, "%s: %s: merge '%s' '%s': %s is not in the vocabulary",
                       file, where, tok_show(a, la, shown, sizeof shown),
                       tok_show(b, lb, shown2, sizeof shown2),
                       left < 0 ? "the left part" : right < 0 ? "the right part" : "the merged token");
    return mmap_put(&t->merges, left, right, rank, merged);
}

/* Every line of merges.txt after the vocabulary is in. */
static int load_merges_txt(tr_tokenizer *t, const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return tr_fail(TR_ERR_IO, "cannot open --merge-file %s: %s", path, strerror(errno));
    int rc = mmap_init(&t->merges, 1 << 16);
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    long lineno = 0;
    uint32_t rank = 0;
    while (!rc && (got = getline(&line, &cap, f)) >= 0) {
        lineno++;
        size_t len = (size_t)got;
        int had_newline = len && line[len - 1] == '\n';
        if (had_newline)
            len--;
        if (len >= 8 && !memcmp(line, "#version", 8))
            continue;
        char where[64];
        snprintf(where, sizeof where, "line %ld", lineno);
        const char *sp = memchr(line, ' ', len);
        if (len == 0 || !sp || memchr(sp + 1, ' ', len - (size_t)(sp + 1 - line)) ||
            memchr(line, '\0', len)) {
            if (len == 0 && !had_newline)
                break; /* nothing after the last newline */
            rc = tr_fail(TR_ERR_INVALID,
                         "%s:%ld: expected a merge \"left right\" (two tokens, one space)%s",
                         path, lineno, len == 0 ? ", found an empty line" : "");
            break;
        }
        if (rank == UINT32_MAX - 1) {
            rc = tr_fail(TR_ERR_INVALID, "%s: too many merges", path);
            break;
        }
        rc = add_merge(t, line, (size_t)(sp - line), sp + 1, len - (size_t)(sp + 1 - line),
                       rank++, path, where);
    }
    if (!rc && ferror(f))
        rc = tr_fail(TR_ERR_IO, "cannot read %s: %s", path, strerror(errno));
    free(line);
    fclose(f);
    return rc;
}

int load_gpt2(tr_tokenizer *t, const char *vocab_file, const char *merge_file)
{
    json_t *root;
    int rc = load_json_file(vocab_file, "--vocab-file", 0, &root);
    if (rc)
        return rc;
    rc = add_vocab_object(t, root, vocab_file);
    json_decref(root);
    if (!rc)
        rc = tok_finish_bytes(t);
    if (!rc)
        rc = load_merges_txt(t, merge_file);
    if (rc)
        return rc;
    char eot[] = "<|endoftext|>";
    t->eod = bmap_get(&t->vocab, t->pool, eot, strlen(eot));
    return TR_OK;
}
