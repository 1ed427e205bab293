/* The schedule runner: compute ops through the stage's callbacks, communication ops as
 * batches of asynchronous send/recv on the pipeline communicator. */
#include "pp/runner.h"

#include <stdlib.h>

#include "core/core.h"

static void trace_push(tr_pp_trace *t, tr_pp_span span)
{
    if (!t)
        return;
    if (t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 256;
        tr_pp_span *s = realloc(t->spans, (size_t)cap * sizeof *s);
        if (!s)
            return; /* tracing is best effort */
        t->spans = s;
        t->cap = cap;
    }
    t->spans[t->n++] = span;
}

static void trace_add(tr_pp_trace *t, tr_pp_op_kind kind, int mb, int chunk, double start,
                      double end)
{
    trace_push(t, (tr_pp_span){TR_PP_SPAN_OP, kind, mb, chunk, start, end});
}

void tr_pp_trace_add(tr_pp_trace *t, tr_pp_span_what what, int index, double start, double end)
{
    trace_push(t, (tr_pp_span){what, TR_PP_OP_FORWARD, index, 0, start, end});
}

void tr_pp_trace_clear(tr_pp_trace *t) { t->n = 0; }

void tr_pp_trace_free(tr_pp_trace *t)
{
    free(t->spans);
    t->spans = NULL;
    t->n = t->cap = 0;
}

/* Tag of a boundary tensor: unique per (micro-batch, chunk, direction) within an iteration. */
static int p2p_tag(const tr_pp_schedule *s, const tr_pp_op *op, int peer_chunk)
{
    int forward = op->kind == TR_PP_OP_SEND_FORWARD || op->kind == TR_PP_OP_RECV_FORWARD;
    (void)s;
    return (int)(((long)op->mb * TR_PP_MAX_VIRTUAL + peer_chunk) * 2 + forward) % (TR_COMM_TAG_MAX + 1);
}

/* The virtual stage a message belongs to is the SENDER's (mb, chunk): a send carries its own
 * chunk; a receive names the receiver's chunk, so translate to the sender's. */
static int sender_chunk(const tr_pp_schedule *s, const tr_pp_op *op)
{
    int P = s->P;
    int vs = op->chunk * P + op->stage;
    switch (op->kind) {
    case TR_PP_OP_RECV_FORWARD: vs -= 1; break;  /* from the previous virtual stage */
    case TR_PP_OP_RECV_BACKWARD: vs += 1; break; /* from the next virtual stage */
    default: break;
    }
    return vs / P;
}

typedef struct {
    tr_comm_request **sends;
    int n_sends, cap_sends;
} pending_sends;

static int wait_sends(pending_sends *p)
{
    int rc = tr_comm_wait_all(p->sends, (size_t)p->n_sends);
    p->n_sends = 0;
    return rc;
}

int tr_pp_run(const tr_pp_schedule *s, tr_comm *pp_comm, const tr_pp_stage_ops *ops,
              tr_pp_trace *trace)
{
    int M = s->M, v = s->v, rc = TR_OK;
    if (s->P > 1 && !pp_comm)
        return tr_fail(TR_ERR_INVALID, "pipeline of %d stages without a communicator", s->P);
    /* tensors produced here, kept for their sends: [mb * v + chunk] */
    const float **outputs = calloc((size_t)M * v, sizeof *outputs);
    const float **input_grads = calloc((size_t)M * v, sizeof *input_grads);
    int last_backward = -1;
    for (int i = 0; i < s->n_ops; i++)
        if (s->ops[i].kind == TR_PP_OP_BACKWARD)
            last_backward = i;
    pending_sends pend = {0};
    pend.cap_sends = s->n_ops;
    pend.sends = calloc((size_t)pend.cap_sends + 1, sizeof *pend.sends);
    tr_comm_request **recvs = calloc((size_t)s->n_ops + 1, sizeof *recvs);
    if (!outputs || !input_grads || !pend.sends || !recvs) {
        rc = tr_fail(TR_ERR_NOMEM, "out of memory for the pipeline runner");
        goto done;
    }
    for (int i = 0; i < s->n_ops && !rc; i++) {
        const tr_pp_op *op = &s->ops[i];
        double start = tr_now();
        if (op->kind == TR_PP_OP_FORWARD) {
            rc = ops->forward(ops->ctx, op->mb, op->chunk, &outputs[op->mb * v + op->chunk]);
            trace_add(trace, op->kind, op->mb, op->chunk, start, tr_now());
            continue;
        }
        if (op->kind == TR_PP_OP_BACKWARD) {
            rc = wait_sends(&pend);
            if (!rc)
                rc = ops->backward(ops->ctx, op->mb, op->chunk, i == last_backward,
                                   &input_grads[op->mb * v + op->chunk]);
            trace_add(trace, op->kind, op->mb, op->chunk, start, tr_now());
            continue;
        }
        /* a batch of communication ops: post all, then wait for its receives */
        int n_recvs = 0, first = i;
        for (;; i++) {
            op = &s->ops[i];
            int tag = p2p_tag(s, op, sender_chunk(s, op));
            tr_comm_request *req = NULL;
            switch (op->kind) {
            case TR_PP_OP_SEND_FORWARD:
            case TR_PP_OP_SEND_BACKWARD: {
                const float *buf = op->kind == TR_PP_OP_SEND_FORWARD
                                       ? outputs[op->mb * v + op->chunk]
                                       : input_grads[op->mb * v + op->chunk];
                if (!buf) {
                    rc = tr_fail(TR_ERR_INTERNAL, "stage %d: %s of micro-batch %d before its tensor exists",
                                 s->stage, tr_pp_op_kind_name(op->kind), op->mb);
                    break;
                }
                rc = tr_comm_send_async(pp_comm, buf, ops->numel, TR_COMM_F32, op->peer, tag, &req);
                if (!rc)
                    pend.sends[pend.n_sends++] = req;
                break;
            }
            case TR_PP_OP_RECV_FORWARD:
            case TR_PP_OP_RECV_BACKWARD: {
                float *buf = op->kind == TR_PP_OP_RECV_FORWARD
                                 ? ops->input_buffer(ops->ctx, op->mb, op->chunk)
                                 : ops->output_grad_buffer(ops->ctx, op->mb, op->chunk);
                if (!buf) {
                    rc = tr_fail(TR_ERR_INTERNAL, "stage %d: no buffer for %s of micro-batch %d",
                                 s->stage, tr_pp_op_kind_name(op->kind), op->mb);
                    break;
                }
                rc = tr_comm_recv_async(pp_comm, buf, ops->numel, TR_COMM_F32, op->peer, tag, &req);
                if (!rc)
                    recvs[n_recvs++] = req;
                break;
            }
            default:
                rc = tr_fail(TR_ERR_INTERNAL, "unexpected op in a communication batch");
            }
            if (rc || !op->with_next || i + 1 >= s->n_ops)
                break;
        }
        int wrc = tr_comm_wait_all(recvs, (size_t)n_recvs);
        if (!rc)
            rc = wrc;
        if (rc)
            tr_fail_context(rc, "pipeline stage %d, op %d (%s, micro-batch %d)", s->stage, i,
                            tr_pp_op_kind_name(op->kind), op->mb);
        trace_add(trace, s->ops[first].kind, s->ops[first].mb, s->ops[first].chunk, start, tr_now());
    }
    {
        int wrc = wait_sends(&pend);
        if (!rc)
            rc = wrc;
    }
done:
    free(outputs);
    free(input_grads);
    free(pend.sends);
    free(recvs);
    return rc;
}
