/* Blended datasets (data.h): over 1,000 global batches each source's count in every batch is
 * within one sample of weight * global batch, the totals follow the weights, samples are the
 * sources' own (tokens identify the source), random access equals a forward walk, unweighted
 * lists weigh by sample counts, per-split lists are used whole, and one source reads exactly
 * what tr_data_open reads. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdint.h>

#include "data_test_util.h"

#define S 8 /* seq_length */

/* A dataset whose every token is `mark` (so a sample names its source), n_docs documents. */
static const char *make_source(const char *name, uint16_t mark, int n_docs)
{
    static char paths[8][512];
    static int k;
    char *p = paths[k++ % 8];
    snprintf(p, 512, "%s", scratch(name));
    uint64_t lens[64];
    uint16_t tokens[64 * 40];
    size_t n = 0;
    for (int d = 0; d < n_docs; d++) {
        lens[d] = 20 + (uint64_t)(d * 7) % 19;
        for (uint64_t i = 0; i < lens[d]; i++)
            tokens[n++] = mark;
    }
    assert_int_equal(tr_indexed_write(p, tokens, lens, (uint64_t)n_docs), TR_OK);
    return p;
}

static void check_batches(tr_data *d, int n_src, const double *w, int GB, int n_batches)
{
    int32_t tok[S + 1];
    uint64_t total[8] = {0};
    for (int b = 0; b < n_batches; b++) {
        int count[8] = {0};
        for (int q = 0; q < GB; q++) {
            uint64_t g = (uint64_t)b * (uint64_t)GB + (uint64_t)q, k;
            int src;
            assert_int_equal(tr_data_sample_source(d, TR_SPLIT_TRAIN, g, &src, &k), TR_OK);
            assert_true(src >= 0 && src < n_src);
            count[src]++;
            assert_int_equal(tr_data_sample(d, TR_SPLIT_TRAIN, g, tok), TR_OK);
            for (int i = 0; i <= S; i++)
                assert_int_equal(tok[i], 10 + src);
        }
        for (int s = 0; s < n_src; s++) {
            if (fabs(count[s] - w[s] * GB) >= 1.0)
                fprintf(stderr, "batch %d source %d: %d samples, share %.3f\n", b, s, count[s], w[s] * GB);
            assert_true(fabs(count[s] - w[s] * GB) < 1.0);
            total[s] += (uint64_t)count[s];
        }
    }
    for (int s = 0; s < n_src; s++) /* the totals: within one sample of the weight */
        assert_true(fabs((double)total[s] - w[s] * GB * n_batches) <= 1.0);
}

static void test_weighted_blend(void **state)
{
    (void)state;
    const char *p[3] = {make_source("b0", 10, 20), make_source("b1", 11, 30), make_source("b2", 12, 9)};
    static const struct { int n, GB; double w[3]; } cases[] = {
        {2, 16, {0.3, 0.7}}, {2, 10, {3, 7}}, {3, 7, {0.2, 0.5, 0.3}}, {3, 64, {1, 1, 1}},
        {3, 5, {0.01, 0.98, 0.01}}, {2, 1, {0.5, 0.5}},
        /* each finite, their sum not (found by fuzzing: every sample then came from the first
         * source and a batch's counts were indexed at -1) */
        {2, 16, {1e308, 1e308}}, {3, 10, {1e308, 1.5e308, 5e307}}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        tr_data_spec sp = {.data_path = {p, cases[c].w, cases[c].n}, .format = "auto",
                           .split = "100,0,0", .seq_length = S, .vocab_size = 256,
                           .global_batch = cases[c].GB, .seed = 7};
        tr_data *d;
        assert_int_equal(tr_data_open_spec(&sp, &d), TR_OK);
        double sum = 0, top = 0, w[3]; /* (the shares by the largest: a sum may overflow) */
        for (int i = 0; i < cases[c].n; i++)
            top = fmax(top, cases[c].w[i]);
        for (int i = 0; i < cases[c].n; i++)
            sum += cases[c].w[i] / top;
        for (int i = 0; i < cases[c].n; i++)
            w[i] = cases[c].w[i] / top / sum;
        check_batches(d, cases[c].n, w, cases[c].GB, 1000);
        /* random access (backwards, far jumps) = the forward walk */
        uint64_t n = 1000 * (uint64_t)cases[c].GB;
        int *src = malloc(n * sizeof *src);
        uint64_t *k = malloc(n * sizeof *k);
        for (uint64_t g = 0; g < n; g++)
            assert_int_equal(tr_data_sample_source(d, TR_SPLIT_TRAIN, g, &src[g], &k[g]), TR_OK);
        for (int t = 0; t < 3000; t++) {
            uint64_t g = (t % 2 ? n - 1 - (uint64_t)t : (uint64_t)t * 7919) % n, kk;
            int ss;
            assert_int_equal(tr_data_sample_source(d, TR_SPLIT_TRAIN, g, &ss, &kk), TR_OK);
            assert_int_equal(ss, src[g]);
            assert_int_equal(kk, k[g]);
        }
        /* a source's samples are its 0, 1, 2, ... in order */
        uint64_t next[3] = {0};
        for (uint64_t g = 0; g < n; g++)
            assert_int_equal(k[g], next[src[g]]++);
        free(src);
        free(k);
        tr_data_close(d);
    }
}

static void test_unweighted_and_split_lists(void **state)
{
    (void)state;
    const char *p[2] = {make_source("u0", 10, 10), make_source("u1", 11, 30)};
    tr_data_spec sp = {.data_path = {p, NULL, 2}, .format = "auto", .split = "100,0,0",
                       .seq_length = S, .vocab_size = 256, .global_batch = 12, .seed = 1};
    tr_data *d;
    assert_int_equal(tr_data_open_spec(&sp, &d), TR_OK);
    tr_data *a, *b;
    assert_int_equal(tr_data_open(p[0], "auto", "100,0,0", S, 256, 1, &a), TR_OK);
    assert_int_equal(tr_data_open(p[1], "auto", "100,0,0", S, 256, 1, &b), TR_OK);
    uint64_t na = tr_data_num_samples(a, 0), nb = tr_data_num_samples(b, 0);
    assert_int_equal(tr_data_num_samples(d, 0), na + nb);
    double w[2] = {(double)na / (double)(na + nb), (double)nb / (double)(na + nb)};
    check_batches(d, 2, w, 12, 1000);
    tr_data_close(d);
    /* one source through the spec = tr_data_open */
    tr_data_spec one = {.data_path = {p, NULL, 1}, .format = "auto", .split = "80,20,0",
                        .seq_length = S, .vocab_size = 256, .global_batch = 5, .seed = 3};
    tr_data *x, *y;
    assert_int_equal(tr_data_open_spec(&one, &x), TR_OK);
    assert_int_equal(tr_data_open(p[0], "auto", "80,20,0", S, 256, 3, &y), TR_OK);
    for (uint64_t g = 0; g < 200; g++) {
        uint64_t j1, j2;
        assert_int_equal(tr_data_sample_index(x, 0, g, &j1), TR_OK);
        assert_int_equal(tr_data_sample_index(y, 0, g, &j2), TR_OK);
        assert_int_equal(j1, j2);
    }
    tr_data_close(x);
    tr_data_close(y);
    /* per-split lists, each used whole: train from u0 + u1 (0.5 each), valid from u1 */
    double half[2] = {1, 1};
    tr_data_spec lists = {.split_paths = {{p, half, 2}, {p + 1, NULL, 1}}, .format = "auto",
                          .split = "969,30,1", .seq_length = S, .vocab_size = 256, .global_batch = 4,
                          .seed = 2};
    assert_int_equal(tr_data_open_spec(&lists, &x), TR_OK);
    assert_int_equal(tr_data_num_samples(x, TR_SPLIT_TRAIN), na + nb);
    assert_int_equal(tr_data_num_samples(x, TR_SPLIT_VALID), nb);
    assert_int_equal(tr_data_num_samples(x, TR_SPLIT_TEST), 0);
    int32_t tok[S + 1];
    assert_int_equal(tr_data_sample(x, TR_SPLIT_VALID, 5, tok), TR_OK);
    assert_int_equal(tok[0], 11);
    assert_int_equal(tr_data_sample(x, TR_SPLIT_TEST, 0, tok), TR_ERR_INVALID);
    tr_data_close(x);
    tr_data_close(a);
    tr_data_close(b);
}

static void test_blend_errors(void **state)
{
    (void)state;
    const char *p[2] = {make_source("e0", 10, 10), scratch("no-such-prefix")};
    double w[2] = {0.5, 0.5};
    tr_data_spec sp = {.data_path = {p, w, 2}, .format = "auto", .split = "100,0,0",
                       .seq_length = S, .vocab_size = 256, .global_batch = 4, .seed = 1};
    tr_data *d;
    assert_int_equal(tr_data_open_spec(&sp, &d), TR_ERR_CONFIG);
    assert_non_null(strstr(tr_errmsg(), "no-such-prefix"));
    sp.seq_length = 100000; /* no training sample in a weighted source */
    p[1] = p[0];
    assert_int_equal(tr_data_open_spec(&sp, &d), TR_ERR_CONFIG);
    assert_non_null(strstr(tr_errmsg(), "no training sample"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_weighted_blend),
        cmocka_unit_test(test_unweighted_and_split_lists),
        cmocka_unit_test(test_blend_errors),
    };
    int rc = cmocka_run_group_tests(tests, scratch_setup, scratch_teardown);
    return rc;
}
