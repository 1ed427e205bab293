/* Text files -> documents (text_documents, for any tokenizer), and the byte-level
 * tokenizer's streaming path of `trident preprocess` (tr_preprocess_text): a uint16 Megatron
 * indexed dataset, token = byte value, NUL bytes dropped, TR_EOD_TOKEN closing every document.
 *
 * Document boundaries (split_on_blank_lines): a line whose content (without its "\n" or
 * "\r\n", and NUL bytes ignored) is empty, only spaces/tabs, or exactly "%" (the separator
 * of fortune(6) files) ends the current document and belongs to none (a line of 64 KiB or
 * more is always content: lines are read in bounded pieces); runs of them make no
 * empty documents; the end of a file ends its last document. A document's tokens are its
 * lines' bytes exactly, line endings included (a file's last line keeps no newline it did
 * not have). Otherwise (whole files) each non-empty file is one document. */
#include "data/data_internal.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "data/prep_input.h"

/* The byte-level sink: bytes -> tokens, NULs dropped; a document opens when there is
 * anything to add, and only an open one is closed (with TR_EOD_TOKEN). */
typedef struct {
    doc_sink sink;
    indexed_writer *w;
} byte_sink;

static int append_bytes(doc_sink *sink, const unsigned char *bytes, size_t n)
{
    indexed_writer *w = ((byte_sink *)sink)->w;
    uint16_t tok[1024];
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (bytes[i] == 0)
            continue;
        tok[k++] = bytes[i];
        if (k == sizeof tok / sizeof tok[0]) {
            int rc = iw_append(w, tok, k);
            if (rc)
                return rc;
            k = 0;
        }
    }
    return k ? iw_append(w, tok, k) : TR_OK;
}

static int close_document(doc_sink *sink)
{
    indexed_writer *w = ((byte_sink *)sink)->w;
    if (!w->in_document)
        return TR_OK;
    uint16_t eod = TR_EOD_TOKEN;
    int rc = iw_append(w, &eod, 1);
    return rc ? rc : iw_end_document(w);
}

static int is_separator(const char *line, size_t len)
{
    /* strip the line ending, then test what is left */
    if (len && line[len - 1] == '\n')
        len--;
    if (len && line[len - 1] == '\r')
        len--;
    if (len == 1 && line[0] == '%')
        return 1;
    for (size_t i = 0; i < len; i++)
        if (line[i] != ' ' && line[i] != '\t' && line[i] != '\r' && line[i] != '\f' &&
            line[i] != '\v')
            return 0;
    return 1;
}

/* Bytes a document may span in its file (NULs included): the index stores its length as an
 * int32, and an input without document boundaries (a newline-free stream, /dev/zero) must
 * end in an error, not in memory or time without bound. */
#define MAX_DOCUMENT_BYTES ((uint64_t)INT32_MAX)
/* Lines are read in pieces of at most this many bytes; only a line that fits in one piece
 * can be a separator, longer lines are content (memory stays bounded whatever the input). */
#define PIECE (1 << 16)

static int too_long(const char *path, uint64_t doc_start)
{
    return tr_fail(TR_ERR_INVALID, "%s: the document starting at byte %llu runs past %llu bytes "
                                   "without a blank line (a file without document boundaries? "
                                   "use --document-per-file for small files)",
                   path, (unsigned long long)doc_start, (unsigned long long)MAX_DOCUMENT_BYTES);
}

/* A FILE read in blocks of PIECE bytes, so that a line's end is found with memchr (a
 * getc per byte made a 2 GiB document cost seconds before its error). */
typedef struct {
    FILE *f;
    size_t at, n; /* buf[at, n): read, not yet given out */
    char buf[PIECE];
} piece_reader;

/* The next piece of a line: up to PIECE bytes, ending at its '\n' (kept) if it comes first,
 * copied to out without its NUL bytes (*len of them are left). *ended: the piece ends its
 * line (a '\n', or the end of the file). Returns the bytes it took from the file. */
static size_t read_piece(piece_reader *r, char *out, size_t *len, int *ended)
{
    size_t n = 0;
    *len = 0;
    while (n < PIECE) {
        if (r->at == r->n) {
            r->at = 0, r->n = fread(r->buf, 1, PIECE, r->f);
            if (r->n == 0)
                break;
        }
        const char *from = r->buf + r->at;
        size_t avail = r->n - r->at < PIECE - n ? r->n - r->at : PIECE - n;
        const char *nl = memchr(from, '\n', avail);
        size_t take = nl ? (size_t)(nl - from) + 1 : avail;
        if (!memchr(from, 0, take)) {
            memcpy(out + *len, from, take);
            *len += take;
        } else {
            for (size_t i = 0; i < take; i++) {
                uint64_t word;
                while (i + 8 <= take && (memcpy(&word, from + i, 8), word == 0))
                    i += 8; /* (runs of NULs, /dev/zero: eight at a time) */
                if (i < take && from[i] != 0)
                    out[(*len)++] = from[i];
            }
        }
        n += take, r->at += take;
        if (nl) {
            *ended = 1;
            return n;
        }
    }
    *ended = n < PIECE;
    return n;
}

static int documents_by_blank_lines(doc_sink *w, FILE *f, const char *path)
{
    char *line = malloc(PIECE);
    piece_reader *r = malloc(sizeof *r);
    if (!line || !r) {
        free(line), free(r);
        return tr_fail(TR_ERR_NOMEM, "out of memory reading %s", path);
    }
    r->f = f, r->at = r->n = 0;
    int rc = TR_OK, ended = 1, mid_line = 0;
    uint64_t offset = 0, doc_start = 0;
    size_t got, len; /* (NULs are dropped before the line is classified) */
    errno = 0;
    while (!rc && (got = read_piece(r, line, &len, &ended)) > 0) {
        if (!mid_line && ended && is_separator(line, len)) {
            rc = w->end(w);
            doc_start = offset + got;
        } else {
            rc = w->add(w, (const unsigned char *)line, len);
            if (!rc && offset + got - doc_start > MAX_DOCUMENT_BYTES)
                rc = too_long(path, doc_start);
        }
        mid_line = !ended;
        offset += got;
    }
    free(line), free(r);
    if (!rc && ferror(f))
        rc = tr_fail(TR_ERR_IO, "cannot read %s: %s", path, strerror(errno ? errno : EIO));
    return rc ? rc : w->end(w);
}

static int document_per_file(doc_sink *w, FILE *f, const char *path)
{
    unsigned char buf[1 << 16];
    size_t got;
    uint64_t offset = 0;
    int rc = TR_OK;
    while (!rc && (got = fread(buf, 1, sizeof buf, f)) > 0) {
        rc = w->add(w, buf, got);
        offset += got;
        if (!rc && offset > MAX_DOCUMENT_BYTES)
            rc = too_long(path, 0);
    }
    if (!rc && ferror(f))
        rc = tr_fail(TR_ERR_IO, "cannot read %s: %s", path, strerror(errno ? errno : EIO));
    return rc ? rc : w->end(w);
}

int text_documents(FILE *f, const char *path, int split_on_blank_lines, doc_sink *sink)
{
    errno = 0;
    return split_on_blank_lines ? documents_by_blank_lines(sink, f, path)
                                : document_per_file(sink, f, path);
}

int tr_preprocess_text(const char *const *inputs, int n_inputs, const char *output_prefix,
                       int split_on_blank_lines, uint64_t *n_documents, uint64_t *n_tokens)
{
    if (n_inputs <= 0)
        return tr_fail(TR_ERR_INVALID, "preprocess: no input files");
    if (!output_prefix || !output_prefix[0])
        return tr_fail(TR_ERR_INVALID, "preprocess: empty output prefix");
    indexed_writer w;
    int rc = iw_begin(&w, output_prefix);
    if (rc)
        return rc;
    byte_sink bs = {{append_bytes, close_document}, &w};
    for (int i = 0; i < n_inputs && !rc; i++) {
        prep_input *in; /* plain, gzip or zstd */
        if ((rc = prep_input_open(inputs[i], &in)))
            break;
        rc = prep_input_kind_of(in) == PREP_IN_PARQUET
                 ? tr_fail(TR_ERR_CONFIG, "%s is a Parquet file: name the columns to read with "
                           "--json-keys", inputs[i])
                 : text_documents(prep_input_file(in), inputs[i], split_on_blank_lines, &bs.sink);
        rc = prep_input_close(in, rc);
    }
    if (!rc)
        rc = iw_finish(&w);
    if (!rc) {
        if (n_documents)
            *n_documents = w.n_docs;
        if (n_tokens)
            *n_tokens = w.n_tokens;
    }
    iw_abort(&w);
    return rc;
}
