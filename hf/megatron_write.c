/* `trident convert --to megatron`: a trident checkpoint split into Megatron-LM's rank files
 * (megatron.h states the contract): the inverse of megatron.c's merge, megatron-core's names. */
#include "hf/hf_internal.h"
#include "hf/megatron_internal.h"
#include "hf/torch_write.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "train/train.h"

/* The switches megatron-core's GPTModel (local spec) has no counterpart for. */
static int refusals(const tr_model_config *m)
{
    const struct {
        int set;
        const char *what;
    } no[] = {
        {m->position_embedding_type && !strcmp(m->position_embedding_type, "alibi"),
         "position_embedding_type alibi (GPTModel's positions are learned_absolute or rope)"},
        {m->parallel_residual, "parallel_residual (GPTModel's layers feed the attention's output "
                               "to the MLP)"},
        {m->embedding_layernorm, "embedding_layernorm (GPTModel has no norm after the "
                                 "embedding)"},
        {m->geglu, "geglu (GPTModel's gated MLP is SwiGLU)"},
        {m->relu, "relu (GPTModel's MLPs are GELU or SwiGLU)"},
        {m->output_layer_bias, "output_layer_bias (GPTModel's output layer has no bias)"},
        {m->add_mlp_bias && !m->add_bias_linear, "add_mlp_bias without add_bias_linear "
                                                 "(GPTModel's add_bias_linear is all or none)"},
        {m->no_layernorm_bias && (!m->normalization || strcmp(m->normalization, "RMSNorm")),
         "layernorm_bias false (GPTModel's LayerNorm has a bias)"},
        {m->embedding_multiplier != 0 && m->embedding_multiplier != 1.0,
         "embedding_multiplier (GPTModel does not scale the embedding)"},
        {m->sliding_window > 0, "sliding_window (Megatron-LM's window_size is not read back)"},
    };
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
        if (no[i].set)
            return tr_fail(TR_ERR_INVALID, "the model has %s: Megatron-LM's GPTModel cannot "
                           "hold it", no[i].what);
    return TR_OK;
}

/* Defaults of the fields a checkpoint may not record (tr_checkpoint_read_model). */
static void defaults(tr_model_config *m)
{
    if (!m->normalization)
        m->normalization = "LayerNorm";
    if (!m->position_embedding_type)
        m->position_embedding_type = "learned_absolute";
    if (!m->gelu_approximate)
        m->gelu_approximate = "tanh";
    if (!m->num_query_groups)
        m->num_query_groups = m->num_attention_heads;
    if (!m->ffn_hidden_size)
        m->ffn_hidden_size = tr_model_ffn_hidden(m);
    if (!m->make_vocab_size_divisible_by)
        m->make_vocab_size_divisible_by = 128;
    if (!(m->init_method_std > 0))
        m->init_method_std = 0.02;
    if (!(m->layernorm_epsilon > 0))
        m->layernorm_epsilon = 1e-5;
    if (!(m->rotary_base > 0))
        m->rotary_base = 10000;
    if (!(m->rotary_percent > 0))
        m->rotary_percent = 1.0;
    if (!(m->rotary_seq_len_interpolation_factor > 0))
        m->rotary_seq_len_interpolation_factor = 1.0;
    if (!(m->rope_scaling_factor > 0))
        m->rope_scaling_factor = 8.0;
}

/* TP size tp and PP size pp divide what they split. */
static int check_layout(const tr_model_config *m, int tp, int pp)
{
    const struct {
        const char *what;
        int n, by;
        const char *flag;
    } split[] = {{"num_attention_heads", m->num_attention_heads, tp, "--tp"},
                 {"num_query_groups", m->num_query_groups, tp, "--tp"},
                 {"ffn_hidden_size", m->ffn_hidden_size, tp, "--tp"},
                 {"num_layers", m->num_layers, pp, "--pp"}};
    for (size_t i = 0; i < sizeof split / sizeof split[0]; i++)
        if (split[i].n % split[i].by)
            return tr_fail(TR_ERR_INVALID, "%s %d is not divisible by %s %d", split[i].what,
                           split[i].n, split[i].flag, split[i].by);
    if (!tr_gpt_padded_vocab(m, tp))
        return tr_fail(TR_ERR_INVALID, "the padded vocabulary of vocab_size %d does not fit",
                       m->vocab_size);
    return TR_OK;
}

/* args: Megatron-LM's names for the model (megatron_args.c reads them back) */
static void write_args(ptw *w, const tr_model_config *m, int tp, int pp, int bf16,
                       int iteration)
{
    int tanh = !strcmp(m->gelu_approximate, "tanh") && !m->swiglu;
    ptw_str(w, "args");
    ptw_namespace_begin(w);
    const struct {
        const char *key;
        int v;
    } ints[] = {{"num_layers", m->num_layers},
                {"hidden_size", m->hidden_size},
                {"ffn_hidden_size", m->ffn_hidden_size},
                {"num_attention_heads", m->num_attention_heads},
                {"kv_channels", tr_model_head_size(m)},
                {"num_query_groups", m->num_query_groups},
                {"seq_length", m->seq_length},
                {"max_position_embeddings", m->max_position_embeddings},
                {"padded_vocab_size", tr_gpt_padded_vocab(m, tp)},
                {"vocab_size", m->vocab_size},
                {"make_vocab_size_divisible_by", m->make_vocab_size_divisible_by},
                {"tensor_model_parallel_size", tp},
                {"pipeline_model_parallel_size", pp},
                {"expert_model_parallel_size", 1},
                {"iteration", iteration}};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        ptw_str(w, ints[i].key);
        ptw_int(w, ints[i].v);
    }
    const struct {
        const char *key;
        int v;
    } bools[] = {{"group_query_attention", m->num_query_groups != m->num_attention_heads},
                 {"swiglu", m->swiglu},
                 {"apply_layernorm_1p", m->apply_layernorm_1p},
                 /* tanh GELU: the fused bias-GELU with biases, else openai_gelu */
                 {"bias_gelu_fusion", tanh && m->add_bias_linear},
                 {"openai_gelu", tanh && !m->add_bias_linear},
                 {"untie_embeddings_and_output_weights", m->untie_embeddings_and_output_weights},
                 {"add_bias_linear", m->add_bias_linear},
                 {"add_qkv_bias", m->add_qkv_bias},
                 {"use_rope_scaling", m->use_rope_scaling},
                 {"squared_relu", 0},
                 {"qk_layernorm", 0},
                 {"rotary_interleaved", 0},
                 {"apply_residual_connection_post_layernorm", 0},
                 {"use_mcore_models", 1},
                 {"fp16", 0},
                 {"bf16", bf16}};
    for (size_t i = 0; i < sizeof bools / sizeof bools[0]; i++) {
        ptw_str(w, bools[i].key);
        ptw_bool(w, bools[i].v);
    }
    const struct {
        const char *key;
        double v;
    } nums[] = {{"norm_epsilon", m->layernorm_epsilon},
                {"init_method_std", m->init_method_std},
                {"rotary_base", m->rotary_base},
                {"rotary_percent", m->rotary_percent},
                {"rope_scaling_factor", m->rope_scaling_factor},
                {"hidden_dropout", m->hidden_dropout},
                {"attention_dropout", m->attention_dropout}};
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        ptw_str(w, nums[i].key);
        ptw_float(w, nums[i].v);
    }
    ptw_str(w, "rotary_seq_len_interpolation_factor");
    if (m->rotary_seq_len_interpolation_factor != 1.0)
        ptw_float(w, m->rotary_seq_len_interpolation_factor);
    else
        ptw_none(w);
    const char *strs[][2] = {{"normalization", m->normalization},
                             {"position_embedding_type", m->position_embedding_type},
                             {"transformer_impl", "local"}};
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++) {
        ptw_str(w, strs[i][0]);
        ptw_str(w, strs[i][1]);
    }
    ptw_str(w, "virtual_pipeline_model_parallel_size");
    ptw_none(w);
    ptw_str(w, "num_experts");
    if (m->num_experts) /* (megatron-core's SequentialMLP: grouped GEMM off, allgather) */
        ptw_int(w, m->num_experts);
    else
        ptw_none(w);
    if (m->num_experts) {
        const char *lb = m->moe_router_load_balancing_type ? m->moe_router_load_balancing_type
                                                           : "aux_loss";
        const char *moe_strs[][2] = {{"moe_router_load_balancing_type", lb},
                                     {"moe_token_dispatcher_type", "allgather"}};
        for (size_t i = 0; i < 2; i++) {
            ptw_str(w, moe_strs[i][0]);
            ptw_str(w, moe_strs[i][1]);
        }
        ptw_str(w, "moe_router_topk");
        ptw_int(w, m->moe_router_topk);
        ptw_str(w, "moe_router_pre_softmax");
        ptw_bool(w, m->moe_router_pre_softmax);
        ptw_str(w, "moe_grouped_gemm");
        ptw_bool(w, 0);
        ptw_str(w, "moe_aux_loss_coeff");
        ptw_float(w, m->moe_aux_loss_coeff);
        ptw_str(w, "moe_z_loss_coeff");
        if (m->moe_z_loss_coeff != 0.0)
            ptw_float(w, m->moe_z_loss_coeff);
        else
            ptw_none(w);
    }
    ptw_str(w, "params_dtype");
    ptw_global(w, "torch", bf16 ? "bfloat16" : "float32");
    ptw_namespace_end(w);
}

/* TP rank r's shard of trident tensor t (whole at src) as Megatron holds it (rows x cols of
 * dst; cols 1: a vector): the inverse of megatron.c's merge. */
static void cut(const tr_param_tensor *t, int split, int r, int tp, size_t R, const float *src,
                float *dst, size_t *rows, size_t *cols)
{
    size_t C = (size_t)t->full_cols;
    size_t sr = mlm_shard_rows(split, R, tp), sc = mlm_shard_cols(split, C, tp);
    for (size_t i = 0; i < sr; i++) {
        size_t row = mlm_whole_row(split, r, sr, i);
        if (row >= (size_t)t->full_rows)
            memset(dst + i * sc, 0, sc * sizeof(float)); /* the vocabulary's padding */
        else
            memcpy(dst + i * sc, src + row * C + (split == MLM_COLS ? (size_t)r * sc : 0),
                   sc * sizeof(float));
    }
    *rows = sr, *cols = sc;
}

/* Trident tensor t's Megatron name on its stage (layers per stage lps), its split and stage;
 * 0 for a tensor not stored under its own name. */
static int name_of(const tr_param_tensor *t, int swiglu, int lps, char *name, size_t cap,
                   int *split, int *stage, int pp)
{
    int l = -1, used = 0;
    if (sscanf(t->name, "layers.%d.%n", &l, &used) == 1 && used > 0) {
        char moe[128];
        *stage = l / lps;
        for (int i = 0; i < MLM_LAYER_NAMES; i++)
            if (!strcmp(t->name + used, mlm_layer_names[0][i].trident)) {
                const mlm_name *n = &mlm_layer_names[0][i];
                snprintf(name, cap, "decoder.layers.%d.%s", l % lps, n->names[0]);
                *split = swiglu && !strncmp(n->trident, "fc.", 3) ? MLM_GLU : n->split;
                return 1;
            }
        if (!mlm_moe_name(t->name + used, swiglu, moe, sizeof moe, split))
            return 0;
        snprintf(name, cap, "decoder.layers.%d.%s", l % lps, moe);
        return 1;
    }
    for (int i = 0; i < MLM_TOP_NAMES; i++)
        if (!strcmp(t->name, mlm_top_names[0][i].trident)) {
            const mlm_name *n = &mlm_top_names[0][i];
            snprintf(name, cap, "%s", n->names[0]);
            *split = n->split;
            *stage = !strncmp(t->name, "lnf.", 4) || !strcmp(t->name, "output_layer") ? pp - 1
                                                                                       : 0;
            return 1;
        }
    return 0;
}

/* megatron-core's linear layers' (and the output layer's) MODULE._extra_state, None, after
 * MODULE.weight (name): load_state_dict(strict=True) expects them */
static void extra_state(ptw *w, const char *name)
{
    size_t n = strlen(name);
    if (n < 7 || strcmp(name + n - 7, ".weight") ||
        (!strstr(name, ".linear_") && strcmp(name, "output_layer.weight")))
        return;
    char key[300];
    snprintf(key, sizeof key, "%.*s._extra_state", (int)(n - 7), name);
    ptw_str(w, key);
    ptw_none(w);
}

/* The n floats at buf as bf16 (rounded to nearest even) in buf's first 2 n bytes. A finite
 * value beyond BF16's largest (3.3895e38) would round to infinity: refused, as the safetensors
 * writer refuses it, naming the tensor (`name`, Megatron's) and the element. */
int hf_bf16_in_place(float *buf, size_t n, const char *name)
{
    unsigned char *out = (unsigned char *)buf;
    for (size_t i = 0; i < n; i++) { /* writes bytes 2i, 2i + 1: floats before i, read */
        float v = buf[i];
        uint16_t h = tr_f32_to_bf16(v);
        if (isfinite(v) && (h & 0x7f80u) == 0x7f80u)
            return tr_fail(TR_ERR_INVALID, "tensor '%.200s' holds %g at element %zu, beyond "
                           "BF16's range (it would be written as infinity): export it with "
                           "--dtype fp32", name, (double)v, i);
        memcpy(out + 2 * i, &h, 2);
    }
    return TR_OK;
}

/* One rank file: args, version, iteration, the stage's shards (bf16: BF16). */
static int write_rank(const char *path, tr_gpt *g, const float *params,
                      const tr_model_config *m, int tp, int pp, int bf16, int t, int p,
                      int iteration, float *buf)
{
    ptw *w;
    int rc = ptw_open(path, &w);
    if (rc)
        return rc;
    ptw_dict_begin(w);
    write_args(w, m, tp, pp, bf16, iteration);
    ptw_str(w, "checkpoint_version");
    ptw_float(w, 3.0);
    ptw_str(w, "iteration");
    ptw_int(w, iteration);
    ptw_str(w, "model");
    ptw_dict_begin(w);
    size_t Rv = (size_t)tr_gpt_padded_vocab(m, tp);
    int n = tr_gpt_num_tensors(g), lps = m->num_layers / pp;
    for (int i = 0; i < n && !rc; i++) {
        const tr_param_tensor *x = tr_gpt_tensor(g, i);
        char name[256];
        int split = MLM_REP, stage = 0;
        if (!name_of(x, m->swiglu, lps, name, sizeof name, &split, &stage, pp)) {
            rc = tr_fail(TR_ERR_INTERNAL, "no Megatron-LM name for trident tensor '%s'", x->name);
            break;
        }
        /* a tied model's last stage (PP > 1) holds its own copy of the embedding as the head */
        int head_copy = !strcmp(x->name, "wte") && pp > 1 &&
                        !m->untie_embeddings_and_output_weights;
        for (int pass = 0; pass < 1 + head_copy && !rc; pass++) {
            if (pass)
                snprintf(name, sizeof name, "output_layer.weight"), stage = pp - 1;
            if (stage != p)
                continue;
            size_t rows, cols;
            cut(x, split, t, tp, x->vocab_rows ? Rv : (size_t)x->full_rows, params + x->offset,
                buf, &rows, &cols);
            uint64_t shape[2] = {rows, cols};
            if (bf16 && (rc = hf_bf16_in_place(buf, rows * cols, name)))
                break;
            ptw_str(w, name);
            rc = ptw_tensor(w, bf16 ? TR_ST_BF16 : TR_ST_F32, x->full_cols > 1 ? 2 : 1, shape,
                            buf);
            extra_state(w, name);
        }
    }
    if (p == pp - 1 && pp == 1 && !m->untie_embeddings_and_output_weights)
        extra_state(w, "output_layer.weight"); /* (the head is the embedding: no weight) */
    ptw_dict_end(w);
    ptw_dict_end(w);
    return ptw_close(w, rc);
}

static int make_dir(const char *path)
{
    if (mkdir(path, 0777) && errno != EEXIST)
        return tr_fail(TR_ERR_IO, "cannot create %s: %s", path, strerror(errno));
    return TR_OK;
}

/* SAVE (the temporary folder): the tracker, release/mp_rank_TT[_PPP]/model_optim_rng.pt */
static int write_save(const char *dir, tr_gpt *g, const float *params, const tr_model_config *m,
                      int tp, int pp, int bf16, int iteration)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/latest_checkpointed_iteration.txt", dir);
    FILE *f = fopen(path, "w");
    if (!f || fputs("release", f) == EOF || fclose(f))
        return tr_fail(TR_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    snprintf(path, sizeof path, "%s/release", dir);
    int rc = make_dir(path);
    size_t most = 0, Rv = (size_t)tr_gpt_padded_vocab(m, tp);
    for (int i = 0; i < tr_gpt_num_tensors(g); i++) {
        const tr_param_tensor *x = tr_gpt_tensor(g, i);
        size_t rows = x->vocab_rows ? Rv : (size_t)x->full_rows;
        if (rows * (size_t)x->full_cols > most)
            most = rows * (size_t)x->full_cols;
    }
    float *buf = rc ? NULL : malloc(most * sizeof(float) + 1);
    if (!rc && !buf)
        rc = tr_fail(TR_ERR_NOMEM, "out of memory for a tensor of %zu floats", most);
    for (int p = 0; p < pp && !rc; p++)
        for (int t = 0; t < tp && !rc; t++) {
            int k = pp > 1 ? snprintf(path, sizeof path, "%s/release/mp_rank_%02d_%03d", dir, t, p)
                           : snprintf(path, sizeof path, "%s/release/mp_rank_%02d", dir, t);
            if (!(rc = make_dir(path))) {
                snprintf(path + k, sizeof path - (size_t)k, "/model_optim_rng.pt");
                rc = write_rank(path, g, params, m, tp, pp, bf16, t, p, iteration, buf);
            }
        }
    free(buf);
    return rc;
}

int tr_megatron_export(const char *ckpt_dir, const char *save_dir, int tp, int pp, int bf16,
                       const tr_model_config *config_model, int *iteration)
{
    tr_model_config m = {0};
    int it = 0, rc = tr_checkpoint_read_model(ckpt_dir, &m, &it);
    const tr_model_config *mc = config_model;
    if (!rc && mc)
        rc = hf_config_sizes_match(ckpt_dir, &m, mc);
    if (!rc && mc)
        m = *mc;
    if (!rc) /* the rates it was trained with (its manifest's), not a config's */
        rc = tr_checkpoint_read_dropout(ckpt_dir, &m.hidden_dropout, &m.attention_dropout);
    if (!rc && !m.seq_length)
        m.seq_length = m.max_position_embeddings;
    defaults(&m);
    if (!rc)
        rc = refusals(&m);
    if (!rc)
        rc = check_layout(&m, tp, pp);
    tr_gpt *g = NULL;
    float *params = NULL;
    hf_out_dir o;
    if (!rc)
        rc = hf_whole_model(&m, m.num_experts ? TR_HF_MIXTRAL : TR_HF_LLAMA, &g,
                            &params); /* (experts: a Mixtral's layer, as hf_whole_model allows) */
    if (!rc)
        rc = tr_checkpoint_load_model(ckpt_dir, g, tr_kernels_cpu(), params, &it);
    if (!rc && !(rc = hf_out_begin(save_dir, &o)))
        rc = hf_out_end(&o, write_save(o.tmp, g, params, &m, tp, pp, bf16, it));
    tr_gpt_free(g);
    free(params);
    if (!rc && iteration)
        *iteration = it;
    return rc;
}
