/* Host "device" memory: 64-byte aligned, zero-filled; copies split over the team when large. */
#include "kernels/cpu/cpu_ops.h"

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "core/core.h"

/* Every buffer carries its size in a 64-byte header (the data stays 64-byte aligned), so the
 * bytes in use and their peak are counted exactly. */
#define HEADER 64
static _Atomic size_t in_use, peak_in_use;

void *cpu_alloc(size_t bytes)
{
    if (bytes > SIZE_MAX - HEADER) {
        tr_fail(TR_ERR_NOMEM, "cannot allocate %zu bytes: size overflows", bytes);
        return NULL;
    }
    char *p = tr_alloc(bytes + HEADER, "a kernel buffer");
    if (!p)
        return NULL;
    memcpy(p, &bytes, sizeof bytes);
    size_t now = atomic_fetch_add(&in_use, bytes) + bytes, old = atomic_load(&peak_in_use);
    while (now > old && !atomic_compare_exchange_weak(&peak_in_use, &old, now)) {
    }
    return p + HEADER;
}

void cpu_free(void *p)
{
    if (!p)
        return;
    char *base = (char *)p - HEADER;
    size_t bytes;
    memcpy(&bytes, base, sizeof bytes);
    atomic_fetch_sub(&in_use, bytes);
    tr_free(base);
}

size_t cpu_bytes_in_use(size_t *peak)
{
    if (peak)
        *peak = atomic_load(&peak_in_use);
    return atomic_load(&in_use);
}

/* Bytes per piece when a copy or fill is split over threads. */
#define PIECE ((size_t)1 << 20)

typedef struct {
    char *dst;
    const char *src; /* NULL: fill with zeros */
} bytes_args;

static void copy_range(void *ctx, size_t lo, size_t hi)
{
    const bytes_args *a = ctx;
    if (a->src)
        memcpy(a->dst + lo, a->src + lo, hi - lo);
    else
        memset(a->dst + lo, 0, hi - lo);
}

/* memcpy (src != NULL) or memset 0 in PIECE-sized pieces over the team (no overlap). */
static void copy_bytes(void *dst, const void *src, size_t bytes)
{
    if (bytes == 0 || dst == src)
        return;
    bytes_args a = {dst, src};
    cpu_for_ranges(bytes >= 2 * PIECE, bytes, PIECE, copy_range, &a);
}

void cpu_to_device(tr_stream s, void *dst, const void *host_src, size_t bytes)
{
    (void)s;
    copy_bytes(dst, host_src, bytes);
}

void cpu_to_host(tr_stream s, void *host_dst, const void *src, size_t bytes)
{
    (void)s;
    copy_bytes(host_dst, src, bytes);
}

void cpu_copy(tr_stream s, void *dst, const void *src, size_t bytes)
{
    (void)s;
    copy_bytes(dst, src, bytes);
}

void cpu_zero(tr_stream s, void *dst, size_t bytes)
{
    (void)s;
    copy_bytes(dst, NULL, bytes);
}

void cpu_synchronize(tr_stream s) { (void)s; }
