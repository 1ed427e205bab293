/* data/ — token datasets and global-index sampling.
 *
 * Contract:
 *  - Formats: Megatron's indexed dataset (PREFIX.bin + PREFIX.idx, "MMIDIDX" v1, integer
 *    token dtypes uint8/int8/int16/uint16/int32/int64; float dtypes are rejected) read
 *    through mmap, and llm.c token shards (1024-byte header, magic 20240520, version 1,
 *    uint16 tokens). Every header field, count, size and pointer is checked against the file
 *    sizes before any token is read, and every token against vocab_size at open: a
 *    truncated, mislabelled or inconsistent file is TR_ERR_INVALID with a message naming the
 *    file, the field and the found vs expected value, never an out-of-bounds read.
 *  - A Megatron document is doc_idx's range of sequences; its tokens are those sequences'
 *    tokens (already ending with the EOD token when preprocess wrote them). An llm.c shard
 *    has no document boundaries: it is ONE token stream (one document).
 *  - The documents are split into train/validation/test by the weights of `data.split`
 *    ("969,30,1": exactly three non-negative numbers, not all zero; anything else is
 *    TR_ERR_CONFIG), in document order, by document count: boundary k = round(n * cumulative
 *    weight share), and a split with a non-zero weight gets at least one document when
 *    there are at least as many documents as non-zero weights. An llm.c shard is cut the
 *    same way by token count. A split's token stream is its documents concatenated; the
 *    split has (tokens - 1) / S samples and sample j is tokens [j*S, j*S + S + 1) of that
 *    stream (S = seq_length).
 *  - Samples are addressed by GLOBAL SAMPLE INDEX g (0, 1, 2, ... over the whole run): epoch
 *    e = g / n, position p = g % n, sample = perm_e[p], where perm_e is a Fisher–Yates
 *    shuffle of 0..n-1 driven by tr_rand_uniform(seed, 4*e + split, i). Any layout that asks
 *    for the same g gets the same tokens. A tr_data caches one epoch's permutation per split,
 *    so one handle must not be used by two threads at once.
 *  - The byte-level tokenizer: token = byte value (vocab 256), end of document = 0
 *    (TR_EOD_TOKEN); NUL bytes in input text are dropped. */
#ifndef TR_DATA_H
#define TR_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "tokenizer/tokenizer.h"
#include "yaml/config.h"

#define TR_EOD_TOKEN 0
#define TR_BYTE_VOCAB 256

enum { TR_SPLIT_TRAIN = 0, TR_SPLIT_VALID = 1, TR_SPLIT_TEST = 2 };

typedef struct tr_data tr_data;

/* Open `path` (a Megatron prefix, or an llm.c shard file) in `format` ("auto", "megatron",
 * "llmc"); `split` is "a,b,c"; samples are seq_length+1 tokens. Every token must be
 * < vocab_size, checked at open. "auto" takes PATH as a Megatron prefix when PATH.idx exists
 * (PATH may also end in .idx/.bin), else as an llm.c shard when the file PATH exists. A path
 * naming no dataset, a bad split string or format is TR_ERR_CONFIG; bad file contents are
 * TR_ERR_INVALID; OS failures TR_ERR_IO. */
TR_MUST_CHECK int tr_data_open(const char *path, const char *format, const char *split, int seq_length,
                 int vocab_size, uint64_t seed, tr_data **out);
void tr_data_close(tr_data *d);
/* Blended datasets (Megatron's data_path lists). A blend is sources with weights (NULL: by
 * the sources' sample counts in the split; weights are normalized). data_path's sources are
 * each cut by `split`; split_paths[k] (train/valid/test_data_path) are used whole for split k.
 * Sources without samples in a split leave that split's blend (a weighted source without
 * training samples is TR_ERR_CONFIG).
 * Sampling: global sample g of a split lies in global batch b = g / global_batch at position
 * q = g % global_batch. Batch b gives source d floor(w_d * GB) samples, plus one for the
 * GB - sum(floor) sources of largest deficit (b + 1) * frac_d - extras_d so far (ties: lower
 * index), so every batch holds within one sample of w_d * GB of each source and the totals
 * follow the weights. Inside the batch the sources interleave (position q takes the source
 * furthest behind its share). Source d's k-th sample overall is its own shuffled sample k
 * (epochs wrap, each source shuffled on its own stream). A function of (g, weights, GB,
 * seed) only: every layout reads the same samples. One source: g is the source's g. */
typedef struct {
    const char *const *paths;
    const double *weights; /* NULL: by sample counts */
    int n;                 /* 0: unused */
} tr_data_blend;
typedef struct {
    tr_data_blend data_path;      /* cut by split */
    tr_data_blend split_paths[3]; /* or: each split's own list, used whole */
    const char *format, *split;
    int seq_length, vocab_size, global_batch;
    uint64_t seed;
} tr_data_spec;
TR_MUST_CHECK int tr_data_open_spec(const tr_data_spec *spec, tr_data **out);
/* The run's dataset from the config's data section (lists parsed by tr_config_blend; the
 * tokenizer, when data.tokenizer.type names one, opened and its vocabulary checked against
 * model.vocab_size: TR_ERR_CONFIG naming the keys when its ids do not fit). Messages start
 * with the data key's FILE:LINE:COL. */
TR_MUST_CHECK int tr_data_open_config(const tr_config *cfg, tr_data **out);
/* Supervised fine-tuning (data.dataset_type sft): PREFIX.bin/.idx and PREFIX_loss_mask.bin/
 * .idx as tr_preprocess writes them (same documents and sizes, else TR_ERR_INVALID naming
 * both). Examples (documents) are cut by `split` like documents; a split's examples, in a
 * fixed seeded order, are packed first-fit into samples of seq_length + 1 tokens (pack 0: one
 * example per sample; an example longer is cut to its first seq_length + 1 tokens), and the
 * samples are shuffled per epoch like the GPT dataset's: global sample g reads the same
 * packed sample in every layout (data/sft.c says exactly how). tr_data_sample gives its
 * tokens; tr_data_sample_sft also, per input position p < seq_length: weights[p] the loss
 * weight of target token p+1 (the mask value when it is the same example's, else 0;
 * padding 0), segments[p] the example's index in the sample (attention stays inside it),
 * positions[p] the offset inside its example (position ids restart per example); any of
 * them may be NULL. tr_data_sample_source / _index / _locate are TR_ERR_INVALID for it. */
TR_MUST_CHECK int tr_data_open_sft(const char *prefix, const char *split, int seq_length,
                                   int vocab_size, uint64_t seed, int pack, tr_data **out);
int tr_data_is_sft(const tr_data *d);
/* What packing made of a split: its examples, samples, examples cut to seq_length + 1, and
 * the tokens the samples hold (of samples x (seq_length + 1) positions). Zero if not SFT. */
typedef struct {
    uint64_t examples, samples, cut, tokens;
} tr_sft_info;
void tr_data_sft_info(const tr_data *d, int split, tr_sft_info *out);
TR_MUST_CHECK int tr_data_sample_sft(tr_data *d, int split, uint64_t g, int32_t *tokens,
                                     float *weights, int32_t *segments, int32_t *positions);
/* What messages call the dataset: its path, or "a blend of N datasets (PATH, ...)". */
const char *tr_data_name(const tr_data *d);
/* The source and the source's own global sample that global sample g of a split reads. */
TR_MUST_CHECK int tr_data_sample_source(tr_data *d, int split, uint64_t g, int *source,
                                        uint64_t *source_sample);

/* Number of distinct samples in a split (0 if the split is empty). */
uint64_t tr_data_num_samples(const tr_data *d, int split);
/* Tokens of global sample g of `split` into tokens[0 .. seq_length] (seq_length + 1 values).
 * TR_ERR_INVALID if the split has no samples. */
TR_MUST_CHECK int tr_data_sample(tr_data *d, int split, uint64_t g, int32_t *tokens);
uint64_t tr_data_num_documents(const tr_data *d);
uint64_t tr_data_num_tokens(const tr_data *d);
/* Where a split lies in the dataset: documents [first_doc, first_doc + n_docs) and tokens
 * [first_token, first_token + n_tokens) (any pointer may be NULL). */
void tr_data_split_info(const tr_data *d, int split, uint64_t *first_doc, uint64_t *n_docs,
                        uint64_t *first_token, uint64_t *n_tokens);
/* The sample j (0 <= j < num_samples) that global sample g of `split` reads: perm_e[g % n]. */
TR_MUST_CHECK int tr_data_sample_index(tr_data *d, int split, uint64_t g, uint64_t *j);
/* The document holding token `offset` of a split's stream and the offset inside it
 * (O(log documents)). */
TR_MUST_CHECK int tr_data_locate(const tr_data *d, int split, uint64_t offset, uint64_t *doc,
                   uint64_t *offset_in_doc);

/* `trident preprocess`: text files -> PREFIX.bin + PREFIX.idx (dtype uint16, one sequence per
 * document). Documents are separated by blank lines (split_on_blank_lines) or are whole
 * files; each gets an EOD token. A separator line is one whose content (line ending and NUL
 * bytes aside) is empty, only spaces/tabs, or exactly "%" (fortune files); separators belong
 * to no document and never make empty ones; a file's end ends its document; a document
 * keeps its lines' bytes exactly, newlines included. Writes atomically (PREFIX.bin.tmp and
 * PREFIX.idx.tmp renamed at the end). A missing or unreadable input is TR_ERR_IO. */
TR_MUST_CHECK int tr_preprocess_text(const char *const *inputs, int n_inputs, const char *output_prefix,
                       int split_on_blank_lines, uint64_t *n_documents, uint64_t *n_tokens);

/* `trident preprocess` with a tokenizer, Megatron's tools/preprocess_data.py:
 *  - JSON Lines (n_json_keys > 0): each line one JSON object; for each key its value is a
 *    string (one sentence) or a list of strings (sentences); each sentence's ids are one
 *    sequence (sentences without ids none), the EOD id closes the document's last sequence
 *    when append_eod and the document has ids, and the document is written even with none.
 *    Key K goes to PREFIX_K_document.bin/.idx. A line that is not JSON, not an object, lacks
 *    a key or holds another type is TR_ERR_INVALID "FILE:LINE: ..." unless skip_bad_lines
 *    (then skipped whole and counted); lines of only whitespace are skipped and counted.
 *  - Text (n_json_keys == 0): documents as tr_preprocess_text cuts them, each tokenized whole,
 *    the EOD id always appended; a document without ids is not written. Output PREFIX.
 *  - Token dtype by vocabulary size as Megatron's DType.optimal_dtype: uint16 below 65500,
 *    else int32. The tokenizer's EOD must exist where one is appended (TR_ERR_CONFIG).
 *  - workers threads encode batches of lines; they are written in input order, so the files
 *    are byte-identical for any number of workers.
 *  - progress_s > 0: a progress line on stderr at most that often (documents, MB/s, tokens/s).
 *  - Inputs are told by their first bytes (data/prep_input.h), here and in tr_preprocess_text:
 *    gzip and zstd files are read decompressed (a truncated or corrupt stream is
 *    TR_ERR_INVALID naming the file and the byte); a Parquet file (JSON keys only) is read
 *    row by row, each row the JSON line of its key columns (a null is JSON's null), so the
 *    output is that of the same documents as JSON Lines ("FILE:ROW: ..." for a bad row). */
/*  - Supervised fine-tuning (sft != TR_SFT_NONE, JSON Lines): each line one example, written
 *    as ONE document of one sequence to PREFIX.bin/.idx (ids) and the same document's loss
 *    mask to PREFIX_loss_mask.bin/.idx (uint8, one value per id: 1 = the token is learned,
 *    0 = it is context), both Megatron indexed datasets with the same sizes. TR_SFT_PAIR:
 *    json_keys {PROMPT, RESPONSE}, strings: ids(prompt) [0] ids(response) [1] EOD [1].
 *    TR_SFT_CHAT: json_keys {MESSAGES}, a non-empty list of {"role": system|user|assistant,
 *    "content": string}, in ChatML's text template: per message "<|im_start|>ROLE\n" [0]
 *    then "CONTENT<|im_end|>\n" [1 for the assistant, 0 otherwise], then EOD [1 when the
 *    last message is the assistant's]. Each piece is tokenized alone. Bad lines (not JSON,
 *    invalid UTF-8, a missing key, a wrong type, an unknown role, an empty response or
 *    assistant content, no assistant message) are TR_ERR_INVALID "FILE:LINE: ..." as above.
 *    The tokenizer must have an EOD (TR_ERR_CONFIG). append_eod is ignored (always).
 *    tr_preprocess_chat: tokenizer_model is the HFTokenizer's tokenizer.json (or NULL) and
 *    template_name other than "chatml" (data/chat_template.h: chatml-hf, llama2, llama3,
 *    mistral, mistral-v0.1, qwen2, qwen2.5, auto from the tokenizer_config.json beside
 *    tokenizer_model): the conversation rendered as transformers' apply_chat_template renders
 *    it with the family's official template, tokenized whole without the tokenizer's own
 *    template, no EOD: the ids of apply_chat_template(messages, tokenize=True); mask 1 on
 *    the tokens of each assistant reply and its end marker (an empty reply is taken: its end
 *    marker is learned). A conversation the template refuses (roles that do not alternate,
 *    ...) is a bad line; an unknown name or template is TR_ERR_CONFIG. */
enum { TR_SFT_NONE = 0, TR_SFT_PAIR = 1, TR_SFT_CHAT = 2 };
typedef struct {
    const char *const *inputs;
    int n_inputs;
    const char *output_prefix;
    const char *const *json_keys;
    int n_json_keys;
    int split_on_blank_lines; /* text */
    const tr_tokenizer *tokenizer;
    int append_eod;           /* JSON Lines (text: always) */
    int workers;              /* >= 1 */
    int skip_bad_lines;
    double progress_s;
    int sft;                  /* TR_SFT_*: json_keys {PROMPT, RESPONSE} or {MESSAGES} */
} tr_preprocess_options;
typedef struct {
    uint64_t documents, tokens; /* per output (the same for every key); tokens of all keys */
    uint64_t lines, bad_lines, blank_lines, bytes;
    int dtype_code;            /* Megatron's: 8 uint16, 4 int32 */
} tr_preprocess_stats;
TR_MUST_CHECK int tr_preprocess(const tr_preprocess_options *o, tr_preprocess_stats *stats);
/* tr_preprocess with chat lists written by the template template_name (NULL: "chatml"). */
TR_MUST_CHECK int tr_preprocess_chat(const tr_preprocess_options *o, const char *template_name,
                                     const char *tokenizer_model, tr_preprocess_stats *stats);

/* Writers, for tests and tools: an indexed dataset of the given documents, and an llm.c
 * shard of the given tokens. */
TR_MUST_CHECK int tr_indexed_write(const char *prefix, const uint16_t *tokens, const uint64_t *doc_lengths,
                     uint64_t n_docs);
TR_MUST_CHECK int tr_llmc_shard_write(const char *path, const uint16_t *tokens, uint64_t n_tokens);

/* Context parallelism's split of a sample (load-balanced for the causal mask): the T tokens
 * are 2*CP chunks of T / (2*CP); CP rank r holds chunks r and 2*CP-1-r, in that order, as its
 * T / CP local tokens. tr_cp_chunk: the global chunk index of local half h (0 or 1);
 * tr_cp_position: the global position of local token i; tr_cp_keep_chunks: rows (B, T) of
 * int32 compacted in place to the rank's (B, T / CP); tr_cp_keep: the same for elements of
 * `size` bytes. T divisible by 2*CP. */
static inline int tr_cp_chunk(int cp, int rank, int half)
{
    return half ? 2 * cp - 1 - rank : rank;
}
static inline int tr_cp_position(int T, int cp, int rank, int i)
{
    int c = T / (2 * cp);
    return tr_cp_chunk(cp, rank, i / c) * c + i % c;
}
void tr_cp_keep_chunks(int32_t *rows, int B, int T, int cp, int rank);
void tr_cp_keep(void *rows, size_t size, int B, int T, int cp, int rank);
/* Packed sequences at CP: starts (B, T / CP) = the global position where each of the rank's
 * tokens' document begins, its global position minus its position id; ids must restart at 0
 * where the segment id changes inside a chunk and count up by 1 inside a segment. Returns -1,
 * or the index of the first token breaking that (starts filled before it). */
int tr_cp_doc_starts(const int32_t *segments, const int32_t *positions, int B, int T, int cp,
                     int rank, int32_t *starts);

#endif
