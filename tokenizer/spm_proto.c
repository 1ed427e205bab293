/* SentencePiece's tokenizer.model: a ModelProto (sentencepiece_model.proto, proto2) in the
 * protobuf wire format, read by hand into a spm_model (tok_internal.h) whose strings point into
 * the file's bytes.
 *
 * Wire format: a message is a run of fields, each a varint tag (field number << 3 | wire type)
 * then its value: 0 a varint (at most 10 bytes), 1 eight bytes, 2 a varint length and that many
 * bytes, 5 four bytes, 3 .. 4 a group (fields up to the end-group tag of the same number).
 * Fields this reader does not know (new trainer options, extensions 200+) are skipped by their
 * wire type; a known field with another wire type, a truncated varint or value, a length past
 * the end of its message, an enum value outside the proto's or a wire type 6 or 7 is
 * TR_ERR_INVALID naming the file, the field and the byte offset. Singular fields: the last
 * one wins; a sub-message given twice is merged (its later fields win), as protobuf does. */
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "tokenizer/tok_internal.h"

typedef struct {
    const uint8_t *p, *end, *base; /* base: the file's first byte (offsets in messages) */
    const char *file;
} pb_reader;

typedef struct {
    uint32_t num;
    int wt;
    uint64_t v;          /* wire types 0, 1, 5 */
    const uint8_t *data; /* wire type 2 */
    size_t len;
} pb_field;

/* A known field of a message: its number, wire type and name. */
typedef struct {
    uint8_t num, wt;
    const char *name;
} pb_known;

static int pb_bad(const pb_reader *r, const char *field, const char *what)
{
    return tr_fail(TR_ERR_INVALID, "%s: %s: %s (byte %td of the file)", r->file, field, what,
                   r->p - r->base);
}

static int pb_varint(pb_reader *r, uint64_t *v, const char *field)
{
    uint64_t x = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (r->p == r->end)
            return pb_bad(r, field, "a varint runs past the end of its message");
        uint8_t c = *r->p++;
        x |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80)) {
            *v = x;
            return TR_OK;
        }
    }
    return pb_bad(r, field, "a varint longer than 10 bytes");
}

static int pb_take(pb_reader *r, size_t n, const char *field, const uint8_t **at)
{
    if ((size_t)(r->end - r->p) < n)
        return pb_bad(r, field, "a value runs past the end of its message");
    *at = r->p;
    r->p += n;
    return TR_OK;
}

/* The next field of r (r->p < r->end); groups are skipped whole (depth: nesting; group: the
 * number of the group being skipped, whose end-group tag ends it, else 0). */
static int pb_next(pb_reader *r, pb_field *f, const char *msg, int depth, uint32_t group)
{
    uint64_t tag = 0;
    const uint8_t *at = NULL;
    int rc = pb_varint(r, &tag, msg);
    *f = (pb_field){0};
    if (rc)
        return rc;
    f->num = (uint32_t)(tag >> 3);
    f->wt = (int)(tag & 7);
    if (tag >> 3 == 0 || tag >> 32)
        return pb_bad(r, msg, "a field number outside 1 .. 2^29 - 1");
    switch (f->wt) {
    case 0:
        return pb_varint(r, &f->v, msg);
    case 1:
    case 5:
        if ((rc = pb_take(r, f->wt == 1 ? 8 : 4, msg, &at)))
            return rc;
        f->v = 0;
        memcpy(&f->v, at, f->wt == 1 ? 8 : 4); /* (little-endian hosts) */
        return TR_OK;
    case 2:
        if ((rc = pb_varint(r, &f->v, msg)))
            return rc;
        if (f->v > (uint64_t)(r->end - r->p)) {
            char what[120];
            snprintf(what, sizeof what, "field %u: a length of %llu bytes, past the end of its "
                     "message", f->num, (unsigned long long)f->v);
            return pb_bad(r, msg, what);
        }
        f->len = (size_t)f->v;
        return pb_take(r, f->len, msg, &f->data);
    case 3:
        if (depth >= 32)
            return pb_bad(r, msg, "groups nested more than 32 deep");
        for (;;) {
            pb_field g;
            if (r->p == r->end)
                return pb_bad(r, msg, "a group without its end");
            if ((rc = pb_next(r, &g, msg, depth + 1, f->num)))
                return rc;
            if (g.wt == 4)
                return TR_OK;
        }
    case 4:
        return group && f->num == group ? TR_OK : pb_bad(r, msg, "an end-group tag outside its group");
    default:
        return pb_bad(r, msg, "wire type 6 or 7 (not protobuf)");
    }
}

/* f against the known fields of a message (msg names it): TR_OK with *name NULL when f is not
 * one of them; a known field with another wire type is an error. */
static int pb_check(const pb_reader *r, const pb_field *f, const pb_known *known, size_t n,
                    const char *msg, const char **name)
{
    static const char *const wire[] = {"a varint", "8 bytes", "a length-delimited value", "a group",
                                       "an end-group", "4 bytes", "?", "?"};
    *name = NULL;
    for (size_t i = 0; i < n; i++)
        if (known[i].num == f->num) {
            *name = known[i].name;
            if (known[i].wt == f->wt)
                return TR_OK;
            char field[96], what[120];
            snprintf(field, sizeof field, "%s.%s (field %u)", msg, known[i].name, f->num);
            snprintf(what, sizeof what, "%s, expected %s", wire[f->wt], wire[known[i].wt]);
            return pb_bad(r, field, what);
        }
    return TR_OK;
}

static pb_reader sub_reader(const pb_reader *r, const pb_field *f)
{
    return (pb_reader){f->data, f->data + f->len, r->base, r->file};
}

/* The next field of a message whose known fields are known[0 .. n) (see pb_check). */
static int pb_read(pb_reader *r, pb_field *f, const pb_known *known, size_t n, const char *msg,
                   const char **name)
{
    int rc = pb_next(r, f, msg, 0, 0);
    return rc ? rc : pb_check(r, f, known, n, msg, name);
}

#define N_KNOWN(k) (sizeof(k) / sizeof *(k))

static const pb_known trainer_known[] = {
    {1, 2, "input"}, {7, 2, "input_format"}, {2, 2, "model_prefix"}, {3, 0, "model_type"},
    {4, 0, "vocab_size"}, {5, 2, "accept_language"}, {6, 0, "self_test_sample_size"},
    {50, 0, "enable_differential_privacy"}, {51, 5, "differential_privacy_noise_level"},
    {52, 0, "differential_privacy_clipping_threshold"}, {10, 5, "character_coverage"},
    {11, 0, "input_sentence_size"}, {19, 0, "shuffle_input_sentence"},
    {12, 0, "mining_sentence_size"}, {13, 0, "training_sentence_size"},
    {14, 0, "seed_sentencepiece_size"}, {15, 5, "shrinking_factor"},
    {18, 0, "max_sentence_length"}, {16, 0, "num_threads"}, {17, 0, "num_sub_iterations"},
    {20, 0, "max_sentencepiece_length"}, {21, 0, "split_by_unicode_script"},
    {23, 0, "split_by_number"}, {22, 0, "split_by_whitespace"},
    {24, 0, "treat_whitespace_as_suffix"}, {26, 0, "allow_whitespace_only_pieces"},
    {25, 0, "split_digits"}, {53, 2, "pretokenization_delimiter"}, {30, 2, "control_symbols"},
    {31, 2, "user_defined_symbols"}, {36, 2, "required_chars"}, {35, 0, "byte_fallback"},
    {32, 0, "vocabulary_output_piece_score"}, {33, 0, "hard_vocab_limit"},
    {34, 0, "use_all_vocab"}, {40, 0, "unk_id"}, {41, 0, "bos_id"}, {42, 0, "eos_id"},
    {43, 0, "pad_id"}, {45, 2, "unk_piece"}, {46, 2, "bos_piece"}, {47, 2, "eos_piece"},
    {48, 2, "pad_piece"}, {44, 2, "unk_surface"}, {49, 0, "train_extremely_large_corpus"},
};

static int read_trainer(pb_reader *r, spm_model *m)
{
    pb_field f;
    const char *name;
    while (r->p < r->end) {
        int rc = pb_read(r, &f, trainer_known, N_KNOWN(trainer_known), "trainer_spec",
                         &name);
        if (rc)
            return rc;
        spm_str s = {(const char *)f.data, f.len};
        switch (name ? f.num : 0) {
        case 3:
            if (f.v < 1 || f.v > 4)
                return pb_bad(r, "trainer_spec.model_type", "not one of UNIGRAM (1), BPE (2), "
                                                            "WORD (3), CHAR (4)");
            m->model_type = (int)f.v;
            break;
        case 24: m->whitespace_as_suffix = f.v != 0; break;
        case 35: m->byte_fallback = f.v != 0; break;
        case 44: m->unk_surface = s; break;
        case 46: m->bos_piece = s; break;
        case 47: m->eos_piece = s; break;
        default: break; /* training options: they do not change encoding */
        }
    }
    return TR_OK;
}

static const pb_known normalizer_known[] = {
    {1, 2, "name"}, {2, 2, "precompiled_charsmap"}, {3, 0, "add_dummy_prefix"},
    {4, 0, "remove_extra_whitespaces"}, {5, 0, "escape_whitespaces"},
    {6, 2, "normalization_rule_tsv"},
};

static int read_normalizer(pb_reader *r, spm_normalizer *n, const char *msg)
{
    pb_field f;
    const char *name;
    while (r->p < r->end) {
        int rc = pb_read(r, &f, normalizer_known, N_KNOWN(normalizer_known), msg, &name);
        if (rc)
            return rc;
        switch (name ? f.num : 0) {
        case 1: n->name = (spm_str){(const char *)f.data, f.len}; break;
        case 2: n->charsmap_len = f.len; break;
        case 3: n->add_dummy_prefix = f.v != 0; break;
        case 4: n->remove_extra_whitespaces = f.v != 0; break;
        case 5: n->escape_whitespaces = f.v != 0; break;
        default: break;
        }
    }
    return TR_OK;
}

static const pb_known piece_known[] = {{1, 2, "piece"}, {2, 5, "score"}, {3, 0, "type"}};

static int read_piece(pb_reader *r, spm_piece *p, const char *msg)
{
    pb_field f;
    const char *name;
    p->type = SPM_NORMAL;
    while (r->p < r->end) {
        int rc = pb_read(r, &f, piece_known, N_KNOWN(piece_known), msg, &name);
        if (rc)
            return rc;
        switch (name ? f.num : 0) {
        case 1: p->piece = (spm_str){(const char *)f.data, f.len}; break;
        case 2: {
            uint32_t bits = (uint32_t)f.v;
            memcpy(&p->score, &bits, 4);
            break;
        }
        case 3:
            if (f.v < SPM_NORMAL || f.v > SPM_BYTE) {
                char field[64];
                snprintf(field, sizeof field, "%s.type", msg);
                return pb_bad(r, field, "not one of NORMAL (1), UNKNOWN (2), CONTROL (3), "
                                        "USER_DEFINED (4), UNUSED (5), BYTE (6)");
            }
            p->type = (int)f.v;
            break;
        default: break;
        }
    }
    return TR_OK;
}

static const pb_known sample_known[] = {{1, 2, "input"}, {2, 2, "expected"}};
static const pb_known self_test_known[] = {{1, 2, "samples"}};

/* self_test_data: read for its shape only (sentencepiece's self-test is not run). */
static int read_self_test(pb_reader *r)
{
    pb_field f, g;
    const char *name;
    while (r->p < r->end) {
        int rc = pb_read(r, &f, self_test_known, N_KNOWN(self_test_known), "self_test_data",
                         &name);
        pb_reader s = rc || !name ? (pb_reader){0} : sub_reader(r, &f);
        while (!rc && s.p < s.end)
            rc = pb_read(&s, &g, sample_known, N_KNOWN(sample_known), "self_test_data.samples",
                         &name);
        if (rc)
            return rc;
    }
    return TR_OK;
}

static const pb_known model_known[] = {
    {1, 2, "pieces"}, {2, 2, "trainer_spec"}, {3, 2, "normalizer_spec"},
    {4, 2, "self_test_data"}, {5, 2, "denormalizer_spec"},
};

int spm_parse(const uint8_t *data, size_t len, const char *file, spm_model *m)
{
    memset(m, 0, sizeof *m);
    m->model_type = 1; /* UNIGRAM, the proto's default */
    m->unk_surface = (spm_str){" \xE2\x81\x87 ", 5};
    m->bos_piece = (spm_str){"<s>", 3};
    m->eos_piece = (spm_str){"</s>", 4};
    m->norm = m->denorm = (spm_normalizer){.add_dummy_prefix = 1, .remove_extra_whitespaces = 1,
                                           .escape_whitespaces = 1};
    pb_reader r = {data, data + len, data, file};
    pb_field f;
    const char *name;
    while (r.p < r.end) {
        int rc = pb_read(&r, &f, model_known, N_KNOWN(model_known), "ModelProto", &name);
        if (rc)
            return rc;
        pb_reader s = name ? sub_reader(&r, &f) : (pb_reader){0}; /* (all wire type 2) */
        switch (name ? f.num : 0) {
        case 1: {
            char msg[48];
            snprintf(msg, sizeof msg, "pieces[%d]", m->n_pieces);
            if (m->n_pieces == TOK_ID_LIMIT)
                return pb_bad(&r, msg, "more than 2^24 pieces (ids are below 2^24)");
            if (m->n_pieces == m->cap_pieces) {
                int cap = m->cap_pieces ? 2 * m->cap_pieces : 1024;
                if (!tok_grow(&m->pieces, (size_t)cap, sizeof *m->pieces))
                    return tr_fail(TR_ERR_NOMEM, "out of memory reading %s", file);
                m->cap_pieces = cap;
            }
            spm_piece *p = &m->pieces[m->n_pieces++];
            memset(p, 0, sizeof *p);
            rc = read_piece(&s, p, msg);
            break;
        }
        case 2: rc = read_trainer(&s, m); break;
        case 3: rc = read_normalizer(&s, &m->norm, "normalizer_spec"); break;
        case 4: rc = read_self_test(&s); break;
        case 5:
            rc = read_normalizer(&s, &m->denorm, "denormalizer_spec");
            m->has_denorm = 1;
            break;
        default: break;
        }
        if (rc)
            return rc;
    }
    return TR_OK;
}
