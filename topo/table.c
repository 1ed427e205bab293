/* The whole group table (for `trident topo` and the planner) and node placement. */
#include "topo/topo.h"

#include <stdio.h>
#include <string.h>

#include "core/core.h"

int tr_topo_table_build(const tr_topo *t, tr_topo_table *out)
{
    memset(out, 0, sizeof *out);
    out->topo = *t;
    for (int k = 0; k < TR_GROUP_KINDS; k++) {
        tr_group_kind kind = (tr_group_kind)k;
        int n = tr_topo_num_groups(t, kind), size = tr_topo_group_size(t, kind);
        size_t count;
        if (tr_mul_size((size_t)n, (size_t)size, &count))
            return TR_ERR_INVALID;
        int *rows = tr_alloc(count * sizeof *rows, "topology group table");
        if (!rows) {
            tr_topo_table_free(out);
            return TR_ERR_NOMEM;
        }
        out->num_groups[k] = n;
        out->group_size[k] = size;
        out->ranks[k] = rows;
        for (int g = 0; g < n; g++) {
            int rc = tr_topo_group_members(t, kind, g, rows + (size_t)g * (size_t)size);
            if (rc) {
                tr_topo_table_free(out);
                return rc;
            }
        }
    }
    return TR_OK;
}

void tr_topo_table_free(tr_topo_table *tab)
{
    if (!tab)
        return;
    for (int k = 0; k < TR_GROUP_KINDS; k++)
        tr_free(tab->ranks[k]);
    memset(tab, 0, sizeof *tab);
}

int tr_topo_node_of(const tr_topo *t, int gpus_per_node, int rank)
{
    (void)t;
    return gpus_per_node > 0 ? rank / gpus_per_node : 0;
}

/* Nodes spanned by an ascending member list under block placement. */
static int nodes_spanned(const int *members, int n, int gpus_per_node)
{
    int nodes = 0, last = -1;
    for (int i = 0; i < n; i++) {
        int node = members[i] / gpus_per_node;
        if (node != last)
            nodes++, last = node;
    }
    return nodes;
}

int tr_topo_group_nodes(const tr_topo *t, int gpus_per_node, tr_group_kind kind, int index)
{
    if (gpus_per_node < 1) {
        tr_fail(TR_ERR_CONFIG, "gpus per node %d must be at least 1", gpus_per_node);
        return -1;
    }
    int members[2], size = tr_topo_group_size(t, kind);
    int *buf = size <= 2 ? members : tr_alloc((size_t)size * sizeof *buf, "group members");
    if (!buf)
        return -1;
    int rc = tr_topo_group_members(t, kind, index, buf);
    int nodes = rc ? -1 : nodes_spanned(buf, size, gpus_per_node);
    if (buf != members)
        tr_free(buf);
    return nodes;
}

int tr_topo_node_report(const tr_topo *t, int gpus_per_node, tr_node_report *out)
{
    memset(out, 0, sizeof *out);
    out->first_crossing_tp = -1;
    if (gpus_per_node < 1)
        return tr_fail(TR_ERR_CONFIG, "gpus per node %d must be at least 1", gpus_per_node);
    out->gpus_per_node = gpus_per_node;
    out->num_nodes = (t->world + gpus_per_node - 1) / gpus_per_node;
    int max_size = 0;
    for (int k = 0; k < TR_GROUP_KINDS; k++) {
        int s = tr_topo_group_size(t, (tr_group_kind)k);
        max_size = s > max_size ? s : max_size;
    }
    int *buf = tr_alloc((size_t)max_size * sizeof *buf, "group members");
    if (!buf)
        return TR_ERR_NOMEM;
    int rc = TR_OK;
    for (int k = 0; k < TR_GROUP_KINDS && !rc; k++) {
        tr_group_kind kind = (tr_group_kind)k;
        int n = tr_topo_num_groups(t, kind), size = tr_topo_group_size(t, kind);
        for (int g = 0; g < n && !rc; g++) {
            if ((rc = tr_topo_group_members(t, kind, g, buf)))
                break;
            int nodes = nodes_spanned(buf, size, gpus_per_node);
            if (nodes > out->max_nodes[k])
                out->max_nodes[k] = nodes;
            if (nodes > 1) {
                out->crossing[k]++;
                if (kind == TR_GROUP_TP && out->first_crossing_tp < 0)
                    out->first_crossing_tp = g;
            }
        }
    }
    if (!rc && out->first_crossing_tp >= 0 &&
        !(rc = tr_topo_group_members(t, TR_GROUP_TP, out->first_crossing_tp, buf)))
        snprintf(out->warning, sizeof out->warning,
                 "%d of %d tensor-parallel groups span more than one node (e.g. ranks %d..%d "
                 "with %d GPUs per node): TP all-reduces will cross the inter-node network; "
                 "choose a TP size that divides %d",
                 out->crossing[TR_GROUP_TP], tr_topo_num_groups(t, TR_GROUP_TP), buf[0],
                 buf[t->tp - 1], gpus_per_node, gpus_per_node);
    tr_free(buf);
    return rc;
}
