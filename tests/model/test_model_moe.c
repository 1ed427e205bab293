/* model/: the mixture-of-experts stage (model/gpt_moe.c): its tensor table, finite-difference
 * gradients of the whole objective (the LM loss plus the load-balancing and z losses, router
 * included), two pipeline stages composing to the whole model, full recompute, the same
 * bits run to run, generation's cached forward, and the model FLOPs of k experts per token. Shapes: tests/model/family_fixture.c's MIXTRAL and MOE_GPT. */
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

enum { B = 2, BT = 10 };

static void test_tensor_table(void **state)
{
    (void)state;
    stage st;
    stage_make(&st, MIXTRAL, 0, 3, 1);
    assert_null(find(st.g, "layers.0.fc.weight"));
    assert_null(find(st.g, "layers.0.fc_proj.weight"));
    tr_param_tensor *r = find(st.g, "layers.1.router.weight");
    assert_non_null(r);
    assert_true(r->rows == 4 && r->cols == 16 && r->weight_decay && r->split_dim == -1);
    assert_int_equal(find(st.g, "layers.2.experts.3.fc.weight")->rows, 2 * 24);
    assert_int_equal(find(st.g, "layers.2.experts.3.fc_proj.weight")->cols, 24);
    assert_null(find(st.g, "layers.2.experts.4.fc.weight"));
    assert_null(find(st.g, "layers.0.experts.0.fc.bias"));
    /* wte, per layer ln1 qkv attn_proj ln2 router + 4 x (fc, fc_proj), lnf, output_layer */
    assert_int_equal(tr_gpt_num_tensors(st.g), 1 + 3 * (5 + 8) + 2);
    assert_false(tr_gpt_is_gpt2(tr_gpt_get_shape(st.g)));
    /* model FLOPs per token count the k = 2 experts a token runs, not all 4: each expert
     * (fc 48 x 16, fc_proj 16 x 24) idle in 2 of 4 per layer */
    size_t n = tr_gpt_num_params(st.g);
    double idle = 3.0 * 2 * (48 * 16 + 16 * 24);
    assert_true(fabs(tr_gpt_flops_per_token(tr_gpt_get_shape(st.g), (double)n) -
                     (6.0 * ((double)n - idle) + 12.0 * 3 * 4 * 4 * 5)) < 1e-6);
    stage_free(&st);
    stage_make(&st, MOE_GPT, 0, 3, 1); /* every expert has the dense MLP's biases */
    assert_int_equal(find(st.g, "layers.0.experts.2.fc.bias")->rows, 24);
    assert_int_equal(find(st.g, "layers.0.experts.2.fc_proj.bias")->rows, 16);
    assert_int_equal(tr_gpt_num_tensors(st.g), 2 + 3 * (9 + 3 * 4) + 2);
    stage_free(&st);
}

/* The objective the backward differentiates with loss_grad_scale 1 / BT: the mean LM loss
 * plus each layer's coefficient-weighted balancing and z losses. The differences are taken
 * with the routing frozen at the unperturbed forward's choices (the fixture's router_mode
 * RELU_REPLAY: top-k is piecewise constant, and a step that changes a choice is not the
 * derivative), a smooth function whose derivative there is the model's. */
static double objective(stage *st, const int32_t *tokens, const int32_t *targets)
{
    const tr_gpt_shape *s = tr_gpt_get_shape(st->g);
    float loss;
    assert_int_equal(tr_gpt_forward(st->g, st->a, tokens, NULL, targets, 0.0f, &loss), TR_OK);
    return loss + s->moe_aux_coeff * tr_gpt_acts_moe_loss(st->a, TR_GPT_MOE_BALANCING) +
           s->moe_z_coeff * tr_gpt_acts_moe_loss(st->a, TR_GPT_MOE_Z);
}

static void check_finite_difference(int family, int recompute)
{
    int32_t tokens[BT], targets[BT];
    make_batch(BT, tokens, targets);
    tr_gpt_shape shape = family_shape(family, 0, 3);
    shape.recompute = recompute;
    stage st;
    stage_make_shape(&st, shape, B);
    float loss;
    router_mode = RELU_RECORD, router_at = 0, router_crossed = 0;
    assert_int_equal(tr_gpt_forward(st.g, st.a, tokens, NULL, targets, 1.0f / BT, &loss), 0);
    size_t recorded = router_at;
    assert_int_equal(recorded, (size_t)3 * BT * shape.moe_topk);
    router_mode = RELU_PLAIN; /* (recompute routes again in the backward, layers reversed) */
    assert_int_equal(tr_gpt_backward(st.g, st.a, NULL), 0);
    router_mode = RELU_REPLAY;
    double lb = tr_gpt_acts_moe_loss(st.a, TR_GPT_MOE_BALANCING);
    assert_true(lb > 3 * 0.9 && lb < 3 * 3.0); /* 1 per layer when balanced, at most E */
    assert_true(tr_gpt_acts_moe_loss(st.a, TR_GPT_MOE_Z) > 0);
    int checked = 0, router = 0;
    for (int i = 0; i < tr_gpt_num_tensors(st.g); i++) {
        tr_param_tensor *t = tr_gpt_tensor(st.g, i);
        for (int s = 0; s < 4; s++) {
            size_t e = (size_t)(s * 7919 + i * 31) % t->numel;
            if (t->vocab_rows && e >= (size_t)11 * t->cols)
                e %= (size_t)11 * t->cols; /* padded rows have zero gradient; test real ones */
            float keep = t->param[e], h = 5e-3f;
            t->param[e] = keep + h, router_at = 0;
            double lp = objective(&st, tokens, targets);
            t->param[e] = keep - h, router_at = 0;
            double lm = objective(&st, tokens, targets);
            t->param[e] = keep;
            double fd = (lp - lm) / (2.0 * h), an = t->grad[e];
            double err = fabs(fd - an) / fmax(fabs(fd) + fabs(an), 5e-3);
            if (err > 3e-2)
                fail_msg("family %d %s[%zu]: finite difference %.6g vs backward %.6g", family,
                         t->name, e, fd, an);
            checked++;
            router += strstr(t->name, "router") != NULL && fabs(an) > 1e-4;
        }
    }
    assert_true(checked > 100);
    if (getenv("TRIDENT_TEST_VERBOSE"))
        printf("family %d: %d differences; %zu routing choices crossed in their steps\n", family,
               checked, router_crossed);
    router_mode = RELU_PLAIN;
    assert_true(router >= 6); /* the router's gradient checked where it is not ~0 */
    stage_free(&st);
}

static void test_finite_difference(void **state)
{
    (void)state;
    check_finite_difference(MIXTRAL, 0);
    check_finite_difference(MOE_GPT, 0);
    check_finite_difference(MIXTRAL, 1); /* full recompute rebuilds the routing */
}

/* Stages [0,1) and [1,3) chained give the whole model's loss, losses and gradients. */
static void check_stages_compose(int family)
{
    stage whole, s0, s1;
    stages_compose(family, &whole, &s0, &s1);
    for (int which = 0; which < 2; which++) { /* (summed over layers in another order) */
        double w = tr_gpt_acts_moe_loss(whole.a, which);
        assert_true(fabs(w - tr_gpt_acts_moe_loss(s0.a, which) - tr_gpt_acts_moe_loss(s1.a, which))
                    <= 1e-12 * w);
    }
    stage_free(&whole);
    stage_free(&s0);
    stage_free(&s1);
}

static void test_stages_compose(void **state)
{
    (void)state;
    check_stages_compose(MIXTRAL);
    check_stages_compose(MOE_GPT);
}

/* The same gradients bit for bit run to run, and with recompute as without. */
static void test_deterministic(void **state)
{
    (void)state;
    int32_t tokens[BT], targets[BT];
    make_batch(BT, tokens, targets);
    float *grads[3];
    size_t n = 0;
    for (int run = 0; run < 3; run++) {
        tr_gpt_shape shape = family_shape(MIXTRAL, 0, 3);
        shape.recompute = run == 2;
        stage st;
        stage_make_shape(&st, shape, B);
        float loss;
        assert_int_equal(tr_gpt_forward(st.g, st.a, tokens, NULL, targets, 1.0f / BT, &loss), 0);
        assert_int_equal(tr_gpt_backward(st.g, st.a, NULL), 0);
        n = tr_gpt_num_params(st.g);
        grads[run] = malloc(n * sizeof(float));
        memcpy(grads[run], st.grads, n * sizeof(float));
        stage_free(&st);
    }
    assert_memory_equal(grads[0], grads[1], n * sizeof(float));
    assert_memory_equal(grads[0], grads[2], n * sizeof(float));
    for (int run = 0; run < 3; run++)
        free(grads[run]);
}

/* tr_gpt_shape_set_ep: EP rank r of 2 holds the dense tensors and experts [2r, 2r + 2) only
 * (a parameter count of dense + E/2 experts), named and initialised as the whole model's;
 * a split that does not divide the experts is refused. */
static tr_gpt *created(tr_gpt_shape s, float **params)
{
    tr_gpt *g = NULL;
    assert_int_equal(tr_gpt_create(&s, tr_kernels_cpu(), NULL, &g), TR_OK);
    *params = malloc(tr_gpt_num_params(g) * sizeof(float));
    tr_gpt_bind(g, *params, NULL);
    assert_int_equal(tr_gpt_init_params(g), TR_OK);
    return g;
}

static void test_ep_split(void **state)
{
    (void)state;
    float *whole_p, *part_p;
    tr_gpt *whole = created(family_shape(MIXTRAL, 0, 3), &whole_p);
    size_t dense = 0, experts = 0;
    for (int i = 0; i < tr_gpt_num_tensors(whole); i++) {
        tr_param_tensor *t = tr_gpt_tensor(whole, i);
        assert_int_equal(t->expert, strstr(t->name, ".experts.") != NULL);
        *(t->expert ? &experts : &dense) += t->numel;
    }
    assert_int_equal(experts, 3 * 4 * (48 * 16 + 16 * 24)); /* 3 layers x 4 experts */
    for (int r = 0; r < 2; r++) {
        tr_gpt_shape s = family_shape(MIXTRAL, 0, 3);
        tr_gpt_shape_set_ep(&s, 2, r);
        size_t counted = 0;
        assert_int_equal(tr_gpt_count_params(&s, &counted), TR_OK);
        tr_gpt *part = created(s, &part_p);
        assert_int_equal(tr_gpt_num_params(part), dense + experts / 2);
        assert_int_equal(counted, dense + experts / 2);
        int first, count;
        tr_gpt_local_experts(part, &first, &count);
        assert_true(first == 2 * r && count == 2);
        for (int i = 0; i < tr_gpt_num_tensors(part); i++) {
            tr_param_tensor *t = tr_gpt_tensor(part, i), *w = find(whole, t->name);
            int l, e;
            if (sscanf(t->name, "layers.%d.experts.%d.", &l, &e) == 2)
                assert_true(t->expert && e / 2 == r);
            assert_non_null(w);
            assert_memory_equal(t->param, w->param, t->numel * sizeof(float));
        }
        assert_null(find(part, r ? "layers.1.experts.1.fc.weight" : "layers.1.experts.2.fc.weight"));
        tr_gpt_free(part);
        free(part_p);
    }
    tr_gpt_shape s = family_shape(MIXTRAL, 0, 3);
    tr_gpt_shape_set_ep(&s, 3, 0);
    tr_gpt *g = NULL;
    assert_int_equal(tr_gpt_create(&s, tr_kernels_cpu(), NULL, &g), TR_ERR_INVALID);
    assert_non_null(strstr(tr_errmsg(), "expert-parallel split: rank 0 of 3 over 4 experts"));
    tr_gpt_free(whole);
    free(whole_p);
}

/* Generation's cached forward routes each new token: all positions at once and one at a time
 * give the training forward's logits. */
static void test_generate(void **state)
{
    (void)state;
    int32_t tokens[BT], targets[BT];
    make_batch(BT, tokens, targets);
    stage st;
    stage_make(&st, MIXTRAL, 0, 3, B);
    const int V = 11, T = BT / B;
    float want[BT * 11], got[BT * 11], one[B * 11];
    assert_int_equal(tr_gpt_forward_logits(st.g, st.a, tokens, want), TR_OK);
    tr_gpt_cache *c;
    assert_int_equal(tr_gpt_cache_create(st.g, B, T, &c), TR_OK);
    assert_int_equal(tr_gpt_decode(c, tokens, T, 1, got), TR_OK);
    for (int i = 0; i < BT * V; i++)
        assert_true(fabsf(got[i] - want[i]) <= 1e-5f);
    tr_gpt_cache_reset(c);
    for (int t = 0; t < T; t++) {
        int32_t step[B] = {tokens[t], tokens[T + t]};
        assert_int_equal(tr_gpt_decode(c, step, 1, 0, one), TR_OK);
        for (int b = 0; b < B; b++)
            for (int v = 0; v < V; v++)
                assert_true(fabsf(one[b * V + v] - want[(b * T + t) * V + v]) <= 1e-5f);
    }
    tr_gpt_cache_free(c);
    stage_free(&st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tensor_table),
        cmocka_unit_test(test_finite_difference),
        cmocka_unit_test(test_stages_compose),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_generate),
        cmocka_unit_test(test_ep_split),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
