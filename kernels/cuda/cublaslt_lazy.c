/* cuBLASLt, loaded when first called. libcublasLt is ~540 MB of code and relocated data:
 * linked into the program, it cost every trident process ~0.13 s and tens of MB of copied
 * pages at start, whether or not it ever used the GPU (`trident plan`, `preprocess`, each
 * CPU rank of a job). The functions trident calls (the list below) are defined here with
 * cublasLt.h's prototypes; the first call dlopens the library the build linked against
 * (TR_CUBLASLT_PATH, from kernels/cuda/meson.build; then libcublasLt.so.MAJOR through the program's
 * RPATH and the system's search), or the one TRIDENT_CUBLASLT_LIBRARY=PATH names, and each
 * function forwards to the library's. Where it does not load, every function returns
 * CUBLAS_STATUS_NOT_INITIALIZED (cublasLtGetVersion: 0) and cu_cublaslt_error() says why. */
#include <cublasLt.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/cuda/cublaslt_path.h" /* TR_CUBLASLT_PATH (kernels/cuda/meson.build) */
#include "kernels/cuda/cuda_internal.h"

#define LT_STR_(x) #x
#define LT_STR(x) LT_STR_(x)
#define LT_FAIL CUBLAS_STATUS_NOT_INITIALIZED

/* X(return type, name, (parameters), (arguments), value when the library does not load) */
#define LT_FUNCTIONS(X)                                                                        \
    X(size_t, cublasLtGetVersion, (void), (), 0)                                              \
    X(cublasStatus_t, cublasLtCreate, (cublasLtHandle_t * handle), (handle), LT_FAIL)         \
    X(cublasStatus_t, cublasLtDestroy, (cublasLtHandle_t handle), (handle), LT_FAIL)          \
    X(cublasStatus_t, cublasLtMatmulDescCreate,                                               \
      (cublasLtMatmulDesc_t * desc, cublasComputeType_t compute, cudaDataType_t scale),       \
      (desc, compute, scale), LT_FAIL)                                                        \
    X(cublasStatus_t, cublasLtMatmulDescDestroy, (cublasLtMatmulDesc_t desc), (desc),         \
      LT_FAIL)                                                                                \
    X(cublasStatus_t, cublasLtMatmulDescSetAttribute,                                         \
      (cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const void *buf,       \
       size_t size),                                                                          \
      (desc, attr, buf, size), LT_FAIL)                                                       \
    X(cublasStatus_t, cublasLtMatrixLayoutCreate,                                             \
      (cublasLtMatrixLayout_t * layout, cudaDataType type, uint64_t rows, uint64_t cols,      \
       int64_t ld),                                                                           \
      (layout, type, rows, cols, ld), LT_FAIL)                                                \
    X(cublasStatus_t, cublasLtMatrixLayoutDestroy, (cublasLtMatrixLayout_t layout), (layout), \
      LT_FAIL)                                                                                \
    X(cublasStatus_t, cublasLtMatrixLayoutSetAttribute,                                       \
      (cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr, const void *buf,  \
       size_t size),                                                                          \
      (layout, attr, buf, size), LT_FAIL)                                                     \
    X(cublasStatus_t, cublasLtMatmulPreferenceCreate, (cublasLtMatmulPreference_t * pref),    \
      (pref), LT_FAIL)                                                                        \
    X(cublasStatus_t, cublasLtMatmulPreferenceDestroy, (cublasLtMatmulPreference_t pref),     \
      (pref), LT_FAIL)                                                                        \
    X(cublasStatus_t, cublasLtMatmulPreferenceSetAttribute,                                   \
      (cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,            \
       const void *buf, size_t size),                                                         \
      (pref, attr, buf, size), LT_FAIL)                                                       \
    X(cublasStatus_t, cublasLtMatmulAlgoGetHeuristic,                                         \
      (cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,          \
       cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,          \
       cublasLtMatmulPreference_t pref, int requested, cublasLtMatmulHeuristicResult_t out[], \
       int *returned),                                                                        \
      (handle, desc, a, b, c, d, pref, requested, out, returned), LT_FAIL)                    \
    X(cublasStatus_t, cublasLtMatmulAlgoCheck,                                                \
      (cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,          \
       cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,          \
       const cublasLtMatmulAlgo_t *algo, cublasLtMatmulHeuristicResult_t *result),            \
      (handle, desc, a, b, c, d, algo, result), LT_FAIL)                                      \
    X(cublasStatus_t, cublasLtMatmul,                                                         \
      (cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void *alpha, const void *A,  \
       cublasLtMatrixLayout_t a, const void *B, cublasLtMatrixLayout_t b, const void *beta,   \
       const void *C, cublasLtMatrixLayout_t c, void *D, cublasLtMatrixLayout_t d,            \
       const cublasLtMatmulAlgo_t *algo, void *workspace, size_t workspace_bytes,             \
       cudaStream_t stream),                                                                  \
      (handle, desc, alpha, A, a, B, b, beta, C, c, D, d, algo, workspace, workspace_bytes,   \
       stream),                                                                               \
      LT_FAIL)

static struct {
#define LT_POINTER(ret, name, params, args, fail) ret(*name) params;
    LT_FUNCTIONS(LT_POINTER)
#undef LT_POINTER
} lt;
static pthread_once_t lt_once = PTHREAD_ONCE_INIT;
static char lt_why[768]; /* "" once loaded; else why not */

static void lt_load(void)
{
    const char *env = getenv("TRIDENT_CUBLASLT_LIBRARY");
    /* the library asked for, alone; else the build's, then the one of its major version */
    const char *paths[] = {env && *env ? env : TR_CUBLASLT_PATH,
                           env && *env ? "" : "libcublasLt.so." LT_STR(CUBLAS_VER_MAJOR)};
    void *h = NULL;
    size_t at = 0;
    for (size_t i = 0; i < sizeof paths / sizeof paths[0] && !h; i++) {
        if (!*paths[i])
            continue;
        if ((h = dlopen(paths[i], RTLD_NOW | RTLD_GLOBAL)))
            break;
        const char *e = dlerror();
        at += (size_t)snprintf(lt_why + at, at < sizeof lt_why ? sizeof lt_why - at : 0,
                               "%s%s does not load (%s)", at ? "; " : "", paths[i], e ? e : "?");
        at = at < sizeof lt_why ? at : sizeof lt_why;
    }
    if (!h) {
        if (!at)
            snprintf(lt_why, sizeof lt_why, "no cuBLASLt library to load");
        return;
    }
#define LT_RESOLVE(ret, name, params, args, fail)                                              \
    if (!(lt.name = (ret(*) params)dlsym(h, #name))) {                                         \
        snprintf(lt_why, sizeof lt_why, "the cuBLASLt library has no %s", #name);             \
        return;                                                                                \
    }
    LT_FUNCTIONS(LT_RESOLVE)
#undef LT_RESOLVE
    lt_why[0] = 0;
}

/* The library loaded (once, on the first call): 1, or 0 with cu_cublaslt_error() saying why */
static int lt_ready(void)
{
    pthread_once(&lt_once, lt_load);
    return lt_why[0] == 0;
}

const char *cu_cublaslt_error(void)
{
    return lt_ready() ? NULL : lt_why;
}

#define LT_FORWARD(ret, name, params, args, fail)                                              \
    ret name params                                                                            \
    {                                                                                          \
        return lt_ready() ? lt.name args : fail;                                               \
    }
LT_FUNCTIONS(LT_FORWARD)
#undef LT_FORWARD
