/* tests/cuda: the hidden dropout's thread bodies (kernels/cuda/dropout.cuh, the GPU's kernels.h
 * dropout) run on the host over dropout.cu's grids (dropout_emu.h), bit for bit against
 * core/philox.h's decision applied element by element (out = inp * scale where
 * tr_dropout_keep, else 0) and against the CPU table's dropout where it has one. Shapes: whole
 * rows on Philox blocks (the 16-byte path), a sequence-parallel slice (row0, rows crossing
 * samples), a tensor-parallel column slice (col0, C_total), columns off the blocks (the
 * general path: C, col0 or C_total not multiples of 4, a misaligned pointer), in place, a
 * first sample past 2^32, p 0 (the identity) and 0.9; inputs with NaN, infinities and -0.
 * Each grid runs its threads in order and the last first. Exit 0 when all agree. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/philox.h"
#include "kernels/kernels.h"
#include "tests/cuda/dropout_emu.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static int failures, checks;

static void verdict(int ok, const char *what)
{
    checks++;
    failures += !ok;
    printf("%s %s\n", ok ? "ok  " : "FAIL", what);
}

static float *inputs(size_t n)
{
    float *p = malloc((n + 4) * sizeof *p);
    for (size_t i = 0; i < n + 4; i++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        p[i] = (float)((double)(rng >> 11) / 9007199254740992.0 * 8.0 - 4.0);
    }
    if (n > 7)
        p[1] = NAN, p[2] = INFINITY, p[5] = -INFINITY, p[6] = -0.0f;
    return p;
}

static emu_hidden_drop drop_of(double p, uint64_t seed, uint64_t first, int layer, int kind)
{
    emu_hidden_drop d = {seed, first, tr_dropout_site(layer, kind), tr_dropout_threshold(p),
                         (float)(1.0 / (1.0 - p)), 0};
    return d;
}

/* out = inp * scale where kept, else 0: core/philox.h's decision element by element */
static void reference(float *out, const float *inp, emu_hidden_drop d, int N, int C, int T,
                      int row0, int C_total, int col0)
{
    for (int n = 0; n < N; n++) {
        long g = (long)row0 + n;
        uint64_t sample = d.first_sample + (uint64_t)(g / T);
        for (int c = 0; c < C; c++) {
            uint64_t e = (uint64_t)(g % T) * (uint64_t)C_total + (uint64_t)(col0 + c);
            size_t i = (size_t)n * C + c;
            out[i] = tr_dropout_keep(d.seed, sample, d.site, e, d.threshold) ? inp[i] * d.scale
                                                                             : 0.0f;
        }
    }
}

/* misalign: inp and out one float past a 16-byte boundary (the general path) */
static void test_shape(const char *what, emu_hidden_drop d, int N, int C, int T, int row0,
                       int C_total, int col0, int misalign, int in_place, int want_path)
{
    size_t n = (size_t)N * C;
    float *buf = inputs(n), *inp = buf + misalign, *ref = malloc((n + 1) * 4);
    float *got = malloc((n + 4) * 4), *out = got + misalign;
    reference(ref, inp, d, N, C, T, row0, C_total, col0);
    long dropped = 0;
    for (size_t i = 0; i < n; i++)
        dropped += ref[i] == 0 && inp[i] != 0;
    for (int reverse = 0; reverse < 2; reverse++) {
        float *dst = out;
        float *src = inp;
        if (in_place) {
            memcpy(out, inp, n * 4);
            src = out;
        }
        int path = emu_dropout(dst, src, d, N, C, T, row0, C_total, col0, reverse);
        char label[240];
        snprintf(label, sizeof label, "%s%s (path %d, %ld of %zu dropped): the same bits", what,
                 reverse ? " last thread first" : "", path, dropped, n);
        verdict(path == want_path && !memcmp(dst, ref, n * 4), label);
    }
    const tr_kernels *cpu = tr_kernels_get("cpu");
    if (cpu->dropout) {
        tr_dropout td = {d.seed, d.first_sample, d.site, d.threshold, d.scale, d.head0};
        float *c = malloc((n ? n : 1) * 4);
        cpu->dropout(NULL, c, inp, td, N, C, T, row0, C_total, col0);
        emu_dropout(out, inp, d, N, C, T, row0, C_total, col0, 0);
        char label[240];
        snprintf(label, sizeof label, "%s: the same bits as the CPU's op", what);
        verdict(!memcmp(out, c, n * 4), label);
        free(c);
    }
    free(buf), free(ref), free(got);
}

int main(void)
{
    emu_hidden_drop d = drop_of(0.1, 1234, 0, 0, TR_DROPOUT_EMBEDDING);
    test_shape("rows on blocks B2 T24 C64", d, 48, 64, 24, 0, 64, 0, 0, 0, 4);
    test_shape("in place", drop_of(0.5, 77, 3, 2, TR_DROPOUT_ATTN_OUT), 48, 64, 24, 0, 64, 0, 0,
               1, 4);
    test_shape("sequence-parallel slice row0 20 T24", drop_of(0.3, 5, 9, 1, TR_DROPOUT_MLP_OUT),
               30, 32, 24, 20, 32, 0, 0, 0, 4);
    test_shape("tensor-parallel columns 48 of 96 from 48", drop_of(0.3, 5, 9, 1, 3), 20, 48, 8,
               0, 96, 48, 0, 0, 4);
    test_shape("columns off the blocks C37 of 111 from 37", drop_of(0.3, 8, 1, 4, 2), 25, 37, 5,
               10, 111, 37, 0, 0, 1);
    test_shape("C10 rows (C_total 10)", drop_of(0.6, 8, 1, 4, 2), 31, 10, 7, 0, 10, 0, 0, 0, 1);
    test_shape("C2 of 6 from 3, in place", drop_of(0.6, 8, 1, 4, 2), 9, 2, 3, 4, 6, 3, 0, 1, 1);
    test_shape("misaligned pointers", drop_of(0.2, 3, 0, 0, 0), 16, 64, 16, 0, 64, 0, 1, 0, 1);
    test_shape("first sample past 2^32", drop_of(0.2, 3, (1ull << 32) + 5, 6, 1), 16, 64, 4, 0,
               64, 0, 0, 0, 4);
    test_shape("p 0: the identity", drop_of(0.0, 3, 0, 0, 0), 8, 64, 8, 0, 64, 0, 0, 0, 4);
    test_shape("p 0.9", drop_of(0.9, 3, 0, 0, 0), 8, 64, 8, 0, 64, 0, 0, 0, 4);
    test_shape("one row of 3", drop_of(0.5, 3, 0, 0, 0), 1, 3, 1, 0, 3, 0, 0, 0, 1);
    printf("%d of %d checks agree\n", checks - failures, checks);
    return failures ? 1 : 0;
}
