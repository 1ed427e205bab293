/* model/: parameter layout, layout-free initialisation across stages, stage composition
 * (first + last stage == whole model), finite-difference gradients of the whole model. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "model/gpt.h"

static tr_gpt_shape tiny_shape(int first, int count)
{
    tr_gpt_shape s = {.num_layers = 3, .C = 8, .NH = 2, .T = 5, .max_T = 6, .V = 11, .Vp = 16,
                      .eps = 1e-5f, .init_std = 0.3f, .seed = 99, .layer_first = first,
                      .layer_count = count, .tp_size = 1};
    s.is_first = first == 0;
    s.is_last = first + count == s.num_layers;
    return s;
}

typedef struct {
    tr_gpt *g;
    tr_gpt_acts *a;
    float *params, *grads;
} stage;

static void stage_make(stage *st, int first, int count, int B)
{
    tr_gpt_shape s = tiny_shape(first, count);
    assert_int_equal(tr_gpt_create(&s, tr_kernels_cpu(), NULL, &st->g), TR_OK);
    size_t n = tr_gpt_num_params(st->g);
    st->params = calloc(n, sizeof(float));
    st->grads = calloc(n, sizeof(float));
    tr_gpt_bind(st->g, st->params, st->grads);
    assert_int_equal(tr_gpt_init_params(st->g), TR_OK);
    assert_int_equal(tr_gpt_acts_create(st->g, B, &st->a), TR_OK);
}

static void stage_free(stage *st)
{
    tr_gpt_acts_free(st->a);
    tr_gpt_free(st->g);
    free(st->params);
    free(st->grads);
}

static tr_param_tensor *find(tr_gpt *g, const char *name, int skip)
{
    for (int i = 0; i < tr_gpt_num_tensors(g); i++)
        if (!strcmp(tr_gpt_tensor(g, i)->name, name) && skip-- == 0)
            return tr_gpt_tensor(g, i);
    return NULL;
}

static void make_batch(int B, int T, int V, int32_t *tokens, int32_t *targets)
{
    for (int i = 0; i < B * T; i++) {
        tokens[i] = (int32_t)((i * 7 + 3) % V);
        targets[i] = (int32_t)((i * 5 + 1) % V);
    }
}

static void test_layout_reverse_grads(void **state)
{
    (void)state;
    stage st;
    stage_make(&st, 0, 3, 2);
    size_t n = tr_gpt_num_params(st.g), covered = 0;
    for (int i = 0; i < tr_gpt_num_tensors(st.g); i++) {
        tr_param_tensor *t = tr_gpt_tensor(st.g, i);
        assert_int_equal(t->offset, n - t->forward_offset - t->numel);
        covered += t->numel;
        if (strstr(t->name, ".bias") || strstr(t->name, "ln"))
            assert_int_equal(t->weight_decay, 0);
    }
    assert_int_equal(covered, n);
    /* LN weights start at 1, biases at 0 */
    tr_param_tensor *w = find(st.g, "layers.1.ln2.weight", 0), *b = find(st.g, "layers.2.fc.bias", 0);
    assert_non_null(w);
    assert_non_null(b);
    for (size_t e = 0; e < w->numel; e++)
        assert_true(w->param[e] == 1.0f);
    for (size_t e = 0; e < b->numel; e++)
        assert_true(b->param[e] == 0.0f);
    stage_free(&st);
}

/* Stages [0,1) and [1,3) hold exactly the whole model's values, and chained they give the
 * whole model's loss and gradients (the tied wte's two copies sum to the whole gradient). */
static void test_stages_compose(void **state)
{
    (void)state;
    const int B = 2, T = 5, BT = B * T, C = 8;
    int32_t tokens[10], targets[10];
    make_batch(B, T, 11, tokens, targets);
    stage whole, s0, s1;
    stage_make(&whole, 0, 3, B);
    stage_make(&s0, 0, 1, B);
    stage_make(&s1, 1, 2, B);
    for (int k = 0; k < 2; k++) {
        stage *part = k ? &s1 : &s0;
        for (int i = 0; i < tr_gpt_num_tensors(part->g); i++) {
            tr_param_tensor *t = tr_gpt_tensor(part->g, i), *w = find(whole.g, t->name, 0);
            assert_non_null(w);
            assert_memory_equal(t->param, w->param, t->numel * sizeof(float));
        }
    }
    float scale = 1.0f / BT, loss_whole = 0, loss_split = 0;
    assert_int_equal(tr_gpt_forward(whole.g, whole.a, tokens, NULL, targets, scale, &loss_whole), 0);
    assert_int_equal(tr_gpt_backward(whole.g, whole.a, NULL), 0);
    assert_int_equal(tr_gpt_forward(s0.g, s0.a, tokens, NULL, NULL, scale, NULL), 0);
    assert_int_equal(tr_gpt_forward(s1.g, s1.a, NULL, tr_gpt_acts_output(s0.a), targets, scale, &loss_split), 0);
    assert_int_equal(tr_gpt_backward(s1.g, s1.a, NULL), 0);
    assert_int_equal(tr_gpt_backward(s0.g, s0.a, tr_gpt_acts_input_grad(s1.a)), 0);
    assert_true(loss_whole == loss_split);
    assert_true(loss_whole > 2.0f && loss_whole < 3.0f); /* ~ log(11) at init */
    for (int i = 0; i < tr_gpt_num_tensors(whole.g); i++) {
        tr_param_tensor *w = tr_gpt_tensor(whole.g, i);
        tr_param_tensor *a = find(s0.g, w->name, 0), *b = find(s1.g, w->name, 0);
        for (size_t e = 0; e < w->numel; e++) {
            float got = (a ? a->grad[e] : 0.0f) + (b ? b->grad[e] : 0.0f);
            assert_true(fabsf(got - w->grad[e]) <= 1e-6f + 1e-5f * fabsf(w->grad[e]));
        }
    }
    (void)C;
    stage_free(&whole);
    stage_free(&s0);
    stage_free(&s1);
}

/* bf16 storage ("cpu-bf16" with kernels.h's bf16-storage ops: the LayerNorm and GELU outputs,
 * the attention output and the head's logits in half their buffers) against the same table
 * without them (fp32 storage of values its ops round to bf16): the loss and every gradient bit
 * for bit, GELU, SwiGLU and ReLU (model.relu: relu_forward16 / relu_backward16), LayerNorm and
 * RMSNorm, GPT-2's attention and grouped heads with ALiBi. */
static void test_bf16_storage_same_bits(void **state)
{
    (void)state;
    const int B = 2, T = 5;
    int32_t tokens[10], targets[10];
    make_batch(B, T, 11, tokens, targets);
    const tr_kernels *half = tr_kernels_get("cpu-bf16");
    assert_non_null(half);
    tr_kernels full = *half;
    tr_kernels_without_bf16_storage(&full);
    /* GPT-2; SwiGLU; SwiGLU and RMSNorm; GELU with one key/value head for both and ALiBi;
     * GPT-2 with full recompute (the backward rebuilds each layer's bf16 tensors); ReLU, and
     * with full recompute */
    for (int family = 0; family < 7; family++) {
        float loss[2];
        float *grads[2];
        size_t n = 0;
        for (int i = 0; i < 2; i++) {
            tr_gpt_shape s = tiny_shape(0, 3);
            s.swiglu = family == 1 || family == 2;
            s.rmsnorm = family == 2;
            if (family == 3)
                s.query_groups = 1, s.position = TR_POS_ALIBI;
            s.recompute = family == 4 || family == 6;
            s.relu = family >= 5;
            tr_gpt *g;
            tr_gpt_acts *a;
            assert_int_equal(tr_gpt_create(&s, i ? &full : half, NULL, &g), TR_OK);
            n = tr_gpt_num_params(g);
            float *params = calloc(n, sizeof(float));
            grads[i] = calloc(n, sizeof(float));
            tr_gpt_bind(g, params, grads[i]);
            assert_int_equal(tr_gpt_init_params(g), TR_OK);
            for (size_t e = 0; e < n; e++) /* the biases start at 0: give every one a value */
                params[e] += 0.02f * sinf((float)e);
            assert_int_equal(tr_gpt_acts_create(g, B, &a), TR_OK);
            assert_int_equal(tr_gpt_forward(g, a, tokens, NULL, targets, 0.1f, &loss[i]), 0);
            assert_int_equal(tr_gpt_backward(g, a, NULL), 0);
            tr_gpt_acts_free(a);
            tr_gpt_free(g);
            free(params);
        }
        assert_true(loss[0] == loss[1]);
        assert_memory_equal(grads[0], grads[1], n * sizeof(float));
        free(grads[0]);
        free(grads[1]);
    }
}

/* d(mean loss)/d(param) by central differences on a few elements of every tensor. */
static void test_finite_difference(void **state)
{
    (void)state;
    const int B = 2, T = 5, BT = B * T;
    int32_t tokens[10], targets[10];
    make_batch(B, T, 11, tokens, targets);
    stage st;
    stage_make(&st, 0, 3, B);
    float loss;
    assert_int_equal(tr_gpt_forward(st.g, st.a, tokens, NULL, targets, 1.0f / BT, &loss), 0);
    assert_int_equal(tr_gpt_backward(st.g, st.a, NULL), 0);
    int checked = 0;
    for (int i = 0; i < tr_gpt_num_tensors(st.g); i++) {
        tr_param_tensor *t = tr_gpt_tensor(st.g, i);
        for (int s = 0; s < 3; s++) {
            size_t e = (size_t)(s * 7919 + i * 31) % t->numel;
            if (!strcmp(t->name, "wte") && e >= (size_t)11 * 8)
                e %= (size_t)11 * 8; /* padded rows have zero gradient; test real ones */
            float keep = t->param[e], h = 1e-2f, lp, lm;
            t->param[e] = keep + h;
            assert_int_equal(tr_gpt_forward(st.g, st.a, tokens, NULL, targets, 0.0f, &lp), TR_OK);
            t->param[e] = keep - h;
            assert_int_equal(tr_gpt_forward(st.g, st.a, tokens, NULL, targets, 0.0f, &lm), TR_OK);
            t->param[e] = keep;
            double fd = ((double)lp - lm) / (2.0 * h), an = t->grad[e];
            double err = fabs(fd - an) / fmax(fabs(fd) + fabs(an), 1e-3);
            if (err > 3e-2)
                fail_msg("%s[%zu]: finite difference %.6g vs backward %.6g", t->name, e, fd, an);
            checked++;
        }
    }
    assert_true(checked > 100);
    stage_free(&st);
}

/* The grad-ready hook tiles the gradient buffer front to back, once per micro-batch; the
 * last stage reports its head inside forward. */
static size_t hook_next;
static int hook_calls;
static void hook(void *ctx, size_t offset, size_t count)
{
    (void)ctx;
    assert_int_equal(offset, hook_next);
    hook_next = offset + count;
    hook_calls++;
}

static void test_grad_hook(void **state)
{
    (void)state;
    int32_t tokens[10], targets[10];
    make_batch(2, 5, 11, tokens, targets);
    stage whole, s0, s1;
    stage_make(&whole, 0, 3, 2);
    stage_make(&s0, 0, 1, 2);
    stage_make(&s1, 1, 2, 2);
    float loss;
    for (int mb = 0; mb < 2; mb++) {
        hook_next = 0;
        hook_calls = 0;
        tr_gpt_set_grad_hook(whole.g, hook, NULL);
        assert_int_equal(tr_gpt_forward(whole.g, whole.a, tokens, NULL, targets, 0.1f, &loss), 0);
        assert_int_equal(hook_calls, 1); /* the final LN, inside forward */
        assert_int_equal(tr_gpt_backward(whole.g, whole.a, NULL), 0);
        assert_int_equal(hook_calls, 1 + 3 + 1);
        assert_int_equal(hook_next, tr_gpt_num_params(whole.g));
    }
    /* an evaluation forward reports nothing; a removed hook is not called */
    hook_calls = 0;
    assert_int_equal(tr_gpt_forward(whole.g, whole.a, tokens, NULL, targets, 0.0f, &loss), 0);
    assert_int_equal(hook_calls, 0);
    tr_gpt_set_grad_hook(whole.g, NULL, NULL);
    assert_int_equal(tr_gpt_forward(whole.g, whole.a, tokens, NULL, targets, 0.1f, &loss), 0);
    assert_int_equal(tr_gpt_backward(whole.g, whole.a, NULL), 0);
    assert_int_equal(hook_calls, 0);
    /* two stages, the pipeline's buffers: the head's own wte copy comes with the final LN */
    hook_next = 0;
    tr_gpt_set_grad_hook(s1.g, hook, NULL);
    assert_int_equal(tr_gpt_forward(s0.g, s0.a, tokens, NULL, NULL, 0.1f, NULL), 0);
    assert_int_equal(tr_gpt_hidden_numel(s0.g, 2), (size_t)2 * 5 * 8);
    float *in = tr_gpt_acts_input_buffer(s1.a);
    memcpy(in, tr_gpt_acts_output(s0.a), tr_gpt_hidden_numel(s0.g, 2) * sizeof(float));
    assert_int_equal(tr_gpt_forward(s1.g, s1.a, NULL, in, targets, 0.1f, &loss), 0);
    assert_int_equal(hook_next, tr_gpt_tensor(s1.g, tr_gpt_num_tensors(s1.g) - 3)->offset +
                                    tr_gpt_tensor(s1.g, tr_gpt_num_tensors(s1.g) - 3)->numel);
    assert_int_equal(tr_gpt_backward(s1.g, s1.a, NULL), 0);
    assert_int_equal(hook_next, tr_gpt_num_params(s1.g));
    float *dout = tr_gpt_acts_output_grad_buffer(s0.a);
    memcpy(dout, tr_gpt_acts_input_grad(s1.a), tr_gpt_hidden_numel(s0.g, 2) * sizeof(float));
    hook_next = 0;
    tr_gpt_set_grad_hook(s0.g, hook, NULL);
    assert_int_equal(tr_gpt_backward(s0.g, s0.a, dout), 0);
    assert_int_equal(hook_next, tr_gpt_num_params(s0.g));
    stage_free(&whole);
    stage_free(&s0);
    stage_free(&s1);
}

static void test_bad_tokens_rejected(void **state)
{
    (void)state;
    stage st;
    stage_make(&st, 0, 3, 2);
    int32_t tokens[10], targets[10];
    make_batch(2, 5, 11, tokens, targets);
    tokens[3] = 11;
    float loss;
    assert_int_equal(tr_gpt_forward(st.g, st.a, tokens, NULL, targets, 0.0f, &loss), TR_ERR_INVALID);
    assert_non_null(strstr(tr_errmsg(), "outside the vocabulary"));
    tokens[3] = 1;
    targets[9] = -1;
    assert_int_equal(tr_gpt_forward(st.g, st.a, tokens, NULL, targets, 0.0f, &loss), TR_ERR_INVALID);
    stage_free(&st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout_reverse_grads),
        cmocka_unit_test(test_stages_compose),
        cmocka_unit_test(test_finite_difference),
        cmocka_unit_test(test_grad_hook),
        cmocka_unit_test(test_bad_tokens_rejected),
        cmocka_unit_test(test_bf16_storage_same_bits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
