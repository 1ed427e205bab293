#!/usr/bin/python3
"""`trident train` end to end on a small generated corpus:
  - metrics.jsonl has one object per iteration with the documented fields, config.yaml exists;
  - determinism: two runs give bit-identical losses;
  - a resolved config.yaml loads back and trains to the same losses;
  - bad usage / config / data give exit code 2 and a message.
usage: test_train_cli.py TRIDENT WORKDIR"""
import json
import os
import random
import shutil
import subprocess
import sys

trident, work = sys.argv[1], sys.argv[2]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
rng = random.Random(3)
with open(os.path.join(work, "corpus.txt"), "w") as f:
    for _ in range(200):
        f.write(" ".join(rng.choice(["alpha", "beta", "gamma", "delta", "pipe", "rank"])
                         for _ in range(rng.randint(3, 40))) + "\n\n")
prefix = os.path.join(work, "corpus")
subprocess.run([trident, "preprocess", "--input", os.path.join(work, "corpus.txt"),
                "--output-prefix", prefix], check=True, stdout=subprocess.DEVNULL)
config = os.path.join(work, "small.yaml")
with open(config, "w") as f:
    f.write(f"""model:
  num_layers: 2
  hidden_size: 32
  num_attention_heads: 2
  seq_length: 16
training:
  micro_batch_size: 2
  global_batch_size: 4
  train_iters: 6
  lr: 1.0e-3
  eval_interval: 3
  eval_iters: 2
data:
  data_path: {prefix}
  split: "90,10,0"
""")
failures = []


def check(what, ok, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {what} {detail}")
    if not ok:
        failures.append(what)


def train(run_dir, *extra, cfg=config):
    return subprocess.run([trident, "train", cfg, "--run-dir", run_dir, *extra],
                          capture_output=True, text=True, timeout=300)


def losses(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


r1 = train(os.path.join(work, "run1"))
check("train exits 0", r1.returncode == 0, r1.stderr[-2000:])
m1 = losses(os.path.join(work, "run1"))
check("one metrics line per iteration", [m["iteration"] for m in m1] == [1, 2, 3, 4, 5, 6])
fields = {"iteration", "loss", "lr", "grad_norm", "ms_per_iter", "tokens_per_s"}
check("metrics fields", all(fields <= set(m) for m in m1), str(m1[0]))
check("val_loss at eval_interval", "val_loss" in m1[2] and "val_loss" in m1[5] and "val_loss" not in m1[0])
check("per-iteration lines on stdout", r1.stdout.count("iter ") >= 6, r1.stdout[-500:])
check("config.yaml written", os.path.exists(os.path.join(work, "run1", "config.yaml")))
r2 = train(os.path.join(work, "run2"))
m2 = losses(os.path.join(work, "run2"))
check("determinism: bit-identical losses", [m["loss"] for m in m1] == [m["loss"] for m in m2],
      f"{[m['loss'] for m in m1]} vs {[m['loss'] for m in m2]}")
r3 = train(os.path.join(work, "run3"), cfg=os.path.join(work, "run1", "config.yaml"))
m3 = losses(os.path.join(work, "run3")) if r3.returncode == 0 else []
check("resolved config.yaml trains the same", [m["loss"] for m in m3] == [m["loss"] for m in m1], r3.stderr[-500:])
r4 = train(os.path.join(work, "run4"), "--set", "training.train_iters=2", "--set", "training.lr=2e-3")
check("--set overrides", r4.returncode == 0 and len(losses(os.path.join(work, "run4"))) == 2, r4.stderr[-500:])

# bad input: each exits 2 with a message naming the problem
bad = [
    (["--set", "model.hidden_size=33"], "num_attention_heads"),
    (["--set", "model.nope=1"], "nope"),
    (["--set", "data.data_path=" + os.path.join(work, "missing")], "missing"),
    (["--bogus-flag"], "bogus"),
    (["--set", "training.precision=bf16"], "training.device: cuda"),
    (["--set", "training.device=gpu"], "device"),
]
for args, needle in bad:
    r = train(os.path.join(work, "bad"), *args)
    check(f"bad input {args}: exit 2 naming '{needle}'", r.returncode == 2 and needle in r.stderr,
          f"rc={r.returncode} stderr={r.stderr.strip()[-300:]}")
r = subprocess.run([trident, "train"], capture_output=True, text=True)
check("no config: exit 2", r.returncode == 2 and "no config" in r.stderr)
r = subprocess.run([trident, "train", os.path.join(work, "nonexistent.yaml")], capture_output=True, text=True)
check("missing config file: exit 2", r.returncode == 2 and "nonexistent.yaml" in r.stderr, r.stderr)
r = subprocess.run([trident, "train", "--help"], capture_output=True, text=True)
check("train --help", r.returncode == 0 and "--set" in r.stdout and "--run-dir" in r.stdout)
r = subprocess.run([trident, "--help"], capture_output=True, text=True)
check("trident --help", r.returncode == 0 and "preprocess" in r.stdout)
# a corrupt data file: truncated .bin
shutil.copy(prefix + ".idx", os.path.join(work, "trunc.idx"))
with open(prefix + ".bin", "rb") as f:
    data = f.read()
with open(os.path.join(work, "trunc.bin"), "wb") as f:
    f.write(data[: len(data) // 2])
r = train(os.path.join(work, "bad"), "--set", "data.data_path=" + os.path.join(work, "trunc"))
check("truncated data file: exit 2", r.returncode == 2 and "trunc" in r.stderr, r.stderr.strip()[-300:])
sys.exit(1 if failures else 0)
