/* CPU attention, forward and backward, at one shape: the best of `repeats` runs of each, and
 * the bytes the op keeps between forward and backward plus its backward scratch, read from
 * the backend's allocator (bytes_in_use). Built against the tree it sits in (the fused
 * kernels: out + lse saved, scratch B*(NH+1)*T floats) or, with -DTR_OLD_ATTENTION_API,
 * against a tree before issue 24's item 7 (att (B, NH, T, T) saved, datt of the same size as
 * scratch): benchmarks/attention_cpu.sh builds both and prints them side by side.
 * Usage: attention_cpu B T NH HS [repeats [backend]]   (OMP_NUM_THREADS sets the CPU team's
 * size; backend: cpu (default), or in a CUDA build cuda (bf16 tiles) / cuda-fp32: the same
 * fused kernels on the GPU, each run synchronised). */
#include <stdio.h>
#include <stdlib.h>

#include "core/core.h"
#include "kernels/kernels.h"

static const tr_kernels *K;

static float *buf(size_t n, int fill)
{
    float *p = K->alloc(n * sizeof(float)), *h = fill ? malloc(n * sizeof(float)) : NULL;
    if (!p || (fill && !h)) {
        fprintf(stderr, "attention_cpu: out of memory for %zu floats\n", n);
        exit(1);
    }
    for (size_t i = 0; fill && i < n; i++)
        h[i] = (float)((i * 2654435761u) % 2001) / 1000.0f - 1.0f;
    if (fill)
        K->to_device(NULL, p, h, n * sizeof(float));
    free(h);
    return p;
}

static size_t in_use(void) { return K->bytes_in_use ? K->bytes_in_use(NULL) : 0; }

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: attention_cpu B T NH HS [repeats]\n");
        return 2;
    }
    int B = atoi(argv[1]), T = atoi(argv[2]), NH = atoi(argv[3]), HS = atoi(argv[4]);
    int repeats = argc > 5 ? atoi(argv[5]) : 3;
    if (B < 1 || T < 1 || NH < 1 || HS < 1 || repeats < 1) {
        fprintf(stderr, "attention_cpu: sizes and repeats must be positive\n");
        return 2;
    }
    K = argc > 6 ? tr_kernels_get(argv[6]) : tr_kernels_cpu();
    if (!K) {
        fprintf(stderr, "attention_cpu: %s\n", tr_errmsg());
        return 2;
    }
    size_t C = (size_t)NH * HS, N = (size_t)B * T;
    float *qkv = buf(N * 3 * C, 1), *dout = buf(N * C, 1), *out = buf(N * C, 0),
          *dqkv = buf(N * 3 * C, 0);
    size_t before = in_use();
#ifdef TR_OLD_ATTENTION_API
    const char *kernel = "materialised (att, datt)";
    float *saved = buf((size_t)B * NH * T * T, 0), *scratch = buf((size_t)B * NH * T * T, 0);
#define FORWARD() K->attention_forward(NULL, out, saved, qkv, B, T, NH, HS, NULL)
#define BACKWARD() K->attention_backward(NULL, dqkv, scratch, dout, qkv, saved, B, T, NH, HS)
#else
    const char *kernel = "fused (lse)";
    float *saved = buf((size_t)B * NH * T, 0), *scratch = buf((size_t)B * (NH + 1) * T, 0);
#define FORWARD() K->attention_forward(NULL, out, saved, qkv, B, T, NH, HS, NULL)
#define BACKWARD() \
    K->attention_backward(NULL, dqkv, scratch, dout, qkv, out, saved, B, T, NH, HS, NULL)
#endif
    size_t extra = in_use() - before;
    double best[2] = {1e30, 1e30};
    FORWARD();
    BACKWARD(); /* warm-up */
    for (int r = 0; r < repeats; r++) {
        K->synchronize(NULL);
        double t0 = tr_now();
        FORWARD();
        K->synchronize(NULL);
        double t1 = tr_now();
        BACKWARD();
        K->synchronize(NULL);
        double t2 = tr_now();
        best[0] = t1 - t0 < best[0] ? t1 - t0 : best[0];
        best[1] = t2 - t1 < best[1] ? t2 - t1 : best[1];
    }
    double flops = 2.0 * 2 * B * NH * (double)T * T * HS / 2; /* causal half of QK^T and PV */
    printf("%-26s %s B%d T%d NH%d HS%d threads %d: forward %.3f ms (%.1f GFLOP/s), backward "
           "%.3f ms (%.1f GFLOP/s), saved + scratch %.2f MiB\n",
           kernel, K->name, B, T, NH, HS, tr_kernels_cpu_threads(), best[0] * 1e3,
           flops / best[0] / 1e9, best[1] * 1e3, 2.5 * flops / best[1] / 1e9, extra / 1048576.0);
    K->free(qkv), K->free(dout), K->free(out), K->free(dqkv), K->free(saved), K->free(scratch);
    return 0;
}
