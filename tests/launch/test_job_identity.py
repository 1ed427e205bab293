#!/usr/bin/python3
"""One job, one identity, one config (issue 23, points 1, 2, 4 and 14), end to end with ranks
started by hand as torchrun would start them (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT):
  - ranks whose job identity differs (TORCHELASTIC_RUN_ID a / b) are refused at rendezvous:
    both exit non-zero within 10 s, each naming the reason;
  - ranks with no job identity at all (no TRIDENT_JOB_TOKEN, no scheduler's) refuse to start;
  - a rank that says WORLD_SIZE=3 to a job of 2 is refused the same way;
  - ranks with one identity and different configs (--set training.seed / training.lr on one)
    both exit non-zero within 10 s naming the keys that differ and their values;
  - the same identity and config trains (the control);
  - `trident train --nproc 2` (and `trident generate --nproc 2`) inside a launched job is
    refused instead of starting a job per rank;
  - `trident launch --nnodes 2` without a job token or a scheduler's identity is refused (its
    token was the same on every run); with TRIDENT_JOB_TOKEN the ranks get that one, and on
    one node the token is random.
usage: test_job_identity.py TRIDENT WORKDIR"""
import os
import random
import re
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402
from trident_test import check  # noqa: E402

trident, work = os.path.abspath(sys.argv[1]), tt.fresh_dir(os.path.abspath(sys.argv[2]))
BOUND_S = 10.0
IDENTITY_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                 "MASTER_PORT", "TRIDENT_JOB_TOKEN", "TORCHELASTIC_RUN_ID", "PMIX_NAMESPACE",
                 "OMPI_MCA_orte_hnp_uri", "OMPI_MCA_ess_base_jobid", "OMPI_COMM_WORLD_RANK",
                 "OMPI_COMM_WORLD_SIZE", "SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_PROCID",
                 "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_STEP_NUM_TASKS")
CLEAN = {k: v for k, v in os.environ.items() if k not in IDENTITY_VARS}
CLEAN.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", UCX_WARN_UNUSED_ENV_VARS="n")

prefix = tt.make_corpus(trident, work, 23, ["one", "job", "identity", "config"], 120, 3, 30)
config = tt.write_config(os.path.join(work, "small.yaml"),
    model=dict(num_layers=1, hidden_size=32, num_attention_heads=2, seq_length=16),
    parallel=dict(comm_timeout_s=20),
    training=dict(micro_batch_size=1, global_batch_size=2, train_iters=3, lr=1.0e-3),
    data=dict(data_path=prefix, split="90,10,0"))


def free_port():
    """A port free now, below the kernel's ephemeral range: the tests running beside this one
    take their outgoing ports from that range, and one may take the port between this check
    and rank 0's listen (seen: "Address already in use")."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    for port in random.sample(range(10000, max(10001, low)), 200):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def two_ranks(name, extra=({}, {}), sets=((), ()), timeout=60):
    """Ranks 0 and 1 of a 2-rank job started by hand; each rank's environment adds extra[r]
    (a value None removes the variable) and its command line sets[r]. Returns
    ([(exit status, stderr) per rank], seconds until both ended). A port taken by another
    process between free_port and rank 0's listen is tried again with another."""
    for _ in range(3):
        results, dt = two_ranks_on(free_port(), name, extra, sets, timeout)
        if not any("Address already in use" in err for _, err in results):
            break
    return results, dt


def two_ranks_on(port, name, extra, sets, timeout):
    procs = []
    run_dir = os.path.join(work, name)
    t0 = time.monotonic()
    for r in range(2):
        env = dict(CLEAN, RANK=str(r), WORLD_SIZE="2", LOCAL_RANK=str(r), LOCAL_WORLD_SIZE="2",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        for k, v in extra[r].items():
            if v is None:
                env.pop(k, None)
            else:
                env[k] = v
        cmd = tt.train_cmd(trident, config, run_dir, sets=sets[r], flags=["--quiet"])
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, text=True, errors="replace"))
    results = []
    for p in procs:  # blocking waits, no polling
        _, err = tt.wait_output(p, max(1.0, timeout - (time.monotonic() - t0)))
        results.append((p.returncode, err))
    return results, time.monotonic() - t0


def both_refused(what, results, dt, *needles_per_rank):
    ok = all(rc not in (0, None) for rc, _ in results) and dt < BOUND_S
    for (rc, err), needles in zip(results, needles_per_rank):
        ok = ok and all(n in err for n in needles)
    check(f"{what}: both ranks exit non-zero within {BOUND_S:.0f} s, naming the reason "
          f"({dt:.1f} s)", ok,
          f"exits {[rc for rc, _ in results]} after {dt:.1f} s\n     rank 0: "
          f"{results[0][1][-700:]!r}\n     rank 1: {results[1][1][-700:]!r}")


# 1. another job's identity: refused at rendezvous, both ranks told
res, dt = two_ranks("other-job", extra=({"TORCHELASTIC_RUN_ID": "job-a"},
                                        {"TORCHELASTIC_RUN_ID": "job-b"}))
both_refused("TORCHELASTIC_RUN_ID job-a / job-b", res, dt,
             ["rank 1 of 2", "another job", "TORCHELASTIC_RUN_ID"],
             ["another job", "TORCHELASTIC_RUN_ID"])
res, dt = two_ranks("token-vs-run-id", extra=({"TRIDENT_JOB_TOKEN": "secret-1"},
                                              {"TORCHELASTIC_RUN_ID": "secret-1"}))
both_refused("TRIDENT_JOB_TOKEN on rank 0, TORCHELASTIC_RUN_ID on rank 1", res, dt,
             ["rank 1 of 2", "another job"], ["another job"])

# 1. no identity at all: multi-rank refused, not an empty token
res, dt = two_ranks("no-identity")
both_refused("no job identity", res, dt, ["no job identity", "TRIDENT_JOB_TOKEN"],
             ["no job identity", "TRIDENT_JOB_TOKEN"])
check("no job identity: exit 2 (a setup error)", [rc for rc, _ in res] == [2, 2],
      str([rc for rc, _ in res]))

# 1. one identity, another world size
res, dt = two_ranks("world-size", extra=({"TORCHELASTIC_RUN_ID": "job-w"},
                                         {"TORCHELASTIC_RUN_ID": "job-w", "WORLD_SIZE": "3"}))
both_refused("rank 1 says WORLD_SIZE=3 to a job of 2", res, dt, ["WORLD_SIZE=3", "2"],
             ["WORLD_SIZE=3", "2"])

# 4. one identity, another config: the keys and values named on both ranks
res, dt = two_ranks("other-config", extra=({"TORCHELASTIC_RUN_ID": "job-c"},
                                           {"TORCHELASTIC_RUN_ID": "job-c"}),
                    sets=((), ("training.seed=999", "training.lr=0.5")))
both_refused("rank 1 with --set training.seed=999 --set training.lr=0.5", res, dt,
             ["rank 1", "training.seed", "999", "training.lr", "0.5"],
             ["rank 0", "training.seed", "999", "training.lr", "0.5"])
check("another config: exit 2 on both ranks", [rc for rc, _ in res] == [2, 2],
      str([rc for rc, _ in res]))
check("another config: no checkpoint or metrics written",
      not os.path.exists(os.path.join(work, "other-config", "metrics.jsonl")))

# the control: one identity, one config
res, dt = two_ranks("same", extra=({"TORCHELASTIC_RUN_ID": "job-s"},
                                   {"TORCHELASTIC_RUN_ID": "job-s"}))
check(f"same TORCHELASTIC_RUN_ID and config: trains, both exit 0 ({dt:.1f} s)",
      [rc for rc, _ in res] == [0, 0], f"{res[0][1][-500:]!r} {res[1][1][-500:]!r}")

# 14. trident train --nproc N inside a launched job
r = tt.run([trident, "launch", "--nproc", "2", "--", *tt.train_cmd(
    trident, config, os.path.join(work, "nested"), world=2, flags=["--quiet"])],
    timeout=60, env=CLEAN)
check("trident train --nproc 2 inside trident launch --nproc 2: refused, exit 2",
      r.returncode == 2 and "inside" in r.stderr and re.search(r"rank [01] of 2", r.stderr)
      and not os.path.exists(os.path.join(work, "nested", "metrics.jsonl")),
      f"exit {r.returncode}: {r.stderr[-800:]!r}")
for cmd, env in (([*tt.train_cmd(trident, config, os.path.join(work, "nested2"), world=2)],
                  dict(CLEAN, RANK="1", WORLD_SIZE="2", TORCHELASTIC_RUN_ID="x")),
                 ([trident, "generate", os.path.join(work, "no-such-ckpt"), "--prompt", "a",
                   "--nproc", "2"], dict(CLEAN, OMPI_COMM_WORLD_RANK="0",
                                         OMPI_COMM_WORLD_SIZE="4")),
                 ([*tt.train_cmd(trident, config, os.path.join(work, "nested3"), world=2)],
                  dict(CLEAN, SLURM_PROCID="0", SLURM_NTASKS="2", SLURM_STEP_NUM_TASKS="2",
                       SLURM_JOB_ID="5", SLURM_STEP_ID="0"))):
    r = tt.run(cmd, timeout=60, env=env)
    check(f"{os.path.basename(cmd[1])} --nproc 2 as a rank of a launched job "
          f"({' '.join(k for k in env if k not in CLEAN)}): refused, exit 2",
          r.returncode == 2 and "inside" in r.stderr, f"exit {r.returncode}: {r.stderr[-600:]!r}")

# 2. the multi-node token: never derived from what anyone can guess
two_nodes = [trident, "launch", "--nnodes", "2", "--node-rank", "1", "--master-addr",
             "127.0.0.1", "--nproc", "1", "--", "sh", "-c", "echo TOKEN=$TRIDENT_JOB_TOKEN"]
r = tt.run(two_nodes, timeout=30, env=CLEAN)
check("trident launch --nnodes 2 with no token and no scheduler: refused, exit 2, how to pass one",
      r.returncode == 2 and "TRIDENT_JOB_TOKEN" in r.stderr and "TOKEN=" not in r.stdout,
      f"exit {r.returncode}: {r.stdout[-300:]!r} {r.stderr[-500:]!r}")
r = tt.run(two_nodes, timeout=30, env=dict(CLEAN, TRIDENT_JOB_TOKEN="f00dfeed"))
check("trident launch --nnodes 2 with TRIDENT_JOB_TOKEN: the ranks get it",
      r.returncode == 0 and "TOKEN=f00dfeed" in r.stdout, f"exit {r.returncode}: {r.stderr!r}")
one_node = [trident, "launch", "--nproc", "1", "--", "sh", "-c", "echo TOKEN=$TRIDENT_JOB_TOKEN"]
tokens = {tt.run(one_node, timeout=30, env=CLEAN).stdout.strip() for _ in range(2)}
check("trident launch on one node: a fresh random token each run",
      len(tokens) == 2 and all(len(t) >= len("[r0] TOKEN=") + 32 for t in tokens), str(tokens))

tt.finish("job identity: every check passed")
