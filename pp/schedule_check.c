/* The checker and event simulation: runs all stages' op lists together (see pp.h).
 *
 * Ops of all stages are numbered globally (g = offset[stage] + index). Static pass: every
 * comm op is checked (peer is a neighbour on the ring, direction and chunk make sense), then
 * sends and receives are paired in FIFO order per ordered pair of stages and each pair must
 * carry the same tensor. Dynamic pass: a worklist of stages; a stage runs compute ops at once
 * (their inputs come only from its own earlier ops, so a missing input is an error, not a
 * wait), posts a comm window (one op, or a whole batch in the batched model) and leaves it
 * when every op in it has completed. A pair completes once both sides are posted (rendezvous)
 * or, buffered, once the send is posted. Nothing left to run while some stage is unfinished
 * is a deadlock. Cost: O(total ops). */
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "pp/pp.h"

typedef struct {
    const tr_pp_schedule *st;
    int P, M, v, B;
    tr_pp_comm_model model;
    long total;
    long *offset;       /* [P+1] */
    int *stage_of;      /* [total]: stage of global op g */
    long *partner;      /* [total]: matched op (comm ops) */
    double *post;       /* [total]: time the op was posted */
    double *done_at;    /* [total]: completion time, < 0 = not done */
    unsigned char *flags; /* [B*M]: per (virtual stage, micro-batch) */
    int *pos, *wend;    /* [P]: next op; end of the posted comm window (== pos: none) */
    double *clock;      /* [P] */
    int *live;          /* [P]: stored activations */
    int *work, n_work;  /* worklist of stages */
    unsigned char *queued;
    double tf1, tb1, p2p;
    const tr_pp_costs *costs;
    tr_pp_sim_result *res;
    double *const *op_start, *const *op_end;
} engine;

enum { F_ACT_IN = 1, F_FWD = 2, F_GRAD_IN = 4, F_BWD = 8 };

static void describe(const engine *e, long g, char *buf, size_t n)
{
    int s = e->stage_of[g];
    const tr_pp_op *op = &e->st[s].ops[g - e->offset[s]];
    if (tr_pp_op_is_comm(op->kind))
        snprintf(buf, n, "stage %d op %ld: %s(mb %d, chunk %d) %s stage %d", s,
                 g - e->offset[s], tr_pp_op_kind_name(op->kind), op->mb, op->chunk,
                 tr_pp_op_is_send(op->kind) ? "to" : "from", op->peer);
    else
        snprintf(buf, n, "stage %d op %ld: %s(mb %d, chunk %d)", s, g - e->offset[s],
                 tr_pp_op_kind_name(op->kind), op->mb, op->chunk);
}

static int fail_at(const engine *e, long g, const char *why)
{
    char d[160];
    describe(e, g, d, sizeof d);
    return tr_fail(TR_ERR_INVALID, "pipeline schedule %s (P=%d, M=%d, v=%d): %s: %s",
                   tr_pp_kind_name(e->st[0].kind), e->P, e->M, e->v, d, why);
}

static const tr_pp_op *op_of(const engine *e, long g, int *stage)
{
    int s = e->stage_of[g];
    if (stage)
        *stage = s;
    return &e->st[s].ops[g - e->offset[s]];
}

/* Virtual stage of the tensor a comm op moves, as seen by the SENDER: a forward send of vs
 * goes to vs+1, a backward send of vs goes to vs-1. For receives, the sender's vs. */
static int sender_vs(const engine *e, const tr_pp_op *op)
{
    int vs = op->chunk * e->P + op->stage;
    switch (op->kind) {
    case TR_PP_OP_RECV_FORWARD: return vs - 1;
    case TR_PP_OP_RECV_BACKWARD: return vs + 1;
    default: return vs;
    }
}

static int check_fields(const engine *e, long g)
{
    int s;
    const tr_pp_op *op = op_of(e, g, &s);
    if (op->stage != s)
        return fail_at(e, g, "op records another stage");
    if (op->mb < 0 || op->mb >= e->M || op->chunk < 0 || op->chunk >= e->v ||
        (int)op->kind < 0 || op->kind > TR_PP_OP_SEND_BACKWARD)
        return fail_at(e, g, "micro-batch, chunk or kind out of range");
    if (!tr_pp_op_is_comm(op->kind))
        return op->peer == -1 ? TR_OK : fail_at(e, g, "compute op with a peer");
    int vs = op->chunk * e->P + s;
    int other; /* the virtual stage at the other end */
    switch (op->kind) {
    case TR_PP_OP_SEND_FORWARD:
    case TR_PP_OP_RECV_BACKWARD: other = vs + 1; break;
    default: other = vs - 1; break;
    }
    if (other < 0 || other >= e->B)
        return fail_at(e, g, "no virtual stage on that side (embedding or loss end)");
    if (op->peer != other % e->P)
        return fail_at(e, g, "peer is not the stage holding the neighbouring virtual stage");
    return TR_OK;
}

/* Pair sends and receives FIFO per ordered pair (src, dst). Channel of (src, dst): 2*src +
 * (dst == src+1 mod P ? 0 : 1); with P = 2 both directions of a pair share channel 0. */
static int pair_ops(engine *e)
{
    const int P = e->P;
    const long nch = 2L * P;
    long *count = tr_alloc(sizeof(long) * (size_t)(4 * nch + 2), "pipeline channels");
    if (!count)
        return TR_ERR_NOMEM;
    long *n_send = count, *n_recv = count + nch, *first_send = count + 2 * nch;
    long *first_recv = count + 3 * nch;
    long *lists = tr_alloc(sizeof(long) * (size_t)(2 * e->total + 2), "pipeline channels");
    if (!lists) {
        tr_free(count);
        return TR_ERR_NOMEM;
    }
    int rc = TR_OK;
    for (int pass = 0; pass < 2 && !rc; pass++) {
        if (pass == 1) { /* prefix sums -> list starts, reuse n_* as fill cursors */
            long at = 0;
            for (long c = 0; c < nch; c++) {
                first_send[c] = at;
                at += n_send[c];
                first_recv[c] = at;
                at += n_recv[c];
                n_send[c] = n_recv[c] = 0;
            }
        }
        for (long g = 0; g < e->total; g++) {
            int s;
            const tr_pp_op *op = op_of(e, g, &s);
            if (!tr_pp_op_is_comm(op->kind))
                continue;
            int send = tr_pp_op_is_send(op->kind);
            int src = send ? s : op->peer, dst = send ? op->peer : s;
            long c = 2L * src + (dst == (src + 1) % P ? 0 : 1);
            if (send) {
                if (pass)
                    lists[first_send[c] + n_send[c]] = g;
                n_send[c]++;
            } else {
                if (pass)
                    lists[first_recv[c] + n_recv[c]] = g;
                n_recv[c]++;
            }
        }
    }
    for (long c = 0; c < nch && !rc; c++) {
        int src = (int)(c / 2), dst = c % 2 ? (src - 1 + P) % P : (src + 1) % P;
        for (long i = 0; i < n_send[c] || i < n_recv[c]; i++) {
            char msg[512], other[160];
            if (i >= n_send[c] || i >= n_recv[c]) {
                long g = i < n_send[c] ? lists[first_send[c] + i] : lists[first_recv[c] + i];
                snprintf(msg, sizeof msg,
                         "stage %d sends %ld tensors to stage %d, which receives %ld; this "
                         "one has no partner",
                         src, n_send[c], dst, n_recv[c]);
                rc = fail_at(e, g, msg);
                break;
            }
            long gs = lists[first_send[c] + i], gr = lists[first_recv[c] + i];
            const tr_pp_op *os = op_of(e, gs, NULL), *orv = op_of(e, gr, NULL);
            int same_dir =
                (os->kind == TR_PP_OP_SEND_FORWARD) == (orv->kind == TR_PP_OP_RECV_FORWARD);
            if (!same_dir || os->mb != orv->mb || sender_vs(e, os) != sender_vs(e, orv)) {
                describe(e, gr, other, sizeof other);
                snprintf(msg, sizeof msg, "send #%ld from stage %d to stage %d is matched "
                         "(FIFO) by %s, which expects another tensor", i, src, dst, other);
                rc = fail_at(e, gs, msg);
                break;
            }
            e->partner[gs] = gr;
            e->partner[gr] = gs;
        }
    }
    tr_free(lists);
    tr_free(count);
    return rc;
}

static void enqueue(engine *e, int s)
{
    if (!e->queued[s]) {
        e->queued[s] = 1;
        e->work[e->n_work++] = s;
    }
}

static int is_posted(const engine *e, long g)
{
    int s;
    op_of(e, g, &s);
    long i = g - e->offset[s];
    return i >= e->pos[s] && i < e->wend[s];
}

static unsigned char *flag(engine *e, int vs, int mb) { return &e->flags[(long)vs * e->M + mb]; }

/* A comm op completed at time t: a receive makes its tensor available. */
static int complete(engine *e, long g, double t)
{
    int s;
    const tr_pp_op *op = op_of(e, g, &s);
    e->done_at[g] = t;
    int vs = op->chunk * e->P + s;
    if (op->kind == TR_PP_OP_RECV_FORWARD || op->kind == TR_PP_OP_RECV_BACKWARD) {
        unsigned char bit = op->kind == TR_PP_OP_RECV_FORWARD ? F_ACT_IN : F_GRAD_IN;
        unsigned char *f = flag(e, vs, op->mb);
        if (*f & bit)
            return fail_at(e, g, "this tensor was already received");
        *f |= bit;
    }
    return TR_OK;
}

static int run_compute(engine *e, int s, long g, const tr_pp_op *op)
{
    int vs = op->chunk * e->P + s;
    unsigned char *f = flag(e, vs, op->mb);
    double t;
    if (op->kind == TR_PP_OP_FORWARD) {
        if (*f & F_FWD)
            return fail_at(e, g, "forward runs twice");
        if (vs > 0 && !(*f & F_ACT_IN))
            return fail_at(e, g, "its input activation has not been received");
        *f |= F_FWD;
        if (++e->live[s] > e->res->peak_activations[s])
            e->res->peak_activations[s] = e->live[s];
        t = e->costs && e->costs->tf_stage ? e->costs->tf_stage[s] : e->tf1;
    } else {
        if (!(*f & F_FWD))
            return fail_at(e, g, "backward before its forward");
        if (*f & F_BWD)
            return fail_at(e, g, "backward runs twice");
        if (vs < e->B - 1 && !(*f & F_GRAD_IN))
            return fail_at(e, g, "its output gradient has not been received");
        *f |= F_BWD;
        e->live[s]--;
        t = e->costs && e->costs->tb_stage ? e->costs->tb_stage[s] : e->tb1;
    }
    long i = g - e->offset[s];
    if (e->op_start)
        e->op_start[s][i] = e->clock[s];
    e->clock[s] += t;
    if (e->op_end)
        e->op_end[s][i] = e->clock[s];
    e->res->busy[s] += t;
    return TR_OK;
}

/* Post the comm window starting at pos[s]. */
static int open_window(engine *e, int s)
{
    const tr_pp_schedule *st = &e->st[s];
    int end = e->pos[s] + 1;
    if (e->model == TR_PP_COMM_BATCHED)
        while (st->ops[end - 1].with_next && end < st->n_ops && tr_pp_op_is_comm(st->ops[end].kind))
            end++;
    e->wend[s] = end;
    for (int i = e->pos[s]; i < end; i++) {
        long g = e->offset[s] + i;
        const tr_pp_op *op = &st->ops[i];
        e->post[g] = e->clock[s];
        if (tr_pp_op_is_send(op->kind)) {
            int vs = op->chunk * e->P + s;
            unsigned char need = op->kind == TR_PP_OP_SEND_FORWARD ? F_FWD : F_BWD;
            if (!(*flag(e, vs, op->mb) & need))
                return fail_at(e, g, "sends a tensor its stage has not computed yet");
            if (e->model == TR_PP_COMM_BUFFERED) {
                e->done_at[g] = e->clock[s];
                enqueue(e, op->peer);
            }
        }
    }
    return TR_OK;
}

/* Advance stage s as far as it can go. */
static int advance(engine *e, int s)
{
    const tr_pp_schedule *st = &e->st[s];
    while (e->pos[s] < st->n_ops) {
        long g = e->offset[s] + e->pos[s];
        const tr_pp_op *op = &st->ops[e->pos[s]];
        if (!tr_pp_op_is_comm(op->kind)) {
            int rc = run_compute(e, s, g, op);
            if (rc)
                return rc;
            e->pos[s]++;
            e->wend[s] = e->pos[s];
            continue;
        }
        if (e->wend[s] == e->pos[s]) {
            int rc = open_window(e, s);
            if (rc)
                return rc;
        }
        int all = 1;
        double t_end = e->clock[s];
        for (int i = e->pos[s]; i < e->wend[s]; i++) {
            long gi = e->offset[s] + i, p = e->partner[gi];
            if (e->done_at[gi] < 0) {
                if (e->model == TR_PP_COMM_BUFFERED) {
                    if (e->done_at[p] >= 0) { /* a receive whose send is posted */
                        double t = e->post[p] + e->p2p;
                        int rc = complete(e, gi, t > e->post[gi] ? t : e->post[gi]);
                        if (rc)
                            return rc;
                    }
                } else if (is_posted(e, p)) {
                    double t = (e->post[gi] > e->post[p] ? e->post[gi] : e->post[p]) + e->p2p;
                    int rc = complete(e, gi, t);
                    if (!rc)
                        rc = complete(e, p, t);
                    if (rc)
                        return rc;
                    enqueue(e, e->st[s].ops[i].peer);
                }
            }
            if (e->done_at[gi] < 0)
                all = 0;
            else if (e->done_at[gi] > t_end)
                t_end = e->done_at[gi];
        }
        if (!all)
            return TR_OK; /* blocked; a peer will wake us */
        for (int i = e->pos[s]; i < e->wend[s]; i++) {
            long gi = e->offset[s] + i;
            if (e->op_start)
                e->op_start[s][i] = e->post[gi];
            if (e->op_end)
                e->op_end[s][i] = e->done_at[gi];
        }
        e->clock[s] = t_end;
        e->pos[s] = e->wend[s];
    }
    return TR_OK;
}

static int report_deadlock(const engine *e)
{
    char msg[1024];
    size_t len = 0;
    int shown = 0;
    for (int s = 0; s < e->P && shown < 6; s++) {
        if (e->pos[s] >= e->st[s].n_ops)
            continue;
        char d[160];
        describe(e, e->offset[s] + e->pos[s], d, sizeof d);
        len += (size_t)snprintf(msg + len, sizeof msg - len, "%s%s", shown ? "; " : "", d);
        if (len >= sizeof msg)
            break;
        shown++;
    }
    return tr_fail(TR_ERR_INVALID,
                   "pipeline schedule %s (P=%d, M=%d, v=%d) deadlocks under %s communication; "
                   "waiting: %s",
                   tr_pp_kind_name(e->st[0].kind), e->P, e->M, e->v,
                   e->model == TR_PP_COMM_RENDEZVOUS ? "rendezvous"
                   : e->model == TR_PP_COMM_BATCHED  ? "batched rendezvous"
                                                     : "buffered",
                   msg);
}

static int final_checks(engine *e)
{
    for (int vs = 0; vs < e->B; vs++)
        for (int mb = 0; mb < e->M; mb++) {
            unsigned char f = *flag(e, vs, mb);
            if ((f & (F_FWD | F_BWD)) != (F_FWD | F_BWD))
                return tr_fail(TR_ERR_INVALID,
                               "pipeline schedule %s (P=%d, M=%d, v=%d): micro-batch %d never "
                               "runs its %s on stage %d chunk %d",
                               tr_pp_kind_name(e->st[0].kind), e->P, e->M, e->v, mb,
                               f & F_FWD ? "backward" : "forward", vs % e->P, vs / e->P);
        }
    return TR_OK;
}

static int run_engine(engine *e)
{
    int rc = TR_OK;
    for (long g = 0; g < e->total && !rc; g++)
        rc = check_fields(e, g);
    if (!rc)
        rc = pair_ops(e);
    if (rc)
        return rc;
    for (int s = e->P - 1; s >= 0; s--)
        enqueue(e, s);
    while (e->n_work > 0) {
        int s = e->work[--e->n_work];
        e->queued[s] = 0;
        rc = advance(e, s);
        if (rc)
            return rc;
    }
    for (int s = 0; s < e->P; s++)
        if (e->pos[s] < e->st[s].n_ops)
            return report_deadlock(e);
    return final_checks(e);
}

int tr_pp_simulate(const tr_pp_schedule *stages, int P, tr_pp_comm_model model,
                   const tr_pp_costs *costs, tr_pp_sim_result *out, double *const *op_start,
                   double *const *op_end)
{
    if (!stages || P < 1 || P > TR_PP_MAX_STAGES)
        return tr_fail(TR_ERR_INVALID, "tr_pp_simulate: need 1..%d stages (got %d)",
                       TR_PP_MAX_STAGES, P);
    const tr_pp_schedule *s0 = &stages[0];
    for (int s = 0; s < P; s++) {
        const tr_pp_schedule *st = &stages[s];
        if (st->P != P || st->M != s0->M || st->v != s0->v || st->kind != s0->kind ||
            st->stage != s || (st->n_ops > 0 && !st->ops) || st->n_ops < 0)
            return tr_fail(TR_ERR_INVALID,
                           "tr_pp_simulate: stage %d's schedule is not stage %d of the same "
                           "pipeline (P=%d, M=%d, v=%d)",
                           s, s, P, s0->M, s0->v);
    }
    if (s0->M < 1 || s0->v < 1 || (long)P * s0->v > TR_PP_MAX_VIRTUAL)
        return tr_fail(TR_ERR_INVALID, "tr_pp_simulate: bad M=%d or v=%d", s0->M, s0->v);
    if (model != TR_PP_COMM_RENDEZVOUS && model != TR_PP_COMM_BATCHED &&
        model != TR_PP_COMM_BUFFERED)
        return tr_fail(TR_ERR_INVALID, "tr_pp_simulate: unknown communication model %d",
                       (int)model);

    tr_pp_sim_result local;
    engine e = {.st = stages, .P = P, .M = s0->M, .v = s0->v, .B = P * s0->v, .model = model,
                .costs = costs, .res = out ? out : &local, .op_start = op_start,
                .op_end = op_end};
    memset(e.res, 0, sizeof *e.res);
    e.tf1 = costs ? costs->tf : 1.0;
    e.tb1 = costs ? costs->tb : 2.0;
    e.p2p = costs ? costs->p2p : 0.0;

    long total = 0;
    for (int s = 0; s < P; s++)
        total += stages[s].n_ops;
    e.total = total;
    size_t n = (size_t)total + 1;
    e.offset = tr_alloc(sizeof(long) * (size_t)(P + 1), "simulation");
    e.partner = tr_alloc(sizeof(long) * n, "simulation");
    e.stage_of = tr_alloc(sizeof(int) * n, "simulation");
    e.post = tr_alloc(sizeof(double) * n, "simulation");
    e.done_at = tr_alloc(sizeof(double) * n, "simulation");
    e.flags = tr_alloc((size_t)e.B * (size_t)e.M, "simulation");
    e.pos = tr_alloc(sizeof(int) * (size_t)P * 3, "simulation");
    e.clock = tr_alloc(sizeof(double) * (size_t)P, "simulation");
    e.work = tr_alloc(sizeof(int) * (size_t)P, "simulation");
    e.queued = tr_alloc((size_t)P, "simulation");
    int rc = TR_OK;
    if (!e.offset || !e.partner || !e.stage_of || !e.post || !e.done_at || !e.flags || !e.pos ||
        !e.clock || !e.work || !e.queued) {
        rc = TR_ERR_NOMEM;
    } else {
        e.wend = e.pos + P;
        e.live = e.pos + 2 * P;
        for (int s = 0; s < P; s++) {
            e.offset[s + 1] = e.offset[s] + stages[s].n_ops;
            for (long g = e.offset[s]; g < e.offset[s + 1]; g++)
                e.stage_of[g] = s;
        }
        for (long g = 0; g < total; g++) {
            e.partner[g] = -1;
            e.done_at[g] = -1.0;
        }
        rc = run_engine(&e);
    }
    if (!rc) {
        double busy = 0, makespan = 0;
        for (int s = 0; s < P; s++) {
            busy += e.res->busy[s];
            if (e.clock[s] > makespan)
                makespan = e.clock[s];
        }
        e.res->makespan = makespan;
        e.res->bubble_fraction = makespan > 0 ? 1.0 - busy / (P * makespan) : 0.0;
        e.res->n_ops = total;
    }
    tr_free(e.offset);
    tr_free(e.partner);
    tr_free(e.stage_of);
    tr_free(e.post);
    tr_free(e.done_at);
    tr_free(e.flags);
    tr_free(e.pos);
    tr_free(e.clock);
    tr_free(e.work);
    tr_free(e.queued);
    return rc;
}

int tr_pp_simulate_kind(int P, int M, tr_pp_kind kind, int v, const tr_pp_costs *costs,
                        tr_pp_sim_result *out)
{
    int rc = tr_pp_validate(P, M, kind, v);
    if (rc)
        return rc;
    tr_pp_schedule *stages = tr_alloc(sizeof *stages * (size_t)P, "pipeline schedules");
    if (!stages)
        return TR_ERR_NOMEM;
    rc = tr_pp_schedule_build_all(P, M, kind, v, stages);
    if (!rc) {
        rc = tr_pp_simulate(stages, P, TR_PP_COMM_BATCHED, costs, out, NULL, NULL);
        tr_pp_schedule_free_all(stages, P);
    }
    tr_free(stages);
    return rc;
}
