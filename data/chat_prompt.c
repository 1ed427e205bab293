/* The prompt of `trident generate --chat-template NAME [--system TEXT]`: one user turn rendered
 * with chat_render, the template's generation prompt added, tokenized whole. See
 * chat_template.h for the contract. */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "data/chat_template.h"

/* The one id of marker in t (chat_template_open checked that it is one token). */
static int marker_id(const tr_tokenizer *t, const char *marker, int32_t *id)
{
    tr_encoder *e = NULL;
    int32_t *ids = NULL;
    size_t n = 0, cap = 0;
    int rc = tr_encoder_create(t, &e);
    if (!rc)
        rc = tr_encode(e, marker, strlen(marker), 0, &ids, &n, &cap);
    if (!rc && n != 1)
        rc = tr_fail(TR_ERR_CONFIG, "the chat template's end-of-reply marker '%s' is %zu tokens "
                                    "of the tokenizer, not one", marker, n);
    if (!rc)
        *id = ids[0];
    free(ids);
    tr_encoder_free(e);
    return rc;
}

int chat_prompt_ids(const chat_template *ct, const tr_tokenizer *t, const char *system,
                    const char *user, int32_t **ids, size_t *n, int32_t *stop, char **bad)
{
    *ids = NULL;
    *n = 0;
    *bad = NULL;
    if (ct->kind == CHAT_CHATML_PIECES)
        return tr_fail(TR_ERR_CONFIG, "--chat-template chatml is trident's own training pieces, "
                                      "not a rendering of apply_chat_template: generate takes "
                                      "chatml-hf, llama2, llama3, mistral, mistral-v0.1, "
                                      "qwen2, qwen2.5 or auto");
    const char *end = ct->kind == CHAT_LLAMA3    ? "<|eot_id|>"
                      : chat_is_chatml(ct->kind) ? "<|im_end|>"
                                                 : ct->eos;
    if (!end)
        return tr_fail(TR_ERR_CONFIG, "--chat-template %s: no end-of-reply marker", ct->name);
    int rc = marker_id(t, end, stop);
    if (rc)
        return rc;
    chat_message m[2];
    size_t k = 0;
    if (system)
        m[k++] = (chat_message){CHAT_SYSTEM, system, strlen(system), 0};
    m[k++] = (chat_message){CHAT_USER, user, strlen(user), 0};
    chat_rendering r = {0};
    rc = chat_render(ct, m, k, "messages", &r, bad);
    if (!rc && !*bad) /* add_generation_prompt=True: llama2 / mistral add nothing */
        rc = chat_render_generation_prompt(ct, &r);
    tr_encoder *e = NULL;
    size_t cap = 0;
    if (!rc && !*bad)
        rc = tr_encoder_create(t, &e);
    if (!rc && !*bad) /* apply_chat_template(tokenize=True): no post-processor template */
        rc = tr_encode(e, r.text, r.len, 0, ids, n, &cap);
    tr_encoder_free(e);
    chat_rendering_free(&r);
    if (rc || *bad) {
        free(*ids);
        *ids = NULL;
        *n = 0;
    }
    return rc;
}
