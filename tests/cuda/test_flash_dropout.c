/* tests/cuda: attention dropout in the tensor-core kernels (flash_mma.cuh's DROP variants, run
 * on the host through the warp emulator: flash_emu.h) against a double-precision reference
 * whose mask is core/philox.h's tr_dropout_keep of ((head0 + h) T + t) T + j, sample
 * first_sample + b (kernels.h's attention_gqa_dropout_*), and against the CPU table's ops
 * where it has them. The mask itself, exactly: with V the identity (HS >= T) each output row
 * is its dropped probabilities, so out[t][j] is 0 exactly where (t, j) is dropped; with dout
 * the identity dV[j][t] is likewise (dK dV's mask). T odd, so that a lane's two columns cross
 * Philox blocks. Then out, lse and dqkv within 1e-2 (bf16 operands) on shapes with groups,
 * ALiBi, packed segments, T off the 64-row tiles, head sizes 16 .. 128, dK dV's 64-row steps.
 * `test_flash_emulated --dropout` (cuda-flash-dropout-emulated). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/philox.h"
#include "kernels/kernels.h"
#include "tests/cuda/flash_emu.h"

static int failures, checks;

static void verdict(int ok, const char *what)
{
    checks++;
    failures += !ok;
    printf("%s %s\n", ok ? "ok  " : "FAIL", what);
}

static double rel_error(const float *got, const float *ref, size_t n)
{
    double scale = 0, err = 0;
    for (size_t i = 0; i < n; i++) {
        scale = fmax(scale, fabs(ref[i]));
        err = isnan(got[i]) ? INFINITY : fmax(err, fabs((double)got[i] - ref[i]));
    }
    return err / (scale > 0 ? scale : 1);
}

static void compare(const char *what, const float *got, const float *ref, size_t n)
{
    char label[240];
    double rel = rel_error(got, ref, n);
    snprintf(label, sizeof label, "%s: relative error %.3g (limit 1e-2)", what, rel);
    verdict(rel <= 1e-2, label);
}

typedef struct {
    int B, T, NH, NG, HS;
    const float *alibi;
    const int32_t *seg;
    emu_drop d;
} shape;

static size_t q_at(const shape *s, int h)
{
    int R = s->NH / s->NG;
    return ((size_t)(h / R) * (R + 2) + (size_t)(h % R)) * s->HS;
}
static size_t k_at(const shape *s, int h)
{
    int R = s->NH / s->NG;
    return ((size_t)(h / R) * (R + 2) + (size_t)R) * s->HS;
}

/* dropout's factor of (b, h, t, j): scale or 0 */
static double factor(const shape *s, int b, int h, int t, int j)
{
    uint64_t e = (((uint64_t)s->d.head0 + h) * s->T + t) * s->T + j;
    return tr_dropout_keep(s->d.seed, s->d.first_sample + b, s->d.site, e, s->d.threshold)
               ? s->d.scale
               : 0.0;
}

/* out, lse and (dout non-null) dqkv in double: the softmax of the undropped scores, P times
 * the factors in P V; backward dP = z dO V^T, dS = P (dP - rowsum(dO out)) */
static void reference(const shape *s, const float *qkv, const float *dout, float *out,
                      float *lse, float *dqkv)
{
    int B = s->B, T = s->T, NH = s->NH, HS = s->HS, C = NH * HS;
    int C3 = s->NG * (NH / s->NG + 2) * HS;
    double sc = 1.0 / sqrt((double)HS);
    double *p = malloc((size_t)T * sizeof *p), *o = malloc((size_t)HS * sizeof *o);
    if (dqkv)
        memset(dqkv, 0, (size_t)B * T * C3 * sizeof *dqkv);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float *q = qkv + ((size_t)b * T + t) * C3 + q_at(s, h);
                const int32_t *sg = s->seg ? s->seg + (size_t)b * T : NULL;
                double m = -INFINITY, l = 0;
                for (int j = 0; j <= t; j++) {
                    p[j] = -INFINITY;
                    if (sg && sg[j] != sg[t])
                        continue;
                    const float *k = qkv + ((size_t)b * T + j) * C3 + k_at(s, h);
                    double x = 0;
                    for (int c = 0; c < HS; c++)
                        x += (double)q[c] * k[c];
                    p[j] = x * sc + (s->alibi ? s->alibi[h] * (double)(j - t) : 0.0);
                    m = fmax(m, p[j]);
                }
                for (int j = 0; j <= t; j++)
                    l += p[j] = exp(p[j] - m);
                memset(o, 0, (size_t)HS * sizeof *o);
                for (int j = 0; j <= t; j++) {
                    p[j] /= l;
                    const float *v = qkv + ((size_t)b * T + j) * C3 + k_at(s, h) + HS;
                    double z = factor(s, b, h, t, j);
                    for (int c = 0; c < HS; c++)
                        o[c] += p[j] * z * v[c];
                }
                size_t at = ((size_t)b * T + t) * C + (size_t)h * HS;
                for (int c = 0; c < HS; c++)
                    out[at + c] = (float)o[c];
                lse[((size_t)b * NH + h) * T + t] = (float)(m + log(l));
                if (!dqkv)
                    continue;
                const float *dO = dout + at;
                double D = 0;
                for (int c = 0; c < HS; c++)
                    D += (double)dO[c] * o[c];
                for (int j = 0; j <= t; j++) {
                    if (p[j] == 0)
                        continue;
                    size_t kj = ((size_t)b * T + j) * C3 + k_at(s, h);
                    const float *k = qkv + kj, *v = k + HS;
                    double z = factor(s, b, h, t, j), dp = 0;
                    for (int c = 0; c < HS; c++)
                        dp += (double)dO[c] * v[c];
                    double ds = p[j] * (z * dp - D);
                    float *dq = dqkv + ((size_t)b * T + t) * C3 + q_at(s, h);
                    for (int c = 0; c < HS; c++) {
                        dq[c] += (float)(ds * sc * k[c]);
                        dqkv[kj + c] += (float)(ds * sc * q[c]);
                        dqkv[kj + HS + c] += (float)(p[j] * z * dO[c]);
                    }
                }
            }
    free(p), free(o);
}

/* Drow = rowsum(dout * out), as flash.cu's fa_prepare makes it; starts of the segments */
static void prepare(const shape *s, const float *dout, const float *out, float *Drow,
                    int32_t *starts)
{
    int HS = s->HS, C = s->NH * HS;
    for (int b = 0; b < s->B; b++)
        for (int h = 0; h < s->NH; h++)
            for (int t = 0; t < s->T; t++) {
                size_t at = ((size_t)b * s->T + t) * C + (size_t)h * HS;
                double x = 0;
                for (int c = 0; c < HS; c++)
                    x += (double)dout[at + c] * out[at + c];
                Drow[((size_t)b * s->NH + h) * s->T + t] = (float)x;
            }
    for (int i = 0; i < s->B * s->T; i++) {
        int t = i % s->T;
        starts[i] = t > 0 && (!s->seg || s->seg[i] == s->seg[i - 1]) ? starts[i - 1] : t;
    }
}

static emu_drop drop_of(double p, uint64_t seed, uint64_t first, int layer, int head0)
{
    emu_drop d = {seed, first, tr_dropout_site(layer, TR_DROPOUT_ATTN_PROBS),
                  tr_dropout_threshold(p), (float)(1.0 / (1.0 - p)), head0};
    return d;
}

/* The masks exactly: V (and dout) the identity over the first T of HS dimensions */
static void test_mask(int B, int T, int NH, int NG, int HS, emu_drop d)
{
    shape s = {B, T, NH, NG, HS, NULL, NULL, d};
    int R = NH / NG, C = NH * HS, C3 = NG * (R + 2) * HS;
    size_t nq = (size_t)B * T * C3, no = (size_t)B * T * C, nl = (size_t)B * NH * T;
    float *qkv = random_floats(nq, -1, 1), *dout = calloc(no, 4);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int g = 0; g < NG; g++) {
                float *v = qkv + ((size_t)b * T + t) * C3 + ((size_t)g * (R + 2) + R + 1) * HS;
                for (int c = 0; c < HS; c++)
                    v[c] = c == t ? 1.0f : 0.0f;
            }
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH; h++)
                dout[((size_t)b * T + t) * C + (size_t)h * HS + t] = 1.0f;
    float *out = malloc(no * 4), *lse = malloc(nl * 4), *Drow = malloc(nl * 4);
    float *dqkv = malloc(nq * 4);
    int32_t *starts = malloc((size_t)B * T * 4);
    emu_flash_dropout_forward(out, lse, qkv, NULL, B, T, NH, NG, HS, NULL, d);
    prepare(&s, dout, out, Drow, starts);
    emu_flash_dropout_backward(dqkv, Drow, starts, dout, qkv, lse, NULL, B, T, NH, NG, HS, d);
    long bad_fwd = 0, bad_bwd = 0, dropped = 0, seen = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++)
                for (int j = 0; j <= t; j++) {
                    int keep = factor(&s, b, h, t, j) != 0;
                    float o = out[((size_t)b * T + t) * C + (size_t)h * HS + j];
                    bad_fwd += (o != 0) != keep;
                    dropped += !keep, seen++;
                }
    /* dV of group g's key j, column t: the sum over the group's heads of P(t, j) z: zero
     * exactly where every head drops (t, j) */
    for (int b = 0; b < B; b++)
        for (int g = 0; g < NG; g++)
            for (int j = 0; j < T; j++)
                for (int t = j; t < T; t++) {
                    int any = 0;
                    for (int h = g * R; h < (g + 1) * R; h++)
                        any |= factor(&s, b, h, t, j) != 0;
                    size_t at = ((size_t)b * T + j) * C3 + ((size_t)g * (R + 2) + R + 1) * HS;
                    float dv = dqkv[at + t];
                    bad_bwd += (dv != 0) != any;
                }
    char what[200];
    snprintf(what, sizeof what,
             "mask B%d T%d NH%d NG%d HS%d head0 %d: forward %ld of %ld differ (%ld dropped)", B,
             T, NH, NG, HS, d.head0, bad_fwd, seen, dropped);
    verdict(bad_fwd == 0 && dropped > 0 && dropped < seen, what);
    snprintf(what, sizeof what, "mask B%d T%d NH%d NG%d HS%d: dV's zeros, %ld differ", B, T, NH,
             NG, HS, bad_bwd);
    verdict(bad_bwd == 0, what);
    free(qkv), free(dout), free(out), free(lse), free(Drow), free(dqkv), free(starts);
}

/* out, lse, dqkv against the reference (and the CPU's ops where the table has them) */
static void test_values(int B, int T, int NH, int NG, int HS, int alibi, int packed,
                        emu_drop d)
{
    int R = NH / NG, C = NH * HS, C3 = NG * (R + 2) * HS;
    size_t nq = (size_t)B * T * C3, no = (size_t)B * T * C, nl = (size_t)B * NH * T;
    float *qkv = random_floats(nq, -1, 1), *dout = random_floats(no, -1, 1);
    float *slopes = random_floats((size_t)NH, 0.01f, 0.5f);
    int32_t *seg = NULL;
    if (packed) {
        seg = malloc((size_t)B * T * 4);
        for (int i = 0; i < B * T; i++)
            seg[i] = (i % T) / (37 + 29 * (i / T));
    }
    shape s = {B, T, NH, NG, HS, alibi ? slopes : NULL, seg, d};
    float *out = malloc(no * 4), *lse = malloc(nl * 4), *dqkv = malloc(nq * 4);
    float *eout = malloc(no * 4), *lse_e = malloc(nl * 4), *edq = malloc(nq * 4);
    float *Drow = malloc(nl * 4);
    int32_t *starts = malloc((size_t)B * T * 4);
    reference(&s, qkv, dout, out, lse, dqkv);
    emu_flash_dropout_forward(eout, lse_e, qkv, s.alibi, B, T, NH, NG, HS, seg, d);
    prepare(&s, dout, eout, Drow, starts);
    emu_flash_dropout_backward(edq, Drow, starts, dout, qkv, lse_e, s.alibi, B, T, NH, NG, HS, d);
    char what[200], shp[120];
    snprintf(shp, sizeof shp, "B%d T%d NH%d NG%d HS%d%s%s p %.2f", B, T, NH, NG, HS,
             alibi ? " alibi" : "", packed ? " packed" : "", 1.0 - 1.0 / d.scale);
    snprintf(what, sizeof what, "out %s", shp);
    compare(what, eout, out, no);
    snprintf(what, sizeof what, "lse %s", shp);
    compare(what, lse_e, lse, nl);
    snprintf(what, sizeof what, "dqkv %s", shp);
    compare(what, edq, dqkv, nq);
    const tr_kernels *cpu = tr_kernels_get("cpu");
    if (cpu->attention_gqa_dropout_forward && cpu->attention_gqa_dropout_backward) {
        tr_dropout td = {d.seed, d.first_sample, d.site, d.threshold, d.scale, d.head0};
        float *scr = malloc((size_t)B * (NH + 1) * T * 4);
        cpu->attention_gqa_dropout_forward(NULL, out, lse, qkv, s.alibi, B, T, NH, NG, HS, seg,
                                           td);
        cpu->attention_gqa_dropout_backward(NULL, dqkv, scr, dout, qkv, out, lse, s.alibi, B, T,
                                            NH, NG, HS, seg, td);
        snprintf(what, sizeof what, "out vs the CPU's op %s", shp);
        compare(what, eout, out, no);
        snprintf(what, sizeof what, "dqkv vs the CPU's op %s", shp);
        compare(what, edq, dqkv, nq);
        free(scr);
    }
    free(qkv), free(dout), free(slopes), free(seg), free(out), free(lse), free(dqkv);
    free(eout), free(lse_e), free(edq), free(Drow), free(starts);
}

int flash_dropout_checks(void)
{
    test_mask(2, 127, 2, 1, 128, drop_of(0.3, 1234, 5, 3, 2)); /* T odd: pairs cross blocks */
    test_mask(1, 64, 4, 2, 64, drop_of(0.5, 99, 0, 0, 0));
    test_values(1, 160, 2, 2, 64, 0, 0, drop_of(0.1, 42, 7, 1, 0));
    test_values(2, 96, 4, 2, 64, 1, 1, drop_of(0.25, 42, 3, 2, 4)); /* groups, ALiBi, packed */
    test_values(1, 70, 2, 1, 32, 0, 1, drop_of(0.5, 7, 0, 5, 1));
    test_values(2, 33, 2, 2, 16, 1, 0, drop_of(0.2, 11, 1 << 20, 0, 0));
    test_values(1, 130, 2, 1, 128, 1, 0, drop_of(0.1, 5, 9, 7, 6)); /* 32-query steps */
    emu_flash_kv_rows(64);
    test_values(1, 100, 2, 2, 64, 0, 1, drop_of(0.3, 3, 2, 1, 2)); /* dK dV's 64-row steps */
    emu_flash_kv_rows(0);
    test_values(1, 64, 2, 2, 64, 0, 0, drop_of(0.0, 3, 2, 1, 0)); /* p 0: no dropout */
    printf("%d of %d dropout checks agree\n", checks - failures, checks);
    return failures ? 1 : 0;
}
