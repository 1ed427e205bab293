/* train/ internal: one rank's place in the job — its grid coordinates and every process
 * group as a communicator (Megatron's parallel_state: the one place that owns them). */
#ifndef TR_WORLD_H
#define TR_WORLD_H

#include "comm/comm.h"
#include "topo/topo.h"
#include "yaml/config.h"

typedef struct {
    tr_topo topo;
    tr_rank_groups groups;
    int rank, size;
    tr_comm *world;
    tr_comm *tp;    /* tensor-parallel group (size TP) */
    tr_comm *dp;    /* data-parallel group of this (tp, pp) coordinate (size DP) */
    tr_comm *pp;    /* pipeline group (size PP) */
    tr_comm *mp;    /* model-parallel group: TP x PP ranks of this dp coordinate */
    tr_comm *embed; /* first and last stage of this PP group; NULL on middle stages or PP = 1 */
    tr_comm *cp;    /* context-parallel group (size CP); NULL when CP = 1 */
    tr_comm *dp_cp; /* DP x CP ranks of this (tp, pp) coordinate, where gradients are summed
                     * and ZeRO shards; NULL when CP = 1 (then it is dp) */
    tr_comm *ep;    /* expert-parallel group (size EP, exchanging tokens); NULL when EP = 1 */
    tr_comm *edp;   /* expert-data-parallel group (size DP / EP: the ranks holding this rank's
                     * experts, which sum their gradients); NULL when EP = 1 */
} train_world;

/* The group the data-parallel gradient reduction and ZeRO run over: dp_cp, or dp. */
static inline tr_comm *world_grad_comm(const train_world *w) { return w->dp_cp ? w->dp_cp : w->dp; }

/* Collective over the job: reads RANK/WORLD_SIZE/MASTER_* (one process without them),
 * checks the layout (DP x CP x TP x PP, EP dividing DP) fits the world size, and splits every
 * group. */
TR_MUST_CHECK int world_create(const tr_config *cfg, train_world *out);
void world_destroy(train_world *w);

#endif
