/* Fuzz targets tokhf, tokgpt2, tokspm and tiktoken (tokenizer/): built four times,
 * FUZZ_TOK_TIKTOKEN selecting a tiktoken rank file "\n@@@\n" TEXT (Llama3Tokenizer for an input
 * of odd length, else TikTokenizer with pattern v1 or v2 and 3 to 1000 special tokens by the
 * length), FUZZ_TOK_SPM selecting
 * tokenizer.model "\n@@@\n" TEXT (sentencepiece's protobuf: Llama2Tokenizer for an input of
 * odd length, else GPTSentencePieceTokenizer), FUZZ_TOK_GPT2 selecting
 * vocab.json "\n@@@\n" merges.txt "\n@@@\n" TEXT (GPT2BPETokenizer; with four parts, vocab.json,
 * merges.txt, a tokenizer_config.json (its add_bos_token / bos_token) and TEXT), otherwise
 * tokenizer.json "\n@@@\n" tokenizer_config.json "\n@@@\n" TEXT (HFTokenizer). After a
 * successful open: a fixed text and TEXT encode to ids in [0, vocab), which decode. */
#include <stdlib.h>

#include "tokenizer/tokenizer.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *part[4];
    size_t len[4];
    tr_tokenizer_files tf = {0};
    char a[1024], b[1024];
#if defined(FUZZ_TOK_SPM) || defined(FUZZ_TOK_TIKTOKEN) /* a tokenizer.model, then the text */
    if (fz_split(data, size, part, len, 2) < 2)
        part[1] = (const uint8_t *)"", len[1] = 0;
    part[2] = part[1], len[2] = len[1];
    fz_write("tokenizer.model", part[0], len[0]);
    fz_path(a, sizeof a, "tokenizer.model");
    (void)b;
    tf.tokenizer_model = a;
#if defined(FUZZ_TOK_SPM)
    tf.type = size & 1 ? "Llama2Tokenizer" : "GPTSentencePieceTokenizer";
#else
    tf.type = size & 1 ? "Llama3Tokenizer" : "TikTokenizer";
    if (!(size & 1)) {
        tf.tiktoken_pattern = size & 2 ? "v1" : "v2";
        tf.tiktoken_num_special_tokens = size & 4 ? 3 + (int)(size % 7) : 0;
    }
#endif
#elif defined(FUZZ_TOK_GPT2)
    char c[1024];
    if (fz_split(data, size, part, len, 4) == 4) { /* the config's part, then the text */
        fz_write("tokenizer_config.json", part[2], len[2]);
        fz_path(c, sizeof c, "tokenizer_config.json");
        tf.config_file = c;
        part[2] = part[3], len[2] = len[3];
    }
    fz_write("vocab.json", part[0], len[0]);
    fz_write("merges.txt", part[1], len[1]);
    fz_path(a, sizeof a, "vocab.json");
    fz_path(b, sizeof b, "merges.txt");
    tf.type = "GPT2BPETokenizer";
    tf.vocab_file = a;
    tf.merge_file = b;
#else
    fz_split(data, size, part, len, 3);
    fz_write("tokenizer.json", part[0], len[0]);
    fz_write("tokenizer_config.json", part[1], len[1]);
    fz_path(a, sizeof a, "tokenizer.json");
    (void)b;
    tf.type = "HFTokenizer";
    tf.tokenizer_model = a;
#endif
    tr_tokenizer *t;
    if (tr_tokenizer_open(&tf, &t)) return 0;
    tr_encoder *e;
    if (!tr_encoder_create(t, &e)) {
        static const char text[] =
            "Hello world! <|endoftext|> it's  12345 \xc3\xa9t\xc3\xa9 \n\n x";
        int32_t *ids = NULL;
        size_t n = 0, cap = 0;
        if (!tr_encode(e, text, sizeof text - 1, 1, &ids, &n, &cap) &&
            !tr_encode(e, (const char *)part[2], len[2], 0, &ids, &n, &cap)) {
            for (size_t i = 0; i < n; i++)
                if (ids[i] < 0 || ids[i] >= tr_tokenizer_vocab_size(t)) abort();
            char *out;
            size_t out_len;
            if (!tr_decode(t, ids, n, &out, &out_len)) free(out);
        }
        free(ids);
        tr_encoder_free(e);
    }
    tr_tokenizer_free(t);
    return 0;
}
