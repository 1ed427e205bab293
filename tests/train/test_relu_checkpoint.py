#!/usr/bin/python3
"""model.relu (OPT's MLP) through training and its checkpoint: a tiny ReLU model trains
(losses not the GELU model's; recompute full bit-identical to none; bf16 storage near fp32), saved
at iteration 2 and resumed it continues bit for bit; the manifest's family line ends with
' relu 1' and `trident eval` of the checkpoint alone (the switch read back from the manifest)
gives what eval with the config gives; a resume with relu false, or a GELU checkpoint resumed
with relu true, exits 2 naming the difference; corrupt ' relu' suffixes (another value, twice,
out of order, with swiglu, geglu or gelu_exact) exit 2 naming the family line.
usage: test_relu_checkpoint.py TRIDENT WORKDIR"""
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402
from trident_test import check  # noqa: E402

trident, work = os.path.abspath(sys.argv[1]), tt.fresh_dir(os.path.abspath(sys.argv[2]))
corpus = tt.make_corpus(trident, work, 5, ["relu", "opt", "kink", "max"], 200, 3, 30)
config = tt.write_config(os.path.join(work, "relu.yaml"),
    model=dict(num_layers=2, hidden_size=32, num_attention_heads=2, seq_length=16,
               vocab_size=256, make_vocab_size_divisible_by=16, relu=True),
    training=dict(micro_batch_size=2, global_batch_size=4, train_iters=4, lr=3.0e-3),
    data=dict(data_path=corpus, split="90,10,0"))
text = os.path.join(work, "text.txt")
tt.write(text, "relu is max of x and zero; its slope is one above zero.\n" * 4)


def train(name, *sets, timeout=120):
    run_dir = os.path.join(work, name)
    r = tt.run(tt.train_cmd(trident, config, run_dir, sets=sets, flags=["--quiet"]),
               timeout=timeout)
    return r, (tt.losses(run_dir) if r.returncode == 0 else None)


def evaluate(ckpt, *extra):
    r = tt.run([trident, "eval", ckpt, "--input", text, "--json", *extra], timeout=120)
    return r, (json.loads(r.stdout) if r.returncode == 0 else None)


r, relu = train("relu")
check("a ReLU model trains 4 iterations", r.returncode == 0 and len(relu) == 4, r.stderr[-800:])
r, gelu = train("gelu", "model.relu=false")
check("its losses are not the GELU model's", r.returncode == 0 and gelu[1:] != relu[1:],
      f"{gelu} {relu}")
r, full = train("relu-full", "training.recompute=full")
check("recompute full: bit-identical losses", full == relu, f"{full} {relu}")
r, b16 = train("relu-bf16", "training.precision=bf16")
# (bf16 storage with the GELU's 16-bit ops in ReLU's place: 1e-3 from ReLU's first loss, 1.9e-3
# from its second; the right ops: 1.1e-5, 3e-4 at most)
check("bf16 storage (cpu-bf16): losses within 1e-3 of fp32's, the first nearer ReLU's than GELU's",
      b16 is not None and len(b16) == 4
      and all(abs(a - b) <= 1e-3 * b for a, b in zip(b16, relu))
      and abs(b16[0] - relu[0]) < 0.1 * abs(b16[0] - gelu[0]), f"{b16} {relu} {r.stderr[-600:]}")

ck = os.path.join(work, "ck")
r, _ = train("relu-saved", f"checkpoint.save={ck}", "training.exit_interval=2")
r, resumed = train("relu-saved", f"checkpoint.load={ck}")
check("saved at 2 and resumed: bit-identical losses", resumed == relu, f"{resumed} {relu}")
manifest = os.path.join(ck, "iter_0000002", "manifest.txt")
family = [ln for ln in open(manifest).read().splitlines() if ln.startswith("family ")]
check("the manifest's family line ends with ' relu 1'",
      len(family) == 1 and family[0].endswith(" eps 1e-05 relu 1"), str(family))
r, alone = evaluate(ck)
r2, with_config = evaluate(ck, "--config", config)
check("eval of the checkpoint alone = eval with its config (relu read from the manifest)",
      alone is not None and alone == with_config, f"{alone} {with_config} {r.stderr[-500:]}")

r, _ = train("other", f"checkpoint.load={ck}", "model.relu=false")
check("resumed with relu false: exit 2 naming relu 0 (the checkpoint's: 1)",
      r.returncode == 2 and "relu 0 (the checkpoint's: 1)" in r.stderr, r.stderr[-600:])
ck_gelu = os.path.join(work, "ck-gelu")
r, _ = train("gelu-saved", f"checkpoint.save={ck_gelu}", "training.exit_interval=2",
             "model.relu=false")
r, _ = train("other", f"checkpoint.load={ck_gelu}")
check("a GELU checkpoint resumed with relu true: exit 2 naming relu 1 (the checkpoint's: 0)",
      r.returncode == 2 and "relu 1 (the checkpoint's: 0)" in r.stderr, r.stderr[-600:])

# corrupt suffixes of the family line, each in a copy of the checkpoint
line = family[0]
BAD = {"relu 2": line.replace(" relu 1", " relu 2"),
       "relu 0": line.replace(" relu 1", " relu 0"),
       "twice": line + " relu 1",
       "cut": line[: -len(" 1")],
       "out of order": line.replace(" relu 1", " relu 1 parallel_residual 1"),
       "with gelu_exact": line.replace(" relu 1", " gelu_exact 1 relu 1"),
       "with geglu": line.replace(" relu 1", " geglu 1 relu 1"),
       "with swiglu": line.replace(" swiglu 0 ", " swiglu 1 ")}
for name, bad in BAD.items():
    d = os.path.join(work, "bad-" + name.replace(" ", "-"))
    shutil.copytree(ck, d)
    m = os.path.join(d, "iter_0000002", "manifest.txt")
    tt.write(m, open(m).read().replace(line, bad))
    r, _ = train("bad", f"checkpoint.load={d}")
    check(f"family line {name}: exit 2 naming the manifest's family line",
          r.returncode == 2 and "manifest.txt:" in r.stderr
          and "expected the family line" in r.stderr and "relu 1 only with swiglu 0" in r.stderr,
          r.stderr[-600:])
tt.finish()
