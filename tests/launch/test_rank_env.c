/* launch/ library: tr_env_detect() under torchrun-style, Slurm and Open MPI variables,
 * Slurm host lists, and the per-rank environment the launcher builds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "comm/comm.h"
#include "core/core.h"
#include "launch/launch.h"

static const char *identity_vars[] = {
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "TRIDENT_JOB_TOKEN", "TORCHELASTIC_RUN_ID", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "PMIX_NAMESPACE",
    "OMPI_MCA_ess_base_jobid", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_LOCALID",
    "SLURM_NODEID", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_STEP_TASKS_PER_NODE",
    "SLURM_NODELIST", "SLURM_JOB_NODELIST", "SLURM_STEP_NODELIST", "SLURM_JOB_ID",
    "SLURM_STEP_ID", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OPENBLAS_CORETYPE",
    "OMPI_MCA_orte_hnp_uri"};

static int clear_env(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof identity_vars / sizeof identity_vars[0]; i++)
        unsetenv(identity_vars[i]);
    return 0;
}

static void set(const char *k, const char *v) { assert_int_equal(setenv(k, v, 1), 0); }

static void test_single(void **state)
{
    (void)state;
    tr_rank_env e;
    assert_int_equal(tr_env_detect(&e), TR_OK);
    assert_string_equal(e.source, "single");
    assert_int_equal(e.rank, 0), assert_int_equal(e.world_size, 1);
    assert_int_equal(e.local_rank, 0), assert_int_equal(e.local_world_size, 1);
    assert_string_equal(e.master_addr, "127.0.0.1");
    assert_int_equal(e.master_port, 29500);
    assert_string_equal(e.job_token, ""); /* no identity: nothing anyone could guess */
}

static void test_torchrun_env(void **state)
{
    (void)state;
    set("RANK", "3"), set("WORLD_SIZE", "8"), set("LOCAL_RANK", "1");
    set("LOCAL_WORLD_SIZE", "2"), set("MASTER_ADDR", "10.0.0.5"), set("MASTER_PORT", "1234");
    set("TRIDENT_JOB_TOKEN", "tok-abc");
    /* Slurm and Open MPI variables are present too (a launcher inside an allocation): the
     * launcher's variables win. */
    set("SLURM_PROCID", "0"), set("SLURM_NTASKS", "1"), set("OMPI_COMM_WORLD_RANK", "0");
    set("OMPI_COMM_WORLD_SIZE", "1");
    tr_rank_env e;
    assert_int_equal(tr_env_detect(&e), TR_OK);
    assert_string_equal(e.source, "torchrun-env");
    assert_int_equal(e.rank, 3), assert_int_equal(e.world_size, 8);
    assert_int_equal(e.local_rank, 1), assert_int_equal(e.local_world_size, 2);
    assert_string_equal(e.master_addr, "10.0.0.5");
    assert_int_equal(e.master_port, 1234);
    assert_string_equal(e.job_token, "tok-abc");
    /* Without a token: torchrun's run id, else none (the master address is no identity: two
     * jobs that meet at one store share it; the rendezvous refuses several ranks without). */
    unsetenv("TRIDENT_JOB_TOKEN");
    set("TORCHELASTIC_RUN_ID", "r42");
    assert_int_equal(tr_env_detect(&e), TR_OK);
    assert_string_equal(e.job_token, "torchrun-r42");
    unsetenv("TORCHELASTIC_RUN_ID");
    assert_int_equal(tr_env_detect(&e), TR_OK);
    assert_string_equal(e.job_token, "");
    char token[128], source[256];
    set("OMPI_MCA_orte_hnp_uri", "3012624384.0;tcp://10.0.0.5:4000");
    tr_comm_job_identity(token, sizeof token, source, sizeof source);
    assert_string_equal(token, "openmpi-3012624384.0;tcp://10.0.0.5:4000");
    assert_string_equal(source, "OMPI_MCA_orte_hnp_uri='3012624384.0;tcp://10.0.0.5:4000'");
    set("TRIDENT_JOB_TOKEN", "s3cret");
    tr_comm_job_identity(token, sizeof token, source, sizeof source);
    assert_string_equal(token, "s3cret");
    assert_string_equal(source, "TRIDENT_JOB_TOKEN"); /* never its value */
}

static void test_torchrun_env_errors(void **state)
{
    (void)state;
    tr_rank_env e;
    set("RANK", "4"), set("WORLD_SIZE", "4");
    assert_int_equal(tr_env_detect(&e), TR_ERR_CONFIG);
    assert_string_equal(tr_errmsg(), "RANK='4': expected an integer in [0, 3]");
    set("RANK", "1"), set("WORLD_SIZE", "four");
    assert_int_equal(tr_env_detect(&e), TR_ERR_CONFIG);
    assert_string_equal(tr_errmsg(), "WORLD_SIZE='four': expected an integer in [1, 2147483647]");
    set("WORLD_SIZE", "4"), set("LOCAL_WORLD_SIZE", "2"), set("LOCAL_RANK", "2");
    assert_int_equal(tr_env_detect(&e), TR_ERR_CONFIG);
    assert_string_equal(tr_errmsg(), "LOCAL_RANK='2': expected an integer in [0, 1]");
    set("LOCAL_RANK", "1");
    assert_int_equal(tr_env_detect(&e), TR_ERR_CONFIG); /* spans nodes, no MASTER_ADDR */
    assert_string_equal(tr_errmsg(), "RANK=1 WORLD_SIZE=4 LOCAL_WORLD_SIZE=2 spans nodes but "
                                     "MASTER_ADDR is not set");
    set("MASTER_ADDR", "h0"), set("MASTER_PORT", "70000");
    assert_int_equal(tr_env_detect(&e), TR_ERR_CONFIG);
    assert_string_equal(tr_errmsg(), "MASTER_PORT='70000': expected an integer in [1, 65535]");
    set("MASTER_PORT", "");
    assert_int_equal(tr_env_detect(&e), TR_ERR_CONFIG);
    assert_string_equal(tr_errmsg(), "MASTER_PORT='': expected an integer in [1, 65535]");
}

static void test_slurm(void **state)
{
    (void)state;
    set("SLURM_PROCID", "5"), set("SLURM_NTASKS", "8"), set("SLURM_LOCALID", "1");
    set("SLURM_NODEID", "1"), set("SLURM_TASKS_PER_NODE", "4(x2)");
    set("SLURM_JOB_NODELIST", "node[01-04,07]"), set("SLURM_JOB_ID", "77");
    set("SLURM_STEP_ID", "3");
    tr_rank_env e;
    assert_int_equal(tr_env_detect(&e), TR_OK);
    assert_string_equal(e.source, "slurm");
    assert_int_equal(e.rank, 5), assert_int_equal(e.world_size, 8);
    assert_int_equal(e.local_rank, 1), assert_int_equal(e.local_world_size, 4);
    assert_string_equal(e.master_addr, "node01");
    /* the port follows the job and step, so jobs sharing a node do not collide */
    int port = e.master_port;
    assert_int_equal(port, 10000 + (int)(tr_hash_name("slurm-77.3") % 20000));
    assert_string_equal(e.job_token, "slurm-77.3");
    set("SLURM_STEP_ID", "4");
    assert_int_equal(tr_env_detect(&e), TR_OK);
    assert_int_not_equal(e.master_port, port);
    set("SLURM_STEP_ID", "3");
    /* SLURM_NODELIST (the step's nodes) comes before the job's list. */
    set("SLURM_NODELIST", "gpu-a[3,5]");
    assert_int_equal(tr_env_detect(&e), TR_OK);
    assert_string_equal(e.master_addr, "gpu-a3");
    /* Uneven counts: node 1 of "3,1" holds one task; SLURM_NTASKS_PER_NODE wins if set. */
    set("SLURM_NTASKS", "4"), set("SLURM_PROCID", "3"), set("SLURM_LOCALID", "0");
    set("SLURM_TASKS_PER_NODE", "3,1"), set("SLURM_NODELIST", "n1,n2");
    assert_int_equal(tr_env_detect(&e), TR_OK);
    assert_int_equal(e.local_world_size, 1);
    assert_string_equal(e.master_addr, "n1");
    set("SLURM_NTASKS_PER_NODE", "2");
    assert_int_equal(tr_env_detect(&e), TR_OK);
    assert_int_equal(e.local_world_size, 2);
    /* MASTER_ADDR, MASTER_PORT and TRIDENT_JOB_TOKEN override what Slurm implies. */
    set("MASTER_ADDR", "login1"), set("MASTER_PORT", "6000"), set("TRIDENT_JOB_TOKEN", "t");
    assert_int_equal(tr_env_detect(&e), TR_OK);
    assert_string_equal(e.master_addr, "login1");
    assert_int_equal(e.master_port, 6000);
    assert_string_equal(e.job_token, "t");
}

static void test_slurm_errors(void **state)
{
    (void)state;
    tr_rank_env e;
    /* the batch script: the job's task count, SLURM_PROCID=0, no step (rank 0 waited 300 s
     * for ranks that never came, on a real Slurm) */
    set("SLURM_PROCID", "0"), set("SLURM_NTASKS", "8"), set("SLURM_NODEID", "0");
    set("SLURM_LOCALID", "0"), set("SLURM_TASKS_PER_NODE", "4(x2)"), set("SLURM_JOB_ID", "9");
    assert_int_equal(tr_env_detect(&e), TR_ERR_CONFIG);
    assert_string_equal(tr_errmsg(), "SLURM_NTASKS=8 but no SLURM_STEP_ID: this is Slurm's batch "
                                     "script (or salloc's shell), not a task of a job step; start "
                                     "one task per rank with srun (srun trident ...), or this "
                                     "node's ranks with --nproc N");
    set("SLURM_NTASKS", "1"), set("SLURM_TASKS_PER_NODE", "1"); /* one task: it is the job */
    assert_int_equal(tr_env_detect(&e), TR_OK);
    set("SLURM_STEP_ID", "0");
    set("SLURM_PROCID", "1"), set("SLURM_NTASKS", "4"), set("SLURM_NODEID", "1");
    set("SLURM_LOCALID", "0"), set("SLURM_TASKS_PER_NODE", "2(x2");
    assert_int_equal(tr_env_detect(&e), TR_ERR_CONFIG);
    assert_string_equal(tr_errmsg(),
                        "SLURM_TASKS_PER_NODE='2(x2': expected counts like '4' or '2(x3),1'");
    set("SLURM_TASKS_PER_NODE", "2");
    assert_int_equal(tr_env_detect(&e), TR_ERR_CONFIG);
    assert_string_equal(tr_errmsg(), "SLURM_TASKS_PER_NODE='2' lists 1 nodes; this is node 1");
    set("SLURM_TASKS_PER_NODE", "2(x2)");
    set("SLURM_JOB_NODELIST", "node[01-");
    assert_int_equal(tr_env_detect(&e), TR_ERR_CONFIG);
    assert_string_equal(tr_errmsg(), "SLURM_JOB_NODELIST: host list 'node[01-': '[' without ']'");
    unsetenv("SLURM_JOB_NODELIST");
    assert_int_equal(tr_env_detect(&e), TR_ERR_CONFIG);
    assert_string_equal(tr_errmsg(), "slurm: rank 1 of 4 spans nodes but neither MASTER_ADDR nor "
                                     "a Slurm node list is set; export MASTER_ADDR=<host of "
                                     "rank 0>");
    set("SLURM_PROCID", "-1");
    assert_int_equal(tr_env_detect(&e), TR_ERR_CONFIG);
    assert_string_equal(tr_errmsg(), "SLURM_PROCID='-1': expected an integer in [0, 3]");
}

static void test_openmpi(void **state)
{
    (void)state;
    set("OMPI_COMM_WORLD_RANK", "2"), set("OMPI_COMM_WORLD_SIZE", "4");
    set("OMPI_COMM_WORLD_LOCAL_RANK", "0"), set("OMPI_COMM_WORLD_LOCAL_SIZE", "2");
    set("PMIX_NAMESPACE", "1496121345"), set("MASTER_ADDR", "host0");
    tr_rank_env e;
    assert_int_equal(tr_env_detect(&e), TR_OK);
    assert_string_equal(e.source, "openmpi");
    assert_int_equal(e.rank, 2), assert_int_equal(e.world_size, 4);
    assert_int_equal(e.local_rank, 0), assert_int_equal(e.local_world_size, 2);
    assert_string_equal(e.master_addr, "host0");
    assert_int_equal(e.master_port, 29500);
    assert_string_equal(e.job_token, "openmpi-1496121345");
    /* mpirun inside a Slurm allocation: Open MPI's identity, Slurm's first node as master
     * (the Slurm rank variables of the batch step are ignored). */
    unsetenv("MASTER_ADDR");
    set("SLURM_PROCID", "0"), set("SLURM_NTASKS", "4"), set("SLURM_JOB_NODELIST", "cn[7-8]");
    assert_int_equal(tr_env_detect(&e), TR_OK);
    assert_string_equal(e.source, "openmpi");
    assert_int_equal(e.rank, 2);
    assert_string_equal(e.master_addr, "cn7");
    /* One node: no master needed. */
    unsetenv("SLURM_JOB_NODELIST");
    set("OMPI_COMM_WORLD_LOCAL_SIZE", "4"), set("OMPI_COMM_WORLD_LOCAL_RANK", "2");
    assert_int_equal(tr_env_detect(&e), TR_OK);
    assert_string_equal(e.master_addr, "127.0.0.1");
    /* Several nodes and nothing naming rank 0's host. */
    unsetenv("SLURM_PROCID"), unsetenv("SLURM_NTASKS");
    set("OMPI_COMM_WORLD_LOCAL_SIZE", "2"), set("OMPI_COMM_WORLD_LOCAL_RANK", "0");
    assert_int_equal(tr_env_detect(&e), TR_ERR_CONFIG);
    assert_string_equal(tr_errmsg(), "openmpi: rank 2 of 4 spans nodes but neither MASTER_ADDR "
                                     "nor a Slurm node list is set; export MASTER_ADDR=<host of "
                                     "rank 0>");
    set("OMPI_COMM_WORLD_LOCAL_SIZE", "x");
    assert_int_equal(tr_env_detect(&e), TR_ERR_CONFIG);
    assert_string_equal(tr_errmsg(),
                        "OMPI_COMM_WORLD_LOCAL_SIZE='x': expected an integer in [1, 4]");
}

static void expect_hosts(const char *list, const char *const *want, int n)
{
    int count = -1;
    assert_int_equal(tr_hostlist_count(list, &count), TR_OK);
    assert_int_equal(count, n);
    char host[64];
    for (int i = 0; i < n; i++) {
        assert_int_equal(tr_hostlist_host(list, i, host, sizeof host), TR_OK);
        assert_string_equal(host, want[i]);
    }
    assert_int_equal(tr_hostlist_host(list, n, host, sizeof host), TR_ERR_INVALID);
}

static void test_hostlist(void **state)
{
    (void)state;
    const char *a[] = {"node01", "node02", "node03", "node04", "node07"};
    expect_hosts("node[01-04,07]", a, 5);
    const char *b[] = {"gpu-a3", "gpu-a5"};
    expect_hosts("gpu-a[3,5]", b, 2);
    const char *c[] = {"n1", "n2"};
    expect_hosts("n1,n2", c, 2);
    const char *d[] = {"rack1-n1", "rack1-n2", "rack1-n3", "rack2-n1", "rack2-n2", "rack2-n3"};
    expect_hosts("rack[1-2]-n[1-3]", d, 6);
    const char *e[] = {"a1-ib", "a2-ib", "b", "c09", "c10"};
    expect_hosts("a[1-2]-ib,b,c[09-10]", e, 5);
    const char *f[] = {"node8", "node9", "node10", "node098", "node099", "node100"};
    expect_hosts("node[8-10],node[098-100]", f, 6);
    const char *g[] = {"localhost"};
    expect_hosts("localhost", g, 1);
    int n;
    assert_int_equal(tr_hostlist_count("x[0-99999]", &n), TR_OK);
    assert_int_equal(n, 100000);
    char host[8];
    assert_int_equal(tr_hostlist_host("x[0-99999]", 99999, host, sizeof host), TR_OK);
    assert_string_equal(host, "x99999");
}

static void test_hostlist_errors(void **state)
{
    (void)state;
    static const struct {
        const char *list, *msg;
    } bad[] = {
        {"", "host list is empty"},
        {"node[01-", "host list 'node[01-': '[' without ']'"},
        {"node]", "host list 'node]': ']' without '['"},
        {"node[3-1]", "host list 'node[3-1]': range 3-1 runs backwards"},
        {"node[]", "host list 'node[]': empty brackets"},
        {"node[1,]", "host list 'node[1,]': trailing ',' in brackets"},
        {"n1,,n2", "host list 'n1,,n2': empty host name"},
        {"n1,", "host list 'n1,': empty host name"},
        {"node[a]", "host list 'node[a]': expected a number at 'a'"},
        {"node[1-]", "host list 'node[1-]': expected a number after '-' in '1-'"},
        {"node[1;2]", "host list 'node[1;2]': unexpected ';' in brackets"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int n;
        char host[32];
        assert_int_equal(tr_hostlist_count(bad[i].list, &n), TR_ERR_CONFIG);
        assert_string_equal(tr_errmsg(), bad[i].msg);
        assert_int_equal(tr_hostlist_host(bad[i].list, 0, host, sizeof host), TR_ERR_CONFIG);
        assert_string_equal(tr_errmsg(), bad[i].msg);
    }
    char small[6];
    assert_int_equal(tr_hostlist_host("node[100-101]", 1, small, sizeof small), TR_ERR_CONFIG);
    assert_string_equal(tr_errmsg(), "host list 'node[100-101]': host name longer than 5 bytes");
    assert_int_equal(tr_hostlist_host("n1,n2", 2, small, sizeof small), TR_ERR_INVALID);
    assert_string_equal(tr_errmsg(), "host list 'n1,n2' has 2 hosts; there is no host 2");
    assert_int_equal(tr_hostlist_host("n1", -1, small, sizeof small), TR_ERR_INVALID);
    assert_string_equal(tr_errmsg(), "host index -1 is negative");
}

/* The value of KEY in a NULL-terminated environment; fails if it appears twice. */
static const char *env_value(char **env, const char *key)
{
    const char *found = NULL;
    size_t n = strlen(key);
    for (; *env; env++)
        if (!strncmp(*env, key, n) && (*env)[n] == '=') {
            assert_null(found);
            found = *env + n + 1;
        }
    return found;
}

static void test_launch_plan(void **state)
{
    (void)state;
    set("RANK", "99");            /* replaced */
    set("OMP_NUM_THREADS", "7");  /* kept */
    set("TRIDENT_KEEP_ME", "yes"); /* passed through */
    tr_launch_options o = {.nproc = 4};
    tr_launch_plan p;
    assert_int_equal(tr_launch_plan_make(&o, &p), TR_OK);
    assert_int_equal(p.world_size, 4);
    assert_true(p.master_port > 0 && p.master_port < 65536);
    assert_true(strlen(p.job_token) == 32);
    assert_true(p.threads_per_rank >= 1);
    char buf[32];
    for (int i = 0; i < 4; i++) {
        char **env = p.envp[i];
        snprintf(buf, sizeof buf, "%d", i);
        assert_string_equal(env_value(env, "RANK"), buf);
        assert_string_equal(env_value(env, "LOCAL_RANK"), buf);
        assert_string_equal(env_value(env, "WORLD_SIZE"), "4");
        assert_string_equal(env_value(env, "LOCAL_WORLD_SIZE"), "4");
        assert_string_equal(env_value(env, "MASTER_ADDR"), "127.0.0.1");
        snprintf(buf, sizeof buf, "%d", p.master_port);
        assert_string_equal(env_value(env, "MASTER_PORT"), buf);
        assert_string_equal(env_value(env, "TRIDENT_JOB_TOKEN"), p.job_token);
        assert_string_equal(env_value(env, "OMP_NUM_THREADS"), "7");
        snprintf(buf, sizeof buf, "%d", p.threads_per_rank);
        assert_string_equal(env_value(env, "OPENBLAS_NUM_THREADS"), buf);
        assert_string_equal(env_value(env, "TRIDENT_KEEP_ME"), "yes");
        if (__builtin_cpu_supports("avx512f"))
            assert_string_equal(env_value(env, "OPENBLAS_CORETYPE"), "SkylakeX");
    }
    char first[sizeof p.job_token];
    snprintf(first, sizeof first, "%s", p.job_token);
    tr_launch_plan_free(&p);
    unsetenv("TRIDENT_KEEP_ME");
    assert_int_equal(tr_launch_plan_make(&o, &p), TR_OK); /* one node: random every time */
    assert_string_not_equal(p.job_token, first);
    tr_launch_plan_free(&p);

    /* Two nodes and neither a token nor a scheduler's job: refused (the token they used to
     * agree on came from the master address and port: the same on every run) */
    tr_launch_options m2 = {.nproc = 2, .nnodes = 2, .node_rank = 1, .master_addr = "h0"};
    assert_int_equal(tr_launch_plan_make(&m2, &p), TR_ERR_CONFIG);
    if (!strstr(tr_errmsg(), "--nnodes 2: no job token") ||
        !strstr(tr_errmsg(), "TRIDENT_JOB_TOKEN=<random value> with the same value on every node"))
        fail_msg("%s", tr_errmsg());
    /* Two nodes: ranks offset by the node, port 29500, one token on both nodes: Slurm's job
     * (each rank derives it too, so it is not exported) */
    set("SLURM_JOB_ID", "12");
    tr_launch_options m = {.nproc = 2, .nnodes = 2, .node_rank = 1, .master_addr = "h0"};
    tr_launch_plan p1, p0;
    assert_int_equal(tr_launch_plan_make(&m, &p1), TR_OK);
    m.node_rank = 0;
    assert_int_equal(tr_launch_plan_make(&m, &p0), TR_OK);
    assert_string_equal(env_value(p1.envp[0], "RANK"), "2");
    assert_string_equal(env_value(p1.envp[1], "RANK"), "3");
    assert_string_equal(env_value(p1.envp[1], "LOCAL_RANK"), "1");
    assert_string_equal(env_value(p1.envp[1], "WORLD_SIZE"), "4");
    assert_string_equal(env_value(p1.envp[1], "LOCAL_WORLD_SIZE"), "2");
    assert_string_equal(env_value(p1.envp[0], "MASTER_ADDR"), "h0");
    assert_string_equal(env_value(p1.envp[0], "MASTER_PORT"), "29500");
    assert_string_equal(p0.job_token, p1.job_token);
    assert_string_equal(p0.job_token, "slurm-12.batch"); /* no SLURM_STEP_ID: a batch script */
    assert_null(env_value(p1.envp[0], "TRIDENT_JOB_TOKEN"));
    tr_launch_plan_free(&p0);
    tr_launch_plan_free(&p1);
    set("TRIDENT_JOB_TOKEN", "mine");
    assert_int_equal(tr_launch_plan_make(&o, &p), TR_OK);
    assert_string_equal(env_value(p.envp[3], "TRIDENT_JOB_TOKEN"), "mine");
    tr_launch_plan_free(&p);
}

static void test_launch_plan_errors(void **state)
{
    (void)state;
    tr_launch_plan p;
    tr_launch_options o = {.nproc = 0};
    assert_int_equal(tr_launch_plan_make(&o, &p), TR_ERR_CONFIG);
    assert_string_equal(tr_errmsg(), "--nproc 0: expected 1 to 4096 local ranks");
    o = (tr_launch_options){.nproc = 2, .nnodes = 2};
    assert_int_equal(tr_launch_plan_make(&o, &p), TR_ERR_CONFIG);
    assert_string_equal(tr_errmsg(), "--master-addr is required with --nnodes 2 (the address of "
                                     "node 0, where rank 0 serves the store)");
    o = (tr_launch_options){.nproc = 2, .nnodes = 2, .node_rank = 2, .master_addr = "h"};
    assert_int_equal(tr_launch_plan_make(&o, &p), TR_ERR_CONFIG);
    assert_string_equal(tr_errmsg(), "--node-rank 2: expected 0 to 1 for 2 nodes");
    o = (tr_launch_options){.nproc = 2, .master_port = 70000};
    assert_int_equal(tr_launch_plan_make(&o, &p), TR_ERR_CONFIG);
    assert_string_equal(tr_errmsg(), "--master-port 70000: expected 1 to 65535 (or 0 to choose)");
    o = (tr_launch_options){.nproc = 2};
    char *const none[] = {NULL};
    int code = 0;
    assert_int_equal(tr_launch_local(&o, none, &code), TR_ERR_CONFIG);
    assert_string_equal(tr_errmsg(), "no command to launch");
    assert_int_equal(code, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_single, clear_env),
        cmocka_unit_test_setup(test_torchrun_env, clear_env),
        cmocka_unit_test_setup(test_torchrun_env_errors, clear_env),
        cmocka_unit_test_setup(test_slurm, clear_env),
        cmocka_unit_test_setup(test_slurm_errors, clear_env),
        cmocka_unit_test_setup(test_openmpi, clear_env),
        cmocka_unit_test_setup(test_hostlist, clear_env),
        cmocka_unit_test_setup(test_hostlist_errors, clear_env),
        cmocka_unit_test_setup(test_launch_plan, clear_env),
        cmocka_unit_test_setup(test_launch_plan_errors, clear_env),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
