/* Backend lookup by name. */
#include "kernels/kernels.h"

#include "core/core.h"

#include <string.h>

const tr_kernels *tr_kernels_get(const char *name)
{
    if (!name) {
        tr_fail(TR_ERR_CONFIG, "no kernel backend named (expected \"cpu\" or \"cuda\")");
        return NULL;
    }
    if (strcmp(name, "cpu") == 0)
        return tr_kernels_cpu();
    if (strcmp(name, "cuda") == 0) {
        tr_fail(TR_ERR_CONFIG, "the CUDA backend is not built in");
        return NULL;
    }
    tr_fail(TR_ERR_CONFIG, "unknown kernel backend \"%s\" (expected \"cpu\" or \"cuda\")", name);
    return NULL;
}
