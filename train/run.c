/* `trident train` for one process: the loop, per-iteration lines, metrics.jsonl, config.yaml. */
#include "train/train.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "core/core.h"
#include "train/engine_internal.h"

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
    tr_json_double(&j, "peak_rss_mb", s->peak_rss_mb);
    if (s->mfu > 0)
        tr_json_double(&j, "mfu", s->mfu);
    if (s->evaluated)
        tr_json_double(&j, "val_loss", s->val_loss);
    tr_json_object_end(&j);
    fputc('\n', f);
    fflush(f);
}

/* Resuming at iteration `start`: keep the lines of iterations 1..start of an earlier
 * metrics.jsonl and append after them. */
static FILE *open_metrics(const char *dir, int start)
{
    if (start == 0)
        return open_in(dir, "metrics.jsonl", "w");
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
        if (keep)
            fputs(line, out);
    }
    if (in)
        fclose(in);
    if (fclose(out) || rename(tmp, path)) {
        tr_fail(TR_ERR_IO, "cannot write %s: %s", path, strerror(errno));
        return NULL;
    }
    return open_in(dir, "metrics.jsonl", "a");
}

static void format_duration(char *buf, size_t n, double seconds)
{
    long s = (long)(seconds + 0.5);
    if (s >= 3600)
        snprintf(buf, n, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
    else
        snprintf(buf, n, "%ld:%02ld", s / 60, s % 60);
}

/* Peak resident memory of this process, MiB. */
static double peak_rss_mb(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of v[0..n) (0 when n is 0); v is not changed. -1 when out of memory. */
static double median_of(const double *v, int n)
{
    if (n <= 0)
        return 0;
    double *sorted = malloc((size_t)n * sizeof *sorted);
    if (!sorted)
        return -1;
    memcpy(sorted, v, (size_t)n * sizeof *sorted);
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_double);
    double m = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
    free(sorted);
    return m;
}

/* What each rank reports to summary.json: peak memory, peak stored activations, and the
 * operations of the last iteration on each group (the communicators' counters). */
enum { GROUP_TP, GROUP_DP, GROUP_PP, GROUP_EMBED, GROUP_MP, GROUP_WORLD, N_GROUPS };
static const char *const group_names[N_GROUPS] = {"tp", "dp", "pp", "embedding", "model_parallel",
                                                   "world"};
enum { STAT_RSS, STAT_STORED, STAT_COLL, STAT_P2P = STAT_COLL + N_GROUPS, N_STATS = STAT_P2P + 1 };

static void snapshot_counters(const tr_engine *e, tr_comm_counters out[N_GROUPS])
{
    const tr_world *w = &e->world;
    tr_comm *const comms[N_GROUPS] = {w->tp, w->dp, w->pp, w->embed, w->mp, w->world};
    for (int g = 0; g < N_GROUPS; g++) {
        memset(&out[g], 0, sizeof out[g]);
        if (comms[g])
            tr_comm_get_counters(comms[g], &out[g]);
    }
}

/* Collectives per group and point-to-point operations (pipeline sends + receives) between
 * two snapshots, into stats[STAT_COLL ..]. */
static void count_iteration(const tr_comm_counters before[N_GROUPS],
                            const tr_comm_counters after[N_GROUPS], double *stats)
{
    static const tr_comm_opkind coll[] = {TR_COMM_OP_ALLREDUCE, TR_COMM_OP_REDUCE_SCATTER,
                                          TR_COMM_OP_ALLGATHER, TR_COMM_OP_BROADCAST,
                                          TR_COMM_OP_BARRIER};
    for (int g = 0; g < N_GROUPS; g++) {
        double n = 0;
        for (size_t k = 0; k < sizeof coll / sizeof coll[0]; k++)
            n += (double)(after[g].ops[coll[k]] - before[g].ops[coll[k]]);
        stats[STAT_COLL + g] = n;
    }
    stats[STAT_P2P] = (double)(after[GROUP_PP].ops[TR_COMM_OP_SEND] - before[GROUP_PP].ops[TR_COMM_OP_SEND] +
                               after[GROUP_PP].ops[TR_COMM_OP_RECV] - before[GROUP_PP].ops[TR_COMM_OP_RECV]);
}

/* RUN_DIR/summary.json, written by rank 0: what a sweep records of a run. */
static int write_summary(tr_engine *e, const char *dir, const double *ms, int n, double tokens_per_iter,
                         double final_loss, double bubble, const double *stats, double dp_exposed_s)
{
    FILE *f = open_in(dir, "summary.json", "w");
    if (!f)
        return TR_ERR_IO;
    double median = median_of(ms, n);
    if (median < 0) {
        fclose(f);
        return tr_fail(TR_ERR_NOMEM, "out of memory");
    }
    tr_json j;
    tr_json_begin(&j, f);
    tr_json_object_begin(&j, NULL);
    tr_json_int(&j, "world_size", e->world.size);
    tr_json_int(&j, "data_parallel_size", e->D);
    tr_json_int(&j, "tensor_model_parallel_size", e->world.topo.tp);
    tr_json_int(&j, "pipeline_model_parallel_size", e->P);
    tr_json_int(&j, "micro_batches_per_replica", e->M);
    tr_json_int(&j, "iterations", n);
    tr_json_double(&j, "median_ms_per_iter", median);
    tr_json_double(&j, "tokens_per_s", median > 0 ? tokens_per_iter / (median / 1e3) : 0);
    tr_json_double(&j, "final_loss", final_loss);
    /* data-parallel reduction left waiting after backward (not hidden), per iteration */
    tr_json_double(&j, "dp_exposed_ms_per_iter", n > 1 ? 1e3 * dp_exposed_s / (n - 1) : 0);
    tr_json_int(&j, "dp_buckets", tr_dp_num_buckets(e->dp));
    if (bubble >= 0)
        tr_json_double(&j, "measured_bubble", bubble);
    else
        tr_json_null(&j, "measured_bubble");
    tr_json_array_begin(&j, "peak_rss_mb_per_rank");
    for (int r = 0; r < e->world.size; r++)
        tr_json_double(&j, NULL, stats[r * N_STATS + STAT_RSS]);
    tr_json_array_end(&j);
    /* forwards whose backward had not run yet, at most at once (1F1B: P - stage) */
    tr_json_array_begin(&j, "peak_stored_activations_per_rank");
    for (int r = 0; r < e->world.size; r++)
        tr_json_int(&j, NULL, (long long)stats[r * N_STATS + STAT_STORED]);
    tr_json_array_end(&j);
    /* the last iteration's collectives per group and pipeline sends + receives, per rank */
    tr_json_array_begin(&j, "comm_ops_last_iter_per_rank");
    for (int r = 0; r < e->world.size; r++) {
        const double *st = stats + r * N_STATS;
        tr_json_object_begin(&j, NULL);
        for (int g = 0; g < N_GROUPS; g++)
            tr_json_int(&j, group_names[g], (long long)st[STAT_COLL + g]);
        tr_json_int(&j, "pp_send_recv", (long long)st[STAT_P2P]);
        tr_json_object_end(&j);
    }
    tr_json_array_end(&j);
    tr_json_object_end(&j);
    fputc('\n', f);
    fclose(f);
    return TR_OK;
}

/* This rank's gradients with what is needed to reassemble whole tensors from shards. */
static int dump_gradients(tr_engine *e, const char *dir)
{
    int rc = tr_make_dirs(dir);
    if (rc)
        return rc;
    char name[64];
    snprintf(name, sizeof name, "grads.rank%d.bin", e->world.rank);
    FILE *f = open_in(dir, name, "wb");
    if (!f)
        return TR_ERR_IO;
    float *host = tr_alloc(e->n_params * sizeof(float), "gradient dump");
    if (!host) {
        fclose(f);
        return TR_ERR_NOMEM;
    }
    e->k->to_host(NULL, host, e->grads, e->n_params * sizeof(float)); /* device memory on GPUs */
    size_t n = fwrite(host, sizeof(float), e->n_params, f);
    tr_free(host);
    fclose(f);
    if (n != e->n_params)
        return tr_fail(TR_ERR_IO, "short write of %s/%s", dir, name);
    snprintf(name, sizeof name, "grads.rank%d.json", e->world.rank);
    if (!(f = open_in(dir, name, "w")))
        return TR_ERR_IO;
    const tr_gpt_shape *s = tr_gpt_get_shape(e->chunks[0].model);
    tr_json j;
    tr_json_begin(&j, f);
    tr_json_object_begin(&j, NULL);
    tr_json_int(&j, "tp_rank", s->tp_rank);
    tr_json_int(&j, "tp_size", s->tp_size);
    tr_json_int(&j, "stage", e->stage);
    tr_json_int(&j, "dp_rank", e->dp_rank);
    /* with ZeRO-1 only this rank's shard of the gradient is reduced */
    size_t n_owned = 0;
    const tr_dp_shard_range *owned = tr_dp_shard_ranges(e->dp, &n_owned);
    tr_json_array_begin(&j, "owned");
    for (size_t i = 0; i < n_owned; i++) {
        tr_json_array_begin(&j, NULL);
        tr_json_int(&j, NULL, (long long)owned[i].offset);
        tr_json_int(&j, NULL, (long long)owned[i].count);
        tr_json_array_end(&j);
    }
    tr_json_array_end(&j);
    tr_json_array_begin(&j, "tensors");
    for (int c = 0; c < e->v; c++)
    for (int i = 0; i < tr_gpt_num_tensors(e->chunks[c].model); i++) {
        tr_param_tensor *t = tr_gpt_tensor(e->chunks[c].model, i);
        tr_json_object_begin(&j, NULL);
        tr_json_string(&j, "name", t->name);
        tr_json_int(&j, "offset", (long long)(e->chunks[c].offset + t->offset));
        tr_json_int(&j, "rows", t->rows);
        tr_json_int(&j, "cols", t->cols);
        tr_json_int(&j, "full_rows", t->full_rows);
        tr_json_int(&j, "full_cols", t->full_cols);
        tr_json_int(&j, "split_dim", t->split_dim);
        tr_json_object_end(&j);
    }
    tr_json_array_end(&j);
    tr_json_object_end(&j);
    fputc('\n', f);
    fclose(f);
    return TR_OK;
}

/* Chrome trace (chrome://tracing, Perfetto): this rank's spans of the last iteration. The
 * schedule's ops and the optimizer step go on the rank's row (tid = rank); data-parallel
 * reductions overlap backward, so they get a row of their own (tid = world + rank). */
static int write_rank_trace(tr_engine *e, const char *dir)
{
    char name[64];
    snprintf(name, sizeof name, "trace.rank%d.json", e->world.rank);
    FILE *f = open_in(dir, name, "w");
    if (!f)
        return TR_ERR_IO;
    for (int i = 0; i < e->trace.n; i++) {
        const tr_pp_span *sp = &e->trace.spans[i];
        const char *kind = "recv";
        int tid = e->world.rank;
        switch (sp->what) {
        case TR_PP_SPAN_OPTIMIZER: kind = "optimizer"; break;
        case TR_PP_SPAN_GRAD_REDUCE: kind = "grad-reduce"; tid += e->world.size; break;
        case TR_PP_SPAN_GRAD_WAIT: kind = "grad-wait"; break;
        case TR_PP_SPAN_OP:
            kind = sp->kind == TR_PP_OP_FORWARD    ? "forward"
                   : sp->kind == TR_PP_OP_BACKWARD ? "backward"
                   : tr_pp_op_is_send(sp->kind)    ? "send"
                                                   : "recv";
            break;
        }
        fprintf(f, "{\"name\":\"%s %d\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":0,\"tid\":%d,"
                   "\"ts\":%.3f,\"dur\":%.3f},\n",
                kind, sp->mb, kind, tid, sp->start * 1e6, (sp->end - sp->start) * 1e6);
    }
    fclose(f);
    return TR_OK;
}

/* Rank 0 merges the per-rank files into trace.json once every rank has written its own. */
static int merge_traces(const char *dir, int world, int dp_rows)
{
    FILE *out = open_in(dir, "trace.json", "w");
    if (!out)
        return TR_ERR_IO;
    fprintf(out, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
    for (int r = 0; r < world; r++) {
        fprintf(out, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":%d,\"args\":{\"name\":\"rank %d\"}},\n", r, r);
        if (dp_rows)
            fprintf(out, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":%d,"
                         "\"args\":{\"name\":\"rank %d grad reduce\"}},\n", world + r, r);
        char name[64];
        snprintf(name, sizeof name, "trace.rank%d.json", r);
        FILE *in = open_in(dir, name, "r");
        if (!in)
            continue;
        char buf[8192];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, in)) > 0)
            fwrite(buf, 1, n, out);
        fclose(in);
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", dir, name);
        remove(path);
    }
    fprintf(out, "{\"name\":\"end\",\"ph\":\"i\",\"pid\":0,\"tid\":0,\"ts\":0,\"s\":\"g\"}\n]}\n");
    fclose(out);
    return TR_OK;
}

/* Bubble of the traced iteration: idle share of the pipeline stages' time, from rank 0's view
 * of every rank's compute spans (each rank reports busy seconds and its span). */
static int measured_bubble(tr_engine *e, double *bubble)
{
    double busy = 0, first = 1e300, last = -1e300;
    for (int i = 0; i < e->trace.n; i++) {
        const tr_pp_span *sp = &e->trace.spans[i];
        if (sp->what != TR_PP_SPAN_OP)
            continue; /* the pipeline's time: its ops, not the optimizer or the DP wait */
        if (sp->kind == TR_PP_OP_FORWARD || sp->kind == TR_PP_OP_BACKWARD)
            busy += sp->end - sp->start;
        if (sp->start < first)
            first = sp->start;
        if (sp->end > last)
            last = sp->end;
    }
    double v[3] = {busy, -first, last};
    int rc = tr_comm_allreduce(e->world.pp, v, v, 1, TR_COMM_F64, TR_COMM_SUM);
    if (!rc)
        rc = tr_comm_allreduce(e->world.pp, v + 1, v + 1, 2, TR_COMM_F64, TR_COMM_MAX);
    double span = v[2] + v[1];
    *bubble = span > 0 ? 1.0 - v[0] / (e->P * span) : 0.0;
    return rc;
}

static void print_layout(tr_engine *e)
{
    const tr_config *cfg = e->cfg;
    printf("trident: world %d = data %d x tensor %d x pipeline %d (order %s); schedule %s, "
           "%d micro-batches of %d per replica\n",
           e->world.size, e->D, e->world.topo.tp, e->P, tr_topo_order_name(e->world.topo.order),
           cfg->parallel.pipeline_schedule, e->M, e->mb);
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
}

int tr_train_run(const tr_config *cfg, const tr_train_options *opts)
{
    double t0 = tr_now();
    tr_engine *e = NULL;
    int rc = tr_engine_create(cfg, &e);
    if (rc)
        return rc;
    int lead = e->world.rank == 0;
    const tr_training_config *t = &cfg->training;
    const tr_checkpoint_config *ck = &cfg->checkpoint;
    int start = 0; /* the iteration the run resumes after */
    if (*ck->load) {
        double t_load = tr_now();
        if ((rc = tr_checkpoint_load(e, ck->load, &start))) {
            tr_engine_free(e);
            return rc;
        }
        if (lead && !opts->quiet) {
            if (start)
                printf("trident: resumed from %s/iter_%07d (iteration %d) in %.2f s\n", ck->load, start,
                       start, tr_now() - t_load);
            else
                printf("trident: no checkpoint in %s (no latest_checkpointed_iteration.txt): "
                       "starting from iteration 0\n", ck->load);
        }
    }
    /* the last iteration this process runs: train_iters, or the next exit_interval */
    int last = t->train_iters;
    if (t->exit_interval > 0) {
        long long next_exit = (start / t->exit_interval + 1) * (long long)t->exit_interval;
        if (next_exit < last)
            last = (int)next_exit;
    }
    FILE *metrics = NULL;
    if (opts->run_dir && lead) {
        rc = tr_make_dirs(opts->run_dir);
        FILE *cf = rc ? NULL : open_in(opts->run_dir, "config.yaml", "w");
        if (!cf)
            rc = rc ? rc : TR_ERR_IO;
        else {
            rc = tr_config_write(cfg, cf);
            fclose(cf);
        }
        if (!rc && !(metrics = open_metrics(opts->run_dir, start)))
            rc = TR_ERR_IO;
    }
    /* every rank learns whether rank 0 could set up the run directory */
    double ok = rc ? 1.0 : 0.0;
    if (tr_comm_allreduce(e->world.world, &ok, &ok, 1, TR_COMM_F64, TR_COMM_MAX) == TR_OK && ok && !rc)
        rc = tr_fail(TR_ERR_IO, "rank 0 could not set up the run directory %s", opts->run_dir);
    if (rc) {
        if (metrics)
            fclose(metrics);
        tr_engine_free(e);
        return rc;
    }
    tr_gpt *model = tr_engine_model(e);
    /* whole-model parameter count: every stage's, shards counted once */
    double n_local = 0;
    for (int c = 0; c < e->v; c++)
        for (int i = 0; i < tr_gpt_num_tensors(e->chunks[c].model); i++) {
            tr_param_tensor *p = tr_gpt_tensor(e->chunks[c].model, i);
            if (p->count_in_norm)
                n_local += (double)p->numel;
        }
    double n_params = n_local;
    rc = tr_comm_allreduce(e->world.mp, &n_params, &n_params, 1, TR_COMM_F64, TR_COMM_SUM);
    double tokens_per_iter = (double)t->global_batch_size * cfg->model.seq_length;
    double flops_per_iter = tr_gpt_flops_per_token(tr_gpt_get_shape(model), n_params) * tokens_per_iter;
    if (!rc && !opts->quiet && lead) {
        printf("trident: %d layers, hidden %d, %d heads, seq %d, vocab %d (padded %d): %.2fM "
               "parameters; global batch %d; set up in %.2f s\n",
               cfg->model.num_layers, cfg->model.hidden_size, cfg->model.num_attention_heads,
               cfg->model.seq_length, cfg->model.vocab_size, tr_gpt_get_shape(model)->Vp,
               n_params / 1e6, t->global_batch_size, tr_now() - t0);
        print_layout(e);
        fflush(stdout);
    }
    double train_start = tr_now(), train_time = 0, final_loss = 0, dp_exposed = 0;
    double *iter_ms = calloc((size_t)t->train_iters, sizeof *iter_ms);
    double *bubbles = calloc((size_t)t->train_iters, sizeof *bubbles); /* when traced */
    if (!rc && (!iter_ms || !bubbles))
        rc = tr_fail(TR_ERR_NOMEM, "out of memory");
    tr_comm_counters before[N_GROUPS], after[N_GROUPS];
    double mine[N_STATS] = {0};
    int ran = 0; /* iterations run by this process */
    for (int it = start + 1; it <= last && !rc; it++) {
        tr_step_stats s = {0};
        if (it == last)
            snapshot_counters(e, before);
        double t_iter = tr_now();
        rc = tr_engine_forward_backward(e, it, &s.loss);
        if (!rc && it == 1 && opts->dump_grads_dir)
            rc = dump_gradients(e, opts->dump_grads_dir);
        if (!rc)
            rc = tr_engine_optimizer_step(e, it, &s);
        if (rc)
            break;
        double secs = tr_now() - t_iter;
        train_time += secs;
        if (it == last) {
            snapshot_counters(e, after);
            count_iteration(before, after, mine);
        }
        if (it > start + 1) { /* the first iteration warms up */
            tr_dp_timing tm;
            tr_dp_get_timing(e->dp, &tm);
            dp_exposed += tm.exposed_s;
        }
        /* the bubble of every iteration (the trace keeps the last one's spans only) */
        if (e->tracing && (rc = measured_bubble(e, &bubbles[ran])) != TR_OK)
            break;
        s.ms_per_iter = secs * 1e3;
        s.tokens_per_s = tokens_per_iter / secs;
        s.gflops = flops_per_iter / secs / 1e9 / e->world.size;
        iter_ms[ran++] = s.ms_per_iter;
        final_loss = s.loss;
        if (cfg->logging.peak_gflops > 0)
            s.mfu = s.gflops / cfg->logging.peak_gflops;
        s.peak_rss_mb = peak_rss_mb();
        rc = tr_comm_allreduce(e->world.world, &s.peak_rss_mb, &s.peak_rss_mb, 1, TR_COMM_F64, TR_COMM_MAX);
        if (rc)
            break;
        if (t->eval_interval > 0 && (it % t->eval_interval == 0 || it == t->train_iters)) {
            rc = tr_engine_evaluate(e, &s.val_loss);
            if (rc)
                break;
            s.evaluated = 1;
        }
        if (metrics)
            write_metrics(metrics, &s);
        int log_interval = cfg->logging.log_interval > 0 ? cfg->logging.log_interval : 1;
        if (!opts->quiet && lead &&
            (it % log_interval == 0 || it == 1 || it == t->train_iters || s.evaluated)) {
            char eta[32];
            format_duration(eta, sizeof eta, train_time / (it - start) * (last - it));
            printf("iter %5d/%d (%3d%%) | loss %.4f | lr %.3e | grad_norm %.3f | %.1f ms | %.0f tok/s | "
                   "%.1f GFLOP/s/rank | eta %s",
                   it, t->train_iters, 100 * it / t->train_iters, s.loss, s.lr, s.grad_norm,
                   s.ms_per_iter, s.tokens_per_s, s.gflops, eta);
            if (s.mfu > 0)
                printf(" | MFU %.1f%%", 100 * s.mfu);
            if (e->world.size > 1)
                printf(" | peak %.0f MiB/rank", s.peak_rss_mb);
            if (s.evaluated)
                printf(" | val_loss %.4f", s.val_loss);
            printf("\n");
            fflush(stdout);
        }
        int exiting = it == last && last < t->train_iters;
        if (*ck->save && (it == last || (ck->save_interval > 0 && it % ck->save_interval == 0))) {
            double t_save = tr_now();
            if ((rc = tr_checkpoint_save(e, ck->save, it)))
                break;
            if (lead && !opts->quiet) {
                printf("trident: saved checkpoint %s/iter_%07d in %.2f s\n", ck->save, it, tr_now() - t_save);
                fflush(stdout);
            }
        }
        if (exiting && lead && !opts->quiet)
            printf("trident: exiting after iteration %d (training.exit_interval %d)\n", it, t->exit_interval);
    }
    double bubble = -1;
    if (!rc && e->tracing && opts->run_dir) {
        /* median over the iterations after the first (which warms up), like ms/iter */
        int n = ran;
        bubble = median_of(n > 1 ? bubbles + 1 : bubbles, n > 1 ? n - 1 : n);
        if (bubble < 0)
            rc = tr_fail(TR_ERR_NOMEM, "out of memory");
        if (!rc)
            rc = write_rank_trace(e, opts->run_dir);
        int brc = tr_comm_barrier(e->world.world);
        if (!rc)
            rc = brc;
        if (!rc && lead) {
            rc = merge_traces(opts->run_dir, e->world.size, e->D > 1);
            if (!opts->quiet)
                printf("trident: trace of the last iteration in %s/trace.json; measured pipeline "
                       "bubble %.1f%% (median over iterations; theory %.1f%%)\n",
                       opts->run_dir, 100 * bubble,
                       100 * tr_pp_bubble_theory(e->P, e->M, e->schedule.kind, e->v));
        }
    }
    if (!rc && opts->run_dir) {
        mine[STAT_RSS] = peak_rss_mb();
        mine[STAT_STORED] = e->stored_peak;
        size_t n = (size_t)e->world.size * N_STATS;
        double *stats = calloc(n, sizeof *stats);
        rc = stats ? tr_comm_allgather(e->world.world, mine, stats, n, TR_COMM_F64)
                   : tr_fail(TR_ERR_NOMEM, "out of memory");
        if (!rc && lead)
            rc = write_summary(e, opts->run_dir, iter_ms, ran, tokens_per_iter, final_loss,
                               bubble, stats, dp_exposed);
        free(stats);
    }
    free(iter_ms);
    free(bubbles);
    if (!rc && !opts->quiet && lead) {
        char total[32];
        format_duration(total, sizeof total, tr_now() - train_start);
        printf("trident: trained %d iterations in %s\n", ran, total);
        if (e->world.size > 1)
            printf("trident: the last iteration on rank 0: collectives tp %.0f, dp %.0f, pp %.0f, "
                   "embedding %.0f, model-parallel %.0f, world %.0f; pipeline sends + receives "
                   "%.0f\n", mine[STAT_COLL + GROUP_TP], mine[STAT_COLL + GROUP_DP],
                   mine[STAT_COLL + GROUP_PP], mine[STAT_COLL + GROUP_EMBED],
                   mine[STAT_COLL + GROUP_MP], mine[STAT_COLL + GROUP_WORLD], mine[STAT_P2P]);
    }
    if (metrics)
        fclose(metrics);
    tr_engine_free(e);
    return rc;
}
