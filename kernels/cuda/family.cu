// The Llama / Bloom / Gemma ops of kernels.h on the GPU: RMSNorm, SwiGLU, GeGLU, rotary
// embedding, and the ALiBi bias that attention_gqa.c adds to the scores (fp32 storage, as
// every op here).
// Compiled, never yet run: tests/cuda compares each op with its CPU twin on a GPU.
#include "kernels/cuda/bf16.h"
#include "kernels/cuda/gelu.cuh"
#include "kernels/cuda/grid.cuh"

namespace {

constexpr int ROWS_PER_BLOCK = 8; // warps per block, one row each

// out (N, C) = inp * rstd * weight; rstd (N)
__device__ __forceinline__ void rms_put(float *y, int c, float v) { y[c] = v; }
__device__ __forceinline__ void rms_put(uint16_t *y, int c, float v) { y[c] = bf16_from_f32(v); }

// out (N, C) = x rstd weight, fp32 or bf16 storage; rstd (N)
template <typename O>
__global__ void rms_forward_kernel(O *out, float *rstd, const float *inp, const float *weight,
                                   int N, int C, float eps)
{
    int n = blockIdx.x * ROWS_PER_BLOCK + threadIdx.y;
    if (n >= N)
        return;
    int lane = threadIdx.x;
    const float *x = inp + (size_t)n * C;
    float s = 0.0f;
    for (int c = lane; c < C; c += 32)
        s += x[c] * x[c];
    float r = rsqrtf(tr_cu_warp_sum(s) / C + eps);
    O *y = out + (size_t)n * C;
    for (int c = lane; c < C; c += 32)
        rms_put(y, c, x[c] * r * weight[c]);
    if (lane == 0)
        rstd[n] = r;
}

// the output gradient: fp32, or bf16 storage (kernels.h's rmsnorm_backward16)
__device__ __forceinline__ float rms_get(const float *d, size_t i) { return d[i]; }
__device__ __forceinline__ float rms_get(const uint16_t *d, size_t i) { return bf16_to_f32(d[i]); }

// dinp += rstd (dn - xhat mean(dn xhat)), dn = dout * weight, xhat = x rstd
template <typename D>
__global__ void rms_backward_rows_kernel(float *dinp, const D *dout, const float *inp,
                                         const float *weight, const float *rstd, int N, int C)
{
    int n = blockIdx.x * ROWS_PER_BLOCK + threadIdx.y;
    if (n >= N)
        return;
    int lane = threadIdx.x;
    const float *x = inp + (size_t)n * C;
    const D *dy = dout + (size_t)n * C;
    float r = rstd[n], s = 0.0f;
    for (int c = lane; c < C; c += 32)
        s += rms_get(dy, c) * weight[c] * x[c] * r;
    float m = tr_cu_warp_sum(s) / C;
    float *dx = dinp + (size_t)n * C;
    for (int c = lane; c < C; c += 32)
        dx[c] += r * (rms_get(dy, c) * weight[c] - x[c] * r * m);
}

// dweight[c] += sum_n dout xhat: one thread per column, rows in order (deterministic; the
// fallback of layernorm.cu's fused backward, for rows past its shared memory)
template <typename D>
__global__ void rms_backward_weight_kernel(float *dweight, const D *dout, const float *inp,
                                           const float *rstd, int N, int C)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C)
        return;
    float t = 0.0f;
    for (int n = 0; n < N; n++)
        t += rms_get(dout, (size_t)n * C + c) * inp[(size_t)n * C + c] * rstd[n];
    dweight[c] += t;
}

template <typename D>
void rmsnorm_backward(tr_stream s, float *dinp, float *dweight, const float *dout,
                      const D *dout_any, const float *inp, const float *weight, const float *rstd,
                      int N, int C, const char *what)
{
    if (N <= 0 || C <= 0)
        return;
    cudaStream_t st = cu_shared_stream(s, what);
    if (cu_norm_backward_fused(st, dinp, dweight, NULL, dout,
                               dout ? NULL : (const uint16_t *)dout_any, inp, weight, NULL, rstd,
                               N, C)) {
        cu_launched(what);
        return;
    }
    rms_backward_rows_kernel<<<(N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK,
                               dim3(32, ROWS_PER_BLOCK), 0, st>>>(dinp, dout_any, inp, weight,
                                                                  rstd, N, C);
    rms_backward_weight_kernel<<<(C + 255) / 256, 256, 0, st>>>(dweight, dout_any, inp, rstd, N,
                                                                C);
    cu_launched(what);
}

__global__ void swiglu_forward_kernel(float *out, const float *inp, size_t n)
{
    TR_CU_GRID_STRIDE(i, n)
    {
        float g = inp[2 * i], u = inp[2 * i + 1];
        out[i] = g / (1.0f + expf(-g)) * u;
    }
}

__global__ void swiglu_backward_kernel(float *dinp, const float *inp, const float *dout, size_t n)
{
    TR_CU_GRID_STRIDE(i, n)
    {
        float g = inp[2 * i], u = inp[2 * i + 1], sg = 1.0f / (1.0f + expf(-g));
        dinp[2 * i] = dout[i] * u * sg * (1.0f + g * (1.0f - sg));
        dinp[2 * i + 1] = dout[i] * g * sg;
    }
}

// GeGLU: out = gelu(g) u, gelu of either kind (gelu.cuh: elementwise.cu's gelu kernels' own);
// dinp (n, 2): d/dg = dout u gelu'(g), d/du = dout gelu(g)
template <bool Exact>
__global__ void geglu_forward_kernel(float *out, const float *inp, size_t n)
{
    TR_CU_GRID_STRIDE(i, n) out[i] = gelu_value<Exact>(inp[2 * i]) * inp[2 * i + 1];
}

template <bool Exact>
__global__ void geglu_backward_kernel(float *dinp, const float *inp, const float *dout, size_t n)
{
    TR_CU_GRID_STRIDE(i, n)
    {
        float g = inp[2 * i], u = inp[2 * i + 1];
        dinp[2 * i] = dout[i] * u * gelu_slope<Exact>(g);
        dinp[2 * i + 1] = dout[i] * gelu_value<Exact>(g);
    }
}

// one thread per (row, group, rotated unit, pair i)
__global__ void rope_kernel(float *qkv, const float *cos, const float *sin, size_t rows, int T,
                            int NG, int R, int HS, int rot, float sign, const int32_t *pos)
{
    int half = rot / 2;
    size_t n = rows * (size_t)NG * (size_t)(R + 1) * (size_t)half;
    TR_CU_GRID_STRIDE(e, n)
    {
        int i = (int)(e % half);
        size_t rest = e / half;
        int u = (int)(rest % (size_t)(R + 1));
        rest /= (size_t)(R + 1);
        int g = (int)(rest % (size_t)NG);
        size_t row = rest / (size_t)NG;
        int t = pos ? pos[row] : (int)(row % (size_t)T);
        float *x = qkv + (row * NG + g) * (size_t)(R + 2) * HS + (size_t)u * HS;
        float c = cos[(size_t)t * half + i], s = sign * sin[(size_t)t * half + i];
        float x1 = x[i], x2 = x[i + half];
        x[i] = x1 * c - x2 * s;
        x[i + half] = x2 * c + x1 * s;
    }
}

// rows of B*NH*T scores: row (b, h, t) gets slope_h * (j - t) at keys j <= t
__global__ void alibi_add_kernel(float *att, const float *slopes, size_t rows, int T, int NH)
{
    size_t n = rows * (size_t)T;
    TR_CU_GRID_STRIDE(e, n)
    {
        size_t r = e / (size_t)T;
        int j = (int)(e % (size_t)T), t = (int)(r % (size_t)T), h = (int)(r / (size_t)T % NH);
        if (j <= t)
            att[e] += slopes[h] * (float)(j - t);
    }
}

// keys and values of n new positions of each group (qkv (B, n, NG, R+2, HS)) into rows
// [past, past + n) of the caches (B, NG, max_T, HS)
__global__ void kv_append_gqa_kernel(float *kc, float *vc, const float *qkv, int n, int NG, int R,
                                     int HS, int past, int max_T)
{
    int e = blockIdx.x * blockDim.x + threadIdx.x, i = blockIdx.y, bg = blockIdx.z;
    if (e >= HS)
        return;
    int b = bg / NG, g = bg % NG;
    const float *key = qkv + ((size_t)b * n + i) * NG * (R + 2) * HS + ((size_t)g * (R + 2) + R) * HS;
    size_t at = ((size_t)bg * max_T + past + i) * HS + e;
    kc[at] = key[e];
    vc[at] = key[HS + e];
}

// decode scores, rows (b, h, i) of L keys: + slope_h (j - (past + i)) for j <= past + i
__global__ void alibi_decode_kernel(float *scores, const float *slopes, size_t rows, int NH, int n,
                                    int L, int past)
{
    size_t total = rows * (size_t)L;
    TR_CU_GRID_STRIDE(e, total)
    {
        size_t r = e / (size_t)L;
        int j = (int)(e % (size_t)L), i = (int)(r % (size_t)n), h = (int)(r / (size_t)n % NH);
        int t = past + i;
        if (j <= t)
            scores[e] += slopes[h] * (float)(j - t);
    }
}

} // namespace

void cu_kv_append_gqa(cudaStream_t st, float *kc, float *vc, const float *qkv, int B, int n,
                      int NG, int R, int HS, int past, int max_T)
{
    if (B <= 0 || n <= 0)
        return;
    dim3 grid((HS + 127) / 128, n, B * NG);
    kv_append_gqa_kernel<<<grid, 128, 0, st>>>(kc, vc, qkv, n, NG, R, HS, past, max_T);
    cu_launched("attention_gqa_decode (cache append)");
}

void cu_alibi_add_decode(cudaStream_t st, float *scores, const float *slopes, int rows, int NH,
                         int n, int L, int past)
{
    size_t total = (size_t)rows * (size_t)L;
    if (!total)
        return;
    alibi_decode_kernel<<<tr_cu_blocks(total), CU_THREADS, 0, st>>>(scores, slopes, (size_t)rows,
                                                                    NH, n, L, past);
    cu_launched("alibi (decode)");
}

void cu_alibi_add(cudaStream_t st, float *att, const float *slopes, int rows, int T, int NH)
{
    size_t n = (size_t)rows * (size_t)T;
    if (!n)
        return;
    alibi_add_kernel<<<tr_cu_blocks(n), CU_THREADS, 0, st>>>(att, slopes, (size_t)rows, T, NH);
    cu_launched("alibi");
}

void cu_rmsnorm_forward(tr_stream s, float *out, float *rstd, const float *inp,
                        const float *weight, int N, int C, float eps)
{
    if (N <= 0)
        return;
    rms_forward_kernel<<<(N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK, dim3(32, ROWS_PER_BLOCK), 0,
                         cu_stream(s)>>>(out, rstd, inp, weight, N, C, eps);
    cu_launched("rmsnorm_forward");
}

void cu_rmsnorm_forward16(tr_stream s, uint16_t *out16, float *rstd, const float *inp,
                          const float *weight, int N, int C, float eps)
{
    if (N <= 0)
        return;
    rms_forward_kernel<<<(N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK, dim3(32, ROWS_PER_BLOCK), 0,
                         cu_stream(s)>>>(out16, rstd, inp, weight, N, C, eps);
    cu_launched("rmsnorm_forward16");
}

void cu_rmsnorm_backward(tr_stream s, float *dinp, float *dweight, const float *dout,
                         const float *inp, const float *weight, const float *rstd, int N, int C)
{
    rmsnorm_backward(s, dinp, dweight, dout, dout, inp, weight, rstd, N, C, "rmsnorm_backward");
}

void cu_rmsnorm_backward16(tr_stream s, float *dinp, float *dweight, const uint16_t *dout16,
                           const float *inp, const float *weight, const float *rstd, int N,
                           int C)
{
    rmsnorm_backward(s, dinp, dweight, (const float *)NULL, dout16, inp, weight, rstd, N, C,
                     "rmsnorm_backward16");
}

void cu_swiglu_forward(tr_stream s, float *out, const float *inp, size_t n)
{
    if (!n)
        return;
    swiglu_forward_kernel<<<tr_cu_blocks(n), CU_THREADS, 0, cu_stream(s)>>>(out, inp, n);
    cu_launched("swiglu_forward");
}

void cu_swiglu_backward(tr_stream s, float *dinp, const float *inp, const float *dout, size_t n)
{
    if (!n)
        return;
    swiglu_backward_kernel<<<tr_cu_blocks(n), CU_THREADS, 0, cu_stream(s)>>>(dinp, inp, dout, n);
    cu_launched("swiglu_backward");
}

void cu_geglu_forward(tr_stream s, float *out, const float *inp, size_t n, int exact)
{
    if (!n)
        return;
    if (exact)
        geglu_forward_kernel<true><<<tr_cu_blocks(n), CU_THREADS, 0, cu_stream(s)>>>(out, inp, n);
    else
        geglu_forward_kernel<false><<<tr_cu_blocks(n), CU_THREADS, 0, cu_stream(s)>>>(out, inp,
                                                                                      n);
    cu_launched(exact ? "geglu_exact_forward" : "geglu_forward");
}

void cu_geglu_backward(tr_stream s, float *dinp, const float *inp, const float *dout, size_t n,
                       int exact)
{
    if (!n)
        return;
    if (exact)
        geglu_backward_kernel<true><<<tr_cu_blocks(n), CU_THREADS, 0, cu_stream(s)>>>(
            dinp, inp, dout, n);
    else
        geglu_backward_kernel<false><<<tr_cu_blocks(n), CU_THREADS, 0, cu_stream(s)>>>(
            dinp, inp, dout, n);
    cu_launched(exact ? "geglu_exact_backward" : "geglu_backward");
}

void cu_rope(tr_stream s, float *qkv, const float *cos, const float *sin, int B, int T, int NG,
             int R, int HS, int rot, int inverse, const int32_t *positions)
{
    size_t rows = (size_t)B * T, n = rows * NG * (size_t)(R + 1) * (rot / 2);
    if (!n)
        return;
    rope_kernel<<<tr_cu_blocks(n), CU_THREADS, 0, cu_stream(s)>>>(qkv, cos, sin, rows, T, NG, R,
                                                                  HS, rot, inverse ? -1.0f : 1.0f,
                                                                  positions);
    cu_launched("rope");
}
