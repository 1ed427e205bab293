/* launch/ sweep — runs every point of a grid spec (yaml/config.h) through the launcher and
 * records what each measured.
 *
 * Contract:
 *  - Points whose config is invalid (the loader's checks: heads % tp, layers vs stages, ...)
 *    or whose layout does not fit the world (world % (tp*pp), global batch % (micro batch *
 *    dp), sequence parallel token split) are SKIPPED with the reason; the rest run as
 *    `trident train --nproc W` in OUT/point-NNN/ with train_iters = run.iterations and the
 *    pipeline trace on, its output in OUT/point-NNN/stdout.log and stderr.log. A point that
 *    fails is recorded as failed and the sweep goes on; its reason is the first error line
 *    the failing rank wrote ("rank N: message", at most ~600 bytes, control characters
 *    blanked) followed by the launcher's closing line in parentheses.
 *  - OUT/results.csv and OUT/results.jsonl: one row per point (the swept values, status,
 *    reason, median ms/iter after the warm-up iterations, tokens/s, peak memory of the
 *    largest rank and of every rank — a JSON list, in the CSV one column of values joined
 *    with ';' — measured bubble, final loss, and the planner's predicted ms/iter on the
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
    char reason[1024];  /* skipped / failed: why */
    int dp, tp, pp, mb; /* the layout (0 when the config did not load) */
    double median_ms, tokens_per_s, peak_rss_mb, bubble, final_loss; /* peak_rss_mb: max rank */
    double *peak_rss_mb_per_rank; /* [n_ranks] MiB in rank order; NULL when not measured */
    int n_ranks;
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

/* Runs the sweep; *points (*n_points of them) holds every point's record, per-rank arrays
 * included, in one allocation: free(*points) releases it. */
TR_MUST_CHECK int tr_sweep_run(const tr_sweep_options *opts, tr_sweep_point **points, size_t *n_points);

/* Why a point failed, from its stderr log (the launcher's output: rank lines "[rN] text" and
 * its own lines): "rank N: " + the first error line of the rank the launcher names as the
 * first to fail (else the first of any rank; "trident train: " dropped; info/debug/warning
 * log lines are not errors), then " (" + the launcher's last error line + ")". Without rank
 * errors: the launcher's first error line (+ its last in parentheses when different); with
 * nothing, or no readable log: "exit status S". Bounded (error text ~600 bytes, cut on a
 * UTF-8 boundary and marked "...", closing line ~300), control characters become spaces;
 * always NUL-terminated within n. */
void tr_sweep_failure_reason(const char *log_path, int exit_status, char *reason, size_t n);

/* Writers (also used by tests): CSV header + rows, one JSON object per line, an SVG bar
 * chart of tokens/s per point with labelled axes. */
TR_MUST_CHECK int tr_sweep_write_csv(FILE *f, const tr_grid_spec *g, const tr_sweep_point *p, size_t n);
TR_MUST_CHECK int tr_sweep_write_jsonl(FILE *f, const tr_grid_spec *g, const tr_sweep_point *p, size_t n);
TR_MUST_CHECK int tr_sweep_write_svg(FILE *f, const tr_grid_spec *g, const tr_sweep_point *p, size_t n,
                       const char *title);

#endif
