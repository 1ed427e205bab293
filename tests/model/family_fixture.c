/* model/ family tests' fixture (family_fixture.h): each family's small shape, stages made
 * from them with every parameter moved off its initial value, OPT's watched ReLU. */
#include "family_fixture.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Llama: 4 heads in 2 groups of head size 4, rope, RMSNorm, SwiGLU of width 24, untied, no
 * biases. Bloom: 6 heads of size 2 (non-power-of-two ALiBi), embedding LayerNorm.
 * Mixed: rope on half of each head, multi-query (1 group), SwiGLU with biases, embedding
 * RMSNorm, learned positions off. GPT-NeoX: rope on half of each head, the parallel residual,
 * the exact GELU of an MLP of width 40, untied. Falcon-7B: the parallel residual with one norm
 * (ln1's tensors serve the MLP too: no ln2), multi-query, no linear biases, tied. Phi-2: the
 * parallel residual with one norm, rope on half of each head, the tanh GELU, an untied output
 * layer with a bias (vocab-parallel, padding rows included). Gemma: heads of size 6 (kv_channels:
 * the attention 24 wide of hidden 16), rope over the whole head, 2 groups, RMSNorm scaling by
 * 1 + weight, the embedding times 4, GeGLU with the exact GELU, tied, no biases. Llama with
 * rope scaling: linear position interpolation (positions / 4), Llama 3.1's frequencies. GPT-J:
 * Phi-2's layer with the MLP's biases alone (add_mlp_bias: no qkv or attn_proj bias). MPT:
 * Bloom's ALiBi (6 heads) without the embedding norm, LayerNorms without biases
 * (layernorm_bias false), no linear biases, the exact GELU; Bloom's with its norms' biases
 * off (the embedding norm's too). OPT: GPT-2's (LayerNorm, learned positions, biases, tied)
 * with the MLP's ReLU. Mixtral: Llama's with 4 experts, top-2, aux and z losses on; an MoE
 * GPT-2: 3 GELU experts with biases, top-1 of the softmax over all. */
tr_gpt_shape family_shape(int family, int first, int count)
{
    tr_gpt_shape s = {.num_layers = 3, .C = 16, .NH = 4, .T = 5, .max_T = 6, .V = 11, .Vp = 16,
                      .eps = 1e-5f, .init_std = 0.3f, .seed = 99, .layer_first = first,
                      .layer_count = count, .tp_size = 1};
    if (family == LLAMA || family == LLAMA_LINEAR || family == LLAMA3) {
        s.rmsnorm = 1, s.position = TR_POS_ROPE, s.rotary_dims = 4, s.rotary_base = 10000.0f;
        s.swiglu = 1, s.ffn = 24, s.query_groups = 2, s.untie = 1, s.no_linear_bias = 1;
        if (family == LLAMA_LINEAR)
            s.rope_scaling = TR_ROPE_SCALING_LINEAR, s.rope_factor = 4.0f;
        if (family == LLAMA3) /* base 10: wavelengths 6.3 (kept) and 19.9 (blended) */
            s.rope_scaling = TR_ROPE_SCALING_LLAMA3, s.rope_factor = 8.0f, s.rotary_base = 10.0f,
            s.rope_low_freq_factor = 1.0f, s.rope_high_freq_factor = 4.0f,
            s.rope_original_positions = 32;
    } else if (family == BLOOM || family == BLOOM_NO_NORM_BIAS) {
        s.C = 12, s.NH = 6, s.position = TR_POS_ALIBI, s.embedding_ln = 1;
        s.no_norm_bias = family == BLOOM_NO_NORM_BIAS;
    } else if (family == MPT) {
        s.C = 12, s.NH = 6, s.position = TR_POS_ALIBI, s.no_norm_bias = 1, s.no_linear_bias = 1;
        s.gelu_exact = 1;
    } else if (family == OPT) {
        s.relu = 1;
    } else if (family == MIXTRAL) { /* Llama's layer with 4 SwiGLU experts, top-2 */
        s.rmsnorm = 1, s.position = TR_POS_ROPE, s.rotary_dims = 4, s.rotary_base = 10000.0f;
        s.swiglu = 1, s.ffn = 24, s.query_groups = 2, s.untie = 1, s.no_linear_bias = 1;
        s.num_experts = 4, s.moe_topk = 2, s.moe_aux_loss = 1;
        s.moe_aux_coeff = 1e-2f, s.moe_z_coeff = 1e-3f;
    } else if (family == MOE_GPT) { /* GPT-2's layer (biases) with 3 GELU experts, top-1 of
                                     * the softmax over all (large coefficients: seen) */
        s.num_experts = 3, s.moe_topk = 1, s.moe_pre_softmax = 1, s.moe_aux_loss = 1;
        s.moe_aux_coeff = 2.0f, s.moe_z_coeff = 1.0f, s.ffn = 24;
    } else if (family == MIXED) {
        s.rmsnorm = 1, s.position = TR_POS_ROPE, s.rotary_dims = 2, s.rotary_base = 100.0f;
        s.swiglu = 1, s.query_groups = 1, s.embedding_ln = 1;
    } else if (family == NEOX) { /* LayerNorm with biases, linear biases, untied */
        s.position = TR_POS_ROPE, s.rotary_dims = 2, s.rotary_base = 10000.0f, s.untie = 1;
        s.parallel_residual = 1, s.gelu_exact = 1, s.ffn = 40;
    } else if (family == FALCON) { /* one norm for both branches, multi-query, no biases */
        s.position = TR_POS_ROPE, s.rotary_dims = 4, s.rotary_base = 10000.0f;
        s.query_groups = 1, s.no_linear_bias = 1, s.parallel_residual = 1;
        s.parallel_shared_norm = 1, s.gelu_exact = 1;
    } else if (family == GEMMA) {
        s.rmsnorm = 1, s.position = TR_POS_ROPE, s.rotary_dims = 6, s.rotary_base = 10000.0f;
        s.kv_channels = 6, s.query_groups = 2, s.geglu = 1, s.gelu_exact = 1, s.ffn = 24;
        s.no_linear_bias = 1, s.layernorm_1p = 1, s.embedding_multiplier = 4.0f;
    } else { /* Phi-2: one norm, rope on half of each head, tanh GELU, the head's bias */
        s.position = TR_POS_ROPE, s.rotary_dims = 2, s.rotary_base = 10000.0f, s.untie = 1;
        s.output_bias = 1, s.parallel_residual = 1, s.parallel_shared_norm = 1;
        if (family == GPTJ)
            s.no_linear_bias = 1, s.mlp_bias = 1;
    }
    s.is_first = first == 0;
    s.is_last = first + count == s.num_layers;
    return s;
}

/* OPT's stages run on the CPU table with a watched relu_forward: plain, or recording the sign
 * pattern (x > 0) of every input it gets, in call order, or replaying it: out = x where the
 * recorded x was > 0, else 0 (the ReLU frozen at the recorded point, a smooth function whose
 * derivative there is ReLU's wherever no input is exactly 0; relu_crossed counts the inputs
 * whose own sign differs from the replayed one) */
int relu_mode;
static unsigned char relu_mask[1 << 14];
size_t relu_at, relu_crossed;

static void watched_relu_forward(tr_stream st, float *out, const float *inp, size_t n)
{
    assert_true(relu_mode == RELU_PLAIN || relu_at + n <= sizeof relu_mask);
    if (relu_mode != RELU_REPLAY)
        tr_kernels_cpu()->relu_forward(st, out, inp, n);
    for (size_t i = 0; relu_mode == RELU_RECORD && i < n; i++)
        relu_mask[relu_at + i] = inp[i] > 0;
    for (size_t i = 0; relu_mode == RELU_REPLAY && i < n; i++) {
        relu_crossed += relu_mask[relu_at + i] != (inp[i] > 0);
        out[i] = relu_mask[relu_at + i] ? inp[i] : 0.0f;
    }
    relu_at += relu_mode == RELU_PLAIN ? 0 : n;
}

/* The MoE router watched the same way (router_mode): recording every call's chosen experts, or
 * replaying them: the experts of the recorded call, their weights made from this call's
 * logits (the routing frozen; router_crossed counts choices that differ from the replayed) */
int router_mode;
static int32_t router_idx[1 << 12];
size_t router_at, router_crossed;

static void watched_router_forward(tr_stream st, int32_t *idx, float *weights, float *probs,
                                   float *lse, const float *logits, int N, int E, int k, int pre)
{
    size_t n = (size_t)N * k;
    assert_true(router_mode == RELU_PLAIN || router_at + n <= sizeof router_idx / sizeof *idx);
    tr_kernels_cpu()->moe_router_forward(st, idx, weights, probs, lse, logits, N, E, k, pre);
    for (size_t i = 0; router_mode == RELU_RECORD && i < n; i++)
        router_idx[router_at + i] = idx[i];
    for (int r = 0; router_mode == RELU_REPLAY && r < N; r++) {
        const int32_t *want = router_idx + router_at + (size_t)r * k;
        double sum = 0;
        for (int j = 0; j < k; j++) {
            router_crossed += idx[r * k + j] != want[j];
            idx[r * k + j] = want[j];
            sum += exp((double)logits[r * E + want[j]] - logits[r * E + want[0]]);
        }
        for (int j = 0; j < k; j++)
            weights[r * k + j] =
                pre ? probs[r * E + want[j]]
                    : (float)(exp((double)logits[r * E + want[j]] - logits[r * E + want[0]]) / sum);
    }
    router_at += router_mode == RELU_PLAIN ? 0 : n;
}

static const tr_kernels *stage_kernels(const tr_gpt_shape *s)
{
    static tr_kernels watched;
    if (!s->relu && !s->num_experts)
        return tr_kernels_cpu();
    watched = *tr_kernels_cpu();
    if (s->relu)
        watched.relu_forward = watched_relu_forward;
    if (s->num_experts)
        watched.moe_router_forward = watched_router_forward;
    return &watched;
}


void stage_make_shape(stage *st, tr_gpt_shape s, int B)
{
    assert_int_equal(tr_gpt_create(&s, stage_kernels(&s), NULL, &st->g), TR_OK);
    size_t n = tr_gpt_num_params(st->g), counted = 0;
    assert_int_equal(tr_gpt_count_params(&s, &counted), TR_OK);
    assert_int_equal(counted, n);
    st->params = calloc(n, sizeof(float));
    st->grads = calloc(n, sizeof(float));
    tr_gpt_bind(st->g, st->params, st->grads);
    assert_int_equal(tr_gpt_init_params(st->g), TR_OK);
    /* every tensor away from its initial value (norm weights 1, biases 0) */
    for (size_t i = 0; i < n; i++)
        st->params[i] += 0.05f * (float)sin(0.37 * (double)i);
    assert_int_equal(tr_gpt_acts_create(st->g, B, &st->a), TR_OK);
}

void stage_make(stage *st, int family, int first, int count, int B)
{
    stage_make_shape(st, family_shape(family, first, count), B);
}

void stage_free(stage *st)
{
    tr_gpt_acts_free(st->a);
    tr_gpt_free(st->g);
    free(st->params);
    free(st->grads);
}

tr_param_tensor *find(tr_gpt *g, const char *name)
{
    for (int i = 0; i < tr_gpt_num_tensors(g); i++)
        if (!strcmp(tr_gpt_tensor(g, i)->name, name))
            return tr_gpt_tensor(g, i);
    return NULL;
}

void make_batch(int n, int32_t *tokens, int32_t *targets)
{
    for (int i = 0; i < n; i++) {
        tokens[i] = (int32_t)((i * 7 + 3) % 11);
        targets[i] = (int32_t)((i * 5 + 1) % 11);
    }
}

/* Two pipeline stages against the whole model (family_fixture.h). */
void stages_compose(int family, stage *whole_, stage *s0_, stage *s1_)
{
    const int B = 2, BT = 10;
    int32_t tokens[10], targets[10];
    make_batch(BT, tokens, targets);
    stage whole, s0, s1;
    stage_make(&whole, family, 0, 3, B);
    stage_make(&s0, family, 0, 1, B);
    stage_make(&s1, family, 1, 2, B);
    for (int k = 0; k < 2; k++) { /* the same values by name (the perturbation follows the
                                   * buffer offset, so copy the whole model's in) */
        stage *part = k ? &s1 : &s0;
        for (int i = 0; i < tr_gpt_num_tensors(part->g); i++) {
            tr_param_tensor *t = tr_gpt_tensor(part->g, i), *w = find(whole.g, t->name);
            assert_non_null(w);
            memcpy(t->param, w->param, t->numel * sizeof(float));
        }
    }
    float scale = 1.0f / BT, loss_whole = 0, loss_split = 0;
    assert_int_equal(tr_gpt_forward(whole.g, whole.a, tokens, NULL, targets, scale, &loss_whole), 0);
    assert_int_equal(tr_gpt_backward(whole.g, whole.a, NULL), 0);
    assert_int_equal(tr_gpt_forward(s0.g, s0.a, tokens, NULL, NULL, scale, NULL), 0);
    assert_int_equal(tr_gpt_forward(s1.g, s1.a, NULL, tr_gpt_acts_output(s0.a), targets, scale,
                                    &loss_split), 0);
    assert_int_equal(tr_gpt_backward(s1.g, s1.a, NULL), 0);
    assert_int_equal(tr_gpt_backward(s0.g, s0.a, tr_gpt_acts_input_grad(s1.a)), 0);
    assert_true(loss_whole == loss_split);
    for (int i = 0; i < tr_gpt_num_tensors(whole.g); i++) {
        tr_param_tensor *w = tr_gpt_tensor(whole.g, i);
        tr_param_tensor *a = find(s0.g, w->name), *b = find(s1.g, w->name);
        for (size_t e = 0; e < w->numel; e++) {
            float got = (a ? a->grad[e] : 0.0f) + (b ? b->grad[e] : 0.0f);
            assert_true(fabsf(got - w->grad[e]) <= 1e-6f + 1e-5f * fabsf(w->grad[e]));
        }
    }
    *whole_ = whole, *s0_ = s0, *s1_ = s1;
}
