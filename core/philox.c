/* Philox 4x32-10 counter-based RNG and the initialisation/shuffle streams built on it. */
#include "core.h"
#include "philox.h"

#include <math.h>


void tr_philox4x32_10(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4])
{
    tr_philox_block(counter[0], counter[1], counter[2], counter[3], key[0], key[1], out);
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
