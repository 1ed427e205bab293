/* train/: the learning-rate schedule on hand-computed points; WSD and inverse-square-root
 * against Megatron-LM's OptimizerParamScheduler.get_lr formulas (written out below). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>

#include "train/train.h"

static void test_warmup_then_cosine(void **state)
{
    (void)state;
    tr_training_config t = {.lr = 1e-3, .min_lr = 1e-4, .lr_warmup_iters = 10,
                            .lr_decay_iters = 110, .lr_decay_style = "cosine"};
    assert_true(fabs(tr_lr_at(&t, 1) - 1e-4) < 1e-12);  /* 1/10 of lr */
    assert_true(fabs(tr_lr_at(&t, 10) - 1e-3) < 1e-12); /* end of warm-up */
    /* half-way through decay: min + 0.5 * (lr - min) */
    assert_true(fabs(tr_lr_at(&t, 60) - 5.5e-4) < 1e-12);
    /* a quarter: min + (lr-min) * 0.5 * (1 + cos(pi/4)) */
    double q = 1e-4 + 9e-4 * 0.5 * (1 + cos(M_PI / 4));
    assert_true(fabs(tr_lr_at(&t, 35) - q) < 1e-12);
    assert_true(fabs(tr_lr_at(&t, 110) - 1e-4) < 1e-12);
    assert_true(fabs(tr_lr_at(&t, 500) - 1e-4) < 1e-12);
}

static void test_linear_and_constant(void **state)
{
    (void)state;
    tr_training_config t = {.lr = 2.0, .min_lr = 0.0, .lr_warmup_iters = 0, .lr_decay_iters = 4,
                            .lr_decay_style = "linear"};
    assert_true(fabs(tr_lr_at(&t, 1) - 1.5) < 1e-12);
    assert_true(fabs(tr_lr_at(&t, 2) - 1.0) < 1e-12);
    assert_true(fabs(tr_lr_at(&t, 4) - 0.0) < 1e-12);
    t.lr_decay_style = "constant";
    assert_true(tr_lr_at(&t, 3) == 2.0);
}

/* Megatron's WSD: coeff 1 until decay - wsd, then the anneal's coefficient of a = steps into
 * it / wsd; lr = min + coeff (max - min). */
static void test_wsd(void **state)
{
    (void)state;
    tr_training_config t = {.lr = 1.0, .min_lr = 0.1, .lr_warmup_iters = 4,
                            .lr_decay_iters = 24, .lr_decay_style = "WSD",
                            .lr_wsd_decay_iters = 8, .lr_wsd_decay_style = "exponential"};
    assert_true(fabs(tr_lr_at(&t, 2) - 0.5) < 1e-12);  /* warm-up */
    assert_true(tr_lr_at(&t, 5) == 1.0);                /* stable */
    assert_true(tr_lr_at(&t, 16) == 1.0);               /* the last stable iteration */
    char *styles[] = {"exponential", "linear", "cosine", "minus_sqrt"};
    for (int k = 0; k < 4; k++) {
        t.lr_wsd_decay_style = styles[k];
        for (int it = 17; it <= 24; it++) {
            double a = (it - 16) / 8.0;
            double coeff = k == 0 ? 2.0 * pow(0.5, a) - 1.0
                           : k == 1 ? 1.0 - a
                           : k == 2 ? 0.5 * (cos(M_PI * a) + 1.0)
                                    : 1.0 - sqrt(a);
            assert_true(fabs(tr_lr_at(&t, it) - (0.1 + coeff * 0.9)) < 1e-12);
        }
        assert_true(fabs(tr_lr_at(&t, 24) - 0.1) < 1e-12); /* every style ends at min_lr */
        assert_true(tr_lr_at(&t, 30) == 0.1);
    }
    /* the halfway point of each: exponential 2^0.5 - 1, linear 0.5, cosine 0.5, 1 - 0.5^0.5 */
    t.lr_wsd_decay_style = "exponential";
    assert_true(fabs(tr_lr_at(&t, 20) - (0.1 + (sqrt(2.0) - 1.0) * 0.9)) < 1e-12);
}

/* Megatron's inverse-square-root: max lr * sqrt(max(warmup, 1) / max(it, 1)) and min_lr;
 * min_lr after lr_decay_iters. */
static void test_inverse_square_root(void **state)
{
    (void)state;
    tr_training_config t = {.lr = 0.8, .min_lr = 0.05, .lr_warmup_iters = 4,
                            .lr_decay_iters = 1000, .lr_decay_style = "inverse-square-root"};
    assert_true(fabs(tr_lr_at(&t, 4) - 0.8) < 1e-12);
    assert_true(fabs(tr_lr_at(&t, 16) - 0.4) < 1e-12);   /* 0.8 * sqrt(4 / 16) */
    assert_true(fabs(tr_lr_at(&t, 400) - 0.08) < 1e-12); /* 0.8 * sqrt(4 / 400) */
    assert_true(fabs(tr_lr_at(&t, 999) - 0.8 * sqrt(4.0 / 999)) < 1e-12); /* 0.0506 */
    t.min_lr = 0.06;
    assert_true(fabs(tr_lr_at(&t, 999) - 0.06) < 1e-12); /* the floor */
    t.min_lr = 0.0; /* Megatron: min_lr only past lr_decay_iters (num_steps > decay) */
    assert_true(fabs(tr_lr_at(&t, 1000) - 0.8 * sqrt(4.0 / 1000)) < 1e-12);
    assert_true(tr_lr_at(&t, 1001) == 0.0);
    t.lr_warmup_iters = 0; /* no warm-up: sqrt(1 / it) */
    assert_true(fabs(tr_lr_at(&t, 1) - 0.8) < 1e-12);
    assert_true(fabs(tr_lr_at(&t, 25) - 0.16) < 1e-12);
}

/* Megatron's --lr-warmup-fraction (warm-up = fraction * decay iterations, not rounded) and
 * --lr-warmup-init (the warm-up's first value). */
static void test_warmup_fraction_and_init(void **state)
{
    (void)state;
    tr_training_config t = {.lr = 1.0, .min_lr = 0.0, .lr_warmup_fraction = 0.25,
                            .lr_warmup_init = 0.2, .lr_decay_iters = 10,
                            .lr_decay_style = "linear"};
    /* warm-up 2.5 iterations: 0.2 + 0.8 * i / 2.5 */
    assert_true(fabs(tr_lr_at(&t, 1) - 0.52) < 1e-12);
    assert_true(fabs(tr_lr_at(&t, 2) - 0.84) < 1e-12);
    /* then linear over (2.5, 10]: 1 - (i - 2.5) / 7.5 */
    assert_true(fabs(tr_lr_at(&t, 3) - (1.0 - 0.5 / 7.5)) < 1e-12);
    assert_true(fabs(tr_lr_at(&t, 10) - 0.0) < 1e-12);
    t.lr_warmup_fraction = 0;
    t.lr_warmup_iters = 4; /* iterations, from the init */
    assert_true(fabs(tr_lr_at(&t, 2) - 0.6) < 1e-12);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_warmup_then_cosine),
        cmocka_unit_test(test_linear_and_constant),
        cmocka_unit_test(test_wsd),
        cmocka_unit_test(test_inverse_square_root),
        cmocka_unit_test(test_warmup_fraction_and_init),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
