/* Context parallelism's attention (kernels.h, attention_rows_*): query rows q0 .. Tk-1 of a
 * qkv buffer of Tk rows against the keys at or before each, GQA layout, optional ALiBi.
 * One (batch, group) unit at a time on the team: it owns the dQ rows of its R query heads and
 * the dK, dV rows of its key and value head, so backward needs no atomics, and each unit adds
 * its terms in a fixed order (results do not depend on the thread count). Plain row-by-row
 * loops, key by key (an online softmax in forward; backward recomputes each probability
 * from the saved lse), so nothing of size Tk is held. */
#include "kernels/cpu/cpu_ops.h"

#include <math.h>

typedef struct {
    float *out, *lse, *dqkv;
    const float *qkv, *dout, *cout, *clse, *alibi;
    int Tk, q0, nq, NH, NG, R, HS;
    size_t row; /* floats per qkv row: NG * (R + 2) * HS */
    float scale;
} rows_args;

static float dot(const float *restrict a, const float *restrict b, int n)
{
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int d = 0; d < n; d++)
        s += a[d] * b[d];
    return s;
}

/* The score of query row t (global) of head h in group g against key j. */
static float score(const rows_args *a, const float *qkv_b, int g, int h, int t, int j)
{
    int HS = a->HS;
    const float *q = qkv_b + (size_t)t * a->row + ((size_t)g * (a->R + 2) + (h - g * a->R)) * HS;
    const float *k = qkv_b + (size_t)j * a->row + ((size_t)g * (a->R + 2) + a->R) * HS;
    return dot(q, k, HS) * a->scale + (a->alibi ? a->alibi[h] * (float)(j - t) : 0.0f);
}

/* Forward of one (batch, group): per query row an online softmax over its keys in order
 * (running max m, sum l, output rescaled when m grows), then out /= l, lse = m + log l. */
static void forward_unit(void *ctx, size_t u)
{
    const rows_args *a = ctx;
    int b = (int)(u / (size_t)a->NG), g = (int)(u % (size_t)a->NG), HS = a->HS;
    const float *qkv_b = a->qkv + (size_t)b * a->Tk * a->row;
    size_t vo = ((size_t)g * (a->R + 2) + a->R + 1) * HS;
    for (int h = g * a->R; h < (g + 1) * a->R; h++)
        for (int i = 0; i < a->nq; i++) {
            int t = a->q0 + i;
            float *o = a->out + (((size_t)b * a->nq + i) * a->NH + h) * HS;
            float m = -INFINITY, l = 0.0f;
            for (int d = 0; d < HS; d++)
                o[d] = 0.0f;
            for (int j = 0; j <= t; j++) {
                float sc = score(a, qkv_b, g, h, t, j);
                if (sc > m) {
                    float c = cpu_expf(m - sc); /* 0 on the first key */
                    l *= c;
#pragma omp simd
                    for (int d = 0; d < HS; d++)
                        o[d] *= c;
                    m = sc;
                }
                float p = cpu_expf(sc - m);
                const float *v = qkv_b + (size_t)j * a->row + vo;
                l += p;
#pragma omp simd
                for (int d = 0; d < HS; d++)
                    o[d] += p * v[d];
            }
            float inv = 1.0f / l;
            for (int d = 0; d < HS; d++)
                o[d] *= inv;
            a->lse[((size_t)b * a->NH + h) * a->nq + i] = m + logf(l);
        }
}

/* Backward of one (batch, group): P = exp(S - lse) again, dS = P (dO.V - D), D = dO.out;
 * dV += P dO, dK += scale dS q, dQ += scale dS k. */
static void backward_unit(void *ctx, size_t u)
{
    const rows_args *a = ctx;
    int b = (int)(u / (size_t)a->NG), g = (int)(u % (size_t)a->NG), HS = a->HS;
    const float *qkv_b = a->qkv + (size_t)b * a->Tk * a->row;
    float *dqkv_b = a->dqkv + (size_t)b * a->Tk * a->row;
    size_t ko = ((size_t)g * (a->R + 2) + a->R) * HS, vo = ko + HS;
    for (int h = g * a->R; h < (g + 1) * a->R; h++)
        for (int i = 0; i < a->nq; i++) {
            int t = a->q0 + i;
            size_t qo = ((size_t)g * (a->R + 2) + (h - g * a->R)) * HS;
            const float *q = qkv_b + (size_t)t * a->row + qo;
            float *dq = dqkv_b + (size_t)t * a->row + qo;
            size_t oi = (((size_t)b * a->nq + i) * a->NH + h) * HS;
            const float *dO = a->dout + oi;
            float D = dot(dO, a->cout + oi, HS), lse = a->clse[((size_t)b * a->NH + h) * a->nq + i];
            for (int j = 0; j <= t; j++) {
                const float *k = qkv_b + (size_t)j * a->row + ko;
                const float *v = qkv_b + (size_t)j * a->row + vo;
                float *dk = dqkv_b + (size_t)j * a->row + ko;
                float *dv = dqkv_b + (size_t)j * a->row + vo;
                float p = cpu_expf(score(a, qkv_b, g, h, t, j) - lse);
                float ds = p * (dot(dO, v, HS) - D) * a->scale;
#pragma omp simd
                for (int d = 0; d < HS; d++) {
                    dv[d] += p * dO[d];
                    dk[d] += ds * q[d];
                    dq[d] += ds * k[d];
                }
            }
        }
}

static rows_args make_args(const float *qkv, const float *alibi, int B, int Tk, int q0, int NH,
                           int NG, int HS)
{
    (void)B;
    rows_args a = {.qkv = qkv, .alibi = alibi, .Tk = Tk, .q0 = q0, .nq = Tk - q0, .NH = NH,
                   .NG = NG, .R = NH / NG, .HS = HS,
                   .row = (size_t)NG * (size_t)(NH / NG + 2) * (size_t)HS,
                   .scale = 1.0f / sqrtf((float)HS)};
    return a;
}

void cpu_attention_rows_forward(tr_stream s, float *out, float *lse, const float *qkv,
                                const float *alibi, int B, int Tk, int q0, int NH, int NG, int HS)
{
    (void)s;
    rows_args a = make_args(qkv, alibi, B, Tk, q0, NH, NG, HS);
    a.out = out, a.lse = lse;
    tr_kernels_cpu_parallel_for((size_t)B * NG, forward_unit, &a);
}

void cpu_attention_rows_backward(tr_stream s, float *dqkv, const float *dout, const float *qkv,
                                 const float *out, const float *lse, const float *alibi, int B,
                                 int Tk, int q0, int NH, int NG, int HS)
{
    (void)s;
    rows_args a = make_args(qkv, alibi, B, Tk, q0, NH, NG, HS);
    a.dqkv = dqkv, a.dout = dout, a.cout = out, a.clse = lse;
    tr_kernels_cpu_parallel_for((size_t)B * NG, backward_unit, &a);
}
