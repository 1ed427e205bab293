/* tests/common — the mechanics shared by the C checks that run as ranks under `trident launch`
 * (tests/comm, tests/dp, tests/tp, tests/cuda):
 *  - failure accounting: CHECK records a failure with a message naming the rank and goes on;
 *    OK ends the rank when a call returns a non-zero status (the launcher stops the others);
 *  - float buffers and the relative comparison of a result with its reference;
 *  - the integer test data of the collective checks and its serial reduction;
 *  - the job's verdict: the failures of every rank summed over a communicator.
 * The cmocka unit tests have their own assertions and do not use this. */
#ifndef TR_TESTS_COMMON_CHECK_H
#define TR_TESTS_COMMON_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"

extern int tc_failures; /* CHECKs that failed in this process */
extern int tc_rank;     /* the rank messages name (set it once the world is up; -1 before) */

/* "rank R: FAIL FILE:LINE: MESSAGE" on stderr (printf-style message) and one more failure. */
#define CHECK(cond, ...)                                                                       \
    do {                                                                                       \
        if (!(cond))                                                                           \
            tc_fail(__FILE__, __LINE__, __VA_ARGS__);                                          \
    } while (0)

/* A call that returns a non-zero status ends this rank ("rank R: FAIL FILE:LINE: CALL -> RC:
 * tr_errmsg()" and exit 1). */
#define OK(call)                                                                               \
    do {                                                                                       \
        int rc_ = (call);                                                                      \
        if (rc_)                                                                               \
            tc_fatal(__FILE__, __LINE__, #call, rc_);                                          \
    } while (0)

void tc_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
_Noreturn void tc_fatal(const char *file, int line, const char *call, int rc);

/* n zeroed floats (at least one); ends the rank when out of memory. Free with free(). */
float *tc_floats(size_t n);
/* A copy of src[0..n). */
float *tc_fdup(const float *src, size_t n);

/* Largest |got - want| over the largest |want| (so small entries do not dominate); a NaN
 * anywhere in the difference gives INFINITY. */
double tc_max_rel(const float *got, const float *want, size_t n);

/* The largest tc_max_rel seen by tc_expect_close, for the verdict line. */
extern double tc_worst_rel;
/* CHECK that tc_max_rel(got, want, n) <= tol ("WHAT: max relative difference R > TOL"). */
void tc_expect_close(const char *what, const float *got, const float *want, size_t n,
                     double tol);

/* The integer test data of the collective checks: element i of group rank r's input for the
 * operation numbered `salt` is a small integer in [-9, 9] that repeats every tc_data_period
 * elements, so fp32 sums over any group are exact and results compare bit for bit. int64
 * elements hold the value times tc_data_i64_scale (> 1 puts it into the high bits) and
 * tc_data_get divides it back out. Defaults: period 100003, scale 1000000007. */
extern size_t tc_data_period;
extern int64_t tc_data_i64_scale;
double tc_data_val(int r, size_t i, int salt);
void tc_data_fill(void *p, tr_comm_dtype dt, size_t n, int r, int salt);
double tc_data_get(const void *p, tr_comm_dtype dt, size_t i);
/* Element i of the reduction `op` over group ranks 0..n-1's inputs. */
double tc_data_reduce(int n, size_t i, int salt, tr_comm_redop op);

/* The world communicator (the default configuration with timeout_s and the progress thread
 * on or off); sets tc_rank. Ends the process when it cannot be made. */
tr_comm *tc_world(double timeout_s, int progress_thread);

/* This rank's failures summed over `comm` (every member calls it); OK ends the rank if the
 * all-reduce fails. */
int tc_job_failures(tr_comm *comm);

#endif
