/* The rendezvous store's key table: a fixed array of buckets chained by key, hashed with
 * SipHash-2-4 under a seed drawn per table (store_seed_draw), capped in bytes (keys, values and
 * STORE_ENTRY_OVERHEAD per entry, so many keys with empty values fill it too). Private to
 * comm/store/; the contract is in store_internal.h. */
#include "comm/store/store_internal.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

static uint64_t rotl(uint64_t x, int b)
{
    return (x << b) | (x >> (64 - b));
}

#define SIPROUND                                                                                \
    do {                                                                                        \
        v0 += v1;                                                                               \
        v1 = rotl(v1, 13);                                                                      \
        v1 ^= v0;                                                                               \
        v0 = rotl(v0, 32);                                                                      \
        v2 += v3;                                                                               \
        v3 = rotl(v3, 16);                                                                      \
        v3 ^= v2;                                                                               \
        v0 += v3;                                                                               \
        v3 = rotl(v3, 21);                                                                      \
        v3 ^= v0;                                                                               \
        v2 += v1;                                                                               \
        v1 = rotl(v1, 17);                                                                      \
        v1 ^= v2;                                                                               \
        v2 = rotl(v2, 32);                                                                      \
    } while (0)

/* SipHash-2-4 (Aumasson and Bernstein), 64-bit output; key[0] and key[1] are the key's bytes
 * 0..7 and 8..15 read little-endian. */
uint64_t store_siphash(const uint64_t key[2], const void *data, size_t len)
{
    const uint8_t *p = data;
    uint64_t v0 = key[0] ^ 0x736f6d6570736575ull, v1 = key[1] ^ 0x646f72616e646f6dull;
    uint64_t v2 = key[0] ^ 0x6c7967656e657261ull, v3 = key[1] ^ 0x7465646279746573ull;
    size_t whole = len - len % 8;
    for (size_t i = 0; i < whole; i += 8) {
        uint64_t m = 0;
        for (int b = 0; b < 8; b++)
            m |= (uint64_t)p[i + (size_t)b] << (8 * b);
        v3 ^= m;
        SIPROUND;
        SIPROUND;
        v0 ^= m;
    }
    uint64_t last = (uint64_t)len << 56;
    for (size_t b = 0; b < len % 8; b++)
        last |= (uint64_t)p[whole + b] << (8 * b);
    v3 ^= last;
    SIPROUND;
    SIPROUND;
    v0 ^= last;
    v2 ^= 0xff;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

int store_seed_draw(uint64_t seed[2], int use_getrandom)
{
    if (use_getrandom && getrandom(seed, 2 * sizeof *seed, GRND_NONBLOCK) ==
                             (ssize_t)(2 * sizeof *seed))
        return 1;
    static atomic_uint_fast64_t drawn;
    struct timespec real, mono;
    clock_gettime(CLOCK_REALTIME, &real);
    clock_gettime(CLOCK_MONOTONIC, &mono);
    uint64_t stir[6] = {(uint64_t)real.tv_sec, (uint64_t)real.tv_nsec, (uint64_t)mono.tv_nsec,
                        (uint64_t)getpid(), (uint64_t)(uintptr_t)&real,
                        (uint64_t)atomic_fetch_add(&drawn, 1)};
    const uint64_t k0[2] = {0x74726964656e7430ull, 0}, k1[2] = {0x74726964656e7431ull, 0};
    seed[0] = store_siphash(k0, stir, sizeof stir);
    seed[1] = store_siphash(k1, stir, sizeof stir);
    return 0;
}

void store_table_init(store_table *t, size_t max_bytes)
{
    memset(t, 0, sizeof *t);
    t->max_bytes = max_bytes;
    store_seed_draw(t->seed, 1);
}

void store_table_free(store_table *t)
{
    for (size_t b = 0; b < STORE_NBUCKETS; b++)
        for (store_entry *e = t->buckets[b], *n; e; e = n) {
            n = e->next;
            free(e->key);
            free(e->value);
            free(e);
        }
    memset(t->buckets, 0, sizeof t->buckets);
    t->total_bytes = 0;
}

size_t store_table_bucket(const store_table *t, const char *key)
{
    return (size_t)(store_siphash(t->seed, key, strlen(key)) % STORE_NBUCKETS);
}

store_entry *store_table_find(const store_table *t, const char *key)
{
    for (store_entry *e = t->buckets[store_table_bucket(t, key)]; e; e = e->next)
        if (!strcmp(e->key, key))
            return e;
    return NULL;
}

store_entry *store_table_put(store_table *t, const char *key, const uint8_t *val, size_t len,
                             const char **why)
{
    store_entry *e = store_table_find(t, key);
    size_t old = e ? e->len : 0;
    /* a new entry costs its key and bookkeeping too: many keys with empty values fill it */
    size_t add = e ? len : len + strlen(key) + 1 + STORE_ENTRY_OVERHEAD;
    if (t->total_bytes - old + add > t->max_bytes) {
        *why = "store is full: its keys and values reached its memory limit";
        return NULL;
    }
    uint8_t *copy = malloc(len ? len : 1);
    if (!copy) {
        *why = "out of memory";
        return NULL;
    }
    if (len)
        memcpy(copy, val, len);
    if (!e) {
        e = calloc(1, sizeof *e);
        char *k = strdup(key);
        if (!e || !k) {
            free(e);
            free(k);
            free(copy);
            *why = "out of memory";
            return NULL;
        }
        e->key = k;
        size_t b = store_table_bucket(t, key);
        e->next = t->buckets[b];
        t->buckets[b] = e;
    }
    free(e->value);
    e->value = copy;
    e->len = len;
    t->total_bytes = t->total_bytes - old + add;
    return e;
}
