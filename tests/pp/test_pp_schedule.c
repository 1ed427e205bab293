/* pp/ schedules: the orders (1F1B acceptance, GPipe, Megatron's interleaving), peak stored
 * activations, the exhaustive checker run (P <= 16, M <= 64, v <= 4) under all three
 * communication models, and the event simulation against the closed-form bubble. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/core.h"
#include "pp/pp.h"

static tr_pp_schedule st[TR_PP_MAX_STAGES];
static tr_pp_sim_result res;

static void expect_error(int rc, int code, const char *text)
{
    assert_int_equal(rc, code);
    if (!strstr(tr_errmsg(), text))
        fail_msg("message '%s' lacks '%s'", tr_errmsg(), text);
}

/* The compute ops of one stage as "F0 F1 B0 ..." */
static const char *compute_string(const tr_pp_schedule *s, char *buf, size_t n)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < s->n_ops && len + 16 < n; i++) {
        if (tr_pp_op_is_comm(s->ops[i].kind))
            continue;
        char label[32];
        tr_pp_op_label(&s->ops[i], s->v, label, sizeof label);
        len += (size_t)snprintf(buf + len, n - len, "%s%s", len ? " " : "", label);
    }
    return buf;
}

static void test_1f1b_acceptance(void **state)
{
    (void)state;
    char buf[4096];
    assert_int_equal(tr_pp_schedule_build_all(4, 8, TR_PP_1F1B, 1, st), TR_OK);
    assert_string_equal(compute_string(&st[0], buf, sizeof buf),
                        "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7");
    assert_string_equal(compute_string(&st[3], buf, sizeof buf),
                        "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7");
    for (int r = 0; r < 4; r++) {
        int nf = 0, nb = 0;
        for (int i = 0; i < st[r].n_ops; i++) {
            nf += st[r].ops[i].kind == TR_PP_OP_FORWARD;
            nb += st[r].ops[i].kind == TR_PP_OP_BACKWARD;
            assert_int_equal(st[r].ops[i].stage, r);
        }
        assert_int_equal(nf, 8);
        assert_int_equal(nb, 8);
        assert_int_equal(st[r].n_warmup, 3 - r);
    }
    /* the comm ops of stage 1, as a runner sees them */
    const tr_pp_op *o = st[1].ops;
    assert_int_equal(o[0].kind, TR_PP_OP_RECV_FORWARD);
    assert_int_equal(o[0].peer, 0);
    assert_int_equal(o[1].kind, TR_PP_OP_FORWARD);
    assert_int_equal(o[2].kind, TR_PP_OP_SEND_FORWARD);
    assert_int_equal(o[2].peer, 2);
    assert_int_equal(o[2].with_next, 0);
    tr_pp_schedule_free_all(st, 4);
}

static void test_gpipe_order(void **state)
{
    (void)state;
    char buf[4096];
    assert_int_equal(tr_pp_schedule_build_all(3, 4, TR_PP_GPIPE, 1, st), TR_OK);
    for (int r = 0; r < 3; r++) {
        assert_string_equal(compute_string(&st[r], buf, sizeof buf), "F0 F1 F2 F3 B3 B2 B1 B0");
        assert_int_equal(tr_pp_peak_activations(&st[r]), 4);
    }
    tr_pp_schedule_free_all(st, 3);
}

/* Megatron's interleaved order for P=4, M=8, v=2 (chunk groups of P micro-batches). */
static void test_interleaved_order(void **state)
{
    (void)state;
    char buf[4096];
    assert_int_equal(tr_pp_schedule_build_all(4, 8, TR_PP_INTERLEAVED, 2, st), TR_OK);
    assert_string_equal(compute_string(&st[0], buf, sizeof buf),
                        "F0.0 F1.0 F2.0 F3.0 F0.1 F1.1 F2.1 F3.1 F4.0 F5.0 "
                        "F6.0 B0.1 F7.0 B1.1 F4.1 B2.1 F5.1 B3.1 F6.1 B0.0 F7.1 B1.0 "
                        "B2.0 B3.0 B4.1 B5.1 B6.1 B7.1 B4.0 B5.0 B6.0 B7.0");
    assert_string_equal(compute_string(&st[3], buf, sizeof buf),
                        "F0.0 F1.0 F2.0 F3.0 "
                        "F0.1 B0.1 F1.1 B1.1 F2.1 B2.1 F3.1 B3.1 F4.0 B0.0 F5.0 B1.0 F6.0 B2.0 "
                        "F7.0 B3.0 F4.1 B4.1 F5.1 B5.1 F6.1 B6.1 F7.1 B7.1 "
                        "B4.0 B5.0 B6.0 B7.0");
    for (int r = 0; r < 4; r++)
        assert_int_equal(st[r].n_warmup, (4 - r - 1) * 2 + (2 - 1) * 4);
    tr_pp_schedule_free_all(st, 4);
    /* M == P: all warm-up, as Megatron */
    assert_int_equal(tr_pp_schedule_build_all(4, 4, TR_PP_INTERLEAVED, 3, st), TR_OK);
    for (int r = 0; r < 4; r++)
        assert_int_equal(st[r].n_warmup, 12);
    tr_pp_schedule_free_all(st, 4);
    /* the cap at M*v is reached only through M == P (M % P == 0 otherwise leaves room) */
    assert_int_equal(tr_pp_schedule_build_all(8, 16, TR_PP_INTERLEAVED, 2, st), TR_OK);
    assert_int_equal(st[0].n_warmup, 7 * 2 + 8);
    tr_pp_schedule_free_all(st, 8);
}

/* Peak stored activations: 1F1B min(P-r, M), flat in M; GPipe M. */
static void test_peak_activations(void **state)
{
    (void)state;
    const int P = 4;
    for (int M = 1; M <= 64; M++) {
        assert_int_equal(tr_pp_schedule_build_all(P, M, TR_PP_1F1B, 1, st), TR_OK);
        for (int r = 0; r < P; r++)
            assert_int_equal(tr_pp_peak_activations(&st[r]), P - r < M ? P - r : M);
        tr_pp_schedule_free_all(st, P);
    }
    int peak4[P], peak32[P];
    for (int k = 0; k < 2; k++) {
        tr_pp_kind kind = k ? TR_PP_GPIPE : TR_PP_1F1B;
        assert_int_equal(tr_pp_schedule_build_all(P, 4, kind, 1, st), TR_OK);
        assert_int_equal(tr_pp_simulate(st, P, TR_PP_COMM_BATCHED, NULL, &res, NULL, NULL), TR_OK);
        memcpy(peak4, res.peak_activations, sizeof peak4);
        tr_pp_schedule_free_all(st, P);
        assert_int_equal(tr_pp_schedule_build_all(P, 32, kind, 1, st), TR_OK);
        assert_int_equal(tr_pp_simulate(st, P, TR_PP_COMM_BATCHED, NULL, &res, NULL, NULL), TR_OK);
        memcpy(peak32, res.peak_activations, sizeof peak32);
        tr_pp_schedule_free_all(st, P);
        for (int r = 0; r < P; r++) {
            if (kind == TR_PP_1F1B) {
                assert_int_equal(peak4[r], P - r);
                assert_int_equal(peak32[r], P - r);
            } else {
                assert_int_equal(peak4[r], 4);
                assert_int_equal(peak32[r], 32);
            }
        }
    }
    /* interleaved: warm-up + 1 chunk activations, the same for M = 8 and M = 64 */
    for (int M = 8; M <= 64; M *= 8) {
        assert_int_equal(tr_pp_schedule_build_all(4, M, TR_PP_INTERLEAVED, 2, st), TR_OK);
        for (int r = 0; r < 4; r++)
            assert_int_equal(tr_pp_peak_activations(&st[r]), (4 - r - 1) * 2 + 4 + 1);
        tr_pp_schedule_free_all(st, 4);
    }
}

static int near(double a, double b) { return fabs(a - b) <= 1e-9 * (1 + fabs(b)); }

/* Every schedule for P <= 16, M <= 64 (v <= 4 interleaved) under every communication
 * model, with the simulated bubble equal to the closed form for tb/tf = 2, 3, 1/2 and 1.
 * Under the address sanitizer P <= 8, M <= 32 (the same code paths: M below, at and above
 * P, v <= 4; 2 s instead of 20 s): the release build checks every schedule. */
#if defined(__SANITIZE_ADDRESS__)
enum { EXHAUSTIVE_P = 8, EXHAUSTIVE_M = 32, EXHAUSTIVE_CASES = 1700 };
#else
enum { EXHAUSTIVE_P = 16, EXHAUSTIVE_M = 64, EXHAUSTIVE_CASES = 7000 };
#endif
static void test_exhaustive_check(void **state)
{
    (void)state;
    /* CPU time, not wall time: a wall-clock bound failed on a busy 2-core machine */
    clock_t t0 = clock();
    long cases = 0, ops = 0;
    const tr_pp_kind kinds[] = {TR_PP_1F1B, TR_PP_GPIPE, TR_PP_INTERLEAVED};
    for (int k = 0; k < 3; k++)
        for (int P = 1; P <= EXHAUSTIVE_P; P++)
            for (int M = 1; M <= EXHAUSTIVE_M; M++)
                for (int v = 1; v <= 4; v++) {
                    if (tr_pp_validate(P, M, kinds[k], v) != TR_OK)
                        continue;
                    assert_int_equal(tr_pp_schedule_build_all(P, M, kinds[k], v, st), TR_OK);
                    for (int m = 0; m < 3; m++) {
                        int rc = tr_pp_simulate(st, P, (tr_pp_comm_model)m, NULL, &res, NULL,
                                                NULL);
                        if (rc)
                            fail_msg("%s", tr_errmsg());
                        double theory = tr_pp_bubble_theory(P, M, kinds[k], v);
                        if (!near(res.bubble_fraction, theory))
                            fail_msg("%s P=%d M=%d v=%d model %d: bubble %.9f, theory %.9f",
                                     tr_pp_kind_name(kinds[k]), P, M, v, m, res.bubble_fraction,
                                     theory);
                        cases++;
                    }
                    /* any tb/tf ratio: makespan (v*M + P - 1) * (tf + tb) */
                    const double ratios[] = {3.0, 0.5, 1.0}; /* ends on tb = tf */
                    for (int q = 0; q < 3; q++) {
                        tr_pp_costs c = {.tf = 1, .tb = ratios[q]};
                        assert_int_equal(
                            tr_pp_simulate(st, P, TR_PP_COMM_BATCHED, &c, &res, NULL, NULL), TR_OK);
                        assert_true(
                            near(res.bubble_fraction, tr_pp_bubble_theory(P, M, kinds[k], v)));
                        assert_true(near(res.makespan, (v * M + P - 1) * (1 + ratios[q])));
                    }
                    for (int r = 0; r < P; r++) {
                        int peak = tr_pp_peak_activations(&st[r]);
                        assert_int_equal(peak, res.peak_activations[r]);
                        if (kinds[k] == TR_PP_1F1B)
                            assert_int_equal(peak, P - r < M ? P - r : M);
                        else if (kinds[k] == TR_PP_GPIPE)
                            assert_int_equal(peak, M);
                        else
                            assert_int_equal(peak, M == P ? M * v : st[r].n_warmup + 1);
                    }
                    ops += res.n_ops;
                    tr_pp_schedule_free_all(st, P);
                }
    double dt = (double)(clock() - t0) / CLOCKS_PER_SEC;
    printf("checked %ld (schedule, model) cases, %ld ops per model pass, in %.2f s of CPU\n",
           cases, ops, dt);
    assert_true(cases > EXHAUSTIVE_CASES);
#if !defined(__SANITIZE_ADDRESS__)
    assert_true(dt < 10.0); /* ~0.5 s; sanitizer builds run several times slower */
#endif
}

/* Communication cost and uneven stages: the simulation still runs; the bubble only grows;
 * buffered sends are never slower than rendezvous. */
static void test_simulation_costs(void **state)
{
    (void)state;
    assert_int_equal(tr_pp_schedule_build_all(4, 8, TR_PP_1F1B, 1, st), TR_OK);
    tr_pp_costs c = {.tf = 1, .tb = 2, .p2p = 0};
    assert_int_equal(tr_pp_simulate(st, 4, TR_PP_COMM_BATCHED, &c, &res, NULL, NULL), TR_OK);
    assert_true(near(res.makespan, 33));
    assert_true(near(res.busy[0], 24));
    double base = res.makespan;
    c.p2p = 0.25;
    double spans[3];
    for (int m = 0; m < 3; m++) {
        assert_int_equal(tr_pp_simulate(st, 4, (tr_pp_comm_model)m, &c, &res, NULL, NULL), TR_OK);
        spans[m] = res.makespan;
        assert_true(res.makespan > base);
        assert_true(res.bubble_fraction > 3.0 / 11);
    }
    assert_true(spans[TR_PP_COMM_BUFFERED] <= spans[TR_PP_COMM_BATCHED] + 1e-12);
    assert_true(spans[TR_PP_COMM_BATCHED] <= spans[TR_PP_COMM_RENDEZVOUS] + 1e-12);
    /* the fill and drain cross 2(P-1) links once each way */
    assert_true(spans[TR_PP_COMM_BUFFERED] >= base + 2 * 3 * 0.25 - 1e-12);

    /* one slow stage (stage 2 twice as slow) sets the pace */
    const double tf[4] = {1, 1, 2, 1}, tb[4] = {2, 2, 4, 2};
    tr_pp_costs slow = {.tf = 1, .tb = 2, .tf_stage = tf, .tb_stage = tb};
    assert_int_equal(tr_pp_simulate(st, 4, TR_PP_COMM_BATCHED, &slow, &res, NULL, NULL), TR_OK);
    assert_true(res.makespan >= 8 * 6);
    assert_true(near(res.busy[2], 48));
    assert_true(res.bubble_fraction > 3.0 / 11);

    /* per-op times: a stage's ops do not overlap and follow list order */
    double *start[4], *end[4];
    for (int r = 0; r < 4; r++) {
        start[r] = tr_alloc(sizeof(double) * (size_t)st[r].n_ops, "t");
        end[r] = tr_alloc(sizeof(double) * (size_t)st[r].n_ops, "t");
    }
    assert_int_equal(tr_pp_simulate(st, 4, TR_PP_COMM_BATCHED, NULL, &res, start, end), TR_OK);
    for (int r = 0; r < 4; r++) {
        double t = 0;
        for (int i = 0; i < st[r].n_ops; i++) {
            assert_true(start[r][i] >= t - 1e-12);
            assert_true(end[r][i] >= start[r][i]);
            if (!tr_pp_op_is_comm(st[r].ops[i].kind))
                t = end[r][i];
        }
        tr_free(start[r]);
        tr_free(end[r]);
    }
    /* stage 3 runs F0 at slot 3 (after the fill) and B0 right after it */
    assert_int_equal(st[3].ops[1].kind, TR_PP_OP_FORWARD);
    tr_pp_schedule_free_all(st, 4);

    /* interleaving with v chunks divides the bubble by about v at equal total work */
    assert_int_equal(tr_pp_schedule_build_all(4, 8, TR_PP_INTERLEAVED, 4, st), TR_OK);
    tr_pp_costs quarter = {.tf = 0.25, .tb = 0.5};
    assert_int_equal(tr_pp_simulate(st, 4, TR_PP_COMM_BATCHED, &quarter, &res, NULL, NULL),
                     TR_OK);
    assert_true(near(res.makespan, 8 * 3 + 3 * 3 / 4.0));
    assert_true(near(res.bubble_fraction, 3.0 / (4 * 8 + 3)));
    tr_pp_schedule_free_all(st, 4);

    /* the planner's one-call form */
    assert_int_equal(tr_pp_simulate_kind(8, 16, TR_PP_INTERLEAVED, 2, NULL, &res), TR_OK);
    assert_true(near(res.bubble_fraction, 7.0 / (2 * 16 + 7)));
    assert_true(near(res.makespan, (2 * 16 + 7) * 3));
    expect_error(tr_pp_simulate_kind(8, 12, TR_PP_INTERLEAVED, 2, NULL, &res), TR_ERR_CONFIG,
                 "multiple of the pipeline size (8)");
}

static void test_validation_messages(void **state)
{
    (void)state;
    expect_error(tr_pp_validate(0, 4, TR_PP_1F1B, 1), TR_ERR_CONFIG,
                 "pipeline size must be in 1..256 (got 0)");
    expect_error(tr_pp_validate(4, 0, TR_PP_1F1B, 1), TR_ERR_CONFIG,
                 "number of micro-batches must be >= 1 (got 0)");
    expect_error(tr_pp_validate(4, 8, TR_PP_GPIPE, 2), TR_ERR_CONFIG,
                 "2 virtual pipeline chunks need the interleaved schedule (schedule is gpipe");
    expect_error(tr_pp_validate(4, 8, TR_PP_INTERLEAVED, 1), TR_ERR_CONFIG,
                 "the interleaved schedule needs >= 2 virtual chunks per stage "
                 "(virtual_pipeline_model_parallel_size, --vpp; got 1)");
    expect_error(tr_pp_validate(4, 6, TR_PP_INTERLEAVED, 2), TR_ERR_CONFIG,
                 "the interleaved schedule needs the number of micro-batches (6) to be a "
                 "multiple of the pipeline size (4)");
    expect_error(tr_pp_validate(1, 4, TR_PP_INTERLEAVED, 2), TR_ERR_CONFIG,
                 "the interleaved schedule needs pipeline size >= 2 (got 1)");
    expect_error(tr_pp_validate(256, 256, TR_PP_INTERLEAVED, 8), TR_ERR_CONFIG,
                 "pipeline size x virtual chunks = 256 x 8 is above the limit 1024");
    expect_error(tr_pp_validate(2, 1 << 25, TR_PP_1F1B, 1), TR_ERR_CONFIG, "above the limit");
    expect_error(tr_pp_validate(2, 4, (tr_pp_kind)7, 1), TR_ERR_CONFIG,
                 "unknown pipeline schedule kind 7");
    tr_pp_kind kind;
    expect_error(tr_pp_kind_parse("zero-bubble", &kind), TR_ERR_CONFIG,
                 "unknown pipeline schedule 'zero-bubble'; allowed: 1f1b (default), gpipe, "
                 "interleaved");
    assert_int_equal(tr_pp_kind_parse("gpipe", &kind), TR_OK);
    assert_int_equal(kind, TR_PP_GPIPE);
    assert_string_equal(tr_pp_kind_name(TR_PP_INTERLEAVED), "interleaved");
    expect_error(tr_pp_schedule_build(4, 4, 8, TR_PP_1F1B, 1, &st[0]), TR_ERR_CONFIG,
                 "pipeline stage 4 is outside 0..3");
    expect_error(tr_pp_schedule_build(4, 0, 0, TR_PP_1F1B, 1, &st[0]), TR_ERR_CONFIG,
                 "(got 0)");
    assert_null(st[0].ops);
    expect_error(tr_pp_schedule_build_all(4, 6, TR_PP_INTERLEAVED, 2, st), TR_ERR_CONFIG,
                 "multiple of the pipeline size");
}

static void test_labels_and_theory(void **state)
{
    (void)state;
    char b[64];
    tr_pp_op f = {.kind = TR_PP_OP_FORWARD, .mb = 12, .chunk = 1, .peer = -1};
    tr_pp_op_label(&f, 1, b, sizeof b);
    assert_string_equal(b, "F12");
    tr_pp_op_label(&f, 2, b, sizeof b);
    assert_string_equal(b, "F12.1");
    tr_pp_op s = {.kind = TR_PP_OP_SEND_BACKWARD, .mb = 3, .chunk = 0, .peer = 2};
    assert_int_equal(tr_pp_op_label(&s, 1, b, sizeof b), 8);
    assert_string_equal(b, "sendB3>2");
    tr_pp_op r = {.kind = TR_PP_OP_RECV_FORWARD, .mb = 3, .chunk = 2, .peer = 0};
    tr_pp_op_label(&r, 4, b, sizeof b);
    assert_string_equal(b, "recvF3.2<0");
    assert_string_equal(tr_pp_op_kind_name(TR_PP_OP_RECV_BACKWARD), "recv_backward");
    assert_true(near(tr_pp_bubble_theory(4, 8, TR_PP_1F1B, 1), 3.0 / 11));
    assert_true(near(tr_pp_bubble_theory(4, 8, TR_PP_GPIPE, 1), 3.0 / 11));
    assert_true(near(tr_pp_bubble_theory(4, 8, TR_PP_INTERLEAVED, 2), 3.0 / 19));
    assert_true(near(tr_pp_bubble_theory(1, 8, TR_PP_1F1B, 1), 0));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_1f1b_acceptance),
        cmocka_unit_test(test_gpipe_order),
        cmocka_unit_test(test_interleaved_order),
        cmocka_unit_test(test_peak_activations),
        cmocka_unit_test(test_exhaustive_check),
        cmocka_unit_test(test_simulation_costs),
        cmocka_unit_test(test_validation_messages),
        cmocka_unit_test(test_labels_and_theory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
