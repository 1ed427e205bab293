/* Async progress while the caller computes (2+ ranks via `trident launch`): with the
 * progress thread, an allreduce of 16 MiB started with tr_comm_allreduce_async completes
 * while the main thread runs GEMMs and never calls into comm; tr_comm_test() afterwards finds
 * it done. Prints the timings (alone vs overlapped) and, for comparison, what happens without
 * the progress thread (no assertion there). Exit 0 on success. */
#include "comm/comm.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N = 4 << 20, M = 384 };

static float *A, *B, *C;

static double gemms_for(double seconds)
{
    double t0 = tr_now();
    int k = 0;
    while (tr_now() - t0 < seconds || k == 0) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, M, M, 1.0f, A, M, B, M, 0.0f,
                    C, M);
        k++;
    }
    return tr_now() - t0;
}

static int run(int progress_thread, int *done_out, double *alone_s)
{
    tr_comm_config cfg = tr_comm_config_default();
    cfg.timeout_s = 60;
    cfg.progress_thread = progress_thread;
    tr_comm *w = NULL;
    if (tr_comm_init_world(&cfg, &w)) {
        fprintf(stderr, "overlap_check: %s\n", tr_errmsg());
        return 1;
    }
    int n = tr_comm_size(w), r = tr_comm_rank(w);
    float *x = malloc((size_t)N * 4);
    for (size_t i = 0; i < N; i++)
        x[i] = (float)((r + (int)i) % 5);
    double t0 = tr_now();
    if (tr_comm_allreduce(w, x, x, N, TR_COMM_F32, TR_COMM_SUM))
        return 1;
    *alone_s = tr_now() - t0;
    for (size_t i = 0; i < N; i++)
        x[i] = (float)((r + (int)i) % 5);
    if (tr_comm_barrier(w))
        return 1;
    tr_comm_request *req = NULL;
    if (tr_comm_allreduce_async(w, x, x, N, TR_COMM_F32, TR_COMM_SUM, &req))
        return 1;
    gemms_for(10 * *alone_s + 0.5); /* no comm call in here */
    int done = 0;
    if (tr_comm_test(&req, &done))
        return 1;
    *done_out = done;
    if (!done && tr_comm_wait(&req))
        return 1;
    int bad = 0;
    for (size_t i = 0; i < N && !bad; i++) {
        float want = 0;
        for (int q = 0; q < n; q++)
            want += (float)((q + (int)i) % 5);
        bad = x[i] != want;
    }
    free(x);
    tr_comm_destroy(w);
    return bad;
}

int main(void)
{
    A = malloc(M * M * 4);
    B = malloc(M * M * 4);
    C = malloc(M * M * 4);
    for (int i = 0; i < M * M; i++)
        A[i] = B[i] = (float)(i % 7) * 0.01f;
    int done_thread = 0, done_plain = 0;
    double alone_thread = 0, alone_plain = 0;
    if (run(1, &done_thread, &alone_thread) || run(0, &done_plain, &alone_plain)) {
        fprintf(stderr, "overlap_check: failed\n");
        return 1;
    }
    printf("overlap_check: 16 MiB allreduce alone %.1f ms (progress thread) / %.1f ms (none); "
           "finished during GEMMs: with progress thread %s, without %s\n",
           alone_thread * 1e3, alone_plain * 1e3, done_thread ? "yes" : "no",
           done_plain ? "yes" : "no");
    if (!done_thread) {
        fprintf(stderr, "overlap_check: FAIL: the async allreduce did not progress while the "
                        "main thread computed\n");
        return 1;
    }
    return 0;
}
