/* checkpoint.async_save (Megatron's --async-save): a save copies this rank's state into host
 * memory and returns; a thread writes the files while training goes on; once every rank's
 * writer has finished (tr_checkpoint_poll, called by every rank after each iteration) rank 0
 * writes the manifest and moves the checkpoint and then the tracker into place. Until then
 * the previous checkpoint stays the latest, so a crash mid-write loses only the new one. */
#include "train/checkpoint_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/core.h"

struct ckpt_async {
    tr_engine *e;
    char dir[4096];
    int iteration;
    ckpt_paths paths;
    ckpt_staging st;
    pthread_t thread;
    int started;
    atomic_int done; /* the writer has returned (its result in rc) */
    int rc;
    char err[1024];
};

static void *writer(void *arg)
{
    struct ckpt_async *a = arg;
    /* the writer yields to training: at the lowest priority (Linux: nice is per thread) it
     * runs in the cores' idle moments (communication waits, the step's serial parts) instead
     * of taking half a core from the compute threads while it copies into the page cache */
    (void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 19);
    a->rc = ckpt_write_staged(a->e, a->paths.tmp_dir, &a->st);
    if (a->rc) /* errors are per thread: carry the message over */
        snprintf(a->err, sizeof a->err, "%s", tr_errmsg());
    atomic_store(&a->done, 1);
    return NULL;
}

static void release(tr_engine *e)
{
    struct ckpt_async *a = e->pending_save;
    if (!a)
        return;
    if (a->started)
        pthread_join(a->thread, NULL);
    ckpt_staging_free(&a->st);
    free(a);
    e->pending_save = NULL;
}

void ckpt_async_discard(tr_engine *e) { release(e); }

int ckpt_save_async(tr_engine *e, const char *dir, int iteration)
{
    int rc = tr_checkpoint_poll(e, 1); /* one save in flight at a time */
    if (rc)
        return rc;
    struct ckpt_async *a = calloc(1, sizeof *a);
    if (!a)
        rc = tr_fail(TR_ERR_NOMEM, "out of memory");
    rc = tr_engine_agree(e, rc, "saving the checkpoint");
    if (rc) {
        free(a);
        return rc;
    }
    a->e = e;
    a->iteration = iteration;
    snprintf(a->dir, sizeof a->dir, "%s", dir);
    e->pending_save = a;
    if ((rc = ckpt_begin(e, dir, iteration, &a->paths))) {
        release(e);
        return rc;
    }
    rc = ckpt_stage(e, &a->st);
    if (!rc && pthread_create(&a->thread, NULL, writer, a))
        rc = tr_fail(TR_ERR_INTERNAL, "cannot start the checkpoint writer thread");
    a->started = !rc;
    if ((rc = tr_engine_agree(e, rc, "saving the checkpoint")))
        release(e);
    return rc;
}

int tr_checkpoint_poll(tr_engine *e, int wait)
{
    struct ckpt_async *a = e->pending_save;
    if (!a) /* every rank saves at the same iterations: all have one pending, or none */
        return TR_OK;
    if (wait && a->started)
        pthread_join(a->thread, NULL), a->started = 0;
    int done = atomic_load(&a->done);
    /* [0]: some rank still writing; [1]: some rank failed */
    double state[2] = {done ? 0.0 : 1.0, done && a->rc ? 1.0 : 0.0};
    int rc = tr_comm_allreduce(e->world.world, state, state, 2, TR_COMM_F64, TR_COMM_MAX);
    if (rc) {
        release(e);
        return rc;
    }
    if (state[0] > 0)
        return TR_OK; /* later */
    if (state[1] > 0)
        rc = a->rc ? tr_fail(TR_ERR_IO, "%s", a->err)
                   : tr_fail(TR_ERR_IO, "another rank could not write its part of checkpoint "
                                        "%s (iteration %d)", a->dir, a->iteration);
    char dir[4096];
    ckpt_paths paths = a->paths;
    int iteration = a->iteration;
    snprintf(dir, sizeof dir, "%s", a->dir);
    release(e); /* joins the writer (finished) */
    return rc ? rc : ckpt_finish(e, dir, iteration, &paths);
}
