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
 *              [--iters N] [--warmup W] [--sp] [--pin] [--paired]
 * Defaults: 4 layers, C 768, 12 heads, S 256, B 4, V 256, 8 iterations after 1 warm-up.
 * Output: "key value ..." lines on rank 0 (tp_speedup.sh turns them into a table):
 *   config ..., then "iter_ms" (median, min, max of the slowest rank per iteration), then per
 *   rank "rank r iter_ms .. cpu_ms .. comm_ms .. comm_calls .. gemm_ms .. attn_ms ..
 *   other_ms .. gemm_cpu_ms .. comm_share .." (medians over iterations; share = comm /
 *   iteration time).
 * --pin binds rank r to CPU r mod #CPUs (sched_setaffinity): one core per rank.
 * --paired (T > 1): rank 0 also holds the unsplit model (T = 1) and every round runs it
 *   alone first (the other ranks wait in a barrier, asleep), then the split model on all
 *   ranks, so both see the same machine load; it adds the same lines prefixed "single "
 *   for the unsplit model and "paired_speedup median .. min .. max .." (the per-round
 *   ratios unsplit / split). */
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

static void timed_attention_forward(tr_stream s, float *out, float *lse, const float *qkv,
                                    int B, int T, int NH, int HS, const int32_t *segments)
{
    double t0 = tr_now();
    base->attention_forward(s, out, lse, qkv, B, T, NH, HS, segments);
    attn_s += tr_now() - t0;
}

static void timed_attention_backward(tr_stream s, float *dqkv, float *scratch,
                                     const float *dout, const float *qkv, const float *out,
                                     const float *lse, int B, int T, int NH, int HS,
                                     const int32_t *segments)
{
    double t0 = tr_now();
    base->attention_backward(s, dqkv, scratch, dout, qkv, out, lse, B, T, NH, HS, segments);
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

typedef struct {
    tr_gpt *g;
    tr_gpt_acts *a;
    float *params, *grads;
    size_t n;
} model;

static tr_gpt_shape shape(int layers, int C, int NH, int S, int V, int T, int rank, int sp)
{
    int div = 128 * T;
    return (tr_gpt_shape){.num_layers = layers, .C = C, .NH = NH, .T = S, .max_T = S, .V = V,
                          .Vp = (V + div - 1) / div * div, .eps = 1e-5f, .init_std = 0.02f,
                          .seed = 1, .layer_first = 0, .layer_count = layers, .is_first = 1,
                          .is_last = 1, .tp_size = T, .tp_rank = rank,
                          .sequence_parallel = sp};
}

static void make(model *m, const tr_gpt_shape *s, const tr_kernels *k, tr_comm *tp, int B)
{
    OK(tr_gpt_create(s, k, tp, &m->g));
    m->n = tr_gpt_num_params(m->g);
    m->params = base->alloc(m->n * sizeof(float));
    m->grads = base->alloc(m->n * sizeof(float));
    if (!m->params || !m->grads)
        die("parameter buffers");
    tr_gpt_bind(m->g, m->params, m->grads);
    OK(tr_gpt_init_params(m->g));
    OK(tr_gpt_acts_create(m->g, B, &m->a));
}

static void unmake(model *m)
{
    tr_gpt_acts_free(m->a);
    tr_gpt_free(m->g);
    base->free(m->params);
    base->free(m->grads);
}

/* One forward + backward; v[NSTAT] gets its statistics. */
static void iteration(model *m, const int32_t *tokens, const int32_t *targets, int N,
                      float *loss, double *v)
{
    tr_gpt_tp_comm_reset(m->g);
    gemm_s = attn_s = gemm_cpu_s = 0;
    double t0 = tr_now(), c0 = cpu_now();
    OK(tr_gpt_forward(m->g, m->a, tokens, NULL, targets, 1.0f / (float)N, loss));
    OK(tr_gpt_backward(m->g, m->a, NULL));
    double dt = tr_now() - t0, dc = cpu_now() - c0;
    long calls = 0;
    double comm = tr_gpt_tp_comm_seconds(m->g, &calls);
    double x[NSTAT] = {dt, dc, comm, (double)calls, gemm_s, attn_s,
                       dt - comm - gemm_s - attn_s, gemm_cpu_s};
    memcpy(v, x, sizeof x);
}

/* Medians of one rank's statistics (+ the comm share of the summed times) into out. */
static void summarize(double st[NSTAT][MAX_ITERS], int iters, double *out)
{
    double comm_sum = 0, iter_sum = 0;
    for (int k = 0; k < NSTAT; k++)
        out[k] = median(st[k], iters);
    for (int it = 0; it < iters; it++) {
        comm_sum += st[S_COMM][it];
        iter_sum += st[S_ITER][it];
    }
    out[NSTAT] = comm_sum / iter_sum;
}

/* "<prefix> median .. min .. max .." of v[0..n) times scale */
static void print_spread(const char *prefix, const double *v, int n, double scale)
{
    double lo = v[0], hi = v[0];
    for (int i = 1; i < n; i++) {
        lo = v[i] < lo ? v[i] : lo;
        hi = v[i] > hi ? v[i] : hi;
    }
    printf("%s median %.3f min %.3f max %.3f\n", prefix, median(v, n) * scale, lo * scale,
           hi * scale);
}

static void print_rank(const char *prefix, int r, const double *x)
{
    printf("%srank %d iter_ms %.2f cpu_ms %.2f comm_ms %.2f comm_calls %.0f gemm_ms %.2f "
           "attn_ms %.2f other_ms %.2f gemm_cpu_ms %.2f comm_share %.4f\n",
           prefix, r, x[S_ITER] * 1e3, x[S_CPU] * 1e3, x[S_COMM] * 1e3, x[S_CALLS],
           x[S_GEMM] * 1e3, x[S_ATTN] * 1e3, x[S_OTHER] * 1e3, x[S_GEMM_CPU] * 1e3, x[NSTAT]);
}

int main(int argc, char **argv)
{
    int layers = 4, C = 768, NH = 12, S = 256, B = 4, V = 256, iters = 8, warmup = 1, sp = 0,
        pin = 0, paired = 0;
    for (int i = 1; i < argc; i++) {
        if (arg_int(argc, argv, &i, "--layers", &layers) ||
            arg_int(argc, argv, &i, "--hidden", &C) || arg_int(argc, argv, &i, "--heads", &NH) ||
            arg_int(argc, argv, &i, "--seq", &S) || arg_int(argc, argv, &i, "--batch", &B) ||
            arg_int(argc, argv, &i, "--vocab", &V) || arg_int(argc, argv, &i, "--iters", &iters) ||
            arg_int(argc, argv, &i, "--warmup", &warmup))
            continue;
        int *flag = !strcmp(argv[i], "--sp")       ? &sp
                    : !strcmp(argv[i], "--pin")    ? &pin
                    : !strcmp(argv[i], "--paired") ? &paired
                                                   : NULL;
        if (flag) {
            *flag = 1;
            continue;
        }
        fprintf(stderr, "usage: tp_speedup [--layers L] [--hidden C] [--heads NH] [--seq S] "
                        "[--batch B] [--vocab V] [--iters N] [--warmup W] [--sp] [--pin] "
                        "[--paired]\n");
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
    if (paired && T == 1) {
        fprintf(stderr, "tp_speedup: --paired needs more than one rank\n");
        return 2;
    }
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

    tr_gpt_shape s = shape(layers, C, NH, S, V, T, rank, sp);
    model m, one = {0};
    make(&m, &s, &timed, T > 1 ? world : NULL, B);
    int single = paired && rank == 0; /* rank 0 also runs the unsplit model */
    if (single) {
        tr_gpt_shape s1 = shape(layers, C, NH, S, V, 1, 0, 0);
        make(&one, &s1, &timed, NULL, B);
    }

    int N = B * S;
    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)N),
            *targets = malloc(sizeof(int32_t) * (size_t)N);
    if (!tokens || !targets)
        die("token buffers");
    for (int i = 0; i < N; i++) {
        tokens[i] = (int32_t)((i * 7 + 3) % V);
        targets[i] = (int32_t)((i * 5 + 1) % V);
    }

    /* --paired: each round runs the unsplit model on rank 0 alone (the others wait in a
     * barrier, asleep), then the split one on every rank, so both see the same machine */
    static double st[NSTAT][MAX_ITERS], st1[NSTAT][MAX_ITERS], slowest[MAX_ITERS];
    float loss = 0, loss1 = 0;
    for (int it = -warmup; it < iters; it++) {
        double v[NSTAT];
        if (paired) {
            OK(tr_comm_barrier(world));
            if (single) {
                iteration(&one, tokens, targets, N, &loss1, v);
                for (int k = 0; it >= 0 && k < NSTAT; k++)
                    st1[k][it] = v[k];
            }
        }
        if (T > 1)
            OK(tr_comm_barrier(world));
        iteration(&m, tokens, targets, N, &loss, v);
        for (int k = 0; it >= 0 && k < NSTAT; k++)
            st[k][it] = v[k];
    }

    /* per-iteration slowest rank, then every rank's medians to rank 0 */
    memcpy(slowest, st[S_ITER], sizeof(double) * (size_t)iters);
    OK(tr_comm_allreduce(world, slowest, slowest, (size_t)iters, TR_COMM_F64, TR_COMM_MAX));
    double mine[NSTAT + 1], *all = malloc(sizeof(double) * (NSTAT + 1) * (size_t)T);
    if (!all)
        die("statistics");
    summarize(st, iters, mine);
    OK(tr_comm_allgather(world, mine, all, (size_t)(NSTAT + 1) * (size_t)T, TR_COMM_F64));

    if (rank == 0) {
        printf("config T %d sp %d pin %d paired %d layers %d hidden %d heads %d seq %d batch %d "
               "vocab %d vocab_padded %d params_per_rank %zu iters %d warmup %d loss %.4f\n",
               T, sp, pin, paired, layers, C, NH, S, B, V, s.Vp, m.n, iters, warmup, loss);
        print_spread("iter_ms", slowest, iters, 1e3);
        for (int r = 0; r < T; r++)
            print_rank("", r, all + (size_t)r * (NSTAT + 1));
        if (single) {
            /* the same lines for the unsplit model, prefixed "single", and the per-round
             * ratios single / split */
            double x[NSTAT + 1], ratio[MAX_ITERS];
            summarize(st1, iters, x);
            printf("single config T 1 params %zu loss %.4f\n", one.n, loss1);
            print_spread("single iter_ms", st1[S_ITER], iters, 1e3);
            print_rank("single ", 0, x);
            for (int it = 0; it < iters; it++)
                ratio[it] = st1[S_ITER][it] / slowest[it];
            print_spread("paired_speedup", ratio, iters, 1.0);
        }
    }
    free(all);
    free(tokens);
    free(targets);
    if (single)
        unmake(&one);
    unmake(&m);
    tr_comm_destroy(world);
    return 0;
}
