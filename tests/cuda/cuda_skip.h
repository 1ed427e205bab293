/* tests/cuda: when the CUDA backend cannot start, SKIP only where there is no GPU.
 *
 * A GPU check that cannot get its table calls cuda_unusable(), which prints one line and
 * returns the exit status: 77 (meson's SKIP) "SKIP: no GPU: <reason>" when this machine has
 * no usable device to speak of (the runtime finds none, none is visible, or there is no
 * NVIDIA driver at all), and 1 "FAIL: a GPU is here but the CUDA backend cannot use it:
 * <reason>" otherwise: a driver too old for the runtime, a failed cuBLASLt or stream
 * initialisation, a bad LOCAL_RANK. Those used to be SKIPs (issue 25, point 9). Checked
 * without a GPU by an LD_PRELOAD shim whose cudaGetDeviceCount reports one device, so that
 * init fails at cudaSetDevice: the old checks said SKIP (77), these say FAIL (1); with no
 * driver here (the runtime's error 35) they still say SKIP. */
#ifndef TR_TESTS_CUDA_SKIP_H
#define TR_TESTS_CUDA_SKIP_H

#include <stdio.h>

#include <cuda_runtime_api.h>

#include "core/core.h"

/* Whether the NVIDIA kernel driver is loaded (a GPU is installed, usable or not; containers
 * with GPUs see the host's /proc/driver/nvidia). */
static inline int cuda_driver_loaded(void)
{
    FILE *f = fopen("/proc/driver/nvidia/version", "r");
    if (f)
        fclose(f);
    return f != NULL;
}

/* After tr_cuda_init() (or tr_kernels_get("cuda...")) failed: print SKIP or FAIL with its
 * message and return the exit status (77 or 1). */
static inline int cuda_unusable(void)
{
    char why[512];
    snprintf(why, sizeof why, "%s", tr_errmsg());
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    (void)cudaGetLastError();
    /* no device: none found, none visible (CUDA_VISIBLE_DEVICES), or no driver at all (the
     * runtime then reports an insufficient driver or the stub library) */
    int none = e == cudaErrorNoDevice || (e == cudaSuccess && count == 0) ||
               ((e == cudaErrorInsufficientDriver || e == cudaErrorStubLibrary) &&
                !cuda_driver_loaded());
    if (none) {
        printf("SKIP: no GPU: %s\n", why);
        return 77;
    }
    printf("FAIL: a GPU is here but the CUDA backend cannot use it: %s (cudaGetDeviceCount: "
           "%s, %d devices)\n", why, cudaGetErrorString(e), count);
    return 1;
}

#endif
