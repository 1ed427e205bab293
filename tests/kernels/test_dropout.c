/* kernels/: counter-based dropout (kernels.h: dropout, attention_gqa_dropout_forward /
 * _backward) against scalar references built on core/philox.h's tr_dropout_keep: the hidden
 * op's elements, slices (sequence-parallel rows, TP columns) dropping what the whole drops,
 * the kept fraction over 1e6 elements; attention with the probabilities dropped against the
 * whole (T, T) matrix in double with the same mask (GQA, ALiBi, segments, tiles, a head
 * offset), finite differences, thread counts, and p = 0 equal to the plain op. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/philox.h"
#include "kt.h"

static tr_dropout make_drop(double p, uint64_t seed, uint64_t first_sample, int layer, int kind)
{
    return (tr_dropout){.seed = seed, .first_sample = first_sample,
                        .site = tr_dropout_site(layer, kind),
                        .threshold = tr_dropout_threshold(p), .scale = (float)(1.0 / (1.0 - p))};
}

/* The hidden op on (N, C) local rows and columns against tr_dropout_keep element by element;
 * in place equals out of place. */
static void check_hidden(int N, int C, int T, int row0, int C_total, int col0, double p)
{
    tr_dropout d = make_drop(p, 0x123456789abcull, 40, 3, TR_DROPOUT_MLP_OUT);
    size_t n = (size_t)N * C;
    float *x = kt_floats(n), *y = kt_floats(n), *z = kt_floats(n);
    kt_fill(x, n, -2, 2);
    memcpy(z, x, n * sizeof(float));
    K->dropout(NULL, y, x, d, N, C, T, row0, C_total, col0);
    K->dropout(NULL, z, z, d, N, C, T, row0, C_total, col0);
    kt_check_same("dropout in place vs out of place", y, z, n);
    for (int r = 0; r < N; r++)
        for (int c = 0; c < C; c++) {
            int g = row0 + r;
            uint64_t e = (uint64_t)(g % T) * (uint64_t)C_total + (uint64_t)(col0 + c);
            int keep = tr_dropout_keep(d.seed, d.first_sample + (uint64_t)(g / T), d.site, e,
                                       d.threshold);
            float want = keep ? x[(size_t)r * C + c] * d.scale : 0.0f;
            if (y[(size_t)r * C + c] != want)
                fail_msg("dropout row %d col %d: %g, want %g", r, c, y[(size_t)r * C + c], want);
        }
    free(x), free(y), free(z);
}

static void test_hidden_reference(void **state)
{
    (void)state;
    check_hidden(12, 10, 4, 0, 10, 0, 0.1);   /* three samples of four positions */
    check_hidden(6, 5, 4, 7, 20, 10, 0.3);    /* a slice: rows from 7, columns 10..14 of 20 */
    check_hidden(300, 129, 50, 0, 129, 0, 0.5); /* big enough for the team */
    check_hidden(3, 7, 3, 0, 7, 0, 0.0);      /* p = 0: the identity */
}

/* Sequence-parallel row slices and column slices drop exactly what the whole drops. */
static void test_hidden_slices(void **state)
{
    (void)state;
    int B = 3, T = 8, C = 12, N = B * T;
    tr_dropout d = make_drop(0.25, 77, 1000, 5, TR_DROPOUT_ATTN_OUT);
    size_t all = (size_t)N * C;
    float *x = kt_floats(all), *whole = kt_floats(all), *part = kt_floats(all);
    kt_fill(x, all, -1, 1);
    K->dropout(NULL, whole, x, d, N, C, T, 0, C, 0);
    for (int tp = 2; tp <= 4; tp *= 2) /* tp ranks' rows (at tp 4 a slice crosses samples) */
        for (int r = 0; r < tp; r++) {
            int rows = N / tp, row0 = r * rows;
            K->dropout(NULL, part, x + (size_t)row0 * C, d, rows, C, T, row0, C, 0);
            kt_check_same("a sequence-parallel slice", part, whole + (size_t)row0 * C,
                          (size_t)rows * C);
        }
    float *slice = kt_floats((size_t)N * 3), *out = kt_floats((size_t)N * 3);
    for (int col0 = 0; col0 < C; col0 += 3) { /* four column slices of three */
        for (int n = 0; n < N; n++)
            memcpy(slice + (size_t)n * 3, x + (size_t)n * C + col0, 3 * sizeof(float));
        K->dropout(NULL, out, slice, d, N, 3, T, 0, C, col0);
        for (int n = 0; n < N; n++)
            kt_check_same("a column slice", out + (size_t)n * 3, whole + (size_t)n * C + col0, 3);
    }
    free(x), free(whole), free(part), free(slice), free(out);
}

/* Of 1e6 elements the kept fraction is within 5 sigma of 1 - p; kept ones are scaled. */
static void test_hidden_fraction(void **state)
{
    (void)state;
    int N = 1000, C = 1000;
    double ps[2] = {0.1, 0.5};
    float *x = kt_floats((size_t)N * C);
    for (int i = 0; i < 2; i++) {
        for (size_t j = 0; j < (size_t)N * C; j++)
            x[j] = 1.0f;
        tr_dropout d = make_drop(ps[i], 2024 + (uint64_t)i, 0, 1, TR_DROPOUT_EMBEDDING);
        K->dropout(NULL, x, x, d, N, C, 100, 0, C, 0);
        double kept = 0;
        for (size_t j = 0; j < (size_t)N * C; j++) {
            if (x[j] != 0.0f && x[j] != d.scale)
                fail_msg("element %zu is %g, neither 0 nor the scale", j, x[j]);
            kept += x[j] != 0.0f;
        }
        double n = (double)N * C, q = 1.0 - ps[i], sigma = sqrt(n * q * ps[i]);
        if (fabs(kept - n * q) > 5 * sigma)
            fail_msg("p %.1f: kept %.0f of %.0f, expected %.0f +- %.0f", ps[i], kept, n, n * q,
                     5 * sigma);
    }
    free(x);
}

/* ------------------------------------------------------------------ attention dropout */

typedef kt_att_shape shape;

typedef struct {
    shape s;
    float *qkv, *out, *lse, *wt;
    const float *alibi;
    const int32_t *seg;
    tr_dropout d;
} att_ctx;

static void forward(const att_ctx *c)
{
    shape s = c->s;
    K->attention_gqa_dropout_forward(NULL, c->out, c->lse, c->qkv, c->alibi, s.B, s.T, s.NH,
                                     s.NG, s.HS, c->seg, c->d);
}

static double att_loss(void *p)
{
    att_ctx *c = p;
    forward(c);
    return kt_dot(c->out, c->wt, (size_t)c->s.B * c->s.T * c->s.NH * c->s.HS);
}

static size_t nqkv_of(shape s) { return (size_t)s.B * s.T * s.NG * (s.NH / s.NG + 2) * s.HS; }

static void check_attention(shape s, double p, int head0, int use_alibi, const int *lens,
                            int nlens, int with_fd)
{
    size_t nqkv = nqkv_of(s), nout = (size_t)s.B * s.T * s.NH * s.HS,
           nlse = (size_t)s.B * s.NH * s.T;
    float slopes[16];
    for (int h = 0; h < s.NH; h++)
        slopes[h] = 0.5f / (float)(h + 1);
    att_ctx c = {s, kt_floats(nqkv), kt_floats(nout), kt_floats(nlse), kt_floats(nout),
                 use_alibi ? slopes : NULL, kt_segments(s, lens, nlens),
                 make_drop(p, 991, 17, 2, TR_DROPOUT_ATTN_PROBS)};
    c.d.head0 = head0;
    kt_fill(c.qkv, nqkv, -1, 1);
    kt_fill(c.wt, nout, -1, 1);
    kt_ref_result r = {kt_doubles(nout), kt_doubles(nout), kt_doubles(nlse), kt_doubles(nqkv),
                       kt_doubles(nqkv)};
    kt_ref_attention(s, c.qkv, c.wt, c.alibi, c.seg, &c.d, &r);
    att_loss(&c);
    kt_check("dropout attention out", c.out, r.out, r.out_s, nout, 1e-5, 1e-7);
    kt_check("dropout attention lse (undropped)", c.lse, r.lse, NULL, nlse, 1e-6, 1e-6);
    float *dq = kt_floats(nqkv), *scratch = kt_floats(nlse + (size_t)s.B * s.T);
    K->attention_gqa_dropout_backward(NULL, dq, scratch, c.wt, c.qkv, c.out, c.lse, c.alibi,
                                      s.B, s.T, s.NH, s.NG, s.HS, c.seg, c.d);
    kt_check("dropout attention dqkv", dq, r.dqkv, r.dqkv_s, nqkv, 1e-5, 1e-7);
    if (with_fd) {
        double *fd = kt_doubles(nqkv);
        kt_fd_grad(c.qkv, nqkv, 1e-3f, att_loss, &c, fd);
        kt_check_fd("dropout attention dqkv vs finite differences", dq, fd, nqkv, 1e-2, 2e-3);
        free(fd);
    }
    free(c.qkv), free(c.out), free(c.lse), free(c.wt), free((void *)c.seg);
    free(r.out), free(r.out_s), free(r.lse), free(r.dqkv), free(r.dqkv_s), free(dq), free(scratch);
}

static void test_attention_reference(void **state)
{
    (void)state;
    int lens[] = {2, 3};
    check_attention((shape){2, 6, 2, 2, 4}, 0.2, 0, 0, NULL, 0, 1);
    check_attention((shape){2, 7, 4, 2, 3}, 0.3, 4, 1, lens, 2, 1); /* GQA, ALiBi, segments */
    check_attention((shape){1, 150, 2, 1, 8}, 0.1, 2, 0, NULL, 0, 0); /* crosses the tiles */
    int long_lens[] = {5, 64, 90, 130};
    check_attention((shape){2, 200, 4, 2, 8}, 0.5, 0, 1, long_lens, 4, 0);
}

/* p = 0 gives the plain op's bits; every thread count the same bits with dropout. */
static void test_attention_plain_and_threads(void **state)
{
    (void)state;
    shape s = {2, 130, 4, 2, 8};
    size_t nqkv = nqkv_of(s), nout = (size_t)s.B * s.T * s.NH * s.HS,
           nlse = (size_t)s.B * s.NH * s.T, nscr = nlse + (size_t)s.B * s.T;
    float *qkv = kt_floats(nqkv), *dout = kt_floats(nout), *scratch = kt_floats(nscr);
    kt_fill(qkv, nqkv, -1, 1);
    kt_fill(dout, nout, -1, 1);
    float *o[4], *l[4], *dq[4];
    for (int i = 0; i < 4; i++)
        o[i] = kt_floats(nout), l[i] = kt_floats(nlse), dq[i] = kt_floats(nqkv);
    K->attention_gqa_forward(NULL, o[0], l[0], qkv, NULL, s.B, s.T, s.NH, s.NG, s.HS, NULL);
    K->attention_gqa_backward(NULL, dq[0], scratch, dout, qkv, o[0], l[0], NULL, s.B, s.T, s.NH,
                              s.NG, s.HS, NULL);
    tr_dropout none = make_drop(0.0, 5, 0, 0, TR_DROPOUT_ATTN_PROBS);
    K->attention_gqa_dropout_forward(NULL, o[1], l[1], qkv, NULL, s.B, s.T, s.NH, s.NG, s.HS,
                                     NULL, none);
    K->attention_gqa_dropout_backward(NULL, dq[1], scratch, dout, qkv, o[1], l[1], NULL, s.B,
                                      s.T, s.NH, s.NG, s.HS, NULL, none);
    kt_check_same("p = 0: out", o[0], o[1], nout);
    kt_check_same("p = 0: dqkv", dq[0], dq[1], nqkv);
    tr_dropout d = make_drop(0.3, 5, 9, 1, TR_DROPOUT_ATTN_PROBS);
    int max_threads = tr_kernels_cpu_threads(), counts[2] = {1, 3};
    for (int i = 0; i < 2; i++) {
        tr_kernels_cpu_set_threads(counts[i]);
        K->attention_gqa_dropout_forward(NULL, o[2 + i], l[2 + i], qkv, NULL, s.B, s.T, s.NH,
                                         s.NG, s.HS, NULL, d);
        K->attention_gqa_dropout_backward(NULL, dq[2 + i], scratch, dout, qkv, o[2 + i],
                                          l[2 + i], NULL, s.B, s.T, s.NH, s.NG, s.HS, NULL, d);
    }
    tr_kernels_cpu_set_threads(max_threads);
    kt_check_same("dropout out across thread counts", o[2], o[3], nout);
    kt_check_same("dropout dqkv across thread counts", dq[2], dq[3], nqkv);
    for (int i = 0; i < 4; i++)
        free(o[i]), free(l[i]), free(dq[i]);
    free(qkv), free(dout), free(scratch);
}

int main(void)
{
    K = tr_kernels_cpu();
    kt_seed(41);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hidden_reference),
        cmocka_unit_test(test_hidden_slices),
        cmocka_unit_test(test_hidden_fraction),
        cmocka_unit_test(test_attention_reference),
        cmocka_unit_test(test_attention_plain_and_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
