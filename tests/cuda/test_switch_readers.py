#!/usr/bin/python3
"""The CUDA backend's switches are read by the names and values its table accepts.

kernels/cuda/switches.c lists each TRIDENT_CUDA_* switch and its values (a run with any other
stops at start); the code that acts on a switch tests for a value by its own string
(cu_env_is("TRIDENT_CUDA_XENT", "two-pass"), tr_cudnn_attention_passes' strcmp). A value
misspelt in a reader would pass the table's check and then do nothing: the variant gpu-check
times would be the default under another name. This test reads the sources (no CUDA needed):
  1. every switch and value a reader tests for is in the table;
  2. every value of the table other than its default is tested for by some reader (no value
     the table accepts and nothing acts on), and every switch is read;
  3. every NAME=VALUE that gpu-check's scripts, the README and docs/ name is one the table takes.
usage: test_switch_readers.py SOURCE_ROOT"""
import glob
import os
import re
import sys

root = sys.argv[1]
cuda = os.path.join(root, "kernels", "cuda")
table_src = open(os.path.join(cuda, "switches.c")).read()
table = {m.group(1): m.group(2).split("|") if m.group(2) not in ("", "N") else None
         for m in re.finditer(r'\{"([A-Z_0-9]+)",\s*"([^"]*)"\}', table_src)}
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL", msg)


def takes(name, value):
    """'' where the table takes NAME=VALUE, else why not."""
    if name not in table:
        return f"TRIDENT_CUDA_{name} is not in switches.c's table"
    if table[name] is not None and value not in table[name]:
        return f"TRIDENT_CUDA_{name}={value}: the table's values are {'|'.join(table[name])}"
    return ""


if len(table) < 10:
    fail(f"switches.c's table read as {len(table)} switches: the test no longer parses it")

# 1. the readers
read_values, read_names = set(), set()
readers = [f for ext in ("c", "cu", "cpp", "h", "cuh") for f in glob.glob(os.path.join(cuda, "*." + ext))
           if os.path.basename(f) != "switches.c"]
for f in sorted(readers):
    src = open(f).read()
    where = os.path.relpath(f, root)
    for m in re.finditer(r'cu_env_is\(\s*"TRIDENT_CUDA_([A-Z_0-9]+)"\s*,\s*"([^"]*)"\s*\)', src):
        read_names.add(m.group(1))
        read_values.add((m.group(1), m.group(2)))
        why = takes(m.group(1), m.group(2))
        if why:
            fail(f"{where}: {m.group(0)}: {why}")
    for m in re.finditer(r'getenv\(\s*"TRIDENT_CUDA_([A-Z_0-9]+)"\s*\)', src):
        read_names.add(m.group(1))
        if m.group(1) not in table:
            fail(f"{where}: {m.group(0)}: TRIDENT_CUDA_{m.group(1)} is not in switches.c's table")
# tr_cudnn_attention_passes: TRIDENT_CUDA_ATTENTION's cuDNN values, by strcmp
take = open(os.path.join(cuda, "attention_cudnn_take.c")).read()
body = re.search(r"int tr_cudnn_attention_passes\([^)]*\)\s*\{(.*?)\n\}", take, re.S)
if not body:
    fail("attention_cudnn_take.c: tr_cudnn_attention_passes not found")
else:
    for v in re.findall(r'strcmp\(\s*value\s*,\s*"([^"]*)"\s*\)', body.group(1)):
        read_names.add("ATTENTION")
        read_values.add(("ATTENTION", v))
        why = takes("ATTENTION", v)
        if why:
            fail(f"attention_cudnn_take.c: tr_cudnn_attention_passes: {why}")

# 2. nothing the table takes goes unread (a switch of any text may be read by a script:
# TRIDENT_CUDA_HOME by scripts/gpu_check_cuda.py)
scripts = "".join(open(f).read() for d in ("scripts", "benchmarks") for f in glob.glob(os.path.join(root, d, "*.py")))
for name, values in sorted(table.items()):
    if name not in read_names and not (values is None and f"TRIDENT_CUDA_{name}" in scripts):
        fail(f"TRIDENT_CUDA_{name}: in the table, read nowhere in kernels/cuda")
    for v in (values or [])[1:]:
        if (name, v) not in read_values:
            fail(f"TRIDENT_CUDA_{name}={v}: the table takes it, no reader tests for it")

# 3. what the scripts and the docs tell people to set
docs = glob.glob(os.path.join(root, "scripts", "gpu_check*.py")) + [os.path.join(root, "README.md")] + \
    glob.glob(os.path.join(root, "docs", "*.md")) + [os.path.join(root, "benchmarks", "gpu_step.sh")]
named = 0
for f in sorted(d for d in docs if os.path.isfile(d)):
    for m in re.finditer(r"TRIDENT_CUDA_([A-Z_0-9]+)=([A-Za-z0-9][A-Za-z0-9_-]*)", open(f).read()):
        named += 1
        why = takes(m.group(1), m.group(2))
        if why:
            fail(f"{os.path.relpath(f, root)}: {m.group(0)}: {why}")

print(f"{'FAIL' if failures else 'ok'}: {len(table)} switches in the table, {len(read_values)} values tested "
      f"for by readers, {named} NAME=VALUE in the scripts and docs; {len(failures)} problem(s)")
sys.exit(1 if failures else 0)
