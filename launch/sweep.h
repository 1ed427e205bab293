/* launch/ sweep — runs every point of a grid spec (yaml/config.h) through the launcher and
 * records what each measured.
 *
 * Contract:
 *  - Points whose config is invalid (the loader's checks: heads % tp, layers vs stages, ...)
 *    or whose layout does not fit the world (world % (tp*pp), global batch % (micro batch *
 *    dp), sequence parallel token split) are SKIPPED with the reason; the rest run as
 *    `trident train --nproc W` in OUT/point-NNN/ with train_iters = run.iterations and the
 *    pipeline trace on. A point that fails is recorded as failed with the last line of its
 *    error output and the sweep goes on.
 *  - OUT/results.csv and OUT/results.jsonl: one row per point (the swept values, status,
 *    reason, median ms/iter after the warm-up iterations, tokens/s, peak memory of the
 *    largest rank, measured bubble, final loss, and the planner's predicted ms/iter on the
 *    cluster preset with the ratio measured/predicted). OUT/chart.svg compares the points.
 *  - --dry-run lists the points and the reasons for skips without running anything. */
#ifndef TR_SWEEP_H
#define TR_SWEEP_H

#include <stdio.h>

#include "yaml/config.h"

typedef enum { TR_POINT_OK, TR_POINT_SKIPPED, TR_POINT_FAILED, TR_POINT_PENDING } tr_point_status;

typedef struct {
    int index;
    tr_point_status status;
    char reason[512];   /* skipped / failed: why */
    int dp, tp, pp, mb; /* the layout (0 when the config did not load) */
    double median_ms, tokens_per_s, peak_rss_mb, bubble, final_loss;
    double predicted_ms; /* 0 when the planner could not predict */
} tr_sweep_point;

typedef struct {
    const char *grid_path;
    const char *out_dir;     /* default: runs/sweep-<grid name> */
    const char *cluster;     /* planner preset for predictions; default "cpu-host" */
    const char *trident;     /* the executable to run; default /proc/self/exe */
    int dry_run;
    FILE *log;               /* progress lines; NULL = quiet */
} tr_sweep_options;

/* Runs the sweep; *points (malloc'ed, *n_points of them) holds every point's record. */
int tr_sweep_run(const tr_sweep_options *opts, tr_sweep_point **points, size_t *n_points);

/* Writers (also used by tests): CSV header + rows, one JSON object per line, an SVG bar
 * chart of tokens/s per point with labelled axes. */
int tr_sweep_write_csv(FILE *f, const tr_grid_spec *g, const tr_sweep_point *p, size_t n);
int tr_sweep_write_jsonl(FILE *f, const tr_grid_spec *g, const tr_sweep_point *p, size_t n);
int tr_sweep_write_svg(FILE *f, const tr_grid_spec *g, const tr_sweep_point *p, size_t n,
                       const char *title);

#endif
