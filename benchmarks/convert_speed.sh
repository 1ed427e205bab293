#!/usr/bin/env bash
# `trident convert` both ways on GPT-2 124M-sized weights (issue 16; target: under 2 s each),
# beside transformers on the same folder: GPT2LMHeadModel.from_pretrained (the import's peer:
# safetensors into a model) and save_pretrained (the export's peer: a model into
# safetensors). Random F32 weights, written by benchmarks/convert_model.py as save_pretrained
# lays them out (no torch needed for trident's side). Each side runs RUNS times, alternating,
# after a sync; the best and the median are printed, and the ratio of the medians. trident's
# times are whole processes (start-up, verification of every checksum, fsync of every file);
# transformers' are the calls alone, inside a warm interpreter, without fsync.
# transformers 4.38.2 goes into a virtual environment in the build folder (Debian's torch).
#
#   benchmarks/convert_speed.sh [--runs 3] [--build DIR] [--no-peer]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=3 build=build peer=1
while [ $# -gt 0 ]; do
  case $1 in
    --runs) runs=$2; shift 2;;
    --build) build=$2; shift 2;;
    --no-peer) peer=0; shift;;
    *) echo "usage: $0 [--runs N] [--build DIR] [--no-peer]" >&2; exit 2;;
  esac
done
venv=$build/bench-venv
if [ $peer = 1 ] && ! "$venv/bin/python" -c "import transformers" 2>/dev/null; then
  /usr/bin/python3 -m venv --system-site-packages "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "transformers==4.38.2" "tokenizers<0.19" safetensors
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/convert-speed.XXXXXX"); trap 'rm -rf "$work"' EXIT
/usr/bin/python3 benchmarks/convert_model.py "$work/hf" 12 768 12 1024 50257
/usr/bin/python3 - "$build/trident" "$work" "$runs" "$peer" "$venv/bin/python" <<'PY'
import json, os, shutil, statistics, subprocess, sys, time
trident, work, runs, peer, py = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1", sys.argv[5]
PEER = r"""
import json, sys, time, torch
from transformers import GPT2LMHeadModel
torch.set_num_threads(2)
src, out = sys.argv[1], sys.argv[2]
t0 = time.perf_counter(); m = GPT2LMHeadModel.from_pretrained(src); t1 = time.perf_counter()
m.save_pretrained(out); t2 = time.perf_counter()
print(json.dumps({"load": t1 - t0, "save": t2 - t1, "torch": torch.__version__}))
"""
def wall(cmd):
    os.sync()
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0
def fresh(*paths):
    for p in paths:
        shutil.rmtree(p, ignore_errors=True)
t = {"import": [], "export fp32": [], "export bf16": [], "from_pretrained": [], "save_pretrained": []}
ck, exp, exp16, hfsave = (os.path.join(work, n) for n in ("ck", "exp", "exp16", "hfsave"))
torch_version = "-"
for r in range(runs):
    fresh(ck, exp, exp16, hfsave)
    t["import"].append(wall([trident, "convert", "--from", "hf", "--input", os.path.join(work, "hf"), "--output", ck]))
    t["export fp32"].append(wall([trident, "convert", "--to", "hf", "--input", ck, "--output", exp]))
    t["export bf16"].append(wall([trident, "convert", "--to", "hf", "--input", ck, "--output", exp16, "--dtype", "bf16"]))
    if peer:
        os.sync()
        p = json.loads(subprocess.run([py, "-c", PEER, os.path.join(work, "hf"), hfsave], check=True,
                                      capture_output=True, text=True).stdout.splitlines()[-1])
        t["from_pretrained"].append(p["load"]); t["save_pretrained"].append(p["save"]); torch_version = p["torch"]
cpu = [l.split(":", 1)[1].strip() for l in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
       if l.startswith("Model name")][0]
size = os.path.getsize(os.path.join(work, "hf", "model.safetensors")) / 1e6
print(f"cpu: {cpu}, {os.cpu_count()} cpus; GPT-2 124M (model.safetensors {size:.0f} MB, F32), {runs} runs, "
      f"torch {torch_version}")
print(f"{'':34}{'best s':>8}{'median s':>10}")
for k, v in t.items():
    if v:
        print(f"{k:34}{min(v):8.2f}{statistics.median(v):10.2f}")
if peer:
    print(f"ratio import: transformers from_pretrained / trident convert --from hf = "
          f"{statistics.median(t['from_pretrained']) / statistics.median(t['import']):.2f}x")
    print(f"ratio export: transformers save_pretrained / trident convert --to hf = "
          f"{statistics.median(t['save_pretrained']) / statistics.median(t['export fp32']):.2f}x")
print("target: under 2 s each way:", "met" if max(statistics.median(t["import"]), statistics.median(t["export fp32"])) < 2
      else "NOT met")
PY
