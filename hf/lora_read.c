/* PEFT LoRA adapters into trident's (the reverse of tr_hf_write_lora_adapter): adapter_config.json
 * + adapter_model.safetensors (or adapter_model.bin) of a base model's family, read under the
 * names lora.c writes (hf_lora_parts, hf_lora_row), into a whole model's LoRA table.
 *
 * Exact representation. trident has one adapter per fused layer (qkv; a Llama's fc = gate and
 * up) with one A, and one rank for every adapter. PEFT's q_proj, k_proj, v_proj (gate_proj,
 * up_proj) each have their own A. A fused layer's parts are grouped by their A: parts with
 * bit-identical A share one block (what trident's own export writes), each other A gets a block
 * of its own. With k the most blocks of any adapter, trident's adapter has rank k r and alpha
 * k alpha (the same scale alpha / r): A = [A_1; ..; A_k] (zero rows past its blocks), and B's
 * rows of part p hold B_p in the columns of p's block, zeros elsewhere. A part, layer or module
 * without a PEFT adapter is zeros (nothing added). So y = (alpha / r) sum_p B_p A_p x exactly:
 * PEFT's defaults (GPT-2's c_attn: k 1, the same rank; a Llama's q_proj + v_proj: k 2) and any
 * subset of modules. Zero rows of A with zero columns of B have zero gradients, so they stay
 * zero in training; the off-block entries of B learn (a larger adapter than PEFT's). */
#include "hf/hf_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "model/gpt.h"

enum { MAX_TARGETS = 64, TARGET_LEN = 128 };

/* adapter_config.json's target_modules as PEFT 0.7.1 matches a module's name (key) with it:
 * a list: key == entry or key ends with "." entry; a string: re.fullmatch(string, key), which
 * is read when it is a plain alternation: [.*\.|.*](NAME|..)[$] or NAME, NAME of [A-Za-z0-9_]. */
typedef struct {
    enum { T_LIST, T_EXACT, T_DOT_SUFFIX, T_SUFFIX } mode;
    int n;
    char name[MAX_TARGETS][TARGET_LEN];
    int hit[MAX_TARGETS];
} peft_targets;

static int ends_with(const char *s, const char *tail)
{
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && !strcmp(s + a - b, tail);
}

/* key matched by t (marks the entries that match it) */
static int targeted(peft_targets *t, const char *key)
{
    int any = 0;
    for (int i = 0; i < t->n; i++) {
        const char *e = t->name[i];
        size_t k = strlen(key), n = strlen(e);
        int dot = k > n && ends_with(key, e) && key[k - n - 1] == '.';
        int hit = t->mode == T_LIST    ? !strcmp(key, e) || dot
                  : t->mode == T_EXACT ? !strcmp(key, e)
                  : t->mode == T_DOT_SUFFIX ? dot
                                            : ends_with(key, e);
        t->hit[i] |= hit;
        any |= hit;
    }
    return any;
}

static int name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

static int parse_regex(const char *path, const char *re, peft_targets *t)
{
    const char *p = re;
    t->mode = !strncmp(p, ".*\\.", 4) ? T_DOT_SUFFIX : !strncmp(p, ".*", 2) ? T_SUFFIX : T_EXACT;
    p += t->mode == T_DOT_SUFFIX ? 4 : t->mode == T_SUFFIX ? 2 : 0;
    int group = *p == '(';
    p += group ? (!strncmp(p, "(?:", 3) ? 3 : 1) : 0;
    for (;;) {
        size_t n = 0;
        while (name_char(p[n]))
            n++;
        if (!n || n >= TARGET_LEN || t->n == MAX_TARGETS)
            break;
        memcpy(t->name[t->n], p, n);
        t->name[t->n++][n] = '\0';
        p += n;
        if (!group || *p != '|')
            break;
        p++;
    }
    if (group && *p == ')')
        p++, group = 0;
    if (*p == '$')
        p++;
    if (!t->n || group || *p)
        return hf_refuse(path, "target_modules", "a regular expression other than a list of "
                         "module names ('.*\\.(q_proj|v_proj)'): trident does not evaluate "
                         "regular expressions; give the list of names");
    return TR_OK;
}

static int read_targets(json_t *root, const char *path, peft_targets *t)
{
    json_t *v = json_object_get(root, "target_modules");
    memset(t, 0, sizeof *t);
    if (json_is_string(v))
        return parse_regex(path, json_string_value(v), t);
    if (!json_is_array(v) || !json_array_size(v))
        return hf_refuse(path, "target_modules", "give the list of the modules the adapters are "
                         "on (null lets PEFT choose them from the model type at load time)");
    if (json_array_size(v) > MAX_TARGETS)
        return hf_refuse(path, "target_modules", "more than 64 entries");
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e) {
        if (!json_is_string(e) || !*json_string_value(e) ||
            strlen(json_string_value(e)) >= TARGET_LEN)
            return hf_refuse(path, "target_modules", "an entry is not a module name (a string "
                             "of 1 to 127 bytes)");
        snprintf(t->name[t->n++], TARGET_LEN, "%s", json_string_value(e));
    }
    t->mode = T_LIST;
    return TR_OK;
}

/* value that leaves a setting off: null, false, 0, "", {} or [] */
static int is_off(json_t *v)
{
    return !v || json_is_null(v) || json_is_false(v) ||
           (json_is_integer(v) && !json_integer_value(v)) ||
           (json_is_string(v) && !*json_string_value(v)) ||
           (json_is_object(v) && !json_object_size(v)) || (json_is_array(v) && !json_array_size(v));
}

/* adapter_config.json of dir into *out (rank, alpha, dropout as PEFT's) and *t. */
static int read_adapter_config(const char *dir, tr_hf_lora_import *out, peft_targets *t)
{
    char path[4200];
    json_t *root = NULL;
    int rc = hf_join(path, sizeof path, dir, "adapter_config.json");
    if (!rc)
        rc = hf_load_json(path, 1 << 20, &root);
    if (!rc && !json_is_object(root))
        rc = tr_fail(TR_ERR_INVALID, "%s: expected a JSON object", path);
    if (rc) {
        json_decref(root);
        return rc;
    }
    json_t *v = json_object_get(root, "peft_type");
    if (!json_is_string(v) || strcmp(json_string_value(v), "LORA"))
        rc = hf_refuse(path, "peft_type", "only LORA adapters are read");
    v = json_object_get(root, "task_type");
    if (!rc && v && !json_is_null(v) &&
        !(json_is_string(v) && !strcmp(json_string_value(v), "CAUSAL_LM")))
        rc = hf_refuse(path, "task_type", "a causal language model's adapters (CAUSAL_LM) only");
    v = json_object_get(root, "r"); /* (LoraConfig's defaults: r 8, lora_alpha 8) */
    json_int_t r = v ? (json_is_integer(v) ? json_integer_value(v) : 0) : 8;
    if (!rc && (r < 1 || r > 65536))
        rc = hf_refuse(path, "r", "the rank must be an integer from 1 to 65536");
    v = json_object_get(root, "lora_alpha");
    double alpha = v ? (json_is_number(v) ? json_number_value(v) : -1) : 8;
    if (!rc && !(alpha > 0 && alpha <= 1e30))
        rc = hf_refuse(path, "lora_alpha", "a positive number is needed");
    v = json_object_get(root, "lora_dropout");
    double dropout = v ? (json_is_number(v) ? json_number_value(v) : -1) : 0;
    if (!rc && !(dropout >= 0 && dropout < 1))
        rc = hf_refuse(path, "lora_dropout", "a probability from 0 (inclusive) to 1 is needed");
    v = json_object_get(root, "bias");
    if (!rc && v && !(json_is_string(v) && !strcmp(json_string_value(v), "none")))
        rc = hf_refuse(path, "bias", "trident's adapters have no biases of their own; only "
                       "\"none\" is read (\"all\" and \"lora_only\" train the base's biases)");
    /* PEFT sets fan_in_fan_out per module (true for Conv1D, false for nn.Linear) whatever the
     * file says; the tensors are (r, in) and (out, r) either way */
    v = json_object_get(root, "fan_in_fan_out");
    if (!rc && v && !json_is_boolean(v))
        rc = hf_refuse(path, "fan_in_fan_out", "true or false is needed");
    static const struct {
        const char *key, *why;
    } off[] = {
        {"use_rslora", "rank-stabilized LoRA scales by alpha / sqrt(r), which trident's alpha / "
                       "rank cannot hold exactly"},
        {"use_dora", "DoRA's magnitude vectors are not trident's LoRA"},
        {"modules_to_save", "trident trains no full copies of base modules beside the adapters"},
        {"layers_to_transform", "trident's adapters are on every layer"},
        {"rank_pattern", "trident's adapters have one rank"},
        {"alpha_pattern", "trident's adapters have one alpha"},
        {"layer_replication", "trident does not replicate layers"},
        {"exclude_modules", "give target_modules alone"},
        {"lora_bias", "trident's adapters have no biases"},
    };
    for (size_t i = 0; !rc && i < sizeof off / sizeof off[0]; i++)
        if (!is_off(json_object_get(root, off[i].key)))
            rc = hf_refuse(path, off[i].key, off[i].why);
    /* what changes nothing trident computes: where the adapters came from and how they were
     * initialised (the file holds the values) */
    static const char *const info[] = {
        "peft_type", "task_type", "r", "lora_alpha", "lora_dropout", "bias", "fan_in_fan_out",
        "target_modules", "base_model_name_or_path", "revision", "inference_mode",
        "init_lora_weights", "layers_pattern", "auto_mapping", "megatron_config",
        "megatron_core", "loftq_config", "peft_version", "qalora_group_size", "eva_config",
        "corda_config", "runtime_config"};
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        int known = 0;
        for (size_t i = 0; i < sizeof info / sizeof info[0] && !known; i++)
            known = !strcmp(key, info[i]);
        if (!rc && !known && !is_off(val))
            rc = hf_refuse(path, key, "a key trident does not know (from a newer PEFT?) with a "
                           "value set: it may change the adapters");
    }
    if (!rc)
        rc = read_targets(root, path, t);
    v = json_object_get(root, "base_model_name_or_path");
    snprintf(out->base_name, sizeof out->base_name, "%s",
             json_is_string(v) ? json_string_value(v) : "");
    json_decref(root);
    out->peft_rank = (int)r;
    out->peft_alpha = alpha;
    out->dropout = dropout;
    return rc;
}

/* "base_model.model.PATH.lora_X.weight" -> PATH (PEFT's module key) */
static void module_key(const char *name, char *key, size_t cap)
{
    const char *p = name + strlen("base_model.model.");
    size_t n = strlen(p) - strlen(".lora_A.weight");
    snprintf(key, cap, "%.*s", (int)(n < cap ? n : cap - 1), p);
}

/* the adapters' file of dir: adapter_model.safetensors, else adapter_model.bin */
static int open_adapters(const char *dir, tr_st_file **f)
{
    char path[4200];
    int rc = hf_join(path, sizeof path, dir, "adapter_model.safetensors");
    FILE *probe = rc ? NULL : fopen(path, "rb");
    if (probe) {
        fclose(probe);
        return tr_st_open(path, f);
    }
    if (!rc && !(rc = hf_join(path, sizeof path, dir, "adapter_model.bin")) &&
        (probe = fopen(path, "rb"))) {
        fclose(probe);
        return tr_pt_open(path, f);
    }
    return rc ? rc : tr_fail(TR_ERR_INVALID, "%s has neither adapter_model.safetensors nor "
                             "adapter_model.bin", dir);
}

/* tensor `name` of f as a (rows, cols) float matrix into out (cap floats) */
static int read_matrix(tr_st_file *f, const char *name, uint64_t rows, uint64_t cols,
                       const char *what, float *out, size_t cap)
{
    const tr_st_tensor *t = tr_st_find(f, name);
    if (!t)
        return tr_fail(TR_ERR_INVALID, "%s: no tensor %s (%s)", tr_st_path(f), name, what);
    if (t->ndim != 2 || t->shape[0] != rows || t->shape[1] != cols || t->numel > cap) {
        st_text s = st_shape_text(t);
        return tr_fail(TR_ERR_INVALID, "%s: tensor %s has shape %s, not [%llu, %llu] (%s; "
                       "adapters of another base model?)", tr_st_path(f), name, s.text,
                       (unsigned long long)rows, (unsigned long long)cols, what);
    }
    return hf_read_weight(f, t, out);
}

int hf_lora_read(const char *peft_dir, const tr_gpt_shape *base, tr_gpt **gout, float **pout,
                 tr_hf_lora_import *info)
{
    *gout = NULL;
    *pout = NULL;
    memset(info, 0, sizeof *info);
    peft_targets *tg = calloc(1, sizeof *tg);
    if (!tg)
        return tr_fail(TR_ERR_NOMEM, "out of memory");
    int rc = read_adapter_config(peft_dir, info, tg);
    int fam = hf_lora_family(base), L = base->num_layers, r = info->peft_rank;
    if (!rc && fam < 0)
        rc = tr_fail(TR_ERR_INVALID, "PEFT adapters are read for GPT-2, Llama, Bloom, GPT-NeoX, "
                     "Falcon, Phi, StableLM, Gemma, GPTBigCode, GPT-J, MPT, OPT and Phi3 bases; "
                     "this base is none of them");
    tr_st_file *f = NULL;
    if (!rc)
        rc = open_adapters(peft_dir, &f);
    size_t nt = f ? tr_st_count(f) : 0, cap = 0;
    for (size_t i = 0; i < nt; i++)
        cap = tr_st_at(f, i)->numel > cap ? tr_st_at(f, i)->numel : cap;
    /* block[(l * 4 + m) * 3 + part]: the block of A rows of PEFT's part, -1 without one */
    int *block = rc ? NULL : malloc((size_t)L * 12 * sizeof *block + 1);
    char *used = rc ? NULL : calloc(nt + 1, 1);
    float *a[3] = {NULL, NULL, NULL}, *tmp = NULL;
    for (int j = 0; j < 3 && !rc; j++)
        a[j] = malloc(cap * sizeof(float) + 1);
    tmp = rc ? NULL : malloc(cap * sizeof(float) + 1);
    if (!rc && (!block || !used || !a[0] || !a[1] || !a[2] || !tmp))
        rc = tr_fail(TR_ERR_NOMEM, "out of memory for the adapters of %s", peft_dir);
    int k = 1, targets = 0;
    for (int l = 0; l < L && !rc; l++)
        for (int m = 0; m < 4 && !rc; m++) {
            hf_lora_part p[3];
            int np = hf_lora_parts(base, fam, l, m, 'A', r, p), nb = 0;
            /* the layer's input features: C, the attention's width, C, the MLP's width */
            uint64_t cols = m == 1   ? (uint64_t)base->NH * tr_gpt_head_size(base)
                            : m == 3 ? (uint64_t)(base->ffn ? base->ffn : 4 * base->C)
                                     : (uint64_t)base->C;
            for (int j = 0; j < np && !rc; j++) {
                int *b = &block[(l * 4 + m) * 3 + j];
                char key[128];
                module_key(p[j].name, key, sizeof key);
                *b = -1;
                if (!targeted(tg, key))
                    continue;
                rc = read_matrix(f, p[j].name, (uint64_t)r, cols, "adapter_config.json's "
                                 "target_modules names its module", a[j], cap);
                for (int i = 0; i < j && !rc && *b < 0; i++) /* the same A: the same block */
                    if (block[(l * 4 + m) * 3 + i] >= 0 &&
                        !memcmp(a[i], a[j], (size_t)r * cols * sizeof(float)))
                        *b = block[(l * 4 + m) * 3 + i];
                if (*b < 0)
                    *b = nb++;
                targets |= 1 << m;
            }
            k = nb > k ? nb : k;
        }
    for (int i = 0; i < tg->n && !rc; i++)
        if (!tg->hit[i])
            rc = tr_fail(TR_ERR_INVALID, "%s/adapter_config.json: target_modules' '%s' names no "
                         "module trident adapts (the attention's input and output projections "
                         "and the MLP's linears of each layer, under the base family's names)",
                         peft_dir, tg->name[i]);
    if (!rc && (double)r * k > 65536)
        rc = tr_fail(TR_ERR_INVALID, "%s: rank %d in %d blocks is too large", peft_dir, r, k);
    tr_gpt_shape s = *base;
    s.lora_rank = r * k;
    s.lora_alpha = (float)(info->peft_alpha * k);
    s.lora_dropout = (float)info->dropout; /* recorded in the manifest's lora line */
    s.lora_targets = targets;
    tr_gpt *g = NULL;
    float *params = NULL;
    if (!rc)
        rc = tr_gpt_create(&s, tr_kernels_cpu(), NULL, &g);
    size_t n = g ? tr_gpt_num_params(g) : 0;
    if (!rc && !(params = calloc(n + 1, sizeof(float))))
        rc = tr_fail(TR_ERR_NOMEM, "out of memory for %zu adapter parameters", n);
    if (!rc)
        tr_gpt_bind(g, params, NULL);
    for (int i = 0; g && i < tr_gpt_num_tensors(g) && !rc; i++) {
        const tr_param_tensor *t = tr_gpt_tensor(g, i);
        int l;
        char ab;
        int m = hf_lora_parse(t->name, &l, &ab);
        hf_lora_part p[3];
        int np = m < 0 ? 0 : hf_lora_parts(&s, fam, l, m, ab, t->rows, p);
        for (int j = 0; j < np && !rc; j++) {
            int b = block[(l * 4 + m) * 3 + j];
            if (b < 0)
                continue;
            float *dst = params + t->offset;
            if (ab == 'A') { /* rows [b r, (b + 1) r) */
                rc = read_matrix(f, p[j].name, (uint64_t)r, (uint64_t)t->cols, "lora_A of the "
                                 "base's layer", tmp, cap);
                if (!rc)
                    memcpy(dst + (size_t)b * r * t->cols, tmp, (size_t)r * t->cols * sizeof(float));
            } else { /* columns [b r, (b + 1) r) of its rows */
                rc = read_matrix(f, p[j].name, (uint64_t)p[j].rows, (uint64_t)r, "lora_B of the "
                                 "base's layer", tmp, cap);
                for (int h = 0; h < p[j].rows && !rc; h++)
                    memcpy(dst + hf_lora_row(&s, &p[j], (size_t)h) * t->cols + (size_t)b * r,
                           tmp + (size_t)h * r, (size_t)r * sizeof(float));
            }
            for (size_t x = 0; x < nt; x++)
                used[x] |= !strcmp(tr_st_at(f, x)->name, p[j].name);
        }
    }
    for (size_t x = 0; x < nt && !rc; x++)
        if (!used[x])
            rc = tr_fail(TR_ERR_INVALID, "%s: tensor %s is no adapter of a module "
                         "adapter_config.json's target_modules names in this base", tr_st_path(f),
                         tr_st_at(f, x)->name);
    if (!rc) {
        info->rank = s.lora_rank;
        info->alpha = s.lora_alpha;
        info->targets = targets;
        info->blocks = k;
        *gout = g;
        *pout = params;
    } else {
        tr_gpt_free(g);
        free(params);
    }
    tr_st_close(f);
    free(tg);
    free(block);
    free(used);
    for (int j = 0; j < 3; j++)
        free(a[j]);
    free(tmp);
    return rc;
}
