/* Chat templates: rendering a conversation as the official Jinja template does (what
 * chat_template.c opened), and the loss mask of its tokens. See chat_template.h for the
 * contract. */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "data/chat_template.h"
#include "data/prep_internal.h"

/* ---- rendering ---- */

/* The code point at s[*i] (valid UTF-8, as jansson's strings are), *i moved past it. */
static uint32_t next_char(const unsigned char *s, size_t n, size_t *i)
{
    uint32_t c = s[(*i)++];
    int more = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
    c &= more == 3 ? 0x07 : more == 2 ? 0x0F : more == 1 ? 0x1F : 0x7F;
    for (; more && *i < n; more--)
        c = c << 6 | (s[(*i)++] & 0x3F);
    return c;
}

/* Python's str.isspace(). */
static int py_space(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

/* Python's s.strip(): [*a, *b) of s[0..n). */
static void py_strip(const char *s, size_t n, size_t *a, size_t *b)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, at = 0;
    while (i < n && (at = i, py_space(next_char(u, n, &i))))
        at = i;
    *a = at;
    *b = at;
    for (i = at; i < n;) /* the end of the last character that is not a space */
        if (!py_space(next_char(u, n, &i)))
            *b = i;
}

static int add(chat_rendering *r, const char *s, size_t n)
{
    int rc = prep_reserve((void **)&r->text, &r->cap, r->len + n + 1, 1);
    if (!rc && n) {
        memcpy(r->text + r->len, s, n);
        r->len += n;
    }
    return rc;
}

static int add_str(chat_rendering *r, const char *s) { return s ? add(r, s, strlen(s)) : TR_OK; }

static int add_stripped(chat_rendering *r, const char *s, size_t n)
{
    size_t a, b;
    py_strip(s, n, &a, &b);
    return add(r, s + a, b - a);
}

/* A reply from r->len - (what was added since `start`) to now. */
static int reply(chat_rendering *r, size_t start)
{
    int rc = prep_reserve((void **)&r->reply, &r->cap_reply, r->n_reply + 1, sizeof *r->reply);
    if (!rc) {
        r->reply[r->n_reply][0] = start;
        r->reply[r->n_reply++][1] = r->len;
    }
    return rc;
}

static const char *const role_name[] = {"system", "user", "assistant"};

/* The error raise_exception(...) of the official template, for message "KEY"[i]. */
static char *raised(const chat_template *ct, const char *key, size_t i, int role, int alternate)
{
    return prep_message("\"%s\"[%zu] is a %s message: the %s chat template raises \"%s\"", key, i,
                        role_name[role], ct->name,
                        alternate ? "Conversation roles must alternate user/assistant/user/"
                                    "assistant/... (a user message first)"
                                  : "Only user and assistant roles are supported!");
}

static int render_llama2(const chat_template *ct, const chat_message *m, size_t n,
                         const char *key, chat_rendering *r, char **bad)
{
    size_t first = n && m[0].role == CHAT_SYSTEM; /* the system message, folded */
    char *folded = NULL;
    int rc = TR_OK;
    for (size_t i = first; i < n && !rc; i++) {
        size_t turn = i - first;
        if ((m[i].role == CHAT_USER) != (turn % 2 == 0)) {
            *bad = raised(ct, key, i, m[i].role, 1);
            break;
        }
        const char *content = m[i].content;
        size_t len = m[i].len;
        if (turn == 0 && first) { /* '<<SYS>>\n' + system + '\n<</SYS>>\n\n' + content */
            static const char open[] = "<<SYS>>\n", close[] = "\n<</SYS>>\n\n";
            size_t lo = sizeof open - 1, lc = sizeof close - 1;
            len = lo + m[0].len + lc + m[i].len;
            if (!(folded = malloc(len)))
                return tr_fail(TR_ERR_NOMEM, "out of memory");
            memcpy(folded, open, lo);
            memcpy(folded + lo, m[0].content, m[0].len);
            memcpy(folded + lo + m[0].len, close, lc);
            memcpy(folded + lo + m[0].len + lc, m[i].content, m[i].len);
            content = folded;
        }
        if (m[i].role == CHAT_USER) {
            rc = add_str(r, ct->bos);
            if (!rc)
                rc = add_str(r, "[INST] ");
            if (!rc)
                rc = add_stripped(r, content, len);
            if (!rc)
                rc = add_str(r, " [/INST]");
        } else if (m[i].role == CHAT_ASSISTANT) {
            size_t start = r->len;
            rc = add_str(r, " ");
            if (!rc)
                rc = add_stripped(r, content, len);
            if (!rc)
                rc = add_str(r, " ");
            if (!rc)
                rc = add_str(r, ct->eos);
            if (!rc)
                rc = reply(r, start);
        } /* a system message at an odd turn: the template writes nothing */
        free(folded);
        folded = NULL;
    }
    return rc;
}

static int render_llama3(const chat_template *ct, const chat_message *m, size_t n,
                         chat_rendering *r)
{
    int rc = add_str(r, n ? ct->bos : NULL);
    for (size_t i = 0; i < n && !rc; i++) {
        rc = add_str(r, "<|start_header_id|>");
        if (!rc)
            rc = add_str(r, role_name[m[i].role]);
        if (!rc)
            rc = add_str(r, "<|end_header_id|>\n\n");
        size_t start = r->len;
        if (!rc)
            rc = add_stripped(r, m[i].content, m[i].len);
        if (!rc)
            rc = add_str(r, "<|eot_id|>");
        if (!rc && m[i].role == CHAT_ASSISTANT)
            rc = reply(r, start);
    }
    return rc;
}

static int render_mistral(const chat_template *ct, const chat_message *m, size_t n,
                          const char *key, chat_rendering *r, char **bad)
{
    int rc = add_str(r, ct->bos);
    for (size_t i = 0; i < n && !rc; i++) {
        if ((m[i].role == CHAT_USER) != (i % 2 == 0) || m[i].role == CHAT_SYSTEM) {
            *bad = raised(ct, key, i, m[i].role, (m[i].role == CHAT_USER) != (i % 2 == 0));
            break;
        }
        size_t start = r->len;
        rc = add_str(r, m[i].role == CHAT_USER ? "[INST] " : NULL);
        if (!rc)
            rc = add(r, m[i].content, m[i].len);
        if (!rc)
            rc = add_str(r, m[i].role == CHAT_USER ? " [/INST]" : ct->eos);
        if (!rc && m[i].role == CHAT_ASSISTANT)
            rc = reply(r, start);
        if (!rc && m[i].role == CHAT_ASSISTANT && ct->kind == CHAT_MISTRAL_V01)
            rc = add_str(r, " ");
    }
    return rc;
}

static int render_chatml(const chat_message *m, size_t n, chat_rendering *r)
{
    int rc = TR_OK;
    for (size_t i = 0; i < n && !rc; i++) {
        rc = add_str(r, "<|im_start|>");
        if (!rc)
            rc = add_str(r, role_name[m[i].role]);
        if (!rc)
            rc = add_str(r, "\n");
        size_t start = r->len;
        if (!rc)
            rc = add(r, m[i].content, m[i].len);
        if (!rc)
            rc = add_str(r, "<|im_end|>");
        if (!rc && m[i].role == CHAT_ASSISTANT)
            rc = reply(r, start);
        if (!rc)
            rc = add_str(r, "\n");
    }
    return rc;
}

/* Qwen2-Instruct / Qwen2.5-Instruct: the default system prompt when the first message is not a
 * system message, then chatml-hf's rendering (qwen2.5's system message first is written as
 * chatml-hf writes it). qwen2.5 renders an assistant message with tool_calls as <tool_call>
 * blocks, which trident does not: refused (other messages' tool_calls it does not read). */
static int render_qwen(const chat_template *ct, const chat_message *m, size_t n,
                       const char *key, chat_rendering *r, char **bad)
{
    for (size_t i = 0; i < n && ct->kind == CHAT_QWEN25; i++)
        if (m[i].role == CHAT_ASSISTANT && m[i].tool_calls) { /* others' are not read */
            *bad = prep_message("\"%s\"[%zu] is an assistant message with \"tool_calls\": the "
                                "%s chat template renders tool calls, which trident does not (a "
                                "message without them, or an empty list)", key, i, ct->name);
            return TR_OK;
        }
    int rc = TR_OK;
    if (n && m[0].role != CHAT_SYSTEM)
        rc = add_str(r, ct->kind == CHAT_QWEN2
                            ? "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
                            : "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are "
                              "a helpful assistant.<|im_end|>\n");
    return rc ? rc : render_chatml(m, n, r);
}

int chat_render(const chat_template *ct, const chat_message *m, size_t n, const char *key,
                chat_rendering *r, char **bad)
{
    r->len = r->n_reply = 0;
    int rc = add(r, "", 0);
    if (rc)
        return rc;
    switch (ct->kind) {
    case CHAT_LLAMA2: return render_llama2(ct, m, n, key, r, bad);
    case CHAT_LLAMA3: return render_llama3(ct, m, n, r);
    case CHAT_MISTRAL:
    case CHAT_MISTRAL_V01: return render_mistral(ct, m, n, key, r, bad);
    case CHAT_CHATML: return render_chatml(m, n, r);
    case CHAT_QWEN2:
    case CHAT_QWEN25: return render_qwen(ct, m, n, key, r, bad);
    default: return tr_fail(TR_ERR_INTERNAL, "chat_render: the chatml pieces are prep_sft.c's");
    }
}

int chat_render_generation_prompt(const chat_template *ct, chat_rendering *r)
{
    if (ct->kind == CHAT_LLAMA3)
        return add_str(r, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    return add_str(r, chat_is_chatml(ct->kind) ? "<|im_start|>assistant\n" : NULL);
}

void chat_rendering_free(chat_rendering *r)
{
    free(r->text);
    free(r->reply);
    *r = (chat_rendering){0};
}

/* ---- the loss mask ---- */

/* How many bytes of text[at..len) the token's bytes tok[0..n) stand for (a ' ' of the token
 * may be a U+2581 of the text), or SIZE_MAX when they do not. */
static size_t fit(const char *tok, size_t n, const char *text, size_t at, size_t len)
{
    size_t j = at;
    for (size_t k = 0; k < n; k++) {
        if (j < len && text[j] == tok[k])
            j++;
        else if (tok[k] == ' ' && len - j >= 3 && !memcmp(text + j, "\xe2\x96\x81", 3))
            j += 3;
        else
            return SIZE_MAX;
    }
    return j - at;
}

int chat_learned(const tr_tokenizer *t, const chat_rendering *r, const int32_t *ids, size_t n,
                 int32_t *mask, char **bad)
{
    size_t at = 0, span = 0;
    for (size_t i = 0; i < n; i++) {
        size_t tl;
        const char *tok = tr_token_bytes(t, ids[i], &tl);
        size_t got = tok ? fit(tok, tl, r->text, at, r->len) : SIZE_MAX;
        if (got == SIZE_MAX && tok && tl && tok[0] == ' ') /* SentencePiece's prepended U+2581 */
            got = fit(tok + 1, tl - 1, r->text, at, r->len);
        if (got == SIZE_MAX) {
            *bad = prep_message("token %zu (id %d) of the rendered conversation is not its text "
                                "at byte %zu (a character the tokenizer has no token for, "
                                "without byte fallback?)", i, ids[i], at);
            return TR_OK;
        }
        /* [start, end): the token's text; a lone prepended U+2581 goes with the next character */
        size_t start = at, end = at + got;
        if (end == start && at < r->len)
            (void)next_char((const unsigned char *)r->text, r->len, &end);
        while (span < r->n_reply && r->reply[span][1] <= start)
            span++;
        mask[i] = span < r->n_reply && r->reply[span][0] < end;
        at += got;
    }
    if (at != r->len)
        *bad = prep_message("the tokens of the rendered conversation end at byte %zu of its %zu",
                            at, r->len);
    return TR_OK;
}
