/* Supervised fine-tuning examples for `trident preprocess --json-keys PROMPT,RESPONSE` (or a
 * chat list, --json-keys MESSAGES --sft): one JSON object -> one document of ids (out[0]) and
 * its loss mask (out[1], 1 where the token is to be learned), as data.h describes.
 *
 *  pair:  ids(prompt) [mask 0] ids(response) [mask 1] EOD [mask 1]
 *  chat:  per message "<|im_start|>ROLE\n" [mask 0] then "CONTENT<|im_end|>\n" [mask 1 for
 *         the assistant's messages, 0 for system / user], then EOD [1 when the last message is
 *         the assistant's, else 0]
 * Each piece is tokenized on its own (merges never cross a piece), the first with the
 * tokenizer's template (HFTokenizer). Runs on a worker thread: touches only the batch. */
#include <jansson.h>
#include <string.h>

#include "core/core.h"
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

/* The EOD with mask m, and the document's one sequence in both outputs. */
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

static int encode_chat(const prep_spec *spec, tr_encoder *e, prep_batch *b, size_t i,
                       json_t *root, char **bad)
{
    const char *key = spec->json_keys[0];
    json_t *list = json_object_get(root, key);
    if (!list) {
        *bad = prep_message("no key \"%s\"", key);
        return TR_OK;
    }
    if (!json_is_array(list) || json_array_size(list) == 0) {
        *bad = prep_message("\"%s\" is %s, not a list of messages", key,
                            json_is_array(list) ? "an empty list" : prep_json_kind(list));
        return TR_OK;
    }
    size_t start = b->out[0].n_ids, j, learned = 0;
    int first = 1, rc = TR_OK, last_assistant = 0;
    json_t *msg;
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
        if (*bad)
            return TR_OK;
        int assistant = !strcmp(r, "assistant");
        size_t cl = json_string_length(content), n = 0, n_content = 0;
        char head[64];
        snprintf(head, sizeof head, "<|im_start|>%s\n", r);
        rc = piece(spec, e, b, head, strlen(head), 0, &first, &n);
        if (!rc)
            rc = piece(spec, e, b, json_string_value(content), cl, assistant, &first, &n_content);
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
        *bad = prep_message("\"%s\" has no assistant message (no token to learn)", key);
        return TR_OK;
    }
    return finish(spec, b, i, start, last_assistant);
}

int prep_encode_sft(const prep_spec *spec, tr_encoder *e, prep_batch *b, size_t i, void *root,
                    char **bad)
{
    return spec->sft == TR_SFT_PAIR ? encode_pair(spec, e, b, i, root, bad)
                                    : encode_chat(spec, e, b, i, root, bad);
}
