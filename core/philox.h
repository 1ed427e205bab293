/* core/philox.h — Philox 4x32-10 as one inline function for host C and CUDA device code, and
 * the dropout decision built on it (the same bits on every backend and every layout).
 *
 * Contract:
 *  - tr_philox_block() is Philox 4x32-10 (Salmon et al. 2011); core's tr_philox4x32_10() is it.
 *  - Dropout: element `e` of sample `sample` at site `site` is kept iff
 *      word (e & 3) of Philox(counter = (e >> 2, sample, site), key = seed ^ "Drop")
 *    is >= tr_dropout_threshold(p); a kept element is scaled by 1 / (1 - p) (inverted dropout).
 *    `e` is the element's index within its sample in global coordinates (hidden dropout:
 *    pos * hidden + feature; attention dropout: (head * T + query) * T + key), `sample` the
 *    global sample index (the micro-batch's first sample + row; the low 32 bits), `site`
 *    tr_dropout_site(layer, kind) with the global layer. Four consecutive elements share one
 *    block, so a thread that handles four aligned elements runs Philox once.
 *  - No sharding, micro-batching or backend enters the decision: every layout drops the same
 *    elements. */
#ifndef TR_PHILOX_H
#define TR_PHILOX_H

#include <stdint.h>

#ifdef __CUDACC__
#define TR_PHILOX_FN __host__ __device__ __forceinline__
#else
#define TR_PHILOX_FN static inline
#endif

/* One block of four words from counter (c0..c3) and key (k0, k1). */
TR_PHILOX_FN void tr_philox_block(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3,
                                  uint32_t k0, uint32_t k1, uint32_t out[4])
{
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0;
        uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n1 = (uint32_t)p1;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        uint32_t n3 = (uint32_t)p0;
        c0 = n0, c1 = n1, c2 = n2, c3 = n3;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

/* Where a dropout is applied; one stream per (global layer, kind). The embedding's dropout
 * is layer 0's TR_DROPOUT_EMBEDDING. */
enum {
    TR_DROPOUT_EMBEDDING = 0, /* after the embeddings (+ positions), before layer 0 */
    TR_DROPOUT_ATTN_PROBS = 1, /* the attention probabilities (attention_dropout) */
    TR_DROPOUT_ATTN_OUT = 2,  /* the attention block's output before its residual add */
    TR_DROPOUT_MLP_OUT = 3,   /* the MLP's output before its residual add */
    TR_DROPOUT_KINDS = 16
};

TR_PHILOX_FN uint32_t tr_dropout_site(int layer, int kind)
{
    return (uint32_t)layer * TR_DROPOUT_KINDS + (uint32_t)kind;
}

/* p in [0, 1) -> the 32-bit threshold: an element whose word is below it is dropped. */
TR_PHILOX_FN uint32_t tr_dropout_threshold(double p)
{
    return p <= 0.0 ? 0u : (uint32_t)(p * 4294967296.0);
}

/* The four words deciding elements (e & ~3) .. (e | 3) of `sample` at `site`. */
TR_PHILOX_FN void tr_dropout_words(uint64_t seed, uint64_t sample, uint32_t site, uint64_t e,
                                   uint32_t out[4])
{
    uint64_t block = e >> 2;
    tr_philox_block((uint32_t)block, (uint32_t)(block >> 32), (uint32_t)sample, site,
                    (uint32_t)seed ^ 0x44726f70u, (uint32_t)(seed >> 32), out);
}

/* 1 when element e is kept. */
TR_PHILOX_FN int tr_dropout_keep(uint64_t seed, uint64_t sample, uint32_t site, uint64_t e,
                                 uint32_t threshold)
{
    uint32_t w[4];
    tr_dropout_words(seed, sample, site, e, w);
    return w[e & 3] >= threshold;
}

#endif
