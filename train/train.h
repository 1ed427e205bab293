/* train/ — the engine: builds one rank's world from a config and runs training.
 *
 * Contract:
 *  - tr_engine_create() builds everything one rank needs from the config alone: data,
 *    the model stage, the flat parameter/gradient/optimizer buffers, activation storage.
 *  - One iteration = tr_engine_forward_backward() (gradient accumulation over the global
 *    batch's micro-batches; gradients of the MEAN token loss of the global batch) followed by
 *    tr_engine_optimizer_step() (global-norm clipping, LR schedule, AdamW).
 *  - Global batch of iteration i (1-based) = train samples with global index
 *    [C, C + GB) where C = the samples consumed before it ((i-1)*GB without a ramp-up; with
 *    training.rampup_batch_size GB is Megatron's batch of C and the micro-batches per
 *    iteration vary); micro-batch m takes [m*mb, (m+1)*mb) of it. Evaluation uses the
 *    validation samples [0, eval_iters*GB), the same at every evaluation, so val_loss values
 *    are comparable across a run.
 *  - LR: linear warm-up from lr_warmup_init to lr over the warm-up, then decay (cosine by default)
 *    from lr to min_lr over iterations (warmup, lr_decay_iters], min_lr after.
 *  - AdamW with decoupled weight decay, none on biases and LN weights (tensor flag).
 *  - tr_train_run() is `trident train`: per iteration one line on stdout and one JSON object
 *    in RUN_DIR/metrics.jsonl (from rank 0, for the whole job); the resolved config in
 *    RUN_DIR/config.yaml; at the end RUN_DIR/summary.json (layout, median ms/iter, tokens/s,
 *    final loss, peak memory and peak stored activations of every rank, each rank's
 *    collectives per group and pipeline sends in the last iteration, measured pipeline
 *    bubble when traced: the median over iterations after the first).
 *  - Checkpoints (checkpoint.c; section `checkpoint`: save, load, save_interval) do not depend
 *    on the layout: one file per whole tensor (parameter, exp_avg, exp_avg_sq), a manifest
 *    with a checksum of each array, written into DIR/iter_NNNNNNN.tmp and renamed into place
 *    before DIR/latest_checkpointed_iteration.txt moves to it. Loading verifies every file
 *    first. A run saved at iteration k and resumed, in any (DP, TP, PP) layout, continues as
 *    the uninterrupted run (bit-identical losses in the same layout); the data position, LR
 *    and Adam step follow from k. Both calls are collective over the world. */
#ifndef TR_TRAIN_H
#define TR_TRAIN_H

#include "model/gpt.h"
#include "yaml/config.h"

typedef struct tr_engine tr_engine;

typedef struct {
    int iteration;
    double loss;       /* mean token loss of the global batch */
    double lr;
    double grad_norm;  /* before clipping */
    double ms_per_iter;
    double tokens_per_s;
    double gflops;     /* achieved model GFLOP/s of this process */
    int evaluated;
    double val_loss;
    double peak_rss_mb; /* the largest peak resident memory of any rank, MiB */
    double mfu;         /* gflops / logging.peak_gflops, 0 when no peak is configured */
    double consumed_samples; /* training samples consumed after this iteration */
    int global_batch_size;   /* this iteration's (a ramp-up's: Megatron's of the samples
                              * consumed before it) */
    double eta_s;       /* the mean time of this process's iterations so far times those
                         * still to run (0 after the last) */
    double loss_scale;  /* fp16: the scale this iteration's backward ran with (1 otherwise) */
    long skipped_iterations; /* fp16: optimizer steps skipped for an overflow so far */
    int has_balancing;       /* a mixture of experts with the aux_loss balancing: */
    double load_balancing_loss; /* its load-balancing loss without the coefficient, summed
                                 * over layers, averaged over the global batch's micro-batches
                                 * (Megatron's load_balancing_loss) */
} tr_step_stats;

typedef struct {
    const char *run_dir; /* NULL: no files written */
    int quiet;           /* no per-iteration lines on stdout */
    const char *dump_grads_dir; /* non-NULL: after iteration 1's reduction every rank writes
                                 * its gradient there (grads.rankR.bin + .json: tensor shard
                                 * layout and the ZeRO-1 range it owns), for layout tests */
    int dump_grads_iters; /* 0 or 1: iteration 1 only; N > 1: also iterations 2..N, each
                           * into dump_grads_dir/iter_K (oracles of several steps) */
} tr_train_options;

TR_MUST_CHECK int tr_engine_create(const tr_config *cfg, tr_engine **out);
void tr_engine_free(tr_engine *e);
tr_gpt *tr_engine_model(tr_engine *e);
/* This rank in the world (rank 0 writes the run's files). */
int tr_engine_rank(const tr_engine *e);
float *tr_engine_params(tr_engine *e);
float *tr_engine_grads(tr_engine *e);

/* The tokens (inputs then targets, each mb*T) of micro-batch m of iteration i. */
TR_MUST_CHECK int tr_engine_batch(tr_engine *e, int split, uint64_t first_sample, int32_t *inputs,
                    int32_t *targets);
/* Zero the gradients, then forward+backward every micro-batch of iteration i. */
TR_MUST_CHECK int tr_engine_forward_backward(tr_engine *e, int iteration, double *loss_out);
/* Clip, schedule the LR and apply AdamW; fills lr and grad_norm of *stats. */
TR_MUST_CHECK int tr_engine_optimizer_step(tr_engine *e, int iteration, tr_step_stats *stats);
/* Mean validation loss over eval_iters global batches (forward only). */
TR_MUST_CHECK int tr_engine_evaluate(tr_engine *e, double *val_loss);
/* Collective over the world: *any = 1 when `mine` is non-zero on any rank (how every rank
 * learns of a stop request at the same iteration). */
TR_MUST_CHECK int tr_engine_any_rank(tr_engine *e, int mine, int *any);
/* Collective over the world after a step every rank took (`what`, e.g. "loading the
 * checkpoint"): returns rc, or on a rank where it succeeded an error saying another rank
 * failed. A rank that failed prints its reason BEFORE the vote: once the others learn of the
 * failure they exit, and the launcher then stops every rank at once, this one perhaps before
 * its own exit message (tests/train/test_checkpoint.py's 8-rank damaged checkpoint lost the
 * file's name that way, now and then). */
TR_MUST_CHECK int tr_engine_agree(tr_engine *e, int rc, const char *what);

/* Save this rank's part of the model and optimizer state as the checkpoint of `iteration`. */
TR_MUST_CHECK int tr_checkpoint_save(tr_engine *e, const char *dir, int iteration);
/* Load DIR's latest checkpoint; *iteration = its iteration, 0 for a release checkpoint
 * (weights alone, e.g. imported by trident convert: Adam's moments zero, training starts at
 * iteration 1), -1 when DIR holds none. A corrupt, truncated or foreign checkpoint is
 * TR_ERR_INVALID naming the file. A LoRA run's checkpoint records finetune.lora.rank, .alpha
 * and .target_modules (the manifest's lora line): a config with others, or without LoRA, is
 * TR_ERR_CONFIG naming both values; one written before that line loads with the config's
 * alpha and a warning. Recorded dropout rates other than the config's: a warning naming both
 * (rank 0), the config's used. */
TR_MUST_CHECK int tr_checkpoint_load(tr_engine *e, const char *dir, int *iteration);
/* checkpoint.async_save: completes the save being written in the background once every
 * rank's files are written (wait = 1: blocks until then). Collective; call it on every rank
 * after each iteration and with wait = 1 at the end. A no-op when no save is in flight. */
TR_MUST_CHECK int tr_checkpoint_poll(tr_engine *e, int wait);

/* For inference and export, without an engine: the sizes of DIR's latest checkpoint
 * (num_layers, hidden_size, num_attention_heads, vocab_size, max_position_embeddings), its
 * family switches where its manifest records them (normalization, position_embedding_type,
 * rotary_percent and _base, swiglu, ffn_hidden_size, num_query_groups, untie_embeddings_and_
 * output_weights, add_bias_linear, add_qkv_bias, sliding_window, embedding_layernorm,
 * layernorm_epsilon; the strings are static: do not free them; checkpoints written before the
 * family line leave these untouched) and its iteration. Other fields of *model untouched. */
TR_MUST_CHECK int tr_checkpoint_read_model(const char *dir, tr_model_config *model,
                                           int *iteration);
/* The lora line of DIR's latest checkpoint: *rank (0 when its manifest has none: no LoRA run,
 * or one saved before the line), *alpha, *dropout (finetune.lora.dropout; 0 in a line saved
 * before 2026-11-29) and its finetune.lora.target_modules as a YAML flow sequence
 * ("[qkv,proj,fc1,fc2]", cap >= 32). */
TR_MUST_CHECK int tr_checkpoint_read_lora(const char *dir, int *rank, double *alpha,
                                          double *dropout, char *targets, size_t cap);
/* The dropout line of DIR's latest checkpoint: the model.hidden_dropout and
 * model.attention_dropout it was trained with (an import's: config.json's or Megatron's args'
 * rates); 0 and 0 when its manifest has none (no dropout, or saved before the line). */
TR_MUST_CHECK int tr_checkpoint_read_dropout(const char *dir, double *hidden,
                                             double *attention);
/* A training start from DIR (finetune.load's base, `what` naming it for the user): one
 * warning line naming both rates when its recorded ones are not shape s's (the config's,
 * which the run uses); nothing when they agree or DIR cannot be read (the load says why). */
void tr_checkpoint_note_dropout(const char *dir, const char *what, const tr_gpt_shape *s);
/* The parameters of DIR's latest checkpoint into g, bound to `params` (device memory of
 * backend k): this TP rank's shards of every tensor of the stage, each file's size and its
 * parameters' checksum verified first (not the Adam moments, which it does not read); the
 * vocabulary's padding rows 0. Errors as tr_checkpoint_load (g with LoRA adapters: its
 * lora settings checked against the lora line as there; g without them: a LoRA checkpoint's
 * missing base tensors are the error). */
TR_MUST_CHECK int tr_checkpoint_load_model(const char *dir, tr_gpt *g, const tr_kernels *k,
                                           float *params, int *iteration);
/* The base model of a LoRA fine-tuning (finetune.load): DIR's latest checkpoint into g's
 * frozen base tensors (tr_gpt_base_tensor; without LoRA, the bound parameters), checked as
 * tr_checkpoint_load_model. */
TR_MUST_CHECK int tr_checkpoint_load_base(const char *dir, tr_gpt *g, const tr_kernels *k);
/* For importers (hf/): a release checkpoint of g's parameters in DIR (an existing folder
 * without a checkpoint): DIR/release/ holds the tensors (Adam's moments zero) and the tracker
 * says "release", so training from it starts at iteration 1 in any layout. g holds the whole
 * model (one stage, no TP); params is its flat buffer in host memory. */
TR_MUST_CHECK int tr_checkpoint_save_model(const char *dir, tr_gpt *g, const float *params);

double tr_lr_at(const tr_training_config *t, int iteration);
/* Sample-based training: the LR once the optimizer steps so far (this one included) have
 * taken `samples` (the sum of their global batches; skipped fp16 steps not counted). */
double tr_lr_at_samples(const tr_training_config *t, uint64_t samples);
/* The LR of optimizer step `step` (1-based, skipped steps not counted), whose steps up to
 * and including it took `samples`: tr_lr_at_samples with train_samples, else tr_lr_at. This
 * is the value Megatron logs at that iteration (its scheduler's after the step). */
double tr_lr_of_step(const tr_training_config *t, int step, uint64_t samples);

TR_MUST_CHECK int tr_train_run(const tr_config *cfg, const tr_train_options *opts);

#endif
