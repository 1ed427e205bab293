#!/usr/bin/python3
"""model.hidden_dropout and model.attention_dropout through training, validation, eval and
generation: a tiny model trains with both at 0.1 (losses not dropout 0's; the same bits run to
run, with full and selective recompute, and saved at iteration 3 and resumed); the validation
loss has no dropout (with lr 1e-30 the parameters never change, so each validation loss equals
dropout 0's bit for bit while the training losses differ); `trident eval` and `trident
generate` of a checkpoint trained with dropout give the same results with the dropout config,
with a dropout 0 config and alone.
usage: test_dropout_train.py TRIDENT WORKDIR"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402
from trident_test import check  # noqa: E402

trident, work = os.path.abspath(sys.argv[1]), tt.fresh_dir(os.path.abspath(sys.argv[2]))
corpus = tt.make_corpus(trident, work, 5, ["drop", "keep", "mask", "scale"], 200, 3, 30)
DROP = dict(hidden_dropout=0.1, attention_dropout=0.1)
MODEL = dict(num_layers=2, hidden_size=32, num_attention_heads=2, seq_length=16, vocab_size=256,
             make_vocab_size_divisible_by=16)
TRAINING = dict(micro_batch_size=2, global_batch_size=4, train_iters=4, lr=3.0e-3)
config = tt.write_config(os.path.join(work, "dropout.yaml"), model=dict(MODEL, **DROP),
                         training=TRAINING, data=dict(data_path=corpus, split="80,20,0"))
config0 = tt.write_config(os.path.join(work, "nodropout.yaml"), model=MODEL, training=TRAINING,
                          data=dict(data_path=corpus, split="80,20,0"))
text = os.path.join(work, "text.txt")
tt.write(text, "dropout keeps each element with probability 1 - p and scales it.\n" * 4)


def train(name, *sets, cfg=config):
    run_dir = os.path.join(work, name)
    r = tt.run(tt.train_cmd(trident, cfg, run_dir, sets=sets, flags=["--quiet"]), timeout=120)
    return r, (tt.metrics(run_dir) if r.returncode == 0 else None)


def losses(m, key="loss"):
    return None if m is None else [x[key] for x in m if key in x]


r, drop = train("drop")
check("a model with hidden and attention dropout 0.1 trains 4 iterations",
      r.returncode == 0 and len(drop) == 4, r.stderr[-800:])
r, none = train("none", cfg=config0)
check("its losses are not dropout 0's (iteration 1's too: the forward drops)",
      none is not None and all(a != b for a, b in zip(losses(drop), losses(none))),
      f"{losses(drop)} {losses(none)}")
r, again = train("drop-again")
check("run to run: bit-identical losses", losses(again) == losses(drop))
for mode in ("full", "selective"):
    r, rec = train(f"drop-{mode}", f"training.recompute={mode}")
    check(f"recompute {mode}: bit-identical losses (the masks recomputed from their coordinates)",
          losses(rec) == losses(drop), f"{losses(rec)} {losses(drop)} {r.stderr[-400:]}")

# validation without dropout: lr 1e-30 leaves every parameter's bits (Adam's step is ~lr)
FROZEN = ["training.lr=1e-30", "training.min_lr=0", "training.eval_interval=1",
          "training.eval_iters=2"]
r, vd = train("val-drop", *FROZEN)
r0, v0 = train("val-none", *FROZEN, cfg=config0)
check("frozen parameters: training losses with dropout differ from dropout 0's",
      vd is not None and v0 is not None and losses(vd) != losses(v0),
      f"{r.stderr[-400:]} {r0.stderr[-400:]}")
check("... and every validation loss equals dropout 0's bit for bit (validation drops nothing)",
      vd is not None and len(losses(vd, "val_loss")) == 4
      and losses(vd, "val_loss") == losses(v0, "val_loss"),
      f"{losses(vd, 'val_loss')} {losses(v0, 'val_loss')}")

# resume: iteration 4 of a run resumed from iteration 3 draws the masks the uninterrupted run
# draws there (the first sample of each micro-batch comes back with consumed_samples)
SIX = ["training.train_iters=6", "training.lr_decay_iters=6"]
r, six = train("six", *SIX)
ck3 = os.path.join(work, "ck3")
r3, _ = train("three", *SIX, f"checkpoint.save={ck3}", "checkpoint.save_interval=3",
              "training.exit_interval=3")
r4, resumed = train("three", *SIX, f"checkpoint.load={ck3}")
check("saved at iteration 3 and resumed: iterations 1-6 bit-identical to the uninterrupted run",
      six is not None and len(losses(six)) == 6 and losses(resumed) == losses(six),
      f"{losses(resumed)} {losses(six)} {r3.stderr[-400:]} {r4.stderr[-400:]}")

ck = os.path.join(work, "ck")
r, _ = train("saved", f"checkpoint.save={ck}", "checkpoint.save_interval=4")
check("trained with dropout and saved", r.returncode == 0, r.stderr[-600:])


def evaluate(*extra):
    r = tt.run([trident, "eval", ck, "--input", text, "--json", *extra], timeout=120)
    return json.loads(r.stdout) if r.returncode == 0 else r.stderr[-400:]


alone, with_drop, with_none = evaluate(), evaluate("--config", config), evaluate("--config", config0)
check("trident eval drops nothing: the checkpoint alone = with the dropout config = with dropout 0",
      isinstance(alone, dict) and alone == with_drop == with_none,
      f"{alone} {with_drop} {with_none}")


def generate(*extra):
    r = tt.run([trident, "generate", ck, "--prompt", "drop", "--max-new-tokens", "12",
                "--temperature", "0", *extra], timeout=120)
    return r.stdout if r.returncode == 0 else "exit %d %s" % (r.returncode, r.stderr[-400:])


g = [generate(), generate("--config", config), generate("--config", config0)]
check("trident generate drops nothing: the same greedy text alone and with either config",
      not g[0].startswith("exit") and g[0] == g[1] == g[2], str(g))
tt.finish()
