/* A Parquet file's footer: "PAR1", the FileMetaData (Thrift compact), its length, "PAR1". The
 * schema gives each wanted column's leaf index (a flat, top-level BYTE_ARRAY column), each
 * row group its row count and, per wanted column, its chunk: codec, value count, byte range. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "data/parquet_reader.h"

#define BYTE_ARRAY 6
#define REPEATED 2

static const char *type_name(int64_t t)
{
    static const char *const names[] = {"BOOLEAN", "INT32", "INT64", "INT96", "FLOAT", "DOUBLE",
                                        "BYTE_ARRAY", "FIXED_LEN_BYTE_ARRAY"};
    return t >= 0 && t < 8 ? names[t] : "of an unknown type";
}

static const char *converted_name(int64_t t)
{
    static const char *const names[] = {
        "UTF8", "MAP", "MAP_KEY_VALUE", "LIST", "ENUM", "DECIMAL", "DATE", "TIME_MILLIS",
        "TIME_MICROS", "TIMESTAMP_MILLIS", "TIMESTAMP_MICROS", "UINT_8", "UINT_16", "UINT_32",
        "UINT_64", "INT_8", "INT_16", "INT_32", "INT_64", "JSON", "BSON", "INTERVAL"};
    return t >= 0 && t < 22 ? names[t] : "an unknown annotation";
}

static int bad(const pq_reader *r, const char *what, const char *why)
{
    return tr_fail(TR_ERR_INVALID, "%s: not a readable Parquet file: %s: %s", r->path, what, why);
}

typedef struct {
    const uint8_t *name;
    size_t name_len;
    int64_t type, repetition, children, converted, logical; /* -1: not set */
} schema_elem;

/* LogicalType is a union: the id of its one field (1 STRING, 12 JSON, ...). */
static int64_t logical_kind(pq_thrift *t, int type)
{
    int64_t kind = -1;
    int last = 0, id, ft;
    if (!pq_struct_begin(t, type))
        return -1;
    while (pq_field(t, &last, &id, &ft)) {
        kind = id;
        pq_skip(t, ft);
    }
    pq_struct_end(t);
    return kind;
}

static void schema_element(pq_thrift *t, int type, schema_elem *e)
{
    *e = (schema_elem){NULL, 0, -1, -1, -1, -1, -1};
    int last = 0, id, ft;
    if (!pq_struct_begin(t, type))
        return;
    while (pq_field(t, &last, &id, &ft)) {
        switch (id) {
        case 1: e->type = pq_int(t, ft); break;
        case 3: e->repetition = pq_int(t, ft); break;
        case 4: e->name = pq_binary(t, ft, &e->name_len); break;
        case 5: e->children = pq_int(t, ft); break;
        case 6: e->converted = pq_int(t, ft); break;
        case 10: e->logical = logical_kind(t, ft); break;
        default: pq_skip(t, ft);
        }
    }
    pq_struct_end(t);
}

/* A wanted top-level column: a flat BYTE_ARRAY column, UTF8 / STRING or not annotated. */
static int check_column(pq_reader *r, pq_col *c, const schema_elem *e)
{
    if (e->children > 0 || e->repetition == REPEATED)
        return tr_fail(TR_ERR_INVALID, "%s: column \"%s\" is a nested column (a list, map or "
                       "struct): only flat string columns are read", r->path, c->name);
    if (e->type != BYTE_ARRAY)
        return tr_fail(TR_ERR_INVALID, "%s: column \"%s\" is %s, not a string column "
                       "(BYTE_ARRAY)", r->path, c->name, type_name(e->type));
    if ((e->converted >= 0 && e->converted != 0) || (e->logical >= 0 && e->logical != 1))
        return tr_fail(TR_ERR_INVALID, "%s: column \"%s\" holds %s values, not strings (UTF8)",
                       r->path, c->name, e->converted >= 0 ? converted_name(e->converted)
                                                       : "annotated (non-STRING logical type)");
    c->optional = e->repetition == 1;
    return TR_OK;
}

static int read_schema(pq_reader *r, pq_thrift *t, int type)
{
    int et;
    size_t n;
    if (!pq_list(t, type, &et, &n) || n == 0)
        return bad(r, "the schema", t->err ? t->err : "empty");
    int64_t left[64]; /* children not yet seen at each depth */
    int d = 0, leaf = 0;
    for (size_t i = 0; i < n && !t->err; i++) {
        schema_elem e;
        schema_element(t, et, &e);
        if (t->err)
            break;
        if (i == 0) { /* the root */
            if (e.children < 0)
                return bad(r, "the schema", "a root without children");
            left[d++] = e.children;
            continue;
        }
        if (d == 0 || e.children > INT32_MAX)
            return bad(r, "the schema", "more elements than its groups hold");
        left[d - 1]--;
        for (int k = 0; k < r->n_cols && d == 1; k++) {
            pq_col *c = &r->col[k];
            if (c->leaf < 0 && e.name_len == strlen(c->name) &&
                !memcmp(e.name, c->name, e.name_len)) {
                int rc = check_column(r, c, &e);
                if (rc)
                    return rc;
                c->leaf = leaf;
            }
        }
        if (e.children > 0) {
            if (d == 64)
                return bad(r, "the schema", "nested deeper than 64");
            left[d++] = e.children;
        } else {
            leaf++;
        }
        while (d > 0 && left[d - 1] == 0)
            d--;
    }
    if (t->err)
        return bad(r, "the schema", t->err);
    if (d != 0)
        return bad(r, "the schema", "fewer elements than its groups hold");
    r->n_leaves = leaf;
    for (int k = 0; k < r->n_cols; k++)
        if (r->col[k].leaf < 0)
            return tr_fail(TR_ERR_INVALID, "%s: no column \"%s\" (--json-keys names the columns "
                           "to read)", r->path, r->col[k].name);
    return TR_OK;
}

/* ColumnMetaData of a wanted chunk. */
static void chunk_meta(pq_thrift *t, int type, pq_chunk *ch)
{
    int last = 0, id, ft;
    if (!pq_struct_begin(t, type))
        return;
    while (pq_field(t, &last, &id, &ft)) {
        switch (id) {
        case 1: ch->type = pq_int(t, ft); break;
        case 4: ch->codec = pq_int(t, ft); break;
        case 5: ch->num_values = pq_int(t, ft); break;
        case 7: ch->size = pq_int(t, ft); break;
        case 9: ch->data_offset = pq_int(t, ft); break;
        case 11: ch->dict_offset = pq_int(t, ft); break;
        default: pq_skip(t, ft);
        }
    }
    pq_struct_end(t);
}

static void column_chunk(pq_thrift *t, int type, pq_chunk *ch)
{
    int last = 0, id, ft;
    size_t len;
    *ch = (pq_chunk){-1, -1, -1, -1, -1, -1, 0, 0};
    if (!pq_struct_begin(t, type))
        return;
    while (pq_field(t, &last, &id, &ft)) {
        if (id == 1) {
            (void)pq_binary(t, ft, &len);
            ch->external = 1;
        } else if (id == 3) {
            chunk_meta(t, ft, ch);
            ch->has_meta = 1;
        } else {
            pq_skip(t, ft);
        }
    }
    pq_struct_end(t);
}

static int check_chunk(pq_reader *r, size_t g, pq_col *c, pq_chunk *ch, int64_t rows)
{
    char what[256];
    snprintf(what, sizeof what, "row group %zu, column \"%s\"", g, c->name);
    if (ch->external)
        return bad(r, what, "its data is in another file");
    if (!ch->has_meta)
        return bad(r, what, "no column metadata (an encrypted file?)");
    if (ch->type != BYTE_ARRAY)
        return bad(r, what, "its chunk's type is not BYTE_ARRAY");
    if (ch->codec != PQ_CODEC_UNCOMPRESSED && ch->codec != PQ_CODEC_SNAPPY &&
        ch->codec != PQ_CODEC_GZIP && ch->codec != PQ_CODEC_ZSTD)
        return tr_fail(TR_ERR_INVALID, "%s: %s: compression %s is not supported (UNCOMPRESSED, "
                       "SNAPPY, GZIP and ZSTD are)", r->path, what, pq_codec_name((int)ch->codec));
    if (ch->num_values != rows)
        return bad(r, what, "its value count is not its row group's row count");
    int64_t start = ch->data_offset; /* (pyarrow writes 0 for a chunk of no data page) */
    if (ch->dict_offset >= 4 && (ch->dict_offset < start || start < 4))
        start = ch->dict_offset;
    if (start < 4 || ch->size < 0 || ch->size > r->meta_at - start)
        return bad(r, what, "its byte range is not inside the file's data");
    ch->data_offset = start;
    return TR_OK;
}

static int read_row_groups(pq_reader *r, pq_thrift *t, int type)
{
    int et, cet, last, id, ft;
    size_t n, n_cols;
    if (!pq_list(t, type, &et, &n))
        return bad(r, "the row groups", t->err);
    r->rg = calloc(n ? n : 1, sizeof *r->rg);
    if (!r->rg)
        return tr_fail(TR_ERR_NOMEM, "out of memory for %zu row groups", n);
    r->n_rg = n;
    int64_t total = 0;
    for (size_t g = 0; g < n && !t->err; g++) {
        pq_row_group *rg = &r->rg[g];
        rg->num_rows = -1;
        size_t seen = 0;
        if (!pq_struct_begin(t, et))
            break;
        last = 0;
        while (pq_field(t, &last, &id, &ft)) {
            if (id == 3) {
                rg->num_rows = pq_int(t, ft);
            } else if (id == 1 && pq_list(t, ft, &cet, &n_cols)) {
                seen = n_cols;
                for (size_t j = 0; j < n_cols && !t->err; j++) {
                    int k = 0;
                    while (k < r->n_cols && r->col[k].leaf != (int)j)
                        k++;
                    if (k < r->n_cols)
                        column_chunk(t, cet, &rg->chunk[k]);
                    else
                        pq_skip(t, cet);
                }
            } else {
                pq_skip(t, ft);
            }
        }
        pq_struct_end(t);
        char what[64];
        snprintf(what, sizeof what, "row group %zu", g);
        if (t->err)
            return bad(r, what, t->err);
        if (rg->num_rows < 0 || rg->num_rows > INT64_MAX - total)
            return bad(r, what, "no row count, or a negative one");
        if (seen != (size_t)r->n_leaves)
            return bad(r, what, "its column count is not the schema's");
        total += rg->num_rows;
        for (int k = 0; k < r->n_cols; k++) {
            int rc = check_chunk(r, g, &r->col[k], &rg->chunk[k], rg->num_rows);
            if (rc)
                return rc;
        }
    }
    if (t->err)
        return bad(r, "the row groups", t->err);
    if (total != r->num_rows)
        return bad(r, "the row groups", "their row counts do not add up to the file's");
    return TR_OK;
}

int pq_read_footer(pq_reader *r)
{
    uint8_t tail[8], head[4];
    if (r->size < 12 || pq_read_at(r, 0, head, 4) || pq_read_at(r, r->size - 8, tail, 8))
        return bad(r, "the footer", "shorter than 12 bytes");
    if (memcmp(head, "PAR1", 4) || memcmp(tail + 4, "PAR1", 4))
        return bad(r, "the footer", memcmp(tail + 4, "PARE", 4)
                   ? "no PAR1 magic at its start and end" : "an encrypted footer (PARE)");
    uint32_t len = (uint32_t)tail[0] | (uint32_t)tail[1] << 8 | (uint32_t)tail[2] << 16 |
                   (uint32_t)tail[3] << 24;
    if ((int64_t)len > r->size - 12)
        return bad(r, "the footer", "its length runs past the start of the file");
    r->meta_at = r->size - 8 - len;
    r->meta = malloc(len ? len : 1);
    if (!r->meta)
        return tr_fail(TR_ERR_NOMEM, "out of memory for a footer of %u bytes", len);
    int rc = pq_read_at(r, r->meta_at, r->meta, len);
    if (rc)
        return rc;
    pq_thrift t = {r->meta, r->meta + len, 0, NULL}, groups = {0};
    int last = 0, id, ft, have_schema = 0, groups_type = 0;
    r->num_rows = -1;
    while (!rc && pq_field(&t, &last, &id, &ft)) {
        if (id == 2 && !have_schema) {
            rc = read_schema(r, &t, ft);
            have_schema = 1;
        } else if (id == 3) {
            r->num_rows = pq_int(&t, ft);
        } else if (id == 4 && !groups_type) { /* read once the schema is known */
            groups = t;
            groups_type = ft;
            pq_skip(&t, ft);
        } else {
            pq_skip(&t, ft);
        }
    }
    if (rc)
        return rc;
    if (t.err)
        return bad(r, "the footer", t.err);
    if (!have_schema || !groups_type || r->num_rows < 0)
        return bad(r, "the footer", "no schema, row groups or row count");
    return read_row_groups(r, &groups, groups_type);
}
