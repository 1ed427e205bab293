/* tr_preprocess: inputs -> batches of items (JSON lines, or text documents) -> ids on
 * `workers` threads -> indexed datasets written in input order.
 *
 * The main thread fills up to `workers` batches (PREP_BATCH_BYTES of text or
 * PREP_BATCH_ITEMS items each): a set. With one worker it encodes the set itself and writes
 * it. With more, two sets take turns: `workers` threads encode one set (one batch each, each
 * with its own encoder) while the main thread reads the next set and writes the one before,
 * so reading, parsing and writing overlap the encoding. Sets are written in the order they
 * were read. Nothing an item's ids depend on (its batch, its thread, the encoder's cache)
 * changes with the number of workers, so neither do the files. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "data/data_internal.h"
#include "data/prep_input.h"
#include "data/prep_internal.h"

#define MAX_WORKERS 256
#define MAX_LINE_BYTES ((uint64_t)1 << 31) /* a JSON line is held whole */
#define SHOWN_BAD_LINES 10

typedef struct {
    const prep_spec *spec;
    tr_encoder *e;
    prep_batch *b;
} job;

typedef struct {
    doc_sink sink;            /* text documents arrive here */
    const tr_preprocess_options *o;
    prep_spec spec;
    int n_out;
    prep_batch *batch;        /* [n_sets * n_batches]: set s is batch + s * n_batches */
    int n_batches, cur;       /* batches per set; the one being filled in set `set` */
    int n_sets, set;          /* 1 (one worker) or 2 (encoding one while filling the other) */
    tr_encoder **enc;         /* [n_sets * n_batches], one per batch */
    /* the set being encoded on threads (fly_set -1: none) */
    int fly_set, fly_n;
    pthread_t th[MAX_WORKERS];
    int started[MAX_WORKERS];
    job jobs[MAX_WORKERS];
    indexed_writer w[PREP_MAX_KEYS];
    int file;                 /* the input being read */
    char *doc;                /* the text document being collected */
    size_t doc_len, doc_cap;
    tr_preprocess_stats *st;
    const char *chat_name, *tokenizer_model; /* tr_preprocess_chat's */
    chat_template *chat;      /* TR_SFT_CHAT */
    double t0, last_report;
    int write_failed;         /* a set's writing failed (a bad line, the output) */
} pipeline;

static void *run_job(void *arg)
{
    job *j = arg;
    prep_encode_batch(j->spec, j->e, j->b);
    return NULL;
}

/* Room for one more item in b: the per-item arrays grow together. */
static int batch_items(pipeline *p, prep_batch *b, size_t n)
{
    if (n <= b->cap_items)
        return TR_OK;
    size_t cap = b->cap_items ? 2 * b->cap_items : 256;
    prep_item *items = realloc(b->items, cap * sizeof *items);
    if (items)
        b->items = items;
    char **bad = items ? realloc(b->bad, cap * sizeof *bad) : NULL;
    if (bad)
        b->bad = bad;
    int ok = bad != NULL;
    for (int k = 0; k < p->n_out && ok; k++) {
        uint32_t *q = realloc(b->out[k].nseq, cap * sizeof *q);
        if (q)
            b->out[k].nseq = q;
        ok = q != NULL;
    }
    if (!ok)
        return tr_fail(TR_ERR_NOMEM, "out of memory for a batch of %zu items", n);
    b->cap_items = cap;
    return TR_OK;
}

static void batch_free(prep_batch *b)
{
    free(b->text);
    free(b->items);
    if (b->bad)
        for (size_t i = 0; i < b->n_items; i++)
            free(b->bad[i]);
    free(b->bad);
    for (int k = 0; k < PREP_MAX_KEYS; k++) {
        free(b->out[k].ids);
        free(b->out[k].nseq);
        free(b->out[k].len);
    }
    free(b->msg);
}

static void report(pipeline *p, int last)
{
    double now = tr_now(), dt = now - p->t0;
    if (p->o->progress_s <= 0 || dt <= 0 || (!last && now - p->last_report < p->o->progress_s))
        return;
    if (last && dt < p->o->progress_s)
        return; /* a short run needs no progress line */
    p->last_report = now;
    fprintf(stderr, "preprocess: %llu documents, %.1f MB read (%.1f MB/s), %llu tokens "
                    "(%.0f tokens/s)%s\n",
            (unsigned long long)p->st->documents, p->st->bytes / 1e6, p->st->bytes / 1e6 / dt,
            (unsigned long long)p->st->tokens, p->st->tokens / dt, last ? ", done" : "");
}

/* Write one encoded batch, item by item, to every output. */
static int write_batch(pipeline *p, prep_batch *b)
{
    size_t ids_at[PREP_MAX_KEYS] = {0}, len_at[PREP_MAX_KEYS] = {0};
    int rc = TR_OK;
    for (size_t i = 0; i < b->n_items && !rc; i++) {
        const prep_item *it = &b->items[i];
        if (b->bad[i]) {
            const char *file = p->o->inputs[it->file];
            if (!p->o->skip_bad_lines)
                return tr_fail(TR_ERR_INVALID, "%s:%llu: %s (--skip-bad-lines skips such lines)",
                               file, (unsigned long long)it->line, b->bad[i]);
            if (p->st->bad_lines++ < SHOWN_BAD_LINES)
                fprintf(stderr, "trident preprocess: skipped %s:%llu: %s\n", file,
                        (unsigned long long)it->line, b->bad[i]);
            continue;
        }
        if (!p->spec.n_keys && !b->out[0].nseq[i])
            continue; /* a text document without ids is not a document */
        for (int k = 0; k < p->n_out && !rc; k++) {
            prep_out *o = &b->out[k];
            for (uint32_t s = 0; s < o->nseq[i] && !rc; s++) {
                int64_t n = o->len[len_at[k]++];
                rc = iw_append_ids(&p->w[k], o->ids + ids_at[k], (size_t)n);
                if (!rc)
                    rc = iw_end_sequence(&p->w[k]);
                ids_at[k] += (size_t)n;
                if (!p->spec.sft || k == 0) /* a loss mask is not tokens */
                    p->st->tokens += (uint64_t)n;
            }
            if (!rc)
                rc = iw_end_document(&p->w[k]);
        }
        p->st->documents++;
    }
    return rc;
}

/* Write set s's first nb batches in order (each encoded), then empty them (memory kept). */
static int write_set(pipeline *p, int s, int nb)
{
    int rc = TR_OK;
    prep_batch *set = p->batch + (size_t)s * p->n_batches;
    for (int j = 0; j < nb && !rc; j++) {
        prep_batch *b = &set[j];
        if (b->rc)
            rc = tr_fail(b->rc, "%s", b->msg ? b->msg : "out of memory");
        else
            rc = write_batch(p, b);
    }
    p->write_failed |= rc != TR_OK;
    for (int j = 0; j < nb; j++) {
        prep_batch *b = &set[j];
        for (size_t i = 0; i < b->n_items; i++) {
            free(b->bad[i]);
            b->bad[i] = NULL;
        }
        b->n_items = b->text_len = 0;
    }
    report(p, 0);
    return rc;
}

/* Wait for the set on threads, if any; write it when `write` (not after a failure). */
static int land_flight(pipeline *p, int write)
{
    if (p->fly_set < 0)
        return TR_OK;
    prep_batch *set = p->batch + (size_t)p->fly_set * p->n_batches;
    tr_encoder **enc = p->enc + (size_t)p->fly_set * p->n_batches;
    for (int j = 0; j < p->fly_n; j++) {
        if (p->started[j]) {
            pthread_join(p->th[j], NULL);
            p->started[j] = 0;
        } else {
            prep_encode_batch(&p->spec, enc[j], &set[j]); /* no thread: do it here */
        }
    }
    int s = p->fly_set, n = p->fly_n;
    p->fly_set = -1;
    return write ? write_set(p, s, n) : TR_OK;
}

/* The set being filled is full (or the input ended): encode it, and write what is done. */
static int run_round(pipeline *p)
{
    int nb = p->cur + (p->cur < p->n_batches &&
                       p->batch[(size_t)p->set * p->n_batches + p->cur].n_items > 0);
    prep_batch *set = p->batch + (size_t)p->set * p->n_batches;
    tr_encoder **enc = p->enc + (size_t)p->set * p->n_batches;
    p->cur = 0;
    if (p->n_sets == 1) {
        for (int j = 0; j < nb; j++)
            prep_encode_batch(&p->spec, enc[j], &set[j]);
        return write_set(p, p->set, nb);
    }
    int rc = land_flight(p, 1); /* the set before, in order */
    if (rc || nb == 0)
        return rc;
    for (int j = 0; j < nb; j++) {
        p->jobs[j] = (job){&p->spec, enc[j], &set[j]};
        p->started[j] = pthread_create(&p->th[j], NULL, run_job, &p->jobs[j]) == 0;
    }
    p->fly_set = p->set, p->fly_n = nb;
    p->set ^= 1;
    return TR_OK;
}

/* One item (a JSON line or a text document) into the current batch. */
static int add_item(pipeline *p, const char *text, size_t len, uint64_t line)
{
    prep_batch *b = &p->batch[(size_t)p->set * p->n_batches + p->cur];
    int rc = batch_items(p, b, b->n_items + 1);
    if (!rc)
        rc = prep_reserve((void **)&b->text, &b->text_cap, b->text_len + len + 1, 1);
    if (rc)
        return rc;
    memcpy(b->text + b->text_len, text, len);
    b->items[b->n_items] = (prep_item){b->text_len, len, line, p->file};
    b->bad[b->n_items++] = NULL;
    b->text_len += len;
    p->st->bytes += len;
    if (b->text_len >= PREP_BATCH_BYTES || b->n_items >= PREP_BATCH_ITEMS) {
        if (++p->cur == p->n_batches)
            return run_round(p);
    }
    return TR_OK;
}

static int doc_add(doc_sink *s, const unsigned char *bytes, size_t n)
{
    pipeline *p = (pipeline *)s;
    int rc = prep_reserve((void **)&p->doc, &p->doc_cap, p->doc_len + n, 1);
    if (!rc) {
        memcpy(p->doc + p->doc_len, bytes, n);
        p->doc_len += n;
    }
    return rc;
}

static int doc_end(doc_sink *s)
{
    pipeline *p = (pipeline *)s;
    if (!p->doc_len)
        return TR_OK;
    int rc = add_item(p, p->doc, p->doc_len, 0);
    p->doc_len = 0;
    return rc;
}

/* JSON Lines: every line of f an item (lines of only whitespace skipped). */
static int read_json_lines(pipeline *p, FILE *f, const char *path)
{
    uint64_t lineno = 0;
    int rc = TR_OK, c = 0;
    while (!rc && c != EOF) {
        p->doc_len = 0;
        int blank = 1;
        while ((c = getc_unlocked(f)) != EOF && c != '\n') {
            if (p->doc_len == p->doc_cap &&
                (rc = prep_reserve((void **)&p->doc, &p->doc_cap, p->doc_len + 1, 1)))
                return rc;
            p->doc[p->doc_len++] = (char)c;
            blank &= c == ' ' || c == '\t' || c == '\r';
            if (p->doc_len >= MAX_LINE_BYTES)
                return tr_fail(TR_ERR_INVALID, "%s:%llu: a line longer than %llu bytes", path,
                               (unsigned long long)lineno + 1, (unsigned long long)MAX_LINE_BYTES);
        }
        if (c == EOF && (p->doc_len == 0 || ferror(f)))
            break; /* (a line cut by a read error is not a line) */
        lineno++;
        p->st->lines++;
        if (blank) {
            p->st->blank_lines++;
            continue;
        }
        rc = add_item(p, p->doc, p->doc_len, lineno);
    }
    p->doc_len = 0;
    if (!rc && ferror(f))
        rc = tr_fail(TR_ERR_IO, "cannot read %s: %s", path, strerror(errno ? errno : EIO));
    return rc;
}

/* A Parquet row, as its JSON line (prep_input_rows), into the current batch. */
static int add_row(void *ctx, const char *line, size_t len, uint64_t row)
{
    pipeline *p = ctx;
    p->st->lines++;
    return add_item(p, line, len, row);
}

static char *output_prefix(const tr_preprocess_options *o, int k)
{
    if (o->sft) { /* PREFIX (ids) and PREFIX_loss_mask */
        size_t n = strlen(o->output_prefix) + 16;
        char *s = malloc(n);
        if (s)
            snprintf(s, n, "%s%s", o->output_prefix, k ? "_loss_mask" : "");
        return s;
    }
    const char *key = o->n_json_keys ? o->json_keys[k] : NULL;
    size_t n = strlen(o->output_prefix) + (key ? strlen(key) + 16 : 0) + 1;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, key ? "%s_%s_document" : "%s", o->output_prefix, key);
    return s;
}

static int setup(pipeline *p, const tr_preprocess_options *o)
{
    const tr_tokenizer *t = o->tokenizer;
    int V = tr_tokenizer_vocab_size(t);
    p->o = o;
    p->n_out = o->sft ? 2 : o->n_json_keys ? o->n_json_keys : 1;
    p->spec = (prep_spec){o->json_keys, o->n_json_keys, o->sft,
                          o->n_json_keys && !o->sft ? o->append_eod : 1,
                          !strcmp(tr_tokenizer_type(t), "HFTokenizer") ||
                              !strcmp(tr_tokenizer_type(t), "Llama2Tokenizer") ||
                              !strcmp(tr_tokenizer_type(t), "Llama3Tokenizer"),
                          tr_tokenizer_eod(t),
                          NULL, t};
    if (o->sft && o->n_json_keys != (o->sft == TR_SFT_PAIR ? 2 : 1))
        return tr_fail(TR_ERR_CONFIG, "preprocess: supervised fine-tuning takes %s",
                       o->sft == TR_SFT_PAIR ? "two JSON keys (PROMPT,RESPONSE)"
                                             : "one JSON key (the messages list)");
    if (p->chat_name && o->sft != TR_SFT_CHAT)
        return tr_fail(TR_ERR_CONFIG, "--chat-template is for chat lists (--sft --json-keys "
                                      "MESSAGES)");
    if (o->sft == TR_SFT_CHAT) { /* a rendered template ends replies itself: no EOD */
        int rc = chat_template_open(p->chat_name, p->tokenizer_model, t, &p->chat);
        if (rc)
            return rc;
        p->spec.chat = p->chat;
        p->spec.append_eod = p->chat->kind == CHAT_CHATML_PIECES;
    }
    p->st->dtype_code = V < 65500 ? DT_UINT16 : DT_INT32;
    if (p->spec.append_eod && p->spec.eod < 0)
        return tr_fail(TR_ERR_CONFIG, "the tokenizer (%s) has no end-of-document token to append%s",
                       tr_tokenizer_type(t), o->n_json_keys ? " (drop --append-eod)" : "");
    p->n_batches = o->workers < 1 ? 1 : o->workers > MAX_WORKERS ? MAX_WORKERS : o->workers;
    p->n_sets = p->n_batches > 1 ? 2 : 1;
    p->fly_set = -1;
    int total = p->n_sets * p->n_batches;
    p->batch = calloc((size_t)total, sizeof *p->batch);
    p->enc = calloc((size_t)total, sizeof *p->enc);
    if (!p->batch || !p->enc)
        return tr_fail(TR_ERR_NOMEM, "out of memory for %d workers", p->n_batches);
    int rc = TR_OK;
    for (int j = 0; j < total && !rc; j++)
        rc = tr_encoder_create(t, &p->enc[j]);
    for (int k = 0; k < p->n_out && !rc; k++) {
        char *prefix = output_prefix(o, k);
        rc = prefix ? iw_begin_dtype(&p->w[k], prefix, o->sft && k ? DT_UINT8 : p->st->dtype_code)
                    : tr_fail(TR_ERR_NOMEM, "out of memory");
        free(prefix);
    }
    return rc;
}

static void teardown(pipeline *p)
{
    (void)land_flight(p, 0); /* a failure with a set still on threads: let them finish */
    for (int j = 0; j < p->n_sets * p->n_batches; j++) {
        if (p->batch)
            batch_free(&p->batch[j]);
        if (p->enc)
            tr_encoder_free(p->enc[j]);
    }
    for (int k = 0; k < p->n_out; k++)
        iw_abort(&p->w[k]); /* after a finish only frees */
    free(p->batch);
    free(p->enc);
    free(p->doc);
    chat_template_free(p->chat);
}

/* A failure of the reading (an input that cannot be opened or read, a line too long), rc: the
 * items read before it are encoded and written first, so that a bad line among them is the
 * error, as it is when one worker's batch closed before the failure. Which batches are closed
 * when reading fails depends on --workers; the error must not. */
static int earlier_items_first(pipeline *p, int rc)
{
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", tr_errmsg());
    int first = run_round(p);
    if (!first)
        first = land_flight(p, 1);
    return first ? first : tr_fail(rc, "%s", msg);
}

int tr_preprocess(const tr_preprocess_options *o, tr_preprocess_stats *stats)
{
    return tr_preprocess_chat(o, NULL, NULL, stats);
}

int tr_preprocess_chat(const tr_preprocess_options *o, const char *template_name,
                       const char *tokenizer_model, tr_preprocess_stats *stats)
{
    memset(stats, 0, sizeof *stats);
    if (o->n_inputs <= 0)
        return tr_fail(TR_ERR_INVALID, "preprocess: no input files");
    if (!o->output_prefix || !o->output_prefix[0])
        return tr_fail(TR_ERR_INVALID, "preprocess: empty output prefix");
    if (!o->tokenizer)
        return tr_fail(TR_ERR_INVALID, "preprocess: no tokenizer");
    if (o->n_json_keys > PREP_MAX_KEYS)
        return tr_fail(TR_ERR_CONFIG, "preprocess: at most %d JSON keys", PREP_MAX_KEYS);
    pipeline p = {.sink = {doc_add, doc_end}, .st = stats, .t0 = tr_now(), .fly_set = -1,
                  .chat_name = template_name, .tokenizer_model = tokenizer_model};
    p.last_report = p.t0;
    int rc = setup(&p, o), set_up = rc == TR_OK;
    for (int i = 0; i < o->n_inputs && !rc; i++) {
        prep_input *in; /* plain, gzip, zstd or Parquet */
        if ((rc = prep_input_open(o->inputs[i], &in)))
            break;
        p.file = i;
        errno = 0;
        FILE *f = prep_input_file(in);
        if (prep_input_kind_of(in) == PREP_IN_PARQUET)
            rc = o->n_json_keys ? prep_input_rows(in, o->json_keys, o->n_json_keys, add_row, &p)
                                : tr_fail(TR_ERR_CONFIG, "%s is a Parquet file: name the "
                                          "columns to read with --json-keys", o->inputs[i]);
        else
            rc = o->n_json_keys ? read_json_lines(&p, f, o->inputs[i])
                                : text_documents(f, o->inputs[i], o->split_on_blank_lines, &p.sink);
        rc = prep_input_close(in, rc);
    }
    if (rc && set_up && !p.write_failed && rc != TR_ERR_NOMEM)
        rc = earlier_items_first(&p, rc);
    if (!rc)
        rc = run_round(&p);
    if (!rc)
        rc = land_flight(&p, 1);
    for (int k = 0; k < p.n_out && !rc; k++)
        rc = iw_finish(&p.w[k]);
    if (!rc)
        report(&p, 1);
    teardown(&p);
    return rc;
}
