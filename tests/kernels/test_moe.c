/* kernels/: the mixture-of-experts ops (router top-k + softmax, gather rows, weighted
 * scatter-add of rows) against plain loops in double, ties, k = 1 and k = E, the router's
 * backward against finite differences, and the scatter's row order and thread-count
 * independence. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kt.h"

/* ------------------------------------------------------------------ router */
typedef struct {
    float *logits, *weights, *probs, *lse, *dweights, *aux;
    int32_t *idx;
    float z;
    int N, E, k, pre;
} router_ctx;

/* the objective whose gradient moe_router_backward gives */
static double router_loss(void *p)
{
    router_ctx *c = p;
    K->moe_router_forward(NULL, c->idx, c->weights, c->probs, c->lse, c->logits, c->N, c->E,
                          c->k, c->pre);
    double L = kt_dot(c->weights, c->dweights, (size_t)c->N * c->k);
    for (int n = 0; n < c->N; n++) {
        L += c->z * (double)c->lse[n] * c->lse[n];
        for (int e = 0; e < c->E; e++)
            L += (double)c->aux[e] * c->probs[n * c->E + e];
    }
    return L;
}

static void check_router(int N, int E, int k, int pre)
{
    size_t ne = (size_t)N * E, nk = (size_t)N * k;
    router_ctx c = {.logits = kt_floats(ne), .weights = kt_floats(nk), .probs = kt_floats(ne),
                    .lse = kt_floats(N), .dweights = kt_floats(nk), .aux = kt_floats(E),
                    .idx = calloc(nk, sizeof(int32_t)), .z = 0.3f, .N = N, .E = E, .k = k,
                    .pre = pre};
    kt_fill(c.logits, ne, -2, 2);
    kt_fill(c.dweights, nk, -1, 1);
    kt_fill(c.aux, E, -1, 1);
    K->moe_router_forward(NULL, c.idx, c.weights, c.probs, c.lse, c.logits, N, E, k, pre);
    double *rp = kt_doubles(ne), *rl = kt_doubles(N), *rw = kt_doubles(nk);
    for (int n = 0; n < N; n++) {
        const float *l = c.logits + n * E;
        double s = 0;
        for (int e = 0; e < E; e++)
            s += exp(l[e]);
        rl[n] = log(s);
        for (int e = 0; e < E; e++)
            rp[n * E + e] = exp(l[e]) / s;
        /* top-k by sorting indices: descending logit, the lower index first among equals */
        int order[64];
        for (int e = 0; e < E; e++)
            order[e] = e;
        for (int i = 1; i < E; i++)
            for (int j = i; j > 0 && l[order[j]] > l[order[j - 1]]; j--) {
                int t = order[j];
                order[j] = order[j - 1], order[j - 1] = t;
            }
        double ks = 0;
        for (int j = 0; j < k; j++) {
            assert_int_equal(c.idx[n * k + j], order[j]);
            ks += exp(l[order[j]]);
        }
        for (int j = 0; j < k; j++)
            rw[n * k + j] = pre ? rp[n * E + order[j]] : exp(l[order[j]]) / ks;
    }
    kt_check("router probs", c.probs, rp, NULL, ne, 1e-6, 1e-7);
    kt_check("router lse", c.lse, rl, NULL, (size_t)N, 1e-6, 1e-6);
    kt_check("router weights", c.weights, rw, NULL, nk, 1e-6, 1e-7);
    float *dl = kt_floats(ne);
    kt_fill(dl, ne, 5, 6); /* overwritten */
    K->moe_router_backward(NULL, dl, c.dweights, c.idx, c.weights, c.probs, c.lse, c.aux, c.z,
                           N, E, k, pre);
    double *fd = kt_doubles(ne);
    if (N > 64) { /* the team's pieces: the forward above; differences need few rows */
        free(c.logits), free(c.weights), free(c.probs), free(c.lse), free(c.dweights);
        free(c.aux), free(c.idx), free(rp), free(rl), free(rw), free(dl), free(fd);
        return;
    }
    kt_fd_grad(c.logits, ne, 1e-3f, router_loss, &c, fd);
    kt_check_fd("router dlogits", dl, fd, ne, 2e-3, 1e-4);
    /* without the losses' terms: the weights' path alone */
    memset(c.aux, 0, (size_t)E * sizeof(float));
    c.z = 0;
    K->moe_router_backward(NULL, dl, c.dweights, c.idx, c.weights, c.probs, c.lse, NULL, 0.0f,
                           N, E, k, pre);
    if (k == 1 && !pre) { /* one renormalised weight is 1 whatever the logits */
        for (size_t i = 0; i < ne; i++)
            assert_true(dl[i] == 0.0f);
    } else {
        kt_fd_grad(c.logits, ne, 1e-3f, router_loss, &c, fd);
        kt_check_fd("router dlogits (weights only)", dl, fd, ne, 2e-3, 1e-4);
    }
    free(c.logits), free(c.weights), free(c.probs), free(c.lse), free(c.dweights);
    free(c.aux), free(c.idx), free(rp), free(rl), free(rw), free(dl), free(fd);
}

static void test_router(void **state)
{
    (void)state;
    check_router(7, 5, 2, 0);  /* Mixtral's renormalised top-2 */
    check_router(7, 5, 2, 1);  /* pre-softmax, not renormalised */
    check_router(6, 4, 1, 1);  /* k = 1 */
    check_router(6, 4, 1, 0);  /* k = 1 renormalised: weight 1, no gradient through it */
    check_router(5, 4, 4, 0);  /* k = E */
    check_router(5, 4, 4, 1);
    check_router(300, 8, 2, 0); /* rows in pieces on the team */
}

static void test_router_ties(void **state)
{
    (void)state;
    /* equal logits go to the lower expert index, in order */
    float logits[3 * 5] = {1, 3, 3, 0, 3, /* */ 2, 2, 2, 2, 2, /* */ 0, -1, 4, 4, -1};
    int32_t idx[3 * 3];
    float w[3 * 3], p[3 * 5], lse[3];
    K->moe_router_forward(NULL, idx, w, p, lse, logits, 3, 5, 3, 0);
    int32_t want[9] = {1, 2, 4, /* */ 0, 1, 2, /* */ 2, 3, 0};
    for (int i = 0; i < 9; i++)
        assert_int_equal(idx[i], want[i]);
    for (int j = 0; j < 3; j++) /* equal logits, equal weights */
        assert_true(fabsf(w[j] - 1.0f / 3) < 1e-7f && fabsf(w[3 + j] - 1.0f / 3) < 1e-7f);
}

/* ------------------------------------------------------------------ rows */
static void check_rows(int N, int M, int C, int weighted)
{
    float *src = kt_floats((size_t)N * C), *g = kt_floats((size_t)M * C), *w = kt_floats(M);
    float *out = kt_floats((size_t)N * C), *seq = kt_floats((size_t)N * C);
    float *dout = kt_floats((size_t)N * C), *dsrc = kt_floats((size_t)M * C), *dw = kt_floats(M);
    int32_t *idx = calloc((size_t)M, sizeof(int32_t));
    kt_fill(src, (size_t)N * C, -1, 1);
    kt_fill(w, M, 0, 1);
    kt_fill(dout, (size_t)N * C, -1, 1);
    for (int i = 0; i < M; i++) /* repeats: a row gathered and scattered several times */
        idx[i] = (int32_t)((i * 7 + i / 3) % N);
    K->gather_rows(NULL, g, src, idx, M, C);
    for (int i = 0; i < M; i++)
        assert_memory_equal(g + (size_t)i * C, src + (size_t)idx[i] * C, (size_t)C * sizeof(float));
    /* scatter: the same bits as the plain loop in row order */
    kt_fill(out, (size_t)N * C, -1, 1);
    memcpy(seq, out, (size_t)N * C * sizeof(float));
    K->scatter_add_rows(NULL, out, g, idx, weighted ? w : NULL, M, C);
    for (int i = 0; i < M; i++)
        for (int c = 0; c < C; c++)
            seq[(size_t)idx[i] * C + c] += (weighted ? w[i] : 1.0f) * g[(size_t)i * C + c];
    kt_check_same("scatter_add_rows", out, seq, (size_t)N * C);
    /* backward */
    double *rd = kt_doubles((size_t)M * C), *rw = kt_doubles(M);
    for (int i = 0; i < M; i++) {
        for (int c = 0; c < C; c++) {
            double d = dout[(size_t)idx[i] * C + c];
            rd[(size_t)i * C + c] = (weighted ? w[i] : 1.0) * d;
            rw[i] += d * g[(size_t)i * C + c];
        }
    }
    kt_fill(dsrc, (size_t)M * C, 3, 4); /* overwritten */
    kt_fill(dw, M, 3, 4);
    K->scatter_add_rows_backward(NULL, dsrc, dw, dout, g, idx, weighted ? w : NULL, M, C);
    kt_check("scatter_add_rows_backward dsrc", dsrc, rd, NULL, (size_t)M * C, 1e-6, 1e-7);
    kt_check("scatter_add_rows_backward dw", dw, rw, NULL, (size_t)M, 1e-5, 1e-6);
    K->scatter_add_rows_backward(NULL, dsrc, NULL, dout, g, idx, weighted ? w : NULL, M, C);
    kt_check("scatter_add_rows_backward dsrc (no dw)", dsrc, rd, NULL, (size_t)M * C, 1e-6, 1e-7);
    free(src), free(g), free(w), free(out), free(seq), free(dout), free(dsrc), free(dw);
    free(idx), free(rd), free(rw);
}

static void test_rows(void **state)
{
    (void)state;
    check_rows(5, 10, 3, 1);
    check_rows(5, 10, 3, 0);
    check_rows(64, 128, 300, 1); /* column blocks and row pieces on the team */
    check_rows(16, 32, 1, 1);    /* one column: the routing weights' own permutation */
}

/* the same bits with one thread and with four */
static void test_threads(void **state)
{
    (void)state;
    int N = 96, M = 192, C = 260, E = 8, k = 2;
    float *src = kt_floats((size_t)M * C), *w = kt_floats(M), *o1 = kt_floats((size_t)N * C);
    float *o4 = kt_floats((size_t)N * C), *d1 = kt_floats((size_t)M * C);
    float *d4 = kt_floats((size_t)M * C), *dw1 = kt_floats(M), *dw4 = kt_floats(M);
    float *lg = kt_floats((size_t)4096 * E), *p1 = kt_floats((size_t)4096 * E);
    float *p4 = kt_floats((size_t)4096 * E), *ws1 = kt_floats(4096 * k), *ws4 = kt_floats(4096 * k);
    float *l1 = kt_floats(4096), *l4 = kt_floats(4096);
    int32_t *idx = calloc((size_t)M, sizeof(int32_t)), *i1 = calloc(4096 * k, 4);
    int32_t *i4 = calloc(4096 * k, 4);
    kt_fill(src, (size_t)M * C, -1, 1);
    kt_fill(w, M, 0, 1);
    kt_fill(lg, (size_t)4096 * E, -3, 3);
    for (int i = 0; i < M; i++)
        idx[i] = (int32_t)((i * 5) % N);
    int threads = tr_kernels_cpu_threads();
    for (int t = 1; t <= 4; t += 3) {
        tr_kernels_cpu_set_threads(t);
        K->scatter_add_rows(NULL, t == 1 ? o1 : o4, src, idx, w, M, C);
        K->scatter_add_rows_backward(NULL, t == 1 ? d1 : d4, t == 1 ? dw1 : dw4, o1, src, idx, w,
                                     M, C);
        K->moe_router_forward(NULL, t == 1 ? i1 : i4, t == 1 ? ws1 : ws4, t == 1 ? p1 : p4,
                              t == 1 ? l1 : l4, lg, 4096, E, k, 0);
    }
    tr_kernels_cpu_set_threads(threads);
    kt_check_same("scatter threads", o1, o4, (size_t)N * C);
    kt_check_same("scatter backward threads", d1, d4, (size_t)M * C);
    kt_check_same("scatter dw threads", dw1, dw4, (size_t)M);
    kt_check_same("router probs threads", p1, p4, (size_t)4096 * E);
    kt_check_same("router weights threads", ws1, ws4, (size_t)4096 * k);
    assert_memory_equal(i1, i4, (size_t)4096 * k * sizeof(int32_t));
    free(src), free(w), free(o1), free(o4), free(d1), free(d4), free(dw1), free(dw4);
    free(lg), free(p1), free(p4), free(ws1), free(ws4), free(l1), free(l4);
    free(idx), free(i1), free(i4);
}

int main(void)
{
    K = tr_kernels_cpu();
    kt_seed(23);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_router),
        cmocka_unit_test(test_router_ties),
        cmocka_unit_test(test_rows),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
