/* `trident train` for one process: the loop, per-iteration lines, metrics.jsonl, config.yaml. */
#include "train/train.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "core/core.h"

/* mkdir -p */
static int make_dirs(const char *path)
{
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return tr_fail(TR_ERR_IO, "run directory path too long");
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0755) && errno != EEXIST)
            return tr_fail(TR_ERR_IO, "cannot create %s: %s", buf, strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0755) && errno != EEXIST)
        return tr_fail(TR_ERR_IO, "cannot create %s: %s", buf, strerror(errno));
    return TR_OK;
}

static FILE *open_in(const char *dir, const char *name, const char *mode)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, mode);
    if (!f)
        tr_fail(TR_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    return f;
}

static void write_metrics(FILE *f, const tr_step_stats *s)
{
    tr_json j;
    tr_json_begin(&j, f);
    tr_json_object_begin(&j, NULL);
    tr_json_int(&j, "iteration", s->iteration);
    tr_json_double(&j, "loss", s->loss);
    tr_json_double(&j, "lr", s->lr);
    tr_json_double(&j, "grad_norm", s->grad_norm);
    tr_json_double(&j, "ms_per_iter", s->ms_per_iter);
    tr_json_double(&j, "tokens_per_s", s->tokens_per_s);
    tr_json_double(&j, "gflops", s->gflops);
    if (s->evaluated)
        tr_json_double(&j, "val_loss", s->val_loss);
    tr_json_object_end(&j);
    fputc('\n', f);
    fflush(f);
}

static void format_duration(char *buf, size_t n, double seconds)
{
    long s = (long)(seconds + 0.5);
    if (s >= 3600)
        snprintf(buf, n, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
    else
        snprintf(buf, n, "%ld:%02ld", s / 60, s % 60);
}

int tr_train_run(const tr_config *cfg, const tr_train_options *opts)
{
    FILE *metrics = NULL;
    if (opts->run_dir) {
        int rc = make_dirs(opts->run_dir);
        if (rc)
            return rc;
        FILE *cf = open_in(opts->run_dir, "config.yaml", "w");
        if (!cf)
            return TR_ERR_IO;
        rc = tr_config_write(cfg, cf);
        fclose(cf);
        if (rc)
            return rc;
        metrics = open_in(opts->run_dir, "metrics.jsonl", "w");
        if (!metrics)
            return TR_ERR_IO;
    }
    double t0 = tr_now();
    tr_engine *e = NULL;
    int rc = tr_engine_create(cfg, &e);
    if (rc) {
        if (metrics)
            fclose(metrics);
        return rc;
    }
    const tr_training_config *t = &cfg->training;
    tr_gpt *model = tr_engine_model(e);
    double n_params = (double)tr_gpt_num_params(model);
    double tokens_per_iter = (double)t->global_batch_size * cfg->model.seq_length;
    double flops_per_iter = tr_gpt_flops_per_token(tr_gpt_get_shape(model), n_params) * tokens_per_iter;
    if (!opts->quiet)
        printf("trident: %d layers, hidden %d, %d heads, seq %d, vocab %d (padded %d): %.2fM "
               "parameters; global batch %d = %d micro-batches of %d; set up in %.2f s\n",
               cfg->model.num_layers, cfg->model.hidden_size, cfg->model.num_attention_heads,
               cfg->model.seq_length, cfg->model.vocab_size, tr_gpt_get_shape(model)->Vp,
               n_params / 1e6, t->global_batch_size, t->global_batch_size / t->micro_batch_size,
               t->micro_batch_size, tr_now() - t0);
    double train_start = tr_now(), train_time = 0;
    for (int it = 1; it <= t->train_iters && !rc; it++) {
        tr_step_stats s = {0};
        double start = tr_now();
        rc = tr_engine_forward_backward(e, it, &s.loss);
        if (!rc)
            rc = tr_engine_optimizer_step(e, it, &s);
        if (rc)
            break;
        double secs = tr_now() - start;
        train_time += secs;
        s.ms_per_iter = secs * 1e3;
        s.tokens_per_s = tokens_per_iter / secs;
        s.gflops = flops_per_iter / secs / 1e9;
        if (t->eval_interval > 0 && (it % t->eval_interval == 0 || it == t->train_iters)) {
            rc = tr_engine_evaluate(e, &s.val_loss);
            if (rc)
                break;
            s.evaluated = 1;
        }
        if (metrics)
            write_metrics(metrics, &s);
        int log_interval = cfg->logging.log_interval > 0 ? cfg->logging.log_interval : 1;
        if (!opts->quiet && (it % log_interval == 0 || it == 1 || it == t->train_iters || s.evaluated)) {
            char eta[32];
            format_duration(eta, sizeof eta, train_time / it * (t->train_iters - it));
            printf("iter %5d/%d (%3d%%) | loss %.4f | lr %.3e | grad_norm %.3f | %.1f ms | %.0f tok/s | "
                   "%.1f GFLOP/s | eta %s",
                   it, t->train_iters, 100 * it / t->train_iters, s.loss, s.lr, s.grad_norm,
                   s.ms_per_iter, s.tokens_per_s, s.gflops, eta);
            if (s.evaluated)
                printf(" | val_loss %.4f", s.val_loss);
            printf("\n");
            fflush(stdout);
        }
    }
    if (!rc && !opts->quiet) {
        char total[32];
        format_duration(total, sizeof total, tr_now() - train_start);
        printf("trident: trained %d iterations in %s\n", t->train_iters, total);
    }
    if (metrics)
        fclose(metrics);
    tr_engine_free(e);
    return rc;
}
