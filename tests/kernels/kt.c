/* Helpers shared by the kernels tests (see kt.h). */
#include "kt.h"

#include "core/philox.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const tr_kernels *K;

static uint64_t rng_state = 1;

void kt_seed(uint64_t seed) { rng_state = seed * 0x9E3779B97F4A7C15ull + 1; }

/* splitmix64 */
static uint64_t next_u64(void)
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

float kt_uniform(float lo, float hi)
{
    double u = (double)(next_u64() >> 11) / 9007199254740992.0;
    return (float)(lo + (hi - lo) * u);
}

void kt_fill(float *x, size_t n, float lo, float hi)
{
    for (size_t i = 0; i < n; i++)
        x[i] = kt_uniform(lo, hi);
}

float *kt_floats(size_t n)
{
    float *p = calloc(n ? n : 1, sizeof(float));
    assert_non_null(p);
    return p;
}

double *kt_doubles(size_t n)
{
    double *p = calloc(n ? n : 1, sizeof(double));
    assert_non_null(p);
    return p;
}

/* KT_VERBOSE=1 prints the worst error / tolerance ratio of every check (for calibration). */
static void report(const char *what, double worst)
{
    if (getenv("KT_VERBOSE"))
        print_message("  %-45s worst error / tolerance = %.3g\n", what, worst);
}

void kt_check(const char *what, const float *got, const double *ref, const double *scale,
              size_t n, double rtol, double atol)
{
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double tol = rtol * (fabs(ref[i]) + (scale ? scale[i] : 0.0)) + atol;
        double err = fabs((double)got[i] - ref[i]);
        worst = fmax(worst, err / tol);
        if (!(err <= tol))
            fail_msg("%s[%zu]: got %.9g, reference %.9g (error %.3g > tolerance %.3g)", what, i,
                     (double)got[i], ref[i], err, tol);
    }
    report(what, worst);
}

void kt_check_same(const char *what, const float *a, const float *b, size_t n)
{
    if (memcmp(a, b, n * sizeof(float)) != 0) {
        size_t i = 0;
        while (i < n && memcmp(a + i, b + i, sizeof(float)) == 0)
            i++;
        fail_msg("%s: not bit-identical at [%zu]: %.9g vs %.9g", what, i, (double)a[i],
                 (double)b[i]);
    }
}

void kt_fd_grad(float *x, size_t n, float eps, kt_loss_fn loss, void *ctx, double *grad)
{
    for (size_t i = 0; i < n; i++) {
        float keep = x[i];
        float up = keep + eps, down = keep - eps;
        x[i] = up;
        double lp = loss(ctx);
        x[i] = down;
        double lm = loss(ctx);
        x[i] = keep;
        grad[i] = (lp - lm) / ((double)up - (double)down);
    }
}

void kt_check_fd(const char *what, const float *analytic, const double *fd, size_t n,
                 double rtol, double atol_frac)
{
    double mx = 0.0;
    for (size_t i = 0; i < n; i++)
        mx = fmax(mx, fabs(fd[i]));
    if (n > 0 && mx == 0.0)
        fail_msg("%s: the finite-difference gradient is all zero (a useless check)", what);
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double err = fabs((double)analytic[i] - fd[i]);
        double tol = rtol * fabs(fd[i]) + atol_frac * mx;
        worst = fmax(worst, err / tol);
        if (!(err <= tol))
            fail_msg("%s[%zu]: analytic %.7g vs finite difference %.7g (error %.3g > %.3g)", what,
                     i, (double)analytic[i], fd[i], err, tol);
    }
    report(what, worst);
}

double kt_dot(const float *out, const float *w, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += (double)out[i] * w[i];
    return s;
}

size_t kt_qkv_at(kt_att_shape s, int b, int t, int g, int u, int d)
{
    int R = s.NH / s.NG;
    return ((((size_t)b * s.T + t) * s.NG + g) * (R + 2) + u) * s.HS + d;
}

size_t kt_out_at(kt_att_shape s, int b, int t, int h, int d)
{
    return (((size_t)b * s.T + t) * s.NH + h) * s.HS + d;
}

int32_t *kt_segments(kt_att_shape s, const int *lens, int n)
{
    if (!n)
        return NULL;
    int32_t *seg = malloc(sizeof(int32_t) * (size_t)s.B * s.T);
    assert_non_null(seg);
    for (int b = 0; b < s.B; b++)
        for (int t = 0, id = 0, k = b % n; t < s.T; id++, k = (k + 1) % n)
            for (int i = 0; i < lens[k] && t < s.T; i++)
                seg[b * s.T + t++] = id;
    return seg;
}

/* keep * scale of element (head0 + h, query t, key j) of batch b (core/philox.h), else 0 */
static double keep_scale(const tr_dropout *d, int b, int h, int t, int j, int T)
{
    uint64_t e = ((uint64_t)(d->head0 + h) * (uint64_t)T + (uint64_t)t) * (uint64_t)T + (uint64_t)j;
    return tr_dropout_keep(d->seed, d->first_sample + (uint64_t)b, d->site, e, d->threshold)
               ? (double)d->scale
               : 0.0;
}

void kt_ref_attention(kt_att_shape s, const float *qkv, const float *dout, const float *alibi,
                      const int32_t *seg, const tr_dropout *drop, kt_ref_result *r)
{
    double scale = 1.0 / sqrt((double)s.HS);
    int T = s.T, R = s.NH / s.NG;
    double *p = malloc(sizeof(double) * T), *dp = malloc(sizeof(double) * T),
           *dpa = malloc(sizeof(double) * T), *m = malloc(sizeof(double) * T);
    assert_true(p && dp && dpa && m);
    for (int b = 0; b < s.B; b++)
        for (int h = 0; h < s.NH; h++)
            for (int t = 0; t < T; t++) {
                int g = h / R, qu = h % R, s0 = 0;
                if (seg)
                    for (s0 = t; s0 > 0 && seg[b * T + s0 - 1] == seg[b * T + t];)
                        s0--;
                double mx = -INFINITY;
                for (int j = s0; j <= t; j++) {
                    double dot = 0;
                    for (int d = 0; d < s.HS; d++)
                        dot += (double)qkv[kt_qkv_at(s, b, t, g, qu, d)] *
                               qkv[kt_qkv_at(s, b, j, g, R, d)];
                    p[j] = dot * scale + (alibi ? (double)alibi[h] * (j - t) : 0.0);
                    mx = fmax(mx, p[j]);
                    m[j] = drop ? keep_scale(drop, b, h, t, j, T) : 1.0;
                }
                double sum = 0;
                for (int j = s0; j <= t; j++)
                    sum += exp(p[j] - mx);
                r->lse[((size_t)b * s.NH + h) * T + t] = mx + log(sum);
                for (int j = s0; j <= t; j++)
                    p[j] = exp(p[j] - mx) / sum;
                for (int d = 0; d < s.HS; d++) {
                    double o = 0, oa = 0;
                    for (int j = s0; j <= t; j++) {
                        o += p[j] * m[j] * qkv[kt_qkv_at(s, b, j, g, R + 1, d)];
                        oa += p[j] * m[j] * fabs(qkv[kt_qkv_at(s, b, j, g, R + 1, d)]);
                    }
                    r->out[kt_out_at(s, b, t, h, d)] = o;
                    r->out_s[kt_out_at(s, b, t, h, d)] = oa;
                }
                double dot = 0, dota = 0;
                for (int j = s0; j <= t; j++) {
                    dp[j] = dpa[j] = 0;
                    for (int d = 0; d < s.HS; d++) {
                        double term = (double)dout[kt_out_at(s, b, t, h, d)] *
                                      qkv[kt_qkv_at(s, b, j, g, R + 1, d)];
                        dp[j] += term;
                        dpa[j] += fabs(term);
                    }
                    dp[j] *= m[j], dpa[j] *= m[j];
                    dot += p[j] * dp[j];
                    dota += p[j] * dpa[j];
                }
                for (int j = s0; j <= t; j++) {
                    double ds = p[j] * (dp[j] - dot), dsa = p[j] * (dpa[j] + dota);
                    for (int d = 0; d < s.HS; d++) {
                        size_t iq = kt_qkv_at(s, b, t, g, qu, d), ik = kt_qkv_at(s, b, j, g, R, d),
                               iv = kt_qkv_at(s, b, j, g, R + 1, d);
                        r->dqkv[iq] += scale * ds * qkv[ik];
                        r->dqkv_s[iq] += scale * dsa * fabs(qkv[ik]);
                        r->dqkv[ik] += scale * ds * qkv[iq];
                        r->dqkv_s[ik] += scale * dsa * fabs(qkv[iq]);
                        r->dqkv[iv] += p[j] * m[j] * dout[kt_out_at(s, b, t, h, d)];
                        r->dqkv_s[iv] += p[j] * m[j] * fabs(dout[kt_out_at(s, b, t, h, d)]);
                    }
                }
            }
    free(p), free(dp), free(dpa), free(m);
}

