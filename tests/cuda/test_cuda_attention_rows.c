/* kernels/cuda/attention_rows.cu (context parallelism's attention_rows_* and
 * attention_rows_dropout_*) on the GPU against the CPU table: forward output and lse,
 * backward's accumulated dqkv, with GQA, ALiBi, a block at q0 = 0 and past it, head sizes
 * 16 .. 256 (the three tiles), the ops' batch; then as model/gpt_cp.c calls them (every rank's
 * two chunks r and 2 CP - 1 - r of a sequence, backward added into one buffer) with and without
 * dropout; and run-to-run determinism: each op run twice gives the same bits. SKIP (77) without
 * a GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/philox.h"
#include "kernels/cuda/cuda.h"
#include "kernels/kernels.h"
#include "tests/cuda/cuda_skip.h"
#include "tests/cuda/ops_check.h"

/* the n floats of two device arrays are the same bits */
static void same_bits(const char *what, const float *d1, const float *d2, size_t n)
{
    float *a = back(F32, d1, n), *b = back(F32, d2, n);
    int same = !memcmp(a, b, n * sizeof(float));
    checks++;
    failures += !same;
    printf("%s %s: run to run %s\n", same ? "ok  " : "FAIL", what,
           same ? "the same bits" : "different bits");
    free(a), free(b);
}

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
    float *d_dqkv = dev(F32, NULL, nqkv * 4), *d_out2 = dev(F32, NULL, nout * 4);
    float *d_lse2 = dev(F32, NULL, nlse * 4), *d_dqkv2 = dev(F32, NULL, nqkv * 4);
    F32->zero(NULL, d_dqkv, nqkv * 4);
    F32->zero(NULL, d_dqkv2, nqkv * 4);
    F32->attention_rows_forward(NULL, d_out, d_lse, d_qkv, d_slopes, B, Tk, q0, NH, NG, HS);
    F32->attention_rows_backward(NULL, d_dqkv, d_dout, d_qkv, d_out, d_lse, d_slopes, B, Tk, q0,
                                 NH, NG, HS);
    F32->attention_rows_forward(NULL, d_out2, d_lse2, d_qkv, d_slopes, B, Tk, q0, NH, NG, HS);
    F32->attention_rows_backward(NULL, d_dqkv2, d_dout, d_qkv, d_out, d_lse, d_slopes, B, Tk, q0,
                                 NH, NG, HS);
    compare_back("attention_rows_forward out", F32, d_out, out, nout, TOL_FP32);
    compare_back("attention_rows_forward lse", F32, d_lse, lse, nlse, TOL_FP32);
    compare_back("attention_rows_backward dqkv", F32, d_dqkv, dqkv, nqkv, TOL_FP32);
    same_bits("attention_rows_forward out", d_out, d_out2, nout);
    same_bits("attention_rows_forward lse", d_lse, d_lse2, nlse);
    same_bits("attention_rows_backward dqkv", d_dqkv, d_dqkv2, nqkv);
    F32->free(d_qkv), F32->free(d_dout), F32->free(d_slopes), F32->free(d_out);
    F32->free(d_lse), F32->free(d_dqkv), F32->free(d_out2), F32->free(d_lse2);
    F32->free(d_dqkv2);
    free(qkv), free(dout), free(slopes), free(out), free(lse), free(dqkv);
}

/* gpt_cp.c's calls: one sample's sequence of T = 2 cp c positions, each rank's two chunks at
 * B = 1, the backward of both added into one buffer a rank; p > 0: the dropout ops (sample
 * first_sample, head0 1). The backward runs twice into two buffers: the same bits. */
static void check_cp(int cp, int c, int NH, int NG, int HS, int alibi, double p)
{
    ops_check_group("attention_rows CP %d chunk %d NH %d NG %d HS %d%s p %.1f", cp, c, NH, NG, HS,
                    alibi ? " alibi" : "", p);
    int T = 2 * cp * c;
    size_t nseq = (size_t)T * NG * (NH / NG + 2) * HS, nout = (size_t)c * NH * HS;
    size_t nlse = (size_t)NH * c;
    tr_dropout d = {77, 5, tr_dropout_site(1, TR_DROPOUT_ATTN_PROBS), tr_dropout_threshold(p),
                    (float)(1.0 / (1.0 - p)), 1};
    float *seq = host(nseq, -1.0f, 1.0f), *slopes = alibi ? host((size_t)NH, 0.01f, 0.5f) : NULL;
    float *out = host(nout, 0, 0), *lse = host(nlse, 0, 0), *dfull = host(nseq, 0, 0);
    float *d_seq = dev(F32, seq, nseq * 4);
    float *d_slopes = slopes ? dev(F32, slopes, (size_t)NH * 4) : NULL;
    float *d_out = dev(F32, NULL, nout * 4), *d_lse = dev(F32, NULL, nlse * 4);
    float *d_dout = dev(F32, NULL, nout * 4), *d_full = dev(F32, NULL, nseq * 4);
    float *d_full2 = dev(F32, NULL, nseq * 4);
    for (int r = 0; r < cp; r++) {
        memset(dfull, 0, nseq * 4);
        F32->zero(NULL, d_full, nseq * 4);
        F32->zero(NULL, d_full2, nseq * 4);
        for (int h = 0; h < 2; h++) {
            int q0 = (h ? 2 * cp - 1 - r : r) * c, Tk = q0 + c;
            float *dout = host(nout, -1.0f, 1.0f);
            F32->to_device(NULL, d_dout, dout, nout * 4);
            if (p > 0) {
                CPU->attention_rows_dropout_forward(NULL, out, lse, seq, slopes, 1, Tk, q0, NH,
                                                    NG, HS, T, d);
                CPU->attention_rows_dropout_backward(NULL, dfull, dout, seq, out, lse, slopes, 1,
                                                     Tk, q0, NH, NG, HS, T, d);
                F32->attention_rows_dropout_forward(NULL, d_out, d_lse, d_seq, d_slopes, 1, Tk,
                                                    q0, NH, NG, HS, T, d);
                for (int k = 0; k < 2; k++)
                    F32->attention_rows_dropout_backward(NULL, k ? d_full2 : d_full, d_dout,
                                                         d_seq, d_out, d_lse, d_slopes, 1, Tk, q0,
                                                         NH, NG, HS, T, d);
            } else {
                CPU->attention_rows_forward(NULL, out, lse, seq, slopes, 1, Tk, q0, NH, NG, HS);
                CPU->attention_rows_backward(NULL, dfull, dout, seq, out, lse, slopes, 1, Tk, q0,
                                             NH, NG, HS);
                F32->attention_rows_forward(NULL, d_out, d_lse, d_seq, d_slopes, 1, Tk, q0, NH,
                                            NG, HS);
                for (int k = 0; k < 2; k++)
                    F32->attention_rows_backward(NULL, k ? d_full2 : d_full, d_dout, d_seq, d_out,
                                                 d_lse, d_slopes, 1, Tk, q0, NH, NG, HS);
            }
            compare_back("forward out (a chunk)", F32, d_out, out, nout, TOL_FP32);
            compare_back("forward lse (a chunk)", F32, d_lse, lse, nlse, TOL_FP32);
            free(dout);
        }
        compare_back("backward dqkv (a rank's two chunks)", F32, d_full, dfull, nseq, TOL_FP32);
        same_bits("backward dqkv (a rank's two chunks)", d_full, d_full2, nseq);
    }
    F32->free(d_seq), F32->free(d_slopes), F32->free(d_out), F32->free(d_lse);
    F32->free(d_dout), F32->free(d_full), F32->free(d_full2);
    free(seq), free(slopes), free(out), free(lse), free(dfull);
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
    check_rows(1, 70, 21, 2, 1, 256, 1);
    check_cp(2, 48, 4, 2, 64, 0, 0.0);
    check_cp(4, 33, 4, 1, 32, 1, 0.0);
    check_cp(2, 48, 4, 2, 64, 0, 0.2);
    check_cp(3, 25, 2, 2, 128, 1, 0.2);
    if (tr_cuda_status()) {
        failures++;
        fprintf(stderr, "FAIL %s\n", tr_errmsg());
    }
    printf("%d of %d checks agree\n", checks - failures, checks);
    return failures ? 1 : 0;
}
