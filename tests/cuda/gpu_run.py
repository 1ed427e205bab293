#!/usr/bin/python3
"""Run a GPU test only where a GPU is usable.
usage: gpu_run.py PROBE [--min-devices N] [NAME=VALUE ...] -- COMMAND [ARGS...]
PROBE (cuda_probe) exits 77 with a "SKIP: reason" line where no GPU (or too few) is usable:
print it and exit 77, which meson reports as SKIP. Otherwise run COMMAND with the variables
added to the environment and exit with its status."""
import os
import subprocess
import sys

args = sys.argv[1:]
sep = args.index("--")
probe, opts, cmd = args[0], args[1:sep], args[sep + 1:]
probe_cmd = [probe]
env = dict(os.environ)
i = 0
while i < len(opts):
    if opts[i] == "--min-devices":
        probe_cmd += opts[i:i + 2]
        i += 2
        continue
    name, _, value = opts[i].partition("=")
    env[name] = value
    i += 1
p = subprocess.run(probe_cmd, capture_output=True, text=True, timeout=120)
print(p.stdout.strip())
if p.returncode == 77:
    sys.exit(77)
if p.returncode != 0:
    print(f"probe failed ({p.returncode}): {p.stderr.strip()}")
    sys.exit(1)
sys.exit(subprocess.run(cmd, env=env).returncode)
