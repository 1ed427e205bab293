/* benchmarks/gemm_shapes: times cuBLASLt bf16 GEMMs (fp32 accumulation) over the shapes a
 * transformer's layers make (QKV, projection, MLP and their weight-gradient shapes at several
 * hidden sizes and TP splits, attention's batched score/context products, squares) and prints
 * the table the planner reads: one row "{M, N, K, batch, seconds}," per shape, C (M x N) =
 * A (M x K) B (K x N), `batch` of them, seconds per call (median of 5 timings of enough calls
 * to last >= 20 ms). Paste it into plan/gemm/PRESET.inc (compiled in), or try it first with
 * `trident plan CONFIG --gemm-table FILE`. On stderr: each shape's TFLOP/s beside the preset's
 * analytic curve (plan/device.c) and the median measured/model ratio, which says whether the
 * preset's gemm_efficiency, tile_intensity and k_overhead describe this GPU.
 *   gemm_shapes [--preset a100-80gb|h100-80gb|h200] [--quick] [--out FILE]
 * The preset defaults from the GPU's name. Exit 77 (with the reason) where no GPU is usable;
 * benchmarks/gemm_shapes.sh runs it (scripts/gpu-check.sh's gemm step). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "plan/plan.h"

typedef struct {
    long m, n, k, batch;
} shape;

#define MAX_SHAPES 512

static shape shapes[MAX_SHAPES];
static int n_shapes;

static void add(long m, long n, long k, long batch)
{
    if (n_shapes < MAX_SHAPES && m > 0 && n > 0 && k > 0)
        shapes[n_shapes++] = (shape){m, n, k, batch};
}

/* The linear layers of a GPT layer at hidden h, TP t, T tokens: forward (T, N, K) and the
 * weight gradient (K, N, T) of QKV, projection, fc1, fc2. */
static void linear_shapes(long T, long h, long t, int with_wgrad)
{
    long nk[4][2] = {{3 * h / t, h}, {h, h / t}, {4 * h / t, h}, {h, 4 * h / t}};
    for (int i = 0; i < 4; i++) {
        add(T, nk[i][0], nk[i][1], 1);
        if (with_wgrad)
            add(nk[i][1], nk[i][0], T, 1);
    }
}

static void build_grid(int quick)
{
    static const long hs[] = {768, 2304, 4096, 6144, 8192, 12288, 16384};
    static const long tps[] = {1, 2, 4, 8};
    int nh = quick ? 4 : 7;
    for (int i = 0; i < nh; i++)
        for (int j = 0; j < 4; j++) {
            long h = hs[quick ? 2 * i : i], t = tps[j];
            if (quick && t != 1 && t != 8)
                continue;
            if (h / t < 128)
                continue;
            linear_shapes(2048, h, t, 0);
            linear_shapes(8192, h, t, !quick);
        }
    /* attention: b a/t heads of (s, s, d) scores and (s, d, s) contexts */
    static const long seqs[] = {1024, 2048, 4096}, dims[] = {64, 96, 128};
    for (int i = 0; i < (quick ? 2 : 3); i++)
        for (int j = 0; j < 3; j++) {
            long s = seqs[i], d = dims[j], heads = 4 * 2048 / s * 12;
            add(s, s, d, heads);
            add(s, d, s, heads);
        }
    for (long n = 1024; n <= (quick ? 8192 : 16384); n *= 2)
        add(n, n, n, 1);
}

static int fail(const char *what, int code)
{
    printf("SKIP: %s (%d)\n", what, code);
    return 77;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Seconds per call of one shape: the heuristic's first algorithm, timed with events. */
static double time_gemm(cublasLtHandle_t lt, const shape *s, void *A, void *B, void *C,
                        void *ws, size_t ws_bytes, cudaStream_t st)
{
    cublasLtMatmulDesc_t desc = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    double seconds = -1;
    /* column-major: C (m x n) = A (m x k) B (k x n), leading dimensions m, k, m */
    if (cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) ||
        cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, (uint64_t)s->m, (uint64_t)s->k, s->m) ||
        cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, (uint64_t)s->k, (uint64_t)s->n, s->k) ||
        cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, (uint64_t)s->m, (uint64_t)s->n, s->m) ||
        cublasLtMatmulPreferenceCreate(&pref))
        goto done;
    if (s->batch > 1) { /* strided batches, each matrix after the previous */
        int32_t count = (int32_t)s->batch;
        cublasLtMatrixLayout_t lay[3] = {la, lb, lc};
        int64_t stride[3] = {s->m * s->k, s->k * s->n, s->m * s->n};
        for (int i = 0; i < 3; i++) {
            cublasLtMatrixLayoutSetAttribute(lay[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                             sizeof count);
            cublasLtMatrixLayoutSetAttribute(lay[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                             &stride[i], sizeof stride[i]);
        }
    }
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                         &ws_bytes, sizeof ws_bytes);
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    if (cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, 1, &heur, &found) ||
        found < 1)
        goto done;
    float alpha = 1, beta = 0;
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    /* warm up, then as many calls as fill 20 ms */
    int calls = 1;
    for (int w = 0; w < 3; w++)
        cublasLtMatmul(lt, desc, &alpha, A, la, B, lb, &beta, C, lc, C, lc, &heur.algo, ws,
                       ws_bytes, st);
    cudaEventRecord(e0, st);
    cublasLtMatmul(lt, desc, &alpha, A, la, B, lb, &beta, C, lc, C, lc, &heur.algo, ws, ws_bytes,
                   st);
    cudaEventRecord(e1, st);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    if (ms > 0 && ms < 20)
        calls = (int)(20 / ms) + 1;
    double t[5];
    for (int r = 0; r < 5; r++) {
        cudaEventRecord(e0, st);
        for (int i = 0; i < calls; i++)
            cublasLtMatmul(lt, desc, &alpha, A, la, B, lb, &beta, C, lc, C, lc, &heur.algo, ws,
                           ws_bytes, st);
        cudaEventRecord(e1, st);
        cudaEventSynchronize(e1);
        cudaEventElapsedTime(&ms, e0, e1);
        t[r] = ms / 1e3 / calls;
    }
    qsort(t, 5, sizeof t[0], cmp_double);
    seconds = cudaGetLastError() == cudaSuccess ? t[2] : -1;
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
done:
    if (pref)
        cublasLtMatmulPreferenceDestroy(pref);
    if (lc)
        cublasLtMatrixLayoutDestroy(lc);
    if (lb)
        cublasLtMatrixLayoutDestroy(lb);
    if (la)
        cublasLtMatrixLayoutDestroy(la);
    if (desc)
        cublasLtMatmulDescDestroy(desc);
    return seconds;
}

int main(int argc, char **argv)
{
    const char *preset = NULL, *out_path = NULL;
    int quick = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--preset") && i + 1 < argc)
            preset = argv[++i];
        else if (!strcmp(argv[i], "--out") && i + 1 < argc)
            out_path = argv[++i];
        else if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else {
            fprintf(stderr, "usage: gemm_shapes [--preset a100-80gb|h100-80gb|h200] [--quick] "
                            "[--out FILE]\n");
            return 2;
        }
    }
    int n_dev = 0;
    cudaError_t ce = cudaGetDeviceCount(&n_dev);
    if (ce != cudaSuccess || n_dev < 1)
        return fail(ce != cudaSuccess ? cudaGetErrorString(ce) : "no CUDA device", (int)ce);
    struct cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    if (!preset)
        preset = strstr(prop.name, "H200")   ? "h200"
                 : strstr(prop.name, "H100") ? "h100-80gb"
                 : strstr(prop.name, "A100") ? "a100-80gb"
                                             : NULL;
    tr_plan_cluster c;
    int have_model = preset && tr_plan_cluster_preset(preset, &c) == 0;
    if (have_model) { /* compare with the analytic curve alone, not an earlier table */
        c.gemm_table = NULL;
        c.n_gemm_table = 0;
    }
    build_grid(quick);
    size_t max_a = 0, max_b = 0, max_c = 0;
    for (int i = 0; i < n_shapes; i++) {
        const shape *s = &shapes[i];
        size_t a = (size_t)(s->m * s->k * s->batch), b = (size_t)(s->k * s->n * s->batch),
               cc = (size_t)(s->m * s->n * s->batch);
        max_a = a > max_a ? a : max_a;
        max_b = b > max_b ? b : max_b;
        max_c = cc > max_c ? cc : max_c;
    }
    void *A = NULL, *B = NULL, *C = NULL, *ws = NULL;
    size_t ws_bytes = (size_t)32 << 20;
    if (cudaMalloc(&A, 2 * max_a) || cudaMalloc(&B, 2 * max_b) || cudaMalloc(&C, 2 * max_c) ||
        cudaMalloc(&ws, ws_bytes))
        return fail("cannot allocate the operands", 0);
    cudaMemset(A, 0, 2 * max_a); /* zeros: the timing does not depend on the values */
    cudaMemset(B, 0, 2 * max_b);
    cublasLtHandle_t lt;
    if (cublasLtCreate(&lt))
        return fail("cublasLtCreate failed", 0);
    cudaStream_t st;
    cudaStreamCreate(&st);
    FILE *out = out_path ? fopen(out_path, "w") : stdout;
    if (!out) {
        perror(out_path);
        return 1;
    }
    char date[32];
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%d", gmtime(&now));
    fprintf(out, "/* benchmarks/gemm_shapes: cuBLASLt bf16 in and out, fp32 accumulation, %s "
                 "(%d SMs), %s.\n * Rows {M, N, K, batch, seconds}: C (M x N) = A (M x K) B (K x N),"
                 " batch of them, median seconds per call.\n * The planner's %s preset reads "
                 "plan/gemm/%s.inc (docs/planner.md). */\n",
            prop.name, prop.multiProcessorCount, date, preset ? preset : "(no)",
            preset ? preset : "PRESET");
    double ratios[MAX_SHAPES];
    int n_ratios = 0, failed = 0;
    fprintf(stderr, "%8s %7s %7s %5s %10s %8s %8s %6s\n", "M", "N", "K", "batch", "us",
            "TFLOP/s", "model", "ratio");
    for (int i = 0; i < n_shapes; i++) {
        const shape *s = &shapes[i];
        double sec = time_gemm(lt, s, A, B, C, ws, ws_bytes, st);
        if (!(sec > 0)) {
            fprintf(stderr, "%8ld %7ld %7ld %5ld  no algorithm or a CUDA error\n", s->m, s->n,
                    s->k, s->batch);
            failed++;
            continue;
        }
        fprintf(out, "{%ld, %ld, %ld, %ld, %.6e},\n", s->m, s->n, s->k, s->batch, sec);
        double flops = 2.0 * s->m * s->n * s->k * s->batch;
        double model = have_model ? tr_plan_gemm_model_s(&c, (double)s->m, (double)s->n,
                                                         (double)s->k, (double)s->batch)
                                  : 0;
        if (model > 0)
            ratios[n_ratios++] = sec / model;
        fprintf(stderr, "%8ld %7ld %7ld %5ld %10.1f %8.1f %8.1f %6.2f\n", s->m, s->n, s->k,
                s->batch, sec * 1e6, flops / sec / 1e12, model > 0 ? flops / model / 1e12 : 0,
                model > 0 ? sec / model : 0);
    }
    if (out != stdout)
        fclose(out);
    if (n_ratios) {
        qsort(ratios, (size_t)n_ratios, sizeof ratios[0], cmp_double);
        fprintf(stderr, "%s: %d shapes, measured / model median %.3f (%.3f .. %.3f)\n", preset,
                n_ratios, ratios[n_ratios / 2], ratios[0], ratios[n_ratios - 1]);
    }
    cublasLtDestroy(lt);
    cudaFree(A);
    cudaFree(B);
    cudaFree(C);
    cudaFree(ws);
    return failed == n_shapes ? 1 : 0;
}
