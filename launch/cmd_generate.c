/* `trident generate CHECKPOINT_DIR --prompt TEXT [options]`: text from a trained model with a
 * key/value cache; under tensor parallelism over every rank of the job (--nproc N). */
#include "launch/commands.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "data/chat_template.h"
#include "hf/hf.h"
#include "launch/args.h"
#include "model/gpt.h"
#include "tokenizer/tokenizer.h"
#include "train/train.h"
#include "yaml/config.h"

static void generate_usage(FILE *f)
{
    fprintf(f,
            "usage: trident generate CHECKPOINT_DIR|HF_DIR (--prompt TEXT | --prompt-ids IDS) [options]\n"
            "\n"
            "Continue a prompt with the model of CHECKPOINT_DIR's latest checkpoint (the\n"
            "checkpoint.save folder of a run) or of a Hugging Face GPT-2, Llama, Qwen2, Bloom,\n"
            "GPT-NeoX, Falcon, Phi or StableLM folder (config.json + model.safetensors), one\n"
            "token at a time with a key/value cache. A checkpoint's manifest records the model's\n"
            "family (Llama, Bloom, ...); one written before it did needs --config (the run's\n"
            "config: its model section says the family).\n"
            "Tokens are bytes (the byte-level tokenizer of trident preprocess) unless a tokenizer\n"
            "is given, or HF_DIR holds a tokenizer.json (else GPT-2's vocab.json + merges.txt,\n"
            "with tokenizer_config.json's add_bos_token) and no tokenizer option is given: then\n"
            "--prompt is encoded with it and the text decoded.\n"
            "\n"
            "options:\n"
            "  --prompt TEXT          the prompt (bytes, or the tokenizer's encoding)\n"
            "  --prompt-ids IDS       the prompt as comma-separated token ids (e.g. 17,4,250)\n"
            "  --max-new-tokens N     tokens to generate (default 64; the prompt and them must\n"
            "                         fit max_position_embeddings)\n"
            "  --temperature T        0 = greedy; default 1 (the model's distribution)\n"
            "  --top-k K              sample from the K most likely tokens (default 0 = all)\n"
            "  --top-p P              ... and from the fewest whose probability reaches P\n"
            "                         (default 1 = all)\n"
            "  --seed S               sampling seed (default 1234): the same seed, the same text\n"
            "  --eos-id ID[,ID...]    stop after generating any of these tokens (at most 16);\n"
            "                         -1: none (default: with --chat-template the template's\n"
            "                         end-of-reply marker; of an HF_DIR its\n"
            "                         generation_config.json's eos_token_id (an id or a list),\n"
            "                         else its config.json's, as transformers' generate stops;\n"
            "                         else none)\n"
            "  --chat-template NAME   render --prompt as one user turn with the generation\n"
            "                         prompt, as transformers' apply_chat_template(messages,\n"
            "                         add_generation_prompt=True) gives the ids (chatml-hf,\n"
            "                         llama2, llama3, mistral, mistral-v0.1, qwen2\n"
            "                         (Qwen2-Instruct), qwen2.5 (Qwen2.5-Instruct), or auto: the\n"
            "                         tokenizer_config.json beside the tokenizer.json; `chatml`,\n"
            "                         preprocess's own pieces, is refused); needs an HFTokenizer.\n"
            "                         Generation stops after the end-of-reply marker (llama3\n"
            "                         <|eot_id|>, chatml-hf / qwen <|im_end|>, llama2 / mistral\n"
            "                         EOS) and only the reply is printed, without the token it\n"
            "                         stopped at\n"
            "  --system TEXT          a system message before the user turn (--chat-template;\n"
            "                         qwen2 / qwen2.5 write their default one without it)\n"
            "  --device cpu|cuda|cuda-fp32\n"
            "                         kernel backend (default cpu; cuda: bf16 products)\n"
            "  --json                 print one JSON object (prompt and generated token ids, text,\n"
            "                         timings) instead of the text\n"
            "  --tokenizer-type T     ByteLevel, GPT2BPETokenizer (--vocab-file, --merge-file),\n"
            "                         HFTokenizer, Llama2Tokenizer, GPTSentencePieceTokenizer,\n"
            "                         Llama3Tokenizer or TikTokenizer (--tokenizer-model;\n"
            "                         TikTokenizer: --tiktoken-pattern v1|v2,\n"
            "                         --tiktoken-num-special-tokens S, --tiktoken-special-tokens\n"
            "                         T... (default <unk> <s> </s>), as trident preprocess):\n"
            "                         the run's data.tokenizer; a tokenizer.model in tiktoken's\n"
            "                         format (Meta's Llama 3) in the folder is Llama3Tokenizer\n"
            "  --config FILE          the run's config (its model section: sizes must be the\n"
            "                         checkpoint's; the family switches are taken from it); a\n"
            "                         LoRA run's checkpoint needs it: its adapters are merged\n"
            "                         into finetune.load's base (W += alpha / r B A)\n"
            "  --nproc N              N local ranks, the model split over them by tensor\n"
            "                         parallelism (N must divide the attention heads)\n"
            "  -h, --help             this text\n"
            "\n"
            "Prints the prompt (with --chat-template not) and its continuation on stdout as they\n"
            "are made, then on stderr the prompt's time and the tokens per second of the\n"
            "generation.\n"
            "Exit status: 0 success, 1 runtime failure, 2 bad usage or input.\n");
}

typedef struct {
    const char *dir, *prompt, *prompt_ids, *device, *config, *chat, *system;
    int max_new, top_k, json;
    int eos[TR_HF_MAX_EOS], n_eos; /* the stop tokens */
    int eos_given;           /* --eos-id given (-1: no stop token) */
    char eos_from[4200];     /* the HF folder's file eos was read from, else "" */
    double temperature, top_p;
    uint64_t seed;
    tr_tokenizer_files tok;
    tr_tokenizer *tokenizer; /* NULL: bytes */
    int32_t *chat_ids;       /* --chat-template: the rendered prompt's ids (n_chat), else NULL */
    size_t n_chat;
    int chat_stop;           /* --chat-template: the end-of-reply marker's id, else -1 */
} gen_options;

/* Prompt token ids from --prompt (bytes) or --prompt-ids; *n of them in *out (malloc'd). */
static int prompt_tokens(const gen_options *o, int V, int32_t **out, int *n)
{
    size_t cap = o->chat_ids ? o->n_chat
                 : o->prompt ? strlen(o->prompt)
                             : strlen(o->prompt_ids) / 2 + 1;
    int32_t *ids = malloc((cap ? cap : 1) * sizeof *ids);
    if (!ids)
        return tr_fail(TR_ERR_NOMEM, "out of memory for the prompt");
    int count = 0;
    if (o->chat_ids) { /* rendered and tokenized by chat_prompt_ids */
        memcpy(ids, o->chat_ids, o->n_chat * sizeof *ids);
        count = (int)o->n_chat;
    } else if (o->prompt && o->tokenizer) { /* as tokenizer(text) gives: with its template */
        tr_encoder *e = NULL;
        size_t got = 0, c = cap ? cap : 1; /* ids holds c */
        int rc = tr_encoder_create(o->tokenizer, &e);
        if (!rc)
            rc = tr_encode(e, o->prompt, strlen(o->prompt), 1, &ids, &got, &c);
        tr_encoder_free(e);
        if (rc) {
            free(ids);
            return rc;
        }
        count = (int)got;
    } else if (o->prompt) {
        for (size_t i = 0; o->prompt[i]; i++)
            ids[count++] = (unsigned char)o->prompt[i];
    } else {
        for (const char *p = o->prompt_ids; *p;) {
            char *end;
            long v = strtol(p, &end, 10);
            if (end == p || v < 0 || v > 0x7fffffff || (*end && *end != ',')) {
                free(ids);
                return tr_fail(TR_ERR_INVALID, "--prompt-ids: expected comma-separated token "
                                               "ids, found '%.20s'", p);
            }
            ids[count++] = (int32_t)v;
            p = *end ? end + 1 : end;
        }
    }
    for (int i = 0; i < count; i++)
        if (ids[i] >= V) {
            int bad = ids[i];
            free(ids);
            return tr_fail(TR_ERR_INVALID, "prompt token %d at position %d is outside the "
                                           "model's vocabulary [0, %d)", bad, i, V);
        }
    if (count == 0) {
        free(ids);
        return tr_fail(TR_ERR_INVALID, "the prompt is empty");
    }
    *out = ids;
    *n = count;
    return TR_OK;
}

/* One token as printed text: the tokenizer's bytes; without one a byte, or <|ID|> beyond. */
static void print_token(const tr_tokenizer *t, int32_t id)
{
    size_t len;
    const char *bytes = t ? tr_token_bytes(t, id, &len) : NULL;
    if (bytes)
        fwrite(bytes, 1, len, stdout);
    else if (id < 256 && !t)
        putchar(id);
    else
        printf("<|%d|>", (int)id);
}

/* "text" is the generated tokens' text, less a last token `stop` (the chat marker; -1: none). */
static void print_json(const tr_tokenizer *t, const int32_t *ids, int n_prompt, int n_total,
                       int32_t stop, double prompt_s, double gen_s)
{
    tr_json j;
    tr_json_begin(&j, stdout);
    tr_json_object_begin(&j, NULL);
    tr_json_array_begin(&j, "prompt_ids");
    for (int i = 0; i < n_prompt; i++)
        tr_json_int(&j, NULL, ids[i]);
    tr_json_array_end(&j);
    tr_json_array_begin(&j, "generated_ids");
    for (int i = n_prompt; i < n_total; i++)
        tr_json_int(&j, NULL, ids[i]);
    tr_json_array_end(&j);
    char *text = NULL;
    int n_text = n_total - (stop >= 0 && n_total > n_prompt && ids[n_total - 1] == stop);
    if (t && !tr_decode(t, ids + n_prompt, (size_t)(n_text - n_prompt), &text, NULL)) {
        tr_json_string(&j, "text", text);
        free(text);
    } else if ((text = malloc((size_t)(n_text - n_prompt) * 12 + 1))) {
        size_t len = 0;
        for (int i = n_prompt; i < n_text; i++)
            len += (size_t)(ids[i] < 256 && ids[i] > 0
                                ? snprintf(text + len, 12, "%c", (char)ids[i])
                                : snprintf(text + len, 12, "<|%d|>", (int)ids[i]));
        text[len] = '\0';
        tr_json_string(&j, "text", text);
        free(text);
    }
    tr_json_double(&j, "prompt_ms", prompt_s * 1e3);
    tr_json_double(&j, "tokens_per_s", n_total - n_prompt > 1 ? (n_total - n_prompt - 1) / gen_s : 0);
    tr_json_object_end(&j);
    putchar('\n');
}

/* Prefill the prompt, then one token per step; ids: room for n_prompt + max_new. */
/* Whether id is one of the stop tokens. */
static int is_stop(const gen_options *o, int id)
{
    for (int i = 0; i < o->n_eos; i++)
        if (o->eos[i] == id)
            return 1;
    return 0;
}

/* --eos-id's value: -1 (none), or token ids separated by commas (no empty one), into o->eos. */
static int eos_ids(const arg_parser *a, const char *text, gen_options *o)
{
    o->n_eos = 0;
    if (!strcmp(text, "-1"))
        return 0;
    for (const char *p = text;; p++) { /* each field up to the next comma or the end */
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char field[16];
        int id;
        if (o->n_eos == TR_HF_MAX_EOS || len == 0 || len >= sizeof field ||
            (memcpy(field, p, len), field[len] = '\0', !args_parse_int(field, 0, 0x7fffffff, &id)))
            return args_error(a, "--eos-id needs a token id (an integer >= 0), up to %d of them "
                              "separated by commas, or -1 for none; got '%s'", TR_HF_MAX_EOS,
                              text);
        o->eos[o->n_eos++] = id;
        if (!end)
            return 0;
        p = end;
    }
}

static int generate(const gen_options *o, tr_gpt_cache *cache, int V, int lead, int32_t *ids,
                    int n_prompt, int *n_total, double *prompt_s, double *gen_s)
{
    float *logits = malloc((size_t)V * sizeof(float));
    void *scratch = malloc(tr_sample_scratch_bytes(V));
    if (!logits || !scratch) {
        free(logits);
        free(scratch);
        return tr_fail(TR_ERR_NOMEM, "out of memory for the logits");
    }
    tr_sampling s = {.temperature = o->temperature, .top_k = o->top_k, .top_p = o->top_p};
    int n = n_prompt, rc = TR_OK;
    double t0 = tr_now(), t1 = t0;
    if (lead && !o->json && !o->chat_ids) { /* a chat prints only the reply */
        for (int i = 0; i < n_prompt; i++)
            print_token(o->tokenizer, ids[i]);
        fflush(stdout);
    }
    for (int step = 0; step < o->max_new && !rc; step++) {
        /* the prompt at once, then the token just drawn */
        rc = step == 0 ? tr_gpt_decode(cache, ids, n_prompt, 0, logits)
                       : tr_gpt_decode(cache, ids + n - 1, 1, 0, logits);
        if (rc)
            break;
        if (step == 0)
            t1 = tr_now();
        /* every TP rank has the same logits and draws the same token: no broadcast */
        double u = tr_rand_uniform(o->seed, 0x67656e6572617465ULL /* "generate" */, (uint64_t)step);
        ids[n++] = tr_sample_token(logits, V, &s, u, scratch);
        if (lead && !o->json && !(o->chat_ids && is_stop(o, ids[n - 1]))) {
            print_token(o->tokenizer, ids[n - 1]);
            fflush(stdout);
        }
        if (is_stop(o, ids[n - 1]))
            break;
    }
    *prompt_s = t1 - t0;
    *gen_s = tr_now() - t1;
    *n_total = n;
    free(logits);
    free(scratch);
    return rc;
}

static int run_generate(const gen_options *o)
{
    infer_model im = {.dir = o->dir, .config = o->config, .device = o->device};
    int n_prompt = 0, n_total = 0;
    int32_t *ids = NULL, *prompt = NULL;
    tr_gpt_cache *cache = NULL;
    double prompt_s = 0, gen_s = 0;
    int rc = infer_model_open(&im);
    const tr_gpt_shape shape = im.shape;
    if (!rc && o->tokenizer && tr_tokenizer_vocab_size(o->tokenizer) > shape.V)
        rc = tr_fail(TR_ERR_INVALID, "the tokenizer's %d ids do not fit the model's vocabulary of %d "
                     "(the checkpoint was trained with another tokenizer?)",
                     tr_tokenizer_vocab_size(o->tokenizer), shape.V);
    for (int i = 0; !rc && o->eos_from[0] && i < o->n_eos; i++)
        if (o->eos[i] >= shape.V)
            rc = tr_fail(TR_ERR_INVALID, "%s: eos_token_id %d is outside the model's vocabulary "
                         "[0, %d) (--eos-id sets the stop tokens, -1 none)", o->eos_from,
                         o->eos[i], shape.V);
    if (!rc)
        rc = prompt_tokens(o, shape.V, &prompt, &n_prompt);
    int total = n_prompt + o->max_new;
    if (!rc && total > shape.max_T)
        rc = tr_fail(TR_ERR_INVALID, "the prompt (%d tokens) and --max-new-tokens %d exceed the "
                                     "model's %d positions", n_prompt, o->max_new, shape.max_T);
    if (!rc && shape.sliding_window && total > shape.sliding_window)
        rc = tr_fail(TR_ERR_INVALID, "the prompt (%d tokens) and --max-new-tokens %d exceed the "
                     "model's sliding window of %d positions: trident's attention is full "
                     "causal, the model's only within its window", n_prompt, o->max_new,
                     shape.sliding_window);
    if (!rc && !(ids = malloc((size_t)total * sizeof *ids)))
        rc = tr_fail(TR_ERR_NOMEM, "out of memory");
    if (!rc) {
        memcpy(ids, prompt, (size_t)n_prompt * sizeof *ids);
        rc = tr_gpt_cache_create(im.g, 1, total, &cache);
    }
    if (!rc)
        rc = generate(o, cache, shape.V, im.rank == 0, ids, n_prompt, &n_total, &prompt_s, &gen_s);
    if (!rc && im.rank == 0) {
        int made = n_total - n_prompt;
        if (o->json) {
            int last = ids[n_total - 1];
            print_json(o->tokenizer, ids, n_prompt, n_total,
                       o->chat_ids && n_total > n_prompt && is_stop(o, last) ? last : -1,
                       prompt_s, gen_s);
        } else {
            putchar('\n');
            fprintf(stderr, "trident generate: iteration %d of %s, %d tensor-parallel rank%s: "
                            "prompt of %d tokens in %.1f ms, %d tokens at %.1f tokens/s\n",
                    im.iteration, o->dir, im.size, im.size > 1 ? "s" : "", n_prompt,
                    prompt_s * 1e3, made, made > 1 ? (made - 1) / gen_s : 0.0);
        }
        fflush(stdout);
    }
    tr_gpt_cache_free(cache);
    free(ids);
    free(prompt);
    infer_model_close(&im);
    return rc;
}

/* --chat-template: o->chat_ids, o->n_chat and o->chat_stop (and --eos-id's default) from
 * chat_prompt_ids. Needs an HFTokenizer (its tokenizer.json names the tokenizer_config.json).
 * Returns the exit status: 0, 1 (I/O, memory) or 2 (bad usage or input), the error printed. */
static int chat_prompt(gen_options *o)
{
    chat_template *ct = NULL;
    char *bad = NULL;
    int rc;
    if (!o->tokenizer || strcmp(tr_tokenizer_type(o->tokenizer), "HFTokenizer")) {
        fprintf(stderr, "trident generate: --chat-template needs a Hugging Face tokenizer: the "
                        "tokenizer.json of HF_DIR, or --tokenizer-type HFTokenizer "
                        "--tokenizer-model FILE\n");
        return 2;
    }
    rc = chat_template_open(o->chat, o->tok.tokenizer_model, o->tokenizer, &ct);
    if (!rc)
        rc = chat_prompt_ids(ct, o->tokenizer, o->system, o->prompt, &o->chat_ids, &o->n_chat,
                             &o->chat_stop, &bad);
    chat_template_free(ct);
    if (bad) {
        fprintf(stderr, "trident generate: --chat-template %s%s: %s\n", o->chat,
                o->system ? " with --system" : "", bad);
        free(bad);
        return 2;
    }
    if (rc) {
        fprintf(stderr, "trident generate: %s\n", tr_errmsg());
        return rc == TR_ERR_CONFIG || rc == TR_ERR_INVALID ? 2 : 1;
    }
    if (!o->n_chat) { /* cannot happen: every template writes markers */
        fprintf(stderr, "trident generate: the rendered chat prompt is empty\n");
        return 2;
    }
    if (!o->n_eos && !o->eos_given && o->chat_stop >= 0)
        o->eos[o->n_eos++] = o->chat_stop;
    return 0;
}

int tr_cmd_generate(int argc, char **argv)
{
    enum { PROMPT, PROMPT_IDS, MAX_NEW, TEMPERATURE, TOP_K, TOP_P, SEED, EOS, DEVICE, JSON, NPROC,
           TOK_TYPE, VOCAB, MERGES, TOK_MODEL, CONFIG, CHAT, SYSTEM, TIK_PATTERN, TIK_NUM,
           TIK_SPECIALS };
    static const arg_opt options[] = {
        [PROMPT] = {.name = "--prompt", .kind = ARG_VALUE},
        [PROMPT_IDS] = {.name = "--prompt-ids", .kind = ARG_VALUE},
        [MAX_NEW] = {.name = "--max-new-tokens", .kind = ARG_VALUE},
        [TEMPERATURE] = {.name = "--temperature", .kind = ARG_VALUE},
        [TOP_K] = {.name = "--top-k", .kind = ARG_VALUE},
        [TOP_P] = {.name = "--top-p", .kind = ARG_VALUE},
        [SEED] = {.name = "--seed", .kind = ARG_VALUE},
        [EOS] = {.name = "--eos-id", .kind = ARG_VALUE},
        [DEVICE] = {.name = "--device", .kind = ARG_VALUE},
        [JSON] = {.name = "--json", .kind = ARG_FLAG},
        [NPROC] = {.name = "--nproc", .kind = ARG_VALUE},
        [TOK_TYPE] = {.name = "--tokenizer-type", .kind = ARG_VALUE},
        [VOCAB] = {.name = "--vocab-file", .kind = ARG_VALUE},
        [MERGES] = {.name = "--merge-file", .kind = ARG_VALUE},
        [TOK_MODEL] = {.name = "--tokenizer-model", .kind = ARG_VALUE},
        [CONFIG] = {.name = "--config", .kind = ARG_VALUE},
        [CHAT] = {.name = "--chat-template", .kind = ARG_VALUE},
        [SYSTEM] = {.name = "--system", .kind = ARG_VALUE},
        [TIK_PATTERN] = {.name = "--tiktoken-pattern", .kind = ARG_VALUE},
        [TIK_NUM] = {.name = "--tiktoken-num-special-tokens", .kind = ARG_VALUE},
        [TIK_SPECIALS] = {.name = "--tiktoken-special-tokens", .kind = ARG_VALUES, .what = "token"},
        {.name = NULL},
    };
    arg_parser a = {.cmd = "trident generate", .opts = options, .usage = generate_usage,
                    .argc = argc, .argv = argv};
    gen_options o = {.max_new = 64, .temperature = 1.0, .top_p = 1.0, .seed = 1234,
                     .device = "cpu", .chat_stop = -1};
    const char *v;
    int rc = 0, nproc = 0, seed = 0, opt;
    while (!rc && (opt = args_next(&a, &v)) != ARGS_END) {
        char *end = NULL;
        if (opt == ARGS_HELP || opt == ARGS_ERROR)
            return opt == ARGS_HELP ? 0 : 2;
        if (opt == PROMPT)
            o.prompt = v;
        else if (opt == PROMPT_IDS)
            o.prompt_ids = v;
        else if (opt == MAX_NEW)
            rc = args_int(&a, "--max-new-tokens", v, 1, 1 << 24, &o.max_new);
        else if (opt == TOP_K)
            rc = args_int(&a, "--top-k", v, 0, 1 << 30, &o.top_k);
        else if (opt == SEED)
            rc = args_int(&a, "--seed", v, 0, 0x7fffffff, &seed), o.seed = (uint64_t)seed;
        else if (opt == EOS)
            rc = eos_ids(&a, v, &o), o.eos_given = 1;
        else if (opt == JSON)
            o.json = 1;
        else if (opt == CHAT)
            o.chat = v;
        else if (opt == SYSTEM)
            o.system = v;
        else if (opt == TEMPERATURE) {
            o.temperature = strtod(v, &end);
            if (end == v || *end || !isfinite(o.temperature) || o.temperature < 0)
                rc = args_error(&a, "--temperature needs a number >= 0, got '%s'", v);
        } else if (opt == TOP_P) {
            o.top_p = strtod(v, &end);
            if (end == v || *end || !(o.top_p > 0 && o.top_p <= 1))
                rc = args_error(&a, "--top-p needs a number in (0, 1], got '%s'", v);
        } else if (opt >= 0 && infer_shared_option(&a, options[opt].name, v, &o.config,
                                                   &o.device, &nproc, &o.tok, &rc)) {
            /* (stored) */
        } else if (o.dir) {
            rc = args_error(&a, "more than one checkpoint folder given ('%s' and '%s')", o.dir, v);
        } else {
            o.dir = v;
        }
    }
    if (!rc && !o.dir)
        rc = args_error(&a, "no checkpoint folder given (see trident generate --help)");
    if (!rc && !o.prompt == !o.prompt_ids)
        rc = args_error(&a, "give the prompt once: --prompt TEXT or --prompt-ids IDS");
    if (!rc && o.system && !o.chat)
        rc = args_error(&a, "--system needs --chat-template NAME (the system message is rendered "
                            "by the chat template)");
    if (!rc && o.chat && o.prompt_ids)
        rc = args_error(&a, "--chat-template renders --prompt TEXT; it does not take --prompt-ids "
                            "(give the rendered ids without --chat-template)");
    if (rc)
        return rc;
    if (nproc > 0)
        return run_as_local_ranks("generate", nproc, 0, argc, argv);
    if (adopt_scheduler_identity("trident generate"))
        return 2;
    infer_tok_paths hf_tokenizer;
    if ((rc = infer_tokenizer_open("trident generate", o.dir, &o.tok, &hf_tokenizer, &o.tokenizer)))
        return rc;
    if (o.chat && (rc = chat_prompt(&o))) {
        tr_tokenizer_free(o.tokenizer);
        return rc;
    }
    /* an HF folder's stop token, as transformers' generate takes it */
    if (!o.eos_given && !o.n_eos && tr_hf_is_model_folder(o.dir) &&
        (rc = tr_hf_eos_token_ids(o.dir, o.eos, &o.n_eos, o.eos_from, sizeof o.eos_from))) {
        fprintf(stderr, "trident generate: %s\n", tr_errmsg());
        free(o.chat_ids);
        tr_tokenizer_free(o.tokenizer);
        return rc == TR_ERR_IO ? 1 : 2;
    }
    rc = run_generate(&o);
    free(o.chat_ids);
    tr_tokenizer_free(o.tokenizer);
    if (rc) {
        fprintf(stderr, "trident generate: %s\n", tr_errmsg());
        return rc == TR_ERR_CONFIG || rc == TR_ERR_INVALID ? 2 : 1;
    }
    return 0;
}
