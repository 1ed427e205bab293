/* An input of `trident preprocess` (prep_input.c), told by its first bytes, not its name:
 * gzip (1f 8b; members one after another) or zstd (28 b5 2f fd; frames one after another),
 * decompressed as it is read, never whole in memory; Parquet ("PAR1"), read as rows; anything
 * else as it is (a name ending in .parquet without "PAR1" first is refused). A truncated or
 * corrupt stream is TR_ERR_INVALID naming the file and the byte offset in it. Not part of the
 * contract. */
#ifndef TR_PREP_INPUT_H
#define TR_PREP_INPUT_H

#include <stdint.h>
#include <stdio.h>

typedef struct prep_input prep_input;

typedef enum { PREP_IN_PLAIN, PREP_IN_GZIP, PREP_IN_ZSTD, PREP_IN_PARQUET } prep_input_kind;

int prep_input_open(const char *path, prep_input **out);
prep_input_kind prep_input_kind_of(const prep_input *in);
/* The decompressed bytes (plain, gzip, zstd inputs). */
FILE *prep_input_file(prep_input *in);
/* Parquet: each row, in file order, as the JSON object line of the columns named by keys
 * ({"KEY": "VALUE", "KEY2": null}; a null value is JSON's null), to add(ctx, line, len, row)
 * with row counted from 1. The line is the JSON Lines line of the same values. */
int prep_input_rows(prep_input *in, const char *const *keys, int n_keys,
                    int (*add)(void *ctx, const char *line, size_t len, uint64_t row), void *ctx);
/* Closes in; returns rc, or the stream's own error when decompressing failed (the cause of
 * the read error rc reports). */
int prep_input_close(prep_input *in, int rc);

#endif
