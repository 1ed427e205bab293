#!/usr/bin/env bash
# CPU attention before and after issue 24's item 7 (fused attention), side by side on this
# machine: benchmarks/attention_cpu.c built in BUILD (the fused kernels) and the same source
# compiled with -DTR_OLD_ATTENTION_API against OLD_COMMIT's library (the materialised
# (B, NH, T, T) probabilities), at GPT-2 124M's head shape for T = 256 .. 2048; then one
# `trident train` iteration of a small model at seq 2048 with each build, its summary.json
# memory (the allocator's activations and peak) and the process's peak RSS.
#   benchmarks/attention_cpu.sh [BUILD [OLD_COMMIT [REPEATS]]]
#   (default build-release; dc79f82: the commit before the fused attention; OMP_NUM_THREADS
#   sets the team)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-release}
old=${2:-dc79f82}
repeats=${3:-3}
work=$(mktemp -d /tmp/attention_cpu.XXXXXX)
trap 'rm -rf "$work"' EXIT

echo "== building $old's library in $work/old"
git archive "$old" | tar -x -C "$work" --one-top-level=old
(cd "$work/old" && meson setup b --buildtype=release -Dcuda=disabled > "$work/setup.log" 2>&1 &&
    ninja -C b trident libtrident.a > "$work/build.log" 2>&1) || {
    tail -20 "$work/build.log"
    exit 1
}
cc -O3 -march=native -std=c17 -D_GNU_SOURCE -DTR_OLD_ATTENTION_API -I"$work/old" -I"$work/old/b" \
    benchmarks/attention_cpu.c "$work/old/b/libtrident.a" $(pkg-config --libs openblas) -lm \
    -lpthread -o "$work/attention_old"
ninja -C "$build" benchmarks/attention_cpu trident > /dev/null

echo "== attention forward / backward (best of $repeats), GPT-2 124M heads (NH 12, HS 64)"
for shape in "4 256" "2 1024" "1 2048"; do
    set -- $shape
    "$work/attention_old" "$1" "$2" 12 64 "$repeats"
    "$build/benchmarks/attention_cpu" "$1" "$2" 12 64 "$repeats"
done

echo "== one training iteration at seq 2048 (2 layers, hidden 256, 4 heads, micro-batch 1)"
python3 - "$build/trident" "$work/old/b/trident" "$work" <<'EOF'
import json, os, subprocess, sys
sys.path.insert(0, os.path.join("tests", "common"))
import trident_test as tt  # noqa: E402
new, old, work = sys.argv[1:4]
prefix = tt.make_corpus(new, work, 24, ["flash", "tile", "softmax", "row"], 300, 20, 60)
cfg = tt.write_config(os.path.join(work, "seq2048.yaml"),
    model=dict(num_layers=2, hidden_size=256, num_attention_heads=4, seq_length=2048,
               max_position_embeddings=2048),
    training=dict(micro_batch_size=1, global_batch_size=1, train_iters=1, lr=1.0e-3),
    data=dict(data_path=prefix, split="100,0,0"))
for name, exe in (("materialised", old), ("fused", new)):
    out = os.path.join(work, name)
    r = subprocess.run(["/usr/bin/time", "-f", "%M"] + tt.train_cmd(exe, cfg, out, flags=["--quiet"]),
                       capture_output=True, text=True)
    if r.returncode:
        print(f"{name}: trident train failed:\n{r.stderr[-1500:]}")
        continue
    rss_kib = int(r.stderr.strip().splitlines()[-1])
    with open(os.path.join(out, "summary.json")) as f:
        mem = json.load(f)["memory_mb_per_rank"][0]
    print(f"{name:13s} activations {mem['activations']:8.1f} MiB, allocator peak "
          f"{mem['peak']:8.1f} MiB, peak RSS {rss_kib / 1024:8.1f} MiB")
EOF
