// The launch of flash_mma.cuh's tensor-core attention (cuda_internal.h: cu_flash_mma_forward,
// its output fp32 or bf16, and cu_flash_mma_backward; qkv and dqkv fp32 or bf16): the bf16
// mode's head sizes 16, 32, 64, 128 with every tensor 16-byte aligned (the kernels' float4
// loads) and qkv's rows under 2^25 elements, unless TRIDENT_CUDA_ATTENTION=wmma; elsewhere they
// return 0 and flash.cu's wmma kernels run.
// Grids: forward and dQ a block per (query tile of 64, batch x head), the largest tiles first;
// dK dV a block per (key tile, batch x group). TRIDENT_CUDA_ATTENTION_BWD=fused: dK dV and dQ
// in one kernel (backward_kv<..., true>) on the compute stream, dQ summed in a scratch of
// B NH T HS floats this file keeps (grown to the largest call; where it cannot be had, or on
// another stream, the two kernels run); =split (the default for now): the two kernels.
// Attention dropout (kernels.h's attention_gqa_dropout_*, fp32 storage): the kernels' DROP
// variants, the backward always as the two kernels (no fused variant is built for it).
#include "kernels/cuda/flash_mma_backward.cuh"

#include <mutex>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.h"

namespace {

// (rows of qkv and out under 2^25 elements: load_tile's 32-bit offsets within a tile)
bool takes(int HS, uintptr_t pointers, int NH, int NG)
{
    static const bool off = cu_env_is("TRIDENT_CUDA_ATTENTION", "wmma");
    long long c3 = (long long)NG * (NH / (NG > 0 ? NG : 1) + 2) * HS;
    return !off && (pointers & 15) == 0 && (HS == 16 || HS == 32 || HS == 64 || HS == 128) &&
           c3 < (1 << 25);
}

// Shared memory past 48 KiB is opted into per kernel, once (each kernel's bytes are fixed).
template <auto Kernel> bool opt_in(size_t bytes, const char *what)
{
    static const bool ok = !cu_note(cudaFuncSetAttribute(
        Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes), what);
    return ok;
}

// O: the output's storage (float: out; uint16_t: bf16 out16), Q: qkv's (bf16 qkv16 only with
// out16: kernels.h's attention_*_qkv16)
template <int D, typename O, typename Q = float> void forward_o(cudaStream_t st, const fm::args &m)
{
    size_t bytes = fm::forward_bytes(D);
    if (!opt_in<fm::forward<D, O, Q>>(bytes, "attention_forward (mma)"))
        return;
    fm::forward<D, O, Q><<<dim3((m.T + fm::BM - 1) / fm::BM, m.B * m.NH), fm::THREADS, bytes,
                           st>>>(m);
    cu_launched("attention_forward (mma)");
}

// kernels.h's attention_gqa_dropout_forward: fp32 qkv and out
template <int D> void forward_drop(cudaStream_t st, const fm::drop_args &m)
{
    size_t bytes = fm::forward_bytes(D);
    if (!opt_in<fm::forward<D, float, float, true>>(bytes, "attention_forward (mma, dropout)"))
        return;
    fm::forward<D, float, float, true><<<dim3((m.T + fm::BM - 1) / fm::BM, m.B * m.NH),
                                         fm::THREADS, bytes, st>>>(m);
    cu_launched("attention_forward (mma, dropout)");
}

template <int D> void forward_d(cudaStream_t st, const fm::args &m, bool in16,
                                const fm::drop_args *dm)
{
    if (dm)
        forward_drop<D>(st, *dm);
    else if (in16)
        forward_o<D, uint16_t, uint16_t>(st, m);
    else
        m.out16 ? forward_o<D, uint16_t>(st, m) : forward_o<D, float>(st, m);
}

// cu_grow_buffer for the fused backward's scratch: false, with a warning once, when
// cudaMalloc cannot have it
bool grow(void **mem, size_t *have, size_t bytes, bool zero, cudaStream_t st)
{
    if (cu_grow_buffer(mem, have, bytes, zero, st, "attention_backward (fused): its scratch"))
        return true;
    static bool told;
    if (!told)
        tr_warn("cuda: no %.1f MiB for the fused attention backward's scratch: the two "
                "kernels run instead", (double)bytes / 1048576.0);
    told = true;
    return false;
}

// The fused backward's scratch into m (dq_acc, dq_flags, ticket): the sums (not zeroed:
// turn 0 writes them), and the ticket then the flags, zeroed once (every launch leaves them
// 0, so a smaller call's prefix is zero too). False: the two kernels run.
std::mutex fused_mu; // held from fused_scratch through the launch (a grow frees the buffer)

bool fused_scratch(cudaStream_t st, fm::fused_args &m, int D, int BQ)
{
    // (the default until a GPU run times the fused kernel against the two: TRIDENT_CUDA_
    // ATTENTION_BWD=fused or =split chooses either way)
    constexpr bool fused_by_default = false;
    static const bool on = fused_by_default ? !cu_env_is("TRIDENT_CUDA_ATTENTION_BWD", "split")
                                            : cu_env_is("TRIDENT_CUDA_ATTENTION_BWD", "fused");
    static void *sums, *flags;
    static size_t sums_have, flags_have;
    if (!on || st != cu_stream(NULL))
        return false;
    if (!grow(&sums, &sums_have, fm::fused_sums(m, D) * 4, false, st) ||
        !grow(&flags, &flags_have, (fm::fused_flags(m, BQ) + 1) * 4, true, st))
        return false;
    m.dq_acc = static_cast<float *>(sums);
    m.ticket = static_cast<int *>(flags), m.dq_flags = m.ticket + 1;
    return true;
}

template <int D, typename Q, int BQ> void backward_q_of(cudaStream_t st, const fm::args &m)
{
    fm::fused_args fa;
    static_cast<fm::args &>(fa) = m;
    std::unique_lock<std::mutex> hold(fused_mu);
    if (fused_scratch(st, fa, D, BQ)) {
        size_t f = fm::backward_fused_bytes(D, BQ);
        if (!opt_in<fm::backward_kv<D, Q, BQ, true>>(f, "attention_backward (mma, fused)"))
            return;
        fm::backward_kv<D, Q, BQ, true><<<dim3((m.T + fm::BN - 1) / fm::BN, m.B * m.NG),
                                          fm::THREADS, f, st>>>(fa);
        cu_launched("attention_backward (mma, fused)");
        return;
    }
    hold.unlock();
    size_t kv = fm::backward_kv_bytes(D, BQ), q = fm::backward_q_bytes(D);
    if (!opt_in<fm::backward_kv<D, Q, BQ>>(kv, "attention_backward (mma, dK dV)") ||
        !opt_in<fm::backward_q<D, Q>>(q, "attention_backward (mma, dQ)"))
        return;
    fm::backward_kv<D, Q, BQ><<<dim3((m.T + fm::BN - 1) / fm::BN, m.B * m.NG), fm::THREADS, kv,
                                st>>>(m);
    cu_launched("attention_backward (mma, dK dV)");
    fm::backward_q<D, Q><<<dim3((m.T + fm::BM - 1) / fm::BM, m.B * m.NH), fm::THREADS, q,
                           st>>>(m);
    cu_launched("attention_backward (mma, dQ)");
}

// dK dV's query rows a step: bq_for(D), or 64 at D = 64 with TRIDENT_CUDA_ATTENTION_KV=64
template <int D, typename Q> void backward_bq(cudaStream_t st, const fm::args &m)
{
    static const bool kv64 = cu_env_is("TRIDENT_CUDA_ATTENTION_KV", "64");
    if constexpr (D == 64)
        if (kv64)
            return backward_q_of<D, Q, 64>(st, m);
    backward_q_of<D, Q, fm::bq_for(D)>(st, m);
}

// kernels.h's attention_gqa_dropout_backward: fp32 qkv, dout and dqkv; the two kernels (dK dV's
// rows a step as backward_bq's)
template <int D, int BQ> void backward_drop_of(cudaStream_t st, const fm::drop_args &m)
{
    size_t kv = fm::backward_kv_bytes(D, BQ), q = fm::backward_q_bytes(D);
    if (!opt_in<fm::backward_kv<D, float, BQ, false, true>>(
            kv, "attention_backward (mma, dK dV, dropout)") ||
        !opt_in<fm::backward_q<D, float, true>>(q, "attention_backward (mma, dQ, dropout)"))
        return;
    fm::backward_kv<D, float, BQ, false, true><<<dim3((m.T + fm::BN - 1) / fm::BN, m.B * m.NG),
                                                 fm::THREADS, kv, st>>>(m);
    cu_launched("attention_backward (mma, dK dV, dropout)");
    fm::backward_q<D, float, true><<<dim3((m.T + fm::BM - 1) / fm::BM, m.B * m.NH), fm::THREADS,
                                     q, st>>>(m);
    cu_launched("attention_backward (mma, dQ, dropout)");
}

template <int D> void backward_d(cudaStream_t st, const fm::args &m, bool in16,
                                 const fm::drop_args *dm)
{
    static const bool kv64 = cu_env_is("TRIDENT_CUDA_ATTENTION_KV", "64");
    if (!dm)
        return in16 ? backward_bq<D, uint16_t>(st, m) : backward_bq<D, float>(st, m);
    if constexpr (D == 64)
        if (kv64)
            return backward_drop_of<D, 64>(st, *dm);
    backward_drop_of<D, fm::bq_for(D)>(st, *dm);
}

// forward (fwd) or backward for the head size (one of the four takes() allows); in16: qkv16;
// dm: the dropout's arguments (m's and the dropout's) or null
void run(cudaStream_t st, const fm::args &m, int HS, bool fwd, bool in16,
         const fm::drop_args *dm)
{
    switch (HS) {
    case 16: fwd ? forward_d<16>(st, m, in16, dm) : backward_d<16>(st, m, in16, dm); break;
    case 32: fwd ? forward_d<32>(st, m, in16, dm) : backward_d<32>(st, m, in16, dm); break;
    case 64: fwd ? forward_d<64>(st, m, in16, dm) : backward_d<64>(st, m, in16, dm); break;
    default: fwd ? forward_d<128>(st, m, in16, dm) : backward_d<128>(st, m, in16, dm); break;
    }
}

// m with the dropout's arguments (drop set) into dm, or null (drop null)
const fm::drop_args *with_drop(fm::drop_args *dm, const fm::args &m, const tr_dropout *drop)
{
    if (!drop)
        return nullptr;
    static_cast<fm::args &>(*dm) = m;
    dm->dr = drop::params_of(*drop);
    return dm;
}

} // namespace

extern "C" {

int cu_flash_mma_forward(cudaStream_t st, float *out, uint16_t *out16, float *lse,
                         const float *qkv, const uint16_t *qkv16, const float *alibi, int B,
                         int T, int NH, int NG, int HS, const int32_t *segments,
                         const tr_dropout *drop)
{
    if (!takes(HS, (uintptr_t)out | (uintptr_t)out16 | (uintptr_t)qkv | (uintptr_t)qkv16, NH, NG))
        return 0;
    if (drop && (out16 || qkv16))
        return 0; /* (dropout's ops are fp32 storage's only) */
    fm::args m = fm::make_args(B, T, NH, NG, HS, alibi);
    m.out = out, m.out16 = out16, m.lse = lse, m.seg = segments;
    qkv16 ? (void)(m.qkv16 = qkv16) : (void)(m.qkv = qkv);
    fm::drop_args dm;
    run(st, m, HS, true, qkv16 != nullptr, with_drop(&dm, m, drop));
    return 1;
}

int cu_flash_mma_backward(cudaStream_t st, float *dqkv, uint16_t *dqkv16, const float *Drow,
                          const int32_t *starts, const float *dout, const uint16_t *dout16,
                          const float *qkv, const uint16_t *qkv16, const float *lse,
                          const float *alibi, int B, int T, int NH, int NG, int HS,
                          const tr_dropout *drop)
{
    uintptr_t p = (uintptr_t)dqkv | (uintptr_t)dqkv16 | (uintptr_t)dout | (uintptr_t)qkv;
    if (!takes(HS, p | (uintptr_t)qkv16 | (uintptr_t)dout16, NH, NG) || !qkv16 != !dout16)
        return 0; /* (dout's storage is qkv's) */
    if (drop && qkv16)
        return 0;
    fm::args m = fm::make_args(B, T, NH, NG, HS, alibi);
    m.Drow = Drow, m.starts = starts, m.lse_in = lse;
    qkv16 ? (void)(m.qkv16 = qkv16, m.dqkv16 = dqkv16, m.dout16 = dout16)
          : (void)(m.qkv = qkv, m.dqkv = dqkv, m.dout = dout);
    fm::drop_args dm;
    run(st, m, HS, false, qkv16 != nullptr, with_drop(&dm, m, drop));
    return 1;
}

} // extern "C"
