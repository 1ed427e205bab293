/* kernels/: the Llama, Bloom and Gemma ops (RMSNorm, SwiGLU, GeGLU, rotary embedding,
 * attention with grouped query heads and ALiBi) against double-precision references written
 * as plain loops, and their backwards against finite differences. Bloom's ALiBi slopes are
 * made as transformers makes them, for a power-of-two and a non-power-of-two head count. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kt.h"

/* ------------------------------------------------------------------ RMSNorm */
typedef struct {
    float *out, *rstd, *x, *w, *gw;
    int N, C;
} rms_ctx;

static double rms_loss(void *p)
{
    rms_ctx *c = p;
    K->rmsnorm_forward(NULL, c->out, c->rstd, c->x, c->w, c->N, c->C, 1e-5f);
    return kt_dot(c->out, c->gw, (size_t)c->N * c->C);
}

static void check_rmsnorm(int N, int C, int fd)
{
    size_t n = (size_t)N * C;
    float *x = kt_floats(n), *w = kt_floats(C), *out = kt_floats(n), *rstd = kt_floats(N);
    float *dout = kt_floats(n), *dx = kt_floats(n), *dw = kt_floats(C);
    double *ref = kt_doubles(n), *rdx = kt_doubles(n), *rdw = kt_doubles(C);
    kt_fill(x, n, -2, 2);
    kt_fill(w, C, 0.5f, 1.5f);
    kt_fill(dout, n, -1, 1);
    kt_fill(dx, n, -1, 1); /* dinp accumulates: start from something */
    kt_fill(dw, C, -1, 1);
    for (int i = 0; i < N; i++) {
        double ss = 0, sdot = 0;
        for (int c = 0; c < C; c++)
            ss += (double)x[i * C + c] * x[i * C + c];
        double r = 1.0 / sqrt(ss / C + 1e-5);
        for (int c = 0; c < C; c++) {
            ref[i * C + c] = x[i * C + c] * r * w[c];
            sdot += (double)dout[i * C + c] * w[c] * x[i * C + c];
            rdw[c] += (double)dout[i * C + c] * x[i * C + c] * r;
        }
        for (int c = 0; c < C; c++)
            rdx[i * C + c] = dx[i * C + c] + r * dout[i * C + c] * w[c] -
                             r * r * r * x[i * C + c] * sdot / C;
    }
    for (int c = 0; c < C; c++)
        rdw[c] += dw[c];
    K->rmsnorm_forward(NULL, out, rstd, x, w, N, C, 1e-5f);
    kt_check("rmsnorm forward", out, ref, NULL, n, 1e-5, 1e-6);
    K->rmsnorm_backward(NULL, dx, dw, dout, x, w, rstd, N, C);
    kt_check("rmsnorm dinp", dx, rdx, NULL, n, 1e-4, 1e-5);
    kt_check("rmsnorm dweight", dw, rdw, NULL, C, 1e-4, 1e-4);
    if (fd) {
        rms_ctx c = {out, rstd, x, w, dout, N, C};
        double *g = kt_doubles(n), *gw = kt_doubles(C);
        memset(dx, 0, n * sizeof(float));
        memset(dw, 0, C * sizeof(float));
        K->rmsnorm_backward(NULL, dx, dw, dout, x, w, rstd, N, C);
        kt_fd_grad(x, n, 1e-2f, rms_loss, &c, g);
        kt_check_fd("rmsnorm dinp vs finite differences", dx, g, n, 1e-2, 1e-3);
        kt_fd_grad(w, C, 1e-2f, rms_loss, &c, gw);
        kt_check_fd("rmsnorm dweight vs finite differences", dw, gw, C, 1e-2, 1e-3);
        free(g);
        free(gw);
    }
    free(x), free(w), free(out), free(rstd), free(dout), free(dx), free(dw);
    free(ref), free(rdx), free(rdw);
}

static void test_rmsnorm(void **state)
{
    (void)state;
    check_rmsnorm(3, 16, 1);
    check_rmsnorm(257, 200, 0); /* parallel pieces, column blocks with a tail */
}

/* ------------------------------------------------------------------ SwiGLU */
typedef struct {
    float *out, *x, *gw;
    size_t n;
} sw_ctx;

static double sw_loss(void *p)
{
    sw_ctx *c = p;
    K->swiglu_forward(NULL, c->out, c->x, c->n);
    return kt_dot(c->out, c->gw, c->n);
}

static void check_swiglu(size_t n, int fd)
{
    float *x = kt_floats(2 * n), *out = kt_floats(n), *dout = kt_floats(n), *dx = kt_floats(2 * n);
    double *ref = kt_doubles(n), *rdx = kt_doubles(2 * n);
    kt_fill(x, 2 * n, -6, 6);
    kt_fill(dout, n, -1, 1);
    for (size_t i = 0; i < n; i++) {
        double g = x[2 * i], u = x[2 * i + 1], sg = 1 / (1 + exp(-g));
        ref[i] = g * sg * u;
        rdx[2 * i] = dout[i] * u * (sg + g * sg * (1 - sg));
        rdx[2 * i + 1] = dout[i] * g * sg;
    }
    K->swiglu_forward(NULL, out, x, n);
    kt_check("swiglu forward", out, ref, NULL, n, 1e-5, 1e-6);
    K->swiglu_backward(NULL, dx, x, dout, n);
    kt_check("swiglu backward", dx, rdx, NULL, 2 * n, 1e-5, 1e-6);
    if (fd) {
        sw_ctx c = {out, x, dout, n};
        double *g = kt_doubles(2 * n);
        kt_fd_grad(x, 2 * n, 1e-2f, sw_loss, &c, g);
        kt_check_fd("swiglu vs finite differences", dx, g, 2 * n, 1e-2, 1e-3);
        free(g);
    }
    free(x), free(out), free(dout), free(dx), free(ref), free(rdx);
}

static void test_swiglu(void **state)
{
    (void)state;
    check_swiglu(37, 1);
    check_swiglu(100003, 0);
}

/* ------------------------------------------------------------------ GeGLU (Gemma's MLP)
 * out = gelu(gate) * up on swiglu's interleaved (n, 2) layout, the tanh GELU or (exact) the
 * exact x Phi(x). References in double as test_norm_gelu.c's; gelu(gate) must also be
 * gelu_forward's (gelu_exact_forward's) own bits, and dgate gelu_backward's given dout * up. */
static double ref_gelu(int exact, double x, double *deriv, double *deriv_scale)
{
    double a, b, value;
    if (exact) {
        double cdf = 0.5 * erfc(-x / sqrt(2.0)), density = exp(-0.5 * x * x) / sqrt(2.0 * M_PI);
        a = cdf, b = x * density, value = x * cdf;
    } else {
        double k = sqrt(2.0 / M_PI), u = k * (x + 0.044715 * x * x * x);
        double du = k * (1.0 + 3.0 * 0.044715 * x * x), th = tanh(u);
        a = 0.5 * (1.0 + th), b = 0.5 * x * (1.0 - th * th) * du, value = 0.5 * x * (1.0 + th);
    }
    *deriv = a + b;
    *deriv_scale = fabs(a) + fabs(b);
    return value;
}

typedef struct {
    float *out, *x, *gw;
    size_t n;
    int exact;
} gg_ctx;

static double gg_loss(void *p)
{
    gg_ctx *c = p;
    K->geglu_forward(NULL, c->out, c->x, c->n, c->exact);
    return kt_dot(c->out, c->gw, c->n);
}

static void check_geglu(size_t n, int fd, int exact)
{
    const char *kind = exact ? "exact" : "tanh";
    char what[96];
    float *x = kt_floats(2 * n), *out = kt_floats(n), *dout = kt_floats(n);
    float *dx = kt_floats(2 * n);
    double *ref = kt_doubles(n), *rdx = kt_doubles(2 * n), *scale = kt_doubles(2 * n);
    kt_fill(x, 2 * n, -8, 8);
    kt_fill(dout, n, -1, 1);
    /* gates worth pinning: 0, the ends of the range, beyond it (the exp's clamps), a small
     * negative; and an up of 0 and of 8 */
    static const float gates[] = {0.0f, -8.0f, 8.0f, -30.0f, 30.0f, -0.75f, 1e-3f};
    for (size_t k = 0; k < sizeof gates / sizeof *gates && k < n; k++)
        x[2 * k] = gates[k];
    if (n > 9)
        x[2 * 8 + 1] = 0.0f, x[2 * 9 + 1] = 8.0f;
    for (size_t i = 0; i < n; i++) {
        double u = x[2 * i + 1], d, ds, gl = ref_gelu(exact, x[2 * i], &d, &ds);
        ref[i] = gl * u;
        rdx[2 * i] = dout[i] * u * d;
        scale[2 * i] = fabs(dout[i] * u) * ds;
        rdx[2 * i + 1] = dout[i] * gl;
    }
    for (size_t i = 0; i < 2 * n; i++)
        dx[i] = NAN; /* overwritten */
    double rtol = exact ? 4e-6 : 1e-5;
    K->geglu_forward(NULL, out, x, n, exact);
    snprintf(what, sizeof what, "geglu (%s) forward", kind);
    kt_check(what, out, ref, NULL, n, rtol, 1e-9);
    K->geglu_backward(NULL, dx, x, dout, n, exact);
    snprintf(what, sizeof what, "geglu (%s) backward", kind);
    kt_check(what, dx, rdx, scale, 2 * n, rtol, 1e-9);

    /* the same bits as the GELU ops: gelu(gate) * up, dout * gelu(gate), and dgate is
     * gelu_backward's with dout * up as its output gradient */
    float *gate = kt_floats(n), *gl = kt_floats(n), *dgl = kt_floats(n), *dg = kt_floats(n);
    float *want = kt_floats(2 * n), *got = kt_floats(n);
    for (size_t i = 0; i < n; i++)
        gate[i] = x[2 * i], dg[i] = dout[i] * x[2 * i + 1];
    (exact ? K->gelu_exact_forward : K->gelu_forward)(NULL, gl, gate, n);
    (exact ? K->gelu_exact_backward : K->gelu_backward)(NULL, dgl, gate, dg, n);
    for (size_t i = 0; i < n; i++) {
        got[i] = out[i];
        want[i] = gl[i] * x[2 * i + 1];
    }
    snprintf(what, sizeof what, "geglu (%s) out vs gelu_forward * up", kind);
    kt_check_same(what, got, want, n);
    for (size_t i = 0; i < n; i++) {
        want[2 * i] = dgl[i];
        want[2 * i + 1] = dout[i] * gl[i];
    }
    snprintf(what, sizeof what, "geglu (%s) dinp vs gelu_backward, dout * gelu_forward", kind);
    kt_check_same(what, dx, want, 2 * n);
    for (size_t i = 0; i < n; i++)
        x[2 * i + 1] = 1.0f; /* up = 1: out is gelu(gate) itself */
    K->geglu_forward(NULL, out, x, n, exact);
    snprintf(what, sizeof what, "geglu (%s) with up 1 vs gelu_forward", kind);
    kt_check_same(what, out, gl, n);
    free(gate), free(gl), free(dgl), free(dg), free(want), free(got);

    if (fd) {
        kt_fill(x, 2 * n, -8, 8);
        for (size_t k = 0; k < sizeof gates / sizeof *gates && k < n; k++)
            if (fabsf(gates[k]) < 10.0f) /* a step across the clamps is not a derivative */
                x[2 * k] = gates[k];
        K->geglu_backward(NULL, dx, x, dout, n, exact);
        gg_ctx c = {out, x, dout, n, exact};
        double *g = kt_doubles(2 * n);
        kt_fd_grad(x, 2 * n, 1e-2f, gg_loss, &c, g);
        snprintf(what, sizeof what, "geglu (%s) vs finite differences", kind);
        kt_check_fd(what, dx, g, 2 * n, 1e-2, 1e-3);
        free(g);
    }
    free(x), free(out), free(dout), free(dx), free(ref), free(rdx), free(scale);
}

static void test_geglu(void **state)
{
    (void)state;
    for (int exact = 0; exact < 2; exact++) {
        check_geglu(37, 1, exact);
        check_geglu(1, 0, exact);
        check_geglu(0, 0, exact);
        check_geglu(100003, 0, exact); /* split over threads, SIMD tails */
    }
}

/* The rounded tables (cpu-bf16, cpu-fp16) carry geglu: the fp32 op's results, rounded. */
static void test_geglu_rounded(void **state)
{
    (void)state;
    const char *formats[] = {"bf16", "fp16"};
    float (*round1[])(float) = {tr_round_bf16, tr_round_fp16};
    size_t n = 41;
    float *x = kt_floats(2 * n), *dout = kt_floats(n), *a = kt_floats(2 * n);
    float *b = kt_floats(2 * n);
    kt_fill(x, 2 * n, -4, 4);
    kt_fill(dout, n, -1, 1);
    for (int f = 0; f < 2; f++) {
        const tr_kernels *R = tr_kernels_cpu_rounded(formats[f]);
        assert_non_null(R);
        assert_non_null(R->geglu_forward);
        assert_non_null(R->geglu_backward);
        for (int exact = 0; exact < 2; exact++) {
            K->geglu_forward(NULL, a, x, n, exact);
            for (size_t i = 0; i < n; i++)
                a[i] = round1[f](a[i]);
            R->geglu_forward(NULL, b, x, n, exact);
            kt_check_same("rounded geglu forward", b, a, n);
            K->geglu_backward(NULL, a, x, dout, n, exact);
            for (size_t i = 0; i < 2 * n; i++)
                a[i] = round1[f](a[i]);
            R->geglu_backward(NULL, b, x, dout, n, exact);
            kt_check_same("rounded geglu backward", b, a, 2 * n);
        }
    }
    free(x), free(dout), free(a), free(b);
}

/* ------------------------------------------------------------------ rotary embedding
 * Reference: Hugging Face Llama's apply_rotary_pos_emb, x * cos + rotate_half(x) * sin, with
 * cos/sin of t * base^(-2i/rot) repeated over the two halves; dims >= rot pass through. */
static void rope_tables(int T, int rot, double base, float *cs, float *sn)
{
    for (int t = 0; t < T; t++)
        for (int i = 0; i < rot / 2; i++) {
            double a = t * pow(base, -2.0 * i / rot);
            cs[t * rot / 2 + i] = (float)cos(a);
            sn[t * rot / 2 + i] = (float)sin(a);
        }
}

static void test_rope(void **state)
{
    (void)state;
    int B = 2, T = 7, NG = 2, R = 3, HS = 12, rot = 8, U = R + 2;
    size_t n = (size_t)B * T * NG * U * HS;
    float *x = kt_floats(n), *y = kt_floats(n), *cs = kt_floats(T * rot / 2), *sn = kt_floats(T * rot / 2);
    double *ref = kt_doubles(n);
    kt_fill(x, n, -1, 1);
    rope_tables(T, rot, 10000.0, cs, sn);
    for (size_t e = 0; e < n; e++) {
        size_t d = e % HS, u = e / HS % U, t = e / ((size_t)HS * U * NG) % T;
        ref[e] = x[e];
        if (u > (size_t)R || d >= (size_t)rot)
            continue; /* the value head, and the unrotated dims */
        int half = rot / 2, i = (int)d % half;
        double a = t * pow(10000.0, -2.0 * i / rot);
        double other = d < (size_t)half ? -x[e + half] : x[e - half]; /* rotate_half */
        ref[e] = x[e] * cos(a) + other * sin(a);
    }
    memcpy(y, x, n * sizeof(float));
    K->rope(NULL, y, cs, sn, B, T, NG, R, HS, rot, 0, NULL);
    kt_check("rope forward", y, ref, NULL, n, 1e-5, 1e-6);
    /* explicit positions: the same as n % T; sequence 1 restarted at its row 3 (packing) */
    int32_t pos[2 * 7];
    for (int i = 0; i < B * T; i++)
        pos[i] = i < T ? i : i - T < 3 ? i - T : i - T - 3;
    float *z = kt_floats(n);
    memcpy(z, x, n * sizeof(float));
    K->rope(NULL, z, cs, sn, B, T, NG, R, HS, rot, 0, pos);
    size_t per_row = (size_t)NG * U * HS;
    for (size_t e = 0; e < n; e++) {
        size_t row = e / per_row, t = (size_t)pos[row], d = e % HS, u = e / HS % U;
        double want = x[e];
        if (u <= (size_t)R && d < (size_t)rot) {
            int half = rot / 2, i = (int)d % half;
            double a = t * pow(10000.0, -2.0 * i / rot);
            double other = d < (size_t)half ? -x[e + half] : x[e - half];
            want = x[e] * cos(a) + other * sin(a);
        }
        if (fabs(z[e] - want) > 1e-5 * (fabs(want) + 1e-1))
            fail_msg("rope with positions [%zu]: %g, want %g", e, z[e], want);
    }
    free(z);
    /* the inverse undoes it, and is the backward: <rope(x), w> = <x, rope^-1(w)> */
    float *w = kt_floats(n), *gw = kt_floats(n);
    kt_fill(w, n, -1, 1);
    memcpy(gw, w, n * sizeof(float));
    K->rope(NULL, gw, cs, sn, B, T, NG, R, HS, rot, 1, NULL);
    double lhs = kt_dot(y, w, n), rhs = kt_dot(x, gw, n);
    assert_true(fabs(lhs - rhs) <= 1e-5 * (fabs(lhs) + 1));
    K->rope(NULL, y, cs, sn, B, T, NG, R, HS, rot, 1, NULL);
    double *xd = kt_doubles(n);
    for (size_t e = 0; e < n; e++)
        xd[e] = x[e];
    kt_check("rope inverse", y, xd, NULL, n, 1e-5, 1e-6);
    free(x), free(y), free(cs), free(sn), free(ref), free(w), free(gw), free(xd);
}

/* ------------------------------------------------------------------ attention
 * qkv (B, T, NG, R+2, HS). Reference in double with the slope * (j - i) bias. */
typedef struct {
    int B, T, NH, NG, HS;
} shape;

static size_t at(shape s, int b, int t, int g, int u, int d)
{
    int R = s.NH / s.NG;
    return ((((size_t)b * s.T + t) * s.NG + g) * (R + 2) + u) * s.HS + d;
}

static void ref_forward(shape s, const float *qkv, const float *alibi, double *out)
{
    int R = s.NH / s.NG;
    double scale = 1.0 / sqrt((double)s.HS), *p = kt_doubles(s.T);
    for (int b = 0; b < s.B; b++)
        for (int h = 0; h < s.NH; h++)
            for (int t = 0; t < s.T; t++) {
                int g = h / R;
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j <= t; j++) {
                    double dot = 0;
                    for (int d = 0; d < s.HS; d++)
                        dot += (double)qkv[at(s, b, t, g, h % R, d)] * qkv[at(s, b, j, g, R, d)];
                    p[j] = dot * scale + (alibi ? alibi[h] * (double)(j - t) : 0);
                    mx = fmax(mx, p[j]);
                }
                for (int j = 0; j <= t; j++)
                    sum += p[j] = exp(p[j] - mx);
                for (int d = 0; d < s.HS; d++) {
                    double o = 0;
                    for (int j = 0; j <= t; j++)
                        o += p[j] / sum * qkv[at(s, b, j, g, R + 1, d)];
                    out[(((size_t)b * s.T + t) * s.NH + h) * s.HS + d] = o;
                }
            }
    free(p);
}

typedef struct {
    shape s;
    float *out, *att, *qkv, *w;
    const float *alibi;
} att_ctx;

static double att_loss(void *p)
{
    att_ctx *c = p;
    shape s = c->s;
    K->attention_gqa_forward(NULL, c->out, c->att, c->qkv, c->alibi, s.B, s.T, s.NH, s.NG, s.HS,
                             NULL);
    return kt_dot(c->out, c->w, (size_t)s.B * s.T * s.NH * s.HS);
}

/* Bloom's slopes as transformers' build_alibi_tensor makes them. */
static void bloom_slopes(int n, float *slopes)
{
    int cp = 1;
    while (cp * 2 <= n)
        cp *= 2;
    double base = pow(2.0, -pow(2.0, -(log2(cp) - 3)));
    for (int i = 0; i < cp; i++)
        slopes[i] = (float)pow(base, i + 1);
    double extra = pow(2.0, -pow(2.0, -(log2(2 * cp) - 3)));
    for (int i = 0; i < n - cp; i++)
        slopes[cp + i] = (float)pow(extra, 2 * i + 1);
}

static void check_attention(shape s, int use_alibi, int fd)
{
    int R = s.NH / s.NG;
    size_t nq = (size_t)s.B * s.T * s.NG * (R + 2) * s.HS, no = (size_t)s.B * s.T * s.NH * s.HS;
    size_t na = (size_t)s.B * s.NH * s.T; /* lse, and the backward's scratch */
    float *qkv = kt_floats(nq), *out = kt_floats(no), *att = kt_floats(na), *w = kt_floats(no);
    float *dqkv = kt_floats(nq), *datt = kt_floats(na + (size_t)s.B * s.T), *slopes = kt_floats(s.NH);
    double *ref = kt_doubles(no);
    kt_fill(qkv, nq, -1.5f, 1.5f);
    kt_fill(w, no, -1, 1);
    bloom_slopes(s.NH, slopes);
    const float *alibi = use_alibi ? slopes : NULL;
    ref_forward(s, qkv, alibi, ref);
    K->attention_gqa_forward(NULL, out, att, qkv, alibi, s.B, s.T, s.NH, s.NG, s.HS, NULL);
    kt_check("gqa attention forward", out, ref, NULL, no, 1e-4, 1e-5);
    K->attention_gqa_backward(NULL, dqkv, datt, w, qkv, out, att, alibi, s.B, s.T, s.NH, s.NG,
                              s.HS, NULL);
    if (fd) {
        att_ctx c = {s, out, att, qkv, w, alibi};
        double *g = kt_doubles(nq);
        kt_fd_grad(qkv, nq, 1e-2f, att_loss, &c, g);
        kt_check_fd("gqa attention backward vs finite differences", dqkv, g, nq, 1e-2, 1e-3);
        free(g);
    }
    if (s.NG == s.NH && !use_alibi) { /* the same as GPT-2's op, bit for bit */
        float *out2 = kt_floats(no), *att2 = kt_floats(na), *dqkv2 = kt_floats(nq);
        K->attention_forward(NULL, out2, att2, qkv, s.B, s.T, s.NH, s.HS, NULL);
        K->attention_backward(NULL, dqkv2, datt, w, qkv, out2, att2, s.B, s.T, s.NH, s.HS, NULL);
        kt_check_same("gqa with NG = NH: out", out, out2, no);
        kt_check_same("gqa with NG = NH: dqkv", dqkv, dqkv2, nq);
        free(out2), free(att2), free(dqkv2);
    } else if (!fd) { /* large case: the key/value gradient against a reference through
                       * expanding the groups to NH heads (GPT-2's layout) */
        shape e = {s.B, s.T, s.NH, s.NH, s.HS};
        size_t ne = (size_t)s.B * s.T * s.NH * 3 * s.HS;
        float *x = kt_floats(ne), *dx = kt_floats(ne), *o2 = kt_floats(no), *a2 = kt_floats(na);
        for (int b = 0; b < s.B; b++)
            for (int t = 0; t < s.T; t++)
                for (int h = 0; h < s.NH; h++)
                    for (int u = 0; u < 3; u++)
                        memcpy(x + at(e, b, t, h, u, 0), qkv + at(s, b, t, h / R, u ? R + u - 1 : h % R, 0),
                               s.HS * sizeof(float));
        K->attention_gqa_forward(NULL, o2, a2, x, alibi, s.B, s.T, s.NH, s.NH, s.HS, NULL);
        K->attention_gqa_backward(NULL, dx, datt, w, x, o2, a2, alibi, s.B, s.T, s.NH, s.NH, s.HS,
                                  NULL);
        double *want = kt_doubles(nq);
        for (int b = 0; b < s.B; b++)
            for (int t = 0; t < s.T; t++)
                for (int h = 0; h < s.NH; h++)
                    for (int u = 0; u < 3; u++)
                        for (int d = 0; d < s.HS; d++)
                            want[at(s, b, t, h / R, u ? R + u - 1 : h % R, d)] += dx[at(e, b, t, h, u, d)];
        kt_check("gqa attention backward vs expanded heads", dqkv, want, NULL, nq, 1e-4, 1e-5);
        free(x), free(dx), free(o2), free(a2), free(want);
    }
    free(qkv), free(out), free(att), free(w), free(dqkv), free(datt), free(slopes), free(ref);
}

static void test_alibi_slopes(void **state)
{
    (void)state;
    float s8[8], s6[6];
    bloom_slopes(8, s8);
    bloom_slopes(6, s6);
    assert_true(fabsf(s8[0] - 0.5f) < 1e-7f && fabsf(s8[7] - 1.0f / 256) < 1e-9f);
    /* 6 heads: the 4 of a power of two (1/4 .. 1/256), then 2^-1 and 2^-3 (odd powers of
     * the next power of two's base) */
    float want[6] = {0.25f, 0.0625f, 0.015625f, 0.00390625f, 0.5f, 0.125f};
    for (int i = 0; i < 6; i++)
        assert_true(fabsf(s6[i] - want[i]) < 1e-8f);
}

static void test_attention(void **state)
{
    (void)state;
    check_attention((shape){2, 5, 4, 2, 4}, 0, 1);  /* GQA: 4 heads, 2 groups */
    check_attention((shape){1, 6, 6, 6, 4}, 1, 1);  /* Bloom: 6 heads, ALiBi */
    check_attention((shape){1, 5, 4, 1, 4}, 1, 1);  /* multi-query with ALiBi */
    check_attention((shape){2, 70, 4, 4, 8}, 0, 0); /* NG = NH: GPT-2's op exactly */
    check_attention((shape){1, 130, 8, 2, 16}, 1, 0); /* blocks, team units, big groups */
    check_attention((shape){3, 70, 4, 2, 8}, 0, 0);  /* blocks, whole pairs */
}

int main(void)
{
    K = tr_kernels_cpu();
    kt_seed(17);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rmsnorm),     cmocka_unit_test(test_swiglu),
        cmocka_unit_test(test_geglu),       cmocka_unit_test(test_geglu_rounded),
        cmocka_unit_test(test_rope),        cmocka_unit_test(test_alibi_slopes),
        cmocka_unit_test(test_attention),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
