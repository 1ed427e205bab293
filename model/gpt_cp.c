/* Context parallelism (model/gpt.h tr_gpt_set_cp): each CP rank holds chunks r and 2 CP-1-r of
 * the 2 CP chunks of every sample (data/data.h). A layer's attention all-gathers the group's
 * keys and values (only those: the K and V units of each token, packed by gather_rows), places
 * them and this rank's own rows in sequence order, and runs each local chunk's query rows at
 * their global positions against the keys before them (kernels.h attention_rows_*: Llama 3's
 * all-gather scheme, exact). Backward gathers again, accumulates every chunk's dQ, dK, dV into
 * a sequence-order buffer and reduce-scatters the dK, dV units to their owners (the sum over
 * CP ranks); the owner's dQ stays local. Attention dropout drops each chunk's probabilities at
 * their global (sample, head, query, key) (kernels.h attention_rows_dropout_*). Nothing of the
 * gathered sequence is kept between forward and backward (one micro-batch's buffers, shared by
 * the layers).
 * Packed sequences (segments): a chunk's query rows run in pieces of one document each, a
 * piece's keys starting at its document's first global position (its rows' global position
 * minus their position id, which restarts at 0 with each document): the causal attention_rows
 * call on those keys is the document mask. 16-bit tables: the output and the qkv gradient are
 * rounded once each, where the one-process attention rounds them (attention_rows_* keep fp32:
 * their backward accumulates partial sums).
 * Sizes: Tl = s.T local tokens per sample, c = Tl / 2 per chunk, T = Tl * CP, W = QKVl. */
#include "model/gpt_internal.h"

#include <string.h>

#include "core/core.h"
#include "data/data.h"

void tr_gpt_shape_set_cp(tr_gpt_shape *s, int cp, int rank)
{
    s->cp_size = cp;
    s->cp_rank = rank;
    if (cp > 1)
        s->T /= cp;
}

int tr_gpt_set_cp(tr_gpt *g, tr_comm *cp_comm)
{
    const tr_gpt_shape *s = &g->s;
    int cp = gpt_cp_size(g);
    if (cp == 1)
        return cp_comm ? tr_fail(TR_ERR_INVALID, "a CP group given to a model without context "
                                 "parallelism") : TR_OK;
    if (!cp_comm || tr_comm_size(cp_comm) != cp || tr_comm_rank(cp_comm) != s->cp_rank)
        return tr_fail(TR_ERR_INVALID, "the context-parallel group must be rank %d of %d",
                       s->cp_rank, cp);
    if (s->T % 2)
        return tr_fail(TR_ERR_INVALID, "context parallelism: %d local tokens are not two chunks",
                       s->T);
    if (!g->k->attention_rows_forward || !g->k->attention_rows_backward || !g->k->gather_rows ||
        !g->k->scatter_add_rows)
        return tr_fail(TR_ERR_CONFIG, "the %s backend has no attention_rows kernels: context "
                       "parallelism runs on training.device cpu", g->k->name);
    if (s->attention_dropout > 0 &&
        (!g->k->attention_rows_dropout_forward || !g->k->attention_rows_dropout_backward))
        return tr_fail(TR_ERR_CONFIG, "the %s backend has no attention_rows_dropout kernels: "
                       "context parallelism with model.attention_dropout runs on "
                       "training.device cpu", g->k->name);
    if (gpt_atty16(g) || gpt_qkv16(g) || s->num_experts) /* (gpt_atty16: 0 at CP > 1) */
        return tr_fail(TR_ERR_CONFIG, "context parallelism runs fp32-storage attention without "
                       "experts");
    g->cp = cp_comm;
    return TR_OK;
}

void gpt_cp_free(tr_gpt *g)
{
    g->k->free(g->cp_full);
    g->k->free(g->cp_dfull);
    g->k->free(g->cp_kv);
    g->k->free(g->cp_kv_all);
    g->k->free(g->cp_idx);
    g->cp_full = g->cp_dfull = g->cp_kv = g->cp_kv_all = NULL;
    g->cp_idx = NULL;
    g->cp_B = 0;
}

int gpt_cp_positions(tr_gpt_acts *a)
{
    tr_gpt *g = a->g;
    int N = a->B * g->s.T, Tl = g->s.T, cp = gpt_cp_size(g);
    int32_t *pos = tr_alloc((size_t)N * sizeof *pos, "context-parallel positions");
    if (!pos)
        return TR_ERR_NOMEM;
    for (int n = 0; n < N; n++)
        pos[n] = tr_cp_position(Tl * cp, cp, g->s.cp_rank, n % Tl);
    int rc = tr_gpt_acts_set_packing(a, NULL, pos, NULL);
    tr_free(pos);
    return rc;
}

/* Sizes of one micro-batch of B, in HS-float units (a head's query, key or value of a token):
 * per token NGl groups of R+2 units; M_kv = this rank's K and V units; the rows' maps. */
typedef struct {
    int cp, Tl, c, T, R, units; /* units: per token */
    size_t n_kv, n_seq;          /* this rank's K/V units; units of (B, T) tokens */
} cp_sizes;

static cp_sizes sizes_of(const tr_gpt *g, int B)
{
    cp_sizes z = {.cp = gpt_cp_size(g), .Tl = g->s.T, .c = g->s.T / 2, .R = g->NHl / g->NGl};
    z.T = z.Tl * z.cp;
    z.units = g->NGl * (z.R + 2);
    z.n_kv = (size_t)B * z.Tl * g->NGl * 2;
    z.n_seq = (size_t)B * z.T * z.units;
    return z;
}

/* The three row maps (int32, in HS units): kv_pack (n_kv): this rank's K/V units in its qkv;
 * kv_full (cp n_kv): each gathered K/V unit's place in the sequence-order buffer; dq (B Tl
 * units): each unit of this rank's dqkv in dfull (queries) or in its tail (summed dK, dV). */
static int make_maps(tr_gpt *g, int B, const cp_sizes *z, int32_t *pack, int32_t *full,
                     int32_t *dq)
{
    int NG = g->NGl, r = g->s.cp_rank;
    if ((double)z->n_seq + (double)z->n_kv >= 2147483647.0)
        return tr_fail(TR_ERR_INVALID, "context parallelism: %zu head units per micro-batch: "
                       "more than the int32 row maps hold (a smaller micro-batch)", z->n_seq);
    for (int p = 0; p < z->cp; p++)
        for (int b = 0; b < B; b++)
            for (int i = 0; i < z->Tl; i++) {
                size_t t = (size_t)b * z->T + (size_t)tr_cp_position(z->T, z->cp, p, i);
                size_t n = (size_t)b * z->Tl + i;
                for (int gg = 0; gg < NG; gg++)
                    for (int u = 0; u < 2; u++) {
                        size_t k = (n * NG + gg) * 2 + u, unit = (size_t)gg * (z->R + 2) + z->R + u;
                        full[(size_t)p * z->n_kv + k] = (int32_t)(t * z->units + unit);
                        if (p == 0)
                            pack[k] = (int32_t)(n * z->units + unit);
                    }
                for (int unit = 0; p == r && unit < z->units; unit++) {
                    int gg = unit / (z->R + 2), u = unit % (z->R + 2);
                    dq[n * z->units + unit] =
                        u < z->R ? (int32_t)(t * z->units + unit)
                                 : (int32_t)(z->n_seq + (n * NG + gg) * 2 + (size_t)(u - z->R));
                }
            }
    return TR_OK;
}

/* The buffers of ensure_buffers: full and dfull (with its tail), kv and kv_all, the maps. */
static size_t buffer_bytes(const tr_gpt *g, const cp_sizes *z, int B)
{
    size_t HS = (size_t)g->HS, n_dq = (size_t)B * z->Tl * z->units;
    return (2 * z->n_seq + (z->cp + 2) * z->n_kv) * HS * sizeof(float) +
           ((z->cp + 1) * z->n_kv + n_dq) * sizeof(int32_t);
}

size_t gpt_cp_bytes(const tr_gpt *g, int B)
{
    if (gpt_cp_size(g) == 1)
        return 0;
    cp_sizes z = sizes_of(g, B);
    return buffer_bytes(g, &z, B);
}

static int ensure_buffers(tr_gpt *g, int B)
{
    if (B == g->cp_B)
        return TR_OK;
    gpt_cp_free(g);
    cp_sizes z = sizes_of(g, B);
    size_t HS = (size_t)g->HS, n_dq = (size_t)B * z.Tl * z.units;
    size_t n_idx = z.n_kv + z.cp * z.n_kv + n_dq;
    int32_t *host = tr_alloc(n_idx * sizeof *host, "context-parallel row maps");
    g->cp_full = g->k->alloc(z.n_seq * HS * sizeof(float));
    g->cp_dfull = g->k->alloc((z.n_seq + z.n_kv) * HS * sizeof(float));
    g->cp_kv = g->k->alloc(z.n_kv * HS * sizeof(float));
    g->cp_kv_all = g->k->alloc(z.cp * z.n_kv * HS * sizeof(float));
    g->cp_idx = g->k->alloc(n_idx * sizeof(int32_t));
    int rc = host && g->cp_full && g->cp_dfull && g->cp_kv && g->cp_kv_all && g->cp_idx
                 ? TR_OK
                 : tr_fail(TR_ERR_NOMEM, "out of memory for context-parallel attention (%zu MiB)",
                           buffer_bytes(g, &z, B) >> 20);
    if (!rc)
        rc = make_maps(g, B, &z, host, host + z.n_kv, host + z.n_kv + z.cp * z.n_kv);
    if (!rc)
        g->k->to_device(NULL, g->cp_idx, host, n_idx * sizeof(int32_t));
    tr_free(host);
    if (rc)
        gpt_cp_free(g);
    else
        g->cp_B = B;
    return rc;
}

/* The group's keys and values, and this rank's queries, in sequence order in cp_full: only
 * K and V units travel (all-gathered), placed by the kv_full map; this rank's own rows are
 * then copied whole (their K and V are the same values). */
static int gather_rows(tr_gpt *g, const float *qkv, int B)
{
    int rc = ensure_buffers(g, B);
    if (rc)
        return rc;
    cp_sizes z = sizes_of(g, B);
    const tr_kernels *k = g->k;
    size_t HS = (size_t)g->HS, W = (size_t)g->QKVl;
    k->gather_rows(NULL, g->cp_kv, qkv, g->cp_idx, (int)z.n_kv, g->HS);
    rc = tr_comm_allgather(g->cp, g->cp_kv, g->cp_kv_all, z.cp * z.n_kv * HS, TR_COMM_F32);
    if (rc)
        return tr_fail_context(rc, "context-parallel all-gather of keys and values");
    k->zero(NULL, g->cp_full, z.n_seq * HS * sizeof(float));
    k->scatter_add_rows(NULL, g->cp_full, g->cp_kv_all, g->cp_idx + z.n_kv, NULL,
                        (int)(z.cp * z.n_kv), g->HS);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < 2; h++) {
            size_t at = (size_t)b * z.T + (size_t)tr_cp_chunk(z.cp, g->s.cp_rank, h) * z.c;
            k->copy(NULL, g->cp_full + at * W, qkv + ((size_t)b * z.Tl + (size_t)h * z.c) * W,
                    (size_t)z.c * W * sizeof(float));
        }
    return TR_OK;
}
/* Sample b's dropout (layer l's attention probabilities), when on: its first sample b's. */
static int sample_dropout(const tr_gpt *g, int l, int b, tr_dropout *d)
{
    if (!gpt_attn_drop(g))
        return 0;
    *d = gpt_attention_dropout_site(g, l);
    d->first_sample += (uint64_t)b;
    return 1;
}

/* One attention_rows call: local rows [i0, i1) of sample b's local half h, against the keys
 * from global position s (0, or with packed sequences their document's first). */
typedef struct {
    int b, h, i0, i1, s;
} cp_run;

/* The micro-batch's runs in (sample, half, row) order, *count of them in *out (tr_free): one
 * per chunk, or with packed sequences one per document piece of a chunk (data/data.h
 * tr_cp_doc_starts, on host copies of the segments and position ids). */
static int make_runs(tr_gpt *g, int B, cp_run **out, int *count)
{
    int cp = gpt_cp_size(g), Tl = g->s.T, c = Tl / 2, n_runs = 0;
    size_t N = (size_t)B * Tl;
    if (g->segments && gpt_attn_drop(g))
        return tr_fail(TR_ERR_CONFIG, "context parallelism with packed sequences and "
                       "model.attention_dropout is not supported");
    if (g->segments && !g->positions)
        return tr_fail(TR_ERR_INVALID, "context parallelism: packed sequences without their "
                       "position ids");
    int32_t *ids = tr_alloc(3 * N * sizeof *ids, "packed-sequence ids"), *start = ids + 2 * N;
    cp_run *runs = tr_alloc(N * sizeof *runs, "context-parallel runs");
    if (!ids || !runs) {
        tr_free(ids);
        tr_free(runs);
        return TR_ERR_NOMEM;
    }
    int bad = -1;
    if (g->segments) {
        g->k->to_host(NULL, ids, g->segments, N * sizeof *ids);
        g->k->to_host(NULL, ids + N, g->positions, N * sizeof *ids);
        bad = tr_cp_doc_starts(ids, ids + N, B, Tl * cp, cp, g->s.cp_rank, start);
    } else
        memset(start, 0, N * sizeof *start);
    for (size_t n = 0; n < N && bad < 0; n++) /* a run: one chunk's rows of one start */
        if (n % c && start[n] == start[n - 1])
            runs[n_runs - 1].i1++;
        else
            runs[n_runs++] = (cp_run){.b = (int)(n / Tl), .h = (int)(n % Tl / c),
                                      .i0 = (int)(n % c), .i1 = (int)(n % c) + 1, .s = start[n]};
    int rc = bad < 0 ? TR_OK
                     : tr_fail(TR_ERR_INVALID, "context parallelism with packed sequences: "
                               "sample %d's token at global position %d has position id %d in "
                               "segment %d: position ids must restart at 0 with each segment "
                               "and count up by 1 inside it", bad / Tl,
                               tr_cp_position(Tl * cp, cp, g->s.cp_rank, bad % Tl), ids[N + bad],
                               ids[bad]);
    tr_free(ids);
    if (rc) {
        tr_free(runs);
        return rc;
    }
    *out = runs;
    *count = n_runs;
    return TR_OK;
}

/* Where the one-process attention's op rounds what it keeps: a 16-bit table's scale rounds what
 * it writes (kernels.h tr_kernels_cpu_rounded); in fp32 x 1 is exact. */
static void round_kept(const tr_gpt *g, float *x, size_t n) { g->k->scale(NULL, x, 1.0f, n); }

/* A run's query offset in its keys (the attention_rows q0), its keys' count, and its slices of
 * out (or dout) and lse: each run's lse (NHl, rows) at NHl i0 of its chunk's NHl c. */
typedef struct {
    int q0, Tk;
    size_t o, ls, kv;
} run_at;

static run_at run_place(const tr_gpt *g, const cp_run *u)
{
    int cp = gpt_cp_size(g), Tl = g->s.T, c = Tl / 2;
    run_at a = {.q0 = tr_cp_chunk(cp, g->s.cp_rank, u->h) * c + u->i0 - u->s};
    a.Tk = a.q0 + u->i1 - u->i0;
    a.o = ((size_t)u->b * Tl + (size_t)u->h * c + (size_t)u->i0) * g->Al;
    a.ls = ((size_t)u->b * 2 + (size_t)u->h) * g->NHl * c + (size_t)g->NHl * u->i0;
    a.kv = ((size_t)u->b * Tl * cp + (size_t)u->s) * g->QKVl;
    return a;
}

int gpt_cp_attention_forward(tr_gpt *g, float *out, float *lse, const float *qkv, int l, int B)
{
    cp_run *runs = NULL;
    int n_runs = 0, rc = make_runs(g, B, &runs, &n_runs);
    if (!rc)
        rc = gather_rows(g, qkv, B);
    const tr_kernels *k = g->k;
    for (int j = 0; j < n_runs && !rc; j++) {
        run_at a = run_place(g, &runs[j]);
        tr_dropout d;
        if (sample_dropout(g, l, runs[j].b, &d)) /* (whole chunks: s = 0) */
            k->attention_rows_dropout_forward(NULL, out + a.o, lse + a.ls, g->cp_full + a.kv,
                                              g->alibi, 1, a.Tk, a.q0, g->NHl, g->NGl, g->HS,
                                              g->s.T * gpt_cp_size(g), d);
        else
            k->attention_rows_forward(NULL, out + a.o, lse + a.ls, g->cp_full + a.kv, g->alibi,
                                      1, a.Tk, a.q0, g->NHl, g->NGl, g->HS);
    }
    tr_free(runs);
    if (!rc)
        round_kept(g, out, (size_t)B * g->s.T * g->Al);
    return rc;
}

int gpt_cp_attention_backward(tr_gpt *g, float *dqkv, const float *dout, const float *qkv,
                              const float *out, const float *lse, int l, int B)
{
    cp_run *runs = NULL;
    int n_runs = 0, rc = make_runs(g, B, &runs, &n_runs);
    if (!rc)
        rc = gather_rows(g, qkv, B);
    if (rc) {
        tr_free(runs);
        return rc;
    }
    cp_sizes z = sizes_of(g, B);
    size_t HS = (size_t)g->HS;
    const tr_kernels *k = g->k;
    k->zero(NULL, g->cp_dfull, z.n_seq * HS * sizeof(float));
    for (int j = 0; j < n_runs; j++) {
        run_at a = run_place(g, &runs[j]);
        tr_dropout d;
        if (sample_dropout(g, l, runs[j].b, &d))
            k->attention_rows_dropout_backward(NULL, g->cp_dfull + a.kv, dout + a.o,
                                               g->cp_full + a.kv, out + a.o, lse + a.ls,
                                               g->alibi, 1, a.Tk, a.q0, g->NHl, g->NGl, g->HS,
                                               z.T, d);
        else
            k->attention_rows_backward(NULL, g->cp_dfull + a.kv, dout + a.o, g->cp_full + a.kv,
                                       out + a.o, lse + a.ls, g->alibi, 1, a.Tk, a.q0, g->NHl,
                                       g->NGl, g->HS);
    }
    tr_free(runs);
    /* every rank's dK, dV units in rank order, summed at their owner into dfull's tail */
    k->gather_rows(NULL, g->cp_kv_all, g->cp_dfull, g->cp_idx + z.n_kv, (int)(z.cp * z.n_kv),
                   g->HS);
    rc = tr_comm_reduce_scatter(g->cp, g->cp_kv_all, g->cp_dfull + z.n_seq * HS,
                                z.cp * z.n_kv * HS, TR_COMM_F32, TR_COMM_SUM);
    if (rc)
        return tr_fail_context(rc, "context-parallel reduce-scatter of dK and dV");
    /* dqkv: the queries' gradient from dfull, the keys' and values' from the tail */
    k->gather_rows(NULL, dqkv, g->cp_dfull, g->cp_idx + z.n_kv + z.cp * z.n_kv,
                   B * z.Tl * z.units, g->HS);
    round_kept(g, dqkv, (size_t)B * z.Tl * g->QKVl);
    return TR_OK;
}
