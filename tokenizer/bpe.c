/* Byte-pair merging of one pre-token, with a per-encoder cache of recent pre-tokens.
 *
 * A pre-token of n bytes starts as n single-byte tokens; the adjacent pair of lowest merge rank
 * (the leftmost of equals) is merged until no pair has a merge. Short pre-tokens scan the
 * pairs (n <= SCAN_MAX, O(n^2) but tiny; SP_SCAN_MAX for a SentencePiece-style model, whose
 * pre-token is a whole text); long ones use a heap of (rank, position) over a
 * linked list of symbols with stale entries skipped (O(n log n)), which picks the same pair
 * every time. Cache: pre-tokens of at most CACHE_KEY bytes -> their ids, in an
 * open-addressing table emptied whole when full (results never depend on it). */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "tokenizer/tok_internal.h"

#define SCAN_MAX 128
#define SP_SCAN_MAX 16 /* a SentencePiece-style pre-token is often a whole text */
#define CACHE_KEY 64
#define CACHE_SLOTS (1u << 16)
#define CACHE_ENTRIES (CACHE_SLOTS / 2)

typedef struct {
    uint64_t hash; /* 0 = empty */
    uint32_t key_off, val_off;
    uint16_t key_len, n_val;
} cache_slot;

typedef struct {
    uint32_t rank, pos;
    int32_t left, right;
} heap_item;

struct bpe_cache {
    cache_slot *slot;
    uint32_t n;
    char *keys;    /* CACHE_ENTRIES * CACHE_KEY bytes */
    int32_t *vals; /* as many ids */
    uint32_t keys_len, vals_len;
    /* merge scratch, grown to the longest pre-token seen */
    int32_t *sym, *merged, *prev, *next;
    uint32_t *rank;
    heap_item *heap;
    size_t cap, heap_cap;
};

int ids_reserve(int32_t **ids, size_t n, size_t *cap, size_t more)
{
    if (n + more <= *cap)
        return TR_OK;
    size_t c = *cap ? *cap : 1024;
    while (c < n + more)
        c *= 2;
    int32_t *p = c <= SIZE_MAX / sizeof *p ? realloc(*ids, c * sizeof *p) : NULL;
    if (!p)
        return tr_fail(TR_ERR_NOMEM, "out of memory for %zu token ids", n + more);
    *ids = p;
    *cap = c;
    return TR_OK;
}

int bpe_cache_create(bpe_cache **out)
{
    bpe_cache *c = calloc(1, sizeof *c);
    if (c) {
        c->slot = calloc(CACHE_SLOTS, sizeof *c->slot);
        c->keys = malloc((size_t)CACHE_ENTRIES * CACHE_KEY);
        c->vals = malloc((size_t)CACHE_ENTRIES * CACHE_KEY * sizeof *c->vals);
    }
    if (!c || !c->slot || !c->keys || !c->vals) {
        bpe_cache_free(c);
        return tr_fail(TR_ERR_NOMEM, "out of memory for the merge cache");
    }
    *out = c;
    return TR_OK;
}

void bpe_cache_free(bpe_cache *c)
{
    if (!c)
        return;
    free(c->slot);
    free(c->keys);
    free(c->vals);
    free(c->sym);
    free(c->merged);
    free(c->prev);
    free(c->next);
    free(c->rank);
    free(c->heap);
    free(c);
}

static int scratch(bpe_cache *c, size_t n)
{
    if (n <= c->cap)
        return TR_OK;
    size_t cap = n < 256 ? 256 : n;
    if (!tok_grow(&c->sym, cap, sizeof *c->sym) || !tok_grow(&c->merged, cap, sizeof *c->merged) ||
        !tok_grow(&c->prev, cap, sizeof *c->prev) || !tok_grow(&c->next, cap, sizeof *c->next) ||
        !tok_grow(&c->rank, cap, sizeof *c->rank))
        return tr_fail(TR_ERR_NOMEM, "out of memory merging a pre-token of %zu bytes", n);
    c->cap = cap;
    return TR_OK;
}

/* Short pre-token: scan for the best pair each round. Leaves the ids in sym[0 .. *m). */
static void merge_scan(const tr_tokenizer *t, bpe_cache *c, size_t n, size_t *m_out)
{
    int32_t *sym = c->sym, *mer = c->merged;
    uint32_t *rank = c->rank;
    size_t m = n;
    for (size_t i = 0; i + 1 < m; i++)
        rank[i] = mmap_get(&t->merges, sym[i], sym[i + 1], &mer[i]);
    while (m > 1) {
        uint32_t best = TOK_NO_RANK;
        size_t bi = 0;
        for (size_t i = 0; i + 1 < m; i++)
            if (rank[i] < best) {
                best = rank[i];
                bi = i;
            }
        if (best == TOK_NO_RANK)
            break;
        sym[bi] = mer[bi];
        m--;
        memmove(sym + bi + 1, sym + bi + 2, (m - bi - 1) * sizeof *sym);
        if (bi + 1 < m) {
            memmove(rank + bi + 1, rank + bi + 2, (m - bi - 2) * sizeof *rank);
            memmove(mer + bi + 1, mer + bi + 2, (m - bi - 2) * sizeof *mer);
        }
        if (bi > 0)
            rank[bi - 1] = mmap_get(&t->merges, sym[bi - 1], sym[bi], &mer[bi - 1]);
        if (bi + 1 < m)
            rank[bi] = mmap_get(&t->merges, sym[bi], sym[bi + 1], &mer[bi]);
    }
    *m_out = m;
}

static int heap_less(const heap_item *a, const heap_item *b)
{
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static int heap_push(bpe_cache *c, size_t *len, heap_item it)
{
    if (*len == c->heap_cap) {
        size_t cap = c->heap_cap ? 2 * c->heap_cap : 1024;
        heap_item *h = realloc(c->heap, cap * sizeof *h);
        if (!h)
            return tr_fail(TR_ERR_NOMEM, "out of memory merging a long pre-token");
        c->heap = h;
        c->heap_cap = cap;
    }
    heap_item *h = c->heap;
    size_t i = (*len)++;
    while (i > 0 && heap_less(&it, &h[(i - 1) / 2])) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = it;
    return TR_OK;
}

static heap_item heap_pop(bpe_cache *c, size_t *len)
{
    heap_item *h = c->heap, top = h[0], last = h[--*len];
    size_t i = 0, n = *len;
    for (;;) {
        size_t l = 2 * i + 1, best = i;
        const heap_item *bp = &last;
        if (l < n && heap_less(&h[l], bp))
            best = l, bp = &h[l];
        if (l + 1 < n && heap_less(&h[l + 1], bp))
            best = l + 1;
        if (best == i)
            break;
        h[i] = h[best];
        i = best;
    }
    if (n)
        h[i] = last;
    return top;
}

/* The pair (p, next[p]) as a heap entry, if it has a merge. */
static int push_pair(const tr_tokenizer *t, bpe_cache *c, size_t *len, int32_t p)
{
    if (p < 0 || c->next[p] < 0)
        return TR_OK;
    int32_t q = c->next[p], merged;
    uint32_t r = mmap_get(&t->merges, c->sym[p], c->sym[q], &merged);
    if (r == TOK_NO_RANK)
        return TR_OK;
    return heap_push(c, len, (heap_item){r, (uint32_t)p, c->sym[p], c->sym[q]});
}

/* Long pre-token: the heap; leaves the ids in sym[0 .. *m). */
static int merge_heap(const tr_tokenizer *t, bpe_cache *c, size_t n, size_t *m_out)
{
    int32_t *sym = c->sym, *prev = c->prev, *next = c->next;
    size_t len = 0;
    int rc = TR_OK;
    for (size_t i = 0; i < n; i++) {
        prev[i] = (int32_t)i - 1;
        next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    for (size_t i = 0; i + 1 < n && !rc; i++)
        rc = push_pair(t, c, &len, (int32_t)i);
    while (len && !rc) {
        heap_item it = heap_pop(c, &len);
        int32_t p = (int32_t)it.pos, q = next[p], merged = 0;
        if (prev[p] == -2 || q < 0 || sym[p] != it.left || sym[q] != it.right)
            continue; /* stale: p was merged away, or its pair changed */
        (void)mmap_get(&t->merges, sym[p], sym[q], &merged);
        sym[p] = merged;
        next[p] = next[q];
        if (next[q] >= 0)
            prev[next[q]] = p;
        prev[q] = -2; /* q is gone */
        rc = push_pair(t, c, &len, prev[p]);
        if (!rc)
            rc = push_pair(t, c, &len, p);
    }
    size_t m = 0;
    for (int32_t p = 0; p >= 0 && !rc; p = next[p])
        sym[m++] = sym[p];
    *m_out = m;
    return rc;
}

static cache_slot *cache_find(bpe_cache *c, const char *w, size_t n, uint64_t h)
{
    for (uint32_t i = (uint32_t)h & (CACHE_SLOTS - 1);; i = (i + 1) & (CACHE_SLOTS - 1)) {
        cache_slot *s = &c->slot[i];
        if (!s->hash || (s->hash == h && s->key_len == n && !memcmp(c->keys + s->key_off, w, n)))
            return s;
    }
}

static void cache_put(bpe_cache *c, const char *w, size_t n, uint64_t h, const int32_t *ids,
                      size_t m)
{
    /* full (a SentencePiece-style pre-token may hold 3 ids a byte): start again */
    if (c->n == CACHE_ENTRIES || c->vals_len + m > (uint32_t)CACHE_ENTRIES * CACHE_KEY) {
        memset(c->slot, 0, CACHE_SLOTS * sizeof *c->slot);
        c->n = c->keys_len = c->vals_len = 0;
    }
    cache_slot *s = cache_find(c, w, n, h);
    memcpy(c->keys + c->keys_len, w, n);
    memcpy(c->vals + c->vals_len, ids, m * sizeof *ids);
    *s = (cache_slot){h, c->keys_len, c->vals_len, (uint16_t)n, (uint16_t)m};
    c->keys_len += (uint32_t)n;
    c->vals_len += (uint32_t)m;
    c->n++;
}

/* A SentencePiece-style pre-token's symbols into sym (room for 3n): each character's token;
 * for one without, its bytes' <0xHH> tokens (byte_fallback, when all exist; a ' ' is U+2581's
 * three), else unk_id, consecutive ones fused with fuse_unk, else nothing. As tokenizers does,
 * an unknown character's unk_id waits for the next character with a token (or the end), so
 * fallback bytes between come first. Returns the count. */
static size_t sp_symbols(const tr_tokenizer *t, const char *w, size_t n, int32_t *sym)
{
    size_t m = 0;
    int unk_waiting = 0;
    for (size_t i = 0, len; i < n; i += len) {
        unsigned char c = (unsigned char)w[i];
        len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4; /* the text is valid UTF-8 */
        len = len <= n - i ? len : n - i;
        int32_t id = bmap_get(&t->vocab, t->pool, w + i, len);
        if (id >= 0) {
            if (unk_waiting)
                sym[m++] = t->unk_id;
            unk_waiting = 0;
            sym[m++] = id;
            continue;
        }
        const unsigned char *b = c == ' ' ? (const unsigned char *)SP_SPACE
                                          : (const unsigned char *)w + i;
        size_t nb = c == ' ' ? 3 : len, k = 0;
        while (t->byte_fallback && k < nb && t->fallback_id[b[k]] >= 0)
            k++;
        if (t->byte_fallback && k == nb) {
            for (k = 0; k < nb; k++)
                sym[m++] = t->fallback_id[b[k]];
        } else if (t->unk_id >= 0) {
            if (unk_waiting && !t->fuse_unk)
                sym[m++] = t->unk_id;
            unk_waiting = 1;
        }
    }
    if (unk_waiting)
        sym[m++] = t->unk_id;
    return m;
}

int bpe_word(const tr_tokenizer *t, bpe_cache *c, const char *w, size_t n, int32_t **ids,
             size_t *n_ids, size_t *cap)
{
    int rc = ids_reserve(ids, *n_ids, cap, t->sp ? 3 * n : n);
    if (rc)
        return rc;
    if (n == 1 && !t->sp) {
        (*ids)[(*n_ids)++] = t->byte_id[(unsigned char)w[0]];
        return TR_OK;
    }
    if (t->ignore_merges) {
        int32_t id = bmap_get(&t->vocab, t->pool, w, n);
        if (id >= 0) {
            (*ids)[(*n_ids)++] = id;
            return TR_OK;
        }
    }
    uint64_t h = 0;
    if (n <= CACHE_KEY) {
        h = tok_hash(w, n) | 1;
        cache_slot *s = cache_find(c, w, n, h);
        if (s->hash) {
            memcpy(*ids + *n_ids, c->vals + s->val_off, s->n_val * sizeof **ids);
            *n_ids += s->n_val;
            return TR_OK;
        }
    }
    if ((rc = scratch(c, t->sp ? 3 * n : n)))
        return rc;
    size_t s = n, m;
    if (t->sp)
        s = sp_symbols(t, w, n, c->sym);
    else
        for (size_t i = 0; i < n; i++)
            c->sym[i] = t->byte_id[(unsigned char)w[i]];
    if (s <= (t->sp ? SP_SCAN_MAX : SCAN_MAX))
        merge_scan(t, c, s, &m);
    else if ((rc = merge_heap(t, c, s, &m)))
        return rc;
    memcpy(*ids + *n_ids, c->sym, m * sizeof **ids);
    *n_ids += m;
    if (n <= CACHE_KEY)
        cache_put(c, w, n, h, c->sym, m);
    return TR_OK;
}
