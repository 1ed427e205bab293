/* Latency-bound algorithms as round-based state machines, and the choice of algorithm.
 *
 *  allreduce       recursive doubling; a non-power-of-two size first folds the extra ranks
 *                  (even rank 2i < 2·rem sends to 2i+1) and unfolds the result at the end
 *  reduce_scatter  the same allreduce over the whole buffer, then this rank's block
 *  allgather       direct exchange (every rank sends its block to every other), n <= 16
 * A tag (group, sequence number, step) never matches two messages a rank receives in one
 * operation: UCX matches tags, not sources.
 *  broadcast       binomial tree rooted at `root`
 *  barrier         dissemination: round k sends to r + 2^k, receives from r - 2^k
 *  send / recv     one tagged message (tag: group, source rank, user tag)
 * Large messages go to ring.c (ring / chain, chunked and pipelined); mid-sized
 * allreduces on more than two ranks to halving.c (recursive halving + doubling). */
#include "comm/ucx/ucx_internal.h"

#include <stdlib.h>
#include <string.h>

#define DIRECT_ALLGATHER_MAX_RANKS 16

static int mod(int a, int n) { return ((a % n) + n) % n; }

static int done_now(ucx_op *op)
{
    (void)op;
    return 1;
}

/* Generic driver: round k's transfers are posted by post_round(op, k); when all have
 * completed, after_round(op, k) runs; op->nsteps rounds in all. op->aux: a round in flight. */
static int run_rounds(ucx_op *op)
{
    for (;;) {
        if (op->aux) {
            for (int i = 0; i < op->nx; i++)
                if (op->x[i].state == XF_POSTED)
                    return 0;
            for (int i = 0; i < op->nx; i++)
                if (op->x[i].state == XF_DONE && ucx_xfer_finish(op, &op->x[i]))
                    return -1;
            op->aux = 0;
            if (op->after_round)
                op->after_round(op, op->round - 1);
        }
        if (op->round >= op->nsteps)
            return 1;
        int k = op->round++;
        if (op->post_round(op, k))
            return -1;
        op->aux = 1;
    }
}

void ucx_setup_round_driver(ucx_op *op, int nrounds, int (*post)(ucx_op *, int),
                            void (*after)(ucx_op *, int))
{
    op->nsteps = nrounds;
    op->post_round = post;
    op->after_round = after;
    op->advance = run_rounds;
}

/* ---------------------------------------------------------------- recursive doubling */

typedef struct {
    int p2, rem, levels, newrank;
} rd_shape;

static rd_shape rd_shape_of(int n, int r)
{
    rd_shape s = {1, 0, 0, 0};
    while (s.p2 * 2 <= n) {
        s.p2 *= 2;
        s.levels++;
    }
    s.rem = n - s.p2;
    if (r < 2 * s.rem)
        s.newrank = r % 2 ? r / 2 : -1;
    else
        s.newrank = r - s.rem;
    return s;
}

static int rd_real(const rd_shape *s, int v) { return v < s->rem ? 2 * v + 1 : v + s->rem; }

static int rd_post(ucx_op *op, int k)
{
    int n = op->g->size, r = op->g->rank;
    rd_shape s = rd_shape_of(n, r);
    size_t bytes = op->count * op->es;
    for (int i = 0; i < op->nx; i++)
        op->x[i].state = XF_IDLE;
    uint64_t tag = ucx_coll_tag(op, (uint32_t)k);
    if (k == 0) { /* fold the extra ranks in */
        if (r < 2 * s.rem && r % 2 == 0)
            return ucx_post_send(op, &op->x[0], r + 1, tag, op->acc, bytes);
        if (r < 2 * s.rem)
            return ucx_post_recv(op, &op->x[0], r - 1, tag, op->tmp, bytes);
        return 0;
    }
    if (k <= s.levels) {
        if (s.newrank < 0)
            return 0;
        int peer = rd_real(&s, s.newrank ^ (1 << (k - 1)));
        if (ucx_post_recv(op, &op->x[0], peer, tag, op->tmp, bytes))
            return -1;
        return ucx_post_send(op, &op->x[1], peer, tag, op->acc, bytes);
    }
    /* unfold: give the extra ranks the result */
    if (r < 2 * s.rem && r % 2 == 1)
        return ucx_post_send(op, &op->x[0], r - 1, tag, op->acc, bytes);
    if (r < 2 * s.rem)
        return ucx_post_recv(op, &op->x[0], r + 1, tag, op->acc, bytes);
    return 0;
}

static void rd_after(ucx_op *op, int k)
{
    int n = op->g->size, r = op->g->rank;
    rd_shape s = rd_shape_of(n, r);
    /* the lower rank's data on the left, so both partners compute the same bits */
    if (k == 0 && r < 2 * s.rem && r % 2 == 1) {
        ucx_reduce3(op->acc, op->tmp, op->acc, op->count, op->dt, op->redop);
    } else if (k >= 1 && k <= s.levels && s.newrank >= 0) {
        int peer = rd_real(&s, s.newrank ^ (1 << (k - 1)));
        if (peer < r)
            ucx_reduce3(op->acc, op->tmp, op->acc, op->count, op->dt, op->redop);
        else
            ucx_reduce3(op->acc, op->acc, op->tmp, op->count, op->dt, op->redop);
    }
    if (k == op->nsteps - 1 && op->mode) { /* reduce_scatter: keep this rank's block */
        size_t off, len;
        tr_comm_block(op->count, n, r, &off, &len);
        memcpy(op->recv, op->acc + off * op->es, len * op->es);
    }
}

/* Transfer slots for up to n at once. */
static int ensure_x(ucx_op *op, int n)
{
    if (op->nx >= n)
        return TR_OK;
    ucx_xfer *x = calloc((size_t)n, sizeof *x);
    if (!x)
        return tr_fail(TR_ERR_NOMEM, "comm: out of memory");
    free(op->x);
    op->x = x;
    op->nx = n;
    return TR_OK;
}

/* acc NULL: reduce a private copy of the send buffer and copy this rank's block to recv at
 * the end (out-of-place reduce_scatter). */
int ucx_setup_rd_allreduce(ucx_op *op, uint8_t *acc, int final_copy)
{
    rd_shape s = rd_shape_of(op->g->size, op->g->rank);
    size_t bytes = op->count * op->es;
    if (ensure_x(op, 2))
        return TR_ERR_NOMEM;
    op->scratch = malloc(final_copy ? 2 * bytes : bytes);
    if (!op->scratch)
        return tr_fail(TR_ERR_NOMEM, "comm: out of memory for %zu bytes of scratch",
                       final_copy ? 2 * bytes : bytes);
    op->tmp = op->scratch;
    op->acc = acc;
    if (final_copy) {
        op->acc = op->scratch + bytes;
        memcpy(op->acc, op->send, bytes);
    }
    op->mode = final_copy;
    ucx_setup_round_driver(op, s.levels + 2, rd_post, rd_after);
    return TR_OK;
}

/* ---------------------------------------------------------------- binomial broadcast */

static int tree_post(ucx_op *op, int k)
{
    int n = op->g->size, vr = mod(op->g->rank - op->root, n);
    size_t bytes = op->count * op->es;
    uint64_t tag = ucx_coll_tag(op, 0); /* each rank receives exactly one message */
    for (int i = 0; i < op->nx; i++)
        op->x[i].state = XF_IDLE;
    int low = 1; /* lowest set bit of vr; for the root the first power of two >= n */
    while (low < n && !(vr & low))
        low <<= 1;
    if (k == 0)
        return vr ? ucx_post_recv(op, &op->x[0], mod(vr - low + op->root, n), tag, op->recv, bytes)
                  : 0;
    int i = 0;
    for (int m = low >> 1; m > 0; m >>= 1)
        if (vr + m < n && ucx_post_send(op, &op->x[i++], mod(vr + m + op->root, n), tag,
                                        op->recv, bytes))
            return -1;
    return 0;
}

/* ---------------------------------------------------------------- barrier */

static int barrier_post(ucx_op *op, int k)
{
    int n = op->g->size, r = op->g->rank, d = 1 << k;
    uint64_t tag = ucx_coll_tag(op, (uint32_t)k);
    if (ucx_post_recv(op, &op->x[0], mod(r - d, n), tag, NULL, 0))
        return -1;
    return ucx_post_send(op, &op->x[1], mod(r + d, n), tag, NULL, 0);
}

int ucx_setup_barrier(ucx_op *op)
{
    if (ensure_x(op, 2))
        return TR_ERR_NOMEM;
    int rounds = 0;
    while ((1 << rounds) < op->g->size)
        rounds++;
    ucx_setup_round_driver(op, rounds, barrier_post, NULL);
    return TR_OK;
}

/* ---------------------------------------------------------------- direct allgather */

static int direct_ag_post(ucx_op *op, int k)
{
    (void)k;
    int n = op->g->size, r = op->g->rank, i = 0;
    size_t off, len;
    tr_comm_block(op->count, n, r, &off, &len);
    const uint8_t *mine = op->recv + off * op->es;
    for (int d = 1; d < n; d++) { /* step d: tags tell the senders apart */
        int from = mod(r - d, n), to = mod(r + d, n);
        uint64_t tag = ucx_coll_tag(op, (uint32_t)d);
        size_t foff, flen;
        tr_comm_block(op->count, n, from, &foff, &flen);
        if (ucx_post_recv(op, &op->x[i++], from, tag, op->recv + foff * op->es, flen * op->es))
            return -1;
        if (ucx_post_send(op, &op->x[i++], to, tag, mine, len * op->es))
            return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- send / recv */

static int p2p_post(ucx_op *op, int k)
{
    (void)k;
    ucx_group *g = op->g;
    size_t bytes = op->count; /* p2p ops carry bytes (es = 1) */
    if (op->mode)
        return ucx_post_send(op, &op->x[0], op->peer, ucx_p2p_tag(g->id, g->rank, op->tag),
                             op->send, bytes);
    return ucx_post_recv(op, &op->x[0], op->peer, ucx_p2p_tag(g->id, op->peer, op->tag),
                         op->recv, bytes);
}

int ucx_setup_p2p(ucx_op *op, int is_send)
{
    if (ensure_x(op, 1))
        return TR_ERR_NOMEM;
    op->mode = is_send;
    ucx_setup_round_driver(op, 1, p2p_post, NULL);
    return TR_OK;
}

/* ---------------------------------------------------------------- algorithm choice */

static int use_ring(const ucx_op *op, const tr_comm_tuning *t)
{
    return op->count * op->es >= t->ring_min_bytes;
}

int ucx_setup_allreduce(ucx_op *op, const tr_comm_tuning *t)
{
    size_t bytes = op->count * op->es;
    int in_place = op->send == op->recv;
    if (op->g->size == 1 || bytes == 0) {
        if (!in_place && bytes)
            memmove(op->recv, op->send, bytes);
        op->advance = done_now;
        return TR_OK;
    }
    int n = op->g->size;
    if (use_ring(op, t) && op->count >= (size_t)n && n > 2 && bytes < t->halving_max_bytes)
        return ucx_setup_halving_allreduce(op);
    if (use_ring(op, t) && op->count >= (size_t)n)
        return ucx_setup_ring(op, in_place ? RING_AR_IP : RING_AR_OOP, t);
    if (!in_place)
        memmove(op->recv, op->send, bytes);
    return ucx_setup_rd_allreduce(op, op->recv, 0);
}

int ucx_setup_reduce_scatter(ucx_op *op, const tr_comm_tuning *t)
{
    int n = op->g->size, r = op->g->rank;
    size_t off, len, bytes = op->count * op->es;
    tr_comm_block(op->count, n, r, &off, &len);
    int in_place = op->recv == op->send + off * op->es;
    if (n == 1 || bytes == 0) {
        if (!in_place && bytes)
            memmove(op->recv, op->send, bytes);
        op->advance = done_now;
        return TR_OK;
    }
    if (use_ring(op, t))
        return ucx_setup_ring(op, in_place ? RING_RS_IP : RING_RS_OOP, t);
    if (in_place) /* the whole send buffer is scratch: reduce there, the block lands in place */
        return ucx_setup_rd_allreduce(op, (uint8_t *)op->send, 0);
    return ucx_setup_rd_allreduce(op, NULL, 1);
}

int ucx_setup_allgather(ucx_op *op, const tr_comm_tuning *t)
{
    int n = op->g->size, r = op->g->rank;
    size_t off, len;
    tr_comm_block(op->count, n, r, &off, &len);
    uint8_t *mine = op->recv + off * op->es;
    if (op->send != mine && len)
        memmove(mine, op->send, len * op->es);
    if (n == 1 || op->count == 0) {
        op->advance = done_now;
        return TR_OK;
    }
    if (use_ring(op, t) || n > DIRECT_ALLGATHER_MAX_RANKS)
        return ucx_setup_ring(op, RING_AG, t);
    if (ensure_x(op, 2 * (n - 1)))
        return TR_ERR_NOMEM;
    ucx_setup_round_driver(op, 1, direct_ag_post, NULL);
    return TR_OK;
}

int ucx_setup_broadcast(ucx_op *op, const tr_comm_tuning *t)
{
    int n = op->g->size;
    if (n == 1 || op->count == 0) {
        op->advance = done_now;
        return TR_OK;
    }
    if (use_ring(op, t))
        return ucx_setup_chain_bcast(op, t->chunk_bytes);
    int fan = 1;
    for (int m = 1; m < n; m <<= 1)
        fan++;
    if (ensure_x(op, fan))
        return TR_ERR_NOMEM;
    ucx_setup_round_driver(op, 2, tree_post, NULL);
    return TR_OK;
}
