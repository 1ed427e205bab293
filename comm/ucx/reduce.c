/* The UCX backend's elementwise reductions (host memory).
 * ucx_reduce3(dst, a, b): dst = a op b, where dst may be a or b (then in place). The
 * operand order is kept exactly (a on the left), so callers that fix the order get the same
 * bits everywhere, also for max/min of signed zeros. Integer sums wrap (no UB). */
#include "comm/ucx/ucx_internal.h"

#include <string.h>

#define SUM(x, y) ((x) + (y))
#define MAX(x, y) ((y) > (x) ? (y) : (x))
#define MIN(x, y) ((y) < (x) ? (y) : (x))
#define WSUM32(x, y) ((int32_t)((uint32_t)(x) + (uint32_t)(y)))
#define WSUM64(x, y) ((int64_t)((uint64_t)(x) + (uint64_t)(y)))

/* For type T and operator OP: _l (d = d OP s), _r (d = s OP d), _3 (d = a OP b). */
#define DEFINE_OP(NAME, T, OP)                                                                 \
    static void NAME##_l(T *restrict d, const T *restrict s, size_t n)                         \
    {                                                                                          \
        for (size_t i = 0; i < n; i++)                                                         \
            d[i] = OP(d[i], s[i]);                                                             \
    }                                                                                          \
    static void NAME##_r(T *restrict d, const T *restrict s, size_t n)                         \
    {                                                                                          \
        for (size_t i = 0; i < n; i++)                                                         \
            d[i] = OP(s[i], d[i]);                                                             \
    }                                                                                          \
    static void NAME##_3(T *restrict d, const T *restrict a, const T *restrict b, size_t n)    \
    {                                                                                          \
        for (size_t i = 0; i < n; i++)                                                         \
            d[i] = OP(a[i], b[i]);                                                             \
    }                                                                                          \
    static void NAME(void *d, const void *a, const void *b, size_t n)                          \
    {                                                                                          \
        if (d == a)                                                                            \
            NAME##_l(d, b, n);                                                                 \
        else if (d == b)                                                                       \
            NAME##_r(d, a, n);                                                                 \
        else                                                                                   \
            NAME##_3(d, a, b, n);                                                              \
    }

DEFINE_OP(f32_sum, float, SUM)
DEFINE_OP(f32_max, float, MAX)
DEFINE_OP(f32_min, float, MIN)
DEFINE_OP(f64_sum, double, SUM)
DEFINE_OP(f64_max, double, MAX)
DEFINE_OP(f64_min, double, MIN)
DEFINE_OP(i32_sum, int32_t, WSUM32)
DEFINE_OP(i32_max, int32_t, MAX)
DEFINE_OP(i32_min, int32_t, MIN)
DEFINE_OP(i64_sum, int64_t, WSUM64)
DEFINE_OP(i64_max, int64_t, MAX)
DEFINE_OP(i64_min, int64_t, MIN)

typedef void (*reduce_fn)(void *d, const void *a, const void *b, size_t n);

static const reduce_fn table[TR_COMM_NDTYPES][TR_COMM_NREDOPS] = {
    [TR_COMM_F32] = {f32_sum, f32_max, f32_min},
    [TR_COMM_F64] = {f64_sum, f64_max, f64_min},
    [TR_COMM_I32] = {i32_sum, i32_max, i32_min},
    [TR_COMM_I64] = {i64_sum, i64_max, i64_min},
};

void ucx_reduce3(void *dst, const void *a, const void *b, size_t n, tr_comm_dtype dt,
                 tr_comm_redop op)
{
    if ((unsigned)dt < TR_COMM_NDTYPES && (unsigned)op < TR_COMM_NREDOPS && n)
        table[dt][op](dst, a, b, n);
}
