#!/usr/bin/python3
"""The README's main job learns: scripts/demo.sh's run, reproduced exactly. Debian's fortunes
corpus is prepared with `trident preprocess` into data/cache/fortunes (the file selection of
demo.sh), then `trident train --nproc 8 configs/tiny-3d.yaml --run-dir runs/tiny-3d` runs
from the folder holding data/cache (the config's data_path is relative to the working
directory), with no --set at all: 8 ranks (data 2 x tensor 2 x pipeline 2) and the config's
own iteration count. Checks, from metrics.jsonl: one line per iteration 1..train_iters,
loss(last) <= 0.6 x loss(1), and the validation loss falls (last val_loss < first). Also the
progress report on 8 ranks: eta_s is the mean ms_per_iter so far x the iterations left
(positive before the last, 0 at it), the ETA falls (mean of the first half of the run above
that of the second), the console line's eta never negative; summary.json's
dp_exposed_ms_per_iter is above 0 (DP 2 leaves the last bucket's all-reduce exposed).
usage: test_demo_loss.py TRIDENT SOURCE_ROOT WORKDIR   (exit 77 = SKIP without the corpus)"""
import glob
import json
import os
import re
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402

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
tt.fresh_dir(work)
os.makedirs(os.path.join(work, os.path.dirname(data_path)))
tt.preprocess(trident, corpus, data_path, cwd=work)
start = time.monotonic()
r = tt.run(tt.train_cmd(trident, config, "runs/tiny-3d", world=8), timeout=570, cwd=work)
seconds = time.monotonic() - start
if r.returncode:
    print(f"FAIL: trident train exited {r.returncode}\n{r.stderr[-3000:]}")
    sys.exit(1)
run_dir = os.path.join(work, "runs", "tiny-3d")
with open(os.path.join(run_dir, "summary.json")) as f:
    summary = json.load(f)
m = tt.metrics(run_dir)
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
etas = [x.get("eta_s") for x in m]
ms = [x["ms_per_iter"] for x in m]
want_eta = [sum(ms[:i + 1]) / (i + 1) * (iters - i - 1) / 1e3 for i in range(len(ms))]
half = len(etas) // 2
console_etas = re.findall(r"\| eta (\S+)", r.stdout)
print(f"eta_s: {etas[0]:.1f} s at iteration 1, {etas[half]:.1f} s at {half + 1}; "
      f"dp_exposed_ms_per_iter {summary.get('dp_exposed_ms_per_iter')}")
checks += [
    ("eta_s = mean ms_per_iter so far x iterations left, within 1e-6",
     None not in etas and all(abs(e - w) <= 1e-6 * max(1.0, w) for e, w in zip(etas, want_eta))),
    ("eta_s > 0 before the last iteration, 0 at it",
     None not in etas and all(e > 0 for e in etas[:-1]) and etas[-1] == 0),
    ("eta falls: the first half's mean above the second half's",
     None not in etas and sum(etas[:half]) / half > sum(etas[half:]) / (len(etas) - half)),
    (f"the console's eta on every line ({len(console_etas)}), none negative",
     len(console_etas) == iters and not any("-" in e for e in console_etas)),
    ("summary.json: dp_exposed_ms_per_iter > 0 with data-parallel size 2",
     summary.get("dp_exposed_ms_per_iter", 0) > 0),
]
for what, ok in checks:
    tt.check(what, ok)
tt.finish()
