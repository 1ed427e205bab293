/* A checkpoint's model alone, for inference and export: its sizes from the manifest, and its
 * parameters into one model (this TP rank's shards), without an engine or optimizer state. */
#include "train/checkpoint_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"

/* The manifest of DIR's latest checkpoint, and that checkpoint's directory. */
static int open_latest(const char *dir, char *ckpt_dir, size_t cap, ckpt_manifest *mf)
{
    int it = -1, rc = ckpt_read_tracker(dir, &it);
    if (rc)
        return rc;
    if (it < 0)
        return tr_fail(TR_ERR_INVALID, "%s holds no checkpoint (no latest_checkpointed_"
                                       "iteration.txt)", dir);
    char path[4300];
    if ((rc = ckpt_folder(ckpt_dir, cap, dir, it)) ||
        (rc = ckpt_join(path, sizeof path, ckpt_dir, "manifest.txt")))
        return rc;
    return ckpt_read_manifest(path, it, mf);
}

int tr_checkpoint_read_model(const char *dir, tr_model_config *model, int *iteration)
{
    char ckpt_dir[4200];
    ckpt_manifest mf = {0};
    int rc = open_latest(dir, ckpt_dir, sizeof ckpt_dir, &mf);
    free(mf.tensors);
    if (rc)
        return rc;
    model->num_layers = mf.num_layers;
    model->hidden_size = mf.hidden_size;
    model->num_attention_heads = mf.num_attention_heads;
    model->vocab_size = mf.vocab_size;
    model->max_position_embeddings = mf.max_position_embeddings;
    model->layernorm_epsilon = 1e-5; /* GPT-2's, trident's only model before the family line */
    if (mf.has_family) { /* the switches, as the config keys say them (static strings) */
        static char layer_norm[] = "LayerNorm", rms_norm[] = "RMSNorm";
        static char learned[] = "learned_absolute", rope[] = "rope", alibi[] = "alibi";
        static char gelu_tanh[] = "tanh", gelu_none[] = "none";
        static char hf_auto[] = "auto", hf_phi3[] = "phi3";
        model->normalization = mf.rmsnorm ? rms_norm : layer_norm;
        model->position_embedding_type = mf.position == 1 ? rope : mf.position == 2 ? alibi : learned;
        model->kv_channels = mf.kv_channels;
        int hs = tr_model_head_size(model);
        model->rotary_percent = mf.position == 1 && hs > 0 ? (double)mf.rotary_dims / hs : 1.0;
        model->rotary_base = mf.position == 1 ? mf.rotary_base : 10000.0;
        model->swiglu = mf.swiglu;
        model->ffn_hidden_size = mf.ffn;
        model->num_query_groups = mf.query_groups;
        model->untie_embeddings_and_output_weights = mf.untie;
        model->add_bias_linear = mf.linear_bias;
        model->add_qkv_bias = mf.qkv_bias;
        model->add_mlp_bias = mf.mlp_bias;
        model->no_layernorm_bias = mf.no_norm_bias;
        model->sliding_window = mf.sliding_window;
        model->embedding_layernorm = mf.emb_ln;
        model->parallel_residual = mf.parallel_residual;
        model->parallel_shared_norm = mf.parallel_shared_norm;
        model->output_layer_bias = mf.output_bias;
        model->gelu_approximate = mf.gelu_exact ? gelu_none : gelu_tanh;
        model->apply_layernorm_1p = mf.layernorm_1p;
        model->embedding_multiplier = mf.embedding_multiplier ? mf.embedding_multiplier : 1.0;
        model->geglu = mf.geglu;
        model->relu = mf.relu;
        model->hf_family = mf.hf_phi3 ? hf_phi3 : hf_auto;
        /* rope scaling: the manifest's kind, else the keys' defaults */
        int llama3 = mf.rope_scaling == TR_ROPE_SCALING_LLAMA3;
        model->rotary_seq_len_interpolation_factor =
            mf.rope_scaling == TR_ROPE_SCALING_LINEAR ? mf.rope_factor : 1.0;
        model->use_rope_scaling = llama3;
        model->rope_scaling_factor = llama3 ? mf.rope_factor : 8.0;
        model->rope_scaling_low_freq_factor = llama3 ? mf.rope_low : 1.0;
        model->rope_scaling_high_freq_factor = llama3 ? mf.rope_high : 4.0;
        model->rope_scaling_original_max_position_embeddings = llama3 ? mf.rope_original : 8192;
        model->layernorm_epsilon = mf.eps;
        static char aux_loss[] = "aux_loss", no_balancing[] = "none";
        model->num_experts = mf.moe_experts; /* (else the keys' defaults) */
        model->moe_router_topk = mf.moe_experts ? mf.moe_topk : 2;
        model->moe_router_pre_softmax = mf.moe_pre_softmax;
        model->moe_router_load_balancing_type =
            mf.moe_experts && !mf.moe_aux_loss ? no_balancing : aux_loss;
        model->moe_aux_loss_coeff = mf.moe_aux_coeff;
        model->moe_z_loss_coeff = mf.moe_z_coeff;
    }
    if (iteration)
        *iteration = mf.iteration;
    return TR_OK;
}

int tr_checkpoint_read_lora(const char *dir, int *rank, double *alpha, double *dropout,
                            char *targets, size_t cap)
{
    char ckpt_dir[4200], list[32];
    ckpt_manifest mf = {0};
    int rc = open_latest(dir, ckpt_dir, sizeof ckpt_dir, &mf);
    free(mf.tensors);
    if (rc)
        return rc;
    *rank = mf.has_lora ? mf.lora_rank : 0;
    *alpha = mf.has_lora ? mf.lora_alpha : 0.0;
    *dropout = mf.has_lora ? mf.lora_dropout : 0.0;
    ckpt_lora_targets_text(mf.has_lora ? mf.lora_targets : 0, list, sizeof list);
    snprintf(targets, cap, "[%s]", list); /* "[qkv,proj]" */
    return TR_OK;
}

int tr_checkpoint_read_dropout(const char *dir, double *hidden, double *attention)
{
    char ckpt_dir[4200];
    ckpt_manifest mf = {0};
    int rc = open_latest(dir, ckpt_dir, sizeof ckpt_dir, &mf);
    free(mf.tensors);
    *hidden = !rc && mf.has_dropout ? mf.hidden_dropout : 0.0;
    *attention = !rc && mf.has_dropout ? mf.attention_dropout : 0.0;
    return rc;
}

void tr_checkpoint_note_dropout(const char *dir, const char *what, const tr_gpt_shape *s)
{
    char ckpt_dir[4200];
    ckpt_manifest mf = {0};
    if (!open_latest(dir, ckpt_dir, sizeof ckpt_dir, &mf))
        ckpt_note_dropout(s, &mf, what);
    free(mf.tensors);
    tr_clear_error(); /* (a bad checkpoint: the load names it) */
}

/* Rows of t a checkpoint holds: the word embedding keeps its V real rows. */
static size_t saved_rows(const tr_gpt_shape *s, const tr_param_tensor *t)
{
    return t->vocab_rows && t->full_rows > s->V ? (size_t)s->V : (size_t)t->full_rows;
}

/* TR_ERR_INVALID naming a tensor of the manifest that the whole model g (its trainable
 * tensors, or its base's) does not have: a checkpoint of another model (another LoRA
 * target_modules) whose extra tensors would otherwise be dropped silently. */
int ckpt_no_other_tensors(const ckpt_manifest *mf, const char *ckpt_dir, tr_gpt *g, int base,
                          int stage_only)
{
    int n = base ? tr_gpt_num_base_tensors(g) : tr_gpt_num_tensors(g);
    const tr_gpt_shape *s = tr_gpt_get_shape(g);
    for (size_t j = 0; j < mf->n; j++) {
        if (stage_only) {
            int layer, used = 0;
            if (sscanf(mf->tensors[j].name, "layers.%d.%n", &layer, &used) != 1 || !used)
                continue; /* not a layer's */
            if (layer >= 0 && layer < s->num_layers &&
                (layer < s->layer_first || layer >= s->layer_first + s->layer_count))
                continue; /* another stage's layer (one the model has no stage of: every rank's) */
        }
        int layer, ex, used = 0, first, count;
        tr_gpt_local_experts(g, &first, &count);
        if (sscanf(mf->tensors[j].name, "layers.%d.experts.%d.%n", &layer, &ex, &used) == 2 &&
            used && ex >= 0 && ex < s->num_experts && (ex < first || ex >= first + count))
            continue; /* another expert-parallel rank's expert */
        int found = 0;
        for (int i = 0; i < n && !found; i++)
            found = !strcmp(mf->tensors[j].name, base ? tr_gpt_base_tensor(g, i)->name
                                                      : tr_gpt_tensor(g, i)->name);
        if (!found)
            return tr_fail(TR_ERR_INVALID, "checkpoint %s holds a tensor %s that the config's "
                           "model does not have: it is of another model (%s)", ckpt_dir,
                           mf->tensors[j].name, strstr(mf->tensors[j].name, ".lora_")
                               ? "other finetune.lora.target_modules?" : "other model switches?");
    }
    return TR_OK;
}

/* The tensors of g's trainable table (base 0) or of its base (base 1; t->param set). */
static int load_tensors(const char *dir, tr_gpt *g, const tr_kernels *k, float *params,
                        int *iteration, int base)
{
    const tr_gpt_shape *s = tr_gpt_get_shape(g);
    char ckpt_dir[4200];
    ckpt_manifest mf = {0};
    int rc = open_latest(dir, ckpt_dir, sizeof ckpt_dir, &mf);
    if (!rc) {
        char path[4300];
        if (!(rc = ckpt_join(path, sizeof path, ckpt_dir, "manifest.txt")))
            rc = ckpt_same_family(s, &mf, path);
        /* the adapters (export): the alpha they were trained with, not another config's; a
         * LoRA checkpoint into a plain model is named by the tensor checks below */
        if (!rc && !base)
            rc = ckpt_same_lora(s, &mf, path, 0, 1);
    }
    int n_tensors = base ? tr_gpt_num_base_tensors(g) : tr_gpt_num_tensors(g);
    size_t n = 0;
    for (int i = 0; i < n_tensors; i++) {
        const tr_param_tensor *t = base ? tr_gpt_base_tensor(g, i) : tr_gpt_tensor(g, i);
        if (t->offset + t->numel > n)
            n = t->offset + t->numel;
    }
    float *host = rc ? NULL : tr_alloc(n * sizeof(float) + 1, "checkpoint staging");
    if (!rc && !host)
        rc = TR_ERR_NOMEM;
    if (!rc) /* rows no checkpoint holds (vocabulary padding) are 0 */
        memset(host, 0, n * sizeof(float));
    for (int i = 0; i < n_tensors && !rc; i++) {
        const tr_param_tensor *t = base ? tr_gpt_base_tensor(g, i) : tr_gpt_tensor(g, i);
        ckpt_record key = {0};
        snprintf(key.name, sizeof key.name, "%s", t->name);
        const ckpt_record *rec = bsearch(&key, mf.tensors, mf.n, sizeof key, ckpt_cmp_record);
        size_t rows = saved_rows(s, t);
        if (!rec) {
            int adapters = 0; /* a LoRA run's checkpoint: its adapters alone */
            for (size_t j = 0; j < mf.n && !adapters; j++)
                adapters = strstr(mf.tensors[j].name, ".lora_A") != NULL;
            rc = tr_fail(TR_ERR_INVALID, "checkpoint %s has no tensor %s%s", ckpt_dir, t->name,
                         adapters && !strstr(t->name, ".lora_")
                             ? " (it holds a LoRA run's adapters alone: the run's config gives "
                               "the base (finetune.load); trident convert --to hf --config RUN.yaml "
                               "--merge-lora writes a whole model)"
                             : "");
            break;
        }
        if (rec->rows != rows || rec->cols != t->full_cols) {
            rc = tr_fail(TR_ERR_INVALID, "checkpoint %s: tensor %s is %zu x %d; this model's is "
                                         "%zu x %d", ckpt_dir, t->name, rec->rows, rec->cols,
                         rows, t->full_cols);
            break;
        }
        if ((rc = ckpt_verify_tensor(ckpt_dir, rec, 1))) /* the parameters: all it reads */
            break;
        char path[4300];
        if ((rc = ckpt_join(path, sizeof path, ckpt_dir, t->name)))
            break;
        ckpt_read_ctx r = {.path = path, .array = 0, .numel = (uint64_t)rec->rows * rec->cols,
                           .dst = host + t->offset};
        if ((r.fd = open(path, O_RDONLY)) < 0) {
            rc = tr_fail(TR_ERR_INVALID, "checkpoint file %s: %s", path, strerror(errno));
            break;
        }
        rc = ckpt_for_each_segment(t, s->tp_rank, rows, 0, t->numel, ckpt_read_segment, &r);
        close(r.fd);
    }
    if (!rc && s->is_first && s->is_last) /* the whole model: it reads every tensor there is */
        rc = ckpt_no_other_tensors(&mf, ckpt_dir, g, base, 0);
    free(mf.tensors);
    if (!rc && !base)
        k->to_device(NULL, params, host, n * sizeof(float));
    for (int i = 0; i < n_tensors && !rc && base; i++) {
        tr_param_tensor *t = tr_gpt_base_tensor(g, i);
        k->to_device(NULL, t->param, host + t->offset, t->numel * sizeof(float));
    }
    tr_free(host);
    if (!rc && iteration)
        *iteration = mf.iteration;
    return rc;
}

int tr_checkpoint_load_model(const char *dir, tr_gpt *g, const tr_kernels *k, float *params,
                             int *iteration)
{
    return load_tensors(dir, g, k, params, iteration, 0);
}

int tr_checkpoint_load_base(const char *dir, tr_gpt *g, const tr_kernels *k)
{
    return load_tensors(dir, g, k, NULL, NULL, 1);
}
