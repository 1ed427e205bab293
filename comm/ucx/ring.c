/* Bandwidth-bound algorithms: the ring (reduce-scatter, allgather, allreduce = both) and the
 * chain broadcast, chunked and pipelined.
 *
 * Every block b of the partition (tr_comm_block(count, n, b)) is cut into K chunks; lane c
 * carries chunk c of whichever block a step moves, so the K lanes form K independent rings
 * in flight at once (transfers of one lane overlap the reductions of another). Step s of a
 * lane sends to r+1 and receives from r-1:
 *   reduce-scatter phase (n-1 steps): send block r-s+a, receive block r-s-1+a and reduce it
 *       with this rank's own data (a = 0 for allreduce, -1 for reduce_scatter, so that rank r
 *       ends with block r+1+a);
 *   allgather phase (n-1 steps): send block o-t, receive block o-t-1 (o: the block owned).
 * A lane moves to its next step only when both transfers of the current one completed, so a
 * buffer is never rewritten while a send still reads it. Tag step = s·K + c.
 * At most `ring_window` lanes run at once, each with a chunk-sized receive slot: a chunk of
 * the reduce-scatter phase lands in the slot (still in cache) and one pass writes
 * slot op own-data to its destination; allgather-phase chunks land in the result directly. */
#include "comm/ucx/ucx_internal.h"

#include <stdlib.h>
#include <string.h>

#define MAX_LANES 4096

static int mod(int a, int n) { return ((a % n) + n) % n; }

static void block_chunk(const ucx_op *op, int b, int c, size_t *off, size_t *len)
{
    size_t boff, blen, coff;
    tr_comm_block(op->count, op->g->size, b, &boff, &blen);
    tr_comm_block(blen, op->nlanes, c, &coff, len);
    *off = boff + coff;
}

/* Receive slot `half` (0/1) of the lane's window slot; chunk-sized, so it stays in cache
 * between the receive and the reduction that reads it. */
static uint8_t *slot_buf(const ucx_op *op, const ucx_lane *L, int half)
{
    int per = op->mode == RING_RS_OOP ? 2 : 1;
    return op->scratch + ((size_t)L->slot * (size_t)per + (size_t)half) * op->chunk_max * op->es;
}

static int lane_post(ucx_op *op, ucx_lane *L, int c)
{
    int n = op->g->size, r = op->g->rank, s = L->step;
    int nrs = (op->mode == RING_AG) ? 0 : n - 1;
    int a = (op->mode == RING_RS_OOP || op->mode == RING_RS_IP) ? -1 : 0;
    int own = (op->mode == RING_AG) ? r : r + 1;
    int sb, rb;
    if (s < nrs) {
        sb = mod(r - s + a, n);
        rb = mod(r - s - 1 + a, n);
    } else {
        int t = s - nrs;
        sb = mod(own - t, n);
        rb = mod(own - t - 1, n);
    }
    size_t soff, slen, roff, rlen, es = op->es;
    block_chunk(op, sb, c, &soff, &slen);
    block_chunk(op, rb, c, &roff, &rlen);
    uint8_t *work = op->mode == RING_RS_IP ? (uint8_t *)op->send : op->recv;
    const uint8_t *sp;
    uint8_t *rp;
    L->red_dst = NULL;
    L->red_n = rlen;
    if (s >= nrs) { /* allgather phase: straight into the result */
        sp = op->recv + soff * es;
        rp = op->recv + roff * es;
    } else if (op->mode == RING_AR_OOP) {
        sp = (s == 0 ? op->send : op->recv) + soff * es;
        rp = slot_buf(op, L, 0);
        L->red_dst = op->recv + roff * es;
        L->red_b = op->send + roff * es;
    } else if (op->mode == RING_AR_IP || op->mode == RING_RS_IP) {
        sp = work + soff * es;
        rp = slot_buf(op, L, 0);
        L->red_dst = work + roff * es;
        L->red_b = work + roff * es;
    } else { /* RING_RS_OOP: partial sums travel through the lane's two slots */
        sp = s == 0 ? op->send + soff * es : slot_buf(op, L, (s - 1) & 1);
        rp = slot_buf(op, L, s & 1);
        L->red_dst = rp;
        if (s == nrs - 1) {
            size_t myoff, mylen;
            tr_comm_block(op->count, n, r, &myoff, &mylen);
            L->red_dst = op->recv + (roff - myoff) * es;
        }
        L->red_b = op->send + roff * es;
    }
    L->red_a = rp; /* the partial from the left neighbour, then our own data */
    uint64_t tag = ucx_coll_tag(op, (uint32_t)(s * op->nlanes + c));
    if (ucx_post_recv(op, &L->rcv, mod(r - 1, n), tag, rp, rlen * es))
        return -1;
    return ucx_post_send(op, &L->snd, mod(r + 1, n), tag, sp, slen * es);
}

/* Runs lane c as far as its transfers allow; 1 when it finished. */
static int lane_run(ucx_op *op, int c)
{
    ucx_lane *L = &op->lanes[c];
    while (L->step < op->nsteps) {
        if (!L->posted) {
            if (lane_post(op, L, c))
                return -1;
            L->posted = 1;
        }
        if (L->snd.state == XF_POSTED || L->rcv.state == XF_POSTED)
            return 0;
        if (ucx_xfer_finish(op, &L->rcv) || ucx_xfer_finish(op, &L->snd))
            return -1;
        if (L->red_dst)
            ucx_reduce3(L->red_dst, L->red_a, L->red_b, L->red_n, op->dt, op->redop);
        L->posted = 0;
        L->step++;
    }
    return 1;
}

static int ring_advance(ucx_op *op)
{
    for (;;) {
        while (op->lanes_started < op->nlanes && op->nfree > 0)
            op->lanes[op->lanes_started++].slot = op->free_slots[--op->nfree];
        int finished = 0;
        for (int c = op->aux; c < op->lanes_started; c++) {
            ucx_lane *L = &op->lanes[c];
            if (L->slot < 0)
                continue;
            int r = lane_run(op, c);
            if (r < 0)
                return -1;
            if (r) {
                op->free_slots[op->nfree++] = L->slot;
                L->slot = -1;
                op->lanes_left--;
                finished = 1;
            }
        }
        while (op->aux < op->lanes_started && op->lanes[op->aux].slot < 0)
            op->aux++; /* first lane still running */
        if (!finished || op->lanes_left == 0)
            return op->lanes_left == 0;
    }
}

/* Lanes for chunks of about chunk_bytes; at least one element per chunk when possible. */
static int pick_lanes(size_t max_elems, size_t min_elems, size_t es, size_t chunk_bytes,
                      int nsteps)
{
    size_t k = (max_elems * es + chunk_bytes - 1) / chunk_bytes;
    if (k > min_elems)
        k = min_elems;
    if (k > MAX_LANES)
        k = MAX_LANES;
    if (k < 1)
        k = 1;
    while (k > 1 && k * (size_t)(nsteps > 0 ? nsteps : 1) > UCX_MAX_STEP)
        k--;
    return (int)k;
}

int ucx_setup_ring(ucx_op *op, int mode, const tr_comm_tuning *t)
{
    int n = op->g->size;
    size_t maxblk = (op->count + (size_t)n - 1) / (size_t)n, minblk = op->count / (size_t)n;
    op->mode = mode;
    op->nsteps = (mode == RING_AR_OOP || mode == RING_AR_IP) ? 2 * (n - 1) : n - 1;
    op->nlanes = pick_lanes(maxblk, minblk, op->es, t->chunk_bytes, op->nsteps);
    op->lanes_left = op->nlanes;
    op->chunk_max = (maxblk + (size_t)op->nlanes - 1) / (size_t)op->nlanes;
    op->window = t->ring_window < op->nlanes ? t->ring_window : op->nlanes;
    op->lanes = calloc((size_t)op->nlanes, sizeof *op->lanes);
    op->free_slots = calloc((size_t)op->window, sizeof *op->free_slots);
    if (!op->lanes || !op->free_slots)
        return tr_fail(TR_ERR_NOMEM, "comm: out of memory");
    for (int c = 0; c < op->nlanes; c++)
        op->lanes[c].slot = -1;
    for (int i = 0; i < op->window; i++)
        op->free_slots[op->nfree++] = op->window - 1 - i;
    int per = mode == RING_RS_OOP ? 2 : mode == RING_AG ? 0 : 1;
    if (per) {
        size_t bytes = (size_t)per * (size_t)op->window * op->chunk_max * op->es;
        op->scratch = malloc(bytes ? bytes : 1);
        if (!op->scratch)
            return tr_fail(TR_ERR_NOMEM, "comm: out of memory for %zu bytes of scratch", bytes);
    }
    op->advance = ring_advance;
    return TR_OK;
}

/* ---------------------------------------------------------------- chain broadcast
 * Virtual rank v = r - root; v receives chunk c from v-1 and forwards it to v+1. All receives
 * are posted at once into the user buffer; x[c] receives chunk c, x[K + c] forwards it. */

static int chain_advance(ucx_op *op)
{
    int n = op->g->size, K = op->nlanes, v = mod(op->g->rank - op->root, n);
    int prev = mod(op->g->rank - 1, n), next = mod(op->g->rank + 1, n);
    int forward = v < n - 1;
    if (!op->aux) {
        op->aux = 1;
        for (int c = 0; c < K; c++) {
            size_t off, len;
            tr_comm_block(op->count, K, c, &off, &len);
            uint64_t tag = ucx_coll_tag(op, (uint32_t)c);
            uint8_t *p = op->recv + off * op->es;
            if (v == 0 ? ucx_post_send(op, &op->x[K + c], next, tag, p, len * op->es)
                       : ucx_post_recv(op, &op->x[c], prev, tag, p, len * op->es))
                return -1;
        }
        op->round = v == 0 ? K : 0; /* next chunk whose arrival to handle */
    }
    while (op->round < K && op->x[op->round].state == XF_DONE) {
        int c = op->round++;
        if (ucx_xfer_finish(op, &op->x[c]))
            return -1;
        if (forward) {
            size_t off, len;
            tr_comm_block(op->count, K, c, &off, &len);
            if (ucx_post_send(op, &op->x[K + c], next, ucx_coll_tag(op, (uint32_t)c),
                              op->recv + off * op->es, len * op->es))
                return -1;
        }
    }
    int pending = op->round < K;
    for (int c = 0; c < K; c++) {
        ucx_xfer *x = &op->x[K + c];
        if (x->state == XF_POSTED)
            pending = 1;
        else if (x->state == XF_DONE && ucx_xfer_finish(op, x))
            return -1;
    }
    return !pending;
}

int ucx_setup_chain_bcast(ucx_op *op, size_t chunk_bytes)
{
    int K = pick_lanes(op->count, op->count, op->es, chunk_bytes, 1);
    op->nlanes = K;
    op->x = calloc((size_t)(2 * K), sizeof *op->x);
    if (!op->x)
        return tr_fail(TR_ERR_NOMEM, "comm: out of memory");
    op->nx = 2 * K;
    op->advance = chain_advance;
    return TR_OK;
}
