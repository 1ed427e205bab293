"""Shared by the benchmark scripts: run `trident train` on generated settings and read what
it wrote (metrics.jsonl, summary.json)."""
import json
import os
import statistics
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRIDENT = os.environ.get("TRIDENT", os.path.join(ROOT, "build", "trident"))


def train(name, config, sets, nproc=1, env=None):
    """Run one training; return (median ms/iter after the first iteration, summary dict)."""
    run_dir = os.path.join(ROOT, "runs", "bench", name)
    args = [TRIDENT, "train", os.path.join(ROOT, config), "--run-dir", run_dir, "--quiet"]
    if nproc > 1:
        args[2:2] = ["--nproc", str(nproc)]
    for k, v in sets.items():
        args += ["--set", f"{k}={v}"]
    subprocess.run(args, check=True, cwd=ROOT, env=dict(os.environ, **(env or {})))
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        ms = [json.loads(line)["ms_per_iter"] for line in f][1:]
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    return statistics.median(ms), summary
