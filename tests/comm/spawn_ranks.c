/* A tiny test-only rank spawner (stand-in for `trident launch` where it is not usable):
 *   spawn_ranks NPROC [--nnodes N --node-rank I] [--master-addr A] [--master-port P]
 *               [--timeout S] -- COMMAND...
 * Sets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
 * TRIDENT_JOB_TOKEN; when a rank fails or the timeout passes, terminates the others (SIGTERM,
 * then SIGKILL after 2 s). Exit status: the first failing rank's, 124 on timeout, else 0. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: spawn_ranks NPROC [options] -- COMMAND...\n");
        return 2;
    }
    int nproc = atoi(argv[1]), nnodes = 1, node_rank = 0, port = 0;
    double timeout = 120;
    const char *addr = "127.0.0.1";
    int i = 2;
    for (; i < argc && strcmp(argv[i], "--"); i++) {
        if (i + 1 >= argc)
            return 2;
        if (!strcmp(argv[i], "--nnodes"))
            nnodes = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--node-rank"))
            node_rank = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--master-addr"))
            addr = argv[++i];
        else if (!strcmp(argv[i], "--master-port"))
            port = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--timeout"))
            timeout = atof(argv[++i]);
        else
            return 2;
    }
    if (i >= argc - 1 || nproc < 1 || nproc > 256)
        return 2;
    char **cmd = argv + i + 1;
    if (!port)
        port = 20000 + (int)(getpid() % 20000);
    char token[64];
    snprintf(token, sizeof token, "%s", getenv("TRIDENT_JOB_TOKEN") ? getenv("TRIDENT_JOB_TOKEN")
                                                                      : "spawn-ranks-test");
    pid_t *pids = calloc((size_t)nproc, sizeof *pids);
    for (int r = 0; r < nproc; r++) {
        pid_t p = fork();
        if (p == 0) {
            char buf[32];
            setpgid(0, 0);
            snprintf(buf, sizeof buf, "%d", node_rank * nproc + r);
            setenv("RANK", buf, 1);
            snprintf(buf, sizeof buf, "%d", nnodes * nproc);
            setenv("WORLD_SIZE", buf, 1);
            snprintf(buf, sizeof buf, "%d", r);
            setenv("LOCAL_RANK", buf, 1);
            snprintf(buf, sizeof buf, "%d", nproc);
            setenv("LOCAL_WORLD_SIZE", buf, 1);
            snprintf(buf, sizeof buf, "%d", port);
            setenv("MASTER_PORT", buf, 1);
            setenv("MASTER_ADDR", addr, 1);
            setenv("TRIDENT_JOB_TOKEN", token, 1);
            execvp(cmd[0], cmd);
            fprintf(stderr, "spawn_ranks: cannot run %s: %s\n", cmd[0], strerror(errno));
            _exit(127);
        }
        pids[r] = p;
    }
    int left = nproc, status = 0, killing = 0;
    double deadline = now() + timeout, kill_at = 0;
    while (left > 0) {
        int st;
        pid_t p = waitpid(-1, &st, WNOHANG);
        if (p > 0) {
            for (int r = 0; r < nproc; r++)
                if (pids[r] == p)
                    pids[r] = 0;
            left--;
            int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            if (code && !status) {
                status = code;
                fprintf(stderr, "spawn_ranks: a rank exited with status %d; stopping the others\n",
                        code);
            }
            if (code && !killing) {
                killing = 1;
                kill_at = now() + 2;
                for (int r = 0; r < nproc; r++)
                    if (pids[r])
                        kill(-pids[r], SIGTERM);
            }
            continue;
        }
        if (!killing && now() > deadline) {
            fprintf(stderr, "spawn_ranks: timeout after %g s; stopping all ranks\n", timeout);
            status = 124;
            killing = 1;
            kill_at = now() + 2;
            for (int r = 0; r < nproc; r++)
                if (pids[r])
                    kill(-pids[r], SIGTERM);
        }
        if (killing && now() > kill_at)
            for (int r = 0; r < nproc; r++)
                if (pids[r])
                    kill(-pids[r], SIGKILL);
        usleep(10000);
    }
    free(pids);
    return status;
}
