// kernels/cuda/ — internal: the per-thread bodies of the mixture-of-experts kernels (moe.cu
// launches them; tests/cuda/moe_emu.cc runs this very source on the host, every thread of each
// launch in turn, against kernels/cpu/moe.c). Plain C++ on global arrays: no shared memory, no
// barriers, so a thread's result depends on its indices alone.
//   router_forward_row(a, n)    row n of moe_router_forward (a thread a row)
//   router_backward_row(a, n)   row n of moe_router_backward (a thread a row)
//   gather_element(a, e)        element e of gather_rows' (M, C) output
//   scatter_column(a, c)        column c of scatter_add_rows, every i in order (no scratch)
//   scatter_chunk(a, j0, c)     scatter_add_rows from the routed rows stably sorted by
//                               target row (rows, pos): column c of each target row whose run
//                               of sorted positions starts in [j0, j0 + SCATTER_CHUNK), its
//                               contributions added in pos (= i) order
//   scatter_backward_lane(a, i, lane)  row i of dsrc, columns lane, lane + 32, ...; returns
//                               the lane's part of dw[i] (double), which a warp's butterfly
//                               (warp_sum_d) adds
// Every row sum repeats the CPU's expression, type for type, and a product that the CPU
// rounds before adding is rounded here too (mul_rn / dmul: nvcc would fuse it into an FMA),
// so: the router's outputs equal the CPU's bits but for exp and log (glibc's and CUDA's differ
// in the last bit of a double now and then); gather and the scatter equal them; dsrc too, dw
// within rounding (the CPU's vectorised dot adds in another order).
#ifndef TR_KERNELS_CUDA_MOE_CUH
#define TR_KERNELS_CUDA_MOE_CUH

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define MOE_HD __host__ __device__ __forceinline__
#else
#define MOE_HD inline
#endif

namespace moe {

constexpr int SCATTER_CHUNK = 8; // sorted positions a thread looks for run starts in
constexpr int WARP = 32;

MOE_HD float mul_rn(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}

MOE_HD float add_rn(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}

MOE_HD double dmul(double a, double b)
{
#ifdef __CUDA_ARCH__
    return __dmul_rn(a, b);
#else
    return a * b;
#endif
}

struct router_args {
    int32_t *idx;
    float *weights, *probs, *lse, *dlogits;
    const float *logits, *dweights, *cweights, *cprobs, *clse, *aux_grad;
    const int32_t *cidx;
    float z_grad;
    int N, E, k, pre_softmax;
};

// The k picks of row l into id: pick j the largest logit not yet picked, the lowest index
// among equals. Without NaN the picks follow one strict order (logit descending, index
// ascending), so pick j is the first after pick j - 1 in it: k passes over E. A row with a NaN
// takes the CPU's own loop (a pick the first not taken unless a later one is strictly
// greater), whose result the NaN makes depend on the scan itself.
MOE_HD void top_k(int32_t *id, const float *l, int E, int k)
{
    bool has_nan = false;
    for (int e = 0; e < E; e++)
        has_nan |= l[e] != l[e];
    int prev = -1;
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            bool ok;
            if (has_nan) {
                ok = true;
                for (int i = 0; i < j; i++)
                    ok &= id[i] != e;
            } else {
                ok = prev < 0 || l[e] < l[prev] || (l[e] == l[prev] && e > prev);
            }
            if (ok && (best < 0 || l[e] > l[best]))
                best = e;
        }
        id[j] = best;
        prev = best;
    }
}

// Row n: softmax over E and log-sum-exp (sums in double, in e order), top-k, the weights.
MOE_HD void router_forward_row(const router_args &a, int n)
{
    int E = a.E, k = a.k;
    const float *l = a.logits + (size_t)n * E;
    float *p = a.probs + (size_t)n * E, *w = a.weights + (size_t)n * k;
    int32_t *id = a.idx + (size_t)n * k;
    float mx = l[0];
    for (int e = 1; e < E; e++)
        mx = l[e] > mx ? l[e] : mx;
    double sum = 0;
    for (int e = 0; e < E; e++)
        sum += exp((double)l[e] - mx);
    for (int e = 0; e < E; e++)
        p[e] = (float)(exp((double)l[e] - mx) / sum);
    a.lse[n] = (float)(mx + log(sum));
    top_k(id, l, E, k);
    if (a.pre_softmax) {
        for (int j = 0; j < k; j++)
            w[j] = p[id[j]];
        return;
    }
    double ks = 0; // id[0] holds the largest of the k
    for (int j = 0; j < k; j++)
        ks += exp((double)l[id[j]] - l[id[0]]);
    for (int j = 0; j < k; j++)
        w[j] = (float)(exp((double)l[id[j]] - l[id[0]]) / ks);
}

// Row n of dlogits (overwritten): the full softmax's backward of aux_grad and, pre_softmax,
// dweights at the chosen experts; the z-loss's 2 z lse p; else the k-softmax's backward.
MOE_HD void router_backward_row(const router_args &a, int n)
{
    int E = a.E, k = a.k;
    const float *p = a.cprobs + (size_t)n * E, *w = a.cweights + (size_t)n * k;
    const float *dw = a.dweights + (size_t)n * k;
    const int32_t *id = a.cidx + (size_t)n * k;
    float *d = a.dlogits + (size_t)n * E;
    double dot = 0;
    for (int e = 0; e < E; e++)
        dot += a.aux_grad ? dmul((double)a.aux_grad[e], p[e]) : 0.0;
    if (a.pre_softmax)
        for (int j = 0; j < k; j++)
            dot += dmul((double)dw[j], p[id[j]]);
    double zl = 2.0 * (double)a.z_grad * a.clse[n];
    for (int e = 0; e < E; e++)
        d[e] = (float)(p[e] * ((a.aux_grad ? a.aux_grad[e] : 0.0) - dot + zl));
    if (a.pre_softmax) {
        for (int j = 0; j < k; j++)
            d[id[j]] = (float)((double)d[id[j]] + dmul((double)p[id[j]], dw[j]));
        return;
    }
    double wd = 0;
    for (int j = 0; j < k; j++)
        wd += dmul((double)w[j], dw[j]);
    for (int j = 0; j < k; j++)
        d[id[j]] = (float)((double)d[id[j]] + dmul(w[j], dw[j] - wd));
}

struct rows_args {
    float *out, *dsrc, *dw;
    const float *src, *w, *dout;
    const int32_t *idx;
    const int32_t *rows, *pos; // scatter_chunk's sort: target rows ascending, their i ascending
    int M, C;
};

MOE_HD void gather_element(const rows_args &a, size_t e)
{
    size_t i = e / (size_t)a.C, c = e % (size_t)a.C;
    a.out[e] = a.src[(size_t)a.idx[i] * a.C + c];
}

// out[idx[i], c] += w[i] src[i, c] for i = 0 .. M-1: the CPU's column loop itself
MOE_HD void scatter_column(const rows_args &a, int c)
{
    for (int i = 0; i < a.M; i++) {
        float *y = a.out + (size_t)a.idx[i] * a.C + c;
        float x = a.src[(size_t)i * a.C + c];
        *y = add_rn(*y, a.w ? mul_rn(a.w[i], x) : x);
    }
}

// Each run of equal rows[] starting in [j0, j0 + SCATTER_CHUNK): its target row's column c
// plus its contributions in sorted order (pos ascending within a run: the CPU's i order)
MOE_HD void scatter_chunk(const rows_args &a, int j0, int c)
{
    int end = a.M - j0 < SCATTER_CHUNK ? a.M : j0 + SCATTER_CHUNK;
    for (int j = j0; j < end; j++) {
        int r = a.rows[j];
        if (j > 0 && a.rows[j - 1] == r)
            continue; // inside a run that starts before j
        float *y = a.out + (size_t)r * a.C + c;
        float acc = *y;
        for (int t = j; t < a.M && a.rows[t] == r; t++) {
            int i = a.pos[t];
            float x = a.src[(size_t)i * a.C + c];
            acc = add_rn(acc, a.w ? mul_rn(a.w[i], x) : x);
        }
        *y = acc;
    }
}

// dsrc row i = w[i] dout row idx[i] at columns lane, lane + 32, ...; the lane's part of
// dout row idx[i] . src row i (0 where dw is NULL)
MOE_HD double scatter_backward_lane(const rows_args &a, int i, int lane)
{
    const float *dy = a.dout + (size_t)a.idx[i] * a.C, *x = a.src + (size_t)i * a.C;
    float *dx = a.dsrc + (size_t)i * a.C;
    float w = a.w ? a.w[i] : 1.0f;
    double dot = 0;
    for (int c = lane; c < a.C; c += WARP) {
        dx[c] = mul_rn(w, dy[c]);
        if (a.dw)
            dot += dmul((double)dy[c], x[c]);
    }
    return dot;
}

} // namespace moe

#endif
