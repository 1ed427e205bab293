/* Causal multi-head self-attention with per-(batch, head) GEMMs. Rows are taken in blocks of
 * BLK: query block [r0, r1) only needs key columns [0, r1), which skips most of the work
 * above the diagonal. With many (batch, head) pairs each thread takes whole pairs (their
 * att/datt stay in its cache between the phases); with few pairs the (pair, block) units
 * are shared instead, largest first. Each unit writes its own part of the outputs with a
 * fixed sequence of operations (the same blocks in both cases), so neither the schedule nor
 * the choice between the two changes a result.
 * Layouts: qkv (B, T, NG, R+2, HS) (R = NH/NG query heads per group, then the group's key and
 * value; GPT-2's (B, T, NH, 3, HS) is NG = NH), out (B, T, NH, HS), att/datt (B, NH, T, T).
 * Grouped heads: the key/value gradients of a group sum its R heads' contributions in head
 * order inside one unit (a (batch, group) pair), so no two units write the same rows.
 * ALiBi adds slope_h * (j - i) to the scaled scores before the softmax. Packed sequences
 * (segments, attention_forward): a query's softmax runs over its own segment's keys only,
 * the rest of its row 0, so the backward (which reads att) is unchanged. */
#include "kernels/cpu/cpu_ops.h"

#include <math.h>
#include <string.h>

#define BLK 64

static int min_int(int a, int b) { return a < b ? a : b; }

/* One row of probabilities in place: row[0..t] are scaled scores, row[t+1..T) becomes 0. */
static void softmax_causal_row(float *restrict row, int t, int T)
{
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int j = 0; j <= t; j++)
        mx = row[j] > mx ? row[j] : mx;
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
} dims;

static dims make_dims(int T, int NH, int HS)
{
    dims d = {T, NH, HS, NH * HS, 3 * NH * HS, 1.0f / sqrtf((float)HS), NH, 1, NULL, NULL};
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

/* Forward of query rows [r0, r0 + BLK) of pair bh. */
static void forward_block(const dims *d, float *out, float *att, const float *qkv, int bh,
                          int r0)
{
    int T = d->T, HS = d->HS, C = d->C, C3 = d->C3, b = bh / d->NH, h = bh % d->NH;
    const float *q = qkv + (size_t)b * T * C3 + q_offset(d, h);
    const float *k = qkv + (size_t)b * T * C3 + k_offset(d, h), *v = k + HS;
    float *P = att + (size_t)bh * T * T;
    float *o = out + (size_t)b * T * C + (size_t)h * HS;
    int r1 = min_int(T, r0 + BLK), rows = r1 - r0;
    /* S[r0:r1, 0:r1] = scale Q[r0:r1] K[0:r1]^T */
    cpu_gemm_serial(0, 1, rows, r1, HS, d->scale, q + (size_t)r0 * C3, C3, k, C3, 0.0f,
                       P + (size_t)r0 * T, T);
    if (d->alibi) {
        float slope = d->alibi[h];
        for (int t = r0; t < r1; t++) {
            float *restrict row = P + (size_t)t * T;
            for (int j = 0; j <= t; j++)
                row[j] += slope * (float)(j - t);
        }
    }
    for (int t = r0; t < r1; t++) {
        /* packed sequences: keys before the start s0 of t's segment get probability 0 */
        const int32_t *sg = d->seg ? d->seg + (size_t)b * T : NULL;
        int s0 = t;
        while (sg && s0 > 0 && sg[s0 - 1] == sg[t])
            s0--;
        float *row = P + (size_t)t * T;
        if (!sg)
            s0 = 0;
        for (int j = 0; j < s0; j++)
            row[j] = 0.0f;
        softmax_causal_row(row + s0, t - s0, T - s0);
    }
    /* O[r0:r1] = P[r0:r1, 0:r1] V[0:r1] */
    cpu_gemm_serial(0, 0, rows, HS, r1, 1.0f, P + (size_t)r0 * T, T, v, C3, 0.0f,
                       o + (size_t)r0 * C, C);
}

/* Backward phase 1 for query rows [r0, r0 + BLK) of pair bh: dP, dS (into datt), dQ. */
static void backward_query_block(const dims *d, float *dqkv, float *datt, const float *dout,
                                 const float *qkv, const float *att, int bh, int r0)
{
    int T = d->T, HS = d->HS, C = d->C, C3 = d->C3, b = bh / d->NH, h = bh % d->NH;
    size_t row0 = (size_t)b * T * C3;
    const float *k = qkv + row0 + k_offset(d, h), *v = k + HS;
    float *dq = dqkv + row0 + q_offset(d, h);
    const float *P = att + (size_t)bh * T * T;
    float *D = datt + (size_t)bh * T * T;
    const float *dO = dout + (size_t)b * T * C + (size_t)h * HS;
    int r1 = min_int(T, r0 + BLK), rows = r1 - r0;
    /* dP[r0:r1, 0:r1] = dO[r0:r1] V[0:r1]^T */
    cpu_gemm_serial(0, 1, rows, r1, HS, 1.0f, dO + (size_t)r0 * C, C, v, C3, 0.0f,
                       D + (size_t)r0 * T, T);
    /* softmax backward in place: dS = P (dP - sum_j P dP); 0 above the diagonal */
    for (int t = r0; t < r1; t++) {
        const float *restrict p = P + (size_t)t * T;
        float *restrict dd = D + (size_t)t * T;
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int j = 0; j <= t; j++)
            dot += p[j] * dd[j];
#pragma omp simd
        for (int j = 0; j <= t; j++)
            dd[j] = p[j] * (dd[j] - dot);
        for (int j = t + 1; j < r1; j++)
            dd[j] = 0.0f;
    }
    /* dQ[r0:r1] = scale dS[r0:r1, 0:r1] K[0:r1] */
    cpu_gemm_serial(0, 0, rows, HS, r1, d->scale, D + (size_t)r0 * T, T, k, C3, 0.0f,
                       dq + (size_t)r0 * C3, C3);
}

/* Backward phase 2 for key/value rows [j0, j0 + BLK) of (batch, group) pair bg: they receive
 * from query rows [j0, T) of the group's heads only (summed in head order), and every dS
 * entry read there was written by phase 1 (same blocks). */
static void backward_key_block(const dims *d, float *dqkv, const float *datt, const float *dout,
                               const float *qkv, const float *att, int bg, int j0)
{
    int T = d->T, HS = d->HS, C = d->C, C3 = d->C3, b = bg / d->NG, g = bg % d->NG;
    int j1 = min_int(T, j0 + BLK), rows = j1 - j0, span = T - j0;
    size_t row0 = (size_t)b * T * C3;
    for (int i = 0; i < d->R; i++) {
        int h = g * d->R + i, bh = b * d->NH + h;
        const float *q = qkv + row0 + q_offset(d, h);
        float *dk = dqkv + row0 + k_offset(d, h), *dv = dk + HS;
        const float *P = att + (size_t)bh * T * T;
        const float *D = datt + (size_t)bh * T * T;
        const float *dO = dout + (size_t)b * T * C + (size_t)h * HS;
        float beta = i ? 1.0f : 0.0f;
        /* dK[j0:j1] (+)= scale dS[j0:T, j0:j1]^T Q[j0:T] */
        cpu_gemm_serial(1, 0, rows, HS, span, d->scale, D + (size_t)j0 * T + j0, T,
                        q + (size_t)j0 * C3, C3, beta, dk + (size_t)j0 * C3, C3);
        /* dV[j0:j1] (+)= P[j0:T, j0:j1]^T dO[j0:T] */
        cpu_gemm_serial(1, 0, rows, HS, span, 1.0f, P + (size_t)j0 * T + j0, T,
                        dO + (size_t)j0 * C, C, beta, dv + (size_t)j0 * C3, C3);
    }
}

/* Whole pairs per piece when there are at least this many pairs per thread. */
#define PAIRS_PER_THREAD 4

typedef struct {
    dims d;
    float *out, *att, *dqkv, *datt;
    const float *qkv, *dout, *catt;
    int pairs, blocks;
    int groups; /* (batch, group) pairs of the backward's key phase */
} att_args;

static void forward_pair(void *ctx, size_t bh)
{
    const att_args *a = ctx;
    for (int r0 = 0; r0 < a->d.T; r0 += BLK)
        forward_block(&a->d, a->out, a->att, a->qkv, (int)bh, r0);
}

static void forward_unit(void *ctx, size_t u) /* the last (largest) query blocks first */
{
    const att_args *a = ctx;
    forward_block(&a->d, a->out, a->att, a->qkv, (int)(u % a->pairs),
                  (a->blocks - 1 - (int)(u / a->pairs)) * BLK);
}

static void backward_pair(void *ctx, size_t bg) /* a (batch, group) pair: its R heads */
{
    const att_args *a = ctx;
    int b = (int)bg / a->d.NG, g = (int)bg % a->d.NG;
    for (int i = 0; i < a->d.R; i++)
        for (int r0 = 0; r0 < a->d.T; r0 += BLK)
            backward_query_block(&a->d, a->dqkv, a->datt, a->dout, a->qkv, a->catt,
                                 b * a->d.NH + g * a->d.R + i, r0);
    for (int j0 = 0; j0 < a->d.T; j0 += BLK)
        backward_key_block(&a->d, a->dqkv, a->datt, a->dout, a->qkv, a->catt, (int)bg, j0);
}

static void backward_query_unit(void *ctx, size_t u) /* largest query blocks first */
{
    const att_args *a = ctx;
    backward_query_block(&a->d, a->dqkv, a->datt, a->dout, a->qkv, a->catt, (int)(u % a->pairs),
                         (a->blocks - 1 - (int)(u / a->pairs)) * BLK);
}

static void backward_key_unit(void *ctx, size_t u) /* largest (first) key blocks first */
{
    const att_args *a = ctx;
    backward_key_block(&a->d, a->dqkv, a->datt, a->dout, a->qkv, a->catt, (int)(u % a->groups),
                       (int)(u / a->groups) * BLK);
}

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

static void attention_forward(const dims *d, float *out, float *att, const float *qkv, int B)
{
    int T = d->T, NH = d->NH, HS = d->HS;
    att_args a = {.d = *d, .out = out, .att = att, .qkv = qkv,
                  .pairs = B * NH, .blocks = (T + BLK - 1) / BLK};
    int par = (double)a.pairs * T * T * HS >= (double)CPU_PAR_MIN * 8;
    if (!par || a.pairs >= PAIRS_PER_THREAD * tr_kernels_cpu_threads())
        run(par, (size_t)a.pairs, forward_pair, &a);
    else
        run(par, (size_t)a.pairs * a.blocks, forward_unit, &a);
}

static void attention_backward(const dims *d, float *dqkv, float *datt, const float *dout,
                               const float *qkv, const float *att, int B)
{
    int T = d->T, NH = d->NH, HS = d->HS;
    att_args a = {.d = *d, .dqkv = dqkv, .datt = datt, .qkv = qkv, .dout = dout, .catt = att,
                  .pairs = B * NH, .blocks = (T + BLK - 1) / BLK, .groups = B * d->NG};
    int par = (double)a.pairs * T * T * HS >= (double)CPU_PAR_MIN * 8;
    if (!par || a.groups >= PAIRS_PER_THREAD * tr_kernels_cpu_threads()) {
        run(par, (size_t)a.groups, backward_pair, &a);
        return;
    }
    run(par, (size_t)a.pairs * a.blocks, backward_query_unit, &a);
    /* reads the dS that the query units wrote */
    run(par, (size_t)a.groups * a.blocks, backward_key_unit, &a);
}

void cpu_attention_forward(tr_stream s, float *out, float *att, const float *qkv, int B,
                           int T, int NH, int HS, const int32_t *segments)
{
    (void)s;
    dims d = make_dims(T, NH, HS);
    d.seg = segments;
    attention_forward(&d, out, att, qkv, B);
}

void cpu_attention_backward(tr_stream s, float *dqkv, float *datt, const float *dout,
                            const float *qkv, const float *att, int B, int T, int NH, int HS)
{
    (void)s;
    dims d = make_dims(T, NH, HS);
    attention_backward(&d, dqkv, datt, dout, qkv, att, B);
}

void cpu_attention_gqa_forward(tr_stream s, float *out, float *att, const float *qkv,
                               const float *alibi, int B, int T, int NH, int NG, int HS,
                               const int32_t *segments)
{
    (void)s;
    dims d = make_gqa_dims(T, NH, NG, HS, alibi);
    d.seg = segments;
    attention_forward(&d, out, att, qkv, B);
}

void cpu_attention_gqa_backward(tr_stream s, float *dqkv, float *datt, const float *dout,
                                const float *qkv, const float *att, int B, int T, int NH, int NG,
                                int HS)
{
    (void)s;
    dims d = make_gqa_dims(T, NH, NG, HS, NULL);
    attention_backward(&d, dqkv, datt, dout, qkv, att, B);
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
