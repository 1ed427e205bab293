// Context parallelism's attention (kernels.h attention_rows_* and attention_rows_dropout_*):
// query rows q0 .. Tk-1 of a qkv buffer of Tk rows (GQA layout (B, Tk, NG, R+2, HS)) against
// keys 0 .. q0+i, ALiBi optional, fp32. The launches of attention_rows.cuh's flash-style
// kernels (their contract there): forward a block per (query tile, batch x head); backward a
// block per (key tile, batch x group) adding dK and dV, then a block per (query tile, batch x
// head) adding dQ. No atomics, no scratch: the same bits run to run.
#include <math.h>

#include "kernels/cuda/attention_rows.h"
#include "kernels/cuda/grid.cuh"
#include "kernels/cuda/mma_prims.cuh"
#include "kernels/cuda/attention_rows.cuh"

namespace {

// kernel opted into `bytes` of dynamic shared memory (the bytes follow HS: each call asks)
template <typename K> bool opt_in(K kernel, size_t bytes, const char *what)
{
    return !cu_note(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)bytes),
                    what);
}

ar::args make_args(int B, int Tk, int q0, int NH, int NG, int HS, int T, const float *alibi)
{
    ar::args a = {};
    a.B = B, a.Tk = Tk, a.q0 = q0, a.nq = Tk - q0, a.NH = NH, a.NG = NG;
    a.R = NG > 0 ? NH / NG : 0, a.HS = HS, a.row = NG * (a.R + 2) * HS, a.C = NH * HS, a.T = T;
    a.scale = 1.0f / sqrtf((float)HS);
    a.alibi = alibi;
    return a;
}

// The sizes the kernels take, else the error kept naming them
bool usable(const ar::args &a, const char *op)
{
    if (a.B < 1 || a.HS < 1 || a.HS > ar::MAX_HS || a.nq < 1 || a.q0 < 0 || a.NG < 1 ||
        a.NH % a.NG || (long long)a.B * a.NH > 65535 || a.T < a.Tk) {
        cu_keep_error("%s: batch %d (batch x heads at most 65535), head size %d (1 .. %d), "
                      "query rows %d at %d, %d heads in %d groups, mask length %d (>= %d keys)",
                      op, a.B, a.HS, ar::MAX_HS, a.nq, a.q0, a.NH, a.NG, a.T, a.Tk);
        return false;
    }
    return true;
}

template <int TILE, bool DROP> void forward_tiles(cudaStream_t st, const ar::args_t<DROP> &a)
{
    size_t bytes = ar::forward_bytes(TILE, a.HS);
    if (!opt_in(ar::forward<TILE, DROP>, bytes, "attention_rows_forward"))
        return;
    dim3 grid((a.nq + TILE - 1) / TILE, a.B * a.NH);
    ar::forward<TILE, DROP><<<grid, ar::THREADS, bytes, st>>>(a);
    cu_launched("attention_rows_forward");
}

template <int TILE, bool DROP> void backward_tiles(cudaStream_t st, const ar::args_t<DROP> &a)
{
    size_t kv = ar::kv_bytes(TILE, a.HS), q = ar::q_bytes(TILE, a.HS);
    if (!opt_in(ar::backward_kv<TILE, DROP>, kv, "attention_rows_backward (dK dV)") ||
        !opt_in(ar::backward_q<TILE, DROP>, q, "attention_rows_backward (dQ)"))
        return;
    dim3 kv_grid((a.Tk + TILE - 1) / TILE, a.B * a.NG), q_grid((a.nq + TILE - 1) / TILE,
                                                               a.B * a.NH);
    ar::backward_kv<TILE, DROP><<<kv_grid, ar::THREADS, kv, st>>>(a);
    cu_launched("attention_rows_backward (dK dV)");
    ar::backward_q<TILE, DROP><<<q_grid, ar::THREADS, q, st>>>(a);
    cu_launched("attention_rows_backward (dQ)");
}

template <bool DROP> void forward(tr_stream s, const ar::args_t<DROP> &a)
{
    if (!usable(a, "attention_rows_forward"))
        return;
    cudaStream_t st = cu_stream(s);
    ar::with_tile(ar::tile_for(a.HS),
                  [&](auto t) { forward_tiles<decltype(t)::value, DROP>(st, a); });
}

template <bool DROP> void backward(tr_stream s, const ar::args_t<DROP> &a)
{
    if (!usable(a, "attention_rows_backward"))
        return;
    cudaStream_t st = cu_stream(s);
    ar::with_tile(ar::tile_for(a.HS),
                  [&](auto t) { backward_tiles<decltype(t)::value, DROP>(st, a); });
}

} // namespace

extern "C" {

void cu_attention_rows_forward(tr_stream s, float *out, float *lse, const float *qkv,
                               const float *alibi, int B, int Tk, int q0, int NH, int NG, int HS)
{
    ar::args a = make_args(B, Tk, q0, NH, NG, HS, Tk, alibi);
    a.out = out, a.lse = lse, a.qkv = qkv;
    forward<false>(s, a);
}

void cu_attention_rows_backward(tr_stream s, float *dqkv, const float *dout, const float *qkv,
                                const float *out, const float *lse, const float *alibi, int B,
                                int Tk, int q0, int NH, int NG, int HS)
{
    ar::args a = make_args(B, Tk, q0, NH, NG, HS, Tk, alibi);
    a.dqkv = dqkv, a.dout = dout, a.qkv = qkv, a.out_c = out, a.lse_c = lse;
    backward<false>(s, a);
}

void cu_attention_rows_dropout_forward(tr_stream s, float *out, float *lse, const float *qkv,
                                       const float *alibi, int B, int Tk, int q0, int NH, int NG,
                                       int HS, int T, tr_dropout d)
{
    ar::drop_args a;
    static_cast<ar::args &>(a) = make_args(B, Tk, q0, NH, NG, HS, T, alibi);
    a.out = out, a.lse = lse, a.qkv = qkv, a.dr = drop::params_of(d);
    forward<true>(s, a);
}

void cu_attention_rows_dropout_backward(tr_stream s, float *dqkv, const float *dout,
                                        const float *qkv, const float *out, const float *lse,
                                        const float *alibi, int B, int Tk, int q0, int NH,
                                        int NG, int HS, int T, tr_dropout d)
{
    ar::drop_args a;
    static_cast<ar::args &>(a) = make_args(B, Tk, q0, NH, NG, HS, T, alibi);
    a.dqkv = dqkv, a.dout = dout, a.qkv = qkv, a.out_c = out, a.lse_c = lse;
    a.dr = drop::params_of(d);
    backward<true>(s, a);
}

} // extern "C"
