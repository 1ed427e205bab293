#!/usr/bin/env bash
# One GPU, GPT-2 124M at sequence 1024, the largest micro-batch that fits trident: trident's
# step (benchmarks/gpu_step) beside PyTorch eager and torch.compile at the same micro-batch
# (benchmarks/gpu_step_torch.py) on the same GPU; prints ms/iter, tokens/s, TFLOP/s, MFU and
# each peer's ratio to trident, as a Markdown table for benchmarks/RESULTS.md.
#   benchmarks/gpu_step.sh [--precision bf16|fp32] [--iters N] [other gpu_step options]
# Builds ./build first (meson setup when missing). Exit 77 where no GPU is usable.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f build/build.ninja ] || meson setup build --buildtype=release >/dev/null
ninja -C build benchmarks/gpu_step >/dev/null
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
set +e
./build/benchmarks/gpu_step --json "$@" >"$out/trident.json"
rc=$?
set -e
if [ $rc -eq 77 ]; then cat "$out/trident.json"; exit 77; fi
[ $rc -eq 0 ] || { cat "$out/trident.json"; echo "gpu_step failed ($rc)"; exit $rc; }
prec=bf16; iters=10
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[$i]}" in
    --precision) prec=${args[$((i + 1))]} ;;
    --iters) iters=${args[$((i + 1))]} ;;
  esac
done
# a Python that has PyTorch ($PYTHON, else python3, else Debian's)
py=${PYTHON:-}
for cand in python3 /usr/bin/python3; do
  [ -n "$py" ] && break
  "$cand" -c 'import torch' 2>/dev/null && py=$cand
done
py=${py:-python3}
mb=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["micro_batch"])' "$out/trident.json")
for mode in eager compile; do
  "$py" benchmarks/gpu_step_torch.py --micro-batch "$mb" --mode "$mode" --precision "$prec" \
    --iters "$iters" --json >"$out/$mode.json" 2>"$out/$mode.err" ||
    echo "{\"impl\": \"pytorch-$mode\", \"error\": \"$(tail -1 "$out/$mode.err" | tr -d '"\\')\"}" >"$out/$mode.json"
done
python3 - "$out" <<'PY'
import json, os, sys, datetime, socket
d = sys.argv[1]
rows = [json.load(open(os.path.join(d, f + ".json"))) for f in ("trident", "eager", "compile")]
t = rows[0]
print(f"GPT-2 124M, seq {t['seq']}, micro-batch {t['micro_batch']}, {t['precision']}, {t['gpu']}, "
      f"{datetime.date.today()} on {socket.gethostname()}\n")
print("| implementation | ms/iter | tokens/s | TFLOP/s | MFU | memory GiB | trident speed-up |")
print("|---|---:|---:|---:|---:|---:|---:|")
for r in rows:
    if "error" in r:
        print(f"| {r['impl']} | failed: {r['error']} | | | | | |")
        continue
    mfu = f"{100 * r['mfu']:.1f}%" if r.get("mfu") is not None else "n/a"
    print(f"| {r['impl']} | {r['ms_per_iter']:.2f} | {r['tokens_per_s']:.0f} | {r['tflops']:.1f} | {mfu} "
          f"| {r['memory_gib']:.1f} | {r['ms_per_iter'] / t['ms_per_iter']:.2f}x |")
PY
