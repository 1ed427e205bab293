/* A supervised fine-tuning dataset (data.dataset_type sft): PREFIX.bin/.idx (ids, one
 * document per example) and PREFIX_loss_mask.bin/.idx (its per-token weights, the same
 * sizes), as `trident preprocess --json-keys PROMPT,RESPONSE` writes them.
 *
 * Samples are packed sequences of seq_length + 1 tokens (tokens j and j+1 are input and
 * target at position j, as for the GPT dataset):
 *  - the split's examples (documents cut by data.split, as dataset.c cuts them) are put in a
 *    fixed order, a Fisher–Yates shuffle of stream PACK_STREAM + split, then packed first-fit
 *    in that order: an example goes to the first of the last PACK_WINDOW bins with room for
 *    it (a bin holds at most seq_length + 1 tokens), else it opens a new bin; a bin's examples
 *    keep their order (pack = 0: one example per bin). An example longer than seq_length + 1
 *    is cut to that many tokens (its first ones), alone in its bin.
 *  - the bins are the split's samples, shuffled per epoch as dataset.c shuffles samples
 *    (stream 4 * epoch + split), so sample g is a function of (g, seed, the files) alone.
 *  - in a bin, example k (from 0) fills the next L tokens; at position p of it (p < L):
 *    segment k, position id p - start, weight mask[p + 1 - start] when the target (token
 *    p + 1) is still the example's, else 0 (the step into the next example is never
 *    learned). The rest of the row is padding: token 0, weight 0, its own segment (k = number
 *    of examples), position ids counting from 0.
 * Attention restricted to the segment and positions restarting per example make a packed
 * example compute exactly what it would alone at the start of a row. */
#include "data/data_internal.h"

#include <stdlib.h>

#include "core/core.h"

#define PACK_STREAM ((uint64_t)1 << 40)
#define PACK_WINDOW 64 /* open bins first-fit looks at: O(examples x 64) */

typedef struct {
    uint64_t first_doc, n_docs;
    uint64_t *order;     /* [n_docs] examples (split-relative), grouped by bin */
    uint64_t *bin_first; /* [n_bins + 1] into order */
    uint64_t n_bins;
    uint64_t n_cut, n_tokens; /* examples cut to T + 1; tokens the bins hold */
    uint64_t *perm;      /* [n_bins] of perm_epoch */
    uint64_t perm_epoch;
    int have_perm;
} sft_split;

struct sft_data {
    token_store tok, mask;
    int T;
    uint64_t seed;
    sft_split split[3];
};

static const char *const split_names[3] = {"train", "validation", "test"};

static uint64_t doc_len(const sft_data *d, uint64_t doc)
{
    return token_store_doc_start(&d->tok, doc + 1) - token_store_doc_start(&d->tok, doc);
}

/* Fisher–Yates over perm[0..n) driven by tr_rand_uniform(seed, stream, i). */
static void shuffle(uint64_t *perm, uint64_t n, uint64_t seed, uint64_t stream)
{
    for (uint64_t i = 0; i < n; i++)
        perm[i] = i;
    for (uint64_t i = n; i-- > 1;) {
        uint64_t j = (uint64_t)(tr_rand_uniform(seed, stream, i) * (double)(i + 1));
        if (j > i)
            j = i;
        uint64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

static int make_bins(sft_data *d, int k, int pack)
{
    sft_split *s = &d->split[k];
    size_t n = s->n_docs + 1;
    uint64_t *order = malloc(n * sizeof *order), *bin_of = malloc(n * sizeof *bin_of);
    uint64_t *room = malloc(n * sizeof *room);
    s->order = malloc(n * sizeof *s->order);
    s->bin_first = calloc(n + 1, sizeof *s->bin_first);
    int rc = !order || !bin_of || !room || !s->order || !s->bin_first
                 ? tr_fail(TR_ERR_NOMEM, "out of memory packing %llu examples",
                           (unsigned long long)s->n_docs)
                 : TR_OK;
    if (!rc) {
        shuffle(order, s->n_docs, d->seed, PACK_STREAM + (uint64_t)k);
        uint64_t cap = (uint64_t)d->T + 1;
        s->n_bins = 0;
        for (uint64_t i = 0; i < s->n_docs; i++) { /* first fit over the newest bins */
            uint64_t L = doc_len(d, s->first_doc + order[i]), b = s->n_bins;
            if (L > cap) {
                L = cap;
                s->n_cut++;
            }
            s->n_tokens += L;
            for (uint64_t c = b > PACK_WINDOW ? b - PACK_WINDOW : 0; pack && c < s->n_bins; c++)
                if (room[c] >= L) {
                    b = c;
                    break;
                }
            if (b == s->n_bins)
                room[s->n_bins++] = cap;
            room[b] -= L;
            bin_of[i] = b;
            s->bin_first[b + 1]++;
        }
        for (uint64_t b = 0; b < s->n_bins; b++) /* counts -> starts; examples in order */
            s->bin_first[b + 1] += s->bin_first[b];
        for (uint64_t b = 0; b < s->n_bins; b++)
            room[b] = s->bin_first[b];
        for (uint64_t i = 0; i < s->n_docs; i++)
            s->order[room[bin_of[i]]++] = order[i];
    }
    free(order);
    free(bin_of);
    free(room);
    return rc;
}

/* Both files describe the same documents of the same lengths. */
static int check_pair(const sft_data *d)
{
    if (d->tok.n_docs != d->mask.n_docs)
        return tr_fail(TR_ERR_INVALID, "%s holds %llu documents but %s holds %llu: the loss mask "
                       "must come from the same `trident preprocess` run",
                       d->tok.path, (unsigned long long)d->tok.n_docs, d->mask.path,
                       (unsigned long long)d->mask.n_docs);
    for (uint64_t i = 0; i <= d->tok.n_docs; i++)
        if (token_store_doc_start(&d->tok, i) != token_store_doc_start(&d->mask, i))
            return tr_fail(TR_ERR_INVALID, "document %llu of %s has %llu tokens but its loss mask "
                           "in %s has %llu values", (unsigned long long)(i ? i - 1 : 0),
                           d->tok.path, (unsigned long long)(i ? doc_len(d, i - 1) : 0),
                           d->mask.path,
                           (unsigned long long)(i ? token_store_doc_start(&d->mask, i) -
                                                        token_store_doc_start(&d->mask, i - 1)
                                                  : 0));
    return TR_OK;
}

int sft_open(const char *prefix, const char *split, int seq_length, int vocab_size,
             uint64_t seed, int pack, sft_data **out)
{
    *out = NULL;
    if (seq_length < 1)
        return tr_fail(TR_ERR_CONFIG, "sequence length must be >= 1, got %d", seq_length);
    double w[3];
    int rc = data_parse_split(split, w);
    if (rc)
        return rc;
    sft_data *d = calloc(1, sizeof *d);
    size_t n = strlen(prefix) + 16;
    char *mask_prefix = malloc(n);
    if (!d || !mask_prefix) {
        free(d);
        free(mask_prefix);
        return tr_fail(TR_ERR_NOMEM, "out of memory opening %s", prefix);
    }
    snprintf(mask_prefix, n, "%s_loss_mask", prefix);
    d->T = seq_length;
    d->seed = seed;
    rc = indexed_open(prefix, vocab_size, &d->tok);
    if (!rc && (rc = indexed_open(mask_prefix, 2, &d->mask))) /* (0 or 1 each) */
        tr_fail_context(rc, "the loss mask of an SFT dataset (written by `trident preprocess "
                            "--json-keys PROMPT,RESPONSE`)");
    free(mask_prefix);
    if (!rc)
        rc = check_pair(d);
    uint64_t bound[4];
    if (!rc)
        data_split_bounds(d->tok.n_docs, w, bound);
    for (int k = 0; k < 3 && !rc; k++) {
        d->split[k].first_doc = bound[k];
        d->split[k].n_docs = bound[k + 1] - bound[k];
        rc = make_bins(d, k, pack);
    }
    if (rc) {
        sft_close(d);
        return rc;
    }
    *out = d;
    return TR_OK;
}

void sft_close(sft_data *d)
{
    if (!d)
        return;
    token_store_close(&d->tok);
    token_store_close(&d->mask);
    for (int k = 0; k < 3; k++) {
        free(d->split[k].order);
        free(d->split[k].bin_first);
        free(d->split[k].perm);
    }
    free(d);
}

uint64_t sft_num_samples(const sft_data *d, int split)
{
    return split >= 0 && split < 3 ? d->split[split].n_bins : 0;
}

const token_store *sft_store(const sft_data *d) { return &d->tok; }

void sft_info(const sft_data *d, int split, tr_sft_info *out)
{
    const sft_split *s = &d->split[split];
    *out = (tr_sft_info){s->n_docs, s->n_bins, s->n_cut, s->n_tokens};
}

int sft_sample(sft_data *d, int split, uint64_t g, int32_t *tokens, float *weights,
               int32_t *segments, int32_t *positions)
{
    if (split < 0 || split > 2)
        return tr_fail(TR_ERR_INVALID, "%s: split %d is not 0, 1 or 2", d->tok.path, split);
    sft_split *s = &d->split[split];
    if (!s->n_bins)
        return tr_fail(TR_ERR_INVALID, "%s: the %s split has no example", d->tok.path,
                       split_names[split]);
    uint64_t epoch = g / s->n_bins, bin;
    if (!s->have_perm || s->perm_epoch != epoch) {
        if (!s->perm && !(s->perm = malloc(s->n_bins * sizeof *s->perm)))
            return tr_fail(TR_ERR_NOMEM, "out of memory for a permutation of %llu samples",
                           (unsigned long long)s->n_bins);
        shuffle(s->perm, s->n_bins, d->seed, 4 * epoch + (uint64_t)split);
        s->perm_epoch = epoch;
        s->have_perm = 1;
    }
    bin = s->perm[g % s->n_bins];
    int T = d->T, pos = 0, k = 0;
    for (uint64_t i = s->bin_first[bin]; i < s->bin_first[bin + 1]; i++, k++) {
        uint64_t doc = s->first_doc + s->order[i], at = token_store_doc_start(&d->tok, doc);
        uint64_t L = doc_len(d, doc);
        if (L > (uint64_t)(T + 1 - pos))
            L = (uint64_t)(T + 1 - pos);
        for (uint64_t j = 0; j < L; j++) {
            int p = pos + (int)j;
            tokens[p] = (int32_t)token_store_token(&d->tok, at + j);
            if (p == T)
                break;
            if (weights)
                weights[p] = j + 1 < L ? (float)token_store_token(&d->mask, at + j + 1) : 0.0f;
            if (segments)
                segments[p] = k;
            if (positions)
                positions[p] = (int32_t)j;
        }
        pos += (int)L;
    }
    for (int p = pos; p <= T; p++) { /* padding */
        tokens[p] = 0;
        if (p == T)
            break;
        if (weights)
            weights[p] = 0.0f;
        if (segments)
            segments[p] = k;
        if (positions)
            positions[p] = p - pos;
    }
    return TR_OK;
}
