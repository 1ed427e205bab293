/* model/: hidden and attention dropout (model/gpt_dropout.c) in the families' stages
 * (family_fixture.c): with dropout on, the backward is the gradient of the dropped forward
 * (central differences: the masks are fixed by their coordinates), on the sites each family
 * has (Bloom's embedding norm after the embedding dropout, NeoX's and Falcon's parallel
 * residual, Gemma's multiplier, Mixtral's experts, a ReLU MLP); with it off the stage is the
 * p = 0 one bit for bit; a table without the ops is refused naming the key; p that the
 * shape's float rounds to 1 drops with the largest float below 1. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "family_fixture.h"

static tr_gpt_shape dropout_shape(int family, float hidden, float attention)
{
    tr_gpt_shape s = family_shape(family, 0, 3);
    s.hidden_dropout = hidden;
    s.attention_dropout = attention;
    s.moe_aux_coeff = s.moe_z_coeff = 0.0f; /* (the objective: the LM loss alone) */
    return s;
}

/* d loss / d param by central differences on a few elements of every tensor, dropout on
 * (ReLU's and the router's choices frozen at the unperturbed forward's, as model-family and
 * model-moe do) */
static void check_finite_difference(int family)
{
    const int B = 2, T = 5, BT = B * T;
    int32_t tokens[10], targets[10];
    make_batch(BT, tokens, targets);
    stage st;
    stage_make_shape(&st, dropout_shape(family, 0.25f, 0.3f), B);
    tr_gpt_acts_set_dropout(st.a, 1, 1000003);
    float loss, lp, lm;
    relu_mode = router_mode = RELU_RECORD, relu_at = router_at = 0;
    assert_int_equal(tr_gpt_forward(st.g, st.a, tokens, NULL, targets, 1.0f / BT, &loss), 0);
    relu_mode = router_mode = RELU_REPLAY;
    assert_int_equal(tr_gpt_backward(st.g, st.a, NULL), 0);
    int checked = 0;
    for (int i = 0; i < tr_gpt_num_tensors(st.g); i++) {
        tr_param_tensor *t = tr_gpt_tensor(st.g, i);
        for (int s = 0; s < 3; s++) {
            size_t e = (size_t)(s * 7919 + i * 31) % t->numel;
            if (t->vocab_rows && e >= (size_t)11 * t->cols)
                e %= (size_t)11 * t->cols; /* padded rows have zero gradient; test real ones */
            float keep = t->param[e], h = 1e-2f;
            t->param[e] = keep + h, relu_at = router_at = 0;
            assert_int_equal(tr_gpt_forward(st.g, st.a, tokens, NULL, targets, 0.0f, &lp), 0);
            t->param[e] = keep - h, relu_at = router_at = 0;
            assert_int_equal(tr_gpt_forward(st.g, st.a, tokens, NULL, targets, 0.0f, &lm), 0);
            t->param[e] = keep;
            double fd = ((double)lp - lm) / (2.0 * h), an = t->grad[e];
            double err = fabs(fd - an) / fmax(fabs(fd) + fabs(an), 1e-3);
            if (err > 3e-2)
                fail_msg("family %d %s[%zu]: finite difference %.6g vs backward %.6g", family,
                         t->name, e, fd, an);
            checked++;
        }
    }
    assert_true(checked > 40);
    relu_mode = router_mode = RELU_PLAIN;
    stage_free(&st);
}

static void test_finite_difference(void **state)
{
    (void)state;
    int families[] = {MIXED, LLAMA, BLOOM, NEOX, FALCON, GEMMA, MIXTRAL, OPT};
    for (size_t i = 0; i < sizeof families / sizeof *families; i++)
        check_finite_difference(families[i]);
}

/* Dropout off (validation, eval): the p > 0 stage's loss and gradients are the p = 0 stage's
 * bits; on, the loss differs. */
static void test_off_is_plain(void **state)
{
    (void)state;
    const int B = 2, BT = 10;
    int32_t tokens[10], targets[10];
    make_batch(BT, tokens, targets);
    stage plain, drop;
    stage_make_shape(&plain, dropout_shape(BLOOM, 0.0f, 0.0f), B);
    stage_make_shape(&drop, dropout_shape(BLOOM, 0.2f, 0.2f), B);
    size_t n = tr_gpt_num_params(plain.g);
    memcpy(drop.params, plain.params, n * sizeof(float));
    float l0, l1, l2;
    assert_int_equal(tr_gpt_forward(plain.g, plain.a, tokens, NULL, targets, 0.1f, &l0), 0);
    assert_int_equal(tr_gpt_backward(plain.g, plain.a, NULL), 0);
    tr_gpt_acts_set_dropout(drop.a, 0, 5);
    assert_int_equal(tr_gpt_forward(drop.g, drop.a, tokens, NULL, targets, 0.1f, &l1), 0);
    assert_int_equal(tr_gpt_backward(drop.g, drop.a, NULL), 0);
    assert_true(l0 == l1);
    assert_memory_equal(plain.grads, drop.grads, n * sizeof(float));
    tr_gpt_acts_set_dropout(drop.a, 1, 5);
    assert_int_equal(tr_gpt_forward(drop.g, drop.a, tokens, NULL, targets, 0.0f, &l2), 0);
    assert_true(l2 != l1);
    stage_free(&plain);
    stage_free(&drop);
}

/* A backend without the ops (CUDA until it has them) refuses dropout > 0 naming the key. */
static void test_refused_without_ops(void **state)
{
    (void)state;
    tr_kernels t = *tr_kernels_cpu();
    t.dropout = NULL;
    t.attention_gqa_dropout_forward = NULL;
    t.attention_gqa_dropout_backward = NULL;
    tr_gpt *g = NULL;
    tr_gpt_shape s = dropout_shape(LLAMA, 0.1f, 0.0f);
    assert_int_equal(tr_gpt_create(&s, &t, NULL, &g), TR_ERR_CONFIG);
    assert_non_null(strstr(tr_errmsg(), "no dropout (model.hidden_dropout) kernels"));
    s = dropout_shape(LLAMA, 0.0f, 0.1f);
    assert_int_equal(tr_gpt_create(&s, &t, NULL, &g), TR_ERR_CONFIG);
    assert_non_null(strstr(tr_errmsg(), "no attention dropout (model.attention_dropout)"));
    s = dropout_shape(LLAMA, 0.0f, 0.0f); /* p = 0 needs no op */
    assert_int_equal(tr_gpt_create(&s, &t, NULL, &g), TR_OK);
    tr_gpt_free(g);
}

/* The dropout ops' arguments as the model passes them (the CPU ops run after) */
static tr_dropout seen[64];
static int n_seen;

static void seen_dropout(tr_stream s, float *out, const float *inp, tr_dropout d, int N, int C,
                         int T, int row0, int C_total, int col0)
{
    seen[n_seen++ % 64] = d;
    tr_kernels_cpu()->dropout(s, out, inp, d, N, C, T, row0, C_total, col0);
}

static void seen_attention_forward(tr_stream s, float *out, float *lse, const float *qkv,
                                   const float *alibi, int B, int T, int NH, int NG, int HS,
                                   const int32_t *segments, tr_dropout d)
{
    seen[n_seen++ % 64] = d;
    tr_kernels_cpu()->attention_gqa_dropout_forward(s, out, lse, qkv, alibi, B, T, NH, NG, HS,
                                                    segments, d);
}

/* p within 2^-25 of 1 (the config allows p < 1; the shape's float holds 1): every site gets
 * the largest float below 1's threshold and scale (2^32 - 2^8, 2^24), never 2^32 (undefined
 * in uint32_t: the CPU model decided what was dropped) nor an infinite scale; loss and
 * gradients finite. */
static void test_p_near_one(void **state)
{
    (void)state;
    tr_kernels t = *tr_kernels_cpu();
    t.dropout = seen_dropout;
    t.attention_gqa_dropout_forward = seen_attention_forward;
    tr_gpt_shape s = dropout_shape(MIXED, 0.99999999f, 0.99999999f);
    assert_true(s.hidden_dropout == 1.0f && s.attention_dropout == 1.0f);
    tr_gpt *g = NULL;
    assert_int_equal(tr_gpt_create(&s, &t, NULL, &g), TR_OK);
    size_t n = tr_gpt_num_params(g);
    float *params = calloc(n, sizeof(float)), *grads = calloc(n, sizeof(float)), loss;
    tr_gpt_bind(g, params, grads);
    assert_int_equal(tr_gpt_init_params(g), TR_OK);
    tr_gpt_acts *a = NULL;
    assert_int_equal(tr_gpt_acts_create(g, 2, &a), TR_OK);
    int32_t tokens[10], targets[10];
    make_batch(10, tokens, targets);
    tr_gpt_acts_set_dropout(a, 1, 7);
    n_seen = 0;
    assert_int_equal(tr_gpt_forward(g, a, tokens, NULL, targets, 0.1f, &loss), 0);
    assert_int_equal(tr_gpt_backward(g, a, NULL), 0);
    assert_true(n_seen >= 4); /* the embedding's, and each layer's three */
    for (int i = 0; i < n_seen && i < 64; i++) {
        assert_int_equal(seen[i].threshold, 4294967040u);
        assert_true(seen[i].scale == 16777216.0f);
    }
    assert_true(isfinite(loss));
    for (size_t i = 0; i < n; i++)
        assert_true(isfinite(grads[i]));
    tr_gpt_acts_free(a);
    tr_gpt_free(g);
    free(params);
    free(grads);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_finite_difference),
        cmocka_unit_test(test_off_is_plain),
        cmocka_unit_test(test_refused_without_ops),
        cmocka_unit_test(test_p_near_one),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
