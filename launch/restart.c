/* Restarting a failed local job (trident launch / train --nproc --max-restarts N): the
 * group stops as one (spawn.c), then starts again; what resumes it is the job itself
 * (trident train with checkpoint.load = checkpoint.save picks up the latest checkpoint). */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "launch/launch.h"

int tr_launch_local_restarting(const tr_launch_options *opts, char *const argv[],
                               int max_restarts, int *exit_code)
{
    const char *name = opts->name ? opts->name : "trident launch";
    if (max_restarts > 0 && opts->nnodes > 1)
        return tr_fail(TR_ERR_CONFIG, "--max-restarts with --nnodes %d: restarts are single-node "
                                      "(several nodes restart through the scheduler's requeue)",
                       opts->nnodes);
    for (int attempt = 0;; attempt++) {
        double t0 = tr_now();
        int rc = tr_launch_local(opts, argv, exit_code);
        if (rc || *exit_code == 0)
            return rc;
        int sig = tr_launch_last_stop_signal();
        if (sig) /* stopped on request: not a failure to recover from */
            return TR_OK;
        if (attempt == max_restarts) {
            if (max_restarts > 0)
                fprintf(stderr, "%s: failed again (exit status %d) after %d restart%s; giving "
                                "up\n", name, *exit_code, max_restarts,
                        max_restarts == 1 ? "" : "s");
            return TR_OK;
        }
        fprintf(stderr, "%s: restart %d of %d: the job failed (exit status %d) %.1f s into "
                        "attempt %d; starting every rank again (the job resumes from its "
                        "latest checkpoint)\n",
                name, attempt + 1, max_restarts, *exit_code, tr_now() - t0, attempt + 1);
        fflush(stderr);
    }
}
