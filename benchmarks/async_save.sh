#!/usr/bin/env bash
# Checkpoint saving beside training (issue 21): gpt2-124m (seq 256, micro-batch 1, global
# batch 2) on 2 ranks, 16 iterations, a checkpoint every 4, saved synchronously and then with
# checkpoint.async_save. Prints each run's wall time, the median ms/iter of iterations that ran
# while a save was being written (the 3 after each save) and of the others, and the ratio.
#
#   benchmarks/async_save.sh [--build DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=build
[ "${1:-}" = "--build" ] && build=$2
[ -f data/cache/fortunes.idx ] || { echo "async_save.sh: run scripts/demo.sh first (data/cache/fortunes)" >&2; exit 2; }
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
run() { # NAME ASYNC
  local t0 t1
  t0=$(date +%s.%N)
  "$build/trident" train --nproc 2 configs/gpt2-124m.yaml --quiet --run-dir "$work/$1" \
    --set model.seq_length=256 --set training.micro_batch_size=1 --set training.global_batch_size=2 \
    --set training.train_iters=16 --set training.eval_interval=0 \
    --set checkpoint.save="$work/$1-ck" --set checkpoint.save_interval=4 \
    --set checkpoint.async_save="$2" >/dev/null
  t1=$(date +%s.%N)
  python3 - "$work/$1/metrics.jsonl" "$1" "$t0" "$t1" <<'PY'
import json, statistics, sys
ms = [json.loads(l)["ms_per_iter"] for l in open(sys.argv[1])]
during = [ms[i] for i in range(len(ms)) if i % 4 in (0, 1, 2) and i >= 4]  # iterations 5-7, 9-11, 13-15
quiet = [ms[i] for i in range(1, 4)] + [ms[i] for i in range(len(ms)) if i % 4 == 3 and i > 4]
print(f"{sys.argv[2]:6} wall {float(sys.argv[4]) - float(sys.argv[3]):6.1f} s | ms/iter after a save "
      f"{statistics.median(during):7.1f} | other {statistics.median(quiet):7.1f} | "
      f"ratio {statistics.median(during) / statistics.median(quiet):.2f}")
PY
}
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'); gpt2-124m, 2 ranks (data-parallel), 16 iterations, save every 4"
run sync false
run async true
