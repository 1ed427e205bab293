/* plan/'s pipeline engine: the same times as pp/'s tr_pp_simulate (batched rendezvous and
 * rendezvous) for every schedule kind, uneven stages and P2P costs, per stage (end, end of
 * the last backward, compute); compute + transfers + waits = a stage's clock; the peaks of
 * stored chunks without building the lists equal pp/'s; the cache of op lists; the extended
 * steady state of long pipelines equals their whole simulation. */
#include "plan/plan_internal.h"
#include "plan_test.h"

/* A small deterministic generator: costs differ per stage. */
static double rnd(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return ((*s >> 8) & 0xffff) / 65536.0;
}

static void check_against_pp(int P, int M, tr_pp_kind kind, int v, int batched, unsigned seed)
{
    plan_pipe pipe = {0};
    assert_int_equal(plan_pipe_build(P, M, kind, v, &pipe), TR_OK);
    tr_pp_schedule *stages = calloc((size_t)P, sizeof *stages);
    assert_int_equal(tr_pp_schedule_build_all(P, M, kind, v, stages), TR_OK);
    double tf[TR_PP_MAX_STAGES], tb[TR_PP_MAX_STAGES], p2p[TR_PP_MAX_STAGES];
    double tfc[4 * TR_PP_MAX_STAGES], tbc[4 * TR_PP_MAX_STAGES]; /* per chunk: pp/'s per stage */
    unsigned s = seed;
    for (int i = 0; i < P; i++) {
        tf[i] = 1.0 + rnd(&s);
        tb[i] = 2.0 + 2 * rnd(&s);
        p2p[i] = 0.05; /* pp/ has one P2P cost for every pair */
        for (int c = 0; c < v; c++) {
            tfc[i * v + c] = tf[i];
            tbc[i * v + c] = tb[i];
        }
    }
    int peaks[TR_PP_MAX_STAGES];
    plan_schedule_peaks(P, M, kind, v, peaks);
    plan_sim_ws ws = {0};
    plan_pipe_out o;
    assert_int_equal(plan_pipe_run(&pipe, tfc, tbc, p2p, batched, &ws, &o), TR_OK);
    /* pp/: per-op end times */
    double **ends = calloc((size_t)P, sizeof *ends);
    for (int i = 0; i < P; i++)
        ends[i] = calloc((size_t)stages[i].n_ops + 1, sizeof **ends);
    tr_pp_costs costs = {.tf = tf[0], .tb = tb[0], .tf_stage = tf, .tb_stage = tb, .p2p = 0.05};
    tr_pp_sim_result sim;
    assert_int_equal(tr_pp_simulate(stages, P, batched ? TR_PP_COMM_BATCHED
                                                            : TR_PP_COMM_RENDEZVOUS,
                                    &costs, &sim, NULL, ends),
                     TR_OK);
    assert_close(o.makespan, sim.makespan, 1e-12);
    assert_close(o.bubble_fraction + 1, sim.bubble_fraction + 1, 1e-12);
    for (int i = 0; i < P; i++) {
        const tr_pp_schedule *st = &stages[i];
        assert_close(o.end[i], ends[i][st->n_ops - 1], 1e-12);
        assert_close(o.busy[i], sim.busy[i], 1e-12);
        assert_int_equal(pipe.peak[i], sim.peak_activations[i]);
        assert_int_equal(peaks[i], sim.peak_activations[i]);
        /* a stage's clock is its compute, its transfers and its waits */
        assert_close(o.busy[i] + o.transfer[i] + o.wait[i], o.end[i], 1e-12);
        double last_b = 0;
        for (int k = 0; k < st->n_ops; k++)
            if (st->ops[k].kind == TR_PP_OP_BACKWARD)
                last_b = ends[i][k];
        assert_close(o.end_b[i], last_b, 1e-12);
        free(ends[i]);
    }
    free(ends);
    tr_pp_schedule_free_all(stages, P);
    free(stages);
    plan_sim_ws_free(&ws);
    plan_pipe_free(&pipe);
}

static void test_same_as_pp(void **state)
{
    (void)state;
    unsigned seed = 1;
    for (int batched = 0; batched < 2; batched++)
        for (int P = 1; P <= 6; P++)
            for (int M = 1; M <= 12; M++) {
                check_against_pp(P, M, TR_PP_1F1B, 1, batched, seed++);
                check_against_pp(P, M, TR_PP_GPIPE, 1, batched, seed++);
                if (P >= 2 && M % P == 0)
                    for (int v = 2; v <= 3; v++)
                        check_against_pp(P, M, TR_PP_INTERLEAVED, v, batched, seed++);
            }
}

/* Peaks without the lists, for more shapes than the timing comparison covers. */
static void test_peaks(void **state)
{
    (void)state;
    for (int P = 1; P <= 16; P++)
        for (int M = 1; M <= 64; M++)
            for (int kind = 0; kind < 3; kind++)
                for (int v = 1; v <= 4; v++) {
                    tr_pp_kind k = kind == 0 ? TR_PP_GPIPE : kind == 1 ? TR_PP_1F1B
                                                                       : TR_PP_INTERLEAVED;
                    if ((k == TR_PP_INTERLEAVED) != (v > 1) || tr_pp_validate(P, M, k, v)) {
                        tr_clear_error();
                        continue;
                    }
                    int peaks[TR_PP_MAX_STAGES];
                    plan_schedule_peaks(P, M, k, v, peaks);
                    for (int r = 0; r < P; r++) {
                        tr_pp_schedule st;
                        assert_int_equal(tr_pp_schedule_build(P, r, M, k, v, &st), TR_OK);
                        if (peaks[r] != tr_pp_peak_activations(&st)) {
                            print_error("P=%d M=%d %s v=%d stage %d: %d vs pp/'s %d\n", P, M,
                                        tr_pp_kind_name(k), v, r, peaks[r],
                                        tr_pp_peak_activations(&st));
                            fail();
                        }
                        tr_pp_schedule_free(&st);
                    }
                }
}

/* The cache keeps the op lists of recent shapes and rebuilds what it dropped. */
static void test_cache(void **state)
{
    (void)state;
    tr_plan_ws ws = {0};
    double tf[8] = {1, 1, 1, 1, 1, 1, 1, 1}, tb[8] = {2, 2, 2, 2, 2, 2, 2, 2}, p2p[8] = {0};
    plan_pipe_out o;
    for (int round = 0; round < 3; round++)
        for (int M = 4; M <= 4 + 2 * PLAN_PIPE_CACHE; M++) {
            assert_int_equal(plan_ws_simulate(&ws, 4, M, TR_PP_1F1B, 1, tf, tb, p2p, 1, &o),
                             TR_OK);
            assert_close(o.makespan, (M + 3) * 3.0, 1e-12);
        }
    assert_true(ws.n_pipes <= PLAN_PIPE_CACHE);
    plan_ws_free(&ws);
}

/* Past PLAN_SIM_BUDGET units the steady state is extended: on stages like the planner's
 * (equal middle stages, the first and last slower by the embedding and the output layer),
 * the same as simulating every micro-batch. */
static void test_extension(void **state)
{
    (void)state;
    struct {
        int P, M, v;
        tr_pp_kind kind;
    } cases[] = {{12, 2048, 1, TR_PP_1F1B}, {35, 1120, 1, TR_PP_1F1B},
                 {16, 4096, 2, TR_PP_INTERLEAVED}, {48, 1024, 1, TR_PP_1F1B},
                 {8, 4096, 1, TR_PP_GPIPE}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int P = cases[k].P, M = cases[k].M, v = cases[k].v;
        assert_true((long)P * M * v > PLAN_SIM_BUDGET);
        double tf[4 * TR_PP_MAX_STAGES], tb[4 * TR_PP_MAX_STAGES], p2p[TR_PP_MAX_STAGES];
        for (int i = 0; i < P * v; i++) {
            tf[i] = 1.0;
            tb[i] = 3.0;
        }
        tf[0] *= 1.03;
        tb[0] *= 1.03;
        tf[P * v - 1] *= 1.08;
        tb[P * v - 1] *= 1.08;
        for (int i = 0; i < P; i++)
            p2p[i] = i == P - 1 ? 0.002 : 0.01; /* one pair on the same node */
        for (int batched = 0; batched < 2; batched++) {
            plan_pipe pipe = {0};
            assert_int_equal(plan_pipe_build(P, M, cases[k].kind, v, &pipe), TR_OK);
            plan_sim_ws ws = {0};
            plan_pipe_out full, ext;
            assert_int_equal(plan_pipe_run(&pipe, tf, tb, p2p, batched, &ws, &full), TR_OK);
            tr_plan_ws pws = {0};
            assert_int_equal(
                plan_ws_simulate(&pws, P, M, cases[k].kind, v, tf, tb, p2p, batched, &ext),
                TR_OK);
            assert_close(ext.makespan, full.makespan, 1e-9);
            for (int i = 0; i < 5 * P; i++)
                assert_close(ext.end[i] + 1, full.end[i] + 1, 1e-9);
            plan_ws_free(&pws);
            plan_sim_ws_free(&ws);
            plan_pipe_free(&pipe);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_as_pp),
        cmocka_unit_test(test_peaks),
        cmocka_unit_test(test_cache),
        cmocka_unit_test(test_extension),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
