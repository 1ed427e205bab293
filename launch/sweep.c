/* `trident sweep`: expand a grid spec, skip impossible points with the reason, run the
 * others through the launcher, collect what they measured. */
#include "launch/sweep.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/core.h"
#include "plan/plan.h"

static int make_dir(const char *path)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(buf, 0755) && errno != EEXIST)
                return tr_fail(TR_ERR_IO, "cannot create %s: %s", buf, strerror(errno));
            *p = '/';
        }
    if (mkdir(buf, 0755) && errno != EEXIST)
        return tr_fail(TR_ERR_IO, "cannot create %s: %s", buf, strerror(errno));
    return TR_OK;
}

/* Why a loaded config cannot run on `world` ranks, or NULL. */
static const char *layout_problem(const tr_config *c, int world, char *buf, size_t n)
{
    int tp = c->parallel.tensor_model_parallel_size, pp = c->parallel.pipeline_model_parallel_size;
    if (world % (tp * pp)) {
        snprintf(buf, n, "world size %d is not divisible by tp %d x pp %d", world, tp, pp);
        return buf;
    }
    int dp = world / (tp * pp), mb = c->training.micro_batch_size, gb = c->training.global_batch_size;
    if (gb % (mb * dp)) {
        snprintf(buf, n, "global batch %d is not divisible by micro batch %d x dp %d", gb, mb, dp);
        return buf;
    }
    if (c->parallel.sequence_parallel && tp > 1 && (mb * c->model.seq_length) % tp) {
        snprintf(buf, n, "sequence parallel needs micro batch x seq (%d) divisible by tp %d",
                 mb * c->model.seq_length, tp);
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

/* Median ms/iter after the warm-up, final loss, from metrics.jsonl; peak memory and bubble
 * from summary.json. */
static int read_results(const char *dir, int warmup, tr_sweep_point *pt)
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
        for (r = r ? strchr(r, '[') + 1 : NULL; r && *r && *r != ']';) {
            char *end;
            double v = strtod(r, &end);
            if (end == r)
                break;
            if (v > pt->peak_rss_mb)
                pt->peak_rss_mb = v;
            r = *end == ',' ? end + 1 : end;
        }
    }
    return TR_OK;
}

/* Run `trident train --nproc W CONFIG --run-dir DIR --quiet`, stderr to DIR/stderr.log. */
static int run_point(const tr_sweep_options *o, const char *self, int world, const char *dir,
                     char *reason, size_t n)
{
    char cfg[4200], log[4200], nproc[16];
    snprintf(cfg, sizeof cfg, "%s/point.yaml", dir);
    snprintf(log, sizeof log, "%s/stderr.log", dir);
    snprintf(nproc, sizeof nproc, "%d", world);
    pid_t pid = fork();
    if (pid < 0)
        return tr_fail(TR_ERR_IO, "fork: %s", strerror(errno));
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        execl(self, self, "train", "--nproc", nproc, cfg, "--run-dir", dir, "--quiet", (char *)NULL);
        _exit(127);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    (void)o;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return TR_OK;
    /* the last line of the error output says why */
    reason[0] = '\0';
    FILE *f = fopen(log, "r");
    if (f) {
        char line[1024];
        while (fgets(line, sizeof line, f))
            if (strstr(line, "trident") && strlen(line) > 1) {
                line[strcspn(line, "\n")] = '\0';
                snprintf(reason, n, "%s", line);
            }
        fclose(f);
    }
    if (!reason[0])
        snprintf(reason, n, "exit status %d", WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    return TR_ERR_COMM;
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
    size_t n = tr_grid_num_points(&g);
    tr_sweep_point *pts = calloc(n, sizeof *pts);
    if (!pts) {
        tr_grid_free(&g);
        return tr_fail(TR_ERR_NOMEM, "out of memory for %zu points", n);
    }
    if (!o->dry_run && (rc = make_dir(o->out_dir))) {
        free(pts);
        tr_grid_free(&g);
        return rc;
    }
    char iters[64];
    snprintf(iters, sizeof iters, "training.train_iters=%d", g.iterations);
    const char *extra[] = {iters, "logging.trace=true", "training.eval_interval=0"};
    for (size_t i = 0; i < n; i++) {
        tr_sweep_point *pt = &pts[i];
        pt->index = (int)i;
        pt->bubble = NAN;
        tr_config cfg;
        if (tr_grid_point_config(&g, i, extra, 3, &cfg)) {
            pt->status = TR_POINT_SKIPPED;
            snprintf(pt->reason, sizeof pt->reason, "%s", tr_errmsg());
        } else {
            int tp = cfg.parallel.tensor_model_parallel_size, pp = cfg.parallel.pipeline_model_parallel_size;
            pt->tp = tp;
            pt->pp = pp;
            pt->dp = g.world_size % (tp * pp) ? 0 : g.world_size / (tp * pp);
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
                if (make_dir(dir) || !(f = fopen(path, "w")) || tr_config_write(&cfg, f)) {
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
                    if (run_point(o, self, g.world_size, dir, pt->reason, sizeof pt->reason) ||
                        read_results(dir, g.warmup_iterations, pt)) {
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
