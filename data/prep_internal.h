/* tr_preprocess internals: batches of input items (prep.c reads and writes them, in input
 * order; prep_encode.c turns one batch into ids, on any thread). Not part of the contract. */
#ifndef TR_PREP_INTERNAL_H
#define TR_PREP_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "data/chat_template.h"
#include "data/data.h"

#define PREP_MAX_KEYS 16
#define PREP_BATCH_BYTES (1u << 20) /* a batch closes past this much text ... */
#define PREP_BATCH_ITEMS 4096       /* ... or this many items */

typedef struct {
    uint64_t off, len; /* the item's text in the batch's buffer */
    uint64_t line;     /* JSON Lines: its 1-based line; text: 0 */
    int file;          /* index into the inputs */
} prep_item;

/* One key's ids for a batch: item i has nseq[i] sequences, whose lengths follow one another
 * in len[], whose ids follow one another in ids[]. */
typedef struct {
    int32_t *ids;
    size_t n_ids, cap_ids;
    uint32_t *nseq;        /* [cap_items] */
    int64_t *len;
    size_t n_len, cap_len;
} prep_out;

typedef struct {
    char *text;
    size_t text_len, text_cap;
    prep_item *items;
    size_t n_items, cap_items;
    char **bad;            /* [cap_items]: why item i is refused (malloc'ed), or NULL */
    prep_out out[PREP_MAX_KEYS];
    int rc;                /* a failure that stops the run (memory, a regex limit) */
    char *msg;             /* its message */
} prep_batch;

/* What encoding needs to know. */
typedef struct {
    const char *const *json_keys;
    int n_keys;            /* 0: text documents (one output) */
    int sft;               /* TR_SFT_NONE, or SFT examples (prep_sft.c): out[0] ids, out[1]
                            * their loss mask (0/1 as ids) */
    int append_eod;
    int add_special;       /* HFTokenizer: the template (Megatron's HF tokenize does);
                            * Llama2Tokenizer, Llama3Tokenizer: its BOS */
    int32_t eod;
    const chat_template *chat; /* TR_SFT_CHAT: how a conversation is written */
    const tr_tokenizer *tok;
} prep_spec;

/* Grow *p (an array of *cap items of `size` bytes, doubling from 64) to hold `need`. */
static inline int prep_reserve(void **p, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return TR_OK;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *q = c <= SIZE_MAX / size ? realloc(*p, c * size) : NULL;
    if (!q)
        return tr_fail(TR_ERR_NOMEM, "out of memory for a batch of %zu items", need);
    *p = q;
    *cap = c;
    return TR_OK;
}

/* prep_sft.c: one SFT JSON object (prompt/response pair or chat messages) into out[0] (ids)
 * and out[1] (mask), one sequence each; *bad (malloc'ed) says why a line is refused. */
int prep_encode_sft(const prep_spec *spec, tr_encoder *e, prep_batch *b, size_t i, void *root,
                    char **bad);
char *prep_message(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *prep_json_kind(const void *v);

/* Ids of every item of b (b->rc / b->msg on a failure; bad items get b->bad[i]). */
void prep_encode_batch(const prep_spec *spec, tr_encoder *e, prep_batch *b);

#endif
