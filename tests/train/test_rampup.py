#!/usr/bin/python3
"""Batch-size ramp-up and sample-based training (training.rampup_batch_size, train_samples,
lr_*_samples), as Megatron-LM computes them.

1. The schedule: for Bloom-176B's numbers (--rampup-batch-size 192 16 9765625, 220M samples),
   Megatron's GPT-3 175B example and two small odd ones, rampup_probe's iteration count, batch
   of every iteration and LR equal a transcription of Megatron's Python below
   (RampupBatchsizeNumMicroBatchesCalculator.update, training.py's update_train_iters,
   OptimizerParamScheduler.get_lr stepped by each successful iteration's batch). trident's LR
   of iteration n is the scheduler's after step n: the value Megatron logs as the iteration's
   learning-rate (its optimizer applies the one before the step).
2. A ramp-up run (global batch 2, 2, 2, 4, 4, 6, then 8) in DP2, TP2, PP2 (1F1B) and PP2
   interleaved, and D2xT2xP2 (release build), gives the single process's loss at every
   iteration within 1e-5; metrics.jsonl's global_batch_size, consumed_samples and lr are the
   transcription's; summary.json's tokens_per_s is the median of the iterations' own rates.
3. Stopped in the middle of the ramp (exit_interval 5) and resumed, the run continues bit for
   bit; checkpoints were saved where the batch grows (Megatron's rule); fp16 (its first steps
   skipped for overflow, so the skipped samples are not iterations x the global batch: the
   manifest's skipped_samples) as well.
4. Start or increment not a multiple of micro_batch_size x DP: exit 2 naming the key.
5. `trident plan` on Bloom with its ramp-up plans the final batch and says so.
usage: test_rampup.py TRIDENT RAMPUP_PROBE WORKDIR [--quick]"""
import json
import math
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402
from trident_test import check  # noqa: E402

trident, probe, work = sys.argv[1], sys.argv[2], sys.argv[3]
quick = "--quick" in sys.argv
root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
work = tt.fresh_dir(work)


# ---- Megatron-LM's formulas, transcribed (megatron/core/num_microbatches_calculator.py,
# megatron/training/training.py, megatron/core/optimizer_param_scheduler.py) ----

class Rampup:
    """RampupBatchsizeNumMicroBatchesCalculator's current_global_batch_size."""

    def __init__(self, global_batch_size, start, increment, samples):
        self.g, self.start, self.incr, self.samples = global_batch_size, start, increment, samples
        if samples is not None:
            self.per_increment = samples / ((global_batch_size - start) // increment)

    def batch(self, consumed):
        if self.samples is None:
            return self.g
        if consumed > self.samples:
            return self.g
        return self.start + int(consumed / self.per_increment) * self.incr


def train_iters(train_samples, ramp):
    """update_train_iters for sample-based training."""
    if ramp.samples is None:
        return train_samples // ramp.g
    iterations, consumed = 0, 0
    while consumed <= ramp.samples:
        consumed += ramp.batch(consumed)
        iterations += 1
    return iterations + (train_samples - consumed) // ramp.g


def get_lr(n, s):
    """OptimizerParamScheduler.get_lr at num_steps n; s: init_lr, max_lr, min_lr, warmup,
    decay, style, wsd, wsd_style."""
    if s["warmup"] > 0 and n <= s["warmup"]:
        return s["init_lr"] + ((s["max_lr"] - s["init_lr"]) * float(n) / float(s["warmup"]))
    if s["style"] == "constant":
        return s["max_lr"]
    if n > s["decay"]:
        return s["min_lr"]
    if s["style"] == "inverse-square-root":
        warmup, steps = max(s["warmup"], 1), max(n, 1)
        return max(s["min_lr"], s["max_lr"] * warmup ** 0.5 / (steps ** 0.5))
    ratio = float(n - s["warmup"]) / float(s["decay"] - s["warmup"])
    delta = s["max_lr"] - s["min_lr"]
    if s["style"] == "linear":
        coeff = 1.0 - ratio
    elif s["style"] == "cosine":
        coeff = 0.5 * (math.cos(math.pi * ratio) + 1.0)
    else:  # WSD
        anneal_start = s["decay"] - s["wsd"]
        if n <= anneal_start:
            coeff = 1.0
        else:
            a = float(n - anneal_start) / float(s["wsd"])
            coeff = {"linear": 1.0 - a, "cosine": 0.5 * (math.cos(math.pi * a) + 1.0),
                     "exponential": 2.0 * math.pow(0.5, a) - 1.0,
                     "minus_sqrt": 1.0 - math.sqrt(a)}[s["wsd_style"]]
    return s["min_lr"] + coeff * delta


def megatron_schedule(t):
    """(iterations, [(batch, consumed after, lr logged after the step)]) of a sample-based
    training section t (trident's key names), as Megatron's training loop steps them."""
    r = t.get("rampup_batch_size")
    ramp = Rampup(t["global_batch_size"], *(r if r else (None, None, None)))
    decay = t.get("lr_decay_samples") or t["train_samples"]
    warmup = (t["lr_warmup_fraction"] * decay if t.get("lr_warmup_fraction")
              else t.get("lr_warmup_samples", 0))
    s = dict(init_lr=t.get("lr_warmup_init", 0.0), max_lr=t["lr"], min_lr=t.get("min_lr", 0.0),
             warmup=warmup, decay=decay, style=t.get("lr_decay_style", "cosine"),
             wsd=t.get("lr_wsd_decay_samples"), wsd_style=t.get("lr_wsd_decay_style", "exponential"))
    n = train_iters(t["train_samples"], ramp)
    consumed, num_steps, rows = 0, 0, []
    for _ in range(n):
        batch = ramp.batch(consumed)  # update_num_microbatches(consumed_train_samples)
        num_steps += batch            # opt_param_scheduler.step(increment=batch)
        consumed += batch
        rows.append((batch, consumed, get_lr(num_steps, s)))
    return n, rows


def close(a, b, rel):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-300)


# ---- 1. the schedule against the transcription ----
BLOOM = dict(micro_batch_size=2, global_batch_size=2048, train_samples=220_000_000,
             rampup_batch_size=[192, 16, 9_765_625], lr=6.0e-5, min_lr=6.0e-6,
             lr_warmup_samples=216_320, lr_decay_samples=200_000_000, lr_decay_style="cosine")
GPT3 = dict(micro_batch_size=1, global_batch_size=1536, train_samples=146_484_375,
            rampup_batch_size=[16, 16, 5_859_375], lr=6.0e-5, min_lr=6.0e-6,
            lr_warmup_samples=183_105, lr_decay_samples=126_953_125, lr_decay_style="cosine")
# batches that skip levels (an increment every 0.875 samples), WSD, a warm-up fraction
ODD = dict(micro_batch_size=2, global_batch_size=20, train_samples=1000,
           rampup_batch_size=[4, 2, 7], lr=1.0, min_lr=0.1, lr_warmup_fraction=0.05,
           lr_decay_samples=900, lr_decay_style="WSD", lr_wsd_decay_samples=300,
           lr_wsd_decay_style="minus_sqrt", lr_warmup_init=0.01)
# no ramp-up: train_samples // global; inverse-square-root
PLAIN = dict(micro_batch_size=1, global_batch_size=8, train_samples=803, lr=0.5, min_lr=0.01,
             lr_warmup_samples=40, lr_decay_style="inverse-square-root")


def probe_schedule(name, t):
    cfg = tt.write_config(os.path.join(work, name + ".yaml"),
                          model=dict(num_layers=2, hidden_size=32, num_attention_heads=4,
                                     seq_length=16),
                          training=t,
                          data=dict(data_path="/nonexistent/corpus"))
    r = tt.run([probe, cfg])
    if not check(f"{name}: rampup_probe runs", r.returncode == 0, r.stderr[-500:]):
        return None
    lines = r.stdout.split("\n")
    n = int(lines[0].split()[1])
    rows = [tuple(x.split()) for x in lines[1:] if x]
    return n, [(int(b), int(c), float(lr)) for _, b, c, lr in rows]


for name, t in (("bloom-176b", BLOOM), ("gpt3-175b", GPT3), ("odd", ODD), ("plain", PLAIN)):
    want_n, want = megatron_schedule(t)
    got = probe_schedule(name, t)
    if got is None:
        continue
    n, rows = got
    check(f"{name}: {n} iterations (Megatron's update_train_iters: {want_n})", n == want_n)
    bad_batch = [i + 1 for i, (a, b) in enumerate(zip(rows, want)) if a[:2] != b[:2]]
    check(f"{name}: the global batch and consumed samples of every iteration are Megatron's",
          len(rows) == len(want) and not bad_batch,
          f"first differing iteration {bad_batch[:1]}: {rows[bad_batch[0] - 1] if bad_batch else ''}"
          f" vs {want[bad_batch[0] - 1] if bad_batch else ''}")
    bad_lr = [i + 1 for i, (a, b) in enumerate(zip(rows, want)) if not close(a[2], b[2], 1e-12)]
    check(f"{name}: the LR of every iteration is Megatron scheduler's after the step (1e-12)",
          not bad_lr, f"iteration {bad_lr[:1]}: {rows[bad_lr[0] - 1][2] if bad_lr else ''} vs "
          f"{want[bad_lr[0] - 1][2] if bad_lr else ''}")
    sizes = sorted({b for b, _, _ in rows})
    if name == "bloom-176b":
        check("bloom-176b: the batch grows 192, 208, ... 2048 by 16 (117 sizes)",
              sizes == list(range(192, 2049, 16)), f"{sizes[:4]} .. {sizes[-2:]}")
    if name == "odd":
        check("odd: levels skipped (4, 12, 20: each batch spans several increments)",
              sizes == [4, 12, 20], str(sizes))


# ---- 2. a ramp-up run across layouts ----
prefix = tt.make_corpus(trident, work, 23, ["ramp", "batch", "grow", "sample", "step", "size",
                                            "loss", "rate"], 300, 3, 40)
TRAIN = dict(micro_batch_size=1, global_batch_size=8, train_samples=60,
             rampup_batch_size=[2, 2, 16], lr=3.0e-3, min_lr=3.0e-4, lr_warmup_samples=10,
             lr_decay_samples=50, weight_decay=0.1, clip_grad=1.0, seed=11, eval_interval=4,
             eval_iters=1)
config = tt.write_config(os.path.join(work, "ramp.yaml"),
                         model=dict(num_layers=4, hidden_size=32, num_attention_heads=4,
                                    seq_length=16, vocab_size=256, make_vocab_size_divisible_by=16),
                         training=TRAIN, data=dict(data_path=prefix, split="95,5,0"),
                         parallel=dict(comm_timeout_s=120))
want_n, want = megatron_schedule(TRAIN)


def train(name, world=1, tp=1, pp=1, sets=(), expect_ok=True):
    out = os.path.join(work, name)
    r = tt.run(tt.train_cmd(trident, config, out, world, tp, pp, sets, flags=["--quiet"]),
               timeout=500)
    if expect_ok and not check(f"{name}: trains (exit 0)", r.returncode == 0,
                               (r.stdout + r.stderr)[-2500:]):
        return None, r
    return (tt.metrics(out) if r.returncode == 0 else None), r


single, _ = train("single")
if single:
    check(f"single: {want_n} iterations with batches {[b for b, _, _ in want]}",
          [m["global_batch_size"] for m in single] == [b for b, _, _ in want] and
          [m["consumed_samples"] for m in single] == [c for _, c, _ in want],
          str([(m["global_batch_size"], m["consumed_samples"]) for m in single]))
    summary = os.path.join(work, "single", "summary.json")
    got = json.load(open(summary)).get("tokens_per_s") if os.path.exists(summary) else None
    rates = sorted(m["tokens_per_s"] for m in single)  # each its own batch's tokens / its time
    med = rates[len(rates) // 2] if len(rates) % 2 else (rates[len(rates) // 2 - 1] + rates[len(rates) // 2]) / 2
    check("single: summary.json's tokens_per_s is the median of the iterations' own rates (each "
          "its own batch's tokens, not the final batch's)", got is not None and close(got, med, 1e-6),
          f"summary {got}, median of metrics.jsonl's {med}")
    check("single: metrics.jsonl's lr is Megatron's (1e-8: the file's 9 digits)",
          all(close(m["lr"], w[2], 1e-8) for m, w in zip(single, want)),
          str([(m["lr"], w[2]) for m, w in zip(single, want)]))
    check("single: the run's config.yaml loads again (trident plan reads it)",
          tt.run([trident, "plan", os.path.join(work, "single", "config.yaml"),
                  "--world-size", "1", "--set", "cluster.preset=h100-80gb"]).returncode == 0)

# the ramp's first iteration is a plain run of global batch 2: its loss and gradient norm (the
# gradient is of the mean over the iteration's own samples, not the final batch's)
first, _ = train("batch2", sets=("training.global_batch_size=2", "training.rampup_batch_size=[]",
                                 "training.train_samples=2"))
if first and single:
    check("iteration 1 (batch 2) equals a run of global batch 2: loss, grad_norm and lr",
          (first[0]["loss"], first[0]["grad_norm"], first[0]["lr"]) ==
          (single[0]["loss"], single[0]["grad_norm"], single[0]["lr"]),
          f"{first[0]} vs {single[0]}")

layouts = [("dp2", 2, 1, 1, ()), ("tp2", 2, 2, 1, ()), ("pp2", 2, 1, 2, ()),
           ("pp2-interleaved", 2, 1, 2, ("parallel.pipeline_schedule=interleaved",
                                         "parallel.virtual_pipeline_model_parallel_size=2"))]
if quick:  # the sanitizer build: the small multi-rank cases
    layouts = layouts[:1] + layouts[2:3]
elif single:
    layouts.append(("d2t2p2", 8, 2, 2, ("parallel.sequence_parallel=true",)))
for name, world, tp, pp, sets in layouts:
    m, _ = train(name, world, tp, pp, sets)
    if m and single:
        # and val_loss (evaluation on the final global batch whatever the ramp's is)
        worst = max(abs(a[k] - b[k]) / abs(b[k]) for a, b in zip(m, single)
                    for k in ("loss", "val_loss") if k in b)
        check(f"{name}: the loss of each of {len(m)} iterations within 1e-5 of one process's "
              f"(worst {worst:.1e}); the same batches",
              len(m) == len(single) and worst <= 1e-5 and
              [a["global_batch_size"] for a in m] == [a["global_batch_size"] for a in single])


# ---- 3. resume in the middle of the ramp ----
def resume_case(name, sets=()):
    ck = os.path.join(work, name + "-ck")
    full, _ = train(name + "-whole", sets=(*sets, f"checkpoint.save={ck}-whole"))
    first, _ = train(name + "-cut", sets=(*sets, f"checkpoint.save={ck}", "training.exit_interval=5"))
    rest, _ = train(name + "-cut", sets=(*sets, f"checkpoint.save={ck}", f"checkpoint.load={ck}"))
    if not (full and first and rest):
        return
    check(f"{name}: stopped after iteration 5 (batch {full[4]['global_batch_size']}, the next "
          f"{full[5]['global_batch_size']}) and resumed: every loss, lr and batch bit-identical",
          [(m["loss"], m["lr"], m["global_batch_size"], m["consumed_samples"]) for m in rest] ==
          [(m["loss"], m["lr"], m["global_batch_size"], m["consumed_samples"]) for m in full],
          str([(a["loss"], b["loss"]) for a, b in zip(rest, full)]))
    return full, ck


got = resume_case("resume")
if got:
    full, ck = got
    grows = [i + 1 for i in range(len(full) - 1)
             if full[i + 1]["global_batch_size"] != full[i]["global_batch_size"]]
    saved = sorted(int(d[5:]) for d in os.listdir(ck + "-whole") if d.startswith("iter_"))
    check(f"resume: checkpoints where the batch grows (Megatron's rule) and at the end: "
          f"{saved}", saved == sorted(set(grows + [len(full)])), f"grows after {grows}")
# fp16: the dynamic scaler starts at 2^32 and skips the first steps (overflow)
got = resume_case("fp16", ("training.precision=fp16", "training.initial_loss_scale=1e30",
                           "training.hysteresis=1"))
if got:
    full, ck = got
    skipped = full[4].get("skipped_iterations", 0)
    manifest = open(os.path.join(ck, "iter_0000005", "manifest.txt")).read()
    sk = [ln for ln in manifest.split("\n") if ln.startswith("loss_scaler")]
    check(f"fp16: {skipped} steps skipped by iteration 5; the manifest keeps their samples "
          f"({sk[0] if sk else 'no loss_scaler line'})",
          skipped >= 1 and sk and "skipped_samples" in sk[0])

# ---- 4. the data-parallel rule, at launch ----
_, r = train("dp-rule", world=2, sets=("training.rampup_batch_size=[2,3,16]",
                                       "training.global_batch_size=8"), expect_ok=False)
check("start 2, increment 3 with micro-batch 1 x DP 2: exit 2 naming the key and the rule",
      r.returncode == 2 and "the increment 3 of training.rampup_batch_size is not a multiple of "
      "micro_batch_size 1 x data-parallel size 2" in r.stderr and
      "--set training.rampup_batch_size: " in r.stderr,
      f"exit {r.returncode}: {r.stderr[-600:]}")

# ---- 5. the planner ----
bloom = os.path.join(root, "configs", "bloom-176b.yaml")
sets = ["training.train_iters=0", "training.lr_decay_iters=0", "training.lr_warmup_iters=0",
        "training.train_samples=220000000", "training.lr_decay_samples=200000000",
        "training.lr_warmup_samples=216320", "training.rampup_batch_size=[192,16,9765625]"]
r = tt.run([trident, "plan", bloom] + [a for s in sets for a in ("--set", s)])
check("trident plan: Bloom-176B with its ramp-up plans the final batch and says so",
      r.returncode == 0 and "batch ramp-up: from 192 by 16 over 9765625 samples; planned at the "
      "final global batch 2048" in r.stdout and "time to train 450.6B tokens" in r.stdout,
      (r.stdout + r.stderr)[-1500:])

tt.finish("rampup: all checks passed")
