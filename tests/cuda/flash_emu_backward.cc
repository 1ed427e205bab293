// tests/cuda: the tensor-core attention's backward kernels of kernels/cuda/flash_mma_backward.cuh
// run on the host through warp_emu.hpp (flash_emu.h states the calls; the forward ones:
// flash_emu.cc).
#include "tests/cuda/warp_emu.hpp"

#include <vector>

#include "kernels/cuda/flash_mma_backward.cuh"
#include "tests/cuda/flash_emu_heads.hpp"

extern "C" {
#include "tests/cuda/flash_emu.h"
}

namespace {

int kv_rows; // emu_flash_kv_rows: 64 takes dK dV's 64-row steps at D = 64
int fused;   // emu_flash_fused: backward_kv<..., true> alone

template <int D, typename Q, int BQ> void run_backward_kv(const fm::args &a)
{
    emu::launch((a.T + fm::BN - 1) / fm::BN, a.B * a.NG, fm::backward_kv_bytes(D, BQ),
                [&a] { fm::backward_kv<D, Q, BQ>(a); });
}

// The fused backward with its scratch as flash_mma.cu gives it: the sums (NaN, as memory
// never written: turn 0 must not read them), the ticket and flags zeroed; both must be 0
// again after the launch. The blocks run in the order of their tickets, each to its end
// (warp_emu.hpp), so a warp waiting on a block that took its ticket after its own aborts.
template <int D, typename Q, int BQ> void run_fused(const fm::args &m)
{
    fm::fused_args a;
    static_cast<fm::args &>(a) = m;
    size_t n_sums = fm::fused_sums(a, D), n_flags = fm::fused_flags(a, BQ);
    std::vector<float> sums(n_sums, NAN);
    std::vector<int> flags(n_flags + 1, 0);
    a.dq_acc = sums.data(), a.ticket = flags.data(), a.dq_flags = flags.data() + 1;
    emu::readable.push_back({sums.data(), n_sums * 4});
    emu::launch((a.T + fm::BN - 1) / fm::BN, a.B * a.NG, fm::backward_fused_bytes(D, BQ),
                [&a] { fm::backward_kv<D, Q, BQ, true>(a); });
    emu::readable.pop_back();
    for (int f : flags)
        emu::check(f == 0, "the fused backward left a flag or its ticket set");
}

template <int D, typename Q = float> void run_backward(const fm::args &a)
{
    if (fused && D == 64 && kv_rows == 64)
        return run_fused<D, Q, 64>(a);
    if (fused)
        return run_fused<D, Q, fm::bq_for(D)>(a);
    if (D == 64 && kv_rows == 64)
        run_backward_kv<D, Q, 64>(a);
    else
        run_backward_kv<D, Q, fm::bq_for(D)>(a);
    emu::launch((a.T + fm::BM - 1) / fm::BM, a.B * a.NH, fm::backward_q_bytes(D),
                [&a] { fm::backward_q<D, Q>(a); });
}

} // namespace

void emu_flash_kv_rows(int rows) { kv_rows = rows; }
void emu_flash_fused(int on) { fused = on; }

int emu_flash_backward(float *dqkv, const float *Drow, const int32_t *starts, const float *dout,
                       const float *qkv, const float *lse, const float *alibi, int B, int T,
                       int NH, int NG, int HS)
{
    fm::args a = fm::make_args(B, T, NH, NG, HS, alibi);
    a.dqkv = dqkv, a.Drow = Drow, a.starts = starts, a.dout = dout, a.qkv = qkv, a.lse_in = lse;
    emu::readable = {{qkv, (size_t)B * T * a.C3 * 4}, {dout, (size_t)B * T * a.C * 4}};
    return by_head_size(HS, [&a](auto d) { run_backward<decltype(d)::value>(a); });
}

int emu_flash_backward_qkv16(uint16_t *dqkv16, const float *Drow, const int32_t *starts,
                             const uint16_t *dout16, const uint16_t *qkv16, const float *lse,
                             const float *alibi, int B, int T, int NH, int NG, int HS)
{
    fm::args a = fm::make_args(B, T, NH, NG, HS, alibi);
    a.dqkv16 = dqkv16, a.Drow = Drow, a.starts = starts, a.dout16 = dout16, a.qkv16 = qkv16;
    a.lse_in = lse;
    emu::readable = {{qkv16, (size_t)B * T * a.C3 * 2}, {dout16, (size_t)B * T * a.C * 2}};
    return by_head_size(HS, [&a](auto d) { run_backward<decltype(d)::value, uint16_t>(a); });
}

namespace {

template <int D, int BQ> void run_dropout_backward(const fm::drop_args &a)
{
    emu::launch((a.T + fm::BN - 1) / fm::BN, a.B * a.NG, fm::backward_kv_bytes(D, BQ),
                [&a] { fm::backward_kv<D, float, BQ, false, true>(a); });
    emu::launch((a.T + fm::BM - 1) / fm::BM, a.B * a.NH, fm::backward_q_bytes(D),
                [&a] { fm::backward_q<D, float, true>(a); });
}

} // namespace

int emu_flash_dropout_backward(float *dqkv, const float *Drow, const int32_t *starts,
                               const float *dout, const float *qkv, const float *lse,
                               const float *alibi, int B, int T, int NH, int NG, int HS,
                               emu_drop d)
{
    fm::drop_args a;
    static_cast<fm::args &>(a) = fm::make_args(B, T, NH, NG, HS, alibi);
    a.dqkv = dqkv, a.Drow = Drow, a.starts = starts, a.dout = dout, a.qkv = qkv, a.lse_in = lse;
    a.dr = drop::params_of(d);
    emu::readable = {{qkv, (size_t)B * T * a.C3 * 4}, {dout, (size_t)B * T * a.C * 4}};
    return by_head_size(HS, [&a](auto x) {
        constexpr int D = decltype(x)::value;
        if (D == 64 && kv_rows == 64)
            run_dropout_backward<D, 64>(a);
        else
            run_dropout_backward<D, fm::bq_for(D)>(a);
    });
}
