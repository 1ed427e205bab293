/* kernels/cuda/attention_cudnn.h without a GPU: cuDNN (the library installed here) builds the
 * attention graphs trident gives it, forward, deterministic backward and (for
 * TRIDENT_CUDA_ATTENTION=cudnn-nondeterministic) the backward cuDNN picks freely, for an H100
 * and an H200 (SM 90), through its support check, which picks the engines that will run them: the
 * views, the causal mask, the stats and the backward's determinism as a Hopper cuDNN takes
 * them, proven before a GPU run; the candidate engines cuDNN lists for each are printed. cuDNN's run-time compiled engines need a libcuda.so.1: the
 * driver's where there is one, else the toolkit's stub (argv[1]), loaded first.
 * Exit 77 (SKIP) where cuDNN's library does not load.
 * --missing PATH (run with TRIDENT_CUDNN_LIBRARY=PATH, a file that is not a library): the
 * check must say that PATH does not load, and nothing else.
 * usage: test_cudnn_graph LIBCUDA_STUB | test_cudnn_graph --missing PATH */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "kernels/cuda/attention_cudnn.h"

/* cuDNN's device-properties JSON (its CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION fields) */
#define DEVICE_JSON(NAME, SMS, MEM)                                                            \
    "{\"maxGridSize\": [2147483647, 65535, 65535], \"maxBlockSize\": [1024, 1024, 64], "       \
    "\"regsPerBlock\": 65536, \"multiProcessorCount\": " SMS ", \"warpSize\": 32, "              \
    "\"maxSharedMemoryPerBlock\": 49152, \"maxSharedMemoryPerBlockOptin\": 232448, "           \
    "\"reservedSharedMemoryPerBlock\": 1024, \"maxRegistersPerSM\": 65536, "                   \
    "\"maxCtasPerSM\": 32, \"maxThreadsPerBlock\": 1024, \"maxThreadsPerSM\": 2048, "           \
    "\"pciDeviceId\": 0, \"isTccDriver\": 0, \"supportCoopLaunch\": 1, \"totalGlobalMem\": " MEM \
    ", \"smClockRateKHz\": 1980000, \"memClockRateKHz\": 2619000, \"l2CacheSize\": 52428800, "  \
    "\"cudaDeviceId\": 0, \"deviceVer\": 900, \"driverVer\": 13000, \"deviceName\": \"" NAME "\"}"

int main(int argc, char **argv)
{
    if (argc > 2 && !strcmp(argv[1], "--missing")) {
        const char *why = tr_cudnn_attention_check("{}", 90, TR_CUDNN_FORWARD, 1, 64, 1, 64);
        int ok = why && strstr(why, argv[2]) && strstr(why, "does not load");
        printf("%s a library that does not load: %s\n", ok ? "ok  " : "FAIL", why ? why : "NULL");
        return ok ? 0 : 1;
    }
    if (!dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL) &&
        !(argc > 1 && dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL)))
        printf("note: no libcuda.so.1 and no stub (%s): cuDNN's run-time engines will refuse\n",
               argc > 1 ? argv[1] : "none given");
    static const struct {
        const char *name, *json;
    } devices[] = {
        {"H100", DEVICE_JSON("NVIDIA H100 80GB HBM3", "132", "85029158912")},
        {"H200", DEVICE_JSON("NVIDIA H200", "132", "150754820096")},
    };
    /* gpt2-124m at the benchmark's micro-batch 128, a Llama-like head size, a ragged T */
    static const int shapes[][4] = {{128, 1024, 12, 64}, {4, 2048, 16, 128}, {3, 100, 2, 64}};
    static const struct {
        int pass;
        const char *name;
    } passes[] = {{TR_CUDNN_FORWARD, "forward"},
                  {TR_CUDNN_BACKWARD, "backward"},
                  {TR_CUDNN_BACKWARD | TR_CUDNN_NONDETERMINISTIC, "backward (non-deterministic)"}};
    int failures = 0, checks = 0;
    for (size_t d = 0; d < sizeof devices / sizeof *devices; d++)
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
            for (size_t p = 0; p < sizeof passes / sizeof *passes; p++) {
                const int *x = shapes[s];
                const char *why = tr_cudnn_attention_check(devices[d].json, 90, passes[p].pass,
                                                           x[0], x[1], x[2], x[3]);
                if (why && strstr(why, "does not load")) {
                    printf("SKIP: cuDNN's library: %s\n", why);
                    return 77;
                }
                checks++;
                if (why)
                    failures++;
                printf("%s %s %-28s B %d T %d NH %d HS %d%s%s\n", why ? "FAIL" : "ok  ",
                       devices[d].name, passes[p].name, x[0], x[1], x[2], x[3],
                       why ? ": " : "", why ? why : "");
            }
    printf("%d of %d graphs supported\n", checks - failures, checks);
    return failures ? 1 : 0;
}
