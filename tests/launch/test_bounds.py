#!/usr/bin/python3
"""Unbounded inputs end in a clear error, in bounded time and memory (issue 23, point 12):
  - trident topo --world-size 2147483647: exit 2 (the grid takes at most 2^20 ranks);
  - trident plan --search --world-size 2147483647: exit 2, not SIGFPE;
  - cluster.nodes x cluster.gpus_per_node past 2^20 (4294967296, once "world size 0"): exit 2
    naming both keys;
  - trident plan --calibrate /dev/zero: exit 2 naming the NUL byte (it never returned);
  - trident preprocess of a 64 MiB line without a newline: the same peak memory as of a small
    file (+ at most 16 MiB; it held the line whole); of /dev/zero: exit 2, the document too
    long (it grew without end).
usage: test_bounds.py TRIDENT SOURCE_ROOT WORKDIR"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402
from trident_test import check  # noqa: E402

trident, root, work = sys.argv[1], sys.argv[2], tt.fresh_dir(sys.argv[3])
bloom = os.path.join(root, "configs", "bloom-176b.yaml")
tiny = os.path.join(root, "configs", "tiny.yaml")
cases = [
    ([trident, "topo", "--world-size", "2147483647"], "at most 1048576 ranks"),
    ([trident, "plan", bloom, "--search", "--world-size", "2147483647"], "expected 1 .. 1048576"),
    ([trident, "plan", bloom, "--set", "cluster.nodes=1048576", "--set", "cluster.gpus_per_node=4096"],
     "world size 4294967296 (cluster.nodes x cluster.gpus_per_node)"),
    ([trident, "plan", tiny, "--set", "cluster.preset=cpu-host", "--calibrate", "/dev/zero"],
     "a NUL byte"),
    ([trident, "preprocess", "--input", "/dev/zero", "--output-prefix", os.path.join(work, "z")],
     "without a blank line"),
]
for cmd, needle in cases:
    try:
        r = tt.run(cmd, timeout=60)
        rc, err = r.returncode, r.stderr
    except subprocess.TimeoutExpired:
        rc, err = "timeout after 60 s", ""
    check(f"{' '.join(cmd[1:]).replace(root, 'ROOT').replace(work, 'WORK')[:80]}: exit 2, {needle!r}",
          rc == 2 and needle in err, f"exit {rc}: {err[-400:]}")

# peak memory of preprocess: a small file vs a 64 MiB line without a newline
MEASURE = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, "
           "stdout=subprocess.DEVNULL); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
small = tt.write(os.path.join(work, "small.txt"), "a few words\n\nand more\n")
big = os.path.join(work, "line.txt")
with open(big, "wb") as f:
    chunk = b"abcdefgh" * (1 << 17)  # 1 MiB
    for _ in range(64):
        f.write(chunk)


def peak_kib(path):
    out = subprocess.run([sys.executable, "-c", MEASURE, trident, "preprocess", "--input", path,
                          "--output-prefix", os.path.join(work, "p")], capture_output=True, text=True)
    return int(out.stdout) if out.returncode == 0 else None


base, line = peak_kib(small), peak_kib(big)
check("preprocess: a 64 MiB line costs at most 16 MiB more than a small file",
      base and line and line - base <= 16 * 1024, f"{base} KiB vs {line} KiB")
os.remove(big)
tt.finish()
