/* Allreduce for mid-sized messages on more than two ranks: reduce-scatter by recursive
 * halving, then allgather by recursive doubling (Rabenseifner's algorithm). It moves the
 * same bytes as the ring in 2·log2(p) steps instead of 2(n-1), which matters when ranks
 * share cores and every step waits for a partner to be scheduled.
 *
 * Rounds (op->nsteps = 2L + 2, p = 2^L the largest power of two <= n, rem = n - p):
 *   0          fold: even rank 2i < 2·rem sends all its data to 2i+1, which reduces it
 *   1..L       halving with partner newrank ^ (p >> k): keep one half of the current range
 *              of blocks (tr_comm_block(count, p, ·)), send the other, reduce what arrives
 *   L+1..2L    doubling with partner newrank ^ (1 << j): exchange the ranges held
 *   2L+1       unfold: 2i+1 sends the result to 2i
 * Reductions put the lower rank's data on the left; each element's final value is computed by
 * one rank, so every rank gets the same bits. Out-of-place, the first halving step reads the
 * send buffer directly (no initial copy). */
#include "comm/ucx/ucx_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    int p2, rem, levels, newrank;
} shape;

static shape shape_of(int n, int r)
{
    shape s = {1, 0, 0, 0};
    while (s.p2 * 2 <= n) {
        s.p2 *= 2;
        s.levels++;
    }
    s.rem = n - s.p2;
    s.newrank = r < 2 * s.rem ? (r % 2 ? r / 2 : -1) : r - s.rem;
    return s;
}

static int real_rank(const shape *s, int v) { return v < s->rem ? 2 * v + 1 : v + s->rem; }

/* Elements of blocks [lo, hi) of the p-way partition. */
static void range(size_t count, int p, int lo, int hi, size_t *off, size_t *len)
{
    size_t o1, l1, o2, l2;
    tr_comm_block(count, p, lo, &o1, &l1);
    tr_comm_block(count, p, hi - 1, &o2, &l2);
    *off = o1;
    *len = o2 + l2 - o1;
}

/* Halving step k: the block range kept and the one given away. */
static void halves(const shape *s, int k, int *keep_lo, int *give_lo, int *m)
{
    *m = s->p2 >> k;
    int lo = s->newrank / (2 * *m) * (2 * *m);
    int upper = (s->newrank & *m) != 0;
    *keep_lo = upper ? lo + *m : lo;
    *give_lo = upper ? lo : lo + *m;
}

/* Where this rank's data lives: op->send until a reduction wrote recv (op->mode = 1; set
 * from the start in place). */
static const uint8_t *data(const ucx_op *op) { return op->mode ? op->recv : op->send; }

static int hv_post(ucx_op *op, int k)
{
    int n = op->g->size, r = op->g->rank;
    shape s = shape_of(n, r);
    size_t es = op->es, bytes = op->count * es;
    uint64_t tag = ucx_coll_tag(op, (uint32_t)k);
    for (int i = 0; i < op->nx; i++)
        op->x[i].state = XF_IDLE;
    if (k == 0) {
        if (r < 2 * s.rem && r % 2 == 0)
            return ucx_post_send(op, &op->x[0], r + 1, tag, data(op), bytes);
        if (r < 2 * s.rem)
            return ucx_post_recv(op, &op->x[0], r - 1, tag, op->tmp, bytes);
        return 0;
    }
    if (k == 2 * s.levels + 1) {
        if (r < 2 * s.rem && r % 2 == 1)
            return ucx_post_send(op, &op->x[0], r - 1, tag, op->recv, bytes);
        if (r < 2 * s.rem)
            return ucx_post_recv(op, &op->x[0], r + 1, tag, op->recv, bytes);
        return 0;
    }
    if (s.newrank < 0)
        return 0;
    size_t koff, klen, goff, glen;
    if (k <= s.levels) {
        int keep, give, m;
        halves(&s, k, &keep, &give, &m);
        int peer = real_rank(&s, s.newrank ^ m);
        range(op->count, s.p2, keep, keep + m, &koff, &klen);
        range(op->count, s.p2, give, give + m, &goff, &glen);
        if (ucx_post_recv(op, &op->x[0], peer, tag, op->tmp, klen * es))
            return -1;
        return ucx_post_send(op, &op->x[1], peer, tag, data(op) + goff * es, glen * es);
    }
    int m = 1 << (k - s.levels - 1), lo = s.newrank / m * m;
    int peer = real_rank(&s, s.newrank ^ m);
    range(op->count, s.p2, lo, lo + m, &koff, &klen);
    range(op->count, s.p2, lo ^ m, (lo ^ m) + m, &goff, &glen);
    if (ucx_post_recv(op, &op->x[0], peer, tag, op->recv + goff * es, glen * es))
        return -1;
    return ucx_post_send(op, &op->x[1], peer, tag, op->recv + koff * es, klen * es);
}

static void hv_after(ucx_op *op, int k)
{
    int n = op->g->size, r = op->g->rank;
    shape s = shape_of(n, r);
    size_t es = op->es;
    if (k == 0) {
        if (r < 2 * s.rem && r % 2 == 1) { /* the even partner (lower) on the left */
            ucx_reduce3(op->recv, op->tmp, data(op), op->count, op->dt, op->redop);
            op->mode = 1;
        }
        return;
    }
    if (k > s.levels || s.newrank < 0)
        return;
    int keep, give, m;
    halves(&s, k, &keep, &give, &m);
    int peer = real_rank(&s, s.newrank ^ m);
    size_t off, len;
    range(op->count, s.p2, keep, keep + m, &off, &len);
    const uint8_t *mine = data(op) + off * es;
    if (peer < r)
        ucx_reduce3(op->recv + off * es, op->tmp, mine, len, op->dt, op->redop);
    else
        ucx_reduce3(op->recv + off * es, mine, op->tmp, len, op->dt, op->redop);
    op->mode = 1;
}

int ucx_setup_halving_allreduce(ucx_op *op)
{
    shape s = shape_of(op->g->size, op->g->rank);
    size_t bytes = op->count * op->es;
    op->x = calloc(2, sizeof *op->x);
    op->scratch = malloc(bytes ? bytes : 1);
    if (!op->x || !op->scratch)
        return tr_fail(TR_ERR_NOMEM, "comm: out of memory for %zu bytes of scratch", bytes);
    op->nx = 2;
    op->tmp = op->scratch;
    op->mode = op->send == op->recv; /* in place: the data is already in recv */
    ucx_setup_round_driver(op, 2 * s.levels + 2, hv_post, hv_after);
    return TR_OK;
}
