/* model/ + tp/ + hf/: LoRA adapters on a frozen base (issue 20), one process, each family:
 * the trainable table is the adapters alone and the base's matrices have no gradient; with
 * B = 0 the model is the base bit for bit; finite-difference gradients of the adapters; the
 * merged model (hf's W += alpha/r B A) gives the adapted model's loss; dropout (off = none,
 * on = a fixed mask: finite differences hold). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "hf/hf.h"
#include "model/gpt.h"

enum { B_ = 2, T_ = 5 };

static int dropout_on; /* the micro-batch's LoRA dropout (tr_gpt_acts_set_dropout) */

static tr_gpt_shape shape(int family, int rank)
{
    tr_gpt_shape s = {.num_layers = 2, .C = 16, .NH = 4, .T = T_, .max_T = 6, .V = 11, .Vp = 16,
                      .eps = 1e-5f, .init_std = 0.3f, .seed = 7, .layer_first = 0,
                      .layer_count = 2, .is_first = 1, .is_last = 1, .tp_size = 1};
    if (family == 1) { /* Llama: GQA, SwiGLU (interleaved fc), rope, no biases */
        s.rmsnorm = 1, s.position = TR_POS_ROPE, s.rotary_dims = 4, s.rotary_base = 10000.0f;
        s.swiglu = 1, s.ffn = 24, s.query_groups = 2, s.untie = 1, s.no_linear_bias = 1;
    }
    s.lora_rank = rank;
    s.lora_alpha = 6.0f;
    s.lora_targets = rank ? 15 : 0;
    return s;
}

static const int32_t tokens[B_ * T_] = {1, 4, 9, 2, 7, 3, 3, 10, 0, 5};
static const int32_t targets[B_ * T_] = {4, 9, 2, 7, 1, 3, 10, 0, 5, 8};

/* mean loss; with grad, the adapters' gradients accumulated (scale 1/N) */
static float loss_of(tr_gpt *g, int grad)
{
    tr_gpt_acts *a = NULL;
    float loss = 0;
    assert_int_equal(tr_gpt_acts_create(g, B_, &a), TR_OK);
    tr_gpt_acts_set_dropout(a, dropout_on, 12345);
    assert_int_equal(tr_gpt_forward(g, a, tokens, NULL, targets, grad ? 1.0f / (B_ * T_) : 0.0f,
                                    &loss), TR_OK);
    if (grad)
        assert_int_equal(tr_gpt_backward(g, a, NULL), TR_OK);
    tr_gpt_acts_free(a);
    return loss;
}

/* The largest relative error of grads against central finite differences of the loss, over
 * every 7th of the n parameters (each restored after its two evaluations). */
static double worst_fd_error(tr_gpt *g, float *params, const float *grads, size_t n)
{
    double worst = 0;
    for (size_t i = 0; i < n; i += 7) {
        float keep = params[i], h = 3e-3f;
        params[i] = keep + h;
        double up = loss_of(g, 0);
        params[i] = keep - h;
        double down = loss_of(g, 0);
        params[i] = keep;
        double fd = (up - down) / (2.0 * h), err = fabs(fd - grads[i]) / (fabs(fd) + 1e-2);
        worst = err > worst ? err : worst;
    }
    return worst;
}

static void test_family(int family)
{
    tr_gpt_shape s = shape(family, 3), ps = shape(family, 0);
    tr_gpt *g = NULL, *plain = NULL;
    assert_int_equal(tr_gpt_create(&s, tr_kernels_cpu(), NULL, &g), TR_OK);
    assert_int_equal(tr_gpt_create(&ps, tr_kernels_cpu(), NULL, &plain), TR_OK);
    /* the trainable table: 4 targets x (A, B) x 2 layers; the base frozen */
    assert_int_equal(tr_gpt_num_tensors(g), 16);
    assert_int_equal(tr_gpt_num_base_tensors(g), tr_gpt_num_tensors(plain));
    assert_true(tr_gpt_frozen_bytes(g) > 0 && tr_gpt_frozen_bytes(plain) == 0);
    for (int i = 0; i < tr_gpt_num_base_tensors(g); i++) {
        const tr_param_tensor *t = tr_gpt_base_tensor(g, i);
        assert_true(t->cols == 1 ? t->grad != NULL : t->grad == NULL);
    }
    size_t n = tr_gpt_num_params(g), pn = tr_gpt_num_params(plain);
    float *params = calloc(n, sizeof(float)), *grads = calloc(n, sizeof(float));
    float *pp = calloc(pn, sizeof(float));
    tr_gpt_bind(g, params, grads);
    tr_gpt_bind(plain, pp, NULL);
    assert_int_equal(tr_gpt_init_params(g), TR_OK);
    assert_int_equal(tr_gpt_init_params(plain), TR_OK);
    /* B = 0: exactly the base (the same Philox initialisation) */
    float l0 = loss_of(g, 0), lp = loss_of(plain, 0);
    assert_true(l0 == lp);
    /* B away from 0: finite differences of every 7th adapter element */
    for (size_t i = 0; i < n; i++)
        params[i] += 0.2f * (float)sin(0.61 * (double)i + 0.3);
    memset(grads, 0, n * sizeof(float));
    float l1 = loss_of(g, 1);
    assert_true(fabsf(l1 - l0) > 1e-3f);
    double worst = worst_fd_error(g, params, grads, n);
    print_message("family %d: %zu adapter elements, worst finite-difference error %.2e\n", family,
                  n, worst);
    assert_true(worst < 2e-2);
    /* merged: W += alpha/r B A gives the adapted loss */
    assert_int_equal(tr_hf_merge_lora(g, plain, pp), TR_OK);
    float lm = loss_of(plain, 0);
    assert_true(fabsf(lm - l1) <= 1e-5f * fabsf(l1));
    tr_gpt_free(g);
    tr_gpt_free(plain);
    free(params);
    free(grads);
    free(pp);
}

/* dropout 0.3: off (evaluation) it is the model without dropout; on, a fixed mask per
 * (sample, position, feature): the same loss every time, another than off, and its gradient
 * by finite differences */
static void test_dropout(void **state)
{
    (void)state;
    tr_gpt_shape s = shape(1, 3), s0 = shape(1, 3);
    s.lora_dropout = 0.3f;
    tr_gpt *g = NULL, *g0 = NULL;
    assert_int_equal(tr_gpt_create(&s, tr_kernels_cpu(), NULL, &g), TR_OK);
    assert_int_equal(tr_gpt_create(&s0, tr_kernels_cpu(), NULL, &g0), TR_OK);
    size_t n = tr_gpt_num_params(g);
    float *params = calloc(n, sizeof(float)), *grads = calloc(n, sizeof(float));
    tr_gpt_bind(g, params, grads);
    tr_gpt_bind(g0, params, NULL);
    assert_int_equal(tr_gpt_init_params(g), TR_OK);
    for (size_t i = 0; i < n; i++)
        params[i] += 0.2f * (float)sin(0.61 * (double)i + 0.3);
    dropout_on = 0;
    float off = loss_of(g, 0);
    assert_true(off == loss_of(g0, 0));
    dropout_on = 1;
    float on = loss_of(g, 1);
    assert_true(on == loss_of(g, 0) && fabsf(on - off) > 1e-4f);
    double worst = worst_fd_error(g, params, grads, n);
    dropout_on = 0;
    print_message("dropout 0.3: loss %.6f (off %.6f), worst finite-difference error %.2e\n", on, off,
                  worst);
    assert_true(worst < 2e-2);
    tr_gpt_free(g);
    tr_gpt_free(g0);
    free(params);
    free(grads);
}

/* A config's lora.dropout within 2^-25 of 1 is 1.0f in the shape: the adapters' inputs are all
 * but always dropped (p taken as the largest float below 1), never an infinite scale or a
 * threshold past uint32_t: the loss and every gradient finite. */
static void test_dropout_near_one(void **state)
{
    (void)state;
    tr_gpt_shape s = shape(1, 3);
    s.lora_dropout = (float)0.99999999;
    assert_true(s.lora_dropout == 1.0f);
    tr_gpt *g = NULL;
    assert_int_equal(tr_gpt_create(&s, tr_kernels_cpu(), NULL, &g), TR_OK);
    size_t n = tr_gpt_num_params(g);
    float *params = calloc(n, sizeof(float)), *grads = calloc(n, sizeof(float));
    tr_gpt_bind(g, params, grads);
    assert_int_equal(tr_gpt_init_params(g), TR_OK);
    for (size_t i = 0; i < n; i++)
        params[i] += 0.2f * (float)sin(0.61 * (double)i + 0.3);
    dropout_on = 1;
    float on = loss_of(g, 1);
    dropout_on = 0;
    assert_true(isfinite(on));
    for (size_t i = 0; i < n; i++)
        assert_true(isfinite(grads[i]));
    tr_gpt_free(g);
    free(params);
    free(grads);
}

/* Some targets only (mask): the inputs of the linears without an adapter are kept one layer
 * at a time (gpt_scratch.frozen_*), so less activation memory, and the model is the one with
 * all four targets whose other adapters have B = 0, bit for bit: the loss and the shared
 * adapters' gradients, with two micro-batches in flight (both forwards, then both backwards,
 * as a pipeline runs them), with and without full recompute. */
static void run_two_in_flight(tr_gpt *g, float *losses)
{
    tr_gpt_acts *a[2] = {NULL, NULL};
    for (int m = 0; m < 2; m++) {
        int32_t tok[B_ * T_];
        for (int i = 0; i < B_ * T_; i++)
            tok[i] = (tokens[i] + 3 * m) % 11;
        assert_int_equal(tr_gpt_acts_create(g, B_, &a[m]), TR_OK);
        assert_int_equal(tr_gpt_forward(g, a[m], tok, NULL, targets, 1.0f / (B_ * T_), &losses[m]),
                         TR_OK);
    }
    for (int m = 1; m >= 0; m--) {
        assert_int_equal(tr_gpt_backward(g, a[m], NULL), TR_OK);
        tr_gpt_acts_free(a[m]);
    }
}

static void some_targets(int family, int mask, int recompute)
{
    tr_gpt_shape s = shape(family, 3), sa = shape(family, 3);
    s.lora_targets = mask;
    s.recompute = sa.recompute = recompute;
    tr_gpt *g = NULL, *ga = NULL;
    assert_int_equal(tr_gpt_create(&s, tr_kernels_cpu(), NULL, &g), TR_OK);
    assert_int_equal(tr_gpt_create(&sa, tr_kernels_cpu(), NULL, &ga), TR_OK);
    size_t n = tr_gpt_num_params(g), na = tr_gpt_num_params(ga);
    float *p = calloc(n, sizeof(float)), *gr = calloc(n, sizeof(float));
    float *pa = calloc(na, sizeof(float)), *gra = calloc(na, sizeof(float));
    tr_gpt_bind(g, p, gr);
    tr_gpt_bind(ga, pa, gra);
    assert_int_equal(tr_gpt_init_params(g), TR_OK);
    assert_int_equal(tr_gpt_init_params(ga), TR_OK);
    /* the subset's adapters moved away from B = 0, the same values in both models */
    int shared = 0;
    for (int i = 0; i < tr_gpt_num_tensors(g); i++) {
        tr_param_tensor *t = tr_gpt_tensor(g, i);
        for (size_t e = 0; e < t->numel; e++)
            t->param[e] += 0.2f * (float)sin(0.61 * (double)(e + 17 * (size_t)i) + 0.3);
        for (int j = 0; j < tr_gpt_num_tensors(ga); j++) {
            tr_param_tensor *u = tr_gpt_tensor(ga, j);
            if (!strcmp(u->name, t->name)) {
                assert_int_equal(u->numel, t->numel);
                memcpy(u->param, t->param, t->numel * sizeof(float));
                shared++;
            }
        }
    }
    assert_int_equal(shared, tr_gpt_num_tensors(g));
    float l[2], la[2];
    run_two_in_flight(g, l);
    run_two_in_flight(ga, la);
    assert_true(l[0] == la[0] && l[1] == la[1]);
    double worst = 0;
    for (int i = 0; i < tr_gpt_num_tensors(g); i++) {
        tr_param_tensor *t = tr_gpt_tensor(g, i);
        for (int j = 0; j < tr_gpt_num_tensors(ga); j++) {
            tr_param_tensor *u = tr_gpt_tensor(ga, j);
            if (strcmp(u->name, t->name))
                continue;
            for (size_t e = 0; e < t->numel; e++) {
                double d = fabs((double)t->grad[e] - u->grad[e]) / (fabs(u->grad[e]) + 1e-6);
                worst = d > worst ? d : worst;
            }
        }
    }
    size_t bytes = tr_gpt_activation_bytes(g, B_, 2), bytes_all = tr_gpt_activation_bytes(ga, B_, 2);
    print_message("family %d, targets %d, recompute %d: losses %.6f %.6f, gradients within %.1e of "
                  "all four targets with B = 0; activations %zu bytes (all four: %zu)\n",
                  family, mask, recompute, l[0], l[1], worst, bytes, bytes_all);
    assert_true(worst <= 1e-6);
    assert_true(recompute ? bytes <= bytes_all : bytes < bytes_all); /* recompute: one layer set */
    tr_gpt_free(g);
    tr_gpt_free(ga);
    free(p);
    free(gr);
    free(pa);
    free(gra);
}

static void test_some_targets(void **state)
{
    (void)state;
    for (int family = 0; family < 2; family++) {
        some_targets(family, 1 << 0, 0);            /* qkv (peft's GPT-2 default) */
        some_targets(family, 1 << 3, 0);            /* fc_proj */
        some_targets(family, (1 << 1) | (1 << 2), 1); /* attn_proj, fc; full recompute */
    }
}

static void test_gpt2(void **state)
{
    (void)state;
    test_family(0);
}

static void test_llama(void **state)
{
    (void)state;
    test_family(1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_gpt2), cmocka_unit_test(test_llama),
                                       cmocka_unit_test(test_dropout),
                                       cmocka_unit_test(test_dropout_near_one),
                                       cmocka_unit_test(test_some_targets)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
