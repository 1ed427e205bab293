/* The rank grid: rank <-> (dp, tp, pp) and the members of every group, as pure functions.
 *
 * A group kind fixes some dimensions and varies the others. Both the member list and the
 * group numbering walk dimensions fastest-stride first, so members come out ascending and
 * groups numbered by index come out ordered by first rank. The dp coordinate is walked as two
 * digits, ep (size EP, dp's stride) and edp (size DP/EP, EP times it): a kind varying both or
 * fixing both sees the one dp digit it saw before, which keeps EP = 1's groups unchanged. */
#include "topo/topo.h"

#include <string.h>

#include "core/core.h"

enum { DIM_TP = 0, DIM_DP = 1, DIM_PP = 2, DIM_CP = 3, DIM_EP = 4, NDIMS = 5 }; /* DIM_DP: edp */

typedef struct {
    int n;          /* dimensions used, fastest stride first */
    int size[NDIMS];
    int stride[NDIMS];
} dim_walk;

static void dim_size_stride(const tr_topo *t, int dim, int *size, int *stride)
{
    switch (dim) {
    case DIM_TP: *size = t->tp, *stride = t->stride_tp; break;
    case DIM_EP: *size = t->ep, *stride = t->stride_dp; break;
    case DIM_DP: *size = t->dp / t->ep, *stride = t->stride_dp * t->ep; break;
    case DIM_CP: *size = t->cp, *stride = t->stride_cp; break;
    default: *size = t->pp, *stride = t->stride_pp; break;
    }
}

/* Dimensions in increasing stride order (CP right after TP in both orders, ep below edp). */
static void dims_by_stride(const tr_topo *t, int dims[NDIMS])
{
    dims[0] = DIM_TP;
    dims[1] = DIM_CP;
    if (t->order == TR_ORDER_TP_DP_PP)
        dims[2] = DIM_EP, dims[3] = DIM_DP, dims[4] = DIM_PP;
    else
        dims[2] = DIM_PP, dims[3] = DIM_EP, dims[4] = DIM_DP;
}

/* Which dimensions vary inside a group of `kind` (bit d set = dimension d varies). */
static unsigned varying_mask(tr_group_kind kind)
{
    switch (kind) {
    case TR_GROUP_TP: return 1u << DIM_TP;
    case TR_GROUP_DP: return (1u << DIM_EP) | (1u << DIM_DP);
    case TR_GROUP_CP: return 1u << DIM_CP;
    case TR_GROUP_DP_CP: return (1u << DIM_EP) | (1u << DIM_DP) | (1u << DIM_CP);
    case TR_GROUP_EP: return 1u << DIM_EP;
    case TR_GROUP_EDP: return (1u << DIM_DP) | (1u << DIM_CP);
    case TR_GROUP_MP: return (1u << DIM_TP) | (1u << DIM_PP);
    default: return 1u << DIM_PP; /* PP and EMBED */
    }
}

/* The varying (want_varying = 1) or fixed dimensions of `kind`, fastest first. */
static dim_walk walk_for(const tr_topo *t, tr_group_kind kind, int want_varying)
{
    int dims[NDIMS];
    dims_by_stride(t, dims);
    unsigned mask = varying_mask(kind);
    dim_walk w = {0};
    for (int i = 0; i < NDIMS; i++) {
        int varies = (mask >> dims[i]) & 1u;
        if (varies == want_varying) {
            dim_size_stride(t, dims[i], &w.size[w.n], &w.stride[w.n]);
            w.n++;
        }
    }
    return w;
}

/* Mixed-radix number `value` over the walk's sizes -> sum of digit * stride. */
static int walk_offset(const dim_walk *w, int value)
{
    int off = 0;
    for (int i = 0; i < w->n; i++) {
        off += (value % w->size[i]) * w->stride[i];
        value /= w->size[i];
    }
    return off;
}

/* The inverse for one rank: its digits along the walk's dimensions as a mixed-radix number. */
static int walk_value(const dim_walk *w, int rank)
{
    int value = 0, scale = 1;
    for (int i = 0; i < w->n; i++) {
        int digit = (rank / w->stride[i]) % w->size[i];
        value += digit * scale;
        scale *= w->size[i];
    }
    return value;
}

int tr_topo_parse_order(const char *s, tr_topo_order *out)
{
    if (!s || !*s || !strcmp(s, "tp-dp-pp")) {
        *out = TR_ORDER_TP_DP_PP;
        return TR_OK;
    }
    if (!strcmp(s, "tp-pp-dp")) {
        *out = TR_ORDER_TP_PP_DP;
        return TR_OK;
    }
    return tr_fail(TR_ERR_CONFIG, "unknown rank order '%s'; allowed: tp-dp-pp (default), tp-pp-dp",
                   s);
}

const char *tr_topo_order_name(tr_topo_order order)
{
    return order == TR_ORDER_TP_PP_DP ? "tp-pp-dp" : "tp-dp-pp";
}

const char *tr_group_kind_name(tr_group_kind kind)
{
    static const char *names[TR_GROUP_KINDS] = {"tp", "dp", "pp", "model_parallel",
                                                "embedding", "cp", "dp_cp", "ep", "edp"};
    return (unsigned)kind < TR_GROUP_KINDS ? names[kind] : "unknown";
}

int tr_topo_init(tr_topo *t, int world, int tp, int pp, const char *order)
{
    return tr_topo_init_cp(t, world, tp, 1, pp, order);
}

int tr_topo_init_cp(tr_topo *t, int world, int tp, int cp, int pp, const char *order)
{
    return tr_topo_init_ep(t, world, tp, cp, pp, 1, order);
}

int tr_topo_init_ep(tr_topo *t, int world, int tp, int cp, int pp, int ep, const char *order)
{
    memset(t, 0, sizeof *t);
    tr_topo_order ord;
    if (tr_topo_parse_order(order, &ord))
        return TR_ERR_CONFIG;
    if (world < 1 || tp < 1 || pp < 1)
        return tr_fail(TR_ERR_CONFIG,
                       "world size %d, tensor parallel size %d, pipeline parallel size %d: "
                       "each must be at least 1",
                       world, tp, pp);
    if (cp < 1)
        return tr_fail(TR_ERR_CONFIG, "context parallel size %d must be at least 1", cp);
    if (world > TR_TOPO_MAX_WORLD)
        return tr_fail(TR_ERR_CONFIG, "world size %d: at most %d ranks", world, TR_TOPO_MAX_WORLD);
    long long model = (long long)tp * pp * cp;
    if (model > world || world % model != 0) {
        if (cp == 1)
            return tr_fail(TR_ERR_CONFIG,
                           "world size %d is not divisible by tensor parallel size %d x "
                           "pipeline parallel size %d = %lld",
                           world, tp, pp, model);
        return tr_fail(TR_ERR_CONFIG,
                       "world size %d is not divisible by tensor parallel size %d x context "
                       "parallel size %d x pipeline parallel size %d = %lld",
                       world, tp, cp, pp, model);
    }
    t->world = world;
    t->tp = tp;
    t->pp = pp;
    t->cp = cp;
    t->dp = (int)(world / model);
    if (ep < 1 || t->dp % ep) {
        int dp = t->dp;
        memset(t, 0, sizeof *t);
        if (ep < 1)
            return tr_fail(TR_ERR_CONFIG, "expert parallel size %d must be at least 1", ep);
        return tr_fail(TR_ERR_CONFIG,
                       "data-parallel size %d (world %d / (tp %d x cp %d x pp %d)) is not "
                       "divisible by expert parallel size %d",
                       dp, world, tp, cp, pp, ep);
    }
    t->ep = ep;
    t->order = ord;
    t->stride_tp = 1;
    t->stride_cp = tp;
    if (ord == TR_ORDER_TP_DP_PP) {
        t->stride_dp = tp * cp;
        t->stride_pp = tp * cp * t->dp;
    } else {
        t->stride_pp = tp * cp;
        t->stride_dp = tp * cp * pp;
    }
    return TR_OK;
}

tr_coords tr_topo_coords(const tr_topo *t, int rank)
{
    tr_coords c;
    c.tp = (rank / t->stride_tp) % t->tp;
    c.dp = (rank / t->stride_dp) % t->dp;
    c.pp = (rank / t->stride_pp) % t->pp;
    c.cp = (rank / t->stride_cp) % t->cp;
    return c;
}

int tr_topo_rank(const tr_topo *t, tr_coords c)
{
    return c.tp * t->stride_tp + c.dp * t->stride_dp + c.pp * t->stride_pp + c.cp * t->stride_cp;
}

int tr_topo_num_groups(const tr_topo *t, tr_group_kind kind)
{
    if (kind == TR_GROUP_EMBED)
        return t->world / t->pp;
    int size = tr_topo_group_size(t, kind);
    return size > 0 ? t->world / size : 0;
}

int tr_topo_group_size(const tr_topo *t, tr_group_kind kind)
{
    switch (kind) {
    case TR_GROUP_TP: return t->tp;
    case TR_GROUP_DP: return t->dp;
    case TR_GROUP_PP: return t->pp;
    case TR_GROUP_MP: return t->tp * t->pp;
    case TR_GROUP_CP: return t->cp;
    case TR_GROUP_DP_CP: return t->dp * t->cp;
    case TR_GROUP_EP: return t->ep;
    case TR_GROUP_EDP: return t->dp / t->ep * t->cp;
    case TR_GROUP_EMBED: return t->pp > 1 ? 2 : 1;
    default: return 0;
    }
}

static int check_kind(tr_group_kind kind)
{
    if ((unsigned)kind >= TR_GROUP_KINDS)
        return tr_fail(TR_ERR_INVALID, "unknown group kind %d", (int)kind);
    return TR_OK;
}

int tr_topo_group_members(const tr_topo *t, tr_group_kind kind, int index, int *out)
{
    if (check_kind(kind))
        return TR_ERR_INVALID;
    int n = tr_topo_num_groups(t, kind);
    if (index < 0 || index >= n)
        return tr_fail(TR_ERR_INVALID, "%s group %d does not exist (there are %d)",
                       tr_group_kind_name(kind), index, n);
    dim_walk fixed = walk_for(t, kind, 0), vary = walk_for(t, kind, 1);
    int base = walk_offset(&fixed, index);
    if (kind == TR_GROUP_EMBED) {
        out[0] = base;
        if (t->pp > 1)
            out[1] = base + (t->pp - 1) * t->stride_pp;
        return TR_OK;
    }
    int size = tr_topo_group_size(t, kind);
    if (vary.n == 1) {
        for (int i = 0; i < size; i++)
            out[i] = base + i * vary.stride[0];
    } else {
        for (int i = 0; i < size; i++)
            out[i] = base + walk_offset(&vary, i);
    }
    return TR_OK;
}

int tr_topo_group_of(const tr_topo *t, tr_group_kind kind, int rank, int *index, int *pos)
{
    if (check_kind(kind))
        return TR_ERR_INVALID;
    if (rank < 0 || rank >= t->world)
        return tr_fail(TR_ERR_INVALID, "rank %d is outside the world of %d ranks", rank,
                       t->world);
    dim_walk fixed = walk_for(t, kind, 0), vary = walk_for(t, kind, 1);
    int idx = walk_value(&fixed, rank);
    int p = walk_value(&vary, rank);
    if (kind == TR_GROUP_EMBED) {
        if (p == 0)
            p = 0;
        else if (p == t->pp - 1)
            p = 1;
        else
            idx = -1, p = -1;
    }
    if (index)
        *index = idx;
    if (pos)
        *pos = p;
    return TR_OK;
}

int tr_topo_dp_group_index(const tr_topo *t, int tp, int pp)
{
    tr_coords c = {.dp = 0, .tp = tp, .pp = pp, .cp = 0};
    int idx = -1;
    return tr_topo_group_of(t, TR_GROUP_DP, tr_topo_rank(t, c), &idx, NULL) ? -1 : idx;
}

int tr_topo_rank_groups(const tr_topo *t, int rank, tr_rank_groups *out)
{
    memset(out, 0, sizeof *out);
    if (rank < 0 || rank >= t->world)
        return tr_fail(TR_ERR_INVALID, "rank %d is outside the world of %d ranks", rank,
                       t->world);
    size_t total = 0;
    for (int k = 0; k < TR_GROUP_KINDS; k++)
        total += (size_t)tr_topo_group_size(t, (tr_group_kind)k);
    int *buf = tr_alloc(total * sizeof *buf, "rank group lists");
    if (!buf)
        return TR_ERR_NOMEM;
    out->rank = rank;
    out->coords = tr_topo_coords(t, rank);
    size_t used = 0;
    for (int k = 0; k < TR_GROUP_KINDS; k++) {
        tr_group_kind kind = (tr_group_kind)k;
        int rc = tr_topo_group_of(t, kind, rank, &out->index[k], &out->pos[k]);
        if (rc) {
            tr_free(buf);
            memset(out, 0, sizeof *out);
            return rc;
        }
        if (out->index[k] < 0) {
            out->members[k] = NULL;
            out->size[k] = 0;
            continue;
        }
        out->members[k] = buf + used;
        out->size[k] = tr_topo_group_size(t, kind);
        if ((rc = tr_topo_group_members(t, kind, out->index[k], out->members[k]))) {
            tr_free(buf);
            memset(out, 0, sizeof *out);
            return rc;
        }
        used += (size_t)out->size[k];
    }
    out->is_first_stage = out->coords.pp == 0;
    out->is_last_stage = out->coords.pp == t->pp - 1;
    const int *pp_group = out->members[TR_GROUP_PP];
    out->next_pp_rank = pp_group[(out->coords.pp + 1) % t->pp];
    out->prev_pp_rank = pp_group[(out->coords.pp + t->pp - 1) % t->pp];
    return TR_OK;
}

void tr_rank_groups_free(tr_rank_groups *g)
{
    if (!g)
        return;
    tr_free(g->members[TR_GROUP_TP]);
    memset(g, 0, sizeof *g);
}
