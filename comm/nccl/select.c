/* The NCCL backend's pure decisions: a group's mode from its members' GPUs, an operation's
 * route from where its buffers live. No CUDA or NCCL call here (tested on any machine). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "comm/nccl/nccl.h"
#include "core/core.h"

const char *tr_nccl_mode_name(tr_nccl_mode m)
{
    switch (m) {
    case TR_NCCL_MODE_LOCAL: return "local";
    case TR_NCCL_MODE_NCCL: return "nccl";
    case TR_NCCL_MODE_STAGED: return "staged";
    }
    return "?";
}

static int uuid_known(const tr_nccl_device_id *d)
{
    for (int i = 0; i < 16; i++)
        if (d->uuid[i])
            return 1;
    return 0;
}

/* Same GPU: equal UUIDs; without one on either side, the same host and PCI bus id. */
static int same_gpu(const tr_nccl_device_id *a, const tr_nccl_device_id *b)
{
    if (uuid_known(a) && uuid_known(b))
        return !memcmp(a->uuid, b->uuid, sizeof a->uuid);
    return !strncmp(a->host, b->host, sizeof a->host) &&
           !strncmp(a->bus_id, b->bus_id, sizeof a->bus_id);
}

static void say(char *why, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void say(char *why, size_t len, const char *fmt, ...)
{
    if (!why || !len)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, len, fmt, ap);
    va_end(ap);
}

tr_nccl_mode tr_nccl_group_mode(const tr_nccl_device_id *ids, int n, int force_staged,
                                char *why, size_t why_len)
{
    if (n <= 1) {
        say(why, why_len, "a group of one: device copies only");
        return TR_NCCL_MODE_LOCAL;
    }
    if (force_staged) {
        say(why, why_len, "TRIDENT_NCCL_STAGE=1: staging through host memory");
        return TR_NCCL_MODE_STAGED;
    }
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (same_gpu(&ids[i], &ids[j])) {
                say(why, why_len,
                    "ranks %d and %d share GPU %.32s on %.80s: staging through host memory "
                    "(NCCL needs one GPU per rank)",
                    i, j, ids[i].bus_id[0] ? ids[i].bus_id : "?",
                    ids[i].host[0] ? ids[i].host : "?");
                return TR_NCCL_MODE_STAGED;
            }
    say(why, why_len, "%d ranks on %d distinct GPUs", n, n);
    return TR_NCCL_MODE_NCCL;
}

static const char *kind_name(tr_nccl_memkind k)
{
    return k == TR_NCCL_MEM_DEVICE ? "device" : "host";
}

int tr_nccl_choose_route(tr_nccl_mode mode, tr_nccl_memkind send, tr_nccl_memkind recv,
                         size_t bytes, const char *group, const char *op, tr_nccl_route *route)
{
    *route = TR_NCCL_ROUTE_HOST;
    if (bytes == 0 || (send == TR_NCCL_MEM_NONE && recv == TR_NCCL_MEM_NONE))
        return TR_OK;
    if (send != TR_NCCL_MEM_NONE && recv != TR_NCCL_MEM_NONE && send != recv)
        return tr_fail(TR_ERR_INVALID,
                       "comm '%s': %s: the send buffer is in %s memory but the receive buffer "
                       "in %s memory; both must be in the same place",
                       group ? group : "?", op ? op : "?", kind_name(send), kind_name(recv));
    tr_nccl_memkind k = send != TR_NCCL_MEM_NONE ? send : recv;
    if (k == TR_NCCL_MEM_HOST)
        return TR_OK;
    switch (mode) {
    case TR_NCCL_MODE_LOCAL: *route = TR_NCCL_ROUTE_LOCAL; break;
    case TR_NCCL_MODE_NCCL: *route = TR_NCCL_ROUTE_NCCL; break;
    default: *route = TR_NCCL_ROUTE_STAGED; break;
    }
    return TR_OK;
}

int tr_nccl_route_ordered(tr_nccl_route route, tr_comm_opkind kind)
{
    int collective = kind == TR_COMM_OP_ALLREDUCE || kind == TR_COMM_OP_REDUCE_SCATTER ||
                     kind == TR_COMM_OP_ALLGATHER || kind == TR_COMM_OP_BROADCAST;
    return collective && (route == TR_NCCL_ROUTE_NCCL || route == TR_NCCL_ROUTE_LOCAL);
}
