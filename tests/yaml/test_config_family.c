/* yaml/: the model-family keys (issue 17): GPT-2 defaults, a Llama and a Bloom config, the
 * mixture-of-experts keys, and every contradictory combination named with its place. */
#include "yaml_test.h"

#define E(text, where, what) tr_t_expect(text, NULL, 0, where, what)
#define WITH(extra) TR_T_MODEL extra TR_T_TRAINING TR_T_DATA

static void test_defaults_are_gpt2(void **state)
{
    (void)state;
    tr_config c;
    assert_int_equal(tr_t_load(TR_T_REQUIRED, NULL, 0, &c), TR_OK);
    assert_string_equal(c.model.normalization, "LayerNorm");
    assert_string_equal(c.model.position_embedding_type, "learned_absolute");
    assert_true(c.model.rotary_base == 10000.0 && c.model.rotary_percent == 1.0);
    assert_int_equal(c.model.swiglu, 0);
    assert_int_equal(c.model.ffn_hidden_size, 0);
    assert_int_equal(tr_model_ffn_hidden(&c.model), 256);
    assert_int_equal(c.model.num_query_groups, 4);
    assert_int_equal(c.model.untie_embeddings_and_output_weights, 0);
    assert_int_equal(c.model.add_bias_linear, 1);
    assert_int_equal(c.model.embedding_layernorm, 0);
    assert_int_equal(c.model.parallel_residual, 0);
    assert_string_equal(c.model.gelu_approximate, "tanh");
    tr_config_free(&c);
}

/* The config `text` loads and its family flow entries (tr_model_family_flow) hold `want`. */
static void expect_flow(const char *text, const char *want)
{
    tr_config c;
    char flow[1024];
    assert_int_equal(tr_t_load(text, NULL, 0, &c), TR_OK);
    tr_model_family_flow(&c.model, flow, sizeof flow);
    if (!strstr(flow, want))
        fail_msg("family flow '%s' lacks '%s'", flow, want);
    tr_config_free(&c);
}

/* The config `text` with the overrides ov[0..n) loads and its family flow names no `key`. */
static void expect_flow_lacks(const char *text, const char *const *ov, int n, const char *key)
{
    tr_config c;
    char flow[1024];
    assert_int_equal(tr_t_load(text, ov, n, &c), TR_OK);
    tr_model_family_flow(&c.model, flow, sizeof flow);
    if (strstr(flow, key))
        fail_msg("family flow '%s' names '%s'", flow, key);
    tr_config_free(&c);
}

/* c as tr_config_write writes it holds `want`. */
static void expect_written(const tr_config *c, const char *want)
{
    char *text = tr_t_write(c, NULL);
    if (!strstr(text, want))
        fail_msg("the written config lacks '%s':\n%s", want, text);
    free(text);
}

/* GPT-NeoX (Pythia): a quarter of each head rotated, parallel residual, exact GELU; Falcon-7B
 * (one norm for both branches) and Phi-2 (that, and the output layer's bias) */
static void test_neox_falcon_phi(void **state)
{
    (void)state;
    tr_config c;
    const char *neox = WITH("  position_embedding_type: rope\n  rotary_percent: 0.25\n"
                            "  untie_embeddings_and_output_weights: true\n"
                            "  parallel_residual: true\n  gelu_approximate: none\n");
    assert_int_equal(tr_t_load(neox, NULL, 0, &c), TR_OK);
    assert_int_equal(c.model.parallel_residual, 1);
    assert_string_equal(c.model.gelu_approximate, "none");
    tr_config_free(&c);
    expect_flow(neox, ", parallel_residual: true, gelu_approximate: none");
    expect_flow(WITH("  position_embedding_type: rope\n  num_query_groups: 1\n"
                     "  add_bias_linear: false\n  parallel_residual: true\n"
                     "  parallel_shared_norm: true\n  gelu_approximate: none\n"),
                ", parallel_residual: true, parallel_shared_norm: true, gelu_approximate: none");
    expect_flow(WITH("  position_embedding_type: rope\n  rotary_percent: 0.5\n"
                     "  untie_embeddings_and_output_weights: true\n"
                     "  output_layer_bias: true\n  parallel_residual: true\n"
                     "  parallel_shared_norm: true\n"),
                ", parallel_residual: true, output_layer_bias: true, parallel_shared_norm: true");
    E(WITH("  gelu_approximate: erf\n"), "t.yaml:6:21: ", "tanh, none");
    E(WITH("  parallel_shared_norm: true\n"), "t.yaml:6:3: ",
      "model.parallel_shared_norm is true but model.parallel_residual is false (default); one "
      "norm feeds both branches only of a parallel residual");
    E(WITH("  output_layer_bias: true\n"), "t.yaml:6:3: ",
      "model.output_layer_bias is true but the output layer is the word embedding "
      "(untie_embeddings_and_output_weights false (default)): allowed: output_layer_bias "
      "with untie_embeddings_and_output_weights true");
    E(WITH("  parallel_residual: 2\n"), "t.yaml:6:22: ", "expected a boolean");
    E(WITH("  swiglu: true\n  ffn_hidden_size: 64\n  gelu_approximate: none\n"), "t.yaml:8:3: ",
      "model.gelu_approximate is 'none' but model.swiglu is true (set at t.yaml:6:3); the "
      "SwiGLU MLP has no GELU");
}

/* Gemma: heads of kv_channels wider than hidden / heads, GeGLU, norms scaling by 1 + weight,
 * the embedding multiplied; each switch written back, the contradictions named */
static void test_gemma(void **state)
{
    (void)state;
    tr_config c;
    const char *gemma = WITH("  normalization: RMSNorm\n  position_embedding_type: rope\n"
                             "  geglu: true\n  ffn_hidden_size: 96\n  kv_channels: 24\n"
                             "  apply_layernorm_1p: true\n  embedding_multiplier: 8\n"
                             "  gelu_approximate: none\n  add_bias_linear: false\n");
    const char *ov[] = {"model.hidden_size=66"}; /* not 4 heads' multiple: kv_channels set */
    assert_int_equal(tr_t_load(gemma, ov, 1, &c), TR_OK);
    assert_int_equal(tr_model_head_size(&c.model), 24);
    assert_true(c.model.geglu && c.model.apply_layernorm_1p && c.model.embedding_multiplier == 8);
    tr_model_config mm = c.model;
    mm.ffn_hidden_size = 0, mm.hidden_size = 3072; /* GeGLU's default width: swiglu's 8h/3 */
    assert_int_equal(tr_model_ffn_hidden(&mm), 8192);
    tr_config_free(&c);
    expect_flow(gemma, ", gelu_approximate: none, kv_channels: 24, apply_layernorm_1p: true, "
                       "embedding_multiplier: 8, geglu: true");
    /* without kv_channels, hidden_size must still divide into the heads */
    tr_t_expect(TR_T_REQUIRED, ov, 1, "", "or model.kv_channels set to the head size");
    E(WITH("  swiglu: true\n  geglu: true\n  ffn_hidden_size: 64\n"), "t.yaml:7:3: ",
      "model.geglu and model.swiglu are both true (set at t.yaml:6:3); the gated MLP has one "
      "activation");
    E(WITH("  embedding_multiplier: 0\n"), "t.yaml:6:25: ", "embedding_multiplier");
    E(WITH("  kv_channels: -1\n"), "t.yaml:6:16: ", "kv_channels");
    E(WITH("  position_embedding_type: rope\n  kv_channels: 5\n"), "t.yaml:",
      "model.rotary_percent = 1 of the head size 5 gives 5 rotated dimensions");
}

/* GPT-J: the MLP's biases without the attention's (add_mlp_bias); with add_bias_linear it
 * changes nothing and is not written back, as add_qkv_bias */
static void test_gptj(void **state)
{
    (void)state;
    tr_config c;
    const char *gptj = WITH("  position_embedding_type: rope\n  rotary_percent: 0.5\n"
                            "  untie_embeddings_and_output_weights: true\n"
                            "  output_layer_bias: true\n  parallel_residual: true\n"
                            "  parallel_shared_norm: true\n  add_bias_linear: false\n"
                            "  add_mlp_bias: true\n");
    assert_int_equal(tr_t_load(gptj, NULL, 0, &c), TR_OK);
    assert_true(c.model.add_mlp_bias && !c.model.add_bias_linear && !c.model.add_qkv_bias);
    tr_config_free(&c);
    assert_int_equal(tr_t_load(TR_T_REQUIRED, NULL, 0, &c), TR_OK);
    assert_int_equal(c.model.add_mlp_bias, 0);
    tr_config_free(&c);
    expect_flow(gptj, ", add_bias_linear: false,");
    expect_flow(gptj, ", add_mlp_bias: true, parallel_residual: true");
    const char *ov[] = {"model.add_bias_linear=true"};
    expect_flow_lacks(gptj, ov, 1, "add_mlp_bias");
    E(WITH("  add_mlp_bias: 1.5\n"), "t.yaml:6:17: ", "expected a boolean");
}

/* MPT: LayerNorms without biases (layernorm_bias false, held negated in no_layernorm_bias so a
 * zeroed config has them), written back in the family flow and by tr_config_write; no effect
 * with RMSNorm (not written back then) */
static void test_mpt(void **state)
{
    (void)state;
    tr_config c;
    const char *mpt = WITH("  position_embedding_type: alibi\n  add_bias_linear: false\n"
                           "  gelu_approximate: none\n  layernorm_bias: false\n");
    assert_int_equal(tr_t_load(mpt, NULL, 0, &c), TR_OK);
    assert_true(c.model.no_layernorm_bias && !c.model.add_bias_linear);
    expect_written(&c, "layernorm_bias: false");
    tr_config_free(&c);
    assert_int_equal(tr_t_load(TR_T_REQUIRED, NULL, 0, &c), TR_OK);
    assert_int_equal(c.model.no_layernorm_bias, 0);
    expect_written(&c, "layernorm_bias: true");
    tr_config_free(&c);
    expect_flow(mpt, ", gelu_approximate: none, layernorm_bias: false");
    const char *ov[] = {"model.normalization=RMSNorm"};
    expect_flow_lacks(mpt, ov, 1, "layernorm_bias");
    const char *on[] = {"model.layernorm_bias=true"};
    assert_int_equal(tr_t_load(mpt, on, 1, &c), TR_OK);
    assert_int_equal(c.model.no_layernorm_bias, 0);
    tr_config_free(&c);
    E(WITH("  layernorm_bias: 1.5\n"), "t.yaml:6:19: ", "expected a boolean");
}

/* OPT: GPT-2's switches with the MLP's ReLU (model.relu), loaded, written back (the family
 * flow, tr_config_write), gelu_approximate then left out of the flow; refused with either
 * gated MLP, naming both keys, and as a non-boolean */
static void test_opt(void **state)
{
    (void)state;
    tr_config c;
    const char *opt = WITH("  relu: true\n");
    assert_int_equal(tr_t_load(opt, NULL, 0, &c), TR_OK);
    assert_int_equal(c.model.relu, 1);
    assert_int_equal(tr_model_ffn_hidden(&c.model), 256); /* 4h, as GPT-2's */
    expect_written(&c, "relu: true");
    tr_config_free(&c);
    assert_int_equal(tr_t_load(TR_T_REQUIRED, NULL, 0, &c), TR_OK);
    assert_int_equal(c.model.relu, 0);
    tr_config_free(&c);
    expect_flow_lacks(TR_T_REQUIRED, NULL, 0, "relu");
    expect_flow(opt, ", layernorm_epsilon: 1e-05, relu: true");
    const char *none[] = {"model.gelu_approximate=none"};
    expect_flow_lacks(opt, none, 1, "gelu_approximate");
    const char *on[] = {"model.relu=true"};
    assert_int_equal(tr_t_load(TR_T_REQUIRED, on, 1, &c), TR_OK);
    assert_int_equal(c.model.relu, 1);
    tr_config_free(&c);
    E(WITH("  relu: true\n  swiglu: true\n  ffn_hidden_size: 64\n"), "t.yaml:6:3: ",
      "model.relu and model.swiglu are both true (set at t.yaml:7:3); the MLP has one "
      "activation: allowed: relu with swiglu and geglu false");
    E(WITH("  geglu: true\n  ffn_hidden_size: 64\n  relu: true\n"), "t.yaml:8:3: ",
      "model.relu and model.geglu are both true (set at t.yaml:6:3)");
    E(WITH("  relu: max\n"), "t.yaml:6:9: ", "expected a boolean");
    tr_t_expect(TR_T_REQUIRED, (const char *[]){"model.relu=2"}, 1, "--set model.relu",
                "expected a boolean");
}

/* Phi-3: a Llama's switches with hf_family phi3 (recorded, not computed), written back in the
 * family flow; refused with any other layer */
static void test_phi3(void **state)
{
    (void)state;
    tr_config c;
#define LLAMA_LAYER                                                                            \
    "  normalization: RMSNorm\n  position_embedding_type: rope\n  swiglu: true\n"              \
    "  ffn_hidden_size: 176\n  add_bias_linear: false\n"
    const char *phi3 = WITH(LLAMA_LAYER "  hf_family: phi3\n");
    assert_int_equal(tr_t_load(phi3, NULL, 0, &c), TR_OK);
    assert_string_equal(c.model.hf_family, "phi3");
    expect_written(&c, "hf_family: \"phi3\"");
    tr_config_free(&c);
    assert_int_equal(tr_t_load(TR_T_REQUIRED, NULL, 0, &c), TR_OK);
    assert_string_equal(c.model.hf_family, "auto");
    tr_config_free(&c);
    expect_flow(phi3, ", layernorm_epsilon: 1e-05, rotary_base: 10000, rotary_percent: 1, "
                      "hf_family: phi3");
    expect_flow_lacks(WITH(LLAMA_LAYER), NULL, 0, "hf_family");
    E(WITH("  hf_family: phi3\n"), "t.yaml:6:3: ",
      "model.hf_family is 'phi3' but the model is not a Llama's layer (set at t.yaml:6:3); "
      "allowed: phi3 with normalization RMSNorm, position_embedding_type rope, rotary_percent 1, "
      "swiglu true, add_bias_linear and add_qkv_bias false");
    E(WITH(LLAMA_LAYER "  rotary_percent: 0.5\n  hf_family: phi3\n"), "t.yaml:12:3: ",
      "model.hf_family is 'phi3' but the model is not a Llama's layer");
    E(WITH(LLAMA_LAYER "  add_qkv_bias: true\n  hf_family: phi3\n"), "t.yaml:12:3: ",
      "model.hf_family is 'phi3' but the model is not a Llama's layer");
    E(WITH(LLAMA_LAYER "  hf_family: phi4\n"), "t.yaml:11:14: ",
      "model.hf_family: found 'phi4'; allowed: auto, phi3");
#undef LLAMA_LAYER
}

/* Rope scaling: Llama 3.1's frequencies or linear position interpolation, one at a time, with
 * rope only; written back in the family flow */
static void test_rope_scaling(void **state)
{
    (void)state;
    tr_config c;
    const char *l31 = WITH("  position_embedding_type: rope\n  use_rope_scaling: true\n"
                           "  rope_scaling_factor: 32\n");
    assert_int_equal(tr_t_load(l31, NULL, 0, &c), TR_OK);
    assert_true(c.model.use_rope_scaling && c.model.rope_scaling_factor == 32 &&
                c.model.rope_scaling_low_freq_factor == 1 &&
                c.model.rope_scaling_high_freq_factor == 4 &&
                c.model.rope_scaling_original_max_position_embeddings == 8192);
    tr_config_free(&c);
    expect_flow(l31, ", use_rope_scaling: true, rope_scaling_factor: 32, "
                     "rope_scaling_low_freq_factor: 1, rope_scaling_high_freq_factor: 4, "
                     "rope_scaling_original_max_position_embeddings: 8192");
    expect_flow(WITH("  position_embedding_type: rope\n"
                     "  rotary_seq_len_interpolation_factor: 4\n"),
                ", rotary_seq_len_interpolation_factor: 4");
    E(WITH("  use_rope_scaling: true\n"), "t.yaml:6:3: ",
      "model.use_rope_scaling is set but model.position_embedding_type is 'learned_absolute'");
    E(WITH("  rotary_seq_len_interpolation_factor: 2\n"), "t.yaml:6:3: ",
      "rotary settings need position_embedding_type: rope");
    E(WITH("  position_embedding_type: rope\n  use_rope_scaling: true\n"
           "  rotary_seq_len_interpolation_factor: 2\n"), "t.yaml:7:3: ",
      "one rope scaling at a time");
    E(WITH("  position_embedding_type: rope\n  use_rope_scaling: true\n"
           "  rope_scaling_high_freq_factor: 1\n"), "t.yaml:8:3: ",
      "model.rope_scaling_high_freq_factor = 1 is not above model.rope_scaling_low_freq_factor "
      "= 1 (default)");
    E(WITH("  rope_scaling_factor: 0\n"), "t.yaml:6:24: ", "rope_scaling_factor");
}

static void test_llama_and_bloom(void **state)
{
    (void)state;
    tr_config c;
    const char *llama = WITH("  normalization: RMSNorm\n  position_embedding_type: rope\n"
                             "  rotary_base: 500000\n  swiglu: true\n  ffn_hidden_size: 176\n"
                             "  num_query_groups: 2\n  untie_embeddings_and_output_weights: true\n"
                             "  add_bias_linear: false\n  layernorm_epsilon: 1e-6\n");
    assert_int_equal(tr_t_load(llama, NULL, 0, &c), TR_OK);
    assert_string_equal(c.model.normalization, "RMSNorm");
    assert_int_equal(tr_model_ffn_hidden(&c.model), 176);
    tr_model_config mm = c.model;
    mm.ffn_hidden_size = 0, mm.hidden_size = 4096; /* Megatron's SwiGLU default: 8h/3 -> 10880 */
    assert_int_equal(tr_model_ffn_hidden(&mm), 10880);
    assert_int_equal(c.model.num_query_groups, 2);
    assert_true(c.model.rotary_base == 500000.0 && c.model.layernorm_epsilon == 1e-6);
    /* the resolved config writes and reloads to the same values */
    size_t len;
    char *text = tr_t_write(&c, &len);
    tr_config d;
    assert_int_equal(tr_config_load_string(text, len, "w.yaml", NULL, 0, &d), TR_OK);
    assert_string_equal(d.model.position_embedding_type, "rope");
    assert_int_equal(d.model.swiglu, 1);
    assert_int_equal(d.model.add_bias_linear, 0);
    assert_int_equal(d.model.untie_embeddings_and_output_weights, 1);
    free(text);
    tr_config_free(&d);
    tr_config_free(&c);
    const char *bloom = WITH("  position_embedding_type: alibi\n  embedding_layernorm: true\n");
    const char *ov[] = {"model.num_attention_heads=2"};
    assert_int_equal(tr_t_load(bloom, ov, 1, &c), TR_OK);
    assert_int_equal(c.model.num_query_groups, 2); /* follows the heads after --set */
    assert_int_equal(c.model.embedding_layernorm, 1);
    tr_config_free(&c);
}

static void test_contradictions(void **state)
{
    (void)state;
    E(WITH("  num_query_groups: 3\n"), "t.yaml:6:3: ",
      "model.num_query_groups = 3 does not divide model.num_attention_heads = 4 (set at "
      "t.yaml:4:3)");
    E(WITH("  num_query_groups: 2\n") "parallel:\n  tensor_model_parallel_size: 4\n",
      "t.yaml:14:3: ",
      "parallel.tensor_model_parallel_size = 4 does not divide model.num_query_groups = 2 (set "
      "at t.yaml:6:3); each tensor-parallel rank holds whole query groups");
    E("model:\n  num_layers: 4\n  hidden_size: 64\n  num_attention_heads: 4\n  seq_length: 32\n"
      "  ffn_hidden_size: 102\n" TR_T_TRAINING TR_T_DATA "parallel:\n  tensor_model_parallel_size: 4\n",
      "t.yaml:14:3: ",
      "parallel.tensor_model_parallel_size = 4 does not divide the MLP width "
      "model.ffn_hidden_size = 102 (set at t.yaml:6:3)");
    const char *small[] = {"model.hidden_size=16"};
    tr_t_expect(WITH("  swiglu: true\n"), small, 1, "t.yaml:6:3: ",
                "model.swiglu with hidden_size 16 gives Megatron's default MLP width int(8h/3 / "
                "64) x 64 = 0; set model.ffn_hidden_size");
    E(WITH("  rotary_base: 500000\n"), "t.yaml:6:3: ",
      "model.rotary_base is set but model.position_embedding_type is 'learned_absolute' "
      "(default); rotary settings need position_embedding_type: rope");
    E(WITH("  position_embedding_type: alibi\n  rotary_percent: 0.5\n"), "t.yaml:7:3: ",
      "model.rotary_percent is set but model.position_embedding_type is 'alibi' (set at "
      "t.yaml:6:3)");
    E(WITH("  position_embedding_type: rope\n  rotary_percent: 0.3\n"), "t.yaml:7:3: ",
      "model.rotary_percent = 0.3 of the head size 16 gives 4.8 rotated dimensions; allowed: an "
      "even whole number >= 2");
    E(WITH("  position_embedding_type: rope\n  rotary_percent: 0\n"), "t.yaml:7:19: ",
      "model.rotary_percent");
    E(WITH("  position_embedding_type: absolute\n"), "t.yaml:6:28: ",
      "learned_absolute, rope, alibi");
    E(WITH("  normalization: rmsnorm\n"), "t.yaml:6:18: ", "LayerNorm, RMSNorm");
    E(WITH("  swiglu: 1\n"), "t.yaml:6:11: ", "expected a boolean");
    const char *ov[] = {"model.num_query_groups=8"};
    tr_t_expect(TR_T_REQUIRED, ov, 1, "--set model.num_query_groups", "does not divide");
}

/* Mixture of experts: Mixtral's keys load and flow, each contradiction and what is not built
 * named with its place */
static void test_moe(void **state)
{
    (void)state;
    tr_config c;
    const char *mixtral = WITH("  normalization: RMSNorm\n  position_embedding_type: rope\n"
                               "  swiglu: true\n  num_experts: 8\n  moe_router_topk: 2\n"
                               "  moe_aux_loss_coeff: 0.01\n");
    assert_int_equal(tr_t_load(mixtral, NULL, 0, &c), TR_OK);
    assert_true(c.model.num_experts == 8 && c.model.moe_router_topk == 2);
    assert_true(c.model.moe_aux_loss_coeff == 0.01 && c.model.moe_z_loss_coeff == 0);
    assert_string_equal(c.model.moe_router_load_balancing_type, "aux_loss");
    assert_int_equal(c.parallel.expert_model_parallel_size, 1);
    tr_config_free(&c);
    expect_flow(mixtral, ", num_experts: 8, moe_router_topk: 2, moe_router_pre_softmax: false, "
                         "moe_router_load_balancing_type: aux_loss, moe_aux_loss_coeff: 0.01, "
                         "moe_z_loss_coeff: 0");
    expect_flow_lacks(TR_T_REQUIRED, NULL, 0, "num_experts");
    E(WITH("  num_experts: 4\n  moe_router_topk: 5\n"), "t.yaml:7:3: ",
      "model.moe_router_topk = 5 is more than model.num_experts = 4 (set at t.yaml:6:3); "
      "allowed: 1 .. num_experts");
    E(WITH("  num_experts: 4\n  moe_router_topk: 1\n"), "t.yaml:7:3: ",
      "model.moe_router_topk = 1 with model.moe_router_pre_softmax false");
    E(WITH("  num_experts: 4\n  moe_aux_loss_coeff: 0.1\n"
           "  moe_router_load_balancing_type: none\n"), "t.yaml:7:3: ",
      "model.moe_aux_loss_coeff = 0.1 with model.moe_router_load_balancing_type none (set at "
      "t.yaml:8:3)");
    E(WITH("  moe_router_topk: 1\n"), "t.yaml:6:3: ",
      "model.moe_router_topk is set but model.num_experts is 0 (default)");
    E(WITH("  moe_z_loss_coeff: 0.001\n"), "t.yaml:6:3: ",
      "model.moe_z_loss_coeff is set but model.num_experts is 0 (default)");
    E(WITH("  moe_router_load_balancing_type: sinkhorn\n"), "t.yaml:6:35: ", "aux_loss, none");
    E(WITH("  num_experts: 4\n  moe_shared_expert_intermediate_size: 64\n"), "t.yaml:7:3: ",
      "model.moe_shared_expert_intermediate_size = 64: shared experts are not built");
    E(WITH("  num_experts: 4\n  parallel_residual: true\n"), "t.yaml:7:3: ",
      "model.parallel_residual with model.num_experts 4 is not built");
    /* expert parallelism: E and the data-parallel size split over EP ranks (the latter checked
     * at world creation); CP and CUDA with it refused, naming both keys; ZeRO-3 loads */
    const char *ep2[] = {"parallel.expert_model_parallel_size=2"};
    assert_int_equal(tr_t_load(WITH("  num_experts: 4\n"), ep2, 1, &c), TR_OK);
    assert_int_equal(c.parallel.expert_model_parallel_size, 2);
    tr_config_free(&c);
    E(WITH("  num_experts: 6\n") "parallel:\n  expert_model_parallel_size: 4\n", "t.yaml:14:3: ",
      "parallel.expert_model_parallel_size = 4 does not divide model.num_experts = 6 (set at "
      "t.yaml:6:3): each EP rank runs E / EP of the experts; allowed: a divisor of num_experts");
    E(TR_T_REQUIRED "parallel:\n  expert_model_parallel_size: 2\n", "t.yaml:13:3: ",
      "parallel.expert_model_parallel_size = 2 needs experts but model.num_experts is 0 "
      "(default); allowed: 1 for a dense model");
    E(WITH("  num_experts: 4\n") "parallel:\n  expert_model_parallel_size: 2\n"
      "  context_parallel_size: 2\n", "t.yaml:14:3: ",
      "parallel.expert_model_parallel_size = 2 with parallel.context_parallel_size = 2 is not "
      "built");
    const char *ep_zero3[] = {"parallel.expert_model_parallel_size=2", "parallel.zero_stage=3"};
    assert_int_equal(tr_t_load(WITH("  num_experts: 4\n"), ep_zero3, 2, &c), TR_OK);
    tr_config_free(&c);
    const char *ep_cuda[] = {"parallel.expert_model_parallel_size=2", "training.device=cuda"};
    tr_t_expect(WITH("  num_experts: 4\n"), ep_cuda, 2, "",
                "parallel.expert_model_parallel_size = 2 with training.device cuda is not built");
    E(WITH("  num_experts: 4\n") "finetune:\n  lora:\n    rank: 4\n", "t.yaml:15:5: ",
      "LoRA fine-tuning (finetune.lora.rank 4) of a mixture of experts (model.num_experts 4) is "
      "not built");
    /* the CUDA backend has the MoE ops (kernels/cuda/moe.cu): a cuda config with experts loads */
    const char *cuda[] = {"training.device=cuda"};
    tr_config cc;
    assert_int_equal(tr_t_load(WITH("  num_experts: 4\n"), cuda, 1, &cc), TR_OK);
    assert_int_equal(cc.model.num_experts, 4);
    tr_config_free(&cc);
    E(WITH("  num_experts: 1025\n"), "t.yaml:6:16: ", "model.num_experts");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_are_gpt2),
        cmocka_unit_test(test_llama_and_bloom),
        cmocka_unit_test(test_neox_falcon_phi),
        cmocka_unit_test(test_gemma),
        cmocka_unit_test(test_gptj),
        cmocka_unit_test(test_mpt),
        cmocka_unit_test(test_opt),
        cmocka_unit_test(test_phi3),
        cmocka_unit_test(test_rope_scaling),
        cmocka_unit_test(test_contradictions),
        cmocka_unit_test(test_moe),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
