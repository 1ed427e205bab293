#!/usr/bin/python3
"""Recorded cuBLASLt algorithm choices on a GPU (kernels/cuda/gemm_choice.h): the fused
linear ops' checks list their GEMM keys (TRIDENT_CUDA_GEMM_KEYS), benchmarks/gemm_choose
records a candidate other than the heuristic's first for each (--force-index 1), and the
same checks pass on those algorithms, with every recorded one used and none refused. A bad
choices file stops the backend's start with its line; a table of another device is ignored
with a warning. Run by gpu_run.py (SKIP where no GPU is usable).
usage: test_gemm_choose.py CUDA_PROBE TEST_CUDA_FUSED GEMM_CHOOSE"""
import os
import re
import subprocess
import sys
import tempfile

probe, fused, choose = sys.argv[1:4]
failures = 0


def check(ok, what, out=""):
    global failures
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures += 1
        print(out[-3000:])


def run(cmd, **env):
    e = dict(os.environ)
    e.update(env)
    r = subprocess.run(cmd, capture_output=True, text=True, env=e, timeout=600)
    return r.returncode, r.stdout + r.stderr


with tempfile.TemporaryDirectory() as d:
    keys, choices = os.path.join(d, "keys.txt"), os.path.join(d, "choices.txt")
    rc, out = run([fused], TRIDENT_CUDA_GEMM_KEYS=keys, TRIDENT_CUDA_GEMM_CHOICES="none")
    listed = open(keys).read().splitlines() if os.path.exists(keys) else []
    check(rc == 0 and len(listed) >= 5 and all(l.startswith("key ") for l in listed),
          f"the fused ops' checks pass and list their GEMM keys ({len(listed)} lines)", out)

    rc, out = run([choose, "--keys", keys, "--out", choices, "--force-index", "1",
                   "--candidates", "4", "--max-gib", "8"])
    rows = [l for l in open(choices).read().splitlines() if l.startswith("choice ")] \
        if os.path.exists(choices) else []
    check(rc == 0 and rows, f"gemm_choose records {len(rows)} forced choices", out)
    print(out[-1500:])

    rc, out = run([fused], TRIDENT_CUDA_GEMM_CHOICES=choices)
    m = re.search(r"gemm choices: (\d+) chosen, (\d+) refused", out)
    chosen, refused = (int(m.group(1)), int(m.group(2))) if m else (0, -1)
    check(rc == 0 and chosen >= len(rows) > 0 and refused == 0,
          f"the checks pass on the recorded algorithms ({chosen} plans chose one of {len(rows)} "
          f"recorded, {refused} refused)", out)

    bad = os.path.join(d, "bad.txt")
    with open(bad, "w") as f:
        f.write(open(choices).read() + "choice 1 2 3\n")
    n_lines = len(open(bad).read().splitlines())
    rc, out = run([probe], TRIDENT_CUDA_GEMM_CHOICES=bad)
    check(rc != 0 and f"{bad}:{n_lines}: choice: expected 22 key integers" in out,
          "a malformed choices file stops the start, naming its line", out)
    rc, out = run([probe], TRIDENT_CUDA_GEMM_CHOICES=os.path.join(d, "missing.txt"))
    check(rc != 0 and "cannot read it" in out, "a missing choices file stops the start", out)

    other = os.path.join(d, "other.txt")
    text = open(choices).read()
    with open(other, "w") as f:
        f.write(re.sub(r"^device (\d+) .*$", r"device \1 Some Other GPU", text, flags=re.M))
    rc, out = run([fused], TRIDENT_CUDA_GEMM_CHOICES=other)
    m = re.search(r"gemm choices: (\d+) chosen", out)
    check(rc == 0 and m and m.group(1) == "0" and "none of its" in out,
          "another device's table is ignored with a warning", out)

print(f"{'FAIL' if failures else 'ok'}: {failures} failures")
sys.exit(1 if failures else 0)
