/* launch/ library part — starting local ranks and learning a rank's identity.
 *
 * Contract:
 *  - tr_launch_local() runs argv once per local rank with torchrun's variables (RANK,
 *    WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) plus
 *    TRIDENT_JOB_TOKEN, OPENBLAS_NUM_THREADS/OMP_NUM_THREADS (a fair share of the cores) and
 *    OPENBLAS_CORETYPE=SkylakeX on AVX-512 CPUs; variables the user set are kept. Every line a
 *    rank writes to stdout/stderr is copied to the launcher's stdout/stderr as "[rN] line".
 *  - The ranks share one new process group and die with the launcher (PR_SET_PDEATHSIG).
 *    When a rank exits non-zero or is killed, or the launcher gets SIGINT/SIGTERM/SIGHUP, every
 *    rank gets SIGTERM, then SIGKILL after the grace period; the launcher returns once all
 *    are gone. *exit_code: 0 if every rank exited 0, else the first failure's exit status or
 *    128 + signal (at least 1).
 *  - tr_env_detect() reads a rank's identity from the environment: torchrun-style variables
 *    first (what tr_launch_local sets), then Open MPI, then Slurm, else a single process.
 *  - A job token (TRIDENT_JOB_TOKEN, which the store uses to reject ranks of other jobs) is
 *    the one the user exported, else 128 random bits on one node (a fresh one per attempt).
 *    Launchers of several nodes cannot agree on a random one: there it is the scheduler's job
 *    identity (tr_comm_job_identity: Slurm, torchrun, Open MPI), and with none
 *    tr_launch_plan_make() is TR_ERR_CONFIG asking for TRIDENT_JOB_TOKEN on every node.
 *  - tr_hostlist_*() read Slurm's compressed host lists ("node[01-04,07]", "a[1-2]-ib,b"). */
#ifndef TR_LAUNCH_H
#define TR_LAUNCH_H

#include <stddef.h>

#include "core/core.h"

typedef struct {
    int nproc;               /* ranks on this node, >= 1 */
    int nnodes;              /* 0 or 1: single node */
    int node_rank;           /* this node's index in [0, nnodes) */
    const char *master_addr; /* NULL: 127.0.0.1 (required when nnodes > 1) */
    int master_port;         /* 0: a free port when single-node, else 29500 */
    double grace_s;          /* SIGTERM -> SIGKILL delay when stopping; <= 0: 3 s */
    double signal_grace_s;   /* the delay when the stop came from a signal to the launcher
                              * (ranks may be saving: training.exit_signal_handler); <= 0:
                              * grace_s. A rank's failure always uses grace_s. */
    int no_prefix;           /* 1: pass the ranks' output through untouched */
    const char *name;        /* prefix of the launcher's own messages; NULL: "trident launch" */
} tr_launch_options;

/* What tr_launch_local() will start: the job's sizes and one environment per local rank
 * (the launcher's environment with the variables above set). Exposed for tests and for
 * printing; tr_launch_local() makes its own. */
typedef struct {
    int nproc, nnodes, node_rank, world_size;
    char master_addr[256];
    int master_port;
    char job_token[128];  /* exported to the ranks unless the scheduler's (they derive it) */
    int threads_per_rank; /* max(1, usable cores / nproc) */
    char ***envp;         /* envp[i]: NULL-terminated environment of local rank i */
    char **owned;         /* strings the plan allocated */
    int n_owned;
} tr_launch_plan;

TR_MUST_CHECK int tr_launch_plan_make(const tr_launch_options *opts, tr_launch_plan *out);
void tr_launch_plan_free(tr_launch_plan *plan);

/* Runs argv[0] (searched in PATH) with argv as its arguments, once per local rank, and waits
 * for all of them. Blocks SIGCHLD/SIGINT/SIGTERM/SIGHUP while it runs (restored after); call
 * it from the thread that will outlive the ranks (PR_SET_PDEATHSIG follows that thread). The
 * ranks' stdin is /dev/null. Returns TR_OK once the ranks ran (the job's result is *exit_code), or an
 * error (bad options, fork failure) with no rank left running. */
TR_MUST_CHECK int tr_launch_local(const tr_launch_options *opts, char *const argv[], int *exit_code);
/* The signal (SIGINT/SIGTERM/SIGHUP) the launcher got during the last tr_launch_local, 0 if
 * none: a job stopped on request is not restarted. */
int tr_launch_last_stop_signal(void);

/* tr_launch_local, and after a failure (a rank's non-zero exit or death, not a stop the
 * launcher was asked for) the whole group again, up to max_restarts times (torchrun's
 * --max-restarts): each attempt has its own port and job token, so ranks of two attempts
 * never meet; each restart is logged with the cause and the time since the attempt began.
 * Single node only (several nodes restart through their scheduler's requeue). */
TR_MUST_CHECK int tr_launch_local_restarting(const tr_launch_options *opts, char *const argv[],
                                             int max_restarts, int *exit_code);

typedef struct {
    int rank, world_size;
    int local_rank, local_world_size;
    char master_addr[256];
    int master_port;
    char job_token[128]; /* the job's identity (tr_comm_job_identity); "" when none is set */
    char source[16]; /* "torchrun-env" | "openmpi" | "slurm" | "single" */
} tr_rank_env;

/* Fills *out from the environment; TR_ERR_CONFIG naming the variable and value when one is
 * malformed or inconsistent. */
TR_MUST_CHECK int tr_env_detect(tr_rank_env *out);

/* Number of hosts in a Slurm host list, and the host at `index` (0-based). */
TR_MUST_CHECK int tr_hostlist_count(const char *list, int *count);
TR_MUST_CHECK int tr_hostlist_host(const char *list, int index, char *out, size_t cap);

#endif
