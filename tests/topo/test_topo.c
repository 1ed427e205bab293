/* topo/: rank <-> coordinates in both orders, every group kind for small and large worlds,
 * the per-rank view against the full table, node placement, and bad input. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/core.h"
#include "topo/topo.h"

static void assert_row(const int *got, const int *want, int n)
{
    for (int i = 0; i < n; i++)
        assert_int_equal(got[i], want[i]);
}

/* Checks every invariant of a layout's table and, when `per_rank`, compares the per-rank
 * view of every rank with it. */
static void check_layout_ep(int world, int tp, int cp, int pp, int ep, const char *order,
                            int per_rank)
{
    tr_topo t;
    assert_int_equal(tr_topo_init_ep(&t, world, tp, cp, pp, ep, order), TR_OK);
    assert_int_equal(t.dp * t.cp * t.tp * t.pp, world);
    tr_topo_table tab;
    assert_int_equal(tr_topo_table_build(&t, &tab), TR_OK);
    int *seen = calloc((size_t)world, sizeof *seen);
    assert_non_null(seen);
    int D = t.dp, C = cp;
    int want_n[TR_GROUP_KINDS] = {D * C * pp, tp * C * pp, D * C * tp, D * C, D * C * tp,
                                  D * tp * pp, tp * pp, D / ep * C * tp * pp, ep * tp * pp};
    int want_size[TR_GROUP_KINDS] = {tp, D, pp, tp * pp, pp > 1 ? 2 : 1, C, D * C, ep,
                                     D / ep * C};
    for (int k = 0; k < TR_GROUP_KINDS; k++) {
        assert_int_equal(tab.num_groups[k], want_n[k]);
        assert_int_equal(tab.group_size[k], want_size[k]);
        memset(seen, 0, (size_t)world * sizeof *seen);
        int prev_first = -1;
        for (int g = 0; g < tab.num_groups[k]; g++) {
            const int *row = tr_topo_table_group(&tab, (tr_group_kind)k, g);
            assert_true(row[0] > prev_first); /* rows sorted by first rank */
            prev_first = row[0];
            tr_coords c0 = tr_topo_coords(&t, row[0]);
            for (int i = 0; i < tab.group_size[k]; i++) {
                int r = row[i];
                assert_true(r >= 0 && r < world);
                if (i > 0)
                    assert_true(r > row[i - 1]); /* members ascending */
                seen[r]++;
                tr_coords c = tr_topo_coords(&t, r);
                assert_int_equal(tr_topo_rank(&t, c), r);
                int idx, pos;
                assert_int_equal(tr_topo_group_of(&t, (tr_group_kind)k, r, &idx, &pos), TR_OK);
                assert_int_equal(idx, g);
                assert_int_equal(pos, i);
                switch (k) {
                case TR_GROUP_TP:
                    assert_int_equal(c.dp, c0.dp), assert_int_equal(c.pp, c0.pp);
                    assert_int_equal(c.cp, c0.cp);
                    assert_int_equal(c.tp, i);
                    break;
                case TR_GROUP_DP:
                    assert_int_equal(c.tp, c0.tp), assert_int_equal(c.pp, c0.pp);
                    assert_int_equal(c.cp, c0.cp);
                    assert_int_equal(c.dp, i);
                    if (cp == 1)
                        assert_int_equal(tr_topo_dp_group_index(&t, c.tp, c.pp), g);
                    break;
                case TR_GROUP_CP:
                    assert_int_equal(c.tp, c0.tp), assert_int_equal(c.pp, c0.pp);
                    assert_int_equal(c.dp, c0.dp);
                    assert_int_equal(c.cp, i);
                    break;
                case TR_GROUP_DP_CP: /* cp varies faster than dp: position = cp + dp * CP */
                    assert_int_equal(c.tp, c0.tp), assert_int_equal(c.pp, c0.pp);
                    assert_int_equal(c.cp + c.dp * cp, i);
                    break;
                case TR_GROUP_PP:
                    assert_int_equal(c.tp, c0.tp), assert_int_equal(c.dp, c0.dp);
                    assert_int_equal(c.cp, c0.cp);
                    assert_int_equal(c.pp, i);
                    break;
                case TR_GROUP_MP:
                    assert_int_equal(c.dp, c0.dp), assert_int_equal(c.cp, c0.cp);
                    break;
                case TR_GROUP_EP: /* dp = edp * EP + ep: the ep digit varies */
                    assert_int_equal(c.tp, c0.tp), assert_int_equal(c.pp, c0.pp);
                    assert_int_equal(c.cp, c0.cp);
                    assert_int_equal(c.dp / ep, c0.dp / ep);
                    assert_int_equal(c.dp % ep, i);
                    break;
                case TR_GROUP_EDP: /* the same experts: ep fixed, cp + edp * CP varies */
                    assert_int_equal(c.tp, c0.tp), assert_int_equal(c.pp, c0.pp);
                    assert_int_equal(c.dp % ep, c0.dp % ep);
                    assert_int_equal(c.cp + c.dp / ep * cp, i);
                    break;
                default:
                    assert_int_equal(c.tp, c0.tp), assert_int_equal(c.dp, c0.dp);
                    assert_int_equal(c.cp, c0.cp);
                    assert_int_equal(c.pp, i == 0 ? 0 : pp - 1);
                }
            }
        }
        for (int r = 0; r < world; r++) {
            int want = 1;
            if (k == TR_GROUP_EMBED) {
                tr_coords c = tr_topo_coords(&t, r);
                want = c.pp == 0 || c.pp == pp - 1;
            }
            assert_int_equal(seen[r], want); /* every rank in exactly one group of the kind */
        }
    }
    if (per_rank) {
        for (int r = 0; r < world; r++) {
            tr_rank_groups g;
            assert_int_equal(tr_topo_rank_groups(&t, r, &g), TR_OK);
            assert_int_equal(g.rank, r);
            for (int k = 0; k < TR_GROUP_KINDS; k++) {
                if (g.index[k] < 0) {
                    assert_int_equal(k, TR_GROUP_EMBED);
                    assert_null(g.members[k]);
                    assert_int_equal(g.size[k], 0);
                    continue;
                }
                assert_int_equal(g.size[k], tab.group_size[k]);
                assert_row(g.members[k], tr_topo_table_group(&tab, (tr_group_kind)k, g.index[k]),
                           g.size[k]);
                assert_int_equal(g.members[k][g.pos[k]], r);
            }
            assert_int_equal(g.is_first_stage, g.coords.pp == 0);
            assert_int_equal(g.is_last_stage, g.coords.pp == pp - 1);
            tr_coords n = g.coords, p = g.coords;
            n.pp = (n.pp + 1) % pp;
            p.pp = (p.pp + pp - 1) % pp;
            assert_int_equal(g.next_pp_rank, tr_topo_rank(&t, n));
            assert_int_equal(g.prev_pp_rank, tr_topo_rank(&t, p));
            tr_rank_groups_free(&g);
        }
    }
    free(seen);
    tr_topo_table_free(&tab);
}

static void check_layout_cp(int world, int tp, int cp, int pp, const char *order, int per_rank)
{
    check_layout_ep(world, tp, cp, pp, 1, order, per_rank);
}

static void check_layout(int world, int tp, int pp, const char *order, int per_rank)
{
    check_layout_cp(world, tp, 1, pp, order, per_rank);
}

static void test_mapping_default_order(void **state)
{
    (void)state;
    tr_topo t;
    assert_int_equal(tr_topo_init(&t, 16, 2, 4, NULL), TR_OK);
    assert_int_equal(t.dp, 2);
    assert_int_equal(t.order, TR_ORDER_TP_DP_PP);
    for (int r = 0; r < 16; r++) {
        tr_coords c = tr_topo_coords(&t, r);
        assert_int_equal(r, c.tp + c.dp * 2 + c.pp * 4); /* global = tp + dp*TP + pp*TP*DP */
        assert_int_equal(tr_topo_rank(&t, c), r);
    }
    tr_coords c = tr_topo_coords(&t, 13);
    assert_int_equal(c.tp, 1), assert_int_equal(c.dp, 0), assert_int_equal(c.pp, 3);
    assert_int_equal(tr_topo_init(&t, 16, 2, 4, "tp-dp-pp"), TR_OK);
    assert_int_equal(tr_topo_rank(&t, c), 13);
}

static void test_mapping_tp_pp_dp(void **state)
{
    (void)state;
    tr_topo t;
    assert_int_equal(tr_topo_init(&t, 16, 2, 4, "tp-pp-dp"), TR_OK);
    assert_string_equal(tr_topo_order_name(t.order), "tp-pp-dp");
    for (int r = 0; r < 16; r++) {
        tr_coords c = tr_topo_coords(&t, r);
        assert_int_equal(r, c.tp + c.pp * 2 + c.dp * 8);
        assert_int_equal(tr_topo_rank(&t, c), r);
    }
    tr_topo_table tab;
    assert_int_equal(tr_topo_table_build(&t, &tab), TR_OK);
    int pp0[] = {0, 2, 4, 6}, pp3[] = {9, 11, 13, 15}, dp0[] = {0, 8}, mp1[] = {8, 9, 10, 11, 12,
                                                                               13, 14, 15};
    assert_row(tr_topo_table_group(&tab, TR_GROUP_PP, 0), pp0, 4);
    assert_row(tr_topo_table_group(&tab, TR_GROUP_PP, 3), pp3, 4);
    assert_row(tr_topo_table_group(&tab, TR_GROUP_DP, 0), dp0, 2);
    assert_row(tr_topo_table_group(&tab, TR_GROUP_MP, 1), mp1, 8);
    int emb2[] = {8, 14};
    assert_row(tr_topo_table_group(&tab, TR_GROUP_EMBED, 2), emb2, 2);
    tr_topo_table_free(&tab);
    check_layout(16, 2, 4, "tp-pp-dp", 1);
}

/* Megatron's documented example: 16 ranks, TP=2, PP=4. */
static void test_groups_w16(void **state)
{
    (void)state;
    tr_topo t;
    assert_int_equal(tr_topo_init(&t, 16, 2, 4, NULL), TR_OK);
    tr_topo_table tab;
    assert_int_equal(tr_topo_table_build(&t, &tab), TR_OK);
    for (int g = 0; g < 8; g++) {
        int tp[] = {2 * g, 2 * g + 1};
        assert_row(tr_topo_table_group(&tab, TR_GROUP_TP, g), tp, 2);
    }
    int dp[8][2] = {{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}};
    for (int g = 0; g < 8; g++)
        assert_row(tr_topo_table_group(&tab, TR_GROUP_DP, g), dp[g], 2);
    for (int g = 0; g < 4; g++) {
        int pp[] = {g, g + 4, g + 8, g + 12}, emb[] = {g, g + 12};
        assert_row(tr_topo_table_group(&tab, TR_GROUP_PP, g), pp, 4);
        assert_row(tr_topo_table_group(&tab, TR_GROUP_EMBED, g), emb, 2);
    }
    int mp0[] = {0, 1, 4, 5, 8, 9, 12, 13}, mp1[] = {2, 3, 6, 7, 10, 11, 14, 15};
    assert_row(tr_topo_table_group(&tab, TR_GROUP_MP, 0), mp0, 8);
    assert_row(tr_topo_table_group(&tab, TR_GROUP_MP, 1), mp1, 8);
    tr_topo_table_free(&tab);

    tr_rank_groups g;
    assert_int_equal(tr_topo_rank_groups(&t, 5, &g), TR_OK);
    assert_int_equal(g.coords.tp, 1), assert_int_equal(g.coords.dp, 0);
    assert_int_equal(g.coords.pp, 1);
    int tp5[] = {4, 5}, dp5[] = {5, 7}, pp5[] = {1, 5, 9, 13};
    assert_row(g.members[TR_GROUP_TP], tp5, 2);
    assert_row(g.members[TR_GROUP_DP], dp5, 2);
    assert_row(g.members[TR_GROUP_PP], pp5, 4);
    assert_row(g.members[TR_GROUP_MP], mp0, 8);
    assert_null(g.members[TR_GROUP_EMBED]);
    assert_int_equal(g.index[TR_GROUP_EMBED], -1);
    assert_false(g.is_first_stage), assert_false(g.is_last_stage);
    assert_int_equal(g.next_pp_rank, 9), assert_int_equal(g.prev_pp_rank, 1);
    tr_rank_groups_free(&g);
    assert_int_equal(tr_topo_rank_groups(&t, 15, &g), TR_OK);
    int emb15[] = {3, 15};
    assert_row(g.members[TR_GROUP_EMBED], emb15, 2);
    assert_int_equal(g.pos[TR_GROUP_EMBED], 1);
    assert_true(g.is_last_stage);
    assert_int_equal(g.next_pp_rank, 3), assert_int_equal(g.prev_pp_rank, 11);
    tr_rank_groups_free(&g);
    check_layout(16, 2, 4, NULL, 1);
}

/* The 4-D grid: W = DP x CP x TP x PP, CP right after TP (Megatron's tp-cp-dp-pp). */
static void test_context_parallel(void **state)
{
    (void)state;
    tr_topo t;
    /* 16 ranks, TP 2, CP 2, PP 2: DP 2; global = tp + cp*2 + dp*4 + pp*8 */
    assert_int_equal(tr_topo_init_cp(&t, 16, 2, 2, 2, NULL), TR_OK);
    assert_int_equal(t.dp, 2), assert_int_equal(t.cp, 2);
    for (int r = 0; r < 16; r++) {
        tr_coords c = tr_topo_coords(&t, r);
        assert_int_equal(r, c.tp + c.cp * 2 + c.dp * 4 + c.pp * 8);
    }
    tr_topo_table tab;
    assert_int_equal(tr_topo_table_build(&t, &tab), TR_OK);
    int cp0[] = {0, 2}, cp1[] = {1, 3}, cp7[] = {13, 15};
    assert_row(tr_topo_table_group(&tab, TR_GROUP_CP, 0), cp0, 2);
    assert_row(tr_topo_table_group(&tab, TR_GROUP_CP, 1), cp1, 2);
    assert_row(tr_topo_table_group(&tab, TR_GROUP_CP, 7), cp7, 2);
    int dp0[] = {0, 4}, dpcp0[] = {0, 2, 4, 6}, dpcp3[] = {9, 11, 13, 15};
    assert_row(tr_topo_table_group(&tab, TR_GROUP_DP, 0), dp0, 2);
    assert_row(tr_topo_table_group(&tab, TR_GROUP_DP_CP, 0), dpcp0, 4);
    assert_row(tr_topo_table_group(&tab, TR_GROUP_DP_CP, 3), dpcp3, 4);
    int pp0[] = {0, 8}, tp1[] = {2, 3}, mp1[] = {2, 3, 10, 11};
    assert_row(tr_topo_table_group(&tab, TR_GROUP_PP, 0), pp0, 2);
    assert_row(tr_topo_table_group(&tab, TR_GROUP_TP, 1), tp1, 2);
    assert_row(tr_topo_table_group(&tab, TR_GROUP_MP, 1), mp1, 4);
    assert_string_equal(tr_group_kind_name(TR_GROUP_CP), "cp");
    assert_string_equal(tr_group_kind_name(TR_GROUP_DP_CP), "dp_cp");
    tr_topo_table_free(&tab);
    /* tp-pp-dp: global = tp + cp*TP + pp*TP*CP + dp*TP*CP*PP */
    assert_int_equal(tr_topo_init_cp(&t, 16, 2, 2, 2, "tp-pp-dp"), TR_OK);
    for (int r = 0; r < 16; r++) {
        tr_coords c = tr_topo_coords(&t, r);
        assert_int_equal(r, c.tp + c.cp * 2 + c.pp * 4 + c.dp * 8);
    }
    /* CP alone: 4 ranks, CP 4 is one CP group of everyone, DP 1 */
    assert_int_equal(tr_topo_init_cp(&t, 4, 1, 4, 1, NULL), TR_OK);
    assert_int_equal(t.dp, 1);
    int all[] = {0, 1, 2, 3}, buf[4];
    assert_int_equal(tr_topo_group_members(&t, TR_GROUP_CP, 0, buf), TR_OK);
    assert_row(buf, all, 4);
    assert_int_equal(tr_topo_group_members(&t, TR_GROUP_DP_CP, 0, buf), TR_OK);
    assert_row(buf, all, 4);
    assert_int_equal(tr_topo_num_groups(&t, TR_GROUP_DP), 4);
    static const struct {
        int w, tp, cp, pp;
    } cases[] = {{2, 1, 2, 1}, {4, 1, 4, 1}, {4, 1, 2, 1}, {4, 2, 2, 1}, {4, 1, 2, 2},
                 {8, 2, 2, 2}, {8, 1, 2, 2}, {12, 2, 3, 1}, {16, 2, 2, 2}, {24, 2, 2, 3}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        check_layout_cp(cases[i].w, cases[i].tp, cases[i].cp, cases[i].pp, NULL, 1);
        check_layout_cp(cases[i].w, cases[i].tp, cases[i].cp, cases[i].pp, "tp-pp-dp", 1);
    }
    /* CP 1 changes nothing: tr_topo_init's layout and groups */
    tr_topo a, b;
    assert_int_equal(tr_topo_init(&a, 16, 2, 4, "tp-pp-dp"), TR_OK);
    assert_int_equal(tr_topo_init_cp(&b, 16, 2, 1, 4, "tp-pp-dp"), TR_OK);
    assert_memory_equal(&a, &b, sizeof a);
    assert_int_equal(tr_topo_init_cp(&t, 12, 2, 4, 1, NULL), TR_ERR_CONFIG);
    assert_string_equal(tr_errmsg(), "world size 12 is not divisible by tensor parallel size 2 x "
                                     "context parallel size 4 x pipeline parallel size 1 = 8");
    assert_int_equal(tr_topo_init_cp(&t, 12, 2, 0, 1, NULL), TR_ERR_CONFIG);
    assert_string_equal(tr_errmsg(), "context parallel size 0 must be at least 1");
}

/* Expert parallelism: EP divides DP, dp = edp * EP + ep (Megatron's tp-cp-ep-dp-pp). */
static void test_expert_parallel(void **state)
{
    (void)state;
    tr_topo t;
    /* 16 ranks, TP 2, PP 2, EP 2: DP 4; EP groups pair dp 0,1 and dp 2,3 */
    assert_int_equal(tr_topo_init_ep(&t, 16, 2, 1, 2, 2, NULL), TR_OK);
    assert_int_equal(t.dp, 4), assert_int_equal(t.ep, 2);
    tr_topo_table tab;
    assert_int_equal(tr_topo_table_build(&t, &tab), TR_OK);
    int ep0[] = {0, 2}, ep1[] = {1, 3}, ep2[] = {4, 6}, ep7[] = {13, 15};
    assert_row(tr_topo_table_group(&tab, TR_GROUP_EP, 0), ep0, 2);
    assert_row(tr_topo_table_group(&tab, TR_GROUP_EP, 1), ep1, 2);
    assert_row(tr_topo_table_group(&tab, TR_GROUP_EP, 2), ep2, 2);
    assert_row(tr_topo_table_group(&tab, TR_GROUP_EP, 7), ep7, 2);
    int edp0[] = {0, 4}, edp1[] = {1, 5}, edp2[] = {2, 6}, edp7[] = {11, 15};
    assert_row(tr_topo_table_group(&tab, TR_GROUP_EDP, 0), edp0, 2);
    assert_row(tr_topo_table_group(&tab, TR_GROUP_EDP, 1), edp1, 2);
    assert_row(tr_topo_table_group(&tab, TR_GROUP_EDP, 2), edp2, 2);
    assert_row(tr_topo_table_group(&tab, TR_GROUP_EDP, 7), edp7, 2);
    int dp0[] = {0, 2, 4, 6};
    assert_row(tr_topo_table_group(&tab, TR_GROUP_DP, 0), dp0, 4);
    assert_string_equal(tr_group_kind_name(TR_GROUP_EP), "ep");
    assert_string_equal(tr_group_kind_name(TR_GROUP_EDP), "edp");
    tr_topo_table_free(&tab);
    tr_rank_groups g;
    assert_int_equal(tr_topo_rank_groups(&t, 6, &g), TR_OK); /* dp 3: ep 1, edp 1 */
    assert_int_equal(g.pos[TR_GROUP_EP], 1), assert_int_equal(g.pos[TR_GROUP_EDP], 1);
    int ep6[] = {4, 6}, edp6[] = {2, 6};
    assert_row(g.members[TR_GROUP_EP], ep6, 2);
    assert_row(g.members[TR_GROUP_EDP], edp6, 2);
    tr_rank_groups_free(&g);
    /* tp-pp-dp, EP = DP: one EP group per (tp, pp), EDP groups of one rank */
    assert_int_equal(tr_topo_init_ep(&t, 8, 1, 1, 2, 4, "tp-pp-dp"), TR_OK);
    int buf[4], ep_tpd[] = {1, 3, 5, 7};
    assert_int_equal(tr_topo_group_members(&t, TR_GROUP_EP, 1, buf), TR_OK);
    assert_row(buf, ep_tpd, 4);
    assert_int_equal(tr_topo_group_size(&t, TR_GROUP_EDP), 1);
    static const struct {
        int w, tp, cp, pp, ep;
    } cases[] = {{2, 1, 1, 1, 2}, {4, 1, 1, 1, 2}, {4, 1, 1, 1, 4}, {8, 2, 1, 1, 2},
                 {8, 1, 1, 2, 2}, {8, 1, 1, 2, 4}, {16, 2, 1, 2, 2}, {16, 2, 2, 2, 2},
                 {24, 1, 1, 3, 4}, {24, 2, 1, 1, 3}, {32, 2, 2, 2, 2}, {16, 1, 1, 1, 8}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        check_layout_ep(cases[i].w, cases[i].tp, cases[i].cp, cases[i].pp, cases[i].ep, NULL, 1);
        check_layout_ep(cases[i].w, cases[i].tp, cases[i].cp, cases[i].pp, cases[i].ep,
                        "tp-pp-dp", 1);
    }
    /* every kind but EP / EDP lists exactly the groups of EP 1 (the dp digit split in two) */
    static const struct {
        int w, tp, cp, pp, ep;
    } same[] = {{16, 2, 1, 2, 2}, {16, 1, 2, 2, 4}, {24, 1, 1, 3, 4}, {32, 2, 2, 2, 2}};
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
        for (int o = 0; o < 2; o++) {
            const char *order = o ? "tp-pp-dp" : NULL;
            tr_topo a, b;
            assert_int_equal(tr_topo_init_cp(&a, same[i].w, same[i].tp, same[i].cp, same[i].pp,
                                             order),
                             TR_OK);
            assert_int_equal(tr_topo_init_ep(&b, same[i].w, same[i].tp, same[i].cp, same[i].pp,
                                             same[i].ep, order),
                             TR_OK);
            tr_topo_table ta, tb;
            assert_int_equal(tr_topo_table_build(&a, &ta), TR_OK);
            assert_int_equal(tr_topo_table_build(&b, &tb), TR_OK);
            for (int k = 0; k < TR_GROUP_EP; k++) {
                assert_int_equal(ta.num_groups[k], tb.num_groups[k]);
                assert_int_equal(ta.group_size[k], tb.group_size[k]);
                assert_memory_equal(ta.ranks[k], tb.ranks[k],
                                    (size_t)ta.num_groups[k] * (size_t)ta.group_size[k] *
                                        sizeof(int));
            }
            /* EP 1: EP groups are single ranks, EDP is DP_CP */
            assert_int_equal(ta.group_size[TR_GROUP_EP], 1);
            assert_int_equal(ta.num_groups[TR_GROUP_EDP], ta.num_groups[TR_GROUP_DP_CP]);
            assert_memory_equal(ta.ranks[TR_GROUP_EDP], ta.ranks[TR_GROUP_DP_CP],
                                (size_t)ta.num_groups[TR_GROUP_DP_CP] *
                                    (size_t)ta.group_size[TR_GROUP_DP_CP] * sizeof(int));
            tr_topo_table_free(&ta);
            tr_topo_table_free(&tb);
        }
    }
    assert_int_equal(tr_topo_init_ep(&t, 12, 2, 1, 1, 4, NULL), TR_ERR_CONFIG);
    assert_string_equal(tr_errmsg(), "data-parallel size 6 (world 12 / (tp 2 x cp 1 x pp 1)) is "
                                     "not divisible by expert parallel size 4");
    assert_int_equal(t.world, 0);
    assert_int_equal(tr_topo_init_ep(&t, 12, 2, 1, 1, 0, NULL), TR_ERR_CONFIG);
    assert_string_equal(tr_errmsg(), "expert parallel size 0 must be at least 1");
}

static void test_small_worlds(void **state)
{
    (void)state;
    static const struct {
        int w, tp, pp;
    } cases[] = {{1, 1, 1},  {2, 1, 1},  {2, 2, 1},  {2, 1, 2},  {6, 1, 1},  {6, 2, 1},
                 {6, 3, 1},  {6, 1, 3},  {6, 2, 3},  {6, 3, 2},  {6, 1, 2},  {8, 2, 2},
                 {8, 4, 2},  {8, 1, 8},  {8, 8, 1},  {8, 2, 4},  {16, 4, 2}, {16, 2, 2},
                 {16, 1, 4}, {16, 16, 1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        check_layout(cases[i].w, cases[i].tp, cases[i].pp, NULL, 1);
        check_layout(cases[i].w, cases[i].tp, cases[i].pp, "tp-pp-dp", 1);
    }
    /* W=1: one group of each kind holding rank 0; first and last stage at once. */
    tr_topo t;
    assert_int_equal(tr_topo_init(&t, 1, 1, 1, NULL), TR_OK);
    tr_rank_groups g;
    assert_int_equal(tr_topo_rank_groups(&t, 0, &g), TR_OK);
    for (int k = 0; k < TR_GROUP_KINDS; k++) {
        assert_int_equal(g.size[k], 1);
        assert_int_equal(g.members[k][0], 0);
    }
    assert_true(g.is_first_stage && g.is_last_stage);
    assert_int_equal(g.next_pp_rank, 0);
    tr_rank_groups_free(&g);
    /* PP=1: the embedding group is just the one stage. */
    assert_int_equal(tr_topo_init(&t, 6, 3, 1, NULL), TR_OK);
    int one[1];
    assert_int_equal(tr_topo_group_size(&t, TR_GROUP_EMBED), 1);
    assert_int_equal(tr_topo_group_members(&t, TR_GROUP_EMBED, 3, one), TR_OK);
    assert_int_equal(one[0], 3);
}

static void test_bloom_176b(void **state)
{
    (void)state;
    tr_topo t;
    assert_int_equal(tr_topo_init(&t, 384, 4, 12, NULL), TR_OK);
    assert_int_equal(t.dp, 8);
    check_layout(384, 4, 12, NULL, 1);
    tr_topo_table tab;
    assert_int_equal(tr_topo_table_build(&t, &tab), TR_OK);
    assert_int_equal(tab.num_groups[TR_GROUP_TP], 96);
    assert_int_equal(tab.num_groups[TR_GROUP_DP], 48);
    assert_int_equal(tab.num_groups[TR_GROUP_PP], 32);
    assert_int_equal(tab.num_groups[TR_GROUP_MP], 8);
    assert_int_equal(tab.group_size[TR_GROUP_MP], 48);
    for (int g = 0; g < 32; g++) {
        const int *pp = tr_topo_table_group(&tab, TR_GROUP_PP, g);
        const int *emb = tr_topo_table_group(&tab, TR_GROUP_EMBED, g);
        assert_int_equal(emb[0], pp[0]);
        assert_int_equal(emb[1], pp[11]);
        assert_int_equal(pp[1] - pp[0], 32); /* stride of pp = TP*DP */
    }
    /* On 8-GPU nodes TP stays inside a node, every PP group spans 12 nodes. */
    tr_node_report rep;
    assert_int_equal(tr_topo_node_report(&t, 8, &rep), TR_OK);
    assert_int_equal(rep.num_nodes, 48);
    assert_int_equal(rep.crossing[TR_GROUP_TP], 0);
    assert_int_equal(rep.warning[0], '\0');
    assert_int_equal(rep.crossing[TR_GROUP_PP], 32);
    assert_int_equal(rep.max_nodes[TR_GROUP_PP], 12);
    assert_int_equal(rep.crossing[TR_GROUP_DP], 48); /* DP stride 4: 8 ranks over 4 nodes */
    assert_int_equal(rep.max_nodes[TR_GROUP_DP], 4);
    tr_topo_table_free(&tab);
}

static void test_w100000_table_time(void **state)
{
    (void)state;
    tr_topo t;
    assert_int_equal(tr_topo_init(&t, 100000, 8, 25, NULL), TR_OK);
    assert_int_equal(t.dp, 500);
    double t0 = tr_now();
    tr_topo_table tab;
    assert_int_equal(tr_topo_table_build(&t, &tab), TR_OK);
    double build_s = tr_now() - t0;
    t0 = tr_now();
    tr_rank_groups g;
    for (int r = 0; r < 1000; r++) {
        assert_int_equal(tr_topo_rank_groups(&t, r * 100 + 7, &g), TR_OK);
        tr_rank_groups_free(&g);
    }
    double per_rank_s = (tr_now() - t0) / 1000;
    t0 = tr_now();
    tr_node_report rep;
    assert_int_equal(tr_topo_node_report(&t, 8, &rep), TR_OK);
    double report_s = tr_now() - t0;
    printf("W=100000 TP=8 PP=25 DP=500: table %.2f ms, one rank's groups %.1f us, "
           "node report %.2f ms\n",
           build_s * 1e3, per_rank_s * 1e6, report_s * 1e3);
    assert_true(build_s < 1.0);
    assert_int_equal(rep.crossing[TR_GROUP_TP], 0);
    tr_topo_table_free(&tab);
    check_layout(100000, 8, 25, NULL, 0);
    check_layout(100000, 4, 10, "tp-pp-dp", 0);
}

static void test_node_report(void **state)
{
    (void)state;
    tr_topo t;
    assert_int_equal(tr_topo_init(&t, 16, 2, 4, NULL), TR_OK);
    tr_node_report rep;
    assert_int_equal(tr_topo_node_report(&t, 8, &rep), TR_OK);
    assert_int_equal(rep.num_nodes, 2);
    assert_int_equal(rep.crossing[TR_GROUP_TP], 0);
    assert_int_equal(rep.crossing[TR_GROUP_DP], 0);
    assert_int_equal(rep.crossing[TR_GROUP_PP], 4); /* [0,4,8,12]: nodes 0,0,1,1 */
    assert_int_equal(rep.max_nodes[TR_GROUP_PP], 2);
    assert_int_equal(rep.crossing[TR_GROUP_MP], 2);
    assert_int_equal(rep.crossing[TR_GROUP_EMBED], 4);
    assert_int_equal(rep.first_crossing_tp, -1);
    assert_string_equal(rep.warning, "");
    assert_int_equal(tr_topo_node_of(&t, 8, 9), 1);
    assert_int_equal(tr_topo_group_nodes(&t, 8, TR_GROUP_PP, 0), 2);
    assert_int_equal(tr_topo_group_nodes(&t, 8, TR_GROUP_TP, 3), 1);
    assert_int_equal(tr_topo_group_nodes(&t, 16, TR_GROUP_MP, 1), 1);

    /* 3 GPUs per node: TP group [2,3] straddles nodes 0 and 1. */
    assert_int_equal(tr_topo_node_report(&t, 3, &rep), TR_OK);
    assert_int_equal(rep.num_nodes, 6);
    assert_int_equal(rep.first_crossing_tp, 1);
    assert_true(rep.crossing[TR_GROUP_TP] > 0);
    assert_non_null(strstr(rep.warning, "tensor-parallel groups span more than one node"));
    assert_non_null(strstr(rep.warning, "ranks 2..3"));
    assert_non_null(strstr(rep.warning, "3 GPUs per node"));

    /* TP larger than a node: every TP group crosses. */
    assert_int_equal(tr_topo_init(&t, 8, 4, 1, NULL), TR_OK);
    assert_int_equal(tr_topo_node_report(&t, 2, &rep), TR_OK);
    assert_int_equal(rep.crossing[TR_GROUP_TP], 2);
    assert_int_equal(rep.max_nodes[TR_GROUP_TP], 2);
    assert_non_null(strstr(rep.warning, "2 of 2 tensor-parallel groups"));

    assert_int_equal(tr_topo_node_report(&t, 0, &rep), TR_ERR_CONFIG);
    assert_string_equal(tr_errmsg(), "gpus per node 0 must be at least 1");
    assert_int_equal(tr_topo_group_nodes(&t, -1, TR_GROUP_TP, 0), -1);
    assert_string_equal(tr_errmsg(), "gpus per node -1 must be at least 1");
}

static void test_bad_input(void **state)
{
    (void)state;
    tr_topo t;
    assert_int_equal(tr_topo_init(&t, 10, 4, 1, NULL), TR_ERR_CONFIG);
    assert_string_equal(tr_errmsg(), "world size 10 is not divisible by tensor parallel size 4 x "
                                     "pipeline parallel size 1 = 4");
    assert_int_equal(tr_topo_init(&t, 12, 2, 4, NULL), TR_ERR_CONFIG);
    assert_non_null(strstr(tr_errmsg(), "world size 12 is not divisible"));
    assert_int_equal(tr_topo_init(&t, 4, 4, 2, NULL), TR_ERR_CONFIG);
    assert_non_null(strstr(tr_errmsg(), "= 8"));
    assert_int_equal(tr_topo_init(&t, 8, 0, 2, NULL), TR_ERR_CONFIG);
    assert_string_equal(tr_errmsg(), "world size 8, tensor parallel size 0, pipeline parallel "
                                     "size 2: each must be at least 1");
    assert_int_equal(tr_topo_init(&t, 8, 2, -1, NULL), TR_ERR_CONFIG);
    assert_non_null(strstr(tr_errmsg(), "pipeline parallel size -1"));
    assert_int_equal(tr_topo_init(&t, 0, 1, 1, NULL), TR_ERR_CONFIG);
    assert_non_null(strstr(tr_errmsg(), "world size 0"));
    assert_int_equal(tr_topo_init(&t, -4, 1, 1, NULL), TR_ERR_CONFIG);
    assert_non_null(strstr(tr_errmsg(), "world size -4"));
    assert_int_equal(tr_topo_init(&t, 1 << 20, 65536, 65536, NULL), TR_ERR_CONFIG);
    assert_non_null(strstr(tr_errmsg(), "= 4294967296"));
    /* bounded: a world past 2^20 ranks is refused before anything is built */
    assert_int_equal(tr_topo_init(&t, 2147483647, 1, 1, NULL), TR_ERR_CONFIG);
    assert_non_null(strstr(tr_errmsg(), "at most 1048576 ranks"));
    assert_int_equal(tr_topo_init(&t, 8, 2, 2, "dp-tp-pp"), TR_ERR_CONFIG);
    assert_string_equal(tr_errmsg(),
                        "unknown rank order 'dp-tp-pp'; allowed: tp-dp-pp (default), tp-pp-dp");
    tr_topo_order o;
    assert_int_equal(tr_topo_parse_order("TP-DP-PP", &o), TR_ERR_CONFIG);
    assert_int_equal(tr_topo_parse_order("", &o), TR_OK);
    assert_int_equal(o, TR_ORDER_TP_DP_PP);

    assert_int_equal(tr_topo_init(&t, 8, 2, 2, NULL), TR_OK);
    int buf[8], idx;
    assert_int_equal(tr_topo_group_members(&t, TR_GROUP_TP, 4, buf), TR_ERR_INVALID);
    assert_string_equal(tr_errmsg(), "tp group 4 does not exist (there are 4)");
    assert_int_equal(tr_topo_group_members(&t, TR_GROUP_DP, -1, buf), TR_ERR_INVALID);
    assert_string_equal(tr_errmsg(), "dp group -1 does not exist (there are 4)");
    assert_int_equal(tr_topo_group_members(&t, (tr_group_kind)9, 0, buf), TR_ERR_INVALID);
    assert_string_equal(tr_errmsg(), "unknown group kind 9");
    assert_int_equal(tr_topo_group_of(&t, TR_GROUP_PP, 8, &idx, NULL), TR_ERR_INVALID);
    assert_string_equal(tr_errmsg(), "rank 8 is outside the world of 8 ranks");
    tr_rank_groups g;
    assert_int_equal(tr_topo_rank_groups(&t, -1, &g), TR_ERR_INVALID);
    assert_string_equal(tr_errmsg(), "rank -1 is outside the world of 8 ranks");
    tr_rank_groups_free(&g); /* safe on the zeroed struct of a failed call */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mapping_default_order),
        cmocka_unit_test(test_mapping_tp_pp_dp),
        cmocka_unit_test(test_groups_w16),
        cmocka_unit_test(test_small_worlds),
        cmocka_unit_test(test_context_parallel),
        cmocka_unit_test(test_expert_parallel),
        cmocka_unit_test(test_bloom_176b),
        cmocka_unit_test(test_w100000_table_time),
        cmocka_unit_test(test_node_report),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
