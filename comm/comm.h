/* comm/ — the communicator contract and its front end (comm.c); the backends behind it:
 * ucx/ (host memory, the default), nccl/ (device memory, CUDA builds; comm/nccl/nccl.h); and
 * store/, the TCP rendezvous store both use. The front end checks arguments, keeps counters
 * and chooses the backend of a world from tr_comm_config.backend (data, no environment
 * variable); splits keep their parent's backend.
 *
 * Contract:
 *  - A tr_comm is a group of `size` ranks; this process is `rank` in it. Operations:
 *    allreduce, reduce_scatter, allgather, broadcast, send/recv, barrier, each blocking
 *    (tr_comm_X) or asynchronous (tr_comm_X_async -> a tr_comm_request to test or wait on,
 *    or to order a device stream after: tr_comm_order_after, then tr_comm_flush), and
 *    split(color, key, name) to make subgroups. Collectives are called by every member in
 *    the same order per group; operations on different groups may interleave and be in flight
 *    at once (messages never mix: UCX tags carry group id, per-group sequence number, step;
 *    a split takes its group ids from a job-wide counter in the store, so all members agree
 *    and no two groups share one).
 *  - Buffers are host memory with the UCX backend; the NCCL backend takes device or host
 *    memory (comm/nccl/nccl.h). Any group size (1 included), any count (0 included,
 *    not divisible by the group size too). Buffers of an async operation must stay untouched
 *    until it completes.
 *  - Partition for reduce_scatter/allgather: block r of `count` elements is
 *    tr_comm_block(count, size, r, ...) (the first count % size blocks get one extra element).
 *    In-place: allreduce/broadcast with send == recv; reduce_scatter with
 *    recv == send + block offset of this rank (the other blocks of send become scratch);
 *    allgather with send == recv + block offset of this rank.
 *  - Every blocking wait has a timeout (config timeout_s, the YAML's parallel.comm_timeout_s)
 *    and fails with TR_ERR_TIMEOUT and a message naming the world rank, the group, the
 *    operation and the peer it waits for. After a timeout or transport error the group is
 *    broken: later operations on it fail with TR_ERR_COMM. A dead peer is found by that
 *    timeout (UCX's peer-failure mode would rule out its shared-memory transports); the
 *    launcher stops the job when a rank dies. Results are bit-identical on every member and
 *    from run to run (each element has one fixed reduction order).
 *  - Progress: the thread that waits drives UCX and never busy-spins: after a pass without
 *    progress it yields the CPU (sched_yield) for the first 100 us, then sleeps on UCX's
 *    event descriptor (ucp_worker_arm + poll, 1 ms at most per sleep) until data arrives. With
 *    config progress_thread = 1 a background thread owns progress instead: every UCX call of
 *    the family (a world and all its splits share one UCX worker) happens under one mutex,
 *    async operations advance while the caller computes, and waiters sleep on a condition
 *    variable. Without it, async operations advance only inside tr_comm_test/wait and
 *    blocking calls. A family is used by one application thread at a time. (NCCL backend:
 *    see comm/nccl/nccl.h.)
 *  - Counters per communicator (operations and payload bytes by kind) count only the calls
 *    made by the application, not traffic internal to split/destroy.
 *  - Backends implement tr_comm_ops (a table of function pointers): ucx/ and nccl/ (which
 *    runs a UCX communicator of the same members underneath for host buffers, staging and
 *    splits, through this front end). A backend never calls into another's files.
 *  - UCX: shared memory on one node (sysv/posix + cma), TCP or InfiniBand across nodes, as
 *    UCX picks (UCX_TLS etc. apply); messages below 64 KiB go eager (UCX_RNDV_THRESH unless
 *    set).
 *  - Rendezvous: rank 0 serves a TCP key/value store at MASTER_ADDR:MASTER_PORT; clients
 *    present the job's identity (tr_comm_job_identity) with their rank and world size; keys
 *    <= 1 KiB, values <= 1 MiB; malformed frames close the offending connection only. A
 *    world of several ranks needs an identity; a rank of another identity or world size is
 *    refused, and, while the world is still forming, the job's ranks stop at once naming
 *    it. Ranks publish their UCX worker addresses there (and NCCL communicators their
 *    unique ids). */
#ifndef TR_COMM_H
#define TR_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"

/* ---------------------------------------------------------------- types */

typedef enum { TR_COMM_F32, TR_COMM_F64, TR_COMM_I32, TR_COMM_I64, TR_COMM_NDTYPES } tr_comm_dtype;
typedef enum { TR_COMM_SUM, TR_COMM_MAX, TR_COMM_MIN, TR_COMM_NREDOPS } tr_comm_redop;

/* Operation kinds, for counters and messages. */
typedef enum {
    TR_COMM_OP_ALLREDUCE,
    TR_COMM_OP_REDUCE_SCATTER,
    TR_COMM_OP_ALLGATHER,
    TR_COMM_OP_BROADCAST,
    TR_COMM_OP_SEND,
    TR_COMM_OP_RECV,
    TR_COMM_OP_BARRIER,
    TR_COMM_OP_SPLIT,
    TR_COMM_NOPKINDS
} tr_comm_opkind;

/* Counters of one communicator: calls and payload bytes (count * element size as passed by
 * the caller; allgather counts the gathered total) per kind. */
typedef struct {
    uint64_t ops[TR_COMM_NOPKINDS];
    uint64_t bytes[TR_COMM_NOPKINDS];
} tr_comm_counters;

#define TR_COMM_MAX_NAME 32
#define TR_COMM_TAG_MAX ((1 << 23) - 1) /* user tags of send/recv: 0 .. TR_COMM_TAG_MAX */
#define TR_COMM_COLOR_NONE (-1)         /* split color: this rank joins no subgroup */

/* The backend of a world (its splits keep it). */
typedef enum {
    TR_COMM_BACKEND_UCX = 0, /* host memory (the default) */
    TR_COMM_BACKEND_NCCL,    /* device memory; CUDA builds only (comm/nccl/nccl.h) */
    TR_COMM_NBACKENDS
} tr_comm_backend_kind;

typedef struct {
    double timeout_s;    /* every blocking wait; default 300 (parallel.comm_timeout_s) */
    int progress_thread; /* 1: a background thread drives async operations; default 0 */
    const char *name;    /* the world's name in messages; default "world" */
    tr_comm_backend_kind backend; /* default TR_COMM_BACKEND_UCX; train/ picks NCCL on CUDA */
} tr_comm_config;

/* Algorithm choice (same on every member). Messages of at least ring_min_bytes use the
 * chunked, pipelined ring (chain for broadcast) with chunks of about chunk_bytes, at most
 * ring_window chunks in flight per rank, except allreduces below halving_max_bytes on more
 * than two ranks (recursive halving + doubling); smaller ones use recursive doubling /
 * binomial tree / direct exchange. 0 keeps the current value. */
typedef struct {
    size_t ring_min_bytes;    /* default 64 KiB */
    size_t chunk_bytes;       /* default 256 KiB */
    int ring_window;          /* default 4 */
    size_t halving_max_bytes; /* default 16 MiB */
} tr_comm_tuning;

typedef struct tr_comm tr_comm;
typedef struct tr_comm_request tr_comm_request;
typedef struct tr_store tr_store;

/* ---------------------------------------------------------------- creation */

tr_comm_config tr_comm_config_default(void);

/* Who this rank is and where the store is (launch/'s tr_env_detect() knows how to fill it
 * from torchrun, Open MPI or Slurm variables). */
typedef struct {
    int rank, size;
    const char *master_addr; /* host of rank 0's store; may be NULL only when size == 1 */
    int master_port;
    const char *job_token; /* the job's identity; NULL = "", which only a one-rank world may
                            * have */
    const char *job_identity_source; /* what job_token came from, for messages (no secret:
                                      * "TORCHELASTIC_RUN_ID='x'"); NULL: not said */
} tr_comm_rendezvous;

/* The job's identity from the environment, first found: TRIDENT_JOB_TOKEN (trident launch
 * sets a random one), torchrun's TORCHELASTIC_RUN_ID, Open MPI's PMIX_NAMESPACE /
 * OMPI_MCA_ess_base_jobid / OMPI_MCA_orte_hnp_uri, Slurm's SLURM_JOB_ID + SLURM_STEP_ID
 * ("batch" when unset: a batch script). Writes the token ("" when none is set; values are
 * truncated to fit `cap`, >= 128) and, when source_cap > 0, what it came from, with
 * scheduler ids but never TRIDENT_JOB_TOKEN's value. */
void tr_comm_job_identity(char *token, size_t cap, char *source, size_t source_cap);

/* The world communicator, of backend cfg->backend. Collective over the job: rank 0 starts
 * the store on master_addr:master_port, everyone publishes its UCX worker address there, then
 * a barrier checks connectivity (the NCCL backend then makes its NCCL communicator). A
 * one-rank world with no master_addr needs no store. cfg NULL = defaults. Errors name the
 * rank and, for an unreachable store, MASTER_ADDR:MASTER_PORT; a backend not in this build
 * (NCCL without CUDA) is TR_ERR_CONFIG. */
TR_MUST_CHECK int tr_comm_init(const tr_comm_rendezvous *rv, const tr_comm_config *cfg, tr_comm **out);

/* tr_comm_init() from the launcher's environment: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
 * and the job's identity (tr_comm_job_identity). Without WORLD_SIZE, a one-rank world (a
 * store only if MASTER_ADDR is set). A malformed or missing variable, or several ranks
 * without an identity, is TR_ERR_CONFIG naming it. */
TR_MUST_CHECK int tr_comm_init_world(const tr_comm_config *cfg, tr_comm **out);

/* Subgroups: members of `comm` with the same color form one new communicator, ranked by
 * (key, rank in comm); color TR_COMM_COLOR_NONE gives *out = NULL. Collective over `comm`.
 * `name` ("tp", "dp", ...) appears in messages. */
TR_MUST_CHECK int tr_comm_split(tr_comm *comm, int color, int key, const char *name, tr_comm **out);

/* Local release of a subgroup; for the world (last), a barrier then teardown of the backend
 * and the store. Outstanding requests must have been waited for. NULL is a no-op. */
void tr_comm_destroy(tr_comm *comm);

/* ---------------------------------------------------------------- queries */

int tr_comm_rank(const tr_comm *comm);
int tr_comm_size(const tr_comm *comm);
int tr_comm_world_rank(const tr_comm *comm, int group_rank); /* -1 if out of range */
const char *tr_comm_name(const tr_comm *comm);
const char *tr_comm_backend(const tr_comm *comm); /* "ucx" or "nccl" */
double tr_comm_timeout(const tr_comm *comm);
void tr_comm_set_timeout(tr_comm *comm, double timeout_s);
TR_MUST_CHECK int tr_comm_set_tuning(tr_comm *comm, const tr_comm_tuning *tuning);
void tr_comm_get_counters(const tr_comm *comm, tr_comm_counters *out);
void tr_comm_reset_counters(tr_comm *comm);
size_t tr_comm_dtype_size(tr_comm_dtype dt); /* 0 for an invalid dtype */
const char *tr_comm_opkind_name(tr_comm_opkind kind);

/* Block r of `count` elements split over `size` ranks: [*offset, *offset + *len). */
void tr_comm_block(size_t count, int size, int r, size_t *offset, size_t *len);

/* ---------------------------------------------------------------- operations
 * count is in elements; recv of reduce_scatter holds this rank's block, send of allgather
 * holds this rank's block, recv of allgather all `count` elements. */

TR_MUST_CHECK int tr_comm_allreduce(tr_comm *c, const void *send, void *recv, size_t count, tr_comm_dtype dt,
                      tr_comm_redop op);
TR_MUST_CHECK int tr_comm_reduce_scatter(tr_comm *c, const void *send, void *recv, size_t count,
                           tr_comm_dtype dt, tr_comm_redop op);
TR_MUST_CHECK int tr_comm_allgather(tr_comm *c, const void *send, void *recv, size_t count, tr_comm_dtype dt);
TR_MUST_CHECK int tr_comm_broadcast(tr_comm *c, void *buf, size_t count, tr_comm_dtype dt, int root);
TR_MUST_CHECK int tr_comm_send(tr_comm *c, const void *buf, size_t count, tr_comm_dtype dt, int peer, int tag);
TR_MUST_CHECK int tr_comm_recv(tr_comm *c, void *buf, size_t count, tr_comm_dtype dt, int peer, int tag);
TR_MUST_CHECK int tr_comm_barrier(tr_comm *c);
/* All-to-all with per-peer counts: block r of `send` (send_counts[r] elements, blocks laid
 * end to end in rank order) goes to rank r, which receives it as its block `rank` of `recv`
 * (recv_counts[r] elements from rank r, laid out likewise). The counts must agree pairwise
 * (the caller exchanges them first, e.g. by an allgather); send_counts[rank] ==
 * recv_counts[rank] is checked. Zero counts post nothing. Composed from the async send/recv
 * with tag TR_COMM_TAG_ALLTOALLV (reserved: no other send/recv on c may use it) and a host
 * copy of this rank's own block (so that block must be host memory: UCX; a nonzero own block
 * on another backend is refused). Blocking; no send/recv buffer overlap. */
#define TR_COMM_TAG_ALLTOALLV TR_COMM_TAG_MAX
TR_MUST_CHECK int tr_comm_alltoallv(tr_comm *c, const void *send, const size_t *send_counts,
                                    void *recv, const size_t *recv_counts, tr_comm_dtype dt);

TR_MUST_CHECK int tr_comm_allreduce_async(tr_comm *c, const void *send, void *recv, size_t count,
                            tr_comm_dtype dt, tr_comm_redop op, tr_comm_request **req);
TR_MUST_CHECK int tr_comm_reduce_scatter_async(tr_comm *c, const void *send, void *recv, size_t count,
                                 tr_comm_dtype dt, tr_comm_redop op, tr_comm_request **req);
TR_MUST_CHECK int tr_comm_allgather_async(tr_comm *c, const void *send, void *recv, size_t count,
                            tr_comm_dtype dt, tr_comm_request **req);
TR_MUST_CHECK int tr_comm_broadcast_async(tr_comm *c, void *buf, size_t count, tr_comm_dtype dt, int root,
                            tr_comm_request **req);
TR_MUST_CHECK int tr_comm_send_async(tr_comm *c, const void *buf, size_t count, tr_comm_dtype dt, int peer,
                       int tag, tr_comm_request **req);
TR_MUST_CHECK int tr_comm_recv_async(tr_comm *c, void *buf, size_t count, tr_comm_dtype dt, int peer, int tag,
                       tr_comm_request **req);
TR_MUST_CHECK int tr_comm_barrier_async(tr_comm *c, tr_comm_request **req);

/* Wait (with the communicator's timeout) and release; *req becomes NULL, also on error. */
TR_MUST_CHECK int tr_comm_wait(tr_comm_request **req);
/* Wait for all; returns the first error; every request is released. */
TR_MUST_CHECK int tr_comm_wait_all(tr_comm_request **reqs, size_t n);
/* Non-blocking: *done = 1 and the request released (*req = NULL) once complete. */
TR_MUST_CHECK int tr_comm_test(tr_comm_request **req, int *done);

/* Ordered completion: work queued on `stream` after this call sees the request complete,
 * and the host does not wait where the backend can order streams itself; *req becomes NULL
 * (handed to the communicator, which frees it once complete). `stream` is a stream of the
 * kernel table the buffers belong to (NULL: its default one; with the NCCL backend a
 * cudaStream_t, NULL = the CUDA backend's compute stream, tr_cuda_stream()).
 *  - Host backends (UCX) and the NCCL backend's routes that need host progress (host
 *    buffers, staging, P2P, barrier) wait here, as tr_comm_wait: the same results, and a
 *    failure or timeout is returned by this call.
 *  - NCCL collectives on device buffers (routes NCCL and LOCAL; comm/nccl/nccl.h) return at
 *    once: the stream waits for the operation's completion event. A failure or timeout of
 *    such a request is reported by tr_comm_flush(c) or by the next operation on c (the
 *    group is broken, as after any failure), naming the group and the operation.
 * Buffers must stay untouched by the host until a flush, as for an async operation. */
TR_MUST_CHECK int tr_comm_order_after(tr_comm_request **req, void *stream);
/* Wait (with the communicator's timeout) until every request handed to c by
 * tr_comm_order_after is complete; returns the first failure among them (TR_ERR_TIMEOUT or
 * TR_ERR_COMM, naming the rank, the group and the operation; the same failure again on later
 * flushes, the group being broken). TR_OK at once where nothing is pending (host backends).
 * Call it before the host reads what an ordered request wrote, or blocks on the stream. */
TR_MUST_CHECK int tr_comm_flush(tr_comm *c);

/* ---------------------------------------------------------------- backend table
 * What a backend implements. The front end (comm.c) validates arguments, keeps counters and
 * builds blocking calls from async + wait; `impl` is the backend's per-group state. */
typedef struct tr_comm_ops {
    const char *name;
    int (*allreduce)(tr_comm *c, const void *send, void *recv, size_t count, tr_comm_dtype dt,
                     tr_comm_redop op, void **handle);
    int (*reduce_scatter)(tr_comm *c, const void *send, void *recv, size_t count,
                          tr_comm_dtype dt, tr_comm_redop op, void **handle);
    int (*allgather)(tr_comm *c, const void *send, void *recv, size_t count, tr_comm_dtype dt,
                     void **handle);
    int (*broadcast)(tr_comm *c, void *buf, size_t count, tr_comm_dtype dt, int root,
                     void **handle);
    int (*send)(tr_comm *c, const void *buf, size_t bytes, int peer, int tag, void **handle);
    int (*recv)(tr_comm *c, void *buf, size_t bytes, int peer, int tag, void **handle);
    int (*barrier)(tr_comm *c, void **handle);
    /* *done = 1 when complete (handle freed; returns the operation's status). */
    int (*test)(tr_comm *c, void *handle, int *done);
    /* Waits up to timeout_s; always frees the handle. */
    int (*wait)(tr_comm *c, void *handle, double timeout_s);
    /* tr_comm_order_after (NULL: always wait): *taken = 1 when the backend keeps the handle
     * (it frees it; an error return then is its failure so far), 0 to have it waited for. */
    int (*order_after)(tr_comm *c, void *handle, void *stream, int *taken);
    /* tr_comm_flush (NULL: nothing is ever pending). */
    int (*flush)(tr_comm *c, double timeout_s);
    int (*world_rank)(const tr_comm *c, int group_rank);
    /* Collective; creates *out (NULL for TR_COMM_COLOR_NONE) with its own impl. */
    int (*split)(tr_comm *c, int color, int key, const char *name, tr_comm **out);
    void (*destroy)(tr_comm *c);
    /* The world's rendezvous store and its session (may be NULL: the backend lends none). */
    tr_store *(*store)(const tr_comm *c, const char **session);
} tr_comm_ops;

/* For a backend built on another's communicator (the NCCL backend exchanges its unique ids in
 * its UCX world's store): the world's rendezvous store (owned by the world; NULL for a
 * one-rank world without a store, or a backend that lends none: only ucx/ does) and the
 * session prefix its keys use ("tr/<session>/..."; *session NULL with a NULL store). */
tr_store *tr_comm_store(const tr_comm *comm, const char **session);

/* For backends: make a communicator object around `impl`. */
TR_MUST_CHECK int tr_comm_wrap(const tr_comm_ops *ops, void *impl, int rank, int size, const char *name,
                 double timeout_s, tr_comm **out);
void *tr_comm_impl(const tr_comm *comm);
const tr_comm_tuning *tr_comm_get_tuning(const tr_comm *comm);

/* ---------------------------------------------------------------- rendezvous store */

#define TR_STORE_MAX_KEY 1024
#define TR_STORE_MAX_VALUE (1u << 20)

typedef struct tr_store_server tr_store_server;

/* Serve on bind_host:port (port 0 = any free port; bind_host NULL = all interfaces) in a
 * background thread. Clients must present `token` (NULL = "") and `session` (NULL = ""); a
 * wrong token is rejected for good, a wrong session is told to retry (a store of an earlier
 * communicator generation still shutting down). world_size > 0: the ranks 0..world_size-1
 * are expected; until all have connected, a rank of this world refused for another token,
 * or a client of this token claiming another world size, stops the rendezvous: every waiting
 * and later request fails (TR_ERR_CONFIG at the client) with the reason. 0: no checks. A peer
 * costs at most a few KiB until its token is accepted (1024 such peers at most); every rank
 * of world_size has room for its connection besides. A peer is dropped (and named in the log)
 * when its HELLO has not come 10 s after it connected, or when a request it began has not
 * arrived whole 10 s after its first byte; a rank waiting in a GET or WAIT, or quiet between
 * requests, is never timed. */
TR_MUST_CHECK int tr_store_server_start(const char *bind_host, int port, const char *token,
                          const char *session, int world_size, tr_store_server **out);
int tr_store_server_port(const tr_store_server *s);
void tr_store_server_stop(tr_store_server *s);

/* Connect, retrying until timeout_s while the server is not up yet, as rank `rank` of
 * world_size (-1 and 0: not a rank of the job, e.g. a tool). timeout_s also bounds every
 * later call. Errors name host:port; a refused token or world size, or a stopped rendezvous,
 * is TR_ERR_CONFIG. */
TR_MUST_CHECK int tr_store_connect(const char *host, int port, const char *token, const char *session,
                     int rank, int world_size, double timeout_s, tr_store **out);
TR_MUST_CHECK int tr_store_set(tr_store *st, const char *key, const void *value, size_t len);
/* Waits until the key exists; *value is malloc'ed (free with free()). */
TR_MUST_CHECK int tr_store_get(tr_store *st, const char *key, void **value, size_t *len);
TR_MUST_CHECK int tr_store_add(tr_store *st, const char *key, int64_t delta, int64_t *result);
/* Waits until every key exists (each key up to the store's timeout). */
TR_MUST_CHECK int tr_store_wait(tr_store *st, const char *const *keys, size_t nkeys);
/* Non-blocking existence check. */
TR_MUST_CHECK int tr_store_check(tr_store *st, const char *key, int *exists);
void tr_store_close(tr_store *st);

#endif
