/* AdamW and the sum of squares (for gradient norms). */
#include "kernels/cpu/cpu_ops.h"

#include <immintrin.h>
#include <math.h>

/* Elements per piece of work handed to a thread. */
#define PIECE 65536

/* AdamW on elements [lo, hi); ib1 = 1/(1-b1^t), ib2 = 1/(1-b2^t).
 * Written with intrinsics where available because sqrtf does not vectorise under the
 * default -fmath-errno. Every path does the same IEEE operations in the same order (C17
 * mode compiles with -ffp-contract=off, so the scalar tail is not fused either), so an
 * element's result does not depend on where it falls. */
static void adamw_range(float *restrict p, const float *restrict g, float *restrict m,
                        float *restrict v, size_t lo, size_t hi, float lr, float b1, float b2,
                        float eps, float wd, float gs, float ib1, float ib2)
{
    size_t i = lo;
    float c1 = 1.0f - b1, c2 = 1.0f - b2;
#if defined(__AVX512F__)
    __m512 vb1 = _mm512_set1_ps(b1), vb2 = _mm512_set1_ps(b2), vc1 = _mm512_set1_ps(c1),
           vc2 = _mm512_set1_ps(c2), vgs = _mm512_set1_ps(gs), vib1 = _mm512_set1_ps(ib1),
           vib2 = _mm512_set1_ps(ib2), veps = _mm512_set1_ps(eps), vwd = _mm512_set1_ps(wd),
           vlr = _mm512_set1_ps(lr);
    for (; i + 16 <= hi; i += 16) {
        __m512 gi = _mm512_mul_ps(_mm512_loadu_ps(g + i), vgs);
        __m512 mi = _mm512_add_ps(_mm512_mul_ps(vb1, _mm512_loadu_ps(m + i)),
                                  _mm512_mul_ps(vc1, gi));
        __m512 vi = _mm512_add_ps(_mm512_mul_ps(vb2, _mm512_loadu_ps(v + i)),
                                  _mm512_mul_ps(vc2, _mm512_mul_ps(gi, gi)));
        __m512 den = _mm512_add_ps(_mm512_sqrt_ps(_mm512_mul_ps(vi, vib2)), veps);
        __m512 pi = _mm512_loadu_ps(p + i);
        __m512 upd = _mm512_add_ps(_mm512_div_ps(_mm512_mul_ps(mi, vib1), den),
                                   _mm512_mul_ps(vwd, pi));
        _mm512_storeu_ps(m + i, mi);
        _mm512_storeu_ps(v + i, vi);
        _mm512_storeu_ps(p + i, _mm512_sub_ps(pi, _mm512_mul_ps(vlr, upd)));
    }
#elif defined(__AVX__)
    __m256 vb1 = _mm256_set1_ps(b1), vb2 = _mm256_set1_ps(b2), vc1 = _mm256_set1_ps(c1),
           vc2 = _mm256_set1_ps(c2), vgs = _mm256_set1_ps(gs), vib1 = _mm256_set1_ps(ib1),
           vib2 = _mm256_set1_ps(ib2), veps = _mm256_set1_ps(eps), vwd = _mm256_set1_ps(wd),
           vlr = _mm256_set1_ps(lr);
    for (; i + 8 <= hi; i += 8) {
        __m256 gi = _mm256_mul_ps(_mm256_loadu_ps(g + i), vgs);
        __m256 mi = _mm256_add_ps(_mm256_mul_ps(vb1, _mm256_loadu_ps(m + i)),
                                  _mm256_mul_ps(vc1, gi));
        __m256 vi = _mm256_add_ps(_mm256_mul_ps(vb2, _mm256_loadu_ps(v + i)),
                                  _mm256_mul_ps(vc2, _mm256_mul_ps(gi, gi)));
        __m256 den = _mm256_add_ps(_mm256_sqrt_ps(_mm256_mul_ps(vi, vib2)), veps);
        __m256 pi = _mm256_loadu_ps(p + i);
        __m256 upd = _mm256_add_ps(_mm256_div_ps(_mm256_mul_ps(mi, vib1), den),
                                   _mm256_mul_ps(vwd, pi));
        _mm256_storeu_ps(m + i, mi);
        _mm256_storeu_ps(v + i, vi);
        _mm256_storeu_ps(p + i, _mm256_sub_ps(pi, _mm256_mul_ps(vlr, upd)));
    }
#endif
    for (; i < hi; i++) {
        float gi = g[i] * gs;
        float mi = b1 * m[i] + c1 * gi;
        float vi = b2 * v[i] + c2 * (gi * gi);
        float den = sqrtf(vi * ib2) + eps;
        m[i] = mi;
        v[i] = vi;
        p[i] = p[i] - lr * ((mi * ib1) / den + wd * p[i]);
    }
}

typedef struct {
    float *p, *m, *v;
    const float *g;
    float lr, b1, b2, eps, wd, gs, ib1, ib2;
} adamw_args;

static void adamw_piece(void *ctx, size_t lo, size_t hi)
{
    const adamw_args *a = ctx;
    adamw_range(a->p, a->g, a->m, a->v, lo, hi, a->lr, a->b1, a->b2, a->eps, a->wd, a->gs,
                a->ib1, a->ib2);
}

void cpu_adamw(tr_stream s, float *params, const float *grads, float *m, float *v, size_t n,
                  float lr, float beta1, float beta2, float eps, float weight_decay,
                  float grad_scale, int step)
{
    (void)s;
    adamw_args a = {params, m, v, grads, lr, beta1, beta2, eps, weight_decay, grad_scale,
                    (float)(1.0 / (1.0 - pow((double)beta1, step))),
                    (float)(1.0 / (1.0 - pow((double)beta2, step)))};
    cpu_for_ranges(n > PIECE, n, PIECE, adamw_piece, &a);
}

/* The partition into blocks depends on n only, so the sum does not depend on the thread
 * count: block sums (in double, fixed SIMD order) are added in block order. */
#define SUMSQ_BLOCKS 64
#define SUMSQ_MIN 16384

/* 16 independent double accumulators (vectorised, and not bound by the latency of one
 * add chain), combined pairwise in a fixed order, then the tail. */
static double sumsq_range(const float *restrict x, size_t lo, size_t hi)
{
    double acc[16] = {0};
    size_t i = lo;
    for (; i + 16 <= hi; i += 16)
        for (int j = 0; j < 16; j++)
            acc[j] += (double)x[i + j] * x[i + j];
    for (int w = 8; w > 0; w /= 2)
        for (int j = 0; j < w; j++)
            acc[j] += acc[j + w];
    double total = acc[0];
    for (; i < hi; i++)
        total += (double)x[i] * x[i];
    return total;
}

typedef struct {
    const float *x;
    size_t n, blocks;
    double part[SUMSQ_BLOCKS];
} sumsq_args;

static void sumsq_blocks(void *ctx, size_t lo, size_t hi)
{
    sumsq_args *a = ctx;
    size_t n = a->n, nb = a->blocks;
    for (size_t b = lo; b < hi; b++)
        a->part[b] = sumsq_range(a->x, n / nb * b, b + 1 == nb ? n : n / nb * (b + 1));
}

double cpu_sumsq(tr_stream s, const float *x, size_t n)
{
    (void)s;
    size_t blocks = n / SUMSQ_MIN;
    if (blocks <= 1)
        return sumsq_range(x, 0, n);
    if (blocks > SUMSQ_BLOCKS)
        blocks = SUMSQ_BLOCKS;
    sumsq_args a = {x, n, blocks, {0}};
    cpu_for_ranges(1, blocks, 1, sumsq_blocks, &a);
    double total = 0.0;
    for (size_t b = 0; b < blocks; b++)
        total += a.part[b];
    return total;
}
