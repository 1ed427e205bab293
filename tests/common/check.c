/* tests/common/check.h: failure accounting, buffers, comparisons and test data of the
 * multi-rank C checks. */
#include "tests/common/check.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

int tc_failures;
int tc_rank = -1;
double tc_worst_rel;
size_t tc_data_period = 100003;
int64_t tc_data_i64_scale = 1000000007LL;

void tc_fail(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "rank %d: FAIL %s:%d: ", tc_rank, file, line);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    tc_failures++;
}

void tc_fatal(const char *file, int line, const char *call, int rc)
{
    fprintf(stderr, "rank %d: FAIL %s:%d: %s -> %d: %s\n", tc_rank, file, line, call, rc,
            tr_errmsg());
    tc_failures++;
    exit(1);
}

float *tc_floats(size_t n)
{
    float *p = calloc(n ? n : 1, sizeof(float));
    if (!p) {
        fprintf(stderr, "rank %d: out of memory\n", tc_rank);
        exit(1);
    }
    return p;
}

float *tc_fdup(const float *src, size_t n)
{
    float *p = tc_floats(n);
    memcpy(p, src, n * sizeof(float));
    return p;
}

double tc_max_rel(const float *got, const float *want, size_t n)
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

void tc_expect_close(const char *what, const float *got, const float *want, size_t n, double tol)
{
    double rel = tc_max_rel(got, want, n);
    if (rel > tc_worst_rel)
        tc_worst_rel = rel;
    CHECK(rel <= tol, "%s: max relative difference %.3g > %.1g", what, rel, tol);
}

double tc_data_val(int r, size_t i, int salt)
{
    return (double)((unsigned)(r * 7 + (int)(i % tc_data_period) * 13 + salt * 5) % 19u) - 9.0;
}

void tc_data_fill(void *p, tr_comm_dtype dt, size_t n, int r, int salt)
{
    for (size_t i = 0; i < n; i++) {
        double v = tc_data_val(r, i, salt);
        switch (dt) {
        case TR_COMM_F32: ((float *)p)[i] = (float)v; break;
        case TR_COMM_F64: ((double *)p)[i] = v; break;
        case TR_COMM_I32: ((int32_t *)p)[i] = (int32_t)v; break;
        default: ((int64_t *)p)[i] = (int64_t)v * tc_data_i64_scale; break;
        }
    }
}

double tc_data_get(const void *p, tr_comm_dtype dt, size_t i)
{
    switch (dt) {
    case TR_COMM_F32: return ((const float *)p)[i];
    case TR_COMM_F64: return ((const double *)p)[i];
    case TR_COMM_I32: return ((const int32_t *)p)[i];
    default: return (double)(((const int64_t *)p)[i] / tc_data_i64_scale);
    }
}

double tc_data_reduce(int n, size_t i, int salt, tr_comm_redop op)
{
    double acc = tc_data_val(0, i, salt);
    for (int r = 1; r < n; r++) {
        double v = tc_data_val(r, i, salt);
        acc = op == TR_COMM_SUM ? acc + v : op == TR_COMM_MAX ? fmax(acc, v) : fmin(acc, v);
    }
    return acc;
}

tr_comm *tc_world(double timeout_s, int progress_thread)
{
    tr_comm_config cfg = tr_comm_config_default();
    cfg.timeout_s = timeout_s;
    cfg.progress_thread = progress_thread;
    tr_comm *world = NULL;
    OK(tr_comm_init_world(&cfg, &world));
    tc_rank = tr_comm_rank(world);
    return world;
}

int tc_job_failures(tr_comm *comm)
{
    int32_t total = tc_failures;
    OK(tr_comm_allreduce(comm, &total, &total, 1, TR_COMM_I32, TR_COMM_SUM));
    return total;
}
