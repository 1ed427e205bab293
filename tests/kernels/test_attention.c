/* kernels/: fused causal self-attention (kernels/cpu/attention.c, the flash-attention scheme)
 * against the algorithm it replaced, kept here as the reference: the whole (T, T) matrix of
 * probabilities per (batch, head), materialised in double (softmax of each query row over its
 * keys, packed sequences masking other runs, ALiBi added), out = P V, and the backward from
 * P (dS = P (dP - rowsum(P dP))). Layouts: qkv (B, T, NG, R+2, HS) (GPT-2's (B, T, NH, 3,
 * HS) is NG = NH), out (B, T, NH, HS), lse (B, NH, T). Shapes cross the 64-row tiles, with
 * T not a multiple of them, segments, grouped heads and ALiBi; plus finite differences. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kt.h"

typedef kt_att_shape shape;

typedef struct {
    shape s;
    float *qkv, *out, *lse, *wt;
    const float *alibi;
    const int32_t *seg;
} att_ctx;

/* The op under test: GPT-2's when NG = NH and no ALiBi, else the grouped one. */
static void forward(const att_ctx *c)
{
    shape s = c->s;
    if (s.NG == s.NH && !c->alibi)
        K->attention_forward(NULL, c->out, c->lse, c->qkv, s.B, s.T, s.NH, s.HS, c->seg);
    else
        K->attention_gqa_forward(NULL, c->out, c->lse, c->qkv, c->alibi, s.B, s.T, s.NH, s.NG,
                                 s.HS, c->seg);
}

static void backward(const att_ctx *c, float *dqkv, float *scratch)
{
    shape s = c->s;
    if (s.NG == s.NH && !c->alibi)
        K->attention_backward(NULL, dqkv, scratch, c->wt, c->qkv, c->out, c->lse, s.B, s.T, s.NH,
                              s.HS, c->seg);
    else
        K->attention_gqa_backward(NULL, dqkv, scratch, c->wt, c->qkv, c->out, c->lse, c->alibi,
                                  s.B, s.T, s.NH, s.NG, s.HS, c->seg);
}

static double att_loss(void *p)
{
    att_ctx *c = p;
    forward(c);
    return kt_dot(c->out, c->wt, (size_t)c->s.B * c->s.T * c->s.NH * c->s.HS);
}

static void check_attention(shape s, float range, int use_alibi, const int *lens, int nlens,
                            int with_fd)
{
    int R = s.NH / s.NG;
    size_t nqkv = (size_t)s.B * s.T * s.NG * (R + 2) * s.HS, nout = (size_t)s.B * s.T * s.NH * s.HS,
           nlse = (size_t)s.B * s.NH * s.T;
    float *slopes = kt_floats(s.NH);
    for (int h = 0; h < s.NH; h++)
        slopes[h] = 0.5f / (float)(h + 1);
    att_ctx c = {s, kt_floats(nqkv), kt_floats(nout), kt_floats(nlse), kt_floats(nout),
                 use_alibi ? slopes : NULL, kt_segments(s, lens, nlens)};
    kt_fill(c.qkv, nqkv, -range, range);
    kt_fill(c.wt, nout, -1, 1);
    kt_ref_result r = {kt_doubles(nout), kt_doubles(nout), kt_doubles(nlse), kt_doubles(nqkv),
                    kt_doubles(nqkv)};
    kt_ref_attention(s, c.qkv, c.wt, c.alibi, c.seg, NULL, &r);
    for (size_t i = 0; i < nout; i++)
        c.out[i] = NAN; /* every entry is written */
    att_loss(&c);
    kt_check("attention out", c.out, r.out, r.out_s, nout, 1e-5, 1e-7);
    kt_check("attention lse", c.lse, r.lse, NULL, nlse, 1e-6, 1e-6);
    size_t nscratch = nlse + (size_t)s.B * s.T;
    float *dq = kt_floats(nqkv), *scratch = kt_floats(nscratch);
    for (size_t i = 0; i < nqkv; i++)
        dq[i] = NAN; /* overwritten */
    for (size_t i = 0; i < nscratch; i++)
        scratch[i] = NAN; /* never read before written */
    backward(&c, dq, scratch);
    kt_check("attention dqkv", dq, r.dqkv, r.dqkv_s, nqkv, 1e-5, 1e-7);
    if (with_fd) {
        double *fd = kt_doubles(nqkv);
        kt_fd_grad(c.qkv, nqkv, 1e-3f, att_loss, &c, fd);
        kt_check_fd("attention dqkv vs finite differences", dq, fd, nqkv, 1e-2, 2e-3);
        free(fd);
    }
    free(c.qkv), free(c.out), free(c.lse), free(c.wt), free((void *)c.seg), free(slopes);
    free(r.out), free(r.out_s), free(r.lse), free(r.dqkv), free(r.dqkv_s), free(dq), free(scratch);
}

static void test_attention_small(void **state)
{
    (void)state;
    check_attention((shape){2, 5, 3, 3, 4}, 1.0f, 0, NULL, 0, 1);
    check_attention((shape){1, 1, 1, 1, 1}, 1.0f, 0, NULL, 0, 1); /* one token attends to itself */
    check_attention((shape){1, 3, 2, 2, 2}, 8.0f, 0, NULL, 0, 1); /* sharp softmax */
    int lens[] = {2, 3};
    check_attention((shape){2, 7, 4, 2, 3}, 1.0f, 1, lens, 2, 1); /* groups, ALiBi, segments */
}

static void test_attention_tiles(void **state)
{
    (void)state;
    check_attention((shape){1, 150, 2, 2, 8}, 1.0f, 0, NULL, 0, 0); /* crosses the 64-row tiles */
    check_attention((shape){3, 67, 3, 3, 16}, 1.0f, 0, NULL, 0, 0); /* split over threads */
    check_attention((shape){2, 200, 4, 2, 16}, 2.0f, 1, NULL, 0, 0); /* groups and ALiBi */
    check_attention((shape){1, 129, 1, 1, 8}, 4.0f, 0, NULL, 0, 0);  /* one pair: two passes */
}

static void test_attention_segments(void **state)
{
    (void)state;
    /* runs shorter than, equal to and longer than a tile, starting anywhere */
    int lens[] = {5, 64, 1, 90, 17, 130};
    check_attention((shape){2, 257, 2, 2, 8}, 1.0f, 0, lens, 6, 0);
    check_attention((shape){3, 190, 6, 3, 8}, 1.0f, 1, lens + 1, 5, 0);
    int one[] = {1}; /* every token its own sequence */
    check_attention((shape){1, 70, 2, 1, 4}, 1.0f, 1, one, 1, 0);
}

/* The two backward orders (whole (batch, group) pairs, or key tiles then query tiles) and
 * every thread count give the same bits. */
static void test_attention_threads(void **state)
{
    (void)state;
    shape s = {2, 300, 4, 2, 16}; /* 4 (batch, group) pairs: one order at 1 thread, the other at 2 */
    int R = s.NH / s.NG, lens[] = {100, 37, 200};
    size_t nqkv = (size_t)s.B * s.T * s.NG * (R + 2) * s.HS, nout = (size_t)s.B * s.T * s.NH * s.HS,
           nlse = (size_t)s.B * s.NH * s.T;
    float slopes[4] = {0.5f, 0.25f, 0.125f, 0.0625f};
    att_ctx c = {s, kt_floats(nqkv), kt_floats(nout), kt_floats(nlse), kt_floats(nout), slopes,
                 kt_segments(s, lens, 3)};
    kt_fill(c.qkv, nqkv, -1, 1);
    kt_fill(c.wt, nout, -1, 1);
    int max_threads = tr_kernels_cpu_threads();
    float *o[3], *l[3], *dq[3], *scratch = kt_floats(nlse + (size_t)s.B * s.T);
    int counts[3] = {1, 2, 5};
    for (int i = 0; i < 3; i++) {
        tr_kernels_cpu_set_threads(counts[i]);
        forward(&c);
        o[i] = kt_floats(nout), l[i] = kt_floats(nlse), dq[i] = kt_floats(nqkv);
        memcpy(o[i], c.out, nout * sizeof(float));
        memcpy(l[i], c.lse, nlse * sizeof(float));
        backward(&c, dq[i], scratch);
    }
    tr_kernels_cpu_set_threads(max_threads);
    for (int i = 1; i < 3; i++) {
        kt_check_same("attention out across thread counts", o[0], o[i], nout);
        kt_check_same("attention lse across thread counts", l[0], l[i], nlse);
        kt_check_same("attention dqkv across thread counts and orders", dq[0], dq[i], nqkv);
    }
    for (int i = 0; i < 3; i++)
        free(o[i]), free(l[i]), free(dq[i]);
    free(c.qkv), free(c.out), free(c.lse), free(c.wt), free((void *)c.seg), free(scratch);
}

int main(void)
{
    K = tr_kernels_cpu();
    kt_seed(37);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attention_small),
        cmocka_unit_test(test_attention_tiles),
        cmocka_unit_test(test_attention_segments),
        cmocka_unit_test(test_attention_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
