/* Chat templates of `trident preprocess --sft --json-keys MESSAGES --chat-template NAME`
 * (chat_template.c; prep_sft.c encodes with them) and of `trident generate --chat-template NAME`
 * (chat_prompt.c: one user turn and the generation prompt). Not part of the library's
 * contract.
 *
 * Every template but `chatml` renders a conversation as transformers' apply_chat_template
 * (4.38.2) renders it with the model family's official Jinja template, and prep_sft.c
 * tokenizes the rendered text whole without the tokenizer's post-processor template, so the
 * ids are apply_chat_template(messages, tokenize=True)'s:
 *
 *  chatml        trident's own ChatML pieces (the default, as before): "<|im_start|>ROLE\n",
 *                then "CONTENT<|im_end|>\n", each tokenized alone, the first with the
 *                tokenizer's template, EOD appended. Not apply_chat_template's ids.
 *  chatml-hf     ChatML as apply_chat_template gives it (OpenHermes-2.5's template, the
 *                default of transformers 4.38): per message
 *                "<|im_start|>" ROLE "\n" CONTENT "<|im_end|>\n".
 *  llama2        Llama-2-chat: a first system message folded into the first user turn as
 *                "<<SYS>>\n" SYSTEM "\n<</SYS>>\n\n"; turns after it must alternate user,
 *                assistant, ... (a system message at an odd turn renders nothing, as in the
 *                template); user: BOS "[INST] " strip(CONTENT) " [/INST]", assistant:
 *                " " strip(CONTENT) " " EOS.
 *  llama3        Llama-3-Instruct: BOS, then per message "<|start_header_id|>" ROLE
 *                "<|end_header_id|>\n\n" strip(CONTENT) "<|eot_id|>".
 *  mistral       Mistral-7B-Instruct-v0.2 / Mixtral-8x7B-Instruct-v0.1: BOS, then user
 *                "[INST] " CONTENT " [/INST]" and assistant CONTENT EOS, alternating from a
 *                user message; no system message.
 *  mistral-v0.1  Mistral-7B-Instruct-v0.1: the same with " " after each EOS.
 *  qwen2         Qwen2-*-Instruct, Qwen1.5-*-Chat: chatml-hf's rendering, with
 *                "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n" first when the
 *                first message is not a system message.
 *  qwen2.5       Qwen2.5-*-Instruct without tools: the same with the default system prompt "You
 *                are Qwen, created by Alibaba Cloud. You are a helpful assistant."; an assistant
 *                message with tool_calls (rendered as <tool_call> blocks) is refused, as is the
 *                "tool" role (no role but system, user or assistant is read); `tools` is never
 *                passed.
 *  auto          the "chat_template" of the tokenizer_config.json beside the tokenizer.json,
 *                recognised as one of the official templates of the above by its fingerprint
 *                (the Jinja source with comments and the whitespace inside its tags dropped,
 *                string literals unescaped); any other template is refused, naming the file.
 * strip() is Python's str.strip() (Jinja's strip and trim): Unicode whitespace as
 * str.isspace. BOS / EOS are the bos_token / eos_token of the tokenizer_config.json beside
 * the tokenizer.json when it names them, else the family's ("<s>" / "</s>",
 * "<|begin_of_text|>"); every marker a template writes must be one token of the tokenizer.
 * Where the official template raises an error (roles that do not alternate, a system message
 * Mistral does not take) the line is refused with that error; roles are system, user or
 * assistant. Learned (mask 1): every token whose text overlaps an assistant's reply, which
 * is what the model generates after apply_chat_template(..., add_generation_prompt=True):
 * llama2 " " strip(CONTENT) " " EOS; llama3 strip(CONTENT) "<|eot_id|>"; mistral CONTENT
 * EOS; chatml-hf, qwen2, qwen2.5 CONTENT "<|im_end|>" (not the "\n" after it, nor a default
 * system prompt). */
#ifndef TR_CHAT_TEMPLATE_H
#define TR_CHAT_TEMPLATE_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tokenizer.h"

typedef enum {
    CHAT_CHATML_PIECES, /* "chatml": prep_sft.c's own pieces */
    CHAT_CHATML,        /* "chatml-hf" */
    CHAT_LLAMA2,
    CHAT_LLAMA3,
    CHAT_MISTRAL,
    CHAT_MISTRAL_V01,
    CHAT_QWEN2,  /* chatml-hf with Qwen2-Instruct's default system prompt */
    CHAT_QWEN25, /* the same with Qwen2.5-Instruct's; tool calls refused */
} chat_kind;

/* Whether templates of kind k write ChatML's markers <|im_start|> / <|im_end|> (chatml-hf and
 * Qwen's). */
static inline int chat_is_chatml(chat_kind k)
{
    return k == CHAT_CHATML || k == CHAT_QWEN2 || k == CHAT_QWEN25;
}

typedef struct {
    chat_kind kind;
    const char *name;  /* the template's name (auto: the one recognised) */
    char *bos, *eos;   /* the BOS / EOS text the template writes (NULL: it writes none) */
} chat_template;

/* The template `name` (NULL: "chatml"), for the tokenizer t read from tokenizer_json (NULL
 * when it is not an HFTokenizer). An unknown name, `auto` without a tokenizer.json, a
 * tokenizer_config.json that cannot be read, has no chat_template or an unknown one, or a
 * marker that is not one token of t: TR_ERR_CONFIG / TR_ERR_INVALID naming the file. */
int chat_template_open(const char *name, const char *tokenizer_json, const tr_tokenizer *t,
                       chat_template **out);
void chat_template_free(chat_template *ct);

enum { CHAT_SYSTEM, CHAT_USER, CHAT_ASSISTANT };
typedef struct {
    int role;            /* CHAT_* */
    const char *content; /* UTF-8 (NUL bytes are text) */
    size_t len;
    int tool_calls;      /* it has a "tool_calls" that Jinja takes as true (not null, false, 0,
                          * "", [] or {}): qwen2.5 renders those calls, which trident refuses */
} chat_message;

/* A rendered conversation: its text, and each assistant reply's [start, end) byte range in it
 * (the learned text, see above), in order. Reused from line to line. */
typedef struct {
    char *text;
    size_t len, cap;
    size_t (*reply)[2];
    size_t n_reply, cap_reply;
} chat_rendering;

/* Render messages m[0..n) with ct (not CHAT_CHATML_PIECES) into r (emptied first). *bad
 * (malloc'ed) when the template refuses the conversation, naming messages "KEY"[i]. Fails only
 * for memory. */
int chat_render(const chat_template *ct, const chat_message *m, size_t n, const char *key,
                chat_rendering *r, char **bad);
void chat_rendering_free(chat_rendering *r);

/* Append to r what add_generation_prompt=True appends: llama3
 * "<|start_header_id|>assistant<|end_header_id|>\n\n", chatml-hf / qwen2 / qwen2.5
 * "<|im_start|>assistant\n", llama2 / mistral nothing (their prompt ends with " [/INST]").
 * Fails only for memory. */
int chat_render_generation_prompt(const chat_template *ct, chat_rendering *r);

/* The prompt of `trident generate --chat-template` (chat_prompt.c): [a system message `system`
 * when not NULL,] a user message `user`, rendered with ct plus the generation prompt and
 * tokenized whole without t's post-processor template: the ids (*n of them, malloc'ed into *ids)
 * of apply_chat_template(messages, add_generation_prompt=True, tokenize=True). *stop: the id of
 * the template's end-of-reply marker (llama3 <|eot_id|>, chatml-hf / qwen2 / qwen2.5
 * <|im_end|>, llama2 / mistral EOS), after which generation stops. *bad (malloc'ed) when the
 * template refuses the messages (mistral takes no system message). Without `system`, qwen2 and
 * qwen2.5 write their default system prompt, as apply_chat_template does. ct of
 * CHAT_CHATML_PIECES (`chatml`, trident's training pieces, no apply_chat_template rendering) is
 * refused: TR_ERR_CONFIG. */
int chat_prompt_ids(const chat_template *ct, const tr_tokenizer *t, const char *system,
                    const char *user, int32_t **ids, size_t *n, int32_t *stop, char **bad);

/* The loss mask of ids[0..n), the tokens of r->text: mask[i] = 1 when token i's text overlaps
 * a reply. A token's text is found by walking r->text with tr_token_bytes: the bytes match
 * exactly, or a ' ' of the token stands for a U+2581 of the text, or a leading ' ' of the
 * token is SentencePiece's prepended U+2581 and belongs to the character after it. A token
 * that cannot be placed so (an unknown character without byte fallback) sets *bad. */
int chat_learned(const tr_tokenizer *t, const chat_rendering *r, const int32_t *ids, size_t n,
                 int32_t *mask, char **bad);

#endif
