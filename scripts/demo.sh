#!/usr/bin/env bash
# The main job: on a fresh Debian machine, installs what is missing, builds trident, turns
# Debian's `fortunes` corpus into a Megatron indexed dataset and trains configs/tiny-3d.yaml
# on 8 local ranks (data 2 x tensor 2 x pipeline 2), printing the layout and the loss as it
# falls. Extra arguments go to `trident train` (e.g. --set training.train_iters=50).
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
./build/trident topo --config configs/tiny-3d.yaml --world-size 8
exec ./build/trident train --nproc 8 configs/tiny-3d.yaml --run-dir runs/tiny-3d "$@"
