#!/usr/bin/env python3
"""`trident launch` and `trident topo` end to end.

usage: test_launch_cli.py TRIDENT

Each check runs the real binary. Processes the ranks start carry a marker unique to this
run (a `sleep` with an unusual duration) so `pgrep -f` can tell whether any survived.
"""
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402
from trident_test import expect, failures  # noqa: E402

TRIDENT = os.path.abspath(sys.argv[1])
BOUND_S = 10.0  # every failure must stop the whole job within this
MARK = f"7{os.getpid() % 100000:05d}3"  # "sleep <MARK>" appears in no other process
CLEAN_ENV = {k: v for k, v in os.environ.items()
             if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                          "MASTER_PORT", "TRIDENT_JOB_TOKEN", "OMP_NUM_THREADS",
                          "OPENBLAS_NUM_THREADS", "OPENBLAS_CORETYPE")}
timings = {}


def run(args, env=None, timeout=30):
    t0 = time.monotonic()
    p = tt.run([TRIDENT] + args, timeout=timeout, env=env if env is not None else CLEAN_ENV)
    return p, time.monotonic() - t0


def survivors():
    p = subprocess.run(["pgrep", "-f", f"sleep {MARK}"], capture_output=True, text=True)
    return p.stdout.split()


def wait_no_survivors(limit_s=2.0):
    t0 = time.monotonic()
    while survivors() and time.monotonic() - t0 < limit_s:
        time.sleep(0.05)
    return survivors()


def launch(script, nproc=4, extra=(), env=None):
    return run(["launch", "--nproc", str(nproc), *extra, "--", "sh", "-c", script], env=env)


def test_environment():
    script = ('echo "ENV $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR '
              '$MASTER_PORT $TRIDENT_JOB_TOKEN $OPENBLAS_NUM_THREADS $OMP_NUM_THREADS '
              '${OPENBLAS_CORETYPE:-unset}"')
    p, _ = launch(script)
    expect(p.returncode == 0, f"env: exit {p.returncode}, stderr {p.stderr!r}")
    rows = {}
    for line in p.stdout.splitlines():
        head, _, rest = line.partition(" ")
        f = rest.split()
        if expect(head.startswith("[r") and f and f[0] == "ENV", f"env: odd line {line!r}"):
            rows[int(head[2:-1])] = f[1:]
    expect(sorted(rows) == [0, 1, 2, 3], f"env: ranks seen {sorted(rows)}")
    threads = max(1, len(os.sched_getaffinity(0)) // 4)
    avx512 = "avx512f" in open("/proc/cpuinfo").read()
    for r, f in rows.items():
        expect(f[0] == str(r) and f[2] == str(r), f"env: rank {r} has RANK/LOCAL_RANK {f[0]}/{f[2]}")
        expect(f[1] == "4" and f[3] == "4", f"env: rank {r} sizes {f[1]}/{f[3]}")
        expect(f[4] == "127.0.0.1", f"env: rank {r} MASTER_ADDR {f[4]}")
        expect(f[5].isdigit() and 0 < int(f[5]) < 65536, f"env: rank {r} MASTER_PORT {f[5]}")
        expect(len(f[6]) >= 16, f"env: rank {r} token {f[6]!r}")
        expect(f[7] == str(threads) and f[8] == str(threads),
               f"env: rank {r} threads {f[7]}/{f[8]}, want {threads}")
        expect(f[9] == ("SkylakeX" if avx512 else "unset"), f"env: rank {r} coretype {f[9]}")
    expect(len({tuple(f[4:7]) for f in rows.values()}) == 1, "env: ranks disagree on master/token")
    # What the user set is kept; the launcher's identity variables replace stale ones.
    env = dict(CLEAN_ENV, OMP_NUM_THREADS="5", OPENBLAS_NUM_THREADS="6", TRIDENT_JOB_TOKEN="tk",
               OPENBLAS_CORETYPE="Haswell", RANK="17", WORLD_SIZE="99")
    p, _ = launch(script, nproc=2, extra=["--master-port", "29777"], env=env)
    lines = sorted(p.stdout.splitlines())
    expect(p.returncode == 0 and len(lines) == 2, f"env kept: {p.returncode} {lines}")
    for r, line in enumerate(lines):
        f = line.split()[2:]
        expect(f[0] == str(r) and f[1] == "2" and f[5] == "29777" and f[6] == "tk" and
               f[7] == "6" and f[8] == "5" and f[9] == "Haswell", f"env kept: {line!r}")


def test_prefix():
    p, _ = launch('echo "out $RANK"; echo "err $RANK" >&2; printf "two\\nlines\\n"; '
                  'printf "no newline $RANK"')
    expect(p.returncode == 0, f"prefix: exit {p.returncode}")
    out, err = p.stdout.splitlines(), p.stderr.splitlines()
    for r in range(4):
        for want in (f"[r{r}] out {r}", f"[r{r}] two", f"[r{r}] lines", f"[r{r}] no newline {r}"):
            expect(want in out, f"prefix: {want!r} missing from stdout {out}")
        expect(f"[r{r}] err {r}" in err, f"prefix: '[r{r}] err {r}' missing from stderr {err}")
    expect(all(l.startswith("[r") for l in out + err), "prefix: an unprefixed line")
    expect(len(out) == 16 and len(err) == 4, f"prefix: {len(out)} stdout / {len(err)} stderr lines")
    # Lines of different ranks never mix: many lines from every rank at once.
    p, _ = launch('i=0; while [ $i -lt 2000 ]; do echo "rank $RANK line $i end"; i=$((i+1)); done')
    out = p.stdout.splitlines()
    good = [l for l in out if l.startswith("[r") and l.endswith(" end")
            and l.split()[0] == f"[r{l.split()[2]}]"]
    expect(len(out) == 8000 and len(good) == 8000, f"prefix: {len(good)}/{len(out)} whole lines")


def test_rank_exits_3():
    p, dt = launch(f'if [ $RANK = 2 ]; then sleep 0.3; exit 3; fi; sleep {MARK}')
    timings["exit 3 -> all stopped"] = dt
    expect(p.returncode == 3, f"exit 3: launcher exit {p.returncode}")
    expect("rank 2 exited with status 3; stopping the other ranks" in p.stderr,
           f"exit 3: message missing: {p.stderr!r}")
    expect(dt < BOUND_S, f"exit 3: took {dt:.1f} s")
    expect(not wait_no_survivors(), "exit 3: processes left")


def test_rank_killed():
    p, dt = launch(f'if [ $RANK = 1 ]; then sleep 0.3; kill -9 $$; fi; sleep {MARK}')
    timings["SIGKILL -> all stopped"] = dt
    expect(p.returncode == 128 + 9, f"sigkill: launcher exit {p.returncode}")
    expect("rank 1 was killed by signal 9 (SIGKILL)" in p.stderr,
           f"sigkill: message missing: {p.stderr!r}")
    expect(dt < BOUND_S, f"sigkill: took {dt:.1f} s")
    expect(not wait_no_survivors(), "sigkill: processes left")


def test_hanging_rank():
    # Rank 0 ignores SIGTERM and hangs; rank 3 fails: SIGKILL after the grace period.
    p, dt = launch(f'if [ $RANK = 3 ]; then sleep 0.3; exit 1; fi; '
                   f'if [ $RANK = 0 ]; then trap "" TERM; fi; sleep {MARK}')
    timings["hang + failure -> all stopped (grace 3 s)"] = dt
    expect(p.returncode == 1, f"hang: launcher exit {p.returncode}")
    expect("rank 3 exited with status 1" in p.stderr, f"hang: message missing: {p.stderr!r}")
    expect("sending SIGKILL" in p.stderr, f"hang: no SIGKILL escalation: {p.stderr!r}")
    expect(dt < BOUND_S, f"hang: took {dt:.1f} s")
    expect(not wait_no_survivors(), "hang: processes left")


def start_and_wait(nproc):
    proc = subprocess.Popen([TRIDENT, "launch", "--nproc", str(nproc), "--", "sh", "-c",
                             f"sleep {MARK}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=CLEAN_ENV)
    t0 = time.monotonic()
    while len(survivors()) < nproc and time.monotonic() - t0 < 10:
        time.sleep(0.05)
    expect(len(survivors()) >= nproc, f"start: only {len(survivors())} ranks came up")
    return proc


def test_sigint():
    proc = start_and_wait(4)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = tt.wait_output(proc, 30)
    dt = time.monotonic() - t0
    timings["SIGINT -> all stopped"] = dt
    expect(proc.returncode == 130, f"sigint: launcher exit {proc.returncode}")
    expect("received SIGINT; stopping the ranks" in err, f"sigint: message missing: {err!r}")
    expect(dt < BOUND_S, f"sigint: took {dt:.1f} s")
    expect(not wait_no_survivors(), "sigint: processes left")


def test_launcher_sigkilled():
    proc = start_and_wait(3)
    t0 = time.monotonic()
    proc.kill()
    proc.communicate(timeout=30)
    left = wait_no_survivors(5.0)
    timings["launcher SIGKILLed -> ranks gone"] = time.monotonic() - t0
    expect(not left, f"launcher killed: processes left {left}")


def test_success_and_not_found():
    p, _ = launch("exit 0")
    expect(p.returncode == 0 and p.stderr == "", f"success: {p.returncode} {p.stderr!r}")
    p, _ = run(["launch", "--nproc", "2", "--", "/nonexistent/trident-test-cmd"])
    expect(p.returncode == 127, f"not found: exit {p.returncode}")
    expect("cannot run '/nonexistent/trident-test-cmd'" in p.stderr,
           f"not found: message {p.stderr!r}")
    # The command may follow the options without "--".
    p, _ = run(["launch", "--nproc=2", "true"])
    expect(p.returncode == 0, f"no --: exit {p.returncode} {p.stderr!r}")


def test_bad_flags():
    cases = [
        (["launch"], "--nproc is required"),
        (["launch", "--nproc", "2"], "no command given"),
        (["launch", "--nproc", "0", "--", "true"], "--nproc needs an integer in [1, 4096], got '0'"),
        (["launch", "--nproc", "x", "--", "true"], "got 'x'"),
        (["launch", "--nproc"], "--nproc needs a value"),
        (["launch", "--bogus", "--", "true"], "unknown option '--bogus'"),
        (["launch", "--nproc", "2", "--nnodes", "2", "--", "true"],
         "--master-addr is required with --nnodes 2"),
        (["launch", "--nproc", "2", "--nnodes", "2", "--node-rank", "2", "--master-addr", "h",
          "--", "true"], "--node-rank 2: expected 0 to 1"),
        (["launch", "--nproc", "2", "--master-port", "70000", "--", "true"],
         "--master-port needs an integer in [1, 65535]"),
        (["launch", "--nproc", "2", "--grace-period", "-1", "--", "true"],
         "--grace-period needs seconds"),
        (["topo"], "--world-size is required"),
        (["topo", "--world-size", "16", "--tp", "x"], "--tp needs an integer >= 1, got 'x'"),
        (["topo", "--world-size", "16", "--pp", "0"], "--pp needs an integer >= 1, got '0'"),
        (["topo", "--world-size", "10", "--tp", "4"],
         "world size 10 is not divisible by tensor parallel size 4 x pipeline parallel size 1"),
        (["topo", "--world-size", "8", "--order", "dp-tp-pp"], "unknown rank order 'dp-tp-pp'"),
        (["topo", "--world-size", "8", "--frobnicate"], "unknown option '--frobnicate'"),
        (["topo", "--world-size", "8", "extra"], "unknown argument 'extra'"),
        (["topo", "--world-size"], "--world-size needs a value"),
        (["topo", "--world-size", "8", "--gpus-per-node", "0"], "--gpus-per-node needs"),
        (["topo", "--world-size", "8", "--json=1"], "--json takes no value"),
    ]
    for args, msg in cases:
        p, _ = run(args)
        expect(p.returncode == 2, f"bad flags {args}: exit {p.returncode}")
        expect(msg in p.stderr, f"bad flags {args}: {msg!r} not in {p.stderr!r}")
    for cmd in ("launch", "topo"):
        p, _ = run([cmd, "--help"])
        expect(p.returncode == 0 and "usage: trident " + cmd in p.stdout, f"{cmd} --help")


def test_topo():
    p, _ = run(["topo", "--world-size", "16", "--tp", "2", "--pp", "4", "--json"])
    expect(p.returncode == 0, f"topo json: exit {p.returncode} {p.stderr!r}")
    d = json.loads(p.stdout)
    expect(d["tp_groups"] == [[2 * i, 2 * i + 1] for i in range(8)], f"tp groups {d['tp_groups']}")
    expect(d["dp_groups"] == [[0, 2], [1, 3], [4, 6], [5, 7], [8, 10], [9, 11], [12, 14], [13, 15]],
           f"dp groups {d['dp_groups']}")
    expect(d["pp_groups"] == [[0, 4, 8, 12], [1, 5, 9, 13], [2, 6, 10, 14], [3, 7, 11, 15]],
           f"pp groups {d['pp_groups']}")
    expect(d["model_parallel_groups"] == [[0, 1, 4, 5, 8, 9, 12, 13], [2, 3, 6, 7, 10, 11, 14, 15]],
           f"mp groups {d['model_parallel_groups']}")
    expect(d["embedding_groups"] == [[0, 12], [1, 13], [2, 14], [3, 15]],
           f"embedding groups {d['embedding_groups']}")
    for key in ("tp_groups", "dp_groups", "pp_groups", "model_parallel_groups",
                "embedding_groups"):
        expect(d[key] == sorted(d[key]), f"{key} not sorted by first rank")
    expect("cp_groups" not in d and "context_parallel_size" not in d, "CP keys without --cp")
    # Context parallelism: CP right after TP (global = tp + cp*TP + dp*TP*CP), its groups and the
    # dp_cp groups where gradients are summed; from a config's parallel.context_parallel_size too
    p, _ = run(["topo", "--world-size", "8", "--tp", "2", "--cp", "2", "--json"])
    d = json.loads(p.stdout)
    expect(p.returncode == 0 and d["context_parallel_size"] == 2 and d["data_parallel_size"] == 2
           and d["cp_groups"] == [[0, 2], [1, 3], [4, 6], [5, 7]]
           and d["dp_cp_groups"] == [[0, 2, 4, 6], [1, 3, 5, 7]]
           and d["dp_groups"] == [[0, 4], [1, 5], [2, 6], [3, 7]], f"topo --cp 2: {p.stdout[:300]}")
    expect("ep_groups" not in d and "expert_model_parallel_size" not in d, "EP keys without --ep")
    # Expert parallelism: dp = edp*EP + ep; ep groups exchange tokens, edp groups hold the same
    # experts
    p, _ = run(["topo", "--world-size", "8", "--tp", "2", "--ep", "2", "--json"])
    d = json.loads(p.stdout)
    expect(p.returncode == 0 and d["expert_model_parallel_size"] == 2
           and d["ep_groups"] == [[0, 2], [1, 3], [4, 6], [5, 7]]
           and d["edp_groups"] == [[0, 4], [1, 5], [2, 6], [3, 7]]
           and d["dp_groups"] == [[0, 2, 4, 6], [1, 3, 5, 7]], f"topo --ep 2: {p.stdout[:300]}")
    p, _ = run(["topo", "--world-size", "8", "--ep", "4", "--pp", "2"])
    expect(p.returncode == 0 and "ep groups (2 of 4 ranks)" in p.stdout
           and "edp groups (8 of 1 rank)" in p.stdout, f"topo --ep 4: {p.stdout[:600]}")
    p, _ = run(["topo", "--world-size", "12", "--tp", "2", "--ep", "4"])
    expect(p.returncode == 2 and "data-parallel size 6 (world 12 / (tp 2 x cp 1 x pp 1)) is not "
           "divisible by expert parallel size 4" in p.stderr, f"topo --ep bad: {p.stderr!r}")
    p, _ = run(["topo", "--world-size", "12", "--tp", "2", "--cp", "4"])
    expect(p.returncode == 2 and "not divisible by tensor parallel size 2 x context parallel size 4"
           in p.stderr, f"topo --cp bad layout: {p.returncode} {p.stderr!r}")
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "cp.yaml")
        with open(path, "w") as f:
            f.write("model: {num_layers: 2, hidden_size: 64, num_attention_heads: 4, seq_length: 32}\n"
                    "training: {micro_batch_size: 1, train_iters: 1, lr: 1.0e-3}\n"
                    "data: {data_path: /tmp/none}\nparallel: {context_parallel_size: 4}\n")
        p, _ = run(["topo", "--config", path, "--world-size", "8"])
        expect(p.returncode == 0 and "world 8 = dp 2 x cp 4 x tp 1 x pp 1" in p.stdout and
               "dp_cp groups (1 of 8 ranks)" in p.stdout, f"topo --config cp: {p.stdout[:300]}")
        ep_path = os.path.join(tmp, "ep.yaml")  # parallel.expert_model_parallel_size too
        with open(ep_path, "w") as f:
            f.write("model: {num_layers: 2, hidden_size: 64, num_attention_heads: 4, seq_length: 32,"
                    " num_experts: 4}\ntraining: {micro_batch_size: 1, train_iters: 1, lr: 1.0e-3}\n"
                    "data: {data_path: /tmp/none}\nparallel: {expert_model_parallel_size: 2}\n")
        p, _ = run(["topo", "--config", ep_path, "--world-size", "4"])
        expect(p.returncode == 0 and "ep groups (2 of 2 ranks):\n  [0,1] [2,3]" in p.stdout and
               "edp groups (2 of 2 ranks):\n  [0,2] [1,3]" in p.stdout,
               f"topo --config ep: {p.stdout[-300:]}")
        p, _ = run(["plan", path, "--world-size", "8", "--json", "--set",
                    "cluster.preset=cpu-host"])  # the planner models CP
        d = json.loads(p.stdout) if p.returncode == 0 else {}
        expect(d.get("layout", {}).get("cp") == 4 and d["layout"]["dp"] == 2,
               f"plan with CP: {p.returncode} {p.stderr!r}")
    # Other order, node placement, the equals form.
    p, _ = run(["topo", "--world-size=16", "--tp=2", "--pp=4", "--order=tp-pp-dp",
                "--gpus-per-node=4", "--json"])
    d = json.loads(p.stdout)
    expect(d["pp_groups"][0] == [0, 2, 4, 6] and d["dp_groups"][0] == [0, 8],
           f"tp-pp-dp: {d['pp_groups'][0]} {d['dp_groups'][0]}")
    expect(d["num_nodes"] == 4 and d["groups_crossing_nodes"]["tp"] == 0 and
           d["groups_crossing_nodes"]["dp"] == 8, f"nodes: {d.get('groups_crossing_nodes')}")
    # A TP group across nodes is warned about; the human table shows nodes.
    p, _ = run(["topo", "--world-size", "16", "--tp", "4", "--gpus-per-node", "2"])
    expect(p.returncode == 0 and "tensor-parallel groups span more than one node" in p.stderr,
           f"tp warning: {p.stderr!r}")
    expect("rank  node" in p.stdout and "[0,1,2,3]*" in p.stdout, f"human table: {p.stdout[:400]}")
    # Bloom-176B, and a world of 100,000 ranks.
    p, dt = run(["topo", "--world-size", "384", "--tp", "4", "--pp", "12", "--json"])
    d = json.loads(p.stdout)
    expect(len(d["tp_groups"]) == 96 and len(d["dp_groups"]) == 48 and len(d["pp_groups"]) == 32,
           "bloom group counts")
    expect(all(e == [g[0], g[-1]] for e, g in zip(d["embedding_groups"], d["pp_groups"])),
           "bloom embedding groups")
    p, dt = run(["topo", "--world-size", "100000", "--tp", "8", "--pp", "25", "--json"])
    timings["topo --json W=100000 (process)"] = dt
    d = json.loads(p.stdout)
    expect(sum(len(g) for g in d["tp_groups"]) == 100000 and len(d["dp_groups"]) == 200,
           "W=100000 groups")


def test_topo_config():
    # --config: sizes from the YAML parallel section (the loader validates the whole file).
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "c.yaml")
        with open(path, "w") as f:
            f.write("model:\n  num_layers: 2\n  hidden_size: 8\n  num_attention_heads: 2\n"
                    "  seq_length: 8\nparallel:\n  tensor_model_parallel_size: 2\n"
                    "  pipeline_model_parallel_size: 2\n  order: tp-pp-dp\ntraining:\n"
                    "  micro_batch_size: 1\n  train_iters: 1\n  lr: 0.001\n"
                    "data:\n  data_path: /nonexistent\n")
        p, _ = run(["topo", "--config", path, "--world-size", "8", "--json"])
        expect(p.returncode == 0, f"topo --config: exit {p.returncode} {p.stderr!r}")
        if p.returncode == 0:
            d = json.loads(p.stdout)
            expect(d["tensor_model_parallel_size"] == 2 and d["pipeline_model_parallel_size"] == 2
                   and d["order"] == "tp-pp-dp" and d["pp_groups"][0] == [0, 2],
                   f"topo --config: {d['order']} {d['pp_groups'][0]}")
        p, _ = run(["topo", "--config", path, "--world-size", "8", "--tp", "4", "--json"])
        expect(p.returncode == 0 and json.loads(p.stdout)["tensor_model_parallel_size"] == 4,
               "topo --config: --tp overrides the file")
        p, _ = run(["topo", "--config", path, "--world-size", "6"])
        expect(p.returncode == 2 and f"{path}:7:3: world size 6 is not divisible" in p.stderr,
               f"topo --config bad layout: {p.returncode} {p.stderr!r}")
        p, _ = run(["topo", "--config", os.path.join(tmp, "missing.yaml"), "--world-size", "8"])
        expect(p.returncode == 2 and "missing.yaml" in p.stderr,
               f"topo --config missing: {p.returncode} {p.stderr!r}")


def main():
    tests = [test_environment, test_prefix, test_rank_exits_3, test_rank_killed,
             test_hanging_rank, test_sigint, test_launcher_sigkilled, test_success_and_not_found,
             test_bad_flags, test_topo, test_topo_config]
    t0 = time.monotonic()
    for t in tests:
        before = len(failures)
        t()
        print(f"{'ok  ' if len(failures) == before else 'FAIL'} {t.__name__}", flush=True)
    for k, v in timings.items():
        print(f"time: {k}: {v:.2f} s")
    print(f"total {time.monotonic() - t0:.1f} s")
    for pid in survivors():  # never leave anything behind (by pid; the marker is ours)
        try:
            os.kill(int(pid), signal.SIGKILL)
        except OSError:
            pass
    tt.finish()


if __name__ == "__main__":
    main()
