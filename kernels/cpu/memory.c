/* Host "device" memory: 64-byte aligned, zero-filled; copies split over the team when large. */
#include "kernels/cpu/cpu_ops.h"

#include "core/core.h"

void *cpu_alloc(size_t bytes) { return tr_alloc(bytes, "a kernel buffer"); }

void cpu_free(void *p) { tr_free(p); }

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
