/* model/gpt_generate.c:
 *  - the cached forward of a whole sequence gives the training forward's loss (cross-entropy
 *    of its logits at every position, B = 2, a padded vocabulary);
 *  - positions fed one at a time (after a prefix) give the logits of all at once;
 *  - the cache refuses what does not fit, tokens outside the vocabulary, a pipeline stage;
 *  - sampling: greedy = the first maximum; top-k 1 = greedy; draws only among the top k;
 *    top-p keeps the fewest reaching p; the frequencies over a grid of u are the softmax at
 *    the temperature. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "model/gpt.h"

enum { B = 2, T = 24, C = 32, NH = 4, L = 2, V = 200, VP = 256 };

static tr_gpt_shape test_shape(void)
{
    return (tr_gpt_shape){.num_layers = L, .C = C, .NH = NH, .T = T, .max_T = 32, .V = V,
                          .Vp = VP, .eps = 1e-5f, .init_std = 0.1f, .seed = 7,
                          .layer_first = 0, .layer_count = L, .is_first = 1, .is_last = 1,
                          .tp_size = 1};
}

typedef struct {
    tr_gpt *g;
    float *params, *grads;
} model;

static model make_model(void)
{
    tr_gpt_shape s = test_shape();
    model m = {0};
    assert_int_equal(tr_gpt_create(&s, tr_kernels_cpu(), NULL, &m.g), TR_OK);
    size_t n = tr_gpt_num_params(m.g);
    m.params = calloc(n, sizeof(float));
    m.grads = calloc(n, sizeof(float));
    assert_non_null(m.params);
    tr_gpt_bind(m.g, m.params, m.grads);
    assert_int_equal(tr_gpt_init_params(m.g), TR_OK);
    return m;
}

static void free_model(model *m)
{
    tr_gpt_free(m->g);
    free(m->params);
    free(m->grads);
}

static void random_tokens(int32_t *ids, int n, unsigned seed)
{
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        ids[i] = (int32_t)((seed >> 16) % V);
    }
}

static void test_matches_training_forward(void **state)
{
    (void)state;
    model m = make_model();
    int32_t tokens[B * T], targets[B * T];
    random_tokens(tokens, B * T, 1);
    random_tokens(targets, B * T, 2);
    tr_gpt_acts *acts = NULL;
    assert_int_equal(tr_gpt_acts_create(m.g, B, &acts), TR_OK);
    float loss = 0;
    assert_int_equal(tr_gpt_forward(m.g, acts, tokens, NULL, targets, 0.0f, &loss), TR_OK);
    tr_gpt_acts_free(acts);

    tr_gpt_cache *c = NULL;
    assert_int_equal(tr_gpt_cache_create(m.g, B, T, &c), TR_OK);
    float *logits = malloc(sizeof(float) * B * T * V);
    assert_int_equal(tr_gpt_decode(c, tokens, T, 1, logits), TR_OK);
    assert_int_equal(tr_gpt_cache_length(c), T);
    double sum = 0;
    for (int r = 0; r < B * T; r++) {
        const float *row = logits + (size_t)r * V;
        double mx = row[0], z = 0;
        for (int v = 1; v < V; v++)
            mx = row[v] > mx ? row[v] : mx;
        for (int v = 0; v < V; v++)
            z += exp(row[v] - mx);
        sum += log(z) + mx - row[targets[r]];
    }
    double mean = sum / (B * T);
    print_message("training forward loss %.7f, cached forward's %.7f\n", loss, mean);
    assert_true(fabs(mean - loss) <= 1e-5 * fabs(loss));
    free(logits);
    tr_gpt_cache_free(c);
    free_model(&m);
}

static void test_one_at_a_time(void **state)
{
    (void)state;
    model m = make_model();
    int32_t tokens[B * T];
    random_tokens(tokens, B * T, 3);
    tr_gpt_cache *c = NULL;
    assert_int_equal(tr_gpt_cache_create(m.g, B, T, &c), TR_OK);
    float *all = malloc(sizeof(float) * B * T * V), *one = malloc(sizeof(float) * B * V);
    assert_int_equal(tr_gpt_decode(c, tokens, T, 1, all), TR_OK);
    tr_gpt_cache_reset(c);
    /* a prefix of 5 at once (its last position's logits), then one position per call */
    enum { P = 5 };
    int32_t step[B * P];
    for (int b = 0; b < B; b++)
        memcpy(step + b * P, tokens + b * T, sizeof(int32_t) * P);
    assert_int_equal(tr_gpt_decode(c, step, P, 0, one), TR_OK);
    double worst = 0;
    for (int t = P - 1; t < T; t++) {
        if (t >= P) {
            for (int b = 0; b < B; b++)
                step[b] = tokens[b * T + t];
            assert_int_equal(tr_gpt_decode(c, step, 1, 0, one), TR_OK);
        }
        for (int b = 0; b < B; b++)
            for (int v = 0; v < V; v++) {
                double d = fabs(one[b * V + v] - all[((size_t)b * T + t) * V + v]);
                worst = d > worst ? d : worst;
            }
    }
    print_message("one at a time vs all at once: max |difference| %.3g\n", worst);
    assert_true(worst <= 1e-5);
    assert_int_equal(tr_gpt_cache_length(c), T);
    /* full: one more position does not fit; nothing changes */
    assert_int_equal(tr_gpt_decode(c, step, 1, 0, one), TR_ERR_INVALID);
    assert_int_equal(tr_gpt_cache_length(c), T);
    tr_gpt_cache_reset(c);
    int32_t bad[B] = {0, V};
    assert_int_equal(tr_gpt_decode(c, bad, 1, 0, one), TR_ERR_INVALID);
    assert_int_equal(tr_gpt_cache_length(c), 0);
    free(all);
    free(one);
    tr_gpt_cache_free(c);
    free_model(&m);
}

static void test_cache_refusals(void **state)
{
    (void)state;
    model m = make_model();
    tr_gpt_cache *c = NULL;
    assert_int_equal(tr_gpt_cache_create(m.g, B, 33, &c), TR_ERR_INVALID); /* > max_T 32 */
    assert_int_equal(tr_gpt_cache_create(m.g, 0, 8, &c), TR_ERR_INVALID);
    assert_null(c);
    free_model(&m);
    tr_gpt_shape s = test_shape();
    s.is_last = 0; /* a first pipeline stage */
    tr_gpt *g = NULL;
    assert_int_equal(tr_gpt_create(&s, tr_kernels_cpu(), NULL, &g), TR_OK);
    assert_int_equal(tr_gpt_cache_create(g, 1, 8, &c), TR_ERR_INVALID);
    tr_gpt_free(g);
}

static void test_sampling(void **state)
{
    (void)state;
    enum { N = 6 };
    const float logits[N] = {1.0f, 3.0f, 0.5f, 3.0f, 2.0f, -1.0f};
    void *scratch = malloc(tr_sample_scratch_bytes(N));
    tr_sampling greedy = {.temperature = 0, .top_p = 1};
    assert_int_equal(tr_sample_token(logits, N, &greedy, 0.7, scratch), 1); /* first maximum */
    tr_sampling k1 = {.temperature = 1, .top_k = 1, .top_p = 1};
    assert_int_equal(tr_sample_token(logits, N, &k1, 0.99, scratch), 1);
    /* the frequencies over a grid of u are the softmax at temperature 0.7 */
    enum { GRID = 20000 };
    int counts[N] = {0};
    tr_sampling t = {.temperature = 0.7, .top_p = 1};
    for (int i = 0; i < GRID; i++)
        counts[tr_sample_token(logits, N, &t, (i + 0.5) / GRID, scratch)]++;
    double z = 0;
    for (int i = 0; i < N; i++)
        z += exp(logits[i] / 0.7);
    for (int i = 0; i < N; i++)
        assert_true(fabs((double)counts[i] / GRID - exp(logits[i] / 0.7) / z) <= 2.0 / GRID);
    /* top-k 3: only ids 1, 3, 4 */
    tr_sampling k3 = {.temperature = 1, .top_k = 3, .top_p = 1};
    for (int i = 0; i < 100; i++) {
        int id = tr_sample_token(logits, N, &k3, (i + 0.5) / 100, scratch);
        assert_true(id == 1 || id == 3 || id == 4);
    }
    /* top-p 0.5: ids 1 and 3 hold 2 x e^3 / z of the mass, which reaches 0.5 */
    tr_sampling p = {.temperature = 1, .top_p = 0.5};
    for (int i = 0; i < 100; i++) {
        int id = tr_sample_token(logits, N, &p, (i + 0.5) / 100, scratch);
        assert_true(id == 1 || id == 3);
    }
    free(scratch);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_training_forward),
        cmocka_unit_test(test_one_at_a_time),
        cmocka_unit_test(test_cache_refusals),
        cmocka_unit_test(test_sampling),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
