#!/usr/bin/env python3
"""nvcc with ptxas's resource report kept beside the object (the build's nvcc generator).

usage: nvcc_report.py NVCC NVCC-ARGS... -o OBJECT

Runs NVCC NVCC-ARGS -Xptxas -v and writes ptxas's lines (each function's registers, stack
frame, spill stores and loads, per target) to OBJECT.ptxas; every other line nvcc prints (the
host compiler's warnings and errors) passes through to stderr. Exits with nvcc's status; the
report is written only when nvcc succeeds, so it always describes the object beside it.
tests/cuda/test_ptxas_spills.py reads these reports instead of compiling every file again."""
import os
import re
import subprocess
import sys

args = sys.argv[1:]
output = args[args.index("-o") + 1]
r = subprocess.run(args + ["-Xptxas", "-v"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
ptxas = re.compile(r"^ptxas info\s*:|^\s*\d+ bytes stack frame")
report, other = [], []
for line in r.stderr.splitlines():
    (report if ptxas.search(line) else other).append(line)
sys.stdout.write(r.stdout)
if other:
    sys.stderr.write("\n".join(other) + "\n")
if r.returncode == 0:
    tmp = output + ".ptxas.tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(report) + "\n")
    os.replace(tmp, output + ".ptxas")
sys.exit(r.returncode)
