/* kernels.h's fused linear-layer ops in the CUDA backend's bf16 mode (cuda_internal.h's
 * cu_linear_forward_bf16, cu_linear_backward_bf16), built from gemm.c's cuBLASLt calls and bf16
 * staging (gemm_internal.h, whose single-stream rule for the staging holds here):
 *  - linear_forward: y = x W^T + b [+ residual], the bias in cuBLASLt's epilogue, the residual
 *    read as its C input; or a bf16 output y16 (fc's) written by the GEMM, K whole (one
 *    rounding), the bias a bf16 vector in the epilogue;
 *  - linear_backward: dy converted to bf16 once for both GEMMs (dx = dy W, dW += dy^T x), the
 *    bias gradient summed in that pass; a bf16 dy16 read in place, or a bf16 dx16 written.
 * Where the operands do not fit the staging, or cuBLASLt has no algorithm, the unfused GEMMs
 * (gemm.c) do the same work. A bf16 input x16 is read in place throughout. */
#include <stdint.h>

#include "core/core.h"
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/gemm_internal.h"

/* linear_forward's bf16 output: y16 (N, OC) = bf16(x W^T + b), K never in slabs (one
 * rounding). W's rows (y's columns) are staged in blocks: all of them where W, its bias and
 * (for an fp32 x) a row of x fit, else blocks of a multiple of 128 rows in the staging's room
 * (half of it for an fp32 x); per block x (fp32) in blocks of rows, a bf16 x16 read in place.
 * The bias rides in the epilogue as a bf16 vector staged beside W (cuBLASLt's bias takes D's
 * type, and cpu-bf16's bias_add reads it rounded too), or is added after (that staged bf16
 * bias, onto the rounded output: rounded twice) where no algorithm has it. */
static void linear_forward_out16(tr_stream s, cudaStream_t st, uint16_t *y16, uint16_t *gelu16,
                                 const float *x, const uint16_t *x16, const float *W,
                                 const float *b, int N, int IC, int OC)
{
    int gelu_after = 0; /* a block's GELU epilogue had no algorithm: one pass at the end */
    size_t cap = cu_gemm_staging_elems(), ic = (size_t)IC;
    size_t nb = (size_t)OC; /* W rows a block */
    if (cu_align128(nb * ic) + (b ? cu_align128(nb) : 0) + (x16 ? 0 : ic) > cap) {
        size_t share = (x16 ? cap : cap / 2) > 256 ? (x16 ? cap : cap / 2) - 256 : 0;
        nb = share / (ic + 1);
        if (nb >= 128)
            nb &= ~(size_t)127; /* (b16 + j0 keeps the bias block 256-byte aligned) */
    }
    size_t n_w = cu_align128(nb * ic), n_b = b ? cu_align128(nb) : 0;
    size_t room = cap > n_w + n_b ? cap - n_w - n_b : 0;
    size_t mb = x16 ? (size_t)N : room / ic; /* x rows a block */
    if (nb < 1 || mb < 1 || n_w + n_b > cap) {
        cu_gemm_note_none("linear_forward (bf16 output): no staging room", N, OC, IC);
        return;
    }
    uint16_t *w16 = cu_gemm_staging(), *b16 = w16 + n_w, *xs = b16 + n_b;
    for (int j0 = 0; j0 < OC; j0 += (int)nb) {
        int n = OC - j0 < (int)nb ? OC - j0 : (int)nb;
        cu_pack_bf16(st, w16, W + (size_t)j0 * IC, n, IC, IC);
        if (b)
            cu_pack_bf16(st, b16, b + j0, 1, n, n);
        for (int i0 = 0; i0 < N; i0 += (int)mb) {
            int m = N - i0 < (int)mb ? N - i0 : (int)mb;
            const uint16_t *xa = x16 ? x16 + (size_t)i0 * IC : xs;
            if (!x16)
                cu_pack_bf16(st, xs, x + (size_t)i0 * IC, m, IC, IC);
            uint16_t *yb = y16 + (size_t)i0 * OC + j0;
            /* with gelu16: the GELU in the epilogue too, y16 its input (aux) */
            if (gelu16 && !cu_matmul_gelu(st, CU_GELU_FORWARD, 0, 1, m, n, IC, xa, IC, w16, IC,
                                          gelu16 + (size_t)i0 * OC + j0, OC, b ? b16 : NULL, yb,
                                          OC))
                continue;
            gelu_after |= gelu16 != NULL;
            if (b && !cu_matmul_from(st, CU_GEMM_BF16, 0, 1, m, n, IC, 1.0f, xa, IC, 0, w16, IC, 0,
                                     0.0f, yb, NULL, 1, OC, 0, 1, b16))
                continue;
            if (cu_matmul_to(st, CU_GEMM_BF16, 0, 1, m, n, IC, 1.0f, xa, IC, 0, w16, IC, 0, 0.0f,
                             yb, 1, OC, 0, 1))
                cu_gemm_note_none("linear_forward (bf16 output)", m, n, IC);
            else if (b)
                cu_bias_add16(st, yb, b16, m, n, OC);
        }
    }
    if (gelu_after) /* (of every block: those the epilogue did get the same again) */
        cu_gelu_forward16(s, gelu16, NULL, y16, (size_t)N * OC);
}

/* ---- kernels.h's linear_forward, bf16 mode: y = x W^T + b [+ residual] with the bias in
 * cuBLASLt's epilogue (on the first K slab) where the bias is 16-byte aligned (the views into
 * the flat parameter buffer may not be) and an algorithm has it; else bias_add after. The
 * residual is the first slab's C input (y its output), a bf16 input (x16) read in place. */
void cu_linear_forward_bf16(tr_stream s, float *y, uint16_t *y16, const float *x,
                            const uint16_t *x16, const float *W, const float *b,
                            const float *residual, int N, int IC, int OC)
{
    cudaStream_t st = cu_shared_stream(s, "linear_forward");
    if (N <= 0 || OC <= 0)
        return;
    if (y16) { /* (no residual: kernels.h) */
        if (residual)
            cu_gemm_note_none("linear_forward (bf16 output with a residual: not in the contract)",
                              N, OC, IC);
        else if (IC > 0)
            linear_forward_out16(s, st, y16, NULL, x, x16, W, b, N, IC, OC);
        else
            cu_gemm_note_none("linear_forward (bf16 output, no input columns)", N, OC, IC);
        return;
    }
    float beta = residual ? 1.0f : 0.0f;
    const float *epi_bias = b && ((uintptr_t)b & 15) == 0 ? b : NULL;
    int biased = 0;
    /* the residual is read as cuBLASLt's C, y written as its D: no copy */
    if (x16)
        biased = cu_gemm_a16_on(st, 0, 1, N, OC, IC, 1.0f, x16, IC, W, IC, beta, y, residual, OC,
                                epi_bias);
    else if (IC > 0 && !cu_gemm_fast())
        biased = cu_gemm_staged(st, 0, 1, N, OC, IC, 1.0f, x, IC, W, IC, beta, y, residual, OC,
                                epi_bias);
    else { /* (TRIDENT_CUDA_GEMM=fast, or no K: onto a copy of the residual) */
        cu_gemm_copy_in(st, y, residual, N, OC, OC);
        cu_gemm_ex(st, CU_GEMM_BF16, 0, 1, N, OC, IC, 1.0f, x, IC, 0, W, IC, 0, beta, y, OC, 0,
                   1);
    }
    if (b && !biased)
        cu_bias_add(s, y, b, N, OC);
}

/* dW += dy^T x for either storage of x (the unfused way) */
static void dW_unfused(tr_stream s, cudaStream_t st, float *dW, const float *dy,
                       const float *x, const uint16_t *x16, int N, int IC, int OC)
{
    if (x16)
        cu_gemm_b16(s, 1, 0, OC, IC, N, 1.0f, dy, OC, x16, IC, 1.0f, dW, IC);
    else
        cu_gemm_ex(st, CU_GEMM_BF16, 1, 0, OC, IC, N, 1.0f, dy, OC, 0, x, IC, 0, 1.0f, dW, IC,
                   0, 1);
}

/* dW += dy16^T x from a bf16 dy16 (N, OC) read in place, the unfused way (x staged by
 * gemm_a16; a bf16 x16 read in place too) */
static void dW16_unfused(cudaStream_t st, float *dW, const uint16_t *dy16, const float *x,
                         const uint16_t *x16, int N, int IC, int OC)
{
    if (!x16)
        cu_gemm_a16_on(st, 1, 0, OC, IC, N, 1.0f, dy16, OC, x, IC, 1.0f, dW, NULL, IC, NULL);
    else if (cu_matmul(st, CU_GEMM_BF16, 1, 0, OC, IC, N, 1.0f, dy16, OC, 0, x16, IC, 0, 1.0f, dW,
                       IC, 0, 1))
        cu_gemm_note_none("linear_backward (dy16, x16)", OC, IC, N);
}

/* ---- kernels.h's linear_backward, bf16 mode: dy (N, OC) converted once for both GEMMs, its
 * column sums added to db in the same pass (a bf16 dy16 is read in place, its column sums
 * where db is given, QKV's and fc's, in the weight gradient's BGRADB epilogue, or a pass of
 * their own where no algorithm has it), dx = dy W and
 * dW += dy^T x, where dy, W and x (fp32; a bf16 x16 is read in place) fit the staging
 * together (else, and where cuBLASLt has no algorithm, the GEMMs unfused). */
void cu_linear_backward_bf16(tr_stream s, float *dx, uint16_t *dx16, float *dW, float *db,
                             const float *dy, const uint16_t *dy16, const float *x,
                             const uint16_t *x16, const float *W, int N, int IC, int OC)
{
    cudaStream_t st = cu_shared_stream(s, "linear_backward");
    size_t cap = cu_gemm_staging_elems();
    size_t n_dy = dy16 ? 0 : cu_align128((size_t)N * OC);
    size_t n_w = cu_align128((size_t)OC * IC);
    size_t n_x = x16 ? 0 : (size_t)N * IC;
    int fused =
        !cu_gemm_fast() && N > 0 && IC > 0 && OC > 0 && n_dy + (n_w > n_x ? n_w : n_x) <= cap;
    if (dy16 && db && !fused) /* (its own pass: nothing converts dy16) */
        cu_bias_backward16(st, db, dy16, N, OC), db = NULL;
    if (fused) {
        const uint16_t *dyb = dy16;
        uint16_t *second = cu_gemm_staging() + n_dy; /* W, then x */
        if (!dy16) {
            if (db) /* the bias gradient in the conversion's pass: done */
                cu_pack_bf16_colsum(st, cu_gemm_staging(), db, dy, N, OC), db = NULL;
            else
                cu_pack_bf16(st, cu_gemm_staging(), dy, N, OC, OC);
            dyb = cu_gemm_staging();
        }
        cu_pack_bf16(st, second, W, OC, IC, IC);
        /* dx (N, IC) = dy (N, OC) W (OC, IC), fp32 or (dx16) bf16: K whole, one rounding */
        if (!cu_matmul_to(st, CU_GEMM_BF16, 0, 0, N, IC, OC, 1.0f, dyb, OC, 0, second, IC, 0, 0.0f,
                          dx16 ? (void *)dx16 : (void *)dx, dx16 != NULL, IC, 0, 1)) {
            const uint16_t *xb = x16;
            if (!xb) {
                cu_pack_bf16(st, second, x, N, IC, IC);
                xb = second;
            }
            /* dW (OC, IC) += dy^T (OC, N) x (N, IC); dy16's column sums (db) in its BGRADB
             * epilogue, into the reduction scratch, then added */
            float *sums = (float *)cu_scratch();
            if (db && (size_t)OC * sizeof(float) <= CU_SCRATCH_BYTES &&
                !cu_matmul_bgrad(st, 1, 0, OC, IC, N, dyb, OC, xb, IC, 1.0f, dW, IC, sums)) {
                cu_axpy(s, db, 1.0f, sums, (size_t)OC);
                return;
            }
            if (cu_matmul(st, CU_GEMM_BF16, 1, 0, OC, IC, N, 1.0f, dyb, OC, 0, xb, IC, 0, 1.0f, dW,
                          IC, 0, 1)) {
                if (dy16)
                    dW16_unfused(st, dW, dy16, x, x16, N, IC, OC);
                else
                    dW_unfused(s, st, dW, dy, x, x16, N, IC, OC);
            }
            if (db) /* (dy16's: no algorithm had the epilogue) */
                cu_bias_backward16(st, db, dy16, N, OC);
            return;
        }
    } /* no algorithm for dx (dW not yet touched), or too big: the GEMMs unfused */
    if (dy16 && db) /* (the fused path's, not taken) */
        cu_bias_backward16(st, db, dy16, N, OC), db = NULL;
    if (dx16) { /* dx16 = bf16(dy W), blocks of C (gemm_mixed16: dy fp32, or dy16 in place) */
        cu_gemm_mixed16(s, 0, 0, N, IC, OC, 1.0f, dy, dy16, OC, W, NULL, IC, 0.0f, NULL, dx16, IC);
        dx = NULL;
    }
    if (dy16) { /* dx = dy16 W (gemm_a16's staging of W) */
        if (dx)
            cu_gemm_a16_on(st, 0, 0, N, IC, OC, 1.0f, dy16, OC, W, IC, 0.0f, dx, NULL, IC, NULL);
        dW16_unfused(st, dW, dy16, x, x16, N, IC, OC);
        return;
    }
    if (dx)
        cu_gemm_ex(st, CU_GEMM_BF16, 0, 0, N, IC, OC, 1.0f, dy, OC, 0, W, IC, 0, 0.0f, dx, IC, 0,
                   1);
    dW_unfused(s, st, dW, dy, x, x16, N, IC, OC);
    if (db)
        cu_bias_backward(s, db, dy, N, OC);
}

/* ---- kernels.h's linear_gelu_forward16: fc's forward with its GELU in cuBLASLt's
 * GELU_AUX_BIAS epilogue (pre16 the aux output), where an algorithm has it; else
 * linear_forward's y16 and gelu_forward16 after */
void cu_linear_gelu_forward16(tr_stream s, uint16_t *pre16, uint16_t *out16, const float *x,
                              const uint16_t *x16, const float *W, const float *b, int N, int IC,
                              int OC)
{
    cudaStream_t st = cu_shared_stream(s, "linear_gelu_forward16");
    if (N <= 0 || OC <= 0)
        return;
    if (IC <= 0) {
        cu_gemm_note_none("linear_gelu_forward16 (no input columns)", N, OC, IC);
        return;
    }
    linear_forward_out16(s, st, pre16, out16, x, x16, W, b, N, IC, OC);
}

/* ---- kernels.h's linear_backward_gelu16: dy (N, OC) converted once (db summed in that
 * pass), dpre16 = gelu'(pre16) (dy W) in cuBLASLt's DGELU epilogue, dW += dy^T x16, then
 * dpre_bias from dpre16's column sums; where dy and W do not fit the staging or no algorithm
 * has the epilogue: linear_backward's dx16 and gelu_backward16 in place */
void cu_linear_backward_gelu16(tr_stream s, uint16_t *dpre16, float *dpre_bias, float *dW,
                               float *db, const float *dy, const uint16_t *x16,
                               const uint16_t *pre16, const float *W, int N, int IC, int OC)
{
    cudaStream_t st = cu_shared_stream(s, "linear_backward_gelu16");
    if (N <= 0 || IC <= 0 || OC <= 0)
        return;
    size_t n_dy = cu_align128((size_t)N * OC), n_w = (size_t)OC * IC;
    /* (the DGELU epilogue reads pre16 with ld IC: a multiple of 8, or the fallback) */
    if (!cu_gemm_fast() && IC % 8 == 0 && n_dy + n_w <= cu_gemm_staging_elems()) {
        uint16_t *dyb = cu_gemm_staging(), *wb = dyb + n_dy;
        if (db) /* the bias gradient in the conversion's pass */
            cu_pack_bf16_colsum(st, dyb, db, dy, N, OC), db = NULL;
        else
            cu_pack_bf16(st, dyb, dy, N, OC, OC);
        cu_pack_bf16(st, wb, W, OC, IC, IC);
        /* dpre16 (N, IC) = gelu'(pre16) dy (N, OC) W (OC, IC) */
        if (!cu_matmul_gelu(st, CU_GELU_BACKWARD, 0, 0, N, IC, OC, dyb, OC, wb, IC, dpre16, IC,
                            NULL, pre16, IC)) {
            /* dW (OC, IC) += dy^T (OC, N) x16 (N, IC) */
            if (cu_matmul(st, CU_GEMM_BF16, 1, 0, OC, IC, N, 1.0f, dyb, OC, 0, x16, IC, 0, 1.0f,
                          dW, IC, 0, 1))
                cu_gemm_b16(s, 1, 0, OC, IC, N, 1.0f, dy, OC, x16, IC, 1.0f, dW, IC);
            if (dpre_bias)
                cu_bias_backward16(st, dpre_bias, dpre16, N, IC);
            return;
        }
    } /* (db, if given, was summed above) */
    cu_linear_backward_bf16(s, NULL, dpre16, dW, db, dy, NULL, NULL, x16, W, N, IC, OC);
    cu_gelu_backward16(s, dpre16, dpre_bias, NULL, pre16, NULL, dpre16, N, IC);
}
