/* Private to comm/ucx/ (not a contract): the UCX backend's structures. Files: comm.c (the
 * tr_comm_ops table, split, the world), engine.c and lifetime.c (the engine), small.c,
 * halving.c, ring.c (the algorithms), reduce.c (elementwise reductions).
 *
 * engine  one per world: UCX context + worker, endpoints by world rank, the list of active
 *         operations, the mutex every UCX call happens under, the optional progress thread,
 *         the store. Shared (refcounted) by the world group and all its splits.
 * group   one per communicator: id (agreed at split through the store), members' world ranks,
 *         per-group operation sequence number.
 * op      one collective or p2p operation: a state machine advanced by ucx_progress_locked();
 *         its transfers (xfer) are tagged UCX sends/receives whose callbacks mark them done.
 *
 * Tag (64 bits): group id (20) | p2p flag (1) | collective: seq (19) step (24)
 *                                             | p2p: source group rank (20) user tag (23). */
#ifndef TR_COMM_UCX_INTERNAL_H
#define TR_COMM_UCX_INTERNAL_H

#include "comm/comm_internal.h"

#include <pthread.h>
#include <ucp/api/ucp.h>

#define UCX_GROUP_BITS 20
#define UCX_MAX_GROUP_ID ((1u << UCX_GROUP_BITS) - 1)
#define UCX_STEP_BITS 24
#define UCX_MAX_STEP ((1u << UCX_STEP_BITS) - 1)

typedef struct ucx_engine ucx_engine;
typedef struct ucx_group ucx_group;
typedef struct ucx_op ucx_op;

enum { XF_IDLE = 0, XF_POSTED = 1, XF_DONE = 2 };

typedef struct {
    void *req;            /* UCX request while posted */
    int state;            /* XF_* */
    ucs_status_t status;  /* completion status */
    size_t expected, got; /* receive length check */
    int peer;             /* group rank */
    int is_send;
    ucx_op *op;
} ucx_xfer;

typedef struct ucx_lane {
    int step;   /* next step to run; == nsteps when finished */
    int posted; /* step's transfers posted */
    int slot;   /* receive slot in scratch while running, else -1 */
    ucx_xfer snd, rcv;
    /* after the step, if red_dst: red_dst = red_a op red_b (red_n elements) */
    uint8_t *red_dst;
    const uint8_t *red_a, *red_b;
    size_t red_n;
} ucx_lane;

struct ucx_op {
    ucx_op *prev, *next; /* engine's active / zombie list */
    ucx_group *g;
    tr_comm_opkind kind;
    uint32_t seq;
    /* Advance without blocking: 1 done, 0 pending, -1 failed (err filled). Engine locked. */
    int (*advance)(ucx_op *op);
    int done, status, listed, zombie;
    char err[640];
    /* arguments */
    const uint8_t *send;
    uint8_t *recv;
    size_t count, es;
    tr_comm_dtype dt;
    tr_comm_redop redop;
    int root, peer, tag;
    /* algorithm state */
    int round, mode, nlanes, nsteps, lanes_left, aux;
    int window, lanes_started, *free_slots, nfree; /* ring: lanes in flight at once */
    /* round-based algorithms: post round k's transfers into x[]; after all completed */
    int (*post_round)(ucx_op *op, int k);
    void (*after_round)(ucx_op *op, int k);
    uint8_t *acc, *tmp;
    uint8_t *scratch;
    size_t chunk_max; /* elements */
    ucx_lane *lanes;
    ucx_xfer *x; /* round-based algorithms: transfer slots */
    int nx;
};

struct ucx_group {
    ucx_engine *eng;
    uint32_t id;
    int rank, size;
    int *world; /* group rank -> world rank */
    uint32_t next_seq;
    int broken;
    char name[TR_COMM_MAX_NAME];
    tr_comm *comm; /* the front-end object */
    int is_world;
};

struct ucx_engine {
    pthread_mutex_t mu;
    pthread_cond_t done_cv, work_cv;
    ucp_context_h ctx;
    ucp_worker_h worker;
    int efd; /* the worker's event descriptor, -1 if none */
    int rank, size;
    ucp_ep_h *eps;
    ucs_status_t *ep_status; /* a peer's failure from the error callback */
    void **addr;             /* peers' worker addresses */
    size_t *addr_len;
    ucx_op *active, *zombies;
    int nactive;
    int use_thread, stop, thread_started;
    pthread_t thread;
    tr_store *store;
    tr_store_server *server;
    char session[64];
    int refs;
    int broken;
    double timeout_s;
    uint32_t local_group_ids; /* group ids when there is no store (one-rank world) */
};

/* ---- engine (engine.c: transfers, progress, waiting; lifetime.c: create/release) */
int ucx_engine_create(ucx_engine **out, int rank, int size, int use_thread, double timeout_s);
void ucx_engine_release(ucx_engine *e);
int ucx_engine_worker_address(ucx_engine *e, void **addr, size_t *len); /* free with ucp_worker_release_address */
/* Submit a prepared op (seq taken from the group); may complete at once. */
int ucx_submit(ucx_op *op);
/* Wait for op with a timeout, then free it (or park it as a zombie). Returns its status. */
int ucx_wait(ucx_op *op, double timeout_s);
/* 1 if done (then op freed and *status set), else 0. */
int ucx_test(ucx_op *op, int *status);
/* One progress pass (engine locked): 1 if anything happened. */
int ucx_progress_locked(ucx_engine *e);
void *ucx_progress_thread(void *engine);
/* Called under the lock by algorithms. */
int ucx_post_send(ucx_op *op, ucx_xfer *x, int peer, uint64_t tag, const void *buf, size_t len);
int ucx_post_recv(ucx_op *op, ucx_xfer *x, int peer, uint64_t tag, void *buf, size_t len);
/* Checks a finished transfer: 0 ok, -1 error (op->err set); frees the UCX request. */
int ucx_xfer_finish(ucx_op *op, ucx_xfer *x);
uint64_t ucx_coll_tag(const ucx_op *op, uint32_t step);
uint64_t ucx_p2p_tag(uint32_t group_id, int src, int tag);
int ucx_op_fail(ucx_op *op, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
ucx_op *ucx_op_new(ucx_group *g, tr_comm_opkind kind, int nx);
void ucx_op_free(ucx_op *op);

/* ---- algorithms (small.c, halving.c, ring.c): fill op->advance and state */
int ucx_setup_allreduce(ucx_op *op, const tr_comm_tuning *t);
int ucx_setup_reduce_scatter(ucx_op *op, const tr_comm_tuning *t);
int ucx_setup_allgather(ucx_op *op, const tr_comm_tuning *t);
int ucx_setup_broadcast(ucx_op *op, const tr_comm_tuning *t);
int ucx_setup_barrier(ucx_op *op);
int ucx_setup_p2p(ucx_op *op, int is_send);
/* the pieces (small.c: latency-bound; ring.c: bandwidth-bound) */
int ucx_setup_rd_allreduce(ucx_op *op, uint8_t *acc, int final_copy);
int ucx_setup_halving_allreduce(ucx_op *op);
/* round-based algorithms: nrounds rounds; post(op, k) posts round k's transfers into x[];
 * after(op, k) runs once they all completed */
void ucx_setup_round_driver(ucx_op *op, int nrounds, int (*post)(ucx_op *, int),
                            void (*after)(ucx_op *, int));
int ucx_setup_ring(ucx_op *op, int mode, const tr_comm_tuning *t);
int ucx_setup_chain_bcast(ucx_op *op, size_t chunk_bytes);
enum { RING_AR_OOP, RING_AR_IP, RING_RS_OOP, RING_RS_IP, RING_AG };

/* ---- reductions (reduce.c): dst = a op b (dst may be a or b), n elements, operand order
 * kept exactly */
void ucx_reduce3(void *dst, const void *a, const void *b, size_t n, tr_comm_dtype dt,
                 tr_comm_redop op);

#endif
