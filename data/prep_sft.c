/* Supervised fine-tuning examples for `trident preprocess --json-keys PROMPT,RESPONSE` (or a
 * chat list, --json-keys MESSAGES --sft [--chat-template NAME]): one JSON object -> one
 * document of ids (out[0]) and its loss mask (out[1], 1 where the token is to be learned), as
 * data.h describes.
 *
 *  pair:    ids(prompt) [mask 0] ids(response) [mask 1] EOD [mask 1]
 *  chatml:  per message "<|im_start|>ROLE\n" [mask 0] then "CONTENT<|im_end|>\n" [mask 1 for
 *           the assistant's messages, 0 for system / user], then EOD [1 when the last message
 *           is the assistant's, else 0]. Each piece is tokenized on its own (merges never
 *           cross a piece), the first with the tokenizer's template (HFTokenizer).
 *  other chat templates (chat_template.h): the conversation rendered as apply_chat_template
 *           renders it, tokenized whole without the tokenizer's template (so the ids are
 *           apply_chat_template's), no EOD; mask 1 on the tokens whose text overlaps an
 *           assistant's reply.
 * Runs on a worker thread: touches only the batch. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "data/chat_template.h"
#include "data/data.h"
#include "data/prep_internal.h"

/* Ids of text appended to out[0], as many mask values `m` to out[1]; *n: how many. */
static int piece(const prep_spec *spec, tr_encoder *e, prep_batch *b, const char *text,
                 size_t len, int m, int *first, size_t *n)
{
    prep_out *ids = &b->out[0], *mask = &b->out[1];
    size_t before = ids->n_ids;
    int rc = tr_encode(e, text, len, *first && spec->add_special, &ids->ids, &ids->n_ids,
                       &ids->cap_ids);
    *first = 0;
    if (rc)
        return rc;
    *n = ids->n_ids - before;
    if ((rc = prep_reserve((void **)&mask->ids, &mask->cap_ids, mask->n_ids + *n,
                           sizeof *mask->ids)))
        return rc;
    for (size_t j = 0; j < *n; j++)
        mask->ids[mask->n_ids++] = m;
    return TR_OK;
}

/* The EOD with mask m (m < 0: no EOD), and the document's one sequence in both outputs. */
static int finish(const prep_spec *spec, prep_batch *b, size_t i, size_t start, int m)
{
    int rc = TR_OK;
    for (int k = 0; k < 2 && !rc; k++) {
        prep_out *o = &b->out[k];
        rc = prep_reserve((void **)&o->ids, &o->cap_ids, o->n_ids + 1, sizeof *o->ids);
        if (!rc)
            rc = prep_reserve((void **)&o->len, &o->cap_len, o->n_len + 1, sizeof *o->len);
        if (rc)
            break;
        if (m >= 0)
            o->ids[o->n_ids++] = k == 0 ? spec->eod : m;
        o->len[o->n_len++] = (int64_t)(o->n_ids - start);
        o->nseq[i] = 1;
    }
    return rc;
}

static int encode_pair(const prep_spec *spec, tr_encoder *e, prep_batch *b, size_t i,
                       json_t *root, char **bad)
{
    const char *pk = spec->json_keys[0], *rk = spec->json_keys[1];
    json_t *p = json_object_get(root, pk), *r = json_object_get(root, rk);
    if (!p || !r) {
        *bad = prep_message("no key \"%s\"", !p ? pk : rk);
        return TR_OK;
    }
    if (!json_is_string(p) || !json_is_string(r)) {
        json_t *v = !json_is_string(p) ? p : r;
        *bad = prep_message("\"%s\" is %s, not a string", v == p ? pk : rk, prep_json_kind(v));
        return TR_OK;
    }
    size_t start = b->out[0].n_ids, n = 0;
    int first = 1;
    int rc = piece(spec, e, b, json_string_value(p), json_string_length(p), 0, &first, &n);
    if (!rc)
        rc = piece(spec, e, b, json_string_value(r), json_string_length(r), 1, &first, &n);
    if (!rc && n == 0) {
        *bad = prep_message("\"%s\" is empty (no token to learn)", rk);
        return TR_OK;
    }
    return rc ? rc : finish(spec, b, i, start, 1);
}

/* Whether Jinja takes v as true (absent, null, false, 0, "", [] and {} are false). */
static int jinja_true(json_t *v)
{
    if (json_is_array(v))
        return json_array_size(v) > 0;
    if (json_is_object(v))
        return json_object_size(v) > 0;
    if (json_is_string(v))
        return json_string_length(v) > 0;
    if (json_is_number(v))
        return json_number_value(v) != 0;
    return json_is_true(v);
}

/* The messages of the chat list `key` of root, checked, in *out (malloc'ed; *n of them), or
 * *bad. */
static int read_messages(json_t *root, const char *key, chat_message **out, size_t *n, char **bad)
{
    json_t *list = json_object_get(root, key), *msg;
    *out = NULL;
    if (!list) {
        *bad = prep_message("no key \"%s\"", key);
        return TR_OK;
    }
    if (!json_is_array(list) || json_array_size(list) == 0) {
        *bad = prep_message("\"%s\" is %s, not a list of messages", key,
                            json_is_array(list) ? "an empty list" : prep_json_kind(list));
        return TR_OK;
    }
    chat_message *m = calloc(json_array_size(list), sizeof *m);
    if (!m)
        return tr_fail(TR_ERR_NOMEM, "out of memory for %zu messages", json_array_size(list));
    size_t j;
    json_array_foreach(list, j, msg) {
        json_t *role = json_is_object(msg) ? json_object_get(msg, "role") : NULL;
        json_t *content = json_is_object(msg) ? json_object_get(msg, "content") : NULL;
        const char *r = json_is_string(role) ? json_string_value(role) : "";
        if (!json_is_object(msg))
            *bad = prep_message("\"%s\"[%zu] is %s, not an object {role, content}", key, j,
                                prep_json_kind(msg));
        else if (!role || !content)
            *bad = prep_message("\"%s\"[%zu] has no \"%s\"", key, j, !role ? "role" : "content");
        else if (!json_is_string(role) || !json_is_string(content))
            *bad = prep_message("\"%s\"[%zu].%s is %s, not a string", key, j,
                                !json_is_string(role) ? "role" : "content",
                                prep_json_kind(!json_is_string(role) ? role : content));
        else if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant"))
            *bad = prep_message("\"%s\"[%zu].role is \"%s\" (system, user or assistant)", key, j,
                                r);
        if (*bad) {
            free(m);
            return TR_OK;
        }
        m[j] = (chat_message){!strcmp(r, "system") ? CHAT_SYSTEM
                              : !strcmp(r, "user") ? CHAT_USER : CHAT_ASSISTANT,
                              json_string_value(content), json_string_length(content),
                              jinja_true(json_object_get(msg, "tool_calls"))};
    }
    *out = m;
    *n = json_array_size(list);
    return TR_OK;
}

static char *no_reply(const char *key)
{
    return prep_message("\"%s\" has no assistant message (no token to learn)", key);
}

/* chatml: trident's own pieces (chat_template.h). */
static int encode_chatml_pieces(const prep_spec *spec, tr_encoder *e, prep_batch *b, size_t i,
                                const chat_message *m, size_t n_msg, char **bad)
{
    static const char *const role[] = {"system", "user", "assistant"};
    const char *key = spec->json_keys[0];
    size_t start = b->out[0].n_ids, learned = 0;
    int first = 1, rc = TR_OK, last_assistant = 0;
    for (size_t j = 0; j < n_msg; j++) {
        int assistant = m[j].role == CHAT_ASSISTANT;
        size_t n = 0, n_content = 0;
        char head[64];
        snprintf(head, sizeof head, "<|im_start|>%s\n", role[m[j].role]);
        rc = piece(spec, e, b, head, strlen(head), 0, &first, &n);
        if (!rc)
            rc = piece(spec, e, b, m[j].content, m[j].len, assistant, &first, &n_content);
        if (!rc)
            rc = piece(spec, e, b, "<|im_end|>\n", 11, assistant, &first, &n);
        if (rc)
            return rc;
        if (assistant && n_content == 0) {
            *bad = prep_message("\"%s\"[%zu]: the assistant's content is empty", key, j);
            return TR_OK;
        }
        learned += assistant;
        last_assistant = assistant;
    }
    if (!learned) {
        *bad = no_reply(key);
        return TR_OK;
    }
    return finish(spec, b, i, start, last_assistant);
}

/* Any other template: the rendered text tokenized whole (apply_chat_template's ids), no EOD;
 * the mask from where each token's text lies (chat_learned). */
static int encode_rendered(const prep_spec *spec, tr_encoder *e, prep_batch *b, size_t i,
                           const chat_message *m, size_t n_msg, char **bad)
{
    prep_out *ids = &b->out[0], *mask = &b->out[1];
    chat_rendering r = {0};
    size_t start = ids->n_ids;
    int rc = chat_render(spec->chat, m, n_msg, spec->json_keys[0], &r, bad);
    if (!rc && !*bad && r.n_reply == 0)
        *bad = no_reply(spec->json_keys[0]);
    if (!rc && !*bad)
        rc = tr_encode(e, r.text, r.len, 0, &ids->ids, &ids->n_ids, &ids->cap_ids);
    size_t n = ids->n_ids - start;
    if (!rc && !*bad)
        rc = prep_reserve((void **)&mask->ids, &mask->cap_ids, mask->n_ids + n, sizeof *mask->ids);
    if (!rc && !*bad)
        rc = chat_learned(spec->tok, &r, ids->ids + start, n, mask->ids + mask->n_ids, bad);
    if (!rc && !*bad) {
        mask->n_ids += n;
        rc = finish(spec, b, i, start, -1);
    }
    chat_rendering_free(&r);
    return rc;
}

static int encode_chat(const prep_spec *spec, tr_encoder *e, prep_batch *b, size_t i,
                       json_t *root, char **bad)
{
    chat_message *m;
    size_t n = 0;
    int rc = read_messages(root, spec->json_keys[0], &m, &n, bad);
    if (!rc && m)
        rc = spec->chat->kind == CHAT_CHATML_PIECES ? encode_chatml_pieces(spec, e, b, i, m, n, bad)
                                                    : encode_rendered(spec, e, b, i, m, n, bad);
    free(m);
    return rc;
}

int prep_encode_sft(const prep_spec *spec, tr_encoder *e, prep_batch *b, size_t i, void *root,
                    char **bad)
{
    return spec->sft == TR_SFT_PAIR ? encode_pair(spec, e, b, i, root, bad)
                                    : encode_chat(spec, e, b, i, root, bad);
}
