/* One data source: a validated token store cut into train/validation/test splits, and its
 * sample-index -> tokens mapping with a per-epoch Fisher–Yates shuffle. blend.c makes the
 * tr_data of one or more sources. */
#include "data/data_internal.h"

#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "core/core.h"

static const char *const split_names[3] = {"train", "validation", "test"};

typedef struct {
    uint64_t first_doc, n_docs;     /* documents of the split (Megatron) */
    uint64_t first_token, n_tokens; /* its token stream inside the store */
    uint64_t n_samples;
    int have_perm;
    uint64_t perm_epoch;
    uint32_t *perm32; /* permutation of the cached epoch, when n_samples <= UINT32_MAX */
    uint64_t *perm64; /* otherwise */
} split_state;

struct data_source {
    token_store store;
    int is_llmc;
    int seq_length;
    uint64_t seed, salt; /* salt: added to the shuffle's stream (0 for the first source) */
    split_state split[3];
};

/* "a,b,c": one to three finite non-negative numbers (train, validation, test; the missing
 * ones 0, as in Megatron-LM), separated by ',' or '/', not all zero: what the config's check
 * of data.split accepts (yaml/convert.c), so the two never disagree. */
int data_parse_split(const char *text, double w[3])
{
    if (!text)
        return tr_fail(TR_ERR_CONFIG, "data.split is missing: expected \"train,valid,test\" "
                                      "weights such as \"969,30,1\"");
    const char *p = text;
    int n = 0;
    for (;;) {
        char *end;
        if (n == 3)
            return tr_fail(TR_ERR_CONFIG,
                           "data.split \"%s\": more than three weights; expected "
                           "train,validation,test such as \"969,30,1\"",
                           text);
        while (*p == ' ' || *p == '\t')
            p++;
        double v = strtod(p, &end);
        if (end == p || !isfinite(v) || v < 0)
            return tr_fail(TR_ERR_CONFIG,
                           "data.split \"%s\": weight %d is not a non-negative number; expected "
                           "three comma-separated weights (train,validation,test) such as "
                           "\"969,30,1\"",
                           text, n + 1);
        w[n++] = v;
        p = end;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == '\0')
            break;
        if (*p != ',' && *p != '/')
            return tr_fail(TR_ERR_CONFIG,
                           "data.split \"%s\": unexpected '%c' after weight %d; expected up to "
                           "three comma-separated weights such as \"969,30,1\"",
                           text, *p, n);
        p++;
    }
    for (int k = n; k < 3; k++)
        w[k] = 0; /* "98,2" = "98,2,0"; "100" = "100,0,0" */
    if (w[0] + w[1] + w[2] <= 0)
        return tr_fail(TR_ERR_CONFIG, "data.split \"%s\": the weights are all zero", text);
    return TR_OK;
}

/* Cut n units (documents, or tokens of an llm.c shard) by the weights: boundary k is the
 * rounded cumulative share, so the counts sum to n; then a split with a non-zero weight but
 * no unit takes one from the largest split, when there are enough units to go round. */
void data_split_bounds(uint64_t n, const double w[3], uint64_t bound[4])
{
    long double total = (long double)w[0] + w[1] + w[2], cum = 0;
    uint64_t count[3];
    bound[0] = 0;
    for (int k = 0; k < 3; k++) {
        cum += w[k];
        long double b = roundl((long double)n * (cum / total));
        bound[k + 1] = k == 2 || b >= (long double)n ? n : (uint64_t)b;
        if (bound[k + 1] < bound[k])
            bound[k + 1] = bound[k];
    }
    int nonzero = 0;
    for (int k = 0; k < 3; k++) {
        count[k] = bound[k + 1] - bound[k];
        nonzero += w[k] > 0;
    }
    if (n >= (uint64_t)nonzero)
        for (int k = 0; k < 3; k++) {
            if (w[k] <= 0 || count[k] > 0)
                continue;
            int big = 0;
            for (int j = 1; j < 3; j++)
                if (count[j] > count[big])
                    big = j;
            count[big]--; /* >= 2 here: n >= nonzero and some weighted split is empty */
            count[k]++;
        }
    for (int k = 0; k < 3; k++)
        bound[k + 1] = bound[k] + count[k];
}

static int is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int ends_with(const char *s, const char *suffix)
{
    size_t ls = strlen(s), lx = strlen(suffix);
    return ls >= lx && !strcmp(s + ls - lx, suffix);
}

/* A Megatron prefix for `path`: PATH itself when PATH.idx exists, or PATH less a ".idx" /
 * ".bin" suffix when that names an index. Returns a malloc'ed prefix or NULL. */
static char *megatron_prefix(const char *path)
{
    size_t len = strlen(path);
    char *s = malloc(len + 5);
    if (!s)
        return NULL;
    memcpy(s, path, len);
    memcpy(s + len, ".idx", 5);
    if (is_file(s)) {
        s[len] = '\0';
        return s;
    }
    if (ends_with(path, ".idx") || ends_with(path, ".bin")) {
        memcpy(s + len - 4, ".idx", 5);
        if (is_file(s)) {
            s[len - 4] = '\0';
            return s;
        }
    }
    free(s);
    return NULL;
}

static int open_store(data_source *d, const char *path, const char *format, int vocab_size)
{
    if (!format || !format[0])
        format = "auto";
    int want_megatron = !strcmp(format, "megatron"), want_llmc = !strcmp(format, "llmc");
    if (!want_megatron && !want_llmc && strcmp(format, "auto"))
        return tr_fail(TR_ERR_CONFIG,
                       "data format \"%s\" is not one of auto, megatron, llmc", format);
    if (!want_llmc) {
        char *prefix = megatron_prefix(path);
        if (prefix) {
            int rc = indexed_open(prefix, vocab_size, &d->store);
            free(prefix);
            return rc;
        }
        if (want_megatron)
            return tr_fail(TR_ERR_CONFIG,
                           "no Megatron dataset at %s: %s.idx does not exist", path, path);
    }
    if (is_file(path)) {
        d->is_llmc = 1;
        return llmc_open(path, vocab_size, &d->store);
    }
    if (want_llmc)
        return tr_fail(TR_ERR_CONFIG, "no llm.c shard at %s: no such file", path);
    return tr_fail(TR_ERR_CONFIG,
                   "no dataset at %s: neither %s.idx (Megatron prefix) nor the file %s "
                   "(llm.c shard) exists",
                   path, path, path);
}

int source_open(const char *path, const char *format, const char *split, int seq_length,
                int vocab_size, uint64_t seed, uint64_t salt, data_source **out)
{
    *out = NULL;
    if (!path || !path[0])
        return tr_fail(TR_ERR_CONFIG, "data path is empty");
    if (seq_length <= 0)
        return tr_fail(TR_ERR_CONFIG, "seq_length must be positive, got %d", seq_length);
    if (vocab_size <= 0)
        return tr_fail(TR_ERR_CONFIG, "vocab_size must be positive, got %d", vocab_size);
    double w[3];
    int rc = data_parse_split(split, w);
    if (rc)
        return rc;
    data_source *d = tr_alloc(sizeof *d, "dataset");
    if (!d)
        return TR_ERR_NOMEM;
    d->seq_length = seq_length;
    d->seed = seed;
    d->salt = salt;
    rc = open_store(d, path, format, vocab_size);
    if (rc) {
        tr_free(d);
        return rc;
    }
    const token_store *s = &d->store;
    uint64_t bound[4];
    data_split_bounds(d->is_llmc ? s->n_tokens : s->n_docs, w, bound);
    for (int k = 0; k < 3; k++) {
        split_state *sp = &d->split[k];
        if (d->is_llmc) {
            sp->first_token = bound[k];
            sp->n_tokens = bound[k + 1] - bound[k];
            sp->first_doc = 0;
            sp->n_docs = sp->n_tokens ? 1 : 0;
        } else {
            sp->first_doc = bound[k];
            sp->n_docs = bound[k + 1] - bound[k];
            sp->first_token = token_store_doc_start(s, bound[k]);
            sp->n_tokens = token_store_doc_start(s, bound[k + 1]) - sp->first_token;
        }
        sp->n_samples = sp->n_tokens ? (sp->n_tokens - 1) / (uint64_t)seq_length : 0;
    }
    *out = d;
    return TR_OK;
}

void source_close(data_source *d)
{
    if (!d)
        return;
    for (int k = 0; k < 3; k++) {
        free(d->split[k].perm32);
        free(d->split[k].perm64);
    }
    token_store_close(&d->store);
    tr_free(d);
}

uint64_t source_num_samples(const data_source *d, int split)
{
    return split >= 0 && split < 3 ? d->split[split].n_samples : 0;
}

const token_store *source_store(const data_source *d) { return &d->store; }

void source_split_info(const data_source *d, int split, uint64_t *first_doc, uint64_t *n_docs,
                        uint64_t *first_token, uint64_t *n_tokens)
{
    static const split_state none;
    const split_state *sp = split >= 0 && split < 3 ? &d->split[split] : &none;
    if (first_doc)
        *first_doc = sp->first_doc;
    if (n_docs)
        *n_docs = sp->n_docs;
    if (first_token)
        *first_token = sp->first_token;
    if (n_tokens)
        *n_tokens = sp->n_tokens;
}

/* Fisher–Yates over 0..n-1 driven by tr_rand_uniform(seed, stream = epoch*4 + split, i). */
#define SHUFFLE(perm)                                                                          \
    do {                                                                                       \
        for (uint64_t i = 0; i < n; i++)                                                       \
            perm[i] = i;                                                                       \
        for (uint64_t i = n - 1; i > 0; i--) {                                                 \
            uint64_t j = (uint64_t)(tr_rand_uniform(d->seed, stream, i) * (double)(i + 1));    \
            if (j > i)                                                                         \
                j = i;                                                                         \
            uint64_t t = perm[i];                                                              \
            perm[i] = perm[j];                                                                 \
            perm[j] = t;                                                                       \
        }                                                                                      \
    } while (0)

static int ensure_permutation(data_source *d, int split, uint64_t epoch)
{
    split_state *sp = &d->split[split];
    if (sp->have_perm && sp->perm_epoch == epoch)
        return TR_OK;
    uint64_t n = sp->n_samples, stream = ((epoch << 2) | (uint64_t)split) + d->salt;
    int small = n <= UINT32_MAX;
    if (small ? !sp->perm32 : !sp->perm64) {
        size_t bytes;
        if (tr_mul_size((size_t)n, small ? sizeof(uint32_t) : sizeof(uint64_t), &bytes))
            return tr_fail(TR_ERR_NOMEM, "%s: %llu samples are too many to shuffle",
                           d->store.path, (unsigned long long)n);
        void *p = malloc(bytes);
        if (!p)
            return tr_fail(TR_ERR_NOMEM, "out of memory for the shuffle of %llu samples of %s",
                           (unsigned long long)n, d->store.path);
        if (small)
            sp->perm32 = p;
        else
            sp->perm64 = p;
    }
    if (small) {
        uint32_t *perm = sp->perm32;
        SHUFFLE(perm);
    } else {
        uint64_t *perm = sp->perm64;
        SHUFFLE(perm);
    }
    sp->have_perm = 1;
    sp->perm_epoch = epoch;
    return TR_OK;
}

static int check_split(const data_source *d, int split)
{
    if (split < 0 || split > 2)
        return tr_fail(TR_ERR_INVALID, "%s: split %d is not 0 (train), 1 (validation) or 2 "
                                       "(test)",
                       d->store.path, split);
    const split_state *sp = &d->split[split];
    if (sp->n_samples == 0)
        return tr_fail(TR_ERR_INVALID,
                       "%s: the %s split has no sample of %d tokens (it holds %llu tokens in "
                       "%llu documents)",
                       d->store.path, split_names[split], d->seq_length + 1,
                       (unsigned long long)sp->n_tokens, (unsigned long long)sp->n_docs);
    return TR_OK;
}

int source_sample_index(data_source *d, int split, uint64_t g, uint64_t *j)
{
    int rc = check_split(d, split);
    if (rc)
        return rc;
    split_state *sp = &d->split[split];
    uint64_t n = sp->n_samples, epoch = g / n, p = g % n;
    if ((rc = ensure_permutation(d, split, epoch)))
        return rc;
    *j = n <= UINT32_MAX ? sp->perm32[p] : sp->perm64[p];
    return TR_OK;
}

int source_sample(data_source *d, int split, uint64_t g, int32_t *tokens)
{
    uint64_t j;
    int rc = source_sample_index(d, split, g, &j);
    if (rc)
        return rc;
    const token_store *s = &d->store;
    uint64_t first = d->split[split].first_token + j * (uint64_t)d->seq_length;
    size_t count = (size_t)d->seq_length + 1;
    if (s->dtype == DT_UINT16) {
        const uint16_t *t = (const uint16_t *)(const void *)s->base + first;
        for (size_t i = 0; i < count; i++)
            tokens[i] = t[i];
    } else {
        for (size_t i = 0; i < count; i++)
            tokens[i] = (int32_t)token_store_token(s, first + i);
    }
    return TR_OK;
}

int source_locate(const data_source *d, int split, uint64_t offset, uint64_t *doc,
                   uint64_t *offset_in_doc)
{
    if (split < 0 || split > 2)
        return tr_fail(TR_ERR_INVALID, "%s: split %d is not 0, 1 or 2", d->store.path, split);
    const split_state *sp = &d->split[split];
    if (offset >= sp->n_tokens)
        return tr_fail(TR_ERR_INVALID, "%s: token %llu is past the end of the %s split (%llu "
                                       "tokens)",
                       d->store.path, (unsigned long long)offset, split_names[split],
                       (unsigned long long)sp->n_tokens);
    uint64_t global = sp->first_token + offset, dd = token_store_doc_of(&d->store, global);
    *doc = dd;
    *offset_in_doc = global - token_store_doc_start(&d->store, dd);
    return TR_OK;
}
