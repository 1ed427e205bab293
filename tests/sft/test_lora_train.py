#!/usr/bin/python3
"""LoRA fine-tuning end to end (issue 20, item 2), release build:
  - configs/finetune-tiny-lora.yaml trains adapters on a frozen base (finetune.load: the
    checkpoint of a short pre-training run) on the SFT set;
  - memory (summary.json): the LoRA run's gradients and optimizer state are the adapters'
    alone (4 bytes, 8 bytes per adapter element), and its allocator peak is below full
    fine-tuning's by at least the base's gradients + optimizer state less the adapters';
  - a LoRA run stopped at a checkpoint (the adapters) resumes with the same losses, and is
    refused (naming both values) with another finetune.lora.alpha than it was trained with;
  - bad settings are refused naming the key: an unknown target module, dropout 1, ZeRO-3,
    a missing base, a base checkpoint given as checkpoint.load (no adapters in it); generate
    from a LoRA checkpoint says what it holds and how to merge it.
usage: test_lora_train.py TRIDENT WORKDIR"""
import json
import shutil
import math
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402
from trident_test import check  # noqa: E402

trident, work = sys.argv[1], tt.fresh_dir(sys.argv[2])
repo = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def path(name):
    return os.path.join(work, name)


# ---- the SFT set (synthetic pairs: no corpus needed) and the base
words = ["alpha", "beta", "gamma", "delta", "tensor", "pipeline", "stage", "rank"]
rng = random.Random(4)
with open(path("sft.jsonl"), "w") as f:
    for _ in range(300):
        p = " ".join(rng.choice(words) for _ in range(rng.randint(2, 12)))
        f.write(json.dumps({"prompt": "Complete this fortune:\n" + p,
                            "response": " " + " ".join(reversed(p.split())) + "\n"}) + "\n")
prefix = path("fsft")
rc, out, err = tt.outputs([trident, "preprocess", "--input", path("sft.jsonl"), "--output-prefix", prefix,
                           "--json-keys", "prompt,response"])
check("preprocess --json-keys prompt,response: exit 0", rc == 0, err)
pre = tt.make_corpus(trident, work, 5, ["the", "cat", "sat", "on", "a", "mat", "dog"], 200, 10, 60,
                     prefix=path("pre"))
pre_cfg = tt.write_config(path("pre.yaml"), model=dict(
    num_layers=4, hidden_size=128, num_attention_heads=4, seq_length=128,
    max_position_embeddings=128, vocab_size=256, make_vocab_size_divisible_by=128),
    training=dict(micro_batch_size=2, global_batch_size=2, train_iters=2, lr=1e-3, seed=1),
    data=dict(data_path=pre, split="100,0,0"),
    checkpoint=dict(save=path("base"), save_interval=2))
p = tt.run(tt.train_cmd(trident, pre_cfg, path("pre-run"), flags=["--quiet"]), timeout=120)
check("pre-training with a checkpoint (the base): exit 0", p.returncode == 0, p.stderr[-1500:])
for args in (["--to", "hf", "--input", path("base"), "--output", path("base-hf")],  # a release of it
             ["--from", "hf", "--input", path("base-hf"), "--output", path("release")]):
    p = tt.run([trident, "convert", *args], timeout=60)
    check(f"convert {args[0]} hf: exit 0", p.returncode == 0, p.stderr)

# ---- configs/finetune-tiny-lora.yaml
ft = os.path.join(repo, "configs", "finetune-tiny-lora.yaml")
sets = [f"data.data_path={prefix}", f"finetune.load={path('base')}", "training.train_iters=4",
        "training.eval_interval=0", "training.micro_batch_size=4", "training.global_batch_size=4",
        "logging.log_interval=1"]


def train(name, extra=(), world=1, tp=None, pp=None):
    p = tt.run(tt.train_cmd(trident, ft, path(name), world, tp, pp, sets=[*sets, *extra]), timeout=120)
    return p, (tt.losses(path(name)) if p.returncode == 0 else [])


p, lora = train("lora", [f"checkpoint.save={path('lora-ckpt')}"])
check("configs/finetune-tiny-lora.yaml: exit 0, the base loaded frozen, finite losses",
      p.returncode == 0 and "loaded the base model of" in p.stdout and "frozen" in p.stdout and len(lora) == 4
      and all(math.isfinite(x) for x in lora), p.stdout[-1500:] + p.stderr[-1500:])

# ---- memory: the adapters alone have gradients and optimizer state
p, full = train("full", ["finetune.lora.rank=0"])
check("the same run as full fine-tuning: exit 0", p.returncode == 0, p.stderr[-1500:])
mem = {n: json.load(open(path(n + "/summary.json")))["memory_mb_per_rank"][0] for n in ("lora", "full")}
MiB = 1 << 20
L, C, F, R = 4, 128, 512, 8
adapters = L * R * ((C + 3 * C) + (C + C) + (C + F) + (F + C))  # A (r, in) + B (out, r) of each target
base = L * (2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + F * C + F + C * F + C) + 256 * C + 128 * C + 2 * C
lo, fu = mem["lora"], mem["full"]
check("LoRA: gradients = the adapters' (4 bytes each), optimizer = 2 x that (Adam's m and v)",
      abs(lo["gradients"] * MiB - 4 * adapters) <= 4096 and abs(lo["optimizer"] * MiB - 8 * adapters) <= 8192,
      f"{lo} for {adapters} adapter elements", show=True)
check("full fine-tuning: gradients and optimizer of the whole model",
      abs(fu["gradients"] * MiB - 4 * base) <= 4096 and abs(fu["optimizer"] * MiB - 8 * base) <= 8192,
      f"{fu} for {base} parameters", show=True)
saved = (fu["gradients"] + fu["optimizer"]) - (lo["gradients"] + lo["optimizer"])
# what LoRA adds: the adapters themselves and their activations x A^T (rank 8 is large next to
# this tiny model's width; on gpt2-124m both are well under 1%)
added = (lo["parameters"] - fu["parameters"]) + (lo["activations"] - fu["activations"])
check("LoRA's allocator peak is below full fine-tuning's by the base's gradients + optimizer state "
      "(less the adapters' own state and activations)", lo["peak"] <= fu["peak"] - saved + added + 0.05,
      f"peak {lo['peak']:.2f} MiB vs {fu['peak']:.2f} MiB: {fu['peak'] - lo['peak']:.2f} MiB less; gradients + "
      f"optimizer {saved:.2f} MiB less, adapters and their activations {added:.2f} MiB more", show=True)

# an adapter on qkv alone (peft's default target for GPT-2): the other linears' inputs are read
# only by frozen weights' gradients, so they are kept one layer at a time; with that, the peak is
# below full fine-tuning's by the whole of the base's gradients + optimizer state
p, _ = train("lora-qkv", ["finetune.lora.target_modules=[qkv]"])
check("LoRA on qkv alone: exit 0", p.returncode == 0, p.stderr[-1500:])
if p.returncode == 0:
    lq = json.load(open(path("lora-qkv/summary.json")))["memory_mb_per_rank"][0]
    base_state = fu["gradients"] + fu["optimizer"]
    check("LoRA on qkv: activations below the four-target run's (ln2 and the MLP activation one "
          "layer at a time)", lq["activations"] < lo["activations"], f"{lq['activations']:.2f} vs "
          f"{lo['activations']:.2f} MiB", show=True)
    check("LoRA on qkv: the peak is below full fine-tuning's by at least the base's gradients + "
          "optimizer state", fu["peak"] - lq["peak"] >= base_state,
          f"peak {lq['peak']:.2f} vs {fu['peak']:.2f} MiB: {fu['peak'] - lq['peak']:.2f} MiB less; the base's "
          f"gradients + optimizer {base_state:.2f} MiB", show=True)

# ---- finetune.load naming a Hugging Face folder: imported into RUN_DIR/hf-base, then the same run
p, from_hf = train("from-hf", [f"finetune.load={path('base-hf')}"])
check("finetune.load = a Hugging Face folder: the same losses as from the trident checkpoint",
      p.returncode == 0 and from_hf == lora and "imported" in p.stdout, f"{from_hf} vs {lora}\n{p.stderr[-800:]}")
p, from_hf4 = train("from-hf-d2t2", [f"finetune.load={path('base-hf')}", "parallel.sequence_parallel=true",
                                     "training.micro_batch_size=2"], 4, 2, 1)
rel = max((abs(a - b) / b for a, b in zip(from_hf4, lora)), default=1.0) if from_hf4 else 1.0
check("... and in D2xT2 with SP (the lead rank imports, every rank reads its shards)",
      p.returncode == 0 and rel <= 1e-5, f"relative {rel:.1e}\n{p.stderr[-800:]}")
bad_hf = path("bad-hf")
shutil.copytree(path("base-hf"), bad_hf)
cfgj = json.load(open(os.path.join(bad_hf, "config.json")))
cfgj["n_embd"] = 64  # not the run's model
json.dump(cfgj, open(os.path.join(bad_hf, "config.json"), "w"))
p, _ = train("bad-hf", [f"finetune.load={bad_hf}"])
check("a Hugging Face folder of another model: exit non-zero naming finetune.load, no crash",
      p.returncode not in (0, -11, -6) and "finetune.load" in p.stderr, p.stderr[-800:], show=True)
cfg_only = path("cfg-only-hf")
os.makedirs(cfg_only, exist_ok=True)
shutil.copy(os.path.join(path("base-hf"), "config.json"), cfg_only)
p, _ = train("cfg-only-hf", [f"finetune.load={cfg_only}"])
check("a Hugging Face folder without weights: exit non-zero naming finetune.load and model.safetensors",
      p.returncode not in (0, -11, -6) and "finetune.load" in p.stderr and "model.safetensors" in p.stderr,
      p.stderr[-800:])
# on 4 ranks the lead imports it; its reason is printed, then the others stop: each saying the
# lead failed, or, when the launcher stops them first (a loaded machine), the launcher saying so
p, _ = train("bad-hf-4", [f"finetune.load={bad_hf}", "training.micro_batch_size=1"], 4)
check("... on 4 ranks: exit non-zero, the lead's reason (the shapes) in the output, the others stopped",
      p.returncode not in (0, -11, -6) and "a GPT-2 of this config.json has" in p.stderr and
      ("failed on another rank" in p.stderr or "stopping the other ranks" in p.stderr), p.stderr[-1200:],
      show=True)

# ---- resume: the adapters' checkpoint
p, half = train("half", ["training.train_iters=2", f"checkpoint.save={path('half-ckpt')}"])
p2, rest = train("rest", [f"checkpoint.load={path('half-ckpt')}"])
check("a LoRA run stopped at iteration 2 resumes with the same losses (iterations 3, 4)",
      p.returncode == 0 and p2.returncode == 0 and rest == lora[2:], f"{half} + {rest} vs {lora}\n{p2.stderr[-800:]}")
p, _ = train("rest-alpha", [f"checkpoint.load={path('half-ckpt')}", "finetune.lora.alpha=32"])
check("... resuming it with another finetune.lora.alpha (32, trained with 16): refused naming both",
      p.returncode in (1, 2) and "finetune.lora.alpha 32 (the checkpoint's: 16)" in p.stderr,
      p.stderr[-800:])

# ---- layouts (the layout matrix checks them all; here the SFT data under D2xT2 with SP)
p, d2t2 = train("d2t2", ["parallel.sequence_parallel=true", "training.micro_batch_size=2"], 4, 2, 1)
rel = max((abs(a - b) / b for a, b in zip(d2t2, lora)), default=1.0)
check("SFT data + LoRA in D2xT2 with SP: the single process's losses", p.returncode == 0 and rel <= 1e-5,
      f"relative {rel:.1e}\n{p.stderr[-800:]}", show=True)

# ---- 16-bit precisions (the CPU's emulated bf16 / fp16 storage): the adapters train as in fp32
p, b16 = train("lora-bf16", ["training.precision=bf16"])
rel = max((abs(a - b) / b for a, b in zip(b16, lora)), default=1.0) if b16 else 1.0
check("LoRA in bf16: the fp32 run's losses within 1e-3", p.returncode == 0 and len(b16) == 4 and rel <= 1e-3,
      f"relative {rel:.1e}\n{p.stderr[-800:]}", show=True)
p, b16l = train("lora-bf16-d2t2", ["training.precision=bf16", "parallel.sequence_parallel=true",
                                   "training.micro_batch_size=2"], 4, 2, 1)
rel = max((abs(a - b) / b for a, b in zip(b16l, b16)), default=1.0) if b16l and b16 else 1.0
# (bf16 rounds each op's output: split over TP the ops round other partial sums, so layouts
# agree to about bf16's precision, 2^-8, not bit for bit)
check("LoRA in bf16, D2xT2 with SP: the single process's bf16 losses within 2e-3",
      p.returncode == 0 and rel <= 2e-3, f"relative {rel:.1e}\n{p.stderr[-800:]}", show=True)
p, f16 = train("lora-fp16", ["training.precision=fp16"])
check("LoRA in fp16 (dynamic loss scaling): exit 0, finite losses",
      p.returncode == 0 and len(f16) == 4 and all(math.isfinite(x) for x in f16), p.stderr[-800:])

# ---- config errors name the key
for what, extra, key in [
        ("an unknown target module", ["finetune.lora.target_modules=[qkv,fc3]"], "finetune.lora.target_modules"),
        ("dropout 1", ["finetune.lora.dropout=1.0"], "finetune.lora.dropout"),
        ("ZeRO-3", ["parallel.zero_stage=3"], "parallel.zero_stage"),
        ("a missing base", [f"finetune.load={path('nowhere')}"], "finetune.load"),
        ("a release of the base as checkpoint.load (no adapters)", [f"checkpoint.load={path('release')}"],
         "layers.0.qkv.lora_A")]:
    p = tt.run(tt.train_cmd(trident, ft, path("bad"), sets=[*sets, *extra]), timeout=60)
    check(f"refused: {what} (exit 2 or 1, naming {key})", p.returncode in (1, 2) and key in p.stderr,
          p.stderr[-600:])
rc, so, se = tt.outputs([trident, "generate", path("lora-ckpt"), "--prompt-ids", "1,2,3", "--max-new-tokens", "2"])
check("generate from a LoRA checkpoint without --config: exit 2, saying it holds adapters, to give "
      "the run's config and how to merge them", rc == 2 and "adapters alone" in se and "--config" in se
      and "--merge-lora" in se, se)
# ---- --merge-lora with a Hugging Face folder as the base: the same merged weights as with the checkpoint
merged = {}
for name, base in (("ckpt", path("base")), ("hf", path("base-hf"))):
    run_cfg = path(f"merge-{name}.yaml")
    text = open(path("lora/config.yaml")).read()
    open(run_cfg, "w").write(text.replace(f'"{path("base")}"', f'"{base}"'))
    out = path(f"merged-{name}")
    p = tt.run([trident, "convert", "--to", "hf", "--config", run_cfg, "--input", path("lora-ckpt"),
                "--output", out, "--merge-lora"], timeout=60)
    merged[name] = open(os.path.join(out, "model.safetensors"), "rb").read() if p.returncode == 0 else p.stderr
check("--merge-lora with finetune.load = a Hugging Face folder: the same merged model.safetensors",
      isinstance(merged["hf"], bytes) and merged["hf"] == merged["ckpt"], str(merged["hf"])[-600:])
tt.finish("lora-train: all checks passed")
