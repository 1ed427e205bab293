#!/usr/bin/python3
"""A pipeline stage that dies mid-training ends the whole job: `trident train --nproc 2` with
two pipeline stages; once training is under way, stage 1's process is killed with SIGKILL.
The launcher must exit non-zero within 10 s naming the rank and the signal, and leave no
process behind. Also: the same layout run twice gives bit-identical losses (determinism).
usage: test_rank_failure.py TRIDENT WORKDIR"""
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402
from trident_test import check  # noqa: E402

trident, work = sys.argv[1], tt.fresh_dir(sys.argv[2])
prefix = tt.make_corpus(trident, work, 9, ["stage", "dies", "job", "stops"], 300, 3, 40)
config = tt.write(os.path.join(work, "c.yaml"),
                  f"""model: {{num_layers: 2, hidden_size: 64, num_attention_heads: 2, seq_length: 32}}
parallel: {{pipeline_model_parallel_size: 2, comm_timeout_s: 60}}
training: {{micro_batch_size: 2, global_batch_size: 8, train_iters: 100000, lr: 1.0e-3}}
data: {{data_path: {prefix}, split: "90,10,0"}}
""")

run_dir = os.path.join(work, "killed-run")
job = subprocess.Popen(tt.train_cmd(trident, config, run_dir, world=2, flags=["--quiet"]),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
metrics = os.path.join(run_dir, "metrics.jsonl")
deadline = time.time() + 120
while time.time() < deadline and (not os.path.exists(metrics) or len(open(metrics).readlines()) < 3):
    time.sleep(0.2)
check("training got under way", os.path.exists(metrics) and len(open(metrics).readlines()) >= 3)
victims = [pid for pid, _, env in tt.processes_with(run_dir) if "RANK=1" in env]
check("found stage 1's process", len(victims) == 1, str(victims))
killed_at = time.time()
for pid in victims:
    os.kill(pid, signal.SIGKILL)
out, err = tt.wait_output(job, 30)
elapsed = time.time() - killed_at
check("the job ends within 10 s", elapsed < 10, f"{elapsed:.1f} s")
check("non-zero exit", job.returncode != 0, str(job.returncode))
check("the message names the rank and the signal", "rank 1" in err and ("signal 9" in err or "SIGKILL" in err),
      err.strip()[-400:])
time.sleep(0.5)
left = tt.processes_with(run_dir)
check("no process left", not left, str([p for p, _, _ in left]))

# determinism: the same 2-stage layout twice, bit-identical losses
losses = []
for i in range(2):
    d = os.path.join(work, f"det{i}")
    r = tt.run(tt.train_cmd(trident, config, d, world=2, flags=["--quiet"],
                            sets=["training.train_iters=5", "parallel.sequence_parallel=false"]),
               timeout=300)
    check(f"run {i} exits 0", r.returncode == 0, r.stderr[-500:])
    losses.append(tt.losses(d))
check("two runs of one layout give bit-identical losses", losses[0] == losses[1], str(losses))
tt.finish()
