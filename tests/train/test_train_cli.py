#!/usr/bin/python3
"""`trident train` end to end on a small generated corpus:
  - metrics.jsonl has one object per iteration with the documented fields, config.yaml exists;
  - determinism: two runs give bit-identical losses;
  - a resolved config.yaml loads back and trains to the same losses;
  - TRIDENT_LOG_LEVEL selects the log messages printed (also in the ranks of --nproc), else
    the config's logging.level;
  - bad usage / config / data give exit code 2 and a message.
usage: test_train_cli.py TRIDENT WORKDIR"""
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402
from trident_test import check, losses  # noqa: E402

trident, work = sys.argv[1], tt.fresh_dir(sys.argv[2])
prefix = tt.make_corpus(trident, work, 3, ["alpha", "beta", "gamma", "delta", "pipe", "rank"],
                        200, 3, 40)
config = tt.write_config(os.path.join(work, "small.yaml"),
    model=dict(num_layers=2, hidden_size=32, num_attention_heads=2, seq_length=16),
    training=dict(micro_batch_size=2, global_batch_size=4, train_iters=6, lr=1.0e-3,
                  eval_interval=3, eval_iters=2),
    data=dict(data_path=prefix, split="90,10,0"))


def train(run_dir, *extra, cfg=config, env=None):
    return tt.run(tt.train_cmd(trident, cfg, run_dir, flags=extra), timeout=300,
                  env=dict(os.environ, **env) if env else None)


r1 = train(os.path.join(work, "run1"))
check("train exits 0", r1.returncode == 0, r1.stderr[-2000:])
m1 = tt.metrics(os.path.join(work, "run1"))
check("one metrics line per iteration", [m["iteration"] for m in m1] == [1, 2, 3, 4, 5, 6])
fields = {"iteration", "loss", "lr", "grad_norm", "ms_per_iter", "tokens_per_s"}
check("metrics fields", all(fields <= set(m) for m in m1), str(m1[0]))
check("val_loss at eval_interval", "val_loss" in m1[2] and "val_loss" in m1[5] and "val_loss" not in m1[0])
check("per-iteration lines on stdout", r1.stdout.count("iter ") >= 6, r1.stdout[-500:])
check("config.yaml written", os.path.exists(os.path.join(work, "run1", "config.yaml")))
r2 = train(os.path.join(work, "run2"))
m2 = tt.metrics(os.path.join(work, "run2"))
check("determinism: bit-identical losses", [m["loss"] for m in m1] == [m["loss"] for m in m2],
      f"{[m['loss'] for m in m1]} vs {[m['loss'] for m in m2]}")
r3 = train(os.path.join(work, "run3"), cfg=os.path.join(work, "run1", "config.yaml"))
m3 = tt.metrics(os.path.join(work, "run3")) if r3.returncode == 0 else []
check("resolved config.yaml trains the same", [m["loss"] for m in m3] == [m["loss"] for m in m1], r3.stderr[-500:])
r4 = train(os.path.join(work, "run4"), "--set", "training.train_iters=2", "--set", "training.lr=2e-3")
check("--set overrides", r4.returncode == 0 and len(losses(os.path.join(work, "run4"))) == 2, r4.stderr[-500:])

# TRIDENT_LOG_LEVEL: debug messages only when asked for (and in the ranks the launcher starts),
# info messages dropped at "warning", an unknown level is bad usage
check("no debug messages by default", "trident debug" not in r1.stderr, r1.stderr[-500:])
one = ("--set", "training.train_iters=1")
r = train(os.path.join(work, "debug"), *one, env={"TRIDENT_LOG_LEVEL": "debug"})
check("TRIDENT_LOG_LEVEL=debug: the gradient buckets' debug line",
      r.returncode == 0 and "trident debug: dp: " in r.stderr and "gradient elements in" in r.stderr,
      f"rc={r.returncode} stderr={r.stderr[-500:]}")
r = train(os.path.join(work, "debug2"), "--nproc", "2", *one, env={"TRIDENT_LOG_LEVEL": "debug"})
check("TRIDENT_LOG_LEVEL=debug reaches the ranks of --nproc 2",
      r.returncode == 0 and "trident debug [rank 1]: dp: " in r.stderr,
      f"rc={r.returncode} stderr={r.stderr[-500:]}")
zero1 = ("--set", "parallel.use_distributed_optimizer=true")
r = train(os.path.join(work, "info"), *one, *zero1)
check("an info message by default (ZeRO-1 at D = 1)", r.returncode == 0 and "trident info: dp: " in r.stderr,
      f"rc={r.returncode} stderr={r.stderr[-500:]}")
r = train(os.path.join(work, "warning"), *one, *zero1, env={"TRIDENT_LOG_LEVEL": "warning"})
check("TRIDENT_LOG_LEVEL=warning drops it", r.returncode == 0 and "trident info" not in r.stderr,
      f"rc={r.returncode} stderr={r.stderr[-500:]}")
r = train(os.path.join(work, "cfglevel"), *one, *zero1, "--set", "logging.level=warning")
check("logging.level=warning in the config drops it too",
      r.returncode == 0 and "trident info" not in r.stderr, f"rc={r.returncode} stderr={r.stderr[-500:]}")
r = train(os.path.join(work, "envwins"), *one, "--set", "logging.level=error",
          env={"TRIDENT_LOG_LEVEL": "debug"})
check("TRIDENT_LOG_LEVEL wins over logging.level", r.returncode == 0 and "trident debug: dp: " in r.stderr,
      f"rc={r.returncode} stderr={r.stderr[-500:]}")
r = train(os.path.join(work, "bad"), env={"TRIDENT_LOG_LEVEL": "loud"})
check("TRIDENT_LOG_LEVEL=loud: exit 2 naming the levels", r.returncode == 2 and
      "TRIDENT_LOG_LEVEL: log level 'loud': expected debug, info, warning or error" in r.stderr,
      f"rc={r.returncode} stderr={r.stderr[-500:]}")

# bad input: each exits 2 with a message naming the problem
bad = [
    (["--set", "model.hidden_size=33"], "num_attention_heads"),
    (["--set", "model.nope=1"], "nope"),
    (["--set", "data.data_path=" + os.path.join(work, "missing")], "missing"),
    (["--bogus-flag"], "bogus"),
    (["--set", "training.precision=fp16", "--set", "training.device=cuda"], "fp16 runs on the CPU"),
    (["--set", "training.device=gpu"], "device"),
]
for args, needle in bad:
    r = train(os.path.join(work, "bad"), *args)
    check(f"bad input {args}: exit 2 naming '{needle}'", r.returncode == 2 and needle in r.stderr,
          f"rc={r.returncode} stderr={r.stderr.strip()[-300:]}")
r = tt.run([trident, "train"])
check("no config: exit 2", r.returncode == 2 and "no config" in r.stderr)
r = tt.run([trident, "train", os.path.join(work, "nonexistent.yaml")])
check("missing config file: exit 2", r.returncode == 2 and "nonexistent.yaml" in r.stderr, r.stderr)
r = tt.run([trident, "train", "--help"])
check("train --help", r.returncode == 0 and "--set" in r.stdout and "--run-dir" in r.stdout)
r = tt.run([trident, "--help"])
check("trident --help", r.returncode == 0 and "preprocess" in r.stdout)
# a corrupt data file: truncated .bin
shutil.copy(prefix + ".idx", os.path.join(work, "trunc.idx"))
with open(prefix + ".bin", "rb") as f:
    data = f.read()
with open(os.path.join(work, "trunc.bin"), "wb") as f:
    f.write(data[: len(data) // 2])
r = train(os.path.join(work, "bad"), "--set", "data.data_path=" + os.path.join(work, "trunc"))
check("truncated data file: exit 2", r.returncode == 2 and "trunc" in r.stderr, r.stderr.strip()[-300:])
tt.finish()
