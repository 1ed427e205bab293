/* One rank's world: the rank grid from the config and one communicator per group. */
#include "train/world.h"

#include <string.h>

#include "core/core.h"

static int split_group(train_world *w, tr_group_kind kind, const char *name, tr_comm **out)
{
    int index = w->groups.index[kind];
    int color = index < 0 ? TR_COMM_COLOR_NONE : index;
    int rc = tr_comm_split(w->world, color, w->groups.pos[kind] < 0 ? 0 : w->groups.pos[kind],
                           name, out);
    if (rc)
        return tr_fail_context(rc, "creating the %s groups", name);
    return TR_OK;
}

int world_create(const tr_config *cfg, train_world *out)
{
    memset(out, 0, sizeof *out);
    tr_comm_config cc = tr_comm_config_default();
    cc.timeout_s = cfg->parallel.comm_timeout_s;
    cc.progress_thread = 1; /* data-parallel reductions advance while backward computes */
    /* device buffers on CUDA: NCCL (it stages through host memory when ranks share a GPU) */
    cc.backend = strcmp(cfg->training.device, "cuda") ? TR_COMM_BACKEND_UCX
                                                       : TR_COMM_BACKEND_NCCL;
    int rc = tr_comm_init_world(&cc, &out->world);
    if (rc)
        return rc;
    out->rank = tr_comm_rank(out->world);
    out->size = tr_comm_size(out->world);
    tr_log_set_rank(out->size > 1 ? out->rank : -1);
    int tp = cfg->parallel.tensor_model_parallel_size, pp = cfg->parallel.pipeline_model_parallel_size;
    if (out->size % (tp * pp)) {
        rc = tr_fail(TR_ERR_CONFIG,
                     "%s: world size %d is not divisible by tensor_model_parallel_size %d x "
                     "pipeline_model_parallel_size %d",
                     tr_config_where(cfg, "parallel.tensor_model_parallel_size"), out->size, tp, pp);
        goto fail;
    }
    rc = tr_topo_init(&out->topo, out->size, tp, pp, cfg->parallel.order);
    if (!rc)
        rc = tr_topo_rank_groups(&out->topo, out->rank, &out->groups);
    if (rc)
        goto fail;
    int dp = out->topo.dp;
    int global = cfg->training.global_batch_size, mb = cfg->training.micro_batch_size;
    if (global % (mb * dp)) {
        rc = tr_fail(TR_ERR_CONFIG,
                     "%s: global_batch_size %d is not divisible by micro_batch_size %d x "
                     "data-parallel size %d (world %d / (tp %d x pp %d))",
                     tr_config_where(cfg, "training.global_batch_size"), global, mb, dp,
                     out->size, tp, pp);
        goto fail;
    }
    if ((rc = split_group(out, TR_GROUP_TP, "tp", &out->tp)) ||
        (rc = split_group(out, TR_GROUP_DP, "dp", &out->dp)) ||
        (rc = split_group(out, TR_GROUP_PP, "pp", &out->pp)) ||
        (rc = split_group(out, TR_GROUP_MP, "model_parallel", &out->mp)) ||
        (rc = split_group(out, TR_GROUP_EMBED, "embedding", &out->embed)))
        goto fail;
    if (pp == 1 && out->embed) { /* one stage holds both ends: nothing to tie across ranks */
        tr_comm_destroy(out->embed);
        out->embed = NULL;
    }
    return TR_OK;
fail:
    world_destroy(out);
    return rc;
}

void world_destroy(train_world *w)
{
    tr_comm_destroy(w->embed);
    tr_comm_destroy(w->mp);
    tr_comm_destroy(w->pp);
    tr_comm_destroy(w->dp);
    tr_comm_destroy(w->tp);
    tr_comm_destroy(w->world);
    tr_rank_groups_free(&w->groups);
    memset(w, 0, sizeof *w);
}
