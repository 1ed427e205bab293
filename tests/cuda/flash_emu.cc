// tests/cuda: the tensor-core attention kernels of kernels/cuda/flash_mma.cuh, the very source
// the GPU build compiles, run on the host through warp_emu.hpp (flash_emu.h states the calls):
// the forward kernels (the backward ones: flash_emu_backward.cc).
#include "tests/cuda/warp_emu.hpp"

#include "kernels/cuda/flash_mma.cuh"
#include "tests/cuda/flash_emu_heads.hpp"

extern "C" {
#include "tests/cuda/flash_emu.h"
}

namespace {

template <int D, typename O = float, typename Q = float, bool DROP = false>
void run_forward(const fm::args_t<DROP> &a)
{
    emu::launch((a.T + fm::BM - 1) / fm::BM, a.B * a.NH, fm::forward_bytes(D),
                [&a] { fm::forward<D, O, Q, DROP>(a); });
}

} // namespace

int emu_flash_forward(float *out, float *lse, const float *qkv, const float *alibi, int B,
                      int T, int NH, int NG, int HS, const int32_t *segments)
{
    fm::args a = fm::make_args(B, T, NH, NG, HS, alibi);
    a.out = out, a.lse = lse, a.qkv = qkv, a.seg = segments;
    emu::readable = {{qkv, (size_t)B * T * a.C3 * 4}};
    return by_head_size(HS, [&a](auto d) { run_forward<decltype(d)::value>(a); });
}

int emu_flash_forward16(uint16_t *out16, float *lse, const float *qkv, const float *alibi,
                        int B, int T, int NH, int NG, int HS, const int32_t *segments)
{
    fm::args a = fm::make_args(B, T, NH, NG, HS, alibi);
    a.out16 = out16, a.lse = lse, a.qkv = qkv, a.seg = segments;
    emu::readable = {{qkv, (size_t)B * T * a.C3 * 4}};
    return by_head_size(HS, [&a](auto d) { run_forward<decltype(d)::value, uint16_t>(a); });
}

int emu_flash_forward_qkv16(uint16_t *out16, float *lse, const uint16_t *qkv16,
                            const float *alibi, int B, int T, int NH, int NG, int HS,
                            const int32_t *segments)
{
    fm::args a = fm::make_args(B, T, NH, NG, HS, alibi);
    a.out16 = out16, a.lse = lse, a.qkv16 = qkv16, a.seg = segments;
    emu::readable = {{qkv16, (size_t)B * T * a.C3 * 2}};
    return by_head_size(HS,
                        [&a](auto d) { run_forward<decltype(d)::value, uint16_t, uint16_t>(a); });
}

int emu_flash_dropout_forward(float *out, float *lse, const float *qkv, const float *alibi,
                              int B, int T, int NH, int NG, int HS, const int32_t *segments,
                              emu_drop d)
{
    fm::drop_args a;
    static_cast<fm::args &>(a) = fm::make_args(B, T, NH, NG, HS, alibi);
    a.out = out, a.lse = lse, a.qkv = qkv, a.seg = segments, a.dr = drop::params_of(d);
    emu::readable = {{qkv, (size_t)B * T * a.C3 * 4}};
    return by_head_size(HS,
                        [&a](auto x) { run_forward<decltype(x)::value, float, float, true>(a); });
}
