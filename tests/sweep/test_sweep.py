#!/usr/bin/python3
"""`trident sweep` end to end on a small grid (world 2): one CSV/JSONL row per point, skips
explained, measured numbers and the planner's prediction on the points that ran, an SVG with
labelled axes that a headless browser renders; bad grid specs exit 2 with a message.
usage: test_sweep.py TRIDENT WORKDIR"""
import csv
import json
import os
import random
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

trident, work = sys.argv[1], sys.argv[2]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
rng = random.Random(5)
with open(os.path.join(work, "corpus.txt"), "w") as f:
    for _ in range(300):
        f.write(" ".join(rng.choice(["sweep", "grid", "point", "layout"]) for _ in range(rng.randint(3, 30))) + "\n\n")
prefix = os.path.join(work, "corpus")
subprocess.run([trident, "preprocess", "--input", os.path.join(work, "corpus.txt"), "--output-prefix", prefix],
               check=True, stdout=subprocess.DEVNULL)
grid = os.path.join(work, "grid.yaml")
with open(grid, "w") as f:
    f.write(f"""base:
  model: {{num_layers: 2, hidden_size: 32, num_attention_heads: 2, seq_length: 16}}
  training: {{micro_batch_size: 1, global_batch_size: 4, train_iters: 1, lr: 1.0e-3}}
  data: {{data_path: {prefix}, split: "90,10,0"}}
grid:
  parallel.tensor_model_parallel_size: [1, 2, 4]
  training.micro_batch_size: [1, 3]
run: {{world_size: 2, iterations: 4, warmup_iterations: 1}}
""")
failures = []


def check(what, ok, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {what} {detail}")
    if not ok:
        failures.append(what)


out = os.path.join(work, "out")
r = subprocess.run([trident, "sweep", grid, "--dry-run"], capture_output=True, text=True, timeout=60)
check("dry run exits 0 and explains skips", r.returncode == 0 and "skipped" in r.stdout and "would run" in r.stdout,
      r.stdout[-800:] + r.stderr[-500:])
check("dry run runs nothing", not os.path.exists(out))
r = subprocess.run([trident, "sweep", grid, "--out", out], capture_output=True, text=True, timeout=600)
check("sweep exits 0", r.returncode == 0, r.stdout[-1500:] + r.stderr[-1500:])
rows = list(csv.DictReader(open(os.path.join(out, "results.csv"))))
check("one CSV row per point", len(rows) == 6, str(len(rows)))
status = {(row["parallel.tensor_model_parallel_size"], row["training.micro_batch_size"]): row for row in rows}
check("tp 4 skipped: heads", status[("4", "1")]["status"] == "skipped" and "num_attention_heads" in status[("4", "1")]["reason"],
      status[("4", "1")]["reason"])
check("micro-batch 3 skipped: batch", status[("1", "3")]["status"] == "skipped", status[("1", "3")]["reason"])
for key in [("1", "1"), ("2", "1")]:
    row = status[key]
    ok = row["status"] == "ok" and float(row["tokens_per_s"]) > 0 and float(row["median_ms_per_iter"]) > 0 \
        and float(row["peak_rss_mb_max_rank"]) > 0 and float(row["predicted_ms_per_iter"]) > 0 \
        and row["final_loss"] != ""
    check(f"point tp={key[0]} ran and measured", ok, str(row))
check("same final loss for both layouts", status[("1", "1")]["final_loss"] == status[("2", "1")]["final_loss"],
      f'{status[("1", "1")]["final_loss"]} vs {status[("2", "1")]["final_loss"]}')
lines = [json.loads(line) for line in open(os.path.join(out, "results.jsonl"))]
check("one JSONL row per point", len(lines) == 6)
svg_path = os.path.join(out, "chart.svg")
root = ET.parse(svg_path).getroot()
texts = " ".join(t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text"))
check("SVG has labelled axes", "tokens/s" in texts and "layout point" in texts, texts[:200])
bars = [e for e in root.iter("{http://www.w3.org/2000/svg}rect") if e.get("fill") == "#4878cf"]
check("SVG has a bar per point that ran", len(bars) == 2, str(len(bars)))
browser = shutil.which("chromium") or shutil.which("chromium-browser")
if browser:
    png = os.path.join(work, "chart.png")
    r = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", f"--screenshot={png}",
                        "--window-size=900,400", "file://" + os.path.abspath(svg_path)],
                       capture_output=True, text=True, timeout=120)
    ok = os.path.exists(png) and os.path.getsize(png) > 2000
    if ok:
        data = open(png, "rb").read()
        ok = data[:8] == b"\x89PNG\r\n\x1a\n"
    check("headless chromium renders the SVG to a PNG", ok, r.stderr[-300:])
else:
    print("note: chromium not installed; the browser rendering check did not run")

bad = {
    "no-grid.yaml": ("base: x.yaml\n", "no grid"),
    "bad-axis.yaml": ("base: x.yaml\ngrid:\n  tp: [1]\n", "without a section"),
    "empty-axis.yaml": ("base: x.yaml\ngrid:\n  training.lr: []\n", "non-empty list"),
    "bad-run.yaml": ("base: x.yaml\ngrid:\n  training.lr: [1]\nrun: {world_size: 0}\n", "world"),
    "unknown.yaml": ("base: x.yaml\ngrid:\n  training.lr: [1]\nextra: 1\n", "unknown section"),
    "garbage.yaml": ("\x00\x01[[[{", ""),
}
for name, (text, needle) in bad.items():
    path = os.path.join(work, name)
    open(path, "w").write(text)
    r = subprocess.run([trident, "sweep", path, "--dry-run"], capture_output=True, text=True, timeout=30)
    check(f"bad grid spec {name}: exit 2", r.returncode == 2 and needle in r.stderr and name in r.stderr,
          r.stderr.strip()[-300:])
r = subprocess.run([trident, "sweep"], capture_output=True, text=True)
check("no grid spec: exit 2", r.returncode == 2)
sys.exit(1 if failures else 0)
