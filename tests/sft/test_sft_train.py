#!/usr/bin/python3
"""Supervised fine-tuning end to end (issue 20, item 1), release build:
  - an SFT set built from the demo corpus (scripts/sft_fortunes.py; synthetic pairs when no
    corpus is installed), preprocessed with --json-keys prompt,response;
  - data.dataset_type sft trains with the same losses (and val_loss) in one process and under
    DP2, TP2, PP2 and DP2 x TP2 x PP2 (relative difference <= 1e-5), the last with another
    micro-batch size: the loss is the mean over the learned tokens of the global batch; a run
    stopped at a checkpoint resumes under PP2 with the same losses; a Llama (rotary positions
    restarting in each packed example, on every stage) under PP2 with the same bits;
  - a PyTorch reference (plain torch GPT-2 with the segment mask, restarting positions and
    per-token weights, from trident's initial weights and data/'s packed samples): iteration
    1's loss (<= 1e-6) and every gradient tensor (relative L2 <= 1e-5);
  - configs/finetune-tiny.yaml runs from a release checkpoint of a short pre-training run
    (trident convert --to hf, then --from hf);
  - config errors name the key: dataset_type sft with a blend, sft_packing without sft, a
    dataset without its loss mask.
usage: test_sft_train.py TRIDENT SFT_DUMP WORKDIR"""
import json
import math
import os
import struct
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402
from trident_test import check  # noqa: E402

trident, sft_dump, work = sys.argv[1], sys.argv[2], tt.fresh_dir(sys.argv[3])
repo = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def path(name):
    return os.path.join(work, name)


# ---- the SFT set
jsonl = path("sft.jsonl")
r = tt.run([sys.executable, os.path.join(repo, "scripts", "sft_fortunes.py"), jsonl, "--max", "600"])
if r.returncode != 0:  # no corpus: pairs of words
    print(f"note: no demo corpus ({r.stderr.strip()}): synthetic pairs")
    words = ["alpha", "beta", "gamma", "delta", "tensor", "pipeline", "stage", "rank"]
    import random
    rng = random.Random(3)
    with open(jsonl, "w") as f:
        for _ in range(600):
            p = " ".join(rng.choice(words) for _ in range(rng.randint(2, 12)))
            f.write(json.dumps({"prompt": "Complete this fortune:\n" + p,
                                "response": " " + " ".join(reversed(p.split())) + "\n"}) + "\n")
prefix = path("fsft")
rc, out, err = tt.outputs([trident, "preprocess", "--input", jsonl, "--output-prefix", prefix,
                           "--json-keys", "prompt,response"])
check("preprocess --json-keys prompt,response: exit 0", rc == 0, err)

MODEL = dict(num_layers=2, hidden_size=64, num_attention_heads=4, seq_length=256,
             max_position_embeddings=256, vocab_size=256, make_vocab_size_divisible_by=64)
TRAIN = dict(micro_batch_size=2, global_batch_size=8, train_iters=3, lr=1.0e-3, lr_warmup_iters=1,
             seed=7, eval_interval=3, eval_iters=2)
DATA = dict(dataset_type="sft", data_path=prefix, split="90,10,0")
config = tt.write_config(path("sft.yaml"), model=MODEL, training=TRAIN, data=DATA)


def train(name, world=1, tp=None, pp=None, sets=()):
    run_dir = path(name)
    p = tt.run(tt.train_cmd(trident, config, run_dir, world, tp, pp, sets), timeout=120)
    if not check(f"{name}: exit 0", p.returncode == 0, p.stderr[-2000:]):
        return None
    m = tt.metrics(run_dir)
    return [x["loss"] for x in m], [x["val_loss"] for x in m if "val_loss" in x]


def rel(a, b):
    return abs(a - b) / abs(b)


base = train("one")
check("one process: the losses are finite and fall",
      base and all(math.isfinite(x) for x in base[0]) and base[0][-1] < base[0][0], base)
layouts = [("dp2", 2, None, None, ()), ("tp2", 2, 2, None, ()), ("pp2", 2, None, 2, ()),
           ("dp2-tp2-pp2", 8, 2, 2, ("training.micro_batch_size=1",))]
for name, world, tp, pp, sets in layouts:
    got = train(name, world, tp, pp, sets)
    if base and got:
        worst = max(rel(a, b) for a, b in zip(got[0] + got[1], base[0] + base[1]))
        check(f"{name}: losses and val_loss within 1e-5 of one process (worst {worst:.1e})",
              len(got[0]) == len(base[0]) and len(got[1]) == len(base[1]) and worst <= 1e-5,
              f"{got} vs {base}")
# a run stopped at iteration 2 (checkpoint) resumes under PP2 as if it had not stopped
ck = path("ckpt")
first = train("stop", sets=(f"checkpoint.save={ck}", "checkpoint.save_interval=2",
                            "training.exit_interval=2", "training.eval_interval=0"))
resumed = train("resume", 2, None, 2, (f"checkpoint.load={ck}", "training.eval_interval=0"))
if base and first and resumed:
    worst = max(rel(a, b) for a, b in zip(first[0] + resumed[0], base[0]))
    check(f"stopped at 2, resumed under PP2: the losses of one run (worst {worst:.1e})",
          len(first[0]) + len(resumed[0]) == len(base[0]) and worst <= 1e-5,
          f"{first[0]} + {resumed[0]} vs {base[0]}")
# Llama's rotary positions restart in each packed example on every stage, not only the first:
# each stage's layers rotate q and k by the example's positions (PP2 gives the bits of one
# process: the same positions, the same rotations; PP2 once rotated its second stage's layers by
# the row's positions: the same scores in exact arithmetic, other bits in floats)
LLAMA = ("model.normalization=RMSNorm", "model.position_embedding_type=rope", "model.swiglu=true",
         "model.num_query_groups=2", "model.untie_embeddings_and_output_weights=true",
         "model.add_bias_linear=false", "training.eval_interval=0")


def losses_and_norms(name):
    return [(x["loss"], x["grad_norm"]) for x in tt.metrics(path(name))]


llama = train("llama-one", sets=LLAMA) and losses_and_norms("llama-one")
got = train("llama-pp2", 2, None, 2, LLAMA) and losses_and_norms("llama-pp2")
check("Llama PP2: the losses and gradient norms of one process, bit for bit",
      llama and got and got == llama, f"{got} vs {llama}")
unpacked = train("unpacked", sets=("data.sft_packing=false",))
check("sft_packing false: trains (one example per sequence), another loss",
      unpacked and base and unpacked[0][0] != base[0][0], f"{unpacked} vs {base}")

# ---- the PyTorch reference of iteration 1
try:
    import numpy as np
    import torch
    import torch.nn.functional as F
    have_torch = True
except Exception as exc:  # pragma: no cover
    print(f"SKIP (PyTorch reference): {exc}")
    have_torch = False
if have_torch:
    torch.set_num_threads(2)
    dump = tt.fresh_dir(path("dump"))
    p = tt.run([sft_dump, config, dump], timeout=60)
    check("sft_dump: exit 0", p.returncode == 0, p.stderr)
    man = json.load(open(os.path.join(dump, "tensors.json")))
    flat = torch.from_numpy(np.fromfile(os.path.join(dump, "params.bin"), dtype=np.float32))
    gflat = torch.from_numpy(np.fromfile(os.path.join(dump, "grads.bin"), dtype=np.float32))
    L, C, NH, T, V = (MODEL[k] for k in ("num_layers", "hidden_size", "num_attention_heads",
                                         "seq_length", "vocab_size"))
    HS, GB = C // NH, TRAIN["global_batch_size"]
    raw = open(os.path.join(dump, "batch.bin"), "rb").read()
    per = (T + 1 + 3 * T) * 4
    tok, seg, pos, w = [], [], [], []
    for s in range(GB):
        b = raw[s * per:(s + 1) * per]
        tok.append(struct.unpack_from(f"<{T + 1}i", b, 0))
        seg.append(struct.unpack_from(f"<{T}i", b, (T + 1) * 4))
        pos.append(struct.unpack_from(f"<{T}i", b, (2 * T + 1) * 4))
        w.append(struct.unpack_from(f"<{T}f", b, (3 * T + 1) * 4))
    check("the global batch holds packed sequences (a sample of two examples or more)",
          any(max(x) >= 2 or (max(x) == 1 and w_row[-1] != 0) for x, w_row in zip(seg, w)),
          [max(x) for x in seg])
    tok, seg, pos = (torch.tensor(x, dtype=torch.long) for x in (tok, seg, pos))
    w = torch.tensor(w, dtype=torch.float64)

    def tensor(t):
        shape = (t["rows"], t["cols"]) if t["cols"] > 1 else (t["rows"],)
        return flat[t["offset"]:t["offset"] + t["rows"] * t["cols"]].reshape(shape).double()

    P = {t["name"]: tensor(t).clone().requires_grad_(True) for t in man["tensors"]}
    idx, tgt = tok[:, :T], tok[:, 1:]
    x = P["wte"][idx] + P["wpe"][pos]
    keep = torch.tril(torch.ones(T, T, dtype=torch.bool)) & (seg[:, :, None] == seg[:, None, :])
    for layer in range(L):
        def p(n):
            return P[f"layers.{layer}.{n}"]
        h = F.layer_norm(x, (C,), p("ln1.weight"), p("ln1.bias"), 1e-5)
        qkv = (h @ p("qkv.weight").T + p("qkv.bias")).view(GB, T, NH, 3, HS)
        q, k, v = (qkv[:, :, :, i, :].transpose(1, 2) for i in range(3))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(HS)
        att = att.masked_fill(~keep[:, None], float("-inf")).softmax(dim=-1)
        x = x + (att @ v).transpose(1, 2).reshape(GB, T, C) @ p("attn_proj.weight").T + p("attn_proj.bias")
        h = F.layer_norm(x, (C,), p("ln2.weight"), p("ln2.bias"), 1e-5)
        h = F.gelu(h @ p("fc.weight").T + p("fc.bias"), approximate="tanh")
        x = x + h @ p("fc_proj.weight").T + p("fc_proj.bias")
    x = F.layer_norm(x, (C,), P["lnf.weight"], P["lnf.bias"], 1e-5)
    logits = (x @ P["wte"].T)[..., :V]
    tok_loss = F.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1), reduction="none")
    loss = (tok_loss * w.reshape(-1)).sum() / w.sum()  # the mean over the learned tokens
    loss.backward()
    check(f"PyTorch reference: iteration 1's loss {loss.item():.7f} vs trident {man['loss']:.7f}",
          rel(man["loss"], loss.item()) <= 1e-6)
    check("the reference's masked loss is not the plain mean (the weights matter)",
          abs(tok_loss.mean().item() - loss.item()) > 1e-3)
    worst, where = 0.0, ""
    for t in man["tensors"]:
        want = P[t["name"]].grad.reshape(-1)
        got = gflat[t["offset"]:t["offset"] + t["rows"] * t["cols"]].double()
        e = (got - want).norm().item() / max(want.norm().item(), 1e-30)
        if e > worst:
            worst, where = e, t["name"]
    check(f"PyTorch reference: every gradient tensor within 1e-5 (worst {worst:.1e}, {where})",
          worst <= 1e-5)

# ---- configs/finetune-tiny.yaml from a release checkpoint of a short pre-training run
pre = tt.make_corpus(trident, work, 5, ["the", "cat", "sat", "on", "a", "mat", "dog"], 200, 10, 60,
                     prefix=path("pre"))
pre_cfg = tt.write_config(path("pre.yaml"), model=dict(
    num_layers=4, hidden_size=128, num_attention_heads=4, seq_length=128,
    max_position_embeddings=128, vocab_size=256, make_vocab_size_divisible_by=128),
    training=dict(micro_batch_size=2, global_batch_size=2, train_iters=2, lr=1e-3, seed=1),
    data=dict(data_path=pre, split="100,0,0"),
    checkpoint=dict(save=path("pre-ckpt"), save_interval=2))
p = tt.run(tt.train_cmd(trident, pre_cfg, path("pre-run")), timeout=120)
check("pre-training with a checkpoint: exit 0", p.returncode == 0, p.stderr[-1500:])
for args in (["--to", "hf", "--input", path("pre-ckpt"), "--output", path("pre-hf")],
             ["--from", "hf", "--input", path("pre-hf"), "--output", path("release")]):
    p = tt.run([trident, "convert", *args], timeout=60)
    check(f"convert {args[0]} hf: exit 0", p.returncode == 0, p.stderr)
ft = os.path.join(repo, "configs", "finetune-tiny.yaml")
ft_sets = [f"data.data_path={prefix}", f"checkpoint.load={path('release')}", "training.train_iters=3",
           "training.eval_interval=3", "training.eval_iters=1", "training.micro_batch_size=4",
           "training.global_batch_size=4", "logging.log_interval=1"]
p = tt.run(tt.train_cmd(trident, ft, path("ft"), sets=ft_sets), timeout=120)
check("configs/finetune-tiny.yaml: exit 0, the release weights loaded",
      p.returncode == 0 and "loaded the weights of" in p.stdout, p.stdout[-1500:] + p.stderr[-1500:])
ft_loss = [m["loss"] for m in tt.metrics(path("ft"))] if p.returncode == 0 else []
p = tt.run(tt.train_cmd(trident, ft, path("ft-scratch"), sets=ft_sets[:1] + ft_sets[2:] +
                        [f"checkpoint.load={path('no-checkpoint')}"]), timeout=120)
scratch = [m["loss"] for m in tt.metrics(path("ft-scratch"))] if p.returncode == 0 else []
check("finetune-tiny: from the release weights, another first loss than from scratch",
      ft_loss and scratch and all(math.isfinite(x) for x in ft_loss) and ft_loss[0] != scratch[0],
      f"{ft_loss} vs {scratch}")

# ---- config errors
for what, sets, key in [
        ("a blend", [f"data.data_path=[0.5, {prefix}, 0.5, {prefix}]"], "data.data_path"),
        ("sft_packing without sft", ["data.dataset_type=gpt", "data.sft_packing=false"], "data.sft_packing"),
        ("a dataset without its loss mask", [f"data.data_path={pre}"], "loss mask")]:
    p = tt.run(tt.train_cmd(trident, config, path("bad"), sets=sets), timeout=60)
    check(f"dataset_type sft with {what}: exit 2 naming {key}",
          p.returncode == 2 and key in p.stderr, f"rc {p.returncode}: {p.stderr.strip()[-600:]}")

tt.finish("sft train: all checks passed")
