/* parallel.context_parallel_size (Megatron's --context-parallel-size) against the other keys:
 * what context parallelism does not support is refused by name (16-bit precision, fine-tuning
 * data and LoRA run: model/gpt_cp.c). */
#include <string.h>

#include "yaml/config_internal.h"

int config_check_cp(const tr_config *c)
{
    int cp = c->parallel.context_parallel_size, T = c->model.seq_length;
    const char *key = "parallel.context_parallel_size";
    if (cp <= 1)
        return TR_OK;
    if (T % (2 * cp))
        return config_bad(c, "model.seq_length", key,
                          "model.seq_length = %d is not divisible by 2 x "
                          "parallel.context_parallel_size = %d: each sample is split into 2 x CP "
                          "equal chunks (rank r holds chunks r and 2 CP - 1 - r)", T, 2 * cp);
    int sft = c->data.dataset_type && !strcmp(c->data.dataset_type, "sft");
    struct {
        int on;
        const char *key, *what;
    } refused[] = {
        {c->model.num_experts > 0, "model.num_experts", "mixture of experts"},
        {sft && c->model.attention_dropout > 0, "model.attention_dropout",
         "fine-tuning data (data.dataset_type sft) and attention dropout"},
    };
    int tp = c->parallel.tensor_model_parallel_size, mb = c->training.micro_batch_size;
    if (c->parallel.sequence_parallel && tp > 1 && (long long)mb * (T / cp) % tp)
        return config_bad(c, "parallel.sequence_parallel", key,
                          "sequence parallelism splits each rank's micro_batch_size x seq_length "
                          "/ context_parallel_size = %d x %d token rows over "
                          "tensor_model_parallel_size %d, which needs them to be divisible",
                          mb, T / cp, tp);
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        if (refused[i].on)
            return config_bad(c, key, refused[i].key,
                              "parallel.context_parallel_size = %d with %s is not supported "
                              "(%s); allowed: context_parallel_size 1", cp, refused[i].what,
                              refused[i].key);
    return TR_OK;
}
