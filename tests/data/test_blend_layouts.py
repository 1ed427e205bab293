#!/usr/bin/python3
"""Blended data in training (Megatron's data_path lists): a [0.3, A, 0.7, B] blend and a
train/valid_data_path run train identically in one process and under DP2 x TP2 x PP2 (the same
samples: every step's loss within 1e-5), and the config's lists and tokenizer keys are checked
at start-up (exit 2 naming the key).
usage: test_blend_layouts.py TRIDENT WORKDIR"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402
from trident_test import check  # noqa: E402

trident, work = sys.argv[1], tt.fresh_dir(sys.argv[2])


def corpus(name, seed, words):
    d = tt.fresh_dir(os.path.join(work, name))
    return tt.make_corpus(trident, d, seed, words, 300, 5, 40)


a = corpus("a", 1, ["alpha", "beta", "gamma", "delta"])
b = corpus("b", 2, ["one", "two", "three", "four", "five"])
c = corpus("c", 3, ["red", "green", "blue"])
model = dict(num_layers=2, hidden_size=32, num_attention_heads=2, seq_length=16)
training = dict(micro_batch_size=2, global_batch_size=8, train_iters=6, lr=1.0e-3, eval_interval=3,
                eval_iters=2)
configs = {
    "weighted": dict(data_path=[0.3, a, 0.7, b], split="90,10,0"),
    "lists": dict(train_data_path=[a, c], valid_data_path=[0.5, b, 0.5, c]),
}
for name, data in configs.items():
    config = tt.write_config(os.path.join(work, f"{name}.yaml"), model=model, training=training, data=data)
    runs = {}
    for label, world, tp, pp in (("1 process", 1, None, None), ("DP2xTP2xPP2", 8, 2, 2)):
        run_dir = os.path.join(work, f"{name}-{world}")
        rc, out, err = tt.outputs(tt.train_cmd(trident, config, run_dir, world, tp, pp, flags=["--quiet"]),
                                  timeout=300)
        if check(f"{name}, {label}: exit 0", rc == 0, err[-2000:]):
            runs[label] = tt.metrics(run_dir)
    if len(runs) == 2:
        one, eight = runs["1 process"], runs["DP2xTP2xPP2"]
        worst = max(abs(x["loss"] - y["loss"]) / abs(x["loss"]) for x, y in zip(one, eight))
        vals = [(x.get("val_loss"), y.get("val_loss")) for x, y in zip(one, eight) if "val_loss" in x]
        check(f"{name}: the same losses in both layouts (worst relative difference {worst:.2e})",
              len(one) == len(eight) == 6 and worst <= 1e-5, f"{[x['loss'] for x in one]} vs {[y['loss'] for y in eight]}")
        check(f"{name}: the same validation losses", vals and all(abs(x - y) <= 1e-5 * abs(x) for x, y in vals), vals)

# ---- start-up checks: exit 2 naming the key ----
bad = {
    "mixed weights": (dict(data_path=[0.3, a, b, c]), "data.data_path: 1 of the 2 weights are numbers"),
    "both lists": (dict(data_path=[a], train_data_path=[b]), "exclude each other"),
    "missing path": (dict(data_path=[0.5, a, 0.5, os.path.join(work, "nope")]), "nope"),
    "tokenizer files": (dict(data_path=[a], tokenizer={"type": "GPT2BPETokenizer"}),
                        "needs data.tokenizer.vocab_file"),
    "vocab too small": (dict(data_path=[a], tokenizer={"type": "ByteLevel"}), "model.vocab_size 100 is smaller"),
}
for name, (data, needle) in bad.items():
    m = dict(model, vocab_size=100) if name == "vocab too small" else model
    config = tt.write_config(os.path.join(work, "bad.yaml"), model=m, training=training, data=data)
    rc, out, err = tt.outputs(tt.train_cmd(trident, config, os.path.join(work, "bad-run"), flags=["--quiet"]))
    check(f"{name}: exit 2 with '{needle}'", rc == 2 and needle in err, f"exit {rc}: {err[-800:]}")
tt.finish()
