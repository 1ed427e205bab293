/* tests/cuda: the dropout ops of a CUDA table (kernels/cuda/dropout.cu, and flash.cu's and
 * flash_mma.cuh's DROP variants) against the CPU table's on the same inputs (part of
 * test_cuda_ops: ops_tests.h). The hidden dropout bit for bit (the same mask, the same
 * products): rows on whole Philox blocks (the 16-byte path), a sequence-parallel slice, a
 * tensor-parallel column slice off the blocks, in place. The attention dropout: its masks
 * exactly (V the identity, so that out[t][j] is 0 exactly where (t, j) is dropped: the zeros of
 * the GPU's out are the CPU's), then out, lse and dqkv within the table's attention tolerance,
 * with groups, ALiBi and packed rows, head sizes of the tensor-core kernels and others. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/philox.h"
#include "tests/cuda/ops_tests.h"

static tr_dropout drop_of(double p, uint64_t seed, uint64_t first, int layer, int kind, int head0)
{
    tr_dropout d = {seed, first, tr_dropout_site(layer, kind), tr_dropout_threshold(p),
                    (float)(1.0 / (1.0 - p)), head0};
    return d;
}

/* elements that are 0 in one array and not in the other */
static void same_zeros(const char *what, const float *got, const float *ref, size_t n)
{
    size_t bad = 0, zeros = 0;
    for (size_t i = 0; i < n; i++)
        bad += (got[i] == 0) != (ref[i] == 0), zeros += ref[i] == 0;
    checks++;
    failures += bad != 0;
    printf("%s %s: %zu of %zu zeros differ (%zu zeros)\n", bad ? "FAIL" : "ok  ", what, bad, n,
           zeros);
}

static void check_hidden(const tr_kernels *k, const char *what, tr_dropout d, int N, int C,
                         int T, int row0, int C_total, int col0, int in_place)
{
    ops_check_group("dropout %s [%s]", what, k->name);
    size_t n = (size_t)N * C;
    float *x = host(n, -4, 4), *ref = malloc(n * 4);
    CPU->dropout(NULL, ref, x, d, N, C, T, row0, C_total, col0);
    float *gx = dev(k, x, n * 4), *gy = in_place ? gx : dev(k, NULL, n * 4);
    k->dropout(NULL, gy, gx, d, N, C, T, row0, C_total, col0);
    float *got = back(k, gy, n);
    char label[200];
    snprintf(label, sizeof label, "dropout %s: the mask", what);
    same_zeros(label, got, ref, n);
    snprintf(label, sizeof label, "dropout %s (exact)", what);
    compare(label, k, got, ref, n, 0);
    if (!in_place)
        k->free(gy);
    k->free(gx), free(x), free(ref), free(got);
}

/* out, lse, dqkv of attention_gqa_dropout_* (identity: V the identity over the first T
 * dimensions, HS >= T: the masks' zeros compared) */
static void check_attention(const tr_kernels *k, int B, int T, int NH, int NG, int HS,
                            int use_alibi, int packed, int identity, tr_dropout d)
{
    ops_check_group("attention dropout B%d T%d NH%d NG%d HS%d alibi %d packed %d identity %d "
                    "[%s]", B, T, NH, NG, HS, use_alibi, packed, identity, k->name);
    int R = NH / NG, C3 = NG * (R + 2) * HS;
    size_t nq = (size_t)B * T * C3, no = (size_t)B * T * NH * HS, nl = (size_t)B * NH * T;
    size_t ns = (size_t)B * (NH + 1) * T;
    int32_t *seg = packed ? malloc((size_t)B * T * sizeof *seg) : NULL;
    for (int i = 0; packed && i < B * T; i++)
        seg[i] = (i % T) / (7 + 5 * (i / T));
    float *qkv = host(nq, -1, 1), *dout = host(no, -1, 1), *slopes = host((size_t)NH, 0.01f, 0.5f);
    for (int r = 0; identity && r < B * T; r++)
        for (int g = 0; g < NG; g++)
            for (int c = 0; c < HS; c++)
                qkv[(size_t)r * C3 + ((size_t)g * (R + 2) + R + 1) * HS + c] = c == r % T;
    const float *al = use_alibi ? slopes : NULL;
    float *out = malloc(no * 4), *lse = malloc(nl * 4), *scr = malloc(ns * 4);
    float *dqkv = malloc(nq * 4);
    CPU->attention_gqa_dropout_forward(NULL, out, lse, qkv, al, B, T, NH, NG, HS, seg, d);
    CPU->attention_gqa_dropout_backward(NULL, dqkv, scr, dout, qkv, out, lse, al, B, T, NH, NG,
                                        HS, seg, d);
    int32_t *gseg = packed ? dev(k, seg, (size_t)B * T * sizeof *seg) : NULL;
    float *gq = dev(k, qkv, nq * 4), *gdo = dev(k, dout, no * 4);
    float *gsl = dev(k, slopes, (size_t)NH * 4), *gout = dev(k, NULL, no * 4);
    float *glse = dev(k, NULL, nl * 4), *gscr = dev(k, NULL, ns * 4), *gdq = dev(k, NULL, nq * 4);
    const float *gal = use_alibi ? gsl : NULL;
    k->attention_gqa_dropout_forward(NULL, gout, glse, gq, gal, B, T, NH, NG, HS, gseg, d);
    k->attention_gqa_dropout_backward(NULL, gdq, gscr, gdo, gq, gout, glse, gal, B, T, NH, NG, HS,
                                      gseg, d);
    char what[160];
    snprintf(what, sizeof what, "attention dropout B%d T%d NH%d NG%d HS%d%s%s", B, T, NH, NG, HS,
             use_alibi ? " alibi" : "", packed ? " packed" : "");
    if (identity) {
        float *o = back(k, gout, no);
        char label[200];
        snprintf(label, sizeof label, "%s: the mask (out's zeros)", what);
        same_zeros(label, o, out, no);
        free(o);
    }
    double tol = k == BF16 ? TOL_BF16 : 1e-4;
    const char *names[] = {"out", "lse", "dqkv"};
    float *devs[] = {gout, glse, gdq};
    const float *refs[] = {out, lse, dqkv};
    size_t sizes[] = {no, nl, nq};
    for (int i = 0; i < 3; i++) {
        char label[200];
        snprintf(label, sizeof label, "%s %s", what, names[i]);
        compare_back(label, k, devs[i], refs[i], sizes[i], tol);
    }
    k->free(gq), k->free(gdo), k->free(gsl), k->free(gout), k->free(glse), k->free(gscr);
    k->free(gdq);
    if (packed)
        k->free(gseg);
    free(seg), free(qkv), free(dout), free(slopes), free(out), free(lse), free(scr), free(dqkv);
}

void test_dropout(const tr_kernels *k)
{
    if (!CPU->dropout || !CPU->attention_gqa_dropout_forward) {
        checks++, failures++;
        printf("FAIL the CPU table has no dropout ops to compare with\n");
        return;
    }
    check_hidden(k, "rows on blocks", drop_of(0.1, 1234, 0, 0, TR_DROPOUT_EMBEDDING, 0), 4096,
                 768, 1024, 0, 768, 0, 0);
    check_hidden(k, "in place", drop_of(0.5, 7, 3, 2, TR_DROPOUT_ATTN_OUT, 0), 100, 64, 24, 0,
                 64, 0, 1);
    check_hidden(k, "sequence-parallel slice", drop_of(0.3, 5, 9, 1, TR_DROPOUT_MLP_OUT, 0), 50,
                 96, 64, 64, 96, 0, 0);
    check_hidden(k, "columns off the blocks", drop_of(0.3, 8, 1, 4, TR_DROPOUT_MLP_OUT, 0), 77,
                 37, 11, 0, 111, 37, 0);
    tr_dropout a = drop_of(0.3, 1234, 5, 3, TR_DROPOUT_ATTN_PROBS, 2);
    check_attention(k, 2, 100, 4, 2, 128, 0, 0, 1, a); /* tensor cores in bf16 mode */
    check_attention(k, 2, 63, 2, 2, 64, 0, 0, 1, a);   /* T odd */
    check_attention(k, 1, 40, 2, 2, 40, 0, 0, 1, a);   /* HS 40: flash.cu's tiles in bf16 too */
    check_attention(k, 2, 257, 4, 2, 64, 1, 1, 0, drop_of(0.1, 9, 0, 0, 1, 0));
    check_attention(k, 2, 200, 8, 2, 40, 1, 1, 0, drop_of(0.2, 9, 7, 1, 1, 8));
    check_attention(k, 1, 130, 2, 1, 128, 1, 0, 0, drop_of(0.1, 5, 9, 7, 1, 6));
}
