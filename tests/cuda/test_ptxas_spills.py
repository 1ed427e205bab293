#!/usr/bin/python3
"""kernels/cuda: every kernel compiles for sm_90 without register spills (issue 24: the fused
attention's kernels must not spill; the rest are held to the same). ptxas's report (nvcc
-Xptxas -v) of each .cu file is read; any function whose sm_90 report has spill stores or loads
fails the test, named with its counts.

The build already compiles every .cu file through kernels/cuda/nvcc_report.py, which keeps
ptxas's report beside each object (BUILD/*.p/NAME.cu.o.ptxas, written with the object, so it
describes the object meson test has just brought up to date). Where a file has no such report,
or its report has no sm_90 code (a build whose -Dgencode leaves Hopper out), the test compiles
that file itself with the build's flags for sm_90 alone.
usage: test_ptxas_spills.py NVCC SOURCE_ROOT [BUILD_ROOT]"""
import glob
import os
import re
import subprocess
import sys
import tempfile

nvcc, root = sys.argv[1], sys.argv[2]
build = sys.argv[3] if len(sys.argv) > 3 else None
sources = sorted(glob.glob(os.path.join(root, "kernels", "cuda", "*.cu")))


def build_report(src):
    """ptxas's lines for SRC from the build, or None where the build kept none for sm_90."""
    if not build:
        return None
    found = glob.glob(os.path.join(build, "*.p", os.path.basename(src) + ".o.ptxas"))
    if len(found) != 1:
        return None
    lines = open(found[0]).read().splitlines()
    return lines if any("for 'sm_90'" in l for l in lines) else None


def compile_report(src, tmp):
    cmd = [nvcc, "-O3", "-std=c++17", "-DTR_HAVE_CUDA", f"-I{root}", "-gencode",
           "arch=compute_90,code=sm_90", "-Xptxas", "-v", "-c", src, "-o", os.path.join(tmp, "k.o")]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        print(f"FAIL {os.path.basename(src)}: nvcc exit {r.returncode}\n{r.stderr[-2000:]}")
        sys.exit(1)
    return r.stderr.splitlines()


bad, functions, compiled = [], 0, []
with tempfile.TemporaryDirectory() as tmp:
    for src in sources:
        lines = build_report(src)
        if lines is None:
            lines = compile_report(src, tmp)
            compiled.append(os.path.basename(src))
        # (ptxas names the target on each entry function's line; a function's properties may
        # come before any, so where the report has one target that one is every line's)
        archs = set(re.findall(r"for '(sm_\d+)'", "\n".join(lines)))
        current, arch, reports = "?", (archs.pop() if len(archs) == 1 else "?"), 0
        for line in lines:
            m = re.search(r"Compiling entry function '([^']+)' for '(sm_\d+)'", line)
            if m:
                current, arch = m.group(1), m.group(2)
                continue
            m = re.search(r"Function properties for (\S+)", line)
            if m:
                current = m.group(1)
                continue
            m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
            if m and arch == "sm_90":
                functions += 1
                reports += 1
                if int(m.group(1)) or int(m.group(2)):
                    bad.append(f"{os.path.basename(src)}: {current}: {line.strip()}")
        if not reports:
            bad.append(f"{os.path.basename(src)}: no ptxas report for sm_90")
for b in bad:
    print("FAIL", b)
print(f"{'FAIL' if bad else 'ok'}: {len(sources)} files ({len(sources) - len(compiled)} read from the "
      f"build's reports, {len(compiled)} compiled here{': ' + ' '.join(compiled) if compiled else ''}), "
      f"{functions} ptxas reports, {len(bad)} with spills (sm_90)")
sys.exit(1 if bad else 0)
