// kernels/cuda/ — internal: dropout's decision in device code (core/philox.h's, the same bits as
// the CPU's) and the hidden dropout's per-thread bodies (dropout.cu launches them; the attention
// kernels, flash_mma.cuh and flash.cu, call keep() / factor() / keep_pair() on their
// probabilities).
// tests/cuda/dropout_emu.cc runs this very source on the host against the CPU's ops.
//   keep(p, sample, e)          whether element e of `sample` is kept
//   factor(p, sample, e)        p.scale where it is, else 0
//   keep_pair(p, sample, e)     keep of e (bit 0) and e + 1 (bit 1): one Philox block unless e
//                               is a block's last
//   keep4(p, sample, e)         keep of e's block's four elements (bits 0..3)
//   hidden_vec4(a, v)           four-element group v of the (N, C) activation (every row's first
//                               element on a Philox block's first: C_total, col0 and C multiples
//                               of 4), one Philox block and one 16-byte load and store
//   hidden_block(a, n, k)       any shape: the elements of local row n in Philox block k of the
//                               row (from the block holding its first element; a row spans at
//                               most blocks_per_row(C))
// out = inp * scale where kept, else 0 (kernels.h's dropout; out may be inp).
#ifndef TR_KERNELS_CUDA_DROPOUT_CUH
#define TR_KERNELS_CUDA_DROPOUT_CUH

#include <stddef.h>
#include <stdint.h>

#include "core/philox.h"

#ifdef __CUDACC__
#define DROP_HD __host__ __device__ __forceinline__
#else
#define DROP_HD inline
#endif

namespace drop {

// kernels.h's tr_dropout as the kernels take it (sample0: the micro-batch's first sample)
struct params {
    uint64_t seed, sample0;
    uint32_t site, threshold;
    float scale;
    int head0;
};

// from kernels.h's tr_dropout (any struct of its fields)
template <class D> DROP_HD params params_of(const D &d)
{
    return {d.seed, d.first_sample, d.site, d.threshold, d.scale, d.head0};
}

// word i (0..3) of w by selects, not an index (registers, not local memory)
DROP_HD uint32_t word(const uint32_t w[4], unsigned i)
{
    return i == 0 ? w[0] : i == 1 ? w[1] : i == 2 ? w[2] : w[3];
}

DROP_HD bool keep(const params &p, uint64_t sample, uint64_t e)
{
    uint32_t w[4];
    tr_dropout_words(p.seed, sample, p.site, e, w);
    return word(w, (unsigned)e & 3) >= p.threshold;
}

DROP_HD float factor(const params &p, uint64_t sample, uint64_t e)
{
    return keep(p, sample, e) ? p.scale : 0.0f;
}

// bit 0: e kept, bit 1: e + 1 kept (one Philox block unless e is a block's last)
DROP_HD unsigned keep_pair(const params &p, uint64_t sample, uint64_t e)
{
    uint32_t w[4];
    unsigned k = (unsigned)e & 3;
    tr_dropout_words(p.seed, sample, p.site, e, w);
    unsigned bits = word(w, k) >= p.threshold;
    if (k == 3) // (e + 1 opens the next block)
        tr_dropout_words(p.seed, sample, p.site, e + 1, w);
    return bits | (unsigned)(word(w, (k + 1) & 3) >= p.threshold) << 1;
}

// bit q (0..3): element (e & ~3) + q kept (e's Philox block)
DROP_HD unsigned keep4(const params &p, uint64_t sample, uint64_t e)
{
    uint32_t w[4];
    tr_dropout_words(p.seed, sample, p.site, e, w);
    return (unsigned)(w[0] >= p.threshold) | (unsigned)(w[1] >= p.threshold) << 1 |
           (unsigned)(w[2] >= p.threshold) << 2 | (unsigned)(w[3] >= p.threshold) << 3;
}

// An attention (batch, head)'s: its sample and (global head) T, so that element (query i, key
// j) is e = (hT + i) T + j
struct head_at {
    uint64_t sample, hT;
};
DROP_HD head_at at(const params &p, int b, int h, int T)
{
    return {p.sample0 + (uint64_t)b, ((uint64_t)p.head0 + (uint64_t)h) * (uint64_t)T};
}
DROP_HD uint64_t element(const head_at &x, int i, int j, int T)
{
    return (x.hT + (uint64_t)i) * (uint64_t)T + (uint64_t)j;
}

// ---------------------------------------------------------------- hidden dropout
struct hidden_args {
    float *out;
    const float *inp;
    params d;
    int N, C, T, row0, C_total, col0;
};

#ifdef __CUDACC__
using vec4 = float4;
#else
struct alignas(16) vec4 {
    float x, y, z, w;
};
#endif

// Philox blocks a row of C elements can touch
DROP_HD long blocks_per_row(int C) { return (C + 6) / 4; }

// The sample and the element index of local row n's first element
DROP_HD void row_start(const hidden_args &a, long n, uint64_t *sample, uint64_t *e0)
{
    long g = a.row0 + n;
    *sample = a.d.sample0 + (uint64_t)(g / a.T);
    *e0 = (uint64_t)(g % a.T) * (uint64_t)a.C_total + (uint64_t)a.col0;
}

DROP_HD float kept(float x, uint32_t word, const params &p)
{
    return word >= p.threshold ? x * p.scale : 0.0f;
}

DROP_HD void hidden_vec4(const hidden_args &a, size_t v)
{
    size_t per_row = (size_t)a.C / 4;
    long n = (long)(v / per_row);
    uint64_t sample, e0;
    row_start(a, n, &sample, &e0);
    uint32_t w[4];
    tr_dropout_words(a.d.seed, sample, a.d.site, e0 + 4 * (v % per_row), w);
    vec4 x = reinterpret_cast<const vec4 *>(a.inp)[v];
    x.x = kept(x.x, w[0], a.d), x.y = kept(x.y, w[1], a.d);
    x.z = kept(x.z, w[2], a.d), x.w = kept(x.w, w[3], a.d);
    reinterpret_cast<vec4 *>(a.out)[v] = x;
}

DROP_HD void hidden_block(const hidden_args &a, long n, long k)
{
    uint64_t sample, e0;
    row_start(a, n, &sample, &e0);
    uint64_t first = (e0 & ~(uint64_t)3) + 4 * (uint64_t)k, end = e0 + (uint64_t)a.C;
    if (first >= end)
        return;
    uint32_t w[4];
    tr_dropout_words(a.d.seed, sample, a.d.site, first, w);
    size_t row = (size_t)n * (size_t)a.C;
    for (unsigned q = 0; q < 4; q++) {
        uint64_t e = first + q;
        if (e >= e0 && e < end) {
            size_t i = row + (size_t)(e - e0);
            a.out[i] = kept(a.inp[i], word(w, q), a.d);
        }
    }
}

// hidden_vec4 fits: every row starts a block, rows hold whole blocks, 16-byte pointers
DROP_HD bool vec4_fits(const hidden_args &a)
{
    return a.C_total % 4 == 0 && a.col0 % 4 == 0 && a.C % 4 == 0 &&
           (((uintptr_t)a.out | (uintptr_t)a.inp) & 15) == 0;
}

} // namespace drop

#endif
