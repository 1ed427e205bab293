/* Mixture-of-experts ops (kernels.h, "mixture of experts"): the router's top-k and softmax,
 * and moving token rows to and from the experts' routed rows. Pieces cut by the sizes alone;
 * row sums in double; a scatter's rows summed by column blocks in row order, so results do
 * not depend on the thread count. */
#include "kernels/cpu/cpu_ops.h"

#include <math.h>

typedef struct {
    int32_t *idx;
    float *weights, *probs, *lse, *dlogits;
    const float *logits, *dweights, *cweights, *cprobs, *clse, *aux_grad;
    const int32_t *cidx;
    float z_grad;
    int E, k, pre_softmax;
} router_args;

/* rows [lo, hi): softmax, log-sum-exp, top-k (descending, ties to the lower index), weights */
static void router_forward_rows(void *ctx, size_t lo, size_t hi)
{
    const router_args *a = ctx;
    int E = a->E, k = a->k;
    for (size_t n = lo; n < hi; n++) {
        const float *l = a->logits + n * E;
        float *p = a->probs + n * E, *w = a->weights + n * k;
        int32_t *id = a->idx + n * k;
        float mx = l[0];
        for (int e = 1; e < E; e++)
            mx = l[e] > mx ? l[e] : mx;
        double sum = 0;
        for (int e = 0; e < E; e++)
            sum += exp((double)l[e] - mx);
        for (int e = 0; e < E; e++)
            p[e] = (float)(exp((double)l[e] - mx) / sum);
        a->lse[n] = (float)(mx + log(sum));
        /* selection: the j-th pick is the largest logit not yet picked, the lowest index
         * among equals (strictly greater replaces) */
        for (int j = 0; j < k; j++) {
            int best = -1;
            for (int e = 0; e < E; e++) {
                int taken = 0;
                for (int i = 0; i < j; i++)
                    taken |= id[i] == e;
                if (!taken && (best < 0 || l[e] > l[best]))
                    best = e;
            }
            id[j] = best;
        }
        if (a->pre_softmax) {
            for (int j = 0; j < k; j++)
                w[j] = p[id[j]];
            continue;
        }
        double ks = 0; /* id[0] holds the largest of the k */
        for (int j = 0; j < k; j++)
            ks += exp((double)l[id[j]] - l[id[0]]);
        for (int j = 0; j < k; j++)
            w[j] = (float)(exp((double)l[id[j]] - l[id[0]]) / ks);
    }
}

void cpu_moe_router_forward(tr_stream s, int32_t *idx, float *weights, float *probs,
                                   float *lse, const float *logits, int N, int E, int k,
                                   int pre_softmax)
{
    (void)s;
    router_args a = {.idx = idx, .weights = weights, .probs = probs, .lse = lse,
                     .logits = logits, .E = E, .k = k, .pre_softmax = pre_softmax};
    cpu_for_ranges((size_t)N * E * k >= CPU_PAR_MIN, (size_t)N, cpu_rows_per_piece((size_t)E * k),
                   router_forward_rows, &a);
}

/* rows [lo, hi): dlogits from the weights' gradient, the aux loss's and the z-loss's */
static void router_backward_rows(void *ctx, size_t lo, size_t hi)
{
    const router_args *a = ctx;
    int E = a->E, k = a->k;
    for (size_t n = lo; n < hi; n++) {
        const float *p = a->cprobs + n * E, *w = a->cweights + n * k, *dw = a->dweights + n * k;
        const int32_t *id = a->cidx + n * k;
        float *d = a->dlogits + n * E;
        /* the gradient with respect to the full softmax's probabilities: aux_grad[e], plus
         * dweights at the chosen experts where the weights are those probabilities */
        double dot = 0;
        for (int e = 0; e < E; e++)
            dot += a->aux_grad ? (double)a->aux_grad[e] * p[e] : 0.0;
        if (a->pre_softmax)
            for (int j = 0; j < k; j++)
                dot += (double)dw[j] * p[id[j]];
        /* softmax backward p (dp - p.dp), plus d(z lse^2)/dlogit = 2 z lse p */
        double zl = 2.0 * (double)a->z_grad * a->clse[n];
        for (int e = 0; e < E; e++)
            d[e] = (float)(p[e] * ((a->aux_grad ? a->aux_grad[e] : 0.0) - dot + zl));
        if (a->pre_softmax)
            for (int j = 0; j < k; j++)
                d[id[j]] = (float)((double)d[id[j]] + (double)p[id[j]] * dw[j]);
        if (a->pre_softmax)
            continue;
        /* the softmax of the k chosen logits: dl[id_j] += w_j (dw_j - w.dw) */
        double wd = 0;
        for (int j = 0; j < k; j++)
            wd += (double)w[j] * dw[j];
        for (int j = 0; j < k; j++)
            d[id[j]] = (float)((double)d[id[j]] + w[j] * (dw[j] - wd));
    }
}

void cpu_moe_router_backward(tr_stream s, float *dlogits, const float *dweights,
                                    const int32_t *idx, const float *weights, const float *probs,
                                    const float *lse, const float *aux_grad, float z_grad, int N,
                                    int E, int k, int pre_softmax)
{
    (void)s;
    router_args a = {.dlogits = dlogits, .dweights = dweights, .cidx = idx, .cweights = weights,
                     .cprobs = probs, .clse = lse, .aux_grad = aux_grad, .z_grad = z_grad,
                     .E = E, .k = k, .pre_softmax = pre_softmax};
    cpu_for_ranges((size_t)N * E * k >= CPU_PAR_MIN, (size_t)N, cpu_rows_per_piece((size_t)E * k),
                   router_backward_rows, &a);
}

typedef struct {
    float *out, *dw;
    const float *src, *w, *dout;
    const int32_t *idx;
    int M, C;
} rows_args;

/* rows [lo, hi) of out: the src rows idx names */
static void gather_piece(void *ctx, size_t lo, size_t hi)
{
    const rows_args *a = ctx;
    for (size_t i = lo; i < hi; i++)
        memcpy(a->out + i * a->C, a->src + (size_t)a->idx[i] * a->C, (size_t)a->C * sizeof(float));
}

void cpu_gather_rows(tr_stream s, float *out, const float *src, const int32_t *idx, int M,
                            int C)
{
    (void)s;
    rows_args a = {.out = out, .src = src, .idx = idx, .M = M, .C = C};
    cpu_for_ranges((size_t)M * C >= CPU_PAR_MIN, (size_t)M, cpu_rows_per_piece((size_t)C),
                   gather_piece, &a);
}

#define COLS 64

/* column blocks [lo, hi): every src row added into its out row, rows in order */
static void scatter_blocks(void *ctx, size_t lo, size_t hi)
{
    const rows_args *a = ctx;
    int C = a->C;
    for (size_t blk = lo; blk < hi; blk++) {
        int c0 = (int)blk * COLS, wd = C - c0 < COLS ? C - c0 : COLS;
        for (int i = 0; i < a->M; i++) {
            const float *restrict x = a->src + (size_t)i * C + c0;
            float *restrict y = a->out + (size_t)a->idx[i] * C + c0;
            float w = a->w ? a->w[i] : 1.0f;
            if (a->w)
                for (int c = 0; c < wd; c++)
                    y[c] += w * x[c];
            else
                for (int c = 0; c < wd; c++)
                    y[c] += x[c];
        }
    }
}

void cpu_scatter_add_rows(tr_stream s, float *out, const float *src, const int32_t *idx,
                                 const float *w, int M, int C)
{
    (void)s;
    rows_args a = {.out = out, .src = src, .w = w, .idx = idx, .M = M, .C = C};
    size_t blocks = ((size_t)C + COLS - 1) / COLS;
    cpu_for_ranges((size_t)M * C >= CPU_PAR_MIN, blocks, 1, scatter_blocks, &a);
}

/* rows [lo, hi) of dsrc: w dout[idx], and dw = dout[idx] . src */
static void scatter_backward_piece(void *ctx, size_t lo, size_t hi)
{
    const rows_args *a = ctx;
    int C = a->C;
    for (size_t i = lo; i < hi; i++) {
        const float *restrict dy = a->dout + (size_t)a->idx[i] * C, *restrict x = a->src + i * C;
        float *restrict dx = a->out + i * C;
        float w = a->w ? a->w[i] : 1.0f;
        for (int c = 0; c < C; c++)
            dx[c] = w * dy[c];
        if (!a->dw)
            continue;
        double dot = 0;
#pragma omp simd reduction(+ : dot)
        for (int c = 0; c < C; c++)
            dot += (double)dy[c] * x[c];
        a->dw[i] = (float)dot;
    }
}

void cpu_scatter_add_rows_backward(tr_stream s, float *dsrc, float *dw, const float *dout,
                                          const float *src, const int32_t *idx, const float *w,
                                          int M, int C)
{
    (void)s;
    rows_args a = {.out = dsrc, .dw = dw, .src = src, .w = w, .dout = dout, .idx = idx, .M = M,
                   .C = C};
    cpu_for_ranges((size_t)M * C >= CPU_PAR_MIN, (size_t)M, cpu_rows_per_piece((size_t)C),
                   scatter_backward_piece, &a);
}
