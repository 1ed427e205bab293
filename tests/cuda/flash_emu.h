/* tests/cuda: kernels/cuda/flash_mma.cuh's attention kernels run on the host (flash_emu.cc,
 * through warp_emu.hpp). Same shapes and layouts as kernels.h's attention_gqa_forward and
 * _backward (qkv (B, T, NG, R+2, HS), out (B, T, NH, HS), lse (B, NH, T)); the backward takes
 * what flash.cu's fa_prepare makes on the GPU: Drow (B, NH, T) = rowsum(dout * out) and
 * starts (B, T), the first position of each row's segment (zeros without segments).
 * emu_flash_forward16 writes the output in bf16 storage (out16, kernels.h's
 * attention_gqa_forward16); the *_qkv16 pair reads qkv in bf16 storage (qkv16, kernels.h's
 * attention_forward_qkv16 / _backward_qkv16), the backward reading dout16 and writing dqkv16
 * (bf16). Return 1, or 0 (nothing done) for a head size the kernels are not built for (they
 * take 16, 32, 64, 128). */
#ifndef TR_TESTS_CUDA_FLASH_EMU_H
#define TR_TESTS_CUDA_FLASH_EMU_H

#include <stddef.h>
#include <stdint.h>

/* dK dV's query rows a step at head size 64: 64 as TRIDENT_CUDA_ATTENTION_KV=64 takes them, 0
 * (the default) bq_for(64) */
void emu_flash_kv_rows(int rows);
/* 1: the backward as the one fused kernel (TRIDENT_CUDA_ATTENTION_BWD=fused), dQ's sums through
 * a scratch of flags that must be zero again after it; 0 (the default): dK dV, then dQ */
void emu_flash_fused(int on);
int emu_flash_forward(float *out, float *lse, const float *qkv, const float *alibi, int B,
                      int T, int NH, int NG, int HS, const int32_t *segments);
int emu_flash_forward16(uint16_t *out16, float *lse, const float *qkv, const float *alibi,
                        int B, int T, int NH, int NG, int HS, const int32_t *segments);
int emu_flash_backward(float *dqkv, const float *Drow, const int32_t *starts, const float *dout,
                       const float *qkv, const float *lse, const float *alibi, int B, int T,
                       int NH, int NG, int HS);
int emu_flash_forward_qkv16(uint16_t *out16, float *lse, const uint16_t *qkv16,
                            const float *alibi, int B, int T, int NH, int NG, int HS,
                            const int32_t *segments);
int emu_flash_backward_qkv16(uint16_t *dqkv16, const float *Drow, const int32_t *starts,
                             const uint16_t *dout16, const uint16_t *qkv16, const float *lse,
                             const float *alibi, int B, int T, int NH, int NG, int HS);

/* Attention dropout (kernels.h's attention_gqa_dropout_forward / _backward; its tr_dropout's
 * fields): the kernels' DROP variants, fp32 storage (the backward always as its two kernels,
 * dK dV's rows a step as emu_flash_kv_rows says). */
typedef struct emu_drop {
    uint64_t seed, first_sample;
    uint32_t site, threshold;
    float scale;
    int head0;
} emu_drop;
int emu_flash_dropout_forward(float *out, float *lse, const float *qkv, const float *alibi,
                              int B, int T, int NH, int NG, int HS, const int32_t *segments,
                              emu_drop d);
int emu_flash_dropout_backward(float *dqkv, const float *Drow, const int32_t *starts,
                               const float *dout, const float *qkv, const float *lse,
                               const float *alibi, int B, int T, int NH, int NG, int HS,
                               emu_drop d);
/* tests/cuda/test_flash_dropout.c: those kernels' checks (test_flash_emulated --dropout); 0
 * when all agree */
int flash_dropout_checks(void);
/* test_flash_emulated.c's inputs: n floats uniform in [lo, hi) (xorshift, a fixed seed) */
float *random_floats(size_t n, float lo, float hi);

#endif
