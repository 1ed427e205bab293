/* A rank's identity: the environment the launcher gives each local rank (tr_launch_plan_*)
 * and what a rank reads back from its environment (tr_env_detect), whoever started it. */
#include "launch/launch.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "comm/comm.h"
#include "core/core.h"

extern char **environ;

#define DEFAULT_MULTINODE_PORT 29500
#define MAX_LOCAL_RANKS 4096

/* ---- helpers ------------------------------------------------------------------------- */

/* Strict decimal integer from variable `name`; *found = 0 when unset. */
static int env_int(const char *name, int min, int max, int *out, int *found)
{
    const char *v = getenv(name);
    *found = v != NULL;
    if (!v)
        return TR_OK;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (!*v || *end || errno || x < min || x > max)
        return tr_fail(TR_ERR_CONFIG, "%s='%s': expected an integer in [%d, %d]", name, v, min,
                       max);
    *out = (int)x;
    return TR_OK;
}

static int usable_cores(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* 0 when port p of 127.0.0.1 (0: the kernel's choice, read back into *p) can be bound now */
static int bindable(int *p)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)*p)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    int rc = bind(fd, (struct sockaddr *)&a, sizeof a) ||
                     getsockname(fd, (struct sockaddr *)&a, &len)
                 ? -1
                 : 0;
    int e = errno;
    close(fd);
    errno = e;
    if (!rc)
        *p = ntohs(a.sin_port);
    return rc;
}

/* A port nobody listens on now, below the kernel's ephemeral range where it can: the ranks'
 * and every other process's outgoing connections take their local ports from that range, and
 * one may take the port between this check and rank 0's listen (seen in CI: "cannot listen
 * ... Address already in use"). Else the kernel's choice (bind port 0). */
static int free_local_port(int *port)
{
    int low = 32768;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f) {
        if (fscanf(f, "%d", &low) != 1)
            low = 32768;
        fclose(f);
    }
    uint32_t r = 0;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r)
        r = (uint32_t)getpid() * 2654435761u;
    for (int i = 0; low > 10000 && i < 64; i++) {
        r = r * 1664525u + 1013904223u; /* (an LCG: any spread of tries will do) */
        int p = 10000 + (int)((r >> 8) % (uint32_t)(low - 10000));
        if (!bindable(&p)) {
            *port = p;
            return TR_OK;
        }
    }
    int p = 0;
    if (bindable(&p))
        return tr_fail(TR_ERR_COMM, "cannot find a free port on 127.0.0.1: %s", strerror(errno));
    *port = p;
    return TR_OK;
}

/* The job token when TRIDENT_JOB_TOKEN is unset: 128 random bits on one node. Several nodes'
 * launchers cannot agree on a random one: the scheduler's job identity (the ranks derive the
 * same one themselves, so it is not exported), else TR_ERR_CONFIG saying how to pass one. */
static int make_token(const tr_launch_plan *p, char *out, size_t cap, int *exported)
{
    *exported = 1;
    if (p->nnodes > 1) {
        char source[256];
        tr_comm_job_identity(out, cap, source, sizeof source);
        *exported = 0;
        if (out[0])
            return TR_OK;
        return tr_fail(TR_ERR_CONFIG,
                       "--nnodes %d: no job token: every node's launcher needs the same secret "
                       "one, and none can make it for the others. Export "
                       "TRIDENT_JOB_TOKEN=<random value> with the same value on every node "
                       "(e.g. TRIDENT_JOB_TOKEN=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \\n') "
                       "once, passed on through ssh or the job script), or run under Slurm, "
                       "torchrun or Open MPI, whose job id is used",
                       p->nnodes);
    }
    uint64_t r[2] = {0, 0};
    ssize_t got = getrandom(r, sizeof r, 0); /* blocks only before the kernel's pool is ready */
    if (got != (ssize_t)sizeof r) {
        FILE *f = fopen("/dev/urandom", "rb");
        got = f && fread(r, 1, sizeof r, f) == sizeof r ? (ssize_t)sizeof r : -1;
        if (f)
            fclose(f);
    }
    if (got != (ssize_t)sizeof r)
        return tr_fail(TR_ERR_IO, "cannot draw a random job token (getrandom, /dev/urandom): %s",
                       strerror(errno));
    snprintf(out, cap, "%016llx%016llx", (unsigned long long)r[0], (unsigned long long)r[1]);
    return TR_OK;
}

/* ---- the launcher's plan ------------------------------------------------------------- */

static const char *const forced_keys[] = {"RANK",        "WORLD_SIZE",       "LOCAL_RANK",
                                          "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"};

static int is_forced(const char *entry)
{
    for (size_t i = 0; i < sizeof forced_keys / sizeof forced_keys[0]; i++) {
        size_t n = strlen(forced_keys[i]);
        if (!strncmp(entry, forced_keys[i], n) && entry[n] == '=')
            return 1;
    }
    return 0;
}

static char *own(tr_launch_plan *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *own(tr_launch_plan *p, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    char **grown = realloc(p->owned, (size_t)(p->n_owned + 1) * sizeof *grown);
    if (!grown)
        return NULL;
    p->owned = grown;
    char *s = strdup(buf);
    if (s)
        p->owned[p->n_owned++] = s;
    return s;
}

int tr_launch_plan_make(const tr_launch_options *opts, tr_launch_plan *out)
{
    memset(out, 0, sizeof *out);
    tr_launch_plan *p = out;
    int nnodes = opts->nnodes > 0 ? opts->nnodes : 1;
    if (opts->nproc < 1 || opts->nproc > MAX_LOCAL_RANKS)
        return tr_fail(TR_ERR_CONFIG, "--nproc %d: expected 1 to %d local ranks", opts->nproc,
                       MAX_LOCAL_RANKS);
    if (opts->nnodes < 0 || (long long)nnodes * opts->nproc > INT_MAX)
        return tr_fail(TR_ERR_CONFIG, "--nnodes %d: expected at least 1 (and a world that fits)",
                       opts->nnodes);
    if (opts->node_rank < 0 || opts->node_rank >= nnodes)
        return tr_fail(TR_ERR_CONFIG, "--node-rank %d: expected 0 to %d for %d node%s",
                       opts->node_rank, nnodes - 1, nnodes, nnodes == 1 ? "" : "s");
    if (nnodes > 1 && (!opts->master_addr || !*opts->master_addr))
        return tr_fail(TR_ERR_CONFIG, "--master-addr is required with --nnodes %d (the address "
                                      "of node 0, where rank 0 serves the store)", nnodes);
    if (opts->master_port < 0 || opts->master_port > 65535)
        return tr_fail(TR_ERR_CONFIG, "--master-port %d: expected 1 to 65535 (or 0 to choose)",
                       opts->master_port);
    const char *addr = opts->master_addr && *opts->master_addr ? opts->master_addr : "127.0.0.1";
    if (strlen(addr) >= sizeof p->master_addr)
        return tr_fail(TR_ERR_CONFIG, "--master-addr '%.40s...' is longer than %zu bytes", addr,
                       sizeof p->master_addr - 1);
    p->nproc = opts->nproc;
    p->nnodes = nnodes;
    p->node_rank = opts->node_rank;
    p->world_size = nnodes * opts->nproc;
    snprintf(p->master_addr, sizeof p->master_addr, "%s", addr);
    p->master_port = opts->master_port;
    if (!p->master_port) {
        if (nnodes > 1)
            p->master_port = DEFAULT_MULTINODE_PORT;
        else if (free_local_port(&p->master_port))
            return TR_ERR_COMM;
    }
    const char *token = getenv("TRIDENT_JOB_TOKEN");
    int export_token = 0;
    if (token && *token) {
        if (strlen(token) >= sizeof p->job_token)
            return tr_fail(TR_ERR_CONFIG, "TRIDENT_JOB_TOKEN is longer than %zu bytes",
                           sizeof p->job_token - 1);
        snprintf(p->job_token, sizeof p->job_token, "%s", token);
    } else if (make_token(p, p->job_token, sizeof p->job_token, &export_token)) {
        return TR_ERR_CONFIG;
    }
    p->threads_per_rank = usable_cores() / p->nproc;
    if (p->threads_per_rank < 1)
        p->threads_per_rank = 1;

    /* The shared part: the launcher's environment less the forced keys, plus the job's. */
    int n_env = 0;
    for (char **e = environ; e && *e; e++)
        n_env++;
    char **common = calloc((size_t)n_env + 16, sizeof *common);
    p->envp = calloc((size_t)p->nproc, sizeof *p->envp);
    if (!common || !p->envp) {
        free(common);
        tr_launch_plan_free(p);
        return tr_fail(TR_ERR_NOMEM, "environment for %d ranks", opts->nproc);
    }
    int nc = 0, ok = 1;
    for (char **e = environ; e && *e; e++)
        if (!is_forced(*e))
            common[nc++] = *e;
#define ADD(...)                                   \
    do {                                           \
        char *s_ = own(p, __VA_ARGS__);            \
        ok &= s_ != NULL;                          \
        if (s_)                                    \
            common[nc++] = s_;                     \
    } while (0)
    ADD("WORLD_SIZE=%d", p->world_size);
    ADD("LOCAL_WORLD_SIZE=%d", p->nproc);
    ADD("MASTER_ADDR=%s", p->master_addr);
    ADD("MASTER_PORT=%d", p->master_port);
    if (export_token)
        ADD("TRIDENT_JOB_TOKEN=%s", p->job_token);
    if (!getenv("OPENBLAS_NUM_THREADS"))
        ADD("OPENBLAS_NUM_THREADS=%d", p->threads_per_rank);
    if (!getenv("OMP_NUM_THREADS"))
        ADD("OMP_NUM_THREADS=%d", p->threads_per_rank);
    if (!getenv("OPENBLAS_CORETYPE") && __builtin_cpu_supports("avx512f"))
        ADD("OPENBLAS_CORETYPE=SkylakeX");
#undef ADD
    for (int i = 0; ok && i < p->nproc; i++) {
        char **env = calloc((size_t)nc + 3, sizeof *env);
        char *rank = own(p, "RANK=%d", p->node_rank * p->nproc + i);
        char *local = own(p, "LOCAL_RANK=%d", i);
        if (!env || !rank || !local) {
            free(env);
            ok = 0;
            break;
        }
        memcpy(env, common, (size_t)nc * sizeof *env);
        env[nc] = rank;
        env[nc + 1] = local;
        p->envp[i] = env;
    }
    free(common);
    if (!ok) {
        tr_launch_plan_free(p);
        return tr_fail(TR_ERR_NOMEM, "environment for %d ranks", opts->nproc);
    }
    return TR_OK;
}

void tr_launch_plan_free(tr_launch_plan *plan)
{
    if (plan->envp)
        for (int i = 0; i < plan->nproc; i++)
            free(plan->envp[i]);
    free(plan->envp);
    for (int i = 0; i < plan->n_owned; i++)
        free(plan->owned[i]);
    free(plan->owned);
    memset(plan, 0, sizeof *plan);
}

/* ---- reading the identity back ------------------------------------------------------- */

static int set_str(char *dst, size_t cap, const char *src, const char *what)
{
    if (strlen(src) >= cap)
        return tr_fail(TR_ERR_CONFIG, "%s '%.40s...' is longer than %zu bytes", what, src,
                       cap - 1);
    snprintf(dst, cap, "%s", src);
    return TR_OK;
}

/* "2(x3),1" (SLURM_TASKS_PER_NODE): the task count of node `node`. */
static int tasks_on_node(const char *name, const char *v, int node, int *out)
{
    int index = 0;
    for (const char *p = v; *p;) {
        char *end;
        long count = strtol(p, &end, 10), repeat = 1;
        if (end == p || count < 1 || count > INT_MAX)
            goto bad;
        p = end;
        if (!strncmp(p, "(x", 2)) {
            repeat = strtol(p + 2, &end, 10);
            if (end == p + 2 || *end != ')' || repeat < 1)
                goto bad;
            p = end + 1;
        }
        if (node < index + repeat) {
            *out = (int)count;
            return TR_OK;
        }
        index += (int)repeat;
        if (*p == ',')
            p++;
        else if (*p)
            goto bad;
    }
    return tr_fail(TR_ERR_CONFIG, "%s='%s' lists %d nodes; this is node %d", name, v, index,
                   node);
bad:
    return tr_fail(TR_ERR_CONFIG, "%s='%s': expected counts like '4' or '2(x3),1'", name, v);
}

static int detect_torchrun(tr_rank_env *o)
{
    int f, rc = env_int("WORLD_SIZE", 1, INT_MAX, &o->world_size, &f);
    rc = rc ? rc : env_int("RANK", 0, o->world_size - 1, &o->rank, &f);
    o->local_rank = o->rank;
    o->local_world_size = o->world_size;
    rc = rc ? rc : env_int("LOCAL_WORLD_SIZE", 1, o->world_size, &o->local_world_size, &f);
    rc = rc ? rc : env_int("LOCAL_RANK", 0, o->local_world_size - 1, &o->local_rank, &f);
    if (!rc && !f && o->local_rank >= o->local_world_size)
        rc = tr_fail(TR_ERR_CONFIG, "RANK=%d but LOCAL_RANK is not set and LOCAL_WORLD_SIZE=%d",
                     o->rank, o->local_world_size);
    return rc;
}

static int detect_openmpi(tr_rank_env *o)
{
    int f, rc = env_int("OMPI_COMM_WORLD_SIZE", 1, INT_MAX, &o->world_size, &f);
    rc = rc ? rc : env_int("OMPI_COMM_WORLD_RANK", 0, o->world_size - 1, &o->rank, &f);
    o->local_world_size = 1;
    rc = rc ? rc : env_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1, o->world_size, &o->local_world_size,
                           &f);
    rc = rc ? rc : env_int("OMPI_COMM_WORLD_LOCAL_RANK", 0, o->local_world_size - 1,
                           &o->local_rank, &f);
    return rc;
}

static int detect_slurm(tr_rank_env *o)
{
    int f, node = 0, rc = env_int("SLURM_NTASKS", 1, INT_MAX, &o->world_size, &f);
    if (!rc && !f)
        rc = env_int("SLURM_NPROCS", 1, INT_MAX, &o->world_size, &f);
    rc = rc ? rc : env_int("SLURM_PROCID", 0, o->world_size - 1, &o->rank, &f);
    rc = rc ? rc : env_int("SLURM_NODEID", 0, INT_MAX, &node, &f);
    if (rc)
        return rc;
    o->local_world_size = 0;
    rc = env_int("SLURM_NTASKS_PER_NODE", 1, o->world_size, &o->local_world_size, &f);
    static const char *lists[] = {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"};
    for (size_t i = 0; !rc && !o->local_world_size && i < 2; i++) {
        const char *v = getenv(lists[i]);
        if (v)
            rc = tasks_on_node(lists[i], v, node, &o->local_world_size);
    }
    if (!rc && !o->local_world_size)
        o->local_world_size = 1;
    rc = rc ? rc : env_int("SLURM_LOCALID", 0, o->local_world_size - 1, &o->local_rank, &f);
    return rc;
}

/* Rank 0's host from a Slurm node list variable, if one is set. */
static int slurm_first_host(tr_rank_env *o, int *found)
{
    static const char *vars[] = {"SLURM_STEP_NODELIST", "SLURM_NODELIST", "SLURM_JOB_NODELIST"};
    *found = 0;
    for (size_t i = 0; i < 3; i++) {
        const char *v = getenv(vars[i]);
        if (!v)
            continue;
        *found = 1;
        if (tr_hostlist_host(v, 0, o->master_addr, sizeof o->master_addr))
            return tr_fail_context(TR_ERR_CONFIG, "%s", vars[i]);
        return TR_OK;
    }
    return TR_OK;
}

int tr_env_detect(tr_rank_env *out)
{
    memset(out, 0, sizeof *out);
    tr_rank_env *o = out;
    int rc;
    if (getenv("RANK") && getenv("WORLD_SIZE")) {
        snprintf(o->source, sizeof o->source, "torchrun-env");
        rc = detect_torchrun(o);
    } else if (getenv("OMPI_COMM_WORLD_RANK") && getenv("OMPI_COMM_WORLD_SIZE")) {
        snprintf(o->source, sizeof o->source, "openmpi");
        rc = detect_openmpi(o);
    } else if (getenv("SLURM_PROCID") && (getenv("SLURM_NTASKS") || getenv("SLURM_NPROCS"))) {
        snprintf(o->source, sizeof o->source, "slurm");
        rc = detect_slurm(o);
        /* the batch script (or salloc's shell) has the job's SLURM_NTASKS and SLURM_PROCID=0
         * but is no task of a step: rank 0 would wait for ranks that never come */
        if (!rc && o->world_size > 1 && !getenv("SLURM_STEP_ID") && !getenv("SLURM_STEPID"))
            rc = tr_fail(TR_ERR_CONFIG,
                         "SLURM_NTASKS=%d but no SLURM_STEP_ID: this is Slurm's batch script "
                         "(or salloc's shell), not a task of a job step; start one task per "
                         "rank with srun (srun trident ...), or this node's ranks with --nproc N",
                         o->world_size);
    } else {
        snprintf(o->source, sizeof o->source, "single");
        o->world_size = o->local_world_size = 1;
        rc = TR_OK;
    }
    if (rc)
        return rc;
    /* the job's identity, as the rendezvous derives it (comm/): "" when there is none */
    const char *token = getenv("TRIDENT_JOB_TOKEN");
    if (token && *token && strlen(token) >= sizeof o->job_token)
        return tr_fail(TR_ERR_CONFIG, "TRIDENT_JOB_TOKEN is longer than %zu bytes",
                       sizeof o->job_token - 1);
    tr_comm_job_identity(o->job_token, sizeof o->job_token, NULL, 0);

    /* Master: MASTER_ADDR wins; one node needs none; else the launcher's environment. */
    const char *addr = getenv("MASTER_ADDR");
    int found = 0;
    if (addr && *addr) {
        rc = set_str(o->master_addr, sizeof o->master_addr, addr, "MASTER_ADDR");
    } else if (o->local_world_size == o->world_size) {
        snprintf(o->master_addr, sizeof o->master_addr, "127.0.0.1");
    } else if (strcmp(o->source, "torchrun-env")) {
        rc = slurm_first_host(o, &found);
        if (!rc && !found)
            rc = tr_fail(TR_ERR_CONFIG,
                         "%s: rank %d of %d spans nodes but neither MASTER_ADDR nor a Slurm "
                         "node list is set; export MASTER_ADDR=<host of rank 0>",
                         o->source, o->rank, o->world_size);
    } else {
        rc = tr_fail(TR_ERR_CONFIG, "RANK=%d WORLD_SIZE=%d LOCAL_WORLD_SIZE=%d spans nodes but "
                                    "MASTER_ADDR is not set",
                     o->rank, o->world_size, o->local_world_size);
    }
    if (rc)
        return rc;
    o->master_port = DEFAULT_MULTINODE_PORT;
    const char *job = getenv("SLURM_JOB_ID"), *step = getenv("SLURM_STEP_ID");
    if (!strcmp(o->source, "slurm") && job) {
        /* jobs and steps sharing a node must not share the store's port (with 29500 for all,
         * the second failed: 'Address already in use'): one of 10000-29999 from job.step
         * (not from TRIDENT_JOB_TOKEN, which every step of a job script may share) */
        char id[128];
        snprintf(id, sizeof id, "slurm-%.60s.%.30s", job, step && *step ? step : "0");
        o->master_port = 10000 + (int)(tr_hash_name(id) % 20000);
    }
    return env_int("MASTER_PORT", 1, 65535, &o->master_port, &found);
}
