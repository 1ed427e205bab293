/* kernels/: AdamW against the formula in kernels.h (double precision), and sumsq. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kt.h"

static void check_adamw(size_t n, float lr, float wd, float gs)
{
    const float b1 = 0.9f, b2 = 0.95f, eps = 1e-8f;
    float *p = kt_floats(n), *g = kt_floats(n), *m = kt_floats(n), *v = kt_floats(n);
    double *rp = kt_doubles(n), *rm = kt_doubles(n), *rv = kt_doubles(n);
    /* running sums of magnitudes: m may cancel when gradients change sign */
    double *sp = kt_doubles(n), *sm = kt_doubles(n);
    kt_fill(p, n, -1, 1);
    for (size_t i = 0; i < n; i++)
        sp[i] = fabs(rp[i] = p[i]); /* m, v start at zero like the optimizer state */
    for (int step = 1; step <= 3; step++) {
        kt_fill(g, n, -2, 2);
        if (n > 3)
            g[1] = 0.0f; /* a zero gradient: the update is decay only (v may be 0 at step 1) */
        for (size_t i = 0; i < n; i++) {
            double gi = (double)g[i] * gs;
            rm[i] = b1 * rm[i] + (1 - (double)b1) * gi;
            sm[i] = b1 * sm[i] + (1 - (double)b1) * fabs(gi);
            rv[i] = b2 * rv[i] + (1 - (double)b2) * gi * gi;
            double mh = rm[i] / (1 - pow(b1, step)), vh = rv[i] / (1 - pow(b2, step));
            sp[i] += lr * (sm[i] / (1 - pow(b1, step)) / (sqrt(vh) + eps) + wd * fabs(rp[i]));
            rp[i] -= lr * (mh / (sqrt(vh) + eps) + wd * rp[i]);
        }
        K->adamw(NULL, p, g, m, v, n, lr, b1, b2, eps, wd, gs, step);
        kt_check("adamw m", m, rm, sm, n, 1e-5, 0);
        kt_check("adamw v", v, rv, NULL, n, 1e-5, 0);
        kt_check("adamw params", p, rp, sp, n, 1e-5, 0);
    }
    free(p), free(g), free(m), free(v), free(rp), free(rm), free(rv), free(sp), free(sm);
}

static void test_adamw(void **state)
{
    (void)state;
    check_adamw(37, 0.05f, 0.1f, 0.5f);
    check_adamw(1, 0.05f, 0.0f, 1.0f);
    check_adamw(0, 0.05f, 0.1f, 1.0f);
    check_adamw(200003, 0.01f, 0.1f, 0.25f); /* pieces over threads, vector tails */
}

static void test_sumsq(void **state)
{
    (void)state;
    size_t sizes[] = {0, 1, 13, 16384, 16385, 1000003};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        size_t n = sizes[s];
        float *x = kt_floats(n);
        kt_fill(x, n, -3, 3);
        double ref = 0;
        for (size_t i = 0; i < n; i++)
            ref += (double)x[i] * x[i];
        double got = K->sumsq(NULL, x, n);
        assert_true(fabs(got - ref) <= 1e-12 * ref);
        assert_true(got == K->sumsq(NULL, x, n)); /* run to run */
        free(x);
    }
}

int main(void)
{
    K = tr_kernels_cpu();
    kt_seed(53);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_adamw),
        cmocka_unit_test(test_sumsq),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
