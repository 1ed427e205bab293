#!/usr/bin/python3
"""GPU training through the engine, against the CPU (SKIP where no GPU is usable).
  1. GPT-level loss: `trident train` with training.precision=bf16 (the "cuda" table) on one
     GPU vs the CPU fp32 run of the same config, seed and batches: every iteration's loss
     within 2e-2 (relative).
  2. Host staging: (DP=2, TP=2, PP=2) as 8 ranks on ONE GPU (CUDA_VISIBLE_DEVICES pins them
     all to it), on the NCCL communicator the engine picks for training.device cuda:
     every group of more than one rank shares the GPU, so it stages through pinned host
     memory over UCX. Its losses must match the single-GPU run within 1e-2 and the CPU
     within 2e-2.
usage: test_gpu_train.py TRIDENT PROBE WORKDIR [--only loss|staging]"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402

trident, probe, work = sys.argv[1], sys.argv[2], sys.argv[3]
only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else None
p = subprocess.run([probe], capture_output=True, text=True, timeout=120)
print(p.stdout.strip())
if p.returncode == 77:
    sys.exit(77)
if p.returncode != 0:
    sys.exit(f"probe failed: {p.stderr}")

work = tt.fresh_dir(os.path.join(work, "gpu_train"))
prefix = tt.make_corpus(trident, work, 3, ["gpu", "stream", "kernel", "tensor", "pipe", "bf16", "grad"],
                        400, 3, 50)
config = tt.write_config(os.path.join(work, "gpu.yaml"),
    model=dict(num_layers=4, hidden_size=64, num_attention_heads=8, seq_length=32, vocab_size=256,
               make_vocab_size_divisible_by=16),
    training=dict(micro_batch_size=2, global_batch_size=8, train_iters=10, lr=2.0e-3,
                  lr_warmup_iters=2, weight_decay=0.1, clip_grad=1.0, seed=5),
    data=dict(data_path=prefix, split="95,5,0"),
    parallel=dict(comm_timeout_s=60))  # a stuck rank fails in a minute, not the GPU's half hour


def run(name, precision, world=1, tp=1, pp=1, env=None):
    out = os.path.join(work, name)
    device = ["training.device=cuda"] if name != "cpu" else []  # bf16 runs on the CUDA backend only
    r = tt.run(tt.train_cmd(trident, config, out, world, tp, pp, [f"training.precision={precision}"] + device,
                            flags=["--quiet"]), timeout=900, env=dict(os.environ, **(env or {})))
    if r.returncode != 0:
        print(f"FAIL {name}: exit {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
        return None
    return [m["loss"] for m in tt.metrics(out) if "loss" in m]


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
               env={"CUDA_VISIBLE_DEVICES": first})
    ok &= compare("(DP=2, TP=2, PP=2) on one GPU, staged, vs 1 GPU", gpu8, gpu1, 1e-2)
    ok &= compare("(DP=2, TP=2, PP=2) on one GPU, staged, vs CPU", gpu8, cpu, 2e-2)
sys.exit(0 if ok else 1)
