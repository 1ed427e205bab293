/* tp/ and model/ with tensor parallelism, one process: configs the TP split cannot serve are
 * rejected with messages naming the values (at load time: heads / hidden size; at stage
 * shape time: sequence-parallel rows), the padded vocabulary, the one-rank context, and the
 * model's own checks of a TP shape and communicator. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <string.h>

#include "core/core.h"
#include "model/gpt.h"
#include "tp/tp.h"

#define REQUIRED                                                                               \
    "model:\n  num_layers: 4\n  hidden_size: 64\n  num_attention_heads: 4\n  seq_length: 30\n" \
    "training:\n  micro_batch_size: 1\n  train_iters: 10\n  lr: 3.0e-4\n"                     \
    "data:\n  data_path: /tmp/corpus\n"

#define TP4 REQUIRED "parallel:\n  tensor_model_parallel_size: 4\n"

static int load_n(const char *text, const char *const *ov, int n, tr_config *c)
{
    return tr_config_load_string(text, strlen(text), "t.yaml", ov, n, c);
}

static int load(const char *text, const char *override, tr_config *c)
{
    const char *ov[1] = {override};
    return load_n(text, ov, override ? 1 : 0, c);
}

static void expect_msg(const char *part)
{
    if (!strstr(tr_errmsg(), part))
        fail_msg("message \"%s\" lacks \"%s\"", tr_errmsg(), part);
}

static void test_load_rejects_indivisible(void **state)
{
    (void)state;
    tr_config c;
    assert_int_equal(load(REQUIRED, "parallel.tensor_model_parallel_size=8", &c), TR_ERR_CONFIG);
    expect_msg("parallel.tensor_model_parallel_size = 8 does not divide "
               "model.num_attention_heads = 4");
    assert_int_equal(load(REQUIRED, "parallel.tensor_model_parallel_size=3", &c), TR_ERR_CONFIG);
    expect_msg("parallel.tensor_model_parallel_size = 3 does not divide model.hidden_size = 64");
}

static void test_sequence_parallel_rows(void **state)
{
    (void)state;
    tr_config c;
    tr_gpt_shape s;
    /* 1 x 30 token rows over 4 ranks */
    assert_int_equal(load(TP4, "parallel.sequence_parallel=true", &c), TR_OK);
    assert_int_equal(tr_gpt_shape_from_config(&c, 0, 4, 1, &s), TR_ERR_CONFIG);
    expect_msg("training.micro_batch_size x model.seq_length = 1 x 30 = 30 token rows");
    expect_msg("parallel.tensor_model_parallel_size = 4");
    tr_config_free(&c);
    /* 2 x 30 = 60 rows split evenly over 4; without SP any row count is fine */
    const char *more[2] = {"parallel.sequence_parallel=true", "training.micro_batch_size=2"};
    assert_int_equal(load_n(TP4, more, 2, &c), TR_OK);
    assert_int_equal(tr_gpt_shape_from_config(&c, 0, 4, 3, &s), TR_OK);
    assert_int_equal(s.tp_size, 4);
    assert_int_equal(s.tp_rank, 3);
    assert_int_equal(s.sequence_parallel, 1);
    tr_config_free(&c);
    assert_int_equal(load(TP4, NULL, &c), TR_OK);
    assert_int_equal(tr_gpt_shape_from_config(&c, 0, 4, 0, &s), TR_OK);
    assert_int_equal(s.sequence_parallel, 0);
    /* a TP rank outside the group */
    assert_int_equal(tr_gpt_shape_from_config(&c, 0, 4, 4, &s), TR_ERR_CONFIG);
    expect_msg("tensor-parallel rank 4 is outside [0, 4)");
    tr_config_free(&c);
    /* a value the model keeps as float past its range (found by fuzzing: 1e300 became inf) */
    const char *big[2] = {"model.layernorm_epsilon=1e300", "model.init_method_std=1e39"};
    const char *named[2] = {"model.layernorm_epsilon is 1e+300", "model.init_method_std is 1e+39"};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(load(TP4, big[i], &c), TR_OK);
        assert_int_equal(tr_gpt_shape_from_config(&c, 0, 4, 0, &s), TR_ERR_CONFIG);
        expect_msg(named[i]);
        expect_msg("past the largest float");
        tr_config_free(&c);
    }
}

static void test_padded_vocabulary(void **state)
{
    (void)state;
    tr_config c;
    tr_gpt_shape s;
    const char *ov[3] = {"model.vocab_size=50257", "model.make_vocab_size_divisible_by=128",
                         "parallel.tensor_model_parallel_size=4"};
    assert_int_equal(load_n(REQUIRED, ov, 3, &c), TR_OK);
    assert_int_equal(tr_gpt_shape_from_config(&c, 0, 4, 0, &s), TR_OK);
    assert_int_equal(s.Vp, 50688); /* a multiple of 128 x 4 */
    assert_int_equal(s.Vp % (128 * 4), 0);
    tr_config_free(&c);
    /* sequence_parallel without TP is just off */
    assert_int_equal(load(REQUIRED, "parallel.sequence_parallel=true", &c), TR_OK);
    assert_int_equal(tr_gpt_shape_from_config(&c, 0, 4, 0, &s), TR_OK);
    assert_int_equal(s.sequence_parallel, 0);
    assert_int_equal(s.tp_size, 1);
    tr_config_free(&c);
}

static void test_one_rank_context(void **state)
{
    (void)state;
    tr_tp tp;
    assert_int_equal(tr_tp_init(&tp, tr_kernels_cpu(), NULL, 1), TR_OK);
    assert_int_equal(tp.size, 1);
    assert_int_equal(tp.rank, 0);
    assert_int_equal(tp.sequence_parallel, 0);
    assert_null(tp.comm);
    int first, count;
    tr_tp_rows(&tp, 7, &first, &count);
    assert_int_equal(first, 0);
    assert_int_equal(count, 7);
    assert_int_equal(tr_tp_check_rows(&tp, 7), TR_OK);
    assert_int_equal(tr_tp_init(&tp, NULL, NULL, 0), TR_ERR_INVALID);
    expect_msg("needs a kernel table");
}

static tr_gpt_shape shape(int tp_size, int tp_rank)
{
    tr_gpt_shape s = {.num_layers = 2, .C = 16, .NH = 4, .T = 6, .max_T = 6, .V = 30, .Vp = 32,
                      .eps = 1e-5f, .init_std = 0.02f, .seed = 1, .layer_first = 0,
                      .layer_count = 2, .is_first = 1, .is_last = 1, .tp_size = tp_size,
                      .tp_rank = tp_rank};
    return s;
}

static void test_create_checks(void **state)
{
    (void)state;
    tr_gpt *g = NULL;
    tr_gpt_shape s = shape(2, 1);
    assert_int_equal(tr_gpt_create(&s, tr_kernels_cpu(), NULL, &g), TR_ERR_INVALID);
    expect_msg("communicator is needed iff tp_size > 1 (tp_size 2, communicator NULL)");
    s = shape(8, 0);
    assert_int_equal(tr_gpt_create(&s, tr_kernels_cpu(), NULL, &g), TR_ERR_INVALID);
    expect_msg("tensor-parallel size 8 must divide the heads (4)");
    s = shape(2, 2);
    assert_int_equal(tr_gpt_create(&s, tr_kernels_cpu(), NULL, &g), TR_ERR_INVALID);
    expect_msg("invalid tensor-parallel rank 2 of size 2");
    /* T = 1 with sequence_parallel set: no SP, whole rows, every tensor replicated */
    s = shape(1, 0);
    s.sequence_parallel = 1;
    assert_int_equal(tr_gpt_create(&s, tr_kernels_cpu(), NULL, &g), TR_OK);
    assert_int_equal(tr_gpt_get_shape(g)->sequence_parallel, 0);
    assert_int_equal(tr_gpt_hidden_numel(g, 3), 3 * 6 * 16);
    for (int i = 0; i < tr_gpt_num_tensors(g); i++) {
        tr_param_tensor *t = tr_gpt_tensor(g, i);
        assert_int_equal(t->split_dim, -1);
        assert_int_equal(t->tp_grad_allreduce, 0);
        assert_int_equal(t->count_in_norm, 1);
        assert_int_equal(t->rows, t->full_rows);
        assert_int_equal(t->cols, t->full_cols);
    }
    tr_gpt_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_rejects_indivisible),
        cmocka_unit_test(test_sequence_parallel_rows),
        cmocka_unit_test(test_padded_vocabulary),
        cmocka_unit_test(test_one_rank_context),
        cmocka_unit_test(test_create_checks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
