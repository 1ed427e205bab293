/* Private to comm/nccl/ (not a contract): its engine, groups and operations. Files: comm.c
 * (the world, split, destroy, shared helpers), ops.c (posting), progress.c (test/wait, the
 * FIFO, the P2P queue), select.c (mode and route decisions, no CUDA call).
 *
 * engine  one per world, shared (refcounted) by the world and its splits: every rank's GPU
 *         identity, the store, the compute stream, a pool of pinned host buffers, the NCCL
 *         P2P operations queued for the next ncclGroup, the live groups.
 * group   one per communicator: the UCX communicator of the same members (host buffers,
 *         staging, barrier, split), the NCCL communicator (mode NCCL), its own stream, and
 *         a FIFO of collectives waiting to be posted to the UCX communicator in call order
 *         (a staged one waits for its device-to-host copy; later host collectives queue
 *         behind it, so every member posts them in the same order).
 * op      one request: posted, advanced by test/wait through these states
 *           P2P_QUEUED  NCCL send/recv waiting for the next flush (engine list)
 *           FIFO        waiting in the group FIFO (staged: for the copy event `ev`)
 *           D2H         staged send: waiting for its copy to pinned memory (`ev`; engine list,
 *                       posted by any progress call)
 *           HOST        UCX request in flight
 *           EVENT       device work in flight on the group stream; done when `ev` fires
 *                       (ordered: owned by the group's `ordered` list until retired)
 *           DONE        finished (status set) */
#ifndef TR_COMM_NCCL_INTERNAL_H
#define TR_COMM_NCCL_INTERNAL_H

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "comm/comm_internal.h"
#include "comm/nccl/nccl.h"

typedef struct nccl_engine nccl_engine;
typedef struct nccl_op nccl_op;

/* A queue of ops linked through op->next, in call order (P2P, staged sends, a group's FIFO). */
typedef struct {
    nccl_op *head, *tail;
} nccl_op_list;
typedef struct nccl_group nccl_group;

enum { OP_P2P_QUEUED, OP_FIFO, OP_D2H, OP_HOST, OP_EVENT, OP_DONE };

typedef struct {
    void *p;
    size_t bytes;
    int busy;
} nccl_pin;

struct nccl_engine {
    int refs;
    int rank, size;          /* world */
    tr_nccl_device_id *ids;  /* by world rank */
    int force_staged;
    tr_store *store;         /* the UCX world's; NULL in a one-rank world without one */
    char session[64];
    cudaStream_t compute;
    nccl_pin *pins;
    int n_pins;
    nccl_op_list p2p;
    nccl_op_list d2h; /* staged sends waiting for their copy, in call order: the
                                   * engine posts them (a rank waiting on anything else must
                                   * still send, or its peer waits forever) */
    nccl_group **groups;
    int n_groups;
};

struct nccl_group {
    nccl_engine *e;
    tr_comm *comm; /* the front-end object */
    tr_comm *host; /* UCX communicator of the same members, same ranks */
    ncclComm_t nccl;
    tr_nccl_mode mode;
    cudaStream_t stream;
    int rank, size;
    char name[TR_COMM_MAX_NAME];
    char key[160]; /* names this group's store keys: "world", "world.3.1", ... */
    uint32_t next_seq, split_seq;
    int broken;
    nccl_op_list fifo;
    /* ordered requests (tr_comm_order_after) in posting order, and the first failure among
     * them: a message kept for tr_comm_flush and for operations refused afterwards */
    nccl_op_list ordered;
    int ordered_status;
    char ordered_err[640];
};

struct nccl_op {
    nccl_group *g;
    nccl_op *next; /* FIFO or P2P queue */
    tr_comm_opkind kind;
    tr_nccl_route route;
    int state, status, ev_wait; /* ev_wait: the FIFO entry waits for ev */
    uint32_t seq;
    /* arguments (count in elements; P2P: bytes, as int32 words for UCX) */
    const void *send;
    void *recv;
    size_t count, bytes;
    tr_comm_dtype dt;
    tr_comm_redop redop;
    int root, peer, tag;
    /* device side */
    cudaEvent_t ready, ev;
    int ev_recorded;
    /* staging: pinned buffers (b = NULL when in place), the copy back after the transfer */
    void *pin_a, *pin_b;
    void *back_dst;
    const void *back_src;
    size_t back_bytes;
    int leak_pins; /* a failed transfer may still write them */
    tr_comm_request *host_req;
    char err[640];
};

/* ---- comm.c: groups, the world, split, destroy */
extern const tr_comm_ops nccl_ops;
/* Poll the NCCL communicator until it leaves ncclInProgress; on error or past deadline it is
 * aborted, the group broken and op (may be NULL) failed. */
int nccl_settle(nccl_group *g, ncclComm_t comm, double deadline, nccl_op *op, const char *what);
void *nccl_pin_get(nccl_engine *e, size_t bytes);
void nccl_pin_put(nccl_engine *e, void *p);
/* "rank R (group 'G', rank r of n): OP #seq (B bytes) [route]" */
int nccl_op_prefix(const nccl_op *op, char *buf, size_t len);
/* Mark op failed (first failure kept), the group broken; returns -1. */
int nccl_op_fail(nccl_op *op, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Sleep a little while waiting (yield during the first millisecond, then 50 us naps). */
void nccl_pause(double idle_s);

/* ---- ops.c: helpers shared with progress.c */
void nccl_op_free(nccl_op *op);
/* The op's status as the thread's error; frees it. */
int nccl_finish(nccl_op *op);
/* 0 for cudaSuccess; else op failed naming `what`, -1. */
int nccl_cuda_check(nccl_op *op, cudaError_t e, const char *what);
/* Record op->ev on the group stream; state EVENT. */
int nccl_record_done(nccl_op *op);

/* ---- progress.c: the UCX side, the group FIFO, the P2P queue */
/* Post op to the group's UCX communicator (user buffers, or the pinned copies). */
int nccl_post_host(nccl_op *op);
/* Append op (op->next cleared); take op out wherever it stands (nothing if absent). */
void nccl_list_push(nccl_op_list *l, nccl_op *op);
void nccl_list_unlink(nccl_op_list *l, nccl_op *op);
/* Post the FIFO's ready head entries, in order. */
void nccl_pump(nccl_group *g);

/* ---- ops.c / progress.c: the tr_comm_ops entries for operations */
int nccl_allreduce(tr_comm *c, const void *send, void *recv, size_t count, tr_comm_dtype dt,
                   tr_comm_redop op, void **handle);
int nccl_reduce_scatter(tr_comm *c, const void *send, void *recv, size_t count,
                        tr_comm_dtype dt, tr_comm_redop op, void **handle);
int nccl_allgather(tr_comm *c, const void *send, void *recv, size_t count, tr_comm_dtype dt,
                   void **handle);
int nccl_broadcast(tr_comm *c, void *buf, size_t count, tr_comm_dtype dt, int root,
                   void **handle);
int nccl_send(tr_comm *c, const void *buf, size_t bytes, int peer, int tag, void **handle);
int nccl_recv(tr_comm *c, void *buf, size_t bytes, int peer, int tag, void **handle);
int nccl_barrier(tr_comm *c, void **handle);
int nccl_test(tr_comm *c, void *handle, int *done);
int nccl_wait(tr_comm *c, void *handle, double timeout_s);
/* Start queued NCCL P2P and post ready FIFO entries of every group (never blocks). */
void nccl_engine_progress(nccl_engine *e);
/* Wait until the group's FIFO is empty (before a split uses the UCX communicator). */
int nccl_drain_fifo(nccl_group *g, double timeout_s);
/* tr_comm_ops.order_after and .flush (progress.c); nccl_flush_group also serves destroy. */
int nccl_order_after(tr_comm *c, void *handle, void *stream, int *taken);
int nccl_flush(tr_comm *c, double timeout_s);
int nccl_flush_group(nccl_group *g, double timeout_s);
/* Free the group's completed ordered ops (in order); an NCCL error fails them all. */
void nccl_ordered_retire(nccl_group *g);

#endif
