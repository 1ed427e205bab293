// kernels/cuda/ — internal to the .cu files: the GELU's value and slope on the device, shared
// by elementwise.cu's activation kernels and family.cu's GeGLU so that both compute the same
// GELU; and the MLP's activations of either GELU or ReLU for elementwise.cu.
#ifndef TR_KERNELS_CUDA_GELU_CUH
#define TR_KERNELS_CUDA_GELU_CUH

#define TR_CU_SQRT_2_OVER_PI 0.7978845608028654f
#define TR_CU_GELU_K 0.044715f

// gelu(x) = x sig(2u), u = sqrt(2/pi)(x + 0.044715 x^3): the CPU backend's sigmoid form
static __device__ __forceinline__ float tr_cu_gelu(float x)
{
    float u = TR_CU_SQRT_2_OVER_PI * (x + TR_CU_GELU_K * x * x * x);
    return x / (1.0f + expf(-2.0f * u));
}

// d gelu(x) / dx
static __device__ __forceinline__ float tr_cu_gelu_grad(float x)
{
    float u = TR_CU_SQRT_2_OVER_PI * (x + TR_CU_GELU_K * x * x * x);
    float du = TR_CU_SQRT_2_OVER_PI * (1.0f + 3.0f * TR_CU_GELU_K * x * x);
    float sg = 1.0f / (1.0f + expf(-2.0f * u));
    return sg + 2.0f * x * sg * (1.0f - sg) * du;
}

// The GELU of either kind (kernels.h): Exact, x Phi(x) (gelu_exact_*, GPT-NeoX's), with
// gelu'(x) = Phi(x) + x phi(x); else the tanh approximation above.
template <bool Exact>
static __device__ __forceinline__ float gelu_value(float x)
{
    return Exact ? x * normcdff(x) : tr_cu_gelu(x);
}

template <bool Exact>
static __device__ __forceinline__ float gelu_slope(float x)
{
    return Exact ? normcdff(x) + x * 0.39894228040143268f * expf(-0.5f * x * x)
                 : tr_cu_gelu_grad(x);
}

// The MLP's elementwise activation of kind Kind (elementwise.cu's kernels): the tanh GELU, the
// exact GELU or ReLU (kernels.h's relu_*: max(x, 0) with NaN kept; the backward a select, dout
// where x > 0, else 0, so an infinite dout at x <= 0 gives 0, never NaN).
enum { TR_CU_ACT_GELU_TANH = 0, TR_CU_ACT_GELU_EXACT = 1, TR_CU_ACT_RELU = 2 };

template <int Kind>
static __device__ __forceinline__ float act_value(float x)
{
    return Kind == TR_CU_ACT_RELU ? (x < 0.0f ? 0.0f : x)
                                  : gelu_value<Kind == TR_CU_ACT_GELU_EXACT>(x);
}

// act'(x) dout, rounded once (__fmul_rn: never fused with a later add, e.g. a column sum's)
template <int Kind>
static __device__ __forceinline__ float act_backward(float x, float dout)
{
    return Kind == TR_CU_ACT_RELU ? (x > 0.0f ? dout : 0.0f)
                                  : __fmul_rn(gelu_slope<Kind == TR_CU_ACT_GELU_EXACT>(x), dout);
}

#endif
