#!/usr/bin/python3
"""The demo learns: configs/tiny.yaml on Debian's fortunes corpus (prepared with `trident
preprocess`, as scripts/demo.sh does), 60 iterations: the loss falls by at least 40% from
iteration 1 and the validation loss falls between the two evaluations.
usage: test_demo_loss.py TRIDENT SOURCE_ROOT WORKDIR   (exit 77 = SKIP without the corpus)"""
import glob
import json
import os
import shutil
import subprocess
import sys

trident, root, work = sys.argv[1:4]
corpus = [f for f in sorted(glob.glob("/usr/share/games/fortunes/*"))
          if os.path.isfile(f) and not os.path.islink(f) and not f.endswith((".dat", ".u8"))]
if not corpus:
    print("SKIP: Debian's fortunes corpus is not installed (scripts/setup.sh installs it)")
    sys.exit(77)
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
prefix = os.path.join(work, "fortunes")
subprocess.run([trident, "preprocess", "--input", *corpus, "--output-prefix", prefix], check=True,
               stdout=subprocess.DEVNULL)
r = subprocess.run([trident, "train", os.path.join(root, "configs", "tiny.yaml"), "--run-dir",
                    os.path.join(work, "run"), "--quiet", "--set", f"data.data_path={prefix}",
                    "--set", "training.train_iters=60", "--set", "training.eval_interval=30"],
                   capture_output=True, text=True, timeout=600)
if r.returncode:
    print(r.stderr[-2000:])
    sys.exit(1)
m = [json.loads(line) for line in open(os.path.join(work, "run", "metrics.jsonl"))]
first, last = m[0]["loss"], m[-1]["loss"]
vals = [x["val_loss"] for x in m if "val_loss" in x]
drop = 1 - last / first
print(f"loss {first:.4f} -> {last:.4f} ({100 * drop:.0f}% lower); validation {vals}")
ok = drop >= 0.40 and len(vals) == 2 and vals[1] < vals[0]
print("ok" if ok else "FAIL: the loss must fall by 40% and the validation loss must fall")
sys.exit(0 if ok else 1)
