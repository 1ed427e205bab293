/* Shared helpers of the plan/ tests: configs as text, load-or-fail, relative comparisons. */
#ifndef TR_PLAN_TEST_H
#define TR_PLAN_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "plan/plan.h"
#include "yaml/config.h"

#ifndef TR_SOURCE_ROOT
#define TR_SOURCE_ROOT "."
#endif
#define TR_BLOOM_YAML TR_SOURCE_ROOT "/configs/bloom-176b.yaml"
#define GIB (1024.0 * 1024.0 * 1024.0)

/* GPT-3 175B as Megatron ran it (Narayanan et al. 2021, sec. 5.1): 1024 A100s, TP 8, PP 16,
 * batch 1536; published 140 TFLOP/s per GPU and 34 days for 300B tokens. */
#define TR_GPT3_YAML                                                                           \
    "model: {num_layers: 96, hidden_size: 12288, num_attention_heads: 96, seq_length: 2048,\n" \
    "        vocab_size: 51200}\n"                                                             \
    "parallel: {tensor_model_parallel_size: 8, pipeline_model_parallel_size: 16}\n"            \
    "training: {micro_batch_size: 1, global_batch_size: 1536, train_iters: 95367, lr: 1e-4,\n" \
    "           recompute: full, precision: bf16}\n"                                           \
    "data: {data_path: x}\n"                                                                   \
    "cluster: {preset: a100-80gb, nodes: 128, runtime: megatron-2021}\n"

/* A small model for hand-checked cases: 8 layers, h 1024, 16 heads, s 512, V 32000. */
#define TR_SMALL_YAML                                                                          \
    "model: {num_layers: 8, hidden_size: 1024, num_attention_heads: 16, seq_length: 512,\n"    \
    "        vocab_size: 32000}\n"                                                             \
    "parallel: {tensor_model_parallel_size: 2, pipeline_model_parallel_size: 4}\n"             \
    "training: {micro_batch_size: 4, global_batch_size: 64, train_iters: 100, lr: 1e-4,\n"     \
    "           precision: bf16}\n"                                                            \
    "data: {data_path: x}\n"                                                                   \
    "cluster: {preset: a100-80gb, nodes: 2}\n"

static inline void tr_t_load_text(const char *text, const char *const *ov, int n, tr_config *c)
{
    int rc = tr_config_load_string(text, strlen(text), "t.yaml", ov, n, c);
    if (rc)
        print_error("config: %s\n", tr_errmsg());
    assert_int_equal(rc, TR_OK);
}

static inline void tr_t_load_file(const char *path, const char *const *ov, int n, tr_config *c)
{
    int rc = tr_config_load(path, ov, n, c);
    if (rc)
        print_error("config: %s\n", tr_errmsg());
    assert_int_equal(rc, TR_OK);
}

/* |a - b| <= rel * |b| */
#define assert_close(a, b, rel)                                                                \
    do {                                                                                       \
        double a_ = (a), b_ = (b);                                                             \
        if (!(fabs(a_ - b_) <= (rel) * fabs(b_))) {                                            \
            print_error("%s = %.10g, expected %s = %.10g (rel %g)\n", #a, a_, #b, b_,          \
                        (double)(rel));                                                        \
            fail();                                                                            \
        }                                                                                      \
    } while (0)

/* The error message contains `what`. */
#define assert_msg(what)                                                                       \
    do {                                                                                       \
        if (!strstr(tr_errmsg(), (what))) {                                                    \
            print_error("message '%s' does not contain '%s'\n", tr_errmsg(), (what));          \
            fail();                                                                            \
        }                                                                                      \
    } while (0)

#endif
