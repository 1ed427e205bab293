/* The planner's expert parallelism (tr_plan_layout.ep; plan/ep.c), on a tiny MoE config on the
 * cpu-host preset where every term is counted by hand:
 *  - the all-to-all: plan_alltoall_s within a node and across two, and the EP part of a stage
 *    (micro-batches x layers x (the counts + 4 exchanges of the rows; full recompute: 2 more and
 *    the counts again)) on one node and on two, with TP 2 and SP (Megatron's rows / t);
 *  - the experts' GEMMs: E/EP experts on k T EP / E rows each, the same FLOPs;
 *  - memory, Megatron's runtime: weights and gradients of the experts / EP, their optimizer
 *    state / EP without ZeRO, and with ZeRO-1 sharded over EDP = DP / EP (dp/'s layout of each
 *    buffer); the ZeRO-1 gather and the gradient reduction of the two buffers over DP and EDP;
 *    trident's engine: the same split at every ZeRO stage, its row buffers for EP k N rows;
 *  - refusals naming parallel.expert_model_parallel_size (no experts, not a divisor of DP and
 *    E, with CP, runtime trident on a GPU); the label and the printed lines;
 *  - the search: EP over the divisors of DP that divide E where the runtime has EP, or the
 *    config's when it sets it;
 *  - EP 1 is the planner as it was: Mixtral-8x7B's and Llama 3.1 8B's plans equal the numbers
 *    the planner gave before expert parallelism (bfaaca1), no EP line, key or column;
 *  - Mixtral-8x7B at EP 8: the experts' weights and gradients 8 times smaller. */
#include "plan/plan_internal.h"
#include "plan_test.h"

#include "dp/dp.h"

/* 4 layers, h 64, 4 heads, s 32, GPT-2 (biases), 4 experts top-2; fp32; 8 ranks of cpu-host */
#define TINY_MOE_YAML                                                                          \
    "model: {num_layers: 4, hidden_size: 64, num_attention_heads: 4, seq_length: 32,\n"        \
    "        max_position_embeddings: 32, vocab_size: 256, make_vocab_size_divisible_by: 128,\n"  \
    "        num_experts: 4, moe_router_topk: 2}\n"                                            \
    "parallel: {tensor_model_parallel_size: 1, pipeline_model_parallel_size: 1}\n"             \
    "training: {micro_batch_size: 2, global_batch_size: 16, train_iters: 10, lr: 1e-4}\n"      \
    "data: {data_path: x}\n"                                                                   \
    "cluster: {preset: cpu-host}\n"

#define MIXTRAL_YAML TR_SOURCE_ROOT "/configs/mixtral-8x7b.yaml"

/* cfg's layout on `world` ranks with EP ep, evaluated with its parts */
static void eval_ep(const tr_config *cfg, int world, int ep, tr_plan_recompute rc, int zero,
                    tr_plan_result *r, tr_plan_explain *e)
{
    tr_plan_cluster c;
    assert_int_equal(tr_plan_cluster_from_config(cfg, &c), TR_OK);
    tr_plan_layout L;
    assert_int_equal(tr_plan_layout_from_config(cfg, world, &L), TR_OK);
    L.ep = ep;
    L.recompute = rc;
    L.distributed_optimizer = L.zero_stage = zero;
    int rc2 = tr_plan_explain_layout(cfg, &L, world, &c, 0, r, e);
    if (rc2)
        print_error("%s\n", tr_errmsg());
    assert_int_equal(rc2, TR_OK);
}

static void test_alltoall(void **state)
{
    (void)state;
    double S = 1e6;
    assert_true(plan_alltoall_s(S, 1, 1, 1e9, 1e-6, 1e8, 1e-5) == 0);
    /* one node: 7/8 of it over the intra link, 7 latencies */
    assert_close(plan_alltoall_s(S, 8, 1, 1e9, 1e-6, 1e8, 1e-5), 7.0 / 8 * S / 1e9 + 7e-6,
                 1e-12);
    /* two nodes of 4: 3/8 inside (1e9), 4/8 across (1e8) at once: the slower, 7 latencies of
     * the inter-node link */
    assert_close(plan_alltoall_s(S, 8, 2, 1e9, 1e-6, 1e8, 1e-5), 0.5 * S / 1e8 + 7e-5, 1e-12);
    /* eight nodes of one: everything across */
    assert_close(plan_alltoall_s(S, 8, 8, 1e9, 1e-6, 1e8, 1e-5), 7.0 / 8 * S / 1e8 + 7e-5,
                 1e-12);
}

/* The EP part of the tiny config's one stage (M micro-batches x 4 layers): forward the counts
 * (4 E = 16 bytes a rank) and 2 exchanges of the k T h x 4-byte rows (2 x 64 x 64 x 4 = 32768
 * bytes a rank; Megatron's runtime in bf16 would move 2 bytes an element, here fp32 too),
 * backward 2, full recompute's forward again. */
static double ep_part(double M, double rows, double counts, int full)
{
    return M * 4 * (4 * rows + counts + (full ? 2 * rows + counts : 0));
}

/* the tiny config with sets, at EP ep on 8 ranks */
static void eval_tiny(const char *const *sets, int n, int ep, tr_plan_recompute rc, int zero,
                      tr_plan_result *r, tr_plan_explain *e)
{
    tr_config cfg;
    tr_t_load_text(TINY_MOE_YAML, sets, n, &cfg);
    eval_ep(&cfg, 8, ep, rc, zero, r, e);
    tr_config_free(&cfg);
}

static void test_ep_time(void **state)
{
    (void)state;
    tr_plan_result *r = calloc(1, sizeof *r), *r1 = calloc(1, sizeof *r1);
    tr_plan_explain e, e1;
    for (int megatron = 0; megatron < 2; megatron++) {
        const char *rt[] = {megatron ? "cluster.runtime=megatron" : "cluster.runtime=trident"};
        eval_tiny(rt, 1, 4, TR_PLAN_RECOMPUTE_NONE, 0, r, &e);
        eval_tiny(rt, 1, 1, TR_PLAN_RECOMPUTE_NONE, 0, r1, &e1);
        /* one node of 8 ranks: 3/4 of the bytes at cpu-host's 4 GB/s, 3 x 20 us */
        double a2a = 0.75 * 32768 / 4e9 + 3 * 20e-6, counts = 0.75 * 16 / 4e9 + 3 * 20e-6;
        assert_close(e.parts[TR_PLAN_PART_EP], ep_part(1, a2a, counts, 0), 1e-12);
        assert_close(r->ep_comm_s, ep_part(1, a2a, counts, 0), 1e-12); /* (M = 1) */
        assert_int_equal(r->ep_link, TR_PLAN_LINK_INTRA);
        /* the experts' gradients: over EDP (Megatron's and trident's engine alike) */
        assert_int_equal(r->edp_link, TR_PLAN_LINK_INTRA);
        assert_true(e1.parts[TR_PLAN_PART_EP] == 0 && r1->ep_comm_s == 0);
        assert_int_equal(r1->ep_link, TR_PLAN_LINK_NONE);
        /* the flat model: the same FLOPs on a rank, the same GEMM time */
        assert_close(e.parts[TR_PLAN_PART_GEMM], e1.parts[TR_PLAN_PART_GEMM], 1e-12);
        tr_plan_explain_free(&e);
        tr_plan_explain_free(&e1);
        eval_tiny(rt, 1, 4, TR_PLAN_RECOMPUTE_FULL, 0, r, &e);
        assert_close(e.parts[TR_PLAN_PART_EP], ep_part(1, a2a, counts, 1), 1e-12);
        tr_plan_explain_free(&e);
        /* TP 2 (DP 4, M 2): each TP rank exchanges the rows of all 64 tokens; with sequence
         * parallelism Megatron's those of its 32, trident's still all 64 */
        for (int sp = 0; sp < 2; sp++) {
            const char *tp2[] = {rt[0], "parallel.tensor_model_parallel_size=2",
                                 sp ? "parallel.sequence_parallel=true"
                                    : "parallel.sequence_parallel=false"};
            eval_tiny(tp2, 3, 4, TR_PLAN_RECOMPUTE_NONE, 0, r, &e);
            double bytes = sp && megatron ? 16384 : 32768;
            assert_close(e.parts[TR_PLAN_PART_EP],
                         ep_part(2, 0.75 * bytes / 4e9 + 3 * 20e-6, counts, 0), 1e-12);
            tr_plan_explain_free(&e);
        }
        /* 4 nodes of 2 ranks: an EP group of 4 spans 2 nodes; 1/4 inside, 2/4 over the node's
         * 1 GB/s shared by its 2 ranks, 3 x 50 us */
        const char *two[] = {rt[0], "cluster.gpus_per_node=2", "cluster.nodes=4"};
        eval_tiny(two, 3, 4, TR_PLAN_RECOMPUTE_NONE, 0, r, &e);
        a2a = 0.5 * 32768 / 0.5e9 + 3 * 50e-6;
        counts = 0.5 * 16 / 0.5e9 + 3 * 50e-6;
        assert_close(e.parts[TR_PLAN_PART_EP], ep_part(1, a2a, counts, 0), 1e-12);
        assert_int_equal(r->ep_link, TR_PLAN_LINK_INTER);
        /* EDP = 2: ranks dp 0 and 4, on nodes 0 and 2 */
        assert_int_equal(r->edp_link, TR_PLAN_LINK_INTER);
        tr_plan_explain_free(&e);
        /* EP 2 stays inside a node: 1/2 of the bytes at 4 GB/s, one latency */
        eval_tiny(two, 3, 2, TR_PLAN_RECOMPUTE_NONE, 0, r, &e);
        assert_close(e.parts[TR_PLAN_PART_EP],
                     ep_part(1, 0.5 * 32768 / 4e9 + 20e-6, 0.5 * 16 / 4e9 + 20e-6, 0), 1e-12);
        assert_int_equal(r->ep_link, TR_PLAN_LINK_INTRA);
        tr_plan_explain_free(&e);
    }
    free(r);
    free(r1);
}

/* A GEMM function that records what it is asked: calls, FLOPs, the first call's rows. */
static double calls, flops, first_rows;
static double record_gemm(const tr_plan_cluster *c, double m, double n, double k, int acc)
{
    (void)c, (void)acc;
    if (calls++ == 0)
        first_rows = m;
    flops += 2 * m * n * k;
    return 1;
}

/* the tiny config, its cluster and its layout on 8 ranks */
static void tiny_layout(tr_config *cfg, tr_plan_cluster *c, tr_plan_layout *L)
{
    tr_t_load_text(TINY_MOE_YAML, NULL, 0, cfg);
    assert_int_equal(tr_plan_cluster_from_config(cfg, c), TR_OK);
    assert_int_equal(tr_plan_layout_from_config(cfg, 8, L), TR_OK);
}

static void test_expert_gemms(void **state)
{
    (void)state;
    tr_config cfg;
    tr_plan_cluster c;
    tr_plan_layout L;
    tiny_layout(&cfg, &c, &L);
    /* T = 64 token rows: 4 experts on 2 x 64 / 4 = 32 rows each (fc and fc_proj forward, 4
     * GEMMs backward, each timed once and counted per expert); EP 2: 2 experts on 64 rows;
     * EP 4: one on the 128 rows the 4 ranks send it; the same FLOPs */
    static const double want[3][3] = {{1, 4, 32}, {2, 2, 64}, {4, 1, 128}}; /* EP, E, rows */
    double all = 0;
    for (int i = 0; i < 3; i++) {
        plan_cost_ctx x = {.c = &c, .m = &cfg.model, .L = &L, .ep = (int)want[i][0]};
        double f, b;
        calls = flops = 0;
        plan_moe_expert_gemms(&x, 64, record_gemm, &f, &b);
        assert_true(f == 2 * want[i][1] && b == 4 * want[i][1] && calls == 6);
        assert_true(first_rows == want[i][2]);
        if (i == 0)
            all = want[i][1] * flops;
        assert_true(want[i][1] * flops == all);
    }
    tr_config_free(&cfg);
}

/* Every expert's elements on one rank of the tiny config: 4 layers x 4 experts x (fc 256 x 64 +
 * its bias 256 + fc_proj 64 x 256 + its bias 64) = 529408. */
#define TINY_EXPERTS 529408.0

static void test_ep_memory(void **state)
{
    (void)state;
    tr_config cfg;
    const char *megatron[] = {"cluster.runtime=megatron"};
    tr_t_load_text(TINY_MOE_YAML, megatron, 1, &cfg);
    assert_true(plan_stage_expert_params(&cfg.model, 1, 4) == TINY_EXPERTS);
    tr_plan_result *r = calloc(1, sizeof *r), *r1 = calloc(1, sizeof *r1);
    tr_plan_explain e, e1;
    /* Megatron's runtime, no ZeRO: weights 4, gradients 4 and optimizer 8 bytes an element
     * (fp32), 3/4 of the experts gone */
    eval_ep(&cfg, 8, 4, TR_PLAN_RECOMPUTE_NONE, 0, r, &e);
    eval_ep(&cfg, 8, 1, TR_PLAN_RECOMPUTE_NONE, 0, r1, &e1);
    double gone = TINY_EXPERTS * 3 / 4;
    assert_true(r1->memory.weights - r->memory.weights == 4 * gone);
    assert_true(r1->memory.grads - r->memory.grads == 4 * gone);
    assert_true(r1->memory.optimizer - r->memory.optimizer == 8 * gone);
    assert_true(r1->memory.activations == r->memory.activations); /* (balanced routing) */
    /* the gradient reduction: the dense buffer over DP 8, the experts' over EDP 2, one
     * bucket each (all-reduces at cpu-host's 4 GB/s) */
    double dense = tr_plan_stage_params(&cfg.model, 256, 1, 1, 0, 4) - TINY_EXPERTS;
    assert_close(r->dp_comm_s,
                 tr_plan_allreduce_s(4 * dense, 8, 4e9, 20e-6) +
                     tr_plan_allreduce_s(4 * TINY_EXPERTS / 4, 2, 4e9, 20e-6),
                 1e-12);
    tr_plan_explain_free(&e);
    tr_plan_explain_free(&e1);
    /* ZeRO-1: each buffer sharded over its group (dp/'s layout of each), so the experts'
     * optimizer state is what EP 1 gave them (1/8 of all, or 1/2 of a quarter); the gather
     * of the updated weights runs over both groups */
    eval_ep(&cfg, 8, 4, TR_PLAN_RECOMPUTE_NONE, 1, r, &e);
    eval_ep(&cfg, 8, 1, TR_PLAN_RECOMPUTE_NONE, 1, r1, &e1);
    tr_dp_config dc = {.bucket_size_mb = cfg.parallel.ddp_bucket_size_mb,
                       .overlap_grad_reduce = 1, .distributed_optimizer = 1};
    int nb = 0;
    size_t shard_dense = 0, shard_experts = 0;
    assert_int_equal(tr_dp_layout(&dc, (size_t)dense, 8, 0, &nb, &shard_dense), TR_OK);
    assert_int_equal(tr_dp_layout(&dc, (size_t)(TINY_EXPERTS / 4), 2, 0, &nb, &shard_experts),
                     TR_OK);
    assert_true(r->memory.optimizer == 8.0 * (double)(shard_dense + shard_experts));
    assert_close(r->memory.optimizer, r1->memory.optimizer, 1e-3);
    assert_close(r->param_gather_s,
                 tr_plan_allgather_s(4 * dense, 8, 4e9, 20e-6) +
                     tr_plan_allgather_s(4 * TINY_EXPERTS / 4, 2, 4e9, 20e-6),
                 1e-12);
    tr_plan_explain_free(&e);
    tr_plan_explain_free(&e1);
    /* ZeRO-3 too: the experts' shard over EDP */
    tr_plan_layout L = r->layout;
    L.zero_stage = 3;
    tr_plan_cluster c;
    assert_int_equal(tr_plan_cluster_from_config(&cfg, &c), TR_OK);
    assert_int_equal(tr_plan_evaluate(&cfg, &L, 8, &c, 1, 0, r), TR_OK);
    assert_true(r->memory.weights < r1->memory.weights);
    tr_config_free(&cfg);
    /* trident's engine: the same E/EP experts' parameters, gradients and state as Megatron's
     * (its second tr_dp over EDP), ZeRO-1 sharding them over EDP; its experts' row buffers
     * hold EP k N rows: per layer (EP - 1) k N (fc + F) more floats of the experts' outputs and
     * activations and EP k N h of received rows (N = 64, k = 2, fc = F = 256, h = 64, EP 4:
     * 196608 + 32768 floats), the backward scratch as much again */
    tr_t_load_text(TINY_MOE_YAML, NULL, 0, &cfg);
    tr_plan_result *rm = calloc(1, sizeof *rm);
    for (int zero = 0; zero < 2; zero++) {
        eval_ep(&cfg, 8, 4, TR_PLAN_RECOMPUTE_NONE, zero, r, &e);
        eval_ep(&cfg, 8, 1, TR_PLAN_RECOMPUTE_NONE, zero, r1, &e1);
        assert_true(r1->memory.weights - r->memory.weights == 4 * gone);
        assert_true(r1->memory.grads - r->memory.grads == 4 * gone);
        if (!zero)
            assert_true(r1->memory.optimizer - r->memory.optimizer == 8 * gone);
        else
            assert_true(r->memory.optimizer == 8.0 * (double)(shard_dense + shard_experts));
        assert_close(r->dp_comm_s,
                     zero ? tr_plan_reduce_scatter_s(4 * dense, 8, 4e9, 20e-6) +
                                tr_plan_reduce_scatter_s(4 * TINY_EXPERTS / 4, 2, 4e9, 20e-6)
                          : tr_plan_allreduce_s(4 * dense, 8, 4e9, 20e-6) +
                                tr_plan_allreduce_s(4 * TINY_EXPERTS / 4, 2, 4e9, 20e-6),
                     1e-12);
        double ep_rows = 3.0 * 128 * 512 + 4.0 * 128 * 64;
        /* one micro-batch in flight x 4 layers, and the scratch */
        assert_true(r->memory.activations - r1->memory.activations == 4 * ep_rows * (4 + 1));
        tr_plan_explain_free(&e);
        tr_plan_explain_free(&e1);
    }
    /* ZeRO-2 and ZeRO-3 with EP: the experts' gradients (and at 3 their weights) sharded over
     * EDP too, so a rank keeps less than at EP 1 with the same stage */
    for (int zero = 2; zero <= 3; zero++) {
        tr_plan_layout L2 = r->layout, L1 = r1->layout;
        L2.zero_stage = L1.zero_stage = zero;
        L2.distributed_optimizer = L1.distributed_optimizer = 1;
        assert_int_equal(tr_plan_cluster_from_config(&cfg, &c), TR_OK);
        assert_int_equal(tr_plan_evaluate(&cfg, &L2, 8, &c, 1, 0, rm), TR_OK);
        assert_int_equal(tr_plan_evaluate(&cfg, &L1, 8, &c, 1, 0, r1), TR_OK);
        assert_true(rm->memory.grads < r1->memory.grads);
        if (zero == 3)
            assert_true(rm->memory.weights < r1->memory.weights);
    }
    free(rm);
    free(r);
    free(r1);
    tr_config_free(&cfg);
}

static void expect_refused(const tr_config *cfg, tr_plan_layout L, const char *what)
{
    tr_plan_cluster c;
    assert_int_equal(tr_plan_cluster_from_config(cfg, &c), TR_OK);
    tr_plan_result *r = calloc(1, sizeof *r);
    int world = L.tp * L.pp * L.dp * (L.cp > 1 ? L.cp : 1);
    assert_int_equal(tr_plan_evaluate(cfg, &L, world, &c, 1, 0, r), TR_ERR_CONFIG);
    assert_msg("parallel.expert_model_parallel_size");
    assert_msg(what);
    tr_clear_error();
    free(r);
}

static void test_refusals(void **state)
{
    (void)state;
    tr_config cfg, dense;
    tr_t_load_text(TINY_MOE_YAML, NULL, 0, &cfg);
    const char *no_experts[] = {"model.num_experts=0"};
    tr_t_load_text(TINY_MOE_YAML, no_experts, 1, &dense);
    tr_plan_layout L;
    assert_int_equal(tr_plan_layout_from_config(&cfg, 8, &L), TR_OK);
    assert_int_equal(L.ep, 1);
    L.ep = 2;
    expect_refused(&dense, L, "needs experts");
    L.ep = 8; /* divides DP 8, not 4 experts */
    expect_refused(&cfg, L, "must divide DP 8 and model.num_experts 4");
    L.ep = 4;
    L.dp = 2;
    L.tp = 4; /* (TP 4 divides the tiny heads) */
    expect_refused(&cfg, L, "must divide DP 2");
    L.tp = 1;
    L.dp = 4;
    L.cp = 2;
    L.ep = 2;
    expect_refused(&cfg, L, "context_parallel_size 2");
    tr_config_free(&dense);
    tr_config_free(&cfg);
    /* runtime trident runs EP on the CPU backend alone (host memory over UCX) */
    const char *gpu[] = {"cluster.preset=h100-80gb", "cluster.nodes=1"};
    tr_t_load_text(TINY_MOE_YAML, gpu, 2, &cfg);
    assert_int_equal(tr_plan_layout_from_config(&cfg, 8, &L), TR_OK);
    L.ep = 2;
    expect_refused(&cfg, L, "on runtime trident: trident's expert parallelism exchanges");
    tr_config_free(&cfg);
}

static void test_report(void **state)
{
    (void)state;
    tr_plan_result *r = calloc(1, sizeof *r);
    tr_plan_explain e;
    char *buf = NULL;
    size_t len = 0;
    /* EP 1, EP 4 on trident's engine, EP 4 on Megatron's */
    static const char *const runtime[] = {"cluster.runtime=trident", "cluster.runtime=trident",
                                          "cluster.runtime=megatron"};
    for (int i = 0; i < 3; i++) {
        tr_config cfg;
        tr_t_load_text(TINY_MOE_YAML, &runtime[i], 1, &cfg);
        tr_plan_cluster c;
        assert_int_equal(tr_plan_cluster_from_config(&cfg, &c), TR_OK);
        int ep = i ? 4 : 1;
        eval_ep(&cfg, 8, ep, TR_PLAN_RECOMPUTE_NONE, 0, r, &e);
        char lab[96];
        tr_plan_layout_label(&r->layout, lab, sizeof lab);
        assert_string_equal(lab, ep == 4 ? "TP1 PP1 DP8 EP4 mb2 none" : "TP1 PP1 DP8 mb2 none");
        FILE *f = open_memstream(&buf, &len);
        tr_plan_print(f, &cfg, &c, r);
        tr_plan_write_json(f, &cfg, &c, r);
        tr_plan_print_explain(f, &c, r, &e);
        tr_plan_write_explain_json(f, &cfg, &c, r, &e);
        fclose(f);
        if (ep == 4) {
            assert_non_null(strstr(buf, "expert parallel: EP 4 (1 of 4 experts run on a rank), "
                                        "intra-node all-to-alls"));
            assert_non_null(strstr(buf, i == 1 ? "every rank keeps every expert's parameters"
                                               : "summed over EDP = DP / EP = 2, intra-node"));
            assert_non_null(strstr(buf, "\"ep\":4"));
            assert_non_null(strstr(buf, "\"ep_comm_per_micro_batch_s\""));
            assert_non_null(strstr(buf, "\"ep_comm\""));
            assert_non_null(strstr(buf, "      EP "));
        } else { /* EP 1: nothing of it */
            assert_null(strstr(buf, "expert parallel"));
            assert_null(strstr(buf, "\"ep"));
            assert_null(strstr(buf, " EP "));
        }
        free(buf);
        buf = NULL;
        tr_plan_explain_free(&e);
        tr_config_free(&cfg);
    }
    free(r);
}

static void test_search(void **state)
{
    (void)state;
    tr_config cfg;
    tr_plan_cluster c;
    tr_plan_layout L0;
    tiny_layout(&cfg, &c, &L0);
    tr_plan_search_result s;
    assert_int_equal(tr_plan_search(&cfg, 8, &c, &s), TR_OK);
    int seen[9] = {0};
    for (int i = 0; i < s.n_fit; i++) {
        const tr_plan_layout *L = &s.fit[i].layout;
        assert_true(L->ep >= 1 && L->dp % L->ep == 0 && 4 % L->ep == 0);
        seen[L->ep]++;
    }
    assert_true(seen[1] > 0 && seen[2] > 0 && seen[4] > 0);
    tr_plan_search_free(&s);
    tr_config_free(&cfg);
    /* set in the config: kept (EP 1; EP 2 as the config will say it once the engine runs it) */
    const char *pin[] = {"parallel.expert_model_parallel_size=1"};
    for (int ep = 1; ep <= 2; ep++) {
        tr_t_load_text(TINY_MOE_YAML, pin, 1, &cfg);
        cfg.parallel.expert_model_parallel_size = ep;
        assert_int_equal(tr_plan_search(&cfg, 8, &c, &s), TR_OK);
        assert_true(s.n_fit > 0);
        for (int i = 0; i < s.n_fit; i++)
            assert_int_equal(s.fit[i].layout.ep, ep);
        int refused = 0; /* EP 2 on DP 1 */
        for (int i = 0; i < s.n_rejected; i++)
            refused += strstr(s.rejected[i].reason, "must divide DP 1") != NULL;
        assert_true(ep == 1 ? refused == 0 : refused > 0);
        tr_plan_search_free(&s);
        tr_config_free(&cfg);
    }
    /* EP 1 alone: a dense model; runtime trident on a GPU cluster; CP 2. Megatron's runtime
     * on it: 1, 2, 4 */
    static const char *const sets[][2] = {{"model.num_experts=0", "cluster.preset=cpu-host"},
                                          {"cluster.preset=h100-80gb", "cluster.nodes=1"},
                                          {"cluster.preset=h100-80gb", "cluster.runtime=megatron"},
                                          {"cluster.preset=cpu-host", "cluster.nodes=1"}};
    for (int i = 0; i < 4; i++) {
        tr_t_load_text(TINY_MOE_YAML, sets[i], 2, &cfg);
        assert_int_equal(tr_plan_cluster_from_config(&cfg, &c), TR_OK);
        tr_plan_layout L;
        assert_int_equal(tr_plan_layout_from_config(&cfg, 8, &L), TR_OK);
        if (i == 3)
            L.cp = 2, L.dp = 4;
        int eps[32], n = plan_ep_choices(&cfg, &c, &L, eps);
        assert_int_equal(n, i == 2 ? 3 : 1);
        assert_true(eps[0] == 1 && (n == 1 || (eps[1] == 2 && eps[2] == 4)));
        tr_config_free(&cfg);
    }
}

/* EP 1 is the planner as it was before expert parallelism (bfaaca1's `trident plan --json`:
 * nine significant digits), and Mixtral at EP 8 */
static void test_ep1_unchanged(void **state)
{
    (void)state;
    static const struct {
        const char *file;
        double step, memory, dp, gather, optimizer, opt_bytes;
    } before[] = {
        {MIXTRAL_YAML, 9.82710926, 79022866500.0, 0.145520594, 0.0571502972, 0.0103336566,
         4403331070.0},
        {TR_SOURCE_ROOT "/configs/llama3.1-8b.yaml", 26.4029136, 44000940000.0, 0.0426555312,
         0.0167452656, 0.0214093249, 12045791200.0},
    };
    for (size_t i = 0; i < sizeof before / sizeof before[0]; i++) {
        tr_config cfg;
        tr_t_load_file(before[i].file, NULL, 0, &cfg);
        tr_plan_cluster c;
        assert_int_equal(tr_plan_cluster_from_config(&cfg, &c), TR_OK);
        tr_plan_result *r = calloc(1, sizeof *r);
        assert_int_equal(tr_plan_predict(&cfg, 0, &c, r), TR_OK);
        assert_int_equal(r->layout.ep, 1);
        assert_close(r->step_time_s, before[i].step, 1e-8);
        assert_close(r->memory.total, before[i].memory, 1e-8);
        assert_close(r->dp_comm_s, before[i].dp, 1e-8);
        assert_close(r->param_gather_s, before[i].gather, 1e-8);
        assert_close(r->optimizer_s, before[i].optimizer, 1e-8);
        assert_close(r->memory.optimizer, before[i].opt_bytes, 1e-8);
        free(r);
        tr_config_free(&cfg);
    }
    /* Mixtral's own layout (TP 4, PP 4, DP 8, ZeRO-1; Megatron's runtime: trident's has EP on
     * the CPU alone) at EP 8: a stage of 8 layers holds 8 x 8 experts x 3 x 4096 x 14336 / 4
     * elements at EP 1, 8 x 1 x ... at EP 8 */
    tr_config cfg;
    const char *megatron[] = {"cluster.runtime=megatron"};
    tr_t_load_file(MIXTRAL_YAML, megatron, 1, &cfg);
    double experts = 8.0 * 8 * 3 * 4096 * 14336 / 4;
    assert_true(plan_stage_expert_params(&cfg.model, 4, 8) == experts);
    tr_plan_result *r = calloc(1, sizeof *r), *r8 = calloc(1, sizeof *r8);
    tr_plan_explain e, e8;
    for (int zero = 1; zero >= 0; zero--) {
        eval_ep(&cfg, 128, 1, TR_PLAN_RECOMPUTE_SELECTIVE, zero, r, &e);
        eval_ep(&cfg, 128, 8, TR_PLAN_RECOMPUTE_SELECTIVE, zero, r8, &e8);
        const tr_plan_memory *m = &e.memory[1], *m8 = &e8.memory[1]; /* a middle stage */
        assert_true(m->weights - m8->weights == 2 * experts * 7 / 8);
        assert_true(m->grads - m8->grads == 4 * experts * 7 / 8);
        print_message("mixtral TP4 PP4 DP8 %s, stage 1, GiB: weights %.2f -> %.2f, gradients "
                      "%.2f -> %.2f, optimizer %.2f -> %.2f, total %.2f -> %.2f; step %.3f -> "
                      "%.3f s (all-to-all %.3f s, %s), %.0f -> %.0f tokens/s\n",
                      zero ? "ZeRO-1" : "no ZeRO", m->weights / GIB, m8->weights / GIB,
                      m->grads / GIB, m8->grads / GIB, m->optimizer / GIB, m8->optimizer / GIB,
                      m->total / GIB, m8->total / GIB, r->step_time_s, r8->step_time_s,
                      e8.parts[TR_PLAN_PARTS + TR_PLAN_PART_EP],
                      tr_plan_link_name(r8->ep_link), r->tokens_per_s, r8->tokens_per_s);
        if (!zero) /* the optimizer state of the experts / 8 too */
            assert_close(m->optimizer - m8->optimizer, 12 * experts * 7 / 8, 1e-9);
        tr_plan_explain_free(&e);
        tr_plan_explain_free(&e8);
    }
    free(r);
    free(r8);
    tr_config_free(&cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_alltoall),      cmocka_unit_test(test_ep_time),
        cmocka_unit_test(test_expert_gemms),  cmocka_unit_test(test_ep_memory),
        cmocka_unit_test(test_refusals),      cmocka_unit_test(test_report),
        cmocka_unit_test(test_search),        cmocka_unit_test(test_ep1_unchanged),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
