/* data/ — token datasets and global-index sampling.
 *
 * Contract:
 *  - Formats: Megatron's indexed dataset (PREFIX.bin + PREFIX.idx, "MMIDIDX" v1) read
 *    through mmap, and llm.c token shards (1024-byte header, magic 20240520, uint16 tokens).
 *    Every header field, size and pointer is checked against the file sizes before any
 *    token is read: a truncated, mislabelled or inconsistent file is TR_ERR_INVALID with a
 *    message naming the file and the field, never an out-of-bounds read.
 *  - The documents are split into train/validation/test by the weights of `data.split`
 *    ("969,30,1"), in document order. A split's token stream is its documents concatenated;
 *    sample j of a split is tokens [j*S, j*S + S + 1) of that stream (S = seq_length).
 *  - Samples are addressed by GLOBAL SAMPLE INDEX g (0, 1, 2, ... over the whole run): epoch
 *    e = g / n, position p = g % n, sample = perm_e[p], where perm_e is a Fisher–Yates
 *    shuffle of 0..n-1 seeded by (seed, split, e). Any layout that asks for the same g gets
 *    the same tokens.
 *  - The byte-level tokenizer: token = byte value (vocab 256), end of document = 0
 *    (TR_EOD_TOKEN); NUL bytes in input text are dropped. */
#ifndef TR_DATA_H
#define TR_DATA_H

#include <stddef.h>
#include <stdint.h>

#define TR_EOD_TOKEN 0
#define TR_BYTE_VOCAB 256

enum { TR_SPLIT_TRAIN = 0, TR_SPLIT_VALID = 1, TR_SPLIT_TEST = 2 };

typedef struct tr_data tr_data;

/* Open `path` (a Megatron prefix, or an llm.c shard file) in `format` ("auto", "megatron",
 * "llmc"); `split` is "a,b,c"; samples are seq_length+1 tokens. Every token must be
 * < vocab_size, checked at open. */
int tr_data_open(const char *path, const char *format, const char *split, int seq_length,
                 int vocab_size, uint64_t seed, tr_data **out);
void tr_data_close(tr_data *d);
/* Number of distinct samples in a split (0 if the split is empty). */
uint64_t tr_data_num_samples(const tr_data *d, int split);
/* Tokens of global sample g of `split` into tokens[0 .. seq_length] (seq_length + 1 values).
 * TR_ERR_INVALID if the split has no samples. */
int tr_data_sample(tr_data *d, int split, uint64_t g, int32_t *tokens);
uint64_t tr_data_num_documents(const tr_data *d);
uint64_t tr_data_num_tokens(const tr_data *d);

/* `trident preprocess`: text files -> PREFIX.bin + PREFIX.idx (dtype uint16). Documents are
 * separated by blank lines (split_on_blank_lines) or are whole files; each gets an EOD
 * token. Writes atomically (temporary files renamed at the end). */
int tr_preprocess_text(const char *const *inputs, int n_inputs, const char *output_prefix,
                       int split_on_blank_lines, uint64_t *n_documents, uint64_t *n_tokens);

/* Writers, for tests and tools: an indexed dataset of the given documents, and an llm.c
 * shard of the given tokens. */
int tr_indexed_write(const char *prefix, const uint16_t *tokens, const uint64_t *doc_lengths,
                     uint64_t n_docs);
int tr_llmc_shard_write(const char *path, const uint16_t *tokens, uint64_t n_tokens);

#endif
