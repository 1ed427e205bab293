/* The checkpoint manifest's text (format: checkpoint.c): written after a save, read and
 * validated line by line before a load (every bad line named FILE:LINE). */
#include "train/checkpoint_internal.h"

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"

/* A tensor name that is a plain file name: letters, digits, '.', '_', '-' (not . or ..). */
static int valid_name(const char *s)
{
    if (!*s || !strcmp(s, ".") || !strcmp(s, ".."))
        return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '.' || *s == '_' || *s == '-'))
            return 0;
    return 1;
}

static int manifest_error(const char *path, int line, const char *what)
{
    return tr_fail(TR_ERR_INVALID, "%s:%d: %s (a corrupt or foreign checkpoint manifest)", path, line, what);
}

/* The shortest decimal of a float that reads back as the same float (1e-05, not the double
 * 9.99999975e-06 of its exact value; 1e-44, not 9.80909e-45, for a subnormal one): what a
 * config said. */
static double float_decimal(float x)
{
    char buf[32];
    for (int digits = 1; digits < 9; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, (double)x);
        if ((float)strtod(buf, NULL) == x)
            return strtod(buf, NULL);
    }
    return (double)x;
}

void ckpt_manifest_family(ckpt_manifest *mf, const tr_gpt_shape *s)
{
    mf->has_family = 1;
    mf->rmsnorm = s->rmsnorm;
    mf->position = s->position == TR_POS_ROPE ? 1 : s->position == TR_POS_ALIBI ? 2 : 0;
    mf->rotary_dims = s->rotary_dims;
    mf->rotary_base = float_decimal(s->rotary_base);
    mf->swiglu = s->swiglu;
    mf->ffn = s->ffn ? s->ffn : 4 * s->C;
    mf->query_groups = s->query_groups ? s->query_groups : s->NH;
    mf->untie = s->untie;
    mf->linear_bias = !s->no_linear_bias;
    mf->qkv_bias = s->qkv_bias;
    mf->mlp_bias = s->mlp_bias;
    mf->no_norm_bias = s->no_norm_bias;
    mf->sliding_window = s->sliding_window;
    mf->parallel_residual = s->parallel_residual;
    mf->gelu_exact = s->gelu_exact;
    mf->parallel_shared_norm = s->parallel_shared_norm;
    mf->output_bias = s->output_bias;
    mf->kv_channels = s->kv_channels;
    mf->layernorm_1p = s->layernorm_1p;
    mf->embedding_multiplier = s->embedding_multiplier ? float_decimal(s->embedding_multiplier) : 0;
    mf->geglu = s->geglu;
    mf->relu = s->relu;
    mf->hf_phi3 = s->hf_phi3;
    if (s->num_experts) {
        mf->moe_experts = s->num_experts, mf->moe_topk = s->moe_topk;
        mf->moe_pre_softmax = s->moe_pre_softmax, mf->moe_aux_loss = s->moe_aux_loss;
        mf->moe_aux_coeff = float_decimal(s->moe_aux_coeff);
        mf->moe_z_coeff = float_decimal(s->moe_z_coeff);
    }
    mf->rope_scaling = s->rope_scaling;
    if (s->rope_scaling)
        mf->rope_factor = float_decimal(s->rope_factor);
    if (s->rope_scaling == TR_ROPE_SCALING_LLAMA3) {
        mf->rope_low = float_decimal(s->rope_low_freq_factor);
        mf->rope_high = float_decimal(s->rope_high_freq_factor);
        mf->rope_original = s->rope_original_positions;
    }
    mf->emb_ln = s->embedding_ln;
    mf->eps = float_decimal(s->eps);
}

/* finetune.lora.target_modules' names, bit t of the lora line's mask (model/gpt.c's order) */
static const char *const lora_target_names[4] = {"qkv", "proj", "fc1", "fc2"};

void ckpt_manifest_lora(ckpt_manifest *mf, const tr_gpt_shape *s)
{
    if (s->lora_rank < 1)
        return;
    mf->has_lora = 1;
    mf->lora_rank = s->lora_rank;
    mf->lora_targets = s->lora_targets;
    mf->lora_alpha = float_decimal(s->lora_alpha);
    mf->lora_dropout = float_decimal(s->lora_dropout);
}

void ckpt_manifest_dropout(ckpt_manifest *mf, const tr_gpt_shape *s)
{
    mf->has_dropout = s->hidden_dropout > 0 || s->attention_dropout > 0;
    mf->hidden_dropout = float_decimal(s->hidden_dropout);
    mf->attention_dropout = float_decimal(s->attention_dropout);
}

void ckpt_lora_targets_text(int mask, char *out, size_t cap)
{
    size_t n = 0;
    out[0] = '\0';
    for (int t = 0; t < 4; t++)
        if (mask & (1 << t))
            n += (size_t)snprintf(out + n, cap - n, "%s%s", n ? "," : "", lora_target_names[t]);
}

/* A target list of the lora line: known names, each once, at least one; -1 when not. */
static int lora_targets_parse(const char *text)
{
    int mask = 0;
    const char *p = text;
    while (*p) {
        size_t len = strcspn(p, ",");
        int found = -1;
        for (int t = 0; t < 4 && found < 0; t++)
            if (len == strlen(lora_target_names[t]) && !strncmp(p, lora_target_names[t], len))
                found = t;
        if (found < 0 || (mask & (1 << found)))
            return -1;
        mask |= 1 << found;
        p += len;
        if (*p == ',' && !*++p)
            return -1; /* a trailing comma */
    }
    return mask ? mask : -1;
}

/* The family line's optional end: " qkv_bias 1", " sliding_window N", " parallel_residual 1",
 * " gelu_exact 1", " parallel_shared_norm 1", " output_bias 1", " kv_channels N",
 * " layernorm_1p 1", " embedding_multiplier X", " geglu 1", " rope_linear X" or
 * " rope_llama3 X X X N", " mlp_bias 1", " layernorm_bias 0", " relu 1", " hf_family phi3",
 * " experts E K P A X Z" (1 <= K <= E <= 1024, P and A 0 or 1, X and Z finite >= 0; X 0
 * with A 0) (N >= 1 in digits, X a finite
 * float32 > 0; the multiplier and the linear factor not 1, llama3's high frequency factor above
 * its low one), each at most once and in that order, nothing else; 1 when it is (and sets
 * them). */
static int family_suffix(const char *rest, ckpt_manifest *out)
{
    enum { FLAG, COUNT, SCALE, LINEAR, LLAMA3, OFF, PHI3, MOE }; /* " NAME 1", " NAME N",
                                                                  * " NAME X", ..., " NAME 0",
                                                                  * " NAME phi3", experts' */
    static const struct {
        const char *name;
        int kind;
    } keys[] = {{"qkv_bias", FLAG},          {"sliding_window", COUNT},
                {"parallel_residual", FLAG}, {"gelu_exact", FLAG},
                {"parallel_shared_norm", FLAG}, {"output_bias", FLAG},
                {"kv_channels", COUNT},      {"layernorm_1p", FLAG},
                {"embedding_multiplier", SCALE}, {"geglu", FLAG},
                {"rope_linear", LINEAR},     {"rope_llama3", LLAMA3},
                {"mlp_bias", FLAG},          {"layernorm_bias", OFF},
                {"relu", FLAG},              {"hf_family", PHI3},
                {"experts", MOE}};
    int *set[] = {&out->qkv_bias,    &out->sliding_window, &out->parallel_residual,
                  &out->gelu_exact,  &out->parallel_shared_norm, &out->output_bias,
                  &out->kv_channels, &out->layernorm_1p, NULL, &out->geglu, NULL, NULL,
                  &out->mlp_bias, &out->no_norm_bias, &out->relu, &out->hf_phi3, NULL};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0] && *rest; i++) {
        size_t len = strlen(keys[i].name);
        if (rest[0] != ' ' || strncmp(rest + 1, keys[i].name, len) || rest[1 + len] != ' ')
            continue; /* absent: the next key may follow */
        const char *v = rest + 2 + len;
        int used = 0, n = 0;
        double x = 0;
        if (keys[i].kind == PHI3) {
            if (strncmp(v, "phi3", 4))
                return 0;
            used = 4, *set[i] = 1;
        } else if (keys[i].kind == MOE) {
            int E = 0, K = 0, P = 0, A = 0;
            double z = 0;
            if (!isdigit((unsigned char)*v) ||
                sscanf(v, "%d %d %d %d %lg %lg%n", &E, &K, &P, &A, &x, &z, &used) != 6 ||
                E < 1 || E > 1024 || K < 1 || K > E || (unsigned)P > 1 || (unsigned)A > 1 ||
                !(x >= 0 && x <= FLT_MAX) || !(z >= 0 && z <= FLT_MAX) || (!A && x != 0))
                return 0;
            out->moe_experts = E, out->moe_topk = K, out->moe_pre_softmax = P;
            out->moe_aux_loss = A, out->moe_aux_coeff = x, out->moe_z_coeff = z;
        } else if (keys[i].kind == FLAG || keys[i].kind == OFF) {
            if (*v != (keys[i].kind == FLAG ? '1' : '0'))
                return 0;
            used = 1, *set[i] = 1;
        } else if (keys[i].kind == COUNT) {
            if (!isdigit((unsigned char)*v) || sscanf(v, "%d%n", &n, &used) != 1 || n < 1)
                return 0;
            *set[i] = n;
        } else if (keys[i].kind == LLAMA3) {
            double lo = 0, hi = 0;
            if (out->rope_scaling ||
                sscanf(v, "%lg %lg %lg %d%n", &x, &lo, &hi, &n, &used) != 4 || !isfinite(x) ||
                !((float)x > 0.0f) || x > FLT_MAX || !((float)lo > 0.0f) || !(hi <= FLT_MAX) ||
                !((float)hi > (float)lo) || n < 1)
                return 0;
            out->rope_scaling = TR_ROPE_SCALING_LLAMA3, out->rope_factor = x, out->rope_low = lo;
            out->rope_high = hi, out->rope_original = n;
        } else {
            if (sscanf(v, "%lg%n", &x, &used) != 1 || !isfinite(x) || !((float)x > 0.0f) ||
                x > FLT_MAX || (float)x == 1.0f)
                return 0;
            if (keys[i].kind == LINEAR)
                out->rope_scaling = TR_ROPE_SCALING_LINEAR, out->rope_factor = x;
            else
                out->embedding_multiplier = x;
        }
        if (v[used] && v[used] != ' ')
            return 0;
        rest = v + used;
    }
    return !*rest;
}

int ckpt_write_manifest(const char *path, const ckpt_manifest *mf)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return tr_fail(TR_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    fprintf(f, CKPT_FORMAT "\niteration %d\n", mf->iteration);
    fprintf(f, "model num_layers %d hidden_size %d num_attention_heads %d vocab_size %d "
               "max_position_embeddings %d\n", mf->num_layers, mf->hidden_size,
            mf->num_attention_heads, mf->vocab_size, mf->max_position_embeddings);
    if (mf->has_data)
        fprintf(f, "data consumed_samples %llu global_batch_size %d seed %llu tokens %llu "
                   "documents %llu split %s\n", mf->consumed_samples, mf->global_batch_size,
                mf->seed, mf->tokens, mf->documents, mf->split);
    if (mf->has_scaler) {
        fprintf(f, "loss_scaler scale %.17g growth %d hysteresis_left %d skipped %ld",
                mf->loss_scale, mf->scaler_growth, mf->scaler_hysteresis_left,
                mf->skipped_iterations);
        if (mf->skipped_samples !=
            (unsigned long long)mf->skipped_iterations * (unsigned long long)mf->global_batch_size)
            fprintf(f, " skipped_samples %llu", mf->skipped_samples);
        fputc('\n', f);
    }
    char suffix[480] = ""; /* every one: at most 411 bytes */
    if (mf->sliding_window)
        snprintf(suffix, sizeof suffix, " sliding_window %d", mf->sliding_window);
    if (mf->parallel_residual)
        strcat(suffix, " parallel_residual 1");
    if (mf->gelu_exact)
        strcat(suffix, " gelu_exact 1");
    if (mf->parallel_shared_norm)
        strcat(suffix, " parallel_shared_norm 1");
    if (mf->output_bias)
        strcat(suffix, " output_bias 1");
    if (mf->kv_channels)
        snprintf(suffix + strlen(suffix), sizeof suffix - strlen(suffix), " kv_channels %d",
                 mf->kv_channels);
    if (mf->layernorm_1p)
        strcat(suffix, " layernorm_1p 1");
    if (mf->embedding_multiplier)
        snprintf(suffix + strlen(suffix), sizeof suffix - strlen(suffix),
                 " embedding_multiplier %.9g", mf->embedding_multiplier);
    if (mf->geglu)
        strcat(suffix, " geglu 1");
    if (mf->rope_scaling == TR_ROPE_SCALING_LINEAR)
        snprintf(suffix + strlen(suffix), sizeof suffix - strlen(suffix), " rope_linear %.9g",
                 mf->rope_factor);
    if (mf->rope_scaling == TR_ROPE_SCALING_LLAMA3)
        snprintf(suffix + strlen(suffix), sizeof suffix - strlen(suffix),
                 " rope_llama3 %.9g %.9g %.9g %d", mf->rope_factor, mf->rope_low, mf->rope_high,
                 mf->rope_original);
    if (mf->mlp_bias)
        strcat(suffix, " mlp_bias 1");
    if (mf->no_norm_bias)
        strcat(suffix, " layernorm_bias 0");
    if (mf->relu)
        strcat(suffix, " relu 1");
    if (mf->hf_phi3)
        strcat(suffix, " hf_family phi3");
    if (mf->moe_experts)
        snprintf(suffix + strlen(suffix), sizeof suffix - strlen(suffix),
                 " experts %d %d %d %d %.9g %.9g", mf->moe_experts, mf->moe_topk,
                 mf->moe_pre_softmax, mf->moe_aux_loss, mf->moe_aux_coeff, mf->moe_z_coeff);
    if (mf->has_family)
        fprintf(f, "family rmsnorm %d position %d rotary_dims %d rotary_base %.9g swiglu %d "
                   "ffn %d query_groups %d untie %d linear_bias %d embedding_layernorm %d "
                   "eps %.9g%s%s\n", mf->rmsnorm, mf->position, mf->rotary_dims, mf->rotary_base,
                mf->swiglu, mf->ffn, mf->query_groups, mf->untie, mf->linear_bias, mf->emb_ln,
                mf->eps, mf->qkv_bias ? " qkv_bias 1" : "", suffix);
    if (mf->has_lora) {
        char targets[32];
        ckpt_lora_targets_text(mf->lora_targets, targets, sizeof targets);
        fprintf(f, "lora rank %d alpha %.9g targets %s", mf->lora_rank, mf->lora_alpha, targets);
        if (mf->lora_dropout > 0) /* (a line without it reads as dropout 0) */
            fprintf(f, " dropout %.9g", mf->lora_dropout);
        fputc('\n', f);
    }
    if (mf->has_dropout)
        fprintf(f, "dropout hidden_dropout %.9g attention_dropout %.9g\n", mf->hidden_dropout,
                mf->attention_dropout);
    fprintf(f, "tensors %zu\n", mf->n);
    for (size_t i = 0; i < mf->n; i++)
        fprintf(f, "tensor %s %zu %d %016" PRIx64 " %016" PRIx64 " %016" PRIx64 "\n",
                mf->tensors[i].name, mf->tensors[i].rows, mf->tensors[i].cols,
                mf->tensors[i].sum[0], mf->tensors[i].sum[1], mf->tensors[i].sum[2]);
    fprintf(f, "end\n");
    int bad = fflush(f) != 0 || fsync(fileno(f)) != 0;
    bad |= fclose(f) != 0;
    return bad ? tr_fail(TR_ERR_IO, "cannot write %s: %s", path, strerror(errno)) : TR_OK;
}

int ckpt_read_manifest(const char *path, int iteration, ckpt_manifest *out)
{
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "r");
    if (!f)
        return tr_fail(TR_ERR_INVALID, "cannot read %s: %s (the tracker names a checkpoint that is "
                       "not there)", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) || st.st_size > (off_t)128 << 20) {
        fclose(f);
        return manifest_error(path, 1, "larger than 128 MiB");
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int ln = 0, rc = TR_OK, ended = 0;
    size_t declared = 0;
    while (!rc && (len = getline(&line, &cap, f)) >= 0) {
        ln++;
        if (len > 512) {
            rc = manifest_error(path, ln, "line too long");
            break;
        }
        if (memchr(line, '\0', (size_t)len)) {
            rc = manifest_error(path, ln, "a NUL byte");
            break;
        }
        int whole = line[len - 1] == '\n';
        line[strcspn(line, "\r\n")] = '\0';
        if (!whole && strcmp(line, "end")) {
            rc = manifest_error(path, ln, "the last line is cut short (truncated?)");
        } else if (ended) {
            rc = manifest_error(path, ln, "text after 'end'");
        } else if (ln == 1) {
            if (strcmp(line, CKPT_FORMAT))
                rc = manifest_error(path, ln, "expected '" CKPT_FORMAT "'");
        } else if (ln == 2) {
            int it, used = 0;
            if (sscanf(line, "iteration %d%n", &it, &used) != 1 || line[used])
                rc = manifest_error(path, ln, "expected 'iteration N'");
            else if (it != iteration)
                rc = manifest_error(path, ln, "the iteration differs from the tracker's");
            out->iteration = it;
        } else if (ln == 3) {
            int L, C, NH, V, maxT, used = 0;
            if (sscanf(line, "model num_layers %d hidden_size %d num_attention_heads %d vocab_size %d "
                             "max_position_embeddings %d%n", &L, &C, &NH, &V, &maxT, &used) != 5 || line[used])
                rc = manifest_error(path, ln, "expected the model line");
            else if (L < 1 || C < 1 || NH < 1 || V < 1 || maxT < 1)
                rc = manifest_error(path, ln, "a model size below 1");
            else
                out->num_layers = L, out->hidden_size = C, out->num_attention_heads = NH,
                out->vocab_size = V, out->max_position_embeddings = maxT;
        } else if (ln == 4 && !strncmp(line, "data ", 5)) {
            int used = 0;
            out->has_data = 1;
            if (sscanf(line, "data consumed_samples %llu global_batch_size %d seed %llu tokens %llu "
                             "documents %llu split %63s%n", &out->consumed_samples,
                       &out->global_batch_size, &out->seed, &out->tokens, &out->documents,
                       out->split, &used) != 6 || line[used] || out->global_batch_size < 1 ||
                /* each iteration takes from 1 to INT_MAX samples (a global batch) */
                out->consumed_samples < (unsigned long long)iteration ||
                out->consumed_samples > (unsigned long long)iteration * INT_MAX)
                rc = manifest_error(path, ln, "expected the data line (a global_batch_size >= 1, "
                                              "consumed_samples from the iteration to the "
                                              "iteration x 2^31-1)");
        } else if (ln == 4 + out->has_data && !strncmp(line, "loss_scaler ", 12)) {
            int used = 0;
            out->has_scaler = 1;
            int more = 0;
            out->skipped_samples = ~0ull; /* none given: skipped x the data line's batch */
            if (sscanf(line, "loss_scaler scale %lg growth %d hysteresis_left %d skipped %ld%n",
                       &out->loss_scale, &out->scaler_growth, &out->scaler_hysteresis_left,
                       &out->skipped_iterations, &used) != 4 ||
                (line[used] && (sscanf(line + used, " skipped_samples %llu%n",
                                       &out->skipped_samples, &more) != 1 ||
                                line[used + more] || line[used] != ' ' ||
                                out->skipped_samples == ~0ull)) ||
                !(out->loss_scale > 0) || !isfinite(out->loss_scale) || out->scaler_growth < 0 ||
                out->skipped_iterations < 0 || out->skipped_iterations > iteration ||
                (out->skipped_samples != ~0ull && out->has_data &&
                 out->skipped_samples > out->consumed_samples))
                rc = manifest_error(path, ln, "expected the loss_scaler line (a finite scale > 0, "
                                              "counts >= 0, skipped <= the iteration, then "
                                              "optionally skipped_samples N <= consumed_samples)");
        } else if (ln == 4 + out->has_data + out->has_scaler && !strncmp(line, "family ", 7)) {
            int used = 0;
            out->has_family = 1;
            if (sscanf(line, "family rmsnorm %d position %d rotary_dims %d rotary_base %lg swiglu %d "
                             "ffn %d query_groups %d untie %d linear_bias %d embedding_layernorm %d "
                             "eps %lg%n", &out->rmsnorm, &out->position, &out->rotary_dims,
                       &out->rotary_base, &out->swiglu, &out->ffn, &out->query_groups, &out->untie,
                       &out->linear_bias, &out->emb_ln, &out->eps, &used) != 11 ||
                (line[used] && !family_suffix(line + used, out)) ||
                (out->qkv_bias && out->linear_bias) || (out->mlp_bias && out->linear_bias) ||
                (out->no_norm_bias && out->rmsnorm) ||
                (out->parallel_shared_norm && !out->parallel_residual) ||
                (out->output_bias && !out->untie) || (out->geglu && out->swiglu) ||
                (out->relu && (out->swiglu || out->geglu || out->gelu_exact)) ||
                (out->rope_scaling && out->position != 1) ||
                (out->hf_phi3 && (!out->rmsnorm || out->position != 1 || !out->swiglu ||
                                  out->linear_bias || out->qkv_bias)) ||
                (unsigned)out->rmsnorm > 1 || (unsigned)out->position > 2 || out->rotary_dims < 0 ||
                (unsigned)out->swiglu > 1 || out->ffn < 1 || out->query_groups < 1 ||
                (unsigned)out->untie > 1 || (unsigned)out->linear_bias > 1 ||
                (unsigned)out->emb_ln > 1 || !isfinite(out->eps) ||
                /* the model keeps it as a float: one that rounds to 0 (1e-50) would be
                 * exported to config.json as it is and refused by the import */
                !((float)out->eps > 0.0f) || out->eps > FLT_MAX ||
                !isfinite(out->rotary_base) || out->rotary_base < 0 ||
                /* rotary positions: a base the config allows (model.rotary_base > 0); 0 was
                 * exported as rope_theta 0 (NaN rotations in transformers) */
                (out->position == 1 && !(out->rotary_base > 0 && out->rotary_dims >= 1)))
                rc = manifest_error(path, ln, "expected the family line (switches 0 or 1, position "
                                              "0-2, sizes >= 1, an eps > 0 that float32 holds "
                                              "(1.4e-45 to 3.4e38), rotary positions of a "
                                              "rotary_base > 0 and rotary_dims >= 1, qkv_bias 1 "
                                              "only with linear_bias 0, then sliding_window N "
                                              ">= 1, parallel_residual 1, gelu_exact 1, "
                                              "parallel_shared_norm 1 only with "
                                              "parallel_residual 1, output_bias 1 only with "
                                              "untie 1, kv_channels N >= 1, layernorm_1p 1, "
                                              "embedding_multiplier X (a float32 > 0, not 1), "
                                              "geglu 1 only with swiglu 0, rope_linear X or "
                                              "rope_llama3 X X X N only with position 1, "
                                              "mlp_bias 1 only with linear_bias 0, "
                                              "layernorm_bias 0 only with rmsnorm 0, relu 1 "
                                              "only with swiglu 0 and no gelu_exact or "
                                              "geglu, hf_family phi3 only with rmsnorm 1, "
                                              "position 1, swiglu 1 and no linear or qkv "
                                              "bias, experts E K P A X Z with 1 <= K <= E <= "
                                              "1024, P and A 0 or 1, coefficients >= 0 (X 0 "
                                              "with A 0))");
        } else if (ln == 4 + out->has_data + out->has_scaler + out->has_family &&
                   !strncmp(line, "lora ", 5)) {
            int used = 0;
            char targets[64];
            out->has_lora = 1;
            int ok = sscanf(line, "lora rank %d alpha %lg targets %63s%n", &out->lora_rank,
                            &out->lora_alpha, targets, &used) == 3;
            if (ok && line[used]) { /* the optional " dropout P", 0 <= P < 1 */
                int more = 0;
                ok = sscanf(line + used, " dropout %lg%n", &out->lora_dropout, &more) == 1 &&
                     !line[used + more] && out->lora_dropout >= 0 && out->lora_dropout < 1;
                used += more;
            }
            if (!ok || line[used] || out->lora_rank < 1 || out->lora_rank > 65536 ||
                !((float)out->lora_alpha > 0.0f) || !(out->lora_alpha <= FLT_MAX) ||
                (out->lora_targets = lora_targets_parse(targets)) < 0)
                rc = manifest_error(path, ln, "expected the lora line (rank 1-65536, an alpha "
                                              "> 0 that float32 holds, targets: some of "
                                              "qkv,proj,fc1,fc2 once each, then optionally "
                                              "dropout P with 0 <= P < 1)");
        } else if (ln == 4 + out->has_data + out->has_scaler + out->has_family + out->has_lora &&
                   !strncmp(line, "dropout ", 8)) {
            int used = 0;
            out->has_dropout = 1;
            if (sscanf(line, "dropout hidden_dropout %lg attention_dropout %lg%n",
                       &out->hidden_dropout, &out->attention_dropout, &used) != 2 || line[used] ||
                !(out->hidden_dropout >= 0 && out->hidden_dropout < 1) ||
                !(out->attention_dropout >= 0 && out->attention_dropout < 1))
                rc = manifest_error(path, ln, "expected the dropout line (hidden_dropout P "
                                              "attention_dropout Q, each 0 <= P < 1)");
        } else if (ln == 4 + out->has_data + out->has_scaler + out->has_family + out->has_lora +
                             out->has_dropout) {
            int used = 0;
            if (sscanf(line, "tensors %zu%n", &declared, &used) != 1 || line[used] || declared > 1000000)
                rc = manifest_error(path, ln, "expected 'tensors N' (N <= 1000000)");
            else if (!(out->tensors = calloc(declared ? declared : 1, sizeof *out->tensors)))
                rc = tr_fail(TR_ERR_NOMEM, "out of memory reading %s", path);
        } else if (!strcmp(line, "end")) {
            ended = 1;
        } else {
            ckpt_record t = {0};
            int used = 0;
            if (out->n == declared)
                rc = manifest_error(path, ln, "more tensors than declared");
            else if (sscanf(line, "tensor %47s %zu %d %" SCNx64 " %" SCNx64 " %" SCNx64 "%n", t.name, &t.rows,
                            &t.cols, &t.sum[0], &t.sum[1], &t.sum[2], &used) != 6 || line[used] ||
                     !valid_name(t.name) || t.rows < 1 || t.cols < 1 || t.rows > (1u << 30))
                rc = manifest_error(path, ln, "expected 'tensor NAME ROWS COLS SUM SUM SUM'");
            else if (out->n > 0 && strcmp(out->tensors[out->n - 1].name, t.name) >= 0)
                rc = manifest_error(path, ln, "tensor names out of order or repeated");
            else
                out->tensors[out->n++] = t;
        }
    }
    free(line);
    fclose(f);
    if (!rc && ln == 0)
        rc = manifest_error(path, 1, "an empty file");
    else if (!rc && (!ended || out->n != declared))
        rc = manifest_error(path, ln, ended ? "fewer tensors than declared" : "no 'end' line (truncated?)");
    if (rc) {
        free(out->tensors);
        out->tensors = NULL;
    }
    return rc;
}
