/* Tensor-parallel speed-up benchmark (issue 4), run by tp_speedup.sh:
 *   T = 1:  OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 OPENBLAS_CORETYPE=SkylakeX tp_speedup
 *   T = W:  trident launch --nproc W -- tp_speedup        (every rank one TP rank)
 * One GPT stage holding the whole model (tr_gpt_create on the world as the TP group) runs
 * forward + backward of one micro-batch per iteration (no optimizer: parameters stay fixed,
 * gradients accumulate). Per iteration and rank it records the wall time, the process CPU
 * time, and inside it the time in TP collectives (tr_gpt_tp_comm_seconds), in GEMMs and in
 * the attention kernels (the kernel table's gemm / attention_* wrapped with two tr_now()
 * calls each; the GEMMs' thread CPU time too); "other" is the rest (LayerNorm, GELU,
 * residual adds, bias, embedding, loss).
 * An iteration starts after a barrier and its time is the slowest rank's.
 *   tp_speedup [--layers L] [--hidden C] [--heads NH] [--seq S] [--batch B] [--vocab V]
 *              [--iters N] [--warmup W] [--sp] [--pin]
 * Defaults: 4 layers, C 768, 12 heads, S 256, B 4, V 256, 8 iterations after 1 warm-up.
 * Output: "key value ..." lines on rank 0 (tp_speedup.sh turns them into a table):
 *   config ..., then "iter_ms" (median, min, max of the slowest rank per iteration), then per
 *   rank "rank r iter_ms .. cpu_ms .. comm_ms .. comm_calls .. gemm_ms .. attn_ms ..
 *   other_ms .. gemm_cpu_ms .. comm_share .." (medians over iterations; share = comm /
 *   iteration time).
 * --pin binds rank r to CPU r mod #CPUs (sched_setaffinity): one core per rank. */
#include "model/gpt.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { MAX_ITERS = 200, NSTAT = 8 };
enum { S_ITER, S_CPU, S_COMM, S_CALLS, S_GEMM, S_ATTN, S_OTHER, S_GEMM_CPU };

static void die(const char *what)
{
    fprintf(stderr, "tp_speedup: %s: %s\n", what, tr_errmsg());
    exit(1);
}

#define OK(call)                                                                               \
    do {                                                                                       \
        if (call)                                                                              \
            die(#call);                                                                        \
    } while (0)

/* ------------------------------------------------------------ timed kernel table */

static const tr_kernels *base;
static double gemm_s, attn_s, gemm_cpu_s; /* wall in GEMMs and attention, CPU in GEMMs */

static double thread_cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void timed_gemm(tr_stream s, int ta, int tb, int M, int N, int K, float alpha,
                       const float *A, int lda, const float *B, int ldb, float beta, float *C,
                       int ldc)
{
    double t0 = tr_now(), c0 = thread_cpu_now();
    base->gemm(s, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    gemm_s += tr_now() - t0;
    gemm_cpu_s += thread_cpu_now() - c0;
}

static void timed_attention_forward(tr_stream s, float *out, float *att, const float *qkv,
                                    int B, int T, int NH, int HS)
{
    double t0 = tr_now();
    base->attention_forward(s, out, att, qkv, B, T, NH, HS);
    attn_s += tr_now() - t0;
}

static void timed_attention_backward(tr_stream s, float *dqkv, float *datt, const float *dout,
                                     const float *qkv, const float *att, int B, int T, int NH,
                                     int HS)
{
    double t0 = tr_now();
    base->attention_backward(s, dqkv, datt, dout, qkv, att, B, T, NH, HS);
    attn_s += tr_now() - t0;
}

/* ------------------------------------------------------------ helpers */

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(const double *v, int n)
{
    double s[MAX_ITERS];
    memcpy(s, v, sizeof(double) * (size_t)n);
    qsort(s, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

static int arg_int(int argc, char **argv, int *i, const char *name, int *out)
{
    if (strcmp(argv[*i], name) || *i + 1 >= argc)
        return 0;
    *out = atoi(argv[++*i]);
    return 1;
}

int main(int argc, char **argv)
{
    int layers = 4, C = 768, NH = 12, S = 256, B = 4, V = 256, iters = 8, warmup = 1, sp = 0,
        pin = 0;
    for (int i = 1; i < argc; i++) {
        if (arg_int(argc, argv, &i, "--layers", &layers) ||
            arg_int(argc, argv, &i, "--hidden", &C) || arg_int(argc, argv, &i, "--heads", &NH) ||
            arg_int(argc, argv, &i, "--seq", &S) || arg_int(argc, argv, &i, "--batch", &B) ||
            arg_int(argc, argv, &i, "--vocab", &V) || arg_int(argc, argv, &i, "--iters", &iters) ||
            arg_int(argc, argv, &i, "--warmup", &warmup))
            continue;
        if (!strcmp(argv[i], "--sp")) {
            sp = 1;
            continue;
        }
        if (!strcmp(argv[i], "--pin")) {
            pin = 1;
            continue;
        }
        fprintf(stderr, "usage: tp_speedup [--layers L] [--hidden C] [--heads NH] [--seq S] "
                        "[--batch B] [--vocab V] [--iters N] [--warmup W] [--sp] [--pin]\n");
        return 2;
    }
    if (layers < 1 || C < 1 || NH < 1 || S < 1 || B < 1 || V < 1 || iters < 1 ||
        iters > MAX_ITERS || warmup < 0) {
        fprintf(stderr, "tp_speedup: sizes must be >= 1, iters in [1, %d]\n", MAX_ITERS);
        return 2;
    }

    tr_comm_config cc = tr_comm_config_default();
    cc.timeout_s = 300;
    tr_comm *world = NULL;
    OK(tr_comm_init_world(&cc, &world));
    int T = tr_comm_size(world), rank = tr_comm_rank(world);
    if (pin) {
        cpu_set_t set;
        CPU_ZERO(&set);
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        CPU_SET(rank % (int)(ncpu > 0 ? ncpu : 1), &set);
        if (sched_setaffinity(0, sizeof set, &set)) {
            perror("tp_speedup: sched_setaffinity");
            return 1;
        }
    }

    base = tr_kernels_cpu();
    static tr_kernels timed;
    timed = *base;
    timed.gemm = timed_gemm;
    timed.attention_forward = timed_attention_forward;
    timed.attention_backward = timed_attention_backward;

    int div = 128 * T;
    tr_gpt_shape s = {.num_layers = layers, .C = C, .NH = NH, .T = S, .max_T = S, .V = V,
                      .Vp = (V + div - 1) / div * div, .eps = 1e-5f, .init_std = 0.02f,
                      .seed = 1, .layer_first = 0, .layer_count = layers, .is_first = 1,
                      .is_last = 1, .tp_size = T, .tp_rank = rank, .sequence_parallel = sp};
    tr_gpt *g = NULL;
    OK(tr_gpt_create(&s, &timed, T > 1 ? world : NULL, &g));
    size_t n = tr_gpt_num_params(g);
    float *params = base->alloc(n * sizeof(float)), *grads = base->alloc(n * sizeof(float));
    if (!params || !grads)
        die("parameter buffers");
    tr_gpt_bind(g, params, grads);
    OK(tr_gpt_init_params(g));
    tr_gpt_acts *a = NULL;
    OK(tr_gpt_acts_create(g, B, &a));

    int N = B * S;
    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)N),
            *targets = malloc(sizeof(int32_t) * (size_t)N);
    if (!tokens || !targets)
        die("token buffers");
    for (int i = 0; i < N; i++) {
        tokens[i] = (int32_t)((i * 7 + 3) % V);
        targets[i] = (int32_t)((i * 5 + 1) % V);
    }

    static double st[NSTAT][MAX_ITERS], slowest[MAX_ITERS];
    float loss = 0;
    for (int it = -warmup; it < iters; it++) {
        if (T > 1)
            OK(tr_comm_barrier(world));
        tr_gpt_tp_comm_reset(g);
        gemm_s = attn_s = gemm_cpu_s = 0;
        double t0 = tr_now(), c0 = cpu_now();
        OK(tr_gpt_forward(g, a, tokens, NULL, targets, 1.0f / (float)N, &loss));
        OK(tr_gpt_backward(g, a, NULL));
        double dt = tr_now() - t0, dc = cpu_now() - c0;
        long calls = 0;
        double comm = tr_gpt_tp_comm_seconds(g, &calls);
        if (it < 0)
            continue;
        double v[NSTAT] = {dt, dc, comm, (double)calls, gemm_s, attn_s,
                           dt - comm - gemm_s - attn_s, gemm_cpu_s};
        for (int k = 0; k < NSTAT; k++)
            st[k][it] = v[k];
    }

    /* per-iteration slowest rank, then every rank's medians to rank 0 */
    memcpy(slowest, st[S_ITER], sizeof(double) * (size_t)iters);
    OK(tr_comm_allreduce(world, slowest, slowest, (size_t)iters, TR_COMM_F64, TR_COMM_MAX));
    double mine[NSTAT + 1], *all = malloc(sizeof(double) * (NSTAT + 1) * (size_t)T);
    if (!all)
        die("statistics");
    for (int k = 0; k < NSTAT; k++)
        mine[k] = median(st[k], iters);
    double comm_sum = 0, iter_sum = 0;
    for (int it = 0; it < iters; it++) {
        comm_sum += st[S_COMM][it];
        iter_sum += st[S_ITER][it];
    }
    mine[NSTAT] = comm_sum / iter_sum;
    OK(tr_comm_allgather(world, mine, all, (size_t)(NSTAT + 1) * (size_t)T, TR_COMM_F64));

    if (rank == 0) {
        printf("config T %d sp %d pin %d layers %d hidden %d heads %d seq %d batch %d vocab %d "
               "vocab_padded %d params_per_rank %zu iters %d warmup %d loss %.4f\n",
               T, sp, pin, layers, C, NH, S, B, V, s.Vp, n, iters, warmup, loss);
        double lo = slowest[0], hi = slowest[0];
        for (int it = 1; it < iters; it++) {
            lo = slowest[it] < lo ? slowest[it] : lo;
            hi = slowest[it] > hi ? slowest[it] : hi;
        }
        printf("iter_ms median %.2f min %.2f max %.2f\n", median(slowest, iters) * 1e3,
               lo * 1e3, hi * 1e3);
        for (int r = 0; r < T; r++) {
            const double *x = all + (size_t)r * (NSTAT + 1);
            printf("rank %d iter_ms %.2f cpu_ms %.2f comm_ms %.2f comm_calls %.0f gemm_ms %.2f "
                   "attn_ms %.2f other_ms %.2f gemm_cpu_ms %.2f comm_share %.4f\n",
                   r, x[S_ITER] * 1e3, x[S_CPU] * 1e3, x[S_COMM] * 1e3, x[S_CALLS],
                   x[S_GEMM] * 1e3, x[S_ATTN] * 1e3, x[S_OTHER] * 1e3, x[S_GEMM_CPU] * 1e3,
                   x[NSTAT]);
        }
    }
    free(all);
    free(tokens);
    free(targets);
    tr_gpt_acts_free(a);
    tr_gpt_free(g);
    base->free(params);
    base->free(grads);
    tr_comm_destroy(world);
    return 0;
}
