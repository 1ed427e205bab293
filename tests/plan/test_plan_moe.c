/* The planner's mixture of experts (model.num_experts):
 *  - parameters: the whole model and each TP rank's share against model/'s tensor table, with
 *    and without biases; the active parameters against a model of k experts; Mixtral-8x7B's
 *    published counts (46.7B, 12.9B active) exactly;
 *  - activation memory: what model/ allocates for a micro-batch of an MoE model beyond its dense
 *    twin (tr_gpt_activation_bytes on the CPU, with and without full recompute) against
 *    tr_plan_moe_layer_bytes and tr_plan_moe_scratch_bytes, and the planner's memory of a
 *    layout against its dense twin's by the same terms;
 *  - FLOPs per token of Mixtral against a hand count and Megatron's formula (plus the router);
 *  - the routing's host copies: 5 a layer forward (4 without the balancing loss's
 *    probabilities), each a sync + its bytes over the host link;
 *  - `trident plan` of configs/mixtral-8x7b.yaml: fits an H100, its stages' routing part is the
 *    micro-batches x layers x the routing's forward and backward, and a search over its
 *    layouts returns fitting layouts. */
#include "plan/plan_internal.h"
#include "plan_test.h"

#include "model/gpt.h"

#define MIXTRAL_YAML TR_SOURCE_ROOT "/configs/mixtral-8x7b.yaml"

static void load(const char *file, const char *const *sets, int n, tr_config *cfg)
{
    char path[4096];
    snprintf(path, sizeof path, TR_SOURCE_ROOT "/configs/%s", file);
    tr_t_load_file(path, sets, n, cfg);
}

/* model/'s element count of layers [0, L) on TP rank r of TP t */
static double model_count(const tr_config *cfg, int t, int r)
{
    tr_config c = *cfg;
    c.parallel.tensor_model_parallel_size = t;
    c.parallel.pipeline_model_parallel_size = 1;
    tr_gpt_shape s;
    assert_int_equal(tr_gpt_shape_from_config(&c, 0, cfg->model.num_layers, r, &s), TR_OK);
    size_t n = 0;
    assert_int_equal(tr_gpt_count_params(&s, &n), TR_OK);
    return (double)n;
}

static void test_params(void **state)
{
    (void)state;
    /* Llama (SwiGLU, no biases) and GPT-2 (biases: each expert's fc and fc_proj biases) */
    static const char *const files[] = {"tiny-llama.yaml", "tiny.yaml"};
    for (int f = 0; f < 2; f++) {
        const char *sets[] = {"model.num_experts=4", "model.moe_router_topk=2",
                              "parallel.tensor_model_parallel_size=1",
                              "parallel.pipeline_model_parallel_size=1"};
        tr_config cfg, k_experts;
        load(files[f], sets, 4, &cfg);
        const tr_model_config *m = &cfg.model;
        int L = m->num_layers, vp1 = tr_gpt_padded_vocab(m, 1), vp2 = tr_gpt_padded_vocab(m, 2);
        assert_true(tr_plan_model_params(m, vp1) == model_count(&cfg, 1, 0));
        for (int r = 0; r < 2; r++) /* TP 2: the experts split as the MLP, the router whole */
            assert_true(tr_plan_stage_params(m, vp2, 2, 1, 0, L) == model_count(&cfg, 2, r));
        /* active: a model of exactly k = 2 experts, plus the router's other E - k rows */
        const char *two[] = {"model.num_experts=2", "model.moe_router_topk=2",
                             "parallel.tensor_model_parallel_size=1",
                             "parallel.pipeline_model_parallel_size=1"};
        load(files[f], two, 4, &k_experts);
        double active = model_count(&k_experts, 1, 0) + (double)L * (4 - 2) * m->hidden_size;
        assert_true(tr_plan_model_active_params(m, vp1) == active);
        /* dense: the active parameters are all of them */
        assert_true(tr_plan_model_active_params(&k_experts.model, vp1) <
                    tr_plan_model_params(&k_experts.model, vp1) + 1);
        tr_config_free(&k_experts);
        tr_config_free(&cfg);
    }
    /* Mixtral-8x7B: 46,702,792,704 parameters (HF's count), 12,879,925,248 active */
    tr_config cfg;
    tr_t_load_file(MIXTRAL_YAML, NULL, 0, &cfg);
    int vp = tr_gpt_padded_vocab(&cfg.model, 1);
    assert_int_equal(vp, 32000);
    assert_true(tr_plan_model_params(&cfg.model, vp) == 46702792704.0);
    assert_true(tr_plan_model_active_params(&cfg.model, vp) == 12879925248.0);
    tr_config_free(&cfg);
}

/* model/'s activation bytes (scratch + n_slots micro-batches) of cfg at TP 1 */
static double model_activation_bytes(const tr_config *cfg, int B, int n_slots)
{
    tr_gpt_shape s;
    assert_int_equal(tr_gpt_shape_from_config(cfg, 0, cfg->model.num_layers, 0, &s), TR_OK);
    tr_gpt *g = NULL;
    assert_int_equal(tr_gpt_create(&s, tr_kernels_cpu(), NULL, &g), TR_OK);
    double bytes = (double)tr_gpt_activation_bytes(g, B, n_slots);
    tr_gpt_free(g);
    return bytes;
}

/* What model/ keeps for experts beyond the dense MLP, on the CPU in fp32: E 16 and sizes that
 * are multiples of 16 floats, so model/'s 64-byte alignment adds nothing. */
static void test_activations_vs_model(void **state)
{
    (void)state;
    for (int full = 0; full < 2; full++) {
        const char *sets[] = {"model.num_experts=16", "model.moe_router_topk=2",
                              full ? "training.recompute=full" : "training.recompute=none"};
        const char *dense_sets[] = {sets[2]};
        tr_config moe, dense;
        load("tiny-llama.yaml", sets, 3, &moe);
        load("tiny-llama.yaml", dense_sets, 1, &dense);
        const tr_model_config *m = &moe.model;
        int B = 2, slots = 3, L = m->num_layers, s = m->seq_length;
        double extra = model_activation_bytes(&moe, B, slots) -
                       model_activation_bytes(&dense, B, slots);
        double layer = tr_plan_moe_layer_bytes(m, s, B, 1, 4);
        double scratch = tr_plan_moe_scratch_bytes(m, s, B, 1);
        assert_true(layer > 0 && scratch > 0);
        /* every slot keeps every layer's; with full recompute only the recomputed layer's */
        double planned = (full ? layer : (double)slots * L * layer) + scratch;
        if (extra != planned) {
            print_error("recompute %s: model keeps %.17g bytes more with experts, planner %.17g\n",
                        full ? "full" : "none", extra, planned);
            fail();
        }
        assert_true(tr_plan_moe_layer_bytes(&dense.model, s, B, 1, 4) == 0);
        assert_true(tr_plan_moe_scratch_bytes(&dense.model, s, B, 1) == 0);
        tr_config_free(&moe);
        tr_config_free(&dense);
    }
    /* TP 2: the experts' rows of fc and their activation split, the gathered rows whole */
    tr_config moe;
    const char *sets[] = {"model.num_experts=16", "model.moe_router_topk=2"};
    load("tiny-llama.yaml", sets, 2, &moe);
    double T = 2.0 * 128, M = 2 * T, h = 128, F = 352;
    assert_true(tr_plan_moe_layer_bytes(&moe.model, 128, 2, 2, 4) ==
                T * 3 * F / 2 * 4 + 2 * M * h * 4 + 4 * (16 * T + T + 5 * M));
    assert_true(tr_plan_moe_layer_bytes(&moe.model, 128, 2, 2, 2) ==
                T * 3 * F / 2 * 2 + 2 * M * h * 2 + 4 * (16 * T + T + 5 * M));
    assert_true(tr_plan_moe_scratch_bytes(&moe.model, 128, 2, 2) ==
                4 * (2 * 16 * T + T * h + M * h + M * 3 * F / 2 + 2 * M + 16));
    tr_config_free(&moe);
}

/* The planner's memory of a layout with experts minus its dense twin's: the micro-batches in
 * flight x layers x the MoE layer's bytes + the scratch (activations), one layer's more in the
 * recompute buffer; on the CPU in fp32 and on an H100 in bf16 with trident's kernels, where
 * the dense model's bf16 storage of the MLP and the norms does not hold with experts. */
static void test_planned_memory(void **state)
{
    (void)state;
    static const char *const cases[][3] = {
        {"cpu-host", "training.precision=fp32", "training.recompute=none"},
        {"cpu-host", "training.precision=fp32", "training.recompute=full"},
        {"h100-80gb", "training.precision=bf16", "training.recompute=selective"},
    };
    for (int k = 0; k < 3; k++) {
        const char *sets[] = {cases[k][1], cases[k][2], "parallel.pipeline_model_parallel_size=2",
                              "model.num_experts=8", "model.moe_router_topk=2"};
        tr_config moe, dense;
        load("tiny.yaml", sets, 5, &moe);
        load("tiny.yaml", sets, 3, &dense);
        tr_plan_cluster c;
        assert_int_equal(tr_plan_cluster_preset(cases[k][0], &c), TR_OK);
        tr_plan_layout L;
        assert_int_equal(tr_plan_layout_from_config(&moe, 4, &L), TR_OK);
        tr_plan_result *a = calloc(1, sizeof *a), *d = calloc(1, sizeof *d);
        assert_int_equal(tr_plan_evaluate(&moe, &L, 4, &c, 1, 0, a), TR_OK);
        assert_int_equal(tr_plan_evaluate(&dense, &L, 4, &c, 1, 0, d), TR_OK);
        assert_int_equal(a->memory_stage, d->memory_stage);
        const tr_model_config *m = &moe.model;
        int s = m->seq_length, b = L.micro_batch, h = m->hidden_size, t = L.tp;
        double layer = tr_plan_moe_layer_bytes(m, s, b, t, 4);
        double F = 4.0 * h;
        /* dense bf16 on trident's kernels: the GELU output, fc's output, the two norms' outputs
         * in bf16 (2 bytes an element less); not with experts */
        double bf16_dense = k == 2 ? 2.0 * s * b * F / t * 2 + 2 * 2.0 * s * b * h : 0;
        int full = L.recompute == TR_PLAN_RECOMPUTE_FULL;
        double stored = full ? 0 : layer + bf16_dense;
        assert_close(a->memory.activations - d->memory.activations,
                     (double)a->in_flight * a->stage_layers * stored +
                         tr_plan_moe_scratch_bytes(m, s, b, t),
                     1e-12);
        assert_close(a->memory.recompute - d->memory.recompute, full ? layer : 0, 1e-12);
        /* state: E MLPs and the router per layer */
        assert_true(a->memory.weights > d->memory.weights);
        /* the routing costs time on a GPU; the model FLOPs grow by the second expert and the
         * router only */
        assert_true(a->step_time_s > d->step_time_s);
        double T = (double)L.global_batch * s, l = m->num_layers;
        assert_close(a->model_flops - d->model_flops,
                     3 * l * T * 2 * (F * h + h * F + 8.0 * h), 1e-12);
        free(a);
        free(d);
        tr_config_free(&moe);
        tr_config_free(&dense);
    }
}

/* Mixtral-8x7B's model FLOPs per token, by hand: per layer forward 2 x (qkv 4096 x 6144 +
 * projection 4096^2 + 2 experts x 3 x 4096 x 14336 + router 4096 x 8) + attention 4 s h, and
 * the logits 2 h V; x 3 for forward and backward. Megatron's num_floating_point_operations
 * counts the same less the router. */
static void test_flops(void **state)
{
    (void)state;
    tr_config cfg;
    tr_t_load_file(MIXTRAL_YAML, NULL, 0, &cfg);
    const tr_model_config *m = &cfg.model;
    double layer = 2.0 * (25165824.0 + 16777216.0 + 352321536.0 + 32768.0) + 67108864.0;
    assert_true(layer == 855703552.0);
    assert_true(tr_plan_layer_forward_flops_model(m, 4096, 1) == 4096 * layer);
    double per_token = 3 * (32 * layer + 2.0 * 4096 * 32000);
    assert_true(per_token == 82933972992.0);
    assert_true(tr_plan_model_flops(m, 32000, 1) == 4096 * per_token);
    /* Megatron: 12 l h^2 [(1 + g/a + s/h) + (F/h) k 3/2 + V/(2 l h)] per token, + the router's
     * 6 l h E */
    double h = 4096, megatron = 12 * 32 * h * h *
                                (1 + 8.0 / 32 + 4096 / h + 14336 / h * 2 * 1.5 +
                                 32000 / (2 * 32 * h));
    assert_close(per_token, megatron + 6 * 32 * h * 8, 1e-15);
    tr_config_free(&cfg);
}

/* The experts' GEMMs with every token routed to every expert (k = E): E times the dense MLP's
 * fc (T, fc/t, h) and fc_proj (T, h, F/t), and their input and weight gradients. */
static void test_expert_gemms(void **state)
{
    (void)state;
    const char *all[] = {"model.moe_router_topk=8", "parallel.tensor_model_parallel_size=2"};
    tr_config cfg;
    tr_t_load_file(MIXTRAL_YAML, all, 2, &cfg);
    tr_plan_cluster c;
    assert_int_equal(tr_plan_cluster_preset("h100-80gb", &c), TR_OK);
    tr_plan_layout L;
    assert_int_equal(tr_plan_layout_from_config(&cfg, 128, &L), TR_OK);
    plan_cost_ctx x = {.c = &c, .m = &cfg.model, .L = &L};
    /* SwiGLU: fc's 2F rows; TP 2 halves fc and F */
    double T = 4096, h = 4096, fc = 2 * 14336 / 2, F = 14336 / 2, f, b;
    plan_moe_expert_gemms(&x, T, plan_trident_gemm_s, &f, &b);
    const tr_plan_cluster *k = &c;
    double one_f = plan_trident_gemm_s(k, T, fc, h, 0) + plan_trident_gemm_s(k, T, h, F, 0);
    double one_b = plan_trident_gemm_s(k, T, h, fc, 0) + plan_trident_gemm_s(k, fc, h, T, 1) +
                   plan_trident_gemm_s(k, T, F, h, 0) + plan_trident_gemm_s(k, h, F, T, 1);
    assert_close(f, 8 * one_f, 1e-12);
    assert_close(b, 8 * one_b, 1e-12);
    tr_config_free(&cfg);
}

/* The routing's host copies (plan/costs_moe.c's estimates: 10 us + the kernel gap each, 25 GB/s):
 * without the balancing loss the probabilities stay on the device, one copy less. */
static void test_host_copies(void **state)
{
    (void)state;
    const char *none[] = {"model.moe_router_load_balancing_type=none",
                          "model.moe_aux_loss_coeff=0"};
    tr_config aux, plain;
    tr_t_load_file(MIXTRAL_YAML, NULL, 0, &aux);
    tr_t_load_file(MIXTRAL_YAML, none, 2, &plain);
    tr_plan_cluster c;
    assert_int_equal(tr_plan_cluster_preset("h100-80gb", &c), TR_OK);
    tr_plan_layout L;
    assert_int_equal(tr_plan_layout_from_config(&aux, 128, &L), TR_OK);
    double T = 8192, fa, ba, fp, bp;
    plan_cost_ctx x = {.c = &c, .m = &aux.model, .L = &L};
    plan_moe_routing_cost(&x, T, 4, plan_trident_gemm_s, &fa, &ba);
    x.m = &plain.model;
    plan_moe_routing_cost(&x, T, 4, plan_trident_gemm_s, &fp, &bp);
    double copy = 10e-6 + c.kernel_overhead_s;
    assert_close(fa - fp, copy + 4 * T * 8 / 25e9, 1e-9);
    assert_close(ba - bp, copy + 4 * 8 / 25e9, 1e-9); /* the balancing gradient's E floats */
    assert_true(fp > 4 * copy); /* experts, log-sum-exps, rows' tokens and slots */
    tr_config_free(&aux);
    tr_config_free(&plain);
}

/* costs.c's GEMM of Megatron's kernels (its gemm_acc_s) */
static double megatron_gemm_s(const tr_plan_cluster *c, double m, double n, double k, int acc)
{
    (void)acc;
    return tr_plan_gemm_s(c, m, n, k, 1);
}

static void test_mixtral_plan(void **state)
{
    (void)state;
    tr_config cfg;
    tr_t_load_file(MIXTRAL_YAML, NULL, 0, &cfg);
    tr_plan_cluster c;
    assert_int_equal(tr_plan_cluster_from_config(&cfg, &c), TR_OK);
    tr_plan_result *r = calloc(1, sizeof *r);
    assert_int_equal(tr_plan_predict(&cfg, 0, &c, r), TR_OK);
    if (!r->valid)
        print_error("mixtral: %s\n", r->problem);
    assert_true(r->valid && r->fits);
    assert_true(r->memory.total < 80e9 && r->memory.total > 20 * GIB);
    assert_true(r->n_params == 46702792704.0 && r->n_active_params == 12879925248.0);
    assert_true(r->mfu > 0.05 && r->mfu < 0.6);
    /* the routing is timed: on every stage its part of the step is the micro-batches x its
     * layers x the routing's forward and backward, on trident's kernels and on Megatron's
     * (bf16 rows, GEMMs without staging); the experts' GEMMs are in the GEMM part: top-4
     * instead of top-2 adds the micro-batches x layers x the difference of theirs */
    const char *top4[] = {"model.moe_router_topk=4"};
    tr_config cfg4;
    tr_t_load_file(MIXTRAL_YAML, top4, 1, &cfg4);
    for (int megatron = 0; megatron < 2; megatron++) {
        tr_plan_layout L = r->layout;
        assert_int_equal(tr_plan_runtime_apply(megatron ? "megatron" : "trident", &L), TR_OK);
        tr_plan_explain e, e4;
        tr_plan_result *x = calloc(1, sizeof *x);
        assert_int_equal(tr_plan_explain_layout(&cfg, &L, r->world, &c, 0, x, &e), TR_OK);
        assert_int_equal(tr_plan_explain_layout(&cfg4, &L, r->world, &c, 0, x, &e4), TR_OK);
        plan_cost_ctx ctx = {.c = &c, .m = &cfg.model, .L = &L};
        plan_gemm_fn gemm = megatron ? megatron_gemm_s : plan_trident_gemm_s;
        double f, b, f2, b2, f4, b4, T = (double)L.micro_batch * cfg.model.seq_length;
        plan_moe_routing_cost(&ctx, T, megatron ? 2 : 4, gemm, &f, &b);
        plan_moe_expert_gemms(&ctx, T, gemm, &f2, &b2);
        ctx.m = &cfg4.model;
        plan_moe_expert_gemms(&ctx, T, gemm, &f4, &b4);
        assert_true(f4 > f2 && b4 > b2);
        double per_stage = L.num_micro_batches * (double)cfg.model.num_layers / e.P;
        for (int st = 0; st < e.P; st++) {
            double route = e.parts[(size_t)st * TR_PLAN_PARTS + TR_PLAN_PART_ROUTING];
            assert_close(route, per_stage * (f + b), 1e-9);
            assert_true(route < 0.2 * e.step_time_s);
            double gemm2 = e.parts[(size_t)st * TR_PLAN_PARTS + TR_PLAN_PART_GEMM];
            double gemm4 = e4.parts[(size_t)st * TR_PLAN_PARTS + TR_PLAN_PART_GEMM];
            assert_close(gemm4 - gemm2, per_stage * (f4 + b4 - f2 - b2), 1e-9);
        }
        tr_plan_explain_free(&e);
        tr_plan_explain_free(&e4);
        free(x);
    }
    tr_config_free(&cfg4);
    /* a search over its layouts on 64 GPUs: fitting layouts, ranked, sane memory */
    const char *sets[] = {"cluster.nodes=8"};
    tr_config c64;
    tr_t_load_file(MIXTRAL_YAML, sets, 1, &c64);
    assert_int_equal(tr_plan_cluster_from_config(&c64, &c), TR_OK);
    tr_plan_search_result s;
    assert_int_equal(tr_plan_search(&c64, 0, &c, &s), TR_OK);
    assert_int_equal(s.world, 64);
    assert_true(s.n_fit > 0);
    for (int i = 0; i < s.n_fit; i++) {
        assert_true(s.fit[i].valid && s.fit[i].memory.total <= s.fit[i].capacity);
        assert_true(s.fit[i].memory.activations > 0 && s.fit[i].memory.weights > 0);
        if (i)
            assert_true(s.fit[i - 1].tokens_per_s >= s.fit[i].tokens_per_s);
    }
    print_message("mixtral on 64 H100s: %d of %d layouts fit; best %d x %d x %d mb %d %s, "
                  "%.0f tokens/s, MFU %.1f%%, %.1f GiB\n", s.n_fit, s.n_candidates,
                  s.fit[0].layout.tp, s.fit[0].layout.pp, s.fit[0].layout.dp,
                  s.fit[0].layout.micro_batch, tr_plan_recompute_name(s.fit[0].layout.recompute),
                  s.fit[0].tokens_per_s, 100 * s.fit[0].mfu, s.fit[0].memory.total / GIB);
    tr_plan_search_free(&s);
    tr_config_free(&c64);
    free(r);
    tr_config_free(&cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_params),
        cmocka_unit_test(test_activations_vs_model),
        cmocka_unit_test(test_planned_memory),
        cmocka_unit_test(test_flops),
        cmocka_unit_test(test_expert_gemms),
        cmocka_unit_test(test_host_copies),
        cmocka_unit_test(test_mixtral_plan),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
