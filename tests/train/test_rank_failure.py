#!/usr/bin/python3
"""A pipeline stage that dies mid-training ends the whole job: `trident train --nproc 2` with
two pipeline stages; once training is under way, stage 1's process is killed with SIGKILL.
The launcher must exit non-zero within 10 s naming the rank and the signal, and leave no
process behind. Also: the same layout run twice gives bit-identical losses (determinism).
usage: test_rank_failure.py TRIDENT WORKDIR"""
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

trident, work = sys.argv[1], sys.argv[2]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
rng = random.Random(9)
with open(os.path.join(work, "corpus.txt"), "w") as f:
    for _ in range(300):
        f.write(" ".join(rng.choice(["stage", "dies", "job", "stops"]) for _ in range(rng.randint(3, 40))) + "\n\n")
prefix = os.path.join(work, "corpus")
subprocess.run([trident, "preprocess", "--input", os.path.join(work, "corpus.txt"), "--output-prefix", prefix],
               check=True, stdout=subprocess.DEVNULL)
config = os.path.join(work, "c.yaml")
with open(config, "w") as f:
    f.write(f"""model: {{num_layers: 2, hidden_size: 64, num_attention_heads: 2, seq_length: 32}}
parallel: {{pipeline_model_parallel_size: 2, comm_timeout_s: 60}}
training: {{micro_batch_size: 2, global_batch_size: 8, train_iters: 100000, lr: 1.0e-3}}
data: {{data_path: {prefix}, split: "90,10,0"}}
""")
failures = []


def check(what, ok, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {what} {detail}")
    if not ok:
        failures.append(what)


def processes_with(marker):
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
            if marker in cmd:
                env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
                found.append((int(pid), [e.decode(errors="replace") for e in env]))
        except OSError:
            pass
    return found


run_dir = os.path.join(work, "killed-run")
job = subprocess.Popen([trident, "train", "--nproc", "2", config, "--run-dir", run_dir, "--quiet"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
metrics = os.path.join(run_dir, "metrics.jsonl")
deadline = time.time() + 120
while time.time() < deadline and (not os.path.exists(metrics) or len(open(metrics).readlines()) < 3):
    time.sleep(0.2)
check("training got under way", os.path.exists(metrics) and len(open(metrics).readlines()) >= 3)
victims = [pid for pid, env in processes_with(run_dir) if "RANK=1" in env]
check("found stage 1's process", len(victims) == 1, str(victims))
killed_at = time.time()
for pid in victims:
    os.kill(pid, signal.SIGKILL)
try:
    out, err = job.communicate(timeout=30)
except subprocess.TimeoutExpired:
    job.kill()
    out, err = job.communicate()
elapsed = time.time() - killed_at
check("the job ends within 10 s", elapsed < 10, f"{elapsed:.1f} s")
check("non-zero exit", job.returncode != 0, str(job.returncode))
check("the message names the rank and the signal", "rank 1" in err and ("signal 9" in err or "SIGKILL" in err),
      err.strip()[-400:])
time.sleep(0.5)
left = processes_with(run_dir)
check("no process left", not left, str([p for p, _ in left]))

# determinism: the same 2-stage layout twice, bit-identical losses
losses = []
for i in range(2):
    d = os.path.join(work, f"det{i}")
    r = subprocess.run([trident, "train", "--nproc", "2", config, "--run-dir", d, "--quiet",
                        "--set", "training.train_iters=5", "--set", "parallel.sequence_parallel=false"],
                       capture_output=True, text=True, timeout=300)
    check(f"run {i} exits 0", r.returncode == 0, r.stderr[-500:])
    losses.append([json.loads(line)["loss"] for line in open(os.path.join(d, "metrics.jsonl"))])
check("two runs of one layout give bit-identical losses", losses[0] == losses[1], str(losses))
sys.exit(1 if failures else 0)
