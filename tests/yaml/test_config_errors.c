/* yaml/: every class of bad config gives TR_ERR_CONFIG and "WHERE: what was found; what is
 * allowed", WHERE being FILE:LINE:COL or "--set section.key". */
#include <stdlib.h>

#include "yaml_test.h"

#define E(text, where, what) tr_t_expect(text, NULL, 0, where, what)

static void test_unknown_keys_and_sections(void **state)
{
    (void)state;
    E("model:\n  num_layers: 4\n  hiden_size: 64\n", "t.yaml:3:3: ",
      "unknown key 'hiden_size' in section 'model'; allowed keys: num_layers, hidden_size, "
      "num_attention_heads, seq_length, max_position_embeddings, vocab_size, "
      "make_vocab_size_divisible_by, init_method_std, layernorm_epsilon, normalization, "
      "position_embedding_type, rotary_base, rotary_percent, swiglu, ffn_hidden_size, "
      "num_query_groups, untie_embeddings_and_output_weights, output_layer_bias, "
      "add_bias_linear, "
      "add_qkv_bias, add_mlp_bias, sliding_window, embedding_layernorm, parallel_residual, "
      "parallel_shared_norm, gelu_approximate, kv_channels, apply_layernorm_1p, layernorm_bias, "
      "embedding_multiplier, geglu, relu, rotary_seq_len_interpolation_factor, "
      "use_rope_scaling, "
      "rope_scaling_factor, rope_scaling_low_freq_factor, rope_scaling_high_freq_factor, "
      "rope_scaling_original_max_position_embeddings, hf_family, num_experts, moe_router_topk, "
      "moe_aux_loss_coeff, moe_z_loss_coeff, moe_router_load_balancing_type, "
      "moe_router_pre_softmax, moe_shared_expert_intermediate_size, hidden_dropout, "
      "attention_dropout (did you mean 'hidden_size'?)");
    E(TR_T_REQUIRED "parallel:\n  tensor_parallel_size: 2\n", "t.yaml:13:3: ",
      "(did you mean 'tensor_model_parallel_size'?)");
    E("model:\n  lr: 0.1\n", "t.yaml:2:3: ",
      "unknown key 'lr' in section 'model'; allowed keys: num_layers,");
    E("model:\n  lr: 0.1\n", "t.yaml:2:3: ", "('lr' belongs in section 'training')");
    E("model:\n  zzzzzzzz: 1\n", "t.yaml:2:3: ", "init_method_std, layernorm_epsilon");
    assert_null(strstr(tr_errmsg(), "did you mean")); /* nothing close: no suggestion */
    E("modle:\n  num_layers: 4\n", "t.yaml:1:1: ",
      "unknown section 'modle'; allowed sections: model, parallel, training, data, logging, "
      "checkpoint, finetune, cluster (did you mean 'model'?)");
    E(TR_T_REQUIRED "lr: 3\n", "t.yaml:12:1: ",
      "unknown section 'lr'; allowed sections: model, parallel, training, data, logging, "
      "checkpoint, finetune, cluster ('lr' is a key of section 'training')");
    E(TR_T_REQUIRED "[a, b]: 1\n", "t.yaml:12:1: ",
      "a section name is a list; allowed sections: model,");
    E(TR_T_REQUIRED "~: 1\n", "t.yaml:12:1: ", "a section name is an empty value");
    E("model:\n  {a: 1}: 2\n", "t.yaml:2:3: ",
      "a key of section 'model' is a mapping; allowed: a plain key name");
    E("model:\n  \"num_\\0layers\": 4\n", "t.yaml:2:3: ", "unknown key 'num_\\x00layers'");
}

static void test_wrong_types(void **state)
{
    (void)state;
    E("model:\n  num_layers: abc\n", "t.yaml:2:15: ",
      "model.num_layers: expected an integer, found 'abc'");
    E("model:\n  num_layers: 4.0\n", "t.yaml:2:15: ", "expected an integer, found '4.0'");
    E("model:\n  num_layers: 1e3\n", "t.yaml:2:15: ", "expected an integer, found '1e3'");
    E("model:\n  num_layers: 1_000\n", "t.yaml:2:15: ", "expected an integer, found '1_000'");
    E("model:\n  num_layers: 0x10\n", "t.yaml:2:15: ", "expected an integer, found '0x10'");
    E("model:\n  num_layers: ' 4'\n", "t.yaml:2:15: ", "expected an integer, found ' 4'");
    E("model:\n  num_layers:\n", "t.yaml:2:14: ", "expected an integer, found an empty value");
    E("model:\n  num_layers: [4]\n", "t.yaml:2:15: ", "expected an integer, found a list");
    E("model:\n  num_layers: {a: 4}\n", "t.yaml:2:15: ", "expected an integer, found a mapping");
    E(TR_T_MODEL "training:\n  lr: fast\n", "t.yaml:7:7: ",
      "training.lr: expected a number, found 'fast'");
    E(TR_T_MODEL "training:\n  lr: .inf\n", "t.yaml:7:7: ", "expected a number, found '.inf'");
    E(TR_T_MODEL "training:\n  lr: 1e-3x\n", "t.yaml:7:7: ", "expected a number, found '1e-3x'");
    E(TR_T_MODEL "training:\n  seed: -1\n", "t.yaml:7:9: ",
      "training.seed: expected a non-negative integer, found '-1'");
    E(TR_T_REQUIRED "parallel:\n  sequence_parallel: maybe\n", "t.yaml:13:22: ",
      "parallel.sequence_parallel: expected a boolean (true/false/yes/no), found 'maybe'");
    E(TR_T_REQUIRED "parallel:\n  sequence_parallel: 1\n", "t.yaml:13:22: ",
      "expected a boolean (true/false/yes/no), found '1'");
    E(TR_T_REQUIRED "parallel:\n  pipeline_layers: 3\n", "t.yaml:13:20: ",
      "parallel.pipeline_layers: expected a list of integers like [1, 3], found '3'");
    E(TR_T_REQUIRED "parallel:\n  pipeline_model_parallel_size: 2\n  pipeline_layers: [2, two]\n",
      "t.yaml:14:24: ", "parallel.pipeline_layers[1]: expected an integer, found 'two'");
    E(TR_T_MODEL TR_T_TRAINING "data:\n  data_path: {a: 1}\n", "t.yaml:11:14: ",
      "data.data_path: expected a list of strings like [0.3, prefixA, 0.7, prefixB], or a "
      "string, found a mapping");
    E(TR_T_MODEL TR_T_TRAINING "data:\n  data_path: [a, [b]]\n", "t.yaml:11:18: ",
      "data.data_path[1]: expected a string, found a list");
    E(TR_T_MODEL TR_T_TRAINING "data:\n  data_path: [0.3, a, b, c]\n", "t.yaml:11:3: ",
      "data.data_path: 1 of the 2 weights are numbers");
    E(TR_T_MODEL TR_T_TRAINING "data:\n  data_path: [0, a, 0, b]\n", "t.yaml:11:3: ",
      "data.data_path: the weights are all 0");
    E(TR_T_MODEL TR_T_TRAINING "data:\n  data_path: a\n  train_data_path: [b]\n", "t.yaml:12:3: ",
      "exclude each other");
    E(TR_T_MODEL TR_T_TRAINING "data:\n  data_path: a\n  tokenizer: {type: GPT2BPETokenizer}\n",
      "t.yaml:12:15: ", "data.tokenizer.type GPT2BPETokenizer needs data.tokenizer.vocab_file");
    E(TR_T_MODEL TR_T_TRAINING "data:\n  data_path: a\n  tokenizer:\n    merge_file: m.txt\n",
      "t.yaml:13:5: ", "data.tokenizer.merge_file is not used by data.tokenizer.type none");
    E(TR_T_MODEL TR_T_TRAINING "data:\n  data_path: a\n  tokenizer: {kind: x}\n", "t.yaml:12:15: ",
      "unknown key 'tokenizer.kind' in section 'data'");
    E(TR_T_MODEL TR_T_TRAINING "data:\n  data_path: a\n  tokenizer: {type: Sentencepiece}\n",
      "t.yaml:12:21: ", "data.tokenizer.type: found 'Sentencepiece'; allowed: none, ByteLevel");
    E("model: 5\n", "t.yaml:1:8: ",
      "section 'model' is '5'; expected a mapping of keys (`key: value` lines)");
    E("model: [num_layers, 4]\n", "t.yaml:1:8: ", "section 'model' is a list; expected a mapping");
}

static void test_out_of_range(void **state)
{
    (void)state;
    E("model:\n  num_layers: 0\n", "t.yaml:2:15: ",
      "model.num_layers: found '0'; allowed: an integer from 1 to 65536");
    E("model:\n  num_layers: -3\n", "t.yaml:2:15: ", "found '-3'; allowed: an integer from 1");
    E("model:\n  hidden_size: 99999999999999999999\n", "t.yaml:2:16: ",
      "model.hidden_size: found '99999999999999999999'; allowed: an integer from 1 to 1048576");
    E("model:\n  hidden_size: 4294967360\n", "t.yaml:2:16: ", "found '4294967360'; allowed:");
    E(TR_T_MODEL "training:\n  train_iters: 2147483648\n", "t.yaml:7:16: ",
      "training.train_iters: found '2147483648'; allowed: an integer >= 0");
    E(TR_T_MODEL "training:\n  lr: 0\n", "t.yaml:7:7: ",
      "training.lr: found '0'; allowed: a number > 0");
    E(TR_T_MODEL "training:\n  lr: -1e-3\n", "t.yaml:7:7: ", "found '-1e-3'; allowed: a number > 0");
    E(TR_T_MODEL "training:\n  lr: nan\n", "t.yaml:7:7: ", "found 'nan'; allowed: a number > 0");
    E(TR_T_MODEL "training:\n  lr: -inf\n", "t.yaml:7:7: ", "found '-inf'; allowed: a number > 0");
    E(TR_T_MODEL "training:\n  lr: Infinity\n", "t.yaml:7:7: ", "found 'Infinity'; allowed");
    E(TR_T_MODEL "training:\n  lr: 1e999\n", "t.yaml:7:7: ", "found '1e999'; allowed: a number > 0");
    E(TR_T_MODEL "training:\n  adam_beta2: 1\n", "t.yaml:7:15: ",
      "training.adam_beta2: found '1'; allowed: a number >= 0 and < 1");
    E(TR_T_MODEL "training:\n  seed: 18446744073709551616\n", "t.yaml:7:9: ",
      "training.seed: found '18446744073709551616'; allowed: an integer from 0 to "
      "18446744073709551615");
    E(TR_T_REQUIRED "parallel:\n  pipeline_model_parallel_size: 257\n", "t.yaml:13:33: ",
      "found '257'; allowed: an integer from 1 to 256");
    E(TR_T_REQUIRED "parallel:\n  pipeline_layers: [0]\n", "t.yaml:13:21: ",
      "parallel.pipeline_layers[0]: found '0'; allowed: an integer from 1 to 65536");
    E(TR_T_REQUIRED "logging:\n  peak_gflops: -1\n", "t.yaml:13:16: ",
      "logging.peak_gflops: found '-1'; allowed: a number >= 0");
    /* dropout probabilities: [0, 1) */
    E("model:\n  hidden_dropout: 1\n", "t.yaml:2:19: ",
      "model.hidden_dropout: found '1'; allowed: a number >= 0 and < 1");
    E("model:\n  hidden_dropout: -0.1\n", "t.yaml:2:19: ", "found '-0.1'; allowed: a number >= 0");
    E("model:\n  attention_dropout: 1.5\n", "t.yaml:2:22: ",
      "model.attention_dropout: found '1.5'; allowed: a number >= 0 and < 1");
    E("model:\n  attention_dropout: nan\n", "t.yaml:2:22: ", "found 'nan'; allowed: a number >= 0");
    E("model:\n  attention_dropout: high\n", "t.yaml:2:22: ",
      "model.attention_dropout: expected a number, found 'high'");
    /* a list longer than TR_MAX_STAGES */
    char text[4096] = TR_T_REQUIRED "parallel:\n  pipeline_layers: [1";
    for (int i = 0; i < 300; i++)
        strcat(text, ",1");
    strcat(text, "]\n");
    E(text, "t.yaml:13:20: ",
      "parallel.pipeline_layers: found a list of 301 entries; allowed: at most 256");
}

static void test_strings_and_names(void **state)
{
    (void)state;
    E(TR_T_REQUIRED "parallel:\n  pipeline_schedule: foo\n", "t.yaml:13:22: ",
      "parallel.pipeline_schedule: found 'foo'; allowed: 1f1b, gpipe, interleaved");
    E(TR_T_REQUIRED "parallel:\n  pipeline_schedule: gpipee\n", "t.yaml:13:22: ",
      "found 'gpipee'; allowed: 1f1b, gpipe, interleaved (did you mean 'gpipe'?)");
    E(TR_T_REQUIRED "parallel:\n  pipeline_schedule: 1F1B\n", "t.yaml:13:22: ",
      "(did you mean '1f1b'?)");
    E(TR_T_REQUIRED "parallel:\n  pipeline_schedule:\n", "t.yaml:13:21: ",
      "expected one of the allowed names, found an empty value");
    E(TR_T_MODEL TR_T_TRAINING "data:\n  data_path: \"\"\n", "t.yaml:11:14: ",
      "data.data_path: found an empty string; allowed: a non-empty string");
    E(TR_T_MODEL TR_T_TRAINING "data:\n  data_path: \"a\\0b\"\n", "t.yaml:11:14: ",
      "found 'a\\x00b', which holds a NUL byte; allowed: text without NUL");
    E(TR_T_REQUIRED "logging:\n  level: verbose\n", "t.yaml:13:10: ",
      "found 'verbose'; allowed: debug, info, warning, error");
    E(TR_T_MODEL TR_T_TRAINING "data:\n  data_path: x\n  split: 1,2,3,4\n", "t.yaml:12:10: ",
      "data.split: found '1,2,3,4'; allowed: 1 to 3 non-negative weights separated by commas");
    E(TR_T_MODEL TR_T_TRAINING "data:\n  data_path: x\n  split: 0,0,0\n", "t.yaml:12:10: ",
      "found '0,0,0'; allowed: 1 to 3");
    E(TR_T_MODEL TR_T_TRAINING "data:\n  data_path: x\n  split: 98,-2\n", "t.yaml:12:10: ",
      "found '98,-2'; allowed");
    E(TR_T_MODEL TR_T_TRAINING "data:\n  data_path: x\n  split: a,b\n", "t.yaml:12:10: ",
      "found 'a,b'; allowed");
    /* a path longer than allowed; the message shows a shortened, escaped copy */
    size_t n = 5000;
    char *text = tr_t_malloc(n + 200);
    int o = sprintf(text, TR_T_MODEL TR_T_TRAINING "data:\n  data_path: ");
    memset(text + o, 'p', n);
    strcpy(text + o + n, "\n");
    E(text, "t.yaml:11:14: ",
      "data.data_path: found a string of 5000 bytes; allowed: at most 4096 bytes");
    text[o + 4] = ':'; /* a ': ' inside a plain scalar */
    text[o + 5] = ' ';
    E(text, "t.yaml:11:18: ", "YAML syntax error: mapping values are not allowed in this context");
    free(text);
}

static void test_missing_required(void **state)
{
    (void)state;
    E("model:\n  hidden_size: 64\n  num_attention_heads: 4\n  seq_length: 32\n" TR_T_TRAINING TR_T_DATA,
      "t.yaml:1:1: ",
      "missing required key model.num_layers; add it to section 'model' (an integer from 1 to "
      "65536)");
    E(TR_T_MODEL TR_T_DATA "training:\n  micro_batch_size: 2\n  train_iters: 10\n", "t.yaml:8:1: ",
      "missing required key training.lr; add it to section 'training' (a number > 0)");
    E(TR_T_MODEL TR_T_TRAINING, "t.yaml:1:1: ",
      "missing required key data.data_path; add it to section 'data' (a dataset prefix");
    E(TR_T_MODEL TR_T_TRAINING "data:\n", "t.yaml:10:1: ", "missing required key data.data_path");
}

/* Sample-based training and the batch ramp-up: Megatron's exclusions and the ramp's rules. */
#define SB(lines) TR_T_MODEL "training:\n  micro_batch_size: 2\n  lr: 1e-3\n" lines TR_T_DATA
static void test_sample_based(void **state)
{
    (void)state;
    E(SB("  global_batch_size: 8\n"), "t.yaml:6:1: ",
      "missing required key training.train_iters; add it to section 'training' (an integer >= "
      "1), or training.train_samples for sample-based training");
    E(SB("  train_iters: 10\n  train_samples: 80\n"), "t.yaml:10:3: ",
      "training.train_samples = 80 and training.train_iters = 10 (set at t.yaml:9:3) both give "
      "the run's length; allowed: one of them");
    E(SB("  train_iters: 10\n  lr_decay_samples: 80\n"), "t.yaml:10:3: ",
      "training.lr_decay_samples is for sample-based training, but training.train_iters = 10 "
      "(set at t.yaml:9:3) makes this run iteration-based");
    E(SB("  train_iters: 10\n  global_batch_size: 8\n  rampup_batch_size: [2, 2, 40]\n"),
      "t.yaml:11:3: ", "a batch-size ramp-up needs train_samples");
    E(SB("  train_samples: 80\n  lr_warmup_iters: 2\n"), "t.yaml:10:3: ",
      "training.lr_warmup_iters is for iteration-based training, but training.train_samples = "
      "80 (set at t.yaml:9:3) makes this run sample-based");
    E(SB("  train_samples: 80\n  lr_decay_iters: 20\n"), "t.yaml:10:3: ",
      "training.lr_decay_iters is for iteration-based training");
    E(SB("  train_samples: 80\n  lr_wsd_decay_iters: 2\n"), "t.yaml:10:3: ",
      "training.lr_wsd_decay_iters is for iteration-based training");
    E(SB("  train_samples: 80\n  lr_warmup_samples: 8\n  lr_warmup_fraction: 0.1\n"),
      "t.yaml:11:3: ", "training.lr_warmup_fraction = 0.1 and training.lr_warmup_samples = 8 "
      "(set at t.yaml:10:3) both give the warm-up");
    E(SB("  train_samples: 80\n  global_batch_size: 8\n  rampup_batch_size: [2, 2]\n"),
      "t.yaml:11:3: ", "training.rampup_batch_size has 2 entries; allowed: [start, increment, "
      "ramp samples]");
    E(SB("  train_samples: 80\n  global_batch_size: 8\n  rampup_batch_size: [2, 2, 4, 4]\n"),
      "t.yaml:11:22: ", "found a list of 4 entries; allowed: at most 3");
    E(SB("  train_samples: 80\n  global_batch_size: 8\n  rampup_batch_size: [2, 0, 40]\n"),
      "t.yaml:11:26: ", "training.rampup_batch_size[1]: found '0'; allowed: an integer >= 1");
    E(SB("  train_samples: 80\n  global_batch_size: 8\n  rampup_batch_size: [8, 2, 40]\n"),
      "t.yaml:11:3: ", "training.rampup_batch_size starts at 8, not below "
      "training.global_batch_size = 8 (set at t.yaml:10:3)");
    E(SB("  train_samples: 80\n  global_batch_size: 8\n  rampup_batch_size: [2, 4, 40]\n"),
      "t.yaml:11:3: ", "global_batch_size - start = 8 - 2 = 6 is not a multiple of the "
      "increment 4 (set at t.yaml:10:3)");
    E(SB("  train_samples: 80\n  global_batch_size: 8\n  rampup_batch_size: [3, 1, 40]\n"),
      "t.yaml:11:3: ", "training.rampup_batch_size: the start 3 is not a multiple of "
      "training.micro_batch_size = 2 (set at t.yaml:7:3)");
    /* Megatron's count: the ramp's 1 iteration (2 samples > ramp 1), then (1 - 2) // 8 = -1 */
    E(SB("  train_samples: 1\n  global_batch_size: 8\n  rampup_batch_size: [2, 2, 1]\n"),
      "t.yaml:9:3: ", "training.train_samples = 1 gives 0 iterations (Megatron's count: the "
      "ramp-up's, then whole global batches of the rest); allowed: 1 to 2147483647");
    E(SB("  train_samples: 7\n  global_batch_size: 8\n"), "t.yaml:9:3: ",
      "training.train_samples = 7 gives 0 iterations (Megatron's count: train_samples / "
      "global_batch_size)");
    E(SB("  train_samples: 80\n  lr_warmup_samples: 80\n"), "t.yaml:10:3: ",
      "the warm-up of 80 samples is not shorter than the decay's 80 (lr_decay_samples, default "
      "train_samples)");
    E(SB("  train_samples: 80\n  lr_decay_style: WSD\n"), "t.yaml:10:3: ",
      "training.lr_decay_style = WSD needs training.lr_wsd_decay_samples, the samples of the "
      "anneal that ends at the decay's 80, from 1 to the 80 after the warm-up (got 0)");
    E(SB("  train_samples: 80\n  lr_warmup_samples: 8\n  lr_decay_style: WSD\n"
         "  lr_wsd_decay_samples: 73\n"), "t.yaml:12:3: ", "from 1 to the 72 after the warm-up "
      "(got 73)");
    E(SB("  train_samples: 80\n  train_iters: 0\n  lr_decay_iters: 0\n"
         "  lr_warmup_samples: -1\n"), "t.yaml:12:22: ",
      "training.lr_warmup_samples: expected a non-negative integer, found '-1'");
}

static void test_inconsistent(void **state)
{
    (void)state;
    E("model:\n  num_layers: 4\n  hidden_size: 66\n  num_attention_heads: 4\n  seq_length: 32\n"
          TR_T_TRAINING TR_T_DATA,
      "t.yaml:3:3: ",
      "model.hidden_size = 66 is not a multiple of model.num_attention_heads = 4 (set at "
      "t.yaml:4:3); hidden_size must be divisible by num_attention_heads (e.g. 64 or 68)");
    E(TR_T_MODEL "training:\n  micro_batch_size: 4\n  global_batch_size: 10\n  train_iters: 10\n"
                 "  lr: 1e-3\n" TR_T_DATA,
      "t.yaml:8:3: ",
      "training.global_batch_size = 10 is not a multiple of training.micro_batch_size = 4 (set "
      "at t.yaml:7:3); allowed: a multiple (e.g. 8 or 12)");
    E(TR_T_MODEL "training:\n  micro_batch_size: 4\n  train_iters: 10\n  lr: 1e-3\n"
                 "  min_lr: 2e-3\n" TR_T_DATA,
      "t.yaml:10:3: ",
      "training.min_lr = 0.002 is greater than training.lr = 0.001 (set at t.yaml:9:3); allowed: "
      "min_lr <= lr");
    E(TR_T_MODEL "training:\n  micro_batch_size: 4\n  train_iters: 10\n  lr: 1e-3\n"
                 "  lr_decay_style: WSD\n" TR_T_DATA,
      "t.yaml:10:3: ",
      "training.lr_decay_style = WSD needs training.lr_wsd_decay_iters, the iterations of the "
      "anneal that ends at lr_decay_iters = 10; allowed: 1 to 10");
    E(TR_T_MODEL "training:\n  micro_batch_size: 4\n  train_iters: 10\n  lr: 1e-3\n"
                 "  lr_warmup_iters: 4\n  lr_decay_style: WSD\n  lr_wsd_decay_iters: 7\n" TR_T_DATA,
      "t.yaml:12:3: ",
      "training.lr_wsd_decay_iters = 7 is more than the 6 iterations from the end of the "
      "warm-up (4 iterations) to lr_decay_iters = 10; allowed: 1 to 6");
    E(TR_T_MODEL "training:\n  micro_batch_size: 4\n  train_iters: 10\n  lr: 1e-3\n"
                 "  lr_warmup_iters: 4\n  lr_warmup_fraction: 0.1\n" TR_T_DATA,
      "t.yaml:11:3: ",
      "training.lr_warmup_fraction = 0.1 and training.lr_warmup_iters = 4 (set at t.yaml:10:3) "
      "both give the warm-up; allowed: one of them");
    E(TR_T_MODEL "training:\n  micro_batch_size: 4\n  train_iters: 10\n  lr: 1e-3\n"
                 "  lr_warmup_init: 2e-3\n" TR_T_DATA,
      "t.yaml:10:3: ",
      "training.lr_warmup_init = 0.002 is greater than training.lr = 0.001 (set at t.yaml:9:3); "
      "allowed: lr_warmup_init <= lr");
    E(TR_T_MODEL "training:\n  micro_batch_size: 4\n  train_iters: 10\n  lr: 1e-3\n"
                 "  lr_decay_style: WSD\n  lr_wsd_decay_iters: 2\n  lr_wsd_decay_style: sqrt\n"
                 TR_T_DATA,
      "t.yaml:12:23: ",
      "training.lr_wsd_decay_style: found 'sqrt'; allowed: exponential, linear, cosine, "
      "minus_sqrt");
    E(TR_T_REQUIRED "parallel:\n  pipeline_model_parallel_size: 2\n  pipeline_layers: [1, 2, 1]\n",
      "t.yaml:14:3: ",
      "parallel.pipeline_layers has 3 entries but parallel.pipeline_model_parallel_size = 2 (set "
      "at t.yaml:13:3); allowed: one entry (a layer count) per pipeline stage, or [] for an even "
      "split");
    E(TR_T_REQUIRED "parallel:\n  pipeline_layers: [1, 2, 1]\n", "t.yaml:13:3: ",
      "has 3 entries but parallel.pipeline_model_parallel_size = 1 (default)");
    E(TR_T_REQUIRED "parallel:\n  pipeline_model_parallel_size: 2\n  pipeline_layers: [1, 2]\n",
      "t.yaml:14:3: ",
      "parallel.pipeline_layers sums to 3 but model.num_layers = 4 (set at t.yaml:2:3); the "
      "stages must hold every layer exactly once");
    E(TR_T_REQUIRED "parallel:\n  tensor_model_parallel_size: 8\n", "t.yaml:13:3: ",
      "parallel.tensor_model_parallel_size = 8 does not divide model.num_attention_heads = 4 "
      "(set at t.yaml:4:3); each tensor-parallel rank holds whole heads");
    E(TR_T_REQUIRED "parallel:\n  tensor_model_parallel_size: 3\n", "t.yaml:13:3: ",
      "parallel.tensor_model_parallel_size = 3 does not divide model.hidden_size = 64 (set at "
      "t.yaml:3:3); tensor parallelism splits hidden_size evenly");
    E(TR_T_REQUIRED "parallel:\n  pipeline_model_parallel_size: 5\n", "t.yaml:13:3: ",
      "parallel.pipeline_model_parallel_size = 5 is more than model.num_layers = 4 (set at "
      "t.yaml:2:3); each pipeline stage needs at least one layer");
    E("model:\n  num_layers: 4\n  hidden_size: 64\n  num_attention_heads: 4\n  seq_length: 32\n"
      "  max_position_embeddings: 16\n" TR_T_TRAINING TR_T_DATA,
      "t.yaml:6:3: ",
      "model.max_position_embeddings = 16 is less than model.seq_length = 32 (set at "
      "t.yaml:5:3); allowed: max_position_embeddings >= seq_length");
    E(TR_T_REQUIRED "parallel:\n  virtual_pipeline_model_parallel_size: 2\n", "t.yaml:13:3: ",
      "virtual stages need pipeline_schedule: interleaved");
    E(TR_T_REQUIRED "parallel:\n  pipeline_schedule: interleaved\n", "t.yaml:13:3: ",
      "interleaving needs both >= 2");
    E(TR_T_REQUIRED "parallel:\n  pipeline_schedule: interleaved\n"
                    "  pipeline_model_parallel_size: 2\n  virtual_pipeline_model_parallel_size: 4\n",
      "t.yaml:2:3: ", "model.num_layers = 4 is not divisible by pipeline_model_parallel_size x "
                      "virtual_pipeline_model_parallel_size = 2 x 4");
    E(TR_T_REQUIRED "parallel:\n  pipeline_schedule: interleaved\n  pipeline_layers: [1, 3]\n"
                    "  pipeline_model_parallel_size: 2\n  virtual_pipeline_model_parallel_size: 2\n",
      "t.yaml:14:3: ", "parallel.pipeline_layers[0] = 1 is not a multiple of");
    E(TR_T_REQUIRED "training:\n", "t.yaml:12:1: ", "duplicate section 'training' (first at line 6)");
    E(TR_T_MODEL "training:\n  micro_batch_size: 2\n  train_iters: 10\n  lr: 1\n  eval_interval: "
                 "5\n  eval_iters: 0\n" TR_T_DATA,
      "t.yaml:11:3: ", "training.eval_iters = 0 with training.eval_interval = 5");
}

static void test_document_shape(void **state)
{
    (void)state;
    const char *empty = "empty document; expected a mapping with sections model, parallel, "
                        "training, data, logging";
    E("", "t.yaml:1:1: ", empty);
    E("# just a comment\n\n", "t.yaml:1:1: ", empty);
    E("---\n", "t.yaml:1:1: ", empty);
    E("~\n", "t.yaml:1:1: ", empty);
    E("- model\n- training\n", "t.yaml:1:1: ",
      "the document is a list; expected a mapping with sections model, parallel, training, data, "
      "logging");
    E("hello\n", "t.yaml:1:1: ", "the document is 'hello'; expected a mapping");
    E(TR_T_REQUIRED "---\nmodel: {}\n", "t.yaml:12:1: ",
      "a second YAML document; a config is exactly one document");
    E("model:\n  num_layers: 4\n  num_layers: 5\n", "t.yaml:3:3: ",
      "duplicate key 'num_layers' in section 'model' (first at line 2); each key may appear once");
    E("model:\n\tnum_layers: 4\n", "t.yaml:2:1: ",
      "YAML syntax error: found character that cannot start any token (while scanning for the "
      "next token); tabs cannot indent YAML; use spaces");
    E("model:\n  num_layers: [4\n", "t.yaml:3:1: ", "YAML syntax error: did not find expected ',' or ']'");
    E("model:\n  num_layers: 4\n bad\n", "t.yaml:3:2: ", "YAML syntax error:");
    E("model:\n  num_layers: \xff\n", "t.yaml:2:15: ",
      "invalid leading UTF-8 octet (value 0xFF); a config must be UTF-8 text without control "
      "characters");
    E("model:\n  num_layers: \x01\n", "t.yaml:2:15: ", "control characters are not allowed");
    tr_t_expect_n("model:\n  num\0layers: 4\n", 23, NULL, 0, "t.yaml:2:6: ",
                  "control characters are not allowed (value 0x0)");
    E("a: *x\n", "t.yaml:1:4: ", "alias *x names no anchor defined before it");
    E("a: &x [1]\nb: *x\n", "t.yaml:2:4: ",
      "alias *x refers to a list; aliases are allowed only for scalar values");
    E("model: &m {num_layers: 4}\nparallel: *m\n", "t.yaml:2:11: ", "alias *m refers to a mapping");
    E("model:\n  <<: {num_layers: 4}\n", "t.yaml:2:3: ", "unknown key '<<' in section 'model'");
}

static void test_override_errors(void **state)
{
    (void)state;
    const char *ov[1];
#define EO(arg, where, what)                                                                   \
    do {                                                                                       \
        ov[0] = arg;                                                                           \
        tr_t_expect(TR_T_REQUIRED, ov, 1, where, what);                                        \
    } while (0)
    EO("training.lr=abc", "--set training.lr: ", "expected a number, found 'abc'");
    EO("training.lr=", "--set training.lr: ", "found no value after '='; expected a value (YAML)");
    EO("training.lr=[1", "--set training.lr: ", "YAML syntax error:");
    EO("training.lr=1\n---\n2", "--set training.lr: ", "a second YAML document");
    EO("training.lr=\xff", "--set training.lr: ", "invalid leading UTF-8 octet");
    EO("parallel.pipeline_layers=[1,x]", "--set parallel.pipeline_layers: ",
       "parallel.pipeline_layers[1]: expected an integer, found 'x'");
    EO("parallel.pipeline_layers=[1,3]", "--set parallel.pipeline_layers: ",
       "has 2 entries but parallel.pipeline_model_parallel_size = 1 (default)");
    EO("model.nope=1", "--set model.nope: ",
       "unknown key 'nope' in section 'model'; allowed keys: num_layers,");
    EO("modle.num_layers=1", "--set modle.num_layers: ",
       "unknown section 'modle'; allowed sections: model, parallel, training, data, logging, "
       "checkpoint, finetune, cluster (did you mean 'model'?)");
    EO("training.lrr=1", "--set training.lrr: ", "(did you mean 'lr'?)");
    EO("model.hidden_dropout=0.1x", "--set model.hidden_dropout: ",
       "model.hidden_dropout: expected a number, found '0.1x'");
    EO("model.attention_dropout=1", "--set model.attention_dropout: ",
       "model.attention_dropout: found '1'; allowed: a number >= 0 and < 1");
    EO("lr=3e-4", "--set 'lr=3e-4': ", "expected SECTION.KEY=VALUE; did you mean --set training.lr=...?");
    EO("training.lr", "--set 'training.lr': ", "expected SECTION.KEY=VALUE (e.g. training.lr=3e-4)");
    EO("=1", "--set '=1': ", "expected SECTION.KEY=VALUE");
    EO(".=1", "--set .: ", "unknown section ''");
    EO("model.hidden_size=33", "--set model.hidden_size: ",
       "model.hidden_size = 33 is not a multiple of model.num_attention_heads = 4 (set at "
       "t.yaml:4:3)");
    EO("parallel.tensor_model_parallel_size=3", "--set parallel.tensor_model_parallel_size: ",
       "does not divide model.hidden_size = 64");
    EO("data.data_path={a: 1}", "--set data.data_path: ", "or a string, found a mapping");
    EO("parallel.pipeline_schedule=foo", "--set parallel.pipeline_schedule: ",
       "found 'foo'; allowed: 1f1b, gpipe, interleaved");
    char deep[100032] = "parallel.pipeline_layers=";
    memset(deep + strlen(deep), '[', 100000);
    EO(deep, "--set parallel.pipeline_layers: ", "collections nested more than 32 deep");
#undef EO
    /* a good override does not hide an error in the file */
    const char *good[] = {"training.lr=1"};
    tr_t_expect("model:\n  num_layers: x\n", good, 1, "t.yaml:2:15: ", "expected an integer");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unknown_keys_and_sections),
        cmocka_unit_test(test_wrong_types),
        cmocka_unit_test(test_out_of_range),
        cmocka_unit_test(test_strings_and_names),
        cmocka_unit_test(test_missing_required),
        cmocka_unit_test(test_sample_based),
        cmocka_unit_test(test_inconsistent),
        cmocka_unit_test(test_document_shape),
        cmocka_unit_test(test_override_errors),
    };
    return cmocka_run_group_tests_name("yaml config errors", tests, NULL, NULL);
}
