/* sentencepiece's tokenizer.model (Megatron's --tokenizer-type Llama2Tokenizer and
 * GPTSentencePieceTokenizer): the ModelProto (spm_proto.c) checked as sentencepiece's
 * ModelInterface::InitializePieces checks it, turned into the tables of the SentencePiece-style
 * BPE (bpe.c), and sentencepiece's normalizer and decoder.
 *
 * Encoding as sentencepiece's bpe_model.cc: the normalized text's characters (user-defined
 * pieces matched first, longest at each position, never merged), then the adjacent pair whose
 * concatenation is a NORMAL piece of the highest score is merged, the leftmost among equals;
 * a character left without a piece becomes its bytes' <0xHH> (byte_fallback) or one UNKNOWN
 * for a run. Here: a merge (left, right) -> piece for every split of a NORMAL piece into two
 * pieces, ranked by the piece's score (equal scores equal ranks, so bpe.c's leftmost rule is
 * sentencepiece's); the user-defined pieces are added tokens cutting the text. That is exact
 * when every character of a NORMAL piece is a piece (sentencepiece could otherwise merge a
 * character it has no piece for; its BPE trainer always adds them) and no UNUSED piece is a
 * concatenation of two pieces (sentencepiece splits such a piece again by whichever pair last
 * proposed it): other files are refused, naming the piece.
 *
 * Refused, naming the field (TR_ERR_INVALID): model_type other than BPE; a normalizer other
 * than identity (a name other than "identity" or a precompiled_charsmap), escape_whitespaces
 * false, treat_whitespace_as_suffix, a denormalizer's charsmap; empty or duplicate pieces
 * (any two types), no UNKNOWN piece or two, a BYTE piece without byte_fallback or not spelled
 * <0xHH>, byte_fallback without all 256, a NORMAL / USER_DEFINED / UNUSED piece that is not
 * UTF-8 or holds a ' ' (sentencepiece's text has none; U+2581 is its space), a user-defined one
 * with a NUL, a NaN score; Llama2Tokenizer with a bos_piece that is not a CONTROL piece.
 * End of document: the eos_piece's id when it is a CONTROL piece, else none (sentencepiece's
 * eos_id() -1). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "tokenizer/tok_internal.h"

#define SPM_FILE_MAX ((size_t)1 << 30)

static int bad_piece(const char *file, const spm_model *m, int i, const char *what)
{
    char shown[160], field[200];
    const spm_str *s = &m->pieces[i].piece;
    snprintf(field, sizeof field, "pieces[%d] '%s'", i, tok_show(s->s, s->len, shown, sizeof shown));
    return hf_bad(file, field, what);
}

static int str_is(spm_str s, const char *lit)
{
    return s.len == strlen(lit) && !memcmp(s.s, lit, s.len);
}

/* The options that change what encoding or decoding does: those not reproduced refused. */
static int check_specs(const spm_model *m, const char *file)
{
    static const char *const types[] = {"?", "UNIGRAM", "BPE", "WORD", "CHAR"};
    char what[300], shown[80];
    if (m->model_type != 2) {
        snprintf(what, sizeof what, "%s%s is not supported (a BPE model is)",
                 types[m->model_type], m->model_type == 1 ? " (the default)" : "");
        return hf_bad(file, "trainer_spec.model_type", what);
    }
    const spm_normalizer *n = &m->norm;
    if (n->name.len && !str_is(n->name, "identity")) {
        snprintf(what, sizeof what, "'%s' is not supported (only identity, Llama-2's and "
                 "Mistral's: trident does not reproduce sentencepiece's NFKC rules)",
                 tok_show(n->name.s, n->name.len, shown, sizeof shown));
        return hf_bad(file, "normalizer_spec.name", what);
    }
    if (n->charsmap_len)
        return hf_bad(file, "normalizer_spec.precompiled_charsmap", "a normalization rule (not "
                      "supported: only the identity, without one)");
    if (!n->escape_whitespaces)
        return hf_bad(file, "normalizer_spec.escape_whitespaces", "false is not supported");
    if (m->whitespace_as_suffix)
        return hf_bad(file, "trainer_spec.treat_whitespace_as_suffix", "true is not supported");
    if (m->has_denorm && m->denorm.charsmap_len)
        return hf_bad(file, "denormalizer_spec.precompiled_charsmap", "a denormalization rule "
                      "(not supported)");
    return TR_OK;
}

/* Length of the UTF-8 character starting with byte c (the text is valid). */
static size_t char_len(unsigned char c)
{
    return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

static int in_pieces(int type) /* sentencepiece's pieces_ map: the types merges can make */
{
    return type == SPM_NORMAL || type == SPM_USER_DEFINED || type == SPM_UNUSED;
}

/* Piece i's id, text and type; the vocabulary (pieces_ and single-character CONTROL pieces, in
 * the tables' spelling); the byte pieces; unk. all: every piece as spelled; *text_p (room for
 * *cap bytes): scratch. */
static int add_piece(tr_tokenizer *t, const spm_model *m, int i, const char *file,
                     const char *base, bytes_map *all, char **text_p, size_t *cap)
{
    int rc, dup;
    const spm_piece *p = &m->pieces[i];
    const char *s = p->piece.s;
    size_t len = p->piece.len;
    t->spm_type[i] = (uint8_t)p->type;
    if (!len)
        return bad_piece(file, m, i, "an empty piece");
    if ((rc = bmap_put(all, base, (uint64_t)(s - base), (uint32_t)len, i, &dup)))
        return rc;
    if (dup) {
        char what[64];
        snprintf(what, sizeof what, "repeats pieces[%d]", bmap_get(all, base, s, len));
        return bad_piece(file, m, i, what);
    }
    int utf8 = tr_utf8_valid_prefix((const unsigned char *)s, len) == len;
    if (in_pieces(p->type) && (!utf8 || memchr(s, ' ', len)))
        return bad_piece(file, m, i, utf8 ? "holds a space ' ' (sentencepiece's text has "
                                            "none: U+2581 stands for it)"
                                          : "is not UTF-8");
    if (p->type == SPM_USER_DEFINED && memchr(s, '\0', len))
        return bad_piece(file, m, i, "a user-defined piece with a NUL byte");
    if (p->type == SPM_NORMAL && isnan(p->score))
        return bad_piece(file, m, i, "its score is NaN");
    if (p->type == SPM_UNKNOWN && t->unk_id >= 0) {
        char what[64];
        snprintf(what, sizeof what, "a second UNKNOWN piece (the first: pieces[%d])",
                 t->unk_id);
        return bad_piece(file, m, i, what);
    }
    int exact, byte = sp_byte_token(s, len, &exact);
    if (p->type == SPM_BYTE && (!m->byte_fallback || byte < 0 || !exact))
        return bad_piece(file, m, i, !m->byte_fallback ? "a BYTE piece, but "
                                     "trainer_spec.byte_fallback is false"
                                     : "a BYTE piece not spelled <0xHH> (two upper-case "
                                       "hex digits)");
    if (p->type == SPM_UNKNOWN)
        t->unk_id = i;
    if (p->type == SPM_BYTE)
        t->fallback_id[byte] = i;
    /* decoding's text of the piece */
    size_t need = (len > m->unk_surface.len ? len : m->unk_surface.len) + 1;
    if (need > *cap && !tok_grow(text_p, *cap = 2 * need, 1))
        return tr_fail(TR_ERR_NOMEM, "out of memory reading %s", file);
    char *text = *text_p;
    size_t n = p->type == SPM_BYTE      ? (text[0] = (char)byte, 1)
               : p->type == SPM_CONTROL ? 0
               : p->type == SPM_UNKNOWN ? (memcpy(text, m->unk_surface.s, m->unk_surface.len),
                                           m->unk_surface.len)
                                        : sp_decoded_text(s, len, text);
    uint64_t off;
    if ((rc = tok_pool_add(t, text, n, &off)) || (rc = tok_set_id(t, i, off, (uint32_t)n, "")))
        return rc;
    /* a single-character CONTROL piece is what that character encodes to */
    if (p->type == SPM_CONTROL && utf8 && len == char_len((unsigned char)s[0]) && s[0] != ' ') {
        n = sp_decoded_text(s, len, text);
        rc = tok_pool_add(t, text, n, &off);
    } else if (!in_pieces(p->type)) {
        return TR_OK;
    }
    return rc ? rc : bmap_put(&t->vocab, t->pool, off, (uint32_t)n, i, &dup);
}

static int add_pieces(tr_tokenizer *t, const spm_model *m, const char *file, const char *base,
                      bytes_map *all)
{
    int rc = TR_OK;
    char *text = NULL;
    size_t cap = 0;
    for (int i = 0; i < m->n_pieces && !rc; i++)
        rc = add_piece(t, m, i, file, base, all, &text, &cap);
    free(text);
    return rc;
}

static int cmp_desc(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

/* The piece (of pieces_) spelled s[0 .. n) in the tables, or -1. */
static int32_t piece_id(const tr_tokenizer *t, const char *s, size_t n)
{
    int32_t id = bmap_get(&t->vocab, t->pool, s, n);
    return id >= 0 && in_pieces(t->spm_type[id]) ? id : -1;
}

/* The merges: every split of a NORMAL piece into two pieces, ranked by its score. */
static int add_merges(tr_tokenizer *t, const spm_model *m, const char *file)
{
    float *score = malloc(((size_t)m->n_pieces + 1) * sizeof *score);
    if (!score)
        return tr_fail(TR_ERR_NOMEM, "out of memory reading %s", file);
    size_t ns = 0;
    for (int i = 0; i < m->n_pieces; i++)
        if (m->pieces[i].type == SPM_NORMAL)
            score[ns++] = m->pieces[i].score;
    qsort(score, ns, sizeof *score, cmp_desc);
    size_t nu = 0; /* distinct scores, highest first: rank = index */
    for (size_t i = 0; i < ns; i++)
        if (!nu || score[nu - 1] != score[i])
            score[nu++] = score[i];
    int rc = mmap_init(&t->merges, (uint32_t)m->n_pieces + 1);
    for (int i = 0; i < m->n_pieces && !rc; i++) {
        int type = m->pieces[i].type;
        if (type != SPM_NORMAL && type != SPM_UNUSED)
            continue;
        const char *s = t->pool + t->tok_off[i];
        size_t n = t->tok_len[i];
        const float *at = bsearch(&m->pieces[i].score, score, nu, sizeof *score, cmp_desc);
        for (size_t k = 0, cl; k < n && !rc; k += cl) {
            cl = char_len((unsigned char)s[k]);
            if (type == SPM_NORMAL && piece_id(t, s + k, cl) < 0) {
                char what[300], shown[40];
                snprintf(what, sizeof what, "holds '%s', which is no piece of its own "
                         "(sentencepiece could merge that unknown character: not supported)",
                         s[k] == ' ' ? "\\u2581" : tok_show(s + k, cl, shown, sizeof shown));
                rc = bad_piece(file, m, i, what);
            }
            if (rc || k == 0)
                continue;
            int32_t left = piece_id(t, s, k), right = piece_id(t, s + k, n - k);
            if (rc || left < 0 || right < 0)
                continue;
            if (type == SPM_UNUSED)
                rc = bad_piece(file, m, i, "an UNUSED piece that merges make (sentencepiece "
                                           "splits it again: not supported)");
            else
                rc = mmap_put(&t->merges, left, right, (uint32_t)(at - score), i);
        }
    }
    free(score);
    return rc;
}

/* The user-defined pieces as added tokens matched in the normalized text. */
static int add_user_defined(tr_tokenizer *t, const spm_model *m, const char *file)
{
    t->added = calloc((size_t)m->n_pieces + 1, sizeof *t->added);
    if (!t->added)
        return tr_fail(TR_ERR_NOMEM, "out of memory reading %s", file);
    for (int i = 0; i < m->n_pieces; i++) {
        if (m->pieces[i].type != SPM_USER_DEFINED)
            continue;
        added_token *a = &t->added[t->n_added++];
        a->id = i;
        a->len = a->match_len = t->tok_len[i];
        a->normalized = 1;
        if (!(a->text = malloc(a->len + 1)))
            return tr_fail(TR_ERR_NOMEM, "out of memory reading %s", file);
        memcpy(a->text, t->pool + t->tok_off[i], a->len);
        a->text[a->len] = '\0';
        a->match = a->text;
        t->added_first[(unsigned char)a->text[0]] |= ADDED_NORMALIZED;
        t->added_kinds |= ADDED_NORMALIZED;
    }
    qsort(t->added, (size_t)t->n_added, sizeof *t->added, tok_cmp_added);
    return TR_OK;
}

/* sentencepiece's bos_id() / eos_id(): the piece named by the trainer_spec, when it is a
 * CONTROL piece, else -1. */
static int32_t control_id(const tr_tokenizer *t, const bytes_map *all, const char *base,
                          spm_str name)
{
    int32_t id = bmap_get(all, base, name.s, name.len);
    return id >= 0 && t->spm_type[id] == SPM_CONTROL ? id : -1;
}

static int build(tr_tokenizer *t, const spm_model *m, const char *file, const char *base)
{
    int rc = check_specs(m, file);
    bytes_map all = {0};
    if (rc || (rc = bmap_init(&all, (uint32_t)m->n_pieces)) ||
        (rc = bmap_init(&t->vocab, (uint32_t)m->n_pieces)) ||
        (rc = tok_ids_reserve(t, m->n_pieces)))
        goto out;
    if (!(t->spm_type = calloc((size_t)m->n_pieces + 1, 1))) {
        rc = tr_fail(TR_ERR_NOMEM, "out of memory reading %s", file);
        goto out;
    }
    t->sp = 1;
    t->unk_id = -1;
    for (int b = 0; b < 256; b++)
        t->fallback_id[b] = -1;
    if ((rc = add_pieces(t, m, file, base, &all)))
        goto out;
    if (t->unk_id < 0) {
        rc = hf_bad(file, "pieces", "no UNKNOWN piece (sentencepiece needs one)");
        goto out;
    }
    for (int b = 0; b < 256 && m->byte_fallback; b++)
        if (t->fallback_id[b] < 0) {
            char what[120];
            snprintf(what, sizeof what, "true, but the BYTE piece <0x%02X> is missing (all 256 "
                     "are needed)", b);
            rc = hf_bad(file, "trainer_spec.byte_fallback", what);
            goto out;
        }
    t->byte_fallback = m->byte_fallback;
    t->fuse_unk = 1;
    t->spm_dummy_prefix = m->norm.add_dummy_prefix;
    t->spm_remove_spaces = m->norm.remove_extra_whitespaces;
    if ((rc = add_merges(t, m, file)) || (rc = add_user_defined(t, m, file)))
        goto out;
    t->eod = control_id(t, &all, base, m->eos_piece);
    if (t->kind == TOK_LLAMA2) { /* Megatron's _Llama2Tokenizer.tokenize: [bos_id] + encode */
        int32_t bos = control_id(t, &all, base, m->bos_piece);
        char shown[80], what[300];
        snprintf(what, sizeof what, "'%s' is not a CONTROL piece, and Llama2Tokenizer puts the "
                 "BOS before every text (GPTSentencePieceTokenizer does not)",
                 tok_show(m->bos_piece.s, m->bos_piece.len, shown, sizeof shown));
        if (bos < 0)
            rc = hf_bad(file, "trainer_spec.bos_piece", what);
        t->prefix[0] = bos;
        t->n_prefix = 1;
    }
out:
    bmap_free(&all);
    return rc;
}

int load_spm(tr_tokenizer *t, const char *path)
{
    char *data;
    size_t n;
    int rc = tok_read_model(path, SPM_FILE_MAX, "a sentencepiece tokenizer.model", &data, &n);
    if (rc)
        return rc;
    spm_model m;
    rc = spm_parse((const uint8_t *)data, n, path, &m);
    if (!rc)
        rc = build(t, &m, path, data);
    free(m.pieces);
    free(data);
    return rc;
}

size_t spm_normalize(const tr_tokenizer *t, const char *s, size_t n, char *out)
{
    size_t i = 0, o = 0;
    while (t->spm_remove_spaces && i < n && s[i] == ' ')
        i++;
    if (i == n) /* (no dummy prefix either) */
        return 0;
    if (t->spm_dummy_prefix)
        out[o++] = ' ';
    /* a character at a time (the user-defined pieces hold no ' ', so matching them in the raw
     * text, as sentencepiece's normalizer does, changes nothing here) */
    for (int prev_space = t->spm_remove_spaces; i < n; i++) {
        if (s[i] == ' ' && prev_space)
            continue;
        prev_space = t->spm_remove_spaces && s[i] == ' ';
        int mark = i + 3 <= n && !memcmp(s + i, SP_SPACE, 3);
        out[o++] = mark ? ' ' : s[i];
        i += mark ? 2 : 0;
    }
    /* sentencepiece strips trailing U+2581 after escaping: a text's own U+2581 too */
    while (t->spm_remove_spaces && o && out[o - 1] == ' ')
        o--;
    return o;
}

size_t spm_decoded_cap(const tr_tokenizer *t, const int32_t *ids, size_t n)
{
    size_t cap = 1;
    for (size_t i = 0; i < n; i++)
        cap += t->spm_type[ids[i]] == SPM_BYTE ? 3 : t->tok_len[ids[i]];
    return cap;
}

/* A run of n BYTE pieces (ids) into s as sentencepiece's decoder gives them: each well-formed
 * UTF-8 character as it is, each other byte as U+FFFD. */
static size_t decode_bytes(const tr_tokenizer *t, const int32_t *ids, size_t n, char *s)
{
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        unsigned char b[4];
        size_t cl = char_len((unsigned char)t->pool[t->tok_off[ids[i]]]), k = 0;
        for (; k < cl && i + k < n; k++)
            b[k] = (unsigned char)t->pool[t->tok_off[ids[i + k]]];
        if (k == cl && tr_utf8_valid_prefix(b, cl) == cl) {
            memcpy(s + o, b, cl);
            o += cl;
            i += cl;
        } else {
            memcpy(s + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        }
    }
    return o;
}

size_t spm_decode(const tr_tokenizer *t, const int32_t *ids, size_t n, char *s)
{
    size_t o = 0;
    int bos_space = 1, seen = 0; /* a leading U+2581 to drop; one was dropped */
    for (size_t i = 0; i < n;) {
        size_t run = 0;
        while (i + run < n && t->spm_type[ids[i + run]] == SPM_BYTE)
            run++;
        if (run) {
            o += decode_bytes(t, ids + i, run, s + o);
            i += run;
            continue;
        }
        int32_t id = ids[i++];
        const char *p = t->pool + t->tok_off[id];
        size_t len = t->tok_len[id];
        if (seen || o)
            bos_space = 0;
        seen = 0;
        int type = t->spm_type[id];
        if (in_pieces(type) && bos_space && (t->spm_dummy_prefix || t->spm_remove_spaces) &&
            p[0] == ' ') {
            p++, len--;
            seen = !t->spm_remove_spaces; /* (removing spaces: every leading one goes) */
        }
        memcpy(s + o, p, len);
        o += len;
    }
    return o;
}
