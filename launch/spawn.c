/* The local rank spawner behind `trident launch` (and `trident train --nproc`).
 *
 * Process layout: the launcher forks a "guard" first, which leads a new process group, then
 * one child per rank joining that group. The guard blocks reading a pipe whose only writer is
 * the launcher; when the launcher ends — normally, or killed with SIGKILL — the read returns
 * EOF and the guard SIGKILLs the whole group, so no rank and no process a rank started is
 * left behind. Ranks also get PR_SET_PDEATHSIG(SIGKILL).
 *
 * The launcher blocks SIGCHLD/SIGINT/SIGTERM/SIGHUP and polls a signalfd together with
 * every rank's stdout/stderr pipe; it copies each complete line out as "[rN] line". Rank
 * exits are observed with waitid(WNOWAIT), so the ranks stay zombies (their pids and the
 * group id cannot be reused) until the final reap. */
#include "launch/launch.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/core.h"

#define LINE_CAP 65536   /* longest line kept whole; longer ones are split */
#define READ_CHUNK 65536 /* bytes read from one pipe per poll round */
#define DRAIN_S 1.0      /* after the last rank exits: wait this long for pipes to close */

typedef struct {
    int fd;      /* read end, -1 once closed */
    int out_fd;  /* 1 or 2 */
    size_t len;  /* bytes of the unfinished line in buf */
    char *buf;   /* LINE_CAP bytes */
} out_stream;

typedef struct {
    pid_t pid;
    int done;      /* exit observed */
    int code;      /* CLD_EXITED / CLD_KILLED / CLD_DUMPED */
    int status;    /* exit status or signal */
    out_stream stream[2];
} rank_proc;

typedef struct {
    const char *name;
    int nproc, prefix;
    double grace_s, signal_grace_s;
    double stop_grace_s; /* the one in force for the stop under way */
    rank_proc *ranks;
    pid_t guard, pgid;
    int guard_fd; /* write end of the guard's pipe */
    int sigfd;
    sigset_t old_mask;
    struct sigaction old_pipe, old_chld;
    char *relay;  /* assembled output */
    size_t relay_len;
    struct pollfd *pfds;  /* signalfd + 2 pipes per rank */
    out_stream **owner;   /* the stream behind pfds[i] */
    int *owner_rank;
} launch_state;

/* ---- output relay -------------------------------------------------------------------- */

static void write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN) {
            struct pollfd pf = {.fd = fd, .events = POLLOUT};
            poll(&pf, 1, 100);
            continue;
        }
        if (w <= 0)
            return; /* stdout gone (EPIPE...): the ranks keep running, their output is lost */
        p += w;
        n -= (size_t)w;
    }
}

static void relay_flush(launch_state *s, int out_fd)
{
    write_all(out_fd, s->relay, s->relay_len);
    s->relay_len = 0;
}

/* Queue "[rN] " + line + "\n" for out_fd. */
static void relay_line(launch_state *s, int out_fd, int rank, const char *line, size_t n)
{
    char prefix[24];
    int plen = s->prefix ? snprintf(prefix, sizeof prefix, "[r%d] ", rank) : 0;
    if (s->relay_len + (size_t)plen + n + 1 > 2 * READ_CHUNK)
        relay_flush(s, out_fd);
    memcpy(s->relay + s->relay_len, prefix, (size_t)plen);
    s->relay_len += (size_t)plen;
    memcpy(s->relay + s->relay_len, line, n);
    s->relay_len += n;
    s->relay[s->relay_len++] = '\n';
}

/* Read what the pipe holds (one chunk) and pass complete lines on; at EOF the unfinished
 * line too. Returns 1 while the pipe stays open. */
static int relay_read(launch_state *s, int rank, out_stream *st)
{
    char chunk[READ_CHUNK];
    ssize_t got = read(st->fd, chunk, sizeof chunk);
    if (got < 0 && (errno == EINTR || errno == EAGAIN))
        return 1;
    if (got <= 0) {
        if (st->len)
            relay_line(s, st->out_fd, rank, st->buf, st->len);
        relay_flush(s, st->out_fd);
        st->len = 0;
        close(st->fd);
        st->fd = -1;
        return 0;
    }
    for (ssize_t i = 0; i < got; i++) {
        char c = chunk[i];
        if (c == '\n') {
            relay_line(s, st->out_fd, rank, st->buf, st->len);
            st->len = 0;
            continue;
        }
        if (st->len == LINE_CAP) {
            relay_line(s, st->out_fd, rank, st->buf, st->len);
            st->len = 0;
        }
        st->buf[st->len++] = c;
    }
    relay_flush(s, st->out_fd);
    return 1;
}

/* ---- starting processes -------------------------------------------------------------- */

static void child_fail(const char *what, const char *arg)
{
    const char *err = strerror(errno);
    char msg[512];
    int n = snprintf(msg, sizeof msg, "trident launch: cannot %s '%s': %s\n", what, arg, err);
    if (n > 0)
        write_all(2, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
}

/* The guard: leader of the ranks' process group; kills the group when the launcher's end of
 * its pipe closes. Only async-signal-safe calls between fork and _exit. */
static void run_guard(int read_fd, pid_t launcher)
{
    if (setpgid(0, 0) && getpgrp() != getpid())
        _exit(1); /* never kill(0, ...) a group that is not our own */
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    /* No PR_SET_PDEATHSIG here: SIGKILL would end the guard before it sees the EOF. */
    char c;
    if (getppid() == launcher) {
        while (read(read_fd, &c, 1) < 0 && errno == EINTR) {
        }
    }
    kill(0, SIGKILL); /* the whole group, the guard included */
    _exit(0);
}

static void run_rank(const launch_state *s, int devnull, int out_w, int err_w,
                     pid_t launcher, char *const argv[], char *const envp[])
{
    setpgid(0, s->pgid);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != launcher)
        _exit(1);
    sigprocmask(SIG_SETMASK, &s->old_mask, NULL);
    sigaction(SIGPIPE, &s->old_pipe, NULL);
    sigaction(SIGCHLD, &s->old_chld, NULL);
    if (dup2(devnull, 0) < 0 || dup2(out_w, 1) < 0 || dup2(err_w, 2) < 0)
        _exit(126);
    execvpe(argv[0], argv, envp);
    int saved = errno;
    child_fail("run", argv[0]);
    _exit(saved == ENOENT ? 127 : 126);
}

static int start_guard(launch_state *s)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC))
        return tr_fail(TR_ERR_INTERNAL, "pipe: %s", strerror(errno));
    pid_t launcher = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]), close(fds[1]);
        return tr_fail(TR_ERR_INTERNAL, "fork: %s", strerror(errno));
    }
    if (pid == 0) {
        close(fds[1]);
        run_guard(fds[0], launcher);
    }
    close(fds[0]);
    setpgid(pid, pid); /* also done by the guard: whichever runs first */
    s->guard = pid;
    s->guard_fd = fds[1];
    if (getpgid(pid) != pid)
        return tr_fail(TR_ERR_INTERNAL, "cannot give the ranks their own process group: %s",
                       strerror(errno));
    s->pgid = pid;
    return TR_OK;
}

static int start_rank(launch_state *s, int rank, int devnull, char *const argv[],
                      char *const envp[])
{
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC))
        return tr_fail(TR_ERR_INTERNAL, "pipe: %s", strerror(errno));
    if (pipe2(err, O_CLOEXEC)) {
        close(out[0]), close(out[1]);
        return tr_fail(TR_ERR_INTERNAL, "pipe: %s", strerror(errno));
    }
    pid_t launcher = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        close(out[0]), close(out[1]), close(err[0]), close(err[1]);
        return tr_fail(TR_ERR_INTERNAL, "fork for rank %d: %s", rank, strerror(errno));
    }
    if (pid == 0)
        run_rank(s, devnull, out[1], err[1], launcher, argv, envp);
    setpgid(pid, s->pgid);
    close(out[1]), close(err[1]);
    rank_proc *r = &s->ranks[rank];
    r->pid = pid;
    int joined = getpgid(pid) == s->pgid;
    int rd[2] = {out[0], err[0]};
    for (int k = 0; k < 2; k++) {
        fcntl(rd[k], F_SETFL, fcntl(rd[k], F_GETFL) | O_NONBLOCK);
        r->stream[k].fd = rd[k];
        r->stream[k].out_fd = k + 1;
    }
    if (!joined) {
        kill(pid, SIGKILL);
        return tr_fail(TR_ERR_INTERNAL, "rank %d could not join the ranks' process group",
                       rank);
    }
    return TR_OK;
}

/* ---- supervising --------------------------------------------------------------------- */

static void describe_exit(const rank_proc *r, char *out, size_t cap)
{
    if (r->code == CLD_EXITED)
        snprintf(out, cap, "exited with status %d", r->status);
    else
        snprintf(out, cap, "was killed by signal %d (SIG%s)", r->status,
                 sigabbrev_np(r->status) ? sigabbrev_np(r->status) : "?");
}

/* Marks ranks that have exited; returns the first newly failed rank or -1. */
static int poll_exits(launch_state *s, int *alive)
{
    int failed = -1;
    *alive = 0;
    for (int i = 0; i < s->nproc; i++) {
        rank_proc *r = &s->ranks[i];
        if (r->done)
            continue;
        siginfo_t si;
        memset(&si, 0, sizeof si);
        if (waitid(P_PID, (id_t)r->pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid) {
            r->done = 1;
            r->code = si.si_code;
            r->status = si.si_status;
            if ((r->code != CLD_EXITED || r->status != 0) && failed < 0)
                failed = i;
        } else {
            (*alive)++;
        }
    }
    return failed;
}

/* The signal that stopped the last supervised job (0: none): tells a restart loop a failure
 * from a stop someone asked for. */
static int last_stop_signal;
int tr_launch_last_stop_signal(void) { return last_stop_signal; }

static int exit_code_of(const rank_proc *r)
{
    int code = r->code == CLD_EXITED ? r->status : 128 + r->status;
    return code > 0 ? code : 1;
}

static int supervise(launch_state *s)
{
    int exit_code = 0, alive = s->nproc;
    struct pollfd *pfds = s->pfds;
    out_stream **owner = s->owner;
    int *owner_rank = s->owner_rank;
    double stop_at = -1, killed_at = -1, all_done_at = -1;
    int stop_rank = -1;
    for (;;) {
        int failed = poll_exits(s, &alive);
        if (failed >= 0 && stop_at < 0) {
            char how[96];
            describe_exit(&s->ranks[failed], how, sizeof how);
            fprintf(stderr, "%s: rank %d %s; stopping the other ranks\n", s->name, failed, how);
            exit_code = exit_code_of(&s->ranks[failed]);
            stop_rank = failed;
            stop_at = tr_now();
            s->stop_grace_s = s->grace_s;
            killpg(s->pgid, SIGTERM);
            killpg(s->pgid, SIGCONT); /* a stopped (frozen) rank acts on it too */
        }
        double now = tr_now();
        if (stop_at >= 0 && killed_at < 0 && alive > 0 && now - stop_at >= s->stop_grace_s) {
            fprintf(stderr, "%s: %d rank%s still running %.1f s after SIGTERM; sending SIGKILL\n",
                    s->name, alive, alive == 1 ? "" : "s", s->stop_grace_s);
            killpg(s->pgid, SIGKILL);
            killed_at = now;
        }
        if (alive == 0 && all_done_at < 0)
            all_done_at = now;
        /* Once the ranks are gone, only processes they left behind can hold the pipes. */
        if (all_done_at >= 0 && killed_at < 0 && now - all_done_at >= DRAIN_S) {
            killpg(s->pgid, SIGKILL);
            killed_at = now;
        }
        int n = 0;
        pfds[n++] = (struct pollfd){.fd = s->sigfd, .events = POLLIN};
        for (int i = 0; i < s->nproc; i++)
            for (int k = 0; k < 2; k++) {
                out_stream *st = &s->ranks[i].stream[k];
                if (st->fd < 0)
                    continue;
                owner[n] = st, owner_rank[n] = i;
                pfds[n++] = (struct pollfd){.fd = st->fd, .events = POLLIN};
            }
        if (alive == 0 && (n == 1 || (killed_at >= 0 && now - killed_at >= DRAIN_S)))
            break;
        int timeout_ms = 500;
        if (stop_at >= 0 && killed_at < 0 && alive > 0)
            timeout_ms = (int)((stop_at + s->stop_grace_s - now) * 1000) + 1;
        if (timeout_ms < 1)
            timeout_ms = 1;
        if (timeout_ms > 500)
            timeout_ms = 500;
        if (poll(pfds, (nfds_t)n, timeout_ms) < 0 && errno != EINTR)
            break;
        if (pfds[0].revents & POLLIN) {
            struct signalfd_siginfo si;
            while (read(s->sigfd, &si, sizeof si) == (ssize_t)sizeof si) {
                int sig = (int)si.ssi_signo;
                if (sig == SIGCHLD)
                    continue;
                if (stop_at < 0) {
                    fprintf(stderr, "%s: received SIG%s; stopping the ranks\n", s->name,
                            sigabbrev_np(sig));
                    exit_code = 128 + sig;
                    last_stop_signal = sig;
                    stop_at = tr_now();
                    s->stop_grace_s = s->signal_grace_s;
                    killpg(s->pgid, SIGTERM);
                    killpg(s->pgid, SIGCONT);
                } else if (killed_at < 0) {
                    fprintf(stderr, "%s: received SIG%s again; killing the ranks\n", s->name,
                            sigabbrev_np(sig));
                    killpg(s->pgid, SIGKILL);
                    killed_at = tr_now();
                }
            }
        }
        for (int i = 1; i < n; i++)
            if (pfds[i].revents & (POLLIN | POLLHUP | POLLERR))
                relay_read(s, owner_rank[i], owner[i]);
    }
    /* Close the pipes of processes that outlived their rank, then stop them all. */
    for (int i = 0; i < s->nproc; i++)
        for (int k = 0; k < 2; k++) {
            out_stream *st = &s->ranks[i].stream[k];
            if (st->fd >= 0) {
                if (st->len)
                    relay_line(s, st->out_fd, i, st->buf, st->len), relay_flush(s, st->out_fd);
                close(st->fd);
                st->fd = -1;
            }
        }
    if (stop_rank < 0 && stop_at >= 0 && killed_at < 0) {
        /* stopped by a signal, and every rank ended on its own with status 0 (a rank with
         * training.exit_signal_handler saves and exits 0): the job succeeded */
        int clean = 1;
        for (int i = 0; i < s->nproc; i++)
            clean &= s->ranks[i].code == CLD_EXITED && s->ranks[i].status == 0;
        if (clean)
            exit_code = 0;
    }
    if (stop_rank >= 0)
        fprintf(stderr, "%s: all ranks stopped %.2f s after rank %d failed; exit status %d\n",
                s->name, tr_now() - stop_at, stop_rank, exit_code);
    else if (stop_at >= 0)
        fprintf(stderr, "%s: all ranks stopped %.2f s after the stop request; exit status %d\n",
                s->name, tr_now() - stop_at, exit_code);
    return exit_code;
}

/* ---- the public entry ---------------------------------------------------------------- */

static void reap_all(launch_state *s)
{
    if (s->guard_fd >= 0) {
        close(s->guard_fd); /* the guard SIGKILLs what is left of the group */
        s->guard_fd = -1;
    }
    if (s->guard > 0)
        while (waitpid(s->guard, NULL, 0) < 0 && errno == EINTR) {
        }
    for (int i = 0; i < s->nproc; i++)
        if (s->ranks[i].pid > 0)
            while (waitpid(s->ranks[i].pid, NULL, 0) < 0 && errno == EINTR) {
            }
}

int tr_launch_local(const tr_launch_options *opts, char *const argv[], int *exit_code)
{
    *exit_code = 1;
    last_stop_signal = 0;
    tr_launch_plan plan;
    int rc = tr_launch_plan_make(opts, &plan);
    if (rc)
        return rc;
    if (!argv || !argv[0] || !argv[0][0]) {
        tr_launch_plan_free(&plan);
        return tr_fail(TR_ERR_CONFIG, "no command to launch");
    }
    launch_state s = {.name = opts->name ? opts->name : "trident launch",
                      .nproc = opts->nproc,
                      .prefix = !opts->no_prefix,
                      .grace_s = opts->grace_s > 0 ? opts->grace_s : 3.0,
                      .signal_grace_s = opts->signal_grace_s > 0 ? opts->signal_grace_s
                                        : opts->grace_s > 0       ? opts->grace_s
                                                                  : 3.0,
                      .guard_fd = -1,
                      .sigfd = -1};
    s.ranks = calloc((size_t)s.nproc, sizeof *s.ranks);
    s.relay = malloc(2 * READ_CHUNK + LINE_CAP + 64);
    s.pfds = calloc(1 + 2 * (size_t)s.nproc, sizeof *s.pfds);
    s.owner = calloc(1 + 2 * (size_t)s.nproc, sizeof *s.owner);
    s.owner_rank = calloc(1 + 2 * (size_t)s.nproc, sizeof *s.owner_rank);
    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (!s.ranks || !s.relay || !s.pfds || !s.owner || !s.owner_rank || devnull < 0) {
        rc = tr_fail(TR_ERR_NOMEM, "launcher state for %d ranks", s.nproc);
        goto out;
    }
    for (int i = 0; i < s.nproc; i++)
        for (int k = 0; k < 2; k++) {
            s.ranks[i].stream[k].fd = -1;
            s.ranks[i].stream[k].buf = malloc(LINE_CAP);
            if (!s.ranks[i].stream[k].buf) {
                rc = tr_fail(TR_ERR_NOMEM, "line buffers for %d ranks", s.nproc);
                goto out;
            }
        }
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD), sigaddset(&mask, SIGINT), sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGHUP);
    struct sigaction ign = {.sa_handler = SIG_IGN}, dfl = {.sa_handler = SIG_DFL};
    sigaction(SIGPIPE, &ign, &s.old_pipe);
    sigaction(SIGCHLD, &dfl, &s.old_chld);
    sigprocmask(SIG_BLOCK, &mask, &s.old_mask);
    s.sigfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
    if (s.sigfd < 0) {
        rc = tr_fail(TR_ERR_INTERNAL, "signalfd: %s", strerror(errno));
        goto restore;
    }
    fflush(stdout);
    fflush(stderr);
    rc = start_guard(&s);
    for (int i = 0; !rc && i < s.nproc; i++)
        rc = start_rank(&s, i, devnull, argv, plan.envp[i]);
    if (rc) {
        if (s.pgid > 0)
            killpg(s.pgid, SIGKILL);
        for (int i = 0; i < s.nproc; i++)
            for (int k = 0; k < 2; k++)
                if (s.ranks[i].stream[k].fd >= 0)
                    close(s.ranks[i].stream[k].fd);
    } else {
        *exit_code = supervise(&s);
    }
    reap_all(&s);
restore:
    if (s.sigfd >= 0)
        close(s.sigfd);
    sigprocmask(SIG_SETMASK, &s.old_mask, NULL);
    sigaction(SIGPIPE, &s.old_pipe, NULL);
    sigaction(SIGCHLD, &s.old_chld, NULL);
out:
    if (devnull >= 0)
        close(devnull);
    if (s.ranks)
        for (int i = 0; i < s.nproc; i++)
            for (int k = 0; k < 2; k++)
                free(s.ranks[i].stream[k].buf);
    free(s.ranks);
    free(s.relay);
    free(s.pfds);
    free(s.owner);
    free(s.owner_rank);
    tr_launch_plan_free(&plan);
    return rc;
}
