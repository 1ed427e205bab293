/* Chat templates: which one (a name, or `auto` from tokenizer_config.json), rendering a
 * conversation as the official Jinja template does, and the loss mask of its tokens. See
 * chat_template.h for the contract. */
#include "data/chat_template.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "data/prep_internal.h"

/* The official templates, as the "chat_template" strings of the models' tokenizer_config.json
 * hold them (JSON-decoded): what `auto` recognises. */
static const char LLAMA2_CHAT[] =
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system_message = messages[0]['content'] %}{% else %}"
    "{% set loop_messages = messages %}{% set system_message = false %}{% endif %}"
    "{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}"
    "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}"
    "{% endif %}{% endfor %}";
static const char LLAMA3_INSTRUCT[] =
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ "
    "message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
    "{% endif %}";
#define MISTRAL_HEAD                                                                              \
    "{{ bos_token }}{% for message in messages %}"                                                \
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"                              \
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}" \
    "{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
#define MISTRAL_TAIL                                                                              \
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}"  \
    "{% endfor %}"
static const char MISTRAL_V02[] = MISTRAL_HEAD
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}" MISTRAL_TAIL;
static const char MISTRAL_V01[] = MISTRAL_HEAD
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token + ' ' }}"
    MISTRAL_TAIL;
#define CHATML_BODY                                                                               \
    "{% for message in messages %}"                                                               \
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"     \
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
static const char CHATML_OPENHERMES[] = CHATML_BODY;
static const char CHATML_DEFINED[] =
    "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}"
    "{% endif %}" CHATML_BODY;

static const struct {
    const char *name;
    chat_kind kind;
    const char *bos, *eos;          /* the family's, when tokenizer_config.json names none */
    const char *official[2];        /* the templates `auto` recognises as this one */
    const char *models;
} known[] = {
    {"chatml", CHAT_CHATML_PIECES, NULL, NULL, {NULL}, "trident's own ChatML pieces"},
    {"chatml-hf", CHAT_CHATML, NULL, NULL, {CHATML_OPENHERMES, CHATML_DEFINED},
     "ChatML (OpenHermes-2.5, transformers' default)"},
    {"llama2", CHAT_LLAMA2, "<s>", "</s>", {LLAMA2_CHAT}, "Llama-2-chat"},
    {"llama3", CHAT_LLAMA3, "<|begin_of_text|>", NULL, {LLAMA3_INSTRUCT}, "Llama-3-Instruct"},
    {"mistral", CHAT_MISTRAL, "<s>", "</s>", {MISTRAL_V02},
     "Mistral-7B-Instruct-v0.2, Mixtral-8x7B-Instruct-v0.1"},
    {"mistral-v0.1", CHAT_MISTRAL_V01, "<s>", "</s>", {MISTRAL_V01}, "Mistral-7B-Instruct-v0.1"},
};
#define N_KNOWN (sizeof known / sizeof known[0])
#define NAMES "chatml, chatml-hf, llama2, llama3, mistral, mistral-v0.1 or auto"

/* ---- fingerprints ---- */

typedef struct {
    char *s;
    size_t n, cap;
} buf;

static int put(buf *b, const char *s, size_t n)
{
    int rc = prep_reserve((void **)&b->s, &b->cap, b->n + n + 1, 1);
    if (!rc) {
        memcpy(b->s + b->n, s, n);
        b->n += n;
        b->s[b->n] = 0;
    }
    return rc;
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* The fingerprint of a Jinja source: text outside tags as it is; comments {# #} dropped;
 * inside {{ }} and {% %} whitespace dropped outside string literals, and each literal
 * unescaped and written back as '...' with ' and \ escaped. Two templates with the same
 * fingerprint render the same. Malloc'ed in *out (NULL: out of memory). */
static int fingerprint(const char *s, size_t n, char **out)
{
    buf b = {0};
    int rc = put(&b, "", 0);
    for (size_t i = 0; i < n && !rc;) {
        if (i + 1 < n && s[i] == '{' && s[i + 1] == '#') { /* a comment */
            const char *end = strstr(s + i + 2, "#}");
            i = end && (size_t)(end - s) < n ? (size_t)(end - s) + 2 : n;
            continue;
        }
        if (!(i + 1 < n && s[i] == '{' && (s[i + 1] == '{' || s[i + 1] == '%'))) {
            rc = put(&b, s + i++, 1);
            continue;
        }
        char close = s[i + 1] == '{' ? '}' : '%';
        rc = put(&b, s + i, 2);
        for (i += 2; i < n && !rc;) {
            if (s[i] == '\'' || s[i] == '"') {
                char q = s[i++];
                rc = put(&b, "'", 1);
                for (; i < n && s[i] != q && !rc; i++) {
                    char c = s[i];
                    static const char from[] = "ntr\\'\"", to[] = "\n\t\r\\'\"";
                    const char *k = c == '\\' && i + 1 < n ? strchr(from, s[i + 1]) : NULL;
                    if (k && *k) { /* an escape: the character it stands for */
                        c = to[k - from];
                        i++;
                    }
                    rc = (c == '\'' || c == '\\') ? put(&b, "\\", 1) : TR_OK;
                    if (!rc)
                        rc = put(&b, &c, 1);
                }
                i += i < n;
                if (!rc)
                    rc = put(&b, "'", 1);
            } else if (is_space(s[i])) {
                i++;
            } else if (i + 1 < n && s[i] == close && s[i + 1] == '}') {
                rc = put(&b, s + i, 2);
                i += 2;
                break;
            } else {
                rc = put(&b, s + i++, 1);
            }
        }
    }
    if (rc)
        free(b.s), b.s = NULL;
    *out = b.s;
    return rc;
}

/* ---- opening: the name, tokenizer_config.json, the markers ---- */

/* The text of tokenizer_config.json's key (a string or an AddedToken {"content": ...}), or
 * NULL when it has none (or null). */
static const char *token_text(json_t *root, const char *key)
{
    json_t *v = json_object_get(root, key);
    if (json_is_object(v))
        v = json_object_get(v, "content");
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static int set_text(char **dst, const char *s)
{
    free(*dst);
    *dst = s ? strdup(s) : NULL;
    return s && !*dst ? tr_fail(TR_ERR_NOMEM, "out of memory") : TR_OK;
}

/* Which known template the config's chat_template is (its index), or an error naming path. */
static int recognise(json_t *root, const char *path, size_t *which)
{
    json_t *tpl = json_object_get(root, "chat_template");
    if (!tpl || json_is_null(tpl))
        return tr_fail(TR_ERR_CONFIG, "--chat-template auto: %s has no \"chat_template\" (give "
                                      "--chat-template NAME: " NAMES ")", path);
    if (!json_is_string(tpl))
        return tr_fail(TR_ERR_CONFIG, "--chat-template auto: %s: \"chat_template\" is not a string "
                                      "(a list of named templates is not read; give "
                                      "--chat-template NAME)", path);
    char *mine = NULL, *theirs = NULL;
    int rc = fingerprint(json_string_value(tpl), json_string_length(tpl), &mine);
    for (size_t k = 0; k < N_KNOWN && !rc; k++)
        for (int j = 0; j < 2 && known[k].official[j] && !rc; j++) {
            rc = fingerprint(known[k].official[j], strlen(known[k].official[j]), &theirs);
            int same = !rc && !strcmp(mine, theirs);
            free(theirs);
            if (same) {
                free(mine);
                *which = k;
                return TR_OK;
            }
        }
    free(mine);
    if (rc)
        return tr_fail(TR_ERR_NOMEM, "out of memory reading %s", path);
    return tr_fail(TR_ERR_CONFIG, "--chat-template auto: the \"chat_template\" of %s is none of "
                                  "the official templates trident renders (Llama-2-chat, "
                                  "Llama-3-Instruct, Mistral-7B-Instruct-v0.1/v0.2, ChatML); "
                                  "trident has no Jinja engine: give --chat-template NAME "
                                  "(" NAMES ") if it renders as one of them", path);
}

/* tokenizer_config.json beside tokenizer_json: `auto`'s template, then bos_token / eos_token. */
static int read_config(chat_template *ct, const char *tokenizer_json, int is_auto, size_t *which)
{
    char *path = tokenizer_json ? tr_tokenizer_config_path(tokenizer_json) : NULL;
    if (tokenizer_json && !path)
        return tr_fail(TR_ERR_NOMEM, "out of memory");
    if (!path || (access(path, F_OK) && errno == ENOENT)) {
        int rc = !is_auto ? TR_OK
                 : tr_fail(TR_ERR_CONFIG, "--chat-template auto reads \"chat_template\" from the "
                                          "tokenizer_config.json beside the tokenizer.json "
                                          "(HFTokenizer --tokenizer-model): %s%s",
                           path ? "there is no " : "no tokenizer.json", path ? path : "");
        free(path);
        return rc;
    }
    json_error_t err;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &err);
    int rc = TR_OK;
    if (!json_is_object(root))
        rc = tr_fail(TR_ERR_INVALID, "%s: %s", path, root ? "not a JSON object" : err.text);
    if (!rc && is_auto)
        rc = recognise(root, path, which);
    if (!rc && known[*which].bos && token_text(root, "bos_token"))
        rc = set_text(&ct->bos, token_text(root, "bos_token"));
    if (!rc && known[*which].eos && token_text(root, "eos_token"))
        rc = set_text(&ct->eos, token_text(root, "eos_token"));
    json_decref(root);
    free(path);
    return rc;
}

/* Each text the template writes that must be one token of t (a special token). */
static int check_markers(const chat_template *ct, const tr_tokenizer *t)
{
    const char *markers[4] = {ct->bos, ct->eos};
    if (ct->kind == CHAT_CHATML)
        markers[0] = "<|im_start|>", markers[1] = "<|im_end|>";
    else if (ct->kind == CHAT_LLAMA3)
        markers[1] = "<|start_header_id|>", markers[2] = "<|end_header_id|>",
        markers[3] = "<|eot_id|>";
    tr_encoder *e = NULL;
    int rc = tr_encoder_create(t, &e);
    int32_t *ids = NULL;
    size_t n = 0, cap = 0;
    for (int k = 0; k < 4 && !rc; k++) {
        if (!markers[k])
            continue;
        n = 0;
        rc = tr_encode(e, markers[k], strlen(markers[k]), 0, &ids, &n, &cap);
        if (!rc && n != 1)
            rc = tr_fail(TR_ERR_CONFIG, "--chat-template %s writes '%s', which the %s tokenizer "
                                        "makes %zu tokens, not one special token: a tokenizer of "
                                        "another family?", ct->name, markers[k],
                         tr_tokenizer_type(t), n);
    }
    free(ids);
    tr_encoder_free(e);
    return rc;
}

int chat_template_open(const char *name, const char *tokenizer_json, const tr_tokenizer *t,
                       chat_template **out)
{
    *out = NULL;
    name = name ? name : "chatml";
    int is_auto = !strcmp(name, "auto");
    size_t which = N_KNOWN;
    for (size_t k = 0; k < N_KNOWN && !is_auto; k++)
        if (!strcmp(name, known[k].name))
            which = k;
    if (!is_auto && which == N_KNOWN)
        return tr_fail(TR_ERR_CONFIG, "--chat-template '%s' is unknown (" NAMES ")", name);
    chat_template *ct = calloc(1, sizeof *ct);
    if (!ct)
        return tr_fail(TR_ERR_NOMEM, "out of memory");
    int rc = TR_OK;
    if (is_auto || known[which].kind != CHAT_CHATML_PIECES) {
        rc = read_config(ct, tokenizer_json, is_auto, &which);
        if (!rc && !ct->bos)
            rc = set_text(&ct->bos, known[which].bos);
        if (!rc && !ct->eos)
            rc = set_text(&ct->eos, known[which].eos);
    }
    if (!rc) {
        ct->kind = known[which].kind;
        ct->name = known[which].name;
        rc = ct->kind == CHAT_CHATML_PIECES ? TR_OK : check_markers(ct, t);
    }
    if (rc)
        chat_template_free(ct);
    else
        *out = ct;
    return rc;
}

void chat_template_free(chat_template *ct)
{
    if (ct) {
        free(ct->bos);
        free(ct->eos);
        free(ct);
    }
}

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
    default: return tr_fail(TR_ERR_INTERNAL, "chat_render: the chatml pieces are prep_sft.c's");
    }
}

int chat_render_generation_prompt(const chat_template *ct, chat_rendering *r)
{
    if (ct->kind == CHAT_LLAMA3)
        return add_str(r, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    return add_str(r, ct->kind == CHAT_CHATML ? "<|im_start|>assistant\n" : NULL);
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
