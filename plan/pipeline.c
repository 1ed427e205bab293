/* The pipeline's event simulation for the planner: the pp/ op lists of a schedule, paired
 * once (sends and receives in FIFO order per ordered pair of stages, as tr_pp_simulate pairs
 * them) and then run as often as the search needs with per-stage costs, without allocating.
 * Semantics are tr_pp_simulate's batched rendezvous (TR_PP_COMM_BATCHED) or, batched = 0,
 * its rendezvous (TR_PP_COMM_RENDEZVOUS: every send/recv alone and blocking, as DeepSpeed's
 * pipeline engine runs them): a stage runs its compute ops in order; consecutive comm ops
 * joined by with_next are posted together at the stage's clock; a pair completes p2p after
 * both sides are posted; the stage leaves the batch when all its ops have completed. tests/plan/test_plan_pipeline.c checks every op's end time against
 * tr_pp_simulate. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "plan/plan_internal.h"

void plan_pipe_free(plan_pipe *p)
{
    if (!p)
        return;
    free(p->offset);
    free(p->ops);
    free(p->peak);
    free(p->scratch);
    memset(p, 0, sizeof *p);
}

void plan_schedule_peaks(int P, int M, tr_pp_kind kind, int v, int *peaks)
{
    for (int r = 0; r < P; r++) {
        long total = kind == TR_PP_INTERLEAVED ? (long)M * v : M, warmup;
        if (kind == TR_PP_GPIPE)
            warmup = M;
        else if (kind == TR_PP_1F1B)
            warmup = P - r - 1;
        else if (M == P)
            warmup = total; /* Megatron: all warm-up when M == P */
        else
            warmup = (long)(P - r - 1) * 2 + (long)(v - 1) * P;
        if (warmup > total)
            warmup = total;
        peaks[r] = (int)(warmup + (total > warmup ? 1 : 0));
    }
}

/* Slot of the ordered pair (sender a -> receiver q): 2a (q next of a) or 2a+1 (q previous). */
static int pair_slot(int P, int a, int q) { return 2 * a + (q == (a + 1) % P ? 0 : 1); }

static int reserve(plan_pipe *p, long total, int P)
{
    if (P > p->cap_p) {
        long *o = realloc(p->offset, sizeof(long) * ((size_t)P + 1));
        if (o)
            p->offset = o;
        int *pk = o ? realloc(p->peak, sizeof(int) * (size_t)P) : NULL;
        if (pk)
            p->peak = pk;
        if (!o || !pk)
            return tr_fail(TR_ERR_NOMEM, "pipeline simulation: out of memory");
        p->cap_p = P;
        p->cap_ops = -1; /* the scratch holds 4P too: size it again */
    }
    if (total + 1 > p->cap_ops) {
        long cap = total + 1;
        plan_op *ops = realloc(p->ops, sizeof *ops * (size_t)cap);
        if (ops)
            p->ops = ops;
        int *sc = ops ? realloc(p->scratch, sizeof(int) * ((size_t)cap + 4 * (size_t)P + 2))
                      : NULL;
        if (sc)
            p->scratch = sc;
        if (!ops || !sc)
            return tr_fail(TR_ERR_NOMEM, "pipeline simulation: out of memory");
        p->cap_ops = cap;
    }
    return TR_OK;
}

int plan_pipe_build(int P, int M, tr_pp_kind kind, int v, plan_pipe *out)
{
    out->P = P;
    out->M = M;
    out->v = v;
    out->kind = kind;
    out->total = 0;
    tr_pp_schedule *stages = calloc((size_t)P, sizeof *stages);
    if (!stages)
        return tr_fail(TR_ERR_NOMEM, "pipeline simulation: out of memory");
    int rc = tr_pp_schedule_build_all(P, M, kind, v, stages);
    if (rc) {
        free(stages);
        out->P = 0; /* matches no key */
        return rc;
    }
    long total = 0;
    for (int s = 0; s < P; s++)
        total += stages[s].n_ops;
    if (total >= 0x7fffffffL || P > 0x7fff) {
        rc = tr_fail(TR_ERR_CONFIG, "pipeline simulation: %ld operations (P=%d, M=%d) is more "
                     "than the planner simulates", total, P, M);
        goto done;
    }
    if ((rc = reserve(out, total, P)))
        goto done;
    out->offset[0] = 0;
    for (int s = 0; s < P; s++)
        out->offset[s + 1] = out->offset[s] + stages[s].n_ops;
    out->total = total;
    plan_schedule_peaks(P, M, kind, v, out->peak);
    /* FIFO queues of sends per ordered pair of stages (a linked list through `next`), then
     * every receive takes the head of its pair's queue */
    int *next = out->scratch, *head = next + total, *tail = head + 2 * P;
    for (int k = 0; k < 2 * P; k++)
        head[k] = tail[k] = -1;
    for (int s = 0; s < P; s++)
        for (int i = 0; i < stages[s].n_ops; i++) {
            const tr_pp_op *op = &stages[s].ops[i];
            int g = (int)(out->offset[s] + i);
            plan_op *o = &out->ops[g];
            o->kind = (unsigned char)op->kind;
            o->batch = 0;
            o->chunk = (unsigned short)op->chunk;
            o->partner = -1;
            o->peer = o->link = -1;
            if (!tr_pp_op_is_comm(op->kind))
                continue;
            o->peer = (short)op->peer;
            o->link = (short)(op->peer == (s + 1) % P ? s : op->peer);
            if (i == 0 || !tr_pp_op_is_comm(stages[s].ops[i - 1].kind) ||
                !stages[s].ops[i - 1].with_next) { /* a batch starts here */
                int n = 1;
                while (stages[s].ops[i + n - 1].with_next && i + n < stages[s].n_ops &&
                       tr_pp_op_is_comm(stages[s].ops[i + n].kind) && n < 255)
                    n++;
                o->batch = (unsigned char)n;
            }
            if (tr_pp_op_is_send(op->kind)) {
                int k = pair_slot(P, s, op->peer);
                next[g] = -1;
                if (tail[k] < 0)
                    head[k] = g;
                else
                    next[tail[k]] = g;
                tail[k] = g;
            }
        }
    for (int s = 0; s < P && !rc; s++)
        for (int i = 0; i < stages[s].n_ops; i++) {
            const tr_pp_op *op = &stages[s].ops[i];
            if (!tr_pp_op_is_comm(op->kind) || tr_pp_op_is_send(op->kind))
                continue;
            int k = pair_slot(P, op->peer, s), g = (int)(out->offset[s] + i), h = head[k];
            if (h < 0) {
                rc = tr_fail(TR_ERR_INTERNAL, "pipeline simulation: stage %d receives from %d "
                             "more than it is sent", s, op->peer);
                break;
            }
            head[k] = next[h];
            out->ops[g].partner = h;
            out->ops[h].partner = g;
        }
    for (int k = 0; k < 2 * P && !rc; k++)
        if (head[k] >= 0)
            rc = tr_fail(TR_ERR_INTERNAL, "pipeline simulation: a send between stages is never "
                         "received");
done:
    tr_pp_schedule_free_all(stages, P);
    free(stages);
    if (rc)
        out->P = 0;
    return rc;
}

void plan_sim_ws_free(plan_sim_ws *ws)
{
    free(ws->post);
    free(ws->done);
    free(ws->stage);
    memset(ws, 0, sizeof *ws);
}

static int ws_reserve(plan_sim_ws *ws, long total, int P)
{
    if (total > 0 && total + 1 > ws->cap) {
        long cap = total + 1 > 2 * ws->cap ? total + 1 : 2 * ws->cap;
        double *a = realloc(ws->post, sizeof(double) * (size_t)cap);
        if (a)
            ws->post = a;
        double *b = a ? realloc(ws->done, sizeof(double) * (size_t)cap) : NULL;
        if (b)
            ws->done = b;
        if (!a || !b)
            return tr_fail(TR_ERR_NOMEM, "pipeline simulation: out of memory");
        ws->cap = cap;
    }
    if (P > ws->cap_p) {
        /* 5 result arrays + pos, wend, queued, work (as doubles-sized ints) */
        double *st = realloc(ws->stage, sizeof(double) * 9 * (size_t)P);
        if (!st)
            return tr_fail(TR_ERR_NOMEM, "pipeline simulation: out of memory");
        ws->stage = st;
        ws->cap_p = P;
    }
    return TR_OK;
}

int plan_pipe_run(const plan_pipe *p, const double *tf, const double *tb, const double *p2p,
                  int batched, plan_sim_ws *ws, plan_pipe_out *out)
{
    int P = p->P, v = p->v, rc = ws_reserve(ws, p->total, P);
    if (rc)
        return rc;
    double *post = ws->post, *done = ws->done;
    out->end = ws->stage;
    out->end_b = out->end + P;
    out->busy = out->end_b + P;
    out->transfer = out->busy + P;
    out->wait = out->transfer + P;
    int *pos = (int *)(out->wait + P), *wend = pos + P, *work = wend + P,
        *queued = work + P; /* 4 int arrays inside the last 4 x P doubles */
    for (int s = 0; s < P; s++) {
        out->end[s] = out->end_b[s] = out->busy[s] = out->transfer[s] = out->wait[s] = 0;
        pos[s] = wend[s] = 0;
        queued[s] = 1;
        work[s] = P - 1 - s; /* popped from the end: stage 0 first */
    }
    int n_work = P;
    double *clock = out->end;
    const plan_op *ops = p->ops;
    while (n_work > 0) {
        int s = work[--n_work];
        queued[s] = 0;
        const long off = p->offset[s];
        const int n_ops = (int)(p->offset[s + 1] - off);
        const plan_op *so = ops + off;
        const double *tfs = tf + (size_t)s * v, *tbs = tb + (size_t)s * v;
        double *ps = post + off, *ds = done + off;
        /* the stage's state in locals while it runs (the arrays alias nothing it reads) */
        int ps_pos = pos[s], ps_wend = wend[s];
        double c = clock[s], busy_s = out->busy[s], end_b = out->end_b[s];
        double transfer_s = out->transfer[s], wait_s = out->wait[s];
        while (ps_pos < n_ops) {
            const plan_op *op = &so[ps_pos];
            if (op->kind == TR_PP_OP_FORWARD || op->kind == TR_PP_OP_BACKWARD) {
                double t = op->kind == TR_PP_OP_FORWARD ? tfs[op->chunk] : tbs[op->chunk];
                c += t;
                busy_s += t;
                if (op->kind == TR_PP_OP_BACKWARD)
                    end_b = c;
                ps_wend = ++ps_pos;
                continue;
            }
            if (ps_wend == ps_pos) { /* post the batch (one op when not batched) */
                int end = ps_pos + (batched && op->batch ? op->batch : 1);
                ps_wend = end;
                for (int i = ps_pos; i < end; i++) {
                    ps[i] = c;
                    ds[i] = -1.0;
                }
                wend[s] = end; /* peers look at it */
                pos[s] = ps_pos;
            }
            int all = 1;
            double t_end = c, cost_max = 0;
            for (int i = ps_pos; i < ps_wend; i++) {
                double cost = p2p[so[i].link];
                if (cost > cost_max)
                    cost_max = cost;
                if (ds[i] < 0) {
                    long h = so[i].partner;
                    int q = so[i].peer;
                    long j = h - p->offset[q];
                    if (j >= pos[q] && j < wend[q]) { /* the partner is posted */
                        double t = (ps[i] > post[h] ? ps[i] : post[h]) + cost;
                        ds[i] = done[h] = t;
                        if (!queued[q]) {
                            queued[q] = 1;
                            work[n_work++] = q;
                        }
                    }
                }
                if (ds[i] < 0)
                    all = 0;
                else if (ds[i] > t_end)
                    t_end = ds[i];
            }
            if (!all)
                break; /* blocked; the peer wakes us */
            double blocked = t_end - c;
            double transfer = blocked < cost_max ? blocked : cost_max;
            transfer_s += transfer;
            wait_s += blocked - transfer;
            c = t_end;
            ps_pos = ps_wend;
        }
        pos[s] = ps_pos;
        wend[s] = ps_wend;
        clock[s] = c;
        out->busy[s] = busy_s;
        out->end_b[s] = end_b;
        out->transfer[s] = transfer_s;
        out->wait[s] = wait_s;
    }
    double busy = 0, makespan = 0;
    for (int s = 0; s < P; s++) {
        if (pos[s] < p->offset[s + 1] - p->offset[s])
            return tr_fail(TR_ERR_INTERNAL,
                           "pipeline simulation: stage %d stopped at op %d of %ld (P=%d, M=%d, "
                           "%s, v=%d)",
                           s, pos[s], p->offset[s + 1] - p->offset[s], P, p->M,
                           tr_pp_kind_name(p->kind), p->v);
        busy += out->busy[s];
        if (clock[s] > makespan)
            makespan = clock[s];
    }
    out->makespan = makespan;
    out->bubble_fraction = makespan > 0 ? 1.0 - busy / (P * makespan) : 0.0;
    return TR_OK;
}

void plan_ws_free(tr_plan_ws *ws)
{
    if (!ws)
        return;
    for (int i = 0; i < ws->n_pipes; i++)
        plan_pipe_free(&ws->pipes[i]);
    plan_sim_ws_free(&ws->sim);
    free(ws->memo_in);
    free(ws->memo_out);
    memset(ws, 0, sizeof *ws);
}

int plan_ws_pipe(tr_plan_ws *ws, int P, int M, tr_pp_kind kind, int v, const plan_pipe **out)
{
    for (int i = 0; i < ws->n_pipes; i++) {
        const plan_pipe *p = &ws->pipes[i];
        if (p->P == P && p->M == M && p->kind == kind && p->v == v) {
            *out = p;
            return TR_OK;
        }
    }
    int slot = ws->n_pipes < PLAN_PIPE_CACHE ? ws->n_pipes++ : ws->next;
    if (slot == ws->next)
        ws->next = (ws->next + 1) % PLAN_PIPE_CACHE;
    int rc = plan_pipe_build(P, M, kind, v, &ws->pipes[slot]); /* reuses its buffers */
    if (rc)
        return rc; /* the slot's P is 0: it matches no later request */
    *out = &ws->pipes[slot];
    return TR_OK;
}

/* Micro-batches simulated: all of them up to PLAN_SIM_BUDGET stage x chunk x micro-batch
 * units; beyond, m1 = max(8P, BUDGET / (P v)) (a multiple of the period q) and m1 + q, and
 * the difference (one period of the steady state: q = 1, interleaved P) is extended to M. */
static void sim_sizes(int P, int M, tr_pp_kind kind, int v, int *m1, int *q)
{
    *q = kind == TR_PP_INTERLEAVED ? P : 1;
    *m1 = M;
    if ((long)P * M * v <= PLAN_SIM_BUDGET)
        return;
    long cap = PLAN_SIM_BUDGET / ((long)P * v);
    if (cap < 8L * P)
        cap = 8L * P;
    cap = (cap + *q - 1) / *q * *q;
    if (M > cap + *q)
        *m1 = (int)cap;
}

static int same_inputs(const tr_plan_ws *ws, int P, int M, tr_pp_kind kind, int v,
                       const double *tf, const double *tb, const double *p2p, int batched)
{
    if (!ws->memo_valid || ws->memo_P != P || ws->memo_M != M || ws->memo_kind != kind ||
        ws->memo_v != v || ws->memo_batched != batched)
        return 0;
    size_t n = sizeof(double) * (size_t)(P * v);
    return !memcmp(ws->memo_in, tf, n) && !memcmp(ws->memo_in + P * v, tb, n) &&
           !memcmp(ws->memo_in + 2 * P * v, p2p, sizeof(double) * (size_t)P);
}

int plan_ws_simulate(tr_plan_ws *ws, int P, int M, tr_pp_kind kind, int v, const double *tf,
                     const double *tb, const double *p2p, int batched, plan_pipe_out *out)
{
    size_t n = 5 * (size_t)P;
    if (same_inputs(ws, P, M, kind, v, tf, tb, p2p, batched)) {
        int rc = ws_reserve(&ws->sim, 0, P);
        if (rc)
            return rc;
        out->end = ws->sim.stage;
        out->end_b = out->end + P;
        out->busy = out->end_b + P;
        out->transfer = out->busy + P;
        out->wait = out->transfer + P;
        memcpy(out->end, ws->memo_out, sizeof(double) * n);
        out->makespan = ws->memo_out[n];
        out->bubble_fraction = ws->memo_out[n + 1];
        return TR_OK;
    }
    ws->memo_valid = 0;
    int m1, q;
    sim_sizes(P, M, kind, v, &m1, &q);
    const plan_pipe *p = NULL;
    int rc = plan_ws_pipe(ws, P, m1, kind, v, &p);
    if (!rc)
        rc = plan_pipe_run(p, tf, tb, p2p, batched, &ws->sim, out);
    if (rc)
        return rc;
    if (m1 < M) { /* extend the last period of the steady state to M */
        double x[5 * TR_PP_MAX_STAGES + 1];
        memcpy(x, out->end, sizeof(double) * n);
        x[n] = out->makespan;
        if ((rc = plan_ws_pipe(ws, P, m1 + q, kind, v, &p)) ||
            (rc = plan_pipe_run(p, tf, tb, p2p, batched, &ws->sim, out)))
            return rc;
        double k = (double)(M - m1) / q, busy = 0;
        for (size_t i = 0; i < n; i++)
            out->end[i] = x[i] + k * (out->end[i] - x[i]);
        out->makespan = x[n] + k * (out->makespan - x[n]);
        for (int st = 0; st < P; st++)
            busy += out->busy[st];
        out->bubble_fraction = out->makespan > 0 ? 1.0 - busy / (P * out->makespan) : 0.0;
    }
    if (P * (2 * v + 1) > ws->memo_cap) {
        double *in = realloc(ws->memo_in, sizeof(double) * (size_t)(P * (2 * v + 1)));
        if (in)
            ws->memo_in = in;
        double *o = in ? realloc(ws->memo_out, sizeof(double) * (5 * (size_t)P + 2)) : NULL;
        if (o)
            ws->memo_out = o;
        if (!in || !o)
            return TR_OK; /* no memo: the next call simulates again */
        ws->memo_cap = P * (2 * v + 1);
    }
    memcpy(ws->memo_in, tf, sizeof(double) * (size_t)(P * v));
    memcpy(ws->memo_in + P * v, tb, sizeof(double) * (size_t)(P * v));
    memcpy(ws->memo_in + 2 * P * v, p2p, sizeof(double) * (size_t)P);
    memcpy(ws->memo_out, out->end, sizeof(double) * n);
    ws->memo_out[n] = out->makespan;
    ws->memo_out[n + 1] = out->bubble_fraction;
    ws->memo_P = P;
    ws->memo_M = M;
    ws->memo_kind = kind;
    ws->memo_v = v;
    ws->memo_batched = batched;
    ws->memo_valid = 1;
    return TR_OK;
}
