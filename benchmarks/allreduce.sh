#!/usr/bin/env bash
# Allreduce benchmark: trident's UCX communicator side by side with Open MPI's MPI_Allreduce,
# fp32 sum out-of-place, 4 KiB .. 64 MiB, on 2 and 8 ranks of this machine. Reports time,
# algorithm bandwidth and bus bandwidth (busbw = algbw * 2(n-1)/n, as nccl-tests defines it)
# and the ratio trident/MPI. Runs alternate (trident, MPI, trident, MPI, ...) REPEAT times and
# each size keeps its best run, so both see the same machine noise.
#
#   benchmarks/allreduce.sh [--ranks "2 8"] [--repeat 3] [--write-results]
# --write-results replaces the "Allreduce (issue 3)" section of benchmarks/RESULTS.md.
# BUILD=dir picks the meson build directory (default build-bench, configured if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
ranks="2 8"
repeat=3
write=0
while [ $# -gt 0 ]; do
  case "$1" in
    --ranks) ranks=$2; shift 2;;
    --repeat) repeat=$2; shift 2;;
    --write-results) write=1; shift;;
    *) echo "usage: $0 [--ranks \"2 8\"] [--repeat N] [--write-results]" >&2; exit 2;;
  esac
done
command -v mpicc >/dev/null && command -v mpirun >/dev/null ||
  { echo "allreduce.sh: Open MPI (mpicc, mpirun) is needed: apt-get install openmpi-bin libopenmpi-dev" >&2; exit 2; }

build=${BUILD:-build-bench}
[ -f "$build/build.ninja" ] || meson setup "$build" --buildtype=release >/dev/null
ninja -C "$build" trident benchmarks/allreduce_bench >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$build/benchmarks/allreduce_bench" "$work/allreduce_bench"
mpicc -O3 -march=native benchmarks/allreduce_mpi.c -o "$work/allreduce_mpi"

load0=$(cut -d' ' -f1 /proc/loadavg)
for n in $ranks; do
  for rep in $(seq 1 "$repeat"); do
    echo "allreduce.sh: $n ranks, run $rep of $repeat" >&2
    "$build/trident" launch --nproc "$n" --no-prefix -- "$work/allreduce_bench" >"$work/trident.$n.$rep"
    mpirun -np "$n" --oversubscribe --allow-run-as-root --bind-to none \
      "$work/allreduce_mpi" >"$work/mpi.$n.$rep" 2>"$work/mpi.$n.$rep.err" ||
      { cat "$work/mpi.$n.$rep.err" >&2; exit 1; }
  done
done

model=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
load="$load0 / $(cut -d' ' -f1 /proc/loadavg)"
python3 - "$work" "$repeat" "$write" "$model" "$load" $ranks <<'EOF'
import datetime, glob, os, re, sys
work, repeat, write, model, load = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4], sys.argv[5]
ranks = sys.argv[6:]

def best(prefix):
    b = {}
    for f in glob.glob(f"{work}/{prefix}.*"):
        if f.endswith(".err"):
            continue
        for line in open(f):
            if line.startswith("#") or not line.strip():
                continue
            size, iters, us, alg, bus = line.split()
            size, us = int(size), float(us)
            if size not in b or us < b[size][0]:
                b[size] = (us, float(alg), float(bus))
    return b

def human(n):
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"

lines = []
for n in ranks:
    t, m = best(f"trident.{n}"), best(f"mpi.{n}")
    lines.append(f"**{n} ranks** (best of {repeat} alternating runs; GB/s = 1e9 bytes/s)\n")
    lines.append("| size | trident µs | trident algbw | trident busbw | Open MPI µs | Open MPI algbw | Open MPI busbw | ratio |")
    lines.append("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for size in sorted(t):
        if size not in m:
            continue
        (tu, ta, tb), (mu, ma, mb) = t[size], m[size]
        lines.append(f"| {human(size)} | {tu:.1f} | {ta:.2f} | {tb:.2f} | {mu:.1f} | {ma:.2f} | {mb:.2f} | {tb / mb:.2f}× |")
    lines.append("")
table = "\n".join(lines)
print(table)
if write:
    section = (f"## Allreduce (issue 3)\n\n"
               f"Date: {datetime.date.today().isoformat()}. Machine: 2-core x86_64 VM ({model}). "
               f"`benchmarks/allreduce.sh`: trident's UCX communicator (`trident launch`, UCX "
               f"shared memory: sysv + cma) against Open MPI's `MPI_Allreduce` (`mpirun "
               f"--oversubscribe`), fp32 sum, out-of-place; time = slowest rank's mean; "
               f"busbw = algbw·2(n−1)/n; ratio = trident busbw / Open MPI busbw. Load average "
               f"at start / end: {load} (other work on the machine adds noise to both columns; "
               f"the runs alternate and each size keeps its best).\n\n{table}\n")
    path = "benchmarks/RESULTS.md"
    text = open(path).read() if os.path.exists(path) else "# Benchmark results\n\n"
    pat = re.compile(r"## Allreduce \(issue 3\)\n.*?(?=\n## |\Z)", re.S)
    text = pat.sub(section.rstrip("\n") + "\n", text) if pat.search(text) else text.rstrip("\n") + "\n\n" + section
    open(path, "w").write(text)
    print(f"wrote {path}")
EOF
