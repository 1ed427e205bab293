#!/usr/bin/python3
"""The instructions a warp issues per step of the tensor-core attention's main loops, read from
the SASS that nvcc makes for sm_90: a static count that runs without a GPU (issue 24: the
kernels were found latency- and issue-bound, so each instruction beside the mma.sync counts).

For each kernel (head size 64, bf16 input: the gpt2 shapes) it compiles kernels/cuda/flash_mma.cu
to a cubin, disassembles it (cuobjdump -sass), finds the main loop (the outermost backward branch
holding HMMA instructions), splits it into basic blocks and takes the cheapest path from the
loop's head to its back edge that loads the next tile: the step of an unmasked tile without
ALiBi, the common one. An
inner loop on that path (mma_sbt's k loop, unrolled by 2) counts as many times as the step's
known HMMA count needs. Printed: instructions per step, HMMA per step, instructions per HMMA,
and the path's instructions by opcode.

usage: cuda_sass.py [--nvcc NVCC] [--cuobjdump CUOBJDUMP] [--source-root DIR] [--json]
cuobjdump (and the nvdisasm it runs): CUDA's bin, PATH, or the PyPI wheels
(pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)."""
import argparse
import collections
import glob
import heapq
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

# (label, mangled name's part, HMMA a warp issues per step: products x 8-wide tiles x k steps
# [, the instructions the step's path must pass, by their text's start: LDGSTS, the next
# tile's load, unless given])
KERNELS = (("attention forward", "7forwardILi64EttE", 2 * 8 * 4),
           ("attention dK dV", "11backward_kvILi64EtLi32ELb0E", 4 * 4 * 4),
           ("attention dQ", "10backward_qILi64EtE", 3 * 8 * 4),
           # the fused backward: dK dV's step and dq_add's 16 rows x 32 columns over 64 keys;
           # the common step adds to dQ's sums: loads them (LDG.E.64) and stores them (STG.E.64)
           ("attention dK dV dQ (fused)", "11backward_kvILi64EtLi32ELb1E", 4 * 4 * 4 + 4 * 4,
            ("LDGSTS", "LDG.E.64", "STG.E.64")))


def find_tool(name, given):
    if given:
        return given
    found = [shutil.which(name), f"/usr/local/cuda/bin/{name}"]
    found += glob.glob(f"/usr/local/lib/python3*/dist-packages/nvidia/cu*/bin/{name}")
    found += glob.glob(os.path.expanduser(f"~/.local/lib/python3*/site-packages/nvidia/cu*/bin/{name}"))
    found += glob.glob(f"{sys.prefix}/lib/python3*/site-packages/nvidia/cu*/bin/{name}")
    return next((p for p in found if p and os.access(p, os.X_OK)), None)


def parse(sass, part):
    """[(address, instruction text)] of the function whose name holds part."""
    out, inside = [], False
    for line in sass.splitlines():
        if "Function :" in line:
            inside = part in line
            continue
        if inside:
            m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
            if m:
                out.append((int(m.group(1), 16), m.group(2).strip()))
    return out


def opcode(text):
    return re.sub(r"^@!?U?P\w+\s+", "", text).split()[0].split(".")[0]


def branch_target(text):
    m = re.search(r"BRA\s.*?0x([0-9a-f]+)", text)
    return int(m.group(1), 16) if m else None


def step_path(ins, hmma_per_step, must=("LDGSTS",)):
    """(instructions, HMMA, Counter of opcodes) of the main loop's cheapest step that passes an
    instruction starting with each of must."""
    loops = [(branch_target(t), a) for a, t in ins
             if branch_target(t) is not None and branch_target(t) < a]
    loops = [(lo, hi) for lo, hi in loops
             if any(lo <= a <= hi and opcode(t) == "HMMA" for a, t in ins)]
    if not loops:
        raise SystemExit("no loop with HMMA found")
    lo, hi = max(loops, key=lambda l: l[1] - l[0])  # the outermost
    body = [(a, t) for a, t in ins if lo <= a <= hi]
    starts = {lo} | {branch_target(t) for _, t in body if branch_target(t) is not None}
    blocks, cur = [], None  # [start, [texts]]
    for a, t in body:
        if cur is None or a in starts:
            cur = [a, []]
            blocks.append(cur)
        cur[1].append(t)
        if opcode(t) in ("BRA", "EXIT"):
            cur = None
    index = {b[0]: i for i, b in enumerate(blocks)}
    inner = {}  # block index -> a loop of its own (branches back to itself)
    edges = collections.defaultdict(list)
    for i, (start, texts) in enumerate(blocks):
        last = texts[-1]
        tgt = branch_target(last)
        conditional = last.startswith("@")
        if tgt is not None and tgt == start and i != 0:
            inner[i] = True
        if tgt is not None and tgt in index and tgt != start and tgt != lo:
            edges[i].append(index[tgt])
        if (tgt is None or conditional or tgt == start) and i + 1 < len(blocks):
            edges[i].append(i + 1)
        if tgt == lo:
            edges[i].append(-1)  # the back edge: the step's end
    # inner loops' trips: the step's HMMA count less those outside them, shared evenly
    def hmma(i):
        return sum(opcode(t) == "HMMA" for t in blocks[i][1])

    # the cheapest path that passes a block issuing each of must (LDGSTS: the step that loads
    # the next tile, every step but a block's last) where the loop has one: the blocks' bits of
    # the requirements they meet, all of those the loop can meet wanted
    def meets(i):
        texts = [re.sub(r"^@!?U?P\w+\s+", "", t) for t in blocks[i][1]]
        return sum(1 << r for r, m in enumerate(must) if any(t.startswith(m) for t in texts))

    bits = [meets(i) for i in range(len(blocks))]
    want = 0
    for b in bits:
        want |= b

    def cheapest(trips):
        start = (0, bits[0])
        dist, heap = {start: len(blocks[0][1])}, [(len(blocks[0][1]), start, (0,))]
        while heap:
            d, (i, met), path = heapq.heappop(heap)
            if i == -1:
                return path
            if d > dist.get((i, met), 1 << 30):
                continue
            for j in edges[i]:
                if j == -1 and met != want:
                    continue
                cost = 0 if j == -1 else len(blocks[j][1]) * (trips if j in inner else 1)
                key = (j, met | (0 if j == -1 else bits[j]))
                if d + cost < dist.get(key, 1 << 30):
                    dist[key] = d + cost
                    heapq.heappush(heap, (d + cost, key, path + (j,)))
        raise SystemExit("no path to the loop's back edge")

    path = cheapest(1)
    outside = sum(hmma(i) for i in path if i != -1 and i not in inner)
    in_loops = sum(hmma(i) for i in path if i in inner)
    trips = (hmma_per_step - outside) // in_loops if in_loops else 1
    path = cheapest(trips)
    ops = collections.Counter()
    for i in path:
        if i == -1:
            continue
        for t in blocks[i][1]:
            ops[opcode(t)] += trips if i in inner else 1
    return sum(ops.values()), ops["HMMA"], ops


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nvcc", default=None)
    ap.add_argument("--cuobjdump", default=None)
    ap.add_argument("--source-root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    nvcc, objdump = find_tool("nvcc", a.nvcc), find_tool("cuobjdump", a.cuobjdump)
    if not nvcc or not objdump:
        print("SKIP: needs nvcc and cuobjdump (CUDA's bin, or pip install nvidia-cuda-cuobjdump "
              "nvidia-cuda-nvdisasm)")
        return 77
    root = a.source_root
    with tempfile.TemporaryDirectory() as tmp:
        cubin = os.path.join(tmp, "flash_mma.cubin")
        subprocess.run([nvcc, "-O3", "-std=c++17", "-DTR_HAVE_CUDA", f"-I{root}", "-gencode",
                        "arch=compute_90,code=sm_90", "-cubin", "-o", cubin,
                        os.path.join(root, "kernels", "cuda", "flash_mma.cu")], check=True)
        env = dict(os.environ)  # (cuobjdump runs nvdisasm: the wheels put both in one folder)
        env["PATH"] = os.path.dirname(objdump) + os.pathsep + env.get("PATH", "")
        sass = subprocess.run([objdump, "-sass", cubin], check=True, capture_output=True,
                              text=True, env=env).stdout
    rows = []
    for label, part, per_step, *must in KERNELS:
        n, h, ops = step_path(parse(sass, part), per_step, *must)
        rows.append({"kernel": label, "instructions": n, "hmma": h,
                     "per_hmma": round(n / h, 2),
                     "top": dict(ops.most_common(10))})
    if a.json:
        print(json.dumps(rows, indent=1))
        return 0
    print("| kernel (D 64, bf16) | instructions a warp issues per step | HMMA | per HMMA | most issued |")
    print("|---|---:|---:|---:|---|")
    for r in rows:
        top = ", ".join(f"{k} {v}" for k, v in r["top"].items() if k != "HMMA")
        print(f"| {r['kernel']} | {r['instructions']} | {r['hmma']} | {r['per_hmma']} | {top} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
