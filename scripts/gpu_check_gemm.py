"""The recorded cuBLASLt choices for scripts/gpu_check.py's bench step (Python's standard
library only). The benchmark's trident run lists its GEMM keys (TRIDENT_CUDA_GEMM_KEYS);
benchmarks/gemm_choose times cuBLASLt's first candidates for each on this GPU and writes the
faster ones it finds as a choices table (gemm_choices.txt in --out, and gemm_choices.inc:
kernels/cuda/gemm_choices.inc's lines to commit); the variants then time trident's step with
TRIDENT_CUDA_GEMM_CHOICES set to it. Its per-key table (each GEMM's time and TFLOP/s with the
heuristic's first algorithm and the best) goes into the report."""
import os

MIN_LEFT = 150  # seconds the budget must have left: the tool, then the variants


def keys_path(c):
    return os.path.join(c.logdir, "gemm_keys.txt")


def choose(c):
    """Runs gemm_choose on the bench run's keys; returns the variant that times its table
    ("TRIDENT_CUDA_GEMM_CHOICES=PATH"), or "" (no keys, no time, nothing faster, a failure:
    said in c.results['gemm_choose'])."""
    keys = keys_path(c)
    if not os.path.isfile(keys) or os.path.getsize(keys) == 0:
        c.results["gemm_choose"] = "not run: the benchmark's run listed no GEMM keys"
        return ""
    if c.left() < MIN_LEFT:
        c.results["gemm_choose"] = "not run: the time budget ran out"
        return ""
    out_txt = os.path.join(c.out, "gemm_choices.txt")
    exe = os.path.join(c.a.build, "benchmarks", "gemm_choose")
    rc, out = c.run("gemm-choose", [exe, "--keys", keys, "--out", out_txt, "--inc",
                                    os.path.join(c.out, "gemm_choices.inc")],
                    timeout=min(240, c.left() - 100))
    text = c.last_output(out)
    table = "\n".join(l for l in text.splitlines() if l.startswith("|") or " keys, " in l)
    c.results["gemm_choose"] = table or f"benchmarks/gemm_choose exit {rc}: {text[-500:]}"
    # (1: some keys failed, 124: stopped at its time; the rows it wrote stand either way)
    if rc not in (0, 1, 124) or not os.path.isfile(out_txt):
        return ""
    rows = [l for l in open(out_txt).read().splitlines() if l.startswith("choice ")]
    return f"TRIDENT_CUDA_GEMM_CHOICES={out_txt}" if rows else ""
