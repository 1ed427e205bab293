#!/usr/bin/env bash
# The planner's GEMM table from this GPU (issue 22): runs benchmarks/gemm_shapes (cuBLASLt bf16
# GEMMs over a transformer's shapes; a CUDA build) and writes the rows plan/ reads to OUT
# (default gpu-results/gemm_shapes.inc), the per-shape TFLOP/s beside the preset's analytic
# curve to OUT's .log, and prints the median measured/model ratio and what the table changes in
# `trident plan` (GPT-2 124M and Bloom-176B's layout on the GPU's preset). To keep it:
# cp OUT plan/gemm/PRESET.inc and rebuild (docs/planner.md). Exit 77 (SKIP) without a GPU.
#   benchmarks/gemm_shapes.sh [--build DIR] [--out FILE] [--preset NAME] [--quick]
set -euo pipefail
cd "$(dirname "$0")/.."
build=build out=gpu-results/gemm_shapes.inc preset="" quick=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --preset) preset=$2; shift 2 ;;
    --quick) quick=--quick; shift ;;
    *) echo "usage: benchmarks/gemm_shapes.sh [--build DIR] [--out FILE] [--preset NAME] [--quick]" >&2
       exit 2 ;;
  esac
done
bin=$build/benchmarks/gemm_shapes
if [ ! -x "$bin" ]; then
  echo "SKIP: $bin is not built (it needs a CUDA build: nvcc, cuBLASLt and NCCL found by meson)"
  exit 77
fi
mkdir -p "$(dirname "$out")"
log=${out%.inc}.log
set +e
"$bin" ${preset:+--preset "$preset"} $quick --out "$out" 2>"$log" >"$log.stdout"
rc=$?
set -e
if [ $rc -eq 77 ]; then
  cat "$log.stdout"
  exit 77
fi
[ $rc -eq 0 ] || { echo "gemm_shapes exit $rc"; tail -5 "$log"; exit 1; }
rows=$(grep -c '^{' "$out" || true)
summary=$(tail -1 "$log")
echo "gemm_shapes: $rows shapes in $out; $summary"
[ -n "$preset" ] || preset=$(echo "$summary" | sed -n 's/^\([a-z0-9-]*\): .*/\1/p')
if [ -n "$preset" ] && [ -x "$build/trident" ]; then
  for cfg in configs/gpt2-124m.yaml configs/bloom-176b.yaml; do
    before=$("$build/trident" plan "$cfg" --set cluster.preset="$preset" | grep '^throughput')
    after=$("$build/trident" plan "$cfg" --set cluster.preset="$preset" --gemm-table "$out" \
            | grep '^throughput')
    echo "$cfg on $preset: curve: ${before#throughput: }"
    echo "$cfg on $preset: table: ${after#throughput: }"
  done
fi
echo "to keep it: cp $out plan/gemm/${preset:-PRESET}.inc, rebuild, and record the change in docs/planner.md"
