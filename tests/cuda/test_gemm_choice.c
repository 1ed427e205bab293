/* kernels/cuda/gemm_choice.h: the GEMM key's text form and the recorded-choices table (its
 * parser, its device selection, the compiled-in table), on every machine: no GPU needed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/gemm_choice.h"

/* gpt2-124m's fc1 forward with the GELU epilogue, and a batched one with big strides */
static cu_gemm_key key_fc1(void)
{
    cu_gemm_key k;
    memset(&k, 0, sizeof k);
    k.mode = 1, k.ta = 0, k.tb = 1, k.M = 131072, k.N = 3072, k.K = 768;
    k.lda = 768, k.ldb = 768, k.ldc = 3072, k.batch = 1;
    k.alA = 256, k.alB = 256, k.alC = 256, k.out16 = 1, k.bias = 2, k.alBias = 256;
    k.gelu = 1, k.alAux = 256, k.ldAux = 3072;
    return k;
}

static cu_gemm_key key_batched(void)
{
    cu_gemm_key k;
    memset(&k, 0, sizeof k);
    k.mode = 0, k.ta = 1, k.tb = 0, k.M = 64, k.N = 1024, k.K = 1024;
    k.lda = 2304, k.ldb = 2304, k.ldc = 1024, k.batch = 1536;
    k.sA = 3LL << 40, k.sB = 2359296, k.sC = 1048576;
    k.alA = 4, k.alB = 128, k.alC = 256;
    return k;
}

static void test_key_round_trip(void **state)
{
    (void)state;
    cu_gemm_key ks[2] = {key_fc1(), key_batched()};
    for (int i = 0; i < 2; i++) {
        char text[512];
        cu_gemm_key back;
        const char *end = NULL;
        cu_gemm_key_format(&ks[i], text, sizeof text);
        strcat(text, " tail");
        assert_int_equal(cu_gemm_key_parse(text, &back, &end), 0);
        assert_memory_equal(&back, &ks[i], sizeof back);
        assert_string_equal(end, " tail");
    }
}

static void test_key_rejects(void **state)
{
    (void)state;
    static const char *bad[] = {
        "",
        "1 0 1 8 8 8 8 8 8 1 0 0 0 256 256 256 0 0 0 0 0",          /* 21 fields */
        "3 0 1 8 8 8 8 8 8 1 0 0 0 256 256 256 0 0 0 0 0 0",        /* mode 3 */
        "1 2 1 8 8 8 8 8 8 1 0 0 0 256 256 256 0 0 0 0 0 0",        /* ta 2 */
        "1 0 1 -8 8 8 8 8 8 1 0 0 0 256 256 256 0 0 0 0 0 0",       /* M < 0 */
        "1 0 1 8 8 0 8 8 8 1 0 0 0 256 256 256 0 0 0 0 0 0",        /* K 0 */
        "1 0 1 8 8 8 8 8 8 1 0 0 0 3 256 256 0 0 0 0 0 0",          /* alignment 3 */
        "1 0 1 8 8 8 8 8 8 1 0 0 0 512 256 256 0 0 0 0 0 0",        /* alignment 512 */
        "1 0 1 8 8 8 8 8 8 1 0 0 0 256 256 256 0 3 0 0 0 0",        /* bias 3 */
        "1 0 1 8 8 8 8 8 8 1 0 0 0 256 256 256 0 0 0 4 0 0",        /* gelu 4 */
        "1 0 1 8 8 8 8 8 8 1 0 0 0 256 256 256 0 0 6 0 0 0",        /* bias alignment 6 */
        "1 0 1 8x 8 8 8 8 8 1 0 0 0 256 256 256 0 0 0 0 0 0",       /* junk in a number */
        "1 0 1 99999999999 8 8 8 8 8 1 0 0 0 256 256 256 0 0 0 0 0 0", /* past int */
        "1 0 1 8 8 8 8 8 8 1 0 0 99999999999999999999 256 256 256 0 0 0 0 0 0",
        "+1 0 1 8 8 8 8 8 8 1 0 0 0 256 256 256 0 0 0 0 0 0",
        /* fields that disagree (gemm_plan.c makes no such key; the probe would write through
         * a stand-in pointer) */
        "1 0 1 8 8 8 8 8 8 1 64 0 0 256 256 256 0 0 0 0 0 0",       /* a stride, no batch */
        "1 0 1 8 8 8 8 8 8 1 0 0 0 256 256 256 0 1 0 0 0 0",        /* bias, no alignment */
        "1 0 1 8 8 8 8 8 8 1 0 0 0 256 256 256 0 0 256 0 0 0",      /* alignment, no bias */
        "1 0 1 8 8 8 8 8 8 1 0 0 0 256 256 256 0 0 0 3 0 0",        /* BGRADB, no sums */
        "1 0 1 8 8 8 8 8 8 1 0 0 0 256 256 256 1 1 256 3 0 0",      /* BGRADB, bf16 C */
        "1 0 1 8 8 8 8 8 8 1 0 0 0 256 256 256 1 2 256 1 0 0",      /* GELU, no aux */
        "1 0 1 8 8 8 8 8 8 1 0 0 0 256 256 256 0 0 0 1 256 8",      /* GELU, fp32 C */
        "1 0 1 8 8 8 8 8 8 1 0 0 0 256 256 256 1 2 256 1 256 4",    /* aux rows < N */
        "1 0 1 8 8 12 8 8 8 1 0 0 0 256 256 256 1 0 0 1 256 12",    /* aux rows not 8k */
        "1 0 1 8 8 8 8 8 8 1 0 0 0 256 256 256 1 2 256 2 256 8",    /* DGELU with a bias */
        "1 0 1 8 8 8 8 8 8 1 0 0 0 256 256 256 0 0 0 0 256 0",      /* aux alignment alone */
        "1 0 1 8 8 8 8 8 8 1 0 0 0 256 256 256 0 0 0 0 0 8",        /* aux rows alone */
        "1 0 1 8 8 8 8 8 8 1 0 0 0 256 256 256 0 2 256 0 0 0",      /* bf16 bias, fp32 C */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cu_gemm_key k;
        if (cu_gemm_key_parse(bad[i], &k, NULL) != -1)
            fail_msg("accepted key %zu: \"%s\"", i, bad[i]);
    }
    static const char *good[] = {/* the same fields agreeing */
        "1 0 1 8 8 8 8 8 8 1 0 0 0 256 256 256 0 1 4 0 0 0",   /* an fp32 bias */
        "1 0 1 8 8 8 8 8 8 1 0 0 0 256 256 256 0 1 256 3 0 0", /* BGRADB */
        "1 0 1 8 8 8 8 8 8 1 0 0 0 256 256 256 1 0 0 1 256 8", /* GELU, no bias */
        "1 0 1 8 8 8 8 8 8 1 0 0 0 256 256 256 1 0 0 2 16 16", /* DGELU */
        "1 0 1 8 8 8 8 8 8 2 64 64 64 256 256 256 0 0 0 0 0 0"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        cu_gemm_key k;
        if (cu_gemm_key_parse(good[i], &k, NULL) != 0)
            fail_msg("refused key %zu: \"%s\"", i, good[i]);
    }
}

#define ALGO1 "1 2 3 4 5 6 7 ffffffffffffffff"
#define ALGO2 "0x10 20 30 40 50 60 70 80"

static char *table_text(void)
{
    static char text[4096];
    char k1[512], k2[512];
    cu_gemm_key a = key_fc1(), b = key_batched();
    cu_gemm_key_format(&a, k1, sizeof k1);
    cu_gemm_key_format(&b, k2, sizeof k2);
    snprintf(text, sizeof text,
             "# recorded by benchmarks/gemm_choose\n"
             "device 132 NVIDIA H200\n"
             "cublaslt 130001\n"
             "choice %s " ALGO1 "  # 1.20 ms, heuristic's first 1.31\n"
             "\n"
             "choice %s " ALGO2 "\r\n"
             "device 132 NVIDIA H100 80GB HBM3\n"
             "cublaslt 130001\n"
             "choice %s 9 9 9 9 9 9 9 9\n",
             k1, k2, k1);
    return text;
}

static void test_table_select_find(void **state)
{
    (void)state;
    cu_gemm_choices t;
    char err[256] = "";
    assert_int_equal(cu_gemm_choices_parse(table_text(), "t", &t, err, sizeof err), 0);
    assert_int_equal(t.n_blocks, 2);
    assert_int_equal(t.n, 3);
    assert_string_equal(t.blocks[1].name, "NVIDIA H100 80GB HBM3");
    assert_int_equal(cu_gemm_choices_select(&t, "NVIDIA H200", 132, 130001), 2);
    cu_gemm_key a = key_fc1(), b = key_batched(), c = key_fc1();
    const uint64_t *x = cu_gemm_choices_find(&t, &a), *y = cu_gemm_choices_find(&t, &b);
    assert_non_null(x);
    assert_non_null(y);
    assert_true(x[0] == 1 && x[6] == 7 && x[7] == UINT64_MAX);
    assert_true(y[0] == 0x10 && y[7] == 0x80);
    c.alA = 128; /* a key that differs in one alignment has no choice */
    assert_null(cu_gemm_choices_find(&t, &c));
    cu_gemm_choices_free(&t);

    /* another device, another SM count or cuBLASLt version: its own block or nothing */
    assert_int_equal(cu_gemm_choices_parse(table_text(), "t", &t, err, sizeof err), 0);
    assert_int_equal(cu_gemm_choices_select(&t, "NVIDIA H100 80GB HBM3", 132, 130001), 1);
    assert_true(cu_gemm_choices_find(&t, &a)[0] == 9);
    cu_gemm_choices_free(&t);
    int other[][2] = {{114, 130001}, {132, 130000}};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(cu_gemm_choices_parse(table_text(), "t", &t, err, sizeof err), 0);
        assert_int_equal(cu_gemm_choices_select(&t, "NVIDIA H200", other[i][0], other[i][1]), 0);
        assert_null(cu_gemm_choices_find(&t, &a));
        cu_gemm_choices_free(&t);
    }
    assert_null(cu_gemm_choices_find(NULL, &a));
}

/* each bad table fails with its origin, the line and what is wrong */
static void test_table_errors(void **state)
{
    (void)state;
    char k1[512];
    cu_gemm_key a = key_fc1();
    cu_gemm_key_format(&a, k1, sizeof k1);
    char long_line[2000];
    memset(long_line, 'x', sizeof long_line - 1);
    long_line[sizeof long_line - 1] = 0;
    struct {
        const char *text, *want;
    } cases[] = {
        {"choice %s " ALGO1, "f:1: choice before any device line"},
        {"device 132 H200\ncublaslt 1\nchoice %s 1 2 3 4 5 6 7", "f:3: choice: algorithm word 8"},
        {"device 132 H200\nchoice %s 1 2 3 4 5 6 7 g", "f:2: choice: algorithm word 8"},
        {"device 132 H200\nchoice %s " ALGO1 " 9", "f:2: choice: unexpected text"},
        {"device 132 H200\nchoice %s 1 2 3 4 5 6 7 10000000000000000", "f:2: choice: algorithm word 8"},
        {"device 132 H200\nchoice 1 2 3", "f:2: choice: expected 22 key integers"},
        {"device 132 H200\nchoice %s " ALGO1 "\nchoice %s " ALGO2,
         "f:3: choice: this key already has a choice"},
        {"device 132 H200\ncublaslt 5\ncublaslt 6", "f:3: cublaslt: one a block"},
        {"cublaslt 5", "f:1: cublaslt: one a block"},
        {"device 132 H200\ncublaslt 5 6", "f:2: cublaslt: expected one version number"},
        {"device H200", "f:1: device: expected <SM count> <name>"},
        {"device 132", "f:1: device: a name of 1-255 characters"},
        {"\n\nchoose 1", "f:3: expected `device`, `cublaslt` or `choice`"},
        {"device 132 H200\ncublaslt 5\ndevice 114 H200\ncublaslt 5\ndevice 132 H200\ncublaslt 5",
         "f:6: cublaslt: a second block for this device and version"},
        {"device 132 H#200 # a '#' inside the name is kept\ncublaslt 5\nchoice %s " ALGO1 " #x",
         "(parses)"},
        {"device 132 H200\n%s", "f:2: line longer than 1023 characters"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char text[4096], err[256] = "";
        const char *arg = strstr(cases[i].want, "longer") ? long_line : k1;
        snprintf(text, sizeof text, cases[i].text, arg, arg);
        cu_gemm_choices t;
        if (!strcmp(cases[i].want, "(parses)")) {
            if (cu_gemm_choices_parse(text, "f", &t, err, sizeof err))
                fail_msg("case %zu: %s", i, err);
            assert_string_equal(t.blocks[0].name, "H#200");
            assert_int_equal(t.n, 1);
            cu_gemm_choices_free(&t);
            continue;
        }
        assert_int_equal(cu_gemm_choices_parse(text, "f", &t, err, sizeof err), -1);
        if (strncmp(err, cases[i].want, strlen(cases[i].want)))
            fail_msg("case %zu: got \"%s\", want \"%s...\"", i, err, cases[i].want);
        assert_int_equal(t.n, 0); /* (nothing kept, nothing leaked: the sanitizer build) */
    }
}

/* the compiled-in table parses (a bad edit of gemm_choices.inc fails here, not on a GPU) */
static void test_builtin_table(void **state)
{
    (void)state;
    cu_gemm_choices t;
    char err[256] = "";
    if (cu_gemm_choices_parse(cu_gemm_choices_builtin(), "gemm_choices.inc", &t, err, sizeof err))
        fail_msg("%s", err);
    for (int i = 0; i < t.n_blocks; i++)
        assert_true(t.blocks[i].version > 0); /* every block names its cuBLASLt version */
    cu_gemm_choices_free(&t);
}

/* random edits of a good table: parsed or refused with a message, never a crash */
static void test_table_mutations(void **state)
{
    (void)state;
    const char *good = table_text();
    size_t n = strlen(good);
    char *text = malloc(n + 64);
    assert_non_null(text);
    uint64_t r = 88172645463325252ull;
    static const char subst[] = " \n#-x0f9\r\t";
    for (int trial = 0; trial < 4000; trial++) {
        memcpy(text, good, n + 1);
        for (int e = 0; e < 1 + trial % 4; e++) {
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            size_t at = (size_t)(r % n);
            if (r >> 60 == 0)
                text[at] = 0; /* truncated */
            else
                text[at] = subst[(r >> 32) % (sizeof subst - 1)];
        }
        cu_gemm_choices t;
        char err[256] = "";
        if (cu_gemm_choices_parse(text, "m", &t, err, sizeof err))
            assert_true(!strncmp(err, "m:", 2));
        else
            cu_gemm_choices_select(&t, "NVIDIA H200", 132, 130001);
        cu_gemm_choices_free(&t);
    }
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_round_trip),     cmocka_unit_test(test_key_rejects),
        cmocka_unit_test(test_table_select_find),  cmocka_unit_test(test_table_errors),
        cmocka_unit_test(test_builtin_table),      cmocka_unit_test(test_table_mutations),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
