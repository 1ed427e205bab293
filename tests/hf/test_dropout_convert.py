#!/usr/bin/python3
"""Dropout rates travel with checkpoints (torch-free; both builds). The manifest's dropout line
("dropout hidden_dropout P attention_dropout Q", written when either is > 0) records
model.hidden_dropout and model.attention_dropout:
  - GPT-2 in (hand-written folders): resid_pdrop / embd_pdrop / attn_pdrop 0.1 / 0.1 / 0.2 are
    recorded as 0.1 / 0.2 and exported back as the three keys; absent keys are transformers'
    defaults (0.1 each); resid_pdrop 0.1 with embd_pdrop 0.05 records 0.1 with a warning naming
    both; all 0: no dropout line (the format before it); a key that is no probability is
    refused naming it, nothing written;
  - a run from a checkpoint recording other rates (checkpoint.load of the import, finetune.load
    of the Hugging Face folder itself) prints one line naming both and trains with the config's;
    the same rates: no line;
  - a Llama trained with 0.3 / 0.2: its manifest says so, --to hf writes attention_dropout 0.2
    and warns that a Llama has no hidden dropout key; HF -> trident -> HF keeps an edited 0.15;
  - a Bloom trained with 0.1 / 0.05: hidden_dropout / attention_dropout both ways (HF -> trident
    -> HF the same config.json keys), with the warning that transformers' Bloom has no dropout
    after the embeddings;
  - Megatron-LM both ways: --to megatron writes args.hidden_dropout / attention_dropout, --from
    megatron records them (where torch imports: torch.load reads them, and args of 1.5 or a
    string, torch.save'd, are refused naming the key);
  - a damaged dropout line is refused naming the manifest's line; a manifest without it (written
    before it) exports 0.
usage: test_dropout_convert.py TRIDENT WORKDIR"""
import json
import os
import shutil
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import hf_files as hff  # noqa: E402
import trident_test as tt  # noqa: E402
from trident_test import check  # noqa: E402

trident, work = sys.argv[1], tt.fresh_dir(sys.argv[2])
s = hff.Session(trident, work)


def path(name):
    return os.path.join(work, name)


def dropout_line(ck):
    mf = os.path.join(ck, "release" if os.path.isdir(os.path.join(ck, "release")) else "", "manifest.txt")
    if not os.path.exists(mf):
        it = open(os.path.join(ck, "latest_checkpointed_iteration.txt")).read().strip()
        mf = os.path.join(ck, f"iter_{int(it):07d}", "manifest.txt")
    return [x for x in open(mf).read().splitlines() if x.startswith("dropout ")]


def rates(folder):
    c = json.load(open(os.path.join(folder, "config.json")))
    return {k: v for k, v in c.items() if "drop" in k}


# ---- GPT-2 in and out
g = s.hf_folder("gpt2", hff.gpt2_tensors(), dict(hff.CONFIG, resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.2))
rc, so, se = s.convert("--from", "hf", "--input", g, "--output", path("ck-gpt2"))
check("GPT-2 of resid/embd/attn_pdrop 0.1/0.1/0.2: imported, the manifest's dropout line 0.1 / 0.2",
      rc == 0 and dropout_line(path("ck-gpt2")) == ["dropout hidden_dropout 0.1 attention_dropout 0.2"],
      f"{rc} {se}", show=True)
check("... the printed model section carries them (hidden_dropout: 0.1, attention_dropout: 0.2)",
      "  hidden_dropout: 0.1\n  attention_dropout: 0.2\n" in so, so)
rc, so, se = s.convert("--to", "hf", "--input", path("ck-gpt2"), "--output", path("gpt2-hf"))
check("... exported: resid_pdrop 0.1, embd_pdrop 0.1, attn_pdrop 0.2",
      rc == 0 and rates(path("gpt2-hf")) == {"resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.2}, se)
d = s.hf_folder("gpt2-default", hff.gpt2_tensors())
rc, so, se = s.convert("--from", "hf", "--input", d, "--output", path("ck-gpt2-default"))
check("GPT-2 without the keys: transformers' defaults, 0.1 / 0.1",
      rc == 0 and dropout_line(path("ck-gpt2-default")) == ["dropout hidden_dropout 0.1 attention_dropout 0.1"], se)
d = s.hf_folder("gpt2-split", hff.gpt2_tensors(), dict(hff.CONFIG, resid_pdrop=0.1, embd_pdrop=0.05, attn_pdrop=0))
rc, so, se = s.convert("--from", "hf", "--input", d, "--output", path("ck-gpt2-split"))
check("resid_pdrop 0.1, embd_pdrop 0.05: resid_pdrop's 0.1 recorded, a warning naming both",
      rc == 0 and dropout_line(path("ck-gpt2-split")) == ["dropout hidden_dropout 0.1 attention_dropout 0"] and
      "resid_pdrop 0.1 and embd_pdrop 0.05 differ" in se, se, show=True)
d = s.hf_folder("gpt2-zero", hff.gpt2_tensors(), dict(hff.CONFIG, resid_pdrop=0, embd_pdrop=0.0, attn_pdrop=0))
rc, so, se = s.convert("--from", "hf", "--input", d, "--output", path("ck-gpt2-zero"))
check("all 0: no dropout line", rc == 0 and dropout_line(path("ck-gpt2-zero")) == [] and not se, se)
check("... and no dropout keys in the printed model section", "_dropout:" not in so, so)
for key, value in (("attn_pdrop", 1.0), ("resid_pdrop", -0.1), ("embd_pdrop", "0.1"), ("attn_pdrop", None)):
    d = s.hf_folder("gpt2-bad", hff.gpt2_tensors(), dict(hff.CONFIG, **{key: value}))
    s.refused(f"GPT-2's {key} {value!r}", ["--from", "hf", "--input", d, "--output", path("ck-bad")],
              path("ck-bad"), "must be a dropout probability, a number from 0 to below 1", [key, "config.json"])

# ---- the line at a run's start: the config's rates win, the checkpoint's are named
shard = path("tokens.bin")
with open(shard, "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, 400, *([0] * 253)) + struct.pack("<400H", *(i % hff.V for i in range(400))))
gpt2_model = dict(num_layers=hff.L, hidden_size=hff.C, num_attention_heads=hff.NH, vocab_size=hff.V,
                  max_position_embeddings=hff.P, seq_length=hff.P)


def start(name, hidden, attention, **ckpt):
    model = dict(gpt2_model, hidden_dropout=hidden, attention_dropout=attention)
    cfg = tt.write_config(path(name + ".yaml"), model=model,
                          training=dict(micro_batch_size=1, global_batch_size=1, train_iters=1, lr=1e-3),
                          data=dict(data_path=shard), **ckpt)
    return tt.outputs(tt.train_cmd(trident, cfg, path(name + "-run"), flags=["--quiet"]), timeout=120)


rc, so, se = start("from-release", 0, 0, checkpoint=dict(load=path("ck-gpt2")))
note = [x for x in se.splitlines() if "was trained with" in x]
check("checkpoint.load of the import, the config's 0 / 0: one line naming both, exit 0",
      rc == 0 and len(note) == 1 and f"checkpoint {path('ck-gpt2')}/release was trained with hidden_dropout 0.1 and "
      "attention_dropout 0.2" in note[0] and "this run uses model.hidden_dropout 0 and model.attention_dropout 0"
      in note[0], se[-800:], show=True)
rc, so, se = start("from-release-same", 0.1, 0.2, checkpoint=dict(load=path("ck-gpt2")))
check("... with the config's 0.1 / 0.2: no line", rc == 0 and "was trained with" not in se, se[-600:])
rc, so, se = start("from-hf", 0.1, 0, finetune=dict(load=g))
note = [x for x in se.splitlines() if "was trained with" in x]
check("finetune.load of the Hugging Face folder, the config's 0.1 / 0: the line names the folder",
      rc == 0 and len(note) == 1 and f"finetune.load {g} (a Hugging Face folder: its config.json's dropout keys) "
      "was trained with hidden_dropout 0.1 and attention_dropout 0.2" in note[0] and
      "this run uses model.hidden_dropout 0.1 and model.attention_dropout 0 " in note[0], se[-800:], show=True)

# ---- trained models: Llama and Bloom
corpus = tt.make_corpus(trident, work, 3, ["save", "load", "tensor", "shard"], 60, 3, 30)
llama = dict(num_layers=1, hidden_size=16, num_attention_heads=4, num_query_groups=2, seq_length=8,
             max_position_embeddings=8, vocab_size=200, make_vocab_size_divisible_by=16, normalization="RMSNorm",
             position_embedding_type="rope", swiglu=True, ffn_hidden_size=24,
             untie_embeddings_and_output_weights=True, add_bias_linear=False)
bloom = dict(num_layers=1, hidden_size=12, num_attention_heads=3, seq_length=8, max_position_embeddings=8,
             vocab_size=200, make_vocab_size_divisible_by=16, position_embedding_type="alibi", embedding_layernorm=True)


def train(name, model, hidden, attention):
    cfg = tt.write_config(path(name + ".yaml"), model=dict(model, hidden_dropout=hidden, attention_dropout=attention),
                          training=dict(micro_batch_size=2, global_batch_size=2, train_iters=1, lr=1e-3),
                          data=dict(data_path=corpus, split="100,0,0"), checkpoint=dict(save=path(name)))
    p = tt.run(tt.train_cmd(trident, cfg, path(name + "-run"), flags=["--quiet"]), timeout=120)
    check(f"{name}: trained with dropout {hidden} / {attention} and saved", p.returncode == 0, p.stderr[-600:])


def edited(src, name, **keys):
    """a copy of HF folder src with config.json's keys set"""
    dst = path(name)
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    c = json.load(open(os.path.join(dst, "config.json")))
    c.update(keys)
    tt.write(os.path.join(dst, "config.json"), json.dumps(c))
    return dst


train("llama", llama, 0.3, 0.2)
check("the Llama run's manifest records 0.3 / 0.2",
      dropout_line(path("llama")) == ["dropout hidden_dropout 0.3 attention_dropout 0.2"], dropout_line(path("llama")))
rc, so, se = s.convert("--to", "hf", "--input", path("llama"), "--output", path("llama-hf"))
check("Llama --to hf: attention_dropout 0.2; a warning that a Llama has no hidden dropout key",
      rc == 0 and rates(path("llama-hf")) == {"attention_dropout": 0.2} and
      "transformers' Llama has no hidden dropout (no config.json key for model.hidden_dropout 0.3)" in se, se, show=True)
e = edited(path("llama-hf"), "llama-hf-edit", attention_dropout=0.15)
rc, so, se = s.convert("--from", "hf", "--input", e, "--output", path("ck-llama-hf"))
rc2, so2, se2 = s.convert("--to", "hf", "--input", path("ck-llama-hf"), "--output", path("llama-hf2"))
check("Llama HF -> trident -> HF: attention_dropout 0.15 kept (recorded 0 / 0.15)",
      rc == rc2 == 0 and dropout_line(path("ck-llama-hf")) == ["dropout hidden_dropout 0 attention_dropout 0.15"] and
      rates(path("llama-hf2")) == {"attention_dropout": 0.15} and not se2, se + se2)

train("bloom", bloom, 0.1, 0.05)
rc, so, se = s.convert("--to", "hf", "--input", path("bloom"), "--output", path("bloom-hf"))
check("Bloom --to hf: hidden_dropout 0.1, attention_dropout 0.05, the sites' warning",
      rc == 0 and rates(path("bloom-hf")) == {"hidden_dropout": 0.1, "attention_dropout": 0.05} and
      "not after the embeddings" in se, se, show=True)
e = edited(path("bloom-hf"), "bloom-hf-edit", hidden_dropout=0.25, attention_dropout=0.125)
rc, so, se = s.convert("--from", "hf", "--input", e, "--output", path("ck-bloom-hf"))
rc2, so2, se2 = s.convert("--to", "hf", "--input", path("ck-bloom-hf"), "--output", path("bloom-hf2"))
check("Bloom HF -> trident -> HF: hidden_dropout 0.25, attention_dropout 0.125 kept",
      rc == rc2 == 0 and dropout_line(path("ck-bloom-hf")) == ["dropout hidden_dropout 0.25 attention_dropout 0.125"]
      and rates(path("bloom-hf2")) == {"hidden_dropout": 0.25, "attention_dropout": 0.125}, se + se2)

# ---- Megatron-LM both ways
rc, so, se = s.convert("--to", "megatron", "--input", path("llama"), "--output", path("llama-mlm"))
rc2, so2, se2 = s.convert("--from", "megatron", "--input", path("llama-mlm"), "--output", path("ck-llama-mlm"))
check("Llama --to megatron, --from megatron: the manifest records 0.3 / 0.2 again (not Megatron's defaults 0.1)",
      rc == rc2 == 0 and dropout_line(path("ck-llama-mlm")) == ["dropout hidden_dropout 0.3 attention_dropout 0.2"],
      se + se2)
try:
    import torch  # Debian's python3-torch: the args as Megatron-LM reads them
except ImportError:
    torch = None
if torch is not None and rc == 0:
    f = os.path.join(path("llama-mlm"), "release", "mp_rank_00", "model_optim_rng.pt")
    args = torch.load(f, map_location="cpu", weights_only=False)["args"]
    check("... torch.load of the rank file: args.hidden_dropout 0.3, args.attention_dropout 0.2",
          abs(getattr(args, "hidden_dropout", -1) - 0.3) < 1e-7 and abs(getattr(args, "attention_dropout", -1) - 0.2) < 1e-7, str(args))
    for key, value in (("hidden_dropout", 1.5), ("attention_dropout", "0.1")):  # refused naming the key
        bad = path("llama-mlm-bad")
        shutil.rmtree(bad, ignore_errors=True)
        shutil.copytree(path("llama-mlm"), bad)
        state = torch.load(f, map_location="cpu", weights_only=False)
        setattr(state["args"], key, value)
        torch.save(state, os.path.join(bad, "release", "mp_rank_00", "model_optim_rng.pt"))
        s.refused(f"Megatron args.{key} {value!r}", ["--from", "megatron", "--input", bad, "--output",
                  path("ck-mlm-bad")], path("ck-mlm-bad"), "not a dropout probability", [f"args.{key}"])

# ---- the manifest's line: damaged ones refused, an old manifest (none) exports 0
line = "dropout hidden_dropout 0.1 attention_dropout 0.2"
s.manifest_refused("GPT-2", path("ck-gpt2"), [
    ("hidden_dropout nan", line, "dropout hidden_dropout nan attention_dropout 0.2"),
    ("hidden_dropout -0.1", line, "dropout hidden_dropout -0.1 attention_dropout 0.2"),
    ("attention_dropout 1", line, "dropout hidden_dropout 0.1 attention_dropout 1"),
    ("attention_dropout x", line, "dropout hidden_dropout 0.1 attention_dropout x"),
    ("no attention_dropout", line, "dropout hidden_dropout 0.1"),
    ("a word after it", line, line + " more")], "expected the dropout line")
old = path("ck-gpt2-old")
shutil.rmtree(old, ignore_errors=True)
shutil.copytree(path("ck-gpt2"), old)
mf = os.path.join(old, "release", "manifest.txt")
tt.write(mf, open(mf).read().replace(line + "\n", ""))
rc, so, se = s.convert("--to", "hf", "--input", old, "--output", path("gpt2-old-out"))
check("a manifest without the line (written before it): exported with 0s",
      rc == 0 and rates(path("gpt2-old-out")) == {"resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}, se)
tt.finish()
