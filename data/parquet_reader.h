/* The Parquet reader's state, shared by parquet_meta.c (the footer) and parquet.c (pages). */
#ifndef TR_PARQUET_READER_H
#define TR_PARQUET_READER_H

#include "data/parquet_internal.h"

#define PQ_MAX_COLS 16

typedef struct {
    int64_t type, codec, num_values, size, data_offset, dict_offset; /* -1: not set */
    int external, has_meta;
} pq_chunk; /* one wanted column's chunk in a row group; data_offset: where its pages start */

typedef struct {
    int64_t num_rows;
    pq_chunk chunk[PQ_MAX_COLS]; /* [wanted column] */
} pq_row_group;

typedef struct {
    const char *name;
    int leaf;                /* its index among the schema's leaves (-1: not found yet) */
    int optional;            /* nulls possible: definition levels of bit width 1 */
    /* the chunk being read */
    const pq_chunk *chunk;
    int64_t pos, end;        /* file offsets: the next page header, the chunk's end */
    int64_t values_left;     /* of the chunk, not yet in a page */
    int data_seen;           /* a data page was read (a dictionary page must come first) */
    /* its dictionary */
    uint8_t *dict_buf;
    pq_value *dict;
    size_t n_dict;
    /* the page being read: values (nulls included) pointing into page */
    uint8_t *raw, *page, *joined;  /* joined: DELTA_BYTE_ARRAY's values, prefixes restored */
    size_t raw_cap, page_cap, joined_cap;
    pq_value *vals;
    uint32_t *levels, *idx;
    size_t n_vals, at, vals_cap;
} pq_col;

struct pq_reader {
    char *path;
    int fd;
    int64_t size, meta_at;   /* the file's size; where the footer's FileMetaData starts */
    uint8_t *meta;
    int64_t num_rows;
    int n_leaves;
    pq_row_group *rg;
    size_t n_rg, rg_next;    /* the row group to start next */
    int64_t rows_left;       /* in the current row group */
    uint64_t row;
    int n_cols;
    pq_col col[PQ_MAX_COLS];
};

/* n bytes of the file at off into buf (an error naming the file when it is shorter). */
int pq_read_at(pq_reader *r, int64_t off, void *buf, size_t n);
/* The footer: schema, row groups and their wanted chunks, all checked. */
int pq_read_footer(pq_reader *r);

#endif
