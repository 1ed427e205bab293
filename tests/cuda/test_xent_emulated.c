/* tests/cuda: the fused cross-entropy (kernels/cuda/xent_fused.cuh, the GPU's
 * xent_stats_loss_backward16) run on the host through the warp emulator (xent_emu.h) against
 * "cpu-bf16"'s op, on every machine. Rows of bf16 logits in [-8, 8]: GPT-2's padded vocabulary
 * (50304 columns, 50257 valid; a target in the last valid column and one in the last, partial
 * 8-column step), a vocabulary shard (v_start > 0, some targets on other ranks), a target in
 * the padding, loss weights, a row whose first 40 columns are -inf (a thread's first steps all
 * -inf), V not a multiple of 8 and a row 2 bytes off 16-byte alignment (the scalar path),
 * rows narrower than the block, scale 0 (no gradient: the logits untouched). maxv, sumexp,
 * picked and losses within 1e-5 of the largest magnitude (the GPU's exponential is the MUFU's
 * approximation; here an exact one, flushed as the MUFU flushes); the gradient element by
 * element within 2^-7 of its magnitude (one bf16 rounding apart), its padding exactly 0; a
 * second run gives the same bits. Exit 0 when all agree, 1 otherwise. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/bf16.h"
#include "kernels/kernels.h"
#include "tests/cuda/xent_emu.h"

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static int failures, checks;

static float uniform(float lo, float hi)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return lo + (hi - lo) * (float)((rng >> 40) * (1.0 / 16777216.0));
}

static void verdict(int ok, const char *what, double err)
{
    checks++;
    if (!ok)
        failures++;
    printf("%s %s: %.3g\n", ok ? "ok  " : "FAIL", what, err);
}

/* Where the reference is finite, max |got - ref| <= 1e-5 of the largest finite |ref|; where it
 * is not (a target whose logit is -inf: picked -inf, the loss inf), got is the same */
static void compare_stats(const char *what, const char *name, const float *got,
                          const float *ref, int n)
{
    double scale = 0, err = 0;
    int same = 1;
    for (int i = 0; i < n; i++)
        if (isfinite(ref[i]))
            scale = fmax(scale, fabs(ref[i]));
    for (int i = 0; i < n; i++) {
        double d = fabs((double)got[i] - ref[i]);
        if (!isfinite(ref[i]))
            same &= got[i] == ref[i] || (isnan(got[i]) && isnan(ref[i]));
        else if (!(d <= err)) /* (a NaN: infinite) */
            err = isnan(d) ? INFINITY : d;
    }
    scale = scale > 0 ? scale : 1;
    char label[200];
    snprintf(label, sizeof label, "%s %s", name, what);
    verdict(same && err <= 1e-5 * scale, label, err / scale);
}

/* each element within 2^-7 of its magnitude; padding (columns >= n_valid) exactly 0 */
static void compare_grad(const char *what, const uint16_t *got, const uint16_t *ref, int N,
                         int V, int n_valid)
{
    double worst = 0;
    int ok = 1;
    for (int n = 0; n < N; n++)
        for (int c = 0; c < V; c++) {
            float g = bf16_to_f32(got[(size_t)n * V + c]), r = bf16_to_f32(ref[(size_t)n * V + c]);
            if (c >= n_valid) {
                ok &= g == 0.0f;
                continue;
            }
            double d = fabs((double)g - r);
            ok &= d <= ldexp(fabs(r), -7) + 1e-30;
            worst = fmax(worst, d / (fabs(r) > 0 ? fabs(r) : 1));
        }
    char label[200];
    snprintf(label, sizeof label, "gradient %s", what);
    verdict(ok, label, worst);
}

/* One case: N rows of V columns (n_valid valid), the row base `offset` bf16 past 16-byte
 * alignment; targets[n] given (absolute vocabulary ids); weights when weighted. */
static void run_case(const char *what, int N, int V, int n_valid, int v_start, int offset,
                     const int32_t *targets, int weighted, int neg_inf_head, float scale)
{
    const tr_kernels *twin = tr_kernels_get("cpu-bf16");
    size_t nl = (size_t)N * V;
    uint16_t *base = aligned_alloc(16, ((nl + (size_t)offset) * 2 + 15) & ~(size_t)15);
    uint16_t *l16 = base + offset, *ref = malloc(nl * 2), *first = malloc(nl * 2);
    float *weights = malloc((size_t)N * 4);
    for (size_t i = 0; i < nl; i++)
        l16[i] = bf16_from_f32(uniform(-8, 8));
    for (int n = 0; n < N && neg_inf_head; n++)
        for (int c = 0; c < neg_inf_head && c < V; c++)
            l16[(size_t)n * V + c] = bf16_from_f32(-INFINITY);
    for (int n = 0; n < N; n++)
        weights[n] = uniform(0, 2);
    const float *w = weighted ? weights : NULL;
    memcpy(ref, l16, nl * 2);
    memcpy(first, l16, nl * 2);
    float *st = malloc((size_t)N * 8 * 4); /* reference, then emulated: maxv sumexp picked loss */
    float *em = st + 4 * N;
    twin->xent_stats_loss_backward16(NULL, st + 3 * N, st, st + N, st + 2 * N, ref, targets, w,
                                     N, V, n_valid, v_start, scale);
    emu_xent_stats_loss_backward16(em + 3 * N, em, em + N, em + 2 * N, l16, targets, w, N, V,
                                   n_valid, v_start, scale);
    const char *names[4] = {"maxv", "sumexp", "picked", "loss"};
    for (int k = 0; k < 4; k++)
        compare_stats(what, names[k], em + (size_t)k * N, st + (size_t)k * N, N);
    if (scale != 0.0f) {
        compare_grad(what, l16, ref, N, V, n_valid);
    } else {
        char label[200];
        snprintf(label, sizeof label, "logits untouched at scale 0 %s", what);
        verdict(memcmp(l16, first, nl * 2) == 0, label, 0);
    }
    /* the same bits again */
    uint16_t *again = aligned_alloc(16, ((nl + (size_t)offset) * 2 + 15) & ~(size_t)15);
    float *em2 = malloc((size_t)N * 4 * 4);
    memcpy(again + offset, first, nl * 2);
    emu_xent_stats_loss_backward16(em2 + 3 * N, em2, em2 + N, em2 + 2 * N, again + offset,
                                   targets, w, N, V, n_valid, v_start, scale);
    char label[200];
    snprintf(label, sizeof label, "same bits on a second run %s", what);
    verdict(memcmp(again + offset, l16, nl * 2) == 0 && memcmp(em2, em, (size_t)N * 16) == 0,
            label, 0);
    free(base), free(ref), free(first), free(weights), free(st), free(again), free(em2);
}

int main(void)
{
    /* GPT-2's padded vocabulary: targets in the last valid column, in the last partial step,
     * early, late */
    int32_t t1[3] = {50256, 50251, 7};
    run_case("gpt2 V50304 n_valid 50257", 3, 50304, 50257, 0, 0, t1, 0, 0, 0.25f);
    /* a vocabulary shard at v_start 2000: targets here, on other ranks, in the padding
     * (column 1000 of 1004: picked, no gradient term) */
    int32_t t2[5] = {2000 + 999, 12, 2000 + 3004, 2000 + 1000, 2000 + 517};
    run_case("shard V1008 n_valid 1000 v_start 2000 weighted", 5, 1008, 1000, 2000, 0, t2, 1, 0,
             1.0f / 64);
    /* a thread's first steps all -inf */
    int32_t t3[2] = {100, 4095};
    run_case("V4096 -inf head weighted", 2, 4096, 4096, 0, 0, t3, 1, 40, 0.5f);
    /* the scalar path: V not a multiple of 8; a row off 16-byte alignment */
    int32_t t4[3] = {996, 0, 500};
    run_case("V1001 n_valid 997 (scalar)", 3, 1001, 997, 0, 0, t4, 1, 0, 0.25f);
    run_case("V1000 2 bytes off alignment (scalar)", 3, 1000, 1000, 0, 1, t4, 0, 5, 0.25f);
    /* narrower than the block: most threads have no step */
    int32_t t5[4] = {16, 0, 23, 9};
    run_case("V24 n_valid 17", 4, 24, 17, 0, 0, t5, 1, 0, 2.0f);
    run_case("V24 n_valid 17 scale 0", 4, 24, 17, 0, 0, t5, 0, 0, 0.0f);
    printf("%d of %d checks passed\n", checks - failures, checks);
    return failures ? 1 : 0;
}
