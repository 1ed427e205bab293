/* The planner's dropout on trident's kernels (runtime trident, a GPU preset, bf16): the Philox
 * 4x32-10 draws (core/philox.h: one block decides 4 elements) and the dropout kernels:
 *  - one hidden-dropout kernel: the slower of its 8 bytes an element and its blocks at the
 *    device's int_ops, plus an overhead (a made-up device where either side is the slower);
 *  - hidden dropout: a layer's element-wise part grows by 2 kernels forward (and the 2
 *    residual adds tp 1 otherwise fuses into its GEMMs) and 2 backward, the first stage's
 *    embedding part by one each way, counted by hand on a small model on an H100; the memory
 *    by the gradient's scratch (N h floats) alone;
 *  - attention dropout: the fused attention's part grows by the causal half's blocks once
 *    forward and twice backward (by hand: int_ops 0 against the preset's), and its bf16
 *    storage goes (the projection converts its fp32 input again);
 *  - --dropout is both; the flat model (cpu-host) and Megatron's runtime are as before. */
#include "plan/plan_internal.h"
#include "plan_test.h"

/* 4 layers, h 1024, 16 heads, s 1024, micro-batches of 4 (T = 4096 token rows), 2 of them on
 * one H100, bf16, runtime trident */
#define SMALL_YAML                                                                             \
    "model: {num_layers: 4, hidden_size: 1024, num_attention_heads: 16, seq_length: 1024,\n"   \
    "        max_position_embeddings: 1024, vocab_size: 32000}\n"                              \
    "training: {micro_batch_size: 4, global_batch_size: 8, train_iters: 10, lr: 1e-4,\n"       \
    "           precision: bf16}\n"                                                            \
    "data: {data_path: x}\n"                                                                   \
    "cluster: {preset: h100-80gb, nodes: 1, gpus_per_node: 1}\n"

#define PART(e, k) ((e)->parts[TR_PLAN_PART_##k])

/* the config (with sets) explained on its cluster, int_ops replaced when >= 0 */
static void explain(const char *const *sets, int n, int dropout_flag, double int_ops,
                    tr_plan_result *r, tr_plan_explain *e)
{
    tr_config cfg;
    tr_t_load_text(SMALL_YAML, sets, n, &cfg);
    tr_plan_cluster c;
    assert_int_equal(tr_plan_cluster_from_config(&cfg, &c), TR_OK);
    if (int_ops >= 0)
        c.int_ops = int_ops;
    tr_plan_layout L;
    assert_int_equal(tr_plan_layout_from_config(&cfg, 1, &L), TR_OK);
    L.dropout |= dropout_flag;
    assert_int_equal(tr_plan_explain_layout(&cfg, &L, 1, &c, 0, r, e), TR_OK);
    tr_config_free(&cfg);
}

static void test_kernel(void **state)
{
    (void)state;
    tr_plan_cluster c = {.device = TR_PLAN_DEVICE_GPU, .sms = 1, .hbm_bw = 1e12,
                         .hbm_efficiency = 1, .kernel_overhead_s = 1e-6, .int_ops = 1e12};
    /* 4e6 elements: 32 MB at 1 TB/s = 32 us; 1e6 blocks x 90 operations at 1e12/s = 90 us */
    assert_close(plan_trident_dropout_s(&c, 4e6), 90e-6 + 1e-6, 1e-12);
    assert_close(plan_philox_s(&c, 1e6), 90e-6, 1e-12);
    c.int_ops = 1e13; /* 9 us: the bytes decide */
    assert_close(plan_trident_dropout_s(&c, 4e6), 32e-6 + 1e-6, 1e-12);
    c.int_ops = 0; /* no integer rate: the bytes alone */
    assert_close(plan_trident_dropout_s(&c, 4e6), 32e-6 + 1e-6, 1e-12);
    assert_true(plan_philox_s(&c, 1e6) == 0);
    /* the presets: 64 INT32 lanes an SM at the dense peak's clock */
    tr_plan_cluster h;
    assert_int_equal(tr_plan_cluster_preset("h100-80gb", &h), TR_OK);
    assert_close(h.int_ops, 15.45984e12, 1e-12);
    assert_int_equal(tr_plan_cluster_preset("a100-80gb", &h), TR_OK);
    assert_close(h.int_ops, 9.74592e12, 1e-12);
}

static void test_hidden(void **state)
{
    (void)state;
    tr_plan_result *r = calloc(1, sizeof *r), *r0 = calloc(1, sizeof *r0);
    tr_plan_explain e, e0;
    const char *hidden[] = {"model.hidden_dropout=0.1"};
    explain(hidden, 1, 0, -1, r, &e);
    explain(NULL, 0, 0, -1, r0, &e0);
    tr_plan_cluster c;
    assert_int_equal(tr_plan_cluster_preset("h100-80gb", &c), TR_OK);
    /* a kernel on n = T h = 4096 x 1024 fp32 elements: 8 n bytes at 3350 GB/s x 0.7 = 14.3
     * us, slower than its n / 4 blocks (6.1 us): 17.3 us with the overhead; a residual add
     * 12 n bytes */
    double n = 4096.0 * 1024, rate = 3350e9 * 0.7;
    assert_true(8 * n / rate > n / 4 * 90 / c.int_ops);
    double drop = 8 * n / rate + 3e-6, add = 12 * n / rate + 3e-6;
    /* 2 micro-batches x 4 layers x (2 kernels + 2 adds forward, 2 kernels backward) */
    assert_close(PART(&e, ELEMENTWISE) - PART(&e0, ELEMENTWISE), 2 * 4 * (4 * drop + 2 * add),
                 1e-9);
    /* the embedding's: one kernel each way, each micro-batch */
    assert_close(PART(&e, EMBEDDING) - PART(&e0, EMBEDDING), 2 * 2 * drop, 1e-9);
    assert_true(PART(&e, ATTENTION) == PART(&e0, ATTENTION));
    /* memory: the masks are never stored; the gradient's dropout scratch (n floats) */
    assert_true(r->memory.activations - r0->memory.activations == 4 * n);
    tr_plan_explain_free(&e);
    tr_plan_explain_free(&e0);
    free(r);
    free(r0);
}

static void test_attention(void **state)
{
    (void)state;
    tr_plan_result *r = calloc(1, sizeof *r), *r0 = calloc(1, sizeof *r0);
    tr_plan_explain e, e0, e_none;
    const char *attn[] = {"model.attention_dropout=0.1"};
    explain(attn, 1, 0, -1, r, &e);
    explain(attn, 1, 0, 0, r0, &e0); /* the Philox draws not timed */
    /* the causal half of 4 x 16 heads' 1024 x 1024 scores, a block a 4: 8388608 blocks, 90
     * operations each at 132 SMs x 64 lanes x 1.83 GHz, once forward and twice backward; 2
     * micro-batches x 4 layers */
    double blocks = 4.0 * 16 * 1024 * 1024 / 2 / 4;
    assert_close(PART(&e, ATTENTION) - PART(&e0, ATTENTION),
                 2 * 4 * 3 * blocks * 90 / (132 * 64 * 1.83e9), 1e-9);
    assert_true(PART(&e, ELEMENTWISE) == PART(&e0, ELEMENTWISE));
    /* no bf16 storage of the attention's output and qkv: the projection converts its input */
    explain(NULL, 0, 0, -1, r0, &e_none);
    assert_true(PART(&e, GEMM) > PART(&e_none, GEMM));
    assert_true(r->memory.activations > r0->memory.activations);
    tr_plan_explain_free(&e);
    tr_plan_explain_free(&e0);
    tr_plan_explain_free(&e_none);
    free(r);
    free(r0);
}

static void test_flag_and_others(void **state)
{
    (void)state;
    tr_plan_result *r = calloc(1, sizeof *r), *r0 = calloc(1, sizeof *r0);
    tr_plan_explain e, e0;
    /* --dropout: both */
    const char *both[] = {"model.hidden_dropout=0.1", "model.attention_dropout=0.1"};
    explain(both, 2, 0, -1, r, &e);
    explain(NULL, 0, 1, -1, r0, &e0);
    for (int k = 0; k < TR_PLAN_PARTS; k++)
        assert_true(e.parts[k] == e0.parts[k]);
    tr_plan_explain_free(&e);
    tr_plan_explain_free(&e0);
    /* the flat model times no element-wise work (dropout or not); Megatron's runtime its own
     * masks whatever p, as before (the config's p and the flag alike) */
    static const char *const other[][3] = {
        {"cluster.preset=cpu-host", "training.precision=fp32", "model.hidden_dropout=0.1"},
        {"cluster.runtime=megatron", "model.hidden_dropout=0.1", ""}};
    for (int i = 0; i < 2; i++) {
        explain(other[i], i ? 2 : 3, 0, -1, r, &e);
        explain(other[i], i ? 1 : 2, i, -1, r0, &e0);
        assert_true(r->layout.dropout && r0->layout.dropout == i);
        for (int k = 0; k < TR_PLAN_PARTS; k++)
            assert_true(e.parts[k] == e0.parts[k]);
        tr_plan_explain_free(&e);
        tr_plan_explain_free(&e0);
    }
    free(r);
    free(r0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kernel),
        cmocka_unit_test(test_hidden),
        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_flag_and_others),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
