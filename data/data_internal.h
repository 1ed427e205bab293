/* data/ internals shared by the format readers (indexed.c, llmc.c), the writers
 * (writer.c, preprocess.c) and the sampler (dataset.c). Not part of the contract.
 *
 * A validated dataset is one contiguous token array (the mmap of the .bin, or of the llm.c
 * shard past its header) plus a way to find where document d starts in it. */
#ifndef TR_DATA_INTERNAL_H
#define TR_DATA_INTERNAL_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "data/data.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "data/ reads little-endian files with native loads: a big-endian host needs byte swaps"
#endif

/* Megatron dtype codes (megatron/core/datasets/indexed_dataset.py, class DType). */
enum {
    DT_UINT8 = 1, DT_INT8 = 2, DT_INT16 = 3, DT_INT32 = 4,
    DT_INT64 = 5, DT_FLOAT64 = 6, DT_FLOAT32 = 7, DT_UINT16 = 8
};

#define IDX_MAGIC "MMIDIDX\0\0"
#define IDX_MAGIC_LEN 9
#define IDX_HEADER_BYTES 34 /* magic 9 + version 8 + dtype 1 + counts 8 + 8 */
#define LLMC_MAGIC 20240520
#define LLMC_VERSION 1
#define LLMC_HEADER_BYTES 1024 /* 256 int32 */

/* A read-only file mapping (map NULL when the file is empty). */
typedef struct {
    void *map;
    size_t bytes;
} data_mapping;

/* A validated token array. */
typedef struct {
    char *path;                /* what messages name: the prefix or the shard path */
    data_mapping bin;            /* token file (.bin, or the llm.c shard) */
    data_mapping idx;            /* Megatron .idx; unused for llm.c */
    const unsigned char *base; /* token 0 */
    int dtype;                 /* TR_DT_* */
    int itemsize;              /* bytes per token */
    uint64_t n_tokens;
    uint64_t n_docs;           /* documents (1 for an llm.c shard) */
    uint64_t n_seqs;           /* Megatron sequences (= n_docs unless sentence-split) */
    const unsigned char *pointers; /* int64[n_seqs], unaligned, inside idx */
    const unsigned char *doc_idx;  /* int64[n_docs + 1], unaligned, inside idx */
} token_store;

/* Unaligned little-endian loads. */
static inline int64_t load_i64(const unsigned char *p)
{
    int64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline int32_t load_i32(const unsigned char *p)
{
    int32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline uint64_t load_u64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

const char *dtype_name(int code);
int dtype_size(int code); /* 0 for an unknown code */

/* Map a regular file read-only; TR_ERR_IO naming the path and the OS error on failure. */
TR_MUST_CHECK int map_file(const char *path, data_mapping *m);
void unmap_file(data_mapping *m);

/* Open and validate (every check of data.h, tokens < vocab_size included). */
TR_MUST_CHECK int indexed_open(const char *prefix, int vocab_size, token_store *s);
TR_MUST_CHECK int llmc_open(const char *path, int vocab_size, token_store *s);
void token_store_close(token_store *s);

/* Token offset where document d (0 <= d <= n_docs) starts; d == n_docs gives n_tokens. */
uint64_t token_store_doc_start(const token_store *s, uint64_t d);
/* The document holding token `offset` (< n_tokens): binary search over document starts. */
uint64_t token_store_doc_of(const token_store *s, uint64_t offset);
/* Token i as int64 (i < n_tokens). */
int64_t token_store_token(const token_store *s, uint64_t i);
/* Check every token lies in [0, vocab_size); on failure name the token, its position and
 * its document. */
TR_MUST_CHECK int token_store_check_vocab(const token_store *s, const char *file, int vocab_size);

/* Streaming writer of an indexed dataset, one document at a time, into PREFIX.bin.tmp and
 * PREFIX.idx.tmp; finish() renames them to PREFIX.bin / PREFIX.idx. A document is one or more
 * sequences (Megatron's sentences); iw_end_document() ends the open sequence, if any, and the
 * document. Tokens are stored as uint16 (iw_begin) or as the dtype given to iw_begin_dtype. */
typedef struct {
    char *bin_path, *idx_path, *bin_tmp, *idx_tmp;
    FILE *bin;
    int dtype, itemsize;
    int32_t *sizes;   /* tokens per sequence */
    uint64_t n_seqs, cap_seqs;
    uint64_t *doc_end; /* sequences before the end of each document */
    uint64_t n_docs, cap_docs, n_tokens, cur_len;
    int in_document;  /* a sequence is open (something was appended since the last end) */
    unsigned char buf[1 << 14];
    size_t n_buf;     /* bytes in buf */
} indexed_writer;

TR_MUST_CHECK int iw_begin(indexed_writer *w, const char *prefix);
/* dtype: DT_UINT16 or DT_INT32 (what Megatron picks by vocabulary size), or DT_UINT8 (SFT
 * loss masks). */
TR_MUST_CHECK int iw_begin_dtype(indexed_writer *w, const char *prefix, int dtype);
TR_MUST_CHECK int iw_append(indexed_writer *w, const uint16_t *tokens, size_t n);
/* Ids in [0, 2^31); each must fit the dtype (checked). */
TR_MUST_CHECK int iw_append_ids(indexed_writer *w, const int32_t *ids, size_t n);
TR_MUST_CHECK int iw_end_sequence(indexed_writer *w);
TR_MUST_CHECK int iw_end_document(indexed_writer *w);
TR_MUST_CHECK int iw_finish(indexed_writer *w);
/* Remove the temporary files and free everything (safe after a failure or a finish). */
void iw_abort(indexed_writer *w);

/* dataset.c: data.split "a,b,c" into three weights (TR_ERR_CONFIG when bad), and the cut of
 * n units (documents) by them: split k is units [bound[k], bound[k+1]). */
TR_MUST_CHECK int data_parse_split(const char *text, double w[3]);
void data_split_bounds(uint64_t n, const double w[3], uint64_t bound[4]);

/* ---- sft.c: a supervised fine-tuning dataset (data.h: tr_data_open_sft) ---- */
typedef struct sft_data sft_data;
TR_MUST_CHECK int sft_open(const char *prefix, const char *split, int seq_length, int vocab_size,
                           uint64_t seed, int pack, sft_data **out);
void sft_close(sft_data *d);
uint64_t sft_num_samples(const sft_data *d, int split);
const token_store *sft_store(const sft_data *d);
void sft_info(const sft_data *d, int split, tr_sft_info *out);
TR_MUST_CHECK int sft_sample(sft_data *d, int split, uint64_t g, int32_t *tokens, float *weights,
                             int32_t *segments, int32_t *positions);

/* ---- dataset.c: one data source (a store cut into splits, shuffled per epoch) ---- */
typedef struct data_source data_source;
/* tr_data_open's rules for one path; salt is added to the shuffle's stream (0: the original
 * single-source order). */
TR_MUST_CHECK int source_open(const char *path, const char *format, const char *split,
                              int seq_length, int vocab_size, uint64_t seed, uint64_t salt,
                              data_source **out);
void source_close(data_source *d);
uint64_t source_num_samples(const data_source *d, int split);
const token_store *source_store(const data_source *d);
void source_split_info(const data_source *d, int split, uint64_t *first_doc, uint64_t *n_docs,
                       uint64_t *first_token, uint64_t *n_tokens);
TR_MUST_CHECK int source_sample_index(data_source *d, int split, uint64_t g, uint64_t *j);
TR_MUST_CHECK int source_sample(data_source *d, int split, uint64_t g, int32_t *tokens);
TR_MUST_CHECK int source_locate(const data_source *d, int split, uint64_t offset, uint64_t *doc,
                                uint64_t *offset_in_doc);

/* Receiver of text documents: the bytes of the open document (in pieces), then its end
 * (also called at a separator or a file's end when nothing was added). */
typedef struct doc_sink {
    int (*add)(struct doc_sink *s, const unsigned char *bytes, size_t n);
    int (*end)(struct doc_sink *s);
} doc_sink;
/* The documents of one open text file (preprocess.c): split at blank lines as data.h says, or
 * the whole file as one document. Documents longer than 2^31-1 bytes are TR_ERR_INVALID. */
TR_MUST_CHECK int text_documents(FILE *f, const char *path, int split_on_blank_lines,
                                 doc_sink *sink);

#endif
