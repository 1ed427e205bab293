/* Allreduce benchmark, trident's UCX communicator (run as N ranks by `trident launch`).
 *   allreduce_bench [--min BYTES] [--max BYTES] [--progress-thread] [--in-place]
 *                   [--chunk BYTES] [--window N] [--ring-min BYTES] [--halving-max BYTES]
 *                   (tr_comm_tuning)
 * Out-of-place fp32 sum by default, sizes min..max by factors of 4, like nccl-tests: per size
 * a warm-up, then enough iterations for about 0.25 s (at least 5); the time of a size is the
 * slowest rank's mean. Prints on rank 0, one line per size:
 *   BYTES ITERS TIME_US ALGBW_GBS BUSBW_GBS   (busbw = algbw * 2(n-1)/n)
 * and checks the result of the last iteration. */
#include "comm/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    size_t min = 4 << 10, max = 64 << 20;
    int in_place = 0;
    tr_comm_tuning tuning = {0};
    tr_comm_config cfg = tr_comm_config_default();
    cfg.timeout_s = 120;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--min") && i + 1 < argc)
            min = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--max") && i + 1 < argc)
            max = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--progress-thread"))
            cfg.progress_thread = 1;
        else if (!strcmp(argv[i], "--in-place"))
            in_place = 1;
        else if (!strcmp(argv[i], "--chunk") && i + 1 < argc)
            tuning.chunk_bytes = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--window") && i + 1 < argc)
            tuning.ring_window = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--halving-max") && i + 1 < argc)
            tuning.halving_max_bytes = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--ring-min") && i + 1 < argc)
            tuning.ring_min_bytes = strtoull(argv[++i], NULL, 10);
    }
    tr_comm *w = NULL;
    if (tr_comm_init_world(&cfg, &w)) {
        fprintf(stderr, "allreduce_bench: %s\n", tr_errmsg());
        return 1;
    }
    if (tr_comm_set_tuning(w, &tuning)) {
        fprintf(stderr, "allreduce_bench: %s\n", tr_errmsg());
        return 1;
    }
    int n = tr_comm_size(w), r = tr_comm_rank(w), bad = 0;
    size_t maxn = max / 4;
    float *a = malloc(maxn * 4 + 64), *b = malloc(maxn * 4 + 64);
    for (size_t i = 0; i < maxn; i++)
        a[i] = (float)((i + (size_t)r) % 8);
    memcpy(b, a, maxn * 4);
    if (r == 0)
        printf("# trident allreduce (ucx), %d ranks, fp32 sum, %s%s\n", n,
               in_place ? "in-place" : "out-of-place",
               cfg.progress_thread ? ", progress thread" : "");
    for (size_t bytes = min; bytes <= max; bytes *= 4) {
        size_t count = bytes / 4;
        float *out = in_place ? a : b;
        int rc = tr_comm_allreduce(w, a, out, count, TR_COMM_F32, TR_COMM_SUM);
        rc |= tr_comm_allreduce(w, a, out, count, TR_COMM_F32, TR_COMM_SUM);
        /* iterations: enough for ~0.25 s, agreed by all ranks (rank 0's estimate) */
        double t0 = tr_now();
        for (int k = 0; k < 3; k++)
            rc |= tr_comm_allreduce(w, a, out, count, TR_COMM_F32, TR_COMM_SUM);
        double est = (tr_now() - t0) / 3, iters_d = est > 0 ? 0.25 / est : 1000;
        rc |= tr_comm_broadcast(w, &iters_d, 1, TR_COMM_F64, 0);
        int iters = iters_d < 5 ? 5 : iters_d > 2000 ? 2000 : (int)iters_d;
        rc |= tr_comm_barrier(w);
        t0 = tr_now();
        for (int it = 0; it < iters && !rc; it++)
            rc |= tr_comm_allreduce(w, in_place ? out : a, out, count, TR_COMM_F32, TR_COMM_SUM);
        double t = (tr_now() - t0) / iters;
        rc |= tr_comm_allreduce(w, &t, &t, 1, TR_COMM_F64, TR_COMM_MAX);
        if (rc) {
            fprintf(stderr, "allreduce_bench: %s\n", tr_errmsg());
            return 1;
        }
        if (!in_place) { /* out-of-place: the last result is checkable */
            for (size_t i = 0; i < count && !bad; i++) {
                float want = 0;
                for (int q = 0; q < n; q++)
                    want += (float)((i + (size_t)q) % 8);
                bad = out[i] != want;
            }
        }
        double algbw = (double)bytes / t / 1e9, busbw = algbw * 2.0 * (n - 1) / n;
        if (r == 0)
            printf("%zu %d %.2f %.3f %.3f\n", bytes, iters, t * 1e6, algbw, busbw);
        fflush(stdout);
        if (in_place) /* keep values bounded */
            for (size_t i = 0; i < count; i++)
                a[i] = (float)((i + (size_t)r) % 8);
    }
    if (bad)
        fprintf(stderr, "allreduce_bench: rank %d: WRONG RESULT\n", r);
    free(a);
    free(b);
    tr_comm_destroy(w);
    return bad;
}
