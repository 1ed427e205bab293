/* kernels.h attention_rows_*: context parallelism's block of query rows q0 .. Tk-1 against the
 * keys at or before each, against the whole-sequence causal attention (attention_gqa_*: its
 * rows q0.. are the same rows), a double reference, and finite differences (GQA and ALiBi);
 * and past the kernel's blocks (64 query rows, 256 forward keys, 64 backward keys); with
 * dropout on the probabilities (attention_rows_dropout_*) against the reference with the mask
 * at the whole sequence's coordinates. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/philox.h"
#include "kt.h"

enum { B = 2, TK = 13, NH = 4, NG = 2, HS = 8, R = NH / NG, ROW = NG * (R + 2) * HS };

/* Double reference of one block: out (B, nq, NH, HS). */
static void reference(double *out, const float *qkv, const float *alibi, int q0)
{
    int nq = TK - q0;
    double scale = 1.0 / sqrt((double)HS), S[TK];
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < nq; i++) {
                int t = q0 + i, g = h / R;
                const float *q = qkv + ((size_t)b * TK + t) * ROW + (g * (R + 2) + h % R) * HS;
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j <= t; j++) {
                    const float *k = qkv + ((size_t)b * TK + j) * ROW + (g * (R + 2) + R) * HS;
                    double s = 0;
                    for (int d = 0; d < HS; d++)
                        s += (double)q[d] * k[d];
                    S[j] = s * scale + (alibi ? (double)alibi[h] * (j - t) : 0.0);
                    mx = S[j] > mx ? S[j] : mx;
                }
                for (int j = 0; j <= t; j++)
                    sum += S[j] = exp(S[j] - mx);
                double *o = out + (((size_t)b * nq + i) * NH + h) * HS;
                for (int d = 0; d < HS; d++) {
                    o[d] = 0;
                    for (int j = 0; j <= t; j++)
                        o[d] += S[j] / sum *
                                qkv[((size_t)b * TK + j) * ROW + (g * (R + 2) + R + 1) * HS + d];
                }
            }
}

static void check_block(int q0, const float *alibi)
{
    int nq = TK - q0;
    size_t nqkv = (size_t)B * TK * ROW, nout = (size_t)B * nq * NH * HS;
    float *qkv = kt_floats(nqkv), *out = kt_floats(nout), *lse = kt_floats((size_t)B * NH * nq);
    float *full = kt_floats((size_t)B * TK * NH * HS), *flse = kt_floats((size_t)B * NH * TK);
    double *ref = kt_doubles(nout);
    kt_fill(qkv, nqkv, -1.5f, 1.5f);
    K->attention_rows_forward(NULL, out, lse, qkv, alibi, B, TK, q0, NH, NG, HS);
    reference(ref, qkv, alibi, q0);
    kt_check("attention_rows_forward vs double", out, ref, NULL, nout, 1e-5, 1e-6);
    /* the whole sequence's attention: its rows q0.. are this block */
    K->attention_gqa_forward(NULL, full, flse, qkv, alibi, B, TK, NH, NG, HS, NULL);
    for (int b = 0; b < B; b++) {
        for (int i = 0; i < nq; i++)
            for (int c = 0; c < NH * HS; c++)
                assert_true(fabsf(out[((size_t)b * nq + i) * NH * HS + c] -
                                  full[((size_t)b * TK + q0 + i) * NH * HS + c]) < 1e-5f);
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < nq; i++)
                assert_true(fabsf(lse[((size_t)b * NH + h) * nq + i] -
                                  flse[((size_t)b * NH + h) * TK + q0 + i]) < 1e-5f);
    }
    /* backward against attention_gqa_backward with dout 0 on rows before q0 */
    float *dout = kt_floats(nout), *fdout = kt_floats((size_t)B * TK * NH * HS);
    float *dqkv = kt_floats(nqkv), *fdqkv = kt_floats(nqkv);
    float *scratch = kt_floats((size_t)B * (NH + 1) * TK);
    kt_fill(dout, nout, -1.0f, 1.0f);
    for (int b = 0; b < B; b++)
        memcpy(fdout + ((size_t)b * TK + q0) * NH * HS, dout + (size_t)b * nq * NH * HS,
               (size_t)nq * NH * HS * sizeof(float));
    K->attention_rows_backward(NULL, dqkv, dout, qkv, out, lse, alibi, B, TK, q0, NH, NG, HS);
    K->attention_gqa_backward(NULL, fdqkv, scratch, fdout, qkv, full, flse, alibi, B, TK, NH, NG,
                              HS, NULL);
    for (size_t i = 0; i < nqkv; i++)
        assert_true(fabsf(dqkv[i] - fdqkv[i]) < 2e-5f * (1.0f + fabsf(fdqkv[i])));
    /* it accumulates: a second call doubles the gradient */
    K->attention_rows_backward(NULL, dqkv, dout, qkv, out, lse, alibi, B, TK, q0, NH, NG, HS);
    for (size_t i = 0; i < nqkv; i++)
        assert_true(fabsf(dqkv[i] - 2 * fdqkv[i]) < 4e-5f * (1.0f + fabsf(fdqkv[i])));
    free(qkv), free(out), free(lse), free(full), free(flse), free(ref);
    free(dout), free(fdout), free(dqkv), free(fdqkv), free(scratch);
}

static void test_forward_backward(void **state)
{
    (void)state;
    kt_seed(7);
    float slopes[NH] = {0.5f, 0.25f, 0.125f, 0.0625f};
    for (int q0 = 0; q0 < TK; q0 += 4) {
        check_block(q0, NULL);
        check_block(q0, slopes);
    }
    check_block(TK - 1, slopes); /* one query row */
}

/* Past one block of query rows, of forward keys and of backward key tiles (64, 256, 64): a
 * block q0 .. Tk-1 of 300 rows against the whole sequence's attention, forward and backward. */
static void check_long(int Tk, int q0, int nh, int ng, int hs, const float *alibi)
{
    int nq = Tk - q0, row = ng * (nh / ng + 2) * hs, C = nh * hs;
    size_t nqkv = (size_t)Tk * row;
    float *qkv = kt_floats(nqkv), *out = kt_floats((size_t)nq * C);
    float *lse = kt_floats((size_t)nh * nq);
    float *full = kt_floats((size_t)Tk * C), *flse = kt_floats((size_t)nh * Tk);
    float *dout = kt_floats((size_t)nq * C), *fdout = kt_floats((size_t)Tk * C);
    float *dqkv = kt_floats(nqkv), *fdqkv = kt_floats(nqkv);
    float *scratch = kt_floats((size_t)(nh + 1) * Tk);
    kt_fill(qkv, nqkv, -1.5f, 1.5f);
    kt_fill(dout, (size_t)nq * C, -1.0f, 1.0f);
    memcpy(fdout + (size_t)q0 * C, dout, (size_t)nq * C * sizeof(float));
    K->attention_rows_forward(NULL, out, lse, qkv, alibi, 1, Tk, q0, nh, ng, hs);
    K->attention_gqa_forward(NULL, full, flse, qkv, alibi, 1, Tk, nh, ng, hs, NULL);
    for (size_t i = 0; i < (size_t)nq * C; i++)
        assert_true(fabsf(out[i] - full[(size_t)q0 * C + i]) < 1e-5f);
    for (int h = 0; h < nh; h++)
        for (int i = 0; i < nq; i++)
            assert_true(fabsf(lse[(size_t)h * nq + i] - flse[(size_t)h * Tk + q0 + i]) < 1e-4f);
    K->attention_rows_backward(NULL, dqkv, dout, qkv, out, lse, alibi, 1, Tk, q0, nh, ng, hs);
    K->attention_gqa_backward(NULL, fdqkv, scratch, fdout, qkv, full, flse, alibi, 1, Tk, nh, ng,
                              hs, NULL);
    for (size_t i = 0; i < nqkv; i++)
        assert_true(fabsf(dqkv[i] - fdqkv[i]) < 1e-4f * (1.0f + fabsf(fdqkv[i])));
    free(qkv), free(out), free(lse), free(full), free(flse), free(dout), free(fdout);
    free(dqkv), free(fdqkv), free(scratch);
}

static void test_long_blocks(void **state)
{
    (void)state;
    kt_seed(13);
    float slopes[8] = {0.2f, 0.1f, 0.05f, 0.02f, 0.01f, 0.3f, 0.15f, 0.07f};
    check_long(300, 0, 4, 2, 16, NULL);
    check_long(300, 100, 4, 2, 16, slopes);
    check_long(300, 299, 8, 8, 8, NULL);
    check_long(333, 150, 8, 1, 32, slopes);
}

typedef struct {
    float *qkv, *out, *lse, *w;
    const float *alibi;
    int q0;
} fd_ctx;

static double fd_loss(void *ctx)
{
    fd_ctx *c = ctx;
    K->attention_rows_forward(NULL, c->out, c->lse, c->qkv, c->alibi, B, TK, c->q0, NH, NG, HS);
    return kt_dot(c->out, c->w, (size_t)B * (TK - c->q0) * NH * HS);
}

/* Finite differences of L = sum out * w with respect to every element of qkv. */
static void test_finite_differences(void **state)
{
    (void)state;
    kt_seed(11);
    float slopes[NH] = {0.3f, 0.2f, 0.1f, 0.05f};
    int q0 = 6, nq = TK - q0;
    size_t nqkv = (size_t)B * TK * ROW, nout = (size_t)B * nq * NH * HS;
    fd_ctx c = {.qkv = kt_floats(nqkv), .out = kt_floats(nout),
                .lse = kt_floats((size_t)B * NH * nq), .w = kt_floats(nout), .alibi = slopes,
                .q0 = q0};
    kt_fill(c.qkv, nqkv, -1.0f, 1.0f);
    kt_fill(c.w, nout, -1.0f, 1.0f);
    double *fd = kt_doubles(nqkv);
    kt_fd_grad(c.qkv, nqkv, 1e-2f, fd_loss, &c, fd);
    float *dqkv = kt_floats(nqkv);
    fd_loss(&c);
    K->attention_rows_backward(NULL, dqkv, c.w, c.qkv, c.out, c.lse, slopes, B, TK, q0, NH, NG,
                               HS);
    kt_check_fd("attention_rows_backward vs finite differences", dqkv, fd, nqkv, 2e-2, 2e-3);
    free(c.qkv), free(c.out), free(c.lse), free(c.w), free(fd), free(dqkv);
}

/* attention_rows_dropout_*: block q0 .. Tk-1 of samples of s.T >= Tk positions (the mask's
 * length; rows past Tk are later chunks the block never sees) against kt_ref_attention of the
 * whole samples with the same mask (global head head0 + h, sample 31 + b): out, lse, and dqkv
 * from dout on the block's rows only. */
static void check_dropout(kt_att_shape s, int Tk, int q0, int head0, const float *alibi,
                          double p)
{
    int nq = Tk - q0, row = s.NG * (s.NH / s.NG + 2) * s.HS, C = s.NH * s.HS;
    size_t nqkv = (size_t)s.B * s.T * row, nsub = (size_t)s.B * Tk * row;
    size_t nout = (size_t)s.B * nq * C, nfout = (size_t)s.B * s.T * C;
    size_t nlse = (size_t)s.B * s.NH * nq, nflse = (size_t)s.B * s.NH * s.T;
    float *qkv = kt_floats(nqkv), *sub = kt_floats(nsub), *fdout = kt_floats(nfout);
    float *out = kt_floats(nout), *lse = kt_floats(nlse), *dout = kt_floats(nout);
    float *dqkv = kt_floats(nsub);
    kt_fill(qkv, nqkv, -1.5f, 1.5f);
    kt_fill(dout, nout, -1.0f, 1.0f);
    for (int b = 0; b < s.B; b++) {
        memcpy(sub + (size_t)b * Tk * row, qkv + (size_t)b * s.T * row,
               (size_t)Tk * row * sizeof(float));
        memcpy(fdout + ((size_t)b * s.T + q0) * C, dout + (size_t)b * nq * C,
               (size_t)nq * C * sizeof(float));
    }
    tr_dropout d = {.seed = 0x5eedull, .first_sample = 31,
                    .site = tr_dropout_site(3, TR_DROPOUT_ATTN_PROBS),
                    .threshold = tr_dropout_threshold(p), .scale = (float)(1.0 / (1.0 - p)),
                    .head0 = head0};
    kt_ref_result r = {kt_doubles(nfout), kt_doubles(nfout), kt_doubles(nflse),
                       kt_doubles(nqkv), kt_doubles(nqkv)};
    kt_ref_attention(s, qkv, fdout, alibi, NULL, &d, &r);
    K->attention_rows_dropout_forward(NULL, out, lse, sub, alibi, s.B, Tk, q0, s.NH, s.NG, s.HS,
                                      s.T, d);
    K->attention_rows_dropout_backward(NULL, dqkv, dout, sub, out, lse, alibi, s.B, Tk, q0, s.NH,
                                       s.NG, s.HS, s.T, d);
    /* the reference's rows of the block */
    double *ro = kt_doubles(nout), *ros = kt_doubles(nout), *rl = kt_doubles(nlse);
    double *rd = kt_doubles(nsub), *rds = kt_doubles(nsub);
    for (int b = 0; b < s.B; b++) {
        size_t at = ((size_t)b * s.T + q0) * C;
        memcpy(ro + (size_t)b * nq * C, r.out + at, (size_t)nq * C * sizeof(double));
        memcpy(ros + (size_t)b * nq * C, r.out_s + at, (size_t)nq * C * sizeof(double));
        for (int h = 0; h < s.NH; h++)
            memcpy(rl + ((size_t)b * s.NH + h) * nq, r.lse + ((size_t)b * s.NH + h) * s.T + q0,
                   (size_t)nq * sizeof(double));
        memcpy(rd + (size_t)b * Tk * row, r.dqkv + (size_t)b * s.T * row,
               (size_t)Tk * row * sizeof(double));
        memcpy(rds + (size_t)b * Tk * row, r.dqkv_s + (size_t)b * s.T * row,
               (size_t)Tk * row * sizeof(double));
    }
    kt_check("attention_rows_dropout_forward out", out, ro, ros, nout, 1e-5, 1e-7);
    kt_check("attention_rows_dropout_forward lse (undropped)", lse, rl, NULL, nlse, 1e-6, 1e-6);
    kt_check("attention_rows_dropout_backward dqkv", dqkv, rd, rds, nsub, 1e-5, 1e-7);
    free(qkv), free(sub), free(fdout), free(out), free(lse), free(dout), free(dqkv);
    free(r.out), free(r.out_s), free(r.lse), free(r.dqkv), free(r.dqkv_s);
    free(ro), free(ros), free(rl), free(rd), free(rds);
}

static void test_dropout(void **state)
{
    (void)state;
    kt_seed(17);
    float slopes[4] = {0.5f, 0.25f, 0.125f, 0.0625f};
    check_dropout((kt_att_shape){2, 20, 4, 2, 8}, 13, 6, 4, slopes, 0.3); /* a middle block */
    check_dropout((kt_att_shape){2, 20, 4, 2, 8}, 20, 15, 0, NULL, 0.2);  /* the last block */
    check_dropout((kt_att_shape){2, 12, 4, 4, 4}, 12, 0, 2, NULL, 0.5);   /* the whole sample */
    check_dropout((kt_att_shape){1, 330, 4, 1, 16}, 300, 100, 8, slopes, 0.1); /* past blocks */
}

/* With p = 0 the dropout ops give attention_rows_*'s bits. */
static void test_dropout_p0(void **state)
{
    (void)state;
    kt_seed(19);
    int Tk = 140, q0 = 70, nq = Tk - q0, nh = 4, ng = 2, hs = 8, row = ng * (nh / ng + 2) * hs;
    size_t nqkv = (size_t)B * Tk * row, nout = (size_t)B * nq * nh * hs;
    float *qkv = kt_floats(nqkv), *dout = kt_floats(nout), *o[2], *l[2], *dq[2];
    kt_fill(qkv, nqkv, -1.5f, 1.5f);
    kt_fill(dout, nout, -1.0f, 1.0f);
    for (int i = 0; i < 2; i++)
        o[i] = kt_floats(nout), l[i] = kt_floats((size_t)B * nh * nq), dq[i] = kt_floats(nqkv);
    tr_dropout none = {.seed = 1, .site = tr_dropout_site(0, TR_DROPOUT_ATTN_PROBS),
                       .threshold = tr_dropout_threshold(0.0), .scale = 1.0f};
    K->attention_rows_forward(NULL, o[0], l[0], qkv, NULL, B, Tk, q0, nh, ng, hs);
    K->attention_rows_backward(NULL, dq[0], dout, qkv, o[0], l[0], NULL, B, Tk, q0, nh, ng, hs);
    K->attention_rows_dropout_forward(NULL, o[1], l[1], qkv, NULL, B, Tk, q0, nh, ng, hs, 512,
                                      none);
    K->attention_rows_dropout_backward(NULL, dq[1], dout, qkv, o[1], l[1], NULL, B, Tk, q0, nh,
                                       ng, hs, 512, none);
    kt_check_same("p = 0: out", o[0], o[1], nout);
    kt_check_same("p = 0: lse", l[0], l[1], (size_t)B * nh * nq);
    kt_check_same("p = 0: dqkv", dq[0], dq[1], nqkv);
    for (int i = 0; i < 2; i++)
        free(o[i]), free(l[i]), free(dq[i]);
    free(qkv), free(dout);
}

int main(void)
{
    K = tr_kernels_cpu();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward_backward),
        cmocka_unit_test(test_finite_differences),
        cmocka_unit_test(test_long_blocks),
        cmocka_unit_test(test_dropout),
        cmocka_unit_test(test_dropout_p0),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
