/* model/ internals shared by gpt.c, gpt_acts.c, gpt_forward.c and gpt_backward.c. Not part
 * of the contract.
 * Sizes: B micro-batch, T sequence, N = B*T token rows, Nl the rows this rank holds (N, or
 * N/tp under sequence parallelism), C hidden, HS head size, A = NH HS the attention's width
 * (C unless model.kv_channels), suffix "l" = this TP rank's share (Cl = C/tp, Al = A/tp,
 * NHl = NH/tp, Vl = Vp/tp, NGl = NG/tp query groups, QKVl = (NHl + 2 NGl) HS qkv columns,
 * Fl = F/tp MLP features, Fwl = Fl (2 Fl with SwiGLU or GeGLU: gate and up) fc columns). */
#ifndef TR_GPT_INTERNAL_H
#define TR_GPT_INTERNAL_H

#include "core/philox.h"
#include "model/gpt.h"
#include "tp/tp.h"

/* Tensors of one transformer layer, in forward (= parameter buffer) order; a family may
 * lack some (biases): tr_gpt.slot maps each to its place in the layer, or -1. */
enum {
    L_LN1_W, L_LN1_B, L_QKV_W, L_QKV_B, L_ATTPROJ_W, L_ATTPROJ_B,
    L_LN2_W, L_LN2_B, L_ROUTER_W, L_FC_W, L_FC_B, L_FCPROJ_W, L_FCPROJ_B, L_COUNT
};
/* Mixture of experts: L_ROUTER_W is present, and the L_FC_W .. L_FCPROJ_B slots are expert 0's;
 * expert e's are tr_gpt.per_expert places further each (expert_param). Dense: no router. */

/* Saved activations of one layer for one micro-batch. ln1/ln2 hold all N rows (under SP
 * this rank writes its rows and the column-parallel layer gathers the rest in place). */
typedef struct {
    float *ln1, *ln1_mean, *ln1_rstd; /* (N, C), (Nl), (Nl) */
    float *qkv;                       /* (N, QKVl): (B, T, NGl, R+2, HS), roped (bf16 storage
                                       * where gpt_qkv16) */
    float *atty;                      /* (N, Al) attention output; backward reads it too (bf16
                                       * storage where gpt_atty16) */
    float *lse;                       /* (B, NHl, T) log-sum-exp of each query row's scores */
    float *residual2;                 /* (Nl, C) = input + attention */
    float *ln2, *ln2_mean, *ln2_rstd; /* (N, C), (Nl), (Nl) */
    float *fch;                       /* (N, Fwl) */
    float *fch_gelu;                  /* (N, Fl) the activation (GELU or SwiGLU; bf16 storage
                                       * where gpt_gelu16) */
    float *residual3;                 /* (Nl, C) = layer output */
    float *lora_h;                    /* LoRA: (4, N, r) x A^T of each target */
    /* mixture of experts (gpt_moe.c; M = N k routed rows sorted by expert, then token): fch
     * and fch_gelu then hold the experts' (M, Fwl) and (M, Fl) */
    float *moe_probs, *moe_lse;       /* (N, E) softmax over every expert, (N) log-sum-exp */
    int32_t *moe_idx;                 /* (N, k) chosen experts */
    float *moe_weights;               /* (N, k) their routing weights */
    int32_t *moe_tok, *moe_slot;      /* (M) routed row i's token n, and its n k + j */
    float *moe_w;                     /* (M) routed row i's weight */
    float *moe_x, *moe_y;             /* (M, C) experts' inputs (ln2 rows) and outputs */
    int *moe_counts;                  /* host (E): tokens of each expert */
    /* expert parallelism (gpt_moe_ep.c; NULL without): the rows this rank's experts ran,
     * received from every EP peer (source-major, then expert: at most EP M rows; fch and
     * fch_gelu then hold EP M rows), and host (EP, E/EP) how many each peer sent each */
    float *moe_ex;
    int *moe_ep_counts;
    double *moe_losses;               /* host (2): the layer's load-balancing loss and z-loss,
                                       * without their coefficients */
} layer_acts;

struct tr_gpt_acts {
    tr_gpt *g;
    int B;
    float *memory;      /* one allocation, everything below points into it */
    int32_t *tokens;    /* (N) first stage */
    float *stage_in;    /* (Nl, C): embeddings (first stage) or the received hidden state */
    float *dres;        /* (Nl, C): the output gradient (the head writes it on the last stage),
                         * worked on in place by backward, leaving the input gradient */
    float *emb, *emb_mean, *emb_rstd; /* embedding_ln, first stage: (Nl, C) input, (Nl) */
    layer_acts *layers;
    /* packed sequences (tr_gpt_acts_set_packing, gpt_packing.c): backend arrays of N, or NULL */
    int32_t *segments, *positions;
    float *loss_weights, *loss_weights_host;
    void *packing_memory;
    int dropout_on;           /* LoRA, hidden and attention dropout (tr_gpt_acts_set_dropout) */
    uint64_t dropout_sample;
    void *moe_host;           /* MoE: host (layers, 2) losses, then (layers, E) counts */
    float moe_aux_weight;     /* MoE: the aux losses' weight of this micro-batch's forward */
    float moe_aux_next;       /* tr_gpt_acts_set_moe_aux_weight's, for the next forward */
    int moe_aux_given;
};

/* Scratch shared by all micro-batches (used only inside one forward or backward call). */
typedef struct {
    int B;
    float *memory;
    int32_t *targets;             /* (N) */
    float *lnf;                   /* (N, C) (gathered under SP) */
    float *lnf_mean, *lnf_rstd;   /* (Nl) */
    float *logits;                /* (R, Vl): one head chunk's, overwritten by its gradient */
    float *xent_stats;            /* (4R): tr_tp_head_chunks.stats */
    uint16_t *head_w16;           /* (Vl, C) bf16: tr_tp_head_chunks.W16, or NULL */
    float *losses;                /* (N) */
    float *dln;                   /* (N, C) input gradient of the column-parallel layers */
    float *wide;                  /* (N, C) tp > 1: row-parallel partials, SP gathers */
    float *dqkv;                  /* (N, QKVl) (bf16 storage where gpt_qkv16) */
    float *datty;                 /* (N, Al) */
    float *att_rowsum;            /* (B, NHl + 1, T) attention backward's scratch */
    float *dfch;                  /* (N, Fwl) */
    float *dfch_gelu;             /* (N, Fl) */
    float *lora_dh;               /* LoRA: (N, r) */
    float *lora_mask, *lora_xd;   /* LoRA dropout: (N, gpt_lora_widest_input) each */
    float *drop_dy;               /* hidden dropout: (Nl, C), a site's dropped output gradient */
    /* LoRA: the input of a frozen linear without an adapter is read only by its weight
     * gradient, which a frozen base does not have: such an input (ln1: (N, C) of qkv, ln2:
     * (N, C) of fc, fch_gelu: (N, Fl) of fc_proj) lives here, one layer at a time, instead of
     * in every layer's activations (layer_forward writes and reads it; backward never reads
     * it). NULL where every layer keeps its own. */
    float *frozen_ln1, *frozen_ln2, *frozen_fch_gelu;
    /* mixture of experts (gpt_moe.c): (N, E) logits, (N, C) the weighted sum (forward) or the
     * gathered output gradient (backward), (M, C) routed rows' gradients, (M, Fwl), (M, Fl)
     * the experts' activation gradients, (N, E) dlogits, (N k) dweights, (M) routed weights'
     * gradients, (E) the balancing loss's gradient */
    float *moe_logits, *moe_sum, *moe_dx, *moe_dfch, *moe_dact, *moe_dlogits, *moe_dweights;
    float *moe_dw, *moe_aux_grad;
    float *moe_ey; /* expert parallelism: (EP M, C) the experts' outputs, then gradients */
    float *layer_memory;          /* recompute: one layer's full activations, rebuilt in */
    layer_acts layer;          /* backward from the layer's stored input */
} gpt_scratch;

/* A contiguous range of the flat gradient buffer. */
typedef struct {
    size_t offset, count;
} grad_range;

struct tr_gpt {
    tr_gpt_shape s;
    const tr_kernels *k;
    tr_tp tp;
    int Cl, NHl, Vl; /* this TP rank's share of C, NH and Vp */
    int HS, NG, NGl, QKVl, F, Fl, Fwl; /* see the top of this file */
    int A, Al;       /* the attention's width NH x HS (C unless kv_channels), this rank's */
    int slot[L_COUNT], per_layer; /* a layer tensor's place in its layer (-1: absent) */
    int per_expert;               /* MoE: tensors of one expert (its fc, fc_proj, biases) */
    /* MoE host staging (gpt_moe.c): (N, k) chosen experts, (2 M) routed rows' token and
     * slot, (N, E) probabilities, (E) the balancing loss's gradient; the micro-batch's
     * aux-loss weight (loss_grad_scale x N) */
    int32_t *moe_idx_host, *moe_perm_host;
    float *moe_probs_host, *moe_aux_host;
    int moe_host_rows;            /* rows the staging holds */
    tr_comm *ep;                  /* expert parallelism (tr_gpt_set_ep): the EP group or NULL */
    int ep_size, ep_rank;         /* 1, 0 without */
    float moe_aux_weight;
    float *rope_cos, *rope_sin;   /* rope: (rope_positions, rotary_dims/2) tables, backend
                                   * memory: T positions from tr_gpt_create, grown by a
                                   * longer generation cache (gpt_rope_reserve) */
    int rope_positions;           /* positions the rope tables hold (0: none) */
    float *alibi;                 /* alibi: this rank's NHl slopes, backend memory */
    float *norm_1p;               /* apply_layernorm_1p: (2, C) backend floats, C ones and the
                                   * scale 1 + weight of the norm being run (norm_scale) */
    float *norm_zero;             /* no_norm_bias: (2, C) backend floats, C zeros (the bias)
                                   * and C the bias gradient sinks into (norm_bias) */
    tr_param_tensor *tensors;
    int n_tensors;
    size_t n_params;
    /* indices into tensors; -1 where this stage does not hold it */
    int wte, wpe, lnf_w, lnf_b, head_wte; /* head_wte: the tied copy or output_layer */
    int head_bias;                        /* output_layer.bias, or -1 */
    int emb_ln_w, emb_ln_b;
    int layer0; /* index of the first layer tensor; layer i tensor j = layer0 + i*L_COUNT + j */
    grad_range *layer_ranges;    /* per layer: its tensors */
    grad_range head_range;       /* lnf (+ the head's own wte copy) */
    grad_range embedding_range;  /* wte + wpe */
    void (*grad_hook)(void *ctx, size_t offset, size_t count);
    void *grad_hook_ctx;
    int (*param_hook)(void *ctx, int what, size_t offset, size_t count);
    void *param_hook_ctx;
    gpt_scratch scratch;
    float *losses_host; /* (N) */
    int head_chunk_rows; /* tests: at most this many rows per head chunk (0: the rule) */
    float *logits_out, *logits_stage; /* tr_gpt_forward_logits: host (N, V) and (rows, Vp) */
    /* LoRA (gpt_lora.c): the trainable adapter tensors; the base (tensors) frozen in
     * model-owned memory; lora_slot[t] = target t's A index within a layer's adapters or -1 */
    tr_param_tensor *lora;
    int n_lora, lora_per_layer, lora_slot[4];
    size_t n_lora_params;
    float *base_params, *base_vector_grads;
    float *lora_mask_host;        /* dropout: (N, gpt_lora_widest_input) staging of the mask */
    int dropout_on;               /* of the micro-batch being run (its acts') */
    uint64_t dropout_sample;
    const int32_t *segments; /* of the micro-batch being run (its acts'), NULL: whole rows */
    const int32_t *positions; /* the same micro-batch's restarting positions (rope), or NULL */
    /* context parallelism (gpt_cp.c): the CP group; backend buffers for micro-batches of
     * cp_B: full, dfull (B, T*CP) qkv rows in sequence order (dfull then the owner's summed
     * dK, dV), kv / kv_all this rank's / the group's K and V units, cp_idx their row maps */
    tr_comm *cp;
    float *cp_full, *cp_dfull, *cp_kv, *cp_kv_all;
    int32_t *cp_idx;
    int cp_B;
};

/* MoE: expert e's tensor `which` (L_FC_W .. L_FCPROJ_B) of layer l; NULL where absent */
static inline int gpt_ep_split(const tr_gpt_shape *s) { return s->ep_size > 1 ? s->ep_size : 1; }
/* MoE: global expert e's tensor `which` (L_FC_W .. L_FCPROJ_B) of layer l, e one this rank
 * holds (all, or its EP rank's E / EP: gpt_ep_split); NULL where absent */
static inline tr_param_tensor *expert_tensor(tr_gpt *g, int layer, int e, int which)
{
    int j = g->slot[which], local = e - g->s.ep_rank * (g->s.num_experts / gpt_ep_split(&g->s));
    return j < 0 ? NULL
                 : &g->tensors[g->layer0 + layer * g->per_layer + j + local * g->per_expert];
}

/* The MLP's elementwise activation ops of the family's kind: ReLU where shape.relu (OPT), the
 * exact GELU where shape.gelu_exact (GPT-NeoX), else the tanh approximation (the "GELU" of the
 * names below is whichever it is); the bf16-storage ones NULL where the table lacks them. */
static inline tr_act_fn gpt_gelu_forward(const tr_gpt *g)
{
    return g->s.relu         ? g->k->relu_forward
           : g->s.gelu_exact ? g->k->gelu_exact_forward
                             : g->k->gelu_forward;
}
static inline tr_act_backward_fn gpt_gelu_backward(const tr_gpt *g)
{
    return g->s.relu         ? g->k->relu_backward
           : g->s.gelu_exact ? g->k->gelu_exact_backward
                             : g->k->gelu_backward;
}
static inline tr_act16_fn gpt_gelu_forward16(const tr_gpt *g)
{
    return g->s.relu         ? g->k->relu_forward16
           : g->s.gelu_exact ? g->k->gelu_exact_forward16
                             : g->k->gelu_forward16;
}
static inline tr_act_backward16_fn gpt_gelu_backward16(const tr_gpt *g)
{
    return g->s.relu         ? g->k->relu_backward16
           : g->s.gelu_exact ? g->k->gelu_exact_backward16
                             : g->k->gelu_backward16;
}

/* The MLP's activation on n features in fp32: out (n) from fc's output inp (n, or n pairs
 * (gate, up) for SwiGLU and GeGLU), and its backward into dinp. */
static inline void gpt_mlp_act_forward(const tr_gpt *g, float *out, const float *inp, size_t n)
{
    if (g->s.swiglu)
        g->k->swiglu_forward(NULL, out, inp, n);
    else if (g->s.geglu)
        g->k->geglu_forward(NULL, out, inp, n, g->s.gelu_exact);
    else
        gpt_gelu_forward(g)(NULL, out, inp, n);
}
static inline void gpt_mlp_act_backward(const tr_gpt *g, float *dinp, const float *inp,
                                        const float *dout, size_t n)
{
    if (g->s.swiglu)
        g->k->swiglu_backward(NULL, dinp, inp, dout, n);
    else if (g->s.geglu)
        g->k->geglu_backward(NULL, dinp, inp, dout, n, g->s.gelu_exact);
    else
        gpt_gelu_backward(g)(NULL, dinp, inp, dout, n);
}

/* Whether fc's GEMMs carry the GELU in their epilogues (kernels.h's linear_gelu_forward16 and
 * linear_backward_gelu16, where the table has them): the tanh GELU only (no epilogue has the
 * exact one or ReLU). */
static inline int gpt_gelu_in_gemm(const tr_gpt *g) { return !g->s.gelu_exact && !g->s.relu; }

/* Whether the MLP's GELU output (layer_acts.fch_gelu, feeding fc_proj) is kept in bf16 storage:
 * the table has the ops (kernels.h: gelu_forward16, gemm_a16, gemm_b16), the family uses GELU
 * and no LoRA adapter reads it. Then fch_gelu holds N*Fl bf16 bits in half its floats. */
static inline int gpt_gelu16(const tr_gpt *g)
{
    return gpt_gelu_forward16(g) && g->k->gemm_a16 && g->k->gemm_b16 &&
           !tr_gpt_gated_mlp(&g->s) && !g->s.lora_rank && !g->s.num_experts;
}

/* Whether fc's output gradient (the GELU's input gradient, scratch.dfch) is kept in bf16
 * storage: the table's gelu_backward16 writes it and sums fc's bias gradient on the way, and
 * its linear_backward reads it in place (kernels.h); the family uses GELU and no LoRA adapter
 * reads it. Then dfch holds N*Fl bf16 bits in half its floats. */
static inline int gpt_dgelu16(const tr_gpt *g)
{
    return gpt_gelu_backward16(g) && g->k->linear_backward && !tr_gpt_gated_mlp(&g->s) &&
           !g->s.lora_rank && !g->s.num_experts;
}

/* Whether fc_proj's input gradient (scratch.dfch_gelu, the GELU's output gradient) is kept in
 * bf16 storage: the GELU output and its input gradient are (then the table's linear_backward
 * writes dx16 and gelu_backward16 reads it, kernels.h). dfch_gelu holds N*Fl bf16 bits. */
static inline int gpt_dact16(const tr_gpt *g) { return gpt_gelu16(g) && gpt_dgelu16(g); }

/* Whether fc's output (layer_acts.fch, the GELU's input) is kept in bf16 storage: the GELU
 * output and its input gradient are (gpt_gelu16, gpt_dgelu16: then the table's linear_forward
 * writes y16 and the GELU ops read it, kernels.h). Then fch holds N*Fl bf16 bits in half its
 * floats. */
static inline int gpt_fch16(const tr_gpt *g)
{
    return gpt_gelu16(g) && gpt_dgelu16(g) && g->k->linear_forward;
}

/* Whether the norms' outputs that feed QKV and fc (layer_acts.ln1, ln2) are kept in bf16
 * storage: the table has layernorm_forward16 (rmsnorm_forward16 for RMSNorm families),
 * gemm_a16 and gemm_b16, no LoRA adapter reads them, and C is even (the SP gather moves
 * C/2 floats' bytes a row). Then ln1 and ln2 hold N*C bf16 bits in half their floats. */
static inline int gpt_ln16(const tr_gpt *g)
{
    int norm16 = g->s.rmsnorm ? g->k->rmsnorm_forward16 != NULL
                              : g->k->layernorm_forward16 != NULL;
    return norm16 && g->k->gemm_a16 && g->k->gemm_b16 && !g->s.lora_rank && g->s.C % 2 == 0 &&
           !g->s.num_experts; /* (the experts' gathers and GEMMs read ln2 in fp32) */
}

/* Whether the norms' output gradient (scratch.dln, QKV's and fc's input gradient) is kept in
 * bf16 storage when that layer's output gradient is (dy16: gpt_qkv16 for QKV, gpt_dgelu16
 * for fc): one rank and no sequence parallelism (the column-parallel input gradient is not
 * reduced), the table's linear_backward writes dx16 and the norm's backward reads it
 * (kernels.h's layernorm_backward16 / rmsnorm_backward16), C even (as gpt_ln16's). dln then
 * holds N*C bf16 bits. */
static inline int gpt_dln16(const tr_gpt *g)
{
    int norm16 = g->s.rmsnorm ? g->k->rmsnorm_backward16 != NULL
                              : g->k->layernorm_backward16 != NULL;
    return norm16 && g->k->linear_backward && g->s.tp_size == 1 && !g->s.lora_rank &&
           g->s.C % 2 == 0 && !g->s.num_experts;
}

/* NULL where the family has no such tensor (a bias) */
static inline float *layer_param(tr_gpt *g, int layer, int which)
{
    int j = g->slot[which];
    return j < 0 ? NULL : g->tensors[g->layer0 + layer * g->per_layer + j].param;
}

static inline float *layer_grad(tr_gpt *g, int layer, int which)
{
    int j = g->slot[which];
    return j < 0 ? NULL : g->tensors[g->layer0 + layer * g->per_layer + j].grad;
}

/* The scale a norm applies: its weight w, or with apply_layernorm_1p 1 + w, made in
 * g->norm_1p's second row for this call (the next norm_scale overwrites it; same stream). */
static inline const float *norm_scale(const tr_gpt *g, const float *w)
{
    if (!g->s.layernorm_1p)
        return w;
    float *scale = g->norm_1p + g->s.C;
    g->k->add(NULL, scale, g->norm_1p, w, (size_t)g->s.C);
    return scale;
}

/* The bias a LayerNorm adds: b, or C zeros without norm biases (no_norm_bias: b is NULL) */
static inline const float *norm_bias(const tr_gpt *g, const float *b)
{
    return g->s.no_norm_bias ? g->norm_zero : b;
}

/* Where a LayerNorm's bias gradient goes: db, or the sink without norm biases */
static inline float *norm_bias_grad(const tr_gpt *g, float *db)
{
    return g->s.no_norm_bias ? g->norm_zero + g->s.C : db;
}

/* LayerNorm or RMSNorm of Nl rows (mean unused, bias NULL for RMSNorm); w the weight (the
 * scale norm_scale makes of it). */
static inline void norm_forward(const tr_gpt *g, float *out, float *mean, float *rstd,
                                const float *x, const float *w, const float *b, int Nl)
{
    w = norm_scale(g, w);
    if (g->s.rmsnorm)
        g->k->rmsnorm_forward(NULL, out, rstd, x, w, Nl, g->s.C, g->s.eps);
    else
        g->k->layernorm_forward(NULL, out, mean, rstd, x, w, norm_bias(g, b), Nl, g->s.C,
                                g->s.eps);
}

/* dx += ..., dw += ..., db += ... (db unused for RMSNorm); the output gradient dout fp32, or
 * dout16 in bf16 storage (gpt_dln16) with dout NULL. */
static inline void norm_backward(const tr_gpt *g, float *dx, float *dw, float *db,
                                 const float *dout, const uint16_t *dout16, const float *x,
                                 const float *w, const float *mean, const float *rstd, int Nl)
{
    const tr_kernels *k = g->k;
    int C = g->s.C;
    w = norm_scale(g, w); /* d(1 + w) = dw: the weight's gradient as it is */
    db = norm_bias_grad(g, db);
    if (g->s.rmsnorm && dout16)
        k->rmsnorm_backward16(NULL, dx, dw, dout16, x, w, rstd, Nl, C);
    else if (g->s.rmsnorm)
        k->rmsnorm_backward(NULL, dx, dw, dout, x, w, rstd, Nl, C);
    else if (dout16)
        k->layernorm_backward16(NULL, dx, dw, db, dout16, x, w, mean, rstd, Nl, C);
    else
        k->layernorm_backward(NULL, dx, dw, db, dout, x, w, mean, rstd, Nl, C);
}

/* GPT-2's attention ops unless the family needs groups or ALiBi. */
static inline int uses_gqa_attention(const tr_gpt *g)
{
    return g->NG != g->s.NH || g->alibi;
}

/* Whether the attention output (layer_acts.atty, feeding the attention projection; its backward
 * reads it again) is kept in bf16 storage: the table has the bf16-output attention ops of the
 * family's layout (kernels.h: attention_forward16 / _backward16, or the attention_gqa_ pair
 * where uses_gqa_attention), gemm_a16 and gemm_b16, no LoRA adapter reads it and Al is even.
 * Then atty holds N*Al bf16 bits in half its floats. */
static inline int gpt_atty16(const tr_gpt *g)
{
    const tr_kernels *k = g->k;
    if (g->s.attention_dropout > 0 || g->s.cp_size > 1) /* the fp32 dropout ops (gpt_dropout.c);
                                                          * context parallelism's (gpt_cp.c) */
        return 0;
    int ops = uses_gqa_attention(g) ? k->attention_gqa_forward16 && k->attention_gqa_backward16
                  : k->attention_forward16 && k->attention_backward16;
    return ops && k->gemm_a16 && k->gemm_b16 && !g->s.lora_rank && g->Al % 2 == 0;
}

/* Whether qkv (layer_acts.qkv, QKV's output and the attention's input; its backward reads it
 * again) and its gradient (scratch.dqkv) are kept in bf16 storage: the table has the attention
 * ops that read and write them so (kernels.h's attention_forward_qkv16 / _backward_qkv16, which
 * keep the output bf16: gpt_atty16 holds), a linear_forward that writes qkv (y16) and a
 * linear_backward that reads dqkv (dy16, with QKV's bias gradient), and no rope rotates them in
 * place (fp32 there). Then qkv and dqkv hold N*QKVl bf16 bits in half their floats, and the
 * attention output's gradient datty (the projection's linear_backward writes it as dx16, the
 * attention backward reads it) N*Al in half its floats. */
static inline int gpt_qkv16(const tr_gpt *g)
{
    const tr_kernels *k = g->k;
    return k->attention_forward_qkv16 && k->attention_backward_qkv16 && k->linear_forward &&
           k->linear_backward && gpt_atty16(g) && g->s.position != TR_POS_ROPE;
}

static inline void grad_ready(tr_gpt *g, grad_range r)
{
    if (g->grad_hook && r.count)
        g->grad_hook(g->grad_hook_ctx, r.offset, r.count);
}

/* The parameter-use hook on a range (see tr_gpt_set_param_hook); TR_OK without one. */
static inline int params_use(tr_gpt *g, int what, grad_range r)
{
    return g->param_hook && r.count ? g->param_hook(g->param_hook_ctx, what, r.offset, r.count)
                                    : 0;
}

/* Token rows of a micro-batch of B held by this rank: [*first, *first + *count). */
static inline void gpt_rows(const tr_gpt *g, int B, int *first, int *count)
{
    tr_tp_rows(&g->tp, B * g->s.T, first, count);
}

/* The widest input an adapter reads on this rank: max(C, Al, Fl) (qkv's and fc's C, the
 * row-parallel attn_proj's Al and fc_proj's Fl). */
static inline size_t gpt_lora_widest_input(const tr_gpt *g)
{
    int w = g->s.C > g->Al ? g->s.C : g->Al;
    return (size_t)(w > g->Fl ? w : g->Fl);
}

/* LoRA targets (tr_gpt_shape.lora_targets bit 1 << target) */
enum { LORA_QKV, LORA_PROJ, LORA_FC1, LORA_FC2 };
/* gpt_lora.c: the adapter of target t in layer l into *out (h in L's activations); NULL when
 * there is none. With dropout on, it also writes target t's mask into the scratch: call it
 * right before the layer that uses it. */
const tr_tp_lora *gpt_lora(tr_gpt *g, const layer_acts *L, int l, int t, int B, tr_tp_lora *out);
/* After the base table: the adapters' table, the base's memory and initialisation. */
TR_MUST_CHECK int gpt_lora_setup(tr_gpt *g);
/* The layout-free initialisation of the tensors of `tensors` starting in [offset, +count). */
TR_MUST_CHECK int gpt_init_tensors(tr_gpt *g, tr_param_tensor *tensors, int n, size_t offset,
                                   size_t count);
void gpt_lora_free(tr_gpt *g);

TR_MUST_CHECK int gpt_scratch_ensure(tr_gpt *g, int B);
/* gpt_moe.c: the MoE MLP of layer l, residual3 = residual2 + moe(ln2(residual2)) (forward),
 * and from dres = d residual3 through ln2 into dres (+= d residual2) (backward). */
TR_MUST_CHECK int gpt_moe_forward(tr_gpt *g, int l, const layer_acts *L, int B);
TR_MUST_CHECK int gpt_moe_backward(tr_gpt *g, int l, const layer_acts *L, float *dres, int B);

/* gpt_dropout.c: hidden and attention dropout of this micro-batch (gpt.h "dropout"); l the
 * stage's layer, kind TR_DROPOUT_* (core/philox.h), rows this rank's (gpt_rows) of C.
 *  gpt_dropout_rows: x (Nl, C) in place through the site's mask (nothing when off);
 *  gpt_dropout_add: y (Nl, C) = residual + drop(y) when on (else y is left alone: the caller
 *      added the residual itself);
 *  gpt_dropout_grad: the site's output gradient dropped into scratch.drop_dy (dres itself
 *      when off);
 *  gpt_attention_dropout_forward / _backward: the fused attention of L with its probabilities
 *      dropped (the fp32 ops; backward from scratch.datty into scratch.dqkv);
 *  gpt_attention_dropout_site: layer l's attention-probabilities dropout (its first_sample the
 *      micro-batch's sample 0). */
void gpt_dropout_rows(tr_gpt *g, float *x, int l, int kind, int B);
void gpt_dropout_add(tr_gpt *g, float *y, const float *residual, int l, int kind, int B);
const float *gpt_dropout_grad(tr_gpt *g, const float *dres, int l, int kind, int B);
void gpt_attention_dropout_forward(tr_gpt *g, const layer_acts *L, int l, int B);
void gpt_attention_dropout_backward(tr_gpt *g, const layer_acts *L, int l, int B);
tr_dropout gpt_attention_dropout_site(const tr_gpt *g, int l);
/* A dropout p as the masks take it: at most the largest float below 1 (the shape's p is a
 * float, in which a config's p within 2^-25 of 1 is 1: the threshold would be 2^32, past
 * uint32_t, and the scale infinite); threshold 2^32 - 2^8 and scale 2^24 at most. */
static inline double gpt_dropout_p(double p)
{
    return p < 0x1.fffffep-1 ? p : 0x1.fffffep-1;
}
static inline int gpt_hidden_drop(const tr_gpt *g)
{
    return g->dropout_on && g->s.hidden_dropout > 0;
}
static inline int gpt_attn_drop(const tr_gpt *g)
{
    return g->dropout_on && g->s.attention_dropout > 0;
}
/* gpt_moe.c: the router and the experts on N rows h (N, C) (all of them, the same on every
 * TP rank): L's moe_* (its counts and losses), fch and fch_gelu written; sum (N, C) = this
 * rank's partial weighted sum of the experts' outputs (reduce it over TP); logits (N, E)
 * scratch. The training forward's and generation's. */
TR_MUST_CHECK int gpt_moe_mlp(tr_gpt *g, int l, const layer_acts *L, const float *h, int N,
                              float *logits, float *sum);
/* gpt_moe_ep.c: expert parallelism. EP rows per routed row of the activations (1 without);
 * the exchange of L's per-expert counts (host moe_counts -> moe_ep_counts); rows of `width`
 * floats between token owners (src: M rows sorted by expert) and expert owners (dst: the
 * received rows, source-major), to_owner 1, or back (to_owner 0: src the received layout). */
#define TR_MOE_MAX_EP 1024 /* EP divides E, at most 1024 (check_shape) */
static inline int gpt_ep_rows(const tr_gpt *g) { return g->ep ? g->ep_size : 1; }
TR_MUST_CHECK int gpt_moe_ep_counts(tr_gpt *g, const layer_acts *L);
TR_MUST_CHECK int gpt_moe_ep_rows(tr_gpt *g, const layer_acts *L, const float *src, float *dst,
                                  int width, int to_owner);
/* gpt_moe.c: the host staging of N rows at least (NULL-safe free in tr_gpt_free) */
TR_MUST_CHECK int gpt_moe_host_ensure(tr_gpt *g, int N);
void gpt_moe_host_free(tr_gpt *g);
/* rope: tables of at least `positions` positions (larger ones replace the old, whose
 * rows they repeat bit for bit); the old stay on TR_ERR_NOMEM. Other families: no-op. */
TR_MUST_CHECK int gpt_rope_reserve(tr_gpt *g, int positions);
/* gpt_cp.c: context parallelism (tr_gpt_set_cp). gpt_cp_size: 1 without. */
static inline int gpt_cp_size(const tr_gpt *g) { return g->s.cp_size > 1 ? g->s.cp_size : 1; }
/* The micro-batch's local attention of layer l: out (B, T, NHl, HS), lse (B, 2, NHl, T/2) from
 * the local qkv (B, T, NGl, R+2, HS), its probabilities dropped when gpt_attn_drop; backward:
 * dqkv (overwritten) from dout. */
TR_MUST_CHECK int gpt_cp_attention_forward(tr_gpt *g, float *out, float *lse, const float *qkv,
                                           int l, int B);
TR_MUST_CHECK int gpt_cp_attention_backward(tr_gpt *g, float *dqkv, const float *dout,
                                            const float *qkv, const float *out, const float *lse,
                                            int l, int B);
/* Backend bytes of the attention's buffers for micro-batches of B (0 without CP). */
size_t gpt_cp_bytes(const tr_gpt *g, int B);
/* Global positions of the acts' rows (set at creation, kept as its position ids). */
TR_MUST_CHECK int gpt_cp_positions(tr_gpt_acts *a);
void gpt_cp_free(tr_gpt *g);
/* Token rows per chunk of the head and loss of a micro-batch of B sequences
 * (tr_gpt_head_chunk_rows, or fewer: tr_gpt_set_head_chunk_rows). */
int gpt_head_rows(const tr_gpt *g, int B);
/* One transformer layer: x (Nl, C) -> L->residual3 (Nl, C), keeping L's activations. */
TR_MUST_CHECK int gpt_layer_forward(tr_gpt *g, int l, layer_acts *L, const float *x, int B);

/* The activations layer_forward writes for layer l: the micro-batch's own, or with
 * recompute the shared scratch set with the micro-batch's stored output (its next input);
 * under LoRA an input only a frozen weight's gradient would read is the scratch's. */
static inline layer_acts layer_acts_for(const tr_gpt *g, const tr_gpt_acts *a, int l)
{
    layer_acts L = a->layers[l];
    if (g->s.recompute) {
        L = g->scratch.layer;
        L.residual3 = a->layers[l].residual3;
        L.moe_counts = a->layers[l].moe_counts; /* host values of the micro-batch's own */
        L.moe_losses = a->layers[l].moe_losses;
        L.moe_ep_counts = a->layers[l].moe_ep_counts;
    }
    /* LoRA: inputs kept one layer at a time (the scratch may have been re-made since) */
    if (!L.ln1)
        L.ln1 = g->scratch.frozen_ln1;
    if (!L.ln2)
        L.ln2 = g->scratch.frozen_ln2;
    if (!L.fch_gelu)
        L.fch_gelu = g->scratch.frozen_fch_gelu;
    return L;
}

/* gpt_packing.c: packed sequences (tr_gpt_acts_set_packing).
 * out (Nl, C) += wpe[position id] of the held rows [r0, r0 + Nl), through scratch (Nl, C). */
void gpt_add_position_ids(tr_gpt *g, const tr_gpt_acts *a, float *out, float *scratch, int r0,
                          int Nl);
/* dwpe[position id of row n] += dall[n] over the N rows of the micro-batch. */
void gpt_position_ids_backward(tr_gpt *g, const tr_gpt_acts *a, const float *dall);
/* sum_n w_n losses[n] / sum_n w_n (host losses of N rows; 0 when every weight is 0). */
double gpt_weighted_loss(const tr_gpt_acts *a, const float *losses, int N);

#endif
