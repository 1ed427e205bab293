/* Elementwise reductions used by the host-memory collectives: dst = dst op src. */
#include "comm/comm_internal.h"

#define DEFINE_SUM(NAME, T)                                                                    \
    static void NAME##_sum(T *restrict d, const T *restrict s, size_t n)                       \
    {                                                                                          \
        for (size_t i = 0; i < n; i++)                                                         \
            d[i] = d[i] + s[i];                                                                \
    }
#define DEFINE_REDUCE(NAME, T)                                                                 \
    static void NAME##_max(T *restrict d, const T *restrict s, size_t n)                       \
    {                                                                                          \
        for (size_t i = 0; i < n; i++)                                                         \
            d[i] = s[i] > d[i] ? s[i] : d[i];                                                  \
    }                                                                                          \
    static void NAME##_min(T *restrict d, const T *restrict s, size_t n)                       \
    {                                                                                          \
        for (size_t i = 0; i < n; i++)                                                         \
            d[i] = s[i] < d[i] ? s[i] : d[i];                                                  \
    }

DEFINE_SUM(f32, float)
DEFINE_SUM(f64, double)
DEFINE_REDUCE(f32, float)
DEFINE_REDUCE(f64, double)
DEFINE_REDUCE(i32, int32_t)
DEFINE_REDUCE(i64, int64_t)

/* Integer sums wrap like unsigned arithmetic instead of overflowing (no UB). */
static void i32_sum_wrap(int32_t *restrict d, const int32_t *restrict s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        d[i] = (int32_t)((uint32_t)d[i] + (uint32_t)s[i]);
}
static void i64_sum_wrap(int64_t *restrict d, const int64_t *restrict s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        d[i] = (int64_t)((uint64_t)d[i] + (uint64_t)s[i]);
}

void tr_comm_reduce(void *dst, const void *src, size_t n, tr_comm_dtype dt, tr_comm_redop op)
{
    switch (dt) {
    case TR_COMM_F32:
        op == TR_COMM_SUM ? f32_sum(dst, src, n)
        : op == TR_COMM_MAX ? f32_max(dst, src, n)
                            : f32_min(dst, src, n);
        break;
    case TR_COMM_F64:
        op == TR_COMM_SUM ? f64_sum(dst, src, n)
        : op == TR_COMM_MAX ? f64_max(dst, src, n)
                            : f64_min(dst, src, n);
        break;
    case TR_COMM_I32:
        op == TR_COMM_SUM ? i32_sum_wrap(dst, src, n)
        : op == TR_COMM_MAX ? i32_max(dst, src, n)
                            : i32_min(dst, src, n);
        break;
    case TR_COMM_I64:
        op == TR_COMM_SUM ? i64_sum_wrap(dst, src, n)
        : op == TR_COMM_MAX ? i64_max(dst, src, n)
                            : i64_min(dst, src, n);
        break;
    default:
        break;
    }
}
