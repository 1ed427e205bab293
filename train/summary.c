/* RUN_DIR/summary.json (see report.h): what a sweep records of a run, measured on every
 * rank and written by rank 0; and the closing line's operation counts. */
#include "train/report.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "core/core.h"
#include "train/engine_internal.h"

/* What each rank reports to summary.json: peak memory, peak stored activations, and the
 * operations of the last iteration on each group (the communicators' counters). */
enum { GROUP_TP, GROUP_DP, GROUP_PP, GROUP_EMBED, GROUP_MP, GROUP_WORLD, N_GROUPS };
static const char *const group_names[N_GROUPS] = {"tp", "dp", "pp", "embedding", "model_parallel",
                                                   "world"};
/* this rank's figures, all-gathered for summary.json; STAT_MEM..: MiB by the planner's parts */
enum { STAT_RSS, STAT_STORED, STAT_COLL, STAT_P2P = STAT_COLL + N_GROUPS, STAT_MEM, N_MEM = 6,
       /* ZeRO: the last iteration's DP payload bytes by kind and all-gathers, stage 3's
        * gathers over the run and the seconds waited for them */
       STAT_DP_AR = STAT_MEM + N_MEM, STAT_DP_RS, STAT_DP_AG, STAT_DP_AG_OPS, STAT_Z_GATHERS,
       STAT_Z_WAIT, N_STATS };
static const char *const mem_names[N_MEM] = {"parameters", "gradients", "optimizer",
                                              "activations", "other", "peak"};

struct train_summary {
    tr_comm_counters before[N_GROUPS]; /* the groups' counters as the last iteration began */
    tr_comm_counters before_edp;       /* expert parallelism: the experts' reduction group */
    double mine[N_STATS];              /* this rank's figures */
};

/* Peak resident memory of this process, MiB. */
double train_peak_rss_mb(void)
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
double train_median(const double *v, int n)
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

int train_summary_create(train_summary **out)
{
    *out = calloc(1, sizeof **out);
    return *out ? TR_OK : tr_fail(TR_ERR_NOMEM, "out of memory");
}

void train_summary_free(train_summary *s)
{
    free(s);
}

static void snapshot_counters(const tr_engine *e, tr_comm_counters out[N_GROUPS])
{
    const train_world *w = &e->world;
    /* dp: the group the gradients are reduced over (with context parallelism D x CP ranks) */
    tr_comm *const comms[N_GROUPS] = {w->tp, world_grad_comm(w), w->pp, w->embed, w->mp,
                                      w->world};
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
    stats[STAT_DP_AR] = (double)(after[GROUP_DP].bytes[TR_COMM_OP_ALLREDUCE] -
                                 before[GROUP_DP].bytes[TR_COMM_OP_ALLREDUCE]);
    stats[STAT_DP_RS] = (double)(after[GROUP_DP].bytes[TR_COMM_OP_REDUCE_SCATTER] -
                                 before[GROUP_DP].bytes[TR_COMM_OP_REDUCE_SCATTER]);
    stats[STAT_DP_AG] = (double)(after[GROUP_DP].bytes[TR_COMM_OP_ALLGATHER] -
                                 before[GROUP_DP].bytes[TR_COMM_OP_ALLGATHER]);
    stats[STAT_DP_AG_OPS] = (double)(after[GROUP_DP].ops[TR_COMM_OP_ALLGATHER] -
                                     before[GROUP_DP].ops[TR_COMM_OP_ALLGATHER]);
    stats[STAT_P2P] = (double)(after[GROUP_PP].ops[TR_COMM_OP_SEND] -
                               before[GROUP_PP].ops[TR_COMM_OP_SEND] +
                               after[GROUP_PP].ops[TR_COMM_OP_RECV] -
                               before[GROUP_PP].ops[TR_COMM_OP_RECV]);
}

void train_summary_last_iteration_begin(train_summary *s, const tr_engine *e)
{
    snapshot_counters(e, s->before);
    memset(&s->before_edp, 0, sizeof s->before_edp);
    if (e->world.edp)
        tr_comm_get_counters(e->world.edp, &s->before_edp);
}

/* Expert parallelism: the experts' gradient reduction and ZeRO gathers over EDP count as the
 * data-parallel payload too. */
static void count_edp(const train_summary *s, const tr_engine *e, double *stats)
{
    if (!e->world.edp)
        return;
    tr_comm_counters a, b = s->before_edp;
    tr_comm_get_counters(e->world.edp, &a);
    stats[STAT_DP_AR] += (double)(a.bytes[TR_COMM_OP_ALLREDUCE] - b.bytes[TR_COMM_OP_ALLREDUCE]);
    stats[STAT_DP_RS] +=
        (double)(a.bytes[TR_COMM_OP_REDUCE_SCATTER] - b.bytes[TR_COMM_OP_REDUCE_SCATTER]);
    stats[STAT_DP_AG] += (double)(a.bytes[TR_COMM_OP_ALLGATHER] - b.bytes[TR_COMM_OP_ALLGATHER]);
    stats[STAT_DP_AG_OPS] += (double)(a.ops[TR_COMM_OP_ALLGATHER] - b.ops[TR_COMM_OP_ALLGATHER]);
}

void train_summary_last_iteration_end(train_summary *s, const tr_engine *e)
{
    tr_comm_counters after[N_GROUPS];
    snapshot_counters(e, after);
    count_iteration(s->before, after, s->mine);
    count_edp(s, e, s->mine);
}

/* This rank's peak memory (by the planner's parts where the backend counts its bytes) and
 * stored activations, and ZeRO stage 3's gathers, into mine[]. */
static void measure_memory(train_summary *s, tr_engine *e)
{
    s->mine[STAT_RSS] = train_peak_rss_mb();
    s->mine[STAT_STORED] = e->stored_peak;
    size_t peak = 0;
    if (e->k->bytes_in_use) {
        (void)e->k->bytes_in_use(&peak);
        /* ZeRO-2/3: the windows' pages held at most at once (gathered layers, gradient
         * buckets not yet reduced) are not the allocator's: added to their parts */
        tr_dp_zero_stats zs, xs;
        tr_dp_get_zero_stats(e->dp, &zs);
        if (e->xdp) { /* expert parallelism: the experts' gathers too (both instances
                       * measure the one gradient window) */
            tr_dp_get_zero_stats(e->xdp, &xs);
            zs.param_resident_peak_bytes += xs.param_resident_peak_bytes;
            if (xs.grad_live_peak_bytes > zs.grad_live_peak_bytes)
                zs.grad_live_peak_bytes = xs.grad_live_peak_bytes;
            zs.gathers += xs.gathers;
            zs.gather_wait_s += xs.gather_wait_s;
        }
        peak += zs.param_resident_peak_bytes + zs.grad_live_peak_bytes;
        s->mine[STAT_Z_GATHERS] = (double)zs.gathers;
        s->mine[STAT_Z_WAIT] = zs.gather_wait_s;
        double MiB = 1024.0 * 1024.0,
               parts[4] = {(double)(e->mem_params + zs.param_resident_peak_bytes),
                           (double)(e->mem_grads + zs.grad_live_peak_bytes),
                           (double)e->mem_optimizer, (double)e->mem_activations};
        double sum = 0;
        for (int m = 0; m < 4; m++) {
            s->mine[STAT_MEM + m] = parts[m] / MiB;
            sum += parts[m];
        }
        s->mine[STAT_MEM + 4] = (double)peak > sum ? ((double)peak - sum) / MiB : 0;
        s->mine[STAT_MEM + 5] = (double)peak / MiB;
    }
}

/* RUN_DIR/summary.json, written by rank 0: what a sweep records of a run. */
static int write_summary(const train_summary_run *run, tr_engine *e, const double *stats)
{
    int n = run->ran;
    const char *dir = run->dir;
    double bubble = run->bubble;
    double median = train_median(run->iter_ms, n);
    /* tokens/s: the median of the iterations' own rates, each its tokens over its time (under
     * a ramp-up the early iterations train smaller batches than the final one) */
    double *rate = malloc(((size_t)n + 1) * sizeof *rate), tokens_per_s = -1;
    for (int i = 0; rate && i < n; i++)
        rate[i] = run->iter_ms[i] > 0 ? run->iter_tokens[i] / (run->iter_ms[i] / 1e3) : 0;
    if (rate)
        tokens_per_s = train_median(rate, n);
    free(rate);
    if (median < 0 || tokens_per_s < 0)
        return tr_fail(TR_ERR_NOMEM, "out of memory");
    /* written whole under another name, then renamed: never a partial summary.json */
    FILE *f = train_open_file(dir, "summary.json.tmp", "w");
    if (!f)
        return TR_ERR_IO;
    tr_json j;
    tr_json_begin(&j, f);
    tr_json_object_begin(&j, NULL);
    tr_json_int(&j, "world_size", e->world.size);
    tr_json_int(&j, "data_parallel_size", e->D);
    if (e->CP > 1)
        tr_json_int(&j, "context_parallel_size", e->CP);
    tr_json_int(&j, "tensor_model_parallel_size", e->world.topo.tp);
    tr_json_int(&j, "pipeline_model_parallel_size", e->P);
    tr_json_int(&j, "micro_batches_per_replica", e->M);
    tr_json_int(&j, "iterations", n);
    tr_json_double(&j, "median_ms_per_iter", median);
    tr_json_double(&j, "tokens_per_s", tokens_per_s);
    tr_json_double(&j, "final_loss", run->final_loss);
    /* data-parallel reduction left waiting after backward (not hidden), per iteration */
    tr_json_double(&j, "dp_exposed_ms_per_iter", n > 1 ? 1e3 * run->dp_exposed / (n - 1) : 0);
    tr_json_int(&j, "dp_buckets", tr_dp_num_buckets(e->dp));
    /* rank 0's CPU kernel threads (OMP_NUM_THREADS, Slurm's share, or its cores) */
    tr_json_int(&j, "cpu_threads_per_rank", tr_kernels_cpu_threads());
    if (bubble >= 0)
        tr_json_double(&j, "measured_bubble", bubble);
    else
        tr_json_null(&j, "measured_bubble");
    tr_json_array_begin(&j, "peak_rss_mb_per_rank");
    for (int r = 0; r < e->world.size; r++)
        tr_json_double(&j, NULL, stats[r * N_STATS + STAT_RSS]);
    tr_json_array_end(&j);
    /* forwards whose backward had not run yet, at most at once (1F1B: P - stage) */
    /* the allocator's bytes (MiB) by part; "other": the rest of the peak (communication and
     * generation buffers, the planner's reserve); null where the backend does not count */
    tr_json_array_begin(&j, "memory_mb_per_rank");
    for (int r = 0; r < e->world.size; r++) {
        const double *st = stats + r * N_STATS;
        tr_json_object_begin(&j, NULL);
        for (int m = 0; m < N_MEM; m++)
            if (st[STAT_MEM + N_MEM - 1] > 0)
                tr_json_double(&j, mem_names[m], st[STAT_MEM + m]);
            else
                tr_json_null(&j, mem_names[m]);
        tr_json_object_end(&j);
    }
    tr_json_array_end(&j);
    /* ZeRO (parallel.zero_stage): the last iteration's data-parallel payload bytes by kind
     * and its all-gathers; stage 3's parameter gathers over the run and the seconds spent
     * waiting for them (what prefetch did not hide) */
    tr_json_int(&j, "zero_stage", tr_dp_zero_stage(e->dp));
    tr_json_array_begin(&j, "zero_per_rank");
    for (int r = 0; r < e->world.size; r++) {
        const double *st = stats + r * N_STATS;
        tr_json_object_begin(&j, NULL);
        tr_json_int(&j, "dp_allreduce_bytes_last_iter", (long long)st[STAT_DP_AR]);
        tr_json_int(&j, "dp_reduce_scatter_bytes_last_iter", (long long)st[STAT_DP_RS]);
        tr_json_int(&j, "dp_allgather_bytes_last_iter", (long long)st[STAT_DP_AG]);
        tr_json_int(&j, "dp_allgathers_last_iter", (long long)st[STAT_DP_AG_OPS]);
        tr_json_int(&j, "param_gathers", (long long)st[STAT_Z_GATHERS]);
        tr_json_double(&j, "param_gather_wait_s", st[STAT_Z_WAIT]);
        tr_json_object_end(&j);
    }
    tr_json_array_end(&j);
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
    int rc = train_close_file(f, dir, "summary.json.tmp");
    char tmp[4200], path[4200];
    snprintf(tmp, sizeof tmp, "%s/summary.json.tmp", dir);
    snprintf(path, sizeof path, "%s/summary.json", dir);
    if (rc)
        remove(tmp);
    else if (rename(tmp, path))
        rc = tr_fail(TR_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    return rc;
}

int train_summary_write(train_summary *s, tr_engine *e, const train_summary_run *run)
{
    measure_memory(s, e);
    size_t n = (size_t)e->world.size * N_STATS;
    double *stats = calloc(n, sizeof *stats);
    int rc = stats ? tr_comm_allgather(e->world.world, s->mine, stats, n, TR_COMM_F64)
                   : tr_fail(TR_ERR_NOMEM, "out of memory");
    if (!rc && run->lead)
        rc = write_summary(run, e, stats);
    free(stats);
    return rc;
}

void train_summary_print_operations(const train_summary *s)
{
    const double *m = s->mine;
    printf("trident: the last iteration on rank 0: collectives tp %.0f, dp %.0f, pp %.0f, "
           "embedding %.0f, model-parallel %.0f, world %.0f; pipeline sends + receives "
                   "%.0f\n", m[STAT_COLL + GROUP_TP], m[STAT_COLL + GROUP_DP],
                   m[STAT_COLL + GROUP_PP], m[STAT_COLL + GROUP_EMBED], m[STAT_COLL + GROUP_MP],
                   m[STAT_COLL + GROUP_WORLD], m[STAT_P2P]);
}
