#!/usr/bin/python3
"""benchmarks/gpu_roofline.py (issue 24, item 10): the expected step of the CUDA path as
designed. For gpt2-124m at micro-batch 48 on an H100 the total is at most 110 ms (>= 45% MFU)
and the script names the class that limits it; a measured per-op split (the shape of
scripts/gpu-check.sh's results.json) lands beside it class by class; bad arguments exit 2.
usage: test_gpu_roofline.py SOURCE_ROOT"""
import json
import os
import subprocess
import sys
import tempfile

root = os.path.abspath(sys.argv[1])
script = os.path.join(root, "benchmarks", "gpu_roofline.py")
failed = 0


def check(what, ok, detail=""):
    global failed
    print(("ok   " if ok else "FAIL ") + what + ("" if ok else f"\n     {detail}"))
    failed += not ok
    return ok


def run(*args):
    return subprocess.run([sys.executable, script, *args], capture_output=True, text=True, timeout=60)


r = run("--json")
j = json.loads(r.stdout) if r.returncode == 0 else {}
check(f"gpt2-124m, micro-batch 48, H100: {j.get('total_ms', 0):.1f} ms <= 110 ms, MFU "
      f"{100 * j.get('mfu', 0):.1f}% >= 45%", r.returncode == 0 and j["total_ms"] <= 110 and j["mfu"] >= 0.45,
      r.stderr[-500:])
check(f"it names the limiting class ({j.get('limited_by')}) and every class's bound",
      j.get("limited_by") in j.get("classes", {}) and
      all(c["limit"] in ("compute", "memory") for c in j.get("classes", {}).values()))
check("the H100 table is the measured one (plan/gemm/h100-80gb.inc, 2026-11-27)",
      j.get("gemm_table_rows", 0) > 0, str(j.get("gemm_table_rows")))
# memory-bound work scales with bandwidth: the H200 is faster on those classes, not on GEMMs
h2 = json.loads(run("--json", "--preset", "h200").stdout)
# (each preset's own measured table: same SMs and clocks, so layer GEMMs within a few percent)
gh, g2 = j["classes"]["gemm (layers)"]["ms"], h2["classes"]["gemm (layers)"]["ms"]
check(f"H200: element-wise faster than H100 (4.8 vs 3.35 TB/s), layer GEMMs within 10% "
      f"({g2:.1f} vs {gh:.1f} ms)",
      h2["classes"]["element-wise"]["ms"] < j["classes"]["element-wise"]["ms"] and abs(g2 - gh) <= 0.1 * gh)
# twice the micro-batch: about twice the time
j2 = json.loads(run("--json", "--micro-batch", "96").stdout)
check(f"micro-batch 96 takes {j2['total_ms'] / j['total_ms']:.2f}x micro-batch 48 (1.7-2.1x)",
      1.7 < j2["total_ms"] / j["total_ms"] < 2.1)

# a measured split beside it
with tempfile.TemporaryDirectory() as d:
    res = {"bench": {"rows": [{"impl": "trident", "micro_batch": 48, "ms_per_iter": 400.0,
                               "profiled_ms_per_iter": 401.0, "ops": [
                                   {"op": "gemm (layers)", "ms_per_iter": 150.0},
                                   {"op": "gemm (LM head)", "ms_per_iter": 80.0},
                                   {"op": "xent_backward", "ms_per_iter": 10.0},
                                   {"op": "attention_forward", "ms_per_iter": 50.0},
                                   {"op": "attention_backward", "ms_per_iter": 100.0},
                                   {"op": "layernorm_forward", "ms_per_iter": 5.0},
                                   {"op": "gelu_backward", "ms_per_iter": 5.0},
                                   {"op": "adamw", "ms_per_iter": 1.0}]}]}}
    path = os.path.join(d, "results.json")
    json.dump(res, open(path, "w"))
    m = json.loads(run("--json", "--measured", path).stdout)["measured_ms"]
    check("the measured ops go to their classes", m == {"gemm (layers)": 150.0, "head + loss": 90.0,
                                                        "attention": 150.0, "element-wise": 10.0,
                                                        "optimizer": 1.0}, str(m))
    t = run("--measured", path)
    check("the table prints measured beside expected", t.returncode == 0 and "measured ms" in t.stdout
          and "x the expectation" in t.stdout, t.stdout[-800:])

for bad in (["--micro-batch", "0"], ["--hidden", "100", "--heads", "12"], ["--preset", "tpu"],
            ["--attention-efficiency", "2"], ["--gemm-table", "/dev/null"]):
    r = run(*bad)
    check(f"{' '.join(bad)}: exit 2 with a message", r.returncode == 2 and "error" in r.stderr,
          f"exit {r.returncode}: {r.stderr[-300:]}")

print(f"{'FAIL' if failed else 'PASS'}: gpu_roofline ({failed} failed)")
sys.exit(1 if failed else 0)
