/* Context parallelism's attention (kernels.h, attention_rows_*): query rows q0 .. Tk-1 of a
 * qkv buffer of Tk rows against the keys at or before each, GQA layout, optional ALiBi; the
 * flash scheme of attention.c in blocks, scores living one block at a time (on the stack), the
 * block GEMMs OpenBLAS calls on the calling thread (cpu_gemm_serial).
 * Forward: one (batch, head, block of QB query rows) unit at a time on the team; per block of
 * up to KB keys S = scale Q K^T (+ ALiBi), masked past each row's position, the online softmax
 * (running max m and sum l, the output rescaled when m grows), O += P V; then O /= l and
 * lse = m + log l. Backward: one (batch, group) unit owns the dQ rows of its R query heads and
 * the dK, dV rows of its key and value head (no atomics), visiting (head, query block, key
 * tile) in order: P = exp(S - lse), dS = P (dO V^T - D) with D = rowsum(dO * O), dV += P^T dO,
 * dK += scale dS^T Q, dQ += scale dS K, accumulated into dqkv. A unit's terms come in a fixed
 * order, so results do not depend on the thread count.
 * Dropout (attention_rows_dropout_*): as attention.c's, at the rows' global coordinates: the
 * forward drops each block's exponentials after adding them to l and before O += P V; the
 * backward recomputes the mask per tile: dS = P (keep scale dO V^T - D), dV reads P keep scale. */
#include "kernels/cpu/cpu_ops.h"

#include <math.h>
#include <string.h>

#define QB 64  /* query rows per block */
#define KB 256 /* forward: keys per score block */
#define KT 64  /* backward: keys per tile */

typedef struct {
    float *out, *lse, *dqkv;
    const float *qkv, *dout, *cout, *clse, *alibi;
    const tr_dropout *drop; /* NULL or dropout on the probabilities */
    int T;                  /* dropout: the mask's sequence length (positions per sample) */
    int Tk, q0, nq, NH, NG, R, HS, blocks;
    int row; /* floats per qkv row: NG * (R + 2) * HS */
    float scale;
} rows_args;

static int min_int(int a, int b) { return a < b ? a : b; }

/* Offsets in a qkv row of head h's query and of its group's key (the value follows it). */
static size_t q_unit(const rows_args *a, int h)
{
    return ((size_t)(h / a->R) * (a->R + 2) + h % a->R) * a->HS;
}
static size_t k_unit(const rows_args *a, int h)
{
    return ((size_t)(h / a->R) * (a->R + 2) + a->R) * a->HS;
}

/* S (rows, c1 - c0; stride ld) = scale Q[r0..] K[c0:c1]^T (+ ALiBi of head h), keys past each
 * row's position t = r0 + i set to -INFINITY. q, k: the head's first row in the buffer. */
static void block_scores(const rows_args *a, float *S, int ld, const float *q, const float *k,
                         int h, int r0, int rows, int c0, int c1)
{
    int cols = c1 - c0;
    cpu_gemm_serial(0, 1, rows, cols, a->HS, a->scale, q + (size_t)r0 * a->row, a->row,
                    k + (size_t)c0 * a->row, a->row, 0.0f, S, ld);
    for (int i = 0; i < rows; i++) {
        int t = r0 + i, hi = t - c0 + 1 < cols ? t - c0 + 1 : cols; /* keys [c0, t] here */
        float *restrict s = S + (size_t)i * ld;
        if (a->alibi)
            for (int j = 0; j < hi; j++)
                s[j] += a->alibi[h] * (float)(c0 + j - t);
        for (int j = hi > 0 ? hi : 0; j < cols; j++)
            s[j] = -INFINITY;
    }
}

static void forward_block(void *ctx, size_t u)
{
    const rows_args *a = ctx;
    int qb = (int)(u % (size_t)a->blocks), bh = (int)(u / (size_t)a->blocks);
    int b = bh / a->NH, h = bh % a->NH, HS = a->HS, ldo = a->NH * HS;
    const float *base = a->qkv + (size_t)b * a->Tk * a->row;
    const float *q = base + q_unit(a, h), *k = base + k_unit(a, h), *v = k + HS;
    int i0 = qb * QB, rows = min_int(a->nq - i0, QB), r0 = a->q0 + i0, end = r0 + rows;
    float *o = a->out + ((size_t)b * a->nq + i0) * ldo + (size_t)h * HS;
    float m[QB], l[QB], S[QB * KB];
    for (int i = 0; i < rows; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
        memset(o + (size_t)i * ldo, 0, (size_t)HS * sizeof(float));
    }
    for (int c0 = 0; c0 < end; c0 += KB) {
        int c1 = min_int(end, c0 + KB), cols = c1 - c0;
        block_scores(a, S, KB, q, k, h, r0, rows, c0, c1);
        for (int i = 0; i < rows; i++) {
            float *restrict s = S + (size_t)i * KB;
            float mx = cpu_max_f32(s, cols, -INFINITY);
            if (mx == -INFINITY) { /* no key of this row in the block */
                memset(s, 0, (size_t)cols * sizeof(float));
                continue;
            }
            float mnew = mx > m[i] ? mx : m[i], sum = 0.0f;
#pragma omp simd reduction(+ : sum) simdlen(CPU_SIMDLEN)
            for (int j = 0; j < cols; j++) {
                float e = cpu_expf(s[j] - mnew); /* masked (-INFINITY): 0 */
                s[j] = e;
                sum += e;
            }
            float corr = cpu_expf(m[i] - mnew);
            if (corr != 1.0f) {
                float *restrict orow = o + (size_t)i * ldo;
#pragma omp simd
                for (int e = 0; e < HS; e++)
                    orow[e] *= corr;
            }
            l[i] = l[i] * corr + sum;
            m[i] = mnew;
            if (a->drop) /* O gathers the dropped probabilities; l is the undropped sum */
                cpu_dropout_probs(a->drop, a->T, b, h, r0 + i, c0, s, cols);
        }
        cpu_gemm_serial(0, 0, rows, HS, cols, 1.0f, S, KB, v + (size_t)c0 * a->row, a->row, 1.0f,
                        o, ldo);
    }
    for (int i = 0; i < rows; i++) { /* every row saw its own key: l > 0 */
        float inv = 1.0f / l[i], *restrict orow = o + (size_t)i * ldo;
#pragma omp simd
        for (int e = 0; e < HS; e++)
            orow[e] *= inv;
        a->lse[((size_t)b * a->NH + h) * a->nq + i0 + i] = m[i] + logf(l[i]);
    }
}

/* Backward of head h's query rows [r0, r0 + rows) (block i0 of the nq) of batch b. */
static void backward_block(const rows_args *a, int b, int h, int i0, int rows)
{
    int HS = a->HS, ldo = a->NH * HS, r0 = a->q0 + i0, end = r0 + rows;
    const float *base = a->qkv + (size_t)b * a->Tk * a->row;
    float *dbase = a->dqkv + (size_t)b * a->Tk * a->row;
    size_t qu = q_unit(a, h), ku = k_unit(a, h);
    const float *q = base + qu, *k = base + ku, *v = k + HS;
    float *dq = dbase + qu, *dk = dbase + ku, *dv = dk + HS;
    size_t oi = ((size_t)b * a->nq + i0) * ldo + (size_t)h * HS;
    const float *dO = a->dout + oi, *O = a->cout + oi;
    const float *lse = a->clse + ((size_t)b * a->NH + h) * a->nq + i0;
    float D[QB], P[QB * KT], dS[QB * KT];
    for (int i = 0; i < rows; i++) {
        float s = 0.0f;
        const float *x = dO + (size_t)i * ldo, *y = O + (size_t)i * ldo;
#pragma omp simd reduction(+ : s)
        for (int e = 0; e < HS; e++)
            s += x[e] * y[e];
        D[i] = s;
    }
    for (int c0 = 0; c0 < end; c0 += KT) {
        int c1 = min_int(end, c0 + KT), cols = c1 - c0;
        block_scores(a, P, KT, q, k, h, r0, rows, c0, c1);
        for (int i = 0; i < rows; i++) {
            float *restrict p = P + (size_t)i * KT;
#pragma omp simd simdlen(CPU_SIMDLEN)
            for (int j = 0; j < cols; j++)
                p[j] = cpu_expf(p[j] - lse[i]); /* masked: 0 */
        }
        /* dS = P (dO V^T - D) scale */
        cpu_gemm_serial(0, 1, rows, cols, HS, 1.0f, dO, ldo, v + (size_t)c0 * a->row, a->row,
                        0.0f, dS, KT);
        for (int i = 0; i < rows; i++) {
            float *restrict ds = dS + (size_t)i * KT;
            float *restrict p = P + (size_t)i * KT;
            if (a->drop) { /* dS = P (keep scale dO V^T - D); dV reads P keep scale */
                float mk[KT];
                for (int j = 0; j < cols; j++)
                    mk[j] = 1.0f;
                cpu_dropout_probs(a->drop, a->T, b, h, r0 + i, c0, mk, cols);
                for (int j = 0; j < cols; j++) {
                    ds[j] = p[j] * (mk[j] * ds[j] - D[i]) * a->scale;
                    p[j] *= mk[j];
                }
                continue;
            }
#pragma omp simd
            for (int j = 0; j < cols; j++)
                ds[j] = p[j] * (ds[j] - D[i]) * a->scale;
        }
        cpu_gemm_serial(1, 0, cols, HS, rows, 1.0f, P, KT, dO, ldo, 1.0f,
                        dv + (size_t)c0 * a->row, a->row);
        cpu_gemm_serial(1, 0, cols, HS, rows, 1.0f, dS, KT, q + (size_t)r0 * a->row, a->row, 1.0f,
                        dk + (size_t)c0 * a->row, a->row);
        cpu_gemm_serial(0, 0, rows, HS, cols, 1.0f, dS, KT, k + (size_t)c0 * a->row, a->row, 1.0f,
                        dq + (size_t)r0 * a->row, a->row);
    }
}

static void backward_unit(void *ctx, size_t u)
{
    const rows_args *a = ctx;
    int b = (int)(u / (size_t)a->NG), g = (int)(u % (size_t)a->NG);
    for (int h = g * a->R; h < (g + 1) * a->R; h++)
        for (int i0 = 0; i0 < a->nq; i0 += QB)
            backward_block(a, b, h, i0, min_int(a->nq - i0, QB));
}

static rows_args make_args(const float *qkv, const float *alibi, int Tk, int q0, int NH, int NG,
                           int HS)
{
    rows_args a = {.qkv = qkv, .alibi = alibi, .Tk = Tk, .q0 = q0, .nq = Tk - q0, .NH = NH,
                   .NG = NG, .R = NH / NG, .HS = HS, .blocks = (Tk - q0 + QB - 1) / QB,
                   .row = NG * (NH / NG + 2) * HS, .scale = 1.0f / sqrtf((float)HS)};
    return a;
}

static void run_forward(rows_args *a, float *out, float *lse, int B)
{
    a->out = out, a->lse = lse;
    tr_kernels_cpu_parallel_for((size_t)B * a->NH * a->blocks, forward_block, a);
}

static void run_backward(rows_args *a, float *dqkv, const float *dout, const float *out,
                         const float *lse, int B)
{
    a->dqkv = dqkv, a->dout = dout, a->cout = out, a->clse = lse;
    tr_kernels_cpu_parallel_for((size_t)B * a->NG, backward_unit, a);
}

void cpu_attention_rows_forward(tr_stream s, float *out, float *lse, const float *qkv,
                                const float *alibi, int B, int Tk, int q0, int NH, int NG, int HS)
{
    (void)s;
    rows_args a = make_args(qkv, alibi, Tk, q0, NH, NG, HS);
    run_forward(&a, out, lse, B);
}

void cpu_attention_rows_backward(tr_stream s, float *dqkv, const float *dout, const float *qkv,
                                 const float *out, const float *lse, const float *alibi, int B,
                                 int Tk, int q0, int NH, int NG, int HS)
{
    (void)s;
    rows_args a = make_args(qkv, alibi, Tk, q0, NH, NG, HS);
    run_backward(&a, dqkv, dout, out, lse, B);
}

void cpu_attention_rows_dropout_forward(tr_stream s, float *out, float *lse, const float *qkv,
                                        const float *alibi, int B, int Tk, int q0, int NH,
                                        int NG, int HS, int T, tr_dropout d)
{
    (void)s;
    rows_args a = make_args(qkv, alibi, Tk, q0, NH, NG, HS);
    a.drop = &d, a.T = T;
    run_forward(&a, out, lse, B);
}

void cpu_attention_rows_dropout_backward(tr_stream s, float *dqkv, const float *dout,
                                         const float *qkv, const float *out, const float *lse,
                                         const float *alibi, int B, int Tk, int q0, int NH,
                                         int NG, int HS, int T, tr_dropout d)
{
    (void)s;
    rows_args a = make_args(qkv, alibi, Tk, q0, NH, NG, HS);
    a.drop = &d, a.T = T;
    run_backward(&a, dqkv, dout, out, lse, B);
}
