/* What `trident train` reports (see report.h): the console, metrics.jsonl and TensorBoard
 * events, and the measurements behind them; summary.json is summary.c's. */
#include "train/report.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include "core/core.h"
#include "train/engine_internal.h"

struct train_report {
    tr_engine *e;
    const tr_train_options *opts;
    int lead;                   /* rank 0 writes the files and the console */
    int start, last;            /* iterations start+1..last run in this process */
    FILE *metrics;              /* RUN_DIR/metrics.jsonl (rank 0) */
    train_tb *tb;           /* logging.tensorboard_dir (rank 0) */
    double tokens_per_iter, flops_per_iter;
    double t_train;             /* when the first iteration began */
    double train_time;          /* seconds in iterations so far */
    double dp_exposed;          /* data-parallel wait after backward, iterations after the first */
    double final_loss;
    double *iter_ms, *bubbles;  /* [iterations run]; bubbles when tracing */
    double *iter_tokens;        /* [iterations run]: the tokens of each one's global batch */
    int ran;                    /* iterations run by this process */
    int run_lock, ckpt_lock;    /* rank 0: the locks on RUN_DIR and checkpoint.save (-1) */
    train_summary *summary;     /* this rank's figures for summary.json */
};

FILE *train_open_file(const char *dir, const char *name, const char *mode)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, mode);
    if (!f)
        tr_fail(TR_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    return f;
}

int train_close_file(FILE *f, const char *dir, const char *name)
{
    int bad = fflush(f) != 0 || ferror(f);
    int err = errno;
    bad |= fclose(f) != 0;
    if (!bad)
        return TR_OK;
    if (!err)
        err = errno ? errno : EIO;
    return tr_fail(TR_ERR_IO, "cannot write %s/%s: %s", dir, name, strerror(err));
}

/* One line of metrics.jsonl, flushed; TR_ERR_IO when it could not be written whole. */
static int write_metrics(FILE *f, const char *dir, const tr_step_stats *s)
{
    tr_json j;
    tr_json_begin(&j, f);
    tr_json_object_begin(&j, NULL);
    tr_json_int(&j, "iteration", s->iteration);
    tr_json_double(&j, "loss", s->loss);
    if (s->has_balancing) /* a mixture of experts' (Megatron's name) */
        tr_json_double(&j, "load_balancing_loss", s->load_balancing_loss);
    tr_json_double(&j, "lr", s->lr);
    tr_json_double(&j, "grad_norm", s->grad_norm);
    tr_json_double(&j, "ms_per_iter", s->ms_per_iter);
    tr_json_double(&j, "tokens_per_s", s->tokens_per_s);
    tr_json_double(&j, "gflops", s->gflops);
    tr_json_double(&j, "peak_rss_mb", s->peak_rss_mb);
    if (s->mfu > 0)
        tr_json_double(&j, "mfu", s->mfu);
    if (s->evaluated)
        tr_json_double(&j, "val_loss", s->val_loss);
    tr_json_double(&j, "eta_s", s->eta_s);
    tr_json_int(&j, "consumed_samples", (long long)s->consumed_samples);
    tr_json_int(&j, "global_batch_size", s->global_batch_size);
    if (s->loss_scale != 1.0 || s->skipped_iterations) { /* fp16 loss scaling */
        tr_json_double(&j, "loss_scale", s->loss_scale);
        tr_json_int(&j, "skipped_iterations", s->skipped_iterations);
    }
    tr_json_object_end(&j);
    fputc('\n', f);
    if (fflush(f) == 0 && !ferror(f))
        return TR_OK;
    return tr_fail(TR_ERR_IO, "cannot write %s/metrics.jsonl at iteration %d: %s", dir,
                   s->iteration, strerror(errno ? errno : EIO));
}

/* Resuming at iteration `start`: keep the lines of iterations 1..start of an earlier
 * metrics.jsonl and append after them. */
static FILE *open_metrics(const char *dir, int start)
{
    if (start == 0)
        return train_open_file(dir, "metrics.jsonl", "w");
    char path[4200], tmp[4300], line[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *in = fopen(path, "r"), *out = fopen(tmp, "w");
    if (!out) {
        if (in)
            fclose(in);
        tr_fail(TR_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
        return NULL;
    }
    int keep = 1;
    while (in && fgets(line, sizeof line, in)) {
        const char *p = strstr(line, "\"iteration\":");
        if (p && strtol(p + 12, NULL, 10) > start)
            keep = 0; /* lines past the checkpoint (a run that went on after it) */
        if (!strchr(line, '\n'))
            break; /* a line cut short (a run killed mid-write, a full disk): dropped */
        if (keep)
            fputs(line, out);
    }
    if (in)
        fclose(in);
    if (train_close_file(out, dir, "metrics.jsonl.tmp"))
        return NULL;
    if (rename(tmp, path)) {
        tr_fail(TR_ERR_IO, "cannot write %s: %s", path, strerror(errno));
        return NULL;
    }
    return train_open_file(dir, "metrics.jsonl", "a");
}

static void format_duration(char *buf, size_t n, double seconds)
{
    long s = (long)(seconds + 0.5);
    if (s >= 3600)
        snprintf(buf, n, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
    else
        snprintf(buf, n, "%ld:%02ld", s / 60, s % 60);
}

static void print_layout(tr_engine *e)
{
    const tr_config *cfg = e->cfg;
    char cp[64] = "";
    if (e->CP > 1) /* (CP 1: the line as it always was) */
        snprintf(cp, sizeof cp, " x context %d", e->CP);
    printf("trident: world %d = data %d%s x tensor %d x pipeline %d (order %s); schedule %s, "
           "%d micro-batches of %d per replica\n",
           e->world.size, e->D, cp, e->world.topo.tp, e->P,
           tr_topo_order_name(e->world.topo.order), cfg->parallel.pipeline_schedule, e->M, e->mb);
    if (e->CP > 1)
        printf("trident: context parallel: each sample's %d tokens in %d chunks, %d per rank\n",
               e->T, 2 * e->CP, e->T / e->CP);
    if (e->P > 1) {
        printf("trident: stages:");
        for (int s = 0; s < e->P; s++) {
            printf(" [%d: layers", s);
            for (int c = 0; c < e->v; c++)
                printf("%s %d-%d", c ? "," : "", tr_pp_layer_first(&e->partition, s, c),
                       tr_pp_layer_first(&e->partition, s, c) + tr_pp_layer_count(&e->partition, s, c) - 1);
            printf("]");
        }
        printf("\n");
    }
    if (tr_data_is_sft(e->data)) { /* what packing made of the fine-tuning examples */
        tr_sft_info in;
        tr_data_sft_info(e->data, TR_SPLIT_TRAIN, &in);
        double positions = (double)in.samples * (e->T + 1);
        printf("trident: fine-tuning data: %llu training examples packed into %llu samples of %d "
               "tokens (%.0f%% filled)%s", (unsigned long long)in.examples,
               (unsigned long long)in.samples, e->T + 1,
               positions > 0 ? 100.0 * (double)in.tokens / positions : 0.0,
               in.cut ? "; " : "\n");
        if (in.cut)
            printf("%llu longer ones cut to %d tokens\n", (unsigned long long)in.cut, e->T + 1);
    }
}

/* ---------------------------------------------------------------- the run */

/* Seconds since the Unix epoch (TensorBoard's wall time). */
static double wall_time(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Hold DIR/.trident.lock (flock) for the job's lifetime, recording who holds it; a second
 * job using DIR is refused with the holder named. *fd: the lock's descriptor. */
static int lock_dir(const char *dir, const char *what, int *fd)
{
    char path[4200], holder[256] = "", host[128] = "?";
    int rc = tr_make_dirs(dir);
    if (rc)
        return tr_fail_context(rc, "%s", what);
    snprintf(path, sizeof path, "%s/.trident.lock", dir);
    *fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (*fd < 0)
        return tr_fail(TR_ERR_CONFIG, "%s %s: cannot create %s: %s", what, dir, path,
                       strerror(errno));
    if (flock(*fd, LOCK_EX | LOCK_NB)) {
        int err = errno;
        ssize_t n = pread(*fd, holder, sizeof holder - 1, 0);
        holder[n > 0 ? n : 0] = '\0';
        holder[strcspn(holder, "\n")] = '\0';
        close(*fd);
        *fd = -1;
        if (err == EWOULDBLOCK)
            return tr_fail(TR_ERR_CONFIG, "%s %s is in use by another trident job (%s): wait "
                                          "for it to end or choose another folder",
                           what, dir, *holder ? holder : "holder unknown");
        return tr_fail(TR_ERR_CONFIG, "%s %s: cannot lock %s: %s", what, dir, path,
                       strerror(err));
    }
    gethostname(host, sizeof host - 1);
    char text[256];
    int len = snprintf(text, sizeof text, "pid %d on host %s\n", (int)getpid(), host);
    if (ftruncate(*fd, 0) || pwrite(*fd, text, (size_t)len, 0) != len)
        return tr_fail(TR_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    return TR_OK;
}

/* The checkpoint folder of a run that will save: refused when it has iter_* checkpoints but
 * no tracker (a resume would start from 0 and overwrite them). */
static int check_checkpoint_dir(const tr_config *cfg)
{
    const char *dir = cfg->checkpoint.save;
    char path[4200], found[3][64];
    snprintf(path, sizeof path, "%s/latest_checkpointed_iteration.txt", dir);
    if (access(path, F_OK) == 0)
        return TR_OK;
    DIR *d = opendir(dir);
    if (!d)
        return TR_OK;
    int n = 0;
    for (struct dirent *de; (de = readdir(d));) {
        int it = 0, used = 0;
        if (sscanf(de->d_name, "iter_%7d%n", &it, &used) == 1 && !de->d_name[used]) {
            if (n < 3)
                snprintf(found[n], sizeof found[n], "%.40s", de->d_name);
            n++;
        }
    }
    closedir(d);
    if (n == 0)
        return TR_OK;
    return tr_fail(TR_ERR_CONFIG, "%s: checkpoint.save %s holds %d checkpoint%s (%s%s%s%s%s) but "
                                  "no latest_checkpointed_iteration.txt: restore the tracker "
                                  "file, or save elsewhere (this run would overwrite them)",
                   tr_config_where(cfg, "checkpoint.save"), dir, n, n > 1 ? "s" : "", found[0],
                   n > 1 ? ", " : "", n > 1 ? found[1] : "", n > 2 ? ", " : "",
                   n > 2 ? "..." : "");
}

/* Rank 0: RUN_DIR, config.yaml, metrics.jsonl and the TensorBoard writer. */
static int open_files(train_report *r)
{
    const char *dir = r->opts->run_dir;
    const tr_config *cfg = r->e->cfg;
    int rc = TR_OK;
    if (*cfg->checkpoint.save) {
        rc = lock_dir(cfg->checkpoint.save, "checkpoint.save", &r->ckpt_lock);
        if (!rc)
            rc = check_checkpoint_dir(cfg);
    }
    if (!rc && cfg->training.exit_interval > 0 && !*cfg->checkpoint.save)
        tr_warn("training.exit_interval %d without checkpoint.save: the run stops after "
                "iteration %d and nothing is saved to resume from",
                cfg->training.exit_interval, r->last);
    if (!rc && cfg->training.exit_duration_in_mins > 0 && !*cfg->checkpoint.save)
        tr_warn("training.exit_duration_in_mins %g without checkpoint.save: the run stops after "
                "that time and nothing is saved to resume from",
                cfg->training.exit_duration_in_mins);
    if (dir && !rc) {
        rc = lock_dir(dir, "run directory", &r->run_lock);
        FILE *cf = rc ? NULL : train_open_file(dir, "config.yaml", "w");
        if (!cf)
            rc = rc ? rc : TR_ERR_IO;
        else {
            rc = tr_config_write(cfg, cf);
            int rc_close = train_close_file(cf, dir, "config.yaml");
            rc = rc ? rc : rc_close;
        }
        if (!rc && !(r->metrics = open_metrics(dir, r->start)))
            rc = TR_ERR_IO;
    }
    if (!rc && *cfg->logging.tensorboard_dir)
        rc = train_tb_open(cfg->logging.tensorboard_dir, wall_time(), &r->tb);
    return rc;
}

int train_report_open(tr_engine *e, const tr_train_options *opts, int start, int last,
                      double t0, train_report **out)
{
    *out = NULL;
    const tr_config *cfg = e->cfg;
    train_report *r = calloc(1, sizeof *r);
    size_t runs = (size_t)(last > start ? last - start : 0) + 1;
    if (r) {
        r->iter_ms = calloc(runs, sizeof *r->iter_ms);
        r->bubbles = calloc(runs, sizeof *r->bubbles);
        r->iter_tokens = calloc(runs, sizeof *r->iter_tokens);
    }
    if (!r || !r->iter_ms || !r->bubbles || !r->iter_tokens ||
        train_summary_create(&r->summary)) {
        train_report_close(r);
        return tr_fail(TR_ERR_NOMEM, "out of memory for the run's measurements");
    }
    r->e = e;
    r->opts = opts;
    r->run_lock = r->ckpt_lock = -1;
    r->lead = e->world.rank == 0;
    r->start = start;
    r->last = last;
    int rc = r->lead ? open_files(r) : TR_OK;
    /* every rank learns whether rank 0 could set up its files */
    double failed = rc ? 1.0 : 0.0;
    if (tr_comm_allreduce(e->world.world, &failed, &failed, 1, TR_COMM_F64, TR_COMM_MAX) == TR_OK &&
        failed && !rc)
        rc = tr_fail(TR_ERR_IO, "rank 0 could not set up the run's files (run directory %s, "
                                "tensorboard_dir '%s')",
                     opts->run_dir ? opts->run_dir : "(none)", cfg->logging.tensorboard_dir);
    /* whole-model parameter count: every stage's, shards counted once */
    double n_params = 0;
    for (int c = 0; c < e->v; c++)
        for (int i = 0; i < tr_gpt_num_tensors(e->chunks[c].model); i++) {
            tr_param_tensor *p = tr_gpt_tensor(e->chunks[c].model, i);
            if (p->count_in_norm)
                n_params += (double)p->numel;
        }
    if (!rc)
        rc = tr_comm_allreduce(e->world.mp, &n_params, &n_params, 1, TR_COMM_F64, TR_COMM_SUM);
    if (rc) {
        train_report_close(r);
        return rc;
    }
    const tr_gpt_shape *shape = tr_gpt_get_shape(e->chunks[0].model);
    r->tokens_per_iter = (double)cfg->training.global_batch_size * cfg->model.seq_length;
    r->flops_per_iter = tr_gpt_flops_per_token(shape, n_params) * r->tokens_per_iter;
    if (!opts->quiet && r->lead) {
        const tr_training_config *t = &cfg->training;
        char ramp[160] = "";
        if (t->n_rampup_batch_size)
            snprintf(ramp, sizeof ramp, " (ramp-up from %d by %d over %d samples)",
                     t->rampup_batch_size[0], t->rampup_batch_size[1], t->rampup_batch_size[2]);
        printf("trident: %d layers, hidden %d, %d heads, seq %d, vocab %d (padded %d): %.2fM "
               "parameters; global batch %d%s; %lld iterations; set up in %.2f s\n",
               cfg->model.num_layers, cfg->model.hidden_size, cfg->model.num_attention_heads,
               cfg->model.seq_length, cfg->model.vocab_size, shape->Vp, n_params / 1e6,
               t->global_batch_size, ramp, tr_training_iterations(t), tr_now() - t0);
        print_layout(e);
        fflush(stdout);
    }
    r->t_train = tr_now();
    *out = r;
    return TR_OK;
}

void train_report_iteration_begin(train_report *r, int it)
{
    if (it == r->last)
        train_summary_last_iteration_begin(r->summary, r->e);
}

int train_report_measure(train_report *r, tr_step_stats *s, double secs)
{
    tr_engine *e = r->e;
    int it = s->iteration;
    if (it == r->last)
        train_summary_last_iteration_end(r->summary, e);
    if (it > r->start + 1) { /* the first iteration of a process warms up */
        for (int x = 0; x < engine_n_dp(e); x++) { /* (EP: the experts' wait after dp's) */
            tr_dp_timing tm;
            tr_dp_get_timing(engine_dp_at(e, x), &tm);
            r->dp_exposed += tm.exposed_s;
        }
    }
    /* the bubble of every iteration (the trace keeps the last one's spans only) */
    int rc = e->tracing ? train_trace_bubble(e, &r->bubbles[r->ran]) : TR_OK;
    if (rc)
        return rc;
    r->train_time += secs;
    r->final_loss = s->loss;
    s->ms_per_iter = secs * 1e3;
    /* a ramp-up's iteration runs its own global batch, not the final one */
    double share = (double)s->global_batch_size / e->cfg->training.global_batch_size;
    s->tokens_per_s = r->tokens_per_iter * share / secs;
    s->gflops = r->flops_per_iter * share / secs / 1e9 / e->world.size;
    if (e->cfg->logging.peak_gflops > 0)
        s->mfu = s->gflops / e->cfg->logging.peak_gflops;
    /* the mean time of this process's iterations so far, times those still to run */
    s->eta_s = r->train_time / (it - r->start) * (r->last - it);
    r->iter_tokens[r->ran] = r->tokens_per_iter * share;
    r->iter_ms[r->ran++] = s->ms_per_iter;
    s->peak_rss_mb = train_peak_rss_mb();
    return tr_comm_allreduce(e->world.world, &s->peak_rss_mb, &s->peak_rss_mb, 1, TR_COMM_F64,
                             TR_COMM_MAX);
}

/* TensorBoard tags (Megatron's where it has one). */
static int record_tensorboard(train_report *r, const tr_step_stats *s)
{
    const struct {
        const char *tag;
        double value;
        int present;
    } scalars[] = {
        {"lm loss", s->loss, 1},
        {"learning-rate", s->lr, 1},
        {"grad-norm", s->grad_norm, 1},
        {"iteration-time-ms", s->ms_per_iter, 1},
        {"tokens-per-second", s->tokens_per_s, 1},
        {"gflops-per-rank", s->gflops, 1},
        {"peak-memory-mb", s->peak_rss_mb, 1},
        {"mfu", s->mfu, s->mfu > 0},
        {"lm loss validation", s->val_loss, s->evaluated},
        {"batch-size", s->global_batch_size, 1},
        {"load_balancing_loss", s->load_balancing_loss, s->has_balancing}, /* (MoE) */
    };
    double wall = wall_time();
    for (size_t i = 0; i < sizeof scalars / sizeof scalars[0]; i++) {
        if (!scalars[i].present)
            continue;
        int rc = train_tb_scalar(r->tb, scalars[i].tag, s->iteration, wall, (float)scalars[i].value);
        if (rc)
            return rc;
    }
    return TR_OK;
}

/* The event file first: an iteration in metrics.jsonl is in the event file too, whenever the
 * run is killed. */
int train_report_record(train_report *r, const tr_step_stats *s)
{
    int rc = r->tb ? record_tensorboard(r, s) : TR_OK;
    if (!rc && r->metrics)
        rc = write_metrics(r->metrics, r->opts->run_dir, s);
    return rc;
}

void train_report_print(train_report *r, const tr_step_stats *s)
{
    if (r->opts->quiet || !r->lead)
        return;
    const tr_training_config *t = &r->e->cfg->training;
    char eta[32];
    format_duration(eta, sizeof eta, s->eta_s);
    long long total = tr_training_iterations(t);
    printf("iter %5d/%lld (%3d%%) | loss %.4f | lr %.3e | grad_norm %.3f | %.1f ms | %.0f tok/s | "
           "%.1f GFLOP/s/rank | eta %s",
           s->iteration, total, (int)(100 * s->iteration / total), s->loss, s->lr,
           s->grad_norm, s->ms_per_iter, s->tokens_per_s, s->gflops, eta);
    if (t->n_rampup_batch_size)
        printf(" | batch %d", s->global_batch_size);
    if (s->mfu > 0)
        printf(" | MFU %.1f%%", 100 * s->mfu);
    if (r->e->world.size > 1)
        printf(" | peak %.0f MiB/rank", s->peak_rss_mb);
    if (s->evaluated)
        printf(" | val_loss %.4f", s->val_loss);
    if (s->has_balancing)
        printf(" | load_balancing_loss %.4f", s->load_balancing_loss);
    printf("\n");
    fflush(stdout);
}

int train_report_finish(train_report *r)
{
    tr_engine *e = r->e;
    const tr_train_options *opts = r->opts;
    int rc = TR_OK;
    double bubble = -1;
    if (e->tracing && opts->run_dir) {
        /* median over the iterations after the first (which warms up), like ms/iter */
        int n = r->ran;
        bubble = train_median(n > 1 ? r->bubbles + 1 : r->bubbles, n > 1 ? n - 1 : n);
        rc = bubble < 0 ? tr_fail(TR_ERR_NOMEM, "out of memory") : train_trace_write(e, opts->run_dir);
        if (!rc && r->lead && !opts->quiet)
            printf("trident: trace of the last iteration in %s/trace.json; measured pipeline "
                   "bubble %.1f%% (median over iterations; theory %.1f%%)\n",
                   opts->run_dir, 100 * bubble,
                   100 * tr_pp_bubble_theory(e->P, e->M, e->schedule.kind, e->v));
    }
    if (!rc && opts->run_dir) {
        train_summary_run run = {.dir = opts->run_dir, .lead = r->lead, .ran = r->ran,
                                 .iter_ms = r->iter_ms, .iter_tokens = r->iter_tokens,
                                 .final_loss = r->final_loss, .dp_exposed = r->dp_exposed,
                                 .bubble = bubble};
        rc = train_summary_write(r->summary, e, &run);
    }
    if (!rc && !opts->quiet && r->lead) {
        char total[32];
        format_duration(total, sizeof total, tr_now() - r->t_train);
        printf("trident: trained %d iterations in %s\n", r->ran, total);
        if (e->world.size > 1)
            train_summary_print_operations(r->summary);
    }
    return rc;
}

void train_report_close(train_report *r)
{
    if (!r)
        return;
    if (r->metrics)
        fclose(r->metrics);
    train_tb_close(r->tb);
    if (r->run_lock >= 0)
        close(r->run_lock); /* releases the locks */
    if (r->ckpt_lock >= 0)
        close(r->ckpt_lock);
    free(r->iter_ms);
    free(r->bubbles);
    free(r->iter_tokens);
    train_summary_free(r->summary);
    free(r);
}
