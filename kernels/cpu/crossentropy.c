/* Softmax cross-entropy in pieces over this rank's vocabulary columns (see kernels.h).
 * logits: (N, V), columns >= n_valid are padding. Pieces of rows over the team. */
#include "kernels/cpu/cpu_ops.h"

#include <math.h>

typedef struct {
    float *out, *sums; /* sums: xent_stats's sums of exponentials */
    const float *logits, *maxv, *sumexp, *weights;
    const int32_t *targets;
    int V, n_valid, v_start;
    float scale;
} xent_args;

static void row_max_rows(void *ctx, size_t lo, size_t hi)
{
    const xent_args *a = ctx;
    for (size_t n = lo; n < hi; n++) {
        const float *restrict x = a->logits + n * a->V;
        a->out[n] = cpu_max_f32(x, a->n_valid, -INFINITY);
    }
}

void cpu_xent_row_max(tr_stream s, float *maxv, const float *logits, int N, int V,
                         int n_valid)
{
    (void)s;
    xent_args a = {.out = maxv, .logits = logits, .V = V, .n_valid = n_valid};
    cpu_for_ranges((size_t)N * n_valid >= CPU_PAR_MIN, (size_t)N,
                      cpu_rows_per_piece((size_t)V), row_max_rows, &a);
}

/* Columns per partial sum in row_sumexp: float SIMD partials, added in double. */
#define SUM_BLOCK 1024

/* sumexp[n] = sum_{c < n_valid} exp(logits[n, c] - maxv[n]): blocks of SUM_BLOCK columns
 * summed in float SIMD lanes, the block sums added in double. */
static void row_sumexp_rows(void *ctx, size_t lo, size_t hi)
{
    const xent_args *a = ctx;
    for (size_t n = lo; n < hi; n++) {
        const float *restrict x = a->logits + n * a->V;
        float mx = a->maxv[n];
        double total = 0.0;
        for (int c0 = 0; c0 < a->n_valid; c0 += SUM_BLOCK) {
            int w = a->n_valid - c0 < SUM_BLOCK ? a->n_valid - c0 : SUM_BLOCK;
            float sum = 0.0f;
#pragma omp simd reduction(+ : sum) simdlen(CPU_SIMDLEN)
            for (int c = 0; c < w; c++)
                sum += cpu_expf(x[c0 + c] - mx);
            total += sum;
        }
        a->out[n] = (float)total;
    }
}

void cpu_xent_row_sumexp(tr_stream s, float *sumexp, const float *logits, const float *maxv,
                            int N, int V, int n_valid)
{
    (void)s;
    xent_args a = {.out = sumexp, .logits = logits, .maxv = maxv, .V = V, .n_valid = n_valid};
    cpu_for_ranges((size_t)N * n_valid >= CPU_PAR_MIN / 4, (size_t)N,
                      cpu_rows_per_piece((size_t)V), row_sumexp_rows, &a);
}

void cpu_xent_pick(tr_stream s, float *picked, const float *logits, const int32_t *targets,
                      int N, int V, int v_start)
{
    (void)s;
    for (int n = 0; n < N; n++) {
        int64_t col = (int64_t)targets[n] - v_start;
        picked[n] = col >= 0 && col < V ? logits[(size_t)n * V + col] : 0.0f;
    }
}

/* losses[n] = log(sumexp[n]) + maxv[n] - picked[n] */
void cpu_xent_loss(tr_stream s, float *losses, const float *maxv, const float *sumexp,
                      const float *picked, int N)
{
    (void)s;
    for (int n = 0; n < N; n++)
        losses[n] = (float)(log((double)sumexp[n]) + (double)maxv[n] - (double)picked[n]);
}

/* dlogits[n, c] = scale (exp(logits - maxv) / sumexp - [c is the target]) for c < n_valid,
 * 0 for padding. dlogits may be logits itself. */
static void backward_rows(void *ctx, size_t lo, size_t hi)
{
    const xent_args *a = ctx;
    int V = a->V, n_valid = a->n_valid;
    for (size_t n = lo; n < hi; n++) {
        const float *x = a->logits + n * V;
        float *dx = a->out + n * V;
        float mx = a->maxv[n], k = a->scale / a->sumexp[n];
#pragma omp simd simdlen(CPU_SIMDLEN)
        for (int c = 0; c < n_valid; c++)
            dx[c] = k * cpu_expf(x[c] - mx);
        for (int c = n_valid; c < V; c++)
            dx[c] = 0.0f;
        int64_t col = (int64_t)a->targets[n] - a->v_start;
        if (col >= 0 && col < n_valid)
            dx[col] -= a->scale;
    }
}

void cpu_xent_backward(tr_stream s, float *dlogits, const float *logits, const float *maxv,
                          const float *sumexp, const int32_t *targets, int N, int V,
                          int n_valid, int v_start, float scale)
{
    (void)s;
    xent_args a = {.out = dlogits, .logits = logits, .maxv = maxv, .sumexp = sumexp,
                   .targets = targets, .V = V, .n_valid = n_valid, .v_start = v_start,
                   .scale = scale};
    cpu_for_ranges((size_t)N * V >= CPU_PAR_MIN / 4, (size_t)N,
                      cpu_rows_per_piece((size_t)V), backward_rows, &a);
}

/* Row max, sum of exponentials and target logit in one read of each row: SUM_BLOCK columns
 * at a time (in L1), the block's max first; a new max rescales the double total so far. The
 * blocks and their float SIMD sums are row_sumexp's, so a row whose max lies in its first
 * block gets row_sumexp's bits. */
static void stats_rows(void *ctx, size_t lo, size_t hi)
{
    const xent_args *a = ctx;
    for (size_t n = lo; n < hi; n++) {
        const float *restrict x = a->logits + n * a->V;
        float mx = -INFINITY;
        double total = 0.0;
        for (int c0 = 0; c0 < a->n_valid; c0 += SUM_BLOCK) {
            int w = a->n_valid - c0 < SUM_BLOCK ? a->n_valid - c0 : SUM_BLOCK;
            float bm = cpu_max_f32(x + c0, w, mx);
            if (bm > mx) {
                if (total != 0.0)
                    total *= exp((double)mx - (double)bm);
                mx = bm;
            }
            float sum = 0.0f;
#pragma omp simd reduction(+ : sum) simdlen(CPU_SIMDLEN)
            for (int c = 0; c < w; c++)
                sum += cpu_expf(x[c0 + c] - mx);
            total += sum;
        }
        a->out[n] = mx;
        a->sums[n] = (float)total;
    }
}

void cpu_xent_stats(tr_stream s, float *maxv, float *sumexp, float *picked, const float *logits,
                    const int32_t *targets, int N, int V, int n_valid, int v_start)
{
    (void)s;
    xent_args a = {.out = maxv, .sums = sumexp, .logits = logits, .V = V, .n_valid = n_valid};
    cpu_for_ranges((size_t)N * n_valid >= CPU_PAR_MIN / 4, (size_t)N,
                   cpu_rows_per_piece((size_t)V), stats_rows, &a);
    cpu_xent_pick(s, picked, logits, targets, N, V, v_start);
}

void cpu_xent_rescale(tr_stream s, float *sumexp, const float *local_max, const float *maxv,
                      int N)
{
    (void)s;
    for (int n = 0; n < N; n++)
        sumexp[n] = local_max[n] == -INFINITY
                        ? 0.0f
                        : (float)((double)sumexp[n] * exp((double)local_max[n] - (double)maxv[n]));
}

/* backward_rows, then the row's loss weight (scale_rows's product) */
static void loss_backward_rows(void *ctx, size_t lo, size_t hi)
{
    const xent_args *a = ctx;
    backward_rows(ctx, lo, hi);
    if (!a->weights)
        return;
    for (size_t n = lo; n < hi; n++) {
        float *restrict dx = a->out + n * a->V, w = a->weights[n];
#pragma omp simd
        for (int c = 0; c < a->V; c++)
            dx[c] *= w;
    }
}

void cpu_xent_loss_backward(tr_stream s, float *losses, float *dlogits, const float *logits,
                            const float *maxv, const float *sumexp, const float *picked,
                            const int32_t *targets, const float *weights, int N, int V,
                            int n_valid, int v_start, float scale)
{
    cpu_xent_loss(s, losses, maxv, sumexp, picked, N);
    if (scale == 0.0f)
        return;
    xent_args a = {.out = dlogits, .logits = logits, .maxv = maxv, .sumexp = sumexp,
                   .targets = targets, .weights = weights, .V = V, .n_valid = n_valid,
                   .v_start = v_start, .scale = scale};
    cpu_for_ranges((size_t)N * V >= CPU_PAR_MIN / 4, (size_t)N,
                   cpu_rows_per_piece((size_t)V), loss_backward_rows, &a);
}
