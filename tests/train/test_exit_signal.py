#!/usr/bin/python3
"""training.exit_signal_handler (issue 21, point 2): SIGTERM at a random moment to
`trident train --nproc 2` (the launcher passes it to the ranks): every rank finishes the
iteration in progress, the job saves a checkpoint there and exits 0; resumed, it trains to the
end with per-iteration losses bit-identical to an uninterrupted run. Without the handler, the
same SIGTERM stops the job with a non-zero status and saves nothing.
training.exit_duration_in_mins (Megatron's --exit-duration-in-mins): a limit already passed after
the first iteration (1e-9 minutes) stops both ranks there with a checkpoint, exit 0; resumed with
a limit never reached, the run ends with the uninterrupted run's losses bit for bit.
usage: test_exit_signal.py TRIDENT WORKDIR"""
import os
import random
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402
from trident_test import check  # noqa: E402

trident, work = sys.argv[1], tt.fresh_dir(sys.argv[2])
prefix = tt.make_corpus(trident, work, 41, ["term", "signal", "save", "exit"], 300, 3, 30)
ITERS = 500  # the signal comes after 10-200 of them: 300 to spare
config = tt.write_config(os.path.join(work, "small.yaml"),
    model=dict(num_layers=2, hidden_size=32, num_attention_heads=2, seq_length=16),
    training=dict(micro_batch_size=2, global_batch_size=4, train_iters=ITERS, lr=1.0e-3),
    data=dict(data_path=prefix, split="100,0,0"))
full = os.path.join(work, "full")
r = tt.run(tt.train_cmd(trident, config, full, world=2, flags=["--quiet"]), timeout=300)
check("uninterrupted run", r.returncode == 0, r.stderr[-500:])
want = tt.losses(full)


def interrupted(name, handler, at):
    run_dir, ck = os.path.join(work, name), os.path.join(work, name + "-ck")
    sets = [f"checkpoint.save={ck}", f"training.exit_signal_handler={'true' if handler else 'false'}"]
    p = subprocess.Popen(tt.train_cmd(trident, config, run_dir, world=2, sets=sets, flags=["--quiet"]),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    metrics = os.path.join(run_dir, "metrics.jsonl")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and p.poll() is None:
        if os.path.exists(metrics) and sum(1 for _ in open(metrics)) >= at:
            break
        time.sleep(0.01)
    p.send_signal(signal.SIGTERM)
    out, err = tt.wait_output(p, 120)
    return p.returncode, out, err, run_dir, ck


at = random.Random(5).randint(10, 200)
rc, out, err, run_dir, ck = interrupted("term", True, at)
saved = open(os.path.join(ck, "latest_checkpointed_iteration.txt")).read().strip() \
    if os.path.exists(os.path.join(ck, "latest_checkpointed_iteration.txt")) else None
done = tt.losses(run_dir)
check(f"SIGTERM after ~{at} iterations: exit 0, a checkpoint at the last iteration run ({saved})",
      rc == 0 and saved is not None and int(saved) == len(done) and len(done) < ITERS,
      f"exit {rc}, saved {saved}, {len(done)} iterations: {out[-300:]} {err[-800:]}")
r = tt.run(tt.train_cmd(trident, config, run_dir, world=2, flags=["--quiet"],
                        sets=[f"checkpoint.load={ck}", f"checkpoint.save={ck}"]), timeout=300)
got = tt.losses(run_dir)
check("resumed to the end: losses bit-identical to the uninterrupted run",
      r.returncode == 0 and got == want, f"exit {r.returncode}: {len(got)} vs {len(want)} {r.stderr[-400:]}")
rc, out, err, run_dir, ck = interrupted("term-off", False, at)
check("without the handler: a non-zero exit and no checkpoint",
      rc != 0 and not os.path.exists(os.path.join(ck, "latest_checkpointed_iteration.txt")),
      f"exit {rc}: {err[-400:]}")

dur_dir, dur_ck = os.path.join(work, "duration"), os.path.join(work, "duration-ck")
r = tt.run(tt.train_cmd(trident, config, dur_dir, world=2,
                        sets=[f"checkpoint.save={dur_ck}", "training.exit_duration_in_mins=1e-9"]), timeout=300)
saved = open(os.path.join(dur_ck, "latest_checkpointed_iteration.txt")).read().strip() \
    if os.path.exists(os.path.join(dur_ck, "latest_checkpointed_iteration.txt")) else None
check("exit_duration_in_mins passed: exit 0 after iteration 1, its checkpoint saved, says why",
      r.returncode == 0 and saved == "1" and len(tt.losses(dur_dir)) == 1 and
      "training.exit_duration_in_mins 1e-09" in r.stdout and "stopped after iteration 1 (checkpoint saved)" in r.stdout,
      f"exit {r.returncode}, saved {saved}: {r.stdout[-400:]} {r.stderr[-400:]}")
r = tt.run(tt.train_cmd(trident, config, dur_dir, world=2, flags=["--quiet"],
                        sets=[f"checkpoint.load={dur_ck}", f"checkpoint.save={dur_ck}",
                              "training.exit_duration_in_mins=1e6"]), timeout=300)
check("resumed with a limit never reached: to the end, losses bit-identical to the uninterrupted run",
      r.returncode == 0 and tt.losses(dur_dir) == want, f"exit {r.returncode}: {r.stderr[-400:]}")
tt.finish()
