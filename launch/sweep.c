/* `trident sweep`: expand a grid spec, skip impossible points with the reason, run the
 * others through the launcher, collect what they measured. */
#include "launch/sweep.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/core.h"
#include "plan/plan.h"

/* Why a loaded config cannot run on `world` ranks, or NULL. */
static const char *layout_problem(const tr_config *c, int world, char *buf, size_t n)
{
    int tp = c->parallel.tensor_model_parallel_size, pp = c->parallel.pipeline_model_parallel_size;
    int cp = c->parallel.context_parallel_size > 1 ? c->parallel.context_parallel_size : 1;
    if (world % (tp * pp * cp)) {
        snprintf(buf, n, "world size %d is not divisible by tp %d x cp %d x pp %d", world, tp, cp,
                 pp);
        return buf;
    }
    int dp = world / (tp * pp * cp), mb = c->training.micro_batch_size, gb = c->training.global_batch_size;
    if (gb % (mb * dp)) {
        snprintf(buf, n, "global batch %d is not divisible by micro batch %d x dp %d", gb, mb, dp);
        return buf;
    }
    if (c->parallel.sequence_parallel && tp > 1 && (mb * (c->model.seq_length / cp)) % tp) {
        snprintf(buf, n, "sequence parallel needs micro batch x seq / cp (%d) divisible by tp %d",
                 mb * (c->model.seq_length / cp), tp);
        return buf;
    }
    int ep = c->parallel.expert_model_parallel_size > 1 ? c->parallel.expert_model_parallel_size
                                                         : 1;
    if (ep > 1 && dp % ep) {
        snprintf(buf, n, "parallel.expert_model_parallel_size %d does not divide dp %d", ep, dp);
        return buf;
    }
    return NULL;
}

/* The number after "key": in a line of our own JSON output; NAN when absent or null. */
static double json_number(const char *line, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(line, pat);
    if (!p)
        return NAN;
    p += strlen(pat);
    char *end;
    double v = strtod(p, &end);
    return end == p ? NAN : v;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median ms/iter after the warm-up, final loss, from metrics.jsonl; bubble and peak memory
 * (the largest, and up to max_ranks ranks' into pt->peak_rss_mb_per_rank) from summary.json. */
static int read_results(const char *dir, int warmup, int max_ranks, tr_sweep_point *pt)
{
    char path[4200], line[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return tr_fail(TR_ERR_IO, "no %s", path);
    double ms[4096];
    int n = 0, it = 0;
    while (fgets(line, sizeof line, f)) {
        it++;
        pt->final_loss = json_number(line, "loss");
        if (it > warmup && n < 4096)
            ms[n++] = json_number(line, "ms_per_iter");
    }
    fclose(f);
    if (n == 0)
        return tr_fail(TR_ERR_INVALID, "%s has no iteration after the warm-up", path);
    qsort(ms, (size_t)n, sizeof ms[0], cmp_double);
    pt->median_ms = n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
    snprintf(path, sizeof path, "%s/summary.json", dir);
    if ((f = fopen(path, "r"))) {
        char buf[65536];
        size_t len = fread(buf, 1, sizeof buf - 1, f);
        buf[len] = '\0';
        fclose(f);
        pt->bubble = json_number(buf, "measured_bubble");
        const char *r = strstr(buf, "\"peak_rss_mb_per_rank\":[");
        pt->peak_rss_mb = 0;
        pt->n_ranks = 0;
        for (r = r ? strchr(r, '[') + 1 : NULL; r && *r && *r != ']';) {
            char *end;
            double v = strtod(r, &end);
            if (end == r)
                break;
            if (v > pt->peak_rss_mb)
                pt->peak_rss_mb = v;
            if (pt->peak_rss_mb_per_rank && pt->n_ranks < max_ranks)
                pt->peak_rss_mb_per_rank[pt->n_ranks++] = v;
            r = *end == ',' ? end + 1 : end;
        }
    }
    return TR_OK;
}

/* A rank's line as the launcher relays it, "[rN] text": N, and *text after the prefix;
 * -1 for the launcher's own lines. */
static int rank_of_line(const char *line, const char **text)
{
    if (line[0] != '[' || line[1] != 'r' || line[2] < '0' || line[2] > '9')
        return -1;
    char *end;
    long r = strtol(line + 2, &end, 10);
    if (end[0] != ']' || end[1] != ' ' || r > 1 << 20)
        return -1;
    *text = end + 2;
    return (int)r;
}

/* Does a line of stderr report an error? Trident's own messages ("trident train: ...",
 * "trident error ...") do, its info/debug/warning log lines do not; other programs' lines
 * (sanitizers, libraries, the C runtime) do when they say so. */
static int is_error_text(const char *t)
{
    static const char *const quiet[] = {"trident info", "trident debug", "trident warning"};
    for (size_t i = 0; i < sizeof quiet / sizeof quiet[0]; i++)
        if (!strncmp(t, quiet[i], strlen(quiet[i])))
            return 0;
    if (!strncmp(t, "trident ", 8) || !strncmp(t, "trident:", 8))
        return 1;
    if (strcasestr(t, "warn"))
        return 0;
    static const char *const words[] = {"error", "fatal", "abort", "assert", "fault", "sanitizer",
                                        "panic", "terminate", "cannot", "failed"};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (strcasestr(t, words[i]))
            return 1;
    return 0;
}

/* The rank the launcher names as the first to fail ("rank N exited with status S; ...",
 * "... after rank N failed; ..."), or -1. */
static int failed_rank_of(const char *launcher_line)
{
    for (const char *p = strstr(launcher_line, "rank "); p; p = strstr(p + 5, "rank ")) {
        char *end;
        long r = strtol(p + 5, &end, 10);
        if (end != p + 5 && r >= 0 && r <= 1 << 20 && (*end == ' ' || *end == ';'))
            return (int)r;
    }
    return -1;
}

/* Append at most `max` bytes of `s` to out (length *len < cap, NUL-terminated): control
 * characters become spaces; a cut (by max or by cap) lands on a UTF-8 character boundary
 * and is marked with "...". */
static void append_bounded(char *out, size_t cap, size_t *len, const char *s, size_t max)
{
    if (max > cap - 1 - *len)
        max = cap - 1 - *len;
    size_t n = strlen(s);
    int cut = 0;
    if (n > max) {
        cut = max >= 3;
        n = cut ? max - 3 : 0;
        while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
            n--;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        out[(*len)++] = c < 0x20 || c == 0x7f ? ' ' : (char)c;
    }
    for (int i = 0; cut && i < 3; i++)
        out[(*len)++] = '.';
    out[*len] = '\0';
}

static char *dup_line(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    return d ? memcpy(d, s, n) : NULL;
}

#define REASON_TEXT_MAX 600   /* bytes of the error message kept in a point's reason */
#define REASON_SUFFIX_MAX 300 /* bytes of the launcher's closing line kept after it */

void tr_sweep_failure_reason(const char *log, int exit_status, char *reason, size_t n)
{
    if (n == 0)
        return;
    char *rank_err = NULL, *any_rank_err = NULL, *first_launcher = NULL, *last_launcher = NULL;
    int err_rank = -1, any_err_rank = -1, failed = -1;
    FILE *f = fopen(log, "r");
    char *line = NULL;
    size_t line_cap = 0;
    /* First pass: the failed rank, per the launcher. */
    while (f && getline(&line, &line_cap, f) >= 0) {
        line[strcspn(line, "\r\n")] = '\0';
        const char *text;
        if (rank_of_line(line, &text) < 0 && failed < 0 && !strncmp(line, "trident", 7))
            failed = failed_rank_of(line);
    }
    if (f)
        rewind(f);
    while (f && getline(&line, &line_cap, f) >= 0) {
        line[strcspn(line, "\r\n")] = '\0';
        const char *text;
        int r = rank_of_line(line, &text);
        if (r >= 0) {
            if (!is_error_text(text))
                continue;
            if (!any_rank_err) {
                any_rank_err = dup_line(text);
                any_err_rank = r;
            }
            if (!rank_err && r == failed) {
                rank_err = dup_line(text);
                err_rank = r;
            }
        } else if (line[0] && is_error_text(line)) {
            if (!first_launcher)
                first_launcher = dup_line(line);
            free(last_launcher);
            last_launcher = dup_line(line);
        }
    }
    free(line);
    if (f)
        fclose(f);
    if (!rank_err) {
        rank_err = any_rank_err;
        err_rank = any_err_rank;
        any_rank_err = NULL;
    }
    size_t len = 0;
    reason[0] = '\0';
    const char *suffix = NULL;
    if (rank_err) {
        char head[32];
        snprintf(head, sizeof head, "rank %d: ", err_rank);
        append_bounded(reason, n, &len, head, sizeof head);
        const char *text = rank_err;
        if (!strncmp(text, "trident train: ", 15))
            text += 15; /* the command is known; the message is what matters */
        append_bounded(reason, n, &len, text, REASON_TEXT_MAX);
        suffix = last_launcher;
    } else if (first_launcher) {
        append_bounded(reason, n, &len, first_launcher, REASON_TEXT_MAX);
        if (last_launcher && strcmp(last_launcher, first_launcher))
            suffix = last_launcher;
    } else {
        snprintf(reason, n, "exit status %d", exit_status);
    }
    if (suffix) {
        append_bounded(reason, n, &len, " (", 2);
        append_bounded(reason, n, &len, suffix, REASON_SUFFIX_MAX);
        append_bounded(reason, n, &len, ")", 1);
    }
    free(rank_err);
    free(any_rank_err);
    free(first_launcher);
    free(last_launcher);
}

/* Run `trident train --nproc W CONFIG --run-dir DIR --quiet`, its stdout to DIR/stdout.log
 * and stderr to DIR/stderr.log; on failure *reason says why. */
static int run_point(const char *self, int world, const char *dir, char *reason, size_t n)
{
    char cfg[4200], out_log[4200], err_log[4200], nproc[16];
    snprintf(cfg, sizeof cfg, "%s/point.yaml", dir);
    snprintf(out_log, sizeof out_log, "%s/stdout.log", dir);
    snprintf(err_log, sizeof err_log, "%s/stderr.log", dir);
    snprintf(nproc, sizeof nproc, "%d", world);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        return tr_fail(TR_ERR_IO, "fork: %s", strerror(errno));
    if (pid == 0) {
        int out = open(out_log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int err = open(err_log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (out >= 0) {
            dup2(out, 1);
            close(out);
        }
        if (err >= 0) {
            dup2(err, 2);
            close(err);
        }
        execl(self, self, "train", "--nproc", nproc, cfg, "--run-dir", dir, "--quiet", (char *)NULL);
        dprintf(2, "trident sweep: cannot run %s: %s\n", self, strerror(errno));
        _exit(127);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return TR_OK;
    tr_sweep_failure_reason(err_log, WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), reason, n);
    return TR_ERR_COMM;
}

/* The overrides a point is measured with: the run's iterations, a trace, no evaluation. A
 * sample-based base (train_samples) is measured the same way, as run.iterations steps of its
 * final global batch: its lengths in samples become iterations of that batch (the LR's warm-up,
 * decay and WSD anneal; rounded, at least 1) and a batch ramp-up is dropped, since the layout is
 * planned and compared at the final batch (as `trident plan` does). `converted` says whether
 * that happened. */
typedef struct {
    char buf[4][64]; /* the numbers' overrides */
    const char *set[12];
    int n, n_buf, converted;
} measure_sets;

static void measure_add(measure_sets *m, const char *key, double value)
{
    char *b = m->buf[m->n_buf++];
    snprintf(b, sizeof m->buf[0], "%s=%.0f", key, value);
    m->set[m->n++] = b;
}

static void measure_overrides(const tr_grid_spec *g, size_t i, measure_sets *m)
{
    memset(m, 0, sizeof *m);
    measure_add(m, "training.train_iters", g->iterations);
    m->set[m->n++] = "logging.trace=true";
    m->set[m->n++] = "training.eval_interval=0";
    tr_config base;
    if (tr_grid_point_config(g, i, NULL, 0, &base))
        return; /* the point's own error is reported with the overrides above */
    const tr_training_config *t = &base.training;
    double gb = t->global_batch_size > 0 ? t->global_batch_size : 1;
    if (tr_training_by_samples(t)) {
        m->converted = 1;
        m->set[m->n++] = "training.train_samples=0";
        m->set[m->n++] = "training.lr_decay_samples=0";
        measure_add(m, "training.lr_decay_iters", fmax(1, round(tr_training_decay_samples(t) / gb)));
        if (t->lr_warmup_samples) {
            m->set[m->n++] = "training.lr_warmup_samples=0";
            measure_add(m, "training.lr_warmup_iters", fmax(1, round(t->lr_warmup_samples / gb)));
        }
        if (t->lr_wsd_decay_samples) {
            m->set[m->n++] = "training.lr_wsd_decay_samples=0";
            measure_add(m, "training.lr_wsd_decay_iters",
                        fmax(1, round(t->lr_wsd_decay_samples / gb)));
        }
    }
    if (t->n_rampup_batch_size) {
        m->converted = 1;
        m->set[m->n++] = "training.rampup_batch_size=[]";
    }
    tr_config_free(&base);
}

int tr_sweep_run(const tr_sweep_options *o, tr_sweep_point **points_out, size_t *n_out)
{
    *points_out = NULL;
    *n_out = 0;
    tr_grid_spec g;
    int rc = tr_grid_load(o->grid_path, &g);
    if (rc)
        return rc;
    tr_plan_cluster cluster;
    if ((rc = tr_plan_cluster_preset(o->cluster ? o->cluster : "cpu-host", &cluster))) {
        tr_grid_free(&g);
        return rc;
    }
    char self[4096];
    if (o->trident) {
        snprintf(self, sizeof self, "%s", o->trident);
    } else {
        ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
        if (len <= 0) {
            tr_grid_free(&g);
            return tr_fail(TR_ERR_IO, "cannot find the trident executable");
        }
        self[len] = '\0';
    }
    /* One block: the points, then world_size doubles per point for the per-rank peaks, so
     * free(*points_out) releases everything. sizeof *pts is a multiple of double's alignment. */
    size_t n = tr_grid_num_points(&g), world = (size_t)g.world_size;
    tr_sweep_point *pts = NULL;
    if (n <= (SIZE_MAX / 2) / (sizeof *pts + world * sizeof(double)))
        pts = calloc(1, n * (sizeof *pts + world * sizeof(double)));
    if (!pts) {
        tr_grid_free(&g);
        return tr_fail(TR_ERR_NOMEM, "out of memory for %zu points of %zu ranks", n, world);
    }
    double *rank_peaks = (double *)(pts + n);
    for (size_t i = 0; i < n; i++)
        pts[i].peak_rss_mb_per_rank = rank_peaks + i * world;
    if (!o->dry_run && (rc = tr_make_dirs(o->out_dir))) {
        free(pts);
        tr_grid_free(&g);
        return rc;
    }
    int said_converted = 0;
    for (size_t i = 0; i < n; i++) {
        tr_sweep_point *pt = &pts[i];
        pt->index = (int)i;
        pt->bubble = NAN;
        tr_config cfg;
        measure_sets ms;
        measure_overrides(&g, i, &ms);
        if (ms.converted && !said_converted && o->log) {
            fprintf(o->log, "sweep: the base is sample-based or ramps its batch up: each point "
                            "runs %d iterations of its final global batch (ramp-up off; the "
                            "LR schedule's samples as iterations of that batch)\n",
                    g.iterations);
            said_converted = 1;
        }
        if (tr_grid_point_config(&g, i, ms.set, ms.n, &cfg)) {
            pt->status = TR_POINT_SKIPPED;
            snprintf(pt->reason, sizeof pt->reason, "%s", tr_errmsg());
        } else {
            int tp = cfg.parallel.tensor_model_parallel_size, pp = cfg.parallel.pipeline_model_parallel_size;
            pt->tp = tp;
            pt->pp = pp;
            int cp = cfg.parallel.context_parallel_size > 1 ? cfg.parallel.context_parallel_size
                                                            : 1;
            pt->dp = g.world_size % (tp * pp * cp) ? 0 : g.world_size / (tp * pp * cp);
            pt->mb = cfg.training.micro_batch_size;
            char buf[256];
            const char *why = layout_problem(&cfg, g.world_size, buf, sizeof buf);
            if (why) {
                pt->status = TR_POINT_SKIPPED;
                snprintf(pt->reason, sizeof pt->reason, "%s", why);
            } else {
                pt->status = TR_POINT_PENDING;
                tr_plan_result pr;
                if (tr_plan_predict(&cfg, g.world_size, &cluster, &pr) == TR_OK)
                    pt->predicted_ms = pr.step_time_s * 1e3;
            }
            if (pt->status == TR_POINT_PENDING && !o->dry_run) {
                char dir[4096], path[4200];
                snprintf(dir, sizeof dir, "%s/point-%03zu", o->out_dir, i);
                snprintf(path, sizeof path, "%s/point.yaml", dir);
                FILE *f = NULL;
                if (tr_make_dirs(dir) || !(f = fopen(path, "w")) || tr_config_write(&cfg, f)) {
                    pt->status = TR_POINT_FAILED;
                    snprintf(pt->reason, sizeof pt->reason, "cannot write %.400s", path);
                }
                if (f)
                    fclose(f);
                if (pt->status == TR_POINT_PENDING) {
                    if (o->log) {
                        fprintf(o->log, "sweep: point %zu/%zu: dp %d tp %d pp %d micro-batch %d ...\n",
                                i + 1, n, pt->dp, pt->tp, pt->pp, pt->mb);
                        fflush(o->log);
                    }
                    if (run_point(self, g.world_size, dir, pt->reason, sizeof pt->reason) ||
                        read_results(dir, g.warmup_iterations, g.world_size, pt)) {
                        pt->status = TR_POINT_FAILED;
                        if (!pt->reason[0])
                            snprintf(pt->reason, sizeof pt->reason, "%s", tr_errmsg());
                    } else {
                        pt->status = TR_POINT_OK;
                        pt->tokens_per_s = (double)cfg.training.global_batch_size *
                                           cfg.model.seq_length / (pt->median_ms / 1e3);
                    }
                }
            }
            tr_config_free(&cfg);
        }
        if (o->log && (o->dry_run || pt->status != TR_POINT_PENDING)) {
            const char *vals[64];
            tr_grid_point(&g, i, vals);
            fprintf(o->log, "sweep: point %zu:", i);
            for (int a = 0; a < g.n_axes && a < 64; a++)
                fprintf(o->log, " %s", vals[a]);
            if (pt->status == TR_POINT_SKIPPED)
                fprintf(o->log, " -> skipped: %s\n", pt->reason);
            else if (pt->status == TR_POINT_FAILED)
                fprintf(o->log, " -> failed: %s\n", pt->reason);
            else if (pt->status == TR_POINT_OK)
                fprintf(o->log, " -> %.1f ms/iter, %.0f tokens/s (predicted %.1f ms)\n",
                        pt->median_ms, pt->tokens_per_s, pt->predicted_ms);
            else
                fprintf(o->log, " -> would run (dp %d tp %d pp %d)\n", pt->dp, pt->tp, pt->pp);
            fflush(o->log);
        }
    }
    if (!o->dry_run) {
        static const char *names[] = {"results.csv", "results.jsonl", "chart.svg"};
        for (int w = 0; w < 3 && !rc; w++) {
            char path[4200];
            snprintf(path, sizeof path, "%s/%s", o->out_dir, names[w]);
            FILE *f = fopen(path, "w");
            if (!f) {
                rc = tr_fail(TR_ERR_IO, "cannot write %s: %s", path, strerror(errno));
                break;
            }
            rc = w == 0   ? tr_sweep_write_csv(f, &g, pts, n)
                 : w == 1 ? tr_sweep_write_jsonl(f, &g, pts, n)
                          : tr_sweep_write_svg(f, &g, pts, n, o->grid_path);
            fclose(f);
        }
    }
    tr_grid_free(&g);
    if (rc) {
        free(pts);
        return rc;
    }
    *points_out = pts;
    *n_out = n;
    return TR_OK;
}
