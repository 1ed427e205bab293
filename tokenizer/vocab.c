/* The tokenizer's tables: the byte pool and id -> bytes table, the bytes -> id and
 * (left, right) -> merge maps (open addressing, power-of-two capacity, at most half full),
 * and GPT-2's byte <-> character alphabet. */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "tokenizer/tok_internal.h"

uint64_t tok_hash(const void *p, size_t n)
{
    /* 8 bytes at a time, multiply-xorshift mixing; fine for short keys */
    const unsigned char *s = p;
    uint64_t h = 0x243F6A8885A308D3ULL ^ (n * 0x9E3779B97F4A7C15ULL);
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, s, 8);
        h = (h ^ v) * 0xBF58476D1CE4E5B9ULL;
        h ^= h >> 31;
        s += 8;
        n -= 8;
    }
    uint64_t v = 0;
    memcpy(&v, s, n);
    h = (h ^ v ^ ((uint64_t)n << 56)) * 0x94D049BB133111EBULL;
    return h ^ (h >> 29);
}

int tok_pool_add(tr_tokenizer *t, const void *bytes, size_t n, uint64_t *off)
{
    if (t->pool_len + n + 1 > t->pool_cap) {
        size_t cap = t->pool_cap ? t->pool_cap : 1 << 16;
        while (cap < t->pool_len + n + 1)
            cap *= 2;
        char *p = realloc(t->pool, cap);
        if (!p)
            return tr_fail(TR_ERR_NOMEM, "out of memory for the tokens of %s", t->source);
        t->pool = p;
        t->pool_cap = cap;
    }
    memcpy(t->pool + t->pool_len, bytes, n);
    *off = t->pool_len;
    t->pool_len += n;
    t->pool[t->pool_len] = '\0'; /* keeps the last token a C string too */
    return TR_OK;
}

int tok_ids_reserve(tr_tokenizer *t, int32_t n)
{
    if (n <= t->n_ids)
        return TR_OK;
    if (n > TOK_ID_LIMIT) /* the loaders refuse such ids first, naming the token */
        return tr_fail(TR_ERR_INVALID, "%s: token id %d is too large (ids are below 2^24 = %d)",
                       t->source, (int)n - 1, TOK_ID_LIMIT);
    if (!tok_grow(&t->tok_off, (size_t)n, sizeof *t->tok_off) ||
        !tok_grow(&t->tok_len, (size_t)n, sizeof *t->tok_len))
        return tr_fail(TR_ERR_NOMEM, "out of memory for %d token ids of %s", (int)n, t->source);
    for (int32_t i = t->n_ids; i < n; i++) {
        t->tok_off[i] = 0;
        t->tok_len[i] = UINT32_MAX;
    }
    t->n_ids = n;
    return TR_OK;
}

int tok_set_id(tr_tokenizer *t, int32_t id, uint64_t off, uint32_t len, const char *what)
{
    int rc = tok_ids_reserve(t, id + 1);
    if (rc)
        return rc;
    if (t->tok_len[id] != UINT32_MAX &&
        (t->tok_len[id] != len || memcmp(t->pool + t->tok_off[id], t->pool + off, len)))
        return tr_fail(TR_ERR_INVALID, "%s: id %d is given to two different tokens (%s)",
                       t->source, (int)id, what);
    t->tok_off[id] = off;
    t->tok_len[id] = len;
    return TR_OK;
}

/* ---- bytes -> id ---- */

static uint32_t pow2_above(uint32_t n)
{
    uint32_t c = 16;
    while (c < 2 * n && c < (1u << 31))
        c *= 2;
    return c;
}

int bmap_init(bytes_map *m, uint32_t expected)
{
    memset(m, 0, sizeof *m);
    uint32_t cap = pow2_above(expected);
    m->slot = calloc(cap, sizeof *m->slot);
    m->cap_keys = expected > 16 ? expected : 16;
    m->key_off = malloc(m->cap_keys * sizeof *m->key_off);
    m->key_len = malloc(m->cap_keys * sizeof *m->key_len);
    m->value = malloc(m->cap_keys * sizeof *m->value);
    m->mask = cap - 1;
    if (!m->slot || !m->key_off || !m->key_len || !m->value) {
        bmap_free(m);
        return tr_fail(TR_ERR_NOMEM, "out of memory for a vocabulary of %u tokens", expected);
    }
    return TR_OK;
}

void bmap_free(bytes_map *m)
{
    free(m->slot);
    free(m->key_off);
    free(m->key_len);
    free(m->value);
    memset(m, 0, sizeof *m);
}

static int bmap_grow(bytes_map *m, const char *pool)
{
    uint32_t cap = (m->mask + 1) * 2, ncap = m->cap_keys * 2;
    uint32_t *slot = calloc(cap, sizeof *slot);
    if (!slot || !tok_grow(&m->key_off, ncap, sizeof *m->key_off) ||
        !tok_grow(&m->key_len, ncap, sizeof *m->key_len) ||
        !tok_grow(&m->value, ncap, sizeof *m->value)) {
        free(slot);
        return tr_fail(TR_ERR_NOMEM, "out of memory for a vocabulary of %u tokens", m->n);
    }
    m->cap_keys = ncap;
    m->mask = cap - 1;
    for (uint32_t e = 0; e < m->n; e++) {
        uint32_t i = (uint32_t)tok_hash(pool + m->key_off[e], m->key_len[e]) & m->mask;
        while (slot[i])
            i = (i + 1) & m->mask;
        slot[i] = e + 1;
    }
    free(m->slot);
    m->slot = slot;
    return TR_OK;
}

int32_t bmap_get(const bytes_map *m, const char *pool, const void *key, size_t len)
{
    for (uint32_t i = (uint32_t)tok_hash(key, len) & m->mask;; i = (i + 1) & m->mask) {
        uint32_t e = m->slot[i];
        if (!e)
            return -1;
        e--;
        if (m->key_len[e] == len && !memcmp(pool + m->key_off[e], key, len))
            return m->value[e];
    }
}

int bmap_put(bytes_map *m, const char *pool, uint64_t off, uint32_t len, int32_t value, int *dup)
{
    *dup = 0;
    if (bmap_get(m, pool, pool + off, len) >= 0) {
        *dup = 1;
        return TR_OK;
    }
    if ((m->n + 1) * 2 > m->mask + 1 || m->n == m->cap_keys) {
        int rc = bmap_grow(m, pool);
        if (rc)
            return rc;
    }
    uint32_t i = (uint32_t)tok_hash(pool + off, len) & m->mask;
    while (m->slot[i])
        i = (i + 1) & m->mask;
    m->key_off[m->n] = off;
    m->key_len[m->n] = len;
    m->value[m->n] = value;
    m->slot[i] = ++m->n;
    return TR_OK;
}

/* ---- (left, right) -> (rank, merged) ---- */

int mmap_init(merge_map *m, uint32_t expected)
{
    memset(m, 0, sizeof *m);
    uint32_t cap = pow2_above(expected);
    m->key = malloc(cap * sizeof *m->key);
    m->rank = malloc(cap * sizeof *m->rank);
    m->merged = malloc(cap * sizeof *m->merged);
    if (!m->key || !m->rank || !m->merged) {
        mmap_free(m);
        return tr_fail(TR_ERR_NOMEM, "out of memory for %u merges", expected);
    }
    memset(m->key, 0xff, cap * sizeof *m->key);
    m->mask = cap - 1;
    return TR_OK;
}

void mmap_free(merge_map *m)
{
    free(m->key);
    free(m->rank);
    free(m->merged);
    memset(m, 0, sizeof *m);
}

static void mmap_insert(merge_map *m, uint64_t key, uint32_t rank, int32_t merged)
{
    uint64_t h = key * 0x9E3779B97F4A7C15ULL;
    uint32_t i = (uint32_t)(h >> 40) & m->mask;
    while (m->key[i] != UINT64_MAX && m->key[i] != key)
        i = (i + 1) & m->mask;
    m->n += m->key[i] == UINT64_MAX;
    m->key[i] = key;
    m->rank[i] = rank;
    m->merged[i] = merged;
}

int mmap_put(merge_map *m, int32_t left, int32_t right, uint32_t rank, int32_t merged)
{
    if ((m->n + 1) * 2 > m->mask + 1) {
        merge_map g;
        if ((m->mask + 1) >= (1u << 30))
            return tr_fail(TR_ERR_NOMEM, "too many merges");
        int rc = mmap_init(&g, m->mask + 1);
        if (rc)
            return rc;
        for (uint32_t i = 0; i <= m->mask; i++)
            if (m->key[i] != UINT64_MAX)
                mmap_insert(&g, m->key[i], m->rank[i], m->merged[i]);
        mmap_free(m);
        *m = g;
    }
    mmap_insert(m, (uint64_t)(uint32_t)left << 32 | (uint32_t)right, rank, merged);
    return TR_OK;
}

/* ---- GPT-2's byte alphabet ---- */

uint16_t byte_char[256];
static int16_t char_byte_table[324]; /* code points < 324 cover the whole alphabet */

void byte_map_init(void)
{
    /* printable Latin-1 bytes spell themselves; the others, in byte order, take 256, 257, ... */
    int next = 256;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        byte_char[b] = (uint16_t)(printable ? b : next++);
    }
    for (int c = 0; c < 324; c++)
        char_byte_table[c] = -1;
    for (int b = 0; b < 256; b++)
        char_byte_table[byte_char[b]] = (int16_t)b;
}

int char_byte(uint32_t cp)
{
    return cp < 324 ? char_byte_table[cp] : -1;
}

long unmap_token(const char *s, size_t len, char *out)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, o = 0;
    while (i < len) {
        uint32_t cp;
        if (p[i] < 0x80) {
            cp = p[i++];
        } else if ((p[i] & 0xE0) == 0xC0 && i + 1 < len && (p[i + 1] & 0xC0) == 0x80) {
            cp = (uint32_t)(p[i] & 0x1F) << 6 | (p[i + 1] & 0x3F);
            i += 2;
        } else {
            return -1; /* the alphabet is all below U+0800 */
        }
        int b = char_byte(cp);
        if (b < 0)
            return -1;
        out[o++] = (char)b;
    }
    return (long)o;
}

int tok_finish_bytes(tr_tokenizer *t)
{
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        t->byte_id[b] = bmap_get(&t->vocab, t->pool, &c, 1);
        if (t->byte_id[b] < 0)
            return tr_fail(TR_ERR_INVALID,
                           "%s: the vocabulary has no token for the single byte 0x%02X (a "
                           "byte-level BPE has all 256)",
                           t->source, b);
    }
    return TR_OK;
}
