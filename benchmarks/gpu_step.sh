#!/usr/bin/env bash
# One GPU, GPT-2 124M at sequence 1024, the largest micro-batch that fits trident: trident's
# step (benchmarks/gpu_step) beside PyTorch eager and torch.compile at the same micro-batch
# (benchmarks/gpu_step_torch.py, run by a python3 that imports torch: the GPU image's) on the
# same GPU; prints ms/iter, tokens/s, TFLOP/s, MFU and each one's speed relative to trident as
# a Markdown table for benchmarks/RESULTS.md, then the targets (trident >= 1.0x torch.compile's
# tokens/s, MFU >= 45%) and, with --profile, where each one's step time goes (trident: every op
# of the table timed alone; PyTorch: torch.profiler's top kernels).
#   benchmarks/gpu_step.sh [--build DIR] [--json-out FILE] [--profile] [--precision bf16|fp32]
#                          [--iters N] [other gpu_step options]
# --build: the build folder (default build; set up when it has no build.ninja);
# --json-out: every figure as one JSON object {rows, targets, markdown} (scripts/gpu-check.sh).
# Exit 77 where no GPU is usable; 1 when trident's step fails (PyTorch's failures are rows).
set -euo pipefail
cd "$(dirname "$0")/.."
build=build json_out="" profile=0
prec=bf16 iters=10
pass=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --json-out) json_out=$2; shift 2 ;;
    --profile) profile=1; shift ;;
    --precision) prec=$2; pass+=("$1" "$2"); shift 2 ;;
    --iters) iters=$2; pass+=("$1" "$2"); shift 2 ;;
    *) pass+=("$1"); shift ;;
  esac
done
[ -f "$build/build.ninja" ] || meson setup "$build" --buildtype=release >/dev/null
ninja -C "$build" benchmarks/gpu_step >/dev/null
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
extra=()
[ $profile -eq 1 ] && extra+=(--profile)
set +e
"$build/benchmarks/gpu_step" --json "${extra[@]}" "${pass[@]}" >"$out/trident.json" 2>"$out/trident.err"
rc=$?
set -e
if [ $rc -eq 77 ]; then cat "$out/trident.json"; exit 77; fi
[ $rc -eq 0 ] || { cat "$out/trident.json" "$out/trident.err"; echo "gpu_step failed ($rc)"; exit $rc; }
# a Python that has PyTorch ($PYTHON, else python3, else Debian's)
py=${PYTHON:-}
for cand in python3 /usr/bin/python3; do
  [ -n "$py" ] && break
  "$cand" -c 'import torch' 2>/dev/null && py=$cand
done
py=${py:-python3}
mb=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["micro_batch"])' "$out/trident.json")
for mode in eager compile; do
  m=$mb
  for try in 1 2; do # out of memory at trident's micro-batch: once more at half of it
    if "$py" benchmarks/gpu_step_torch.py --micro-batch "$m" --mode "$mode" --precision "$prec" \
         --iters "$iters" --json "${extra[@]}" >"$out/$mode.json" 2>"$out/$mode.err"; then
      break
    fi
    err=$(grep -v '^\s*$' "$out/$mode.err" | tail -1 | tr -d '"\\' | cut -c1-300)
    echo "{\"impl\": \"pytorch-$mode\", \"micro_batch\": $m, \"error\": \"$err\"}" >"$out/$mode.json"
    grep -qi 'out of memory' "$out/$mode.err" && [ "$m" -gt 1 ] || break
    m=$((m / 2))
  done
done
python3 - "$out" "$json_out" <<'PY'
import datetime, json, os, socket, sys
d, json_out = sys.argv[1], sys.argv[2]
rows = [json.load(open(os.path.join(d, f + ".json"))) for f in ("trident", "eager", "compile")]
t = rows[0]
lines = [f"GPT-2 124M, seq {t['seq']}, micro-batch {t['micro_batch']}, {t['precision']}, {t['gpu']}, "
         f"{datetime.date.today()} on {socket.gethostname()}", "",
         "| implementation | micro-batch | ms/iter | tokens/s | TFLOP/s | MFU | memory GiB | tokens/s vs trident |",
         "|---|---:|---:|---:|---:|---:|---:|---:|"]
for r in rows:
    if "error" in r:
        lines.append(f"| {r['impl']} | {r.get('micro_batch', '')} | failed: {r['error']} | | | | | |")
        continue
    mfu = f"{100 * r['mfu']:.1f}%" if r.get("mfu") is not None else "n/a"
    lines.append(f"| {r['impl']} | {r['micro_batch']} | {r['ms_per_iter']:.2f} | {r['tokens_per_s']:.0f} "
                 f"| {r['tflops']:.1f} | {mfu} | {r['memory_gib']:.1f} "
                 f"| {r['tokens_per_s'] / t['tokens_per_s']:.2f}x |")
comp = rows[2]
targets = {"trident_tokens_per_s": t["tokens_per_s"], "mfu": t.get("mfu"),
           "compile_tokens_per_s": comp.get("tokens_per_s"),
           "vs_compile": (t["tokens_per_s"] / comp["tokens_per_s"]) if comp.get("tokens_per_s") else None,
           "goal_vs_compile": 1.0, "goal_mfu": 0.45}
targets["met_vs_compile"] = targets["vs_compile"] is not None and targets["vs_compile"] >= 1.0
targets["met_mfu"] = t.get("mfu") is not None and t["mfu"] >= 0.45
targets["met"] = targets["met_vs_compile"] and targets["met_mfu"]
vs = f"{targets['vs_compile']:.2f}x" if targets["vs_compile"] is not None else "n/a (torch.compile failed)"
mfu = f"{100 * t['mfu']:.1f}%" if t.get("mfu") is not None else "n/a (unknown peak)"
lines += ["", f"Targets: trident / torch.compile tokens/s {vs} (goal >= 1.00x), MFU {mfu} (goal >= 45%): "
          + ("met" if targets["met"] else "NOT met")]
for r in rows:
    if r.get("ops"):
        lines += ["", f"Where {r['impl']}'s step goes ({r['profiled_ms_per_iter']:.2f} ms profiled"
                  + (", each op timed alone" if r["impl"] == "trident" else ", torch.profiler, top kernels") + "):",
                  "", "| op / kernel | ms per step | share | calls | TFLOP/s |", "|---|---:|---:|---:|---:|"]
        for o in sorted(r["ops"], key=lambda o: -o["ms_per_iter"])[:15]:
            tf = f"{o['tflops']:.1f}" if o.get("tflops") else ""
            lines.append(f"| {o['op'].replace('|', '/')} | {o['ms_per_iter']:.3f} | {100 * o['share']:.1f}% "
                         f"| {o['calls_per_iter']} | {tf} |")
text = "\n".join(lines)
print(text)
if json_out:
    with open(json_out, "w") as f:
        json.dump({"rows": rows, "targets": targets, "markdown": text}, f, indent=1)
PY
