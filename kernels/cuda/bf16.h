/* fp32 <-> bf16 (the upper 16 bits of an IEEE binary32), for host C and CUDA device code.
 *
 *  bf16_from_f32: round to nearest, ties to even, on the 16 dropped bits. Finite values
 *    at or past the halfway point above the largest bf16 (0x7F7F) become infinity, as
 *    IEEE rounding says; infinities and zeros keep their sign; subnormals round like any
 *    other value (no flush). A NaN stays a NaN: sign and the top 7 payload bits are kept and
 *    the quiet bit is set (so a signalling NaN whose payload lies only in the dropped bits
 *    does not turn into infinity).
 *  bf16_to_f32: exact (appends 16 zero bits). */
#ifndef TR_KERNELS_CUDA_BF16_H
#define TR_KERNELS_CUDA_BF16_H

#include <stdint.h>

#ifdef __CUDACC__
#define BF16_FN static inline __host__ __device__
#else
#include <string.h>
#define BF16_FN static inline
#endif

BF16_FN uint32_t f32_bits(float f)
{
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
#endif
}

BF16_FN float f32_from_bits(uint32_t u)
{
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}

BF16_FN uint16_t bf16_from_f32(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) /* NaN: keep sign and top payload, make it quiet */
        return (uint16_t)((u >> 16) | 0x0040u);
    /* add just under half an ulp of bf16, plus the lowest kept bit (ties go to even); a carry
     * out of the mantissa moves to the next binade, and out of the largest finite to inf */
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

BF16_FN float bf16_to_f32(uint16_t h) { return f32_from_bits((uint32_t)h << 16); }

#endif
