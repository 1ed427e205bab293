/* parallel.context_parallel_size (Megatron's --context-parallel-size) against the other keys:
 * what context parallelism does not support is refused by name. */
#include "yaml/config_internal.h"

int config_check_cp(const tr_config *c)
{
    int cp = c->parallel.context_parallel_size;
    if (cp <= 1)
        return TR_OK;
    return config_bad(c, "parallel.context_parallel_size", NULL,
                      "parallel.context_parallel_size = %d: context parallelism is not built "
                      "yet; allowed: 1", cp);
}
