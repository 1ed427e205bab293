/* The config schema: one table entry per key (section, Megatron name, type, field, default,
 * allowed range or values). Adding a key = one entry here (and its field in config.h);
 * adding a section = its name in config_sections and entries for its keys. Loading,
 * defaults, writing, comparing and freeing all walk this table. */
#include <float.h>
#include <limits.h>
#include <stddef.h>
#include <string.h>

#include "yaml/config_internal.h"

#define F(field) offsetof(tr_config, field)
#define INF DBL_MAX

#define INT(sec, name, field, req, dflt, min, max)                                             \
    {.section = sec, .key = name, .type = KEY_INT, .offset = F(field), .required = req,    \
     .def = dflt, .lo = min, .hi = max}
#define DBL(sec, name, field, req, dflt, min, min_open, max, max_open)                         \
    {.section = sec, .key = name, .type = KEY_DOUBLE, .offset = F(field), .required = req, \
     .def = dflt, .lo = min, .lo_open = min_open, .hi = max, .hi_open = max_open}
#define BOOL(sec, name, field, dflt)                                                           \
    {.section = sec, .key = name, .type = KEY_BOOL, .offset = F(field), .def = dflt}
#define ENUM(sec, name, field, dflt, values)                                                   \
    {.section = sec, .key = name, .type = KEY_STRING, .offset = F(field), .def = dflt,     \
     .choices = values}
#define STRLIST(name, field, count)                                                            \
    {.section = "data", .key = name, .type = KEY_STRING_LIST, .offset = F(field),              \
     .count_offset = F(count), .max_count = 4096}
#define STR(sec, name, field, req, dflt, check)                                                \
    {.section = sec, .key = name, .type = KEY_STRING, .offset = F(field), .required = req, \
     .def = dflt, .check_string = check}

const char *const config_sections[] = {"model", "parallel", "training", "data", "logging",
                                          "checkpoint", "finetune", "cluster", NULL};

static const char *const normalizations[] = {"LayerNorm", "RMSNorm", NULL};
static const char *const position_types[] = {"learned_absolute", "rope", "alibi", NULL};
static const char *const gelu_approximations[] = {"tanh", "none", NULL};
static const char *const hf_families[] = {"auto", "phi3", NULL};
static const char *const moe_balancing[] = {"aux_loss", "none", NULL};
static const char *const schedules[] = {"1f1b", "gpipe", "interleaved", NULL};
static const char *const orders[] = {"tp-dp-pp", "tp-pp-dp", NULL};
static const char *const decay_styles[] = {"cosine", "linear", "constant",
                                           "inverse-square-root", "WSD", NULL};
static const char *const wsd_styles[] = {"exponential", "linear", "cosine", "minus_sqrt", NULL};
static const char *const recompute_modes[] = {"none", "selective", "full", NULL};
static const char *const precisions[] = {"fp32", "bf16", "fp16", NULL};
static const char *const devices[] = {"cpu", "cuda", NULL};
static const char *const data_formats[] = {"auto", "megatron", "llmc", NULL};
static const char *const dataset_types[] = {"gpt", "sft", NULL};
static const char *const tokenizer_types[] = {"none", "ByteLevel", "GPT2BPETokenizer", "HFTokenizer",
                                              "Llama2Tokenizer", "GPTSentencePieceTokenizer",
                                              "TikTokenizer", "Llama3Tokenizer", NULL};
static const char *const tiktoken_patterns[] = {"none", "v1", "v2", NULL};
static const char *const log_levels[] = {"debug", "info", "warning", "error", NULL};
static const char *const cluster_presets[] = {"none", "a100-80gb", "h100-80gb", "h200", "cpu-host",
                                              NULL};
static const char *const cluster_devices[] = {"auto", "gpu", "cpu", NULL};
static const char *const cluster_runtimes[] = {"trident", "megatron", "megatron-2021",
                                               "deepspeed", NULL};

const config_key_spec config_keys[] = {
    INT("model", "num_layers", model.num_layers, 1, NULL, 1, 65536),
    INT("model", "hidden_size", model.hidden_size, 1, NULL, 1, 1 << 20),
    INT("model", "num_attention_heads", model.num_attention_heads, 1, NULL, 1, 65536),
    INT("model", "seq_length", model.seq_length, 1, NULL, 1, 1 << 24),
    INT("model", "max_position_embeddings", model.max_position_embeddings, 0, "=model.seq_length",
        1, 1 << 24),
    INT("model", "vocab_size", model.vocab_size, 0, "256", 1, 1 << 30),
    INT("model", "make_vocab_size_divisible_by", model.make_vocab_size_divisible_by, 0, "128", 1,
        65536),
    DBL("model", "init_method_std", model.init_method_std, 0, "0.02", 0, 1, INF, 0),
    DBL("model", "layernorm_epsilon", model.layernorm_epsilon, 0, "1e-5", 0, 1, INF, 0),
    ENUM("model", "normalization", model.normalization, "LayerNorm", normalizations),
    ENUM("model", "position_embedding_type", model.position_embedding_type, "learned_absolute",
         position_types),
    DBL("model", "rotary_base", model.rotary_base, 0, "10000", 0, 1, INF, 0),
    DBL("model", "rotary_percent", model.rotary_percent, 0, "1.0", 0, 1, 1, 0),
    BOOL("model", "swiglu", model.swiglu, "false"),
    INT("model", "ffn_hidden_size", model.ffn_hidden_size, 0, "0", 0, 1 << 24),
    INT("model", "num_query_groups", model.num_query_groups, 0, "=model.num_attention_heads", 1,
        65536),
    BOOL("model", "untie_embeddings_and_output_weights",
         model.untie_embeddings_and_output_weights, "false"),
    BOOL("model", "output_layer_bias", model.output_layer_bias, "false"),
    BOOL("model", "add_bias_linear", model.add_bias_linear, "true"),
    BOOL("model", "add_qkv_bias", model.add_qkv_bias, "false"),
    BOOL("model", "add_mlp_bias", model.add_mlp_bias, "false"),
    INT("model", "sliding_window", model.sliding_window, 0, "0", 0, 1 << 24),
    BOOL("model", "embedding_layernorm", model.embedding_layernorm, "false"),
    BOOL("model", "parallel_residual", model.parallel_residual, "false"),
    BOOL("model", "parallel_shared_norm", model.parallel_shared_norm, "false"),
    ENUM("model", "gelu_approximate", model.gelu_approximate, "tanh", gelu_approximations),
    INT("model", "kv_channels", model.kv_channels, 0, "0", 0, 65536),
    BOOL("model", "apply_layernorm_1p", model.apply_layernorm_1p, "false"),
    {.section = "model", .key = "layernorm_bias", .type = KEY_BOOL,
     .offset = F(model.no_layernorm_bias), .def = "true", .negate = 1},
    DBL("model", "embedding_multiplier", model.embedding_multiplier, 0, "1.0", 0, 1, INF, 0),
    BOOL("model", "geglu", model.geglu, "false"),
    BOOL("model", "relu", model.relu, "false"),
    DBL("model", "rotary_seq_len_interpolation_factor", model.rotary_seq_len_interpolation_factor,
        0, "1.0", 0, 1, INF, 0),
    BOOL("model", "use_rope_scaling", model.use_rope_scaling, "false"),
    DBL("model", "rope_scaling_factor", model.rope_scaling_factor, 0, "8.0", 0, 1, INF, 0),
    DBL("model", "rope_scaling_low_freq_factor", model.rope_scaling_low_freq_factor, 0, "1.0", 0,
        1, INF, 0),
    DBL("model", "rope_scaling_high_freq_factor", model.rope_scaling_high_freq_factor, 0, "4.0",
        0, 1, INF, 0),
    INT("model", "rope_scaling_original_max_position_embeddings",
        model.rope_scaling_original_max_position_embeddings, 0, "8192", 1, 1 << 24),
    ENUM("model", "hf_family", model.hf_family, "auto", hf_families),
    INT("model", "num_experts", model.num_experts, 0, "0", 0, 1024),
    INT("model", "moe_router_topk", model.moe_router_topk, 0, "2", 1, 1024),
    DBL("model", "moe_aux_loss_coeff", model.moe_aux_loss_coeff, 0, "0", 0, 0, INF, 0),
    DBL("model", "moe_z_loss_coeff", model.moe_z_loss_coeff, 0, "0", 0, 0, INF, 0),
    ENUM("model", "moe_router_load_balancing_type", model.moe_router_load_balancing_type,
         "aux_loss", moe_balancing),
    BOOL("model", "moe_router_pre_softmax", model.moe_router_pre_softmax, "false"),
    INT("model", "moe_shared_expert_intermediate_size", model.moe_shared_expert_intermediate_size,
        0, "0", 0, 1 << 24),
    DBL("model", "hidden_dropout", model.hidden_dropout, 0, "0", 0, 0, 1, 1),
    DBL("model", "attention_dropout", model.attention_dropout, 0, "0", 0, 0, 1, 1),

    INT("parallel", "tensor_model_parallel_size", parallel.tensor_model_parallel_size, 0, "1", 1,
        65536),
    INT("parallel", "pipeline_model_parallel_size", parallel.pipeline_model_parallel_size, 0, "1",
        1, TR_MAX_STAGES),
    INT("parallel", "context_parallel_size", parallel.context_parallel_size, 0, "1", 1, 65536),
    {.section = "parallel", .key = "pipeline_layers", .type = KEY_INT_LIST,
     .offset = F(parallel.pipeline_layers), .count_offset = F(parallel.num_pipeline_layers),
     .max_count = TR_MAX_STAGES, .lo = 1, .hi = 65536},
    ENUM("parallel", "pipeline_schedule", parallel.pipeline_schedule, "1f1b", schedules),
    INT("parallel", "virtual_pipeline_model_parallel_size",
        parallel.virtual_pipeline_model_parallel_size, 0, "1", 1, 1024),
    BOOL("parallel", "sequence_parallel", parallel.sequence_parallel, "false"),
    DBL("parallel", "ddp_bucket_size_mb", parallel.ddp_bucket_size_mb, 0, "25", 0, 0, 1e6, 0),
    BOOL("parallel", "overlap_grad_reduce", parallel.overlap_grad_reduce, "true"),
    BOOL("parallel", "use_distributed_optimizer", parallel.use_distributed_optimizer, "false"),
    INT("parallel", "zero_stage", parallel.zero_stage, 0, "0", 0, 3),
    BOOL("parallel", "zero_prefetch", parallel.zero_prefetch, "true"),
    DBL("parallel", "comm_timeout_s", parallel.comm_timeout_s, 0, "300", 0, 1, 1e9, 0),
    ENUM("parallel", "order", parallel.order, "tp-dp-pp", orders),
    INT("parallel", "expert_model_parallel_size", parallel.expert_model_parallel_size, 0, "1", 1,
        65536),

    INT("training", "micro_batch_size", training.micro_batch_size, 1, NULL, 1, 1 << 20),
    INT("training", "global_batch_size", training.global_batch_size, 0,
        "=training.micro_batch_size", 1, 1 << 30),
    INT("training", "train_iters", training.train_iters, 0, "0", 0, INT_MAX),
    /* sample-based training (validate.c: not mixed with the iteration-based keys) */
    {.section = "training", .key = "train_samples", .type = KEY_UINT64,
     .offset = F(training.train_samples), .def = "0"},
    {.section = "training", .key = "lr_decay_samples", .type = KEY_UINT64,
     .offset = F(training.lr_decay_samples), .def = "0"},
    {.section = "training", .key = "lr_warmup_samples", .type = KEY_UINT64,
     .offset = F(training.lr_warmup_samples), .def = "0"},
    {.section = "training", .key = "lr_wsd_decay_samples", .type = KEY_UINT64,
     .offset = F(training.lr_wsd_decay_samples), .def = "0"},
    {.section = "training", .key = "rampup_batch_size", .type = KEY_INT_LIST,
     .offset = F(training.rampup_batch_size), .count_offset = F(training.n_rampup_batch_size),
     .max_count = 3, .lo = 1, .hi = INT_MAX},
    DBL("training", "lr", training.lr, 1, NULL, 0, 1, INF, 0),
    DBL("training", "min_lr", training.min_lr, 0, "0", 0, 0, INF, 0),
    INT("training", "lr_warmup_iters", training.lr_warmup_iters, 0, "0", 0, INT_MAX),
    DBL("training", "lr_warmup_fraction", training.lr_warmup_fraction, 0, "0", 0, 0, 1, 0),
    DBL("training", "lr_warmup_init", training.lr_warmup_init, 0, "0", 0, 0, INF, 0),
    INT("training", "lr_decay_iters", training.lr_decay_iters, 0, "=training.train_iters", 0,
        INT_MAX),
    ENUM("training", "lr_decay_style", training.lr_decay_style, "cosine", decay_styles),
    INT("training", "lr_wsd_decay_iters", training.lr_wsd_decay_iters, 0, "0", 0, INT_MAX),
    ENUM("training", "lr_wsd_decay_style", training.lr_wsd_decay_style, "exponential",
         wsd_styles),
    DBL("training", "clip_grad", training.clip_grad, 0, "1.0", 0, 0, INF, 0),
    DBL("training", "weight_decay", training.weight_decay, 0, "0.01", 0, 0, INF, 0),
    DBL("training", "adam_beta1", training.adam_beta1, 0, "0.9", 0, 0, 1, 1),
    DBL("training", "adam_beta2", training.adam_beta2, 0, "0.999", 0, 0, 1, 1),
    DBL("training", "adam_eps", training.adam_eps, 0, "1e-8", 0, 1, INF, 0),
    {.section = "training", .key = "seed", .type = KEY_UINT64, .offset = F(training.seed),
     .def = "1234"},
    INT("training", "eval_interval", training.eval_interval, 0, "0", 0, INT_MAX),
    INT("training", "eval_iters", training.eval_iters, 0, "10", 0, INT_MAX),
    ENUM("training", "recompute", training.recompute, "none", recompute_modes),
    ENUM("training", "precision", training.precision, "fp32", precisions),
    DBL("training", "loss_scale", training.loss_scale, 0, "0", 0, 0, INF, 0),
    DBL("training", "initial_loss_scale", training.initial_loss_scale, 0, "4294967296", 1, 0,
        INF, 1),
    DBL("training", "min_loss_scale", training.min_loss_scale, 0, "1", 0, 1, INF, 1),
    INT("training", "loss_scale_window", training.loss_scale_window, 0, "1000", 1, INT_MAX),
    INT("training", "hysteresis", training.hysteresis, 0, "2", 1, INT_MAX),
    ENUM("training", "device", training.device, "cpu", devices),
    INT("training", "exit_interval", training.exit_interval, 0, "0", 0, INT_MAX),
    DBL("training", "exit_duration_in_mins", training.exit_duration_in_mins, 0, "0", 0, 0, 1e9, 0),
    BOOL("training", "exit_signal_handler", training.exit_signal_handler, "false"),

    /* lists (a string is a list of one); data_path or train_data_path (validate.c) */
    STRLIST("data_path", data.data_path, data.n_data_path),
    STRLIST("train_data_path", data.train_data_path, data.n_train_data_path),
    STRLIST("valid_data_path", data.valid_data_path, data.n_valid_data_path),
    STRLIST("test_data_path", data.test_data_path, data.n_test_data_path),
    ENUM("data", "data_format", data.data_format, "auto", data_formats),
    STR("data", "split", data.split, 0, "969,30,1", config_check_split),
    ENUM("data", "dataset_type", data.dataset_type, "gpt", dataset_types),
    BOOL("data", "sft_packing", data.sft_packing, "true"),
    /* the tokenizer: a nested mapping, data: {tokenizer: {type: ..., vocab_file: ...}} */
    ENUM("data", "tokenizer.type", data.tokenizer_type, "none", tokenizer_types),
    {.section = "data", .key = "tokenizer.vocab_file", .type = KEY_STRING,
     .offset = F(data.vocab_file), .def = "", .allow_empty = 1},
    {.section = "data", .key = "tokenizer.merge_file", .type = KEY_STRING,
     .offset = F(data.merge_file), .def = "", .allow_empty = 1},
    {.section = "data", .key = "tokenizer.model", .type = KEY_STRING,
     .offset = F(data.tokenizer_model), .def = "", .allow_empty = 1},
    /* TikTokenizer's (Megatron's --tiktoken-pattern, --tiktoken-num-special-tokens,
     * --tiktoken-special-tokens; an empty list: <unk> <s> </s>) */
    ENUM("data", "tokenizer.tiktoken_pattern", data.tiktoken_pattern, "none", tiktoken_patterns),
    INT("data", "tokenizer.tiktoken_num_special_tokens", data.tiktoken_num_special_tokens, 0,
        "1000", 3, (1 << 24) - 1),
    STRLIST("tokenizer.tiktoken_special_tokens", data.tiktoken_special_tokens,
            data.n_tiktoken_special_tokens),
    INT("data", "tokenizer.tiktoken_vocab_size", data.tiktoken_vocab_size, 0, "0", 0, 1 << 24),

    INT("logging", "log_interval", logging.log_interval, 0, "1", 1, INT_MAX),
    BOOL("logging", "trace", logging.trace, "false"),
    ENUM("logging", "level", logging.level, "info", log_levels),
    DBL("logging", "peak_gflops", logging.peak_gflops, 0, "0", 0, 0, INF, 0),
    /* "" = no TensorBoard event file */
    {.section = "logging", .key = "tensorboard_dir", .type = KEY_STRING,
     .offset = F(logging.tensorboard_dir), .def = "", .allow_empty = 1},

    /* directories; "" = none */
    {.section = "checkpoint", .key = "save", .type = KEY_STRING, .offset = F(checkpoint.save),
     .def = "", .allow_empty = 1},
    {.section = "checkpoint", .key = "load", .type = KEY_STRING, .offset = F(checkpoint.load),
     .def = "", .allow_empty = 1},
    INT("checkpoint", "save_interval", checkpoint.save_interval, 0, "0", 0, INT_MAX),
    BOOL("checkpoint", "async_save", checkpoint.async_save, "false"),
    INT("checkpoint", "keep_last", checkpoint.keep_last, 0, "0", 0, INT_MAX),

    /* fine-tuning: the base, and LoRA adapters as a nested mapping (lora: {rank: 8, ...}) */
    {.section = "finetune", .key = "load", .type = KEY_STRING, .offset = F(finetune.load),
     .def = "", .allow_empty = 1},
    INT("finetune", "lora.rank", finetune.lora_rank, 0, "0", 0, 65536),
    DBL("finetune", "lora.alpha", finetune.lora_alpha, 0, "16", 0, 1, 1e9, 0),
    DBL("finetune", "lora.dropout", finetune.lora_dropout, 0, "0", 0, 0, 1, 1),
    {.section = "finetune", .key = "lora.target_modules", .type = KEY_STRING_LIST,
     .offset = F(finetune.lora_targets), .count_offset = F(finetune.n_lora_targets),
     .max_count = 4},

    /* cluster: 0 = the preset's value (plan/cluster.c) */
    ENUM("cluster", "preset", cluster.preset, "none", cluster_presets),
    ENUM("cluster", "device", cluster.device, "auto", cluster_devices),
    ENUM("cluster", "runtime", cluster.runtime, "trident", cluster_runtimes),
    INT("cluster", "nodes", cluster.nodes, 0, "0", 0, 1 << 20),
    INT("cluster", "gpus_per_node", cluster.gpus_per_node, 0, "0", 0, 4096),
    DBL("cluster", "gpu_memory_gib", cluster.gpu_memory_gib, 0, "0", 0, 0, 1e9, 0),
    DBL("cluster", "reserved_memory_gib", cluster.reserved_memory_gib, 0, "0", 0, 0, 1e9, 0),
    DBL("cluster", "peak_tflops", cluster.peak_tflops, 0, "0", 0, 0, 1e9, 0),
    DBL("cluster", "gemm_efficiency", cluster.gemm_efficiency, 0, "0", 0, 0, 4, 0),
    DBL("cluster", "intra_node_gbytes_per_s", cluster.intra_node_gbytes_per_s, 0, "0", 0, 0, 1e9,
        0),
    DBL("cluster", "intra_node_latency_us", cluster.intra_node_latency_us, 0, "0", 0, 0, 1e9, 0),
    DBL("cluster", "inter_node_gbytes_per_s", cluster.inter_node_gbytes_per_s, 0, "0", 0, 0, 1e9,
        0),
    DBL("cluster", "inter_node_latency_us", cluster.inter_node_latency_us, 0, "0", 0, 0, 1e9, 0),
};

const int config_n_keys = (int)(sizeof config_keys / sizeof config_keys[0]);

const config_key_spec *config_find_key(const char *section, const char *key)
{
    for (int i = 0; i < config_n_keys; i++)
        if (!strcmp(config_keys[i].section, section) && !strcmp(config_keys[i].key, key))
            return &config_keys[i];
    return NULL;
}

int config_key_index(const char *dotted)
{
    const char *dot = strchr(dotted, '.');
    if (!dot)
        return -1;
    size_t slen = (size_t)(dot - dotted);
    for (int i = 0; i < config_n_keys; i++) {
        const config_key_spec *k = &config_keys[i];
        if (strlen(k->section) == slen && !strncmp(k->section, dotted, slen) &&
            !strcmp(k->key, dot + 1))
            return i;
    }
    return -1;
}

int config_section_index(const char *name)
{
    for (int i = 0; config_sections[i]; i++)
        if (!strcmp(config_sections[i], name))
            return i;
    return -1;
}
