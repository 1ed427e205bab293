/* pp/ checker: broken schedules are caught, each with its message — deadlock under
 * rendezvous, unmatched or mismatched sends, missing inputs, double or missing compute,
 * wrong peers, and inconsistent stage lists. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <string.h>

#include "core/core.h"
#include "pp/pp.h"

static tr_pp_schedule st[8];

static void expect_error(int rc, int code, const char *text)
{
    assert_int_equal(rc, code);
    if (!strstr(tr_errmsg(), text))
        fail_msg("message '%s' lacks '%s'", tr_errmsg(), text);
}

static int find(const tr_pp_schedule *s, tr_pp_op_kind kind, int mb, int chunk)
{
    for (int i = 0; i < s->n_ops; i++)
        if (s->ops[i].kind == kind && s->ops[i].mb == mb && s->ops[i].chunk == chunk)
            return i;
    fail_msg("op not found");
    return -1;
}

static void swap_ops(tr_pp_schedule *s, int i, int j)
{
    tr_pp_op t = s->ops[i];
    s->ops[i] = s->ops[j];
    s->ops[j] = t;
}

static void remove_op(tr_pp_schedule *s, int i)
{
    memmove(&s->ops[i], &s->ops[i + 1], sizeof(tr_pp_op) * (size_t)(s->n_ops - i - 1));
    s->n_ops--;
}

static void build(int P, int M, tr_pp_kind kind, int v)
{
    assert_int_equal(tr_pp_schedule_build_all(P, M, kind, v, st), TR_OK);
    for (int m = 0; m < 3; m++)
        assert_int_equal(tr_pp_check(st, P, (tr_pp_comm_model)m), TR_OK);
}

/* Stage 1 of 2 sends its gradient before receiving the next activation, while stage 0 sends
 * the activation before receiving the gradient: fine when the two are one batch, a deadlock
 * when each op blocks alone. */
static void test_rendezvous_deadlock(void **state)
{
    (void)state;
    build(2, 4, TR_PP_1F1B, 1);
    int i = find(&st[1], TR_PP_OP_RECV_FORWARD, 1, 0);
    assert_int_equal(st[1].ops[i + 1].kind, TR_PP_OP_SEND_BACKWARD);
    assert_int_equal(st[1].ops[i].with_next, 1);
    swap_ops(&st[1], i, i + 1);
    st[1].ops[i].with_next = 1;
    st[1].ops[i + 1].with_next = 0;
    assert_int_equal(tr_pp_check(st, 2, TR_PP_COMM_BATCHED), TR_OK);
    assert_int_equal(tr_pp_check(st, 2, TR_PP_COMM_BUFFERED), TR_OK);
    expect_error(tr_pp_check(st, 2, TR_PP_COMM_RENDEZVOUS), TR_ERR_INVALID,
                 "pipeline schedule 1f1b (P=2, M=4, v=1) deadlocks under rendezvous "
                 "communication; waiting: stage 0 op 3: send_forward(mb 1, chunk 0) to stage 1; "
                 "stage 1 op 3: send_backward(mb 0, chunk 0) to stage 0");
    /* split the batches too: now every model deadlocks except buffered */
    st[1].ops[i].with_next = 0;
    int j = find(&st[0], TR_PP_OP_SEND_FORWARD, 1, 0);
    st[0].ops[j].with_next = 0;
    expect_error(tr_pp_check(st, 2, TR_PP_COMM_BATCHED), TR_ERR_INVALID,
                 "deadlocks under batched rendezvous communication");
    assert_int_equal(tr_pp_check(st, 2, TR_PP_COMM_BUFFERED), TR_OK);
    tr_pp_schedule_free_all(st, 2);
}

static void test_unmatched_and_mismatched(void **state)
{
    (void)state;
    build(3, 4, TR_PP_GPIPE, 1);
    remove_op(&st[1], find(&st[1], TR_PP_OP_RECV_FORWARD, 3, 0));
    expect_error(tr_pp_check(st, 3, TR_PP_COMM_BATCHED), TR_ERR_INVALID,
                 "stage 0 op 7: send_forward(mb 3, chunk 0) to stage 1: stage 0 sends 4 tensors "
                 "to stage 1, which receives 3; this one has no partner");
    tr_pp_schedule_free_all(st, 3);

    build(3, 4, TR_PP_GPIPE, 1);
    st[2].ops[find(&st[2], TR_PP_OP_RECV_FORWARD, 2, 0)].mb = 1;
    expect_error(tr_pp_check(st, 3, TR_PP_COMM_RENDEZVOUS), TR_ERR_INVALID,
                 "stage 1 op 8: send_forward(mb 2, chunk 0) to stage 2: send #2 from stage 1 to "
                 "stage 2 is matched (FIFO) by stage 2 op 4: recv_forward(mb 1, chunk 0) from "
                 "stage 1, which expects another tensor");
    tr_pp_schedule_free_all(st, 3);

    /* two receives swapped: each tensor exists, but a tagless FIFO transport would swap them */
    build(3, 4, TR_PP_GPIPE, 1);
    int a = find(&st[1], TR_PP_OP_RECV_BACKWARD, 3, 0);
    int b = find(&st[1], TR_PP_OP_RECV_BACKWARD, 2, 0);
    st[1].ops[a].mb = 2;
    st[1].ops[b].mb = 3;
    expect_error(tr_pp_check(st, 3, TR_PP_COMM_BUFFERED), TR_ERR_INVALID, "(FIFO)");
    tr_pp_schedule_free_all(st, 3);
}

static void test_missing_inputs(void **state)
{
    (void)state;
    build(2, 2, TR_PP_1F1B, 1);
    int i = find(&st[1], TR_PP_OP_FORWARD, 0, 0);
    swap_ops(&st[1], i - 1, i); /* F0 before its recv */
    expect_error(tr_pp_check(st, 2, TR_PP_COMM_BATCHED), TR_ERR_INVALID,
                 "stage 1 op 0: forward(mb 0, chunk 0): its input activation has not been "
                 "received");
    tr_pp_schedule_free_all(st, 2);

    build(2, 2, TR_PP_1F1B, 1);
    i = find(&st[0], TR_PP_OP_BACKWARD, 0, 0);
    swap_ops(&st[0], i - 1, i); /* B0 before the gradient arrives */
    expect_error(tr_pp_check(st, 2, TR_PP_COMM_BATCHED), TR_ERR_INVALID,
                 "backward(mb 0, chunk 0): its output gradient has not been received");
    tr_pp_schedule_free_all(st, 2);

    build(2, 2, TR_PP_GPIPE, 1);
    swap_ops(&st[0], 0, 1); /* send F0 before computing it */
    expect_error(tr_pp_check(st, 2, TR_PP_COMM_RENDEZVOUS), TR_ERR_INVALID,
                 "stage 0 op 0: send_forward(mb 0, chunk 0) to stage 1: sends a tensor its "
                 "stage has not computed yet");
    tr_pp_schedule_free_all(st, 2);
}

static void test_compute_errors(void **state)
{
    (void)state;
    build(1, 2, TR_PP_1F1B, 1); /* F0 B0 F1 B1 */
    st[0].ops[2].mb = 0;
    expect_error(tr_pp_check(st, 1, TR_PP_COMM_BATCHED), TR_ERR_INVALID,
                 "stage 0 op 2: forward(mb 0, chunk 0): forward runs twice");
    st[0].ops[2].mb = 1;
    swap_ops(&st[0], 0, 1);
    expect_error(tr_pp_check(st, 1, TR_PP_COMM_BATCHED), TR_ERR_INVALID,
                 "backward before its forward");
    swap_ops(&st[0], 0, 1);
    st[0].ops[3].mb = 0;
    expect_error(tr_pp_check(st, 1, TR_PP_COMM_BATCHED), TR_ERR_INVALID, "backward runs twice");
    st[0].ops[3].mb = 1;
    st[0].n_ops = 3;
    expect_error(tr_pp_check(st, 1, TR_PP_COMM_BATCHED), TR_ERR_INVALID,
                 "pipeline schedule 1f1b (P=1, M=2, v=1): micro-batch 1 never runs its backward "
                 "on stage 0 chunk 0");
    st[0].n_ops = 4;
    st[0].ops[1].mb = 7;
    expect_error(tr_pp_check(st, 1, TR_PP_COMM_BATCHED), TR_ERR_INVALID,
                 "micro-batch, chunk or kind out of range");
    tr_pp_schedule_free_all(st, 1);
}

static void test_bad_fields(void **state)
{
    (void)state;
    build(3, 2, TR_PP_1F1B, 1);
    int i = find(&st[1], TR_PP_OP_SEND_FORWARD, 0, 0);
    st[1].ops[i].peer = 0;
    expect_error(tr_pp_check(st, 3, TR_PP_COMM_BATCHED), TR_ERR_INVALID,
                 "send_forward(mb 0, chunk 0) to stage 0: peer is not the stage holding the "
                 "neighbouring virtual stage");
    st[1].ops[i].peer = 2;
    st[1].ops[i].stage = 2;
    expect_error(tr_pp_check(st, 3, TR_PP_COMM_BATCHED), TR_ERR_INVALID,
                 "op records another stage");
    st[1].ops[i].stage = 1;
    i = find(&st[2], TR_PP_OP_BACKWARD, 0, 0);
    st[2].ops[i].peer = 1;
    expect_error(tr_pp_check(st, 3, TR_PP_COMM_BATCHED), TR_ERR_INVALID,
                 "compute op with a peer");
    st[2].ops[i].peer = -1;
    i = find(&st[0], TR_PP_OP_RECV_BACKWARD, 0, 0);
    st[0].ops[i].kind = TR_PP_OP_SEND_BACKWARD;
    expect_error(tr_pp_check(st, 3, TR_PP_COMM_BATCHED), TR_ERR_INVALID,
                 "no virtual stage on that side (embedding or loss end)");
    tr_pp_schedule_free_all(st, 3);

    /* stages of different pipelines */
    assert_int_equal(tr_pp_schedule_build(2, 0, 4, TR_PP_1F1B, 1, &st[0]), TR_OK);
    assert_int_equal(tr_pp_schedule_build(2, 1, 6, TR_PP_1F1B, 1, &st[1]), TR_OK);
    expect_error(tr_pp_check(st, 2, TR_PP_COMM_BATCHED), TR_ERR_INVALID,
                 "stage 1's schedule is not stage 1 of the same pipeline (P=2, M=4, v=1)");
    expect_error(tr_pp_check(st, 0, TR_PP_COMM_BATCHED), TR_ERR_INVALID, "need 1..256 stages");
    tr_pp_schedule_free_all(st, 2);
    build(2, 4, TR_PP_1F1B, 1);
    expect_error(tr_pp_check(st, 2, (tr_pp_comm_model)9), TR_ERR_INVALID,
                 "unknown communication model 9");
    tr_pp_schedule_free_all(st, 2);
}

/* Interleaved with P = 2: both directions between the two stages share one FIFO; the
 * batch order keeps the sends and receives aligned. */
static void test_interleaved_two_stages(void **state)
{
    (void)state;
    build(2, 8, TR_PP_INTERLEAVED, 3);
    /* a batch reordered on one side only breaks the FIFO pairing */
    int i = 0;
    while (!(st[0].ops[i].kind == TR_PP_OP_SEND_FORWARD && st[0].ops[i].with_next &&
             st[0].ops[i + 1].kind == TR_PP_OP_SEND_BACKWARD))
        i++;
    swap_ops(&st[0], i, i + 1);
    st[0].ops[i].with_next = 1;
    expect_error(tr_pp_check(st, 2, TR_PP_COMM_BATCHED), TR_ERR_INVALID,
                 "which expects another tensor");
    tr_pp_schedule_free_all(st, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rendezvous_deadlock),
        cmocka_unit_test(test_unmatched_and_mismatched),
        cmocka_unit_test(test_missing_inputs),
        cmocka_unit_test(test_compute_errors),
        cmocka_unit_test(test_bad_fields),
        cmocka_unit_test(test_interleaved_two_stages),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
