/* Data-parallel overlap benchmark (run as D ranks by `trident launch`, see dp_overlap.sh).
 *
 * A synthetic backward of GPT-2-small layers: per layer the weight- and input-gradient GEMMs
 * of its four linears (fc_proj, fc, attn_proj, qkv; C = 768, N tokens) write the layer's
 * gradient range of a flat buffer laid out like model/'s (last layer first), which is then
 * reported to dp/ as the model's grad hook would. Modes, each timed as the slowest rank:
 *   bwd      backward alone (no dp/)
 *   reduce   the bucketed all-reduce alone (every range reported at once, then finish)
 *   off      overlap_grad_reduce false: backward, then one all-reduce of the whole buffer
 *   on       overlap on (buckets of --bucket-mb) : reductions start during backward
 *   reduce_zero, on_zero  the same two with ZeRO-1 (reduce-scatter buckets)
 * hidden = (bwd + reduce - on) / reduce: the fraction of the reduction time that did not
 * add to the iteration (and the same for ZeRO-1). cpu_ms: CPU time of the busiest rank
 * (all its threads) per mode; on a machine whose cores the GEMMs already fill, the CPU work
 * of the reduction (copies and sums) cannot be hidden, only its waiting.
 * A variant CHUNK_KB:POLL sets the ring chunk size (tr_comm_set_tuning; 0 = the comm's
 * default) and POLL = 1 calls tr_dp_progress() after every GEMM (useful without a progress
 * thread). Variants and modes alternate within each repetition; every sample is printed.
 * Then the optimizer-state bytes of GPT-2 124M per rank with and without ZeRO-1
 * (tr_dp_layout: 25 MiB buckets, wte aligned).
 *   dp_overlap [--tokens N] [--layers L] [--bucket-mb MB] [--reps R]
 *              [--variant CHUNK_KB:POLL]... [--progress-thread] [--sleep]
 * DP_OVERLAP_TRACE=1 prints rank 0's bucket start/end times of every run.
 * --sleep: each layer sleeps for its measured GEMM time instead of computing (compute that
 * leaves the CPU free, as on a GPU): shows what overlap hides when the cores are not full.
 * Output: "key value..." lines (dp_overlap.sh turns them into a table). */
#include "comm/comm.h"
#include "dp/dp.h"
#include "kernels/kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

enum { C = 768, NMODES = 6 };
static const char *mode_name[NMODES] = {"bwd", "reduce", "off", "on", "reduce_zero", "on_zero"};

static const tr_kernels *K;
static int N = 128, layers = 12;
static float *X, *DY, *W, *DX; /* activations [N, 4C], weights [4C, C] (values irrelevant) */

static void die(const char *what)
{
    fprintf(stderr, "dp_overlap: %s: %s\n", what, tr_errmsg());
    exit(1);
}

#define OK(call)                                                                               \
    do {                                                                                       \
        if (call)                                                                              \
            die(#call);                                                                        \
    } while (0)

static size_t layer_numel(void) { return (size_t)12 * C * C + 13 * C; }

/* Backward of one linear (in -> out) whose weight gradient lives at dw: dW += dY^T X,
 * dX = dY W. */
static tr_dp *polled; /* variant POLL = 1: tr_dp_progress after every GEMM */

static void linear_backward(float *dw, int in, int out)
{
    K->gemm(NULL, 1, 0, out, in, N, 1.0f, DY, out, X, in, 1.0f, dw, in);
    if (polled)
        OK(tr_dp_progress(polled));
    K->gemm(NULL, 0, 0, N, in, out, 1.0f, DY, out, W, in, 0.0f, DX, in);
    if (polled)
        OK(tr_dp_progress(polled));
}

/* Layer l's gradient range (layers in reverse order: layer L-1 first in the buffer). */
static double sleep_layer_s; /* --sleep: the layer's GEMM time spent off the CPU instead */

static void layer_backward(float *grads, int l)
{
    float *g = grads + (size_t)(layers - 1 - l) * layer_numel();
    if (sleep_layer_s > 0) { /* like a GPU computing while the host thread waits */
        struct timespec ts = {(time_t)sleep_layer_s,
                              (long)((sleep_layer_s - (double)(time_t)sleep_layer_s) * 1e9)};
        nanosleep(&ts, NULL);
        return;
    }
    linear_backward(g, 4 * C, C);                             /* fc_proj (C, 4C) */
    linear_backward(g + 4 * C * C, C, 4 * C);                 /* fc (4C, C) */
    linear_backward(g + 8 * C * C, C, C);                     /* attn_proj (C, C) */
    linear_backward(g + 9 * C * C, C, 3 * C);                 /* qkv (3C, C) */
    for (size_t i = (size_t)12 * C * C; i < layer_numel(); i++) /* biases, LayerNorms */
        g[i] += 1.0f;
}

static int poll_each_gemm;

static void backward(float *grads, tr_dp *dp)
{
    polled = poll_each_gemm ? dp : NULL;
    for (int l = layers - 1; l >= 0; l--) {
        layer_backward(grads, l);
        if (dp)
            tr_dp_grad_ready(dp, (size_t)(layers - 1 - l) * layer_numel(), layer_numel());
    }
}

static double slowest(tr_comm *w, double t)
{
    OK(tr_comm_allreduce(w, &t, &t, 1, TR_COMM_F64, TR_COMM_MAX));
    return t;
}

/* CPU seconds of this process (every thread, user + system). */
static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

static float *alloc_floats(size_t n, const char *what)
{
    float *p = tr_alloc(n * sizeof(float), what);
    if (!p)
        die(what);
    return p;
}

/* Optimizer-state bytes of GPT-2 124M per rank (Adam m and v, fp32): whole vs ZeRO-1. */
static void zero_memory(void)
{
    const size_t L = 12, Vp = 50304, maxT = 1024;
    size_t n = Vp * C + maxT * C + L * ((size_t)12 * C * C + 13 * C) + 2 * C;
    tr_dp_range wte = {n - Vp * C - maxT * C, Vp * C}; /* wte then wpe at the buffer's end */
    tr_dp_config cfg = {.bucket_size_mb = 25, .overlap_grad_reduce = 1, .aligned = &wte,
                        .n_aligned = 1};
    printf("gpt2_params %zu\n", n);
    for (int D = 1; D <= 8; D *= 2) {
        size_t whole = 0, most = 0;
        int nb = 0;
        cfg.distributed_optimizer = 0;
        OK(tr_dp_layout(&cfg, n, D, 0, &nb, &whole));
        cfg.distributed_optimizer = 1;
        for (int d = 0; d < D; d++) {
            size_t numel = 0;
            OK(tr_dp_layout(&cfg, n, D, d, &nb, &numel));
            most = numel > most ? numel : most;
        }
        printf("zero D %d buckets %d state_bytes_whole %zu state_bytes_zero %zu\n", D, nb,
               8 * whole, 8 * most);
    }
}

/* One timed iteration of mode m: the slowest rank's time; exposed and CPU of this rank. */
static double run_mode(tr_comm *world, int m, tr_dp *dp_on, tr_dp *dp_off, tr_dp *dp_zero,
                       float *grads, size_t n, double *exposed, double *cpu)
{
    tr_dp *dp = m == 0 ? NULL : m == 2 ? dp_off : m >= 4 ? dp_zero : dp_on;
    memset(grads, 0, n * sizeof(float));
    OK(tr_comm_barrier(world));
    double t0 = tr_now(), c0 = cpu_s();
    if (dp)
        OK(tr_dp_start(dp, 1));
    if (m == 1 || m == 4)
        tr_dp_grad_ready(dp, 0, n); /* everything at once: the reduction alone */
    else
        backward(grads, dp);
    if (dp)
        OK(tr_dp_finish(dp));
    double dc = cpu_s() - c0, dt = slowest(world, tr_now() - t0);
    *cpu = slowest(world, dc);
    if (dp && getenv("DP_OVERLAP_TRACE") && tr_comm_rank(world) == 0) {
        for (int b = 0; b < tr_dp_num_buckets(dp); b++) {
            tr_dp_bucket_info in;
            OK(tr_dp_bucket(dp, b, &in));
            printf("trace mode %d bucket %d start_ms %.1f end_ms %.1f\n", m, b,
                   (in.t_start - t0) * 1e3, (in.t_end - t0) * 1e3);
        }
        tr_dp_timing tm;
        tr_dp_get_timing(dp, &tm);
        printf("trace mode %d finish_begin_ms %.1f finish_end_ms %.1f\n", m,
               (tm.t_finish_begin - t0) * 1e3, (tm.t_finish_end - t0) * 1e3);
    }
    *exposed = 0;
    if (dp) {
        tr_dp_timing tm;
        tr_dp_get_timing(dp, &tm);
        *exposed = slowest(world, tm.exposed_s);
    }
    return dt;
}

int main(int argc, char **argv)
{
    double bucket_mb = 25;
    int reps = 3, progress_thread = 0, nvar = 0, sleep_mode = 0;
    int var_chunk_kb[8], var_poll[8];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tokens") && i + 1 < argc)
            N = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--layers") && i + 1 < argc)
            layers = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--bucket-mb") && i + 1 < argc)
            bucket_mb = atof(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--variant") && i + 1 < argc && nvar < 8) {
            if (sscanf(argv[++i], "%d:%d", &var_chunk_kb[nvar], &var_poll[nvar]) != 2 ||
                var_chunk_kb[nvar] < 0) {
                fprintf(stderr, "dp_overlap: --variant takes CHUNK_KB:POLL, got %s\n", argv[i]);
                return 2;
            }
            nvar++;
        } else if (!strcmp(argv[i], "--progress-thread"))
            progress_thread = 1;
        else if (!strcmp(argv[i], "--sleep"))
            sleep_mode = 1;
        else {
            fprintf(stderr, "usage: dp_overlap [--tokens N] [--layers L] [--bucket-mb MB] "
                            "[--reps R] [--variant CHUNK_KB:POLL]... [--progress-thread] [--sleep]\n");
            return 2;
        }
    }
    if (N < 1 || layers < 1 || reps < 1) {
        fprintf(stderr, "dp_overlap: tokens, layers and reps must be >= 1\n");
        return 2;
    }
    if (nvar == 0) {
        var_chunk_kb[0] = var_poll[0] = 0;
        nvar = 1;
    }
    K = tr_kernels_cpu();
    tr_comm_config cc = tr_comm_config_default();
    cc.progress_thread = progress_thread;
    cc.timeout_s = 120;
    tr_comm *world = NULL;
    OK(tr_comm_init_world(&cc, &world));
    int rank = tr_comm_rank(world);
    size_t default_chunk = tr_comm_get_tuning(world)->chunk_bytes;

    size_t n = (size_t)layers * layer_numel();
    float *grads = alloc_floats(n, "gradients"), *params = alloc_floats(n, "parameters");
    X = alloc_floats((size_t)N * 4 * C, "X");
    DY = alloc_floats((size_t)N * 4 * C, "dY");
    DX = alloc_floats((size_t)N * 4 * C, "dX");
    W = alloc_floats((size_t)4 * C * C, "W");
    for (size_t i = 0; i < (size_t)N * 4 * C; i++)
        X[i] = DY[i] = (float)(i % 13) * 1e-3f;
    for (size_t i = 0; i < (size_t)4 * C * C; i++)
        W[i] = (float)(i % 7) * 1e-3f;

    if (sleep_mode) { /* the best of 3 layers' GEMM time, the slowest rank's */
        double best = 1e30;
        for (int i = 0; i < 3; i++) {
            double t0 = tr_now();
            layer_backward(grads, 0);
            double dt = tr_now() - t0;
            best = dt < best ? dt : best;
        }
        sleep_layer_s = slowest(world, best);
    }

    tr_dp_config on = {.bucket_size_mb = bucket_mb, .overlap_grad_reduce = 1};
    tr_dp_config off = on, zero = on;
    off.overlap_grad_reduce = 0;
    zero.distributed_optimizer = 1;
    tr_dp *dp_on = NULL, *dp_off = NULL, *dp_zero = NULL;
    OK(tr_dp_create(&on, world, grads, params, n, &dp_on));
    OK(tr_dp_create(&off, world, grads, params, n, &dp_off));
    OK(tr_dp_create(&zero, world, grads, params, n, &dp_zero));
    if (rank == 0)
        printf("config ranks %d tokens %d layers %d params %zu bucket_mb %g buckets %d "
               "progress_thread %d reps %d\n",
               tr_comm_size(world), N, layers, n, bucket_mb, tr_dp_num_buckets(dp_on),
               progress_thread, reps);

    for (int rep = -1; rep < reps; rep++) /* rep -1: warm-up, not printed */
        for (int v = 0; v < nvar; v++) {
            tr_comm_tuning tu = {.chunk_bytes = var_chunk_kb[v]
                                                    ? (size_t)var_chunk_kb[v] << 10
                                                    : default_chunk};
            OK(tr_comm_set_tuning(world, &tu));
            poll_each_gemm = var_poll[v];
            for (int m = 0; m < NMODES; m++) {
                double exposed, cpu;
                double dt = run_mode(world, m, dp_on, dp_off, dp_zero, grads, n, &exposed, &cpu);
                if (rank == 0 && rep >= 0)
                    printf("sample thread %d chunk_kb %zu poll %d sleep %d mode %s ms %.2f "
                           "exposed_ms %.2f cpu_ms %.2f\n",
                           progress_thread, tu.chunk_bytes >> 10, poll_each_gemm, sleep_mode,
                           mode_name[m], dt * 1e3, exposed * 1e3, cpu * 1e3);
            }
            fflush(stdout);
        }
    if (rank == 0)
        zero_memory();
    tr_dp_free(dp_on);
    tr_dp_free(dp_off);
    tr_dp_free(dp_zero);
    tr_free(grads);
    tr_free(params);
    tr_free(X);
    tr_free(DY);
    tr_free(DX);
    tr_free(W);
    tr_comm_destroy(world);
    return 0;
}
