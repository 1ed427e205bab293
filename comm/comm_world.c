/* The world communicator from a rendezvous (tr_comm_init: the backend chosen from the
 * config) or from the launcher's environment (tr_comm_init_world: torchrun's, Open MPI's or
 * Slurm's variables), and the job's identity for the store's session. Split from comm.c. */
#include "comm/comm_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tr_comm_init(const tr_comm_rendezvous *rv, const tr_comm_config *cfg_in, tr_comm **out)
{
    if (!out || !rv)
        return tr_fail(TR_ERR_INVALID, "comm: init needs a rendezvous and an output pointer");
    *out = NULL;
    tr_comm_config cfg = cfg_in ? *cfg_in : tr_comm_config_default();
    if (!(cfg.timeout_s > 0))
        return tr_fail(TR_ERR_CONFIG, "comm: timeout must be > 0 seconds (got %g)", cfg.timeout_s);
    if (!cfg.name || !*cfg.name)
        cfg.name = "world";
    if (strlen(cfg.name) >= TR_COMM_MAX_NAME)
        return tr_fail(TR_ERR_CONFIG, "comm: name '%s' longer than %d characters", cfg.name,
                       TR_COMM_MAX_NAME - 1);
    int rank = rv->rank, size = rv->size, port = rv->master_port;
    const char *host = rv->master_addr;
    if (size < 1 || size > (1 << 20) || rank < 0 || rank >= size)
        return tr_fail(TR_ERR_CONFIG, "comm: rank %d of world size %d is impossible", rank, size);
    int need_store = size > 1 || (host && *host);
    if (need_store && (!host || !*host))
        return tr_fail(TR_ERR_CONFIG, "comm: a world of %d ranks needs MASTER_ADDR", size);
    if (need_store && (port < 1 || port > 65535))
        return tr_fail(TR_ERR_CONFIG, "comm: MASTER_PORT %d out of range 1..65535", port);
    if (size > 1 && (!rv->job_token || !*rv->job_token))
        return tr_fail(TR_ERR_CONFIG,
                       "comm: rank %d of %d: no job identity, so ranks of any other job could "
                       "join this one: none of TRIDENT_JOB_TOKEN, TORCHELASTIC_RUN_ID, "
                       "PMIX_NAMESPACE, OMPI_MCA_ess_base_jobid, OMPI_MCA_orte_hnp_uri or "
                       "SLURM_JOB_ID is set. Start the ranks with `trident launch` (or `trident "
                       "train --nproc N`), torchrun, srun or mpirun, or export "
                       "TRIDENT_JOB_TOKEN=<one random value> on every rank",
                       rank, size);
    tr_log_set_rank(rank);
    int rc;
    switch (cfg.backend) {
    case TR_COMM_BACKEND_UCX:
        rc = comm_ucx_init(rv, &cfg, out);
        break;
    case TR_COMM_BACKEND_NCCL:
#ifdef TR_HAVE_CUDA
        rc = comm_nccl_init(rv, &cfg, out);
        break;
#else
        return tr_fail(TR_ERR_CONFIG, "comm: the nccl backend is not in this build (it needs "
                                      "CUDA: -Dcuda=enabled)");
#endif
    default:
        return tr_fail(TR_ERR_CONFIG, "comm: unknown backend %d (expected TR_COMM_BACKEND_UCX "
                                      "or TR_COMM_BACKEND_NCCL)",
                       (int)cfg.backend);
    }
    /* refused at the store for its identity or world size: say where this rank's came from */
    if (rc == TR_ERR_CONFIG && rv->job_identity_source &&
        (strstr(tr_errmsg(), "rejected this rank") || strstr(tr_errmsg(), "rendezvous was stopped"))) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", tr_errmsg());
        rc = tr_fail(rc, "%s (this rank's job identity: %s, WORLD_SIZE=%d; every rank of one "
                         "job needs the same)", msg, rv->job_identity_source, size);
    }
    return rc;
}

/* "NAME='value'" for messages (value cut short, control characters as '?'). */
static void describe_var(char *out, size_t cap, const char *name, const char *value)
{
    char v[81];
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)value; *p && n < sizeof v - 1; p++)
        v[n++] = *p < 0x20 || *p == 0x7f ? '?' : (char)*p;
    v[n] = 0;
    snprintf(out, cap, "%s='%s'%s", name, v, value[n] ? "..." : "");
}

void tr_comm_job_identity(char *token, size_t cap, char *source, size_t source_cap)
{
    static const char *const openmpi[] = {"PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid",
                                          "OMPI_MCA_orte_hnp_uri"};
    const char *v, *found = NULL;
    char src[256] = "";
    token[0] = 0;
    if ((v = getenv("TRIDENT_JOB_TOKEN")) && *v) {
        snprintf(token, cap, "%s", v);
        snprintf(src, sizeof src, "TRIDENT_JOB_TOKEN");
    } else if ((v = getenv("TORCHELASTIC_RUN_ID")) && *v) {
        snprintf(token, cap, "torchrun-%.100s", v);
        describe_var(src, sizeof src, "TORCHELASTIC_RUN_ID", v);
    } else {
        for (size_t i = 0; !found && i < sizeof openmpi / sizeof openmpi[0]; i++)
            if ((v = getenv(openmpi[i])) && *v)
                found = openmpi[i];
        if (found) {
            snprintf(token, cap, "openmpi-%.100s", v);
            describe_var(src, sizeof src, found, v);
        } else if ((v = getenv("SLURM_JOB_ID")) && *v) {
            const char *step = getenv("SLURM_STEP_ID");
            step = step && *step ? step : "batch"; /* the batch script has no SLURM_STEP_ID */
            snprintf(token, cap, "slurm-%.60s.%.30s", v, step);
            char a[128], b[128];
            describe_var(a, sizeof a, "SLURM_JOB_ID", v);
            describe_var(b, sizeof b, "SLURM_STEP_ID", step);
            snprintf(src, sizeof src, "%s %s", a, b);
        }
    }
    if (source && source_cap)
        snprintf(source, source_cap, "%s", src[0] ? src : "none");
}

static int env_int(const char *name, int lo, int hi, int dflt, int required, int *out)
{
    const char *v = getenv(name);
    if (!v || !*v) {
        if (required)
            return tr_fail(TR_ERR_CONFIG, "comm: environment variable %s is not set (start ranks "
                                          "with `trident launch`)",
                           name);
        *out = dflt;
        return TR_OK;
    }
    char *end = NULL;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi)
        return tr_fail(TR_ERR_CONFIG, "comm: %s='%s' is not an integer in %d..%d", name, v, lo, hi);
    *out = (int)x;
    return TR_OK;
}

int tr_comm_init_world(const tr_comm_config *cfg, tr_comm **out)
{
    if (!out)
        return tr_fail(TR_ERR_INVALID, "comm: init_world needs an output pointer");
    *out = NULL;
    char token[TR_STORE_MAX_KEY + 1], source[256];
    tr_comm_job_identity(token, sizeof token, source, sizeof source);
    tr_comm_rendezvous rv = {.master_addr = getenv("MASTER_ADDR"), .job_token = token,
                             .job_identity_source = source};
    int rc = env_int("WORLD_SIZE", 1, 1 << 20, 1, 0, &rv.size);
    if (!rc)
        rc = env_int("RANK", 0, rv.size - 1, 0, rv.size > 1, &rv.rank);
    int need_store = rv.size > 1 || (rv.master_addr && *rv.master_addr);
    if (!rc && need_store && (!rv.master_addr || !*rv.master_addr))
        rc = tr_fail(TR_ERR_CONFIG, "comm: MASTER_ADDR is not set (start ranks with `trident "
                                    "launch`)");
    if (!rc && need_store)
        rc = env_int("MASTER_PORT", 1, 65535, 0, 1, &rv.master_port);
    return rc ? rc : tr_comm_init(&rv, cfg, out);
}
