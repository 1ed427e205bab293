/* data/sft.c: packed fine-tuning samples checked against the examples they came from.
 * Examples "P<k>:" + "r<k>..." (prompt / response of known bytes, byte-level ids) are
 * preprocessed, then every sample of an epoch is taken apart by its segments: each segment is
 * one example's first tokens at position ids 0.., its weights 1 exactly where the target is a
 * response byte or the EOD of the same example; every example appears once per epoch (in one
 * piece, cut only when longer than T + 1); padding has weight 0; pack 0 gives one example per
 * sample; samples are a function of (g, seed) alone. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "data/data.h"

#define NEX 40
enum { T = 48 };

static char dir[256], prefix[300];
static char prompts[NEX][32], responses[NEX][96];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/trident-sft-data-%d", (int)getpid());
    snprintf(prefix, sizeof prefix, "%s/ex", dir);
    char cmd[400], jsonl[300];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
    assert_int_equal(system(cmd), 0);
    snprintf(jsonl, sizeof jsonl, "%s/ex.jsonl", dir);
    FILE *f = fopen(jsonl, "w");
    assert_non_null(f);
    for (int k = 0; k < NEX; k++) {
        int rl = 1 + (k * 7) % 70; /* 1 .. 70 bytes: some longer than T + 1 with the prompt */
        snprintf(prompts[k], sizeof prompts[k], "P%d:", k);
        for (int i = 0; i < rl; i++)
            responses[k][i] = (char)('a' + (k + i) % 26);
        responses[k][rl] = 0;
        fprintf(f, "{\"prompt\": \"%s\", \"response\": \"%s\"}\n", prompts[k], responses[k]);
    }
    fclose(f);
    tr_tokenizer_files tf = {.type = "ByteLevel"};
    tr_tokenizer *t;
    assert_int_equal(tr_tokenizer_open(&tf, &t), TR_OK);
    const char *inputs[] = {jsonl}, *keys[] = {"prompt", "response"};
    tr_preprocess_options o = {.inputs = inputs, .n_inputs = 1, .output_prefix = prefix,
                               .json_keys = keys, .n_json_keys = 2, .tokenizer = t,
                               .workers = 1, .sft = TR_SFT_PAIR};
    tr_preprocess_stats st;
    assert_int_equal(tr_preprocess(&o, &st), TR_OK);
    assert_int_equal(st.documents, NEX);
    tr_tokenizer_free(t);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) != 0;
}

/* The example whose prompt is the start of tok (its "P<k>:"), or -1. */
static int which(const int32_t *tok, int n)
{
    for (int k = 0; k < NEX; k++) {
        int pl = (int)strlen(prompts[k]), ok = n >= pl;
        for (int i = 0; ok && i < pl; i++)
            ok = tok[i] == (unsigned char)prompts[k][i];
        if (ok && (n == pl || tok[pl] < '0' || tok[pl] > '9'))
            return k;
    }
    return -1;
}

/* Check every sample of the train split's epoch 0; returns the number of examples seen. */
static int check_epoch(tr_data *d, int pack, int *seen)
{
    uint64_t n = tr_data_num_samples(d, TR_SPLIT_TRAIN);
    int32_t tok[T + 1], seg[T], pos[T];
    float w[T];
    int examples = 0, multi = 0;
    for (uint64_t g = 0; g < n; g++) {
        assert_int_equal(tr_data_sample_sft(d, TR_SPLIT_TRAIN, g, tok, w, seg, pos), TR_OK);
        int p = 0, in_sample = 0;
        while (p < T) {
            int s0 = p, k;
            while (p < T && seg[p] == seg[s0])
                p++;
            int len = p - s0; /* the run's input positions */
            k = which(tok + s0, len + 1);
            if (k < 0) { /* padding: the rest of the row, weight 0 */
                assert_int_equal(p, T);
                for (int q = s0; q < T; q++)
                    assert_true(w[q] == 0.0f && tok[q] == 0);
                break;
            }
            in_sample++;
            examples++;
            seen[k]++;
            int pl = (int)strlen(prompts[k]), rl = (int)strlen(responses[k]), L = pl + rl + 1;
            int cut = L > T + 1 - s0 ? T + 1 - s0 : L; /* tokens of it in the sample */
            assert_int_equal(len, cut < T - s0 ? cut : T - s0);
            for (int i = 0; i < cut; i++) { /* its tokens, in order */
                int want = i < pl ? (unsigned char)prompts[k][i]
                           : i < pl + rl ? (unsigned char)responses[k][i - pl] : 0;
                assert_int_equal(tok[s0 + i], want);
            }
            for (int i = 0; i < len; i++) {
                assert_int_equal(pos[s0 + i], i);
                /* learned: the target (token i + 1) is the same example's response or EOD */
                float want = i + 1 < cut && i + 1 >= pl ? 1.0f : 0.0f;
                assert_true(w[s0 + i] == want);
            }
            assert_true(cut == L || s0 == 0); /* only an example alone in its row is cut */
        }
        multi += in_sample > 1;
        if (!pack)
            assert_int_equal(in_sample, 1);
    }
    if (pack)
        assert_true(multi > 0);
    return examples;
}

static void test_packed_samples(void **state)
{
    (void)state;
    for (int pack = 1; pack >= 0; pack--) {
        tr_data *d;
        assert_int_equal(tr_data_open_sft(prefix, "100,0,0", T, 256, 11, pack, &d), TR_OK);
        assert_true(tr_data_is_sft(d));
        int seen[NEX] = {0};
        int n = check_epoch(d, pack, seen);
        assert_int_equal(n, NEX);
        for (int k = 0; k < NEX; k++)
            assert_int_equal(seen[k], 1); /* every example once per epoch */
        if (!pack)
            assert_int_equal(tr_data_num_samples(d, TR_SPLIT_TRAIN), NEX);
        else
            assert_true(tr_data_num_samples(d, TR_SPLIT_TRAIN) < NEX);
        tr_data_close(d);
    }
}

static void test_layout_free_and_seeded(void **state)
{
    (void)state;
    tr_data *a, *b, *c;
    assert_int_equal(tr_data_open_sft(prefix, "80,20,0", T, 256, 5, 1, &a), TR_OK);
    assert_int_equal(tr_data_open_sft(prefix, "80,20,0", T, 256, 5, 1, &b), TR_OK);
    assert_int_equal(tr_data_open_sft(prefix, "80,20,0", T, 256, 6, 1, &c), TR_OK);
    assert_true(tr_data_num_samples(a, TR_SPLIT_VALID) > 0);
    int32_t t1[T + 1], t2[T + 1], s1[T], s2[T], p1[T], p2[T];
    float w1[T], w2[T];
    int differ = 0;
    uint64_t n = tr_data_num_samples(a, TR_SPLIT_TRAIN);
    /* any order of asking (a rank reads only its own samples) gives the same sample g */
    for (uint64_t i = 0; i < 3 * n; i++) {
        uint64_t g = (i * 7919) % (3 * n);
        assert_int_equal(tr_data_sample_sft(a, TR_SPLIT_TRAIN, g, t1, w1, s1, p1), TR_OK);
        assert_int_equal(tr_data_sample_sft(b, TR_SPLIT_TRAIN, 3 * n - 1 - i, t2, w2, s2, p2), TR_OK);
        assert_int_equal(tr_data_sample_sft(b, TR_SPLIT_TRAIN, g, t2, w2, s2, p2), TR_OK);
        assert_memory_equal(t1, t2, sizeof t1);
        assert_memory_equal(w1, w2, sizeof w1);
        assert_memory_equal(s1, s2, sizeof s1);
        assert_memory_equal(p1, p2, sizeof p1);
        int32_t t3[T + 1];
        assert_int_equal(tr_data_sample(c, TR_SPLIT_TRAIN, g, t3), TR_OK);
        differ += memcmp(t1, t3, sizeof t1) != 0;
    }
    assert_true(differ > 0); /* another seed, another order */
    /* no test split: a located error, not a crash */
    assert_int_equal(tr_data_sample_sft(a, TR_SPLIT_TEST, 0, t1, w1, s1, p1), TR_ERR_INVALID);
    uint64_t j;
    assert_int_equal(tr_data_sample_index(a, TR_SPLIT_TRAIN, 0, &j), TR_ERR_INVALID);
    tr_data_close(a);
    tr_data_close(b);
    tr_data_close(c);
}

static void test_bad_files(void **state)
{
    (void)state;
    tr_data *d = NULL;
    char other[300], cmd[4096];
    /* a mask of other documents: named */
    snprintf(other, sizeof other, "%s/other", dir);
    snprintf(cmd, sizeof cmd, "cp %s.bin %s.bin && cp %s.idx %s.idx", prefix, other, prefix,
             other);
    assert_int_equal(system(cmd), 0);
    assert_int_not_equal(tr_data_open_sft(other, "1,0,0", T, 256, 1, 1, &d), TR_OK);
    assert_non_null(strstr(tr_errmsg(), "loss mask"));
    tr_tokenizer_files tf = {.type = "ByteLevel"};
    tr_tokenizer *t;
    assert_int_equal(tr_tokenizer_open(&tf, &t), TR_OK);
    char jsonl[300], p2[300];
    snprintf(jsonl, sizeof jsonl, "%s/two.jsonl", dir);
    FILE *f = fopen(jsonl, "w");
    fprintf(f, "{\"p\": \"a\", \"r\": \"b\"}\n{\"p\": \"c\", \"r\": \"d\"}\n");
    fclose(f);
    snprintf(p2, sizeof p2, "%s/two", dir);
    const char *inputs[] = {jsonl}, *keys[] = {"p", "r"};
    tr_preprocess_options o = {.inputs = inputs, .n_inputs = 1, .output_prefix = p2,
                               .json_keys = keys, .n_json_keys = 2, .tokenizer = t,
                               .workers = 1, .sft = TR_SFT_PAIR};
    tr_preprocess_stats st;
    assert_int_equal(tr_preprocess(&o, &st), TR_OK);
    tr_tokenizer_free(t);
    snprintf(cmd, sizeof cmd, "cp %s_loss_mask.bin %s_loss_mask.bin && cp %s_loss_mask.idx "
             "%s_loss_mask.idx", p2, other, p2, other);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(tr_data_open_sft(other, "1,0,0", T, 256, 1, 1, &d), TR_ERR_INVALID);
    assert_non_null(strstr(tr_errmsg(), "documents"));
    assert_null(d);
    /* a mask value that is neither 0 nor 1 (it would be a loss weight of 200: found by
     * fuzzing): named */
    snprintf(cmd, sizeof cmd, "cp %s.bin %s.bin && cp %s.idx %s.idx && cp %s_loss_mask.bin "
             "%s_loss_mask.bin && cp %s_loss_mask.idx %s_loss_mask.idx", prefix, other, prefix,
             other, prefix, other, prefix, other);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(tr_data_open_sft(other, "1,0,0", T, 256, 1, 1, &d), TR_OK);
    tr_data_close(d);
    d = NULL;
    char mask_bin[320];
    snprintf(mask_bin, sizeof mask_bin, "%s_loss_mask.bin", other);
    f = fopen(mask_bin, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, 5, SEEK_SET), 0);
    assert_int_equal(fputc(200, f), 200);
    fclose(f);
    assert_int_not_equal(tr_data_open_sft(other, "1,0,0", T, 256, 1, 1, &d), TR_OK);
    assert_non_null(strstr(tr_errmsg(), "loss mask"));
    assert_non_null(strstr(tr_errmsg(), "200"));
    assert_null(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_packed_samples),
        cmocka_unit_test(test_layout_free_and_seeded),
        cmocka_unit_test(test_bad_files),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
