/* yaml/ — the run configuration: YAML file (libyaml) -> plain structs, validated.
 *
 * Contract:
 *  - tr_config_load() reads a YAML file with sections model, parallel, training, data,
 *    logging, checkpoint, cluster (grid specs: tr_grid_load), applies `--set section.key=value` overrides
 *    (each value parsed as YAML, so lists work), fills defaults, and validates.
 *  - Any bad input — unknown key, wrong type, out-of-range value, missing required key,
 *    inconsistent values, malformed YAML, binary garbage — returns TR_ERR_CONFIG with a
 *    message "FILE:LINE:COL: what was found; what is allowed". Never crashes.
 *  - Keys carry Megatron-LM's names. The struct owns its strings; free with tr_config_free().
 *  - tr_config_write() writes the resolved config back as YAML that loads to the same struct.
 *  - Hostile input is bounded: at most 16 MiB, 32 nested collections, 100000 nodes; aliases
 *    only for scalars; one document; duplicate keys are errors.
 *  - The key schema is one table (yaml/schema.c): a new key or section is one entry there. */
#ifndef TR_CONFIG_H
#define TR_CONFIG_H

#include <stdint.h>
#include <stdio.h>

#include "core/core.h"

#define TR_MAX_STAGES 256

typedef struct {
    int num_layers;                   /* required, >= 1 */
    int hidden_size;                  /* required, >= 1, divisible by num_attention_heads
                                       * unless kv_channels is set */
    int num_attention_heads;          /* required, >= 1 */
    int seq_length;                   /* required, >= 1 */
    int max_position_embeddings;      /* default seq_length; >= seq_length */
    int vocab_size;                   /* default 256 (the byte tokenizer) */
    int make_vocab_size_divisible_by; /* default 128 */
    double init_method_std;           /* default 0.02 */
    double layernorm_epsilon;         /* default 1e-5 */
    /* Model families (Megatron-LM's switches; the defaults are GPT-2): Llama = RMSNorm, rope,
     * swiglu, untied output, no linear biases (num_query_groups < heads: GQA); Qwen2 = Llama
     * with add_qkv_bias; Bloom = alibi, embedding_layernorm; GPT-NeoX (Pythia) = rope on a
     * rotary_percent of each head, untied output, parallel_residual, gelu_approximate none; Falcon
     * = rope, GQA, no linear biases, parallel_residual (with parallel_shared_norm for
     * Falcon-7B), gelu_approximate none; Gemma = Llama with geglu, apply_layernorm_1p, the
     * embedding times sqrt(hidden_size) (embedding_multiplier), tied, and (Gemma-7B) heads of
     * kv_channels 256 wider than hidden_size / heads; GPT-J = rope on a rotary_percent of each
     * head, parallel_residual with parallel_shared_norm, no linear biases but add_mlp_bias,
     * untied output with output_layer_bias; MPT = alibi, no linear biases, layernorm_bias
     * false, gelu_approximate none, tied; OPT = GPT-2 with relu. */
    char *normalization;              /* "LayerNorm" (default) | "RMSNorm" */
    char *position_embedding_type;    /* "learned_absolute" (default) | "rope" | "alibi" */
    double rotary_base;               /* default 10000 (rope only) */
    double rotary_percent;            /* default 1.0, in (0, 1]: the rotated share of a head */
    int swiglu;                       /* bool, default 0: MLP = down(silu(gate x) * up x) */
    int ffn_hidden_size;              /* default 0: 4 x hidden_size, with swiglu Megatron's
                                       * int(8h/3 / 64) x 64 (tr_model_ffn_hidden) */
    int num_query_groups;             /* default num_attention_heads; fewer = GQA */
    int untie_embeddings_and_output_weights; /* bool, default 0: own output_layer */
    int output_layer_bias;            /* bool, default 0: the untied output layer has a bias
                                       * (Phi-2's, GPT-J's lm_head.bias) */
    int add_bias_linear;              /* bool, default 1: biases of qkv, projections, MLP */
    int add_qkv_bias;                 /* bool, default 0: qkv's bias even without
                                       * add_bias_linear (Qwen2) */
    int add_mlp_bias;                 /* bool, default 0: fc's and fc_proj's biases even
                                       * without add_bias_linear (GPT-J: the attention without
                                       * biases, the MLP with them); no effect with
                                       * add_bias_linear, as add_qkv_bias */
    int sliding_window;               /* default 0 = none; else the model's attention window
                                       * (Mistral-7B v0.1's 4096): trident's attention is full
                                       * causal, the same over sequences no longer than the
                                       * window, so seq_length (and generation) must fit it */
    int embedding_layernorm;          /* bool, default 0: LayerNorm after the word embedding */
    int parallel_residual;            /* bool, default 0: x + attn(ln1(x)) + mlp(ln2(x)) (GPT-J,
                                       * GPT-NeoX's use_parallel_residual) instead of the
                                       * attention's output feeding ln2 */
    int parallel_shared_norm;         /* bool, default 0: with parallel_residual, one norm (ln1)
                                       * feeds both the attention and the MLP: x + attn(ln1(x))
                                       * + mlp(ln1(x)) (Falcon-7B, GPT-J); the layer has no ln2 */
    char *gelu_approximate;           /* "tanh" (default, GPT-2's) | "none" (the exact erf
                                       * GELU of GPT-NeoX / BERT): PyTorch's F.gelu argument;
                                       * the GELU of geglu too */
    int kv_channels;                  /* default 0 = hidden_size / num_attention_heads: the
                                       * head size (Megatron's --kv-channels); the attention
                                       * is num_attention_heads x kv_channels wide */
    int no_layernorm_bias;            /* model.layernorm_bias (bool, default true) negated, so
                                       * a zeroed config has the biases: 1 = LayerNorm without
                                       * its bias (ln1, ln2, the final and the embedding norm;
                                       * MPT's no_bias); no effect with RMSNorm */
    int apply_layernorm_1p;           /* bool, default 0: every norm scales by 1 + weight,
                                       * its weights start at 0 (Megatron's
                                       * --apply-layernorm-1p; Gemma's RMSNorm) */
    double embedding_multiplier;      /* default 1.0: the embedding stage's output (words +
                                       * positions) times this (Gemma's sqrt(hidden_size)) */
    int geglu;                        /* bool, default 0: MLP = down(gelu(gate x) * up x),
                                       * the GELU of gelu_approximate; as swiglu's widths */
    int relu;                         /* bool, default 0: the MLP's activation is ReLU,
                                       * max(x, 0) (OPT's); not with swiglu or geglu;
                                       * gelu_approximate then means nothing */
    /* rope scaling (Megatron's switches; rope only, one kind at a time): linear position
     * interpolation, position t rotated as t / factor (Hugging Face's rope_scaling "linear"),
     * or Llama 3.1's frequency scaling (rope_type "llama3"): wavelengths past
     * original / low_freq_factor divided by factor, below original / high_freq_factor kept,
     * in between blended */
    double rotary_seq_len_interpolation_factor; /* default 1.0: none */
    int use_rope_scaling;             /* bool, default 0: Llama 3.1's scaling */
    double rope_scaling_factor;       /* default 8.0 (Llama 3.1's; 3.2's 32) */
    double rope_scaling_low_freq_factor;  /* default 1.0 */
    double rope_scaling_high_freq_factor; /* default 4.0, > low_freq_factor */
    int rope_scaling_original_max_position_embeddings; /* default 8192 */
    char *hf_family;                  /* "auto" (default: the switches decide) | "phi3": a Llama's
                                       * switches exported as Phi-3 (Phi3ForCausalLM: fused
                                       * qkv_proj, gate_up_proj); recorded, not computed */
    /* Mixture of experts (Megatron-core's --num-experts ...; Mixtral = Llama with num_experts 8,
     * moe_router_topk 2): every layer's MLP is num_experts MLPs of the dense one's shape (its
     * width, activation and biases) and a router (model/gpt.h "Mixture of experts") */
    int num_experts;                  /* default 0 = dense */
    int moe_router_topk;              /* default 2, 1 .. num_experts: experts per token */
    double moe_aux_loss_coeff;        /* default 0: the load-balancing loss's weight */
    double moe_z_loss_coeff;          /* default 0: the router z-loss's weight */
    char *moe_router_load_balancing_type; /* "aux_loss" (default) | "none" */
    int moe_router_pre_softmax;       /* bool, default 0: top-k of the logits, softmax over
                                       * the k; 1: softmax over all, then top-k (not
                                       * renormalised) */
    int moe_shared_expert_intermediate_size; /* default 0; shared experts are not built: > 0
                                              * is refused */
    /* Dropout while training (Megatron-LM's --hidden-dropout / --attention-dropout, whose
     * defaults are 0.1; trident's 0: none), the same elements in every layout (core/philox.h) */
    double hidden_dropout;            /* [0, 1): after the embeddings, on the attention's and the
                                       * MLP's output before each residual add */
    double attention_dropout;         /* [0, 1): on the attention probabilities */
} tr_model_config;

/* The head size: model.kv_channels, or hidden_size / num_attention_heads. */
static inline int tr_model_head_size(const tr_model_config *m)
{
    return m->kv_channels > 0          ? m->kv_channels
           : m->num_attention_heads > 0 ? m->hidden_size / m->num_attention_heads
                                        : 0;
}

/* The MLP's hidden width: ffn_hidden_size, or when 0 Megatron-LM's default: 4 x hidden_size,
 * with swiglu (or geglu) int(4h x 2/3 / 64) x 64 (the three matrices cost about what 4h's two
 * do). */
static inline int tr_model_ffn_hidden(const tr_model_config *m)
{
    if (m->ffn_hidden_size > 0)
        return m->ffn_hidden_size;
    return m->swiglu || m->geglu ? (int)(4.0 * m->hidden_size * 2 / 3 / 64) * 64
                                 : 4 * m->hidden_size;
}

/* The longest sequence the model runs as trained: its positions, within its sliding window. */
static inline int tr_model_longest_seq(const tr_model_config *m)
{
    return m->sliding_window && m->sliding_window < m->max_position_embeddings
               ? m->sliding_window
               : m->max_position_embeddings;
}

typedef struct {
    int tensor_model_parallel_size;   /* default 1 */
    int pipeline_model_parallel_size; /* default 1 */
    int context_parallel_size;        /* default 1: CP ranks split each sample's sequence
                                       * (Megatron's --context-parallel-size) */
    int num_pipeline_layers;          /* entries in pipeline_layers; 0 = even split */
    int pipeline_layers[TR_MAX_STAGES];
    char *pipeline_schedule;          /* "1f1b" (default) | "gpipe" | "interleaved" */
    int virtual_pipeline_model_parallel_size; /* default 1 */
    int sequence_parallel;            /* bool, default 0 */
    double ddp_bucket_size_mb;        /* default 25; 0 = one bucket */
    int overlap_grad_reduce;          /* bool, default 1 */
    int use_distributed_optimizer;    /* bool, default 0 */
    int zero_stage;                   /* 0-3 (DeepSpeed's); default 0, or 1 with
                                       * use_distributed_optimizer: tr_zero_stage() */
    int zero_prefetch;                /* bool, default 1: stage 3 starts the next layer's
                                       * gather before computing this one */
    double comm_timeout_s;            /* default 300 */
    char *order;                      /* "tp-dp-pp" (default) | "tp-pp-dp" */
    int expert_model_parallel_size;   /* default 1; experts are replicated over data-parallel
                                       * ranks (expert parallelism is not built: > 1 refused) */
} tr_parallel_config;

typedef struct {
    int micro_batch_size;  /* required, >= 1 */
    int global_batch_size; /* default micro_batch_size; multiple of it; with a ramp-up the
                            * batch after it (the final one) */
    int train_iters;       /* iteration-based training: the iterations; 0 = sample-based
                            * (train_samples); exactly one of the two */
    /* Sample-based training (Megatron's --train-samples, --lr-decay-samples,
     * --lr-warmup-samples, --lr-wsd-decay-samples, --rampup-batch-size); 0 = unset. Not with
     * train_iters and the iteration-based LR keys (Megatron refuses the mix). */
    uint64_t train_samples;        /* the run's iterations: Megatron's update_train_iters */
    uint64_t lr_decay_samples;     /* default train_samples */
    uint64_t lr_warmup_samples;    /* default 0 (or lr_warmup_fraction of the decay) */
    uint64_t lr_wsd_decay_samples; /* WSD: the anneal's samples, ending at lr_decay_samples */
    int rampup_batch_size[3];      /* [start, increment, ramp samples]: the global batch grows
                                    * from start by increment, one step each ramp / ((global -
                                    * start) / increment) consumed samples, to global after
                                    * ramp samples (sample-based training only) */
    int n_rampup_batch_size;       /* 0 (no ramp-up) or 3 */
    double lr;             /* required, > 0 */
    double min_lr;         /* default 0, <= lr */
    int lr_warmup_iters;   /* default 0 */
    double lr_warmup_fraction; /* or the warm-up as this fraction of lr_decay_iters (0: unset) */
    double lr_warmup_init;     /* the warm-up starts here (default 0), <= lr */
    int lr_decay_iters;    /* default train_iters (0 with sample-based training) */
    char *lr_decay_style;  /* "cosine" (default) | "linear" | "constant" |
                            * "inverse-square-root" | "WSD" */
    int lr_wsd_decay_iters;    /* WSD: the anneal's iterations, ending at lr_decay_iters
                                * (required; both wsd keys ignored by other styles) */
    char *lr_wsd_decay_style;  /* WSD: "exponential" (default) | "linear" | "cosine" |
                                * "minus_sqrt" */
    double clip_grad;      /* default 1.0; 0 disables */
    double weight_decay;   /* default 0.01 */
    double adam_beta1;     /* default 0.9 */
    double adam_beta2;     /* default 0.999 */
    double adam_eps;       /* default 1e-8 */
    uint64_t seed;         /* default 1234 */
    int eval_interval;     /* default 0 = never; else every N iterations */
    int eval_iters;        /* default 10 */
    char *recompute;       /* "none" (default) | "selective" | "full"; attention is fused,
                            * so selective (Megatron's: recompute the probabilities) keeps
                            * and computes what none does */
    char *precision;       /* "fp32" (default) | "bf16" | "fp16" (cpu: 16-bit storage
                            * emulated; cuda: bf16 only) */
    /* fp16 loss scaling (Megatron's names): loss_scale > 0 is static; 0 (default) dynamic from
     * initial_loss_scale (2^32), halved after `hysteresis` overflows (2), never below
     * min_loss_scale (1), doubled after loss_scale_window clean iterations (1000) */
    double loss_scale;
    double initial_loss_scale;
    double min_loss_scale;
    int loss_scale_window;
    int hysteresis;
    char *device;          /* "cpu" (default) | "cuda": the kernel backend */
    int exit_interval;     /* default 0 = never; else stop after iteration N (checkpoint first) */
    double exit_duration_in_mins; /* default 0 = never; else stop after the iteration in which
                                   * this many minutes have passed since `trident train`
                                   * started on any rank (checkpoint first; Megatron's
                                   * --exit-duration-in-mins) */
    int exit_signal_handler; /* bool, default 0: on SIGTERM every rank finishes the iteration,
                              * the job saves (checkpoint.save) and exits 0 (Megatron's
                              * --exit-signal-handler) */
} tr_training_config;

/* The warm-up's length in iterations: lr_warmup_iters, or lr_warmup_fraction of
 * lr_decay_iters (Megatron-LM's --lr-warmup-fraction; not rounded). */
static inline double tr_training_warmup(const tr_training_config *t)
{
    return t->lr_warmup_fraction > 0 ? t->lr_warmup_fraction * t->lr_decay_iters
                                     : (double)t->lr_warmup_iters;
}

/* Sample-based training: train_samples given (train_iters 0). */
static inline int tr_training_by_samples(const tr_training_config *t)
{
    return t->train_samples > 0;
}

/* The global batch of the iteration that starts after `consumed` training samples: Megatron's
 * RampupBatchsizeNumMicroBatchesCalculator (start + increment x int(consumed / (ramp /
 * increments)) up to ramp samples, global_batch_size after), or global_batch_size without a
 * ramp-up (yaml/rampup.c). */
int tr_training_batch_at(const tr_training_config *t, uint64_t consumed);
/* The run's iterations: train_iters, or from train_samples Megatron's update_train_iters
 * (train_samples / global without a ramp-up; with one, the ramp's iterations while consumed
 * <= ramp samples, then the whole final batches of what is left, floor division, so it may
 * be < 1 when train_samples ends inside the ramp: the config refuses that). */
long long tr_training_iterations(const tr_training_config *t);
/* Sample-based LR schedule's lengths in samples (Megatron's get_optimizer_param_scheduler):
 * decay = lr_decay_samples or train_samples; warm-up = lr_warmup_samples, or
 * lr_warmup_fraction of the decay (not rounded). */
static inline double tr_training_decay_samples(const tr_training_config *t)
{
    return (double)(t->lr_decay_samples ? t->lr_decay_samples : t->train_samples);
}
static inline double tr_training_warmup_samples(const tr_training_config *t)
{
    return t->lr_warmup_fraction > 0 ? t->lr_warmup_fraction * tr_training_decay_samples(t)
                                     : (double)t->lr_warmup_samples;
}

typedef struct {
    /* Megatron's lists: [PATH], [W1, PATH1, W2, PATH2, ...] (weights normalized) or [PATH1,
     * PATH2, ...] (weights by sample counts); PATH a Megatron prefix or an llm.c shard; a
     * plain string is a one-item list. data_path is cut by data.split; train/valid/
     * test_data_path (instead of it) are used whole for their split. */
    char **data_path;
    int n_data_path;
    char **train_data_path, **valid_data_path, **test_data_path;
    int n_train_data_path, n_valid_data_path, n_test_data_path;
    char *data_format; /* "auto" (default) | "megatron" | "llmc" */
    char *split;       /* default "969,30,1": train,validation,test weights */
    /* data.tokenizer: {type, vocab_file, merge_file, model} (Megatron's --tokenizer-type,
     * --vocab-file, --merge-file, --tokenizer-model): type "none" (default: the dataset's ids
     * as they are, no text) | "ByteLevel" | "GPT2BPETokenizer" (vocab_file, merge_file) |
     * "HFTokenizer" (model: a tokenizer.json) | "Llama2Tokenizer" | "GPTSentencePieceTokenizer"
     * (model: a sentencepiece tokenizer.model); with one, model.vocab_size must hold its ids */
    char *tokenizer_type;
    char *vocab_file, *merge_file, *tokenizer_model; /* "" = none */
    /* "TikTokenizer" | "Llama3Tokenizer" (model: a tiktoken rank file, tokenizer/tokenizer.h);
     * TikTokenizer's: tiktoken_pattern "none" (default) | "v1" | "v2" (needed),
     * tiktoken_num_special_tokens (default 1000), tiktoken_special_tokens (none: <unk> <s> </s>),
     * tiktoken_vocab_size (Megatron's --vocab-size: the first V - S ranks; default 0: all) */
    char *tiktoken_pattern;
    int tiktoken_num_special_tokens;
    char **tiktoken_special_tokens;
    int n_tiktoken_special_tokens;
    int tiktoken_vocab_size;
    /* "gpt" (default: token streams cut into samples) | "sft" (supervised fine-tuning:
     * data_path is ONE prefix written by `trident preprocess --json-keys PROMPT,RESPONSE`,
     * with its PREFIX_loss_mask; examples packed into sequences, attention kept inside each,
     * the loss averaged over the learned tokens of the global batch; data/data.h) */
    char *dataset_type;
    int sft_packing; /* bool, default 1: several examples per sequence (0: one each) */
} tr_data_config;

typedef struct {
    int log_interval; /* default 1 */
    int trace;        /* bool, default 0: write trace.json */
    char *level;      /* "info" (default) | "debug" | "warning" | "error" */
    double peak_gflops; /* per rank, for MFU; default 0 = not reported */
    char *tensorboard_dir; /* "" (default) = none; else TensorBoard event files go there */
} tr_logging_config;

/* Checkpoints (train/checkpoint.c; Megatron's --save, --load, --save-interval). */
typedef struct {
    char *save;        /* directory to save into; "" (default) = no checkpoints */
    char *load;        /* directory to resume from (its latest checkpoint); "" = none */
    int save_interval; /* default 0 = only at the end (and at exit_interval); else every N */
    int async_save;    /* bool, default 0: write in a background thread while training goes
                        * on (Megatron's --async-save) */
    int keep_last;     /* default 0 = keep every checkpoint; else only the K newest (older
                        * ones deleted once a newer one is complete) */
} tr_checkpoint_config;

/* Fine-tuning (train/, model/): finetune.load is the base model, finetune.lora.* the
 * low-rank adapters (LoRA) trained on a frozen base. */
typedef struct {
    char *load;          /* "" (default) = none; else a trident checkpoint directory (a release
                          * checkpoint from `trident convert --from hf`) holding the base */
    int lora_rank;       /* finetune.lora.rank; default 0 = no adapters (full fine-tuning) */
    double lora_alpha;   /* finetune.lora.alpha; default 16: adapters scaled by alpha/rank */
    double lora_dropout; /* finetune.lora.dropout in [0, 1); default 0: the adapters' input
                          * dropped while training, layout-free (model/gpt.h) */
    char **lora_targets; /* finetune.lora.target_modules: qkv, proj, fc1, fc2 (default all) */
    int n_lora_targets;
} tr_finetune_config;

/* The machine a run is planned for (plan/, `trident plan`). Optional: a preset fills every
 * field; a key set to a non-zero value replaces the preset's (0 = the preset's value). */
typedef struct {
    char *preset; /* "none" (default) | "a100-80gb" | "h100-80gb" | "h200" | "cpu-host" */
    char *device;                   /* "auto" (default: the preset's, else gpu) | "gpu" | "cpu" */
    char *runtime;                  /* the software running the layout, for the planner's
                                     * kernels and P2P: "trident" (default) | "megatron" |
                                     * "megatron-2021" | "deepspeed" (plan/plan.h) */
    int nodes;                      /* default 0 = the preset's (1) */
    int gpus_per_node;              /* ranks per node; default 0 = the preset's */
    double gpu_memory_gib;          /* per GPU (cpu: per node, shared by its ranks) */
    double reserved_memory_gib;     /* per rank, not usable by the model */
    double peak_tflops;             /* dense, at the training precision, per GPU (cpu: per node) */
    double gemm_efficiency;         /* achievable fraction of peak_tflops, <= 4 */
    double intra_node_gbytes_per_s; /* per GPU, each direction (NVLink / shared memory) */
    double intra_node_latency_us;
    double inter_node_gbytes_per_s; /* per node, each direction (all its NICs together) */
    double inter_node_latency_us;
} tr_cluster_config;

/* Position of a key in its source, for error messages about values checked later. */
typedef struct {
    char *key; /* dotted: "parallel.tensor_model_parallel_size", or a section: "parallel" */
    int line, col; /* 1-based; 0, 0 when the key came from --set */
} tr_config_mark;

typedef struct {
    char *source; /* file path or "<string>" */
    tr_model_config model;
    tr_parallel_config parallel;
    tr_training_config training;
    tr_data_config data;
    tr_logging_config logging;
    tr_checkpoint_config checkpoint;
    tr_finetune_config finetune;
    tr_cluster_config cluster;
    tr_config_mark *marks;
    int n_marks;
} tr_config;

/* A data path list as Megatron reads it (get_blend_from_list): an even-length list whose
 * every other item, from the first, is a number is [weight, path, ...]; otherwise every item
 * is a path (*weights NULL: by sample counts). Weights >= 0, finite, not all 0. *paths (into
 * list) and *weights are malloc'ed. A mixed or empty list is TR_ERR_CONFIG. */
TR_MUST_CHECK int tr_config_blend(char *const *list, int n, const char ***paths, double **weights,
                                  int *n_paths);

/* Load from a file / from text. `overrides` are "section.key=value" strings. On error the
 * struct is left freed and the message is in tr_errmsg(). */
TR_MUST_CHECK int tr_config_load(const char *path, const char *const *overrides, int n_overrides,
                   tr_config *out);
TR_MUST_CHECK int tr_config_load_string(const char *text, size_t len, const char *name,
                          const char *const *overrides, int n_overrides, tr_config *out);
/* Write the resolved config as YAML. */
TR_MUST_CHECK int tr_config_write(const tr_config *c, FILE *f);
/* The family switches of m as YAML flow-mapping entries (", normalization: RMSNorm, ...",
 * every one the model section has), or "" for a model whose switches were never set (GPT-2
 * by default): what a config text of the same model adds to its sizes. */
void tr_model_family_flow(const tr_model_config *m, char *buf, size_t cap);
/* 1 if every key of the two configs has the same value (source and marks are ignored). */
int tr_config_equal(const tr_config *a, const tr_config *b);
/* "FILE:LINE:COL" of a key (or "FILE" if the key came from a default, "--set KEY" if it came
 * from an override), in a static thread-local buffer. A section name ("model") works too. */
const char *tr_config_where(const tr_config *c, const char *dotted_key);
/* The ZeRO stage in effect: parallel.zero_stage when set, else 1 with
 * use_distributed_optimizer (Megatron's spelling of stage 1), else 0. */
static inline int tr_zero_stage(const tr_parallel_config *p)
{
    return p->zero_stage ? p->zero_stage : p->use_distributed_optimizer ? 1 : 0;
}
void tr_config_free(tr_config *c);

/* ---- grid specs (`trident sweep`) ----
 * A YAML file:
 *   base: PATH                  # a config file (relative to the grid file), or inline
 *                               # sections: {model: {...}, training: {...}, ...}
 *   grid:                       # dotted key -> list of values (cross product)
 *     parallel.tensor_model_parallel_size: [1, 2, 4]
 *     training.micro_batch_size: [1, 2]
 *   run: {world_size: 8, iterations: 10, warmup_iterations: 2}
 * Point i of the cross product (the last axis varies fastest) is a list of "key=value"
 * overrides applied to the base. Errors are TR_ERR_CONFIG with FILE:LINE:COL. */
typedef struct {
    char *key;     /* "parallel.tensor_model_parallel_size" */
    int n_values;
    char **values; /* each as YAML text ("2", "[1,3]") */
} tr_grid_axis;

typedef struct {
    char *source;      /* the grid file */
    char *base_path;   /* base config file, or NULL when inline */
    char **base_sets;  /* inline base as "section.key=value" overrides */
    int n_base_sets;
    tr_grid_axis *axes;
    int n_axes;
    int world_size;        /* run.world_size, default 1 */
    int iterations;        /* run.iterations, default 10 */
    int warmup_iterations; /* run.warmup_iterations, default 2 (excluded from timings) */
} tr_grid_spec;

TR_MUST_CHECK int tr_grid_load(const char *path, tr_grid_spec *out);
size_t tr_grid_num_points(const tr_grid_spec *g);
/* The overrides of point `index`: out[0 .. n_axes-1] point into the spec (not owned). */
void tr_grid_point(const tr_grid_spec *g, size_t index, const char **out);
/* Load the config of a point: the base (file or inline) with the point's overrides and
 * `extra` overrides after them. */
TR_MUST_CHECK int tr_grid_point_config(const tr_grid_spec *g, size_t index, const char *const *extra,
                         int n_extra, tr_config *out);
void tr_grid_free(tr_grid_spec *g);

#endif
