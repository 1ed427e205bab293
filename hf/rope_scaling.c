/* A Llama config.json's rope_scaling to and from trident's rope-scaling switches: "linear"
 * (transformers 4.38's LlamaLinearScalingRotaryEmbedding: positions / factor) as
 * model.rotary_seq_len_interpolation_factor, "llama3" (Llama 3.1 and 3.2; transformers 4.43's
 * _compute_llama3_parameters) as model.use_rope_scaling with its four numbers. */
#include "hf/hf_internal.h"

#include <stdio.h>
#include <string.h>

/* obj's key: a positive number float32 holds (hf_get_num's rule), required; where names obj */
static int scaling_num(json_t *obj, const char *where, const char *key, double *out)
{
    if (!json_object_get(obj, key))
        return tr_fail(TR_ERR_INVALID, "%s: %s is missing", where, key);
    return hf_get_num(obj, where, key, 1.0, out);
}

int hf_read_rope_scaling(json_t *root, const char *path, tr_model_config *m)
{
    json_t *rs = json_object_get(root, "rope_scaling");
    m->rotary_seq_len_interpolation_factor = 1.0;
    m->use_rope_scaling = 0;
    if (!rs || json_is_null(rs))
        return TR_OK;
    if (!json_is_object(rs))
        return tr_fail(TR_ERR_INVALID, "%s: rope_scaling must be null or an object", path);
    /* the kind: "rope_type" (transformers 4.43 on), or "type" (before; both are accepted there) */
    json_t *kind = json_object_get(rs, "rope_type");
    if (!kind)
        kind = json_object_get(rs, "type");
    const char *k = json_is_string(kind) ? json_string_value(kind) : NULL;
    if (!k)
        return tr_fail(TR_ERR_INVALID, "%s: rope_scaling has no rope_type (or type) string",
                       path);
    char where[600]; /* (what the messages name) */
    snprintf(where, sizeof where, "%s: rope_scaling", path);
    int rc;
    if (!strcmp(k, "linear")) {
        double factor;
        if ((rc = scaling_num(rs, where, "factor", &factor)))
            return rc;
        m->rotary_seq_len_interpolation_factor = factor;
        return TR_OK;
    }
    if (!strcmp(k, "llama3")) {
        double factor, low, high;
        if ((rc = scaling_num(rs, where, "factor", &factor)) ||
            (rc = scaling_num(rs, where, "low_freq_factor", &low)) ||
            (rc = scaling_num(rs, where, "high_freq_factor", &high)))
            return rc;
        int orig = 0;
        if ((rc = hf_get_int(rs, where, "original_max_position_embeddings", -1, &orig)))
            return rc;
        if (!(high > low))
            return tr_fail(TR_ERR_INVALID, "%s: rope_scaling's high_freq_factor %g is not above "
                           "its low_freq_factor %g (the wavelengths between original / high and "
                           "original / low are blended)", path, high, low);
        m->use_rope_scaling = 1;
        m->rope_scaling_factor = factor;
        m->rope_scaling_low_freq_factor = low;
        m->rope_scaling_high_freq_factor = high;
        m->rope_scaling_original_max_position_embeddings = orig;
        return TR_OK;
    }
    return tr_fail(TR_ERR_INVALID, "%s: rope_scaling of type '%s' is not supported: trident "
                   "reads 'linear' (position interpolation) and 'llama3' (Llama 3.1's)", path, k);
}

json_t *hf_rope_scaling_json(const tr_model_config *m)
{
    if (m->use_rope_scaling)
        return json_pack("{s:s, s:f, s:f, s:f, s:i}", "rope_type", "llama3", "factor",
                         m->rope_scaling_factor, "low_freq_factor",
                         m->rope_scaling_low_freq_factor, "high_freq_factor",
                         m->rope_scaling_high_freq_factor, "original_max_position_embeddings",
                         m->rope_scaling_original_max_position_embeddings);
    if (m->rotary_seq_len_interpolation_factor != 1.0) /* ("type": what 4.38 reads) */
        return json_pack("{s:s, s:f}", "type", "linear", "factor",
                         m->rotary_seq_len_interpolation_factor);
    return json_null();
}
