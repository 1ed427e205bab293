/* train/ internal: what saving (checkpoint.c), loading (checkpoint_load.c) and the manifest's
 * text (checkpoint_manifest.c) share. Not part of the contract; the format is described at the top of checkpoint.c. */
#ifndef TR_CHECKPOINT_INTERNAL_H
#define TR_CHECKPOINT_INTERNAL_H

#include <stdint.h>

#include "train/engine_internal.h"

#define CKPT_FORMAT "trident-checkpoint 1"
#define TRACKER "latest_checkpointed_iteration.txt"
#define N_ARRAYS 3 /* parameter, exp_avg, exp_avg_sq */
/* The tracker's word for a checkpoint of weights alone (Megatron's converted checkpoints):
 * DIR/release/, iteration 0, Adam's moments zero; training from it starts at iteration 1. */
#define RELEASE "release"

extern const char *const ckpt_array_names[N_ARRAYS];

/* One line of a rank's checksum file, and then of the manifest. */
typedef struct {
    char name[48];
    size_t rows;
    int cols;
    uint64_t sum[N_ARRAYS];
    int have[N_ARRAYS];
} ckpt_record;

int ckpt_cmp_record(const void *a, const void *b); /* by name, for qsort / bsearch */

/* Sum (mod 2^64) over the n elements of hash(position first + i, bits of v[i]). */
uint64_t ckpt_checksum(const float *v, uint64_t first, size_t n);
/* Rows of t kept in a checkpoint (the word embedding's real vocabulary). */
size_t ckpt_saved_rows(const tr_engine *e, const tr_param_tensor *t);

typedef int (*ckpt_segment_fn)(void *ctx, size_t local, uint64_t file_elem, size_t count);
/* The local elements [a, b) of t as runs contiguous in the saved whole tensor (see
 * checkpoint.c); rows past rows_saved are skipped. */
TR_MUST_CHECK int ckpt_for_each_segment(const tr_param_tensor *t, int tp_rank, size_t rows_saved, size_t a,
                             size_t b, ckpt_segment_fn fn, void *ctx);
/* fn(ctx, local, count, shard_at) for each piece of tensor [offset, offset + numel) of the
 * flat buffers in this rank's optimizer shard (all of it without ZeRO-1): its first local
 * element, its length, and where it sits in the compact Adam moments. */
typedef int (*ckpt_piece_fn)(void *ctx, size_t local, size_t count, size_t shard_at);
TR_MUST_CHECK int ckpt_for_each_moment_piece(const tr_engine *e, size_t offset, size_t numel,
                                  ckpt_piece_fn fn, void *ctx);

/* A manifest: its iteration, the model line and the tensors, sorted by name. */
typedef struct {
    int iteration;
    int num_layers, hidden_size, num_attention_heads, vocab_size, max_position_embeddings;
    /* the data line (absent from checkpoints written before it, and from imported ones):
     * what the run had consumed, and the identity of its data */
    int has_data;
    unsigned long long consumed_samples, seed, tokens, documents;
    int global_batch_size;
    char split[64];
    /* the loss-scaler line (fp16 runs): the dynamic scaler's state at the save */
    int has_scaler;
    double loss_scale;
    int scaler_growth, scaler_hysteresis_left;
    long skipped_iterations;
    /* their samples: written (" skipped_samples N" at the line's end) only when not
     * skipped_iterations x global_batch_size (a ramp-up's), which reading assumes without it */
    unsigned long long skipped_samples;
    /* the family line (absent from checkpoints written before it): the model's switches,
     * tr_gpt_shape's (position: 0 learned, 1 rope, 2 alibi; ffn / query_groups: the sizes
     * themselves), so inference and export need no --config; at its end " qkv_bias 1" only for
     * a model whose qkv alone has biases, " sliding_window N" only for a model with a
     * window, " parallel_residual 1", " gelu_exact 1", " parallel_shared_norm 1",
     * " output_bias 1", " kv_channels N" (a head size other than hidden / heads),
     * " layernorm_1p 1", " embedding_multiplier X" (float32's %.9g, not 1), " geglu 1",
     * " rope_linear F" (linear position interpolation) or " rope_llama3 F L H N" (Llama 3.1's
     * factor, low and high frequency factors, original positions) and " mlp_bias 1" (a model
     * whose MLP alone has biases), " layernorm_bias 0" (LayerNorms without biases), " relu 1"
     * (the MLP's ReLU), " hf_family phi3" (model.hf_family), " experts ..." (mixture of
     * experts) only for models with them (GPT-NeoX, Falcon, Phi, Gemma, Llama 3.1, GPT-J, MPT,
     * OPT, Phi-3, Mixtral), in that order, so other lines read as before) */
    int has_family;
    int rmsnorm, position, rotary_dims, swiglu, ffn, query_groups, untie, linear_bias, emb_ln;
    int qkv_bias, sliding_window, parallel_residual, gelu_exact, parallel_shared_norm;
    int output_bias, kv_channels, layernorm_1p, geglu, mlp_bias;
    int no_norm_bias; /* " layernorm_bias 0": model.layernorm_bias false */
    int relu;         /* " relu 1": model.relu */
    int hf_phi3;      /* " hf_family phi3": model.hf_family phi3 */
    /* " experts E K P A X Z" (a mixture of experts, last): num_experts, moe_router_topk,
     * moe_router_pre_softmax, load balancing aux_loss (1) or none (0), moe_aux_loss_coeff and
     * moe_z_loss_coeff (float32's %.9g) */
    int moe_experts, moe_topk, moe_pre_softmax, moe_aux_loss;
    double moe_aux_coeff, moe_z_coeff;
    int rope_scaling, rope_original; /* TR_ROPE_SCALING_*; llama3's original positions */
    double rope_factor, rope_low, rope_high; /* float32's values */
    double eps, rotary_base, embedding_multiplier; /* the multiplier: 0 where it is 1 */
    /* the lora line (a LoRA run's checkpoint, its adapters alone; absent from checkpoints
     * written before it): finetune.lora.rank, .alpha and .target_modules (bit t of
     * lora_targets: qkv, proj, fc1, fc2), so export and resume take the alpha the adapters
     * were trained with instead of trusting a config's */
    int has_lora, lora_rank, lora_targets;
    double lora_alpha, lora_dropout; /* dropout: the line's optional "dropout P" (0 when absent) */
    /* the dropout line "dropout hidden_dropout P attention_dropout Q" (model.hidden_dropout and
     * model.attention_dropout the run trained with, or an import's config.json / Megatron args
     * rates; written when either is > 0, after the lora line): absent reads as 0 and 0 */
    int has_dropout;
    double hidden_dropout, attention_dropout;
    ckpt_record *tensors;
    size_t n;
} ckpt_manifest;
/* Fill mf's family line from a stage's shape (every stage has the whole model's switches). */
void ckpt_manifest_family(ckpt_manifest *mf, const tr_gpt_shape *s);
/* Fill mf's lora line from a stage's shape when it has adapters (s->lora_rank >= 1). */
void ckpt_manifest_lora(ckpt_manifest *mf, const tr_gpt_shape *s);
/* Fill mf's dropout line from a stage's shape (has_dropout: either rate > 0). */
void ckpt_manifest_dropout(ckpt_manifest *mf, const tr_gpt_shape *s);
/* One line naming both rates when the manifest's (0 without a dropout line) are not shape s's
 * (the config's, which the run uses): a warning "WHAT was trained with ...; this run uses ...". */
void ckpt_note_dropout(const tr_gpt_shape *s, const ckpt_manifest *mf, const char *what);
/* The lora line's target list of a mask: "qkv,proj,fc1,fc2" (cap >= 20). */
void ckpt_lora_targets_text(int mask, char *out, size_t cap);

/* Write a manifest at path (fsync'd): the format line, the iteration, the model line, the data
 * line when mf->has_data, the loss-scaler line when mf->has_scaler, the family line when
 * mf->has_family, the lora line when mf->has_lora, the dropout line when mf->has_dropout, the
 * tensors in the order given (sorted by name), end. */
TR_MUST_CHECK int ckpt_write_manifest(const char *path, const ckpt_manifest *mf);
/* The tracker's iteration in DIR: 0 for a release checkpoint, -1 when DIR has no checkpoint. */
TR_MUST_CHECK int ckpt_read_tracker(const char *dir, int *iteration);
/* The folder of the checkpoint of `iteration` in DIR: DIR/iter_NNNNNNN, DIR/release for 0. */
TR_MUST_CHECK int ckpt_folder(char *buf, size_t cap, const char *dir, int iteration);
/* The manifest at path, of the checkpoint of `iteration` (free out->tensors). */
TR_MUST_CHECK int ckpt_read_manifest(const char *path, int iteration, ckpt_manifest *out);
/* TR_ERR_INVALID naming both when the manifest's model is not mc's. */
TR_MUST_CHECK int ckpt_same_model(const tr_model_config *mc, const ckpt_manifest *mf,
                                  const char *path);
/* TR_ERR_INVALID naming every difference when the manifest's family line (if any) is not the
 * switches of shape s (any stage's: each has the whole model's). */
TR_MUST_CHECK int ckpt_same_family(const tr_gpt_shape *s, const ckpt_manifest *mf,
                                   const char *path);
/* The adapters of the manifest against shape s's finetune.lora settings (any stage's).
 * Manifest with a lora line and s with adapters: TR_ERR_CONFIG naming each of rank, alpha and
 * target modules that differ, both values (a resume or an export with another alpha would
 * scale the trained adapters wrongly, silently). Manifest with a lora line, s without
 * adapters: TR_ERR_CONFIG when refuse_plain, else TR_OK (the tensor checks then name what the
 * checkpoint holds). Manifest without a lora line (written before it) whose tensors are
 * adapters: TR_OK, and when warn, a warning that the config's finetune.lora.alpha is taken
 * unchecked (the documented fallback). */
TR_MUST_CHECK int ckpt_same_lora(const tr_gpt_shape *s, const ckpt_manifest *mf, const char *path,
                                 int refuse_plain, int warn);
/* TR_ERR_INVALID naming the first tensor of the manifest that the whole model g (its trainable
 * tensors, or base 1: its base's) does not have. stage_only: g is one pipeline stage (or
 * chunk), and only the manifest's tensors of its layers ("layers.N." with N in its range) are
 * looked for; every layer is some stage's, and the family line fixes the other names. */
TR_MUST_CHECK int ckpt_no_other_tensors(const ckpt_manifest *mf, const char *ckpt_dir,
                                        tr_gpt *g, int base, int stage_only);
/* TR_ERR_CONFIG naming every difference when the manifest's data line (if any) is not this
 * run's: seed, split, and the dataset's token and document counts. (Another global batch
 * size is fine: the data position is the consumed samples.) */
TR_MUST_CHECK int ckpt_same_data(const tr_engine *e, const ckpt_manifest *mf, const char *path);
/* data.split without spaces, as the data line keeps it. */
void ckpt_split_text(const char *split, char *out, size_t cap);
/* Size and the checksums of the first n_arrays arrays (N_ARRAYS: all) of one tensor file
 * against its manifest record. */
TR_MUST_CHECK int ckpt_verify_tensor(const char *ckpt_dir, const ckpt_record *t, int n_arrays);
/* ckpt_segment_fn reading array `array` of a tensor file into dst + local. */
typedef struct {
    int fd;
    const char *path;
    int array;
    uint64_t numel;
    float *dst;
} ckpt_read_ctx;
int ckpt_read_segment(void *ctx, size_t local, uint64_t file_elem, size_t count);

/* ---- saving in steps (checkpoint.c; checkpoint_async.c runs the writing in a thread) */
typedef struct {
    char final_dir[4200], tmp_dir[4300], old_dir[4300];
    uint64_t consumed_samples; /* at the save (training goes on during an async write) */
    engine_scaler scaler;      /* the fp16 loss scaler at the save, likewise */
} ckpt_paths;
/* This rank's copy of what it saves: the parameters and its Adam moments, in host memory. */
typedef struct {
    float *params, *m, *v;
} ckpt_staging;
/* Collective: the save's paths; rank 0 makes a fresh DIR/iter_K.tmp. */
TR_MUST_CHECK int ckpt_begin(tr_engine *e, const char *dir, int iteration, ckpt_paths *p);
/* This rank's state copied out of the engine (a device-to-host copy on GPUs). */
TR_MUST_CHECK int ckpt_stage(const tr_engine *e, ckpt_staging *st);
void ckpt_staging_free(ckpt_staging *st);
/* This rank's pieces of every tensor from the copy into the temporary directory (fsync'ed),
 * its partial checksums into sums.rankR.txt. Reads only the engine's tables: safe beside
 * training on another thread. */
TR_MUST_CHECK int ckpt_write_staged(const tr_engine *e, const char *tmp_dir,
                                    const ckpt_staging *st);
/* Collective, once every rank's pieces are written: rank 0 writes the manifest, moves the
 * checkpoint into place, then the tracker, and removes leftovers and (checkpoint.keep_last)
 * older checkpoints. */
TR_MUST_CHECK int ckpt_finish(tr_engine *e, const char *dir, int iteration, const ckpt_paths *p);
/* checkpoint.async_save: stage now, write in a thread, finish at a later tr_checkpoint_poll. */
TR_MUST_CHECK int ckpt_save_async(tr_engine *e, const char *dir, int iteration);
/* Drop a save still in flight (joining its writer): the engine is being freed. */
void ckpt_async_discard(tr_engine *e);

TR_MUST_CHECK int ckpt_join(char *buf, size_t cap, const char *dir, const char *name); /* DIR/NAME */
/* fsync of a file or folder */
TR_MUST_CHECK int ckpt_sync_path(const char *path);
/* A small text file DIR/NAME written through NAME.tmp + fsync + rename, then DIR fsync'd. */
TR_MUST_CHECK int ckpt_write_file_atomic(const char *dir, const char *name, const char *text);

#endif
