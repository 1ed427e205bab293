#!/usr/bin/python3
"""Data-parallel scaling on this machine: tokens/s of configs/tiny.yaml's model on 1, 2, 4 and
8 ranks (pure data parallelism, same global batch). With 2 cores, more than 2 ranks are
oversubscribed and lose: the table shows by how much. usage: benchmarks/scaling.py [--iters N]"""
import sys

from bench_util import train

iters = int(sys.argv[sys.argv.index("--iters") + 1]) if "--iters" in sys.argv else 8
tokens = 16 * 128
print(f"{'ranks':>5} {'ms/iter':>9} {'tokens/s':>10} {'vs 1 rank':>10}")
base = None
for n in (1, 2, 4, 8):
    sets = {"training.micro_batch_size": 16 // n, "training.global_batch_size": 16,
            "training.train_iters": iters, "training.eval_interval": 0}
    ms, _ = train(f"scaling-{n}", "configs/tiny.yaml", sets, nproc=n)
    tps = tokens / (ms / 1e3)
    base = base or tps
    print(f"{n:>5} {ms:>9.1f} {tps:>10.0f} {tps / base:>9.2f}x", flush=True)
