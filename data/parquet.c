/* Parquet string columns row by row (parquet_internal.h): each wanted column walks its chunk
 * of the current row group page by page (a dictionary page, then data pages v1 / v2), so
 * memory holds one decoded page and one dictionary per column. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"
#include "data/parquet_reader.h"

#define DATA_PAGE 0
#define DICTIONARY_PAGE 2
#define DATA_PAGE_V2 3
#define PLAIN 0
#define PLAIN_DICTIONARY 2
#define RLE 3
#define DELTA_LENGTH_BYTE_ARRAY 6
#define DELTA_BYTE_ARRAY 7
#define RLE_DICTIONARY 8
#define MAX_PAGE_BYTES ((int64_t)1 << 30)
#define FIRST_HEADER_BYTES 4096

size_t pq_max_page_values = (size_t)1 << 24;

static const char *encoding_name(int64_t e)
{
    static const char *const names[] = {"PLAIN", "GROUP_VAR_INT", "PLAIN_DICTIONARY", "RLE",
                                        "BIT_PACKED", "DELTA_BINARY_PACKED",
                                        "DELTA_LENGTH_BYTE_ARRAY", "DELTA_BYTE_ARRAY",
                                        "RLE_DICTIONARY", "BYTE_STREAM_SPLIT"};
    return e >= 0 && e < 10 ? names[e] : "an unknown encoding";
}

int pq_read_at(pq_reader *r, int64_t off, void *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t k = pread(r->fd, (char *)buf + got, n - got, (off_t)(off + (int64_t)got));
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return tr_fail(k < 0 ? TR_ERR_IO : TR_ERR_INVALID, "%s: cannot read %zu bytes at "
                           "offset %lld: %s", r->path, n, (long long)off,
                           k < 0 ? strerror(errno) : "the file is shorter");
        got += (size_t)k;
    }
    return TR_OK;
}

/* An error in column c's current chunk (row group rg_next - 1). */
static int col_fail(const pq_reader *r, const pq_col *c, const char *why)
{
    return tr_fail(TR_ERR_INVALID, "%s: row group %zu, column \"%s\", page at byte %lld: %s",
                   r->path, r->rg_next - 1, c->name, (long long)c->pos, why);
}

static int grow(void **p, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return TR_OK;
    void *q = realloc(*p, need * size);
    if (!q)
        return tr_fail(TR_ERR_NOMEM, "out of memory for a Parquet page (%zu bytes)", need * size);
    *p = q;
    *cap = need;
    return TR_OK;
}

typedef struct {
    int64_t type, uncompressed, compressed;
    int64_t num_values, encoding, level_encoding; /* v1, v2, dictionary */
    int64_t def_len, rep_len, is_compressed;      /* v2 */
} page_header;

/* DataPageHeader (kind 0), DataPageHeaderV2 (1) or DictionaryPageHeader (2). */
static void sub_header(pq_thrift *t, int type, page_header *h, int kind)
{
    int last = 0, id, ft;
    if (!pq_struct_begin(t, type))
        return;
    while (pq_field(t, &last, &id, &ft)) {
        if (id == 1)
            h->num_values = pq_int(t, ft);
        else if ((id == 2 && kind != 1) || (id == 4 && kind == 1))
            h->encoding = pq_int(t, ft);
        else if (id == 3 && kind == 0)
            h->level_encoding = pq_int(t, ft);
        else if (id == 5 && kind == 1)
            h->def_len = pq_int(t, ft);
        else if (id == 6 && kind == 1)
            h->rep_len = pq_int(t, ft);
        else if (id == 7 && kind == 1)
            h->is_compressed = pq_bool(t, ft);
        else
            pq_skip(t, ft);
    }
    pq_struct_end(t);
}

static void parse_header(pq_thrift *t, page_header *h)
{
    *h = (page_header){-1, -1, -1, -1, -1, -1, 0, 0, 1};
    int last = 0, id, ft;
    while (pq_field(t, &last, &id, &ft)) {
        switch (id) {
        case 1: h->type = pq_int(t, ft); break;
        case 2: h->uncompressed = pq_int(t, ft); break;
        case 3: h->compressed = pq_int(t, ft); break;
        case 5: sub_header(t, ft, h, 0); break;
        case 7: sub_header(t, ft, h, 2); break;
        case 8: sub_header(t, ft, h, 1); break;
        default: pq_skip(t, ft);
        }
    }
}

/* Reads the page header at c->pos (growing the window while the header runs past it). */
static int read_header(pq_reader *r, pq_col *c, page_header *h, size_t *header_len)
{
    size_t want = FIRST_HEADER_BYTES;
    for (;;) {
        int64_t left = c->end - c->pos;
        size_t n = (int64_t)want < left ? want : (size_t)left;
        int rc = grow((void **)&c->raw, &c->raw_cap, n ? n : 1, 1);
        if (!rc)
            rc = pq_read_at(r, c->pos, c->raw, n);
        if (rc)
            return rc;
        pq_thrift t = {c->raw, c->raw + n, 0, NULL};
        parse_header(&t, h);
        if (!t.err) {
            *header_len = (size_t)(t.p - c->raw);
            return TR_OK;
        }
        if ((int64_t)n == left || !strstr(t.err, "past its bytes"))
            return col_fail(r, c, t.err);
        want *= 4;
    }
}

/* PLAIN BYTE_ARRAY values: n of them (a 4-byte little-endian length, then the bytes). */
static int plain_values(const pq_reader *r, const pq_col *c, const uint8_t *p, size_t len,
                        pq_value *out, size_t n)
{
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        if (len - at < 4)
            return col_fail(r, c, "a PLAIN value's length past the page");
        uint32_t l = (uint32_t)p[at] | (uint32_t)p[at + 1] << 8 | (uint32_t)p[at + 2] << 16 |
                     (uint32_t)p[at + 3] << 24;
        at += 4;
        if (l > len - at)
            return col_fail(r, c, "a PLAIN value past the page");
        out[i] = (pq_value){(const char *)p + at, l};
        at += l;
    }
    return TR_OK;
}

/* DELTA_LENGTH_BYTE_ARRAY (lengths, then the bytes one after another) or DELTA_BYTE_ARRAY
 * (prefix lengths: bytes shared with the value before; suffix lengths; the suffixes). */
static int delta_values(const pq_reader *r, pq_col *c, int64_t enc, const uint8_t *p,
                        size_t len, pq_value *out, size_t n)
{
    int64_t *a = malloc((2 * n + 1) * sizeof *a), *prefix = a, *suffix = a + n;
    if (!a)
        return tr_fail(TR_ERR_NOMEM, "out of memory for a Parquet page of %zu values", n);
    size_t used = 0, used2 = 0;
    const char *why = pq_delta_decode(p, len, enc == DELTA_BYTE_ARRAY ? prefix : suffix, n, &used);
    if (!why && enc == DELTA_BYTE_ARRAY)
        why = pq_delta_decode(p + used, len - used, suffix, n, &used2);
    const uint8_t *data = p + used + used2;
    size_t left = why ? 0 : len - used - used2, total = 0, prev = 0;
    for (size_t i = 0; i < n && !why; i++) { /* lengths checked, joined size counted */
        int64_t pre = enc == DELTA_BYTE_ARRAY ? prefix[i] : 0;
        if (suffix[i] < 0 || (uint64_t)suffix[i] > left || pre < 0 || (uint64_t)pre > prev)
            why = "a DELTA length past the page (or past the value before)";
        else if ((prev = (size_t)pre + (size_t)suffix[i]) > (size_t)MAX_PAGE_BYTES - total)
            why = "DELTA_BYTE_ARRAY values of more than 1 GiB in a page";
        else
            left -= (size_t)suffix[i], total += prev;
    }
    int rc = why ? col_fail(r, c, why)
                 : grow((void **)&c->joined, &c->joined_cap, total ? total : 1, 1);
    for (size_t i = 0, at = 0; i < n && !rc; i++) {
        size_t pre = enc == DELTA_BYTE_ARRAY ? (size_t)prefix[i] : 0, suf = (size_t)suffix[i];
        if (pre)
            memcpy(c->joined + at, out[i - 1].s, pre);
        memcpy(c->joined + at + pre, data, suf);
        out[i] = (pq_value){(const char *)c->joined + at, pre + suf};
        data += suf, at += pre + suf;
    }
    free(a);
    return rc;
}

static int read_dictionary(pq_reader *r, pq_col *c, const page_header *h, const uint8_t *body)
{
    if (c->dict || c->data_seen)
        return col_fail(r, c, c->dict ? "a second dictionary page" : "a dictionary page after "
                        "data pages");
    if (h->encoding != PLAIN && h->encoding != PLAIN_DICTIONARY)
        return col_fail(r, c, "a dictionary page not PLAIN-encoded");
    if (h->num_values < 0 || h->num_values > h->uncompressed / 4)
        return col_fail(r, c, "a dictionary of more values than its bytes hold");
    c->dict_buf = malloc((size_t)h->uncompressed + 1);
    c->dict = malloc(((size_t)h->num_values + 1) * sizeof *c->dict);
    if (!c->dict_buf || !c->dict)
        return tr_fail(TR_ERR_NOMEM, "out of memory for a Parquet dictionary");
    const char *why = pq_decompress((int)c->chunk->codec, body, (size_t)h->compressed,
                                    c->dict_buf, (size_t)h->uncompressed);
    if (why)
        return col_fail(r, c, why);
    c->n_dict = (size_t)h->num_values;
    return plain_values(r, c, c->dict_buf, (size_t)h->uncompressed, c->dict, c->n_dict);
}

/* A data page's values: levels (nulls where < 1 for an optional column) then the non-null
 * values, PLAIN or dictionary indices. */
static int data_values(pq_reader *r, pq_col *c, const page_header *h, const uint8_t *levels,
                       size_t levels_len, const uint8_t *p, size_t len)
{
    size_t n = (size_t)h->num_values, non_null = n;
    int rc = grow((void **)&c->vals, &c->vals_cap, n ? n : 1, sizeof *c->vals);
    if (rc)
        return rc;
    free(c->levels), free(c->idx);
    c->levels = c->optional ? malloc((n ? n : 1) * sizeof *c->levels) : NULL;
    c->idx = malloc((n ? n : 1) * sizeof *c->idx);
    if ((c->optional && !c->levels) || !c->idx)
        return tr_fail(TR_ERR_NOMEM, "out of memory for a Parquet page of %zu values", n);
    if (c->optional) {
        const char *why = pq_rle_decode(levels, levels_len, 1, c->levels, n);
        if (why)
            return col_fail(r, c, why);
        non_null = 0;
        for (size_t i = 0; i < n; i++)
            non_null += c->levels[i];
    }
    pq_value *v = c->vals + (n - non_null); /* the non-null values, moved into place below */
    if (h->encoding == PLAIN) {
        rc = plain_values(r, c, p, len, v, non_null);
    } else if (h->encoding == RLE_DICTIONARY || h->encoding == PLAIN_DICTIONARY) {
        if (!c->dict)
            return col_fail(r, c, "dictionary indices without a dictionary page");
        if (non_null && len < 1)
            return col_fail(r, c, "dictionary indices without their bit width");
        const char *why = non_null ? pq_rle_decode(p + 1, len - 1, p[0], c->idx, non_null) : NULL;
        if (why)
            return col_fail(r, c, why);
        for (size_t i = 0; i < non_null && !rc; i++) {
            if (c->idx[i] >= c->n_dict)
                return col_fail(r, c, "a dictionary index past the dictionary");
            v[i] = c->dict[c->idx[i]];
        }
    } else if (h->encoding == DELTA_LENGTH_BYTE_ARRAY || h->encoding == DELTA_BYTE_ARRAY) {
        rc = delta_values(r, c, h->encoding, p, len, v, non_null);
    } else {
        char why[160];
        snprintf(why, sizeof why, "encoding %s is not supported (PLAIN, RLE_DICTIONARY, "
                 "DELTA_LENGTH_BYTE_ARRAY and DELTA_BYTE_ARRAY are)", encoding_name(h->encoding));
        return col_fail(r, c, why);
    }
    if (rc)
        return rc;
    for (size_t i = 0, j = n - non_null; c->optional && i < n; i++) /* (j >= i throughout) */
        c->vals[i] = c->levels[i] ? c->vals[j++] : (pq_value){NULL, 0};
    c->n_vals = n;
    c->at = 0;
    return TR_OK;
}

/* The next data page of c with values into c->vals (dictionary and index pages read or
 * skipped on the way). */
static int next_page(pq_reader *r, pq_col *c)
{
    for (;;) {
        if (c->values_left == 0 || c->pos >= c->end)
            return col_fail(r, c, c->values_left ? "the chunk ends before its values"
                                                 : "more rows than the chunk has values");
        page_header h;
        size_t hl = 0;
        int rc = read_header(r, c, &h, &hl);
        if (rc)
            return rc;
        if (h.compressed < 0 || h.uncompressed < 0 || h.compressed > c->end - c->pos - (int64_t)hl)
            return col_fail(r, c, "a page size past its column chunk");
        if (h.uncompressed > MAX_PAGE_BYTES)
            return col_fail(r, c, "a page of more than 1 GiB uncompressed");
        int64_t body_at = c->pos + (int64_t)hl, next = body_at + h.compressed;
        if (h.type != DATA_PAGE && h.type != DATA_PAGE_V2 && h.type != DICTIONARY_PAGE) {
            c->pos = next; /* an index page */
            continue;
        }
        if (h.num_values < 0 || h.encoding < 0)
            return col_fail(r, c, "a page header without its values' count or encoding");
        if ((rc = grow((void **)&c->raw, &c->raw_cap, (size_t)h.compressed + 1, 1)) ||
            (rc = pq_read_at(r, body_at, c->raw, (size_t)h.compressed)))
            return rc;
        if (h.type == DICTIONARY_PAGE) { /* (c->pos stays at the page for errors) */
            if ((rc = read_dictionary(r, c, &h, c->raw)))
                return rc;
            c->pos = next;
            continue;
        }
        c->data_seen = 1;
        if (h.num_values > c->values_left)
            return col_fail(r, c, "pages hold more values than the chunk");
        if ((size_t)h.num_values > pq_max_page_values)
            return col_fail(r, c, "a page of too many values");
        const uint8_t *levels, *values;
        size_t levels_len = 0, values_len;
        if (h.type == DATA_PAGE) {
            if (c->optional && h.level_encoding != RLE)
                return col_fail(r, c, "definition levels not RLE-encoded");
            if ((rc = grow((void **)&c->page, &c->page_cap, (size_t)h.uncompressed + 1, 1)))
                return rc;
            const char *why = pq_decompress((int)c->chunk->codec, c->raw, (size_t)h.compressed,
                                            c->page, (size_t)h.uncompressed);
            if (why)
                return col_fail(r, c, why);
            levels = values = c->page;
            values_len = (size_t)h.uncompressed;
            if (c->optional) { /* a 4-byte length, then the RLE levels */
                if (values_len < 4)
                    return col_fail(r, c, "definition levels past the page");
                levels_len = (size_t)c->page[0] | (size_t)c->page[1] << 8 |
                             (size_t)c->page[2] << 16 | (size_t)c->page[3] << 24;
                if (levels_len > values_len - 4)
                    return col_fail(r, c, "definition levels past the page");
                levels = c->page + 4;
                values = levels + levels_len;
                values_len -= 4 + levels_len;
            }
        } else { /* v2: levels uncompressed, then the values, compressed or not */
            if (h.rep_len != 0)
                return col_fail(r, c, "repetition levels in a flat column");
            if (h.def_len < 0 || h.def_len > h.compressed || h.def_len > h.uncompressed ||
                (!c->optional && h.def_len))
                return col_fail(r, c, "definition levels past the page");
            size_t body = (size_t)(h.uncompressed - h.def_len);
            if ((rc = grow((void **)&c->page, &c->page_cap, (size_t)h.def_len + body + 1, 1)))
                return rc;
            memcpy(c->page, c->raw, (size_t)h.def_len);
            const char *why = pq_decompress(h.is_compressed ? (int)c->chunk->codec
                                                            : PQ_CODEC_UNCOMPRESSED,
                                            c->raw + h.def_len, (size_t)(h.compressed - h.def_len),
                                            c->page + h.def_len, body);
            if (why)
                return col_fail(r, c, why);
            levels = c->page, levels_len = (size_t)h.def_len;
            values = c->page + h.def_len;
            values_len = body;
        }
        if ((rc = data_values(r, c, &h, levels, levels_len, values, values_len)))
            return rc;
        c->pos = next;
        c->values_left -= h.num_values;
        if (c->n_vals)
            return TR_OK;
    }
}

static void col_reset(pq_col *c)
{
    free(c->dict_buf), free(c->dict);
    c->dict_buf = NULL, c->dict = NULL, c->n_dict = 0;
    c->n_vals = c->at = 0;
    c->data_seen = 0;
}

int pq_next_row(pq_reader *r, pq_value *vals, uint64_t *row)
{
    *row = 0;
    while (r->rows_left == 0) {
        if (r->rg_next == r->n_rg)
            return TR_OK;
        const pq_row_group *g = &r->rg[r->rg_next++];
        for (int k = 0; k < r->n_cols; k++) {
            pq_col *c = &r->col[k];
            col_reset(c);
            c->chunk = &g->chunk[k];
            c->pos = c->chunk->data_offset;
            c->end = c->pos + c->chunk->size;
            c->values_left = c->chunk->num_values;
        }
        r->rows_left = g->num_rows;
    }
    for (int k = 0; k < r->n_cols; k++) {
        pq_col *c = &r->col[k];
        int rc = c->at < c->n_vals ? TR_OK : next_page(r, c);
        if (rc)
            return rc;
        vals[k] = c->vals[c->at++];
    }
    r->rows_left--;
    *row = ++r->row;
    return TR_OK;
}

int pq_open(const char *path, const char *const *cols, int n_cols, pq_reader **out)
{
    *out = NULL;
    if (n_cols < 1 || n_cols > PQ_MAX_COLS)
        return tr_fail(TR_ERR_INVALID, "%s: 1 to %d columns can be read, not %d", path,
                       PQ_MAX_COLS, n_cols);
    pq_reader *r = calloc(1, sizeof *r);
    if (!r || !(r->path = strdup(path))) {
        free(r);
        return tr_fail(TR_ERR_NOMEM, "out of memory opening %s", path);
    }
    r->n_cols = n_cols;
    for (int k = 0; k < n_cols; k++)
        r->col[k] = (pq_col){.name = cols[k], .leaf = -1};
    struct stat st;
    r->fd = open(path, O_RDONLY | O_CLOEXEC);
    int rc = r->fd < 0 || fstat(r->fd, &st)
                 ? tr_fail(TR_ERR_IO, "cannot open input %s: %s", path, strerror(errno))
                 : TR_OK;
    if (!rc) {
        r->size = st.st_size;
        rc = pq_read_footer(r);
    }
    if (rc) {
        pq_close(r);
        return rc;
    }
    *out = r;
    return TR_OK;
}

void pq_close(pq_reader *r)
{
    if (!r)
        return;
    for (int k = 0; k < r->n_cols; k++) {
        pq_col *c = &r->col[k];
        col_reset(c);
        free(c->raw), free(c->page), free(c->joined), free(c->vals), free(c->levels), free(c->idx);
    }
    if (r->fd >= 0)
        close(r->fd);
    free(r->meta);
    free(r->rg);
    free(r->path);
    free(r);
}
