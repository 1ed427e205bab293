/* data/data.h's context-parallel split: rank r of CP holds chunks r and 2 CP - 1 - r of the
 * 2 CP chunks of every sample; the ranks' positions cover each sample exactly once, and
 * tr_cp_keep_chunks compacts (B, T) rows in place to exactly those tokens. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "data/data.h"

static void test_positions(void **state)
{
    (void)state;
    /* T 16, CP 2: chunks of 4; rank 0 holds 0-3 and 12-15, rank 1 holds 4-7 and 8-11 */
    static const int want[2][8] = {{0, 1, 2, 3, 12, 13, 14, 15}, {4, 5, 6, 7, 8, 9, 10, 11}};
    for (int r = 0; r < 2; r++)
        for (int i = 0; i < 8; i++)
            assert_int_equal(tr_cp_position(16, 2, r, i), want[r][i]);
    static const int layouts[][2] = {{16, 2}, {16, 4}, {16, 8}, {24, 3}, {64, 4}, {40, 5}};
    for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++) {
        int T = layouts[l][0], cp = layouts[l][1], seen[64] = {0};
        for (int r = 0; r < cp; r++)
            for (int i = 0; i < T / cp; i++) {
                int p = tr_cp_position(T, cp, r, i);
                assert_true(p >= 0 && p < T);
                seen[p]++;
                if (i > 0) /* ascending within a rank: both chunks in sequence order */
                    assert_true(p > tr_cp_position(T, cp, r, i - 1));
            }
        for (int p = 0; p < T; p++)
            assert_int_equal(seen[p], 1);
    }
}

static void test_keep_chunks(void **state)
{
    (void)state;
    enum { B = 3, T = 24 };
    for (int cp = 1; cp <= 4; cp++) {
        if (T % (2 * cp))
            continue;
        for (int r = 0; r < cp; r++) {
            int32_t rows[B * T];
            for (int n = 0; n < B * T; n++)
                rows[n] = 1000 * (n / T) + n % T; /* sample b, position t */
            tr_cp_keep_chunks(rows, B, T, cp, r);
            int Tl = T / cp;
            for (int b = 0; b < B; b++)
                for (int i = 0; i < Tl; i++)
                    assert_int_equal(rows[b * Tl + i], 1000 * b + tr_cp_position(T, cp, r, i));
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_positions),
        cmocka_unit_test(test_keep_chunks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
