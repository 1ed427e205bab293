/* plan/ — the planner: memory per GPU and step time of a 3D-parallel layout on a described
 * cluster, without starting any rank (`trident plan`, and the sweep's predictions).
 *
 * Contract:
 *  - Cluster (tr_plan_cluster): the resolved `cluster` section of the config. A preset
 *    (a100-80gb | h100-80gb | h200 | cpu-host) fills every field; each key the user sets
 *    (a non-zero value, or device != auto) replaces the preset's. No preset and no values is
 *    TR_ERR_CONFIG naming what is missing. World size = nodes x gpus_per_node unless given.
 *    device cpu: the ranks placed on a node SHARE its peak_flops and memory (a CPU host where
 *    every rank is a process on the same cores); device gpu: per-GPU figures.
 *  - Layout (tr_plan_layout) from the config and the world size: TP, CP, PP from `parallel`,
 *    DP = W/(TP*CP*PP), M = GB/(mb*DP) micro-batches per step. A layout whose M is not an integer
 *    is still evaluated (with M rounded up) and reported invalid, so `trident plan` can say
 *    everything that is wrong at once.
 *  - tr_plan_predict() / tr_plan_evaluate() fill a tr_plan_result: memory per rank with a
 *    breakdown (the largest stage decides), fits or why not, and the step time assembled
 *    below. Pure functions of their inputs; the pipeline part runs the pp/ schedule op lists
 *    through tr_pp_simulate() (event simulation), never the closed formula, and checks that
 *    the two agree when every stage costs the same and P2P is free.
 *  - tr_plan_search() enumerates every (TP, CP, PP, DP, EP, micro-batch, recompute, ZeRO-1)
 *    for the world size and ranks the layouts that fit by tokens/s; every rejected layout
 *    carries its reason. tr_plan_calibrate() solves for gemm_efficiency from a measured step
 *    time.
 *
 * Notation: l layers, h hidden, a heads, s sequence, V vocabulary padded to a multiple of
 * make_vocab_size_divisible_by x t (Megatron's rule: tr_gpt_padded_vocab() of model/, the
 * one definition), b micro-batch, B global batch,
 * t TP, p PP, d DP, v chunks per stage, M = B/(b d) micro-batches.
 *
 * Parameters (one rank):
 *   per layer      12h^2/t + 7h/t + 6h   (QKV 3h^2+3h, proj h^2+h, MLP 8h^2+5h, 2 LN 4h;
 *                                         row-parallel biases and LNs are replicated)
 *   first stage    + V h/t (word embedding) + max_pos h (positions, replicated)
 *   last stage     + 2h (final LN) + V h/t (tied copy of the embedding when p > 1)
 *   mixture of experts (model.num_experts E, moe_router_topk k; model/gpt_moe.c): the MLP's
 *                  weights and biases E times (each expert split over t as the MLP) + the
 *                  router E h, replicated. Active parameters (tr_plan_model_active_params):
 *                  the model less the E - k experts a token is not routed to.
 * Model state, bytes per parameter (weights / gradients / optimizer):
 *   bf16: 2 / 4 / 12 (fp32 grads; fp32 master + Adam m, v) = 18; distributed optimizer
 *         (ZeRO-1): 2 / 4 / 12/d = 6 + 12/d
 *   fp32: 4 / 4 / 8 = 16; ZeRO-1: 8 + 8/d
 *   The optimizer part of a stage's memory is 12 (8) bytes x the shard dp/ gives DP rank 0
 *   (tr_dp_layout: its block of every bucket, the largest), ~ params_r / d with ZeRO-1.
 *   parallel.zero_stage 2 (d > 1; trident's CPU windows, dp/dp.h): gradients 4 x the shard
 *   + the window of full gradients held at once: one layer and one bucket in flight, and on
 *   a stage holding both embedding and head the word embedding's gradient (the head writes
 *   it in forward, the embedding's backward finishes it); on a first stage wte + wpe, on a
 *   later last stage its wte copy, when larger. Stage 3 also: weights wb x the shard + the
 *   units gathered at once (a layer and the prefetched next one; the embedding + layer 0;
 *   the head: final LN + wte).
 * Activations, runtime trident (trident_kernels): what model/gpt_acts.c allocates
 *   (tr_plan_trident_activations, tensor by tensor in the family's widths, bf16 storage where
 *   model/'s rules keep it; tests/plan/test_plan_acts.c checks it against
 *   tr_gpt_activation_bytes): per chunk, peak_r x (its layers' bytes + a slot) + its scratch
 *   (+ full recompute's layer, the CP buffers, the head chunk on the last stage).
 * Activations of one layer for one micro-batch, Megatron's runtimes, bytes (Korthikanti et
 * al. 2022; 16-bit activations, doubled for fp32) in the family's widths (qkv rows, attention
 * width aw, fc rows, MLP width F; GPT-2: 3h, h, 4h, 4h), with A = 5as/h:
 *   none       sbh(10 + A/t) + 2sb(qkv + aw + fc + F)/t (GPT-2 t=1: sbh(34 + A); TP:
 *              sbh(10 + 24/t + A/t)); TP + SP: the 10 sbh / t too
 *   selective  the same without the A term (attention scores are recomputed)
 *   full       2sbh (the layer input), 2sbh/t with SP
 *   CP         s/CP tokens a rank; the scores of its queries over all s keys
 *   experts    + tr_plan_moe_layer_bytes (k routed rows a token through the MLP, gathered
 *              inputs and outputs whole on every TP rank, router outputs, indices; none stored
 *              with full recompute, where the recomputed layer holds them), and once a stage
 *              tr_plan_moe_scratch_bytes (counted in activations); no bf16 storage of the MLP
 *              or the norms (model/gpt_internal.h's rules); whatever the routing's balance
 *              (dropless: k s b rows in all, however the experts share them)
 *   A stage keeps peak_r micro-batches (chunks) in flight: the peak of its pp/ schedule op
 *   list (1f1b: min(p - r, M), gpipe: M); stored = peak_r x (layers_r / v) x per-layer bytes.
 *   Plus, once per stage: full recompute re-materialises one layer of one micro-batch (the
 *   "none" bytes); selective the scores of one layer (5as^2 b/t; nothing with
 *   trident_kernels). First stage: the embedding
 *   dropout mask, sbh (/t with SP) per micro-batch in flight. Last stage: one head chunk's
 *   logits, 4 R V/t (fp32, the gradient written in place; R = tr_gpt_head_chunk_rows(sb, V/t):
 *   trident's head and loss run over chunks of token rows, inside the forward). Plus
 *   cluster.reserved (CUDA context, communicator buffers).
 *   memory_per_gpu = max over stages; fits when it is <= the rank's capacity.
 * FLOPs (Narayanan et al. 2021): one layer forward for one micro-batch 24bsh^2 + 4bs^2h,
 *   backward twice that, the logits 2bshV forward. Model FLOPs = 3 x forward; hardware adds
 *   the recompute: full = one more forward of every layer (96Bslh^2(1 + s/6h + V/16lh) per
 *   step), selective = the attention core again (4bs^2h per layer). Each rank does 1/t.
 *   Experts: the MLP's FLOPs k times (the active parameters) + the router's GEMM 2bshE (on
 *   every TP rank); model FLOPs and MFU count the active parameters, as Megatron's
 *   num_floating_point_operations does with moe_router_topk (it leaves out the router).
 * Time (GPU presets: a shape model of every kernel; device cpu and a custom GPU without a
 * preset: FLOPs / (peak x gemm_efficiency), ranks on a node sharing the peak, nothing else):
 *   GEMM (M, N, K, batch), bf16 operands (Megatron / cuBLASLt): the best of the tiles
 *           {256x128, 128x256, 128x128, 256x64, 64x256, 128x64, 64x128, 64x64} and split-K
 *           1..16 of  max(compute, memory) + kernel_overhead, where
 *           compute = ceil(tiles x split / SMs) waves x 2 tm tn (K/split + k_overhead) /
 *                     (peak/SMs x gemm_efficiency x min(1, I_tile / tile_intensity)),
 *                     I_tile = tm tn / (tm + tn) FLOP per byte a tile loads (tile
 *                     quantisation: partial tiles cost whole ones; wave quantisation: a
 *                     partial wave costs a whole one);
 *           memory  = 2 batch (MK + KN + MN) bytes (+ fp32 split-K partials) / (HBM bw x
 *                     hbm_efficiency), the regime of thin matrices (attention scores at
 *                     head dim 64-128, small micro-batches).
 *           gemm_efficiency is the top of the curve (a large square GEMM). A measured table
 *           (benchmarks/gemm_shapes, plan/gemm/PRESET.inc, or --gemm-table) corrects the
 *           curve by the measured/model ratio of the nearest measured shapes.
 *   streaming kernels (layernorm, GeLU, bias, dropout, residual, softmax, loss, AdamW):
 *           bytes moved / (HBM bw x hbm_efficiency) + kernel_overhead.
 *   One layer, one micro-batch, one rank (T = b s tokens, e = 2 bytes (4 fp32), R = T h e
 *   (/t with SP) the layernorm-region tensor, S = b a/t s^2 attention scores):
 *     forward  GEMMs QKV (T, 3h/t, h), projection (T, h, h/t), fc1 (T, 4h/t, h),
 *              fc2 (T, h, 4h/t); attention: scores (s, s, h/a) and context (s, h/a, s) over
 *              b a/t batches, softmax 2S e (+ dropout 2S e + S mask); element-wise
 *              2 layernorms 2R each, 2 bias-dropout-adds 3R (+R/e mask), bias-GeLU
 *              2 x 4Th/t e; TP: 2 all-reduces of T h e (SP: all-gather + reduce-scatter).
 *     backward each GEMM twice (input gradient (M, K, N), weight gradient (K, N, M)), the
 *              streaming kernels with 1.5x their forward bytes (softmax: 3S e, dropout
 *              2S e + S), bias gradients, 2 TP all-reduces; plus the recompute: full = the
 *              whole forward again (its TP all-reduces too), selective = the attention core.
 *     grad_accum_fused 0 (Megatron 2021): + every weight's gradient added into the fp32
 *              buffer per micro-batch (10 bytes per weight).
 *     experts: the MLP's GEMMs become E experts' on k T / E rows each (the load assumed
 *              balanced), the MLP's element-wise kernels run on k T rows; the routing part
 *              (plan/costs_moe.c): the router's GEMMs (T, E, h) and its backward's two, its
 *              softmax and top-k, the gathers and weighted scatter-adds of the k T rows, and
 *              the host copies of the routing with their stream syncs (5 a layer forward, an
 *              estimated 10 us + kernel_overhead each + bytes at 25 GB/s; 1 backward).
 *     first stage: embedding lookup, position add, vocab-parallel all-reduce; last stage:
 *              final layernorm, logits GEMM (T, V/t, h) and its two backward GEMMs, the
 *              cross-entropy streaming T V/t fp32 logits (fused and chunked: 4 bytes
 *              forward, 8 backward; 2 TP all-reduces per head chunk).
 *     LoRA (finetune.lora.rank r): the base frozen, so the linear layers' and the head's
 *              backward is their input-gradient GEMM alone; each target's adapter adds its
 *              GEMMs x A^T (T, r, in) and (T, out, r) forward and their input and weight
 *              gradients backward (the flat model: their FLOPs); trident's CUDA kernels
 *              keep no bf16 storage under LoRA (model/gpt_internal.h's rules).
 *   dropout: the layout's `dropout` flag (the config's model.hidden_dropout or
 *           attention_dropout > 0, or --dropout; Megatron's GPT scripts use 0.1 on attention
 *           probabilities and hidden states): Megatron's masks counted; trident stores none
 *           (core/philox.h: one Philox 4x32-10 block, ~90 integer operations, decides 4
 *           elements, recomputed where needed). trident's kernels (GPU presets): each hidden
 *           site (the embedding's, the attention's and the MLP's outputs) is a kernel over
 *           the rank's N h fp32 elements, max(8 bytes an element at the streaming rate,
 *           N h / 4 blocks at int_ops) + overhead, forward and again backward (the mask
 *           recomputed on the gradient), its residual add a kernel of its own (12 bytes an
 *           element) where tp 1 fuses it into the GEMM otherwise; attention dropout adds the
 *           Philox blocks of the causal half of the scores (b a/t s keys / 8) to the fused
 *           attention, once forward and twice backward (its dK dV and dQ passes each decide
 *           them), and keeps the attention's tensors fp32 (no bf16 storage of its output and
 *           qkv). --dropout is both. The flat model (cpu-host) times no element-wise work.
 *   collectives over n ranks, S bytes (ring): all-reduce 2(n-1)/n S/bw + 2(n-1) lat;
 *           reduce-scatter and all-gather (n-1)/n S/bw + (n-1) lat; P2P S/bw + lat.
 *           bw = link x efficiency (NCCL's bus bandwidth): intra-node intra_bw x
 *           intra_efficiency per GPU; inter-node the node's inter_bw x inter_efficiency
 *           shared by every rank of the node running the same collective at once: a group
 *           with k members on each node gets k/ranks_per_node of it (so DP over 32 GPUs of 4
 *           nodes gets 8x what DP over one GPU per node gets). Block placement as in topo/.
 *   pipeline: the pp/ op lists of the schedule, event-simulated (batched rendezvous, or
 *           rendezvous one op at a time when p2p_batched is 0: the semantics of
 *           tr_pp_simulate, by plan/'s own allocation-free engine, checked against
 *           tr_pp_simulate by the tests), with the per-stage forward/backward times
 *           above and a P2P cost per pair of adjacent stages: T h e bytes (/t with SP) over
 *           the link between them; when TP > 1 without SP and the pair is on different
 *           nodes, Megatron's scatter/gather: each TP rank sends 1/t over its own NIC and
 *           the receiver all-gathers over NVLink (runtimes megatron, megatron-2021). Costs
 *           are per stage and chunk: the embedding is the first stage's first chunk's, the
 *           output layer and loss the last stage's last chunk's, and the simulation puts them
 *           on the critical path. Past 4096 stage x chunk x micro-batch units (and 8P
 *           micro-batches) the steady state of the last simulated period is extended to M.
 *   DP: gradients 4 bytes x params_r in the n buckets dp/ makes of the stage's buffer
 *           (tr_dp_layout with ddp_bucket_size_mb in MiB, 2^20 bytes, and the tied
 *           embedding copies aligned as the engine passes them; each timed as 4 params_r / n
 *           bytes), all-reduced (ZeRO-1: reduce-scattered) over the DP group while the LAST
 *           backward of the stage runs (bucket k is ready at k/n of it; buckets go one at a
 *           time) at the bandwidth left by the TP and P2P traffic of that backward on the
 *           same link (collectives sharing a link slow each other); what outlasts that
 *           backward is exposed. Without overlap_grad_reduce all of it is. A bucket size dp/
 *           refuses (more than TR_DP_MAX_BUCKETS buckets) is TR_ERR_CONFIG, as training
 *           would be.
 *   step  = max_r (end of stage r, DP done) + tied-embedding all-reduce (p > 1; 4Vh/t bytes
 *           between the first and last stage) + max_r optimizer step (AdamW streaming
 *           34 bytes per element of the shard in bf16, 32 in fp32, + zeroing 4 bytes per
 *           gradient) + ZeRO-1 parameter all-gather (w x params_r).
 *   tokens/s = B s / step; TFLOP/s per GPU = FLOPs per step / step / W (hardware and model);
 *   MFU = model FLOP/s per rank / peak.
 *   tr_plan_explain() splits the step of every stage into parts that add up to it: compute
 *   by kind (GEMM, attention, element-wise, recompute, output layer + loss, embedding),
 *   exposed communication by group (TP, PP, DP, embedding sync, ZeRO-1 gather), optimizer,
 *   pipeline bubble (waiting on other stages inside the schedule) and idle (waiting for the
 *   slowest stage at the step's synchronisation points).
 * Calibration: the presets' efficiencies (gemm_efficiency, hbm_efficiency, link
 * efficiencies, k_overhead, tile_intensity) are physical constants of the device, set from
 * published curves and fitted once against the published runs in plan/references.c
 * (tr_plan_references; docs/planner.md lists them with sources and errors), never per run.
 * `--calibrate` solves for gemm_efficiency alone from a measured step time.
 * Context parallelism (CP > 1): a rank runs s/CP tokens of each sample (every GEMM and
 *   element-wise kernel), its attention scores them against all s keys (1/CP of the causal
 *   work, load-balanced), and each layer all-gathers the K/V of the sequence over the CP group
 *   forward (b s 2 groups hs / t elements; trident's fp32) and again backward with a
 *   reduce-scatter of their gradient (full recompute: one more gather), over the CP group's
 *   link (CP right after TP in the rank order, topo's tr_topo_init_cp); gradients are reduced
 *   and ZeRO-sharded over DP x CP. Runtime trident plans it only where trident runs it.
 * Expert parallelism (EP > 1, parallel.expert_model_parallel_size; plan/ep.c, Megatron-core
 *   0.8's rules): EP divides DP and the experts, CP 1; an EP group is EP consecutive dp
 *   coordinates of one (tp, pp). A rank runs E/EP experts of every MoE layer (split over TP as
 *   the dense MLP; router, attention, norms, embeddings replicated). Megatron's runtimes hold
 *   only those: their weights, gradients and optimizer state / EP, in a gradient buffer of
 *   their own reduced (ZeRO: sharded, the ZeRO-1 gather too) over EDP = DP/EP, the rest over
 *   DP as before; the two buffers' buckets are timed as one run of their mean length.
 *   trident's engine (model/gpt_moe_ep.c) keeps every expert on every rank (state, reduction
 *   and ZeRO as at EP 1) and sizes its experts' row buffers for the EP k N rows they may
 *   receive ((EP-1) k N (fc + F)/t + EP k N h more floats a layer, as much in the scratch);
 *   Megatron's activations are as at EP 1 (balanced). Per MoE layer and micro-batch: forward
 *   the per-expert counts (4 E bytes) and the rank's k N routed rows (N = b s tokens; b s / t
 *   with Megatron's SP; h elements, fp32 on trident's) out to their experts' owners and the
 *   outputs back, backward the output gradients out and the input gradients back, full
 *   recompute's forward again: all-to-alls over the EP group's link ((m-1)/EP of the bytes
 *   inside a node, (EP-m)/EP over its NICs shared by every rank of the node, m members a node;
 *   EP-1 latencies). Routing balanced (as everywhere here): a rank receives k N rows, its E/EP
 *   experts k N EP/E each (the same FLOPs, larger GEMMs); not counted: the received rows' sort
 *   by local expert, Megatron's TP gather of them under SP. Runtime trident plans EP on the
 *   CPU backend alone (its exchange is host memory over UCX). The search tries every EP
 *   dividing DP and E where the runtime has EP, or the config's when it sets the key.
 * Not modelled: overlap of TP communication with compute, flash attention, CPU-side
 * launch stalls of a Python framework, memory fragmentation beyond `reserved`, an MoE router's
 * load imbalance (balanced experts assumed). */
#ifndef TR_PLAN_H
#define TR_PLAN_H

#include <stdio.h>

#include "pp/pp.h"
#include "topo/topo.h"
#include "yaml/config.h"

/* ---- cluster ---- */

typedef enum { TR_PLAN_DEVICE_GPU = 0, TR_PLAN_DEVICE_CPU = 1 } tr_plan_device;

typedef struct {
    char preset[16];         /* "a100-80gb", "h100-80gb", "h200", "cpu-host" or "custom" */
    int overridden;          /* some key of the config replaced a preset value */
    tr_plan_device device;
    int nodes, gpus_per_node; /* cpu: ranks per node */
    double memory_bytes;     /* per GPU (gpu) / per node, shared by its ranks (cpu) */
    double reserved_bytes;   /* per rank, never available to the model */
    double peak_flops;       /* dense FLOP/s at training precision, per GPU / per node (cpu) */
    double gemm_efficiency;  /* GPU presets: the top of the GEMM curve (a large square GEMM);
                              * flat model: the achievable fraction of peak_flops; (0, 4] */
    double intra_bw;         /* bytes/s per GPU, each direction (NVLink; shared memory) */
    double intra_latency;    /* s */
    double inter_bw;         /* bytes/s per NODE, each direction (all its NICs together) */
    double inter_latency;    /* s */
    /* The device's kernel model (presets; 0 = no shape model: FLOPs / (peak x efficiency)) */
    int sms;                 /* streaming multiprocessors */
    double tile_intensity;   /* FLOP per byte a GEMM tile must reuse to run at full rate */
    double k_overhead;       /* a tile's prologue and epilogue, in K elements */
    double hbm_bw;           /* bytes/s of device memory */
    double hbm_efficiency;   /* fraction of hbm_bw a streaming kernel reaches */
    double kernel_overhead_s; /* per kernel: launch and the gap between kernels */
    double int_ops;          /* 32-bit integer operations a second (the SMs' INT32 lanes x
                              * clock): Philox's dropout masks on trident's kernels; 0 (custom
                              * devices): not timed */
    double intra_efficiency, inter_efficiency; /* NCCL bus bandwidth / link bandwidth */
    /* Measured GEMM times (benchmarks/gemm_shapes) that correct the shape model; NULL: the
     * preset's compiled-in table (plan/gemm/PRESET.inc; may be empty). */
    const struct tr_plan_gemm_row *gemm_table;
    int n_gemm_table;
} tr_plan_cluster;

/* One measured GEMM: C (M x N) = A (M x K) B (K x N), `batch` of them, bf16 in and out,
 * fp32 accumulation; seconds per call. */
typedef struct tr_plan_gemm_row {
    double m, n, k, batch, seconds;
} tr_plan_gemm_row;

/* Seconds of one GEMM / one streaming kernel on the cluster's device (the models above). */
double tr_plan_gemm_s(const tr_plan_cluster *c, double m, double n, double k, double batch);
double tr_plan_stream_s(const tr_plan_cluster *c, double bytes);
/* The analytic curve alone (no measured correction): what the table is compared with. */
double tr_plan_gemm_model_s(const tr_plan_cluster *c, double m, double n, double k,
                            double batch);
/* A measured table as benchmarks/gemm_shapes prints it ("{M, N, K, batch, seconds},"
 * lines; comments and blank lines ignored): *rows malloc'd (free()), TR_ERR_IO /
 * TR_ERR_INVALID naming the file and line. */
TR_MUST_CHECK int tr_plan_gemm_table_read(const char *path, tr_plan_gemm_row **rows, int *n);

/* Names of the presets, NULL-terminated. */
extern const char *const tr_plan_preset_names[];
/* A preset by name; an unknown name is TR_ERR_CONFIG listing the names. */
TR_MUST_CHECK int tr_plan_cluster_preset(const char *name, tr_plan_cluster *out);
/* The config's `cluster` section resolved (preset, then the keys set); TR_ERR_CONFIG when it
 * describes no cluster or an impossible one (message names the key and file position). */
TR_MUST_CHECK int tr_plan_cluster_from_config(const tr_config *cfg, tr_plan_cluster *out);

/* ---- layout ---- */

typedef enum {
    TR_PLAN_RECOMPUTE_NONE = 0,
    TR_PLAN_RECOMPUTE_SELECTIVE = 1,
    TR_PLAN_RECOMPUTE_FULL = 2
} tr_plan_recompute;

/* "none" | "selective" | "full" (else TR_ERR_CONFIG). */
TR_MUST_CHECK int tr_plan_recompute_parse(const char *s, tr_plan_recompute *out);
const char *tr_plan_recompute_name(tr_plan_recompute r);

typedef struct {
    int tp, pp, dp;
    int cp;                  /* context parallelism: each sample's s tokens split over cp
                              * ranks (0 or 1: none); W = DP x CP x TP x PP */
    int ep;                  /* expert parallelism: the experts of every MoE layer split over
                              * ep consecutive dp coordinates (0 or 1: none; divides DP and
                              * model.num_experts, CP 1); W unchanged */
    int v;                   /* model chunks per stage (interleaved), else 1 */
    int micro_batch, global_batch;
    int num_micro_batches;   /* M = ceil(B / (b d)) */
    int batch_ok;            /* B is a multiple of b d */
    tr_pp_kind schedule;
    tr_plan_recompute recompute;
    int distributed_optimizer; /* ZeRO-1 (or any stage >= 1) */
    int zero_stage;          /* parallel.zero_stage 0-3: 2 shards the gradients, 3 also the
                              * weights (memory model only; the time model is ZeRO-1's) */
    int sequence_parallel;
    int bf16;                /* else fp32 */
    double bucket_size_mb;   /* parallel.ddp_bucket_size_mb: MiB (2^20 bytes) of fp32
                              * gradients per bucket, dp/'s meaning; 0 = one bucket */
    int overlap_grad_reduce;
    tr_topo_order order;
    int dropout;             /* dropout on attention probabilities and hidden states (0: none;
                              * the config's dropout > 0, Megatron's scripts: 1; --dropout) */
    /* The software running the layout (cluster.runtime, tr_plan_runtime_apply): */
    int scatter_gather;      /* Megatron's P2P scatter/gather across TP ranks */
    int grad_accum_fused;    /* weight-gradient GEMMs accumulate into the fp32 gradients
                              * (trident, Megatron since 2022); 0: an extra add of every
                              * weight's gradient per micro-batch (Megatron 2021, DeepSpeed) */
    int p2p_batched;         /* a schedule step's sends and receives posted together (trident,
                              * Megatron); 0: one blocking send/recv at a time (DeepSpeed's
                              * pipeline engine) */
    int trident_kernels;     /* trident's kernels (runtime trident): fused attention on both
                              * backends (no scores or probabilities stored, a log-sum-exp per
                              * query row instead, so selective recompute is none) and fp32
                              * activations (bf16: but the GELU output); on a GPU preset in bf16 the step timed kernel by
                              * kernel as written (plan/costs_trident.c: staged GEMMs, unfused
                              * element-wise kernels, chunked head); 0: Megatron's fused
                              * kernels (plan/costs.c) */
} tr_plan_layout;

/* cluster.runtime into L's software flags:
 *   trident        batched P2P of whole tensors, fused gradient accumulation, trident's own
 *                  CUDA kernels (default)
 *   megatron       batched P2P with scatter/gather, fused accumulation (Megatron-LM 2022-)
 *   megatron-2021  batched P2P with scatter/gather, unfused accumulation (SC21's code)
 *   deepspeed      one blocking send/recv at a time of whole tensors, unfused accumulation
 * NULL or "" = trident; anything else TR_ERR_CONFIG naming the values. */
TR_MUST_CHECK int tr_plan_runtime_apply(const char *runtime, tr_plan_layout *L);

/* From the config's parallel/training sections and a world size (>= 1): TR_ERR_CONFIG when W
 * is not a multiple of TP x PP (message names the values). */
TR_MUST_CHECK int tr_plan_layout_from_config(const tr_config *cfg, int world, tr_plan_layout *out);

/* ---- the formulas, one function each (bytes, FLOPs, seconds) ---- */

/* LoRA adapter elements of one TP rank for `layers` layers (finetune.lora: rank r, targets; 0
 * without): qkv and fc A (r, h) whole + B split by rows, attn_proj and fc_proj A split by
 * columns + B (h, r) whole; model/'s adapter table exactly. Under LoRA these alone have
 * gradients and optimizer state; the stage's parameters are the frozen base plus them. */
double tr_plan_stage_adapters(const tr_config *cfg, int tp, int layers);
/* Parameters of one rank of `stage` (see above); `layers` = layers the stage holds. */
double tr_plan_stage_params(const tr_model_config *m, int vocab_padded, int tp, int pp, int stage,
                            int layers);
/* Whole model (embedding counted once) with this padded vocabulary. Both counts equal
 * model/'s tensor table exactly for every shipped config (tests/plan/test_plan_params.c). */
double tr_plan_model_params(const tr_model_config *m, int vocab_padded);
/* The parameters a token runs through: the whole model less, with experts, the E - k experts
 * of every layer it is not routed to (tr_plan_model_params without experts). */
double tr_plan_model_active_params(const tr_model_config *m, int vocab_padded);
/* Mixture of experts (0 without): the bytes one layer keeps for one micro-batch of b sequences
 * beyond the dense MLP's (model/gpt_acts.c): the experts' fc output and activation for k rows
 * a token where the dense MLP has one, (k-1) s b (fc + F)/t x act_bytes; the gathered input
 * rows and the experts' outputs, whole on every TP rank, 2 k s b h x act_bytes; the router's
 * probabilities and log-sum-exps and the routed rows' indices and weights, fp32 / int32:
 * 4 (s b E + s b + 5 k s b). */
double tr_plan_moe_layer_bytes(const tr_model_config *m, int s, int b, int tp, int act_bytes);
/* ... and once per stage, the MoE scratch of the backward (fp32): the router's logits and
 * their gradient 2 s b E, the summed output s b h, the routed rows' gradients k s b (h +
 * (fc + F)/t), their weights' 2 k s b, the balancing loss's E. */
double tr_plan_moe_scratch_bytes(const tr_model_config *m, int s, int b, int tp);
/* Bytes per parameter of weights, gradients and optimizer state. */
void tr_plan_state_bytes(int bf16, int distributed_optimizer, int dp, double *weights,
                         double *grads, double *optimizer);
/* Stored activation bytes of one layer, one micro-batch of b sequences, Megatron's kernels
 * (Korthikanti): GPT-2's widths (qkv 3h, MLP 4h); _model: m's real widths (tr_plan_layer_dims,
 * tr_plan_attention_width) with s / cp tokens a rank (cp <= 1: 1), the scores over all s keys. */
double tr_plan_layer_activation_bytes(int s, int b, int h, int a, int tp, int sequence_parallel,
                                      tr_plan_recompute rc, int bf16);
double tr_plan_layer_activation_bytes_model(const tr_model_config *m, int s, int b, int tp,
                                            int cp, int sequence_parallel,
                                            tr_plan_recompute rc, int bf16);
/* What trident's model keeps (runtime trident: model/gpt_acts.c's tr_gpt_activation_bytes,
 * tensor by tensor, less its 64-byte alignment of each), bytes, for L's micro-batch, TP, SP,
 * CP, recompute, precision and cfg's LoRA. One chunk model holding n layers with k slots
 * keeps k (n layer + slot) + scratch + (full recompute) layer_whole, + embedding_ln x k on
 * the first chunk, + head on the last and head_other on the others, + cp. */
typedef struct {
    double layer;        /* one layer, one micro-batch (full recompute: its output alone) */
    double layer_whole;  /* one layer's every activation (full recompute's buffer) */
    double slot;         /* a micro-batch beyond its layers: token ids, stage input and output */
    double embedding_ln; /* the embedding norm's input and statistics (first chunk) */
    double scratch;      /* once a chunk: backward's gradients, the final norm, losses */
    double head;         /* last chunk: a head chunk's fp32 logits and row statistics (+ the
                          * head's weight in bf16 on trident's bf16 kernels) */
    double head_other;   /* any other chunk: room for its rows' statistics */
    double cp;           /* context parallelism: model/gpt_cp.c's buffers (the sequence's qkv
                          * rows and their gradient, the K/V units packed, gathered and their
                          * gradients, the row maps) */
} tr_plan_trident_acts;
void tr_plan_trident_activations(const tr_config *cfg, const tr_plan_layout *L,
                                 int vocab_padded, tr_plan_trident_acts *out);
/* FLOPs of one layer forward for b sequences (whole layer, all TP ranks together). */
double tr_plan_layer_forward_flops(int s, int b, int h);
/* The same for m's family (GQA's smaller qkv, SwiGLU's three matrices, the MLP width); equal
 * to tr_plan_layer_forward_flops for GPT-2. */
double tr_plan_layer_forward_flops_model(const tr_model_config *m, int s, int b);
/* A layer's matrix widths for m's family: qkv rows (3h; GQA h + 2 groups x head size), the
 * MLP width F (4h unless ffn_hidden_size) and fc's rows (F; 2F with SwiGLU's gate and up). */
void tr_plan_layer_dims(const tr_model_config *m, double *qkv, double *ffn, double *fc);
/* The attention's width for m: heads x head size (h, unless model.kv_channels sets the head
 * size: Gemma-7B's 16 x 256 of hidden 3072): Q's rows, the projection's input. */
double tr_plan_attention_width(const tr_model_config *m);
/* Per step, all ranks: model FLOPs (3 x forward) and hardware FLOPs (with recompute). */
double tr_plan_model_flops(const tr_model_config *m, int vocab_padded, int global_batch);
double tr_plan_hardware_flops(const tr_model_config *m, int vocab_padded, int global_batch,
                              tr_plan_recompute rc);
/* Ring collectives over n ranks of S bytes on a link (bw bytes/s, latency s); n <= 1: 0. */
double tr_plan_allreduce_s(double bytes, int n, double bw, double latency);
double tr_plan_reduce_scatter_s(double bytes, int n, double bw, double latency);
double tr_plan_allgather_s(double bytes, int n, double bw, double latency);
/* Exposed time of n_buckets buckets of `per_bucket` seconds each when bucket k (1..n)
 * becomes ready at k/n of a backward lasting `backward` seconds (overlap on); or all of it. */
double tr_plan_dp_exposed_s(double per_bucket, int n_buckets, double backward, int overlap);

/* ---- prediction ---- */

typedef struct {
    double weights, grads, optimizer; /* model state */
    double activations;               /* stored for the micro-batches in flight */
    double recompute;                 /* one layer re-materialised during backward */
    double embedding, loss;           /* first-stage embedding output; last-stage logits */
    double reserved;
    double total;
} tr_plan_memory;

typedef enum { TR_PLAN_LINK_NONE = 0, TR_PLAN_LINK_INTRA = 1, TR_PLAN_LINK_INTER = 2 } tr_plan_link;
const char *tr_plan_link_name(tr_plan_link l); /* "none", "intra-node", "inter-node" */

typedef struct {
    tr_plan_layout layout;
    int world;
    int vocab_padded;
    double n_params;                 /* whole model */
    double n_active_params;          /* of them, those a token runs through (k of E experts) */
    /* memory */
    int memory_stage;                /* the stage that decides */
    int in_flight;                   /* its peak stored micro-batches (chunks) */
    int stage_layers;                /* its layers */
    tr_plan_memory memory;           /* its breakdown, bytes per rank */
    double stage_memory[TR_PP_MAX_STAGES]; /* total per stage */
    double capacity;                 /* bytes per rank */
    int fits;                        /* memory.total <= capacity */
    int valid;                       /* fits and the batch divides */
    char problem[640];               /* why not valid (empty when valid) */
    /* time of one step */
    double step_time_s;
    double pipeline_s;               /* simulated forward/backward makespan */
    double bubble_fraction;          /* simulated: idle stage-time / (P x makespan) */
    double bubble_fraction_theory;   /* (P-1)/(M+P-1), interleaved (P-1)/(vM+P-1) */
    int slow_stage;                  /* the stage with the largest tf + tb */
    double tf_s, tb_s;               /* its forward / backward of one micro-batch (all chunks) */
    double compute_f_s, compute_b_s; /* their compute part */
    double tp_comm_s;                /* its TP communication per micro-batch, fwd + bwd */
    double cp_comm_s;                /* its CP communication per micro-batch, fwd + bwd */
    double ep_comm_s;                /* its expert all-to-alls per micro-batch, fwd + bwd */
    double p2p_s;                    /* one activation (or gradient) send */
    double dp_comm_s, dp_exposed_s;  /* gradient reduction, total and not hidden */
    int dp_buckets;                  /* buckets of the stage with the most (dp/'s layout) */
    double embed_sync_s, param_gather_s;
    double optimizer_s;              /* the slowest stage's optimizer step */
    tr_plan_link tp_link, pp_link, dp_link, cp_link;
    tr_plan_link ep_link, edp_link;  /* EP > 1: the all-to-all's, the expert gradients' */
    double compute_rate;             /* FLOP/s per rank used for compute */
    /* throughput */
    double tokens_per_step;
    double tokens_per_s;
    double hardware_flops, model_flops; /* per step, all ranks */
    double tflops_per_gpu;           /* hardware FLOPs (recompute counted) */
    double model_tflops_per_gpu;
    double mfu;
    double train_tokens, time_to_train_s;
} tr_plan_result;

/* Where a stage's step goes (tr_plan_explain): compute by kind, exposed communication by
 * group, the optimizer, waits. Per stage the parts add up to the step time. */
typedef enum {
    TR_PLAN_PART_GEMM = 0,    /* the linear layers' GEMMs (QKV, projection, MLP) */
    TR_PLAN_PART_ATTENTION,   /* attention core: score/context GEMMs, softmax, its dropout */
    TR_PLAN_PART_ELEMENTWISE, /* layernorms, GeLU, biases, dropout, residual adds */
    TR_PLAN_PART_RECOMPUTE,   /* forward work repeated in backward (full / selective) */
    TR_PLAN_PART_OUTPUT,      /* final layernorm, output layer and loss (last stage) */
    TR_PLAN_PART_EMBEDDING,   /* embedding lookup and its gradient (first stage) */
    TR_PLAN_PART_ROUTING,     /* mixture of experts: router GEMMs, routing, gathers and
                               * scatters of the routed rows, the host copies and their syncs */
    TR_PLAN_PART_TP,          /* tensor-parallel collectives (not overlapped) */
    TR_PLAN_PART_CP,          /* context parallelism's all-gathers of each layer's K/V (trident:
                               * its qkv rows) and reduce-scatters of their gradient */
    TR_PLAN_PART_EP,          /* expert parallelism's all-to-alls of the routed rows (EP > 1) */
    TR_PLAN_PART_PP,          /* pipeline sends/receives while they transfer */
    TR_PLAN_PART_DP,          /* gradient reduction not hidden behind backward */
    TR_PLAN_PART_EMBED_SYNC,  /* tied-embedding all-reduce (first and last stage) */
    TR_PLAN_PART_ZERO_GATHER, /* ZeRO-1 parameter all-gather */
    TR_PLAN_PART_OPTIMIZER,   /* AdamW step and zeroing gradients */
    TR_PLAN_PART_BUBBLE,      /* waiting on other stages inside the pipeline schedule */
    TR_PLAN_PART_IDLE,        /* waiting for slower stages at the step's sync points */
    TR_PLAN_PARTS
} tr_plan_part;

/* "gemm", "attention", ... (snake case, the JSON keys); label: words for people. */
const char *tr_plan_part_name(tr_plan_part p);
const char *tr_plan_part_label(tr_plan_part p);

typedef struct {
    int P;
    double step_time_s;
    double *parts;          /* [P x TR_PLAN_PARTS]: seconds per step of stage s, part k at
                             * parts[s * TR_PLAN_PARTS + k] */
    tr_plan_memory *memory; /* [P]: memory of each stage by part */
} tr_plan_explain;

/* Memory and time of `layout` for cfg's model on `cluster` with `world` ranks. When
 * time == 0 only the memory part (and the layout/fit fields) is filled (the search's
 * prefilter). train_tokens <= 0: training.train_iters x B x s. */
TR_MUST_CHECK int tr_plan_evaluate(const tr_config *cfg, const tr_plan_layout *layout, int world,
                     const tr_plan_cluster *cluster, int time, double train_tokens,
                     tr_plan_result *out);
/* The config's own layout; world_size <= 0 means nodes x gpus_per_node. This is the call
 * the sweep makes beside each measured point. */
/* The world to plan for: world_size when > 0, else cluster nodes x gpus_per_node (computed
 * without overflow); TR_ERR_CONFIG unless 1 .. TR_TOPO_MAX_WORLD. */
TR_MUST_CHECK int tr_plan_world(const tr_plan_cluster *cluster, int world_size, int *world);
TR_MUST_CHECK int tr_plan_predict(const tr_config *cfg, int world_size, const tr_plan_cluster *cluster,
                    tr_plan_result *out);

/* The prediction (as tr_plan_evaluate with time) and where its time and memory go, stage by
 * stage; free with tr_plan_explain_free. */
TR_MUST_CHECK int tr_plan_explain_layout(const tr_config *cfg, const tr_plan_layout *layout,
                                         int world, const tr_plan_cluster *cluster,
                                         double train_tokens, tr_plan_result *result,
                                         tr_plan_explain *out);
void tr_plan_explain_free(tr_plan_explain *e);
/* Sum of stage s's parts (equals step_time_s). */
double tr_plan_explain_stage_total(const tr_plan_explain *e, int stage);

/* ---- published references (plan/references.c; docs/planner.md) ---- */

typedef enum {
    TR_PLAN_METRIC_TFLOPS = 0, /* hardware TFLOP/s per GPU (recompute counted) */
    TR_PLAN_METRIC_STEP_S = 1  /* seconds per iteration */
} tr_plan_metric;

typedef struct {
    const char *name;     /* "Megatron GPT 1.7B" */
    const char *source;   /* paper, table and URL */
    const char *yaml;     /* the run as a trident config (model, parallel, training, cluster
                           * with the run's runtime) */
    int dropout;          /* the run's dropout (tr_plan_layout.dropout) */
    tr_plan_metric metric;
    double published;     /* in the metric's unit */
} tr_plan_reference;

extern const tr_plan_reference tr_plan_references[];
extern const int tr_plan_n_references;

/* Predict reference i: *predicted in the reference's metric, *error = predicted throughput
 * / published throughput - 1 (for a step time: published / predicted - 1). */
TR_MUST_CHECK int tr_plan_reference_predict(const tr_plan_reference *ref, tr_plan_result *result,
                                            double *predicted, double *error);
/* The table of every reference (predicted, published, error; median and worst) as text. */
TR_MUST_CHECK int tr_plan_print_references(FILE *f);

/* ---- calibration ---- */

/* Median ms_per_iter of a metrics.jsonl (the first iteration is skipped when there are
 * more); TR_ERR_IO / TR_ERR_INVALID naming the file and line. */
TR_MUST_CHECK int tr_plan_read_measured_step(const char *metrics_path, double *step_s, int *n_points);
/* The gemm_efficiency that makes the predicted step time of cfg on `cluster` equal
 * measured_step_s (bisection; the rest of the model unchanged). TR_ERR_INVALID when no
 * efficiency in (0, 4] explains the measurement (communication alone is slower). */
TR_MUST_CHECK int tr_plan_calibrate(const tr_config *cfg, int world_size, const tr_plan_cluster *cluster,
                      double measured_step_s, double *efficiency);

/* ---- search ---- */

typedef struct {
    tr_plan_layout layout;
    char reason[640];
} tr_plan_rejected;

typedef struct {
    int world;
    int n_candidates;
    int n_fit;
    tr_plan_result *fit;         /* [n_fit], best tokens/s first */
    int n_rejected;
    tr_plan_rejected *rejected;  /* [n_rejected], in enumeration order */
    int config_rank;             /* 1-based rank of the config's own layout in fit, 0 if absent */
    tr_plan_result config_result; /* the config's own layout, evaluated */
    double seconds;              /* wall time of the search */
} tr_plan_search_result;

/* Sequences of at least this many tokens are searched with context parallelism too. */
#define TR_PLAN_CP_SEARCH_MIN_SEQ 8192
/* All layouts of `world` ranks: TP | heads, hidden and W; CP a power of two | W/TP with
 * 2 CP | s (when s >= TR_PLAN_CP_SEARCH_MIN_SEQ or the config sets CP > 1; else CP 1; on
 * runtime trident only where trident's CP runs: fp32 on the CPU); PP | W/(TP CP), PP <= layers;
 * EP a divisor of d dividing the experts where the runtime has EP (plan_ep_choices; the
 * config's when it sets parallel.expert_model_parallel_size); micro-batch a power of two (or
 * the config's) with B % (b d) == 0; recompute none, selective, full; ZeRO-1 off/on (on only
 * when d > 1). Schedule, v, SP, precision, buckets come from the config. */
TR_MUST_CHECK int tr_plan_search(const tr_config *cfg, int world, const tr_plan_cluster *cluster,
                   tr_plan_search_result *out);
void tr_plan_search_free(tr_plan_search_result *r);

/* ---- reports (text for people, JSON for programs) ---- */

/* "TP4 PP12 DP8 mb2 full zero1" */
int tr_plan_layout_label(const tr_plan_layout *l, char *buf, size_t n);
void tr_plan_print(FILE *f, const tr_config *cfg, const tr_plan_cluster *c,
                   const tr_plan_result *r);
void tr_plan_write_json(FILE *f, const tr_config *cfg, const tr_plan_cluster *c,
                        const tr_plan_result *r);
void tr_plan_print_search(FILE *f, const tr_config *cfg, const tr_plan_cluster *c,
                          const tr_plan_search_result *s, int top);
void tr_plan_write_search_json(FILE *f, const tr_config *cfg, const tr_plan_cluster *c,
                               const tr_plan_search_result *s, int top);
/* --explain: the table of where each stage's step and memory go; JSON of the same; an SVG
 * of stacked bars (one per stage: time parts, then memory parts), in the sweep's style. */
void tr_plan_print_explain(FILE *f, const tr_plan_cluster *c, const tr_plan_result *r,
                           const tr_plan_explain *e);
void tr_plan_write_explain_json(FILE *f, const tr_config *cfg, const tr_plan_cluster *c,
                                const tr_plan_result *r, const tr_plan_explain *e);
TR_MUST_CHECK int tr_plan_write_explain_svg(FILE *f, const tr_plan_cluster *c,
                                            const tr_plan_result *r, const tr_plan_explain *e,
                                            const char *title);

#endif
