#!/usr/bin/python3
"""No silent loss of a run's outputs, and errors known at start-up reported at start-up
(issue 23, points 5, 6, 7, 8, 9, 10):
  - a full disk (RUN_DIR on a 16 KiB tmpfs in a user + mount namespace of its own): the run
    exits 1 naming metrics.jsonl and the cause, and leaves no summary.json;
  - resuming after a line of metrics.jsonl was cut short drops that line: every line whole,
    iterations 1..N once each;
  - resuming with another seed, split or dataset is refused naming each difference (the run
    would skip or repeat samples); another global batch size goes on from the samples the
    checkpoint's run consumed;
  - a second job using the same run directory, or the same checkpoint.save, is refused with
    exit 2 naming the first job's pid, while the first goes on;
  - checkpoint.save with iter_* checkpoints but no tracker is refused naming them; iter_*.tmp
    leftovers of failed saves are removed by the next save; exit_interval without
    checkpoint.save warns;
  - eval_interval with an empty validation split, and checkpoint.save naming a regular file,
    exit 2 before the first iteration; data.split "100" (one weight) trains;
  - a model whose memory estimate exceeds what the host has available is refused (exit 2)
    before allocating, with the estimate and the limit (point 11).
usage: test_outputs.py TRIDENT WORKDIR"""
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402
from trident_test import check  # noqa: E402

trident, work = os.path.abspath(sys.argv[1]), tt.fresh_dir(os.path.abspath(sys.argv[2]))
prefix = tt.make_corpus(trident, work, 21, ["disk", "full", "lock", "tracker", "split"], 200, 3, 30)
config = tt.write_config(os.path.join(work, "small.yaml"),
    model=dict(num_layers=1, hidden_size=32, num_attention_heads=2, seq_length=16),
    training=dict(micro_batch_size=2, global_batch_size=2, train_iters=6, lr=1.0e-3),
    data=dict(data_path=prefix, split="90,10,0"))


def train(run_dir, *sets, timeout=120):
    return tt.run(tt.train_cmd(trident, config, run_dir, sets=sets, flags=["--quiet"]),
                  timeout=timeout)


def lines(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl"), "rb") as f:
        return f.read().decode().split("\n")


# 5. a full disk
mnt = tt.fresh_dir(os.path.join(work, "small-disk"))
script = (f"mount -t tmpfs -o size=16k tmpfs {mnt} && exec " +
          " ".join(tt.train_cmd(trident, config, os.path.join(mnt, "run"),
                                sets=["training.train_iters=3000"], flags=["--quiet"])))
r = tt.run(["unshare", "-rm", "sh", "-c", script], timeout=300)
check("full disk: exit 1 naming metrics.jsonl and 'No space left on device'",
      r.returncode == 1 and "metrics.jsonl" in r.stderr and "No space left on device" in r.stderr,
      f"exit {r.returncode}: {r.stderr[-800:]}")
check("full disk: no summary.json claiming a finished run", "summary.json" not in r.stdout,
      r.stdout[-300:])

# 6. resume after a line cut short: saved at 3, killed while writing line 4 before its
# iteration number was out (the old code kept such a line and appended line 4 to it)
ck = os.path.join(work, "ck")
run6 = os.path.join(work, "run6")
r = train(run6, f"checkpoint.save={ck}", "training.exit_interval=3")
with open(os.path.join(run6, "metrics.jsonl"), "ab") as f:
    f.write(b'{"itera')
r = train(run6, f"checkpoint.load={ck}", f"checkpoint.save={ck}")
got = lines(run6)
try:
    whole = [json.loads(x)["iteration"] for x in got if x]
except ValueError:
    whole = None
check("resume after a cut line: every line whole, iterations 1..6 once each",
      r.returncode == 0 and got[-1] == "" and whole == [1, 2, 3, 4, 5, 6],
      f"exit {r.returncode} {got} {r.stderr[-500:]}")

# 8. resuming with other data than the checkpoint's run: refused, every difference named
other = tt.make_corpus(trident, tt.fresh_dir(os.path.join(work, "other")), 22, ["other", "data"],
                       150, 3, 30)
for what, sets, needles in [
        ("another seed and split", ["training.seed=7", "data.split=80,20,0"],
         ["training.seed 7", "data.split 80,20,0 (the checkpoint's run: 90,10,0)"]),
        ("another dataset", [f"data.data_path={other}"], ["data.data_path", "tokens in"])]:
    r = train(os.path.join(work, "run8"), f"checkpoint.load={ck}", "training.train_iters=8", *sets)
    check(f"resume with {what}: exit 2 naming it",
          r.returncode == 2 and "skip or repeat samples" in r.stderr and all(n in r.stderr for n in needles),
          f"exit {r.returncode}: {r.stderr[-600:]}")

# 8 (and issue 21, point 4). another global batch size goes on from the consumed samples
run8b = os.path.join(work, "run8b")
shutil.copytree(run6, run8b)
r = train(run8b, f"checkpoint.load={ck}", "training.train_iters=9", "training.global_batch_size=4",
          "checkpoint.save=" + os.path.join(work, "ck8b"))
consumed = [m.get("consumed_samples") for m in tt.metrics(run8b)]
check("resume at 6 (12 samples consumed at 2 per batch) with global batch 4: consumed 16, 20, 24",
      r.returncode == 0 and consumed == [2, 4, 6, 8, 10, 12, 16, 20, 24], f"exit {r.returncode} {consumed} {r.stderr[-300:]}")

# 7. two jobs, one run directory / one checkpoint folder
run7, ck7 = os.path.join(work, "run7"), os.path.join(work, "ck7")
first = subprocess.Popen(tt.train_cmd(trident, config, run7, flags=["--quiet"],
                                      sets=["training.train_iters=1000000", f"checkpoint.save={ck7}",
                                            "checkpoint.save_interval=1000000"]),
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
deadline = time.monotonic() + 60
while time.monotonic() < deadline and not os.path.exists(os.path.join(run7, "metrics.jsonl")):
    time.sleep(0.05)
r = train(run7, "training.train_iters=2")
check("a second job in the same run directory: exit 2 naming the first's pid",
      r.returncode == 2 and "in use by another trident job" in r.stderr and f"pid {first.pid}" in r.stderr,
      f"exit {r.returncode}: {r.stderr[-500:]}")
r = train(os.path.join(work, "run7b"), "training.train_iters=2", f"checkpoint.save={ck7}")
check("a second job saving to the same checkpoint folder: exit 2 naming checkpoint.save",
      r.returncode == 2 and "checkpoint.save" in r.stderr and f"pid {first.pid}" in r.stderr,
      f"exit {r.returncode}: {r.stderr[-500:]}")
check("the first job is still running", first.poll() is None)
first.kill()
first.wait()
r = train(run7, "training.train_iters=2")
check("once it has ended the run directory is free again", r.returncode == 0, r.stderr[-500:])

# 9. checkpoints without a tracker; leftovers; exit_interval without a save folder
orphan = os.path.join(work, "orphan")
shutil.copytree(ck, orphan)
os.remove(os.path.join(orphan, "latest_checkpointed_iteration.txt"))
r = train(os.path.join(work, "run9"), f"checkpoint.save={orphan}")
check("iter_* without a tracker: exit 2 naming them",
      r.returncode == 2 and "iter_000000" in r.stderr and "latest_checkpointed_iteration.txt" in r.stderr,
      f"exit {r.returncode}: {r.stderr[-500:]}")
left = os.path.join(ck, "iter_0000099.tmp")
os.makedirs(left)
open(os.path.join(left, "piece"), "w").close()
r = train(os.path.join(work, "run9b"), f"checkpoint.load={ck}", f"checkpoint.save={ck}",
          "training.train_iters=7")
check("a save removes iter_*.tmp leftovers", r.returncode == 0 and not os.path.exists(left),
      f"exit {r.returncode} {os.listdir(ck)} {r.stderr[-300:]}")
r = train(os.path.join(work, "run9c"), "training.exit_interval=2")
check("exit_interval without checkpoint.save: a warning", r.returncode == 0 and
      "nothing is saved" in r.stderr, r.stderr[-500:])

# 10. start-up errors
r = train(os.path.join(work, "run10"), "data.split=100,0,0", "training.eval_interval=2")
check("eval_interval with an empty validation split: exit 2 naming data.split, no iteration run",
      r.returncode == 2 and "data.split" in r.stderr and "validation split" in r.stderr and
      not lines(os.path.join(work, "run10"))[0] if os.path.exists(os.path.join(work, "run10", "metrics.jsonl"))
      else r.returncode == 2 and "data.split" in r.stderr, f"exit {r.returncode}: {r.stderr[-500:]}")
regular = tt.write(os.path.join(work, "a-file"), "not a folder")
r = train(os.path.join(work, "run10b"), f"checkpoint.save={regular}")
check("checkpoint.save naming a regular file: exit 2 at start-up, no iteration run",
      r.returncode == 2 and "checkpoint.save" in r.stderr and
      not os.path.exists(os.path.join(work, "run10b", "metrics.jsonl")), f"exit {r.returncode}: {r.stderr[-500:]}")
ro = tt.fresh_dir(os.path.join(work, "read-only"))
script = (f"mount --bind {ro} {ro} && mount -o remount,ro,bind {ro} && exec " +
          " ".join(tt.train_cmd(trident, config, os.path.join(work, "run10d"), flags=["--quiet"],
                                sets=[f"checkpoint.save={ro}"])))
r = tt.run(["unshare", "-rm", "sh", "-c", script], timeout=120)
check("checkpoint.save on a read-only filesystem: exit 2 at start-up naming it, no iteration run",
      r.returncode == 2 and "checkpoint.save" in r.stderr and "Read-only file system" in r.stderr and
      not os.path.exists(os.path.join(work, "run10d", "metrics.jsonl")), f"exit {r.returncode}: {r.stderr[-500:]}")
r = train(os.path.join(work, "run10c"), "data.split=100")
check('data.split "100" (one weight) trains', r.returncode == 0, r.stderr[-500:])
# 11. a model that cannot fit is refused before anything is allocated
t0 = time.monotonic()
r = train(os.path.join(work, "run11"), "model.num_layers=64", "model.hidden_size=65536",
          "model.num_attention_heads=64")
check(f"a 3.3T-parameter model: exit 2 in {time.monotonic() - t0:.1f} s naming the estimate and what "
      "is available", r.returncode == 2 and "needs about" in r.stderr and "GiB is available" in r.stderr
      and time.monotonic() - t0 < 30, f"exit {r.returncode}: {r.stderr[-500:]}")
tt.finish()
