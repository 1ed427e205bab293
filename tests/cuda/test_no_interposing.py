#!/usr/bin/python3
"""tests/cuda: the GPU programs define no function in their dynamic symbol table. The linker
puts an executable's global function there when a library of the link defines the same name,
and from then on it replaces that library's function for every library of the process: the op
checks' helper float *dup(const float *src, size_t n) took the place of POSIX dup(2), so a
library's dup(fd) (the CUDA driver's, most likely) read from address fd: SIGSEGV, no output,
on the first GPU run of cuda-ops and cuda-fused-ops. Needs nm only (no GPU).
usage: test_no_interposing.py NM EXECUTABLE..."""
import os
import subprocess
import sys

nm, programs = sys.argv[1], sys.argv[2:]
bad = []
for prog in programs:
    r = subprocess.run([nm, "-D", "--defined-only", prog], capture_output=True, text=True)
    if r.returncode:
        print(f"FAIL {prog}: nm exit {r.returncode}: {r.stderr.strip()}")
        sys.exit(1)
    # "ADDRESS TYPE NAME": T/t text, W/w weak, i indirect: functions; data (B, D, R) such as
    # stdout@GLIBC is copied there by design
    funcs = [f.split()[2] for f in r.stdout.splitlines()
             if len(f.split()) == 3 and f.split()[1] in "TtWwi"]
    name = os.path.basename(prog)
    if funcs:
        bad.append(name)
        print(f"FAIL {name} exports {', '.join(funcs)}: it replaces the function of that name "
              "in every library of the process (rename it or make it static)")
    else:
        print(f"ok   {name}: no function exported")
print(f"{'FAIL' if bad else 'ok'}: {len(programs)} programs, {len(bad)} exporting functions")
sys.exit(1 if bad else 0)
