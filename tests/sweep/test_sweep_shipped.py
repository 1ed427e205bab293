#!/usr/bin/python3
"""The shipped grid configs/sweeps/tiny-8ranks.yaml run for real (8 ranks per point, ~35 s on
a quiet 2-core machine): 48 CSV rows, 23 ok, 25 skipped with a reason, none failed, every
rank's peak memory recorded, and one final loss for every layout (to 1e-4: the layouts compute
the same training step).
The grid's base (configs/tiny.yaml) reads data/cache/fortunes, which only scripts/demo.sh
makes; so the test preprocesses its own generated corpus and runs copies of the two files in
WORKDIR: the grid with only its run section's iteration counts cut (3, 1 of them warm-up:
CI time; the points, their skips and layouts are the shipped ones), the base with only
data.data_path changed.
usage: test_sweep_shipped.py TRIDENT SOURCE_ROOT WORKDIR"""
import csv
import json
import os
import re
import shutil
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402
from trident_test import check  # noqa: E402

trident, src, work = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2]), os.path.abspath(sys.argv[3])
tt.fresh_dir(work)
os.makedirs(os.path.join(work, "configs", "sweeps"))
os.makedirs(os.path.join(work, "data"))

# ~300 KB of text in paragraphs (documents): plenty for 6 iterations x 16 sequences x 128 bytes
words = ["rank", "tensor", "pipeline", "stage", "micro", "batch", "gradient", "loss", "layer",
         "head", "token", "sweep", "the", "a", "of", "and", "to", "in"]
prefix = tt.make_corpus(trident, work, 8, words, 2000, 10, 40, prefix=os.path.join(work, "data", "corpus"),
                        end=".\n\n", capitalize=True, timeout=120)

# configs/tiny.yaml with its data path pointed at the corpus; the grid copied unchanged, so
# its "base: ../tiny.yaml" finds the copy.
base_text = open(os.path.join(src, "configs", "tiny.yaml")).read()
base_text, n = re.subn(r"(?m)^(\s*data_path:\s*)\S+", lambda m: m.group(1) + prefix, base_text)
check("configs/tiny.yaml has one data_path to point at the test corpus", n == 1, str(n))
open(os.path.join(work, "configs", "tiny.yaml"), "w").write(base_text)
grid = os.path.join(work, "configs", "sweeps", "tiny-8ranks.yaml")
grid_text = open(os.path.join(src, "configs", "sweeps", "tiny-8ranks.yaml")).read()
grid_text, n = re.subn(r"(?m)^(\s*iterations:\s*)\d+", r"\g<1>3", grid_text)
grid_text, m = re.subn(r"(?m)^(\s*warmup_iterations:\s*)\d+", r"\g<1>1", grid_text)
check("the grid has one iterations and one warmup_iterations to cut", n == 1 and m == 1, f"{n} {m}")
open(grid, "w").write(grid_text)

out = os.path.join(work, "out")
t0 = time.time()
r = tt.run([trident, "sweep", grid, "--out", out], timeout=870, cwd=work)
elapsed = time.time() - t0
print(f"note: the sweep took {elapsed:.1f} s")
check("sweep exits 0", r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:])
summary = [line for line in r.stdout.splitlines() if line.startswith("sweep: 48 points")]
check("summary: 23 ran, 25 skipped, 0 failed", summary and "23 ran, 25 skipped, 0 failed" in summary[0],
      str(summary))

csv_path = os.path.join(out, "results.csv")
rows = list(csv.DictReader(open(csv_path))) if os.path.exists(csv_path) else []
check("48 CSV rows", len(rows) == 48, str(len(rows)))
ok = [row for row in rows if row["status"] == "ok"]
skipped = [row for row in rows if row["status"] == "skipped"]
failed = [row for row in rows if row["status"] == "failed"]
check("23 ok", len(ok) == 23, str(len(ok)))
check("25 skipped", len(skipped) == 25, str(len(skipped)))
check("none failed", not failed, "; ".join(f"point {row['point']}: {row['reason']}" for row in failed)[:2000])
check("every skip has a reason", all(row["reason"].strip() for row in skipped),
      str([row["point"] for row in skipped if not row["reason"].strip()]))
for row in ok:
    per_rank = [float(v) for v in row["peak_rss_mb_per_rank"].split(";")] if row["peak_rss_mb_per_rank"] else []
    good = len(per_rank) == 8 and min(per_rank) > 0 and float(row["tokens_per_s"]) > 0 \
        and abs(max(per_rank) - float(row["peak_rss_mb_max_rank"])) <= 1e-3 * max(per_rank)
    if not good:
        check(f"point {row['point']}: 8 ranks' peak memory, measured", False, str(row))
losses = [float(row["final_loss"]) for row in ok if row["final_loss"]]
check("every ok point has a final loss", len(losses) == len(ok), f"{len(losses)} of {len(ok)}")
if losses:
    spread = max(losses) - min(losses)
    check("one final loss for every layout (to 1e-4)", spread <= 1e-4,
          f"spread {spread:.3g}: " + ", ".join(f"dp{row['dp']} tp{row['tp']} pp{row['pp']} "
                                               f"mb{row['training.micro_batch_size']}={row['final_loss']}" for row in ok))
    print(f"note: final loss {min(losses):.6f} .. {max(losses):.6f}")
jl_path = os.path.join(out, "results.jsonl")
jl = [json.loads(line) for line in open(jl_path)] if os.path.exists(jl_path) else []
check("48 JSONL rows, 8 ranks' peaks on each that ran",
      len(jl) == 48 and all(len(p.get("peak_rss_mb_per_rank", [])) == 8 for p in jl if p["status"] == "ok"))
check("chart.svg written", os.path.exists(os.path.join(out, "chart.svg")))
if not tt.failures:
    shutil.rmtree(work, ignore_errors=True)  # 23 runs' traces: keep them only to debug a failure
tt.finish()
