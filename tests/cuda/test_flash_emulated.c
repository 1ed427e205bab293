/* tests/cuda: the tensor-core attention kernels (kernels/cuda/flash_mma.cuh) run on the host
 * through the warp emulator (flash_emu.h) against the CPU table's attention (fp32), on every
 * machine: out, lse and dqkv within 1e-2 of the largest magnitude (bf16 operands, as the GPU's
 * "cuda" table is held to in cuda-ops), and the whole result the same on a second run (no
 * atomics, a fixed order). Shapes: GPT-2's heads (64), T not a multiple of the 64-row tiles,
 * head sizes 16 .. 128 (128 takes the 32-query backward steps), grouped heads with ALiBi,
 * multi-query, packed segments whose runs cross tiles. The output in bf16 storage (kernels.h's
 * attention_gqa_forward16) against "cpu-bf16"'s op on four shapes, and on one the backward from
 * it (its row sums from the bf16 output, as fa_prepare makes them) against "cpu-bf16"'s
 * attention_gqa_backward16; and on two (one with groups, ALiBi and packing) the kernels reading
 * qkv and writing dqkv in bf16 (kernels.h's attention_*_qkv16) against the same kernels on its
 * fp32 values (the same bits) and against "cpu-bf16"'s ops; one shape again with dK dV's
 * 64-row steps at head size 64 (TRIDENT_CUDA_ATTENTION_KV=64). The emulator is slow: the test
 * takes ~25 s. The GPU runs the same kernels in cuda-ops. Exit 0 when all agree, 1
 * otherwise. By hand, `--random N [SEED]` draws N shapes at random instead (random packed
 * segments too; the two backward kernels, the fused one, 64-row steps); `--dropout` the
 * attention dropout's kernels instead (test_flash_dropout.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/bf16.h"
#include "kernels/kernels.h"
#include "tests/cuda/flash_emu.h"

#define TOL 1e-2

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static int failures, checks;

float *random_floats(size_t n, float lo, float hi)
{
    float *p = malloc((n ? n : 1) * sizeof *p);
    for (size_t i = 0; i < n; i++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        p[i] = lo + (hi - lo) * (float)((rng >> 40) * (1.0 / 16777216.0));
    }
    return p;
}

/* max |got - ref| / max |ref|, reported against TOL */
static void compare(const char *what, const float *got, const float *ref, size_t n)
{
    double scale = 0, err = 0;
    for (size_t i = 0; i < n; i++) {
        scale = fmax(scale, fabs(ref[i]));
        double d = fabs((double)got[i] - ref[i]);
        err = isnan(got[i]) ? INFINITY : fmax(err, d);
    }
    double rel = err / (scale > 0 ? scale : 1);
    checks++;
    if (!(rel <= TOL)) {
        failures++;
        printf("FAIL %s: relative error %.3g > %.0e\n", what, rel, TOL);
    } else {
        printf("ok   %s: %.3g\n", what, rel);
    }
}

/* Drow (B, NH, T) = rowsum(dout * out), as flash.cu's fa_prepare makes it */
static void row_sums(float *Drow, const float *dout, const float *out, int B, int T, int NH,
                     int HS)
{
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                size_t at = ((size_t)b * T + t) * NH * HS + (size_t)h * HS;
                double s = 0;
                for (int d = 0; d < HS; d++)
                    s += (double)dout[at + d] * out[at + d];
                Drow[((size_t)b * NH + h) * T + t] = (float)s;
            }
}

/* The output in bf16 storage: the kernel's out16 and lse against "cpu-bf16"'s
 * attention_gqa_forward16; with backward, dqkv from it against attention_gqa_backward16. */
static void test_out16(const float *qkv, const float *dout, const float *al,
                       const int32_t *seg, const int32_t *starts, int B, int T, int NH, int NG,
                       int HS, int backward, const char *shape)
{
    const tr_kernels *twin = tr_kernels_get("cpu-bf16");
    size_t no = (size_t)B * T * NH * HS, nl = (size_t)B * NH * T;
    size_t nq = (size_t)B * T * NG * (NH / NG + 2) * HS;
    uint16_t *o16 = malloc(no * 2), *eo16 = malloc(no * 2);
    float *lse = malloc(nl * 4), *lse_e = malloc(nl * 4);
    float *o = malloc(no * 4), *eo = malloc(no * 4);
    twin->attention_gqa_forward16(NULL, o16, lse, qkv, al, B, T, NH, NG, HS, seg);
    emu_flash_forward16(eo16, lse_e, qkv, al, B, T, NH, NG, HS, seg);
    for (size_t i = 0; i < no; i++)
        o[i] = bf16_to_f32(o16[i]), eo[i] = bf16_to_f32(eo16[i]);
    char what[160];
    snprintf(what, sizeof what, "out16 %s", shape);
    compare(what, eo, o, no);
    snprintf(what, sizeof what, "lse (out16) %s", shape);
    compare(what, lse_e, lse, nl);
    if (backward) {
        float *dq = malloc(nq * 4), *edq = malloc(nq * 4), *Drow = malloc(nl * 4);
        float *scr = malloc((size_t)B * (NH + 1) * T * 4);
        twin->attention_gqa_backward16(NULL, dq, scr, dout, qkv, o16, lse, al, B, T, NH, NG, HS,
                                       seg);
        row_sums(Drow, dout, eo, B, T, NH, HS);
        emu_flash_backward(edq, Drow, starts, dout, qkv, lse_e, al, B, T, NH, NG, HS);
        snprintf(what, sizeof what, "dqkv (out16) %s", shape);
        compare(what, edq, dq, nq);
        free(dq), free(edq), free(Drow), free(scr);
    }
    free(o16), free(eo16), free(lse), free(lse_e), free(o), free(eo);
}

/* Same bits or a failure */
static void same_bits(const char *what, const void *got, const void *want, size_t bytes)
{
    checks++;
    if (memcmp(got, want, bytes)) {
        failures++;
        printf("FAIL %s: not the same bits\n", what);
    } else {
        printf("ok   %s: same bits\n", what);
    }
}

/* qkv, dqkv and dout in bf16 storage too (kernels.h's attention_forward_qkv16 /
 * _backward_qkv16): the kernels reading qkv16 and dout16 against the same kernels reading
 * their values in fp32 (the same bits:
 * their loads widen what the fp32 path rounds, exactly; dqkv16 is the fp32 path's dqkv
 * rounded), and against "cpu-bf16"'s ops (the backward on each side from its own bf16 output
 * and lse, as test_out16's). */
static void test_qkv16(const float *qkv, const float *dout, const float *al, const int32_t *seg,
                       const int32_t *starts, int B, int T, int NH, int NG, int HS,
                       const char *shape)
{
    const tr_kernels *twin = tr_kernels_get("cpu-bf16");
    size_t no = (size_t)B * T * NH * HS, nl = (size_t)B * NH * T;
    size_t nq = (size_t)B * T * NG * (NH / NG + 2) * HS;
    uint16_t *q16 = malloc(nq * 2), *o16 = malloc(no * 2), *eo16 = malloc(no * 2);
    uint16_t *fo16 = malloc(no * 2);
    float *qr = malloc(nq * 4), *lse = malloc(nl * 4), *lse_e = malloc(nl * 4);
    float *lse_f = malloc(nl * 4), *o = calloc(no, 4), *eo = calloc(no, 4);
    for (size_t i = 0; i < nq; i++)
        q16[i] = bf16_from_f32(qkv[i]), qr[i] = bf16_to_f32(q16[i]);
    twin->attention_forward_qkv16(NULL, o16, lse, q16, al, B, T, NH, NG, HS, seg);
    emu_flash_forward_qkv16(eo16, lse_e, q16, al, B, T, NH, NG, HS, seg);
    emu_flash_forward16(fo16, lse_f, qr, al, B, T, NH, NG, HS, seg);
    char what[200];
    snprintf(what, sizeof what, "out16 (qkv16 vs its fp32 values) %s", shape);
    same_bits(what, eo16, fo16, no * 2);
    snprintf(what, sizeof what, "lse (qkv16 vs its fp32 values) %s", shape);
    same_bits(what, lse_e, lse_f, nl * 4);
    for (size_t i = 0; i < no; i++)
        o[i] = bf16_to_f32(o16[i]), eo[i] = bf16_to_f32(eo16[i]);
    snprintf(what, sizeof what, "out16 (qkv16) %s", shape);
    compare(what, eo, o, no);
    snprintf(what, sizeof what, "lse (qkv16) %s", shape);
    compare(what, lse_e, lse, nl);
    uint16_t *dq16 = malloc(nq * 2), *edq16 = malloc(nq * 2), *fdq16 = malloc(nq * 2);
    float *dq = malloc(nq * 4), *edq = malloc(nq * 4), *fdq = malloc(nq * 4);
    float *Drow = malloc(nl * 4), *scr = malloc((size_t)B * (NH + 1) * T * 4);
    uint16_t *d16 = malloc(no * 2); /* the output's gradient in bf16 too, and its values */
    float *dr = malloc(no * 4);
    for (size_t i = 0; i < no; i++)
        d16[i] = bf16_from_f32(dout[i]), dr[i] = bf16_to_f32(d16[i]);
    twin->attention_backward_qkv16(NULL, dq16, scr, d16, q16, o16, lse, al, B, T, NH, NG, HS,
                                   seg);
    row_sums(Drow, dr, eo, B, T, NH, HS);
    emu_flash_backward_qkv16(edq16, Drow, starts, d16, q16, lse_e, al, B, T, NH, NG, HS);
    emu_flash_backward(fdq, Drow, starts, dr, qr, lse_e, al, B, T, NH, NG, HS);
    for (size_t i = 0; i < nq; i++)
        fdq16[i] = bf16_from_f32(fdq[i]), dq[i] = bf16_to_f32(dq16[i]),
        edq[i] = bf16_to_f32(edq16[i]);
    snprintf(what, sizeof what, "dqkv16 (qkv16 vs fp32 values, rounded) %s", shape);
    same_bits(what, edq16, fdq16, nq * 2);
    snprintf(what, sizeof what, "dqkv16 (qkv16) %s", shape);
    compare(what, edq, dq, nq);
    free(q16), free(o16), free(eo16), free(fo16), free(qr), free(lse), free(lse_e), free(lse_f);
    free(o), free(eo), free(dq), free(edq), free(fdq), free(Drow), free(scr);
    free(dq16), free(edq16), free(fdq16), free(d16), free(dr);
}

/* out16: 0, 1 (test_out16 too), 2 (and its backward); | 4: test_qkv16 too */
static void test_shape(int B, int T, int NH, int NG, int HS, int use_alibi, int packed,
                       int out16)
{
    const tr_kernels *cpu = tr_kernels_get("cpu");
    int R = NH / NG;
    size_t nq = (size_t)B * T * NG * (R + 2) * HS, no = (size_t)B * T * NH * HS;
    size_t nl = (size_t)B * NH * T;
    int32_t *seg = NULL, *starts = calloc((size_t)B * T, sizeof *starts);
    if (packed) {
        seg = malloc((size_t)B * T * sizeof *seg);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                int i = b * T + t;
                /* runs of 37, 66, ...: across the 64-row tiles; packed 2: one edge at 30, so
                 * the forward's scan for a tile's start goes back past 512 positions; packed
                 * 3: a new segment at each position with chance 1/(3 + 50 b) (--random) */
                rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
                seg[i] = packed == 2   ? t >= 30
                         : packed == 3 ? (t ? seg[i - 1] + (rng >> 33) % (3 + 50 * b) == 0 : 0)
                                       : t / (37 + 29 * b);
                starts[i] = t > 0 && seg[i] == seg[i - 1] ? starts[i - 1] : t;
            }
    }
    float *qkv = random_floats(nq, -1, 1), *dout = random_floats(no, -1, 1);
    float *slopes = random_floats((size_t)NH, 0.01f, 0.5f);
    const float *al = use_alibi ? slopes : NULL;
    float *out = malloc(no * 4), *lse = malloc(nl * 4), *dqkv = malloc(nq * 4);
    float *scr = malloc((size_t)B * (NH + 1) * T * 4);
    cpu->attention_gqa_forward(NULL, out, lse, qkv, al, B, T, NH, NG, HS, seg);
    cpu->attention_gqa_backward(NULL, dqkv, scr, dout, qkv, out, lse, al, B, T, NH, NG, HS, seg);

    float *eout[2], *lse_e[2], *edq[2];
    float *Drow = malloc(nl * 4);
    for (int run = 0; run < 2; run++) {
        eout[run] = malloc(no * 4), lse_e[run] = malloc(nl * 4), edq[run] = malloc(nq * 4);
        if (!emu_flash_forward(eout[run], lse_e[run], qkv, al, B, T, NH, NG, HS, seg)) {
            printf("FAIL head size %d: not built\n", HS);
            failures++;
            return;
        }
        /* the row sums from the kernel's own output, as fa_prepare makes them on the GPU */
        row_sums(Drow, dout, eout[run], B, T, NH, HS);
        emu_flash_backward(edq[run], Drow, starts, dout, qkv, lse_e[run], al, B, T, NH, NG, HS);
    }
    char what[160], shape[120];
    snprintf(shape, sizeof shape, "B%d T%d NH%d NG%d HS%d%s%s", B, T, NH, NG, HS,
             use_alibi ? " alibi" : "", packed ? " packed" : "");
    const char *names[] = {"out", "lse", "dqkv"};
    float *gots[] = {eout[0], lse_e[0], edq[0]}, *again[] = {eout[1], lse_e[1], edq[1]};
    const float *refs[] = {out, lse, dqkv};
    size_t sizes[] = {no, nl, nq};
    for (int i = 0; i < 3; i++) {
        snprintf(what, sizeof what, "%s %s", names[i], shape);
        compare(what, gots[i], refs[i], sizes[i]);
        checks++;
        if (memcmp(gots[i], again[i], sizes[i] * 4) != 0) {
            failures++;
            printf("FAIL %s: a second run differs\n", what);
        }
    }
    if (out16 & 3)
        test_out16(qkv, dout, al, seg, starts, B, T, NH, NG, HS, (out16 & 3) > 1, shape);
    if (out16 & 4)
        test_qkv16(qkv, dout, al, seg, starts, B, T, NH, NG, HS, shape);
    for (int run = 0; run < 2; run++)
        free(eout[run]), free(lse_e[run]), free(edq[run]);
    free(Drow), free(qkv), free(dout), free(slopes), free(out), free(lse), free(dqkv), free(scr);
    free(seg), free(starts);
}

/* --random N [SEED]: N shapes drawn at random (B, T 1..300, head sizes 16..128, groups,
 * ALiBi, random packed segments), each through the two backward kernels, the fused one, and
 * at head size 64 their 64-row steps; a stress run by hand, not in the suite (~10 s a shape) */
static int random_shapes(int n, uint64_t seed)
{
    static const int hs[] = {16, 32, 64, 128};
    uint64_t r = seed ? seed : 1;
    for (int i = 0; i < n; i++) {
        uint64_t x[8];
        for (int j = 0; j < 8; j++)
            r ^= r << 13, r ^= r >> 7, r ^= r << 17, x[j] = r >> 20;
        int B = 1 + (int)(x[0] % 2), T = 1 + (int)(x[1] % 300), HS = hs[x[2] % 4];
        int NG = 1 + (int)(x[3] % 2), NH = NG * (1 + (int)(x[4] % 3));
        int alibi = (int)(x[5] % 2), packed = (int)(x[6] % 3) == 0 ? 0 : 3;
        int mode = (int)(x[7] % 3); /* 0 two kernels, 1 fused, 2 fused or not with 64 rows */
        emu_flash_fused(mode != 0 && (mode == 1 || x[7] % 2));
        emu_flash_kv_rows(mode == 2 && HS == 64 ? 64 : 0);
        printf("shape %d: B%d T%d NH%d NG%d HS%d alibi %d packed %d fused %d rows %d\n", i, B,
               T, NH, NG, HS, alibi, packed, mode != 0 && (mode == 1 || x[7] % 2),
               mode == 2 && HS == 64 ? 64 : 0);
        fflush(stdout);
        test_shape(B, T, NH, NG, HS, alibi, packed, 0);
    }
    printf("%d of %d checks agree\n", checks - failures, checks);
    return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "--dropout"))
        return flash_dropout_checks();
    if (argc >= 3 && !strcmp(argv[1], "--random"))
        return random_shapes(atoi(argv[2]), argc >= 4 ? strtoull(argv[3], NULL, 0) : 1);
    test_shape(1, 160, 2, 2, 64, 0, 0, 1);  /* GPT-2's head size, a partial third tile */
    test_shape(2, 64, 2, 2, 16, 0, 0, 2 | 4); /* one tile; the bf16 output's backward, qkv16 */
    test_shape(1, 70, 2, 2, 32, 0, 1, 0);   /* packed runs across the tile edge */
    test_shape(1, 130, 2, 1, 128, 1, 0, 1); /* multi-query, ALiBi, 32-query backward steps */
    test_shape(2, 96, 4, 2, 64, 1, 1, 1 | 4); /* groups, ALiBi, packed; qkv16 */
    test_shape(1, 200, 2, 2, 32, 0, 1, 0);  /* a segment starting past tile 0: tiles skipped */
    test_shape(1, 700, 1, 1, 16, 0, 2, 0); /* a segment 670 long: the scan's steps of 512 */
    emu_flash_kv_rows(64); /* dK dV 64 query rows a step (TRIDENT_CUDA_ATTENTION_KV=64) */
    test_shape(1, 160, 2, 2, 64, 1, 1, 0);
    emu_flash_kv_rows(0);
    emu_flash_fused(1); /* dK dV and dQ in one kernel (TRIDENT_CUDA_ATTENTION_BWD=fused) */
    test_shape(1, 160, 2, 2, 64, 0, 0, 4);  /* a partial third tile; qkv16 */
    test_shape(2, 64, 2, 2, 16, 0, 0, 2);   /* 64-query steps: 4 row groups of dQ */
    test_shape(1, 200, 2, 2, 32, 0, 1, 0);  /* segments: tiles whose first adder is not 0 */
    test_shape(1, 130, 2, 1, 128, 1, 0, 0); /* multi-query (R 2), ALiBi, D 128 */
    test_shape(2, 96, 4, 2, 64, 1, 1, 4);   /* groups, ALiBi, packed; qkv16 */
    emu_flash_kv_rows(64); /* fused with 64 query rows a step (TRIDENT_CUDA_ATTENTION_KV=64) */
    test_shape(1, 150, 4, 2, 64, 0, 1, 0);
    printf("%d of %d checks agree\n", checks - failures, checks);
    return failures ? 1 : 0;
}
