// AdamW over the flat buffers (one fused pass: gradient scale, moments, bias correction,
// decoupled weight decay) and the sum of squares in double (fixed two-stage order).
#include <math.h>

#include "kernels/cuda/grid.cuh"

namespace {

constexpr int SUMSQ_THREADS = 256;
constexpr int SUMSQ_BLOCKS = 1024; // partials (doubles) in the scratch

// The CPU backend's order of operations, element by element.
__global__ void adamw_kernel(float *p, const float *g, float *m, float *v, size_t n, float lr,
                             float b1, float b2, float eps, float wd, float gs, float ib1,
                             float ib2)
{
    float c1 = 1.0f - b1, c2 = 1.0f - b2;
    TR_CU_GRID_STRIDE(i, n)
    {
        float gi = g[i] * gs;
        float mi = b1 * m[i] + c1 * gi;
        float vi = b2 * v[i] + c2 * (gi * gi);
        float den = sqrtf(vi * ib2) + eps;
        m[i] = mi;
        v[i] = vi;
        float pi = p[i];
        p[i] = pi - lr * ((mi * ib1) / den + wd * pi);
    }
}

// partial[block] = sum of x[i]^2 over the block's grid-stride elements
__global__ void sumsq_partial_kernel(double *partial, const float *x, size_t n)
{
    __shared__ double part[SUMSQ_THREADS / 32];
    double acc = 0.0;
    TR_CU_GRID_STRIDE(i, n)
    {
        double xi = x[i];
        acc += xi * xi;
    }
    acc = tr_cu_warp_sum_d(acc);
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0)
        part[warp] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        double t = 0.0;
        for (int w = 0; w < SUMSQ_THREADS / 32; w++)
            t += part[w];
        partial[blockIdx.x] = t;
    }
}

__global__ void sumsq_finish_kernel(double *out, const double *partial, int blocks)
{
    double t = 0.0;
    for (int b = 0; b < blocks; b++)
        t += partial[b];
    *out = t;
}

} // namespace

extern "C" {

void cu_adamw(tr_stream s, float *params, const float *grads, float *m, float *v, size_t n,
                 float lr, float beta1, float beta2, float eps, float weight_decay,
                 float grad_scale, int step)
{
    if (!n)
        return;
    float ib1 = (float)(1.0 / (1.0 - pow((double)beta1, step)));
    float ib2 = (float)(1.0 / (1.0 - pow((double)beta2, step)));
    adamw_kernel<<<tr_cu_blocks(n), CU_THREADS, 0, cu_stream(s)>>>(
        params, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, grad_scale, ib1, ib2);
    cu_launched("adamw");
}

double cu_sumsq(tr_stream s, const float *x, size_t n)
{
    cudaStream_t st = cu_shared_stream(s, "sumsq");
    if (!n)
        return cu_failed() ? NAN : 0.0;
    size_t want = (n + SUMSQ_THREADS * 8 - 1) / (SUMSQ_THREADS * 8);
    int blocks = (int)(want < SUMSQ_BLOCKS ? (want ? want : 1) : SUMSQ_BLOCKS);
    double *partial = (double *)cu_scratch();
    double *result = partial + SUMSQ_BLOCKS;
    sumsq_partial_kernel<<<blocks, SUMSQ_THREADS, 0, st>>>(partial, x, n);
    sumsq_finish_kernel<<<1, 1, 0, st>>>(result, partial, blocks);
    cu_launched("sumsq");
    double *host = cu_host_scalar();
    *host = NAN;
    cu_note(cudaMemcpyAsync(host, result, sizeof *host, cudaMemcpyDeviceToHost, st),
               "sumsq (copy)");
    cu_note(cudaStreamSynchronize(st), "sumsq (synchronize)");
    return cu_failed() ? NAN : *host;
}

} // extern "C"
