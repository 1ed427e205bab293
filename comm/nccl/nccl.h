/* comm/nccl/ — the NCCL backend of the communicator contract (comm.h), built with CUDA.
 *
 * Contract (what differs from or adds to comm.h):
 *  - tr_comm_init with cfg->backend = TR_COMM_BACKEND_NCCL makes the world: a UCX world first
 *    (tr_comm_init with TR_COMM_BACKEND_UCX: the store, the host transport), then each rank's
 *    GPU identity (UUID, PCI bus id, host) is all-gathered over it and the world's mode
 *    decided (tr_nccl_group_mode):
 *      NCCL    every member on its own GPU: one NCCL communicator, its unique id shared
 *              through the rendezvous store ("tr/<session>/nccl/<group>/uid"); subgroups
 *              come from ncclCommSplit.
 *      STAGED  some members share a GPU (several ranks tested on one GPU; NCCL refuses
 *              duplicate devices): device buffers go device -> pinned host -> UCX
 *              collective -> host -> device. A subgroup whose members are on distinct GPUs
 *              gets its own NCCL communicator (unique id through the store).
 *      LOCAL   a group of one: device copies only.
 *    TRIDENT_NCCL_STAGE=1 forces STAGED for every group of more than one rank.
 *  - Buffers may be device memory (cudaMalloc'ed or managed) or host memory; each operation
 *    routes by where its buffers live (tr_nccl_choose_route): device -> the group's mode,
 *    host -> the UCX communicator of the same group (so host-side reductions of scalars keep
 *    working). Both buffers of one operation must live in the same place, and every member
 *    must pass the same kind.
 *  - Ordering: device operations run on the group's own stream, after the work already
 *    queued on the compute stream (tr_cuda_stream(); an event recorded at posting); when a
 *    request completes (test/wait), the compute stream is made to wait for it, so kernels
 *    queued afterwards see the result. Buffers must stay untouched until completion, as in
 *    comm.h.
 *  - Ordered requests (tr_comm_order_after; tr_nccl_route_ordered): the given stream waits
 *    for the op's completion event and the op joins its group's ordered list, which every
 *    progress call (any post, test or wait on the world's groups) retires in order
 *    (cudaEventQuery); a failed one breaks the group and its message is kept: returned by
 *    tr_comm_flush, which waits for the list with the timeout and NCCL error checks of a
 *    wait (aborting the NCCL communicator on timeout, which releases the stream), and quoted
 *    by the operations refused on the broken group afterwards. Destroy flushes first.
 *  - NCCL P2P matches messages in posting order per peer (tags are checked by the front end
 *    but not used for matching); sends and receives are queued and started together (one
 *    ncclGroup) at the next test/wait or collective, so a pipeline's batch of sends and
 *    receives cannot deadlock. Staged P2P goes over UCX with tags.
 *  - Timeouts: every wait polls the request and ncclCommGetAsyncError(); past the
 *    communicator's timeout the NCCL communicator is aborted (ncclCommAbort) and the wait
 *    fails with TR_ERR_TIMEOUT: "rank R (group 'G', rank r of n): OP #seq (B bytes) [nccl]:
 *    timed out after T s ...", naming the peer for P2P and staged operations. An NCCL error
 *    fails with TR_ERR_COMM and NCCL's own message. Afterwards the group is broken, as in
 *    comm.h. Communicators are created non-blocking, so creation and splits are bounded by
 *    the same timeout. */
#ifndef TR_COMM_NCCL_H
#define TR_COMM_NCCL_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"

typedef enum {
    TR_NCCL_MODE_LOCAL = 0,
    TR_NCCL_MODE_NCCL = 1,
    TR_NCCL_MODE_STAGED = 2,
} tr_nccl_mode;

typedef enum {
    TR_NCCL_ROUTE_HOST = 0,   /* host buffers: the group's UCX communicator */
    TR_NCCL_ROUTE_NCCL = 1,   /* device buffers, NCCL */
    TR_NCCL_ROUTE_STAGED = 2, /* device buffers through pinned host memory and UCX */
    TR_NCCL_ROUTE_LOCAL = 3,  /* device buffers, a group of one: copies */
} tr_nccl_route;

typedef enum { TR_NCCL_MEM_NONE = 0, TR_NCCL_MEM_HOST = 1, TR_NCCL_MEM_DEVICE = 2 } tr_nccl_memkind;

/* A GPU as the ranks compare it (fixed size: it is all-gathered as 32-bit words). */
typedef struct {
    uint8_t uuid[16];  /* cudaDeviceProp.uuid; all zero when unknown */
    char bus_id[32];   /* "0000:41:00.0" (cudaDeviceGetPCIBusId) */
    char host[80];     /* gethostname */
} tr_nccl_device_id;

/* ---- pure (no CUDA, no NCCL): tested on any machine */

/* Mode of a group whose members (in group rank order) are on these GPUs: LOCAL for one
 * member, STAGED when two members are on the same GPU (same UUID; same host and bus id when
 * a UUID is unknown) or force_staged, else NCCL. why (may be NULL) says why in words, e.g.
 * "ranks 0 and 3 share GPU 0000:41:00.0 on node7: staging through host memory". */
tr_nccl_mode tr_nccl_group_mode(const tr_nccl_device_id *ids, int n, int force_staged,
                                char *why, size_t why_len);
const char *tr_nccl_mode_name(tr_nccl_mode m); /* "local", "nccl", "staged" */

/* Route of an operation in a group of `mode` whose two buffers are of kinds a and b
 * (TR_NCCL_MEM_NONE for an absent or empty buffer) and that moves `bytes` bytes in all.
 * 0 bytes or no buffer: HOST (every member agrees, as counts are the same). Mixed host and
 * device buffers: TR_ERR_INVALID "comm 'G': OP: the send buffer is in device memory but the
 * receive buffer in host memory; both must be in the same place". */
TR_MUST_CHECK int tr_nccl_choose_route(tr_nccl_mode mode, tr_nccl_memkind send, tr_nccl_memkind recv,
                         size_t bytes, const char *group, const char *op, tr_nccl_route *route);

/* Whether tr_comm_order_after leaves an operation of this route and kind to the stream
 * (1) or waits for it on the host (0): collectives on the NCCL and LOCAL routes, whose
 * completion event is recorded when they are posted; staged and host routes need host
 * progress (copies, UCX), and NCCL P2P starts at the next progress call (one ncclGroup). */
int tr_nccl_route_ordered(tr_nccl_route route, tr_comm_opkind kind);

/* ---- the backend
 * Its world comes from tr_comm_init with TR_COMM_BACKEND_NCCL (see above): progress_thread
 * is forced on for the UCX communicator underneath, which must progress while a rank waits
 * on a device stream. It initialises the CUDA backend (tr_cuda_init) first: "comm: the NCCL
 * backend needs a GPU: no CUDA device: ..." without one. */

/* The mode of an NCCL-backend communicator; -1 for any other. */
int tr_comm_nccl_mode(const tr_comm *c);

#endif
