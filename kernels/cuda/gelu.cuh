// kernels/cuda/ — internal to the .cu files: the GELU's value and slope on the device, shared
// by elementwise.cu's gelu kernels and family.cu's GeGLU so that both compute the same GELU.
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

#endif
