/* The device's kernels: a GEMM time model that depends on the shape (tile and wave
 * quantisation over the SMs, a memory-bound regime for thin matrices), streaming kernels
 * bound by device memory, and the measured tables that correct the GEMM curve.
 *
 * The curve follows NVIDIA's "Matrix Multiplication Background User's Guide" (DU-09799-001,
 * sections 2.3 and 3): cuBLAS computes C in tiles of tm x tn, one thread block per tile; a
 * tile's arithmetic intensity tm tn / (tm + tn) decides how fast an SM can feed it (larger
 * tiles are faster); partial tiles at the edges cost whole tiles (tile quantisation) and the
 * tiles run in waves of one per SM, a partial last wave costing a whole one (wave
 * quantisation: 108 SMs on A100, 132 on H100 SXM). Below the device's FLOP:byte ratio a
 * GEMM is bound by memory instead (the guide's arithmetic-intensity rule). cuBLAS's
 * heuristic picks the tile (and a split of K when there are too few tiles to fill the SMs):
 * here, the fastest of the candidates. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "plan/plan.h"
#include "plan/plan_internal.h"

static const int tiles[][2] = {{256, 128}, {128, 256}, {128, 128}, {256, 64},
                               {64, 256},  {128, 64},  {64, 128},  {64, 64}};

static double mem_rate(const tr_plan_cluster *c)
{
    return c->hbm_bw * (c->hbm_efficiency > 0 ? c->hbm_efficiency : 1.0);
}

double tr_plan_stream_s(const tr_plan_cluster *c, double bytes)
{
    if (!plan_shape_model(c) || bytes <= 0)
        return 0;
    return bytes / mem_rate(c) + c->kernel_overhead_s;
}

double tr_plan_gemm_model_s(const tr_plan_cluster *c, double m, double n, double k,
                            double batch)
{
    if (m <= 0 || n <= 0 || k <= 0 || batch <= 0)
        return 0;
    double flops = 2.0 * m * n * k * batch;
    if (!plan_shape_model(c))
        return flops / (c->peak_flops * c->gemm_efficiency);
    double sm_rate = c->peak_flops / c->sms * c->gemm_efficiency;
    double io = 2.0 * batch * (m * k + k * n + m * n); /* bf16 operands and result */
    double best = INFINITY;
    for (size_t i = 0; i < sizeof tiles / sizeof tiles[0]; i++) {
        double tm = tiles[i][0], tn = tiles[i][1];
        double intensity = tm * tn / (tm + tn);
        double rel = c->tile_intensity > 0 && intensity < c->tile_intensity
                         ? intensity / c->tile_intensity
                         : 1.0;
        double n_tiles = batch * ceil(m / tm) * ceil(n / tn);
        for (int split = 1; split <= 16; split *= 2) {
            /* split K only to fill idle SMs, and never below 128 per piece */
            if (split > 1 && (n_tiles * split > 2.0 * c->sms || k / split < 128))
                break;
            double waves = ceil(n_tiles * split / c->sms);
            double t_tile = 2.0 * tm * tn * (k / split + c->k_overhead) / (sm_rate * rel);
            double compute = waves * t_tile;
            double bytes = io + (split > 1 ? 8.0 * batch * m * n * split : 0);
            double memory = bytes / mem_rate(c);
            double t = (compute > memory ? compute : memory) +
                       c->kernel_overhead_s * (split > 1 ? 2 : 1);
            if (t < best)
                best = t;
        }
    }
    return best;
}

/* The compiled-in tables: plan/gemm/PRESET.inc, rows "{M, N, K, batch, seconds}," as
 * benchmarks/gemm_shapes prints them; each ends with a zero row. */
static const tr_plan_gemm_row table_a100[] = {
#include "plan/gemm/a100-80gb.inc"
    {0, 0, 0, 0, 0}};
static const tr_plan_gemm_row table_h100[] = {
#include "plan/gemm/h100-80gb.inc"
    {0, 0, 0, 0, 0}};
static const tr_plan_gemm_row table_h200[] = {
#include "plan/gemm/h200.inc"
    {0, 0, 0, 0, 0}};

static int count_rows(const tr_plan_gemm_row *t)
{
    int n = 0;
    while (t[n].seconds > 0)
        n++;
    return n;
}

void tr_plan_attach_gemm_table(tr_plan_cluster *c)
{
    const tr_plan_gemm_row *t = NULL;
    if (!strcmp(c->preset, "a100-80gb"))
        t = table_a100;
    else if (!strcmp(c->preset, "h100-80gb"))
        t = table_h100;
    else if (!strcmp(c->preset, "h200"))
        t = table_h200;
    c->gemm_table = t;
    c->n_gemm_table = t ? count_rows(t) : 0;
}

/* Measured / model of the nearest measured shapes (log distance over M, N, K, batch),
 * weighted by closeness: 1 for an empty table; the measurement itself for a shape in it. */
static double correction(const tr_plan_cluster *c, double m, double n, double k, double batch)
{
    enum { NEAR = 4 };
    double best_d[NEAR], best_r[NEAR];
    int found = 0;
    for (int i = 0; i < c->n_gemm_table; i++) {
        const tr_plan_gemm_row *r = &c->gemm_table[i];
        double dm = log(m / r->m), dn = log(n / r->n), dk = log(k / r->k),
               db = log(batch / r->batch);
        double d = dm * dm + dn * dn + dk * dk + db * db;
        double model = tr_plan_gemm_model_s(c, r->m, r->n, r->k, r->batch);
        if (!(model > 0))
            continue;
        double ratio = r->seconds / model;
        /* keep the NEAR closest: append, or replace the farthest kept */
        int slot = found < NEAR ? found++ : -1;
        if (slot < 0) {
            slot = 0;
            for (int j = 1; j < NEAR; j++)
                if (best_d[j] > best_d[slot])
                    slot = j;
            if (best_d[slot] <= d)
                continue;
        }
        best_d[slot] = d;
        best_r[slot] = ratio;
    }
    if (!found)
        return 1.0;
    for (int i = 0; i < found; i++)
        if (best_d[i] < 1e-12)
            return best_r[i];
    double wsum = 0, lsum = 0;
    for (int i = 0; i < found; i++) {
        double w = 1.0 / (best_d[i] + 1e-3);
        wsum += w;
        lsum += w * log(best_r[i]);
    }
    double r = exp(lsum / wsum);
    return r < 0.25 ? 0.25 : r > 4 ? 4 : r;
}

double tr_plan_gemm_s(const tr_plan_cluster *c, double m, double n, double k, double batch)
{
    double t = tr_plan_gemm_model_s(c, m, n, k, batch);
    if (t > 0 && c->n_gemm_table > 0 && plan_shape_model(c))
        t *= correction(c, m, n, k, batch);
    return t;
}

int tr_plan_gemm_table_read(const char *path, tr_plan_gemm_row **rows, int *n)
{
    *rows = NULL;
    *n = 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return tr_fail(TR_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    char line[512];
    int cap = 0, line_no = 0, rc = TR_OK;
    while (fgets(line, sizeof line, f)) {
        line_no++;
        size_t len = strlen(line);
        if (len == sizeof line - 1 && line[len - 1] != '\n') {
            rc = tr_fail(TR_ERR_INVALID, "%s:%d: line longer than %zu bytes", path, line_no,
                         sizeof line - 2);
            break;
        }
        const char *p = line;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == '\n' || *p == '\r' || !*p || *p == '#' || (p[0] == '/' && p[1] == '*') ||
            (p[0] == '*') || (p[0] == '/' && p[1] == '/'))
            continue;
        tr_plan_gemm_row r;
        char tail = 0;
        if (sscanf(p, "{%lf , %lf , %lf , %lf , %lf }%c", &r.m, &r.n, &r.k, &r.batch,
                   &r.seconds, &tail) < 5 ||
            !(r.m >= 1 && r.n >= 1 && r.k >= 1 && r.batch >= 1 && r.seconds > 0) ||
            !isfinite(r.m + r.n + r.k + r.batch + r.seconds)) {
            rc = tr_fail(TR_ERR_INVALID,
                         "%s:%d: expected a row \"{M, N, K, batch, seconds},\" of positive "
                         "numbers as benchmarks/gemm_shapes prints",
                         path, line_no);
            break;
        }
        if (*n == cap) {
            cap = cap ? 2 * cap : 64;
            tr_plan_gemm_row *g = realloc(*rows, sizeof *g * (size_t)cap);
            if (!g) {
                rc = tr_fail(TR_ERR_NOMEM, "reading %s", path);
                break;
            }
            *rows = g;
        }
        (*rows)[(*n)++] = r;
    }
    fclose(f);
    if (!rc && *n == 0)
        rc = tr_fail(TR_ERR_INVALID, "%s holds no measured GEMM row", path);
    if (rc) {
        free(*rows);
        *rows = NULL;
        *n = 0;
    }
    return rc;
}
