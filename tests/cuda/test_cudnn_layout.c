/* kernels/cuda/attention_cudnn.h on every machine (no GPU, no cuDNN): the contract cuDNN's
 * attention is given is trident's. Plain scaled-dot-product attention (causal from the top
 * left, scale 1/sqrt(HS), stats the natural log of each row's sum of exponentials), reading
 * and writing only through the (B, H, S, D) views tr_cudnn_sdpa_layout_of describes, must give
 * the CPU table's attention_forward (out, lse) and attention_backward (dqkv) on the same
 * tensors; and the switch and the refusals say what the header says. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "kernels/cuda/attention_cudnn.h"
#include "kernels/kernels.h"

static int64_t at(const tr_cudnn_view *v, int b, int h, int s, int d)
{
    return v->offset + b * v->stride[0] + h * v->stride[1] + s * v->stride[2] + d * v->stride[3];
}

static float *random_floats(size_t n, unsigned seed) /* uniform in [-1, 1) */
{
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(2.0 * tr_rand_uniform(seed, 0, i) - 1.0);
    return x;
}

static double max_rel(const float *got, const double *want, size_t n)
{
    double scale = 0, err = 0;
    for (size_t i = 0; i < n; i++)
        scale = fmax(scale, fabs(want[i]));
    for (size_t i = 0; i < n; i++)
        err = fmax(err, fabs(got[i] - want[i]));
    return scale > 0 ? err / scale : err;
}

/* forward and backward of plain SDPA in double, through the views only, against the CPU
 * table's attention on the same qkv and dout */
static void check_shape(int B, int T, int NH, int HS)
{
    tr_cudnn_sdpa_layout l = tr_cudnn_sdpa_layout_of(B, T, NH, HS);
    size_t nq = (size_t)B * T * 3 * NH * HS, no = (size_t)B * T * NH * HS;
    size_t nl = (size_t)B * NH * T;
    float *qkv = random_floats(nq, 7u + (unsigned)T), *dout = random_floats(no, 11u + (unsigned)B);
    double *o = calloc(no, sizeof *o), *lse = calloc(nl, sizeof *lse);
    double *dqkv = calloc(nq, sizeof *dqkv), *p = malloc((size_t)T * sizeof *p);
    double *dp = malloc((size_t)T * sizeof *dp), scale = 1.0 / sqrt((double)HS);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                double mx = -INFINITY, sum = 0, dsum = 0;
                for (int j = 0; j <= i; j++) { /* causal, top-left: keys 0..i */
                    double s = 0;
                    for (int d = 0; d < HS; d++)
                        s += (double)qkv[at(&l.q, b, h, i, d)] * qkv[at(&l.k, b, h, j, d)];
                    p[j] = s * scale;
                    mx = fmax(mx, p[j]);
                }
                for (int j = 0; j <= i; j++)
                    sum += exp(p[j] - mx);
                double row_lse = mx + log(sum);
                lse[at(&l.stats, b, h, i, 0)] = row_lse;
                for (int j = 0; j <= i; j++)
                    p[j] = exp(p[j] - row_lse);
                for (int d = 0; d < HS; d++) {
                    double acc = 0;
                    for (int j = 0; j <= i; j++)
                        acc += p[j] * qkv[at(&l.v, b, h, j, d)];
                    o[at(&l.o, b, h, i, d)] = acc;
                }
                /* backward of this row: D = dO . O, dP = dO V^T, dS = P (dP - D) */
                for (int d = 0; d < HS; d++)
                    dsum += (double)dout[at(&l.o, b, h, i, d)] * o[at(&l.o, b, h, i, d)];
                for (int j = 0; j <= i; j++) {
                    double s = 0;
                    for (int d = 0; d < HS; d++)
                        s += (double)dout[at(&l.o, b, h, i, d)] * qkv[at(&l.v, b, h, j, d)];
                    dp[j] = p[j] * (s - dsum);
                }
                for (int j = 0; j <= i; j++)
                    for (int d = 0; d < HS; d++) {
                        dqkv[at(&l.q, b, h, i, d)] += scale * dp[j] * qkv[at(&l.k, b, h, j, d)];
                        dqkv[at(&l.k, b, h, j, d)] += scale * dp[j] * qkv[at(&l.q, b, h, i, d)];
                        dqkv[at(&l.v, b, h, j, d)] += p[j] * dout[at(&l.o, b, h, i, d)];
                    }
            }
    const tr_kernels *cpu = tr_kernels_cpu();
    float *out = malloc(no * 4), *lse32 = malloc(nl * 4), *dq = malloc(nq * 4);
    float *scratch = calloc((size_t)B * (NH + 1) * T + 64, 4);
    cpu->attention_forward(NULL, out, lse32, qkv, B, T, NH, HS, NULL);
    cpu->attention_backward(NULL, dq, scratch, dout, qkv, out, lse32, B, T, NH, HS, NULL);
    assert_true(max_rel(out, o, no) < 1e-5);
    assert_true(max_rel(lse32, lse, nl) < 1e-5);
    assert_true(max_rel(dq, dqkv, nq) < 1e-4);
    free(qkv), free(dout), free(o), free(lse), free(dqkv), free(p), free(dp), free(out);
    free(lse32), free(dq), free(scratch);
}

static void test_views_are_trident_attention(void **state)
{
    (void)state;
    check_shape(1, 5, 1, 8);
    check_shape(2, 33, 3, 16); /* several batches and heads, T not a tile multiple */
    check_shape(1, 70, 2, 64); /* GPT-2's head size past one 64-row tile */
}

static void test_views(void **state)
{
    (void)state;
    /* gpt2-124m at micro-batch 4: qkv (4, 1024, 12, 3, 64) */
    tr_cudnn_sdpa_layout l = tr_cudnn_sdpa_layout_of(4, 1024, 12, 64);
    int64_t C3 = 3 * 768;
    assert_int_equal(l.q.dim[0], 4), assert_int_equal(l.q.dim[1], 12);
    assert_int_equal(l.q.dim[2], 1024), assert_int_equal(l.q.dim[3], 64);
    assert_int_equal(l.q.stride[0], 1024 * C3), assert_int_equal(l.q.stride[1], 192);
    assert_int_equal(l.q.stride[2], C3), assert_int_equal(l.q.stride[3], 1);
    assert_int_equal(l.q.offset, 0), assert_int_equal(l.k.offset, 64);
    assert_int_equal(l.v.offset, 128);
    assert_int_equal(l.o.stride[0], 1024 * 768), assert_int_equal(l.o.stride[1], 64);
    assert_int_equal(l.o.stride[2], 768);
    assert_int_equal(l.stats.dim[3], 1), assert_int_equal(l.stats.stride[1], 1024);
    assert_int_equal(l.stats.stride[0], 12 * 1024), assert_int_equal(l.stats.stride[2], 1);
}

static void test_switch(void **state)
{
    (void)state;
    assert_int_equal(tr_cudnn_attention_passes(NULL), 0);
    assert_int_equal(tr_cudnn_attention_passes(""), 0);
    assert_int_equal(tr_cudnn_attention_passes("wmma"), 0);
    assert_int_equal(tr_cudnn_attention_passes("CUDNN"), 0);
    assert_int_equal(tr_cudnn_attention_passes("cudnn"), TR_CUDNN_FORWARD | TR_CUDNN_BACKWARD);
    assert_int_equal(tr_cudnn_attention_passes("cudnn-forward"), TR_CUDNN_FORWARD);
    assert_int_equal(tr_cudnn_attention_passes("cudnn-backward"), TR_CUDNN_BACKWARD);
    assert_int_equal(tr_cudnn_attention_passes("cudnn-nondeterministic"),
                     TR_CUDNN_FORWARD | TR_CUDNN_BACKWARD | TR_CUDNN_NONDETERMINISTIC);
    assert_int_equal(tr_cudnn_attention_passes("cudnn-nondeterministic "), 0);
}

static void test_refusals(void **state)
{
    (void)state;
    assert_null(tr_cudnn_attention_refusal(128, 1024, 12, 12, 64, 0, 0, 256));
    assert_null(tr_cudnn_attention_refusal(1, 1, 1, 1, 8, 0, 0, 0));
    assert_null(tr_cudnn_attention_refusal(2, 70, 2, 2, 128, 0, 0, 16));
    assert_non_null(tr_cudnn_attention_refusal(1, 130, 4, 2, 64, 0, 0, 0)); /* groups */
    assert_non_null(tr_cudnn_attention_refusal(1, 130, 4, 4, 64, 1, 0, 0)); /* ALiBi */
    assert_non_null(tr_cudnn_attention_refusal(1, 130, 4, 4, 64, 0, 1, 0)); /* segments */
    assert_non_null(tr_cudnn_attention_refusal(1, 130, 4, 4, 60, 0, 0, 0));
    assert_non_null(tr_cudnn_attention_refusal(1, 130, 4, 4, 136, 0, 0, 0));
    assert_non_null(tr_cudnn_attention_refusal(1, 130, 4, 4, 64, 0, 0, 8)); /* alignment */
    assert_non_null(tr_cudnn_attention_refusal(0, 130, 4, 4, 64, 0, 0, 0));
    assert_non_null(tr_cudnn_attention_refusal(4096, 8192, 32, 32, 128, 0, 0, 0)); /* 2^31 */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_views),
        cmocka_unit_test(test_switch),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_views_are_trident_attention),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
