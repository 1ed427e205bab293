// tests/cuda: context parallelism's attention kernels (kernels/cuda/attention_rows.cuh), the very
// source the GPU build compiles, run on the host through warp_emu.hpp (rows_emu.h states the
// calls) over the grids attention_rows.cu launches.
#include "tests/cuda/warp_emu.hpp"

#include "kernels/cuda/attention_rows.cuh"

extern "C" {
#include "tests/cuda/rows_emu.h"
}

namespace {

ar::args make_args(int B, int Tk, int q0, int NH, int NG, int HS, int T, const float *alibi)
{
    ar::args a = {};
    a.B = B, a.Tk = Tk, a.q0 = q0, a.nq = Tk - q0, a.NH = NH, a.NG = NG, a.R = NH / NG;
    a.HS = HS, a.row = NG * (a.R + 2) * HS, a.C = NH * HS, a.T = T;
    a.scale = 1.0f / sqrtf((float)HS);
    a.alibi = alibi;
    return a;
}

// f(tile constant, DROP constant) for the tile asked (0: tile_for) and drop; returns the tile
template <class F> int by_tile(int tile, int HS, bool drop, F f)
{
    tile = tile ? tile : ar::tile_for(HS);
    ar::with_tile(tile, [&](auto t) {
        if (drop)
            f(t, std::true_type{});
        else
            f(t, std::false_type{});
    });
    return tile;
}

template <bool DROP> ar::args_t<DROP> with_drop(const ar::args &a, const emu_rows_drop *d)
{
    ar::args_t<DROP> r;
    static_cast<ar::args &>(r) = a;
    if constexpr (DROP)
        r.dr = drop::params_of(*d);
    return r;
}

} // namespace

int emu_rows_forward(float *out, float *lse, const float *qkv, const float *alibi, int B,
                     int Tk, int q0, int NH, int NG, int HS, int T, const emu_rows_drop *drop,
                     int tile)
{
    ar::args a = make_args(B, Tk, q0, NH, NG, HS, T, alibi);
    a.out = out, a.lse = lse, a.qkv = qkv;
    return by_tile(tile, HS, drop, [&](auto t, auto d) {
        constexpr int TILE = decltype(t)::value;
        constexpr bool DROP = decltype(d)::value;
        ar::args_t<DROP> x = with_drop<DROP>(a, drop);
        emu::launch((a.nq + TILE - 1) / TILE, B * NH, ar::forward_bytes(TILE, HS),
                    [&x] { ar::forward<TILE, DROP>(x); });
    });
}

int emu_rows_backward(float *dqkv, const float *dout, const float *qkv, const float *out,
                      const float *lse, const float *alibi, int B, int Tk, int q0, int NH,
                      int NG, int HS, int T, const emu_rows_drop *drop, int tile)
{
    ar::args a = make_args(B, Tk, q0, NH, NG, HS, T, alibi);
    a.dqkv = dqkv, a.dout = dout, a.qkv = qkv, a.out_c = out, a.lse_c = lse;
    return by_tile(tile, HS, drop, [&](auto t, auto d) {
        constexpr int TILE = decltype(t)::value;
        constexpr bool DROP = decltype(d)::value;
        ar::args_t<DROP> x = with_drop<DROP>(a, drop);
        emu::launch((Tk + TILE - 1) / TILE, B * NG, ar::kv_bytes(TILE, HS),
                    [&x] { ar::backward_kv<TILE, DROP>(x); });
        emu::launch((a.nq + TILE - 1) / TILE, B * NH, ar::q_bytes(TILE, HS),
                    [&x] { ar::backward_q<TILE, DROP>(x); });
    });
}
