/* Megatron's indexed dataset (MMapIndexedDataset, "MMIDIDX" version 1), read through mmap.
 *
 * PREFIX.idx, little-endian:
 *   char     magic[9] = "MMIDIDX\0\0"
 *   uint64   version = 1
 *   uint8    dtype code (1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64, 7 float32,
 *            8 uint16)
 *   uint64   n_seqs         sequences (a document, or a sentence when sentence-split)
 *   uint64   n_doc_entries  documents + 1
 *   int32    sizes[n_seqs]          tokens per sequence
 *   int64    pointers[n_seqs]       byte offset of each sequence in PREFIX.bin
 *   int64    doc_idx[n_doc_entries] document d = sequences [doc_idx[d], doc_idx[d+1])
 * PREFIX.bin: the sequences' tokens back to back.
 *
 * Validation (each failure is TR_ERR_INVALID naming the file, the field, found vs expected):
 * header fields; the .idx length equals exactly what the counts imply (computed without
 * overflow); sizes >= 0; pointers[0] == 0 and pointers[i+1] == pointers[i] +
 * sizes[i]*itemsize, every sequence inside the .bin and the .bin exactly that long;
 * doc_idx[0] == 0, non-decreasing, last == n_seqs; every token in [0, vocab_size). */
#include "data/data_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "core/core.h"

static char *concat(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    char *s = malloc(la + lb + 1);
    if (!s)
        return NULL;
    memcpy(s, a, la);
    memcpy(s + la, b, lb + 1);
    return s;
}

static void describe_magic(const unsigned char *m, char *out, size_t cap)
{
    size_t pos = 0;
    out[0] = '\0';
    for (int i = 0; i < IDX_MAGIC_LEN && pos + 5 < cap; i++) {
        unsigned c = m[i];
        if (c >= 0x20 && c < 0x7f && c != '\\' && c != '"')
            out[pos++] = (char)c;
        else
            pos += (size_t)snprintf(out + pos, cap - pos, "\\x%02x", c);
        out[pos] = '\0';
    }
}

/* Header and size checks of the .idx; fills the counts and the array pointers. */
static int check_index(const char *idx_path, token_store *s)
{
    const unsigned char *p = s->idx.map;
    size_t bytes = s->idx.bytes;
    if (bytes < IDX_HEADER_BYTES)
        return tr_fail(TR_ERR_INVALID,
                       "%s: file is %zu bytes, shorter than the %d-byte MMIDIDX header "
                       "(truncated index?)",
                       idx_path, bytes, IDX_HEADER_BYTES);
    if (memcmp(p, IDX_MAGIC, IDX_MAGIC_LEN) != 0) {
        char found[64];
        describe_magic(p, found, sizeof found);
        return tr_fail(TR_ERR_INVALID,
                       "%s: magic is \"%s\", expected \"MMIDIDX\\x00\\x00\" (not a Megatron "
                       "mmap index)",
                       idx_path, found);
    }
    uint64_t version = load_u64(p + 9);
    if (version != 1)
        return tr_fail(TR_ERR_INVALID, "%s: version is %llu, expected 1", idx_path,
                       (unsigned long long)version);
    int code = p[17];
    if (code == DT_FLOAT32 || code == DT_FLOAT64)
        return tr_fail(TR_ERR_INVALID,
                       "%s: dtype code %d (%s) is a floating-point type; token ids must be "
                       "integers (uint8, int8, int16, uint16, int32, int64)",
                       idx_path, code, dtype_name(code));
    if (dtype_size(code) == 0)
        return tr_fail(TR_ERR_INVALID,
                       "%s: dtype code is %d, expected 1..8 (1 uint8, 2 int8, 3 int16, "
                       "4 int32, 5 int64, 8 uint16)",
                       idx_path, code);
    s->dtype = code;
    s->itemsize = dtype_size(code);
    uint64_t n_seqs = load_u64(p + 18), n_entries = load_u64(p + 26);
    /* expected length: 34 + 4*n_seqs + 8*n_seqs + 8*n_entries, each step checked */
    uint64_t seq_bytes, doc_bytes, total;
    if (__builtin_mul_overflow(n_seqs, (uint64_t)12, &seq_bytes) ||
        __builtin_mul_overflow(n_entries, (uint64_t)8, &doc_bytes) ||
        __builtin_add_overflow(seq_bytes, doc_bytes, &total) ||
        __builtin_add_overflow(total, (uint64_t)IDX_HEADER_BYTES, &total))
        return tr_fail(TR_ERR_INVALID,
                       "%s: sequence count %llu and document count %llu overflow the index "
                       "size (file is %zu bytes)",
                       idx_path, (unsigned long long)n_seqs, (unsigned long long)n_entries,
                       bytes);
    if (total != bytes)
        return tr_fail(TR_ERR_INVALID,
                       "%s: file is %zu bytes, but sequence count %llu and document count %llu "
                       "imply %llu bytes (truncated, or extra arrays such as multimodal "
                       "sequence modes, which are not supported)",
                       idx_path, bytes, (unsigned long long)n_seqs,
                       (unsigned long long)n_entries, (unsigned long long)total);
    if (n_entries == 0)
        return tr_fail(TR_ERR_INVALID,
                       "%s: document count is 0, expected at least 1 (doc_idx starts with 0)",
                       idx_path);
    s->n_seqs = n_seqs;
    s->n_docs = n_entries - 1;
    s->pointers = p + IDX_HEADER_BYTES + 4 * n_seqs;
    s->doc_idx = s->pointers + 8 * n_seqs;
    return TR_OK;
}

/* sizes and pointers against each other and against the .bin length. */
static int check_sequences(const char *idx_path, const char *bin_path, token_store *s)
{
    const unsigned char *sizes = (const unsigned char *)s->idx.map + IDX_HEADER_BYTES;
    uint64_t bin_bytes = s->bin.bytes, expect = 0, item = (uint64_t)s->itemsize;
    for (uint64_t i = 0; i < s->n_seqs; i++) {
        int32_t size = load_i32(sizes + 4 * i);
        int64_t ptr = load_i64(s->pointers + 8 * i);
        if (size < 0)
            return tr_fail(TR_ERR_INVALID, "%s: sizes[%llu] is %d, expected >= 0", idx_path,
                           (unsigned long long)i, size);
        if (ptr < 0 || (uint64_t)ptr != expect) {
            if (i == 0)
                return tr_fail(TR_ERR_INVALID, "%s: pointers[0] is %lld, expected 0", idx_path,
                               (long long)ptr);
            return tr_fail(TR_ERR_INVALID,
                           "%s: pointers[%llu] is %lld, expected %llu (pointers[%llu] + "
                           "sizes[%llu] * %llu bytes)",
                           idx_path, (unsigned long long)i, (long long)ptr,
                           (unsigned long long)expect, (unsigned long long)(i - 1),
                           (unsigned long long)(i - 1), (unsigned long long)item);
        }
        /* expect <= bin_bytes here, and size*item < 2^34: no overflow */
        uint64_t end = expect + (uint64_t)size * item;
        if (end > bin_bytes)
            return tr_fail(TR_ERR_INVALID,
                           "%s: sequence %llu (pointer %lld, size %d x %llu bytes) ends at byte "
                           "%llu, past the end of %s (%llu bytes; truncated data file?)",
                           idx_path, (unsigned long long)i, (long long)ptr, size,
                           (unsigned long long)item, (unsigned long long)end, bin_path,
                           (unsigned long long)bin_bytes);
        expect = end;
    }
    if (expect != bin_bytes)
        return tr_fail(TR_ERR_INVALID,
                       "%s: file is %llu bytes, but %s describes %llu bytes (%llu tokens of "
                       "%s)",
                       bin_path, (unsigned long long)bin_bytes, idx_path,
                       (unsigned long long)expect, (unsigned long long)(expect / item),
                       dtype_name(s->dtype));
    s->n_tokens = expect / item;
    return TR_OK;
}

static int check_documents(const char *idx_path, const token_store *s)
{
    uint64_t n = s->n_docs + 1;
    int64_t first = load_i64(s->doc_idx);
    if (first != 0)
        return tr_fail(TR_ERR_INVALID, "%s: doc_idx[0] is %lld, expected 0", idx_path,
                       (long long)first);
    int64_t prev = 0;
    for (uint64_t d = 1; d < n; d++) {
        int64_t v = load_i64(s->doc_idx + 8 * d);
        if (v < prev)
            return tr_fail(TR_ERR_INVALID,
                           "%s: doc_idx[%llu] is %lld, less than doc_idx[%llu] = %lld "
                           "(must not decrease)",
                           idx_path, (unsigned long long)d, (long long)v,
                           (unsigned long long)(d - 1), (long long)prev);
        if ((uint64_t)v > s->n_seqs)
            return tr_fail(TR_ERR_INVALID,
                           "%s: doc_idx[%llu] is %lld, past the sequence count %llu", idx_path,
                           (unsigned long long)d, (long long)v,
                           (unsigned long long)s->n_seqs);
        prev = v;
    }
    if ((uint64_t)prev != s->n_seqs)
        return tr_fail(TR_ERR_INVALID,
                       "%s: doc_idx[%llu] (the last) is %lld, expected the sequence count %llu",
                       idx_path, (unsigned long long)(n - 1), (long long)prev,
                       (unsigned long long)s->n_seqs);
    return TR_OK;
}

int indexed_open(const char *prefix, int vocab_size, token_store *s)
{
    memset(s, 0, sizeof *s);
    char *idx_path = concat(prefix, ".idx"), *bin_path = concat(prefix, ".bin");
    s->path = concat(prefix, "");
    int rc = TR_OK;
    if (!idx_path || !bin_path || !s->path) {
        rc = tr_fail(TR_ERR_NOMEM, "out of memory opening %s", prefix);
        goto done;
    }
    struct stat st;
    if (stat(bin_path, &st) != 0 && errno == ENOENT) {
        rc = tr_fail(TR_ERR_INVALID, "%s: missing (the index %s needs its data file)",
                     bin_path, idx_path);
        goto done;
    }
    if ((rc = map_file(idx_path, &s->idx)) || (rc = check_index(idx_path, s)) ||
        (rc = map_file(bin_path, &s->bin)) ||
        (rc = check_sequences(idx_path, bin_path, s)) || (rc = check_documents(idx_path, s)))
        goto done;
    s->base = s->bin.map;
    rc = token_store_check_vocab(s, bin_path, vocab_size);
done:
    free(idx_path);
    free(bin_path);
    if (rc)
        token_store_close(s);
    return rc;
}
