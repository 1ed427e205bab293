/* tests/cuda: context parallelism's CUDA attention (kernels/cuda/attention_rows.cuh, run on the
 * host through the warp emulator: rows_emu.h) against the CPU table's attention_rows_* and
 * attention_rows_dropout_*. As model/gpt_cp.c calls them: each sample's sequence of
 * T = 2 CP c positions in one buffer, rank r's two chunks r and 2 CP - 1 - r (q0 = chunk c,
 * Tk = q0 + c, B = 1, sample first_sample + b), the backward of both chunks added into one
 * buffer; CP 1 .. 4, chunks off the tiles (odd c, tails), groups, ALiBi, dropout (p 0.3, a
 * global head0) on and off, the launcher's tiles (64, 32, 16 rows by head size) and 16-row
 * tiles forced (many tiles a chunk). And the
 * ops' own batch (B = 2, a batch stride of Tk rows, with dropout: samples first_sample + b, a
 * mask of T > Tk) added onto a dqkv that is not zero. `--random N SEED`: N layouts drawn at random.
 * out, lse and dqkv within 1e-5 of the CPU's (relative to each array's largest magnitude). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/philox.h"
#include "kernels/kernels.h"
#include "tests/cuda/rows_emu.h"

#define TOL 1e-5

static int failures, checks;
static const tr_kernels *cpu;
static uint64_t rng = 0x2545F4914F6CDD1Dull;

static float uniform(float lo, float hi)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return lo + (hi - lo) * (float)((double)(rng >> 11) / 9007199254740992.0);
}

static float *fill(size_t n, float lo, float hi)
{
    float *p = malloc((n ? n : 1) * sizeof *p);
    for (size_t i = 0; i < n; i++)
        p[i] = uniform(lo, hi);
    return p;
}

static void compare(const char *what, const char *shape, const float *got, const float *ref,
                    size_t n)
{
    double scale = 0, err = 0;
    for (size_t i = 0; i < n; i++) {
        scale = fmax(scale, fabs(ref[i]));
        err = isnan(got[i]) ? INFINITY : fmax(err, fabs((double)got[i] - ref[i]));
    }
    double rel = err / (scale > 0 ? scale : 1);
    checks++;
    failures += !(rel <= TOL);
    printf("%s %s %s: relative error %.3g\n", rel <= TOL ? "ok  " : "FAIL", shape, what, rel);
}

typedef struct {
    int cp, c, samples, NH, NG, HS, alibi, tile;
    double p; /* attention dropout, 0: the plain ops */
} cp_case;

/* One CP layout: every rank's two chunks of every sample, forward and backward */
static void check_cp(cp_case k)
{
    int T = 2 * k.cp * k.c, R = k.NH / k.NG, row = k.NG * (R + 2) * k.HS, C = k.NH * k.HS;
    size_t nseq = (size_t)T * row, nout = (size_t)k.c * C, nlse = (size_t)k.NH * k.c;
    float *slopes = k.alibi ? fill((size_t)k.NH, 0.05f, 0.5f) : NULL;
    float *out = malloc(nout * 4), *lse = malloc(nlse * 4), *eout = malloc(nout * 4);
    float *else_ = malloc(nlse * 4), *dfull = malloc(nseq * 4), *efull = malloc(nseq * 4);
    tr_dropout d = {0x5eedull + (uint64_t)k.cp, 40, tr_dropout_site(3, TR_DROPOUT_ATTN_PROBS),
                    tr_dropout_threshold(k.p), (float)(1.0 / (1.0 - k.p)), 2};
    emu_rows_drop ed = {d.seed, d.first_sample, d.site, d.threshold, d.scale, d.head0};
    char shape[160];
    for (int b = 0; b < k.samples; b++) {
        float *seq = fill(nseq, -1.5f, 1.5f);
        tr_dropout db = d;
        emu_rows_drop edb = ed;
        db.first_sample += (uint64_t)b, edb.first_sample += (uint64_t)b;
        for (int r = 0; r < k.cp; r++) {
            memset(dfull, 0, nseq * 4), memset(efull, 0, nseq * 4);
            int tile = 0;
            for (int h = 0; h < 2; h++) {
                int chunk = h ? 2 * k.cp - 1 - r : r, q0 = chunk * k.c, Tk = q0 + k.c;
                float *dout = fill(nout, -1.0f, 1.0f);
                snprintf(shape, sizeof shape,
                         "CP %d c %d sample %d rank %d chunk %d NH %d NG %d HS %d%s p %.1f", k.cp,
                         k.c, b, r, chunk, k.NH, k.NG, k.HS, k.alibi ? " alibi" : "", k.p);
                if (k.p > 0) {
                    cpu->attention_rows_dropout_forward(NULL, out, lse, seq, slopes, 1, Tk, q0,
                                                        k.NH, k.NG, k.HS, T, db);
                    cpu->attention_rows_dropout_backward(NULL, dfull, dout, seq, out, lse, slopes,
                                                         1, Tk, q0, k.NH, k.NG, k.HS, T, db);
                } else {
                    cpu->attention_rows_forward(NULL, out, lse, seq, slopes, 1, Tk, q0, k.NH,
                                                k.NG, k.HS);
                    cpu->attention_rows_backward(NULL, dfull, dout, seq, out, lse, slopes, 1, Tk,
                                                 q0, k.NH, k.NG, k.HS);
                }
                const emu_rows_drop *pd = k.p > 0 ? &edb : NULL;
                tile = emu_rows_forward(eout, else_, seq, slopes, 1, Tk, q0, k.NH, k.NG, k.HS, T,
                                        pd, k.tile);
                emu_rows_backward(efull, dout, seq, eout, else_, slopes, 1, Tk, q0, k.NH, k.NG,
                                  k.HS, T, pd, k.tile);
                compare("out", shape, eout, out, nout);
                compare("lse", shape, else_, lse, nlse);
                free(dout);
            }
            snprintf(shape, sizeof shape, "CP %d c %d sample %d rank %d (tile %d)", k.cp, k.c, b,
                     r, tile);
            compare("dqkv of both chunks", shape, efull, dfull, nseq);
        }
        free(seq);
    }
    free(slopes), free(out), free(lse), free(eout), free(else_), free(dfull), free(efull);
}

/* The ops' batch: B = 2 of Tk rows each, q0 > 0, dqkv not zero before (backward adds); p > 0:
 * the dropout ops with a mask of T = Tk + 3 positions, batch b its sample first_sample + b */
static void check_batch(int Tk, int q0, int NH, int NG, int HS, int tile, double p)
{
    int B = 2, nq = Tk - q0, row = NG * (NH / NG + 2) * HS;
    size_t nqkv = (size_t)B * Tk * row, nout = (size_t)B * nq * NH * HS, nlse = (size_t)B * NH * nq;
    float *qkv = fill(nqkv, -1.5f, 1.5f), *dout = fill(nout, -1.0f, 1.0f);
    float *dqkv = fill(nqkv, -1.0f, 1.0f), *edqkv = malloc(nqkv * 4);
    float *out = malloc(nout * 4), *lse = malloc(nlse * 4), *eout = malloc(nout * 4);
    float *else_ = malloc(nlse * 4);
    memcpy(edqkv, dqkv, nqkv * 4);
    int T = Tk + 3;
    tr_dropout d = {91, 1000, tr_dropout_site(0, TR_DROPOUT_ATTN_PROBS), tr_dropout_threshold(p),
                    (float)(1.0 / (1.0 - p)), 1};
    emu_rows_drop ed = {d.seed, d.first_sample, d.site, d.threshold, d.scale, d.head0};
    if (p > 0) {
        cpu->attention_rows_dropout_forward(NULL, out, lse, qkv, NULL, B, Tk, q0, NH, NG, HS, T,
                                            d);
        cpu->attention_rows_dropout_backward(NULL, dqkv, dout, qkv, out, lse, NULL, B, Tk, q0, NH,
                                             NG, HS, T, d);
    } else {
        cpu->attention_rows_forward(NULL, out, lse, qkv, NULL, B, Tk, q0, NH, NG, HS);
        cpu->attention_rows_backward(NULL, dqkv, dout, qkv, out, lse, NULL, B, Tk, q0, NH, NG,
                                     HS);
    }
    const emu_rows_drop *pd = p > 0 ? &ed : NULL;
    tile = emu_rows_forward(eout, else_, qkv, NULL, B, Tk, q0, NH, NG, HS, T, pd, tile);
    emu_rows_backward(edqkv, dout, qkv, eout, else_, NULL, B, Tk, q0, NH, NG, HS, T, pd, tile);
    char shape[120];
    snprintf(shape, sizeof shape, "B 2 Tk %d q0 %d NH %d NG %d HS %d tile %d p %.2f", Tk, q0, NH,
             NG, HS, tile, p);
    compare("out", shape, eout, out, nout);
    compare("lse", shape, else_, lse, nlse);
    compare("dqkv (added to random values)", shape, edqkv, dqkv, nqkv);
    free(qkv), free(dout), free(dqkv), free(edqkv), free(out), free(lse), free(eout), free(else_);
}

/* n CP layouts drawn from seed: CP 1..4, chunks of 1..40, groups, head sizes 1..96, ALiBi,
 * dropout, tiles 16 / the launcher's (`--random N SEED`) */
static void random_cases(int n, uint64_t seed)
{
    rng ^= seed * 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < n; i++) {
        int NG = 1 + (int)uniform(0, 3), R = 1 + (int)uniform(0, 3);
        cp_case k = {1 + (int)uniform(0, 4), 1 + (int)uniform(0, 40), 1, NG * R, NG,
                     1 + (int)uniform(0, 96), uniform(0, 1) < 0.5f,
                     uniform(0, 1) < 0.5f ? 16 : 0, uniform(0, 1) < 0.5f ? 0.0 : 0.2};
        check_cp(k);
    }
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    cpu = tr_kernels_cpu();
    if (argc == 4 && !strcmp(argv[1], "--random")) {
        random_cases(atoi(argv[2]), strtoull(argv[3], NULL, 10));
        printf("%d of %d checks agree\n", checks - failures, checks);
        return failures ? 1 : 0;
    }
    /* cp, c, samples, NH, NG, HS, alibi, tile, p */
    check_cp((cp_case){1, 13, 1, 2, 1, 16, 0, 16, 0.0});
    check_cp((cp_case){2, 9, 2, 4, 2, 16, 1, 16, 0.0});
    check_cp((cp_case){3, 7, 1, 2, 2, 8, 0, 16, 0.3});
    check_cp((cp_case){4, 5, 1, 3, 1, 12, 1, 16, 0.3});
    check_cp((cp_case){2, 40, 1, 2, 1, 32, 1, 0, 0.3});
    check_cp((cp_case){2, 24, 1, 4, 1, 64, 0, 0, 0.0}); /* tile_for: 32 */
    check_cp((cp_case){2, 9, 1, 2, 1, 256, 1, 0, 0.3}); /* tile_for: 16 */
    check_batch(45, 17, 4, 2, 24, 16, 0.0);
    check_batch(70, 0, 2, 2, 16, 0, 0.0);
    check_batch(38, 11, 4, 2, 16, 16, 0.25);
    printf("%d of %d checks agree\n", checks - failures, checks);
    return failures ? 1 : 0;
}
