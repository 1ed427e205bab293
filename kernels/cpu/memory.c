/* Host "device" memory: 64-byte aligned, zero-filled; copies split over the team when large. */
#include "kernels/cpu/cpu_ops.h"

#include "core/core.h"

#include <omp.h>

void *tr_cpu_alloc(size_t bytes) { return tr_alloc(bytes, "a kernel buffer"); }

void tr_cpu_free(void *p) { tr_free(p); }

/* Bytes per piece when a copy or fill is split over threads. */
#define PIECE ((size_t)1 << 20)

/* memcpy in PIECE-sized pieces over the team (dst and src must not overlap). */
static void copy_bytes(void *dst, const void *src, size_t bytes)
{
    if (bytes == 0 || dst == src)
        return;
    if (bytes < 2 * PIECE) {
        memcpy(dst, src, bytes);
        return;
    }
    size_t pieces = (bytes + PIECE - 1) / PIECE;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < pieces; i++) {
        size_t off = i * PIECE, len = bytes - off < PIECE ? bytes - off : PIECE;
        memcpy((char *)dst + off, (const char *)src + off, len);
    }
}

void tr_cpu_to_device(tr_stream s, void *dst, const void *host_src, size_t bytes)
{
    (void)s;
    copy_bytes(dst, host_src, bytes);
}

void tr_cpu_to_host(tr_stream s, void *host_dst, const void *src, size_t bytes)
{
    (void)s;
    copy_bytes(host_dst, src, bytes);
}

void tr_cpu_copy(tr_stream s, void *dst, const void *src, size_t bytes)
{
    (void)s;
    copy_bytes(dst, src, bytes);
}

void tr_cpu_zero(tr_stream s, void *dst, size_t bytes)
{
    (void)s;
    if (bytes < 2 * PIECE) {
        if (bytes)
            memset(dst, 0, bytes);
        return;
    }
    size_t pieces = (bytes + PIECE - 1) / PIECE;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < pieces; i++) {
        size_t off = i * PIECE, len = bytes - off < PIECE ? bytes - off : PIECE;
        memset((char *)dst + off, 0, len);
    }
}

void tr_cpu_synchronize(tr_stream s) { (void)s; }
