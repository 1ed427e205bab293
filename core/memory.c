/* Aligned, zero-filled allocation with error messages, and checked size arithmetic. */
#include "core.h"

#include <stdlib.h>
#include <string.h>

void *tr_alloc(size_t bytes, const char *what)
{
    size_t rounded = (bytes + 63) & ~(size_t)63;
    if (rounded < bytes) {
        tr_fail(TR_ERR_NOMEM, "cannot allocate %zu bytes for %s: size overflows", bytes, what);
        return NULL;
    }
    if (rounded == 0)
        rounded = 64;
    void *p = aligned_alloc(64, rounded);
    if (!p) {
        tr_fail(TR_ERR_NOMEM, "out of memory allocating %zu bytes for %s", bytes, what);
        return NULL;
    }
    memset(p, 0, rounded);
    return p;
}

void tr_free(void *p) { free(p); }

int tr_mul_size(size_t a, size_t b, size_t *out)
{
    if (a != 0 && b > SIZE_MAX / a)
        return tr_fail(TR_ERR_INVALID, "size %zu x %zu overflows", a, b);
    *out = a * b;
    return TR_OK;
}
