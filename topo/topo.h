/* topo/ — the rank grid of 3D parallelism and every process group built on it.
 *
 * Contract:
 *  - A layout is W = DP x CP x TP x PP ranks (CP: context parallel, 1 unless asked). The
 *    order names the dimensions from fastest to slowest: "tp-dp-pp" (default, Megatron:
 *    global = tp + cp*TP + dp*TP*CP + pp*TP*CP*DP) or "tp-pp-dp" (global = tp + cp*TP +
 *    pp*TP*CP + dp*TP*CP*PP); CP always sits right after TP (Megatron's tp-cp-ep-dp-pp), so
 *    with CP = 1 every rank and group is what it was without the dimension.
 *  - Group kinds: TP (ranks differing only in tp), DP (only in dp: the DP group of each
 *    (tp, cp, pp) coordinate), PP (only in pp), MP = model parallel (same dp and cp: TP x PP
 *    ranks), EMBED (first and last rank of each PP group; just the first when PP = 1; ranks of
 *    middle stages belong to no embedding group), CP (only in cp: the ranks that split one
 *    sample's sequence) and DP_CP (dp and cp vary: Megatron's dp-cp group, the ranks that hold
 *    the same weights and sum their gradients), EP and EDP (expert parallelism, EP ranks
 *    dividing DP: dp = edp * EP + ep, Megatron's tp-cp-ep-dp-pp; EP: the EP consecutive dp
 *    coordinates of one (tp, cp, edp, pp) that exchange tokens and split the experts; EDP:
 *    "expert data parallel", edp and cp vary, the D/EP x CP ranks holding the same experts,
 *    which sum their expert gradients). With EP = 1 the EP groups are single ranks, EDP is
 *    DP_CP, and every other group is what it was without the dimension.
 *  - Groups of a kind all have the same size and are numbered 0..n-1 in order of their first
 *    rank; a group's members are listed in ascending rank order.
 *  - Everything is a pure function of (W, TP, CP, PP, EP, order): one rank asks for its own
 *    groups in O(TP*PP + DP*CP) with tr_topo_rank_groups(); tr_topo_table_build() lists every
 *    group of every kind in O(W) (for `trident topo` and the planner).
 *  - Node awareness assumes block placement (rank r on node r / gpus_per_node, as torchrun and
 *    Slurm's default block distribution do).
 *  - Invalid input (W not divisible by TP*CP*PP, DP not by EP, sizes < 1, unknown order) is
 *    TR_ERR_CONFIG with a message naming the values. */
#ifndef TR_TOPO_H
#define TR_TOPO_H

/* The largest world the grid (and the communicator) takes: 2^20 ranks. */
#define TR_TOPO_MAX_WORLD (1 << 20)

#include "core/core.h"

typedef enum { TR_ORDER_TP_DP_PP = 0, TR_ORDER_TP_PP_DP = 1 } tr_topo_order;

typedef enum {
    TR_GROUP_TP = 0,
    TR_GROUP_DP,
    TR_GROUP_PP,
    TR_GROUP_MP,    /* model parallel: TP x PP ranks of one dp coordinate */
    TR_GROUP_EMBED, /* first and last stage of each PP group */
    TR_GROUP_CP,    /* context parallel: the ranks splitting one sample's sequence */
    TR_GROUP_DP_CP, /* DP x CP ranks of one (tp, pp) coordinate: gradients are summed there */
    TR_GROUP_EP,    /* expert parallel: EP consecutive dp coordinates that exchange tokens */
    TR_GROUP_EDP,   /* expert data parallel: D/EP x CP ranks holding the same experts */
    TR_GROUP_KINDS
} tr_group_kind;

typedef struct {
    int dp, tp, pp, cp;
} tr_coords;

typedef struct {
    int world, tp, pp, dp, cp;
    tr_topo_order order;
    int stride_tp, stride_dp, stride_pp; /* global = tp*stride_tp + dp*stride_dp + pp*stride_pp */
    int stride_cp;                       /* + cp*stride_cp */
    int ep;                              /* expert parallel size, divides dp (1: none) */
} tr_topo;

/* Build a layout. `order` NULL or "" means "tp-dp-pp". tr_topo_init: CP = 1. */
TR_MUST_CHECK int tr_topo_init(tr_topo *t, int world, int tp, int pp, const char *order);
TR_MUST_CHECK int tr_topo_init_cp(tr_topo *t, int world, int tp, int cp, int pp,
                                  const char *order);
/* tr_topo_init_cp plus the expert parallel size ep (>= 1, dividing the data-parallel size). */
TR_MUST_CHECK int tr_topo_init_ep(tr_topo *t, int world, int tp, int cp, int pp, int ep,
                                  const char *order);
TR_MUST_CHECK int tr_topo_parse_order(const char *s, tr_topo_order *out);
const char *tr_topo_order_name(tr_topo_order order);
/* "tp", "dp", "pp", "model_parallel", "embedding", "cp", "dp_cp", "ep", "edp". */
const char *tr_group_kind_name(tr_group_kind kind);

/* rank <-> coordinates; rank must be in [0, world) / coordinates in range. */
tr_coords tr_topo_coords(const tr_topo *t, int rank);
int tr_topo_rank(const tr_topo *t, tr_coords c);

/* Groups of one kind: how many, and how many members each has. */
int tr_topo_num_groups(const tr_topo *t, tr_group_kind kind);
int tr_topo_group_size(const tr_topo *t, tr_group_kind kind);
/* Members of group `index` of `kind`, ascending, into out[tr_topo_group_size()]. */
TR_MUST_CHECK int tr_topo_group_members(const tr_topo *t, tr_group_kind kind, int index, int *out);
/* The group of `kind` that holds `rank` (its index) and the rank's position in it;
 * *index = -1 (and TR_OK) for an EMBED query on a middle-stage rank. */
TR_MUST_CHECK int tr_topo_group_of(const tr_topo *t, tr_group_kind kind, int rank, int *index, int *pos);
/* The DP group of coordinate (tp, pp) (cp 0): its index among the DP groups. */
int tr_topo_dp_group_index(const tr_topo *t, int tp, int pp);

/* Everything one rank needs, as parallel_state gives it in Megatron. */
typedef struct {
    int rank;
    tr_coords coords;
    int index[TR_GROUP_KINDS];   /* group index of each kind; EMBED: -1 when not a member */
    int pos[TR_GROUP_KINDS];     /* position of this rank in each of its groups */
    int size[TR_GROUP_KINDS];    /* member count; EMBED: 0 when not a member */
    int *members[TR_GROUP_KINDS]; /* ascending member lists (one allocation; EMBED NULL when
                                     not a member) */
    int is_first_stage, is_last_stage;
    /* Neighbours in the PP group, wrapping around (Megatron's convention: the last stage's
     * next is the first stage, as the interleaved schedule needs). */
    int next_pp_rank, prev_pp_rank;
} tr_rank_groups;

TR_MUST_CHECK int tr_topo_rank_groups(const tr_topo *t, int rank, tr_rank_groups *out);
void tr_rank_groups_free(tr_rank_groups *g);

/* Every group of every kind: kinds[k] is num_groups[k] x group_size[k] ranks, row g the
 * members of group g (rows ascending by first rank). */
typedef struct {
    tr_topo topo;
    int num_groups[TR_GROUP_KINDS];
    int group_size[TR_GROUP_KINDS];
    int *ranks[TR_GROUP_KINDS];
} tr_topo_table;

TR_MUST_CHECK int tr_topo_table_build(const tr_topo *t, tr_topo_table *out);
void tr_topo_table_free(tr_topo_table *tab);
static inline const int *tr_topo_table_group(const tr_topo_table *tab, tr_group_kind kind,
                                             int index)
{
    return tab->ranks[kind] + (long)index * tab->group_size[kind];
}

/* Node placement: which groups span more than one node when each node holds
 * gpus_per_node consecutive ranks (the last node may hold fewer). */
typedef struct {
    int gpus_per_node;
    int num_nodes;
    int crossing[TR_GROUP_KINDS];  /* groups of each kind spanning > 1 node */
    int max_nodes[TR_GROUP_KINDS]; /* most nodes one group of the kind spans */
    int first_crossing_tp;         /* index of the first TP group that crosses, or -1 */
    char warning[256];             /* non-empty when a TP group crosses nodes */
} tr_node_report;

int tr_topo_node_of(const tr_topo *t, int gpus_per_node, int rank);
/* Nodes spanned by group `index` of `kind`; -1 (message set) on bad input. */
int tr_topo_group_nodes(const tr_topo *t, int gpus_per_node, tr_group_kind kind, int index);
TR_MUST_CHECK int tr_topo_node_report(const tr_topo *t, int gpus_per_node, tr_node_report *out);

#endif
