/* model/ — GPT-2: one pipeline stage's parameters and the forward/backward of its layers.
 *
 * Contract:
 *  - Architecture: learned positions, pre-LN blocks (LN -> causal self-attention -> residual,
 *    LN -> MLP 4h with tanh-GELU -> residual), final LN, LM head tied to the token embedding,
 *    vocabulary padded up to a multiple of make_vocab_size_divisible_by.
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
 *    tr_init_normal(seed, hash(NAME), i) * std (std 0.02; output projections
 *    0.02/sqrt(2*num_layers)); LN weights 1, biases 0. Names are global ("layers.7.qkv.weight"),
 *    so every stage/shard computes exactly its slice of the single-process model.
 *  - Tensor layouts (row-major, PyTorch Linear convention: weight (out, in), y = x W^T + b):
 *    qkv.weight (NH*3*HS, C) with rows ordered (head, {q,k,v}, d) so a head's q, k and v are
 *    contiguous; attn_proj.weight (C, C); fc.weight (4C, C); fc_proj.weight (C, 4C);
 *    wte (Vp, C); wpe (max_position_embeddings, C).
 *  - Backward ACCUMULATES into the gradient buffer (+=): micro-batches accumulate for free;
 *    the caller zeroes the buffer once per optimizer step.
 *  - Activations of one micro-batch live in a tr_gpt_acts; a pipeline keeps one per in-flight
 *    micro-batch. The last stage runs the head's backward inside forward (the loss gradient is
 *    known there), so it never keeps B*T*V logits per micro-batch. */
#ifndef TR_GPT_H
#define TR_GPT_H

#include <stddef.h>
#include <stdint.h>

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
} tr_gpt_shape;

typedef struct {
    char name[48];
    int rows, cols;       /* shape (cols = 1 for vectors) */
    size_t numel;
    size_t offset;        /* into both flat buffers (parameters and gradients) */
    int weight_decay;     /* 0 for biases and LN weights */
    size_t forward_offset; /* running offset in forward order (offset counts from the end) */
    float *param, *grad;  /* views, valid after tr_gpt_bind() */
} tr_param_tensor;

typedef struct tr_gpt tr_gpt;
typedef struct tr_gpt_acts tr_gpt_acts;

/* Shape of the stage holding layers [layer_first, +layer_count) of the configured model. */
int tr_gpt_shape_from_config(const tr_config *cfg, int layer_first, int layer_count,
                             tr_gpt_shape *out);
int tr_gpt_create(const tr_gpt_shape *shape, const tr_kernels *k, tr_gpt **out);
void tr_gpt_free(tr_gpt *g);
const tr_gpt_shape *tr_gpt_get_shape(const tr_gpt *g);

int tr_gpt_num_tensors(const tr_gpt *g);
tr_param_tensor *tr_gpt_tensor(tr_gpt *g, int i);
size_t tr_gpt_num_params(const tr_gpt *g); /* this stage's element count */

/* Point the tensor views into caller-owned flat buffers of tr_gpt_num_params() floats. */
void tr_gpt_bind(tr_gpt *g, float *params, float *grads);
/* Fill the bound parameters with the layout-free initialisation. */
int tr_gpt_init_params(tr_gpt *g);

/* Activation storage for one micro-batch of B sequences. */
int tr_gpt_acts_create(tr_gpt *g, int B, tr_gpt_acts **out);
void tr_gpt_acts_free(tr_gpt_acts *a);

/* Forward one micro-batch.
 *   first stage: `tokens` (B*T host ints < V); others: `hidden_in` (B,T,C device floats).
 *   last stage: `targets` (B*T host ints); *loss_out = mean token loss of the micro-batch;
 *     if loss_grad_scale != 0 the head's backward runs now with dloss/dlogit scaled so the
 *     loss being differentiated is loss_grad_scale * sum of token losses.
 *   not last: the output hidden state is tr_gpt_acts_output(a) (B,T,C). */
int tr_gpt_forward(tr_gpt *g, tr_gpt_acts *a, const int32_t *tokens, const float *hidden_in,
                   const int32_t *targets, float loss_grad_scale, float *loss_out);
const float *tr_gpt_acts_output(const tr_gpt_acts *a);
/* Backward one micro-batch whose forward ran with this `a`.
 *   last stage: dhidden_out is ignored (the head's gradient was made in forward);
 *   others: dhidden_out (B,T,C) is the gradient of the stage output.
 *   not first: the gradient of the stage input goes to tr_gpt_acts_input_grad(a). */
int tr_gpt_backward(tr_gpt *g, tr_gpt_acts *a, const float *dhidden_out);
const float *tr_gpt_acts_input_grad(const tr_gpt_acts *a);

/* Model FLOPs per token for the whole model, PaLM's definition: 6N + 12*l*h*s. */
double tr_gpt_flops_per_token(const tr_gpt_shape *s, double n_params_total);

#endif
