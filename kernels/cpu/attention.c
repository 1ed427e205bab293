/* Causal multi-head self-attention, fused (the flash-attention scheme): no T x T tensor is
 * stored. Queries and keys are cut into tiles of TILE rows (the last shorter); a query tile
 * meets the key tiles at or left of its own (tiles above the diagonal are skipped, and with
 * packed sequences the tiles wholly before its segment), scores live for one query tile and
 * one block of keys at a time (on the stack: TILE x FWD_KEYS floats in forward, two TILE x
 * TILE in backward), so memory is O(T) per head: the output and each query row's log-sum-exp
 * of its scaled, masked scores (lse).
 * Forward, one (batch, head, query tile) unit at a time on the team: for each block of up to
 * FWD_KEYS keys (fewer, larger GEMMs than tile by tile: as fast as the materialised kernel
 * was) S = scale Q K^T (+ ALiBi), the online softmax (running row max m and sum l; the output
 * rows rescaled by exp(m_old - m_new) when the max grows), O += P V; at the end O /= l and
 * lse = m + log l.
 * Backward: D = rowsum(dO * O) per query row (the scratch), then per tile pair the
 * probabilities again, P = exp(S - lse), and dS = P (dO V^T - D): dV += P^T dO,
 * dK += scale dS^T Q, dQ += scale dS K. Without atomics: a (batch, group) unit owns the
 * gradient rows of its R query heads and of its key and value head and visits (head,
 * query tile, key tile) in order; with too few such units for the team, one pass over
 * (batch, group, key tile) units writes dK and dV and a second over (batch, head, query
 * tile) units writes dQ, each recomputing the tile pairs it needs. Both orders add the same
 * terms in the same sequence with the same calls (dK and dV of a key tile over (head, query
 * tile), dQ of a query tile over key tiles), so the choice and the schedule never change a
 * result, and the thread count neither. Tile GEMMs are OpenBLAS calls on one thread.
 * Layouts: qkv (B, T, NG, R+2, HS) (R = NH/NG query heads per group, then the group's key
 * and value; GPT-2's (B, T, NH, 3, HS) is NG = NH), out (B, T, NH, HS), lse and D
 * (B, NH, T). ALiBi adds slope_h * (j - i) to the scaled scores. Packed sequences
 * (segments): query t sees keys j <= t of its own contiguous run, in forward and backward.
 * Dropout on the probabilities (attention_gqa_dropout_*): forward multiplies each block's
 * exponentials by keep * scale after adding them to l (lse stays the undropped one) and before
 * O += P V; backward recomputes the mask per tile: dS = P (keep scale dO V^T - D), dV reads
 * P keep scale (D = rowsum(dO * O) of the dropped O: kernels.h says why that holds). */
#include "kernels/cpu/cpu_ops.h"

#include <math.h>
#include <string.h>

#define TILE 64
#define FWD_KEYS 256 /* forward: keys per score block (a multiple of TILE) */

static int min_int(int a, int b) { return a < b ? a : b; }
static int max_int(int a, int b) { return a > b ? a : b; }

/* One row of probabilities in place: row[0..t] are scaled scores, row[t+1..T) becomes 0
 * (generation's decode). */
static void softmax_causal_row(float *restrict row, int t, int T)
{
    float mx = cpu_max_f32(row, t + 1, -INFINITY);
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum) simdlen(CPU_SIMDLEN)
    for (int j = 0; j <= t; j++) {
        float e = cpu_expf(row[j] - mx);
        row[j] = e;
        sum += e;
    }
    float inv = 1.0f / sum;
#pragma omp simd
    for (int j = 0; j <= t; j++)
        row[j] *= inv;
    for (int j = t + 1; j < T; j++)
        row[j] = 0.0f;
}

typedef struct {
    int T, NH, HS, C, C3;
    float scale;
    int NG, R;          /* query groups, query heads per group */
    const float *alibi; /* NULL or NH slopes */
    const int32_t *seg; /* NULL or (B, T) segment ids of packed sequences */
    const tr_dropout *drop; /* NULL or dropout on the probabilities */
} dims;

static dims make_dims(int T, int NH, int HS)
{
    dims d = {T, NH, HS, NH * HS, 3 * NH * HS, 1.0f / sqrtf((float)HS), NH, 1, NULL, NULL, NULL};
    return d;
}

static dims make_gqa_dims(int T, int NH, int NG, int HS, const float *alibi)
{
    dims d = make_dims(T, NH, HS);
    d.NG = NG;
    d.R = NH / NG;
    d.C3 = NG * (d.R + 2) * HS;
    d.alibi = alibi;
    return d;
}

/* Offsets inside a token row of qkv: query head h, and the key of h's group (value: + HS). */
static size_t q_offset(const dims *d, int h)
{
    return (size_t)(h / d->R) * (d->R + 2) * d->HS + (size_t)(h % d->R) * d->HS;
}

static size_t k_offset(const dims *d, int h)
{
    return (size_t)(h / d->R) * (d->R + 2) * d->HS + (size_t)d->R * d->HS;
}

/* First key of each query row r0 .. r1-1's segment (0 without segments) into s0. */
static void segment_starts(const dims *d, int b, int r0, int r1, int *s0)
{
    const int32_t *sg = d->seg ? d->seg + (size_t)b * d->T : NULL;
    if (!sg) {
        for (int t = r0; t < r1; t++)
            s0[t - r0] = 0;
        return;
    }
    int s = r0;
    while (s > 0 && sg[s - 1] == sg[r0])
        s--;
    for (int t = r0; t < r1; t++) {
        if (t > r0 && sg[t] != sg[t - 1])
            s = t;
        s0[t - r0] = s;
    }
}

/* S (r1-r0, c1-c0; row stride ld) = scale Q[r0:r1] K[c0:c1]^T (+ ALiBi of head h), the
 * entries outside each row t's keys [s0, t] set to -INFINITY. */
static void tile_scores(const dims *d, float *S, int ld, const float *q, const float *k, int h,
                        int r0, int r1, int c0, int c1, const int *s0)
{
    int rows = r1 - r0, cols = c1 - c0;
    cpu_gemm_serial(0, 1, rows, cols, d->HS, d->scale, q + (size_t)r0 * d->C3, d->C3,
                    k + (size_t)c0 * d->C3, d->C3, 0.0f, S, ld);
    for (int i = 0; i < rows; i++) {
        int t = r0 + i;
        float *restrict row = S + (size_t)i * ld;
        /* the row's keys in this tile: [lo, hi) (empty when its segment starts later) */
        int lo = min_int(max_int(s0[i], c0), c1) - c0;
        int hi = max_int(lo, min_int(t, c1 - 1) - c0 + 1);
        if (d->alibi) {
            float slope = d->alibi[h];
            for (int j = lo; j < hi; j++)
                row[j] += slope * (float)(c0 + j - t);
        }
        for (int j = 0; j < lo; j++)
            row[j] = -INFINITY;
        for (int j = hi; j < cols; j++)
            row[j] = -INFINITY;
    }
}

typedef struct {
    dims d;
    float *out, *lse, *dqkv, *D;
    const float *qkv, *dout, *cout, *clse;
    int tiles;  /* query (and key) tiles: ceil(T / TILE) */
    int pairs;  /* (batch, head) pairs */
    int groups; /* (batch, group) pairs */
} att_args;

/* Forward of query tile qt of pair bh. */
static void forward_tile(const att_args *a, int bh, int qt)
{
    const dims *d = &a->d;
    int T = d->T, HS = d->HS, C = d->C, C3 = d->C3, b = bh / d->NH, h = bh % d->NH;
    const float *q = a->qkv + (size_t)b * T * C3 + q_offset(d, h);
    const float *k = a->qkv + (size_t)b * T * C3 + k_offset(d, h), *v = k + HS;
    float *o = a->out + (size_t)b * T * C + (size_t)h * HS, *lse = a->lse + (size_t)bh * T;
    int r0 = qt * TILE, r1 = min_int(T, r0 + TILE), rows = r1 - r0;
    int s0[TILE];
    float m[TILE], l[TILE], S[TILE * FWD_KEYS];
    segment_starts(d, b, r0, r1, s0);
    for (int i = 0; i < rows; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
        memset(o + (size_t)(r0 + i) * C, 0, (size_t)HS * sizeof(float));
    }
    /* key blocks of FWD_KEYS from the tile of the segment's first key to the diagonal */
    for (int c0 = s0[0] / TILE * TILE; c0 < r1; c0 += FWD_KEYS) {
        int c1 = min_int(r1, c0 + FWD_KEYS), cols = c1 - c0;
        tile_scores(d, S, FWD_KEYS, q, k, h, r0, r1, c0, c1, s0);
        for (int i = 0; i < rows; i++) {
            float *restrict row = S + (size_t)i * FWD_KEYS;
            float mx = cpu_max_f32(row, cols, -INFINITY);
            if (mx == -INFINITY) { /* no key of this row here */
                memset(row, 0, (size_t)cols * sizeof(float));
                continue;
            }
            float mnew = mx > m[i] ? mx : m[i], sum = 0.0f;
#pragma omp simd reduction(+ : sum) simdlen(CPU_SIMDLEN)
            for (int j = 0; j < cols; j++) {
                float e = cpu_expf(row[j] - mnew); /* -INFINITY (masked) gives 0 */
                row[j] = e;
                sum += e;
            }
            float corr = cpu_expf(m[i] - mnew);
            if (corr != 1.0f) {
                float *restrict orow = o + (size_t)(r0 + i) * C;
#pragma omp simd
                for (int e = 0; e < HS; e++)
                    orow[e] *= corr;
            }
            l[i] = l[i] * corr + sum;
            m[i] = mnew;
            if (d->drop) /* O gathers the dropped probabilities; l is the undropped sum */
                cpu_dropout_probs(d->drop, d->T, b, h, r0 + i, c0, row, cols);
        }
        /* O[r0:r1] += P V[c0:c1] */
        cpu_gemm_serial(0, 0, rows, HS, cols, 1.0f, S, FWD_KEYS, v + (size_t)c0 * C3, C3, 1.0f,
                        o + (size_t)r0 * C, C);
    }
    for (int i = 0; i < rows; i++) { /* every row saw its own key: l > 0 */
        float inv = 1.0f / l[i], *restrict orow = o + (size_t)(r0 + i) * C;
#pragma omp simd
        for (int e = 0; e < HS; e++)
            orow[e] *= inv;
        lse[r0 + i] = m[i] + logf(l[i]);
    }
}

static void forward_unit(void *ctx, size_t u) /* the last (largest) query tiles first */
{
    const att_args *a = ctx;
    forward_tile(a, (int)(u % a->pairs), a->tiles - 1 - (int)(u / a->pairs));
}

/* Backward of one tile pair (query tile qt, key tile c) of pair bh: P = exp(S - lse) and
 * dS = P (dO V^T - D) (rows x cols, row stride TILE). */
static void tile_probs(const att_args *a, int bh, int qt, int c, const int *s0, float *P,
                       float *dS)
{
    const dims *d = &a->d;
    int T = d->T, HS = d->HS, C = d->C, C3 = d->C3, b = bh / d->NH, h = bh % d->NH;
    const float *q = a->qkv + (size_t)b * T * C3 + q_offset(d, h);
    const float *k = a->qkv + (size_t)b * T * C3 + k_offset(d, h), *v = k + HS;
    const float *dO = a->dout + (size_t)b * T * C + (size_t)h * HS;
    const float *lse = a->clse + (size_t)bh * T, *D = a->D + (size_t)bh * T;
    int r0 = qt * TILE, r1 = min_int(T, r0 + TILE), c0 = c * TILE, c1 = min_int(T, c0 + TILE);
    int rows = r1 - r0, cols = c1 - c0;
    tile_scores(d, P, TILE, q, k, h, r0, r1, c0, c1, s0);
    cpu_gemm_serial(0, 1, rows, cols, HS, 1.0f, dO + (size_t)r0 * C, C, v + (size_t)c0 * C3,
                    C3, 0.0f, dS, TILE);
    for (int i = 0; i < rows; i++) {
        float *restrict p = P + (size_t)i * TILE, *restrict ds = dS + (size_t)i * TILE;
        float L = lse[r0 + i], Dt = D[r0 + i];
        if (d->drop) { /* dS = P (keep scale dO V^T - D); dV reads P keep scale */
            float mk[TILE];
            for (int j = 0; j < cols; j++)
                mk[j] = 1.0f;
            cpu_dropout_probs(d->drop, d->T, b, h, r0 + i, c0, mk, cols);
            for (int j = 0; j < cols; j++) {
                float e = cpu_expf(p[j] - L);
                p[j] = e * mk[j];
                ds[j] = e * (mk[j] * ds[j] - Dt);
            }
            continue;
        }
#pragma omp simd simdlen(CPU_SIMDLEN)
        for (int j = 0; j < cols; j++) {
            float e = cpu_expf(p[j] - L); /* masked: 0 */
            p[j] = e;
            ds[j] = e * (ds[j] - Dt);
        }
    }
}

/* dV[c] += P^T dO[qt], dK[c] += scale dS^T Q[qt] for head h (its group's key/value rows). */
static void add_key_grads(const att_args *a, int bh, int qt, int c, const float *P,
                          const float *dS)
{
    const dims *d = &a->d;
    int T = d->T, HS = d->HS, C = d->C, C3 = d->C3, b = bh / d->NH, h = bh % d->NH;
    int r0 = qt * TILE, rows = min_int(T, r0 + TILE) - r0;
    int c0 = c * TILE, cols = min_int(T, c0 + TILE) - c0;
    const float *q = a->qkv + (size_t)b * T * C3 + q_offset(d, h);
    float *dk = a->dqkv + (size_t)b * T * C3 + k_offset(d, h), *dv = dk + HS;
    const float *dO = a->dout + (size_t)b * T * C + (size_t)h * HS;
    cpu_gemm_serial(1, 0, cols, HS, rows, 1.0f, P, TILE, dO + (size_t)r0 * C, C, 1.0f,
                    dv + (size_t)c0 * C3, C3);
    cpu_gemm_serial(1, 0, cols, HS, rows, d->scale, dS, TILE, q + (size_t)r0 * C3, C3, 1.0f,
                    dk + (size_t)c0 * C3, C3);
}

/* dQ[qt] += scale dS K[c] */
static void add_query_grads(const att_args *a, int bh, int qt, int c, const float *dS)
{
    const dims *d = &a->d;
    int T = d->T, C3 = d->C3, b = bh / d->NH, h = bh % d->NH;
    int r0 = qt * TILE, rows = min_int(T, r0 + TILE) - r0;
    int c0 = c * TILE, cols = min_int(T, c0 + TILE) - c0;
    const float *k = a->qkv + (size_t)b * T * C3 + k_offset(d, h);
    float *dq = a->dqkv + (size_t)b * T * C3 + q_offset(d, h);
    cpu_gemm_serial(0, 0, rows, d->HS, cols, d->scale, dS, TILE, k + (size_t)c0 * C3, C3, 1.0f,
                    dq + (size_t)r0 * C3, C3);
}

/* Zero rows [r0, r1) of HS floats at p (row stride C3). */
static void zero_rows(float *p, int r0, int r1, int HS, int C3)
{
    for (int t = r0; t < r1; t++)
        memset(p + (size_t)t * C3, 0, (size_t)HS * sizeof(float));
}

/* D[bh, t] = dO[t] . O[t] for the T rows of pair bh. */
static void rowdot_pair(void *ctx, size_t bh_)
{
    const att_args *a = ctx;
    const dims *d = &a->d;
    int bh = (int)bh_, b = bh / d->NH, h = bh % d->NH;
    for (int t = 0; t < d->T; t++) {
        const float *restrict o = a->cout + ((size_t)b * d->T + t) * d->C + (size_t)h * d->HS;
        const float *restrict g = a->dout + ((size_t)b * d->T + t) * d->C + (size_t)h * d->HS;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int e = 0; e < d->HS; e++)
            s += o[e] * g[e];
        a->D[(size_t)bh * d->T + t] = s;
    }
}

/* The whole backward of (batch, group) pair bg: every gradient row of its heads. */
static void backward_group(void *ctx, size_t bg)
{
    const att_args *a = ctx;
    const dims *d = &a->d;
    int b = (int)bg / d->NG, g = (int)bg % d->NG, T = d->T, HS = d->HS, C3 = d->C3;
    float *row0 = a->dqkv + (size_t)b * T * C3;
    int s0[TILE];
    float P[TILE * TILE], dS[TILE * TILE];
    for (int i = 0; i < d->R; i++)
        zero_rows(row0 + q_offset(d, g * d->R + i), 0, T, HS, C3);
    zero_rows(row0 + k_offset(d, g * d->R), 0, T, 2 * HS, C3);
    for (int i = 0; i < d->R; i++) {
        int bh = b * d->NH + g * d->R + i;
        for (int qt = 0; qt < a->tiles; qt++) {
            int r0 = qt * TILE;
            segment_starts(d, b, r0, min_int(T, r0 + TILE), s0);
            for (int c = s0[0] / TILE; c <= qt; c++) {
                tile_probs(a, bh, qt, c, s0, P, dS);
                add_key_grads(a, bh, qt, c, P, dS);
                add_query_grads(a, bh, qt, c, dS);
            }
        }
    }
}

/* dK, dV of key tile c of (batch, group) pair bg: (head, query tile) in order. */
static void backward_key_tile(void *ctx, size_t u) /* the first (largest) key tiles first */
{
    const att_args *a = ctx;
    const dims *d = &a->d;
    int bg = (int)(u % a->groups), c = (int)(u / a->groups), b = bg / d->NG, g = bg % d->NG;
    int T = d->T, c0 = c * TILE, c1 = min_int(T, c0 + TILE);
    int s0[TILE];
    float P[TILE * TILE], dS[TILE * TILE];
    zero_rows(a->dqkv + (size_t)b * T * d->C3 + k_offset(d, g * d->R), c0, c1, 2 * d->HS, d->C3);
    for (int i = 0; i < d->R; i++) {
        int bh = b * d->NH + g * d->R + i;
        for (int qt = c; qt < a->tiles; qt++) {
            int r0 = qt * TILE;
            segment_starts(d, b, r0, min_int(T, r0 + TILE), s0);
            if (c < s0[0] / TILE)
                continue; /* the key tile lies wholly before these queries' segments */
            tile_probs(a, bh, qt, c, s0, P, dS);
            add_key_grads(a, bh, qt, c, P, dS);
        }
    }
}

/* dQ of query tile qt of pair bh: key tiles in order. */
static void backward_query_tile(void *ctx, size_t u) /* the last (largest) query tiles first */
{
    const att_args *a = ctx;
    const dims *d = &a->d;
    int bh = (int)(u % a->pairs), qt = a->tiles - 1 - (int)(u / a->pairs), b = bh / d->NH;
    int T = d->T, r0 = qt * TILE, r1 = min_int(T, r0 + TILE);
    int s0[TILE];
    float P[TILE * TILE], dS[TILE * TILE];
    zero_rows(a->dqkv + (size_t)b * T * d->C3 + q_offset(d, bh % d->NH), r0, r1, d->HS, d->C3);
    segment_starts(d, b, r0, r1, s0);
    for (int c = s0[0] / TILE; c <= qt; c++) {
        tile_probs(a, bh, qt, c, s0, P, dS);
        add_query_grads(a, bh, qt, c, dS);
    }
}

/* Whole (batch, group) pairs per piece when there are at least this many per thread. */
#define PAIRS_PER_THREAD 4

/* Run fn over [0, n) on the team, or in order on the caller when the work is small. */
static void run(int par, size_t n, void (*fn)(void *, size_t), void *ctx)
{
    if (par) {
        tr_kernels_cpu_parallel_for(n, fn, ctx);
        return;
    }
    for (size_t i = 0; i < n; i++)
        fn(ctx, i);
}

static att_args make_args(const dims *d, int B)
{
    att_args a = {.d = *d, .tiles = (d->T + TILE - 1) / TILE, .pairs = B * d->NH,
                  .groups = B * d->NG};
    return a;
}

static int parallel(const att_args *a)
{
    return (double)a->pairs * a->d.T * a->d.T * a->d.HS >= (double)CPU_PAR_MIN * 8;
}

static void attention_forward(const dims *d, float *out, float *lse, const float *qkv, int B)
{
    att_args a = make_args(d, B);
    a.out = out, a.lse = lse, a.qkv = qkv;
    run(parallel(&a), (size_t)a.pairs * a.tiles, forward_unit, &a);
}

static void attention_backward(const dims *d, float *dqkv, float *D, const float *dout,
                               const float *qkv, const float *out, const float *lse, int B)
{
    att_args a = make_args(d, B);
    a.dqkv = dqkv, a.D = D, a.dout = dout, a.qkv = qkv, a.cout = out, a.clse = lse;
    int par = parallel(&a);
    run(par, (size_t)a.pairs, rowdot_pair, &a);
    if (!par || a.groups >= PAIRS_PER_THREAD * tr_kernels_cpu_threads()) {
        run(par, (size_t)a.groups, backward_group, &a);
        return;
    }
    run(par, (size_t)a.groups * a.tiles, backward_key_tile, &a);
    run(par, (size_t)a.pairs * a.tiles, backward_query_tile, &a);
}

void cpu_attention_forward(tr_stream s, float *out, float *lse, const float *qkv, int B, int T,
                           int NH, int HS, const int32_t *segments)
{
    (void)s;
    dims d = make_dims(T, NH, HS);
    d.seg = segments;
    attention_forward(&d, out, lse, qkv, B);
}

void cpu_attention_backward(tr_stream s, float *dqkv, float *scratch, const float *dout,
                            const float *qkv, const float *out, const float *lse, int B, int T,
                            int NH, int HS, const int32_t *segments)
{
    (void)s;
    dims d = make_dims(T, NH, HS);
    d.seg = segments;
    attention_backward(&d, dqkv, scratch, dout, qkv, out, lse, B);
}

void cpu_attention_gqa_forward(tr_stream s, float *out, float *lse, const float *qkv,
                               const float *alibi, int B, int T, int NH, int NG, int HS,
                               const int32_t *segments)
{
    (void)s;
    dims d = make_gqa_dims(T, NH, NG, HS, alibi);
    d.seg = segments;
    attention_forward(&d, out, lse, qkv, B);
}

void cpu_attention_gqa_backward(tr_stream s, float *dqkv, float *scratch, const float *dout,
                                const float *qkv, const float *out, const float *lse,
                                const float *alibi, int B, int T, int NH, int NG, int HS,
                                const int32_t *segments)
{
    (void)s;
    dims d = make_gqa_dims(T, NH, NG, HS, alibi);
    d.seg = segments;
    attention_backward(&d, dqkv, scratch, dout, qkv, out, lse, B);
}

void cpu_attention_gqa_dropout_forward(tr_stream s, float *out, float *lse, const float *qkv,
                                       const float *alibi, int B, int T, int NH, int NG, int HS,
                                       const int32_t *segments, tr_dropout drop)
{
    (void)s;
    dims d = make_gqa_dims(T, NH, NG, HS, alibi);
    d.seg = segments;
    d.drop = &drop;
    attention_forward(&d, out, lse, qkv, B);
}

void cpu_attention_gqa_dropout_backward(tr_stream s, float *dqkv, float *scratch,
                                        const float *dout, const float *qkv, const float *out,
                                        const float *lse, const float *alibi, int B, int T,
                                        int NH, int NG, int HS, const int32_t *segments,
                                        tr_dropout drop)
{
    (void)s;
    dims d = make_gqa_dims(T, NH, NG, HS, alibi);
    d.seg = segments;
    d.drop = &drop;
    attention_backward(&d, dqkv, scratch, dout, qkv, out, lse, B);
}

/* ------------------------------------------------------------------ generation
 * One (batch, head) pair per item: the new rows of K and V go into the cache, then
 * S (n, L) = scale Q K[0:L]^T with L = past + n, a causal softmax per row (new row i sees
 * L' = past + i + 1 keys), O (n, HS) = P V[0:L]. */
typedef struct {
    dims d;
    float *out, *kcache, *vcache, *scores;
    const float *qkv;
    int n, past, max_T;
} decode_args;

static void decode_pair(void *ctx, size_t bh_)
{
    const decode_args *a = ctx;
    const dims *d = &a->d;
    int bh = (int)bh_, b = bh / d->NH, h = bh % d->NH, n = a->n, HS = d->HS, L = a->past + n;
    const float *q = a->qkv + (size_t)b * n * d->C3 + (size_t)h * 3 * HS;
    float *kc = a->kcache + (size_t)bh * a->max_T * HS, *vc = a->vcache + (size_t)bh * a->max_T * HS;
    for (int i = 0; i < n; i++) {
        const float *row = q + (size_t)i * d->C3;
        memcpy(kc + (size_t)(a->past + i) * HS, row + HS, (size_t)HS * sizeof(float));
        memcpy(vc + (size_t)(a->past + i) * HS, row + 2 * HS, (size_t)HS * sizeof(float));
    }
    float *S = a->scores + (size_t)bh * n * L;
    cpu_gemm_serial(0, 1, n, L, HS, d->scale, q, d->C3, kc, HS, 0.0f, S, L);
    for (int i = 0; i < n; i++)
        softmax_causal_row(S + (size_t)i * L, a->past + i, L);
    cpu_gemm_serial(0, 0, n, HS, L, 1.0f, S, L, vc, HS, 0.0f,
                    a->out + (size_t)b * n * d->C + (size_t)h * HS, d->C);
}

void cpu_attention_decode(tr_stream s, float *out, float *kcache, float *vcache, float *scores,
                          const float *qkv, int B, int n, int past, int max_T, int NH, int HS)
{
    (void)s;
    decode_args a = {.d = make_dims(n, NH, HS), .out = out, .kcache = kcache, .vcache = vcache,
                     .scores = scores, .qkv = qkv, .n = n, .past = past, .max_T = max_T};
    int par = (double)B * NH * n * (past + n) * HS >= (double)CPU_PAR_MIN * 8;
    run(par, (size_t)B * NH, decode_pair, &a);
}

/* Grouped heads and ALiBi: one (batch, group) pair per item writes the group's new key and
 * value rows into the cache, then each of its R query heads attends as decode_pair does
 * (new row i sees cached positions 0 .. past + i), the slope's (j - (past + i)) added. */
static void gqa_decode_pair(void *ctx, size_t bg_)
{
    const decode_args *a = ctx;
    const dims *d = &a->d;
    int bg = (int)bg_, b = bg / d->NG, g = bg % d->NG, n = a->n, HS = d->HS, L = a->past + n;
    const float *row0 = a->qkv + (size_t)b * n * d->C3;
    float *kc = a->kcache + (size_t)bg * a->max_T * HS, *vc = a->vcache + (size_t)bg * a->max_T * HS;
    for (int i = 0; i < n; i++) {
        const float *kv = row0 + (size_t)i * d->C3 + k_offset(d, g * d->R);
        memcpy(kc + (size_t)(a->past + i) * HS, kv, (size_t)HS * sizeof(float));
        memcpy(vc + (size_t)(a->past + i) * HS, kv + HS, (size_t)HS * sizeof(float));
    }
    for (int r = 0; r < d->R; r++) {
        int h = g * d->R + r;
        float *S = a->scores + ((size_t)b * d->NH + h) * n * L;
        cpu_gemm_serial(0, 1, n, L, HS, d->scale, row0 + q_offset(d, h), d->C3, kc, HS, 0.0f, S,
                        L);
        for (int i = 0; i < n; i++) {
            float *srow = S + (size_t)i * L;
            int t = a->past + i;
            if (d->alibi)
                for (int j = 0; j <= t; j++)
                    srow[j] += d->alibi[h] * (float)(j - t);
            softmax_causal_row(srow, t, L);
        }
        cpu_gemm_serial(0, 0, n, HS, L, 1.0f, S, L, vc, HS, 0.0f,
                        a->out + (size_t)b * n * d->C + (size_t)h * HS, d->C);
    }
}

void cpu_attention_gqa_decode(tr_stream s, float *out, float *kcache, float *vcache,
                              float *scores, const float *qkv, const float *alibi, int B, int n,
                              int past, int max_T, int NH, int NG, int HS)
{
    (void)s;
    decode_args a = {.d = make_gqa_dims(n, NH, NG, HS, alibi), .out = out, .kcache = kcache,
                     .vcache = vcache, .scores = scores, .qkv = qkv, .n = n, .past = past,
                     .max_T = max_T};
    int par = (double)B * NH * n * (past + n) * HS >= (double)CPU_PAR_MIN * 8;
    run(par, (size_t)B * NG, gqa_decode_pair, &a);
}
