#!/usr/bin/env bash
# Data-parallel overlap benchmark: benchmarks/dp_overlap.c on 2 ranks (D = 2) through
# `trident launch`, for four progress strategies:
#   thread           the communicator's progress thread (tr_comm_config.progress_thread = 1)
#   thread, 4 MiB    the same with 4 MiB ring chunks (tr_comm_set_tuning)
#   reports          no thread: dp/ polls (tr_comm_test) at each reported range (once a layer)
#   polls, 4 MiB     no thread: tr_dp_progress() after every GEMM, 4 MiB ring chunks
# A synthetic backward of GPT-2-small layers (C = 768, N tokens, the GEMMs of the four
# linears per layer writing the layer's gradient range, reported to dp/ per layer), 25 MiB
# buckets. Per strategy: backward alone, bucketed all-reduce alone, overlap off (one bucket
# after backward), overlap on, and the ZeRO-1 pair (reduce-scatter alone / overlapped);
# best of all alternating samples; hidden = (bwd + reduce - on) / reduce. Then the
# optimizer-state bytes per rank of GPT-2 124M with and without ZeRO-1.
#
#   benchmarks/dp_overlap.sh [--rounds 2] [--reps 3] [--tokens 128] [--write-results]
# --write-results replaces the "Data-parallel overlap (issue 6)" section of
# benchmarks/RESULTS.md. BUILD=dir picks the meson build directory (default build-bench).
# KEEP=dir keeps the raw outputs there; --from DIR only makes the tables from such a dir.
set -euo pipefail
cd "$(dirname "$0")/.."
reps=3
rounds=2
from=
tokens=128
write=0
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) reps=$2; shift 2;;
    --rounds) rounds=$2; shift 2;;
    --tokens) tokens=$2; shift 2;;
    --write-results) write=1; shift;;
    --from) from=$2; shift 2;;
    *) echo "usage: $0 [--rounds 2] [--reps 3] [--tokens 128] [--write-results] [--from DIR]" >&2; exit 2;;
  esac
done
if [ -n "$from" ]; then
  work=$from
else
  build=${BUILD:-build-bench}
  [ -f "$build/build.ninja" ] || meson setup "$build" --buildtype=release >/dev/null
  ninja -C "$build" trident benchmarks/dp_overlap >/dev/null
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  export UCX_WARN_UNUSED_ENV_VARS=n

  # Two processes (with / without the progress thread) alternate ROUNDS times; inside each,
  # two variants alternate: the comm's default ring chunks, and 4 MiB chunks (plus
  # tr_dp_progress after every GEMM when there is no thread). Best of all samples per mode.
  # A third process (progress thread) replaces each layer's GEMMs by a sleep of their measured
  # time: compute that leaves the CPU free, as a GPU would.
  for round in $(seq 1 "$rounds"); do
    for thread in 1 0; do
      echo "dp_overlap.sh: round $round of $rounds, progress thread $thread ($reps repetitions)" >&2
      flag=(); poll=0
      if [ "$thread" = 1 ]; then flag=(--progress-thread); else poll=1; fi
      "$build/trident" launch --nproc 2 --no-prefix -- "$build/benchmarks/dp_overlap" \
        --reps "$reps" --tokens "$tokens" --variant 0:0 --variant "4096:$poll" "${flag[@]}" \
        >"$work/run.$round.$thread.out"
    done
    echo "dp_overlap.sh: round $round of $rounds, progress thread, backward off the CPU" >&2
    "$build/trident" launch --nproc 2 --no-prefix -- "$build/benchmarks/dp_overlap" \
      --reps "$reps" --tokens "$tokens" --variant 0:0 --progress-thread --sleep \
      >"$work/run.$round.sleep.out"
  done
  if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && cp "$work"/run.*.out "$KEEP"/; fi
fi

model=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
cores=$(nproc)
python3 - "$work" "$write" "$model" "$cores" "$rounds" "$reps" <<'EOF'
import glob, os, re, statistics, sys
work, write, model, cores, rounds, reps = sys.argv[1], sys.argv[2] == "1", sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]

samples, zero, params, cfg, groups, paired = {}, [], None, None, {}, {}
for path in sorted(glob.glob(f"{work}/run.*.out")):
    for line in open(path):
        f = line.split()
        if not f:
            continue
        if f[0] == "config":
            cfg = dict(zip(f[1::2], f[2::2]))
        elif f[0] == "sample":
            d = dict(zip(f[1::2], f[2::2]))
            key = (int(d["sleep"]), int(d["thread"]), int(d["chunk_kb"]), int(d["poll"]))
            samples.setdefault(key, {}).setdefault(d["mode"], []).append(
                (float(d["ms"]), float(d["exposed_ms"]), float(d["cpu_ms"])))
            group = groups.setdefault((path, key), {})
            group[d["mode"]] = float(d["ms"])
            if len(group) == 6:  # one repetition of every mode, run back to back: paired
                g = groups.pop((path, key))
                paired.setdefault(key, []).append(
                    ((g["bwd"] + g["reduce"] - g["on"]) / g["reduce"], g["on"] / g["off"],
                     (g["bwd"] + g["reduce_zero"] - g["on_zero"]) / g["reduce_zero"]))
        elif f[0] == "gpt2_params":
            params = int(f[1])
        elif f[0] == "zero" and not any(z["D"] == int(f[2]) for z in zero):
            zero.append(dict(zip(f[1::2], map(int, f[2::2]))))

def label(key):
    sleep, thread, chunk, poll = key
    c = f"{chunk // 1024} MiB chunks" if chunk >= 1024 else f"{chunk} KiB chunks"
    if thread:
        t = f"progress thread, {c}"
    else:
        t = f"no thread, tr_dp_progress per GEMM, {c}" if poll else f"no thread, polls at reports, {c}"
    return t + (" — *backward sleeps its GEMM time (CPU free)*" if sleep else "")

def best(ms, mode):
    return min(x[0] for x in ms[mode])

def at_best(ms, mode, i):  # exposed / cpu of the fastest sample
    return min(ms[mode])[i]

lines = ["| progress | backward ms | all-reduce alone ms | overlap off ms | overlap on ms "
         "| exposed after backward ms | ran during backward | backward slowed by ms | **hidden** "
         "(paired median) | on / off (paired median) | ZeRO-1: reduce-scatter alone ms "
         "| ZeRO-1 on ms | ZeRO-1 hidden (paired median) |",
         "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
for key in sorted(samples, key=lambda k: (k[0], -k[1], k[2], k[3])):
    ms = samples[key]
    b, r, off, on, rz, oz = (best(ms, k) for k in ("bwd", "reduce", "off", "on", "reduce_zero", "on_zero"))
    ph, pr, pz = (statistics.median(x[i] for x in paired[key]) for i in range(3))
    lines.append(f"| {label(key)} | {b:.0f} | {r:.0f} | {off:.0f} | {on:.0f} | "
                 f"{at_best(ms, 'on', 1):.0f} | {100 * (1 - at_best(ms, 'on', 1) / r):.0f}% | "
                 f"{on - at_best(ms, 'on', 1) - b:.0f} | "
                 f"**{100 * (b + r - on) / r:.0f}%** ({100 * ph:.0f}%) | {on / off:.2f} ({pr:.2f}) | "
                 f"{rz:.0f} | {oz:.0f} | {100 * (b + rz - oz) / rz:.0f}% ({100 * pz:.0f}%) |")
overlap = "\n".join(lines)
cpu = {k: v for k, v in samples.items() if not k[0]}
free = {k: v for k, v in samples.items() if k[0]}
best_off = min(best(v, "off") for v in cpu.values())
best_on = min(best(v, "on") for v in cpu.values())
summary = (f"Summary: with the GEMMs filling both cores, the best overlap on ({best_on:.0f} ms) is "
           f"{best_on / best_off:.2f}× the best overlap off ({best_off:.0f} ms): the buckets do "
           f"reduce during backward, but their copies and sums take the cores from the GEMMs, so "
           f"the net gain stays within the noise.")
for k, v in free.items():
    b, r, on = best(v, "bwd"), best(v, "reduce"), best(v, "on")
    summary += (f" With the backward off the CPU, {100 * (b + r - on) / r:.0f}% of the "
                f"all-reduce is hidden (overlap on {on / best(v, 'off'):.2f}× of off); what "
                f"remains is the last buckets, which start when backward ends.")
overlap += "\n\n" + summary
zl = ["| D | optimizer state per rank, no ZeRO-1 | with ZeRO-1 | ratio |", "|---:|---:|---:|---:|"]
for row in zero:
    w, s = row["state_bytes_whole"], row["state_bytes_zero"]
    zl.append(f"| {row['D']} | {w / 2**20:.1f} MiB | {s / 2**20:.1f} MiB | {w / s:.2f}× |")
zt = "\n".join(zl)
nsamp = len(next(iter(samples.values()))["bwd"])
text = (f"D = {cfg['ranks']} ranks, {cfg['layers']} GPT-2-small layers "
        f"({int(cfg['params']) / 1e6:.1f}M gradient elements, {cfg['buckets']} buckets of "
        f"{cfg['bucket_mb']} MiB), {cfg['tokens']} tokens per micro-batch; best of {nsamp} "
        f"samples per cell ({rounds} rounds × {reps} repetitions, strategies and modes "
        f"alternating); in parentheses the median over repetitions of the same ratio from "
        f"the modes of one repetition (run back to back, so they share the machine's load); "
        f"times are the slowest rank's.\n\n{overlap}\n\n"
        f"Optimizer state of GPT-2 124M ({params:,} parameters with the padded vocabulary; "
        f"Adam m and v in fp32 = 8 bytes per element of the rank's shard; 25 MiB buckets, wte "
        f"aligned):\n\n{zt}\n")
print(text)
if write:
    section = (f"## Data-parallel overlap (issue 6)\n\n"
               f"Date: 2026-11-22. Machine: {cores}-core x86_64 VM ({model}). "
               f"`benchmarks/dp_overlap.sh`: `benchmarks/dp_overlap.c` through `trident launch "
               f"--nproc 2`. hidden = (backward + all-reduce alone − overlap on) / all-reduce "
               f"alone (net: counts the slow-down of backward too); exposed = time "
               f"`tr_dp_finish` waited after backward; ran during backward = 1 − exposed / "
               f"all-reduce alone; backward slowed by = overlap on − exposed − backward (the "
               f"reduction's own CPU work, copies and sums, that ran inside backward). Each "
               f"rank's GEMMs run on one thread (the launcher's fair share), so both cores are "
               f"busy during backward: the reduction can then hide only its waiting, not its CPU "
               f"work, and how much of it ran during backward says little about the net gain; "
               f"compare overlap on with the best overlap off. The last row sleeps each "
               f"layer's GEMM time instead of computing (the host free, as with a GPU): what "
               f"the same buckets hide when the reduction does not compete with compute for "
               f"the cores.\n\n{text}")
    path = "benchmarks/RESULTS.md"
    old = open(path).read() if os.path.exists(path) else "# Benchmark results\n\n"
    pat = re.compile(r"## Data-parallel overlap \(issue 6\)\n.*?(?=\n## |\Z)", re.S)
    anchor = "## Data-parallel overlap with the real model"
    if pat.search(old):
        new = pat.sub(lambda _: section.rstrip("\n") + "\n", old)
    elif anchor in old:
        i = old.index(anchor)
        new = old[:i] + section.rstrip("\n") + "\n\n" + old[i:]
    else:
        new = old.rstrip("\n") + "\n\n" + section
    open(path, "w").write(new)
    print(f"wrote {path}")
EOF
