#!/usr/bin/python3
"""training.recompute selective (issue 19, point 3; Megatron's: the attention probabilities
recomputed in backward, the linear layers' inputs kept): per-iteration losses bit-identical
to recompute none and full, in one process and on 8 ranks (data 2 x tensor 2 x pipeline 2,
sequence parallelism, 1F1B with 4 micro-batches in flight). Attention is fused (issue 24:
no probabilities are stored in any mode), so selective reserves exactly the activation
memory of none (the debug line of the memory estimate), and full less.
usage: test_recompute.py TRIDENT WORKDIR"""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402
from trident_test import check  # noqa: E402

trident, work = sys.argv[1], tt.fresh_dir(sys.argv[2])
prefix = tt.make_corpus(trident, work, 71, ["recompute", "attention", "selective"], 300, 5, 40)
config = tt.write_config(os.path.join(work, "small.yaml"),
    model=dict(num_layers=4, hidden_size=64, num_attention_heads=4, seq_length=64),
    training=dict(micro_batch_size=2, global_batch_size=16, train_iters=5, lr=1.0e-3),
    data=dict(data_path=prefix, split="100,0,0"))
layouts = [("1 process", 1, []),
           ("D2 x T2 x P2 + SP", 8, ["parallel.tensor_model_parallel_size=2",
                                     "parallel.pipeline_model_parallel_size=2",
                                     "parallel.sequence_parallel=true"])]
for name, world, sets in layouts:
    losses, act = {}, {}
    for mode in ("none", "selective", "full"):
        run_dir = os.path.join(work, f"{world}-{mode}")
        r = tt.run(tt.train_cmd(trident, config, run_dir, world=world, flags=["--quiet"],
                                sets=sets + [f"training.recompute={mode}"]),
                   timeout=300, env=dict(os.environ, TRIDENT_LOG_LEVEL="debug"))
        check(f"{name}, recompute {mode}: exit 0", r.returncode == 0, r.stderr[-600:])
        losses[mode] = tt.losses(run_dir) if r.returncode == 0 else None
        # rank 0's own line: the ranks' debug lines come in any order (other stages need
        # other amounts)
        m = re.search(r"rank 0 needs about .*?activations [0-9.]+ = ([0-9]+) bytes", r.stderr)
        act[mode] = int(m.group(1)) if m else None
    check(f"{name}: selective = none, bit for bit", losses["selective"] == losses["none"],
          f"{losses['selective']} vs {losses['none']}")
    check(f"{name}: full = none, bit for bit", losses["full"] == losses["none"])
    check(f"{name}: selective reserves the activation memory of none, full less "
          f"({act['selective']}, {act['none']}, {act['full']} bytes on rank 0)",
          None not in act.values() and act["selective"] == act["none"] and act["full"] < act["none"])
tt.finish()
