// LayerNorm over the last dimension: one warp per row for the row work (statistics, the
// input gradient); the parameter gradients are column sums done in two stages (partials of
// row chunks into the scratch, then added in chunk order).
#include "kernels/cuda/bf16.h"
#include "kernels/cuda/grid.cuh"

namespace {

constexpr int ROWS_PER_BLOCK = 8; // warps per block, one row each

__device__ __forceinline__ void ln_put(float *y, int c, float v) { y[c] = v; }
__device__ __forceinline__ void ln_put(uint16_t *y, int c, float v) { y[c] = bf16_from_f32(v); }

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
__global__ void ln_backward_input_kernel(float *dinp, const float *dout, const float *inp,
                                         const float *weight, const float *mean,
                                         const float *rstd, int N, int C)
{
    int n = blockIdx.x * ROWS_PER_BLOCK + threadIdx.y;
    if (n >= N)
        return;
    int lane = threadIdx.x;
    const float *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
    float m = mean[n], r = rstd[n];
    float a = 0.0f, b = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float dn = dy[c] * weight[c];
        a += dn;
        b += dn * ((x[c] - m) * r);
    }
    a = tr_cu_warp_sum(a) / C;
    b = tr_cu_warp_sum(b) / C;
    float *dx = dinp + (size_t)n * C;
    for (int c = lane; c < C; c += 32) {
        float xhat = (x[c] - m) * r;
        dx[c] += r * (dy[c] * weight[c] - a - xhat * b);
    }
}

// partial_w[r * C + c] = sum over chunk r of dout xhat; partial_b likewise of dout
__global__ void ln_params_partial_kernel(float *partial_w, float *partial_b, const float *dout,
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
            float dy = dout[(size_t)n * C + c];
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

} // namespace

extern "C" {

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
    if (N <= 0 || C <= 0)
        return;
    cudaStream_t st = cu_shared_stream(s, "layernorm_backward");
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
    cu_launched("layernorm_backward");
}

} // extern "C"
