#!/usr/bin/python3
"""The norm epsilon through `trident convert` (torch-free; both builds). trident keeps it as a
float32; Hugging Face's config.json keeps a double (rms_norm_eps, layer_norm_epsilon):
  - a tiny Llama of epsilon 1e-44 (a subnormal float32) exports, imports back and exports again
    with the same rms_norm_eps and the same weights, bit for bit, from the checkpoint's
    manifest and from the run's config alike;
  - an epsilon that float32 rounds to 0 (1e-50) is refused at the source: `trident train` and
    `convert --to hf --config` name model.layernorm_epsilon; a manifest holding one is refused
    naming its line; nothing is written.
usage: test_eps_roundtrip.py TRIDENT WORKDIR"""
import json
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402
from trident_test import check  # noqa: E402

trident, work = sys.argv[1], tt.fresh_dir(sys.argv[2])


def path(name):
    return os.path.join(work, name)


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


corpus = tt.make_corpus(trident, work, 3, ["save", "load", "tensor", "shard"], 60, 3, 30)


def config(name, eps):
    model = dict(num_layers=1, hidden_size=16, num_attention_heads=4, num_query_groups=2, seq_length=8,
                 max_position_embeddings=8, vocab_size=200, make_vocab_size_divisible_by=16,
                 normalization="RMSNorm", layernorm_epsilon=eps, position_embedding_type="rope",
                 swiglu=True, ffn_hidden_size=24, untie_embeddings_and_output_weights=True, add_bias_linear=False)
    return tt.write_config(path(name + ".yaml"), model=model,
                           training=dict(micro_batch_size=2, global_batch_size=2, train_iters=1, lr=1e-3),
                           data=dict(data_path=corpus, split="100,0,0"), checkpoint=dict(save=path(name)))


def convert(*args):
    return tt.run([trident, "convert", *args], timeout=60)


def hf_eps(folder):
    return json.load(open(os.path.join(folder, "config.json"))).get("rms_norm_eps")


cfg = config("ck", 1e-44)
p = tt.run(tt.train_cmd(trident, cfg, path("run"), flags=["--quiet"]), timeout=120)
check("a Llama of layernorm_epsilon 1e-44 (subnormal in float32): trained and saved", p.returncode == 0,
      p.stderr[-600:])
for how, extra in (("from the manifest", []), ("with --config", ["--config", cfg])):
    tag = "cfg" if extra else "mf"
    p1 = convert("--to", "hf", *extra, "--input", path("ck"), "--output", path(f"hf1-{tag}"))
    p2 = convert("--from", "hf", "--input", path(f"hf1-{tag}"), "--output", path(f"ck2-{tag}"))
    p3 = convert("--to", "hf", "--input", path(f"ck2-{tag}"), "--output", path(f"hf2-{tag}"))
    ok = p1.returncode == p2.returncode == p3.returncode == 0
    e1, e2 = (hf_eps(path(f"hf{i}-{tag}")) if ok else None for i in (1, 2))
    same = ok and (open(path(f"hf1-{tag}/model.safetensors"), "rb").read() ==
                   open(path(f"hf2-{tag}/model.safetensors"), "rb").read())
    check(f"export ({how}), import, export: rms_norm_eps {e1} both times, float32 1e-44's, weights bit for bit",
          ok and e1 == e2 and f32(e1) == f32(1e-44) and f32(e1) > 0 and same,
          f"{e1} / {e2}; {p1.stderr[-300:]}{p2.stderr[-300:]}{p3.stderr[-300:]}", show=True)

# ---- an epsilon float32 makes 0: refused where it enters
bad = config("bad", 1e-50)
p = tt.run(tt.train_cmd(trident, bad, path("bad-run")), timeout=60)
check("train with layernorm_epsilon 1e-50: exit 2 naming model.layernorm_epsilon",
      p.returncode == 2 and "model.layernorm_epsilon is 1e-50" in p.stderr, p.stderr[-400:], show=True)
p = convert("--to", "hf", "--config", bad, "--input", path("ck"), "--output", path("bad-hf"))
check("convert --to hf --config with layernorm_epsilon 1e-50: refused naming the key, nothing written",
      p.returncode not in (0, -6, -11) and "model.layernorm_epsilon" in p.stderr and not os.path.exists(path("bad-hf")),
      p.stderr[-400:])
manifest = path("ck/iter_0000001/manifest.txt")
text = open(manifest).read()
lines = [line for line in text.splitlines() if line.startswith("family ")]
if check("the manifest has a family line", len(lines) == 1, text[:400]):
    eps = lines[0].split(" eps ")[1]
    tt.write(manifest, text.replace(lines[0], lines[0].replace(" eps " + eps, " eps 1e-46")))
    p = convert("--to", "hf", "--input", path("ck"), "--output", path("bad-mf"))
    check("a manifest of eps 1e-46 (0 in float32): refused naming its family line, nothing written",
          p.returncode not in (0, -6, -11) and "manifest.txt:" in p.stderr and "float32" in p.stderr
          and not os.path.exists(path("bad-mf")), p.stderr[-400:], show=True)
    tt.write(manifest, text)
tt.finish("eps-roundtrip: all checks passed")
