/* Helpers of the multi-process tensor-parallel checks (run as ranks by `trident launch`),
 * beside tests/common/check.h (failure accounting, buffers, tc_expect_close): deterministic
 * data, slices of full tensors, the verdict with the worst relative difference. Every rank
 * builds the same full tensors from the same seeds, so the reference (unsplit) result is
 * computed locally on each rank. */
#ifndef TP_CHECK_H
#define TP_CHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "core/core.h"
#include "tests/common/check.h"

/* x[i] = scale * normal(seed 7, salt, i): identical on every rank. */
static inline void fill(float *x, size_t n, uint64_t salt, float scale)
{
    for (size_t i = 0; i < n; i++)
        x[i] = scale * tr_init_normal(7, salt, i);
}

/* out (rows, cols) = block of full (.., full_cols) starting at (r0, c0). */
static inline void slice(float *out, const float *full, int full_cols, int r0, int rows, int c0,
                  int cols)
{
    for (int r = 0; r < rows; r++)
        memcpy(out + (size_t)r * cols, full + (size_t)(r0 + r) * full_cols + c0,
               (size_t)cols * sizeof(float));
}

/* got == slice of want, with the same comparison. */
static inline void expect_slice(const char *what, const float *got, const float *full, int full_cols,
                         int r0, int rows, int c0, int cols, double tol)
{
    float *want = tc_floats((size_t)rows * cols);
    slice(want, full, full_cols, r0, rows, c0, cols);
    tc_expect_close(what, got, want, (size_t)rows * cols, tol);
    free(want);
}

/* Every member of `comm` holds the same n floats, bit for bit (rank 0's are broadcast). */
static inline void expect_same_on_all(tr_comm *comm, const char *what, const float *x, size_t n)
{
    if (!comm)
        return;
    float *root = tc_fdup(x, n);
    OK(tr_comm_broadcast(comm, root, n, TR_COMM_F32, 0));
    CHECK(!memcmp(root, x, n * sizeof(float)), "%s differs from tensor-parallel rank 0's", what);
    free(root);
}

/* Sum over ranks of the per-rank failure counts; rank 0 prints the verdict. */
static inline int finish(tr_comm *world, const char *name, double t0)
{
    int failed = tc_job_failures(world);
    double w[1] = {tc_worst_rel};
    OK(tr_comm_allreduce(world, w, w, 1, TR_COMM_F64, TR_COMM_MAX));
    if (tc_rank == 0)
        printf("%s: %d ranks, %s (worst relative difference %.3g, %.2f s)\n", name,
               tr_comm_size(world), failed ? "FAILED" : "all checks passed", w[0], tr_now() - t0);
    return failed != 0;
}

#endif
