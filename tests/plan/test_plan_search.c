/* tr_plan_search on Bloom-176B's model and cluster: fast, ranked, the published layout among
 * the fitting ones, every rejection with its reason. */
#include <time.h>

#include "plan_test.h"

static const tr_plan_rejected *find_rejected(const tr_plan_search_result *s, int tp, int pp,
                                             int mb)
{
    for (int i = 0; i < s->n_rejected; i++)
        if (s->rejected[i].layout.tp == tp && s->rejected[i].layout.pp == pp &&
            s->rejected[i].layout.micro_batch == mb)
            return &s->rejected[i];
    return NULL;
}

static void test_bloom_search(void **state)
{
    (void)state;
    tr_config cfg;
    tr_plan_cluster c;
    tr_t_load_file(TR_BLOOM_YAML, NULL, 0, &cfg);
    assert_int_equal(tr_plan_cluster_from_config(&cfg, &c), TR_OK);
    tr_plan_search_result s;
    /* CPU time, not wall time: a wall-clock bound failed on a busy 2-core machine */
    clock_t t0 = clock();
    assert_int_equal(tr_plan_search(&cfg, 0, &c, &s), TR_OK);
    double dt = (double)(clock() - t0) / CLOCKS_PER_SEC;
#if !defined(__SANITIZE_ADDRESS__)
    assert_true(dt < 10.0); /* acceptance: under 10 s of CPU, ~0.5 s (sanitizers: slower) */
#else
    (void)dt;
#endif
    assert_int_equal(s.world, 384);
    assert_true(s.n_fit > 10);
    assert_true(s.n_candidates >= s.n_fit);
    for (int i = 0; i < s.n_fit; i++) {
        const tr_plan_result *r = &s.fit[i];
        assert_true(r->fits && r->valid);
        assert_true(r->memory.total <= r->capacity);
        assert_int_equal(r->layout.tp * r->layout.pp * r->layout.dp, 384); /* (s 2048: CP 1) */
        assert_int_equal(2048 % (r->layout.micro_batch * r->layout.dp), 0);
        if (i)
            assert_true(s.fit[i - 1].tokens_per_s >= r->tokens_per_s);
    }
    /* The published layout fits and is ranked; its own evaluation agrees with `plan`. */
    assert_true(s.config_rank >= 1);
    const tr_plan_result *own = &s.fit[s.config_rank - 1];
    assert_int_equal(own->layout.tp, 4);
    assert_int_equal(own->layout.pp, 12);
    assert_int_equal(own->layout.micro_batch, 2);
    assert_int_equal(own->layout.recompute, TR_PLAN_RECOMPUTE_FULL);
    assert_close(own->step_time_s, s.config_result.step_time_s, 1e-12);
    /* Rejections carry their reasons. */
    const tr_plan_rejected *r = find_rejected(&s, 1, 1, 0);
    assert_non_null(r);
    assert_non_null(strstr(r->reason, "global batch 2048 is not a multiple of DP 384"));
    r = find_rejected(&s, 3, 0, 0);
    assert_non_null(r);
    assert_non_null(strstr(r->reason, "TP 3 does not divide num_attention_heads 112"));
    r = find_rejected(&s, 1, 96, 0);
    assert_non_null(r);
    assert_non_null(strstr(r->reason, "PP 96 x 1 chunks is more than num_layers 70"));
    r = find_rejected(&s, 1, 12, 1);
    assert_non_null(r);
    assert_non_null(strstr(r->reason, "the model state alone"));
    tr_plan_search_free(&s);
    assert_null(s.fit);
    tr_config_free(&cfg);
}

static void test_small_search_is_exhaustive(void **state)
{
    (void)state;
    /* 16 ranks, 16 heads, 8 layers, GB 64: TP in {1,2,4,8,16}; every fitting layout listed
     * once. */
    tr_config cfg;
    tr_plan_cluster c;
    tr_t_load_text(TR_SMALL_YAML, NULL, 0, &cfg);
    assert_int_equal(tr_plan_cluster_from_config(&cfg, &c), TR_OK);
    tr_plan_search_result s;
    assert_int_equal(tr_plan_search(&cfg, 16, &c, &s), TR_OK);
    int expected = 0;
    for (int tp = 1; tp <= 16; tp *= 2)
        for (int pp = 1; tp * pp <= 16; pp *= 2) {
            int dp = 16 / (tp * pp);
            if (pp > 8)
                continue;
            for (int mb = 1; mb * dp <= 64; mb *= 2)
                expected += 3 * (dp > 1 ? 2 : 1);
        }
    assert_int_equal(s.n_candidates, expected);
    assert_int_equal(s.n_fit + 0, s.n_candidates); /* a 150M model fits everywhere */
    for (int i = 0; i < s.n_fit; i++)
        for (int j = i + 1; j < s.n_fit; j++) {
            const tr_plan_layout *a = &s.fit[i].layout, *b = &s.fit[j].layout;
            assert_false(a->tp == b->tp && a->pp == b->pp && a->micro_batch == b->micro_batch &&
                         a->recompute == b->recompute &&
                         a->distributed_optimizer == b->distributed_optimizer);
        }
    assert_true(s.config_rank >= 1);
    tr_plan_search_free(&s);
    tr_config_free(&cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bloom_search),
        cmocka_unit_test(test_small_search_is_exhaustive),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
