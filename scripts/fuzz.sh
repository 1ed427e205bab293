#!/usr/bin/env bash
# One libFuzzer campaign of a tests/fuzz target: scripts/fuzz.sh TARGET SECONDS
#   TARGET: st pt hfcfg import megatron meta llmcmodel tokhf tokgpt2 tokspm tiktoken idx llmc
#           prep parquet blend yaml grid manifest ckpt lora lora-llama lora-bloom roundtrip
#           evaltasks evalregex
# Builds (clang, address + undefined sanitizers, -Dfuzz=enabled) in $FUZZ_BUILD (default
# build-fuzz), then runs build-fuzz/tests/fuzz/fuzz-TARGET niced on a scratch corpus (new
# inputs go there) seeded by the committed tests/fuzz/corpus/TARGET. Everything it writes is in
# $FUZZ_BUILD/fuzz-out/TARGET/: corpus/ (scratch), artifacts/ (crash-*, leak-*, timeout-*:
# each a reproducer: `build-fuzz/tests/fuzz/fuzz_replay_TARGET FILE`), log.txt.
# To keep what a campaign found, merge it into the committed corpus (adds only inputs with new
# edges; the committed sets were made so, files <= 64 KB):
#   build-fuzz/tests/fuzz/fuzz-TARGET -merge=1 -use_counters=0 \
#     tests/fuzz/corpus/TARGET build-fuzz/fuzz-out/TARGET/corpus
# Exit status: the fuzzer's (0: nothing found).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -ne 2 ]; then
  sed -n '2,5p' "$0"; exit 2
fi
target=$1 seconds=$2
build=${FUZZ_BUILD:-build-fuzz}
scripts/setup.sh
# clang and its libFuzzer runtime (Debian 12: clang-14, libclang-rt-14-dev)
rt=(/usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a)
if ! command -v "${CC_FUZZ:-clang}" >/dev/null || [ ! -f "${rt[0]}" ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    clang libclang-rt-14-dev >/dev/null
fi
if [ ! -d "tests/fuzz/corpus/$target" ]; then
  echo "unknown target $target (no tests/fuzz/corpus/$target)"; exit 2
fi
if [ ! -f "$build/build.ninja" ]; then
  CC=${CC_FUZZ:-clang} meson setup "$build" --buildtype=debug -Dfuzz=enabled -Dcuda=disabled \
    -Db_sanitize=address,undefined -Db_lundef=false \
    -Dc_args="-fsanitize=fuzzer-no-link -fno-sanitize-recover=undefined" >/dev/null
fi
nice -n 19 ninja -C "$build" "tests/fuzz/fuzz-$target" "tests/fuzz/fuzz_replay_$target" >/dev/null
out=$build/fuzz-out/$target
mkdir -p "$out/corpus" "$out/artifacts"
case $target in
  manifest|ckpt|lora|lora-llama|lora-bloom) dict=tests/fuzz/dict/ckpt.dict ;;
  pt) dict=tests/fuzz/dict/pt.dict ;;
  parquet) dict=tests/fuzz/dict/parquet.dict ;;
  evalregex) dict=tests/fuzz/dict/regex.dict ;;
  *) dict=tests/fuzz/dict/json.dict ;;
esac
echo "fuzz-$target for ${seconds}s: corpus $out/corpus + tests/fuzz/corpus/$target," \
     "artifacts $out/artifacts/, log $out/log.txt"
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
# the target's temporary folder (fuzz.h) inside $out: libFuzzer's exit skips its removal
export TMPDIR=$(cd "$out" && pwd)/tmp
rm -rf "$TMPDIR" && mkdir -p "$TMPDIR"
export LSAN_OPTIONS=suppressions=$PWD/tests/fuzz/lsan.supp
rc=0
nice -n 19 "$build/tests/fuzz/fuzz-$target" "$out/corpus" "tests/fuzz/corpus/$target" \
  -dict="$dict" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=3000 -malloc_limit_mb=3000 \
  -artifact_prefix="$out/artifacts/" -print_final_stats=1 >"$out/log.txt" 2>&1 || rc=$?
grep -E "^stat::(number_of_executed_units|new_units_added|peak_rss_mb)" "$out/log.txt" || true
rm -rf "$TMPDIR"
found=$(find "$out/artifacts" -type f | wc -l)
echo "fuzz-$target: exit $rc, $found artifact(s) in $out/artifacts"
exit $rc
