/* What the subcommands that run as ranks share (trident train, trident generate): starting
 * themselves as N local ranks, and adopting a scheduler's rank identity. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "launch/args.h"
#include "launch/launch.h"

/* A rank of a job of several ranks already (started by trident launch, torchrun, mpirun or
 * srun): fills `what` with the variables that say so and returns 1. --nproc there would make
 * every rank start a job of its own. */
static int inside_launched_job(char *what, size_t cap)
{
    static const struct {
        const char *rank, *size;
    } kinds[] = {{"RANK", "WORLD_SIZE"},
                 {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                 {"SLURM_PROCID", "SLURM_STEP_NUM_TASKS"}};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        const char *rank = getenv(kinds[i].rank), *size = getenv(kinds[i].size);
        if (!rank || !size || !*rank || atol(size) < 2)
            continue;
        snprintf(what, cap, "%s=%.20s %s=%.20s", kinds[i].rank, rank, kinds[i].size, size);
        return 1;
    }
    return 0;
}

/* argv[i] is --FLAG VALUE (2 words) or --FLAG=VALUE (1): the words to skip, else 0. */
static int launcher_flag(const char *arg, const char *flag)
{
    size_t n = strlen(flag);
    if (!strcmp(arg, flag))
        return 2;
    return !strncmp(arg, flag, n) && arg[n] == '=' ? 1 : 0;
}

int run_as_local_ranks(const char *subcommand, int nproc, int max_restarts, int argc, char **argv)
{
    char self[4096], who[64], what[128];
    snprintf(who, sizeof who, "trident %s", subcommand);
    if (inside_launched_job(what, sizeof what)) {
        const char *rank = strchr(what, '='), *size = strrchr(what, '=');
        fprintf(stderr,
                "%s: --nproc %d inside a launched job: this process is already rank %.*s of "
                "%s (%s), so every rank would start a separate job of its own. Drop --nproc "
                "(the launcher starts the ranks), or run `trident %s --nproc %d` outside it\n",
                who, nproc, (int)strcspn(rank + 1, " "), rank + 1, size + 1, what, subcommand,
                nproc);
        return 2;
    }
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        fprintf(stderr, "%s: cannot find the trident executable\n", who);
        return 1;
    }
    self[n] = '\0';
    char **child = calloc((size_t)argc + 2, sizeof *child);
    if (!child)
        return 1;
    int k = 0;
    child[k++] = self;
    child[k++] = (char *)subcommand;
    for (int i = 1; i < argc; i++) { /* the launcher's flags stay with the launcher */
        int skip = launcher_flag(argv[i], "--nproc");
        if (!skip)
            skip = launcher_flag(argv[i], "--max-restarts");
        if (skip) {
            i += skip - 1;
            continue;
        }
        child[k++] = argv[i];
    }
    /* stopped by a signal, ranks with training.exit_signal_handler finish the iteration and
     * save before they exit: a long grace then (a second signal still kills at once); a
     * rank's failure stops the others after the usual 3 s */
    tr_launch_options opts = {.nproc = nproc, .name = who, .signal_grace_s = 300};
    int exit_code = 1;
    int rc = tr_launch_local_restarting(&opts, child, max_restarts, &exit_code);
    free(child);
    if (rc) {
        fprintf(stderr, "%s: %s\n", who, tr_errmsg());
        return rc == TR_ERR_CONFIG ? 2 : 1;
    }
    return exit_code;
}

/* The CPU threads of one rank started by srun or mpirun, where the launcher set no
 * OMP_NUM_THREADS: Slurm's --cpus-per-task when it says; else the cores this process may run
 * on, shared among the node's ranks when the mask is the whole machine (no CPU binding: every
 * rank would otherwise start a thread per core, local_world_size times oversubscribed). */
static int scheduler_thread_share(int local_world_size)
{
    const char *cpt = getenv("SLURM_CPUS_PER_TASK");
    if (cpt && atoi(cpt) >= 1)
        return atoi(cpt);
    cpu_set_t set;
    int mask = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    if (mask < 1)
        mask = online > 0 ? (int)online : 1;
    if (online > 0 && mask >= online && local_world_size > 1)
        return mask / local_world_size > 0 ? mask / local_world_size : 1;
    return mask;
}

int adopt_scheduler_identity(const char *who)
{
    tr_rank_env env;
    if (tr_env_detect(&env)) {
        fprintf(stderr, "%s: %s\n", who, tr_errmsg());
        return 2;
    }
    if (strcmp(env.source, "slurm") && strcmp(env.source, "openmpi"))
        return 0;
    char buf[64];
    snprintf(buf, sizeof buf, "%d", env.rank);
    setenv("RANK", buf, 1);
    snprintf(buf, sizeof buf, "%d", env.world_size);
    setenv("WORLD_SIZE", buf, 1);
    snprintf(buf, sizeof buf, "%d", env.local_rank);
    setenv("LOCAL_RANK", buf, 1);
    snprintf(buf, sizeof buf, "%d", env.local_world_size);
    setenv("LOCAL_WORLD_SIZE", buf, 1);
    snprintf(buf, sizeof buf, "%d", env.master_port);
    setenv("MASTER_PORT", buf, 1);
    setenv("MASTER_ADDR", env.master_addr, 1);
    if (!getenv("OMP_NUM_THREADS") || !*getenv("OMP_NUM_THREADS")) {
        snprintf(buf, sizeof buf, "%d", scheduler_thread_share(env.local_world_size));
        setenv("OMP_NUM_THREADS", buf, 1);
    }
    /* the job's identity: the communicator derives it from the scheduler's variables */
    return 0;
}
