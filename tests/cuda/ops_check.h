/* tests/cuda: what the op-parity checks (test_cuda_ops.c; test_cuda_fused.c with
 * test_cuda_linear.c) share: the tables, the counters, random inputs, device copies, bf16
 * storage and the comparison.
 * Error of an output = max_i |gpu_i - cpu_i| / max_i |cpu_i| (relative to the array's largest
 * magnitude, so sums whose terms cancel are judged against their scale); NaN where the CPU
 * has none fails. compare() counts a check, prints "ok" or "FAIL" with the worst element. */
#ifndef TR_TESTS_CUDA_OPS_CHECK_H
#define TR_TESTS_CUDA_OPS_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"

#define TOL_FP32 1e-5 /* "cuda-fp32" */
#define TOL_BF16 1e-2 /* "cuda" (bf16 products) */

extern const tr_kernels *CPU, *F32, *BF16; /* set by the check's main */
extern int failures, checks;

float uniform(float lo, float hi); /* xorshift, a fixed seed: the same inputs every run */
float *host(size_t n, float lo, float hi);
/* (not named dup: an executable's global function with a libc function's name is exported
 * and interposes it for every library of the process, so a library's dup(fd), the CUDA
 * driver's most likely, ran this with fd as the pointer: the SIGSEGV these checks died of on
 * their first GPU run; renamed, they ran to the end on the next) */
float *host_copy(const float *src, size_t n);
/* a device buffer of `bytes` (a copy of src unless NULL); exits on allocation failure */
void *dev(const tr_kernels *k, const void *src, size_t bytes);
float *back(const tr_kernels *k, const void *d, size_t n); /* n floats to a new host array */
/* bf16 storage: n bf16 values widened (exactly) to a new float array, n floats rounded
 * (bf16.h's RNE) to a new bf16 array, a bf16 device array of n values back widened */
float *widen(const uint16_t *h, size_t n);
uint16_t *narrow(const float *f, size_t n);
float *back16(const tr_kernels *k, const uint16_t *d, size_t n);
void compare(const char *what, const tr_kernels *k, const float *got, const float *ref,
             size_t n, double tol);
/* compare() on n values copied back from the device array gpu (fp32, or bf16 widened
 * exactly), freed after */
void compare_back(const char *what, const tr_kernels *k, const float *gpu, const float *ref,
                  size_t n, double tol);
void compare_back16(const char *what, const tr_kernels *k, const uint16_t *gpu,
                    const float *ref, size_t n, double tol);

/* First thing in main: stdout line-buffered and stderr unbuffered (under meson stdout is a
 * pipe, fully buffered, and what a crash leaves in the buffer is lost), and a handler for
 * SIGSEGV, SIGBUS, SIGFPE, SIGILL and SIGABRT that writes the signal, the check group running
 * (ops_check_group) and a backtrace (execinfo.h; static functions as binary(+offset), for
 * addr2line) to stderr, then dies of the signal as before (the same exit status). */
void ops_check_report_crashes(void);
/* Names the check group about to run (printf format): printed as "-- <name>" and kept for
 * the crash report. */
void ops_check_group(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
