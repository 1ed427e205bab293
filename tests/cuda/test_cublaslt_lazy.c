/* kernels/cuda/cublaslt_lazy.c: cuBLASLt is loaded on its first call, not at start (no GPU
 * needed: cublasLtGetVersion and the load run without one).
 *   test_cublaslt_lazy            the library is not mapped before the first call; after it,
 *                                 it is, and its version is the header's major version
 *   test_cublaslt_lazy --missing  TRIDENT_CUBLASLT_LIBRARY names a file that is not a library:
 *                                 cu_cublaslt_error() names it, every function returns
 *                                 CUBLAS_STATUS_NOT_INITIALIZED (cublasLtGetVersion 0), no crash */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <cublasLt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.h"

/* 1 when a library whose path holds `name` is mapped into this process */
static int mapped(const char *name)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[4096];
    int found = 0;
    while (f && fgets(line, sizeof line, f))
        found |= strstr(line, name) != NULL;
    if (f)
        fclose(f);
    return found;
}

static void test_loaded_on_first_call(void **state)
{
    (void)state;
    assert_false(mapped("libcublasLt"));
    size_t version = cublasLtGetVersion();
    const char *why = cu_cublaslt_error();
    if (why)
        fail_msg("cuBLASLt does not load: %s", why);
    assert_true(mapped("libcublasLt"));
    assert_int_equal(version / 10000, CUBLAS_VER_MAJOR);
    cublasLtMatmulPreference_t pref;
    assert_int_equal(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cublasLtMatmulPreferenceDestroy(pref), CUBLAS_STATUS_SUCCESS);
}

static void test_missing_library(void **state)
{
    (void)state;
    const char *lib = getenv("TRIDENT_CUBLASLT_LIBRARY");
    assert_non_null(lib);
    const char *why = cu_cublaslt_error();
    assert_non_null(why);
    assert_non_null(strstr(why, lib));
    assert_non_null(strstr(why, "does not load"));
    assert_int_equal(cublasLtGetVersion(), 0);
    cublasLtHandle_t h;
    assert_int_equal(cublasLtCreate(&h), CUBLAS_STATUS_NOT_INITIALIZED);
    assert_false(mapped("libcublasLt"));
}

int main(int argc, char **argv)
{
    const struct CMUnitTest loaded[] = {cmocka_unit_test(test_loaded_on_first_call)};
    const struct CMUnitTest missing[] = {cmocka_unit_test(test_missing_library)};
    if (argc > 1 && !strcmp(argv[1], "--missing"))
        return cmocka_run_group_tests(missing, NULL, NULL);
    return cmocka_run_group_tests(loaded, NULL, NULL);
}
