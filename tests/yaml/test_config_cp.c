/* parallel.context_parallel_size: the default, a valid value, and every combination context
 * parallelism does not support refused naming the keys (yaml/validate_cp.c); dropout, 16-bit
 * precision, fine-tuning data, LoRA and training.device cuda are allowed. */
#include "yaml_test.h"

#define CP(n) TR_T_REQUIRED "parallel:\n  context_parallel_size: " #n "\n" /* line 13, col 3 */

static void test_context_parallel_size(void **state)
{
    (void)state;
    tr_config c;
    assert_int_equal(tr_t_load(TR_T_REQUIRED, NULL, 0, &c), TR_OK);
    assert_int_equal(c.parallel.context_parallel_size, 1);
    tr_config_free(&c);
    assert_int_equal(tr_t_load(CP(4), NULL, 0, &c), TR_OK);
    assert_int_equal(c.parallel.context_parallel_size, 4);
    tr_config_free(&c);
    const char *cp1_moe[] = {"model.num_experts=4"}; /* CP 1: nothing refused */
    assert_int_equal(tr_t_load(CP(1), cp1_moe, 1, &c), TR_OK);
    tr_config_free(&c);
    const char *dropout[] = {"model.hidden_dropout=0.1", "model.attention_dropout=0.1"};
    assert_int_equal(tr_t_load(CP(2), dropout, 2, &c), TR_OK); /* dropout: the same masks */
    tr_config_free(&c);
    static const char *const allowed[] = {"training.precision=bf16", "training.precision=fp16",
                                          "data.dataset_type=sft", "finetune.lora.rank=4",
                                          "training.device=cuda"};
    for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++) {
        const char *ov[] = {allowed[i], "model.hidden_dropout=0.1"};
        assert_int_equal(tr_t_load(CP(2), ov, 2, &c), TR_OK);
        tr_config_free(&c);
    }
    tr_t_expect(CP(0), NULL, 0, "t.yaml:13:26: ", "allowed: an integer from 1 to 65536");
    tr_t_expect(CP(3), NULL, 0, "t.yaml:5:3: ",
                "model.seq_length = 32 is not divisible by 2 x parallel.context_parallel_size = 6");
    static const struct {
        const char *set, *set2, *what;
    } refused[] = {
        {"model.num_experts=4", NULL,
         "with mixture of experts is not supported (model.num_experts)"},
        {"data.dataset_type=sft", "model.attention_dropout=0.1",
         "with fine-tuning data (data.dataset_type sft) and attention dropout is not supported "
         "(model.attention_dropout); allowed: context_parallel_size 1"},
    };
    /* sequence parallelism over each rank's T / CP tokens: 2 x 32/4 = 16 rows over TP 32 */
    const char *sp[] = {"parallel.sequence_parallel=true", "parallel.tensor_model_parallel_size=32",
                        "model.num_attention_heads=32"};
    tr_t_expect(CP(4), sp, 3, "--set parallel.sequence_parallel",
                "micro_batch_size x seq_length / context_parallel_size = 2 x 8 token rows over "
                "tensor_model_parallel_size 32");
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        const char *ov[] = {refused[i].set, refused[i].set2};
        tr_t_expect(CP(2), ov, refused[i].set2 ? 2 : 1,
                    "t.yaml:13:3: parallel.context_parallel_size = 2 ",
                    refused[i].what);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_context_parallel_size)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
