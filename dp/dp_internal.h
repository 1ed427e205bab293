/* dp/ internal: the tr_dp object shared by layout.c, reduce.c, finalize.c and shard.c. */
#ifndef TR_DP_INTERNAL_H
#define TR_DP_INTERNAL_H

#include "dp/dp.h"

typedef struct {
    size_t offset, count;         /* the bucket, elements of the flat buffers */
    size_t own_offset, own_count; /* this rank's block (ZeRO-1) or the whole bucket */
    size_t reported;              /* elements reported in the open window (all micro-batches) */
    int ready;                    /* reported == window's micro-batches * count */
    int started;                  /* reduction started in this window */
    int by_report;                /* started from a report (during backward) */
    int scaled;                   /* reduced and averaged (1/D) in this window */
    tr_comm_request *req;         /* gradient reduction in flight */
    tr_comm_request *gather_req;  /* parameter all-gather in flight (ZeRO-1) */
    double t_start, t_end;
} dp_bucket;

struct tr_dp {
    const tr_kernels *k;
    tr_comm *comm; /* NULL when D == 1 */
    int D, d;
    int overlap, sharded;
    float *grads, *params;
    size_t n;
    tr_dp_range *aligned; /* sorted by offset */
    size_t n_aligned;

    dp_bucket *b;
    int nb;
    tr_dp_shard_range *shard; /* this rank's pieces, increasing offset */
    size_t n_shard, shard_numel;

    /* the accumulation window */
    int open;          /* between tr_dp_start and tr_dp_finish */
    size_t mb;         /* micro-batches of the window */
    int next_start;    /* buckets < next_start have been started, in order */
    int next_unfinished; /* buckets < next_unfinished have been seen complete */
    int hint;          /* bucket of the last report (reports arrive front to back) */
    int warned_partial;

    /* first error inside the hook, returned by tr_dp_finish */
    int err;
    char errmsg[512];

    tr_dp_timing timing;
    float *scratch; /* packing for finalize */
    size_t scratch_cap;
};

/* Keep the first error (code and the thread's message) for tr_dp_finish; returns code. */
int dp_keep_error(tr_dp *dp, int code);
/* Wait for every request still in flight (gradients and parameters), errors ignored. */
void dp_drain(tr_dp *dp);
/* Check [offset, offset + count) lies in the buffer; `what` names the argument. */
int dp_check_range(const tr_dp *dp, size_t offset, size_t count, const char *what, size_t i);

#endif
