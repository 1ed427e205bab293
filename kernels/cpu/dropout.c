/* Dropout, counter-based (kernels.h: dropout; core/philox.h's decision): each element's keep
 * bit is recomputed from its global coordinates, one Philox block per four aligned elements,
 * so nothing is stored and the cut into pieces never changes a result. */
#include "kernels/cpu/cpu_ops.h"

#include "core/philox.h"

void cpu_dropout_row(const tr_dropout *d, uint64_t sample, uint64_t e0, float *out,
                     const float *inp, int n)
{
    uint32_t w[4];
    uint64_t block = UINT64_MAX;
    for (int j = 0; j < n; j++) {
        uint64_t e = e0 + (uint64_t)j;
        if (e >> 2 != block) {
            block = e >> 2;
            tr_dropout_words(d->seed, sample, d->site, e, w);
        }
        out[j] = w[e & 3] >= d->threshold ? inp[j] * d->scale : 0.0f;
    }
}

void cpu_dropout_probs(const tr_dropout *d, int T, int b, int h, int t, int k0, float *p, int n)
{
    uint64_t e0 = ((uint64_t)(d->head0 + h) * (uint64_t)T + (uint64_t)t) * (uint64_t)T;
    cpu_dropout_row(d, d->first_sample + (uint64_t)b, e0 + (uint64_t)k0, p, p, n);
}

typedef struct {
    float *out;
    const float *inp;
    tr_dropout d;
    int C, T, row0, C_total, col0;
} dropout_args;

static void dropout_rows(void *ctx, size_t lo, size_t hi)
{
    const dropout_args *a = ctx;
    for (size_t n = lo; n < hi; n++) {
        uint64_t g = (uint64_t)a->row0 + n;
        uint64_t e0 = (g % (uint64_t)a->T) * (uint64_t)a->C_total + (uint64_t)a->col0;
        size_t at = n * (size_t)a->C;
        cpu_dropout_row(&a->d, a->d.first_sample + g / (uint64_t)a->T, e0, a->out + at,
                        a->inp + at, a->C);
    }
}

void cpu_dropout(tr_stream s, float *out, const float *inp, tr_dropout d, int N, int C, int T,
                 int row0, int C_total, int col0)
{
    (void)s;
    dropout_args a = {out, inp, d, C, T, row0, C_total, col0};
    /* Philox costs about 20 flops an element: worth the team sooner than a plain loop */
    cpu_for_ranges((size_t)N * C >= CPU_PAR_MIN / 4, (size_t)N,
                   cpu_rows_per_piece((size_t)C) / 4 + 1, dropout_rows, &a);
}
