/* Tensor-parallel context and the mappings between replicated, feature-split and
 * sequence-split activations: the only code in tp/ that talks to the communicator. Every
 * collective is ordered before the kernels queued after it (tr_comm_order_after on the
 * default stream), so on GPUs the host never waits for one; tr_tp_flush does. */
#include "tp/tp.h"

#include "core/core.h"

int tr_tp_init(tr_tp *tp, const tr_kernels *k, tr_comm *comm, int sequence_parallel)
{
    if (!tp || !k)
        return tr_fail(TR_ERR_INVALID, "tensor parallel: a context needs a kernel table");
    tp->k = k;
    tp->comm = comm;
    tp->size = comm ? tr_comm_size(comm) : 1;
    tp->rank = comm ? tr_comm_rank(comm) : 0;
    if (tp->size == 1) /* a one-rank group never communicates */
        tp->comm = NULL;
    tp->sequence_parallel = tp->size > 1 && sequence_parallel;
    tp->comm_time = NULL;
    return TR_OK;
}

void tr_tp_comm_time_reset(tr_tp_comm_time *t)
{
    t->seconds = 0;
    t->calls = 0;
}

void tr_tp_rows(const tr_tp *tp, int N, int *first, int *count)
{
    if (!tp->sequence_parallel) {
        *first = 0;
        *count = N;
        return;
    }
    *count = N / tp->size;
    *first = tp->rank * *count;
}

int tr_tp_check_rows(const tr_tp *tp, int N)
{
    if (tp->sequence_parallel && N % tp->size)
        return tr_fail(TR_ERR_INVALID,
                       "sequence parallelism splits the %d token rows of a micro-batch "
                       "(micro_batch_size x seq_length) over %d tensor-parallel ranks, "
                       "which needs them to be divisible",
                       N, tp->size);
    return TR_OK;
}

static int comm_failed(int rc, const char *what)
{
    return tr_fail_context(rc, "tensor-parallel %s", what);
}

/* Timing of one collective: t0 = start(tp) before it, finish(tp, t0, rc) after it. */
static double start(const tr_tp *tp) { return tp->comm_time ? tr_now() : 0.0; }

static int finish(const tr_tp *tp, double t0, int rc)
{
    if (tp->comm_time) {
        tp->comm_time->seconds += tr_now() - t0;
        tp->comm_time->calls++;
    }
    return rc;
}

/* A posted collective ordered before the kernels queued after it on the default stream:
 * the host waits only where the backend needs it to (comm.h, tr_comm_order_after). */
static int ordered(int rc, tr_comm_request **req)
{
    return rc ? rc : tr_comm_order_after(req, NULL);
}

static int allreduce(const tr_tp *tp, const float *in, float *out, size_t n, tr_comm_redop op)
{
    tr_comm_request *req = NULL;
    return ordered(tr_comm_allreduce_async(tp->comm, in, out, n, TR_COMM_F32, op, &req), &req);
}

static int allgather(const tr_tp *tp, const float *in, float *out, size_t n)
{
    tr_comm_request *req = NULL;
    return ordered(tr_comm_allgather_async(tp->comm, in, out, n, TR_COMM_F32, &req), &req);
}

static int reduce_scatter(const tr_tp *tp, const float *in, float *out, size_t n)
{
    tr_comm_request *req = NULL;
    return ordered(tr_comm_reduce_scatter_async(tp->comm, in, out, n, TR_COMM_F32, TR_COMM_SUM,
                                                &req),
                   &req);
}

int tr_tp_flush(const tr_tp *tp)
{
    if (tp->size == 1)
        return TR_OK;
    int rc = tr_comm_flush(tp->comm);
    return rc ? comm_failed(rc, "collectives ordered on the stream") : TR_OK;
}

int tr_tp_allreduce(const tr_tp *tp, float *buf, size_t n, tr_comm_redop op, const char *what)
{
    if (tp->size == 1)
        return TR_OK;
    double t0 = start(tp);
    int rc = finish(tp, t0, allreduce(tp, buf, buf, n, op));
    return rc ? comm_failed(rc, what) : TR_OK;
}

int tr_tp_copy_to_region_backward(const tr_tp *tp, float *grad, size_t n)
{
    if (tp->size == 1)
        return TR_OK;
    return tr_tp_allreduce(tp, grad, n, TR_COMM_SUM,
                           "all-reduce of an input gradient (f backward)");
}

int tr_tp_reduce_from_region_forward(const tr_tp *tp, const float *partial, float *out,
                                     size_t n)
{
    if (tp->size == 1) {
        if (out != partial)
            tp->k->copy(NULL, out, partial, n * sizeof(float));
        return TR_OK;
    }
    double t0 = start(tp);
    int rc = finish(tp, t0, allreduce(tp, partial, out, n, TR_COMM_SUM));
    return rc ? comm_failed(rc, "all-reduce of partial outputs (g forward)") : TR_OK;
}

/* out (N, T*cols) <- in (N, cols) placed at column block `block`; per-row copies. */
static void place_columns(const tr_tp *tp, float *out, const float *in, int N, int cols,
                          int block)
{
    size_t row = (size_t)cols * sizeof(float), wide = (size_t)tp->size * cols;
    for (int n = 0; n < N; n++)
        tp->k->copy(NULL, out + n * wide + (size_t)block * cols, in + (size_t)n * cols, row);
}

int tr_tp_gather_from_region_forward(const tr_tp *tp, float *out, const float *in, int N,
                                     int cols, float *scratch)
{
    size_t local = (size_t)N * cols;
    if (tp->size == 1) {
        if (out != in)
            tp->k->copy(NULL, out, in, local * sizeof(float));
        return TR_OK;
    }
    /* scratch (T, N, cols): rank r's block at r*N*cols */
    double t0 = start(tp);
    int rc = finish(tp, t0, allgather(tp, in, scratch, local * (size_t)tp->size));
    if (rc)
        return comm_failed(rc, "all-gather along the last dimension");
    for (int r = 0; r < tp->size; r++)
        place_columns(tp, out, scratch + (size_t)r * local, N, cols, r);
    return TR_OK;
}

int tr_tp_scatter_to_region_forward(const tr_tp *tp, float *out, const float *in, int N,
                                    int cols)
{
    size_t row = (size_t)cols * sizeof(float), wide = (size_t)tp->size * cols;
    for (int n = 0; n < N; n++)
        tp->k->copy(NULL, out + (size_t)n * cols, in + n * wide + (size_t)tp->rank * cols, row);
    return TR_OK;
}

int tr_tp_gather_from_sequence_region_forward(const tr_tp *tp, const float *local, float *full,
                                              int N, int C)
{
    if (!tp->sequence_parallel) {
        if (full != local)
            tp->k->copy(NULL, full, local, (size_t)N * C * sizeof(float));
        return TR_OK;
    }
    double t0 = start(tp);
    int rc = finish(tp, t0, allgather(tp, local, full, (size_t)N * C));
    return rc ? comm_failed(rc, "all-gather of sequence slices") : TR_OK;
}

int tr_tp_reduce_scatter_to_sequence_region_forward(const tr_tp *tp, float *full, float *local,
                                                    int N, int C)
{
    if (!tp->sequence_parallel)
        return tr_tp_reduce_from_region_forward(tp, full, local, (size_t)N * C);
    double t0 = start(tp);
    int rc = finish(tp, t0, reduce_scatter(tp, full, local, (size_t)N * C));
    return rc ? comm_failed(rc, "reduce-scatter to sequence slices") : TR_OK;
}
