/* Calibration: the measured step time of a run (metrics.jsonl) -> gemm_efficiency. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "plan/plan.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int tr_plan_read_measured_step(const char *path, double *step_s, int *n_points)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return tr_fail(TR_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    double *v = NULL;
    int n = 0, cap = 0, line_no = 0, rc = TR_OK;
    char line[4096];
    size_t len = 0;
    int c = 0;
    while (c != EOF) {
        /* one line, bounded: a NUL byte or a line past the buffer ends the reading */
        len = 0;
        while (len < sizeof line - 1 && (c = getc(f)) != EOF && c != '\0') {
            line[len++] = (char)c;
            if (c == '\n')
                break;
        }
        line[len] = '\0';
        if (len == 0 && c == EOF)
            break;
        line_no++;
        if (c == '\0') {
            rc = tr_fail(TR_ERR_INVALID, "%s:%d: a NUL byte; expected the metrics.jsonl of a "
                         "`trident train` run (text)", path, line_no);
            break;
        }
        if (len == sizeof line - 1 && line[len - 1] != '\n') {
            rc = tr_fail(TR_ERR_INVALID,
                         "%s:%d: line longer than %zu bytes; expected one JSON object per line "
                         "as `trident train` writes",
                         path, line_no, sizeof line - 2);
            break;
        }
        const char *p = line;
        while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')
            p++;
        if (!*p)
            continue;
        const char *k = strstr(line, "\"ms_per_iter\"");
        if (*p != '{' || !k) {
            rc = tr_fail(TR_ERR_INVALID, "%s:%d: no \"ms_per_iter\" in this line; expected the "
                         "metrics.jsonl of a `trident train` run", path, line_no);
            break;
        }
        k += strlen("\"ms_per_iter\"");
        while (*k == ' ')
            k++;
        char *end = NULL;
        double ms = *k == ':' ? strtod(k + 1, &end) : NAN;
        if (!end || end == k + 1 || !isfinite(ms) || ms <= 0) {
            rc = tr_fail(TR_ERR_INVALID, "%s:%d: ms_per_iter is not a positive number", path,
                         line_no);
            break;
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            double *nv = realloc(v, sizeof *v * (size_t)cap);
            if (!nv) {
                rc = tr_fail(TR_ERR_NOMEM, "reading %s", path);
                break;
            }
            v = nv;
        }
        v[n++] = ms;
    }
    fclose(f);
    if (!rc && n == 0)
        rc = tr_fail(TR_ERR_INVALID, "%s holds no measurement (no line with ms_per_iter)", path);
    if (!rc) {
        /* The first iteration pays for warm-up (allocation, page faults): skip it. */
        double *w = n > 1 ? v + 1 : v;
        int m = n > 1 ? n - 1 : n;
        qsort(w, (size_t)m, sizeof *w, cmp_double);
        double med = m % 2 ? w[m / 2] : 0.5 * (w[m / 2 - 1] + w[m / 2]);
        *step_s = med / 1e3;
        if (n_points)
            *n_points = m;
    }
    free(v);
    return rc;
}

static int step_at(const tr_config *cfg, int world, const tr_plan_cluster *base, double eff,
                   double *step)
{
    tr_plan_cluster c = *base;
    c.gemm_efficiency = eff;
    tr_plan_result *r = tr_alloc(sizeof *r, "plan result");
    if (!r)
        return TR_ERR_NOMEM;
    int rc = tr_plan_predict(cfg, world, &c, r);
    *step = r->step_time_s;
    tr_free(r);
    return rc;
}

int tr_plan_calibrate(const tr_config *cfg, int world, const tr_plan_cluster *cluster,
                      double measured_step_s, double *efficiency)
{
    if (!(measured_step_s > 0) || !isfinite(measured_step_s))
        return tr_fail(TR_ERR_INVALID, "measured step time %g s: must be a positive number",
                       measured_step_s);
    double lo = 1e-6, hi = 4.0, t_hi, t_lo;
    int rc = step_at(cfg, world, cluster, hi, &t_hi);
    if (!rc)
        rc = step_at(cfg, world, cluster, lo, &t_lo);
    if (rc)
        return rc;
    if (t_hi > measured_step_s)
        return tr_fail(TR_ERR_INVALID,
                       "the measured step (%.4g s) is faster than the model predicts even at "
                       "gemm_efficiency 4 (%.4g s): communication or peak_tflops are set too "
                       "pessimistically for this machine",
                       measured_step_s, t_hi);
    if (t_lo < measured_step_s)
        return tr_fail(TR_ERR_INVALID,
                       "the measured step (%.4g s) is slower than the model predicts at "
                       "gemm_efficiency %g (%.4g s); something other than compute dominates",
                       measured_step_s, lo, t_lo);
    /* Step time falls as efficiency rises: bisect on a log scale. */
    for (int it = 0; it < 80 && hi / lo > 1 + 1e-9; it++) {
        double mid = sqrt(lo * hi), t;
        rc = step_at(cfg, world, cluster, mid, &t);
        if (rc)
            return rc;
        if (t > measured_step_s)
            lo = mid;
        else
            hi = mid;
    }
    *efficiency = sqrt(lo * hi);
    return TR_OK;
}
