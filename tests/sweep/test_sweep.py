#!/usr/bin/python3
"""`trident sweep` end to end on a small grid (world 2): one CSV/JSONL row per point, skips
explained, measured numbers (peak memory of every rank too) and the planner's prediction on
the points that ran, an SVG with labelled axes that headless chromium renders; a point that
fails at run time (a truncated .idx) is recorded with the rank's own error and the sweep goes
on; expert parallelism as an axis (EP 1 and 2 run with one final loss, each predicted; EP 4
on DP 2 skipped by name); the shipped 8-rank grid's dry run lists its 48 points with the 25
skips explained; bad grid specs exit 2 with a message.
usage: test_sweep.py TRIDENT WORKDIR SHIPPED_GRID (configs/sweeps/tiny-8ranks.yaml)"""
import csv
import json
import os
import re
import shutil
import sys
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402
from trident_test import check  # noqa: E402

trident, work, shipped_grid = os.path.abspath(sys.argv[1]), tt.fresh_dir(sys.argv[2]), os.path.abspath(sys.argv[3])
prefix = tt.make_corpus(trident, work, 5, ["sweep", "grid", "point", "layout"], 300, 3, 30)
grid = tt.write(os.path.join(work, "grid.yaml"), f"""base:
  model: {{num_layers: 2, hidden_size: 32, num_attention_heads: 2, seq_length: 16}}
  training: {{micro_batch_size: 1, global_batch_size: 4, train_iters: 1, lr: 1.0e-3}}
  data: {{data_path: {prefix}, split: "90,10,0"}}
grid:
  parallel.tensor_model_parallel_size: [1, 2, 4]
  training.micro_batch_size: [1, 3]
run: {{world_size: 2, iterations: 4, warmup_iterations: 1}}
""")
out = os.path.join(work, "out")
r = tt.run([trident, "sweep", grid, "--dry-run"], timeout=60)
check("dry run exits 0 and explains skips", r.returncode == 0 and "skipped" in r.stdout and "would run" in r.stdout,
      r.stdout[-800:] + r.stderr[-500:])
check("dry run runs nothing", not os.path.exists(out))
r = tt.run([trident, "sweep", grid, "--out", out], timeout=600)
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
for key in [("1", "1"), ("2", "1")]:
    row = status[key]
    per_rank = [float(v) for v in row["peak_rss_mb_per_rank"].split(";")] if row["peak_rss_mb_per_rank"] else []
    check(f"point tp={key[0]}: peak memory of both ranks, the max matches",
          len(per_rank) == 2 and all(v > 0 for v in per_rank)
          and abs(max(per_rank) - float(row["peak_rss_mb_max_rank"])) <= 1e-3 * max(per_rank),
          row["peak_rss_mb_per_rank"] + " / " + row["peak_rss_mb_max_rank"])
    point_dir = os.path.join(out, "point-%03d" % int(row["point"]))
    check(f"point tp={key[0]}: stdout.log and stderr.log kept",
          all(os.path.isfile(os.path.join(point_dir, n)) for n in ("stdout.log", "stderr.log")))
for row in rows:
    if row["status"] != "ok":
        check(f"point {row['point']} ({row['status']}): no memory columns",
              row["peak_rss_mb_max_rank"] == "" and row["peak_rss_mb_per_rank"] == "", str(row))
# every layout trains the same model: within 1e-5 relative (DESIGN invariant 1), not bit for
# bit (T=2 sums the row-parallel products in another order)
fl1, fl2 = float(status[("1", "1")]["final_loss"]), float(status[("2", "1")]["final_loss"])
check("the same final loss for both layouts (relative difference <= 1e-5)",
      abs(fl1 - fl2) <= 1e-5 * abs(fl1), f"{fl1!r} vs {fl2!r}")
lines = [json.loads(line) for line in open(os.path.join(out, "results.jsonl"))]
check("one JSONL row per point", len(lines) == 6)
for line in lines:
    if line["status"] == "ok":
        ranks = line.get("peak_rss_mb_per_rank")
        check(f"JSONL point {line['point']}: peak memory per rank is a list of 2, max = the max column",
              isinstance(ranks, list) and len(ranks) == 2 and max(ranks) == line["peak_rss_mb_max_rank"], str(line))
    else:
        check(f"JSONL point {line['point']}: no memory fields when it did not run",
              "peak_rss_mb_per_rank" not in line and "peak_rss_mb_max_rank" not in line, str(line))
svg_path = os.path.join(out, "chart.svg")
root = ET.parse(svg_path).getroot()
texts = " ".join(t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text"))
check("SVG has labelled axes", "tokens/s" in texts and "layout point" in texts, texts[:200])
bars = [e for e in root.iter("{http://www.w3.org/2000/svg}rect") if e.get("fill") == "#4878cf"]
check("SVG has a bar per point that ran", len(bars) == 2, str(len(bars)))
# scripts/setup.sh installs chromium: without it the chart is not checked, which is a failure
browser = shutil.which("chromium") or shutil.which("chromium-browser")
check("chromium is installed (scripts/setup.sh) to render the chart", browser is not None)
if browser:
    png = os.path.join(work, "chart.png")
    r = tt.run([browser, "--headless", "--no-sandbox", "--disable-gpu", f"--screenshot={png}",
                "--window-size=900,400", "file://" + os.path.abspath(svg_path)], timeout=120)
    ok = os.path.exists(png) and os.path.getsize(png) > 2000
    if ok:
        data = open(png, "rb").read()
        ok = data[:8] == b"\x89PNG\r\n\x1a\n"
    check("headless chromium renders the SVG to a PNG", ok, r.stderr[-300:])

# A point that passes the validity pre-check but fails at run time (its .idx is truncated):
# failed, with the failing rank's own message, and the sweep runs the next point.
shutil.copy(prefix + ".bin", os.path.join(work, "broken.bin"))
with open(prefix + ".idx", "rb") as src, open(os.path.join(work, "broken.idx"), "wb") as dst:
    dst.write(src.read()[:40])
fail_grid = tt.write(os.path.join(work, "fail-grid.yaml"), f"""base:
  model: {{num_layers: 2, hidden_size: 32, num_attention_heads: 2, seq_length: 16}}
  training: {{micro_batch_size: 1, global_batch_size: 4, train_iters: 1, lr: 1.0e-3}}
  data: {{data_path: {prefix}, split: "90,10,0"}}
grid:
  data.data_path: [{os.path.join(work, "broken")}, {prefix}]
run: {{world_size: 2, iterations: 3, warmup_iterations: 1}}
""")
fail_out = os.path.join(work, "fail-out")
r = tt.run([trident, "sweep", fail_grid, "--out", fail_out], timeout=300)
check("sweep with a failing point exits 0 and counts it", r.returncode == 0 and "1 ran, 0 skipped, 1 failed" in r.stdout,
      r.stdout[-1500:] + r.stderr[-1500:])
rows = list(csv.DictReader(open(os.path.join(fail_out, "results.csv"))))
check("failing grid: one CSV row per point", len(rows) == 2, str(len(rows)))
if len(rows) == 2:
    bad_row, good_row = rows
    reason = bad_row["reason"]
    check("truncated .idx: status failed", bad_row["status"] == "failed", str(bad_row))
    check("truncated .idx: the reason is the rank's own error, not the launcher's line",
          re.match(r"rank \d+: ", reason) is not None and "broken.idx" in reason and "truncated" in reason
          and "trident train: " not in reason.split(" (")[0], reason)
    check("truncated .idx: the launcher's line follows in parentheses",
          reason.endswith("failed; exit status 2)") and "all ranks stopped" in reason, reason)
    check("truncated .idx: bounded, one line", len(reason) < 1024 and "\n" not in reason, str(len(reason)))
    check("the sweep went on: the next point ran", good_row["status"] == "ok" and float(good_row["tokens_per_s"]) > 0,
          str(good_row))
    jl = [json.loads(line) for line in open(os.path.join(fail_out, "results.jsonl"))]
    check("truncated .idx: the same reason in results.jsonl", len(jl) == 2 and jl[0].get("reason") == reason,
          str(jl[:1]))
    check("the failed point's stderr.log holds the rank lines",
          "[r" in open(os.path.join(fail_out, "point-000", "stderr.log")).read())

# The shipped 8-rank grid, dry run: 48 points, the 25 skips each with the reason its layout
# implies (configs/tiny.yaml: 4 heads, 4 layers, global batch 16), the other 23 would run.
# a sample-based base with a batch ramp-up (Bloom's kind of config) is measured as run.iterations
# steps of its final batch: its points ran (they used to be skipped: train_iters and train_samples
# both set), the ramp-up off and the LR's samples as iterations of the final batch
samples_grid = tt.write(os.path.join(work, "grid-samples.yaml"), f"""base:
  model: {{num_layers: 2, hidden_size: 32, num_attention_heads: 2, seq_length: 16}}
  training: {{micro_batch_size: 1, global_batch_size: 4, lr: 1.0e-3, train_samples: 4000,
             lr_warmup_samples: 404, lr_decay_samples: 3000, rampup_batch_size: [2, 2, 40]}}
  data: {{data_path: {prefix}, split: "90,10,0"}}
grid:
  training.micro_batch_size: [1]
run: {{world_size: 1, iterations: 3, warmup_iterations: 1}}
""")
out_s = os.path.join(work, "out-samples")
r = tt.run([trident, "sweep", samples_grid, "--out", out_s], timeout=300)
rows = list(csv.DictReader(open(os.path.join(out_s, "results.csv")))) if r.returncode == 0 else []
check("sample-based base with a ramp-up: its point ran", len(rows) == 1 and rows[0]["status"] == "ok",
      r.stdout[-1000:] + r.stderr[-500:])
check("sample-based base: the sweep says how it measures it",
      "each point runs 3 iterations of its final global batch (ramp-up off" in r.stdout, r.stdout[-600:])
point_yaml = open(os.path.join(out_s, "point-000", "point.yaml")).read() if rows else ""
for want in ("train_iters: 3", "train_samples: 0", "rampup_batch_size: []", "lr_decay_iters: 750",
             "lr_warmup_iters: 101"):
    check(f"sample-based base: the point's config has {want}", want in point_yaml, point_yaml[:400])

r = tt.run([trident, "sweep", shipped_grid, "--dry-run"], timeout=120, cwd=work)
check("shipped grid dry run exits 0", r.returncode == 0, r.stderr[-500:])
pat = re.compile(r"^sweep: point (\d+): parallel\.tensor_model_parallel_size=(\d+) "
                 r"parallel\.pipeline_model_parallel_size=(\d+) training\.micro_batch_size=(\d+) -> "
                 r"(?:skipped: (.+)|would run \(dp (\d+) tp \d+ pp \d+\))$")
points = {}
for line in r.stdout.splitlines():
    m = pat.match(line)
    if m:
        idx = int(m.group(1))
        check(f"shipped grid: point {idx} listed once", idx not in points)
        points[idx] = m
check("shipped grid: 48 points listed, one line each", sorted(points) == list(range(48)), str(sorted(points)))
check("shipped grid: summary line", "sweep: 48 points, 25 would be skipped (dry run)" in r.stdout, r.stdout[-300:])
n_skip = n_run = 0
for idx, m in sorted(points.items()):
    tp, pp, mb = int(m.group(2)), int(m.group(3)), int(m.group(4))
    reason = m.group(5)
    if tp == 8:
        want = "num_attention_heads"
    elif pp == 8:
        want = "num_layers"
    elif 8 % (tp * pp):
        want = "not divisible by tp"
    elif 16 % (mb * (8 // (tp * pp))):
        want = "global batch 16 is not divisible"
    else:
        want = None
    if want:
        n_skip += 1
        check(f"shipped grid: point {idx} (tp {tp} pp {pp} mb {mb}) skipped because {want}",
              reason is not None and want in reason, str(reason))
    else:
        n_run += 1
        check(f"shipped grid: point {idx} (tp {tp} pp {pp} mb {mb}) would run with dp {8 // (tp * pp)}",
              reason is None and int(m.group(6)) == 8 // (tp * pp), m.group(0))
check("shipped grid: 25 skipped, 23 would run", (n_skip, n_run) == (25, 23), f"{n_skip} / {n_run}")
check("shipped grid dry run writes nothing (no results.csv)", not os.path.exists(os.path.join(work, "runs")))

# Expert parallelism as a grid axis (a tiny MoE, world 2): EP 1 and EP 2 run with the same
# final loss and the planner's prediction beside each, EP 2's larger by its all-to-alls; EP 4
# (not dividing DP 2) does not run, naming the key
ep_grid = tt.write(os.path.join(work, "ep.yaml"), f"""base:
  model: {{num_layers: 2, hidden_size: 32, num_attention_heads: 2, seq_length: 16, num_experts: 4}}
  training: {{micro_batch_size: 1, global_batch_size: 4, train_iters: 1, lr: 1.0e-3}}
  data: {{data_path: {prefix}, split: "90,10,0"}}
grid:
  parallel.expert_model_parallel_size: [1, 2, 4]
run: {{world_size: 2, iterations: 4, warmup_iterations: 1}}
""")
ep_out = os.path.join(work, "ep-out")
r = tt.run([trident, "sweep", ep_grid, "--out", ep_out], timeout=300)
check("EP sweep exits 0", r.returncode == 0, r.stdout[-800:] + r.stderr[-500:])
rows = {row["parallel.expert_model_parallel_size"]: row
        for row in csv.DictReader(open(os.path.join(ep_out, "results.csv")))}
ran = [rows.get(k, {}) for k in ("1", "2")]
check("EP 1 and EP 2 ran, predicted", all(row.get("status") == "ok" and
                                          float(row["predicted_ms_per_iter"]) > 0 for row in ran),
      str(ran))
if all(row.get("status") == "ok" for row in ran):
    check("EP 2: the same final loss, a longer predicted step (its all-to-alls)",
          abs(float(ran[1]["final_loss"]) / float(ran[0]["final_loss"]) - 1) <= 1e-4 and
          float(ran[1]["predicted_ms_per_iter"]) > float(ran[0]["predicted_ms_per_iter"]),
          str(ran))
check("EP 4 on DP 2 is skipped before it starts, naming the key",
      rows.get("4", {}).get("status") == "skipped" and
      "expert_model_parallel_size" in rows.get("4", {}).get("reason", ""), str(rows.get("4")))

bad = {
    "no-grid.yaml": ("base: x.yaml\n", "no grid"),
    "bad-axis.yaml": ("base: x.yaml\ngrid:\n  tp: [1]\n", "without a section"),
    "empty-axis.yaml": ("base: x.yaml\ngrid:\n  training.lr: []\n", "non-empty list"),
    "bad-run.yaml": ("base: x.yaml\ngrid:\n  training.lr: [1]\nrun: {world_size: 0}\n", "world"),
    "unknown.yaml": ("base: x.yaml\ngrid:\n  training.lr: [1]\nextra: 1\n", "unknown section"),
    "garbage.yaml": ("\x00\x01[[[{", ""),
    # keys that are not plain names (each crashed the parser once) and repeated ones
    "list-key.yaml": ("[a]: 1\n", "a key of the grid spec that is a list"),
    "map-axis-key.yaml": ("base: x.yaml\ngrid:\n  [training.lr]: [1]\n", "a key of grid that is a list"),
    "map-run-key.yaml": ("base: x.yaml\ngrid:\n  training.lr: [1]\nrun:\n  {a: 1}: 2\n",
                         "a key of run that is a mapping"),
    "map-base-key.yaml": ("base:\n  {a: 1}: {lr: 1}\ngrid:\n  training.lr: [1]\n",
                          "a key of base that is a mapping"),
    "dup-base.yaml": ("base: x.yaml\nbase: y.yaml\ngrid:\n  training.lr: [1]\n", "section 'base' twice"),
    "dup-axis.yaml": ("base: x.yaml\ngrid:\n  training.lr: [1]\n  training.lr: [2]\n",
                      "grid axis 'training.lr' twice"),
    "dup-run-section.yaml": ("base: x.yaml\ngrid:\n  training.lr: [1]\nrun: {iterations: 3}\nrun: {iterations: 4}\n",
                             "section 'run' twice"),
    "dup-run.yaml": ("base: x.yaml\ngrid:\n  training.lr: [1]\nrun: {iterations: 3, iterations: 4}\n",
                     "run setting 'iterations' twice"),
    "dup-base-key.yaml": ("base:\n  training: {lr: 1, lr: 2}\ngrid:\n  training.lr: [1]\n",
                          "base key 'training.lr' twice"),
}
for name, (text, needle) in bad.items():
    path = tt.write(os.path.join(work, name), text)
    r = tt.run([trident, "sweep", path, "--dry-run"], timeout=30)
    check(f"bad grid spec {name}: exit 2", r.returncode == 2 and needle in r.stderr and name in r.stderr,
          r.stderr.strip()[-300:])
r = tt.run([trident, "sweep"])
check("no grid spec: exit 2", r.returncode == 2)
tt.finish()
