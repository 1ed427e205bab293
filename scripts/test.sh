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
configure() { # NAME BUILDDIR MESON-SETUP-ARGS...: meson setup once
  local name=$1 dir=$2; shift 2
  [ -f "$dir/build.ninja" ] && return 0
  meson setup "$dir" "$@" >"$dir.setup.log" 2>&1 || { cat "$dir.setup.log"; echo "$name: meson setup failed"; return 1; }
}
compile() { # NAME BUILDDIR
  ninja -C "$2" >"$2.ninja.log" 2>&1 || { tail -40 "$2.ninja.log"; echo "$1: build failed"; return 1; }
}
count() { # MESON-LOG-BASE: adds the counts of meson's testlog.txt
  local log="$1.txt"
  local ok fail to xfail upass skip
  ok=$(awk '/^Ok:/{print $2}' "$log" | tail -1); fail=$(awk '/^Fail:/{print $2}' "$log" | tail -1)
  to=$(awk '/^Timeout:/{print $2}' "$log" | tail -1); xfail=$(awk '/^Expected Fail:/{print $3}' "$log" | tail -1)
  upass=$(awk '/^Unexpected Pass:/{print $3}' "$log" | tail -1)
  skip=$(awk '/^Skipped:/{print $2}' "$log" | tail -1)
  skipped=$((skipped + ${skip:-0}))
  passed=$((passed + ${ok:-0} + ${xfail:-0})); failed=$((failed + ${fail:-0} + ${to:-0} + ${upass:-0}))
}
run_tests() { # NAME BUILDDIR [MESON-TEST-ARGS...]
  local name=$1 dir=$2; shift 2
  echo "== $name tests"
  meson test -C "$dir" --no-rebuild --print-errorlogs --num-processes 2 "$@" ${TEST_ARGS:-} || status=1
  count "$dir/meson-logs/testlog"
}
broke() { failed=$((failed+1)); status=1; }
# (CUDA's machine code for sm_90 alone, with its ptxas reports for cuda-no-spills: the
# gpu-bundle test's build compiles the PTX for sm_80 and later, the default's other target,
# so each target of -Dgencode's default is compiled once)
rel_ok=0; configure release build --buildtype=release '-Dgencode=["arch=compute_90,code=sm_90"]' && rel_ok=1
# The gpu-bundle test (a Debian download and a second CUDA build, ~2.5 min of one core) runs
# in the background from here to the end, beside the release build and both suites' tests;
# its compiles at the idle priority (chrt --idle) take the CPU time the tests and the sanitizer
# build leave (multi-rank tests run alone and leave a core partly idle). Its own log:
# build/meson-logs/gpu-bundle.*. (Not with TEST_ARGS, which picks tests.)
bundle_pid=""
if [ $rel_ok = 1 ] && [ -z "${TEST_ARGS:-}" ]; then
  meson test -C build --no-rebuild --print-errorlogs --logbase gpu-bundle gpu-bundle \
    >build.gpu-bundle.log 2>&1 &
  bundle_pid=$!
fi
if [ $rel_ok = 1 ]; then compile release build || { broke; rel_ok=0; }; else broke; fi
# The sanitizer build (no CUDA under the sanitizers: its code cannot run without a GPU, and the
# release build compiles it and runs its host logic; the sanitizer build runs that logic too,
# compiled in) is configured and compiled in the background, at nice 19, while the release
# tests run: their multi-rank tests, which run alone, leave a core idle at times (nice 19
# takes ~3% of the CPU from two busy tests; nice 10 would take ~18%).
(renice -n 19 -p $BASHPID >/dev/null 2>&1
 configure sanitizers build-asan --buildtype=debug -Db_sanitize=address,undefined -Db_lundef=false -Dcuda=disabled &&
   compile sanitizers build-asan) >build-asan.background.log 2>&1 &
asan_pid=$!
if [ $rel_ok = 1 ]; then
  if [ -n "$bundle_pid" ]; then run_tests release build --no-suite gpu-bundle; else run_tests release build; fi
fi
if wait $asan_pid; then
  run_tests sanitizers build-asan
else
  cat build-asan.background.log; broke
fi
if [ -n "$bundle_pid" ]; then
  echo "== release tests: gpu-bundle (in the background since the release build began)"
  wait $bundle_pid || status=1
  cat build.gpu-bundle.log
  if [ -f build/meson-logs/gpu-bundle.txt ]; then count build/meson-logs/gpu-bundle; else broke; fi
fi
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
skip_reasons build/meson-logs/testlog.json build/meson-logs/gpu-bundle.json build-asan/meson-logs/testlog.json
echo "$passed passed, $failed failed"
exit $status
