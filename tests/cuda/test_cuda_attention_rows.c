/* kernels/cuda/attention_rows.cu (context parallelism's attention_rows_*) on the GPU against
 * the CPU table: forward output and lse, backward's accumulated dqkv, with GQA, ALiBi, a
 * block at q0 = 0 and one past it, head sizes 16 .. 128. SKIP (77) without a GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "kernels/cuda/cuda.h"
#include "kernels/kernels.h"
#include "tests/cuda/cuda_skip.h"
#include "tests/cuda/ops_check.h"


static void check_rows(int B, int Tk, int q0, int NH, int NG, int HS, int alibi)
{
    ops_check_group("attention_rows B %d Tk %d q0 %d NH %d NG %d HS %d%s", B, Tk, q0, NH, NG, HS,
                    alibi ? " alibi" : "");
    int nq = Tk - q0;
    size_t nqkv = (size_t)B * Tk * NG * (NH / NG + 2) * HS, nout = (size_t)B * nq * NH * HS;
    size_t nlse = (size_t)B * NH * nq;
    float *qkv = host(nqkv, -1.0f, 1.0f), *dout = host(nout, -1.0f, 1.0f);
    float *slopes = alibi ? host((size_t)NH, 0.01f, 0.5f) : NULL;
    float *out = host(nout, 0, 0), *lse = host(nlse, 0, 0), *dqkv = host(nqkv, 0, 0);
    CPU->attention_rows_forward(NULL, out, lse, qkv, slopes, B, Tk, q0, NH, NG, HS);
    CPU->attention_rows_backward(NULL, dqkv, dout, qkv, out, lse, slopes, B, Tk, q0, NH, NG, HS);
    float *d_qkv = dev(F32, qkv, nqkv * 4), *d_dout = dev(F32, dout, nout * 4);
    float *d_slopes = slopes ? dev(F32, slopes, (size_t)NH * 4) : NULL;
    float *d_out = dev(F32, NULL, nout * 4), *d_lse = dev(F32, NULL, nlse * 4);
    float *d_dqkv = dev(F32, NULL, nqkv * 4);
    F32->zero(NULL, d_dqkv, nqkv * 4);
    F32->attention_rows_forward(NULL, d_out, d_lse, d_qkv, d_slopes, B, Tk, q0, NH, NG, HS);
    F32->attention_rows_backward(NULL, d_dqkv, d_dout, d_qkv, d_out, d_lse, d_slopes, B, Tk, q0,
                                 NH, NG, HS);
    compare_back("attention_rows_forward out", F32, d_out, out, nout, TOL_FP32);
    compare_back("attention_rows_forward lse", F32, d_lse, lse, nlse, TOL_FP32);
    compare_back("attention_rows_backward dqkv", F32, d_dqkv, dqkv, nqkv, TOL_FP32);
    F32->free(d_qkv), F32->free(d_dout), F32->free(d_slopes), F32->free(d_out);
    F32->free(d_lse), F32->free(d_dqkv);
    free(qkv), free(dout), free(slopes), free(out), free(lse), free(dqkv);
}

int main(void)
{
    ops_check_report_crashes();
    CPU = tr_kernels_cpu();
    F32 = tr_kernels_get("cuda-fp32");
    if (!F32)
        return cuda_unusable(); /* SKIP without a GPU, FAIL with one */
    printf("GPU %d: %s\n", tr_cuda_device(), tr_cuda_device_name());
    check_rows(2, 40, 0, 4, 4, 16, 0);
    check_rows(2, 96, 64, 8, 2, 64, 1);
    check_rows(1, 257, 193, 4, 1, 128, 0);
    check_rows(3, 33, 32, 6, 3, 32, 1);
    if (tr_cuda_status()) {
        failures++;
        fprintf(stderr, "FAIL %s\n", tr_errmsg());
    }
    printf("%d of %d checks agree\n", checks - failures, checks);
    return failures ? 1 : 0;
}
