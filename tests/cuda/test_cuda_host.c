/* tests/cuda: the CUDA backend's host-side logic, on any machine: fp32 <-> bf16 conversion
 * against an independent reference over every upper half-word with the interesting lower
 * halves (and every bf16 value round trip), the arena's bookkeeping (against a model of the
 * bytes in use), arena sizing from a real model's allocation requests, the memory budget
 * check, the device choice from the local rank, the switches' table, and the op dispatch by
 * name (the NCCL backend's decisions: test_nccl_host.c). TRIDENT_BF16_FULL=1 also sweeps all 2^32 fp32 patterns. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "comm/nccl/nccl.h"
#include "core/core.h"
#include "kernels/cuda/bf16.h"
#include "kernels/cuda/cuda.h"
#include "model/gpt.h"

/* ---------------------------------------------------------------- bf16 */

/* Independent reference: the two bf16 neighbours of f (truncation and one step further from
 * zero), compared by distance in double; ties to the even one; past the largest finite bf16
 * the next step is 2^128 (infinity). */
static uint16_t ref_bf16(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    if (isnan(f))
        return (uint16_t)((u >> 16) | 0x40u);
    if (isinf(f))
        return (uint16_t)(u >> 16);
    uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
    double x = fabs((double)f);
    uint32_t lo_bits = (uint32_t)(lo & 0x7FFFu) << 16;
    float lo_f;
    memcpy(&lo_f, &lo_bits, sizeof lo_f);
    double lo_v = lo_f;
    double hi_v;
    if ((lo & 0x7FFFu) == 0x7F7Fu) {
        hi_v = ldexp(1.0, 128);
    } else {
        uint32_t hi_bits = (uint32_t)(hi & 0x7FFFu) << 16;
        float hi_f;
        memcpy(&hi_f, &hi_bits, sizeof hi_f);
        hi_v = hi_f;
    }
    double dlo = x - lo_v, dhi = hi_v - x;
    if (dlo < dhi)
        return lo;
    if (dhi < dlo)
        return hi;
    return (lo & 1u) ? hi : lo;
}

static uint16_t conv(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return bf16_from_f32(f);
}

static void check_pattern(uint32_t u)
{
    uint16_t got = conv(u), want = ref_bf16(u);
    if (got != want)
        fail_msg("bf16 of 0x%08x: got 0x%04x, want 0x%04x", (unsigned)u, got, want);
}

static void test_bf16_known_values(void **state)
{
    (void)state;
    static const struct {
        uint32_t in;
        uint16_t out;
    } cases[] = {
        {0x3F800000u, 0x3F80u}, /* 1.0 */
        {0xBF800000u, 0xBF80u}, /* -1.0 */
        {0x00000000u, 0x0000u}, /* +0 */
        {0x80000000u, 0x8000u}, /* -0 */
        {0x3F808000u, 0x3F80u}, /* tie, even stays */
        {0x3F818000u, 0x3F82u}, /* tie, odd rounds up */
        {0x3F807FFFu, 0x3F80u}, /* just below half */
        {0x3F808001u, 0x3F81u}, /* just above half */
        {0x7F7FFFFFu, 0x7F80u}, /* FLT_MAX -> inf */
        {0xFF7FFFFFu, 0xFF80u}, /* -FLT_MAX -> -inf */
        {0x7F7F7FFFu, 0x7F7Fu}, /* below the overflow threshold */
        {0x7F7F8000u, 0x7F80u}, /* at it: odd 0x7F7F rounds up to inf */
        {0x7F800000u, 0x7F80u}, /* inf */
        {0xFF800000u, 0xFF80u}, /* -inf */
        {0x00000001u, 0x0000u}, /* smallest subnormal */
        {0x00008000u, 0x0000u}, /* subnormal tie, even */
        {0x00018000u, 0x0002u}, /* subnormal tie, odd */
        {0x007FFFFFu, 0x0080u}, /* largest subnormal rounds into the normals */
        {0x7F800001u, 0x7FC0u}, /* signalling NaN, payload in dropped bits only: stays NaN */
        {0xFF800001u, 0xFFC0u}, /* its negative */
        {0x7FC00000u, 0x7FC0u}, /* quiet NaN */
        {0x7FA50000u, 0x7FE5u}, /* payload kept, quiet bit set */
        {0xFFFFFFFFu, 0xFFFFu}, /* all ones */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint16_t got = conv(cases[i].in);
        if (got != cases[i].out)
            fail_msg("bf16 of 0x%08x: got 0x%04x, want 0x%04x", (unsigned)cases[i].in, got,
                     cases[i].out);
        check_pattern(cases[i].in);
    }
    assert_true(isnan(bf16_to_f32(conv(0x7F800001u))));
    assert_true(signbit(bf16_to_f32(conv(0xFF800001u))));
}

static void test_bf16_interesting_patterns(void **state)
{
    (void)state;
    /* every upper half with lower halves around the rounding points */
    static const uint16_t lows[] = {0x0000, 0x0001, 0x3FFF, 0x4000, 0x7FFE, 0x7FFF,
                                    0x8000, 0x8001, 0xBFFF, 0xC000, 0xFFFE, 0xFFFF};
    for (uint32_t hi = 0; hi < 0x10000u; hi++)
        for (size_t k = 0; k < sizeof lows / sizeof lows[0]; k++)
            check_pattern(hi << 16 | lows[k]);
    /* and pseudo-random patterns */
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < (1 << 22); i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        check_pattern((uint32_t)(s >> 16));
    }
    const char *full = getenv("TRIDENT_BF16_FULL");
    if (full && !strcmp(full, "1"))
        for (uint64_t u = 0; u <= 0xFFFFFFFFull; u++)
            check_pattern((uint32_t)u);
}

static void test_bf16_round_trip(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 0x10000u; h++) {
        float f = bf16_to_f32((uint16_t)h);
        uint32_t bits;
        memcpy(&bits, &f, sizeof bits);
        assert_int_equal(bits, h << 16); /* exact widening */
        uint16_t back = bf16_from_f32(f);
        if (isnan(f))
            assert_int_equal(back, h | 0x40u); /* quiet, sign and payload kept */
        else
            assert_int_equal(back, h);
    }
}

/* ---------------------------------------------------------------- arena */

static void test_arena_basics(void **state)
{
    (void)state;
    tr_arena a;
    assert_int_equal(tr_arena_init(&a, 4096, 3), TR_ERR_INVALID);
    assert_string_equal(tr_errmsg(), "arena: alignment 3 is not a power of two");
    assert_int_equal(tr_arena_init(&a, 1000 + 256, 256), TR_OK);
    assert_int_equal(a.capacity, 1024); /* rounded down to the alignment */
    size_t o0, o1, o2, o3;
    assert_int_equal(tr_arena_alloc(&a, 1, &o0), TR_OK);   /* one unit */
    assert_int_equal(tr_arena_alloc(&a, 0, &o1), TR_OK);   /* zero takes one unit too */
    assert_int_equal(tr_arena_alloc(&a, 257, &o2), TR_OK); /* two units */
    assert_int_equal(o0, 0);
    assert_int_equal(o1, 256);
    assert_int_equal(o2, 512);
    assert_int_equal(a.used, 1024);
    assert_int_equal(tr_arena_alloc(&a, 1, &o3), TR_ERR_NOMEM);
    assert_string_equal(tr_errmsg(), "arena: no room for 1 bytes (0 free in total, the largest "
                                     "hole 0, capacity 1024)");
    /* free the middle block: a hole of one unit; two units do not fit in it */
    assert_int_equal(tr_arena_free(&a, 256), TR_OK);
    assert_int_equal(tr_arena_alloc(&a, 300, &o3), TR_ERR_NOMEM);
    assert_string_equal(tr_errmsg(), "arena: no room for 300 bytes (256 free in total, the "
                                     "largest hole 256, capacity 1024)");
    /* freeing the first merges with it: now two units fit at offset 0 */
    assert_int_equal(tr_arena_free(&a, 0), TR_OK);
    assert_int_equal(a.n_holes, 1);
    assert_int_equal(tr_arena_largest_hole(&a), 512);
    assert_int_equal(tr_arena_alloc(&a, 300, &o3), TR_OK);
    assert_int_equal(o3, 0);
    assert_int_equal(tr_arena_free(&a, 100), TR_ERR_INVALID);
    assert_string_equal(tr_errmsg(), "arena: offset 100 is not the start of a block in use");
    assert_int_equal(tr_arena_free(&a, 256), TR_ERR_INVALID); /* freed already */
    assert_int_equal(tr_arena_free(&a, 512), TR_OK);
    assert_int_equal(tr_arena_free(&a, 0), TR_OK);
    assert_int_equal(a.used, 0);
    assert_int_equal(a.peak, 1024);
    assert_int_equal(a.n_holes, 1);
    assert_int_equal(a.holes[0].offset, 0);
    assert_int_equal(a.holes[0].size, 1024);
    tr_arena_destroy(&a);

    /* an empty arena serves nothing */
    assert_int_equal(tr_arena_init(&a, 0, 64), TR_OK);
    assert_int_equal(tr_arena_alloc(&a, 1, &o0), TR_ERR_NOMEM);
    tr_arena_destroy(&a);
}

/* Random allocations and frees against a byte map of what is in use. */
static void test_arena_random(void **state)
{
    (void)state;
    enum { CAP = 1 << 16, ALIGN = 64, SLOTS = 200 };
    tr_arena a;
    assert_int_equal(tr_arena_init(&a, CAP, ALIGN), TR_OK);
    static unsigned char owner[CAP];
    memset(owner, 0, sizeof owner);
    size_t off[SLOTS], len[SLOTS];
    int live[SLOTS] = {0};
    uint64_t s = 12345;
    size_t used = 0;
    for (int it = 0; it < 20000; it++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        int k = (int)(s % SLOTS);
        if (live[k]) {
            assert_int_equal(tr_arena_free(&a, off[k]), TR_OK);
            memset(owner + off[k], 0, len[k]);
            used -= len[k];
            live[k] = 0;
        } else {
            size_t want = (size_t)((s >> 20) % 3000);
            size_t o = 0;
            if (tr_arena_alloc(&a, want, &o) == TR_OK) {
                size_t l = want ? (want + ALIGN - 1) / ALIGN * ALIGN : ALIGN;
                assert_int_equal(o % ALIGN, 0);
                assert_true(o + l <= CAP);
                for (size_t i = 0; i < l; i++)
                    assert_int_equal(owner[o + i], 0); /* no overlap with a live block */
                memset(owner + o, 1, l);
                off[k] = o, len[k] = l, live[k] = 1;
                used += l;
            } else {
                /* a failure means no hole was large enough */
                assert_true(tr_arena_largest_hole(&a) < (want ? want : 1));
            }
        }
        assert_int_equal(a.used, used);
        /* holes sorted, never adjacent, and they cover exactly the free bytes */
        size_t free_bytes = 0;
        for (int h = 0; h < a.n_holes; h++) {
            free_bytes += a.holes[h].size;
            if (h)
                assert_true(a.holes[h - 1].offset + a.holes[h - 1].size < a.holes[h].offset);
        }
        assert_int_equal(free_bytes, CAP - used);
    }
    for (int k = 0; k < SLOTS; k++)
        if (live[k])
            assert_int_equal(tr_arena_free(&a, off[k]), TR_OK);
    assert_int_equal(a.n_holes, 1);
    assert_int_equal(a.holes[0].size, CAP);
    tr_arena_destroy(&a);
}

static void test_arena_bytes_for(void **state)
{
    (void)state;
    size_t sizes[] = {1, 256, 257, 0, 1000};
    assert_int_equal(tr_arena_bytes_for(sizes, 5, 256), 256 + 256 + 512 + 256 + 1024);
    assert_int_equal(tr_arena_bytes_for(sizes, 0, 256), 0);
    size_t huge[] = {SIZE_MAX - 10, 100};
    assert_true(tr_arena_bytes_for(huge, 2, 256) == SIZE_MAX);
}

/* Arena sizing from the layout: a GPT stage's real allocation requests (its activation
 * slots and scratch, recorded through a table whose alloc notes the sizes) are served by an
 * arena of tr_arena_bytes_for() bytes, and not by one a unit smaller. */
static size_t recorded[64];
static int n_recorded;

static void *recording_alloc(size_t bytes)
{
    if (n_recorded < 64)
        recorded[n_recorded++] = bytes;
    return tr_kernels_cpu()->alloc(bytes);
}

static void test_arena_sizing_from_model(void **state)
{
    (void)state;
    tr_kernels rec = *tr_kernels_cpu();
    rec.alloc = recording_alloc;
    tr_gpt_shape s = {.num_layers = 4, .C = 32, .NH = 4, .T = 16, .max_T = 16, .V = 50,
                      .Vp = 64, .eps = 1e-5f, .init_std = 0.02f, .seed = 1, .layer_first = 0,
                      .layer_count = 4, .is_first = 1, .is_last = 1, .tp_size = 1};
    tr_gpt *g = NULL;
    assert_int_equal(tr_gpt_create(&s, &rec, NULL, &g), TR_OK);
    n_recorded = 0;
    enum { SLOTS = 3, MB = 2 };
    tr_gpt_acts *acts[SLOTS];
    for (int i = 0; i < SLOTS; i++)
        assert_int_equal(tr_gpt_acts_create(g, MB, &acts[i]), TR_OK);
    assert_true(n_recorded >= SLOTS + 1); /* the slots and the shared scratch */
    size_t cap = tr_arena_bytes_for(recorded, (size_t)n_recorded, 256);
    tr_arena a;
    assert_int_equal(tr_arena_init(&a, cap, 256), TR_OK);
    size_t off;
    for (int i = 0; i < n_recorded; i++)
        assert_int_equal(tr_arena_alloc(&a, recorded[i], &off), TR_OK);
    assert_int_equal(tr_arena_alloc(&a, 1, &off), TR_ERR_NOMEM);
    tr_arena_destroy(&a);
    assert_int_equal(tr_arena_init(&a, cap - 256, 256), TR_OK);
    int failed = 0;
    for (int i = 0; i < n_recorded; i++)
        failed |= tr_arena_alloc(&a, recorded[i], &off) != TR_OK;
    assert_true(failed);
    tr_arena_destroy(&a);
    for (int i = 0; i < SLOTS; i++)
        tr_gpt_acts_free(acts[i]);
    tr_gpt_free(g);
}

/* ---------------------------------------------------------------- budget */

#define GiB ((size_t)1 << 30)

static void test_budget(void **state)
{
    (void)state;
    tr_cuda_budget b = {.params = GiB, .grads = GiB, .optimizer = 2 * GiB,
                        .activations = 10 * GiB, .workspace = GiB / 4, .reserved = GiB};
    assert_int_equal(tr_cuda_budget_total(&b), 15 * GiB + GiB / 4);
    assert_int_equal(tr_cuda_budget_check(&b, 16 * GiB, 80 * GiB, 0, "NVIDIA H100"), TR_OK);
    assert_int_equal(tr_cuda_budget_check(&b, 15 * GiB + GiB / 4, 80 * GiB, 0, "x"), TR_OK);
    assert_int_equal(tr_cuda_budget_check(&b, 12 * GiB, 80 * GiB, 3, "NVIDIA H100 80GB HBM3"),
                     TR_ERR_NOMEM);
    assert_string_equal(tr_errmsg(),
                        "GPU 3 (NVIDIA H100 80GB HBM3): training needs 15.25 GiB (parameters "
                        "1.00, gradients 1.00, optimizer 2.00, activations 10.00, workspace "
                        "0.25, reserved 1.00) but only 12.00 GiB of 80.00 GiB are free: short "
                        "by 3.25 GiB; lower training.micro_batch_size, turn on recompute, or "
                        "use more tensor/pipeline parallelism");
    assert_int_equal(tr_cuda_budget_check(&b, 0, 0, 0, NULL), TR_ERR_NOMEM);
    assert_non_null(strstr(tr_errmsg(), "GPU 0 (unknown): training needs 15.25 GiB"));
    tr_cuda_budget huge = {.params = SIZE_MAX, .grads = 5};
    assert_true(tr_cuda_budget_total(&huge) == SIZE_MAX);
    tr_cuda_budget zero = {0};
    assert_int_equal(tr_cuda_budget_check(&zero, 0, 0, 0, "x"), TR_OK);
}

/* ---------------------------------------------------------------- device choice */

/* Ranks sharing a GPU: how many land on each device, and each one's share of its memory. */
static void test_device_share(void **state)
{
    (void)state;
    assert_int_equal(tr_cuda_ranks_on_device(8, 1, 0), 8);
    assert_int_equal(tr_cuda_ranks_on_device(8, 8, 3), 1);
    assert_int_equal(tr_cuda_ranks_on_device(3, 2, 0), 2); /* ranks 0 and 2 */
    assert_int_equal(tr_cuda_ranks_on_device(3, 2, 1), 1);
    assert_int_equal(tr_cuda_ranks_on_device(1, 4, 0), 1);
    assert_int_equal(tr_cuda_ranks_on_device(0, 1, 0), 1);  /* unknown: alone */
    assert_int_equal(tr_cuda_ranks_on_device(2, 4, 3), 1);  /* no local rank uses it */
    size_t G = (size_t)1 << 30;
    assert_true(tr_cuda_device_share(100 * G, 140 * G, 1) == 100 * G);
    assert_true(tr_cuda_device_share(139 * G, 140 * G, 2) == 70 * G);
    assert_true(tr_cuda_device_share(30 * G, 140 * G, 4) == 30 * G); /* less free than a share */
    /* the bf16 GEMM staging: 1/64 of the GPU in [64, 512] MiB, split among sharers */
    size_t M = (size_t)1 << 20;
    assert_true(tr_cuda_staging_bytes(80 * G, 1, 0) == 512 * M);
    assert_true(tr_cuda_staging_bytes(16 * G, 1, 0) == 256 * M);
    assert_true(tr_cuda_staging_bytes(2 * G, 1, 0) == 64 * M);
    assert_true(tr_cuda_staging_bytes(80 * G, 8, 0) == 64 * M);
    assert_true(tr_cuda_staging_bytes(80 * G, 4, 0) == 128 * M);
    assert_true(tr_cuda_staging_bytes(80 * G, 1, 96) == 96 * M);
}

static void test_pick_device(void **state)
{
    (void)state;
    int dev = -1, shared = -1;
    assert_int_equal(tr_cuda_pick_device(NULL, NULL, 8, &dev, &shared), TR_OK);
    assert_int_equal(dev, 0);
    assert_int_equal(shared, 0);
    assert_int_equal(tr_cuda_pick_device("", "LOCAL_RANK", 2, &dev, &shared), TR_OK);
    assert_int_equal(dev, 0);
    assert_int_equal(tr_cuda_pick_device("3", "LOCAL_RANK", 8, &dev, &shared), TR_OK);
    assert_int_equal(dev, 3);
    assert_int_equal(shared, 0);
    assert_int_equal(tr_cuda_pick_device("9", "LOCAL_RANK", 8, &dev, &shared), TR_OK);
    assert_int_equal(dev, 1);
    assert_int_equal(shared, 1);
    assert_int_equal(tr_cuda_pick_device("7", "SLURM_LOCALID", 1, &dev, &shared), TR_OK);
    assert_int_equal(dev, 0); /* eight ranks on one GPU */
    assert_int_equal(shared, 1);
    assert_int_equal(tr_cuda_pick_device("0", "LOCAL_RANK", 0, &dev, &shared), TR_ERR_CONFIG);
    assert_string_equal(tr_errmsg(), "no CUDA device: the CUDA runtime reports 0 devices");
    assert_int_equal(tr_cuda_pick_device("x", "LOCAL_RANK", 4, &dev, &shared), TR_ERR_CONFIG);
    assert_string_equal(tr_errmsg(), "LOCAL_RANK='x' is not a local rank (expected an integer "
                                     "in 0..2147483647)");
    assert_int_equal(tr_cuda_pick_device("-1", "OMPI_COMM_WORLD_LOCAL_RANK", 4, &dev, &shared),
                     TR_ERR_CONFIG);
    assert_string_equal(tr_errmsg(), "OMPI_COMM_WORLD_LOCAL_RANK='-1' is not a local rank "
                                     "(expected an integer in 0..2147483647)");
    assert_int_equal(tr_cuda_pick_device("2x", "LOCAL_RANK", 4, &dev, &shared), TR_ERR_CONFIG);
    assert_int_equal(tr_cuda_pick_device("99999999999", "LOCAL_RANK", 4, &dev, &shared),
                     TR_ERR_CONFIG);
}

/* ---------------------------------------------------------------- switches */

/* tr_cuda_check_switches on a one-variable environment (beside an unrelated one) */
static int check_env(const char *entry)
{
    char *envp[] = {(char *)"PATH=/usr/bin", (char *)entry, NULL};
    return tr_cuda_check_switches(envp);
}

static void test_switches(void **state)
{
    (void)state;
    static const char *const good[] = {
        "TRIDENT_CUDA_ATTENTION=wmma", "TRIDENT_CUDA_ATTENTION=cudnn",
        "TRIDENT_CUDA_ATTENTION=cudnn-backward", "TRIDENT_CUDA_ATTENTION=mma",
        "TRIDENT_CUDA_ATTENTION=cudnn-nondeterministic",
        "TRIDENT_CUDA_ATTENTION_BWD=fused", "TRIDENT_CUDA_ATTENTION_BWD=split",
        "TRIDENT_CUDA_ATTENTION_KV=64", "TRIDENT_CUDA_EPILOGUE=0", "TRIDENT_CUDA_GELU=separate",
        "TRIDENT_CUDA_GEMM=fast", "TRIDENT_CUDA_HEAD=fp32", "TRIDENT_CUDA_ACTIVATIONS=fp32",
        "TRIDENT_CUDA_NORM_BACKWARD=two-pass", "TRIDENT_CUDA_XENT=two-pass",
        "TRIDENT_CUDA_ATTENTION_IN=fp32", "TRIDENT_CUDA_ATTENTION_OUT=bf16",
        "TRIDENT_CUDA_STAGING_MIB=1", "TRIDENT_CUDA_GEMM_CHOICES=none",
        "TRIDENT_CUDA_GEMM_KEYS=/tmp/keys.txt", "TRIDENT_CUDA_HOME=/usr/local/cuda",
        "TRIDENT_CUDAX=1", /* not the prefix */ "OTHER=TRIDENT_CUDA_ATTENTION=x",
        "TRIDENT_CUDA_ATTENTION=", "TRIDENT_CUDA_GEMM_CHOICES=", "TRIDENT_CUDA_STAGING_MIB=",
        "TRIDENT_CUDA_GEMM_KEYS="}; /* (empty: the default, as unset) */
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        if (check_env(good[i]))
            fail_msg("%s refused: %s", good[i], tr_errmsg());
    }
    assert_int_equal(tr_cuda_check_switches((char *[]){NULL}), TR_OK);
    static const char *const bad[] = {
        "TRIDENT_CUDA_ATTENTION=cudnnn", "TRIDENT_CUDA_ATTENTION=CUDNN",
        "TRIDENT_CUDA_ATTENTION=cudnn ", "TRIDENT_CUDA_ATTENTION= cudnn",
        "TRIDENT_CUDA_ATTENTION_BWD=fuse", "TRIDENT_CUDA_ATTENTION_KV=48",
        "TRIDENT_CUDA_EPILOGUE=no", "TRIDENT_CUDA_STAGING_MIB=0", "TRIDENT_CUDA_STAGING_MIB=-1",
        "TRIDENT_CUDA_STAGING_MIB=1x", "TRIDENT_CUDA_STAGING_MIB= 1",
        "TRIDENT_CUDA_ATTENTON=cudnn", "TRIDENT_CUDA_=1", "TRIDENT_CUDA_attention=cudnn",
        "TRIDENT_CUDA_ATTENTON="}; /* (a misspelt name even when empty) */
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        if (check_env(bad[i]) != TR_ERR_CONFIG)
            fail_msg("%s accepted", bad[i]);
    }
    assert_int_equal(check_env("TRIDENT_CUDA_ATTENTION=cudnnn"), TR_ERR_CONFIG);
    assert_string_equal(tr_errmsg(), "cuda: TRIDENT_CUDA_ATTENTION=cudnnn: it takes "
                                     "mma|wmma|cudnn|cudnn-forward|cudnn-backward|"
                                     "cudnn-nondeterministic");
    assert_int_equal(check_env("TRIDENT_CUDA_ATTENTON=cudnn"), TR_ERR_CONFIG);
    assert_non_null(strstr(tr_errmsg(), "TRIDENT_CUDA_ATTENTON is not a switch of the CUDA "
                                        "backend"));
    assert_non_null(strstr(tr_errmsg(), "ATTENTION_BWD"));
}

/* ---------------------------------------------------------------- dispatch */

static void test_dispatch(void **state)
{
    (void)state;
    assert_ptr_equal(tr_kernels_get("cpu"), tr_kernels_cpu());
#ifdef TR_HAVE_CUDA
    const tr_kernels *bf = tr_kernels_get("cuda");
    if (!bf) { /* no GPU here: a clear message, the same every time, from both names */
        char first[512];
        snprintf(first, sizeof first, "%s", tr_errmsg());
        assert_memory_equal(first, "no CUDA device: ", 16);
        assert_null(tr_kernels_get("cuda-fp32"));
        assert_string_equal(tr_errmsg(), first);
        assert_int_equal(tr_cuda_init(), TR_ERR_CONFIG);
        assert_string_equal(tr_errmsg(), first);
        assert_null(tr_kernels_cuda(TR_CUDA_FP32));
        assert_int_equal(tr_cuda_workspace_bytes(), 0);
        assert_int_equal(tr_cuda_device(), -1);
        size_t f = 1, t = 1;
        assert_int_equal(tr_cuda_mem_info(&f, &t), TR_ERR_CONFIG);
        assert_int_equal(f, 0);
        tr_cuda_budget b = {.activations = 1 << 20};
        assert_int_equal(tr_cuda_reserve(&b), TR_ERR_CONFIG);
        print_message("no GPU: %s\n", first);
    } else {
        const tr_kernels *f32 = tr_kernels_get("cuda-fp32");
        assert_non_null(f32);
        assert_string_equal(bf->name, "cuda");
        assert_string_equal(f32->name, "cuda-fp32");
        assert_ptr_equal(f32->layernorm_forward, bf->layernorm_forward);
        assert_ptr_not_equal(f32->gemm, bf->gemm);
    }
    assert_int_equal(tr_cuda_status(), TR_OK);
#else
    assert_null(tr_kernels_get("cuda"));
    assert_string_equal(tr_errmsg(), "the CUDA backend is not built in");
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bf16_known_values),
        cmocka_unit_test(test_bf16_interesting_patterns),
        cmocka_unit_test(test_bf16_round_trip),
        cmocka_unit_test(test_arena_basics),
        cmocka_unit_test(test_arena_random),
        cmocka_unit_test(test_arena_bytes_for),
        cmocka_unit_test(test_arena_sizing_from_model),
        cmocka_unit_test(test_budget),
        cmocka_unit_test(test_pick_device),
        cmocka_unit_test(test_device_share),
        cmocka_unit_test(test_switches),
        cmocka_unit_test(test_dispatch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
