/* Layer partition over P stages x v chunks (see pp.h: virtual stage vs = c*P + r holds the
 * vs-th contiguous block of layers; the remainder of an even split goes to the middle blocks). */
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "pp/pp.h"

/* "[5, 6, 6, 5]" (at most 16 values, then ", ..."). */
static void format_list(const int *v, int n, char *buf, size_t cap)
{
    size_t len = 0;
    buf[0] = '\0';
    len += (size_t)snprintf(buf + len, cap - len, "[");
    for (int i = 0; i < n && len < cap; i++) {
        if (i == 16) {
            len += (size_t)snprintf(buf + len, cap - len, ", ...");
            break;
        }
        len += (size_t)snprintf(buf + len, cap - len, "%s%d", i ? ", " : "", v[i]);
    }
    if (len < cap)
        snprintf(buf + len, cap - len, "]");
}

int tr_pp_partition_layers(int num_layers, int P, int v, const int *explicit_layers,
                           int n_explicit, tr_pp_partition *out)
{
    if (!out)
        return tr_fail(TR_ERR_INVALID, "tr_pp_partition_layers: out is NULL");
    memset(out, 0, sizeof *out);
    if (num_layers < 1)
        return tr_fail(TR_ERR_CONFIG, "num_layers must be >= 1 (got %d)", num_layers);
    if (P < 1 || P > TR_PP_MAX_STAGES)
        return tr_fail(TR_ERR_CONFIG, "pipeline_model_parallel_size must be in 1..%d (got %d)",
                       TR_PP_MAX_STAGES, P);
    if (v < 1 || (long)P * v > TR_PP_MAX_VIRTUAL)
        return tr_fail(TR_ERR_CONFIG,
                       "virtual_pipeline_model_parallel_size must be >= 1 with "
                       "pipeline_model_parallel_size x virtual_pipeline_model_parallel_size <= "
                       "%d (got %d x %d)",
                       TR_PP_MAX_VIRTUAL, P, v);
    const int B = P * v;
    out->num_layers = num_layers;
    out->P = P;
    out->v = v;
    if (explicit_layers || n_explicit) {
        char list[256];
        if (!explicit_layers || n_explicit < 0)
            return tr_fail(TR_ERR_INVALID,
                           "tr_pp_partition_layers: %d explicit entries but no list", n_explicit);
        format_list(explicit_layers, n_explicit, list, sizeof list);
        if (n_explicit != B) {
            if (v == 1)
                return tr_fail(TR_ERR_CONFIG,
                               "parallel.pipeline_layers %s has %d entries; it needs one per "
                               "pipeline stage (pipeline_model_parallel_size = %d)",
                               list, n_explicit, P);
            return tr_fail(TR_ERR_CONFIG,
                           "parallel.pipeline_layers %s has %d entries; with interleaving it "
                           "needs one per virtual stage, pipeline_model_parallel_size x "
                           "virtual_pipeline_model_parallel_size = %d x %d = %d, in order "
                           "chunk 0 of stages 0..%d, then chunk 1, ...",
                           list, n_explicit, P, v, B, P - 1);
        }
        long sum = 0;
        for (int b = 0; b < B; b++) {
            if (explicit_layers[b] < 1) {
                if (v == 1)
                    return tr_fail(TR_ERR_CONFIG,
                                   "parallel.pipeline_layers %s gives stage %d %d layers; "
                                   "every stage needs at least 1",
                                   list, b, explicit_layers[b]);
                return tr_fail(TR_ERR_CONFIG,
                               "parallel.pipeline_layers %s gives virtual stage %d (stage %d, "
                               "chunk %d) %d layers; every chunk needs at least 1",
                               list, b, b % P, b / P, explicit_layers[b]);
            }
            sum += explicit_layers[b];
        }
        if (sum != num_layers)
            return tr_fail(TR_ERR_CONFIG,
                           "parallel.pipeline_layers %s sums to %ld, but model.num_layers is %d",
                           list, sum, num_layers);
        for (int b = 0, first = 0; b < B; b++) {
            out->first[b] = first;
            out->count[b] = explicit_layers[b];
            first += explicit_layers[b];
        }
        return TR_OK;
    }
    if (num_layers < B) {
        if (v == 1)
            return tr_fail(TR_ERR_CONFIG,
                           "model.num_layers %d cannot fill %d pipeline stages (each stage "
                           "needs at least 1 layer)",
                           num_layers, P);
        return tr_fail(TR_ERR_CONFIG,
                       "model.num_layers %d cannot fill %d pipeline stages x %d chunks = %d "
                       "virtual stages (each needs at least 1 layer)",
                       num_layers, P, v, B);
    }
    const int base = num_layers / B, rem = num_layers % B;
    const int extra_from = (B - rem) / 2; /* the rem middle blocks get one more */
    for (int b = 0, first = 0; b < B; b++) {
        out->first[b] = first;
        out->count[b] = base + (b >= extra_from && b < extra_from + rem);
        first += out->count[b];
    }
    return TR_OK;
}

int tr_pp_partition_from_config(const tr_config *cfg, tr_pp_partition *out)
{
    if (!cfg)
        return tr_fail(TR_ERR_INVALID, "tr_pp_partition_from_config: cfg is NULL");
    const tr_parallel_config *par = &cfg->parallel;
    tr_pp_kind kind = TR_PP_1F1B;
    if (par->pipeline_schedule) {
        int rc = tr_pp_kind_parse(par->pipeline_schedule, &kind);
        if (rc)
            return rc;
    }
    int v = kind == TR_PP_INTERLEAVED ? par->virtual_pipeline_model_parallel_size : 1;
    return tr_pp_partition_layers(cfg->model.num_layers, par->pipeline_model_parallel_size, v,
                                  par->num_pipeline_layers ? par->pipeline_layers : NULL,
                                  par->num_pipeline_layers, out);
}
