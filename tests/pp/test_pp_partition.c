/* pp/ partition: even splits, the remainder on the middle stages, interleaved blocks,
 * explicit lists, and every rejected layout with its message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <string.h>

#include "core/core.h"
#include "pp/pp.h"

static tr_pp_partition part; /* large: keep it off the stack */

static void expect_counts(const tr_pp_partition *p, const int *counts, int n)
{
    int first = 0;
    for (int b = 0; b < n; b++) {
        assert_int_equal(p->count[b], counts[b]);
        assert_int_equal(p->first[b], first);
        first += counts[b];
    }
    assert_int_equal(first, p->num_layers);
}

static void expect_error(int rc, int code, const char *text)
{
    assert_int_equal(rc, code);
    if (!strstr(tr_errmsg(), text))
        fail_msg("message '%s' lacks '%s'", tr_errmsg(), text);
}

static void test_even_split(void **state)
{
    (void)state;
    assert_int_equal(tr_pp_partition_layers(24, 4, 1, NULL, 0, &part), TR_OK);
    expect_counts(&part, (const int[]){6, 6, 6, 6}, 4);
    assert_int_equal(tr_pp_layer_first(&part, 2, 0), 12);
    assert_int_equal(tr_pp_layer_count(&part, 2, 0), 6);
    assert_int_equal(tr_pp_partition_layers(5, 1, 1, NULL, 0, &part), TR_OK);
    expect_counts(&part, (const int[]){5}, 1);
    assert_int_equal(tr_pp_partition_layers(4, 4, 1, NULL, 0, &part), TR_OK);
    expect_counts(&part, (const int[]){1, 1, 1, 1}, 4);
}

static void test_remainder_goes_to_the_middle(void **state)
{
    (void)state;
    assert_int_equal(tr_pp_partition_layers(22, 4, 1, NULL, 0, &part), TR_OK);
    expect_counts(&part, (const int[]){5, 6, 6, 5}, 4);
    assert_int_equal(tr_pp_partition_layers(10, 4, 1, NULL, 0, &part), TR_OK);
    expect_counts(&part, (const int[]){2, 3, 3, 2}, 4);
    /* odd leftover: the centred run leans to the front, the loss stage stays light */
    assert_int_equal(tr_pp_partition_layers(23, 4, 1, NULL, 0, &part), TR_OK);
    expect_counts(&part, (const int[]){6, 6, 6, 5}, 4);
    assert_int_equal(tr_pp_partition_layers(21, 4, 1, NULL, 0, &part), TR_OK);
    expect_counts(&part, (const int[]){5, 6, 5, 5}, 4);
    assert_int_equal(tr_pp_partition_layers(7, 5, 1, NULL, 0, &part), TR_OK);
    expect_counts(&part, (const int[]){1, 2, 2, 1, 1}, 5);
    /* Bloom-176B: 70 layers on 12 stages */
    assert_int_equal(tr_pp_partition_layers(70, 12, 1, NULL, 0, &part), TR_OK);
    expect_counts(&part, (const int[]){5, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 5}, 12);
}

static void test_interleaved_blocks(void **state)
{
    (void)state;
    /* 16 layers, 4 stages x 2 chunks: chunk c of stage r holds block c*4 + r of 2 layers */
    assert_int_equal(tr_pp_partition_layers(16, 4, 2, NULL, 0, &part), TR_OK);
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 2; c++) {
            assert_int_equal(tr_pp_layer_first(&part, r, c), 2 * (c * 4 + r));
            assert_int_equal(tr_pp_layer_count(&part, r, c), 2);
        }
    assert_true(tr_pp_has_embedding(&part, 0, 0));
    assert_false(tr_pp_has_embedding(&part, 0, 1));
    assert_true(tr_pp_has_loss(&part, 3, 1));
    assert_false(tr_pp_has_loss(&part, 3, 0));
    /* 18 layers on 8 blocks: 2 each, the two middle blocks (3 and 4) get 3 */
    assert_int_equal(tr_pp_partition_layers(18, 4, 2, NULL, 0, &part), TR_OK);
    expect_counts(&part, (const int[]){2, 2, 2, 3, 3, 2, 2, 2}, 8);
    assert_int_equal(tr_pp_layer_first(&part, 0, 1), 9); /* block 4 */
}

static void test_explicit_list(void **state)
{
    (void)state;
    const int ok[] = {5, 6, 6, 5};
    assert_int_equal(tr_pp_partition_layers(22, 4, 1, ok, 4, &part), TR_OK);
    expect_counts(&part, ok, 4);
    const int uneven[] = {1, 9, 1};
    assert_int_equal(tr_pp_partition_layers(11, 3, 1, uneven, 3, &part), TR_OK);
    expect_counts(&part, uneven, 3);
    const int chunks[] = {1, 2, 3, 4, 4, 3, 2, 1};
    assert_int_equal(tr_pp_partition_layers(20, 4, 2, chunks, 8, &part), TR_OK);
    assert_int_equal(tr_pp_layer_first(&part, 1, 1), 14);
    assert_int_equal(tr_pp_layer_count(&part, 1, 1), 3);
}

static void test_rejected_layouts(void **state)
{
    (void)state;
    expect_error(tr_pp_partition_layers(3, 4, 1, NULL, 0, &part), TR_ERR_CONFIG,
                 "model.num_layers 3 cannot fill 4 pipeline stages");
    expect_error(tr_pp_partition_layers(7, 4, 2, NULL, 0, &part), TR_ERR_CONFIG,
                 "model.num_layers 7 cannot fill 4 pipeline stages x 2 chunks = 8 virtual");
    expect_error(tr_pp_partition_layers(22, 4, 1, (const int[]){5, 6, 6}, 3, &part),
                 TR_ERR_CONFIG,
                 "parallel.pipeline_layers [5, 6, 6] has 3 entries; it needs one per pipeline "
                 "stage (pipeline_model_parallel_size = 4)");
    expect_error(tr_pp_partition_layers(22, 4, 1, (const int[]){5, 6, 6, 4}, 4, &part),
                 TR_ERR_CONFIG,
                 "parallel.pipeline_layers [5, 6, 6, 4] sums to 21, but model.num_layers is 22");
    expect_error(tr_pp_partition_layers(22, 4, 1, (const int[]){11, 0, 6, 5}, 4, &part),
                 TR_ERR_CONFIG,
                 "parallel.pipeline_layers [11, 0, 6, 5] gives stage 1 0 layers; every stage "
                 "needs at least 1");
    expect_error(tr_pp_partition_layers(22, 4, 1, (const int[]){12, -1, 6, 5}, 4, &part),
                 TR_ERR_CONFIG, "gives stage 1 -1 layers");
    expect_error(tr_pp_partition_layers(8, 2, 2, (const int[]){4, 4}, 2, &part), TR_ERR_CONFIG,
                 "[4, 4] has 2 entries; with interleaving it needs one per virtual stage, "
                 "pipeline_model_parallel_size x virtual_pipeline_model_parallel_size = 2 x 2 = 4");
    expect_error(tr_pp_partition_layers(8, 2, 2, (const int[]){3, 3, 0, 2}, 4, &part),
                 TR_ERR_CONFIG, "gives virtual stage 2 (stage 0, chunk 1) 0 layers");
    expect_error(tr_pp_partition_layers(0, 1, 1, NULL, 0, &part), TR_ERR_CONFIG,
                 "num_layers must be >= 1 (got 0)");
    expect_error(tr_pp_partition_layers(8, 0, 1, NULL, 0, &part), TR_ERR_CONFIG,
                 "pipeline_model_parallel_size must be in 1..256 (got 0)");
    expect_error(tr_pp_partition_layers(8, 300, 1, NULL, 0, &part), TR_ERR_CONFIG,
                 "(got 300)");
    expect_error(tr_pp_partition_layers(8, 2, 0, NULL, 0, &part), TR_ERR_CONFIG,
                 "virtual_pipeline_model_parallel_size must be >= 1");
    expect_error(tr_pp_partition_layers(8, 2, 1, NULL, 2, &part), TR_ERR_INVALID,
                 "2 explicit entries but no list");
    /* a long list is shortened in the message */
    int many[20];
    for (int i = 0; i < 20; i++)
        many[i] = 1;
    expect_error(tr_pp_partition_layers(21, 20, 1, many, 20, &part), TR_ERR_CONFIG,
                 "1, 1, ...] sums to 20, but model.num_layers is 21");
}

static void test_from_config(void **state)
{
    (void)state;
    static tr_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.model.num_layers = 22;
    cfg.parallel.pipeline_model_parallel_size = 4;
    cfg.parallel.virtual_pipeline_model_parallel_size = 1;
    assert_int_equal(tr_pp_partition_from_config(&cfg, &part), TR_OK);
    expect_counts(&part, (const int[]){5, 6, 6, 5}, 4);
    cfg.parallel.num_pipeline_layers = 4;
    memcpy(cfg.parallel.pipeline_layers, (const int[]){4, 7, 7, 4}, 4 * sizeof(int));
    assert_int_equal(tr_pp_partition_from_config(&cfg, &part), TR_OK);
    expect_counts(&part, (const int[]){4, 7, 7, 4}, 4);
    /* v only counts with the interleaved schedule */
    cfg.parallel.num_pipeline_layers = 0;
    cfg.model.num_layers = 16;
    cfg.parallel.virtual_pipeline_model_parallel_size = 2;
    char gpipe[] = "gpipe", inter[] = "interleaved", bad[] = "zigzag";
    cfg.parallel.pipeline_schedule = gpipe;
    assert_int_equal(tr_pp_partition_from_config(&cfg, &part), TR_OK);
    assert_int_equal(part.v, 1);
    cfg.parallel.pipeline_schedule = inter;
    assert_int_equal(tr_pp_partition_from_config(&cfg, &part), TR_OK);
    assert_int_equal(part.v, 2);
    assert_int_equal(tr_pp_layer_first(&part, 0, 1), 8);
    cfg.parallel.pipeline_schedule = bad;
    expect_error(tr_pp_partition_from_config(&cfg, &part), TR_ERR_CONFIG,
                 "unknown pipeline schedule 'zigzag'; allowed: 1f1b (default), gpipe, "
                 "interleaved");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_even_split),
        cmocka_unit_test(test_remainder_goes_to_the_middle),
        cmocka_unit_test(test_interleaved_blocks),
        cmocka_unit_test(test_explicit_list),
        cmocka_unit_test(test_rejected_layouts),
        cmocka_unit_test(test_from_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
