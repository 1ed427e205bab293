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
} train_world;

/* Collective over the job: reads RANK/WORLD_SIZE/MASTER_* (one process without them),
 * checks the layout fits the world size, and splits every group. */
TR_MUST_CHECK int world_create(const tr_config *cfg, train_world *out);
void world_destroy(train_world *w);

#endif
