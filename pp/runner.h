/* pp/ runner — executes one stage's schedule (pp/pp.h) over the pipeline communicator.
 *
 * Contract:
 *  - The runner does not know the model: the stage is a table of callbacks. forward(mb,
 *    chunk) reads its input from input_buffer(mb, chunk) (filled by recv_forward; not used on
 *    the first virtual stage) and returns the tensor to send on; backward(mb, chunk) reads the
 *    output gradient from output_grad_buffer(mb, chunk) (filled by recv_backward; not used on
 *    the last virtual stage) and returns the input gradient to send back. Every boundary
 *    tensor has `numel` floats.
 *  - Communication ops chained by with_next are posted together (asynchronous send/recv on
 *    the PP communicator, peer = stage index = rank in that communicator) and the receives of
 *    the batch are waited for before the next compute op. Sends stay in flight while the
 *    stage computes; they are completed before the next backward (which may overwrite an
 *    input-gradient buffer under send) and before tr_pp_run returns.
 *  - A forward's output must stay valid until that micro-batch's backward (the stage keeps
 *    activations until then anyway). is_last_backward is 1 on the stage's final backward of
 *    the iteration (where data-parallel reductions are released).
 *  - With a trace, every op is recorded as a span (start, end in seconds of tr_now()); the
 *    caller may add spans of its own around the schedule (optimizer step, data-parallel
 *    reductions) with tr_pp_trace_add. */
#ifndef TR_PP_RUNNER_H
#define TR_PP_RUNNER_H

#include "comm/comm.h"
#include "pp/pp.h"

typedef struct {
    void *ctx;
    size_t numel;
    float *(*input_buffer)(void *ctx, int mb, int chunk);
    float *(*output_grad_buffer)(void *ctx, int mb, int chunk);
    int (*forward)(void *ctx, int mb, int chunk, const float **output);
    int (*backward)(void *ctx, int mb, int chunk, int is_last_backward, const float **input_grad);
} tr_pp_stage_ops;

/* What a span is: a schedule op, or one of the caller's spans. */
typedef enum {
    TR_PP_SPAN_OP,          /* a schedule op: kind, mb, chunk */
    TR_PP_SPAN_OPTIMIZER,   /* the optimizer step (norm, clipping, AdamW, parameter gather) */
    TR_PP_SPAN_GRAD_REDUCE, /* one data-parallel gradient bucket, start to observed end; mb = bucket */
    TR_PP_SPAN_GRAD_WAIT,   /* waiting for the reductions after backward (exposed time) */
} tr_pp_span_what;

typedef struct {
    tr_pp_span_what what;
    tr_pp_op_kind kind; /* TR_PP_SPAN_OP: comm spans use the kind of the batch's first op */
    int mb, chunk;
    double start, end;
} tr_pp_span;

typedef struct {
    tr_pp_span *spans;
    int n, cap;
} tr_pp_trace;

/* Run the schedule of this stage. pp_comm may be NULL only when P == 1. */
TR_MUST_CHECK int tr_pp_run(const tr_pp_schedule *s, tr_comm *pp_comm, const tr_pp_stage_ops *ops,
              tr_pp_trace *trace);
/* Record a caller's span (what != TR_PP_SPAN_OP; index goes to mb). NULL trace: no-op;
 * tracing is best effort (a span that cannot be stored is dropped). */
void tr_pp_trace_add(tr_pp_trace *t, tr_pp_span_what what, int index, double start, double end);
void tr_pp_trace_clear(tr_pp_trace *t);
void tr_pp_trace_free(tr_pp_trace *t);

#endif
