/* The run's diagnostics: the timeline of the last iteration (trace.json), the measured
 * pipeline bubble, and the gradient dump of layout tests (see report.h). */
#include "train/report.h"

#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "train/engine_internal.h"

/* Bubble of the traced iteration: idle share of the pipeline stages' time, from rank 0's view
 * of every rank's compute spans (each rank reports busy seconds and its span). */
int train_trace_bubble(tr_engine *e, double *bubble)
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

/* Chrome trace (chrome://tracing, Perfetto): this rank's spans of the last iteration. The
 * schedule's ops and the optimizer step go on the rank's row (tid = rank); data-parallel
 * reductions overlap backward, so they get a row of their own (tid = world + rank). */
static int write_rank_trace(tr_engine *e, const char *dir)
{
    char name[64];
    snprintf(name, sizeof name, "trace.rank%d.json", e->world.rank);
    FILE *f = train_open_file(dir, name, "w");
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
    return train_close_file(f, dir, name);
}

/* Rank 0 merges the per-rank files into trace.json once every rank has written its own. */
static int merge_traces(const char *dir, int world, int dp_rows)
{
    FILE *out = train_open_file(dir, "trace.json", "w");
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
        FILE *in = train_open_file(dir, name, "r");
        if (!in)
            continue;
        char buf[8192];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, in)) > 0 && fwrite(buf, 1, n, out) == n)
            ;
        fclose(in);
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", dir, name);
        remove(path);
    }
    fprintf(out, "{\"name\":\"end\",\"ph\":\"i\",\"pid\":0,\"tid\":0,\"ts\":0,\"s\":\"g\"}\n]}\n");
    return train_close_file(out, dir, "trace.json");
}

int train_trace_write(tr_engine *e, const char *dir)
{
    int rc = write_rank_trace(e, dir);
    int brc = tr_comm_barrier(e->world.world); /* every rank's file is complete */
    if (!rc)
        rc = brc;
    if (!rc && e->world.rank == 0)
        rc = merge_traces(dir, e->world.size, e->D > 1);
    return rc;
}

/* This rank's gradients with what is needed to reassemble whole tensors from shards. */
int train_dump_gradients(tr_engine *e, const char *dir)
{
    int rc = tr_make_dirs(dir);
    if (rc)
        return rc;
    char name[64];
    snprintf(name, sizeof name, "grads.rank%d.bin", e->world.rank);
    FILE *f = train_open_file(dir, name, "wb");
    if (!f)
        return TR_ERR_IO;
    float *host = tr_alloc(e->n_params * sizeof(float), "gradient dump");
    if (!host) {
        fclose(f);
        return TR_ERR_NOMEM;
    }
    e->k->to_host(NULL, host, e->grads, e->n_params * sizeof(float)); /* device memory on GPUs */
    for (int x = 0; x < engine_n_dp(e); x++) { /* ZeRO-2/3: the reduced gradient is the
                                                 * compact shard (each instance's) */
        const tr_dp *dp = engine_dp_at(e, x);
        const float *sg = tr_dp_shard_grads(dp);
        size_t n_own = 0;
        const tr_dp_shard_range *own = tr_dp_shard_ranges(dp, &n_own);
        for (size_t i = 0; sg && i < n_own; i++)
            e->k->to_host(NULL, host + own[i].offset, sg + own[i].shard_offset,
                          own[i].count * sizeof(float));
    }
    size_t n = fwrite(host, sizeof(float), e->n_params, f);
    tr_free(host);
    if ((rc = train_close_file(f, dir, name)))
        return rc;
    if (n != e->n_params)
        return tr_fail(TR_ERR_IO, "short write of %s/%s", dir, name);
    snprintf(name, sizeof name, "grads.rank%d.json", e->world.rank);
    if (!(f = train_open_file(dir, name, "w")))
        return TR_ERR_IO;
    const tr_gpt_shape *s = tr_gpt_get_shape(e->chunks[0].model);
    tr_json j;
    tr_json_begin(&j, f);
    tr_json_object_begin(&j, NULL);
    tr_json_int(&j, "tp_rank", s->tp_rank);
    tr_json_int(&j, "tp_size", s->tp_size);
    tr_json_int(&j, "stage", e->stage);
    tr_json_int(&j, "dp_rank", e->dp_rank);
    /* with ZeRO-1 only this rank's shard of the gradient is reduced (expert parallelism: the
     * experts' instance's shard too) */
    tr_json_array_begin(&j, "owned");
    for (int x = 0; x < engine_n_dp(e); x++) {
        size_t n_owned = 0;
        const tr_dp_shard_range *owned = tr_dp_shard_ranges(engine_dp_at(e, x), &n_owned);
        for (size_t i = 0; i < n_owned; i++) {
            tr_json_array_begin(&j, NULL);
            tr_json_int(&j, NULL, (long long)owned[i].offset);
            tr_json_int(&j, NULL, (long long)owned[i].count);
            tr_json_array_end(&j);
        }
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
    return train_close_file(f, dir, name);
}
