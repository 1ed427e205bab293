#!/usr/bin/env bash
# The whole test suite: on a fresh Debian machine, installs what is missing, builds trident
# twice (release, and address + undefined-behaviour sanitizers) and runs every test in both.
# Ends with one line "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh || { echo "setup failed"; echo "0 passed, 1 failed"; exit 1; }
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export ASAN_OPTIONS=detect_leaks=1
# setup.sh installed python3-torch: a PyTorch oracle that cannot import it fails, not skips
export TRIDENT_REQUIRE_ORACLE=1
passed=0; failed=0; skipped=0; status=0
run_suite() { # NAME BUILDDIR MESON-SETUP-ARGS...
  local name=$1 dir=$2; shift 2
  if [ ! -f "$dir/build.ninja" ]; then
    meson setup "$dir" "$@" >"$dir.setup.log" 2>&1 || { cat "$dir.setup.log"; failed=$((failed+1)); status=1; return; }
  fi
  if ! ninja -C "$dir" >"$dir.ninja.log" 2>&1; then
    tail -40 "$dir.ninja.log"; echo "$name: build failed"; failed=$((failed+1)); status=1; return
  fi
  echo "== $name tests"
  meson test -C "$dir" --print-errorlogs --num-processes 2 ${TEST_ARGS:-} || status=1
  local log="$dir/meson-logs/testlog.txt"
  local ok fail to xfail upass skip
  ok=$(awk '/^Ok:/{print $2}' "$log" | tail -1); fail=$(awk '/^Fail:/{print $2}' "$log" | tail -1)
  to=$(awk '/^Timeout:/{print $2}' "$log" | tail -1); xfail=$(awk '/^Expected Fail:/{print $3}' "$log" | tail -1)
  upass=$(awk '/^Unexpected Pass:/{print $3}' "$log" | tail -1)
  skip=$(awk '/^Skipped:/{print $2}' "$log" | tail -1)
  skipped=$((skipped + ${skip:-0}))
  passed=$((passed + ${ok:-0} + ${xfail:-0})); failed=$((failed + ${fail:-0} + ${to:-0} + ${upass:-0}))
}
# (CUDA's machine code for sm_90 alone, with its ptxas reports for cuda-no-spills: the
# gpu-bundle test's build compiles the PTX for sm_80 and later, the default's other target,
# so each target of -Dgencode's default is compiled once)
run_suite release build --buildtype=release '-Dgencode=["arch=compute_90,code=sm_90"]'
# (no CUDA under the sanitizers: its code cannot run without a GPU, and the release build
# compiles it and runs its host logic; the sanitizer build runs that logic too, compiled in;
# -O1 with -g: its tests run ~1.35x faster than at -O0 for ~45 s more build, same checks)
run_suite sanitizers build-asan --buildtype=debug -Doptimization=1 -Db_sanitize=address,undefined -Db_lundef=false -Dcuda=disabled
# each skip's reason: the first "SKIP..." line the test printed, skips grouped by reason
skip_reasons() {
  /usr/bin/python3 - "$@" <<'PY'
import json, re, sys
by = {}
for log in sys.argv[1:]:
    try:
        lines = open(log, errors="replace").read().splitlines()
    except OSError:
        continue
    build = log.split("/")[0]
    for line in lines:
        try:
            t = json.loads(line)
        except ValueError:
            continue
        if t.get("result") != "SKIP":
            continue
        out = (t.get("stdout") or "") + "\n" + (t.get("stderr") or "")
        why = next((m.group(1) for m in map(re.compile(r"SKIP:?\s*(.*)").search, out.splitlines()) if m),
                   "") or "(no reason printed)"
        by.setdefault(why.strip()[:160], []).append(f"{build}:{t['name'].split(' / ')[-1]}")
for why, names in sorted(by.items(), key=lambda kv: -len(kv[1])):
    print(f"  {len(names)} skipped: {why}\n    {' '.join(names)}")
PY
}
echo "$skipped skipped, by reason:"
skip_reasons build/meson-logs/testlog.json build-asan/meson-logs/testlog.json
echo "$passed passed, $failed failed"
exit $status
