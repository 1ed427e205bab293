/* Schedules as data: the op list of one pipeline stage for gpipe, 1f1b and interleaved 1f1b
 * (see pp.h for the orders). Receives are labelled with the tensor they bring: the n-th
 * recv_forward of a stage brings the input of the n-th forward of that stage that needs one
 * (in the stage's forward order), which is what the previous stage sends n-th. */
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "pp/pp.h"

int tr_pp_kind_parse(const char *name, tr_pp_kind *out)
{
    static const char *names[] = {"1f1b", "gpipe", "interleaved"};
    for (int k = 0; k < 3; k++)
        if (name && !strcmp(name, names[k])) {
            *out = (tr_pp_kind)k;
            return TR_OK;
        }
    return tr_fail(TR_ERR_CONFIG,
                   "unknown pipeline schedule '%s'; allowed: 1f1b (default), gpipe, interleaved",
                   name ? name : "(null)");
}

const char *tr_pp_kind_name(tr_pp_kind kind)
{
    switch (kind) {
    case TR_PP_1F1B: return "1f1b";
    case TR_PP_GPIPE: return "gpipe";
    case TR_PP_INTERLEAVED: return "interleaved";
    }
    return "?";
}

const char *tr_pp_op_kind_name(tr_pp_op_kind kind)
{
    switch (kind) {
    case TR_PP_OP_FORWARD: return "forward";
    case TR_PP_OP_BACKWARD: return "backward";
    case TR_PP_OP_RECV_FORWARD: return "recv_forward";
    case TR_PP_OP_SEND_FORWARD: return "send_forward";
    case TR_PP_OP_RECV_BACKWARD: return "recv_backward";
    case TR_PP_OP_SEND_BACKWARD: return "send_backward";
    }
    return "?";
}

int tr_pp_validate(int P, int M, tr_pp_kind kind, int v)
{
    if (kind != TR_PP_1F1B && kind != TR_PP_GPIPE && kind != TR_PP_INTERLEAVED)
        return tr_fail(TR_ERR_CONFIG, "unknown pipeline schedule kind %d", (int)kind);
    if (P < 1 || P > TR_PP_MAX_STAGES)
        return tr_fail(TR_ERR_CONFIG, "pipeline size must be in 1..%d (got %d)",
                       TR_PP_MAX_STAGES, P);
    if (M < 1)
        return tr_fail(TR_ERR_CONFIG, "number of micro-batches must be >= 1 (got %d)", M);
    if (kind != TR_PP_INTERLEAVED) {
        if (v != 1)
            return tr_fail(TR_ERR_CONFIG,
                           "%d virtual pipeline chunks need the interleaved schedule "
                           "(schedule is %s, which runs 1 chunk per stage)",
                           v, tr_pp_kind_name(kind));
        if (M > TR_PP_MAX_VIRTUAL_MB)
            return tr_fail(TR_ERR_CONFIG, "number of micro-batches %d is above the limit %d", M,
                           TR_PP_MAX_VIRTUAL_MB);
        return TR_OK;
    }
    if (v < 2)
        return tr_fail(TR_ERR_CONFIG,
                       "the interleaved schedule needs >= 2 virtual chunks per stage "
                       "(virtual_pipeline_model_parallel_size, --vpp; got %d)",
                       v);
    if (P < 2)
        return tr_fail(TR_ERR_CONFIG, "the interleaved schedule needs pipeline size >= 2 (got %d)",
                       P);
    if ((long)P * v > TR_PP_MAX_VIRTUAL)
        return tr_fail(TR_ERR_CONFIG,
                       "pipeline size x virtual chunks = %d x %d is above the limit %d", P, v,
                       TR_PP_MAX_VIRTUAL);
    if (M % P)
        return tr_fail(TR_ERR_CONFIG,
                       "the interleaved schedule needs the number of micro-batches (%d) to be a "
                       "multiple of the pipeline size (%d)",
                       M, P);
    if ((long)M * v > TR_PP_MAX_VIRTUAL_MB)
        return tr_fail(TR_ERR_CONFIG,
                       "micro-batches x virtual chunks = %d x %d is above the limit %d", M, v,
                       TR_PP_MAX_VIRTUAL_MB);
    return TR_OK;
}

double tr_pp_bubble_theory(int P, int M, tr_pp_kind kind, int v)
{
    double vm = (kind == TR_PP_INTERLEAVED ? (double)v : 1.0) * M;
    return (P - 1) / (vm + P - 1);
}

/* ---- the builder ---- */

/* One comm batch under construction: at most one op of each comm kind. */
typedef struct {
    int has[4];   /* indexed by kind - TR_PP_OP_RECV_FORWARD */
    int mb[4], chunk[4];
} comm_batch;

typedef struct {
    tr_pp_schedule *s;
    int cap;
    /* interleaved order helpers */
    int P, v, M, r;
    /* labels of the next receives: index into the forward / backward order */
    int next_recv_f, next_recv_b;
} builder;

static void push(builder *b, tr_pp_op_kind kind, int mb, int chunk, int peer, int with_next)
{
    tr_pp_op *op = &b->s->ops[b->s->n_ops++];
    op->kind = kind;
    op->stage = b->r;
    op->mb = mb;
    op->chunk = chunk;
    op->peer = peer;
    op->with_next = with_next;
}

/* Virtual micro-batch k -> (micro-batch, chunk) in the forward / backward order. With v = 1
 * this is (k, 0). Megatron's grouping: P micro-batches per chunk, then the next chunk. */
static int vmb_mb(const builder *b, int k)
{
    int group = b->P * b->v;
    return (k / group) * b->P + k % b->P;
}
static int vmb_chunk(const builder *b, int k, int forward)
{
    int group = b->P * b->v;
    int c = ((k % group + group) % group) / b->P; /* Python-style modulo: k may be negative */
    return forward ? c : b->v - 1 - c;
}
/* Does forward k need a received activation / backward k a received gradient? */
static int needs_input(const builder *b, int k) { return !(b->r == 0 && vmb_chunk(b, k, 1) == 0); }
static int needs_grad(const builder *b, int k)
{
    return !(b->r == b->P - 1 && vmb_chunk(b, k, 0) == b->v - 1);
}

static void add_compute(builder *b, tr_pp_op_kind kind, int k)
{
    push(b, kind, vmb_mb(b, k), vmb_chunk(b, k, kind == TR_PP_OP_FORWARD), -1, 0);
}

/* Add to the batch: the output of forward k / the input gradient of backward k. */
static void batch_send_forward(const builder *b, comm_batch *cb, int k)
{
    if (b->r == b->P - 1 && vmb_chunk(b, k, 1) == b->v - 1)
        return; /* the loss stage sends nothing forward */
    int i = TR_PP_OP_SEND_FORWARD - TR_PP_OP_RECV_FORWARD;
    cb->has[i] = 1;
    cb->mb[i] = vmb_mb(b, k);
    cb->chunk[i] = vmb_chunk(b, k, 1);
}
static void batch_send_backward(const builder *b, comm_batch *cb, int k)
{
    if (b->r == 0 && vmb_chunk(b, k, 0) == 0)
        return; /* the embedding stage sends nothing backward */
    int i = TR_PP_OP_SEND_BACKWARD - TR_PP_OP_RECV_FORWARD;
    cb->has[i] = 1;
    cb->mb[i] = vmb_mb(b, k);
    cb->chunk[i] = vmb_chunk(b, k, 0);
}
/* Receive the next activation / gradient this stage needs (labels in the stage's own order). */
static void batch_recv_forward(builder *b, comm_batch *cb)
{
    int T = b->M * b->v;
    while (b->next_recv_f < T && !needs_input(b, b->next_recv_f))
        b->next_recv_f++;
    if (b->next_recv_f >= T)
        return; /* nothing left to receive: the checker will flag a count mismatch */
    int i = TR_PP_OP_RECV_FORWARD - TR_PP_OP_RECV_FORWARD;
    cb->has[i] = 1;
    cb->mb[i] = vmb_mb(b, b->next_recv_f);
    cb->chunk[i] = vmb_chunk(b, b->next_recv_f, 1);
    b->next_recv_f++;
}
static void batch_recv_backward(builder *b, comm_batch *cb)
{
    int T = b->M * b->v;
    while (b->next_recv_b < T && !needs_grad(b, b->next_recv_b))
        b->next_recv_b++;
    if (b->next_recv_b >= T)
        return;
    int i = TR_PP_OP_RECV_BACKWARD - TR_PP_OP_RECV_FORWARD;
    cb->has[i] = 1;
    cb->mb[i] = vmb_mb(b, b->next_recv_b);
    cb->chunk[i] = vmb_chunk(b, b->next_recv_b, 0);
    b->next_recv_b++;
}

/* Emit a batch in Megatron's order: even stages send_fwd, recv_fwd, send_bwd, recv_bwd; odd
 * stages recv_fwd, send_fwd, recv_bwd, send_bwd. Between two neighbours the upstream side
 * always sends first and the downstream side receives first, on both directions. */
static void flush_batch(builder *b, const comm_batch *cb)
{
    static const tr_pp_op_kind even[4] = {TR_PP_OP_SEND_FORWARD, TR_PP_OP_RECV_FORWARD,
                                          TR_PP_OP_SEND_BACKWARD, TR_PP_OP_RECV_BACKWARD};
    static const tr_pp_op_kind odd[4] = {TR_PP_OP_RECV_FORWARD, TR_PP_OP_SEND_FORWARD,
                                         TR_PP_OP_RECV_BACKWARD, TR_PP_OP_SEND_BACKWARD};
    const tr_pp_op_kind *order = b->r % 2 ? odd : even;
    const int next = (b->r + 1) % b->P, prev = (b->r - 1 + b->P) % b->P;
    int first = b->s->n_ops;
    for (int j = 0; j < 4; j++) {
        int i = order[j] - TR_PP_OP_RECV_FORWARD;
        if (!cb->has[i])
            continue;
        int peer = order[j] == TR_PP_OP_SEND_FORWARD || order[j] == TR_PP_OP_RECV_BACKWARD
                       ? next
                       : prev;
        push(b, order[j], cb->mb[i], cb->chunk[i], peer, 1);
    }
    if (b->s->n_ops > first)
        b->s->ops[b->s->n_ops - 1].with_next = 0;
}

static void build_gpipe(builder *b)
{
    const int M = b->M;
    for (int k = 0; k < M; k++) {
        comm_batch in = {0}, out = {0};
        if (needs_input(b, k))
            batch_recv_forward(b, &in);
        flush_batch(b, &in);
        add_compute(b, TR_PP_OP_FORWARD, k);
        batch_send_forward(b, &out, k);
        flush_batch(b, &out);
    }
    b->s->n_warmup = M;
    /* Backward in reverse micro-batch order: the receive labels run M-1 .. 0. */
    for (int k = M - 1; k >= 0; k--) {
        comm_batch in = {0}, out = {0};
        if (needs_grad(b, k)) {
            int i = TR_PP_OP_RECV_BACKWARD - TR_PP_OP_RECV_FORWARD;
            in.has[i] = 1;
            in.mb[i] = k;
            in.chunk[i] = 0;
        }
        flush_batch(b, &in);
        add_compute(b, TR_PP_OP_BACKWARD, k);
        batch_send_backward(b, &out, k);
        flush_batch(b, &out);
    }
}

/* Megatron's forward_backward_pipelining_without_interleaving. */
static void build_1f1b(builder *b)
{
    const int P = b->P, M = b->M, r = b->r;
    const int warmup = P - r - 1 < M ? P - r - 1 : M;
    const int steady = M - warmup;
    b->s->n_warmup = warmup;
    for (int k = 0; k < warmup; k++) {
        comm_batch in = {0}, out = {0};
        if (needs_input(b, k))
            batch_recv_forward(b, &in);
        flush_batch(b, &in);
        add_compute(b, TR_PP_OP_FORWARD, k);
        batch_send_forward(b, &out, k);
        flush_batch(b, &out);
    }
    if (steady > 0) {
        comm_batch in = {0};
        if (needs_input(b, warmup))
            batch_recv_forward(b, &in);
        flush_batch(b, &in);
    }
    for (int i = 0; i < steady; i++) {
        int fk = warmup + i;
        add_compute(b, TR_PP_OP_FORWARD, fk);
        comm_batch x = {0}; /* send_forward_recv_backward */
        batch_send_forward(b, &x, fk);
        if (needs_grad(b, i))
            batch_recv_backward(b, &x);
        flush_batch(b, &x);
        add_compute(b, TR_PP_OP_BACKWARD, i);
        comm_batch y = {0}; /* send_backward_recv_forward (no recv on the last iteration) */
        batch_send_backward(b, &y, i);
        if (i < steady - 1 && needs_input(b, fk + 1))
            batch_recv_forward(b, &y);
        flush_batch(b, &y);
    }
    for (int k = steady; k < M; k++) {
        comm_batch in = {0}, out = {0};
        if (needs_grad(b, k))
            batch_recv_backward(b, &in);
        flush_batch(b, &in);
        add_compute(b, TR_PP_OP_BACKWARD, k);
        batch_send_backward(b, &out, k);
        flush_batch(b, &out);
    }
}

/* Megatron's forward_backward_pipelining_with_interleaving (training path). */
static void build_interleaved(builder *b)
{
    const int P = b->P, v = b->v, r = b->r;
    const int T = b->M * v;
    int warmup;
    if (b->M == P) {
        warmup = T; /* Megatron: all warm-up when M == P */
    } else {
        warmup = (P - r - 1) * 2 + (v - 1) * P;
        if (warmup > T)
            warmup = T;
    }
    const int steady = T - warmup;
    b->s->n_warmup = warmup;

    comm_batch first = {0};
    if (needs_input(b, 0))
        batch_recv_forward(b, &first);
    flush_batch(b, &first);
    for (int k = 0; k < warmup; k++) {
        add_compute(b, TR_PP_OP_FORWARD, k);
        comm_batch x = {0};
        batch_send_forward(b, &x, k);
        if (k + 1 < T && needs_input(b, k + 1))
            batch_recv_forward(b, &x);
        if (k == warmup - 1 && steady > 0 && needs_grad(b, 0))
            batch_recv_backward(b, &x);
        flush_batch(b, &x);
    }
    for (int i = 0; i < steady; i++) {
        const int fk = warmup + i, bk = i;
        add_compute(b, TR_PP_OP_FORWARD, fk);
        add_compute(b, TR_PP_OP_BACKWARD, bk);
        comm_batch x = {0};
        batch_send_forward(b, &x, fk);
        batch_send_backward(b, &x, bk);
        /* Stage 0 receives what stage P-1 sends now: the output of its forward fk-(P-1),
         * nothing when that is the last chunk. Likewise stage P-1 for gradients. */
        int recv_prev = r == 0 ? vmb_chunk(b, fk - (P - 1), 1) != v - 1 : 1;
        int recv_next = r == P - 1 ? vmb_chunk(b, bk - (P - 1), 0) != 0 : 1;
        if (i == steady - 1)
            recv_prev = 0;
        if (recv_prev)
            batch_recv_forward(b, &x);
        if (recv_next)
            batch_recv_backward(b, &x);
        flush_batch(b, &x);
    }
    if (steady == 0 && needs_grad(b, 0)) {
        comm_batch x = {0};
        batch_recv_backward(b, &x);
        flush_batch(b, &x);
    }
    for (int k = steady; k < T; k++) {
        add_compute(b, TR_PP_OP_BACKWARD, k);
        comm_batch x = {0};
        batch_send_backward(b, &x, k);
        if (k + 1 < T && needs_grad(b, k + 1))
            batch_recv_backward(b, &x);
        flush_batch(b, &x);
    }
}

int tr_pp_schedule_build(int P, int stage, int M, tr_pp_kind kind, int v, tr_pp_schedule *out)
{
    if (!out)
        return tr_fail(TR_ERR_INVALID, "tr_pp_schedule_build: out is NULL");
    memset(out, 0, sizeof *out);
    int rc = tr_pp_validate(P, M, kind, v);
    if (rc)
        return rc;
    if (stage < 0 || stage >= P)
        return tr_fail(TR_ERR_CONFIG, "pipeline stage %d is outside 0..%d", stage, P - 1);
    /* Per virtual micro-batch: F, B and at most 4 comm ops, plus a few batch boundaries. */
    size_t cap = (size_t)6 * (size_t)M * (size_t)v + 8;
    size_t bytes;
    if (tr_mul_size(cap, sizeof(tr_pp_op), &bytes))
        return tr_fail(TR_ERR_CONFIG, "schedule of %d micro-batches is too large", M);
    out->ops = tr_alloc(bytes, "pipeline schedule ops");
    if (!out->ops)
        return TR_ERR_NOMEM;
    out->kind = kind;
    out->P = P;
    out->M = M;
    out->v = v;
    out->stage = stage;
    builder b = {.s = out, .cap = (int)cap, .P = P, .v = v, .M = M, .r = stage};
    switch (kind) {
    case TR_PP_GPIPE: build_gpipe(&b); break;
    case TR_PP_1F1B: build_1f1b(&b); break;
    case TR_PP_INTERLEAVED: build_interleaved(&b); break;
    }
    if (out->n_ops > b.cap) { /* cannot happen: the bound above is loose */
        tr_pp_schedule_free(out);
        return tr_fail(TR_ERR_INTERNAL, "schedule builder overran its op buffer");
    }
    return TR_OK;
}

int tr_pp_schedule_build_all(int P, int M, tr_pp_kind kind, int v, tr_pp_schedule *stages)
{
    int rc = tr_pp_validate(P, M, kind, v);
    if (rc)
        return rc;
    for (int r = 0; r < P; r++) {
        rc = tr_pp_schedule_build(P, r, M, kind, v, &stages[r]);
        if (rc) {
            tr_pp_schedule_free_all(stages, r);
            return rc;
        }
    }
    return TR_OK;
}

void tr_pp_schedule_free(tr_pp_schedule *s)
{
    if (!s)
        return;
    tr_free(s->ops);
    s->ops = NULL;
    s->n_ops = 0;
}

void tr_pp_schedule_free_all(tr_pp_schedule *stages, int P)
{
    for (int r = 0; r < P; r++)
        tr_pp_schedule_free(&stages[r]);
}

int tr_pp_peak_activations(const tr_pp_schedule *s)
{
    int live = 0, peak = 0;
    for (int i = 0; i < s->n_ops; i++) {
        if (s->ops[i].kind == TR_PP_OP_FORWARD && ++live > peak)
            peak = live;
        else if (s->ops[i].kind == TR_PP_OP_BACKWARD)
            live--;
    }
    return peak;
}

int tr_pp_op_label(const tr_pp_op *op, int v, char *buf, size_t n)
{
    static const char *prefix[] = {"F", "B", "recvF", "sendF", "recvB", "sendB"};
    char chunk[16] = "";
    if (v > 1)
        snprintf(chunk, sizeof chunk, ".%d", op->chunk);
    int len;
    if (!tr_pp_op_is_comm(op->kind))
        len = snprintf(buf, n, "%s%d%s", prefix[op->kind], op->mb, chunk);
    else
        len = snprintf(buf, n, "%s%d%s%c%d", prefix[op->kind], op->mb, chunk,
                       tr_pp_op_is_send(op->kind) ? '>' : '<', op->peer);
    return len;
}
