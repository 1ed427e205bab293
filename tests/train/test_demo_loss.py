#!/usr/bin/python3
"""The README's main job learns: scripts/demo.sh's run, reproduced exactly. Debian's fortunes
corpus is prepared with `trident preprocess` into data/cache/fortunes (the file selection of
demo.sh), then `trident train --nproc 8 configs/tiny-3d.yaml --run-dir runs/tiny-3d` runs
from the folder holding data/cache (the config's data_path is relative to the working
directory), with no --set at all: 8 ranks (data 2 x tensor 2 x pipeline 2) and the config's
own iteration count. Checks, from metrics.jsonl: one line per iteration 1..train_iters,
loss(last) <= 0.6 x loss(1), and the validation loss falls (last val_loss < first).
usage: test_demo_loss.py TRIDENT SOURCE_ROOT WORKDIR   (exit 77 = SKIP without the corpus)"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time

trident, root, work = (os.path.abspath(a) for a in sys.argv[1:4])
config = os.path.join(root, "configs", "tiny-3d.yaml")
# demo.sh: every /usr/share/games/fortunes/* that is a regular file, not a link, not .dat/.u8
corpus = [f for f in sorted(glob.glob("/usr/share/games/fortunes/*"))
          if os.path.isfile(f) and not os.path.islink(f) and not f.endswith((".dat", ".u8"))]
if not corpus:
    print("SKIP: Debian's fortunes corpus is not installed (scripts/setup.sh installs it)")
    sys.exit(77)
with open(config) as f:
    text = f.read()
iters = int(re.search(r"^\s+train_iters:\s*(\d+)", text, re.M).group(1))
data_path = re.search(r"^\s+data_path:\s*(\S+)", text, re.M).group(1)
shutil.rmtree(work, ignore_errors=True)
os.makedirs(os.path.join(work, os.path.dirname(data_path)))
subprocess.run([trident, "preprocess", "--input", *corpus, "--output-prefix", data_path],
               check=True, stdout=subprocess.DEVNULL, cwd=work)
start = time.monotonic()
r = subprocess.run([trident, "train", "--nproc", "8", config, "--run-dir", "runs/tiny-3d"],
                   capture_output=True, text=True, timeout=570, cwd=work)
seconds = time.monotonic() - start
if r.returncode:
    print(f"FAIL: trident train exited {r.returncode}\n{r.stderr[-3000:]}")
    sys.exit(1)
run_dir = os.path.join(work, "runs", "tiny-3d")
with open(os.path.join(run_dir, "summary.json")) as f:
    summary = json.load(f)
with open(os.path.join(run_dir, "metrics.jsonl")) as f:
    m = [json.loads(line) for line in f]
first, last = m[0]["loss"], m[-1]["loss"]
vals = [(x["iteration"], x["val_loss"]) for x in m if "val_loss" in x]
layout = tuple(summary.get(k) for k in ("world_size", "data_parallel_size",
                                        "tensor_model_parallel_size",
                                        "pipeline_model_parallel_size"))
print(f"{iters} iterations on world {layout[0]} = data {layout[1]} x tensor {layout[2]} x "
      f"pipeline {layout[3]} in {seconds:.0f} s: loss {first:.4f} -> {last:.4f} "
      f"(x{last / first:.2f}); validation {vals}")
checks = [
    ("8 ranks, data 2 x tensor 2 x pipeline 2", layout == (8, 2, 2, 2)),
    (f"one metrics line per iteration 1..{iters}",
     [x["iteration"] for x in m] == list(range(1, iters + 1))),
    ("loss at the last iteration <= 0.6 x loss at iteration 1", last <= 0.6 * first),
    ("at least two validation losses, the last below the first",
     len(vals) >= 2 and vals[-1][1] < vals[0][1]),
]
for what, ok in checks:
    print(f"{'ok  ' if ok else 'FAIL'} {what}")
sys.exit(0 if all(ok for _, ok in checks) else 1)
