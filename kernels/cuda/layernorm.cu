// LayerNorm over the last dimension: one warp per row for the row work (statistics, the
// input gradient); the parameter gradients are column sums done in two stages (partials of
// row chunks into the scratch, then added in chunk order). The backward reads dout and the
// input once: one kernel makes the input gradient and the chunk partials together (also
// RMSNorm's, family.cu), the two-pass kernels below remain for widths past shared memory and
// for TRIDENT_CUDA_NORM_BACKWARD=two-pass.
#include "kernels/cuda/bf16.h"
#include "kernels/cuda/grid.cuh"

namespace {

constexpr int ROWS_PER_BLOCK = 8; // warps per block, one row each

__device__ __forceinline__ void ln_put(float *y, int c, float v) { y[c] = v; }
__device__ __forceinline__ void ln_put(uint16_t *y, int c, float v) { y[c] = bf16_from_f32(v); }
// the output gradient dout: fp32, or bf16 storage (kernels.h's *norm_backward16)
__device__ __forceinline__ float ln_get(const float *d, size_t i) { return d[i]; }
__device__ __forceinline__ float ln_get(const uint16_t *d, size_t i) { return bf16_to_f32(d[i]); }

// out (N, C) = (inp - mean) rstd weight + bias; mean/rstd (N); out fp32 or bf16 storage
template <typename O>
__global__ void ln_forward_kernel(O *out, float *mean, float *rstd, const float *inp,
                                  const float *weight, const float *bias, int N, int C, float eps)
{
    int n = blockIdx.x * ROWS_PER_BLOCK + threadIdx.y;
    if (n >= N)
        return;
    int lane = threadIdx.x;
    const float *x = inp + (size_t)n * C;
    float s = 0.0f;
    for (int c = lane; c < C; c += 32)
        s += x[c];
    float mu = tr_cu_warp_sum(s) / C;
    float v = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float d = x[c] - mu;
        v += d * d;
    }
    float r = rsqrtf(tr_cu_warp_sum(v) / C + eps);
    O *y = out + (size_t)n * C;
    for (int c = lane; c < C; c += 32)
        ln_put(y, c, (x[c] - mu) * r * weight[c] + bias[c]);
    if (lane == 0) {
        mean[n] = mu;
        rstd[n] = r;
    }
}

// dinp (N, C) += rstd (dnorm - mean(dnorm) - xhat mean(dnorm xhat)), dnorm = dout weight
template <typename D>
__global__ void ln_backward_input_kernel(float *dinp, const D *dout, const float *inp,
                                         const float *weight, const float *mean,
                                         const float *rstd, int N, int C)
{
    int n = blockIdx.x * ROWS_PER_BLOCK + threadIdx.y;
    if (n >= N)
        return;
    int lane = threadIdx.x;
    const float *x = inp + (size_t)n * C;
    const D *dy = dout + (size_t)n * C;
    float m = mean[n], r = rstd[n];
    float a = 0.0f, b = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float dn = ln_get(dy, c) * weight[c];
        a += dn;
        b += dn * ((x[c] - m) * r);
    }
    a = tr_cu_warp_sum(a) / C;
    b = tr_cu_warp_sum(b) / C;
    float *dx = dinp + (size_t)n * C;
    for (int c = lane; c < C; c += 32) {
        float xhat = (x[c] - m) * r;
        dx[c] += r * (ln_get(dy, c) * weight[c] - a - xhat * b);
    }
}

// partial_w[r * C + c] = sum over chunk r of dout xhat; partial_b likewise of dout
template <typename D>
__global__ void ln_params_partial_kernel(float *partial_w, float *partial_b, const D *dout,
                                         const float *inp, const float *mean, const float *rstd,
                                         int N, int C, int rows_per_chunk)
{
    __shared__ float acc_w[8][33], acc_b[8][33];
    int c = blockIdx.x * 32 + threadIdx.x;
    int r0 = blockIdx.y * rows_per_chunk;
    int r1 = min(N, r0 + rows_per_chunk);
    float sw = 0.0f, sb = 0.0f;
    if (c < C)
        for (int n = r0 + threadIdx.y; n < r1; n += 8) {
            float dy = ln_get(dout, (size_t)n * C + c);
            sw += dy * ((inp[(size_t)n * C + c] - mean[n]) * rstd[n]);
            sb += dy;
        }
    acc_w[threadIdx.y][threadIdx.x] = sw;
    acc_b[threadIdx.y][threadIdx.x] = sb;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float tw = 0.0f, tb = 0.0f;
        for (int k = 0; k < 8; k++) {
            tw += acc_w[k][threadIdx.x];
            tb += acc_b[k][threadIdx.x];
        }
        partial_w[(size_t)blockIdx.y * C + c] = tw;
        partial_b[(size_t)blockIdx.y * C + c] = tb;
    }
}

__global__ void ln_params_finish_kernel(float *dweight, float *dbias, const float *partial_w,
                                        const float *partial_b, int R, int C)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C)
        return;
    float tw = 0.0f, tb = 0.0f;
    for (int r = 0; r < R; r++) {
        tw += partial_w[(size_t)r * C + c];
        tb += partial_b[(size_t)r * C + c];
    }
    dweight[c] += tw;
    dbias[c] += tb;
}

// The fused backward of LayerNorm (RMS false) and RMSNorm (RMS true: no mean, no bias).
// One block per chunk of rows_per_chunk rows, blockDim (32, W): warp y takes the chunk's rows
// r0 + y, r0 + y + W, ... and per row
//   dinp += rstd (dn - mean(dn) - xhat mean(dn xhat)), dn = dout weight, xhat = (x - mean) rstd
// (RMSNorm: no mean(dn) term, xhat = x rstd), while gathering the columns' sums of dout xhat
// (and of dout: LayerNorm's bias) over its rows in shared memory, acc[W][C] per array (lane
// owns columns lane, lane + 32, ...). The block then adds its W warps' sums in warp order into
// row blockIdx.x of partial_w (partial_b). dout and x are read from memory once: the second
// loop over a row finds them in cache.
template <bool RMS, typename D>
__global__ void norm_backward_fused_kernel(float *dinp, float *partial_w, float *partial_b,
                                           const D *dout, const float *inp,
                                           const float *weight, const float *mean,
                                           const float *rstd, int N, int C, int rows_per_chunk)
{
    extern __shared__ float acc[]; // [W][C] sums of dout xhat, then (LayerNorm) [W][C] of dout
    int W = blockDim.y, y = threadIdx.y, lane = threadIdx.x;
    float *aw = acc + (size_t)y * C, *ab = acc + (size_t)(W + y) * C;
    for (int c = lane; c < C; c += 32) {
        aw[c] = 0.0f;
        if (!RMS)
            ab[c] = 0.0f;
    }
    int r0 = blockIdx.x * rows_per_chunk, r1 = min(N, r0 + rows_per_chunk);
    for (int n = r0 + y; n < r1; n += W) {
        const float *x = inp + (size_t)n * C;
        const D *dy = dout + (size_t)n * C;
        float m = RMS ? 0.0f : mean[n], r = rstd[n], a = 0.0f, b = 0.0f;
        for (int c = lane; c < C; c += 32) {
            float g = ln_get(dy, c), xhat = (x[c] - m) * r, dn = g * weight[c];
            a += dn;
            b += dn * xhat;
            aw[c] += g * xhat;
            if (!RMS)
                ab[c] += g;
        }
        a = RMS ? 0.0f : tr_cu_warp_sum(a) / C;
        b = tr_cu_warp_sum(b) / C;
        float *dx = dinp + (size_t)n * C;
        for (int c = lane; c < C; c += 32) {
            float xhat = (x[c] - m) * r;
            dx[c] += r * (ln_get(dy, c) * weight[c] - a - xhat * b);
        }
    }
    __syncthreads();
    for (int c = y * 32 + lane; c < C; c += W * 32) {
        float tw = 0.0f, tb = 0.0f;
        for (int k = 0; k < W; k++) {
            tw += acc[(size_t)k * C + c];
            if (!RMS)
                tb += acc[(size_t)(W + k) * C + c];
        }
        partial_w[(size_t)blockIdx.x * C + c] = tw;
        if (!RMS)
            partial_b[(size_t)blockIdx.x * C + c] = tb;
    }
}

// dweight[c] += sum over the R partial rows (dbias likewise; partial_b NULL: none), in a fixed
// order: thread (x, y) adds rows y, y + 8, ..., then the block adds its 8 sums in order.
__global__ void norm_params_finish_kernel(float *dweight, float *dbias, const float *partial_w,
                                          const float *partial_b, int R, int C)
{
    __shared__ float sw[8][33], sb[8][33];
    int c = blockIdx.x * 32 + threadIdx.x;
    float tw = 0.0f, tb = 0.0f;
    if (c < C)
        for (int r = threadIdx.y; r < R; r += 8) {
            tw += partial_w[(size_t)r * C + c];
            if (partial_b)
                tb += partial_b[(size_t)r * C + c];
        }
    sw[threadIdx.y][threadIdx.x] = tw;
    sb[threadIdx.y][threadIdx.x] = tb;
    __syncthreads();
    if (threadIdx.y != 0 || c >= C)
        return;
    tw = tb = 0.0f;
    for (int k = 0; k < 8; k++) {
        tw += sw[k][threadIdx.x];
        tb += sb[k][threadIdx.x];
    }
    dweight[c] += tw;
    if (partial_b)
        dbias[c] += tb;
}

bool two_pass_backward()
{
    static const bool on = cu_env_is("TRIDENT_CUDA_NORM_BACKWARD", "two-pass");
    return on;
}

template <typename D>
int norm_backward_fused(cudaStream_t st, float *dinp, float *dweight, float *dbias, const D *dout,
                        const float *inp, const float *weight, const float *mean,
                        const float *rstd, int N, int C)
{
    int arrays = mean ? 2 : 1, W = 8;
    size_t per_warp = (size_t)arrays * C * sizeof(float);
    while (W > 1 && W * per_warp > (size_t)cu_smem_optin())
        W /= 2;
    size_t bytes = W * per_warp;
    if (two_pass_backward() || bytes > (size_t)cu_smem_optin())
        return 0;
    // chunks: about two rows a warp, at most 512 (the finish pass reads R rows of partials),
    // and what the scratch holds; fixed by N, C and W alone, so the sums' order is too
    long fit = (long)(CU_SCRATCH_BYTES / per_warp), R = (N + 2L * W - 1) / (2L * W);
    R = R < 512 ? R : 512;
    R = R < fit ? R : fit;
    int rows = (int)((N + R - 1) / R);
    R = (N + rows - 1) / rows;
    float *pw = (float *)cu_scratch(), *pb = mean ? pw + (size_t)R * C : NULL;
    static int opted_ln, opted_rms; /* (per dout type: this template's instance) */
    if (mean) {
        if (!tr_cu_opt_in_once(norm_backward_fused_kernel<false, D>, bytes, 0, opted_ln))
            return 0;
        norm_backward_fused_kernel<false, D><<<(unsigned)R, dim3(32, W), bytes, st>>>(
            dinp, pw, pb, dout, inp, weight, mean, rstd, N, C, rows);
    } else {
        if (!tr_cu_opt_in_once(norm_backward_fused_kernel<true, D>, bytes, 0, opted_rms))
            return 0;
        norm_backward_fused_kernel<true, D><<<(unsigned)R, dim3(32, W), bytes, st>>>(
            dinp, pw, NULL, dout, inp, weight, NULL, rstd, N, C, rows);
    }
    norm_params_finish_kernel<<<(C + 31) / 32, dim3(32, 8), 0, st>>>(dweight, dbias, pw, pb,
                                                                     (int)R, C);
    return 1;
}

// LayerNorm's backward on dout fp32 or bf16 (D)
template <typename D>
void layernorm_backward(tr_stream s, float *dinp, float *dweight, float *dbias, const D *dout,
                        const float *inp, const float *weight, const float *mean,
                        const float *rstd, int N, int C, const char *what)
{
    if (N <= 0 || C <= 0)
        return;
    cudaStream_t st = cu_shared_stream(s, what);
    if (norm_backward_fused(st, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C)) {
        cu_launched(what);
        return;
    }
    ln_backward_input_kernel<<<(N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK,
                               dim3(32, ROWS_PER_BLOCK), 0, st>>>(dinp, dout, inp, weight, mean,
                                                                  rstd, N, C);
    int R = cu_chunks(N, C, 2);
    int rows = (N + R - 1) / R;
    float *pw = (float *)cu_scratch(), *pb = pw + (size_t)R * C;
    ln_params_partial_kernel<<<dim3((C + 31) / 32, R), dim3(32, 8), 0, st>>>(pw, pb, dout, inp,
                                                                              mean, rstd, N, C,
                                                                              rows);
    ln_params_finish_kernel<<<(C + 255) / 256, 256, 0, st>>>(dweight, dbias, pw, pb, R, C);
    cu_launched(what);
}

} // namespace

extern "C" {

int cu_norm_backward_fused(cudaStream_t st, float *dinp, float *dweight, float *dbias,
                           const float *dout, const uint16_t *dout16, const float *inp,
                           const float *weight, const float *mean, const float *rstd, int N,
                           int C)
{
    return dout16 ? norm_backward_fused(st, dinp, dweight, dbias, dout16, inp, weight, mean, rstd,
                                        N, C)
                  : norm_backward_fused(st, dinp, dweight, dbias, dout, inp, weight, mean, rstd,
                                        N, C);
}

void cu_layernorm_forward(tr_stream s, float *out, float *mean, float *rstd,
                             const float *inp, const float *weight, const float *bias, int N,
                             int C, float eps)
{
    if (N <= 0 || C <= 0)
        return;
    ln_forward_kernel<<<(N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK, dim3(32, ROWS_PER_BLOCK), 0,
                        cu_stream(s)>>>(out, mean, rstd, inp, weight, bias, N, C, eps);
    cu_launched("layernorm_forward");
}

void cu_layernorm_forward16(tr_stream s, uint16_t *out16, float *mean, float *rstd,
                            const float *inp, const float *weight, const float *bias, int N,
                            int C, float eps)
{
    if (N <= 0 || C <= 0)
        return;
    ln_forward_kernel<<<(N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK, dim3(32, ROWS_PER_BLOCK), 0,
                        cu_stream(s)>>>(out16, mean, rstd, inp, weight, bias, N, C, eps);
    cu_launched("layernorm_forward16");
}

void cu_layernorm_backward(tr_stream s, float *dinp, float *dweight, float *dbias,
                           const float *dout, const float *inp, const float *weight,
                           const float *mean, const float *rstd, int N, int C)
{
    layernorm_backward(s, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C,
                       "layernorm_backward");
}

void cu_layernorm_backward16(tr_stream s, float *dinp, float *dweight, float *dbias,
                             const uint16_t *dout16, const float *inp, const float *weight,
                             const float *mean, const float *rstd, int N, int C)
{
    layernorm_backward(s, dinp, dweight, dbias, dout16, inp, weight, mean, rstd, N, C,
                       "layernorm_backward16");
}

} // extern "C"
