/* A Hugging Face tokenizer.json whose model is byte-level BPE (the SentencePiece-style
 * normalizer, Metaspace, byte fallback and decoder: load_sp.c).
 *
 * The parts read (anything else that changes ids is refused, naming the field):
 *   normalizer      null | NFC | Sequence {normalizers: [NFC, ...]} (Qwen2; utf8proc's NFC,
 *                   normalize.c, applied to each piece of text between the added tokens
 *                   matched in the raw text)
 *   pre_tokenizer   ByteLevel {add_prefix_space, use_regex} | Split {pattern: {Regex|String},
 *                   behavior, invert} | Punctuation {behavior} | Digits {individual_digits}
 *                   | Sequence {pretokenizers: [...]}; one ByteLevel must be among them (it is
 *                   what makes the model see bytes), and the steps after it see its alphabet
 *                   (pretok.c)
 *   model           BPE {vocab {token: id}, merges ["a b", ...] or [["a", "b"], ...],
 *                   ignore_merges}; dropout and byte_fallback must be unset (null / false),
 *                   continuing_subword_prefix and end_of_word_suffix unset or "" (Qwen2);
 *                   unk_token and fuse_unk change nothing (every byte has a token)
 *   added_tokens    [{id, content, special, lstrip, rstrip, single_word, normalized}]: as
 *                   tokenizers' AddedVocabulary does, those with normalized false are matched in
 *                   the raw text first, then those with normalized true (default) in each
 *                   normalized piece between, NFC'd themselves when the normalizer is NFC
 *                   (lstrip / rstrip / single_word must be false)
 *   post_processor  null | ByteLevel | TemplateProcessing {single, special_tokens} | Sequence
 *   decoder         null | ByteLevel
 *   truncation, padding: null
 * End of document: tokenizer_config.json's eos_token when that file is beside (a string or an
 * AddedToken object's "content"; it must name an added token or a vocabulary entry, and a file
 * that is there but broken is an error), else the first added token among <|endoftext|>,
 * <|end_of_text|>, </s>, <eos>.
 * Also GPT2BPETokenizer's config_file (gpt2_bos_from_config): its add_bos_token / bos_token read
 * as the eos_token here is. */
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "tokenizer/tok_internal.h"

int hf_bad(const char *file, const char *field, const char *what)
{
    return tr_fail(TR_ERR_INVALID, "%s: %s: %s", file, field, what);
}

/* obj[key] as a string equal to one of `names` (NULL-terminated); index in *which. */
static int type_of(const char *file, const char *field, json_t *obj, const char *const *names,
                   int *which)
{
    json_t *ty = json_is_object(obj) ? json_object_get(obj, "type") : NULL;
    if (!json_is_string(ty))
        return hf_bad(file, field, "expected an object with a \"type\"");
    for (int i = 0; names[i]; i++)
        if (!strcmp(json_string_value(ty), names[i])) {
            *which = i;
            return TR_OK;
        }
    char what[300];
    snprintf(what, sizeof what, "type \"%.60s\" is not supported (a byte-level BPE tokenizer "
                                "reproduced exactly needs one of:",
             json_string_value(ty));
    for (int i = 0; names[i]; i++)
        snprintf(what + strlen(what), sizeof what - strlen(what), " %s", names[i]);
    strncat(what, ")", sizeof what - strlen(what) - 1);
    return hf_bad(file, field, what);
}

/* A boolean option that must be false (or absent / null). */
static int must_be_false(const char *file, const char *field, json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v) || json_is_false(v))
        return TR_OK;
    char what[160];
    snprintf(what, sizeof what, "\"%s\" is set; it is not supported", key);
    return hf_bad(file, field, what);
}

int hf_flag(json_t *obj, const char *key, int dflt)
{
    json_t *v = json_object_get(obj, key);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

static int add_step(tr_tokenizer *t, const char *file, pretok_step step)
{
    if (t->n_steps == TOK_MAX_STEPS) {
        pcre2_code_free(step.re);
        return hf_bad(file, "pre_tokenizer", "more than 8 steps");
    }
    t->steps[t->n_steps++] = step;
    return TR_OK;
}

/* A Split's or Punctuation's "behavior" (tokenizers' SplitDelimiterBehavior): SPLIT_* in
 * *out; absent is dflt (-1: required). */
static int split_behavior(const char *file, const char *kind, json_t *p, int dflt, int *out)
{
    static const char *const behaviors[] = {"Isolated", "Removed", "MergedWithPrevious",
                                            "MergedWithNext", "Contiguous", NULL};
    json_t *b = json_object_get(p, "behavior");
    *out = b ? -1 : dflt;
    for (int i = 0; behaviors[i] && json_is_string(b); i++)
        if (!strcmp(json_string_value(b), behaviors[i]))
            *out = i;
    if (*out >= 0)
        return TR_OK;
    char what[240];
    snprintf(what, sizeof what, "%s's behavior %s%.40s%s is not one of Isolated, Removed, "
                                "MergedWithPrevious, MergedWithNext, Contiguous", kind,
             json_is_string(b) ? "\"" : "", json_is_string(b) ? json_string_value(b)
                                                               : b ? "(not a string)" : "(absent)",
             json_is_string(b) ? "\"" : "");
    return hf_bad(file, "pre_tokenizer.behavior", what);
}

/* A pre_tokenizer (nested Sequences flattened into t->steps). *bytelevel: a ByteLevel step
 * was read; the steps after it are mapped (they see its alphabet, see tok_internal.h). */
static int load_pretok(tr_tokenizer *t, const char *file, json_t *p, int depth, int *bytelevel)
{
    static const char *const kinds[] = {"ByteLevel", "Split", "Sequence", "Punctuation",
                                        "Digits", NULL};
    int which, rc;
    if (json_is_null(p) && depth == 0)
        return TR_OK;
    if ((rc = type_of(file, "pre_tokenizer", p, kinds, &which)))
        return rc;
    if (which == 0) {
        /* a second one would spell the first one's alphabet in its own: no vocabulary does */
        if (*bytelevel)
            return hf_bad(file, "pre_tokenizer", "a second ByteLevel step (not supported)");
        pretok_step s = {.kind = STEP_BYTELEVEL,
                         .add_prefix_space = hf_flag(p, "add_prefix_space", 1)};
        if (hf_flag(p, "use_regex", 1) &&
            (rc = compile_pattern(gpt2_pattern, strlen(gpt2_pattern), 0, file, &s.re)))
            return rc;
        *bytelevel = 1;
        return add_step(t, file, s);
    }
    if (which == 1) {
        json_t *pat = json_object_get(p, "pattern");
        json_t *re = json_object_get(pat, "Regex"), *lit = json_object_get(pat, "String");
        if (!json_is_string(re) && !json_is_string(lit))
            return hf_bad(file, "pre_tokenizer.pattern",
                          "expected {\"Regex\": ...} or {\"String\": ...}");
        pretok_step s = {.kind = STEP_SPLIT, .invert = hf_flag(p, "invert", 0),
                         .mapped = *bytelevel};
        if ((rc = split_behavior(file, "Split", p, -1, &s.behavior)))
            return rc;
        json_t *text = re ? re : lit;
        if ((rc = compile_pattern(json_string_value(text), json_string_length(text), !re, file, &s.re)))
            return rc;
        return add_step(t, file, s);
    }
    if (which >= 3) {
        /* Punctuation {behavior (default Isolated)}; Digits {individual_digits: Isolated when
         * true, Contiguous when false}: tokenizers refuses a Digits without the boolean */
        pretok_step s = {.kind = STEP_SPLIT, .mapped = *bytelevel};
        if (which == 3) {
            if ((rc = split_behavior(file, "Punctuation", p, SPLIT_ISOLATED, &s.behavior)))
                return rc;
        } else {
            json_t *ind = json_object_get(p, "individual_digits");
            if (!json_is_boolean(ind))
                return hf_bad(file, "pre_tokenizer.individual_digits",
                              "Digits needs true or false");
            s.behavior = json_is_true(ind) ? SPLIT_ISOLATED : SPLIT_CONTIGUOUS;
        }
        if ((rc = compile_class(which == 3 ? CLASS_PUNCTUATION : CLASS_NUMERIC, file, &s.re)))
            return rc;
        return add_step(t, file, s);
    }
    json_t *list = json_object_get(p, "pretokenizers");
    if (!json_is_array(list) || depth > 4)
        return hf_bad(file, "pre_tokenizer.pretokenizers", "expected a list of pre-tokenizers");
    size_t i;
    json_t *item;
    json_array_foreach(list, i, item) {
        if ((rc = load_pretok(t, file, item, depth + 1, bytelevel)))
            return rc;
    }
    return TR_OK;
}

static int load_model(tr_tokenizer *t, const char *file, json_t *m)
{
    static const char *const kinds[] = {"BPE", NULL};
    int which, rc;
    if ((rc = type_of(file, "model", m, kinds, &which)) ||
        (!t->sp && (rc = must_be_false(file, "model", m, "byte_fallback"))))
        return rc;
    /* unset: null (or absent); the two affixes also "", which tokenizers reads as none */
    static const char *const unset[] = {"dropout", "continuing_subword_prefix",
                                        "end_of_word_suffix"};
    for (int i = 0; i < 3; i++) {
        json_t *v = json_object_get(m, unset[i]);
        if (v && !json_is_null(v) && !(i && json_is_string(v) && !json_string_length(v))) {
            char field[64], what[200];
            snprintf(field, sizeof field, "model.%s", unset[i]);
            snprintf(what, sizeof what, "must be null%s (a GPT-style byte-level BPE; %s is not "
                                        "supported)", i ? " or \"\"" : "",
                     i ? "an affix on subwords" : "dropout");
            return hf_bad(file, field, what);
        }
    }
    t->ignore_merges = hf_flag(m, "ignore_merges", 0);
    if ((rc = add_vocab_object(t, json_object_get(m, "vocab"), file)) ||
        (rc = t->sp ? sp_load_model(t, file, m) : tok_finish_bytes(t)))
        return rc;
    json_t *merges = json_object_get(m, "merges"), *item;
    if (!json_is_array(merges))
        return hf_bad(file, "model.merges", "expected a list of merges");
    if ((rc = mmap_init(&t->merges, (uint32_t)json_array_size(merges) + 1)))
        return rc;
    size_t i;
    json_array_foreach(merges, i, item) {
        char where[64];
        snprintf(where, sizeof where, "model.merges[%zu]", i);
        if (json_is_string(item)) {
            const char *s = json_string_value(item), *sp = strchr(s, ' ');
            size_t len = json_string_length(item);
            if (!sp || strchr(sp + 1, ' ') || strlen(s) != len)
                return hf_bad(file, where, "expected \"left right\" (two tokens, one space)");
            rc = add_merge(t, s, (size_t)(sp - s), sp + 1, len - (size_t)(sp + 1 - s), (uint32_t)i,
                           file, where);
        } else if (json_is_array(item) && json_array_size(item) == 2 &&
                   json_is_string(json_array_get(item, 0)) && json_is_string(json_array_get(item, 1))) {
            json_t *a = json_array_get(item, 0), *b = json_array_get(item, 1);
            rc = add_merge(t, json_string_value(a), json_string_length(a), json_string_value(b),
                           json_string_length(b), (uint32_t)i, file, where);
        } else {
            return hf_bad(file, where, "expected \"left right\" or [\"left\", \"right\"]");
        }
        if (rc)
            return rc;
    }
    return TR_OK;
}

int tok_cmp_added(const void *a, const void *b)
{
    const added_token *x = a, *y = b;
    return x->match_len != y->match_len ? (x->match_len < y->match_len ? 1 : -1)
                                        : (x->id > y->id) - (x->id < y->id);
}

/* A normalized added token's text as the normalizer makes it (tokenizers normalizes those
 * tokens' content to match them in normalized text): x->match its NFC when that differs. */
static int added_match(tr_tokenizer *t, const char *file, added_token *x)
{
    if (!x->normalized || !t->nfc)
        return TR_OK;
    if (tr_utf8_valid_prefix((const unsigned char *)x->text, x->len) != x->len)
        return hf_bad(file, "added_tokens", "a token that is not UTF-8");
    tok_nfc_buf b = {0};
    const char *s;
    size_t n;
    int rc = tok_nfc(&b, x->text, x->len, &s, &n);
    if (!rc && s != x->text) {
        if (!(x->match = malloc(n + 1))) {
            x->match = x->text;
            rc = tr_fail(TR_ERR_NOMEM, "out of memory reading %s", file);
        } else {
            memcpy(x->match, s, n);
            x->match[n] = '\0';
            x->match_len = n;
        }
    }
    tok_nfc_free(&b);
    return rc;
}

static int load_added(tr_tokenizer *t, const char *file, json_t *list)
{
    if (!list || json_is_null(list))
        return TR_OK;
    if (!json_is_array(list))
        return hf_bad(file, "added_tokens", "expected a list");
    t->added = calloc(json_array_size(list) + 1, sizeof *t->added);
    if (!t->added)
        return tr_fail(TR_ERR_NOMEM, "out of memory reading %s", file);
    size_t i;
    json_t *a;
    int rc;
    json_array_foreach(list, i, a) {
        char where[64];
        snprintf(where, sizeof where, "added_tokens[%zu]", i);
        json_t *id = json_object_get(a, "id"), *content = json_object_get(a, "content");
        if (!json_is_integer(id) || json_integer_value(id) < 0 || !json_is_string(content) ||
            json_string_length(content) == 0 ||
            strlen(json_string_value(content)) != json_string_length(content))
            return hf_bad(file, where,
                          "expected {\"id\": 0 .. 2^24-1, \"content\": non-empty text}");
        if (json_integer_value(id) > TOK_MAX_ID)
            return tok_bad_id(file, where, json_string_value(content),
                              json_string_length(content), (long long)json_integer_value(id));
        if ((rc = must_be_false(file, where, a, "lstrip")) ||
            (rc = must_be_false(file, where, a, "rstrip")) ||
            (rc = must_be_false(file, where, a, "single_word")))
            return rc;
        /* tokenizers matches a normalized added token in the normalized text, after the
         * Prepend: that is not reproduced (NFC alone is) */
        int normalized = hf_flag(a, "normalized", 1);
        if (t->sp && t->sp_prepend == SP_PREPEND_ALWAYS && normalized)
            return hf_bad(file, where, "\"normalized\" is true with a Prepend normalizer (not "
                                       "supported)");
        added_token *x = &t->added[t->n_added++];
        x->len = json_string_length(content);
        x->id = (int32_t)json_integer_value(id);
        x->normalized = normalized;
        if (!(x->text = strdup(json_string_value(content))))
            return tr_fail(TR_ERR_NOMEM, "out of memory reading %s", file);
        x->match = x->text;
        x->match_len = x->len;
        if ((rc = added_match(t, file, x)))
            return rc;
        int kind = normalized ? ADDED_NORMALIZED : ADDED_RAW;
        t->added_first[(unsigned char)x->match[0]] |= (uint8_t)kind;
        t->added_kinds |= kind;
        /* decoding gives the added token's text (a SentencePiece-style decoder's Replace makes
         * its U+2581 spaces), whatever the vocabulary holds for its id */
        uint64_t off;
        if ((rc = tok_pool_add(t, x->text, x->len, &off)) ||
            (rc = tok_ids_reserve(t, x->id + 1)))
            return rc;
        t->tok_off[x->id] = off;
        t->tok_len[x->id] = (uint32_t)(t->sp ? sp_decoded_text(t->pool + off, x->len,
                                                               t->pool + off)
                                             : x->len);
    }
    qsort(t->added, (size_t)t->n_added, sizeof *t->added, tok_cmp_added);
    return TR_OK;
}

/* The id of a special token named in a template or a config: an added token, else a vocabulary
 * entry spelled in plain text; -1 when neither. */
static int32_t named_id(const tr_tokenizer *t, const char *name)
{
    for (int i = 0; i < t->n_added; i++)
        if (!strcmp(t->added[i].text, name))
            return t->added[i].id;
    return t->sp ? sp_vocab_get(t, name, strlen(name))
                 : bmap_get(&t->vocab, t->pool, name, strlen(name));
}

static int load_template(tr_tokenizer *t, const char *file, json_t *p, int depth)
{
    static const char *const kinds[] = {"ByteLevel", "TemplateProcessing", "Sequence", NULL};
    int which, rc;
    if (json_is_null(p) && depth == 0)
        return TR_OK;
    if ((rc = type_of(file, "post_processor", p, kinds, &which)) || which == 0)
        return rc;
    if (which == 2) {
        size_t i;
        json_t *item, *list = json_object_get(p, "processors");
        if (!json_is_array(list) || depth > 4)
            return hf_bad(file, "post_processor.processors", "expected a list");
        json_array_foreach(list, i, item) {
            if ((rc = load_template(t, file, item, depth + 1)))
                return rc;
        }
        return TR_OK;
    }
    json_t *single = json_object_get(p, "single"), *specials = json_object_get(p, "special_tokens");
    if (!json_is_array(single))
        return hf_bad(file, "post_processor.single", "expected a list");
    int seen_text = 0;
    size_t i;
    json_t *item;
    json_array_foreach(single, i, item) {
        json_t *sp = json_object_get(item, "SpecialToken"), *seq = json_object_get(item, "Sequence");
        if (seq) {
            if (seen_text++)
                return hf_bad(file, "post_processor.single", "the text appears twice");
            continue;
        }
        json_t *name = json_object_get(sp, "id");
        json_t *ids = json_object_get(json_object_get(specials, json_string_value(name)), "ids");
        if (!json_is_string(name) || !json_is_array(ids))
            return hf_bad(file, "post_processor.single",
                          "a SpecialToken without its special_tokens entry");
        size_t k;
        json_t *v;
        json_array_foreach(ids, k, v) {
            int *n = seen_text ? &t->n_suffix : &t->n_prefix;
            int32_t *dst = seen_text ? t->suffix : t->prefix;
            if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > TOK_MAX_ID)
                return hf_bad(file, "post_processor.special_tokens", "ids must be integers >= 0");
            if (*n == TOK_MAX_TEMPLATE)
                return hf_bad(file, "post_processor.single", "more than 8 special ids");
            dst[(*n)++] = (int32_t)json_integer_value(v);
        }
    }
    return TR_OK;
}

/* root[key] of the tokenizer_config.json `path`: a token's text or an AddedToken object
 * {"content": "...", ...}; *name NULL when the key is absent or null, else that JSON string. */
static int config_token_name(const char *path, json_t *root, const char *key, json_t **name)
{
    json_t *v = json_object_get(root, key);
    *name = NULL;
    if (!v || json_is_null(v)) /* (as transformers writes a tokenizer without one) */
        return TR_OK;
    if (json_is_object(v) && !json_is_string(json_object_get(v, "content")))
        return hf_bad(path, key, "an object without a string \"content\" (an AddedToken has one)");
    if (json_is_object(v))
        v = json_object_get(v, "content");
    else if (!json_is_string(v))
        return hf_bad(path, key, "expected a token's text or an AddedToken object "
                                 "{\"content\": ...}");
    *name = v;
    return TR_OK;
}

/* The id of `name` (a JSON string read as root[key] of `path`) in t, whose files are `file`;
 * one it lacks is TR_ERR_INVALID naming path, key and file. */
static int config_token_id(const tr_tokenizer *t, const char *path, const char *key,
                           json_t *name, const char *file, int32_t *id)
{
    const char *s = json_string_value(name);
    size_t len = json_string_length(name);
    char shown[160];
    *id = strlen(s) == len ? named_id(t, s) : -1;
    if (*id < 0)
        return tr_fail(TR_ERR_INVALID, "%s: %s '%s' is neither an added token nor in the "
                                       "vocabulary of %s",
                       path, key, tok_show(s, len, shown, sizeof shown), file);
    return TR_OK;
}

/* tokenizer_config.json beside the file: t->eod = the id of its eos_token, *have = 1; *have = 0
 * when there is no such file or it names no eos_token (none, or null). A file that is there
 * but unreadable, not JSON (or repeats a key), not an object, whose eos_token is neither a
 * string nor an AddedToken object {"content": "...", ...}, or names a token the tokenizer
 * lacks, is an error: a wrong end of document would otherwise go unnoticed. */
static int eos_from_config(tr_tokenizer *t, const char *file, int *have)
{
    *have = 0;
    char *path = tr_tokenizer_config_path(file);
    if (!path)
        return tr_fail(TR_ERR_NOMEM, "out of memory reading %s", file);
    if (access(path, F_OK) && errno == ENOENT) {
        free(path);
        return TR_OK;
    }
    json_t *root, *eos = NULL;
    int rc = tr_tokenizer_config_load(path, &root);
    if (rc) {
        free(path);
        return rc;
    }
    rc = config_token_name(path, root, "eos_token", &eos);
    if (!rc && eos) {
        *have = 1;
        rc = config_token_id(t, path, "eos_token", eos, file, &t->eod);
    }
    json_decref(root);
    free(path);
    return rc;
}

int gpt2_bos_from_config(tr_tokenizer *t, const char *path)
{
    json_t *root, *add, *bos = NULL;
    int rc = tr_tokenizer_config_load(path, &root);
    if (rc)
        return rc;
    add = json_object_get(root, "add_bos_token");
    if (add && !json_is_boolean(add))
        rc = hf_bad(path, "add_bos_token", "expected true or false");
    else if (json_is_true(json_object_get(root, "add_prefix_space")))
        rc = hf_bad(path, "add_prefix_space", "true is not supported (GPT2BPETokenizer encodes "
                                              "the text as it is)");
    else if (json_is_true(add) && json_is_null(json_object_get(root, "bos_token")))
        rc = hf_bad(path, "bos_token", "null, but add_bos_token is true");
    else if (json_is_true(add))
        rc = config_token_name(path, root, "bos_token", &bos);
    if (!rc && json_is_true(add)) {
        json_t *dflt = bos ? NULL : json_string("<|endoftext|>"); /* GPT2Tokenizer's default */
        if (!bos && !dflt)
            rc = tr_fail(TR_ERR_NOMEM, "out of memory reading %s", path);
        if (!rc)
            rc = config_token_id(t, path, "bos_token", bos ? bos : dflt, t->source,
                                 &t->prefix[0]);
        t->n_prefix = !rc;
        json_decref(dflt);
    }
    json_decref(root);
    return rc;
}

int tr_tokenizer_config_load(const char *path, struct json_t **root)
{
    /* (numbers as doubles: transformers' saved "model_max_length":
     * 1000000000000000019884624838656 (no limit) is past jansson's integers) */
    int rc = load_json_file(path, "tokenizer_config.json", JSON_DECODE_INT_AS_REAL, root);
    if (!rc && !json_is_object(*root)) {
        json_decref(*root);
        *root = NULL;
        rc = hf_bad(path, "the file", "expected a JSON object (a tokenizer_config.json)");
    }
    return rc;
}

char *tr_tokenizer_config_path(const char *tokenizer_json)
{
    const char *slash = strrchr(tokenizer_json, '/');
    size_t dir = slash ? (size_t)(slash - tokenizer_json) + 1 : 0;
    char *path = malloc(dir + sizeof "tokenizer_config.json");
    if (path) {
        memcpy(path, tokenizer_json, dir);
        strcpy(path + dir, "tokenizer_config.json");
    }
    return path;
}

int load_hf(tr_tokenizer *t, const char *path)
{
    json_t *root;
    int rc = load_json_file(path, "--tokenizer-model", 0, &root), bytelevel = 0;
    if (rc)
        return rc;
    if (!json_is_object(root)) {
        json_decref(root);
        return hf_bad(path, "the file", "expected a JSON object (a tokenizers tokenizer.json)");
    }
    /* the normalizer (t->nfc, t->sp: it read the pre_tokenizer too) */
    int norm_read = 0;
    rc = sp_load_normalizer(t, path, root, &norm_read);
    if (!rc && t->nfc)
        rc = tok_nfc_usable(path);
    static const char *const nulls[] = {"normalizer", "truncation", "padding"};
    for (int i = norm_read; i < 3 && !rc; i++) {
        json_t *v = json_object_get(root, nulls[i]);
        if (v && !json_is_null(v))
            rc = hf_bad(path, nulls[i], "must be null (not supported)");
    }
    json_t *dec = json_object_get(root, "decoder");
    static const char *const decoders[] = {"ByteLevel", NULL};
    int which;
    if (!rc && t->sp)
        rc = sp_load_decoder(t, path, dec);
    else if (!rc && dec && !json_is_null(dec))
        rc = type_of(path, "decoder", dec, decoders, &which);
    if (!rc)
        rc = load_model(t, path, json_object_get(root, "model"));
    if (!rc)
        rc = load_added(t, path, json_object_get(root, "added_tokens"));
    if (!rc && !t->sp)
        rc = load_pretok(t, path, json_object_get(root, "pre_tokenizer"), 0, &bytelevel);
    if (!rc && !bytelevel && !t->sp)
        rc = hf_bad(path, "pre_tokenizer",
                    "has no ByteLevel step: the model does not work on bytes");

    if (!rc)
        rc = load_template(t, path, json_object_get(root, "post_processor"), 0);
    for (int i = 0; !rc && i < t->n_prefix + t->n_suffix; i++) {
        int32_t id = i < t->n_prefix ? t->prefix[i] : t->suffix[i - t->n_prefix];
        if (id >= t->n_ids || t->tok_len[id] == UINT32_MAX)
            rc = hf_bad(path, "post_processor", "a special id outside the vocabulary");
    }
    json_decref(root);
    if (rc)
        return rc;
    int have;
    if ((rc = eos_from_config(t, path, &have)))
        return rc;
    static const char *const names[] = {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"};
    for (int i = 0; i < 4 && t->eod < 0 && !have; i++)
        t->eod = named_id(t, names[i]);
    return TR_OK;
}
