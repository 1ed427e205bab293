/* tests/cuda: the mixture-of-experts ops of a CUDA table (kernels/cuda/moe.cu) against the CPU
 * table's on the same inputs (part of test_cuda_ops: ops_tests.h). The router: idx exactly
 * (its comparisons are exact), weights, probs, lse and dlogits within TOL_FP32 (exp and log
 * are the GPU's; moe.cuh: the same bits but for them); random logits and many ties, k = 1,
 * k = E up to 256, both pre_softmax modes, N not a multiple of the blocks. gather_rows,
 * scatter_add_rows (both paths: up to 64 routed rows the column walk, beyond it the sort) and
 * scatter_add_rows_backward's dsrc bit for bit (tolerance 0); dw within TOL_FP32. test_moe_refusal:
 * k > E is refused by name, nothing launched. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "kernels/cuda/cuda.h"
#include "tests/cuda/ops_tests.h"

static float *idx_floats(const int32_t *idx, size_t n) /* exact: small integers */
{
    float *f = malloc((n ? n : 1) * sizeof *f);
    for (size_t i = 0; i < n; i++)
        f[i] = (float)idx[i];
    return f;
}

static void check_router(const tr_kernels *k, int N, int E, int K, int pre, int ties)
{
    ops_check_group("moe router N %d E %d k %d pre %d ties %d [%s]", N, E, K, pre, ties,
                    k->name);
    size_t ne = (size_t)N * E, nk = (size_t)N * K;
    float *l = host(ne, -3, 3), *dw = host(nk, -1, 1), *aux = host((size_t)E, -1, 1);
    for (size_t i = 0; ties && i < ne; i++) /* five values: many equal logits a row */
        l[i] = (float)((int)(l[i] * 0.7f)) * 0.5f;
    int32_t *ri = malloc(nk * 4), *gi_h = malloc(nk * 4);
    float *rw = malloc(nk * 4), *rp = malloc(ne * 4), *rl = malloc((size_t)N * 4);
    float *rd = malloc(ne * 4);
    CPU->moe_router_forward(NULL, ri, rw, rp, rl, l, N, E, K, pre);
    CPU->moe_router_backward(NULL, rd, dw, ri, rw, rp, rl, aux, 0.3f, N, E, K, pre);
    float *gl = dev(k, l, ne * 4), *gw = dev(k, NULL, nk * 4), *gp = dev(k, NULL, ne * 4);
    float *glse = dev(k, NULL, (size_t)N * 4), *gdw = dev(k, dw, nk * 4);
    float *gaux = dev(k, aux, (size_t)E * 4), *gd = dev(k, NULL, ne * 4);
    int32_t *gi = dev(k, NULL, nk * 4);
    k->moe_router_forward(NULL, gi, gw, gp, glse, gl, N, E, K, pre);
    k->to_host(NULL, gi_h, gi, nk * 4);
    float *gif = idx_floats(gi_h, nk), *rif = idx_floats(ri, nk);
    compare("moe_router_forward idx (exact)", k, gif, rif, nk, 0);
    compare_back("moe_router_forward weights", k, gw, rw, nk, TOL_FP32);
    compare_back("moe_router_forward probs", k, gp, rp, ne, TOL_FP32);
    compare_back("moe_router_forward lse", k, glse, rl, (size_t)N, TOL_FP32);
    /* the backward from the CPU's forward (the same idx whatever the GPU chose) */
    int32_t *gri = dev(k, ri, nk * 4);
    float *grw = dev(k, rw, nk * 4), *grp = dev(k, rp, ne * 4), *grl = dev(k, rl, (size_t)N * 4);
    k->moe_router_backward(NULL, gd, gdw, gri, grw, grp, grl, gaux, 0.3f, N, E, K, pre);
    compare_back("moe_router_backward (aux, z)", k, gd, rd, ne, TOL_FP32);
    CPU->moe_router_backward(NULL, rd, dw, ri, rw, rp, rl, NULL, 0.0f, N, E, K, pre);
    k->moe_router_backward(NULL, gd, gdw, gri, grw, grp, grl, NULL, 0.0f, N, E, K, pre);
    compare_back("moe_router_backward (weights only)", k, gd, rd, ne, TOL_FP32);
    k->free(gl), k->free(gw), k->free(gp), k->free(glse), k->free(gdw), k->free(gaux);
    k->free(gd), k->free(gi), k->free(gri), k->free(grw), k->free(grp), k->free(grl);
    free(l), free(dw), free(aux), free(ri), free(gi_h), free(rw), free(rp), free(rl), free(rd);
    free(gif), free(rif);
}

/* pattern 0: repeats ((i 7 + i / 3) % N); 1: every routed row into row 0 */
static void check_rows(const tr_kernels *k, int N, int M, int C, int weighted, int pattern)
{
    ops_check_group("moe rows N %d M %d C %d weighted %d pattern %d [%s]", N, M, C, weighted,
                    pattern, k->name);
    size_t nc = (size_t)N * C, mc = (size_t)M * C;
    int32_t *idx = malloc((size_t)M * 4);
    for (int i = 0; i < M; i++)
        idx[i] = pattern ? 0 : (int32_t)((i * 7 + i / 3) % N);
    float *src = host(nc, -1, 1), *routed = host(mc, -1, 1), *w = host((size_t)M, 0, 1);
    float *out = host(nc, -1, 1), *dout = host(nc, -1, 1);
    float *g = malloc(mc * 4), *o = host_copy(out, nc), *ds = malloc(mc * 4);
    float *dwr = malloc((size_t)M * 4);
    const float *wp = weighted ? w : NULL;
    CPU->gather_rows(NULL, g, src, idx, M, C);
    CPU->scatter_add_rows(NULL, o, routed, idx, wp, M, C);
    CPU->scatter_add_rows_backward(NULL, ds, dwr, dout, routed, idx, wp, M, C);
    int32_t *gidx = dev(k, idx, (size_t)M * 4);
    float *gsrc = dev(k, src, nc * 4), *grouted = dev(k, routed, mc * 4);
    float *gwt = dev(k, w, (size_t)M * 4), *gout = dev(k, out, nc * 4);
    float *gdout = dev(k, dout, nc * 4), *gg = dev(k, NULL, mc * 4), *gds = dev(k, NULL, mc * 4);
    float *gdw = dev(k, NULL, (size_t)M * 4);
    const float *gwp = weighted ? gwt : NULL;
    k->gather_rows(NULL, gg, gsrc, gidx, M, C);
    k->scatter_add_rows(NULL, gout, grouted, gidx, gwp, M, C);
    k->scatter_add_rows_backward(NULL, gds, gdw, gdout, grouted, gidx, gwp, M, C);
    compare_back("gather_rows (exact)", k, gg, g, mc, 0);
    compare_back(M > 64 ? "scatter_add_rows, sorted (exact)" : "scatter_add_rows, columns (exact)",
                 k, gout, o, nc, 0);
    compare_back("scatter_add_rows_backward dsrc (exact)", k, gds, ds, mc, 0);
    compare_back("scatter_add_rows_backward dw", k, gdw, dwr, (size_t)M, TOL_FP32);
    k->zero(NULL, gds, mc * 4);
    k->scatter_add_rows_backward(NULL, gds, NULL, gdout, grouted, gidx, gwp, M, C);
    compare_back("scatter_add_rows_backward dsrc, no dw", k, gds, ds, mc, 0);
    k->free(gidx), k->free(gsrc), k->free(grouted), k->free(gwt), k->free(gout);
    k->free(gdout), k->free(gg), k->free(gds), k->free(gdw);
    free(idx), free(src), free(routed), free(w), free(out), free(dout), free(g), free(o);
    free(ds), free(dwr);
}

void test_moe(const tr_kernels *k)
{
    for (int pre = 0; pre < 2; pre++) {
        check_router(k, 1000, 8, 2, pre, 0); /* Mixtral's top-2; 1000 rows: 7 blocks + 104 */
        check_router(k, 300, 8, 1, pre, 0);  /* k = 1 */
        check_router(k, 300, 64, 8, pre, 1); /* ties to the lower index */
        check_router(k, 20, 256, 256, pre, 0); /* k = E = 256 */
    }
    for (int weighted = 0; weighted < 2; weighted++) {
        check_rows(k, 16, 40, 300, weighted, 0);    /* 40 routed rows: the column walk */
        check_rows(k, 64, 1001, 300, weighted, 0);  /* the sort; M, C off the blocks */
        check_rows(k, 3000, 6000, 1, weighted, 0);  /* one column */
        check_rows(k, 3, 3000, 130, weighted, 1);   /* one run of 3000 into row 0 */
    }
    check_rows(k, 4096, 8192, 1024, 1, 0); /* 4096 tokens' top-2 at C 1024 */
    check_rows(k, 64, 1001, 300, 1, 0);    /* again after the sort's buffer grew */
}

int test_moe_refusal(const tr_kernels *k)
{
    ops_check_group("moe router refusal [%s]", k->name);
    int32_t *gi = dev(k, NULL, 64 * 4);
    float *gl = dev(k, NULL, 64 * 4), *gw = dev(k, NULL, 64 * 4), *gp = dev(k, NULL, 64 * 4);
    k->moe_router_forward(NULL, gi, gw, gp, gp, gl, 4, 8, 9, 0);
    int rc = tr_cuda_status();
    int ok = rc != 0 && strstr(tr_errmsg(), "moe_router_forward: k 9 outside 1 .. E (8 experts)");
    printf("%s k 9 of 8 experts refused: %s\n", ok ? "ok  " : "FAIL", rc ? tr_errmsg() : "no");
    return ok ? 0 : 1;
}
