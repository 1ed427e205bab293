/* Micro-benchmark of the CPU kernel table at GPT-2 124M sizes (B=4, T=256, C=768, NH=12,
 * V=50304): GEMM throughput for each linear layer's shapes, attention, and the C loops.
 * Usage: kernels_cpu [repeats [filter]]   (set OMP_NUM_THREADS / OPENBLAS_CORETYPE outside).
 * Prints the best time of `repeats` runs of each op whose label contains `filter`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "core/core.h"
#include "kernels/kernels.h"

static const tr_kernels *K;
static int repeats = 5;
static const char *filter = "";

static float *buf(size_t n)
{
    float *p = K->alloc(n * sizeof(float));
    if (!p) {
        fprintf(stderr, "kernels_cpu: %s\n", tr_errmsg());
        exit(1);
    }
    for (size_t i = 0; i < n; i++)
        p[i] = (float)((i * 2654435761u) % 2001) / 1000.0f - 1.0f;
    return p;
}

#define BEST(label, flops, stmt)                                                                \
    do {                                                                                        \
        if (!strstr(label, filter))                                                             \
            break;                                                                              \
        stmt; /* warm-up */                                                                     \
        double best = 1e30;                                                                     \
        for (int r_ = 0; r_ < repeats; r_++) {                                                  \
            double t0_ = tr_now();                                                              \
            stmt;                                                                               \
            double dt_ = tr_now() - t0_;                                                        \
            best = dt_ < best ? dt_ : best;                                                     \
        }                                                                                       \
        if ((flops) > 0)                                                                        \
            printf("%-44s %9.3f ms  %7.1f GFLOP/s\n", label, best * 1e3, (flops) / best / 1e9); \
        else                                                                                    \
            printf("%-44s %9.3f ms\n", label, best * 1e3);                                      \
    } while (0)

static void bench_gemm(int ta, int tb, int M, int N, int Kd, const char *what)
{
    float *A = buf((size_t)M * Kd), *B = buf((size_t)Kd * N), *C = buf((size_t)M * N);
    char label[96];
    snprintf(label, sizeof label, "gemm %s %c%c (%d,%d,%d)", what, ta ? 'T' : 'N', tb ? 'T' : 'N',
             M, N, Kd);
    BEST(label, 2.0 * M * N * Kd,
         K->gemm(NULL, ta, tb, M, N, Kd, 1.0f, A, ta ? M : Kd, B, tb ? Kd : N, 0.0f, C, N));
    K->free(A), K->free(B), K->free(C);
}

/* Peer for the GEMM design: the same product with OpenBLAS's own threads (what the backend
 * would do without splitting over its OpenMP team), then a GELU right after it, which shows
 * whether OpenBLAS's spinning workers slow the OpenMP loops that follow. */
static void bench_openblas_threads(void)
{
    int M = 1024, N = 2304, Kd = 768, threads = tr_kernels_cpu_threads();
    size_t nh = (size_t)1024 * 3072;
    float *A = buf((size_t)M * Kd), *B = buf((size_t)N * Kd), *C = buf((size_t)M * N);
    float *h = buf(nh), *hg = buf(nh);
    BEST("gemm (1024,2304,768) via table", 2.0 * M * N * Kd,
         K->gemm(NULL, 0, 1, M, N, Kd, 1.0f, A, Kd, B, Kd, 0.0f, C, N));
    BEST("  then gelu (1024x3072)", 0,
         (K->gemm(NULL, 0, 1, M, N, Kd, 1.0f, A, Kd, B, Kd, 0.0f, C, N),
          K->gelu_forward(NULL, hg, h, nh)));
    openblas_set_num_threads(threads);
    BEST("gemm (1024,2304,768) OpenBLAS-threaded", 2.0 * M * N * Kd,
         cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, Kd, 1.0f, A, Kd, B, Kd,
                     0.0f, C, N));
    BEST("  then gelu (1024x3072)", 0,
         (cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, Kd, 1.0f, A, Kd, B, Kd,
                      0.0f, C, N),
          K->gelu_forward(NULL, hg, h, nh)));
    openblas_set_num_threads(1);
    K->free(A), K->free(B), K->free(C), K->free(h), K->free(hg);
}

int main(int argc, char **argv)
{
    if (argc > 1)
        repeats = atoi(argv[1]) > 0 ? atoi(argv[1]) : repeats;
    if (argc > 2)
        filter = argv[2];
    K = tr_kernels_cpu();
    const int B = 4, T = 256, C = 768, NH = 12, HS = 64, V = 50304, N = B * T;
    const char *core = getenv("OPENBLAS_CORETYPE");
    printf("threads %d, OPENBLAS_CORETYPE=%s, best of %d\n", tr_kernels_cpu_threads(),
           core ? core : "(unset)", repeats);

    bench_openblas_threads();

    /* every GEMM of one transformer layer and the head, forward and backward forms */
    bench_gemm(0, 1, N, 3 * C, C, "qkv fwd");
    bench_gemm(0, 0, N, C, 3 * C, "qkv dx");
    bench_gemm(1, 0, 3 * C, C, N, "qkv dW");
    bench_gemm(0, 1, N, C, C, "attproj fwd");
    bench_gemm(0, 1, N, 4 * C, C, "fc fwd");
    bench_gemm(0, 1, N, C, 4 * C, "fcproj fwd");
    bench_gemm(1, 0, 4 * C, C, N, "fc dW");
    bench_gemm(0, 1, N, V, C, "head fwd");
    bench_gemm(0, 0, N, C, V, "head dx");
    bench_gemm(1, 0, V, C, N, "head dW");

    float *qkv = buf((size_t)N * 3 * C), *out = buf((size_t)N * C), *att = buf((size_t)B * NH * T);
    float *dqkv = buf((size_t)N * 3 * C), *datt = buf((size_t)B * (NH + 1) * T), *dout = buf((size_t)N * C);
    double att_flops = 2.0 * 2 * B * NH * (double)T * T * HS; /* full (non-causal) count */
    BEST("attention forward (B4 T256 NH12 HS64)", att_flops,
         K->attention_forward(NULL, out, att, qkv, B, T, NH, HS, NULL));
    BEST("attention backward", 2 * att_flops,
         K->attention_backward(NULL, dqkv, datt, dout, qkv, out, att, B, T, NH, HS, NULL));
    BEST("attention forward + backward", 3 * att_flops,
         (K->attention_forward(NULL, out, att, qkv, B, T, NH, HS, NULL),
          K->attention_backward(NULL, dqkv, datt, dout, qkv, out, att, B, T, NH, HS, NULL)));

    float *x = buf((size_t)N * C), *y = buf((size_t)N * C), *w = buf(C), *bb = buf(C);
    float *mean = buf(N), *rstd = buf(N), *dx = buf((size_t)N * C), *dw = buf(C), *db = buf(C);
    BEST("layernorm forward (1024x768)", 0,
         K->layernorm_forward(NULL, y, mean, rstd, x, w, bb, N, C, 1e-5f));
    BEST("layernorm backward", 0,
         K->layernorm_backward(NULL, dx, dw, db, dout, x, w, mean, rstd, N, C));
    size_t nh = (size_t)N * 4 * C;
    float *h = buf(nh), *hg = buf(nh), *dh = buf(nh);
    BEST("gelu forward (1024x3072)", 0, K->gelu_forward(NULL, hg, h, nh));
    BEST("gelu backward", 0, K->gelu_backward(NULL, dh, h, hg, nh));
    BEST("exact gelu forward (1024x3072)", 0, K->gelu_exact_forward(NULL, hg, h, nh));
    BEST("exact gelu backward", 0, K->gelu_exact_backward(NULL, dh, h, hg, nh));
    /* GeGLU (Gemma's MLP) on 1024 x 3072 (gate, up) pairs: h's (N, 2 x 1536) read as pairs */
    BEST("geglu forward (1024x3072 pairs, tanh)", 0, K->geglu_forward(NULL, hg, h, nh / 2, 0));
    BEST("geglu backward (tanh)", 0, K->geglu_backward(NULL, dh, h, hg, nh / 2, 0));
    BEST("geglu forward (exact)", 0, K->geglu_forward(NULL, hg, h, nh / 2, 1));
    BEST("geglu backward (exact)", 0, K->geglu_backward(NULL, dh, h, hg, nh / 2, 1));
    BEST("bias_add (1024x3072)", 0, K->bias_add(NULL, h, bb, N, 3 * C));
    BEST("bias_backward (1024x768)", 0, K->bias_backward(NULL, dw, dout, N, C));
    BEST("copy 1024x768", 0, K->copy(NULL, y, x, (size_t)N * C * sizeof(float)));

    float *logits = buf((size_t)N * V), *dlogits = buf((size_t)N * V);
    float *maxv = buf(N), *sumexp = buf(N), *picked = buf(N), *losses = buf(N);
    int32_t *targets = K->alloc((size_t)N * sizeof(int32_t));
    for (int i = 0; i < N; i++)
        targets[i] = (int32_t)((i * 7919) % 50257);
    BEST("xent max+sumexp+pick+loss (1024x50304)", 0,
         (K->xent_row_max(NULL, maxv, logits, N, V, 50257),
          K->xent_row_sumexp(NULL, sumexp, logits, maxv, N, V, 50257),
          K->xent_pick(NULL, picked, logits, targets, N, V, 0),
          K->xent_loss(NULL, losses, maxv, sumexp, picked, N)));
    BEST("xent backward", 0,
         K->xent_backward(NULL, dlogits, logits, maxv, sumexp, targets, N, V, 50257, 0,
                          1.0f / N));
    K->free(logits), K->free(dlogits);

    float *wte = buf((size_t)V * C), *dwte = buf((size_t)V * C), *wpe = buf((size_t)1024 * C);
    BEST("embedding + position forward", 0,
         (K->embedding_forward(NULL, y, targets, wte, N, C, 0, V),
          K->position_forward(NULL, y, wpe, B, T, C)));
    BEST("embedding + position backward", 0,
         (K->embedding_backward(NULL, dwte, dout, targets, N, C, 0, V),
          K->position_backward(NULL, wpe, dout, B, T, C)));
    K->free(wte), K->free(dwte);

    /* the optimizer over GPT-2 124M's parameter count (padded vocabulary): 2 GB, so only
     * allocated when selected */
    if (strstr("adamw (124M params)", filter) || strstr("sumsq (124M)", filter)) {
        size_t np = 124439808;
        float *p = K->alloc(np * 4), *g = K->alloc(np * 4), *m = K->alloc(np * 4),
              *v = K->alloc(np * 4);
        if (!p || !g || !m || !v) {
            fprintf(stderr, "kernels_cpu: %s\n", tr_errmsg());
            return 1;
        }
        int step = 0;
        BEST("adamw (124M params)", 0,
             K->adamw(NULL, p, g, m, v, np, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, ++step));
        volatile double sink = 0;
        BEST("sumsq (124M)", 0, sink += K->sumsq(NULL, g, np));
        (void)sink;
        K->free(p), K->free(g), K->free(m), K->free(v);
    }
    return 0;
}
