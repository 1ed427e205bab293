#!/usr/bin/python3
"""Chaos (issue 21): 8 ranks (data 2 x tensor 2 x pipeline 2), 60 iterations, a checkpoint
every 5 written in the background (checkpoint.async_save; checkpoint.load = checkpoint.save),
`trident train --nproc 8 --max-restarts 5`. A
seeded driver strikes 4 times at random iterations: SIGKILL to a random rank, or SIGSTOP (the
others give up after comm_timeout_s = 5 s and the job stops, the frozen rank included). The
run must complete (exit 0) with iterations 1..60 in metrics.jsonl once each and per-iteration
losses bit-identical to an uninterrupted run; every iter_* checkpoint left must verify
(loaded by `trident generate`, which checks every tensor file against its checksums).
usage: test_chaos.py TRIDENT WORKDIR [SEED]"""
import json
import os
import random
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402
from trident_test import check  # noqa: E402

trident, work = os.path.abspath(sys.argv[1]), tt.fresh_dir(os.path.abspath(sys.argv[2]))
seed = int(sys.argv[3]) if len(sys.argv) > 3 else 2026
rng = random.Random(seed)
ITERS = 60
prefix = tt.make_corpus(trident, work, 51, ["chaos", "monkey", "rank", "restart", "resume"],
                        400, 5, 40)
config = tt.write_config(os.path.join(work, "chaos.yaml"),
    model=dict(num_layers=4, hidden_size=64, num_attention_heads=4, seq_length=32),
    parallel=dict(tensor_model_parallel_size=2, pipeline_model_parallel_size=2,
                  comm_timeout_s=5),
    training=dict(micro_batch_size=2, global_batch_size=8, train_iters=ITERS, lr=1.0e-3),
    data=dict(data_path=prefix, split="100,0,0"))

ref = os.path.join(work, "reference")
r = tt.run(tt.train_cmd(trident, config, ref, world=8, flags=["--quiet"]), timeout=600)
check("uninterrupted 8-rank run", r.returncode == 0, r.stderr[-800:])
want = tt.losses(ref)

run_dir, ck = os.path.join(work, "chaos-run"), os.path.join(work, "chaos-ck")
cmd = tt.train_cmd(trident, config, run_dir, world=8, flags=["--quiet", "--max-restarts", "5"],
                   sets=[f"checkpoint.save={ck}", f"checkpoint.load={ck}",
                         "checkpoint.save_interval=5", "checkpoint.async_save=true"])
job = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
metrics = os.path.join(run_dir, "metrics.jsonl")


def iterations_done():
    try:
        with open(metrics) as f:
            return sum(1 for line in f if line.endswith("\n"))
    except OSError:
        return 0


def ranks():
    """pids of the job's rank processes (their environment names a RANK), by rank."""
    found = {}
    for pid, _, env in tt.processes_with(run_dir):
        rank = [e[5:] for e in env if e.startswith("RANK=")]
        if rank and pid != job.pid:
            found[int(rank[0])] = pid
    return found


events = sorted(rng.sample(range(6, ITERS - 4), 4))
struck = []
for target in events:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and job.poll() is None:
        live = ranks()
        if iterations_done() >= target and len(live) == 8:
            break
        time.sleep(0.02)
    live = ranks()
    if job.poll() is not None or len(live) < 8:
        break
    victim, how = rng.randrange(8), rng.choice([signal.SIGKILL, signal.SIGSTOP])
    try:
        os.kill(live[victim], how)
        struck.append((iterations_done(), victim, how.name))
    except ProcessLookupError:
        pass
    # the next strike waits for the restarted job: eight ranks, none of the struck attempt's
    # (a fixed pause let a fast machine finish the last iterations before the last strike)
    old, deadline = set(live.values()), time.monotonic() + 120
    while time.monotonic() < deadline and job.poll() is None:
        now = ranks()
        if len(now) == 8 and not set(now.values()) & old:
            break
        time.sleep(0.02)
_, err = tt.wait_output(job, 400)
print(f"seed {seed}: strikes (iterations done, rank, signal): {struck}")
restarts = err.count("restart ")
check(f"4 strikes, the job restarted and completed: exit 0 ({restarts} restarts)",
      len(struck) == 4 and job.returncode == 0 and restarts >= 1, f"exit {job.returncode}: {err[-1500:]}")
got = [json.loads(line) for line in open(metrics)] if os.path.exists(metrics) else []
check(f"metrics.jsonl: iterations 1..{ITERS} once each",
      [m["iteration"] for m in got] == list(range(1, ITERS + 1)), str([m["iteration"] for m in got][-10:]))
check("per-iteration losses bit-identical to the uninterrupted run",
      [m["loss"] for m in got] == want,
      str([(i + 1, a, b) for i, (a, b) in enumerate(zip([m["loss"] for m in got], want)) if a != b][:3]))
bad = []
for d in sorted(x for x in os.listdir(ck) if x.startswith("iter_")):
    if d.endswith(".tmp"):
        continue  # a save interrupted by a strike: never made latest
    one = tt.fresh_dir(os.path.join(work, "verify"))
    os.symlink(os.path.join(ck, d), os.path.join(one, d))
    tt.write(os.path.join(one, "latest_checkpointed_iteration.txt"), f"{int(d[5:])}\n")
    v = tt.run([trident, "generate", one, "--prompt", "x", "--max-new-tokens", "1", "--json"],
               timeout=120)
    if v.returncode:
        bad.append((d, v.stderr[-300:]))
check("every iter_* checkpoint verifies", not bad, str(bad))
tt.finish()
