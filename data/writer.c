/* Writing a Megatron indexed dataset (uint16 or int32 tokens), one document at a time, each
 * one or more sequences, as Megatron's IndexedDatasetBuilder does (add_document: the tokens,
 * the sequence lengths, then the document boundary). Tokens stream into PREFIX.bin.tmp;
 * sizes and document ends are kept in memory and PREFIX.idx.tmp is written at the end; both
 * are fsync'ed and renamed, the .bin first, so a PREFIX.idx that exists always describes a
 * complete PREFIX.bin. */
#include "data/data_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/core.h"

static char *with_suffix(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    char *s = malloc(la + lb + 1);
    if (s) {
        memcpy(s, a, la);
        memcpy(s + la, b, lb + 1);
    }
    return s;
}

int iw_begin_dtype(indexed_writer *w, const char *prefix, int dtype)
{
    memset(w, 0, sizeof *w);
    w->dtype = dtype;
    w->itemsize = dtype_size(dtype);
    w->bin_path = with_suffix(prefix, ".bin");
    w->idx_path = with_suffix(prefix, ".idx");
    w->bin_tmp = with_suffix(prefix, ".bin.tmp");
    w->idx_tmp = with_suffix(prefix, ".idx.tmp");
    if (!w->bin_path || !w->idx_path || !w->bin_tmp || !w->idx_tmp) {
        iw_abort(w);
        return tr_fail(TR_ERR_NOMEM, "out of memory writing %s", prefix);
    }
    if (dtype != DT_UINT16 && dtype != DT_INT32 && dtype != DT_UINT8) {
        iw_abort(w);
        return tr_fail(TR_ERR_INTERNAL, "indexed writer: dtype %d is not uint8, uint16 or int32",
                       dtype);
    }
    w->bin = fopen(w->bin_tmp, "wb");
    if (!w->bin) {
        int rc = tr_fail(TR_ERR_IO, "cannot create %s: %s", w->bin_tmp, strerror(errno));
        iw_abort(w);
        return rc;
    }
    return TR_OK;
}

int iw_begin(indexed_writer *w, const char *prefix)
{
    return iw_begin_dtype(w, prefix, DT_UINT16);
}

static int flush_tokens(indexed_writer *w)
{
    if (w->n_buf && fwrite(w->buf, 1, w->n_buf, w->bin) != w->n_buf)
        return tr_fail(TR_ERR_IO, "cannot write %s: %s", w->bin_tmp, strerror(errno));
    w->n_buf = 0;
    return TR_OK;
}

static int count_tokens(indexed_writer *w, size_t n)
{
    if (n > (uint64_t)INT32_MAX - w->cur_len)
        return tr_fail(TR_ERR_INVALID,
                       "sequence %llu of %s would hold more than 2^31-1 tokens (the index "
                       "stores sizes as int32)",
                       (unsigned long long)w->n_seqs, w->bin_path);
    w->in_document = 1;
    w->cur_len += n;
    return TR_OK;
}

int iw_append(indexed_writer *w, const uint16_t *tokens, size_t n)
{
    if (w->dtype != DT_UINT16)
        return tr_fail(TR_ERR_INTERNAL, "iw_append on a %s writer", dtype_name(w->dtype));
    int rc = count_tokens(w, n);
    while (n && !rc) {
        size_t room = (sizeof w->buf - w->n_buf) / 2, take = n < room ? n : room;
        memcpy(w->buf + w->n_buf, tokens, take * 2);
        w->n_buf += take * 2;
        tokens += take;
        n -= take;
        if (w->n_buf + 2 > sizeof w->buf)
            rc = flush_tokens(w);
    }
    return rc;
}

int iw_append_ids(indexed_writer *w, const int32_t *ids, size_t n)
{
    int rc = count_tokens(w, n);
    for (size_t i = 0; i < n && !rc; i++) {
        if (ids[i] < 0 || (w->dtype == DT_UINT16 && ids[i] > UINT16_MAX) ||
            (w->dtype == DT_UINT8 && ids[i] > UINT8_MAX))
            return tr_fail(TR_ERR_INTERNAL, "token id %d does not fit %s in %s", (int)ids[i],
                           dtype_name(w->dtype), w->bin_path);
        if (w->n_buf + (size_t)w->itemsize > sizeof w->buf && (rc = flush_tokens(w)))
            return rc;
        if (w->dtype == DT_UINT16) {
            uint16_t v = (uint16_t)ids[i];
            memcpy(w->buf + w->n_buf, &v, 2);
        } else if (w->dtype == DT_UINT8) {
            w->buf[w->n_buf] = (unsigned char)ids[i];
        } else {
            memcpy(w->buf + w->n_buf, &ids[i], 4);
        }
        w->n_buf += (size_t)w->itemsize;
    }
    return rc;
}

/* Room for one more item in the array *p of *cap items of `size` bytes (doubling). */
static int room_for_one(void *p, uint64_t n, uint64_t *cap, size_t size, const char *what)
{
    if (n < *cap)
        return TR_OK;
    uint64_t c = *cap ? 2 * *cap : 1024;
    void *q = c <= SIZE_MAX / size ? realloc(*(void **)p, c * size) : NULL;
    if (!q)
        return tr_fail(TR_ERR_NOMEM, "out of memory for %llu %s", (unsigned long long)c, what);
    *(void **)p = q;
    *cap = c;
    return TR_OK;
}

int iw_end_sequence(indexed_writer *w)
{
    int rc = room_for_one(&w->sizes, w->n_seqs, &w->cap_seqs, sizeof *w->sizes, "sequence sizes");
    if (rc)
        return rc;
    w->sizes[w->n_seqs++] = (int32_t)w->cur_len;
    w->n_tokens += w->cur_len;
    w->cur_len = 0;
    w->in_document = 0;
    return TR_OK;
}

int iw_end_document(indexed_writer *w)
{
    int rc;
    if ((w->in_document && (rc = iw_end_sequence(w))) ||
        (rc = room_for_one(&w->doc_end, w->n_docs, &w->cap_docs, sizeof *w->doc_end,
                           "document indices")))
        return rc;
    w->doc_end[w->n_docs++] = w->n_seqs;
    return TR_OK;
}

static int write_index(indexed_writer *w, FILE *f)
{
    uint64_t version = 1, n_seqs = w->n_seqs, n_entries = w->n_docs + 1;
    uint8_t code = (uint8_t)w->dtype;
    int ok = fwrite(IDX_MAGIC, IDX_MAGIC_LEN, 1, f) == 1 &&
             fwrite(&version, 8, 1, f) == 1 && fwrite(&code, 1, 1, f) == 1 &&
             fwrite(&n_seqs, 8, 1, f) == 1 && fwrite(&n_entries, 8, 1, f) == 1;
    if (ok && n_seqs)
        ok = fwrite(w->sizes, 4, (size_t)n_seqs, f) == (size_t)n_seqs;
    int64_t ptr = 0;
    for (uint64_t i = 0; ok && i < n_seqs; i++) {
        ok = fwrite(&ptr, 8, 1, f) == 1;
        ptr += (int64_t)w->itemsize * (int64_t)w->sizes[i];
    }
    int64_t zero = 0;
    ok = ok && fwrite(&zero, 8, 1, f) == 1;
    for (uint64_t d = 0; ok && d < w->n_docs; d++) {
        int64_t v = (int64_t)w->doc_end[d];
        ok = fwrite(&v, 8, 1, f) == 1;
    }
    if (!ok)
        return tr_fail(TR_ERR_IO, "cannot write %s: %s", w->idx_tmp, strerror(errno));
    return TR_OK;
}

static int close_synced(FILE **f, const char *path)
{
    int err = 0;
    if (fflush(*f) != 0 || fsync(fileno(*f)) != 0)
        err = errno;
    if (fclose(*f) != 0 && !err)
        err = errno;
    *f = NULL;
    if (err)
        return tr_fail(TR_ERR_IO, "cannot write %s: %s", path, strerror(err));
    return TR_OK;
}

int iw_finish(indexed_writer *w)
{
    int rc;
    if (w->in_document && (rc = iw_end_document(w)))
        return rc;
    if ((rc = flush_tokens(w)) || (rc = close_synced(&w->bin, w->bin_tmp)))
        return rc;
    FILE *f = fopen(w->idx_tmp, "wb");
    if (!f)
        return tr_fail(TR_ERR_IO, "cannot create %s: %s", w->idx_tmp, strerror(errno));
    rc = write_index(w, f);
    if (rc) {
        fclose(f);
        return rc;
    }
    if ((rc = close_synced(&f, w->idx_tmp)))
        return rc;
    if (rename(w->bin_tmp, w->bin_path) != 0)
        return tr_fail(TR_ERR_IO, "cannot rename %s to %s: %s", w->bin_tmp, w->bin_path,
                       strerror(errno));
    if (rename(w->idx_tmp, w->idx_path) != 0)
        return tr_fail(TR_ERR_IO, "cannot rename %s to %s: %s", w->idx_tmp, w->idx_path,
                       strerror(errno));
    return TR_OK;
}

void iw_abort(indexed_writer *w)
{
    if (w->bin)
        fclose(w->bin);
    if (w->bin_tmp)
        remove(w->bin_tmp); /* after a finish these are gone already */
    if (w->idx_tmp)
        remove(w->idx_tmp);
    free(w->bin_path);
    free(w->idx_path);
    free(w->bin_tmp);
    free(w->idx_tmp);
    free(w->sizes);
    free(w->doc_end);
    memset(w, 0, sizeof *w);
}

int tr_indexed_write(const char *prefix, const uint16_t *tokens, const uint64_t *doc_lengths,
                     uint64_t n_docs)
{
    indexed_writer w;
    int rc = iw_begin(&w, prefix);
    if (rc)
        return rc;
    for (uint64_t d = 0; d < n_docs && !rc; d++) {
        if (doc_lengths[d] > INT32_MAX) {
            rc = tr_fail(TR_ERR_INVALID, "%s: document %llu has %llu tokens, more than 2^31-1",
                         prefix, (unsigned long long)d, (unsigned long long)doc_lengths[d]);
            break;
        }
        rc = iw_append(&w, tokens, (size_t)doc_lengths[d]);
        if (!rc)
            rc = iw_end_document(&w);
        tokens += doc_lengths[d];
    }
    if (!rc)
        rc = iw_finish(&w);
    iw_abort(&w);
    return rc;
}
