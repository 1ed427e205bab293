/* benchmarks/head_loss: the LM head and its cross-entropy at GPT-2 124M sizes (C 768, V 50257
 * padded to 50304), one rank, side by side in one run:
 *   unfused   the head before issue 24 item 8: logits (N, V) = x W^T whole, row max, sum of
 *             exponentials, target pick, loss, gradient in place, dx = dlogits W,
 *             dW += dlogits^T x (tp/'s column linear and cross-entropy pieces);
 *   chunked   tr_tp_vocab_head_loss: the same per chunk of tr_gpt_head_chunk_rows rows (or
 *             --rows R), statistics in one read, loss and gradient in one pass.
 * Each: training (forward + backward) and evaluation (losses only); best of `repeats`
 * alternating runs after a warm-up; the logits buffer each needs; the largest difference of
 * losses, dx and dW.
 *   head_loss [--tokens N] [--rows R] [--repeats K]   (N default 4096 = micro-batch 4 x 1024)
 * Set OMP_NUM_THREADS / OPENBLAS_CORETYPE outside. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "kernels/kernels.h"
#include "model/gpt.h"
#include "tp/tp.h"

enum { C = 768, VP = 50304, V = 50257 };

static const tr_kernels *K;

static float *buf(size_t n, unsigned salt)
{
    float *p = K->alloc(n * sizeof(float));
    if (!p) {
        fprintf(stderr, "head_loss: out of memory (%zu MiB)\n", n * sizeof(float) >> 20);
        exit(1);
    }
    for (size_t i = 0; i < n; i++)
        p[i] = (float)(((i + salt) * 2654435761u) % 2001) / 1000.0f - 1.0f;
    return p;
}

static double max_rel(const float *a, const float *b, size_t n)
{
    double err = 0, scale = 0;
    for (size_t i = 0; i < n; i++) {
        err = fmax(err, fabs((double)a[i] - b[i]));
        scale = fmax(scale, fabs((double)b[i]));
    }
    return scale > 0 ? err / scale : err;
}

typedef struct {
    tr_tp tp;
    int N, rows;
    float *x, *W, *losses, *dx, *dW, *logits, *stats;
    int32_t *targets;
} bench;

static void unfused(bench *b, float scale)
{
    int rc = tr_tp_column_linear_forward(&b->tp, b->logits, b->x, b->W, NULL, b->N, C, VP, NULL,
                                         NULL);
    rc = rc ? rc : tr_tp_vocab_cross_entropy_forward(&b->tp, b->losses, b->stats, b->logits,
                                                     b->targets, b->N, VP, V);
    if (!rc && scale != 0.0f) {
        rc = tr_tp_vocab_cross_entropy_backward(&b->tp, b->logits, b->logits, b->stats,
                                                b->targets, b->N, VP, V, scale);
        rc = rc ? rc : tr_tp_column_linear_backward(&b->tp, b->dx, b->dW, NULL, b->logits, b->x,
                                                    b->W, b->N, C, VP);
    }
    if (rc) {
        fprintf(stderr, "head_loss: %s\n", tr_errmsg());
        exit(1);
    }
}

static void chunked(bench *b, float scale)
{
    tr_tp_head_chunks ch = {.logits = b->logits, .stats = b->stats, .rows = b->rows};
    if (tr_tp_vocab_head_loss(&b->tp, &ch, b->losses, b->dx, b->dW, b->x, b->W, b->targets, NULL,
                              b->N, C, VP, V, scale)) {
        fprintf(stderr, "head_loss: %s\n", tr_errmsg());
        exit(1);
    }
}

/* Best times of fn_a and fn_b over `repeats` alternating runs after one warm-up each (the
 * first touch of the buffers), so load from other work falls on both alike. */
static void best_of(void (*fn_a)(bench *, float), bench *a, void (*fn_b)(bench *, float),
                    bench *b, float scale, int repeats, double *ta, double *tb)
{
    fn_a(a, scale);
    fn_b(b, scale);
    *ta = *tb = 1e30;
    for (int r = 0; r < repeats; r++) {
        double t0 = tr_now();
        fn_a(a, scale);
        double t1 = tr_now();
        fn_b(b, scale);
        double t2 = tr_now();
        *ta = t1 - t0 < *ta ? t1 - t0 : *ta;
        *tb = t2 - t1 < *tb ? t2 - t1 : *tb;
    }
}

int main(int argc, char **argv)
{
    int N = 4096, rows = 0, repeats = 2;
    for (int i = 1; i < argc; i += 2) {
        if (i + 1 >= argc)
            argv[i] = "?"; /* an option without its value: usage */
        if (!strcmp(argv[i], "--tokens"))
            N = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--rows"))
            rows = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--repeats"))
            repeats = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: head_loss [--tokens N] [--rows R] [--repeats K]\n");
            return 2;
        }
    }
    if (N < 1 || repeats < 1 || rows < 0) {
        fprintf(stderr, "head_loss: --tokens and --repeats must be >= 1, --rows >= 0\n");
        return 2;
    }
    K = tr_kernels_cpu();
    bench u = {.N = N}, c = {.N = N};
    if (tr_tp_init(&u.tp, K, NULL, 0) || tr_tp_init(&c.tp, K, NULL, 0)) {
        fprintf(stderr, "head_loss: %s\n", tr_errmsg());
        return 1;
    }
    c.rows = rows ? rows : tr_gpt_head_chunk_rows(N, VP);
    u.x = buf((size_t)N * C, 1), u.W = buf((size_t)VP * C, 2);
    c.x = u.x, c.W = u.W;
    for (size_t i = 0; i < (size_t)VP * C; i++)
        u.W[i] *= 0.05f;
    u.targets = malloc((size_t)N * sizeof(int32_t));
    for (int n = 0; n < N; n++)
        u.targets[n] = (int32_t)((n * 7919u) % V);
    c.targets = u.targets;
    bench *both[2] = {&c, &u};
    for (int i = 0; i < 2; i++) {
        bench *b = both[i];
        int R = b == &u ? N : b->rows;
        b->losses = buf((size_t)N, 3), b->dx = buf((size_t)N * C, 4);
        b->dW = buf((size_t)VP * C, 5), b->logits = buf((size_t)R * VP, 6);
        b->stats = buf(8 * (size_t)R, 7); /* (the chunked one: tr_tp_head_chunks.stats) */
    }
    printf("head + cross-entropy, %d tokens x %d hidden -> %d logits (%d real), %d thread(s)\n",
           N, C, VP, V, tr_kernels_cpu_threads());
    double gf = 2.0 * N * C * VP / 1e9; /* one head GEMM */
    double tc, tu, ec, eu;
    best_of(chunked, &c, unfused, &u, 1.0f / N, repeats, &tc, &tu);
    printf("%-40s %9.1f ms  %6.1f GFLOP/s  logits buffer %7.1f MiB\n", "unfused (whole logits)",
           tu * 1e3, 3 * gf / tu, (double)N * VP * 4 / 1048576);
    printf("%-40s %9.1f ms  %6.1f GFLOP/s  logits buffer %7.1f MiB  (%d chunks of %d rows)\n",
           "chunked + fused", tc * 1e3, 3 * gf / tc, (double)c.rows * VP * 4 / 1048576,
           (N + c.rows - 1) / c.rows, c.rows);
    printf("%-40s %9.3f\n", "training: chunked / unfused time", tc / tu);
    /* the results of the last training passes (each applied once more after its warm-up:
     * dW accumulated the same number of times in both) */
    printf("max relative difference: losses %.2e, dx %.2e, dW %.2e\n",
           max_rel(c.losses, u.losses, (size_t)N), max_rel(c.dx, u.dx, (size_t)N * C),
           max_rel(c.dW, u.dW, (size_t)VP * C));
    best_of(chunked, &c, unfused, &u, 0.0f, repeats, &ec, &eu);
    printf("%-40s %9.1f ms\n%-40s %9.1f ms\n%-40s %9.3f\n", "evaluation, unfused", eu * 1e3,
           "evaluation, chunked + fused", ec * 1e3, "evaluation: chunked / unfused time",
           ec / eu);
    return 0;
}
