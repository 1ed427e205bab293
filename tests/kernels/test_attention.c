/* kernels/: causal self-attention forward and backward against a double-precision reference
 * (plain loops) and finite differences. Layouts: qkv (B, T, NH, 3, HS), out (B, T, NH, HS),
 * att (B, NH, T, T). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kt.h"

typedef struct {
    int B, T, NH, HS;
} shape;

static size_t qkv_at(shape s, int b, int t, int h, int which, int d)
{
    return ((((size_t)b * s.T + t) * s.NH + h) * 3 + which) * s.HS + d;
}

static size_t out_at(shape s, int b, int t, int h, int d)
{
    return (((size_t)b * s.T + t) * s.NH + h) * s.HS + d;
}

/* Reference forward and backward. *_s: sums of magnitudes of the terms (tolerance scales). */
static void ref_attention(shape s, const float *qkv, const float *dout, double *out,
                          double *out_s, double *att, double *dqkv, double *dqkv_s)
{
    double scale = 1.0 / sqrt((double)s.HS);
    int T = s.T;
    double *p = malloc(sizeof(double) * T), *dp = malloc(sizeof(double) * T),
           *dpa = malloc(sizeof(double) * T);
    assert_non_null(p);
    assert_non_null(dp);
    assert_non_null(dpa);
    for (int b = 0; b < s.B; b++)
        for (int h = 0; h < s.NH; h++)
            for (int t = 0; t < T; t++) {
                double mx = -INFINITY;
                for (int j = 0; j <= t; j++) {
                    double dot = 0;
                    for (int d = 0; d < s.HS; d++)
                        dot += (double)qkv[qkv_at(s, b, t, h, 0, d)] * qkv[qkv_at(s, b, j, h, 1, d)];
                    p[j] = dot * scale;
                    mx = fmax(mx, p[j]);
                }
                double sum = 0;
                for (int j = 0; j <= t; j++)
                    sum += p[j] = exp(p[j] - mx);
                double *arow = att + (((size_t)b * s.NH + h) * T + t) * T;
                for (int j = 0; j < T; j++)
                    arow[j] = j <= t ? p[j] / sum : 0.0;
                for (int j = 0; j <= t; j++)
                    p[j] = arow[j];
                for (int d = 0; d < s.HS; d++) {
                    double o = 0, oa = 0;
                    for (int j = 0; j <= t; j++) {
                        o += p[j] * qkv[qkv_at(s, b, j, h, 2, d)];
                        oa += p[j] * fabs(qkv[qkv_at(s, b, j, h, 2, d)]);
                    }
                    out[out_at(s, b, t, h, d)] = o;
                    out_s[out_at(s, b, t, h, d)] = oa;
                }
                /* backward of this query row */
                double dot = 0, dota = 0;
                for (int j = 0; j <= t; j++) {
                    dp[j] = dpa[j] = 0;
                    for (int d = 0; d < s.HS; d++) {
                        double term = (double)dout[out_at(s, b, t, h, d)] * qkv[qkv_at(s, b, j, h, 2, d)];
                        dp[j] += term;
                        dpa[j] += fabs(term);
                    }
                    dot += p[j] * dp[j];
                    dota += p[j] * dpa[j];
                }
                for (int j = 0; j <= t; j++) {
                    double ds = p[j] * (dp[j] - dot), dsa = p[j] * (dpa[j] + dota);
                    for (int d = 0; d < s.HS; d++) {
                        size_t iq = qkv_at(s, b, t, h, 0, d), ik = qkv_at(s, b, j, h, 1, d),
                               iv = qkv_at(s, b, j, h, 2, d);
                        dqkv[iq] += scale * ds * qkv[ik];
                        dqkv_s[iq] += scale * dsa * fabs(qkv[ik]);
                        dqkv[ik] += scale * ds * qkv[iq];
                        dqkv_s[ik] += scale * dsa * fabs(qkv[iq]);
                        dqkv[iv] += p[j] * dout[out_at(s, b, t, h, d)];
                        dqkv_s[iv] += p[j] * fabs(dout[out_at(s, b, t, h, d)]);
                    }
                }
            }
    free(p);
    free(dp);
    free(dpa);
}

struct att_ctx {
    shape s;
    float *qkv, *out, *att, *wt;
};

static double att_loss(void *p)
{
    struct att_ctx *c = p;
    K->attention_forward(NULL, c->out, c->att, c->qkv, c->s.B, c->s.T, c->s.NH, c->s.HS, NULL);
    return kt_dot(c->out, c->wt, (size_t)c->s.B * c->s.T * c->s.NH * c->s.HS);
}

static void check_attention(shape s, float range, int with_fd)
{
    size_t nqkv = (size_t)s.B * s.T * s.NH * 3 * s.HS, nout = (size_t)s.B * s.T * s.NH * s.HS,
           natt = (size_t)s.B * s.NH * s.T * s.T;
    struct att_ctx c = {s, kt_floats(nqkv), kt_floats(nout), kt_floats(natt), kt_floats(nout)};
    kt_fill(c.qkv, nqkv, -range, range);
    kt_fill(c.wt, nout, -1, 1);
    for (size_t i = 0; i < natt; i++)
        c.att[i] = NAN; /* every entry is written, the upper triangle with 0 */
    double *out = kt_doubles(nout), *out_s = kt_doubles(nout), *att = kt_doubles(natt),
           *dqkv = kt_doubles(nqkv), *dqkv_s = kt_doubles(nqkv);
    ref_attention(s, c.qkv, c.wt, out, out_s, att, dqkv, dqkv_s);
    att_loss(&c);
    kt_check("attention out", c.out, out, out_s, nout, 1e-5, 1e-7);
    kt_check("attention att", c.att, att, NULL, natt, 1e-5, 1e-7);
    for (int bh = 0; bh < s.B * s.NH; bh++)
        for (int t = 0; t < s.T; t++)
            for (int j = t + 1; j < s.T; j++)
                assert_true(c.att[((size_t)bh * s.T + t) * s.T + j] == 0.0f);
    float *dq = kt_floats(nqkv), *datt = kt_floats(natt);
    for (size_t i = 0; i < nqkv; i++)
        dq[i] = NAN; /* overwritten */
    for (size_t i = 0; i < natt; i++)
        datt[i] = NAN; /* scratch: never read before written */
    K->attention_backward(NULL, dq, datt, c.wt, c.qkv, c.att, s.B, s.T, s.NH, s.HS);
    kt_check("attention dqkv", dq, dqkv, dqkv_s, nqkv, 1e-5, 1e-7);
    if (with_fd) {
        double *fd = kt_doubles(nqkv);
        kt_fd_grad(c.qkv, nqkv, 1e-3f, att_loss, &c, fd);
        kt_check_fd("attention dqkv vs finite differences", dq, fd, nqkv, 1e-2, 2e-3);
        free(fd);
    }
    free(c.qkv), free(c.out), free(c.att), free(c.wt);
    free(out), free(out_s), free(att), free(dqkv), free(dqkv_s), free(dq), free(datt);
}

static void test_attention_small(void **state)
{
    (void)state;
    check_attention((shape){2, 5, 3, 4}, 1.0f, 1);
    check_attention((shape){1, 1, 1, 1}, 1.0f, 1);   /* one token attends to itself */
    check_attention((shape){1, 3, 2, 2}, 8.0f, 1);   /* sharp softmax */
}

static void test_attention_blocks(void **state)
{
    (void)state;
    check_attention((shape){1, 150, 2, 8}, 1.0f, 0); /* crosses the 64-row blocks */
    check_attention((shape){3, 67, 3, 16}, 1.0f, 0); /* split over threads */
}

int main(void)
{
    K = tr_kernels_cpu();
    kt_seed(37);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attention_small),
        cmocka_unit_test(test_attention_blocks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
