/* tests/cuda: the helpers of the op-parity checks (ops_check.h). */
#include "tests/cuda/ops_check.h"

#include <execinfo.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "kernels/cuda/bf16.h"

const tr_kernels *CPU, *F32, *BF16;
int failures, checks;

static uint64_t rng = 0x243F6A8885A308D3ull;

float uniform(float lo, float hi)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return lo + (hi - lo) * (float)((rng >> 40) * (1.0 / 16777216.0));
}

float *host(size_t n, float lo, float hi)
{
    float *p = malloc((n ? n : 1) * sizeof *p);
    for (size_t i = 0; i < n; i++)
        p[i] = uniform(lo, hi);
    return p;
}

float *host_copy(const float *src, size_t n)
{
    float *p = malloc((n ? n : 1) * sizeof *p);
    memcpy(p, src, n * sizeof *p);
    return p;
}

void *dev(const tr_kernels *k, const void *src, size_t bytes)
{
    void *p = k->alloc(bytes ? bytes : 4);
    if (!p) {
        fprintf(stderr, "FAIL: %s alloc of %zu bytes: %s\n", k->name, bytes, tr_errmsg());
        exit(1);
    }
    if (src && bytes)
        k->to_device(NULL, p, src, bytes);
    return p;
}

float *back(const tr_kernels *k, const void *d, size_t n)
{
    float *h = malloc((n ? n : 1) * sizeof *h);
    k->to_host(NULL, h, d, n * sizeof *h);
    return h;
}

float *widen(const uint16_t *h, size_t n)
{
    float *f = malloc((n ? n : 1) * sizeof *f);
    for (size_t i = 0; i < n; i++)
        f[i] = bf16_to_f32(h[i]);
    return f;
}

uint16_t *narrow(const float *f, size_t n)
{
    uint16_t *h = malloc((n ? n : 1) * sizeof *h);
    for (size_t i = 0; i < n; i++)
        h[i] = bf16_from_f32(f[i]);
    return h;
}

float *back16(const tr_kernels *k, const uint16_t *d, size_t n)
{
    uint16_t *h = malloc((n ? n : 1) * sizeof *h);
    k->to_host(NULL, h, d, n * sizeof *h);
    float *f = widen(h, n);
    free(h);
    return f;
}

void compare(const char *what, const tr_kernels *k, const float *got, const float *ref,
                    size_t n, double tol)
{
    double scale = 0, err = 0;
    size_t worst = 0;
    int bad = 0;
    for (size_t i = 0; i < n; i++)
        scale = fmax(scale, fabs((double)ref[i]));
    for (size_t i = 0; i < n; i++) {
        if (isnan(got[i]) != isnan(ref[i])) {
            bad = 1;
            worst = i;
            break;
        }
        double e = fabs((double)got[i] - (double)ref[i]);
        if (e > err)
            err = e, worst = i;
    }
    double rel = scale > 0 ? err / scale : err;
    checks++;
    if (bad || rel > tol) {
        failures++;
        fprintf(stderr, "FAIL %-36s [%s] error %.3g > %.0e (element %zu: gpu %.9g, cpu %.9g)\n",
                what, k->name, rel, tol, worst, n ? got[worst] : 0.0, n ? ref[worst] : 0.0);
    } else {
        printf("ok   %-36s [%s] error %.3g\n", what, k->name, rel);
    }
}

void compare_back(const char *what, const tr_kernels *k, const float *gpu, const float *ref,
                  size_t n, double tol)
{
    float *got = back(k, gpu, n);
    compare(what, k, got, ref, n, tol);
    free(got);
}

void compare_back16(const char *what, const tr_kernels *k, const uint16_t *gpu,
                    const float *ref, size_t n, double tol)
{
    float *got = back16(k, gpu, n);
    compare(what, k, got, ref, n, tol);
    free(got);
}

/* ---------------------------------------------------------------- crash reports */

static char group[192];          /* the check group running (ops_check_group) */
static char alt_stack[64 << 10]; /* the handler's stack: a stack overflow is reported too */

static void say(const char *text) /* async-signal-safe */
{
    size_t n = strlen(text);
    while (n > 0) {
        ssize_t w = write(STDERR_FILENO, text, n);
        if (w <= 0)
            return;
        text += w, n -= (size_t)w;
    }
}

static void on_crash(int sig)
{
    const char *name = sig == SIGSEGV ? "SIGSEGV" : sig == SIGBUS ? "SIGBUS"
                       : sig == SIGFPE ? "SIGFPE" : sig == SIGILL ? "SIGILL" : "SIGABRT";
    say("\nCRASH: ");
    say(name);
    say(" during check group: ");
    say(group[0] ? group : "(none yet: start-up)");
    say("\nbacktrace (static functions as binary(+offset): addr2line -f -e <binary> <offset>):\n");
    void *frames[64];
    int n = backtrace(frames, 64);
    backtrace_symbols_fd(frames, n, STDERR_FILENO);
    signal(sig, SIG_DFL); /* die of the signal, as without the handler (exit status, core) */
    raise(sig);
}

void ops_check_report_crashes(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    setvbuf(stderr, NULL, _IONBF, 0);
    void *warm[1];
    backtrace(warm, 1); /* loads libgcc's unwinder now, not inside the handler */
    stack_t ss = {.ss_sp = alt_stack, .ss_size = sizeof alt_stack};
    sigaltstack(&ss, NULL);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_crash;
    sa.sa_flags = SA_ONSTACK | SA_NODEFER | SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    const int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        sigaction(sigs[i], &sa, NULL);
}

void ops_check_group(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(group, sizeof group, fmt, ap);
    va_end(ap);
    printf("-- %s\n", group);
}
