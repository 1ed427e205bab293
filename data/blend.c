/* tr_data: one or more data sources blended per split (Megatron's data_path lists), the
 * global-sample-index -> (source, source sample) mapping of data.h, and the run's dataset
 * from its config.
 *
 * Per split, batch b's counts are base_d + extra_d(b) (extra 0 or 1). extras_d(b), the
 * extras source d got in batches before b, is kept for the batch last asked for and
 * checkpointed every CKPT_EVERY batches, so a run walking forward costs O(sources) per batch
 * and any batch is at most CKPT_EVERY batches of replay away. The positions of the batch last
 * asked for are cached. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "data/data_internal.h"

#define CKPT_EVERY 256

typedef struct {
    int n;            /* sources in this split's blend */
    int *src;         /* their indices in d->src */
    double *w;        /* normalized weights */
    uint64_t n_samples;
    int64_t *base;    /* floor(w * GB) */
    double *frac;     /* w * GB - base */
    int extra;        /* GB - sum(base): sources given one more per batch */
    uint64_t cur_b;   /* extras[] counts the extras of batches [0, cur_b) */
    uint64_t *extras;
    uint64_t *ckpt;   /* extras at batches 0, CKPT_EVERY, ...: [n_ckpt][n] */
    uint64_t n_ckpt, cap_ckpt;
    int *order;       /* scratch: sources by deficit */
    double *deficit;
    int64_t *count;   /* the cached batch: per source, and its positions */
    int have_pos;
    uint64_t pos_b;
    int32_t *pos_src;   /* [GB] blend member of each position */
    uint64_t *pos_idx;  /* [GB] the member's own sample index */
} split_blend;

struct tr_data {
    data_source **src;
    int n_src;
    split_blend blend[3];
    int global_batch;
    char *name;
    sft_data *sft; /* data.dataset_type sft: the one source (n_src 0) */
};

static int fail_nomem(void) { return tr_fail(TR_ERR_NOMEM, "out of memory for a data blend"); }

/* Larger deficit first, then the lower index (qsort_r's comparison; deficits in arg). */
static int by_deficit(const void *a, const void *b, void *arg)
{
    const double *deficit = arg;
    int x = *(const int *)a, y = *(const int *)b;
    if (deficit[x] != deficit[y])
        return deficit[x] > deficit[y] ? -1 : 1;
    return x - y;
}

/* Which members get an extra sample in batch cur_b: the `extra` largest deficits among those
 * with a fractional share. Adds them to extras[] and moves to the next batch; marks them in
 * got[] when given. */
static void advance(split_blend *s, unsigned char *got)
{
    int m = 0;
    for (int d = 0; d < s->n; d++) {
        if (got)
            got[d] = 0;
        if (s->frac[d] > 0) {
            s->deficit[d] = (double)(s->cur_b + 1) * s->frac[d] - (double)s->extras[d];
            s->order[m++] = d;
        }
    }
    qsort_r(s->order, (size_t)m, sizeof *s->order, by_deficit, s->deficit);
    for (int k = 0; k < s->extra && k < m; k++) {
        s->extras[s->order[k]]++;
        if (got)
            got[s->order[k]] = 1;
    }
    s->cur_b++;
}

/* One batch forward, first keeping extras[] when the batch starts a checkpoint interval. */
static int step(split_blend *s, unsigned char *got)
{
    if (s->cur_b % CKPT_EVERY == 0 && s->cur_b / CKPT_EVERY == s->n_ckpt) {
        if (s->n_ckpt == s->cap_ckpt) {
            uint64_t cap = s->cap_ckpt ? 2 * s->cap_ckpt : 64;
            uint64_t *p = realloc(s->ckpt, cap * (uint64_t)s->n * sizeof *p);
            if (!p)
                return fail_nomem();
            s->ckpt = p;
            s->cap_ckpt = cap;
        }
        memcpy(s->ckpt + s->n_ckpt++ * (uint64_t)s->n, s->extras, (size_t)s->n * sizeof *s->extras);
    }
    advance(s, got);
    return TR_OK;
}

/* extras[] at the start of batch b. */
static int seek(split_blend *s, uint64_t b)
{
    int rc = TR_OK;
    if (s->cur_b > b) { /* back to the checkpoint at or before b (stored when passed) */
        uint64_t c = b / CKPT_EVERY;
        memcpy(s->extras, s->ckpt + c * (uint64_t)s->n, (size_t)s->n * sizeof *s->extras);
        s->cur_b = c * CKPT_EVERY;
    }
    while (!rc && s->cur_b < b)
        rc = step(s, NULL);
    return rc;
}

/* Positions of batch b: counts, then interleaved (each position to the member furthest
 * behind count * (q + 1) / GB, ties to the lower index), each with the member's sample. */
static int batch_positions(split_blend *s, uint64_t b, int GB)
{
    if (s->have_pos && s->pos_b == b)
        return TR_OK;
    int rc = seek(s, b);
    if (rc)
        return rc;
    unsigned char got[4096];
    int64_t taken[4096];
    uint64_t before[4096]; /* the members' samples before batch b */
    for (int d = 0; d < s->n; d++) {
        taken[d] = 0;
        before[d] = b * (uint64_t)s->base[d] + s->extras[d];
    }
    if ((rc = step(s, got))) /* batch b's extras (and cur_b = b + 1) */
        return rc;
    for (int d = 0; d < s->n; d++)
        s->count[d] = s->base[d] + got[d];
    for (int q = 0; q < GB; q++) {
        int best = -1;
        double best_err = 0;
        for (int d = 0; d < s->n; d++) {
            if (taken[d] >= s->count[d])
                continue;
            double err = (double)s->count[d] * (q + 1) / GB - (double)taken[d];
            if (best < 0 || err > best_err) {
                best = d;
                best_err = err;
            }
        }
        if (best < 0) /* (the counts add up to GB: not reached) */
            return tr_fail(TR_ERR_INTERNAL, "data blend: batch %llu's counts fall short of %d",
                           (unsigned long long)b, GB);
        s->pos_src[q] = best;
        s->pos_idx[q] = before[best] + (uint64_t)taken[best]++;
    }
    s->have_pos = 1;
    s->pos_b = b;
    return TR_OK;
}

static void blend_free(split_blend *s)
{
    free(s->src);
    free(s->w);
    free(s->base);
    free(s->frac);
    free(s->extras);
    free(s->ckpt);
    free(s->order);
    free(s->deficit);
    free(s->count);
    free(s->pos_src);
    free(s->pos_idx);
    memset(s, 0, sizeof *s);
}

/* Split k's blend over sources [first, first + n) of d with weights w (NULL: by samples). */
static int make_blend(tr_data *d, int k, int first, int n, const double *w, const char *const *paths)
{
    split_blend *s = &d->blend[k];
    int GB = d->global_batch;
    if (n > 4096)
        return tr_fail(TR_ERR_CONFIG, "a blend of %d datasets: at most 4096", n);
    s->src = calloc((size_t)n, sizeof *s->src);
    s->w = calloc((size_t)n, sizeof *s->w);
    s->base = calloc((size_t)n, sizeof *s->base);
    s->frac = calloc((size_t)n, sizeof *s->frac);
    s->extras = calloc((size_t)n, sizeof *s->extras);
    s->order = calloc((size_t)n, sizeof *s->order);
    s->deficit = calloc((size_t)n, sizeof *s->deficit);
    s->count = calloc((size_t)n, sizeof *s->count);
    if (!s->src || !s->w || !s->base || !s->frac || !s->extras || !s->order || !s->deficit ||
        !s->count)
        return fail_nomem();
    /* weights whose sum passes a double's range (each finite: 1e308 twice) scaled by the
     * largest first; other sums as they are, so that every blend keeps its samples */
    double total = 0, top = 0, scale = 1;
    for (int i = 0; i < n; i++) {
        double wi = w ? w[i] : (double)source_num_samples(d->src[first + i], k);
        total += wi, top = fmax(top, wi);
    }
    if (!isfinite(total) && top > 0)
        scale = 1 / top;
    total = 0;
    for (int i = 0; i < n; i++) {
        uint64_t ns = source_num_samples(d->src[first + i], k);
        double wi = (w ? w[i] : (double)ns) * scale;
        if (ns == 0 && w && w[i] > 0 && k == TR_SPLIT_TRAIN && n > 1)
            return tr_fail(TR_ERR_CONFIG, "%s (weight %g) has no training sample of the sequence "
                           "length + 1 tokens", paths[i], w[i]);
        if (ns == 0 || wi <= 0)
            continue; /* not in this split's blend */
        s->src[s->n] = first + i;
        s->w[s->n++] = wi;
        s->n_samples += ns;
        total += wi;
    }
    int64_t sum = 0;
    for (int i = 0; i < s->n; i++) {
        s->w[i] /= total;
        double share = s->w[i] * GB;
        s->base[i] = (int64_t)floor(share);
        s->frac[i] = share - (double)s->base[i];
        sum += s->base[i];
    }
    s->extra = (int)(GB - sum);
    if (s->n > 1) { /* a batch's positions: only a real blend needs them */
        s->pos_src = calloc((size_t)GB, sizeof *s->pos_src);
        s->pos_idx = calloc((size_t)GB, sizeof *s->pos_idx);
        if (!s->pos_src || !s->pos_idx)
            return fail_nomem();
    }
    return TR_OK;
}

static int add_source(tr_data *d, const char *path, const tr_data_spec *sp, const char *split)
{
    data_source **p = realloc(d->src, (size_t)(d->n_src + 1) * sizeof *p);
    if (!p)
        return fail_nomem();
    d->src = p;
    int rc = source_open(path, sp->format, split, sp->seq_length, sp->vocab_size, sp->seed,
                         (uint64_t)d->n_src << 40, &d->src[d->n_src]);
    if (rc)
        return rc; /* the message names the file */
    d->n_src++;
    return TR_OK;
}

static int make_name(tr_data *d)
{
    size_t len = 64;
    for (int i = 0; i < d->n_src; i++)
        len += strlen(source_store(d->src[i])->path) + 2;
    if (!(d->name = malloc(len)))
        return fail_nomem();
    size_t o = d->n_src == 1 ? 0 : (size_t)snprintf(d->name, len, "a blend of %d datasets (", d->n_src);
    for (int i = 0; i < d->n_src; i++)
        o += (size_t)snprintf(d->name + o, len - o, "%s%s", i ? ", " : "", source_store(d->src[i])->path);
    if (d->n_src > 1)
        snprintf(d->name + o, len - o, ")");
    return TR_OK;
}

int tr_data_open_spec(const tr_data_spec *sp, tr_data **out)
{
    *out = NULL;
    if (sp->global_batch <= 0)
        return tr_fail(TR_ERR_CONFIG, "global batch size must be positive, got %d", sp->global_batch);
    if (!sp->data_path.n && !sp->split_paths[0].n)
        return tr_fail(TR_ERR_CONFIG, "no data path");
    tr_data *d = calloc(1, sizeof *d);
    if (!d)
        return fail_nomem();
    d->global_batch = sp->global_batch;
    int rc = TR_OK;
    if (sp->data_path.n) {
        for (int i = 0; i < sp->data_path.n && !rc; i++)
            rc = add_source(d, sp->data_path.paths[i], sp, sp->split);
        for (int k = 0; k < 3 && !rc; k++)
            rc = make_blend(d, k, 0, sp->data_path.n, sp->data_path.weights, sp->data_path.paths);
    } else {
        static const char *const whole[3] = {"1,0,0", "0,1,0", "0,0,1"};
        for (int k = 0; k < 3 && !rc; k++) {
            int first = d->n_src;
            const tr_data_blend *l = &sp->split_paths[k];
            for (int i = 0; i < l->n && !rc; i++)
                rc = add_source(d, l->paths[i], sp, whole[k]);
            if (!rc)
                rc = make_blend(d, k, first, l->n, l->weights, l->paths);
        }
    }
    if (!rc)
        rc = make_name(d);
    if (rc) {
        tr_data_close(d);
        return rc;
    }
    *out = d;
    return TR_OK;
}

int tr_data_open(const char *path, const char *format, const char *split, int seq_length,
                 int vocab_size, uint64_t seed, tr_data **out)
{
    if (!path || !path[0]) {
        *out = NULL;
        return tr_fail(TR_ERR_CONFIG, "data path is empty");
    }
    tr_data_spec sp = {.data_path = {&path, NULL, 1}, .format = format, .split = split,
                       .seq_length = seq_length, .vocab_size = vocab_size, .global_batch = 1,
                       .seed = seed};
    return tr_data_open_spec(&sp, out);
}

int tr_data_open_sft(const char *prefix, const char *split, int seq_length, int vocab_size,
                     uint64_t seed, int pack, tr_data **out)
{
    *out = NULL;
    tr_data *d = calloc(1, sizeof *d);
    if (!d || !(d->name = strdup(prefix))) {
        free(d);
        return fail_nomem();
    }
    d->global_batch = 1;
    int rc = sft_open(prefix, split, seq_length, vocab_size, seed, pack, &d->sft);
    if (rc) {
        tr_data_close(d);
        return rc;
    }
    *out = d;
    return TR_OK;
}

int tr_data_is_sft(const tr_data *d) { return d->sft != NULL; }

void tr_data_sft_info(const tr_data *d, int split, tr_sft_info *out)
{
    *out = (tr_sft_info){0, 0, 0, 0};
    if (d->sft && split >= 0 && split < 3)
        sft_info(d->sft, split, out);
}

int tr_data_sample_sft(tr_data *d, int split, uint64_t g, int32_t *tokens, float *weights,
                       int32_t *segments, int32_t *positions)
{
    if (!d->sft)
        return tr_fail(TR_ERR_INTERNAL, "%s is not an SFT dataset", d->name);
    return sft_sample(d->sft, split, g, tokens, weights, segments, positions);
}

void tr_data_close(tr_data *d)
{
    if (!d)
        return;
    sft_close(d->sft);
    for (int i = 0; i < d->n_src; i++)
        source_close(d->src[i]);
    for (int k = 0; k < 3; k++)
        blend_free(&d->blend[k]);
    free(d->src);
    free(d->name);
    free(d);
}

const char *tr_data_name(const tr_data *d) { return d->name; }

uint64_t tr_data_num_samples(const tr_data *d, int split)
{
    if (d->sft)
        return sft_num_samples(d->sft, split);
    return split >= 0 && split < 3 ? d->blend[split].n_samples : 0;
}

uint64_t tr_data_num_documents(const tr_data *d)
{
    uint64_t n = d->sft ? sft_store(d->sft)->n_docs : 0;
    for (int i = 0; i < d->n_src; i++)
        n += source_store(d->src[i])->n_docs;
    return n;
}

uint64_t tr_data_num_tokens(const tr_data *d)
{
    uint64_t n = d->sft ? sft_store(d->sft)->n_tokens : 0;
    for (int i = 0; i < d->n_src; i++)
        n += source_store(d->src[i])->n_tokens;
    return n;
}

int tr_data_sample_source(tr_data *d, int split, uint64_t g, int *source, uint64_t *source_sample)
{
    if (split < 0 || split > 2)
        return tr_fail(TR_ERR_INVALID, "%s: split %d is not 0 (train), 1 (validation) or 2 "
                                       "(test)", d->name, split);
    if (d->sft)
        return tr_fail(TR_ERR_INVALID, "%s is an SFT dataset: its samples are packed examples "
                                       "(tr_data_sample_sft), not source samples", d->name);
    split_blend *s = &d->blend[split];
    if (s->n == 0) /* the source's own message: an empty split */
        return source_sample_index(d->src[0], split, 0, source_sample);
    if (s->n == 1) {
        *source = s->src[0];
        *source_sample = g;
        return TR_OK;
    }
    int rc = batch_positions(s, g / (uint64_t)d->global_batch, d->global_batch);
    if (rc)
        return rc;
    uint64_t q = g % (uint64_t)d->global_batch;
    *source = s->src[s->pos_src[q]];
    *source_sample = s->pos_idx[q];
    return TR_OK;
}

int tr_data_sample(tr_data *d, int split, uint64_t g, int32_t *tokens)
{
    if (d->sft)
        return sft_sample(d->sft, split, g, tokens, NULL, NULL, NULL);
    int src;
    uint64_t k;
    int rc = tr_data_sample_source(d, split, g, &src, &k);
    return rc ? rc : source_sample(d->src[src], split, k, tokens);
}

/* The single-source views (tests, tools): the first source. */
int tr_data_sample_index(tr_data *d, int split, uint64_t g, uint64_t *j)
{
    int src;
    uint64_t k;
    int rc = tr_data_sample_source(d, split, g, &src, &k);
    return rc ? rc : source_sample_index(d->src[src], split, k, j);
}

void tr_data_split_info(const tr_data *d, int split, uint64_t *first_doc, uint64_t *n_docs,
                        uint64_t *first_token, uint64_t *n_tokens)
{
    if (d->sft) { /* not a token stream */
        uint64_t *p[4] = {first_doc, n_docs, first_token, n_tokens};
        for (int i = 0; i < 4; i++)
            if (p[i])
                *p[i] = 0;
        return;
    }
    source_split_info(d->src[0], split, first_doc, n_docs, first_token, n_tokens);
}

int tr_data_locate(const tr_data *d, int split, uint64_t offset, uint64_t *doc,
                   uint64_t *offset_in_doc)
{
    if (d->sft)
        return tr_fail(TR_ERR_INVALID, "%s is an SFT dataset: no token stream to locate in",
                       d->name);
    return source_locate(d->src[0], split, offset, doc, offset_in_doc);
}
