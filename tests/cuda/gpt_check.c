/* tests/cuda: the GPT-level check — one model, the same initialisation and batches, trained
 * for a few AdamW steps on the CPU table and on both CUDA tables; the loss of every step and
 * the first step's gradients must agree: "cuda-fp32" within 1e-4 (whole-model sums in a
 * different order), "cuda" (bf16 products) within 2e-2 for the loss and 5e-2 for the
 * gradients (relative to each array's largest magnitude).
 *   gpt_check [--layers L] [--hidden C] [--heads NH] [--seq T] [--batch B] [--steps S]
 * Exit 77 (SKIP) with the reason where there is no GPU; 0 when all agree; 1 otherwise (also
 * where a GPU is present but the backend cannot start: cuda_skip.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "kernels/cuda/cuda.h"
#include "tests/cuda/cuda_skip.h"
#include "model/gpt.h"

typedef struct {
    const tr_kernels *k;
    tr_gpt *g;
    tr_gpt_acts *a;
    float *params, *grads, *m, *v;
    size_t n;
    double *losses;
    float *grads0; /* host copy of step 1's gradients */
} run;

static int L = 2, C = 64, NH = 4, T = 32, B = 4, STEPS = 5, V = 256;

static int train(run *r, const tr_gpt_shape *s, const int32_t *tokens, const int32_t *targets)
{
    const tr_kernels *k = r->k;
    int rc = tr_gpt_create(s, k, NULL, &r->g);
    if (rc)
        return rc;
    r->n = tr_gpt_num_params(r->g);
    size_t bytes = r->n * sizeof(float);
    r->params = k->alloc(bytes), r->grads = k->alloc(bytes);
    r->m = k->alloc(bytes), r->v = k->alloc(bytes);
    if (!r->params || !r->grads || !r->m || !r->v)
        return TR_ERR_NOMEM;
    tr_gpt_bind(r->g, r->params, r->grads);
    if ((rc = tr_gpt_init_params(r->g)) || (rc = tr_gpt_acts_create(r->g, B, &r->a)))
        return rc;
    r->losses = calloc((size_t)STEPS, sizeof *r->losses);
    r->grads0 = malloc(bytes);
    for (int step = 0; step < STEPS; step++) {
        k->zero(NULL, r->grads, bytes);
        float loss = 0;
        const int32_t *tk = tokens + (size_t)step * B * T, *tg = targets + (size_t)step * B * T;
        if ((rc = tr_gpt_forward(r->g, r->a, tk, NULL, tg, 1.0f / (float)(B * T), &loss)) ||
            (rc = tr_gpt_backward(r->g, r->a, NULL)))
            return rc;
        r->losses[step] = loss;
        if (step == 0)
            k->to_host(NULL, r->grads0, r->grads, bytes);
        k->adamw(NULL, r->params, r->grads, r->m, r->v, r->n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f,
                 1.0f, step + 1);
    }
    k->synchronize(NULL);
    return TR_OK;
}

static void run_free(run *r)
{
    if (r->a)
        tr_gpt_acts_free(r->a);
    if (r->g)
        tr_gpt_free(r->g);
    if (r->k) {
        r->k->free(r->params), r->k->free(r->grads), r->k->free(r->m), r->k->free(r->v);
    }
    free(r->losses);
    free(r->grads0);
}

static int failures;

static void compare_runs(const run *ref, const run *r, double tol_loss, double tol_grad)
{
    for (int s = 0; s < STEPS; s++) {
        double rel = fabs(r->losses[s] - ref->losses[s]) / fabs(ref->losses[s]);
        int bad = !(rel <= tol_loss);
        failures += bad;
        printf("%s step %d loss %.7f (cpu %.7f) relative difference %.2e%s\n", r->k->name, s + 1,
               r->losses[s], ref->losses[s], rel, bad ? "  FAIL" : "");
    }
    double scale = 0, err = 0;
    for (size_t i = 0; i < ref->n; i++)
        scale = fmax(scale, fabs(ref->grads0[i]));
    for (size_t i = 0; i < ref->n; i++)
        err = fmax(err, fabs((double)r->grads0[i] - ref->grads0[i]));
    int bad = !(err / scale <= tol_grad);
    failures += bad;
    printf("%s step 1 gradients (%zu): error %.2e of the largest%s\n", r->k->name, ref->n,
           err / scale, bad ? "  FAIL" : "");
}

int main(int argc, char **argv)
{
    for (int i = 1; i + 1 < argc; i += 2) {
        int v = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--layers")) L = v;
        else if (!strcmp(argv[i], "--hidden")) C = v;
        else if (!strcmp(argv[i], "--heads")) NH = v;
        else if (!strcmp(argv[i], "--seq")) T = v;
        else if (!strcmp(argv[i], "--batch")) B = v;
        else if (!strcmp(argv[i], "--steps")) STEPS = v;
        else {
            fprintf(stderr, "gpt_check: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    const tr_kernels *f32 = tr_kernels_get("cuda-fp32");
    if (!f32)
        return cuda_unusable(); /* SKIP without a GPU, FAIL with one */
    tr_gpt_shape s = {.num_layers = L, .C = C, .NH = NH, .T = T, .max_T = T, .V = V - 3,
                      .Vp = V, .eps = 1e-5f, .init_std = 0.02f, .seed = 7, .layer_first = 0,
                      .layer_count = L, .is_first = 1, .is_last = 1, .tp_size = 1};
    size_t ntok = (size_t)STEPS * B * T;
    int32_t *tokens = malloc(ntok * sizeof *tokens), *targets = malloc(ntok * sizeof *targets);
    uint64_t x = 42;
    for (size_t i = 0; i < ntok; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        tokens[i] = (int32_t)(x % (uint64_t)s.V);
        targets[i] = (int32_t)((x >> 20) % (uint64_t)s.V);
    }
    run cpu = {.k = tr_kernels_cpu()}, gf = {.k = f32}, gb = {.k = tr_kernels_get("cuda")};
    const char *which[] = {"cpu", "cuda-fp32", "cuda"};
    run *runs[] = {&cpu, &gf, &gb};
    for (int i = 0; i < 3; i++)
        if (train(runs[i], &s, tokens, targets) || tr_cuda_status()) {
            fprintf(stderr, "FAIL training on %s: %s\n", which[i], tr_errmsg());
            return 1;
        }
    printf("GPT L%d C%d NH%d T%d B%d, %zu parameters, %d steps on GPU %d (%s)\n", L, C, NH, T, B,
           cpu.n, STEPS, tr_cuda_device(), tr_cuda_device_name());
    compare_runs(&cpu, &gf, 1e-4, 1e-4);
    compare_runs(&cpu, &gb, 2e-2, 5e-2);
    long ran, refused; /* with TRIDENT_CUDA_ATTENTION=cudnn: whether cuDNN's attention ran */
    if (tr_cuda_cudnn_attention_counts(&ran, &refused) > 0) {
        printf("cuDNN ran %ld attention calls, fell back on %ld\n", ran, refused);
        if (!ran)
            failures++, fprintf(stderr, "FAIL cuDNN was asked for and loaded but ran nothing\n");
    }
    for (int i = 0; i < 3; i++)
        run_free(runs[i]);
    free(tokens);
    free(targets);
    return failures ? 1 : 0;
}
