#!/usr/bin/env bash
# The main job: on a fresh Debian machine, installs what is missing, builds trident, turns
# Debian's `fortunes` corpus into a Megatron indexed dataset and trains configs/tiny.yaml,
# printing the loss as it falls. Extra arguments go to `trident train` (e.g. --set ...).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
[ -f build/build.ninja ] || meson setup build --buildtype=release >/dev/null
ninja -C build trident >/dev/null
prefix=data/cache/fortunes
if [ ! -f "$prefix.idx" ]; then
  mkdir -p data/cache
  corpus=()
  for f in /usr/share/games/fortunes/*; do
    case "$f" in *.dat|*.u8) continue;; esac
    [ -f "$f" ] && [ ! -L "$f" ] && corpus+=("$f")
  done
  ./build/trident preprocess --input "${corpus[@]}" --output-prefix "$prefix"
fi
exec ./build/trident train configs/tiny.yaml --run-dir runs/tiny "$@"
