// Token and position embeddings. The token backward adds rows with atomics (repeated ids
// in a batch land on the same row), so its sum order, unlike the rest of the backend, is not
// fixed from run to run; the position backward walks the batch in order.
#include "kernels/cuda/grid.cuh"

namespace {

// out (N, C) = table[ids[n] - v_start] for held ids, else 0
__global__ void embedding_forward_kernel(float *out, const int32_t *ids, const float *table,
                                         int N, int C, int v_start, int V)
{
    size_t n_el = (size_t)N * C;
    TR_CU_GRID_STRIDE(i, n_el)
    {
        size_t n = i / (size_t)C, c = i % (size_t)C;
        long long row = (long long)ids[n] - v_start;
        out[i] = row >= 0 && row < V ? table[(size_t)row * C + c] : 0.0f;
    }
}

__global__ void embedding_backward_kernel(float *dtable, const float *dout, const int32_t *ids,
                                          int N, int C, int v_start, int V)
{
    size_t n_el = (size_t)N * C;
    TR_CU_GRID_STRIDE(i, n_el)
    {
        size_t n = i / (size_t)C, c = i % (size_t)C;
        long long row = (long long)ids[n] - v_start;
        if (row >= 0 && row < V)
            atomicAdd(dtable + (size_t)row * C + c, dout[i]);
    }
}

// out (B, T, C) += wpe (T, C)
__global__ void position_forward_kernel(float *out, const float *wpe, int B, int T, int C)
{
    size_t tc = (size_t)T * C, n_el = (size_t)B * tc;
    TR_CU_GRID_STRIDE(i, n_el) out[i] += wpe[i % tc];
}

// dwpe (T, C) += sum_b dout (B, T, C), batches in order
__global__ void position_backward_kernel(float *dwpe, const float *dout, int B, int T, int C)
{
    size_t tc = (size_t)T * C;
    TR_CU_GRID_STRIDE(i, tc)
    {
        float s = 0.0f;
        for (int b = 0; b < B; b++)
            s += dout[(size_t)b * tc + i];
        dwpe[i] += s;
    }
}

} // namespace

extern "C" {

void cu_embedding_forward(tr_stream s, float *out, const int32_t *ids, const float *table,
                             int N, int C, int v_start, int V)
{
    size_t n = (size_t)N * (size_t)C;
    if (!n)
        return;
    embedding_forward_kernel<<<tr_cu_blocks(n), CU_THREADS, 0, cu_stream(s)>>>(
        out, ids, table, N, C, v_start, V);
    cu_launched("embedding_forward");
}

void cu_embedding_backward(tr_stream s, float *dtable, const float *dout,
                              const int32_t *ids, int N, int C, int v_start, int V)
{
    size_t n = (size_t)N * (size_t)C;
    if (!n)
        return;
    embedding_backward_kernel<<<tr_cu_blocks(n), CU_THREADS, 0, cu_stream(s)>>>(
        dtable, dout, ids, N, C, v_start, V);
    cu_launched("embedding_backward");
}

void cu_position_forward(tr_stream s, float *out, const float *wpe, int B, int T, int C)
{
    size_t n = (size_t)B * (size_t)T * (size_t)C;
    if (!n)
        return;
    position_forward_kernel<<<tr_cu_blocks(n), CU_THREADS, 0, cu_stream(s)>>>(out, wpe, B,
                                                                                   T, C);
    cu_launched("position_forward");
}

void cu_position_backward(tr_stream s, float *dwpe, const float *dout, int B, int T, int C)
{
    size_t n = (size_t)T * (size_t)C;
    if (!n || B <= 0)
        return;
    position_backward_kernel<<<tr_cu_blocks(n), CU_THREADS, 0, cu_stream(s)>>>(dwpe, dout,
                                                                                    B, T, C);
    cu_launched("position_backward");
}

} // extern "C"
