/* The `cluster` section: presets, overrides, what is missing, impossible values (yaml/'s
 * checks of each key and plan/'s of the whole). */
#include "plan_test.h"

#define BASE                                                                                   \
    "model: {num_layers: 4, hidden_size: 64, num_attention_heads: 4, seq_length: 32}\n"        \
    "training: {micro_batch_size: 2, train_iters: 10, lr: 3.0e-4}\n"                           \
    "data: {data_path: x}\n"

static int from_text(const char *text, tr_plan_cluster *c)
{
    tr_config cfg;
    int rc = tr_config_load_string(text, strlen(text), "t.yaml", NULL, 0, &cfg);
    if (rc)
        return rc;
    rc = tr_plan_cluster_from_config(&cfg, c);
    tr_config_free(&cfg);
    return rc;
}

static void test_presets(void **state)
{
    (void)state;
    tr_plan_cluster c;
    assert_int_equal(tr_plan_cluster_preset("a100-80gb", &c), TR_OK);
    assert_int_equal(c.gpus_per_node, 8);
    assert_close(c.peak_flops, 312e12, 0);
    assert_close(c.memory_bytes, 80 * GIB, 0);
    assert_close(c.intra_bw, 300e9, 0);   /* NVLink 600 GB/s total */
    assert_close(c.inter_bw, 200e9, 0);   /* 8 x 200 Gb/s */
    assert_int_equal(tr_plan_cluster_preset("h100-80gb", &c), TR_OK);
    assert_close(c.peak_flops, 989e12, 0);
    assert_close(c.intra_bw, 450e9, 0);   /* 900 GB/s total */
    assert_close(c.inter_bw, 400e9, 0);   /* 8 x 400 Gb/s */
    assert_int_equal(tr_plan_cluster_preset("h200", &c), TR_OK);
    assert_true(c.memory_bytes > 140 * GIB);
    assert_int_equal(tr_plan_cluster_preset("cpu-host", &c), TR_OK);
    assert_int_equal(c.device, TR_PLAN_DEVICE_CPU);
    assert_close(c.peak_flops, 240e9, 0);
    assert_true(c.intra_bw >= 1e9 && c.intra_bw <= 10e9);
    for (int i = 0; tr_plan_preset_names[i]; i++)
        assert_int_equal(tr_plan_cluster_preset(tr_plan_preset_names[i], &c), TR_OK);
    assert_int_equal(tr_plan_cluster_preset("v100", &c), TR_ERR_CONFIG);
    assert_msg("unknown cluster preset 'v100'; allowed: a100-80gb, h100-80gb, h200, cpu-host");
}

static void test_from_config(void **state)
{
    (void)state;
    tr_plan_cluster c;
    assert_int_equal(from_text(BASE "cluster: {preset: h100-80gb, nodes: 16}\n", &c), TR_OK);
    assert_string_equal(c.preset, "h100-80gb");
    assert_int_equal(c.nodes, 16);
    assert_false(c.overridden); /* the node count is not a change of hardware */
    assert_int_equal(from_text(BASE "cluster:\n  preset: a100-80gb\n  peak_tflops: 400\n"
                                    "  gemm_efficiency: 0.45\n  inter_node_latency_us: 3\n",
                               &c),
                     TR_OK);
    assert_true(c.overridden);
    assert_close(c.peak_flops, 400e12, 1e-15);
    assert_close(c.gemm_efficiency, 0.45, 0);
    assert_close(c.inter_latency, 3e-6, 1e-12);
    assert_close(c.intra_bw, 300e9, 0); /* untouched keys keep the preset's value */
    assert_int_equal(c.nodes, 1);
    /* Setting a preset's own value is no change. */
    assert_int_equal(from_text(BASE "cluster: {preset: a100-80gb, gpus_per_node: 8}\n", &c),
                     TR_OK);
    assert_false(c.overridden);
    assert_int_equal(from_text(BASE "cluster: {preset: a100-80gb, device: cpu}\n", &c), TR_OK);
    assert_int_equal(c.device, TR_PLAN_DEVICE_CPU);
    assert_true(c.overridden);
    /* Everything by hand, no preset. */
    assert_int_equal(from_text(BASE "cluster: {nodes: 2, gpus_per_node: 4, gpu_memory_gib: 40,\n"
                                    "  peak_tflops: 100, intra_node_gbytes_per_s: 50,\n"
                                    "  inter_node_gbytes_per_s: 25}\n",
                               &c),
                     TR_OK);
    assert_string_equal(c.preset, "custom");
    assert_int_equal(c.device, TR_PLAN_DEVICE_GPU);
    assert_close(c.memory_bytes, 40 * GIB, 0);
    assert_close(c.gemm_efficiency, 0.5, 0);
}

static void test_errors(void **state)
{
    (void)state;
    tr_plan_cluster c;
    /* No cluster at all. */
    assert_int_equal(from_text(BASE, &c), TR_ERR_CONFIG);
    assert_msg("t.yaml: cluster.gpus_per_node is not set and no preset gives it; set "
               "cluster.preset (a100-80gb, h100-80gb, h200, cpu-host) or cluster.gpus_per_node");
    /* A custom cluster missing one figure names it, at the section. */
    assert_int_equal(from_text(BASE "cluster:\n  gpus_per_node: 4\n  gpu_memory_gib: 40\n"
                                    "  peak_tflops: 100\n  intra_node_gbytes_per_s: 50\n",
                               &c),
                     TR_ERR_CONFIG);
    assert_msg("t.yaml:4:1: cluster.inter_node_gbytes_per_s is not set and no preset gives it");
    /* Reserved memory that leaves nothing. */
    assert_int_equal(from_text(BASE "cluster:\n  preset: a100-80gb\n  reserved_memory_gib: 80\n",
                               &c),
                     TR_ERR_CONFIG);
    assert_msg("t.yaml:6:3: cluster.reserved_memory_gib = 80 is not less than the memory of a GPU "
               "(80 GiB); allowed: reserved < memory");
    /* yaml/ checks each key: names, ranges, types. */
    assert_int_equal(from_text(BASE "cluster: {preset: a200}\n", &c), TR_ERR_CONFIG);
    assert_msg("t.yaml:4:19: cluster.preset: found 'a200'; allowed: none, ");
    assert_msg("a100-80gb");
    assert_int_equal(from_text(BASE "cluster: {preset: h200, gemm_efficiency: 5}\n", &c),
                     TR_ERR_CONFIG);
    assert_msg("cluster.gemm_efficiency");
    assert_int_equal(from_text(BASE "cluster: {nodes: -1}\n", &c), TR_ERR_CONFIG);
    assert_msg("cluster.nodes");
    assert_int_equal(from_text(BASE "cluster: {preset: h200, peak_tflops: lots}\n", &c),
                     TR_ERR_CONFIG);
    assert_msg("cluster.peak_tflops");
    assert_int_equal(from_text(BASE "cluster: {preset: h200, nvlink: 900}\n", &c), TR_ERR_CONFIG);
    assert_msg("unknown key 'nvlink' in section 'cluster'");
    assert_int_equal(from_text(BASE "cluster: {preset: h200, device: tpu}\n", &c), TR_ERR_CONFIG);
    assert_msg("auto, gpu, cpu");
}

static void test_recompute_key(void **state)
{
    (void)state;
    tr_config cfg;
    const char *sel[] = {"training.recompute=selective"};
    tr_t_load_text(BASE, sel, 1, &cfg);
    assert_string_equal(cfg.training.recompute, "selective");
    tr_config_free(&cfg);
    const char *bad[] = {"training.recompute=some"};
    assert_int_equal(tr_config_load_string(BASE, strlen(BASE), "t.yaml", bad, 1, &cfg),
                     TR_ERR_CONFIG);
    assert_msg("none, selective, full");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_presets),
        cmocka_unit_test(test_from_config),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_recompute_key),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
