/* plan/ formulas on hand-computed cases: model state bytes (Megatron's distributed-optimizer
 * table), Korthikanti's activation bytes, Narayanan's FLOPs, parameter counts, ring
 * collectives, bucketed DP overlap. */
#include "plan_test.h"

#include "model/gpt.h"

static void test_state_bytes(void **state)
{
    (void)state;
    double w, g, o;
    /* Megatron docs (distrib_optimizer.md): bf16 params + fp32 grads: 18 bytes/param, with
     * the distributed optimizer 6 + 12/d; fp32 params + grads: 16, and 8 + 8/d. */
    tr_plan_state_bytes(1, 0, 8, &w, &g, &o);
    assert_close(w + g + o, 18.0, 0);
    assert_close(w, 2.0, 0);
    assert_close(g, 4.0, 0);
    tr_plan_state_bytes(1, 1, 8, &w, &g, &o);
    assert_close(w + g + o, 6.0 + 12.0 / 8, 0);
    tr_plan_state_bytes(1, 1, 1, &w, &g, &o); /* nothing to shard over */
    assert_close(w + g + o, 18.0, 0);
    tr_plan_state_bytes(0, 0, 4, &w, &g, &o);
    assert_close(w + g + o, 16.0, 0);
    tr_plan_state_bytes(0, 1, 4, &w, &g, &o);
    assert_close(w + g + o, 8.0 + 8.0 / 4, 0);
}

static void test_activation_bytes(void **state)
{
    (void)state;
    /* GPT-3 175B layer, s 2048, b 1, h 12288, a 96: sbh = 25165824, 5as/h = 80. */
    const double sbh = 2048.0 * 12288;
    const tr_plan_recompute N = TR_PLAN_RECOMPUTE_NONE, S = TR_PLAN_RECOMPUTE_SELECTIVE,
                            F = TR_PLAN_RECOMPUTE_FULL;
    assert_close(tr_plan_layer_activation_bytes(2048, 1, 12288, 96, 1, 0, N, 1), sbh * 114, 1e-15);
    assert_close(tr_plan_layer_activation_bytes(2048, 1, 12288, 96, 8, 0, N, 1), sbh * 23, 1e-15);
    assert_close(tr_plan_layer_activation_bytes(2048, 1, 12288, 96, 8, 1, N, 1), sbh * 14.25,
                 1e-15);
    assert_close(tr_plan_layer_activation_bytes(2048, 1, 12288, 96, 8, 0, S, 1), sbh * 13, 1e-15);
    assert_close(tr_plan_layer_activation_bytes(2048, 1, 12288, 96, 8, 1, S, 1), sbh * 4.25,
                 1e-15);
    assert_close(tr_plan_layer_activation_bytes(2048, 1, 12288, 96, 8, 0, F, 1), sbh * 2, 1e-15);
    assert_close(tr_plan_layer_activation_bytes(2048, 1, 12288, 96, 8, 1, F, 1), sbh * 0.25,
                 1e-15);
    /* SP without TP changes nothing; fp32 doubles; b scales linearly. */
    assert_close(tr_plan_layer_activation_bytes(2048, 1, 12288, 96, 1, 1, N, 1), sbh * 114, 1e-15);
    assert_close(tr_plan_layer_activation_bytes(2048, 1, 12288, 96, 8, 0, N, 0), sbh * 46, 1e-15);
    assert_close(tr_plan_layer_activation_bytes(2048, 4, 12288, 96, 8, 0, N, 1), 4 * sbh * 23,
                 1e-15);
}

/* Llama-3-70B's layer: GQA's qkv (h + 2 x 8 groups x 128), SwiGLU's three matrices of
 * width 28672: 855,638,016 matrix parameters, 2 FLOPs each per token, plus attention. */
static void test_family_flops(void **state)
{
    (void)state;
    tr_model_config m = {.num_layers = 80, .hidden_size = 8192, .num_attention_heads = 64,
                         .num_query_groups = 8, .seq_length = 8192,
                         .max_position_embeddings = 8192, .vocab_size = 128256,
                         .make_vocab_size_divisible_by = 128, .normalization = "RMSNorm",
                         .position_embedding_type = "rope", .swiglu = 1,
                         .ffn_hidden_size = 28672, .untie_embeddings_and_output_weights = 1};
    double per_layer = 8192.0 * (10240 + 8192 + 57344 + 28672);
    assert_close(per_layer, 855638016.0, 0);
    assert_close(tr_plan_layer_forward_flops_model(&m, 8192, 1),
                 2 * 8192.0 * per_layer + 4.0 * 8192 * 8192.0 * 8192, 1e-15);
    /* parameters: 80 layers (matrices and two RMSNorm weights), embedding, final norm,
     * untied output layer: 70.55B with the real vocabulary */
    assert_close(tr_plan_model_params(&m, 128256),
                 80 * (per_layer + 2 * 8192.0) + 2 * 128256 * 8192.0 + 8192, 1e-15);
    /* GPT-2's switches through the family path: the closed forms */
    tr_model_config g = {.num_layers = 2, .hidden_size = 64, .num_attention_heads = 4,
                         .seq_length = 16, .max_position_embeddings = 16, .vocab_size = 100,
                         .normalization = "LayerNorm", .position_embedding_type =
                         "learned_absolute", .num_query_groups = 4, .add_bias_linear = 1};
    assert_close(tr_plan_layer_forward_flops_model(&g, 16, 2), tr_plan_layer_forward_flops(16, 2, 64),
                 1e-15);
}

static void test_flops(void **state)
{
    (void)state;
    /* One layer: 24bsh^2 + 4bs^2h. */
    assert_close(tr_plan_layer_forward_flops(2048, 1, 12288),
                 24.0 * 2048 * 12288.0 * 12288 + 4.0 * 2048 * 2048.0 * 12288, 1e-15);
    assert_close(tr_plan_layer_forward_flops(16, 2, 8), 24.0 * 2 * 16 * 64 + 4.0 * 2 * 256 * 8,
                 1e-15);
    /* Narayanan et al.: per step with full recompute 96 B s l h^2 (1 + s/6h + V/16lh); without
     * 72 B s l h^2 (1 + s/6h + V/12lh). Bloom's shape. */
    tr_model_config m = {.num_layers = 70, .hidden_size = 14336, .num_attention_heads = 112,
                         .seq_length = 2048, .max_position_embeddings = 2048,
                         .vocab_size = 250880, .make_vocab_size_divisible_by = 128};
    double B = 2048, s = 2048, l = 70, h = 14336, V = 250880;
    double full = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
    double model = 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h));
    assert_close(tr_plan_hardware_flops(&m, 250880, 2048, TR_PLAN_RECOMPUTE_FULL), full, 1e-12);
    assert_close(tr_plan_model_flops(&m, 250880, 2048), model, 1e-12);
    assert_close(tr_plan_hardware_flops(&m, 250880, 2048, TR_PLAN_RECOMPUTE_NONE), model, 1e-12);
    assert_close(tr_plan_hardware_flops(&m, 250880, 2048, TR_PLAN_RECOMPUTE_SELECTIVE),
                 model + l * 4 * B * s * s * h, 1e-12);
    /* Bloom's step: 6.02e18 FLOPs, 4.19M tokens. */
    assert_close(full, 6.0224e18, 1e-3);
}

static void test_params(void **state)
{
    (void)state;
    tr_model_config m = {.num_layers = 70, .hidden_size = 14336, .num_attention_heads = 112,
                         .seq_length = 2048, .max_position_embeddings = 2048,
                         .vocab_size = 250880, .make_vocab_size_divisible_by = 128};
    double h = 14336;
    double whole = 70 * (12 * h * h + 13 * h) + 250880 * h + 2048 * h + 2 * h;
    assert_close(tr_plan_model_params(&m, 250880), whole, 1e-15);
    assert_close(whole, 176.25e9, 1e-3); /* "176B" */
    /* TP 4, PP 12: a middle stage of 6 layers; the first adds its embedding shard and the
     * positions; the last the final LN and its copy of the embedding shard. */
    double layer4 = 12 * h * h / 4 + 7 * h / 4 + 6 * h;
    assert_close(tr_plan_stage_params(&m, 250880, 4, 12, 5, 6), 6 * layer4, 1e-15);
    assert_close(tr_plan_stage_params(&m, 250880, 4, 12, 0, 5),
                 5 * layer4 + 250880 * h / 4 + 2048 * h, 1e-15);
    assert_close(tr_plan_stage_params(&m, 250880, 4, 12, 11, 5),
                 5 * layer4 + 250880 * h / 4 + 2 * h, 1e-15);
    /* Padding (model/'s rule, which the planner calls): to a multiple of 128 x TP; a
     * padded size beyond an int is 0. */
    tr_model_config g = {.vocab_size = 50257, .make_vocab_size_divisible_by = 128};
    assert_int_equal(tr_gpt_padded_vocab(&g, 1), 50304);
    assert_int_equal(tr_gpt_padded_vocab(&g, 8), 51200);
    assert_int_equal(tr_gpt_padded_vocab(&m, 4), 250880);
    tr_model_config huge = {.vocab_size = 1 << 30, .make_vocab_size_divisible_by = 65536};
    assert_int_equal(tr_gpt_padded_vocab(&huge, 65536), 0);
}

static void test_collectives(void **state)
{
    (void)state;
    assert_close(tr_plan_allreduce_s(1e9, 4, 1e9, 0), 1.5, 1e-15);
    assert_close(tr_plan_allreduce_s(1e9, 4, 1e9, 1e-5), 1.5 + 6e-5, 1e-15);
    assert_close(tr_plan_reduce_scatter_s(1e9, 4, 1e9, 1e-5), 0.75 + 3e-5, 1e-15);
    assert_close(tr_plan_allgather_s(8e9, 8, 2e9, 0), 3.5, 1e-15);
    assert_close(tr_plan_allreduce_s(1e9, 2, 1e9, 0), 1.0, 1e-15);
    assert_true(tr_plan_allreduce_s(1e9, 1, 1e9, 1) == 0);
    assert_true(tr_plan_reduce_scatter_s(0, 8, 1e9, 1) == 0);
}

static void test_dp_overlap(void **state)
{
    (void)state;
    /* 4 buckets of 1 s, ready at 2, 4, 6, 8 s of an 8 s backward: the last ends at 9. */
    assert_close(tr_plan_dp_exposed_s(1, 4, 8, 1), 1.0, 1e-15);
    /* A 1 s backward: bucket 1 ready at 0.25, then 4 buckets back to back: 4.25 - 1. */
    assert_close(tr_plan_dp_exposed_s(1, 4, 1, 1), 3.25, 1e-15);
    /* Without overlap everything is exposed. */
    assert_close(tr_plan_dp_exposed_s(1, 4, 8, 0), 4.0, 1e-15);
    /* Small buckets: only the last one shows. */
    assert_close(tr_plan_dp_exposed_s(0.1, 4, 8, 1), 0.1, 1e-12);
    assert_close(tr_plan_dp_exposed_s(1, 1, 5, 1), 1.0, 1e-15);
    assert_true(tr_plan_dp_exposed_s(0, 4, 8, 1) == 0);
}

static void test_names(void **state)
{
    (void)state;
    tr_plan_recompute r;
    assert_int_equal(tr_plan_recompute_parse("selective", &r), TR_OK);
    assert_int_equal(r, TR_PLAN_RECOMPUTE_SELECTIVE);
    assert_int_equal(tr_plan_recompute_parse("full", &r), TR_OK);
    assert_int_equal(r, TR_PLAN_RECOMPUTE_FULL);
    assert_int_equal(tr_plan_recompute_parse("partial", &r), TR_ERR_CONFIG);
    assert_msg("unknown recompute mode 'partial'; allowed: none, selective, full");
    assert_int_equal(tr_plan_recompute_parse(NULL, &r), TR_ERR_CONFIG);
    assert_string_equal(tr_plan_recompute_name(TR_PLAN_RECOMPUTE_NONE), "none");
    assert_string_equal(tr_plan_link_name(TR_PLAN_LINK_INTER), "inter-node");
    assert_string_equal(tr_plan_link_name(TR_PLAN_LINK_INTRA), "intra-node");
    tr_plan_layout l = {.tp = 4, .pp = 12, .dp = 8, .micro_batch = 2,
                        .recompute = TR_PLAN_RECOMPUTE_FULL, .distributed_optimizer = 1};
    char buf[96];
    tr_plan_layout_label(&l, buf, sizeof buf);
    assert_string_equal(buf, "TP4 PP12 DP8 mb2 full zero1");
    l.micro_batch = 0;
    tr_plan_layout_label(&l, buf, sizeof buf);
    assert_string_equal(buf, "TP4 PP12 DP8 (any micro-batch)");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_state_bytes), cmocka_unit_test(test_activation_bytes),
        cmocka_unit_test(test_flops),       cmocka_unit_test(test_params),
        cmocka_unit_test(test_family_flops),
        cmocka_unit_test(test_collectives), cmocka_unit_test(test_dp_overlap),
        cmocka_unit_test(test_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
