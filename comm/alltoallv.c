/* tr_comm_alltoallv: every pair of members exchanges one block, composed from the front end's
 * async send / recv (so every backend that has them has it) plus a local copy of this rank's
 * own block. All receives are posted before any send, then everything is waited for at once,
 * so no order of the peers' calls can deadlock. */
#include <string.h>

#include "comm/comm.h"

/* The bytes of `n` blocks of counts[r] elements (overflow refused). */
static int counts_total(const tr_comm *c, const char *which, const size_t *counts, int n,
                         size_t es, size_t *total_bytes)
{
    size_t total = 0;
    for (int r = 0; r < n; r++) {
        if (total + counts[r] < total)
            return tr_fail(TR_ERR_INVALID, "comm '%s': alltoallv: %s counts overflow at rank %d",
                           tr_comm_name(c), which, r);
        total += counts[r];
    }
    if (tr_mul_size(total, es, total_bytes))
        return tr_fail(TR_ERR_INVALID, "comm '%s': alltoallv: %s count %zu overflows",
                       tr_comm_name(c), which, total);
    return TR_OK;
}

int tr_comm_alltoallv(tr_comm *c, const void *send, const size_t *send_counts, void *recv,
                      const size_t *recv_counts, tr_comm_dtype dt)
{
    if (!c)
        return tr_fail(TR_ERR_INVALID, "comm: alltoallv on a NULL communicator");
    const char *name = tr_comm_name(c);
    size_t es = tr_comm_dtype_size(dt);
    if (!es)
        return tr_fail(TR_ERR_INVALID, "comm '%s': alltoallv: invalid dtype %d", name, (int)dt);
    if (!send_counts || !recv_counts)
        return tr_fail(TR_ERR_INVALID, "comm '%s': alltoallv: the %s counts are NULL", name,
                       send_counts ? "recv" : "send");
    int n = tr_comm_size(c), me = tr_comm_rank(c);
    size_t send_bytes = 0, recv_bytes = 0;
    int rc = counts_total(c, "send", send_counts, n, es, &send_bytes);
    if (!rc)
        rc = counts_total(c, "recv", recv_counts, n, es, &recv_bytes);
    if (rc)
        return rc;
    if ((send_bytes && !send) || (recv_bytes && !recv))
        return tr_fail(TR_ERR_INVALID, "comm '%s': alltoallv: %s buffer is NULL", name,
                       send_bytes && !send ? "send" : "recv");
    if (send_counts[me] != recv_counts[me])
        return tr_fail(TR_ERR_INVALID,
                       "comm '%s': alltoallv: rank %d sends itself %zu elements but expects %zu",
                       name, me, send_counts[me], recv_counts[me]);
    if (send_counts[me] && strcmp(tr_comm_backend(c), "ucx"))
        return tr_fail(TR_ERR_INVALID,
                       "comm '%s': alltoallv: this rank's own block is copied on the host; the "
                       "%s backend's buffers are not host memory (not built)",
                       name, tr_comm_backend(c));
    tr_comm_request *stack_reqs[16], **reqs = stack_reqs;
    size_t cap = 2 * (size_t)n;
    if (cap > 16 && !(reqs = tr_alloc(cap * sizeof *reqs, "alltoallv requests")))
        return TR_ERR_NOMEM;
    memset(reqs, 0, (cap > 16 ? cap : 16) * sizeof *reqs); /* wait_all skips NULL slots */
    size_t nreq = 0, off = 0;
    const char *s = send;
    char *d = recv;
    for (int r = 0; r < n && !rc; off += recv_counts[r], r++)
        if (r != me && recv_counts[r])
            rc = tr_comm_recv_async(c, d + off * es, recv_counts[r], dt, r, TR_COMM_TAG_ALLTOALLV,
                                    &reqs[nreq++]);
    size_t self_recv = 0;
    for (int r = 0; r < me; r++)
        self_recv += recv_counts[r];
    off = 0;
    for (int r = 0; r < n && !rc; off += send_counts[r], r++) {
        if (r == me && send_counts[r])
            memcpy(d + self_recv * es, s + off * es, send_counts[r] * es);
        else if (send_counts[r])
            rc = tr_comm_send_async(c, s + off * es, send_counts[r], dt, r,
                                    TR_COMM_TAG_ALLTOALLV, &reqs[nreq++]);
    }
    int wrc = tr_comm_wait_all(reqs, nreq);
    if (reqs != stack_reqs)
        tr_free(reqs);
    return rc ? rc : wrc;
}
