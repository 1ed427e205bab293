/* benchmarks/gpu_step: one GPU's training step of GPT-2 124M (12 layers, 768 hidden, 12 heads,
 * sequence 1024, vocabulary 50257 padded to 50304) on the CUDA table: forward, backward,
 * global gradient norm, AdamW, at the largest micro-batch that fits.
 *
 * The micro-batch: for each candidate (largest first) the activation memory is measured by
 * a dry run (the model's allocation requests through a table whose alloc only counts), the
 * budget (parameters, gradients, Adam, activations, workspace, 1 GiB reserved) is checked
 * against the free memory (tr_cuda_budget_check), and the first that fits is used; the
 * planner's estimate (plan/: Korthikanti et al.) is printed beside the measurement. Then
 * tr_cuda_reserve() makes one arena for all of it.
 *
 * Reports ms/iter (median), tokens/s, model TFLOP/s (PaLM: 6N + 12 l h s per token) and
 * MFU against the GPU's dense bf16 peak (H100 SXM / H200 989 TFLOP/s, H100 PCIe 756, A100
 * 312, or --peak-tflops). --json prints one JSON object (benchmarks/gpu_step.sh reads it).
 *   gpu_step [--precision bf16|fp32] [--micro-batch B] [--iters N] [--warmup W] [--seq T]
 *            [--layers L] [--hidden C] [--heads NH] [--vocab V] [--peak-tflops P] [--json]
 * Exit 77 (with the reason) where no GPU is usable. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "kernels/cuda/cuda.h"
#include "model/gpt.h"
#include "plan/plan.h"

/* ---------------------------------------------------------------- dry run */

static size_t requests[256];
static int n_requests;
static uintptr_t fake_next = 1u << 20;

/* Counts; returns distinct, never dereferenced addresses (the model only carves views). */
static void *counting_alloc(size_t bytes)
{
    if (n_requests < 256)
        requests[n_requests++] = bytes;
    void *p = (void *)fake_next;
    fake_next += (bytes + 4095) & ~(size_t)4095;
    return p;
}

static void counting_free(void *p) { (void)p; }

/* Bytes of one activation slot + the shared scratch for micro-batch B (arena-rounded). */
static size_t measure_activations(const tr_kernels *k, const tr_gpt_shape *s, int B)
{
    tr_kernels counting = *k;
    counting.alloc = counting_alloc;
    counting.free = counting_free;
    tr_gpt *g = NULL;
    tr_gpt_acts *a = NULL;
    n_requests = 0;
    if (tr_gpt_create(s, &counting, NULL, &g) || tr_gpt_acts_create(g, B, &a)) {
        fprintf(stderr, "gpu_step: dry run: %s\n", tr_errmsg());
        exit(1);
    }
    size_t bytes = tr_arena_bytes_for(requests, (size_t)n_requests, 256);
    tr_gpt_acts_free(a);
    tr_gpt_free(g);
    return bytes;
}

static double peak_for(const char *name)
{
    if (strstr(name, "H100") && strstr(name, "PCIe"))
        return 756e12;
    if (strstr(name, "H100") || strstr(name, "H200") || strstr(name, "GH200"))
        return 989.4e12;
    if (strstr(name, "A100"))
        return 312e12;
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    const char *precision = "bf16";
    int B = 0, iters = 10, warmup = 3, T = 1024, L = 12, C = 768, NH = 12, V = 50257, json = 0;
    double peak = 0;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(o, "--json")) {
            json = 1;
            continue;
        }
        if (!v) {
            fprintf(stderr, "gpu_step: %s needs a value\n", o);
            return 2;
        }
        i++;
        if (!strcmp(o, "--precision")) precision = v;
        else if (!strcmp(o, "--micro-batch")) B = atoi(v);
        else if (!strcmp(o, "--iters")) iters = atoi(v);
        else if (!strcmp(o, "--warmup")) warmup = atoi(v);
        else if (!strcmp(o, "--seq")) T = atoi(v);
        else if (!strcmp(o, "--layers")) L = atoi(v);
        else if (!strcmp(o, "--hidden")) C = atoi(v);
        else if (!strcmp(o, "--heads")) NH = atoi(v);
        else if (!strcmp(o, "--vocab")) V = atoi(v);
        else if (!strcmp(o, "--peak-tflops")) peak = atof(v) * 1e12;
        else {
            fprintf(stderr, "gpu_step: unknown option %s\n", o);
            return 2;
        }
    }
    int bf16 = strcmp(precision, "fp32") != 0;
    const tr_kernels *k = tr_kernels_get(bf16 ? "cuda" : "cuda-fp32");
    if (!k) {
        printf("SKIP: %s\n", tr_errmsg());
        return 77;
    }
    if (iters < 1 || warmup < 0 || T < 1 || L < 1 || C < 1 || NH < 1 || C % NH || V < 1) {
        fprintf(stderr, "gpu_step: impossible shape or counts\n");
        return 2;
    }
    int Vp = (V + 127) / 128 * 128;
    tr_gpt_shape s = {.num_layers = L, .C = C, .NH = NH, .T = T, .max_T = T, .V = V, .Vp = Vp,
                      .eps = 1e-5f, .init_std = 0.02f, .seed = 1234, .layer_first = 0,
                      .layer_count = L, .is_first = 1, .is_last = 1, .tp_size = 1};
    if (!peak)
        peak = peak_for(tr_cuda_device_name());

    /* parameters: a model on the counting table tells their number */
    tr_kernels counting = *k;
    counting.alloc = counting_alloc;
    counting.free = counting_free;
    tr_gpt *probe = NULL;
    if (tr_gpt_create(&s, &counting, NULL, &probe)) {
        fprintf(stderr, "gpu_step: %s\n", tr_errmsg());
        return 1;
    }
    size_t n_params = tr_gpt_num_params(probe);
    tr_gpt_free(probe);
    size_t pbytes = n_params * sizeof(float);

    /* the largest micro-batch that fits */
    static const int candidates[] = {128, 96, 64, 48, 32, 24, 16, 12, 8, 6, 4, 2, 1};
    size_t free_b = 0, total_b = 0;
    if (tr_cuda_mem_info(&free_b, &total_b)) {
        fprintf(stderr, "gpu_step: %s\n", tr_errmsg());
        return 1;
    }
    tr_cuda_budget budget = {0};
    int chosen = 0;
    for (size_t c = 0; c < sizeof candidates / sizeof candidates[0]; c++) {
        int b = B ? B : candidates[c];
        tr_cuda_budget t = {.params = pbytes, .grads = pbytes, .optimizer = 2 * pbytes,
                            .activations = measure_activations(k, &s, b),
                            .workspace = tr_cuda_workspace_bytes(),
                            .reserved = (size_t)1 << 30};
        double planned = L * tr_plan_layer_activation_bytes(T, b, C, NH, 1, 0,
                                                            TR_PLAN_RECOMPUTE_NONE, bf16) +
                         8.0 * T * b * Vp;
        int fits = tr_cuda_budget_check(&t, free_b, total_b, tr_cuda_device(),
                                        tr_cuda_device_name()) == TR_OK;
        if (!json)
            printf("micro-batch %3d: activations %.2f GiB measured (planner: %.2f GiB), total "
                   "%.2f GiB of %.2f free: %s\n",
                   b, (double)t.activations / (1 << 30), planned / (1 << 30),
                   (double)tr_cuda_budget_total(&t) / (1 << 30), (double)free_b / (1 << 30),
                   fits ? "fits" : "too big");
        if (fits || B) {
            if (!fits) {
                fprintf(stderr, "gpu_step: %s\n", tr_errmsg());
                return 1;
            }
            budget = t, chosen = b;
            break;
        }
    }
    if (!chosen) {
        fprintf(stderr, "gpu_step: not even micro-batch 1 fits: %s\n", tr_errmsg());
        return 1;
    }
    B = chosen;
    if (tr_cuda_reserve(&budget)) {
        fprintf(stderr, "gpu_step: %s\n", tr_errmsg());
        return 1;
    }

    /* the model, its buffers (one arena block each), one activation slot */
    tr_gpt *g = NULL;
    tr_gpt_acts *a = NULL;
    float *params = k->alloc(pbytes), *grads = k->alloc(pbytes), *m = k->alloc(pbytes),
          *v = k->alloc(pbytes);
    if (!params || !grads || !m || !v || tr_gpt_create(&s, k, NULL, &g)) {
        fprintf(stderr, "gpu_step: %s\n", tr_errmsg());
        return 1;
    }
    tr_gpt_bind(g, params, grads);
    if (tr_gpt_init_params(g) || tr_gpt_acts_create(g, B, &a)) {
        fprintf(stderr, "gpu_step: %s\n", tr_errmsg());
        return 1;
    }
    size_t ntok = (size_t)B * T;
    int32_t *tokens = malloc(ntok * sizeof *tokens), *targets = malloc(ntok * sizeof *targets);
    uint64_t x = 99;
    for (size_t i = 0; i < ntok; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        tokens[i] = (int32_t)(x % (uint64_t)V);
        targets[i] = (int32_t)((x >> 24) % (uint64_t)V);
    }
    double *ms = calloc((size_t)iters, sizeof *ms);
    float loss = 0;
    double norm = 0;
    for (int it = 0; it < warmup + iters; it++) {
        k->synchronize(NULL);
        double t0 = tr_now();
        k->zero(NULL, grads, pbytes);
        if (tr_gpt_forward(g, a, tokens, NULL, targets, 1.0f / (float)ntok, &loss) ||
            tr_gpt_backward(g, a, NULL)) {
            fprintf(stderr, "gpu_step: %s\n", tr_errmsg());
            return 1;
        }
        norm = sqrt(k->sumsq(NULL, grads, n_params));
        float clip = norm > 1.0 ? (float)(1.0 / norm) : 1.0f;
        k->adamw(NULL, params, grads, m, v, n_params, 6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, clip,
                 it + 1);
        k->synchronize(NULL);
        if (it >= warmup)
            ms[it - warmup] = (tr_now() - t0) * 1e3;
    }
    if (tr_cuda_status()) {
        fprintf(stderr, "gpu_step: %s\n", tr_errmsg());
        return 1;
    }
    qsort(ms, (size_t)iters, sizeof *ms, cmp_double);
    double med = ms[iters / 2];
    double tok_s = (double)ntok / (med / 1e3);
    double tflops = tr_gpt_flops_per_token(&s, (double)n_params) * tok_s / 1e12;
    double mfu = peak > 0 ? tflops * 1e12 / peak : NAN;
    size_t free_after = 0, total_after = 0;
    if (tr_cuda_mem_info(&free_after, &total_after))
        fprintf(stderr, "gpu_step: %s\n", tr_errmsg());
    if (json) {
        char mfu_s[32] = "null";
        if (peak > 0)
            snprintf(mfu_s, sizeof mfu_s, "%.4f", mfu);
        printf("{\"impl\": \"trident\", \"precision\": \"%s\", \"gpu\": \"%s\", \"micro_batch\": "
               "%d, \"seq\": %d, \"params\": %zu, \"ms_per_iter\": %.3f, \"tokens_per_s\": %.1f, "
               "\"tflops\": %.2f, \"mfu\": %s, \"peak_tflops\": %.1f, \"loss\": %.4f, "
               "\"memory_gib\": %.2f}\n",
               precision, tr_cuda_device_name(), B, T, n_params, med, tok_s, tflops, mfu_s,
               peak / 1e12, loss, (double)(total_after - free_after) / (1 << 30));
    } else {
        printf("trident %s on %s: GPT %dL %dh, %zu parameters, micro-batch %d x %d tokens\n",
               precision, tr_cuda_device_name(), L, C, n_params, B, T);
        printf("  %.2f ms/iter (median of %d), %.0f tokens/s, %.1f TFLOP/s, MFU %.1f%% (peak "
               "%.0f TFLOP/s), loss %.4f, grad norm %.3f, %.2f GiB in use\n",
               med, iters, tok_s, tflops, 100 * mfu, peak / 1e12, loss, norm,
               (double)(total_after - free_after) / (1 << 30));
    }
    tr_gpt_acts_free(a);
    tr_gpt_free(g);
    k->free(params), k->free(grads), k->free(m), k->free(v);
    free(tokens), free(targets), free(ms);
    return 0;
}
