/* Activation bytes of one layer and one micro-batch, in the model's real widths: Megatron's
 * kernels (Korthikanti et al. 2022's count, generalised from GPT-2's 3h qkv and 4h MLP to the
 * family's qkv rows, attention width, fc rows and MLP width), and trident's (model/gpt_acts.c's
 * tensors one by one, without its 64-byte alignment of each). Context parallelism: a rank
 * holds s / CP of each sample's tokens. */
#include <string.h>

#include "model/gpt.h"
#include "plan/plan_internal.h"

/* Korthikanti's count per token and layer, 16-bit bytes, in widths: replicated across TP
 * (without SP) the two norms' inputs 4h, the attention's and the MLP's inputs 2h each and the
 * two dropout masks 2h; split over TP Q, K, V 2 qkv, the projection's input 2 aw, fc's output
 * 2 fc and the activation's output 2 F (GPT-2: 10h + 24h); the scores 5 a s_keys / t. */
static double korthikanti(double tokens, double keys, double h, double heads, double qkv,
                          double aw, double fc, double F, int tp, int sequence_parallel,
                          tr_plan_recompute rc, int bf16)
{
    double t = tp, split = 2 * (qkv + aw + fc + F) / t;
    int sp = sequence_parallel && tp > 1;
    double per_token;
    switch (rc) {
    case TR_PLAN_RECOMPUTE_FULL:
        per_token = sp ? 2 * h / t : 2 * h;
        break;
    case TR_PLAN_RECOMPUTE_SELECTIVE:
        per_token = (sp ? 10 * h / t : 10 * h) + split;
        break;
    default:
        per_token = (sp ? 10 * h / t : 10 * h) + split + 5 * heads * keys / t;
        break;
    }
    return tokens * per_token * (bf16 ? 1.0 : 2.0);
}

double tr_plan_layer_activation_bytes(int s, int b, int h, int a, int tp, int sequence_parallel,
                                      tr_plan_recompute rc, int bf16)
{
    double H = h;
    return korthikanti((double)s * b, s, H, a, 3 * H, H, 4 * H, 4 * H, tp, sequence_parallel,
                       rc, bf16);
}

double tr_plan_layer_activation_bytes_model(const tr_model_config *m, int s, int b, int tp,
                                            int cp, int sequence_parallel,
                                            tr_plan_recompute rc, int bf16)
{
    double qkv, F, fc;
    tr_plan_layer_dims(m, &qkv, &F, &fc);
    cp = cp > 1 ? cp : 1;
    return korthikanti((double)s / cp * b, s, m->hidden_size, m->num_attention_heads, qkv,
                       tr_plan_attention_width(m), fc, F, tp, sequence_parallel, rc, bf16);
}

/* model/gpt_acts.c's bf16 storage rules (gpt_internal.h's gpt_*16) as the planner sees them:
 * trident's kernels in bf16, no LoRA; the GELU output and fc's output for an ungated MLP
 * without experts, the norms' outputs for an even h without experts, the attention output
 * (aw/t even) and its input qkv (no rope); none of the attention's under context parallelism
 * (model/gpt_cp.c runs fp32 attention) or with attention dropout (gpt_atty16: the fp32 dropout
 * ops). */
typedef struct {
    int gelu, fch, ln, atty, qkv;
} bf16_storage;

static bf16_storage storage_of(const tr_config *cfg, const tr_plan_layout *L, double aw)
{
    const tr_model_config *m = &cfg->model;
    bf16_storage b = {0};
    if (!L->trident_kernels || !L->bf16 || cfg->finetune.lora_rank)
        return b;
    int moe = m->num_experts > 0, cp = L->cp > 1;
    int rope = m->position_embedding_type && !strcmp(m->position_embedding_type, "rope");
    b.gelu = b.fch = !m->swiglu && !m->geglu && !moe;
    b.ln = m->hidden_size % 2 == 0 && !moe;
    b.atty = !cp && !(m->attention_dropout > 0) && (long)(aw / L->tp) % 2 == 0;
    b.qkv = b.atty && !rope;
    return b;
}

void tr_plan_trident_activations(const tr_config *cfg, const tr_plan_layout *L, int vocab_padded,
                                 tr_plan_trident_acts *out)
{
    const tr_model_config *m = &cfg->model;
    const tr_finetune_config *ft = &cfg->finetune;
    int cp = L->cp > 1 ? L->cp : 1, sp = L->sequence_parallel && L->tp > 1;
    double qkv, Fw, fcw, t = L->tp;
    tr_plan_layer_dims(m, &qkv, &Fw, &fcw);
    double aw = tr_plan_attention_width(m), C = m->hidden_size;
    double N = (double)L->micro_batch * m->seq_length / cp, Nl = sp ? N / t : N;
    double Q = qkv / t, Al = aw / t, Fwl = fcw / t, Fl = Fw / t, heads = m->num_attention_heads / t;
    bf16_storage b16 = storage_of(cfg, L, aw);
    double half_ln = b16.ln ? 0.5 : 1, half_qkv = b16.qkv ? 0.5 : 1;
    /* LoRA: an input only a frozen weight's gradient reads is shared, one layer at a time */
    int lora = ft->lora_rank > 0, r = ft->lora_rank;
    int shared_ln1 = lora && !plan_lora_target(ft, 0), shared_ln2 = lora && !plan_lora_target(ft, 2);
    int shared_gelu = lora && !plan_lora_target(ft, 3);
    /* one layer (layer_acts_floats): ln1, its statistics, qkv, the attention output, the
     * log-sum-exps, residual2, ln2, its statistics, fc's output, the activation, residual3,
     * the adapters' x A^T; the experts' routing and rows (beyond the dense MLP's one row) */
    double floats = (shared_ln1 ? 0 : N * C * half_ln) + 2 * Nl + N * Q * half_qkv +
                    N * Al * (b16.atty ? 0.5 : 1) + N * heads + Nl * C +
                    (shared_ln2 ? 0 : N * C * half_ln) + 2 * Nl +
                    N * Fwl * (b16.fch ? 0.5 : 1) +
                    (shared_gelu ? 0 : N * Fl * (b16.gelu ? 0.5 : 1)) + Nl * C +
                    (lora ? 4 * N * r : 0);
    /* expert parallelism (model/gpt_acts.c's gpt_ep_rows): the experts' rows sized for the EP
     * k N rows they may receive, the received inputs (EP k N x C), and in the scratch their
     * gradients' rows and the outputs' (EP k N x C) */
    double ep = L->ep > 1 && m->num_experts > 0 ? L->ep : 1, Mk = N * m->moe_router_topk;
    double ep_rows = ep > 1 ? (ep - 1) * Mk * (Fwl + Fl) + ep * Mk * C : 0;
    out->layer_whole = 4 * floats + tr_plan_moe_layer_bytes(m, (int)(N / L->micro_batch),
                                                            L->micro_batch, L->tp, 4) +
                       4 * ep_rows;
    /* full recompute: a micro-batch keeps each layer's output, the next one's input */
    out->layer = L->recompute == TR_PLAN_RECOMPUTE_FULL ? 4 * Nl * C : out->layer_whole;
    /* a micro-batch beyond its layers: token ids, the stage's input and output */
    out->slot = 4 * (N + 2 * Nl * C);
    out->embedding_ln = m->embedding_layernorm ? 4 * (Nl * C + 2 * Nl) : 0;
    /* the scratch (scratch_floats): targets, the final norm and its statistics, losses, the
     * norms' input gradient, the TP-wide rows, dqkv, datty, the attention backward's rows,
     * dfc, dact, the adapters' dh, LoRA dropout's mask and input, the shared frozen inputs,
     * the hidden dropout's gradient; the experts' scratch */
    double widest = C > Al ? C : Al;
    widest = widest > Fl ? widest : Fl;
    double sc = N + N * C + 2 * Nl + N + N * C + (L->tp > 1 ? N * C : 0) + N * Q * half_qkv +
                N * Al + N * (heads + 1) + N * Fwl + N * Fl + (lora ? N * r : 0) +
                (lora && ft->lora_dropout > 0 ? 2 * N * widest : 0) +
                (shared_ln1 ? N * C : 0) + (shared_ln2 ? N * C : 0) + (shared_gelu ? N * Fl : 0) +
                (m->hidden_dropout > 0 ? Nl * C : 0);
    int B = L->micro_batch, s_local = (int)(N / B);
    out->scratch = 4 * sc + tr_plan_moe_scratch_bytes(m, s_local, B, L->tp) + 4 * ep_rows;
    /* the last chunk: a head chunk's fp32 logits and their statistics (8 floats a row), the
     * head's weight in bf16 where the table converts it; every other chunk keeps room for
     * the statistics of its N rows */
    double Vl = (double)vocab_padded / t;
    double rows_head = tr_gpt_head_chunk_rows((int)N, (int)Vl);
    out->head = 4 * rows_head * (Vl + 8) + (L->trident_kernels && L->bf16 ? 2 * Vl * C : 0);
    out->head_other = 4 * 8 * (double)tr_gpt_head_chunk_rows((int)N, 0);
    /* context parallelism (model/gpt_cp.c's buffers, one micro-batch's, shared by the layers):
     * the sequence's qkv rows in sequence order and their gradient (B s qkv/t floats each);
     * this rank's K and V units packed, the group's gathered, and their gradients
     * ((CP + 2) N kv/t floats, kv = 2 groups x head size); the int32 row maps of the K/V units
     * ((CP + 1) N kv/t / hs) and of this rank's dqkv units (N qkv/t / hs) */
    double kv = (qkv - aw) / t, hs = aw / m->num_attention_heads;
    out->cp = cp > 1 ? 4 * (2 * (double)L->micro_batch * m->seq_length * Q + (cp + 2) * N * kv +
                            ((cp + 1) * N * kv + N * Q) / hs)
                     : 0;
}
