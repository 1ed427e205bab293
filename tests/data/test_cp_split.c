/* data/data.h's context-parallel split: rank r of CP holds chunks r and 2 CP - 1 - r of the
 * 2 CP chunks of every sample; the ranks' positions cover each sample exactly once, and
 * tr_cp_keep_chunks compacts (B, T) rows in place to exactly those tokens; tr_cp_doc_starts
 * finds each token's document start from packed ids. */
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

/* tr_cp_doc_starts: each local token's document start from the compacted packing, and the
 * first token whose position id breaks the restart / count-up rule */
static void test_doc_starts(void **state)
{
    (void)state;
    /* T 16, CP 2: documents [0, 6), [6, 13), [13, 16) (segments 0, 1, 2) */
    enum { T = 16, CP = 2, TL = T / CP };
    static const int32_t want[CP][TL] = {{0, 0, 0, 0, 6, 13, 13, 13}, {0, 0, 6, 6, 6, 6, 6, 6}};
    for (int r = 0; r < CP; r++) {
        int32_t seg[T], pos[T], starts[TL];
        for (int t = 0; t < T; t++) {
            seg[t] = t < 6 ? 0 : t < 13 ? 1 : 2;
            pos[t] = t - (t < 6 ? 0 : t < 13 ? 6 : 13);
        }
        tr_cp_keep_chunks(seg, 1, T, CP, r);
        tr_cp_keep_chunks(pos, 1, T, CP, r);
        assert_int_equal(tr_cp_doc_starts(seg, pos, 1, T, CP, r, starts), -1);
        assert_memory_equal(starts, want[r], sizeof starts);
        if (r == 0)
            continue;
        /* rank 1 holds positions 4-11: ids 4 5 | 0 1 2 3 4 5 */
        static const struct {
            int at, id, bad;
        } broken[] = {{3, 0, 3},  /* a restart inside a segment */
                      {2, 1, 2},  /* a new segment that does not restart */
                      {0, 5, 0},  /* a document starting before the sample */
                      {5, 4, 5}}; /* a count that skips */
        for (size_t i = 0; i < sizeof broken / sizeof broken[0]; i++) {
            int32_t p[TL];
            memcpy(p, pos, sizeof p);
            p[broken[i].at] = broken[i].id;
            assert_int_equal(tr_cp_doc_starts(seg, p, 1, T, CP, r, starts), broken[i].bad);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_positions),
        cmocka_unit_test(test_keep_chunks),
        cmocka_unit_test(test_doc_starts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
