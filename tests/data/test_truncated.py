#!/usr/bin/python3
"""A data file truncated while a job trains it (issue 23, point 13): the ranks that read it
end with exit 2 and a message naming the file, not a SIGBUS with a UCX backtrace. One rank,
and two ranks (UCX's own SIGBUS handler is installed first; ours passes on what is not a
dataset mapping).
usage: test_truncated.py TRIDENT WORKDIR"""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402
from trident_test import check  # noqa: E402

trident, work = sys.argv[1], tt.fresh_dir(sys.argv[2])
for world in (1, 2):
    d = tt.fresh_dir(os.path.join(work, f"w{world}"))
    prefix = tt.make_corpus(trident, d, 31, ["trunc", "ated", "bus", "map"], 400, 5, 40)
    config = tt.write_config(os.path.join(d, "small.yaml"),
        model=dict(num_layers=1, hidden_size=32, num_attention_heads=2, seq_length=16),
        training=dict(micro_batch_size=2, global_batch_size=4, train_iters=1000000, lr=1.0e-3),
        data=dict(data_path=prefix, split="100,0,0"))
    run_dir = os.path.join(d, "run")
    p = subprocess.Popen(tt.train_cmd(trident, config, run_dir, world=world, flags=["--quiet"]),
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    metrics = os.path.join(run_dir, "metrics.jsonl")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and p.poll() is None and not (
            os.path.exists(metrics) and os.path.getsize(metrics) > 2000):
        time.sleep(0.05)
    os.truncate(prefix + ".bin", 0)
    t0 = time.monotonic()
    _, err = tt.wait_output(p, 30)
    took = time.monotonic() - t0
    check(f"{world} rank(s): exit 2 within 10 s naming {os.path.basename(prefix)}.bin "
          f"(took {took:.1f} s)",
          p.returncode == 2 and took < 10 and prefix + ".bin" in err and "truncated" in err
          and "SIGBUS" in err, f"exit {p.returncode}: {err[-1200:]}")
tt.finish()
