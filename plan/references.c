/* Published training runs the planner is calibrated against (docs/planner.md lists them with
 * the planner's errors; tests/plan/test_plan_references.c holds the acceptance: every row
 * within 15%, the median within 8%).
 *
 * Every run is GPT-style (learned positions, GeLU MLP of 4h, tied embeddings), sequence 2048,
 * on DGX A100 80GB nodes (8 GPUs, NVLink 3, 8 x 200 Gb/s HDR InfiniBand), mixed precision
 * (fp16 or bf16: the same tensor-core peak), timed end to end.
 *
 *  - Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
 *    Megatron-LM", SC21, arXiv:2104.04473, Table 1 (weak scaling, hardware TFLOP/s per GPU
 *    counting the recompute: 96 B s l h^2 (1 + s/6h + V/16lh)); the exact settings of each
 *    row (micro-batch, interleaving, DDP) are Megatron-LM's examples/sc21/run_table_1.sh
 *    (https://github.com/NVIDIA/Megatron-LM/blob/main/examples/sc21/run_table_1.sh): full
 *    recompute, dropout 0.1 (Megatron's default), vocabulary 51200, "torch" DDP (gradient
 *    all-reduce overlapped with backward) up to 18B, Megatron's "local" DDP (all-reduce after
 *    backward) from 39B, P2P scatter/gather on.
 *  - Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models",
 *    MLSys 2023, arXiv:2205.05198, Tables 3-5: seconds per iteration with full recompute and
 *    with selective recompute + sequence parallelism (22B on 8 GPUs, 175B on 64, 530B on 280,
 *    1T on 512; micro-batch 1 (22B: 4), 175B and 530B interleaved with 3 chunks per stage, as
 *    the calculon project's validation inputs restate them:
 *    https://github.com/calculon-ai/calculon/tree/main/validation).
 *  - BigScience BLOOM-176B: 384 A100 80GB on Jean Zay (48 nodes of 8, NVLink inside a node,
 *    4 x 100 Gb/s Omni-Path between nodes: arXiv:2211.05100 sec. 3.4), TP 4 x PP 12 x DP 8,
 *    micro-batch 2, global batch 2048, full recompute, ZeRO-1, no dropout, Megatron-DeepSpeed
 *    (runtime deepspeed); ~150 TFLOP/s per GPU (BigScience's training README,
 *    https://github.com/bigscience-workshop/bigscience/tree/master/train/tr11-176B-ml, and
 *    the BLOOM paper); the same run as configs/bloom-176b.yaml.
 *
 * Each row's runtime (cluster.runtime) says what its software did: megatron-2021 (batched P2P
 * with scatter/gather, gradients added into the fp32 buffer per micro-batch), megatron (the
 * same with fused accumulation), deepspeed (one blocking send/recv at a time, no
 * scatter/gather, unfused accumulation). Held out (not fitted; docs/planner.md gives the
 * errors): Narayanan et al. Table 2 (PTD-P rows) and the 175B at 1024 GPUs, MT-NLG 530B
 * (Smith et al. 2022). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "plan/plan.h"

/* A GPT run on DGX A100 nodes: layers, hidden, heads, TP, PP, schedule, chunks, micro-batch,
 * global batch, nodes, recompute, sequence parallel, DP overlap. */
#define GPT_RUN(L, H, A, TP, PP, SCHED, V, MB, GB, NODES, RC, SP, OVERLAP, RUNTIME)            \
    "model: {num_layers: " #L ", hidden_size: " #H ", num_attention_heads: " #A                 \
    ", seq_length: 2048, max_position_embeddings: 2048, vocab_size: 51200}\n"                  \
    "parallel: {tensor_model_parallel_size: " #TP ", pipeline_model_parallel_size: " #PP         \
    ", pipeline_schedule: " #SCHED ", virtual_pipeline_model_parallel_size: " #V               \
    ", sequence_parallel: " #SP ", overlap_grad_reduce: " #OVERLAP "}\n"                       \
    "training: {micro_batch_size: " #MB ", global_batch_size: " #GB                             \
    ", train_iters: 1, lr: 1.0e-4, recompute: " #RC ", precision: bf16}\n"                     \
    "data: {data_path: x}\n"                                                                   \
    "cluster: {preset: a100-80gb, nodes: " #NODES ", runtime: " #RUNTIME "}\n"

#define NARAYANAN "Narayanan et al. 2021 (arXiv:2104.04473), Table 1; run_table_1.sh"
#define KORTHIKANTI_FULL "Korthikanti et al. 2022 (arXiv:2205.05198), Table 4, full recompute"
#define KORTHIKANTI_SEL                                                                        \
    "Korthikanti et al. 2022 (arXiv:2205.05198), Table 4, selective recompute + sequence "    \
    "parallel"

static const char bloom_yaml[] =
    "model: {num_layers: 70, hidden_size: 14336, num_attention_heads: 112, seq_length: 2048,\n"
    "        max_position_embeddings: 2048, vocab_size: 250880}\n"
    "parallel: {tensor_model_parallel_size: 4, pipeline_model_parallel_size: 12,\n"
    "           use_distributed_optimizer: true, ddp_bucket_size_mb: 25}\n"
    "training: {micro_batch_size: 2, global_batch_size: 2048, train_iters: 1, lr: 6.0e-5,\n"
    "           recompute: full, precision: bf16}\n"
    "data: {data_path: x}\n"
    "cluster: {preset: a100-80gb, nodes: 48, inter_node_gbytes_per_s: 50, runtime: deepspeed}\n";

const tr_plan_reference tr_plan_references[] = {
    {"Megatron GPT 1.7B, 32 GPUs (t1 p1 mb16)", NARAYANAN,
     GPT_RUN(24, 2304, 24, 1, 1, 1f1b, 1, 16, 512, 4, full, false, true, megatron-2021), 1,
     TR_PLAN_METRIC_TFLOPS, 137},
    {"Megatron GPT 3.6B, 64 GPUs (t2 p1 mb16)", NARAYANAN,
     GPT_RUN(30, 3072, 32, 2, 1, 1f1b, 1, 16, 512, 8, full, false, true, megatron-2021), 1,
     TR_PLAN_METRIC_TFLOPS, 138},
    {"Megatron GPT 7.5B, 128 GPUs (t4 p1 mb16)", NARAYANAN,
     GPT_RUN(36, 4096, 32, 4, 1, 1f1b, 1, 16, 512, 16, full, false, true, megatron-2021), 1,
     TR_PLAN_METRIC_TFLOPS, 142},
    {"Megatron GPT 18B, 256 GPUs (t8 p1 mb8)", NARAYANAN,
     GPT_RUN(40, 6144, 48, 8, 1, 1f1b, 1, 8, 1024, 32, full, false, true, megatron-2021), 1,
     TR_PLAN_METRIC_TFLOPS, 135},
    {"Megatron GPT 39B, 512 GPUs (t8 p2 mb4)", NARAYANAN,
     GPT_RUN(48, 8192, 64, 8, 2, 1f1b, 1, 4, 1536, 64, full, false, false, megatron-2021), 1,
     TR_PLAN_METRIC_TFLOPS, 138},
    {"Megatron GPT 76B, 1024 GPUs (t8 p4 v3 mb2)", NARAYANAN,
     GPT_RUN(60, 10240, 80, 8, 4, interleaved, 3, 2, 1792, 128, full, false, false, megatron-2021), 1,
     TR_PLAN_METRIC_TFLOPS, 140},
    {"Megatron GPT 145B, 1536 GPUs (t8 p8 v2 mb2)", NARAYANAN,
     GPT_RUN(80, 12288, 96, 8, 8, interleaved, 2, 2, 2304, 192, full, false, false, megatron-2021), 1,
     TR_PLAN_METRIC_TFLOPS, 148},
    {"Megatron GPT 310B, 1920 GPUs (t8 p16 v2 mb1)", NARAYANAN,
     GPT_RUN(96, 16384, 128, 8, 16, interleaved, 2, 1, 2160, 240, full, false, false, megatron-2021), 1,
     TR_PLAN_METRIC_TFLOPS, 155},
    {"Megatron GPT 530B, 2520 GPUs (t8 p35 v3 mb1)", NARAYANAN,
     GPT_RUN(105, 20480, 128, 8, 35, interleaved, 3, 1, 2520, 315, full, false, false, megatron-2021), 1,
     TR_PLAN_METRIC_TFLOPS, 163},
    {"Megatron GPT 1T, 3072 GPUs (t8 p64 mb1)", NARAYANAN,
     GPT_RUN(128, 25600, 160, 8, 64, 1f1b, 1, 1, 3072, 384, full, false, false, megatron-2021), 1,
     TR_PLAN_METRIC_TFLOPS, 163},
    {"Megatron GPT 22B, 8 GPUs, full recompute", KORTHIKANTI_FULL,
     GPT_RUN(48, 6144, 64, 8, 1, 1f1b, 1, 4, 4, 1, full, false, true, megatron), 1,
     TR_PLAN_METRIC_STEP_S, 1.42},
    {"Megatron GPT 175B, 64 GPUs, full recompute", KORTHIKANTI_FULL,
     GPT_RUN(96, 12288, 96, 8, 8, interleaved, 3, 1, 64, 8, full, false, true, megatron), 1,
     TR_PLAN_METRIC_STEP_S, 18.13},
    {"Megatron GPT 530B, 280 GPUs, full recompute", KORTHIKANTI_FULL,
     GPT_RUN(105, 20480, 128, 8, 35, interleaved, 3, 1, 280, 35, full, false, true, megatron), 1,
     TR_PLAN_METRIC_STEP_S, 49.05},
    {"Megatron GPT 1T, 512 GPUs, full recompute", KORTHIKANTI_FULL,
     GPT_RUN(128, 25600, 160, 8, 64, 1f1b, 1, 1, 512, 64, full, false, true, megatron), 1,
     TR_PLAN_METRIC_STEP_S, 94.42},
    {"Megatron GPT 22B, 8 GPUs, selective + SP", KORTHIKANTI_SEL,
     GPT_RUN(48, 6144, 64, 8, 1, 1f1b, 1, 4, 4, 1, selective, true, true, megatron), 1,
     TR_PLAN_METRIC_STEP_S, 1.10},
    {"Megatron GPT 175B, 64 GPUs, selective + SP", KORTHIKANTI_SEL,
     GPT_RUN(96, 12288, 96, 8, 8, interleaved, 3, 1, 64, 8, selective, true, true, megatron), 1,
     TR_PLAN_METRIC_STEP_S, 13.75},
    {"Megatron GPT 530B, 280 GPUs, selective + SP", KORTHIKANTI_SEL,
     GPT_RUN(105, 20480, 128, 8, 35, interleaved, 3, 1, 280, 35, selective, true, true, megatron), 1,
     TR_PLAN_METRIC_STEP_S, 37.83},
    {"Megatron GPT 1T, 512 GPUs, selective + SP", KORTHIKANTI_SEL,
     GPT_RUN(128, 25600, 160, 8, 64, 1f1b, 1, 1, 512, 64, selective, true, true, megatron), 1,
     TR_PLAN_METRIC_STEP_S, 71.49},
    {"BLOOM-176B, 384 GPUs (t4 p12 mb2, ZeRO-1)",
     "BigScience tr11-176B-ml README and arXiv:2211.05100 sec. 3.4; configs/bloom-176b.yaml",
     bloom_yaml, 0, TR_PLAN_METRIC_TFLOPS, 150},
};

const int tr_plan_n_references = (int)(sizeof tr_plan_references / sizeof tr_plan_references[0]);

int tr_plan_reference_predict(const tr_plan_reference *ref, tr_plan_result *result,
                              double *predicted, double *error)
{
    tr_config cfg;
    int rc = tr_config_load_string(ref->yaml, strlen(ref->yaml), ref->name, NULL, 0, &cfg);
    if (rc)
        return tr_fail_context(rc, "reference '%s'", ref->name);
    tr_plan_cluster c;
    tr_plan_layout L;
    int world = 0;
    rc = tr_plan_cluster_from_config(&cfg, &c);
    if (!rc)
        rc = tr_plan_world(&c, 0, &world);
    if (!rc)
        rc = tr_plan_layout_from_config(&cfg, world, &L);
    if (!rc) {
        L.dropout = ref->dropout;
        rc = tr_plan_evaluate(&cfg, &L, world, &c, 1, 0, result);
    }
    tr_config_free(&cfg);
    if (rc)
        return tr_fail_context(rc, "reference '%s'", ref->name);
    if (ref->metric == TR_PLAN_METRIC_STEP_S) {
        *predicted = result->step_time_s;
        *error = ref->published / result->step_time_s - 1;
    } else {
        *predicted = result->tflops_per_gpu;
        *error = result->tflops_per_gpu / ref->published - 1;
    }
    return TR_OK;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int tr_plan_print_references(FILE *f)
{
    int n = tr_plan_n_references, rc = TR_OK;
    double *err = calloc((size_t)n, sizeof *err);
    tr_plan_result *r = calloc(1, sizeof *r);
    if (!err || !r) {
        free(err);
        free(r);
        return tr_fail(TR_ERR_NOMEM, "plan --references: out of memory");
    }
    fprintf(f, "%-46s %10s %10s %8s  %s\n", "published run", "predicted", "published", "error",
            "unit");
    double worst = 0;
    for (int i = 0; i < n && !rc; i++) {
        const tr_plan_reference *ref = &tr_plan_references[i];
        double pred = 0;
        rc = tr_plan_reference_predict(ref, r, &pred, &err[i]);
        if (rc)
            break;
        fprintf(f, "%-46s %10.4g %10.4g %+7.1f%%  %s\n", ref->name, pred, ref->published,
                100 * err[i],
                ref->metric == TR_PLAN_METRIC_STEP_S ? "s/iteration" : "TFLOP/s per GPU");
        if (fabs(err[i]) > fabs(worst))
            worst = err[i];
    }
    if (!rc) {
        for (int i = 0; i < n; i++)
            err[i] = fabs(err[i]);
        qsort(err, (size_t)n, sizeof *err, cmp_double);
        double median = n % 2 ? err[n / 2] : 0.5 * (err[n / 2 - 1] + err[n / 2]);
        fprintf(f, "\n%d references: median |error| %.1f%%, worst %+.1f%% (acceptance: every row "
                   "within 15%%, median within 8%%)\nsources: plan/references.c, "
                   "docs/planner.md\n",
                n, 100 * median, 100 * worst);
    }
    free(err);
    free(r);
    return rc;
}
