/* The resolved config as YAML (every table key, defaults filled) and a field-by-field
 * comparison; both walk the key table. Numbers are written in the shortest form that reads
 * back to the same value, so write -> load gives an equal struct. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "yaml/config_internal.h"

static void write_double(FILE *f, double v)
{
    char buf[64];
    for (int digits = 15; digits <= 17; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    fputs(buf, f);
}

/* Double-quoted, escaping what YAML would otherwise change: quotes, backslashes, control
 * characters and the Unicode line breaks (NEL, LS, PS) and BOM. */
static void write_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        if (*p == '"' || *p == '\\') {
            fprintf(f, "\\%c", *p);
        } else if (*p < 0x20 || *p == 0x7f) {
            fprintf(f, "\\x%02X", *p);
        } else if (p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) { /* C1 controls */
            fprintf(f, "\\u00%02X", p[1]);
            p += 1;
        } else if (p[0] == 0xe2 && p[1] == 0x80 && (p[2] == 0xa8 || p[2] == 0xa9)) {
            fprintf(f, "\\u%s", p[2] == 0xa8 ? "2028" : "2029");
            p += 2;
        } else if (p[0] == 0xef && p[1] == 0xbb && p[2] == 0xbf) {
            fprintf(f, "\\uFEFF");
            p += 2;
        } else {
            fputc(*p, f);
        }
    }
    fputc('"', f);
}

static void write_value(FILE *f, const tr_config *c, const config_key_spec *s)
{
    const void *field = (const char *)c + s->offset;
    switch (s->type) {
    case KEY_INT:
        fprintf(f, "%d", *(const int *)field);
        break;
    case KEY_UINT64:
        fprintf(f, "%" PRIu64, *(const uint64_t *)field);
        break;
    case KEY_DOUBLE:
        write_double(f, *(const double *)field);
        break;
    case KEY_BOOL:
        fputs(!*(const int *)field != !s->negate ? "true" : "false", f);
        break;
    case KEY_STRING:
        write_string(f, *(char *const *)field);
        break;
    case KEY_STRING_LIST: {
        int n = *(const int *)((const char *)c + s->count_offset);
        char *const *list = *(char *const *const *)field;
        fputc('[', f);
        for (int i = 0; i < n; i++) {
            fputs(i ? ", " : "", f);
            write_string(f, list[i]);
        }
        fputc(']', f);
        break;
    }
    case KEY_INT_LIST: {
        int n = *(const int *)((const char *)c + s->count_offset);
        fputc('[', f);
        for (int i = 0; i < n && i < s->max_count; i++)
            fprintf(f, "%s%d", i ? ", " : "", ((const int *)field)[i]);
        fputc(']', f);
        break;
    }
    }
}

int tr_config_write(const tr_config *c, FILE *f)
{
    if (!c || !f)
        return tr_fail(TR_ERR_INVALID, "tr_config_write: no config or no file");
    fprintf(f, "# trident config, resolved: every key, defaults filled in");
    if (c->source) {
        fputs(" (from ", f);
        for (const unsigned char *p = (const unsigned char *)c->source; *p; p++)
            fputc(*p < 0x20 || *p >= 0x7f ? '?' : *p, f); /* one line of plain ASCII */
        fputc(')', f);
    }
    fputc('\n', f);
    for (int sec = 0; config_sections[sec]; sec++) {
        fprintf(f, "%s:\n", config_sections[sec]);
        for (int i = 0; i < config_n_keys; i++) {
            const config_key_spec *s = &config_keys[i];
            if (strcmp(s->section, config_sections[sec]))
                continue;
            fprintf(f, "  %s: ", s->key);
            write_value(f, c, s);
            char dotted[200];
            snprintf(dotted, sizeof dotted, "%s.%s", s->section, s->key);
            fputs(config_find_mark(c, dotted) ? "\n" : "  # default\n", f);
        }
    }
    if (fflush(f) || ferror(f))
        return tr_fail(TR_ERR_IO, "writing the config failed");
    return TR_OK;
}

int tr_config_equal(const tr_config *a, const tr_config *b)
{
    for (int i = 0; i < config_n_keys; i++) {
        const config_key_spec *s = &config_keys[i];
        const void *fa = (const char *)a + s->offset, *fb = (const char *)b + s->offset;
        switch (s->type) {
        case KEY_INT:
        case KEY_BOOL:
            if (*(const int *)fa != *(const int *)fb)
                return 0;
            break;
        case KEY_UINT64:
            if (*(const uint64_t *)fa != *(const uint64_t *)fb)
                return 0;
            break;
        case KEY_DOUBLE:
            if (*(const double *)fa != *(const double *)fb)
                return 0;
            break;
        case KEY_STRING: {
            const char *sa = *(char *const *)fa, *sb = *(char *const *)fb;
            if ((!sa || !sb) ? sa != sb : strcmp(sa, sb) != 0)
                return 0;
            break;
        }
        case KEY_STRING_LIST: {
            int na = *(const int *)((const char *)a + s->count_offset);
            int nb = *(const int *)((const char *)b + s->count_offset);
            char *const *la = *(char *const *const *)fa, *const *lb = *(char *const *const *)fb;
            if (na != nb)
                return 0;
            for (int k = 0; k < na; k++)
                if (strcmp(la[k], lb[k]))
                    return 0;
            break;
        }
        case KEY_INT_LIST: {
            int na = *(const int *)((const char *)a + s->count_offset);
            int nb = *(const int *)((const char *)b + s->count_offset);
            if (na != nb || na < 0 || na > s->max_count ||
                memcmp(fa, fb, (size_t)na * sizeof(int)))
                return 0;
            break;
        }
        }
    }
    return 1;
}

void tr_model_family_flow(const tr_model_config *m, char *buf, size_t cap)
{
    buf[0] = '\0';
    if (!m->normalization)
        return;
    int n = snprintf(buf, cap,
                     ", normalization: %s, position_embedding_type: %s, swiglu: %s, "
                     "ffn_hidden_size: %d, num_query_groups: %d, "
                     "untie_embeddings_and_output_weights: %s, add_bias_linear: %s, "
                     "embedding_layernorm: %s, layernorm_epsilon: %.9g",
                     m->normalization, m->position_embedding_type, m->swiglu ? "true" : "false",
                     tr_model_ffn_hidden(m), m->num_query_groups,
                     m->untie_embeddings_and_output_weights ? "true" : "false",
                     m->add_bias_linear ? "true" : "false",
                     m->embedding_layernorm ? "true" : "false", m->layernorm_epsilon);
    if (n > 0 && (size_t)n < cap && !strcmp(m->position_embedding_type, "rope"))
        n += snprintf(buf + n, cap - (size_t)n, ", rotary_base: %.9g, rotary_percent: %.9g",
                      m->rotary_base, m->rotary_percent);
    if (n > 0 && (size_t)n < cap && m->add_qkv_bias && !m->add_bias_linear)
        n += snprintf(buf + n, cap - (size_t)n, ", add_qkv_bias: true");
    if (n > 0 && (size_t)n < cap && m->add_mlp_bias && !m->add_bias_linear)
        n += snprintf(buf + n, cap - (size_t)n, ", add_mlp_bias: true");
    if (n > 0 && (size_t)n < cap && m->sliding_window)
        n += snprintf(buf + n, cap - (size_t)n, ", sliding_window: %d", m->sliding_window);
    if (n > 0 && (size_t)n < cap && m->parallel_residual)
        n += snprintf(buf + n, cap - (size_t)n, ", parallel_residual: true");
    if (n > 0 && (size_t)n < cap && m->output_layer_bias)
        n += snprintf(buf + n, cap - (size_t)n, ", output_layer_bias: true");
    if (n > 0 && (size_t)n < cap && m->parallel_shared_norm)
        n += snprintf(buf + n, cap - (size_t)n, ", parallel_shared_norm: true");
    if (n > 0 && (size_t)n < cap && !m->relu && m->gelu_approximate &&
        !strcmp(m->gelu_approximate, "none"))
        n += snprintf(buf + n, cap - (size_t)n, ", gelu_approximate: none");
    if (n > 0 && (size_t)n < cap && m->kv_channels)
        n += snprintf(buf + n, cap - (size_t)n, ", kv_channels: %d", m->kv_channels);
    if (n > 0 && (size_t)n < cap && m->apply_layernorm_1p)
        n += snprintf(buf + n, cap - (size_t)n, ", apply_layernorm_1p: true");
    if (n > 0 && (size_t)n < cap && m->no_layernorm_bias && strcmp(m->normalization, "RMSNorm"))
        n += snprintf(buf + n, cap - (size_t)n, ", layernorm_bias: false");
    if (n > 0 && (size_t)n < cap && m->embedding_multiplier != 1.0 && m->embedding_multiplier)
        n += snprintf(buf + n, cap - (size_t)n, ", embedding_multiplier: %.17g",
                      m->embedding_multiplier);
    if (n > 0 && (size_t)n < cap && m->geglu)
        n += snprintf(buf + n, cap - (size_t)n, ", geglu: true");
    if (n > 0 && (size_t)n < cap && m->relu)
        n += snprintf(buf + n, cap - (size_t)n, ", relu: true");
    if (n > 0 && (size_t)n < cap && m->hf_family && strcmp(m->hf_family, "auto"))
        n += snprintf(buf + n, cap - (size_t)n, ", hf_family: %s", m->hf_family);
    if (n > 0 && (size_t)n < cap && m->rotary_seq_len_interpolation_factor != 1.0 &&
        m->rotary_seq_len_interpolation_factor)
        n += snprintf(buf + n, cap - (size_t)n, ", rotary_seq_len_interpolation_factor: %.17g",
                      m->rotary_seq_len_interpolation_factor);
    if (n > 0 && (size_t)n < cap && m->num_experts)
        n += snprintf(buf + n, cap - (size_t)n,
                      ", num_experts: %d, moe_router_topk: %d, moe_router_pre_softmax: %s, "
                      "moe_router_load_balancing_type: %s, moe_aux_loss_coeff: %.17g, "
                      "moe_z_loss_coeff: %.17g",
                      m->num_experts, m->moe_router_topk, m->moe_router_pre_softmax ? "true" : "false",
                      m->moe_router_load_balancing_type ? m->moe_router_load_balancing_type
                                                        : "aux_loss",
                      m->moe_aux_loss_coeff, m->moe_z_loss_coeff);
    if (n > 0 && (size_t)n < cap && m->use_rope_scaling)
        snprintf(buf + n, cap - (size_t)n,
                 ", use_rope_scaling: true, rope_scaling_factor: %.17g, "
                 "rope_scaling_low_freq_factor: %.17g, rope_scaling_high_freq_factor: %.17g, "
                 "rope_scaling_original_max_position_embeddings: %d",
                 m->rope_scaling_factor, m->rope_scaling_low_freq_factor,
                 m->rope_scaling_high_freq_factor,
                 m->rope_scaling_original_max_position_embeddings);
}
