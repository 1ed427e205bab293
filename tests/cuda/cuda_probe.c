/* tests/cuda: is a GPU usable here? Prints the device (exit 0), "SKIP: <reason>" (exit 77)
 * where there is no GPU (or fewer than N), or "FAIL: <reason>" (exit 1) where a GPU is
 * present but the CUDA backend cannot start on it (cuda_skip.h).
 *   cuda_probe [--min-devices N]   (N > 1 counts the devices visible to this process) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "core/core.h"
#include "kernels/cuda/cuda.h"
#include "tests/cuda/cuda_skip.h"

int main(int argc, char **argv)
{
    int want = argc == 3 && !strcmp(argv[1], "--min-devices") ? atoi(argv[2]) : 1;
    if (tr_cuda_init())
        return cuda_unusable();
    int count = 0;
    cudaGetDeviceCount(&count);
    if (count < want) {
        printf("SKIP: needs %d GPUs, %d visible\n", want, count);
        return 77;
    }
    size_t free_b = 0, total_b = 0;
    if (tr_cuda_mem_info(&free_b, &total_b)) {
        printf("FAIL: %s\n", tr_errmsg());
        return 1;
    }
    printf("GPU %d of %d: %s, %.1f GiB free of %.1f GiB\n", tr_cuda_device(), count,
           tr_cuda_device_name(), (double)free_b / (1 << 30), (double)total_b / (1 << 30));
    return 0;
}
