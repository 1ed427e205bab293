/* Helpers shared by the kernels tests: random inputs, closeness checks against double
 * references, and central finite differences. */
#ifndef TR_TESTS_KERNELS_KT_H
#define TR_TESTS_KERNELS_KT_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"

extern const tr_kernels *K;

/* Deterministic uniform floats in [lo, hi) from a 64-bit state. */
void kt_seed(uint64_t seed);
float kt_uniform(float lo, float hi);
void kt_fill(float *x, size_t n, float lo, float hi);
float *kt_floats(size_t n);   /* calloc'd, test-owned (free with free()) */
double *kt_doubles(size_t n); /* calloc'd */

/* Fail (cmocka) unless |got - ref| <= rtol * (|ref| + scale[i]) + atol for every i.
 * scale may be NULL; for sums it should be sum |terms| so cancellation is allowed for. */
void kt_check(const char *what, const float *got, const double *ref, const double *scale,
              size_t n, double rtol, double atol);
/* Fail unless the two float arrays are bit-identical. */
void kt_check_same(const char *what, const float *a, const float *b, size_t n);

/* Central differences of loss() with respect to each of x[0..n): x[i] is moved by +-eps
 * (the step actually taken in fp32 is used) and restored. */
typedef double (*kt_loss_fn)(void *ctx);
void kt_fd_grad(float *x, size_t n, float eps, kt_loss_fn loss, void *ctx, double *grad);
/* Fail unless analytic and fd agree: |a - fd| <= rtol * |fd| + atol_frac * max_i |fd_i|. */
void kt_check_fd(const char *what, const float *analytic, const double *fd, size_t n,
                 double rtol, double atol_frac);

/* L = sum_i out[i] * w[i] in double. */
double kt_dot(const float *out, const float *w, size_t n);

/* Attention's layouts (kernels.h attention_gqa_*): qkv (B, T, NG, R+2, HS), R = NH/NG query
 * heads per group then its key and value; out (B, T, NH, HS). kt_qkv_at: unit u (0..R-1 query
 * heads, R key, R+1 value) of group g at (b, t), element d; kt_out_at: head h's. */
typedef struct {
    int B, T, NH, NG, HS;
} kt_att_shape;
size_t kt_qkv_at(kt_att_shape s, int b, int t, int g, int u, int d);
size_t kt_out_at(kt_att_shape s, int b, int t, int h, int d);
/* Segment ids (B, T) of packed sequences: runs of lengths cycling through lens[0..n) (row b
 * starting at lens[b % n]); NULL when n == 0. free() it. */
int32_t *kt_segments(kt_att_shape s, const int *lens, int n);
/* The attention reference: the whole (T, T) matrix of probabilities per (batch, head) in double
 * (softmax of each query row over its keys, other packed sequences masked, ALiBi slopes or
 * NULL), with drop (or NULL) kernels.h's attention_gqa_dropout_*'s mask M = keep * scale:
 * out = (P M) V, dP = M (dO V^T), dS = P (dP - rowsum(P dP)), dV += (P M)^T dO. Writes out and
 * lse, accumulates dqkv (zero it first), and the sums of magnitudes (out_s, dqkv_s) that
 * bound their rounding. */
typedef struct {
    double *out, *out_s, *lse, *dqkv, *dqkv_s;
} kt_ref_result;
void kt_ref_attention(kt_att_shape s, const float *qkv, const float *dout, const float *alibi,
                      const int32_t *seg, const tr_dropout *drop, kt_ref_result *r);

#endif
