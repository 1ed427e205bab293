#!/usr/bin/python3
"""logging.tensorboard_dir: the event file of a run, read back by the `tensorboard` package
(installed from PyPI into its own virtual environment), holds every scalar of metrics.jsonl
at its iteration (float32 of the same value, to an ulp); the file of a run killed with SIGKILL in the
middle still reads, record by record, to its end with every CRC right (records are written
whole), and holds the iterations metrics.jsonl had when it was killed.
usage: test_tensorboard.py TRIDENT WORKDIR VENV"""
import glob
import json
import os
import signal
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402
from trident_test import check  # noqa: E402

trident, work, venv = sys.argv[1], tt.fresh_dir(sys.argv[2]), sys.argv[3]
py = tt.venv_python(venv, ["tensorboard"], "tensorboard")
prefix = tt.make_corpus(trident, work, 5, ["board", "scalar", "event", "record", "loss"], 200, 3, 40)
config = tt.write_config(os.path.join(work, "small.yaml"),
    model=dict(num_layers=2, hidden_size=32, num_attention_heads=2, seq_length=16),
    training=dict(micro_batch_size=2, global_batch_size=4, train_iters=6, lr=1.0e-3,
                  eval_interval=3, eval_iters=2),
    data=dict(data_path=prefix, split="90,10,0"),
    logging=dict(peak_gflops=1000))

# TensorBoard's own reader: {tag: [(step, value)]} of every event file in a folder.
READER = r"""
import json, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
ea = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0})
ea.Reload()
print(json.dumps({t: [(e.step, e.value) for e in ea.Scalars(t)] for t in ea.Tags()["scalars"]}))
"""


def read_board(folder):
    r = tt.run([py, "-c", READER, folder], timeout=120)
    if r.returncode:
        check("tensorboard reads the event file", False, r.stderr[-2000:])
        tt.finish()
    return json.loads(r.stdout)


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c ^= b
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    return c ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(path):
    """(whole records, bytes after the last one, first problem or '') of a TFRecord file."""
    with open(path, "rb") as f:
        blob = f.read()
    pos, n = 0, 0
    while pos < len(blob):
        if len(blob) - pos < 12:
            return n, len(blob) - pos, "a truncated record header"
        length, lcrc = struct.unpack_from("<QI", blob, pos)
        if lcrc != masked(blob[pos:pos + 8]):
            return n, len(blob) - pos, f"record {n}: length CRC wrong"
        data = blob[pos + 12:pos + 12 + length]
        if len(blob) < pos + 16 + length:
            return n, len(blob) - pos, f"record {n}: truncated"
        (dcrc,) = struct.unpack_from("<I", blob, pos + 12 + length)
        if dcrc != masked(data):
            return n, len(blob) - pos, f"record {n}: data CRC wrong"
        pos += 16 + length
        n += 1
    return n, 0, ""


check("CRC-32C of '123456789' is 0xE3069283", crc32c(b"123456789") == 0xE3069283)

# 1. every scalar of a finished run (2 ranks: rank 0 alone writes)
run_dir = os.path.join(work, "run")
tb = os.path.join(work, "tb")
r = tt.run(tt.train_cmd(trident, config, run_dir, world=2, sets=[f"logging.tensorboard_dir={tb}"]),
           timeout=300)
check("train with logging.tensorboard_dir exits 0", r.returncode == 0, r.stderr[-2000:])
files = glob.glob(os.path.join(tb, "events.out.tfevents.*"))
check("one event file (rank 0 writes)", len(files) == 1, str(files))
m = tt.metrics(run_dir)
board = read_board(tb)
tags = {"lm loss": "loss", "learning-rate": "lr", "grad-norm": "grad_norm",
        "iteration-time-ms": "ms_per_iter", "tokens-per-second": "tokens_per_s",
        "gflops-per-rank": "gflops", "peak-memory-mb": "peak_rss_mb", "mfu": "mfu",
        "lm loss validation": "val_loss", "batch-size": "global_batch_size"}
check("the scalar tags", set(board) == set(tags), f"{sorted(board)}")
f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]  # noqa: E731
for tag, key in tags.items():
    want = [(x["iteration"], f32(x[key])) for x in m if key in x]
    got = [tuple(e) for e in board.get(tag, [])]
    # float32 of the value; metrics.jsonl's 9 digits of the double may round to the next float
    same = len(got) == len(want) and all(
        gs == ws and abs(gv - wv) <= 2.0 ** -22 * abs(wv) for (gs, gv), (ws, wv) in zip(got, want))
    check(f"'{tag}' = metrics.jsonl's {key} at every iteration ({len(want)} values, to a float "
          "ulp)", want and same, f"{got} vs {want}")
n, rest, problem = records(files[0])
check("the file is whole TFRecords with right CRCs",
      not problem and rest == 0 and n == 1 + sum(len(v) for v in board.values()),
      f"{n} records, {rest} bytes left: {problem}")

# 2. killed in the middle: SIGKILL to the whole job once a few iterations are out
kill_dir = os.path.join(work, "killed")
tb2 = os.path.join(work, "tb-killed")
cmd = tt.train_cmd(trident, config, kill_dir, world=2,
                   sets=[f"logging.tensorboard_dir={tb2}", "training.train_iters=100000",
                         "training.eval_interval=5"])
p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
metrics_path = os.path.join(kill_dir, "metrics.jsonl")
deadline = time.monotonic() + 120
while time.monotonic() < deadline and p.poll() is None:
    if os.path.exists(metrics_path) and sum(1 for _ in open(metrics_path)) >= 20:
        break
    time.sleep(0.05)
os.killpg(p.pid, signal.SIGKILL)
p.wait()
with open(metrics_path) as f:
    done = [json.loads(line)["iteration"] for line in f if line.endswith("\n")]
files = glob.glob(os.path.join(tb2, "events.out.tfevents.*"))
check("killed run: an event file", len(files) == 1, str(files))
n, rest, problem = records(files[0]) if files else (0, 0, "no file")
check("killed run: whole records with right CRCs to the end", not problem and rest == 0,
      f"{n} records, {rest} bytes after them: {problem}")
board = read_board(tb2)
steps = [s for s, _ in board.get("lm loss", [])]
check("killed run: tensorboard reads a loss for every iteration metrics.jsonl had",
      len(done) >= 20 and steps[:len(done)] == done, f"steps {steps[:5]}..{steps[-3:]}, "
      f"metrics {len(done)} iterations")
tt.finish()
