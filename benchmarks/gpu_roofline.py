#!/usr/bin/env python3
"""The expected time of one training step on one GPU, per kernel class, for the CUDA path as
designed (issue 24): bf16 activations and weights, fp32 accumulation, GEMMs with fused
bias / GELU / bias-gradient epilogues, fused (flash) attention, a chunked LM head fused with
the cross-entropy, AdamW once per step. A roofline: each class takes the larger of its FLOPs
over the compute it may reach and its bytes over the memory bandwidth it may reach.

  benchmarks/gpu_roofline.py [--preset h100-80gb|h200|a100-80gb] [--micro-batch B] [--seq T]
        [--layers L] [--hidden C] [--heads NH] [--vocab V] [--gemm-table FILE]
        [--attention-efficiency E] [--measured results.json|bench.json] [--json]

Defaults: gpt2-124m (12 x 768, 12 heads, 1024 tokens, vocabulary 50304), micro-batch 48, an
H100. GEMM time comes from the measured cuBLASLt table of the preset (plan/gemm/PRESET.inc,
nearest measured shape by log distance over M, N, K; the H100's and the H200's are measured)
or, without one, from the planner's curve top (gemm_efficiency 0.67).
--measured takes the per-op split of benchmarks/gpu_step.sh --profile (scripts/gpu-check.sh's
results.json, or gpu_step.sh's --json-out) and prints it beside the expectation, class by class.
Standard library only (runs on the GPU image)."""
import argparse
import json
import math
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# plan/cluster.c's presets: peak dense bf16, HBM bandwidth, the fractions the planner assumes
PRESETS = {
    "a100-80gb": {"peak": 312e12, "hbm": 2039e9, "gemm_efficiency": 0.67, "hbm_efficiency": 0.7},
    "h100-80gb": {"peak": 989e12, "hbm": 3350e9, "gemm_efficiency": 0.67, "hbm_efficiency": 0.7},
    "h200": {"peak": 989e12, "hbm": 4800e9, "gemm_efficiency": 0.67, "hbm_efficiency": 0.7},
}
TABLE_FOR = {"h100-80gb": "h100-80gb", "h200": "h200", "a100-80gb": "a100-80gb"}
BF16, FP32 = 2, 4


def read_gemm_table(path):
    """Rows (M, N, K, batch, seconds) of a plan/gemm/*.inc file ([] when it has none)."""
    rows = []
    if not path or not os.path.isfile(path):
        return rows
    for m in re.finditer(r"\{\s*(\d+),\s*(\d+),\s*(\d+),\s*(\d+),\s*([0-9.eE+-]+)\s*\}", open(path).read()):
        mm, nn, kk, bb = (int(m.group(i)) for i in range(1, 5))
        s = float(m.group(5))
        if s > 0:
            rows.append((mm, nn, kk, bb, s))
    return rows


class GemmModel:
    def __init__(self, preset, rows):
        self.p, self.rows = preset, rows

    def rate(self, m, n, k, batch=1):
        """FLOP/s a bf16 GEMM of this shape reaches: the nearest measured shape's, else the
        curve top."""
        if not self.rows:
            return self.p["peak"] * self.p["gemm_efficiency"]
        best = min(self.rows, key=lambda r: (math.log(m / r[0]) ** 2 + math.log(n / r[1]) ** 2 +
                                             math.log(k / r[2]) ** 2 + math.log(batch / r[3]) ** 2))
        return 2.0 * best[0] * best[1] * best[2] * best[3] / best[4]

    def seconds(self, m, n, k, batch=1):
        return 2.0 * m * n * k * batch / self.rate(m, n, k, batch)


def step_classes(a, gemm):
    """{class: (seconds, flops, bytes, limit)} for one step of one micro-batch on one GPU."""
    B, T, L, C, V, NH = a.micro_batch, a.seq, a.layers, a.hidden, a.vocab, a.heads
    N = B * T                      # tokens
    p = PRESETS[a.preset]
    bw = p["hbm"] * p["hbm_efficiency"]
    out = {}

    # GEMMs of the layers, C(M x N) = A(M x K) B(K x N): forward X W, backward dX = dY W^T and
    # dW = X^T dY, for QKV (C -> 3C), the projection (C -> C), fc1 (C -> 4C), fc2 (4C -> C)
    t = f = 0.0
    for cin, cout in ((C, 3 * C), (C, C), (C, 4 * C), (4 * C, C)):
        for (m, n, k) in ((N, cout, cin), (N, cin, cout), (cin, cout, N)):
            t += gemm.seconds(m, n, k)
            f += 2.0 * m * n * k
    out["gemm (layers)"] = (L * t, L * f, 0.0, "compute")

    # fused attention (flash): per head QK^T and PV, causal half; backward recomputes the
    # scores: 5 products of the 2 forward ones' size (2.5x). Reads Q, K, V, O, dO, writes dQ,
    # dK, dV in bf16 plus the fp32 log-sum-exp per row: never a T x T tensor in memory.
    d = C // NH
    fwd = 2 * 2.0 * B * NH * T * T * d / 2
    f = L * fwd * (1 + 2.5)
    by = L * (N * C * BF16 * (4 + 4) + N * NH * FP32 * 2)
    tc = f / (p["peak"] * a.attention_efficiency)
    out["attention"] = (max(tc, by / bw), f, by, "compute" if tc >= by / bw else "memory")

    # the LM head fused with the cross-entropy, over chunks of tokens: logits (chunk x V) made
    # in bf16, the loss and dlogits computed in place, then the two backward GEMMs
    chunk = min(N, 8192)
    n_chunks = math.ceil(N / chunk)
    tg = fg = 0.0
    for (m, n, k) in ((chunk, V, C), (chunk, C, V), (V, C, chunk)):
        tg += gemm.seconds(m, n, k)
        fg += 2.0 * m * n * k
    by = N * V * BF16 * 3          # written by the GEMM, read+written by softmax/xent
    tm = by / bw
    out["head + loss"] = (n_chunks * tg + tm, n_chunks * fg, by, "compute" if n_chunks * tg > tm else "memory")

    # memory-bound kernels of the layers (bias, GELU and bias-gradient in GEMM epilogues,
    # residuals with beta = 1): two LayerNorms forward (read C, write C) and backward (read x,
    # dy, write dx), GELU backward when not fused into a dGELU epilogue (read the pre-activation
    # and dY of 4C, write 4C), the residual gradient adds (read 2, write 1, of C)
    per_token = 2 * (2 * C) + 2 * (3 * C) + 3 * (4 * C) + 2 * (3 * C)
    by = L * N * per_token * BF16 + N * C * BF16 * 4   # + the embedding's and final LN's
    out["element-wise"] = (by / bw, 0.0, by, "memory")

    # AdamW on the fp32 master weights: read p, g, m, v, write p, m, v and the bf16 copy
    n_params = 12 * L * C * C + 13 * L * C + V * C + a.seq * C + 2 * C
    by = n_params * (7 * FP32 + BF16)
    out["optimizer"] = (by / bw, 10.0 * n_params, by, "memory")
    return out, n_params


# benchmarks/gpu_step.sh --profile's op names, by class
CLASS_OF = [
    (r"^gemm \(layers\)", "gemm (layers)"),
    (r"^attention", "attention"),
    (r"^gemm \(LM head\)|^xent|^crossentropy|^softmax", "head + loss"),
    (r"^adamw|^optimizer|^sumsq|^clip", "optimizer"),
]


def measured_split(path):
    """(ms by class, total profiled ms, trident's ms_per_iter, micro-batch) from a results.json
    or bench.json; None when it has no trident row with ops."""
    j = json.load(open(path))
    rows = j.get("bench", j).get("rows", [])
    row = next((r for r in rows if r.get("impl") == "trident" and r.get("ops")), None)
    if not row:
        return None
    by = {}
    for op in row["ops"]:
        cls = next((c for pat, c in CLASS_OF if re.search(pat, op["op"])), "element-wise")
        by[cls] = by.get(cls, 0.0) + op["ms_per_iter"]
    return by, row.get("profiled_ms_per_iter"), row.get("ms_per_iter"), row.get("micro_batch")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="h100-80gb", choices=sorted(PRESETS))
    ap.add_argument("--micro-batch", type=int, default=48)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--gemm-table", help="plan/gemm/*.inc rows (default: the preset's)")
    ap.add_argument("--attention-efficiency", type=float, default=0.35,
                    help="fraction of peak a bf16 flash-attention kernel reaches at this head "
                         "size (default 0.35: FlashAttention-2 at head dimension 64 on Hopper)")
    ap.add_argument("--measured", help="results.json of scripts/gpu-check.sh or gpu_step.sh's --json-out")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    for k in ("micro_batch", "seq", "layers", "hidden", "heads", "vocab"):
        if getattr(a, k) < 1:
            ap.error(f"--{k.replace('_', '-')} must be >= 1")
    if a.hidden % a.heads:
        ap.error(f"--hidden {a.hidden} is not a multiple of --heads {a.heads}")
    if not 0 < a.attention_efficiency <= 1:
        ap.error("--attention-efficiency must be in (0, 1]")
    table = a.gemm_table or os.path.join(ROOT, "plan", "gemm", TABLE_FOR[a.preset] + ".inc")
    rows = read_gemm_table(table)
    if a.gemm_table and not rows:
        ap.error(f"--gemm-table {a.gemm_table}: no rows {{M, N, K, batch, seconds}} in it")
    gemm = GemmModel(PRESETS[a.preset], rows)
    classes, n_params = step_classes(a, gemm)
    total = sum(v[0] for v in classes.values())
    N = a.micro_batch * a.seq
    flops = (6.0 * n_params + 12.0 * a.layers * a.hidden * a.seq) * N   # model FLOPs (gpu_step's)
    peak = PRESETS[a.preset]["peak"]
    mfu = flops / total / peak
    limit = max(classes, key=lambda c: classes[c][0])
    meas = measured_split(a.measured) if a.measured else None
    if a.measured and meas and meas[3] and meas[3] != a.micro_batch:
        print(f"gpu_roofline: the measured run used micro-batch {meas[3]}, this model {a.micro_batch}: "
              f"pass --micro-batch {meas[3]} to compare like with like", file=sys.stderr)
    if a.json:
        print(json.dumps({"preset": a.preset, "micro_batch": a.micro_batch, "seq": a.seq,
                          "params": n_params, "gemm_table_rows": len(rows),
                          "classes": {c: {"ms": 1e3 * v[0], "tflop": v[1] / 1e12, "gb": v[2] / 1e9,
                                          "limit": v[3]} for c, v in classes.items()},
                          "total_ms": 1e3 * total, "mfu": mfu, "limited_by": limit,
                          "measured_ms": meas[0] if meas else None}))
        return 0
    src = f"{os.path.relpath(table, ROOT)} ({len(rows)} shapes)" if rows else \
        f"the curve top ({PRESETS[a.preset]['gemm_efficiency']:.2f} x peak)"
    print(f"GPT {a.layers} x {a.hidden}, {a.heads} heads, seq {a.seq}, vocabulary {a.vocab}, "
          f"micro-batch {a.micro_batch} ({n_params / 1e6:.1f}M parameters), bf16, one {a.preset}")
    print(f"GEMM rates from {src}; attention at {a.attention_efficiency:.2f} x peak; memory at "
          f"{PRESETS[a.preset]['hbm_efficiency']:.2f} x {PRESETS[a.preset]['hbm'] / 1e12:.2f} TB/s\n")
    head = f"{'class':<16} {'expected ms':>11} {'share':>6} {'TFLOP':>7} {'GB':>6}  limit  "
    if meas:
        head += f"{'measured ms':>11} {'x expected':>10}"
    print(head)
    for c, (s, f, by, lim) in sorted(classes.items(), key=lambda kv: -kv[1][0]):
        line = f"{c:<16} {1e3 * s:11.2f} {100 * s / total:5.1f}% {f / 1e12:7.2f} {by / 1e9:6.2f}  {lim:<7}"
        if meas:
            m = meas[0].get(c, 0.0)
            line += f"{m:11.2f} {m / (1e3 * s):9.1f}x"
        print(line)
    print(f"{'total':<16} {1e3 * total:11.2f}")
    if meas:
        print(f"\nmeasured: {meas[2]:.2f} ms per step ({meas[1]:.2f} ms profiled op by op) = "
              f"{meas[2] / (1e3 * total):.1f}x the expectation")
    print(f"\nexpected {1e3 * total:.1f} ms per step, {N / total:,.0f} tokens/s, MFU {100 * mfu:.1f}% "
          f"({flops / 1e12:.1f} TFLOP of model work); the largest class: {limit} "
          f"({100 * classes[limit][0] / total:.0f}%, {classes[limit][3]}-bound)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
