#!/usr/bin/env bash
# The GPU verification in one command, run from the repository root of a GPU machine with the
# bundle of scripts/gpu-bundle.sh beside it (.gpu/carry): builds trident with CUDA against the
# bundle alone, runs every GPU test and issue 15's checks, then benchmarks/gpu_step.sh; writes
# report.md, results.json and logs.tar.gz to --out (default gpu-results/). Each step PASS, FAIL
# (with the failing tail) or SKIP (with the reason); exit 1 only when a step FAILed.
#   scripts/gpu-check.sh [--out DIR] [--bundle DIR] [--build DIR] [--budget SECONDS]
#                        [--only STEP,...] [--skip STEP,...] [--jobs N] [--commit HASH]
# The work is scripts/gpu_check.py (Python's standard library only; any python3 runs it).
set -euo pipefail
cd "$(dirname "$0")/.."
py=$(command -v python3 || command -v /usr/bin/python3 || true)
[ -n "$py" ] || { echo "gpu-check: no python3" >&2; exit 1; }
exec "$py" scripts/gpu_check.py "$@"
