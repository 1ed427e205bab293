/* Helpers of the multi-process tensor-parallel checks (run as ranks by `trident launch`):
 * failure accounting, deterministic data, slices of full tensors, comparisons that record
 * the worst relative difference. Every rank builds the same full tensors from the same
 * seeds, so the reference (unsplit) result is computed locally on each rank. */
#ifndef TP_CHECK_H
#define TP_CHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "core/core.h"

static int failures;
static int world_rank;
static double worst_rel; /* the largest relative difference seen by expect_close */

#define CHECK(cond, ...)                                                                       \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "rank %d: FAIL %s:%d: ", world_rank, __FILE__, __LINE__);          \
            fprintf(stderr, __VA_ARGS__);                                                      \
            fprintf(stderr, "\n");                                                             \
            failures++;                                                                        \
        }                                                                                      \
    } while (0)

#define OK(call)                                                                               \
    do {                                                                                       \
        int rc_ = (call);                                                                      \
        if (rc_) {                                                                             \
            fprintf(stderr, "rank %d: FAIL %s:%d: %s -> %d: %s\n", world_rank, __FILE__,       \
                    __LINE__, #call, rc_, tr_errmsg());                                        \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

static inline float *fnew(size_t n)
{
    float *p = calloc(n ? n : 1, sizeof(float));
    if (!p) {
        fprintf(stderr, "rank %d: out of memory\n", world_rank);
        exit(1);
    }
    return p;
}

static inline float *fdup(const float *src, size_t n)
{
    float *p = fnew(n);
    memcpy(p, src, n * sizeof(float));
    return p;
}

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

/* Largest |got - want| over the largest |want| (so small entries do not dominate). */
static inline double max_rel(const float *got, const float *want, size_t n)
{
    double diff = 0, scale = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (!(d <= diff)) /* catches NaN */
            diff = isnan(d) ? INFINITY : d;
        if (fabs((double)want[i]) > scale)
            scale = fabs((double)want[i]);
    }
    return scale > 0 ? diff / scale : diff;
}

static inline void expect_close(const char *what, const float *got, const float *want, size_t n,
                         double tol)
{
    double rel = max_rel(got, want, n);
    if (rel > worst_rel)
        worst_rel = rel;
    CHECK(rel <= tol, "%s: max relative difference %.3g > %.1g", what, rel, tol);
}

/* got == slice of want, with the same comparison. */
static inline void expect_slice(const char *what, const float *got, const float *full, int full_cols,
                         int r0, int rows, int c0, int cols, double tol)
{
    float *want = fnew((size_t)rows * cols);
    slice(want, full, full_cols, r0, rows, c0, cols);
    expect_close(what, got, want, (size_t)rows * cols, tol);
    free(want);
}

/* Every member of `comm` holds the same n floats, bit for bit (rank 0's are broadcast). */
static inline void expect_same_on_all(tr_comm *comm, const char *what, const float *x, size_t n)
{
    if (!comm)
        return;
    float *root = fdup(x, n);
    OK(tr_comm_broadcast(comm, root, n, TR_COMM_F32, 0));
    CHECK(!memcmp(root, x, n * sizeof(float)), "%s differs from tensor-parallel rank 0's", what);
    free(root);
}

/* Sum over ranks of the per-rank failure counts; rank 0 prints the verdict. */
static inline int finish(tr_comm *world, const char *name, double t0)
{
    int32_t f[1] = {failures};
    double w[1] = {worst_rel};
    if (tr_comm_allreduce(world, f, f, 1, TR_COMM_I32, TR_COMM_SUM) ||
        tr_comm_allreduce(world, w, w, 1, TR_COMM_F64, TR_COMM_MAX)) {
        fprintf(stderr, "rank %d: %s\n", world_rank, tr_errmsg());
        return 1;
    }
    if (world_rank == 0)
        printf("%s: %d ranks, %s (worst relative difference %.3g, %.2f s)\n", name,
               tr_comm_size(world), f[0] ? "FAILED" : "all checks passed", w[0], tr_now() - t0);
    return f[0] != 0;
}

#endif
