/* What one micro-batch costs one rank on trident's CUDA backend as it is written today
 * (cluster.runtime trident, a GPU preset, bf16): kernels/cuda's ops one by one, each timed by
 * the device model (device.c: GEMMs by shape and the measured table, streaming kernels by
 * their bytes). costs.c models Megatron's fused kernels instead (the other runtimes); the
 * difference is what issue 24 still has to remove:
 *  - weights, the residual stream and most gradients are fp32 in memory: a bf16-mode GEMM
 *    converts its fp32 operands into a bf16 staging buffer (4 bytes read, 2 written per
 *    element), in slabs along K when they do not fit it (each slab a GEMM of its own), and
 *    writes an fp32 output (read again when it accumulates: beta = 1). Kept in bf16 and read
 *    in place (the model's gpt_*16 rules, no LoRA): the norms' outputs, the attention output
 *    and its input qkv with their gradient (but with rope), fc's output and its gradient, the
 *    GELU output (fc's output and qkv written bf16 by their GEMMs);
 *  - LayerNorm is a kernel of its own (its backward one pass over dout and x for the input
 *    gradient and the parameter sums); the GELU rides in fc's GEMM's epilogue (GELU_AUX_BIAS:
 *    its input written beside as aux) and in fc_proj's input-gradient GEMM's (DGELU, reading
 *    that aux; where fc's output is bf16); the linear layers' bias adds ride in the GEMM's
 *    epilogue and their residual is its C input (but the row-parallel ones under TP),
 *    their bias gradients in the pass that converts the output gradient to bf16 (but the
 *    row-parallel ones under SP), or where that gradient is bf16 already (QKV's and fc's) in
 *    the weight gradient's GEMM (cuBLASLt's BGRADB epilogue);
 *  - attention is the fused (flash) kernel: no T x T tensor, forward 2 s^2 d FLOPs per head
 *    (causal half of QK^T and PV), backward 2.5 times that, at fractions of the device's
 *    peak (below: estimated for the tensor-core kernels, to be measured);
 *  - the LM head and loss run over chunks of token rows (twice tr_gpt_head_chunk_rows, in
 *    bf16), the head's weight converted to bf16 once for all of them: per chunk the logits
 *    GEMM, one read for the statistics (at TP 1 none: the loss and gradient pass finds
 *    them), the loss and gradient in place, and the chunk's two backward GEMMs, the logits
 *    and their gradient stored in bf16.
 * Sizes: T = b s token rows, h hidden, t TP ranks. */
#include <math.h>
#include <string.h>

#include "core/core.h"
#include "model/gpt.h"
#include "plan/plan_internal.h"

/* kernels/cuda/gemm.c's staging buffer (tr_cuda_staging_bytes for one rank on a GPU of this
 * memory: 1/64 of it in [64, 512] MiB) */
static double staging_bytes(const tr_plan_cluster *c)
{
    double b = c->memory_bytes / 64, MiB = 1048576.0;
    return b < 64 * MiB ? 64 * MiB : b > 512 * MiB ? 512 * MiB : b;
}

/* Fractions of peak bf16 FLOP/s the bf16 mode's fused attention reaches on the FLOPs
 * modelled below, less the streams subtracted there: kernels/cuda/flash_mma.cuh (mma.sync
 * with ldmatrix fragments, cp.async double-buffered tiles; head sizes 16 to 128) measured on
 * an H200 (2026-11-27, gpt2-124m at micro-batch 128 x 1024, gpu_step --profile in
 * scripts/gpu-check.sh at f6b90ed): forward 13.83 ms for 2.47 TFLOP (0.18 of peak),
 * backward 53.72 ms for 6.18 TFLOP (0.12 of peak; 7 tile products where FlashAttention-2
 * does 5: dQ has its own pass, no atomics). With these the plan of that step gives attention
 * 67.55 ms, as measured. (The wmma kernels before them: 0.0114 and 0.0078 on an H100.) */
#define TRIDENT_ATTENTION_FORWARD_FRACTION 0.149
#define TRIDENT_ATTENTION_BACKWARD_FRACTION 0.099

/* Integer operations of one Philox 4x32-10 block (core/philox.h) as the GPU runs it, an
 * estimate from its source (not measured): 10 rounds of two 32 x 32 -> 64-bit multiplies (4
 * IMAD), two three-way xors and the two key additions, then the counter, the threshold
 * compares and the selects of its 4 decisions. */
#define PLAN_PHILOX_OPS 90.0

double plan_philox_s(const tr_plan_cluster *c, double blocks)
{
    return c->int_ops > 0 ? blocks * PLAN_PHILOX_OPS / c->int_ops : 0;
}

double plan_trident_dropout_s(const tr_plan_cluster *c, double n)
{
    if (!plan_shape_model(c) || n <= 0)
        return 0;
    double bytes = 8 * n / (c->hbm_bw * c->hbm_efficiency), philox = plan_philox_s(c, n / 4);
    return (bytes > philox ? bytes : philox) + c->kernel_overhead_s;
}

/* One slab of K width w: its two conversions, its bf16 GEMM, the fp32 output's extra bytes. */
static double slab_s(const tr_plan_cluster *c, double m, double n, double w, int beta)
{
    return tr_plan_stream_s(c, 6 * (m * w + w * n)) + tr_plan_gemm_s(c, m, n, w, 1) +
           tr_plan_stream_s(c, m * n * (beta ? 6.0 : 2.0));
}

/* One bf16-mode GEMM C (m x n) = A (m x k) B (k x n) on fp32 operands (gemm.c's staging):
 * per slab of K the two conversions, the bf16 GEMM, and the fp32 output's extra bytes over
 * the table's bf16 output (2 more written, 4 read when it accumulates). */
double plan_trident_gemm_s(const tr_plan_cluster *c, double m, double n, double k, int accumulate)
{
    double cap = staging_bytes(c) / 2 - 128, kc = floor(cap / (m + n));
    if (kc >= 64)
        kc = floor(kc / 64) * 64;
    if (kc < 1)
        kc = 1;
    if (kc > k)
        kc = k;
    /* slabs: the first (beta as asked), full ones after it (beta 1, all alike), the rest */
    double full = floor(k / kc), rest = k - full * kc;
    double first_w = full > 0 ? kc : rest, t = slab_s(c, m, n, first_w, accumulate);
    if (full > 1)
        t += (full - 1) * slab_s(c, m, n, kc, 1);
    if (full > 0 && rest > 0)
        t += slab_s(c, m, n, rest, 1);
    return t;
}

/* A linear layer y (T x n) = x (T x k) W^T: forward is one GEMM (beta 1 onto a copied
 * residual for the row-parallel ones at TP 1), backward dx (beta 0) and dW (accumulating). */
static double linear_b(const tr_plan_cluster *c, double T, double n, double k)
{
    return plan_trident_gemm_s(c, T, k, n, 0) + plan_trident_gemm_s(c, n, k, T, 1);
}

/* one bf16-mode GEMM on fp32 operands (plan_lora_cost's adapters) */
static double adapter_gemm_s(const tr_plan_cluster *c, double m, double n, double k, int acc)
{
    return plan_trident_gemm_s(c, m, n, k, acc);
}

void plan_layer_cost_trident(const plan_cost_ctx *x, plan_cost *o)
{
    const tr_model_config *m = x->m;
    const tr_plan_layout *L = x->L;
    const tr_plan_cluster *c = x->c;
    double s = m->seq_length, b = L->micro_batch, h = m->hidden_size, a = m->num_attention_heads;
    double aw = tr_plan_attention_width(m); /* heads x head size (h unless kv_channels) */
    double t = L->tp, T = b * s, d = aw / a, heads = b * a / t;
    int sp = L->sequence_parallel && L->tp > 1, row_copy = L->tp == 1;
    double qkv, F, fc;
    tr_plan_layer_dims(m, &qkv, &F, &fc);
    double R = T * h * 4 / (sp ? t : 1); /* a layernorm-region fp32 tensor, bytes */
    double gelu_in = fc > F ? 2.0 : 1.0;  /* SwiGLU reads gate and up */
    /* a layer's two reductions each way; the parallel residual's forward one (the projections'
     * partial products summed first: tp/'s tr_tp_row_reduce) */
    double tp_back = 2 * x->ar_tp, tp_parts = (m->parallel_residual ? 1 : 2) * x->ar_tp;
    plan_cost_clear(o);
    o->f[TR_PLAN_PART_TP] = tp_parts;
    o->b[TR_PLAN_PART_TP] = tp_back;
    /* the GELU output in bf16 storage (model/gpt_internal.h's gpt_gelu16; the time model
     * assumes no LoRA): fc_proj reads it without converting it, forward and weight gradient,
     * and GELU writes 2 bytes less */
    /* (LoRA: none of the bf16-storage rules holds, model/gpt_internal.h; the base frozen) */
    int lora = plan_lora(x);
    /* (with experts none of the MLP's and norms' bf16 storage: gpt_internal.h's rules) */
    int moe = plan_moe(x);
    double g16 = fc > F || lora || moe ? 0 : T * F / t; /* its elements (SwiGLU keeps fp32) */
    /* and fc's output, GELU's input (gpt_fch16): fc's GEMM writes bf16, both GELU ops read
     * 2 bytes less */
    double f16 = g16;
    /* and fc_proj's input gradient (gpt_dact16): its GEMM writes bf16, GELU's backward reads
     * 2 bytes less */
    double da16 = g16;
    /* the norms' outputs likewise (gpt_ln16): QKV and fc read them without converting them,
     * forward and weight gradient, and the norms write 2 bytes less */
    double l16 = (int)h % 2 == 0 && !lora && !moe ? 2 * T * h : 0;
    /* and the attention output (gpt_atty16: aw/t even): the projection reads it without
     * converting it, forward and weight gradient; attention writes it, and its backward reads
     * it, 2 bytes an element less */
    /* (not with attention dropout: its fp32 ops, gpt_atty16) */
    int attn_drop = plan_attention_dropout(x), hidden_drop = plan_hidden_dropout(x);
    double a16 = (long)(aw / t) % 2 == 0 && !lora && !attn_drop ? T * aw / t : 0;
    /* and its input qkv and their gradient dqkv (gpt_qkv16: where the attention output is, and
     * no rope rotates them in place): QKV's GEMM writes qkv 2 bytes an element less, the
     * attention reads it 2 bytes less in forward and in each of its backward's two kernels and
     * writes dqkv 2 less, which QKV's linear_backward reads without converting it (its bias
     * gradient in the weight gradient's GEMM: cuBLASLt's BGRADB epilogue) */
    int rope = m->position_embedding_type && !strcmp(m->position_embedding_type, "rope");
    double q16 = a16 > 0 && !rope ? T * qkv / t : 0;
    /* and with them the attention output's gradient (the projection's linear_backward writes
     * it bf16, dx16: 2 bytes an element less; the attention backward reads it 2 less in its
     * row sums and in each of its two kernels) */
    double dat16 = q16 > 0 ? T * aw / t : 0;
    /* QKV, projection, fc, fc_proj (the row-parallel two onto the residual) */
    /* the GELU in the GEMMs' epilogues (kernels.h's linear_gelu_forward16 and
     * linear_backward_gelu16, where fc's output is bf16): fc's GEMM writes its bf16 input
     * (aux) beside its output and the GELU pass (read 2, write 2) goes; backward, fc_proj's
     * input-gradient GEMM reads the aux and writes fc's output gradient, the GELU's backward
     * pass (read 4, write 2) goes (fc's bias gradient rides in fc's weight-gradient GEMM:
     * cuBLASLt's BGRADB epilogue, as QKV's); not the exact GELU (model.gelu_approximate
     * none) nor ReLU (model.relu), which no epilogue of trident's has: their own passes */
    int own_pass = m->relu || (m->gelu_approximate && !strcmp(m->gelu_approximate, "none"));
    double gelu_fused = f16 > 0 && !own_pass ? T * F / t : 0;
    /* the MLP's two linears, or the experts' GEMMs (the table's plain gemm, no epilogues) and
     * the routing (costs_moe.c; with experts the MLP's rows are k a token) */
    double mlp_f = plan_trident_gemm_s(c, T, fc / t, h, 0) +
                   plan_trident_gemm_s(c, T, h, F / t, row_copy);
    double mlp_b = linear_b(c, T, fc / t, h) + linear_b(c, T, h, F / t) -
                   tr_plan_stream_s(c, 6 * T * h) - tr_plan_stream_s(c, 6 * T * fc / t);
    double route_f = 0, route_b = 0, rows = T;
    if (moe) {
        plan_moe_expert_gemms(x, T, plan_trident_gemm_s, &mlp_f, &mlp_b);
        plan_moe_routing_cost(x, T, 4, plan_trident_gemm_s, &route_f, &route_b);
        rows = m->moe_router_topk * T;
    }
    double lin_f = tr_plan_stream_s(c, 2 * gelu_fused) + plan_trident_gemm_s(c, T, qkv / t, h, 0) +
                   plan_trident_gemm_s(c, T, h, aw / t, row_copy) + mlp_f -
                   tr_plan_stream_s(c, 6 * g16) -
                   tr_plan_stream_s(c, 6 * l16) - tr_plan_stream_s(c, 6 * a16) -
                   tr_plan_stream_s(c, 2 * f16) - tr_plan_stream_s(c, 2 * q16);
    /* (kernels.h's linear_backward converts a layer's output gradient once for its two GEMMs:
     * QKV, projection, fc and fc_proj) */
    /* fc's output gradient in bf16 storage (gpt_dgelu16: gelu_backward16 writes it, fc's
     * linear_backward reads it without converting it) */
    double dg16 = fc > F || lora ? 0 : T * F / t;
    /* the norms' output gradients, QKV's and fc's input gradients where their output gradient
     * is bf16, at TP 1 (gpt_dln16): the two GEMMs write them 2 bytes an element less, the
     * norms' backward reads them 2 less */
    double dln16 = moe ? 0 : (t == 1 && q16 > 0 ? T * h : 0) + (t == 1 && dg16 > 0 ? T * h : 0);
    double lin_b = tr_plan_stream_s(c, 2 * gelu_fused) + linear_b(c, T, qkv / t, h) +
                   linear_b(c, T, h, aw / t) + mlp_b -
                   tr_plan_stream_s(c, 6 * g16) - tr_plan_stream_s(c, 6 * l16) -
                   tr_plan_stream_s(c, 6 * T * qkv / t) - tr_plan_stream_s(c, 6 * T * h) -
                   tr_plan_stream_s(c, 6 * dg16) - tr_plan_stream_s(c, 6 * a16) -
                   tr_plan_stream_s(c, 6 * q16) - tr_plan_stream_s(c, 2 * da16) -
                   tr_plan_stream_s(c, 2 * dln16) - tr_plan_stream_s(c, 2 * dat16);
    if (lora) { /* the frozen base: each linear's input gradient alone; the adapters */
        double ad_f, ad_b;
        plan_lora_cost(x, T, adapter_gemm_s, &ad_f, &ad_b);
        lin_f += ad_f;
        lin_b = plan_trident_gemm_s(c, T, h, qkv / t, 0) + plan_trident_gemm_s(c, T, aw / t, h, 0) +
                plan_trident_gemm_s(c, T, h, fc / t, 0) + plan_trident_gemm_s(c, T, F / t, h, 0) +
                ad_b;
    }
    /* fused attention: forward 2 (QK^T, PV) x 2 s^2 d / 2 (causal) per head, backward 2.5x;
     * context parallelism: s local rows against sk keys, 1/CP of the causal work */
    double att_flops = heads * 2.0 * s * plan_keys(x) * d;
    double att_f = att_flops / (c->peak_flops * TRIDENT_ATTENTION_FORWARD_FRACTION) -
                   tr_plan_stream_s(c, 2 * a16) - tr_plan_stream_s(c, 2 * q16);
    double att_b = 2.5 * att_flops / (c->peak_flops * TRIDENT_ATTENTION_BACKWARD_FRACTION) -
                   tr_plan_stream_s(c, 2 * a16) - tr_plan_stream_s(c, 3 * 2 * q16) -
                   tr_plan_stream_s(c, 3 * 2 * dat16);
    if (attn_drop) { /* the causal half's decisions, a block a 4: forward, dK dV, dQ */
        double blocks = heads * s * plan_keys(x) / 8;
        att_f += plan_philox_s(c, blocks);
        att_b += 2 * plan_philox_s(c, blocks);
    }
    /* forward: 2 layernorms (read x, write y), bias adds (read and write the output) of
     * qkv, projection, fc and fc_proj, the residual copies before the row-parallel GEMMs
     * (tp 1; else the reduction's add: read 2, write 1), GELU / SwiGLU */
    /* (the biases ride in cuBLASLt's epilogue, kernels.h's linear_forward: all four with
     * t = 1; with t > 1 the row-parallel two are added after the reduction) */
    double bias = t > 1 ? 2 * R * 2 : 0;
    /* (tp 1: the residual is the GEMM's C input, y its output: no copy) */
    /* (with experts at tp 1 the weighted sum's reduction adds the residual: read 2, write 1) */
    double resid = row_copy ? (moe ? 3 * R : 0) : 2 * 3 * R;
    double el_f = 2 * 2 * R + bias + resid + rows * F / t * 4 * (gelu_in + 1) - 2 * g16 -
                  2 * l16 - 2 * f16 - 4 * gelu_fused;
    /* backward: 2 layernorm backwards (one read of dout and x, dx read and written: 4 x 4
     * bytes; the weight sums gathered in the same pass, layernorm.cu), the activation's
     * backward (read its input and dout, write din: 2 bytes less
     * where bf16), the bias gradients: summed where their gradient is converted for the
     * GEMMs (kernels.h's linear_backward, gelu_backward16), but the row-parallel two under SP
     * (their own read of dout) */
    double el_b = 2 * 4 * R + (sp ? 2 * R : 0) + rows * F / t * 4 * (2 * gelu_in + 1) -
                  2 * dg16 - 2 * f16 - 2 * da16 - 2 * dln16 - 6 * gelu_fused;
    o->f[TR_PLAN_PART_GEMM] = lin_f;
    o->b[TR_PLAN_PART_GEMM] = lin_b;
    o->f[TR_PLAN_PART_ATTENTION] = att_f;
    o->b[TR_PLAN_PART_ATTENTION] = att_b;
    if (lora) { /* (tp/linear.c's adapter paths: the row-parallel two copy the residual and add
                 * their bias after the GEMM, each a read and a write; the frozen linears' bias
                 * gradients sum their fp32 output gradient apart) */
        el_f += 2 * 4 * R;
        el_b += 4 * T * (qkv / t + fc / t) + 2 * R;
    }
    o->f[TR_PLAN_PART_ELEMENTWISE] = tr_plan_stream_s(c, el_f);
    o->b[TR_PLAN_PART_ELEMENTWISE] = tr_plan_stream_s(c, el_b);
    if (hidden_drop) { /* the attention's and the MLP's outputs (gpt_dropout_add), their
                        * residual adds apart where tp 1 had them in the GEMM (without
                        * experts); backward the masks again on the gradients */
        double n = R / 4;
        o->f[TR_PLAN_PART_ELEMENTWISE] += 2 * plan_trident_dropout_s(c, n) +
                                          (row_copy && !moe ? 2 * tr_plan_stream_s(c, 3 * R) : 0);
        o->b[TR_PLAN_PART_ELEMENTWISE] += 2 * plan_trident_dropout_s(c, n);
    }
    o->f[TR_PLAN_PART_ROUTING] = route_f;
    o->b[TR_PLAN_PART_ROUTING] = route_b;
    if (L->recompute == TR_PLAN_RECOMPUTE_FULL) {
        o->b[TR_PLAN_PART_RECOMPUTE] = lin_f + att_f + o->f[TR_PLAN_PART_ELEMENTWISE] + route_f;
        o->b[TR_PLAN_PART_TP] += tp_parts;
    } /* selective: nothing to recompute (no T x T tensor is kept) */
}

/* One of the head's GEMMs in bf16 storage (kernels/cuda/gemm.c's cu_gemm_out16, cu_gemm_a16):
 * the fp32 operands converted (6 bytes an element; staged whole, the bf16 operands read in
 * place), the bf16 GEMM, and an fp32 output's extra bytes over the table's bf16 output. */
static double head16_gemm_s(const tr_plan_cluster *c, double m, double n, double k, int a_fp32,
                            int b_fp32, int out_fp32, int accumulate)
{
    return tr_plan_gemm_s(c, m, n, k, 1) + (a_fp32 ? tr_plan_stream_s(c, 6 * m * k) : 0) +
           (b_fp32 ? tr_plan_stream_s(c, 6 * k * n) : 0) +
           (out_fp32 ? tr_plan_stream_s(c, m * n * (accumulate ? 6.0 : 2.0)) : 0);
}

void plan_output_cost_trident(const plan_cost_ctx *x, plan_cost *o)
{
    const tr_plan_layout *L = x->L;
    const tr_plan_cluster *c = x->c;
    double T = (double)L->micro_batch * x->m->seq_length, h = x->m->hidden_size;
    double V = (double)x->vocab_padded / L->tp;
    int sp = L->sequence_parallel && L->tp > 1;
    double R = T * h * 4 / (sp ? L->tp : 1);
    plan_cost_clear(o);
    /* bf16 storage: chunks of twice the rule's rows in the same buffer (tp/vocab.c) */
    double rows = 2.0 * tr_gpt_head_chunk_rows((int)T, (int)V);
    double chunks = ceil(T / (rows < T ? rows : T)), r = T / chunks;
    /* W converted to bf16 once for every chunk (tp/vocab.c's W16: kernels.h's narrow16), then
     * per chunk, the logits and their gradient in bf16 (gemm_mixed16 ...): the logits GEMM
     * (r x V, x converted, a bf16 output), the statistics' read (but at TP 1:
     * xent_stats_loss_backward16 finds them in its one pass), the loss and gradient in place,
     * the input gradient (r x h: dlogits and W16 read as they are) and the weight gradient
     * (V x h, accumulating: x converted); trident runs the head's backward inside its
     * forward: all of it is forward time here */
    double w16 = tr_plan_stream_s(c, 6 * V * h);
    double stats = L->tp > 1 ? tr_plan_stream_s(c, 2 * r * V) : 0;
    double per = head16_gemm_s(c, r, V, h, 1, 0, 0, 0) + stats + tr_plan_stream_s(c, 4 * r * V) +
                 head16_gemm_s(c, r, h, V, 0, 0, 1, 0) +
                 (plan_lora(x) ? 0 : head16_gemm_s(c, V, h, r, 0, 1, 1, 1)); /* (frozen: no dW) */
    double ce_ar = 2.0 * chunks * tr_plan_allreduce_s(4.0 * r, L->tp, x->tp_bw, x->tp_lat);
    /* the final layernorm forward and backward (one pass, as the layers') */
    o->f[TR_PLAN_PART_OUTPUT] = w16 + chunks * per + tr_plan_stream_s(c, 2 * R + 4 * R);
    o->f[TR_PLAN_PART_TP] = ce_ar;
    o->b[TR_PLAN_PART_TP] = x->ar_tp; /* the input gradient of the vocabulary-parallel GEMM */
}
