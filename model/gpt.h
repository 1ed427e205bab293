/* model/ — GPT-2, Llama, Bloom and GPT-NeoX: one pipeline stage's parameters and the
 * forward/backward of its layers.
 *
 * Contract:
 *  - Families (the shape's family fields; all zero = GPT-2, exactly as below): RMSNorm for
 *    every norm (no biases), rotary positions on q and k after the qkv projection (no wpe),
 *    or ALiBi slopes inside the attention (no wpe; slopes sharded with the heads); SwiGLU
 *    MLP (fc.weight (2F, C) with rows interleaved (feature, {gate, up}), so a row shard is
 *    whole features: gate and up column-parallel together), MLP width F; grouped-query
 *    attention (qkv rows (group, {q_0 .. q_R-1, k, v}, d), R = NH/NG: a TP shard is whole
 *    groups); untied output_layer (Vp, C) vocab-parallel, with or without its bias (Vp); no
 *    linear biases, or qkv's alone
 *    (Qwen2: added before the rotary positions); a norm after the word embedding (emb_ln,
 *    Bloom); parallel residual (GPT-NeoX: the MLP's norm reads the layer input x, and the
 *    layer output is x + attention + MLP), with one norm for both branches (Falcon-7B: the
 *    layer has no ln2; ln1's parameters serve as ln2's, so its gradient gets both norms'
 *    parts); the exact erf GELU (GPT-NeoX). Sequence parallelism works the same for every
 *    norm.
 *  - Architecture: learned positions, pre-LN blocks (LN -> causal self-attention -> residual,
 *    LN -> MLP 4h with tanh-GELU -> residual), final LN, LM head tied to the token embedding,
 *    vocabulary padded up to a multiple of make_vocab_size_divisible_by x tp_size.
 *  - A stage holds layers [layer_first, layer_first + layer_count); the first stage also holds
 *    the embeddings (wte, wpe) and takes token ids; the last stage holds the final LN and the
 *    head (its own copy of wte when it is not also the first stage) and produces the loss;
 *    other stages take and give hidden states (B, T, C).
 *  - Parameters live in ONE flat buffer, gradients in ONE flat buffer, both owned by the
 *    caller and bound with tr_gpt_bind(); each tensor is a view at the same offset in both.
 *    Tensors are laid out in reverse forward order (the order backward produces gradients),
 *    so a data-parallel bucket is a contiguous range that backward fills front to back, and
 *    a ZeRO-1 shard of the gradients is the same range of the parameters.
 *  - Layout-free initialisation: element i of the full (unsharded) tensor NAME gets
 *    tr_init_normal(seed, hash(NAME), i) * std (std = model.init_method_std; output
 *    projections std/sqrt(2*num_layers)); LN weights 1, biases 0. Names are global
 *    ("layers.7.qkv.weight"), so every stage/shard computes exactly its slice of the
 *    single-process model.
 *  - Tensor layouts (row-major, PyTorch Linear convention: weight (out, in), y = x W^T + b):
 *    qkv.weight (NH*3*HS, C) with rows ordered (head, {q,k,v}, d) so a head's q, k and v are
 *    contiguous; attn_proj.weight (C, C); fc.weight (4C, C); fc_proj.weight (C, 4C);
 *    wte (Vp, C); wpe (max_position_embeddings, C).
 *  - Backward ACCUMULATES into the gradient buffer (+=): micro-batches accumulate for free;
 *    the caller zeroes the buffer once per optimizer step.
 *  - Activations of one micro-batch live in a tr_gpt_acts; a pipeline keeps one per in-flight
 *    micro-batch. The last stage runs the head's backward inside forward (the loss gradient is
 *    known there), so it never keeps B*T*V logits per micro-batch.
 *  - Tensor parallelism (tp/, tp_size T > 1, one tr_gpt per TP rank, same code for T = 1):
 *    qkv and fc are column-parallel (rows split: whole heads per rank), attn_proj and fc_proj
 *    row-parallel (columns split; their bias replicated), wte vocab-parallel (rows split,
 *    Vp % T == 0), LayerNorms and wpe replicated. Two all-reduces forward and two backward
 *    per layer (the parallel residual: one forward, the attention projection's and fc_proj's
 *    partial products summed before it, as GPT-NeoX does); the embedding one all-reduce; the loss two (max; sumexp + target logit)
 *    forward and one backward. Every TP rank gets the same loss. A shard's element (r, c) is
 *    element (r + row0, c) or (r, c + col0) of the full tensor, initialised as such.
 *  - Sequence parallelism (sequence_parallel, T > 1): the residual stream, LayerNorms and
 *    positions run on the token rows [t*BT/T, (t+1)*BT/T) of the flattened (B*T) micro-batch
 *    ((B*T) % T == 0); all-reduces become all-gather before the column-parallel layers and
 *    reduce-scatter after the row-parallel ones. Stage input/output are those rows
 *    (tr_gpt_hidden_numel). Gradients of LN weights/biases and row-parallel biases are then
 *    partial per rank (tp_grad_allreduce = 1): the caller all-reduces them over TP. wpe's
 *    gradient is reduced from the all-gathered rows the word embedding needs anyway, so it
 *    is whole on every rank and not marked.
 *  - LoRA (lora_rank r > 0, model/gpt_lora.c): the base tensors above are frozen and the
 *    model owns them (tr_gpt_num_base_tensors / tr_gpt_base_tensor, filled by the layout-free
 *    initialisation at creation, then e.g. from a checkpoint); the TRAINABLE tensors, which
 *    tr_gpt_num_tensors / tr_gpt_tensor / tr_gpt_num_params / tr_gpt_bind / init describe,
 *    are the adapters alone: per layer, per target (qkv, attn_proj, fc, fc_proj, as
 *    lora_targets says) "layers.L.qkv.lora_A" (r, in) and ".lora_B" (out, r), y += (alpha/r)
 *    x A^T B^T (tp/'s LoRA splits: for qkv and fc B is split with the weight's rows and A's
 *    gradient is all-reduced over TP (tp_grad_allreduce); for the projections A is split
 *    with the weight's columns and B's gradient is all-reduced). A ~ N(0, 1/(3 in)) by the
 *    Philox scheme (the variance of PEFT's kaiming-uniform), B = 0. Base weights get no
 *    gradient (norm and bias vectors accumulate into a small sink that is never read); the
 *    embedding's backward is skipped. The grad-ready ranges are each layer's adapters.
 *  - Mixture of experts (num_experts E > 0, model/gpt_moe.c; Megatron-core 0.8's MoE layer,
 *    dropless): every layer's MLP is a router "layers.L.router.weight" (E, C) (replicated over
 *    TP; its gradient all-reduced over TP: tp_grad_allreduce) and E experts
 *    "layers.L.experts.e.fc.weight" / "fc_proj.weight" (+ biases) of the dense MLP's shapes
 *    and TP splits; no dense fc / fc_proj. ln2's N rows (gathered under SP) give the logits
 *    h Wr^T (N, E), each token its top-k experts (ties to the lower index) with weights (the
 *    softmax of the k logits, or with moe_pre_softmax the softmax over all E at them); each
 *    expert in index order runs its MLP on its tokens' rows and the weighted outputs are
 *    summed into (N, C), reduced over TP once (reduce-scattered under SP) with the residual,
 *    as fc_proj's. The expert's fc_proj bias is added inside the weighted sum (on TP rank 0).
 *    Losses (moe_aux_loss: Megatron's switch load balancing, per layer and micro-batch over
 *    its N tokens: coeff E / (N^2 k) sum_e (sum_n probs[n, e]) tokens[e]; z-loss: z_coeff
 *    mean_n lse_n^2) join the objective with the weight of the micro-batch's mean LM loss
 *    (loss_grad_scale x N, or tr_gpt_acts_set_moe_aux_weight's: Megatron's
 *    MoEAuxLossAutoScaler); the loss reported is the LM
 *    loss. tr_gpt_acts_moe_loss gives the losses without their coefficients. */
#ifndef TR_GPT_H
#define TR_GPT_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "kernels/kernels.h"
#include "yaml/config.h"

typedef struct {
    int num_layers;  /* whole model */
    int C, NH, T;    /* hidden size, heads, sequence length */
    int max_T;       /* max_position_embeddings */
    int V;           /* real vocabulary size */
    int Vp;          /* padded vocabulary size */
    float eps;       /* layernorm epsilon */
    float init_std;
    uint64_t seed;
    /* this stage */
    int layer_first, layer_count;
    int is_first, is_last; /* holds embeddings / holds the head */
    /* tensor parallelism */
    int tp_size, tp_rank;  /* T and this rank's t (1, 0 without TP) */
    int sequence_parallel; /* 1 only when tp_size > 1 */
    int cp_size, cp_rank;  /* context parallelism (0 or 1: none): T is then this rank's T / CP
                            * tokens of each sample, chunks cp_rank and 2 CP - 1 - cp_rank of
                            * the 2 CP (data/data.h tr_cp_chunk); tr_gpt_shape_set_cp */
    int ep_size, ep_rank;  /* expert parallelism's split of the experts' state (0 or 1: every
                            * expert here): the tensor table holds experts [ep_rank E/EP,
                            * (ep_rank + 1) E/EP) only, named by their global index;
                            * tr_gpt_shape_set_ep */
    int recompute;         /* training.recompute full: a micro-batch keeps only each layer's
                            * input; backward recomputes the layer's forward first */
    int recompute_attention; /* training.recompute selective (Megatron's: recompute the
                              * attention probabilities). Attention is fused (kernels.h): no
                              * (B, NH, T, T) tensor is ever kept and backward recomputes the
                              * probabilities tile by tile in any mode, so selective stores and
                              * computes exactly what none does. Accepted for configs. */
    /* family (model.* keys; zero = GPT-2) */
    int rmsnorm;          /* normalization RMSNorm */
    int position;         /* TR_POS_LEARNED (wpe), TR_POS_ROPE, TR_POS_ALIBI */
    int rotary_dims;      /* rope: rotated dims of each head (even, <= head size) */
    float rotary_base;    /* rope: theta_i = base^(-2i / rotary_dims) */
    int swiglu;           /* MLP = fc_proj(silu(gate) * up) */
    int ffn;              /* MLP width F; 0 = 4C */
    int query_groups;     /* NG (K/V heads); 0 = NH */
    int untie;            /* own output_layer instead of the tied wte */
    int output_bias;      /* with untie: output_layer.bias (Vp), vocab-parallel (Phi-2) */
    int no_linear_bias;   /* qkv, attn_proj, fc, fc_proj without biases */
    int qkv_bias;         /* with no_linear_bias: qkv has its bias all the same (Qwen2;
                           * model.add_qkv_bias); 0 when no_linear_bias is 0 */
    int mlp_bias;         /* with no_linear_bias: fc and fc_proj have their biases all the
                           * same (GPT-J; model.add_mlp_bias); 0 when no_linear_bias is 0 */
    int sliding_window;   /* model.sliding_window (0: none): recorded, not computed: the
                           * config keeps seq_length within it, where full causal attention
                           * is the windowed one */
    int embedding_ln;     /* emb_ln after the word embedding (positions) */
    int parallel_residual; /* out = x + attn(ln1(x)) + mlp(ln2(x)) (GPT-NeoX, Falcon-40B) */
    int parallel_shared_norm; /* with parallel_residual: no ln2, the MLP reads ln1 (its
                               * parameters; Falcon-7B, GPT-J) */
    int gelu_exact;       /* the MLP's GELU is the exact x Phi(x) (model.gelu_approximate
                           * none), not the tanh approximation (GELU and GeGLU MLPs) */
    int kv_channels;      /* the head size where it is not C / NH (model.kv_channels; Gemma-7B's
                           * 256 of hidden 3072, 16 heads), else 0: tr_gpt_head_size */
    int layernorm_1p;     /* every norm scales by 1 + weight (model.apply_layernorm_1p) */
    int no_norm_bias;     /* LayerNorm without its bias (model.layernorm_bias false; MPT):
                           * ln1, ln2, lnf and emb_ln have no bias tensor, the kernels get C
                           * zeros and a gradient sink; 0 with RMSNorm */
    float embedding_multiplier; /* the embedding stage's output times this
                                 * (model.embedding_multiplier), or 0 where that is 1 */
    int geglu;            /* MLP = fc_proj(gelu(gate) * up), fc as swiglu's (gate, up) pairs */
    int relu;             /* the MLP's activation is ReLU, max(x, 0) (model.relu; OPT); not
                           * gated; gelu_exact 0 then */
    int hf_phi3;          /* model.hf_family phi3: exported as Phi-3 (fused qkv_proj,
                           * gate_up_proj); recorded, not computed */
    int rope_scaling;     /* TR_ROPE_SCALING_*: rope's positions or frequencies scaled */
    float rope_factor;    /* linear: position t rotated as t / factor; llama3: its factor */
    float rope_low_freq_factor, rope_high_freq_factor; /* llama3 */
    int rope_original_positions;                       /* llama3 */
    /* LoRA fine-tuning (finetune.lora.*; rank 0 = none): see "LoRA" above */
    int lora_rank;
    float lora_alpha;
    int lora_targets;     /* TR_LORA_* bits */
    float lora_dropout;   /* p: each adapter's input x dropped with probability p (inverted:
                           * kept elements / (1 - p)) while training; the mask of element
                           * (token, feature) is Philox of (seed, layer, target, sample,
                           * position, global feature): the same in every layout */
    /* dropout while training (tr_gpt_acts_set_dropout on; model.hidden_dropout,
     * model.attention_dropout): p of each kept element scaled by 1 / (1 - p); the mask is
     * core/philox.h's decision at (seed, global layer and site, global sample, position and
     * feature or head, query, key): the same in every layout. Hidden: after the embeddings
     * (with positions and the multiplier, before Bloom's embedding norm), on the attention's
     * and the MLP's (MoE's) output with their biases before each residual add; attention: on
     * the probabilities. 0: no op runs (the same bits as without). */
    float hidden_dropout, attention_dropout;
    /* mixture of experts (model.num_experts; 0 = dense): see "Mixture of experts" above */
    int num_experts;      /* E */
    int moe_topk;         /* k, 1 .. E */
    int moe_pre_softmax;  /* weights = the softmax over all E at the chosen experts */
    int moe_aux_loss;     /* model.moe_router_load_balancing_type aux_loss: the balancing
                           * loss is computed (weighted by moe_aux_coeff) and reported */
    float moe_aux_coeff, moe_z_coeff;
} tr_gpt_shape;

enum { TR_LORA_QKV = 1, TR_LORA_PROJ = 2, TR_LORA_FC1 = 4, TR_LORA_FC2 = 8 };

enum { TR_POS_LEARNED = 0, TR_POS_ROPE = 1, TR_POS_ALIBI = 2 };
/* rope scaling: none, linear position interpolation (model.rotary_seq_len_interpolation_factor),
 * Llama 3.1's frequency scaling (model.use_rope_scaling) */
enum { TR_ROPE_SCALING_NONE = 0, TR_ROPE_SCALING_LINEAR = 1, TR_ROPE_SCALING_LLAMA3 = 2 };
/* The inverse frequency theta_i of rotary pair i of a shape's rope (its base, dims and
 * scaling): Hugging Face's inv_freq, float32. */
float tr_gpt_rope_inv_freq(const tr_gpt_shape *s, int i);
/* GPT-2 exactly (no family field set): generation and the GPT-2 converter need it. */
int tr_gpt_is_gpt2(const tr_gpt_shape *s);
/* The head size HS: kv_channels, or C / NH. The attention is NH x HS wide (qkv's query rows,
 * attn_proj's columns), key and value heads NG x HS each. */
static inline int tr_gpt_head_size(const tr_gpt_shape *s)
{
    return s->kv_channels ? s->kv_channels : s->NH > 0 ? s->C / s->NH : 0;
}
/* Whether the MLP is gated (fc = (gate, up) pairs, 2F rows): SwiGLU or GeGLU. */
static inline int tr_gpt_gated_mlp(const tr_gpt_shape *s) { return s->swiglu || s->geglu; }

typedef struct {
    char name[48];
    int rows, cols;       /* this rank's shape (cols = 1 for vectors) */
    size_t numel;
    size_t offset;        /* into both flat buffers (parameters and gradients) */
    int weight_decay;     /* 0 for biases and LN weights */
    size_t forward_offset; /* running offset in forward order (offset counts from the end) */
    int split_dim;        /* -1 replicated over TP, 0 rows split, 1 columns split */
    int full_rows, full_cols; /* the unsharded shape */
    int tp_grad_allreduce; /* 1: under SP its gradient is partial per TP rank (all-reduce it) */
    int word_embedding;   /* 1 for the tied wte (either copy): all-reduced over the embedding
                           * group */
    int vocab_rows;       /* rows are the padded vocabulary (wte, output_layer): a checkpoint
                           * keeps the V real ones */
    int count_in_norm;    /* 1 if this rank counts it in the global gradient norm */
    int expert;           /* 1 for a MoE expert's tensor (layers.L.experts.e.*) */
    float *param, *grad;  /* views, valid after tr_gpt_bind() */
} tr_param_tensor;
/* TP rank tp_rank's shard of t cut from the whole tensor `whole` (rows x cols, row-major)
 * into dst (t->rows x t->cols): split_dim 0 takes rows tp_rank * t->rows on, 1 columns
 * tp_rank * t->cols on, -1 all; elements past whole's rows or columns (a vocabulary padded for
 * another TP size) are 0. How checkpoints and Hugging Face tensors are sliced. */
void tr_param_copy_shard(const tr_param_tensor *t, int tp_rank, const float *whole, size_t rows,
                         size_t cols, float *dst);

typedef struct tr_gpt tr_gpt;
typedef struct tr_gpt_acts tr_gpt_acts;

/* The padded vocabulary, Megatron's rule: m->vocab_size rounded up to a multiple of
 * make_vocab_size_divisible_by x tp. The one definition: the stage shape, plan/ and the
 * reports all call it. 0 when it does not fit in an int. */
int tr_gpt_padded_vocab(const tr_model_config *m, int tp);

/* The family fields of a shape (rmsnorm .. embedding_ln) from the model.* keys. */
void tr_gpt_shape_family(const tr_model_config *m, tr_gpt_shape *s);

/* Shape of the stage holding layers [layer_first, +layer_count) of the configured model, on
 * TP rank tp_rank (tp size and sequence_parallel from cfg->parallel). */
TR_MUST_CHECK int tr_gpt_shape_from_config(const tr_config *cfg, int layer_first, int layer_count,
                             int tp_rank, tr_gpt_shape *out);
/* Context parallelism: the shape of CP rank `rank` of `cp` (T becomes T / cp; T divisible by
 * 2 cp). Then, after tr_gpt_create, tr_gpt_set_cp gives the model the CP group (size cp): the
 * attention all-gathers the group's keys and values and runs its local query rows at their
 * global positions against them (kernels.h attention_rows_*), its backward reduce-scatters dK,
 * dV;
 * positions (wpe rows, rope angles, ALiBi distances) are global; packed sequences' documents
 * masked by their position ids (restarting at 0 with each). fp32-storage attention (16-bit
 * tables round its output and qkv gradient as the one-process op does), no experts. */
void tr_gpt_shape_set_cp(tr_gpt_shape *s, int cp, int rank);
TR_MUST_CHECK int tr_gpt_set_cp(tr_gpt *g, tr_comm *cp_comm);
/* Expert parallelism (Megatron's expert_model_parallel_size; gpt_moe_ep.c): the EP group of
 * size EP (dividing E), given before any tr_gpt_acts_create. EP rank r runs experts
 * [r E/EP, (r+1) E/EP) of every MoE layer on the rows of every peer's tokens routed to them:
 * per layer and micro-batch the peers exchange their per-expert counts, send each routed row
 * to its expert's owner and get the outputs back (backward: the output gradients out, the
 * input gradients back; recompute exchanges again), so the peers must run the same schedule.
 * With a shape of tr_gpt_shape_set_ep(s, EP, r) the model holds only those experts (the
 * engine reduces their gradients over the expert-data-parallel group); with an unsplit shape
 * it holds every expert and the others' gradients stay 0 here. Host memory (a UCX group); the
 * routing, the losses and everything else stay this rank's own. NULL: none. */
TR_MUST_CHECK int tr_gpt_set_ep(tr_gpt *g, tr_comm *ep_comm);
/* The shape of EP rank `rank` of `ep` holding only its E / EP experts' tensors (names and
 * initial values those of the global experts); ep 1: unchanged. */
void tr_gpt_shape_set_ep(tr_gpt_shape *s, int ep, int rank);
/* The experts [*first, *first + *count) whose tensors g holds (0, E without a split). */
void tr_gpt_local_experts(const tr_gpt *g, int *first, int *count);
/* tp_comm: the TP group (size tp_size, this rank tp_rank); NULL iff tp_size == 1. */
TR_MUST_CHECK int tr_gpt_create(const tr_gpt_shape *shape, const tr_kernels *k, tr_comm *tp_comm,
                  tr_gpt **out);
void tr_gpt_free(tr_gpt *g);
const tr_gpt_shape *tr_gpt_get_shape(const tr_gpt *g);

int tr_gpt_num_tensors(const tr_gpt *g);
tr_param_tensor *tr_gpt_tensor(tr_gpt *g, int i);
size_t tr_gpt_num_params(const tr_gpt *g); /* this stage's element count */
/* The element count tr_gpt_num_params() would give for `shape` (this TP rank's shards), from
 * the same tensor table, without a communicator, kernels or parameter memory (the planner's
 * tests count Bloom-176B this way). Invalid shape: TR_ERR_INVALID as tr_gpt_create. */
TR_MUST_CHECK int tr_gpt_count_params(const tr_gpt_shape *shape, size_t *n_params);

/* Grad-ready hook: fn(ctx, offset, count) is called (inside backward, and inside the last
 * stage's forward for the head) whenever [offset, offset + count) of the flat gradient
 * buffer has received its last contribution of this micro-batch: after each layer (its
 * tensors), after the head (lnf, and the head's own wte copy), after the embedding (wte,
 * wpe). The ranges arrive front to back. fn NULL removes the hook. */
void tr_gpt_set_grad_hook(tr_gpt *g, void (*fn)(void *ctx, size_t offset, size_t count),
                          void *ctx);

/* Parameter-use hook (ZeRO-3: parameters gathered per layer): fn(ctx, what, offset, count)
 * with what = TR_GPT_PARAMS_NEED before a forward or backward reads [offset, +count) of the
 * flat parameter buffer (the values must be there when fn returns), TR_GPT_PARAMS_PREFETCH
 * for the range needed next (a hint: start fetching it), TR_GPT_PARAMS_DONE when the call is
 * done with the range. Per layer (its tensors), the embeddings, the head (lnf, and wte: the
 * head's copy, or the embedding's on a one-stage model). A non-zero return stops the pass
 * with that error. fn NULL (the default): parameters are always in place. */
enum { TR_GPT_PARAMS_NEED, TR_GPT_PARAMS_PREFETCH, TR_GPT_PARAMS_DONE };
void tr_gpt_set_param_hook(tr_gpt *g, int (*fn)(void *ctx, int what, size_t offset, size_t count),
                           void *ctx);

/* LoRA: the frozen base tensors (views into model-owned memory, gradient NULL for matrices);
 * without LoRA the same as tr_gpt_num_tensors / tr_gpt_tensor. */
int tr_gpt_num_base_tensors(const tr_gpt *g);
/* Backend bytes of the frozen base the model holds (its parameters and the vector gradient
 * sink); 0 without LoRA. */
size_t tr_gpt_frozen_bytes(const tr_gpt *g);
tr_param_tensor *tr_gpt_base_tensor(tr_gpt *g, int i);

/* Point the tensor views into caller-owned flat buffers of tr_gpt_num_params() floats. */
void tr_gpt_bind(tr_gpt *g, float *params, float *grads);
/* Fill the bound parameters with the layout-free initialisation. */
TR_MUST_CHECK int tr_gpt_init_params(tr_gpt *g);
/* The same for the tensors starting inside [offset, offset + count) only (ZeRO-3 initialises
 * one gather unit at a time). */
TR_MUST_CHECK int tr_gpt_init_params_range(tr_gpt *g, size_t offset, size_t count);

/* Activation storage for one micro-batch of B sequences. */
TR_MUST_CHECK int tr_gpt_acts_create(tr_gpt *g, int B, tr_gpt_acts **out);
void tr_gpt_acts_free(tr_gpt_acts *a);

/* Backend memory for n_slots activation slots of B sequences plus the shared scratch (what
 * a device arena must hold for activations). */
size_t tr_gpt_activation_bytes(const tr_gpt *g, int B, int n_slots);

/* The head and its loss run over chunks of token rows (logits GEMM, cross-entropy, logits'
 * gradient in place, the head's backward; one chunk at a time): rows per chunk for N token
 * rows and Vl logit columns per rank, so that a chunk's logits hold at most 2^27 floats
 * (512 MiB fp32; even chunks of a multiple of 64 rows, N itself when it fits). No config
 * key. The bound trades memory for the head's speed: every chunk's GEMMs restage wte in bf16
 * and re-read dwte, so smaller chunks cost time. gpt2-124m at micro-batch 48 on an H100
 * (head GEMMs + cross-entropy): whole logits (9.9 GB) 51.2 ms; 2^26 floats (39 chunks of
 * 1280 rows) 59.1 ms; 2^27 (19 of 2624) 48.4 ms; 2^28 (10 of 4928) 44.7 ms.
 * The scratch (tr_gpt_activation_bytes) and plan/ use it. */
int tr_gpt_head_chunk_rows(int N, int Vl);
/* For tests: at most `rows` rows per head chunk from now on (0: the rule alone). */
void tr_gpt_set_head_chunk_rows(tr_gpt *g, int rows);

/* Elements of this rank's stage input/output hidden state: B*T*C, or B*T*C/T under SP. */
size_t tr_gpt_hidden_numel(const tr_gpt *g, int B);
/* Where a pipeline may receive the stage input (pass it as hidden_in: no copy), and the
 * output gradient (pass it as dhidden_out). */
float *tr_gpt_acts_input_buffer(tr_gpt_acts *a);
float *tr_gpt_acts_output_grad_buffer(tr_gpt_acts *a);

/* Packed sequences (data.dataset_type sft) for the micro-batch that next runs with `a`: host
 * arrays of B*T values (each may be NULL: the default), copied into backend memory kept with
 * `a` until the next call, so backward and recompute see them too.
 *   segments: ids of the packed examples (contiguous runs per row): a token attends only to
 *     earlier tokens of its own run;
 *   positions: position ids (< max_position_embeddings), restarting per example (first stage);
 *   loss_weights: the weight w_n of token n's loss (last stage): *loss_out becomes
 *     sum_n w_n l_n / sum_n w_n (0 when every weight is 0) and the loss differentiated is
 *     loss_grad_scale * sum_n w_n l_n.
 * A packed example then computes exactly what it would alone at the start of a row. Position
 * ids outside [0, max_position_embeddings) are TR_ERR_INVALID. */
TR_MUST_CHECK int tr_gpt_acts_set_packing(tr_gpt_acts *a, const int32_t *segments,
                                          const int32_t *positions, const float *loss_weights);

/* LoRA dropout for the micro-batch that next runs with `a` (default off): on = training, and
 * its row b is sample first_sample + b of the run (the mask's key; recompute and backward
 * regenerate it). Off (evaluation, tools): no dropout. */
void tr_gpt_acts_set_dropout(tr_gpt_acts *a, int on, uint64_t first_sample);

/* Mixture of experts: a loss of the micro-batch that last ran forward with `a`, summed over
 * this stage's layers, without its coefficient: which 0 the load-balancing loss (Megatron's
 * logged load_balancing_loss: 1 when every expert gets its share; 0 with
 * moe_router_load_balancing_type none), 1 the z-loss (mean_n lse_n^2). 0 without experts. */
enum { TR_GPT_MOE_BALANCING = 0, TR_GPT_MOE_Z = 1 };
double tr_gpt_acts_moe_loss(const tr_gpt_acts *a, int which);
/* Mixture of experts: the aux losses' weight for the next forward with `a` (and its backward)
 * instead of loss_grad_scale x N (which is the micro-batch's mean loss's only where the head
 * differentiates the mean: supervised fine-tuning's loss_grad_scale is the global batch's
 * 1 / learned tokens, and its last stage's alone). The engine gives Megatron's weight, the
 * fp16 loss scale / micro-batches, on every stage. */
void tr_gpt_acts_set_moe_aux_weight(tr_gpt_acts *a, float weight);

/* Forward one micro-batch.
 *   first stage: `tokens` (B*T host ints < V, all of them on every TP rank);
 *   others: `hidden_in` (tr_gpt_hidden_numel device floats).
 *   last stage: `targets` (B*T host ints); *loss_out = mean token loss of the micro-batch;
 *     if loss_grad_scale != 0 the head's backward runs now with dloss/dlogit scaled so the
 *     loss being differentiated is loss_grad_scale * sum of token losses.
 *   not last: the output hidden state is tr_gpt_acts_output(a) (hidden numel). */
TR_MUST_CHECK int tr_gpt_forward(tr_gpt *g, tr_gpt_acts *a, const int32_t *tokens, const float *hidden_in,
                   const int32_t *targets, float loss_grad_scale, float *loss_out);
const float *tr_gpt_acts_output(const tr_gpt_acts *a);
/* The logits of every position for a model held whole by one stage without tensor
 * parallelism: the forward of `tokens` (B*T host ids), then logits (host, (B*T, V) real
 * columns). Any family (tr_gpt_decode is GPT-2's); for oracles and evaluation. */
TR_MUST_CHECK int tr_gpt_forward_logits(tr_gpt *g, tr_gpt_acts *a, const int32_t *tokens,
                                        float *logits);
/* Backward one micro-batch whose forward ran with this `a`.
 *   last stage: dhidden_out is ignored (the head's gradient was made in forward);
 *   others: dhidden_out (hidden numel) is the gradient of the stage output (it may be
 *   tr_gpt_acts_output_grad_buffer(a), which backward then works in).
 *   not first: the gradient of the stage input goes to tr_gpt_acts_input_grad(a). */
TR_MUST_CHECK int tr_gpt_backward(tr_gpt *g, tr_gpt_acts *a, const float *dhidden_out);
const float *tr_gpt_acts_input_grad(const tr_gpt_acts *a);

/* Wall seconds this stage spent inside tensor-parallel collectives (tp/'s mappings and the
 * vocab-parallel loss) since creation or the last reset; *calls (may be NULL) gets their
 * number. Always 0 when tp_size == 1. For measurements (benchmarks/tp_speedup). */
double tr_gpt_tp_comm_seconds(const tr_gpt *g, long *calls);
void tr_gpt_tp_comm_reset(tr_gpt *g);

/* ------------------------------------------------------------------ generation
 * Inference with a key/value cache on a model held whole by one stage (TP allowed: every TP
 * rank calls with the same tokens and gets the same logits; no sequence parallelism). */
typedef struct tr_gpt_cache tr_gpt_cache;
/* Keys/values of every layer for B sequences of up to max_T (<= max_position_embeddings)
 * positions, and the activations of a call of up to max_T new positions. */
TR_MUST_CHECK int tr_gpt_cache_create(tr_gpt *g, int B, int max_T, tr_gpt_cache **out);
void tr_gpt_cache_free(tr_gpt_cache *c);
int tr_gpt_cache_length(const tr_gpt_cache *c); /* positions cached so far */
void tr_gpt_cache_reset(tr_gpt_cache *c);       /* forget them (new sequences) */
/* Keep the first len positions (0 <= len <= the length; others are ignored), forget the rest:
 * a shared prefix decoded once, then each of several continuations after it. */
void tr_gpt_cache_truncate(tr_gpt_cache *c, int len);
/* Forward n new positions of each of the B sequences (tokens: B*n host ids, sequence-major)
 * at positions [len, len + n), appending their keys and values. logits (host, V real
 * columns, no padding): all_positions ? (B, n, V) : (B, V) of the last new position. The
 * same logits as tr_gpt_forward's for those positions, up to rounding. */
TR_MUST_CHECK int tr_gpt_decode(tr_gpt_cache *c, const int32_t *tokens, int n, int all_positions,
                                float *logits);

/* Sampling of the next token from one row of V logits. temperature <= 0 or top_k == 1:
 * greedy (the first maximum). Else the top_k largest (0 = all), then the smallest set of
 * them whose probability reaches top_p (1 = all; HF's order of filters), drawn with the
 * uniform u in [0, 1). scratch: tr_sample_scratch_bytes(V) bytes. */
typedef struct {
    double temperature; /* 1 = the model's distribution */
    int top_k;
    double top_p;
} tr_sampling;
int tr_sample_token(const float *logits, int V, const tr_sampling *o, double u, void *scratch);
size_t tr_sample_scratch_bytes(int V);

/* Model FLOPs per token for the whole model, PaLM's definition: 6N + 12*l*h*s. */
double tr_gpt_flops_per_token(const tr_gpt_shape *s, double n_params_total);

#endif
