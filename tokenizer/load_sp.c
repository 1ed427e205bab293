/* The SentencePiece-style BPE of a tokenizer.json (Llama-2, Mistral, TinyLlama; what
 * transformers' LlamaConverter writes): the parts that differ from a byte-level BPE.
 *
 * Read (anything else in these fields is refused, naming it):
 *   normalizer      Sequence of Prepend {"prepend": "▁"} and Replace {pattern {String " "},
 *                   content "▁"} (the Replace is required) and NFC (optional, anywhere: it
 *                   commutes with the other two), with pre_tokenizer null; or
 *   pre_tokenizer   Metaspace {replacement "▁", prepend_scheme always|first|never (older files:
 *                   add_prefix_space), split}, with normalizer null or NFC only
 * A normalizer that is NFC alone, or a Sequence of NFC only, sets t->nfc and leaves the rest to
 * load_hf.c (byte-level BPE) or to a Metaspace pre-tokenizer.
 *   model           BPE as load_hf.c reads it, plus byte_fallback, fuse_unk and unk_token (a
 *                   token of the vocabulary, or null)
 *   decoder         Sequence of Replace {pattern {String "▁"}, content " "}, then optionally
 *                   ByteFallback, Fuse, and Strip {content " ", start N, stop 0} after Fuse
 * U+2581 ('▁') is the files' space: the tables keep it as ' ', so the vocabulary may not also
 * spell a token with a literal space. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "tokenizer/tok_internal.h"

static const char *type_name(json_t *obj)
{
    json_t *ty = json_is_object(obj) ? json_object_get(obj, "type") : NULL;
    return json_is_string(ty) ? json_string_value(ty) : NULL;
}

/* obj[key] is the string s. */
static int is_string(json_t *obj, const char *key, const char *s)
{
    json_t *v = json_object_get(obj, key);
    return json_is_string(v) && json_string_length(v) == strlen(s) &&
           !strcmp(json_string_value(v), s);
}

/* A Replace of the String `from` by `to`. */
static int is_replace(json_t *obj, const char *from, const char *to)
{
    return is_string(json_object_get(obj, "pattern"), "String", from) &&
           is_string(obj, "content", to);
}

size_t sp_decoded_text(const char *s, size_t len, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        int space = i + 3 <= len && !memcmp(s + i, SP_SPACE, 3);
        out[o++] = space ? ' ' : s[i];
        i += space ? 2 : 0;
    }
    return o;
}

long sp_unspace(const char *s, size_t len, char *out)
{
    return memchr(s, ' ', len) ? -1 : (long)sp_decoded_text(s, len, out);
}

int32_t sp_vocab_get(const tr_tokenizer *t, const char *s, size_t len)
{
    char *raw = malloc(len + 1);
    long rlen = raw ? sp_unspace(s, len, raw) : -1;
    int32_t id = rlen > 0 ? bmap_get(&t->vocab, t->pool, raw, (size_t)rlen) : -1;
    free(raw);
    return id;
}

static int hex_digit(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                          : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

int sp_byte_token(const char *s, size_t len, int *exact)
{
    *exact = 0;
    if (len != 6 || memcmp(s, "<0x", 3) || s[5] != '>')
        return -1;
    int hi = s[3] == '+' ? 0 : hex_digit(s[3]), lo = hex_digit(s[4]);
    if (hi < 0 || lo < 0)
        return -1;
    static const char upper[] = "0123456789ABCDEF";
    *exact = s[3] == upper[hi] && s[4] == upper[lo]; /* tokenizers' "<0x%02X>" */
    return hi * 16 + lo;
}

/* The normalizer: Prepend / Replace / NFC, alone or in a Sequence. */
static int load_sp_normalizer(tr_tokenizer *t, const char *file, json_t *norm)
{
    json_t *list = json_object_get(norm, "normalizers");
    const char *ty = type_name(norm);
    int is_seq = ty && !strcmp(ty, "Sequence"), prepend = 0, replace = 0;
    if (is_seq && !json_is_array(list))
        return hf_bad(file, "normalizer.normalizers", "expected a list");
    size_t n = is_seq ? json_array_size(list) : 1;
    for (size_t i = 0; i < n; i++) {
        json_t *item = is_seq ? json_array_get(list, i) : norm;
        const char *kind = type_name(item);
        if (kind && !strcmp(kind, "Prepend") && is_string(item, "prepend", SP_SPACE) &&
            !prepend) {
            prepend = 1;
        } else if (kind && !strcmp(kind, "Replace") && is_replace(item, " ", SP_SPACE) &&
                   !replace) {
            replace = 1;
        } else if (kind && !strcmp(kind, "NFC")) {
            t->nfc = 1;
        } else {
            char what[300];
            snprintf(what, sizeof what, "a %.40s normalizer is not supported (supported: NFC, "
                                        "alone or in a Sequence; for a SentencePiece-style BPE "
                                        "also Prepend \"" SP_SPACE "\" and Replace \" \" by \""
                                        SP_SPACE "\", once each)",
                     kind ? kind : "typeless");
            return hf_bad(file, "normalizer", what);
        }
    }
    if (!replace)
        return hf_bad(file, "normalizer", "has no Replace of \" \" by \"" SP_SPACE "\": spaces "
                                          "would reach the model as they are (not supported)");
    t->sp_prepend = prepend ? SP_PREPEND_ALWAYS : SP_PREPEND_NEVER;
    return TR_OK;
}

/* A Metaspace pre-tokenizer. */
static int load_metaspace(tr_tokenizer *t, const char *file, json_t *p)
{
    if (!is_string(p, "replacement", SP_SPACE))
        return hf_bad(file, "pre_tokenizer.replacement", "must be \"" SP_SPACE "\" (U+2581)");
    json_t *scheme = json_object_get(p, "prepend_scheme");
    const char *s = json_is_string(scheme) ? json_string_value(scheme) : NULL;
    if (scheme && !json_is_null(scheme) && !s)
        return hf_bad(file, "pre_tokenizer.prepend_scheme", "expected always, first or never");
    if (!s)
        t->sp_prepend = hf_flag(p, "add_prefix_space", 1) ? SP_PREPEND_UNLESS_SPACE
                                                          : SP_PREPEND_NEVER;
    else if (!strcmp(s, "always"))
        t->sp_prepend = SP_PREPEND_UNLESS_SPACE;
    else if (!strcmp(s, "first"))
        t->sp_prepend = SP_PREPEND_FIRST;
    else if (!strcmp(s, "never"))
        t->sp_prepend = SP_PREPEND_NEVER;
    else
        return hf_bad(file, "pre_tokenizer.prepend_scheme", "expected always, first or never");
    t->sp_split = hf_flag(p, "split", 1);
    return TR_OK;
}

/* 1 when norm is NFC, or a Sequence of NFC only (an empty one: nothing, as in tokenizers;
 * *nfc 0 then, else 1). */
static int nfc_only(json_t *norm, int *nfc)
{
    const char *ty = type_name(norm);
    json_t *list = json_object_get(norm, "normalizers"), *item;
    *nfc = 0;
    if (ty && !strcmp(ty, "NFC"))
        return *nfc = 1;
    if (!ty || strcmp(ty, "Sequence") || !json_is_array(list))
        return 0;
    size_t i;
    json_array_foreach(list, i, item) {
        const char *kind = type_name(item);
        if (!kind || strcmp(kind, "NFC"))
            return 0;
    }
    *nfc = json_array_size(list) > 0;
    return 1;
}

int sp_load_normalizer(tr_tokenizer *t, const char *file, json_t *root, int *read)
{
    json_t *norm = json_object_get(root, "normalizer");
    json_t *pre = json_object_get(root, "pre_tokenizer");
    const char *pre_type = type_name(pre);
    int plain = norm && !json_is_null(norm) && nfc_only(norm, &t->nfc);
    int has_norm = norm && !json_is_null(norm) && !plain;
    *read = plain || has_norm;
    int metaspace = pre_type && !strcmp(pre_type, "Metaspace");
    if (!has_norm && !metaspace)
        return TR_OK;
    /* the normalizer first: one that is not supported is named as such */
    int rc = has_norm ? load_sp_normalizer(t, file, norm) : TR_OK;
    if (rc)
        return rc;
    if (has_norm && metaspace)
        return hf_bad(file, "normalizer", "a normalizer with a Metaspace pre-tokenizer is not "
                                          "supported");
    if (has_norm && pre && !json_is_null(pre))
        return hf_bad(file, "pre_tokenizer", "must be null with a normalizer (a "
                                             "SentencePiece-style BPE takes each text whole)");
    rc = has_norm ? TR_OK : load_metaspace(t, file, pre);
    t->sp = !rc;
    return rc;
}

int sp_load_decoder(tr_tokenizer *t, const char *file, json_t *dec)
{
    static const char *const order[] = {"Replace", "ByteFallback", "Fuse", "Strip"};
    const char *need = "expected a Sequence of Replace \"" SP_SPACE "\" by \" \", then "
                       "ByteFallback, Fuse and Strip {content \" \", stop 0} (each optional, in "
                       "this order; Strip after Fuse)";
    const char *ty = type_name(dec);
    json_t *list = json_object_get(dec, "decoders");
    if (!ty || strcmp(ty, "Sequence") || !json_is_array(list) || !json_array_size(list))
        return hf_bad(file, "decoder", need);
    int at = 0, fuse = 0;
    size_t i;
    json_t *item;
    json_array_foreach(list, i, item) {
        const char *kind = type_name(item);
        int k = at;
        while (k < 4 && (!kind || strcmp(kind, order[k])))
            k++;
        if (k == 4 || (i == 0) != (k == 0))
            return hf_bad(file, "decoder", need);
        at = k + 1;
        if (k == 0 && !is_replace(item, SP_SPACE, " "))
            return hf_bad(file, "decoder", need);
        t->decode_bytes |= k == 1;
        fuse |= k == 2;
        if (k == 3) {
            json_t *start = json_object_get(item, "start"), *stop = json_object_get(item, "stop");
            if (!fuse || !is_string(item, "content", " ") || !json_is_integer(start) ||
                json_integer_value(start) < 0 || json_integer_value(start) > 1 << 20 ||
                !json_is_integer(stop) || json_integer_value(stop) != 0)
                return hf_bad(file, "decoder", need);
            t->decode_strip = (int)json_integer_value(start);
        }
    }
    return TR_OK;
}

int sp_load_model(tr_tokenizer *t, const char *file, json_t *m)
{
    for (int b = 0; b < 256; b++)
        t->fallback_id[b] = -1;
    const char *key;
    json_t *value;
    json_object_foreach(json_object_get(m, "vocab"), key, value) {
        size_t len = json_object_iter_key_len(json_object_key_to_iter(key));
        int exact, b = sp_byte_token(key, len, &exact);
        if (b >= 0 && exact) /* (ids were checked with the vocabulary) */
            t->fallback_id[b] = (int32_t)json_integer_value(value);
    }
    t->byte_fallback = hf_flag(m, "byte_fallback", 0);
    t->fuse_unk = hf_flag(m, "fuse_unk", 0);
    t->unk_id = -1;
    json_t *unk = json_object_get(m, "unk_token");
    if (unk && !json_is_null(unk)) {
        if (json_is_string(unk))
            t->unk_id = sp_vocab_get(t, json_string_value(unk), json_string_length(unk));
        if (t->unk_id < 0)
            return hf_bad(file, "model.unk_token", "expected null or a token of the vocabulary");
    }
    return TR_OK;
}
