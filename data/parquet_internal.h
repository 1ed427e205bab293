/* Parquet string columns, read row by row (data/parquet*.c), for `trident preprocess`.
 *
 * Supported: a flat schema's top-level BYTE_ARRAY columns (UTF8 / STRING or no annotation),
 * REQUIRED or OPTIONAL (nulls); data pages v1 and v2, dictionary pages; encodings PLAIN,
 * RLE_DICTIONARY / PLAIN_DICTIONARY, DELTA_LENGTH_BYTE_ARRAY and DELTA_BYTE_ARRAY (Spark's
 * v2 writer); codecs UNCOMPRESSED, SNAPPY, GZIP, ZSTD. Anything else
 * (a nested or repeated column, LZ4 / BROTLI / LZO, another encoding) is refused by name.
 * Only the wanted columns' pages are read (by offset); memory: one page per column and its
 * dictionary. Every length and count is checked against the bytes that hold it: a malformed
 * file is TR_ERR_INVALID with a message naming the file, never a crash or a hang. */
#ifndef TR_PARQUET_INTERNAL_H
#define TR_PARQUET_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

/* ---- Thrift compact protocol (parquet_thrift.c): a bounded cursor over bytes */
typedef struct {
    const uint8_t *p, *end;
    int depth;        /* nesting of structs / lists being skipped or read */
    const char *err;  /* the first error (static text), or NULL */
} pq_thrift;

enum { PQ_T_STOP = 0, PQ_T_TRUE = 1, PQ_T_FALSE = 2, PQ_T_I8 = 3, PQ_T_I16 = 4, PQ_T_I32 = 5,
       PQ_T_I64 = 6, PQ_T_DOUBLE = 7, PQ_T_BINARY = 8, PQ_T_LIST = 9, PQ_T_SET = 10,
       PQ_T_MAP = 11, PQ_T_STRUCT = 12 };

/* A struct's next field header: its id and type (PQ_T_STOP ends the struct); *last is the
 * previous field's id (0 at the start of a struct), updated. 0 on an error (t->err). */
int pq_field(pq_thrift *t, int *last, int *id, int *type);
/* Values of the given wire type; an integer of another integer type or a value of another
 * type is an error ("a field of a wrong type"). */
int64_t pq_int(pq_thrift *t, int type);
int pq_bool(pq_thrift *t, int type);
/* A binary / string: its bytes inside t's buffer (*len of them). */
const uint8_t *pq_binary(pq_thrift *t, int type, size_t *len);
/* A list header: its element type and count (checked: each element takes at least one byte,
 * so count <= bytes left). */
int pq_list(pq_thrift *t, int type, int *elem_type, size_t *count);
/* Skips a value of the given type (structs, lists and maps to depth 32). */
void pq_skip(pq_thrift *t, int type);
/* Enters / leaves a nested struct (bounds the depth). */
int pq_struct_begin(pq_thrift *t, int type);
void pq_struct_end(pq_thrift *t);

/* ---- RLE / bit-packing hybrid (parquet_thrift.c): n values of bit_width bits into out. 0 on
 * success; else a static message (a run past the bytes, a zero-length run, width > 32). */
const char *pq_rle_decode(const uint8_t *p, size_t len, int bit_width, uint32_t *out, size_t n);

/* ---- DELTA_BINARY_PACKED (parquet_thrift.c): n values into out, *used the bytes they took;
 * else a static message. */
const char *pq_delta_decode(const uint8_t *p, size_t len, int64_t *out, size_t n, size_t *used);

/* ---- codecs (parquet_codec.c): exactly `want` bytes into out; else a static message */
enum { PQ_CODEC_UNCOMPRESSED = 0, PQ_CODEC_SNAPPY = 1, PQ_CODEC_GZIP = 2, PQ_CODEC_ZSTD = 6 };
const char *pq_decompress(int codec, const uint8_t *in, size_t n, uint8_t *out, size_t want);
const char *pq_snappy_decode(const uint8_t *in, size_t n, uint8_t *out, size_t want);
const char *pq_codec_name(int codec); /* "SNAPPY", "LZ4_RAW", ... */

/* ---- the reader (parquet.c) */
typedef struct pq_reader pq_reader;

typedef struct {
    const char *s; /* the value's bytes (valid until the next pq_next_row); NULL: null */
    size_t len;
} pq_value;

/* Opens path and finds the named columns (n_cols of them, at most 16); a column missing, of
 * another type, nested or repeated is an error naming it. */
int pq_open(const char *path, const char *const *cols, int n_cols, pq_reader **out);
/* The next row's values of the columns, in cols' order, into vals; *row: its 1-based number.
 * Returns TR_OK with *row 0 after the last row. */
int pq_next_row(pq_reader *r, pq_value *vals, uint64_t *row);
/* Values a data page may hold (default 1 << 24; a fuzz target lowers it to stay fast). */
extern size_t pq_max_page_values;
void pq_close(pq_reader *r);

#endif
