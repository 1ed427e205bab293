/* kernels/: softmax cross-entropy in vocabulary pieces (as vocab-parallel ranks use it) and
 * the token/position embeddings, against double references and finite differences. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kt.h"

/* One rank's piece of the vocabulary: columns [v_start, v_start + n_valid) of the global
 * vocabulary, stored with V >= n_valid columns (the rest is padding). */
typedef struct {
    int v_start, V, n_valid;
    float *logits, *dlogits, *maxv, *sumexp, *picked;
} piece;

struct xent_ctx {
    piece *p;
    int np, N;
    int32_t *targets;
    float scale;
    float *losses;
};

/* The vocab-parallel protocol: local max -> max over pieces -> local sumexp with the global
 * max -> sum over pieces; picked summed over pieces (0 where not held); then losses. */
static void xent_forward(struct xent_ctx *c, float *maxg, float *sumg, float *pickg)
{
    int N = c->N;
    for (int n = 0; n < N; n++) {
        maxg[n] = -INFINITY;
        sumg[n] = pickg[n] = 0.0f;
    }
    for (int i = 0; i < c->np; i++) {
        piece *p = &c->p[i];
        K->xent_row_max(NULL, p->maxv, p->logits, N, p->V, p->n_valid);
        for (int n = 0; n < N; n++)
            maxg[n] = fmaxf(maxg[n], p->maxv[n]);
    }
    for (int i = 0; i < c->np; i++) {
        piece *p = &c->p[i];
        K->xent_row_sumexp(NULL, p->sumexp, p->logits, maxg, N, p->V, p->n_valid);
        K->xent_pick(NULL, p->picked, p->logits, c->targets, N, p->V, p->v_start);
        for (int n = 0; n < N; n++) {
            sumg[n] += p->sumexp[n];
            pickg[n] += p->picked[n];
        }
    }
    K->xent_loss(NULL, c->losses, maxg, sumg, pickg, N);
}

static double xent_total(void *ctx)
{
    struct xent_ctx *c = ctx;
    int N = c->N;
    float *maxg = kt_floats(N), *sumg = kt_floats(N), *pickg = kt_floats(N);
    xent_forward(c, maxg, sumg, pickg);
    double L = 0;
    for (int n = 0; n < N; n++)
        L += (double)c->scale * c->losses[n];
    free(maxg), free(sumg), free(pickg);
    return L;
}

/* global logit of row n, real id g (ids are dense: padding sits after the last real id) */
static double global_logit(struct xent_ctx *c, int n, int g)
{
    for (int i = 0; i < c->np; i++) {
        piece *p = &c->p[i];
        if (g >= p->v_start && g < p->v_start + p->n_valid)
            return p->logits[(size_t)n * p->V + (g - p->v_start)];
    }
    fail_msg("id %d is held by no piece", g);
    return 0;
}

/* pieces: {n_valid, V} each, laid side by side from column 0 as a padded vocabulary split
 * over ranks: piece i holds ids [v_start, v_start + V) of which the first n_valid are real
 * (padding only ever sits at the end of the real vocabulary, so no target falls in it). */
static void check_xent(int N, int np, const int (*sizes)[2], float offset, int with_fd)
{
    piece p[4];
    int Vpad = 0, Vg = 0;
    for (int i = 0; i < np; i++) {
        p[i] = (piece){Vpad, sizes[i][1], sizes[i][0], kt_floats((size_t)N * sizes[i][1]),
                       kt_floats((size_t)N * sizes[i][1]), kt_floats(N), kt_floats(N),
                       kt_floats(N)};
        Vpad += sizes[i][1];
        Vg += sizes[i][0];
        for (int n = 0; n < N; n++)
            for (int v = 0; v < p[i].V; v++)
                /* padding holds large values that must be ignored */
                p[i].logits[(size_t)n * p[i].V + v] =
                    v < p[i].n_valid ? offset + kt_uniform(-3, 3) : 1e4f;
    }
    struct xent_ctx c = {p, np, N, malloc(sizeof(int32_t) * (N ? N : 1)), 0.37f, kt_floats(N)};
    assert_non_null(c.targets);
    for (int n = 0; n < N; n++)
        c.targets[n] = (int32_t)(kt_uniform(0, 1) * Vg) % Vg;
    float *maxg = kt_floats(N), *sumg = kt_floats(N), *pickg = kt_floats(N);
    xent_forward(&c, maxg, sumg, pickg);
    double *ref = kt_doubles(N), *rmax = kt_doubles(N), *lse_scale = kt_doubles(N);
    for (int n = 0; n < N; n++) {
        double mx = -INFINITY, s = 0;
        for (int g = 0; g < Vg; g++)
            mx = fmax(mx, global_logit(&c, n, g));
        for (int g = 0; g < Vg; g++)
            s += exp(global_logit(&c, n, g) - mx);
        rmax[n] = mx;
        ref[n] = log(s) + mx - global_logit(&c, n, c.targets[n]);
        lse_scale[n] = fabs(log(s)) + 2 * fabs(mx);
    }
    kt_check("row max over pieces", maxg, rmax, NULL, N, 0, 0);
    kt_check("cross-entropy loss", c.losses, ref, lse_scale, N, 1e-6, 1e-7);
    /* backward per piece against scale (softmax - onehot); padding exactly 0 */
    for (int i = 0; i < np; i++) {
        size_t n_el = (size_t)N * p[i].V;
        double *rd = kt_doubles(n_el);
        for (int n = 0; n < N; n++) {
            double mx = -INFINITY, s = 0;
            for (int g = 0; g < Vg; g++)
                mx = fmax(mx, global_logit(&c, n, g));
            for (int g = 0; g < Vg; g++)
                s += exp(global_logit(&c, n, g) - mx);
            for (int v = 0; v < p[i].n_valid; v++) {
                double x = p[i].logits[(size_t)n * p[i].V + v];
                rd[(size_t)n * p[i].V + v] =
                    c.scale * (exp(x - mx) / s - (p[i].v_start + v == c.targets[n]));
            }
        }
        for (size_t k = 0; k < n_el; k++)
            p[i].dlogits[k] = NAN;
        K->xent_backward(NULL, p[i].dlogits, p[i].logits, maxg, sumg, c.targets, N, p[i].V,
                         p[i].n_valid, p[i].v_start, c.scale);
        kt_check("cross-entropy dlogits", p[i].dlogits, rd, NULL, n_el, 1e-5, 1e-8);
        /* in place: dlogits may be the logits buffer */
        float *copy = kt_floats(n_el);
        memcpy(copy, p[i].logits, n_el * sizeof(float));
        K->xent_backward(NULL, copy, copy, maxg, sumg, c.targets, N, p[i].V, p[i].n_valid,
                         p[i].v_start, c.scale);
        kt_check_same("cross-entropy dlogits in place", copy, p[i].dlogits, n_el);
        free(copy);
        free(rd);
    }
    if (with_fd)
        for (int i = 0; i < np; i++) {
            size_t n_el = (size_t)N * p[i].V;
            if (p[i].n_valid == 0) { /* only padding: the gradient is exactly zero */
                for (size_t k = 0; k < n_el; k++)
                    assert_true(p[i].dlogits[k] == 0.0f);
                continue;
            }
            double *fd = kt_doubles(n_el);
            kt_fd_grad(p[i].logits, n_el, 1e-3f, xent_total, &c, fd);
            kt_check_fd("cross-entropy dlogits vs finite differences", p[i].dlogits, fd, n_el,
                        1e-2, 2e-3);
            free(fd);
        }
    for (int i = 0; i < np; i++)
        free(p[i].logits), free(p[i].dlogits), free(p[i].maxv), free(p[i].sumexp),
            free(p[i].picked);
    free(c.targets), free(c.losses), free(maxg), free(sumg), free(pickg), free(ref), free(rmax),
        free(lse_scale);
}

static void test_xent_pieces(void **state)
{
    (void)state;
    const int two[][2] = {{7, 7}, {4, 7}};              /* 11 ids padded to 14, two ranks */
    const int one[][2] = {{11, 11}};                    /* one rank, no padding */
    const int with_empty[][2] = {{5, 5}, {3, 5}, {0, 5}}; /* the last rank holds only padding */
    const int big[][2] = {{1008, 1008}, {990, 1008}};
    check_xent(7, 2, two, 0.0f, 1);
    check_xent(7, 1, one, 0.0f, 1);
    check_xent(5, 3, with_empty, 0.0f, 1);
    check_xent(3, 2, two, 1000.0f, 0); /* large logits: the max is subtracted */
    check_xent(0, 2, two, 0.0f, 0);    /* no rows */
    check_xent(67, 2, big, 0.0f, 0);   /* split over threads */
}

static void test_xent_edges(void **state)
{
    (void)state;
    float logits[6] = {1, 2, 3, 4, 5, 6}, out[3], d[6];
    int32_t targets[3] = {0, 4, 9};
    /* n_valid == 0: max -INF, sumexp 0, gradient all zeros (padding) */
    K->xent_row_max(NULL, out, logits, 3, 2, 0);
    for (int n = 0; n < 3; n++)
        assert_true(isinf(out[n]) && out[n] < 0);
    float maxg[3] = {7, 7, 7}, sumg[3] = {2, 2, 2};
    K->xent_row_sumexp(NULL, out, logits, maxg, 3, 2, 0);
    for (int n = 0; n < 3; n++)
        assert_true(out[n] == 0.0f);
    for (int i = 0; i < 6; i++)
        d[i] = NAN;
    K->xent_backward(NULL, d, logits, maxg, sumg, targets, 3, 2, 0, 0, 1.0f);
    for (int i = 0; i < 6; i++)
        assert_true(d[i] == 0.0f);
    /* V == 0: nothing held, nothing picked, nothing written */
    K->xent_row_max(NULL, out, logits, 3, 0, 0);
    for (int n = 0; n < 3; n++)
        assert_true(isinf(out[n]) && out[n] < 0);
    K->xent_pick(NULL, out, logits, targets, 3, 0, 0);
    for (int n = 0; n < 3; n++)
        assert_true(out[n] == 0.0f);
    d[0] = 42.0f;
    K->xent_backward(NULL, d, logits, maxg, sumg, targets, 3, 0, 0, 0, 1.0f);
    assert_true(d[0] == 42.0f);
    /* pick: targets outside [v_start, v_start + V) give 0; inside, the logit */
    K->xent_pick(NULL, out, logits, targets, 3, 2, 4); /* holds ids 4, 5 */
    assert_true(out[0] == 0.0f && out[1] == 3.0f && out[2] == 0.0f);
    /* loss = log(sumexp) + max - picked */
    float loss[1], mx[1] = {2.5f}, se[1] = {3.0f}, pk[1] = {1.25f};
    K->xent_loss(NULL, loss, mx, se, pk, 1);
    assert_float_equal(loss[0], (float)(log(3.0) + 2.5 - 1.25), 1e-6);
}

/* The fused ops of the chunked head against the pieces: xent_stats = row_max, row_sumexp
 * (bit for bit when a row's max lies in its first 1024 columns, else within rounding) and
 * pick; rescale makes two pieces' sums the global one; loss_backward = loss, backward and
 * scale_rows bit for bit (also in the bf16-rounded table). */
static void check_xent_fused(int N, int V, int n_valid, int v_start, int max_col)
{
    size_t nl = (size_t)N * V;
    /* V floats of slack: the two-piece check below views the rows from column h on with the
     * whole row's stride, so its last row's pick may look up to h columns past the end */
    float *logits = kt_floats(nl + (size_t)V + 1), *maxv = kt_floats(N + 1), *sumexp = kt_floats(N + 1);
    float *picked = kt_floats(N + 1), *fmax = kt_floats(N + 1), *fsum = kt_floats(N + 1);
    float *fpick = kt_floats(N + 1), *w = kt_floats(N + 1), *loss = kt_floats(N + 1);
    float *floss = kt_floats(N + 1), *d = kt_floats(nl + 1), *fd = kt_floats(nl + 1);
    int32_t *targets = malloc(sizeof(int32_t) * (N + 1));
    kt_fill(logits, nl, -6.0f, 6.0f);
    kt_fill(w, N, 0.0f, 2.0f);
    for (int n = 0; n < N; n++) {
        targets[n] = n % 3 == 0 ? v_start + V + n : v_start + (n * 37) % (n_valid ? n_valid : 1);
        if (max_col >= 0 && max_col < n_valid)
            logits[(size_t)n * V + max_col] = 9.0f; /* the row's max at a chosen column */
    }
    K->xent_row_max(NULL, maxv, logits, N, V, n_valid);
    K->xent_row_sumexp(NULL, sumexp, logits, maxv, N, V, n_valid);
    K->xent_pick(NULL, picked, logits, targets, N, V, v_start);
    K->xent_stats(NULL, fmax, fsum, fpick, logits, targets, N, V, n_valid, v_start);
    kt_check_same("xent_stats: max", fmax, maxv, N);
    kt_check_same("xent_stats: picked", fpick, picked, N);
    if (max_col >= 0 && max_col < 1024)
        kt_check_same("xent_stats: sumexp (max in the first block)", fsum, sumexp, N);
    for (int n = 0; n < N; n++)
        assert_float_equal(fsum[n], sumexp[n], 1e-6 * sumexp[n]);
    /* two pieces: columns [0, h) and [h, n_valid) with their own maxima, then rescaled */
    int h = n_valid / 2;
    float *m0 = kt_floats(N + 1), *s0 = kt_floats(N + 1), *m1 = kt_floats(N + 1);
    float *s1 = kt_floats(N + 1), *gm = kt_floats(N + 1);
    K->xent_stats(NULL, m0, s0, fpick, logits, targets, N, V, h, v_start);
    K->xent_stats(NULL, m1, s1, fpick, logits + h, targets, N, V, n_valid - h, v_start + h);
    for (int n = 0; n < N; n++)
        gm[n] = m0[n] > m1[n] ? m0[n] : m1[n];
    K->xent_rescale(NULL, s0, m0, gm, N);
    K->xent_rescale(NULL, s1, m1, gm, N);
    for (int n = 0; n < N; n++) {
        assert_true(gm[n] == maxv[n] || (isinf(gm[n]) && isinf(maxv[n])));
        assert_float_equal(s0[n] + s1[n], sumexp[n], 1e-6 * sumexp[n]);
    }
    for (int weighted = 0; weighted < 2; weighted++)
        for (int b = 0; b < 2; b++) {
            const tr_kernels *k = b ? tr_kernels_cpu_rounded("bf16") : K;
            k->xent_loss(NULL, loss, maxv, sumexp, picked, N);
            k->xent_backward(NULL, d, logits, maxv, sumexp, targets, N, V, n_valid, v_start,
                             0.125f);
            if (weighted)
                k->scale_rows(NULL, d, w, N, V);
            memcpy(fd, logits, nl * sizeof(float)); /* in place, as the head runs it */
            k->xent_loss_backward(NULL, floss, fd, fd, maxv, sumexp, picked, targets,
                                  weighted ? w : NULL, N, V, n_valid, v_start, 0.125f);
            kt_check_same("xent_loss_backward: losses", floss, loss, N);
            kt_check_same("xent_loss_backward: dlogits", fd, d, nl);
        }
    memcpy(fd, logits, nl * sizeof(float)); /* scale 0: the losses alone */
    K->xent_loss_backward(NULL, floss, fd, fd, maxv, sumexp, picked, targets, w, N, V, n_valid,
                          v_start, 0.0f);
    kt_check_same("xent_loss_backward scale 0: logits untouched", fd, logits, nl);
    kt_check_same("xent_loss_backward scale 0: losses", floss, loss, N);
    free(logits), free(maxv), free(sumexp), free(picked), free(fmax), free(fsum), free(fpick);
    free(w), free(loss), free(floss), free(d), free(fd), free(targets), free(m0), free(s0);
    free(m1), free(s1), free(gm);
}

static void test_xent_fused(void **state)
{
    (void)state;
    check_xent_fused(7, 14, 11, 0, -1);      /* small, padding */
    check_xent_fused(5, 3000, 2990, 500, 3); /* max in the first block: bit for bit */
    check_xent_fused(5, 3000, 2990, 500, 2500); /* max in a later block: rescaled */
    check_xent_fused(67, 3000, 3000, 0, -1);  /* split over threads */
    check_xent_fused(3, 8, 0, 0, -1);         /* a rank holding only padding */
    check_xent_fused(0, 8, 8, 0, -1);         /* no rows */
}

struct emb_ctx {
    int32_t *ids;
    float *table, *wpe, *out, *wt;
    int B, T, C, v_start, V;
};

static double emb_loss(void *p)
{
    struct emb_ctx *c = p;
    K->embedding_forward(NULL, c->out, c->ids, c->table, c->B * c->T, c->C, c->v_start, c->V);
    K->position_forward(NULL, c->out, c->wpe, c->B, c->T, c->C);
    return kt_dot(c->out, c->wt, (size_t)c->B * c->T * c->C);
}

static void check_embedding(int B, int T, int C, int Vg, int v_start, int V, int with_fd)
{
    int N = B * T;
    size_t n = (size_t)N * C;
    struct emb_ctx c = {malloc(sizeof(int32_t) * (N ? N : 1)), kt_floats((size_t)V * C),
                        kt_floats((size_t)T * C), kt_floats(n), kt_floats(n), B, T, C, v_start,
                        V};
    assert_non_null(c.ids);
    for (int i = 0; i < N; i++) /* repeated ids on purpose: Vg is small */
        c.ids[i] = (int32_t)(kt_uniform(0, 1) * Vg) % Vg;
    kt_fill(c.table, (size_t)V * C, -1, 1);
    kt_fill(c.wpe, (size_t)T * C, -1, 1);
    kt_fill(c.wt, n, -1, 1);
    for (size_t i = 0; i < n; i++)
        c.out[i] = NAN; /* embedding_forward overwrites */
    emb_loss(&c);
    double *ref = kt_doubles(n);
    for (int i = 0; i < N; i++) {
        int row = c.ids[i] - v_start;
        for (int k = 0; k < C; k++)
            ref[(size_t)i * C + k] = (row >= 0 && row < V ? c.table[(size_t)row * C + k] : 0.0) +
                                     c.wpe[(size_t)(i % T) * C + k];
    }
    kt_check("embedding + position forward", c.out, ref, NULL, n, 1e-7, 0);
    /* backward accumulates into prior values */
    float *dtab = kt_floats((size_t)V * C), *dwpe = kt_floats((size_t)T * C);
    kt_fill(dtab, (size_t)V * C, -1, 1);
    kt_fill(dwpe, (size_t)T * C, -1, 1);
    double *rtab = kt_doubles((size_t)V * C), *rtab_s = kt_doubles((size_t)V * C),
           *rwpe = kt_doubles((size_t)T * C), *rwpe_s = kt_doubles((size_t)T * C);
    for (size_t i = 0; i < (size_t)V * C; i++)
        rtab_s[i] = fabs(rtab[i] = dtab[i]);
    for (size_t i = 0; i < (size_t)T * C; i++)
        rwpe_s[i] = fabs(rwpe[i] = dwpe[i]);
    for (int i = 0; i < N; i++) {
        int row = c.ids[i] - v_start;
        for (int k = 0; k < C; k++) {
            double g = c.wt[(size_t)i * C + k];
            if (row >= 0 && row < V) {
                rtab[(size_t)row * C + k] += g;
                rtab_s[(size_t)row * C + k] += fabs(g);
            }
            rwpe[(size_t)(i % T) * C + k] += g;
            rwpe_s[(size_t)(i % T) * C + k] += fabs(g);
        }
    }
    K->embedding_backward(NULL, dtab, c.wt, c.ids, N, C, v_start, V);
    K->position_backward(NULL, dwpe, c.wt, B, T, C);
    kt_check("embedding_backward", dtab, rtab, rtab_s, (size_t)V * C, 1e-6, 0);
    kt_check("position_backward", dwpe, rwpe, rwpe_s, (size_t)T * C, 1e-6, 0);
    if (with_fd) {
        memset(dtab, 0, (size_t)V * C * sizeof(float));
        memset(dwpe, 0, (size_t)T * C * sizeof(float));
        K->embedding_backward(NULL, dtab, c.wt, c.ids, N, C, v_start, V);
        K->position_backward(NULL, dwpe, c.wt, B, T, C);
        double *fdt = kt_doubles((size_t)V * C), *fdp = kt_doubles((size_t)T * C);
        kt_fd_grad(c.table, (size_t)V * C, 1e-3f, emb_loss, &c, fdt);
        kt_fd_grad(c.wpe, (size_t)T * C, 1e-3f, emb_loss, &c, fdp);
        kt_check_fd("embedding_backward vs finite differences", dtab, fdt, (size_t)V * C, 1e-2,
                    1e-3);
        kt_check_fd("position_backward vs finite differences", dwpe, fdp, (size_t)T * C, 1e-2,
                    1e-3);
        free(fdt), free(fdp);
    }
    free(c.ids), free(c.table), free(c.wpe), free(c.out), free(c.wt), free(ref), free(dtab),
        free(dwpe), free(rtab), free(rtab_s), free(rwpe), free(rwpe_s);
}

static void test_embedding(void **state)
{
    (void)state;
    check_embedding(2, 5, 13, 11, 0, 11, 1);    /* the whole vocabulary */
    check_embedding(2, 5, 13, 11, 4, 5, 1);     /* a vocab-parallel piece: ids 4..8 */
    check_embedding(1, 3, 2, 11, 20, 3, 0);     /* holds nothing: rows are zero */
    check_embedding(3, 101, 300, 50, 10, 30, 0); /* split over threads */
}

int main(void)
{
    K = tr_kernels_cpu();
    kt_seed(41);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_xent_pieces),
        cmocka_unit_test(test_xent_edges),
        cmocka_unit_test(test_xent_fused),
        cmocka_unit_test(test_embedding),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
