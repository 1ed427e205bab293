/* config.json's typed keys, as every family's reader takes them (hf_internal.h): integers,
 * float32 numbers, booleans, a refusal naming the key; the shares and activations several
 * families spell alike; GPT-2's dimension keys; the config.json every export writes. */
#include "hf/hf_internal.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int hf_get_int(json_t *root, const char *path, const char *key, int dflt, int *out)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) {
        if (dflt < 0)
            return tr_fail(TR_ERR_INVALID, "%s: %s is missing", path, key);
        *out = dflt;
        return TR_OK;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > (1 << 26))
        return tr_fail(TR_ERR_INVALID, "%s: %s must be an integer in [1, 67108864]", path, key);
    *out = (int)json_integer_value(v);
    return TR_OK;
}

int hf_get_num(json_t *root, const char *path, const char *key, double dflt, double *out)
{
    json_t *v = json_object_get(root, key);
    *out = dflt;
    if (!v)
        return TR_OK;
    /* trident keeps it as a float32: a value float32 makes infinite or 0 is refused too */
    double x = json_is_number(v) ? json_number_value(v) : -1.0;
    if (!isfinite(x) || !(x > 0) || x > FLT_MAX || !((float)x > 0.0f))
        return tr_fail(TR_ERR_INVALID, "%s: %s must be a positive number that float32 holds "
                       "(%g to %g)", path, key, (double)FLT_TRUE_MIN, (double)FLT_MAX);
    *out = x;
    return TR_OK;
}

int hf_refuse(const char *path, const char *key, const char *why)
{
    return tr_fail(TR_ERR_INVALID, "%s: %s is not supported: %s", path, key, why);
}

int hf_get_bool(json_t *root, const char *path, const char *key, int dflt, int *out)
{
    json_t *v = json_object_get(root, key);
    if (v && !json_is_boolean(v))
        return tr_fail(TR_ERR_INVALID, "%s: %s must be true or false", path, key);
    *out = v ? json_is_true(v) : dflt;
    return TR_OK;
}

int hf_rotary_share(const char *path, const char *key, const char *formula, const char *dim,
                    double factor, tr_model_config *m)
{
    int heads = m->num_attention_heads;
    int hs = heads > 0 && m->hidden_size % heads == 0 ? m->hidden_size / heads : 0;
    double *kept = &m->rotary_percent;
    if (!hs)
        return TR_OK;
    if (factor > 1.0)
        return tr_fail(TR_ERR_INVALID, "%s: %s must be in (0, 1], not %g", path, key, factor);
    int rot = (int)(factor * hs);
    char text[40];
    snprintf(text, sizeof text, "%.9g", (double)rot / hs);
    *kept = strtod(text, NULL);
    if (rot < 2 || rot % 2 || hs * *kept != (double)rot || (int)(hs * *kept) != rot)
        return tr_fail(TR_ERR_INVALID, "%s: %s %g of the head size %d rotates %d dimensions "
                       "(int(%s)); trident rotates an even number >= 2 that is %s * a 9-digit "
                       "share", path, key, factor, hs, rot, formula, dim);
    return TR_OK;
}

int hf_gelu_act(json_t *root, const char *path, const char *key, const char *dflt,
                const char *what, int *exact)
{
    json_t *act = json_object_get(root, key);
    const char *a = !act ? dflt : json_is_string(act) ? json_string_value(act) : "";
    *exact = !strcmp(a, "gelu") || !strcmp(a, "gelu_python");
    if (*exact || !strcmp(a, "gelu_new") || !strcmp(a, "gelu_pytorch_tanh") ||
        !strcmp(a, "gelu_fast") || !strcmp(a, "gelu_accurate"))
        return TR_OK;
    return tr_fail(TR_ERR_INVALID, "%s: %s is not supported: trident's %s uses GELU, exact "
                   "(gelu, gelu_python) or the tanh approximation (gelu_new, gelu_pytorch_tanh, "
                   "gelu_fast, gelu_accurate)", path, key, what);
}

int hf_read_gpt_dims(json_t *root, const char *path, int positions, const char *attention,
                     tr_model_config *m)
{
    int rc = hf_get_int(root, path, "n_layer", -1, &m->num_layers);
    if (!rc)
        rc = hf_get_int(root, path, "n_embd", -1, &m->hidden_size);
    if (!rc)
        rc = hf_get_int(root, path, "n_head", -1, &m->num_attention_heads);
    if (!rc)
        rc = hf_get_int(root, path, "vocab_size", -1, &m->vocab_size);
    if (!rc)
        rc = hf_get_int(root, path, "n_positions", positions, &m->max_position_embeddings);
    if (!rc)
        rc = hf_get_int(root, path, "n_inner", 4 * m->hidden_size, &m->ffn_hidden_size);
    if (!rc)
        rc = hf_get_num(root, path, "layer_norm_epsilon", 1e-5, &m->layernorm_epsilon);
    if (!rc && m->hidden_size % m->num_attention_heads)
        rc = tr_fail(TR_ERR_INVALID, "%s: n_embd %d is not divisible by n_head %d (transformers' "
                     "%s refuses it too)", path, m->hidden_size, m->num_attention_heads,
                     attention);
    return rc;
}

int hf_write_config_json(const char *dir, json_t *root, int family, const tr_model_config *m,
                         const tr_hf_export_options *o)
{
    json_t *tok = o->eos_token_id >= 0 ? json_integer(o->eos_token_id) : json_null();
    if (root && (json_object_set(root, "bos_token_id", tok) ||
                 json_object_set(root, "eos_token_id", tok)))
        root = (json_decref(root), NULL);
    json_decref(tok);
    if (root && hf_write_dropout(root, family, m)) {
        json_decref(root);
        return TR_ERR_NOMEM;
    }
    char *text = root ? json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(12))
                      : NULL;
    json_decref(root);
    if (!text)
        return tr_fail(TR_ERR_NOMEM, "out of memory writing config.json");
    size_t n = strlen(text);
    char *t = realloc(text, n + 2);
    if (t)
        text = t, text[n] = '\n', text[n + 1] = '\0';
    int rc = hf_write_text(dir, "config.json", text);
    free(text);
    return rc;
}
