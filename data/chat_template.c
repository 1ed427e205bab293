/* Chat templates: which one (a name, or `auto` from tokenizer_config.json) and its markers
 * (chat_render.c renders with it). See chat_template.h for the contract. */
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

/* Qwen2-*-Instruct and Qwen1.5-*-Chat (the default system prompt before a first message that is
 * not one), as copies of them in several projects agree. Not the base models' (their "You are
 * a helpful assistant" has no period), which `auto` refuses. */
static const char QWEN2_INSTRUCT[] =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im"
    "_start|>system\n"
    "You are a helpful assistant.<|im_end|>\n"
    "' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n"
    "' + message['content'] + '<|im_end|>' + '\n"
    "'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n"
    "' }}{% endif %}";
/* Qwen2.5-*-Instruct: Qwen/Qwen2.5-0.5B-Instruct's tokenizer_config.json at 7ae5576 (as the
 * guidance library's guidance/chat.py copies it, and another copy for lmdeploy, the same; the
 * other sizes' not compared here). Its tools / tool_calls / "tool" sections trident refuses. */
static const char QWEN25_INSTRUCT[] =
    "{%- if tools %}\n"
    "    {{- '<|im_start|>system\\n' }}\n"
    "    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- messages[0]['content'] }}\n"
    "    {%- else %}\n"
    "        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}\n"
    "    {%- endif %}\n"
    "    {{- \"\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user quer"
    "y.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>"
    "\" }}\n"
    "    {%- for tool in tools %}\n"
    "        {{- \"\\n\" }}\n"
    "        {{- tool | tojson }}\n"
    "    {%- endfor %}\n"
    "    {{- \"\\n</tools>\\n\\nFor each function call, return a json object with function name a"
    "nd arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": <functi"
    "on-name>, \\\"arguments\\\": <args-json-object>}\\n</tool_call><|im_end|>\\n\" }}\n"
    "{%- else %}\n"
    "    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n"
    "    {%- else %}\n"
    "        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
    "assistant.<|im_end|>\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endif %}\n"
    "{%- for message in messages %}\n"
    "    {%- if (message.role == \"user\") or (message.role == \"system\" and not loop.first) or "
    "(message.role == \"assistant\" and not message.tool_calls) %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }"
    "}\n"
    "    {%- elif message.role == \"assistant\" %}\n"
    "        {{- '<|im_start|>' + message.role }}\n"
    "        {%- if message.content %}\n"
    "            {{- '\\n' + message.content }}\n"
    "        {%- endif %}\n"
    "        {%- for tool_call in message.tool_calls %}\n"
    "            {%- if tool_call.function is defined %}\n"
    "                {%- set tool_call = tool_call.function %}\n"
    "            {%- endif %}\n"
    "            {{- '\\n<tool_call>\\n{\"name\": \"' }}\n"
    "            {{- tool_call.name }}\n"
    "            {{- '\", \"arguments\": ' }}\n"
    "            {{- tool_call.arguments | tojson }}\n"
    "            {{- '}\\n</tool_call>' }}\n"
    "        {%- endfor %}\n"
    "        {{- '<|im_end|>\\n' }}\n"
    "    {%- elif message.role == \"tool\" %}\n"
    "        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != \"tool\") %}\n"
    "            {{- '<|im_start|>user' }}\n"
    "        {%- endif %}\n"
    "        {{- '\\n<tool_response>\\n' }}\n"
    "        {{- message.content }}\n"
    "        {{- '\\n</tool_response>' }}\n"
    "        {%- if loop.last or (messages[loop.index0 + 1].role != \"tool\") %}\n"
    "            {{- '<|im_end|>\\n' }}\n"
    "        {%- endif %}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}\n";

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
    {"qwen2", CHAT_QWEN2, NULL, NULL, {QWEN2_INSTRUCT}, "Qwen2-Instruct, Qwen1.5-Chat"},
    {"qwen2.5", CHAT_QWEN25, NULL, NULL, {QWEN25_INSTRUCT}, "Qwen2.5-Instruct"},
};
#define N_KNOWN (sizeof known / sizeof known[0])
#define NAMES "chatml, chatml-hf, llama2, llama3, mistral, mistral-v0.1, qwen2, qwen2.5 or auto"

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
                                  "Llama-3-Instruct, Mistral-7B-Instruct-v0.1/v0.2, ChatML, "
                                  "Qwen2-Instruct, Qwen2.5-Instruct); "
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
    json_t *root = NULL;
    int rc = tr_tokenizer_config_load(path, &root);
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
    if (chat_is_chatml(ct->kind))
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
