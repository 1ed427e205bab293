/* kernels/: layernorm and GELU, forward and backward, against double references and
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

struct gelu_ctx {
    float *x, *out, *wt;
    size_t n;
};

static double gelu_loss(void *p)
{
    struct gelu_ctx *c = p;
    K->gelu_forward(NULL, c->out, c->x, c->n);
    return kt_dot(c->out, c->wt, c->n);
}

static void check_gelu(size_t n, float lo, float hi, int with_fd)
{
    struct gelu_ctx c = {kt_floats(n), kt_floats(n), kt_floats(n), n};
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
        ref[i] = ref_gelu(c.x[i], &d, &ds);
        dref[i] = d * c.wt[i];
        dscale[i] = ds * fabs(c.wt[i]);
    }
    float *dx = kt_floats(n);
    for (size_t i = 0; i < n; i++)
        dx[i] = NAN; /* overwritten */
    gelu_loss(&c);
    /* fp32 rounding of u grows like |u| for large negative x, where gelu is tiny: atol */
    kt_check("gelu out", c.out, ref, NULL, n, 1e-5, 1e-9);
    K->gelu_backward(NULL, dx, c.x, c.wt, n);
    kt_check("gelu dinp", dx, dref, dscale, n, 1e-5, 1e-9);
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
    check_gelu(91, -4.0f, 4.0f, 1);
    check_gelu(1, -1.0f, 1.0f, 0);
    check_gelu(0, -1.0f, 1.0f, 0);
    check_gelu(200003, -12.0f, 12.0f, 0); /* split over threads, SIMD tails */
}

int main(void)
{
    K = tr_kernels_cpu();
    kt_seed(23);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layernorm),
        cmocka_unit_test(test_gelu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
