/* Causal multi-head self-attention with per-(batch, head) GEMMs. Rows are taken in blocks of
 * BLK: query block [r0, r1) only needs key columns [0, r1), which skips most of the work
 * above the diagonal. The units of work, (batch, head, block), are shared over the team
 * largest first; each writes its own part of the outputs with a fixed sequence of
 * operations, so the schedule never changes a result.
 * Layouts: qkv (B, T, NH, 3, HS), out (B, T, NH, HS), att/datt (B, NH, T, T). */
#include "kernels/cpu/cpu_ops.h"

#include <math.h>
#include <omp.h>

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
#pragma omp simd reduction(+ : sum) simdlen(TR_SIMDLEN)
    for (int j = 0; j <= t; j++) {
        float e = tr_cpu_expf(row[j] - mx);
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

void tr_cpu_attention_forward(tr_stream s, float *out, float *att, const float *qkv, int B,
                              int T, int NH, int HS)
{
    (void)s;
    int C = NH * HS, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)HS);
    int pairs = B * NH, blocks = (T + BLK - 1) / BLK, units = pairs * blocks;
    int par = (double)pairs * T * T * HS >= (double)TR_CPU_PAR_MIN * 8;
#pragma omp parallel for schedule(dynamic, 1) if (par)
    for (int u = 0; u < units; u++) {
        /* the last (largest) query blocks of every pair first */
        int bh = u % pairs, r0 = (blocks - 1 - u / pairs) * BLK;
        int b = bh / NH, h = bh % NH;
        const float *q = qkv + (size_t)b * T * C3 + (size_t)h * 3 * HS;
        const float *k = q + HS, *v = q + 2 * HS;
        float *P = att + (size_t)bh * T * T;
        float *o = out + (size_t)b * T * C + (size_t)h * HS;
        int r1 = min_int(T, r0 + BLK), rows = r1 - r0;
        /* S[r0:r1, 0:r1] = scale Q[r0:r1] K[0:r1]^T */
        tr_cpu_gemm_serial(0, 1, rows, r1, HS, scale, q + (size_t)r0 * C3, C3, k, C3, 0.0f,
                           P + (size_t)r0 * T, T);
        for (int t = r0; t < r1; t++)
            softmax_causal_row(P + (size_t)t * T, t, T);
        /* O[r0:r1] = P[r0:r1, 0:r1] V[0:r1] */
        tr_cpu_gemm_serial(0, 0, rows, HS, r1, 1.0f, P + (size_t)r0 * T, T, v, C3, 0.0f,
                           o + (size_t)r0 * C, C);
    }
}

void tr_cpu_attention_backward(tr_stream s, float *dqkv, float *datt, const float *dout,
                               const float *qkv, const float *att, int B, int T, int NH,
                               int HS)
{
    (void)s;
    int C = NH * HS, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)HS);
    int pairs = B * NH, blocks = (T + BLK - 1) / BLK, units = pairs * blocks;
    int par = (double)pairs * T * T * HS >= (double)TR_CPU_PAR_MIN * 8;
#pragma omp parallel if (par)
    {
        /* phase 1, per query block [r0, r1), largest first: dP, dS (into datt) and dQ */
#pragma omp for schedule(dynamic, 1)
        for (int u = 0; u < units; u++) {
            int bh = u % pairs, r0 = (blocks - 1 - u / pairs) * BLK;
            int b = bh / NH, h = bh % NH;
            size_t head = (size_t)b * T * C3 + (size_t)h * 3 * HS;
            const float *k = qkv + head + HS, *v = qkv + head + 2 * HS;
            float *dq = dqkv + head;
            const float *P = att + (size_t)bh * T * T;
            float *D = datt + (size_t)bh * T * T;
            const float *dO = dout + (size_t)b * T * C + (size_t)h * HS;
            int r1 = min_int(T, r0 + BLK), rows = r1 - r0;
            /* dP[r0:r1, 0:r1] = dO[r0:r1] V[0:r1]^T */
            tr_cpu_gemm_serial(0, 1, rows, r1, HS, 1.0f, dO + (size_t)r0 * C, C, v, C3, 0.0f,
                               D + (size_t)r0 * T, T);
            /* softmax backward in place: dS = P (dP - sum_j P dP); 0 above the diagonal */
            for (int t = r0; t < r1; t++) {
                const float *restrict p = P + (size_t)t * T;
                float *restrict d = D + (size_t)t * T;
                float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
                for (int j = 0; j <= t; j++)
                    dot += p[j] * d[j];
#pragma omp simd
                for (int j = 0; j <= t; j++)
                    d[j] = p[j] * (d[j] - dot);
                for (int j = t + 1; j < r1; j++)
                    d[j] = 0.0f;
            }
            /* dQ[r0:r1] = scale dS[r0:r1, 0:r1] K[0:r1] */
            tr_cpu_gemm_serial(0, 0, rows, HS, r1, scale, D + (size_t)r0 * T, T, k, C3, 0.0f,
                               dq + (size_t)r0 * C3, C3);
        }
        /* phase 2, per key block [j0, j1), largest (first) first: key/value rows [j0, j1)
         * receive from query rows [j0, T) only; every dS entry read was written in phase 1
         * (same blocks), and the barrier above orders the phases */
#pragma omp for schedule(dynamic, 1)
        for (int u = 0; u < units; u++) {
            int bh = u % pairs, j0 = (u / pairs) * BLK;
            int b = bh / NH, h = bh % NH;
            size_t head = (size_t)b * T * C3 + (size_t)h * 3 * HS;
            const float *q = qkv + head;
            float *dk = dqkv + head + HS, *dv = dqkv + head + 2 * HS;
            const float *P = att + (size_t)bh * T * T;
            const float *D = datt + (size_t)bh * T * T;
            const float *dO = dout + (size_t)b * T * C + (size_t)h * HS;
            int j1 = min_int(T, j0 + BLK), rows = j1 - j0, span = T - j0;
            /* dK[j0:j1] = scale dS[j0:T, j0:j1]^T Q[j0:T] */
            tr_cpu_gemm_serial(1, 0, rows, HS, span, scale, D + (size_t)j0 * T + j0, T,
                               q + (size_t)j0 * C3, C3, 0.0f, dk + (size_t)j0 * C3, C3);
            /* dV[j0:j1] = P[j0:T, j0:j1]^T dO[j0:T] */
            tr_cpu_gemm_serial(1, 0, rows, HS, span, 1.0f, P + (size_t)j0 * T + j0, T,
                               dO + (size_t)j0 * C, C, 0.0f, dv + (size_t)j0 * C3, C3);
        }
    }
}
