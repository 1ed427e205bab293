#!/usr/bin/python3
"""kernels/cuda: every kernel compiles for sm_90 without register spills (issue 24: the fused
attention's kernels must not spill; the rest are held to the same). Each .cu file is compiled
by nvcc with the build's flags for sm_90 alone and -Xptxas -v; any function whose ptxas line
reports spill stores or loads fails the test, named with its counts.
usage: test_ptxas_spills.py NVCC SOURCE_ROOT"""
import glob
import os
import re
import subprocess
import sys
import tempfile

nvcc, root = sys.argv[1], sys.argv[2]
sources = sorted(glob.glob(os.path.join(root, "kernels", "cuda", "*.cu")))
bad, functions = [], 0
with tempfile.TemporaryDirectory() as tmp:
    for src in sources:
        cmd = [nvcc, "-O3", "-std=c++17", "-DTR_HAVE_CUDA", f"-I{root}", "-gencode",
               "arch=compute_90,code=sm_90", "-Xptxas", "-v", "-c", src, "-o",
               os.path.join(tmp, "k.o")]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            print(f"FAIL {os.path.basename(src)}: nvcc exit {r.returncode}\n{r.stderr[-2000:]}")
            sys.exit(1)
        current = "?"
        for line in r.stderr.splitlines():
            m = re.search(r"Compiling entry function '([^']+)'", line) or \
                re.search(r"Function properties for (\S+)", line)
            if m:
                current = m.group(1)
            m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
            if m:
                functions += 1
                if int(m.group(1)) or int(m.group(2)):
                    bad.append(f"{os.path.basename(src)}: {current}: {line.strip()}")
for b in bad:
    print("FAIL", b)
print(f"{'FAIL' if bad else 'ok'}: {len(sources)} files, {functions} ptxas reports, "
      f"{len(bad)} with spills (sm_90)")
sys.exit(1 if bad else 0)
