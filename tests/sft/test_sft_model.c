/* Packed supervised fine-tuning sequences (issue 20): the attention's segments (a packed run
 * computes what it computes alone, forward and backward), per-row loss weights, and the
 * model: every example packed in one row gives its own loss and, summed, its own gradients
 * as when it runs alone at the start of a row; targets whose weight is 0 (masked prompt
 * tokens) never change the loss or a gradient, whatever their content. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "model/gpt.h"

static float *randn(size_t n, uint64_t seed)
{
    float *x = calloc(n, sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(2.0 * tr_rand_uniform(seed, 7, i) - 1.0);
    return x;
}

static void assert_close(const float *a, const float *b, size_t n, double tol, const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (fabs((double)a[i] - b[i]) > tol * (1 + fabs((double)b[i]))) {
            print_error("%s[%zu]: %.9g vs %.9g\n", what, i, (double)a[i], (double)b[i]);
            fail();
        }
}

/* ---- kernels: attention with segments equals each run alone; scale_rows */
static void test_attention_segments(void **state)
{
    (void)state;
    const tr_kernels *K = tr_kernels_cpu();
    enum { B = 2, T = 70, NH = 2, HS = 4, C = NH * HS }; /* T > 64: two query blocks */
    int32_t seg[B * T];
    int bounds[] = {0, 5, 40, 41, 66, T}; /* row 0's runs (one of a single token) */
    for (int r = 0; r + 1 < (int)(sizeof bounds / sizeof bounds[0]); r++)
        for (int t = bounds[r]; t < bounds[r + 1]; t++)
            seg[t] = r;
    for (int t = 0; t < T; t++)
        seg[T + t] = 0; /* row 1: one run (plain causal) */
    float *qkv = randn((size_t)B * T * 3 * C, 1), *dout = randn((size_t)B * T * C, 2);
    float *out = calloc((size_t)B * T * C, 4), *att = calloc((size_t)B * NH * T, 4); /* lse */
    float *datt = calloc((size_t)B * (NH + 1) * T, 4), *dqkv = calloc((size_t)B * T * 3 * C, 4);
    K->attention_forward(NULL, out, att, qkv, B, T, NH, HS, seg);
    K->attention_backward(NULL, dqkv, datt, dout, qkv, out, att, B, T, NH, HS, seg);
    /* row 1 is the plain causal attention */
    float *out1 = calloc((size_t)T * C, 4), *att1 = calloc((size_t)NH * T, 4);
    float *dq1 = calloc((size_t)T * 3 * C, 4), *da1 = calloc((size_t)(NH + 1) * T, 4);
    K->attention_forward(NULL, out1, att1, qkv + (size_t)T * 3 * C, 1, T, NH, HS, NULL);
    assert_close(out + (size_t)T * C, out1, (size_t)T * C, 0, "one run = causal");
    /* each run of row 0 alone */
    for (int r = 0; r + 1 < (int)(sizeof bounds / sizeof bounds[0]); r++) {
        int t0 = bounds[r], L = bounds[r + 1] - t0;
        K->attention_forward(NULL, out1, att1, qkv + (size_t)t0 * 3 * C, 1, L, NH, HS, NULL);
        K->attention_backward(NULL, dq1, da1, dout + (size_t)t0 * C, qkv + (size_t)t0 * 3 * C,
                              out1, att1, 1, L, NH, HS, NULL);
        assert_close(out + (size_t)t0 * C, out1, (size_t)L * C, 1e-5, "packed run out");
        assert_close(dqkv + (size_t)t0 * 3 * C, dq1, (size_t)L * 3 * C, 1e-5, "packed run dqkv");
        for (int h = 0; h < NH; h++) /* each row's log-sum-exp is over its run's keys only */
            for (int t = t0; t < t0 + L; t++)
                assert_true(fabsf(att[(size_t)h * T + t] - att1[(size_t)h * L + t - t0]) < 1e-5f);
    }
    /* scale_rows */
    float x[6] = {1, 2, 3, 4, 5, 6}, w[3] = {0, 2, -1};
    K->scale_rows(NULL, x, w, 3, 2);
    float want[6] = {0, 0, 6, 8, -5, -6};
    assert_close(x, want, 6, 0, "scale_rows");
    free(qkv), free(dout), free(out), free(att), free(datt), free(dqkv);
    free(out1), free(att1), free(dq1), free(da1);
}

/* ---- the model */
enum { T = 16, V = 11 };

typedef struct {
    tr_gpt *g;
    tr_gpt_acts *a;
    float *params, *grads;
    size_t n;
} model;

/* family 0: GPT-2; 1: Llama's switches (RMSNorm, rope, SwiGLU, grouped queries, untied, no
 * biases); 2: Bloom's (ALiBi, embedding norm) */
static void model_make_family(model *m, int B, int family)
{
    tr_gpt_shape s = {.num_layers = 2, .C = 8, .NH = 2, .T = T, .max_T = T, .V = V, .Vp = 16,
                      .eps = 1e-5f, .init_std = 0.3f, .seed = 5, .layer_first = 0,
                      .layer_count = 2, .tp_size = 1, .is_first = 1, .is_last = 1};
    if (family == 1) {
        s.rmsnorm = s.swiglu = s.untie = s.no_linear_bias = 1;
        s.position = TR_POS_ROPE;
        s.rotary_dims = 4;
        s.rotary_base = 10000.0f;
        s.ffn = 12;
        s.query_groups = 1;
    } else if (family == 2) {
        s.position = TR_POS_ALIBI;
        s.embedding_ln = 1;
    }
    assert_int_equal(tr_gpt_create(&s, tr_kernels_cpu(), NULL, &m->g), TR_OK);
    m->n = tr_gpt_num_params(m->g);
    m->params = calloc(m->n, sizeof(float));
    m->grads = calloc(m->n, sizeof(float));
    tr_gpt_bind(m->g, m->params, m->grads);
    assert_int_equal(tr_gpt_init_params(m->g), TR_OK);
    assert_int_equal(tr_gpt_acts_create(m->g, B, &m->a), TR_OK);
}

static void model_make(model *m, int B) { model_make_family(m, B, 0); }

static void model_free(model *m)
{
    tr_gpt_acts_free(m->a);
    tr_gpt_free(m->g);
    free(m->params);
    free(m->grads);
}

/* One forward + backward of a row: loss (weighted mean); gradients accumulate. */
static float run(model *m, const int32_t *in, const int32_t *tgt, const int32_t *seg,
                 const int32_t *pos, const float *w, float scale)
{
    float loss = 0;
    assert_int_equal(tr_gpt_acts_set_packing(m->a, seg, pos, w), TR_OK);
    assert_int_equal(tr_gpt_forward(m->g, m->a, in, NULL, tgt, scale, &loss), TR_OK);
    if (scale != 0.0f)
        assert_int_equal(tr_gpt_backward(m->g, m->a, NULL), TR_OK);
    return loss;
}

/* Three examples (tokens and masks) and their packing into one row of T + 1 tokens, as
 * data/sft.c packs them. */
#define NEX 3
static const int len[NEX] = {5, 4, 6};
static const int prompt[NEX] = {2, 1, 3}; /* masked tokens at each example's start */

static void example(int k, int32_t *tok, uint64_t salt)
{
    for (int i = 0; i < len[k]; i++)
        tok[i] = 1 + (int32_t)(tr_rand_uniform(40 + k, salt, i) * (V - 1));
    tok[len[k] - 1] = 0; /* EOD */
}

static void pack(const int32_t ex[NEX][8], int32_t *in, int32_t *tgt, int32_t *seg, int32_t *pos,
                 float *w, int only)
{
    int32_t s[T + 1];
    int p = 0, k;
    for (k = 0; k < NEX; k++)
        for (int i = 0; i < len[k]; i++, p++) {
            s[p] = ex[k][i];
            if (p < T) {
                seg[p] = k;
                pos[p] = i;
                w[p] = i + 1 < len[k] && i + 1 >= prompt[k] && (only < 0 || only == k) ? 1.0f : 0.0f;
            }
        }
    for (int q = p; q <= T; q++) {
        s[q] = 0;
        if (q < T) {
            seg[q] = k;
            pos[q] = q - p;
            w[q] = 0;
        }
    }
    memcpy(in, s, T * sizeof *in);
    memcpy(tgt, s + 1, T * sizeof *tgt);
}

static void packed_equals_alone(int family)
{
    int32_t ex[NEX][8];
    for (int k = 0; k < NEX; k++)
        example(k, ex[k], 0);
    model packed, alone;
    model_make_family(&packed, 1, family);
    model_make_family(&alone, 1, family);
    int32_t in[T], tgt[T], seg[T], pos[T];
    float w[T];
    float *grad_sum = calloc(packed.n, sizeof(float));
    for (int k = 0; k < NEX; k++) {
        /* example k packed (the others around it), its own weights only */
        pack(ex, in, tgt, seg, pos, w, k);
        float lp = run(&packed, in, tgt, seg, pos, w, 0.0f);
        /* example k alone at the start of a row (padding after it, weight 0) */
        int32_t ain[T], atgt[T];
        float aw[T];
        for (int t = 0; t < T; t++) {
            ain[t] = t < len[k] ? ex[k][t] : 0;
            atgt[t] = t + 1 < len[k] ? ex[k][t + 1] : 0;
            aw[t] = t + 1 < len[k] && t + 1 >= prompt[k] ? 1.0f : 0.0f;
        }
        float la = run(&alone, ain, atgt, NULL, NULL, aw, 1.0f); /* grads: sum of w l */
        print_message("family %d, example %d: packed %.9f alone %.9f\n", family, k, (double)lp,
                      (double)la);
        assert_true(fabsf(lp - la) <= 1e-5f * fabsf(la));
    }
    memcpy(grad_sum, alone.grads, alone.n * sizeof(float));
    /* all examples packed, weights of all: the gradient of sum w l is the sum of the alone ones */
    pack(ex, in, tgt, seg, pos, w, -1);
    run(&packed, in, tgt, seg, pos, w, 1.0f);
    assert_close(packed.grads, grad_sum, packed.n, 2e-4, "packed gradient vs sum of alone ones");
    /* without segments and position ids the examples would see each other: a different loss */
    pack(ex, in, tgt, seg, pos, w, 2);
    float crossed = run(&packed, in, tgt, NULL, NULL, w, 0.0f);
    float kept = run(&packed, in, tgt, seg, pos, w, 0.0f);
    assert_true(fabsf(crossed - kept) > 1e-4f);
    free(grad_sum);
    model_free(&packed);
    model_free(&alone);
}

static void test_packed_equals_alone(void **state)
{
    (void)state;
    for (int family = 0; family < 3; family++)
        packed_equals_alone(family);
}

static void test_masked_targets_never_count(void **state)
{
    (void)state;
    int32_t ex[NEX][8];
    for (int k = 0; k < NEX; k++)
        example(k, ex[k], 0);
    model m;
    model_make(&m, 1);
    int32_t in[T], tgt[T], seg[T], pos[T];
    float w[T];
    pack(ex, in, tgt, seg, pos, w, -1);
    float l0 = run(&m, in, tgt, seg, pos, w, 1.0f);
    float *g0 = malloc(m.n * sizeof(float));
    memcpy(g0, m.grads, m.n * sizeof(float));
    for (uint64_t trial = 1; trial <= 4; trial++) {
        int32_t t2[T];
        for (int t = 0; t < T; t++) /* every weight-0 target random */
            t2[t] = w[t] != 0.0f ? tgt[t] : (int32_t)(tr_rand_uniform(77, trial, t) * V);
        memset(m.grads, 0, m.n * sizeof(float));
        float l = run(&m, in, t2, seg, pos, w, 1.0f);
        assert_true(l == l0);
        assert_memory_equal(m.grads, g0, m.n * sizeof(float));
    }
    /* another example's prompt content (a different segment) changes nothing either */
    int32_t ex2[NEX][8];
    memcpy(ex2, ex, sizeof ex);
    for (int i = 0; i < prompt[0]; i++)
        ex2[0][i] = (int32_t)(1 + (i * 3) % (V - 1));
    float lk = 0, lk2 = 0;
    pack(ex, in, tgt, seg, pos, w, 1);
    lk = run(&m, in, tgt, seg, pos, w, 0.0f);
    pack(ex2, in, tgt, seg, pos, w, 1);
    lk2 = run(&m, in, tgt, seg, pos, w, 0.0f);
    assert_true(fabsf(lk - lk2) <= 1e-6f * fabsf(lk));
    /* all weights 0: loss 0, no gradient */
    for (int t = 0; t < T; t++)
        w[t] = 0;
    memset(m.grads, 0, m.n * sizeof(float));
    assert_true(run(&m, in, tgt, seg, pos, w, 1.0f) == 0.0f);
    for (size_t i = 0; i < m.n; i++)
        assert_true(m.grads[i] == 0.0f);
    /* position ids past max_position_embeddings are refused */
    pos[3] = T;
    assert_int_equal(tr_gpt_acts_set_packing(m.a, seg, pos, w), TR_ERR_INVALID);
    free(g0);
    model_free(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attention_segments),
        cmocka_unit_test(test_packed_equals_alone),
        cmocka_unit_test(test_masked_targets_never_count),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
