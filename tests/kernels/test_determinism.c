/* kernels/: every op gives bit-identical results run to run and for any thread count
 * (sizes large enough that the parallel paths are taken), under every OpenBLAS core type
 * this CPU can execute: OpenBLAS reads OPENBLAS_CORETYPE when it loads, so the test runs
 * itself once per core type (Haswell, Zen, SkylakeX, Cooperlake, SapphireRapids where the
 * CPU has the instructions and this OpenBLAS has the kernels) and lists each, whatever
 * OPENBLAS_CORETYPE the environment had. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <cpuid.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kt.h"

/* Sizes chosen above every parallel threshold in kernels/cpu (N*C >= 32768, more than one
 * 64-column block and more than one 256-column block, more than one 65536-element AdamW
 * piece, several sumsq blocks). */
enum { B = 2, T = 96, NH = 5, HS = 64, C = NH * HS, N = B * T, V = 700, NV = 650, TV = 1000 };

/* Inputs (shared by all runs) */
static float *x_nc, *w_c, *b_c, *qkv, *dout_nc, *logits, *big_a, *big_b, *grads;
static int32_t ids[N];

/* Outputs of one run, compared across runs */
typedef struct {
    float *gemm[4], *ln_out, *ln_mean, *ln_rstd, *ln_dx, *ln_dw, *ln_db, *gelu, *dgelu, *att_out,
        *att, *dqkv, *datt, *maxv, *sumexp, *dlogits, *dtable, *dwpe, *dbias, *params, *m, *v,
        *geglu[2], *dgeglu[2];
    double sumsq;
} run_out;

#define GM 150
#define GN 333
#define GK 520 /* 150 x 333 x 520 = 26M multiply-adds: the GEMMs are cut into 6 pieces, the last a tail */

static void run_all(run_out *o)
{
    /* GEMMs: one split by columns (N > M), one by rows (M > N), all transposes */
    for (int t = 0; t < 4; t++) {
        int ta = t & 1, tb = t >> 1, M = t < 2 ? GM : GN, Nn = t < 2 ? GN : GM;
        o->gemm[t] = kt_floats((size_t)M * Nn);
        K->gemm(NULL, ta, tb, M, Nn, GK, 1.0f, big_a, ta ? M : GK, big_b, tb ? GK : Nn, 0.0f,
                o->gemm[t], Nn);
    }
    o->ln_out = kt_floats(N * C), o->ln_mean = kt_floats(N), o->ln_rstd = kt_floats(N);
    K->layernorm_forward(NULL, o->ln_out, o->ln_mean, o->ln_rstd, x_nc, w_c, b_c, N, C, 1e-5f);
    o->ln_dx = kt_floats(N * C), o->ln_dw = kt_floats(C), o->ln_db = kt_floats(C);
    K->layernorm_backward(NULL, o->ln_dx, o->ln_dw, o->ln_db, dout_nc, x_nc, w_c, o->ln_mean,
                          o->ln_rstd, N, C);
    size_t ng = (size_t)N * C * 4;
    o->gelu = kt_floats(ng), o->dgelu = kt_floats(ng);
    K->gelu_forward(NULL, o->gelu, big_a, ng);
    K->gelu_backward(NULL, o->dgelu, big_a, big_b, ng);
    for (int e = 0; e < 2; e++) { /* GeGLU on ng / 2 (gate, up) pairs, tanh and exact GELU */
        o->geglu[e] = kt_floats(ng / 2), o->dgeglu[e] = kt_floats(ng);
        K->geglu_forward(NULL, o->geglu[e], big_a, ng / 2, e);
        K->geglu_backward(NULL, o->dgeglu[e], big_a, big_b, ng / 2, e);
    }
    o->att_out = kt_floats(N * C), o->att = kt_floats(B * NH * T); /* lse */
    K->attention_forward(NULL, o->att_out, o->att, qkv, B, T, NH, HS, NULL);
    o->dqkv = kt_floats(N * 3 * C), o->datt = kt_floats(B * (NH + 1) * T);
    K->attention_backward(NULL, o->dqkv, o->datt, dout_nc, qkv, o->att_out, o->att, B, T, NH, HS,
                          NULL);
    o->maxv = kt_floats(N), o->sumexp = kt_floats(N), o->dlogits = kt_floats(N * V);
    K->xent_row_max(NULL, o->maxv, logits, N, V, NV);
    K->xent_row_sumexp(NULL, o->sumexp, logits, o->maxv, N, V, NV);
    K->xent_backward(NULL, o->dlogits, logits, o->maxv, o->sumexp, ids, N, V, NV, 100, 0.5f);
    o->dtable = kt_floats(TV * C), o->dwpe = kt_floats(T * C), o->dbias = kt_floats(C);
    K->embedding_backward(NULL, o->dtable, dout_nc, ids, N, C, 0, TV);
    K->position_backward(NULL, o->dwpe, dout_nc, B, T, C);
    K->bias_backward(NULL, o->dbias, dout_nc, N, C);
    size_t np = (size_t)N * C * 4;
    o->params = kt_floats(np), o->m = kt_floats(np), o->v = kt_floats(np);
    memcpy(o->params, big_b, np * sizeof(float));
    for (int step = 1; step <= 2; step++)
        K->adamw(NULL, o->params, grads, o->m, o->v, np, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f,
                 step);
    o->sumsq = K->sumsq(NULL, grads, np);
}

static void compare(const run_out *a, const run_out *b)
{
    size_t ng = (size_t)N * C * 4;
    for (int t = 0; t < 4; t++)
        kt_check_same("gemm", a->gemm[t], b->gemm[t], (size_t)GM * GN);
    kt_check_same("layernorm out", a->ln_out, b->ln_out, N * C);
    kt_check_same("layernorm mean", a->ln_mean, b->ln_mean, N);
    kt_check_same("layernorm rstd", a->ln_rstd, b->ln_rstd, N);
    kt_check_same("layernorm dinp", a->ln_dx, b->ln_dx, N * C);
    kt_check_same("layernorm dweight", a->ln_dw, b->ln_dw, C);
    kt_check_same("layernorm dbias", a->ln_db, b->ln_db, C);
    kt_check_same("gelu", a->gelu, b->gelu, ng);
    kt_check_same("gelu backward", a->dgelu, b->dgelu, ng);
    for (int e = 0; e < 2; e++) {
        kt_check_same("geglu", a->geglu[e], b->geglu[e], ng / 2);
        kt_check_same("geglu backward", a->dgeglu[e], b->dgeglu[e], ng);
    }
    kt_check_same("attention out", a->att_out, b->att_out, N * C);
    kt_check_same("attention lse", a->att, b->att, B * NH * T);
    kt_check_same("attention row sums", a->datt, b->datt, B * NH * T);
    kt_check_same("attention dqkv", a->dqkv, b->dqkv, N * 3 * C);
    kt_check_same("xent max", a->maxv, b->maxv, N);
    kt_check_same("xent sumexp", a->sumexp, b->sumexp, N);
    kt_check_same("xent dlogits", a->dlogits, b->dlogits, N * V);
    kt_check_same("embedding_backward", a->dtable, b->dtable, TV * C);
    kt_check_same("position_backward", a->dwpe, b->dwpe, T * C);
    kt_check_same("bias_backward", a->dbias, b->dbias, C);
    kt_check_same("adamw params", a->params, b->params, ng);
    kt_check_same("adamw m", a->m, b->m, ng);
    kt_check_same("adamw v", a->v, b->v, ng);
    assert_true(a->sumsq == b->sumsq);
}

static void release(run_out *o)
{
    float **f = (float **)o;
    for (size_t i = 0; i < offsetof(run_out, sumsq) / sizeof(float *); i++)
        free(f[i]);
}

static void test_run_to_run_and_thread_counts(void **state)
{
    (void)state;
    int max_threads = tr_kernels_cpu_threads();
    run_out ref, again;
    run_all(&ref);
    run_all(&again);
    compare(&ref, &again);
    release(&again);
    int counts[] = {1, 2, 3};
    for (size_t i = 0; i < sizeof counts / sizeof *counts; i++) {
        tr_kernels_cpu_set_threads(counts[i]);
        run_out o;
        run_all(&o);
        compare(&ref, &o);
        release(&o);
    }
    tr_kernels_cpu_set_threads(max_threads);
    release(&ref);
}

char *openblas_get_corename(void);

/* The core types this CPU can execute, from the instructions each one's kernels use. */
static const char *const core_types[] = {"Haswell", "Zen", "SkylakeX", "Cooperlake",
                                         "SapphireRapids"};

static int cpu_can_run(const char *core)
{
    __builtin_cpu_init();
    int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    int avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                 __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
                 __builtin_cpu_supports("avx512cd");
    int bf16 = avx512 && __builtin_cpu_supports("avx512bf16");
    if (!strcmp(core, "Haswell") || !strcmp(core, "Zen"))
        return avx2;
    if (!strcmp(core, "SkylakeX"))
        return avx512;
    if (!strcmp(core, "Cooperlake"))
        return bf16;
    if (!strcmp(core, "SapphireRapids")) { /* AMX tiles are not in GCC 12's cpu_supports list,
                                              AVX512-FP16 not in clang 14's: CPUID 7.0 EDX[23] */
        unsigned eax, ebx, ecx, edx;
        int fp16 = __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) && (edx >> 23 & 1u);
        return bf16 && fp16;
    }
    return 0;
}

/* Run this program again with OPENBLAS_CORETYPE=core; its exit status. */
static int run_with_core(const char *self, const char *core)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        setenv("OPENBLAS_CORETYPE", core, 1);
        setenv("TR_DETERMINISM_CHILD", "1", 1);
        execl(self, self, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) < 0)
        return 1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static int check_this_core(void);

int main(int argc, char **argv)
{
    (void)argc;
    if (getenv("TR_DETERMINISM_CHILD")) {
        printf("OpenBLAS core type %s (asked %s), threads 1, 2, 3 against %d\n",
               openblas_get_corename(), getenv("OPENBLAS_CORETYPE"), tr_kernels_cpu_threads());
        return check_this_core();
    }
    int failed = 0, ran = 0;
    for (size_t i = 0; i < sizeof core_types / sizeof *core_types; i++) {
        const char *core = core_types[i];
        if (!cpu_can_run(core)) {
            printf("core type %s: not supported by this CPU\n", core);
            continue;
        }
        int rc = run_with_core(argv[0], core);
        printf("core type %s: %s\n", core, rc ? "FAILED" : "bit-identical");
        failed += rc != 0;
        ran++;
    }
    printf("%d core types tested, %d failed\n", ran, failed);
    return ran == 0 || failed ? 1 : 0;
}

static int check_this_core(void)
{
    K = tr_kernels_cpu();
    kt_seed(67);
    size_t big = (size_t)N * C * 4;
    x_nc = kt_floats(N * C), w_c = kt_floats(C), b_c = kt_floats(C), qkv = kt_floats(N * 3 * C);
    dout_nc = kt_floats(N * C), logits = kt_floats(N * V), big_a = kt_floats(big);
    big_b = kt_floats(big), grads = kt_floats(big);
    kt_fill(x_nc, N * C, -2, 2);
    kt_fill(w_c, C, 0.5f, 1.5f);
    kt_fill(b_c, C, -1, 1);
    kt_fill(qkv, N * 3 * C, -1, 1);
    kt_fill(dout_nc, N * C, -1, 1);
    kt_fill(logits, N * V, -5, 5);
    kt_fill(big_a, big, -6, 6);
    kt_fill(big_b, big, -1, 1);
    kt_fill(grads, big, -1, 1);
    for (int i = 0; i < N; i++)
        ids[i] = (int32_t)(kt_uniform(0, 1) * 50) % 50; /* many repeats */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_run_to_run_and_thread_counts),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    free(x_nc), free(w_c), free(b_c), free(qkv), free(dout_nc), free(logits), free(big_a),
        free(big_b), free(grads);
    return rc;
}
