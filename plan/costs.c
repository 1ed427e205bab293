/* What one micro-batch costs one rank, kernel by kind: a transformer layer (forward,
 * backward, recompute), the first stage's embedding, the last stage's output layer and loss.
 * GPU presets time every GEMM with the shape model and every streaming kernel by its bytes
 * (device.c); the flat model (cpu, custom GPU) divides FLOPs by one rate, as before. The
 * kernel list is Megatron's GPT layer with its fused kernels (see plan/plan.h). */
#include "core/core.h"
#include "model/gpt.h"
#include "plan/plan_internal.h"

int plan_shape_model(const tr_plan_cluster *c)
{
    return c->device == TR_PLAN_DEVICE_GPU && c->sms > 0 && c->hbm_bw > 0;
}

/* A linear layer Y (M x N) = X (M x K) W (K x N): forward, and backward dX and dW (dX alone
 * where the weight is frozen: LoRA's base). */
static double gemm_f(const tr_plan_cluster *c, double m, double n, double k)
{
    return tr_plan_gemm_s(c, m, n, k, 1);
}

static double gemm_b_of(const tr_plan_cluster *c, double m, double n, double k, int frozen)
{
    return tr_plan_gemm_s(c, m, k, n, 1) + (frozen ? 0 : tr_plan_gemm_s(c, k, n, m, 1));
}

/* one GEMM's FLOPs (the flat model divides them by its rate); one GEMM's time by the shape
 * model (Megatron's kernels add onto an output at no extra cost here) */
static double gemm_flops(const tr_plan_cluster *c, double m, double n, double k, int acc)
{
    (void)c, (void)acc;
    return 2 * m * n * k;
}

static double gemm_acc_s(const tr_plan_cluster *c, double m, double n, double k, int acc)
{
    (void)acc;
    return tr_plan_gemm_s(c, m, n, k, 1);
}

void plan_lora_cost(const plan_cost_ctx *x, double T,
                    double (*gemm_s)(const tr_plan_cluster *c, double M, double N, double K,
                                     int accumulate),
                    double *fwd, double *bwd)
{
    const tr_plan_cluster *c = x->c;
    double qkv, F, fc, h = x->m->hidden_size, t = x->L->tp, r = x->ft ? x->ft->lora_rank : 0;
    tr_plan_layer_dims(x->m, &qkv, &F, &fc);
    double aw = tr_plan_attention_width(x->m);
    /* this rank's in and out features of each target (column-parallel: out split; row: in) */
    double in[4] = {h, aw / t, h, F / t}, out[4] = {qkv / t, h, fc / t, h};
    *fwd = *bwd = 0;
    for (int k = 0; plan_lora(x) && k < 4; k++) {
        if (!plan_lora_target(x->ft, k))
            continue;
        *fwd += gemm_s(c, T, r, in[k], 0) + gemm_s(c, T, out[k], r, 1);
        /* dX and dW of both factors: d(x A^T) = dy B, dB +=, dx += d(x A^T) A, dA += */
        *bwd += gemm_s(c, T, r, out[k], 0) + gemm_s(c, out[k], r, T, 1) +
                gemm_s(c, T, in[k], r, 1) + gemm_s(c, r, in[k], T, 1);
    }
}

void plan_layer_cost(const plan_cost_ctx *x, plan_cost *o)
{
    const tr_model_config *m = x->m;
    const tr_plan_layout *L = x->L;
    const tr_plan_cluster *c = x->c;
    if (plan_trident_kernels(x)) {
        plan_layer_cost_trident(x, o);
        return;
    }
    plan_cost_clear(o);
    double s = m->seq_length, b = L->micro_batch, h = m->hidden_size, a = m->num_attention_heads;
    double t = L->tp;
    int sp = L->sequence_parallel && L->tp > 1;
    o->f[TR_PLAN_PART_TP] = 2 * x->ar_tp;
    o->b[TR_PLAN_PART_TP] = 2 * x->ar_tp;
    if (!plan_shape_model(c)) {
        double aw = tr_plan_attention_width(m), keys = plan_keys(x);
        /* (context parallelism: the local queries against every key, 1/CP of the causal work) */
        double f1 = (tr_plan_layer_forward_flops_model(m, m->seq_length, L->micro_batch) +
                     4.0 * b * s * (keys - s) * aw) / t;
        if (plan_moe(x)) /* the router's GEMM is replicated: every rank makes all of it */
            f1 += (1 - 1 / t) * 2.0 * b * s * h * m->num_experts;
        double b1 = 2 * f1, af, ab;
        if (plan_lora(x)) { /* the frozen linears' weight gradients go, the adapters come */
            double qkv, F, fc, T = (double)L->micro_batch * m->seq_length;
            tr_plan_layer_dims(m, &qkv, &F, &fc);
            plan_lora_cost(x, T, gemm_flops, &af, &ab);
            b1 += -2 * T * h * (qkv + tr_plan_attention_width(m) + fc + F) / t + ab;
            f1 += af;
        }
        o->f[TR_PLAN_PART_GEMM] = f1 / x->rate;
        o->b[TR_PLAN_PART_GEMM] = b1 / x->rate;
        if (L->recompute == TR_PLAN_RECOMPUTE_FULL) {
            o->b[TR_PLAN_PART_RECOMPUTE] = f1 / x->rate;
            o->b[TR_PLAN_PART_TP] += 2 * x->ar_tp;
        } else if (L->recompute == TR_PLAN_RECOMPUTE_SELECTIVE && !L->trident_kernels) {
            o->b[TR_PLAN_PART_RECOMPUTE] = 4.0 * b * s * keys * aw / t / x->rate;
        }
        return;
    }
    double T = b * s, e = L->bf16 ? 2.0 : 4.0;
    double qkv, F, fc; /* GPT-2: 3h, 4h, 4h; GQA's smaller qkv, SwiGLU's 2F-wide fc */
    tr_plan_layer_dims(m, &qkv, &F, &fc);
    double aw = tr_plan_attention_width(m);  /* heads x head size */
    double R = T * h * e / (sp ? t : 1);      /* layernorm-region tensor, bytes */
    double mask = L->dropout ? R / e : 0;     /* one byte per element */
    int moe = plan_moe(x);
    double rows = moe ? m->moe_router_topk * T : T; /* the MLP's rows: k a token with experts */
    double I = rows * fc / t * e;             /* the MLP's intermediate, bytes */
    double heads = b * a / t, d = aw / a;     /* batched attention */
    double sk = plan_keys(x);                 /* keys (CP: the whole sequence's) */
    double S = heads * s * sk;                /* scores, elements */

    int frozen = plan_lora(x);
    double mlp_f = gemm_f(c, T, fc / t, h) + gemm_f(c, T, h, F / t);
    double mlp_b = gemm_b_of(c, T, fc / t, h, frozen) + gemm_b_of(c, T, h, F / t, frozen);
    double route_f = 0, route_b = 0;
    if (moe) {
        plan_moe_expert_gemms(x, T, gemm_acc_s, &mlp_f, &mlp_b);
        plan_moe_routing_cost(x, T, e, gemm_acc_s, &route_f, &route_b);
    }
    double lin_f = gemm_f(c, T, qkv / t, h) + gemm_f(c, T, h, aw / t) + mlp_f;
    double lin_b = gemm_b_of(c, T, qkv / t, h, frozen) + gemm_b_of(c, T, h, aw / t, frozen) +
                   mlp_b;
    double ad_f, ad_b;
    plan_lora_cost(x, T, gemm_acc_s, &ad_f, &ad_b);
    lin_f += ad_f, lin_b += ad_b;
    /* scores = Q K^T (s x sk, K = d), context = P V (s x d, K = sk), per head; backward dP
     * (s x sk), dQ (s x d), dV and dK (sk x d, K = s) */
    double att_gemm_f = tr_plan_gemm_s(c, s, sk, d, heads) + tr_plan_gemm_s(c, s, d, sk, heads);
    double att_gemm_b = tr_plan_gemm_s(c, s, d, sk, heads) + 2 * tr_plan_gemm_s(c, sk, d, s, heads) +
                        tr_plan_gemm_s(c, s, sk, d, heads);
    double att_el_f = tr_plan_stream_s(c, 2 * S * e) +
                      (L->dropout ? tr_plan_stream_s(c, 2 * S * e + S) : 0);
    double att_el_b = tr_plan_stream_s(c, 3 * S * e) +
                      (L->dropout ? tr_plan_stream_s(c, 2 * S * e + S) : 0);
    /* 2 layernorms, 2 bias-dropout-adds, bias-GeLU */
    double el_f = 2 * tr_plan_stream_s(c, 2 * R) + 2 * tr_plan_stream_s(c, 3 * R + mask) +
                  tr_plan_stream_s(c, 2 * I);
    /* their backward, and the bias gradients (QKV, projection, fc1, fc2) */
    double el_b = 2 * tr_plan_stream_s(c, 3 * R) + 2 * tr_plan_stream_s(c, 3 * R + mask) +
                  tr_plan_stream_s(c, 3 * I) +
                  tr_plan_stream_s(c, (qkv * T + fc * rows) / t * e + 2 * R);
    double experts = moe ? m->num_experts / (x->ep > 1 ? x->ep : 1) : 1; /* (this rank's) */
    if (!L->grad_accum_fused && !frozen) /* dW in 16 bits, then added into the fp32 buffer */
        el_b += tr_plan_stream_s(c, 10.0 * ((qkv + aw + experts * (fc + F)) * h / t));
    o->f[TR_PLAN_PART_GEMM] = lin_f;
    o->f[TR_PLAN_PART_ATTENTION] = att_gemm_f + att_el_f;
    o->f[TR_PLAN_PART_ELEMENTWISE] = el_f;
    o->b[TR_PLAN_PART_GEMM] = lin_b;
    o->b[TR_PLAN_PART_ATTENTION] = att_gemm_b + att_el_b;
    o->b[TR_PLAN_PART_ELEMENTWISE] = el_b;
    o->f[TR_PLAN_PART_ROUTING] = route_f;
    o->b[TR_PLAN_PART_ROUTING] = route_b;
    if (L->recompute == TR_PLAN_RECOMPUTE_FULL) {
        o->b[TR_PLAN_PART_RECOMPUTE] = lin_f + att_gemm_f + att_el_f + el_f + route_f;
        o->b[TR_PLAN_PART_TP] += 2 * x->ar_tp;
    } else if (L->recompute == TR_PLAN_RECOMPUTE_SELECTIVE && !L->trident_kernels) {
        /* (fused attention recomputes its probabilities in backward in any mode) */
        o->b[TR_PLAN_PART_RECOMPUTE] = att_gemm_f + att_el_f;
    }
}

void plan_cp_cost(const plan_cost_ctx *x, double e, plan_cost *o)
{
    if (x->cp <= 1)
        return;
    const tr_plan_layout *L = x->L;
    double qkv, F, fc;
    tr_plan_layer_dims(x->m, &qkv, &F, &fc);
    /* the K and V of b whole sequences: trident's in fp32 (model/gpt_cp.c), Megatron's in the
     * training precision */
    double kv = qkv - tr_plan_attention_width(x->m);
    double bytes = (double)L->micro_batch * x->keys * kv / L->tp * (L->trident_kernels ? 4 : e);
    double gather = tr_plan_allgather_s(bytes, x->cp, x->cp_bw, x->cp_lat);
    o->f[TR_PLAN_PART_CP] += gather;
    o->b[TR_PLAN_PART_CP] += gather + tr_plan_reduce_scatter_s(bytes, x->cp, x->cp_bw, x->cp_lat) +
                             (L->recompute == TR_PLAN_RECOMPUTE_FULL ? gather : 0);
}

void plan_embedding_cost(const plan_cost_ctx *x, plan_cost *o)
{
    const tr_plan_layout *L = x->L;
    plan_cost_clear(o);
    o->f[TR_PLAN_PART_TP] = x->ar_tp; /* vocabulary-parallel lookup */
    if (!plan_shape_model(x->c))
        return;
    double T = (double)L->micro_batch * x->m->seq_length, h = x->m->hidden_size;
    double e = L->bf16 ? 2.0 : 4.0, A = T * h * e;
    /* lookup (masked rows), position add, dropout (trident's: fp32, the rank's rows, again
     * on the gradient); backward: scatter-add into the fp32 gradients of both tables */
    int trident = plan_trident_kernels(x), sp = L->sequence_parallel && L->tp > 1;
    double drop = trident ? plan_trident_dropout_s(x->c, T * h / (sp ? L->tp : 1))
                          : tr_plan_stream_s(x->c, 2 * A + T * h);
    if (trident ? !plan_hidden_dropout(x) : !L->dropout)
        drop = 0;
    o->f[TR_PLAN_PART_EMBEDDING] = tr_plan_stream_s(x->c, 2 * A) + tr_plan_stream_s(x->c, 3 * A) +
                                   drop;
    /* (LoRA: the tables frozen, no backward) */
    o->b[TR_PLAN_PART_EMBEDDING] = plan_lora(x) ? 0 : 2 * tr_plan_stream_s(x->c, A + 8 * T * h) +
                                                          (trident ? drop : 0);
    if (!L->grad_accum_fused && !plan_lora(x))
        o->b[TR_PLAN_PART_EMBEDDING] += tr_plan_stream_s(x->c, 10.0 * x->vocab_padded * h / L->tp);
}

void plan_output_cost(const plan_cost_ctx *x, plan_cost *o)
{
    const tr_plan_layout *L = x->L;
    const tr_plan_cluster *c = x->c;
    if (plan_trident_kernels(x)) {
        plan_output_cost_trident(x, o);
        return;
    }
    plan_cost_clear(o);
    double T = (double)L->micro_batch * x->m->seq_length, h = x->m->hidden_size;
    double V = (double)x->vocab_padded / L->tp;
    o->b[TR_PLAN_PART_TP] = x->ar_tp; /* the input gradient of the vocabulary-parallel GEMM */
    if (!plan_shape_model(c)) {
        double logits = 2.0 * T * h * V;
        o->f[TR_PLAN_PART_OUTPUT] = logits / x->rate;
        o->b[TR_PLAN_PART_OUTPUT] = (plan_lora(x) ? 1 : 2) * logits / x->rate; /* (frozen) */
        return;
    }
    int sp = L->sequence_parallel && L->tp > 1;
    double e = L->bf16 ? 2.0 : 4.0, R = T * h * e / (sp ? L->tp : 1);
    /* the fused cross-entropy over T x V/t fp32 logits, chunk by chunk: max, sum of
     * exponentials and target in one read (4 bytes per logit), loss and gradient in place
     * (8); per chunk of rows two TP all-reduces of its rows' floats */
    int rows = tr_gpt_head_chunk_rows((int)T, (int)V), chunks = ((int)T + rows - 1) / rows;
    double ce_ar = 2.0 * chunks * tr_plan_allreduce_s(4.0 * rows, L->tp, x->tp_bw, x->tp_lat);
    o->f[TR_PLAN_PART_OUTPUT] = tr_plan_stream_s(c, 2 * R) + gemm_f(c, T, V, h) +
                                tr_plan_stream_s(c, 4 * T * V);
    o->b[TR_PLAN_PART_OUTPUT] = tr_plan_stream_s(c, 3 * R) + gemm_b_of(c, T, V, h, plan_lora(x)) +
                                tr_plan_stream_s(c, 8 * T * V) +
                                (L->grad_accum_fused || plan_lora(x)
                                     ? 0
                                     : tr_plan_stream_s(c, 10.0 * V * h));
    o->f[TR_PLAN_PART_TP] += ce_ar;
}

double plan_optimizer_s(const tr_plan_cluster *c, double params, double shard, int bf16)
{
    /* AdamW: read gradient, m, v (and the fp32 master), write them back (and the bf16
     * weights), plus the gradient norm's read: 34 bytes per element in bf16, 32 in fp32;
     * zeroing the whole gradient buffer: 4 bytes per element */
    return tr_plan_stream_s(c, shard * (bf16 ? 34.0 : 32.0)) + tr_plan_stream_s(c, params * 4.0);
}
