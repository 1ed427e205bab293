/* tokenizer/ — text <-> token ids: the byte-level tokenizer, byte-level BPE and
 * SentencePiece-style BPE.
 *
 * Contract:
 *  - Types (Megatron's --tokenizer-type names):
 *      "ByteLevel"         token = byte value, vocabulary 256, end of document 0 (trident's own);
 *      "GPT2BPETokenizer"  GPT-2's vocab.json + merges.txt (Megatron's --vocab-file /
 *                          --merge-file): GPT-2's pre-tokenizer regex, no special tokens in
 *                          the text, end of document = the id of <|endoftext|>; with a
 *                          config_file (a tokenizer_config.json, as transformers'
 *                          GPT2Tokenizer reads it: OPT's folders) whose add_bos_token is true,
 *                          add_special's template is its bos_token's id before the text
 *                          (bos_token a string or an AddedToken {"content": ...}, absent:
 *                          <|endoftext|>; add_bos_token absent or false: no template);
 *                          add_bos_token not a boolean, bos_token null or of another shape or
 *                          not in vocab.json, add_prefix_space true (not reproduced) or a file
 *                          that is not a JSON object: TR_ERR_INVALID naming the file and key;
 *      "HFTokenizer"       a Hugging Face tokenizer.json (--tokenizer-model) whose model is
 *                          BPE over bytes (GPT-2, Bloom, Llama-3, Qwen2, Falcon, GPT-NeoX /
 *                          Pythia style): an NFC normalizer (alone or in a Sequence;
 *                          tokenizers' Unicode 9.0 NFC, see tokenizer/normalize.c) or none, its
 *                          pre-tokenizers (ByteLevel, Split with a Regex or String pattern,
 *                          Punctuation, Digits, Sequence of them; one ByteLevel, the steps
 *                          after it seeing its byte alphabet as in tokenizers; Punctuation and
 *                          Digits split on tokenizers' own character classes, which are
 *                          neither PCRE2's \p{P} / \p{N} nor one Unicode version's, see
 *                          tokenizer/pretok_classes.h), added tokens matched in the text
 *                          before pre-tokenization
 *                          (leftmost-longest; as tokenizers does, those with "normalized":
 *                          false in the raw text, then the others in each normalized piece
 *                          between), the single template of a TemplateProcessing
 *                          post-processor (Llama-3's <|begin_of_text|>), ignore_merges; end of
 *                          document = eos_token of a tokenizer_config.json beside the file (a
 *                          string or an AddedToken {"content": ...}; a file there that is not
 *                          JSON, repeats a key, or whose eos_token has another shape or names
 *                          no token is TR_ERR_INVALID naming it), else (no such file, or no
 *                          eos_token in it, or null) the first added token named <|endoftext|>,
 *                          <|end_of_text|>, </s> or <eos>.
 *                          Or a SentencePiece-style BPE over characters (Llama-2, Mistral:
 *                          what transformers' LlamaConverter writes): U+2581 for spaces from
 *                          the normalizer Prepend "▁" + Replace " " -> "▁" (each segment
 *                          between added tokens prepended) or a Metaspace pre-tokenizer
 *                          (prepend_scheme always / first / never, split); a character without
 *                          a token becomes its bytes' <0xHH> tokens (byte_fallback) or unk_token
 *                          (fuse_unk); NFC allowed among the normalizers; decoding as its
 *                          decoder Replace "▁" -> " ", ByteFallback
 *                          (a run of byte tokens that is not UTF-8: one U+FFFD a token), Fuse,
 *                          Strip {start N} does, which is tokenizers' decode(ids,
 *                          skip_special_tokens=False).
 *      "Llama2Tokenizer", "GPTSentencePieceTokenizer"
 *                          a sentencepiece tokenizer.model (--tokenizer-model; Meta's Llama-2,
 *                          Mistral): its ModelProto read by hand (tokenizer/spm_proto.c), a BPE
 *                          model with the identity normalizer (add_dummy_prefix and
 *                          remove_extra_whitespaces honoured), encoded and decoded as the
 *                          sentencepiece library does (tokenizer/load_spm.c: merges by score,
 *                          leftmost among equals; user-defined pieces first; byte fallback or
 *                          one unk a run; invalid UTF-8 input one U+FFFD a byte); end of
 *                          document = its eos_piece's id (-1 when that is not a CONTROL
 *                          piece); Llama2Tokenizer's add_special puts bos_piece's id first
 *                          (Megatron's _Llama2Tokenizer.tokenize(bos=True)),
 *                          GPTSentencePieceTokenizer's nothing. Refused (TR_ERR_INVALID naming
 *                          the file and the field): malformed protobuf, UNIGRAM / WORD / CHAR,
 *                          another normalizer (nmt_nfkc, ...), files whose ids sentencepiece
 *                          would make otherwise than these merges (see load_spm.c).
 *      "TikTokenizer"      Megatron's CustomTikTokenizer (--tokenizer-model, --tiktoken-pattern
 *                          v1|v2, --tiktoken-num-special-tokens S (default 1000),
 *                          --tiktoken-special-tokens, default <unk> <s> </s>): a tiktoken rank
 *                          file (tokenizer/load_tiktoken.c: tiktoken's "base64 rank" lines or
 *                          Megatron's JSON list of {rank, token_bytes, token_str}, the first 256
 *                          the bytes in order); ids 0..S-1 the special tokens (the list, which
 *                          must hold <unk> <s> </s> once each, then <SPECIAL_i>), the file's
 *                          rank table after them: its first V - S ranks with --vocab-size V
 *                          (Megatron's cut; fewer is refused), else all N (Megatron with
 *                          --vocab-size S + N); Megatron's v1 / v2 regex; special tokens in the
 *                          text are text (Megatron's tokenize is tiktoken's encode_ordinary);
 *                          add_special adds nothing; end of document </s>.
 *      "Llama3Tokenizer"   Meta's Llama 3 tokenizer.model (--tokenizer-model; llama-models'
 *                          llama3/tokenizer.py): the file's N ranks as ids, then Meta's 256
 *                          special tokens (<|begin_of_text|> N, <|end_of_text|> N+1, ...,
 *                          <|eot_id|> N+9, <|python_tag|> N+10, <|image|> N+11, then
 *                          <|reserved_special_token_2|> ...: the Llama 3.1-3.3 names; Llama
 *                          3.0's when a params.json beside the file (Meta's download, Hugging
 *                          Face's original/ folder) has no use_scaled_rope: N+4, N+5, N+8
 *                          <|reserved_special_token_2..4|>, N+10 on <|reserved_special_token_5|>
 *                          ...; a params.json there that is not a JSON object or whose
 *                          use_scaled_rope is not a boolean is TR_ERR_INVALID), Llama-3's
 *                          regex; the special tokens are matched in the text (tiktoken's
 *                          encode(allowed_special="all"), what Meta's Hugging Face tokenizer.json
 *                          does); the text cut first as Meta's encode cuts it (400,000
 *                          characters, then runs of over 25,000 str.isspace or other characters);
 *                          add_special puts <|begin_of_text|> first; end of document
 *                          <|end_of_text|>.
 *                          Both: merges as tiktoken's _byte_pair_merge (the lowest rank of a
 *                          concatenation, leftmost; a piece that is a token is that token);
 *                          decoding gives the tokens' bytes (a special token its text).
 *                          Refused (TR_ERR_INVALID naming file:line, a JSON file's element):
 *                          an empty file, bad base64, a rank that is not a decimal number or is
 *                          2^24 or more, a rank given twice, ranks that are not 0..N-1, a token
 *                          given twice, a line over 4096 bytes, a byte without its token; a bad
 *                          pattern name or special token list is TR_ERR_CONFIG.
 *    Anything else in a file (another normalizer such as NFD or NFKC, a WordPiece or Unigram
 *    model, dropout, a non-empty continuing_subword_prefix, ...)
 *    is refused with TR_ERR_INVALID naming the file and the field: a tokenizer that cannot be
 *    reproduced exactly is never used approximately.
 *  - Pre-tokenizer regexes run in PCRE2 (UTF, Unicode properties, JIT) with \s and \S
 *    replaced by the Unicode White_Space set, which is what Oniguruma (tokenizers) and Rust's
 *    regex (tiktoken) mean by them; a nested class [a[bc]] is flattened to a union, as
 *    Oniguruma reads it (Bloom's pattern).
 *  - Merges: the lowest-ranked adjacent pair first, the leftmost among equals, over the
 *    pre-token's bytes (SentencePiece-style: its characters); results are cached per encoder.
 *  - Input bytes that are not valid UTF-8 are replaced by U+FFFD, one per maximal invalid
 *    subpart (Python's bytes.decode("utf-8", "replace") and Rust's from_utf8_lossy), before
 *    anything else (the normalizer included); the bytes tokenizer takes bytes as they are.
 *  - Ids are below 2^24 (16,777,216; the largest real vocabularies have ~256k): the id table
 *    is sized by the largest id, so a larger one (a vocabulary entry or an added token) is
 *    refused, naming the file, the token and the id, before anything is allocated for it.
 *  - Every malformed file (not JSON, wrong shapes, a merge whose parts or result are not in
 *    the vocabulary, duplicate or negative ids, an id of 2^24 or more, a regex PCRE2 rejects)
 *    is TR_ERR_INVALID with a message naming the file and what is wrong; a missing file is
 *    TR_ERR_IO. Never a crash.
 *  - A tr_tokenizer is read-only after opening and may be shared by threads; each thread
 *    encodes through its own tr_encoder (regex match data, merge cache, scratch). */
#ifndef TR_TOKENIZER_H
#define TR_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"

typedef struct tr_tokenizer tr_tokenizer;
typedef struct tr_encoder tr_encoder;

/* Which files a tokenizer is made from (unused ones NULL). */
typedef struct {
    const char *type;            /* "ByteLevel" (also NULL or ""), "GPT2BPETokenizer", "HFTokenizer",
                                  * "Llama2Tokenizer", "GPTSentencePieceTokenizer",
                                  * "TikTokenizer", "Llama3Tokenizer" */
    const char *vocab_file;      /* GPT2BPETokenizer: vocab.json (GPT-2's encoder.json) */
    const char *merge_file;      /* GPT2BPETokenizer: merges.txt (GPT-2's vocab.bpe) */
    const char *tokenizer_model; /* HFTokenizer: tokenizer.json; the others: tokenizer.model */
    const char *config_file;     /* GPT2BPETokenizer, optional: tokenizer_config.json (BOS) */
    /* TikTokenizer only (Megatron's flags): "v1" | "v2"; S (0: 1000); the list (NULL: default);
     * the vocabulary size */
    const char *tiktoken_pattern;
    int tiktoken_num_special_tokens;
    const char *const *tiktoken_special_tokens;
    int n_tiktoken_special_tokens;
    int tiktoken_vocab_size; /* Megatron's --vocab-size V: the first V - S ranks; 0: them all */
} tr_tokenizer_files;

/* Open a tokenizer. A missing file for the type, or a file given that the type does not use
 * (config_file: any type but GPT2BPETokenizer), is TR_ERR_CONFIG naming the flag; see above
 * for the others. */
TR_MUST_CHECK int tr_tokenizer_open(const tr_tokenizer_files *files, tr_tokenizer **out);
void tr_tokenizer_free(tr_tokenizer *t);

/* The type that reads a tokenizer.model, from its first bytes: "Llama3Tokenizer" for tiktoken's
 * "base64 rank" lines (Meta's Llama 3 download), else "Llama2Tokenizer" (sentencepiece's
 * protobuf); NULL when the file cannot be read. */
const char *tr_tokenizer_model_type(const char *path);

/* The tokenizer_config.json beside a tokenizer.json (in its folder), where HFTokenizer reads
 * the end of document: a malloc'ed path, or NULL when out of memory. */
char *tr_tokenizer_config_path(const char *tokenizer_json);

/* A tokenizer_config.json as every reader takes it (the end of document here, GPT2BPETokenizer's
 * BOS, the chat templates): *root a JSON object (duplicate keys refused) whose numbers load as
 * doubles, since transformers writes model_max_length int(1e30) where the model set none (no
 * integer is read from it); else TR_ERR_IO or TR_ERR_INVALID naming path, *root NULL. */
struct json_t;
TR_MUST_CHECK int tr_tokenizer_config_load(const char *path, struct json_t **root);

/* Ids are in [0, vocab_size): the largest id + 1 (added tokens included). */
int tr_tokenizer_vocab_size(const tr_tokenizer *t);
/* The end-of-document id, or -1 when the tokenizer has none. */
int32_t tr_tokenizer_eod(const tr_tokenizer *t);
/* The type's name, as tr_tokenizer_files.type gives it. */
const char *tr_tokenizer_type(const tr_tokenizer *t);

/* Per-thread encoding state. */
TR_MUST_CHECK int tr_encoder_create(const tr_tokenizer *t, tr_encoder **out);
void tr_encoder_free(tr_encoder *e);

/* Token ids of text[0 .. len) (any bytes; NUL bytes are text) appended to *ids, which holds
 * *n ids in room for *cap and is grown with realloc. add_special: apply the post-processor's
 * template (HFTokenizer; what tokenizers' encode(add_special_tokens=True) and Megatron's
 * HFTokenizer do; GPT2BPETokenizer: config_file's BOS, GPT2Tokenizer's add_bos_token; none
 * for ByteLevel). Fails only for memory. */
TR_MUST_CHECK int tr_encode(tr_encoder *e, const char *text, size_t len, int add_special,
                            int32_t **ids, size_t *n, size_t *cap);

/* The bytes of token `id` (added tokens: their text; SentencePiece-style: U+2581 as ' ', a
 * byte-fallback token its byte), *len of them; NULL for an id outside the vocabulary or a hole
 * in it. Decoding = concatenating these (SentencePiece-style: and the decoder's U+FFFD and
 * Strip, see above). */
const char *tr_token_bytes(const tr_tokenizer *t, int32_t id, size_t *len);
/* The text of ids as a NUL-terminated malloc'ed string of *len bytes (len may be NULL);
 * ids outside the vocabulary are TR_ERR_INVALID. */
TR_MUST_CHECK int tr_decode(const tr_tokenizer *t, const int32_t *ids, size_t n, char **text,
                            size_t *len);

#endif
