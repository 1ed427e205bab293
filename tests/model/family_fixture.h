/* The fixture of test_model_family.c: each family's small shape (family_shape says which
 * switches), a stage made from it with every parameter moved off its initial value (norm
 * weights 1, biases 0), the tensor of a name, a batch of tokens and targets, and OPT's ReLU
 * watched on the CPU table: RELU_PLAIN, RELU_RECORD (the sign pattern of every input, in call
 * order, into relu_at) or RELU_REPLAY (the ReLU frozen at the recorded pattern; relu_crossed
 * counts inputs whose sign differs from it); likewise the MoE router's choices. */
#ifndef TR_TEST_FAMILY_FIXTURE_H
#define TR_TEST_FAMILY_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "model/gpt.h"

enum { LLAMA, BLOOM, MIXED, NEOX, FALCON, PHI, GEMMA, LLAMA_LINEAR, LLAMA3, GPTJ, MPT,
       BLOOM_NO_NORM_BIAS, OPT, MIXTRAL, MOE_GPT };

tr_gpt_shape family_shape(int family, int first, int count);

enum { RELU_PLAIN, RELU_RECORD, RELU_REPLAY };
extern int relu_mode;
extern size_t relu_at, relu_crossed;
/* The MoE router's chosen experts watched the same way (router_mode, router_at, router_crossed:
 * choices that differed from the replayed ones) */
extern int router_mode;
extern size_t router_at, router_crossed;

typedef struct {
    tr_gpt *g;
    tr_gpt_acts *a;
    float *params, *grads;
} stage;

void stage_make_shape(stage *st, tr_gpt_shape s, int B);
void stage_make(stage *st, int family, int first, int count, int B);
void stage_free(stage *st);
tr_param_tensor *find(tr_gpt *g, const char *name);
void make_batch(int n, int32_t *tokens, int32_t *targets);
/* Stages [0,1) and [1,3) of `family` (B 2) and the whole model, the same parameters by name,
 * run forward and backward on make_batch's 10 tokens (loss_grad_scale 1/10): the chained
 * stages' loss must equal the whole model's and their gradients sum to its (cmocka asserts).
 * The three stages are left for more checks; the caller frees them. */
void stages_compose(int family, stage *whole, stage *s0, stage *s1);

#endif
