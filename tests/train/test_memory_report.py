#!/usr/bin/python3
"""summary.json's memory_mb_per_rank (issue 19, point 4): the CPU allocator's own accounting
split the way the planner splits memory. One process: gradients = parameters, the optimizer
(Adam's two moments) = 2 x parameters, activations > 0, peak >= the parts. Two ranks with
ZeRO-1: each rank's optimizer is its shard, about half of that (the parameters whole on both).
usage: test_memory_report.py TRIDENT WORKDIR"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402
from trident_test import check  # noqa: E402

trident, work = sys.argv[1], tt.fresh_dir(sys.argv[2])
prefix = tt.make_corpus(trident, work, 81, ["memory", "bytes", "peak"], 200, 5, 30)
config = tt.write_config(os.path.join(work, "small.yaml"),
    model=dict(num_layers=2, hidden_size=64, num_attention_heads=4, seq_length=32),
    training=dict(micro_batch_size=2, global_batch_size=4, train_iters=2, lr=1.0e-3),
    data=dict(data_path=prefix, split="100,0,0"))


def memory(name, world, *sets):
    run_dir = os.path.join(work, name)
    r = tt.run(tt.train_cmd(trident, config, run_dir, world=world, flags=["--quiet"], sets=sets),
               timeout=300)
    check(f"{name}: exit 0", r.returncode == 0, r.stderr[-500:])
    with open(os.path.join(run_dir, "summary.json")) as f:
        return json.load(f)["memory_mb_per_rank"]


one = memory("one", 1)[0]
close = lambda a, b: abs(a - b) <= 1e-3 * max(a, b)  # noqa: E731
check("one process: gradients = parameters", close(one["gradients"], one["parameters"]), str(one))
check("one process: optimizer = 2 x parameters", close(one["optimizer"], 2 * one["parameters"]), str(one))
# (the summary's MB carry 9 significant digits: a peak equal to the sum of four rounded parts
# may read up to ~2e-8 below it; 1e-6 MB is about one byte)
check("one process: activations > 0, peak >= the sum of the parts",
      one["activations"] > 0 and one["peak"] + 1e-6 >= sum(one[k] for k in
                                                         ("parameters", "gradients", "optimizer", "activations")),
      str(one))
two = memory("zero1", 2, "parallel.use_distributed_optimizer=true")
for r, m in enumerate(two):
    check(f"ZeRO-1 on 2 ranks, rank {r}: parameters whole, optimizer about half of 2 x parameters",
          close(m["parameters"], one["parameters"]) and abs(m["optimizer"] - one["parameters"]) <= 0.01 * one["parameters"],
          f"{m} vs one process {one}")
tt.finish()
