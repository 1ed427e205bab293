/* train/: the learning-rate schedule on hand-computed points. */
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_warmup_then_cosine),
        cmocka_unit_test(test_linear_and_constant),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
