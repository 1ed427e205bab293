/* data/ sampling: exact sample tokens on a hand-built dataset, the train/valid/test split
 * (rounding, the at-least-one rule, malformed strings), the per-epoch shuffle (a
 * permutation, deterministic, epoch- and seed-dependent) and document lookup. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdint.h>

#include "data_test_util.h"

/* 5 documents, 19 tokens:
 *   d0 = 1 2 3 0 | d1 = 4 5 0 | d2 = 6 7 8 9 10 0 | d3 = 11 0 | d4 = 12 13 14 0 */
static const uint16_t five_tokens[19] = {1, 2, 3, 0, 4, 5, 0, 6, 7, 8, 9, 10, 0, 11, 0,
                                         12, 13, 14, 0};
static const uint64_t five_lengths[5] = {4, 3, 6, 2, 4};

static void write_five(void)
{
    assert_int_equal(tr_indexed_write(scratch("five"), five_tokens, five_lengths, 5), TR_OK);
}

static void test_samples_are_the_expected_tokens(void **state)
{
    (void)state;
    write_five();
    /* S = 4: (19 - 1) / 4 = 4 samples, sample j = tokens [4j, 4j + 5) */
    static const int32_t want[4][5] = {
        {1, 2, 3, 0, 4}, {4, 5, 0, 6, 7}, {7, 8, 9, 10, 0}, {0, 11, 0, 12, 13}};
    tr_data *d = open_expect(scratch("five"), "auto", "1,0,0", 4, 256, TR_OK, NULL);
    assert_int_equal(tr_data_num_samples(d, TR_SPLIT_TRAIN), 4);
    assert_int_equal(tr_data_num_samples(d, TR_SPLIT_VALID), 0);
    assert_int_equal(tr_data_num_samples(d, TR_SPLIT_TEST), 0);
    int seen[4] = {0};
    for (uint64_t g = 0; g < 12; g++) { /* three epochs */
        uint64_t j;
        int32_t got[5];
        assert_int_equal(tr_data_sample_index(d, TR_SPLIT_TRAIN, g, &j), TR_OK);
        assert_true(j < 4);
        assert_int_equal(tr_data_sample(d, TR_SPLIT_TRAIN, g, got), TR_OK);
        assert_memory_equal(got, want[j], sizeof want[j]);
        if (g < 4)
            seen[j]++;
    }
    for (int j = 0; j < 4; j++)
        assert_int_equal(seen[j], 1);
    int32_t t[5];
    assert_int_equal(tr_data_sample(d, TR_SPLIT_VALID, 0, t), TR_ERR_INVALID);
    assert_non_null(strstr(tr_errmsg(), "the validation split has no sample of 5 tokens (it "
                                        "holds 0 tokens in 0 documents)"));
    assert_int_equal(tr_data_sample(d, 3, 0, t), TR_ERR_INVALID);
    assert_non_null(strstr(tr_errmsg(), "split 3 is not 0 (train), 1 (validation) or 2"));
    tr_data_close(d);
}

static void test_split_streams(void **state)
{
    (void)state;
    write_five();
    /* "3,1,1" of 5 documents: train d0-d2 (13 tokens), valid d3 (2), test d4 (4) */
    tr_data *d = open_expect(scratch("five"), "auto", "3,1,1", 1, 256, TR_OK, NULL);
    uint64_t fd, nd, ft, nt;
    tr_data_split_info(d, TR_SPLIT_TRAIN, &fd, &nd, &ft, &nt);
    assert_true(fd == 0 && nd == 3 && ft == 0 && nt == 13);
    tr_data_split_info(d, TR_SPLIT_VALID, &fd, &nd, &ft, &nt);
    assert_true(fd == 3 && nd == 1 && ft == 13 && nt == 2);
    tr_data_split_info(d, TR_SPLIT_TEST, &fd, &nd, &ft, &nt);
    assert_true(fd == 4 && nd == 1 && ft == 15 && nt == 4);
    assert_int_equal(tr_data_num_samples(d, TR_SPLIT_TRAIN), 12);
    assert_int_equal(tr_data_num_samples(d, TR_SPLIT_VALID), 1);
    assert_int_equal(tr_data_num_samples(d, TR_SPLIT_TEST), 3);
    int32_t got[2];
    assert_int_equal(tr_data_sample(d, TR_SPLIT_VALID, 7, got), TR_OK);
    assert_true(got[0] == 11 && got[1] == 0);
    static const int32_t test_want[3][2] = {{12, 13}, {13, 14}, {14, 0}};
    for (uint64_t g = 0; g < 3; g++) {
        uint64_t j;
        assert_int_equal(tr_data_sample_index(d, TR_SPLIT_TEST, g, &j), TR_OK);
        assert_int_equal(tr_data_sample(d, TR_SPLIT_TEST, g, got), TR_OK);
        assert_memory_equal(got, test_want[j], sizeof got);
    }
    /* every train sample is two consecutive tokens of d0..d2 */
    for (uint64_t g = 0; g < 12; g++) {
        uint64_t j;
        assert_int_equal(tr_data_sample_index(d, TR_SPLIT_TRAIN, g, &j), TR_OK);
        assert_int_equal(tr_data_sample(d, TR_SPLIT_TRAIN, g, got), TR_OK);
        assert_true(got[0] == five_tokens[j] && got[1] == five_tokens[j + 1]);
    }
    /* document lookup, split-relative */
    uint64_t doc, off;
    assert_int_equal(tr_data_locate(d, TR_SPLIT_TEST, 2, &doc, &off), TR_OK);
    assert_true(doc == 4 && off == 2);
    for (uint64_t o = 0; o < 13; o++) {
        assert_int_equal(tr_data_locate(d, TR_SPLIT_TRAIN, o, &doc, &off), TR_OK);
        uint64_t want_doc = o < 4 ? 0 : o < 7 ? 1 : 2, start = o < 4 ? 0 : o < 7 ? 4 : 7;
        assert_true(doc == want_doc && off == o - start);
    }
    assert_int_equal(tr_data_locate(d, TR_SPLIT_VALID, 2, &doc, &off), TR_ERR_INVALID);
    assert_non_null(strstr(tr_errmsg(), "token 2 is past the end of the validation split"));
    tr_data_close(d);
}

/* Document lookup across empty documents (no sequence) and empty sequences. */
static void test_locate_with_empty_documents(void **state)
{
    (void)state;
    const uint16_t tokens[5] = {1, 0, 2, 3, 0};
    const int32_t sizes[3] = {2, 0, 3};
    const int64_t doc_idx[5] = {0, 1, 1, 2, 3}; /* d1 has no sequence, d2 an empty one */
    write_raw_indexed(scratch("holes"), 8, 2, tokens, sizes, 3, doc_idx, 5);
    tr_data *d = open_expect(scratch("holes"), "auto", "1,0,0", 1, 256, TR_OK, NULL);
    assert_int_equal(tr_data_num_documents(d), 4);
    static const uint64_t want_doc[5] = {0, 0, 3, 3, 3}, want_off[5] = {0, 1, 0, 1, 2};
    for (uint64_t o = 0; o < 5; o++) {
        uint64_t doc, off;
        assert_int_equal(tr_data_locate(d, TR_SPLIT_TRAIN, o, &doc, &off), TR_OK);
        assert_int_equal(doc, want_doc[o]);
        assert_int_equal(off, want_off[o]);
    }
    tr_data_close(d);
}

/* n one-token documents */
static void write_n_docs(const char *name, uint64_t n)
{
    uint16_t *t = calloc(n + 1, sizeof *t);
    uint64_t *len = calloc(n + 1, sizeof *len);
    assert_true(t && len);
    for (uint64_t i = 0; i < n; i++) {
        t[i] = (uint16_t)(i % 200 + 1);
        len[i] = 1;
    }
    assert_int_equal(tr_indexed_write(scratch(name), t, len, n), TR_OK);
    free(t);
    free(len);
}

static void expect_split_docs(const char *name, const char *split, uint64_t a, uint64_t b,
                              uint64_t c)
{
    tr_data *d = open_expect(scratch(name), "auto", split, 1, 256, TR_OK, NULL);
    uint64_t n[3], first[3];
    for (int k = 0; k < 3; k++)
        tr_data_split_info(d, k, &first[k], &n[k], NULL, NULL);
    if (n[0] != a || n[1] != b || n[2] != c)
        print_error("split %s of %s: %llu,%llu,%llu documents, want %llu,%llu,%llu\n", split,
                    name, (unsigned long long)n[0], (unsigned long long)n[1],
                    (unsigned long long)n[2], (unsigned long long)a, (unsigned long long)b,
                    (unsigned long long)c);
    assert_true(n[0] == a && n[1] == b && n[2] == c);
    assert_true(first[0] == 0 && first[1] == a && first[2] == a + b);
    tr_data_close(d);
}

static void test_split_rounding(void **state)
{
    (void)state;
    write_n_docs("d100", 100);
    write_n_docs("d1000", 1000);
    write_n_docs("d3", 3);
    write_n_docs("d2", 2);
    write_n_docs("d4", 4);
    write_n_docs("d7", 7);
    expect_split_docs("d100", "98,2,0", 98, 2, 0);
    expect_split_docs("d100", "1,0,0", 100, 0, 0);
    expect_split_docs("d100", "0,1,0", 0, 100, 0);
    expect_split_docs("d1000", "969,30,1", 969, 30, 1);
    expect_split_docs("d1000", "949, 50, 1", 949, 50, 1);
    expect_split_docs("d100", "999,1,0", 99, 1, 0); /* 0.1 of a document still gets one */
    expect_split_docs("d3", "98,1,1", 1, 1, 1);     /* each non-zero weight gets one */
    expect_split_docs("d2", "1,1,1", 1, 0, 1);      /* not enough documents to go round */
    expect_split_docs("d4", "0.5,0.25,0.25", 2, 1, 1);
    expect_split_docs("d7", "1,1,1", 2, 3, 2); /* boundaries round(7/3)=2, round(14/3)=5 */
    /* llm.c: the one stream is cut by token count */
    uint16_t t[100];
    for (int i = 0; i < 100; i++)
        t[i] = (uint16_t)i;
    assert_int_equal(tr_llmc_shard_write(scratch("s100.bin"), t, 100), TR_OK);
    tr_data *d = open_expect(scratch("s100.bin"), "auto", "50,30,20", 1, 256, TR_OK, NULL);
    uint64_t ft, nt;
    tr_data_split_info(d, TR_SPLIT_VALID, NULL, NULL, &ft, &nt);
    assert_true(ft == 50 && nt == 30);
    assert_int_equal(tr_data_num_samples(d, TR_SPLIT_TRAIN), 49);
    assert_int_equal(tr_data_num_samples(d, TR_SPLIT_VALID), 29);
    assert_int_equal(tr_data_num_samples(d, TR_SPLIT_TEST), 19);
    for (uint64_t g = 0; g < 29; g++) {
        uint64_t j;
        int32_t got[2];
        assert_int_equal(tr_data_sample_index(d, TR_SPLIT_VALID, g, &j), TR_OK);
        assert_int_equal(tr_data_sample(d, TR_SPLIT_VALID, g, got), TR_OK);
        assert_true(got[0] == (int32_t)(50 + j) && got[1] == got[0] + 1);
    }
    tr_data_close(d);
}

static void test_malformed_split_strings(void **state)
{
    (void)state;
    write_five();
    static const struct {
        const char *split, *needle;
    } bad[] = {
        {"a,b,c", "weight 1 is not a non-negative number"},
        {"1,b,3", "weight 2 is not a non-negative number"},
        {"-1,2,3", "weight 1 is not a non-negative number"},
        {"1,2,-3", "weight 3 is not a non-negative number"},
        {"0,0,0", "the weights are all zero"},
        {"1,2,3,4", "more than three weights"},
        {"1,,2", "weight 2 is not a non-negative number"},
        {"", "weight 1 is not a non-negative number"},
        {"1;2;3", "unexpected ';' after weight 1"},
        {"1,2,3,", "more than three weights"},
        {"1x,2,3", "unexpected 'x' after weight 1"},
        {"nan,1,1", "weight 1 is not a non-negative number"},
        {"inf,1,1", "weight 1 is not a non-negative number"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        open_expect(scratch("five"), "auto", bad[i].split, 2, 256, TR_ERR_CONFIG, bad[i].needle);
        assert_non_null(strstr(tr_errmsg(), "data.split"));
    }
    open_expect(scratch("five"), "auto", NULL, 2, 256, TR_ERR_CONFIG, "data.split is missing");
    /* fewer than three weights: the missing ones are 0 (Megatron-LM's rule, and what the
     * config's check of data.split accepts); '/' separates too */
    const char *short_forms[] = {"100", "98,2", "98/2/0"};
    for (size_t i = 0; i < 3; i++) {
        tr_data *d = open_expect(scratch("five"), "auto", short_forms[i], 2, 256, TR_OK, NULL);
        assert_true(tr_data_num_samples(d, TR_SPLIT_TRAIN) > 0);
        assert_int_equal(tr_data_num_samples(d, TR_SPLIT_TEST), 0);
        if (i == 0)
            assert_int_equal(tr_data_num_samples(d, TR_SPLIT_VALID), 0);
        tr_data_close(d);
    }
    /* a bad split is reported before the files are touched */
    open_expect(scratch("nothing"), "auto", "1,2,x", 2, 256, TR_ERR_CONFIG, "data.split");
}

/* One document of tokens 0..n: with S = 1 sample j starts with token j, so the tokens show
 * the permutation. */
static tr_data *open_counting(uint64_t n, const char *split, uint64_t seed)
{
    static uint64_t written = 0;
    if (written != n) {
        uint16_t *t = malloc((n + 1) * sizeof *t);
        assert_non_null(t);
        for (uint64_t i = 0; i <= n; i++)
            t[i] = (uint16_t)i;
        uint64_t len = n + 1;
        assert_int_equal(tr_indexed_write(scratch("count"), t, &len, 1), TR_OK);
        free(t);
        written = n;
    }
    tr_data *d = NULL;
    assert_int_equal(tr_data_open(scratch("count"), "auto", split, 1, 65536, seed, &d), TR_OK);
    assert_int_equal(tr_data_num_samples(d, TR_SPLIT_TRAIN), n);
    return d;
}

static void epoch_perm(tr_data *d, uint64_t n, uint64_t epoch, uint64_t *perm)
{
    for (uint64_t p = 0; p < n; p++) {
        int32_t got[2];
        assert_int_equal(tr_data_sample_index(d, TR_SPLIT_TRAIN, epoch * n + p, &perm[p]),
                         TR_OK);
        assert_int_equal(tr_data_sample(d, TR_SPLIT_TRAIN, epoch * n + p, got), TR_OK);
        assert_true(got[0] == (int32_t)perm[p] && got[1] == got[0] + 1);
    }
}

static void test_shuffle(void **state)
{
    (void)state;
    enum { N = 1000 };
    static uint64_t p0[N], p1[N], q0[N], q1[N], r0[N];
    tr_data *d = open_counting(N, "1,0,0", 1234);
    epoch_perm(d, N, 0, p0);
    epoch_perm(d, N, 1, p1);
    /* a permutation, and not the identity */
    static int seen[N];
    memset(seen, 0, sizeof seen);
    int fixed = 0;
    for (int p = 0; p < N; p++) {
        assert_true(p0[p] < N);
        seen[p0[p]]++;
        fixed += p0[p] == (uint64_t)p;
    }
    for (int j = 0; j < N; j++)
        assert_int_equal(seen[j], 1);
    assert_true(fixed < 10);
    /* epochs differ */
    assert_memory_not_equal(p0, p1, sizeof p0);
    /* jumping between epochs (the cache is rebuilt) gives the same answers */
    uint64_t j;
    assert_int_equal(tr_data_sample_index(d, TR_SPLIT_TRAIN, 17, &j), TR_OK);
    assert_int_equal(j, p0[17]);
    assert_int_equal(tr_data_sample_index(d, TR_SPLIT_TRAIN, N + 17, &j), TR_OK);
    assert_int_equal(j, p1[17]);
    assert_int_equal(tr_data_sample_index(d, TR_SPLIT_TRAIN, UINT64_MAX, &j), TR_OK);
    assert_true(j < N);
    tr_data_close(d);
    /* deterministic across handles */
    d = open_counting(N, "1,0,0", 1234);
    epoch_perm(d, N, 1, q1);
    epoch_perm(d, N, 0, q0);
    assert_memory_equal(p0, q0, sizeof p0);
    assert_memory_equal(p1, q1, sizeof p1);
    tr_data_close(d);
    /* another seed, another order */
    d = open_counting(N, "1,0,0", 99);
    epoch_perm(d, N, 0, r0);
    assert_memory_not_equal(p0, r0, sizeof p0);
    tr_data_close(d);
}

/* Over many epochs, each sample lands in position 0 about equally often. */
static void test_shuffle_uniformity(void **state)
{
    (void)state;
    tr_data *d = open_counting(4, "1,0,0", 7);
    int count[4] = {0};
    const int epochs = 4000;
    for (int e = 0; e < epochs; e++) {
        uint64_t j;
        assert_int_equal(tr_data_sample_index(d, TR_SPLIT_TRAIN, (uint64_t)e * 4, &j), TR_OK);
        count[j]++;
    }
    for (int j = 0; j < 4; j++)
        assert_true(count[j] > 850 && count[j] < 1150); /* 1000 +- ~5 sigma */
    tr_data_close(d);
}

/* Train, validation and test are shuffled independently. */
static void test_shuffle_per_split(void **state)
{
    (void)state;
    write_n_docs("d300", 300);
    tr_data *d = open_expect(scratch("d300"), "auto", "1,1,1", 1, 256, TR_OK, NULL);
    uint64_t n = tr_data_num_samples(d, TR_SPLIT_TRAIN);
    assert_int_equal(n, 99);
    assert_int_equal(tr_data_num_samples(d, TR_SPLIT_VALID), 99);
    uint64_t a[99], b[99];
    for (uint64_t g = 0; g < 99; g++) {
        assert_int_equal(tr_data_sample_index(d, TR_SPLIT_TRAIN, g, &a[g]), TR_OK);
        assert_int_equal(tr_data_sample_index(d, TR_SPLIT_VALID, g, &b[g]), TR_OK);
    }
    assert_memory_not_equal(a, b, sizeof a);
    tr_data_close(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_samples_are_the_expected_tokens),
        cmocka_unit_test(test_split_streams),
        cmocka_unit_test(test_locate_with_empty_documents),
        cmocka_unit_test(test_split_rounding),
        cmocka_unit_test(test_malformed_split_strings),
        cmocka_unit_test(test_shuffle),
        cmocka_unit_test(test_shuffle_uniformity),
        cmocka_unit_test(test_shuffle_per_split),
    };
    return cmocka_run_group_tests_name("data sampling", tests, scratch_setup,
                                       scratch_teardown);
}
