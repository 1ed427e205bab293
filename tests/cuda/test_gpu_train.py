#!/usr/bin/python3
"""GPU training through the engine, against the CPU (SKIP where no GPU is usable).
  1. GPT-level loss: `trident train` with training.precision=bf16 (the "cuda" table) on one
     GPU vs the CPU fp32 run of the same config, seed and batches: every iteration's loss
     within 2e-2 (relative).
  2. Host staging: (DP=2, TP=2, PP=2) as 8 ranks on ONE GPU (CUDA_VISIBLE_DEVICES pins them
     all to it) with TRIDENT_COMM_BACKEND=nccl: every group of more than one rank shares
     the GPU, so the NCCL communicator stages through pinned host memory over UCX. Its
     losses must match the single-GPU run within 1e-2 and the CPU within 2e-2.
usage: test_gpu_train.py TRIDENT PROBE WORKDIR [--only loss|staging]"""
import json
import os
import random
import shutil
import subprocess
import sys

trident, probe, work = sys.argv[1], sys.argv[2], sys.argv[3]
only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else None
p = subprocess.run([probe], capture_output=True, text=True, timeout=120)
print(p.stdout.strip())
if p.returncode == 77:
    sys.exit(77)
if p.returncode != 0:
    sys.exit(f"probe failed: {p.stderr}")

work = os.path.join(work, "gpu_train")
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
rng = random.Random(3)
with open(os.path.join(work, "corpus.txt"), "w") as f:
    for _ in range(400):
        f.write(" ".join(rng.choice(["gpu", "stream", "kernel", "tensor", "pipe", "bf16", "grad"])
                         for _ in range(rng.randint(3, 50))) + "\n\n")
prefix = os.path.join(work, "corpus")
subprocess.run([trident, "preprocess", "--input", os.path.join(work, "corpus.txt"),
                "--output-prefix", prefix], check=True, stdout=subprocess.DEVNULL)
config = os.path.join(work, "gpu.yaml")
with open(config, "w") as f:
    f.write(f"""model:
  num_layers: 4
  hidden_size: 64
  num_attention_heads: 8
  seq_length: 32
  vocab_size: 256
  make_vocab_size_divisible_by: 16
training:
  micro_batch_size: 2
  global_batch_size: 8
  train_iters: 10
  lr: 2.0e-3
  lr_warmup_iters: 2
  weight_decay: 0.1
  clip_grad: 1.0
  seed: 5
data:
  data_path: {prefix}
  split: "95,5,0"
parallel:
  comm_timeout_s: 120
""")


def run(name, precision, world=1, tp=1, pp=1, env=None):
    out = os.path.join(work, name)
    args = [trident, "train", config, "--run-dir", out, "--quiet",
            "--set", f"training.precision={precision}",
            "--set", f"parallel.tensor_model_parallel_size={tp}",
            "--set", f"parallel.pipeline_model_parallel_size={pp}"]
    if world > 1:
        args[2:2] = ["--nproc", str(world)]
    e = dict(os.environ)
    e.update(env or {})
    r = subprocess.run(args, capture_output=True, text=True, timeout=900, env=e)
    if r.returncode != 0:
        print(f"FAIL {name}: exit {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
        return None
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(line)["loss"] for line in f if '"loss"' in line]


def compare(name, got, ref, tol):
    if got is None or ref is None:
        return False
    worst = max(abs(a - b) / abs(b) for a, b in zip(got, ref))
    ok = len(got) == len(ref) and worst <= tol
    print(f"{'ok  ' if ok else 'FAIL'} {name}: {len(got)} iterations, largest relative "
          f"difference {worst:.2e} (tolerance {tol:.0e})")
    return ok


cpu = run("cpu", "fp32")
ok = cpu is not None
if only in (None, "loss", "staging"):
    gpu1 = run("gpu1", "bf16")
    ok &= compare("GPU bf16 vs CPU fp32 (1 rank)", gpu1, cpu, 2e-2)
if only in (None, "staging"):
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
    gpu8 = run("gpu8", "bf16", world=8, tp=2, pp=2,
               env={"TRIDENT_COMM_BACKEND": "nccl", "CUDA_VISIBLE_DEVICES": first})
    ok &= compare("(DP=2, TP=2, PP=2) on one GPU, staged, vs 1 GPU", gpu8, gpu1, 1e-2)
    ok &= compare("(DP=2, TP=2, PP=2) on one GPU, staged, vs CPU", gpu8, cpu, 2e-2)
sys.exit(0 if ok else 1)
