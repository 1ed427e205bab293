/* The mixture-of-experts keys (model.num_experts, model.moe_*, parallel.expert_model_parallel_size)
 * against each other, and what trident does not build with experts, refused by name (EP's
 * divisibility of the data-parallel size is checked where the world size is known:
 * train/world.c). */
#include <string.h>

#include "yaml/config_internal.h"

int config_check_moe(const tr_config *c)
{
    const tr_model_config *m = &c->model;
    char at[1300];
    int ep = c->parallel.expert_model_parallel_size;
    if (ep > 1 && m->num_experts == 0)
        return config_bad(c, "parallel.expert_model_parallel_size", "model.num_experts",
                          "parallel.expert_model_parallel_size = %d needs experts but "
                          "model.num_experts is 0%s; allowed: 1 for a dense model", ep,
                          config_set_at(c, "model.num_experts", at, sizeof at));
    if (ep > 1 && m->num_experts % ep)
        return config_bad(c, "parallel.expert_model_parallel_size", "model.num_experts",
                          "parallel.expert_model_parallel_size = %d does not divide "
                          "model.num_experts = %d%s: each EP rank runs E / EP of the experts; "
                          "allowed: a divisor of num_experts", ep, m->num_experts,
                          config_set_at(c, "model.num_experts", at, sizeof at));
    if (ep > 1 && c->parallel.context_parallel_size > 1)
        return config_bad(c, "parallel.expert_model_parallel_size",
                          "parallel.context_parallel_size",
                          "parallel.expert_model_parallel_size = %d with "
                          "parallel.context_parallel_size = %d is not built (experts are refused "
                          "with context parallelism); allowed: one of them 1", ep,
                          c->parallel.context_parallel_size);
    if (ep > 1 && c->training.device && !strcmp(c->training.device, "cuda"))
        return config_bad(c, "parallel.expert_model_parallel_size", "training.device",
                          "parallel.expert_model_parallel_size = %d with training.device cuda is "
                          "not built: the experts' rows are exchanged in host memory over UCX; "
                          "allowed: expert parallelism on training.device cpu", ep);
    if (m->moe_shared_expert_intermediate_size > 0)
        return config_bad(c, "model.moe_shared_expert_intermediate_size", NULL,
                          "model.moe_shared_expert_intermediate_size = %d: shared experts are "
                          "not built; allowed: 0", m->moe_shared_expert_intermediate_size);
    /* a value other than the default (a written config carries the defaults) */
    const char *keys[] = {"model.moe_router_topk", "model.moe_aux_loss_coeff",
                          "model.moe_z_loss_coeff", "model.moe_router_load_balancing_type",
                          "model.moe_router_pre_softmax"};
    int changed[] = {m->moe_router_topk != 2, m->moe_aux_loss_coeff != 0.0,
                     m->moe_z_loss_coeff != 0.0,
                     m->moe_router_load_balancing_type &&
                         strcmp(m->moe_router_load_balancing_type, "aux_loss") != 0,
                     m->moe_router_pre_softmax};
    if (m->num_experts == 0) {
        for (int i = 0; i < 5; i++)
            if (changed[i])
                return config_bad(c, keys[i], NULL,
                                  "%s is set but model.num_experts is 0%s; the router's settings "
                                  "need experts: num_experts >= 1", keys[i],
                                  config_set_at(c, "model.num_experts", at, sizeof at));
        return TR_OK;
    }
    if (m->moe_router_topk > m->num_experts)
        return config_bad(c, "model.moe_router_topk", "model.num_experts",
                          "model.moe_router_topk = %d is more than model.num_experts = %d%s; "
                          "allowed: 1 .. num_experts", m->moe_router_topk, m->num_experts,
                          config_set_at(c, "model.num_experts", at, sizeof at));
    if (m->moe_router_topk == 1 && !m->moe_router_pre_softmax)
        return config_bad(c, "model.moe_router_topk", "model.moe_router_pre_softmax",
                          "model.moe_router_topk = 1 with model.moe_router_pre_softmax false: "
                          "the softmax of one chosen logit is 1 and the router would get no "
                          "gradient (Megatron refuses it too); allowed: moe_router_pre_softmax "
                          "true with top-1");
    if (m->moe_aux_loss_coeff != 0.0 && changed[3])
        return config_bad(c, "model.moe_aux_loss_coeff", "model.moe_router_load_balancing_type",
                          "model.moe_aux_loss_coeff = %g with "
                          "model.moe_router_load_balancing_type none%s: the coefficient weighs "
                          "the aux_loss balancing; allowed: coefficient 0 with none",
                          m->moe_aux_loss_coeff,
                          config_set_at(c, "model.moe_router_load_balancing_type", at,
                                        sizeof at));
    /* what is not built with experts */
    if (c->finetune.lora_rank > 0)
        return config_bad(c, "finetune.lora.rank", "model.num_experts",
                          "LoRA fine-tuning (finetune.lora.rank %d) of a mixture of experts "
                          "(model.num_experts %d) is not built: the adapters target the dense "
                          "MLP's fc / fc_proj; allowed: lora rank 0 with experts",
                          c->finetune.lora_rank, m->num_experts);
    if (m->parallel_residual)
        return config_bad(c, "model.parallel_residual", "model.num_experts",
                          "model.parallel_residual with model.num_experts %d is not built: the "
                          "experts' layer is the sequential one; allowed: parallel_residual "
                          "false with experts", m->num_experts);
    return TR_OK;
}
