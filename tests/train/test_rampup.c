/* Sample-based training: Megatron's batch-size ramp-up (RampupBatchsizeNumMicroBatches-
 * Calculator), its iteration count (training.py's update_train_iters) and the LR schedule in
 * samples, on hand-computed points. tests/train/test_rampup.py checks the same against a
 * transcription of Megatron's Python for Bloom-176B's and other configurations. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>

#include "train/train.h"

/* [2, 2, 12] to 8: (8 - 2) / 2 = 3 increments of 12 / 3 = 4 samples each. */
static tr_training_config ramp_2_2_12(void)
{
    return (tr_training_config){.micro_batch_size = 2, .global_batch_size = 8,
                                .train_samples = 40, .rampup_batch_size = {2, 2, 12},
                                .n_rampup_batch_size = 3, .lr = 1.0,
                                .lr_decay_style = "constant"};
}

static void test_batch_at(void **state)
{
    (void)state;
    tr_training_config t = ramp_2_2_12();
    int want[][2] = {{0, 2}, {3, 2}, {4, 4}, {7, 4}, {8, 6}, {11, 6},
                     {12, 8}, /* consumed <= ramp: 2 + 2 int(12 / 4) */
                     {13, 8}, {1000, 8}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        assert_int_equal(tr_training_batch_at(&t, (uint64_t)want[i][0]), want[i][1]);
    /* at consumed == ramp Megatron's float division decides: 9 / (9 / 7) = 6.9999... -> 6
     * increments, not the global batch */
    tr_training_config f = {.global_batch_size = 16, .rampup_batch_size = {2, 2, 9},
                            .n_rampup_batch_size = 3};
    assert_int_equal(tr_training_batch_at(&f, 9), 14);
    assert_int_equal(tr_training_batch_at(&f, 10), 16);
    t.n_rampup_batch_size = 0; /* no ramp-up: the global batch throughout */
    assert_int_equal(tr_training_batch_at(&t, 0), 8);
    /* Bloom-176B: 192 by 16 to 2048 over 9,765,625 samples: 116 increments of 84,186.4 */
    tr_training_config b = {.global_batch_size = 2048, .rampup_batch_size = {192, 16, 9765625},
                            .n_rampup_batch_size = 3};
    assert_int_equal(tr_training_batch_at(&b, 84186), 192);
    assert_int_equal(tr_training_batch_at(&b, 84187), 208);
    assert_int_equal(tr_training_batch_at(&b, 9765624), 2032);
    assert_int_equal(tr_training_batch_at(&b, 9765626), 2048);
}

static void test_iterations(void **state)
{
    (void)state;
    tr_training_config t = ramp_2_2_12();
    /* consumed 0, 2 (batch 2, 2), 4 (4), 8 (6): 4 iterations, 14 consumed > 12; then
     * (40 - 14) // 8 = 3 whole batches */
    assert_int_equal(tr_training_iterations(&t), 7);
    t.train_samples = 14; /* nothing left after the ramp */
    assert_int_equal(tr_training_iterations(&t), 4);
    t.train_samples = 5; /* inside the ramp: (5 - 14) // 8 = -2 (floor) */
    assert_int_equal(tr_training_iterations(&t), 2);
    t.n_rampup_batch_size = 0; /* without a ramp-up: train_samples // global */
    t.train_samples = 39;
    assert_int_equal(tr_training_iterations(&t), 4);
    t.train_samples = 0; /* iteration-based */
    t.train_iters = 11;
    assert_int_equal(tr_training_iterations(&t), 11);
    /* a long plateau (one increment over 2^31 - 1 samples) is counted without a loop per
     * iteration: 2^31 / 1 + ... */
    tr_training_config l = {.global_batch_size = 2, .train_samples = 1,
                            .rampup_batch_size = {1, 1, 2147483647}, .n_rampup_batch_size = 3};
    /* batch 1 while consumed <= 2147483647: 2^31 iterations, then (1 - 2^31) // 2 */
    assert_true(tr_training_iterations(&l) == 2147483648LL - 1073741824LL);
}

/* Megatron's scheduler in samples: warm-up 10, cosine to 100 samples, min_lr after. */
static void test_lr_samples(void **state)
{
    (void)state;
    tr_training_config t = {.lr = 1.0, .min_lr = 0.1, .train_samples = 100,
                            .lr_warmup_samples = 10, .lr_decay_style = "cosine"};
    assert_true(fabs(tr_lr_at_samples(&t, 5) - 0.5) < 1e-12);
    assert_true(fabs(tr_lr_at_samples(&t, 10) - 1.0) < 1e-12);
    assert_true(fabs(tr_lr_at_samples(&t, 55) - 0.55) < 1e-12); /* half-way: cos(pi/2) = 0 */
    assert_true(tr_lr_at_samples(&t, 100) == 0.1);
    assert_true(tr_lr_at_samples(&t, 101) == 0.1);
    t.lr_decay_samples = 190; /* instead of train_samples: half-way at 100 */
    assert_true(fabs(tr_lr_at_samples(&t, 100) - 0.55) < 1e-12);
    t.lr_warmup_samples = 0;
    t.lr_warmup_fraction = 0.5; /* of the decay's 190 samples: 95 */
    assert_true(fabs(tr_lr_at_samples(&t, 19) - 0.2) < 1e-12);
    t.lr_warmup_fraction = 0;
    t.lr_decay_style = "WSD"; /* the last 40 of 190 samples annealed linearly */
    t.lr_wsd_decay_style = "linear";
    t.lr_wsd_decay_samples = 40;
    assert_true(tr_lr_at_samples(&t, 150) == 1.0);
    assert_true(fabs(tr_lr_at_samples(&t, 170) - 0.55) < 1e-12);
    /* tr_lr_of_step: samples when train_samples is set, else the iteration */
    assert_true(fabs(tr_lr_of_step(&t, 1, 170) - 0.55) < 1e-12);
    tr_training_config it = {.lr = 2.0, .lr_decay_iters = 4, .train_iters = 4,
                             .lr_decay_style = "linear"};
    assert_true(fabs(tr_lr_of_step(&it, 1, 999) - 1.5) < 1e-12);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch_at),
        cmocka_unit_test(test_iterations),
        cmocka_unit_test(test_lr_samples),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
