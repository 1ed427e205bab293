#!/usr/bin/python3
"""Goodput under failures (issue 21): the fraction of wall time spent on iterations that count.

`trident train --nproc N --max-restarts 1000` (checkpoint.load = checkpoint.save, a checkpoint
every S iterations) while a driver SIGKILLs a random rank each time the job has run K more
iterations (redone ones included, so K iterations of compute is the mean time between
failures); the launcher stops the group and starts it again from the latest checkpoint. For
each S the same run without failures is the peer. Per run:

  goodput = sum of ms_per_iter over the final metrics.jsonl (iterations 1..T, each counted once,
            as the attempt that counts measured it) / wall time from start to exit

Lost time: start-up, saves (delta each), the iterations redone after each failure and each
restart (R: noticing, stopping, starting, rendezvous, loading). Failures come without memory
(the gaps are exponential with mean K iterations, seeded), as Young's and Daly's models assume.
Every save_interval meets the same failure schedule for a given K (seeded). Printed beside
each run: the model's goodput (the peer's x w / ((e^(w/M) - 1)(M + R)), w = S t + delta, M = K t;
t the time per iteration and delta a save as measured in the run, R a restart: the median over
the runs of each run's wall time beyond its peer's and its redone iterations, per failure), and
Young's interval for each K, S* = sqrt(2 delta M) / t.

usage: benchmarks/goodput.py [--trident PATH] [--nproc 8] [--config configs/tiny-3d.yaml]
           [--iters 300] [--k 50,100,200] [--save 5,20,50] [--seed 1] [--set KEY=VALUE ...]
           [--work DIR] [--markdown]
The config's data_path must exist (scripts/demo.sh makes configs/tiny-3d.yaml's)."""
import argparse
import json
import math
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("--trident", default=os.environ.get("TRIDENT", os.path.join(ROOT, "build", "trident")))
ap.add_argument("--nproc", type=int, default=8)
ap.add_argument("--config", default=os.path.join(ROOT, "configs", "tiny-3d.yaml"))
ap.add_argument("--iters", type=int, default=300)
ap.add_argument("--k", default="50,100,200", help="iterations between failures")
ap.add_argument("--save", default="5,20,50", help="checkpoint.save_interval values")
ap.add_argument("--seed", type=int, default=1)
ap.add_argument("--set", action="append", default=[], help="more --set KEY=VALUE for every run")
ap.add_argument("--work", default=os.path.join(ROOT, "runs", "goodput"))
ap.add_argument("--markdown", action="store_true", help="print the table as Markdown")
args = ap.parse_args()
trident, work = os.path.abspath(args.trident), os.path.abspath(args.work)
rng = random.Random(args.seed)


def lines(path):
    try:
        with open(path) as f:
            return [line for line in f if line.endswith("\n")]
    except OSError:
        return []


def ranks(marker, launcher):
    """pid of every rank process of the job (its command line holds marker, its environment
    a RANK), by rank."""
    found = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == launcher:
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() not in f.read():
                    continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        rank = [e[5:] for e in env if e.startswith(b"RANK=")]
        if rank:
            found[int(rank[0])] = int(pid)
    return found


def next_gap(gaps, k):
    """Iterations until the next failure: exponential with mean k (failures without memory,
    as Young's and Daly's models assume), at least 1."""
    return max(1, round(gaps.expovariate(1.0 / k))) if k else None


def run(name, save_interval, k):
    """One run; k = None: no failures. Returns a dict of what it measured."""
    run_dir = os.path.join(work, name)
    shutil.rmtree(run_dir, ignore_errors=True)
    ck = os.path.join(run_dir, "ck")
    cmd = [trident, "train", "--nproc", str(args.nproc), "--max-restarts", "1000", args.config,
           "--run-dir", run_dir]
    for s in [f"training.train_iters={args.iters}", "training.eval_interval=0",
              f"checkpoint.save={ck}", f"checkpoint.load={ck}",
              f"checkpoint.save_interval={save_interval}", "logging.log_interval=1000000",
              *args.set]:
        cmd += ["--set", s]
    metrics = os.path.join(run_dir, "metrics.jsonl")
    t0 = time.monotonic()
    os.makedirs(run_dir)
    out_f, err_f = open(run_dir + ".out", "w+"), open(run_dir + ".err", "w+")
    job = subprocess.Popen(cmd, stdout=out_f, stderr=err_f, cwd=ROOT)
    seen, ran, since, kills = 0, 0, 0, 0
    gaps = random.Random(f"{args.seed}-{k}")  # every save_interval meets the same failures
    gap = next_gap(gaps, k)
    while job.poll() is None:
        n = len(lines(metrics))
        if n > seen:
            ran += n - seen
            since += n - seen
        seen = n  # a restart truncates metrics.jsonl to its checkpoint
        if k and since >= gap and n < args.iters:
            time.sleep(rng.uniform(0, 0.1))  # somewhere in the next iteration (or save)
            live = ranks(run_dir, job.pid)
            if len(live) == args.nproc:
                try:
                    os.kill(live[rng.randrange(args.nproc)], signal.SIGKILL)
                    kills += 1
                    since, gap = 0, next_gap(gaps, k)
                except ProcessLookupError:
                    pass
        time.sleep(0.005)
    wall = time.monotonic() - t0
    out_f.seek(0), err_f.seek(0)
    out, err = out_f.read(), err_f.read()
    out_f.close(), err_f.close()
    if job.returncode:
        sys.exit(f"goodput: {name}: trident exited {job.returncode}\n{err[-3000:]}")
    final = [json.loads(line) for line in lines(metrics)]
    if [m["iteration"] for m in final] != list(range(1, args.iters + 1)):
        sys.exit(f"goodput: {name}: metrics.jsonl does not hold iterations 1..{args.iters} once")
    ms = [m["ms_per_iter"] for m in final]
    saves = [float(x) for x in re.findall(r"saved checkpoint \S+ in ([0-9.]+) s", out)]
    return dict(name=name, save=save_interval, k=k, kills=kills, ran=ran, wall=wall,
                useful=sum(ms) / 1e3, t=statistics.median(ms) / 1e3, saves=len(saves),
                delta=statistics.median(saves) if saves else 0.0, sum_saves=sum(saves),
                restarts=err.count("restart "))


def restart_cost(r, base):
    """R, a restart's cost: the run's wall time beyond its peer's and the redone iterations
    (with their saves), per failure."""
    per_iter = r["t"] + r["delta"] / r["save"]
    redone = (r["ran"] - args.iters) * per_iter
    return (r["wall"] - base["wall"] - redone) / r["kills"]


def model(r, base, restart):
    """The goodput the model predicts from the peer's. A segment of w = S t + delta (S
    iterations and their save) with failures at rate 1/M (M = K t) and a restart costing R
    takes (e^(w/M) - 1)(M + R) on average (Daly 2006, with failures only while working, as
    injected here); to first order w + (w/2 + R) w/M: Young's half an interval redone and a
    restart per failure. goodput = peer's x w / that."""
    t = r["t"]
    w, m = r["save"] * t + r["delta"], r["k"] * t
    return (base["useful"] / base["wall"]) * w / ((math.exp(w / m) - 1) * (m + restart))


def main():
    os.makedirs(work, exist_ok=True)
    ks = [int(x) for x in args.k.split(",") if x]
    intervals = [int(x) for x in args.save.split(",") if x]
    runs = []  # (peer, [runs with failures])
    for s in intervals:
        base = run(f"s{s}-none", s, None)
        print(f"  save_interval {s}: no failures, {base['wall']:.1f} s", file=sys.stderr)
        runs.append((base, []))
        for k in ks:
            r = run(f"s{s}-k{k}", s, k)
            runs[-1][1].append(r)
            print(f"  save_interval {s}, K {k}: {r['kills']} kills, {r['wall']:.1f} s",
                  file=sys.stderr)
    # one R for the model: the median over the runs (each run's own is noisy)
    costs = [restart_cost(r, base) for base, rs in runs for r in rs if r["kills"] >= 2]
    restart = statistics.median(costs) if costs else 0.0
    rows = []
    for base, rs in runs:
        rows.append((base, None, None))
        rows += [(r, restart_cost(r, base) if r["kills"] else None, model(r, base, restart))
                 for r in rs]
    t = statistics.median(r["t"] for r, _, _ in rows)
    delta = statistics.median(r["delta"] for r, _, _ in rows if r["delta"])
    head = ["K (mean iters between failures)", "save_interval", "failures", "iterations run",
            "wall s", "useful s", "goodput", "vs no failures", "model (Young/Daly)",
            "restart R s"]
    table = []
    base = None
    for r, own, predicted in rows:
        if r["k"] is None:
            base = r
        table.append([str(r["k"] or "none"), str(r["save"]), str(r["kills"]), str(r["ran"]),
                      f"{r['wall']:.1f}", f"{r['useful']:.1f}",
                      f"{100 * r['useful'] / r['wall']:.1f}%",
                      f"{(r['useful'] / r['wall']) / (base['useful'] / base['wall']):.2f}x",
                      f"{100 * predicted:.1f}%" if predicted is not None else "-",
                      f"{own:.2f}" if own is not None else "-"])
    print(f"{args.nproc} ranks, {os.path.relpath(args.config, ROOT)}, {args.iters} iterations; "
          f"t = {1e3 * t:.1f} ms per iteration, a save delta = {1e3 * delta:.0f} ms (medians)")
    print(f"a restart R = {restart:.2f} s (median of the runs' own, in the last column)")
    print("Young's save_interval S* = sqrt(2 delta K t) / t: " +
          ", ".join(f"K {k}: {math.sqrt(2 * delta * k * t) / t:.0f}" for k in ks))
    if args.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---:|" * len(head))
        for row in table:
            print("| " + " | ".join(row) + " |")
    else:
        widths = [max(len(h), *(len(row[i]) for row in table)) for i, h in enumerate(head)]
        print("  ".join(h.rjust(w) for h, w in zip(head, widths)))
        for row in table:
            print("  ".join(c.rjust(w) for c, w in zip(row, widths)))


main()
