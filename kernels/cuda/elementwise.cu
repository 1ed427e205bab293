// Elementwise ops, bias, the MLP's activations (GELU, ReLU) and the bf16 conversions of the CUDA table (grid-stride loops).
// Column reductions (bias gradient) run in two stages with a fixed order: partial sums of
// row chunks into the scratch, then the chunks added in order, so results repeat run to run.
#include "kernels/cuda/bf16.h"
#include "kernels/cuda/gelu.cuh"
#include "kernels/cuda/grid.cuh"

namespace {

__global__ void add_kernel(float *out, const float *a, const float *b, size_t n)
{
    TR_CU_GRID_STRIDE(i, n) out[i] = a[i] + b[i];
}

__global__ void axpy_kernel(float *y, float alpha, const float *x, size_t n)
{
    TR_CU_GRID_STRIDE(i, n) y[i] += alpha * x[i];
}

__global__ void scale_kernel(float *x, float alpha, size_t n)
{
    TR_CU_GRID_STRIDE(i, n) x[i] *= alpha;
}

__global__ void bias_add_kernel(float *out, const float *bias, size_t n, int C)
{
    TR_CU_GRID_STRIDE(i, n) out[i] += bias[i % (size_t)C];
}

__global__ void bias_add16_kernel(uint16_t *out16, const uint16_t *bias16, size_t n, int cols,
                                  int ld)
{
    TR_CU_GRID_STRIDE(i, n)
    {
        size_t r = i / (size_t)cols, c = i % (size_t)cols;
        uint16_t *o = out16 + r * (size_t)ld + c;
        *o = bf16_from_f32(bf16_to_f32(*o) + bf16_to_f32(bias16[c]));
    }
}

__global__ void scale_rows_kernel(float *x, const float *w, size_t n, int C)
{
    TR_CU_GRID_STRIDE(i, n) x[i] *= w[i / (size_t)C];
}

// partial[r * C + c] = sum of v(n, c) over rows n of chunk r; block (32, 8), grid (C/32, R).
// v reads (and may also store) element (n, c): bias_backward's reads dout, the fused ones
// below also store it bf16 on the way; all sum in this one order, so their bits agree.
template <class Value>
__global__ void colsum_partial_kernel(float *partial, int N, int C, int rows_per_chunk,
                                      Value v)
{
    __shared__ float acc[8][33];
    int c = blockIdx.x * 32 + threadIdx.x;
    int r0 = blockIdx.y * rows_per_chunk;
    int r1 = min(N, r0 + rows_per_chunk);
    float s = 0.0f;
    if (c < C)
        for (int n = r0 + threadIdx.y; n < r1; n += 8)
            s += v((size_t)n * C + c);
    acc[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float t = 0.0f;
        for (int k = 0; k < 8; k++)
            t += acc[k][threadIdx.x];
        partial[(size_t)blockIdx.y * C + c] = t;
    }
}

struct read_value { // dout[i]
    const float *dout;
    __device__ float operator()(size_t i) const { return dout[i]; }
};

struct read16_value { // src16[i] widened (linear_backward's bf16 dy16)
    const uint16_t *src16;
    __device__ float operator()(size_t i) const { return bf16_to_f32(src16[i]); }
};

struct pack_value { // src[i], stored bf16 in dst[i] (linear_backward's dy, converted once)
    const float *src;
    uint16_t *dst;
    __device__ float operator()(size_t i) const
    {
        float x = src[i];
        dst[i] = bf16_from_f32(x);
        return x;
    }
};

// dst[c] += sum_r partial[r * C + c], chunks in order
__global__ void colsum_finish_kernel(float *dst, const float *partial, int R, int C)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C)
        return;
    float t = 0.0f;
    for (int r = 0; r < R; r++)
        t += partial[(size_t)r * C + c];
    dst[c] += t;
}

template <int Kind>
__global__ void act_forward_kernel(float *out, const float *inp, size_t n)
{
    TR_CU_GRID_STRIDE(i, n)
    out[i] = act_value<Kind>(inp[i]);
}

// an input element as fp32: fp32 storage, or bf16 (kernels.h's inp16)
__device__ __forceinline__ float widen(float x) { return x; }
__device__ __forceinline__ float widen(uint16_t x) { return bf16_to_f32(x); }

// the same stored bf16 (kernels.h's gelu_forward16, relu_forward16), from an fp32 or a bf16
// input
template <int Kind, class In>
__global__ void act_forward16_kernel(uint16_t *out16, const In *inp, size_t n)
{
    TR_CU_GRID_STRIDE(i, n)
    out16[i] = bf16_from_f32(act_value<Kind>(widen(inp[i])));
}

template <int Kind>
__global__ void act_backward_kernel(float *dinp, const float *inp, const float *dout, size_t n)
{
    TR_CU_GRID_STRIDE(i, n) dinp[i] = act_backward<Kind>(inp[i], dout[i]);
}

template <int Kind, class In, class Dout>
__global__ void act_backward16_kernel(uint16_t *dinp16, const In *inp, const Dout *dout,
                                       size_t n)
{
    TR_CU_GRID_STRIDE(i, n)
    dinp16[i] = bf16_from_f32(act_backward<Kind>(widen(inp[i]), widen(dout[i])));
}

// act'(inp[i]) dout[i], stored bf16 in dinp16[i] (kernels.h's gelu_backward16, relu_backward16)
template <int Kind, class In, class Dout>
struct act_backward_value {
    const In *inp;
    const Dout *dout;
    uint16_t *dinp16;
    __device__ float operator()(size_t i) const
    {
        /* (act_backward rounds its product once: never fused with the column sum's add, so
         * the sum is of the stored product, bias_backward's bits) */
        float d = act_backward<Kind>(widen(inp[i]), widen(dout[i]));
        dinp16[i] = bf16_from_f32(d);
        return d;
    }
};

__global__ void scale_2d_kernel(float *C, int rows, int cols, int ldc, float beta)
{
    size_t n = (size_t)rows * cols;
    TR_CU_GRID_STRIDE(i, n)
    {
        size_t r = i / (size_t)cols, c = i % (size_t)cols;
        float *p = C + r * (size_t)ldc + c;
        *p = beta == 0.0f ? 0.0f : beta * *p;
    }
}

__global__ void pack_bf16_kernel(uint16_t *dst, const float *src, int rows, int cols,
                                 long long ld)
{
    size_t n = (size_t)rows * cols;
    TR_CU_GRID_STRIDE(i, n)
    {
        size_t r = i / (size_t)cols, c = i % (size_t)cols;
        dst[i] = bf16_from_f32(src[r * (size_t)ld + c]);
    }
}

__global__ void to_bf16_kernel(uint16_t *dst, const float *src, size_t n)
{
    TR_CU_GRID_STRIDE(i, n) dst[i] = bf16_from_f32(src[i]);
}

__global__ void from_bf16_kernel(float *dst, const uint16_t *src, size_t n)
{
    TR_CU_GRID_STRIDE(i, n) dst[i] = bf16_to_f32(src[i]);
}

} // namespace

extern "C" {

void cu_add(tr_stream s, float *out, const float *a, const float *b, size_t n)
{
    if (!n)
        return;
    add_kernel<<<tr_cu_blocks(n), CU_THREADS, 0, cu_stream(s)>>>(out, a, b, n);
    cu_launched("add");
}

void cu_axpy(tr_stream s, float *y, float alpha, const float *x, size_t n)
{
    if (!n)
        return;
    axpy_kernel<<<tr_cu_blocks(n), CU_THREADS, 0, cu_stream(s)>>>(y, alpha, x, n);
    cu_launched("axpy");
}

void cu_scale(tr_stream s, float *x, float alpha, size_t n)
{
    if (!n)
        return;
    scale_kernel<<<tr_cu_blocks(n), CU_THREADS, 0, cu_stream(s)>>>(x, alpha, n);
    cu_launched("scale");
}

void cu_scale_rows(tr_stream s, float *x, const float *w, int N, int C)
{
    size_t n = (size_t)N * (size_t)C;
    if (!n)
        return;
    scale_rows_kernel<<<tr_cu_blocks(n), CU_THREADS, 0, cu_stream(s)>>>(x, w, n, C);
    cu_launched("scale_rows");
}

void cu_bias_add(tr_stream s, float *out, const float *bias, int N, int C)
{
    size_t n = (size_t)N * (size_t)C;
    if (!n)
        return;
    bias_add_kernel<<<tr_cu_blocks(n), CU_THREADS, 0, cu_stream(s)>>>(out, bias, n, C);
    cu_launched("bias_add");
}

} // extern "C"

// dbias[c] += sum_n v(n, c) (N, C > 0), in the two stages of the file's comment
template <class Value>
static void column_sums(cudaStream_t st, float *dbias, int N, int C, Value v)
{
    int R = cu_chunks(N, C, 1);
    int rows = (N + R - 1) / R;
    float *partial = (float *)cu_scratch();
    colsum_partial_kernel<<<dim3((C + 31) / 32, R), dim3(32, 8), 0, st>>>(partial, N, C, rows,
                                                                           v);
    colsum_finish_kernel<<<(C + 255) / 256, 256, 0, st>>>(dbias, partial, R, C);
}

extern "C" {

void cu_bias_backward(tr_stream s, float *dbias, const float *dout, int N, int C)
{
    if (N <= 0 || C <= 0)
        return;
    column_sums(cu_shared_stream(s, "bias_backward"), dbias, N, C, read_value{dout});
    cu_launched("bias_backward");
}

void cu_pack_bf16_colsum(cudaStream_t st, uint16_t *dst, float *dbias, const float *src, int N,
                         int C)
{
    if (N <= 0 || C <= 0)
        return;
    column_sums(st, dbias, N, C, pack_value{src, dst});
    cu_launched("linear_backward (dy to bf16, bias gradient)");
}

void cu_bias_backward16(cudaStream_t st, float *dbias, const uint16_t *src16, int N, int C)
{
    if (N <= 0 || C <= 0)
        return;
    column_sums(st, dbias, N, C, read16_value{src16});
    cu_launched("linear_backward (the bias gradient of a bf16 dy16)");
}

} // extern "C"

// the op's name (kernels.h) of activation Kind: which 0 forward, 1 forward16, 2 backward,
// 3 backward16
static const char *act_op(int kind, int which)
{
    static const char *const names[3][4] = {
        {"gelu_forward", "gelu_forward16", "gelu_backward", "gelu_backward16"},
        {"gelu_exact_forward", "gelu_exact_forward16", "gelu_exact_backward",
         "gelu_exact_backward16"},
        {"relu_forward", "relu_forward16", "relu_backward", "relu_backward16"}};
    return names[kind][which];
}

template <int Kind, class In, class Dout>
static void act_backward16_of(tr_stream s, uint16_t *dinp16, float *dbias, const In *inp,
                               const Dout *dout, int N, int C)
{
    size_t n = (size_t)N * (size_t)C;
    if (!dbias)
        act_backward16_kernel<Kind><<<tr_cu_blocks(n), CU_THREADS, 0, cu_stream(s)>>>(
            dinp16, inp, dout, n);
    else
        column_sums(cu_shared_stream(s, act_op(Kind, 3)), dbias, N, C,
                    act_backward_value<Kind, In, Dout>{inp, dout, dinp16});
    cu_launched(act_op(Kind, 3));
}

template <int Kind>
static void act_backward16_any(tr_stream s, uint16_t *dinp16, float *dbias, const float *inp,
                                const uint16_t *inp16, const float *dout,
                                const uint16_t *dout16, int N, int C)
{
    if (N <= 0 || C <= 0)
        return;
    if (inp16 && dout16)
        act_backward16_of<Kind>(s, dinp16, dbias, inp16, dout16, N, C);
    else if (inp16)
        act_backward16_of<Kind>(s, dinp16, dbias, inp16, dout, N, C);
    else if (dout16)
        act_backward16_of<Kind>(s, dinp16, dbias, inp, dout16, N, C);
    else
        act_backward16_of<Kind>(s, dinp16, dbias, inp, dout, N, C);
}

template <int Kind>
static void act_forward_any(tr_stream s, float *out, const float *inp, size_t n)
{
    if (!n)
        return;
    act_forward_kernel<Kind><<<tr_cu_blocks(n), CU_THREADS, 0, cu_stream(s)>>>(out, inp, n);
    cu_launched(act_op(Kind, 0));
}

template <int Kind>
static void act_forward16_any(tr_stream s, uint16_t *out16, const float *inp,
                               const uint16_t *inp16, size_t n)
{
    if (!n)
        return;
    if (inp16)
        act_forward16_kernel<Kind><<<tr_cu_blocks(n), CU_THREADS, 0, cu_stream(s)>>>(
            out16, inp16, n);
    else
        act_forward16_kernel<Kind><<<tr_cu_blocks(n), CU_THREADS, 0, cu_stream(s)>>>(
            out16, inp, n);
    cu_launched(act_op(Kind, 1));
}

template <int Kind>
static void act_backward_any(tr_stream s, float *dinp, const float *inp, const float *dout,
                              size_t n)
{
    if (!n)
        return;
    act_backward_kernel<Kind><<<tr_cu_blocks(n), CU_THREADS, 0, cu_stream(s)>>>(dinp, inp,
                                                                                  dout, n);
    cu_launched(act_op(Kind, 2));
}

extern "C" {

void cu_gelu_backward16(tr_stream s, uint16_t *dinp16, float *dbias, const float *inp,
                        const uint16_t *inp16, const float *dout, const uint16_t *dout16, int N,
                        int C)
{
    act_backward16_any<TR_CU_ACT_GELU_TANH>(s, dinp16, dbias, inp, inp16, dout, dout16, N, C);
}

void cu_gelu_exact_backward16(tr_stream s, uint16_t *dinp16, float *dbias, const float *inp,
                              const uint16_t *inp16, const float *dout, const uint16_t *dout16,
                              int N, int C)
{
    act_backward16_any<TR_CU_ACT_GELU_EXACT>(s, dinp16, dbias, inp, inp16, dout, dout16, N, C);
}

void cu_gelu_forward(tr_stream s, float *out, const float *inp, size_t n)
{
    act_forward_any<TR_CU_ACT_GELU_TANH>(s, out, inp, n);
}

void cu_gelu_exact_forward(tr_stream s, float *out, const float *inp, size_t n)
{
    act_forward_any<TR_CU_ACT_GELU_EXACT>(s, out, inp, n);
}

void cu_gelu_forward16(tr_stream s, uint16_t *out16, const float *inp, const uint16_t *inp16,
                       size_t n)
{
    act_forward16_any<TR_CU_ACT_GELU_TANH>(s, out16, inp, inp16, n);
}

void cu_gelu_exact_forward16(tr_stream s, uint16_t *out16, const float *inp,
                             const uint16_t *inp16, size_t n)
{
    act_forward16_any<TR_CU_ACT_GELU_EXACT>(s, out16, inp, inp16, n);
}

void cu_gelu_backward(tr_stream s, float *dinp, const float *inp, const float *dout, size_t n)
{
    act_backward_any<TR_CU_ACT_GELU_TANH>(s, dinp, inp, dout, n);
}

void cu_gelu_exact_backward(tr_stream s, float *dinp, const float *inp, const float *dout,
                            size_t n)
{
    act_backward_any<TR_CU_ACT_GELU_EXACT>(s, dinp, inp, dout, n);
}

void cu_relu_forward(tr_stream s, float *out, const float *inp, size_t n)
{
    act_forward_any<TR_CU_ACT_RELU>(s, out, inp, n);
}

void cu_relu_backward(tr_stream s, float *dinp, const float *inp, const float *dout, size_t n)
{
    act_backward_any<TR_CU_ACT_RELU>(s, dinp, inp, dout, n);
}

void cu_relu_forward16(tr_stream s, uint16_t *out16, const float *inp, const uint16_t *inp16,
                       size_t n)
{
    act_forward16_any<TR_CU_ACT_RELU>(s, out16, inp, inp16, n);
}

void cu_relu_backward16(tr_stream s, uint16_t *dinp16, float *dbias, const float *inp,
                        const uint16_t *inp16, const float *dout, const uint16_t *dout16, int N,
                        int C)
{
    act_backward16_any<TR_CU_ACT_RELU>(s, dinp16, dbias, inp, inp16, dout, dout16, N, C);
}

void cu_scale_2d(cudaStream_t st, float *C, int rows, int cols, int ldc, float beta)
{
    size_t n = (size_t)rows * (size_t)cols;
    if (!n || beta == 1.0f)
        return;
    scale_2d_kernel<<<tr_cu_blocks(n), CU_THREADS, 0, st>>>(C, rows, cols, ldc, beta);
    cu_launched("gemm (C = beta C)");
}

void cu_pack_bf16(cudaStream_t st, uint16_t *dst, const float *src, int rows, int cols,
                     long long ld)
{
    size_t n = (size_t)rows * (size_t)cols;
    if (!n)
        return;
    pack_bf16_kernel<<<tr_cu_blocks(n), CU_THREADS, 0, st>>>(dst, src, rows, cols, ld);
    cu_launched("gemm (bf16 staging)");
}

void cu_bias_add16(cudaStream_t st, uint16_t *out16, const uint16_t *bias16, int rows, int cols,
                   int ld)
{
    size_t n = (size_t)rows * (size_t)cols;
    if (!n)
        return;
    bias_add16_kernel<<<tr_cu_blocks(n), CU_THREADS, 0, st>>>(out16, bias16, n, cols, ld);
    cu_launched("linear_forward (bias of a bf16 output)");
}

void cu_to_bf16(tr_stream s, uint16_t *dst, const float *src, size_t n)
{
    if (!n)
        return;
    to_bf16_kernel<<<tr_cu_blocks(n), CU_THREADS, 0, cu_stream(s)>>>(dst, src, n);
    cu_launched("to_bf16");
}

void cu_from_bf16(tr_stream s, float *dst, const uint16_t *src, size_t n)
{
    if (!n)
        return;
    from_bf16_kernel<<<tr_cu_blocks(n), CU_THREADS, 0, cu_stream(s)>>>(dst, src, n);
    cu_launched("from_bf16");
}

} // extern "C"
