/* kernels/: layernorm, GELU and ReLU, forward and backward, against double references and
 * finite differences. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kt.h"

/* Double-precision layernorm of one set of inputs: out, and the backward given dout.
 * scale_* receive the sums of magnitudes of the terms, for cancellation-aware tolerances. */
static void ref_layernorm(const float *x, const float *w, const float *b, const float *dout,
                          int N, int C, double eps, double *out, double *out_scale, double *dx,
                          double *dx_scale, double *dw, double *dw_scale, double *db,
                          double *db_scale)
{
    for (int n = 0; n < N; n++) {
        const float *xr = x + (size_t)n * C, *dy = dout + (size_t)n * C;
        double mu = 0, var = 0;
        for (int c = 0; c < C; c++)
            mu += xr[c];
        mu /= C;
        for (int c = 0; c < C; c++)
            var += (xr[c] - mu) * (xr[c] - mu);
        var /= C;
        double r = 1.0 / sqrt(var + eps), m1 = 0, m2 = 0;
        for (int c = 0; c < C; c++) {
            double xh = (xr[c] - mu) * r;
            size_t o = (size_t)n * C + c;
            out[o] = xh * w[c] + b[c];
            out_scale[o] = fabs(xh * w[c]) + fabs(b[c]) + r * fabs(mu) * fabs(w[c]);
            m1 += dy[c] * w[c];
            m2 += dy[c] * w[c] * xh;
            dw[c] += dy[c] * xh;
            dw_scale[c] += fabs(dy[c] * xh);
            db[c] += dy[c];
            db_scale[c] += fabs(dy[c]);
        }
        m1 /= C;
        m2 /= C;
        for (int c = 0; c < C; c++) {
            double xh = (xr[c] - mu) * r;
            size_t o = (size_t)n * C + c;
            dx[o] += r * (dy[c] * w[c] - m1 - xh * m2);
            dx_scale[o] = r * (fabs(dy[c] * w[c]) + fabs(m1) + fabs(xh * m2));
        }
    }
}

struct ln_ctx {
    float *x, *w, *b, *out, *mean, *rstd, *wt;
    int N, C;
};

static double ln_loss(void *p)
{
    struct ln_ctx *c = p;
    K->layernorm_forward(NULL, c->out, c->mean, c->rstd, c->x, c->w, c->b, c->N, c->C, 1e-5f);
    return kt_dot(c->out, c->wt, (size_t)c->N * c->C);
}

static void check_layernorm(int N, int C, float shift, int with_fd)
{
    size_t n = (size_t)N * C;
    struct ln_ctx c = {kt_floats(n), kt_floats(C), kt_floats(C), kt_floats(n),
                       kt_floats(N),  kt_floats(N), kt_floats(n), N, C};
    kt_fill(c.x, n, shift - 1.0f, shift + 1.0f);
    kt_fill(c.w, C, 0.5f, 1.5f);
    kt_fill(c.b, C, -0.5f, 0.5f);
    kt_fill(c.wt, n, -1, 1);
    float *dx = kt_floats(n), *dw = kt_floats(C), *db = kt_floats(C);
    kt_fill(dx, n, -1, 1); /* all three accumulate */
    kt_fill(dw, C, -1, 1);
    kt_fill(db, C, -1, 1);
    double *out = kt_doubles(n), *out_s = kt_doubles(n), *rdx = kt_doubles(n),
           *rdx_s = kt_doubles(n), *rdw = kt_doubles(C), *rdw_s = kt_doubles(C),
           *rdb = kt_doubles(C), *rdb_s = kt_doubles(C);
    for (size_t i = 0; i < n; i++)
        rdx[i] = dx[i];
    for (int i = 0; i < C; i++) {
        rdw[i] = dw[i];
        rdb[i] = db[i];
        rdw_s[i] = fabs(dw[i]);
        rdb_s[i] = fabs(db[i]);
    }
    ref_layernorm(c.x, c.w, c.b, c.wt, N, C, 1e-5, out, out_s, rdx, rdx_s, rdw, rdw_s, rdb,
                  rdb_s);
    for (size_t i = 0; i < n; i++)
        rdx_s[i] += fabs(dx[i]);
    ln_loss(&c);
    kt_check("layernorm out", c.out, out, out_s, n, 1e-5, 1e-6);
    K->layernorm_backward(NULL, dx, dw, db, c.wt, c.x, c.w, c.mean, c.rstd, N, C);
    kt_check("layernorm dinp", dx, rdx, rdx_s, n, 1e-5, 1e-6);
    kt_check("layernorm dweight", dw, rdw, rdw_s, C, 1e-5, 1e-6);
    kt_check("layernorm dbias", db, rdb, rdb_s, C, 1e-5, 1e-6);
    if (with_fd) {
        memset(dx, 0, n * sizeof(float));
        memset(dw, 0, C * sizeof(float));
        memset(db, 0, C * sizeof(float));
        K->layernorm_backward(NULL, dx, dw, db, c.wt, c.x, c.w, c.mean, c.rstd, N, C);
        double *fdx = kt_doubles(n), *fdw = kt_doubles(C), *fdb = kt_doubles(C);
        kt_fd_grad(c.x, n, 1e-3f, ln_loss, &c, fdx);
        kt_fd_grad(c.w, C, 1e-3f, ln_loss, &c, fdw);
        kt_fd_grad(c.b, C, 1e-3f, ln_loss, &c, fdb);
        kt_check_fd("layernorm dinp vs finite differences", dx, fdx, n, 1e-2, 2e-3);
        kt_check_fd("layernorm dweight vs finite differences", dw, fdw, C, 1e-2, 2e-3);
        kt_check_fd("layernorm dbias vs finite differences", db, fdb, C, 1e-2, 2e-3);
        free(fdx);
        free(fdw);
        free(fdb);
    }
    free(c.x), free(c.w), free(c.b), free(c.out), free(c.mean), free(c.rstd), free(c.wt);
    free(dx), free(dw), free(db);
    free(out), free(out_s), free(rdx), free(rdx_s), free(rdw), free(rdw_s), free(rdb), free(rdb_s);
}

static void test_layernorm(void **state)
{
    (void)state;
    check_layernorm(7, 13, 0.0f, 1);
    check_layernorm(1, 1, 0.3f, 0);    /* one column: out = bias */
    check_layernorm(3, 5, 100.0f, 0);  /* large mean, small spread */
    check_layernorm(259, 130, 0.5f, 0); /* split over threads, several column blocks */
}

static double ref_gelu(double x, double *deriv, double *deriv_scale)
{
    double k = sqrt(2.0 / M_PI), u = k * (x + 0.044715 * x * x * x);
    double du = k * (1.0 + 3.0 * 0.044715 * x * x), th = tanh(u);
    double a = 0.5 * (1.0 + th), b = 0.5 * x * (1.0 - th * th) * du;
    *deriv = a + b;
    *deriv_scale = fabs(a) + fabs(b);
    return 0.5 * x * (1.0 + th);
}

/* The exact GELU x Phi(x) in double (libm's erfc), its derivative Phi(x) + x phi(x). */
static double ref_gelu_exact(double x, double *deriv, double *deriv_scale)
{
    double phi_cdf = 0.5 * erfc(-x / sqrt(2.0)), density = exp(-0.5 * x * x) / sqrt(2.0 * M_PI);
    *deriv = phi_cdf + x * density;
    *deriv_scale = fabs(phi_cdf) + fabs(x * density);
    return x * phi_cdf;
}

struct gelu_ctx {
    float *x, *out, *wt;
    size_t n;
    int exact; /* the exact GELU's ops (gelu_exact_forward / _backward) */
};

static double gelu_loss(void *p)
{
    struct gelu_ctx *c = p;
    (c->exact ? K->gelu_exact_forward : K->gelu_forward)(NULL, c->out, c->x, c->n);
    return kt_dot(c->out, c->wt, c->n);
}

/* The tanh GELU (exact 0) or the exact one against its double reference (the exact one's
 * erfc is a fitted approximation: within 4e-6 relative, checked here), and its backward
 * against the derivative and finite differences. */
static void check_gelu(size_t n, float lo, float hi, int with_fd, int exact)
{
    struct gelu_ctx c = {kt_floats(n), kt_floats(n), kt_floats(n), n, exact};
    kt_fill(c.x, n, lo, hi);
    if (n > 4) { /* exact values worth pinning */
        c.x[0] = 0.0f;
        c.x[1] = -30.0f;
        c.x[2] = 30.0f;
        c.x[3] = -0.75f;
    }
    kt_fill(c.wt, n, -1, 1);
    double *ref = kt_doubles(n), *dref = kt_doubles(n), *dscale = kt_doubles(n);
    for (size_t i = 0; i < n; i++) {
        double d, ds;
        ref[i] = exact ? ref_gelu_exact(c.x[i], &d, &ds) : ref_gelu(c.x[i], &d, &ds);
        dref[i] = d * c.wt[i];
        dscale[i] = ds * fabs(c.wt[i]);
    }
    float *dx = kt_floats(n);
    for (size_t i = 0; i < n; i++)
        dx[i] = NAN; /* overwritten */
    gelu_loss(&c);
    /* fp32 rounding of u grows like |u| for large negative x, where gelu is tiny: atol */
    double rtol = exact ? 4e-6 : 1e-5;
    kt_check(exact ? "exact gelu out" : "gelu out", c.out, ref, NULL, n, rtol, 1e-9);
    (exact ? K->gelu_exact_backward : K->gelu_backward)(NULL, dx, c.x, c.wt, n);
    kt_check(exact ? "exact gelu dinp" : "gelu dinp", dx, dref, dscale, n, rtol, 1e-9);
    if (with_fd) {
        double *fd = kt_doubles(n);
        kt_fd_grad(c.x, n, 1e-3f, gelu_loss, &c, fd);
        kt_check_fd("gelu dinp vs finite differences", dx, fd, n, 1e-2, 2e-3);
        free(fd);
    }
    free(c.x), free(c.out), free(c.wt), free(ref), free(dref), free(dscale), free(dx);
}

static void test_gelu(void **state)
{
    (void)state;
    for (int exact = 0; exact < 2; exact++) {
        check_gelu(91, -4.0f, 4.0f, 1, exact);
        check_gelu(1, -1.0f, 1.0f, 0, exact);
        check_gelu(0, -1.0f, 1.0f, 0, exact);
        check_gelu(200003, -12.0f, 12.0f, 0, exact); /* split over threads, SIMD tails */
    }
}

/* The exact GELU is not the tanh one: they differ by up to 4.7e-4 (at x = -2.7; so a model
 * importing GPT-NeoX with the wrong one would be off by that much). */
static void test_gelu_exact_is_not_tanh(void **state)
{
    (void)state;
    float x[3] = {-2.7f, 1.0f, 2.5f}, exact[3], tanh_gelu[3];
    K->gelu_exact_forward(NULL, exact, x, 3);
    K->gelu_forward(NULL, tanh_gelu, x, 3);
    assert_true(fabsf(exact[0] - tanh_gelu[0]) > 4e-4f);
    /* gelu(-2.7) = -2.7 Phi(-2.7) = -0.0093540... (double: -2.7 * 0.5 erfc(2.7 / sqrt 2)) */
    double want = -2.7 * 0.5 * erfc(2.7 / sqrt(2.0));
    assert_true(fabs(exact[0] - want) < 1e-8);
    for (int i = 0; i < 3; i++)
        assert_true(fabsf(exact[i] - tanh_gelu[i]) < 5e-4f);
}

static double relu_loss(void *p)
{
    struct gelu_ctx *c = p;
    K->relu_forward(NULL, c->out, c->x, c->n);
    return kt_dot(c->out, c->wt, c->n);
}

/* ReLU: out = max(x, 0) and dinp = dout where x > 0, else 0, exactly (no rounding: equality),
 * over n = 91, 1, 0 and 200003 (threads, SIMD tails); x = 0 pinned (out 0, slope 0, as
 * PyTorch), -0.75, +-30 and a NaN (kept in out, slope 0); an infinite dout where x <= 0 gives
 * 0, not NaN. Finite differences (n = 91): the kink is at 0, so every input is moved at least
 * 0.05 away from it and the step is 1e-3: no central difference straddles the kink. */
static void check_relu(size_t n, float lo, float hi, int with_fd)
{
    struct gelu_ctx c = {kt_floats(n), kt_floats(n), kt_floats(n), n, 0};
    kt_fill(c.x, n, lo, hi);
    kt_fill(c.wt, n, -1, 1);
    if (with_fd)
        for (size_t i = 0; i < n; i++)
            if (fabsf(c.x[i]) < 0.05f)
                c.x[i] = c.x[i] < 0 ? -0.05f : 0.05f;
    if (n > 5 && !with_fd) {
        c.x[0] = 0.0f, c.x[1] = -30.0f, c.x[2] = 30.0f, c.x[3] = -0.75f, c.x[4] = NAN;
        c.wt[1] = INFINITY, c.wt[0] = -INFINITY; /* dout where x <= 0 */
    }
    float *dx = kt_floats(n), *want = kt_floats(n), *dwant = kt_floats(n);
    for (size_t i = 0; i < n; i++) {
        dx[i] = NAN; /* overwritten */
        want[i] = isnan(c.x[i]) ? c.x[i] : c.x[i] > 0 ? c.x[i] : 0.0f;
        dwant[i] = c.x[i] > 0 ? c.wt[i] : 0.0f;
    }
    K->relu_forward(NULL, c.out, c.x, n);
    K->relu_backward(NULL, dx, c.x, c.wt, n);
    kt_check_same("relu out", c.out, want, n);
    kt_check_same("relu dinp", dx, dwant, n);
    if (n > 5 && !with_fd)
        assert_true(c.out[0] == 0.0f && isnan(c.out[4]) && dx[0] == 0.0f && dx[1] == 0.0f &&
                    dx[4] == 0.0f && dx[2] == c.wt[2]);
    if (with_fd) {
        double *fd = kt_doubles(n);
        kt_fd_grad(c.x, n, 1e-3f, relu_loss, &c, fd);
        kt_check_fd("relu dinp vs finite differences", dx, fd, n, 1e-3, 1e-4);
        free(fd);
    }
    free(c.x), free(c.out), free(c.wt), free(dx), free(want), free(dwant);
}

static void test_relu(void **state)
{
    (void)state;
    check_relu(91, -2.0f, 2.0f, 1);
    check_relu(91, -2.0f, 2.0f, 0);
    check_relu(1, -1.0f, 1.0f, 0);
    check_relu(0, -1.0f, 1.0f, 0);
    check_relu(200003, -12.0f, 12.0f, 0);
}

int main(void)
{
    K = tr_kernels_cpu();
    kt_seed(23);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layernorm),
        cmocka_unit_test(test_gelu),
        cmocka_unit_test(test_gelu_exact_is_not_tanh),
        cmocka_unit_test(test_relu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
