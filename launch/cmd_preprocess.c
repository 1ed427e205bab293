/* `trident preprocess --input FILE... --output-prefix PREFIX [options]`: JSON Lines (plain,
 * gzip or zstd), Parquet or text files -> Megatron indexed datasets, with Megatron's tools/preprocess_data.py flags
 * (--json-keys, --tokenizer-type, --vocab-file, --merge-file, --tokenizer-model, --append-eod,
 * --workers). Text files with the byte-level tokenizer take the streaming path of
 * tr_preprocess_text; everything else goes through tr_preprocess. */
#include "launch/commands.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "data/data.h"
#include "launch/args.h"
#include "tokenizer/tokenizer.h"

static void preprocess_usage(FILE *f)
{
    fprintf(f,
            "usage: trident preprocess --input FILE [FILE...] --output-prefix PREFIX [options]\n"
            "\n"
            "Turn JSON Lines, Parquet or text files into Megatron indexed datasets (.bin +\n"
            ".idx), as Megatron-LM's tools/preprocess_data.py does.\n"
            "\n"
            "input:\n"
            "  --input FILE [FILE...]   files, in order; may be repeated, or --input=FILE.\n"
            "                           gzip (.gz) and zstd (.zst) files are decompressed as they\n"
            "                           are read (told by their first bytes); a Parquet file\n"
            "                           (Hugging Face datasets' data/*.parquet) is read row by row,\n"
            "                           each row as the JSON line of its --json-keys columns\n"
            "                           (flat string columns; a null value is JSON's null)\n"
            "  --json-keys KEY [KEY...] JSON Lines: each line an object whose KEYs hold a string\n"
            "                           or a list of strings (sentences); KEY goes to\n"
            "                           PREFIX_KEY_document.bin/.idx. Parquet: the columns. Default\n"
            "                           when every input ends in .json, .jsonl (either maybe with\n"
            "                           .gz or .zst after it) or .parquet: text\n"
            "  --document-per-file      text files: each file is one document (default: documents\n"
            "                           are separated by blank lines, i.e. empty or whitespace-\n"
            "                           only lines, and by lines that are exactly \"%%\", the\n"
            "                           separator of fortune(6) files); output PREFIX.bin/.idx\n"
            "  --json-keys PROMPT,RESPONSE\n"
            "                           supervised fine-tuning pairs (strings): ids of the prompt\n"
            "                           then the response then EOD, to PREFIX.bin/.idx, and the\n"
            "                           loss mask (0 prompt, 1 response and EOD; uint8) to\n"
            "                           PREFIX_loss_mask.bin/.idx; one document per line\n"
            "  --sft                    with --json-keys MESSAGES: chat examples, a list of\n"
            "                           {\"role\": system|user|assistant, \"content\": string} in\n"
            "                           ChatML's text template (\"<|im_start|>ROLE\\n\" masked, then\n"
            "                           \"CONTENT<|im_end|>\\n\", learned for the assistant), then EOD\n"
            "                           (learned when the assistant speaks last); same outputs.\n"
            "                           An empty response, a missing key, a wrong type or bad\n"
            "                           UTF-8 is an error naming FILE:LINE\n"
            "  --chat-template NAME     with --sft --json-keys MESSAGES: chatml (the default,\n"
            "                           above), or the ids of transformers' apply_chat_template\n"
            "                           (no EOD; the assistant's replies and their end marker\n"
            "                           learned) with the official template of chatml-hf,\n"
            "                           llama2 (Llama-2-chat), llama3 (Llama-3-Instruct),\n"
            "                           mistral (Mistral-7B-Instruct-v0.2, Mixtral),\n"
            "                           mistral-v0.1, qwen2 (Qwen2-Instruct, Qwen1.5-Chat) or\n"
            "                           qwen2.5 (Qwen2.5-Instruct; no tools / tool_calls);\n"
            "                           auto: the one the chat_template of the\n"
            "                           tokenizer_config.json beside --tokenizer-model is\n"
            "                           (another template is an error)\n"
            "  --skip-bad-lines         skip (and count) JSON lines that cannot be read, instead\n"
            "                           of stopping at the first with its FILE:LINE\n"
            "tokenizer:\n"
            "  --tokenizer-type T       ByteLevel (default: token = byte, vocabulary 256, NUL\n"
            "                           bytes dropped, end of document 0), GPT2BPETokenizer,\n"
            "                           HFTokenizer, Llama2Tokenizer,\n"
            "                           GPTSentencePieceTokenizer, TikTokenizer or\n"
            "                           Llama3Tokenizer\n"
            "  --vocab-file FILE        GPT2BPETokenizer: vocab.json (GPT-2's encoder.json)\n"
            "  --merge-file FILE        GPT2BPETokenizer: merges.txt (GPT-2's vocab.bpe)\n"
            "  --tokenizer-model FILE   HFTokenizer: a byte-level BPE tokenizer.json (its\n"
            "                           template is applied, as Megatron's HF tokenizer does);\n"
            "                           Llama2Tokenizer, GPTSentencePieceTokenizer: a\n"
            "                           sentencepiece BPE tokenizer.model (Llama2Tokenizer puts\n"
            "                           its BOS first; end of document: its EOS);\n"
            "                           TikTokenizer: a tiktoken rank file (Megatron's JSON or\n"
            "                           'base64 rank' lines); Llama3Tokenizer: Meta's Llama 3\n"
            "                           tokenizer.model (<|begin_of_text|> first)\n"
            "  --tiktoken-pattern P     TikTokenizer: Megatron's regex v1 or v2 (needed)\n"
            "  --tiktoken-num-special-tokens S\n"
            "                           TikTokenizer: ids 0..S-1 are special (default 1000)\n"
            "  --tiktoken-special-tokens T...\n"
            "                           TikTokenizer: the first special tokens (default <unk>\n"
            "                           <s> </s>; these three must be among them; </s> ends\n"
            "                           documents)\n"
            "  --vocab-size V           TikTokenizer: keep the file's first V - S ranks\n"
            "                           (Megatron's cut; default: all of them)\n"
            "output:\n"
            "  --output-prefix PREFIX   where the files go (written atomically, through .tmp)\n"
            "  --append-eod             JSON Lines: end each document with the tokenizer's end-of-\n"
            "                           document token (text documents always get it)\n"
            "  --workers N              encode on N threads (default 1); the files are the same\n"
            "                           for any N\n"
            "  --log-interval S         a progress line on stderr every S seconds (default 10;\n"
            "                           0: none)\n"
            "  -h, --help               this text\n"
            "\n"
            "Tokens are uint16 when the vocabulary is below 65500, else int32 (Megatron's rule).\n"
            "Prints the number of documents and tokens.\n"
            "Exit status: 0 success, 1 I/O error (e.g. a missing input), 2 bad usage or input.\n");
}

typedef struct {
    const char **inputs, **keys;
    int n_inputs, n_keys, per_file, append_eod, workers, skip_bad, log_interval, sft;
    char *pair; /* --json-keys PROMPT,RESPONSE split in place (a copy) */
    const char *prefix, *chat_template;
    tr_tokenizer_files tok;
    const char **specials; /* --tiktoken-special-tokens */
} pp_options;

static int ends_with(const char *s, const char *suffix)
{
    size_t ls = strlen(s), lx = strlen(suffix);
    return ls >= lx && !strcmp(s + ls - lx, suffix);
}

/* JSON Lines, compressed or not, or Parquet: --json-keys defaults to text. */
static int keyed_input(const char *s)
{
    static const char *const ext[] = {".json", ".jsonl", ".json.gz", ".jsonl.gz", ".json.zst",
                                      ".jsonl.zst", ".parquet"};
    for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++)
        if (ends_with(s, ext[i]))
            return 1;
    return 0;
}

static int parse(arg_parser *a, pp_options *o)
{
    enum { INPUT, OUTPUT_PREFIX, WORKERS, PER_FILE, APPEND_EOD, SPLIT_SENTENCES, JSON_KEYS,
           TOK_TYPE, VOCAB, MERGES, TOK_MODEL, SKIP_BAD, LOG_INTERVAL, SFT, CHAT_TEMPLATE,
           TIK_PATTERN, TIK_NUM, TIK_SPECIALS, TIK_VOCAB };
    static const arg_opt options[] = {
        [INPUT] = {.name = "--input", .kind = ARG_VALUES, .what = "file"},
        [OUTPUT_PREFIX] = {.name = "--output-prefix", .kind = ARG_VALUE},
        [WORKERS] = {.name = "--workers", .kind = ARG_VALUE},
        [PER_FILE] = {.name = "--document-per-file", .kind = ARG_FLAG},
        [APPEND_EOD] = {.name = "--append-eod", .kind = ARG_FLAG},
        [SPLIT_SENTENCES] = {.name = "--split-sentences", .kind = ARG_FLAG},
        [JSON_KEYS] = {.name = "--json-keys", .kind = ARG_VALUES, .what = "key"},
        [TOK_TYPE] = {.name = "--tokenizer-type", .kind = ARG_VALUE},
        [VOCAB] = {.name = "--vocab-file", .kind = ARG_VALUE},
        [MERGES] = {.name = "--merge-file", .kind = ARG_VALUE},
        [TOK_MODEL] = {.name = "--tokenizer-model", .kind = ARG_VALUE},
        [SKIP_BAD] = {.name = "--skip-bad-lines", .kind = ARG_FLAG},
        [LOG_INTERVAL] = {.name = "--log-interval", .kind = ARG_VALUE},
        [SFT] = {.name = "--sft", .kind = ARG_FLAG},
        [CHAT_TEMPLATE] = {.name = "--chat-template", .kind = ARG_VALUE},
        [TIK_PATTERN] = {.name = "--tiktoken-pattern", .kind = ARG_VALUE},
        [TIK_NUM] = {.name = "--tiktoken-num-special-tokens", .kind = ARG_VALUE},
        [TIK_SPECIALS] = {.name = "--tiktoken-special-tokens", .kind = ARG_VALUES, .what = "token"},
        [TIK_VOCAB] = {.name = "--vocab-size", .kind = ARG_VALUE},
        {.name = NULL},
    };
    a->opts = options;
    const char *v;
    int rc = 0, opt;
    while (!rc && (opt = args_next(a, &v)) != ARGS_END) {
        if (opt == ARGS_HELP)
            return -1;
        if (opt == ARGS_ERROR)
            return 2;
        if ((opt == INPUT || opt == JSON_KEYS) && !*v)
            rc = args_error(a, "%s= needs a %s", opt == INPUT ? "--input" : "--json-keys",
                            opt == INPUT ? "file name" : "key");
        else if (opt == INPUT)
            o->inputs[o->n_inputs++] = v;
        else if (opt == JSON_KEYS)
            o->keys[o->n_keys++] = v;
        else if (opt == OUTPUT_PREFIX)
            o->prefix = v;
        else if (opt == WORKERS && !args_parse_int(v, 1, 256, &o->workers))
            rc = args_error(a, "--workers needs a positive integer, got '%s' (at most 256)", v);
        else if (opt == LOG_INTERVAL)
            rc = args_int(a, "--log-interval", v, 0, 86400, &o->log_interval);
        else if (opt == PER_FILE)
            o->per_file = 1;
        else if (opt == APPEND_EOD)
            o->append_eod = 1;
        else if (opt == SKIP_BAD)
            o->skip_bad = 1;
        else if (opt == SFT)
            o->sft = TR_SFT_CHAT;
        else if (opt == CHAT_TEMPLATE)
            o->chat_template = v;
        else if (opt == TOK_TYPE)
            o->tok.type = v;
        else if (opt == VOCAB)
            o->tok.vocab_file = v;
        else if (opt == MERGES)
            o->tok.merge_file = v;
        else if (opt == TOK_MODEL)
            o->tok.tokenizer_model = v;
        else if (opt == TIK_PATTERN)
            o->tok.tiktoken_pattern = v;
        else if (opt == TIK_NUM)
            rc = args_int(a, "--tiktoken-num-special-tokens", v, 3, (1 << 24) - 1,
                          &o->tok.tiktoken_num_special_tokens);
        else if (opt == TIK_VOCAB)
            rc = args_int(a, "--vocab-size", v, 4, 1 << 24, &o->tok.tiktoken_vocab_size);
        else if (opt == TIK_SPECIALS) {
            o->specials[o->tok.n_tiktoken_special_tokens++] = v;
            o->tok.tiktoken_special_tokens = o->specials;
        }
        else if (opt == SPLIT_SENTENCES)
            rc = args_error(a, "--split-sentences is not supported (no sentence splitter: give "
                               "each document's sentences as a JSON list instead)");
        else if (opt == ARGS_POSITIONAL)
            rc = args_error(a, "unexpected argument '%s' (input files go after --input)", v);
    }
    if (!rc && o->n_inputs == 0)
        rc = args_error(a, "no input files (give --input FILE...)");
    if (!rc && (!o->prefix || !o->prefix[0]))
        rc = args_error(a, "%s", o->prefix ? "--output-prefix is empty"
                                           : "missing --output-prefix PREFIX");
    int all_json = o->n_inputs > 0;
    for (int i = 0; i < o->n_inputs; i++)
        all_json &= keyed_input(o->inputs[i]);
    if (!rc && o->sft && o->n_keys == 0)
        rc = args_error(a, "--sft needs --json-keys MESSAGES (or PROMPT,RESPONSE)");
    if (!rc && o->n_keys == 0 && all_json)
        o->keys[o->n_keys++] = "text"; /* Megatron's default */
    if (!rc && o->n_keys == 1 && strchr(o->keys[0], ',')) { /* PROMPT,RESPONSE */
        char *comma = (o->pair = strdup(o->keys[0])) ? strchr(o->pair, ',') : NULL;
        if (!comma)
            return args_error(a, "out of memory");
        *comma = 0;
        o->keys[0] = o->pair;
        o->keys[1] = comma + 1;
        o->n_keys = 2;
        o->sft = TR_SFT_PAIR;
        if (!o->keys[0][0] || !o->keys[1][0] || strchr(o->keys[1], ','))
            rc = args_error(a, "--json-keys PROMPT,RESPONSE needs two non-empty keys, got '%s,%s'",
                            o->keys[0], o->keys[1]);
    } else if (!rc && o->sft && o->n_keys == 2) {
        o->sft = TR_SFT_PAIR; /* --sft --json-keys PROMPT RESPONSE */
    } else if (!rc && o->sft && o->n_keys != 1) {
        rc = args_error(a, "--sft takes --json-keys MESSAGES (a chat list) or PROMPT,RESPONSE");
    }
    if (!rc && o->chat_template && o->sft != TR_SFT_CHAT)
        rc = args_error(a, "--chat-template is for chat lists: --sft --json-keys MESSAGES");
    for (int i = 0; i < o->n_keys && !rc && !o->sft; i++)
        if (strchr(o->keys[i], ','))
            rc = args_error(a, "--json-keys '%s': a PROMPT,RESPONSE pair is one argument alone",
                            o->keys[i]);
    int own_eod = !o->chat_template || !strcmp(o->chat_template, "chatml");
    if (!rc && o->sft && o->append_eod)
        fprintf(stderr, "trident preprocess: note: %s (--append-eod changes nothing)\n",
                o->sft == TR_SFT_PAIR || own_eod ? "fine-tuning examples always end with EOD"
                                                 : "the chat template ends each reply itself");
    if (!rc && o->n_keys && o->per_file)
        rc = args_error(a, "--document-per-file is for text files, not JSON Lines (--json-keys)");
    if (!rc && o->n_keys > 16)
        rc = args_error(a, "at most 16 --json-keys");
    for (int i = 0; i < o->n_keys && !rc; i++)
        for (int j = 0; j < i && !rc; j++)
            if (!strcmp(o->keys[i], o->keys[j]))
                rc = args_error(a, "--json-keys names '%s' twice", o->keys[i]);
    return rc;
}

static int run(const pp_options *o)
{
    tr_tokenizer *t = NULL;
    int st = tr_tokenizer_open(&o->tok, &t);
    double t0 = tr_now();
    if (!st && !o->n_keys && !strcmp(tr_tokenizer_type(t), "ByteLevel")) { /* streaming */
        uint64_t n_docs = 0, n_tokens = 0;
        st = tr_preprocess_text(o->inputs, o->n_inputs, o->prefix, !o->per_file, &n_docs, &n_tokens);
        if (!st) {
            printf("preprocess: %d file%s, %llu documents, %llu tokens -> %s.bin, %s.idx (%.2f s)\n",
                   o->n_inputs, o->n_inputs == 1 ? "" : "s", (unsigned long long)n_docs,
                   (unsigned long long)n_tokens, o->prefix, o->prefix, tr_now() - t0);
            if (n_docs == 0)
                fprintf(stderr, "trident preprocess: warning: the inputs hold no document\n");
        }
    } else if (!st) {
        tr_preprocess_options po = {o->inputs, o->n_inputs, o->prefix, o->keys, o->n_keys,
                                    !o->per_file, t, o->append_eod, o->workers, o->skip_bad,
                                    o->log_interval, o->sft};
        tr_preprocess_stats s;
        st = tr_preprocess_chat(&po, o->chat_template, o->tok.tokenizer_model, &s);
        if (!st) {
            double dt = tr_now() - t0;
            printf("preprocess: %d file%s, %llu documents, %llu tokens (%s, %s, vocabulary %d) ",
                   o->n_inputs, o->n_inputs == 1 ? "" : "s", (unsigned long long)s.documents,
                   (unsigned long long)s.tokens, tr_tokenizer_type(t),
                   s.dtype_code == 8 ? "uint16" : "int32", tr_tokenizer_vocab_size(t));
            if (o->sft)
                printf("-> %s.{bin,idx}, %s_loss_mask.{bin,idx}", o->prefix, o->prefix);
            for (int k = 0; k < (o->n_keys ? o->n_keys : 1) && !o->sft; k++)
                printf(o->n_keys ? "%s%s_%s_document.{bin,idx}" : "%s%s.{bin,idx}", k ? ", " : "-> ",
                       o->prefix, o->n_keys ? o->keys[k] : "");
            printf(" (%.2f s, %.1f MB/s, %.0f tokens/s)\n", dt, s.bytes / 1e6 / (dt > 0 ? dt : 1),
                   s.tokens / (dt > 0 ? dt : 1));
            if (s.bad_lines || s.blank_lines)
                fprintf(stderr, "trident preprocess: %llu bad line%s skipped, %llu blank line%s\n",
                        (unsigned long long)s.bad_lines, s.bad_lines == 1 ? "" : "s",
                        (unsigned long long)s.blank_lines, s.blank_lines == 1 ? "" : "s");
            if (s.documents == 0)
                fprintf(stderr, "trident preprocess: warning: the inputs hold no document\n");
        }
    }
    tr_tokenizer_free(t);
    if (st) {
        fprintf(stderr, "trident preprocess: %s\n", tr_errmsg());
        return st == TR_ERR_INVALID || st == TR_ERR_CONFIG ? 2 : 1;
    }
    return 0;
}

int tr_cmd_preprocess(int argc, char **argv)
{
    arg_parser a = {.cmd = "trident preprocess", .usage = preprocess_usage, .argc = argc,
                    .argv = argv};
    pp_options o = {.workers = 1, .log_interval = 10};
    o.inputs = calloc((size_t)argc + 1, sizeof *o.inputs);
    o.keys = calloc((size_t)argc + 1, sizeof *o.keys);
    o.specials = calloc((size_t)argc + 1, sizeof *o.specials);
    int rc = !o.inputs || !o.keys || !o.specials ? 1 : parse(&a, &o);
    if (!o.inputs || !o.keys || !o.specials)
        fprintf(stderr, "trident preprocess: out of memory\n");
    else if (rc == 0)
        rc = run(&o);
    free(o.inputs);
    free(o.keys);
    free(o.specials);
    free(o.pair);
    return rc < 0 ? 0 : rc;
}
