/* eval/score.c on a small random GPT-2 (one process):
 *  - tr_gpt_cache_truncate: a prefix decoded once, then a second continuation after it, gives
 *    the logits of the prefix and that continuation decoded fresh;
 *  - tr_eval_score: each token's log softmax of the logits row before it (a decode of the
 *    whole sequence, computed here), greedy = the row's first maximum; a call sharing a
 *    prefix with the previous one (reused keys and values) scores as a fresh one;
 *  - tr_eval_stream: Hugging Face's strided windows — the tokens scored, the windows, and
 *    the sum of every window scored on its own, for strides 1, 3, 8 = context; a stream of
 *    one token scores nothing; three data-parallel parts add up to the whole;
 *  - tr_eval_request_score: a request longer than the context is scored on its last
 *    context + 1 ids (left truncation), choices after one context as each alone;
 *  - tr_eval_argmax: the first maximum, by length with norm. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "eval/eval.h"
#include "model/gpt.h"

enum { C = 32, NH = 4, L = 2, V = 200, VP = 256, MAX_T = 32 };

typedef struct {
    tr_gpt *g;
    float *params;
} model;

static model make_model(void)
{
    tr_gpt_shape s = {.num_layers = L, .C = C, .NH = NH, .T = MAX_T, .max_T = MAX_T, .V = V,
                      .Vp = VP, .eps = 1e-5f, .init_std = 0.1f, .seed = 11, .layer_first = 0,
                      .layer_count = L, .is_first = 1, .is_last = 1, .tp_size = 1};
    model m = {0};
    assert_int_equal(tr_gpt_create(&s, tr_kernels_cpu(), NULL, &m.g), TR_OK);
    m.params = calloc(tr_gpt_num_params(m.g), sizeof(float));
    assert_non_null(m.params);
    tr_gpt_bind(m.g, m.params, NULL);
    assert_int_equal(tr_gpt_init_params(m.g), TR_OK);
    return m;
}

static void free_model(model *m)
{
    tr_gpt_free(m->g);
    free(m->params);
}

static void random_tokens(int32_t *ids, int n, unsigned seed)
{
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        ids[i] = (int32_t)((seed >> 16) % V);
    }
}

/* log softmax(logits of a fresh decode of ids[0, n - 1))[ids[j]] for j in [1, n). */
static void reference_logp(tr_gpt *g, const int32_t *ids, int n, double *logp, int *argmax)
{
    tr_gpt_cache *c = NULL;
    assert_int_equal(tr_gpt_cache_create(g, 1, n - 1, &c), TR_OK);
    float *logits = malloc(sizeof(float) * (size_t)(n - 1) * V);
    assert_int_equal(tr_gpt_decode(c, ids, n - 1, 1, logits), TR_OK);
    for (int p = 0; p < n - 1; p++) {
        const float *row = logits + (size_t)p * V;
        int best = 0;
        for (int v = 1; v < V; v++)
            best = row[v] > row[best] ? v : best;
        double z = 0;
        for (int v = 0; v < V; v++)
            z += exp((double)row[v] - row[best]);
        logp[p + 1] = (double)row[ids[p + 1]] - row[best] - log(z);
        argmax[p + 1] = best;
    }
    free(logits);
    tr_gpt_cache_free(c);
}

static void test_cache_truncate(void **state)
{
    (void)state;
    model m = make_model();
    enum { P = 9, N = 20 };
    int32_t a[N], b[N];
    random_tokens(a, N, 5);
    memcpy(b, a, sizeof(int32_t) * P);
    random_tokens(b + P, N - P, 6);
    tr_gpt_cache *c = NULL;
    assert_int_equal(tr_gpt_cache_create(m.g, 1, N, &c), TR_OK);
    float *fresh = malloc(sizeof(float) * N * V), *after = malloc(sizeof(float) * N * V);
    assert_int_equal(tr_gpt_decode(c, b, N, 1, fresh), TR_OK);
    tr_gpt_cache_reset(c);
    assert_int_equal(tr_gpt_decode(c, a, N, 1, after), TR_OK);
    tr_gpt_cache_truncate(c, N + 5); /* longer than cached: nothing changes */
    assert_int_equal(tr_gpt_cache_length(c), N);
    tr_gpt_cache_truncate(c, P);
    assert_int_equal(tr_gpt_cache_length(c), P);
    assert_int_equal(tr_gpt_decode(c, b + P, N - P, 1, after), TR_OK);
    double worst = 0;
    for (size_t i = 0; i < (size_t)(N - P) * V; i++)
        worst = fmax(worst, fabs(after[i] - fresh[(size_t)P * V + i]));
    print_message("after a truncated cache vs fresh: max |difference| %.3g\n", worst);
    assert_true(worst <= 1e-5);
    free(fresh);
    free(after);
    tr_gpt_cache_free(c);
    free_model(&m);
}

static void test_score(void **state)
{
    (void)state;
    model m = make_model();
    enum { N = 25, F = 7 };
    int32_t ids[N], other[N];
    random_tokens(ids, N, 8);
    memcpy(other, ids, sizeof ids);
    random_tokens(other + 12, N - 12, 9);
    double ref[N], ref_other[N], logp[N];
    int argmax[N], argmax_other[N];
    unsigned char greedy[N];
    reference_logp(m.g, ids, N, ref, argmax);
    reference_logp(m.g, other, N, ref_other, argmax_other);
    ids[N - 1] = (int32_t)argmax[N - 1]; /* one greedy token at least */
    reference_logp(m.g, ids, N, ref, argmax);
    tr_evaluator *ev = NULL;
    assert_int_equal(tr_evaluator_create(m.g, MAX_T + 1, &ev), TR_ERR_INVALID);
    assert_int_equal(tr_evaluator_create(m.g, 24, &ev), TR_OK);
    assert_int_equal(tr_evaluator_context(ev), 24);
    /* n - 1 = 24 positions read: fits; one more does not */
    assert_int_equal(tr_eval_score(ev, ids, N, F, logp, greedy), TR_OK);
    int greedy_seen = 0;
    for (int j = F; j < N; j++) {
        assert_true(fabs(logp[j - F] - ref[j]) <= 1e-5);
        assert_int_equal(greedy[j - F], argmax[j] == ids[j]);
        greedy_seen += greedy[j - F];
    }
    assert_true(greedy_seen >= 1);
    /* shares 12 ids with the previous call: those keys and values are reused */
    assert_int_equal(tr_eval_score(ev, other, N, 14, logp, NULL), TR_OK);
    for (int j = 14; j < N; j++)
        assert_true(fabs(logp[j - 14] - ref_other[j]) <= 1e-5);
    /* the same again after a reset, and a first of 1 (every token) */
    tr_evaluator_reset(ev);
    assert_int_equal(tr_eval_score(ev, ids, N, 1, logp, NULL), TR_OK);
    for (int j = 1; j < N; j++)
        assert_true(fabs(logp[j - 1] - ref[j]) <= 1e-5);
    int32_t too_long[N + 1] = {0}, bad[3] = {1, V, 2};
    assert_int_equal(tr_eval_score(ev, too_long, N + 1, 1, logp, NULL), TR_ERR_INVALID);
    assert_int_equal(tr_eval_score(ev, ids, N, 0, logp, NULL), TR_ERR_INVALID);
    assert_int_equal(tr_eval_score(ev, ids, N, N + 1, logp, NULL), TR_ERR_INVALID);
    assert_int_equal(tr_eval_score(ev, bad, 3, 1, logp, NULL), TR_ERR_INVALID);
    tr_evaluator_free(ev);
    free_model(&m);
}

/* The stream's windows, each scored fresh here: tokens, windows and nll. */
static void windows_by_hand(tr_gpt *g, const int32_t *ids, int n, int context, int stride,
                            tr_eval_sums *s)
{
    int prev_end = 0;
    for (int begin = 0; begin < n; begin += stride) {
        int end = begin + context < n ? begin + context : n;
        int first = begin + 1 > prev_end ? begin + 1 : prev_end;
        if (first < end) {
            double ref[MAX_T + 1];
            int argmax[MAX_T + 1];
            reference_logp(g, ids + begin, end - begin, ref, argmax);
            for (int j = first; j < end; j++)
                s->nll -= ref[j - begin];
            s->tokens += (uint64_t)(end - first);
            s->windows++;
        }
        prev_end = end;
        if (end == n)
            break;
    }
}

static void test_stream_windows(void **state)
{
    (void)state;
    model m = make_model();
    enum { N = 41, CTX = 8 };
    int32_t ids[N];
    random_tokens(ids, N, 10);
    tr_evaluator *ev = NULL;
    assert_int_equal(tr_evaluator_create(m.g, CTX, &ev), TR_OK);
    const int strides[] = {1, 3, CTX};
    for (int k = 0; k < 3; k++) {
        tr_eval_sums got = {0}, want = {0};
        assert_int_equal(tr_eval_stream(ev, ids, N, strides[k], 0, 1, &got), TR_OK);
        windows_by_hand(m.g, ids, N, CTX, strides[k], &want);
        print_message("stride %d: %llu tokens in %llu windows, nll %.6f (by hand %.6f)\n",
                      strides[k], (unsigned long long)got.tokens,
                      (unsigned long long)got.windows, got.nll, want.nll);
        assert_int_equal(got.tokens, N - 1 - (strides[k] == CTX ? (N - 1) / CTX : 0));
        assert_int_equal(got.tokens, want.tokens);
        assert_int_equal(got.windows, want.windows);
        assert_int_equal(got.streams, 1);
        assert_true(fabs(got.nll - want.nll) <= 1e-5 * fabs(want.nll));
    }
    /* three data-parallel parts add up to the whole */
    tr_eval_sums whole = {0}, parts = {0};
    assert_int_equal(tr_eval_stream(ev, ids, N, 3, 0, 1, &whole), TR_OK);
    for (int p = 0; p < 3; p++)
        assert_int_equal(tr_eval_stream(ev, ids, N, 3, p, 3, &parts), TR_OK);
    assert_int_equal(parts.tokens, whole.tokens);
    assert_int_equal(parts.windows, whole.windows);
    assert_int_equal(parts.streams, 1);
    assert_true(fabs(parts.nll - whole.nll) <= 1e-9 * fabs(whole.nll));
    assert_int_equal(tr_eval_stream(ev, ids, N, 3, 3, 3, &parts), TR_ERR_INVALID);
    tr_eval_sums one = {0};
    assert_int_equal(tr_eval_stream(ev, ids, 1, 4, 0, 1, &one), TR_OK);
    assert_int_equal(one.tokens, 0);
    assert_int_equal(one.windows, 0);
    assert_int_equal(tr_eval_stream(ev, ids, N, CTX + 1, 0, 1, &one), TR_ERR_INVALID);
    assert_int_equal(tr_eval_stream(ev, ids, N, 0, 0, 1, &one), TR_ERR_INVALID);
    tr_evaluator_free(ev);
    free_model(&m);
}

static void test_request(void **state)
{
    (void)state;
    model m = make_model();
    enum { NC = 13, CTX = 10 };
    int32_t ctx[NC], a[3], b[6], whole[NC + 6];
    random_tokens(ctx, NC, 12);
    random_tokens(a, 3, 13);
    random_tokens(b, 6, 14);
    int32_t *cont[2] = {a, b};
    int n_cont[2] = {3, 6};
    int64_t chars[2] = {3, 6};
    tr_eval_request r = {.line = 1, .ctx = ctx, .n_ctx = NC, .n_choices = 2, .label = 1,
                         .cont = cont, .n_cont = n_cont, .chars = chars};
    tr_evaluator *ev = NULL;
    assert_int_equal(tr_evaluator_create(m.g, CTX, &ev), TR_OK);
    double ll[2];
    unsigned char greedy[2];
    assert_int_equal(tr_eval_request_score(ev, &r, ll, greedy), TR_OK);
    for (int i = 0; i < 2; i++) { /* the last CTX + 1 ids of context + choice i */
        int n = NC + n_cont[i];
        memcpy(whole, ctx, sizeof ctx);
        memcpy(whole + NC, cont[i], sizeof(int32_t) * (size_t)n_cont[i]);
        double ref[CTX + 1];
        int argmax[CTX + 1];
        reference_logp(m.g, whole + n - (CTX + 1), CTX + 1, ref, argmax);
        double want = 0;
        int all_greedy = 1;
        for (int j = CTX + 1 - n_cont[i]; j <= CTX; j++) {
            want += ref[j];
            all_greedy &= argmax[j] == whole[n - (CTX + 1) + j];
        }
        print_message("choice %d: %.6f (by hand %.6f)\n", i, ll[i], want);
        assert_true(fabs(ll[i] - want) <= 1e-5 * fabs(want));
        assert_int_equal(greedy[i], all_greedy);
    }
    /* a short context: both choices after its shared keys and values, each as alone */
    r.n_ctx = 4;
    double shared[2], alone[2];
    assert_int_equal(tr_eval_request_score(ev, &r, shared, greedy), TR_OK);
    for (int i = 0; i < 2; i++) {
        tr_eval_request one = r;
        one.n_choices = 1;
        one.cont = &cont[i];
        one.n_cont = &n_cont[i];
        tr_evaluator_reset(ev);
        assert_int_equal(tr_eval_request_score(ev, &one, &alone[i], greedy), TR_OK);
        assert_true(fabs(shared[i] - alone[i]) <= 1e-5 * fabs(alone[i]));
    }
    tr_evaluator_free(ev);
    free_model(&m);
}

static void test_argmax(void **state)
{
    (void)state;
    const double ll[4] = {-3, -1, -1, -6};
    const int64_t chars[4] = {1, 1, 1, 10};
    assert_int_equal(tr_eval_argmax(ll, chars, 4, 0), 1); /* the first of a tie */
    assert_int_equal(tr_eval_argmax(ll, chars, 4, 1), 3); /* -0.6 per character */
    assert_int_equal(tr_eval_argmax(ll, chars, 1, 0), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cache_truncate), cmocka_unit_test(test_score),
        cmocka_unit_test(test_stream_windows), cmocka_unit_test(test_request),
        cmocka_unit_test(test_argmax),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
