/* Philox 4x32-10 counter-based RNG and the initialisation/shuffle streams built on it. */
#include "core.h"

#include <math.h>

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

void tr_philox4x32_10(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4])
{
    uint32_t c0 = counter[0], c1 = counter[1], c2 = counter[2], c3 = counter[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n1 = (uint32_t)p1;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        uint32_t n3 = (uint32_t)p0;
        c0 = n0, c1 = n1, c2 = n2, c3 = n3;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

uint64_t tr_hash_name(const char *name)
{
    uint64_t h = 1469598103934665603ull;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        h ^= *p;
        h *= 1099511628211ull;
    }
    return h;
}

/* 32 random bits -> uniform in (0, 1], never 0 so log() is finite. */
static double unit_open(uint32_t x) { return ((double)x + 1.0) / 4294967296.0; }

float tr_init_normal(uint64_t seed, uint64_t name_hash, uint64_t index)
{
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t ctr[4] = {(uint32_t)index, (uint32_t)(index >> 32), (uint32_t)name_hash,
                       (uint32_t)(name_hash >> 32)};
    uint32_t r[4];
    tr_philox4x32_10(ctr, key, r);
    double u1 = unit_open(r[0]), u2 = unit_open(r[1]);
    return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}

double tr_rand_uniform(uint64_t seed, uint64_t stream, uint64_t index)
{
    uint32_t key[2] = {(uint32_t)seed ^ 0x5bd1e995u, (uint32_t)(seed >> 32)};
    uint32_t ctr[4] = {(uint32_t)index, (uint32_t)(index >> 32), (uint32_t)stream,
                       (uint32_t)(stream >> 32) ^ 0x2545F491u};
    uint32_t r[4];
    tr_philox4x32_10(ctr, key, r);
    uint64_t bits = ((uint64_t)r[0] << 21) ^ r[1];
    return (double)(bits & ((1ull << 53) - 1)) / 9007199254740992.0;
}
