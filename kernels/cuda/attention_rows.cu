// Context parallelism's attention (kernels.h attention_rows_*): query rows q0 .. Tk-1 of a qkv
// buffer of Tk rows (GQA layout (B, Tk, NG, R+2, HS)) against keys 0 .. q0+i, ALiBi optional.
// One warp per (batch, head, query row); lane l holds dims l, l+32, .. of the head (HS <= 256).
#include <math.h>

#include "kernels/cuda/attention_rows.h"
#include "kernels/cuda/grid.cuh"

namespace {

constexpr int WARPS = 4;  // query rows per block
constexpr int MAX_PER_LANE = 8; // HS <= 32 * 8

struct rows_dims {
    int B, Tk, q0, nq, NH, NG, R, HS;
    size_t row; // floats per qkv row
    float scale;
};

__device__ size_t q_at(const rows_dims &d, int b, int t, int h)
{
    int g = h / d.R;
    return ((size_t)b * d.Tk + t) * d.row + ((size_t)g * (d.R + 2) + h % d.R) * d.HS;
}
__device__ size_t k_at(const rows_dims &d, int b, int j, int g)
{
    return ((size_t)b * d.Tk + j) * d.row + ((size_t)g * (d.R + 2) + d.R) * d.HS;
}

// The warp's dot product of two head vectors (every lane gets it).
__device__ float warp_dot(const float *a, const float *b, int HS)
{
    float s = 0.0f;
    for (int e = threadIdx.x; e < HS; e += 32)
        s += a[e] * b[e];
    return tr_cu_warp_sum(s);
}

__global__ void rows_forward_kernel(rows_dims d, float *out, float *lse, const float *qkv,
                                    const float *alibi)
{
    int u = blockIdx.x * WARPS + threadIdx.y, lane = threadIdx.x;
    if (u >= d.B * d.NH * d.nq)
        return;
    int i = u % d.nq, h = (u / d.nq) % d.NH, b = u / (d.nq * d.NH), t = d.q0 + i, g = h / d.R;
    const float *q = qkv + q_at(d, b, t, h);
    float acc[MAX_PER_LANE], m = -INFINITY, l = 0.0f, slope = alibi ? alibi[h] : 0.0f;
    for (int c = 0; c < MAX_PER_LANE; c++)
        acc[c] = 0.0f;
    for (int j = 0; j <= t; j++) {
        const float *k = qkv + k_at(d, b, j, g), *v = k + d.HS;
        float s = warp_dot(q, k, d.HS) * d.scale + slope * (float)(j - t);
        if (s > m) {
            float c = expf(m - s);
            l *= c;
            for (int e = 0; e < MAX_PER_LANE; e++)
                acc[e] *= c;
            m = s;
        }
        float p = expf(s - m);
        l += p;
        for (int e = 0, dim = lane; dim < d.HS; e++, dim += 32)
            acc[e] += p * v[dim];
    }
    float *o = out + (((size_t)b * d.nq + i) * d.NH + h) * d.HS;
    for (int e = 0, dim = lane; dim < d.HS; e++, dim += 32)
        o[dim] = acc[e] / l;
    if (lane == 0)
        lse[((size_t)b * d.NH + h) * d.nq + i] = m + logf(l);
}

__global__ void rows_backward_kernel(rows_dims d, float *dqkv, const float *dout, const float *qkv,
                                     const float *out, const float *lse, const float *alibi)
{
    int u = blockIdx.x * WARPS + threadIdx.y, lane = threadIdx.x;
    if (u >= d.B * d.NH * d.nq)
        return;
    int i = u % d.nq, h = (u / d.nq) % d.NH, b = u / (d.nq * d.NH), t = d.q0 + i, g = h / d.R;
    const float *q = qkv + q_at(d, b, t, h);
    size_t oi = (((size_t)b * d.nq + i) * d.NH + h) * d.HS;
    const float *dO = dout + oi;
    float D = warp_dot(dO, out + oi, d.HS), L = lse[((size_t)b * d.NH + h) * d.nq + i];
    float slope = alibi ? alibi[h] : 0.0f, dq[MAX_PER_LANE];
    for (int e = 0; e < MAX_PER_LANE; e++)
        dq[e] = 0.0f;
    for (int j = 0; j <= t; j++) {
        size_t ko = k_at(d, b, j, g);
        const float *k = qkv + ko, *v = k + d.HS;
        float p = expf(warp_dot(q, k, d.HS) * d.scale + slope * (float)(j - t) - L);
        float ds = p * (warp_dot(dO, v, d.HS) - D) * d.scale;
        for (int e = 0, dim = lane; dim < d.HS; e++, dim += 32) {
            dq[e] += ds * k[dim];
            atomicAdd(dqkv + ko + dim, ds * q[dim]);
            atomicAdd(dqkv + ko + d.HS + dim, p * dO[dim]);
        }
    }
    float *dqr = dqkv + q_at(d, b, t, h);
    for (int e = 0, dim = lane; dim < d.HS; e++, dim += 32)
        dqr[dim] += dq[e]; // this warp alone owns query row (b, t, h)
}

rows_dims make_dims(int B, int Tk, int q0, int NH, int NG, int HS)
{
    rows_dims d = {B, Tk, q0, Tk - q0, NH, NG, NH / NG, HS,
                   (size_t)NG * (size_t)(NH / NG + 2) * (size_t)HS, 1.0f / sqrtf((float)HS)};
    return d;
}

int check_dims(const rows_dims &d, const char *op)
{
    if (d.HS > 32 * MAX_PER_LANE || d.nq < 1 || d.q0 < 0 || d.NG < 1 || d.NH % d.NG) {
        cu_keep_error("%s: head size %d (at most %d), query rows %d at %d, %d heads in %d groups",
                      op, d.HS, 32 * MAX_PER_LANE, d.nq, d.q0, d.NH, d.NG);
        return 0;
    }
    return 1;
}

} // namespace

extern "C" {

void cu_attention_rows_forward(tr_stream s, float *out, float *lse, const float *qkv,
                               const float *alibi, int B, int Tk, int q0, int NH, int NG, int HS)
{
    rows_dims d = make_dims(B, Tk, q0, NH, NG, HS);
    if (!check_dims(d, "attention_rows_forward"))
        return;
    unsigned rows = (unsigned)(B * NH * d.nq);
    rows_forward_kernel<<<(rows + WARPS - 1) / WARPS, dim3(32, WARPS), 0, cu_stream(s)>>>(
        d, out, lse, qkv, alibi);
    cu_launched("attention_rows_forward");
}

void cu_attention_rows_backward(tr_stream s, float *dqkv, const float *dout, const float *qkv,
                                const float *out, const float *lse, const float *alibi, int B,
                                int Tk, int q0, int NH, int NG, int HS)
{
    rows_dims d = make_dims(B, Tk, q0, NH, NG, HS);
    if (!check_dims(d, "attention_rows_backward"))
        return;
    unsigned rows = (unsigned)(B * NH * d.nq);
    rows_backward_kernel<<<(rows + WARPS - 1) / WARPS, dim3(32, WARPS), 0, cu_stream(s)>>>(
        d, dqkv, dout, qkv, out, lse, alibi);
    cu_launched("attention_rows_backward");
}

} // extern "C"
