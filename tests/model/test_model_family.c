/* model/: the Llama, Bloom, GPT-NeoX (and the other) families of the stage: the tensor table each family
 * has (no biases, no wpe, untied output_layer, emb_ln, GQA's smaller qkv, SwiGLU's
 * interleaved fc), finite-difference gradients of the whole model, two pipeline stages
 * composing to the whole model, and generation with the key/value cache (also past the
 * training length T, which the rope tables are first made for). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "model/gpt.h"

#include "family_fixture.h"

static void test_tensor_tables(void **state)
{
    (void)state;
    stage st;
    stage_make(&st, LLAMA, 0, 3, 1);
    assert_null(find(st.g, "wpe"));
    assert_null(find(st.g, "layers.0.qkv.bias"));
    assert_null(find(st.g, "layers.0.ln1.bias"));
    assert_null(find(st.g, "lnf.bias"));
    tr_param_tensor *qkv = find(st.g, "layers.1.qkv.weight"), *fc = find(st.g, "layers.1.fc.weight");
    tr_param_tensor *out = find(st.g, "output_layer"), *wte = find(st.g, "wte");
    assert_int_equal(qkv->rows, 16 + 2 * 2 * 4); /* 4 query heads + 2 groups' k and v */
    assert_int_equal(fc->rows, 2 * 24);
    assert_int_equal(find(st.g, "layers.1.fc_proj.weight")->cols, 24);
    assert_non_null(out);
    assert_true(out->vocab_rows && !out->word_embedding && wte->vocab_rows && !wte->word_embedding);
    assert_int_equal(tr_gpt_num_tensors(st.g), 1 + 3 * 6 + 2);
    assert_false(tr_gpt_is_gpt2(tr_gpt_get_shape(st.g)));
    stage_free(&st);
    stage_make(&st, BLOOM, 0, 3, 1);
    assert_null(find(st.g, "wpe"));
    assert_non_null(find(st.g, "emb_ln.weight"));
    assert_non_null(find(st.g, "emb_ln.bias"));
    assert_non_null(find(st.g, "layers.2.fc.bias"));
    assert_true(find(st.g, "emb_ln.weight")->param[0] != 0.0f);
    assert_true(find(st.g, "wte")->word_embedding); /* tied */
    assert_null(find(st.g, "output_layer"));
    stage_free(&st);
    stage_make(&st, FALCON, 0, 3, 1); /* ln1 alone (with its bias), no linear biases */
    assert_non_null(find(st.g, "layers.0.ln1.bias"));
    assert_null(find(st.g, "layers.0.ln2.weight"));
    assert_null(find(st.g, "layers.0.ln2.bias"));
    assert_null(find(st.g, "layers.0.fc.bias"));
    assert_int_equal(find(st.g, "layers.1.qkv.weight")->rows, 16 + 2 * 4);
    assert_int_equal(tr_gpt_num_tensors(st.g), 1 + 3 * 6 + 2);
    stage_free(&st);
    stage_make(&st, PHI, 0, 3, 1); /* the head's bias: Vp rows, no weight decay */
    tr_param_tensor *hb = find(st.g, "output_layer.bias");
    assert_non_null(hb);
    assert_true(hb->rows == 16 && hb->cols == 1 && hb->vocab_rows && !hb->weight_decay);
    assert_int_equal(tr_gpt_num_tensors(st.g), 1 + 3 * 10 + 2 + 2);
    stage_free(&st);
    stage_make(&st, GEMMA, 0, 3, 1); /* the attention NH x 6 = 24 wide, norms start at 0 */
    assert_int_equal(find(st.g, "layers.1.qkv.weight")->rows, 24 + 2 * 2 * 6);
    assert_int_equal(find(st.g, "layers.1.qkv.weight")->cols, 16);
    assert_int_equal(find(st.g, "layers.1.attn_proj.weight")->rows, 16);
    assert_int_equal(find(st.g, "layers.1.attn_proj.weight")->cols, 24);
    assert_int_equal(find(st.g, "layers.1.fc.weight")->rows, 2 * 24);
    assert_int_equal(tr_gpt_num_tensors(st.g), 1 + 3 * 6 + 1);
    assert_int_equal(tr_gpt_init_params(st.g), TR_OK);
    assert_true(find(st.g, "layers.0.ln1.weight")->param[3] == 0.0f); /* the scale 1 + 0 */
    assert_true(find(st.g, "lnf.weight")->param[0] == 0.0f);
    stage_free(&st);
    stage_make(&st, GPTJ, 0, 3, 1); /* fc's and fc_proj's biases without the attention's */
    assert_null(find(st.g, "layers.0.qkv.bias"));
    assert_null(find(st.g, "layers.0.attn_proj.bias"));
    assert_int_equal(find(st.g, "layers.2.fc.bias")->rows, 4 * 16);
    assert_int_equal(find(st.g, "layers.2.fc_proj.bias")->rows, 16);
    assert_int_equal(tr_gpt_num_tensors(st.g), 1 + 3 * 8 + 2 + 2);
    stage_free(&st);
    stage_make(&st, MPT, 0, 3, 1); /* the norms' weights alone, no linear biases, tied */
    assert_null(find(st.g, "layers.0.ln1.bias"));
    assert_null(find(st.g, "layers.1.ln2.bias"));
    assert_null(find(st.g, "lnf.bias"));
    assert_null(find(st.g, "layers.0.fc.bias"));
    assert_non_null(find(st.g, "layers.2.ln2.weight"));
    assert_int_equal(tr_gpt_num_tensors(st.g), 1 + 3 * 6 + 1);
    stage_free(&st);
    stage_make(&st, BLOOM_NO_NORM_BIAS, 0, 3, 1); /* the embedding norm's bias off too */
    assert_non_null(find(st.g, "emb_ln.weight"));
    assert_null(find(st.g, "emb_ln.bias"));
    assert_non_null(find(st.g, "layers.0.qkv.bias"));
    assert_int_equal(tr_gpt_num_tensors(st.g), 2 + 3 * 10 + 1);
    stage_free(&st);
    stage_make(&st, OPT, 0, 3, 1); /* GPT-2's table: wpe, every bias, tied; not GPT-2 */
    assert_non_null(find(st.g, "wpe"));
    assert_non_null(find(st.g, "layers.1.fc.bias"));
    assert_int_equal(find(st.g, "layers.1.fc.weight")->rows, 4 * 16);
    assert_null(find(st.g, "output_layer"));
    assert_int_equal(tr_gpt_num_tensors(st.g), 2 + 3 * 12 + 2);
    assert_false(tr_gpt_is_gpt2(tr_gpt_get_shape(st.g)));
    stage_free(&st);
}

/* d(mean loss)/d(param) by central differences on a few elements of every tensor. ReLU's kink
 * (OPT): a step of h = 1e-2 moves some of the 3 x 10 x 64 ReLU inputs across 0 for most
 * elements (a central difference across the kink is not the derivative), so the differences
 * are of the loss with each ReLU frozen at the unperturbed forward's sign pattern (RELU_REPLAY),
 * smooth, whose derivative at that point is the model's: the backward under test runs the
 * real relu_backward on the real forward's inputs. */
static void check_finite_difference(int family)
{
    const int B = 2, T = 5, BT = B * T;
    int32_t tokens[10], targets[10];
    make_batch(BT, tokens, targets);
    stage st;
    stage_make(&st, family, 0, 3, B);
    float loss;
    relu_mode = RELU_RECORD, relu_at = 0, relu_crossed = 0;
    assert_int_equal(tr_gpt_forward(st.g, st.a, tokens, NULL, targets, 1.0f / BT, &loss), 0);
    size_t recorded = relu_at;
    assert_true(family != OPT || recorded == 3 * 10 * 64);
    relu_mode = RELU_REPLAY;
    assert_int_equal(tr_gpt_backward(st.g, st.a, NULL), 0);
    assert_true(loss > 1.5f && loss < 4.0f);
    int checked = 0;
    for (int i = 0; i < tr_gpt_num_tensors(st.g); i++) {
        tr_param_tensor *t = tr_gpt_tensor(st.g, i);
        for (int s = 0; s < 4; s++) {
            size_t e = (size_t)(s * 7919 + i * 31) % t->numel;
            if (t->vocab_rows && e >= (size_t)11 * t->cols)
                e %= (size_t)11 * t->cols; /* padded rows have zero gradient; test real ones */
            float keep = t->param[e], h = 1e-2f, lp, lm;
            t->param[e] = keep + h, relu_at = 0;
            assert_int_equal(tr_gpt_forward(st.g, st.a, tokens, NULL, targets, 0.0f, &lp), TR_OK);
            t->param[e] = keep - h, relu_at = 0;
            assert_int_equal(tr_gpt_forward(st.g, st.a, tokens, NULL, targets, 0.0f, &lm), TR_OK);
            assert_true(relu_at == recorded);
            t->param[e] = keep;
            double fd = ((double)lp - lm) / (2.0 * h), an = t->grad[e];
            double err = fabs(fd - an) / fmax(fabs(fd) + fabs(an), 1e-3);
            if (err > 3e-2)
                fail_msg("family %d %s[%zu]: finite difference %.6g vs backward %.6g", family,
                         t->name, e, fd, an);
            checked++;
        }
    }
    assert_true(checked > 60);
    if (getenv("TRIDENT_TEST_VERBOSE"))
        printf("family %d: %d differences; %zu ReLU inputs crossed 0 in their steps\n", family,
               checked, relu_crossed);
    relu_mode = RELU_PLAIN;
    stage_free(&st);
}

static void test_finite_difference(void **state)
{
    (void)state;
    check_finite_difference(LLAMA);
    check_finite_difference(BLOOM);
    check_finite_difference(MIXED);
    check_finite_difference(NEOX);
    check_finite_difference(FALCON);
    check_finite_difference(PHI);
    check_finite_difference(GEMMA);
    check_finite_difference(GPTJ);
    check_finite_difference(MPT);
    check_finite_difference(BLOOM_NO_NORM_BIAS);
    check_finite_difference(OPT);
}

/* Stages [0,1) and [1,3) chained give the whole model's loss and gradients. */
static void check_stages_compose(int family)
{
    stage whole, s0, s1;
    stages_compose(family, &whole, &s0, &s1);
    stage_free(&whole);
    stage_free(&s0);
    stage_free(&s1);
}

static void test_stages_compose(void **state)
{
    (void)state;
    check_stages_compose(LLAMA);
    check_stages_compose(BLOOM);
    check_stages_compose(NEOX);
    check_stages_compose(FALCON);
    check_stages_compose(PHI);
    check_stages_compose(GEMMA);
    check_stages_compose(GPTJ);
    check_stages_compose(MPT);
    check_stages_compose(OPT);
}

/* Two sequences of len tokens (B = 2, rows of tokens) fed to the emptied cache c as a prefix
 * of `prefix` positions, then one position at a time: each position's logits are want's,
 * (2, len, V), within 1e-5. */
static void decode_one_at_a_time(tr_gpt_cache *c, int family, const int32_t *tokens, int len,
                                 int prefix, const float *want, int V)
{
    enum { B = 2 };
    int32_t pre[B * 16];
    float step[B * 16];
    assert_true(prefix <= 16 && V <= 16);
    for (int b = 0; b < B; b++)
        memcpy(pre + b * prefix, tokens + b * len, (size_t)prefix * sizeof(int32_t));
    tr_gpt_cache_reset(c);
    assert_int_equal(tr_gpt_decode(c, pre, prefix, 0, step), TR_OK);
    for (int p = prefix; p < len; p++) {
        int32_t next[B] = {tokens[p], tokens[len + p]};
        assert_int_equal(tr_gpt_decode(c, next, 1, 0, step), TR_OK);
        for (int b = 0; b < B; b++)
            for (int v = 0; v < V; v++) {
                float w = want[((size_t)b * len + p) * V + v];
                if (fabsf(step[b * V + v] - w) > 1e-5f * (1 + fabsf(w)))
                    fail_msg("family %d: position %d one at a time %.7g, all at once %.7g",
                             family, p, step[b * V + v], w);
            }
    }
}

/* Generation: the cached forward of whole sequences gives the training forward's logits
 * (tr_gpt_forward_logits), and positions fed one at a time after a prefix give the same. */
static void check_generation(int family)
{
    const int B = 2, T = 5, V = 11, N = B * T;
    int32_t tokens[10], targets[10];
    make_batch(N, tokens, targets);
    stage st;
    stage_make(&st, family, 0, 3, B);
    float want[10 * 11], all[10 * 11];
    assert_int_equal(tr_gpt_forward_logits(st.g, st.a, tokens, want), TR_OK);
    /* the head in chunks of 3 rows (10 rows: 4 chunks, the last of 1): the same logits */
    tr_gpt_set_head_chunk_rows(st.g, 3);
    assert_int_equal(tr_gpt_forward_logits(st.g, st.a, tokens, all), TR_OK);
    tr_gpt_set_head_chunk_rows(st.g, 0);
    for (int i = 0; i < N * V; i++)
        if (fabsf(all[i] - want[i]) > 1e-6f * (1 + fabsf(want[i])))
            fail_msg("family %d: logits[%d] in 3-row head chunks %.7g, in one %.7g", family, i,
                     all[i], want[i]);
    tr_gpt_cache *c = NULL;
    assert_int_equal(tr_gpt_cache_create(st.g, B, 6, &c), TR_OK);
    assert_int_equal(tr_gpt_decode(c, tokens, T, 1, all), TR_OK);
    for (int i = 0; i < N * V; i++)
        if (fabsf(all[i] - want[i]) > 1e-5f * (1 + fabsf(want[i])))
            fail_msg("family %d: cached logits[%d] %.7g, training forward %.7g", family, i,
                     all[i], want[i]);
    decode_one_at_a_time(c, family, tokens, T, 2, want, V); /* after a prefix of 2 */
    tr_gpt_cache_free(c);
    stage_free(&st);
}

static void test_generation(void **state)
{
    (void)state;
    check_generation(LLAMA);
    check_generation(BLOOM);
    check_generation(MIXED);
    check_generation(NEOX);
    check_generation(FALCON);
    check_generation(PHI);
    check_generation(GEMMA);
    check_generation(GPTJ);
    check_generation(MPT);
    check_generation(BLOOM_NO_NORM_BIAS);
    check_generation(LLAMA_LINEAR);
    check_generation(LLAMA3);
    check_generation(OPT);
}

/* Generation past the training length: a model of T = 5 (its rope tables hold 5 positions)
 * with a cache of 12 gives the logits of the training forward of a model of T = 12 (the same
 * parameters) at every position, fed at once or one at a time after a prefix of 3; its decode
 * is bit for bit that of the T = 12 model (the grown tables repeat the rows of tables made for
 * 12 positions), and its training forward is unchanged by the growth. */
static void check_generation_past_T(int family)
{
    enum { B = 2, T = 5, TL = 12, V = 11 };
    int32_t tokens[B * TL], targets[B * TL], short_tokens[B * T];
    make_batch(B * TL, tokens, targets);
    for (int b = 0; b < B; b++)
        memcpy(short_tokens + b * T, tokens + b * TL, T * sizeof(int32_t));
    tr_gpt_shape s = family_shape(family, 0, 3);
    s.max_T = TL;
    stage st, lt; /* T = 5 and T = 12 */
    stage_make_shape(&st, s, B);
    s.T = TL;
    stage_make_shape(&lt, s, B);
    size_t n = tr_gpt_num_params(st.g);
    assert_int_equal(tr_gpt_num_params(lt.g), n);
    assert_memory_equal(st.params, lt.params, n * sizeof(float));
    static float want[B * TL * V], all[B * TL * V], all_l[B * TL * V];
    static float short_before[B * T * V], short_after[B * T * V];
    assert_int_equal(tr_gpt_forward_logits(lt.g, lt.a, tokens, want), TR_OK);
    assert_int_equal(tr_gpt_forward_logits(st.g, st.a, short_tokens, short_before), TR_OK);
    tr_gpt_cache *c = NULL, *cl = NULL;
    assert_int_equal(tr_gpt_cache_create(st.g, B, TL, &c), TR_OK);
    assert_int_equal(tr_gpt_cache_create(lt.g, B, TL, &cl), TR_OK);
    assert_int_equal(tr_gpt_decode(c, tokens, TL, 1, all), TR_OK);
    assert_int_equal(tr_gpt_decode(cl, tokens, TL, 1, all_l), TR_OK);
    assert_memory_equal(all, all_l, sizeof all);
    for (int i = 0; i < B * TL * V; i++)
        if (fabsf(all[i] - want[i]) > 1e-5f * (1 + fabsf(want[i])))
            fail_msg("family %d: cached logits[%d] %.7g past T, training forward of T = %d %.7g",
                     family, i, all[i], TL, want[i]);
    decode_one_at_a_time(c, family, tokens, TL, 3, want, V); /* after a prefix of 3 */
    /* a cache past the config's positions is still refused */
    tr_gpt_cache *over = NULL;
    assert_int_equal(tr_gpt_cache_create(st.g, B, TL + 1, &over), TR_ERR_INVALID);
    assert_int_equal(tr_gpt_forward_logits(st.g, st.a, short_tokens, short_after), TR_OK);
    assert_memory_equal(short_before, short_after, sizeof short_before);
    tr_gpt_cache_free(c);
    tr_gpt_cache_free(cl);
    stage_free(&st);
    stage_free(&lt);
}

static void test_generation_past_T(void **state)
{
    (void)state;
    check_generation_past_T(LLAMA);
    check_generation_past_T(MIXED);
    check_generation_past_T(BLOOM);
    check_generation_past_T(NEOX);
    check_generation_past_T(FALCON);
    check_generation_past_T(PHI);
    check_generation_past_T(GEMMA);
    check_generation_past_T(GPTJ);
    check_generation_past_T(MPT);
    check_generation_past_T(LLAMA_LINEAR);
    check_generation_past_T(LLAMA3);
    check_generation_past_T(OPT);
}

/* Packed sequences: two examples in one row (segments, restarting positions) give each the
 * logits it has alone at the start of a row, for rope (positions restart) and ALiBi. */
static void check_packing(int family)
{
    const int T = 5, V = 11;
    int32_t row[5] = {3, 7, 1, 9, 4}, seg[5] = {0, 0, 0, 1, 1}, pos[5] = {0, 1, 2, 0, 1};
    int32_t alone_b[5] = {9, 4, 0, 0, 0};
    stage st;
    stage_make(&st, family, 0, 3, 1);
    float packed[5 * 11], a[5 * 11], b[5 * 11];
    assert_int_equal(tr_gpt_forward_logits(st.g, st.a, row, a), TR_OK); /* example A alone */
    assert_int_equal(tr_gpt_forward_logits(st.g, st.a, alone_b, b), TR_OK);
    assert_int_equal(tr_gpt_acts_set_packing(st.a, seg, pos, NULL), TR_OK);
    assert_int_equal(tr_gpt_forward_logits(st.g, st.a, row, packed), TR_OK);
    for (int t = 0; t < T; t++)
        for (int v = 0; v < V; v++) {
            float want = t < 3 ? a[t * V + v] : b[(t - 3) * V + v], got = packed[t * V + v];
            if (fabsf(got - want) > 1e-5f * (1 + fabsf(want)))
                fail_msg("family %d: packed position %d logit %.7g, alone %.7g", family, t, got,
                         want);
        }
    /* position id T (< max_T 6): no row of T tokens has it; past the rope tables' T rows */
    pos[4] = T;
    assert_int_equal(tr_gpt_acts_set_packing(st.a, seg, pos, NULL),
                     family == BLOOM || family == MPT ? TR_OK : TR_ERR_INVALID);
    stage_free(&st);
}

static void test_packing(void **state)
{
    (void)state;
    check_packing(LLAMA);
    check_packing(BLOOM);
    check_packing(NEOX);
    check_packing(FALCON);
    check_packing(PHI);
    check_packing(GEMMA);
    check_packing(GPTJ);
    check_packing(MPT);
}

/* Invalid family shapes are refused, not crashed on. */
static void test_bad_shapes(void **state)
{
    (void)state;
    tr_gpt_shape s = family_shape(LLAMA, 0, 3);
    tr_gpt *g = NULL;
    size_t n;
    s.query_groups = 3;
    assert_int_equal(tr_gpt_create(&s, tr_kernels_cpu(), NULL, &g), TR_ERR_INVALID);
    s = family_shape(LLAMA, 0, 3);
    s.rotary_dims = 5;
    assert_int_equal(tr_gpt_count_params(&s, &n), TR_ERR_INVALID);
    s.rotary_dims = 6; /* more than the head size 4 */
    assert_int_equal(tr_gpt_count_params(&s, &n), TR_ERR_INVALID);
    s = family_shape(LLAMA, 0, 3);
    s.tp_size = 4, s.query_groups = 2; /* 2 groups over 4 ranks */
    assert_int_equal(tr_gpt_count_params(&s, &n), TR_ERR_INVALID);
    s = family_shape(FALCON, 0, 3);
    s.parallel_residual = 0; /* a shared norm without the parallel residual */
    assert_int_equal(tr_gpt_count_params(&s, &n), TR_ERR_INVALID);
    s = family_shape(PHI, 0, 3);
    s.untie = 0; /* the head's bias on the tied word embedding */
    assert_int_equal(tr_gpt_count_params(&s, &n), TR_ERR_INVALID);
    s = family_shape(GEMMA, 0, 3);
    s.swiglu = 1; /* two gated activations */
    assert_int_equal(tr_gpt_count_params(&s, &n), TR_ERR_INVALID);
    s = family_shape(GEMMA, 0, 3);
    s.rotary_dims = 8; /* more than the head size 6 */
    assert_int_equal(tr_gpt_count_params(&s, &n), TR_ERR_INVALID);
    s = family_shape(GEMMA, 0, 3);
    s.embedding_multiplier = INFINITY;
    assert_int_equal(tr_gpt_count_params(&s, &n), TR_ERR_INVALID);
    s = family_shape(LLAMA3, 0, 3);
    s.rope_high_freq_factor = 1.0f; /* not above the low one */
    assert_int_equal(tr_gpt_count_params(&s, &n), TR_ERR_INVALID);
    s = family_shape(LLAMA_LINEAR, 0, 3);
    s.position = TR_POS_LEARNED, s.rotary_dims = 0; /* scaling without rope */
    assert_int_equal(tr_gpt_count_params(&s, &n), TR_ERR_INVALID);
    s = family_shape(OPT, 0, 3);
    s.geglu = 1, s.ffn = 24; /* ReLU and a gated MLP; ReLU and the exact GELU */
    assert_int_equal(tr_gpt_count_params(&s, &n), TR_ERR_INVALID);
    s = family_shape(OPT, 0, 3);
    s.gelu_exact = 1;
    assert_int_equal(tr_gpt_count_params(&s, &n), TR_ERR_INVALID);
}

/* Rope scaling's frequencies: linear keeps them (its positions are divided), Llama 3.1's
 * divides the long wavelengths by the factor, keeps the short ones and blends between. */
static void test_rope_scaling_frequencies(void **state)
{
    (void)state;
    tr_gpt_shape plain = family_shape(LLAMA, 0, 3), lin = family_shape(LLAMA_LINEAR, 0, 3);
    for (int i = 0; i < 2; i++)
        assert_true(tr_gpt_rope_inv_freq(&plain, i) == tr_gpt_rope_inv_freq(&lin, i));
    tr_gpt_shape l3 = family_shape(LLAMA3, 0, 3);
    /* rotary dims 4 of base 10: inv_freq 1 (wavelength 2 pi < 32 / 4: kept) and 10^-0.5
     * (wavelength 19.87 between 8 and 32: blended by s = (32 / 19.87 - 1) / 3) */
    assert_true(tr_gpt_rope_inv_freq(&l3, 0) == 1.0f);
    double f1 = 1.0 / sqrt(10.0), w = 2 * M_PI / (float)f1, sm = (32 / w - 1) / 3;
    double want = (1 - sm) * (float)f1 / 8 + sm * (float)f1;
    assert_true(fabs(tr_gpt_rope_inv_freq(&l3, 1) - want) <= 1e-7 * want);
    l3.rope_original_positions = 8; /* now 19.87 > 8 / 1: divided by the factor */
    assert_true(tr_gpt_rope_inv_freq(&l3, 1) == (float)((float)f1 / 8.0));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tensor_tables),
        cmocka_unit_test(test_finite_difference),
        cmocka_unit_test(test_stages_compose),
        cmocka_unit_test(test_generation),
        cmocka_unit_test(test_generation_past_T),
        cmocka_unit_test(test_packing),
        cmocka_unit_test(test_bad_shapes),
        cmocka_unit_test(test_rope_scaling_frequencies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
