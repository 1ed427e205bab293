/* The CPU backend's team: the calling thread plus threads-1 workers that sleep on a condition
 * variable between jobs. A job is n pieces handed out one at a time through an atomic
 * counter, so a thread that runs takes more pieces and one that the OS has descheduled takes
 * fewer: nobody waits at a static split for a partner that has no core. The caller returns
 * once every piece is done and no worker still holds the job (it lives on the caller's stack).
 *
 * Waiting: a worker polls for the next job for a short while (SPIN_NS, yielding the core on
 * each poll, so a busy process sharing the core runs) and then blocks; the caller waiting
 * for pieces in progress does the same. No thread spins on a core it shares.
 *
 * Which piece a thread runs never changes what the piece computes: every parallel op
 * partitions its work by the sizes alone (see cpu_ops.h), so results are bit-identical for
 * any thread count and any schedule. */
#include "kernels/cpu/cpu_ops.h"

#include "core/core.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

/* Poll this long (yielding between polls) before blocking on the condition variable. */
#define SPIN_NS 50000L
#define MAX_THREADS 256

typedef struct {
    void (*fn)(void *ctx, size_t i);
    void *ctx;
    size_t n;
    atomic_size_t next; /* the next unclaimed piece */
    atomic_size_t done; /* pieces finished */
    int users;          /* workers inside the job (under the pool mutex) */
    int max_workers;    /* workers with an index below this take part */
} job;

static struct {
    pthread_mutex_t mu;
    pthread_cond_t work;     /* a new job was posted */
    pthread_cond_t finished; /* the last piece finished or the last user left */
    job *current;            /* NULL between jobs */
    atomic_ulong epoch;      /* incremented for each posted job */
    int started;             /* workers created */
    int threads;             /* team size (caller included); 0 = not read yet */
    int waiting;             /* the caller sleeps on `finished` */
} pool = {.mu = PTHREAD_MUTEX_INITIALIZER,
          .work = PTHREAD_COND_INITIALIZER,
          .finished = PTHREAD_COND_INITIALIZER};

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Claim and run pieces until none is left; returns how many this thread ran. */
static size_t run_pieces(job *j)
{
    size_t ran = 0;
    for (;;) {
        size_t i = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (i >= j->n)
            return ran;
        j->fn(j->ctx, i);
        ran++;
    }
}

static void *worker_main(void *arg)
{
    int index = (int)(intptr_t)arg;
    unsigned long seen = atomic_load(&pool.epoch);
    for (;;) {
        /* poll, yielding the core, then sleep until the epoch moves */
        long long t0 = now_ns();
        while (atomic_load_explicit(&pool.epoch, memory_order_acquire) == seen &&
               now_ns() - t0 < SPIN_NS)
            sched_yield();
        pthread_mutex_lock(&pool.mu);
        while (atomic_load(&pool.epoch) == seen)
            pthread_cond_wait(&pool.work, &pool.mu);
        seen = atomic_load(&pool.epoch);
        job *j = pool.current;
        if (!j || index >= j->max_workers) {
            pthread_mutex_unlock(&pool.mu);
            continue;
        }
        j->users++;
        pthread_mutex_unlock(&pool.mu);

        size_t ran = run_pieces(j);
        size_t done = atomic_fetch_add_explicit(&j->done, ran, memory_order_acq_rel) + ran;

        pthread_mutex_lock(&pool.mu);
        j->users--;
        if (pool.waiting && (j->users == 0 || done == j->n))
            pthread_cond_signal(&pool.finished);
        pthread_mutex_unlock(&pool.mu);
    }
    return NULL;
}

static int default_threads(void)
{
    const char *v = getenv("OMP_NUM_THREADS");
    if (v && *v) {
        char *end = NULL;
        long n = strtol(v, &end, 10);
        if (end != v && n >= 1)
            return n > MAX_THREADS ? MAX_THREADS : (int)n;
    }
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set) > MAX_THREADS ? MAX_THREADS : CPU_COUNT(&set);
    return 1;
}

int tr_kernels_cpu_threads(void)
{
    pthread_mutex_lock(&pool.mu);
    if (!pool.threads)
        pool.threads = default_threads();
    int n = pool.threads;
    pthread_mutex_unlock(&pool.mu);
    return n;
}

void tr_kernels_cpu_set_threads(int threads)
{
    pthread_mutex_lock(&pool.mu);
    pool.threads = threads < 1 ? 1 : threads > MAX_THREADS ? MAX_THREADS : threads;
    pthread_mutex_unlock(&pool.mu);
}

/* Start workers up to threads - 1 (under the mutex). A worker that cannot be created only
 * makes the team smaller. */
static int ensure_workers(int threads)
{
    while (pool.started < threads - 1) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&t, &attr, worker_main, (void *)(intptr_t)pool.started);
        pthread_attr_destroy(&attr);
        if (rc)
            break;
        pool.started++;
    }
    return pool.started + 1;
}

void tr_kernels_cpu_parallel_for(size_t n, void (*fn)(void *ctx, size_t i), void *ctx)
{
    if (n == 0)
        return;
    int threads = tr_kernels_cpu_threads();
    if (n == 1 || threads <= 1) {
        for (size_t i = 0; i < n; i++)
            fn(ctx, i);
        return;
    }
    job j = {.fn = fn, .ctx = ctx, .n = n};
    atomic_init(&j.next, 0);
    atomic_init(&j.done, 0);
    pthread_mutex_lock(&pool.mu);
    if (pool.current) { /* called from inside a piece (or a second caller): run it here */
        pthread_mutex_unlock(&pool.mu);
        for (size_t i = 0; i < n; i++)
            fn(ctx, i);
        return;
    }
    j.max_workers = ensure_workers(threads) - 1;
    pool.current = &j;
    atomic_fetch_add_explicit(&pool.epoch, 1, memory_order_release);
    pthread_cond_broadcast(&pool.work);
    pthread_mutex_unlock(&pool.mu);

    size_t ran = run_pieces(&j);
    atomic_fetch_add_explicit(&j.done, ran, memory_order_acq_rel);

    /* pieces still running on workers: poll briefly, then sleep */
    long long t0 = now_ns();
    while (atomic_load_explicit(&j.done, memory_order_acquire) < n && now_ns() - t0 < SPIN_NS)
        sched_yield();
    pthread_mutex_lock(&pool.mu);
    pool.waiting = 1;
    while (atomic_load(&j.done) < n || j.users > 0)
        pthread_cond_wait(&pool.finished, &pool.mu);
    pool.waiting = 0;
    pool.current = NULL;
    pthread_mutex_unlock(&pool.mu);
}

/* ---------------------------------------------------------------- ranges */

typedef struct {
    void (*fn)(void *ctx, size_t lo, size_t hi);
    void *ctx;
    size_t count, per;
} range_job;

static void range_piece(void *ctx, size_t i)
{
    const range_job *r = ctx;
    size_t lo = i * r->per, hi = r->count - lo < r->per ? r->count : lo + r->per;
    r->fn(r->ctx, lo, hi);
}

void cpu_for_ranges(int parallel, size_t count, size_t per,
                       void (*fn)(void *ctx, size_t lo, size_t hi), void *ctx)
{
    range_job r = {fn, ctx, count, per < 1 ? 1 : per};
    size_t pieces = (count + r.per - 1) / r.per;
    if (parallel) {
        tr_kernels_cpu_parallel_for(pieces, range_piece, &r);
        return;
    }
    for (size_t i = 0; i < pieces; i++) /* the same cut on the caller alone */
        range_piece(&r, i);
}
